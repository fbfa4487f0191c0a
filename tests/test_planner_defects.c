// Regression tests for the defects found by using `ridge plan` as a new user
// would (issue 9): each was once accepted silently or answered with a
// message that named the wrong thing. Every test checks the message a user
// now sees.
#include <stdlib.h>

#include "graphs/graphs.h"
#include "planner/planner.h"
#include "tests/test.h"

static void run(rg_test_ctx_t *t, const char *args, int want_rc, const char *needle) {
  char *out = NULL;
  int rc = rg_test_run_ridge(t, args, &out);
  if (rc != want_rc)
    rg_test_fail(t, __FILE__, __LINE__, "ridge %s: exit %d, expected %d:\n%s", args, rc, want_rc,
                 out);
  if (needle && !strstr(out, needle))
    rg_test_fail(t, __FILE__, __LINE__, "ridge %s: output lacks '%s':\n%s", args, needle, out);
  free(out);
}

// gpt-oss-120b's card gives 5.13 B active; counting the embedding table a
// token reads one row of made it 5.71 B.
RG_TEST(planner_defect_gpt_oss_active_params) {
  rg_arch_t *a = NULL;
  RG_REQUIRE_OK(rg_model_load("gpt-oss-120b", rg_test_config_dir(), &a));
  RG_CHECK_NEAR(rg_arch_active_params(a), 5.13e9, 0.01);
  rg_arch_destroy(a);
  RG_REQUIRE_OK(rg_model_load("deepseek-v3", rg_test_config_dir(), &a));
  RG_CHECK_NEAR(rg_arch_active_params(a), 37e9, 0.02);  // "37B activated"
  rg_arch_destroy(a);
  run(t, "model gpt-oss-120b", 0, "5.13 B active per token");
}

// A placement file naming kv_dtype but not weight_dtype planned f32 weights.
RG_TEST(planner_defect_kv_dtype_alone_keeps_weight_dtype) {
  rg_test_write(t, "kv.yaml", "model: llama-3.1-70b\nfleet: gpu-only\nkv_dtype: fp8\n");
  run(t, "plan --placement kv.yaml", 0, "141 GB of bf16 weights");
  rg_test_write(t, "w.yaml", "model: llama-3.1-70b\nfleet: gpu-only\nweight_dtype: fp8\n");
  run(t, "plan --placement w.yaml", 0, "70.6 GB of fp8 weights");
}

// `devices: 3` was taken as TP 3 over 64 heads; `devices: 9` claimed TP 8 x
// PP 2 with one device's memory of a 16-device split.
RG_TEST(planner_defect_group_shapes_fit_the_heads_and_the_devices) {
  const char *pool =
      "pools:\n- mode: colocated\n  groups:\n  - {name: main, class: h100-sxm, devices: %s}\n";
  char text[256];
  snprintf(text, sizeof text, pool, "3");
  rg_test_write(t, "d3.yaml", text);
  run(t, "plan --model llama-3.1-70b --fleet gpu-only --placement d3.yaml", 0,
      "main 3 x h100-sxm (tp 1, pp 3, dp 1)");
  snprintf(text, sizeof text, pool, "3, tp: 3");
  rg_test_write(t, "t3.yaml", text);
  run(t, "plan --model llama-3.1-70b --fleet gpu-only --placement t3.yaml", 2,
      "pool 1: group 'main': tp 3 does not divide llama-3.1-70b's 64 attention heads; tp may be 1, "
      "2, 4, 8, 16, 32, 64");
  // tp beyond the 8 KV heads: each KV head lives on tp / 8 devices, and the
  // plan says so.
  snprintf(text, sizeof text, pool, "16, tp: 16");
  rg_test_write(t, "t16.yaml", text);
  run(t, "plan --model llama-3.1-70b --fleet gpu-only --placement t16.yaml", 0,
      "main 16 x h100-sxm (tp 16, pp 1, dp 1; each KV head on 2 devices)");
  snprintf(text, sizeof text, pool, "9, tp: 8");
  rg_test_write(t, "t9.yaml", text);
  run(t, "plan --model llama-3.1-70b --fleet gpu-only --placement t9.yaml", 2,
      "group 'main': tp x pp x dp must equal devices (9); got tp 8, pp 0, dp 1");

  // Nine devices become nine pipeline stages, and each device holds one
  // stage's share: a ninth of the layers, not an eighth of a 16-way split.
  rg_catalog_t *cat;
  rg_fleet_t *fleet;
  rg_arch_t *a;
  RG_REQUIRE_OK(rg_catalog_load(rg_test_config_dir(), &cat));
  RG_REQUIRE_OK(rg_fleet_load("gpu-only", rg_test_config_dir(), cat, &fleet));
  RG_REQUIRE_OK(rg_model_load("llama-3.1-70b", rg_test_config_dir(), &a));
  rg_group_t g = {.cls = rg_catalog_find(cat, "h100-sxm"), .devices = 9};
  rg_group_shape(fleet, a, &g);
  RG_CHECK(g.tp == 1 && g.pp == 9 && g.dp == 1);
  RG_CHECK_OK(rg_group_check(a, &g));
  rg_workload_t w;
  rg_workload_default(&w);
  rg_plan_request_t *req = calloc(1, sizeof *req);
  RG_REQUIRE(req);
  req->model = a, req->fleet = fleet, req->workload = &w, req->weight_dtype = RG_BF16,
  req->kv_dtype = RG_BF16;
  rg_placement_t p = {
      .mode = RG_MODE_COLOCATED, .n_groups = 1, .replicas = 1, .batch = 1, .micro_batches = 1};
  p.groups[0] = g;
  p.weight_dtype = p.kv_dtype = RG_BF16;
  rg_prediction_t pr;
  RG_CHECK_OK(rg_placement_predict(req, &p, &pr));
  double weights = rg_arch_weight_bytes(a, RG_BF16);
  RG_CHECK(pr.mem_used[0] > weights / 9 && pr.mem_used[0] < weights / 9 * 1.25);
  free(req);
  rg_arch_destroy(a);
  rg_fleet_destroy(fleet);
  rg_catalog_destroy(cat);
}

// `devices: 1000` on a 16-device fleet answered "no batch size fits".
RG_TEST(planner_defect_oversized_pool_names_the_shortfall) {
  rg_test_write(
      t, "p.yaml",
      "pools:\n- mode: colocated\n  groups:\n  - {name: main, class: h100-sxm, devices: 1000}\n");
  run(t, "plan --model llama-3.1-70b --fleet mixed --placement p.yaml", 3,
      "the placement uses 1000 x h100-sxm but fleet 'mixed' has 16 (short by 984)");
}

// A pin that contradicts a forbid, or pins a class the fleet lacks, named
// neither the pin nor the file; pins were ignored beside pools.
RG_TEST(planner_defect_pins_name_themselves_and_their_file) {
  rg_test_write(t, "pf.yaml", "pin: {ffn: bertha-500}\nforbid: [bertha-500]\n");
  run(t, "plan --model llama-3.1-70b --fleet mixed --placement pf.yaml", 2,
      "pin.ffn (pf.yaml:1:12) asks for bertha-500, which forbid (pf.yaml:2:10) excludes");
  rg_test_write(t, "pn.yaml", "pin: {ffn: b200}\n");
  run(t, "plan --model llama-3.1-70b --fleet mixed --placement pn.yaml", 2,
      "pin.ffn (pn.yaml:1:12) asks for b200, which fleet 'mixed' does not have (it has h100-sxm, "
      "groq-lpu, "
      "bertha-500)");
  rg_test_write(t, "pp.yaml",
                "pin: {ffn: bertha-500}\npools:\n- mode: colocated\n  groups:\n"
                "  - {name: main, class: h100-sxm, devices: 8}\n");
  run(t, "plan --model llama-3.1-70b --fleet mixed --placement pp.yaml", 2,
      "pool 1: stage ffn runs on h100-sxm, but pin.ffn (pp.yaml:1:12) asks for bertha-500");
  rg_test_write(t, "fp.yaml",
                "forbid: [h100-sxm]\npools:\n- mode: colocated\n  groups:\n"
                "  - {name: main, class: h100-sxm, devices: 8}\n");
  run(t, "plan --model llama-3.1-70b --fleet mixed --placement fp.yaml", 2,
      "pool 1: group 'main' uses h100-sxm, which forbid (fp.yaml:1:10) excludes");
}

// --model or --fleet silently replaced the plan file's own.
RG_TEST(planner_defect_flags_do_not_silently_override_the_file) {
  rg_test_write(t, "mf.yaml",
                "model: llama-3.1-70b\nfleet: mixed\npools:\n- mode: colocated\n  groups:\n"
                "  - {name: main, class: h100-sxm, devices: 8}\n");
  run(t, "plan --model llama-3.1-8b --placement mf.yaml", 2,
      "--model llama-3.1-8b contradicts the placement file's model: llama-3.1-70b (mf.yaml:1:8); "
      "drop one of them");
  run(t, "plan --fleet gpu-only --placement mf.yaml", 2,
      "--fleet gpu-only contradicts the placement file's fleet: mixed (mf.yaml:2:8); drop one of "
      "them");
  // Naming the same ones is fine.
  run(t, "plan --model llama-3.1-70b --fleet mixed --placement mf.yaml", 0,
      "Plan (your placement)");
}

// 1e300 GB overflowed to "inf EB"; 1e-300 req/s printed a 300-digit
// coverage ratio; a rate of 0 and batch 1 with two micro-batches were
// accepted.
RG_TEST(planner_defect_absurd_figures_are_refused) {
  char path[512];
  snprintf(path, sizeof path, "%s",
           rg_test_write(t, "x.yaml",
                         "name: x\nkind: gpu\npeak: { bf16: 1 PFLOPS }\n"
                         "memory: [ { name: hbm, capacity: 1e300 GB, bandwidth: 1 TB/s } ]\n"
                         "power: 1 W\nprice: $1/h\n"));
  rg_device_class_t *c = NULL;
  RG_CHECK_ERR(
      rg_device_class_load(path, &c),
      "x.yaml:4:34: memory[0].capacity: '1e300 GB' is beyond any device or fleet; at most 1.00 EB");
  free(c);
  const char *wl =
      "name: w\nprompt_tokens: 1024\noutput_tokens: 256\narrival: { rate: %s }\n"
      "slo: { ttft: 2 s, tbt: 50 ms, percentile: 99 }\n";
  char text[512];
  rg_workload_t *w = NULL;
  snprintf(text, sizeof text, wl, "1e-300 req/s");
  snprintf(path, sizeof path, "%s", rg_test_write(t, "w.yaml", text));
  RG_CHECK_ERR(rg_workload_load(path, NULL, &w),
               "w.yaml:4:18: arrival.rate: '1e-300 req/s' is less than one request a day; at least "
               "1.16e-05 req/s");
  snprintf(text, sizeof text, wl, "0 req/s");
  snprintf(path, sizeof path, "%s", rg_test_write(t, "w.yaml", text));
  RG_CHECK_ERR(rg_workload_load(path, NULL, &w),
               "w.yaml:4:18: arrival.rate: 0 is no load; leave 'rate' out to plan for as many "
               "requests as the fleet "
               "serves");
  RG_CHECK(w == NULL);
  // Leaving the rate out is how to say "as many as the fleet serves".
  snprintf(path, sizeof path, "%s",
           rg_test_write(
               t, "w.yaml",
               "name: w\nprompt_tokens: 1024\noutput_tokens: 256\narrival: { process: poisson }\n"
               "slo: { ttft: 2 s, tbt: 50 ms, percentile: 99 }\n"));
  RG_CHECK_OK(rg_workload_load(path, NULL, &w));
  RG_CHECK(w && w->rate == 0);
  rg_workload_destroy(w);
  // The coverage ratio of a tiny (but allowed) rate prints as a bound.
  rg_test_write(
      t, "slow.yaml",
      "name: slow\nprompt_tokens: 1024\noutput_tokens: 256\narrival: { rate: 2e-5 req/s }\n"
      "slo: { ttft: 2 s, tbt: 100 ms, percentile: 99 }\n");
  run(t, "plan --model llama-3.1-8b --fleet gpu-only --workload slow.yaml", 0,
      "the plan covers over 1,000x of it");
  rg_test_write(t, "mb.yaml",
                "pools:\n- mode: colocated\n  batch: 1\n  micro_batches: 2\n  groups:\n"
                "  - {name: main, class: h100-sxm, devices: 8}\n");
  run(t, "plan --model llama-3.1-70b --fleet mixed --placement mb.yaml", 2,
      "mb.yaml:4:18: micro_batches: 2 micro-batches need a batch of at least 2; got batch 1");
}
