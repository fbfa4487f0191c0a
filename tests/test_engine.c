// The single-device engine: against the independent numpy reference, across
// its two weight formats, batched against alone, chunked against whole, and
// its failure modes (KV cache full, bad ids, bad files).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graphs/weights.h"
#include "ops/matmul.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "tests/test.h"

static const char *make_model(rg_test_ctx_t *t, rg_testmodel_arch_t arch, const char *sub) {
  return rg_test_tiny_model(t, arch, sub, 7);
}

static double nmse(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)a[i] - b[i];
    num += d * d;
    den += (double)b[i] * b[i];
  }
  return den > 0 ? num / den : num;
}

// Greedy generation from `path`; returns malloc'd tokens and logits.
static rg_status_t greedy(const char *path, const int32_t *prompt, size_t n_prompt, int64_t n,
                          int32_t **tokens, float **logits, int64_t *vocab) {
  rg_engine_t *e;
  RG_RETURN_IF_ERROR(rg_engine_create(path, NULL, &e));
  *vocab = rg_engine_vocab(e);
  *logits = calloc((size_t)(n * *vocab), sizeof(float));
  rg_gen_params_t p = {0};
  p.sampler.top_p = 1;  // greedy: temperature 0
  p.n_new = n;
  p.dump_logits = *logits;
  rg_gen_stats_t st;
  int32_t *out[1] = {NULL};
  const int32_t *prompts[1] = {prompt};
  rg_status_t s = rg_generate(e, prompts, &n_prompt, 1, &p, out, &st);
  rg_engine_destroy(e);
  *tokens = out[0];
  return s;
}

static int have_numpy(void) {
  return !access("/usr/bin/python3", X_OK) &&
         !system("/usr/bin/python3 -c 'import numpy' 2>/dev/null");
}

// Runs ridge on dir (prefill + 32 decode steps: 33 rows of logits) and the
// numpy reference's comparison; `extra` adds ridge flags.
static void compare_with_numpy(rg_test_ctx_t *t, const char *dir, const char *label,
                               const char *ids, const char *extra, const char *tol) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "run --model %s --prompt-ids %s -n 33 --temperature 0 --no-measure %s --dump-logits "
           "%s/%s.npy",
           dir, ids, extra, rg_test_tmpdir(t), label);
  char *out;
  int rc = rg_test_run_ridge(t, cmd, &out);
  RG_CHECK(rc == 0);
  if (rc) printf("%s\n", out);
  free(out);
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 %s/tests/reference/ridge_ref.py compare --model %s --prompt-ids %s "
           "--logits %s/%s.npy "
           "--tol %s -q 2>&1",
           RIDGE_SOURCE_DIR, dir, ids, rg_test_tmpdir(t), label, tol);
  FILE *p = popen(cmd, "r");
  RG_REQUIRE(p);
  char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, p);
  buf[n] = 0;
  int st = pclose(p);
  printf("    numpy reference, %s: %s", label, buf);
  RG_CHECK(st == 0);
  RG_CHECK_CONTAINS(buf, "rows 33");
}

// The test models ridge writes, on the default (fastest) kernels: bf16
// matmuls round activations to bf16 in vdpbf16ps, hence the 1e-4 bound;
// at avx512-bf16 every bf16 matmul does, decode and each expert's few rows
// included (weights packed at load), and logits then move by up to ~0.02,
// so only a top-2 margin above 0.05 must keep its argmax.
static void check_testmodel(rg_test_ctx_t *t, rg_testmodel_arch_t arch, const char *sub) {
  if (!have_numpy())
    RG_SKIP(
        "/usr/bin/python3 with numpy is missing (scripts/install-deps.sh installs python3-numpy)");
  const char *dir = make_model(t, arch, sub);
  RG_REQUIRE(dir);
  compare_with_numpy(t, dir, sub, "1,17,42,300,5,99,7", "", "1e-4 --argmax-eps 0.05");
}

RG_TEST(engine_llama_matches_numpy_reference) {
  check_testmodel(t, RG_TESTMODEL_LLAMA, "llama");
}
RG_TEST(engine_moe_matches_numpy_reference) {
  check_testmodel(t, RG_TESTMODEL_MOE, "moe");
}

// Every family the engine runs, from checkpoints the numpy reference writes
// itself (Qwen2 biases in f16, Qwen3 QK-norm and head_dim != d/heads,
// Mixtral in f32, Qwen3-MoE without top-k renormalisation, Llama 3 with
// tied embeddings and strong RoPE scaling), two shards each. With kernels
// that keep activations in f32 the two agree to f32 rounding.
RG_TEST(engine_every_family_matches_numpy_reference) {
  if (!have_numpy())
    RG_SKIP(
        "/usr/bin/python3 with numpy is missing (scripts/install-deps.sh installs python3-numpy)");
  static const char *const kinds[] = {"llama", "qwen2", "qwen3", "mixtral", "qwen3_moe"};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    char dir[1024], cmd[2048];
    snprintf(dir, sizeof dir, "%s/ref-%s", rg_test_tmpdir(t), kinds[i]);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/tests/reference/ridge_ref.py make --kind %s --out %s --shards 2 "
             ">/dev/null",
             RIDGE_SOURCE_DIR, kinds[i], dir);
    RG_REQUIRE(system(cmd) == 0);
    compare_with_numpy(t, dir, kinds[i], "3,17,42,5,88", "--isa avx512 --kv-dtype f32", "1e-8");
  }
}

RG_TEST(engine_gguf_and_safetensors_give_same_tokens) {
  const char *dir = make_model(t, RG_TESTMODEL_LLAMA, "m");
  RG_REQUIRE(dir);
  char gguf[1100];
  snprintf(gguf, sizeof gguf, "%s/model.gguf", dir);
  int32_t prompt[] = {3, 14, 15, 92, 65};
  int32_t *a = NULL, *b = NULL;
  float *la = NULL, *lb = NULL;
  int64_t va, vb;
  RG_CHECK_OK(greedy(dir, prompt, 5, 24, &a, &la, &va));
  RG_CHECK_OK(greedy(gguf, prompt, 5, 24, &b, &lb, &vb));
  if (a && b) {
    RG_CHECK(va == vb);
    RG_CHECK(!memcmp(a, b, 24 * sizeof(int32_t)));
    RG_CHECK(nmse(la, lb, (size_t)(24 * va)) < 1e-10);
  }
  free(a), free(b), free(la), free(lb);
}

RG_TEST(engine_batched_and_chunked_match_alone) {
  const char *dir = make_model(t, RG_TESTMODEL_LLAMA, "m");
  RG_REQUIRE(dir);
  rg_engine_t *e;
  RG_REQUIRE_OK(rg_engine_create(dir, NULL, &e));
  int64_t V = rg_engine_vocab(e);
  // Three prompts of different lengths, alone and then decoded together.
  int32_t p0[] = {5, 6, 7}, p1[40], p2[] = {9};
  for (int i = 0; i < 40; i++) p1[i] = (int32_t)(i * 7 % 300 + 1);
  const int32_t *prompts[] = {p0, p1, p2};
  size_t lens[] = {3, 40, 1};
  int32_t *alone[3], *together[3];
  rg_gen_params_t p = {0};
  p.sampler.top_p = 1;
  p.n_new = 12;
  rg_gen_stats_t st;
  for (int i = 0; i < 3; i++)
    RG_REQUIRE_OK(rg_generate(e, &prompts[i], &lens[i], 1, &p, &alone[i], &st));
  p.prefill_chunk = 5;  // prompts split across steps and mixed in one step
  RG_REQUIRE_OK(rg_generate(e, prompts, lens, 3, &p, together, &st));
  for (int i = 0; i < 3; i++) {
    RG_CHECK(!memcmp(alone[i], together[i], 12 * sizeof(int32_t)));
    free(alone[i]);
    free(together[i]);
  }
  RG_CHECK(st.new_tokens == 36);
  (void)V;
  rg_engine_destroy(e);
}

// Every entry is checked before anything runs: a bad one changes nothing,
// and the same engine then runs a good step to the same logits.
RG_TEST(engine_refuses_bad_entries_before_running) {
  const char *dir = make_model(t, RG_TESTMODEL_LLAMA, "m");
  RG_REQUIRE(dir);
  rg_engine_options_t o = {0};
  o.kv_tokens = 64;  // four blocks of 16
  o.block_size = 16;
  o.max_context = 256;
  rg_engine_t *e;
  RG_REQUIRE_OK(rg_engine_create(dir, &o, &e));
  RG_CHECK(rg_engine_kv_blocks(e) == 4 && rg_engine_block_size(e) == 16);
  int32_t toks[48], blocks[4] = {2, 0, 3, 1};
  for (int i = 0; i < 48; i++) toks[i] = i + 1;
  size_t V = (size_t)rg_engine_vocab(e);
  float *l1 = malloc(V * sizeof(float)), *l2 = malloc(V * sizeof(float));
  rg_engine_entry_t good = {0, 20, toks, blocks, 2, 1};
  RG_CHECK_OK(rg_engine_forward(e, &good, 1, l1));
  int32_t bad_tok[20];
  memcpy(bad_tok, toks, sizeof bad_tok);
  bad_tok[7] = 1 << 30;
  rg_engine_entry_t bad = good;
  bad.tokens = bad_tok;
  RG_CHECK_ERR(rg_engine_forward(e, &bad, 1, l2),
               "entry 0: token id 1073741824 (its token 7) is outside the vocabulary");
  bad = good, bad.n_blocks = 1;
  RG_CHECK_ERR(rg_engine_forward(e, &bad, 1, l2),
               "a table of 1 blocks of 16 tokens cannot hold positions up to 19");
  int32_t far[2] = {0, 9};
  bad = good, bad.blocks = far;
  RG_CHECK_ERR(rg_engine_forward(e, &bad, 1, l2),
               "block 9 (table slot 1) is outside the pool of 4");
  bad = good, bad.pos = 250;
  RG_CHECK_ERR(rg_engine_forward(e, &bad, 1, l2),
               "positions 250..269 are past the context limit of 256 tokens");
  // Two entries, the second bad: the first did not run either (its logits
  // would otherwise differ on the rerun below, the KV being the same).
  rg_engine_entry_t two[2] = {good, bad};
  RG_CHECK_ERR(rg_engine_forward(e, two, 2, l2), "entry 1:");
  RG_CHECK_OK(rg_engine_forward(e, &good, 1, l2));
  RG_CHECK(!memcmp(l1, l2, V * sizeof(float)));
  free(l1), free(l2);
  rg_engine_destroy(e);
}

RG_TEST(cli_run_streams_and_reports) {
  const char *dir = make_model(t, RG_TESTMODEL_MOE, "m");
  RG_REQUIRE(dir);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "run --model %s --prompt 'hello world' -n 8 --temperature 0 --json",
           dir);
  char *out;
  int rc = rg_test_run_ridge(t, cmd, &out);
  RG_CHECK(rc == 0);
  cJSON *j = cJSON_Parse(out);
  RG_REQUIRE(j);
  RG_CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(j, "tokens")) == 8);
  RG_CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "decode_tokens_per_s")) > 0);
  RG_CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "read_bandwidth_gb_per_s")) > 0);
  RG_CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "device_class")), "local-cpu"));
  cJSON_Delete(j);
  free(out);
  snprintf(cmd, sizeof cmd,
           "run --model %s --prompt 'hello world' -n 4 --temperature 0 --no-measure", dir);
  rc = rg_test_run_ridge(t, cmd, &out);
  RG_CHECK(rc == 0);
  RG_CHECK_CONTAINS(out, "hello world");
  RG_CHECK_CONTAINS(out, "TTFT");
  RG_CHECK_CONTAINS(out, "tokens/s");
  free(out);
}

RG_TEST(cli_run_bad_inputs) {
  char *out;
  int rc = rg_test_run_ridge(t, "run --model /nonexistent/model -n 4", &out);
  RG_CHECK(rc == 2);
  RG_CHECK_CONTAINS(out, "ridge run: ");
  RG_CHECK_CONTAINS(out, "/nonexistent/model");
  free(out);
  rc = rg_test_run_ridge(t, "run -n 0", &out);
  RG_CHECK(rc == 2);
  RG_CHECK_CONTAINS(out, "-n: expected a whole number from 1");
  free(out);
  rc = rg_test_run_ridge(t, "run --prompt-ids 1,x,3", &out);
  RG_CHECK(rc == 2);
  RG_CHECK_CONTAINS(out, "--prompt-ids: expected comma-separated token ids");
  free(out);
  // A truncated weights file names the file.
  const char *dir = make_model(t, RG_TESTMODEL_LLAMA, "cut");
  RG_REQUIRE(dir);
  char path[1200], cmd[2400];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  RG_REQUIRE(truncate(path, 5000) == 0);
  snprintf(cmd, sizeof cmd, "run --model %s -n 4 --no-measure", dir);
  rc = rg_test_run_ridge(t, cmd, &out);
  RG_CHECK(rc != 0 && rc < 128);
  RG_CHECK_CONTAINS(out, "model.safetensors");
  free(out);
}

// --profile-ops breaks the stages' time down by op kind: every op a llama
// layer runs is there, inside the stages' measured time; with workers it is
// refused by name.
RG_TEST(cli_run_profile_ops_breaks_stages_down_by_op) {
  const char *dir = make_model(t, RG_TESTMODEL_LLAMA, "ops");
  RG_REQUIRE(dir);
  char cmd[1400];
  snprintf(cmd, sizeof cmd,
           "run --model %s --prompt-ids 1,2,3,4 -n 6 --temperature 0 --no-measure --json "
           "--profile-ops",
           dir);
  char *out = NULL;
  RG_CHECK(rg_test_run_ridge(t, cmd, &out) == 0);
  cJSON *j = cJSON_Parse(out);
  RG_REQUIRE(j);
  double stage_s = 0, op_s = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "stages")) {
    stage_s += cJSON_GetNumberValue(cJSON_GetObjectItem(e, "measured_s"));
  }
  static const char *const want[] = {"embed",    "rmsnorm",   "matmul", "rope",
                                     "kv_write", "attention", "swiglu", "add"};
  int seen[8] = {0};
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "ops")) {
    const char *op = cJSON_GetStringValue(cJSON_GetObjectItem(e, "op"));
    double calls = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "calls"));
    double sec = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "seconds"));
    RG_CHECK(op && calls >= 1 && sec > 0);
    op_s += sec;
    for (int k = 0; op && k < 8; k++) seen[k] |= !strcmp(op, want[k]);
    // The tiny llama has 2 layers and 7 matmuls each, plus lm_head's: at
    // least 15 a step over 6 steps.
    if (op && !strcmp(op, "matmul")) RG_CHECK(calls >= 6 * 15);
  }
  for (int k = 0; k < 8; k++)
    if (!seen[k]) rg_test_fail(t, __FILE__, __LINE__, "op %s missing from \"ops\"", want[k]);
  RG_CHECK(op_s > 0 && op_s <= stage_s * 1.001);
  cJSON_Delete(j);
  free(out);
  snprintf(cmd, sizeof cmd, "run --model %s --prompt-ids 1,2 -n 2 --no-measure --profile-ops", dir);
  RG_CHECK(rg_test_run_ridge(t, cmd, &out) == 0);
  RG_CHECK_CONTAINS(out, "per op (--profile-ops");
  RG_CHECK_CONTAINS(out, "of stages");
  free(out);
  snprintf(cmd, sizeof cmd,
           "run --model %s --prompt-ids 1,2 -n 2 --layout attention-ffn --profile-ops", dir);
  RG_CHECK(rg_test_run_ridge(t, cmd, &out) == 2);
  RG_CHECK_CONTAINS(out, "--profile-ops times the ops of this process's stages");
  free(out);
}

// Weights used from the file mapping and from huge-page copies give the
// same logits bit for bit where both stay in rows (the copy changes where
// bytes live, not values): at a level whose CPU device packs no weights.
// At avx512-bf16 the copy packs bf16 matrices into panels (docs/cpu-
// kernels.md), whose kernel rounds x to bf16 at every m, and the mapping
// keeps the rows: the two then agree to that rounding (NMSE ~1e-6).
static double forward_logits(rg_test_ctx_t *t, const char *dir, int load, int isa, float **out) {
  rg_engine_options_t o = {0};
  o.load = load;
  o.isa = isa;
  rg_engine_t *e;
  rg_status_t st = rg_engine_create(dir, &o, &e);
  if (st) {
    rg_test_fail(t, __FILE__, __LINE__, "%s", rg_status_message(st));
    rg_status_free(st);
    return 0;
  }
  int64_t V = rg_engine_vocab(e);
  *out = malloc((size_t)V * sizeof(float));
  int32_t toks[] = {4, 8, 15, 16, 23, 42}, blocks[] = {0};
  rg_engine_entry_t b = {0, 6, toks, blocks, 1, 1};
  RG_CHECK_OK(rg_engine_forward(e, &b, 1, *out));
  rg_engine_destroy(e);
  return (double)V;
}

RG_TEST(engine_mmap_and_copied_weights_agree) {
  const char *dir = make_model(t, RG_TESTMODEL_MOE, "m");
  RG_REQUIRE(dir);
  // Rows in both: the best level where it packs nothing, else avx512.
  const int packs = rg_matmul_preferred_layout(RG_CPU_ISA_AUTO, RG_BF16) != RG_WLAYOUT_ROWS;
  const int rows_isa = packs ? RG_CPU_ISA_AVX512 : RG_CPU_ISA_AUTO;
  float *logits[2] = {NULL, NULL};
  int64_t V = 0;
  for (int mode = 0; mode < 2; mode++)
    V = (int64_t)forward_logits(t, dir, mode ? RG_LOAD_COPY : RG_LOAD_MMAP, rows_isa,
                                &logits[mode]);
  RG_REQUIRE(V > 0 && logits[0] && logits[1]);
  RG_CHECK(!memcmp(logits[0], logits[1], (size_t)V * sizeof(float)));
  free(logits[0]);
  free(logits[1]);
  if (!packs) return;
  for (int mode = 0; mode < 2; mode++)
    forward_logits(t, dir, mode ? RG_LOAD_COPY : RG_LOAD_MMAP, RG_CPU_ISA_AUTO, &logits[mode]);
  RG_REQUIRE(logits[0] && logits[1]);
  double e = 0, r = 0;
  for (int64_t i = 0; i < V; i++) {
    e += ((double)logits[1][i] - logits[0][i]) * ((double)logits[1][i] - logits[0][i]);
    r += (double)logits[0][i] * logits[0][i];
  }
  if (!(e <= 1e-4 * r && memcmp(logits[0], logits[1], (size_t)V * sizeof(float))))
    rg_test_fail(t, __FILE__, __LINE__,
                 "packed against rows: nmse %.3g (expected below 1e-4, not 0)", r > 0 ? e / r : e);
  free(logits[0]);
  free(logits[1]);
}

// An f16 model: copied, its matrices are packed into f16 panels (at the
// avx512 levels), whose kernel keeps x in f32, so against the mapped rows the
// logits differ only by f32 summation order (NMSE far below the bf16
// panels' 1e-4); at avx2, where nothing is packed, they are the same bits.
RG_TEST(engine_mmap_and_copied_f16_weights_agree) {
  const char *dir = rg_test_tmpdir(t);
  rg_testmodel_opts_t mo = {.arch = RG_TESTMODEL_MOE,
                            .seed = 7,
                            .dtype = RG_F16,
                            .gguf_type = RG_DTYPE_COUNT,
                            .force = 1};
  RG_REQUIRE_OK(rg_testmodel_write(dir, &mo, NULL));
  const char *model = dir;
  float *logits[2] = {NULL, NULL};
  int64_t V = 0;
  for (int mode = 0; mode < 2; mode++)
    V = (int64_t)forward_logits(t, model, mode ? RG_LOAD_COPY : RG_LOAD_MMAP, RG_CPU_ISA_AVX2,
                                &logits[mode]);
  RG_REQUIRE(V > 0 && logits[0] && logits[1]);
  RG_CHECK(!memcmp(logits[0], logits[1], (size_t)V * sizeof(float)));
  free(logits[0]);
  free(logits[1]);
  if (rg_matmul_preferred_layout(RG_CPU_ISA_AUTO, RG_F16) != RG_WLAYOUT_F16_PANELS) {
    rg_test_skip(t, "this CPU packs no f16 panels (below avx512)");
    return;
  }
  for (int mode = 0; mode < 2; mode++)
    forward_logits(t, model, mode ? RG_LOAD_COPY : RG_LOAD_MMAP, RG_CPU_ISA_AUTO, &logits[mode]);
  RG_REQUIRE(logits[0] && logits[1]);
  const double e = nmse(logits[1], logits[0], (size_t)V);
  if (!(e <= 1e-9))
    rg_test_fail(t, __FILE__, __LINE__, "f16 panels against rows: nmse %.3g (expected below 1e-9)",
                 e);
  free(logits[0]);
  free(logits[1]);
}

// Stage instances over ranges of one layer run the same kernels in the same
// order as one instance over all layers: the same logits, bit for bit.
RG_TEST(engine_stage_splits_give_identical_logits) {
  static const rg_testmodel_arch_t archs[] = {RG_TESTMODEL_LLAMA, RG_TESTMODEL_MOE};
  for (int ai = 0; ai < 2; ai++) {
    const char *dir = make_model(t, archs[ai], ai ? "moe" : "llama");
    RG_REQUIRE(dir);
    float *l[2] = {NULL, NULL};
    size_t V = 0;
    for (int split = 0; split < 2; split++) {
      rg_engine_options_t o = {0};
      o.layers_per_stage = split;  // 0: whole; 1: one layer per instance
      rg_engine_t *e;
      RG_REQUIRE_OK(rg_engine_create(dir, &o, &e));
      RG_CHECK(rg_engine_stage_count(e) ==
               (split ? 2 + 2 * (size_t)rg_engine_arch(e)->n_layers : 4));
      V = (size_t)rg_engine_vocab(e);
      l[split] = malloc(2 * V * sizeof(float));
      int32_t a[] = {4, 8, 15, 16, 23, 42, 7, 9, 11}, b[] = {99}, ba[] = {0}, bb[] = {1};
      rg_engine_entry_t en[2] = {{0, 9, a, ba, 1, 1}, {0, 1, b, bb, 1, 1}};
      RG_CHECK_OK(rg_engine_forward(e, en, 2, l[split]));
      rg_engine_destroy(e);
    }
    RG_CHECK(!memcmp(l[0], l[1], 2 * V * sizeof(float)));
    free(l[0]), free(l[1]);
  }
}

// Each stage counts its step with graphs' formulas: over a uniform prefill
// the stages sum to what rg_stage_costs predicts for the whole model.
RG_TEST(engine_stage_counters_use_the_planner_formulas) {
  const char *dir = make_model(t, RG_TESTMODEL_MOE, "moe");
  RG_REQUIRE(dir);
  rg_engine_options_t o = {0};
  o.kv_dtype = RG_F32, o.kv_dtype_set = 1;
  rg_engine_t *e;
  RG_REQUIRE_OK(rg_engine_create(dir, &o, &e));
  int32_t toks[32], blocks[2] = {0, 1};
  for (int i = 0; i < 32; i++) toks[i] = i + 3;
  float *logits = malloc((size_t)rg_engine_vocab(e) * sizeof(float));
  rg_engine_entry_t en = {0, 32, toks, blocks, 2, 1};
  RG_REQUIRE_OK(rg_engine_forward(e, &en, 1, logits));
  const rg_arch_t *a = rg_engine_arch(e);
  rg_shape_t sh = {RG_PHASE_PREFILL, 1,     32, 0, rg_model_weight_type(rg_engine_model(e)),
                   RG_F32,           RG_F32};
  rg_stage_cost_t c[RG_MAX_STAGE_COSTS];
  size_t nc;
  RG_REQUIRE_OK(rg_stage_costs(a, &sh, c, RG_MAX_STAGE_COSTS, &nc));
  static const char *const kinds[] = {"embed", "attention", "moe", "lm_head"};
  for (size_t i = 0; i < rg_engine_stage_count(e); i++) {
    const rg_stage_t *s = rg_engine_stage_at(e, i);
    rg_stage_counters_t sc;
    rg_stage_counters(s, &sc);
    const rg_stage_cost_t *want = rg_stage_find(c, nc, kinds[i]);
    RG_REQUIRE(want);
    RG_CHECK_NEAR(sc.flops + 1, want->flops + 1, 1e-12);
    RG_CHECK_NEAR(sc.weight_bytes + 1, want->weight_bytes + 1, 1e-12);
    RG_CHECK(sc.steps == 1 && sc.tokens == 32 && sc.seconds > 0);
    printf("    %-28s %9.3g FLOP %9.3g B  %8.1f us\n", rg_stage_name(s), sc.flops,
           sc.weight_bytes + sc.kv_bytes + sc.act_bytes, sc.seconds * 1e6);
  }
  free(logits);
  rg_engine_destroy(e);
}

// The instruction-set cap belongs to the engine: an AVX512 engine gives the
// same bits whether or not an engine at the best level runs beside it.
RG_TEST(engine_isa_cap_is_per_engine) {
  if (rg_cpu_isa_best() < RG_CPU_ISA_AVX512)
    RG_SKIP("this CPU has no AVX-512, so there is no lower level to cap at");
  const char *dir = make_model(t, RG_TESTMODEL_LLAMA, "llama");
  RG_REQUIRE(dir);
  int32_t toks[12] = {4, 8, 15, 16, 23, 42, 7, 9, 11, 13, 17, 19}, blocks[1] = {0};
  rg_engine_entry_t en = {0,      12, toks,
                          blocks, 1,  1};  // m = 12: bf16 GEMV takes vdpbf16ps at the best level
  rg_engine_options_t capped = {0}, best = {0};
  capped.isa = RG_CPU_ISA_AVX512;
  rg_engine_t *a, *b;
  RG_REQUIRE_OK(rg_engine_create(dir, &capped, &a));
  RG_REQUIRE_OK(rg_engine_create(dir, &best, &b));
  size_t V = (size_t)rg_engine_vocab(a);
  float *la = malloc(V * 4), *lb = malloc(V * 4), *la2 = malloc(V * 4);
  RG_CHECK_OK(rg_engine_forward(b, &en, 1, lb));
  RG_CHECK_OK(rg_engine_forward(a, &en, 1, la));
  rg_engine_destroy(b);
  rg_engine_destroy(a);
  RG_REQUIRE_OK(rg_engine_create(dir, &capped, &a));
  RG_CHECK_OK(rg_engine_forward(a, &en, 1, la2));
  rg_engine_destroy(a);
  RG_CHECK(!memcmp(la, la2, V * 4));
  if (rg_cpu_isa_best() >= RG_CPU_ISA_AVX512_BF16) RG_CHECK(memcmp(la, lb, V * 4) != 0);
  free(la), free(lb), free(la2);
}

// One rule for holding the weights, which the engine and every cluster
// worker apply on their own host: AUTO copies a model that fits in a quarter
// of memory into huge pages (a worker that kept the file mapping streamed
// its FFN at 0.6 of the engine's rate), the explicit choices stand.
RG_TEST(engine_weight_policy_is_one_rule) {
  const char *path = make_model(t, RG_TESTMODEL_LLAMA, "llama");
  RG_REQUIRE(path);
  rg_model_t *m = NULL;
  RG_REQUIRE_OK(rg_model_open(path, &m));
  RG_CHECK(rg_engine_copies_weights(RG_LOAD_MMAP, m) == 0);
  RG_CHECK(rg_engine_copies_weights(RG_LOAD_COPY, m) == 1);
  RG_CHECK(rg_engine_copies_weights(RG_LOAD_AUTO, m) == 1);  // a few MB
  rg_model_close(m);
}

// The weights the stages stream, for `ridge run`'s bandwidth reading: every
// matrix but embed's table, and no reading for a model a cache would hold.
RG_TEST(engine_stream_bandwidth_reads_the_streamed_weights) {
  const char *dir = make_model(t, RG_TESTMODEL_LLAMA, "stream");
  RG_REQUIRE(dir);
  rg_engine_t *e;
  RG_REQUIRE_OK(rg_engine_create(dir, NULL, &e));
  const rg_arch_t *a = rg_engine_arch(e);
  int ok = 0;
  double embed = (double)rg_dtype_nbytes(a->weight_dtype, a->vocab * a->d_model, &ok);
  RG_REQUIRE(ok);
  double bytes = -1, all = rg_engine_weight_bytes(e);
  RG_CHECK(rg_engine_stream_bandwidth(e, 1, &bytes) == 0);  // a few MiB: cached, not read
  printf("    streamed %.0f of %.0f bytes of weights (embed's table %.0f)\n", bytes, all, embed);
  RG_CHECK(bytes > 0.5 * (all - embed) && bytes <= 1.01 * (all - embed));
  rg_engine_destroy(e);
}
