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
#include "devices/devices.h"
#include "planner/planner.h"
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
  // 0 = 10: the floor of every step's deadline (below), and the deadline of
  // transfers and control waits outside steps.
  double step_timeout_s;
  const char *trace_path;  // a Chrome trace of every worker's stages and transfers, or NULL
  int quiet;               // no progress lines on stderr
  // Most segments one KV transfer carries (0 = RG_TRANSPORT_MAX_SEGMENTS): a
  // long prompt's pages move as several transfers, cut between position
  // runs and layers. Tests set it small to exercise the cutting.
  int xfer_max_segments;
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

// ---- Step deadlines -----------------------------------------------------------------
//
// Every wait of a step (a worker's receive of its hidden states, the
// decode side's wait for imported KV pages, the coordinator's wait for the
// step's reports) ends at the step's deadline. A fixed one fails long steps
// on a slow or loaded machine (a 512-token prefill chunk at 8K context takes
// seconds on one core) and waits long on short ones, so it grows with the
// step: RG_CLUSTER_DEADLINE_FACTOR times the time the step is predicted to
// take, where that is more than the configured step_timeout_s, which stays
// the floor. The prediction is this run's own: the step's FLOPs and bytes
// (rg_stage_costs_batch, the formulas the planner's predictions use) at the
// best pace the pipeline's earlier steps have shown for each, so it follows
// this machine and not the class a plan assumed. The coordinator sends each
// step's deadline with it; a missed one says which deadline it was and where
// it came from (rg_cluster_deadline_describe).
#define RG_CLUSTER_DEADLINE_FACTOR 20.0

typedef struct {
  double s_per_flop, s_per_byte;  // best pace seen; 0: not measured yet
  int64_t steps;
} rg_cluster_pace_t;

// Adds a finished step: its cost and the seconds it took.
void rg_cluster_pace_add(rg_cluster_pace_t *p, double flops, double bytes, double seconds);
// Seconds a step of this cost should take at the best pace seen (0: nothing
// to go on yet).
double rg_cluster_pace_predict(const rg_cluster_pace_t *p, double flops, double bytes);

typedef struct {
  double seconds;      // the deadline
  double floor_s;      // the configured one
  double predicted_s;  // the step's predicted time; 0: none
  int scaled;          // 1: FACTOR x predicted_s, above the floor
} rg_cluster_deadline_t;

rg_cluster_deadline_t rg_cluster_step_deadline(double floor_s, double predicted_s);
// Where the deadline came from, as a clause for error messages: "the step
// deadline: 20 x the 0.62 s this step is predicted to take ..., above the
// configured 10 s".
const char *rg_cluster_deadline_describe(const rg_cluster_deadline_t *d, char *buf, size_t len);

// ---- KV transfers that failed on their sender ----------------------------------------
//
// A transfer order (prefill-decode's imports, a capacity tier's reloads)
// that fails on the worker told to carry it out (a bad order, a write the
// transport or the peer refuses, a write past its deadline) travels back to
// the coordinator over the control plane (an Error with its TransferFault),
// also from a --quiet worker. The pages' receiver only sees them not come
// and its request is recomputed there, as for a page corrupted in transit;
// the coordinator keeps the sender's word, naming the worker, the stage and
// the bytes, and prints it unless quiet. Reloads carry
// RG_CLUSTER_KEY_RELOAD as their request.
#define RG_CLUSTER_KEY_RELOAD UINT64_MAX
typedef struct {
  uint64_t request;   // the executor's key (serve: the request's index)
  uint64_t transfer;  // the transfer's id; 0 when the order could not be read
  char worker[48];    // the sender
  char to[48];        // the receiver; "" when unknown
  char stage[160];    // what was moving
  uint64_t bytes;
  rg_code_t code;
  char error[512];  // the sender's error
  // The whole sentence, as the coordinator prints it: "request 0: KV
  // transfer 1 from w0-prefill (cpu:0) failed: KV pages of request 0, ...
  // (40960 bytes) for w1-decode: ...".
  char message[1024];
} rg_cluster_kv_fault_t;

size_t rg_cluster_kv_fault_count(const rg_cluster_t *c);
// Borrowed; valid until the next call into c.
const rg_cluster_kv_fault_t *rg_cluster_kv_fault(const rg_cluster_t *c, size_t i);

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
  int batch_invariant;       // CPU: batch-invariant kernels (rg_engine_options_t)
  double connect_timeout_s;  // 0 = 30
  int quiet;
  volatile int *stop;  // optional: set (by a signal handler) to leave between steps
} rg_worker_options_t;

// Joins the coordinator, loads what it is assigned, and runs steps until
// told to shut down (OK) or the coordinator is lost (an error naming it).
RG_MUST_USE rg_status_t rg_worker_run(const rg_worker_options_t *o);

// ---- A plan on this machine's devices ---------------------------------------------
//
// `ridge run --plan` runs one pool of a plan (planner/planner.h) here. The
// plan places stages on device classes this machine does not have (an
// H100, a Bertha 500), so each group of the pool becomes one worker on a
// device of this machine standing in for its class: the fleet entry of the
// group's class names them in `run_on:` ("cpu:0", "[opencl:0, cpu:0]"), and
// the first of those present here runs it. The worker's `plays` is the
// class, so every report says "cpu:0 standing in for h100-sxm".
//
//   colocated       -> rg_cluster_layout_colocated on the group's device
//   attention-ffn   -> rg_cluster_layout_afd (attention group, ffn group,
//                      the pool's micro-batches; an MoE model's experts all
//                      on the ffn worker; embed and lm_head where the pool
//                      puts them)
//   prefill-decode  -> rg_cluster_layout_pd (prefill group, decode group)
//   kv_offload tier -> rg_cluster_layout_add_tier on the offload class's
//                      device, holding what fits of the KV (below)
//
// One device runs each group and one replica runs the pool: a plan whose
// groups are wider (tp, pp or dp above 1) or whose pool has replicas is
// refused, naming the figures of the plan that would then not be what runs.
// The plan's predictions stay those of its classes; the run measures what
// this machine does.

// A plan file read with what it names (catalog, fleet, model, workload) and
// its pools evaluated as the planner evaluates them, so the plan's
// predictions can be printed beside what runs. Owned: rg_cluster_plan_destroy.
typedef struct {
  char path[1024];
  rg_catalog_t *catalog;
  rg_fleet_t *fleet;
  rg_arch_t *model;         // the model the plan was made for (the planner's view)
  rg_arch_t *draft;         // a speculative workload's draft, or NULL
  rg_workload_t *workload;  // the one the plan names, or workload_default
  rg_workload_t workload_default;
  rg_plan_request_t *req;
  rg_plan_t *plan;  // plan->chosen.pools and .pred: the file's pools, predicted
  rg_placement_meta_t meta;
  // The plan names its model by something other than the weights that run
  // (a configs/models name): its predictions are for that model.
  char model_note[320];
} rg_cluster_plan_t;

// Reads the placement file at path (as `ridge plan -o` writes, or by hand)
// against config_dir, for the weights at run_model (a Hugging Face
// directory or GGUF file). The file must name its fleet; a model it names
// by directory must be run_model.
RG_MUST_USE rg_status_t rg_cluster_plan_load(const char *path, const char *config_dir,
                                             const char *run_model, rg_cluster_plan_t **out);
void rg_cluster_plan_destroy(rg_cluster_plan_t *p);

typedef struct {
  const rg_arch_t *arch;       // the model that runs (its layers and experts)
  const rg_fleet_t *fleet;     // the plan's fleet, whose entries say run_on
  const rg_placement_t *pool;  // the pool to run
  int pool_index;              // from 0, for messages ("pool 1")
  // This machine's devices. NULL: rg_devices_list, and a listed device
  // counts as present only once it also opens, since a backend may list
  // devices it cannot run on yet. Tests pass a list to fake what is here.
  const rg_device_info_t *devices;
  size_t n_devices;
  // The run's KV, to size a capacity tier: its dtype and the attention
  // pool's tokens (0: 16 sequences x 4096).
  rg_dtype_t kv_dtype;
  int64_t kv_tokens;
} rg_cluster_plan_options_t;

// A capacity tier holds what fits in this share of its device's memory,
// and at most this many times the attention pool's KV: idle sessions' KV
// past a few pools' worth is more than a run on one machine brings back.
#define RG_CLUSTER_TIER_MEMORY_SHARE 0.25
#define RG_CLUSTER_TIER_POOLS 4

// How one group (or the tier) of the pool was bound.
typedef struct {
  char group[16];    // the plan's group name; "kv tier" for the tier
  char cls[64];      // the class it runs on in the plan
  char device[32];   // where it runs here
  int worker;        // its worker in the layout
  char passed[512];  // run_on devices tried before it and why each was passed over; "" none
  char run_on_where[160];
} rg_cluster_plan_group_t;

typedef struct {
  rg_cluster_layout_t layout;
  rg_cluster_plan_group_t groups[RG_MAX_GROUPS + 1];
  int n_groups;
  int64_t tier_tokens;  // 0: no tier
  // What of the plan does not run as planned (a draft model), one line each.
  char notes[3][256];
  int n_notes;
} rg_cluster_plan_binding_t;

// Binds one pool to this machine's devices (above). Errors: a class whose
// fleet entry has no run_on, none of a class's run_on devices present
// (each named with why it is not), groups wider than one device or several
// replicas, and stage maps the layouts cannot express.
RG_MUST_USE rg_status_t rg_cluster_layout_from_plan(const rg_cluster_plan_options_t *o,
                                                    rg_cluster_plan_binding_t *out);

#endif  // RG_RUNTIME_CLUSTER_H
