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

