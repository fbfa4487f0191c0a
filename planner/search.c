// Placement search: enumerate placements per structure (colocated on one
// class, with data-parallel attention and expert parallelism for MoE models;
// attention-FFN across two classes; prefill-decode across two classes or
// split within one), size each group from its memory need, find the largest
// batch that fits and meets the SLOs, then pack replicas into the fleet.
// Packing several kinds of replica under per-class device counts is an
// integer program; GLPK solves it.
#include <glpk.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "planner/planner_impl.h"

#define MAX_CLASSES 16
// Sequences one attention replica keeps in flight, at most.
#define MAX_BATCH_PER_REPLICA 4096

typedef struct {
  rg_placement_t p;
  rg_prediction_t pred;  // one replica
  int uses[MAX_CLASSES];
  int max_replicas;
  double value;  // objective value of one replica (throughput) or ratio
} cand_t;

typedef struct {
  const rg_plan_request_t *req;
  const rg_device_class_t *cls[MAX_CLASSES];
  int count[MAX_CLASSES];
  int n_cls;
  cand_t *cands;
  size_t n_cands, cap_cands;
  int evaluated;
  // The nearest miss, for an infeasible ask.
  int any_fit;
  double best_mem_ratio;  // need / capacity of the closest fit, > 1
  char mem_msg[512];
  double best_slo_ratio;
  char slo_msg[512];
} search_t;

void rg__pool_describe(const rg_placement_t *p, char *buf, size_t len) {
  buf[0] = 0;
  for (int g = 0; g < p->n_groups; g++) {
    size_t u = strlen(buf);
    if (p->n_groups == 1)
      snprintf(buf + u, len - u, "%d x %s", p->groups[g].devices, p->groups[g].cls->name);
    else
      snprintf(buf + u, len - u, "%s%s %d x %s", g ? " | " : "", p->groups[g].name,
               p->groups[g].devices, p->groups[g].cls->name);
  }
}

double rg__option_score(const rg_plan_option_t *o, rg_objective_t obj) {
  if (!o->feasible) return -1;
  switch (obj) {
    case RG_OBJ_THROUGHPUT:
      return o->tokens_per_s;
    case RG_OBJ_TOKENS_PER_DOLLAR:
      return o->tokens_per_dollar;
    case RG_OBJ_TOKENS_PER_WATT:
      return o->tokens_per_joule;
    default:
      return -1;
  }
}

// The most requests/s pool p takes while still meeting the SLOs (0 when it
// misses them even lightly loaded), by bisection up to its capacity.
static rg_status_t slo_rate(const rg_plan_request_t *req, const rg_placement_t *pool,
                            double capacity, double *out) {
  rg_placement_t p = *pool;
  rg_prediction_t pr;
  double rate = req->workload->rate, lo = 0, hi = capacity;
  *out = 0;
  if (!(hi > 0)) return NULL;
  p.load_share = hi / rate;
  RG_RETURN_IF_ERROR(rg_placement_predict(req, &p, &pr));
  if (pr.meets_slo) {
    *out = hi;
    return NULL;
  }
  for (int it = 0; it < 24; it++) {
    double mid = 0.5 * (lo + hi);
    p.load_share = mid / rate;
    RG_RETURN_IF_ERROR(rg_placement_predict(req, &p, &pr));
    if (pr.meets_slo)
      lo = mid;
    else
      hi = mid;
  }
  *out = lo;
  return NULL;
}

rg_status_t rg__option_finish(const rg_plan_request_t *req, rg_plan_option_t *o) {
  o->tokens_per_s = o->cost_per_s = o->power = o->ttft = o->tbt = 0;
  // The workload's requests spread over the pools as a router that knows
  // them would send them: in proportion to what each serves within the SLOs
  // when together they serve the whole rate so (every pool then runs at the
  // same fraction of its SLO-bound rate), else in proportion to what each
  // can serve at all. Equal utilisation alone would queue a pool whose
  // prefill is slow far past its TTFT SLO while a fast one idles.
  // Capacities come from a first pass at planning load.
  double cap = 0, ok_rate[RG_MAX_POOLS], ok = 0, rate = req->workload->rate;
  for (int i = 0; i < o->n_pools; i++) {
    o->pools[i].load_share = 0;
    RG_RETURN_IF_ERROR(rg_placement_predict(req, &o->pools[i], &o->pred[i]));
    cap += o->pred[i].requests_per_s;
  }
  if (rate > 0 && o->n_pools > 1)
    for (int i = 0; i < o->n_pools; i++) {
      RG_RETURN_IF_ERROR(slo_rate(req, &o->pools[i], o->pred[i].requests_per_s, &ok_rate[i]));
      ok += ok_rate[i];
    }
  int by_slo = rate > 0 && o->n_pools > 1 && ok >= rate;
  for (int i = 0; i < o->n_pools; i++) {
    o->pools[i].load_share = by_slo    ? ok_rate[i] / ok
                             : cap > 0 ? o->pred[i].requests_per_s / cap
                                       : 0;
    // A pool that gets no requests is priced and counted like the others,
    // at a share too small to queue anything.
    if (by_slo && o->pools[i].load_share <= 0) o->pools[i].load_share = 1e-9;
    RG_RETURN_IF_ERROR(rg_placement_predict(req, &o->pools[i], &o->pred[i]));
    o->tokens_per_s += o->pred[i].tokens_per_s;
    o->cost_per_s += o->pred[i].cost_per_s;
    o->power += o->pred[i].power;
    if (o->pred[i].ttft > o->ttft) o->ttft = o->pred[i].ttft;
    if (o->pred[i].tbt > o->tbt) o->tbt = o->pred[i].tbt;
  }
  o->tokens_per_dollar = o->cost_per_s > 0 ? o->tokens_per_s / o->cost_per_s : 0;
  o->tokens_per_joule = o->power > 0 ? o->tokens_per_s / o->power : 0;
  o->feasible = o->n_pools > 0;
  return NULL;
}

static int class_index(const search_t *s, const rg_device_class_t *c) {
  for (int i = 0; i < s->n_cls; i++)
    if (s->cls[i] == c) return i;
  return -1;
}

static int forbidden(const rg_plan_request_t *req, const rg_device_class_t *c) {
  for (int i = 0; i < req->n_forbid; i++)
    if (req->forbid[i] == c) return 1;
  return 0;
}

// Group sizes a class allows: powers of two inside a node (and the node's
// own size), then multiples of whole nodes.
static int valid_sizes(const search_t *s, int ci, int *out, int cap) {
  int per = rg_fleet_per_node(s->req->fleet, s->cls[ci]), total = s->count[ci], n = 0;
  for (int k = 1; k <= per && k <= total && n < cap; k *= 2) out[n++] = k;
  if (per > 0 && (per & (per - 1)) && per <= total && n < cap) out[n++] = per;
  for (int k = 2 * per; per > 0 && k <= total && n < cap; k *= 2) out[n++] = k;
  return n;
}

static rg_status_t try_predict(const rg_plan_request_t *req, rg_placement_t *p,
                               rg_prediction_t *pred, int *ok, int *evaluated) {
  (*evaluated)++;
  rg_status_t st = rg_placement_predict(req, p, pred);
  *ok = 0;
  if (st && rg_status_code(st) != RG_INFEASIBLE && rg_status_code(st) != RG_INVALID_ARGUMENT)
    return st;
  if (st) {
    rg_status_free(st);
    return NULL;
  }
  *ok = 1;
  return NULL;
}

// Whether a prediction meets the TBT SLO (TTFT aside).
static int tbt_ok(const rg_plan_request_t *req, const rg_prediction_t *pred) {
  return req->workload->slo_tbt <= 0 || pred->tbt_slo <= req->workload->slo_tbt;
}

rg_status_t rg__largest_batch(const rg_plan_request_t *req, rg_placement_t *p, int max_batch,
                              rg_prediction_t *pred, int *found, int *evaluated) {
  int ok, m = p->micro_batches > 1 ? p->micro_batches : 1;
  *found = 0;
  p->batch = m;
  RG_RETURN_IF_ERROR(try_predict(req, p, pred, &ok, evaluated));
  if (!ok || !tbt_ok(req, pred)) return NULL;
  // Memory and TBT both grow with the batch, so bisect on them. TTFT is not
  // monotone: a small batch has few slots to queue for, a big one spends
  // more of its time prefilling; so when the largest TBT-feasible batch
  // misses the TTFT SLO, step down from it.
  int lo = m, hi = max_batch;
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    p->batch = mid;
    RG_RETURN_IF_ERROR(try_predict(req, p, pred, &ok, evaluated));
    if (ok && tbt_ok(req, pred))
      lo = mid;
    else
      hi = mid - 1;
  }
  // When none meets them, leave p at the batch that came closest, so the
  // message names it.
  const rg_workload_t *w = req->workload;
  double best = INFINITY;
  int best_b = m;
  for (int b = lo;; b = (int)(b * 0.8)) {
    if (b < m) b = m;
    p->batch = b;
    RG_RETURN_IF_ERROR(try_predict(req, p, pred, &ok, evaluated));
    if (ok && pred->meets_slo) {
      *found = 1;
      return NULL;
    }
    double r = 0;
    if (w->slo_tbt > 0) r = fmax(r, pred->tbt_slo / w->slo_tbt);
    if (w->slo_ttft > 0) r = fmax(r, pred->ttft_slo / w->slo_ttft);
    if (ok && r < best) best = r, best_b = b;
    if (b == m) break;
  }
  p->batch = best_b;
  return NULL;
}

static void note_slo_miss(search_t *s, const rg_placement_t *p, const rg_prediction_t *pred) {
  const rg_workload_t *w = s->req->workload;
  double r = 0;
  if (w->slo_tbt > 0) r = fmax(r, pred->tbt_slo / w->slo_tbt);
  if (w->slo_ttft > 0) r = fmax(r, pred->ttft_slo / w->slo_ttft);
  if (s->best_slo_ratio == 0 || r < s->best_slo_ratio) {
    char d[128], a[32], b[32], c[32], e[32];
    rg__pool_describe(p, d, sizeof d);
    snprintf(s->slo_msg, sizeof s->slo_msg,
             "the closest is %s at batch %d: p%g TBT %s (SLO %s), p%g TTFT %s (SLO %s), %.2fx over",
             d, p->batch, w->slo_percentile,
             rg_fmt_quantity(pred->tbt_slo, RG_UNIT_TIME, a, sizeof a),
             w->slo_tbt > 0 ? rg_fmt_quantity(w->slo_tbt, RG_UNIT_TIME, b, sizeof b) : "none",
             w->slo_percentile, rg_fmt_quantity(pred->ttft_slo, RG_UNIT_TIME, c, sizeof c),
             w->slo_ttft > 0 ? rg_fmt_quantity(w->slo_ttft, RG_UNIT_TIME, e, sizeof e) : "none", r);
    s->best_slo_ratio = r;
  }
}

static void note_memory_miss(search_t *s, const rg_placement_t *p, const rg_prediction_t *pred) {
  double worst = 0;
  int wg = 0;
  for (int g = 0; g < p->n_groups; g++) {
    double r = pred->mem_cap[g] > 0 ? pred->mem_used[g] / pred->mem_cap[g] : 1e9;
    if (r > worst) worst = r, wg = g;
  }
  if (worst <= 1) return;  // failed for another reason (a parallel shape)
  if (s->best_mem_ratio == 0 || worst < s->best_mem_ratio) {
    char need[32], have[32], d[128], shortfall[32];
    rg__pool_describe(p, d, sizeof d);
    rg_fmt_quantity(pred->mem_used[wg] * p->groups[wg].devices, RG_UNIT_BYTES, need, sizeof need);
    rg_fmt_quantity(pred->mem_cap[wg] * p->groups[wg].devices, RG_UNIT_BYTES, have, sizeof have);
    rg_fmt_quantity((pred->mem_used[wg] - pred->mem_cap[wg]) * p->groups[wg].devices, RG_UNIT_BYTES,
                    shortfall, sizeof shortfall);
    snprintf(s->mem_msg, sizeof s->mem_msg,
             "the closest is %s: group '%s' needs %s but has %s usable, short by %s", d,
             p->groups[wg].name, need, have, shortfall);
    s->best_mem_ratio = worst;
  }
}

static double value_of(const search_t *s, const rg_prediction_t *pr) {
  switch (s->req->objective) {
    case RG_OBJ_THROUGHPUT:
      return pr->tokens_per_s;
    case RG_OBJ_TOKENS_PER_DOLLAR:
      return pr->tokens_per_dollar;
    case RG_OBJ_TOKENS_PER_WATT:
      return pr->tokens_per_joule;
    default:
      return 0;
  }
}

static int max_batch_of(const rg_placement_t *p) {
  const rg_group_t *g = &p->groups[p->slot_group[RG_SLOT_ATTENTION]];
  return MAX_BATCH_PER_REPLICA * g->dp * (g->pp > 1 ? g->pp : 1);
}

// Finds the largest batch that fits and meets the SLOs; adds a candidate.
static rg_status_t size_batch(search_t *s, rg_placement_t *p) {
  rg_prediction_t pred;
  int found;
  p->replicas = 1;
  if (p->planning_replicas <= 0) {
    int uses[MAX_CLASSES] = {0}, most = 1 << 30;
    for (int g = 0; g < p->n_groups; g++)
      uses[class_index(s, p->groups[g].cls)] += p->groups[g].devices;
    for (int i = 0; i < s->n_cls; i++)
      if (uses[i] && s->count[i] / uses[i] < most) most = s->count[i] / uses[i];
    p->planning_replicas = most < 1 ? 1 : most;
  }
  RG_RETURN_IF_ERROR(rg__largest_batch(s->req, p, max_batch_of(p), &pred, &found, &s->evaluated));
  if (!found) {
    // Say why, from the batch the search ended on: memory short, or the
    // SLOs missed.
    int ok;
    RG_RETURN_IF_ERROR(try_predict(s->req, p, &pred, &ok, &s->evaluated));
    if (!ok)
      note_memory_miss(s, p, &pred);
    else {
      s->any_fit = 1;
      note_slo_miss(s, p, &pred);
    }
    return NULL;
  }
  s->any_fit = 1;
  if (s->n_cands == s->cap_cands) {
    size_t nc = s->cap_cands ? s->cap_cands * 2 : 256;
    cand_t *n = realloc(s->cands, nc * sizeof(*n));
    if (!n) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory in the placement search");
    s->cands = n;
    s->cap_cands = nc;
  }
  cand_t *c = &s->cands[s->n_cands++];
  memset(c, 0, sizeof(*c));
  c->p = *p;
  if (s->req->workload->session.present) {
    // Record the KV decision so the written plan reproduces it.
    c->p.kv_policy = pred.kv_policy;
    c->p.kv_offload = pred.kv_tier;
  }
  // And the prefill chunk, so the written plan prefills as predicted.
  c->p.prefill_chunk = (int)pred.prefill_chunk;
  c->pred = pred;
  c->max_replicas = 1 << 30;
  for (int g = 0; g < p->n_groups; g++)
    c->uses[class_index(s, p->groups[g].cls)] += p->groups[g].devices;
  for (int i = 0; i < s->n_cls; i++)
    if (c->uses[i]) {
      int r = s->count[i] / c->uses[i];
      if (r < c->max_replicas) c->max_replicas = r;
    }
  if (c->max_replicas < 1) s->n_cands--;  // shares a class beyond its count
  c->value = value_of(s, &pred);
  return NULL;
}

// Smallest valid size of class ci whose memory holds `bytes`.
static int min_size(const search_t *s, int ci, double bytes, const int *sizes, int n_sizes) {
  double cap = s->cls[ci]->mem[0].capacity * rg__mem_util(s->req);
  for (int i = 0; i < n_sizes; i++)
    if (sizes[i] * cap >= bytes) return i;
  return n_sizes ? n_sizes - 1 : -1;  // too small even at full size: let memory checks explain
}

static void set_group(const rg_plan_request_t *req, rg_placement_t *p, int g, const char *name,
                      const rg_device_class_t *c, int n) {
  snprintf(p->groups[g].name, sizeof(p->groups[g].name), "%s", name);
  p->groups[g].cls = c;
  p->groups[g].devices = n;
  rg_group_shape(req->fleet, req->model, &p->groups[g]);
}

static int pins_ok(const rg_plan_request_t *req, const rg_placement_t *p) {
  for (int s = 0; s < RG_SLOT_COUNT; s++)
    if (req->pin[s] && p->groups[p->slot_group[s]].cls != req->pin[s]) return 0;
  return 1;
}

static void base_placement(const rg_plan_request_t *req, rg_placement_t *p, rg_mode_t mode,
                           int n_groups) {
  memset(p, 0, sizeof *p);
  p->mode = mode;
  p->n_groups = n_groups;
  p->micro_batches = 1;
  p->weight_dtype = req->weight_dtype;
  p->kv_dtype = req->kv_dtype;
}

// Tries p as it is and, for speculative decoding, with the draft on each
// other class's smallest group that holds it.
static rg_status_t try_with_draft(search_t *s, rg_placement_t *p, const int sizes[][32],
                                  const int *n_sizes, double draft_bytes) {
  if (pins_ok(s->req, p)) RG_RETURN_IF_ERROR(size_batch(s, p));
  if (!s->req->draft || p->n_groups >= RG_MAX_GROUPS || p->mode != RG_MODE_COLOCATED) return NULL;
  for (int d = 0; d < s->n_cls; d++) {
    if (s->cls[d] == p->groups[0].cls || forbidden(s->req, s->cls[d]) || !n_sizes[d]) continue;
    rg_placement_t q = *p;
    int k = min_size(s, d, draft_bytes, sizes[d], n_sizes[d]);
    set_group(s->req, &q, q.n_groups, "draft", s->cls[d], sizes[d][k]);
    q.groups[q.n_groups].tp = q.groups[q.n_groups].devices, q.groups[q.n_groups].pp = 1;
    if (rg_group_check(s->req->draft, &q.groups[q.n_groups])) {
      rg_status_free(rg_group_check(s->req->draft, &q.groups[q.n_groups]));
      rg_group_shape(s->req->fleet, s->req->draft, &q.groups[q.n_groups]);
    }
    q.slot_group[RG_SLOT_DRAFT] = q.n_groups++;
    if (pins_ok(s->req, &q)) RG_RETURN_IF_ERROR(size_batch(s, &q));
  }
  return NULL;
}

#define SIZE_STEPS 3

static rg_status_t enumerate(search_t *s) {
  const rg_plan_request_t *req = s->req;
  double w[RG_SLOT_COUNT];
  RG_RETURN_IF_ERROR(rg_slot_weights(req->model, req->weight_dtype, req->kv_dtype, w));
  double all = w[RG_SLOT_EMBED] + w[RG_SLOT_ATTENTION] + w[RG_SLOT_FFN] + w[RG_SLOT_LM_HEAD];
  double draft_bytes = 0;
  if (req->draft) {
    double dw[RG_SLOT_COUNT];
    RG_RETURN_IF_ERROR(rg_slot_weights(req->draft, req->weight_dtype, req->kv_dtype, dw));
    draft_bytes = dw[RG_SLOT_EMBED] + dw[RG_SLOT_ATTENTION] + dw[RG_SLOT_FFN] + dw[RG_SLOT_LM_HEAD];
  }
  int moe = req->model->n_experts > 0;
  int sizes[MAX_CLASSES][32], n_sizes[MAX_CLASSES];
  for (int i = 0; i < s->n_cls; i++) n_sizes[i] = valid_sizes(s, i, sizes[i], 32);
  rg_placement_t p;
  for (int a = 0; a < s->n_cls; a++) {
    if (forbidden(req, s->cls[a]) || !n_sizes[a]) continue;
    // Colocated: every stage on one group. MoE models also try attention
    // data-parallel over the group with the experts spread over all of it,
    // with and without two-batch overlap.
    int m0 = min_size(s, a, all + draft_bytes, sizes[a], n_sizes[a]);
    for (int k = m0; k < n_sizes[a] && k < m0 + SIZE_STEPS + (moe ? 2 : 0); k++) {
      base_placement(req, &p, RG_MODE_COLOCATED, 1);
      set_group(req, &p, 0, "main", s->cls[a], sizes[a][k]);
      RG_RETURN_IF_ERROR(try_with_draft(s, &p, (const int(*)[32])sizes, n_sizes, draft_bytes));
      if (moe && sizes[a][k] > 1)
        for (int mb = 1; mb <= 2; mb++) {
          base_placement(req, &p, RG_MODE_COLOCATED, 1);
          set_group(req, &p, 0, "main", s->cls[a], sizes[a][k]);
          p.groups[0].tp = 1, p.groups[0].pp = 1, p.groups[0].dp = sizes[a][k];
          p.micro_batches = mb;
          RG_RETURN_IF_ERROR(try_with_draft(s, &p, (const int(*)[32])sizes, n_sizes, draft_bytes));
        }
    }
    for (int f = 0; f < s->n_cls; f++) {
      if (forbidden(req, s->cls[f]) || !n_sizes[f]) continue;
      if (f != a) {
        // Attention-FFN: attention (and the KV) on a, FFN/experts on f; embed
        // and lm_head go with attention or with the FFN group.
        for (int head = 0; head < 2; head++) {
          double wa = w[RG_SLOT_ATTENTION] + (head ? 0 : w[RG_SLOT_EMBED] + w[RG_SLOT_LM_HEAD]);
          double wf = w[RG_SLOT_FFN] + (head ? w[RG_SLOT_EMBED] + w[RG_SLOT_LM_HEAD] : 0);
          int ma = min_size(s, a, wa, sizes[a], n_sizes[a]);
          int mf = min_size(s, f, wf, sizes[f], n_sizes[f]);
          for (int ka = ma; ka < n_sizes[a] && ka < ma + SIZE_STEPS; ka++)
            for (int kf = mf; kf < n_sizes[f] && kf < mf + SIZE_STEPS; kf++)
              for (int mb = 1; mb <= 2; mb++) {
                base_placement(req, &p, RG_MODE_AF, 2);
                set_group(req, &p, 0, "attn", s->cls[a], sizes[a][ka]);
                set_group(req, &p, 1, "ffn", s->cls[f], sizes[f][kf]);
                p.slot_group[RG_SLOT_FFN] = 1;
                p.slot_group[RG_SLOT_EMBED] = p.slot_group[RG_SLOT_LM_HEAD] = head;
                p.micro_batches = mb;
                if (pins_ok(req, &p)) RG_RETURN_IF_ERROR(size_batch(s, &p));
              }
        }
      }
      // Prefill-decode: decode colocated on a, prefill on f, which may be the
      // same class: a one-class fleet split into a prefill and a decode pool.
      int md = min_size(s, a, all, sizes[a], n_sizes[a]);
      int mp = min_size(s, f, all, sizes[f], n_sizes[f]);
      for (int kd = md; kd < n_sizes[a] && kd < md + SIZE_STEPS; kd++)
        for (int kp = mp; kp < n_sizes[f] && kp < mp + SIZE_STEPS; kp++) {
          if (f == a && sizes[a][kd] + sizes[f][kp] > s->count[a]) continue;
          base_placement(req, &p, RG_MODE_PD, 2);
          set_group(req, &p, 0, "decode", s->cls[a], sizes[a][kd]);
          set_group(req, &p, 1, "prefill", s->cls[f], sizes[f][kp]);
          p.slot_group[RG_SLOT_PREFILL] = 1;
          if (pins_ok(req, &p)) RG_RETURN_IF_ERROR(size_batch(s, &p));
          if (moe && sizes[a][kd] > 1) {
            // Decode with data-parallel attention and experts over the group.
            p.groups[0].tp = 1, p.groups[0].pp = 1, p.groups[0].dp = sizes[a][kd];
            p.micro_batches = 2;
            if (pins_ok(req, &p)) RG_RETURN_IF_ERROR(size_batch(s, &p));
          }
        }
    }
  }
  return NULL;
}

// Best candidate matching a filter, replicated as far as the fleet allows.
static rg_status_t best_single(search_t *s, int mode, const rg_device_class_t *only,
                               const char *label, rg_plan_option_t *o) {
  memset(o, 0, sizeof(*o));
  snprintf(o->label, sizeof o->label, "%s", label);
  double best = -1;
  rg_plan_option_t trial;
  for (size_t i = 0; i < s->n_cands; i++) {
    cand_t *c = &s->cands[i];
    if (mode >= 0 && (int)c->p.mode != mode) continue;
    if (only && (c->p.groups[0].cls != only || c->p.mode != RG_MODE_COLOCATED)) continue;
    if (only)
      for (int g = 1; g < c->p.n_groups; g++)
        if (c->p.groups[g].cls != only) goto next;
    // Rank by the candidate's own figure first; only the best few need the
    // full replicated evaluation.
    double v = c->value * (s->req->objective == RG_OBJ_THROUGHPUT ? c->max_replicas : 1);
    if (v <= best) continue;
    memset(&trial, 0, sizeof trial);
    trial.pools[0] = c->p;
    trial.pools[0].replicas = c->max_replicas;
    trial.n_pools = 1;
    RG_RETURN_IF_ERROR(rg__option_finish(s->req, &trial));
    v = rg__option_score(&trial, s->req->objective);
    if (v > best) {
      best = v;
      snprintf(trial.label, sizeof trial.label, "%s", label);
      *o = trial;
    }
  next:;
  }
  if (best < 0) snprintf(o->why, sizeof o->why, "no placement of this kind fits or meets the SLOs");
  return NULL;
}

#define MILP_COLUMNS 32

typedef struct {
  int col;
  double score;
} ranked_t;

static int by_score(const void *x, const void *y) {
  double a = ((const ranked_t *)x)->score, b = ((const ranked_t *)y)->score;
  return (a < b) - (a > b);
}

// Keeps the columns the LP relaxation uses and the next best by reduced
// cost, MILP_COLUMNS in all (more when the relaxation uses more).
static rg_status_t prune_columns(search_t *s, int *pick, size_t *n) {
  glp_prob *lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MAX);
  glp_add_rows(lp, s->n_cls);
  for (int c = 0; c < s->n_cls; c++) glp_set_row_bnds(lp, c + 1, GLP_UP, 0, s->count[c]);
  glp_add_cols(lp, (int)*n);
  size_t nz = *n * (size_t)s->n_cls + 1;
  int *ia = malloc(sizeof(int) * nz), *ja = malloc(sizeof(int) * nz);
  double *ar = malloc(sizeof(double) * nz);
  ranked_t *rank = malloc(sizeof(ranked_t) * *n);
  if (!ia || !ja || !ar || !rank) {
    free(ia), free(ja), free(ar), free(rank);
    glp_delete_prob(lp);
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory in the placement search");
  }
  int k = 0;
  for (size_t j = 0; j < *n; j++) {
    const cand_t *c = &s->cands[pick[j]];
    glp_set_col_bnds(lp, (int)j + 1, GLP_DB, 0, c->max_replicas);
    glp_set_obj_coef(lp, (int)j + 1, c->pred.tokens_per_s);
    for (int cl = 0; cl < s->n_cls; cl++)
      if (c->uses[cl]) ia[++k] = cl + 1, ja[k] = (int)j + 1, ar[k] = c->uses[cl];
  }
  glp_load_matrix(lp, k, ia, ja, ar);
  glp_smcp parm;
  glp_init_smcp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  int ok = glp_simplex(lp, &parm) == 0 && glp_get_status(lp) == GLP_OPT;
  for (size_t j = 0; j < *n; j++) {
    rank[j].col = pick[j];
    // Used columns first, then by reduced cost (0 for basic, negative for
    // columns the optimum leaves out at zero).
    double x = ok ? glp_get_col_prim(lp, (int)j + 1) : 0,
           d = ok ? glp_get_col_dual(lp, (int)j + 1) : 0;
    rank[j].score = x > 1e-9 ? 1e300 : d;
  }
  qsort(rank, *n, sizeof rank[0], by_score);
  size_t keep = MILP_COLUMNS;
  while (keep < *n && rank[keep].score >= 1e300) keep++;
  if (keep < *n) *n = keep;
  for (size_t j = 0; j < *n; j++) pick[j] = rank[j].col;
  free(ia), free(ja), free(ar), free(rank);
  glp_delete_prob(lp);
  return NULL;
}

// Packs replicas of several candidates into the fleet, maximizing total
// tokens/s, as an integer program: x_j replicas of candidate j,
// sum_j uses[j][c] * x_j <= count[c], at most RG_MAX_POOLS distinct j.
static rg_status_t pack_milp(search_t *s, rg_plan_option_t *o, char *status, size_t status_len) {
  // Keep the best candidate per structure (mode and classes), by tokens/s
  // per device, so the program stays small.
  size_t n = 0;
  int *pick = calloc(s->n_cands ? s->n_cands : 1, sizeof(int));
  if (!pick) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory in the placement search");
  for (size_t i = 0; i < s->n_cands; i++) {
    cand_t *c = &s->cands[i];
    int dev = 0;
    for (int g = 0; g < c->p.n_groups; g++) dev += c->p.groups[g].devices;
    double per = c->pred.tokens_per_s / dev;
    size_t j = 0;
    for (; j < n; j++) {
      cand_t *d = &s->cands[pick[j]];
      if (d->p.mode != c->p.mode || d->p.n_groups != c->p.n_groups) continue;
      int same = 1;
      for (int g = 0; g < c->p.n_groups; g++) same &= d->p.groups[g].cls == c->p.groups[g].cls;
      same &= d->p.slot_group[RG_SLOT_EMBED] == c->p.slot_group[RG_SLOT_EMBED];
      if (!same) continue;
      int ddev = 0;
      for (int g = 0; g < d->p.n_groups; g++) ddev += d->p.groups[g].devices;
      if (per > d->pred.tokens_per_s / ddev) pick[j] = (int)i;
      break;
    }
    if (j == n) pick[n++] = (int)i;
  }
  // The integer program needs only the structures that could be in the best
  // plan. Its LP relaxation (no integrality, no pool limit) says which: those
  // it uses, and those whose reduced cost is nearest to entering. A large
  // fleet with many classes then solves in milliseconds.
  if (n > MILP_COLUMNS) RG_RETURN_IF_ERROR(prune_columns(s, pick, &n));
  glp_prob *lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MAX);
  glp_add_rows(lp, s->n_cls + 1);
  for (int c = 0; c < s->n_cls; c++) glp_set_row_bnds(lp, c + 1, GLP_UP, 0, s->count[c]);
  glp_set_row_bnds(lp, s->n_cls + 1, GLP_UP, 0, RG_MAX_POOLS);
  // Columns: x_1..x_n (replicas), y_1..y_n (pool used).
  glp_add_cols(lp, 2 * (int)n);
  int nz = (int)n * (s->n_cls + 3) + 1;  // per column: its classes, the pool row, two link rows
  int *ia = malloc(sizeof(int) * (nz + 1)), *ja = malloc(sizeof(int) * (nz + 1));
  double *ar = malloc(sizeof(double) * (nz + 1));
  if (!ia || !ja || !ar) {
    free(ia), free(ja), free(ar), free(pick);
    glp_delete_prob(lp);
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory in the placement search");
  }
  int k = 0;
  int link_row = glp_add_rows(lp, (int)n);  // x_j - ub_j * y_j <= 0
  for (size_t j = 0; j < n; j++) {
    cand_t *c = &s->cands[pick[j]];
    int x = (int)j + 1, y = (int)(n + j) + 1;
    glp_set_col_kind(lp, x, GLP_IV);
    glp_set_col_bnds(lp, x, GLP_DB, 0, c->max_replicas);
    glp_set_obj_coef(lp, x, c->pred.tokens_per_s);
    glp_set_col_kind(lp, y, GLP_BV);
    for (int cl = 0; cl < s->n_cls; cl++)
      if (c->uses[cl]) ia[++k] = cl + 1, ja[k] = x, ar[k] = c->uses[cl];
    ia[++k] = s->n_cls + 1, ja[k] = y, ar[k] = 1;
    glp_set_row_bnds(lp, link_row + (int)j, GLP_UP, 0, 0);
    ia[++k] = link_row + (int)j, ja[k] = x, ar[k] = 1;
    ia[++k] = link_row + (int)j, ja[k] = y, ar[k] = -c->max_replicas;
  }
  glp_load_matrix(lp, k, ia, ja, ar);
  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.presolve = GLP_ON;
  parm.msg_lev = GLP_MSG_OFF;
  parm.tm_lim = 800;
  parm.mip_gap = 1e-4;
  int ret = glp_intopt(lp, &parm);
  int st = glp_mip_status(lp);
  snprintf(status, status_len, "%s",
           ret == 0 && st == GLP_OPT ? "optimal"
           : ret == GLP_EMIPGAP      ? "within 0.01% of optimal"
           : st == GLP_FEAS          ? "feasible (time limit)"
                                     : "no integer solution");
  memset(o, 0, sizeof(*o));
  snprintf(o->label, sizeof o->label, "chosen");
  if (st == GLP_OPT || st == GLP_FEAS) {
    for (size_t j = 0; j < n && o->n_pools < RG_MAX_POOLS; j++) {
      int x = (int)lround(glp_mip_col_val(lp, (int)j + 1));
      if (x <= 0) continue;
      o->pools[o->n_pools] = s->cands[pick[j]].p;
      o->pools[o->n_pools].replicas = x;
      o->n_pools++;
    }
  }
  glp_delete_prob(lp);
  free(ia), free(ja), free(ar), free(pick);
  if (o->n_pools) RG_RETURN_IF_ERROR(rg__option_finish(s->req, o));
  return NULL;
}

// A fixed pool must honour the pins and forbids given with it.
static rg_status_t check_fixed_constraints(const rg_plan_request_t *req, int i,
                                           const rg_placement_t *p) {
  for (int g = 0; g < p->n_groups; g++)
    for (int k = 0; k < req->n_forbid; k++)
      if (p->groups[g].cls == req->forbid[k])
        return rg_status_make(RG_INVALID_ARGUMENT,
                              "pool %d: group '%s' uses %s, which forbid (%s) excludes", i + 1,
                              p->groups[g].name, p->groups[g].cls->name, req->forbid_where[k]);
  for (int s = 0; s < RG_SLOT_COUNT; s++) {
    if (!req->pin[s]) continue;
    if (s == RG_SLOT_PREFILL && p->mode != RG_MODE_PD) continue;
    if (s == RG_SLOT_DRAFT && !req->draft) continue;
    const rg_device_class_t *c = p->groups[p->slot_group[s]].cls;
    if (c != req->pin[s])
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "pool %d: stage %s runs on %s, but pin.%s (%s) asks for %s", i + 1,
                            rg_slot_name((rg_slot_t)s), c->name, rg_slot_name((rg_slot_t)s),
                            req->pin_where[s], req->pin[s]->name);
  }
  return NULL;
}

static rg_status_t solve_fixed(search_t *s, rg_plan_t *out) {
  const rg_plan_request_t *req = s->req;
  rg_plan_option_t *o = &out->chosen;
  memset(o, 0, sizeof(*o));
  snprintf(o->label, sizeof o->label, "your placement");
  // Device counts first: a pool the fleet cannot host is the error to
  // report, whatever else is wrong with it.
  int used[MAX_CLASSES] = {0};
  for (int i = 0; i < req->n_fixed; i++) {
    const rg_placement_t *p = &req->fixed[i];
    RG_RETURN_IF_ERROR(check_fixed_constraints(req, i, p));
    for (int g = 0; g < p->n_groups; g++) {
      int ci = class_index(s, p->groups[g].cls);
      if (ci < 0)
        return rg_status_make(RG_INFEASIBLE, "pool %d uses %s, which fleet '%s' does not have",
                              i + 1, p->groups[g].cls->name, req->fleet->name);
      used[ci] += p->groups[g].devices * (p->replicas > 0 ? p->replicas : 1);
    }
  }
  for (int c = 0; c < s->n_cls; c++)
    if (used[c] > s->count[c])
      return rg_status_make(
          RG_INFEASIBLE, "the placement uses %d x %s but fleet '%s' has %d (short by %d)", used[c],
          s->cls[c]->name, req->fleet->name, s->count[c], used[c] - s->count[c]);
  for (int i = 0; i < req->n_fixed; i++) {
    rg_placement_t p = req->fixed[i];
    for (int g = 0; g < p.n_groups; g++) {
      int draft_only = req->draft && p.slot_group[RG_SLOT_DRAFT] == g;
      for (int sl = RG_SLOT_EMBED; sl <= RG_SLOT_LM_HEAD; sl++) draft_only &= p.slot_group[sl] != g;
      if (p.mode == RG_MODE_PD && p.slot_group[RG_SLOT_PREFILL] == g) draft_only = 0;
      rg_status_t st = rg_group_check(draft_only ? req->draft : req->model, &p.groups[g]);
      if (st) return rg_status_wrap(st, "pool %d", i + 1);
    }
    if (p.batch <= 0) {
      // No batch given: find the largest that fits and meets the SLOs. The
      // nearest-miss notes must describe this pool, not the free search.
      s->mem_msg[0] = s->slo_msg[0] = 0;
      s->best_mem_ratio = s->best_slo_ratio = 0;
      size_t before = s->n_cands;
      int r = p.replicas;
      p.planning_replicas = r > 0 ? r : 1;
      RG_RETURN_IF_ERROR(size_batch(s, &p));
      if (s->n_cands == before)
        return rg_status_make(RG_INFEASIBLE, "pool %d: no batch size fits and meets the SLOs%s%s",
                              i + 1, s->mem_msg[0] || s->slo_msg[0] ? "; " : "",
                              s->mem_msg[0] ? s->mem_msg : s->slo_msg);
      p = s->cands[--s->n_cands].p;
      p.replicas = r;
    }
    if (p.replicas <= 0) p.replicas = 1;
    o->pools[o->n_pools++] = p;
  }
  for (int i = 0; i < o->n_pools; i++) {
    rg_status_t st = rg_placement_predict(req, &o->pools[i], &o->pred[i]);
    if (st) return rg_status_wrap(st, "pool %d", i + 1);
  }
  return rg__option_finish(req, o);
}

static rg_status_t infeasible(search_t *s) {
  const rg_plan_request_t *req = s->req;
  char w[32];
  double all = rg_arch_weight_bytes(req->model, req->weight_dtype);
  rg_fmt_quantity(all, RG_UNIT_BYTES, w, sizeof w);
  if (!s->any_fit)
    return rg_status_make(
        RG_INFEASIBLE, "%s needs %s of %s weights plus KV, and no group of fleet '%s' holds it; %s",
        req->model->name, w, rg_dtype_name(req->weight_dtype), req->fleet->name,
        s->mem_msg[0] ? s->mem_msg : "no device class is allowed");
  return rg_status_make(RG_INFEASIBLE, "no placement on fleet '%s' meets the workload's SLOs; %s",
                        req->fleet->name, s->slo_msg);
}

// Pins and forbids must be satisfiable: a pinned class the fleet has and the
// user did not also forbid. Messages say where each was given.
static rg_status_t check_constraints(const search_t *s) {
  const rg_plan_request_t *req = s->req;
  for (int sl = 0; sl < RG_SLOT_COUNT; sl++) {
    const rg_device_class_t *c = req->pin[sl];
    if (!c) continue;
    for (int k = 0; k < req->n_forbid; k++)
      if (req->forbid[k] == c)
        return rg_status_make(
            RG_INVALID_ARGUMENT, "pin.%s (%s) asks for %s, which forbid (%s) excludes",
            rg_slot_name((rg_slot_t)sl), req->pin_where[sl], c->name, req->forbid_where[k]);
    if (class_index(s, c) < 0) {
      char have[512] = "";
      for (int i = 0; i < s->n_cls; i++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", i ? ", " : "",
                 s->cls[i]->name);
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "pin.%s (%s) asks for %s, which fleet '%s' does not have (it has %s)",
                            rg_slot_name((rg_slot_t)sl), req->pin_where[sl], c->name,
                            req->fleet->name, have);
    }
  }
  return NULL;
}

rg_status_t rg_plan_solve(const rg_plan_request_t *req, rg_plan_t *out) {
  memset(out, 0, sizeof(*out));
  double t0 = rg_clock_now();
  search_t s = {.req = req};
  const rg_fleet_t *f = req->fleet;
  for (int i = 0; i < f->n_nodes; i++)
    for (int j = 0; j < f->nodes[i].n_devs; j++) {
      const rg_device_class_t *c = f->nodes[i].devs[j].cls;
      if (!rg_class_computes(c) || class_index(&s, c) >= 0) continue;
      if (s.n_cls == MAX_CLASSES)
        return rg_status_make(RG_INVALID_ARGUMENT, "fleet '%s' has more than %d device classes",
                              f->name, MAX_CLASSES);
      s.cls[s.n_cls] = c;
      s.count[s.n_cls++] = rg_fleet_count(f, c);
    }
  if (req->workload->speculative.present && !req->draft)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "workload '%s' decodes speculatively with draft '%s', but no draft "
                          "model was loaded",
                          req->workload->name, req->workload->speculative.draft);
  rg_status_t st = check_constraints(&s);
  if (!st && req->n_fixed > 0) st = solve_fixed(&s, out);
  if (!st) st = enumerate(&s);
  if (!st && !s.n_cands && req->n_fixed == 0) st = infeasible(&s);
  if (!st) {
    // Baselines: the best homogeneous placement per class, then the best
    // prefill-decode and attention-FFN variants.
    for (int c = 0; c < s.n_cls && !st; c++) {
      char label[96];
      snprintf(label, sizeof label, "homogeneous %s", s.cls[c]->name);
      st = best_single(&s, RG_MODE_COLOCATED, s.cls[c], label, &out->baselines[out->n_baselines++]);
    }
    if (!st)
      st = best_single(&s, RG_MODE_PD, NULL, "prefill-decode", &out->baselines[out->n_baselines++]);
    if (!st)
      st = best_single(&s, RG_MODE_AF, NULL, "attention-FFN", &out->baselines[out->n_baselines++]);
  }
  if (!st && req->n_fixed == 0) {
    if (req->objective == RG_OBJ_THROUGHPUT) {
      st = pack_milp(&s, &out->chosen, out->milp_status, sizeof out->milp_status);
    } else {
      // A ratio objective is maximized by the single best-ratio replica
      // kind; replicate it as far as the fleet allows.
      st = best_single(&s, -1, NULL, "chosen", &out->chosen);
      snprintf(out->milp_status, sizeof out->milp_status, "not needed (ratio objective)");
    }
    // Never report a plan worse than a baseline it printed beside itself.
    for (int i = 0; !st && i < out->n_baselines; i++)
      if (rg__option_score(&out->baselines[i], req->objective) >
          rg__option_score(&out->chosen, req->objective) * (1 + 1e-9)) {
        out->chosen = out->baselines[i];
        snprintf(out->chosen.label, sizeof out->chosen.label, "chosen");
      }
  }
  out->candidates = s.evaluated;
  free(s.cands);
  // GLPK keeps an environment per thread in thread-local storage, which
  // LeakSanitizer (run without TLS roots, see scripts/test.sh) reports at
  // exit: free it, since no problem outlives the solve.
  glp_free_env();
  out->solve_seconds = rg_clock_now() - t0;
  return st;
}
