// bench_fidelity: ridge's predictions against published, measured serving
// results (bench/fidelity.yaml, every table with its source). For each row it
// builds the deployment the source describes (a fleet of the row's class, a
// workload of its lengths and rate, a placement of its parallelism), predicts
// the row's figure with the planner's cost model, and prints predicted /
// published. Then the median error and the worst factor, overall, for the
// held-out rows (those no default was chosen against) and by kind.
//
// Goals (printed as ratios, never asserted): median error <= 15%, worst <= 2x.
// The error of a row is max(r, 1/r) - 1 for r = predicted / published, so
// being 2x optimistic and 2x pessimistic count the same.
//
// usage: bench_fidelity [FILE] [--split fit|held-out] [--table ID] [--quiet]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/units.h"
#include "base/yaml.h"
#include "graphs/graphs.h"
#include "planner/planner.h"

#define MAX_ROWS 512

typedef struct {
  char table[64], model[96], cls[64], scenario[16], metric[16], split[16], per[16];
  int devices, tp, pp, dp, micro_batches, batch, per_node;
  rg_dtype_t weights, kv;
  double isl, osl, qps, context, tbt, hit_rate, value, mem_util, chunk;
} row_t;

typedef struct {
  row_t r;
  double predicted, ratio;
  int moe, multi_node, latency;
  rg_device_kind_t kind;
  char why[256];
} result_t;

static const char *config_dir(void) {
  const char *d = getenv("RIDGE_CONFIG_DIR");
  return d ? d : RIDGE_SOURCE_DIR "/configs";
}

// ----- Reading the table file ------------------------------------------------------

static rg_status_t get_text(const rg_node_t *m, const char *key, char *out, size_t len) {
  const rg_node_t *n = rg_node_get(m, key);
  if (!n) return NULL;
  const char *s;
  RG_RETURN_IF_ERROR(rg_node_str(n, key, &s));
  snprintf(out, len, "%s", s);
  return NULL;
}

static rg_status_t get_num(const rg_node_t *m, const char *key, double *out) {
  const rg_node_t *n = rg_node_get(m, key);
  if (!n) return NULL;
  return rg_node_num(n, key, 0, 1e12, out);
}

static rg_status_t get_int(const rg_node_t *m, const char *key, int *out) {
  const rg_node_t *n = rg_node_get(m, key);
  if (!n) return NULL;
  long long v;
  RG_RETURN_IF_ERROR(rg_node_int(n, key, 0, 1 << 30, &v));
  *out = (int)v;
  return NULL;
}

static rg_status_t get_dtype(const rg_node_t *m, const char *key, rg_dtype_t *out) {
  char s[32] = "";
  RG_RETURN_IF_ERROR(get_text(m, key, s, sizeof s));
  if (s[0] && rg_dtype_parse(s, out))
    return rg_status_at(RG_INVALID_ARGUMENT, &rg_node_get(m, key)->pos, "%s: unknown dtype '%s'",
                        key, s);
  return NULL;
}

// Fields of m (a table's defaults or a row) over r.
static rg_status_t read_fields(const rg_node_t *m, row_t *r) {
  RG_RETURN_IF_ERROR(get_text(m, "model", r->model, sizeof r->model));
  RG_RETURN_IF_ERROR(get_text(m, "class", r->cls, sizeof r->cls));
  RG_RETURN_IF_ERROR(get_text(m, "scenario", r->scenario, sizeof r->scenario));
  RG_RETURN_IF_ERROR(get_text(m, "metric", r->metric, sizeof r->metric));
  RG_RETURN_IF_ERROR(get_text(m, "split", r->split, sizeof r->split));
  RG_RETURN_IF_ERROR(get_text(m, "per", r->per, sizeof r->per));
  RG_RETURN_IF_ERROR(get_int(m, "devices", &r->devices));
  RG_RETURN_IF_ERROR(get_int(m, "tp", &r->tp));
  RG_RETURN_IF_ERROR(get_int(m, "pp", &r->pp));
  RG_RETURN_IF_ERROR(get_int(m, "dp", &r->dp));
  RG_RETURN_IF_ERROR(get_int(m, "micro_batches", &r->micro_batches));
  RG_RETURN_IF_ERROR(get_int(m, "batch", &r->batch));
  RG_RETURN_IF_ERROR(get_int(m, "per_node", &r->per_node));
  RG_RETURN_IF_ERROR(get_dtype(m, "weights", &r->weights));
  RG_RETURN_IF_ERROR(get_dtype(m, "kv", &r->kv));
  RG_RETURN_IF_ERROR(get_num(m, "isl", &r->isl));
  RG_RETURN_IF_ERROR(get_num(m, "osl", &r->osl));
  RG_RETURN_IF_ERROR(get_num(m, "qps", &r->qps));
  RG_RETURN_IF_ERROR(get_num(m, "context", &r->context));
  RG_RETURN_IF_ERROR(get_num(m, "tbt", &r->tbt));
  RG_RETURN_IF_ERROR(get_num(m, "hit_rate", &r->hit_rate));
  RG_RETURN_IF_ERROR(get_num(m, "value", &r->value));
  RG_RETURN_IF_ERROR(get_num(m, "memory_utilization", &r->mem_util));
  RG_RETURN_IF_ERROR(get_num(m, "prefill_chunk", &r->chunk));
  return NULL;
}

static rg_status_t read_rows(const char *path, row_t *rows, int *n_rows) {
  rg_doc_t *doc;
  RG_RETURN_IF_ERROR(rg_doc_load_file(path, &doc));
  const rg_node_t *root = rg_doc_root(doc);
  rg_status_t st = rg_node_expect(root, RG_NODE_SEQ, "fidelity tables");
  *n_rows = 0;
  for (size_t t = 0; !st && t < root->n; t++) {
    const rg_node_t *tb = root->items[t];
    row_t def;
    memset(&def, 0, sizeof def);
    def.weights = def.kv = RG_BF16;
    st = read_fields(tb, &def);
    if (!st) st = get_text(tb, "table", def.table, sizeof def.table);
    char src[8] = "";
    if (!st) st = get_text(tb, "source", src, sizeof src);
    if (!st && !src[0])
      st = rg_status_at(RG_INVALID_ARGUMENT, &tb->pos, "table '%s' has no source", def.table);
    const rg_node_t *rs = st ? NULL : rg_node_get(tb, "rows");
    if (!st && !rs)
      st = rg_status_at(RG_INVALID_ARGUMENT, &tb->pos, "table '%s' has no rows", def.table);
    for (size_t i = 0; !st && i < rs->n; i++) {
      if (*n_rows == MAX_ROWS) {
        st = rg_status_make(RG_INVALID_ARGUMENT, "more than %d rows", MAX_ROWS);
        break;
      }
      row_t *r = &rows[(*n_rows)++];
      *r = def;
      st = read_fields(rs->items[i], r);
      if (!st && (!r->model[0] || !r->cls[0] || !r->scenario[0] || r->value <= 0 || !r->split[0]))
        st = rg_status_at(RG_INVALID_ARGUMENT, &rs->items[i]->pos,
                          "row needs model, class, scenario, value and split");
    }
  }
  rg_doc_destroy(doc);
  return st;
}

// ----- Building the deployment a row describes -------------------------------------

typedef struct {
  rg_fleet_t fleet;
  rg_workload_t wl;
  rg_plan_request_t req;
  rg_placement_t p;
  const rg_arch_t *model;
  int per_node, nodes;
} setup_t;

static int default_per_node(const rg_device_class_t *c) {
  if (c->kind == RG_KIND_WAFER) return 1;    // one CS-3 system per node
  if (!strcmp(c->name, "gb200")) return 72;  // one NVL72 rack is one NVLink domain
  return 8;
}

static void build(setup_t *s, const row_t *r, const rg_device_class_t *c, const rg_arch_t *a,
                  int devices) {
  memset(s, 0, sizeof *s);
  s->model = a;
  s->per_node = r->per_node > 0 ? r->per_node : default_per_node(c);
  if (devices < s->per_node) s->per_node = devices;
  s->nodes = (devices + s->per_node - 1) / s->per_node;
  rg_fleet_t *f = &s->fleet;
  snprintf(f->name, sizeof f->name, "%s", r->table);
  snprintf(f->provider, sizeof f->provider, "bench");
  f->network = c->scale_out.bandwidth > 0 ? c->scale_out : (rg_link_t){"net-400g", 50e9, 5e-6};
  f->n_nodes = 1;
  snprintf(f->nodes[0].name, sizeof f->nodes[0].name, "node");
  f->nodes[0].count = s->nodes;
  f->nodes[0].n_devs = 1;
  f->nodes[0].devs[0].cls = c;
  f->nodes[0].devs[0].count = s->per_node;
  rg_workload_t *w = &s->wl;
  snprintf(w->name, sizeof w->name, "%s", r->table);
  double isl = r->isl > 0 ? r->isl : r->context, osl = r->osl > 0 ? r->osl : 2;
  w->prompt = (rg_dist_t){RG_DIST_FIXED, isl, 0, isl, isl};
  w->output = (rg_dist_t){RG_DIST_FIXED, osl, 0, osl, osl};
  w->rate = r->qps;
  w->slo_percentile = 50;
  w->prefix_hit_rate = r->hit_rate;
  rg_plan_request_t *q = &s->req;
  q->model = a;
  q->fleet = f;
  q->workload = w;
  q->objective = RG_OBJ_THROUGHPUT;
  q->weight_dtype = r->weights;
  q->kv_dtype = r->kv;
  q->mem_util = r->mem_util;
  q->prefill_chunk = r->chunk;
  rg_placement_t *p = &s->p;
  p->mode = RG_MODE_COLOCATED;
  p->n_groups = 1;
  snprintf(p->groups[0].name, sizeof p->groups[0].name, "main");
  p->groups[0].cls = c;
  p->groups[0].devices = devices;
  if (r->tp || r->dp || r->pp) {
    p->groups[0].tp = r->tp ? r->tp : 1;
    p->groups[0].dp = r->dp ? r->dp : 1;
    p->groups[0].pp = r->pp ? r->pp : devices / (p->groups[0].tp * p->groups[0].dp);
  } else {
    rg_group_shape(f, a, &p->groups[0]);
  }
  p->replicas = 1;
  p->micro_batches = r->micro_batches > 0 ? r->micro_batches : 1;
  p->weight_dtype = r->weights;
  p->kv_dtype = r->kv;
}

// The fewest devices of class c that hold the model at batch 1 (for rows
// whose source does not say how many wafers or chips served it).
static int min_devices(const row_t *r, const rg_device_class_t *c, const rg_arch_t *a) {
  double cap = c->mem[0].capacity * (r->mem_util > 0 ? r->mem_util : RG_DEFAULT_MEM_UTIL);
  int n = (int)ceil(rg_arch_weight_bytes(a, r->weights) / cap);
  if (n < 1) n = 1;
  for (int tries = 0; tries < 4096; tries++, n++) {
    setup_t *s = calloc(1, sizeof *s);
    if (!s) return -1;
    build(s, r, c, a, n);
    s->p.batch = 1;
    rg_prediction_t pr;
    rg_status_t st = rg_placement_predict(&s->req, &s->p, &pr);
    free(s);
    if (!st) return n;
    rg_status_free(st);
  }
  return -1;
}

// ----- Predictions per scenario ------------------------------------------------------

static rg_status_t predict_offline(setup_t *s, double *out) {
  rg_plan_t *plan = calloc(1, sizeof *plan);
  if (!plan) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  s->req.fixed[0] = s->p;
  s->req.fixed[0].batch = 0;  // the largest that fits
  s->req.n_fixed = 1;
  rg_status_t st = rg_plan_solve(&s->req, plan);
  if (!st) *out = plan->chosen.tokens_per_s;
  if (!st && getenv("FIDELITY_DEBUG")) {
    const rg_prediction_t *pr = &plan->chosen.pred[0];
    fprintf(stderr,
            "  batch %d decode step %.4g s, prefill cost %.4g s/req, kv %.0f tok/seq, mem "
            "%.3g/%.3g GB, %s\n",
            plan->chosen.pools[0].batch, pr->decode_step, pr->prefill_cost, pr->kv_tokens,
            pr->mem_used[0] / 1e9, pr->mem_cap[0] / 1e9, pr->bound[0]);
  }
  free(plan);
  return st;
}

static rg_status_t predict_serving(setup_t *s, const row_t *r, double *out) {
  // The slots: the largest batch that fits. In flight (Little's law): the
  // arrival rate times the time a request spends in the system; iterate to
  // the fixed point.
  rg_plan_t *plan = calloc(1, sizeof *plan);
  if (!plan) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  rg_workload_t w = s->wl;
  s->wl.rate = 0;
  s->req.fixed[0] = s->p;
  s->req.fixed[0].batch = 0;
  s->req.n_fixed = 1;
  rg_status_t st = rg_plan_solve(&s->req, plan);
  s->req.n_fixed = 0;
  s->wl = w;
  if (!st) s->p.max_batch = plan->chosen.pools[0].batch;
  free(plan);
  RG_RETURN_IF_ERROR(st);
  double B = 1;
  rg_prediction_t pr;
  s->p.load_share = 1;
  for (int i = 0; i < 40; i++) {
    s->p.batch = (int)lround(B) < 1 ? 1 : (int)lround(B);
    if (s->p.batch > s->p.max_batch) s->p.batch = s->p.max_batch;
    RG_RETURN_IF_ERROR(rg_placement_predict(&s->req, &s->p, &pr));
    double nb = r->qps * (pr.ttft + r->osl * pr.tbt);
    B = 0.5 * B + 0.5 * (nb < 1 ? 1 : nb);
  }
  *out = !strcmp(r->metric, "ttft") ? pr.ttft : pr.tbt;
  return NULL;
}

static rg_status_t predict_batch(setup_t *s, const row_t *r, double *out) {
  // One static batch: prefill every prompt, then decode them together.
  rg_prediction_t pr;
  s->p.batch = r->batch;
  RG_RETURN_IF_ERROR(rg_placement_predict(&s->req, &s->p, &pr));
  rg_step_cost_t pf, dec;
  RG_RETURN_IF_ERROR(
      rg_group_step_time(&s->req, &s->p, 0, RG_PHASE_PREFILL, r->batch, r->isl, 0, &pf));
  RG_RETURN_IF_ERROR(rg_group_step_time(&s->req, &s->p, 0, RG_PHASE_DECODE, r->batch, 1,
                                        r->isl + r->osl / 2, &dec));
  if (!strcmp(r->metric, "per-user"))
    *out = 1.0 / dec.total;
  else
    *out = r->batch * r->osl / (pf.total + r->osl * dec.total);
  return NULL;
}

static rg_status_t predict_decode(setup_t *s, const row_t *r, double *out) {
  // The largest batch that fits memory and keeps the decode step within the
  // row's TBT target.
  int lo = 0, hi = 4096 * s->p.groups[0].dp;
  rg_prediction_t pr;
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    s->p.batch = mid;
    rg_status_t st = rg_placement_predict(&s->req, &s->p, &pr);
    int ok = !st && pr.decode_step <= r->tbt;
    rg_status_free(st);
    if (ok)
      lo = mid;
    else
      hi = mid - 1;
  }
  if (lo == 0)
    return rg_status_make(RG_INFEASIBLE, "no batch keeps the decode step within %g s", r->tbt);
  s->p.batch = lo;
  RG_RETURN_IF_ERROR(rg_placement_predict(&s->req, &s->p, &pr));
  *out = lo * pr.tokens_per_step / pr.decode_step / s->nodes;
  if (getenv("FIDELITY_DEBUG")) {
    rg_step_cost_t sc;
    RG_RETURN_IF_ERROR(
        rg_group_step_time(&s->req, &s->p, 0, RG_PHASE_DECODE, lo, 1, r->context, &sc));
    fprintf(stderr,
            "  decode batch %d (%.1f per device): step %.4g s = compute %.3g + memory %.3g + comm "
            "%.3g + "
            "overhead %.3g; mem %.3g/%.3g GB\n",
            lo, (double)lo / s->p.groups[0].devices, sc.total, sc.compute, sc.memory, sc.comm,
            sc.overhead, pr.mem_used[0] / 1e9, pr.mem_cap[0] / 1e9);
  }
  return NULL;
}

static rg_status_t predict_prefill(setup_t *s, const row_t *r, double *out) {
  rg_prediction_t pr;
  s->p.batch = 1;
  RG_RETURN_IF_ERROR(rg_placement_predict(&s->req, &s->p, &pr));
  double per_replica = r->isl / pr.prefill_cost;  // input tokens/s, cache hits included
  *out = !strcmp(r->per, "device") ? per_replica / s->p.groups[0].devices : per_replica / s->nodes;
  return NULL;
}

static rg_status_t predict(const rg_catalog_t *cat, const row_t *r, result_t *res) {
  const rg_device_class_t *c = rg_catalog_find(cat, r->cls);
  if (!c) return rg_catalog_unknown(cat, r->cls, NULL);
  char model[512];
  if (strchr(r->model, '/') || strstr(r->model, ".yaml"))
    snprintf(model, sizeof model, "%s", r->model);
  else {
    // Models the shipped catalog lacks live beside the table.
    snprintf(model, sizeof model, "%s/bench/fidelity/%s.yaml", RIDGE_SOURCE_DIR, r->model);
    FILE *f = fopen(model, "r");
    if (f)
      fclose(f);
    else
      snprintf(model, sizeof model, "%s", r->model);
  }
  rg_arch_t *a;
  RG_RETURN_IF_ERROR(rg_model_load(model, config_dir(), &a));
  res->moe = a->n_experts > 0;
  res->kind = c->kind;
  int devices = r->devices > 0 ? r->devices : min_devices(r, c, a);
  rg_status_t st = NULL;
  setup_t *s = calloc(1, sizeof *s);
  if (devices < 1)
    st = rg_status_make(RG_INFEASIBLE, "no number of %s devices holds %s", c->name, a->name);
  else if (!s)
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  if (!st) {
    build(s, r, c, a, devices);
    res->multi_node = s->nodes > 1;
    res->r.devices = devices;
    if (!strcmp(r->scenario, "offline"))
      st = predict_offline(s, &res->predicted);
    else if (!strcmp(r->scenario, "serving"))
      st = predict_serving(s, r, &res->predicted);
    else if (!strcmp(r->scenario, "batch"))
      st = predict_batch(s, r, &res->predicted);
    else if (!strcmp(r->scenario, "decode"))
      st = predict_decode(s, r, &res->predicted);
    else if (!strcmp(r->scenario, "prefill"))
      st = predict_prefill(s, r, &res->predicted);
    else
      st = rg_status_make(RG_INVALID_ARGUMENT, "unknown scenario '%s'", r->scenario);
  }
  res->latency = !strcmp(r->scenario, "serving") || !strcmp(r->scenario, "batch");
  free(s);
  rg_arch_destroy(a);
  return st;
}

// ----- Summaries -----------------------------------------------------------------------

static int cmp_d(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static double err_of(double ratio) {
  return (ratio >= 1 ? ratio : 1 / ratio) - 1;
}

typedef int (*pick_fn)(const result_t *);

static void summarize(const char *label, const result_t *res, int n, pick_fn pick,
                      const char *split) {
  double *e = malloc(sizeof(double) * (n > 0 ? n : 1));
  if (!e) return;
  int k = 0, worst_i = -1;
  double worst = 0, logsum = 0;
  for (int i = 0; i < n; i++) {
    if (res[i].why[0] || !pick(&res[i])) continue;
    if (split && strcmp(res[i].r.split, split)) continue;
    e[k++] = err_of(res[i].ratio);
    logsum += log(res[i].ratio);
    if (err_of(res[i].ratio) > worst) worst = err_of(res[i].ratio), worst_i = i;
  }
  if (k == 0) {
    printf("  %-34s %4d rows\n", label, 0);
    free(e);
    return;
  }
  qsort(e, (size_t)k, sizeof e[0], cmp_d);
  double med = k % 2 ? e[k / 2] : (e[k / 2 - 1] + e[k / 2]) / 2;
  printf(
      "  %-34s %4d rows  median error %5.1f%% (goal 15%%: %4.2fx)  worst %5.2fx (goal 2x: %4.2fx)  "
      "geomean pred/pub %5.2f  worst: %s %s\n",
      label, k, med * 100, med / 0.15, 1 + worst, (1 + worst) / 2, exp(logsum / k),
      res[worst_i].r.table, res[worst_i].r.model);
  free(e);
}

static int all_rows(const result_t *r) {
  return r != NULL;
}
static int dense(const result_t *r) {
  return !r->moe;
}
static int moe(const result_t *r) {
  return r->moe;
}
static int one_node(const result_t *r) {
  return !r->multi_node;
}
static int many_nodes(const result_t *r) {
  return r->multi_node;
}
static int gpu(const result_t *r) {
  return r->kind == RG_KIND_GPU;
}
static int wafer(const result_t *r) {
  return r->kind == RG_KIND_WAFER;
}
static int lpu(const result_t *r) {
  return r->kind == RG_KIND_LPU;
}
static int offline(const result_t *r) {
  return !r->latency;
}
static int latency(const result_t *r) {
  return r->latency;
}

int main(int argc, char **argv) {
  const char *path = RIDGE_SOURCE_DIR "/bench/fidelity.yaml", *split = NULL, *only = NULL;
  int quiet = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--split") && i + 1 < argc)
      split = argv[++i];
    else if (!strcmp(argv[i], "--table") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--quiet"))
      quiet = 1;
    else if (argv[i][0] == '-') {
      fprintf(stderr,
              "usage: bench_fidelity [FILE] [--split fit|held-out] [--table ID] [--quiet]\n");
      return 2;
    } else
      path = argv[i];
  }
  static row_t rows[MAX_ROWS];
  static result_t res[MAX_ROWS];
  int n;
  rg_catalog_t *cat;
  rg_status_t st = rg_catalog_load(config_dir(), &cat);
  if (!st) st = read_rows(path, rows, &n);
  if (st) {
    fprintf(stderr, "bench_fidelity: %s\n", rg_status_message(st));
    return 1;
  }
  printf("bench_fidelity: %d published rows from %s; ratio = predicted / published\n", n, path);
  if (!quiet)
    printf("%-26s %-16s %-12s %4s %-8s %6s %6s %12s %12s %7s  %s\n", "table", "model", "class",
           "dev", "scenario", "isl", "osl", "published", "predicted", "ratio", "split");
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (only && strcmp(rows[i].table, only)) continue;
    if (split && strcmp(rows[i].split, split)) continue;
    result_t *r = &res[m++];
    memset(r, 0, sizeof *r);
    r->r = rows[i];
    st = predict(cat, &rows[i], r);
    if (st) {
      snprintf(r->why, sizeof r->why, "%s", rg_status_message(st));
      rg_status_free(st);
    } else {
      r->ratio = r->predicted / rows[i].value;
    }
    if (!quiet) {
      if (r->why[0])
        printf("%-26.26s %-16.16s %-12s %4d %-8s %6.0f %6.0f %12.6g %12s %7s  %s: %s\n", r->r.table,
               r->r.model, r->r.cls, r->r.devices, r->r.scenario, r->r.isl, r->r.osl, r->r.value,
               "-", "-", r->r.split, r->why);
      else
        printf("%-26.26s %-16.16s %-12s %4d %-8s %6.0f %6.0f %12.6g %12.6g %7.3f  %s%s%s\n",
               r->r.table, r->r.model, r->r.cls, r->r.devices, r->r.scenario, r->r.isl, r->r.osl,
               r->r.value, r->predicted, r->ratio, r->r.split, r->r.metric[0] ? " " : "",
               r->r.metric);
    }
  }
  int failed = 0;
  for (int i = 0; i < m; i++) failed += res[i].why[0] != 0;
  printf("\nSummary (%d rows predicted, %d could not be):\n", m - failed, failed);
  struct {
    const char *label;
    pick_fn pick;
  } kinds[] = {{"all rows", all_rows},
               {"dense", dense},
               {"MoE", moe},
               {"one node", one_node},
               {"many nodes", many_nodes},
               {"GPU", gpu},
               {"wafer-scale", wafer},
               {"LPU", lpu},
               {"offline / throughput", offline},
               {"latency-bound", latency}};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    summarize(kinds[k].label, res, m, kinds[k].pick, NULL);
  if (!split) {
    printf("\nHeld-out rows only (no default was chosen against them):\n");
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
      summarize(kinds[k].label, res, m, kinds[k].pick, "held-out");
    printf("\nFit rows (the defaults were chosen against these):\n");
    summarize("all rows", res, m, all_rows, "fit");
  }
  rg_catalog_destroy(cat);
  return 0;
}
