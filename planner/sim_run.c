// The simulator's event loop (see planner/simulate.h): replicas driving
// sched/ on a simulated clock, step times from the cost model, links shared
// by flows, sessions, and the figures of the report.
//
// Shape of a run:
//
//   slots    one per replica of each pool; a request is routed to a slot
//            (pools by their share of the load, smooth weighted round
//            robin; within a pool the slot with the fewest requests
//            outstanding). A slot has one replica (one scheduler), or two
//            for prefill-decode: its prefill side and its decode side.
//   replica  IDLE -> (schedule) COPY_OUT -> COPY_IN -> STEP -> (commit) IDLE;
//            a phase with nothing to copy is skipped. Attention-FFN steps
//            wait in STEP_ACT for their hidden states' flow before their
//            end is known.
//   kicks    a replica that may have work is kicked; kicks are served once
//            every event of the current instant has been handled, so
//            requests arriving together are scheduled together (as the
//            runtime, which adds requests ahead of time, sees them).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "planner/planner_impl.h"
#include "planner/sim_impl.h"

enum { EV_STEP, EV_LINK, EV_FLOW, EV_SESSION_START, EV_SESSION_STEP, EV_SAMPLE };
enum { FLOW_COPY, FLOW_ACT, FLOW_IMPORT };
enum { PH_IDLE, PH_COPY_OUT, PH_COPY_IN, PH_STEP, PH_STEP_ACT };

// Blocks in all schedulers' device and swap pools, at most: beyond it the
// block size is doubled (when the caller did not choose one), since sched
// keeps about 60-130 bytes per block and a fleet of thousands of replicas
// would otherwise need gigabytes for bookkeeping alone.
#define MAX_TOTAL_BLOCKS (4ll << 20)
// Capacity-tier blocks over all replicas, at most: host DRAM and SSD hold
// terabytes per node, far more than a run's idle prefixes fill, so the
// tier is modelled up to this many blocks (the report gives both sizes).
#define MAX_TIER_BLOCKS (2ll << 20)
// A swap tier holds preempted requests, which never hold more than a few
// device pools' worth: it is modelled up to 4 device pools.
#define SWAP_POOLS 4
#define MAX_SAMPLES 1024
#define NO_TIME 1e300

// ----- Step-time memo ----------------------------------------------------------------

// Open addressing, key + 1 so that 0 marks an empty slot.
typedef struct {
  uint64_t *keys;
  double *vals;
  size_t cap, n;
} memo_t;

static rg_status_t memo_put(memo_t *m, uint64_t key, double v) {
  if (2 * (m->n + 1) > m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    uint64_t *k = calloc(cap, sizeof *k);
    double *vv = malloc(cap * sizeof *vv);
    if (!k || !vv) {
      free(k), free(vv);
      return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for step times");
    }
    for (size_t i = 0; i < m->cap; i++)
      if (m->keys[i]) {
        size_t j = (size_t)(m->keys[i] * 0x9e3779b97f4a7c15ull >> 20) & (cap - 1);
        while (k[j]) j = (j + 1) & (cap - 1);
        k[j] = m->keys[i];
        vv[j] = m->vals[i];
      }
    free(m->keys), free(m->vals);
    m->keys = k, m->vals = vv, m->cap = cap;
  }
  uint64_t kk = key + 1;
  size_t j = (size_t)(kk * 0x9e3779b97f4a7c15ull >> 20) & (m->cap - 1);
  while (m->keys[j] && m->keys[j] != kk) j = (j + 1) & (m->cap - 1);
  if (!m->keys[j]) m->n++;
  m->keys[j] = kk;
  m->vals[j] = v;
  return NULL;
}

static int memo_get(const memo_t *m, uint64_t key, double *v) {
  if (!m->cap) return 0;
  uint64_t kk = key + 1;
  size_t j = (size_t)(kk * 0x9e3779b97f4a7c15ull >> 20) & (m->cap - 1);
  while (m->keys[j]) {
    if (m->keys[j] == kk) {
      *v = m->vals[j];
      return 1;
    }
    j = (j + 1) & (m->cap - 1);
  }
  return 0;
}

// The memo's axis for token counts and contexts: exact up to 64, then
// buckets 1/32 octave wide. axis_index is continuous; edges are integers.
#define AXIS_LINEAR 64.0
#define AXIS_PER_OCTAVE 32.0
static double axis_index(double x) {
  return x <= AXIS_LINEAR ? x : AXIS_LINEAR + AXIS_PER_OCTAVE * log2(x / AXIS_LINEAR);
}
static double axis_edge(double k) {
  return k <= AXIS_LINEAR ? k : AXIS_LINEAR * exp2((k - AXIS_LINEAR) / AXIS_PER_OCTAVE);
}

// ----- State ------------------------------------------------------------------------------

typedef struct {
  double arrival, first, last;
  int64_t n_prompt, n_out, max_out;
  int64_t src;      // trace index, or -1 (a session step)
  uint64_t stream;  // token stream (mixed)
  int32_t session;  // or -1
  int32_t slot;
  int32_t rep;  // the replica holding it now
  int32_t handle;
  int32_t next_free;
  int32_t first_token;  // prefill-decode: the token the prefill side sampled
} live_t;

typedef struct {
  int pool;
  int main_rep, prefill_rep;  // prefill_rep: -1 unless prefill-decode
  int64_t outstanding;
} slot_t;

typedef struct {
  int pool, slot;
  int prefill_side;
  int group;  // the group its steps run on (colocated, PD); AF: the attention group
  rg_sched_t *sched;
  int phase, pending, kicked, spins;
  rg_sched_batch_t b;
  double t0, step, copy_start;
  double af_slow, af_sum, af_lat, af_sc;
  int af_m;
  int32_t *live_of;  // live index by sched handle
  int32_t cap_handles;
  int host_link, tier_link, cross_link;
  double busy;
  int64_t iterations, entries;
} rep_t;

typedef struct {
  const rg_placement_t *p;
  const rg_prediction_t *pred;
  int g_attn, g_ffn, g_prefill;
  int first_slot, n_slots;
  memo_t memo;
  rg_sched_config_t sc, sc_prefill;
  double block_bytes, kv_per_device;
  double hidden_bytes;  // attention-FFN: hidden-state bytes per token per step, all hops
  double hop_latency;   // and their latencies summed
  double chunk;
  double tier_full;        // bytes of tier per replica before MAX_TIER_BLOCKS
  int devices;             // per replica
  double price, power;     // per replica
  double weight, current;  // routing: share and smooth weighted round-robin state
  int64_t requests, output_tokens, iterations, entries;
  double busy, prefill_busy;
} pool_t;

typedef struct {
  uint64_t stream;
  // Each session draws from its own stream, so what a session does never
  // depends on when the simulation happened to serve other sessions: runs
  // that differ only in policy (a tier or none) see the same sessions.
  uint64_t rng;
  int64_t ctx;
  int requests_left, steps_left;
  int32_t slot;
  double start, wait;
  int open;
} session_t;

typedef struct {
  const rg_plan_request_t *req;
  const rg_plan_option_t *plan;
  rg_sim_options_t o;
  const rg_sim_trace_t *trace;
  const rg_sim_sessions_t *ses;
  int cache_on;
  const rg_device_class_t *tier;
  double retention;
  int block_size;
  int64_t max_context;
  double kv_tok;  // KV bytes per token, all layers

  pool_t pools[RG_MAX_POOLS];
  int n_pools;
  slot_t *slots;
  int n_slots;
  rep_t *reps;
  int n_reps;
  rg__link_t *links;
  int n_links, cap_links;

  live_t *live;
  int32_t n_live, cap_live, free_live;
  session_t *sess;
  int32_t n_sess, cap_sess;

  rg__heap_t q;
  int64_t pending_events;  // in the heap, samples excluded
  int32_t *kicks;
  int n_kicks;
  size_t next_arrival;
  double now, end_arrivals;
  uint64_t rng, route_rng;  // session arrivals; routing ties

  int32_t *prompt;  // scratch, cap_prompt
  int64_t cap_prompt;
  rg_sched_result_t *results;
  int cap_results;

  rg__hist_t ttft, tbt, e2e, tpot, kvt;
  rg_sim_report_t *r;
  double last_token;
  int64_t goodput_requests, goodput_tokens;
  int64_t done_requests;
  double next_sample;
  double wall0;  // rg_clock_now at the start
  int64_t events;
} sim_t;

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int32_t token(uint64_t stream, int64_t pos) {
  return (int32_t)(mix(stream + (uint64_t)pos * 0x9e3779b97f4a7c15ull) >> 33);
}

#define SALT_SESSION 0x5e55000000000000ull
#define SALT_REQUEST 0x7e90000000000000ull
#define SALT_SHARED 0x54a2ed0000000000ull
#define SALT_HASH 0x4a54000000000000ull

// ----- Step times --------------------------------------------------------------------------

// Does group g of p run attention (so its step time depends on context)?
static int runs_attention(const rg_placement_t *p, int g, rg_phase_t ph) {
  if (p->mode == RG_MODE_PD && ph == RG_PHASE_PREFILL) return p->slot_group[RG_SLOT_PREFILL] == g;
  return p->slot_group[RG_SLOT_ATTENTION] == g;
}

static rg_status_t exact_time(sim_t *S, pool_t *P, int g, rg_phase_t ph, double B, double q,
                              double c, double *out) {
  rg_step_cost_t sc;
  RG_RETURN_IF_ERROR(rg_group_step_time(S->req, P->p, g, ph, B, q, c, &sc));
  *out = sc.total;
  return NULL;
}

// The cost model's time at bucket edges (memoized), for one batch size.
static rg_status_t edge_time(sim_t *S, pool_t *P, int g, rg_phase_t ph, int64_t bi, int64_t qi,
                             int64_t ci, double B, double *out) {
  uint64_t key =
      (uint64_t)ph | (uint64_t)g << 1 | (uint64_t)bi << 3 | (uint64_t)qi << 20 | (uint64_t)ci << 36;
  if (memo_get(&P->memo, key, out)) return NULL;
  RG_RETURN_IF_ERROR(exact_time(S, P, g, ph, B,
                                axis_edge((double)qi) < 1 ? 1 : axis_edge((double)qi),
                                axis_edge((double)ci), out));
  return memo_put(&P->memo, key, *out);
}

// One step of B sequences x q new tokens on c cached ones on group g:
// batch exact up to 2^14 sequences (then in buckets), tokens and context
// interpolated between bucket edges.
static rg_status_t step_time(sim_t *S, pool_t *P, int g, rg_phase_t ph, double B, double q,
                             double c, double *out) {
  if (B < 1) B = 1;
  if (q < 1) q = 1;
  if (!runs_attention(P->p, g, ph)) c = 0;
  if (S->o.exact_costs) return exact_time(S, P, g, ph, B, q, c, out);
  double b = ceil(B);
  int64_t bi = b <= 16383 ? (int64_t)b : 16383;
  double qx = axis_index(q), cx = axis_index(c);
  int64_t q0 = (int64_t)floor(qx), c0 = (int64_t)floor(cx);
  double fq = qx - (double)q0, fc = cx - (double)c0;
  double t00, t01 = 0, t10 = 0, t11 = 0;
  RG_RETURN_IF_ERROR(edge_time(S, P, g, ph, bi, q0, c0, b, &t00));
  if (fc > 0) RG_RETURN_IF_ERROR(edge_time(S, P, g, ph, bi, q0, c0 + 1, b, &t01));
  if (fq > 0) {
    RG_RETURN_IF_ERROR(edge_time(S, P, g, ph, bi, q0 + 1, c0, b, &t10));
    if (fc > 0) RG_RETURN_IF_ERROR(edge_time(S, P, g, ph, bi, q0 + 1, c0 + 1, b, &t11));
  }
  // Linear in the value between edges, not in the index.
  double wq =
      fq > 0 ? (q - axis_edge((double)q0)) / (axis_edge((double)q0 + 1) - axis_edge((double)q0))
             : 0;
  double wc =
      fc > 0 ? (c - axis_edge((double)c0)) / (axis_edge((double)c0 + 1) - axis_edge((double)c0))
             : 0;
  double lo = fc > 0 ? t00 + wc * (t01 - t00) : t00;
  double hi = fq > 0 ? (fc > 0 ? t10 + wc * (t11 - t10) : t10) : lo;
  *out = lo + wq * (hi - lo);
  return NULL;
}

// A step that carries both decodes and prefill chunks: the cost model takes
// one shape per call, so the step is the decode step plus the prefill step
// less what both count once (reading the weights, the fixed costs: a
// one-token step). When the prefill's matmuls are compute-bound they hide
// the decode's weight reads, which this keeps; the decodes' own matmul
// FLOPs are lost in that case (a few percent of a chunk's).
static rg_status_t mixed_time(sim_t *S, pool_t *P, int g, rg_phase_t pf_phase, double Bd, double cd,
                              double Bp, double Tp, double cp, double *out) {
  if (Bp <= 0) return step_time(S, P, g, RG_PHASE_DECODE, Bd, 1, cd, out);
  double tp;
  RG_RETURN_IF_ERROR(step_time(S, P, g, pf_phase, Bp, Tp / Bp, cp, &tp));
  if (Bd <= 0) {
    *out = tp;
    return NULL;
  }
  double td, tb;
  RG_RETURN_IF_ERROR(step_time(S, P, g, RG_PHASE_DECODE, Bd, 1, cd, &td));
  RG_RETURN_IF_ERROR(step_time(S, P, g, RG_PHASE_DECODE, 1, 1, 0, &tb));
  double t = td + tp - tb;
  *out = t > td && t > tp ? t : (td > tp ? td : tp);
  return NULL;
}

typedef struct {
  double Bd, cd, Bp, Tp, cp;
} tally_t;

static tally_t tally(const rg_sched_batch_t *b) {
  tally_t t = {0};
  double sd = 0, sp = 0;
  for (size_t i = 0; i < b->n_entries; i++) {
    const rg_sched_entry_t *e = &b->entries[i];
    if (e->is_prefill) {
      t.Bp++;
      t.Tp += e->n;
      sp += (double)e->n * (double)e->pos;
    } else {
      t.Bd++;
      sd += (double)e->pos;
    }
  }
  t.cd = t.Bd > 0 ? sd / t.Bd : 0;
  // Chunks are costed at their token-weighted context, which gives their
  // attention FLOPs (tokens x context) exactly.
  t.cp = t.Tp > 0 ? sp / t.Tp : 0;
  return t;
}

// The forward step of replica R's batch. Attention-FFN: fills the parts the
// hidden states' flow decides between.
static rg_status_t batch_time(sim_t *S, rep_t *R, double *out) {
  pool_t *P = &S->pools[R->pool];
  const rg_placement_t *p = P->p;
  tally_t t = tally(&R->b);
  if (p->mode != RG_MODE_AF) {
    // A prefill-decode decode side recomputes a preempted prompt in the
    // decode mapping: its prefill phase belongs to the prefill group.
    rg_phase_t pf = p->mode == RG_MODE_PD && !R->prefill_side ? RG_PHASE_DECODE : RG_PHASE_PREFILL;
    return mixed_time(S, P, R->group, pf, t.Bd, t.cd, t.Bp, t.Tp, t.cp, out);
  }
  // Attention-FFN with m micro-batches in flight: each carries 1/m of the
  // decodes and of the prefill tokens, and the groups alternate on them.
  int m = p->micro_batches > 1 ? p->micro_batches : 1;
  double ta, tf;
  double Bd = t.Bd > 0 ? ceil(t.Bd / m) : 0, Bp = t.Bp > 0 ? fmax(1, t.Bp / m) : 0;
  RG_RETURN_IF_ERROR(
      mixed_time(S, P, P->g_attn, RG_PHASE_PREFILL, Bd, t.cd, Bp, t.Tp / m, t.cp, &ta));
  RG_RETURN_IF_ERROR(
      mixed_time(S, P, P->g_ffn, RG_PHASE_PREFILL, Bd, t.cd, Bp, t.Tp / m, t.cp, &tf));
  double sa = p->groups[P->g_attn].cls->step_cost, sf = p->groups[P->g_ffn].cls->step_cost;
  ta -= sa, tf -= sf;
  R->af_m = m;
  R->af_slow = ta > tf ? ta : tf;
  R->af_sum = ta + tf;
  R->af_sc = sa > sf ? sa : sf;
  R->af_lat = P->hop_latency;
  *out = m * R->af_slow > R->af_sum ? m * R->af_slow : R->af_sum;
  *out += R->af_sc;
  return NULL;
}

// ----- Helpers ----------------------------------------------------------------------------

static rg_status_t push(sim_t *S, double t, int kind, int32_t a, int64_t b) {
  if (kind != EV_SAMPLE) S->pending_events++;
  return rg__heap_push(&S->q, t, kind, a, b);
}

static void kick(sim_t *S, int rep) {
  rep_t *R = &S->reps[rep];
  if (R->kicked) return;
  R->kicked = 1;
  S->kicks[S->n_kicks++] = rep;
}

static rg_status_t link_changed(sim_t *S, int li) {
  rg__link_t *l = &S->links[li];
  double t = rg__link_next(l);
  if (t >= NO_TIME) return NULL;
  return push(S, t, EV_LINK, li, l->version);
}

static rg_status_t start_flow(sim_t *S, int li, double bytes, int32_t owner, int kind) {
  RG_RETURN_IF_ERROR(rg__link_add(&S->links[li], S->now, bytes, owner, kind, 0));
  return link_changed(S, li);
}

static rg_status_t new_link(sim_t *S, double bw, double lat, int *out) {
  if (S->n_links == S->cap_links) {
    int cap = S->cap_links ? S->cap_links * 2 : 64;
    rg__link_t *l = realloc(S->links, (size_t)cap * sizeof *l);
    if (!l) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for links");
    S->links = l;
    S->cap_links = cap;
  }
  if (!(bw > 0)) bw = 1e9;  // a link the fleet leaves unspecified: 1 GB/s
  S->links[S->n_links] = (rg__link_t){.bw = bw, .lat = lat > 0 ? lat : 0};
  *out = S->n_links++;
  return NULL;
}

static rg_status_t new_live(sim_t *S, int32_t *out) {
  if (S->free_live < 0) {
    int32_t cap = S->cap_live ? S->cap_live * 2 : 1024;
    live_t *l = realloc(S->live, (size_t)cap * sizeof *l);
    if (!l) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %d requests", S->n_live);
    S->live = l;
    for (int32_t i = cap - 1; i >= S->cap_live; i--) {
      S->live[i].next_free = S->free_live;
      S->free_live = i;
    }
    S->cap_live = cap;
  }
  int32_t i = S->free_live;
  S->free_live = S->live[i].next_free;
  memset(&S->live[i], 0, sizeof S->live[i]);
  S->live[i].session = -1;
  S->live[i].src = -1;
  S->live[i].handle = -1;
  S->n_live++;
  *out = i;
  return NULL;
}

static void free_live(sim_t *S, int32_t i) {
  S->live[i].next_free = S->free_live;
  S->free_live = i;
  S->n_live--;
}

static rg_status_t bind_handle(rep_t *R, int32_t handle, int32_t li) {
  if (handle >= R->cap_handles) {
    int32_t cap = handle * 2 + 64;
    int32_t *n = realloc(R->live_of, (size_t)cap * sizeof *n);
    if (!n) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for request handles");
    R->live_of = n;
    R->cap_handles = cap;
  }
  R->live_of[handle] = li;
  return NULL;
}

// The tokens of request l at [0, n): synthetic ids that are equal exactly
// where the workload says contents are equal (shared hash ids, a shared
// prefix, a session's history). With the prefix cache off no one compares
// them, and zeros do.
static rg_status_t prompt_of(sim_t *S, const live_t *l, int64_t n, const int32_t **out) {
  if (n > S->cap_prompt) {
    int64_t cap = n * 2;
    int32_t *p = realloc(S->prompt, (size_t)cap * sizeof *p);
    if (!p)
      return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for a %lld-token prompt",
                            (long long)n);
    S->prompt = p;
    S->cap_prompt = cap;
    if (!S->cache_on) memset(p, 0, (size_t)cap * sizeof *p);
  }
  *out = S->prompt;
  if (!S->cache_on) return NULL;
  int64_t pos = 0;
  if (l->src >= 0) {
    const rg_sim_request_t *r = &S->trace->reqs[l->src];
    int64_t hb = S->trace->hash_block;
    for (uint32_t k = 0; k < r->n_hash && pos < n; k++) {
      uint64_t st = mix(S->trace->hashes[r->hash_at + k] ^ SALT_HASH);
      for (int64_t j = 0; j < hb && pos < n; j++, pos++) S->prompt[pos] = token(st, j);
    }
    uint64_t sh = mix(SALT_SHARED);
    for (; pos < r->shared && pos < n; pos++) S->prompt[pos] = token(sh, pos);
  }
  for (; pos < n; pos++) S->prompt[pos] = token(l->stream, pos);
  return NULL;
}

static void refuse(sim_t *S, const char *why) {
  if (!S->r->refused++) snprintf(S->r->refused_reason, sizeof S->r->refused_reason, "%s", why);
}

// ----- Routing -------------------------------------------------------------------------------

static int pick_slot(sim_t *S) {
  // Pools: smooth weighted round-robin (each turn every pool gains its
  // weight, the richest is picked and pays the total), deterministic and
  // as even as weights allow.
  int best = 0;
  double total = 0;
  for (int i = 0; i < S->n_pools; i++) {
    pool_t *P = &S->pools[i];
    P->current += P->weight;
    total += P->weight;
    if (P->current > S->pools[best].current) best = i;
  }
  pool_t *P = &S->pools[best];
  P->current -= total;
  // Replicas: the fewest outstanding; past 64 replicas the better of two
  // drawn at random (the "power of two choices"), which keeps routing O(1).
  int first = P->first_slot, n = P->n_slots, pick = first;
  if (n <= 64) {
    for (int i = first + 1; i < first + n; i++)
      if (S->slots[i].outstanding < S->slots[pick].outstanding) pick = i;
  } else {
    S->route_rng += 0x9e3779b97f4a7c15ull;
    uint64_t z = mix(S->route_rng);
    int a = first + (int)(z % (uint64_t)n), b = first + (int)((z >> 32) % (uint64_t)n);
    pick = S->slots[b].outstanding < S->slots[a].outstanding ? b : a;
  }
  return pick;
}

// ----- Requests in and out -------------------------------------------------------------------

static rg_status_t session_next(sim_t *S, int32_t s, double t);

// Hands live request li to its slot's first replica (the prefill side for
// prefill-decode).
static rg_status_t admit(sim_t *S, int32_t li) {
  live_t *l = &S->live[li];
  slot_t *sl = &S->slots[l->slot];
  int rep = sl->prefill_rep >= 0 ? sl->prefill_rep : sl->main_rep;
  rep_t *R = &S->reps[rep];
  const int32_t *tok;
  RG_RETURN_IF_ERROR(prompt_of(S, l, l->n_prompt, &tok));
  int prefill_only = sl->prefill_rep >= 0;
  rg_sched_request_t sr = {(uint64_t)li, tok, (size_t)l->n_prompt, prefill_only ? 1 : l->max_out,
                           S->now};
  int32_t h;
  rg_status_t st = rg_sched_add(R->sched, &sr, &h);
  S->r->requests++;
  S->r->prompt_tokens += l->n_prompt;
  if (st) {
    // Never runnable here (longer than the context or the pool): it fails
    // alone, as in the runtime.
    refuse(S, rg_status_message(st));
    rg_status_free(st);
    int32_t ses = l->session;
    free_live(S, li);
    if (ses >= 0) {
      S->sess[ses].open = 0;
      S->r->sessions_finished++;
    }
    return NULL;
  }
  l->rep = rep;
  l->handle = h;
  sl->outstanding++;
  RG_RETURN_IF_ERROR(bind_handle(R, h, li));
  kick(S, rep);
  return NULL;
}

static rg_status_t arrive_trace(sim_t *S, size_t i) {
  const rg_sim_request_t *q = &S->trace->reqs[i];
  int32_t li;
  RG_RETURN_IF_ERROR(new_live(S, &li));
  live_t *l = &S->live[li];
  l->arrival = S->now;
  l->n_prompt = q->prompt;
  l->max_out = q->output;
  l->src = (int64_t)i;
  l->stream = mix(SALT_REQUEST + i);
  l->slot = pick_slot(S);
  return admit(S, li);
}

// A request is done: its figures, its slot's count, its session's next step.
static rg_status_t finish(sim_t *S, int32_t li) {
  live_t *l = &S->live[li];
  rg_sim_report_t *r = S->r;
  S->done_requests++;
  r->finished++;
  r->output_tokens += l->n_out;
  rg__hist_add(&S->e2e, l->last - l->arrival);
  double tpot = l->n_out > 1 ? (l->last - l->first) / (double)(l->n_out - 1) : 0;
  if (l->n_out > 1) rg__hist_add(&S->tpot, tpot);
  double ttft = l->first - l->arrival;
  if ((r->slo_ttft <= 0 || ttft <= r->slo_ttft) && (r->slo_tbt <= 0 || tpot <= r->slo_tbt)) {
    S->goodput_requests++;
    S->goodput_tokens += l->n_out;
  }
  if (l->last > S->last_token) S->last_token = l->last;
  slot_t *sl = &S->slots[l->slot];
  sl->outstanding--;
  pool_t *P = &S->pools[sl->pool];
  P->requests++;
  P->output_tokens += l->n_out;
  int32_t ses = l->session;
  int64_t ctx = l->n_prompt + l->n_out;
  free_live(S, li);
  if (ses >= 0) {
    session_t *se = &S->sess[ses];
    se->ctx = ctx;
    return session_next(S, ses, S->now);
  }
  return NULL;
}

// Prefill-decode: the prefill side has sampled the first token; the decode
// side's scheduler takes the request with the prompt's KV still on the
// prefill side. When it admits it, the batch's imports name the positions
// to send (a prefix the decode side has cached is not sent again), and
// the step waits for them: sched's contract, as the runtime keeps it.
static rg_status_t import(sim_t *S, int32_t li) {
  live_t *l = &S->live[li];
  slot_t *sl = &S->slots[l->slot];
  rep_t *R = &S->reps[sl->main_rep];
  const int32_t *tok;
  RG_RETURN_IF_ERROR(prompt_of(S, l, l->n_prompt, &tok));
  rg_sched_request_t sr = {(uint64_t)li, tok, (size_t)l->n_prompt, l->max_out, S->now};
  int32_t h;
  rg_status_t st =
      rg_sched_add_imported(R->sched, &sr, (size_t)l->n_prompt, &l->first_token, 1, &h);
  if (st) {
    // The decode side's pool cannot hold it although the prefill side's
    // could: it ends with its one token.
    refuse(S, rg_status_message(st));
    rg_status_free(st);
    return finish(S, li);
  }
  l->rep = sl->main_rep;
  l->handle = h;
  RG_RETURN_IF_ERROR(bind_handle(R, h, li));
  kick(S, sl->main_rep);
  return NULL;
}

// ----- Sessions ----------------------------------------------------------------------------

static double draw_lognormal(uint64_t *s, double mean, double sigma) {
  if (mean <= 0) return 0;
  return exp(log(mean) - sigma * sigma / 2 + sigma * rg_gen_normal(s));
}
static int draw_geometric(uint64_t *s, double mean) {
  if (mean <= 1) return 1;
  double k = 1 + floor(log(rg_gen_uniform(s)) / log(1 - 1 / mean));
  return k < 1e6 ? (int)k : 1000000;
}

static rg_status_t session_start(sim_t *S) {
  const rg_sim_sessions_t *ss = S->ses;
  if (S->now >= S->end_arrivals) return NULL;
  if (S->n_sess == S->cap_sess) {
    int32_t cap = S->cap_sess ? S->cap_sess * 2 : 256;
    session_t *n = realloc(S->sess, (size_t)cap * sizeof *n);
    if (!n) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %d sessions", S->n_sess);
    S->sess = n;
    S->cap_sess = cap;
  }
  int32_t id = S->n_sess++;
  session_t *se = &S->sess[id];
  memset(se, 0, sizeof *se);
  se->stream = mix(SALT_SESSION + (uint64_t)id);
  se->rng = mix(S->o.seed ^ se->stream);
  se->requests_left = draw_geometric(&se->rng, ss->requests);
  se->steps_left = draw_geometric(&se->rng, ss->steps_per_request);
  // The context a session starts from, so that the mean re-read over its
  // steps is prefix_tokens: it grows by a step's append and output each
  // step, about half a session's steps on average.
  double grow = ss->requests * ss->steps_per_request / 2 * (ss->append_tokens + ss->output_tokens);
  double base = ss->prefix_tokens - grow > ss->prefix_tokens / 4 ? ss->prefix_tokens - grow
                                                                 : ss->prefix_tokens / 4;
  se->ctx = (int64_t)llround(draw_lognormal(&se->rng, base, 0.3));
  se->slot = -1;
  se->start = S->now;
  se->open = 1;
  S->r->sessions++;
  RG_RETURN_IF_ERROR(
      push(S, S->now + -log(rg_gen_uniform(&S->rng)) / ss->rate, EV_SESSION_START, 0, 0));
  return push(S, S->now, EV_SESSION_STEP, id, 0);
}

static rg_status_t session_step(sim_t *S, int32_t id) {
  session_t *se = &S->sess[id];
  const rg_sim_sessions_t *ss = S->ses;
  if (S->now >= S->end_arrivals) {
    // Cut by the end of the run: not a session's natural length, so it
    // stays out of the means.
    se->open = 0;
    S->r->sessions_cut++;
    return NULL;
  }
  int64_t append = (int64_t)llround(draw_lognormal(&se->rng, ss->append_tokens, 0.5));
  int64_t out = (int64_t)llround(draw_lognormal(&se->rng, ss->output_tokens, 0.5));
  if (append < 1) append = 1;
  if (out < 1) out = 1;
  if (se->ctx + append + out > S->max_context) {
    // The session has filled the model's context: it ends here.
    se->open = 0;
    S->r->sessions_finished++;
    S->r->sessions_context_full++;
    S->r->session_mean_s += S->now - se->start;
    S->r->session_wait_share += se->wait;
    return NULL;
  }
  int32_t li;
  RG_RETURN_IF_ERROR(new_live(S, &li));
  live_t *l = &S->live[li];
  l->arrival = S->now;
  l->n_prompt = se->ctx + append;
  l->max_out = out;
  l->stream = se->stream;
  l->session = id;
  if (se->slot < 0) se->slot = pick_slot(S);
  l->slot = se->slot;
  return admit(S, li);
}

// After a step of session id ended at t: a tool runs before the next step,
// or the person thinks before the next request, or the session is over.
static rg_status_t session_next(sim_t *S, int32_t id, double t) {
  session_t *se = &S->sess[id];
  const rg_sim_sessions_t *ss = S->ses;
  if (--se->steps_left > 0)
    return push(S, t + -log(rg_gen_uniform(&se->rng)) * ss->tool_latency, EV_SESSION_STEP, id, 0);
  if (--se->requests_left > 0) {
    se->steps_left = draw_geometric(&se->rng, ss->steps_per_request);
    double think = draw_lognormal(&se->rng, ss->think_time, ss->think_sigma);
    se->wait += think;
    return push(S, t + think, EV_SESSION_STEP, id, 0);
  }
  se->open = 0;
  S->r->sessions_finished++;
  S->r->session_mean_s += t - se->start;
  S->r->session_wait_share += se->wait;
  return NULL;
}

// ----- A replica's iteration ------------------------------------------------------------------

static rg_status_t start_step(sim_t *S, int rep);

// Copies of one group: swaps over the host link, tier moves over the tier
// link; the replica waits for all of them.
static rg_status_t start_copies(sim_t *S, int rep, size_t n_host, size_t n_tier) {
  rep_t *R = &S->reps[rep];
  pool_t *P = &S->pools[R->pool];
  R->pending = 0;
  if (n_host) {
    S->r->swap_bytes += (double)n_host * P->block_bytes;
    RG_RETURN_IF_ERROR(
        start_flow(S, R->host_link, (double)n_host * P->block_bytes, rep, FLOW_COPY));
    R->pending++;
  }
  if (n_tier) {
    S->r->tier_bytes += (double)n_tier * P->block_bytes;
    RG_RETURN_IF_ERROR(
        start_flow(S, R->tier_link, (double)n_tier * P->block_bytes, rep, FLOW_COPY));
    R->pending++;
  }
  return NULL;
}

static rg_status_t copy_in(sim_t *S, int rep) {
  rep_t *R = &S->reps[rep];
  R->phase = PH_COPY_IN;
  RG_RETURN_IF_ERROR(start_copies(S, rep, R->b.n_swap_in, R->b.n_reloads));
  // Imports: one flow each from the prefill side, sharing the link.
  for (size_t i = 0; i < R->b.n_imports; i++) {
    const rg_sched_import_t *im = &R->b.imports[i];
    double bytes = (double)(im->pos_end - im->pos_begin) * S->kv_tok;
    if (!(bytes > 0)) continue;
    S->r->kv_transfer_bytes += bytes;
    RG_RETURN_IF_ERROR(start_flow(S, R->cross_link, bytes, rep, FLOW_IMPORT));
    R->pending++;
  }
  return R->pending ? NULL : start_step(S, rep);
}

static rg_status_t schedule(sim_t *S, int rep) {
  rep_t *R = &S->reps[rep];
  RG_RETURN_IF_ERROR(rg_sched_schedule(R->sched, S->now, &R->b));
  if (S->o.check) RG_RETURN_IF_ERROR(rg_sched_check(R->sched));
  R->copy_start = S->now;
  R->phase = PH_COPY_OUT;
  RG_RETURN_IF_ERROR(start_copies(S, rep, R->b.n_swap_out, R->b.n_offloads));
  return R->pending ? NULL : copy_in(S, rep);
}

static rg_status_t start_step(sim_t *S, int rep) {
  rep_t *R = &S->reps[rep];
  pool_t *P = &S->pools[R->pool];
  if (!R->b.n_entries) {
    // Nothing to run. A scheduler still holding work (a preemption-only
    // iteration) is asked again; otherwise the replica rests.
    R->phase = PH_IDLE;
    R->busy += S->now - R->copy_start;
    rg_sched_stats_t st;
    rg_sched_stats(R->sched, &st);
    int64_t held = st.n_state[RG_SCHED_WAITING] + st.n_state[RG_SCHED_PREFILLING] +
                   st.n_state[RG_SCHED_DECODING] + st.n_state[RG_SCHED_SWAPPED];
    if (held) {
      if (++R->spins > 8)
        return rg_status_make(RG_INTERNAL,
                              "simulate: replica %d of pool %d holds %lld requests but its "
                              "scheduler schedules none of them",
                              R->slot - P->first_slot, R->pool + 1, (long long)held);
      kick(S, rep);
    }
    return NULL;
  }
  R->spins = 0;
  double step;
  RG_RETURN_IF_ERROR(batch_time(S, R, &step));
  R->t0 = S->now;
  R->step = step;
  if (P->p->mode == RG_MODE_AF && P->hidden_bytes > 0) {
    // The step's hidden states cross to the FFN group and back as one flow
    // on the link between the groups; its end decides the step's.
    double tokens = 0;
    for (size_t i = 0; i < R->b.n_entries; i++) tokens += R->b.entries[i].n;
    double bytes = tokens * P->hidden_bytes;
    S->r->activation_bytes += bytes;
    R->phase = PH_STEP_ACT;
    return start_flow(S, R->cross_link, bytes, rep, FLOW_ACT);
  }
  R->phase = PH_STEP;
  return push(S, R->t0 + step, EV_STEP, rep, 0);
}

static double m_max3(double a, double b, double c) {
  double m = a > b ? a : b;
  return m > c ? m : c;
}

// Attention-FFN: the hidden states have moved (now); when the step ends.
static rg_status_t act_done(sim_t *S, int rep) {
  rep_t *R = &S->reps[rep];
  double flow = S->now - R->t0, end;
  if (R->af_m > 1) {
    // m micro-batches: one's transfer hides behind another's compute, so
    // the step is the longest of m x the slower group, one micro-batch's
    // whole path, and the transfers themselves.
    end = R->t0 + m_max3(R->af_m * R->af_slow, R->af_sum + flow / R->af_m, flow);
  } else {
    end = R->t0 + R->af_sum + flow;
  }
  end += R->af_lat + R->af_sc;
  R->step = end - R->t0;
  R->phase = PH_STEP;
  return push(S, end, EV_STEP, rep, 0);
}

static rg_status_t step_done(sim_t *S, int rep) {
  rep_t *R = &S->reps[rep];
  pool_t *P = &S->pools[R->pool];
  const rg_sched_batch_t *b = &R->b;
  int n = 0;
  R->iterations++;
  R->entries += (int64_t)b->n_entries;
  P->iterations++;
  P->entries += (int64_t)b->n_entries;
  R->busy += S->now - R->copy_start;
  if (R->prefill_side)
    P->prefill_busy += S->now - R->copy_start;
  else
    P->busy += S->now - R->copy_start;
  S->r->iterations++;
  S->r->prefill_tokens += b->n_prefill_tokens;
  if (S->o.on_step) {
    rg_sim_step_t st = {R->pool, R->slot - P->first_slot, R->prefill_side, b, R->copy_start, S->now,
                        R->step};
    S->o.on_step(S->o.step_ctx, &st);
  }
  // Tokens: one per entry that yields logits.
  for (size_t i = 0; i < b->n_entries; i++) {
    const rg_sched_entry_t *e = &b->entries[i];
    if (!e->want_logits) continue;
    live_t *l = &S->live[R->live_of[e->req]];
    int32_t tk = S->cache_on ? token(l->stream, l->n_prompt + l->n_out) : 0;
    if (l->n_out == 0) {
      l->first = S->now;
      rg__hist_add(&S->ttft, S->now - l->arrival);
      l->first_token = tk;
    } else {
      rg__hist_add(&S->tbt, S->now - l->last);
    }
    l->last = S->now;
    l->n_out++;
    S->results[n++] = (rg_sched_result_t){e->req, tk, 0};
  }
  RG_RETURN_IF_ERROR(rg_sched_commit(R->sched, S->now, S->results, (size_t)n));
  if (S->o.check) RG_RETURN_IF_ERROR(rg_sched_check(R->sched));
  R->phase = PH_IDLE;
  // Requests that reached their last token here (for the prefill side of
  // prefill-decode: their first) leave this scheduler.
  for (int k = 0; k < n; k++) {
    int32_t h = S->results[k].req, li = R->live_of[h];
    live_t *l = &S->live[li];
    int done_here = R->prefill_side ? 1 : l->n_out >= l->max_out;
    if (!done_here) continue;
    if (S->o.check) {
      rg_sched_request_info_t info;
      RG_RETURN_IF_ERROR(rg_sched_request_info(R->sched, h, &info));
      if (info.state != RG_SCHED_FINISHED)
        return rg_status_make(
            RG_INTERNAL, "simulate: request %d has all %lld tokens but the scheduler has it %s", li,
            (long long)l->n_out, rg_sched_state_name(info.state));
    }
    rg_sched_release(R->sched, h);
    l->handle = -1;
    if (R->prefill_side && l->n_out < l->max_out) {
      RG_RETURN_IF_ERROR(import(S, li));
    } else {
      RG_RETURN_IF_ERROR(finish(S, li));
    }
  }
  kick(S, rep);
  return NULL;
}

static rg_status_t flow_done(sim_t *S, int32_t owner, int kind) {
  rep_t *R = &S->reps[owner];
  if (kind == FLOW_ACT) return act_done(S, owner);
  if (--R->pending > 0) return NULL;
  return R->phase == PH_COPY_OUT ? copy_in(S, owner) : start_step(S, owner);
}

static rg_status_t link_event(sim_t *S, int li, int64_t version) {
  rg__link_t *l = &S->links[li];
  if (version != l->version) return NULL;  // a later change rescheduled it
  rg__link_advance(l, S->now);
  rg__flow_t done[16];
  int n;
  rg__link_take_done(l, done, 16, &n);
  for (int i = 0; i < n; i++) {
    if (done[i].kind == FLOW_IMPORT) rg__hist_add(&S->kvt, S->now + l->lat - done[i].start);
    // A step's hidden states pay their hops' latencies in the step itself
    // (act_done); other flows are complete one latency after their bytes.
    double at = S->now + (done[i].kind == FLOW_ACT ? 0 : l->lat);
    RG_RETURN_IF_ERROR(push(S, at, EV_FLOW, done[i].owner,
                            done[i].kind == FLOW_IMPORT ? FLOW_COPY : done[i].kind));
  }
  return link_changed(S, li);
}

// ----- Sampling and progress ------------------------------------------------------------------

static rg_status_t sample(sim_t *S) {
  rg_sim_report_t *r = S->r;
  if (r->n_kv == MAX_SAMPLES) {
    // Keep every other sample and sample half as often: the picture keeps
    // its resolution over a run of any length.
    for (size_t i = 0; i < MAX_SAMPLES / 2; i++) r->kv[i] = r->kv[2 * i + 1];
    r->n_kv = MAX_SAMPLES / 2;
    S->o.sample_s *= 2;
  }
  rg_sim_kv_sample_t k = {S->now, 0, 0, 0, 0};
  for (int i = 0; i < S->n_reps; i++) {
    rep_t *R = &S->reps[i];
    double bb = S->pools[R->pool].block_bytes;
    rg_sched_stats_t st;
    rg_sched_stats(R->sched, &st);
    k.device_used += (double)st.blocks_used * bb;
    k.device_cached += (double)st.blocks_cached * bb;
    k.swap += (double)st.swap_used * bb;
    k.tier += (double)st.tier_used * bb;
    // An idle replica still moves idle blocks down once their golden time
    // is over: the runtime's loop calls schedule even with nothing to run.
    if (R->phase == PH_IDLE && st.blocks_cached > 0 && S->pools[R->pool].sc.n_tier_blocks > 0)
      kick(S, i);
  }
  if (k.device_used + k.device_cached > r->kv_device_peak)
    r->kv_device_peak = k.device_used + k.device_cached;
  if (k.tier > r->kv_tier_peak) r->kv_tier_peak = k.tier;
  r->kv[r->n_kv++] = k;
  return NULL;
}

static void progress(sim_t *S) {
  if (!S->o.progress) return;
  rg_sim_progress_t p = {S->now,           S->end_arrivals < NO_TIME ? S->end_arrivals : 0,
                         S->done_requests, S->trace ? (int64_t)S->trace->n : 0,
                         S->r->iterations, rg_clock_now() - S->wall0};
  S->o.progress(S->o.progress_ctx, &p);
}

// ----- Setup ------------------------------------------------------------------------------

// Weights per device of group g of p: each slot it runs, split as the cost
// model splits it (tp for attention and dense layers, tp x dp for experts,
// layers over pp).
static double group_weights(const rg_plan_request_t *req, const rg_placement_t *p, int g,
                            const double w[RG_SLOT_COUNT], int all) {
  const rg_group_t *gr = &p->groups[g];
  const rg_arch_t *a = req->model;
  double L = (double)a->n_layers, fs = ceil(L / gr->pp) / L, tp = gr->tp,
         ep = (double)gr->tp * gr->dp;
  int holds[RG_SLOT_COUNT];
  for (int s = 0; s < RG_SLOT_COUNT; s++) holds[s] = all || p->slot_group[s] == g;
  double sum = 0;
  if (holds[RG_SLOT_ATTENTION]) sum += w[RG_SLOT_ATTENTION] * fs / tp;
  if (holds[RG_SLOT_FFN]) sum += w[RG_SLOT_FFN] * fs / (a->n_experts > 0 ? ep : tp);
  double e = holds[RG_SLOT_EMBED] ? w[RG_SLOT_EMBED] : 0,
         h = holds[RG_SLOT_LM_HEAD] ? w[RG_SLOT_LM_HEAD] : 0;
  sum += (gr->pp > 1 ? fmax(e, h) : e + h) / tp;
  return sum;
}

// KV blocks the group's devices hold after weights and a prefill chunk's
// activations (as the cost model's memory check counts them).
static rg_status_t group_blocks(sim_t *S, pool_t *P, int g, int all, int bs, int64_t *out,
                                double *per_device /* KV bytes a token puts on one device */) {
  const rg_placement_t *p = P->p;
  const rg_group_t *gr = &p->groups[g];
  const rg_arch_t *a = S->req->model;
  double w[RG_SLOT_COUNT];
  RG_RETURN_IF_ERROR(rg_slot_weights(a, p->weight_dtype, p->kv_dtype, w));
  double weights = group_weights(S->req, p, g, w, all);
  double d_ff = (double)(a->d_ff > a->d_ff_expert * a->n_experts_per_tok
                             ? a->d_ff
                             : a->d_ff_expert * a->n_experts_per_tok);
  double act = (P->chunk + p->batch) * (4.0 * (double)a->d_model + 2.0 * d_ff) * 2.0 / gr->tp;
  double cap = rg__group_capacity(S->req, gr);
  double L = (double)a->n_layers, fs = ceil(L / gr->pp) / L;
  double kvsplit = a->mla ? 1 : (gr->tp < a->n_kv_heads ? gr->tp : (double)a->n_kv_heads);
  double per_tok = S->kv_tok * fs / kvsplit;
  double free_b = cap - weights - act;
  *per_device = per_tok;  // KV bytes a token puts on one device
  double blocks = free_b > 0 ? floor(free_b / (per_tok * bs)) * gr->dp : 0;
  if (blocks < 1) {
    char b1[32], b2[32], b3[32];
    return rg_status_make(RG_INFEASIBLE,
                          "simulate: group '%s' (%d x %s) has %s usable per device, and %s of "
                          "weights and %s of activations leave no room for one KV block",
                          gr->name, gr->devices, gr->cls->name,
                          rg_fmt_quantity(cap, RG_UNIT_BYTES, b1, sizeof b1),
                          rg_fmt_quantity(weights, RG_UNIT_BYTES, b2, sizeof b2),
                          rg_fmt_quantity(act, RG_UNIT_BYTES, b3, sizeof b3));
  }
  *out = blocks > 1e9 ? (int64_t)1e9 : (int64_t)blocks;
  return NULL;
}

// A tier class's capacity and bandwidth on the nodes of group g, as the
// group's share of them (a group of 2 devices on 8-device nodes gets a
// quarter of each node's tier). 0 when its nodes lack it.
static void tier_share(const rg_fleet_t *f, const rg_group_t *g, const rg_device_class_t *t,
                       double *cap, double *bw, double *lat) {
  *cap = *bw = *lat = 0;
  for (int i = 0; i < f->n_nodes; i++) {
    int per = 0, n_t = 0;
    for (int j = 0; j < f->nodes[i].n_devs; j++) {
      if (f->nodes[i].devs[j].cls == g->cls) per = f->nodes[i].devs[j].count;
      if (f->nodes[i].devs[j].cls == t) n_t = f->nodes[i].devs[j].count;
    }
    if (per && n_t) {
      double share = (double)g->devices / per;
      *cap = share * n_t * t->mem[0].capacity;
      *bw = share * n_t * t->mem[0].bandwidth;
      *lat = t->host.latency;
      return;
    }
  }
}

static const rg_device_class_t *find_tier(const rg_fleet_t *f, rg_device_kind_t kind) {
  for (int i = 0; i < f->n_nodes; i++)
    for (int j = 0; j < f->nodes[i].n_devs; j++)
      if (f->nodes[i].devs[j].cls->kind == kind) return f->nodes[i].devs[j].cls;
  return NULL;
}

static rg_status_t setup_pool(sim_t *S, int pi, int bs, int64_t *total_blocks) {
  pool_t *P = &S->pools[pi];
  const rg_placement_t *p = P->p;
  const rg_fleet_t *f = S->req->fleet;
  P->g_attn = p->slot_group[RG_SLOT_ATTENTION];
  P->g_ffn = p->slot_group[RG_SLOT_FFN];
  P->g_prefill = p->mode == RG_MODE_PD ? p->slot_group[RG_SLOT_PREFILL] : -1;
  P->chunk = P->pred->prefill_chunk > 0 ? P->pred->prefill_chunk
             : p->prefill_chunk > 0     ? p->prefill_chunk
                                        : rg__prefill_chunk(S->req);
  P->devices = 0;
  P->price = P->power = 0;
  for (int g = 0; g < p->n_groups; g++) {
    P->devices += p->groups[g].devices;
    P->price += p->groups[g].devices * p->groups[g].cls->price;
    P->power += p->groups[g].devices * p->groups[g].cls->power;
  }
  P->block_bytes = S->kv_tok * bs;
  int64_t blocks;
  RG_RETURN_IF_ERROR(group_blocks(S, P, P->g_attn, 0, bs, &blocks, &P->kv_per_device));
  if (S->o.kv_tokens > 0) blocks = (S->o.kv_tokens + bs - 1) / bs;
  // What one device of the group holds: its data-parallel rank's share.
  P->kv_per_device *= (double)blocks * bs / p->groups[P->g_attn].dp;
  int max_seqs = S->o.max_seqs > 0         ? S->o.max_seqs
                 : p->max_batch > p->batch ? p->max_batch
                 : p->batch > 0            ? p->batch
                                           : 1;
  rg_sched_config_t *c = &P->sc;
  memset(c, 0, sizeof *c);
  c->block_size = bs;
  c->n_blocks = blocks;
  c->max_seqs = max_seqs;
  c->max_batch_tokens = (int64_t)P->chunk + max_seqs;
  c->max_context = S->max_context;
  c->preempt = S->o.preempt;
  c->prefix_cache = S->cache_on;
  const rg_group_t *ga = &p->groups[P->g_attn];
  // The swap tier and the capacity tier live in the host DRAM (or SSD) of
  // the attention group's nodes; both in host DRAM split it.
  const rg_device_class_t *dram = find_tier(f, RG_KIND_HOST_DRAM);
  int swap = S->o.preempt == RG_SCHED_PREEMPT_SWAP;
  double split = swap && S->tier && S->tier == dram ? 0.5 : 1;
  if (swap) {
    double cap = 0, bw, lat;
    if (dram) tier_share(f, ga, dram, &cap, &bw, &lat);
    if (cap <= 0)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "simulate: preemption by swap needs host DRAM on the nodes of group "
                            "'%s' (%s), and the fleet has none there; use --preempt recompute",
                            ga->name, ga->cls->name);
    c->n_swap_blocks = (int64_t)fmin(cap * split / P->block_bytes, (double)blocks * SWAP_POOLS);
  }
  if (S->tier) {
    double cap, bw, lat;
    tier_share(f, ga, S->tier, &cap, &bw, &lat);
    if (cap <= 0)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "simulate: the KV tier '%s' is not on the nodes of group '%s' (%s); "
                            "name a tier those nodes have, or --tier none",
                            S->tier->name, ga->name, ga->cls->name);
    P->tier_full = cap * split;
    c->n_tier_blocks = (int64_t)fmin(cap * split / P->block_bytes, 1e9);
    c->retention_s = S->retention;
  }
  *total_blocks += (c->n_blocks + c->n_swap_blocks) * p->replicas;
  if (p->mode == RG_MODE_PD) {
    int64_t pb;
    double unused;
    RG_RETURN_IF_ERROR(group_blocks(S, P, P->g_prefill, 1, bs, &pb, &unused));
    rg_sched_config_t *cp = &P->sc_prefill;
    *cp = *c;
    cp->n_blocks = pb;
    cp->n_swap_blocks = 0;
    cp->n_tier_blocks = 0;
    cp->retention_s = 0;
    cp->preempt = RG_SCHED_PREEMPT_RECOMPUTE;
    cp->max_batch_tokens = (int64_t)P->chunk;
    cp->max_seqs = 64 < cp->max_batch_tokens ? 64 : (int32_t)cp->max_batch_tokens;
    *total_blocks += pb * p->replicas;
  }
  if (p->mode == RG_MODE_AF) {
    // Hidden states per token per step: attention <-> FFN twice a layer,
    // and the embed / lm_head hops when those sit elsewhere.
    const int *sg = p->slot_group;
    double hb = rg_arch_hidden_bytes(S->req->model, RG_BF16);
    struct {
      int a, b;
      double count;
    } hops[] = {{sg[RG_SLOT_ATTENTION], sg[RG_SLOT_FFN], 2.0 * (double)S->req->model->n_layers},
                {sg[RG_SLOT_EMBED], sg[RG_SLOT_ATTENTION], 1},
                {sg[RG_SLOT_FFN], sg[RG_SLOT_LM_HEAD], 1}};
    P->hidden_bytes = P->hop_latency = 0;
    for (size_t h = 0; h < sizeof hops / sizeof hops[0]; h++) {
      if (hops[h].a == hops[h].b) continue;
      rg_link_t l = rg__link_between(f, &p->groups[hops[h].a], &p->groups[hops[h].b]);
      P->hidden_bytes += hops[h].count * hb;
      P->hop_latency += hops[h].count * l.latency;
    }
  }
  return NULL;
}

static rg_status_t make_replicas(sim_t *S) {
  int n_slots = 0, n_reps = 0;
  for (int i = 0; i < S->n_pools; i++) {
    int r = S->pools[i].p->replicas > 0 ? S->pools[i].p->replicas : 1;
    n_slots += r;
    n_reps += r * (S->pools[i].p->mode == RG_MODE_PD ? 2 : 1);
  }
  S->slots = calloc((size_t)n_slots, sizeof *S->slots);
  S->reps = calloc((size_t)n_reps, sizeof *S->reps);
  S->kicks = malloc((size_t)n_reps * sizeof *S->kicks);
  if (!S->slots || !S->reps || !S->kicks)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %d replicas", n_reps);
  const rg_fleet_t *f = S->req->fleet;
  int max_seqs = 1;
  for (int pi = 0; pi < S->n_pools; pi++) {
    pool_t *P = &S->pools[pi];
    const rg_placement_t *p = P->p;
    int r = p->replicas > 0 ? p->replicas : 1;
    P->first_slot = S->n_slots;
    P->n_slots = r;
    const rg_group_t *ga = &p->groups[P->g_attn];
    rg_link_t host = ga->cls->host.bandwidth > 0 ? ga->cls->host : rg_fleet_intra_link(f, ga->cls);
    double tcap = 0, tbw = 0, tlat = 0;
    if (S->tier) tier_share(f, ga, S->tier, &tcap, &tbw, &tlat);
    for (int k = 0; k < r; k++) {
      slot_t *sl = &S->slots[S->n_slots];
      sl->pool = pi;
      sl->prefill_rep = -1;
      int sides = p->mode == RG_MODE_PD ? 2 : 1, host_link = -1, cross = -1;
      RG_RETURN_IF_ERROR(new_link(S, host.bandwidth * ga->devices, host.latency, &host_link));
      int tier_link = host_link;
      if (S->tier && tbw > 0 && tbw < host.bandwidth * ga->devices)
        RG_RETURN_IF_ERROR(new_link(S, tbw, tlat, &tier_link));
      if (p->mode != RG_MODE_COLOCATED) {
        int other = p->mode == RG_MODE_PD ? P->g_prefill : P->g_ffn;
        rg_link_t l = rg__link_between(f, &p->groups[other], ga);
        // Groups that share a node type talk over their host links: then
        // the same link carries their traffic and the block copies.
        if (l.bandwidth == host.bandwidth && l.latency == host.latency &&
            p->groups[other].cls == ga->cls)
          cross = host_link;
        else
          RG_RETURN_IF_ERROR(new_link(S, l.bandwidth, l.latency, &cross));
      }
      for (int side = 0; side < sides; side++) {
        int ri = S->n_reps++;
        rep_t *R = &S->reps[ri];
        R->pool = pi;
        R->slot = S->n_slots;
        R->prefill_side = side == 1;
        R->group = side == 1 ? P->g_prefill : P->g_attn;
        R->host_link = host_link;
        R->tier_link = tier_link;
        R->cross_link = cross;
        R->phase = PH_IDLE;
        const rg_sched_config_t *c = side == 1 ? &P->sc_prefill : &P->sc;
        if (c->max_seqs > max_seqs) max_seqs = c->max_seqs;
        rg_status_t st = rg_sched_create(c, &R->sched);
        if (st) return rg_status_wrap(st, "simulate: pool %d's scheduler", pi + 1);
        if (side == 1)
          sl->prefill_rep = ri;
        else
          sl->main_rep = ri;
      }
      S->n_slots++;
    }
  }
  S->results = malloc((size_t)max_seqs * sizeof *S->results);
  S->cap_results = max_seqs;
  return S->results ? NULL : rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
}

// ----- The report --------------------------------------------------------------------------

static void fill_report(sim_t *S) {
  rg_sim_report_t *r = S->r;
  r->first_arrival = 0;
  r->makespan = S->last_token > 0 ? S->last_token : 0;
  r->ttft = rg__hist_pct(&S->ttft);
  r->tbt = rg__hist_pct(&S->tbt);
  r->e2e = rg__hist_pct(&S->e2e);
  r->tpot = rg__hist_pct(&S->tpot);
  r->kv_transfer_s = rg__hist_pct(&S->kvt);
  double pct = r->slo_percentile > 0 ? r->slo_percentile / 100 : 0.99;
  r->ttft_at_slo = rg__hist_quantile(&S->ttft, pct);
  r->tbt_at_slo = rg__hist_quantile(&S->tbt, pct);
  r->meets_slo = (r->slo_ttft <= 0 || r->ttft_at_slo <= r->slo_ttft) &&
                 (r->slo_tbt <= 0 || r->tbt_at_slo <= r->slo_tbt);
  r->slo_attainment = r->finished ? (double)S->goodput_requests / (double)r->finished : 0;
  double span = r->makespan > 0 ? r->makespan : 0;
  r->goodput_rps = span > 0 ? (double)S->goodput_requests / span : 0;
  r->goodput_tps = span > 0 ? (double)S->goodput_tokens / span : 0;
  r->tokens_per_s = span > 0 ? (double)r->output_tokens / span : 0;
  r->devices = 0;
  r->cost_per_s = r->power = 0;
  for (int i = 0; i < S->n_pools; i++) {
    pool_t *P = &S->pools[i];
    r->devices += P->devices * P->n_slots;
    r->cost_per_s += P->price * P->n_slots;
    r->power += P->power * P->n_slots;
  }
  r->tokens_per_s_per_device = r->devices ? r->tokens_per_s / r->devices : 0;
  r->tokens_per_dollar = r->cost_per_s > 0 ? r->tokens_per_s / r->cost_per_s : 0;
  r->tokens_per_watt = r->power > 0 ? r->tokens_per_s / r->power : 0;
  for (int i = 0; i < S->n_reps; i++) {
    rg_sched_stats_t st;
    rg_sched_stats(S->reps[i].sched, &st);
    r->preempt_recompute += st.preempt_recompute;
    r->preempt_swap += st.preempt_swap;
    r->prefix_lookup_tokens += st.prefix_lookup_tokens;
    r->prefix_hit_tokens += st.prefix_hit_tokens;
    r->tier_hit_tokens += st.tier_hit_tokens;
    r->blocks_evicted += st.blocks_evicted;
    r->blocks_swapped_out += st.blocks_swapped_out;
    r->blocks_swapped_in += st.blocks_swapped_in;
    r->blocks_offloaded += st.blocks_offloaded;
    r->blocks_reloaded += st.blocks_reloaded;
    r->blocks_dropped += st.blocks_dropped;
    r->unfinished += st.n_state[RG_SCHED_WAITING] + st.n_state[RG_SCHED_PREFILLING] +
                     st.n_state[RG_SCHED_DECODING] + st.n_state[RG_SCHED_SWAPPED];
  }
  r->prefix_hit_rate =
      r->prefix_lookup_tokens ? (double)r->prefix_hit_tokens / (double)r->prefix_lookup_tokens : 0;
  r->kv_block_bytes = S->kv_tok * S->block_size;
  for (int i = 0; i < S->n_pools; i++) {
    pool_t *P = &S->pools[i];
    rg_sim_pool_report_t *pr = &r->pools[i];
    const rg_placement_t *p = P->p;
    char d[80];
    rg__pool_describe(p, d, sizeof d);
    snprintf(pr->label, sizeof pr->label, "pool %d: %s: %s", i + 1, rg_mode_name(p->mode), d);
    pr->mode = p->mode;
    pr->replicas = P->n_slots;
    pr->devices = P->devices * P->n_slots;
    pr->requests = P->requests;
    pr->output_tokens = P->output_tokens;
    pr->iterations = P->iterations;
    pr->tokens_per_s = span > 0 ? (double)P->output_tokens / span : 0;
    pr->mean_batch = P->iterations ? (double)P->entries / (double)P->iterations : 0;
    pr->busy = span > 0 ? P->busy / (span * P->n_slots) : 0;
    pr->prefill_busy =
        span > 0 && p->mode == RG_MODE_PD ? P->prefill_busy / (span * P->n_slots) : 0;
    pr->kv_blocks = P->sc.n_blocks;
    pr->swap_blocks = P->sc.n_swap_blocks;
    pr->tier_blocks = P->sc.n_tier_blocks;
    pr->prefill_kv_blocks = p->mode == RG_MODE_PD ? P->sc_prefill.n_blocks : 0;
    pr->max_seqs = P->sc.max_seqs;
    pr->pred_tokens_per_s = P->pred->tokens_per_s;
    pr->pred_ttft_p50 = P->pred->ttft_p[0];
    pr->pred_ttft_p99 = P->pred->ttft_p[2];
    pr->pred_tbt_p50 = P->pred->tbt_p[0];
    pr->pred_tbt_p99 = P->pred->tbt_p[2];
    r->kv_device_capacity +=
        (double)(P->sc.n_blocks + (p->mode == RG_MODE_PD ? P->sc_prefill.n_blocks : 0)) *
        P->block_bytes * P->n_slots;
    r->kv_swap_capacity += (double)P->sc.n_swap_blocks * P->block_bytes * P->n_slots;
    r->kv_tier_capacity += (double)P->sc.n_tier_blocks * P->block_bytes * P->n_slots;
    r->kv_tier_available += P->tier_full * P->n_slots;
    if (i == 0) r->kv_device_per_device = P->kv_per_device;
  }
  r->n_pools = S->n_pools;
  r->tier_name = S->tier ? S->tier->name : NULL;
  r->retention_s = S->tier ? S->retention : 0;
  if (S->tier)
    for (int i = 0; i < S->n_slots; i++)
      r->tier_link_seconds += S->links[S->reps[S->slots[i].main_rep].tier_link].busy;
  if (S->r->sessions_finished > 0) {
    r->session_wait_share = r->session_mean_s > 0 ? r->session_wait_share / r->session_mean_s : 0;
    r->session_mean_s /= (double)S->r->sessions_finished;
  }
  r->events = S->events;
  r->wall_seconds = rg_clock_now() - S->wall0;
}

// What the tier's hits saved: the prefill time of the tokens they brought
// back, at a chunk's cost per token on the first pool's prefill group.
static rg_status_t saved_prefill(sim_t *S) {
  if (!S->r->tier_hit_tokens) return NULL;
  pool_t *P = &S->pools[0];
  int g = P->g_prefill >= 0 ? P->g_prefill : P->g_attn;
  double ctx = S->ses ? S->ses->prefix_tokens : 0, t;
  RG_RETURN_IF_ERROR(exact_time(S, P, g, RG_PHASE_PREFILL, 1, P->chunk, ctx, &t));
  S->r->saved_prefill_seconds = (double)S->r->tier_hit_tokens * t / P->chunk;
  return NULL;
}

// ----- The run -----------------------------------------------------------------------------

static rg_status_t check_options(const rg_plan_option_t *plan, const rg_sim_options_t *o) {
  if (!plan->n_pools)
    return rg_status_make(RG_INVALID_ARGUMENT, "simulate: the plan has no pools to simulate");
  if (!o->trace == !o->sessions)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "simulate: give either a trace of requests or sessions, one of them");
  if (o->trace && !o->trace->n)
    return rg_status_make(RG_INVALID_ARGUMENT, "simulate: the trace '%s' has no requests",
                          o->trace->name);
  if (o->sessions && !(o->duration > 0))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "simulate: sessions need a duration (seconds of session arrivals)");
  if (o->duration < 0 || !isfinite(o->duration))
    return rg_status_make(RG_INVALID_ARGUMENT, "simulate: duration %g s is not a time",
                          o->duration);
  if (o->block_size < 0 || o->block_size > 4096 || (o->block_size & (o->block_size - 1)))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "simulate: block size %d is not a power of two from 1 to 4096",
                          o->block_size);
  if (o->sessions) {
    const rg_sim_sessions_t *s = o->sessions;
    if (!(s->rate > 0) || !(s->requests >= 1) || !(s->steps_per_request >= 1) ||
        !(s->prefix_tokens >= 0) || !(s->append_tokens >= 1) || !(s->output_tokens >= 1) ||
        !(s->think_time >= 0) || !(s->think_sigma >= 0) || !(s->tool_latency >= 0))
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "simulate: sessions need a rate > 0, requests and steps >= 1, append "
                            "and output tokens >= 1, and non-negative times (got rate %g, "
                            "requests %g, steps %g, append %g, output %g)",
                            s->rate, s->requests, s->steps_per_request, s->append_tokens,
                            s->output_tokens);
  }
  if (o->kv_tokens < 0)
    return rg_status_make(RG_INVALID_ARGUMENT, "simulate: a KV pool of %lld tokens",
                          (long long)o->kv_tokens);
  if (o->retention_s != -1 && !(o->retention_s >= 0))
    return rg_status_make(RG_INVALID_ARGUMENT, "simulate: retention %g s is not a time",
                          o->retention_s);
  return NULL;
}

static int trace_shares(const rg_sim_trace_t *t) {
  if (t->n_hashes) return 1;
  for (size_t i = 0; i < t->n; i++)
    if (t->reqs[i].shared > 0) return 1;
  return 0;
}

static rg_status_t run(sim_t *S) {
  rg_sim_report_t *r = S->r;
  // Block size: the caller's, or 16 doubled until every scheduler's blocks
  // fit the bookkeeping budget.
  int bs = S->o.block_size > 0 ? S->o.block_size : 16;
  for (;;) {
    int64_t total = 0;
    S->block_size = bs;
    for (int i = 0; i < S->n_pools; i++) RG_RETURN_IF_ERROR(setup_pool(S, i, bs, &total));
    if (S->o.block_size > 0 || total <= MAX_TOTAL_BLOCKS || bs >= 1024) break;
    bs *= 2;
  }
  int64_t replicas = 0, tier_blocks = 0;
  for (int i = 0; i < S->n_pools; i++) {
    replicas += S->pools[i].p->replicas;
    tier_blocks += S->pools[i].sc.n_tier_blocks * S->pools[i].p->replicas;
  }
  if (tier_blocks > MAX_TIER_BLOCKS)
    for (int i = 0; i < S->n_pools; i++) {
      rg_sched_config_t *c = &S->pools[i].sc;
      int64_t cap = MAX_TIER_BLOCKS / (replicas > 0 ? replicas : 1);
      if (c->n_tier_blocks > cap) c->n_tier_blocks = cap > 1 ? cap : 1;
    }
  RG_RETURN_IF_ERROR(make_replicas(S));
  double w_total = 0;
  for (int i = 0; i < S->n_pools; i++) {
    pool_t *P = &S->pools[i];
    P->weight = P->p->load_share > 0 ? P->p->load_share : P->pred->tokens_per_s;
    w_total += P->weight;
  }
  for (int i = 0; i < S->n_pools; i++)
    if (!(w_total > 0)) S->pools[i].weight = S->pools[i].n_slots;
  RG_RETURN_IF_ERROR(rg__hist_init(&S->ttft));
  RG_RETURN_IF_ERROR(rg__hist_init(&S->tbt));
  RG_RETURN_IF_ERROR(rg__hist_init(&S->e2e));
  RG_RETURN_IF_ERROR(rg__hist_init(&S->tpot));
  RG_RETURN_IF_ERROR(rg__hist_init(&S->kvt));
  r->kv = malloc(MAX_SAMPLES * sizeof *r->kv);
  if (!r->kv) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  // Arrivals end at the duration, or with the trace.
  double horizon;
  if (S->trace) {
    S->end_arrivals = S->o.duration > 0 ? S->o.duration : NO_TIME;
    horizon = S->trace->reqs[S->trace->n - 1].arrival;
    if (S->o.duration > 0 && S->o.duration < horizon) horizon = S->o.duration;
  } else {
    S->end_arrivals = S->o.duration;
    horizon = S->o.duration;
    RG_RETURN_IF_ERROR(push(S, 0, EV_SESSION_START, 0, 0));
  }
  if (!(S->o.sample_s > 0)) S->o.sample_s = horizon > 0 ? horizon / 256 : 1;
  RG_RETURN_IF_ERROR(rg__heap_push(&S->q, 0, EV_SAMPLE, 0, 0));
  S->now = 0;
  for (;;) {
    double ta = NO_TIME;
    if (S->trace && S->next_arrival < S->trace->n) {
      double t = S->trace->reqs[S->next_arrival].arrival;
      if (t < S->end_arrivals) ta = t;
    }
    double te = rg__heap_top(&S->q);
    // Only samples left, and nothing arriving: the run is over.
    if (S->pending_events == 0 && ta >= NO_TIME && !S->n_kicks) break;
    double t = ta < te ? ta : te;
    if (S->n_kicks && t > S->now) {
      // Every event of this instant is in: serve the kicks.
      int n = S->n_kicks;
      for (int i = 0; i < n; i++) {
        int rep = S->kicks[i];
        S->reps[rep].kicked = 0;
        if (S->reps[rep].phase == PH_IDLE) RG_RETURN_IF_ERROR(schedule(S, rep));
      }
      memmove(S->kicks, S->kicks + n, (size_t)(S->n_kicks - n) * sizeof *S->kicks);
      S->n_kicks -= n;
      continue;
    }
    S->now = t;
    if ((++S->events & 0xffff) == 0) progress(S);
    if (ta <= te) {
      RG_RETURN_IF_ERROR(arrive_trace(S, S->next_arrival++));
      continue;
    }
    rg__ev_t e;
    rg__heap_pop(&S->q, &e);
    if (e.kind != EV_SAMPLE) S->pending_events--;
    switch (e.kind) {
      case EV_STEP:
        RG_RETURN_IF_ERROR(step_done(S, e.a));
        break;
      case EV_LINK:
        RG_RETURN_IF_ERROR(link_event(S, e.a, e.b));
        break;
      case EV_FLOW:
        RG_RETURN_IF_ERROR(flow_done(S, e.a, (int)e.b));
        break;
      case EV_SESSION_START:
        RG_RETURN_IF_ERROR(session_start(S));
        break;
      case EV_SESSION_STEP:
        RG_RETURN_IF_ERROR(session_step(S, e.a));
        break;
      case EV_SAMPLE:
        RG_RETURN_IF_ERROR(sample(S));
        if (S->pending_events > 0 || S->n_kicks ||
            (S->trace && S->next_arrival < S->trace->n &&
             S->trace->reqs[S->next_arrival].arrival < S->end_arrivals))
          RG_RETURN_IF_ERROR(rg__heap_push(&S->q, S->now + S->o.sample_s, EV_SAMPLE, 0, 0));
        break;
    }
  }
  RG_RETURN_IF_ERROR(sample(S));
  if (S->n_live)
    return rg_status_make(RG_INTERNAL,
                          "simulate: the run ended with %d requests in flight that no event "
                          "will finish",
                          S->n_live);
  fill_report(S);
  RG_RETURN_IF_ERROR(saved_prefill(S));
  progress(S);
  return NULL;
}

static void sim_free(sim_t *S) {
  for (int i = 0; i < S->n_pools; i++) {
    free(S->pools[i].memo.keys);
    free(S->pools[i].memo.vals);
  }
  for (int i = 0; i < S->n_reps; i++) {
    rg_sched_destroy(S->reps[i].sched);
    free(S->reps[i].live_of);
  }
  for (int i = 0; i < S->n_links; i++) rg__link_free(&S->links[i]);
  free(S->links);
  free(S->reps);
  free(S->slots);
  free(S->kicks);
  free(S->live);
  free(S->sess);
  free(S->prompt);
  free(S->results);
  rg__heap_free(&S->q);
  rg__hist_free(&S->ttft);
  rg__hist_free(&S->tbt);
  rg__hist_free(&S->e2e);
  rg__hist_free(&S->tpot);
  rg__hist_free(&S->kvt);
}

rg_status_t rg_simulate(const rg_plan_request_t *req, const rg_plan_option_t *plan,
                        const rg_sim_options_t *o, rg_sim_report_t **out) {
  *out = NULL;
  RG_RETURN_IF_ERROR(check_options(plan, o));
  sim_t *S = calloc(1, sizeof *S);
  rg_sim_report_t *r = calloc(1, sizeof *r);
  rg_status_t st = NULL;
  if (!S || !r) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    goto fail;
  }
  S->wall0 = rg_clock_now();
  S->req = req;
  S->plan = plan;
  S->o = *o;
  S->trace = o->trace;
  S->ses = o->sessions;
  S->r = r;
  S->free_live = -1;
  S->rng = o->seed ^ 0x51a7e51a7e5ull;
  S->route_rng = o->seed ^ 0x907e907e907eull;
  S->kv_tok = rg_arch_kv_bytes_per_token(req->model, plan->pools[0].kv_dtype);
  S->max_context = req->model->max_context > 0 ? req->model->max_context : 131072;
  const rg_workload_t *w = req->workload;
  S->cache_on = o->prefix_cache >= 0 ? o->prefix_cache
                                     : (o->sessions || trace_shares(o->trace) ||
                                        w->shared_prefix > 0 || w->prefix_hit_rate > 0);
  // The capacity tier: the caller's, or the plan's choice for sessions.
  S->tier = o->no_tier ? NULL : o->tier;
  if (!S->tier && !o->no_tier && o->sessions && plan->pred[0].kv_policy == RG_KV_TIER)
    S->tier = plan->pred[0].kv_tier;
  if (S->tier && !S->cache_on) {
    st = rg_status_make(RG_INVALID_ARGUMENT,
                        "simulate: a KV tier holds cached prefixes, so it needs the prefix cache "
                        "on (--prefix-cache on)");
    goto fail;
  }
  S->retention = o->retention_s >= 0  ? o->retention_s
                 : w->session.present ? w->session.retention
                                      : 0;
  r->slo_ttft = w->slo_ttft;
  r->slo_tbt = w->slo_tbt;
  r->slo_percentile = w->slo_percentile > 0 ? w->slo_percentile : 99;
  r->prefix_cache = S->cache_on;
  r->preempt = o->preempt;
  snprintf(r->source, sizeof r->source, "%s", o->trace ? o->trace->name : "agentic sessions");
  S->n_pools = plan->n_pools;
  for (int i = 0; i < plan->n_pools; i++) {
    S->pools[i].p = &plan->pools[i];
    S->pools[i].pred = &plan->pred[i];
  }
  if ((st = run(S))) goto fail;
  sim_free(S);
  free(S);
  *out = r;
  return NULL;
fail:
  if (S) sim_free(S);
  free(S);
  rg_sim_report_destroy(r);
  return st;
}

rg_status_t rg_sim_batch_seconds(const rg_plan_request_t *req, const rg_placement_t *p, int group,
                                 rg_phase_t prefill_phase, const rg_sched_batch_t *b, double *out) {
  *out = 0;
  if (p->mode == RG_MODE_AF)
    return rg_status_make(RG_UNIMPLEMENTED,
                          "an attention-FFN step also waits on the link between its groups; "
                          "simulate it instead");
  if (group < 0 || group >= p->n_groups)
    return rg_status_make(RG_INVALID_ARGUMENT, "group %d: the placement has %d groups", group,
                          p->n_groups);
  if (!b->n_entries) return NULL;
  sim_t *S = calloc(1, sizeof *S);
  if (!S) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  S->req = req;
  S->o.exact_costs = 1;
  pool_t P = {.p = p};
  tally_t t = tally(b);
  rg_status_t st = mixed_time(S, &P, group, prefill_phase, t.Bd, t.cd, t.Bp, t.Tp, t.cp, out);
  free(S);
  return st;
}

void rg_sim_report_destroy(rg_sim_report_t *r) {
  if (!r) return;
  free(r->kv);
  free(r);
}

void rg_sim_sessions_from_workload(const rg_workload_t *w, rg_sim_sessions_t *out) {
  const rg_session_t *s = &w->session;
  double duration = s->present && s->duration > 0 ? s->duration : 62.6 * 60;
  double requests = s->present && s->requests >= 1 ? s->requests : 9.2;
  double steps = s->present && s->steps_per_request >= 1 ? s->steps_per_request : 7.8;
  double wait = s->present && s->human_wait_fraction > 0 ? s->human_wait_fraction : 0.92;
  double rate = w->rate > 0 ? w->rate : 2.2;
  *out = (rg_sim_sessions_t){
      .rate = rate / (requests * steps),
      .requests = requests,
      .steps_per_request = steps,
      .prefix_tokens = s->present ? s->prefix_tokens : 119000,
      .append_tokens = s->present && s->append_tokens >= 1 ? s->append_tokens : 875,
      .output_tokens = s->present && s->output_tokens >= 1 ? s->output_tokens : 214,
      .think_time = requests > 1 ? wait * duration / (requests - 1) : 0,
      .think_sigma = 1.5,
      .tool_latency = 2.0,
  };
}
