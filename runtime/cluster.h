// runtime/cluster.h — the dataflow runtime: a model's stage instances on
// worker processes, one per device, linked by libfabric, driven by a
// coordinator that runs the scheduler for the whole pipeline.
//
//   coordinator (rg_cluster_t, in `ridge run --plan`)
//   ├─ control plane (runtime/control.h): workers join with the shared
//   │  secret, get their Assign (model, stage instances, KV pool), answer
//   │  Ready, get the PeerTable (everyone's fabric address), heartbeat
//   └─ data plane (runtime/transport.h), per forward step:
//        coordinator ── STEP (the step's tokens, positions, block tables,
//                       per micro-batch) ──────────────────────> every worker
//        worker ─── hidden states (T, d) ───> the worker of the next hop
//        lm_head's worker ── logits ────────> coordinator
//        every worker ── DONE (status, per-stage counters, link bytes,
//                         trace events) ───> coordinator
//
// The hops of a step are the same on every worker, derived from the layout
// (rg_cluster_layout_hops): embed, then for each layer its attention
// instance and its feed-forward instances (an expert split runs its
// instances one after the other, each adding its experts into the residual,
// the normed input travelling with it), then lm_head. A worker receives the
// hidden states before its hop when the previous hop ran elsewhere, and
// sends them on after it when the next one runs elsewhere. With two
// micro-batches a worker interleaves their hops: while one waits for its
// hidden states the other computes (ping-pong), so both sides of an
// attention-FFN split stay busy.
//
// Sampling stays with the coordinator (each request's own sampler), so a
// run gives the same tokens as the single-process engine: bit-identical
// logits for greedy f32 with the same kernels.
//
// Every wait has a deadline. A worker that stops answering fails the step
// with an error naming the worker, its device and the hop it owed; the
// coordinator's control plane also declares it lost when its heartbeats
// stop. A worker that joins again under the same name is assigned its
// stages again and later steps use it.
//
// Ownership: rg_cluster_create returns a coordinator the caller destroys
// (which stops the workers it started); strings in options are copied.
#ifndef RG_RUNTIME_CLUSTER_H
#define RG_RUNTIME_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "runtime/control.h"
#include "runtime/engine.h"
#include "runtime/serve.h"

#define RG_CLUSTER_MAX_WORKERS 8
#define RG_CLUSTER_MAX_STAGES 16
#define RG_CLUSTER_MAX_EXPERTS 256

// What a worker does in the pipeline. A layout either runs one pipeline
// (every worker ALL) or disaggregates prefill and decode: the PREFILL
// workers' stages cover the model once and prefill prompts into their own
// KV, the DECODE workers' stages cover it once more and decode, and each
// prompt's KV moves from the prefill pipeline's pool into the decode one's
// by RMA write. A TIER worker holds no stages: it keeps idle sessions' KV in
// its memory (a capacity tier standing in for host DRAM or SSD).
typedef enum {
  RG_CLUSTER_ROLE_ALL,
  RG_CLUSTER_ROLE_PREFILL,
  RG_CLUSTER_ROLE_DECODE,
  RG_CLUSTER_ROLE_TIER
} rg_cluster_role_t;
const char *rg_cluster_role_name(rg_cluster_role_t r);

// One worker: the device it runs on, what it stands in for, its stages.
typedef struct {
  char name[48];    // unique: "w1-ffn"
  char device[32];  // "cpu:0", "opencl:0"
  char plays[64];   // the device class it stands in for ("h100-sxm"), or "" = its own
  rg_cluster_role_t role;
  int64_t block_size;   // tokens per KV block of its attention stages; 0: the run's
  int64_t tier_tokens;  // TIER: tokens of KV it holds
  rg_stage_spec_t stages[RG_CLUSTER_MAX_STAGES];
  int n_stages;
  // Storage for the stages' expert subsets (their `experts` point here).
  int32_t experts[RG_CLUSTER_MAX_EXPERTS];
  size_t n_experts_used;
} rg_cluster_worker_t;

typedef struct {
  rg_cluster_worker_t workers[RG_CLUSTER_MAX_WORKERS];
  int n_workers;
  int micro_batches;  // 1, or 2 for ping-pong
} rg_cluster_layout_t;

// Layouts for the placements DESIGN.md names, on the given devices:
//   colocated: every stage on workers[0]
//   attention-ffn: embed, attention, lm_head (and the KV) on dev_a; ffn/moe on dev_b
//   experts: an MoE model's experts split in halves between dev_a (with everything
//            else) and dev_b
//   pipeline: layers [0, L/2) with embed on dev_a, [L/2, L) with lm_head on dev_b
RG_MUST_USE rg_status_t rg_cluster_layout_colocated(const rg_arch_t *a, const char *dev,
                                                    rg_cluster_layout_t *out);
RG_MUST_USE rg_status_t rg_cluster_layout_afd(const rg_arch_t *a, const char *dev_a,
                                              const char *dev_b, int micro_batches,
                                              rg_cluster_layout_t *out);
RG_MUST_USE rg_status_t rg_cluster_layout_experts(const rg_arch_t *a, const char *dev_a,
                                                  const char *dev_b, rg_cluster_layout_t *out);
RG_MUST_USE rg_status_t rg_cluster_layout_pipeline(const rg_arch_t *a, const char *dev_a,
                                                   const char *dev_b, rg_cluster_layout_t *out);
//   prefill-decode: every stage on dev_p for prompts (KV blocks of block_p
//            tokens) and every stage on dev_d for decoding (blocks of
//            block_d; 0: the run's block size for either)
RG_MUST_USE rg_status_t rg_cluster_layout_pd(const rg_arch_t *a, const char *dev_p,
                                             const char *dev_d, int64_t block_p, int64_t block_d,
                                             rg_cluster_layout_t *out);
// Adds a capacity-tier worker on dev holding tier_tokens tokens of KV.
RG_MUST_USE rg_status_t rg_cluster_layout_add_tier(rg_cluster_layout_t *l, const char *dev,
                                                   int64_t tier_tokens);
// 1 when the layout disaggregates prefill and decode.
int rg_cluster_layout_is_pd(const rg_cluster_layout_t *l);
// Adds a stage to a worker, copying its expert subset.
RG_MUST_USE rg_status_t rg_cluster_worker_add(rg_cluster_worker_t *w, const rg_stage_spec_t *spec);

// One hop of a step: which worker runs which of its stages, on which layer.
typedef struct {
  int worker, stage;
  rg_stage_kind_t kind;
  int64_t layer;  // -1 for embed and lm_head
  int continues;  // an moe instance after another on the same layer (takes its normed input)
} rg_cluster_hop_t;

#define RG_CLUSTER_MAX_HOPS 4096

// The hops of a step through the workers of one role (ALL, or PREFILL or
// DECODE in a prefill-decode layout), checking that they cover the model
// exactly once: one embed and one lm_head, one attention per layer, one ffn
// per dense layer, and moe instances whose experts partition the experts of
// each MoE layer. Errors name what is missing or doubled, and a layout that
// mixes ALL workers with PREFILL or DECODE ones.
RG_MUST_USE rg_status_t rg_cluster_layout_hops(const rg_arch_t *a, const rg_cluster_layout_t *l,
                                               rg_cluster_role_t role, rg_cluster_hop_t *out,
                                               size_t cap, size_t *n);

typedef struct {
  const char *model_path;
  rg_cluster_layout_t layout;
  // KV pool, context, sequences, threads, ISA, load mode as for the engine
  // (device fields are the layout's).
  rg_engine_options_t engine;
  const char *provider;      // libfabric provider(s); NULL: $FI_PROVIDER, else shm then tcp;ofi_rxm
  const char *bind_host;     // control plane; NULL: 127.0.0.1
  int port;                  // 0: ephemeral
  int launch;                // 1: start one `ridge worker` process per worker of the layout
  const char *ridge_binary;  // for launch; NULL: this executable
  const rg_control_secret_t *secret;  // required unless launch (then generated)
  double join_timeout_s;              // 0 = 30: for every worker to join and load
  double step_timeout_s;              // 0 = 10: for every worker to finish a step
  const char *trace_path;  // a Chrome trace of every worker's stages and transfers, or NULL
  int quiet;               // no progress lines on stderr
} rg_cluster_options_t;

typedef struct rg_cluster_s rg_cluster_t;

RG_MUST_USE rg_status_t rg_cluster_create(const rg_cluster_options_t *o, rg_cluster_t **out);
// Shuts the workers down (and reaps those it started); writes the trace.
void rg_cluster_destroy(rg_cluster_t *c);

const rg_arch_t *rg_cluster_arch(const rg_cluster_t *c);
const rg_tokenizer_t *rg_cluster_tokenizer(const rg_cluster_t *c);
int rg_cluster_port(const rg_cluster_t *c);
// The executor for rg_serve_on.
rg_executor_t rg_cluster_executor(rg_cluster_t *c);
RG_MUST_USE rg_status_t rg_cluster_forward(rg_cluster_t *c, const rg_step_entry_t *entries,
                                           size_t n, float *logits);

// What each stage instance and each link did, for measured-vs-predicted.
typedef struct {
  char stage[96];   // "ffn[0,2) on cpu:0"
  char worker[48];  // its worker's name
  char plays[64];
  rg_stage_kind_t kind;
  rg_stage_counters_t c;
} rg_cluster_stage_info_t;
typedef struct {
  char from[48], to[48];
  double bytes, seconds;  // sent, and the time sends were in flight
  int64_t messages;
  int kv;  // KV pages moved by RMA (prefill-decode); seconds: post to checked notice
} rg_cluster_link_info_t;
size_t rg_cluster_stage_count(const rg_cluster_t *c);
void rg_cluster_stage_info(const rg_cluster_t *c, size_t i, rg_cluster_stage_info_t *out);
size_t rg_cluster_link_count(const rg_cluster_t *c);
void rg_cluster_link_info(const rg_cluster_t *c, size_t i, rg_cluster_link_info_t *out);

// ---- The worker side ---------------------------------------------------------------

typedef struct {
  const char *coordinator;  // "HOST:PORT"
  const char *device;       // NULL: "cpu:0"
  const char *name;         // NULL: HOST-PID
  const rg_control_secret_t *secret;
  const char *provider;      // NULL: $FI_PROVIDER, else the default order
  int threads, isa;          // CPU device settings
  double connect_timeout_s;  // 0 = 30
  int quiet;
  volatile int *stop;  // optional: set (by a signal handler) to leave between steps
} rg_worker_options_t;

// Joins the coordinator, loads what it is assigned, and runs steps until
// told to shut down (OK) or the coordinator is lost (an error naming it).
RG_MUST_USE rg_status_t rg_worker_run(const rg_worker_options_t *o);

#endif  // RG_RUNTIME_CLUSTER_H
