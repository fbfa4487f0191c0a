// Tests for the cost model's parts (planner/cost.c, latency.c), the
// calibrated classes (config_load.c) and the pictures (plan_svg.c): each
// checks one property the model must have, against figures computed here
// from the model's own inputs.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "graphs/graphs.h"
#include "planner/planner.h"
#include "tests/test.h"

typedef struct {
  rg_catalog_t *cat;
  rg_fleet_t *fleet;
  rg_arch_t *model, *draft;
  rg_workload_t *wl;
  rg_workload_t wdef;
  rg_plan_request_t req;
  rg_plan_t plan;
} fx_t;

static fx_t *fx_open(rg_test_ctx_t *t, const char *dir, const char *model, const char *fleet,
                     const char *wl) {
  fx_t *f = calloc(1, sizeof *f);
  if (!f) abort();
  rg_status_t st = rg_catalog_load(dir, &f->cat);
  if (!st) st = rg_fleet_load(fleet, dir, f->cat, &f->fleet);
  if (!st) st = rg_model_load(model, dir, &f->model);
  if (!st && wl) st = rg_workload_load(wl, dir, &f->wl);
  if (!st && f->wl && f->wl->speculative.present)
    st = rg_model_load(f->wl->speculative.draft, dir, &f->draft);
  if (st) {
    rg_test_fail(t, __FILE__, __LINE__, "setup: %s", rg_status_message(st));
    rg_status_free(st);
  }
  rg_workload_default(&f->wdef);
  f->req.model = f->model;
  f->req.draft = f->draft;
  f->req.fleet = f->fleet;
  f->req.workload = f->wl ? f->wl : &f->wdef;
  f->req.objective = RG_OBJ_THROUGHPUT;
  f->req.weight_dtype = f->model ? f->model->weight_dtype : RG_BF16;
  f->req.kv_dtype = RG_BF16;
  return f;
}

static void fx_close(fx_t *f) {
  rg_workload_destroy(f->wl);
  rg_arch_destroy(f->model);
  rg_arch_destroy(f->draft);
  rg_fleet_destroy(f->fleet);
  rg_catalog_destroy(f->cat);
  free(f);
}

// One colocated group of n devices of class cls, shaped for the model.
static rg_placement_t colocated(fx_t *f, const char *cls, int n, int batch) {
  rg_placement_t p;
  memset(&p, 0, sizeof p);
  p.mode = RG_MODE_COLOCATED;
  p.n_groups = 1;
  snprintf(p.groups[0].name, sizeof p.groups[0].name, "main");
  p.groups[0].cls = rg_catalog_find(f->cat, cls);
  p.groups[0].devices = n;
  if (p.groups[0].cls) rg_group_shape(f->fleet, f->model, &p.groups[0]);
  p.replicas = 1;
  p.batch = batch;
  p.micro_batches = 1;
  p.weight_dtype = f->req.weight_dtype;
  p.kv_dtype = f->req.kv_dtype;
  return p;
}

static const char *cfg(void) {
  return rg_test_config_dir();
}

// ----- Calibrated classes ----------------------------------------------------------

static void copy_file(rg_test_ctx_t *t, const char *from, const char *to) {
  FILE *in = fopen(from, "rb");
  if (!in) {
    rg_test_fail(t, __FILE__, __LINE__, "cannot read %s", from);
    return;
  }
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, in);
  buf[n] = 0;
  fclose(in);
  rg_test_write(t, to, buf);
}

// A config folder with the shipped h100-sxm class, a fleet of it, the 8B
// model, and a calibrated file that `ridge profile` would have written.
static const char *calibrated_config(rg_test_ctx_t *t, const char *calibration) {
  char p[600];
  const char *dir = rg_test_tmpdir(t);
  static const char *const subs[] = {"devices", "devices/calibrated", "fleets", "models"};
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, subs[i]);
    mkdir(p, 0755);
  }
  snprintf(p, sizeof p, "%s/devices/h100-sxm.yaml", cfg());
  copy_file(t, p, "devices/h100-sxm.yaml");
  snprintf(p, sizeof p, "%s/models/llama-3.1-8b.yaml", cfg());
  copy_file(t, p, "models/llama-3.1-8b.yaml");
  rg_test_write(t, "fleets/one.yaml",
                "name: one\nprovider: shm\nnetwork: { bandwidth: 400 Gb/s, latency: 5 us }\n"
                "nodes:\n  - { name: n, count: 1, devices: [ { class: h100-sxm, count: 8 } ] }\n");
  if (calibration) rg_test_write(t, "devices/calibrated/h100-sxm.yaml", calibration);
  return dir;
}

// The calibrated h100-sxm that a calibration file of `text` gives, in a
// fixture of llama-3.1-8b on the fleet "one" (*f, for fx_close); NULL, and
// the test failed, where it does not load.
static const rg_device_class_t *calibrated_h100(rg_test_ctx_t *t, const char *text, fx_t **f) {
  *f = fx_open(t, calibrated_config(t, text), "llama-3.1-8b", "one", NULL);
  const rg_device_class_t *c = (*f)->cat ? rg_catalog_find((*f)->cat, "h100-sxm") : NULL;
  if (c && c->calibrated) return c;
  rg_test_fail(t, __FILE__, __LINE__, "the calibrated h100-sxm did not load");
  return NULL;
}

static const char *const measured_h100 =
    "# written by ridge profile\n"
    "name: h100-sxm\n"
    "measured: { by: ridge profile, date: 2025-06-01, device: 'cuda:0 NVIDIA H100 80GB HBM3' }\n"
    "memory: [ { name: hbm3, bandwidth: 2.01 TB/s } ]\n"
    "efficiency: { memory: 0.9, attention: 0.8 }\n"
    "overhead: { step: 1 ms, layer: 10 us }\n";

RG_TEST(planner_calibrated_class_is_preferred) {
  const char *dir = calibrated_config(t, measured_h100);
  fx_t *f = fx_open(t, dir, "llama-3.1-8b", "one", NULL);
  const rg_device_class_t *c = rg_catalog_find(f->cat, "h100-sxm");
  RG_REQUIRE(c && c->calibrated && c->datasheet);
  RG_CHECK_NEAR(c->mem[0].bandwidth, 2.01e12, 1e-12);
  RG_CHECK_NEAR(c->datasheet->mem[0].bandwidth, 3.35e12, 1e-12);
  RG_CHECK_NEAR(c->mem[0].capacity, c->datasheet->mem[0].capacity, 1e-12);  // not measured: kept
  RG_CHECK_NEAR(c->eff_memory, 0.9, 1e-12);
  RG_CHECK_NEAR(c->step_cost, 1e-3, 1e-12);
  RG_CHECK(strstr(c->calibration_source, "measured by ridge profile on 2025-06-01") != NULL);
  RG_CHECK(strstr(c->eff_source, "measured by ridge profile") != NULL);
  // The plan runs on the measured figures: a batch-1 step streams the
  // weights at the measured bandwidth and efficiency.
  rg_placement_t p = colocated(f, "h100-sxm", 1, 1);
  rg_step_cost_t sc;
  RG_CHECK_OK(rg_group_step_time(&f->req, &p, 0, RG_PHASE_DECODE, 1, 1, 1024, &sc));
  // (all weights but the embedding table, of which a token reads one row)
  double weights =
      rg_arch_weight_bytes(f->model, RG_BF16) - 2.0 * f->model->vocab * f->model->d_model;
  double stream = weights / (2.01e12 * 0.9);
  if (!(sc.memory > stream * 0.95 && sc.memory < stream * 1.05))
    rg_test_fail(t, __FILE__, __LINE__, "memory time %g s, expected about %g s", sc.memory, stream);
  RG_CHECK(sc.overhead >= 1e-3 + 32 * 10e-6);
  fx_close(f);
  // `ridge catalog` shows datasheet and calibrated figures side by side.
  char args[800], *out;
  snprintf(args, sizeof args, "--config-dir '%s' catalog h100-sxm", dir);
  RG_CHECK(rg_test_run_ridge(t, args, &out) == 0);
  RG_CHECK_CONTAINS(
      out, "Calibrated: measured by ridge profile on 2025-06-01, cuda:0 NVIDIA H100 80GB HBM3");
  RG_CHECK_CONTAINS(out, "calibrated / datasheet");
  RG_CHECK_CONTAINS(out, "3.35 TB/s");
  RG_CHECK_CONTAINS(out, "2.01 TB/s");
  RG_CHECK_CONTAINS(out, "0.60");
  // The measured efficiencies, each with what it applies to.
  RG_CHECK_CONTAINS(out, "memory     90% of peak bandwidth");
  RG_CHECK_CONTAINS(out, "attention  80% of peak bandwidth (decode attention over paged KV)");
  free(out);
  snprintf(args, sizeof args, "--config-dir '%s' catalog", dir);
  RG_CHECK(rg_test_run_ridge(t, args, &out) == 0);
  RG_CHECK_CONTAINS(out, "h100-sxm +");
  RG_CHECK_CONTAINS(out, "(sheet 3.35 TB/s)");
  free(out);
  snprintf(args, sizeof args, "--config-dir '%s' --json catalog h100-sxm", dir);
  RG_CHECK(rg_test_run_ridge(t, args, &out) == 0);
  cJSON *j = cJSON_Parse(out);
  RG_CHECK(j && cJSON_IsTrue(cJSON_GetObjectItem(j, "calibrated")));
  RG_CHECK(j && cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "datasheet"),
                                                         "bandwidth")) == 3.35e12);
  cJSON_Delete(j);
  free(out);
}

RG_TEST(planner_calibrated_bad_files) {
  rg_catalog_t *cat = NULL;
  const char *dir =
      calibrated_config(t, "name: h100-sxm\nmemory: [ { name: hbm3, bandwidth: 2 TB/s } ]\n");
  RG_CHECK_ERR(rg_catalog_load(dir, &cat),
               "calibrated/h100-sxm.yaml:1:1: calibrated class: missing required key 'measured' ({ "
               "by, date, "
               "device }: what measured these figures, and when)");
  rg_test_write(t, "devices/calibrated/h100-sxm.yaml",
                "name: h100-sxm\nmeasured: { by: x, date: 2025-06-01 }\nmemory: [ { name: hbm9, "
                "bandwidth: 2 TB/s } ]\n");
  RG_CHECK_ERR(rg_catalog_load(dir, &cat),
               "calibrated/h100-sxm.yaml:3:19: memory[0].name: class 'h100-sxm' has no memory tier "
               "'hbm9'; its tiers are hbm3");
  remove(rg_test_write(t, "devices/calibrated/h100-sxm.yaml", ""));
  rg_test_write(t, "devices/calibrated/h100.yaml",
                "name: h100\nmeasured: { by: x, date: 2025-06-01 }\n");
  RG_CHECK_ERR(rg_catalog_load(dir, &cat),
               "calibrated/h100.yaml: a calibrated file must be named after a class in");
  RG_CHECK_ERR(rg_catalog_load(dir, &cat), "unknown device class 'h100'; did you mean 'h100-sxm'?");
  RG_CHECK(cat == NULL);
}

// ----- Steps, parallelism and communication ---------------------------------------

RG_TEST(planner_step_time_parts_and_pipeline_stages) {
  fx_t *f = fx_open(t, cfg(), "llama-3.1-70b", "gpu-only", NULL);
  rg_placement_t p = colocated(f, "h100-sxm", 8, 64);
  rg_step_cost_t one;
  RG_REQUIRE_OK(rg_group_step_time(&f->req, &p, 0, RG_PHASE_DECODE, 64, 1, 1024, &one));
  RG_CHECK(p.groups[0].tp == 8 && p.groups[0].pp == 1);
  RG_CHECK_NEAR(one.compute + one.memory + one.comm + one.overhead, one.total, 1e-9);
  RG_CHECK(one.comm > 0 && one.overhead > 0 && one.total == one.stage + p.groups[0].cls->step_cost);
  // tp 8 x pp 2: each stage holds half the layers, so its all-reduces are
  // half as many; a step passes both stages.
  rg_placement_t q = colocated(f, "h100-sxm", 16, 64);
  q.groups[0].tp = 8, q.groups[0].pp = 2, q.groups[0].dp = 1;
  rg_step_cost_t two;
  RG_REQUIRE_OK(rg_group_step_time(&f->req, &q, 0, RG_PHASE_DECODE, 64, 1, 1024, &two));
  RG_CHECK(two.stage < one.stage);
  RG_CHECK(two.total > 2 * two.stage);  // two stages plus the hop between them
  // Bad asks say what is wrong.
  RG_CHECK_ERR(rg_group_step_time(&f->req, &p, 3, RG_PHASE_DECODE, 1, 1, 1, &one),
               "group 3: the placement has 1 groups");
  RG_CHECK_ERR(rg_group_step_time(&f->req, &p, 0, RG_PHASE_DECODE, 0, 1, 1, &one),
               "step of 0 sequences x 1 new tokens on 1 context: expected at least one sequence "
               "and one token");
  fx_close(f);
}

RG_TEST(planner_expert_all_to_all_uses_every_nic) {
  fx_t *f = fx_open(t, cfg(), "deepseek-v3", "gpu-only", NULL);
  // Data-parallel attention with the experts spread over 8 GPUs of one
  // node, then over 16 of two: the same tokens per GPU. Across nodes the
  // all-to-all goes over each GPU's own 400 Gb/s NIC, so doubling the GPUs
  // does not divide the per-GPU bandwidth by the nodes.
  rg_placement_t a = colocated(f, "h100-sxm", 8, 8 * 32), b = colocated(f, "h100-sxm", 16, 16 * 32);
  a.batch = b.batch = 64;  // small enough that tp 16 (below) fits too
  a.groups[0].tp = b.groups[0].tp = 1, a.groups[0].pp = b.groups[0].pp = 1;
  a.groups[0].dp = 8, b.groups[0].dp = 16;
  rg_step_cost_t sa, sb;
  RG_REQUIRE_OK(rg_group_step_time(&f->req, &a, 0, RG_PHASE_DECODE, 8 * 32, 1, 1024, &sa));
  RG_REQUIRE_OK(rg_group_step_time(&f->req, &b, 0, RG_PHASE_DECODE, 16 * 32, 1, 1024, &sb));
  RG_CHECK(sb.comm > sa.comm);  // NVLink inside the node, NICs across
  // Per GPU: 32 tokens x 8 experts x 7,168 x 3 bytes (fp8 out, bf16 back),
  // 15/16 of it crossing devices and 8/16 of that leaving the node, over
  // 58 MoE layers, at the NIC's rate times the class's link efficiency.
  const rg_device_class_t *h = rg_catalog_find(f->cat, "h100-sxm");
  double bytes = 32.0 * 8 * 7168 * 3 * 15 / 16 * 0.5;
  double floor_net = 58 * bytes / (50e9 * h->eff_link);
  RG_CHECK(sb.comm > floor_net && sb.comm < floor_net * 3);
  // Two micro-batches hide most of it behind the other half's work.
  b.micro_batches = 2;
  rg_step_cost_t so;
  RG_REQUIRE_OK(rg_group_step_time(&f->req, &b, 0, RG_PHASE_DECODE, 16 * 32, 1, 1024, &so));
  RG_CHECK(so.comm < sb.comm);
  // Data-parallel attention keeps each GPU's KV to its own sequences; MLA
  // over tp 16 would hold every sequence's latent on every GPU. So the KV a
  // GPU holds grows 16 times slower with the batch.
  b.micro_batches = 1;
  rg_placement_t c = b;
  c.groups[0].tp = 16, c.groups[0].dp = 1;
  double grow[2];
  for (int k = 0; k < 2; k++) {
    rg_placement_t *q = k ? &c : &b;
    rg_prediction_t small, big;
    q->batch = 32;
    RG_REQUIRE_OK(rg_placement_predict(&f->req, q, &small));
    q->batch = 64;
    RG_REQUIRE_OK(rg_placement_predict(&f->req, q, &big));
    grow[k] = big.mem_used[0] - small.mem_used[0];
  }
  RG_CHECK_NEAR(grow[1] / grow[0], 16, 0.05);
  fx_close(f);
}

RG_TEST(planner_one_class_fleet_splits_prefill_and_decode) {
  fx_t *f = fx_open(t, cfg(), "llama-3.1-70b", "gpu-only", "chat");
  RG_REQUIRE_OK(rg_plan_solve(&f->req, &f->plan));
  int found = 0;
  for (int i = 0; i < f->plan.n_baselines; i++) {
    const rg_plan_option_t *b = &f->plan.baselines[i];
    if (strcmp(b->label, "prefill-decode") || !b->feasible) continue;
    const rg_placement_t *p = &b->pools[0];
    found = p->mode == RG_MODE_PD && p->groups[0].cls == p->groups[1].cls;
    int used = (p->groups[0].devices + p->groups[1].devices) * p->replicas;
    RG_CHECK(used <= 32);
  }
  RG_CHECK(found);
  fx_close(f);
}

RG_TEST(planner_memory_in_vendor_units_and_expected_kv) {
  fx_t *f = fx_open(t, cfg(), "llama-3.1-70b", "gpu-only", NULL);
  // 70B in fp8 on one H100 (80 GiB): the weights fit and paged KV holds each
  // sequence's prompt and half its output on average.
  f->req.weight_dtype = RG_FP8;
  f->req.kv_dtype = RG_FP8;
  rg_placement_t p = colocated(f, "h100-sxm", 1, 8);
  p.weight_dtype = p.kv_dtype = RG_FP8;
  rg_prediction_t pr;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &p, &pr));
  RG_CHECK_NEAR(pr.mem_cap[0], 81559.0 * 1048576 * 0.90, 1e-9);
  RG_CHECK_NEAR(pr.kv_tokens, 1024 + 256 / 2.0, 1e-12);
  // The setting moves the usable share.
  f->req.mem_util = 0.5;
  rg_status_t st = rg_placement_predict(&f->req, &p, &pr);
  RG_CHECK(st != NULL);
  RG_CHECK(st && strstr(rg_status_message(st), "usable (50% of hbm3)"));
  rg_status_free(st);
  fx_close(f);
  char *out;
  RG_CHECK(rg_test_run_ridge(t,
                             "plan --model llama-3.1-8b --fleet gpu-only --memory-utilization 1.5",
                             &out) == 2);
  RG_CHECK_CONTAINS(out, "--memory-utilization: '1.5' is not a fraction from 0.05 to 1");
  free(out);
  rg_test_write(t, "m.yaml", "memory_utilization: 0.01\n");
  RG_CHECK(rg_test_run_ridge(t, "plan --model llama-3.1-8b --fleet gpu-only --placement m.yaml",
                             &out) == 2);
  RG_CHECK_CONTAINS(
      out, "m.yaml:1:21: memory_utilization: 0.01 leaves almost nothing for weights and KV");
  free(out);
}

// ----- Latency percentiles, prefix caches, speculation -----------------------------

// The workload's requests spread over a plan's pools as a router would send
// them: by what each serves within the SLOs, so a pool with few slots and a
// slow prefill is not queued past its TTFT SLO at the load a fast pool
// carries; when the pools cannot serve the rate within the SLOs at all, by
// what each serves. While searching (no share known yet) a known rate still
// charges the wait for a free slot at the planning load.
RG_TEST(planner_rate_splits_by_what_pools_serve_within_slos) {
  fx_t *f = fx_open(t, cfg(), "llama-3.1-70b", "mixed", NULL);
  RG_REQUIRE(f->model);
  // Two H100 replicas and a Bertha one, at batches that meet the default
  // workload's SLOs.
  rg_placement_t fast = colocated(f, "h100-sxm", 4, 159), slow = colocated(f, "bertha-500", 8, 13);
  fast.replicas = 2;
  f->req.fixed[0] = fast, f->req.fixed[1] = slow, f->req.n_fixed = 2;
  // What each serves while no share is known (the first pass).
  rg_prediction_t a, b;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &fast, &a));
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &slow, &b));
  const double cap = a.requests_per_s + b.requests_per_s, cap_share = b.requests_per_s / cap;
  const rg_plan_option_t *o = &f->plan.chosen;

  f->wdef.rate = 0.65 * cap;
  RG_REQUIRE_OK(rg_plan_solve(&f->req, &f->plan));
  RG_REQUIRE(o->n_pools == 2);
  RG_CHECK(o->pred[0].meets_slo && o->pred[1].meets_slo);
  RG_CHECK_NEAR(o->pools[0].load_share + o->pools[1].load_share, 1, 1e-9);
  RG_CHECK(o->pools[1].load_share < cap_share);
  // Split by capacity (equal utilisation), the slow pool misses its SLOs.
  rg_placement_t q = o->pools[1];
  q.load_share = cap_share;
  rg_prediction_t even;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &q, &even));
  RG_CHECK(!even.meets_slo);
  RG_CHECK(even.ttft_slo > o->pred[1].ttft_slo);

  // More than the pools serve within the SLOs: by capacity, with a warning
  // to the user (the pools miss them).
  f->wdef.rate = 0.95 * cap;
  RG_REQUIRE_OK(rg_plan_solve(&f->req, &f->plan));
  RG_CHECK_NEAR(o->pools[1].load_share, cap_share, 1e-9);
  RG_CHECK(!o->pred[1].meets_slo);

  // Searching: the same replica, no share yet, with and without a rate.
  q.load_share = 0;
  rg_prediction_t with_rate, without;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &q, &with_rate));
  f->wdef.rate = 0;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &q, &without));
  RG_CHECK(with_rate.ttft_slo > without.ttft_slo);
  RG_CHECK_NEAR(with_rate.tbt_slo, without.tbt_slo, 1e-12);
  fx_close(f);
}

// With neither the placement nor the request setting a prefill chunk, a
// colocated replica takes the largest chunk whose chunk-carrying steps keep
// the TBT SLO; the same placement with the fixed default chunk breaks it.
RG_TEST(planner_prefill_chunk_keeps_the_tbt_slo) {
  fx_t *f = fx_open(t, cfg(), "llama-3.1-70b", "mixed", NULL);
  RG_REQUIRE(f->model);
  const double slo = f->req.workload->slo_tbt;
  RG_REQUIRE(slo > 0);
  rg_placement_t p = colocated(f, "h100-sxm", 4, 128);
  rg_prediction_t chosen, fixed;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &p, &chosen));
  p.prefill_chunk = RG_DEFAULT_PREFILL_CHUNK;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &p, &fixed));
  RG_CHECK(fixed.tbt_slo > slo);
  RG_CHECK(chosen.tbt_slo <= slo);
  RG_CHECK(chosen.prefill_chunk < RG_DEFAULT_PREFILL_CHUNK && chosen.prefill_chunk >= 256);
  // A power of two: what engines are configured with.
  double c = chosen.prefill_chunk;
  while (c > 1 && fmod(c, 2) == 0) c /= 2;
  RG_CHECK_NEAR(c, 1, 0);
  // The step that carries a chunk is slower than the plain decode step;
  // smaller chunks cost more prefill time per request (weights re-read).
  RG_CHECK(chosen.tbt_slo > chosen.decode_step);
  RG_CHECK(chosen.prefill_cost > fixed.prefill_cost);
  // A request's chunk is honoured as given.
  p.prefill_chunk = 0;
  f->req.prefill_chunk = 1024;
  rg_prediction_t asked;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &p, &asked));
  RG_CHECK_NEAR(asked.prefill_chunk, 1024, 0);
  fx_close(f);

  // Data-parallel attention: the chunk is split among the attention
  // replicas, so each may take fewer than 256 tokens, but a step carries at
  // least 256 over the group.
  f = fx_open(t, cfg(), "deepseek-v3", "mixed", NULL);
  RG_REQUIRE(f->model);
  f->req.weight_dtype = RG_FP8;
  p = colocated(f, "h100-sxm", 16, 345);
  p.groups[0].tp = 1, p.groups[0].pp = 1, p.groups[0].dp = 16;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &p, &chosen));
  RG_CHECK(chosen.tbt_slo <= f->req.workload->slo_tbt);
  RG_CHECK(chosen.prefill_chunk < 256);
  RG_CHECK(chosen.prefill_chunk * 16 >= 256);
  fx_close(f);
}

RG_TEST(planner_percentiles_and_the_slo_percentile_binds) {
  fx_t *f = fx_open(t, cfg(), "llama-3.1-8b", "gpu-only", "chat");
  rg_placement_t p = colocated(f, "h100-sxm", 1, 64);
  p.load_share = 1;
  rg_prediction_t pr;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &p, &pr));
  // Lognormal prompts: the p99 prompt is long and its queue wait longer.
  RG_CHECK(pr.ttft_p[0] < pr.ttft_p[1] && pr.ttft_p[1] < pr.ttft_p[2]);
  RG_CHECK(pr.tbt_p[0] <= pr.tbt_p[2]);
  // An SLO between the median and the tail: met at p50, missed at p99.
  f->wl->slo_ttft = (pr.ttft_p[0] + pr.ttft_p[2]) / 2;
  f->wl->slo_tbt = 10;
  f->wl->slo_percentile = 50;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &p, &pr));
  RG_CHECK(pr.meets_slo);
  f->wl->slo_percentile = 99;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &p, &pr));
  RG_CHECK(!pr.meets_slo);
  RG_CHECK_NEAR(pr.ttft_slo, pr.ttft_p[2], 1e-12);
  fx_close(f);
}

RG_TEST(planner_prefix_cache_and_shared_prefix) {
  const char *base =
      "name: w\nprompt_tokens: 4096\noutput_tokens: 256\narrival: { rate: 1 req/s }\n"
      "slo: { ttft: 10 s, tbt: 1 s, percentile: 99 }\n%s";
  char text[512], path[512];
  double pf[3], kv[3];
  const char *extra[] = {"", "prefix_cache: { hit_rate: 0.75 }\n",
                         "prefix_cache: { shared_tokens: 3072 }\n"};
  for (int i = 0; i < 3; i++) {
    snprintf(text, sizeof text, base, extra[i]);
    snprintf(path, sizeof path, "%s", rg_test_write(t, "w.yaml", text));
    fx_t *f = fx_open(t, cfg(), "llama-3.1-8b", "gpu-only", path);
    rg_placement_t p = colocated(f, "h100-sxm", 1, 16);
    rg_prediction_t pr;
    RG_CHECK_OK(rg_placement_predict(&f->req, &p, &pr));
    pf[i] = pr.prefill_time, kv[i] = pr.kv_tokens;
    fx_close(f);
  }
  // A 75% hit rate prefills a quarter of each prompt; the KV held is the same.
  RG_CHECK(pf[1] < pf[0] * 0.4);
  RG_CHECK_NEAR(kv[1], kv[0], 1e-12);
  // A shared 3,072-token prefix: the same quarter to prefill, and its KV held
  // once per replica instead of once per sequence.
  RG_CHECK_NEAR(pf[2], pf[1], 0.01);
  RG_CHECK_NEAR(kv[2], kv[0] - 3072, 1e-12);
  rg_workload_t *w = NULL;
  snprintf(text, sizeof text, base, "prefix_cache: { hit_rate: 0.5, shared_tokens: 10 }\n");
  snprintf(path, sizeof path, "%s", rg_test_write(t, "w.yaml", text));
  RG_CHECK_ERR(rg_workload_load(path, NULL, &w),
               "w.yaml:6:15: prefix_cache: give one of hit_rate (the share of prompt tokens found "
               "cached) or "
               "shared_tokens (a prefix every prompt shares)");
  snprintf(text, sizeof text, base, "prefix_cache: { shared_tokens: 5000 }\n");
  snprintf(path, sizeof path, "%s", rg_test_write(t, "w.yaml", text));
  RG_CHECK_ERR(rg_workload_load(path, NULL, &w),
               "w.yaml:6:32: prefix_cache.shared_tokens: 5000 is not shorter than the prompts "
               "(4096 tokens)");
}

RG_TEST(planner_speculative_decoding_places_the_draft) {
  rg_speculative_t s = {.present = 1, .tokens = 4, .acceptance = 0.8};
  RG_CHECK_NEAR(rg_speculative_tokens_per_step(&s), 1 + 0.8 + 0.64 + 0.512 + 0.4096, 1e-12);
  const char *path = rg_test_write(
      t, "spec.yaml",
      "name: spec\nprompt_tokens: 1024\noutput_tokens: 256\narrival: { rate: 2 req/s }\n"
      "slo: { ttft: 2 s, tbt: 30 ms, percentile: 99 }\n"
      "speculative: { draft: llama-3.1-8b, tokens: 4, acceptance: 0.8 }\n");
  char wl[512];
  snprintf(wl, sizeof wl, "%s", path);
  fx_t *f = fx_open(t, cfg(), "llama-3.1-70b", "gpu-only", wl);
  RG_REQUIRE(f->draft);
  // The draft on its own group of one H100, the target on eight.
  rg_placement_t p = colocated(f, "h100-sxm", 8, 32);
  p.n_groups = 2;
  snprintf(p.groups[1].name, sizeof p.groups[1].name, "draft");
  p.groups[1].cls = p.groups[0].cls;
  p.groups[1].devices = 1;
  p.groups[1].tp = p.groups[1].pp = p.groups[1].dp = 1;
  p.slot_group[RG_SLOT_DRAFT] = 1;
  rg_prediction_t spec, plain;
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &p, &spec));
  RG_CHECK_NEAR(spec.tokens_per_step, 3.3616, 1e-9);
  RG_CHECK(spec.mem_used[1] >
           rg_arch_weight_bytes(f->draft, RG_BF16));  // the draft's weights live there
  // With the draft beside the target on the same eight GPUs it runs 8-way
  // parallel too, and speculation beats plain decoding per token (on its
  // own single GPU the 8B draft is about as slow per token as the target).
  rg_placement_t c = colocated(f, "h100-sxm", 8, 32);
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &c, &spec));
  f->req.draft = NULL;
  f->wl->speculative.present = 0;
  rg_placement_t q = colocated(f, "h100-sxm", 8, 32);
  RG_REQUIRE_OK(rg_placement_predict(&f->req, &q, &plain));
  RG_CHECK(spec.tbt < plain.tbt);
  // The search places the draft like any other stage and the plan says so.
  f->req.draft = f->draft;
  f->wl->speculative.present = 1;
  RG_REQUIRE_OK(rg_plan_solve(&f->req, &f->plan));
  RG_CHECK(f->plan.chosen.feasible && f->plan.chosen.pred[0].tokens_per_step > 3);
  fx_close(f);
  char args[700], *out;
  snprintf(args, sizeof args,
           "plan --model llama-3.1-70b --fleet gpu-only --workload '%s' -o s.yaml", wl);
  RG_CHECK(rg_test_run_ridge(t, args, &out) == 0);
  RG_CHECK_CONTAINS(out,
                    "speculative: llama-3.1-8b proposes 4, 80% accepted (3.36 tokens per step)");
  RG_CHECK_CONTAINS(out, "[draft]");
  free(out);
  snprintf(args, sizeof args, "plan --workload '%s' --placement s.yaml", wl);
  RG_CHECK(rg_test_run_ridge(t, args, &out) == 0);
  RG_CHECK_CONTAINS(out, "Plan (your placement)");
  free(out);
  rg_workload_t *w = NULL;
  path = rg_test_write(
      t, "bad.yaml",
      "name: bad\nprompt_tokens: 1024\noutput_tokens: 256\narrival: { rate: 2 req/s }\n"
      "slo: { ttft: 2 s, tbt: 30 ms, percentile: 99 }\nspeculative: { tokens: 4, acceptance: 0.8 "
      "}\n");
  RG_CHECK_ERR(rg_workload_load(path, NULL, &w),
               "bad.yaml:6:14: speculative: missing required key 'draft'");
}

// ----- Pictures ---------------------------------------------------------------------

// Every <text x='..' y='..'>label</text> of an SVG, checked pairwise for
// overlap with the same box the writer uses (5.6 px a character, 12 px a line).
static int labels_overlap(const char *svg, char *first, size_t len) {
  enum { MAX = 400 };
  static double x[MAX], y[MAX], w[MAX];
  int n = 0;
  for (const char *p = svg; (p = strstr(p, "<text x='")) && n < MAX; p++) {
    const char *body = strchr(p, '>');
    const char *anchor = strstr(p, "text-anchor");
    if (!body || (anchor && anchor < body)) continue;  // axis ticks and titles
    continue;                                          // axis ticks
    double xx, yy;
    if (sscanf(p, "<text x='%lf' y='%lf'", &xx, &yy) != 2) continue;
    const char *end = strstr(body, "</text>");
    x[n] = xx, y[n] = yy, w[n] = 5.6 * (double)(end - body - 1);
    for (int i = 0; i < n; i++)
      if (x[i] < x[n] + w[n] && x[n] < x[i] + w[i] && y[i] - 12 < y[n] && y[n] - 12 < y[i]) {
        snprintf(first, len, "%.40s", body + 1);
        return 1;
      }
    n++;
  }
  return 0;
}

static char *read_all(const char *path) {
  FILE *in = fopen(path, "r");
  if (!in) return NULL;
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, in);
  buf[n] = 0;
  fclose(in);
  return buf;
}

RG_TEST(planner_roofline_draws_every_class_and_no_label_overlaps) {
  fx_t *f = fx_open(t, cfg(), "llama-3.1-70b", "mixed", "chat");
  RG_REQUIRE_OK(rg_plan_solve(&f->req, &f->plan));
  char path[512];
  snprintf(path, sizeof path, "%s/r.svg", rg_test_tmpdir(t));
  FILE *out = fopen(path, "w");
  RG_REQUIRE(out);
  RG_CHECK_OK(rg_plan_write_svg(&f->plan, &f->req, out));
  fclose(out);
  char *svg = read_all(path);
  RG_REQUIRE(svg);
  RG_CHECK_CONTAINS(svg, "h100-sxm (ridge");
  RG_CHECK_CONTAINS(svg, "groq-lpu (ridge");
  RG_CHECK_CONTAINS(svg, "bertha-500 (ridge");
  RG_CHECK_CONTAINS(svg, "fill='none' stroke=");  // where a baseline would run a stage
  RG_CHECK_CONTAINS(svg, ">decode<");
  RG_CHECK_CONTAINS(svg, ">prefill<");
  char which[64];
  if (labels_overlap(svg, which, sizeof which))
    rg_test_fail(t, __FILE__, __LINE__, "labels overlap at '%s'", which);
  fx_close(f);
}

RG_TEST(planner_pareto_curves_trade_users_for_devices) {
  fx_t *f = fx_open(t, cfg(), "llama-3.1-70b", "mixed", "chat");
  RG_REQUIRE_OK(rg_plan_solve(&f->req, &f->plan));
  rg_pareto_curve_t curves[RG_PARETO_KINDS];
  int n;
  RG_REQUIRE_OK(rg_plan_pareto(&f->plan, &f->req, curves, &n));
  RG_CHECK(n >= 3);
  RG_CHECK(!strncmp(curves[n - 1].label, "chosen", 6));
  for (int i = 0; i < n; i++) {
    RG_CHECK(curves[i].n >= 2);
    // A bigger batch: more tokens per device, fewer per user.
    for (int j = 1; j < curves[i].n; j++) {
      // (prefill-decode levels off where its prefill group is the bottleneck)
      RG_CHECK(curves[i].pt[j].per_device >= curves[i].pt[j - 1].per_device * 0.999);
      RG_CHECK(curves[i].pt[j].per_user < curves[i].pt[j - 1].per_user);
    }
  }
  fx_close(f);
  char *out;
  RG_CHECK(rg_test_run_ridge(t, "plan --model llama-3.1-70b --fleet mixed --pareto p.svg", &out) ==
           0);
  RG_CHECK_CONTAINS(out, "wrote pareto p.svg");
  free(out);
  char path[512];
  snprintf(path, sizeof path, "%s/p.svg", rg_test_tmpdir(t));
  char *svg = read_all(path);
  RG_REQUIRE(svg);
  RG_CHECK_CONTAINS(svg, "tokens/s per user (1 / TBT)");
  RG_CHECK_CONTAINS(svg, "homogeneous h100-sxm");
  RG_CHECK_CONTAINS(svg, "chosen, batch");
  char which[64];
  if (labels_overlap(svg, which, sizeof which))
    rg_test_fail(t, __FILE__, __LINE__, "labels overlap at '%s'", which);
}

// ----- The weight stream by M -------------------------------------------------------

// memory_by_m prices a GEMM's weight bytes at its own M's share of the
// bandwidth: a decode batch of 8 whose kernel streams at half batch 1's rate
// reads its (memory-bound) weights in twice the time; batch 1, and a dtype
// without a curve, keep `memory`.
RG_TEST(planner_memory_by_m_prices_each_batch_at_its_stream) {
  fx_t *f;
  const rg_device_class_t *c = calibrated_h100(
      t,
      "name: h100-sxm\n"
      "measured: { by: ridge profile, date: 2025-06-01, device: 'cuda:0 NVIDIA H100 80GB HBM3' }\n"
      "efficiency: { memory: 0.9, memory_by_m: { bf16: { 1: 0.9, 8: 0.45 } } }\n",
      &f);
  RG_REQUIRE(c);
  RG_CHECK_NEAR(rg_class_eff_memory(c, RG_BF16, 1), 0.9, 1e-12);
  RG_CHECK_NEAR(rg_class_eff_memory(c, RG_BF16, 8), 0.45, 1e-12);
  RG_CHECK_NEAR(rg_class_eff_memory(c, RG_BF16, 64), 0.45, 1e-12);       // flat past the end
  RG_CHECK_NEAR(rg_class_eff_memory(c, RG_BF16, sqrt(8)), 0.675, 1e-9);  // log-interpolated
  RG_CHECK_NEAR(rg_class_eff_memory(c, RG_F16, 8), 0.9, 1e-12);          // no curve
  rg_device_class_t z = *c;
  memset(z.eff_memory_m, 0, sizeof z.eff_memory_m);
  rg_group_t g = {"main", c, 1, 1, 1, 1}, g0 = {"main", &z, 1, 1, 1, 1};
  double t1, t1z, t8, t8z;
  RG_REQUIRE_OK(rg_slot_step_time(&f->req, &g, RG_SLOT_FFN, RG_PHASE_DECODE, 1, 1, 64, 0, &t1));
  RG_REQUIRE_OK(rg_slot_step_time(&f->req, &g0, RG_SLOT_FFN, RG_PHASE_DECODE, 1, 1, 64, 0, &t1z));
  RG_REQUIRE_OK(rg_slot_step_time(&f->req, &g, RG_SLOT_FFN, RG_PHASE_DECODE, 8, 1, 64, 0, &t8));
  RG_REQUIRE_OK(rg_slot_step_time(&f->req, &g0, RG_SLOT_FFN, RG_PHASE_DECODE, 8, 1, 64, 0, &t8z));
  RG_CHECK_NEAR(t1, t1z, 1e-12 * t1);
  RG_CHECK(t8 / t8z > 1.95 && t8 / t8z <= 2.0);  // the activations' bytes are a sliver
  fx_close(f);
}

// A calibrated h100-sxm whose third line on is `rest` is refused with
// `error`, at a position in that file.
static void refuses_calibrated(rg_test_ctx_t *t, const char *rest, const char *error) {
  char text[600];
  snprintf(text, sizeof text, "name: h100-sxm\nmeasured: { by: x, date: 2025-06-01 }\n%s", rest);
  const char *dir = calibrated_config(t, text);
  rg_catalog_t *cat = NULL;
  RG_CHECK_ERR(rg_catalog_load(dir, &cat), error);
  RG_CHECK_ERR(rg_catalog_load(dir, &cat), "calibrated/h100-sxm.yaml:3:");
  RG_CHECK(cat == NULL);
}

// attention_by_context prices decode attention's KV reads at the step's own
// context's efficiency (log-interpolated, flat past the ends); a class
// without it keeps `attention` at every context.
RG_TEST(planner_attention_by_context_prices_each_context) {
  fx_t *f;
  const rg_device_class_t *c = calibrated_h100(
      t,
      "name: h100-sxm\n"
      "measured: { by: ridge profile, date: 2025-06-01, device: 'cuda:0 NVIDIA H100 80GB HBM3' }\n"
      "efficiency: { memory: 0.9, attention: 0.8, attention_by_context: { 128: 0.2, 2048: 0.8 } "
      "}\n",
      &f);
  RG_REQUIRE(c);
  RG_CHECK_NEAR(rg_class_eff_attention(c, 128), 0.2, 1e-12);
  RG_CHECK_NEAR(rg_class_eff_attention(c, 512), 0.5, 1e-9);  // log-interpolated
  RG_CHECK_NEAR(rg_class_eff_attention(c, 64), 0.2, 1e-12);
  RG_CHECK_NEAR(rg_class_eff_attention(c, 1e6), 0.8, 1e-12);
  rg_device_class_t z = *c;
  z.eff_attention_ctx.n = 0;
  RG_CHECK_NEAR(rg_class_eff_attention(&z, 128), 0.8, 1e-12);
  z.eff_attention = 0;
  RG_CHECK_NEAR(rg_class_eff_attention(&z, 128), 0.9, 1e-12);  // eff_memory
  // The attention stage at 128 positions reads its KV at a quarter of the
  // rate at 2048, where the two classes agree.
  rg_device_class_t flat = *c;
  flat.eff_attention_ctx.n = 0;
  rg_group_t g = {"main", c, 1, 1, 1, 1}, g0 = {"main", &flat, 1, 1, 1, 1};
  double a, a0, b, b0;
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g, RG_SLOT_ATTENTION, RG_PHASE_DECODE, 64, 1, 2048, 0, &a));
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g0, RG_SLOT_ATTENTION, RG_PHASE_DECODE, 64, 1, 2048, 0, &a0));
  RG_CHECK_NEAR(a, a0, 1e-12 * a);
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g, RG_SLOT_ATTENTION, RG_PHASE_DECODE, 64, 1, 128, 0, &b));
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g0, RG_SLOT_ATTENTION, RG_PHASE_DECODE, 64, 1, 128, 0, &b0));
  RG_CHECK(b > b0);
  fx_close(f);
  static const struct {
    const char *eff, *error;
  } bad[] = {
      {"efficiency: { attention_by_context: 0.3 }\n",
       "efficiency.attention_by_context: expected a mapping of context positions to fraction"},
      {"efficiency: { attention_by_context: { 512: 0.3, 128: 0.2 } }\n",
       "efficiency.attention_by_context: context 128 does not follow 512; list points by "
       "increasing context"},
      {"efficiency: { attention_by_context: { 128: 1.5 } }\n",
       "efficiency.attention_by_context.128"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    refuses_calibrated(t, bad[i].eff, bad[i].error);
}

// attention_compute prices a prompt's attention multiplies at their own
// measured rate (a CPU's flash attention runs at a fraction of its
// matmuls'): a class measuring 0.2 prices a 2048-token prompt's attention
// stage slower than the same class without it, by about its core's share;
// decode attention, priced by its KV reads, does not move; a fraction above
// 1 is refused with its position.
RG_TEST(planner_attention_compute_prices_prompt_attention) {
  fx_t *f;
  const rg_device_class_t *c = calibrated_h100(
      t,
      "name: h100-sxm\n"
      "measured: { by: ridge profile, date: 2025-06-01, device: 'cuda:0 NVIDIA H100 80GB HBM3' }\n"
      "efficiency: { memory: 0.9, attention: 0.8, attention_compute: 0.2 }\n",
      &f);
  RG_REQUIRE(c);
  RG_CHECK_NEAR(c->eff_attention_compute, 0.2, 1e-12);
  rg_device_class_t plain = *c;
  plain.eff_attention_compute = 0;
  rg_group_t g = {"main", c, 1, 1, 1, 1}, g0 = {"main", &plain, 1, 1, 1, 1};
  double p, p0, d, d0;
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g, RG_SLOT_ATTENTION, RG_PHASE_PREFILL, 1, 2048, 0, 0, &p));
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g0, RG_SLOT_ATTENTION, RG_PHASE_PREFILL, 1, 2048, 0, 0, &p0));
  RG_CHECK(p > 1.2 * p0);
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g, RG_SLOT_ATTENTION, RG_PHASE_DECODE, 64, 1, 2048, 0, &d));
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g0, RG_SLOT_ATTENTION, RG_PHASE_DECODE, 64, 1, 2048, 0, &d0));
  RG_CHECK_NEAR(d, d0, 1e-12 * d);
  fx_close(f);
  refuses_calibrated(t, "efficiency: { attention_compute: 1.5 }\n", "efficiency.attention_compute");
}

// overhead.first_by_op splits what a fresh process pays once by the op
// kinds that paid it: a process running some kinds pays theirs (each kind
// once), one listing none of them pays nothing, and a class without the
// split (or a caller without a list) pays `first` whatever it runs.
RG_TEST(planner_process_first_by_op_kind) {
  fx_t *f;
  const rg_device_class_t *c = calibrated_h100(
      t,
      "name: h100-sxm\n"
      "measured: { by: ridge profile, date: 2025-06-01, device: 'opencl:0 PoCL' }\n"
      "overhead: { step: 10 us, layer: 0 ns, first: 240 ms,\n"
      "    first_by_op: { matmul: 90 ms, rmsnorm: 40 ms, rope: 30 ms, attention: 50 ms, "
      "swiglu: 20 ms, add: 0 ns, embed: 10 ms } }\n",
      &f);
  RG_REQUIRE(c && c->n_first_by_op == 7);
  static const char *const ffn[] = {"rmsnorm", "matmul", "swiglu", "add"};
  static const char *const twice[] = {"matmul", "matmul", "rope"};
  static const char *const other[] = {"sample"};
  RG_CHECK_NEAR(rg_class_process_first(c, ffn, 4), 0.15, 1e-12);
  RG_CHECK_NEAR(rg_class_process_first(c, twice, 3), 0.12, 1e-12);
  RG_CHECK_NEAR(rg_class_process_first(c, other, 1), 0, 1e-12);
  RG_CHECK_NEAR(rg_class_process_first(c, NULL, 0), 0.24, 1e-12);
  rg_device_class_t z = *c;
  z.n_first_by_op = 0;
  RG_CHECK_NEAR(rg_class_process_first(&z, ffn, 4), 0.24, 1e-12);
  fx_close(f);
  static const struct {
    const char *o, *error;
  } bad[] = {
      {"overhead: { first_by_op: 3 ms }\n",
       "overhead.first_by_op: expected a mapping of op kinds to a time"},
      {"overhead: { first_by_op: { MatMul: 3 ms } }\n",
       "overhead.first_by_op: 'MatMul' is not an op kind's name"},
      {"overhead: { first_by_op: { matmul: fast } }\n", "overhead.first_by_op.matmul"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    refuses_calibrated(t, bad[i].o, bad[i].error);
}

// ----- Per-stage figures ------------------------------------------------------------

static const char *const staged_h100 =
    "name: h100-sxm\n"
    "measured: { by: ridge profile, date: 2025-06-01, device: 'cuda:0 NVIDIA H100 80GB HBM3' }\n"
    "efficiency: { memory: 0.9, attention: 0.8 }\n"
    "overhead: { step: 1 ms, layer: 10 us, first: 300 ms }\n"
    "stages:\n"
    "  attention: { call: 10 us, token: 1 us, efficiency: 0.5, first: 2 ms, cold: 20 us }\n"
    "  ffn: { call: 3 us }\n";

// Each figure adds what it says and nothing else: calls x (call + token x
// tokens), the roofline over the efficiency factor; a class without them
// splits its step time into the slots' shares exactly.
RG_TEST(planner_stage_figures_add_per_call_and_token_costs) {
  fx_t *f;
  const rg_device_class_t *c = calibrated_h100(t, staged_h100, &f);
  RG_REQUIRE(c);
  RG_CHECK_NEAR(c->stage[RG_SLOT_ATTENTION].call, 10e-6, 1e-12);
  RG_CHECK_NEAR(c->stage[RG_SLOT_ATTENTION].first, 2e-3, 1e-12);
  RG_CHECK_NEAR(c->stage[RG_SLOT_ATTENTION].cold, 20e-6, 1e-12);
  RG_CHECK_NEAR(c->process_first, 0.3, 1e-12);
  RG_CHECK(c->stage[RG_SLOT_FFN].cold == 0);
  RG_CHECK(c->stage[RG_SLOT_EMBED].call == 0 && c->stage[RG_SLOT_EMBED].eff == 0);
  RG_CHECK_CONTAINS(c->stage_source, "measured by ridge profile on 2025-06-01");
  rg_device_class_t z = *c;  // the same class without its stage figures
  memset(z.stage, 0, sizeof z.stage);
  rg_group_t g = {"main", c, 1, 1, 1, 1}, g0 = {"main", &z, 1, 1, 1, 1};
  const double L = (double)f->model->n_layers;
  double t1, t0;
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g, RG_SLOT_ATTENTION, RG_PHASE_DECODE, 4, 1, 1024, 0, &t1));
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g0, RG_SLOT_ATTENTION, RG_PHASE_DECODE, 4, 1, 1024, 0, &t0));
  RG_CHECK(t0 > 0);
  RG_CHECK_NEAR(t1, t0 / 0.5 + L * (10e-6 + 4 * 1e-6), 1e-9 * t1);
  RG_REQUIRE_OK(rg_slot_step_time(&f->req, &g, RG_SLOT_FFN, RG_PHASE_PREFILL, 1, 512, 0, 0, &t1));
  RG_REQUIRE_OK(rg_slot_step_time(&f->req, &g0, RG_SLOT_FFN, RG_PHASE_PREFILL, 1, 512, 0, 0, &t0));
  RG_CHECK_NEAR(t1 - t0, L * 3e-6, 1e-9 * t1);
  // A stage instance over 8 of the 32 layers: a quarter of everything.
  double q;
  RG_REQUIRE_OK(rg_slot_step_time(&f->req, &g, RG_SLOT_FFN, RG_PHASE_PREFILL, 1, 512, 0, 8, &q));
  RG_CHECK_NEAR(q, t1 * 8 / L, 1e-9 * t1);
  RG_REQUIRE_OK(rg_slot_step_time(&f->req, &g, RG_SLOT_EMBED, RG_PHASE_DECODE, 4, 1, 64, 0, &t1));
  RG_REQUIRE_OK(rg_slot_step_time(&f->req, &g0, RG_SLOT_EMBED, RG_PHASE_DECODE, 4, 1, 64, 0, &t0));
  RG_CHECK(t1 == t0);

  // The group's step is the slots' shares, the layer floors and the step
  // cost, with or without stage figures (the datasheet class too).
  const rg_device_class_t *classes[] = {c, &z, c->datasheet};
  for (int k = 0; k < 3; k++) {
    rg_placement_t p = colocated(f, "h100-sxm", 1, 4);
    p.groups[0].cls = classes[k];
    f->fleet->nodes[0].devs[0].cls = classes[k];
    rg_group_t gk = p.groups[0];
    rg_step_cost_t sc;
    RG_REQUIRE_OK(rg_group_step_time(&f->req, &p, 0, RG_PHASE_DECODE, 4, 1, 1024, &sc));
    double sum = classes[k]->step_cost + classes[k]->layer_floor * L;
    for (int s = RG_SLOT_EMBED; s <= RG_SLOT_LM_HEAD; s++) {
      double x;
      RG_REQUIRE_OK(
          rg_slot_step_time(&f->req, &gk, (rg_slot_t)s, RG_PHASE_DECODE, 4, 1, 1024, 0, &x));
      sum += x;
    }
    RG_CHECK_NEAR(sc.total, sum, 1e-9 * sc.total);
  }
  f->fleet->nodes[0].devs[0].cls = c;

  // A mixed step: decode step + prefill step - a one-token step.
  rg_step_mix_t mix = {.decodes = 3,
                       .decode_context = 100,
                       .prefills = 1,
                       .prefill_tokens = 200,
                       .prefill_context = 0};
  double m, td, tp, tb;
  RG_REQUIRE_OK(rg_slot_mixed_time(&f->req, &g, RG_SLOT_ATTENTION, &mix, 0, &m));
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g, RG_SLOT_ATTENTION, RG_PHASE_DECODE, 3, 1, 100, 0, &td));
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g, RG_SLOT_ATTENTION, RG_PHASE_PREFILL, 1, 200, 0, 0, &tp));
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g, RG_SLOT_ATTENTION, RG_PHASE_DECODE, 1, 1, 0, 0, &tb));
  RG_CHECK_NEAR(m, fmax(td + tp - tb, fmax(td, tp)), 1e-12);
  rg_step_mix_t none = {0};
  RG_REQUIRE_OK(rg_slot_mixed_time(&f->req, &g, RG_SLOT_FFN, &none, 0, &m));
  RG_CHECK(m == 0);
  RG_CHECK_ERR(rg_slot_step_time(&f->req, &g, RG_SLOT_PREFILL, RG_PHASE_DECODE, 1, 1, 0, 0, &m),
               "slot 4: expected a stage kind's slot (embed, attention, ffn, lm_head)");
  RG_CHECK_ERR(rg_slot_step_time(&f->req, &g, RG_SLOT_FFN, RG_PHASE_DECODE, 0, 1, 0, 0, &m),
               "step of 0 sequences x 1 new tokens on 0 context: expected at least one sequence");
  fx_close(f);
}

// by_tokens replaces call + token x tokens: exact at its points, linear
// between them, and past the last growing by the last segment's cost per
// token (a falling one held flat); before the first, the first.
RG_TEST(planner_stage_figures_by_tokens_price_each_call_size) {
  fx_t *f;
  const rg_device_class_t *c = calibrated_h100(
      t,
      "name: h100-sxm\n"
      "measured: { by: ridge profile, date: 2025-06-01, device: 'cuda:0 NVIDIA H100 80GB HBM3' }\n"
      "stages:\n"
      "  attention: { call: 1 ms, token: 1 ms, by_tokens: { 1: 10 us, 16: 40 us, 256: 100 us } }\n"
      "  lm_head: { by_tokens: { 2: 10 us, 8: 4 us } }\n",
      &f);
  RG_REQUIRE(c);
  const rg_stage_figures_t *a = &c->stage[RG_SLOT_ATTENTION], *h = &c->stage[RG_SLOT_LM_HEAD];
  RG_CHECK(a->n_points == 3 && h->n_points == 2);
  RG_CHECK_NEAR(rg_stage_call_seconds(a, 1), 10e-6, 1e-12);
  RG_CHECK_NEAR(rg_stage_call_seconds(a, 16), 40e-6, 1e-12);
  RG_CHECK_NEAR(rg_stage_call_seconds(a, 8.5), 25e-6, 1e-12);
  RG_CHECK_NEAR(rg_stage_call_seconds(a, 136), 70e-6, 1e-12);
  RG_CHECK_NEAR(rg_stage_call_seconds(a, 512), 164e-6, 1e-12);  // 0.25 us a token on
  RG_CHECK_NEAR(rg_stage_call_seconds(a, 0.5), 10e-6, 1e-12);
  RG_CHECK_NEAR(rg_stage_call_seconds(h, 5), 7e-6, 1e-12);
  RG_CHECK_NEAR(rg_stage_call_seconds(h, 64), 4e-6, 1e-12);  // falling: held
  rg_stage_figures_t lin = {.call = 2e-6, .token = 1e-6};
  RG_CHECK_NEAR(rg_stage_call_seconds(&lin, 8), 10e-6, 1e-12);
  // The cost model adds it per call: each layer, at the step's tokens.
  rg_device_class_t z = *c;
  memset(z.stage, 0, sizeof z.stage);
  rg_group_t g = {"main", c, 1, 1, 1, 1}, g0 = {"main", &z, 1, 1, 1, 1};
  const double L = (double)f->model->n_layers;
  double t1, t0;
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g, RG_SLOT_ATTENTION, RG_PHASE_PREFILL, 2, 68, 0, 0, &t1));
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g0, RG_SLOT_ATTENTION, RG_PHASE_PREFILL, 2, 68, 0, 0, &t0));
  RG_CHECK_NEAR(t1 - t0, L * 70e-6, 1e-9 * t1);
  RG_REQUIRE_OK(rg_slot_step_time(&f->req, &g, RG_SLOT_LM_HEAD, RG_PHASE_DECODE, 5, 1, 64, 0, &t1));
  RG_REQUIRE_OK(
      rg_slot_step_time(&f->req, &g0, RG_SLOT_LM_HEAD, RG_PHASE_DECODE, 5, 1, 64, 0, &t0));
  RG_CHECK_NEAR(t1 - t0, 7e-6, 1e-9 * t1);
  fx_close(f);
}

RG_TEST(planner_stage_figures_bad_files) {
  static const struct {
    const char *stages, *error;
  } bad[] = {
      {"stages: { attn: { call: 1 us } }\n", "attn"},
      {"stages: { ffn: { speed: 1 us } }\n", "speed"},
      {"stages: { ffn: { call: -1 us } }\n", "stages.ffn.call"},
      {"stages: { ffn: { call: 3 apples } }\n", "stages.ffn.call"},
      {"stages: { ffn: { efficiency: 0 } }\n",
       "stages.ffn.efficiency: must be more than zero (it multiplies the class's efficiencies)"},
      {"stages: { ffn: { efficiency: 9 } }\n", "stages.ffn.efficiency"},
      {"stages: { ffn: { by_tokens: 3 us } }\n",
       "stages.ffn.by_tokens: expected a mapping of tokens per call to a time"},
      {"stages: { ffn: { by_tokens: { 8: 3 us, 4: 2 us } } }\n",
       "stages.ffn.by_tokens: 4 tokens does not follow 8; list points by increasing tokens"},
      {"stages: { ffn: { by_tokens: { 0: 3 us } } }\n", "stages.ffn.by_tokens key"},
      {"stages: { ffn: { by_tokens: { 1: -3 us } } }\n", "stages.ffn.by_tokens.1"},
      {"stages: { ffn: { by_tokens: { 1: 3 parsecs } } }\n", "stages.ffn.by_tokens.1"},
      {"stages: { ffn: { by_tokens: {} } }\n", "stages.ffn.by_tokens: expected 1 to 8 points"},
      {"stages: { ffn: { by_tokens: { 1: 1 us, 2: 1 us, 3: 1 us, 4: 1 us, 5: 1 us, 6: 1 us, "
       "7: 1 us, 8: 1 us, 9: 1 us } } }\n",
       "stages.ffn.by_tokens: expected 1 to 8 points, got 9"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    refuses_calibrated(t, bad[i].stages, bad[i].error);
}
