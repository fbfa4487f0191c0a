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
    {"testmodel", rg_cmd_testmodel, 0,
     "write a random-weight model (safetensors + GGUF + tokenizer) for tests and benchmarks",
     "ridge testmodel --arch llama --size tiny --out /tmp/tiny"},
    {"run", rg_cmd_run, 0,
     "run a model on this machine's CPU: stream text, report TTFT, tokens/s, GB/s vs limits",
     "ridge run --model /tmp/tiny --prompt \"hello\" -n 32"},
    {"worker", rg_cmd_worker, 0,
     "one device's share of a multi-process run: join a coordinator, load stages, run steps",
     "ridge worker --coordinator 127.0.0.1:7070 --name w1 --secret-file secret"},
    {"help", cmd_help, 0, "this overview, or one command's options", "ridge help model"},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

// Verbs DESIGN.md names that this build does not have yet; asking for one
// says so instead of guessing a spelling mistake.
static const char *const planned[] = {"serve", "profile"};

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
          "models on this machine's CPU (ridge run); serve is to come.\n"
          "\n"
          "Commands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-9s  %s\n  %-9s  e.g. %s\n", commands[i].name, commands[i].summary, "",
            commands[i].example);
  fprintf(f,
          "\n"
          "With no command, ridge runs its main job on built-in defaults:\n"
          "  ridge plan --model %s --fleet %s, then ridge run (the random-weight test model)\n"
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
          RG_DEFAULT_MODEL, RG_DEFAULT_FLEET, RIDGE_SOURCE_DIR);
}

static const rg_command_t *find_command(const char *name) {
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (!strcmp(commands[i].name, name)) return &commands[i];
  return NULL;
}

static rg_status_t unknown_command(const char *name) {
  for (size_t i = 0; i < sizeof(planned) / sizeof(planned[0]); i++)
    if (!strcmp(planned[i], name))
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "'%s' is planned but not in this build yet; commands: model, catalog, "
                            "plan, devices, testmodel, help",
                            name);
  const char *names[N_COMMANDS];
  for (size_t i = 0; i < N_COMMANDS; i++) names[i] = commands[i].name;
  const char *near = rg_nearest(name, names, N_COMMANDS);
  if (near)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "unknown command '%s'; did you mean '%s'? (commands: model, catalog, "
                          "plan, devices, testmodel, help)",
                          name, near);
  return rg_status_make(RG_INVALID_ARGUMENT,
                        "unknown command '%s'; commands: model, catalog, plan, devices, "
                        "testmodel, help (see ridge --help)",
                        name);
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

  if (i >= argc) {
    // The main job on built-in defaults.
    char *job[] = {"plan", "--model", RG_DEFAULT_MODEL, "--fleet", RG_DEFAULT_FLEET, NULL};
    if (!common.quiet)
      fprintf(stderr,
              "ridge: no command given, so running the default job: `ridge plan --model %s --fleet "
              "%s`, then `ridge run` on the random-weight test model on this machine's CPU; choose "
              "your own with `ridge plan --model M --fleet F` and `ridge run --model DIR` (ridge "
              "--help lists commands)\n",
              RG_DEFAULT_MODEL, RG_DEFAULT_FLEET);
    errno = 0;
    rg_status_t s = check_config_dir(common.config_dir, from_flag);
    if (s) return rg_cli_fail(NULL, s);
    int rc = rg_cmd_plan(5, job, &common);
    if (rc) return rc;
    fflush(stdout);
    printf(
        "\nRunning the test model on this machine (random weights: the text is noise; the timings "
        "are real):\n");
    fflush(stdout);
    char *run_job[] = {"run", "-n", "48", NULL};
    return rg_cmd_run(3, run_job, &common);
  }

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
