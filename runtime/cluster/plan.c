// One pool of a plan on this machine's devices (runtime/cluster.h): the
// plan file read with the catalog, fleet, model and workload it names, and
// each of the pool's groups bound to the first device present here among
// those its class's fleet entry names in `run_on:`.
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/yaml.h"
#include "runtime/cluster.h"

// ----- Reading the plan ----------------------------------------------------------------

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

void rg_cluster_plan_destroy(rg_cluster_plan_t *p) {
  if (!p) return;
  free(p->plan);
  free(p->req);
  if (p->workload != &p->workload_default) rg_workload_destroy(p->workload);
  rg_arch_destroy(p->draft);
  rg_arch_destroy(p->model);
  rg_fleet_destroy(p->fleet);
  rg_catalog_destroy(p->catalog);
  free(p);
}

// The model the plan was made for: the one it names, else the weights that
// run. A model named by its directory must be the one that runs, or the
// plan's stage map and predictions would describe other weights.
static rg_status_t load_model(rg_cluster_plan_t *p, const char *config_dir, const char *run_model) {
  const rg_placement_meta_t *m = &p->meta;
  if (!m->model[0]) {
    if (!is_dir(run_model))
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "%s names no model, and the planner cannot read %s (it reads a "
                            "Hugging Face directory's config.json); add `model: NAME`",
                            p->path, run_model);
    return rg_model_load(run_model, config_dir, &p->model);
  }
  if (is_dir(m->model)) {
    char a[PATH_MAX], b[PATH_MAX];
    if (!realpath(m->model, a) || !realpath(run_model, b) || strcmp(a, b))
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "%s: the plan is for the model in %s, but the model to run is %s; "
                            "run that one (ridge run --model %s)",
                            m->model_where, m->model, run_model, m->model);
  } else {
    snprintf(p->model_note, sizeof p->model_note,
             "the plan is for %s (%s): its predictions are for that model, while the weights "
             "in %s run",
             m->model, m->model_where, run_model);
  }
  rg_status_t st = rg_model_load(m->model, config_dir, &p->model);
  return st ? rg_status_wrap(st, "the plan's model (%s)", m->model_where) : NULL;
}

// The plan's own settings, as `ridge plan` reads them from a placement file.
static rg_status_t fill_request(rg_cluster_plan_t *p, const char *config_dir) {
  const rg_placement_meta_t *m = &p->meta;
  rg_plan_request_t *req = p->req;
  if (m->workload[0] && strcmp(m->workload, "default")) {
    rg_status_t st = rg_workload_load(m->workload, config_dir, &p->workload);
    if (st) return rg_status_wrap(st, "the plan's workload (%s)", m->workload_where);
  } else {
    rg_workload_default(&p->workload_default);
    p->workload = &p->workload_default;
  }
  if (p->workload->speculative.present) {
    rg_status_t st = rg_model_load(p->workload->speculative.draft, config_dir, &p->draft);
    if (st) return rg_status_wrap(st, "workload '%s' speculative.draft", p->workload->name);
  }
  req->model = p->model;
  req->fleet = p->fleet;
  req->workload = p->workload;
  req->draft = p->draft;
  req->objective = m->has_objective ? m->objective : RG_OBJ_THROUGHPUT;
  req->weight_dtype = m->has_weight_dtype ? m->weight_dtype : p->model->weight_dtype;
  req->kv_dtype = m->has_kv_dtype ? m->kv_dtype : RG_BF16;
  req->mem_util = m->mem_util;
  req->prefill_chunk = m->prefill_chunk;
  return NULL;
}

rg_status_t rg_cluster_plan_load(const char *path, const char *config_dir, const char *run_model,
                                 rg_cluster_plan_t **out) {
  *out = NULL;
  rg_cluster_plan_t *p = calloc(1, sizeof *p);
  if (!p) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading %s", path);
  snprintf(p->path, sizeof p->path, "%s", path);
  rg_plan_request_t *probe = calloc(1, sizeof *probe);
  p->req = calloc(1, sizeof *p->req);
  p->plan = calloc(1, sizeof *p->plan);
  rg_status_t st = NULL;
  if (!probe || !p->req || !p->plan) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading %s", path);
    goto fail;
  }
  if ((st = rg_catalog_load(config_dir, &p->catalog))) goto fail;
  // A first pass for the names: the pools can only be read against the
  // fleet the file names.
  st = rg_placement_load(path, p->catalog, probe, &p->meta);
  if (st && rg_status_code(st) == RG_INVALID_ARGUMENT &&
      strstr(rg_status_message(st), "a fleet is needed")) {
    rg_status_free(st);
    st = NULL;
  }
  if (st) goto fail;
  if (!p->meta.fleet[0]) {
    st = rg_status_make(RG_INVALID_ARGUMENT,
                        "%s names no fleet: add `fleet: NAME`, the fleet whose entries say in "
                        "run_on which device of this machine stands in for each class",
                        path);
    goto fail;
  }
  if ((st = rg_fleet_load(p->meta.fleet, config_dir, p->catalog, &p->fleet))) {
    st = rg_status_wrap(st, "the plan's fleet (%s)", p->meta.fleet_where);
    goto fail;
  }
  if ((st = load_model(p, config_dir, run_model))) goto fail;
  if ((st = fill_request(p, config_dir))) goto fail;
  rg_placement_meta_t again = {0};
  if ((st = rg_placement_load(path, p->catalog, p->req, &again))) goto fail;
  if (p->req->n_fixed == 0) {
    st = rg_status_make(RG_INVALID_ARGUMENT,
                        "%s holds no pools, only constraints for the search (pin:, forbid:); "
                        "ridge run --plan runs a placement: write one with `ridge plan "
                        "--placement %s -o plan.yaml` and run that",
                        path, path);
    goto fail;
  }
  // Evaluated as `ridge plan --placement` evaluates it: a pool without a
  // batch gets the largest that meets the SLOs, and every pool its
  // predictions.
  if ((st = rg_plan_solve(p->req, p->plan))) {
    st = rg_status_wrap(st, "%s", path);
    goto fail;
  }
  free(probe);
  *out = p;
  return NULL;

fail:
  free(probe);
  rg_cluster_plan_destroy(p);
  return st;
}

// ----- Devices here --------------------------------------------------------------------

// What is known of one run_on name: tried once, however many groups name it.
typedef struct {
  char name[RG_RUN_ON_NAME];
  int ok;
  const rg_device_info_t *info;
  char why[256];
} probe_t;

typedef struct {
  const rg_cluster_plan_options_t *o;
  const rg_device_info_t *list;
  size_t n;
  int open_to_check;  // the real list: a device is present once it opens
  probe_t probes[RG_MAX_GROUPS * RG_MAX_RUN_ON + RG_MAX_RUN_ON];
  int n_probes;
} here_t;

// "cpu:0" (as run_on stores it) into its driver and index.
static void split_name(const char *name, char *driver, size_t len, int *index) {
  const char *colon = strchr(name, ':');
  size_t d = colon ? (size_t)(colon - name) : strlen(name);
  snprintf(driver, len, "%.*s", (int)d, name);
  *index = colon ? atoi(colon + 1) : 0;
}

// Whether device `name` can run stages here; why not in pr->why.
static void probe_device(here_t *h, probe_t *pr) {
  char driver[16];
  int index;
  split_name(pr->name, driver, sizeof driver, &index);
  const rg_device_info_t *absent = NULL;
  int n_dev = 0;
  for (size_t i = 0; i < h->n; i++) {
    const rg_device_info_t *e = &h->list[i];
    if (strcmp(e->driver, driver)) continue;
    if (!e->present) {
      absent = e;
    } else {
      n_dev++;
      if (e->index == index) pr->info = e;
    }
  }
  if (pr->info) {
    if (!h->open_to_check) {
      pr->ok = 1;
      return;
    }
    // A backend may list devices it cannot run on yet; opening is the
    // check that the worker's own open will succeed.
    rg_device_t *dev = NULL;
    rg_status_t st = rg_device_open(driver, index, NULL, &dev);
    if (st) {
      snprintf(pr->why, sizeof pr->why, "listed, but it does not open: %s", rg_status_message(st));
      rg_status_free(st);
      pr->info = NULL;
      return;
    }
    rg_device_close(dev);
    pr->ok = 1;
    return;
  }
  if (n_dev) {
    if (n_dev == 1)
      snprintf(pr->why, sizeof pr->why, "%s has 1 device here (%s:0)", driver, driver);
    else
      snprintf(pr->why, sizeof pr->why, "%s has %d devices here (%s:0 to %s:%d)", driver, n_dev,
               driver, driver, n_dev - 1);
    return;
  }
  if (absent) {
    snprintf(pr->why, sizeof pr->why, "the %s driver is not present: %s", driver, absent->reason);
    return;
  }
  rg_register_available_devices();
  if (!rg_driver_find(driver)) {
    const char *names[16];
    size_t nn = 0;
    for (size_t i = 0; i < rg_driver_count() && nn < 16; i++)
      names[nn++] = rg_driver_name(rg_driver_at(i));
    char list[160] = "";
    for (size_t i = 0; i < nn; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
    const char *near = rg_nearest(driver, names, nn);
    snprintf(pr->why, sizeof pr->why, "no driver is named '%s'%s%s%s (drivers: %s)", driver,
             near ? "; did you mean " : "", near ? near : "", near ? "?" : "", list);
    return;
  }
  snprintf(pr->why, sizeof pr->why, "the %s driver found no device here", driver);
}

static probe_t *probe(here_t *h, const char *name) {
  for (int i = 0; i < h->n_probes; i++)
    if (!strcmp(h->probes[i].name, name)) return &h->probes[i];
  if (h->n_probes == (int)(sizeof h->probes / sizeof h->probes[0])) return NULL;
  probe_t *pr = &h->probes[h->n_probes++];
  memset(pr, 0, sizeof *pr);
  snprintf(pr->name, sizeof pr->name, "%s", name);
  probe_device(h, pr);
  return pr;
}

// The fleet entry saying where class c runs here: the first with run_on.
static const rg_node_devices_t *entry_of(const rg_fleet_t *f, const rg_device_class_t *c,
                                         int *listed) {
  *listed = 0;
  for (int i = 0; i < f->n_nodes; i++)
    for (int j = 0; j < f->nodes[i].n_devs; j++)
      if (f->nodes[i].devs[j].cls == c) {
        *listed = 1;
        if (f->nodes[i].devs[j].n_run_on) return &f->nodes[i].devs[j];
      }
  return NULL;
}

// The device here for class c (what: "pool 1 group 'attn'" for messages).
static rg_status_t pick(here_t *h, const rg_device_class_t *c, const char *what,
                        rg_cluster_plan_group_t *g, const rg_device_info_t **info) {
  const rg_fleet_t *f = h->o->fleet;
  int listed;
  const rg_node_devices_t *e = entry_of(f, c, &listed);
  if (!e && listed)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s runs on %s, and fleet '%s' (%s) gives %s no run_on: add `run_on: "
                          "cpu:0` (or devices `ridge devices` lists, tried in order) to its "
                          "entry to say which device of this machine stands in for it",
                          what, c->name, f->name, f->path, c->name);
  if (!e)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s runs on %s, which fleet '%s' (%s) does not have",
                          what, c->name, f->name, f->path);
  snprintf(g->cls, sizeof g->cls, "%s", c->name);
  snprintf(g->run_on_where, sizeof g->run_on_where, "%s", e->run_on_where);
  char tried[1024] = "";
  for (int i = 0; i < e->n_run_on; i++) {
    probe_t *pr = probe(h, e->run_on[i]);
    if (!pr)
      return rg_status_make(RG_INVALID_ARGUMENT, "%s: more run_on devices than ridge tries", what);
    if (pr->ok) {
      snprintf(g->device, sizeof g->device, "%s", pr->name);
      snprintf(g->passed, sizeof g->passed, "%s", tried);
      *info = pr->info;
      return NULL;
    }
    size_t u = strlen(tried);
    snprintf(tried + u, sizeof tried - u, "%s%s: %s", u ? "; " : "", pr->name, pr->why);
  }
  return rg_status_make(RG_UNAVAILABLE,
                        "%s runs on %s, and none of the devices its run_on names (%s) is present "
                        "here: %s",
                        what, c->name, e->run_on_where, tried);
}

// ----- Binding -------------------------------------------------------------------------

// One device per group, one replica: anything wider is refused, saying
// which of the plan's figures would then not be what runs.
static rg_status_t check_one_device(const rg_cluster_plan_options_t *o, const int *used) {
  const rg_placement_t *p = o->pool;
  char wide[512] = "";
  int n_wide = 0;
  for (int g = 0; g < p->n_groups; g++) {
    const rg_group_t *gr = &p->groups[g];
    if (!used[g] || (gr->devices <= 1 && gr->tp <= 1 && gr->pp <= 1 && gr->dp <= 1)) continue;
    size_t u = strlen(wide);
    snprintf(wide + u, sizeof wide - u, "%sgroup '%s' is %d x %s (tp %d, pp %d, dp %d)",
             n_wide++ ? ", " : "", gr->name, gr->devices, gr->cls->name, gr->tp, gr->pp, gr->dp);
  }
  if (!n_wide && p->replicas <= 1) return NULL;
  if (p->replicas > 1) {
    size_t u = strlen(wide);
    snprintf(wide + u, sizeof wide - u, "%sthe pool has %d replicas", n_wide ? ", and " : "",
             p->replicas);
  }
  return rg_status_make(
      RG_INVALID_ARGUMENT,
      "pool %d: %s; ridge run --plan runs one device per group and one replica here, so the "
      "plan's tokens/s, TTFT and TBT, its batch per device and each device's share of the "
      "weights and KV would not be what runs. Plan on a fleet with one device of each class "
      "(like local-hetero), or write the pool with devices: 1 and replicas: 1",
      o->pool_index + 1, wide);
}

// Which slots of the pool each layout runs, and where the stages go.
static rg_status_t check_slots(const rg_cluster_plan_options_t *o) {
  const rg_placement_t *p = o->pool;
  const int *sg = p->slot_group;
  int home = p->mode == RG_MODE_AF ? -1 : sg[RG_SLOT_ATTENTION];
  static const rg_slot_t slots[] = {RG_SLOT_EMBED, RG_SLOT_FFN, RG_SLOT_LM_HEAD};
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
    rg_slot_t s = slots[i];
    int g = sg[s];
    int ok = p->mode == RG_MODE_AF
                 ? (g == sg[RG_SLOT_ATTENTION] || g == sg[RG_SLOT_FFN]) || s == RG_SLOT_FFN
                 : g == home;
    if (!ok)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "pool %d is %s but puts %s on group '%s' and attention on '%s'; the "
                            "layouts ridge runs keep %s",
                            o->pool_index + 1, rg_mode_name(p->mode), rg_slot_name(s),
                            p->groups[g].name, p->groups[sg[RG_SLOT_ATTENTION]].name,
                            p->mode == RG_MODE_AF
                                ? "embed and lm_head with attention or with the ffn"
                            : p->mode == RG_MODE_PD ? "every stage but prefill on the decode group"
                                                    : "every stage on one group");
  }
  return NULL;
}

// Moves worker `from`'s instance of `kind` (embed, lm_head) to worker `to`.
static rg_status_t move_stage(rg_cluster_layout_t *l, int from, int to, rg_stage_kind_t kind) {
  rg_cluster_worker_t *w = &l->workers[from];
  for (int s = 0; s < w->n_stages; s++)
    if (w->stages[s].kind == kind) {
      rg_stage_spec_t spec = w->stages[s];
      memmove(&w->stages[s], &w->stages[s + 1], (size_t)(w->n_stages - s - 1) * sizeof spec);
      w->n_stages--;
      return rg_cluster_worker_add(&l->workers[to], &spec);
    }
  return NULL;
}

static int64_t tier_tokens(const rg_cluster_plan_options_t *o, const rg_device_class_t *c,
                           const rg_device_info_t *info) {
  rg_dtype_t kv = o->kv_dtype;
  if (kv != RG_F32 && kv != RG_BF16 && kv != RG_F16) kv = RG_BF16;
  double per_token = rg_arch_kv_bytes_per_token(o->arch, kv);
  double pool = o->kv_tokens > 0 ? (double)o->kv_tokens : 16.0 * 4096.0;
  double tokens = RG_CLUSTER_TIER_POOLS * pool;
  if (per_token > 0) {
    if (info && info->memory > 0)
      tokens = fmin(tokens, RG_CLUSTER_TIER_MEMORY_SHARE * (double)info->memory / per_token);
    // Nor more than the plan's tier holds.
    double cap = c->n_mem > 0 ? c->mem[0].capacity * rg_fleet_count(o->fleet, c) : 0;
    if (cap > 0) tokens = fmin(tokens, cap / per_token);
  }
  return tokens >= 1 ? (int64_t)tokens : 1;
}

// Labels worker w as the stand-in for class c on the device `info`: a
// device that is itself of class c (its class hint) stands in for nothing.
static void label(rg_cluster_layout_t *l, int w, const rg_device_class_t *c,
                  const rg_device_info_t *info) {
  snprintf(l->workers[w].plays, sizeof l->workers[w].plays, "%s",
           info && !strcmp(info->class_hint, c->name) ? "" : c->name);
}

static rg_status_t bind(here_t *h, rg_cluster_plan_binding_t *out) {
  const rg_cluster_plan_options_t *o = h->o;
  const rg_placement_t *p = o->pool;
  const int *sg = p->slot_group;
  int used[RG_MAX_GROUPS] = {0};
  static const rg_slot_t run_slots[] = {RG_SLOT_EMBED, RG_SLOT_ATTENTION, RG_SLOT_FFN,
                                        RG_SLOT_LM_HEAD};
  for (size_t i = 0; i < sizeof run_slots / sizeof run_slots[0]; i++) used[sg[run_slots[i]]] = 1;
  if (p->mode == RG_MODE_PD) used[sg[RG_SLOT_PREFILL]] = 1;
  RG_RETURN_IF_ERROR(check_one_device(o, used));
  RG_RETURN_IF_ERROR(check_slots(o));
  for (int g = 0; g < p->n_groups; g++) {
    if (used[g]) continue;
    if (g != sg[RG_SLOT_DRAFT])
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "pool %d: group '%s' runs only prefill, which a %s pool runs on its "
                            "attention group; give prefill a group of its own with mode "
                            "prefill-decode",
                            o->pool_index + 1, p->groups[g].name, rg_mode_name(p->mode));
    if (out->n_notes < (int)(sizeof out->notes / sizeof out->notes[0]))
      snprintf(out->notes[out->n_notes++], sizeof out->notes[0],
               "group '%s' (%d x %s) runs the speculative draft model, which is not run here: "
               "decoding is not speculative",
               p->groups[g].name, p->groups[g].devices, p->groups[g].cls->name);
  }

  // The groups in the order of the layout's workers.
  int order[2], n_order = 0;
  switch (p->mode) {
    case RG_MODE_COLOCATED:
      order[n_order++] = sg[RG_SLOT_ATTENTION];
      break;
    case RG_MODE_AF:
      order[n_order++] = sg[RG_SLOT_ATTENTION];
      order[n_order++] = sg[RG_SLOT_FFN];
      break;
    case RG_MODE_PD:
      order[n_order++] = sg[RG_SLOT_PREFILL];
      order[n_order++] = sg[RG_SLOT_ATTENTION];
      break;
  }
  const rg_device_info_t *info[3] = {NULL, NULL, NULL};
  for (int k = 0; k < n_order; k++) {
    const rg_group_t *gr = &p->groups[order[k]];
    rg_cluster_plan_group_t *g = &out->groups[out->n_groups++];
    snprintf(g->group, sizeof g->group, "%s", gr->name);
    g->worker = k;
    char what[64];
    snprintf(what, sizeof what, "pool %d group '%s'", o->pool_index + 1, gr->name);
    RG_RETURN_IF_ERROR(pick(h, gr->cls, what, g, &info[k]));
  }
  rg_cluster_layout_t *l = &out->layout;
  const char *d0 = out->groups[0].device, *d1 = n_order > 1 ? out->groups[1].device : NULL;
  switch (p->mode) {
    case RG_MODE_COLOCATED:
      RG_RETURN_IF_ERROR(rg_cluster_layout_colocated(o->arch, d0, l));
      l->micro_batches = p->micro_batches > 1 ? 2 : 1;
      break;
    case RG_MODE_AF:
      RG_RETURN_IF_ERROR(rg_cluster_layout_afd(o->arch, d0, d1, p->micro_batches > 1 ? 2 : 1, l));
      if (sg[RG_SLOT_EMBED] == sg[RG_SLOT_FFN])
        RG_RETURN_IF_ERROR(move_stage(l, 0, 1, RG_STAGE_EMBED));
      if (sg[RG_SLOT_LM_HEAD] == sg[RG_SLOT_FFN])
        RG_RETURN_IF_ERROR(move_stage(l, 0, 1, RG_STAGE_LM_HEAD));
      break;
    case RG_MODE_PD:
      RG_RETURN_IF_ERROR(rg_cluster_layout_pd(o->arch, d0, d1, 0, 0, l));
      if (p->micro_batches > 1 && out->n_notes < (int)(sizeof out->notes / sizeof out->notes[0]))
        snprintf(out->notes[out->n_notes++], sizeof out->notes[0],
                 "the plan overlaps two micro-batches in its decode group; the decode worker "
                 "here runs one");
      break;
  }
  for (int k = 0; k < n_order; k++) label(l, k, p->groups[order[k]].cls, info[k]);

  if (p->kv_policy == RG_KV_TIER && p->kv_offload) {
    rg_cluster_plan_group_t *g = &out->groups[out->n_groups++];
    snprintf(g->group, sizeof g->group, "kv tier");
    char what[64];
    snprintf(what, sizeof what, "pool %d's KV tier", o->pool_index + 1);
    const rg_device_info_t *ti = NULL;
    RG_RETURN_IF_ERROR(pick(h, p->kv_offload, what, g, &ti));
    out->tier_tokens = tier_tokens(o, p->kv_offload, ti);
    RG_RETURN_IF_ERROR(rg_cluster_layout_add_tier(l, g->device, out->tier_tokens));
    g->worker = l->n_workers - 1;
    label(l, g->worker, p->kv_offload, ti);
  }
  return NULL;
}

rg_status_t rg_cluster_layout_from_plan(const rg_cluster_plan_options_t *o,
                                        rg_cluster_plan_binding_t *out) {
  memset(out, 0, sizeof *out);
  if (!o->arch || !o->fleet || !o->pool)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "rg_cluster_layout_from_plan: the model, fleet and pool are required");
  if (o->pool->n_groups < 1 || o->pool->n_groups > RG_MAX_GROUPS)
    return rg_status_make(RG_INVALID_ARGUMENT, "pool %d has %d groups; expected 1 to %d",
                          o->pool_index + 1, o->pool->n_groups, RG_MAX_GROUPS);
  here_t *h = calloc(1, sizeof *h);
  rg_device_info_t *list = NULL;
  if (!h) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory binding a plan");
  h->o = o;
  rg_status_t st = NULL;
  if (o->devices) {
    h->list = o->devices;
    h->n = o->n_devices;
  } else {
    size_t n = 0;
    if (!(list = calloc(RG_DEVICES_MAX, sizeof *list))) {
      st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory listing devices");
      goto done;
    }
    if ((st = rg_devices_list(list, RG_DEVICES_MAX, &n))) goto done;
    h->list = list;
    h->n = n < RG_DEVICES_MAX ? n : RG_DEVICES_MAX;
    h->open_to_check = 1;
  }
  st = bind(h, out);
done:
  free(list);
  free(h);
  if (st) memset(out, 0, sizeof *out);
  return st;
}
