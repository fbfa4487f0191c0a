// The simulator (planner/simulate.h) and `ridge simulate`: arrival
// processes, both trace formats and every kind of bad line, the clock
// against the cost model and its memo, determinism, the link flow model,
// preemption and swap, prefix sharing, long contexts, prefill-decode
// imports, attention-FFN activations, sessions with golden-time retention,
// progress, the pictures, the CLI and `ridge plan --simulate`, and
// agreement with the real runtime on this machine.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"
#include "graphs/weights.h"
#include "planner/planner_impl.h"
#include "planner/sim_impl.h"
#include "planner/simulate.h"
#include "planner/workload_gen.h"
#include "runtime/engine.h"
#include "runtime/limits.h"
#include "runtime/serve.h"
#include "tests/test.h"

// ----- Fixture ----------------------------------------------------------------------

typedef struct {
  rg_catalog_t *cat;
  rg_fleet_t *fleet;
  rg_arch_t *model;
  rg_workload_t *wl;
  rg_workload_t wdef;
  rg_plan_request_t req;
  rg_plan_option_t opt;
} fx_t;

static fx_t *fx_open(rg_test_ctx_t *t, const char *model, const char *fleet, const char *wl) {
  fx_t *f = calloc(1, sizeof *f);
  if (!f) abort();
  const char *dir = rg_test_config_dir();
  rg_status_t st = rg_catalog_load(dir, &f->cat);
  if (!st) st = rg_fleet_load(fleet, dir, f->cat, &f->fleet);
  if (!st) st = rg_model_load(model, dir, &f->model);
  if (!st && wl) st = rg_workload_load(wl, dir, &f->wl);
  if (st) {
    rg_test_fail(t, __FILE__, __LINE__, "fixture: %s", rg_status_message(st));
    rg_status_free(st);
    return f;
  }
  rg_workload_default(&f->wdef);
  f->req.model = f->model;
  f->req.fleet = f->fleet;
  f->req.workload = f->wl ? f->wl : &f->wdef;
  f->req.weight_dtype = f->model->weight_dtype;
  f->req.kv_dtype = RG_BF16;
  return f;
}

static void fx_close(fx_t *f) {
  rg_workload_destroy(f->wl);
  rg_arch_destroy(f->model);
  rg_fleet_destroy(f->fleet);
  rg_catalog_destroy(f->cat);
  free(f);
}

// One pool of `replicas` colocated replicas on `devices` of class `cls`.
static rg_status_t colocated(fx_t *f, const char *cls, int devices, int batch, int replicas) {
  const rg_device_class_t *c = rg_catalog_find(f->cat, cls);
  if (!c) return rg_status_make(RG_NOT_FOUND, "no class %s", cls);
  rg_placement_t *p = &f->opt.pools[0];
  memset(&f->opt, 0, sizeof f->opt);
  snprintf(f->opt.label, sizeof f->opt.label, "test");
  f->opt.n_pools = 1;
  p->mode = RG_MODE_COLOCATED;
  p->n_groups = 1;
  p->groups[0] = (rg_group_t){"main", c, devices, devices, 1, 1};
  p->replicas = replicas;
  p->batch = batch;
  p->micro_batches = 1;
  p->weight_dtype = f->req.weight_dtype;
  p->kv_dtype = f->req.kv_dtype;
  return rg_placement_predict(&f->req, p, &f->opt.pred[0]);
}

// A trace of n requests at the given gap (0: all at once), fixed lengths.
static rg_status_t fixed_trace(rg_sim_trace_t *t, size_t n, int64_t prompt, int64_t output,
                               double gap) {
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "test");
  t->hash_block = RG_SIM_MOONCAKE_BLOCK;
  t->reqs = calloc(n, sizeof *t->reqs);
  if (!t->reqs) return rg_status_make(RG_OUT_OF_MEMORY, "oom");
  t->n = n;
  for (size_t i = 0; i < n; i++)
    t->reqs[i] = (rg_sim_request_t){gap * (double)i, prompt, output, 0, 0, 0};
  return NULL;
}

static rg_sim_options_t opts(const rg_sim_trace_t *tr) {
  rg_sim_options_t o = {0};
  o.trace = tr;
  o.seed = 1;
  o.prefix_cache = -1;
  o.retention_s = -1;
  o.check = 1;
  return o;
}

// ----- Arrivals -----------------------------------------------------------------------

RG_TEST(simulate_gamma_arrivals_are_bursty_at_the_same_rate) {
  rg_workload_t w;
  rg_workload_default(&w);
  enum { N = 20000 };
  rg_gen_request_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
  RG_REQUIRE(a && b);
  rg_arrival_t gam = {RG_ARRIVAL_GAMMA, 10, 3};
  RG_REQUIRE_OK(rg_workload_sample_arrivals(&w, N, 3, 0, &gam, a));
  double s = 0, s2 = 0;
  for (int i = 1; i < N; i++) {
    double g = a[i].arrival - a[i - 1].arrival;
    s += g, s2 += g * g;
  }
  double mean = s / (N - 1), cv = sqrt(s2 / (N - 1) - mean * mean) / mean;
  printf("    gamma cv 3 at 10 req/s: mean gap %.4f s, cv %.2f\n", mean, cv);
  RG_CHECK_NEAR(mean, 0.1, 0.06);
  RG_CHECK_NEAR(cv, 3, 0.12);
  // Poisson through the new entry draws exactly what rg_workload_sample does.
  rg_arrival_t poi = {RG_ARRIVAL_POISSON, 10, 1};
  RG_REQUIRE_OK(rg_workload_sample_arrivals(&w, 100, 3, 0, &poi, a));
  RG_REQUIRE_OK(rg_workload_sample(&w, 100, 3, 0, 10, b));
  RG_CHECK(!memcmp(a, b, 100 * sizeof *a));
  // The shape's mean comes out for shapes below and above 1.
  uint64_t st = 9;
  double m1 = 0, m2 = 0;
  for (int i = 0; i < N; i++) m1 += rg_gen_gamma(&st, 0.5), m2 += rg_gen_gamma(&st, 4);
  RG_CHECK_NEAR(m1 / N, 0.5, 0.04);
  RG_CHECK_NEAR(m2 / N, 4, 0.03);
  rg_arrival_t bad = {RG_ARRIVAL_GAMMA, 10, 0};
  RG_CHECK_ERR(rg_workload_sample_arrivals(&w, 10, 3, 0, &bad, a),
               "cv 0 is not a coefficient of variation");
  rg_arrival_process_t p;
  RG_CHECK_ERR(rg_arrival_parse("bursty", &p),
               "unknown arrival process 'bursty'; expected poisson or gamma");
  free(a);
  free(b);
}

// ----- Traces -------------------------------------------------------------------------

RG_TEST(simulate_azure_trace_reads_the_published_csv) {
  const char *csv =
      "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
      "2023-11-16 18:15:46.6805900,374,44\r\n"
      "2023-11-16 18:15:50.9951690,396,109\r\n"
      "2023-11-16 18:15:51.2,879,0\r\n"
      "2023-11-16 18:15:48.0,100,20\r\n";
  rg_sim_trace_t tr;
  RG_REQUIRE_OK(rg_sim_trace_read(rg_test_write(t, "azure.csv", csv), RG_SIM_TRACE_AZURE, &tr));
  RG_CHECK(tr.n == 4);
  RG_CHECK(tr.n_zero_output == 1);
  RG_CHECK(tr.reqs[0].arrival == 0 && tr.reqs[0].prompt == 374 && tr.reqs[0].output == 44);
  // Out of order in the file, in arrival order here.
  RG_CHECK_NEAR(tr.reqs[1].arrival, 1.31941, 1e-9);
  RG_CHECK(tr.reqs[1].prompt == 100);
  RG_CHECK_NEAR(tr.reqs[2].arrival, 4.314579, 1e-9);
  RG_CHECK(tr.reqs[3].output == 1);
  rg_sim_trace_free(&tr);
  // Plain seconds work as timestamps too, and columns may come in any order.
  const char *cols = "GeneratedTokens,TIMESTAMP,ContextTokens\n5,10.5,7\n";
  RG_REQUIRE_OK(rg_sim_trace_parse("s.csv", cols, strlen(cols), RG_SIM_TRACE_AZURE, &tr));
  RG_CHECK(tr.n == 1 && tr.reqs[0].prompt == 7 && tr.reqs[0].output == 5);
  rg_sim_trace_free(&tr);
}

static void check_defect(rg_test_ctx_t *t, rg_sim_trace_format_t fmt, const char *text,
                         const char *needle) {
  rg_sim_trace_t tr;
  rg_status_t st = rg_sim_trace_parse("trace", text, strlen(text), fmt, &tr);
  if (!st) {
    rg_test_fail(t, __FILE__, __LINE__, "'%s' parsed; expected '%s'", text, needle);
    rg_sim_trace_free(&tr);
    return;
  }
  if (!strstr(rg_status_message(st), needle))
    rg_test_fail(t, __FILE__, __LINE__, "message '%s' lacks '%s'", rg_status_message(st), needle);
  rg_status_free(st);
}

RG_TEST(simulate_azure_trace_defects_name_file_line_and_field) {
  const rg_sim_trace_format_t A = RG_SIM_TRACE_AZURE;
  const char *h = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  char b[512];
  check_defect(
      t, A, "TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:15:46,3,4\n",
      "trace:1: the header 'TIMESTAMP,Context,GeneratedTokens' lacks the column ContextTokens");
  snprintf(b, sizeof b, "%s2023-11-16 18:15:46,374\n2023-11-16 18:15:47,3,4\n", h);
  check_defect(t, A, b, "trace:2: 2 fields, expected 3 (as the header)");
  snprintf(b, sizeof b, "%s2023-11-16 18:15:46,374,4\n2023-11-16 18:15:47.1,37", h);
  check_defect(t, A, b, "trace:3: 2 fields, expected 3 (as the header); the file may be truncated");
  snprintf(b, sizeof b, "%s2023-11-16 18:15:46,374,4\n2023-11-16 18:1", h);
  check_defect(t, A, b, "trace:3: 1 field, expected 3");
  snprintf(b, sizeof b, "%s2023-13-16 18:15:46,374,44\n", h);
  check_defect(t, A, b, "trace:2: TIMESTAMP: '2023-13-16 18:15:46' is not a time");
  snprintf(b, sizeof b, "%syesterday,374,44\n", h);
  check_defect(t, A, b, "trace:2: TIMESTAMP: 'yesterday' is not a time");
  snprintf(b, sizeof b, "%s2023-11-16 18:15:46,3x4,44\n", h);
  check_defect(t, A, b, "trace:2: ContextTokens: '3x4' is not a whole number of tokens");
  snprintf(b, sizeof b, "%s2023-11-16 18:15:46,374,-4\n", h);
  check_defect(t, A, b, "trace:2: GeneratedTokens: '-4' is negative");
  snprintf(b, sizeof b, "%s2023-11-16 18:15:46,0,4\n", h);
  check_defect(t, A, b, "trace:2: ContextTokens: 0; a request needs at least one token");
  snprintf(b, sizeof b, "%s2023-11-16 18:15:46,99999999999,4\n", h);
  check_defect(t, A, b, "trace:2: ContextTokens: '99999999999' is more than");
  snprintf(b, sizeof b, "%s2023-11-16 18:15:46,,4\n", h);
  check_defect(t, A, b, "trace:2: ContextTokens: empty");
  check_defect(t, A, "", "trace: empty; an Azure LLM inference trace starts with the header");
  check_defect(t, A, h, "trace: no requests in the azure trace");
  // Files that are not regular files, and links to ones that are.
  rg_sim_trace_t tr;
  const char *dir = rg_test_tmpdir(t);
  char fifo[1024], link[1024], missing[1024];
  snprintf(fifo, sizeof fifo, "%s/fifo.csv", dir);
  snprintf(link, sizeof link, "%s/link.csv", dir);
  snprintf(missing, sizeof missing, "%s/missing.csv", dir);
  RG_REQUIRE(mkfifo(fifo, 0600) == 0);
  RG_CHECK_ERR(rg_sim_trace_read(fifo, A, &tr), "fifo.csv: is a FIFO, not a regular file");
  RG_CHECK_ERR(rg_sim_trace_read(dir, A, &tr), "is a directory, not a regular file");
  RG_CHECK_ERR(rg_sim_trace_read(missing, A, &tr), "No such file or directory");
  snprintf(b, sizeof b, "%s2023-11-16 18:15:46,374,4\n", h);
  RG_REQUIRE(symlink(rg_test_write(t, "real.csv", b), link) == 0);
  RG_CHECK_OK(rg_sim_trace_read(link, A, &tr));
  RG_CHECK(tr.n == 1);
  rg_sim_trace_free(&tr);
}

static const char mooncake[] =
    "{\"timestamp\": 0, \"input_length\": 1200, \"output_length\": 10, \"hash_ids\": [1, 2, 3]}\n"
    "{\"timestamp\": 500, \"input_length\": 1100, \"output_length\": 12, \"hash_ids\": [1, 2, 4]}\n"
    "\n"
    "{\"timestamp\": 1000, \"input_length\": 600, \"output_length\": 0, \"hash_ids\": [1, 2, 9, "
    "9]}\n";

RG_TEST(simulate_mooncake_trace_shares_prefix_blocks_by_hash_id) {
  rg_sim_trace_t tr;
  RG_REQUIRE_OK(
      rg_sim_trace_read(rg_test_write(t, "mc.jsonl", mooncake), RG_SIM_TRACE_MOONCAKE, &tr));
  RG_CHECK(tr.n == 3 && tr.hash_block == 512);
  RG_CHECK(tr.reqs[1].arrival == 0.5 && tr.reqs[2].arrival == 1.0);
  RG_CHECK(tr.reqs[0].n_hash == 3 && tr.reqs[2].n_hash == 2);  // ids past the prompt dropped
  RG_CHECK(tr.reqs[2].output == 1 && tr.n_zero_output == 1);
  RG_CHECK(tr.hashes[tr.reqs[1].hash_at + 2] == 4);
  // Simulated with the prefix cache: the second request finds the 1,024
  // tokens of ids 1 and 2, the third the 592 of its 600 that fill whole
  // 16-token blocks (a hit never covers the last prompt token).
  fx_t *f = fx_open(t, "llama-3.1-8b", "gpu-only", NULL);
  RG_REQUIRE_OK(colocated(f, "h100-sxm", 1, 8, 1));
  rg_sim_options_t o = opts(&tr);
  rg_sim_report_t *r;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &r));
  printf("    prefix cache: %lld of %lld prompt tokens hit\n", (long long)r->prefix_hit_tokens,
         (long long)r->prefix_lookup_tokens);
  RG_CHECK(r->prefix_cache == 1);
  RG_CHECK(r->prefix_hit_tokens == 1024 + 592);
  RG_CHECK(r->finished == 3 && r->output_tokens == 10 + 12 + 1);
  RG_CHECK(r->prefill_tokens == 1200 + 1100 + 600 - 1024 - 592);
  rg_sim_report_destroy(r);
  // Without the cache every prompt token is computed.
  o.prefix_cache = 0;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &r));
  RG_CHECK(r->prefix_hit_tokens == 0 && r->prefill_tokens == 2900);
  rg_sim_report_destroy(r);
  rg_sim_trace_free(&tr);
  fx_close(f);
}

RG_TEST(simulate_mooncake_trace_defects_name_file_line_and_field) {
  const rg_sim_trace_format_t M = RG_SIM_TRACE_MOONCAKE;
  const char *ok =
      "{\"timestamp\": 0, \"input_length\": 12, \"output_length\": 3, \"hash_ids\": [1]}\n";
  char b[512];
  snprintf(b, sizeof b, "%s{\"timestamp\": 1, \"input_length\": 12,, \"output_length\": 3}\n", ok);
  check_defect(t, M, b, "trace:2: not a JSON object (bad JSON near column");
  snprintf(b, sizeof b, "%s{\"timestamp\": 1, \"input_length\": 12, \"output_len", ok);
  check_defect(t, M, b,
               "trace:2: not a JSON object (bad JSON near column 39); the file may be truncated");
  check_defect(t, M, "[1, 2]\n", "trace:1: expected a JSON object");
  check_defect(
      t, M, "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []} x\n",
      "trace:1: unexpected text after the object at column 73");
  check_defect(t, M, "{\"input_length\": 12, \"output_length\": 3, \"hash_ids\": []}\n",
               "trace:1: timestamp: missing");
  check_defect(
      t, M,
      "{\"timestamp\": \"noon\", \"input_length\": 12, \"output_length\": 3, \"hash_ids\": []}\n",
      "trace:1: timestamp: expected milliseconds, got a string");
  check_defect(
      t, M, "{\"timestamp\": -5, \"input_length\": 12, \"output_length\": 3, \"hash_ids\": []}\n",
      "trace:1: timestamp: -5 is not a time in milliseconds >= 0");
  check_defect(t, M, "{\"timestamp\": 0, \"output_length\": 3, \"hash_ids\": []}\n",
               "trace:1: input_length: missing");
  check_defect(
      t, M,
      "{\"timestamp\": 0, \"input_length\": \"12\", \"output_length\": 3, \"hash_ids\": []}\n",
      "trace:1: input_length: expected a number of tokens, got a string");
  check_defect(
      t, M, "{\"timestamp\": 0, \"input_length\": 12.5, \"output_length\": 3, \"hash_ids\": []}\n",
      "trace:1: input_length: 12.5 is not a whole number of tokens");
  check_defect(t, M,
               "{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 3, \"hash_ids\": []}\n",
               "trace:1: input_length: 0; a request needs at least 1");
  check_defect(t, M,
               "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": -3, \"hash_ids\": []}\n",
               "trace:1: output_length: -3 is not a whole number of tokens");
  check_defect(t, M, "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 3}\n",
               "trace:1: hash_ids: missing");
  check_defect(t, M,
               "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 3, \"hash_ids\": 7}\n",
               "trace:1: hash_ids: expected an array of block ids, got a number");
  check_defect(
      t, M,
      "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 3, \"hash_ids\": [1, \"x\"]}\n",
      "trace:1: hash_ids: element 1 is a string, not a block id");
  check_defect(
      t, M, "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 3, \"hash_ids\": [-1]}\n",
      "trace:1: hash_ids: element 0 is a negative or fractional number, not a block id");
  check_defect(t, M, "\n\n", "trace: no requests in the mooncake trace");
  rg_sim_trace_format_t fmt;
  RG_CHECK_ERR(rg_sim_trace_format_parse("csv", &fmt),
               "unknown trace format 'csv'; expected azure");
}

// ----- The clock against the cost model ---------------------------------------------

RG_TEST(simulate_one_request_takes_the_cost_models_steps) {
  fx_t *f = fx_open(t, "llama-3.1-8b", "gpu-only", NULL);
  RG_REQUIRE_OK(colocated(f, "h100-sxm", 1, 8, 1));
  rg_sim_trace_t tr;
  RG_REQUIRE_OK(fixed_trace(&tr, 1, 1000, 10, 0));
  rg_sim_options_t o = opts(&tr);
  o.exact_costs = 1;
  rg_sim_report_t *r;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &r));
  // The prompt is one chunk: the first token comes after one prefill step.
  rg_step_cost_t pf, dc;
  RG_REQUIRE_OK(
      rg_group_step_time(&f->req, &f->opt.pools[0], 0, RG_PHASE_PREFILL, 1, 1000, 0, &pf));
  RG_CHECK_NEAR(r->ttft.p50, pf.total, 1e-9);
  // Then one decode step per token, each on the context so far.
  double sum = 0;
  for (int k = 0; k < 9; k++) {
    RG_REQUIRE_OK(
        rg_group_step_time(&f->req, &f->opt.pools[0], 0, RG_PHASE_DECODE, 1, 1, 1000 + k, &dc));
    sum += dc.total;
  }
  RG_CHECK(r->tbt.n == 9 && r->iterations == 10);
  RG_CHECK_NEAR(r->tbt.mean, sum / 9, 1e-9);
  RG_CHECK_NEAR(r->e2e.p50, pf.total + sum, 1e-9);
  RG_CHECK_NEAR(r->makespan, pf.total + sum, 1e-9);
  rg_sim_report_destroy(r);
  // The memo's buckets and interpolation stay well within 1%.
  o.exact_costs = 0;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &r));
  RG_CHECK_NEAR(r->ttft.p50, pf.total, 0.005);
  RG_CHECK_NEAR(r->tbt.mean, sum / 9, 0.005);
  rg_sim_report_destroy(r);
  rg_sim_trace_free(&tr);
  fx_close(f);
}

typedef struct {
  const rg_plan_request_t *req;
  const rg_placement_t *p;
  double worst;
  int steps;
  rg_status_t st;
} memo_check_t;

static void compare_step(void *ctx, const rg_sim_step_t *s) {
  memo_check_t *m = ctx;
  double exact;
  if (m->st) return;
  m->st = rg_sim_batch_seconds(m->req, m->p, 0, RG_PHASE_PREFILL, s->batch, &exact);
  double err = fabs(s->step / exact - 1);
  if (err > m->worst) m->worst = err;
  m->steps++;
}

// Every step the simulator costs through its memo is within 1% of the
// exact cost model on the same batch (decodes, chunks and mixes of both).
RG_TEST(simulate_memo_agrees_with_the_exact_cost_model) {
  fx_t *f = fx_open(t, "llama-3.1-8b", "gpu-only", "chat");
  RG_REQUIRE_OK(colocated(f, "h100-sxm", 2, 64, 2));
  rg_sim_trace_t tr;
  rg_arrival_t arr = {RG_ARRIVAL_GAMMA, 40, 2};
  RG_REQUIRE_OK(rg_sim_trace_generate(f->req.workload, 400, 5, &arr, 0, &tr));
  rg_sim_options_t o = opts(&tr);
  o.check = 0;
  memo_check_t m = {&f->req, &f->opt.pools[0], 0, 0, NULL};
  o.on_step = compare_step;
  o.step_ctx = &m;
  rg_sim_report_t *r;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &r));
  RG_CHECK_OK(m.st);
  printf("    %d steps: the memo's worst step is %.3f%% off the exact cost model\n", m.steps,
         100 * m.worst);
  RG_CHECK(m.steps == r->iterations && m.steps > 1000);
  RG_CHECK(m.worst < 0.01);
  rg_sim_report_destroy(r);
  // All at once, the schedule does not depend on timing: the same steps,
  // and figures within the memo's error.
  rg_sim_trace_free(&tr);
  RG_REQUIRE_OK(fixed_trace(&tr, 200, 800, 100, 0));
  o = opts(&tr);
  o.check = 0;
  rg_sim_report_t *memo, *exact;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &memo));
  o.exact_costs = 1;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &exact));
  RG_CHECK(memo->iterations == exact->iterations);
  RG_CHECK_NEAR(memo->tokens_per_s, exact->tokens_per_s, 0.01);
  RG_CHECK_NEAR(memo->ttft.p50, exact->ttft.p50, 0.01);
  RG_CHECK_NEAR(memo->tbt.p50, exact->tbt.p50, 0.01);
  rg_sim_report_destroy(memo);
  rg_sim_report_destroy(exact);
  rg_sim_trace_free(&tr);
  fx_close(f);
}

// ----- Determinism ------------------------------------------------------------------------

static int same_report(const rg_sim_report_t *a, const rg_sim_report_t *b) {
  rg_sim_report_t x = *a, y = *b;
  x.wall_seconds = y.wall_seconds = 0;
  x.kv = y.kv = NULL;
  return !memcmp(&x, &y, sizeof x) && a->n_kv == b->n_kv &&
         !memcmp(a->kv, b->kv, a->n_kv * sizeof *a->kv);
}

RG_TEST(simulate_is_deterministic_for_a_seed) {
  fx_t *f = fx_open(t, "llama-3.1-70b", "mixed", "chat");
  rg_plan_t *plan = calloc(1, sizeof *plan);
  RG_REQUIRE(plan);
  RG_REQUIRE_OK(rg_plan_solve(&f->req, plan));
  RG_CHECK(plan->chosen.n_pools >= 1);
  rg_sim_trace_t tr;
  rg_arrival_t arr = {RG_ARRIVAL_GAMMA, -1, 3};
  RG_REQUIRE_OK(rg_sim_trace_generate(f->req.workload, 600, 11, &arr, 0, &tr));
  rg_sim_options_t o = opts(&tr);
  o.check = 0;
  rg_sim_report_t *a, *b, *c;
  RG_REQUIRE_OK(rg_simulate(&f->req, &plan->chosen, &o, &a));
  RG_REQUIRE_OK(rg_simulate(&f->req, &plan->chosen, &o, &b));
  RG_CHECK(a->finished == 600 && a->unfinished == 0 && a->n_kv > 10);
  RG_CHECK(same_report(a, b));
  // Another seed draws other requests: other figures.
  rg_sim_trace_t tr2;
  RG_REQUIRE_OK(rg_sim_trace_generate(f->req.workload, 600, 12, &arr, 0, &tr2));
  o.trace = &tr2;
  RG_REQUIRE_OK(rg_simulate(&f->req, &plan->chosen, &o, &c));
  RG_CHECK(!same_report(a, c) && a->ttft.p99 != c->ttft.p99);
  rg_sim_report_destroy(a);
  rg_sim_report_destroy(b);
  rg_sim_report_destroy(c);
  rg_sim_trace_free(&tr);
  rg_sim_trace_free(&tr2);
  free(plan);
  fx_close(f);
}

// ----- Links, histograms ------------------------------------------------------------------

RG_TEST(simulate_links_split_bandwidth_between_flows) {
  rg__link_t l = {.bw = 100, .lat = 0};
  RG_REQUIRE_OK(rg__link_add(&l, 0, 100, 1, 0, 0));
  RG_CHECK_NEAR(rg__link_next(&l), 1.0, 1e-12);
  // A second flow halves the first one's rate from t = 0.5: it has 50
  // bytes left at 50 B/s, the newcomer 100.
  RG_REQUIRE_OK(rg__link_add(&l, 0.5, 100, 2, 0, 0));
  RG_CHECK_NEAR(rg__link_next(&l), 1.5, 1e-12);
  rg__link_advance(&l, 1.5);
  rg__flow_t done[4];
  int n;
  rg__link_take_done(&l, done, 4, &n);
  RG_CHECK(n == 1 && done[0].owner == 1 && l.n == 1);
  // Alone again, the second has 50 bytes at the full 100 B/s.
  RG_CHECK_NEAR(rg__link_next(&l), 2.0, 1e-12);
  rg__link_advance(&l, 2.0);
  rg__link_take_done(&l, done, 4, &n);
  RG_CHECK(n == 1 && done[0].owner == 2 && l.n == 0);
  RG_CHECK_NEAR(l.busy, 2.0, 1e-12);
  RG_CHECK_NEAR(l.bytes, 200, 1e-12);
  rg__link_free(&l);
}

RG_TEST(simulate_histogram_percentiles_match_exact_ones) {
  rg__hist_t h;
  RG_REQUIRE_OK(rg__hist_init(&h));
  double v[1000];
  for (int i = 0; i < 1000; i++) {
    v[i] = 0.001 * exp(0.01 * i);
    rg__hist_add(&h, v[i]);
  }
  rg_percentiles_t exact = rg_percentiles(v, 1000);
  rg_sim_pct_t p = rg__hist_pct(&h);
  RG_CHECK_NEAR(p.p50, exact.p50, 0.004);
  RG_CHECK_NEAR(p.p90, exact.p90, 0.004);
  RG_CHECK_NEAR(p.p99, exact.p99, 0.004);
  RG_CHECK(rg__hist_quantile(&h, 0) == v[0] && rg__hist_quantile(&h, 1) == v[999]);
  RG_CHECK_NEAR(rg__hist_share_below(&h, v[499]), 0.5, 0.01);
  rg__hist_free(&h);
}

// ----- KV: preemption, swap, prefix sharing -------------------------------------------------

RG_TEST(simulate_preempts_when_kv_runs_out_by_recompute_and_by_swap) {
  fx_t *f = fx_open(t, "llama-3.1-8b", "gpu-only", NULL);
  // A device pool of ~4,000 tokens: 7 requests of 500 prompt tokens get in,
  // and as each grows towards 1,500 the running ones run out of blocks.
  f->req.mem_util = 0.196;
  RG_REQUIRE_OK(colocated(f, "h100-sxm", 1, 1, 1));
  rg_sim_trace_t tr;
  RG_REQUIRE_OK(fixed_trace(&tr, 16, 500, 1000, 0));
  rg_sim_options_t o = opts(&tr);
  o.max_seqs = 16;
  rg_sim_report_t *r;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &r));
  printf("    %.0f KV tokens: %lld preemptions by recompute, %lld prefill tokens for %lld prompt\n",
         r->kv_device_capacity / rg_arch_kv_bytes_per_token(f->model, RG_BF16),
         (long long)r->preempt_recompute, (long long)r->prefill_tokens,
         (long long)r->prompt_tokens);
  RG_CHECK(r->kv_device_capacity < 6000 * rg_arch_kv_bytes_per_token(f->model, RG_BF16));
  RG_CHECK(r->preempt_recompute > 0 && r->preempt_swap == 0);
  RG_CHECK(r->prefill_tokens > r->prompt_tokens);  // recomputed
  RG_CHECK(r->finished == 16 && r->output_tokens == 16 * 1000 && r->unfinished == 0);
  rg_sim_report_destroy(r);
  // Swap: the KV goes to host DRAM and back over PCIe instead.
  o.preempt = RG_SCHED_PREEMPT_SWAP;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &r));
  printf("    swap: %lld preemptions, %.3g GB over PCIe\n", (long long)r->preempt_swap,
         r->swap_bytes / 1e9);
  RG_CHECK(r->preempt_swap > 0 && r->blocks_swapped_out > 0 && r->blocks_swapped_in > 0);
  RG_CHECK_NEAR(r->swap_bytes,
                (double)(r->blocks_swapped_out + r->blocks_swapped_in) * r->kv_block_bytes, 1e-9);
  RG_CHECK(r->kv_swap_capacity > 0 && r->finished == 16);
  rg_sim_report_destroy(r);
  rg_sim_trace_free(&tr);
  fx_close(f);
}

RG_TEST(simulate_shared_prefix_hits_the_prefix_cache) {
  fx_t *f = fx_open(t, "llama-3.1-8b", "gpu-only", "shared-prefix");
  RG_REQUIRE_OK(colocated(f, "h100-sxm", 1, 32, 1));
  rg_sim_trace_t tr;
  rg_arrival_t arr = {RG_ARRIVAL_POISSON, -1, 1};
  RG_REQUIRE_OK(rg_sim_trace_generate(f->req.workload, 150, 2, &arr, 0, &tr));
  rg_sim_options_t o = opts(&tr);
  o.check = 0;
  rg_sim_report_t *r;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &r));
  printf("    shared prefix: hit rate %.3f, %lld of %lld prompt tokens computed\n",
         r->prefix_hit_rate, (long long)r->prefill_tokens, (long long)r->prompt_tokens);
  RG_CHECK(r->prefix_cache && r->prefix_hit_rate > 0.8);
  RG_CHECK(r->prefill_tokens < r->prompt_tokens / 4);
  double ttft_hit = r->ttft.p50;
  rg_sim_report_destroy(r);
  o.prefix_cache = 0;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &r));
  RG_CHECK(r->prefix_hit_rate == 0 && r->prefill_tokens == r->prompt_tokens);
  RG_CHECK(r->ttft.p50 > 2 * ttft_hit);
  rg_sim_report_destroy(r);
  rg_sim_trace_free(&tr);
  fx_close(f);
}

RG_TEST(simulate_long_context_prompts_prefill_in_chunks) {
  fx_t *f = fx_open(t, "llama-3.1-8b", "gpu-only", "long-context");
  RG_REQUIRE_OK(colocated(f, "h100-sxm", 1, 4, 1));
  rg_sim_trace_t tr;
  rg_arrival_t arr = {RG_ARRIVAL_POISSON, -1, 1};
  RG_REQUIRE_OK(rg_sim_trace_generate(f->req.workload, 12, 4, &arr, f->model->max_context, &tr));
  int64_t prompts = 0;
  for (size_t i = 0; i < tr.n; i++) {
    RG_CHECK(tr.reqs[i].prompt >= 32768 && tr.reqs[i].prompt <= 131072);
    prompts += tr.reqs[i].prompt;
  }
  rg_sim_options_t o = opts(&tr);
  o.check = 0;
  rg_sim_report_t *r;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &r));
  // Every prompt token is computed, at most a step's budget (the chunk and
  // the sequences) at a time, so prompts take many steps and the decodes
  // that share those steps wait for their chunks.
  double budget = f->opt.pred[0].prefill_chunk + 4;
  printf(
      "    long context: %lld prompt tokens in %lld iterations (chunk %.0f), TTFT p50 %.2f s, TBT "
      "p50 %.1f ms p99 %.1f ms\n",
      (long long)prompts, (long long)r->iterations, f->opt.pred[0].prefill_chunk, r->ttft.p50,
      r->tbt.p50 * 1e3, r->tbt.p99 * 1e3);
  RG_CHECK(r->finished == 12 && r->prefill_tokens == prompts);
  RG_CHECK((double)r->iterations >= (double)prompts / budget);
  rg_step_cost_t plain;
  RG_REQUIRE_OK(
      rg_group_step_time(&f->req, &f->opt.pools[0], 0, RG_PHASE_DECODE, 1, 1, 32768, &plain));
  RG_CHECK(r->ttft.p50 > 1 && r->tbt.p50 > 1.5 * plain.total);
  rg_sim_report_destroy(r);
  rg_sim_trace_free(&tr);
  fx_close(f);
}

typedef struct {
  int calls;
  double last_time;
  int64_t last_done;
} progress_seen_t;

static void seen(void *ctx, const rg_sim_progress_t *p) {
  progress_seen_t *s = ctx;
  s->calls++;
  s->last_time = p->sim_time;
  s->last_done = p->requests_done;
}

RG_TEST(simulate_reports_progress_on_long_runs) {
  fx_t *f = fx_open(t, "llama-3.1-8b", "gpu-only", "chat");
  RG_REQUIRE_OK(colocated(f, "h100-sxm", 1, 4, 1));
  rg_sim_trace_t tr;
  rg_arrival_t arr = {RG_ARRIVAL_POISSON, 20, 1};
  RG_REQUIRE_OK(rg_sim_trace_generate(f->req.workload, 2000, 8, &arr, 0, &tr));
  rg_sim_options_t o = opts(&tr);
  o.check = 0;
  progress_seen_t ps = {0};
  o.progress = seen;
  o.progress_ctx = &ps;
  rg_sim_report_t *r;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &r));
  printf("    %lld events, %lld iterations, %d progress calls\n", (long long)r->events,
         (long long)r->iterations, ps.calls);
  // Every 2^16 events and once at the end, which has every request done.
  RG_CHECK(r->events > 65536 && ps.calls >= 2);
  RG_CHECK(ps.last_done == 2000 && ps.last_time > 0);
  rg_sim_report_destroy(r);
  rg_sim_trace_free(&tr);
  fx_close(f);
}

// ----- Disaggregated placements ---------------------------------------------------------------

RG_TEST(simulate_prefill_decode_imports_kv_over_a_shared_link) {
  fx_t *f = fx_open(t, "llama-3.1-70b", "gpu-only", NULL);
  const rg_device_class_t *h = rg_catalog_find(f->cat, "h100-sxm");
  rg_placement_t *p = &f->opt.pools[0];
  f->opt.n_pools = 1;
  p->mode = RG_MODE_PD;
  p->n_groups = 2;
  p->groups[0] = (rg_group_t){"decode", h, 4, 4, 1, 1};
  p->groups[1] = (rg_group_t){"prefill", h, 4, 4, 1, 1};
  for (int s = 0; s < RG_SLOT_COUNT; s++) p->slot_group[s] = 0;
  p->slot_group[RG_SLOT_PREFILL] = 1;
  p->replicas = 1;
  p->batch = 64;
  p->micro_batches = 1;
  p->weight_dtype = RG_BF16;
  p->kv_dtype = RG_BF16;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, p, &f->opt.pred[0]));
  // Spaced out, each transfer has the link to itself; all at once, four
  // prompts share each prefill step, their imports reach the decode side
  // together and share the link.
  rg_sim_trace_t spaced, burst;
  RG_REQUIRE_OK(fixed_trace(&spaced, 32, 500, 20, 2.0));
  RG_REQUIRE_OK(fixed_trace(&burst, 32, 500, 20, 0));
  rg_sim_options_t o = opts(&spaced);
  o.check = 0;  // pools of ~50,000 blocks: checking them every step is slow
  rg_sim_report_t *a, *b;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &a));
  o.trace = &burst;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &b));
  double kv_tok = rg_arch_kv_bytes_per_token(f->model, RG_BF16);
  rg_link_t l = rg__link_between(f->fleet, &p->groups[1], &p->groups[0]);
  double alone = 500 * kv_tok / l.bandwidth + l.latency;
  printf("    KV transfer of 500 tokens: alone %.3g ms (link %.3g ms), p50 in a burst %.3g ms\n",
         a->kv_transfer_s.p50 * 1e3, alone * 1e3, b->kv_transfer_s.p50 * 1e3);
  RG_CHECK_NEAR(a->kv_transfer_bytes, 32 * 500 * kv_tok, 1e-9);
  RG_CHECK(a->kv_transfer_s.n == 32);
  RG_CHECK_NEAR(a->kv_transfer_s.p50, alone, 0.01);
  RG_CHECK(b->kv_transfer_s.p50 > 1.5 * alone);
  // The first token is the prefill side's; the decode side adds the rest.
  RG_CHECK(a->finished == 32 && a->output_tokens == 32 * 20 && a->unfinished == 0);
  RG_CHECK(a->pools[0].prefill_busy > 0 && a->pools[0].busy > 0);
  rg_sim_report_destroy(a);
  rg_sim_report_destroy(b);
  rg_sim_trace_free(&spaced);
  rg_sim_trace_free(&burst);
  fx_close(f);
}

RG_TEST(simulate_attention_ffn_moves_hidden_states_every_layer) {
  fx_t *f = fx_open(t, "llama-3.1-70b", "mixed", NULL);
  rg_placement_meta_t meta = {0};
  char path[1024];
  snprintf(path, sizeof path, "%s/placements/llama70b-af-h100-bertha.yaml", rg_test_config_dir());
  RG_REQUIRE_OK(rg_placement_load(path, f->cat, &f->req, &meta));
  RG_REQUIRE(f->req.n_fixed == 1);
  f->opt.n_pools = 1;
  f->opt.pools[0] = f->req.fixed[0];
  f->opt.pools[0].batch = 32;
  f->req.n_fixed = 0;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &f->opt.pools[0], &f->opt.pred[0]));
  rg_sim_trace_t tr;
  RG_REQUIRE_OK(fixed_trace(&tr, 24, 500, 30, 0.05));
  rg_sim_options_t o = opts(&tr);
  o.check = 0;
  rg_sim_report_t *r;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &r));
  // Every token of every step crosses to the FFN group and back each layer,
  // and (as the planner counts it) once more from the last FFN to lm_head.
  double tokens = (double)(r->prefill_tokens + r->output_tokens - r->finished);
  double want =
      tokens * rg_arch_hidden_bytes(f->model, RG_BF16) * (2 * (double)f->model->n_layers + 1);
  printf("    attention-FFN: %.3g GB of hidden states for %.0f tokens\n", r->activation_bytes / 1e9,
         tokens);
  RG_CHECK_NEAR(r->activation_bytes, want, 1e-9);
  RG_CHECK(r->finished == 24 && r->unfinished == 0);
  rg_sim_report_destroy(r);
  rg_sim_trace_free(&tr);
  fx_close(f);
}

// ----- Sessions and the golden time ------------------------------------------------------------

static rg_sim_sessions_t small_sessions(void) {
  return (rg_sim_sessions_t){.rate = 0.1,
                             .requests = 3,
                             .steps_per_request = 3,
                             .prefix_tokens = 3000,
                             .append_tokens = 200,
                             .output_tokens = 40,
                             .think_time = 40,
                             .think_sigma = 0.5,
                             .tool_latency = 1};
}

RG_TEST(simulate_sessions_keep_prefixes_in_the_tier_past_the_golden_time) {
  fx_t *f = fx_open(t, "llama-3.1-8b", "gpu-only", NULL);
  // A device pool of ~20,000 tokens: idle sessions' prefixes do not all fit.
  f->req.mem_util = 0.213;
  RG_REQUIRE_OK(colocated(f, "h100-sxm", 1, 1, 1));
  rg_sim_sessions_t ses = small_sessions();
  rg_sim_options_t o = opts(NULL);
  o.sessions = &ses;
  o.duration = 400;
  o.check = 0;
  o.tier = rg_catalog_find(f->cat, "host-dram");
  o.retention_s = 10;
  rg_sim_report_t *tier, *none;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &tier));
  o.tier = NULL;
  o.no_tier = 1;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &none));
  printf(
      "    sessions %lld (%lld ended, wait %.2f); tier: %lld offloaded, %lld reloaded, %lld tokens "
      "hit there, %lld prefill tokens vs %lld without a tier\n",
      (long long)tier->sessions, (long long)tier->sessions_finished, tier->session_wait_share,
      (long long)tier->blocks_offloaded, (long long)tier->blocks_reloaded,
      (long long)tier->tier_hit_tokens, (long long)tier->prefill_tokens,
      (long long)none->prefill_tokens);
  // The same sessions in both runs (each draws from its own stream).
  RG_CHECK(tier->sessions == none->sessions && tier->requests == none->requests);
  RG_CHECK(tier->sessions > 20 && tier->sessions_finished > 5);
  RG_CHECK(tier->session_wait_share > 0.5 && tier->session_wait_share < 1);
  RG_CHECK(tier->blocks_offloaded > 0 && tier->blocks_reloaded > 0 && tier->tier_hit_tokens > 0);
  RG_CHECK(tier->tier_bytes > 0 && tier->tier_link_seconds > 0 && tier->saved_prefill_seconds > 0);
  RG_CHECK(tier->kv_tier_peak > 0 && tier->tier_name && !strcmp(tier->tier_name, "host-dram"));
  RG_CHECK(none->blocks_offloaded == 0 && none->tier_hit_tokens == 0 && !none->tier_name);
  RG_CHECK(tier->prefill_tokens < none->prefill_tokens);
  RG_CHECK(tier->prefix_hit_rate > none->prefix_hit_rate);
  rg_sim_report_destroy(tier);
  rg_sim_report_destroy(none);
  // The digest's defaults come through from the agentic workload.
  rg_workload_t *ag;
  RG_REQUIRE_OK(rg_workload_load("agentic", rg_test_config_dir(), &ag));
  rg_sim_sessions_t d;
  rg_sim_sessions_from_workload(ag, &d);
  rg_workload_destroy(ag);
  RG_CHECK(d.requests == 9.2 && d.steps_per_request == 7.8 && d.prefix_tokens == 119000);
  RG_CHECK(d.append_tokens == 875 && d.output_tokens == 214);
  RG_CHECK_NEAR(d.think_time, 0.92 * 62.6 * 60 / 8.2, 1e-9);
  RG_CHECK_NEAR(d.rate, 2.2 / (9.2 * 7.8), 1e-9);
  fx_close(f);
}

// ----- Pictures -----------------------------------------------------------------------------

static char *to_string(rg_test_ctx_t *t, rg_status_t (*draw)(void *, FILE *), void *ctx) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  rg_status_t st = draw(ctx, f);
  fclose(f);
  if (st) {
    rg_test_fail(t, __FILE__, __LINE__, "draw: %s", rg_status_message(st));
    rg_status_free(st);
  }
  return buf;
}

static rg_status_t draw_kv(void *ctx, FILE *f) {
  return rg_sim_write_kv_svg(ctx, "kv <test>", f);
}

typedef struct {
  rg_pareto_curve_t c[RG_PARETO_KINDS];
  int n;
} curves_t;
static rg_status_t draw_pareto(void *ctx, FILE *f) {
  curves_t *c = ctx;
  return rg_sim_write_pareto_svg(c->c, c->n, "pareto", f);
}

RG_TEST(simulate_draws_kv_tiers_over_time_and_the_pareto_frontier) {
  fx_t *f = fx_open(t, "llama-3.1-8b", "gpu-only", NULL);
  f->req.mem_util = 0.213;
  RG_REQUIRE_OK(colocated(f, "h100-sxm", 1, 1, 1));
  rg_sim_sessions_t ses = small_sessions();
  rg_sim_options_t o = opts(NULL);
  o.sessions = &ses;
  o.duration = 200;
  o.check = 0;
  o.tier = rg_catalog_find(f->cat, "host-dram");
  o.retention_s = 10;
  rg_sim_report_t *r;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &r));
  char *svg = to_string(t, draw_kv, r);
  RG_CHECK_CONTAINS(svg, "<svg");
  RG_CHECK_CONTAINS(svg, "kv &lt;test&gt;");
  RG_CHECK_CONTAINS(svg, "device KV pool");
  RG_CHECK_CONTAINS(svg, "host-dram tier (idle prefixes)");
  RG_CHECK_CONTAINS(svg, "</svg>");
  free(svg);
  rg_sim_report_destroy(r);
  fx_close(f);

  // The frontier: each kind's tokens/s per user falls and per device rises
  // as its batch cap grows.
  f = fx_open(t, "llama-3.1-8b", "gpu-only", "chat");
  rg_plan_t *plan = calloc(1, sizeof *plan);
  curves_t *cv = calloc(1, sizeof *cv);
  RG_REQUIRE(plan && cv);
  RG_REQUIRE_OK(rg_plan_solve(&f->req, plan));
  rg_sim_options_t po = opts(NULL);
  po.check = 0;
  RG_REQUIRE_OK(rg_sim_pareto(&f->req, plan, &po, cv->c, &cv->n));
  RG_CHECK(cv->n >= 2);
  RG_CHECK(!strncmp(cv->c[cv->n - 1].label, "chosen", 6));
  for (int i = 0; i < cv->n; i++) {
    const rg_pareto_curve_t *c = &cv->c[i];
    printf("    %-32s %d points: per user %.0f -> %.1f, per device %.1f -> %.0f\n", c->label, c->n,
           c->pt[0].per_user, c->pt[c->n - 1].per_user, c->pt[0].per_device,
           c->pt[c->n - 1].per_device);
    RG_CHECK(c->n >= 3);
    RG_CHECK(c->pt[0].per_user > c->pt[c->n - 1].per_user);
    RG_CHECK(c->pt[0].per_device < c->pt[c->n - 1].per_device);
  }
  svg = to_string(t, draw_pareto, cv);
  RG_CHECK_CONTAINS(svg, "tokens/s per user");
  RG_CHECK_CONTAINS(svg, "homogeneous h100-sxm");
  free(svg);
  free(cv);
  free(plan);
  fx_close(f);
}

// ----- Bad options ----------------------------------------------------------------------------

RG_TEST(simulate_refuses_options_that_cannot_work) {
  fx_t *f = fx_open(t, "llama-3.1-8b", "gpu-only", NULL);
  RG_REQUIRE_OK(colocated(f, "h100-sxm", 1, 8, 1));
  rg_sim_trace_t tr;
  RG_REQUIRE_OK(fixed_trace(&tr, 4, 100, 10, 0));
  rg_sim_sessions_t ses = small_sessions();
  rg_sim_report_t *r = NULL;
  rg_sim_options_t o = opts(&tr);
  o.sessions = &ses;
  RG_CHECK_ERR(rg_simulate(&f->req, &f->opt, &o, &r),
               "give either a trace of requests or sessions");
  o = opts(NULL);
  o.sessions = &ses;
  RG_CHECK_ERR(rg_simulate(&f->req, &f->opt, &o, &r), "sessions need a duration");
  o = opts(&tr);
  o.block_size = 24;
  RG_CHECK_ERR(rg_simulate(&f->req, &f->opt, &o, &r), "block size 24 is not a power of two");
  o = opts(&tr);
  o.tier = rg_catalog_find(f->cat, "host-dram");
  o.prefix_cache = 0;
  RG_CHECK_ERR(rg_simulate(&f->req, &f->opt, &o, &r), "it needs the prefix cache on");
  // A request longer than the model's context fails alone.
  tr.reqs[1].prompt = 200000;
  o = opts(&tr);
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &r));
  RG_CHECK(r->refused == 1 && r->finished == 3);
  RG_CHECK(strstr(r->refused_reason, "max_context") || strstr(r->refused_reason, "context"));
  rg_sim_report_destroy(r);
  rg_sim_trace_free(&tr);
  fx_close(f);

  // This machine's fleet has no host DRAM or SSD beside its CPU.
  f = fx_open(t, "llama-3.1-8b", "local", NULL);
  RG_REQUIRE_OK(colocated(f, "local-cpu", 1, 1, 1));
  RG_REQUIRE_OK(fixed_trace(&tr, 2, 100, 4, 0));
  o = opts(&tr);
  o.preempt = RG_SCHED_PREEMPT_SWAP;
  RG_CHECK_ERR(rg_simulate(&f->req, &f->opt, &o, &r),
               "preemption by swap needs host DRAM on the nodes of group 'main' (local-cpu)");
  o = opts(&tr);
  o.prefix_cache = 1;
  o.tier = rg_catalog_find(f->cat, "nvme-ssd");
  RG_CHECK_ERR(rg_simulate(&f->req, &f->opt, &o, &r),
               "the KV tier 'nvme-ssd' is not on the nodes of group 'main' (local-cpu)");
  rg_sim_trace_free(&tr);
  fx_close(f);
}

// ----- The command ---------------------------------------------------------------------------

RG_TEST(simulate_cli_teaches_prints_json_and_names_bad_lines) {
  char *out = NULL;
  RG_CHECK(rg_test_run_ridge(t, "simulate --help", &out) == 0);
  RG_CHECK_CONTAINS(out, "What arrives (one of):");
  RG_CHECK_CONTAINS(out, "--trace-format azure");
  RG_CHECK_CONTAINS(out, "examples:");
  free(out);
  RG_CHECK(rg_test_run_ridge(t,
                             "simulate --model llama-3.1-8b --fleet gpu-only --workload chat "
                             "--requests 300 --arrival gamma --cv 2 --json",
                             &out) == 0);
  cJSON *j = cJSON_Parse(out);
  RG_CHECK(j != NULL);
  const cJSON *lat = cJSON_GetObjectItem(j, "latency_s");
  const cJSON *ttft = lat ? cJSON_GetObjectItem(lat, "ttft") : NULL;
  RG_CHECK(ttft && cJSON_GetObjectItem(ttft, "p99")->valuedouble > 0);
  const cJSON *req = cJSON_GetObjectItem(j, "requests");
  RG_CHECK(req && cJSON_GetObjectItem(req, "finished")->valuedouble == 300);
  RG_CHECK(cJSON_GetObjectItem(j, "goodput") && cJSON_GetObjectItem(j, "kv") &&
           cJSON_GetObjectItem(j, "pools"));
  cJSON_Delete(j);
  free(out);
  // Human output, with both predictions side by side.
  RG_CHECK(rg_test_run_ridge(
               t, "simulate --model llama-3.1-8b --fleet gpu-only --requests 200 --quiet", &out) ==
           0);
  RG_CHECK_CONTAINS(out, "goodput");
  RG_CHECK_CONTAINS(out, "plan said");
  free(out);
  // A bad trace line: the file, the line and the field.
  const char *csv = rg_test_write(t, "trace.csv",
                                  "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                  "2023-11-16 18:15:46,374,44\n2023-11-16 18:15:47,3.5,44\n");
  char args[2048];
  snprintf(args, sizeof args,
           "simulate --model llama-3.1-8b --fleet gpu-only --trace %s --trace-format azure", csv);
  RG_CHECK(rg_test_run_ridge(t, args, &out) == 2);
  RG_CHECK_CONTAINS(out, "trace.csv:3: ContextTokens: '3.5' is not a whole number of tokens");
  free(out);
  snprintf(args, sizeof args, "simulate --model llama-3.1-8b --fleet gpu-only --trace %s", csv);
  RG_CHECK(rg_test_run_ridge(t, args, &out) == 2);
  RG_CHECK_CONTAINS(out, "--trace needs --trace-format azure");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "simulate --model llama-3.1-8b --fleet gpu-only --cv 2", &out) ==
           2);
  RG_CHECK_CONTAINS(out, "--cv sets how bursty gamma arrivals are; add --arrival gamma");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "simulate --model llama-3.1-8b --fleet gpu-only --duration soon",
                             &out) == 2);
  RG_CHECK_CONTAINS(out, "--duration: 'soon' is not a duration");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "simulate --model llama-3.1-8b --fleet gpu-only --tier h100-sxm",
                             &out) == 2);
  RG_CHECK_CONTAINS(out, "--tier: h100-sxm computes");
  free(out);
  RG_CHECK(rg_test_run_ridge(
               t, "simulate --model llama-3.1-8b --fleet gpu-only --trace-format mooncake", &out) ==
           2);
  RG_CHECK_CONTAINS(out, "--trace-format needs --trace FILE");
  free(out);
  // ridge plan --simulate: both predictions, and a choice by goodput.
  RG_CHECK(rg_test_run_ridge(
               t, "plan --model llama-3.1-8b --fleet gpu-only --workload chat --simulate", &out) ==
           0);
  RG_CHECK_CONTAINS(out, "Simulated (1,000 of the workload's requests");
  RG_CHECK_CONTAINS(out, "analytical | simulated");
  RG_CHECK_CONTAINS(out, "chosen by simulated goodput");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "plan --model llama-3.1-8b --fleet gpu-only --simulate --json",
                             &out) == 0);
  j = cJSON_Parse(out);
  const cJSON *sim = j ? cJSON_GetObjectItem(j, "simulated") : NULL;
  RG_CHECK(sim && cJSON_GetArraySize(sim) >= 2);
  cJSON_Delete(j);
  free(out);
}

// ----- Fidelity: the real runtime against the simulator ----------------------------------

typedef struct {
  double sum;
  int n;
} steps_t;

RG_TEST(simulate_agrees_with_the_runtime_on_this_machine) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/tiny", rg_test_tmpdir(t));
  rg_testmodel_opts_t mo = {.arch = RG_TESTMODEL_LLAMA,
                            .size = RG_TESTMODEL_TINY,
                            .dtype = RG_BF16,
                            .gguf_type = RG_DTYPE_COUNT,
                            .seed = 5};
  RG_REQUIRE_OK(rg_testmodel_write(dir, &mo, NULL));
  rg_engine_options_t eo = {.threads = 1, .max_seqs = 4};
  rg_engine_t *e;
  RG_REQUIRE_OK(rg_engine_create(dir, &eo, &e));
  // The CPU class, calibrated on this machine: its read bandwidth measured
  // now, and from a separate run of steps what the tiny model's kernels
  // cost, which is far from any roof (fixed costs per step, a rate per
  // token): single-token steps give the cost of a step, 48-token
  // prefills the rate its FLOPs run at.
  rg_limits_t lim;
  RG_REQUIRE_OK(rg_limits_measure(rg_engine_pool(e), 0.1, &lim));
  int32_t toks[48], blocks[3] = {0, 1, 2};
  for (int i = 0; i < 48; i++) toks[i] = 5 + i;
  rg_engine_entry_t dec = {0, 1, toks, blocks, 1, 1}, pre = {0, 48, toks, blocks, 3, 1};
  float *logits = malloc((size_t)rg_engine_vocab(e) * sizeof(float));
  RG_REQUIRE(logits);
  double t_dec = INFINITY, t_pre = INFINITY;
  for (int i = 0; i < 12; i++) {
    rg_engine_counters_t c0, c1, c2;
    rg_engine_counters(e, &c0);
    RG_REQUIRE_OK(rg_engine_forward(e, &dec, 1, logits));
    rg_engine_counters(e, &c1);
    RG_REQUIRE_OK(rg_engine_forward(e, &pre, 1, logits));
    rg_engine_counters(e, &c2);
    if (i < 2) continue;  // warming up
    t_dec = fmin(t_dec, c1.seconds - c0.seconds);
    t_pre = fmin(t_pre, c2.seconds - c1.seconds);
  }
  free(logits);
  // The runtime: 6 requests of 24 prompt tokens, 12 out, all at once.
  enum { N = 6, LEN = 24, OUT = 12 };
  int32_t ids[N * LEN];
  rg_serve_request_t sr[N];
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < LEN; k++) ids[i * LEN + k] = (int32_t)((i * 31 + k * 7) % 500);
    sr[i] = (rg_serve_request_t){(uint64_t)i, ids + i * LEN, LEN, OUT, {0, 0, 1, 0}, 0};
  }
  rg_serve_result_t res[N];
  rg_serve_stats_t ss;
  rg_serve_options_t so = {.max_batch_tokens = 64};
  RG_REQUIRE_OK(rg_serve(e, sr, N, &so, res, &ss));
  rg_serve_results_free(res, N);

  // The simulator: the same requests on this machine's fleet, the class
  // calibrated from what was measured.
  fx_t *f = fx_open(t, "llama-3.1-8b", "local", NULL);
  char cfg[1100];
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  rg_arch_t *tiny;
  RG_REQUIRE_OK(rg_model_load(cfg, rg_test_config_dir(), &tiny));
  rg_shape_t shape = {RG_PHASE_PREFILL, 1, 48, 0, RG_BF16, RG_BF16, RG_BF16};
  rg_stage_cost_t sc[RG_MAX_STAGE_COSTS];
  size_t n_sc;
  RG_REQUIRE_OK(rg_stage_costs(tiny, &shape, sc, RG_MAX_STAGE_COSTS, &n_sc));
  double flops = 0;
  for (size_t i = 0; i < n_sc; i++)
    if (!sc[i].is_part) flops += sc[i].flops;
  rg_device_class_t cls = *rg_catalog_find(f->cat, "local-cpu");
  double rate = flops / fmax(t_pre - t_dec, 1e-6);
  for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++) cls.peak[d] = cls.peak[d] > 0 ? rate : 0;
  for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++) cls.eff_compute[d].n = 0;
  cls.eff_compute_all = (rg_eff_curve_t){1, {{1, 1}}};
  cls.mem[0].bandwidth = lim.read_bandwidth;
  cls.eff_memory = 1;
  cls.eff_attention = 0;
  cls.step_cost = t_dec;
  cls.layer_floor = 0;
  f->fleet->nodes[0].devs[0].cls = &cls;
  f->req.model = tiny;
  f->req.weight_dtype = RG_BF16;
  rg_placement_t *p = &f->opt.pools[0];
  f->opt.n_pools = 1;
  p->mode = RG_MODE_COLOCATED;
  p->n_groups = 1;
  p->groups[0] = (rg_group_t){"cpu", &cls, 1, 1, 1, 1};
  p->replicas = 1;
  p->batch = 4;
  p->micro_batches = 1;
  p->prefill_chunk = 64 - 4;  // sched's token budget = chunk + sequences = serve's 64
  p->weight_dtype = RG_BF16;
  p->kv_dtype = RG_BF16;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, p, &f->opt.pred[0]));
  rg_sim_trace_t tr;
  RG_REQUIRE_OK(fixed_trace(&tr, N, LEN, OUT, 0));
  rg_sim_options_t o = opts(&tr);
  o.max_seqs = 4;
  o.prefix_cache = 0;
  o.kv_tokens = rg_engine_kv_blocks(e) * rg_engine_block_size(e);
  rg_sim_report_t *r;
  RG_REQUIRE_OK(rg_simulate(&f->req, &f->opt, &o, &r));
  printf(
      "    runtime vs simulator: %lld vs %lld iterations; e2e p50 %.3g vs %.3g ms, TTFT p50 %.3g "
      "vs "
      "%.3g ms, TBT p50 %.3g vs %.3g ms\n",
      (long long)ss.iterations, (long long)r->iterations, ss.e2e.p50 * 1e3, r->e2e.p50 * 1e3,
      ss.ttft.p50 * 1e3, r->ttft.p50 * 1e3, ss.tbt.p50 * 1e3, r->tbt.p50 * 1e3);
  // The same scheduler on the same requests makes the same decisions.
  RG_CHECK(r->iterations == ss.iterations);
  RG_CHECK(r->output_tokens == ss.new_tokens);
  // Timing agrees loosely: sanitizers and a loaded machine slow the real
  // run, never the simulated one.
  RG_CHECK(r->e2e.p50 < 3 * ss.e2e.p50 && ss.e2e.p50 < 3 * r->e2e.p50);
  rg_sim_report_destroy(r);
  rg_sim_trace_free(&tr);
  rg_arch_destroy(tiny);
  f->req.model = f->model;
  fx_close(f);
  rg_engine_destroy(e);
}

// ----- The trace fuzzer's corpus -------------------------------------------------------------

#define LLVMFuzzerTestOneInput rg_fuzz_trace_one
#include "tests/fuzz/fuzz_trace.c"
#undef LLVMFuzzerTestOneInput
#include <dirent.h>

RG_TEST(simulate_trace_fuzz_corpus_replays_cleanly) {
  DIR *d = opendir(RIDGE_SOURCE_DIR "/tests/fuzz/corpus/trace");
  RG_REQUIRE(d);
  int n = 0;
  struct dirent *ent;
  while ((ent = readdir(d))) {
    if (ent->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, RIDGE_SOURCE_DIR "/tests/fuzz/corpus/trace/%s", ent->d_name);
    char *data;
    size_t len;
    rg_status_t st = rg_file_read_all(path, "corpus", 1 << 20, &data, &len);
    if (st) {
      rg_status_free(st);
      continue;
    }
    uint8_t *exact = malloc(len ? len : 1);
    RG_REQUIRE(exact);
    memcpy(exact, data, len);
    rg_fuzz_trace_one(exact, len);
    free(exact);
    free(data);
    n++;
  }
  closedir(d);
  RG_CHECK(n >= 4);
}
