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
//      class calibrated by the quick profile `ridge run` uses (the same
//      cached file when a young one exists: runtime/profile.h, per-stage
//      figures from the tiny test model's stages). Prints the error per
//      stage and end to end (throughput, TTFT p50, TBT p50). Goal: median
//      per-stage error <= 5%, throughput and TTFT/TBT p50 within 10%.
//
// usage: bench_simulate [--scale-only | --fidelity-only] [--hours H] [--model DIR | --1b]
//                       [--recalibrate] [--stages-of-run] [--rounds N]
//   --model DIR  a model directory for the fidelity run (default: the tiny
//                test model, written to a temporary directory)
//   --1b         the ~1B-parameter test model from the user cache (written
//                the first time, ~4.4 GB, ~40 s), whose decode is bound by
//                memory bandwidth rather than by fixed costs
//   --recalibrate  profile cpu:0 again even if the cached calibration is young
//   --stages-of-run  fit the stage figures on this model's own stages rather
//                than the tiny test model's (not cached: they are this
//                model's figures, not the device's)
//   --rounds N   the fidelity run N times, every round after the first with
//                a fresh quick profile, then each error's median and range
//                over the rounds: on a shared VM one round's per-stage
//                errors moved by +-40% a minute apart, so one round cannot
//                tell a 5% bias from noise
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "graphs/weights.h"
#include "planner/planner.h"
#include "planner/simulate.h"
#include "runtime/engine.h"
#include "runtime/limits.h"
#include "runtime/profile.h"
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

// ----- Stages --------------------------------------------------------------------------

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

// ----- The calibrated class -------------------------------------------------------------
//
// The same figures `ridge run` predicts its stages with: the CPU's class
// calibrated by a quick profile of cpu:0 with the tiny test model's stages
// (runtime/profile.h), read from the file `ridge run` caches for a day when
// there is a young one, else profiled now and cached there the same way.

// With stage_model (a model of its own, whose stages the profile times
// instead of the tiny test model's), nothing is cached: those figures are
// that model's, not the device's.
static rg_status_t calibrated_cpu(const rg_catalog_t *cat, int refresh, const char *stage_model,
                                  rg_device_class_t *out, char *how, size_t how_len,
                                  int *out_fresh) {
  *out_fresh = 0;
  const rg_device_class_t *c = rg_catalog_find(cat, "local-cpu");
  if (!c) return rg_status_make(RG_NOT_FOUND, "no local-cpu class in the catalog");
  *out = *(c->calibrated && c->datasheet ? c->datasheet : c);
  out->datasheet = NULL;
  const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  char dir[1024], path[1100];
  if (x && *x)
    snprintf(dir, sizeof dir, "%s/ridge/calibrated/cpu-0", x);
  else
    snprintf(dir, sizeof dir, "%s/.cache/ridge/calibrated/cpu-0", home && *home ? home : "/tmp");
  snprintf(path, sizeof path, "%s/local-cpu.yaml", dir);
  // Reused as `ridge run` reuses it: younger than a day and than this
  // build (a rebuild changes the kernels it measured).
  struct stat sb, exe;
  if (!stage_model && !refresh && stat(path, &sb) == 0 &&
      difftime(time(NULL), sb.st_mtime) < 86400 &&
      (stat("/proc/self/exe", &exe) != 0 || sb.st_mtime >= exe.st_mtime)) {
    rg_device_class_t tmp = *out;
    rg_status_t st = rg_device_class_calibrate(&tmp, path);
    if (!st) {
      *out = tmp;
      snprintf(how, how_len, "%s (cached %.0f s ago, as `ridge run` uses it)", path,
               difftime(time(NULL), sb.st_mtime));
      return NULL;
    }
    rg_status_free(st);
  }
  char model[2048];
  rg_testmodel_opts_t to = {.arch = RG_TESTMODEL_LLAMA,
                            .size = RG_TESTMODEL_TINY,
                            .dtype = RG_BF16,
                            .gguf_type = RG_DTYPE_COUNT};
  RG_RETURN_IF_ERROR(rg_testmodel_cached(&to, model, sizeof model, NULL));
  rg_device_t *dev;
  RG_RETURN_IF_ERROR(rg_device_open("cpu", 0, NULL, &dev));
  rg_profile_class_t pc;
  rg_profile_class_from(out, &pc);
  rg_profile_options_t po = {
      .quick = 1, .cls = &pc, .stage_model = stage_model ? stage_model : model};
  rg_profile_result_t *r = calloc(1, sizeof *r);
  rg_status_t st = r ? rg_profile_run(dev, &po, r) : rg_status_make(RG_OUT_OF_MEMORY, "oom");
  rg_device_close(dev);
  // Cached where `ridge run` looks, so both use one set of figures.
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  if (!st && !stage_model && system(cmd) == 0) {
    FILE *f = fopen(path, "w");
    if (f) {
      rg_status_free(rg_profile_write_class(r, f));
      fclose(f);
    }
  }
  if (!st) {
    rg_profile_apply(r, out);
    *out_fresh = 1;
    if (stage_model)
      snprintf(how, how_len, "profiled now (quick, %.1f s) with this model's own stages",
               r->seconds);
    else
      snprintf(how, how_len, "profiled now (quick, %.1f s), cached at %s", r->seconds, path);
  }
  free(r);
  return st;
}

// ----- 2. Fidelity ---------------------------------------------------------------------

typedef struct {
  const rg_plan_request_t *req;
  const rg_group_t *g;
  double pred[N_SLOTS];
  int steps;
  rg_status_t st;
} stage_pred_t;

// Per stage, what the cost model says for every batch the simulator ran:
// the same call `ridge run` makes for each step it ran.
static void on_step(void *ctx, const rg_sim_step_t *s) {
  stage_pred_t *sp = ctx;
  if (sp->st) return;
  rg_step_mix_t m = {0};
  for (size_t i = 0; i < s->batch->n_entries; i++) {
    const rg_sched_entry_t *e = &s->batch->entries[i];
    if (e->is_prefill) {
      m.prefill_context = (m.prefill_context * m.prefill_tokens + (double)e->n * (double)e->pos) /
                          (m.prefill_tokens + e->n);
      m.prefills++;
      m.prefill_tokens += e->n;
    } else {
      m.decode_context = (m.decode_context * m.decodes + (double)e->pos) / (m.decodes + 1);
      m.decodes++;
    }
  }
  for (int i = 0; i < N_SLOTS; i++) {
    double t;
    sp->st = rg_slot_mixed_time(sp->req, sp->g, (rg_slot_t)slots[i], &m, 0, &t);
    if (sp->st) return;
    sp->pred[i] += t;
  }
  sp->steps++;
}

static double err(double pred, double meas) {
  return meas > 0 ? pred / meas - 1 : 0;
}

// One round's signed errors (predicted / measured - 1): per stage, then
// tokens/s, TTFT p50 and TBT p50.
typedef struct {
  double stage[N_SLOTS], e2e[3], median;
} round_t;

static rg_status_t simulate_and_compare(rg_device_class_t *clsp, char label, int profiled_now,
                                        rg_fleet_t *fleet, const rg_arch_t *arch, rg_engine_t *e,
                                        const rg_serve_stats_t *ssp, const double meas[N_SLOTS],
                                        round_t *out);

static int bench_fidelity(const char *dir, const char *model_dir, int refresh, int own_stages,
                          round_t *out) {
  enum { N = 16, LEN = 96, OUT = 48, SEQS = 8, BUDGET = 256 };
  rg_catalog_t *cat;
  rg_fleet_t *fleet;
  rg_arch_t *arch;
  TRY(rg_catalog_load(dir, &cat));
  TRY(rg_fleet_load("local", dir, cat, &fleet));
  char cfg[2100];
  snprintf(cfg, sizeof cfg, "%s/config.json", model_dir);
  TRY(rg_model_load(cfg, dir, &arch));
  // Calibrated before the engine exists, as `ridge run` does, with the
  // figures `ridge run` uses (the tiny test model's stages); --stages-of-run
  // profiles this model's own stages instead (not cached).
  rg_device_class_t classes[1];
  char how[1][1400];
  int n_cls = 1, fresh[1];
  TRY(calibrated_cpu(cat, refresh || own_stages, own_stages ? model_dir : NULL, &classes[0], how[0],
                     sizeof how[0], &fresh[0]));
  rg_engine_options_t eo = {.max_seqs = SEQS, .max_context = 1024, .kv_tokens = SEQS * 256};
  rg_engine_t *e;
  TRY(rg_engine_create(model_dir, &eo, &e));
  printf("fidelity: %s on %s\n", rg_engine_describe(e), rg_engine_device_label(e));
  const char *names[N_SLOTS] = {"embed", "attention", "ffn", "lm_head"};
  for (int k = 0; k < n_cls; k++) {
    const rg_device_class_t *cls = &classes[k];
    printf("  class %c: local-cpu calibrated by ridge profile: %s\n", 'A' + k, how[k]);
    printf(
        "    %.3g GB/s read, memory efficiency %.3g (bf16 at M = 1 / 4 / 8 / 16: %.3g / %.3g / "
        "%.3g / %.3g), attention %.3g, bf16 compute %.3g / %.3g at M = 1 / 256; per stage "
        "(call, token, efficiency, first):\n",
        cls->mem[0].bandwidth / 1e9, cls->eff_memory, rg_class_eff_memory(cls, RG_BF16, 1),
        rg_class_eff_memory(cls, RG_BF16, 4), rg_class_eff_memory(cls, RG_BF16, 8),
        rg_class_eff_memory(cls, RG_BF16, 16), cls->eff_attention,
        rg_class_eff_compute(cls, RG_BF16, 1), rg_class_eff_compute(cls, RG_BF16, 256));
    for (int i = 0; i < N_SLOTS; i++) {
      const rg_stage_figures_t *f = &cls->stage[slots[i]];
      printf("      %-10s %8.2f us %8.3f us %6.3g %9.1f us\n", names[i], f->call * 1e6,
             f->token * 1e6, f->eff > 0 ? f->eff : 1, f->first * 1e6);
    }
  }
  // The measured run: N requests at once through continuous batching, on a
  // fresh engine (its stages' first calls are in it, as in `ridge run`).
  int32_t *ids = malloc(N * LEN * sizeof *ids);
  rg_serve_request_t sr[N];
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < LEN; k++) ids[i * LEN + k] = (int32_t)((i * 31 + k * 7) % 500);
    sr[i] = (rg_serve_request_t){(uint64_t)i, ids + i * LEN, LEN, OUT, {0, 0, 1, 0}, 0};
  }
  rg_serve_result_t res[N];
  rg_serve_stats_t ss;
  rg_serve_options_t so = {.max_batch_tokens = BUDGET, .max_seqs = SEQS};
  // The read bandwidth right before the run, and again right after it
  // (below): one reading, after, had read 27 GB/s beside a run whose
  // kernels streamed as if it were 35, and the comparison then blamed the
  // cost model for the machine's move.
  rg_limits_t lim0 = {0};
  rg_status_t ls0 = rg_limits_measure(rg_engine_pool(e), 0.3, &lim0);
  rg_status_free(ls0);
  // And, as `ridge run` prices a model past the caches, the engine's own
  // weights read as a decode streams them, before and after.
  double stream_bytes = 0, stream0 = rg_engine_stream_bandwidth(e, 3, &stream_bytes);
  reset(e);
  TRY(rg_serve(e, sr, N, &so, res, &ss));
  rg_serve_results_free(res, N);
  double meas[N_SLOTS], fwd;
  measured(e, meas, &fwd);
  printf(
      "  %d requests of %d prompt + %d output tokens, up to %d at once: runtime %lld iterations\n",
      N, LEN, OUT, SEQS, (long long)ss.iterations);
  // What a step costs beyond its stages, in the engine (the class's
  // overhead.step prices it) and in the serving loop around it (scheduler,
  // sampling: not priced).
  if (ss.iterations > 0) {
    const double it = (double)ss.iterations, st = meas[0] + meas[1] + meas[2] + meas[3];
    printf(
        "  per step beyond the stages: engine %.1f us (class A prices %.1f us), serving loop "
        "%.1f us\n",
        (fwd - st) / it * 1e6, classes[0].step_cost * 1e6, (ss.wall_s - fwd) / it * 1e6);
  }
  // As `ridge run` does (rg_limits_run_bandwidth): the read bandwidth
  // measured beside the run, in place of the one from when the class was
  // profiled (this machine's moves between runs, also within the minute
  // between a profile and the run after it); the class's efficiencies kept.
  rg_limits_t lim = {0};
  rg_status_t ls = rg_limits_measure(rg_engine_pool(e), 0.3, &lim);
  if (ls)
    rg_status_free(ls);
  else if (lim.read_bandwidth > 0) {
    // The higher of the two stands for the run, by the profile's own rule
    // (it keeps the best of its readings, and its efficiencies are shares of
    // that best): a mean, or one reading, sits below a best and made every
    // stage's prediction slow by as much (+6 to +13 % on every stage in one
    // run, read 38.2 / 44.5 around it). A large move between them still says
    // the comparison is less sure than its figures look.
    const double b0 = lim0.read_bandwidth, b1 = lim.read_bandwidth, bw = b0 > b1 ? b0 : b1,
                 moved = b0 > 0 ? fabs(b1 - b0) / bw : 0;
    const double stream1 = stream0 > 0 ? rg_engine_stream_bandwidth(e, 3, NULL) : 0;
    for (int k = 0; k < n_cls; k++) {
      const double was = classes[k].mem[0].bandwidth;
      if (stream0 > 0 && stream1 > 0) {
        const double use = 0.5 * (stream0 + stream1);
        printf(
            "  class %c: read bandwidth %.3g GB/s, the engine's own %.3g GB of weights read as a "
            "decode streams them, %.3g before the run and %.3g after (the best pass over 256 MiB "
            "%.3g; %.3g when profiled)\n",
            'A' + k, use / 1e9, stream_bytes / 1e9, stream0 / 1e9, stream1 / 1e9, bw / 1e9,
            was / 1e9);
        classes[k].mem[0].bandwidth = use;
        continue;
      }
      const double use = rg_limits_run_bandwidth(bw, was);
      printf(
          "  class %c: read bandwidth %.3g GB/s, the best of %.3g before the run and %.3g after "
          "(%.3g when profiled)%s\n",
          'A' + k, use / 1e9, b0 / 1e9, b1 / 1e9, was / 1e9,
          moved > 0.15 ? ": the machine's bandwidth moved across the run, so the errors below "
                         "are less sure"
                       : "");
      classes[k].mem[0].bandwidth = use;
    }
  }
  for (int k = 0; k < n_cls; k++)
    TRY(simulate_and_compare(&classes[k], 'A' + k, fresh[k], fleet, arch, e, &ss, meas, out));
  free(ids);
  rg_arch_destroy(arch);
  rg_fleet_destroy(fleet);
  rg_catalog_destroy(cat);
  rg_engine_destroy(e);
  return 0;
}

// The simulator on class cls, the same requests, placement and scheduler
// settings as the measured run; the error per stage and end to end.
static rg_status_t simulate_and_compare(rg_device_class_t *clsp, char label, int profiled_now,
                                        rg_fleet_t *fleet, const rg_arch_t *arch, rg_engine_t *e,
                                        const rg_serve_stats_t *ssp, const double meas[N_SLOTS],
                                        round_t *out) {
  enum { N = 16, LEN = 96, OUT = 48, SEQS = 8, BUDGET = 256 };
  const char *names[N_SLOTS] = {"embed", "attention", "ffn", "lm_head"};
  rg_device_class_t cls = *clsp;
  const rg_serve_stats_t ss = *ssp;
  fleet->nodes[0].devs[0].cls = &cls;
  rg_workload_t wl;
  rg_workload_default(&wl);
  rg_plan_request_t req = {
      .model = arch, .fleet = fleet, .workload = &wl, .weight_dtype = RG_BF16, .kv_dtype = RG_BF16};
  rg_plan_option_t *opt = calloc(1, sizeof *opt);
  stage_pred_t *sp = calloc(1, sizeof *sp);
  if (!opt || !sp) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
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
  sp->g = &p->groups[0];
  RG_RETURN_IF_ERROR(rg_placement_predict(&req, p, &opt->pred[0]));

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
  RG_RETURN_IF_ERROR(rg_simulate(&req, opt, &o, &r));
  if (sp->st) return sp->st;
  // Each stage's first call, once, and the process's (kernel builds) in
  // its first stage unless the profile paid them in this process just now,
  // as `ridge run` adds them.
  for (int i = 0; i < N_SLOTS; i++) sp->pred[i] += cls.stage[slots[i]].first;
  if (!profiled_now) sp->pred[0] += cls.process_first;

  printf("  class %c: simulator %lld iterations\n", label, (long long)r->iterations);
  printf("  %-10s %12s %12s %8s\n", "stage", "measured", "predicted", "error");
  double errs[N_SLOTS];
  for (int i = 0; i < N_SLOTS; i++) {
    out->stage[i] = err(sp->pred[i], meas[i]);
    errs[i] = fabs(out->stage[i]);
    printf("  %-10s %9.3f ms %9.3f ms %+7.1f%%\n", names[i], meas[i] * 1e3, sp->pred[i] * 1e3,
           100 * err(sp->pred[i], meas[i]));
  }
  qsort(errs, N_SLOTS, sizeof errs[0], cmp_d);
  double median = out->median = (errs[1] + errs[2]) / 2;
  printf("  median per-stage error %.1f%% (goal <= 5%%: %.2fx of it)\n", 100 * median,
         median > 0 ? 0.05 / median : INFINITY);
  struct {
    const char *name;
    double meas, sim;
  } e2e[] = {{"tokens/s", ss.tokens_per_s, r->tokens_per_s},
             {"TTFT p50", ss.ttft.p50, r->ttft.p50},
             {"TBT p50", ss.tbt.p50, r->tbt.p50},
             {"e2e p50", ss.e2e.p50, r->e2e.p50}};
  for (int i = 0; i < 3; i++) out->e2e[i] = err(e2e[i].sim, e2e[i].meas);
  for (size_t i = 0; i < sizeof e2e / sizeof e2e[0]; i++)
    printf("  %-9s runtime %10.4g  simulator %10.4g  error %+6.1f%%%s\n", e2e[i].name, e2e[i].meas,
           e2e[i].sim, 100 * err(e2e[i].sim, e2e[i].meas), i < 3 ? " (goal within 10%)" : "");
  rg_sim_report_destroy(r);
  rg_sim_trace_free(&tr);
  free(sp);
  free(opt);
  return NULL;
}

static double median_of(double *v, int n) {
  qsort(v, (size_t)n, sizeof v[0], cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Over the rounds: each stage's and each end-to-end figure's median signed
// error with its range (a bias shows as a median far from 0 with a range on
// one side of it; noise as a range across 0), and the median of the rounds'
// median per-stage errors.
static void summarize(const round_t *rs, int n) {
  const char *names[N_SLOTS] = {"embed", "attention", "ffn", "lm_head"};
  const char *e2e[3] = {"tokens/s", "TTFT p50", "TBT p50"};
  double v[50];
  printf("\nover %d rounds, each with its own quick profile: median signed error [range]\n", n);
  for (int i = 0; i < N_SLOTS + 3; i++) {
    for (int r = 0; r < n; r++) v[r] = i < N_SLOTS ? rs[r].stage[i] : rs[r].e2e[i - N_SLOTS];
    double med = median_of(v, n);
    printf("  %-10s %+7.1f%%  [%+.1f%%, %+.1f%%]\n", i < N_SLOTS ? names[i] : e2e[i - N_SLOTS],
           100 * med, 100 * v[0], 100 * v[n - 1]);
  }
  for (int r = 0; r < n; r++) v[r] = rs[r].median;
  double med = median_of(v, n);
  printf("  median per-stage error, median over the rounds %.1f%% [%.1f%%, %.1f%%] (goal <= 5%%)\n",
         100 * med, 100 * v[0], 100 * v[n - 1]);
}

int main(int argc, char **argv) {
  const char *dir =
      getenv("RIDGE_CONFIG_DIR") ? getenv("RIDGE_CONFIG_DIR") : RIDGE_SOURCE_DIR "/configs";
  int scale = 1, fidelity = 1, one_b = 0, refresh = 0, own_stages = 0, rounds = 1;
  double hours = 1;
  const char *model = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--scale-only"))
      fidelity = 0;
    else if (!strcmp(argv[i], "--fidelity-only"))
      scale = 0;
    else if (!strcmp(argv[i], "--1b"))
      one_b = 1;
    else if (!strcmp(argv[i], "--recalibrate"))
      refresh = 1;
    else if (!strcmp(argv[i], "--stages-of-run"))
      own_stages = 1;
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--hours") && i + 1 < argc)
      hours = atof(argv[++i]);
    else if (!strcmp(argv[i], "--model") && i + 1 < argc)
      model = argv[++i];
    else {
      fprintf(stderr,
              "usage: bench_simulate [--scale-only | --fidelity-only] [--hours H] [--model DIR | "
              "--1b] [--recalibrate] [--stages-of-run] [--rounds N]\n");
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
  if (rounds < 1 || rounds > 50) {
    fprintf(stderr, "bench_simulate: --rounds takes 1 to 50\n");
    return 2;
  }
  round_t rs[50];
  for (int r = 0; r < rounds; r++) {
    if (rounds > 1) printf("\nround %d of %d\n", r + 1, rounds);
    // Every round after the first profiles again: what is summed up below
    // is the spread of profile and run together.
    if (bench_fidelity(dir, mdir, refresh || r > 0, own_stages, &rs[r])) return 1;
  }
  if (rounds > 1) summarize(rs, rounds);
  return 0;
}
