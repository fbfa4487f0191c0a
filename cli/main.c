// cli/main.c — the `ridge` command: global options, command dispatch, help.
//
// Global options come before the command and are parsed here by hand, up to
// the first word that is not an option; argv from the command name onward is
// handed to the command, which parses its own options with getopt_long.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/yaml.h"
#include "cli/cli.h"

#ifndef RIDGE_VERSION
#define RIDGE_VERSION "unknown"
#endif
#ifndef RIDGE_SDK_SUMMARY
#define RIDGE_SDK_SUMMARY " (not recorded)"
#endif
#ifndef RIDGE_SOURCE_DIR
#define RIDGE_SOURCE_DIR "."
#endif

typedef int (*rg_cmd_fn_t)(int argc, char **argv, const rg_cli_common_t *common);

typedef struct {
  const char *name;
  rg_cmd_fn_t fn;
  int needs_config;  // reads configs/, so the config directory must exist
  const char *summary;
  const char *example;
} rg_command_t;

static int cmd_help(int argc, char **argv, const rg_cli_common_t *common);

static const rg_command_t commands[] = {
    {"model", rg_cmd_model, 1,
     "a model's shape, parameters, weight and KV bytes, and per-stage roofline costs",
     "ridge model llama-3.1-70b --batch 64 --context 32K"},
    {"catalog", rg_cmd_catalog, 1,
     "device classes: peak FLOP/s, bandwidth, ridge point, capacity, power, price",
     "ridge catalog h100-sxm"},
    {"plan", rg_cmd_plan, 1,
     "place a model's stages on a fleet; predict tokens/s, TTFT/TBT, tokens/$, tokens/W",
     "ridge plan --model llama-3.1-70b --fleet mixed --objective tokens-per-dollar"},
    {"simulate", rg_cmd_simulate, 1,
     "play a workload through a plan event by event with the runtime's scheduler: goodput, "
     "latency, KV tiers",
     "ridge simulate --model llama-3.1-70b --fleet mixed --workload chat --duration 10min"},
    {"devices", rg_cmd_devices, 0,
     "devices on this machine (CPU, CUDA, HIP, Level Zero, OpenCL) and drivers not present",
     "ridge devices --json"},
    {"profile", rg_cmd_profile, 1,
     "measure a device (bandwidth, matmul FLOP/s over M, attention, op cost) and calibrate "
     "its class",
     "ridge profile --device cpu:0 --quick"},
    {"testmodel", rg_cmd_testmodel, 0,
     "write a random-weight model (safetensors + GGUF + tokenizer) for tests and benchmarks",
     "ridge testmodel --arch llama --size tiny --out /tmp/tiny"},
    {"run", rg_cmd_run, 0,
     "run a model, or a plan across worker processes: stream text, TTFT, tokens/s, GB/s vs limits",
     "ridge run --model /tmp/tiny --prompt \"hello\" -n 32"},
    {"worker", rg_cmd_worker, 0,
     "one device's share of a multi-process run: join a coordinator, load stages, run steps",
     "ridge worker --coordinator 127.0.0.1:7070 --name w1 --secret-file secret"},
    {"help", cmd_help, 0, "this overview, or one command's options", "ridge help model"},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

// Verbs DESIGN.md names that this build does not have yet; asking for one
// says so instead of guessing a spelling mistake.
static const char *const planned[] = {"serve"};

int rg_cli_fail(const char *cmd, rg_status_t s) {
  if (!s) return 0;
  if (cmd && *cmd)
    fprintf(stderr, "ridge %s: %s\n", cmd, rg_status_message(s));
  else
    fprintf(stderr, "ridge: %s\n", rg_status_message(s));
  int code = rg_code_exit_status(rg_status_code(s));
  rg_status_free(s);
  return code;
}

static const char *default_config_dir(void) {
  const char *e = getenv("RIDGE_CONFIG_DIR");
  return e && *e ? e : RIDGE_SOURCE_DIR "/configs";
}

static void print_usage(FILE *f) {
  fprintf(f,
          "usage: ridge [--config-dir DIR] [--json] [--quiet] [--version] [--help] <command> "
          "[args]\n");
}

static void print_help(FILE *f) {
  print_usage(f);
  fprintf(f,
          "\n"
          "ridge plans and runs LLM inference on fleets that mix accelerator classes (GPUs,\n"
          "SRAM LPUs, wafer-scale parts, high-capacity LPDDR cards, host DRAM and SSD tiers).\n"
          "It breaks a transformer into stages (attention, FFN / MoE experts, and the KV and\n"
          "activation moves between them), works out each stage's FLOPs and bytes and so which\n"
          "roof of which device class bounds it (its roofline), and searches placements of\n"
          "stages on device groups that maximise throughput, tokens per dollar or tokens per\n"
          "watt within the fleet's memory and links. It simulates hours of a workload's\n"
          "traffic through a plan with the runtime's own scheduler (ridge simulate), and runs\n"
          "models on this machine's devices (ridge run), in one process or a plan's stages\n"
          "across worker processes (ridge run --plan); serve is to come.\n"
          "\n"
          "Commands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-9s  %s\n  %-9s  e.g. %s\n", commands[i].name, commands[i].summary, "",
            commands[i].example);
  fprintf(f,
          "\n"
          "With no command, ridge runs its main job on built-in defaults: it plans %s\n"
          "on fleet %s (an H100, a Bertha 500 and host DRAM, played by this machine) under\n"
          "configs/placements/%s.yaml, then runs that plan with ridge run --plan,\n"
          "each group on a worker process standing in for its class\n"
          "\n"
          "Global options (before the command):\n"
          "  --config-dir DIR  where configs live (default: $RIDGE_CONFIG_DIR, else\n"
          "                    %s/configs)\n"
          "  --json            machine-readable output (every command also takes --json)\n"
          "  --quiet           no notices, only results\n"
          "  --version         version and the optional SDKs found at build time\n"
          "  --help            this text; `ridge help <command>` or `ridge <command> --help`\n"
          "                    for one command's options\n"
          "\n"
          "Configs: DIR/devices (device classes, each figure with its source), DIR/fleets,\n"
          "DIR/models, DIR/workloads, DIR/placements. Names given to --model, --fleet, ... are\n"
          "looked up there as NAME.yaml; a path to a file works too.\n"
          "\n"
          "Exit status: 0 ok, 1 error, 2 bad input (unknown name, bad flag or config),\n"
          "3 infeasible (nothing fits the fleet or meets the SLOs).\n",
          RG_DEFAULT_MODEL, RG_DEFAULT_FLEET, RG_DEFAULT_PLACEMENT, RIDGE_SOURCE_DIR);
}

static const rg_command_t *find_command(const char *name) {
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (!strcmp(commands[i].name, name)) return &commands[i];
  return NULL;
}

// "model, catalog, ..., help": the command table, so messages never list a
// stale set.
static const char *command_list(char *buf, size_t len) {
  size_t at = 0;
  buf[0] = 0;
  for (size_t i = 0; i < N_COMMANDS && at < len; i++)
    at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? ", " : "", commands[i].name);
  return buf;
}

static rg_status_t unknown_command(const char *name) {
  char list[256];
  command_list(list, sizeof list);
  for (size_t i = 0; i < sizeof(planned) / sizeof(planned[0]); i++)
    if (!strcmp(planned[i], name))
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "'%s' is planned but not in this build yet; commands: %s", name, list);
  const char *names[N_COMMANDS];
  for (size_t i = 0; i < N_COMMANDS; i++) names[i] = commands[i].name;
  const char *near = rg_nearest(name, names, N_COMMANDS);
  if (near)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "unknown command '%s'; did you mean '%s'? (commands: %s)", name, near,
                          list);
  return rg_status_make(RG_INVALID_ARGUMENT,
                        "unknown command '%s'; commands: %s (see ridge --help)", name, list);
}

// `ridge help [command]`: the overview, or the command's own --help.
static int cmd_help(int argc, char **argv, const rg_cli_common_t *common) {
  if (argc < 2) {
    print_help(stdout);
    return 0;
  }
  if (argc > 2)
    return rg_cli_fail(
        "help", rg_status_make(RG_INVALID_ARGUMENT, "takes at most one command name, got %d words",
                               argc - 1));
  const rg_command_t *c = find_command(argv[1]);
  if (!c) return rg_cli_fail("help", unknown_command(argv[1]));
  if (c->fn == cmd_help) {
    print_help(stdout);
    return 0;
  }
  char *sub[] = {(char *)c->name, "--help", NULL};
  return c->fn(2, sub, common);
}

static rg_status_t check_config_dir(const char *dir, int from_flag) {
  struct stat st;
  if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return NULL;
  return rg_status_make(RG_NOT_FOUND,
                        "config directory '%s' %s (%s); pass --config-dir DIR pointing at ridge's "
                        "configs/ folder, or set RIDGE_CONFIG_DIR",
                        dir, from_flag ? "given by --config-dir is not usable" : "is missing",
                        errno ? strerror(errno) : "not a directory");
}

// The main job on built-in defaults: plan the test model on a mixed fleet
// this machine plays, then run that plan across worker processes, each
// group on a device standing in for its class.
static int default_job(const rg_cli_common_t *common, int from_flag) {
  errno = 0;
  rg_status_t s = check_config_dir(common->config_dir, from_flag);
  if (s) return rg_cli_fail(NULL, s);
  char model[4096], placement[4096], plan[4096];
  if ((s = rg_cli_test_model(model, sizeof model, common->quiet))) return rg_cli_fail(NULL, s);
  snprintf(placement, sizeof placement, "%s/placements/%s.yaml", common->config_dir,
           RG_DEFAULT_PLACEMENT);
  const char *tmp = getenv("TMPDIR");
  snprintf(plan, sizeof plan, "%s/ridge-plan-XXXXXX.yaml", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemps(plan, 5);
  if (fd < 0)
    return rg_cli_fail(NULL, rg_status_make(RG_IO, "cannot make a temporary plan file %s: %s", plan,
                                            strerror(errno)));
  close(fd);
  if (!common->quiet)
    fprintf(stderr,
            "ridge: no command given, so running the default job: `ridge plan --model %s --fleet "
            "%s --placement %s -o %s`, then `ridge run --model %s --plan %s`, each of the plan's "
            "groups on a worker process standing in for its class; choose your own with `ridge "
            "plan --model M --fleet F -o plan.yaml` and `ridge run --model DIR --plan plan.yaml` "
            "(ridge --help lists commands)\n",
            model, RG_DEFAULT_FLEET, placement, plan, model, plan);
  char *job[] = {"plan",        "--model", model, "--fleet", RG_DEFAULT_FLEET,
                 "--placement", placement, "-o",  plan,      NULL};
  int rc = rg_cmd_plan(9, job, common);
  if (!rc) {
    fflush(stdout);
    printf(
        "\nRunning the plan on this machine, each group on a worker standing in for its class "
        "(random weights: the text is noise; the timings are real):\n");
    fflush(stdout);
    char *run_job[] = {"run", "--model", model, "--plan", plan, "-n", "48", NULL};
    rc = rg_cmd_run(7, run_job, common);
  }
  unlink(plan);
  return rc;
}

int main(int argc, char **argv) {
  rg_cli_common_t common = {.config_dir = NULL, .json = 0, .quiet = 0};
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || !strcmp(a, "-")) break;
    if (!strcmp(a, "--")) {
      i++;
      break;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      print_help(stdout);
      return 0;
    }
    if (!strcmp(a, "--version") || !strcmp(a, "-V")) {
      printf("ridge %s\noptional SDKs found at build:%s\n", RIDGE_VERSION, RIDGE_SDK_SUMMARY);
      return 0;
    }
    if (!strcmp(a, "--json")) {
      common.json = 1;
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
      common.quiet = 1;
    } else if (!strcmp(a, "--config-dir")) {
      if (i + 1 >= argc)
        return rg_cli_fail(NULL,
                           rg_status_make(RG_INVALID_ARGUMENT, "--config-dir needs a directory"));
      common.config_dir = argv[++i];
    } else if (!strncmp(a, "--config-dir=", 13)) {
      common.config_dir = a + 13;
    } else {
      static const char *const globals[] = {"--config-dir", "--json", "--quiet", "--version",
                                            "--help"};
      const char *near = rg_nearest(a, globals, sizeof(globals) / sizeof(globals[0]));
      rg_status_t s =
          near ? rg_status_make(RG_INVALID_ARGUMENT,
                                "unknown global option '%s'; did you mean %s? (command options go "
                                "after the command)",
                                a, near)
               : rg_status_make(RG_INVALID_ARGUMENT,
                                "unknown global option '%s' (command options go after the "
                                "command; see ridge --help)",
                                a);
      return rg_cli_fail(NULL, s);
    }
  }
  int from_flag = common.config_dir != NULL;
  if (!common.config_dir) common.config_dir = default_config_dir();

  if (i >= argc) return default_job(&common, from_flag);

  const rg_command_t *c = find_command(argv[i]);
  if (!c) return rg_cli_fail(NULL, unknown_command(argv[i]));
  int wants_help = 0;
  for (int k = i + 1; k < argc; k++)
    wants_help |= !strcmp(argv[k], "--help") || !strcmp(argv[k], "-h");
  if (c->needs_config && !wants_help) {
    errno = 0;
    rg_status_t s = check_config_dir(common.config_dir, from_flag);
    if (s) return rg_cli_fail(c->name, s);
  }
  return c->fn(argc - i, argv + i, &common);
}
