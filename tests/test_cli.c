// Tests of the `ridge` command itself: it runs the built binary with the
// source tree's configs and checks what a user sees (text, JSON, exit status).
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

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
