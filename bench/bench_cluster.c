// The dataflow runtime against the single-process engine, on the ~1 B
// random-weight test model (bf16), ratios in one run, never asserted:
//   1. attention-FFN over shm with two micro-batches in ping-pong against the
//      single process on the same two cores, 16 sequences decoding:
//      throughput ratio (goal >= 0.9), and the same split taking turns (one
//      micro-batch, both cores per side);
//   2. prefill-decode against colocated on a mix of long (8K-token, as the
//      issue's workload) and 128-token prompts arriving over time: TBT p99
//      ratio (goal <= 0.5) and throughput ratio.
// Every process gets a thread per core, as `ridge run` gives it: a worker
// waiting for its peer parks its threads, so the one computing has both
// cores. (One thread a side had held ping-pong to 0.51 of the single
// process on a 2-core VM: the FFN side has four fifths of the weights and
// ran on one core; 0.67-0.72 with two each, three alternated runs.) The
// per-link table shows what moved and how fast.
// Run as `env -u OPENBLAS_CORETYPE build/bench_cluster [--afd | --pd] [MODEL] [LONG_PROMPT]`
// (--afd or --pd: only that part; LONG_PROMPT default 8192; on a 2-core VM the AFD part
// takes about a minute and the prefill-decode part 15-20 minutes, most of it the
// colocated and disaggregated prefills of the three 8K prompts).
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "graphs/weights.h"
#include "runtime/cluster.h"
#include "runtime/engine.h"
#include "runtime/model.h"
#include "runtime/serve.h"

static int fail(rg_status_t st) {
  fprintf(stderr, "bench_cluster: %s\n", rg_status_message(st));
  rg_status_free(st);
  return 1;
}

static char ridge_bin[PATH_MAX];

typedef struct {
  double tps, tbt_p99, tbt_p50, ttft_p50, wall;
  int64_t tokens, failed;
} figures_t;

static rg_status_t run(const char *dir, const rg_cluster_layout_t *layout, int threads,
                       const rg_serve_request_t *r, size_t n, const rg_serve_options_t *so,
                       figures_t *f) {
  rg_engine_options_t eo = {
      .threads = threads, .max_seqs = 32, .max_context = 8192 + 64, .kv_tokens = 48 * 1024};
  rg_serve_result_t *res = calloc(n, sizeof *res);
  if (!res) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  rg_serve_stats_t st;
  rg_status_t s;
  rg_engine_t *e = NULL;
  rg_cluster_t *c = NULL;
  if (!layout) {
    s = rg_engine_create(dir, &eo, &e);
    if (!s) s = rg_serve(e, r, n, so, res, &st);
  } else {
    rg_cluster_options_t co = {.model_path = dir,
                               .layout = *layout,
                               .engine = eo,
                               .launch = 1,
                               .ridge_binary = ridge_bin,
                               .quiet = 1,
                               .step_timeout_s = 120};
    s = rg_cluster_create(&co, &c);
    rg_executor_t x = c ? rg_cluster_executor(c) : (rg_executor_t){0};
    if (!s) s = rg_serve_on(&x, r, n, so, res, &st);
    if (!s) {
      printf("    links:");
      for (size_t i = 0; i < rg_cluster_link_count(c); i++) {
        rg_cluster_link_info_t li;
        rg_cluster_link_info(c, i, &li);
        printf("%s %s->%s %.1f MB in %lld msgs, %.2f GB/s%s", i ? ";" : "", li.from, li.to,
               li.bytes / 1e6, (long long)li.messages,
               li.seconds > 0 ? li.bytes / li.seconds / 1e9 : 0, li.kv ? " (KV by RMA)" : "");
      }
      printf("\n");
    }
  }
  if (!s)
    *f = (figures_t){st.tokens_per_s, st.tbt.p99,    st.tbt.p50, st.ttft.p50,
                     st.wall_s,       st.new_tokens, st.failed};
  rg_serve_results_free(res, n);
  free(res);
  rg_engine_destroy(e);
  rg_cluster_destroy(c);
  return s;
}

static void show(const char *name, const figures_t *f) {
  printf(
      "  %-40s %8.1f tokens/s  TTFT p50 %7.1f ms  TBT p50 %7.1f ms  p99 %7.1f ms  (%lld tokens, "
      "%lld failed, %.1f s)\n",
      name, f->tps, f->ttft_p50 * 1e3, f->tbt_p50 * 1e3, f->tbt_p99 * 1e3, (long long)f->tokens,
      (long long)f->failed, f->wall);
}

int main(int argc, char **argv) {
  char dir[2048];
  int want_afd = 1, want_pd = 1;
  while (argc > 1 && (!strcmp(argv[1], "--afd") || !strcmp(argv[1], "--pd"))) {
    if (!strcmp(argv[1], "--afd"))
      want_pd = 0;
    else
      want_afd = 0;
    argv++, argc--;
  }
  if (argc > 1) {
    snprintf(dir, sizeof dir, "%s", argv[1]);
  } else {
    rg_testmodel_opts_t o = {.arch = RG_TESTMODEL_LLAMA,
                             .size = RG_TESTMODEL_1B,
                             .dtype = RG_BF16,
                             .gguf_type = RG_DTYPE_COUNT};
    fprintf(stderr,
            "bench_cluster: the 1b test model is written to the user cache the first "
            "time (~4.4 GB)\n");
    rg_status_t s = rg_testmodel_cached(&o, dir, sizeof dir, NULL);
    if (s) return fail(s);
  }
  int long_prompt = argc > 2 ? atoi(argv[2]) : 8192;
  if (long_prompt < 1 || long_prompt > 30000)
    return fail(rg_status_make(RG_INVALID_ARGUMENT, "LONG_PROMPT: expected 1 to 30000 tokens"));
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return fail(rg_status_make(RG_IO, "cannot find this executable"));
  self[n] = 0;
  snprintf(ridge_bin, sizeof ridge_bin, "%s/ridge", dirname(self));
  rg_model_t *m;
  rg_status_t s = rg_model_open(dir, &m);
  if (s) return fail(s);
  rg_arch_t a = *rg_model_arch(m);
  rg_model_close(m);
  printf("bench_cluster: %s; workers: %s\n", dir, ridge_bin);

  rg_cluster_layout_t l;
  if (want_afd) {
    // 1. Attention-FFN ping-pong, 16 sequences decoding 32 tokens each.
    enum { SEQS = 16, PROMPT = 32, NEW = 32 };
    static int32_t ids[SEQS][PROMPT];
    rg_serve_request_t r[SEQS];
    for (int i = 0; i < SEQS; i++) {
      for (int k = 0; k < PROMPT; k++) ids[i][k] = 1 + (i * 977 + k * 31) % 30000;
      r[i] = (rg_serve_request_t){(uint64_t)i, ids[i], PROMPT, NEW, {0, 0, 1, 0}, 0};
    }
    rg_serve_options_t so = {.max_batch_tokens = 1024, .max_seqs = SEQS};
    printf("\n1. attention-FFN over shm, two micro-batches, %d sequences x %d tokens:\n", SEQS,
           NEW);
    // The same split without ping-pong too: one micro-batch, each worker on
    // both cores, taking turns. Decode here is mostly bound by memory
    // bandwidth, which the two workers share: two micro-batches stream every
    // weight twice per step, so on one memory bus ping-pong stays well below
    // the single process (0.53 on a Zen 4 VM; batch 16 is partly compute-bound,
    // so two batches of 8 do not cost quite twice); taking turns streams each
    // weight once at the full bandwidth and pays only the hops. A split pays
    // its ping-pong where each side has memory of its own. The three run in
    // interleaved rounds and each keeps its best, so on a shared machine they
    // meet the same load.
    enum { ROUNDS = 2 };
    figures_t one = {0}, afd = {0}, turns = {0};
    rg_cluster_layout_t l1;
    if ((s = rg_cluster_layout_afd(&a, "cpu:0", "cpu:0", 2, &l))) return fail(s);
    if ((s = rg_cluster_layout_afd(&a, "cpu:0", "cpu:0", 1, &l1))) return fail(s);
    for (int round = 0; round < ROUNDS; round++) {
      figures_t f;
      if ((s = run(dir, NULL, 2, r, SEQS, &so, &f))) return fail(s);
      if (f.tps > one.tps) one = f;
      if ((s = run(dir, &l, 2, r, SEQS, &so, &f))) return fail(s);
      if (f.tps > afd.tps) afd = f;
      if ((s = run(dir, &l1, 2, r, SEQS, &so, &f))) return fail(s);
      if (f.tps > turns.tps) turns = f;
    }
    printf("  best of %d interleaved rounds:\n", ROUNDS);
    show("single process, 2 threads", &one);
    show("attention | ffn ping-pong, 2 threads each", &afd);
    show("attention | ffn, 1 micro-batch, 2 threads", &turns);
    printf(
        "  throughput ratio, ping-pong %.2f (goal >= 0.9; one memory bus for both sides); "
        "taking turns %.2f\n",
        afd.tps / one.tps, turns.tps / one.tps);
  }
  if (!want_pd) return 0;

  // 2. Prefill-decode vs colocated: short chats decoding while long prompts
  // arrive (one long per eight short), all over a few seconds.
  enum { SHORT = 24, LONGS = 3, SHORT_PROMPT = 128, SHORT_NEW = 48 };
  size_t nr = SHORT + LONGS;
  int32_t *pid = malloc((size_t)(SHORT * SHORT_PROMPT + LONGS * long_prompt) * sizeof(int32_t));
  rg_serve_request_t *q = calloc(nr, sizeof *q);
  if (!pid || !q) return fail(rg_status_make(RG_OUT_OF_MEMORY, "out of memory"));
  int32_t *p = pid;
  for (size_t i = 0; i < nr; i++) {
    int lng = i % 9 == 4;
    int len = lng ? long_prompt : SHORT_PROMPT;
    for (int k = 0; k < len; k++) p[k] = 1 + (int32_t)((i * 7919 + (size_t)k * 13) % 30000);
    q[i] = (rg_serve_request_t){
        i, p, (size_t)len, lng ? 8 : SHORT_NEW, {0, 0, 1, 0}, 0.25 * (double)i};
    p += len;
  }
  rg_serve_options_t so2 = {.max_batch_tokens = 512, .max_seqs = 32};
  printf(
      "\n2. prefill-decode vs colocated: %d chats (%d-token prompts) and %d prompts of %d "
      "tokens, one every 0.25 s:\n",
      SHORT, SHORT_PROMPT, LONGS, long_prompt);
  figures_t col, pd;
  if ((s = run(dir, NULL, 2, q, nr, &so2, &col))) return fail(s);
  show("colocated (one process, 2 threads)", &col);
  if ((s = rg_cluster_layout_pd(&a, "cpu:0", "cpu:0", 16, 16, &l))) return fail(s);
  if ((s = run(dir, &l, 1, q, nr, &so2, &pd))) return fail(s);
  show("prefill | decode, 1 thread each", &pd);
  printf("  TBT p99 ratio %.2f (goal <= 0.5); throughput ratio %.2f\n",
         col.tbt_p99 > 0 ? pd.tbt_p99 / col.tbt_p99 : 0, col.tps > 0 ? pd.tps / col.tps : 0);
  free(pid);
  free(q);
  return 0;
}
