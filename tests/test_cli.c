// Tests of the `ridge` command itself: it runs the built binary with the
// source tree's configs and checks what a user sees (text, JSON, exit status).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

#include "base/build.h"
#include "graphs/weights.h"
#include "planner/planner.h"
#include "tests/test.h"

// Runs ridge, expects JSON on stdout, and returns the parsed tree (NULL after
// recording a failure). *out_rc receives the exit status.
static cJSON *run_json(rg_test_ctx_t *t, const char *args, int *out_rc) {
  char *out = NULL;
  *out_rc = rg_test_run_ridge(t, args, &out);
  cJSON *j = cJSON_Parse(out);
  if (!j) rg_test_fail(t, __FILE__, __LINE__, "ridge %s: output is not JSON:\n%s", args, out);
  free(out);
  return j;
}

static double num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const cJSON *find_stage(const cJSON *root, const char *name) {
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "stages"), *e;
  cJSON_ArrayForEach(e, st) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) return e;
  }
  return NULL;
}

// The line of text containing `needle`, copied into buf ("" when absent).
static const char *line_with(const char *text, const char *needle, char *buf, size_t len) {
  const char *p = strstr(text, needle);
  buf[0] = 0;
  if (!p) return buf;
  const char *b = p, *e = p;
  while (b > text && b[-1] != '\n') b--;
  while (*e && *e != '\n') e++;
  size_t n = (size_t)(e - b) < len - 1 ? (size_t)(e - b) : len - 1;
  memcpy(buf, b, n);
  buf[n] = 0;
  return buf;
}

RG_TEST(cli_help_lists_commands) {
  char *out = NULL;
  RG_CHECK(rg_test_run_ridge(t, "--help", &out) == 0);
  RG_CHECK_CONTAINS(out, "usage: ridge");
  RG_CHECK_CONTAINS(out, "  model ");
  RG_CHECK_CONTAINS(out, "  catalog ");
  RG_CHECK_CONTAINS(out, "  plan ");
  RG_CHECK_CONTAINS(out, "e.g. ridge catalog");
  RG_CHECK_CONTAINS(out, "configs");
  RG_CHECK_CONTAINS(out, "3 infeasible");
  free(out);
}

RG_TEST(cli_help_command_shows_its_options) {
  char *out = NULL;
  RG_CHECK(rg_test_run_ridge(t, "help model", &out) == 0);
  RG_CHECK_CONTAINS(out, "usage: ridge model");
  RG_CHECK_CONTAINS(out, "--new-tokens");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "catalog --help", &out) == 0);
  RG_CHECK_CONTAINS(out, "usage: ridge catalog");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "help modle", &out) == 2);
  RG_CHECK_CONTAINS(out, "did you mean 'model'");
  free(out);
}

RG_TEST(cli_version_names_sdks) {
  char *out = NULL;
  RG_CHECK(rg_test_run_ridge(t, "--version", &out) == 0);
  RG_CHECK_CONTAINS(out, "ridge ");
  RG_CHECK_CONTAINS(out, "CUDA:");
  free(out);
}

RG_TEST(cli_unknown_command_suggests) {
  char *out = NULL;
  RG_CHECK(rg_test_run_ridge(t, "catalgo", &out) == 2);
  RG_CHECK_CONTAINS(out, "ridge: unknown command 'catalgo'; did you mean 'catalog'?");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "--jsno catalog", &out) == 2);
  RG_CHECK_CONTAINS(out, "did you mean --json");
  free(out);
}

RG_TEST(cli_missing_config_dir_says_how_to_fix) {
  char *out = NULL;
  RG_CHECK(rg_test_run_ridge(t, "--config-dir /nonexistent/ridge-configs catalog", &out) == 2);
  RG_CHECK_CONTAINS(out, "/nonexistent/ridge-configs");
  RG_CHECK_CONTAINS(out, "--config-dir");
  free(out);
}

// tests/test_runplan.c checks the default job itself; --quiet drops its notice.
RG_TEST(cli_no_arguments_quiet_drops_notice) {
  char *out = NULL;
  rg_test_run_ridge(t, "--quiet", &out);
  RG_CHECK(out && !strstr(out, "no command given"));
  free(out);
}

RG_TEST(cli_model_json_llama_70b) {
  int rc;
  cJSON *j = run_json(t, "model llama-3.1-70b --json", &rc);
  RG_CHECK(rc == 0);
  if (!j) return;
  RG_CHECK_NEAR(num(j, "params"), 70.6e9, 0.01);
  const cJSON *wb = cJSON_GetObjectItemCaseSensitive(j, "weight_bytes");
  RG_CHECK_NEAR(num(wb, "bf16"), 141.2e9, 0.001);
  RG_CHECK(num(j, "kv_bytes_per_token") == 327680);
  RG_CHECK_NEAR(num(j, "kv_equals_weights_tokens"), 431000, 0.005);
  const cJSON *kt = cJSON_GetObjectItemCaseSensitive(j, "kv_table");
  RG_CHECK(cJSON_GetArraySize(kt) == 12);
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shape");
  RG_CHECK(num(sh, "batch") == 1 && num(sh, "new_tokens") == 1 && num(sh, "context") == 4096);
  RG_CHECK(find_stage(j, "attention") != NULL);
  RG_CHECK(find_stage(j, "ffn") != NULL);
  const cJSON *core = find_stage(j, "attention.core");
  RG_CHECK(core && num(core, "kv_read_bytes") > 0);
  cJSON_Delete(j);
}

RG_TEST(cli_model_decode_attention_intensity) {
  int rc;
  cJSON *j = run_json(t, "model llama-3.1-70b --batch 512 --json", &rc);
  RG_CHECK(rc == 0);
  if (!j) return;
  const cJSON *core = find_stage(j, "attention.core");
  RG_REQUIRE(core != NULL);
  // Two FLOPs per multiply-add over 8 query heads per KV head, against 2-byte
  // K and V: about 8 FLOP per byte of KV read, whatever the batch.
  RG_CHECK_NEAR(num(core, "intensity"), 8.0, 0.05);
  cJSON_Delete(j);
}

RG_TEST(cli_model_prefill_defaults) {
  int rc;
  cJSON *j = run_json(t, "model llama-3.1-70b --phase prefill --json", &rc);
  RG_CHECK(rc == 0);
  if (!j) return;
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shape");
  RG_CHECK(num(sh, "new_tokens") == 2048 && num(sh, "context") == 0);
  const cJSON *ph = cJSON_GetObjectItemCaseSensitive(sh, "phase");
  RG_CHECK(cJSON_IsString(ph) && !strcmp(ph->valuestring, "prefill"));
  cJSON_Delete(j);
}

RG_TEST(cli_model_human_output) {
  char *out = NULL;
  RG_CHECK(rg_test_run_ridge(t, "model llama-3.1-70b", &out) == 0);
  RG_CHECK_CONTAINS(out, "320 KiB");
  RG_CHECK_CONTAINS(out, "327,680 B");
  RG_CHECK_CONTAINS(out, "155.8×");            // 512 × 128K of KV against the bf16 weights
  RG_CHECK_CONTAINS(out, "  attention.core");  // parts are indented
  RG_CHECK_CONTAINS(out, "FLOP/B");
  free(out);
}

RG_TEST(cli_model_unknown_name) {
  char *out = NULL;
  RG_CHECK(rg_test_run_ridge(t, "model nosuch", &out) == 2);
  RG_CHECK_CONTAINS(out, "ridge model: ");
  RG_CHECK_CONTAINS(out, "did you mean");
  free(out);
}

RG_TEST(cli_model_bad_flags) {
  char *out = NULL;
  RG_CHECK(rg_test_run_ridge(t, "model x --batch -3", &out) == 2);
  RG_CHECK_CONTAINS(out, "--batch");
  RG_CHECK_CONTAINS(out, "'-3'");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "model llama-3.1-70b --phase decoding", &out) == 2);
  RG_CHECK_CONTAINS(out, "--phase must be 'prefill' or 'decode'");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "model llama-3.1-70b --dtype bf61", &out) == 2);
  RG_CHECK_CONTAINS(out, "unknown dtype 'bf61'");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "model llama-3.1-70b --context lots", &out) == 2);
  RG_CHECK_CONTAINS(out, "--context takes a whole number");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "model llama-3.1-70b --bach 4", &out) == 2);
  RG_CHECK_CONTAINS(out, "did you mean --batch");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "model llama-3.1-70b --batch", &out) == 2);
  RG_CHECK_CONTAINS(out, "--batch needs a value");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "model", &out) == 2);
  RG_CHECK_CONTAINS(out, "which model?");
  free(out);
}

RG_TEST(cli_catalog_table) {
  char *out = NULL, line[512];
  RG_CHECK(rg_test_run_ridge(t, "catalog", &out) == 0);
  line_with(out, "h100-sxm", line, sizeof(line));
  RG_CHECK_CONTAINS(line, " 295 ");
  RG_CHECK_CONTAINS(line, "3.35 TB/s");
  line_with(out, "nvme-ssd", line, sizeof(line));
  RG_CHECK_CONTAINS(line, "storage tier");
  line_with(out, "groq-lpu", line, sizeof(line));
  RG_CHECK_CONTAINS(line, "*f16");  // no bf16 units: falls back, marked
  free(out);
}

RG_TEST(cli_catalog_one_class) {
  char *out = NULL;
  RG_CHECK(rg_test_run_ridge(t, "catalog h100-sxm", &out) == 0);
  RG_CHECK_CONTAINS(out, "h100-sxm.yaml");
  RG_CHECK_CONTAINS(out, "hbm3");
  RG_CHECK_CONTAINS(out, "fp8");
  free(out);
  int rc;
  cJSON *j = run_json(t, "catalog h100-sxm --json", &rc);
  RG_CHECK(rc == 0);
  if (!j) return;
  RG_CHECK_NEAR(num(j, "ridge_point"), 295.0, 0.01);
  RG_CHECK_NEAR(num(cJSON_GetObjectItemCaseSensitive(j, "peak"), "bf16"), 989.5e12, 1e-6);
  RG_CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "memory")) >= 1);
  cJSON_Delete(j);
}

RG_TEST(cli_catalog_json_list) {
  int rc;
  cJSON *j = run_json(t, "--json catalog", &rc);
  RG_CHECK(rc == 0);
  if (!j) return;
  RG_CHECK(cJSON_IsArray(j) && cJSON_GetArraySize(j) >= 10);
  const cJSON *e;
  int tiers_without_ridge = 0;
  cJSON_ArrayForEach(e, j) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(e, "kind");
    if (cJSON_IsString(k) &&
        (!strcmp(k->valuestring, "ssd") || !strcmp(k->valuestring, "host-dram")))
      tiers_without_ridge += cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(e, "ridge_point"));
  }
  RG_CHECK(tiers_without_ridge >= 2);
  cJSON_Delete(j);
}

RG_TEST(cli_catalog_unknown_name) {
  char *out = NULL;
  RG_CHECK(rg_test_run_ridge(t, "catalog nope", &out) == 2);
  RG_CHECK_CONTAINS(out, "ridge catalog: ");
  RG_CHECK_CONTAINS(out, "nope");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "catalog --dtype fp9", &out) == 2);
  RG_CHECK_CONTAINS(out, "unknown dtype 'fp9'");
  free(out);
}

// ----- ridge run: measured beside the cost model on calibrated classes -------------

// A calibration cache of the test's own: XDG_CACHE_HOME under the test's
// folder, holding the user's tiny test model (linked, as the profile's
// stage model) and nothing calibrated yet. Returns the model's folder; the
// caller restores the environment with cache_env_end.
static char saved_xdg[1024];
static int had_xdg;
static const char *cache_env(rg_test_ctx_t *t, char *model, size_t len) {
  rg_testmodel_opts_t o = {.arch = RG_TESTMODEL_LLAMA,
                           .size = RG_TESTMODEL_TINY,
                           .dtype = RG_BF16,
                           .gguf_type = RG_DTYPE_COUNT};
  rg_status_t s = rg_testmodel_cached(&o, model, len, NULL);
  if (s) {
    rg_test_fail(t, __FILE__, __LINE__, "%s", rg_status_message(s));
    rg_status_free(s);
    return NULL;
  }
  const char *x = getenv("XDG_CACHE_HOME");
  had_xdg = x != NULL;
  snprintf(saved_xdg, sizeof saved_xdg, "%s", x ? x : "");
  char p[1400];
  snprintf(p, sizeof p, "%s/cache", rg_test_tmpdir(t));
  mkdir(p, 0755);
  setenv("XDG_CACHE_HOME", p, 1);
  snprintf(p, sizeof p, "%s/cache/ridge", rg_test_tmpdir(t));
  mkdir(p, 0755);
  const char *base = strrchr(model, '/');
  snprintf(p, sizeof p, "%s/cache/ridge%s", rg_test_tmpdir(t), base ? base : "/tiny");
  if (symlink(model, p)) rg_test_fail(t, __FILE__, __LINE__, "cannot link %s", p);
  return model;
}

static void cache_env_end(void) {
  if (had_xdg)
    setenv("XDG_CACHE_HOME", saved_xdg, 1);
  else
    unsetenv("XDG_CACHE_HOME");
}

// Figures chosen so that the fixed costs dominate and each one shows.
static const char *const known_cpu =
    "name: local-cpu\n"
    "measured: { by: a test, date: 2026-01-02, device: \"cpu:0 known figures\" }\n"
    "memory: [ { name: dram, bandwidth: 10 GB/s } ]\n"
    "efficiency: { memory: 0.5, attention: 0.5, compute: 0.1 }\n"
    "overhead: { step: 0 s, layer: 0 s, first: 7 ms }\n"
    "stages:\n"
    "  embed: { call: 1 ms, first: 5 ms }\n"
    "  attention: { call: 2 ms, token: 100 us }\n"
    "  ffn: { call: 3 ms, token: 10 us, efficiency: 0.5, cold: 40 ms }\n"
    "  lm_head: { call: 4 ms }\n";

static const char *write_known(rg_test_ctx_t *t, const char *text) {
  char p[1400];
  snprintf(p, sizeof p, "%s/cache/ridge/calibrated", rg_test_tmpdir(t));
  mkdir(p, 0755);
  // This build's key: the sanitizer build's ridge keeps its own ("-asan").
  snprintf(p, sizeof p, "%s/cache/ridge/calibrated/cpu-0-t1%s", rg_test_tmpdir(t), RG_BUILD_TAG);
  mkdir(p, 0755);
  char rel[256];
  snprintf(rel, sizeof rel, "cache/ridge/calibrated/cpu-0-t1%s/local-cpu.yaml", RG_BUILD_TAG);
  return rg_test_write(t, rel, text);
}

static const cJSON *device0(const cJSON *j) {
  return cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "prediction"), "devices"),
                            0);
}

static const char *str(const cJSON *o, const char *key) {
  const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
  return s ? s : "";
}

// A run on a known calibrated class: each stage's predicted time is the
// cost model's for that class over the steps the run took (a prompt of 5,
// then one-token decodes), plus its first call's cost, and the process's
// once-only cost in its first layered stage (attention), where the matmuls
// pay it.
RG_TEST(cli_run_predicted_column_is_the_cost_model_on_the_calibrated_class) {
  char model[2048];
  if (!cache_env(t, model, sizeof model)) return;
  const char *path = write_known(t, known_cpu);
  char args[2600];
  snprintf(args, sizeof args,
           "run --model %s --prompt-ids 1,2,3,4,5 -n 4 --temperature 0 --threads 1 --json", model);
  int rc;
  cJSON *j = run_json(t, args, &rc);
  RG_REQUIRE(j && rc == 0);
  const cJSON *d = device0(j);
  RG_CHECK(!strcmp(str(d, "device"), "cpu:0") && !strcmp(str(d, "class"), "local-cpu"));
  RG_CHECK(num(d, "calibrated") == 1 && num(d, "profiled_now") == 0);
  RG_CHECK_CONTAINS(str(d, "note"), "cpu:0 as local-cpu calibrated");
  RG_CHECK_CONTAINS(str(d, "note"), "(cached ");
  RG_CHECK_CONTAINS(str(d, "source"), "measured by a test on 2026-01-02, cpu:0 known figures");

  // The same figures, computed here from the file and the model.
  rg_catalog_t *cat = NULL;
  rg_arch_t *arch = NULL;
  char cfgp[2100];
  snprintf(cfgp, sizeof cfgp, "%s/config.json", model);
  RG_REQUIRE_OK(rg_catalog_load(rg_test_config_dir(), &cat));
  RG_REQUIRE_OK(rg_model_load(cfgp, rg_test_config_dir(), &arch));
  const rg_device_class_t *sheet = rg_catalog_find(cat, "local-cpu");
  RG_REQUIRE(sheet);
  rg_device_class_t c = *(sheet->datasheet ? sheet->datasheet : sheet);
  RG_REQUIRE_OK(rg_device_class_calibrate(&c, path));
  // The file says 10 GB/s; the run predicts with the read bandwidth it
  // measured itself, and says so.
  RG_CHECK(c.mem[0].bandwidth == 10e9);
  double bw = num(d, "read_bandwidth");
  RG_CHECK(bw > 1e8 && bw != 10e9);
  RG_CHECK_CONTAINS(str(d, "note"),
                    "as measured in this run, best of before and after it (10 GB/s when profiled)");
  c.mem[0].bandwidth = bw;
  rg_fleet_t *f = calloc(1, sizeof *f);
  RG_REQUIRE(f);
  f->n_nodes = 1, f->nodes[0].count = 1, f->nodes[0].n_devs = 1;
  f->nodes[0].devs[0] = (rg_node_devices_t){.cls = &c, .count = 1};
  rg_plan_request_t req = {
      .model = arch, .fleet = f, .weight_dtype = arch->weight_dtype, .kv_dtype = RG_BF16};
  rg_group_t g = {"stage", &c, 1, 1, 1, 1};
  static const char *const kinds[] = {"embed", "attention", "ffn", "lm_head"};
  int seen = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "stages")) {
    int slot = 0;
    while (slot < 4 && strcmp(str(e, "kind"), kinds[slot])) slot++;
    RG_REQUIRE(slot < 4);
    RG_CHECK(c.process_first == 7e-3 && c.stage[RG_SLOT_FFN].cold == 40e-3);
    // One process runs its stages back to back: no call is cold.
    RG_CHECK(num(e, "cold_calls") == 0);
    double steps = num(e, "steps"), want = c.stage[slot].first + (slot == 1 ? c.process_first : 0);
    RG_CHECK(steps >= 2);
    for (int s = 0; s < (int)steps; s++) {
      // The prompt's 5 tokens, then one token a step after them.
      rg_step_mix_t m = s == 0 ? (rg_step_mix_t){.prefills = 1, .prefill_tokens = 5}
                               : (rg_step_mix_t){.decodes = 1, .decode_context = 4 + s};
      double x;
      RG_REQUIRE_OK(rg_slot_mixed_time(&req, &g, (rg_slot_t)slot, &m, 0, &x));
      want += x;
    }
    RG_CHECK_NEAR(num(e, "predicted_s"), want, 1e-6);
    // The fixed costs are in it: at least every call's.
    double calls = slot == 1 || slot == 2 ? (double)arch->n_layers : 1;
    RG_CHECK(num(e, "predicted_s") > steps * calls * c.stage[slot].call);
    seen |= 1 << slot;
  }
  RG_CHECK(seen == 15);
  cJSON_Delete(j);

  // The text says what the column is and where its figures came from.
  char *out = NULL;
  snprintf(args, sizeof args, "run --model %s --prompt-ids 1,2,3,4,5 -n 4 --threads 1", model);
  RG_CHECK(rg_test_run_ridge(t, args, &out) == 0);
  RG_CHECK_CONTAINS(out, "predicted = the planner's cost model for\nthat stage over the steps");
  RG_CHECK_CONTAINS(out, "cpu:0 as local-cpu calibrated");
  RG_CHECK_CONTAINS(out, "measured by a test on 2026-01-02, cpu:0 known figures");
  free(out);
  free(f);
  rg_arch_destroy(arch);
  rg_catalog_destroy(cat);
  cache_env_end();
}

// Across workers, a call made after its worker waited for another's data is
// cold: the FFN worker waits for every layer's hidden states, so its calls
// are counted, and each adds the class's `cold` figure to the prediction.
// The same run on a class without it predicts that much less. The two
// workers share cpu:0, which the prediction's note says.
RG_TEST(cli_run_cold_calls_across_workers_add_the_cold_figure) {
  char model[2048];
  if (!cache_env(t, model, sizeof model)) return;
  char args[2600];
  snprintf(args, sizeof args,
           "run --model %s --layout attention-ffn --prompt-ids 1,2,3 -n 4 --temperature 0 "
           "--threads 1 --json",
           model);
  double pred[2] = {0, 0}, cold_calls = -1, steps = 0;
  for (int k = 0; k < 2; k++) {
    if (k == 0) {
      write_known(t, known_cpu);
    } else {  // the same figures without the FFN's cold cost
      char text[2048];
      snprintf(text, sizeof text, "%s", known_cpu);
      char *c = strstr(text, ", cold: 40 ms");
      RG_REQUIRE(c);
      memmove(c, c + strlen(", cold: 40 ms"), strlen(c + strlen(", cold: 40 ms")) + 1);
      write_known(t, text);
    }
    int rc;
    cJSON *j = run_json(t, args, &rc);
    RG_REQUIRE(j && rc == 0);
    const cJSON *e;
    int seen = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "stages")) {
      if (strcmp(str(e, "kind"), "ffn")) continue;
      seen = 1;
      pred[k] = num(e, "predicted_s");
      if (k == 0) {
        cold_calls = num(e, "cold_calls"), steps = num(e, "steps");
        // Two layers a step; the prompt's step, at least, waited for attention.
        RG_CHECK(cold_calls >= 1 && cold_calls <= 2 * steps);
      }
    }
    RG_CHECK(seen);
    // Both workers run on cpu:0: the report says the predictions do not
    // see them sharing it.
    const cJSON *pr = cJSON_GetObjectItem(j, "prediction");
    RG_CHECK_CONTAINS(str(pr, "note"), "w0-attention and w1-ffn share cpu:0");
    cJSON_Delete(j);
  }
  // The prediction without the cold part is the same in both runs (same
  // steps, same figures, but for the read bandwidth each run measures,
  // which moves its small roofline part); the cold part is 40 ms a counted
  // call, far more than that tolerance.
  RG_CHECK_NEAR(pred[0] - 40e-3 * cold_calls, pred[1], 0.01);
  cache_env_end();
}

// A calibration older than a day, or one that does not load, is profiled
// again (and says why; the test above shows a young one reused); a failed profile, a cache
// that cannot be written and --no-calibrate leave the datasheet, saying so.
RG_TEST(cli_run_calibration_cache_is_refreshed_replaced_and_falls_back) {
  char model[2048];
  if (!cache_env(t, model, sizeof model)) return;
  const char *path = write_known(t, known_cpu);
  struct utimbuf old = {time(NULL) - 2 * 86400, time(NULL) - 2 * 86400};
  RG_REQUIRE(utime(path, &old) == 0);
  char args[2600];
  snprintf(args, sizeof args, "run --model %s --prompt-ids 1,2,3 -n 2 --threads 1 --json", model);
  int rc;
  cJSON *j = run_json(t, args, &rc);
  RG_REQUIRE(j && rc == 0);
  const cJSON *d = device0(j);
  RG_CHECK(num(d, "calibrated") == 1 && num(d, "profiled_now") == 1);
  RG_CHECK_CONTAINS(str(d, "note"), "calibrated now by a");
  RG_CHECK_CONTAINS(str(d, "note"), "old; profiled again");
  // Profiled just before the run: still priced at the run's own reading.
  RG_CHECK_CONTAINS(str(d, "note"), "as measured in this run, best of before and after it");
  RG_CHECK_CONTAINS(str(d, "source"), "measured by ridge profile on");
  cJSON_Delete(j);
  FILE *fp = fopen(path, "r");
  char text[1 << 15] = "";
  if (fp) {
    text[fread(text, 1, sizeof text - 1, fp)] = 0;
    fclose(fp);
  }
  RG_CHECK_CONTAINS(text, "\nstages:\n  embed: { call: ");
  RG_CHECK(strstr(text, "known figures") == NULL);

  // One younger than a day but older than the ridge binary measured
  // another build's kernels: profiled again.
  write_known(t, known_cpu);
  struct stat exe;
  RG_REQUIRE(stat(rg_test_ridge_bin(), &exe) == 0);
  if (difftime(time(NULL), exe.st_mtime) < 80000) {  // else "a day old" would win
    struct utimbuf before = {exe.st_mtime - 60, exe.st_mtime - 60};
    RG_REQUIRE(utime(path, &before) == 0);
    j = run_json(t, args, &rc);
    RG_REQUIRE(j && rc == 0);
    RG_CHECK(num(device0(j), "profiled_now") == 1);
    RG_CHECK_CONTAINS(str(device0(j), "note"), "predates this build of ridge; profiled again");
    cJSON_Delete(j);
  }

  // One that does not load is profiled again. With the stage model made
  // unusable (a file where its folder goes) that profile fails at once, so
  // the note shows both steps and the datasheet is what remains.
  write_known(t, "name: local-cpu\nmeasured: { by: x, date: 2026-01-02 }\nstages: { ffn: 3 }\n");
  const char *base = strrchr(model, '/');
  char link[1400];
  snprintf(link, sizeof link, "cache/ridge%s", base ? base : "/tiny");
  char full[1500];
  snprintf(full, sizeof full, "%s/%s", rg_test_tmpdir(t), link);
  RG_CHECK(unlink(full) == 0);
  rg_test_write(t, link, "not a model folder");
  j = run_json(t, args, &rc);
  RG_REQUIRE(j && rc == 0);
  RG_CHECK(num(device0(j), "calibrated") == 0 && num(device0(j), "profiled_now") == 0);
  RG_CHECK_CONTAINS(str(device0(j), "note"),
                    "cpu:0 as local-cpu's datasheet: calibration failed (");
  RG_CHECK_CONTAINS(str(device0(j), "note"), "local-cpu.yaml does not load (");
  RG_CHECK_CONTAINS(str(device0(j), "note"), "); profiled again");
  RG_CHECK(num(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "stages"), 0), "predicted_s") > 0);
  cJSON_Delete(j);

  // --no-calibrate: the datasheet, said so.
  snprintf(args, sizeof args,
           "run --model %s --prompt-ids 1,2,3 -n 2 --threads 1 --json --no-calibrate", model);
  j = run_json(t, args, &rc);
  RG_REQUIRE(j && rc == 0);
  RG_CHECK(num(device0(j), "calibrated") == 0);
  RG_CHECK_CONTAINS(str(device0(j), "note"), "cpu:0 as local-cpu's datasheet (--no-calibrate)");
  RG_CHECK(num(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "stages"), 0), "predicted_s") > 0);
  cJSON_Delete(j);

  // A cache folder that cannot be made: the datasheet, and why.
  char bad[1400];
  snprintf(bad, sizeof bad, "%s/not-a-folder", rg_test_tmpdir(t));
  rg_test_write(t, "not-a-folder", "x");
  setenv("XDG_CACHE_HOME", bad, 1);
  snprintf(args, sizeof args, "run --model %s --prompt-ids 1,2,3 -n 2 --threads 1 --json", model);
  j = run_json(t, args, &rc);
  RG_REQUIRE(j && rc == 0);
  RG_CHECK(num(device0(j), "calibrated") == 0);
  RG_CHECK_CONTAINS(str(device0(j), "note"),
                    "cpu:0 as local-cpu's datasheet: calibration failed (cannot make the "
                    "calibration cache folder");
  cJSON_Delete(j);
  cache_env_end();

  // Flags that contradict each other.
  char *out = NULL;
  RG_CHECK(rg_test_run_ridge(t, "run --no-calibrate --recalibrate", &out) == 2);
  RG_CHECK_CONTAINS(out, "give --no-calibrate or --recalibrate, not both");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "run --no-measure --recalibrate", &out) == 2);
  RG_CHECK_CONTAINS(out, "--no-measure skips the predictions, so --recalibrate has nothing to do");
  free(out);
}
