// The dataflow runtime (runtime/cluster.h): layouts that cover a model
// exactly once; every layout giving the single-process engine's logits bit
// for bit (greedy, f32 KV, the same kernels); a worker killed mid-run named
// in the error, and used again once it rejoins; workers refused without the
// secret; `ridge run --layout` end to end.
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/fileio.h"
#include "graphs/weights.h"
#include "ops/convert.h"
#include "runtime/cluster.h"
#include "runtime/cluster/cluster_impl.h"
#include "runtime/engine.h"
#include "runtime/model.h"
#include "runtime/serve.h"
#include "runtime/transport.h"
#include "tests/test.h"

static const char *model_dir(rg_test_ctx_t *t, rg_testmodel_arch_t arch, const char *sub) {
  return rg_test_tiny_model(t, arch, sub, 11);
}

static rg_status_t arch_of(const char *dir, rg_arch_t *out) {
  rg_model_t *m;
  RG_RETURN_IF_ERROR(rg_model_open(dir, &m));
  *out = *rg_model_arch(m);
  rg_model_close(m);
  return NULL;
}

static int has(const rg_status_t st, const char *what) {
  return st && strstr(rg_status_message(st), what);
}

// ----- Layouts ---------------------------------------------------------------------

RG_TEST(cluster_layouts_cover_every_layer_and_expert_exactly_once) {
  const char *dense = model_dir(t, RG_TESTMODEL_LLAMA, "dense");
  const char *moe = model_dir(t, RG_TESTMODEL_MOE, "moe");
  RG_REQUIRE(dense && moe);
  rg_arch_t a, m;
  RG_REQUIRE_OK(arch_of(dense, &a));
  RG_REQUIRE_OK(arch_of(moe, &m));
  static rg_cluster_hop_t hops[RG_CLUSTER_MAX_HOPS];
  size_t n;
  rg_cluster_layout_t l;

  // attention-ffn: embed, then per layer attention on w0 and ffn on w1, then lm_head.
  RG_REQUIRE_OK(rg_cluster_layout_afd(&a, "cpu:0", "cpu:0", 2, &l));
  RG_CHECK(l.n_workers == 2 && l.micro_batches == 2);
  RG_REQUIRE_OK(rg_cluster_layout_hops(&a, &l, RG_CLUSTER_ROLE_ALL, hops, RG_CLUSTER_MAX_HOPS, &n));
  RG_CHECK(n == (size_t)(2 + 2 * a.n_layers));
  RG_CHECK(hops[0].kind == RG_STAGE_EMBED && hops[0].worker == 0);
  for (int64_t i = 0; i < a.n_layers; i++) {
    RG_CHECK(hops[1 + 2 * i].kind == RG_STAGE_ATTENTION && hops[1 + 2 * i].worker == 0);
    RG_CHECK(hops[1 + 2 * i].layer == i);
    RG_CHECK(hops[2 + 2 * i].kind == RG_STAGE_FFN && hops[2 + 2 * i].worker == 1);
  }
  RG_CHECK(hops[n - 1].kind == RG_STAGE_LM_HEAD && hops[n - 1].worker == 0);

  // pipeline: the second worker holds the later layers and lm_head.
  RG_REQUIRE_OK(rg_cluster_layout_pipeline(&a, "cpu:0", "cpu:0", &l));
  RG_REQUIRE_OK(rg_cluster_layout_hops(&a, &l, RG_CLUSTER_ROLE_ALL, hops, RG_CLUSTER_MAX_HOPS, &n));
  RG_CHECK(hops[1].worker == 0 && hops[n - 2].worker == 1 && hops[n - 1].worker == 1);

  // experts: each MoE layer runs two instances, the second continuing the first.
  RG_CHECK_ERR(rg_cluster_layout_experts(&a, "cpu:0", "cpu:0", &l), "needs an MoE model");
  RG_REQUIRE_OK(rg_cluster_layout_experts(&m, "cpu:0", "cpu:0", &l));
  RG_REQUIRE_OK(rg_cluster_layout_hops(&m, &l, RG_CLUSTER_ROLE_ALL, hops, RG_CLUSTER_MAX_HOPS, &n));
  RG_CHECK(n == (size_t)(2 + 3 * m.n_layers));
  RG_CHECK(hops[2].kind == RG_STAGE_MOE && !hops[2].continues && hops[3].continues);
  RG_CHECK(hops[2].worker != hops[3].worker);

  // prefill-decode: each role's workers cover the model once; a tier worker
  // runs nothing; a worker of every phase in a PD layout is refused.
  RG_REQUIRE_OK(rg_cluster_layout_pd(&a, "cpu:0", "cpu:0", 16, 64, &l));
  RG_REQUIRE_OK(rg_cluster_layout_add_tier(&l, "cpu:0", 4096));
  RG_CHECK(rg_cluster_layout_is_pd(&l) && l.n_workers == 3);
  RG_CHECK(l.workers[0].block_size == 16 && l.workers[1].block_size == 64);
  RG_REQUIRE_OK(
      rg_cluster_layout_hops(&a, &l, RG_CLUSTER_ROLE_PREFILL, hops, RG_CLUSTER_MAX_HOPS, &n));
  for (size_t i = 0; i < n; i++) RG_CHECK(hops[i].worker == 0);
  RG_REQUIRE_OK(
      rg_cluster_layout_hops(&a, &l, RG_CLUSTER_ROLE_DECODE, hops, RG_CLUSTER_MAX_HOPS, &n));
  for (size_t i = 0; i < n; i++) RG_CHECK(hops[i].worker == 1);
  RG_CHECK_ERR(rg_cluster_layout_hops(&a, &l, RG_CLUSTER_ROLE_ALL, hops, RG_CLUSTER_MAX_HOPS, &n),
               "no all pipeline");
  RG_CHECK_ERR(rg_cluster_layout_add_tier(&l, "cpu:0", 10), "has a capacity tier already");
  l.workers[1].role = RG_CLUSTER_ROLE_ALL;
  RG_CHECK_ERR(
      rg_cluster_layout_hops(&a, &l, RG_CLUSTER_ROLE_PREFILL, hops, RG_CLUSTER_MAX_HOPS, &n),
      "give it the prefill or the decode role");

  // Gaps and doubles are named.
  rg_cluster_layout_t bad;
  RG_REQUIRE_OK(rg_cluster_layout_afd(&a, "cpu:0", "cpu:0", 1, &bad));
  bad.workers[1].n_stages = 0;  // no ffn at all
  rg_status_t st =
      rg_cluster_layout_hops(&a, &bad, RG_CLUSTER_ROLE_ALL, hops, RG_CLUSTER_MAX_HOPS, &n);
  RG_CHECK(has(st, "ffn") && has(st, "layer 0"));
  rg_status_free(st);
  RG_REQUIRE_OK(rg_cluster_layout_afd(&a, "cpu:0", "cpu:0", 1, &bad));
  RG_REQUIRE_OK(
      rg_cluster_worker_add(&bad.workers[1], &bad.workers[0].stages[1]));  // attention twice
  st = rg_cluster_layout_hops(&a, &bad, RG_CLUSTER_ROLE_ALL, hops, RG_CLUSTER_MAX_HOPS, &n);
  RG_CHECK(has(st, "two attention instances"));
  rg_status_free(st);
  // An expert left out of the split.
  RG_REQUIRE_OK(rg_cluster_layout_experts(&m, "cpu:0", "cpu:0", &bad));
  for (int s = 0; s < bad.workers[1].n_stages; s++)
    if (bad.workers[1].stages[s].kind == RG_STAGE_MOE) bad.workers[1].stages[s].n_experts--;
  st = rg_cluster_layout_hops(&m, &bad, RG_CLUSTER_ROLE_ALL, hops, RG_CLUSTER_MAX_HOPS, &n);
  RG_CHECK(has(st, "expert"));
  rg_status_free(st);
}

// ----- Same logits as one process ---------------------------------------------------

enum { N_REQ = 4, LEN = 21, OUT = 6 };

static void make_requests(rg_serve_request_t *r, int32_t *ids) {
  for (size_t i = 0; i < N_REQ; i++) {
    for (size_t k = 0; k < LEN; k++) ids[i * LEN + k] = (int32_t)((i * 37 + k * 11 + 3) % 480);
    r[i] = (rg_serve_request_t){i, ids + i * LEN, LEN - i * 3, OUT, {0, 0, 1, 0}, 0};
  }
}

static rg_engine_options_t exact_options(void) {
  // f32 KV, one thread and AVX-512 without bf16 dot products: the kernels
  // every process picks the same way, so logits can be compared bit for bit.
  return (rg_engine_options_t){.threads = 1,
                               .kv_dtype = RG_F32,
                               .kv_dtype_set = 1,
                               .isa = RG_CPU_ISA_AVX512,
                               .max_seqs = 4,
                               .max_context = 64};
}

static int exact_isa_available(void) {
  return rg_cpu_isa_best() >= RG_CPU_ISA_AVX512;
}

typedef struct {
  float *logits;  // request 0's, OUT rows
  int32_t tokens[N_REQ][OUT];
} outputs_t;

static rg_status_t serve_with(const rg_executor_t *x, int64_t vocab, outputs_t *o) {
  int32_t ids[N_REQ * LEN];
  rg_serve_request_t r[N_REQ];
  make_requests(r, ids);
  rg_serve_result_t res[N_REQ];
  rg_serve_stats_t ss;
  o->logits = calloc((size_t)OUT * (size_t)vocab, sizeof(float));
  if (!o->logits) return rg_status_make(RG_OUT_OF_MEMORY, "oom");
  rg_serve_options_t so = {
      .max_batch_tokens = 24, .max_seqs = 4, .dump_logits = o->logits, .dump_rows = OUT};
  RG_RETURN_IF_ERROR(rg_serve_on(x, r, N_REQ, &so, res, &ss));
  for (size_t i = 0; i < N_REQ; i++)
    for (int k = 0; k < OUT; k++) o->tokens[i][k] = k < res[i].n_tokens ? res[i].tokens[k] : -1;
  rg_serve_results_free(res, N_REQ);
  return NULL;
}

static rg_status_t serve_cluster(const char *dir, const rg_cluster_layout_t *l, int64_t vocab,
                                 const char *trace, outputs_t *o, size_t *links) {
  rg_cluster_options_t co = {.model_path = dir,
                             .layout = *l,
                             .engine = exact_options(),
                             .launch = 1,
                             .ridge_binary = rg_test_ridge_bin(),
                             .trace_path = trace,
                             .quiet = 1,
                             .step_timeout_s = 60};
  rg_cluster_t *c;
  RG_RETURN_IF_ERROR(rg_cluster_create(&co, &c));
  rg_executor_t x = rg_cluster_executor(c);
  rg_status_t st = serve_with(&x, vocab, o);
  if (links) *links = rg_cluster_link_count(c);
  rg_cluster_destroy(c);
  return st;
}

// exact: bit for bit. Otherwise (micro-batches) within rounding: a step
// split in two runs its matmuls at half the rows, and the CPU kernels pick
// their blocking by the row count, so sums round in another order.
static void check_same(rg_test_ctx_t *t, const char *what, const outputs_t *want,
                       const outputs_t *got, int64_t vocab, int exact) {
  size_t diff = 0;
  double md = 0, mx = 0;
  for (size_t k = 0; k < (size_t)OUT * (size_t)vocab; k++) {
    diff += want->logits[k] != got->logits[k];
    md = fmax(md, fabs(want->logits[k] - got->logits[k]));
    mx = fmax(mx, fabs(want->logits[k]));
  }
  printf("    %-34s %zu of %lld logits differ (max %g of %g)\n", what, diff,
         (long long)OUT * (long long)vocab, md, mx);
  if (exact)
    RG_CHECK(diff == 0);
  else
    RG_CHECK(md <= 1e-5 * mx);
  RG_CHECK(!memcmp(want->tokens, got->tokens, sizeof want->tokens));
}

RG_TEST(cluster_every_layout_gives_the_single_process_logits) {
  if (!exact_isa_available()) RG_SKIP("needs AVX-512 for the bit-exact kernels");
  const char *dense = model_dir(t, RG_TESTMODEL_LLAMA, "dense");
  const char *moe = model_dir(t, RG_TESTMODEL_MOE, "moe");
  RG_REQUIRE(dense && moe);
  const char *dirs[2] = {dense, moe};
  for (int d = 0; d < 2; d++) {
    rg_arch_t a;
    RG_REQUIRE_OK(arch_of(dirs[d], &a));
    rg_engine_options_t eo = exact_options();
    rg_engine_t *e;
    RG_REQUIRE_OK(rg_engine_create(dirs[d], &eo, &e));
    rg_executor_t x = rg_engine_executor(e);
    outputs_t want = {0};
    rg_status_t st = serve_with(&x, a.vocab, &want);
    rg_engine_destroy(e);
    RG_REQUIRE_OK(st);
    struct {
      const char *name;
      rg_cluster_layout_t l;
    } ls[5];
    int nl = 0;
    ls[nl].name = "colocated";
    RG_REQUIRE_OK(rg_cluster_layout_colocated(&a, "cpu:0", &ls[nl++].l));
    ls[nl].name = "attention-ffn";
    RG_REQUIRE_OK(rg_cluster_layout_afd(&a, "cpu:0", "cpu:0", 1, &ls[nl++].l));
    ls[nl].name = "attention-ffn, 2 micro-batches";
    RG_REQUIRE_OK(rg_cluster_layout_afd(&a, "cpu:0", "cpu:0", 2, &ls[nl++].l));
    ls[nl].name = "pipeline";
    RG_REQUIRE_OK(rg_cluster_layout_pipeline(&a, "cpu:0", "cpu:0", &ls[nl++].l));
    if (a.n_experts) {
      ls[nl].name = "experts";
      RG_REQUIRE_OK(rg_cluster_layout_experts(&a, "cpu:0", "cpu:0", &ls[nl++].l));
    }
    printf("    %s:\n", d ? "moe" : "llama");
    for (int k = 0; k < nl; k++) {
      outputs_t got = {0};
      size_t links = 0;
      st = serve_cluster(dirs[d], &ls[k].l, a.vocab, NULL, &got, &links);
      RG_CHECK_OK(st);
      if (!st) check_same(t, ls[k].name, &want, &got, a.vocab, ls[k].l.micro_batches < 2);
      // Split layouts move hidden states between workers, not only logits.
      if (!st && ls[k].l.n_workers > 1) RG_CHECK(links >= 2);
      free(got.logits);
    }
    free(want.logits);
  }
}

// The trace holds complete events from both workers, and is valid JSON.
RG_TEST(cluster_trace_shows_both_workers_stages) {
  if (!exact_isa_available()) RG_SKIP("needs AVX-512 for the bit-exact kernels");
  const char *dense = model_dir(t, RG_TESTMODEL_LLAMA, "dense");
  RG_REQUIRE(dense);
  rg_arch_t a;
  RG_REQUIRE_OK(arch_of(dense, &a));
  rg_cluster_layout_t l;
  RG_REQUIRE_OK(rg_cluster_layout_afd(&a, "cpu:0", "cpu:0", 1, &l));
  char trace[1100];
  snprintf(trace, sizeof trace, "%s/trace.json", rg_test_tmpdir(t));
  outputs_t got = {0};
  RG_REQUIRE_OK(serve_cluster(dense, &l, a.vocab, trace, &got, NULL));
  free(got.logits);
  char *text = NULL;
  size_t len = 0;
  RG_REQUIRE_OK(rg_file_read_all(trace, "trace", 64u << 20, &text, &len));
  cJSON *j = cJSON_Parse(text);
  free(text);
  RG_REQUIRE(j);
  cJSON *ev = cJSON_GetObjectItem(j, "traceEvents");
  RG_REQUIRE(cJSON_IsArray(ev));
  int stages[2] = {0, 0}, sends = 0;
  cJSON *e;
  cJSON_ArrayForEach(e, ev) {
    cJSON *name = cJSON_GetObjectItem(e, "name"), *pid = cJSON_GetObjectItem(e, "pid");
    if (!cJSON_IsString(name) || !cJSON_IsNumber(pid)) continue;
    if (strstr(name->valuestring, "attention") && pid->valueint >= 1) stages[0]++;
    if (strstr(name->valuestring, "ffn") && pid->valueint >= 1) stages[1]++;
    if (strstr(name->valuestring, "send")) sends++;
  }
  printf("    trace: %d attention, %d ffn events, %d sends\n", stages[0], stages[1], sends);
  RG_CHECK(stages[0] > 0 && stages[1] > 0 && sends > 0);
  cJSON_Delete(j);
}

// ----- Workers started by hand, one killed, one refused ------------------------------

static pid_t start_worker(const char *port, const char *name, const char *secret) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    char coord[64];
    snprintf(coord, sizeof coord, "127.0.0.1:%s", port);
    setenv("RIDGE_SECRET", secret, 1);
    execl(rg_test_ridge_bin(), "ridge", "--quiet", "worker", "--coordinator", coord, "--name", name,
          "--threads", "1", "--isa", "avx512", "--connect-timeout", "20", (char *)NULL);
    _exit(127);
  }
  return pid;
}

static void reap(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  rg_transport_forget_process(pid);
}

// One step: prefill `n` tokens of sequence 0 (blocks 0..), logits of the last.
static rg_status_t prefill(rg_cluster_t *c, rg_engine_t *e, const int32_t *ids, int32_t n,
                           int64_t pos, float *logits) {
  static const int32_t blocks[4] = {0, 1, 2, 3};
  rg_step_entry_t en = {.pos = pos,
                        .n = n,
                        .tokens = ids,
                        .blocks = blocks,
                        .n_blocks = (int32_t)((pos + n + 15) / 16),
                        .want_logits = 1};
  return c ? rg_cluster_forward(c, &en, 1, logits) : rg_engine_forward(e, &en, 1, logits);
}

// The same step again and again (20 s at most) while a restarted worker
// rejoins; the last attempt's status.
static rg_status_t prefill_until_back(rg_cluster_t *c, const int32_t *ids, int32_t n, int64_t pos,
                                      float *logits) {
  rg_status_t st = NULL;
  for (int tries = 0; tries < 400; tries++) {
    rg_status_free(st);
    if (!(st = prefill(c, NULL, ids, n, pos, logits))) break;
    struct timespec ns = {0, 50000000};
    nanosleep(&ns, NULL);
  }
  return st;
}

// Options for a cluster whose workers are started by hand: a secret, a fixed
// port (offset keeps tests apart), short deadlines.
static rg_status_t hand_options(const char *dir, const char *secret_text, int offset,
                                rg_control_secret_t *secret, rg_cluster_options_t *co) {
  RG_RETURN_IF_ERROR(rg_control_secret_from_text(secret_text, strlen(secret_text), secret));
  *co = (rg_cluster_options_t){.model_path = dir,
                               .engine = exact_options(),
                               .secret = secret,
                               .quiet = 1,
                               .join_timeout_s = 30,
                               .step_timeout_s = 3,
                               .port = 20000 + (int)((getpid() + offset) % 20000)};
  return NULL;
}

RG_TEST(cluster_names_a_killed_worker_and_uses_it_again_after_it_rejoins) {
  if (!exact_isa_available()) RG_SKIP("needs AVX-512 for the bit-exact kernels");
  const char *dense = model_dir(t, RG_TESTMODEL_LLAMA, "dense");
  RG_REQUIRE(dense);
  rg_arch_t a;
  RG_REQUIRE_OK(arch_of(dense, &a));
  const char *secret_text = "test-secret-for-the-cluster";
  rg_control_secret_t secret;
  rg_cluster_options_t co;
  RG_REQUIRE_OK(hand_options(dense, secret_text, 0, &secret, &co));
  RG_REQUIRE_OK(rg_cluster_layout_afd(&a, "cpu:0", "cpu:0", 1, &co.layout));
  // The workers are named by the layout; a stranger with the wrong secret is
  // refused and does not take a place.
  rg_cluster_t *c = NULL;
  pid_t w0 = 0, w1 = 0, rogue = 0;
  // rg_cluster_create waits for the workers: start them from a child that
  // first learns the port. The port is fixed here by asking for one.
  char port[16];
  snprintf(port, sizeof port, "%d", co.port);
  rogue = start_worker(port, co.layout.workers[1].name, "not-the-secret");
  w0 = start_worker(port, co.layout.workers[0].name, secret_text);
  w1 = start_worker(port, co.layout.workers[1].name, secret_text);
  rg_status_t st = rg_cluster_create(&co, &c);
  RG_CHECK_OK(st);
  int status = 0;
  if (rogue > 0 && waitpid(rogue, &status, 0) == rogue)
    RG_CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  rogue = 0;
  if (st) goto out;

  rg_engine_options_t eo = exact_options();
  rg_engine_t *e = NULL;
  RG_REQUIRE_OK(rg_engine_create(dense, &eo, &e));
  int32_t ids[24];
  for (int k = 0; k < 24; k++) ids[k] = (k * 17 + 2) % 400;
  size_t V = (size_t)a.vocab;
  float *want = calloc(V, 4), *got = calloc(V, 4);
  RG_REQUIRE(want && got);

  RG_CHECK_OK(prefill(NULL, e, ids, 8, 0, want));
  RG_CHECK_OK(prefill(c, NULL, ids, 8, 0, got));
  RG_CHECK(!memcmp(want, got, V * 4));

  // The FFN worker dies: the next step fails naming it, within its deadline.
  reap(w1);
  w1 = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  st = prefill(c, NULL, ids + 8, 8, 8, got);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("    killed w1: %s (after %.2f s)\n", st ? rg_status_message(st) : "no error", took);
  RG_CHECK(has(st, co.layout.workers[1].name));
  RG_CHECK(took < 20);
  rg_status_free(st);

  // It comes back under the same name: it is assigned its stages again and
  // the sequence carries on (the attention worker kept its KV).
  w1 = start_worker(port, co.layout.workers[1].name, secret_text);
  st = prefill_until_back(c, ids + 8, 8, 8, got);
  RG_CHECK_OK(st);
  RG_CHECK_OK(prefill(NULL, e, ids + 8, 8, 8, want));
  RG_CHECK(!memcmp(want, got, V * 4));

  // A worker that hangs (stopped, its sockets open) fails the step by its
  // deadline or its heartbeats, named; started afresh, it serves again.
  kill(w1, SIGSTOP);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  st = prefill(c, NULL, ids + 16, 4, 16, got);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("    stopped w1: %s (after %.2f s)\n", st ? rg_status_message(st) : "no error", took);
  RG_CHECK(has(st, co.layout.workers[1].name));
  RG_CHECK(took < 10);
  rg_status_free(st);
  reap(w1);
  w1 = start_worker(port, co.layout.workers[1].name, secret_text);
  st = prefill_until_back(c, ids + 16, 4, 16, got);
  RG_CHECK_OK(st);
  rg_engine_destroy(e);
  free(want);
  free(got);
out:
  rg_cluster_destroy(c);
  reap(w0);
  reap(w1);
  reap(rogue);
}

// Prefill-decode with the prefill worker killed once request 0 decodes:
// request 0's stages now all live on the decode worker, so it carries on to
// its last token (the single process's tokens); a request that arrives later
// needs the dead worker and fails within its deadline, naming it.
typedef struct {
  pid_t *victim;
  int tokens0;
  double killed_at;
} kill_on_token_t;

static rg_status_t kill_after_first_decode(void *ctx, size_t req, int32_t token) {
  (void)token;
  kill_on_token_t *k = ctx;
  if (req == 0 && ++k->tokens0 == 2 && *k->victim > 0) {
    kill(*k->victim, SIGKILL);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    k->killed_at = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
  }
  return NULL;
}

RG_TEST(cluster_requests_on_live_workers_finish_when_the_prefill_worker_dies) {
  if (!exact_isa_available()) RG_SKIP("needs AVX-512 for the bit-exact kernels");
  const char *dense = model_dir(t, RG_TESTMODEL_LLAMA, "dense");
  RG_REQUIRE(dense);
  rg_arch_t a;
  RG_REQUIRE_OK(arch_of(dense, &a));
  int32_t ids[2][12];
  for (int k = 0; k < 12; k++) ids[0][k] = (k * 13 + 5) % 400, ids[1][k] = (k * 29 + 1) % 400;
  enum { NEW = 24 };
  rg_serve_request_t r[2] = {{0, ids[0], 12, NEW, {0, 0, 1, 0}, 0},
                             {1, ids[1], 12, NEW, {0, 0, 1, 0}, 1.0}};
  rg_serve_options_t so = {.max_batch_tokens = 256, .max_seqs = 4};
  // What request 0 gives alone in one process.
  rg_engine_options_t eo = exact_options();
  rg_engine_t *e;
  RG_REQUIRE_OK(rg_engine_create(dense, &eo, &e));
  rg_executor_t ex = rg_engine_executor(e);
  rg_serve_result_t want = {0};
  rg_serve_stats_t stats;
  rg_status_t st = rg_serve_on(&ex, r, 1, &so, &want, &stats);
  rg_engine_destroy(e);
  RG_REQUIRE_OK(st);

  const char *secret_text = "test-secret-for-the-pd-cluster";
  rg_control_secret_t secret;
  rg_cluster_options_t co;
  RG_REQUIRE_OK(hand_options(dense, secret_text, 7919, &secret, &co));
  RG_REQUIRE_OK(rg_cluster_layout_pd(&a, "cpu:0", "cpu:0", 16, 16, &co.layout));
  char port[16];
  snprintf(port, sizeof port, "%d", co.port);
  pid_t wp = start_worker(port, co.layout.workers[0].name, secret_text);
  pid_t wd = start_worker(port, co.layout.workers[1].name, secret_text);
  rg_cluster_t *c = NULL;
  rg_serve_result_t got[2] = {{0}};
  st = rg_cluster_create(&co, &c);
  RG_CHECK_OK(st);
  if (!st) {
    kill_on_token_t k = {.victim = &wp};
    so.on_token = kill_after_first_decode;
    so.ctx = &k;
    rg_executor_t cx = rg_cluster_executor(c);
    st = rg_serve_on(&cx, r, 2, &so, got, &stats);
    RG_CHECK_OK(st);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double since = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 - k.killed_at;
    printf("    request 0: %lld tokens (%s); request 1: %s \"%s\", %.2f s after the kill\n",
           (long long)got[0].n_tokens, got[0].finish ? got[0].finish : "-",
           got[1].finish ? got[1].finish : "-", got[1].error, since);
    RG_CHECK(k.killed_at > 0);
    RG_CHECK(got[0].n_tokens == NEW && want.n_tokens == NEW);
    RG_CHECK(got[0].finish && strcmp(got[0].finish, "error") != 0);
    RG_CHECK(!memcmp(got[0].tokens, want.tokens, sizeof(int32_t) * NEW));
    RG_CHECK(got[1].finish && !strcmp(got[1].finish, "error"));
    RG_CHECK(strstr(got[1].error, co.layout.workers[0].name) != NULL);
    RG_CHECK(since < 20);
  }
  rg_serve_results_free(got, 2);
  rg_serve_results_free(&want, 1);
  rg_cluster_destroy(c);
  reap(wp);
  reap(wd);
}

// `ridge run --layout` end to end: the same tokens as without it, and the
// per-link table in its JSON.
RG_TEST(cluster_ridge_run_layout_matches_the_single_process_run) {
  if (!exact_isa_available()) RG_SKIP("needs AVX-512 for the bit-exact kernels");
  const char *dense = model_dir(t, RG_TESTMODEL_LLAMA, "dense");
  RG_REQUIRE(dense);
  char *out[2] = {NULL, NULL};
  const char *layouts[2] = {NULL, "attention-ffn"};
  for (int k = 0; k < 2; k++) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "--quiet run --model %s --prompt-ids 4,8,15,16,23,42 -n 6 --temperature 0 "
             "--threads 1 --isa avx512 --kv-dtype f32 --no-measure --json %s%s",
             dense, layouts[k] ? "--micro-batches 2 --layout " : "", layouts[k] ? layouts[k] : "");
    RG_CHECK(rg_test_run_ridge(t, cmd, &out[k]) == 0);
  }
  cJSON *j0 = cJSON_Parse(out[0]), *j1 = cJSON_Parse(out[1]);
  RG_REQUIRE(j0 && j1);
  char *t0 = cJSON_PrintUnformatted(cJSON_GetObjectItem(j0, "tokens"));
  char *t1 = cJSON_PrintUnformatted(cJSON_GetObjectItem(j1, "tokens"));
  RG_CHECK(t0 && t1 && !strcmp(t0, t1));
  cJSON *links = cJSON_GetObjectItem(j1, "links");
  RG_CHECK(cJSON_IsArray(links) && cJSON_GetArraySize(links) >= 3);
  cJSON *stages = cJSON_GetObjectItem(j1, "stages");
  RG_CHECK(cJSON_IsArray(stages) && cJSON_GetArraySize(stages) == 4);
  free(t0);
  free(t1);
  cJSON_Delete(j0);
  cJSON_Delete(j1);
  free(out[0]);
  free(out[1]);

  // Bad combinations are refused before anything starts.
  char cmd[2048];
  char *o = NULL;
  snprintf(cmd, sizeof cmd, "run --model %s --layout sideways", dense);
  RG_CHECK(rg_test_run_ridge(t, cmd, &o) == 2);
  RG_CHECK_CONTAINS(o, "expected colocated, attention-ffn, experts, pipeline or prefill-decode");
  free(o);
  snprintf(cmd, sizeof cmd, "run --model %s --listen 127.0.0.1:1 --layout pipeline", dense);
  RG_CHECK(rg_test_run_ridge(t, cmd, &o) == 2);
  RG_CHECK_CONTAINS(o, "--listen needs --secret-file");
  free(o);
  RG_CHECK(rg_test_run_ridge(t, "worker", &o) == 2);
  RG_CHECK_CONTAINS(o, "--coordinator");
  free(o);
}

// ----- Prefill-decode ----------------------------------------------------------------

// Bytes of KV pages moved by RMA over the cluster's links (from one worker,
// or from any when from is NULL).
static double kv_link_bytes_n(const rg_cluster_t *c, const char *from, int64_t *messages) {
  double bytes = 0;
  if (messages) *messages = 0;
  for (size_t i = 0; i < rg_cluster_link_count(c); i++) {
    rg_cluster_link_info_t li;
    rg_cluster_link_info(c, i, &li);
    if (li.kv && (!from || !strcmp(li.from, from))) {
      bytes += li.bytes;
      if (messages) *messages += li.messages;
    }
  }
  return bytes;
}

static double kv_link_bytes(const rg_cluster_t *c, const char *from) {
  return kv_link_bytes_n(c, from, NULL);
}

// Prefill on one worker, decode on another, the prompt's KV written by RMA
// from the prefill worker's outbox into the decode pool: the single-process
// tokens and logits (within rounding), with equal block sizes and with pages
// merged (16 -> 64) and split (16 -> 8); the bytes on the link are exactly
// the prompts' KV. The last case cuts every prompt's KV into transfers of at
// most 6 segments (a run of the 2 layers x K,V is 4), as a long prompt's is cut
// at the notice's limit, so pieces start and end inside blocks on both sides.
RG_TEST(cluster_prefill_decode_gives_the_single_process_logits) {
  if (!exact_isa_available()) RG_SKIP("needs AVX-512 for the bit-exact kernels");
  const char *dense = model_dir(t, RG_TESTMODEL_LLAMA, "dense");
  RG_REQUIRE(dense);
  rg_arch_t a;
  RG_REQUIRE_OK(arch_of(dense, &a));
  rg_engine_options_t eo = exact_options();
  rg_engine_t *e;
  RG_REQUIRE_OK(rg_engine_create(dense, &eo, &e));
  rg_executor_t x = rg_engine_executor(e);
  outputs_t want = {0};
  rg_status_t st = serve_with(&x, a.vocab, &want);
  rg_engine_destroy(e);
  RG_REQUIRE_OK(st);
  const int64_t sizes[4][3] = {{16, 16, 0}, {16, 64, 0}, {16, 8, 0}, {16, 24, 6}};
  double row = (double)(a.n_kv_heads * a.head_dim) * 4.0;  // f32 KV
  for (int k = 0; k < 4; k++) {
    rg_cluster_layout_t l;
    RG_REQUIRE_OK(rg_cluster_layout_pd(&a, "cpu:0", "cpu:0", sizes[k][0], sizes[k][1], &l));
    rg_cluster_options_t co = {.model_path = dense,
                               .layout = l,
                               .engine = exact_options(),
                               .launch = 1,
                               .ridge_binary = rg_test_ridge_bin(),
                               .quiet = 1,
                               .step_timeout_s = 60,
                               .xfer_max_segments = (int)sizes[k][2]};
    rg_cluster_t *c;
    RG_REQUIRE_OK(rg_cluster_create(&co, &c));
    rg_executor_t cx = rg_cluster_executor(c);
    outputs_t got = {0};
    st = serve_with(&cx, a.vocab, &got);
    int64_t transfers = 0;
    double kv_bytes = kv_link_bytes_n(c, NULL, &transfers);
    rg_cluster_destroy(c);
    RG_CHECK_OK(st);
    char what[64];
    snprintf(what, sizeof what, "prefill-decode, blocks %lld -> %lld%s", (long long)sizes[k][0],
             (long long)sizes[k][1], sizes[k][2] ? " in pieces of 6 segments" : "");
    // Within rounding, not bit for bit: the decode side batches the requests
    // as they arrive from prefill, not as one process would, and the
    // matmuls' blocking follows the rows in a step.
    if (!st) check_same(t, what, &want, &got, a.vocab, 0);
    // Every prompt's KV crossed once: positions x layers x K and V.
    double prompts = 0;
    for (int i = 0; i < N_REQ; i++) prompts += LEN - i * 3;
    printf("    %s: %.0f bytes of KV on the link (%.0f expected) in %lld transfers\n", what,
           kv_bytes, prompts * row * 2 * (double)a.n_layers, (long long)transfers);
    RG_CHECK(kv_bytes == prompts * row * 2 * (double)a.n_layers);
    // Whole prompts move as one transfer each; in pieces, one per run here
    // (21 and 18 positions cross the source block boundary at 16).
    RG_CHECK(sizes[k][2] ? transfers > N_REQ : transfers == N_REQ);
    free(got.logits);
  }
  free(want.logits);
}

// One request alone runs the same matmul shapes in both: bit for bit.
RG_TEST(cluster_prefill_decode_single_request_is_bit_identical) {
  if (!exact_isa_available()) RG_SKIP("needs AVX-512 for the bit-exact kernels");
  const char *dense = model_dir(t, RG_TESTMODEL_LLAMA, "dense");
  RG_REQUIRE(dense);
  rg_arch_t a;
  RG_REQUIRE_OK(arch_of(dense, &a));
  int32_t ids[37];
  for (int k = 0; k < 37; k++) ids[k] = (k * 13 + 1) % 450;
  rg_serve_request_t r = {0, ids, 37, OUT, {0, 0, 1, 0}, 0};
  float *lg[2];
  rg_serve_result_t res[2];
  for (int k = 0; k < 2; k++) {
    lg[k] = calloc((size_t)OUT * (size_t)a.vocab, sizeof(float));
    RG_REQUIRE(lg[k]);
    rg_serve_options_t so = {.max_batch_tokens = 16, .dump_logits = lg[k], .dump_rows = OUT};
    rg_serve_stats_t ss;
    rg_engine_options_t eo = exact_options();
    if (!k) {
      rg_engine_t *e;
      RG_REQUIRE_OK(rg_engine_create(dense, &eo, &e));
      rg_status_t st = rg_serve(e, &r, 1, &so, &res[k], &ss);
      rg_engine_destroy(e);
      RG_REQUIRE_OK(st);
    } else {
      rg_cluster_options_t co = {.model_path = dense,
                                 .engine = eo,
                                 .launch = 1,
                                 .ridge_binary = rg_test_ridge_bin(),
                                 .quiet = 1,
                                 .step_timeout_s = 60};
      RG_REQUIRE_OK(rg_cluster_layout_pd(&a, "cpu:0", "cpu:0", 16, 16, &co.layout));
      rg_cluster_t *c;
      RG_REQUIRE_OK(rg_cluster_create(&co, &c));
      rg_executor_t x = rg_cluster_executor(c);
      rg_status_t st = rg_serve_on(&x, &r, 1, &so, &res[k], &ss);
      rg_cluster_destroy(c);
      RG_REQUIRE_OK(st);
    }
  }
  RG_CHECK(res[0].n_tokens == OUT && res[1].n_tokens == OUT);
  RG_CHECK(!memcmp(res[0].tokens, res[1].tokens, OUT * sizeof(int32_t)));
  RG_CHECK(!memcmp(lg[0], lg[1], (size_t)OUT * (size_t)a.vocab * sizeof(float)));
  rg_serve_results_free(res, 2);
  free(lg[0]);
  free(lg[1]);
}

// The single-process pipeline's answers to r on the bit-exact kernels:
// what every layout must give.
static rg_status_t serve_alone(const char *dense, const rg_serve_request_t *r, size_t n,
                               const rg_serve_options_t *so, rg_serve_result_t *want,
                               rg_serve_stats_t *ss) {
  rg_engine_options_t eo = exact_options();
  rg_engine_t *e;
  RG_RETURN_IF_ERROR(rg_engine_create(dense, &eo, &e));
  rg_status_t st = rg_serve(e, r, n, so, want, ss);
  rg_engine_destroy(e);
  return st;
}

// A prefix the decode side has cached is not sent again; a page corrupted in
// transit is caught by its checksum and never used, and pages that never
// come are waited for only until the step deadline: either way the request
// is recomputed on the decode side and still gives the single-process
// tokens, and the step's other requests go on.
RG_TEST(cluster_prefill_decode_skips_cached_prefixes_and_recomputes_corrupted_pages) {
  if (!exact_isa_available()) RG_SKIP("needs AVX-512 for the bit-exact kernels");
  const char *dense = model_dir(t, RG_TESTMODEL_LLAMA, "dense");
  RG_REQUIRE(dense);
  rg_arch_t a;
  RG_REQUIRE_OK(arch_of(dense, &a));
  // Two requests, the second arriving after the first is done, sharing their
  // first 32 tokens (two blocks of 16).
  enum { L = 40, SHARED = 32, OUT2 = 5 };
  int32_t ids[2][L];
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < L; k++)
      ids[i][k] = (int32_t)(k < SHARED ? (k * 7 + 3) % 400 : (i * 51 + k) % 400);
  rg_serve_request_t r[2] = {{0, ids[0], L, OUT2, {0, 0, 1, 0}, 0},
                             {1, ids[1], L, OUT2, {0, 0, 1, 0}, 0.5}};
  rg_serve_options_t so = {.max_batch_tokens = 64, .prefix_cache = 1};
  rg_serve_result_t want[2], got[2];
  rg_serve_stats_t ss;
  RG_REQUIRE_OK(serve_alone(dense, r, 2, &so, want, &ss));
  rg_status_t st;
  double row = (double)(a.n_kv_heads * a.head_dim) * 4.0 * 2 * (double)a.n_layers;
  // 0: clean; 1: the first transfer corrupted; 2: the first transfer never
  // written (the decode worker's wait runs out, the step's other work goes on).
  for (int corrupt = 0; corrupt < 3; corrupt++) {
    if (corrupt == 1) setenv("RIDGE_TEST_CORRUPT_KV_WRITE", "1", 1);
    if (corrupt == 2) setenv("RIDGE_TEST_DROP_KV_WRITE", "1", 1);
    rg_cluster_layout_t l;
    RG_REQUIRE_OK(rg_cluster_layout_pd(&a, "cpu:0", "cpu:0", 16, 16, &l));
    rg_cluster_options_t co = {.model_path = dense,
                               .layout = l,
                               .engine = exact_options(),
                               .launch = 1,
                               .ridge_binary = rg_test_ridge_bin(),
                               .quiet = 1,
                               .step_timeout_s = corrupt == 2 ? 3 : 60};
    rg_cluster_t *c;
    st = rg_cluster_create(&co, &c);
    unsetenv("RIDGE_TEST_CORRUPT_KV_WRITE");
    unsetenv("RIDGE_TEST_DROP_KV_WRITE");
    RG_REQUIRE_OK(st);
    rg_executor_t cx = rg_cluster_executor(c);
    st = rg_serve_on(&cx, r, 2, &so, got, &ss);
    double kv_bytes = kv_link_bytes(c, NULL);
    rg_cluster_destroy(c);
    RG_CHECK_OK(st);
    for (int i = 0; i < 2; i++) {
      RG_CHECK(got[i].n_tokens == OUT2);
      RG_CHECK(!memcmp(got[i].tokens, want[i].tokens, OUT2 * sizeof(int32_t)));
    }
    printf("    %s: %.0f bytes of KV sent, %lld recomputed\n",
           corrupt == 2   ? "first transfer never written"
           : corrupt == 1 ? "first transfer corrupted"
                          : "clean",
           kv_bytes, (long long)ss.kv_recomputed);
    if (!corrupt) {
      // The first prompt whole; of the second only what the decode side
      // lacked: its 32 shared tokens are cached there.
      RG_CHECK(kv_bytes == (double)(L + (L - SHARED)) * row);
      RG_CHECK(ss.kv_recomputed == 0);
    } else {
      RG_CHECK(ss.kv_recomputed == 1);
    }
    rg_serve_results_free(got, 2);
  }
  rg_serve_results_free(want, 2);
}

// Starts `ridge run --layout attention-ffn` on a long chat workload in a
// child (stderr to log, up to two extra arguments at the end), and waits
// until it serves: the KV line comes once every worker is ready. Returns
// the child's pid (or -1), *ready whether the line came.
static pid_t start_serving_run(const char *dense, const char *log, const char *extra1,
                               const char *extra2, int *ready) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(log, "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(126);
    char *argv[24] = {
        "ridge",      "run",  "--model",        (char *)dense, "--layout",    "attention-ffn",
        "--workload", "chat", "--num-requests", "500",         "--rate",      "50",
        "-n",         "32",   "--threads",      "1",           "--no-measure"};
    int n = 17;
    if (extra1) argv[n++] = (char *)extra1;
    if (extra2) argv[n++] = (char *)extra2;
    argv[n] = NULL;
    execv(rg_test_ridge_bin(), argv);
    _exit(127);
  }
  *ready = 0;
  for (int i = 0; pid > 0 && i < 300 && !*ready; i++) {
    char *text = NULL;
    size_t len = 0;
    rg_status_t s = rg_file_read_all(log, "log", 1u << 20, &text, &len);
    *ready = !s && strstr(text, "requests;");
    rg_status_free(s);
    free(text);
    struct timespec ns = {0, 50000000};
    nanosleep(&ns, NULL);
  }
  return pid;
}

// Ctrl-C stops a multi-process run cleanly: the coordinator finishes the
// step in flight, shuts its workers down and exits 130 saying so, well
// within a few seconds.
RG_TEST(cluster_ctrl_c_stops_the_run_and_its_workers) {
  const char *dense = model_dir(t, RG_TESTMODEL_LLAMA, "dense");
  RG_REQUIRE(dense);
  char log[1100];
  snprintf(log, sizeof log, "%s/run.log", rg_test_tmpdir(t));
  int ready;
  pid_t pid = start_serving_run(dense, log, NULL, NULL, &ready);
  RG_REQUIRE(pid > 0);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  kill(pid, SIGINT);
  int status = 0;
  RG_REQUIRE(waitpid(pid, &status, 0) == pid);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  char *text = NULL;
  size_t len = 0;
  RG_REQUIRE_OK(rg_file_read_all(log, "log", 1u << 20, &text, &len));
  printf("    stopped %.2f s after SIGINT, exit %d\n", took,
         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  RG_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 130);
  RG_CHECK_CONTAINS(text, "ridge run: interrupted");
  RG_CHECK(took < 10);
  free(text);
}

// ----- The capacity tier ---------------------------------------------------------------

// A coordinator killed outright (no shutdown, no chance to reap) while its
// workers are mid-generation: each worker notices its control connection
// closed and exits within seconds, even with a step deadline of a minute
// and a send to the coordinator that no one will ever take. This process
// adopts the orphans (a child subreaper) to see them go, and reaps all it
// adopts: not only the workers but whatever they leave behind (a sanitized
// worker starts llvm-symbolizer at exit to match its leak suppressions,
// and that child outlives it), which would otherwise stay this process's
// zombies for the rest of the suite.
static double since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

// The processes whose parent is `parent`, up to cap of them.
static int children_of(pid_t parent, pid_t *out, int cap) {
  int n = 0;
  DIR *d = opendir("/proc");
  if (!d) return 0;
  for (struct dirent *e; (e = readdir(d)) && n < cap;) {
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    const char *rp = strrchr(buf, ')');  // the name may hold spaces
    int ppid = 0;
    char state;
    if (rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == parent)
      out[n++] = (pid_t)atoi(e->d_name);
  }
  closedir(d);
  return n;
}

RG_TEST(cluster_workers_exit_when_the_coordinator_is_killed) {
  const char *dense = model_dir(t, RG_TESTMODEL_LLAMA, "dense");
  RG_REQUIRE(dense);
  char log[1100];
  snprintf(log, sizeof log, "%s/killed.log", rg_test_tmpdir(t));
  pid_t before[16];
  int n_before = children_of(getpid(), before, 16);
  RG_REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  int ready;
  pid_t pid = start_serving_run(dense, log, "--step-timeout", "60", &ready);
  RG_REQUIRE(pid > 0);
  RG_CHECK(ready);
  struct timespec ns = {0, 300000000};  // a few steps in
  nanosleep(&ns, NULL);
  pid_t workers[8];
  int n_workers = children_of(pid, workers, 8);
  RG_CHECK(n_workers == 2);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  kill(pid, SIGKILL);
  RG_CHECK(waitpid(pid, NULL, 0) == pid);
  // Its workers are this process's children now; wait up to 20 s for them.
  int reaped = 0;
  double last = 0;
  while (reaped < n_workers && since(&t0) < 20) {
    for (int i = 0; i < n_workers; i++)
      if (workers[i] > 0 && waitpid(workers[i], NULL, WNOHANG) == workers[i])
        workers[i] = 0, reaped++, last = since(&t0);
    struct timespec tick = {0, 20000000};
    nanosleep(&tick, NULL);
  }
  // Whatever is still there hangs: kill it so the suite goes on.
  int hung = 0;
  for (int i = 0; i < n_workers; i++)
    if (workers[i] > 0) kill(workers[i], SIGKILL), waitpid(workers[i], NULL, 0), hung++;
  prctl(PR_SET_CHILD_SUBREAPER, 0);
  // The rest of what was adopted: given a moment to finish, then killed.
  int adopted = 0, left = 0;
  for (double t_end = since(&t0) + 5;;) {
    pid_t now[16];
    int n_now = children_of(getpid(), now, 16), stray = 0;
    for (int i = 0; i < n_now; i++) {
      int known = 0;
      for (int k = 0; k < n_before; k++) known |= now[i] == before[k];
      if (known) continue;
      if (since(&t0) > t_end)
        kill(now[i], SIGKILL), waitpid(now[i], NULL, 0), left++;
      else if (waitpid(now[i], NULL, WNOHANG) == now[i])
        adopted++;
      else
        stray++;
    }
    if (!stray || since(&t0) > t_end + 1) break;
    struct timespec tick = {0, 20000000};
    nanosleep(&tick, NULL);
  }
  pid_t after[16];
  int n_after = children_of(getpid(), after, 16);
  if (hung) printf("    %d workers still running after 20 s: killed\n", hung);
  printf(
      "    %d workers exited, the last %.2f s after the coordinator was killed; %d other "
      "processes adopted and reaped, %d of them killed\n",
      reaped, last, adopted + left, left);
  RG_CHECK(reaped == n_workers);
  RG_CHECK(last < 10);
  RG_CHECK(left == 0);
  RG_CHECK(n_after == n_before);  // no zombie of this run is left behind
}

// A session that comes back after the golden time finds its prefix in the
// capacity tier (moved there after `retention` idle seconds) and gets the
// same tokens as when it was recomputed: in one process, and across workers
// where the tier is a worker of its own holding the KV in its memory. A
// reload corrupted on its way is never used: the step's requests fail,
// saying so.
RG_TEST(cluster_capacity_tier_keeps_idle_prefixes_and_brings_them_back) {
  const char *dense = model_dir(t, RG_TESTMODEL_LLAMA, "dense");
  RG_REQUIRE(dense);
  rg_arch_t a;
  RG_REQUIRE_OK(arch_of(dense, &a));
  enum { L = 72, SHARED = 64, OUT2 = 6 };
  int32_t ids[2][L];
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < L; k++)
      ids[i][k] = (int32_t)(k < SHARED ? (k * 7 + 3) % 400 : (i * 37 + k) % 400);
  rg_serve_request_t r[2] = {{0, ids[0], L, OUT2, {0, 0, 1, 0}, 0},
                             {1, ids[1], L, OUT2, {0, 0, 1, 0}, 0.6}};
  rg_serve_options_t so = {.max_batch_tokens = 64, .prefix_cache = 1, .retention_s = 0.15};
  rg_serve_result_t want[2], got[2];
  rg_serve_stats_t ss;
  // No tier: the second prompt's shared blocks are still cached on the device.
  rg_engine_options_t eo = exact_options();
  eo.max_context = 128;
  rg_engine_t *e;
  RG_REQUIRE_OK(rg_engine_create(dense, &eo, &e));
  RG_REQUIRE_OK(rg_serve(e, r, 2, &so, want, &ss));
  rg_engine_destroy(e);
  // One process with a tier.
  eo.tier_tokens = 1024;
  RG_REQUIRE_OK(rg_engine_create(dense, &eo, &e));
  RG_REQUIRE_OK(rg_serve(e, r, 2, &so, got, &ss));
  rg_engine_destroy(e);
  printf("    one process: %lld blocks down, %lld back, %lld tokens from the tier\n",
         (long long)ss.tier_offloaded, (long long)ss.tier_reloaded, (long long)ss.tier_hit_tokens);
  RG_CHECK(ss.tier_offloaded >= SHARED / 16 && ss.tier_reloaded == SHARED / 16);
  RG_CHECK(ss.tier_hit_tokens == SHARED);
  for (int i = 0; i < 2; i++)
    RG_CHECK(got[i].n_tokens == OUT2 && !memcmp(got[i].tokens, want[i].tokens, OUT2 * 4));
  rg_serve_results_free(got, 2);
  // Attention | FFN with a tier worker, then the same with a corrupted reload.
  for (int corrupt = 0; corrupt < 2; corrupt++) {
    rg_cluster_options_t co = {.model_path = dense,
                               .engine = exact_options(),
                               .launch = 1,
                               .ridge_binary = rg_test_ridge_bin(),
                               .quiet = 1,
                               .step_timeout_s = 60};
    co.engine.max_context = 128;
    RG_REQUIRE_OK(rg_cluster_layout_afd(&a, "cpu:0", "cpu:0", 1, &co.layout));
    RG_REQUIRE_OK(rg_cluster_layout_add_tier(&co.layout, "cpu:0", 1024));
    if (corrupt) setenv("RIDGE_TEST_CORRUPT_KV_WRITE", "1", 1);
    rg_cluster_t *c;
    rg_status_t st = rg_cluster_create(&co, &c);
    unsetenv("RIDGE_TEST_CORRUPT_KV_WRITE");
    RG_REQUIRE_OK(st);
    rg_executor_t x = rg_cluster_executor(c);
    RG_CHECK(x.tier_blocks == 1024 / 16);
    st = rg_serve_on(&x, r, 2, &so, got, &ss);
    double reload_bytes = kv_link_bytes(c, co.layout.workers[2].name);
    rg_cluster_destroy(c);
    RG_CHECK_OK(st);
    printf(
        "    across workers%s: %lld blocks down, %lld back, %.0f bytes reloaded; request 1: %s\n",
        corrupt ? ", first reload corrupted" : "", (long long)ss.tier_offloaded,
        (long long)ss.tier_reloaded, reload_bytes,
        got[1].finish && !strcmp(got[1].finish, "error") ? got[1].error : "ok");
    RG_CHECK(got[0].n_tokens == OUT2 && !memcmp(got[0].tokens, want[0].tokens, OUT2 * 4));
    if (!corrupt) {
      RG_CHECK(ss.tier_hit_tokens == SHARED);
      RG_CHECK(got[1].n_tokens == OUT2 && !memcmp(got[1].tokens, want[1].tokens, OUT2 * 4));
      double per_token = (double)(a.n_kv_heads * a.head_dim) * 4.0 * 2 * (double)a.n_layers;
      RG_CHECK(reload_bytes == SHARED * per_token);
    } else {
      RG_CHECK(got[1].finish && !strcmp(got[1].finish, "error"));
      RG_CHECK(strstr(got[1].error, "failed their checksum") != NULL);
    }
    rg_serve_results_free(got, 2);
  }
  rg_serve_results_free(want, 2);
}

// ----- Deadlines and transfer faults ---------------------------------------------------

// The deadline rule: the configured deadline is the floor; a step predicted
// to take long gets RG_CLUSTER_DEADLINE_FACTOR times its prediction, the
// prediction being its FLOPs and bytes at the best pace earlier steps showed
// for each; and the message says which it was.
RG_TEST(cluster_step_deadline_grows_with_the_predicted_step_above_the_configured_floor) {
  char why[256];
  // Nothing measured yet: the configured deadline, saying so.
  rg_cluster_pace_t pace = {0};
  RG_CHECK(rg_cluster_pace_predict(&pace, 1e9, 1e6) == 0);
  rg_cluster_deadline_t d = rg_cluster_step_deadline(10, 0);
  RG_CHECK(d.seconds == 10 && !d.scaled);
  RG_CHECK_CONTAINS(rg_cluster_deadline_describe(&d, why, sizeof why), "the configured 10 s");
  RG_CHECK_CONTAINS(why, "no earlier step");
  // A decode step (1e6 FLOPs, 1e8 bytes in 10 ms) and a prefill chunk (1e10
  // FLOPs, 1e8 bytes in 1 s): 1e-10 s per FLOP and 1e-10 s per byte at best.
  rg_cluster_pace_add(&pace, 1e6, 1e8, 0.01);
  rg_cluster_pace_add(&pace, 1e10, 1e8, 1.0);
  rg_cluster_pace_add(&pace, 1e10, 1e8, 0);  // a step without a time is no evidence
  RG_CHECK(pace.steps == 2);
  RG_CHECK(fabs(pace.s_per_flop - 1e-10) < 1e-22 && fabs(pace.s_per_byte - 1e-10) < 1e-22);
  // A slower step of the same cost does not slow the pace: the best is kept.
  rg_cluster_pace_add(&pace, 1e10, 1e8, 3.0);
  RG_CHECK(fabs(pace.s_per_flop - 1e-10) < 1e-22);
  // Predicted: the slower of compute and memory at that pace.
  RG_CHECK(fabs(rg_cluster_pace_predict(&pace, 1e10, 1e8) - 1.0) < 1e-9);
  RG_CHECK(fabs(rg_cluster_pace_predict(&pace, 1e6, 1e9) - 0.1) < 1e-9);
  // A short step keeps the floor; the prediction is named beside it.
  d = rg_cluster_step_deadline(10, rg_cluster_pace_predict(&pace, 1e6, 1e8));
  RG_CHECK(d.seconds == 10 && !d.scaled && fabs(d.predicted_s - 0.01) < 1e-12);
  RG_CHECK_CONTAINS(rg_cluster_deadline_describe(&d, why, sizeof why), "the configured 10 s");
  RG_CHECK_CONTAINS(why, "the floor");
  // A 512-token chunk at 8K context, 6e10 FLOPs: 6 s predicted, 120 s allowed.
  d = rg_cluster_step_deadline(10, rg_cluster_pace_predict(&pace, 6e10, 1e8));
  RG_CHECK(d.scaled && fabs(d.seconds - 20 * 6.0) < 1e-6 && d.floor_s == 10);
  RG_CHECK_CONTAINS(rg_cluster_deadline_describe(&d, why, sizeof why), "20 x the 6 s");
  RG_CHECK_CONTAINS(why, "above the configured 10 s");
  // Exactly at the floor is the floor.
  d = rg_cluster_step_deadline(10, 0.5);
  RG_CHECK(d.seconds == 10 && !d.scaled);
}

// The configured step deadline still holds for short steps: a worker that
// hangs (stopped) mid-run fails the step within it, and the message says it
// was the configured deadline and that the step's prediction was below it.
RG_TEST(cluster_a_hung_worker_fails_the_step_by_the_configured_deadline) {
  if (!exact_isa_available()) RG_SKIP("needs AVX-512 for the bit-exact kernels");
  const char *dense = model_dir(t, RG_TESTMODEL_LLAMA, "dense");
  RG_REQUIRE(dense);
  rg_arch_t a;
  RG_REQUIRE_OK(arch_of(dense, &a));
  pid_t before[16];
  int n_before = children_of(getpid(), before, 16);
  // Below the 3 s of heartbeats, so the deadline, not the heartbeats, ends it.
  rg_cluster_options_t co = {.model_path = dense,
                             .engine = exact_options(),
                             .launch = 1,
                             .ridge_binary = rg_test_ridge_bin(),
                             .quiet = 1,
                             .step_timeout_s = 1};
  RG_REQUIRE_OK(rg_cluster_layout_colocated(&a, "cpu:0", &co.layout));
  rg_cluster_t *c;
  RG_REQUIRE_OK(rg_cluster_create(&co, &c));
  pid_t now[16], worker = 0;
  int n_now = children_of(getpid(), now, 16);
  for (int i = 0; i < n_now; i++) {
    int known = 0;
    for (int k = 0; k < n_before; k++) known |= now[i] == before[k];
    if (!known) worker = now[i];
  }
  RG_CHECK(worker > 0);
  int32_t ids[24];
  for (int k = 0; k < 24; k++) ids[k] = (k * 17 + 2) % 400;
  float *logits = calloc((size_t)a.vocab, sizeof(float));
  RG_REQUIRE(logits);
  // Two steps that go through set the pace.
  RG_CHECK_OK(prefill(c, NULL, ids, 8, 0, logits));
  RG_CHECK_OK(prefill(c, NULL, ids + 8, 8, 8, logits));
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (worker > 0) kill(worker, SIGSTOP);
  rg_status_t st = prefill(c, NULL, ids + 16, 4, 16, logits);
  double took = since(&t0);
  printf("    stopped worker: %s (after %.2f s)\n", st ? rg_status_message(st) : "no error", took);
  RG_CHECK(st && rg_status_code(st) == RG_DEADLINE_EXCEEDED);
  RG_CHECK(has(st, co.layout.workers[0].name));
  RG_CHECK(has(st, "the configured 1 s (--step-timeout), the floor"));
  RG_CHECK(has(st, "predicted"));
  RG_CHECK(took < 3);
  rg_status_free(st);
  if (worker > 0) kill(worker, SIGKILL);
  rg_cluster_destroy(c);  // reaps it
  free(logits);
}

// A transfer order that fails on the prefill worker (its write refused by
// the transport: a test hook aims it past the end of the decode pool's
// region) reaches the coordinator, from a --quiet worker, naming the
// worker, the stage and the bytes; the request is recomputed on the decode
// side, as for pages that never come, and gives the single-process tokens.
RG_TEST(cluster_prefill_decode_reports_a_transfer_order_that_fails_on_the_prefill_worker) {
  if (!exact_isa_available()) RG_SKIP("needs AVX-512 for the bit-exact kernels");
  const char *dense = model_dir(t, RG_TESTMODEL_LLAMA, "dense");
  RG_REQUIRE(dense);
  rg_arch_t a;
  RG_REQUIRE_OK(arch_of(dense, &a));
  enum { L = 40, OUT2 = 4 };
  int32_t ids[2][L];
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < L; k++) ids[i][k] = (int32_t)((i * 51 + k * 7 + 3) % 400);
  rg_serve_request_t r[2] = {{0, ids[0], L, OUT2, {0, 0, 1, 0}, 0},
                             {1, ids[1], L, OUT2, {0, 0, 1, 0}, 0}};
  rg_serve_options_t so = {.max_batch_tokens = 128};
  rg_serve_result_t want[2], got[2];
  rg_serve_stats_t ss;
  RG_REQUIRE_OK(serve_alone(dense, r, 2, &so, want, &ss));
  rg_status_t st;
  rg_cluster_options_t co = {.model_path = dense,
                             .engine = exact_options(),
                             .launch = 1,
                             .ridge_binary = rg_test_ridge_bin(),
                             .quiet = 1,
                             .step_timeout_s = 2};
  RG_REQUIRE_OK(rg_cluster_layout_pd(&a, "cpu:0", "cpu:0", 16, 16, &co.layout));
  setenv("RIDGE_TEST_FAIL_KV_ORDER", "1", 1);
  rg_cluster_t *c;
  st = rg_cluster_create(&co, &c);
  unsetenv("RIDGE_TEST_FAIL_KV_ORDER");
  RG_REQUIRE_OK(st);
  rg_executor_t cx = rg_cluster_executor(c);
  st = rg_serve_on(&cx, r, 2, &so, got, &ss);
  size_t n_faults = rg_cluster_kv_fault_count(c);
  rg_cluster_kv_fault_t f = {0};
  if (n_faults) f = *rg_cluster_kv_fault(c, 0);
  RG_CHECK(rg_cluster_kv_fault(c, n_faults) == NULL);
  rg_cluster_destroy(c);
  RG_CHECK_OK(st);
  printf("    %zu fault(s): %s\n", n_faults, n_faults ? f.message : "-");
  RG_CHECK(n_faults == 1);
  // The first order is request 0's, the whole prompt in one transfer.
  double row = (double)(a.n_kv_heads * a.head_dim) * 4.0 * 2 * (double)a.n_layers;
  RG_CHECK(f.request == 0 && f.transfer > 0);
  RG_CHECK(!strcmp(f.worker, co.layout.workers[0].name));
  RG_CHECK(!strcmp(f.to, co.layout.workers[1].name));
  RG_CHECK((double)f.bytes == L * row);
  RG_CHECK(f.code == RG_INVALID_ARGUMENT);
  RG_CHECK_CONTAINS(f.stage, "KV pages of request 0");
  RG_CHECK_CONTAINS(f.error, "reaches past the end");
  RG_CHECK_CONTAINS(f.message, "request 0: KV transfer");
  RG_CHECK_CONTAINS(f.message, co.layout.workers[0].name);
  RG_CHECK_CONTAINS(f.message, "bytes");
  RG_CHECK_CONTAINS(f.message, "recomputes the request");
  // Still answered: recomputed on the decode side, the single-process tokens.
  RG_CHECK(ss.kv_recomputed == 1);
  for (int i = 0; i < 2; i++)
    RG_CHECK(got[i].n_tokens == OUT2 && !memcmp(got[i].tokens, want[i].tokens, OUT2 * 4));
  rg_serve_results_free(got, 2);
  rg_serve_results_free(want, 2);

  // `ridge run --quiet --json` lists it, the request answered all the same.
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd,
           "--quiet run --model %s --layout prefill-decode --prompt-ids 4,8,15,16,23,42 -n 3 "
           "--temperature 0 --threads 1 --isa avx512 --kv-dtype f32 --no-measure "
           "--step-timeout 2 --json",
           dense);
  setenv("RIDGE_TEST_FAIL_KV_ORDER", "1", 1);
  int rc = rg_test_run_ridge(t, cmd, &out);
  unsetenv("RIDGE_TEST_FAIL_KV_ORDER");
  RG_CHECK(rc == 0);
  cJSON *j = cJSON_Parse(out);
  RG_CHECK(j != NULL);
  if (!j) printf("    ridge run said: %s\n", out);
  cJSON *faults = cJSON_GetObjectItem(j, "kv_transfer_faults");
  RG_CHECK(cJSON_IsArray(faults) && cJSON_GetArraySize(faults) == 1);
  cJSON *f0 = cJSON_GetArrayItem(faults, 0);
  cJSON *msg = cJSON_GetObjectItem(f0, "message"), *wk = cJSON_GetObjectItem(f0, "worker");
  RG_CHECK(cJSON_IsString(msg) && strstr(msg->valuestring, "request 0: KV transfer"));
  RG_CHECK(cJSON_IsString(wk) && !strcmp(wk->valuestring, co.layout.workers[0].name));
  RG_CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(f0, "bytes")) == 6 * row);
  RG_CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "kv_recomputed")) == 1);
  RG_CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "failed")) == 0);
  cJSON_Delete(j);
  free(out);
}

// Writes segs into dst as the transport does: count runs (0 counts as 1) of
// len bytes, src_stride and dst_stride apart.
static void apply_segments(uint8_t *dst, const rg_transport_segment_t *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    for (uint32_t r = 0; r < (s[i].count ? s[i].count : 1); r++)
      memcpy(dst + s[i].dst_offset + (uint64_t)r * s[i].dst_stride,
             (const uint8_t *)s[i].src + (int64_t)r * s[i].src_stride, s[i].len);
}

// A transfer between different block sizes hands the transport its runs in
// the destination's order, to gather: the receiver's region gets the same
// bytes as from the per-head strided segments, and laid end to end the runs
// land in one piece per (destination block, layer, K|V), for merges, splits,
// sizes that divide neither way, and ranges starting and ending inside
// blocks on both sides.
RG_TEST(cluster_kv_gather_writes_what_the_per_head_runs_write) {
  enum { HEADS = 3, HEAD = 8, SRC_LAYERS = 3, SRC_BLOCKS = 40, DST_BLOCKS = 48 };
  const int64_t cases[][4] = {{16, 64, 0, 150}, {16, 64, 5, 130}, {64, 16, 0, 200},
                              {16, 24, 7, 100}, {16, 8, 0, 64},   {16, 16, 3, 90}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const int64_t bp = cases[c][0], bd = cases[c][1], p0 = cases[c][2], p1 = cases[c][3];
    const size_t kv_bytes = (size_t)bp * HEADS * HEAD, per = SRC_LAYERS * 2 * kv_bytes;
    uint8_t *src = malloc(per * SRC_BLOCKS);
    RG_REQUIRE(src);
    for (size_t i = 0; i < per * SRC_BLOCKS; i++) src[i] = (uint8_t)(i * 2654435761u >> 13);
    int32_t sb[SRC_BLOCKS], db[DST_BLOCKS];
    for (int i = 0; i < SRC_BLOCKS; i++) sb[i] = (int32_t)((i * 7 + 3) % SRC_BLOCKS);
    for (int i = 0; i < DST_BLOCKS; i++) db[i] = (int32_t)((i * 5 + 11) % DST_BLOCKS);
    rg__xfer_t x = {.dst_layer_begin = 1,
                    .dst_n_blocks = DST_BLOCKS,
                    .dst_block_size = bd,
                    .layer_begin = 1,
                    .layer_end = 3,
                    .pos_begin = p0,
                    .pos_end = p1,
                    .src_block_size = bp,
                    .src = sb,
                    .dst = db};
    const rg__kv_geom_t g = {.src = src,
                             .src_per = per,
                             .src_kv_bytes = kv_bytes,
                             .head = HEAD,
                             .src_block = bp,
                             .src_layer_begin = 0,
                             .heads = HEADS};
    const size_t bytes = rg__kv_bytes(&g, &x);
    RG_CHECK(bytes == (size_t)(p1 - p0) * HEADS * HEAD * 2 * 2);
    const size_t region = 2 * 2 * DST_BLOCKS * (size_t)bd * HEADS * HEAD;
    uint8_t *want = calloc(1, region), *got = calloc(1, region);
    RG_REQUIRE(want && got);
    rg_transport_segment_t *direct, *gathered;
    size_t nd, ng;
    RG_REQUIRE_OK(rg__kv_segments(&g, &x, false, &direct, &nd));
    RG_REQUIRE_OK(rg__kv_segments(&g, &x, true, &gathered, &ng));
    apply_segments(want, direct, nd);
    apply_segments(got, gathered, ng);
    RG_CHECK(!memcmp(want, got, region));
    size_t moved = 0, places = 0;
    for (size_t i = 0; i < ng; i++) {
      moved += gathered[i].len * gathered[i].count;
      // Single runs inside the source pool, in the destination's order: a
      // run that does not continue the one before starts a new place.
      RG_CHECK(gathered[i].count == 1);
      RG_CHECK((const uint8_t *)gathered[i].src >= src &&
               (const uint8_t *)gathered[i].src + gathered[i].len <= src + per * SRC_BLOCKS);
      if (i == 0 || gathered[i - 1].dst_offset + gathered[i - 1].len != gathered[i].dst_offset)
        places++;
    }
    RG_CHECK(moved == bytes);
    // Laid end to end, as the transport stages them, the runs land in one
    // place per (destination block touched, layer, K|V) where the block is
    // whole, and per head where it is not.
    const int64_t touched = (p1 - 1) / bd - p0 / bd + 1;
    const bool whole = p0 % bd == 0 && p1 % bd == 0;
    if (whole) RG_CHECK(places == (size_t)(touched * 2 * 2));
    RG_CHECK(places <= (size_t)(touched * 2 * 2 * HEADS));
    free(direct), free(gathered), free(want), free(got), free(src);
  }
}
