// cli/cmd_worker.c — `ridge worker`: one device's share of a multi-process
// run. It joins a coordinator (`ridge run --layout ... --listen`), proves it
// knows the shared secret, loads the stage instances it is assigned, and runs
// steps until the coordinator shuts it down or is lost (runtime/cluster.h).
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/output.h"
#include "ops/convert.h"
#include "runtime/cluster.h"

#define CMD "worker"

static const char usage[] =
    "usage: ridge worker --coordinator HOST:PORT [--device D] [--name N] [--secret-file F]\n"
    "                    [--threads N] [--isa I] [--batch-invariant] [--provider P]\n"
    "                    [--connect-timeout S]\n"
    "\n"
    "Runs one device's share of a model for a coordinator (`ridge run --layout L --listen\n"
    "HOST:PORT --secret-file F`): joins it over TCP, proves it knows the shared secret\n"
    "(the secret itself never travels), loads the stage instances it is assigned (embed,\n"
    "attention with its KV pool, FFN, an expert subset, lm_head), tells the coordinator its\n"
    "libfabric address, then runs every step it is sent: hidden states come from the\n"
    "worker of the previous stage and go to the next over libfabric, logits go to the\n"
    "coordinator. Stops when the coordinator shuts it down (exit 0) or is lost (exit 1,\n"
    "naming it).\n"
    "\n"
    "  --coordinator H:P  where the coordinator listens (required)\n"
    "  --device D         the device to run on: cpu:0 (default), opencl:0, ... (`ridge devices`)\n"
    "  --name N           the worker's name in the layout (the coordinator assigns stages by\n"
    "                     name: w0, w1, ... unless the layout names them); default HOST-PID\n"
    "  --secret-file F    the shared secret (leading and trailing whitespace ignored); default:\n"
    "                     the RIDGE_SECRET environment variable\n"
    "  --threads N        CPU threads (default: one per core)\n"
    "  --isa I            cap the CPU kernels: scalar, avx2, avx512, avx512-bf16, amx\n"
    "  --batch-invariant  CPU kernels whose results do not depend on the batch (as `ridge run\n"
    "                     --batch-invariant`; give it to every worker of the run)\n"
    "  --provider P       libfabric provider (default: $FI_PROVIDER, else shm, then tcp;ofi_rxm)\n"
    "  --connect-timeout S  seconds to keep trying to reach the coordinator (default 30)\n"
    "\n"
    "example:\n"
    "  echo s3cret > /tmp/secret\n"
    "  ridge run --layout attention-ffn --listen 127.0.0.1:7070 --secret-file /tmp/secret &\n"
    "  ridge worker --coordinator 127.0.0.1:7070 --name w0 --secret-file /tmp/secret &\n"
    "  ridge worker --coordinator 127.0.0.1:7070 --name w1 --secret-file /tmp/secret\n";

static volatile int g_stop;
static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

int rg_cmd_worker(int argc, char **argv, const rg_cli_common_t *common) {
  static const struct option longs[] = {{"coordinator", required_argument, 0, 'c'},
                                        {"device", required_argument, 0, 'd'},
                                        {"name", required_argument, 0, 'n'},
                                        {"secret-file", required_argument, 0, 'S'},
                                        {"threads", required_argument, 0, 'T'},
                                        {"isa", required_argument, 0, 'A'},
                                        {"batch-invariant", no_argument, 0, 'B'},
                                        {"provider", required_argument, 0, 'p'},
                                        {"connect-timeout", required_argument, 0, 't'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  rg_worker_options_t o = {0};
  o.quiet = common->quiet;
  const char *secret_file = NULL;
  rg_status_t st = NULL;
  rg_cli_getopt_reset();
  int c;
  while ((c = getopt_long(argc, argv, ":c:d:n:S:T:A:Bp:t:h", longs, NULL)) != -1) {
    char *end;
    switch (c) {
      case 'c':
        o.coordinator = optarg;
        break;
      case 'd':
        o.device = optarg;
        break;
      case 'n':
        o.name = optarg;
        break;
      case 'S':
        secret_file = optarg;
        break;
      case 'T': {
        errno = 0;
        long v = strtol(optarg, &end, 10);
        if (end == optarg || *end || errno || v < 1 || v > 1024)
          return rg_cli_fail(
              CMD, rg_status_make(RG_INVALID_ARGUMENT, "--threads: expected 1 to 1024, got '%s'",
                                  optarg));
        o.threads = (int)v;
        break;
      }
      case 'A': {
        rg_cpu_isa_t isa;
        if ((st = rg_cpu_isa_parse("--isa", optarg, &isa))) return rg_cli_fail(CMD, st);
        o.isa = (int)isa;
        break;
      }
      case 'B':
        o.batch_invariant = 1;
        break;
      case 'p':
        o.provider = optarg;
        break;
      case 't': {
        errno = 0;
        double v = strtod(optarg, &end);
        if (end == optarg || *end || errno || !(v > 0 && v <= 3600))
          return rg_cli_fail(
              CMD, rg_status_make(RG_INVALID_ARGUMENT,
                                  "--connect-timeout: expected seconds from 0 to 3600, got '%s'",
                                  optarg));
        o.connect_timeout_s = v;
        break;
      }
      case 'h':
        fputs(usage, stdout);
        return 0;
      default:
        return rg_cli_fail(CMD, rg_cli_getopt_error(c, argv, longs));
    }
  }
  if (optind < argc)
    return rg_cli_fail(
        CMD, rg_status_make(RG_INVALID_ARGUMENT,
                            "unexpected argument '%s' (see ridge worker --help)", argv[optind]));
  if (!o.coordinator)
    return rg_cli_fail(
        CMD, rg_status_make(RG_INVALID_ARGUMENT,
                            "--coordinator HOST:PORT is required (see ridge worker --help)"));
  rg_control_secret_t secret;
  if (secret_file) {
    st = rg_control_secret_load(secret_file, &secret);
  } else {
    const char *env = getenv("RIDGE_SECRET");
    if (!env || !*env)
      return rg_cli_fail(CMD, rg_status_make(RG_INVALID_ARGUMENT,
                                             "no shared secret: give --secret-file F or set "
                                             "RIDGE_SECRET"));
    st = rg_control_secret_from_text(env, strlen(env), &secret);
  }
  if (st) return rg_cli_fail(CMD, st);
  o.secret = &secret;
  // Ctrl-C or SIGTERM (systemd, Kubernetes) leaves between steps: the
  // endpoint closes and the coordinator sees the worker go.
  // A worker its coordinator started ignores SIGINT (the coordinator stops
  // the run on Ctrl-C and shuts it down): that stays so.
  struct sigaction sa = {0}, old;
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, NULL, &old);
  if (old.sa_handler != SIG_IGN) sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  o.stop = &g_stop;
  st = rg_worker_run(&o);
  memset(&secret, 0, sizeof secret);
  return rg_cli_fail(CMD, st);
}
