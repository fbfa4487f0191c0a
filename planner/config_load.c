// planner/config_load.c — reads device classes, fleets and workloads
// (configs/{devices,fleets,workloads}/*.yaml, schema in docs/configs-data.md)
// into the planner's structs, and resolves config names to files.
//
// Every check names the file, line and column of the offending value and
// says what was expected, because these files are written by hand and the
// reader of the message is the person who wrote them. Documents are parsed
// whole, every string the planner keeps is copied into the (fixed-size)
// struct fields, and the document is freed before returning, so loaded
// objects own nothing but themselves.
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/units.h"
#include "base/yaml.h"
#include "planner/planner.h"

// ----- Small helpers -----------------------------------------------------------

static rg_status_t rg_oom(const char *what) {
  return rg_status_make(RG_OUT_OF_MEMORY, "out of memory loading %s", what);
}

// "path.key", or just "key" at the top level, for messages.
static void rg_label(char *buf, size_t len, const char *path, const char *key) {
  snprintf(buf, len, "%s%s%s", path, *path ? "." : "", key);
}

static int rg_ends_with(const char *s, const char *suffix) {
  size_t ls = strlen(s), lx = strlen(suffix);
  return ls >= lx && !strcmp(s + ls - lx, suffix);
}

// File name without folders and without its .yaml/.yml/.json extension.
static void rg_file_stem(const char *path, char *out, size_t len) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base);
  static const char *const exts[] = {".yaml", ".yml", ".json"};
  for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++)
    if (rg_ends_with(base, exts[i])) {
      n -= strlen(exts[i]);
      break;
    }
  snprintf(out, len, "%.*s", (int)n, base);
}

// Suggests the option nearest to word. Edit distance catches typos; a prefix
// or substring match catches the common short form of a longer id ("h100"
// for "h100-sxm"), which is many edits away yet plainly what was meant.
static const char *rg_suggest(const char *word, const char *const *options, size_t n) {
  return rg_nearest(word, options, n);
}

static void rg_join(const char *const *items, size_t n, char *buf, size_t len) {
  buf[0] = 0;
  for (size_t i = 0; i < n; i++) {
    size_t used = strlen(buf);
    if (used + 1 >= len) break;
    snprintf(buf + used, len - used, "%s%s", i ? ", " : "", items[i]);
  }
}

// The value of key, or NULL when it is absent or YAML null. A missing
// required key is an error at the mapping, naming the key and, when given,
// what kind of value belongs there.
static rg_status_t rg_want(const rg_node_t *map, const char *key, const char *what, int required,
                           const char *hint, const rg_node_t **out) {
  *out = NULL;
  const rg_node_t *n = rg_node_get(map, key);
  if (n && !rg_node_is_null(n)) {
    *out = n;
    return NULL;
  }
  if (!required) return NULL;
  if (hint)
    return rg_status_at(RG_INVALID_ARGUMENT, &map->pos, "%s: missing required key '%s' (%s)", what,
                        key, hint);
  return rg_node_missing(map, key, what);
}

// Reads a quantity with units; path names the enclosing mapping ("" at the
// top), what names it in missing-key messages.
// Largest value of each unit kind ridge plans with: far past any real part
// (the biggest wafer holds 44 GB at 21 PB/s), yet small enough that sums and
// products of them stay finite and print as numbers, not "inf".
static const double rg_unit_max[RG_UNIT_KIND_COUNT] = {
    [RG_UNIT_BYTES] = 1e18,      // 1 EB
    [RG_UNIT_BANDWIDTH] = 1e18,  // 1 EB/s
    [RG_UNIT_FLOPS] = 1e21,      // 1 ZFLOPS
    [RG_UNIT_POWER] = 1e7,       // 10 MW
    [RG_UNIT_PRICE] = 1e4,       // $36M/h
    [RG_UNIT_TIME] = 3.2e7,      // a year
    [RG_UNIT_RATE] = 1e9,        // a billion requests/s
};

static rg_status_t rg_read_quantity(const rg_node_t *map, const char *path, const char *what,
                                    const char *key, rg_unit_kind_t kind, int required,
                                    int allow_zero, double *out) {
  char hint[96], label[128];
  snprintf(hint, sizeof(hint), "a %s like '%s'", rg_unit_kind_name(kind),
           rg_unit_kind_example(kind));
  const rg_node_t *n;
  RG_RETURN_IF_ERROR(rg_want(map, key, what, required, hint, &n));
  if (!n) return NULL;
  rg_label(label, sizeof(label), path, key);
  double v;
  RG_RETURN_IF_ERROR(rg_node_quantity(n, label, kind, allow_zero, &v));
  if (v > rg_unit_max[kind]) {
    char most[32];
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos,
                        "%s: '%s' is beyond any device or fleet; at most %s", label, n->scalar,
                        rg_fmt_quantity(rg_unit_max[kind], kind, most, sizeof most));
  }
  *out = v;
  return NULL;
}

// Copies a text value into a fixed-size field, refusing (rather than
// silently cutting) text that does not fit, since ids are compared later.
static rg_status_t rg_read_text(const rg_node_t *map, const char *path, const char *what,
                                const char *key, int required, char *dst, size_t cap) {
  char label[128];
  const rg_node_t *n;
  RG_RETURN_IF_ERROR(rg_want(map, key, what, required, NULL, &n));
  if (!n) return NULL;
  rg_label(label, sizeof(label), path, key);
  const char *s;
  RG_RETURN_IF_ERROR(rg_node_str(n, label, &s));
  if (strlen(s) >= cap)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos,
                        "%s: '%.40s...' is too long; at most %zu characters", label, s, cap - 1);
  memcpy(dst, s, strlen(s) + 1);
  return NULL;
}

// Reads a scalar naming one of `names`; unknown text suggests the nearest.
static rg_status_t rg_read_choice(const rg_node_t *n, const char *label, const char *noun,
                                  const char *const *names, size_t count, int *out) {
  const char *s;
  RG_RETURN_IF_ERROR(rg_node_str(n, label, &s));
  for (size_t i = 0; i < count; i++)
    if (!strcmp(s, names[i])) {
      *out = (int)i;
      return NULL;
    }
  char list[256];
  rg_join(names, count, list, sizeof(list));
  const char *near = rg_nearest(s, names, count);
  if (near)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos,
                        "%s: unknown %s '%s'; did you mean '%s'? expected one of: %s", label, noun,
                        s, near, list);
  return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: unknown %s '%s'; expected one of: %s",
                      label, noun, s, list);
}

// The file's `name` must equal its stem: configs are found by file name, so
// a mismatch would make a class or fleet unreachable under the name it gives.
static rg_status_t rg_read_name(const rg_node_t *root, const char *what, const char *path,
                                char *dst, size_t cap) {
  RG_RETURN_IF_ERROR(rg_read_text(root, "", what, "name", 1, dst, cap));
  char stem[256];
  rg_file_stem(path, stem, sizeof(stem));
  if (strcmp(dst, stem)) {
    const char *base = strrchr(path, '/');
    return rg_status_at(RG_INVALID_ARGUMENT, &rg_node_get(root, "name")->pos,
                        "name '%s' does not match the file name '%s'; expected '%s'", dst,
                        base ? base + 1 : path, stem);
  }
  return NULL;
}

static rg_status_t rg_copy_path(const char *path, char *dst, size_t cap) {
  if (strlen(path) >= cap)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: path is longer than %zu characters", path,
                          cap - 1);
  memcpy(dst, path, strlen(path) + 1);
  return NULL;
}

// Sorted stems of the *.yaml files in dir (caller frees each and the array).
static int rg_yaml_filter(const struct dirent *e) {
  return e->d_name[0] != '.' && rg_ends_with(e->d_name, ".yaml");
}
static int rg_name_cmp(const struct dirent **a, const struct dirent **b) {
  // strcmp rather than alphasort's strcoll: the order must not depend on
  // the user's locale, so catalogs and listings are reproducible.
  return strcmp((*a)->d_name, (*b)->d_name);
}
static int rg_list_yaml(const char *dir, struct dirent ***out) {
  return scandir(dir, out, rg_yaml_filter, rg_name_cmp);
}
static void rg_free_list(struct dirent **list, int n) {
  for (int i = 0; i < n; i++) free(list[i]);
  free(list);
}

// ----- Device classes ----------------------------------------------------------

static const char *const rg_kind_names[] = {
#define RG_X_(e, n) n,
    RG_DEVICE_KIND_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof(rg_kind_names) / sizeof(rg_kind_names[0]) == RG_DEVICE_KIND_COUNT,
               "kind name table out of step with RG_DEVICE_KIND_MAP");

const char *rg_device_kind_name(rg_device_kind_t k) {
  return (unsigned)k < RG_DEVICE_KIND_COUNT ? rg_kind_names[k] : "?";
}

int rg_class_computes(const rg_device_class_t *c) {
  return c->kind != RG_KIND_HOST_DRAM && c->kind != RG_KIND_SSD;
}

static double rg_peak_16(const rg_device_class_t *c) {
  return c->peak[RG_BF16] > c->peak[RG_F16] ? c->peak[RG_BF16] : c->peak[RG_F16];
}

// The keys of `peak:` and `efficiency.compute:`: the compute dtypes' names,
// then `extra` ("tf32", "all"), then NULL; keys has RG_DTYPE_COMPUTE_COUNT + 2.
static void fill_dtype_keys(const char **keys, const char *extra) {
  for (int t = 0; t < RG_DTYPE_COMPUTE_COUNT; t++) keys[t] = rg_dtype_name((rg_dtype_t)t);
  keys[RG_DTYPE_COMPUTE_COUNT] = extra;
  keys[RG_DTYPE_COMPUTE_COUNT + 1] = NULL;
}

double rg_class_peak(const rg_device_class_t *c, rg_dtype_t t) {
  if ((unsigned)t >= RG_DTYPE_COUNT) return 0;
  t = rg_dtype_compute(t);  // a storage type (q8_0) runs at its compute type's rate
  if (c->peak[t] > 0) return c->peak[t];
  // Narrow weight formats are dequantised to the next wider type the part
  // computes in. bf16 and f16 share one datapath width, so either stands in
  // for the other before dropping to f32. f32 has nothing wider: 0 then means
  // the class publishes no f32 rate.
  switch (t) {
    case RG_FP4:
      if (c->peak[RG_FP8] > 0) return c->peak[RG_FP8];
      if (rg_peak_16(c) > 0) return rg_peak_16(c);
      return c->peak[RG_F32];
    case RG_FP8:
    case RG_INT8:
      if (rg_peak_16(c) > 0) return rg_peak_16(c);
      return c->peak[RG_F32];
    case RG_BF16:
      return c->peak[RG_F16] > 0 ? c->peak[RG_F16] : c->peak[RG_F32];
    case RG_F16:
      return c->peak[RG_BF16] > 0 ? c->peak[RG_BF16] : c->peak[RG_F32];
    default:
      return 0;
  }
}

double rg_class_ridge(const rg_device_class_t *c, rg_dtype_t t) {
  if (c->n_mem < 1 || c->mem[0].bandwidth <= 0) return 0;
  return rg_class_peak(c, t) / c->mem[0].bandwidth;
}

// Keys of `peak`: the dtypes ridge models, plus tf32. tf32 is accepted (and
// unit-checked, so a typo in it is still caught) but not stored: rg_dtype_t
// has no tf32 because LLM inference never runs in it — weights and
// activations are bf16/f16 or narrower — and the datasheets list it anyway.
static rg_status_t rg_read_peak(const rg_node_t *root, rg_device_class_t *c) {
  int computes = rg_class_computes(c);
  const rg_node_t *peak;
  RG_RETURN_IF_ERROR(rg_want(root, "peak", "device class", computes,
                             "a mapping of dtype to compute rate, like 'bf16: 989.5 TFLOPS'",
                             &peak));
  if (!computes) {
    // A memory tier with a compute rate would be offered work by the search.
    if (peak)
      return rg_status_at(RG_INVALID_ARGUMENT, rg_node_key_pos(root, "peak"),
                          "peak: a class of kind '%s' does no compute; remove 'peak'",
                          rg_device_kind_name(c->kind));
    return NULL;
  }
  const char *rg_peak_keys[RG_DTYPE_COMPUTE_COUNT + 2];
  fill_dtype_keys(rg_peak_keys, "tf32");
  RG_RETURN_IF_ERROR(rg_node_check_keys(peak, rg_peak_keys, "peak"));
  for (int t = 0; t < RG_DTYPE_COMPUTE_COUNT; t++)
    RG_RETURN_IF_ERROR(
        rg_read_quantity(peak, "peak", "peak", rg_peak_keys[t], RG_UNIT_FLOPS, 0, 0, &c->peak[t]));
  double tf32 = 0;
  RG_RETURN_IF_ERROR(rg_read_quantity(peak, "peak", "peak", "tf32", RG_UNIT_FLOPS, 0, 0, &tf32));
  for (int t = 0; t < RG_DTYPE_COMPUTE_COUNT; t++)
    if (c->peak[t] > 0) return NULL;
  return rg_status_at(RG_INVALID_ARGUMENT, &peak->pos,
                      "peak: no rate for any dtype ridge plans with; expected at least one of "
                      "f32, bf16, f16, fp8, int8, fp4");
}

static rg_status_t rg_read_memory(const rg_node_t *root, rg_device_class_t *c) {
  const rg_node_t *mem;
  RG_RETURN_IF_ERROR(rg_want(root, "memory", "device class", 1,
                             "a list of tiers, each { name, capacity, bandwidth }", &mem));
  RG_RETURN_IF_ERROR(rg_node_expect(mem, RG_NODE_SEQ, "memory"));
  if (mem->n == 0)
    return rg_status_at(RG_INVALID_ARGUMENT, &mem->pos,
                        "memory: expected at least one tier (the first holds weights and KV)");
  if (mem->n > RG_MAX_MEM_TIERS)
    return rg_status_at(RG_INVALID_ARGUMENT, &mem->items[RG_MAX_MEM_TIERS]->pos,
                        "memory: at most %d tiers are supported, got %zu", RG_MAX_MEM_TIERS,
                        mem->n);
  static const char *const keys[] = {"name", "capacity", "bandwidth", NULL};
  for (size_t i = 0; i < mem->n; i++) {
    const rg_node_t *tier = mem->items[i];
    rg_mem_tier_t *m = &c->mem[i];
    char path[32];
    snprintf(path, sizeof(path), "memory[%zu]", i);
    RG_RETURN_IF_ERROR(rg_node_check_keys(tier, keys, path));
    RG_RETURN_IF_ERROR(rg_read_text(tier, path, path, "name", 1, m->name, sizeof(m->name)));
    RG_RETURN_IF_ERROR(
        rg_read_quantity(tier, path, path, "capacity", RG_UNIT_BYTES, 1, 0, &m->capacity));
    RG_RETURN_IF_ERROR(
        rg_read_quantity(tier, path, path, "bandwidth", RG_UNIT_BANDWIDTH, 1, 0, &m->bandwidth));
  }
  c->n_mem = (int)mem->n;
  return NULL;
}

// A link { name, bandwidth, latency }. Inside a fleet node the name may be
// left out, since the node already says what the link joins.
static rg_status_t rg_read_link(const rg_node_t *n, const char *path, int name_required,
                                rg_link_t *l) {
  static const char *const keys[] = {"name", "bandwidth", "latency", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(n, keys, path));
  RG_RETURN_IF_ERROR(rg_read_text(n, path, path, "name", name_required, l->name, sizeof(l->name)));
  RG_RETURN_IF_ERROR(
      rg_read_quantity(n, path, path, "bandwidth", RG_UNIT_BANDWIDTH, 1, 0, &l->bandwidth));
  return rg_read_quantity(n, path, path, "latency", RG_UNIT_TIME, 1, 0, &l->latency);
}

static rg_status_t rg_read_links(const rg_node_t *root, rg_device_class_t *c) {
  const rg_node_t *links;
  RG_RETURN_IF_ERROR(rg_want(root, "links", "device class", 0, NULL, &links));
  if (!links) return NULL;
  static const char *const keys[] = {"scale_up", "scale_out", "host", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(links, keys, "links"));
  rg_link_t *dst[] = {&c->scale_up, &c->scale_out, &c->host};
  for (int i = 0; i < 3; i++) {
    const rg_node_t *l;
    RG_RETURN_IF_ERROR(rg_want(links, keys[i], "links", 0, NULL, &l));
    if (!l) continue;
    char path[32];
    rg_label(path, sizeof(path), "links", keys[i]);
    RG_RETURN_IF_ERROR(rg_read_link(l, path, 1, dst[i]));
  }
  return NULL;
}

// A fraction in (0, 1].
static rg_status_t rg_read_fraction(const rg_node_t *map, const char *path, const char *key,
                                    double *out) {
  const rg_node_t *n;
  RG_RETURN_IF_ERROR(rg_want(map, key, path, 0, NULL, &n));
  if (!n) return NULL;
  char label[64];
  rg_label(label, sizeof(label), path, key);
  double v;
  RG_RETURN_IF_ERROR(rg_node_num(n, label, 0, 1, &v));
  if (v == 0)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: must be more than zero, got '%s'", label,
                        n->scalar);
  *out = v;
  return NULL;
}

// A curve of compute efficiency by GEMM M: a plain fraction (the same at
// every M) or a mapping { M: fraction, ... } with M increasing.
static rg_status_t rg_read_curve_on(const rg_node_t *n, const char *label, const char *axis,
                                    const char *key, const char *example, rg_eff_curve_t *c);
static rg_status_t rg_read_curve(const rg_node_t *n, const char *label, rg_eff_curve_t *c) {
  return rg_read_curve_on(n, label, "GEMM M", "M", "{ 16: 0.1, 1024: 0.7 }", c);
}

// A fraction, or a curve of fractions over `axis` (GEMM M, context
// positions; `key` names one point's key in messages), points by
// increasing key.
static rg_status_t rg_read_curve_on(const rg_node_t *n, const char *label, const char *axis,
                                    const char *key, const char *example, rg_eff_curve_t *c) {
  memset(c, 0, sizeof(*c));
  if (n->kind == RG_NODE_SCALAR) {
    double v;
    RG_RETURN_IF_ERROR(rg_node_num(n, label, 0, 1, &v));
    if (v == 0)
      return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: must be more than zero, got '%s'",
                          label, n->scalar);
    c->n = 1;
    c->pt[0].m = 1;
    c->pt[0].eff = v;
    return NULL;
  }
  if (n->kind != RG_NODE_MAP)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos,
                        "%s: expected a fraction or a mapping of %s to fraction, like '%s'", label,
                        axis, example);
  if (n->n < 1 || n->n > RG_EFF_POINTS)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: expected 1 to %d points, got %zu", label,
                        RG_EFF_POINTS, n->n);
  for (size_t i = 0; i < n->n; i++) {
    char what[96];
    snprintf(what, sizeof what, "%s key", label);
    double m, e;
    RG_RETURN_IF_ERROR(rg_node_num(n->keys[i], what, 1, 1e9, &m));
    snprintf(what, sizeof what, "%s.%s", label, n->keys[i]->scalar);
    RG_RETURN_IF_ERROR(rg_node_num(n->items[i], what, 0, 1, &e));
    if (e == 0)
      return rg_status_at(RG_INVALID_ARGUMENT, &n->items[i]->pos, "%s: must be more than zero",
                          what);
    if (i > 0 && m <= c->pt[i - 1].m)
      return rg_status_at(RG_INVALID_ARGUMENT, &n->keys[i]->pos,
                          "%s: %s %g does not follow %g; list points by increasing %s", label, key,
                          m, c->pt[i - 1].m, key);
    c->pt[i].m = m;
    c->pt[i].eff = e;
  }
  c->n = (int)n->n;
  return NULL;
}

// Keys of efficiency.compute: every dtype, and `all` for dtypes not listed.
// A mapping of compute dtype to a curve of M, each into curves[t], and the
// key `extra` (when not NULL) into *extra_curve; other keys are refused.
static rg_status_t read_dtype_curves(const rg_node_t *n, const char *what, const char *extra,
                                     rg_eff_curve_t curves[RG_DTYPE_COMPUTE_COUNT],
                                     rg_eff_curve_t *extra_curve) {
  const char *keys[RG_DTYPE_COMPUTE_COUNT + 2];
  fill_dtype_keys(keys, extra);
  RG_RETURN_IF_ERROR(rg_node_check_keys(n, keys, what));
  for (int t = 0; t < RG_DTYPE_COMPUTE_COUNT + (extra != NULL); t++) {
    const rg_node_t *k = rg_node_get(n, keys[t]);
    if (!k) continue;
    char label[64];
    rg_label(label, sizeof label, what, keys[t]);
    RG_RETURN_IF_ERROR(
        rg_read_curve(k, label, t < RG_DTYPE_COMPUTE_COUNT ? &curves[t] : extra_curve));
  }
  return NULL;
}

static rg_status_t rg_read_efficiency(const rg_node_t *root, rg_device_class_t *c) {
  const rg_node_t *e;
  RG_RETURN_IF_ERROR(rg_want(root, "efficiency", "device class", 0, NULL, &e));
  if (!e) return NULL;
  static const char *const keys[] = {
      "compute",           "memory", "memory_by_m", "attention", "attention_by_context",
      "attention_compute", "link",   "experts",     "source",    NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(e, keys, "efficiency"));
  RG_RETURN_IF_ERROR(rg_read_fraction(e, "efficiency", "memory", &c->eff_memory));
  RG_RETURN_IF_ERROR(rg_read_fraction(e, "efficiency", "attention", &c->eff_attention));
  RG_RETURN_IF_ERROR(
      rg_read_fraction(e, "efficiency", "attention_compute", &c->eff_attention_compute));
  RG_RETURN_IF_ERROR(rg_read_fraction(e, "efficiency", "link", &c->eff_link));
  RG_RETURN_IF_ERROR(rg_read_fraction(e, "efficiency", "experts", &c->eff_experts));
  RG_RETURN_IF_ERROR(rg_read_text(e, "efficiency", "efficiency", "source", 0, c->eff_source,
                                  sizeof(c->eff_source)));
  const rg_node_t *an;
  RG_RETURN_IF_ERROR(rg_want(e, "attention_by_context", "efficiency", 0, NULL, &an));
  if (an && an->kind != RG_NODE_MAP)
    return rg_status_at(RG_INVALID_ARGUMENT, &an->pos,
                        "efficiency.attention_by_context: expected a mapping of context positions "
                        "to fraction, like '{ 128: 0.2, 4096: 0.3 }'");
  if (an)
    RG_RETURN_IF_ERROR(rg_read_curve_on(an, "efficiency.attention_by_context", "context positions",
                                        "context", "{ 128: 0.2, 4096: 0.3 }",
                                        &c->eff_attention_ctx));
  const rg_node_t *mn;
  RG_RETURN_IF_ERROR(rg_want(e, "memory_by_m", "efficiency", 0, NULL, &mn));
  if (mn && mn->kind != RG_NODE_MAP)
    return rg_status_at(RG_INVALID_ARGUMENT, &mn->pos,
                        "efficiency.memory_by_m: expected a mapping of dtype to a curve of GEMM M "
                        "to fraction, like '{ bf16: { 1: 0.98, 8: 0.8 } }'");
  if (mn)
    RG_RETURN_IF_ERROR(
        read_dtype_curves(mn, "efficiency.memory_by_m", NULL, c->eff_memory_m, NULL));
  const rg_node_t *cn;
  RG_RETURN_IF_ERROR(rg_want(e, "compute", "efficiency", 0, NULL, &cn));
  if (!cn) return NULL;
  // A plain fraction or one curve applies to every dtype.
  if (cn->kind == RG_NODE_SCALAR ||
      (cn->kind == RG_NODE_MAP && cn->n > 0 && cn->keys[0]->scalar &&
       cn->keys[0]->scalar[0] >= '0' && cn->keys[0]->scalar[0] <= '9')) {
    for (int t = 0; t < RG_DTYPE_COMPUTE_COUNT; t++) c->eff_compute[t].n = 0;
    return rg_read_curve(cn, "efficiency.compute", &c->eff_compute_all);
  }
  return read_dtype_curves(cn, "efficiency.compute", "all", c->eff_compute, &c->eff_compute_all);
}

// overhead.first_by_op: an op kind's name to what its first op paid,
// `{ matmul: 60 ms, rmsnorm: 12 ms }` (rg_device_class_t.first_by_op).
static rg_status_t read_first_by_op(const rg_node_t *o, rg_device_class_t *c) {
  const char *label = "overhead.first_by_op";
  const rg_node_t *n;
  RG_RETURN_IF_ERROR(rg_want(o, "first_by_op", "overhead", 0, NULL, &n));
  c->n_first_by_op = 0;
  if (!n) return NULL;
  if (n->kind != RG_NODE_MAP)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos,
                        "%s: expected a mapping of op kinds to a time, like "
                        "'{ matmul: 60 ms, rmsnorm: 12 ms }'",
                        label);
  if (n->n > RG_CLASS_FIRST_OPS)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: at most %d op kinds, got %zu", label,
                        RG_CLASS_FIRST_OPS, n->n);
  for (size_t i = 0; i < n->n; i++) {
    const char *op = n->keys[i]->scalar;
    size_t len = op ? strlen(op) : 0;
    int ok = len > 0 && len < sizeof c->first_by_op[0].op;
    for (size_t k = 0; ok && k < len; k++)
      ok = (op[k] >= 'a' && op[k] <= 'z') || (op[k] >= '0' && op[k] <= '9') || op[k] == '_';
    if (!ok)
      return rg_status_at(RG_INVALID_ARGUMENT, &n->keys[i]->pos,
                          "%s: '%s' is not an op kind's name (lower-case letters, digits and '_', "
                          "like matmul or kv_write)",
                          label, op ? op : "");
    double sec;
    RG_RETURN_IF_ERROR(rg_read_quantity(n, label, label, op, RG_UNIT_TIME, 1, 1, &sec));
    snprintf(c->first_by_op[i].op, sizeof c->first_by_op[i].op, "%s", op);
    c->first_by_op[i].seconds = sec;
    c->n_first_by_op = (int)i + 1;
  }
  return NULL;
}

static rg_status_t rg_read_overhead(const rg_node_t *root, rg_device_class_t *c) {
  const rg_node_t *o;
  RG_RETURN_IF_ERROR(rg_want(root, "overhead", "device class", 0, NULL, &o));
  if (!o) return NULL;
  static const char *const keys[] = {"step", "layer", "first", "first_by_op", "source", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(o, keys, "overhead"));
  RG_RETURN_IF_ERROR(read_first_by_op(o, c));
  // Zero is meaningful for both: a part with no fixed cost at that level.
  RG_RETURN_IF_ERROR(
      rg_read_quantity(o, "overhead", "overhead", "step", RG_UNIT_TIME, 0, 1, &c->step_cost));
  RG_RETURN_IF_ERROR(
      rg_read_quantity(o, "overhead", "overhead", "layer", RG_UNIT_TIME, 0, 1, &c->layer_floor));
  RG_RETURN_IF_ERROR(
      rg_read_quantity(o, "overhead", "overhead", "first", RG_UNIT_TIME, 0, 1, &c->process_first));
  return rg_read_text(o, "overhead", "overhead", "source", 0, c->overhead_source,
                      sizeof(c->overhead_source));
}

// stages.KIND.by_tokens: what a call pays beyond its roofline at a few
// token counts, `{ 1: 14 us, 8: 49 us, 256: 600 us }` (rg_stage_figures_t).
static rg_status_t read_by_tokens(const rg_node_t *stage, const char *path, rg_stage_figures_t *f) {
  char label[96];
  rg_label(label, sizeof label, path, "by_tokens");
  const rg_node_t *n;
  RG_RETURN_IF_ERROR(rg_want(stage, "by_tokens", path, 0, NULL, &n));
  if (!n) return NULL;
  if (n->kind != RG_NODE_MAP)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos,
                        "%s: expected a mapping of tokens per call to a time, like "
                        "'{ 1: 14 us, 64: 190 us }'",
                        label);
  if (n->n < 1 || n->n > RG_STAGE_TOKEN_POINTS)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: expected 1 to %d points, got %zu", label,
                        RG_STAGE_TOKEN_POINTS, n->n);
  for (size_t i = 0; i < n->n; i++) {
    char what[128];
    snprintf(what, sizeof what, "%s key", label);
    double tokens, sec;
    RG_RETURN_IF_ERROR(rg_node_num(n->keys[i], what, 1, 1e9, &tokens));
    if (i > 0 && tokens <= f->by_tokens[i - 1].tokens)
      return rg_status_at(RG_INVALID_ARGUMENT, &n->keys[i]->pos,
                          "%s: %g tokens does not follow %g; list points by increasing tokens",
                          label, tokens, f->by_tokens[i - 1].tokens);
    RG_RETURN_IF_ERROR(
        rg_read_quantity(n, label, label, n->keys[i]->scalar, RG_UNIT_TIME, 1, 1, &sec));
    f->by_tokens[i] = (rg_stage_point_t){tokens, sec};
  }
  f->n_points = (int)n->n;
  return NULL;
}

// `stages:` maps a stage kind to its own figures (rg_stage_figures_t):
//   stages: { attention: { call: 52 us, token: 1.2 us, efficiency: 0.9, first: 3 ms }, ... }
// Kinds left out keep none: the class-wide figures alone price them.
static rg_status_t rg_read_stages(const rg_node_t *root, rg_device_class_t *c) {
  const rg_node_t *st;
  RG_RETURN_IF_ERROR(rg_want(root, "stages", "device class", 0, NULL, &st));
  if (!st) return NULL;
  static const char *const keys[] = {"embed", "attention", "ffn", "lm_head", "source", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(st, keys, "stages"));
  static const char *const fkeys[] = {"call", "token",     "efficiency", "first",
                                      "cold", "by_tokens", NULL};
  for (int k = 0; k < RG_STAGE_SLOTS; k++) {
    const rg_node_t *n = rg_node_get(st, keys[k]);
    if (!n) continue;
    char path[64];
    snprintf(path, sizeof path, "stages.%s", keys[k]);
    RG_RETURN_IF_ERROR(rg_node_check_keys(n, fkeys, path));
    rg_stage_figures_t f = {0};
    RG_RETURN_IF_ERROR(rg_read_quantity(n, path, path, "call", RG_UNIT_TIME, 0, 1, &f.call));
    RG_RETURN_IF_ERROR(rg_read_quantity(n, path, path, "token", RG_UNIT_TIME, 0, 1, &f.token));
    RG_RETURN_IF_ERROR(rg_read_quantity(n, path, path, "first", RG_UNIT_TIME, 0, 1, &f.first));
    RG_RETURN_IF_ERROR(rg_read_quantity(n, path, path, "cold", RG_UNIT_TIME, 0, 1, &f.cold));
    const rg_node_t *e = rg_node_get(n, "efficiency");
    if (e) {
      // A stage's kernels may beat the class's curve (the FFN's wide GEMMs
      // against the curve's median): a factor, not a fraction.
      char label[96];
      rg_label(label, sizeof label, path, "efficiency");
      RG_RETURN_IF_ERROR(rg_node_num(e, label, 0, 4, &f.eff));
      if (f.eff == 0)
        return rg_status_at(RG_INVALID_ARGUMENT, &e->pos,
                            "%s: must be more than zero (it multiplies the class's "
                            "efficiencies), got '%s'",
                            label, e->scalar);
    }
    RG_RETURN_IF_ERROR(read_by_tokens(n, path, &f));
    c->stage[k] = f;
  }
  return rg_read_text(st, "stages", "stages", "source", 0, c->stage_source,
                      sizeof(c->stage_source));
}

double rg_eff_curve_at(const rg_eff_curve_t *c, double m) {
  if (!c || c->n <= 0) return 0;
  if (c->n == 1 || m <= c->pt[0].m) return c->pt[0].eff;
  if (m >= c->pt[c->n - 1].m) return c->pt[c->n - 1].eff;
  int i = 1;
  while (i < c->n - 1 && c->pt[i].m < m) i++;
  double x0 = log(c->pt[i - 1].m), x1 = log(c->pt[i].m), w = (log(m) - x0) / (x1 - x0);
  return c->pt[i - 1].eff + w * (c->pt[i].eff - c->pt[i - 1].eff);
}

double rg_class_eff_compute(const rg_device_class_t *c, rg_dtype_t t, double m) {
  if ((unsigned)t < RG_DTYPE_COUNT) t = rg_dtype_compute(t);
  if ((unsigned)t < RG_DTYPE_COMPUTE_COUNT && c->eff_compute[t].n > 0)
    return rg_eff_curve_at(&c->eff_compute[t], m);
  return rg_eff_curve_at(&c->eff_compute_all, m);
}

double rg_class_process_first(const rg_device_class_t *c, const char *const *ops, size_t n_ops) {
  if (!c->n_first_by_op || !ops) return c->process_first;
  double s = 0;
  for (size_t i = 0; i < n_ops; i++) {
    int seen = 0;
    for (size_t j = 0; j < i && !seen; j++) seen = !strcmp(ops[i], ops[j]);
    for (int k = 0; !seen && k < c->n_first_by_op; k++)
      if (!strcmp(ops[i], c->first_by_op[k].op)) s += c->first_by_op[k].seconds;
  }
  return s;
}

double rg_class_eff_attention(const rg_device_class_t *c, double context) {
  if (c->eff_attention_ctx.n > 0)
    return rg_eff_curve_at(&c->eff_attention_ctx, context < 1 ? 1 : context);
  return c->eff_attention > 0 ? c->eff_attention : c->eff_memory;
}

double rg_class_eff_memory(const rg_device_class_t *c, rg_dtype_t t, double m) {
  if ((unsigned)t < RG_DTYPE_COUNT) t = rg_dtype_compute(t);
  if ((unsigned)t < RG_DTYPE_COMPUTE_COUNT && c->eff_memory_m[t].n > 0)
    return rg_eff_curve_at(&c->eff_memory_m[t], m < 1 ? 1 : m);
  return c->eff_memory;
}

// The defaults a class without `efficiency:` gets: the roofline scaled by
// fractions typical of tuned kernels (docs/planner.md says where they come
// from), and no fixed costs.
static void rg_class_defaults(rg_device_class_t *c) {
  c->eff_compute_all.n = 1;
  c->eff_compute_all.pt[0].m = 1;
  c->eff_compute_all.pt[0].eff = 0.70;
  c->eff_memory = 0.85;
  snprintf(c->eff_source, sizeof c->eff_source, "ridge default (no efficiency: in the class file)");
}

static rg_status_t rg_parse_class(const rg_node_t *root, const char *path, rg_device_class_t *c) {
  static const char *const keys[] = {"name",     "description", "kind",  "peak",  "memory",
                                     "sram",     "power",       "price", "links", "efficiency",
                                     "overhead", "stages",      NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(root, keys, "device class"));
  RG_RETURN_IF_ERROR(rg_copy_path(path, c->path, sizeof(c->path)));
  RG_RETURN_IF_ERROR(rg_read_name(root, "device class", path, c->name, sizeof(c->name)));
  RG_RETURN_IF_ERROR(rg_read_text(root, "", "device class", "description", 0, c->description,
                                  sizeof(c->description)));
  const rg_node_t *kind;
  RG_RETURN_IF_ERROR(rg_want(root, "kind", "device class", 1,
                             "gpu, lpu, wafer, lpddr-card, accelerator, cpu, host-dram or ssd",
                             &kind));
  int k;
  RG_RETURN_IF_ERROR(
      rg_read_choice(kind, "kind", "device kind", rg_kind_names, RG_DEVICE_KIND_COUNT, &k));
  c->kind = (rg_device_kind_t)k;
  RG_RETURN_IF_ERROR(rg_read_peak(root, c));
  RG_RETURN_IF_ERROR(rg_read_memory(root, c));
  RG_RETURN_IF_ERROR(
      rg_read_quantity(root, "", "device class", "sram", RG_UNIT_BYTES, 0, 0, &c->sram));
  RG_RETURN_IF_ERROR(
      rg_read_quantity(root, "", "device class", "power", RG_UNIT_POWER, 1, 0, &c->power));
  RG_RETURN_IF_ERROR(
      rg_read_quantity(root, "", "device class", "price", RG_UNIT_PRICE, 1, 0, &c->price));
  RG_RETURN_IF_ERROR(rg_read_links(root, c));
  rg_class_defaults(c);
  RG_RETURN_IF_ERROR(rg_read_efficiency(root, c));
  RG_RETURN_IF_ERROR(rg_read_overhead(root, c));
  return rg_read_stages(root, c);
}

rg_status_t rg_device_class_load(const char *path, rg_device_class_t **out) {
  *out = NULL;
  rg_doc_t *doc = NULL;
  rg_status_t st = rg_doc_load_file(path, &doc);
  if (st) return st;
  rg_device_class_t *c = calloc(1, sizeof(*c));
  if (!c) {
    st = rg_oom(path);
    goto fail_doc;
  }
  st = rg_parse_class(rg_doc_root(doc), path, c);
  if (st) goto fail_class;
  rg_doc_destroy(doc);
  *out = c;
  return NULL;

fail_class:
  free(c);
fail_doc:
  rg_doc_destroy(doc);
  return st;
}

// ----- Calibrated classes ------------------------------------------------------
//
// configs/devices/calibrated/NAME.yaml overlays class NAME with figures
// measured on a real device (`ridge profile` writes them):
//
//   name: h100-sxm                      # the class it calibrates
//   measured: { by: "ridge profile", date: 2025-06-01, device: "cuda:0 ..." }
//   memory: [ { name: hbm3, bandwidth: 2.95 TB/s } ]   # tiers by name; capacity
//                                                      # and/or bandwidth
//   peak: { bf16: 760 TFLOPS }          # dtypes given replace the datasheet's
//   efficiency: { ... }                 # as in a class file
//   overhead: { ... }                   # as in a class file
//   stages: { ... }                     # as in a class file
//
// Every figure it gives replaces the datasheet's; the rest stay. `measured`
// is required, so a calibrated file always says where its figures came from.

static rg_status_t rg_overlay_memory(const rg_node_t *mem, rg_device_class_t *c) {
  RG_RETURN_IF_ERROR(rg_node_expect(mem, RG_NODE_SEQ, "memory"));
  static const char *const keys[] = {"name", "capacity", "bandwidth", NULL};
  for (size_t i = 0; i < mem->n; i++) {
    const rg_node_t *tier = mem->items[i];
    char path[32], name[32];
    snprintf(path, sizeof(path), "memory[%zu]", i);
    RG_RETURN_IF_ERROR(rg_node_check_keys(tier, keys, path));
    RG_RETURN_IF_ERROR(rg_read_text(tier, path, path, "name", 1, name, sizeof(name)));
    int j = 0;
    while (j < c->n_mem && strcmp(c->mem[j].name, name)) j++;
    if (j == c->n_mem)
      return rg_status_at(RG_INVALID_ARGUMENT, &rg_node_get(tier, "name")->pos,
                          "%s.name: class '%s' has no memory tier '%s'; its tiers are %s%s%s", path,
                          c->name, name, c->mem[0].name, c->n_mem > 1 ? ", " : "",
                          c->n_mem > 1 ? c->mem[1].name : "");
    RG_RETURN_IF_ERROR(
        rg_read_quantity(tier, path, path, "capacity", RG_UNIT_BYTES, 0, 0, &c->mem[j].capacity));
    RG_RETURN_IF_ERROR(rg_read_quantity(tier, path, path, "bandwidth", RG_UNIT_BANDWIDTH, 0, 0,
                                        &c->mem[j].bandwidth));
  }
  return NULL;
}

static rg_status_t rg_apply_calibration(const rg_node_t *root, const char *path,
                                        rg_device_class_t *c) {
  static const char *const keys[] = {"name",       "description", "measured", "peak",   "memory",
                                     "efficiency", "overhead",    "links",    "stages", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(root, keys, "calibrated class"));
  char name[64];
  RG_RETURN_IF_ERROR(rg_read_name(root, "calibrated class", path, name, sizeof(name)));
  if (strcmp(name, c->name))
    return rg_status_at(RG_INVALID_ARGUMENT, &rg_node_get(root, "name")->pos,
                        "name '%s' calibrates a different class from '%s'", name, c->name);
  const rg_node_t *m;
  RG_RETURN_IF_ERROR(rg_want(root, "measured", "calibrated class", 1,
                             "{ by, date, device }: what measured these figures, and when", &m));
  static const char *const mkeys[] = {"by", "date", "device", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(m, mkeys, "measured"));
  char by[96] = "", date[32] = "", device[96] = "";
  RG_RETURN_IF_ERROR(rg_read_text(m, "measured", "measured", "by", 1, by, sizeof by));
  RG_RETURN_IF_ERROR(rg_read_text(m, "measured", "measured", "date", 1, date, sizeof date));
  RG_RETURN_IF_ERROR(rg_read_text(m, "measured", "measured", "device", 0, device, sizeof device));
  RG_RETURN_IF_ERROR(rg_copy_path(path, c->calibration_path, sizeof(c->calibration_path)));
  snprintf(c->calibration_source, sizeof(c->calibration_source), "measured by %s on %s%s%s", by,
           date, device[0] ? ", " : "", device);
  RG_RETURN_IF_ERROR(rg_read_text(root, "", "calibrated class", "description", 0, c->description,
                                  sizeof(c->description)));
  const rg_node_t *peak = rg_node_get(root, "peak");
  if (peak) {
    if (!rg_class_computes(c))
      return rg_status_at(RG_INVALID_ARGUMENT, rg_node_key_pos(root, "peak"),
                          "peak: class '%s' is a %s tier and does no compute", c->name,
                          rg_device_kind_name(c->kind));
    const char *rg_peak_keys[RG_DTYPE_COMPUTE_COUNT + 2];
    fill_dtype_keys(rg_peak_keys, "tf32");
    RG_RETURN_IF_ERROR(rg_node_check_keys(peak, rg_peak_keys, "peak"));
    for (int t = 0; t < RG_DTYPE_COMPUTE_COUNT; t++)
      RG_RETURN_IF_ERROR(rg_read_quantity(peak, "peak", "peak", rg_peak_keys[t], RG_UNIT_FLOPS, 0,
                                          0, &c->peak[t]));
  }
  const rg_node_t *mem = rg_node_get(root, "memory");
  if (mem) RG_RETURN_IF_ERROR(rg_overlay_memory(mem, c));
  RG_RETURN_IF_ERROR(rg_read_links(root, c));
  // A calibrated efficiency block says where it came from by `measured`.
  char eff_src[sizeof c->eff_source], ovh_src[sizeof c->overhead_source];
  snprintf(eff_src, sizeof eff_src, "%s", c->eff_source);
  snprintf(ovh_src, sizeof ovh_src, "%s", c->overhead_source);
  c->eff_source[0] = c->overhead_source[0] = 0;
  RG_RETURN_IF_ERROR(rg_read_efficiency(root, c));
  RG_RETURN_IF_ERROR(rg_read_overhead(root, c));
  if (rg_node_get(root, "stages")) {
    c->stage_source[0] = 0;
    RG_RETURN_IF_ERROR(rg_read_stages(root, c));
    if (!c->stage_source[0])
      snprintf(c->stage_source, sizeof c->stage_source, "%s", c->calibration_source);
  }
  if (!c->eff_source[0])
    snprintf(c->eff_source, sizeof c->eff_source, "%s",
             rg_node_get(root, "efficiency") ? c->calibration_source : eff_src);
  if (!c->overhead_source[0])
    snprintf(c->overhead_source, sizeof c->overhead_source, "%s",
             rg_node_get(root, "overhead") ? c->calibration_source : ovh_src);
  c->calibrated = 1;
  return NULL;
}

rg_status_t rg_device_class_calibrate(rg_device_class_t *c, const char *path) {
  rg_doc_t *doc = NULL;
  RG_RETURN_IF_ERROR(rg_doc_load_file(path, &doc));
  rg_status_t st = rg_apply_calibration(rg_doc_root(doc), path, c);
  rg_doc_destroy(doc);
  return st;
}

// ----- Catalog -----------------------------------------------------------------

void rg_catalog_destroy(rg_catalog_t *cat) {
  if (!cat) return;
  for (size_t i = 0; i < cat->n; i++) free(cat->classes[i]);
  for (size_t i = 0; i < cat->n_sheets; i++) free(cat->sheets[i]);
  free(cat->classes);
  free(cat->sheets);
  free(cat);
}

// Overlays every calibrated/*.yaml on its class, keeping a copy of the
// datasheet figures for side-by-side display.
static rg_status_t rg_catalog_calibrate(rg_catalog_t *cat, const char *dir) {
  char cdir[1100];
  snprintf(cdir, sizeof cdir, "%s/calibrated", dir);
  struct dirent **list = NULL;
  int n = rg_list_yaml(cdir, &list);
  if (n < 0) return errno == ENOENT ? NULL : rg_status_make(RG_IO, "%s: %s", cdir, strerror(errno));
  rg_status_t st = NULL;
  cat->sheets = calloc(n ? (size_t)n : 1, sizeof(*cat->sheets));
  if (!cat->sheets) {
    st = rg_oom(cdir);
    goto done;
  }
  for (int i = 0; i < n && !st; i++) {
    char path[1400], stem[256];
    snprintf(path, sizeof(path), "%s/%s", cdir, list[i]->d_name);
    rg_file_stem(path, stem, sizeof stem);
    rg_device_class_t *c = NULL;
    for (size_t j = 0; j < cat->n; j++)
      if (!strcmp(cat->classes[j]->name, stem)) c = cat->classes[j];
    if (!c) {
      st = rg_catalog_unknown(cat, stem, NULL);
      st = rg_status_wrap(st, "%s: a calibrated file must be named after a class in %s", path, dir);
      break;
    }
    rg_device_class_t *sheet = malloc(sizeof(*sheet));
    if (!sheet) {
      st = rg_oom(path);
      break;
    }
    *sheet = *c;
    cat->sheets[cat->n_sheets++] = sheet;
    c->datasheet = sheet;
    st = rg_device_class_calibrate(c, path);
  }
done:
  rg_free_list(list, n);
  return st;
}

rg_status_t rg_catalog_load(const char *config_dir, rg_catalog_t **out) {
  *out = NULL;
  rg_status_t st = NULL;
  rg_catalog_t *cat = NULL;
  char dir[1024];
  if (snprintf(dir, sizeof(dir), "%s/devices", config_dir) >= (int)sizeof(dir))
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: config folder path is too long", config_dir);
  struct dirent **list = NULL;
  int n = rg_list_yaml(dir, &list);
  if (n < 0)
    return rg_status_make(errno == ENOENT || errno == ENOTDIR ? RG_NOT_FOUND : RG_IO,
                          "%s: %s; expected the folder of device-class files (*.yaml)", dir,
                          strerror(errno));
  if (n == 0) {
    st = rg_status_make(RG_NOT_FOUND, "%s: no device-class files (*.yaml)", dir);
    goto fail_list;
  }
  cat = calloc(1, sizeof(*cat));
  if (!cat) {
    st = rg_oom(dir);
    goto fail_list;
  }
  st = rg_copy_path(config_dir, cat->dir, sizeof(cat->dir));
  if (st) goto fail_cat;
  cat->classes = calloc((size_t)n, sizeof(*cat->classes));
  if (!cat->classes) {
    st = rg_oom(dir);
    goto fail_cat;
  }
  for (int i = 0; i < n; i++) {
    char path[1536];
    snprintf(path, sizeof(path), "%s/%s", dir, list[i]->d_name);
    st = rg_device_class_load(path, &cat->classes[cat->n]);
    if (st) goto fail_cat;
    cat->n++;
  }
  st = rg_catalog_calibrate(cat, dir);
  if (st) goto fail_cat;
  rg_free_list(list, n);
  *out = cat;
  return NULL;

fail_cat:
  rg_catalog_destroy(cat);
fail_list:
  rg_free_list(list, n);
  return st;
}

const rg_device_class_t *rg_catalog_find(const rg_catalog_t *cat, const char *name) {
  for (size_t i = 0; i < cat->n; i++)
    if (!strcmp(cat->classes[i]->name, name)) return cat->classes[i];
  return NULL;
}

rg_status_t rg_catalog_unknown(const rg_catalog_t *cat, const char *name, const rg_pos_t *pos) {
  const char **names = calloc(cat->n ? cat->n : 1, sizeof(*names));
  if (!names) return rg_oom("the device catalog");
  for (size_t i = 0; i < cat->n; i++) names[i] = cat->classes[i]->name;
  char list[1024];
  rg_join(names, cat->n, list, sizeof(list));
  const char *near = rg_suggest(name, names, cat->n);
  rg_status_t st =
      near ? rg_status_at(RG_NOT_FOUND, pos,
                          "unknown device class '%s'; did you mean '%s'? known: %s", name, near,
                          list)
           : rg_status_at(RG_NOT_FOUND, pos, "unknown device class '%s'; known: %s", name, list);
  free(names);
  return st;
}

// ----- Resolving names to files ------------------------------------------------

static rg_status_t rg_unknown_name(const char *dir, const char *what, const char *name) {
  struct dirent **list = NULL;
  int n = rg_list_yaml(dir, &list);
  if (n <= 0) {
    if (n == 0) free(list);
    return rg_status_make(RG_NOT_FOUND, "unknown %s '%s'; %s holds no .yaml files", what, name,
                          dir);
  }
  rg_status_t st = NULL;
  // Stems are cut in place: each d_name loses its ".yaml".
  const char **stems = calloc((size_t)n, sizeof(*stems));
  if (!stems) {
    st = rg_oom(dir);
    goto done;
  }
  for (int i = 0; i < n; i++) {
    list[i]->d_name[strlen(list[i]->d_name) - strlen(".yaml")] = 0;
    stems[i] = list[i]->d_name;
  }
  char avail[1024];
  rg_join(stems, (size_t)n, avail, sizeof(avail));
  const char *near = rg_suggest(name, stems, (size_t)n);
  st = near ? rg_status_make(RG_NOT_FOUND, "unknown %s '%s'; did you mean '%s'? available: %s",
                             what, name, near, avail)
            : rg_status_make(RG_NOT_FOUND, "unknown %s '%s'; available: %s", what, name, avail);
  free(stems);
done:
  rg_free_list(list, n);
  return st;
}

rg_status_t rg_config_resolve(const char *config_dir, const char *sub, const char *what,
                              const char *name_or_path, char *out, size_t out_len) {
  if (!name_or_path || !*name_or_path)
    return rg_status_make(RG_INVALID_ARGUMENT, "no %s given; expected a name or a file path", what);
  struct stat sb;
  int is_path = strchr(name_or_path, '/') || rg_ends_with(name_or_path, ".yaml") ||
                rg_ends_with(name_or_path, ".yml") || rg_ends_with(name_or_path, ".json");
  if (is_path) {
    if (stat(name_or_path, &sb) != 0)
      return rg_status_make(errno == ENOENT || errno == ENOTDIR ? RG_NOT_FOUND : RG_IO,
                            "%s file '%s': %s", what, name_or_path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
      return rg_status_make(RG_INVALID_ARGUMENT, "%s file '%s' is a folder; expected a .yaml file",
                            what, name_or_path);
    if (strlen(name_or_path) >= out_len)
      return rg_status_make(RG_INVALID_ARGUMENT, "%s file '%s': path is too long", what,
                            name_or_path);
    memcpy(out, name_or_path, strlen(name_or_path) + 1);
    return NULL;
  }
  if (!config_dir)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s '%s' is a name, but no config folder is set",
                          what, name_or_path);
  char dir[1024];
  if (snprintf(dir, sizeof(dir), "%s/%s", config_dir, sub) >= (int)sizeof(dir) ||
      (size_t)snprintf(out, out_len, "%s/%s.yaml", dir, name_or_path) >= out_len)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s '%s': path under %s is too long", what,
                          name_or_path, config_dir);
  // Anything but a folder is taken, so a FIFO is refused by the loader with
  // a message saying what it is, rather than reported as an unknown name.
  if (stat(out, &sb) == 0 && !S_ISDIR(sb.st_mode)) return NULL;
  out[0] = 0;
  return rg_unknown_name(dir, what, name_or_path);
}

// ----- Fleets ------------------------------------------------------------------

#define RG_MAX_COUNT 100000

// Device counts are ints in the structs; bounding the fleet total keeps
// every sum of them in range.
#define RG_FLEET_MAX_DEVICES 1000000000LL

static rg_status_t rg_read_count(const rg_node_t *map, const char *path, const char *what,
                                 int *out) {
  const rg_node_t *n;
  RG_RETURN_IF_ERROR(rg_want(map, "count", what, 1, "a whole number from 1 to 100000", &n));
  char label[64];
  rg_label(label, sizeof(label), path, "count");
  long long v;
  RG_RETURN_IF_ERROR(rg_node_int(n, label, 1, RG_MAX_COUNT, &v));
  *out = (int)v;
  return NULL;
}

// One name of `run_on:`, in the form `ridge devices` prints: a driver
// (lower-case letters and '_': no driver name has a digit, so "cpu0" is
// the typo it looks like) and an optional ":INDEX", 0 when left out. It is stored as "driver:index"
// so that names compare as strings. Which drivers exist is the device layer's to say, and the
// planner never touches a device, so a well-formed name no driver answers to is reported by `ridge
// run --plan`, pointing back here.
static rg_status_t rg_read_run_on_name(const rg_node_t *n, const char *label,
                                       char out[RG_RUN_ON_NAME]) {
  const char *s;
  RG_RETURN_IF_ERROR(rg_node_str(n, label, &s));
  size_t d = 0;
  while ((s[d] >= 'a' && s[d] <= 'z') || s[d] == '_') d++;
  long long index = 0;
  // Driver names are short ("level_zero" is the longest); 15 characters
  // is what the device layer stores.
  int ok = d > 0 && d < 16 && s[0] >= 'a' && s[0] <= 'z';
  if (ok && s[d] == ':') {
    const char *p = s + d + 1;
    size_t k = 0;
    while (p[k] >= '0' && p[k] <= '9' && k < 5) index = index * 10 + (p[k++] - '0');
    ok = k > 0 && !p[k] && index <= 1023;
  } else if (ok && s[d]) {
    ok = 0;
  }
  if (!ok)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos,
                        "%s: '%s' is not a device name; expected DRIVER:INDEX as `ridge devices` "
                        "lists them, like cpu:0 or opencl:0",
                        label, s);
  snprintf(out, RG_RUN_ON_NAME, "%.*s:%lld", (int)d, s, index);
  return NULL;
}

// `run_on:` of a fleet entry: one device name or a list tried in order.
static rg_status_t rg_read_run_on(const rg_node_t *d, const char *dpath, rg_node_devices_t *nd) {
  const rg_node_t *r;
  RG_RETURN_IF_ERROR(rg_want(d, "run_on", dpath, 0, NULL, &r));
  if (!r) return NULL;
  char label[128];
  rg_label(label, sizeof(label), dpath, "run_on");
  snprintf(nd->run_on_where, sizeof(nd->run_on_where), "%s:%d:%d", r->pos.file ? r->pos.file : "?",
           r->pos.line, r->pos.col);
  if (r->kind == RG_NODE_SCALAR) {
    RG_RETURN_IF_ERROR(rg_read_run_on_name(r, label, nd->run_on[0]));
    nd->n_run_on = 1;
    return NULL;
  }
  if (r->kind != RG_NODE_SEQ)
    return rg_status_at(RG_INVALID_ARGUMENT, &r->pos,
                        "%s: expected a device name like cpu:0, or a list of them tried in order "
                        "like [opencl:0, cpu:0]; got %s",
                        label, rg_node_kind_name(r->kind));
  if (r->n == 0)
    return rg_status_at(RG_INVALID_ARGUMENT, &r->pos,
                        "%s: the list is empty; name at least one device, like cpu:0", label);
  if (r->n > RG_MAX_RUN_ON)
    return rg_status_at(RG_INVALID_ARGUMENT, &r->items[RG_MAX_RUN_ON]->pos,
                        "%s: at most %d devices to try, got %zu", label, RG_MAX_RUN_ON, r->n);
  for (size_t i = 0; i < r->n; i++) {
    char ilabel[144];
    snprintf(ilabel, sizeof(ilabel), "%s[%zu]", label, i);
    if (r->items[i]->kind != RG_NODE_SCALAR)
      return rg_status_at(RG_INVALID_ARGUMENT, &r->items[i]->pos,
                          "%s: expected a device name like cpu:0; got %s", ilabel,
                          rg_node_kind_name(r->items[i]->kind));
    RG_RETURN_IF_ERROR(rg_read_run_on_name(r->items[i], ilabel, nd->run_on[i]));
    for (size_t j = 0; j < i; j++)
      if (!strcmp(nd->run_on[j], nd->run_on[i]))
        return rg_status_at(RG_INVALID_ARGUMENT, &r->items[i]->pos,
                            "%s: %s is already %s[%zu]; each device is tried once", ilabel,
                            nd->run_on[i], label, j);
  }
  nd->n_run_on = (int)r->n;
  return NULL;
}

static rg_status_t rg_read_node_devices(const rg_node_t *devs, const char *path,
                                        const rg_catalog_t *cat, rg_fleet_node_t *node) {
  char label[64];
  rg_label(label, sizeof(label), path, "devices");
  RG_RETURN_IF_ERROR(rg_node_expect(devs, RG_NODE_SEQ, label));
  if (devs->n == 0)
    return rg_status_at(RG_INVALID_ARGUMENT, &devs->pos,
                        "%s: expected at least one { class, count }", label);
  if (devs->n > RG_MAX_NODE_DEVICES)
    return rg_status_at(RG_INVALID_ARGUMENT, &devs->items[RG_MAX_NODE_DEVICES]->pos,
                        "%s: a node holds at most %d device classes, got %zu", label,
                        RG_MAX_NODE_DEVICES, devs->n);
  static const char *const keys[] = {"class", "count", "run_on", NULL};
  for (size_t i = 0; i < devs->n; i++) {
    const rg_node_t *d = devs->items[i];
    char dpath[96];
    snprintf(dpath, sizeof(dpath), "%s[%zu]", label, i);
    RG_RETURN_IF_ERROR(rg_node_check_keys(d, keys, dpath));
    const rg_node_t *cls;
    RG_RETURN_IF_ERROR(rg_want(d, "class", dpath, 1, "a device-class name", &cls));
    char clabel[112];
    rg_label(clabel, sizeof(clabel), dpath, "class");
    const char *name;
    RG_RETURN_IF_ERROR(rg_node_str(cls, clabel, &name));
    const rg_device_class_t *c = rg_catalog_find(cat, name);
    if (!c) return rg_catalog_unknown(cat, name, &cls->pos);
    for (int j = 0; j < node->n_devs; j++)
      if (node->devs[j].cls == c)
        return rg_status_at(RG_INVALID_ARGUMENT, &cls->pos,
                            "%s: class '%s' is listed twice in this node; give one entry with the "
                            "total count",
                            clabel, name);
    rg_node_devices_t *nd = &node->devs[node->n_devs];
    nd->cls = c;
    RG_RETURN_IF_ERROR(rg_read_count(d, dpath, dpath, &nd->count));
    RG_RETURN_IF_ERROR(rg_read_run_on(d, dpath, nd));
    node->n_devs++;
  }
  return NULL;
}

static rg_status_t rg_parse_fleet(const rg_node_t *root, const char *path, const rg_catalog_t *cat,
                                  rg_fleet_t *f) {
  static const char *const keys[] = {"name", "description", "provider", "network", "nodes", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(root, keys, "fleet"));
  RG_RETURN_IF_ERROR(rg_copy_path(path, f->path, sizeof(f->path)));
  RG_RETURN_IF_ERROR(rg_read_name(root, "fleet", path, f->name, sizeof(f->name)));
  RG_RETURN_IF_ERROR(
      rg_read_text(root, "", "fleet", "description", 0, f->description, sizeof(f->description)));
  RG_RETURN_IF_ERROR(
      rg_read_text(root, "", "fleet", "provider", 1, f->provider, sizeof(f->provider)));
  const rg_node_t *net;
  RG_RETURN_IF_ERROR(rg_want(root, "network", "fleet", 1, "{ bandwidth, latency }", &net));
  RG_RETURN_IF_ERROR(rg_read_link(net, "network", 0, &f->network));
  // An unnamed network is labelled by its libfabric provider.
  if (!f->network.name[0])
    snprintf(f->network.name, sizeof(f->network.name), "%.*s", (int)sizeof(f->network.name) - 1,
             f->provider);

  const rg_node_t *nodes;
  RG_RETURN_IF_ERROR(rg_want(root, "nodes", "fleet", 1, "a list of node groups", &nodes));
  RG_RETURN_IF_ERROR(rg_node_expect(nodes, RG_NODE_SEQ, "nodes"));
  if (nodes->n == 0)
    return rg_status_at(RG_INVALID_ARGUMENT, &nodes->pos,
                        "nodes: expected at least one node group { name, count, devices }");
  if (nodes->n > RG_MAX_FLEET_NODES)
    return rg_status_at(RG_INVALID_ARGUMENT, &nodes->items[RG_MAX_FLEET_NODES]->pos,
                        "nodes: a fleet holds at most %d node groups, got %zu; merge groups of "
                        "identical nodes by raising their 'count'",
                        RG_MAX_FLEET_NODES, nodes->n);
  static const char *const node_keys[] = {"name", "count", "devices", "link", NULL};
  long long total = 0, computing = 0;
  for (size_t i = 0; i < nodes->n; i++) {
    const rg_node_t *nn = nodes->items[i];
    rg_fleet_node_t *node = &f->nodes[i];
    char npath[32];
    snprintf(npath, sizeof(npath), "nodes[%zu]", i);
    RG_RETURN_IF_ERROR(rg_node_check_keys(nn, node_keys, npath));
    RG_RETURN_IF_ERROR(rg_read_text(nn, npath, npath, "name", 1, node->name, sizeof(node->name)));
    for (size_t j = 0; j < i; j++)
      if (!strcmp(f->nodes[j].name, node->name))
        return rg_status_at(RG_INVALID_ARGUMENT, &rg_node_get(nn, "name")->pos,
                            "%s.name: '%s' is already the name of nodes[%zu]; names must differ",
                            npath, node->name, j);
    RG_RETURN_IF_ERROR(rg_read_count(nn, npath, npath, &node->count));
    const rg_node_t *devs;
    RG_RETURN_IF_ERROR(rg_want(nn, "devices", npath, 1, "a list of { class, count }", &devs));
    RG_RETURN_IF_ERROR(rg_read_node_devices(devs, npath, cat, node));
    const rg_node_t *link;
    RG_RETURN_IF_ERROR(rg_want(nn, "link", npath, 0, NULL, &link));
    if (link) {
      char lpath[48];
      rg_label(lpath, sizeof(lpath), npath, "link");
      RG_RETURN_IF_ERROR(rg_read_link(link, lpath, 0, &node->link));
      if (!node->link.name[0]) snprintf(node->link.name, sizeof(node->link.name), "node-link");
    }
    for (int j = 0; j < node->n_devs; j++) {
      long long n = (long long)node->count * node->devs[j].count;
      total += n;
      if (rg_class_computes(node->devs[j].cls)) computing += n;
    }
    if (total > RG_FLEET_MAX_DEVICES)
      return rg_status_at(RG_INVALID_ARGUMENT, &nn->pos,
                          "%s: the fleet passes %lld devices in total, more than ridge plans for",
                          npath, RG_FLEET_MAX_DEVICES);
  }
  f->n_nodes = (int)nodes->n;
  if (computing == 0)
    return rg_status_at(RG_INVALID_ARGUMENT, rg_node_key_pos(root, "nodes"),
                        "nodes: no device in this fleet computes (host-dram and ssd classes only "
                        "hold data); expected at least one gpu, lpu, wafer, lpddr-card, "
                        "accelerator or cpu class");
  return NULL;
}

rg_status_t rg_fleet_load(const char *name_or_path, const char *config_dir, const rg_catalog_t *cat,
                          rg_fleet_t **out) {
  *out = NULL;
  char path[1024];
  RG_RETURN_IF_ERROR(
      rg_config_resolve(config_dir, "fleets", "fleet", name_or_path, path, sizeof(path)));
  rg_doc_t *doc = NULL;
  rg_status_t st = rg_doc_load_file(path, &doc);
  if (st) return st;
  rg_fleet_t *f = calloc(1, sizeof(*f));
  if (!f) {
    st = rg_oom(path);
    goto fail_doc;
  }
  st = rg_parse_fleet(rg_doc_root(doc), path, cat, f);
  if (st) goto fail_fleet;
  rg_doc_destroy(doc);
  *out = f;
  return NULL;

fail_fleet:
  free(f);
fail_doc:
  rg_doc_destroy(doc);
  return st;
}

void rg_fleet_destroy(rg_fleet_t *f) {
  free(f);
}

static int rg_node_has(const rg_fleet_node_t *node, const rg_device_class_t *c) {
  for (int j = 0; j < node->n_devs; j++)
    if (node->devs[j].cls == c) return node->devs[j].count;
  return 0;
}

int rg_fleet_count(const rg_fleet_t *f, const rg_device_class_t *c) {
  long long n = 0;
  for (int i = 0; i < f->n_nodes; i++)
    n += (long long)f->nodes[i].count * rg_node_has(&f->nodes[i], c);
  return n > INT_MAX ? INT_MAX : (int)n;
}

int rg_fleet_per_node(const rg_fleet_t *f, const rg_device_class_t *c) {
  int best = 0;
  for (int i = 0; i < f->n_nodes; i++) {
    int n = rg_node_has(&f->nodes[i], c);
    if (n > best) best = n;
  }
  return best;
}

rg_link_t rg_fleet_intra_link(const rg_fleet_t *f, const rg_device_class_t *c) {
  // The node group with the most devices of c is where a multi-device group
  // of c would be placed, so its link is the one that matters.
  const rg_fleet_node_t *home = NULL;
  for (int i = 0; i < f->n_nodes; i++) {
    int n = rg_node_has(&f->nodes[i], c);
    if (n > 0 && (!home || n > rg_node_has(home, c))) home = &f->nodes[i];
  }
  if (home && home->link.bandwidth > 0) return home->link;
  if (c->scale_up.bandwidth > 0) return c->scale_up;
  if (c->host.bandwidth > 0) return c->host;
  // Nothing published: assume the least any current accelerator slot
  // offers, PCIe Gen4 x16 (32 GB/s per direction). Traffic between two such
  // devices bounces through host memory, so allow two hops of latency.
  rg_link_t pcie = {"pcie4-default", 32e9, 2e-6};
  return pcie;
}

double rg_fleet_nic_bandwidth(const rg_fleet_t *f, const rg_device_class_t *c) {
  if (c->scale_out.bandwidth > 0) return c->scale_out.bandwidth;
  int per = rg_fleet_per_node(f, c);
  return f->network.bandwidth / (per > 0 ? per : 1);
}

// ----- Workloads ---------------------------------------------------------------

// Token counts: at least one token, at most a billion (far past any context).
#define RG_TOKENS_MAX 1e9

static const char *const rg_dist_names[] = {"fixed", "uniform", "lognormal"};

static rg_status_t rg_read_tokens(const rg_node_t *map, const char *path, const char *key,
                                  int required, double min, double *out) {
  const rg_node_t *n;
  RG_RETURN_IF_ERROR(rg_want(map, key, path, required, "a number", &n));
  if (!n) return NULL;
  char label[96];
  rg_label(label, sizeof(label), path, key);
  return rg_node_num(n, label, min, RG_TOKENS_MAX, out);
}

// A token count: a plain number (fixed) or { dist: ..., ... }.
static rg_status_t rg_read_dist(const rg_node_t *root, const char *key, rg_dist_t *d) {
  const rg_node_t *n;
  RG_RETURN_IF_ERROR(
      rg_want(root, key, "workload", 1, "a number, or { dist: fixed|uniform|lognormal, ... }", &n));
  memset(d, 0, sizeof(*d));
  if (n->kind == RG_NODE_SCALAR) {
    RG_RETURN_IF_ERROR(rg_node_num(n, key, 1, RG_TOKENS_MAX, &d->mean));
    d->kind = RG_DIST_FIXED;
    d->min = d->max = d->mean;
    return NULL;
  }
  if (n->kind != RG_NODE_MAP)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos,
                        "%s: expected a number or a mapping { dist: ... }, got %s", key,
                        rg_node_kind_name(n->kind));
  static const char *const keys[] = {"dist", "value", "min", "max", "mean", "sigma", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(n, keys, key));
  const rg_node_t *dn;
  RG_RETURN_IF_ERROR(rg_want(n, "dist", key, 1, "fixed, uniform or lognormal", &dn));
  char label[64];
  rg_label(label, sizeof(label), key, "dist");
  int kind = 0;
  RG_RETURN_IF_ERROR(rg_read_choice(dn, label, "distribution", rg_dist_names, 3, &kind));
  d->kind = (rg_dist_kind_t)kind;
  // Keys another kind uses would be silently ignored here; say so instead.
  static const char *const takes[][4] = {
      {"dist", "value", NULL}, {"dist", "min", "max", NULL}, {"dist", "mean", "sigma", "max"}};
  static const char *const takes_text[] = {"dist, value", "dist, min, max",
                                           "dist, mean, sigma, max"};
  for (size_t i = 0; i < n->n; i++) {
    int ok = 0;
    for (int j = 0; j < 4 && takes[kind][j]; j++) ok |= !strcmp(n->keys[i]->scalar, takes[kind][j]);
    if (!ok)
      return rg_status_at(RG_INVALID_ARGUMENT, &n->keys[i]->pos,
                          "%s: '%s' does not apply to a %s distribution; it takes %s", key,
                          n->keys[i]->scalar, rg_dist_names[kind], takes_text[kind]);
  }
  switch (d->kind) {
    case RG_DIST_FIXED:
      RG_RETURN_IF_ERROR(rg_read_tokens(n, key, "value", 1, 1, &d->mean));
      d->min = d->max = d->mean;
      break;
    case RG_DIST_UNIFORM:
      RG_RETURN_IF_ERROR(rg_read_tokens(n, key, "min", 1, 1, &d->min));
      RG_RETURN_IF_ERROR(rg_read_tokens(n, key, "max", 1, 1, &d->max));
      if (d->max < d->min)
        return rg_status_at(RG_INVALID_ARGUMENT, &rg_node_get(n, "max")->pos,
                            "%s.max: %g is below min %g", key, d->max, d->min);
      d->mean = (d->min + d->max) / 2;
      break;
    case RG_DIST_LOGNORMAL: {
      // `mean` is the mean token count itself (not the log-space mu), as the
      // digest's figures are; max caps the tail and 0 means uncapped.
      RG_RETURN_IF_ERROR(rg_read_tokens(n, key, "mean", 1, 1, &d->mean));
      const rg_node_t *sn;
      RG_RETURN_IF_ERROR(rg_want(n, "sigma", key, 1, "the log-space spread, like 1.0", &sn));
      rg_label(label, sizeof(label), key, "sigma");
      RG_RETURN_IF_ERROR(rg_node_num(sn, label, 0, 10, &d->sigma));
      RG_RETURN_IF_ERROR(rg_read_tokens(n, key, "max", 0, 1, &d->max));
      if (d->max > 0 && d->max < d->mean)
        return rg_status_at(RG_INVALID_ARGUMENT, &rg_node_get(n, "max")->pos,
                            "%s.max: %g is below the mean %g", key, d->max, d->mean);
      break;
    }
  }
  return NULL;
}

// Fewer requests than one a day is not a load to plan a fleet for; below it
// every ratio the plan prints is noise.
#define RG_RATE_MIN (1.0 / 86400.0)

static rg_status_t rg_read_arrival(const rg_node_t *root, rg_workload_t *w) {
  const rg_node_t *a;
  RG_RETURN_IF_ERROR(
      rg_want(root, "arrival", "workload", 1, "{ process: poisson, rate: ... }", &a));
  static const char *const keys[] = {"process", "rate", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(a, keys, "arrival"));
  // Poisson is the only process modelled, so it is also the default.
  static const char *const processes[] = {"poisson"};
  const rg_node_t *p;
  RG_RETURN_IF_ERROR(rg_want(a, "process", "arrival", 0, NULL, &p));
  int unused;
  if (p)
    RG_RETURN_IF_ERROR(
        rg_read_choice(p, "arrival.process", "arrival process", processes, 1, &unused));
  // No rate: as many requests as the fleet serves (offline). A rate given
  // must be a real one; zero would silently mean the same as leaving it out.
  const rg_node_t *r;
  RG_RETURN_IF_ERROR(rg_want(a, "rate", "arrival", 0, NULL, &r));
  if (!r) return NULL;
  RG_RETURN_IF_ERROR(
      rg_read_quantity(a, "arrival", "arrival", "rate", RG_UNIT_RATE, 0, 1, &w->rate));
  if (w->rate == 0)
    return rg_status_at(
        RG_INVALID_ARGUMENT, &r->pos,
        "arrival.rate: 0 is no load; leave 'rate' out to plan for as many requests as "
        "the fleet serves");
  if (w->rate < RG_RATE_MIN)
    return rg_status_at(RG_INVALID_ARGUMENT, &r->pos,
                        "arrival.rate: '%s' is less than one request a day; at least %.3g req/s",
                        r->scalar, RG_RATE_MIN);
  return NULL;
}

// prefix_cache: { hit_rate: 0.56 } or { shared_tokens: 2000 }.
static rg_status_t rg_read_prefix_cache(const rg_node_t *root, rg_workload_t *w) {
  const rg_node_t *m;
  RG_RETURN_IF_ERROR(rg_want(root, "prefix_cache", "workload", 0, NULL, &m));
  if (!m) return NULL;
  static const char *const keys[] = {"hit_rate", "shared_tokens", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(m, keys, "prefix_cache"));
  const rg_node_t *h = rg_node_get(m, "hit_rate"), *s = rg_node_get(m, "shared_tokens");
  if (!h == !s)
    return rg_status_at(
        RG_INVALID_ARGUMENT, &m->pos,
        "prefix_cache: give one of hit_rate (the share of prompt tokens found cached) or "
        "shared_tokens (a prefix every prompt shares)");
  if (h) return rg_node_num(h, "prefix_cache.hit_rate", 0, 0.999, &w->prefix_hit_rate);
  RG_RETURN_IF_ERROR(
      rg_node_num(s, "prefix_cache.shared_tokens", 1, RG_TOKENS_MAX, &w->shared_prefix));
  double shortest = w->prompt.kind == RG_DIST_FIXED     ? w->prompt.mean
                    : w->prompt.kind == RG_DIST_UNIFORM ? w->prompt.min
                                                        : 0;
  if (shortest > 0 && w->shared_prefix >= shortest)
    return rg_status_at(
        RG_INVALID_ARGUMENT, &s->pos,
        "prefix_cache.shared_tokens: %g is not shorter than the prompts (%g tokens); a "
        "shared prefix leaves each prompt at least one token of its own",
        w->shared_prefix, shortest);
  return NULL;
}

// speculative: { draft: llama-3.1-8b, tokens: 4, acceptance: 0.8 }.
static rg_status_t rg_read_speculative(const rg_node_t *root, rg_workload_t *w) {
  const rg_node_t *m;
  RG_RETURN_IF_ERROR(rg_want(root, "speculative", "workload", 0, NULL, &m));
  if (!m) return NULL;
  rg_speculative_t *s = &w->speculative;
  static const char *const keys[] = {"draft", "tokens", "acceptance", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(m, keys, "speculative"));
  RG_RETURN_IF_ERROR(
      rg_read_text(m, "speculative", "speculative", "draft", 1, s->draft, sizeof s->draft));
  const rg_node_t *n;
  RG_RETURN_IF_ERROR(
      rg_want(m, "tokens", "speculative", 1, "the tokens the draft proposes per step, like 4", &n));
  long long k;
  RG_RETURN_IF_ERROR(rg_node_int(n, "speculative.tokens", 1, 16, &k));
  s->tokens = (int)k;
  RG_RETURN_IF_ERROR(rg_want(m, "acceptance", "speculative", 1,
                             "the chance the target accepts a proposed token, like 0.8", &n));
  RG_RETURN_IF_ERROR(rg_node_num(n, "speculative.acceptance", 0, 1, &s->acceptance));
  s->present = 1;
  return NULL;
}

double rg_speculative_tokens_per_step(const rg_speculative_t *s) {
  if (!s || !s->present) return 1;
  // Token i (1-based) of the proposal is kept when it and all before it are
  // accepted (a^i); the verify step always yields one token of its own.
  double t = 1, ai = 1;
  for (int i = 0; i < s->tokens; i++) {
    ai *= s->acceptance;
    t += ai;
  }
  return t;
}

static rg_status_t rg_read_slo(const rg_node_t *root, rg_workload_t *w) {
  const rg_node_t *s;
  RG_RETURN_IF_ERROR(rg_want(root, "slo", "workload", 1, "{ ttft, tbt, percentile }", &s));
  static const char *const keys[] = {"ttft", "tbt", "percentile", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(s, keys, "slo"));
  RG_RETURN_IF_ERROR(rg_read_quantity(s, "slo", "slo", "ttft", RG_UNIT_TIME, 1, 0, &w->slo_ttft));
  RG_RETURN_IF_ERROR(rg_read_quantity(s, "slo", "slo", "tbt", RG_UNIT_TIME, 1, 0, &w->slo_tbt));
  const rg_node_t *p;
  RG_RETURN_IF_ERROR(rg_want(s, "percentile", "slo", 1, "a number like 99", &p));
  // p100 of an unbounded distribution is infinite, so stop short of it.
  return rg_node_num(p, "slo.percentile", 1, 99.999, &w->slo_percentile);
}

static rg_status_t rg_read_session(const rg_node_t *root, rg_session_t *s) {
  const rg_node_t *m;
  RG_RETURN_IF_ERROR(rg_want(root, "session", "workload", 0, NULL, &m));
  if (!m) return NULL;
  static const char *const keys[] = {"duration",
                                     "requests",
                                     "steps_per_request",
                                     "prefix_tokens",
                                     "append_tokens",
                                     "output_tokens",
                                     "human_wait_fraction",
                                     "retention",
                                     NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(m, keys, "session"));
  // Every key is required: each one shapes the KV footprint, and no default
  // would be right for a session the user bothered to describe.
  RG_RETURN_IF_ERROR(
      rg_read_quantity(m, "session", "session", "duration", RG_UNIT_TIME, 1, 0, &s->duration));
  RG_RETURN_IF_ERROR(rg_read_tokens(m, "session", "requests", 1, 1, &s->requests));
  RG_RETURN_IF_ERROR(
      rg_read_tokens(m, "session", "steps_per_request", 1, 1, &s->steps_per_request));
  RG_RETURN_IF_ERROR(rg_read_tokens(m, "session", "prefix_tokens", 1, 0, &s->prefix_tokens));
  RG_RETURN_IF_ERROR(rg_read_tokens(m, "session", "append_tokens", 1, 0, &s->append_tokens));
  RG_RETURN_IF_ERROR(rg_read_tokens(m, "session", "output_tokens", 1, 1, &s->output_tokens));
  const rg_node_t *h;
  RG_RETURN_IF_ERROR(rg_want(m, "human_wait_fraction", "session", 1, "a fraction from 0 to 1", &h));
  RG_RETURN_IF_ERROR(rg_node_num(h, "session.human_wait_fraction", 0, 1, &s->human_wait_fraction));
  // Zero retention is meaningful: KV leaves the first tier right after a step.
  RG_RETURN_IF_ERROR(
      rg_read_quantity(m, "session", "session", "retention", RG_UNIT_TIME, 1, 1, &s->retention));
  s->present = 1;
  return NULL;
}

static rg_status_t rg_parse_workload(const rg_node_t *root, const char *path, rg_workload_t *w) {
  static const char *const keys[] = {"name",        "description", "prompt_tokens", "output_tokens",
                                     "arrival",     "slo",         "session",       "prefix_cache",
                                     "speculative", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(root, keys, "workload"));
  RG_RETURN_IF_ERROR(rg_copy_path(path, w->path, sizeof(w->path)));
  RG_RETURN_IF_ERROR(rg_read_name(root, "workload", path, w->name, sizeof(w->name)));
  RG_RETURN_IF_ERROR(
      rg_read_text(root, "", "workload", "description", 0, w->description, sizeof(w->description)));
  RG_RETURN_IF_ERROR(rg_read_dist(root, "prompt_tokens", &w->prompt));
  RG_RETURN_IF_ERROR(rg_read_dist(root, "output_tokens", &w->output));
  RG_RETURN_IF_ERROR(rg_read_arrival(root, w));
  RG_RETURN_IF_ERROR(rg_read_slo(root, w));
  RG_RETURN_IF_ERROR(rg_read_prefix_cache(root, w));
  RG_RETURN_IF_ERROR(rg_read_speculative(root, w));
  return rg_read_session(root, &w->session);
}

rg_status_t rg_workload_load(const char *name_or_path, const char *config_dir,
                             rg_workload_t **out) {
  *out = NULL;
  char path[1024];
  RG_RETURN_IF_ERROR(
      rg_config_resolve(config_dir, "workloads", "workload", name_or_path, path, sizeof(path)));
  rg_doc_t *doc = NULL;
  rg_status_t st = rg_doc_load_file(path, &doc);
  if (st) return st;
  rg_workload_t *w = calloc(1, sizeof(*w));
  if (!w) {
    st = rg_oom(path);
    goto fail_doc;
  }
  st = rg_parse_workload(rg_doc_root(doc), path, w);
  if (st) goto fail_workload;
  rg_doc_destroy(doc);
  *out = w;
  return NULL;

fail_workload:
  free(w);
fail_doc:
  rg_doc_destroy(doc);
  return st;
}

void rg_workload_destroy(rg_workload_t *w) {
  free(w);
}

void rg_workload_default(rg_workload_t *w) {
  // A chat-like request: long enough prompts that prefill matters, answers
  // long enough that decode dominates. No rate: the planner reports what the
  // fleet can serve.
  memset(w, 0, sizeof(*w));
  snprintf(w->name, sizeof(w->name), "default");
  snprintf(w->description, sizeof(w->description),
           "built-in default: 1024-token prompts, 256-token answers, TTFT 2 s, TBT 100 ms");
  w->prompt = (rg_dist_t){.kind = RG_DIST_FIXED, .mean = 1024, .min = 1024, .max = 1024};
  w->output = (rg_dist_t){.kind = RG_DIST_FIXED, .mean = 256, .min = 256, .max = 256};
  w->rate = 0;
  w->slo_ttft = 2.0;
  w->slo_tbt = 0.1;
  w->slo_percentile = 99;
}
