// runtime/profile.h — what one device really does, measured through the HAL,
// and the calibrated device class those measurements make.
//
// The planner prices every kernel with a class's roofline: peak FLOP/s per
// dtype scaled by an efficiency curve over GEMM M, bandwidth scaled by a
// streaming efficiency, and fixed costs per step and per layer. A datasheet
// gives the peaks; only the device can say what its kernels reach. A profile
// measures, on the device itself and with ridge's own kernels:
//
//   memory     read, write and copy bandwidth within the device, and
//              host -> device and device -> host copies
//   matmul     FLOP/s per weight type (f32, bf16, f16, q8_0: those the
//              device runs) over a sweep of M from 1 to 4096, at the shapes
//              of one layer of a model (the 1b test model's by default),
//              with the weights cycled through more memory than any cache
//   attention  decode attention over a paged KV cache: KV bytes read per
//              second, over context length
//   launch     the host's cost per op, small ops submitted back to back
//   stages     optional (opts.stage_model): the runtime's own stage
//              instances (embed, attention, ffn, lm_head) of a small model
//              on the device, timed at a few step shapes, so that each stage
//              kind's fixed costs are measured as the runtime pays them
//   peaks      the backend's own matrix peak per type (CPU: runtime/limits.h;
//              OpenCL: its FMA kernel; CUDA: cuBLAS), the limit the sweep
//              is compared with
//
// Each measurement goes through the HAL (devices/devices.h), so any backend
// with the ops can be profiled; a backend's own streaming kernels are used
// where it has them (the CPU's runtime/limits.h, OpenCL's read and write
// kernels, CUDA's streaming read and cuBLAS), and what a device cannot run
// is skipped with the reason, never guessed.
//
//   rg_profile_run(dev, opts, &result)      measures (a few seconds with
//        |                                  quick, under a minute in full)
//        v
//   rg_profile_result_t: every figure, and the class figures derived from
//        |               them (efficiency curves, bandwidth, overheads)
//        v
//   rg_profile_write_class(result, f)       the calibrated class YAML that
//                                           planner/config_load.c reads
//
// The derivation, in one place (rg_profile_run fills result->cls):
// - efficiency.compute per compute type: measured FLOP/s at each M over a
//   peak. The peak is the class's datasheet figure for that type when it
//   publishes one and the device does not beat it; otherwise (no figure, or
//   a datasheet the device outruns, so not this device's) the measured peak,
//   which the file then writes under `peak:` so the planner divides by the
//   same number. q8_0 weights give the int8 curve: the planner prices q8_0
//   at its compute type.
// - memory: the measured read bandwidth; efficiency.memory the share of it
//   the m = 1 matmuls stream weights at (median over the weight types).
// - efficiency.attention: decode attention's KV read rate at the longest
//   context over the read bandwidth; attention_by_context: the same at
//   every context measured.
// - overhead.layer and .step: the per-op cost times the ops of a layer (8)
//   and of a step (3) that the cost model has no roofline term for. With
//   stage figures, layer is 0: those ops run inside the stages, whose own
//   fixed costs then price them, and step is an iteration of the runtime's
//   serving loop beyond its stages (stages.serve_step; where that run
//   failed, the timed shapes' forward beyond their stages).
// - stages.KIND (with opts.stage_model): each stage kind's time at each
//   shape less the cost model's roofline for it on the class derived
//   above, fitted as calls x (call + token x tokens) by least squares on
//   relative error (a term that would go negative is left out), and the
//   same per call at each shape's tokens per call as stages.KIND.by_tokens
//   (shapes with equal tokens averaged), which the cost model uses in
//   place of the line: the line summarizes, the points price. The
//   efficiency factor stays 1: fitted on the tiny model's stages it traded
//   against the call cost and did not carry over to larger shapes; the
//   loader and cost model take one written by hand or measured otherwise. stages.KIND.first: the
//   first step of the fresh engine less the same step again.
// Every efficiency lies in (0, 1], as the loader requires.
//
// Ownership: the device is borrowed for the call; everything a measurement
// allocates is freed before it returns. Results are plain structs.
#ifndef RG_RUNTIME_PROFILE_H
#define RG_RUNTIME_PROFILE_H

#include <stdint.h>
#include <stdio.h>

#include "base/dtype.h"
#include "base/status.h"
#include "devices/devices.h"
#include "graphs/graphs.h"
#include "planner/planner.h"

// Matmul weight types a profile measures, in order, and the compute type
// each one's curve is written under.
// clang-format off
#define RG_PROFILE_DTYPE_MAP(X) \
  X(RG_F32,  RG_F32)            \
  X(RG_BF16, RG_BF16)           \
  X(RG_F16,  RG_F16)            \
  X(RG_Q8_0, RG_INT8)
// clang-format on
#define RG_PROFILE_DTYPES 4
#define RG_PROFILE_MAX_M 8  // the loader's RG_EFF_POINTS
#define RG_PROFILE_MAX_CTX 6

// The datasheet figures of the class a profile calibrates.
typedef struct {
  char name[64];                        // "local-cpu", "h100-sxm"
  char path[512];                       // the class file
  double peak[RG_DTYPE_COMPUTE_COUNT];  // published peaks, FLOP/s; 0: none
  char tier[32];                        // its first memory tier ("dram", "hbm3")
  double bandwidth;                     // that tier's bandwidth, bytes/s
} rg_profile_class_t;

// The datasheet of c (for a calibrated class, the figures under it).
void rg_profile_class_from(const rg_device_class_t *c, rg_profile_class_t *out);

// Progress: called before each step of the profile (step of total, what
// it measures: "matmul bf16 M = 256"). Optional.
typedef void (*rg_profile_progress_fn_t)(void *ctx, int step, int total, const char *what);

typedef struct {
  int quick;  // a few seconds: fewer M, shorter buffers, fewer repetitions
  // The model whose layer's matmuls and attention heads are measured;
  // NULL: the 1b test model (rg_testmodel_arch). Borrowed for the call.
  const rg_arch_t *model;
  // The class calibrated; NULL: none (result->cls then holds curves over
  // measured peaks, and rg_profile_write_class refuses: a calibrated file
  // names its class's memory tier). Copied.
  const rg_profile_class_t *cls;
  rg_profile_progress_fn_t progress;
  void *progress_ctx;
  // A model directory (or .gguf) whose stage instances are timed on the
  // device for the per-stage figures (a small one: the tiny test model
  // takes well under a second); NULL: no stage figures. Borrowed.
  const char *stage_model;
  int threads;  // CPU threads for the stages' engine; 0: one per core
} rg_profile_options_t;

// The stage shapes timed: decodes of 1, 4 and 8 sequences, prefills of 16,
// 64 and 256 tokens (a serving step's chunk budget: a line through the
// small shapes alone priced the tiny model's 256-token chunks 2x slow).
#define RG_PROFILE_STAGE_SHAPES 6
typedef struct {
  int seqs, tokens;                // sequences, and new tokens each
  int64_t context;                 // positions cached before them
  double seconds[RG_STAGE_SLOTS];  // measured, median of the repetitions; slot order
  double roof[RG_STAGE_SLOTS];     // the cost model's roofline for it (no stage figures)
  double fitted[RG_STAGE_SLOTS];   // the cost model's time with the fitted figures
  double outside;                  // the engine's step beyond its stages, seconds
} rg_profile_stage_shape_t;

typedef struct {
  int n;  // shapes timed; 0: not measured, see reason
  char model[64];
  int64_t layers;
  int reps;
  // The first step of a fresh engine and the same step again, per slot,
  // and (have_fresh) the first step of a second engine on the same device:
  // fresh less second is each stage kind's first-call cost, first less fresh
  // what the process paid once (kernel builds).
  double first_step[RG_STAGE_SLOTS], second_step[RG_STAGE_SLOTS], fresh_step[RG_STAGE_SLOTS];
  int have_fresh;
  // The same two first steps' time by op kind (the queues' op timing; -1
  // for kinds a step did not run), so the process's once-off cost splits by
  // the kinds that paid it.
  double first_ops[RG_OP_COUNT], fresh_ops[RG_OP_COUNT];
  // The first shape timed again after `gap` seconds idle before each step
  // (gapped_reps of them), per slot: less shape[0], what its calls pay cold.
  // On a device in the host's memory (gap_busy) the gap is the host's
  // cores streaming past their caches, as a worker beside it computes.
  double gapped[RG_STAGE_SLOTS], gap;
  int gapped_reps, gap_busy;
  rg_profile_stage_shape_t shape[RG_PROFILE_STAGE_SHAPES];
  // An iteration of the runtime's serving loop (runtime/serve.h) on a few
  // short requests beyond its stages' time, seconds (median of 3 runs of
  // serve_iterations each); 0: not measured.
  double serve_step;
  int64_t serve_iterations;
  char reason[200];
} rg_profile_stages_t;

// A bandwidth, or why it was not measured.
typedef struct {
  double rate;       // bytes/s; 0: not measured
  char how[96];      // what measured it ("streaming sum over 256 MiB")
  char reason[200];  // rate == 0: why not
} rg_profile_bw_t;

// One weight type's sweep over M.
typedef struct {
  rg_dtype_t dtype;    // the weights (f32, bf16, f16, q8_0)
  rg_dtype_t compute;  // the compute type its curve is for (q8_0: int8)
  int n;               // points measured; 0: skipped, see reason
  int64_t m[RG_PROFILE_MAX_M];
  double flops[RG_PROFILE_MAX_M];   // FLOP/s at each M
  double stream[RG_PROFILE_MAX_M];  // weight bytes read per second at each M
  double peak;                      // the backend's matrix peak for it; 0: none
  char peak_path[160];              // "amx-bf16", "f32 fma", "cuBLAS bf16 GEMM"; "none: " and why
  char reason[200];
} rg_profile_matmul_t;

// The calibrated figures of one compute type.
typedef struct {
  int n;               // 0: nothing measured for it
  rg_dtype_t compute;  // f32, bf16, f16, int8
  rg_dtype_t weights;  // the weights measured for it
  double peak;         // the curve is a fraction of this, FLOP/s
  int from_datasheet;  // 1: the class's published peak; 0: measured (write it)
  char why[320];       // which peak, and why ("the class publishes no f16 peak")
  int64_t m[RG_PROFILE_MAX_M];
  double eff[RG_PROFILE_MAX_M];  // in (0, 1]
  // The weight stream over the bandwidth at the first n_mem points (those
  // of M <= RG_PROFILE_MEM_MAX_M, decode batches), in (0, 1]; 0 points
  // where the stream could not be told from the cache's (a quick profile on
  // a large cache) or no bandwidth was measured.
  int n_mem;
  double mem[RG_PROFILE_MAX_M];
} rg_profile_curve_t;
#define RG_PROFILE_MEM_MAX_M 16

typedef struct {
  int have_class;
  rg_profile_class_t sheet;  // the datasheet calibrated (have_class)
  double bandwidth;          // the memory tier's measured bandwidth; 0: none
  char bandwidth_why[200];   // which reading it is
  double eff_memory;         // 0: not measured
  char eff_memory_why[160];
  double eff_attention;  // 0: not measured
  char eff_attention_why[160];
  // A prompt's attention FLOP rate over the bf16 peak
  // (efficiency.attention_compute); 0: not measured.
  double eff_attention_compute;
  char eff_attention_compute_why[200];
  // The same at each context measured (n_attn > 1), for
  // efficiency.attention_by_context; 0: one context or none.
  int n_attn;
  int64_t attn_ctx[RG_PROFILE_MAX_CTX];
  double attn_eff[RG_PROFILE_MAX_CTX];
  double step, layer;  // seconds; < 0: not measured
  // step is 0: 3 launches; 1: the engine's forward beyond its stages at the
  // timed shapes; 2: a serving loop's iteration beyond its stages.
  int step_measured;
  rg_profile_curve_t curve[RG_PROFILE_DTYPES];
  int have_stages;  // stage[] fitted from result.stages
  rg_stage_figures_t stage[RG_STAGE_SLOTS];
  double process_first;  // seconds, once per process (kernel builds); < 0: not measured
  // The same by op kind (first_ops less fresh_ops, each at least 0; kinds
  // the step ran): a worker running some kinds pays theirs.
  double first_op[RG_OP_COUNT];
  int have_first_op;
} rg_profile_derived_t;

typedef struct {
  char device[32];        // "cpu:0"
  char device_name[128];  // "Intel(R) Xeon(R) Processor"
  char date[16];          // "2025-06-01", UTC
  char model[64];         // whose shapes were measured
  int64_t d_model, n_heads, n_kv_heads, head_dim, d_ff;
  int quick;
  size_t footprint;       // bytes of weights the matmuls cycle through
  size_t mem_footprint;   // the same for the points of M <= RG_PROFILE_MEM_MAX_M
  int decode_past_cache;  // those points' weights spanned past the device's caches
  int threads;            // CPU: threads of its pool; 0 otherwise
  double seconds;         // the profile's wall time
  rg_profile_bw_t read, write, copy, to_device, to_host;
  double launch;  // seconds per op; 0: not measured
  char launch_reason[200];
  rg_profile_matmul_t matmul[RG_PROFILE_DTYPES];
  // Decode attention over a paged cache of `kv` (bf16) at each context.
  rg_dtype_t kv;
  int n_ctx, attn_seqs;
  int64_t ctx[RG_PROFILE_MAX_CTX];
  double attn_rate[RG_PROFILE_MAX_CTX];  // KV bytes read per second
  char attn_reason[200];
  // A prompt's causal attention: one sequence of attn_prefill_tokens.
  int64_t attn_prefill_tokens;
  double attn_prefill_rate;  // FLOP/s; 0: not measured (attn_prefill_reason)
  char attn_prefill_reason[200];
  rg_profile_stages_t stages;
  rg_profile_derived_t cls;
} rg_profile_result_t;

// Measures dev (see above). opts may be NULL (full profile of the 1b test
// model's shapes, no class). Fails only on an error of the device or the
// HAL; what the device cannot run is a skip with its reason in the result.
RG_MUST_USE rg_status_t rg_profile_run(rg_device_t *dev, const rg_profile_options_t *opts,
                                       rg_profile_result_t *out);

// The class c with r's derived figures applied in memory, as loading the
// file rg_profile_write_class writes would apply them (peaks the curves
// divide by, the memory tier's bandwidth, efficiencies, overheads, stage
// figures). c is the datasheet class; its name is not checked.
void rg_profile_apply(const rg_profile_result_t *r, rg_device_class_t *c);

// Writes the calibrated class of r as YAML to f: comments saying what
// measured each figure and over which peak each curve is, then `name`,
// `measured: {by: ridge profile, date, device}`, `peak` (measured peaks the
// curves divide by), `memory`, `efficiency`, `overhead` and `stages`, as
// planner/config_load.c reads a calibrated file. RG_INVALID_ARGUMENT when r
// has no class; RG_IO when f fails.
RG_MUST_USE rg_status_t rg_profile_write_class(const rg_profile_result_t *r, FILE *f);

#endif  // RG_RUNTIME_PROFILE_H
