// The cost model: how long one step takes on a group of devices, whether a
// placement fits in memory, and what a replica yields per second, dollar and
// watt, with latency percentiles. docs/planner.md has the long form; in
// brief:
//
// - Kernels, not stages, meet the roofline. A step on a group runs, per
//   layer, the QKV/O projections, the attention core over the KV, the FFN or
//   the router and experts, and lm_head once; each kernel takes
//     max( FLOPs / (peak(dtype) x eff(dtype, M)),  bytes / (bandwidth x eff_mem) )
//   on one device, where M is the tokens the kernel multiplies at once
//   (small-M matmuls run far below peak). Kernels run one after another, so
//   their times add: a big decode batch pays compute-bound GEMMs and then
//   memory-bound attention, not the max of the two.
// - Each device does its share: attention and dense FFNs split over tp
//   (KV heads split, or replicated when tp exceeds them; an MLA latent is
//   read whole by every rank) and replicated over dp, each replica with its
//   own sequences; MoE experts spread over the tp x dp devices of a stage;
//   layers over pp stages, with pp micro-batches keeping the pipeline full.
// - Fixed costs from the class: one `step` cost per forward step and a
//   `layer` floor per layer (kernel launch and sync on GPUs, the fabric hop
//   on wafer and LPU parts).
// - Communication, per stage and only for the layers the stage holds: two
//   TP all-reduces per layer over the node link (or the NICs when tp spans
//   nodes), a ring's bytes and a tree's latency; the expert all-to-all (dispatch in fp8, combine in
//   bf16) over NVLink inside a node and over every device's own NIC across nodes; one hop per
//   pipeline boundary. With two micro-batches one's communication hides behind the other's compute
//   (two-batch overlap).
// - Memory: each device's share of weights of its stage, the KV of its
//   replica's sequences at their expected occupancy (paged KV holds a
//   sequence's prompt and, on average over its life, half its output), and a
//   prefill chunk's activations, within mem_util of the first tier.
// - Prefill shares the decode groups (chunked; a step carrying a chunk is
//   slower, which the TBT tail sees) or runs on its own group (prefill-decode)
//   and ships the prompt's KV over the network. TTFT adds an M/G/1 wait.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "planner/planner_impl.h"

// Bytes per element of an expert dispatch (fp8 with block scales) and of
// its combine (bf16), as DeepEP sends them.
#define EP_DISPATCH_BYTES 1.0
#define EP_COMBINE_BYTES 2.0

const char *rg_mode_name(rg_mode_t m) {
  switch (m) {
    case RG_MODE_COLOCATED:
      return "colocated";
    case RG_MODE_AF:
      return "attention-ffn";
    case RG_MODE_PD:
      return "prefill-decode";
  }
  return "?";
}

static const char *const slot_names[] = {
#define RG_X_(e, n) n,
    RG_SLOT_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof(slot_names) / sizeof(slot_names[0]) == RG_SLOT_COUNT,
               "slot names out of step");
const char *rg_slot_name(rg_slot_t s) {
  return (unsigned)s < RG_SLOT_COUNT ? slot_names[s] : "?";
}

static const char *const objective_names[] = {
#define RG_X_(e, n) n,
    RG_OBJECTIVE_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof(objective_names) / sizeof(objective_names[0]) == RG_OBJECTIVE_COUNT,
               "objective names out of step");
const char *rg_objective_name(rg_objective_t o) {
  return (unsigned)o < RG_OBJECTIVE_COUNT ? objective_names[o] : "?";
}
int rg_objective_parse(const char *s, rg_objective_t *out) {
  for (int i = 0; i < RG_OBJECTIVE_COUNT; i++)
    if (!strcmp(s, objective_names[i])) {
      *out = (rg_objective_t)i;
      return 0;
    }
  return 1;
}

int rg_slot_of_stage(rg_stage_kind_t k) {
  switch (k) {
    case RG_STAGE_EMBED:
      return RG_SLOT_EMBED;
    case RG_STAGE_ATTENTION:
      return RG_SLOT_ATTENTION;
    case RG_STAGE_FFN:
    case RG_STAGE_MOE:
      return RG_SLOT_FFN;
    case RG_STAGE_LM_HEAD:
      return RG_SLOT_LM_HEAD;
    default:
      return -1;
  }
}

double rg__mem_util(const rg_plan_request_t *req) {
  return req->mem_util > 0 ? req->mem_util : RG_DEFAULT_MEM_UTIL;
}
double rg__prefill_chunk(const rg_plan_request_t *req) {
  return req->prefill_chunk > 0 ? req->prefill_chunk : RG_DEFAULT_PREFILL_CHUNK;
}
double rg__group_capacity(const rg_plan_request_t *req, const rg_group_t *g) {
  return g->cls->mem[0].capacity * rg__mem_util(req);
}

// Link joining two groups of (possibly) different classes. Classes that
// share a node type talk over their host links (PCIe); otherwise over the
// fleet network, each device of the smaller side through its own NIC share.
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
  double bwa = rg_fleet_nic_bandwidth(f, a->cls) * a->devices,
         bwb = rg_fleet_nic_bandwidth(f, b->cls) * b->devices;
  net.bandwidth = bwa < bwb ? bwa : bwb;
  return net;
}

// ----- Parallel shapes -----------------------------------------------------------

rg_status_t rg_group_check(const rg_arch_t *a, const rg_group_t *g) {
  if (g->tp < 1 || g->pp < 1 || g->dp < 1)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "group '%s': tp, pp and dp must be at least 1 (got %d, %d, %d)", g->name,
                          g->tp, g->pp, g->dp);
  if ((long long)g->tp * g->pp * g->dp != g->devices)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "group '%s': tp %d x pp %d x dp %d is %lld devices, but the group has %d",
                          g->name, g->tp, g->pp, g->dp, (long long)g->tp * g->pp * g->dp,
                          g->devices);
  if (a->n_heads % g->tp) {
    char ok[128] = "";
    for (int t = 1; t <= a->n_heads && strlen(ok) < sizeof ok - 8; t++)
      if (a->n_heads % t == 0 && (a->mla || t <= a->n_kv_heads || t % a->n_kv_heads == 0))
        snprintf(ok + strlen(ok), sizeof ok - strlen(ok), "%s%d", ok[0] ? ", " : "", t);
    return rg_status_make(
        RG_INVALID_ARGUMENT,
        "group '%s': tp %d does not divide %s's %lld attention heads; tp may be %s", g->name, g->tp,
        a->name, (long long)a->n_heads, ok);
  }
  if (!a->mla && g->tp > a->n_kv_heads && g->tp % a->n_kv_heads)
    return rg_status_make(
        RG_INVALID_ARGUMENT,
        "group '%s': tp %d is more than %s's %lld KV heads but not a multiple of them, so the "
        "KV heads cannot be replicated evenly",
        g->name, g->tp, a->name, (long long)a->n_kv_heads);
  if (g->pp > a->n_layers)
    return rg_status_make(RG_INVALID_ARGUMENT, "group '%s': pp %d is more than %s's %lld layers",
                          g->name, g->pp, a->name, (long long)a->n_layers);
  return NULL;
}

static int tp_ok(const rg_arch_t *a, int tp) {
  return a->n_heads % tp == 0 && (a->mla || tp <= a->n_kv_heads || tp % a->n_kv_heads == 0);
}

void rg_group_shape(const rg_fleet_t *f, const rg_arch_t *a, rg_group_t *g) {
  int per = f ? rg_fleet_per_node(f, g->cls) : g->devices;
  if (per < 1) per = 1;
  // The widest tp that divides the devices, fits in a node and suits the
  // heads; the rest become pipeline stages.
  int tp = 1;
  for (int t = g->devices < per ? g->devices : per; t >= 1; t--)
    if (g->devices % t == 0 && (!a || tp_ok(a, t))) {
      tp = t;
      break;
    }
  g->tp = tp;
  g->pp = g->devices / tp;
  g->dp = 1;
  if (a && g->pp > a->n_layers) {
    // More stages than layers: replicate whole pipelines instead.
    g->dp = g->pp / (int)a->n_layers + (g->pp % a->n_layers != 0);
    while (g->devices % (g->tp * g->dp)) g->dp++;
    g->pp = g->devices / (g->tp * g->dp);
  }
}

// ----- One step on one group ----------------------------------------------------

// Which of the target model's slots group gi runs in this phase: a
// prefill-decode placement prefills every stage on its prefill group and
// nothing elsewhere; otherwise both phases follow the decode mapping.
static void group_runs(const rg_placement_t *p, int gi, rg_phase_t phase, int runs[RG_SLOT_COUNT]) {
  int pd_prefill = p->mode == RG_MODE_PD && phase == RG_PHASE_PREFILL;
  for (int s = 0; s < RG_SLOT_COUNT; s++) runs[s] = 0;
  for (int s = RG_SLOT_EMBED; s <= RG_SLOT_LM_HEAD; s++)
    runs[s] = pd_prefill ? p->slot_group[RG_SLOT_PREFILL] == gi : p->slot_group[s] == gi;
}

typedef struct {
  double comp, mem;  // kernel times summed by their binding term
  double comm;       // communication of the stage
  double over;       // layer floors and the stage kinds' fixed costs
  double fixed;      // of which the stage kinds' fixed costs
  double layers;     // layers in the worst stage
  double hop;        // one pipeline boundary
} stage_t;

// A kernel at compute efficiency eff_c of the class's peak for dt.
static void kernel_at(const rg_device_class_t *c, rg_dtype_t dt, double eff_c, double flops,
                      double bytes, double eff_mem, stage_t *s) {
  double peak = rg_class_peak(c, dt) * eff_c;
  double tc = flops > 0 ? (peak > 0 ? flops / peak : INFINITY) : 0;
  double tm = bytes / (c->mem[0].bandwidth * eff_mem);
  if (tc >= tm)
    s->comp += tc;
  else
    s->mem += tm;
}

static void kernel_scaled(const rg_device_class_t *c, rg_dtype_t dt, double m, double flops,
                          double bytes, double eff_mem, double scale, stage_t *s) {
  kernel_at(c, dt, rg_class_eff_compute(c, dt, m < 1 ? 1 : m) * scale, flops, bytes,
            eff_mem * scale, s);
}

static void kernel_eff(const rg_device_class_t *c, rg_dtype_t dt, double m, double flops,
                       double bytes, double eff_mem, stage_t *s) {
  kernel_scaled(c, dt, m, flops, bytes, eff_mem, 1, s);
}

// Prefill attention's core (q new tokens a sequence, q > 1): its FLOPs at
// the class's measured rate for them where it has one
// (eff_attention_compute), else as a matmul of m rows. Decode's core is
// priced by its KV reads (eff_attention), which its calibration measures.
static void attention_core(const rg_device_class_t *c, double q, double m, double flops,
                           double bytes, double eff_mem, stage_t *s) {
  const double ec = c->eff_attention_compute;
  if (!(ec > 0) || q <= 1) {
    kernel_eff(c, RG_BF16, m, flops, bytes, eff_mem, s);
    return;
  }
  kernel_at(c, RG_BF16, ec, flops, bytes, eff_mem, s);
}

static void kernel(const rg_device_class_t *c, rg_dtype_t dt, double m, double flops, double bytes,
                   stage_t *s) {
  kernel_eff(c, dt, m, flops, bytes, rg_class_eff_memory(c, dt, m), s);
}

_Static_assert(RG_SLOT_EMBED == 0 && RG_SLOT_ATTENTION == 1 && RG_SLOT_FFN == 2 &&
                   RG_SLOT_LM_HEAD == 3 && RG_STAGE_SLOTS == 4,
               "rg_device_class_t.stage is indexed by the slots embed to lm_head");

double rg_stage_call_seconds(const rg_stage_figures_t *f, double tokens) {
  const int n = f->n_points;
  if (n <= 0) return f->call + f->token * tokens;
  const rg_stage_point_t *p = f->by_tokens;
  if (n == 1 || tokens <= p[0].tokens) return p[0].seconds;
  int i = 1;
  while (i < n - 1 && p[i].tokens < tokens) i++;
  double slope = (p[i].seconds - p[i - 1].seconds) / (p[i].tokens - p[i - 1].tokens);
  // Past the last point: its segment's cost per token, never a falling one.
  if (tokens > p[n - 1].tokens)
    return p[n - 1].seconds + fmax(slope, 0) * (tokens - p[n - 1].tokens);
  return p[i - 1].seconds + slope * (tokens - p[i - 1].tokens);
}

// A stage kind's own figures on top of the kernels just added since
// (comp0, mem0): they run at `eff` times the class's efficiencies, and
// each of the `calls` calls pays its fixed cost and its cost per token.
static void slot_figures(const rg_device_class_t *c, rg_slot_t slot, double comp0, double mem0,
                         double calls, double tokens, stage_t *s) {
  const rg_stage_figures_t *f = &c->stage[slot];
  if (f->eff > 0 && f->eff != 1) {
    s->comp = comp0 + (s->comp - comp0) / f->eff;
    s->mem = mem0 + (s->mem - mem0) / f->eff;
  }
  double t = calls * rg_stage_call_seconds(f, tokens);
  s->over += t;
  s->fixed += t;
}

// Routing is not even: with T k assignments spread at random over ep
// devices, each device's load is binomial and the step waits for the
// busiest, about mean + sqrt(2 ln(ep) mean) for the largest of ep such
// loads (the Gaussian tail).
static double expert_imbalance(double assignments, double ep) {
  if (ep <= 1) return 1;
  double mean = assignments / ep;
  if (mean <= 0) return 1;
  double f = 1 + sqrt(2 * log(ep) / mean);
  return f < ep ? f : ep;
}

// rg_stage_costs for one sequence, remembered: a search evaluates thousands
// of placements of the same model at the same step shapes, and only the
// batch changes between them. The memo is per thread and keyed on the whole
// architecture and shape, so a hit is always the same computation.
#define MEMO_SLOTS 16
// The entries of one step's costs the model uses, found once.
typedef struct {
  const rg_stage_cost_t *embed, *proj, *core, *ffn, *router, *experts, *shared, *head;
  double n_moe;  // MoE layers
} parts_t;

typedef struct {
  rg_arch_t arch;
  rg_shape_t shape;
  rg_stage_cost_t costs[RG_MAX_STAGE_COSTS];
  size_t n;
  parts_t parts;
  int used;
} memo_t;
static _Thread_local memo_t memo[MEMO_SLOTS];
static _Thread_local int memo_next;

static const rg_stage_cost_t *entry(const rg_stage_cost_t *c, size_t n, const char *name);

static rg_status_t costs_of(const rg_arch_t *a, rg_phase_t phase, double q, double ctx,
                            rg_dtype_t wdt, rg_dtype_t kvdt, const parts_t **out) {
  rg_shape_t shape;
  memset(&shape, 0, sizeof shape);
  shape.phase = phase;
  shape.batch = 1;
  shape.new_tokens = (int64_t)(q < 1 ? 1 : ceil(q));
  shape.context = (int64_t)ctx;
  shape.weight_dtype = wdt;
  shape.kv_dtype = kvdt;
  shape.act_dtype = RG_BF16;
  for (int i = 0; i < MEMO_SLOTS; i++)
    if (memo[i].used && !memcmp(&memo[i].shape, &shape, sizeof shape) &&
        !memcmp(&memo[i].arch, a, sizeof *a)) {
      *out = &memo[i].parts;
      return NULL;
    }
  memo_t *m = &memo[memo_next];
  memo_next = (memo_next + 1) % MEMO_SLOTS;
  m->used = 0;
  RG_RETURN_IF_ERROR(rg_stage_costs(a, &shape, m->costs, RG_MAX_STAGE_COSTS, &m->n));
  memcpy(&m->arch, a, sizeof *a);
  m->shape = shape;
  parts_t *p = &m->parts;
  p->embed = entry(m->costs, m->n, "embed");
  p->proj = entry(m->costs, m->n, "attention.proj");
  p->core = entry(m->costs, m->n, "attention.core");
  p->ffn = entry(m->costs, m->n, "ffn");
  p->router = entry(m->costs, m->n, "moe.router");
  p->experts = entry(m->costs, m->n, "moe.experts");
  p->shared = entry(m->costs, m->n, "moe.shared");
  p->head = entry(m->costs, m->n, "lm_head");
  p->n_moe = (double)rg_arch_n_moe_layers(a);
  m->used = 1;
  *out = p;
  return NULL;
}

static const rg_stage_cost_t *entry(const rg_stage_cost_t *c, size_t n, const char *name) {
  static const rg_stage_cost_t none;
  const rg_stage_cost_t *e = rg_stage_find(c, n, name);
  return e ? e : &none;
}

// Cost of the worst pipeline stage of g when it runs `runs` of model a for
// B sequences (over the whole group) adding q tokens each on ctx.
static rg_status_t stage_cost(const rg_plan_request_t *req, const rg_arch_t *a, const rg_group_t *g,
                              rg_phase_t phase, double B, double q, double ctx, rg_dtype_t wdt,
                              rg_dtype_t kvdt, const int runs[RG_SLOT_COUNT], stage_t *out) {
  memset(out, 0, sizeof(*out));
  const rg_device_class_t *c = g->cls;
  const double tp = g->tp, dp = g->dp, pp = g->pp, ep = g->tp * g->dp;
  const double L = (double)a->n_layers, Ls = ceil(L / pp), fs = Ls / L;

  // Sequences per attention replica; with fewer sequences than replicas the
  // busy replicas each hold one and the step takes as long as one of them.
  double b = B / dp < 1 ? 1 : B / dp;
  // Per-sequence costs, scaled by the sequences: everything but the weights
  // is linear in them (the experts' weights are worked out below).
  double sb = 1, scale = b;
  const parts_t *cs;
  RG_RETURN_IF_ERROR(costs_of(a, phase, q, ctx, wdt, kvdt, &cs));
  const double n_moe = cs->n_moe;
  const rg_shape_t shape = {phase, 1,      (int64_t)(q < 1 ? 1 : ceil(q)), (int64_t)ctx, wdt,
                            kvdt,  RG_BF16};
  const double Ta = b * q, d = (double)a->d_model;
  const double kvsplit = a->mla ? 1 : (tp < a->n_kv_heads ? tp : (double)a->n_kv_heads);
  out->layers = Ls;
  double c0, m0;
  if (runs[RG_SLOT_EMBED]) {
    const rg_stage_cost_t *e = cs->embed;
    c0 = out->comp, m0 = out->mem;
    // A gather of rows, not a GEMM: the plain streaming efficiency.
    kernel_eff(c, wdt, Ta, 0, (e->weight_bytes + e->act_bytes) * scale / tp, c->eff_memory, out);
    slot_figures(c, RG_SLOT_EMBED, c0, m0, 1, Ta, out);
  }
  if (runs[RG_SLOT_ATTENTION]) {
    c0 = out->comp, m0 = out->mem;
    const rg_stage_cost_t *pr = cs->proj, *co = cs->core;
    kernel(c, wdt, Ta, pr->flops * scale * fs / tp,
           (pr->weight_bytes + pr->act_bytes * scale) * fs / tp, out);
    // The attention core reads the KV (at the class's attention
    // efficiency) and the queries and outputs.
    double kv = (co->kv_read_bytes + co->kv_write_bytes) * scale * fs / kvsplit,
           act = co->act_bytes * scale * fs / tp;
    double ea = rg_class_eff_attention(c, ctx);
    // Its matmuls multiply each KV head by the queries that share it: q
    // tokens times the heads per KV head (GQA), or every head (MLA's latent).
    double group = a->mla ? (double)a->n_heads : (double)a->n_heads / (double)a->n_kv_heads;
    attention_core(c, q, q * group, co->flops * scale * fs / tp, kv + act * ea / c->eff_memory, ea,
                   out);
    slot_figures(c, RG_SLOT_ATTENTION, c0, m0, Ls, Ta, out);
  }
  if (runs[RG_SLOT_FFN]) {
    c0 = out->comp, m0 = out->mem;
    const rg_stage_cost_t *ff = cs->ffn;
    if (ff->layers > 0)
      kernel(c, wdt, Ta, ff->flops * scale * fs / tp,
             (ff->weight_bytes + ff->act_bytes * scale) * fs / tp, out);
    if (n_moe > 0) {
      const rg_stage_cost_t *ro = cs->router, *ex = cs->experts, *sh = cs->shared;
      kernel(c, wdt, Ta, ro->flops * scale * fs / tp,
             (ro->weight_bytes + ro->act_bytes * scale) * fs / tp, out);
      if (sh->layers > 0)
        kernel(c, wdt, Ta, sh->flops * scale * fs / tp,
               (sh->weight_bytes + sh->act_bytes * scale) * fs / tp, out);
      // Routed experts over the ep devices of the stage: every replica's
      // tokens meet there. Each expert sees T k / E tokens on average and is
      // read when at least one token picks it.
      const double E = (double)a->n_experts, k = (double)a->n_experts_per_tok;
      const double T = B * q, Tshape = sb * (double)shape.new_tokens;
      const double flops_tok = ex->flops / (Tshape * n_moe),
                   act_tok = ex->act_bytes / (Tshape * n_moe);
      const double expert_bytes = ex->resident_weight_bytes / (n_moe * E);
      double per_dev = E / ep, m = T * k / E;
      if (per_dev < 1) {  // more devices than experts: replicas share the tokens
        m *= per_dev;
        per_dev = 1;
      }
      double touched = 1.0 - pow(1.0 - (m / T < 1 ? m / T : 1), T);
      if (!(touched > 0)) touched = 1;
      double imb = expert_imbalance(T * k, ep);
      // Each assignment's hidden state is gathered into its expert's rows
      // and scattered back (permute and un-permute, a read and a write
      // each): 4 x d activations per assignment beyond the stage's own.
      double permute = 4.0 * k * d * 2.0;
      kernel_scaled(
          c, wdt, m * imb, flops_tok * T * n_moe * fs / ep * imb,
          n_moe * fs * (per_dev * touched * expert_bytes + (act_tok + permute) * T / ep * imb),
          rg_class_eff_memory(c, wdt, m * imb), c->eff_experts > 0 ? c->eff_experts : 1, out);
    }
    slot_figures(c, RG_SLOT_FFN, c0, m0, Ls, Ta, out);
  }
  if (runs[RG_SLOT_LM_HEAD]) {
    const rg_stage_cost_t *h = cs->head;
    double sampled = b * (phase == RG_PHASE_PREFILL ? 1 : q);
    c0 = out->comp, m0 = out->mem;
    kernel(c, wdt, sampled, h->flops * scale / tp, (h->weight_bytes + h->act_bytes * scale) / tp,
           out);
    slot_figures(c, RG_SLOT_LM_HEAD, c0, m0, 1, sampled, out);
  }
  int layered = runs[RG_SLOT_ATTENTION] || runs[RG_SLOT_FFN];
  if (layered) out->over += c->layer_floor * Ls;

  // Communication of the stage.
  const rg_fleet_t *f = req->fleet;
  int per_node = rg_fleet_per_node(f, c);
  if (per_node < 1) per_node = 1;
  rg_link_t intra = rg_fleet_intra_link(f, c);
  double el = c->eff_link > 0 ? c->eff_link : 1;
  intra.bandwidth *= el;
  double nic = rg_fleet_nic_bandwidth(f, c) * el;
  if (tp > 1 && layered) {
    int spans = g->tp > per_node;
    double bw = spans ? nic * per_node : intra.bandwidth,
           lat = spans ? f->network.latency : intra.latency;
    double msg = Ta * d * 2.0;  // bf16 hidden states
    // Bandwidth as a ring (each rank moves 2 (tp-1)/tp of the message);
    // latency as a tree (2 log2 tp hops), which is what collective
    // libraries switch to for the small messages of decode.
    double ar = 2.0 * (tp - 1) / tp * msg / bw + 2.0 * ceil(log2(tp)) * lat;
    out->comm += (runs[RG_SLOT_ATTENTION] + runs[RG_SLOT_FFN]) * Ls * ar;
  }
  if (runs[RG_SLOT_FFN] && n_moe > 0 && ep > 1) {
    double T_dev = B * q / ep, k = (double)a->n_experts_per_tok;
    double bytes = T_dev * k * d * (EP_DISPATCH_BYTES + EP_COMBINE_BYTES) * (ep - 1) / ep *
                   expert_imbalance(B * q * k, ep);
    double t;
    if (g->tp * g->dp <= per_node) {
      t = bytes / intra.bandwidth + 2 * intra.latency;
    } else {
      double x = 1.0 - per_node / ep;
      double t_net = x * bytes / nic, t_in = (1 - x) * bytes / intra.bandwidth;
      t = (t_net > t_in ? t_net : t_in) + 2 * f->network.latency;
    }
    out->comm += n_moe * fs * t;
  }
  if (pp > 1) {
    double msg = b * q * d * 2.0 * dp;
    int spans = g->devices > per_node;
    out->hop =
        spans ? msg / (nic * tp * dp) + f->network.latency : msg / intra.bandwidth + intra.latency;
  }
  return NULL;
}

// A stage's time, with two micro-batches overlapping communication.
static double stage_time(const stage_t *s) {
  return s->comp + s->mem + s->over + s->comm;
}

static const char *bound_of(double comp, double mem, double comm, double over) {
  if (comp >= mem && comp >= comm && comp >= over) return "compute";
  if (mem >= comm && mem >= over) return "memory";
  return comm >= over ? "link" : "overhead";
}

// One pass of B sequences through group g for model a: pp micro-batches fill
// the pipeline (fewer when B is smaller than pp), and with mb == 2 two halves
// of each interleave so one's communication hides behind the other's work.
static rg_status_t group_pass(const rg_plan_request_t *req, const rg_arch_t *a, const rg_group_t *g,
                              rg_phase_t phase, double B, double q, double ctx, rg_dtype_t wdt,
                              rg_dtype_t kvdt, const int runs[RG_SLOT_COUNT], int mb,
                              rg_step_cost_t *out) {
  memset(out, 0, sizeof(*out));
  double nb = B < g->pp ? (B < 1 ? 1 : B) : g->pp;
  double per_mb = B / nb;
  stage_t s;
  double st;
  if (mb >= 2 && per_mb >= 2) {
    RG_RETURN_IF_ERROR(stage_cost(req, a, g, phase, per_mb / 2, q, ctx, wdt, kvdt, runs, &s));
    double work = s.comp + s.mem + s.over, comm = s.comm;
    // Two halves: each half's work must run, and each half's communication;
    // they overlap except for the first layer's exchange.
    st = (2 * work > 2 * comm ? 2 * work : 2 * comm) +
         (work < comm ? work : comm) / (s.layers > 0 ? s.layers : 1);
    out->compute = 2 * s.comp, out->memory = 2 * s.mem, out->overhead = 2 * s.over;
    double exposed = st - 2 * work;
    out->comm = exposed > 0 ? exposed : 0;
  } else {
    RG_RETURN_IF_ERROR(stage_cost(req, a, g, phase, per_mb, q, ctx, wdt, kvdt, runs, &s));
    st = stage_time(&s);
    out->compute = s.comp, out->memory = s.mem, out->overhead = s.over, out->comm = s.comm;
  }
  out->stage = st;
  out->total = g->pp * st + (g->pp - 1) * s.hop;
  double k = g->pp;
  out->compute *= k, out->memory *= k, out->overhead *= k;
  out->comm = out->comm * k + (g->pp - 1) * s.hop;
  out->bound = bound_of(out->compute, out->memory, out->comm, out->overhead);
  return NULL;
}

static int runs_any(const int runs[RG_SLOT_COUNT]) {
  for (int s = RG_SLOT_EMBED; s <= RG_SLOT_LM_HEAD; s++)
    if (runs[s]) return 1;
  return 0;
}

rg_status_t rg_group_step_time(const rg_plan_request_t *req, const rg_placement_t *p, int group,
                               rg_phase_t phase, double batch, double new_tokens, double context,
                               rg_step_cost_t *out) {
  memset(out, 0, sizeof(*out));
  if (group < 0 || group >= p->n_groups)
    return rg_status_make(RG_INVALID_ARGUMENT, "group %d: the placement has %d groups", group,
                          p->n_groups);
  if (!(batch >= 1) || !(new_tokens >= 1) || !(context >= 0))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "step of %g sequences x %g new tokens on %g context: expected at "
                          "least one sequence and one token",
                          batch, new_tokens, context);
  int runs[RG_SLOT_COUNT];
  group_runs(p, group, phase, runs);
  const rg_group_t *g = &p->groups[group];
  int mb = p->mode == RG_MODE_AF ? 1 : p->micro_batches;
  if (!runs_any(runs)) {
    if (req->draft && p->slot_group[RG_SLOT_DRAFT] == group) {
      // A group that only drafts runs the whole draft model.
      for (int s = RG_SLOT_EMBED; s <= RG_SLOT_LM_HEAD; s++) runs[s] = 1;
      RG_RETURN_IF_ERROR(group_pass(req, req->draft, g, phase, batch, new_tokens, context,
                                    p->weight_dtype, p->kv_dtype, runs, 1, out));
      out->total += g->cls->step_cost, out->overhead += g->cls->step_cost;
      return NULL;
    }
    return NULL;  // the group runs nothing in this phase
  }
  RG_RETURN_IF_ERROR(group_pass(req, req->model, g, phase, batch, new_tokens, context,
                                p->weight_dtype, p->kv_dtype, runs, mb, out));
  out->total += g->cls->step_cost;
  out->overhead += g->cls->step_cost;
  out->bound = bound_of(out->compute, out->memory, out->comm, out->overhead);
  return NULL;
}

rg_status_t rg_slot_step_time(const rg_plan_request_t *req, const rg_group_t *g, rg_slot_t slot,
                              rg_phase_t phase, double batch, double new_tokens, double context,
                              double layers, double *out) {
  *out = 0;
  if ((int)slot < RG_SLOT_EMBED || (int)slot > RG_SLOT_LM_HEAD)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "slot %d: expected a stage kind's slot (embed, attention, ffn, lm_head)",
                          (int)slot);
  if (!(batch >= 1) || !(new_tokens >= 1) || !(context >= 0))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "step of %g sequences x %g new tokens on %g context: expected at "
                          "least one sequence and one token",
                          batch, new_tokens, context);
  int runs[RG_SLOT_COUNT] = {0};
  runs[slot] = 1;
  const rg_arch_t *a = req->model;
  stage_t s;
  RG_RETURN_IF_ERROR(stage_cost(req, a, g, phase, batch, new_tokens, context, req->weight_dtype,
                                req->kv_dtype, runs, &s));
  double t = s.comp + s.mem + s.fixed + s.comm;
  // stage_cost costs a pipeline stage's ceil(L / pp) layers; a stage
  // instance runs its own range.
  double L = (double)a->n_layers, Ls = ceil(L / (g->pp > 0 ? g->pp : 1));
  if ((slot == RG_SLOT_ATTENTION || slot == RG_SLOT_FFN) && layers > 0 && layers < Ls && Ls > 0)
    t *= layers / Ls;
  *out = t;
  return NULL;
}

rg_status_t rg_slot_mixed_time(const rg_plan_request_t *req, const rg_group_t *g, rg_slot_t slot,
                               const rg_step_mix_t *mix, double layers, double *out) {
  *out = 0;
  if (mix->prefills <= 0) {
    if (mix->decodes <= 0) return NULL;
    return rg_slot_step_time(req, g, slot, RG_PHASE_DECODE, mix->decodes, 1, mix->decode_context,
                             layers, out);
  }
  double tp;
  RG_RETURN_IF_ERROR(rg_slot_step_time(req, g, slot, RG_PHASE_PREFILL, mix->prefills,
                                       fmax(1, mix->prefill_tokens / mix->prefills),
                                       mix->prefill_context, layers, &tp));
  if (mix->decodes <= 0) {
    *out = tp;
    return NULL;
  }
  double td, tb;
  RG_RETURN_IF_ERROR(rg_slot_step_time(req, g, slot, RG_PHASE_DECODE, mix->decodes, 1,
                                       mix->decode_context, layers, &td));
  RG_RETURN_IF_ERROR(rg_slot_step_time(req, g, slot, RG_PHASE_DECODE, 1, 1, 0, layers, &tb));
  double t = td + tp - tb;
  *out = t > td && t > tp ? t : (td > tp ? td : tp);
  return NULL;
}

// ----- One pass through a placement ----------------------------------------------

typedef struct {
  double total;                 // one step of the whole batch
  double group[RG_MAX_GROUPS];  // busy time per group
  const char *bound[RG_MAX_GROUPS];
} pass_t;

// One step of B sequences (q new tokens on ctx) through every group that runs
// a slot of the target model in this phase, with the hidden states crossing
// between groups. Attention-FFN placements with m micro-batches overlap the
// groups (ping-pong): step = max(m x slowest, one micro-batch's full path).
static rg_status_t placement_pass(const rg_plan_request_t *req, const rg_placement_t *p,
                                  rg_phase_t phase, double B, double q, double ctx, pass_t *out) {
  memset(out, 0, sizeof(*out));
  int m = p->mode == RG_MODE_AF && p->micro_batches > 1 ? p->micro_batches : 1;
  double Bm = B / m;
  int active = 0, runs[RG_MAX_GROUPS][RG_SLOT_COUNT];
  double sum = 0, slowest = 0, step_cost = 0;
  for (int g = 0; g < p->n_groups; g++) {
    group_runs(p, g, phase, runs[g]);
    if (!runs_any(runs[g])) continue;
    rg_step_cost_t sc;
    RG_RETURN_IF_ERROR(group_pass(req, req->model, &p->groups[g], phase, Bm < 1 ? 1 : Bm, q, ctx,
                                  p->weight_dtype, p->kv_dtype, runs[g],
                                  m > 1 ? 1 : p->micro_batches, &sc));
    out->group[g] = sc.total;
    out->bound[g] = sc.bound;
    sum += sc.total;
    if (sc.total > slowest) slowest = sc.total;
    if (p->groups[g].cls->step_cost > step_cost) step_cost = p->groups[g].cls->step_cost;
    active++;
  }
  double link = 0;
  if (active > 1) {
    // Hidden states crossing between groups: attention<->FFN twice a layer,
    // and embed/lm_head hops when they sit elsewhere.
    const int *sg = p->slot_group;
    double hidden = (Bm < 1 ? 1 : Bm) * q * rg_arch_hidden_bytes(req->model, RG_BF16);
    struct {
      int a, b;
      double count;
    } hops[] = {{sg[RG_SLOT_ATTENTION], sg[RG_SLOT_FFN], 2.0 * (double)req->model->n_layers},
                {sg[RG_SLOT_EMBED], sg[RG_SLOT_ATTENTION], 1},
                {sg[RG_SLOT_FFN], sg[RG_SLOT_LM_HEAD], 1}};
    for (size_t h = 0; h < sizeof(hops) / sizeof(hops[0]); h++) {
      if (hops[h].a == hops[h].b) continue;
      rg_link_t l = rg__link_between(req->fleet, &p->groups[hops[h].a], &p->groups[hops[h].b]);
      link += hops[h].count * (hidden / l.bandwidth + l.latency);
    }
  }
  double path = sum + link;
  if (m > 1) {
    double slow = slowest > link ? slowest : link;
    out->total = m * slow > path ? m * slow : path;
  } else {
    out->total = path;
  }
  out->total += step_cost;
  return NULL;
}

// ----- Shapes and weights ----------------------------------------------------------

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
  rg_request_shape_t r = {ses->present ? ses->append_tokens : w->prompt.mean,
                          ses->present ? ses->prefix_tokens : 0,
                          ses->present ? ses->output_tokens : w->output.mean};
  if (!ses->present && w->prefix_hit_rate > 0) {
    r.prefix = r.prompt * w->prefix_hit_rate;
    r.prompt -= r.prefix;
  } else if (!ses->present && w->shared_prefix > 0 && w->shared_prefix < r.prompt) {
    r.prefix = w->shared_prefix;
    r.prompt -= r.prefix;
  }
  if (r.prompt < 1) r.prompt = 1;
  if (r.output < 1) r.output = 1;
  return r;
}

static double decode_new_tokens(const rg_plan_request_t *req) {
  const rg_speculative_t *s = &req->workload->speculative;
  return s->present && req->draft ? s->tokens + 1 : 1;
}

rg_shape_t rg_placement_decode_shape(const rg_plan_request_t *req, const rg_placement_t *p) {
  rg_request_shape_t r = rg_workload_request(req->workload);
  int m = p->micro_batches > 0 ? p->micro_batches : 1;
  rg_shape_t s = {RG_PHASE_DECODE,
                  (p->batch + m - 1) / m,
                  (int64_t)decode_new_tokens(req),
                  (int64_t)(r.prefix + r.prompt + r.output / 2),
                  p->weight_dtype,
                  p->kv_dtype,
                  RG_BF16};
  if (s.batch < 1) s.batch = 1;
  return s;
}

rg_shape_t rg_placement_prefill_shape(const rg_plan_request_t *req, const rg_placement_t *p) {
  rg_request_shape_t r = rg_workload_request(req->workload);
  rg_shape_t s = {RG_PHASE_PREFILL, 1,      (int64_t)r.prompt, (int64_t)r.prefix, p->weight_dtype,
                  p->kv_dtype,      RG_BF16};
  return s;
}

// ----- Memory ----------------------------------------------------------------------

// Resident bytes of each part of model a at dtype t.
typedef struct {
  double embed, attn, ffn, router, experts, shared, head;
} resident_t;

static rg_status_t residents(const rg_arch_t *a, rg_dtype_t wdt, resident_t *r) {
  const parts_t *cs;
  RG_RETURN_IF_ERROR(costs_of(a, RG_PHASE_DECODE, 1, 1, wdt, RG_BF16, &cs));
  r->embed = cs->embed->resident_weight_bytes;
  r->attn = cs->proj->resident_weight_bytes;
  r->ffn = cs->ffn->resident_weight_bytes;
  r->router = cs->router->resident_weight_bytes;
  r->experts = cs->experts->resident_weight_bytes;
  r->shared = cs->shared->resident_weight_bytes;
  r->head = cs->head->resident_weight_bytes;
  return NULL;
}

// Bytes per device of the worst stage of g holding `holds` of model a, with
// kv_seqs sequences' KV of kv_tokens each (plus `shared` tokens held once
// per replica) and `act_tokens` tokens of activation workspace.
static rg_status_t group_bytes(const rg_arch_t *a, const rg_group_t *g, rg_dtype_t wdt,
                               rg_dtype_t kvdt, const int holds[RG_SLOT_COUNT], double kv_seqs,
                               double kv_tokens, double shared, double act_tokens, double *out) {
  resident_t r;
  RG_RETURN_IF_ERROR(residents(a, wdt, &r));
  const double tp = g->tp, ep = (double)g->tp * g->dp;
  const double L = (double)a->n_layers, fs = ceil(L / g->pp) / L;
  double w = 0;
  if (holds[RG_SLOT_ATTENTION]) w += r.attn * fs / tp;
  if (holds[RG_SLOT_FFN]) w += (r.ffn + r.router + r.shared) * fs / tp + r.experts * fs / ep;
  // A single stage holds both ends; with pipeline stages the heavier end
  // (lm_head) sets the worst stage.
  double ends = (holds[RG_SLOT_EMBED] ? r.embed : 0) + (holds[RG_SLOT_LM_HEAD] ? r.head : 0);
  if (g->pp > 1)
    ends = fmax(holds[RG_SLOT_EMBED] ? r.embed : 0, holds[RG_SLOT_LM_HEAD] ? r.head : 0);
  w += ends / tp;
  double kv = 0;
  if (holds[RG_SLOT_ATTENTION]) {
    double kvsplit = a->mla ? 1 : (tp < a->n_kv_heads ? tp : (double)a->n_kv_heads);
    double per_tok = rg_arch_kv_bytes_per_token(a, kvdt) * fs / kvsplit;
    kv = (kv_seqs / g->dp * kv_tokens + shared) * per_tok;
  }
  double d_ff = (double)(a->d_ff > a->d_ff_expert * a->n_experts_per_tok
                             ? a->d_ff
                             : a->d_ff_expert * a->n_experts_per_tok);
  double act = act_tokens * (4.0 * (double)a->d_model + 2.0 * d_ff) * 2.0 / tp;
  *out = w + kv + act;
  return NULL;
}

static rg_status_t memory_use(const rg_plan_request_t *req, const rg_placement_t *p,
                              double kv_tokens, double use[RG_MAX_GROUPS]) {
  int pg = p->mode == RG_MODE_PD ? p->slot_group[RG_SLOT_PREFILL] : -1;
  double chunk = rg__prefill_chunk(req);
  double shared = req->workload->session.present ? 0 : req->workload->shared_prefix;
  for (int g = 0; g < p->n_groups; g++) {
    int holds[RG_SLOT_COUNT] = {0}, any = 0;
    for (int s = RG_SLOT_EMBED; s <= RG_SLOT_LM_HEAD; s++) {
      holds[s] = p->slot_group[s] == g || g == pg;
      any |= holds[s];
    }
    use[g] = 0;
    if (any) {
      int decode_kv = p->slot_group[RG_SLOT_ATTENTION] == g;
      int prefills = g == pg || (pg < 0 && decode_kv);
      // A prefill-decode prefill group holds one chunk's KV while it ships it.
      double seqs = decode_kv ? p->batch : 1, toks = decode_kv ? kv_tokens : 2 * chunk;
      double act = prefills ? chunk + p->batch : p->batch;
      RG_RETURN_IF_ERROR(group_bytes(req->model, &p->groups[g], p->weight_dtype, p->kv_dtype, holds,
                                     seqs, toks, decode_kv ? shared : 0, act, &use[g]));
    }
    if (req->draft && p->slot_group[RG_SLOT_DRAFT] == g) {
      int all[RG_SLOT_COUNT] = {1, 1, 1, 1, 0, 0};
      double extra;
      RG_RETURN_IF_ERROR(group_bytes(req->draft, &p->groups[g], p->weight_dtype, p->kv_dtype, all,
                                     p->batch, kv_tokens, 0, any ? 0 : p->batch, &extra));
      use[g] += extra;
    }
  }
  return NULL;
}

// ----- Sessions ----------------------------------------------------------------------

// Capacity and bandwidth of tier class `t` on the nodes that host `g`.
static void tier_share(const rg_fleet_t *f, const rg_group_t *g, const rg_device_class_t *t,
                       double *cap, double *bw, double *lat) {
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
static rg_status_t session_kv(const rg_plan_request_t *req, const rg_placement_t *p,
                              rg_prediction_t *pred, double ctx, double *out_return_time) {
  const rg_session_t *ses = &req->workload->session;
  const rg_group_t *ga = &p->groups[p->slot_group[RG_SLOT_ATTENTION]];
  double kv_sess = rg_arch_kv_bytes_per_token(req->model, p->kv_dtype) * ctx;
  double hw = ses->human_wait_fraction < 0.999 ? ses->human_wait_fraction : 0.999;
  pred->idle_sessions = p->batch * hw / (1.0 - hw);
  pred->idle_kv_bytes = pred->idle_sessions * kv_sess;
  // Recompute: prefill the whole context again on the prefill group.
  pass_t st;
  RG_RETURN_IF_ERROR(placement_pass(req, p, RG_PHASE_PREFILL, 1, ctx, 0, &st));
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
    return rg_status_make(
        RG_INFEASIBLE,
        "kv_offload %s: the nodes of group '%s' lack it or it cannot hold the %.0f idle "
        "sessions' KV (%s)",
        p->kv_offload->name, ga->name, pred->idle_sessions, need);
  }
  pred->kv_reload_time = best ? best_t : 0;
  pred->kv_tier_capacity = best_cap;
  if (best && p->kv_policy != RG_KV_RECOMPUTE &&
      (p->kv_policy == RG_KV_TIER || best_t < pred->kv_recompute_time)) {
    pred->kv_policy = RG_KV_TIER;
    pred->kv_tier = best;
    *out_return_time = best_t;
  } else {
    pred->kv_policy = RG_KV_RECOMPUTE;
    *out_return_time = pred->kv_recompute_time;
  }
  return NULL;
}

// ----- Prediction ----------------------------------------------------------------------

// Time to prefill one prompt of `prompt` new tokens on `prefix` cached ones,
// in chunks; with PD on the prefill group, else on the decode groups.
static rg_status_t prefill_time(const rg_plan_request_t *req, const rg_placement_t *p, double chunk,
                                double prompt, double prefix, double *out) {
  double n = ceil(prompt / chunk), q = prompt / n;
  pass_t st;
  // The chunks see on average half the prompt before them.
  RG_RETURN_IF_ERROR(
      placement_pass(req, p, RG_PHASE_PREFILL, 1, q, prefix + (prompt - q) / 2, &st));
  *out = n * st.total;
  return NULL;
}

// Requests/s a replica serves: colocated, decode and (chunked) prefill share
// the time, so solving R = (1 - R/O * c) * D for the output rate R gives
// D / (1 + D c / O); prefill-decode, the least of the prefill group's rate,
// the decode group's and the KV link's.
static double capacity(int pd, double decode_tok, double pf_cost, double out_tokens, double r_kv) {
  if (pd) {
    double r = 1.0 / pf_cost, r_dec = decode_tok / out_tokens;
    if (r_dec < r) r = r_dec;
    return r_kv < r ? r_kv : r;
  }
  return decode_tok / (1.0 + decode_tok * pf_cost / out_tokens) / out_tokens;
}

// Squared coefficient of variation of a token-count distribution.
static double dist_cv2(const rg_dist_t *d) {
  switch (d->kind) {
    case RG_DIST_FIXED:
      return 0;
    case RG_DIST_UNIFORM: {
      double w = d->max - d->min;
      return d->mean > 0 ? w * w / 12 / (d->mean * d->mean) : 0;
    }
    case RG_DIST_LOGNORMAL:
      return exp(d->sigma * d->sigma) - 1;
  }
  return 0;
}

rg_status_t rg_placement_predict(const rg_plan_request_t *req, const rg_placement_t *p,
                                 rg_prediction_t *pred) {
  memset(pred, 0, sizeof(*pred));
  const rg_workload_t *w = req->workload;
  const rg_session_t *ses = &w->session;
  rg_request_shape_t rq = rg_workload_request(w);
  double prompt = rq.prompt, prefix = rq.prefix, out_tokens = rq.output;
  // Paged KV holds, averaged over a sequence's life, its prompt and half
  // its output; a shared prefix is held once per replica instead.
  double shared = ses->present ? 0 : w->shared_prefix;
  pred->kv_tokens = prefix + prompt + out_tokens / 2 - shared;
  for (int g = 0; g < p->n_groups; g++) {
    int target = p->mode == RG_MODE_PD && p->slot_group[RG_SLOT_PREFILL] == g;
    for (int s = RG_SLOT_EMBED; s <= RG_SLOT_LM_HEAD; s++) target |= p->slot_group[s] == g;
    RG_RETURN_IF_ERROR(
        rg_group_check(target || !req->draft ? req->model : req->draft, &p->groups[g]));
  }
  if (w->speculative.present && !req->draft)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "workload '%s' decodes speculatively with draft '%s', but no draft "
                          "model was loaded",
                          w->name, w->speculative.draft);

  // Memory first: a placement that does not fit predicts nothing.
  double use[RG_MAX_GROUPS];
  RG_RETURN_IF_ERROR(memory_use(req, p, pred->kv_tokens, use));
  for (int g = 0; g < p->n_groups; g++) {
    pred->mem_used[g] = use[g];
    pred->mem_cap[g] = rg__group_capacity(req, &p->groups[g]);
    if (use[g] > pred->mem_cap[g]) {
      char need[32], have[32];
      rg_fmt_quantity(use[g], RG_UNIT_BYTES, need, sizeof need);
      rg_fmt_quantity(pred->mem_cap[g], RG_UNIT_BYTES, have, sizeof have);
      return rg_status_make(
          RG_INFEASIBLE,
          "group '%s' (%d x %s) needs %s per device but has %s usable (%.0f%% of %s)",
          p->groups[g].name, p->groups[g].devices, p->groups[g].cls->name, need, have,
          rg__mem_util(req) * 100, p->groups[g].cls->mem[0].name);
    }
  }

  // Decode: one step of the whole batch at mid-generation context; with
  // speculation a verify step of k+1 tokens after k draft steps.
  double ctx = prefix + prompt + out_tokens / 2;
  double q = decode_new_tokens(req);
  pass_t dec;
  RG_RETURN_IF_ERROR(placement_pass(req, p, RG_PHASE_DECODE, p->batch, q, ctx, &dec));
  double step = dec.total;
  double tokens_per_step = 1;
  if (q > 1) {
    int dg = p->slot_group[RG_SLOT_DRAFT];
    rg_step_cost_t ds;
    int runs[RG_SLOT_COUNT] = {1, 1, 1, 1, 0, 0};
    RG_RETURN_IF_ERROR(group_pass(req, req->draft, &p->groups[dg], RG_PHASE_DECODE, p->batch, 1,
                                  ctx, p->weight_dtype, p->kv_dtype, runs, 1, &ds));
    step += (q - 1) * (ds.total + p->groups[dg].cls->step_cost);
    tokens_per_step = rg_speculative_tokens_per_step(&w->speculative);
  }
  pred->decode_step = step;
  pred->tokens_per_step = tokens_per_step;
  for (int g = 0; g < p->n_groups; g++)
    snprintf(pred->bound[g], sizeof(pred->bound[g]), "%s", dec.bound[g] ? dec.bound[g] : "-");

  // Prefill: a single prompt for TTFT; prompts batched up to a chunk for the
  // per-request cost, since short prompts share the weight reads. The chunk
  // is the placement's, else the request's; when neither sets one and a
  // colocated replica's chunk-carrying steps would break the TBT SLO, a
  // smaller chunk is chosen (as engines tune chunked prefill for TBT).
  int pd = p->mode == RG_MODE_PD;
  double chunk = p->prefill_chunk > 0 ? p->prefill_chunk : rg__prefill_chunk(req);
  int auto_chunk = p->prefill_chunk <= 0 && req->prefill_chunk <= 0 && !pd && w->slo_tbt > 0;
  double pf1 = 0, pf_cost = 0, t_chunk = 0, req_rate = 0, kv_time = 0, rho = 0, f = 0, cap_rate = 0;
  double share = 0, tbt_q[RG_N_PCT + 1], pcts[RG_N_PCT + 1];
  for (int i = 0; i < RG_N_PCT; i++) pcts[i] = rg_pct[i] / 100.0;
  pcts[RG_N_PCT] = w->slo_percentile > 0 ? w->slo_percentile / 100.0 : 0.99;
  // Requests/s reaching one replica: the workload's rate split over the
  // plan's pools by capacity (load_share), then over the pool's replicas.
  // While searching, the split is not known yet and a planning load is used.
  double rate_rep = w->rate > 0 && p->load_share > 0
                        ? w->rate * p->load_share / (p->replicas > 0 ? p->replicas : 1)
                        : 0;
  for (int attempt = 0; attempt < 2; attempt++) {
    RG_RETURN_IF_ERROR(prefill_time(req, p, chunk, prompt, prefix, &pf1));
    // Every attention replica of the prefilling group takes its own chunk.
    const rg_group_t *pg =
        &p->groups[pd ? p->slot_group[RG_SLOT_PREFILL] : p->slot_group[RG_SLOT_ATTENTION]];
    double pbatch = floor(chunk / prompt);
    if (pbatch < 1) pbatch = 1;
    double n_chunks = ceil(prompt / chunk), q_chunk = prompt / n_chunks;
    pf_cost = pf1, t_chunk = pf1 / n_chunks;
    if (pbatch > 1 || pg->dp > 1) {
      pass_t pfb;
      RG_RETURN_IF_ERROR(placement_pass(req, p, RG_PHASE_PREFILL, pbatch * pg->dp, q_chunk,
                                        prefix + (prompt - q_chunk) / 2, &pfb));
      pf_cost = pfb.total * n_chunks / (pbatch * pg->dp);
      t_chunk = pfb.total;
    }
    if (q > 1) {
      // The draft prefills the prompt too, on its own group.
      int dg = p->slot_group[RG_SLOT_DRAFT];
      rg_step_cost_t ds;
      int runs[RG_SLOT_COUNT] = {1, 1, 1, 1, 0, 0};
      RG_RETURN_IF_ERROR(group_pass(req, req->draft, &p->groups[dg], RG_PHASE_PREFILL, pbatch,
                                    prompt, prefix, p->weight_dtype, p->kv_dtype, runs, 1, &ds));
      pf_cost += ds.total / pbatch;
    }

    // Capacity: requests/s at the batch's decode rate with prefill sharing
    // the time (colocated) or on its own group (prefill-decode).
    double kv_req = rg_arch_kv_bytes_per_token(req->model, p->kv_dtype) * prompt;
    double decode_tok = p->batch * tokens_per_step / step;  // tokens/s while decoding only
    double r_kv = INFINITY;
    if (pd) {
      rg_link_t l = rg__link_between(req->fleet, &p->groups[p->slot_group[RG_SLOT_PREFILL]],
                                     &p->groups[p->slot_group[RG_SLOT_ATTENTION]]);
      kv_time = kv_req / l.bandwidth + l.latency;
      r_kv = l.bandwidth / kv_req;
    }
    req_rate = capacity(pd, decode_tok, pf_cost, out_tokens, r_kv);
    // With more slots than sequences in flight (a serving estimate), queueing
    // is against what the full batch could serve.
    cap_rate = req_rate;
    if (p->max_batch > p->batch) {
      pass_t full;
      RG_RETURN_IF_ERROR(placement_pass(req, p, RG_PHASE_DECODE, p->max_batch, q, ctx, &full));
      double full_step =
          full.total + (step - dec.total);  // the draft's share scales alike; close enough
      cap_rate =
          capacity(pd, p->max_batch * tokens_per_step / full_step, pf_cost, out_tokens, r_kv);
    }
    // While searching, a replica is taken to run at the planning load, or
    // below it when the whole workload's rate, shared by as many replicas
    // as the fleet holds, would load it less.
    rho = rate_rep > 0 ? rate_rep / cap_rate : RG__PLANNING_LOAD;
    if (rate_rep <= 0 && w->rate > 0) {
      int n = p->planning_replicas > 0 ? p->planning_replicas : p->replicas > 0 ? p->replicas : 1;
      if (w->rate / (n * cap_rate) < rho) rho = w->rate / (n * cap_rate);
    }
    // The share of time spent prefilling: at the arrival rate when known,
    // else at the replica's capacity.
    f = pd ? 0 : (rate_rep > 0 && rate_rep < req_rate ? rate_rep : req_rate) * pf_cost;

    // TBT: a decode step, or one that also carries a prefill chunk. The
    // share of steps that carry one is what the prefill time share implies;
    // a percentile above the share of plain steps sees the slow ones.
    share = f > 0 ? f * step / ((1.0 - f) * t_chunk) : 0;
    for (int i = 0; i <= RG_N_PCT; i++) {
      double slow = share >= 1 ? step + share * t_chunk : step + t_chunk;
      tbt_q[i] = (share >= 1 || pcts[i] > 1 - share ? slow : step) / tokens_per_step;
      if (pd) tbt_q[i] = step / tokens_per_step;
    }
    // A chunk so long that the mean TBT passes the SLO stalls every
    // sequence for seconds, however rare: engines size chunks against that
    // too.
    double mean_tbt = f < 1 ? step / (1.0 - f) / tokens_per_step : INFINITY;
    if (!auto_chunk || (tbt_q[RG_N_PCT] <= w->slo_tbt && mean_tbt <= w->slo_tbt) ||
        step / tokens_per_step >= w->slo_tbt)
      break;
    // The largest power-of-two chunk whose step fits the SLO (the chunk's
    // time is close to linear in its tokens), at least 256 tokens a step
    // over the group: with data-parallel attention an engine's chunk is
    // split among the attention replicas (SGLang divides it by the DP size).
    double floor_c = 256;
    while (floor_c > 16 && floor_c * pg->dp > 256) floor_c /= 2;
    double fit = chunk * (w->slo_tbt * tokens_per_step - step) / t_chunk, c = floor_c;
    while (c * 2 <= fit && c * 2 < chunk) c *= 2;
    if (c >= chunk) break;
    chunk = c;
  }
  pred->prefill_time = pf1;
  pred->prefill_cost = pf_cost;
  pred->prefill_chunk = chunk;
  pred->load = rho;
  if (rho > 0.95) rho = 0.95;
  pred->tbt = step / (1.0 - f) / tokens_per_step;

  // TTFT: a free sequence slot (when the batch is full), the queue of
  // prefills ahead (served at the batched prefill cost), the running step's
  // end, the prompt's own prefill (at the prompt-length percentile) and, PD,
  // its KV's trip to the decode group. Percentiles add the parts'
  // percentiles: an upper bound on the percentile of the sum.
  double cv2 = ses->present ? 0 : dist_cv2(&w->prompt);
  double lambda = rho * cap_rate;
  double slots = p->max_batch > p->batch ? p->max_batch : p->batch > 0 ? p->batch : 1;
  // Waiting for a free sequence slot (M/M/c over the replica's slots): at
  // the replica's share of the rate, or while searching at the planning
  // load, so that a replica with few slots pays for them. Without a rate
  // (offline work queued without limit) no slot wait is charged, only the
  // prefill queue.
  double c_wait = w->rate > 0 ? rg__erlang_c(slots, rho * slots) : 0, spare = cap_rate - lambda;
  double rho_pf = lambda * pf_cost, ttft_q[RG_N_PCT + 1];
  if (rho_pf > 0.95) rho_pf = 0.95;
  double boundary = pd ? t_chunk : step;
  double returning = 0;
  if (ses->present) {
    RG_RETURN_IF_ERROR(session_kv(req, p, pred, prefix + prompt + out_tokens, &returning));
    // A step that follows a person's reply finds its KV off the device;
    // the tool-driven steps in between find it hot.
    double spr = ses->steps_per_request > 1 ? ses->steps_per_request : 1;
    returning /= spr;
  }
  pred->ttft = c_wait / spare + rg__wait_mean(rho_pf, pf_cost, cv2) + boundary / 2 + pf1 + kv_time +
               returning;
  for (int i = 0; i <= RG_N_PCT; i++) {
    double pf = pf1;
    if (!ses->present && w->prompt.kind != RG_DIST_FIXED) {
      double frac = prompt / w->prompt.mean;  // the share the prefix cache leaves to compute
      RG_RETURN_IF_ERROR(
          prefill_time(req, p, chunk, rg_dist_quantile(&w->prompt, pcts[i]) * frac, prefix, &pf));
    }
    double admit = c_wait > 1 - pcts[i] ? log(c_wait / (1 - pcts[i])) / spare : 0;
    ttft_q[i] = admit + rg__wait_quantile(rho_pf, pf_cost, cv2, pcts[i]) + pcts[i] * boundary + pf +
                kv_time + returning;
  }
  for (int i = 0; i < RG_N_PCT; i++) pred->tbt_p[i] = tbt_q[i], pred->ttft_p[i] = ttft_q[i];
  pred->tbt_slo = tbt_q[RG_N_PCT];
  pred->ttft_slo = ttft_q[RG_N_PCT];

  int replicas = p->replicas > 0 ? p->replicas : 1;
  double price = 0, power = 0;
  for (int g = 0; g < p->n_groups; g++) {
    price += p->groups[g].devices * p->groups[g].cls->price;
    power += p->groups[g].devices * p->groups[g].cls->power;
  }
  pred->requests_per_s = req_rate * replicas;
  pred->tokens_per_s = req_rate * out_tokens * replicas;
  pred->cost_per_s = price * replicas;
  pred->power = power * replicas;
  pred->tokens_per_dollar = pred->tokens_per_s / pred->cost_per_s;
  pred->tokens_per_joule = pred->tokens_per_s / pred->power;
  pred->meets_slo = (w->slo_tbt <= 0 || pred->tbt_slo <= w->slo_tbt) &&
                    (w->slo_ttft <= 0 || pred->ttft_slo <= w->slo_ttft);
  return NULL;
}
