// A plan on this machine's devices: `run_on:` in fleet files and its
// positioned errors; rg_cluster_layout_from_plan binding each mode to the
// devices present (faked, so the tests do not depend on what this machine
// has) and refusing what it cannot run; `ridge run --plan` giving the
// tokens of the single-process run; and `ridge` with no arguments planning
// the test model on local-hetero and running the plan across its workers.
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "graphs/weights.h"
#include "ops/convert.h"
#include "planner/planner.h"
#include "runtime/cluster.h"
#include "tests/test.h"

// ----- run_on in fleet files ----------------------------------------------------------

// A one-node fleet "f" whose h100-sxm entry says `run_on: <value>` (line 10,
// the value at column 17), or none when value is NULL.
static const char *fleet_with(rg_test_ctx_t *t, const char *value) {
  char text[1024];
  snprintf(text, sizeof text,
           "name: f\n"
           "provider: \"shm\"\n"
           "network: { bandwidth: 50 GB/s, latency: 1 us }\n"
           "nodes:\n"
           "  - name: local\n"
           "    count: 1\n"
           "    devices:\n"
           "      - class: h100-sxm\n"
           "        count: 1\n"
           "%s%s%s"
           "      - { class: bertha-500, count: 1 }\n",
           value ? "        run_on: " : "", value ? value : "", value ? "\n" : "");
  return rg_test_write(t, "f.yaml", text);
}

static rg_status_t load_fleet(rg_test_ctx_t *t, const rg_catalog_t *cat, const char *value,
                              rg_fleet_t **out) {
  return rg_fleet_load(fleet_with(t, value), rg_test_config_dir(), cat, out);
}

RG_TEST(runplan_run_on_reads_a_name_or_a_list_tried_in_order) {
  rg_catalog_t *cat;
  RG_REQUIRE_OK(rg_catalog_load(rg_test_config_dir(), &cat));
  rg_fleet_t *f = NULL;
  RG_CHECK_OK(load_fleet(t, cat, "[opencl:1, cpu, level_zero:0]", &f));
  if (f) {
    const rg_node_devices_t *d = &f->nodes[0].devs[0];
    RG_CHECK(d->n_run_on == 3);
    // A bare driver means its device 0, stored so names compare as strings.
    RG_CHECK(!strcmp(d->run_on[0], "opencl:1") && !strcmp(d->run_on[1], "cpu:0") &&
             !strcmp(d->run_on[2], "level_zero:0"));
    RG_CHECK_CONTAINS(d->run_on_where, "f.yaml:10:17");
    // The entry without run_on has none.
    RG_CHECK(f->nodes[0].devs[1].n_run_on == 0 && !f->nodes[0].devs[1].run_on_where[0]);
  }
  rg_fleet_destroy(f);
  f = NULL;
  RG_CHECK_OK(load_fleet(t, cat, "cpu:0", &f));
  if (f)
    RG_CHECK(f->nodes[0].devs[0].n_run_on == 1 && !strcmp(f->nodes[0].devs[0].run_on[0], "cpu:0"));
  rg_fleet_destroy(f);
  rg_catalog_destroy(cat);
}

RG_TEST(runplan_run_on_bad_values_say_where_and_what_is_expected) {
  rg_catalog_t *cat;
  RG_REQUIRE_OK(rg_catalog_load(rg_test_config_dir(), &cat));
  const char *path = fleet_with(t, NULL);
  char want[512];
  static const struct {
    const char *value;
    int col;
    const char *message;
  } cases[] = {
      {"cpu0", 17,
       "nodes[0].devices[0].run_on: 'cpu0' is not a device name; expected DRIVER:INDEX as `ridge "
       "devices` lists them, like cpu:0 or opencl:0"},
      {"\"CPU:0\"", 17, "run_on: 'CPU:0' is not a device name"},
      {"cpu:x", 17, "run_on: 'cpu:x' is not a device name"},
      {"cpu:1024", 17, "run_on: 'cpu:1024' is not a device name"},
      {"\":0\"", 17, "run_on: ':0' is not a device name"},
      {"[]", 17, "run_on: the list is empty; name at least one device, like cpu:0"},
      {"[cpu:0, cpu]", 25,
       "run_on[1]: cpu:0 is already nodes[0].devices[0].run_on[0]; each "
       "device is tried once"},
      {"[cpu:0, cpu:1, cpu:2, cpu:3, cpu:4]", 46, "run_on: at most 4 devices to try, got 5"},
      {"{ cpu: 0 }", 17,
       "run_on: expected a device name like cpu:0, or a list of them tried in order like "
       "[opencl:0, cpu:0]; got a mapping"},
      {"[[cpu:0]]", 18, "run_on[0]: expected a device name like cpu:0; got a list"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rg_fleet_t *f = NULL;
    snprintf(want, sizeof want, "%s:10:%d: ", path, cases[i].col);
    rg_status_t st = load_fleet(t, cat, cases[i].value, &f);
    if (!st) rg_test_fail(t, __FILE__, __LINE__, "run_on: %s was accepted", cases[i].value);
    rg_fleet_destroy(f);
    if (!st) continue;
    const char *m = rg_status_message(st);
    if (strncmp(m, want, strlen(want)) || !strstr(m, cases[i].message))
      rg_test_fail(t, __FILE__, __LINE__, "run_on: %s: got '%s', expected '%s%s'", cases[i].value,
                   m, want, cases[i].message);
    rg_status_free(st);
  }
  // A misspelt key is caught with the rest of the entry's keys.
  const char *bad =
      "name: f\nprovider: \"shm\"\nnetwork: { bandwidth: 50 GB/s, latency: 1 us }\nnodes:\n"
      "  - { name: local, count: 1, devices: [ { class: h100-sxm, count: 1, runon: cpu:0 } ] }\n";
  rg_fleet_t *f = NULL;
  RG_CHECK_ERR(rg_fleet_load(rg_test_write(t, "f.yaml", bad), rg_test_config_dir(), cat, &f),
               "run_on");
  rg_catalog_destroy(cat);
}

// The planner never reads run_on: the same fleet with and without it plans
// the same.
RG_TEST(runplan_plan_ignores_run_on) {
  rg_catalog_t *cat;
  RG_REQUIRE_OK(rg_catalog_load(rg_test_config_dir(), &cat));
  rg_arch_t *a = NULL;
  RG_REQUIRE_OK(rg_model_load("llama-3.1-8b", rg_test_config_dir(), &a));
  rg_workload_t w;
  rg_workload_default(&w);
  rg_plan_t *plan[2] = {calloc(1, sizeof(rg_plan_t)), calloc(1, sizeof(rg_plan_t))};
  RG_REQUIRE(plan[0] && plan[1]);
  const char *values[2] = {NULL, "[opencl:0, cpu:0]"};
  for (int k = 0; k < 2; k++) {
    rg_fleet_t *f = NULL;
    RG_CHECK_OK(load_fleet(t, cat, values[k], &f));
    if (!f) continue;
    rg_plan_request_t req = {0};
    req.model = a, req.fleet = f, req.workload = &w;
    req.weight_dtype = a->weight_dtype, req.kv_dtype = RG_BF16;
    RG_CHECK_OK(rg_plan_solve(&req, plan[k]));
    rg_fleet_destroy(f);
  }
  RG_CHECK(plan[0]->chosen.n_pools >= 1 && plan[0]->chosen.tokens_per_s > 0);
  RG_CHECK(plan[0]->chosen.n_pools == plan[1]->chosen.n_pools);
  RG_CHECK(plan[0]->chosen.tokens_per_s == plan[1]->chosen.tokens_per_s);
  RG_CHECK(plan[0]->chosen.pools[0].mode == plan[1]->chosen.pools[0].mode);
  free(plan[0]);
  free(plan[1]);
  rg_arch_destroy(a);
  rg_catalog_destroy(cat);
}

// ----- Binding a pool to the devices here -------------------------------------------------

static const char k_fleet[] =
    "name: hetero\n"
    "provider: \"shm\"\n"
    "network: { bandwidth: 50 GB/s, latency: 1 us }\n"
    "nodes:\n"
    "  - name: local\n"
    "    count: 1\n"
    "    devices:\n"
    "      - { class: h100-sxm, count: 2, run_on: cpu:0 }\n"
    "      - { class: bertha-500, count: 1, run_on: [cuda:0, opencl:0, cpu:0] }\n"
    "      - { class: groq-lpu, count: 1 }\n"
    "      - { class: l40s, count: 1, run_on: [cuda:0, cpu:3, xpu:0] }\n"
    "      - { class: local-cpu, count: 1, run_on: cpu }\n"
    "      - { class: host-dram, count: 1, run_on: cpu:0 }\n";

typedef struct {
  rg_catalog_t *cat;
  rg_fleet_t *fleet;
  rg_arch_t *arch;
  rg_device_info_t devs[3];
  rg_cluster_plan_options_t o;
  rg_placement_t pool;
  rg_cluster_plan_binding_t b;
  rg_cluster_hop_t *hops;
} fx_t;

// The fleet above, a model from configs/models, and a machine with cpu:0
// (cpu_memory bytes), opencl:0 and no CUDA driver.
static fx_t *fx_new(rg_test_ctx_t *t, const char *model, uint64_t cpu_memory) {
  fx_t *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->hops = calloc(RG_CLUSTER_MAX_HOPS, sizeof *f->hops);
  rg_status_t st = rg_catalog_load(rg_test_config_dir(), &f->cat);
  if (!st)
    st = rg_fleet_load(rg_test_write(t, "hetero.yaml", k_fleet), rg_test_config_dir(), f->cat,
                       &f->fleet);
  if (!st) st = rg_model_load(model, rg_test_config_dir(), &f->arch);
  if (st) {
    rg_test_fail(t, __FILE__, __LINE__, "fixture: %s", rg_status_message(st));
    rg_status_free(st);
  }
  rg_device_info_t *d = f->devs;
  snprintf(d[0].driver, sizeof d[0].driver, "cpu");
  d[0].present = 1;
  d[0].memory = cpu_memory;
  snprintf(d[0].class_hint, sizeof d[0].class_hint, "local-cpu");
  snprintf(d[1].driver, sizeof d[1].driver, "opencl");
  d[1].present = 1;
  d[1].memory = 8ull << 30;
  snprintf(d[2].driver, sizeof d[2].driver, "cuda");
  d[2].index = -1;
  snprintf(d[2].reason, sizeof d[2].reason, "libcuda.so.1 not found");
  f->o = (rg_cluster_plan_options_t){.arch = f->arch,
                                     .fleet = f->fleet,
                                     .pool = &f->pool,
                                     .devices = f->devs,
                                     .n_devices = 3,
                                     .kv_dtype = RG_F32,
                                     .kv_tokens = 1024};
  return f;
}

static void fx_free(fx_t *f) {
  if (!f) return;
  free(f->hops);
  rg_arch_destroy(f->arch);
  rg_fleet_destroy(f->fleet);
  rg_catalog_destroy(f->cat);
  free(f);
}

// Reads one pool (YAML) into f->pool and binds it.
static rg_status_t bind_pool(rg_test_ctx_t *t, fx_t *f, const char *pool_yaml) {
  rg_plan_request_t *req = calloc(1, sizeof *req);
  if (!req) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  req->fleet = f->fleet;
  req->model = f->arch;
  req->weight_dtype = f->arch->weight_dtype;
  req->kv_dtype = RG_BF16;
  rg_placement_meta_t meta = {0};
  rg_status_t st = rg_placement_load(rg_test_write(t, "pool.yaml", pool_yaml), f->cat, req, &meta);
  if (!st) f->pool = req->fixed[0];
  free(req);
  return st ? st : rg_cluster_layout_from_plan(&f->o, &f->b);
}

static int has_stage(const rg_cluster_worker_t *w, rg_stage_kind_t k) {
  for (int s = 0; s < w->n_stages; s++)
    if (w->stages[s].kind == k) return 1;
  return 0;
}

// The hops of the role cover the model exactly once (the layout's own check).
static int covers_model(fx_t *f, rg_cluster_role_t role) {
  size_t n = 0;
  rg_status_t st =
      rg_cluster_layout_hops(f->arch, &f->b.layout, role, f->hops, RG_CLUSTER_MAX_HOPS, &n);
  rg_status_free(st);
  return !st && n == (size_t)(2 * f->arch->n_layers + 2);
}

#define AF_POOL(extra, stages)                            \
  "pools:\n  - mode: attention-ffn\n    batch: 8\n" extra \
  "    groups:\n"                                         \
  "      - {name: attn, class: h100-sxm, devices: 1}\n"   \
  "      - {name: ffn, class: bertha-500, devices: 1}\n"  \
  "    stages: " stages "\n"

RG_TEST(runplan_binds_colocated_attention_ffn_and_prefill_decode) {
  fx_t *f = fx_new(t, "llama-3.1-8b", 16ull << 30);
  RG_REQUIRE(f && f->arch);
  const rg_cluster_layout_t *l = &f->b.layout;

  // Colocated: one worker, every stage, the plan's micro-batches.
  RG_CHECK_OK(bind_pool(t, f,
                        "pools:\n  - mode: colocated\n    micro_batches: 2\n    batch: 8\n"
                        "    groups: [ {name: main, class: h100-sxm, devices: 1} ]\n"));
  RG_CHECK(l->n_workers == 1 && l->micro_batches == 2);
  RG_CHECK(!strcmp(l->workers[0].device, "cpu:0") && !strcmp(l->workers[0].plays, "h100-sxm"));
  RG_CHECK(covers_model(f, RG_CLUSTER_ROLE_ALL));
  RG_CHECK(f->b.n_groups == 1 && !strcmp(f->b.groups[0].cls, "h100-sxm") &&
           !f->b.groups[0].passed[0]);

  // Attention-FFN: the ffn class skips the absent CUDA driver for opencl:0,
  // saying why; ping-pong as the plan says.
  RG_CHECK_OK(bind_pool(t, f,
                        AF_POOL("    micro_batches: 2\n",
                                "{embed: attn, attention: attn, ffn: ffn, lm_head: attn}")));
  RG_CHECK(l->n_workers == 2 && l->micro_batches == 2 && !rg_cluster_layout_is_pd(l));
  RG_CHECK(!strcmp(l->workers[0].device, "cpu:0") && !strcmp(l->workers[0].plays, "h100-sxm"));
  RG_CHECK(!strcmp(l->workers[1].device, "opencl:0") && !strcmp(l->workers[1].plays, "bertha-500"));
  RG_CHECK(has_stage(&l->workers[0], RG_STAGE_ATTENTION) &&
           has_stage(&l->workers[0], RG_STAGE_EMBED) &&
           has_stage(&l->workers[0], RG_STAGE_LM_HEAD) && !has_stage(&l->workers[0], RG_STAGE_FFN));
  RG_CHECK(has_stage(&l->workers[1], RG_STAGE_FFN) && l->workers[1].n_stages == 1);
  RG_CHECK(covers_model(f, RG_CLUSTER_ROLE_ALL));
  RG_CHECK(f->b.groups[1].worker == 1);
  RG_CHECK_CONTAINS(f->b.groups[1].passed,
                    "cuda:0: the cuda driver is not present: libcuda.so.1 "
                    "not found");
  RG_CHECK_CONTAINS(f->b.groups[1].run_on_where, "hetero.yaml:9:");

  // lm_head where the plan puts it: with the FFN.
  RG_CHECK_OK(
      bind_pool(t, f, AF_POOL("", "{embed: attn, attention: attn, ffn: ffn, lm_head: ffn}")));
  RG_CHECK(l->micro_batches == 1);
  RG_CHECK(!has_stage(&l->workers[0], RG_STAGE_LM_HEAD) &&
           has_stage(&l->workers[1], RG_STAGE_LM_HEAD));
  RG_CHECK(covers_model(f, RG_CLUSTER_ROLE_ALL));

  // Prefill-decode: the prefill group's worker first, each with its role,
  // each pipeline covering the model.
  RG_CHECK_OK(bind_pool(t, f,
                        "pools:\n  - mode: prefill-decode\n    batch: 8\n    groups:\n"
                        "      - {name: decode, class: h100-sxm, devices: 1}\n"
                        "      - {name: prefill, class: bertha-500, devices: 1}\n"
                        "    stages: {embed: decode, attention: decode, ffn: decode, lm_head: "
                        "decode, prefill: prefill}\n"));
  RG_CHECK(l->n_workers == 2 && rg_cluster_layout_is_pd(l));
  RG_CHECK(l->workers[0].role == RG_CLUSTER_ROLE_PREFILL &&
           !strcmp(l->workers[0].plays, "bertha-500") && !strcmp(l->workers[0].device, "opencl:0"));
  RG_CHECK(l->workers[1].role == RG_CLUSTER_ROLE_DECODE &&
           !strcmp(l->workers[1].plays, "h100-sxm") && !strcmp(l->workers[1].device, "cpu:0"));
  RG_CHECK(covers_model(f, RG_CLUSTER_ROLE_PREFILL) && covers_model(f, RG_CLUSTER_ROLE_DECODE));

  // A class the device is itself stands in for nothing.
  RG_CHECK_OK(bind_pool(t, f,
                        "pools:\n  - mode: colocated\n    batch: 8\n"
                        "    groups: [ {name: main, class: local-cpu, devices: 1} ]\n"));
  RG_CHECK(!strcmp(l->workers[0].device, "cpu:0") && l->workers[0].plays[0] == 0);
  fx_free(f);
}

RG_TEST(runplan_moe_experts_all_on_the_ffn_worker) {
  fx_t *f = fx_new(t, "mixtral-8x7b", 16ull << 30);
  RG_REQUIRE(f && f->arch && f->arch->n_experts == 8);
  RG_CHECK_OK(
      bind_pool(t, f, AF_POOL("", "{embed: attn, attention: attn, ffn: ffn, lm_head: attn}")));
  const rg_cluster_worker_t *w = &f->b.layout.workers[1];
  RG_CHECK(w->n_stages == 1 && w->stages[0].kind == RG_STAGE_MOE && w->stages[0].experts == NULL);
  RG_CHECK(!has_stage(&f->b.layout.workers[0], RG_STAGE_MOE));
  RG_CHECK(covers_model(f, RG_CLUSTER_ROLE_ALL));
  fx_free(f);
}

#define TIER_POOL                                                              \
  "pools:\n  - mode: attention-ffn\n    batch: 8\n    kv_offload: host-dram\n" \
  "    groups:\n"                                                              \
  "      - {name: attn, class: h100-sxm, devices: 1}\n"                        \
  "      - {name: ffn, class: bertha-500, devices: 1}\n"                       \
  "    stages: {embed: attn, attention: attn, ffn: ffn, lm_head: attn}\n"

// The tier holds what fits in its share of the device's memory, and no
// more than a few of the attention pool's worth.
RG_TEST(runplan_kv_tier_on_the_offload_class_device_sized_to_fit) {
  const uint64_t mem[2] = {16ull << 30, 64ull << 20};
  for (int k = 0; k < 2; k++) {
    fx_t *f = fx_new(t, "llama-3.1-8b", mem[k]);
    RG_REQUIRE(f && f->arch);
    RG_CHECK_OK(bind_pool(t, f, TIER_POOL));
    const rg_cluster_layout_t *l = &f->b.layout;
    RG_REQUIRE(l->n_workers == 3);
    const rg_cluster_worker_t *w = &l->workers[2];
    RG_CHECK(w->role == RG_CLUSTER_ROLE_TIER && w->n_stages == 0);
    RG_CHECK(!strcmp(w->device, "cpu:0") && !strcmp(w->plays, "host-dram"));
    double per_token = rg_arch_kv_bytes_per_token(f->arch, RG_F32);
    double fits = RG_CLUSTER_TIER_MEMORY_SHARE * (double)mem[k] / per_token;
    double pools = RG_CLUSTER_TIER_POOLS * (double)f->o.kv_tokens;
    RG_CHECK(fits != pools);  // one bound binds in each case
    int64_t want = (int64_t)(fits < pools ? fits : pools);
    RG_CHECK(w->tier_tokens == want && f->b.tier_tokens == want);
    RG_CHECK(k == 0 ? want == (int64_t)pools : want < (int64_t)pools);
    RG_CHECK(f->b.n_groups == 3 && f->b.groups[2].worker == 2 &&
             !strcmp(f->b.groups[2].cls, "host-dram"));
    RG_CHECK(covers_model(f, RG_CLUSTER_ROLE_ALL));
    fx_free(f);
  }
}

RG_TEST(runplan_binding_errors_name_the_class_and_what_was_tried) {
  fx_t *f = fx_new(t, "llama-3.1-8b", 16ull << 30);
  RG_REQUIRE(f && f->arch);
  RG_CHECK_ERR(bind_pool(t, f,
                         "pools:\n  - mode: colocated\n    batch: 8\n"
                         "    groups: [ {name: main, class: groq-lpu, devices: 1} ]\n"),
               "pool 1 group 'main' runs on groq-lpu, and fleet 'hetero' (");
  RG_CHECK_ERR(bind_pool(t, f,
                         "pools:\n  - mode: colocated\n    batch: 8\n"
                         "    groups: [ {name: main, class: groq-lpu, devices: 1} ]\n"),
               "gives groq-lpu no run_on: add `run_on: cpu:0`");
  // None present: each device tried, with why it is not here.
  rg_status_t st = bind_pool(t, f,
                             "pools:\n  - mode: colocated\n    batch: 8\n"
                             "    groups: [ {name: main, class: l40s, devices: 1} ]\n");
  RG_CHECK(st && rg_status_code(st) == RG_UNAVAILABLE);
  if (st) {
    const char *m = rg_status_message(st);
    RG_CHECK_CONTAINS(m,
                      "pool 1 group 'main' runs on l40s, and none of the devices its run_on "
                      "names (");
    RG_CHECK_CONTAINS(m, "hetero.yaml:11:");
    RG_CHECK_CONTAINS(m,
                      ") is present here: cuda:0: the cuda driver is not present: libcuda.so.1 "
                      "not found; cpu:3: cpu has 1 device here (cpu:0); xpu:0: no driver is "
                      "named 'xpu'");
  }
  rg_status_free(st);
  // Wider than one device per group, or several replicas.
  RG_CHECK_ERR(bind_pool(t, f,
                         "pools:\n  - mode: attention-ffn\n    batch: 8\n    replicas: 3\n"
                         "    groups:\n"
                         "      - {name: attn, class: h100-sxm, devices: 2, tp: 2}\n"
                         "      - {name: ffn, class: bertha-500, devices: 1}\n"
                         "    stages: {embed: attn, attention: attn, ffn: ffn, lm_head: attn}\n"),
               "pool 1: group 'attn' is 2 x h100-sxm (tp 2, pp 1, dp 1), and the pool has 3 "
               "replicas; ridge run --plan runs one device per group and one replica here, so "
               "the plan's tokens/s, TTFT and TBT, its batch per device and each device's share "
               "of the weights and KV would not be what runs");
  RG_CHECK_ERR(bind_pool(t, f,
                         "pools:\n  - mode: colocated\n    batch: 8\n    replicas: 2\n"
                         "    groups: [ {name: main, class: h100-sxm, devices: 1} ]\n"),
               "pool 1: the pool has 2 replicas; ridge run --plan runs one device per group");
  // Stage maps the layouts do not express.
  RG_CHECK_ERR(
      bind_pool(t, f,
                "pools:\n  - mode: prefill-decode\n    batch: 8\n    groups:\n"
                "      - {name: decode, class: h100-sxm, devices: 1}\n"
                "      - {name: prefill, class: bertha-500, devices: 1}\n"
                "      - {name: ffn, class: local-cpu, devices: 1}\n"
                "    stages: {embed: decode, attention: decode, ffn: ffn, lm_head: decode, "
                "prefill: prefill}\n"),
      "pool 1 is prefill-decode but puts ffn on group 'ffn' and attention on 'decode'; "
      "the layouts ridge runs keep every stage but prefill on the decode group");
  RG_CHECK_ERR(bind_pool(t, f,
                         "pools:\n  - mode: attention-ffn\n    batch: 8\n    groups:\n"
                         "      - {name: attn, class: h100-sxm, devices: 1}\n"
                         "      - {name: ffn, class: bertha-500, devices: 1}\n"
                         "      - {name: head, class: local-cpu, devices: 1}\n"
                         "    stages: {embed: attn, attention: attn, ffn: ffn, lm_head: head}\n"),
               "keep embed and lm_head with attention or with the ffn");
  // The tier's class needs a device too.
  rg_fleet_t *bare = NULL;
  RG_REQUIRE_OK(rg_fleet_load(rg_test_write(t, "hetero.yaml",
                                            "name: hetero\nprovider: \"shm\"\n"
                                            "network: { bandwidth: 50 GB/s, latency: 1 us }\n"
                                            "nodes:\n  - name: local\n    count: 1\n"
                                            "    devices:\n"
                                            "      - { class: h100-sxm, count: 1, run_on: cpu }\n"
                                            "      - { class: bertha-500, count: 1, run_on: cpu }\n"
                                            "      - { class: host-dram, count: 1 }\n"),
                              rg_test_config_dir(), f->cat, &bare));
  rg_fleet_destroy(f->fleet);
  f->fleet = bare;
  f->o.fleet = bare;
  RG_CHECK_ERR(bind_pool(t, f, TIER_POOL),
               "pool 1's KV tier runs on host-dram, and fleet 'hetero' (");
  fx_free(f);
}

RG_TEST(runplan_plan_file_errors) {
  const char *dir = rg_test_tmpdir(t);
  char text[2048], path[1024];
  rg_cluster_plan_t *p = NULL;
  snprintf(path, sizeof path, "%s/nofleet.yaml", dir);
  rg_test_write(t, "nofleet.yaml", AF_POOL("", "{embed: attn, attention: attn, ffn: ffn}"));
  RG_CHECK_ERR(rg_cluster_plan_load(path, rg_test_config_dir(), dir, &p),
               "nofleet.yaml names no fleet: add `fleet: NAME`");
  RG_CHECK(p == NULL);
  // Constraints only: nothing to run.
  rg_test_write(t, "pins.yaml",
                "model: llama-3.1-8b\nfleet: local-hetero\npin: {ffn: bertha-500}\n");
  snprintf(path, sizeof path, "%s/pins.yaml", dir);
  RG_CHECK_ERR(rg_cluster_plan_load(path, rg_test_config_dir(), dir, &p),
               "pins.yaml holds no pools, only constraints for the search (pin:, forbid:)");
  // A plan for other weights.
  snprintf(text, sizeof text, "model: %s\nfleet: local-hetero\n%s", rg_test_config_dir(),
           AF_POOL("", "{embed: attn, attention: attn, ffn: ffn}"));
  rg_test_write(t, "other.yaml", text);
  snprintf(path, sizeof path, "%s/other.yaml", dir);
  RG_CHECK_ERR(rg_cluster_plan_load(path, rg_test_config_dir(), dir, &p),
               "other.yaml:1:8: the plan is for the model in ");
  // A plan made for a model config is read, with a note that its
  // predictions are for that model.
  snprintf(text, sizeof text, "model: llama-3.1-8b\nfleet: local-hetero\n%s",
           AF_POOL("", "{embed: attn, attention: attn, ffn: ffn}"));
  rg_test_write(t, "named.yaml", text);
  snprintf(path, sizeof path, "%s/named.yaml", dir);
  RG_CHECK_OK(rg_cluster_plan_load(path, rg_test_config_dir(), dir, &p));
  if (p) {
    RG_CHECK(p->plan->chosen.n_pools == 1 && p->plan->chosen.pred[0].tokens_per_s > 0);
    RG_CHECK_CONTAINS(p->model_note, "the plan is for llama-3.1-8b (");
  }
  rg_cluster_plan_destroy(p);
}

// ----- End to end -----------------------------------------------------------------------

static const char *test_model(rg_test_ctx_t *t) {
  return rg_test_tiny_model(t, RG_TESTMODEL_LLAMA, "tiny", 11);
}

// A hand-written attention-FFN placement for the test model, on a fleet
// whose classes both run on cpu:0: the same tokens as the single-process
// run (greedy, f32 KV, the AVX-512 kernels), each stage labelled with the
// class its worker stands in for.
RG_TEST(runplan_ridge_run_plan_gives_the_single_process_tokens) {
  if (rg_cpu_isa_best() < RG_CPU_ISA_AVX512) RG_SKIP("needs AVX-512 for the bit-exact kernels");
  const char *model = test_model(t);
  RG_REQUIRE(model);
  const char *dir = rg_test_tmpdir(t);
  rg_test_write(t, "ef.yaml",
                "name: ef\nprovider: \"shm\"\nnetwork: { bandwidth: 50 GB/s, latency: 1 us }\n"
                "nodes:\n  - name: local\n    count: 1\n    devices:\n"
                "      - { class: h100-sxm, count: 1, run_on: cpu:0 }\n"
                "      - { class: bertha-500, count: 1, run_on: cpu:0 }\n");
  char text[2048];
  snprintf(
      text, sizeof text, "model: %s\nfleet: %s/ef.yaml\n%s", model, dir,
      AF_POOL("    micro_batches: 2\n", "{embed: attn, attention: attn, ffn: ffn, lm_head: attn}"));
  rg_test_write(t, "af.yaml", text);
  char *out[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "--quiet run --model %s --prompt-ids 4,8,15,16,23,42 -n 6 --temperature 0 "
             "--threads 1 --isa avx512 --kv-dtype f32 --no-measure --json %s",
             model, k ? "--plan af.yaml" : "");
    RG_CHECK(rg_test_run_ridge(t, cmd, &out[k]) == 0);
  }
  cJSON *j0 = cJSON_Parse(out[0]), *j1 = cJSON_Parse(out[1]);
  if (!j1) rg_test_fail(t, __FILE__, __LINE__, "ridge run --plan: %s", out[1]);
  RG_REQUIRE(j0 && j1);
  char *t0 = cJSON_PrintUnformatted(cJSON_GetObjectItem(j0, "tokens"));
  char *t1 = cJSON_PrintUnformatted(cJSON_GetObjectItem(j1, "tokens"));
  RG_CHECK(t0 && t1 && !strcmp(t0, t1) &&
           cJSON_GetArraySize(cJSON_GetObjectItem(j1, "tokens")) == 6);
  const cJSON *layout = cJSON_GetObjectItem(j1, "layout");
  RG_CHECK(cJSON_IsString(layout) && !strcmp(layout->valuestring, "attention-ffn"));
  const cJSON *pp = cJSON_GetObjectItem(j1, "plan_predicted");
  RG_CHECK(cJSON_GetObjectItem(pp, "tokens_per_s") &&
           cJSON_GetObjectItem(pp, "tokens_per_s")->valuedouble > 0);
  char *stages = cJSON_PrintUnformatted(cJSON_GetObjectItem(j1, "stages"));
  RG_CHECK_CONTAINS(stages, "attention[0,2) on cpu:0 [w0-attention, standing in for h100-sxm]");
  RG_CHECK_CONTAINS(stages, "ffn[0,2) on cpu:0 [w1-ffn, standing in for bertha-500]");
  free(stages);
  free(t0);
  free(t1);
  cJSON_Delete(j0);
  cJSON_Delete(j1);
  free(out[0]);
  free(out[1]);

  // Refused before anything starts.
  static const struct {
    const char *args, *message;
  } bad[] = {
      {"--plan af.yaml --pool 2", "--pool 2: af.yaml has 1 pool"},
      {"--plan af.yaml --layout colocated", "give --layout or --plan, not both"},
      {"--plan af.yaml --workers cpu:0", "--plan gives the devices and micro-batches"},
      {"--plan af.yaml --micro-batches 2", "--plan gives the devices and micro-batches"},
      {"--pool 2", "--pool goes with --plan"},
      {"--plan missing.yaml", "missing.yaml"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char cmd[4096], *o = NULL;
    snprintf(cmd, sizeof cmd, "run --model %s -n 2 %s", model, bad[i].args);
    int rc = rg_test_run_ridge(t, cmd, &o);
    RG_CHECK(rc == 2 || rc == 1);
    RG_CHECK_CONTAINS(o, bad[i].message);
    free(o);
  }
}

// `ridge` alone: the test model planned on local-hetero, the plan printed,
// then run across its workers, each labelled with the class it stands in
// for, the hidden states moving between them.
RG_TEST(runplan_no_arguments_plans_and_runs_across_workers) {
  char *out = NULL;
  int rc = rg_test_run_ridge(t, "", &out);
  RG_CHECK(rc == 0);
  RG_CHECK_CONTAINS(out, "no command given, so running the default job: `ridge plan --model ");
  RG_CHECK_CONTAINS(out, "--fleet local-hetero --placement ");
  RG_CHECK_CONTAINS(out, "Plan (chosen)");
  RG_CHECK_CONTAINS(out, "attention-ffn: attn 1 x h100-sxm | ffn 1 x bertha-500");
  RG_CHECK_CONTAINS(out, "w0-attention on cpu:0 standing in for h100-sxm");
  RG_CHECK_CONTAINS(out, "standing in for bertha-500");
  RG_CHECK_CONTAINS(out, "w2-tier on cpu:0 standing in for host-dram");
  RG_CHECK_CONTAINS(out, "the plan predicts, for its classes: ");
  RG_CHECK_CONTAINS(out, "48 new tokens");
  RG_CHECK_CONTAINS(out, "[w1-ffn, standing in for bertha-500]");
  RG_CHECK_CONTAINS(out, "w0-attention -> w1-ffn");
  RG_CHECK_CONTAINS(out, "w1-ffn -> w0-attention");
  free(out);
}
