// Continuous batching over sched/ (runtime/serve.h) and `ridge run` with
// many requests: outputs that do not depend on how requests were batched,
// preempted, swapped or prefix-cached; bad requests that fail alone; valid
// UTF-8 JSON; the KV memory check; non-finite weights named by stage and
// layer; synthetic workloads.
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>

#include "base/utf8.h"
#include "graphs/weights.h"
#include "planner/workload_gen.h"
#include "runtime/engine.h"
#include "runtime/serve.h"
#include "tests/test.h"

static const char *model_dir(rg_test_ctx_t *t, rg_testmodel_arch_t arch, const char *sub) {
  return rg_test_tiny_model(t, arch, sub, 5);
}

// n greedy requests of the given lengths; prompts share their first `shared`
// tokens.
static void make_requests(rg_serve_request_t *r, int32_t *ids, size_t n, size_t len, size_t shared,
                          int64_t out) {
  for (size_t i = 0; i < n; i++) {
    for (size_t k = 0; k < len; k++)
      ids[i * len + k] = (int32_t)(k < shared ? (k * 13 + 5) % 500 : (i * 31 + k * 7) % 500);
    r[i] = (rg_serve_request_t){i, ids + i * len, len, out, {0, 0, 1, 0}, 0};
  }
}

static rg_status_t serve_once(const char *dir, const rg_engine_options_t *eo,
                              const rg_serve_options_t *so, const rg_serve_request_t *r, size_t n,
                              rg_serve_result_t *res, rg_serve_stats_t *st) {
  rg_engine_t *e;
  RG_RETURN_IF_ERROR(rg_engine_create(dir, eo, &e));
  rg_status_t s = rg_serve(e, r, n, so, res, st);
  rg_engine_destroy(e);
  return s;
}

static int same_outputs(const rg_serve_result_t *a, const rg_serve_result_t *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (a[i].n_tokens != b[i].n_tokens ||
        memcmp(a[i].tokens, b[i].tokens, (size_t)a[i].n_tokens * 4))
      return 0;
  return 1;
}

// Greedy outputs are the same whether requests run alone with room to
// spare, or squeezed into a pool so small that the scheduler preempts them
// (recompute), or swaps them to the host tier and back, or shares prefix
// blocks between them. With batch-invariant kernels, which is what that
// option is for: by default batch-1 decode takes a faster kernel than
// batches do, and a random-weight model's near-ties then flip.
RG_TEST(serve_outputs_survive_preemption_swap_and_prefix_sharing) {
  const char *dir = model_dir(t, RG_TESTMODEL_LLAMA, "m");
  RG_REQUIRE(dir);
  enum { N = 6, LEN = 40, OUT = 24 };
  int32_t ids[N * LEN];
  rg_serve_request_t r[N];
  make_requests(r, ids, N, LEN, 32, OUT);
  rg_serve_result_t base[N], got[N];
  rg_serve_stats_t st;
  rg_engine_options_t roomy = {.batch_invariant = 1};
  rg_serve_options_t so = {.max_batch_tokens = 64};
  RG_REQUIRE_OK(serve_once(dir, &roomy, &so, r, N, base, &st));
  for (size_t i = 0; i < N; i++)
    RG_CHECK(base[i].n_tokens == OUT && !strcmp(base[i].finish, "length"));
  RG_CHECK(st.preempt_recompute == 0 && st.prefix_hit_tokens == 0);

  // A pool of 12 blocks of 16 for six requests of 64 positions: preemption.
  rg_engine_options_t tight = {.kv_tokens = 12 * 16, .block_size = 16, .batch_invariant = 1};
  RG_REQUIRE_OK(serve_once(dir, &tight, &so, r, N, got, &st));
  printf("    recompute: %lld preemptions\n", (long long)st.preempt_recompute);
  RG_CHECK(st.preempt_recompute > 0);
  RG_CHECK(same_outputs(base, got, N));
  rg_serve_results_free(got, N);

  // The same pool with a host swap tier: preempted KV goes down and comes back.
  rg_engine_options_t swap = tight;
  swap.swap_tokens = 16 * 16;
  so.preempt = RG_SCHED_PREEMPT_SWAP;
  RG_REQUIRE_OK(serve_once(dir, &swap, &so, r, N, got, &st));
  printf("    swap: %lld preemptions by swap, %lld by recompute\n", (long long)st.preempt_swap,
         (long long)st.preempt_recompute);
  RG_CHECK(st.preempt_swap > 0);
  RG_CHECK(same_outputs(base, got, N));
  rg_serve_results_free(got, N);

  // Prefix cache: the 32 shared tokens are two full blocks of 16, found for
  // every request after the first that was computed.
  so = (rg_serve_options_t){.max_batch_tokens = 64, .prefix_cache = 1, .max_seqs = 1};
  RG_REQUIRE_OK(serve_once(dir, &roomy, &so, r, N, got, &st));
  printf("    prefix cache: %lld of %lld prompt tokens hit\n", (long long)st.prefix_hit_tokens,
         (long long)st.prefix_lookup_tokens);
  RG_CHECK(st.prefix_hit_tokens == (N - 1) * 32);
  for (size_t i = 1; i < N; i++) RG_CHECK(got[i].cached_tokens == 32);
  RG_CHECK(same_outputs(base, got, N));
  rg_serve_results_free(got, N);
  rg_serve_results_free(base, N);
}

// A request that can never run fails alone with its reason, before it holds
// any KV; the others run, and timing figures come out for them.
RG_TEST(serve_bad_requests_fail_alone) {
  const char *dir = model_dir(t, RG_TESTMODEL_LLAMA, "m");
  RG_REQUIRE(dir);
  int32_t good[4] = {1, 2, 3, 4}, bad[3] = {1, 1 << 20, 2}, long_p[5000];
  for (int i = 0; i < 5000; i++) long_p[i] = i % 300;
  rg_serve_request_t r[4] = {{0, good, 4, 5, {0, 0, 1, 0}, 0},
                             {1, bad, 3, 5, {0, 0, 1, 0}, 0},
                             {2, long_p, 5000, 5, {0, 0, 1, 0}, 0},
                             {3, good, 4, 5, {0, 0, 1, 0}, 0.02}};
  rg_engine_options_t eo = {.max_context = 1024};
  rg_serve_options_t so = {0};
  rg_serve_result_t res[4];
  rg_serve_stats_t st;
  RG_REQUIRE_OK(serve_once(dir, &eo, &so, r, 4, res, &st));
  RG_CHECK(res[0].n_tokens == 5 && res[3].n_tokens == 5);
  RG_CHECK(!memcmp(res[0].tokens, res[3].tokens, 5 * 4));
  RG_CHECK(!strcmp(res[1].finish, "error") &&
           strstr(res[1].error, "prompt token 1 is id 1048576, outside the vocabulary"));
  RG_CHECK(!strcmp(res[2].finish, "error") && strstr(res[2].error, "exceeds max_context"));
  RG_CHECK(st.failed == 2 && st.new_tokens == 10);
  RG_CHECK(st.ttft.n == 2 && st.tbt.n == 8 && st.ttft.p50 > 0);
  // The late request arrived 20 ms in: it was not served before.
  RG_CHECK(res[3].times[0] >= 0.02);
  rg_serve_results_free(res, 4);
}

// An executor whose KV holder is "lost" (the count kv_losses reports
// moves) after request 0's last token: the engine's own forward underneath.
typedef struct {
  rg_executor_t inner;
  uint64_t losses;
  int tokens0;
} lossy_t;

static rg_status_t lossy_forward(void *impl, const rg_step_entry_t *e, size_t n, float *logits) {
  lossy_t *l = impl;
  return l->inner.forward(l->inner.impl, e, n, logits);
}

static void lossy_counters(void *impl, rg_engine_counters_t *out) {
  lossy_t *l = impl;
  l->inner.counters(l->inner.impl, out);
}

static uint64_t lossy_kv_losses(void *impl, int side, char *why, size_t cap) {
  lossy_t *l = impl;
  if (why && cap) snprintf(why, cap, "its KV was on worker w0-attention, which was lost");
  return side == 0 ? l->losses : 0;
}

static rg_status_t lose_after_request_0(void *ctx, size_t req, int32_t token) {
  (void)token;
  lossy_t *l = ctx;
  if (req == 0 && ++l->tokens0 == 3) l->losses++;
  return NULL;
}

// When the worker holding the KV is lost (and would come back empty), the
// requests holding KV there fail naming it, and a later request with the
// same prompt computes it again instead of taking cached blocks that are
// gone.
RG_TEST(serve_lost_kv_fails_its_holders_and_is_never_hit) {
  const char *dir = model_dir(t, RG_TESTMODEL_LLAMA, "m");
  RG_REQUIRE(dir);
  int32_t p[32], q[8];
  for (int k = 0; k < 32; k++) p[k] = (k * 13 + 5) % 500;
  for (int k = 0; k < 8; k++) q[k] = (k * 7 + 1) % 500;
  rg_serve_request_t r[3] = {{0, p, 32, 3, {0, 0, 1, 0}, 0},
                             {1, q, 8, 40, {0, 0, 1, 0}, 0},
                             {2, p, 32, 3, {0, 0, 1, 0}, 0.3}};
  rg_engine_options_t eo = {.block_size = 16};
  rg_engine_t *e;
  RG_REQUIRE_OK(rg_engine_create(dir, &eo, &e));
  lossy_t l = {.inner = rg_engine_executor(e)};
  rg_executor_t x = l.inner;
  x.impl = &l;
  x.forward = lossy_forward;
  x.counters = lossy_counters;
  x.swap = NULL;
  x.kv_losses = lossy_kv_losses;
  rg_serve_options_t so = {
      .max_batch_tokens = 64, .prefix_cache = 1, .on_token = lose_after_request_0, .ctx = &l};
  rg_serve_result_t res[3];
  rg_serve_stats_t st;
  rg_status_t s = rg_serve_on(&x, r, 3, &so, res, &st);
  rg_engine_destroy(e);
  RG_REQUIRE_OK(s);
  printf("    request 1: %s \"%s\"; request 2: %lld tokens, %lld cached\n", res[1].finish,
         res[1].error, (long long)res[2].n_tokens, (long long)res[2].cached_tokens);
  RG_CHECK(res[0].n_tokens == 3 && !strcmp(res[0].finish, "length"));
  RG_CHECK(!strcmp(res[1].finish, "error") && strstr(res[1].error, "w0-attention, which was lost"));
  RG_CHECK(res[2].n_tokens == 3 && res[2].cached_tokens == 0);
  RG_CHECK(!memcmp(res[0].tokens, res[2].tokens, 3 * 4));
  RG_CHECK(st.prefix_hit_tokens == 0);
  rg_serve_results_free(res, 3);
}

RG_TEST(serve_percentiles_interpolate) {
  double v[] = {5, 1, 4, 2, 3};
  rg_percentiles_t p = rg_percentiles(v, 5);
  RG_CHECK(p.p50 == 3 && fabs(p.p90 - 4.6) < 1e-12 && fabs(p.p99 - 4.96) < 1e-12 && p.n == 5);
  p = rg_percentiles(v, 0);
  RG_CHECK(p.p50 == 0 && p.n == 0);
}

// ----- `ridge run` -----------------------------------------------------------------

RG_TEST(cli_run_requests_file_names_bad_lines_and_runs_the_rest) {
  const char *dir = model_dir(t, RG_TESTMODEL_LLAMA, "m");
  RG_REQUIRE(dir);
  rg_test_write(
      t, "reqs.jsonl",
      "{\"prompt\": \"hello world\", \"max_tokens\": 6, \"temperature\": 0}\n"
      "\n"
      "# comments and blank lines are skipped\n"
      "{\"prompt_ids\": [1, 2, 3], \"max_tokens\": 0}\n"
      "{\"prompt\": \"x\", \"max_token\": 3}\n"
      "{\"prompt_ids\": [1, 2, 99999]}\n"
      "{\"prompt\": 17}\n"
      "not json at all\n"
      "{\"prompt_ids\": [4, 5, 6], \"max_tokens\": 4, \"arrival_s\": 0.01, \"seed\": 9}\n");
  char cmd[2048], *out;
  snprintf(cmd, sizeof cmd, "run --model %s --requests reqs.jsonl --no-measure --json", dir);
  int rc = rg_test_run_ridge(t, cmd, &out);
  RG_CHECK(rc == 2);  // some lines were bad
  cJSON *j = cJSON_Parse(out);
  RG_REQUIRE(j);
  cJSON *per = cJSON_GetObjectItem(j, "per_request");
  RG_REQUIRE(cJSON_GetArraySize(per) == 7);
  static const char *const want[] = {
      NULL,
      "reqs.jsonl:4: field 'max_tokens': expected a whole number from 1",
      "reqs.jsonl:5: field 'max_token': unknown field",
      "reqs.jsonl:6: field 'prompt_ids': entry 2 is id 99999, outside the vocabulary",
      "reqs.jsonl:7: field 'prompt': expected a string",
      "reqs.jsonl:8: not a JSON object",
      NULL};
  for (int i = 0; i < 7; i++) {
    cJSON *q = cJSON_GetArrayItem(per, i);
    const char *err = cJSON_GetStringValue(cJSON_GetObjectItem(q, "error"));
    if (want[i]) {
      RG_CHECK(err && strstr(err, want[i]));
    } else {
      RG_CHECK(!err);
      RG_CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(q, "new_tokens")) >= 1);
    }
  }
  RG_CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "failed")) == 5);
  RG_CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "ttft_s"), "p99") != NULL);
  RG_CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(j, "stages")) == 4);
  cJSON_Delete(j);
  free(out);
  // Text output: the table, the percentiles, and every error by line.
  snprintf(cmd, sizeof cmd, "run --model %s --requests reqs.jsonl --no-measure", dir);
  rc = rg_test_run_ridge(t, cmd, &out);
  RG_CHECK(rc == 2);
  RG_CHECK_CONTAINS(out, "TTFT p50");
  RG_CHECK_CONTAINS(out, "prefix cache on");
  RG_CHECK_CONTAINS(out, "ridge run: request 2: reqs.jsonl:5: field 'max_token'");
  free(out);
  rc = rg_test_run_ridge(t, "run --requests /nonexistent.jsonl --no-measure", &out);
  RG_CHECK(rc != 0);
  RG_CHECK_CONTAINS(out, "/nonexistent.jsonl");
  free(out);
}

// JSON is valid UTF-8 even when a token ends inside a multi-byte
// character: incomplete bytes become U+FFFD, the raw ids stay beside.
RG_TEST(cli_run_json_text_is_valid_utf8) {
  const char *dir = model_dir(t, RG_TESTMODEL_LLAMA, "m");
  RG_REQUIRE(dir);
  int replaced = 0;
  for (int seed = 0; seed < 4; seed++) {
    char cmd[2048], *out;
    snprintf(cmd, sizeof cmd,
             "run --model %s --prompt-ids 1,2,3 -n 64 --seed %d --temperature 2 --top-k 0 --top-p "
             "1 --no-measure "
             "--json",
             dir, seed);
    RG_CHECK(rg_test_run_ridge(t, cmd, &out) == 0);
    size_t n = strlen(out);
    for (size_t i = 0; i < n;) {
      utf8proc_int32_t cp;
      utf8proc_ssize_t l =
          utf8proc_iterate((const utf8proc_uint8_t *)out + i, (utf8proc_ssize_t)(n - i), &cp);
      if (l <= 0) {
        rg_test_fail(t, __FILE__, __LINE__, "seed %d: invalid UTF-8 at byte %zu of the JSON", seed,
                     i);
        break;
      }
      i += (size_t)l;
    }
    cJSON *j = cJSON_Parse(out);
    RG_CHECK(j != NULL);
    RG_CHECK(cJSON_GetStringValue(cJSON_GetObjectItem(
                 cJSON_GetArrayItem(cJSON_GetObjectItem(j, "per_request"), 0), "text")) != NULL);
    replaced += (int)cJSON_GetNumberValue(cJSON_GetObjectItem(
        cJSON_GetArrayItem(cJSON_GetObjectItem(j, "per_request"), 0), "text_replacements"));
    cJSON_Delete(j);
    free(out);
  }
  printf("    %d replacement characters over 4 runs\n", replaced);
  RG_CHECK(replaced > 0);  // the case the fix is for did come up
}

// `ridge run --batch-invariant`: request 0's logits are the same bits
// decoded alone (batch 1) and as one of five copies decoded together, and
// the JSON says the run used those kernels. (Without the flag they differ
// where the default kernel changes with the batch, as on AMX: printed.)
static unsigned char *run_logits(rg_test_ctx_t *t, const char *dir, int batch, int invariant,
                                 size_t *len, int *said) {
  char cmd[2048], npy[1024], *out = NULL;
  snprintf(npy, sizeof npy, "%s/logits-%d-%d.npy", rg_test_tmpdir(t), batch, invariant);
  snprintf(cmd, sizeof cmd,
           "run --model %s --prompt-ids 5,6,7,8 -n 12 --temperature 0 --batch %d %s "
           "--dump-logits %s --no-measure --json",
           dir, batch, invariant ? "--batch-invariant" : "", npy);
  if (rg_test_run_ridge(t, cmd, &out) != 0) {
    free(out);
    return NULL;
  }
  cJSON *j = cJSON_Parse(out);
  free(out);
  *said = j && cJSON_IsTrue(cJSON_GetObjectItem(j, "batch_invariant"));
  cJSON_Delete(j);
  FILE *f = fopen(npy, "rb");
  if (!f) return NULL;
  unsigned char *buf = malloc(1 << 20);
  *len = buf ? fread(buf, 1, 1 << 20, f) : 0;
  fclose(f);
  return buf;
}

RG_TEST(cli_run_batch_invariant_logits_do_not_depend_on_the_batch) {
  const char *dir = model_dir(t, RG_TESTMODEL_LLAMA, "m");
  RG_REQUIRE(dir);
  size_t n1 = 0, n5 = 0, d1 = 0, d5 = 0;
  int s1 = 0, s5 = 0, sd = 1;
  unsigned char *alone = run_logits(t, dir, 1, 1, &n1, &s1),
                *batched = run_logits(t, dir, 5, 1, &n5, &s5);
  RG_REQUIRE(alone && batched);
  RG_CHECK(s1 && s5);
  RG_CHECK(n1 > 1000 && n1 == n5);
  if (n1 != n5 || memcmp(alone, batched, n1))
    rg_test_fail(t, __FILE__, __LINE__, "batch-invariant logits differ between batch 1 and 5");
  unsigned char *dflt1 = run_logits(t, dir, 1, 0, &d1, &sd),
                *dflt5 = run_logits(t, dir, 5, 0, &d5, &sd);
  RG_REQUIRE(dflt1 && dflt5);
  RG_CHECK(!sd);
  printf("    default kernels: batch 1 and 5 logits %s\n",
         d1 == d5 && !memcmp(dflt1, dflt5, d1) ? "the same" : "differ");
  free(alone), free(batched), free(dflt1), free(dflt5);
}

RG_TEST(utf8_sanitize_replaces_maximal_invalid_subparts) {
  size_t r;
  char *s = rg_utf8_sanitize("ok \xe2\x82\xac", 6, &r);  // a complete euro sign
  RG_CHECK(!strcmp(s, "ok \xe2\x82\xac") && r == 0);
  free(s);
  s = rg_utf8_sanitize("a\xe2\x82", 3, &r);  // cut inside a character: one U+FFFD
  RG_CHECK(!strcmp(s, "a\xef\xbf\xbd") && r == 1);
  free(s);
  s = rg_utf8_sanitize("\x80\x80z", 3, &r);  // two stray continuation bytes: two
  RG_CHECK(!strcmp(s, "\xef\xbf\xbd\xef\xbf\xbdz") && r == 2);
  free(s);
  s = rg_utf8_sanitize("\xc0\xaf", 2, &r);  // an overlong form is invalid
  RG_CHECK(r >= 1);
  free(s);
  s = rg_utf8_sanitize("x\0y", 3, &r);  // NUL cannot travel in a C string
  RG_CHECK(!strcmp(s, "x\xef\xbf\xbdy") && r == 1);
  free(s);
}

// The KV pool is checked against available memory before any allocation.
RG_TEST(cli_run_refuses_a_kv_cache_larger_than_memory) {
  char *out;
  int rc = rg_test_run_ridge(t, "run --kv-tokens 20000M --no-measure -n 2", &out);
  RG_CHECK(rc == 1);
  RG_CHECK_CONTAINS(out, "the KV cache for 20971520000 tokens");
  RG_CHECK_CONTAINS(out, "tokens fit: lower --max-seqs, --max-context or --kv-tokens");
  free(out);
}

// Synthetic requests follow the workload: deterministic for a seed, lengths
// within the distribution's caps and the context, Poisson gaps at the rate.
RG_TEST(workload_sample_is_deterministic_and_follows_the_workload) {
  rg_workload_t *w;
  RG_REQUIRE_OK(rg_workload_load("chat", rg_test_config_dir(), &w));
  enum { N = 4000 };
  rg_gen_request_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
  RG_REQUIRE_OK(rg_workload_sample(w, N, 7, 0, -1, a));
  RG_REQUIRE_OK(rg_workload_sample(w, N, 7, 0, -1, b));
  RG_CHECK(!memcmp(a, b, N * sizeof *a));
  double sum = 0, gaps = 0;
  for (int i = 0; i < N; i++) {
    sum += (double)a[i].prompt_tokens;
    RG_CHECK(a[i].prompt_tokens >= 1 && a[i].prompt_tokens <= (int64_t)w->prompt.max);
    if (i) gaps += a[i].arrival - a[i - 1].arrival;
  }
  printf("    prompt mean %.0f (workload %.0f), arrival rate %.2f/s (workload %.2f/s)\n", sum / N,
         w->prompt.mean, (N - 1) / gaps, w->rate);
  RG_CHECK(fabs(sum / N - w->prompt.mean) < 0.1 * w->prompt.mean);
  RG_CHECK(fabs((N - 1) / gaps - w->rate) < 0.1 * w->rate);
  RG_REQUIRE_OK(rg_workload_sample(w, N, 7, 300, 0, a));
  for (int i = 0; i < N; i++)
    RG_CHECK(a[i].prompt_tokens + a[i].output_tokens <= 300 && a[i].arrival == 0);
  free(a), free(b);
  rg_workload_destroy(w);
}

RG_TEST(cli_run_workload_runs_synthetic_requests) {
  const char *dir = model_dir(t, RG_TESTMODEL_LLAMA, "m");
  RG_REQUIRE(dir);
  char cmd[2048], *out;
  snprintf(cmd, sizeof cmd,
           "run --model %s --workload chat --num-requests 5 --rate 0 --max-context 512 "
           "--no-measure --json",
           dir);
  RG_REQUIRE(rg_test_run_ridge(t, cmd, &out) == 0);
  cJSON *j = cJSON_Parse(out);
  RG_REQUIRE(j);
  RG_CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "requests")) == 5);
  RG_CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "failed")) == 0);
  rg_workload_t *w;
  RG_REQUIRE_OK(rg_workload_load("chat", rg_test_config_dir(), &w));
  rg_gen_request_t g[5];
  RG_REQUIRE_OK(rg_workload_sample(w, 5, 0, 512, 0, g));
  for (int i = 0; i < 5; i++) {
    cJSON *q = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "per_request"), i);
    RG_CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(q, "prompt_tokens")) ==
             (double)g[i].prompt_tokens);
    RG_CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(q, "new_tokens")) <=
             (double)g[i].output_tokens);
  }
  rg_workload_destroy(w);
  cJSON_Delete(j);
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "run --workload nosuch --no-measure", &out) == 2);
  RG_CHECK_CONTAINS(out, "nosuch");
  free(out);
}

// NaN weights are not garbage text with exit 0: the step fails naming the
// first stage and layer whose output was not finite.
RG_TEST(engine_nonfinite_weights_name_the_stage_and_layer) {
  const char *dir = model_dir(t, RG_TESTMODEL_LLAMA, "nan");
  RG_REQUIRE(dir);
  char path[1200];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  // Find layer 1's up_proj in the file and poison it with bf16 NaNs.
  rg_weights_t *w;
  RG_REQUIRE_OK(rg_weights_open(path, &w));
  const rg_tensor_t *tt = rg_weights_find(w, "model.layers.1.mlp.up_proj.weight");
  RG_REQUIRE(tt);
  int fd = open(path, O_RDONLY);
  struct stat sb;
  RG_REQUIRE(fd >= 0 && fstat(fd, &sb) == 0);
  void *base = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  RG_REQUIRE(base != MAP_FAILED);
  // The tensor's bytes in this file: where its mapping sits in ours.
  const unsigned char *want = tt->data;
  off_t off = -1;
  for (off_t o = 0; o + 64 <= sb.st_size && off < 0; o += 2)
    if (!memcmp((const char *)base + o, want, 64)) off = o;
  munmap(base, (size_t)sb.st_size);
  rg_weights_close(w);
  RG_REQUIRE(off >= 0);
  fd = open(path, O_WRONLY);
  uint16_t nan[8] = {0x7fc0, 0x7fc0, 0x7fc0, 0x7fc0, 0x7fc0, 0x7fc0, 0x7fc0, 0x7fc0};
  RG_REQUIRE(fd >= 0 && pwrite(fd, nan, sizeof nan, off) == (ssize_t)sizeof nan);
  close(fd);
  rg_engine_options_t eo = {.layers_per_stage = 1};
  rg_engine_t *e;
  RG_REQUIRE_OK(rg_engine_create(dir, &eo, &e));
  float *logits = malloc((size_t)rg_engine_vocab(e) * 4);
  int32_t toks[] = {1, 2, 3}, blocks[] = {0};
  rg_engine_entry_t en = {0, 3, toks, blocks, 1, 1};
  RG_CHECK_ERR(rg_engine_forward(e, &en, 1, logits),
               "non-finite values first appear after ffn[1,2) on cpu:0 at layer 1");
  free(logits);
  rg_engine_destroy(e);
  char cmd[1400], *out;
  snprintf(cmd, sizeof cmd, "run --model %s --prompt-ids 1,2,3 -n 4 --no-measure", dir);
  RG_CHECK(rg_test_run_ridge(t, cmd, &out) != 0);
  RG_CHECK_CONTAINS(out, "non-finite values first appear after ffn");
  free(out);
}
