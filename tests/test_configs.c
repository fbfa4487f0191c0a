// Tests for planner/config_load.c: the shipped device classes, fleets and
// workloads load with the figures their sources give, and every bad input
// produces the exact message (with file:line:col) a user would see.
#include <stdlib.h>
#include <sys/stat.h>

#include "planner/planner.h"
#include "tests/test.h"

// ----- Helpers ---------------------------------------------------------------

// Checks that s failed with `code` and exactly the message `want`; frees s.
static void check_msg(rg_test_ctx_t *t, int line, rg_status_t s, rg_code_t code, const char *want) {
  if (!s) {
    rg_test_fail(t, __FILE__, line, "succeeded, expected error:\n      %s", want);
    return;
  }
  if (strcmp(rg_status_message(s), want))
    rg_test_fail(t, __FILE__, line, "message differs:\n      got:  %s\n      want: %s",
                 rg_status_message(s), want);
  if (rg_status_code(s) != code)
    rg_test_fail(t, __FILE__, line, "code is '%s', expected '%s'", rg_code_name(rg_status_code(s)),
                 rg_code_name(code));
  rg_status_free(s);
}
#define CHECK_MSG(expr, code, ...)                 \
  do {                                             \
    char want_[2048];                              \
    snprintf(want_, sizeof(want_), __VA_ARGS__);   \
    check_msg(t, __LINE__, (expr), (code), want_); \
  } while (0)

// rg_test_write returns one buffer per test; keep our own copy of the path.
static void write_file(rg_test_ctx_t *t, const char *name, const char *text, char *path,
                       size_t len) {
  snprintf(path, len, "%s", rg_test_write(t, name, text));
}

static void make_dir(rg_test_ctx_t *t, const char *sub) {
  char p[512];
  snprintf(p, sizeof(p), "%s/%s", rg_test_tmpdir(t), sub);
  if (mkdir(p, 0755) != 0) rg_test_fail(t, __FILE__, __LINE__, "mkdir %s failed", p);
}

static const char *const mini_h100 =
    "name: h100-sxm\n"
    "kind: gpu\n"
    "peak: { bf16: 989.5 TFLOPS }\n"
    "memory:\n"
    "  - { name: hbm3, capacity: 80 GB, bandwidth: 3.35 TB/s }\n"
    "power: 700 W\n"
    "price: $2.69/h\n";

static const char *const mini_dram =
    "name: host-dram\n"
    "kind: host-dram\n"
    "memory:\n"
    "  - { name: ddr5, capacity: 2 TiB, bandwidth: 460 GB/s }\n"
    "power: 160 W\n"
    "price: $0.35/h\n";

static const char *const mini_chat =
    "name: chat\n"
    "prompt_tokens: 1024\n"
    "output_tokens: 256\n"
    "arrival: { process: poisson, rate: 20 req/s }\n"
    "slo: { ttft: 2 s, tbt: 50 ms, percentile: 99 }\n";

// A small config folder in the test's tmpdir. Messages that list what
// exists are checked against it, so they stay exact when configs/ grows.
static const char *mini_config(rg_test_ctx_t *t) {
  make_dir(t, "devices");
  make_dir(t, "fleets");
  make_dir(t, "workloads");
  rg_test_write(t, "devices/h100-sxm.yaml", mini_h100);
  rg_test_write(t, "devices/host-dram.yaml", mini_dram);
  rg_test_write(t, "workloads/chat.yaml", mini_chat);
  rg_test_write(t, "workloads/long-context.yaml",
                "name: long-context\n"
                "prompt_tokens: { dist: uniform, min: 32768, max: 131072 }\n"
                "output_tokens: 256\n"
                "arrival: { rate: 1 req/s }\n"
                "slo: { ttft: 30 s, tbt: 100 ms, percentile: 99 }\n");
  return rg_test_tmpdir(t);
}

// A valid device class with line `line` (1-based) of mini_h100 replaced by
// `repl` (NULL: removed), written as <stem>.yaml.
static void bad_class(rg_test_ctx_t *t, const char *stem, int line, const char *repl, char *path,
                      size_t len) {
  char text[1024] = "", name[128];
  const char *p = mini_h100;
  for (int l = 1; *p; l++) {
    const char *nl = strchr(p, '\n');
    size_t n = (size_t)(nl - p) + 1;
    size_t used = strlen(text);
    if (l != line)
      snprintf(text + used, sizeof(text) - used, "%.*s", (int)n, p);
    else if (repl)
      snprintf(text + used, sizeof(text) - used, "%s\n", repl);
    p += n;
  }
  snprintf(name, sizeof(name), "%s.yaml", stem);
  write_file(t, name, text, path, len);
}

static rg_status_t load_class(const char *path) {
  rg_device_class_t *c = NULL;
  rg_status_t s = rg_device_class_load(path, &c);
  free(c);  // NULL on failure; freed here if a bad input was wrongly accepted
  return s;
}

// ----- Shipped data ----------------------------------------------------------

RG_TEST(configs_device_classes_all_load) {
  rg_catalog_t *cat;
  RG_REQUIRE_OK(rg_catalog_load(rg_test_config_dir(), &cat));
  static const char *const shipped[] = {
      "h100-sxm", "h200",         "b200",       "mi300x",    "gaudi3",    "trainium2",
      "groq-lpu", "cerebras-cs3", "bertha-500", "local-cpu", "host-dram", "nvme-ssd",
      "h800",     "h20",          "a100-80gb",  "l40s",      "mi325x",    "gb200"};
  for (size_t i = 0; i < sizeof(shipped) / sizeof(shipped[0]); i++) {
    const rg_device_class_t *c = rg_catalog_find(cat, shipped[i]);
    if (!c) {
      rg_test_fail(t, __FILE__, __LINE__, "class %s missing from the catalog", shipped[i]);
      continue;
    }
    int memory_tier = !strcmp(shipped[i], "host-dram") || !strcmp(shipped[i], "nvme-ssd");
    RG_CHECK(rg_class_computes(c) == !memory_tier);
    RG_CHECK(c->n_mem >= 1 && c->mem[0].capacity > 0 && c->mem[0].bandwidth > 0);
    RG_CHECK(c->power > 0 && c->price > 0);
    RG_CHECK(rg_class_eff_compute(c, RG_BF16, 4096) > 0 && c->eff_memory > 0);
    RG_CHECK(memory_tier || rg_class_peak(c, RG_BF16) > 0);
  }
  // Sorted by name, so listings and plans do not depend on the file system.
  for (size_t i = 1; i < cat->n; i++)
    RG_CHECK(strcmp(cat->classes[i - 1]->name, cat->classes[i]->name) < 0);
  RG_CHECK(rg_catalog_find(cat, "h100") == NULL);
  rg_catalog_destroy(cat);
}

RG_TEST(configs_h100_ridge_point) {
  rg_catalog_t *cat;
  RG_REQUIRE_OK(rg_catalog_load(rg_test_config_dir(), &cat));
  const rg_device_class_t *c = rg_catalog_find(cat, "h100-sxm");
  RG_REQUIRE(c);
  RG_CHECK_NEAR(c->peak[RG_BF16], 989.5e12, 1e-9);
  RG_CHECK_NEAR(c->mem[0].bandwidth, 3.35e12, 1e-9);
  // "80 GB" of HBM is 80 GiB: nvidia-smi reports 81,559 MiB.
  RG_CHECK_NEAR(c->mem[0].capacity, 81559.0 * 1024 * 1024, 1e-9);
  // DIGEST.md: 989.5 TFLOPS / 3.35 TB/s = ~295 FLOP per byte.
  RG_CHECK_NEAR(rg_class_ridge(c, RG_BF16), 295.0, 0.01);
  RG_CHECK_NEAR(c->scale_up.bandwidth, 450e9, 1e-9);
  RG_CHECK_NEAR(c->scale_out.bandwidth, 50e9, 1e-9);  // 400 Gb/s
  RG_CHECK_NEAR(c->scale_up.latency, 1e-6, 1e-9);
  RG_CHECK_NEAR(c->price, 2.69 / 3600, 1e-9);
  RG_CHECK(c->kind == RG_KIND_GPU && !strcmp(rg_device_kind_name(c->kind), "gpu"));
  RG_CHECK(strstr(c->path, "devices/h100-sxm.yaml") != NULL);
  rg_catalog_destroy(cat);
}

RG_TEST(configs_bertha_500_matches_digest) {
  rg_catalog_t *cat;
  RG_REQUIRE_OK(rg_catalog_load(rg_test_config_dir(), &cat));
  const rg_device_class_t *c = rg_catalog_find(cat, "bertha-500");
  RG_REQUIRE(c);
  RG_CHECK(c->kind == RG_KIND_LPDDR_CARD);
  RG_CHECK_NEAR(c->peak[RG_F16], 384e12, 1e-9);
  RG_CHECK_NEAR(c->peak[RG_FP4], 1.5e15, 1e-9);
  RG_CHECK_NEAR(c->mem[0].capacity, 128e9, 1e-9);
  RG_CHECK_NEAR(c->mem[0].bandwidth, 546e9, 1e-9);
  RG_CHECK_NEAR(c->sram, 256e6, 1e-9);
  RG_CHECK_NEAR(c->power, 250, 1e-9);
  rg_catalog_destroy(cat);
}

RG_TEST(configs_class_peak_fallback_and_defaults) {
  rg_catalog_t *cat;
  RG_REQUIRE_OK(rg_catalog_load(rg_test_config_dir(), &cat));
  const rg_device_class_t *h100 = rg_catalog_find(cat, "h100-sxm");
  const rg_device_class_t *bertha = rg_catalog_find(cat, "bertha-500");
  const rg_device_class_t *groq = rg_catalog_find(cat, "groq-lpu");
  const rg_device_class_t *dram = rg_catalog_find(cat, "host-dram");
  RG_REQUIRE(h100 && bertha && groq && dram);
  RG_CHECK_NEAR(rg_class_peak(h100, RG_FP4), 1979e12, 1e-9);    // fp4 -> fp8
  RG_CHECK_NEAR(rg_class_peak(bertha, RG_BF16), 384e12, 1e-9);  // bf16 -> f16
  RG_CHECK_NEAR(rg_class_peak(bertha, RG_FP8), 384e12, 1e-9);   // fp8 -> 16-bit
  RG_CHECK_NEAR(rg_class_peak(groq, RG_FP4), 188e12, 1e-9);     // no fp8: 16-bit
  RG_CHECK_NEAR(rg_class_peak(groq, RG_INT8), 750e12, 1e-9);    // its own rate
  RG_CHECK(rg_class_peak(dram, RG_BF16) == 0);
  RG_CHECK(rg_class_ridge(dram, RG_BF16) == 0);
  // Defaults when a class gives no efficiency (Gaudi 3: no published row
  // to fit one against), and no fixed costs.
  const rg_device_class_t *gaudi = rg_catalog_find(cat, "gaudi3");
  RG_REQUIRE(gaudi);
  RG_CHECK_NEAR(rg_class_eff_compute(gaudi, RG_BF16, 4096), 0.70, 1e-12);
  RG_CHECK_NEAR(gaudi->eff_memory, 0.85, 1e-12);
  RG_CHECK(gaudi->step_cost == 0 && gaudi->layer_floor == 0);
  // A class that gives them: the H100's fitted figures, each with a source.
  RG_CHECK(h100->eff_memory > 0.5 && h100->eff_memory < 0.9);
  RG_CHECK(h100->eff_attention > 0 && h100->eff_link > 0 && h100->eff_experts > 0);
  RG_CHECK(rg_class_eff_compute(h100, RG_FP8, 16) < rg_class_eff_compute(h100, RG_FP8, 4096));
  RG_CHECK(h100->step_cost > 0 && h100->layer_floor > 0);
  RG_CHECK(strstr(h100->eff_source, "bench/fidelity.yaml") != NULL);
  RG_CHECK(strstr(h100->overhead_source, "bench/fidelity.yaml") != NULL);
  rg_catalog_destroy(cat);
}

RG_TEST(configs_efficiency_and_tf32_read) {
  char path[512];
  write_file(t, "x.yaml",
             "name: x\n"
             "kind: accelerator\n"
             "peak: { tf32: 100 TFLOPS, bf16: 200 TFLOPS }\n"
             "memory: [ { name: hbm, capacity: 1 GB, bandwidth: 1 TB/s } ]\n"
             "power: 1 W\n"
             "price: $1/h\n"
             "efficiency: { compute: 0.5, memory: 0.9 }\n",
             path, sizeof(path));
  rg_device_class_t *c = NULL;
  RG_REQUIRE_OK(rg_device_class_load(path, &c));
  RG_CHECK_NEAR(rg_class_eff_compute(c, RG_BF16, 4096), 0.5, 1e-12);
  RG_CHECK_NEAR(c->eff_memory, 0.9, 1e-12);
  RG_CHECK_NEAR(c->peak[RG_BF16], 200e12, 1e-12);
  RG_CHECK(c->peak[RG_F32] == 0);  // tf32 is read but not taken as f32
  free(c);
}

// efficiency.memory_by_m: a curve per dtype, and each mistake named where it is.
RG_TEST(configs_memory_by_m_read_and_refused) {
  static const char *const head =
      "name: x\n"
      "kind: accelerator\n"
      "peak: { bf16: 200 TFLOPS }\n"
      "memory: [ { name: hbm, capacity: 1 GB, bandwidth: 1 TB/s } ]\n"
      "power: 1 W\n"
      "price: $1/h\n";
  static const struct {
    const char *eff, *err;
  } cases[] = {
      {"efficiency: { memory: 0.9, memory_by_m: { bf16: { 1: 0.95, 8: 0.6 } } }\n", NULL},
      {"efficiency: { memory_by_m: 0.5 }\n",
       "x.yaml:7:28: efficiency.memory_by_m: expected a mapping of dtype to a curve"},
      {"efficiency: { memory_by_m: { bf17: 0.5 } }\n", "bf17"},
      {"efficiency: { memory_by_m: { bf16: { 1: 1.5 } } }\n", "efficiency.memory_by_m.bf16.1"},
      {"efficiency: { memory_by_m: { bf16: { 8: 0.5, 1: 0.9 } } }\n",
       "M 1 does not follow 8; list points by increasing M"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[512], path[512];
    snprintf(text, sizeof text, "%s%s", head, cases[i].eff);
    write_file(t, "x.yaml", text, path, sizeof(path));
    rg_device_class_t *c = NULL;
    if (!cases[i].err) {
      RG_REQUIRE_OK(rg_device_class_load(path, &c));
      RG_CHECK(c->eff_memory_m[RG_BF16].n == 2);
      RG_CHECK_NEAR(rg_class_eff_memory(c, RG_BF16, 8), 0.6, 1e-12);
      RG_CHECK_NEAR(rg_class_eff_memory(c, RG_BF16, 2), 0.95 - 0.35 / 3, 1e-9);
      RG_CHECK_NEAR(rg_class_eff_memory(c, RG_F32, 8), 0.9, 1e-12);
      free(c);
      continue;
    }
    RG_CHECK_ERR(rg_device_class_load(path, &c), cases[i].err);
  }
}

RG_TEST(configs_fleets_all_load) {
  rg_catalog_t *cat;
  RG_REQUIRE_OK(rg_catalog_load(rg_test_config_dir(), &cat));
  static const char *const shipped[] = {"gpu-only", "mixed",     "trainium-cerebras", "local",
                                        "big-1000", "big-10000", "gb200-nvl72"};
  for (size_t i = 0; i < sizeof(shipped) / sizeof(shipped[0]); i++) {
    rg_fleet_t *f = NULL;
    RG_CHECK_OK(rg_fleet_load(shipped[i], rg_test_config_dir(), cat, &f));
    if (!f) continue;
    RG_CHECK(!strcmp(f->name, shipped[i]));
    RG_CHECK(f->n_nodes >= 1 && f->provider[0] && f->network.bandwidth > 0);
    rg_fleet_destroy(f);
  }
  rg_fleet_t *f = NULL;
  RG_REQUIRE_OK(rg_fleet_load("mixed", rg_test_config_dir(), cat, &f));
  const rg_device_class_t *h100 = rg_catalog_find(cat, "h100-sxm");
  const rg_device_class_t *groq = rg_catalog_find(cat, "groq-lpu");
  const rg_device_class_t *ssd = rg_catalog_find(cat, "nvme-ssd");
  RG_CHECK(rg_fleet_count(f, h100) == 16 && rg_fleet_per_node(f, h100) == 8);
  RG_CHECK(rg_fleet_count(f, groq) == 64);
  RG_CHECK(rg_fleet_count(f, ssd) == 2 * 4 + 8 * 1 + 2 * 2 && rg_fleet_per_node(f, ssd) == 4);
  RG_CHECK_NEAR(rg_fleet_intra_link(f, groq).bandwidth, 224e9, 1e-9);
  RG_CHECK_NEAR(f->network.bandwidth, 50e9, 1e-9);
  rg_fleet_destroy(f);
  rg_catalog_destroy(cat);
}

RG_TEST(configs_fleet_local_has_one_cpu) {
  rg_catalog_t *cat;
  RG_REQUIRE_OK(rg_catalog_load(rg_test_config_dir(), &cat));
  rg_fleet_t *f = NULL;
  RG_REQUIRE_OK(rg_fleet_load("local", rg_test_config_dir(), cat, &f));
  const rg_device_class_t *cpu = rg_catalog_find(cat, "local-cpu");
  RG_REQUIRE(cpu);
  RG_CHECK(f->n_nodes == 1 && f->nodes[0].count == 1 && f->nodes[0].n_devs == 1);
  RG_CHECK(f->nodes[0].devs[0].cls == cpu && rg_fleet_count(f, cpu) == 1);
  RG_CHECK(!strcmp(f->provider, "shm"));
  // local-cpu publishes no links and the node gives none: the PCIe default.
  rg_link_t l = rg_fleet_intra_link(f, cpu);
  RG_CHECK_NEAR(l.bandwidth, 32e9, 1e-9);
  RG_CHECK(l.latency > 0);
  rg_fleet_destroy(f);
  rg_catalog_destroy(cat);
}

RG_TEST(configs_fleet_big_1000) {
  rg_catalog_t *cat;
  RG_REQUIRE_OK(rg_catalog_load(rg_test_config_dir(), &cat));
  rg_fleet_t *f = NULL;
  RG_REQUIRE_OK(rg_fleet_load("big-1000", rg_test_config_dir(), cat, &f));
  int devices = 0, classes = 0;
  for (size_t i = 0; i < cat->n; i++) {
    int n = rg_fleet_count(f, cat->classes[i]);
    if (n > 0 && rg_class_computes(cat->classes[i])) {
      devices += n;
      classes++;
    }
  }
  RG_CHECK(devices == 1000);
  RG_CHECK(classes == 10);
  rg_fleet_destroy(f);
  rg_catalog_destroy(cat);
}

RG_TEST(configs_fleet_big_10000_and_nvl72) {
  rg_catalog_t *cat;
  RG_REQUIRE_OK(rg_catalog_load(rg_test_config_dir(), &cat));
  rg_fleet_t *f = NULL;
  RG_REQUIRE_OK(rg_fleet_load("big-10000", rg_test_config_dir(), cat, &f));
  int devices = 0, classes = 0;
  for (size_t i = 0; i < cat->n; i++) {
    int n = rg_fleet_count(f, cat->classes[i]);
    if (n > 0 && rg_class_computes(cat->classes[i])) devices += n, classes++;
  }
  RG_CHECK(devices == 10000);
  RG_CHECK(classes == 12);
  rg_fleet_destroy(f);
  // GB200 NVL72: 72 GPUs in one NVLink domain, so a group of 72 is one tp
  // domain rather than nine pipeline stages.
  RG_REQUIRE_OK(rg_fleet_load("gb200-nvl72", rg_test_config_dir(), cat, &f));
  const rg_device_class_t *gb = rg_catalog_find(cat, "gb200");
  RG_REQUIRE(gb);
  RG_CHECK(rg_fleet_per_node(f, gb) == 72 && rg_fleet_count(f, gb) == 72);
  RG_CHECK_NEAR(rg_fleet_intra_link(f, gb).bandwidth, 900e9, 1e-9);
  RG_CHECK_NEAR(rg_fleet_nic_bandwidth(f, gb), 50e9, 1e-9);  // its own 400 Gb/s NIC
  rg_fleet_destroy(f);
  rg_catalog_destroy(cat);
}

RG_TEST(configs_fleet_intra_link_fallbacks) {
  rg_catalog_t *cat;
  RG_REQUIRE_OK(rg_catalog_load(rg_test_config_dir(), &cat));
  rg_fleet_t *f = NULL;
  RG_REQUIRE_OK(rg_fleet_load("trainium-cerebras", rg_test_config_dir(), cat, &f));
  const rg_device_class_t *trn = rg_catalog_find(cat, "trainium2");
  const rg_device_class_t *cs3 = rg_catalog_find(cat, "cerebras-cs3");
  const rg_device_class_t *ssd = rg_catalog_find(cat, "nvme-ssd");
  RG_REQUIRE(trn && cs3 && ssd);
  RG_CHECK_NEAR(rg_fleet_intra_link(f, trn).bandwidth, 640e9, 1e-9);  // node link
  // CS-3 nodes give no link and the class has no scale_up or host link.
  RG_CHECK_NEAR(rg_fleet_intra_link(f, cs3).bandwidth, 32e9, 1e-9);
  RG_CHECK_NEAR(rg_fleet_intra_link(f, ssd).bandwidth, 640e9, 1e-9);  // shares trn2 nodes
  rg_fleet_destroy(f);
  RG_REQUIRE_OK(rg_fleet_load("big-1000", rg_test_config_dir(), cat, &f));
  const rg_device_class_t *h200 = rg_catalog_find(cat, "h200");
  RG_CHECK_NEAR(rg_fleet_intra_link(f, h200).bandwidth, 450e9, 1e-9);  // class scale_up
  rg_fleet_destroy(f);
  rg_catalog_destroy(cat);
}

RG_TEST(configs_workloads_all_load) {
  static const char *const shipped[] = {"chat",          "long-context",     "agentic",
                                        "batch-offline", "chat-speculative", "shared-prefix"};
  for (size_t i = 0; i < sizeof(shipped) / sizeof(shipped[0]); i++) {
    rg_workload_t *w = NULL;
    RG_CHECK_OK(rg_workload_load(shipped[i], rg_test_config_dir(), &w));
    if (!w) continue;
    RG_CHECK(!strcmp(w->name, shipped[i]));
    RG_CHECK(w->prompt.mean >= 1 && w->output.mean >= 1);
    RG_CHECK(w->rate > 0 && w->slo_ttft > 0 && w->slo_tbt > 0 && w->slo_percentile > 0);
    rg_workload_destroy(w);
  }
  rg_workload_t *w = NULL;
  // The two that show the workload's optional parts.
  RG_REQUIRE_OK(rg_workload_load("chat-speculative", rg_test_config_dir(), &w));
  RG_CHECK(w->speculative.present && !strcmp(w->speculative.draft, "llama-3.1-8b"));
  RG_CHECK(w->speculative.tokens == 4);
  RG_CHECK_NEAR(rg_speculative_tokens_per_step(&w->speculative),
                1 + 0.7 + 0.7 * 0.7 + 0.7 * 0.7 * 0.7 + 0.7 * 0.7 * 0.7 * 0.7, 1e-12);
  rg_workload_destroy(w);
  RG_REQUIRE_OK(rg_workload_load("shared-prefix", rg_test_config_dir(), &w));
  RG_CHECK_NEAR(w->shared_prefix, 6144, 1e-12);
  RG_CHECK_NEAR(w->prefix_hit_rate, 0, 0);
  rg_workload_destroy(w);
  RG_REQUIRE_OK(rg_workload_load("agentic", rg_test_config_dir(), &w));
  RG_CHECK(w->prompt.kind == RG_DIST_LOGNORMAL);
  RG_CHECK_NEAR(w->prompt.mean, 119875, 1e-12);
  RG_CHECK_NEAR(w->prompt.sigma, 0.5, 1e-12);
  RG_CHECK_NEAR(w->prompt.max, 1e6, 1e-12);
  RG_CHECK_NEAR(w->rate, 2.2, 1e-12);
  RG_CHECK_NEAR(w->slo_tbt, 0.05, 1e-12);
  RG_CHECK(w->session.present);
  RG_CHECK_NEAR(w->session.duration, 62.6 * 60, 1e-12);
  RG_CHECK_NEAR(w->session.retention, 450, 1e-12);
  RG_CHECK_NEAR(w->session.prefix_tokens, 119000, 1e-12);
  RG_CHECK_NEAR(w->session.human_wait_fraction, 0.92, 1e-12);
  rg_workload_destroy(w);
  RG_REQUIRE_OK(rg_workload_load("long-context", rg_test_config_dir(), &w));
  RG_CHECK(w->prompt.kind == RG_DIST_UNIFORM && !w->session.present);
  RG_CHECK_NEAR(w->prompt.mean, (32768.0 + 131072.0) / 2, 1e-12);
  rg_workload_destroy(w);
  RG_REQUIRE_OK(rg_workload_load("batch-offline", rg_test_config_dir(), &w));
  RG_CHECK_NEAR(w->slo_ttft, 1800, 1e-12);
  RG_CHECK_NEAR(w->slo_percentile, 90, 1e-12);
  rg_workload_destroy(w);
}

RG_TEST(configs_workload_fixed_forms_and_default) {
  char path[512];
  write_file(t, "w.yaml",
             "name: w\n"
             "prompt_tokens: { dist: fixed, value: 300 }\n"
             "output_tokens: 20\n"
             "arrival: { process: poisson, rate: 120 req/min }\n"
             "slo: { ttft: 1 s, tbt: 20 ms, percentile: 95 }\n",
             path, sizeof(path));
  rg_workload_t *w = NULL;
  RG_REQUIRE_OK(rg_workload_load(path, NULL, &w));
  RG_CHECK(w->prompt.kind == RG_DIST_FIXED && w->prompt.mean == 300 && w->prompt.max == 300);
  RG_CHECK(w->output.kind == RG_DIST_FIXED && w->output.mean == 20);
  RG_CHECK_NEAR(w->rate, 2.0, 1e-12);
  rg_workload_destroy(w);

  rg_workload_t d;
  rg_workload_default(&d);
  RG_CHECK(d.prompt.kind == RG_DIST_FIXED && d.prompt.mean == 1024);
  RG_CHECK(d.output.mean == 256 && d.rate == 0);
  RG_CHECK_NEAR(d.slo_ttft, 2.0, 1e-12);
  RG_CHECK_NEAR(d.slo_tbt, 0.1, 1e-12);
  RG_CHECK(!d.session.present);
}

RG_TEST(configs_resolve_names_and_paths) {
  const char *dir = mini_config(t);
  char out[1024], want[1024];
  RG_REQUIRE_OK(rg_config_resolve(dir, "workloads", "workload", "chat", out, sizeof(out)));
  snprintf(want, sizeof(want), "%s/workloads/chat.yaml", dir);
  RG_CHECK(!strcmp(out, want));
  // A path is taken as given.
  RG_REQUIRE_OK(rg_config_resolve(dir, "workloads", "workload", want, out, sizeof(out)));
  RG_CHECK(!strcmp(out, want));
  CHECK_MSG(rg_config_resolve(dir, "fleets", "fleet", "nope/big.yaml", out, sizeof(out)),
            RG_NOT_FOUND, "fleet file 'nope/big.yaml': No such file or directory");
  CHECK_MSG(rg_config_resolve(dir, "fleets", "fleet", "mixed", out, sizeof(out)), RG_NOT_FOUND,
            "unknown fleet 'mixed'; %s/fleets holds no .yaml files", dir);
  CHECK_MSG(rg_config_resolve(dir, "workloads", "workload", "zzz", out, sizeof(out)), RG_NOT_FOUND,
            "unknown workload 'zzz'; available: chat, long-context");
}

// ----- Bad inputs: each checks the exact message -------------------------------

RG_TEST(configs_bad_malformed_yaml) {
  char path[512];
  bad_class(t, "h100-sxm", 3, "peak: { bf16: 989.5 TFLOPS", path, sizeof(path));
  CHECK_MSG(load_class(path), RG_PARSE,
            "%s:4:7: did not find expected ',' or '}' while parsing a flow mapping "
            "(started at line 3, column 7)",
            path);
}

RG_TEST(configs_bad_unknown_key) {
  char path[512];
  bad_class(t, "h100-sxm", 6, "powr: 700 W", path, sizeof(path));
  CHECK_MSG(load_class(path), RG_INVALID_ARGUMENT,
            "%s:6:1: device class: unknown key 'powr'; did you mean 'power'?", path);
  bad_class(t, "h100-sxm", 3, "peak: { bf61: 989.5 TFLOPS }", path, sizeof(path));
  CHECK_MSG(load_class(path), RG_INVALID_ARGUMENT,
            "%s:3:9: peak: unknown key 'bf61'; did you mean 'bf16'?", path);
}

RG_TEST(configs_bad_wrong_type) {
  char path[512];
  bad_class(t, "h100-sxm", 6, "power: [700, W]", path, sizeof(path));
  CHECK_MSG(load_class(path), RG_INVALID_ARGUMENT,
            "%s:6:8: power: expected a single value, got a list", path);
  bad_class(t, "h100-sxm", 5, "  - { name: hbm3, capacity: { size: 80 GB }, bandwidth: 3.35 TB/s }",
            path, sizeof(path));
  CHECK_MSG(
      load_class(path), RG_INVALID_ARGUMENT,
      "%s:5:29: memory[0].capacity: expected a single value, got a mapping (key: value lines)",
      path);
  bad_class(t, "h100-sxm", 3, "peak: 989.5 TFLOPS", path, sizeof(path));
  CHECK_MSG(load_class(path), RG_INVALID_ARGUMENT,
            "%s:3:7: peak: expected a mapping (key: value lines), got '989.5 TFLOPS'", path);
}

RG_TEST(configs_bad_zero_size) {
  char path[512];
  bad_class(t, "h100-sxm", 5, "  - { name: hbm3, capacity: 0 GB, bandwidth: 3.35 TB/s }", path,
            sizeof(path));
  CHECK_MSG(load_class(path), RG_INVALID_ARGUMENT,
            "%s:5:29: memory[0].capacity: must be more than zero, got '0 GB'", path);
}

RG_TEST(configs_bad_negative_bandwidth) {
  char path[512];
  bad_class(t, "h100-sxm", 5, "  - { name: hbm3, capacity: 80 GB, bandwidth: -3.35 TB/s }", path,
            sizeof(path));
  CHECK_MSG(load_class(path), RG_INVALID_ARGUMENT,
            "%s:5:47: memory[0].bandwidth: '-3.35 TB/s' is not a bandwidth: it is negative; "
            "write it like '3.35 TB/s, 400 Gb/s'",
            path);
}

RG_TEST(configs_bad_unknown_unit) {
  char path[512];
  bad_class(t, "h100-sxm", 5, "  - { name: hbm3, capacity: 80 XB, bandwidth: 3.35 TB/s }", path,
            sizeof(path));
  CHECK_MSG(load_class(path), RG_INVALID_ARGUMENT,
            "%s:5:29: memory[0].capacity: '80 XB' is not a size: unknown unit; "
            "write it like '80 GB, 50 MiB'",
            path);
}

RG_TEST(configs_bad_missing_field) {
  char path[512];
  bad_class(t, "h100-sxm", 6, NULL, path, sizeof(path));
  CHECK_MSG(load_class(path), RG_INVALID_ARGUMENT,
            "%s:1:1: device class: missing required key 'power' (a power like '700 W, 23 kW')",
            path);
  bad_class(t, "h100-sxm", 3, NULL, path, sizeof(path));
  CHECK_MSG(load_class(path), RG_INVALID_ARGUMENT,
            "%s:1:1: device class: missing required key 'peak' (a mapping of dtype to compute "
            "rate, like 'bf16: 989.5 TFLOPS')",
            path);
  bad_class(t, "h100-sxm", 5, "  - { name: hbm3, bandwidth: 3.35 TB/s }", path, sizeof(path));
  CHECK_MSG(load_class(path), RG_INVALID_ARGUMENT,
            "%s:5:5: memory[0]: missing required key 'capacity' (a size like '80 GB, 50 MiB')",
            path);
}

RG_TEST(configs_bad_name_stem_mismatch) {
  char path[512];
  bad_class(t, "h100-sxm", 1, "name: h100", path, sizeof(path));
  CHECK_MSG(load_class(path), RG_INVALID_ARGUMENT,
            "%s:1:7: name 'h100' does not match the file name 'h100-sxm.yaml'; expected 'h100-sxm'",
            path);
}

RG_TEST(configs_bad_kind_and_peak_on_memory_tier) {
  char path[512];
  bad_class(t, "h100-sxm", 2, "kind: gpuu", path, sizeof(path));
  CHECK_MSG(load_class(path), RG_INVALID_ARGUMENT,
            "%s:2:7: kind: unknown device kind 'gpuu'; did you mean 'gpu'? expected one of: gpu, "
            "lpu, wafer, lpddr-card, accelerator, cpu, host-dram, ssd",
            path);
  bad_class(t, "h100-sxm", 2, "kind: ssd", path, sizeof(path));
  CHECK_MSG(load_class(path), RG_INVALID_ARGUMENT,
            "%s:3:1: peak: a class of kind 'ssd' does no compute; remove 'peak'", path);
  bad_class(t, "h100-sxm", 3, "peak: { tf32: 400 TFLOPS }", path, sizeof(path));
  CHECK_MSG(load_class(path), RG_INVALID_ARGUMENT,
            "%s:3:7: peak: no rate for any dtype ridge plans with; expected at least one of f32, "
            "bf16, f16, fp8, int8, fp4",
            path);
  bad_class(t, "h100-sxm", 7, "price: $2.69/h\nefficiency: { compute: 1.5 }", path, sizeof(path));
  CHECK_MSG(load_class(path), RG_INVALID_ARGUMENT,
            "%s:8:24: efficiency.compute: 1.5 is out of range; expected 0 to 1", path);
}

RG_TEST(configs_bad_unknown_class_in_fleet) {
  const char *dir = mini_config(t);
  rg_catalog_t *cat;
  RG_REQUIRE_OK(rg_catalog_load(dir, &cat));
  RG_CHECK(cat->n == 2);
  char path[512];
  write_file(t, "fleets/f.yaml",
             "name: f\n"
             "provider: \"tcp\"\n"
             "network: { bandwidth: 100 Gb/s, latency: 10 us }\n"
             "nodes:\n"
             "  - name: gpu\n"
             "    count: 2\n"
             "    devices:\n"
             "      - { class: h100, count: 8 }\n",
             path, sizeof(path));
  rg_fleet_t *f = NULL;
  CHECK_MSG(rg_fleet_load("f", dir, cat, &f), RG_NOT_FOUND,
            "%s:8:18: unknown device class 'h100'; did you mean 'h100-sxm'? known: h100-sxm, "
            "host-dram",
            path);
  RG_CHECK(f == NULL);
  // Without a position (a name typed on the command line).
  CHECK_MSG(
      rg_catalog_unknown(cat, "host-dam", NULL), RG_NOT_FOUND,
      "unknown device class 'host-dam'; did you mean 'host-dram'? known: h100-sxm, host-dram");
  CHECK_MSG(rg_catalog_unknown(cat, "tpu", NULL), RG_NOT_FOUND,
            "unknown device class 'tpu'; known: h100-sxm, host-dram");
  rg_catalog_destroy(cat);
}

RG_TEST(configs_bad_fleet_shapes) {
  const char *dir = mini_config(t);
  rg_catalog_t *cat;
  RG_REQUIRE_OK(rg_catalog_load(dir, &cat));
  char path[512];
  rg_fleet_t *f = NULL;
  const char *head =
      "name: f\n"
      "provider: \"tcp\"\n"
      "network: { bandwidth: 100 Gb/s, latency: 10 us }\n"
      "nodes:\n";
  char text[8192];
  snprintf(text, sizeof(text),
           "%s  - name: mem\n    count: 1\n    devices:\n"
           "      - { class: host-dram, count: 1 }\n",
           head);
  write_file(t, "fleets/f.yaml", text, path, sizeof(path));
  CHECK_MSG(rg_fleet_load(path, dir, cat, &f), RG_INVALID_ARGUMENT,
            "%s:4:1: nodes: no device in this fleet computes (host-dram and ssd classes only hold "
            "data); expected at least one gpu, lpu, wafer, lpddr-card, accelerator or cpu class",
            path);
  snprintf(text, sizeof(text),
           "%s  - name: gpu\n    count: 0\n    devices:\n"
           "      - { class: h100-sxm, count: 8 }\n",
           head);
  write_file(t, "fleets/f.yaml", text, path, sizeof(path));
  CHECK_MSG(rg_fleet_load(path, dir, cat, &f), RG_INVALID_ARGUMENT,
            "%s:6:12: nodes[0].count: 0 is out of range; expected 1 to 100000", path);
  snprintf(text, sizeof(text), "%s", head);
  for (int i = 0; i <= RG_MAX_FLEET_NODES; i++) {
    size_t used = strlen(text);
    snprintf(text + used, sizeof(text) - used,
             "  - { name: n%d, count: 1, devices: [ { class: h100-sxm, count: 1 } ] }\n", i);
  }
  write_file(t, "fleets/f.yaml", text, path, sizeof(path));
  CHECK_MSG(rg_fleet_load(path, dir, cat, &f), RG_INVALID_ARGUMENT,
            "%s:37:5: nodes: a fleet holds at most 32 node groups, got 33; merge groups of "
            "identical nodes by raising their 'count'",
            path);
  RG_CHECK(f == NULL);
  rg_catalog_destroy(cat);
}

RG_TEST(configs_bad_unknown_workload) {
  const char *dir = mini_config(t);
  rg_workload_t *w = NULL;
  CHECK_MSG(rg_workload_load("chatt", dir, &w), RG_NOT_FOUND,
            "unknown workload 'chatt'; did you mean 'chat'? available: chat, long-context");
  CHECK_MSG(rg_workload_load("long", dir, &w), RG_NOT_FOUND,
            "unknown workload 'long'; did you mean 'long-context'? available: chat, long-context");
  RG_CHECK(w == NULL);
}

RG_TEST(configs_bad_dist_kind) {
  char path[512];
  const char *tail =
      "output_tokens: 256\n"
      "arrival: { process: poisson, rate: 20 req/s }\n"
      "slo: { ttft: 2 s, tbt: 50 ms, percentile: 99 }\n";
  char text[1024];
  rg_workload_t *w = NULL;
  snprintf(text, sizeof(text), "name: w\nprompt_tokens: { dist: normal, mean: 1024, sigma: 1 }\n%s",
           tail);
  write_file(t, "w.yaml", text, path, sizeof(path));
  CHECK_MSG(rg_workload_load(path, NULL, &w), RG_INVALID_ARGUMENT,
            "%s:2:24: prompt_tokens.dist: unknown distribution 'normal'; did you mean 'lognormal'? "
            "expected one of: fixed, "
            "uniform, lognormal",
            path);
  snprintf(text, sizeof(text),
           "name: w\nprompt_tokens: { dist: lognorm, mean: 1024, sigma: 1 }\n%s", tail);
  write_file(t, "w.yaml", text, path, sizeof(path));
  CHECK_MSG(rg_workload_load(path, NULL, &w), RG_INVALID_ARGUMENT,
            "%s:2:24: prompt_tokens.dist: unknown distribution 'lognorm'; did you mean "
            "'lognormal'? expected one of: fixed, uniform, lognormal",
            path);
  snprintf(text, sizeof(text),
           "name: w\nprompt_tokens: { dist: uniform, min: 1, max: 9, sigma: 1 }\n%s", tail);
  write_file(t, "w.yaml", text, path, sizeof(path));
  CHECK_MSG(rg_workload_load(path, NULL, &w), RG_INVALID_ARGUMENT,
            "%s:2:49: prompt_tokens: 'sigma' does not apply to a uniform distribution; it takes "
            "dist, min, max",
            path);
  snprintf(text, sizeof(text), "name: w\nprompt_tokens: { dist: uniform, min: 900, max: 9 }\n%s",
           tail);
  write_file(t, "w.yaml", text, path, sizeof(path));
  CHECK_MSG(rg_workload_load(path, NULL, &w), RG_INVALID_ARGUMENT,
            "%s:2:48: prompt_tokens.max: 9 is below min 900", path);
  snprintf(text, sizeof(text), "name: w\nprompt_tokens: [1, 2]\n%s", tail);
  write_file(t, "w.yaml", text, path, sizeof(path));
  CHECK_MSG(rg_workload_load(path, NULL, &w), RG_INVALID_ARGUMENT,
            "%s:2:16: prompt_tokens: expected a number or a mapping { dist: ... }, got a list",
            path);
  RG_CHECK(w == NULL);
}

RG_TEST(configs_bad_workload_fields) {
  char path[512];
  rg_workload_t *w = NULL;
  write_file(t, "w.yaml",
             "name: w\n"
             "prompt_tokens: 1024\n"
             "output_tokens: 256\n"
             "arrival: { process: bursty, rate: 20 req/s }\n"
             "slo: { ttft: 2 s, tbt: 50 ms, percentile: 99 }\n",
             path, sizeof(path));
  CHECK_MSG(rg_workload_load(path, NULL, &w), RG_INVALID_ARGUMENT,
            "%s:4:21: arrival.process: unknown arrival process 'bursty'; expected one of: poisson",
            path);
  write_file(t, "w.yaml",
             "name: w\n"
             "prompt_tokens: 1024\n"
             "output_tokens: 256\n"
             "arrival: { rate: 20 req/s }\n"
             "slo: { ttft: 2 s, tbt: 50 ms, percentile: 99 }\n"
             "session: { duration: 1 min }\n",
             path, sizeof(path));
  CHECK_MSG(rg_workload_load(path, NULL, &w), RG_INVALID_ARGUMENT,
            "%s:6:10: session: missing required key 'requests' (a number)", path);
  write_file(t, "w.yaml",
             "name: w\n"
             "prompt_tokens: 1024\n"
             "output_tokens: 256\n"
             "arrival: { rate: 20 req/s }\n"
             "slo: { ttft: 2 s, tbt: 50 ms, percentile: 99 }\n"
             "sesion: { duration: 1 min }\n",
             path, sizeof(path));
  CHECK_MSG(rg_workload_load(path, NULL, &w), RG_INVALID_ARGUMENT,
            "%s:6:1: workload: unknown key 'sesion'; did you mean 'session'?", path);
  RG_CHECK(w == NULL);
}

RG_TEST(configs_bad_catalog_folder) {
  rg_catalog_t *cat = NULL;
  char dir[512];
  snprintf(dir, sizeof(dir), "%s/none", rg_test_tmpdir(t));
  CHECK_MSG(rg_catalog_load(dir, &cat), RG_NOT_FOUND,
            "%s/devices: No such file or directory; expected the folder of device-class files "
            "(*.yaml)",
            dir);
  RG_CHECK(cat == NULL);
}
