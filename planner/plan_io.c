// Plans as YAML: written with libyaml's emitter, read back as placements.
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
     yaml_mapping_start_event_initialize(
         &event, NULL, NULL, 1, flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE));
}
static void map_end(emit_t *e) {
  yaml_event_t event;
  ev(e, &event, yaml_mapping_end_event_initialize(&event));
}
static void seq_start(emit_t *e) {
  yaml_event_t event;
  ev(e, &event,
     yaml_sequence_start_event_initialize(&event, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE));
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
          req->model->name, req->fleet->name, req->workload->name,
          rg_objective_name(req->objective));
  emit_t e = {0};
  if (!yaml_emitter_initialize(&e.em))
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory writing a plan");
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
  if (req->mem_util > 0) kvn(&e, "memory_utilization", req->mem_util);
  if (req->prefill_chunk > 0) kvn(&e, "prefill_chunk", req->prefill_chunk);
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
      scalar(&e, "tp");
      scalarf(&e, "%d", p->groups[g].tp);
      scalar(&e, "pp");
      scalarf(&e, "%d", p->groups[g].pp);
      scalar(&e, "dp");
      scalarf(&e, "%d", p->groups[g].dp);
      map_end(&e);
    }
    seq_end(&e);
    scalar(&e, "stages");
    map_start(&e, 1);
    for (int s = 0; s < RG_SLOT_COUNT; s++)
      if (s != RG_SLOT_DRAFT || req->draft)
        kv(&e, rg_slot_name((rg_slot_t)s), p->groups[p->slot_group[s]].name);
    map_end(&e);
    scalar(&e, "predicted");
    const rg_prediction_t *pr = &o->pred[i];
    emit_prediction(&e, pr->tokens_per_s, pr->ttft, pr->tbt, pr->tokens_per_dollar,
                    pr->tokens_per_joule, pr->cost_per_s, pr->power);
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
  return rg_status_at(
      RG_INVALID_ARGUMENT, &n->pos,
      "mode: unknown mode '%s'%s%s%s; expected colocated, attention-ffn or prefill-decode", s,
      near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
}

// "file:line:col" of a node, for messages that point back at a constraint.
static void where(const rg_node_t *n, char *buf, size_t len) {
  snprintf(buf, len, "%s:%d:%d", n->pos.file ? n->pos.file : "?", n->pos.line, n->pos.col);
}

static const char *const slot_keys[] = {
#define RG_X_(e, n) n,
    RG_SLOT_MAP(RG_X_)
#undef RG_X_
        NULL};

static rg_status_t read_group(const rg_node_t *g, const rg_catalog_t *cat, rg_plan_request_t *req,
                              rg_placement_t *p, size_t i) {
  static const char *const gkeys[] = {"name", "class", "devices", "tp", "pp", "dp", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(g, gkeys, "group"));
  const char *name;
  RG_RETURN_IF_ERROR(rg_cfg_str(g, "name", 1, &name));
  rg_group_t *gr = &p->groups[i];
  if (strlen(name) >= sizeof(gr->name))
    return rg_status_at(RG_INVALID_ARGUMENT, &rg_node_get(g, "name")->pos,
                        "name: longer than %zu characters", sizeof(gr->name) - 1);
  for (size_t j = 0; j < i; j++)
    if (!strcmp(p->groups[j].name, name))
      return rg_status_at(RG_INVALID_ARGUMENT, &rg_node_get(g, "name")->pos,
                          "group name '%s' is used twice", name);
  snprintf(gr->name, sizeof(gr->name), "%s", name);
  const rg_node_t *c = rg_node_get(g, "class");
  if (!c) return rg_node_missing(g, "class", "group");
  RG_RETURN_IF_ERROR(read_class(c, cat, "class", &gr->cls));
  if (!rg_class_computes(gr->cls))
    return rg_status_at(RG_INVALID_ARGUMENT, &c->pos,
                        "class: %s is a %s tier and cannot run stages", gr->cls->name,
                        rg_device_kind_name(gr->cls->kind));
  long long v = 0;
  RG_RETURN_IF_ERROR(rg_cfg_int(g, "devices", 1, 1, 1000000, &v));
  gr->devices = (int)v;
  // Parallelism: given in full, in part (the rest derived), or not at all.
  long long tp = 0, pp = 0, dp = 0;
  RG_RETURN_IF_ERROR(rg_cfg_int(g, "tp", 0, 1, 1000000, &tp));
  RG_RETURN_IF_ERROR(rg_cfg_int(g, "pp", 0, 1, 1000000, &pp));
  RG_RETURN_IF_ERROR(rg_cfg_int(g, "dp", 0, 1, 1000000, &dp));
  if (!tp && !pp && !dp) {
    rg_group_shape(req->fleet, NULL, gr);
    gr->tp = 0;  // derived against the model once it is known (rg_plan_solve's caller)
  } else {
    if (!dp) dp = (tp && pp) ? (gr->devices % (tp * pp) ? 0 : gr->devices / (tp * pp)) : 1;
    if (!tp) tp = pp && dp && gr->devices % (pp * dp) == 0 ? gr->devices / (pp * dp) : 0;
    if (!pp) pp = tp && dp && gr->devices % (tp * dp) == 0 ? gr->devices / (tp * dp) : 0;
    if (!tp || !pp || !dp || tp * pp * dp != gr->devices)
      return rg_status_at(
          RG_INVALID_ARGUMENT, &g->pos,
          "group '%s': tp x pp x dp must equal devices (%d); got tp %lld, pp %lld, dp %lld",
          gr->name, gr->devices, tp, pp, dp);
    gr->tp = (int)tp, gr->pp = (int)pp, gr->dp = (int)dp;
  }
  return NULL;
}

static rg_status_t read_pool(const rg_node_t *n, const rg_catalog_t *cat, rg_plan_request_t *req,
                             rg_placement_t *p) {
  static const char *const keys[] = {"mode",          "replicas",   "batch",  "micro_batches",
                                     "prefill_chunk", "kv_offload", "groups", "stages",
                                     "predicted",     NULL};
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
  v = 0;
  RG_RETURN_IF_ERROR(rg_cfg_int(n, "prefill_chunk", 0, 16, 1 << 20, &v));
  p->prefill_chunk = (int)v;
  if (p->batch > 0 && p->batch < p->micro_batches)
    return rg_status_at(RG_INVALID_ARGUMENT, &rg_node_get(n, "micro_batches")->pos,
                        "micro_batches: %d micro-batches need a batch of at least %d; got batch %d",
                        p->micro_batches, p->micro_batches, p->batch);
  const rg_node_t *ko = rg_node_get(n, "kv_offload");
  if (ko) {
    const char *s;
    RG_RETURN_IF_ERROR(rg_node_str(ko, "kv_offload", &s));
    if (!strcmp(s, "recompute")) {
      p->kv_policy = RG_KV_RECOMPUTE;
    } else if (strcmp(s, "auto")) {
      RG_RETURN_IF_ERROR(read_class(ko, cat, "kv_offload", &p->kv_offload));
      if (rg_class_computes(p->kv_offload))
        return rg_status_at(
            RG_INVALID_ARGUMENT, &ko->pos,
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
    RG_RETURN_IF_ERROR(read_group(gs->items[i], cat, req, p, i));
    p->n_groups++;
  }
  // Stages map to group names; omitted ones go to the first group.
  const rg_node_t *st = rg_node_get(n, "stages");
  if (st) {
    RG_RETURN_IF_ERROR(rg_node_check_keys(st, slot_keys, "stages"));
    for (size_t i = 0; i < st->n; i++) {
      const char *gname;
      RG_RETURN_IF_ERROR(rg_node_str(st->items[i], st->keys[i]->scalar, &gname));
      int g = 0;
      while (g < p->n_groups && strcmp(p->groups[g].name, gname)) g++;
      if (g == p->n_groups)
        return rg_status_at(RG_INVALID_ARGUMENT, &st->items[i]->pos,
                            "%s: no group named '%s' in this pool", st->keys[i]->scalar, gname);
      for (int s = 0; s < RG_SLOT_COUNT; s++)
        if (!strcmp(rg_slot_name((rg_slot_t)s), st->keys[i]->scalar)) p->slot_group[s] = g;
    }
  }
  if (p->mode == RG_MODE_PD && p->slot_group[RG_SLOT_PREFILL] == p->slot_group[RG_SLOT_ATTENTION])
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos,
                        "pool: mode prefill-decode needs stages.prefill on its own group");
  if (p->mode == RG_MODE_AF && p->slot_group[RG_SLOT_FFN] == p->slot_group[RG_SLOT_ATTENTION])
    return rg_status_at(
        RG_INVALID_ARGUMENT, &n->pos,
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

static rg_status_t copy_name(const rg_node_t *root, const char *key, char *out, size_t len,
                             char *at, size_t at_len) {
  const char *s = NULL;
  RG_RETURN_IF_ERROR(rg_cfg_str(root, key, 0, &s));
  if (s) {
    snprintf(out, len, "%s", s);
    where(rg_node_get(root, key), at, at_len);
  }
  return NULL;
}

static rg_status_t load_root(const rg_node_t *root, const rg_catalog_t *cat, rg_plan_request_t *req,
                             rg_placement_meta_t *meta) {
  static const char *const keys[] = {
      "model",  "fleet", "workload",  "objective",          "weight_dtype",  "kv_dtype", "pools",
      "forbid", "pin",   "predicted", "memory_utilization", "prefill_chunk", NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(root, keys, "placement"));
  RG_RETURN_IF_ERROR(copy_name(root, "model", meta->model, sizeof meta->model, meta->model_where,
                               sizeof meta->model_where));
  RG_RETURN_IF_ERROR(copy_name(root, "fleet", meta->fleet, sizeof meta->fleet, meta->fleet_where,
                               sizeof meta->fleet_where));
  RG_RETURN_IF_ERROR(copy_name(root, "workload", meta->workload, sizeof meta->workload,
                               meta->workload_where, sizeof meta->workload_where));
  const rg_node_t *mu = rg_node_get(root, "memory_utilization");
  if (mu) {
    RG_RETURN_IF_ERROR(rg_node_num(mu, "memory_utilization", 0, 1, &meta->mem_util));
    if (meta->mem_util < 0.05)
      return rg_status_at(
          RG_INVALID_ARGUMENT, &mu->pos,
          "memory_utilization: %g leaves almost nothing for weights and KV; expected 0.05 to 1",
          meta->mem_util);
    req->mem_util = meta->mem_util;
  }
  const rg_node_t *pc = rg_node_get(root, "prefill_chunk");
  if (pc) {
    long long v;
    RG_RETURN_IF_ERROR(rg_node_int(pc, "prefill_chunk", 16, 1 << 20, &v));
    meta->prefill_chunk = (double)v;
    req->prefill_chunk = (double)v;
  }
  const rg_node_t *o = rg_node_get(root, "objective");
  if (o) {
    const char *s;
    RG_RETURN_IF_ERROR(rg_node_str(o, "objective", &s));
    if (rg_objective_parse(s, &meta->objective))
      return rg_status_at(
          RG_INVALID_ARGUMENT, &o->pos,
          "objective: unknown '%s'; expected throughput, tokens-per-dollar or tokens-per-watt", s);
    meta->has_objective = 1;
  }
  // Each dtype the file names is taken; one it leaves out keeps whatever
  // the caller chose (the model's published dtype, --kv-dtype).
  const rg_node_t *wd = rg_node_get(root, "weight_dtype"), *kd = rg_node_get(root, "kv_dtype");
  const char *dt;
  if (wd) {
    RG_RETURN_IF_ERROR(rg_node_str(wd, "weight_dtype", &dt));
    if (rg_dtype_parse(dt, &meta->weight_dtype))
      return rg_status_at(RG_INVALID_ARGUMENT, &wd->pos, "weight_dtype: unknown dtype '%s'", dt);
    meta->has_weight_dtype = 1;
  }
  if (kd) {
    RG_RETURN_IF_ERROR(rg_node_str(kd, "kv_dtype", &dt));
    if (rg_dtype_parse(dt, &meta->kv_dtype))
      return rg_status_at(RG_INVALID_ARGUMENT, &kd->pos, "kv_dtype: unknown dtype '%s'", dt);
    meta->has_kv_dtype = 1;
  }
  const rg_node_t *fb = rg_node_get(root, "forbid");
  if (fb) {
    RG_RETURN_IF_ERROR(rg_node_expect(fb, RG_NODE_SEQ, "forbid"));
    for (size_t i = 0; i < fb->n; i++) {
      if (req->n_forbid == (int)(sizeof req->forbid / sizeof req->forbid[0]))
        return rg_status_at(RG_INVALID_ARGUMENT, &fb->items[i]->pos, "forbid: too many classes");
      where(fb->items[i], req->forbid_where[req->n_forbid], sizeof req->forbid_where[0]);
      RG_RETURN_IF_ERROR(read_class(fb->items[i], cat, "forbid", &req->forbid[req->n_forbid++]));
    }
  }
  const rg_node_t *pin = rg_node_get(root, "pin");
  if (pin) {
    RG_RETURN_IF_ERROR(rg_node_check_keys(pin, slot_keys, "pin"));
    for (size_t i = 0; i < pin->n; i++)
      for (int s = 0; s < RG_SLOT_COUNT; s++)
        if (!strcmp(rg_slot_name((rg_slot_t)s), pin->keys[i]->scalar)) {
          where(pin->items[i], req->pin_where[s], sizeof req->pin_where[s]);
          RG_RETURN_IF_ERROR(read_class(pin->items[i], cat, pin->keys[i]->scalar, &req->pin[s]));
          if (!rg_class_computes(req->pin[s]))
            return rg_status_at(RG_INVALID_ARGUMENT, &pin->items[i]->pos,
                                "%s: %s is a %s tier and cannot run stages", pin->keys[i]->scalar,
                                req->pin[s]->name, rg_device_kind_name(req->pin[s]->kind));
        }
  }
  const rg_node_t *pools = rg_node_get(root, "pools");
  if (pools) {
    RG_RETURN_IF_ERROR(rg_node_expect(pools, RG_NODE_SEQ, "pools"));
    if (pools->n < 1 || pools->n > RG_MAX_POOLS)
      return rg_status_at(RG_INVALID_ARGUMENT, &pools->pos,
                          "pools: expected 1 to %d pools, got %zu", RG_MAX_POOLS, pools->n);
    if (!req->fleet)
      return rg_status_at(RG_INVALID_ARGUMENT, &pools->pos,
                          "pools: a fleet is needed to read pools");
    for (size_t i = 0; i < pools->n; i++)
      RG_RETURN_IF_ERROR(read_pool(pools->items[i], cat, req, &req->fixed[i]));
    req->n_fixed = (int)pools->n;
  }
  return NULL;
}

rg_status_t rg_placement_load(const char *path, const rg_catalog_t *cat, rg_plan_request_t *req,
                              rg_placement_meta_t *meta) {
  rg_doc_t *doc;
  RG_RETURN_IF_ERROR(rg_doc_load_file(path, &doc));
  rg_status_t st = load_root(rg_doc_root(doc), cat, req, meta);
  // Groups whose parallelism the file left out take the default shape for
  // the model, when it is known.
  for (int i = 0; !st && i < req->n_fixed; i++)
    for (int g = 0; g < req->fixed[i].n_groups; g++)
      if (req->fixed[i].groups[g].tp == 0)
        rg_group_shape(req->fleet, req->model, &req->fixed[i].groups[g]);
  rg_doc_destroy(doc);
  return st;
}
