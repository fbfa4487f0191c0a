// cli/cmd_catalog.c — `ridge catalog`: the device classes of configs/devices,
// as rooflines: peak FLOP/s, first-tier bandwidth and the ridge point between
// them (a stage whose FLOP/B is below it is memory-bound on that class), plus
// capacity, SRAM, power and price. With a NAME, one class in full.
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/output.h"
#include "planner/planner.h"

#define CMD "catalog"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ridge catalog [NAME] [--dtype T] [--json]\n"
          "\n"
          "Lists the device classes in configs/devices: peak FLOP/s for the dtype, first-tier\n"
          "memory bandwidth, the ridge point (peak / bandwidth, in FLOP per byte), capacity,\n"
          "on-chip SRAM, power and price. A stage whose intensity (ridge model) is below a\n"
          "class's ridge point is memory-bound there. Memory and storage tiers (host DRAM,\n"
          "SSD) compute nothing, so they have no ridge point. With NAME, shows that class in\n"
          "full: every peak, every memory tier, its links and the file it came from.\n"
          "\n"
          "  --dtype T  dtype for peak and ridge point (default bf16; one of f32 bf16 f16 fp8\n"
          "             int8 fp4). A class without that dtype shows the wider one it falls\n"
          "             back to, marked *.\n"
          "  --json     machine-readable output\n"
          "\n"
          "example: ridge catalog h100-sxm --dtype fp8\n");
}

// The dtype whose native peak rg_class_peak() fell back to for t, or t when
// the class has t natively, or -1 when it has nothing usable.
static int peak_source(const rg_device_class_t *c, rg_dtype_t t) {
  if (c->peak[t] > 0) return (int)t;
  double p = rg_class_peak(c, t);
  if (p <= 0) return -1;
  static const rg_dtype_t order[] = {RG_FP8, RG_BF16, RG_F16, RG_F32, RG_INT8, RG_FP4};
  for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
    if (order[i] != t && c->peak[order[i]] == p) return (int)order[i];
  return -1;
}

static const char *tier_label(const rg_device_class_t *c) {
  return c->kind == RG_KIND_SSD ? "storage tier" : "memory tier";
}

static char *fmt_or_dash(double v, rg_unit_kind_t k, char *buf, size_t len) {
  if (v > 0) return rg_fmt_quantity(v, k, buf, len);
  snprintf(buf, len, "-");
  return buf;
}

static char *fmt_ridge(double r, char *buf, size_t len) {
  if (r <= 0)
    snprintf(buf, len, "-");
  else if (r >= 999.5)
    rg_fmt_grouped(r, buf, len);
  else if (r >= 9.995)
    snprintf(buf, len, "%.0f", r);
  else
    snprintf(buf, len, "%.2f", r);
  return buf;
}

static char *fmt_link(const rg_link_t *l, char *buf, size_t len) {
  char bw[32], lat[32];
  snprintf(buf, len, "%s, %s per direction, %s", l->name[0] ? l->name : "(unnamed)",
           rg_fmt_quantity(l->bandwidth, RG_UNIT_BANDWIDTH, bw, sizeof(bw)),
           rg_fmt_quantity(l->latency, RG_UNIT_TIME, lat, sizeof(lat)));
  return buf;
}

static rg_status_t print_table(const rg_catalog_t *cat, rg_dtype_t t) {
  static const char *const heads_tmpl[] = {"class",    "kind", NULL,    "bandwidth", "ridge FLOP/B",
                                           "capacity", "SRAM", "power", "price"};
  const char *heads[9];
  char peak_head[32];
  snprintf(peak_head, sizeof(peak_head), "peak %s", rg_dtype_name(t));
  memcpy(heads, heads_tmpl, sizeof(heads));
  heads[2] = peak_head;
  rg_table_t tb;
  rg_table_init(&tb, 9, heads, "llrrrrrrr");
  char b[64];
  int n_fallback = 0, n_calibrated = 0;
  // Compute classes first, then the memory and storage tiers.
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < cat->n; i++) {
      const rg_device_class_t *c = cat->classes[i];
      int computes = rg_class_computes(c);
      if (computes != (pass == 0)) continue;
      rg_table_cell(&tb, "%s%s", c->name, c->calibrated ? " +" : "");
      if (c->calibrated) n_calibrated++;
      rg_table_cell(&tb, "%s", rg_device_kind_name(c->kind));
      if (computes) {
        int src = peak_source(c, t);
        double p = rg_class_peak(c, t);
        if (src < 0)
          rg_table_cell(&tb, "none");
        else if (src != (int)t) {
          rg_table_cell(&tb, "%s *%s", rg_fmt_quantity(p, RG_UNIT_FLOPS, b, sizeof(b)),
                        rg_dtype_name((rg_dtype_t)src));
          n_fallback++;
        } else
          rg_table_cell(&tb, "%s", rg_fmt_quantity(p, RG_UNIT_FLOPS, b, sizeof(b)));
      } else {
        rg_table_cell(&tb, "%s", tier_label(c));
      }
      double bw = c->n_mem > 0 ? c->mem[0].bandwidth : 0;
      double cap = c->n_mem > 0 ? c->mem[0].capacity : 0;
      if (c->calibrated && c->datasheet && c->datasheet->mem[0].bandwidth != bw) {
        char d[32];
        rg_table_cell(
            &tb, "%s (sheet %s)", fmt_or_dash(bw, RG_UNIT_BANDWIDTH, b, sizeof(b)),
            rg_fmt_quantity(c->datasheet->mem[0].bandwidth, RG_UNIT_BANDWIDTH, d, sizeof d));
      } else {
        rg_table_cell(&tb, "%s", fmt_or_dash(bw, RG_UNIT_BANDWIDTH, b, sizeof(b)));
      }
      rg_table_cell(&tb, "%s", computes ? fmt_ridge(rg_class_ridge(c, t), b, sizeof(b)) : "-");
      rg_table_cell(&tb, "%s", fmt_or_dash(cap, RG_UNIT_BYTES, b, sizeof(b)));
      rg_table_cell(&tb, "%s", fmt_or_dash(c->sram, RG_UNIT_BYTES, b, sizeof(b)));
      rg_table_cell(&tb, "%s", fmt_or_dash(c->power, RG_UNIT_POWER, b, sizeof(b)));
      rg_table_cell(&tb, "%s",
                    c->price > 0 ? rg_fmt_quantity(c->price, RG_UNIT_PRICE, b, sizeof(b)) : "-");
    }
  printf("Device classes in %s (%s)\n", cat->dir, rg_dtype_name(t));
  rg_status_t s = rg_table_print(&tb, stdout, 0);
  rg_table_deinit(&tb);
  RG_RETURN_IF_ERROR(s);
  printf(
      "\nridge point = peak / first-tier bandwidth: stages below it are memory-bound on that "
      "class.\n"
      "bandwidth and capacity are the first memory tier's, which holds weights and KV.\n");
  if (n_fallback)
    printf("*dtype: no native %s units; the peak of the dtype named is used (data is upcast).\n",
           rg_dtype_name(t));
  if (n_calibrated)
    printf(
        "+ calibrated: figures measured on a device (configs/devices/calibrated/) replace the "
        "datasheet's;\n"
        "  ridge catalog NAME shows both.\n");
  printf(
      "Memory and storage tiers hold KV and weights for others; they compute nothing.\n"
      "One class in full: ridge catalog NAME\n");
  return NULL;
}

// "16: 12%, 1024: 65%": a compute-efficiency curve in one line.
static char *fmt_curve(const rg_eff_curve_t *k, char *buf, size_t len) {
  buf[0] = 0;
  if (k->n == 1) {
    snprintf(buf, len, "%.0f%% at every M", k->pt[0].eff * 100);
    return buf;
  }
  for (int i = 0; i < k->n; i++) {
    size_t u = strlen(buf);
    snprintf(buf + u, len - u, "%sM %g: %.0f%%", i ? ", " : "", k->pt[i].m, k->pt[i].eff * 100);
  }
  return buf;
}

static void print_efficiency(const rg_device_class_t *c) {
  char b[256], t1[32], t2[32];
  printf("\n  What kernels reach (fraction of peak), %s:\n",
         c->eff_source[0] ? c->eff_source : "no source given");
  printf("    memory     %.0f%% of peak bandwidth\n", c->eff_memory * 100);
  for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++)
    if (c->eff_memory_m[d].n > 0)
      printf("    %-10s %s of peak bandwidth by GEMM M (its weight stream)\n",
             rg_dtype_name((rg_dtype_t)d), fmt_curve(&c->eff_memory_m[d], b, sizeof b));
  // The others default to 1 (or, attention, to memory) when not given.
  if (c->eff_attention > 0)
    printf("    attention  %.0f%% of peak bandwidth (decode attention over paged KV)\n",
           c->eff_attention * 100);
  if (c->eff_attention_compute > 0)
    printf("    attention  %.0f%% of the bf16 peak (a prompt's QK^T and PV)\n",
           c->eff_attention_compute * 100);
  if (c->eff_attention_ctx.n > 0) {
    printf("    attention  by context:");
    for (int i = 0; i < c->eff_attention_ctx.n; i++)
      printf("%s %g: %.0f%%", i ? "," : "", c->eff_attention_ctx.pt[i].m,
             c->eff_attention_ctx.pt[i].eff * 100);
    printf(" (a step's context picks its point)\n");
  }
  if (c->eff_link > 0)
    printf("    link       %.0f%% of each link's bandwidth (collectives)\n", c->eff_link * 100);
  if (c->eff_experts > 0)
    printf("    experts    %.0f%% of the dense kernels' efficiency (routed grouped GEMMs)\n",
           c->eff_experts * 100);
  printf("    compute    %s (dtypes without their own curve)\n",
         fmt_curve(&c->eff_compute_all, b, sizeof b));
  for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++)
    if (c->eff_compute[d].n > 0)
      printf("    %-10s %s\n", rg_dtype_name((rg_dtype_t)d),
             fmt_curve(&c->eff_compute[d], b, sizeof b));
  char t3[32];
  printf("  Fixed costs: %s per step, %s per layer%s%s (%s)\n",
         rg_fmt_quantity(c->step_cost, RG_UNIT_TIME, t1, sizeof t1),
         rg_fmt_quantity(c->layer_floor, RG_UNIT_TIME, t2, sizeof t2),
         c->process_first > 0 ? ", once per process " : "",
         c->process_first > 0 ? rg_fmt_quantity(c->process_first, RG_UNIT_TIME, t3, sizeof t3) : "",
         c->overhead_source[0] ? c->overhead_source : "no source given");
}

// Datasheet and calibrated figures side by side, for a calibrated class.
static rg_status_t print_calibration(const rg_device_class_t *c) {
  const rg_device_class_t *d = c->datasheet;
  printf("\n  Calibrated: %s\n  from       %s\n", c->calibration_source, c->calibration_path);
  if (!d) return NULL;
  static const char *const heads[] = {"figure", "datasheet", "calibrated",
                                      "calibrated / datasheet"};
  rg_table_t tb;
  rg_table_init(&tb, 4, heads, "lrrr");
  char a[64], b[64];
  for (int t = 0; t < RG_DTYPE_COMPUTE_COUNT; t++) {
    if (d->peak[t] <= 0 && c->peak[t] <= 0) continue;
    rg_table_cell(&tb, "peak %s", rg_dtype_name((rg_dtype_t)t));
    rg_table_cell(&tb, "%s", fmt_or_dash(d->peak[t], RG_UNIT_FLOPS, a, sizeof a));
    rg_table_cell(&tb, "%s", fmt_or_dash(c->peak[t], RG_UNIT_FLOPS, b, sizeof b));
    rg_table_cell(&tb, d->peak[t] > 0 ? "%.2f" : "-", d->peak[t] > 0 ? c->peak[t] / d->peak[t] : 0);
  }
  for (int i = 0; i < c->n_mem; i++) {
    rg_table_cell(&tb, "%s capacity", c->mem[i].name);
    rg_table_cell(&tb, "%s", rg_fmt_quantity(d->mem[i].capacity, RG_UNIT_BYTES, a, sizeof a));
    rg_table_cell(&tb, "%s", rg_fmt_quantity(c->mem[i].capacity, RG_UNIT_BYTES, b, sizeof b));
    rg_table_cell(&tb, "%.2f", c->mem[i].capacity / d->mem[i].capacity);
    rg_table_cell(&tb, "%s bandwidth", c->mem[i].name);
    rg_table_cell(&tb, "%s", rg_fmt_quantity(d->mem[i].bandwidth, RG_UNIT_BANDWIDTH, a, sizeof a));
    rg_table_cell(&tb, "%s", rg_fmt_quantity(c->mem[i].bandwidth, RG_UNIT_BANDWIDTH, b, sizeof b));
    rg_table_cell(&tb, "%.2f", c->mem[i].bandwidth / d->mem[i].bandwidth);
  }
  rg_table_cell(&tb, "memory efficiency");
  rg_table_cell(&tb, "%.0f%%", d->eff_memory * 100);
  rg_table_cell(&tb, "%.0f%%", c->eff_memory * 100);
  rg_table_cell(&tb, "%.2f", c->eff_memory / d->eff_memory);
  static const double ms[] = {16, 256, 4096};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
    double x = rg_class_eff_compute(d, RG_BF16, ms[i]), y = rg_class_eff_compute(c, RG_BF16, ms[i]);
    rg_table_cell(&tb, "bf16 compute eff, M %g", ms[i]);
    rg_table_cell(&tb, "%.0f%%", x * 100);
    rg_table_cell(&tb, "%.0f%%", y * 100);
    rg_table_cell(&tb, "%.2f", x > 0 ? y / x : 0);
  }
  rg_table_cell(&tb, "step cost");
  rg_table_cell(&tb, "%s", rg_fmt_quantity(d->step_cost, RG_UNIT_TIME, a, sizeof a));
  rg_table_cell(&tb, "%s", rg_fmt_quantity(c->step_cost, RG_UNIT_TIME, b, sizeof b));
  rg_table_cell(&tb, d->step_cost > 0 ? "%.2f" : "-",
                d->step_cost > 0 ? c->step_cost / d->step_cost : 0);
  rg_table_cell(&tb, "layer floor");
  rg_table_cell(&tb, "%s", rg_fmt_quantity(d->layer_floor, RG_UNIT_TIME, a, sizeof a));
  rg_table_cell(&tb, "%s", rg_fmt_quantity(c->layer_floor, RG_UNIT_TIME, b, sizeof b));
  rg_table_cell(&tb, d->layer_floor > 0 ? "%.2f" : "-",
                d->layer_floor > 0 ? c->layer_floor / d->layer_floor : 0);
  rg_status_t st = rg_table_print(&tb, stdout, 4);
  rg_table_deinit(&tb);
  return st;
}

static rg_status_t print_detail(const rg_device_class_t *c, rg_dtype_t t) {
  char b1[64], b2[64], b3[96];
  printf("%s — %s\n", c->name, c->description[0] ? c->description : "(no description)");
  printf("  kind       %s%s\n", rg_device_kind_name(c->kind),
         rg_class_computes(c)     ? ""
         : c->kind == RG_KIND_SSD ? " (storage tier: no compute)"
                                  : " (memory tier: no compute)");
  printf("  from       %s\n", c->path);
  if (rg_class_computes(c)) {
    printf("\n  Peak (dense) and ridge point per dtype, against %s at %s:\n",
           c->n_mem > 0 ? c->mem[0].name : "-",
           c->n_mem > 0 ? rg_fmt_quantity(c->mem[0].bandwidth, RG_UNIT_BANDWIDTH, b1, sizeof(b1))
                        : "-");
    static const char *const heads[] = {"dtype", "peak", "ridge FLOP/B", "note"};
    rg_table_t tb;
    rg_table_init(&tb, 4, heads, "lrrl");
    for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++) {
      int src = peak_source(c, (rg_dtype_t)d);
      rg_table_cell(&tb, "%s%s", rg_dtype_name((rg_dtype_t)d), d == (int)t ? " <" : "");
      if (src < 0) {
        rg_table_cell(&tb, "-");
        rg_table_cell(&tb, "-");
        rg_table_cell(&tb, "not supported");
        continue;
      }
      rg_table_cell(
          &tb, "%s",
          rg_fmt_quantity(rg_class_peak(c, (rg_dtype_t)d), RG_UNIT_FLOPS, b1, sizeof(b1)));
      rg_table_cell(&tb, "%s", fmt_ridge(rg_class_ridge(c, (rg_dtype_t)d), b2, sizeof(b2)));
      if (src != d)
        rg_table_cell(&tb, "no native %s: uses %s", rg_dtype_name((rg_dtype_t)d),
                      rg_dtype_name((rg_dtype_t)src));
      else
        rg_table_cell(&tb, "%s", "");
    }
    rg_status_t s = rg_table_print(&tb, stdout, 4);
    rg_table_deinit(&tb);
    RG_RETURN_IF_ERROR(s);
    print_efficiency(c);
  }
  printf("\n  Memory tiers, fastest first%s:\n",
         rg_class_computes(c) ? " (the first holds weights and KV)" : "");
  for (int i = 0; i < c->n_mem; i++)
    printf("    %d. %-10s %s at %s\n", i + 1, c->mem[i].name,
           rg_fmt_quantity(c->mem[i].capacity, RG_UNIT_BYTES, b1, sizeof(b1)),
           rg_fmt_quantity(c->mem[i].bandwidth, RG_UNIT_BANDWIDTH, b2, sizeof(b2)));
  if (c->sram > 0)
    printf("    on-chip SRAM %s\n", rg_fmt_quantity(c->sram, RG_UNIT_BYTES, b1, sizeof(b1)));
  printf("\n  power      %s\n", fmt_or_dash(c->power, RG_UNIT_POWER, b1, sizeof(b1)));
  printf("  price      %s\n",
         c->price > 0 ? rg_fmt_quantity(c->price, RG_UNIT_PRICE, b1, sizeof(b1)) : "-");
  const struct {
    const char *what;
    const rg_link_t *l;
  } links[] = {{"scale-up", &c->scale_up}, {"scale-out", &c->scale_out}, {"host", &c->host}};
  int any = 0;
  for (size_t i = 0; i < 3; i++)
    if (links[i].l->bandwidth > 0) {
      printf("  %-10s %s\n", links[i].what, fmt_link(links[i].l, b3, sizeof(b3)));
      any = 1;
    }
  if (!any) printf("  links      none given\n");
  if (c->calibrated) return print_calibration(c);
  return NULL;
}

static void json_link(cJSON *o, const char *key, const rg_link_t *l, int *bad) {
  if (l->bandwidth <= 0) {
    rg_json_null(o, key, bad);
    return;
  }
  cJSON *e = rg_json_obj(o, key, bad);
  rg_json_str(e, "name", l->name, bad);
  rg_json_num(e, "bandwidth", l->bandwidth, bad);
  rg_json_num(e, "latency", l->latency, bad);
}

static void json_curve(cJSON *o, const char *key, const rg_eff_curve_t *k, int *bad) {
  cJSON *a = rg_json_arr(o, key, bad);
  for (int i = 0; i < k->n; i++) {
    cJSON *e = rg_json_push_obj(a, bad);
    rg_json_num(e, "m", k->pt[i].m, bad);
    rg_json_num(e, "eff", k->pt[i].eff, bad);
  }
}

// The figures calibration can change: efficiencies and fixed costs.
static void json_figures(cJSON *o, const rg_device_class_t *c, int *bad) {
  cJSON *e = rg_json_obj(o, "efficiency", bad);
  rg_json_num(e, "memory", c->eff_memory, bad);
  int n_mem = 0;
  for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++) n_mem += c->eff_memory_m[d].n > 0;
  if (n_mem) {
    cJSON *mm = rg_json_obj(e, "memory_by_m", bad);
    for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++)
      if (c->eff_memory_m[d].n > 0)
        json_curve(mm, rg_dtype_name((rg_dtype_t)d), &c->eff_memory_m[d], bad);
  }
  cJSON *cc = rg_json_obj(e, "compute", bad);
  json_curve(cc, "all", &c->eff_compute_all, bad);
  for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++)
    if (c->eff_compute[d].n > 0)
      json_curve(cc, rg_dtype_name((rg_dtype_t)d), &c->eff_compute[d], bad);
  rg_json_str(e, "source", c->eff_source, bad);
  cJSON *ov = rg_json_obj(o, "overhead", bad);
  rg_json_num(ov, "step_s", c->step_cost, bad);
  rg_json_num(ov, "layer_s", c->layer_floor, bad);
  rg_json_num(ov, "process_first_s", c->process_first, bad);
  rg_json_str(ov, "source", c->overhead_source, bad);
}

static void json_class(cJSON *o, const rg_device_class_t *c, rg_dtype_t t, int *bad) {
  int computes = rg_class_computes(c);
  rg_json_str(o, "name", c->name, bad);
  rg_json_str(o, "description", c->description, bad);
  rg_json_str(o, "kind", rg_device_kind_name(c->kind), bad);
  rg_json_bool(o, "computes", computes, bad);
  rg_json_str(o, "path", c->path, bad);
  cJSON *pk = rg_json_obj(o, "peak", bad);
  for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++)
    if (c->peak[d] > 0) rg_json_num(pk, rg_dtype_name((rg_dtype_t)d), c->peak[d], bad);
  rg_json_str(o, "dtype", rg_dtype_name(t), bad);
  if (computes)
    rg_json_num(o, "peak_dtype", rg_class_peak(c, t), bad);
  else
    rg_json_null(o, "peak_dtype", bad);
  rg_json_num(o, "bandwidth", c->n_mem > 0 ? c->mem[0].bandwidth : 0, bad);
  if (computes && rg_class_peak(c, t) > 0)
    rg_json_num(o, "ridge_point", rg_class_ridge(c, t), bad);
  else
    rg_json_null(o, "ridge_point", bad);
  rg_json_num(o, "capacity", c->n_mem > 0 ? c->mem[0].capacity : 0, bad);
  rg_json_num(o, "sram", c->sram, bad);
  rg_json_num(o, "power", c->power, bad);
  rg_json_num(o, "price_per_hour", c->price * 3600.0, bad);
  cJSON *mem = rg_json_arr(o, "memory", bad);
  for (int i = 0; i < c->n_mem; i++) {
    cJSON *e = rg_json_push_obj(mem, bad);
    rg_json_str(e, "name", c->mem[i].name, bad);
    rg_json_num(e, "capacity", c->mem[i].capacity, bad);
    rg_json_num(e, "bandwidth", c->mem[i].bandwidth, bad);
  }
  cJSON *ln = rg_json_obj(o, "links", bad);
  json_link(ln, "scale_up", &c->scale_up, bad);
  json_link(ln, "scale_out", &c->scale_out, bad);
  json_link(ln, "host", &c->host, bad);
  json_figures(o, c, bad);
  rg_json_bool(o, "calibrated", c->calibrated, bad);
  if (c->calibrated) {
    cJSON *cal = rg_json_obj(o, "calibration", bad);
    rg_json_str(cal, "path", c->calibration_path, bad);
    rg_json_str(cal, "source", c->calibration_source, bad);
    if (c->datasheet) {
      cJSON *ds = rg_json_obj(o, "datasheet", bad);
      cJSON *dp = rg_json_obj(ds, "peak", bad);
      for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++)
        if (c->datasheet->peak[d] > 0)
          rg_json_num(dp, rg_dtype_name((rg_dtype_t)d), c->datasheet->peak[d], bad);
      rg_json_num(ds, "bandwidth", c->datasheet->n_mem > 0 ? c->datasheet->mem[0].bandwidth : 0,
                  bad);
      rg_json_num(ds, "capacity", c->datasheet->n_mem > 0 ? c->datasheet->mem[0].capacity : 0, bad);
      json_figures(ds, c->datasheet, bad);
    }
  }
}

int rg_cmd_catalog(int argc, char **argv, const rg_cli_common_t *common) {
  enum { O_DTYPE = 1000, O_JSON, O_HELP };
  static const struct option longs[] = {
      {"dtype", required_argument, NULL, O_DTYPE},
      {"json", no_argument, NULL, O_JSON},
      {"help", no_argument, NULL, O_HELP},
      {NULL, 0, NULL, 0},
  };
  rg_dtype_t t = RG_BF16;
  int json = common->json;
  rg_cli_getopt_reset();
  int c;
  while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
    switch (c) {
      case O_DTYPE: {
        rg_status_t s = rg_parse_dtype("--dtype", optarg, &t);
        if (s) return rg_cli_fail(CMD, s);
        break;
      }
      case O_JSON:
        json = 1;
        break;
      case 'h':
      case O_HELP:
        usage(stdout);
        return 0;
      default:
        return rg_cli_fail(CMD, rg_cli_getopt_error(c, argv, longs));
    }
  }
  if (argc - optind > 1)
    return rg_cli_fail(
        CMD, rg_status_make(RG_INVALID_ARGUMENT, "takes at most one class name, got '%s' and '%s'",
                            argv[optind], argv[optind + 1]));
  const char *name = optind < argc ? argv[optind] : NULL;

  rg_catalog_t *cat = NULL;
  rg_status_t s = rg_catalog_load(common->config_dir, &cat);
  if (s) return rg_cli_fail(CMD, s);
  const rg_device_class_t *one = NULL;
  if (name) {
    one = rg_catalog_find(cat, name);
    if (!one) s = rg_catalog_unknown(cat, name, NULL);
  }
  if (!s && json) {
    int bad = 0;
    cJSON *root;
    if (one) {
      root = cJSON_CreateObject();
      json_class(root, one, t, &bad);
    } else {
      root = cJSON_CreateArray();
      for (size_t i = 0; i < cat->n; i++)
        json_class(rg_json_push_obj(root, &bad), cat->classes[i], t, &bad);
    }
    if (!root) bad = 1;
    s = rg_json_emit(root, bad, stdout);
  } else if (!s) {
    s = one ? print_detail(one, t) : print_table(cat, t);
  }
  rg_catalog_destroy(cat);
  return rg_cli_fail(CMD, s);
}
