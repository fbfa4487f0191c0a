// Plans as YAML (written with libyaml's emitter, read back as placements)
// and as a roofline picture (SVG).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "base/yaml.h"
#include "planner/planner_impl.h"

// ----- Writing YAML ------------------------------------------------------------

typedef struct {
  yaml_emitter_t em;
  int failed;
} emit_t;

static void ev(emit_t *e, yaml_event_t *event, int ok) {
  if (!ok || !yaml_emitter_emit(&e->em, event)) e->failed = 1;
}

static void scalar(emit_t *e, const char *s) {
  yaml_event_t event;
  ev(e, &event,
     yaml_scalar_event_initialize(&event, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1,
                                  YAML_ANY_SCALAR_STYLE));
}

static void scalarf(emit_t *e, const char *fmt, ...) RG_PRINTF(2, 3);
static void scalarf(emit_t *e, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  scalar(e, buf);
}

static void map_start(emit_t *e, int flow) {
  yaml_event_t event;
  ev(e, &event,
     yaml_mapping_start_event_initialize(&event, NULL, NULL, 1,
                                         flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE));
}
static void map_end(emit_t *e) {
  yaml_event_t event;
  ev(e, &event, yaml_mapping_end_event_initialize(&event));
}
static void seq_start(emit_t *e) {
  yaml_event_t event;
  ev(e, &event, yaml_sequence_start_event_initialize(&event, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE));
}
static void seq_end(emit_t *e) {
  yaml_event_t event;
  ev(e, &event, yaml_sequence_end_event_initialize(&event));
}
static void kv(emit_t *e, const char *k, const char *v) {
  scalar(e, k);
  scalar(e, v);
}
static void kvn(emit_t *e, const char *k, double v) {
  scalar(e, k);
  scalarf(e, "%.6g", v);
}

static int write_handler(void *data, unsigned char *buffer, size_t size) {
  return fwrite(buffer, 1, size, (FILE *)data) == size;
}

static void emit_prediction(emit_t *e, double tps, double ttft, double tbt, double tpd, double tpw,
                            double cost, double power) {
  map_start(e, 0);
  kvn(e, "tokens_per_s", tps);
  kvn(e, "ttft_s", ttft);
  kvn(e, "tbt_s", tbt);
  kvn(e, "tokens_per_dollar", tpd);
  kvn(e, "tokens_per_joule", tpw);
  kvn(e, "dollars_per_hour", cost * 3600);
  kvn(e, "watts", power);
  map_end(e);
}

rg_status_t rg_plan_write_yaml(const rg_plan_t *plan, const rg_plan_request_t *req,
                               const rg_placement_meta_t *names, FILE *f) {
  const rg_plan_option_t *o = &plan->chosen;
  fprintf(f,
          "# ridge plan: %s on fleet %s, workload %s, objective %s.\n"
          "# Feed it back with `ridge plan --placement <this file>`: the pools below are\n"
          "# evaluated as written; `predicted` is informational and ignored on input.\n",
          req->model->name, req->fleet->name, req->workload->name, rg_objective_name(req->objective));
  emit_t e = {0};
  if (!yaml_emitter_initialize(&e.em)) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory writing a plan");
  yaml_emitter_set_output(&e.em, write_handler, f);
  yaml_emitter_set_unicode(&e.em, 1);
  yaml_emitter_set_width(&e.em, 100);
  yaml_event_t event;
  ev(&e, &event, yaml_stream_start_event_initialize(&event, YAML_UTF8_ENCODING));
  ev(&e, &event, yaml_document_start_event_initialize(&event, NULL, NULL, NULL, 1));
  map_start(&e, 0);
  kv(&e, "model", names->model[0] ? names->model : req->model->name);
  kv(&e, "fleet", names->fleet[0] ? names->fleet : req->fleet->name);
  kv(&e, "workload", names->workload[0] ? names->workload : req->workload->name);
  kv(&e, "objective", rg_objective_name(req->objective));
  kv(&e, "weight_dtype", rg_dtype_name(req->weight_dtype));
  kv(&e, "kv_dtype", rg_dtype_name(req->kv_dtype));
  scalar(&e, "pools");
  seq_start(&e);
  for (int i = 0; i < o->n_pools; i++) {
    const rg_placement_t *p = &o->pools[i];
    map_start(&e, 0);
    kv(&e, "mode", rg_mode_name(p->mode));
    scalar(&e, "replicas");
    scalarf(&e, "%d", p->replicas);
    scalar(&e, "batch");
    scalarf(&e, "%d", p->batch);
    scalar(&e, "micro_batches");
    scalarf(&e, "%d", p->micro_batches);
    if (p->kv_policy == RG_KV_TIER) kv(&e, "kv_offload", p->kv_offload->name);
    if (p->kv_policy == RG_KV_RECOMPUTE) kv(&e, "kv_offload", "recompute");
    scalar(&e, "groups");
    seq_start(&e);
    for (int g = 0; g < p->n_groups; g++) {
      map_start(&e, 1);
      kv(&e, "name", p->groups[g].name);
      kv(&e, "class", p->groups[g].cls->name);
      scalar(&e, "devices");
      scalarf(&e, "%d", p->groups[g].devices);
      map_end(&e);
    }
    seq_end(&e);
    scalar(&e, "stages");
    map_start(&e, 1);
    for (int s = 0; s < RG_SLOT_COUNT; s++) kv(&e, rg_slot_name((rg_slot_t)s), p->groups[p->slot_group[s]].name);
    map_end(&e);
    scalar(&e, "predicted");
    const rg_prediction_t *pr = &o->pred[i];
    emit_prediction(&e, pr->tokens_per_s, pr->ttft, pr->tbt, pr->tokens_per_dollar, pr->tokens_per_joule,
                    pr->cost_per_s, pr->power);
    map_end(&e);
  }
  seq_end(&e);
  scalar(&e, "predicted");
  emit_prediction(&e, o->tokens_per_s, o->ttft, o->tbt, o->tokens_per_dollar, o->tokens_per_joule,
                  o->cost_per_s, o->power);
  map_end(&e);
  ev(&e, &event, yaml_document_end_event_initialize(&event, 1));
  ev(&e, &event, yaml_stream_end_event_initialize(&event));
  int failed = e.failed || !yaml_emitter_flush(&e.em);
  yaml_emitter_delete(&e.em);
  if (failed || ferror(f)) return rg_status_make(RG_IO, "could not write the plan");
  return NULL;
}

// ----- Reading placements ------------------------------------------------------

static rg_status_t read_class(const rg_node_t *n, const rg_catalog_t *cat, const char *what,
                              const rg_device_class_t **out) {
  const char *name;
  RG_RETURN_IF_ERROR(rg_node_str(n, what, &name));
  *out = rg_catalog_find(cat, name);
  if (!*out) return rg_catalog_unknown(cat, name, &n->pos);
  return NULL;
}

static rg_status_t read_mode(const rg_node_t *n, rg_mode_t *out) {
  static const char *const names[] = {"colocated", "attention-ffn", "prefill-decode"};
  const char *s;
  RG_RETURN_IF_ERROR(rg_node_str(n, "mode", &s));
  for (int i = 0; i < 3; i++)
    if (!strcmp(s, names[i])) {
      *out = (rg_mode_t)i;
      return NULL;
    }
  const char *near = rg_nearest(s, names, 3);
  return rg_status_at(RG_INVALID_ARGUMENT, &n->pos,
                      "mode: unknown mode '%s'%s%s%s; expected colocated, attention-ffn or prefill-decode",
                      s, near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
}

static rg_status_t read_pool(const rg_node_t *n, const rg_catalog_t *cat, rg_plan_request_t *req,
                             rg_placement_t *p) {
  static const char *const keys[] = {"mode", "replicas", "batch", "micro_batches", "kv_offload", "groups",
                                     "stages", "predicted", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(n, keys, "pool"));
  memset(p, 0, sizeof(*p));
  p->weight_dtype = req->weight_dtype;
  p->kv_dtype = req->kv_dtype;
  const rg_node_t *m = rg_node_get(n, "mode");
  if (!m) return rg_node_missing(n, "mode", "pool");
  RG_RETURN_IF_ERROR(read_mode(m, &p->mode));
  long long v = 1;
  RG_RETURN_IF_ERROR(rg_cfg_int(n, "replicas", 0, 1, 1000000, &v));
  p->replicas = (int)v;
  v = 0;
  RG_RETURN_IF_ERROR(rg_cfg_int(n, "batch", 0, 1, 1 << 20, &v));
  p->batch = (int)v;
  v = 1;
  RG_RETURN_IF_ERROR(rg_cfg_int(n, "micro_batches", 0, 1, 2, &v));
  p->micro_batches = (int)v;
  const rg_node_t *ko = rg_node_get(n, "kv_offload");
  if (ko) {
    const char *s;
    RG_RETURN_IF_ERROR(rg_node_str(ko, "kv_offload", &s));
    if (!strcmp(s, "recompute")) {
      p->kv_policy = RG_KV_RECOMPUTE;
    } else if (strcmp(s, "auto")) {
      RG_RETURN_IF_ERROR(read_class(ko, cat, "kv_offload", &p->kv_offload));
      if (rg_class_computes(p->kv_offload))
        return rg_status_at(RG_INVALID_ARGUMENT, &ko->pos,
                            "kv_offload: %s computes; expected a memory or storage tier (host-dram, nvme-ssd), "
                            "recompute or auto",
                            p->kv_offload->name);
      p->kv_policy = RG_KV_TIER;
    }
  }
  const rg_node_t *gs = rg_node_get(n, "groups");
  if (!gs) return rg_node_missing(n, "groups", "pool");
  RG_RETURN_IF_ERROR(rg_node_expect(gs, RG_NODE_SEQ, "groups"));
  if (gs->n < 1 || gs->n > RG_MAX_GROUPS)
    return rg_status_at(RG_INVALID_ARGUMENT, &gs->pos, "groups: expected 1 to %d groups, got %zu",
                        RG_MAX_GROUPS, gs->n);
  for (size_t i = 0; i < gs->n; i++) {
    static const char *const gkeys[] = {"name", "class", "devices", NULL};
    const rg_node_t *g = gs->items[i];
    RG_RETURN_IF_ERROR(rg_node_check_keys(g, gkeys, "group"));
    const char *name;
    RG_RETURN_IF_ERROR(rg_cfg_str(g, "name", 1, &name));
    if (strlen(name) >= sizeof(p->groups[i].name))
      return rg_status_at(RG_INVALID_ARGUMENT, &rg_node_get(g, "name")->pos, "name: longer than %zu characters",
                          sizeof(p->groups[i].name) - 1);
    for (size_t j = 0; j < i; j++)
      if (!strcmp(p->groups[j].name, name))
        return rg_status_at(RG_INVALID_ARGUMENT, &rg_node_get(g, "name")->pos, "group name '%s' is used twice", name);
    snprintf(p->groups[i].name, sizeof(p->groups[i].name), "%s", name);
    const rg_node_t *c = rg_node_get(g, "class");
    if (!c) return rg_node_missing(g, "class", "group");
    RG_RETURN_IF_ERROR(read_class(c, cat, "class", &p->groups[i].cls));
    if (!rg_class_computes(p->groups[i].cls))
      return rg_status_at(RG_INVALID_ARGUMENT, &c->pos, "class: %s is a %s tier and cannot run stages",
                          p->groups[i].cls->name, rg_device_kind_name(p->groups[i].cls->kind));
    RG_RETURN_IF_ERROR(rg_cfg_int(g, "devices", 1, 1, 1000000, &v));
    p->groups[i].devices = (int)v;
    rg__group_shape(req->fleet, &p->groups[i]);
    p->n_groups++;
  }
  // Stages map to group names; omitted ones go to the first group.
  const rg_node_t *st = rg_node_get(n, "stages");
  if (st) {
    static const char *const skeys[] = {"embed", "attention", "ffn", "lm_head", "prefill", NULL};
    RG_RETURN_IF_ERROR(rg_node_check_keys(st, skeys, "stages"));
    for (size_t i = 0; i < st->n; i++) {
      const char *gname;
      RG_RETURN_IF_ERROR(rg_node_str(st->items[i], st->keys[i]->scalar, &gname));
      int g = 0;
      while (g < p->n_groups && strcmp(p->groups[g].name, gname)) g++;
      if (g == p->n_groups)
        return rg_status_at(RG_INVALID_ARGUMENT, &st->items[i]->pos, "%s: no group named '%s' in this pool",
                            st->keys[i]->scalar, gname);
      for (int s = 0; s < RG_SLOT_COUNT; s++)
        if (!strcmp(rg_slot_name((rg_slot_t)s), st->keys[i]->scalar)) p->slot_group[s] = g;
    }
  }
  if (p->mode == RG_MODE_PD && p->slot_group[RG_SLOT_PREFILL] == p->slot_group[RG_SLOT_ATTENTION])
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos,
                        "pool: mode prefill-decode needs stages.prefill on its own group");
  if (p->mode == RG_MODE_AF && p->slot_group[RG_SLOT_FFN] == p->slot_group[RG_SLOT_ATTENTION])
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos,
                        "pool: mode attention-ffn needs stages.ffn on a different group from attention");
  for (int g = 0; g < p->n_groups; g++) {
    int used = 0;
    for (int s = 0; s < RG_SLOT_COUNT; s++) used |= p->slot_group[s] == g;
    if (!used)
      return rg_status_at(RG_INVALID_ARGUMENT, &gs->items[g]->pos, "group '%s' runs no stage",
                          p->groups[g].name);
  }
  return NULL;
}

static rg_status_t copy_name(const rg_node_t *root, const char *key, char *out, size_t len) {
  const char *s = NULL;
  RG_RETURN_IF_ERROR(rg_cfg_str(root, key, 0, &s));
  if (s) snprintf(out, len, "%s", s);
  return NULL;
}

static rg_status_t load_root(const rg_node_t *root, const rg_catalog_t *cat, rg_plan_request_t *req,
                             rg_placement_meta_t *meta) {
  static const char *const keys[] = {"model", "fleet", "workload", "objective", "weight_dtype", "kv_dtype",
                                     "pools", "forbid", "pin", "predicted", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(root, keys, "placement"));
  RG_RETURN_IF_ERROR(copy_name(root, "model", meta->model, sizeof meta->model));
  RG_RETURN_IF_ERROR(copy_name(root, "fleet", meta->fleet, sizeof meta->fleet));
  RG_RETURN_IF_ERROR(copy_name(root, "workload", meta->workload, sizeof meta->workload));
  const rg_node_t *o = rg_node_get(root, "objective");
  if (o) {
    const char *s;
    RG_RETURN_IF_ERROR(rg_node_str(o, "objective", &s));
    if (rg_objective_parse(s, &meta->objective))
      return rg_status_at(RG_INVALID_ARGUMENT, &o->pos,
                          "objective: unknown '%s'; expected throughput, tokens-per-dollar or tokens-per-watt", s);
    meta->has_objective = 1;
  }
  const rg_node_t *wd = rg_node_get(root, "weight_dtype"), *kd = rg_node_get(root, "kv_dtype");
  if (wd || kd) {
    meta->has_dtypes = 1;
    meta->weight_dtype = req->weight_dtype;
    meta->kv_dtype = req->kv_dtype;
    const char *s;
    if (wd) {
      RG_RETURN_IF_ERROR(rg_node_str(wd, "weight_dtype", &s));
      if (rg_dtype_parse(s, &meta->weight_dtype))
        return rg_status_at(RG_INVALID_ARGUMENT, &wd->pos, "weight_dtype: unknown dtype '%s'", s);
    }
    if (kd) {
      RG_RETURN_IF_ERROR(rg_node_str(kd, "kv_dtype", &s));
      if (rg_dtype_parse(s, &meta->kv_dtype))
        return rg_status_at(RG_INVALID_ARGUMENT, &kd->pos, "kv_dtype: unknown dtype '%s'", s);
    }
  }
  const rg_node_t *fb = rg_node_get(root, "forbid");
  if (fb) {
    RG_RETURN_IF_ERROR(rg_node_expect(fb, RG_NODE_SEQ, "forbid"));
    for (size_t i = 0; i < fb->n; i++) {
      if (req->n_forbid == (int)(sizeof req->forbid / sizeof req->forbid[0]))
        return rg_status_at(RG_INVALID_ARGUMENT, &fb->items[i]->pos, "forbid: too many classes");
      RG_RETURN_IF_ERROR(read_class(fb->items[i], cat, "forbid", &req->forbid[req->n_forbid++]));
    }
  }
  const rg_node_t *pin = rg_node_get(root, "pin");
  if (pin) {
    static const char *const skeys[] = {"embed", "attention", "ffn", "lm_head", "prefill", NULL};
    RG_RETURN_IF_ERROR(rg_node_check_keys(pin, skeys, "pin"));
    for (size_t i = 0; i < pin->n; i++)
      for (int s = 0; s < RG_SLOT_COUNT; s++)
        if (!strcmp(rg_slot_name((rg_slot_t)s), pin->keys[i]->scalar)) {
          RG_RETURN_IF_ERROR(read_class(pin->items[i], cat, pin->keys[i]->scalar, &req->pin[s]));
          if (!rg_class_computes(req->pin[s]))
            return rg_status_at(RG_INVALID_ARGUMENT, &pin->items[i]->pos, "%s: %s is a %s tier and cannot run stages",
                                pin->keys[i]->scalar, req->pin[s]->name, rg_device_kind_name(req->pin[s]->kind));
        }
  }
  const rg_node_t *pools = rg_node_get(root, "pools");
  if (pools) {
    RG_RETURN_IF_ERROR(rg_node_expect(pools, RG_NODE_SEQ, "pools"));
    if (pools->n < 1 || pools->n > RG_MAX_POOLS)
      return rg_status_at(RG_INVALID_ARGUMENT, &pools->pos, "pools: expected 1 to %d pools, got %zu",
                          RG_MAX_POOLS, pools->n);
    if (!req->fleet)
      return rg_status_at(RG_INVALID_ARGUMENT, &pools->pos, "pools: a fleet is needed to read pools");
    for (size_t i = 0; i < pools->n; i++) RG_RETURN_IF_ERROR(read_pool(pools->items[i], cat, req, &req->fixed[i]));
    req->n_fixed = (int)pools->n;
  }
  return NULL;
}

rg_status_t rg_placement_load(const char *path, const rg_catalog_t *cat, rg_plan_request_t *req,
                              rg_placement_meta_t *meta) {
  rg_doc_t *doc;
  RG_RETURN_IF_ERROR(rg_doc_load_file(path, &doc));
  rg_status_t st = load_root(rg_doc_root(doc), cat, req, meta);
  rg_doc_destroy(doc);
  return st;
}

// ----- Roofline SVG --------------------------------------------------------------

#define SVG_W 520.0
#define SVG_H 380.0
#define PAD_L 70.0
#define PAD_B 50.0
#define PAD_T 40.0
#define PAD_R 20.0
#define X_MIN 0.1
#define X_MAX 1e5

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                      "#8c564b", "#e377c2", "#17becf"};

typedef struct {
  double y_min, y_max, x0;
} axes_t;

static double px(const axes_t *a, double x) {
  return a->x0 + PAD_L + (log10(x) - log10(X_MIN)) / (log10(X_MAX) - log10(X_MIN)) * (SVG_W - PAD_L - PAD_R);
}
static double py(const axes_t *a, double y) {
  return PAD_T + (1 - (log10(y) - log10(a->y_min)) / (log10(a->y_max) - log10(a->y_min))) *
                     (SVG_H - PAD_T - PAD_B);
}

static void svg_escape(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else fputc(*s, f);
  }
}

static rg_status_t svg_panel(FILE *f, const rg_plan_request_t *req, const rg_placement_t *p, rg_phase_t ph,
                             const axes_t *ax, const rg_device_class_t **cls, int n_cls) {
  fprintf(f, "<text x='%.1f' y='24' font-size='15' font-weight='bold'>%s</text>\n", ax->x0 + PAD_L,
          ph == RG_PHASE_DECODE ? "decode" : "prefill");
  // Axes and decade grid.
  for (double x = X_MIN; x <= X_MAX * 1.01; x *= 10) {
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", px(ax, x), PAD_T, px(ax, x),
            SVG_H - PAD_B);
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='10' text-anchor='middle'>%g</text>\n", px(ax, x),
            SVG_H - PAD_B + 14, x);
  }
  for (double y = ax->y_min; y <= ax->y_max * 1.01; y *= 10) {
    char b[32];
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", ax->x0 + PAD_L, py(ax, y),
            ax->x0 + SVG_W - PAD_R, py(ax, y));
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='10' text-anchor='end'>%s</text>\n", ax->x0 + PAD_L - 4,
            py(ax, y) + 3, rg_fmt_quantity(y, RG_UNIT_FLOPS, b, sizeof b));
  }
  fprintf(f, "<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle'>arithmetic intensity (FLOP/byte)</text>\n",
          ax->x0 + PAD_L + (SVG_W - PAD_L - PAD_R) / 2, SVG_H - 12);
  // Roofs.
  for (int c = 0; c < n_cls; c++) {
    double peak = rg_class_peak(cls[c], p->weight_dtype), bw = cls[c]->mem[0].bandwidth;
    double ridge = peak / bw;
    double xa = X_MIN, xb = ridge < X_MIN ? X_MIN : ridge > X_MAX ? X_MAX : ridge;
    fprintf(f,
            "<polyline fill='none' stroke='%s' stroke-width='2' points='%.1f,%.1f %.1f,%.1f %.1f,%.1f'/>\n",
            palette[c % 8], px(ax, xa), py(ax, fmax(xa * bw, ax->y_min)), px(ax, xb), py(ax, fmin(xb * bw, peak)),
            px(ax, X_MAX), py(ax, peak));
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='10' fill='%s'>", px(ax, X_MAX) - 4, py(ax, peak) - 4,
            palette[c % 8]);
    svg_escape(f, cls[c]->name);
    fprintf(f, " (ridge %.0f)</text>\n", ridge);
  }
  // Stage points at their intensity, on the roof of the class they run on.
  rg_shape_t s = ph == RG_PHASE_DECODE ? rg_placement_decode_shape(req, p) : rg_placement_prefill_shape(req, p);
  rg_stage_cost_t costs[RG_MAX_STAGE_COSTS];
  size_t n;
  RG_RETURN_IF_ERROR(rg_stage_costs(req->model, &s, costs, RG_MAX_STAGE_COSTS, &n));
  int row = 0;
  for (size_t i = 0; i < n; i++) {
    int slot = rg_slot_of_stage(costs[i].kind);
    if (slot < 0 || costs[i].intensity <= 0) continue;
    if (costs[i].is_part && strcmp(costs[i].name, "attention.core") && strcmp(costs[i].name, "moe.experts"))
      continue;
    int g = ph == RG_PHASE_PREFILL ? p->slot_group[RG_SLOT_PREFILL] : p->slot_group[slot];
    const rg_device_class_t *c = p->groups[g].cls;
    int ci = 0;
    while (ci < n_cls && cls[ci] != c) ci++;
    double x = fmin(fmax(costs[i].intensity, X_MIN), X_MAX);
    double y = fmin(rg_class_peak(c, p->weight_dtype), x * c->mem[0].bandwidth);
    fprintf(f, "<circle cx='%.1f' cy='%.1f' r='5' fill='%s' stroke='black'/>\n", px(ax, x), py(ax, y),
            palette[ci % 8]);
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='10'>", px(ax, x) + 7, py(ax, y) + 12 + 11 * (row++ % 3));
    svg_escape(f, costs[i].name);
    fprintf(f, " %.3g</text>\n", costs[i].intensity);
  }
  return NULL;
}

rg_status_t rg_plan_write_svg(const rg_plan_t *plan, const rg_plan_request_t *req, FILE *f) {
  const rg_plan_option_t *o = &plan->chosen;
  if (!o->n_pools) return rg_status_make(RG_INVALID_ARGUMENT, "the plan has no pools to draw");
  const rg_placement_t *p = &o->pools[0];
  const rg_device_class_t *cls[RG_MAX_GROUPS];
  int n_cls = 0;
  double ymax = 1, ymin;
  for (int g = 0; g < p->n_groups; g++) {
    int dup = 0;
    for (int c = 0; c < n_cls; c++) dup |= cls[c] == p->groups[g].cls;
    if (!dup) cls[n_cls++] = p->groups[g].cls;
    ymax = fmax(ymax, rg_class_peak(p->groups[g].cls, p->weight_dtype));
  }
  ymax = pow(10, ceil(log10(ymax)));
  ymin = ymax / 1e6;
  fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' font-family='sans-serif'>\n",
          2 * SVG_W, SVG_H + 20);
  fprintf(f, "<rect width='100%%' height='100%%' fill='white'/>\n<title>ridge roofline: ");
  svg_escape(f, req->model->name);
  fprintf(f, " on ");
  svg_escape(f, req->fleet->name);
  fprintf(f, "</title>\n");
  axes_t a = {ymin, ymax, 0};
  RG_RETURN_IF_ERROR(svg_panel(f, req, p, RG_PHASE_DECODE, &a, cls, n_cls));
  a.x0 = SVG_W;
  RG_RETURN_IF_ERROR(svg_panel(f, req, p, RG_PHASE_PREFILL, &a, cls, n_cls));
  fprintf(f, "</svg>\n");
  return ferror(f) ? rg_status_make(RG_IO, "could not write the SVG") : NULL;
}
