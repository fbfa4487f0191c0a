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

// Defaults of the main job (`ridge` with no arguments): the test model
// planned on a mixed fleet this machine plays (configs/fleets/local-hetero),
// under the constraints of configs/placements/local-hetero.yaml, then run.
#define RG_DEFAULT_MODEL "the random-weight test model"
#define RG_DEFAULT_FLEET "local-hetero"
#define RG_DEFAULT_PLACEMENT "local-hetero"

#endif  // RG_CLI_CLI_H
