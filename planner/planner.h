// planner/planner.h — device classes, fleets, workloads, the roofline cost
// model and placement search.
//
// A device class is a roofline and a price (configs/devices/*.yaml), with the
// efficiencies real kernels reach and the fixed costs of a step and of a
// layer. A measured class (configs/devices/calibrated/NAME.yaml, written by
// `ridge profile`) overlays the datasheet one and is preferred when present.
// A fleet groups devices of classes into nodes joined by links. A workload
// gives prompt and output lengths, an arrival rate, SLOs at a percentile, and
// optionally sessions, a prefix cache and speculative decoding. The planner
// turns a model (graphs/) and a fleet into a plan: pools of identical
// replicas, each replica a placement of the model's stages on device groups
// with their parallelism (TP x PP x DP, experts over TP x DP), with predicted
// tokens/s, TTFT and TBT percentiles, tokens/$ and tokens/W, next to the
// baselines it beat.
//
// This module never touches a device. Ownership: *_load and rg_plan_* return
// objects the caller destroys; accessors return borrowed pointers. A fleet
// borrows its catalog's classes, so destroy the catalog last.
#ifndef RG_PLANNER_PLANNER_H
#define RG_PLANNER_PLANNER_H

#include <stddef.h>
#include <stdio.h>

#include "base/status.h"
#include "graphs/graphs.h"

// ----- Device classes --------------------------------------------------------

#define RG_DEVICE_KIND_MAP(X)           \
  X(RG_KIND_GPU, "gpu")                 \
  X(RG_KIND_LPU, "lpu")                 \
  X(RG_KIND_WAFER, "wafer")             \
  X(RG_KIND_LPDDR_CARD, "lpddr-card")   \
  X(RG_KIND_ACCELERATOR, "accelerator") \
  X(RG_KIND_CPU, "cpu")                 \
  X(RG_KIND_HOST_DRAM, "host-dram")     \
  X(RG_KIND_SSD, "ssd")

typedef enum {
#define RG_X_(e, n) e,
  RG_DEVICE_KIND_MAP(RG_X_)
#undef RG_X_
      RG_DEVICE_KIND_COUNT
} rg_device_kind_t;
const char *rg_device_kind_name(rg_device_kind_t k);

enum { RG_CLASS_FIRST_OPS = 32 };

typedef struct {
  char name[32];
  double bandwidth;  // bytes/s per direction
  double latency;    // seconds
} rg_link_t;         // bandwidth == 0: absent

typedef struct {
  char name[32];
  double capacity;   // bytes
  double bandwidth;  // bytes/s
} rg_mem_tier_t;

#define RG_MAX_MEM_TIERS 4

// Fraction of peak FLOP/s a matrix multiply reaches as a function of its M
// (the tokens it multiplies at once): points (m, eff) with m increasing,
// interpolated in log m and held flat past either end. Small-M matmuls run
// far below peak (too few tiles to fill the part), large ones approach what
// the kernel library reaches.
#define RG_EFF_POINTS 8
typedef struct {
  int n;
  struct {
    double m, eff;
  } pt[RG_EFF_POINTS];
} rg_eff_curve_t;

// A stage kind's own figures, measured on the device by `ridge profile`
// with the runtime's stage instances: each call of the stage (once a layer
// for attention and FFN, once a step for embed and lm_head) pays `call`
// seconds and `token` seconds per token it carries, in no kernel's
// roofline (thread-pool fork and join, kernel enqueue and wait, small ops
// such as norms and ropes); and its kernels reach `eff` times the class's
// efficiencies (0: 1). Measured figures make one stage's prediction agree
// with its time where one set of efficiencies for every kernel cannot.
// `first` is what the first call of a stage instance pays once more (first
// touches of its weights, activations and KV; the process-wide part, kernel
// builds, is the class's process_first): a run of a few dozen steps sees
// it, a steady state never does, so the cost model's step times leave it
// out and `ridge run` adds it once per stage instance.
// `cold` is what a call pays more when it starts after its worker waited
// for another worker's data (runtime/stage.h's cold calls): caches and
// clocks gone idle, a pool's threads asleep, a GPU or PoCL queue to wake.
// A stage on a worker of its own (attention-FFN disaggregation) pays it
// every layer; `ridge profile` measures it as a decode step after an idle
// gap against the same step back to back, per call of the stage.
// `by_tokens`, where present, replaces call + token x tokens: what a call
// pays beyond its roofline measured at a few token counts (`ridge profile`'s
// step shapes), linear between them and, past the last, growing by the last
// segment's cost per token. A line through small steps does not hold at a
// prefill chunk's: thread pools split a call only past some size, so the
// cost per token falls (the tiny test model's FFN: 2.5 us a token from 16
// to 64 tokens, 1.2 us from 64 to 256).
#define RG_STAGE_TOKEN_POINTS 8
typedef struct {
  double tokens, seconds;  // tokens per call; seconds per call beyond the roofline
} rg_stage_point_t;
typedef struct {
  double call;   // seconds per call
  double token;  // seconds per token per call
  double eff;    // multiplies the class's efficiencies; 0: 1
  double first;  // seconds, once per stage instance
  double cold;   // seconds more per call after an idle wait
  int n_points;  // by_tokens[0, n_points), tokens ascending; 0: call + token x tokens
  rg_stage_point_t by_tokens[RG_STAGE_TOKEN_POINTS];
} rg_stage_figures_t;
// What one call of `tokens` tokens pays beyond its roofline.
double rg_stage_call_seconds(const rg_stage_figures_t *f, double tokens);
#define RG_STAGE_SLOTS 4  // embed, attention, ffn, lm_head: the slots a stage kind maps to

typedef struct rg_device_class_s rg_device_class_t;
struct rg_device_class_s {
  char name[64];
  char description[160];
  char path[512];  // file it came from
  rg_device_kind_t kind;
  double peak[RG_DTYPE_COMPUTE_COUNT];  // dense FLOP/s per dtype; 0 = not supported
  rg_mem_tier_t mem[RG_MAX_MEM_TIERS];  // fastest first; mem[0] holds weights+KV
  int n_mem;
  double sram;   // bytes on chip
  double power;  // watts
  double price;  // dollars per second
  rg_link_t scale_up, scale_out, host;
  // What tuned kernels reach (`efficiency:`): compute by dtype and GEMM M
  // (a dtype without its own curve uses `all`), and the fraction of peak
  // bandwidth a streaming kernel reaches.
  rg_eff_curve_t eff_compute[RG_DTYPE_COMPUTE_COUNT];
  rg_eff_curve_t eff_compute_all;
  double eff_memory;
  // The weight stream's fraction of bandwidth by GEMM M, per dtype
  // (`efficiency: memory_by_m:`, written by `ridge profile`): a part's
  // batch-1 kernel and its batch kernels need not stream alike (on the CPU
  // the GEMV reads ~1.0 of bandwidth at M = 1, the AMX tiles 0.6-0.9 from
  // M = 5). A dtype without a curve streams at eff_memory at every M.
  rg_eff_curve_t eff_memory_m[RG_DTYPE_COMPUTE_COUNT];
  // Decode attention gathers paged KV blocks rather than streaming one
  // matrix, and reaches less of the bandwidth (0: as eff_memory).
  double eff_attention;
  // Decode attention's KV read rate over the bandwidth by context positions
  // (`efficiency.attention_by_context`): short contexts pay per head and
  // token what long ones spread (128 positions 0.73x the rate at 4096 on
  // this project's CPU). n = 0: eff_attention at every context.
  rg_eff_curve_t eff_attention_ctx;
  // Prefill attention's multiplies (QK^T and PV over a prompt, causal): their
  // FLOP rate over the class's bf16 peak (`efficiency.attention_compute`,
  // measured by `ridge profile`). A CPU's flash attention, with its softmax
  // between two small GEMMs per tile, runs at a fraction of its matmuls'
  // rate (0.2 of the vdpbf16ps peak on this project's Zen 4 against 0.75).
  // 0: as the matmuls (eff_compute at their rows).
  double eff_attention_compute;
  // Fraction of a link's bandwidth collectives (all-reduce, all-to-all)
  // reach (0: 1).
  double eff_link;
  // Routed experts run as grouped GEMMs behind a router, a permutation and
  // an un-permutation: the fraction of the dense kernels' efficiency they
  // keep (0: 1).
  double eff_experts;
  // Fixed costs (`overhead:`): one forward step (scheduling, sampling, the
  // launch of its kernel graph) and each layer (kernel launches and
  // synchronisation on GPUs; the pipeline hop through the fabric on
  // wafer-scale and LPU parts). They are paid on top of the roofline time,
  // so a step never takes less than step + layers x layer.
  double step_cost;    // seconds
  double layer_floor;  // seconds
  // What a fresh process pays once on this device before its stages' own
  // first calls (`overhead: first:`): kernel builds or module loads at the
  // first enqueue, the device's context. Shared by every stage the process
  // runs, so paid by its first stage, whichever kinds it runs; a stage's own
  // first touches are its `first` (rg_stage_figures_t).
  double process_first;  // seconds
  // The same by op kind (`overhead: first_by_op: { matmul: 60 ms, ... }`):
  // what the first op of each kind paid in the profile's first step, so a
  // process that runs some kinds only (a worker holding the FFN) is priced
  // at its own (rg_class_process_first). A kind whose kernels another kind
  // built first (programs shared by several ops) reads near zero.
  struct {
    char op[24];
    double seconds;
  } first_by_op[RG_CLASS_FIRST_OPS];
  int n_first_by_op;
  // Per stage kind (`stages:`, indexed by slot, embed to lm_head): what this
  // device's own kernels for that stage do beyond the class-wide roofline.
  // A datasheet class has none (all zero), and predicts as without them.
  rg_stage_figures_t stage[RG_STAGE_SLOTS];
  char eff_source[256], overhead_source[256], stage_source[256];
  // Calibration: figures measured on a real device replace the datasheet's.
  int calibrated;
  char calibration_path[512];
  char calibration_source[256];
  // The class as its datasheet file gives it, for side-by-side display. Set
  // only for classes in a catalog (NULL from rg_device_class_load).
  const rg_device_class_t *datasheet;
};

// True for classes that compute (not memory/storage tiers).
int rg_class_computes(const rg_device_class_t *c);
// Peak for a dtype, falling back to the nearest wider type the part has
// (fp4 -> fp8 -> bf16/f16 -> f32) since weight-only formats are upcast.
double rg_class_peak(const rg_device_class_t *c, rg_dtype_t t);
// Ridge point: peak / first-tier bandwidth, FLOP per byte.
double rg_class_ridge(const rg_device_class_t *c, rg_dtype_t t);
// Compute efficiency of a GEMM of M tokens in dtype t on class c.
double rg_class_eff_compute(const rg_device_class_t *c, rg_dtype_t t, double m);
// Fraction of bandwidth the weight stream of a GEMM of M tokens in dtype t
// reaches: its memory_by_m curve, else eff_memory.
double rg_class_eff_memory(const rg_device_class_t *c, rg_dtype_t t, double m);
double rg_eff_curve_at(const rg_eff_curve_t *curve, double m);
// Decode attention's efficiency at `context` positions: the curve where the
// class has one (log-interpolated, flat past its ends), else eff_attention,
// else eff_memory.
double rg_class_eff_attention(const rg_device_class_t *c, double context);
// What a fresh process pays once on class c when its stages run the op
// kinds `ops` (names as rg_op_name gives them; repeats count once): the sum
// of their first_by_op figures where the class has them (a kind it lists
// none for pays nothing), else process_first whatever the kinds (also when
// ops is NULL).
double rg_class_process_first(const rg_device_class_t *c, const char *const *ops, size_t n_ops);

typedef struct {
  rg_device_class_t **classes;
  size_t n;
  char dir[512];
  // Datasheet copies of calibrated classes (owned; classes[i]->datasheet
  // points into here).
  rg_device_class_t **sheets;
  size_t n_sheets;
} rg_catalog_t;

// Loads every configs/devices/*.yaml under config_dir, then overlays each
// configs/devices/calibrated/*.yaml on the class it names.
RG_MUST_USE rg_status_t rg_catalog_load(const char *config_dir, rg_catalog_t **out);
// Loads one class file (used by the catalog and by tests).
RG_MUST_USE rg_status_t rg_device_class_load(const char *path, rg_device_class_t **out);
// Applies a calibrated file to c (its name must match c's).
RG_MUST_USE rg_status_t rg_device_class_calibrate(rg_device_class_t *c, const char *path);
void rg_catalog_destroy(rg_catalog_t *cat);
const rg_device_class_t *rg_catalog_find(const rg_catalog_t *cat, const char *name);
// RG_NOT_FOUND listing the classes, with the nearest name suggested.
RG_MUST_USE rg_status_t rg_catalog_unknown(const rg_catalog_t *cat, const char *name,
                                           const rg_pos_t *pos);

// ----- Fleets ----------------------------------------------------------------

#define RG_MAX_NODE_DEVICES 8
#define RG_MAX_FLEET_NODES 32

// Devices a fleet entry may name in `run_on:`, and the longest name.
#define RG_MAX_RUN_ON 4
#define RG_RUN_ON_NAME 32

typedef struct {
  const rg_device_class_t *cls;  // borrowed from the catalog
  int count;                     // per node
  // Where `ridge run --plan` runs this class's stages on the machine it
  // runs on (`run_on:`): device names as `ridge devices` prints them
  // ("cpu:0", "opencl:0"; a bare driver means its device 0), tried in
  // order. n_run_on is 0 when the entry has none. The planner never reads
  // it: it says where a stand-in runs, not what the class is.
  char run_on[RG_MAX_RUN_ON][RG_RUN_ON_NAME];
  int n_run_on;
  char run_on_where[160];  // "file:line:col" of the value, for messages
} rg_node_devices_t;

typedef struct {
  char name[64];
  int count;  // identical nodes
  rg_node_devices_t devs[RG_MAX_NODE_DEVICES];
  int n_devs;
  rg_link_t link;  // device to device inside the node
} rg_fleet_node_t;

typedef struct {
  char name[64];
  char description[160];
  char path[512];
  char provider[64];  // libfabric provider between nodes
  // One NIC between nodes. Devices whose class has a scale_out link own a
  // NIC of that bandwidth each; others share this one per node.
  rg_link_t network;
  rg_fleet_node_t nodes[RG_MAX_FLEET_NODES];
  int n_nodes;
} rg_fleet_t;

RG_MUST_USE rg_status_t rg_fleet_load(const char *name_or_path, const char *config_dir,
                                      const rg_catalog_t *cat, rg_fleet_t **out);
void rg_fleet_destroy(rg_fleet_t *f);
// Devices of a class across the whole fleet, and the most in one node.
int rg_fleet_count(const rg_fleet_t *f, const rg_device_class_t *c);
int rg_fleet_per_node(const rg_fleet_t *f, const rg_device_class_t *c);
// Link between two devices of class c inside one node (node link, else the
// class's scale-up link, else its host link).
rg_link_t rg_fleet_intra_link(const rg_fleet_t *f, const rg_device_class_t *c);
// Bandwidth one device of class c has into the network between nodes: its
// own NIC (the class's scale_out link), else its share of the node's.
double rg_fleet_nic_bandwidth(const rg_fleet_t *f, const rg_device_class_t *c);

// ----- Workloads -------------------------------------------------------------

typedef enum { RG_DIST_FIXED, RG_DIST_UNIFORM, RG_DIST_LOGNORMAL } rg_dist_kind_t;

typedef struct {
  rg_dist_kind_t kind;
  double mean;   // all kinds: the mean (fixed: the value)
  double sigma;  // lognormal
  double min, max;
} rg_dist_t;

// The p-quantile (0 < p < 1) of a token-count distribution.
double rg_dist_quantile(const rg_dist_t *d, double p);

typedef struct {
  int present;
  double duration;  // seconds
  double requests;  // per session
  double steps_per_request;
  double prefix_tokens;  // re-read each step
  double append_tokens;  // appended each step
  double output_tokens;  // generated each step
  double human_wait_fraction;
  double retention;  // seconds KV stays in device memory
} rg_session_t;

// Speculative decoding: a draft model proposes `tokens` tokens, the target
// verifies them in one step; each is accepted with probability `acceptance`
// (given the ones before it were).
typedef struct {
  int present;
  char draft[256];  // model name or path, as for --model
  int tokens;
  double acceptance;
} rg_speculative_t;
// Expected tokens a sequence gains per verify step: 1 + a + ... + a^k.
double rg_speculative_tokens_per_step(const rg_speculative_t *s);

typedef struct {
  char name[64];
  char description[160];
  char path[512];
  rg_dist_t prompt, output;
  double rate;      // requests/s; 0 = as many as the fleet serves
  double slo_ttft;  // seconds; 0 = none
  double slo_tbt;   // seconds; 0 = none
  double slo_percentile;
  rg_session_t session;
  // Prefix cache: the share of prompt tokens whose KV is found cached
  // (prefill skips them), or a prefix every prompt shares (its KV is held
  // once per replica). At most one is non-zero.
  double prefix_hit_rate;
  double shared_prefix;
  rg_speculative_t speculative;
} rg_workload_t;

RG_MUST_USE rg_status_t rg_workload_load(const char *name_or_path, const char *config_dir,
                                         rg_workload_t **out);
void rg_workload_destroy(rg_workload_t *w);
// The built-in default when no workload is given.
void rg_workload_default(rg_workload_t *w);

// Resolves NAME to <config_dir>/<sub>/NAME.yaml, or takes it as a path when
// it contains '/' or ends in .yaml/.json. Unknown names give RG_NOT_FOUND
// listing what exists and suggesting the nearest. out must hold 1024 bytes.
RG_MUST_USE rg_status_t rg_config_resolve(const char *config_dir, const char *sub, const char *what,
                                          const char *name_or_path, char *out, size_t out_len);

// ----- Placements and plans --------------------------------------------------

#define RG_MAX_GROUPS 3
#define RG_MAX_POOLS 8

typedef enum { RG_MODE_COLOCATED, RG_MODE_AF, RG_MODE_PD } rg_mode_t;
const char *rg_mode_name(rg_mode_t m);

// Stage slots a placement maps to groups.
#define RG_SLOT_MAP(X)                                                         \
  X(RG_SLOT_EMBED, "embed")                                                    \
  X(RG_SLOT_ATTENTION, "attention")                                            \
  X(RG_SLOT_FFN, "ffn") /* and moe */                                          \
  X(RG_SLOT_LM_HEAD, "lm_head")                                                \
  X(RG_SLOT_PREFILL, "prefill") /* where prompts are prefilled (all stages) */ \
  X(RG_SLOT_DRAFT, "draft")     /* the speculative draft model */

typedef enum {
#define RG_X_(e, n) e,
  RG_SLOT_MAP(RG_X_)
#undef RG_X_
      RG_SLOT_COUNT
} rg_slot_t;
const char *rg_slot_name(rg_slot_t s);
// The slot a stage kind is placed by, or -1 for the moves (kv_*, activation).
int rg_slot_of_stage(rg_stage_kind_t k);

typedef enum { RG_KV_AUTO, RG_KV_TIER, RG_KV_RECOMPUTE } rg_kv_policy_t;

// A group is tp x pp x dp devices of one class. Attention (and dense FFNs)
// are split over tp and replicated over dp, each replica serving its own
// sequences (data-parallel attention); MoE experts are spread over all
// tp x dp devices of a pipeline stage (expert parallel); layers are split
// over pp stages.
typedef struct {
  char name[16];                 // attn, ffn, prefill, main, draft
  const rg_device_class_t *cls;  // borrowed
  int devices;                   // tp * pp * dp
  int tp, pp, dp;
} rg_group_t;

typedef struct {
  rg_mode_t mode;
  rg_group_t groups[RG_MAX_GROUPS];
  int n_groups;
  int slot_group[RG_SLOT_COUNT];  // index into groups
  int replicas;
  int batch;  // decode sequences in flight per replica
  // Sequence slots when more than `batch` (0: batch): a serving estimate or
  // a simulator sets batch to what is in flight and max_batch to what fits.
  int max_batch;
  // 1, or 2: two micro-batches in flight, so one's communication (or the
  // other group, attention-FFN) overlaps the other's compute.
  int micro_batches;
  // Tokens of prompt prefilled per step (0: the request's setting, else
  // chosen to keep the TBT SLO; the plan records the choice).
  int prefill_chunk;
  rg_dtype_t weight_dtype, kv_dtype;
  // Where the KV of idle sessions waits (agentic workloads): the KV of
  // running sequences always lives on the attention group. AUTO picks the
  // tier that brings a session back fastest, or recomputation when that is
  // faster than any reload; the plan records the choice.
  rg_kv_policy_t kv_policy;
  const rg_device_class_t *kv_offload;  // host-dram/ssd class for RG_KV_TIER
  // Share of the workload's arrival rate this pool serves (derived from the
  // pools' capacities when a plan is finished; 0 while searching).
  double load_share;
  // While searching (load_share 0): how many replicas of this placement the
  // fleet holds, so that queueing is judged at no more load than they would
  // carry sharing the whole rate (0: replicas).
  int planning_replicas;
} rg_placement_t;

// Percentiles reported for latencies.
#define RG_N_PCT 3
extern const double rg_pct[RG_N_PCT];  // 50, 90, 99

// Predicted figures for one replica and for the pool.
typedef struct {
  double tbt;                                // seconds, mean time between tokens
  double ttft;                               // seconds, mean, with queueing at the workload rate
  double tbt_p[RG_N_PCT], ttft_p[RG_N_PCT];  // at rg_pct
  double tbt_slo, ttft_slo;                  // at the workload's SLO percentile
  double prefill_time;                       // seconds to prefill one mean prompt
  double prefill_cost;                       // device time per request of prefill, prompts batched
  double prefill_chunk;                      // tokens per prefill chunk used
  double decode_step;                        // seconds of one decode step (no prefill in it)
  double tokens_per_step;                    // per sequence per step (> 1 with speculation)
  double kv_tokens;                          // expected KV tokens held per running sequence
  double tokens_per_s;                       // output tokens/s of the whole pool
  double requests_per_s;
  double cost_per_s;  // dollars/s of the pool
  double power;       // watts of the pool
  double tokens_per_dollar;
  double tokens_per_joule;         // tokens/s per watt
  double mem_used[RG_MAX_GROUPS];  // bytes per device, first tier, worst stage
  double mem_cap[RG_MAX_GROUPS];
  double load;  // utilisation used for queueing (capped at 0.95)
  int meets_slo;
  char bound[RG_MAX_GROUPS][16];  // "compute", "memory", "link", "overhead"
  // Sessions (agentic workloads) only, per replica.
  rg_kv_policy_t kv_policy;          // TIER or RECOMPUTE as decided
  const rg_device_class_t *kv_tier;  // for TIER
  double idle_sessions;              // sessions waiting on a person
  double idle_kv_bytes;              // their KV
  double kv_tier_capacity;           // bytes of the tier this replica may use
  double kv_reload_time;             // bring one session's KV back from the tier
  double kv_recompute_time;          // or recompute it by prefilling its prefix
} rg_prediction_t;

#define RG_OBJECTIVE_MAP(X)                        \
  X(RG_OBJ_THROUGHPUT, "throughput")               \
  X(RG_OBJ_TOKENS_PER_DOLLAR, "tokens-per-dollar") \
  X(RG_OBJ_TOKENS_PER_WATT, "tokens-per-watt")

typedef enum {
#define RG_X_(e, n) e,
  RG_OBJECTIVE_MAP(RG_X_)
#undef RG_X_
      RG_OBJECTIVE_COUNT
} rg_objective_t;
const char *rg_objective_name(rg_objective_t o);
int rg_objective_parse(const char *s, rg_objective_t *out);

typedef struct {
  char label[96];  // "homogeneous h100-sxm", "attention-FFN", "chosen"
  rg_placement_t pools[RG_MAX_POOLS];
  rg_prediction_t pred[RG_MAX_POOLS];
  int n_pools;
  // Totals over pools.
  double tokens_per_s, cost_per_s, power, ttft, tbt;
  double tokens_per_dollar, tokens_per_joule;
  int feasible;
  char why[256];  // when infeasible
} rg_plan_option_t;

#define RG_MAX_FORBID 16

// Defaults for the request's settings (0 in a request means the default).
#define RG_DEFAULT_MEM_UTIL 0.90
#define RG_DEFAULT_PREFILL_CHUNK 2048

typedef struct {
  const rg_arch_t *model;
  const rg_fleet_t *fleet;
  const rg_workload_t *workload;
  rg_objective_t objective;
  rg_dtype_t weight_dtype, kv_dtype;
  // Share of each device's first memory tier ridge may fill with weights,
  // KV and activations (vLLM's gpu_memory_utilization); the rest is left to
  // the runtime and allocator. 0: RG_DEFAULT_MEM_UTIL.
  double mem_util;
  // Tokens in one prefill chunk: bounds the activation workspace and how
  // long a decode step that carries a chunk takes. 0: the default.
  double prefill_chunk;
  // The draft model when the workload decodes speculatively (borrowed).
  const rg_arch_t *draft;
  // User constraints: forbidden classes, and pins of slots to classes, with
  // where each was given ("file:line:col") for messages.
  const rg_device_class_t *forbid[RG_MAX_FORBID];
  int n_forbid;
  char forbid_where[RG_MAX_FORBID][160];
  const rg_device_class_t *pin[RG_SLOT_COUNT];
  char pin_where[RG_SLOT_COUNT][160];
  // A whole user placement to evaluate instead of searching (n_pools > 0).
  rg_placement_t fixed[RG_MAX_POOLS];
  int n_fixed;
} rg_plan_request_t;

// One point of the throughput-interactivity frontier: a placement kind at a
// batch, tokens/s per user against tokens/s per device.
typedef struct {
  double per_user, per_device;
  int batch;
} rg_pareto_point_t;

#define RG_PARETO_KINDS 8
#define RG_PARETO_POINTS 16
typedef struct {
  char label[96];
  rg_pareto_point_t pt[RG_PARETO_POINTS];
  int n;
} rg_pareto_curve_t;

typedef struct {
  rg_plan_option_t chosen;
  rg_plan_option_t baselines[24];  // homogeneous per class, then PD, AF
  int n_baselines;
  double solve_seconds;
  int candidates;  // placements evaluated
  char milp_status[64];
} rg_plan_t;

// Searches (or evaluates the fixed placement) and fills *out. Returns
// RG_INFEASIBLE with a message saying what is short and by how much when
// nothing fits or meets the SLOs; RG_INVALID_ARGUMENT for constraints that
// contradict each other or the fleet, naming where they were given.
RG_MUST_USE rg_status_t rg_plan_solve(const rg_plan_request_t *req, rg_plan_t *out);
// One request step as the planner costs it: new prompt tokens (after the
// prefix cache), the cached prefix they extend, and the tokens generated.
// Agentic sessions use their per-step figures, other workloads their means;
// prompt and output are at least 1.
typedef struct {
  double prompt, prefix, output;
} rg_request_shape_t;
rg_request_shape_t rg_workload_request(const rg_workload_t *w);

// The step shapes the cost model runs for a placement: decode, one
// micro-batch of sequences at mid-generation context; prefill, one prompt on
// its prefix. Reports and pictures use these so they show what was costed.
rg_shape_t rg_placement_decode_shape(const rg_plan_request_t *req, const rg_placement_t *p);
rg_shape_t rg_placement_prefill_shape(const rg_plan_request_t *req, const rg_placement_t *p);

// Resident weight bytes per slot (embed, attention, ffn, lm_head; 0 for
// prefill and draft), which sizes groups.
RG_MUST_USE rg_status_t rg_slot_weights(const rg_arch_t *a, rg_dtype_t weight_dtype,
                                        rg_dtype_t kv_dtype, double w[RG_SLOT_COUNT]);

// Checks a group's parallelism against the model: tp x pp x dp == devices,
// tp divides the attention heads, and the KV heads split over tp or are
// replicated a whole number of times. what names the group in messages.
RG_MUST_USE rg_status_t rg_group_check(const rg_arch_t *a, const rg_group_t *g);
// Chooses tp, pp, dp for g->devices on the fleet: tp as wide as a node
// allows and the heads divide, pp over the rest, dp 1.
void rg_group_shape(const rg_fleet_t *f, const rg_arch_t *a, rg_group_t *g);

// The time one step takes on group `group` of placement p: `batch`
// sequences (over the whole group) each adding `new_tokens` tokens on top of
// `context` cached ones, running the stages the placement maps to that
// group (phase PREFILL on a prefill-decode placement's prefill group: all of
// them). This is the cost model's unit, public so that a simulator can
// drive it per iteration:
//   stage    one pipeline stage's time (the worst stage)
//   total    one pass through every stage (= stage x pp plus the hops)
//   compute, memory, comm, overhead  how `total` splits: roofline time of
//            kernels bound by FLOPs and by bytes, communication left exposed
//            (TP all-reduce, expert all-to-all, pipeline hops), and the
//            class's step and per-layer costs.
// With micro_batches 2 the communication of one half of the batch overlaps
// the computation of the other (two-batch overlap).
typedef struct {
  double stage, total;
  double compute, memory, comm, overhead;
  const char *bound;  // "compute", "memory", "link" or "overhead": the largest part
} rg_step_cost_t;
RG_MUST_USE rg_status_t rg_group_step_time(const rg_plan_request_t *req, const rg_placement_t *p,
                                           int group, rg_phase_t phase, double batch,
                                           double new_tokens, double context, rg_step_cost_t *out);

// One stage kind's share of a step on group g: the kernels of slot (embed,
// attention, ffn or lm_head) for `batch` sequences each adding `new_tokens`
// on `context`, at the class's efficiencies times the slot's own, plus the
// slot's fixed costs (rg_stage_figures_t). layers: how many of the model's
// layers the stage instance runs (attention and ffn; 0 or more than the
// model has: all of them). The step's own cost and the class's layer
// floors are not in it: they belong to the step, not to a stage. This is
// what `ridge run` puts beside each stage instance's measured time.
RG_MUST_USE rg_status_t rg_slot_step_time(const rg_plan_request_t *req, const rg_group_t *g,
                                          rg_slot_t slot, rg_phase_t phase, double batch,
                                          double new_tokens, double context, double layers,
                                          double *out);
// The same for a step mixing decodes and prefill chunks, costed as the
// simulator costs a mixed step (rg_sim_batch_seconds): decode step +
// prefill step - a one-token step, never less than either. decodes and
// prefills count sequences; prefill_tokens is the chunks' tokens together;
// the contexts are means (the chunks' weighted by their tokens).
typedef struct {
  double decodes, decode_context;
  double prefills, prefill_tokens, prefill_context;
} rg_step_mix_t;
RG_MUST_USE rg_status_t rg_slot_mixed_time(const rg_plan_request_t *req, const rg_group_t *g,
                                           rg_slot_t slot, const rg_step_mix_t *mix, double layers,
                                           double *out);

// Predicts one placement; fills pred. Non-OK when it does not fit memory.
RG_MUST_USE rg_status_t rg_placement_predict(const rg_plan_request_t *req, const rg_placement_t *p,
                                             rg_prediction_t *pred);

// What a placement file names besides the placement ("" when absent), with
// where each was given.
typedef struct {
  char model[256], fleet[256], workload[256];
  char model_where[160], fleet_where[160], workload_where[160];
  int has_objective;
  rg_objective_t objective;
  int has_weight_dtype, has_kv_dtype;
  rg_dtype_t weight_dtype, kv_dtype;
  double mem_util;       // 0: not given
  double prefill_chunk;  // 0: not given
} rg_placement_meta_t;

// Reads a placement file: either whole pools (as `ridge plan -o` writes) into
// req->fixed, or constraints (pin/forbid) into req, or both.
RG_MUST_USE rg_status_t rg_placement_load(const char *path, const rg_catalog_t *cat,
                                          rg_plan_request_t *req, rg_placement_meta_t *meta);
// Writes a plan as YAML that rg_placement_load reads back.
// names: the model, fleet and workload as the user gave them.
RG_MUST_USE rg_status_t rg_plan_write_yaml(const rg_plan_t *plan, const rg_plan_request_t *req,
                                           const rg_placement_meta_t *names, FILE *f);
// Roofline picture of a plan (SVG): every computing class of the fleet as a
// roof, each stage of the chosen plan's first pool as a point at its
// intensity on the class it runs on, and hollow points where the best
// homogeneous baseline would run it; decode and prefill side by side.
RG_MUST_USE rg_status_t rg_plan_write_svg(const rg_plan_t *plan, const rg_plan_request_t *req,
                                          FILE *f);
// The throughput-interactivity frontier: for each placement kind (each
// homogeneous class, prefill-decode, attention-FFN, and the chosen plan's
// first pool) the tokens/s per user and per device across batch sizes.
RG_MUST_USE rg_status_t rg_plan_pareto(const rg_plan_t *plan, const rg_plan_request_t *req,
                                       rg_pareto_curve_t curves[RG_PARETO_KINDS], int *n_curves);
// Pareto picture (SVG): one curve per placement kind, the chosen point marked.
RG_MUST_USE rg_status_t rg_plan_write_pareto_svg(const rg_plan_t *plan,
                                                 const rg_plan_request_t *req, FILE *f);

#endif  // RG_PLANNER_PLANNER_H
