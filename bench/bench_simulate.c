// The simulator's two benchmarks (never asserted; ratios in one run):
//
//   1. scale: 1,000 H100s (125 nodes of 8) serving Llama 3.1 70B under the
//      plan `ridge plan` chooses, one hour of chat traffic at 300 req/s
//      (about 1.08 million requests), on one core. Goal: under 60 s. Prints
//      the wall time and its ratio to the goal, events and iterations per
//      second, the peak memory, and what the step-time memo saves against
//      calling the cost model for every step (and how far apart they land).
//   2. fidelity: the real single-process runtime (runtime/serve.h) on a
//      random-weight test model on this machine's CPU, against the
//      simulator running the same requests on the same placement, the CPU
//      class calibrated from this machine's limits measured in the same run
//      (runtime/limits.h) and its fixed costs from a separate calibration
//      run of single-token steps. Prints the error per stage and end to end
//      (throughput, TTFT p50, TBT p50). Goal: median per-stage error <= 5%,
//      throughput and TTFT/TBT p50 within 10%.
//
// usage: bench_simulate [--scale-only | --fidelity-only] [--hours H] [--model DIR | --1b]
//   --model DIR  a model directory for the fidelity run (default: the tiny
//                test model, written to a temporary directory)
//   --1b         the ~1B-parameter test model from the user cache (written
//                the first time, ~4.4 GB, ~40 s), whose decode is bound by
//                memory bandwidth rather than by fixed costs
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "graphs/weights.h"
#include "planner/planner.h"
#include "planner/simulate.h"
#include "runtime/engine.h"
#include "runtime/limits.h"
#include "runtime/serve.h"
#include "runtime/stage.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int fail(rg_status_t st) {
  fprintf(stderr, "bench_simulate: %s\n", rg_status_message(st));
  rg_status_free(st);
  return 1;
}

#define TRY(expr)            \
  do {                       \
    rg_status_t s_ = (expr); \
    if (s_) return fail(s_); \
  } while (0)

// ----- 1. Scale ------------------------------------------------------------------------

static const char fleet_yaml[] =
    "name: h100-1000\n"
    "description: 125 nodes of 8 H100 SXM (the simulator's scale benchmark)\n"
    "provider: \"verbs;ofi_rxm\"\n"
    "network: { bandwidth: 400 Gb/s, latency: 5 us }\n"
    "nodes:\n"
    "  - name: gpu\n"
    "    count: 125\n"
    "    devices:\n"
    "      - { class: h100-sxm, count: 8 }\n"
    "      - { class: host-dram, count: 1 }\n"
    "      - { class: nvme-ssd, count: 4 }\n"
    "    link: { bandwidth: 450 GB/s, latency: 1 us }\n";

static void on_progress(void *ctx, const rg_sim_progress_t *p) {
  double *last = ctx;
  if (p->wall_seconds - *last < 5) return;
  *last = p->wall_seconds;
  fprintf(stderr, "  ... %.0f of %.0f s simulated, %lld requests done, %.1f s\n", p->sim_time,
          p->end_time, (long long)p->requests_done, p->wall_seconds);
}

static int bench_scale(const char *dir, double hours) {
  // A fleet file is named after its fleet: h100-1000.yaml in a fresh directory.
  char tmp[] = "/tmp/bench_simulate_XXXXXX", path[64];
  if (!mkdtemp(tmp)) {
    fprintf(stderr, "bench_simulate: cannot make a temporary directory\n");
    return 1;
  }
  snprintf(path, sizeof path, "%s/h100-1000.yaml", tmp);
  FILE *ff = fopen(path, "w");
  if (!ff || fputs(fleet_yaml, ff) < 0 || fclose(ff)) {
    fprintf(stderr, "bench_simulate: cannot write %s\n", path);
    return 1;
  }
  rg_catalog_t *cat;
  rg_fleet_t *fleet;
  rg_arch_t *model;
  rg_workload_t *wl;
  TRY(rg_catalog_load(dir, &cat));
  TRY(rg_fleet_load(path, dir, cat, &fleet));
  unlink(path);
  rmdir(tmp);
  TRY(rg_model_load("llama-3.1-70b", dir, &model));
  TRY(rg_workload_load("chat", dir, &wl));
  wl->rate = 300;
  rg_plan_request_t *req = calloc(1, sizeof *req);
  rg_plan_t *plan = calloc(1, sizeof *plan);
  if (!req || !plan) return 1;
  req->model = model;
  req->fleet = fleet;
  req->workload = wl;
  req->weight_dtype = model->weight_dtype;
  req->kv_dtype = RG_BF16;
  TRY(rg_plan_solve(req, plan));
  int devices = 0;
  for (int i = 0; i < plan->chosen.n_pools; i++) {
    const rg_placement_t *p = &plan->chosen.pools[i];
    for (int g = 0; g < p->n_groups; g++) devices += p->groups[g].devices * p->replicas;
  }
  double duration = 3600 * hours;
  size_t n = (size_t)(300 * duration * 1.02 + 1000);
  rg_arrival_t arr = {RG_ARRIVAL_POISSON, -1, 1};
  rg_sim_trace_t tr;
  double t0 = now();
  TRY(rg_sim_trace_generate(wl, n, 1, &arr, model->max_context, &tr));
  double t_gen = now() - t0;
  printf(
      "scale: %s on %s (1,000 H100 SXM), %d devices in the plan (%s), chat at 300 req/s for %.3g "
      "h\n",
      model->name, fleet->name, devices, plan->chosen.label, hours);
  double last = 0;
  rg_sim_options_t o = {.trace = &tr,
                        .duration = duration,
                        .seed = 1,
                        .prefix_cache = -1,
                        .retention_s = -1,
                        .progress = on_progress,
                        .progress_ctx = &last};
  rg_sim_report_t *r;
  TRY(rg_simulate(req, &plan->chosen, &o, &r));
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf(
      "  %lld requests (%.3g M output tokens) over %.1f min simulated in %.1f s on one core "
      "(+%.1f s drawing them): %.2fx the 60 s goal\n",
      (long long)r->finished, r->output_tokens / 1e6, r->makespan / 60, r->wall_seconds, t_gen,
      60 / r->wall_seconds);
  printf(
      "  %.3g M iterations (%.2f us each), %.3g M events; %.0f k requests/s and %.3g M tokens/s "
      "of wall time; peak memory %.0f MB\n",
      r->iterations / 1e6, r->wall_seconds / (double)r->iterations * 1e6, r->events / 1e6,
      r->finished / r->wall_seconds / 1e3, r->output_tokens / r->wall_seconds / 1e6,
      ru.ru_maxrss / 1024.0);
  printf(
      "  simulated: %.0f tokens/s, TTFT p50/p99 %.0f/%.0f ms, TBT p50/p99 %.1f/%.1f ms, goodput "
      "%.1f%% of requests; %lld preemptions; KV block %.0f tokens\n",
      r->tokens_per_s, r->ttft.p50 * 1e3, r->ttft.p99 * 1e3, r->tbt.p50 * 1e3, r->tbt.p99 * 1e3,
      100 * r->slo_attainment, (long long)(r->preempt_recompute + r->preempt_swap),
      r->kv_block_bytes / rg_arch_kv_bytes_per_token(model, RG_BF16));
  // The memo against the exact cost model on a 5-minute slice.
  rg_sim_options_t q = o;
  q.duration = 300;
  q.progress = NULL;
  rg_sim_report_t *m, *x;
  TRY(rg_simulate(req, &plan->chosen, &q, &m));
  q.exact_costs = 1;
  TRY(rg_simulate(req, &plan->chosen, &q, &x));
  printf(
      "  memo vs exact cost model (5 min slice): %.1f s vs %.1f s (%.1fx faster); tokens/s %.4f, "
      "TTFT p50 %.4f, TBT p50 %.4f, e2e p99 %.4f of exact\n",
      m->wall_seconds, x->wall_seconds, x->wall_seconds / m->wall_seconds,
      m->tokens_per_s / x->tokens_per_s, m->ttft.p50 / x->ttft.p50, m->tbt.p50 / x->tbt.p50,
      m->e2e.p99 / x->e2e.p99);
  rg_sim_report_destroy(m);
  rg_sim_report_destroy(x);
  rg_sim_report_destroy(r);
  rg_sim_trace_free(&tr);
  free(plan);
  free(req);
  rg_workload_destroy(wl);
  rg_arch_destroy(model);
  rg_fleet_destroy(fleet);
  rg_catalog_destroy(cat);
  return 0;
}

// ----- Calibration -----------------------------------------------------------------

// Stage slots the engine's stage instances report against.
static const int slots[] = {RG_SLOT_EMBED, RG_SLOT_ATTENTION, RG_SLOT_FFN, RG_SLOT_LM_HEAD};
#define N_SLOTS 4

static int slot_index(rg_stage_kind_t k) {
  int s = rg_slot_of_stage(k);
  for (int i = 0; i < N_SLOTS; i++)
    if (slots[i] == s) return i;
  return -1;
}

// Measured seconds per slot (summed over the engine's instances) and the
// forward steps' total.
static void measured(rg_engine_t *e, double out[N_SLOTS], double *forward) {
  for (int i = 0; i < N_SLOTS; i++) out[i] = 0;
  for (size_t i = 0; i < rg_engine_stage_count(e); i++) {
    const rg_stage_t *s = rg_engine_stage_at(e, i);
    rg_stage_counters_t c;
    rg_stage_counters(s, &c);
    int k = slot_index(rg_stage_spec(s)->kind);
    if (k >= 0) out[k] += c.seconds;
  }
  rg_engine_counters_t ec;
  rg_engine_counters(e, &ec);
  *forward = ec.seconds;
}

static void reset(rg_engine_t *e) {
  for (size_t i = 0; i < rg_engine_stage_count(e); i++)
    rg_stage_counters_reset((rg_stage_t *)rg_engine_stage_at(e, i));
  rg_engine_counters_reset(e);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define MAX_CAL 8

typedef struct {
  int n;
  char name[MAX_CAL][32];
  rg_sched_entry_t entries[MAX_CAL][8];
  rg_sched_batch_t batch[MAX_CAL];
  double seconds[MAX_CAL];         // per step, measured
  double stage[MAX_CAL][N_SLOTS];  // per step and stage, measured
} calib_t;

// The median of `reps` timings of one step (after one to warm up): this
// machine is shared, and a median shrugs off the steps another process
// interrupted.
static rg_status_t time_steps(rg_engine_t *e, const rg_engine_entry_t *en, size_t n, int reps,
                              double *out) {
  float *logits = malloc(n * (size_t)rg_engine_vocab(e) * sizeof(float));
  double t[16];
  if (!logits || reps > 16) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  rg_status_t st = rg_engine_forward(e, en, n, logits);
  for (int i = 0; i < reps && !st; i++) {
    rg_engine_counters_t c0, c1;
    rg_engine_counters(e, &c0);
    st = rg_engine_forward(e, en, n, logits);
    rg_engine_counters(e, &c1);
    t[i] = c1.seconds - c0.seconds;
  }
  free(logits);
  qsort(t, (size_t)reps, sizeof t[0], cmp_d);
  *out = t[reps / 2];
  return st;
}

static rg_status_t calibrate(rg_engine_t *e, calib_t *c) {
  static int32_t toks[256], tables[8][16];
  for (int i = 0; i < 256; i++) toks[i] = 5 + i % 200;
  for (int s = 0; s < 8; s++)
    for (int b = 0; b < 16; b++) tables[s][b] = s * 16 + b;
  const int decodes[] = {1, 2, 4, 8}, prefills[] = {16, 64, 256};
  for (size_t k = 0; k < 4; k++) {
    int B = decodes[k];
    rg_engine_entry_t en[8];
    for (int s = 0; s < B; s++) {
      en[s] = (rg_engine_entry_t){64, 1, toks + 64, tables[s], 5, 1};
      c->entries[c->n][s] = (rg_sched_entry_t){s, 0, 64, 1, toks + 64, 1, 0, tables[s], 5};
    }
    double fwd;
    reset(e);
    RG_RETURN_IF_ERROR(time_steps(e, en, (size_t)B, 9, &c->seconds[c->n]));
    measured(e, c->stage[c->n], &fwd);
    for (int k2 = 0; k2 < N_SLOTS; k2++) c->stage[c->n][k2] /= 10;
    c->batch[c->n] = (rg_sched_batch_t){.entries = c->entries[c->n], .n_entries = (size_t)B};
    snprintf(c->name[c->n++], 32, "decode x %d", B);
  }
  for (size_t k = 0; k < 3; k++) {
    int n = prefills[k];
    rg_engine_entry_t en = {0, n, toks, tables[7], (n + 15) / 16, 1};
    c->entries[c->n][0] = (rg_sched_entry_t){0, 0, 0, n, toks, 1, 1, tables[7], (n + 15) / 16};
    double fwd;
    reset(e);
    RG_RETURN_IF_ERROR(time_steps(e, &en, 1, 5, &c->seconds[c->n]));
    measured(e, c->stage[c->n], &fwd);
    for (int k2 = 0; k2 < N_SLOTS; k2++) c->stage[c->n][k2] /= 6;
    c->batch[c->n] = (rg_sched_batch_t){.entries = c->entries[c->n], .n_entries = 1};
    snprintf(c->name[c->n++], 32, "prefill of %d", n);
  }
  return NULL;
}

static double loss(const rg_plan_request_t *req, const rg_placement_t *p, const calib_t *c) {
  double l = 0;
  for (int i = 0; i < c->n; i++) {
    double t;
    rg_status_t st = rg_sim_batch_seconds(req, p, 0, RG_PHASE_PREFILL, &c->batch[i], &t);
    if (st) {
      rg_status_free(st);
      return INFINITY;
    }
    double r = log(t / c->seconds[i]);
    l += r * r;
  }
  return l;
}

// Coordinate descent over the class's memory and attention efficiencies,
// its compute efficiency at M = 1, 8, 64 and 512, its layer floor and its
// step cost,
// multiplicative steps shrinking from 2x to 1.01x.
// Coordinate descent over the class's memory and attention efficiencies,
// its compute efficiency at M = 1, 8, 64 and 512, its layer floor and its
// step cost, multiplicative steps shrinking from 2x to 1.01x. Returns the
// loss it ends at.
static double descend(const rg_plan_request_t *req, const rg_placement_t *p, rg_device_class_t *c,
                      const calib_t *cal) {
  double *par[8] = {&c->eff_memory,
                    &c->eff_attention,
                    &c->eff_compute_all.pt[0].eff,
                    &c->eff_compute_all.pt[1].eff,
                    &c->eff_compute_all.pt[2].eff,
                    &c->eff_compute_all.pt[3].eff,
                    &c->layer_floor,
                    &c->step_cost};
  double best = loss(req, p, cal);
  for (double f = 2; f > 1.005; f = sqrt(f))
    for (int round = 0; round < 40; round++) {
      int moved = 0;
      for (int k = 0; k < 8; k++)
        for (int dir = 0; dir < 2; dir++) {
          double old = *par[k], v = dir ? old * f : old / f;
          if (k < 6 && v > 1) v = 1;  // efficiencies are fractions of the limits
          if (v == old) continue;
          *par[k] = v;
          double l = loss(req, p, cal);
          if (l < best) {
            best = l;
            moved = 1;
          } else {
            *par[k] = old;
          }
        }
      if (!moved) break;
    }
  return best;
}

// Two starts, the better kept: the roofline (full efficiency, small fixed
// costs), and the fixed costs (the quickest step is all fixed cost, and
// the largest prefill's FLOPs run at whatever rate is left), so that
// neither a bandwidth-bound model nor one bound by its fixed costs ends in
// the other's local minimum.
static void fit(const rg_plan_request_t *req, const rg_placement_t *p, rg_device_class_t *c,
                const calib_t *cal) {
  for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++) c->eff_compute[d].n = 0;
  c->eff_compute_all.n = 4;
  const double ms[4] = {1, 8, 64, 512};
  double quickest = INFINITY, slowest = 0;
  for (int i = 0; i < cal->n; i++) {
    quickest = fmin(quickest, cal->seconds[i]);
    slowest = fmax(slowest, cal->seconds[i]);
  }
  rg_device_class_t a = *c, b = *c;
  for (int i = 0; i < 4; i++) a.eff_compute_all.pt[i].m = ms[i], a.eff_compute_all.pt[i].eff = 1;
  a.eff_memory = a.eff_attention = 1;
  a.step_cost = quickest / 20;
  a.layer_floor = quickest / 20 / (double)req->model->n_layers;
  b = a;
  // The largest prefill (the last shape): its FLOPs over what is left of its time.
  rg_shape_t sh = {RG_PHASE_PREFILL, 1,      cal->batch[cal->n - 1].entries[0].n, 0, RG_BF16,
                   RG_BF16,          RG_BF16};
  rg_stage_cost_t sc[RG_MAX_STAGE_COSTS];
  size_t n = 0;
  double flops = 0;
  rg_status_t st = rg_stage_costs(req->model, &sh, sc, RG_MAX_STAGE_COSTS, &n);
  rg_status_free(st);
  for (size_t i = 0; !st && i < n; i++)
    if (!sc[i].is_part) flops += sc[i].flops;
  double rate = flops / fmax(slowest - quickest, 1e-9);
  double eff = fmin(1, rate / rg_class_peak(c, RG_BF16));
  for (int i = 0; i < 4; i++) b.eff_compute_all.pt[i].eff = eff > 0 ? eff : 1;
  b.step_cost = quickest;
  b.layer_floor = 0;
  rg_placement_t pa = *p, pb = *p;
  for (int g = 0; g < p->n_groups; g++) pa.groups[g].cls = &a, pb.groups[g].cls = &b;
  double la = descend(req, &pa, &a, cal), lb = descend(req, &pb, &b, cal);
  const rg_device_class_t *w = la <= lb ? &a : &b;
  c->eff_compute_all = w->eff_compute_all;
  c->eff_memory = w->eff_memory;
  c->eff_attention = w->eff_attention;
  c->step_cost = w->step_cost;
  c->layer_floor = w->layer_floor;
}

// ----- 2. Fidelity ---------------------------------------------------------------------

typedef struct {
  const rg_plan_request_t *req;
  rg_placement_t alone[N_SLOTS];  // slot i on group 1 by itself, roofline only
  double pred[N_SLOTS];
  // Each stage's share of the class's fixed costs (step cost and layer
  // floors, which the cost model does not attribute), as the calibration
  // run measured what each stage took beyond its roofline: seconds a step.
  double fixed[N_SLOTS];
  int steps;
  rg_status_t st;
} stage_pred_t;

// Per stage, what the cost model says for every batch the simulator ran.
static void on_step(void *ctx, const rg_sim_step_t *s) {
  stage_pred_t *sp = ctx;
  if (sp->st) return;
  for (int i = 0; i < N_SLOTS; i++) {
    double t;
    sp->st = rg_sim_batch_seconds(sp->req, &sp->alone[i], 1, RG_PHASE_PREFILL, s->batch, &t);
    if (sp->st) return;
    sp->pred[i] += t + sp->fixed[i];
  }
  sp->steps++;
}

static double err(double pred, double meas) {
  return meas > 0 ? pred / meas - 1 : 0;
}

static int bench_fidelity(const char *dir, const char *model_dir) {
  enum { N = 16, LEN = 96, OUT = 48, SEQS = 8, BUDGET = 256 };
  rg_engine_options_t eo = {.max_seqs = SEQS, .max_context = 1024, .kv_tokens = SEQS * 256};
  rg_engine_t *e;
  TRY(rg_engine_create(model_dir, &eo, &e));
  rg_limits_t lim;
  TRY(rg_limits_measure(rg_engine_pool(e), 0.3, &lim));
  const char *path;
  double peak = rg_limits_matrix_peak(&lim, RG_BF16, RG_CPU_ISA_AUTO, &path);
  printf("fidelity: %s on %s; this machine now: %.3g GB/s read, %.3g GFLOP/s (%s)\n",
         rg_engine_describe(e), rg_engine_device_label(e), lim.read_bandwidth / 1e9, peak / 1e9,
         path);

  // The model and the class: this machine's limits in place of the
  // datasheet figures, the local-cpu class's efficiencies, and fixed costs
  // fitted on a calibration run of single-token steps (not on the run
  // predicted below).
  rg_catalog_t *cat;
  rg_fleet_t *fleet;
  rg_arch_t *arch;
  TRY(rg_catalog_load(dir, &cat));
  TRY(rg_fleet_load("local", dir, cat, &fleet));
  char cfg[1100];
  snprintf(cfg, sizeof cfg, "%s/config.json", model_dir);
  TRY(rg_model_load(cfg, dir, &arch));
  rg_device_class_t cls = *rg_catalog_find(cat, "local-cpu"), roof;
  for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++) cls.peak[d] = cls.peak[d] > 0 ? peak : 0;
  cls.mem[0].bandwidth = lim.read_bandwidth;
  cls.step_cost = cls.layer_floor = 0;
  roof = cls;
  fleet->nodes[0].devs[0].cls = &cls;
  rg_workload_t wl;
  rg_workload_default(&wl);
  rg_plan_request_t req = {
      .model = arch, .fleet = fleet, .workload = &wl, .weight_dtype = RG_BF16, .kv_dtype = RG_BF16};
  rg_plan_option_t *opt = calloc(1, sizeof *opt);
  stage_pred_t *sp = calloc(1, sizeof *sp);
  if (!opt || !sp) return 1;
  rg_placement_t *p = &opt->pools[0];
  opt->n_pools = 1;
  p->mode = RG_MODE_COLOCATED;
  p->n_groups = 1;
  p->groups[0] = (rg_group_t){"cpu", &cls, 1, 1, 1, 1};
  p->replicas = 1;
  p->batch = SEQS;
  p->micro_batches = 1;
  p->prefill_chunk = BUDGET - SEQS;  // sched's budget = chunk + sequences = serve's
  p->weight_dtype = RG_BF16;
  p->kv_dtype = RG_BF16;
  sp->req = &req;
  for (int i = 0; i < N_SLOTS; i++) {
    rg_placement_t *a = &sp->alone[i];
    *a = *p;
    a->n_groups = 2;
    a->groups[1] = a->groups[0];
    snprintf(a->groups[1].name, sizeof a->groups[1].name, "alone");
    a->groups[0].cls = a->groups[1].cls = &roof;
    for (int s = 0; s < RG_SLOT_COUNT; s++) a->slot_group[s] = 0;
    a->slot_group[slots[i]] = 1;
  }

  // Calibration, on steps of their own (not the run predicted below):
  // decodes of 1 to 8 sequences and prefills of 16 to 256 tokens, timed in
  // the engine. The class's bandwidth efficiency, its compute efficiency
  // at four GEMM sizes and its fixed costs are fitted to them (least
  // squares on log time ratios, coordinate descent), as a profiler would.
  calib_t cal = {0};
  TRY(calibrate(e, &cal));
  fit(&req, p, &cls, &cal);
  roof = cls;
  roof.step_cost = roof.layer_floor = 0;
  double L = (double)arch->n_layers, beyond[N_SLOTS], sum_beyond = 0;
  for (int j = 0; j < N_SLOTS; j++) {
    beyond[j] = 0;
    for (int i = 0; i < cal.n; i++) {
      double t;
      TRY(rg_sim_batch_seconds(&req, &sp->alone[j], 1, RG_PHASE_PREFILL, &cal.batch[i], &t));
      beyond[j] += cal.stage[i][j] - t;
    }
    if (beyond[j] < 0) beyond[j] = 0;
    sum_beyond += beyond[j];
  }
  for (int j = 0; j < N_SLOTS; j++)
    sp->fixed[j] =
        sum_beyond > 0 ? beyond[j] / sum_beyond * (cls.step_cost + cls.layer_floor * L) : 0;
  printf(
      "  calibration (%d shapes): fitted memory efficiency %.3f, compute efficiency %.3f / %.3f / "
      "%.3f / %.3f at M = 1 / 8 / 64 / 512, layer floor %.1f us, step cost %.1f us\n",
      cal.n, cls.eff_memory, cls.eff_compute_all.pt[0].eff, cls.eff_compute_all.pt[1].eff,
      cls.eff_compute_all.pt[2].eff, cls.eff_compute_all.pt[3].eff, cls.layer_floor * 1e6,
      cls.step_cost * 1e6);
  for (int i = 0; i < cal.n; i++) {
    double t;
    TRY(rg_sim_batch_seconds(&req, p, 0, RG_PHASE_PREFILL, &cal.batch[i], &t));
    printf("    %-22s measured %9.3f ms, fitted class %9.3f ms (%+.1f%%)\n", cal.name[i],
           cal.seconds[i] * 1e3, t * 1e3, 100 * err(t, cal.seconds[i]));
  }
  TRY(rg_placement_predict(&req, p, &opt->pred[0]));

  // The measured run: N requests at once through continuous batching.
  int32_t *ids = malloc(N * LEN * sizeof *ids);
  rg_serve_request_t sr[N];
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < LEN; k++) ids[i * LEN + k] = (int32_t)((i * 31 + k * 7) % 500);
    sr[i] = (rg_serve_request_t){(uint64_t)i, ids + i * LEN, LEN, OUT, {0, 0, 1, 0}, 0};
  }
  rg_serve_result_t res[N];
  rg_serve_stats_t ss;
  rg_serve_options_t so = {.max_batch_tokens = BUDGET, .max_seqs = SEQS};
  reset(e);
  TRY(rg_serve(e, sr, N, &so, res, &ss));
  rg_serve_results_free(res, N);
  double meas[N_SLOTS], fwd;
  measured(e, meas, &fwd);

  // The simulated run: the same requests, placement and scheduler settings.
  rg_sim_trace_t tr = {0};
  tr.reqs = calloc(N, sizeof *tr.reqs);
  tr.n = N;
  tr.hash_block = RG_SIM_MOONCAKE_BLOCK;
  for (int i = 0; i < N; i++) tr.reqs[i] = (rg_sim_request_t){0, LEN, OUT, 0, 0, 0};
  rg_sim_options_t o = {.trace = &tr,
                        .seed = 1,
                        .prefix_cache = 0,
                        .retention_s = -1,
                        .max_seqs = SEQS,
                        .exact_costs = 1,
                        .kv_tokens = rg_engine_kv_blocks(e) * rg_engine_block_size(e),
                        .on_step = on_step,
                        .step_ctx = sp};
  rg_sim_report_t *r;
  TRY(rg_simulate(&req, opt, &o, &r));
  if (sp->st) return fail(sp->st);

  printf(
      "  %d requests of %d prompt + %d output tokens, up to %d at once: runtime %lld iterations, "
      "simulator %lld\n",
      N, LEN, OUT, SEQS, (long long)ss.iterations, (long long)r->iterations);
  printf("  %-10s %12s %12s %8s\n", "stage", "measured", "predicted", "error");
  double errs[N_SLOTS];
  const char *names[N_SLOTS] = {"embed", "attention", "ffn", "lm_head"};
  for (int i = 0; i < N_SLOTS; i++) {
    errs[i] = fabs(err(sp->pred[i], meas[i]));
    printf("  %-10s %9.3f ms %9.3f ms %+7.1f%%\n", names[i], meas[i] * 1e3, sp->pred[i] * 1e3,
           100 * err(sp->pred[i], meas[i]));
  }
  qsort(errs, N_SLOTS, sizeof errs[0], cmp_d);
  double median = (errs[1] + errs[2]) / 2;
  printf("  median per-stage error %.1f%% (goal <= 5%%: %.2fx of it)\n", 100 * median,
         median > 0 ? 0.05 / median : INFINITY);
  struct {
    const char *name;
    double meas, sim;
  } e2e[] = {{"tokens/s", ss.tokens_per_s, r->tokens_per_s},
             {"TTFT p50", ss.ttft.p50, r->ttft.p50},
             {"TBT p50", ss.tbt.p50, r->tbt.p50},
             {"e2e p50", ss.e2e.p50, r->e2e.p50}};
  for (size_t i = 0; i < sizeof e2e / sizeof e2e[0]; i++)
    printf("  %-9s runtime %10.4g  simulator %10.4g  error %+6.1f%%%s\n", e2e[i].name, e2e[i].meas,
           e2e[i].sim, 100 * err(e2e[i].sim, e2e[i].meas), i < 3 ? " (goal within 10%)" : "");
  rg_sim_report_destroy(r);
  rg_sim_trace_free(&tr);
  free(ids);
  free(sp);
  free(opt);
  rg_arch_destroy(arch);
  rg_fleet_destroy(fleet);
  rg_catalog_destroy(cat);
  rg_engine_destroy(e);
  return 0;
}

int main(int argc, char **argv) {
  const char *dir =
      getenv("RIDGE_CONFIG_DIR") ? getenv("RIDGE_CONFIG_DIR") : RIDGE_SOURCE_DIR "/configs";
  int scale = 1, fidelity = 1, one_b = 0;
  double hours = 1;
  const char *model = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--scale-only"))
      fidelity = 0;
    else if (!strcmp(argv[i], "--fidelity-only"))
      scale = 0;
    else if (!strcmp(argv[i], "--1b"))
      one_b = 1;
    else if (!strcmp(argv[i], "--hours") && i + 1 < argc)
      hours = atof(argv[++i]);
    else if (!strcmp(argv[i], "--model") && i + 1 < argc)
      model = argv[++i];
    else {
      fprintf(stderr,
              "usage: bench_simulate [--scale-only | --fidelity-only] [--hours H] [--model DIR | "
              "--1b]\n");
      return 2;
    }
  }
  if (scale && bench_scale(dir, hours > 0 ? hours : 1)) return 1;
  if (!fidelity) return 0;
  char mdir[2048];
  if (model) {
    snprintf(mdir, sizeof mdir, "%s", model);
  } else {
    rg_testmodel_opts_t o = {.arch = RG_TESTMODEL_LLAMA,
                             .size = one_b ? RG_TESTMODEL_1B : RG_TESTMODEL_TINY,
                             .dtype = RG_BF16,
                             .gguf_type = RG_DTYPE_COUNT};
    if (one_b)
      fprintf(stderr,
              "bench_simulate: the 1b test model is written to the user cache the first time (~4.4 "
              "GB)\n");
    rg_status_t s = rg_testmodel_cached(&o, mdir, sizeof mdir, NULL);
    if (s) return fail(s);
  }
  return bench_fidelity(dir, mdir);
}
