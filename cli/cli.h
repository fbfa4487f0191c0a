// cli/cli.h — the `ridge` command: shared option state and the subcommands.
//
// Only cli/ prints. Each subcommand parses its own arguments (getopt_long),
// returns a process exit status, and reports failures through rg_cli_fail(),
// which prints "ridge <cmd>: <message>" to stderr and maps the status code to
// the exit status (2 for bad input, 3 for an infeasible ask, 1 otherwise).
#ifndef RG_CLI_CLI_H
#define RG_CLI_CLI_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "base/status.h"
#include "planner/planner.h"

typedef struct {
  const char *config_dir;  // --config-dir, default: the source tree's configs/
  int json;                // --json
  int quiet;               // --quiet
} rg_cli_common_t;

// Prints the status (consumed) for command `cmd` and returns the exit status.
int rg_cli_fail(const char *cmd, rg_status_t s);

int rg_cmd_model(int argc, char **argv, const rg_cli_common_t *common);
int rg_cmd_catalog(int argc, char **argv, const rg_cli_common_t *common);
int rg_cmd_plan(int argc, char **argv, const rg_cli_common_t *common);
int rg_cmd_devices(int argc, char **argv, const rg_cli_common_t *common);
int rg_cmd_testmodel(int argc, char **argv, const rg_cli_common_t *common);
int rg_cmd_run(int argc, char **argv, const rg_cli_common_t *common);
int rg_cmd_worker(int argc, char **argv, const rg_cli_common_t *common);
int rg_cmd_profile(int argc, char **argv, const rg_cli_common_t *common);
int rg_cmd_simulate(int argc, char **argv, const rg_cli_common_t *common);

// `ridge plan --simulate` (cli/cmd_simulate.c): simulates the chosen plan
// and the best of its baselines, `top` in all, on the same traffic; the one
// with the most simulated goodput becomes plan->chosen. Prints the
// comparison to f (when not NULL) and returns it as a JSON array in
// *json_out (when not NULL; the caller owns it).
RG_MUST_USE rg_status_t rg_cli_plan_simulate(const rg_plan_request_t *req, rg_plan_t *plan, int top,
                                             FILE *f, cJSON **json_out);

// The random-weight test model (`ridge testmodel`, llama tiny) in the
// user's cache, written there the first time (said on stderr unless quiet);
// its directory into out. What `ridge run` runs without --model.
RG_MUST_USE rg_status_t rg_cli_test_model(char *out, size_t len, int quiet);

// ----- Calibration for measured vs predicted (cli/calibrate.c) -----------------------
//
// The class a device of this machine stands for (its class in `ridge
// devices`), calibrated by a quick profile of the device with the tiny test
// model's stages (runtime/profile.h), so that `ridge run` can put the cost
// model's figure for each stage beside its measured time. The calibrated
// class file is cached as <cache>/ridge/calibrated/<driver>-<index>/<class>.yaml
// (<driver>-<index>-t<N> when threads is N, then -bi for batch-invariant
// kernels) (XDG_CACHE_HOME, else ~/.cache) and reused while younger than
// max_age_s and than the running ridge binary (another build's kernels are
// another device's figures).
// A cached file that does not load is profiled again; a device that cannot
// be profiled keeps its datasheet class. Either way `note` says what the
// class is, from when, and why.
typedef struct {
  int skip;               // --no-calibrate: the datasheet class, not profiled
  int refresh;            // profile even if the cache is young
  double max_age_s;       // 0: one day
  const char *cache_dir;  // NULL: rg_cli_calibration_dir
  int threads;            // CPU threads for the profile; 0: one per core
  int batch_invariant;    // profile the batch-invariant CPU kernels the run uses
  int quiet;
} rg_cli_calibrate_options_t;

typedef struct {
  rg_device_class_t cls;  // the class to predict with (datasheet = NULL)
  char device[32];        // "cpu:0"
  char class_name[64];    // "local-cpu"
  char path[1100];        // the cached file ("" with skip)
  int calibrated;         // cls carries measured figures
  int fresh;              // profiled by this call
  double age_s;           // of the cached file reused
  char note[1024];        // "cpu:0 as local-cpu calibrated 2 h ago (cached ...)"
} rg_cli_calibration_t;

// Fails only when the device does not open or has no computing class.
RG_MUST_USE rg_status_t rg_cli_calibrate(const rg_catalog_t *cat, const char *device,
                                         const rg_cli_calibrate_options_t *o,
                                         rg_cli_calibration_t *out);
// <cache>/ridge/calibrated, as above.
RG_MUST_USE rg_status_t rg_cli_calibration_dir(char *out, size_t len);

// Defaults of the main job (`ridge` with no arguments): the test model
// planned on a mixed fleet this machine plays (configs/fleets/local-hetero),
// under the constraints of configs/placements/local-hetero.yaml, then run.
#define RG_DEFAULT_MODEL "the random-weight test model"
#define RG_DEFAULT_FLEET "local-hetero"
#define RG_DEFAULT_PLACEMENT "local-hetero"

#endif  // RG_CLI_CLI_H
