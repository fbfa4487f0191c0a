// Serving benchmarks on the ~1 B-parameter random-weight test model (bf16),
// ratios measured in one run, never asserted:
//   1. continuous batching: 64 concurrent requests through the scheduler
//      against the same 64 requests one at a time, throughput ratio
//      (goal >= 6);
//   2. prefix cache: TTFT of a request whose 2,048-token prefix is cached
//      against the same request cold (goal <= 0.2).
// The scheduler's own decision time is bench_sched's. The model is written
// once into $XDG_CACHE_HOME/ridge (or ~/.cache/ridge): about 4.4 GB, ~40 s.
// Run as `env -u OPENBLAS_CORETYPE build/bench_serve [MODEL] [N_REQUESTS]`.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graphs/weights.h"
#include "runtime/engine.h"
#include "runtime/serve.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int fail(rg_status_t st) {
  fprintf(stderr, "bench_serve: %s\n", rg_status_message(st));
  rg_status_free(st);
  return 1;
}

static rg_status_t serve(rg_engine_t *e, const rg_serve_request_t *r, size_t n, const rg_serve_options_t *so,
                         rg_serve_stats_t *st, double *ttft_last) {
  rg_serve_result_t *res = calloc(n, sizeof *res);
  if (!res) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  rg_status_t s = rg_serve(e, r, n, so, res, st);
  if (!s && ttft_last) *ttft_last = res[n - 1].n_tokens ? res[n - 1].times[0] - res[n - 1].arrival : 0;
  rg_serve_results_free(res, n);
  free(res);
  return s;
}

int main(int argc, char **argv) {
  char dir[2048];
  size_t n_req = argc > 2 ? (size_t)atoi(argv[2]) : 64;
  if (n_req < 2) n_req = 2;
  if (argc > 1) {
    snprintf(dir, sizeof dir, "%s", argv[1]);
  } else {
    rg_testmodel_opts_t o = {.arch = RG_TESTMODEL_LLAMA, .size = RG_TESTMODEL_1B, .dtype = RG_BF16,
                             .gguf_type = RG_DTYPE_COUNT};
    fprintf(stderr, "bench_serve: the 1b test model is written to the user cache the first time (~4.4 GB)\n");
    rg_status_t s = rg_testmodel_cached(&o, dir, sizeof dir, NULL);
    if (s) return fail(s);
  }
  enum { PROMPT = 32, NEW = 16, PREFIX = 2048, SUFFIX = 32 };
  rg_engine_options_t eo = {.max_seqs = (int)n_req, .max_context = 4096, .kv_tokens = (int64_t)n_req * 128 + 8192};
  rg_engine_t *e;
  rg_status_t s = rg_engine_create(dir, &eo, &e);
  if (s) return fail(s);
  printf("bench_serve: %s (%s), %d threads\n", dir, rg_engine_describe(e), rg_engine_threads(e));

  // 1. The same requests batched and one at a time (greedy, all at t = 0).
  int32_t *ids = malloc(n_req * PROMPT * sizeof(int32_t));
  rg_serve_request_t *r = calloc(n_req, sizeof *r);
  if (!ids || !r) return fail(rg_status_make(RG_OUT_OF_MEMORY, "out of memory"));
  for (size_t i = 0; i < n_req; i++) {
    for (int k = 0; k < PROMPT; k++) ids[i * PROMPT + (size_t)k] = (int32_t)(1 + (i * 977 + (size_t)k * 31) % 30000);
    r[i] = (rg_serve_request_t){i, ids + i * PROMPT, PROMPT, NEW, {0, 0, 1, 0}, 0};
  }
  rg_serve_stats_t st;
  rg_serve_options_t so = {.max_batch_tokens = 2048, .max_seqs = (int)n_req};
  if ((s = serve(e, r, 2, &so, &st, NULL))) return fail(s);  // warm up
  double t0 = now();
  if ((s = serve(e, r, n_req, &so, &st, NULL))) return fail(s);
  double batched = now() - t0;
  double b_tps = (double)st.new_tokens / batched;
  t0 = now();
  int64_t alone_tokens = 0;
  for (size_t i = 0; i < n_req; i++) {
    if ((s = serve(e, &r[i], 1, &so, &st, NULL))) return fail(s);
    alone_tokens += st.new_tokens;
  }
  double alone = now() - t0;
  double a_tps = (double)alone_tokens / alone;
  printf("1. continuous batching, %zu requests of %d + %d tokens: %.1f tokens/s batched vs %.1f one at a time = %.1fx "
         "(goal >= 6)\n",
         n_req, PROMPT, NEW, b_tps, a_tps, b_tps / a_tps);

  // 2. A 2,048-token shared prefix: cold, then cached.
  int32_t *pre = malloc((PREFIX + SUFFIX) * 2 * sizeof(int32_t));
  if (!pre) return fail(rg_status_make(RG_OUT_OF_MEMORY, "out of memory"));
  for (int k = 0; k < PREFIX; k++) pre[k] = pre[PREFIX + SUFFIX + k] = (int32_t)(5 + (k * 131) % 30000);
  for (int k = 0; k < SUFFIX; k++) {
    pre[PREFIX + k] = (int32_t)(7 + k);
    pre[2 * PREFIX + SUFFIX + k] = (int32_t)(900 + k);
  }
  rg_serve_request_t pr[2] = {{0, pre, PREFIX + SUFFIX, 2, {0, 0, 1, 0}, 0},
                              {1, pre + PREFIX + SUFFIX, PREFIX + SUFFIX, 2, {0, 0, 1, 0}, 0}};
  rg_serve_options_t cold = {.max_batch_tokens = 512, .max_seqs = 1, .prefix_cache = 0};
  rg_serve_options_t warm = cold;
  warm.prefix_cache = 1;
  double ttft_cold, ttft_warm;
  if ((s = serve(e, &pr[1], 1, &cold, &st, &ttft_cold))) return fail(s);
  // With the cache on, the first request leaves its prefix blocks cached;
  // the second arrives after it is done and finds them.
  pr[1].arrival = 1.5 * ttft_cold + 0.5;
  if ((s = serve(e, pr, 2, &warm, &st, &ttft_warm))) return fail(s);
  printf("2. prefix cache, %d-token shared prefix + %d: TTFT %.3f s cached vs %.3f s cold = %.3f (goal <= 0.2); %lld "
         "of %lld prompt tokens hit\n",
         PREFIX, SUFFIX, ttft_warm, ttft_cold, ttft_warm / ttft_cold, (long long)st.prefix_hit_tokens,
         (long long)st.prefix_lookup_tokens);
  free(pre), free(ids), free(r);
  rg_engine_destroy(e);
  return 0;
}
