// The roofline cost model: how long one replica of a placement takes per
// decode step and per prefill, whether it fits in memory, and what it yields
// per second, dollar and watt.
//
// Model, in brief (docs/planner.md has the long form):
// - A stage on a group of n devices splits its work evenly (tensor or expert
//   parallel): time = max(FLOPs / (n * peak * eff_compute),
//                         bytes / (n * bandwidth * eff_memory)).
// - Tensor parallel groups all-reduce the hidden state twice per layer over
//   the node's link; groups wider than a node add one cross-node hop per
//   extra node (pipeline parallel); expert-parallel MoE adds an all-to-all.
// - Stages on different groups exchange hidden states per layer over the
//   link between them. With m micro-batches the groups overlap (ping-pong):
//   step = max(m * slowest resource, one micro-batch's full path).
// - Prefill shares the decode groups (colocated, attention-FFN) and stretches
//   TBT by the time it takes (chunked prefill), or runs on its own group
//   (prefill-decode) and ships the prompt's KV over the network.
// - TTFT adds an M/D/1 queueing wait at the workload's arrival rate.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "planner/planner_impl.h"

// Memory kept free on each device for the runtime, fragmentation and
// allocator slack; vLLM's default gpu_memory_utilization is 0.9 for the same
// reason.
#define MEM_HEADROOM 0.90
// Tokens of one prefill chunk: bounds activation memory and the TBT stall.
#define PREFILL_CHUNK 2048.0
// Load assumed for TTFT queueing when the workload gives no arrival rate.
#define DEFAULT_LOAD 0.7

const char *rg_mode_name(rg_mode_t m) {
  switch (m) {
    case RG_MODE_COLOCATED: return "colocated";
    case RG_MODE_AF: return "attention-ffn";
    case RG_MODE_PD: return "prefill-decode";
  }
  return "?";
}

static const char *const slot_names[RG_SLOT_COUNT] = {"embed", "attention", "ffn", "lm_head",
                                                      "prefill"};
const char *rg_slot_name(rg_slot_t s) { return (unsigned)s < RG_SLOT_COUNT ? slot_names[s] : "?"; }

static const char *const objective_names[] = {"throughput", "tokens-per-dollar", "tokens-per-watt"};
const char *rg_objective_name(rg_objective_t o) { return objective_names[o]; }
int rg_objective_parse(const char *s, rg_objective_t *out) {
  for (int i = 0; i < 3; i++)
    if (!strcmp(s, objective_names[i])) {
      *out = (rg_objective_t)i;
      return 0;
    }
  return 1;
}

int rg_slot_of_stage(rg_stage_kind_t k) {
  switch (k) {
    case RG_STAGE_EMBED: return RG_SLOT_EMBED;
    case RG_STAGE_ATTENTION: return RG_SLOT_ATTENTION;
    case RG_STAGE_FFN:
    case RG_STAGE_MOE: return RG_SLOT_FFN;
    case RG_STAGE_LM_HEAD: return RG_SLOT_LM_HEAD;
    default: return -1;
  }
}

// Link joining two groups of (possibly) different classes. Classes that
// share a node type talk over their host links (PCIe); otherwise over the
// fleet network, whose per-node bandwidth scales with the nodes involved.
rg_link_t rg__link_between(const rg_fleet_t *f, const rg_group_t *a, const rg_group_t *b) {
  if (a->cls == b->cls) return rg_fleet_intra_link(f, a->cls);
  for (int i = 0; i < f->n_nodes; i++) {
    int has_a = 0, has_b = 0;
    for (int j = 0; j < f->nodes[i].n_devs; j++) {
      has_a |= f->nodes[i].devs[j].cls == a->cls;
      has_b |= f->nodes[i].devs[j].cls == b->cls;
    }
    if (has_a && has_b) {
      rg_link_t l = a->cls->host.bandwidth ? a->cls->host : b->cls->host;
      if (b->cls->host.bandwidth && b->cls->host.bandwidth < l.bandwidth) l = b->cls->host;
      if (l.bandwidth) return l;
    }
  }
  rg_link_t net = f->network;
  int pa = rg_fleet_per_node(f, a->cls), pb = rg_fleet_per_node(f, b->cls);
  int na = pa ? (a->devices + pa - 1) / pa : 1, nb = pb ? (b->devices + pb - 1) / pb : 1;
  int nodes = na < nb ? na : nb;
  net.bandwidth *= nodes > 0 ? nodes : 1;
  return net;
}

// Time of one stage entry on a group; adds to the compute/memory split.
static double stage_time(const rg_stage_cost_t *c, const rg_group_t *g, rg_dtype_t wt,
                         double *t_comp, double *t_mem) {
  const rg_device_class_t *k = g->cls;
  double peak = rg_class_peak(k, wt) * k->eff_compute * g->devices;
  double bw = k->mem[0].bandwidth * k->eff_memory * g->devices;
  double tc = peak > 0 ? c->flops / peak : INFINITY;
  double tm = c->bytes / bw;
  *t_comp += tc;
  *t_mem += tm;
  return tc > tm ? tc : tm;
}

// Collective costs a group pays per step for the layers it runs.
static double group_comm(const rg_plan_request_t *req, const rg_group_t *g, int runs_attn,
                         int runs_ffn, double tokens) {
  const rg_arch_t *a = req->model;
  double hidden = tokens * rg_arch_hidden_bytes(a, RG_BF16);
  double t = 0;
  if (g->tp > 1) {
    rg_link_t l = rg_fleet_intra_link(req->fleet, g->cls);
    double ar = 2.0 * (g->tp - 1) / g->tp * hidden / l.bandwidth + 2.0 * (g->tp - 1) * l.latency;
    t += (runs_attn + runs_ffn) * a->n_layers * ar;
  }
  if (g->pp > 1) {
    rg_link_t net = req->fleet->network;
    t += (g->pp - 1) * (hidden / net.bandwidth + net.latency);
  }
  if (runs_ffn && a->n_experts > 0 && g->devices > 1) {
    // Expert parallel: each token's hidden state goes to its k experts and
    // back; (n-1)/n of that crosses devices.
    rg_link_t l = g->pp > 1 ? req->fleet->network : rg_fleet_intra_link(req->fleet, g->cls);
    double bytes = 2.0 * hidden * a->n_experts_per_tok * (g->devices - 1) / g->devices;
    t += rg_arch_n_moe_layers(a) * (bytes / (l.bandwidth * g->pp) + 2 * l.latency);
  }
  return t;
}

typedef struct {
  double group_time[RG_MAX_GROUPS];
  double t_comp[RG_MAX_GROUPS], t_mem[RG_MAX_GROUPS];
  double link_time;
  double total;  // one pass, no overlap
} step_t;

// One forward step of `shape` through the placement, with stages mapped to
// groups as for decode (prefill_all: every stage on the prefill group).
static rg_status_t run_step(const rg_plan_request_t *req, const rg_placement_t *p,
                            const rg_shape_t *shape, int prefill_all, step_t *out) {
  rg_stage_cost_t costs[RG_MAX_STAGE_COSTS];
  size_t n;
  RG_RETURN_IF_ERROR(rg_stage_costs(req->model, shape, costs, RG_MAX_STAGE_COSTS, &n));
  memset(out, 0, sizeof(*out));
  int runs_attn[RG_MAX_GROUPS] = {0}, runs_ffn[RG_MAX_GROUPS] = {0};
  for (size_t i = 0; i < n; i++) {
    if (costs[i].is_part) continue;
    int slot = rg_slot_of_stage(costs[i].kind);
    if (slot < 0) continue;
    int g = prefill_all ? p->slot_group[RG_SLOT_PREFILL] : p->slot_group[slot];
    out->group_time[g] += stage_time(&costs[i], &p->groups[g], p->weight_dtype, &out->t_comp[g],
                                     &out->t_mem[g]);
    if (slot == RG_SLOT_ATTENTION) runs_attn[g] = 1;
    if (slot == RG_SLOT_FFN) runs_ffn[g] = 1;
  }
  double tokens = (double)shape->batch * shape->new_tokens;
  for (int g = 0; g < p->n_groups; g++)
    if (runs_attn[g] || runs_ffn[g])
      out->group_time[g] += group_comm(req, &p->groups[g], runs_attn[g], runs_ffn[g], tokens);
  if (!prefill_all) {
    // Hidden states crossing between groups: attention<->FFN twice a layer,
    // and embed/lm_head hops when they sit elsewhere.
    const int *sg = p->slot_group;
    double hidden = tokens * rg_arch_hidden_bytes(req->model, RG_BF16);
    struct {
      int a, b;
      double count;
    } hops[] = {{sg[RG_SLOT_ATTENTION], sg[RG_SLOT_FFN], 2.0 * req->model->n_layers},
                {sg[RG_SLOT_EMBED], sg[RG_SLOT_ATTENTION], 1},
                {sg[RG_SLOT_FFN], sg[RG_SLOT_LM_HEAD], 1}};
    for (size_t h = 0; h < sizeof(hops) / sizeof(hops[0]); h++) {
      if (hops[h].a == hops[h].b) continue;
      rg_link_t l = rg__link_between(req->fleet, &p->groups[hops[h].a], &p->groups[hops[h].b]);
      out->link_time += hops[h].count * (hidden / l.bandwidth + l.latency);
    }
  }
  for (int g = 0; g < p->n_groups; g++) out->total += out->group_time[g];
  out->total += out->link_time;
  return NULL;
}

rg_status_t rg_slot_weights(const rg_arch_t *a, rg_dtype_t weight_dtype, rg_dtype_t kv_dtype,
                            double w[RG_SLOT_COUNT]) {
  rg_shape_t s = {RG_PHASE_DECODE, 1, 1, 1, weight_dtype, kv_dtype, RG_BF16};
  rg_stage_cost_t costs[RG_MAX_STAGE_COSTS];
  size_t n;
  RG_RETURN_IF_ERROR(rg_stage_costs(a, &s, costs, RG_MAX_STAGE_COSTS, &n));
  for (int i = 0; i < RG_SLOT_COUNT; i++) w[i] = 0;
  for (size_t i = 0; i < n; i++) {
    int slot = costs[i].is_part ? -1 : rg_slot_of_stage(costs[i].kind);
    if (slot >= 0) w[slot] += costs[i].resident_weight_bytes;
  }
  return NULL;
}

rg_request_shape_t rg_workload_request(const rg_workload_t *w) {
  const rg_session_t *ses = &w->session;
  rg_request_shape_t r = {ses->present ? ses->append_tokens : w->prompt.mean, ses->present ? ses->prefix_tokens : 0,
                          ses->present ? ses->output_tokens : w->output.mean};
  if (r.prompt < 1) r.prompt = 1;
  if (r.output < 1) r.output = 1;
  return r;
}

rg_shape_t rg_placement_decode_shape(const rg_plan_request_t *req, const rg_placement_t *p) {
  rg_request_shape_t r = rg_workload_request(req->workload);
  int m = p->micro_batches > 0 ? p->micro_batches : 1;
  rg_shape_t s = {RG_PHASE_DECODE, (p->batch + m - 1) / m, 1, (int64_t)(r.prefix + r.prompt + r.output / 2),
                  p->weight_dtype, p->kv_dtype, RG_BF16};
  return s;
}

rg_shape_t rg_placement_prefill_shape(const rg_plan_request_t *req, const rg_placement_t *p) {
  rg_request_shape_t r = rg_workload_request(req->workload);
  rg_shape_t s = {RG_PHASE_PREFILL, 1, (int64_t)r.prompt, (int64_t)r.prefix, p->weight_dtype, p->kv_dtype, RG_BF16};
  return s;
}

// Bytes each device of each group holds: its share of the weights of the
// stages it runs (a prefill-decode prefill group holds them all), the KV if
// attention runs there, and activation workspace.
static rg_status_t memory_use(const rg_plan_request_t *req, const rg_placement_t *p,
                              double ctx_tokens, double *use) {
  const rg_arch_t *a = req->model;
  double slot_w[RG_SLOT_COUNT];
  RG_RETURN_IF_ERROR(rg_slot_weights(a, p->weight_dtype, p->kv_dtype, slot_w));
  double w[RG_MAX_GROUPS] = {0};
  int holds[RG_MAX_GROUPS][RG_SLOT_COUNT] = {{0}};
  int pg = p->mode == RG_MODE_PD ? p->slot_group[RG_SLOT_PREFILL] : -1;
  for (int slot = 0; slot < RG_SLOT_COUNT; slot++) {
    if (slot == RG_SLOT_PREFILL) continue;
    int g = p->slot_group[slot];
    w[g] += slot_w[slot];
    holds[g][slot] = 1;
    if (pg >= 0 && pg != g) {
      w[pg] += slot_w[slot];
      holds[pg][slot] = 1;
    }
  }
  double kv_tok = rg_arch_kv_bytes_per_token(a, p->kv_dtype);
  double workspace_tokens = PREFILL_CHUNK + p->batch;
  double d_ff = a->d_ff > a->d_ff_expert * a->n_experts_per_tok ? a->d_ff
                                                                 : a->d_ff_expert * a->n_experts_per_tok;
  double act = workspace_tokens * (4.0 * a->d_model + 2.0 * d_ff) * 2.0;
  for (int g = 0; g < p->n_groups; g++) {
    double kv = 0;
    if (holds[g][RG_SLOT_ATTENTION]) {
      // Decode groups hold the running batch's KV; a prefill group holds one
      // chunk's worth while it ships it out.
      int decode_group = p->slot_group[RG_SLOT_ATTENTION] == g;
      kv = decode_group ? p->batch * ctx_tokens * kv_tok : PREFILL_CHUNK * kv_tok * 2;
    }
    use[g] = (w[g] + kv) / p->groups[g].devices + act / p->groups[g].devices;
  }
  return NULL;
}

double rg__group_capacity(const rg_group_t *g) { return g->cls->mem[0].capacity * MEM_HEADROOM; }

// Capacity and bandwidth of tier class `t` on the nodes that host `g`.
static void tier_share(const rg_fleet_t *f, const rg_group_t *g, const rg_device_class_t *t, double *cap,
                       double *bw, double *lat) {
  *cap = *bw = *lat = 0;
  int per = rg_fleet_per_node(f, g->cls);
  int nodes = per > 0 ? (g->devices + per - 1) / per : 1;
  for (int i = 0; i < f->n_nodes; i++) {
    int has_g = 0, n_t = 0;
    for (int j = 0; j < f->nodes[i].n_devs; j++) {
      has_g |= f->nodes[i].devs[j].cls == g->cls;
      if (f->nodes[i].devs[j].cls == t) n_t = f->nodes[i].devs[j].count;
    }
    if (has_g && n_t) {
      *cap = nodes * n_t * t->mem[0].capacity;
      *bw = nodes * n_t * t->mem[0].bandwidth;
      *lat = t->host.latency;
      return;
    }
  }
}

// Decides where idle sessions' KV waits and what bringing one back costs.
// Sessions spend most of their time waiting on a person (the digest's
// agentic shape: ~92%), so each running sequence stands for many idle ones
// whose KV must live somewhere or be recomputed on return.
static rg_status_t session_kv(const rg_plan_request_t *req, const rg_placement_t *p, rg_prediction_t *pred,
                              double ctx, double *out_return_time) {
  const rg_session_t *ses = &req->workload->session;
  const rg_group_t *ga = &p->groups[p->slot_group[RG_SLOT_ATTENTION]];
  double kv_sess = rg_arch_kv_bytes_per_token(req->model, p->kv_dtype) * ctx;
  double hw = ses->human_wait_fraction < 0.999 ? ses->human_wait_fraction : 0.999;
  pred->idle_sessions = p->batch * hw / (1.0 - hw);
  pred->idle_kv_bytes = pred->idle_sessions * kv_sess;
  // Recompute: prefill the whole context again on the prefill group.
  rg_shape_t rs = {RG_PHASE_PREFILL, 1, (int64_t)ctx, 0, p->weight_dtype, p->kv_dtype, RG_BF16};
  step_t st;
  RG_RETURN_IF_ERROR(run_step(req, p, &rs, p->mode == RG_MODE_PD, &st));
  pred->kv_recompute_time = st.total;
  // Reload: the tier's bandwidth, or the devices' host links, whichever is slower.
  const rg_device_class_t *best = NULL;
  double best_t = INFINITY, best_cap = 0;
  const rg_fleet_t *f = req->fleet;
  for (int i = 0; i < f->n_nodes; i++)
    for (int j = 0; j < f->nodes[i].n_devs; j++) {
      const rg_device_class_t *t = f->nodes[i].devs[j].cls;
      if (rg_class_computes(t)) continue;
      if (p->kv_policy == RG_KV_TIER && t != p->kv_offload) continue;
      double cap, bw, lat;
      tier_share(f, ga, t, &cap, &bw, &lat);
      if (cap <= 0) continue;
      double link = ga->cls->host.bandwidth > 0 ? ga->cls->host.bandwidth * ga->devices : bw;
      double time = kv_sess / (bw < link ? bw : link) + lat;
      if (cap >= pred->idle_kv_bytes && time < best_t) best = t, best_t = time, best_cap = cap;
    }
  if (p->kv_policy == RG_KV_TIER && !best) {
    char need[32];
    rg_fmt_quantity(pred->idle_kv_bytes, RG_UNIT_BYTES, need, sizeof need);
    return rg_status_make(RG_INFEASIBLE,
                          "kv_offload %s: the nodes of group '%s' lack it or it cannot hold the %.0f idle "
                          "sessions' KV (%s)",
                          p->kv_offload->name, ga->name, pred->idle_sessions, need);
  }
  pred->kv_reload_time = best ? best_t : 0;
  pred->kv_tier_capacity = best_cap;
  if (best && p->kv_policy != RG_KV_RECOMPUTE && (p->kv_policy == RG_KV_TIER || best_t < pred->kv_recompute_time)) {
    pred->kv_policy = RG_KV_TIER;
    pred->kv_tier = best;
    *out_return_time = best_t;
  } else {
    pred->kv_policy = RG_KV_RECOMPUTE;
    *out_return_time = pred->kv_recompute_time;
  }
  return NULL;
}

rg_status_t rg_placement_predict(const rg_plan_request_t *req, const rg_placement_t *p,
                                 rg_prediction_t *pred) {
  memset(pred, 0, sizeof(*pred));
  const rg_workload_t *w = req->workload;
  const rg_session_t *ses = &w->session;
  rg_request_shape_t rq = rg_workload_request(w);
  double prompt = rq.prompt, prefix = rq.prefix, out_tokens = rq.output;
  double ctx_end = prefix + prompt + out_tokens;

  // Memory first: a placement that does not fit predicts nothing.
  double use[RG_MAX_GROUPS];
  RG_RETURN_IF_ERROR(memory_use(req, p, ctx_end, use));
  for (int g = 0; g < p->n_groups; g++) {
    pred->mem_used[g] = use[g];
    pred->mem_cap[g] = rg__group_capacity(&p->groups[g]);
    if (use[g] > pred->mem_cap[g]) {
      char need[32], have[32];
      rg_fmt_quantity(use[g], RG_UNIT_BYTES, need, sizeof need);
      rg_fmt_quantity(pred->mem_cap[g], RG_UNIT_BYTES, have, sizeof have);
      return rg_status_make(RG_INFEASIBLE,
                            "group '%s' (%d x %s) needs %s per device but has %s usable (%.0f%% of %s)",
                            p->groups[g].name, p->groups[g].devices, p->groups[g].cls->name, need,
                            have, MEM_HEADROOM * 100, p->groups[g].cls->mem[0].name);
    }
  }

  // Decode step with m micro-batches in flight.
  int m = p->micro_batches > 0 ? p->micro_batches : 1;
  rg_shape_t ds = rg_placement_decode_shape(req, p);
  step_t st;
  RG_RETURN_IF_ERROR(run_step(req, p, &ds, 0, &st));
  double slowest = st.link_time;
  for (int g = 0; g < p->n_groups; g++) {
    if (st.group_time[g] > slowest) slowest = st.group_time[g];
    snprintf(pred->bound[g], sizeof(pred->bound[g]), "%s",
             st.t_comp[g] >= st.t_mem[g] ? "compute" : "memory");
  }
  double step = m * slowest > st.total ? m * slowest : st.total;

  // Prefill: a single prompt for TTFT; prompts batched up to a chunk for the
  // per-request cost, since short prompts share the weight reads.
  int pd = p->mode == RG_MODE_PD;
  rg_shape_t ps = rg_placement_prefill_shape(req, p);
  step_t pf1;
  RG_RETURN_IF_ERROR(run_step(req, p, &ps, pd, &pf1));
  int64_t pbatch = (int64_t)(PREFILL_CHUNK / prompt);
  if (pbatch < 1) pbatch = 1;
  ps.batch = pbatch;
  step_t pfb;
  RG_RETURN_IF_ERROR(run_step(req, p, &ps, pd, &pfb));
  double pf_cost = pfb.total / pbatch;  // device time per request
  pred->prefill_time = pf1.total;

  double kv_req = rg_arch_kv_bytes_per_token(req->model, p->kv_dtype) * prompt;
  double tokens_rate, req_rate, tbt, kv_time = 0, rho;
  // Requests/s reaching one replica: the workload's rate split over the
  // plan's pools by capacity (load_share), then over the pool's replicas.
  // While searching, the split is not known yet and a planning load is used.
  double rate_rep = w->rate > 0 && p->load_share > 0 ? w->rate * p->load_share / (p->replicas > 0 ? p->replicas : 1) : 0;
  double decode_tok = p->batch / step;  // tokens/s while decoding only
  if (pd) {
    rg_link_t l = rg__link_between(req->fleet, &p->groups[p->slot_group[RG_SLOT_PREFILL]],
                                   &p->groups[p->slot_group[RG_SLOT_ATTENTION]]);
    kv_time = kv_req / l.bandwidth + l.latency;
    double r_pf = 1.0 / pf_cost, r_dec = decode_tok / out_tokens, r_kv = l.bandwidth / kv_req;
    req_rate = r_pf < r_dec ? r_pf : r_dec;
    if (r_kv < req_rate) req_rate = r_kv;
    tbt = step;
    rho = rate_rep > 0 ? rate_rep * pf_cost : DEFAULT_LOAD;
  } else {
    // Colocated: time shares between decode and (chunked) prefill. Solving
    // R = (1 - R/O * c) * B/step for the output rate R:
    tokens_rate = decode_tok / (1.0 + decode_tok * pf_cost / out_tokens);
    req_rate = tokens_rate / out_tokens;
    double f = req_rate * pf_cost;  // fraction of time spent in prefill
    tbt = step / (1.0 - f);
    // Prefill waits behind everything the replica does.
    rho = rate_rep > 0 ? rate_rep / req_rate : DEFAULT_LOAD;
  }
  pred->load = rho;
  if (rho > 0.95) rho = 0.95;
  double ttft = pf1.total * (1.0 + rho / (2.0 * (1.0 - rho))) + kv_time;

  if (ses->present) {
    double returning = 0;
    RG_RETURN_IF_ERROR(session_kv(req, p, pred, prefix + prompt + out_tokens, &returning));
    // A step that follows a person's reply finds its KV off the device;
    // the tool-driven steps in between find it hot.
    double spr = ses->steps_per_request > 1 ? ses->steps_per_request : 1;
    ttft += returning / spr;
  }

  int replicas = p->replicas > 0 ? p->replicas : 1;
  double price = 0, power = 0;
  for (int g = 0; g < p->n_groups; g++) {
    price += p->groups[g].devices * p->groups[g].cls->price;
    power += p->groups[g].devices * p->groups[g].cls->power;
  }
  pred->tbt = tbt;
  pred->ttft = ttft;
  pred->requests_per_s = req_rate * replicas;
  pred->tokens_per_s = req_rate * out_tokens * replicas;
  pred->cost_per_s = price * replicas;
  pred->power = power * replicas;
  pred->tokens_per_dollar = pred->tokens_per_s / pred->cost_per_s;
  pred->tokens_per_joule = pred->tokens_per_s / pred->power;
  pred->meets_slo = (w->slo_tbt <= 0 || tbt <= w->slo_tbt) && (w->slo_ttft <= 0 || ttft <= w->slo_ttft);
  return NULL;
}
