// runtime/engine.h — the single-process pipeline: a model's stage instances
// (runtime/stage.h) on devices of this process, run one batched forward step
// at a time over a paged KV cache.
//
// The engine opens the model, opens its device(s) (the CPU unless told
// otherwise; any HAL device whose backend has the ops), and composes
//
//   embed -> for each layer: attention[range], then ffn[range] or moe[range]
//         -> lm_head
//
// from stage instances, by default one per kind over all layers (or ranges
// of `layers_per_stage` layers: the same kernels in the same order, so the
// same bits). It keeps no sequences: which KV blocks a sequence owns is the
// scheduler's business (sched/), and every forward step names them.
//
//   rg_engine_create ──> engine ──rg_engine_forward(entries)──> logits
//                          │  entries: per sequence its tokens, first
//                          │  position, block table, whether it wants logits
//                          ├─rg_engine_swap(out, in)  copies for sched's swap tier
//                          └─rg_engine_destroy
//
// A step checks every entry (token ids in the vocabulary, blocks in the pool,
// positions within the table and the context limit) before anything runs,
// so a bad step changes nothing. Logits that come out NaN or infinite fail
// the step with an error naming the first stage and layer whose output was
// not finite (the step is re-run with a check after every stage to find it).
//
// Ownership: rg_engine_create returns an engine the caller destroys; the
// model, tokenizer, stages and counters it hands out are borrowed. Not
// thread-safe: one caller drives it.
#ifndef RG_RUNTIME_ENGINE_H
#define RG_RUNTIME_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "graphs/graphs.h"
#include "graphs/tokenizer.h"
#include "runtime/model.h"
#include "runtime/stage.h"
#include "runtime/step.h"

typedef struct rg_engine_s rg_engine_t;

typedef struct {
  // Devices as "driver:index" ("cpu:0", "opencl:0"); NULL = "cpu:0". The
  // feed-forward (ffn and moe) stages may run on another device of this
  // process (NULL = the same); hidden states are copied between them.
  const char *device;
  const char *ffn_device;
  int threads;          // CPU threads; 0 = one per core
  rg_dtype_t kv_dtype;  // RG_F32, RG_BF16 or RG_F16, when kv_dtype_set
  int kv_dtype_set;     // 0: bf16, the dtype models are published in
  int block_size;       // tokens per KV block; 0 = 16
  int64_t kv_tokens;    // KV capacity in tokens over all sequences; 0 = max_seqs * max_context
  int64_t max_context;  // per sequence; 0 = min(model maximum, 4096)
  int max_seqs;         // sequences a step may hold; 0 = 16
  int64_t swap_tokens;  // host-memory swap tier for preempted KV, in tokens; 0 = none
  // A capacity tier for idle cached KV (sessions that come back), in
  // tokens; 0 = none. Host memory, standing in for host DRAM or SSD.
  int64_t tier_tokens;
  // Cap on the CPU kernels' instruction set (RG_CPU_ISA_AUTO = the best the
  // CPU has), for this engine's devices only. AVX512 rather than
  // AVX512_BF16 keeps activations in f32 in bf16 matmuls: slower, but exact
  // to f32 rounding, for checking.
  int isa;  // an rg_cpu_isa_t from ops/convert.h
  // Batch-invariant CPU kernels: each request's tokens come out the same
  // whatever it is batched with, or whether it was preempted and
  // recomputed (rg_matmul_opts_t.batch_invariant). Off: batch-1 decode
  // takes the faster GEMV.
  int batch_invariant;
  // How CPU matrices are held: AUTO copies them into huge-page memory when
  // the weights fit in a quarter of RAM (decode streams them faster), else
  // they run from the read-only file mapping.
  enum { RG_LOAD_AUTO, RG_LOAD_MMAP, RG_LOAD_COPY } load;
  // 0: one stage instance per kind over all layers; N: instances over
  // ranges of N layers (the same results, bit for bit).
  int layers_per_stage;
} rg_engine_options_t;

// Whether a process holding model m's weights copies them (load: one of
// RG_LOAD_*; AUTO by the rule above, against this machine's memory). The
// engine and the cluster's workers decide by it, each on its own host.
int rg_engine_copies_weights(int load, const rg_model_t *m);

RG_MUST_USE rg_status_t rg_engine_create(const char *model_path, const rg_engine_options_t *opt,
                                         rg_engine_t **out);
void rg_engine_destroy(rg_engine_t *e);

const rg_model_t *rg_engine_model(const rg_engine_t *e);
const rg_arch_t *rg_engine_arch(const rg_engine_t *e);
// The tokenizer found beside the weights (tokenizer.json, or the GGUF
// vocabulary), or NULL when the model ships none.
const rg_tokenizer_t *rg_engine_tokenizer(const rg_engine_t *e);
int64_t rg_engine_vocab(const rg_engine_t *e);
const char *rg_engine_describe(const rg_engine_t *e);      // "llama, 2 layers, bf16 weights, ..."
double rg_engine_weight_bytes(const rg_engine_t *e);       // bytes of weights the stages hold
int rg_engine_threads(const rg_engine_t *e);               // of the CPU device, 0 when none
const char *rg_engine_device_name(const rg_engine_t *e);   // the main device's name
const char *rg_engine_device_label(const rg_engine_t *e);  // "cpu:0"
struct rg_pool_s *rg_engine_pool(const rg_engine_t *e);    // the CPU device's pool, or NULL

// The rate, bytes/s, at which the CPU's threads read the weights the
// stages stream, where a decode step really streams them: the median of
// `passes` passes over their own memory (rg_limits_read_spans). 0 where
// there is no such reading to be had: no stage on the CPU, or weights that
// a cache of the host would hold (under twice its largest; they come from
// there, not memory; under 256 MiB too, for machines that list no caches). *bytes, when not NULL,
// gets the bytes read (or that would have been).
double rg_engine_stream_bandwidth(rg_engine_t *e, int passes, double *bytes);

// The KV pool: blocks, tokens per block, the context limit, the sequence
// cap, and the swap tier's blocks (0: none). A scheduler is sized from these.
int64_t rg_engine_kv_blocks(const rg_engine_t *e);
int rg_engine_block_size(const rg_engine_t *e);
int64_t rg_engine_max_context(const rg_engine_t *e);
int rg_engine_max_seqs(const rg_engine_t *e);
int64_t rg_engine_swap_blocks(const rg_engine_t *e);
int64_t rg_engine_tier_blocks(const rg_engine_t *e);
double rg_engine_kv_bytes(const rg_engine_t *e);  // bytes of the device KV pool(s)

// One entry of a forward step (runtime/step.h): n tokens of one sequence at
// positions [pos, pos + n), its KV in `blocks`. With want_logits, the logits
// after its last token go to the next row of `logits`. The fields are those
// of sched's rg_sched_entry_t.
typedef rg_step_entry_t rg_engine_entry_t;

// Runs one step over all entries (prefill chunks and decode tokens mixed);
// logits: one row of rg_engine_vocab() floats per entry with want_logits.
// Entries must be distinct sequences (no two entries share a block they
// write). Errors name the entry and what was wrong; nothing has run then.
RG_MUST_USE rg_status_t rg_engine_forward(rg_engine_t *e, const rg_engine_entry_t *entries,
                                          size_t n, float *logits);

// Copies KV blocks for the scheduler's swap tier: out[i] device src -> tier
// dst, then in[i] tier src -> device dst (sched's rg_sched_copy_t fields).
typedef struct {
  int32_t src, dst;
} rg_engine_copy_t;
// The same for the capacity tier: out = sched's offloads, in = its reloads.
RG_MUST_USE rg_status_t rg_engine_tier(rg_engine_t *e, const rg_engine_copy_t *out, size_t n_out,
                                       const rg_engine_copy_t *in, size_t n_in);
RG_MUST_USE rg_status_t rg_engine_swap(rg_engine_t *e, const rg_engine_copy_t *out, size_t n_out,
                                       const rg_engine_copy_t *in, size_t n_in);

// The stage instances in pipeline order (borrowed).
size_t rg_engine_stage_count(const rg_engine_t *e);
const rg_stage_t *rg_engine_stage_at(const rg_engine_t *e, size_t i);

// What the engine did, summed over its stages since creation (or the last
// reset): the weight, KV and activation bytes and FLOPs graphs' formulas
// give for every step, and the wall time inside rg_engine_forward.
typedef struct {
  double weight_bytes, kv_bytes, flops, seconds;
  int64_t tokens, steps;
} rg_engine_counters_t;
void rg_engine_counters(const rg_engine_t *e, rg_engine_counters_t *out);
void rg_engine_counters_reset(rg_engine_t *e);
// The seconds every stage has counted (rg_stage_counters), summed.
double rg_engine_stages_seconds(const rg_engine_t *e);

// Op timing on every stage's queue (rg_queue_set_profiling), and what it
// has timed, summed over the stages since it began or since
// rg_engine_counters_reset.
void rg_engine_set_op_profiling(rg_engine_t *e, int on);
void rg_engine_op_profile(const rg_engine_t *e, rg_op_profile_t *out);

#endif  // RG_RUNTIME_ENGINE_H
