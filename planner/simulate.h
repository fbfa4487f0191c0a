// planner/simulate.h — `ridge simulate`: a discrete-event simulation of a
// workload on a fleet under a plan, driving the runtime's own scheduler.
//
// Between `ridge plan` (analytical, instant) and `ridge run` (real tokens)
// sits the simulator: hours of traffic on thousands of devices in seconds,
// with the very policy code the runtime runs. Each replica of each pool of
// the plan has its own sched/ instance, sized from its devices' memory, and
// the simulator makes the calls runtime/serve.c makes, on a simulated clock:
//
//   arrival ─> route to a pool (by its share of the load) and a replica (the
//              least loaded; a session keeps its replica) ─> rg_sched_add
//   replica idle ─> rg_sched_schedule(now)
//      copies that read device blocks (swap_out, offloads) ─> one flow on
//      the replica's host or tier link; then the copies that write them
//      (swap_in, reloads, imports) ─> another; then the step:
//      duration from the planner's cost model (rg_group_step_time) for the
//      batch's decodes and prefill chunks on the placed groups; attention-FFN
//      steps also move their hidden states as a flow on the link between
//      the groups
//   step done ─> rg_sched_commit(now, one token per want_logits entry) ─>
//      token times (TTFT, TBT, end to end), finished requests released
//
// Prefill-decode placements run two schedulers per replica: the prefill
// group's takes each request with max_tokens 1 and samples its first token
// (the TTFT); the prompt's KV then travels to the decode group as a flow
// on the link between them (concurrent transfers split its bandwidth, so
// transfer queueing shows in the first TBT), and on arrival the decode
// group's scheduler takes it with rg_sched_add_imported. Links are
// processor-shared: n flows on a link each get 1/n of its bandwidth.
//
// KV is tracked by sched per replica: the device pool (what the attention
// group's memory holds after weights and activations), a swap tier (host
// DRAM of its nodes, with preemption by swap), and a capacity tier for idle
// cached blocks (host DRAM or SSD; golden-time retention: blocks idle past
// retention_s move down, a returning session reloads them). Preemption,
// prefix-cache hits, evictions, offloads and reloads are sched's decisions;
// their copies take time on the links.
//
// Requests come from a trace: drawn from a workload's distributions
// (Poisson or gamma arrivals), or read from the Azure LLM inference trace
// (CSV: TIMESTAMP,ContextTokens,GeneratedTokens) or Mooncake's (JSONL:
// timestamp in ms, input_length, output_length, hash_ids), or from agentic
// sessions generated as the simulation runs (session -> requests -> steps,
// tool latency, a person's think time with a long tail, each step's prompt
// the session so far). Token ids are synthetic but consistent: shared hash
// ids, a shared prefix, or a session's history give identical tokens, so
// sched's prefix cache finds them.
//
// Step times are memoized per (pool, group, phase, batch, new tokens,
// context bucket): contexts and chunk lengths above 64 tokens fall in
// buckets 1/32 of an octave wide (about 2.2%) and the time is interpolated
// linearly between bucket edges, so a memoized step differs from the exact
// cost model by under 1% (0.6% at worst over a test's 6,000 steps;
// exact_costs turns the memo off).
//
// Deterministic: the same inputs and seed give the same figures on every
// machine (only wall_seconds differs).
//
// Ownership: rg_simulate returns a report the caller destroys; traces from
// the readers are freed with rg_sim_trace_free. Everything passed in is
// borrowed for the call. Not thread-safe within one simulation; separate
// simulations may run on separate threads.
#ifndef RG_PLANNER_SIMULATE_H
#define RG_PLANNER_SIMULATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "planner/planner.h"
#include "planner/workload_gen.h"
#include "sched/sched.h"

// ----- Requests -------------------------------------------------------------------

typedef struct {
  double arrival;          // seconds from the start of the trace (the first is 0)
  int64_t prompt, output;  // tokens, both >= 1
  // Leading prompt tokens every request with shared > 0 has in common (a
  // system prompt; generated workloads' prefix caches).
  int64_t shared;
  // Mooncake: prompt blocks named by hash id, hash_block tokens each; equal
  // ids at the same place mean equal prefixes. n_hash 0: none.
  uint32_t n_hash;
  uint64_t hash_at;  // index of the first in the trace's hash pool
} rg_sim_request_t;

#define RG_SIM_TRACE_MAP(X)                                                  \
  X(RG_SIM_TRACE_AZURE, "azure")       /* CSV: TIMESTAMP,ContextTokens,...*/ \
  X(RG_SIM_TRACE_MOONCAKE, "mooncake") /* JSONL with hash_ids */

typedef enum {
#define RG_X_(e, n) e,
  RG_SIM_TRACE_MAP(RG_X_)
#undef RG_X_
      RG_SIM_TRACE_COUNT
} rg_sim_trace_format_t;

const char *rg_sim_trace_format_name(rg_sim_trace_format_t f);  // "?" when out of range
RG_MUST_USE rg_status_t rg_sim_trace_format_parse(const char *word, rg_sim_trace_format_t *out);

// Mooncake's traces name blocks of 512 tokens.
#define RG_SIM_MOONCAKE_BLOCK 512

typedef struct {
  char name[512];          // where the requests came from: a path, or "workload NAME"
  rg_sim_request_t *reqs;  // (n) in arrival order
  size_t n;
  uint64_t *hashes;  // (n_hashes)
  size_t n_hashes;
  int32_t hash_block;  // tokens per hash id
  // Rows whose generated tokens were 0 (the Azure traces have a few), run
  // as 1 since every request yields at least its first token.
  int64_t n_zero_output;
} rg_sim_trace_t;

// Reads a trace file (a regular file or a link to one; a FIFO or device is
// refused). Every malformed line is an error naming the file, the line and
// the field: "PATH:LINE: ContextTokens: 'x1' is not a whole number of
// tokens". A header without the Azure columns, a last line cut short ("the
// file may be truncated"), or a file without requests is refused too.
// Requests are put in arrival order (stable) and shifted to start at 0.
RG_MUST_USE rg_status_t rg_sim_trace_read(const char *path, rg_sim_trace_format_t fmt,
                                          rg_sim_trace_t *out);
// The same over bytes in memory, `name` standing for the path in messages.
RG_MUST_USE rg_status_t rg_sim_trace_parse(const char *name, const char *data, size_t len,
                                           rg_sim_trace_format_t fmt, rg_sim_trace_t *out);
// n requests drawn from the workload's distributions (planner/workload_gen.h)
// with the arrival process given; max_context > 0 caps prompt + output. A
// workload's shared prefix or prefix hit rate becomes each request's
// `shared` tokens.
RG_MUST_USE rg_status_t rg_sim_trace_generate(const rg_workload_t *w, size_t n, uint64_t seed,
                                              const rg_arrival_t *arrival, int64_t max_context,
                                              rg_sim_trace_t *out);
void rg_sim_trace_free(rg_sim_trace_t *t);

// ----- Agentic sessions -----------------------------------------------------------

// A session is a person working with an agent: requests (the person's
// turns), each a run of LLM steps driven by tool results. Every step's
// prompt is the whole session so far plus what the step appends; its output
// joins the session. Between steps a tool runs (exponential, mean
// tool_latency); between requests the person thinks (lognormal with a long
// tail, mean think_time). Counts are geometric with the means given.
typedef struct {
  double rate;               // new sessions per second (> 0)
  double requests;           // per session, mean (>= 1)
  double steps_per_request;  // LLM steps per request, mean (>= 1)
  double prefix_tokens;      // mean context a step re-reads
  double append_tokens;      // mean tokens a step appends (lognormal, sigma 0.5)
  double output_tokens;      // mean tokens a step generates (lognormal, sigma 0.5)
  double think_time;         // seconds, mean
  double think_sigma;        // lognormal sigma of the think time
  double tool_latency;       // seconds, mean
} rg_sim_sessions_t;

// The digest's agentic shape from a workload's `session:` block (its
// figures as given: 62.6-minute sessions of 9.2 requests of ~7.8 steps,
// ~119K-token prefixes, ~875 appended and ~214 out per step, 92% of the
// time waiting for a person), at the workload's step rate: sessions/s =
// rate / (requests x steps). The think time follows from the wait
// fraction: wait x duration / (requests - 1). Tool latency (2 s) and the
// think time's sigma (1.5) are assumptions the digest does not give. A
// workload without sessions gets the same defaults.
void rg_sim_sessions_from_workload(const rg_workload_t *w, rg_sim_sessions_t *out);

// ----- Options --------------------------------------------------------------------

typedef struct {
  double sim_time;                        // seconds simulated so far
  double end_time;                        // the expected end (arrivals' end), for a fraction
  int64_t requests_done, requests_total;  // total: 0 when unknown (sessions)
  int64_t iterations;
  double wall_seconds;
} rg_sim_progress_t;

// One iteration of one replica, for callers that cost steps their own way
// (the fidelity benchmark costs every stage). batch is sched's, borrowed for
// the call.
typedef struct {
  int pool, replica;
  int prefill_side;  // 1: the prefill group of a prefill-decode replica
  const rg_sched_batch_t *batch;
  double start, end;  // seconds; copies included
  double step;        // the forward step alone, as costed
} rg_sim_step_t;

typedef struct {
  // What arrives: a trace (borrowed), or agentic sessions (borrowed), one.
  const rg_sim_trace_t *trace;
  const rg_sim_sessions_t *sessions;
  // Seconds of arrivals: later requests or sessions are not started (those
  // started run to the end). 0: the whole trace; sessions need it.
  double duration;
  uint64_t seed;   // routing ties and session draws
  int block_size;  // sched's tokens per KV block; 0: 16
  // RECOMPUTE (the default) or SWAP: a preempted request's KV goes to the
  // host DRAM of its replica's nodes.
  rg_sched_preempt_t preempt;
  // -1: on when requests share prefixes (sessions, a shared prefix or hit
  // rate, hash ids); 0 off; 1 on.
  int prefix_cache;
  // The capacity tier for idle cached KV: a tier class (host-dram, nvme-ssd)
  // on the attention group's nodes. NULL: the plan's choice for sessions
  // (its kv_offload), none otherwise. no_tier: none, whatever the plan says
  // (an evicted prefix is lost and recomputed).
  const rg_device_class_t *tier;
  int no_tier;
  // Seconds a cached block stays on the device idle before it moves to the
  // tier (golden time); -1: the workload's session retention, else 0 (move
  // blocks only when the device needs the room).
  double retention_s;
  int max_seqs;  // sequences per replica; 0: the placement's batch
  // The device KV pool per replica in tokens; 0: what the attention group's
  // memory holds after weights and activations. For matching a runtime
  // whose engine was given its own pool size.
  int64_t kv_tokens;
  int exact_costs;  // 1: call the cost model for every step (no memo)
  double sample_s;  // KV occupancy sampling interval; 0: the run / 256
  int check;        // 1: verify sched's invariants as it goes (tests)
  // Called every 2^16 events and at the end.
  void (*progress)(void *ctx, const rg_sim_progress_t *p);
  void *progress_ctx;
  void (*on_step)(void *ctx, const rg_sim_step_t *s);
  void *step_ctx;
} rg_sim_options_t;

// ----- The report -----------------------------------------------------------------

typedef struct {
  double p50, p90, p99, mean;
  int64_t n;
} rg_sim_pct_t;

// KV held, in bytes, summed over every replica at one moment.
typedef struct {
  double t;
  double device_used, device_cached;  // device pool: in block tables, and cached (refcount 0)
  double swap;                        // swap tier (preempted requests)
  double tier;                        // capacity tier (idle cached blocks)
} rg_sim_kv_sample_t;

typedef struct {
  char label[96];  // "pool 1: prefill-decode: decode 4 x h100-sxm | prefill 8 x h100-sxm"
  rg_mode_t mode;
  int replicas, devices;  // devices over all its replicas
  int64_t requests, output_tokens, iterations;
  double tokens_per_s;
  double mean_batch;    // entries per iteration
  double busy;          // share of the makespan its replicas were busy (mean)
  double prefill_busy;  // prefill-decode: the prefill groups' share
  int64_t kv_blocks;    // per replica: device pool (sched's n_blocks)
  int64_t swap_blocks, tier_blocks, prefill_kv_blocks;
  int max_seqs;
  // What rg_placement_predict said for this pool (at the plan's load).
  double pred_tokens_per_s, pred_ttft_p50, pred_ttft_p99, pred_tbt_p50, pred_tbt_p99;
} rg_sim_pool_report_t;

typedef struct {
  char source[512];  // the trace's name, or "sessions"
  // Requests: started, finished, refused by sched (never runnable, the
  // first reason kept), and left unfinished (none unless something broke).
  int64_t requests, finished, refused, unfinished;
  char refused_reason[256];
  int64_t prompt_tokens, output_tokens;
  int64_t prefill_tokens;  // computed (prefix hits excluded, recomputes included)
  int64_t iterations;
  double first_arrival, makespan;  // seconds: first arrival to last token
  double wall_seconds;             // how long the simulation took
  int64_t events;
  // Latency: TTFT (arrival to first token), TBT (between consecutive
  // tokens of a request), end to end (arrival to last token), TPOT (a
  // request's mean TBT).
  rg_sim_pct_t ttft, tbt, e2e, tpot;
  // SLOs of the workload (0: none) and the requests meeting them: TTFT <=
  // slo_ttft and TPOT <= slo_tbt. Goodput counts only those.
  double slo_ttft, slo_tbt, slo_percentile;
  double slo_attainment;            // share of finished requests meeting both
  double goodput_rps, goodput_tps;  // requests/s and their output tokens/s
  int meets_slo;                    // TTFT and TBT at the SLO percentile within the SLOs
  double ttft_at_slo, tbt_at_slo;   // those percentiles
  // Throughput and what it costs.
  int devices;
  double tokens_per_s, tokens_per_s_per_device;
  double cost_per_s, power;  // dollars/s and watts of the plan's devices
  double tokens_per_dollar, tokens_per_watt;
  // Scheduler: preemptions, prefix cache (hit rate = hit / lookup tokens),
  // blocks moved.
  int64_t preempt_recompute, preempt_swap;
  int64_t prefix_lookup_tokens, prefix_hit_tokens, tier_hit_tokens;
  double prefix_hit_rate;
  int64_t blocks_evicted, blocks_swapped_out, blocks_swapped_in;
  int64_t blocks_offloaded, blocks_reloaded, blocks_dropped;
  int prefix_cache;
  rg_sched_preempt_t preempt;
  // Links: bytes each kind of move put on them, and prefill-decode KV
  // transfers' durations (queueing on a shared link shows here).
  double kv_transfer_bytes, activation_bytes, swap_bytes, tier_bytes;
  rg_sim_pct_t kv_transfer_s;
  // KV capacity (bytes over all replicas) and occupancy over time.
  double kv_block_bytes;  // one block, all layers
  double kv_device_capacity, kv_swap_capacity, kv_tier_capacity;
  // The tier's size on the nodes; the simulation models kv_tier_capacity
  // of it (at most 2^21 blocks over the run: more than idle prefixes fill).
  double kv_tier_available;
  double kv_device_per_device;  // the KV pool one device of an attention group holds
  rg_sim_kv_sample_t *kv;       // (n_kv), malloc'd
  size_t n_kv;
  double kv_device_peak, kv_tier_peak;
  // Golden-time retention: what the capacity tier cost (bytes moved, time
  // on the links) and saved (prefill tokens its hits skipped, and the
  // prefill time those would have taken on the plan's first pool).
  const char *tier_name;  // NULL: none
  double retention_s;
  double tier_link_seconds, saved_prefill_seconds;
  // Sessions only.
  // Started; ended (their last request done, or the context full); cut by
  // the end of the run. Means over those that ended.
  int64_t sessions, sessions_finished, sessions_context_full, sessions_cut;
  double session_mean_s, session_wait_share;
  int n_pools;
  rg_sim_pool_report_t pools[RG_MAX_POOLS];
} rg_sim_report_t;

// Simulates `plan` (its pools and replicas; borrowed) for the model, fleet
// and workload of req. Errors: a plan with nothing to run, a replica whose
// devices hold no KV block, preemption by swap without host DRAM on the
// nodes, a tier class missing from the nodes, options out of range — each
// naming what and by how much.
RG_MUST_USE rg_status_t rg_simulate(const rg_plan_request_t *req, const rg_plan_option_t *plan,
                                    const rg_sim_options_t *o, rg_sim_report_t **out);
void rg_sim_report_destroy(rg_sim_report_t *r);

// The forward step of a sched batch on group `group` of placement p (not
// attention-FFN, whose steps also wait on a link), costed as the simulator
// costs it, without the memo: decodes and prefill chunks from the cost
// model, a step carrying both counted as decode step + prefill step - a
// one-token step (the weight reads and fixed costs they share). Chunks use
// phase `prefill_phase` (PREFILL, or DECODE for a prefill-decode decode
// group recomputing a preempted prompt).
RG_MUST_USE rg_status_t rg_sim_batch_seconds(const rg_plan_request_t *req, const rg_placement_t *p,
                                             int group, rg_phase_t prefill_phase,
                                             const rg_sched_batch_t *b, double *out);

// KV occupancy per tier over time (SVG): device used, device cached, swap
// tier and capacity tier, with each capacity as a dashed line.
RG_MUST_USE rg_status_t rg_sim_write_kv_svg(const rg_sim_report_t *r, const char *title, FILE *f);

// The throughput-interactivity frontier by simulation: for each placement
// kind of the plan (every feasible homogeneous baseline, prefill-decode,
// attention-FFN, and the chosen plan's first pool), one replica is
// simulated at sequence caps 1, 2, 4, ... (as long as memory holds them)
// under a queue that keeps it full (requests from the workload, all
// arriving at once): tokens/s per user (1 / median TBT) against tokens/s
// per device. `base` supplies the simulation options (its trace and
// sessions are ignored). The chosen plan's curve is last.
RG_MUST_USE rg_status_t rg_sim_pareto(const rg_plan_request_t *req, const rg_plan_t *plan,
                                      const rg_sim_options_t *base,
                                      rg_pareto_curve_t curves[RG_PARETO_KINDS], int *n_curves);
RG_MUST_USE rg_status_t rg_sim_write_pareto_svg(const rg_pareto_curve_t *curves, int n_curves,
                                                const char *title, FILE *f);

#endif  // RG_PLANNER_SIMULATE_H
