// planner/planner.h — device classes, fleets, workloads, the roofline cost
// model and placement search.
//
// A device class is a roofline and a price (configs/devices/*.yaml). A fleet
// groups devices of classes into nodes joined by links. A workload gives
// prompt and output lengths, an arrival rate and SLOs. The planner turns a
// model (graphs/) and a fleet into a plan: pools of identical replicas, each
// replica a placement of the model's stages on device groups, with predicted
// tokens/s, TTFT, TBT, tokens/$ and tokens/W, next to the baselines it beat.
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

#define RG_DEVICE_KIND_MAP(X)         \
  X(RG_KIND_GPU, "gpu")               \
  X(RG_KIND_LPU, "lpu")               \
  X(RG_KIND_WAFER, "wafer")           \
  X(RG_KIND_LPDDR_CARD, "lpddr-card") \
  X(RG_KIND_ACCELERATOR, "accelerator") \
  X(RG_KIND_CPU, "cpu")               \
  X(RG_KIND_HOST_DRAM, "host-dram")   \
  X(RG_KIND_SSD, "ssd")

typedef enum {
#define RG_X_(e, n) e,
  RG_DEVICE_KIND_MAP(RG_X_)
#undef RG_X_
  RG_DEVICE_KIND_COUNT
} rg_device_kind_t;
const char *rg_device_kind_name(rg_device_kind_t k);

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

typedef struct {
  char name[64];
  char description[160];
  char path[512];            // file it came from
  rg_device_kind_t kind;
  double peak[RG_DTYPE_COMPUTE_COUNT];  // dense FLOP/s per dtype; 0 = not supported
  rg_mem_tier_t mem[RG_MAX_MEM_TIERS];  // fastest first; mem[0] holds weights+KV
  int n_mem;
  double sram;               // bytes on chip
  double power;              // watts
  double price;              // dollars per second
  rg_link_t scale_up, scale_out, host;
  // Fractions of peak compute and bandwidth a tuned kernel reaches; the
  // roofline alone is an upper bound no real kernel attains.
  double eff_compute, eff_memory;
} rg_device_class_t;

// True for classes that compute (not memory/storage tiers).
int rg_class_computes(const rg_device_class_t *c);
// Peak for a dtype, falling back to the nearest wider type the part has
// (fp4 -> fp8 -> bf16/f16 -> f32) since weight-only formats are upcast.
double rg_class_peak(const rg_device_class_t *c, rg_dtype_t t);
// Ridge point: peak / first-tier bandwidth, FLOP per byte.
double rg_class_ridge(const rg_device_class_t *c, rg_dtype_t t);

typedef struct {
  rg_device_class_t **classes;
  size_t n;
  char dir[512];
} rg_catalog_t;

// Loads every configs/devices/*.yaml under config_dir.
RG_MUST_USE rg_status_t rg_catalog_load(const char *config_dir,
                                        rg_catalog_t **out);
// Loads one class file (used by the catalog and by tests).
RG_MUST_USE rg_status_t rg_device_class_load(const char *path,
                                             rg_device_class_t **out);
void rg_catalog_destroy(rg_catalog_t *cat);
const rg_device_class_t *rg_catalog_find(const rg_catalog_t *cat,
                                         const char *name);
// RG_NOT_FOUND listing the classes, with the nearest name suggested.
RG_MUST_USE rg_status_t rg_catalog_unknown(const rg_catalog_t *cat,
                                           const char *name,
                                           const rg_pos_t *pos);

// ----- Fleets ----------------------------------------------------------------

#define RG_MAX_NODE_DEVICES 8
#define RG_MAX_FLEET_NODES 32

typedef struct {
  const rg_device_class_t *cls;  // borrowed from the catalog
  int count;                      // per node
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
  rg_link_t network;  // between nodes, per node
  rg_fleet_node_t nodes[RG_MAX_FLEET_NODES];
  int n_nodes;
} rg_fleet_t;

RG_MUST_USE rg_status_t rg_fleet_load(const char *name_or_path,
                                      const char *config_dir,
                                      const rg_catalog_t *cat,
                                      rg_fleet_t **out);
void rg_fleet_destroy(rg_fleet_t *f);
// Devices of a class across the whole fleet, and the most in one node.
int rg_fleet_count(const rg_fleet_t *f, const rg_device_class_t *c);
int rg_fleet_per_node(const rg_fleet_t *f, const rg_device_class_t *c);
// Link between two devices of class c inside one node (node link, else the
// class's scale-up link, else its host link).
rg_link_t rg_fleet_intra_link(const rg_fleet_t *f, const rg_device_class_t *c);

// ----- Workloads -------------------------------------------------------------

typedef enum { RG_DIST_FIXED, RG_DIST_UNIFORM, RG_DIST_LOGNORMAL } rg_dist_kind_t;

typedef struct {
  rg_dist_kind_t kind;
  double mean;   // all kinds: the mean (fixed: the value)
  double sigma;  // lognormal
  double min, max;
} rg_dist_t;

typedef struct {
  int present;
  double duration;           // seconds
  double requests;           // per session
  double steps_per_request;
  double prefix_tokens;      // re-read each step
  double append_tokens;      // appended each step
  double output_tokens;      // generated each step
  double human_wait_fraction;
  double retention;          // seconds KV stays in device memory
} rg_session_t;

typedef struct {
  char name[64];
  char description[160];
  char path[512];
  rg_dist_t prompt, output;
  double rate;          // requests/s; 0 = as many as the fleet serves
  double slo_ttft;      // seconds; 0 = none
  double slo_tbt;       // seconds; 0 = none
  double slo_percentile;
  rg_session_t session;
} rg_workload_t;

RG_MUST_USE rg_status_t rg_workload_load(const char *name_or_path,
                                         const char *config_dir,
                                         rg_workload_t **out);
void rg_workload_destroy(rg_workload_t *w);
// The built-in default when no workload is given.
void rg_workload_default(rg_workload_t *w);

// Resolves NAME to <config_dir>/<sub>/NAME.yaml, or takes it as a path when
// it contains '/' or ends in .yaml/.json. Unknown names give RG_NOT_FOUND
// listing what exists and suggesting the nearest. out must hold 1024 bytes.
RG_MUST_USE rg_status_t rg_config_resolve(const char *config_dir,
                                          const char *sub, const char *what,
                                          const char *name_or_path,
                                          char *out, size_t out_len);

// ----- Placements and plans --------------------------------------------------

#define RG_MAX_GROUPS 3
#define RG_MAX_POOLS 8

typedef enum { RG_MODE_COLOCATED, RG_MODE_AF, RG_MODE_PD } rg_mode_t;
const char *rg_mode_name(rg_mode_t m);

// Stage slots a placement maps to groups.
typedef enum {
  RG_SLOT_EMBED,
  RG_SLOT_ATTENTION,
  RG_SLOT_FFN,  // ffn and moe
  RG_SLOT_LM_HEAD,
  RG_SLOT_PREFILL,  // where prefill of new prompts runs (all its stages)
  RG_SLOT_COUNT
} rg_slot_t;
const char *rg_slot_name(rg_slot_t s);
// The slot a stage kind is placed by, or -1 for the moves (kv_*, activation).
int rg_slot_of_stage(rg_stage_kind_t k);

typedef enum { RG_KV_AUTO, RG_KV_TIER, RG_KV_RECOMPUTE } rg_kv_policy_t;

typedef struct {
  char name[16];                 // attn, ffn, prefill, main
  const rg_device_class_t *cls;  // borrowed
  int devices;                   // tp * pp (* ep for expert groups)
  int tp, pp;
} rg_group_t;

typedef struct {
  rg_mode_t mode;
  rg_group_t groups[RG_MAX_GROUPS];
  int n_groups;
  int slot_group[RG_SLOT_COUNT];  // index into groups
  int replicas;
  int batch;          // decode sequences in flight per replica
  int micro_batches;  // 1, or 2 for attention-FFN ping-pong
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
} rg_placement_t;

// Predicted figures for one replica and for the pool.
typedef struct {
  double tbt;            // seconds per decode step (time between tokens)
  double ttft;           // seconds, mean, with queueing at the workload rate
  double prefill_time;   // seconds to prefill one mean prompt
  double tokens_per_s;   // output tokens/s of the whole pool
  double requests_per_s;
  double cost_per_s;     // dollars/s of the pool
  double power;          // watts of the pool
  double tokens_per_dollar;
  double tokens_per_joule;  // tokens/s per watt
  double mem_used[RG_MAX_GROUPS];  // bytes per device, first tier
  double mem_cap[RG_MAX_GROUPS];
  double load;           // utilisation used for queueing (capped at 0.95)
  int meets_slo;
  char bound[RG_MAX_GROUPS][16];  // "compute", "memory", "link" per group
  // Sessions (agentic workloads) only, per replica.
  rg_kv_policy_t kv_policy;            // TIER or RECOMPUTE as decided
  const rg_device_class_t *kv_tier;    // for TIER
  double idle_sessions;                // sessions waiting on a person
  double idle_kv_bytes;                // their KV
  double kv_tier_capacity;             // bytes of the tier this replica may use
  double kv_reload_time;               // bring one session's KV back from the tier
  double kv_recompute_time;            // or recompute it by prefilling its prefix
} rg_prediction_t;

typedef enum {
  RG_OBJ_THROUGHPUT,
  RG_OBJ_TOKENS_PER_DOLLAR,
  RG_OBJ_TOKENS_PER_WATT
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

typedef struct {
  const rg_arch_t *model;
  const rg_fleet_t *fleet;
  const rg_workload_t *workload;
  rg_objective_t objective;
  rg_dtype_t weight_dtype, kv_dtype;
  // User constraints: forbidden classes, and pins of slots to classes.
  const rg_device_class_t *forbid[16];
  int n_forbid;
  const rg_device_class_t *pin[RG_SLOT_COUNT];
  // A whole user placement to evaluate instead of searching (n_pools > 0).
  rg_placement_t fixed[RG_MAX_POOLS];
  int n_fixed;
} rg_plan_request_t;

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
// nothing fits or meets the SLOs.
RG_MUST_USE rg_status_t rg_plan_solve(const rg_plan_request_t *req,
                                      rg_plan_t *out);
// One request step as the planner costs it: new prompt tokens, the cached
// prefix they extend, and the tokens generated. Agentic sessions use their
// per-step figures, other workloads their means; prompt and output are at
// least 1.
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
// prefill), which sizes groups.
RG_MUST_USE rg_status_t rg_slot_weights(const rg_arch_t *a, rg_dtype_t weight_dtype, rg_dtype_t kv_dtype,
                                        double w[RG_SLOT_COUNT]);

// Predicts one placement; fills pred. Non-OK when it does not fit memory.
RG_MUST_USE rg_status_t rg_placement_predict(const rg_plan_request_t *req,
                                             const rg_placement_t *p,
                                             rg_prediction_t *pred);

// What a placement file names besides the placement ("" when absent).
typedef struct {
  char model[256], fleet[256], workload[256];
  int has_objective;
  rg_objective_t objective;
  int has_dtypes;
  rg_dtype_t weight_dtype, kv_dtype;
} rg_placement_meta_t;

// Reads a placement file: either whole pools (as `ridge plan -o` writes) into
// req->fixed, or constraints (pin/forbid) into req.
RG_MUST_USE rg_status_t rg_placement_load(const char *path,
                                          const rg_catalog_t *cat,
                                          rg_plan_request_t *req,
                                          rg_placement_meta_t *meta);
// Writes a plan as YAML that rg_placement_load reads back.
// names: the model, fleet and workload as the user gave them.
RG_MUST_USE rg_status_t rg_plan_write_yaml(const rg_plan_t *plan,
                                           const rg_plan_request_t *req,
                                           const rg_placement_meta_t *names,
                                           FILE *f);
// Roofline picture of a plan (SVG): each class's roof and each stage as a
// point at its intensity, for decode and prefill.
RG_MUST_USE rg_status_t rg_plan_write_svg(const rg_plan_t *plan,
                                          const rg_plan_request_t *req,
                                          FILE *f);

#endif  // RG_PLANNER_PLANNER_H
