// runtime/stage.h — stage instances: one kind of a model's work over a layer
// range (and, for MoE, a subset of the experts), bound to one device.
//
// A stage instance owns only its weights (taken from the mapped files: run
// in place on the CPU, copied into huge pages when asked, uploaded to other
// devices), its scratch, and for attention the KV pool of its layers. It
// reads the step's hidden states from a buffer on its device and writes its
// result to one; every kernel runs as an op of the device HAL
// (rg_queue_submit), so the same instance runs on any device whose backend
// has the ops. A single-process pipeline of instances is the engine
// (runtime/engine.h); the same instances spread over worker processes are
// the dataflow runtime.
//
//   kind       input -> output                       per call
//   embed      step tokens -> x (T, d)               once per step
//   attention  x (T, d) -> x += attn(norm(x))        one layer of its range
//   ffn        x (T, d) -> x += ffn(norm(x))         one dense layer of its range
//   moe        x (T, d) -> x += sum over its experts one MoE layer of its range
//   lm_head    x (T, d) -> logits (n_logits, vocab)  once per step
//
// A step, as a pipeline drives it:
//
//   rg_stage_begin(s, &step)   each instance: uploads the step's metadata it
//                              needs (ids, positions, block tables, rows),
//                              grows its scratch
//   rg_stage_run(s, layer, x, logits)  ... in model order
//   rg_stage_end(s)            adds the step to the instance's counters
//
// Counters: FLOPs and bytes come from graphs' rg_stage_costs_batch for the
// step's real shape and the instance's layers and experts, the formulas the
// planner predicts with; seconds are measured around rg_stage_run (after
// the queue has finished the work).
//
// Ownership: rg_stage_create returns an instance the caller destroys before
// the model it came from is closed; it keeps a reference on its device.
// Buffers passed to run are borrowed for the call.
#ifndef RG_RUNTIME_STAGE_H
#define RG_RUNTIME_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "devices/devices.h"
#include "graphs/graphs.h"
#include "runtime/limits.h"
#include "runtime/model.h"

typedef struct rg_stage_s rg_stage_t;
// One step in flight on an instance (its scratch and the step's metadata on
// the device). An instance has one of its own, used when NULL is passed; a
// pipeline that keeps two micro-batches in flight gives each its own.
typedef struct rg_stage_ctx_s rg_stage_ctx_t;
typedef struct rg_weight_cache_s rg_weight_cache_t;

typedef struct {
  rg_stage_kind_t kind;            // EMBED, ATTENTION, FFN, MOE or LM_HEAD
  int64_t layer_begin, layer_end;  // attention, ffn, moe: [begin, end)
  const int32_t *experts;          // moe: the experts it runs, ascending (NULL: all)
  size_t n_experts;
} rg_stage_spec_t;

typedef struct {
  // attention: its KV pool, `kv_blocks` blocks of `block_size` tokens per
  // layer, in kv_dtype (f32, bf16 or f16).
  rg_dtype_t kv_dtype;
  int64_t kv_blocks, block_size;
  // CPU: copy matrices into huge-page memory (decode streams them faster)
  // rather than run from the read-only file mapping. Other devices upload.
  int copy_weights;
  // Optional: weights shared between instances on one device (a tied
  // embedding table, a router both halves of an expert split read). Owned
  // by the caller, outliving the instances.
  rg_weight_cache_t *cache;
} rg_stage_options_t;

// The tokens of one step, host side: token t is tokens[t] of sequence seq[t]
// at position pos[t]; sequence s's block table is
// table[table_off[s] .. table_off[s+1]); lm_head computes the rows
// logit_rows[0 .. n_logits). shape (n_seqs) is what each sequence adds and
// already holds, for the counters.
typedef struct {
  int64_t n_tokens, n_seqs, n_table, n_logits;
  const int32_t *tokens, *seq, *pos;
  const int32_t *table_off, *table;
  const int32_t *logit_rows;
  const rg_seq_step_t *shape;
} rg_step_t;

typedef struct {
  double flops, weight_bytes, kv_bytes, act_bytes;  // from graphs' formulas
  double seconds;                                   // measured
  int64_t steps, tokens;
  // Calls that began after their process had waited at least
  // RG_STAGE_COLD_IDLE_S with nothing to run (for another worker's data, or
  // the next step): they start on caches, clocks and pool threads gone
  // idle, and the cost model adds its `cold` figure for each. Counted by
  // the cluster's workers; a single process runs its stages back to back.
  int64_t cold_calls;
} rg_stage_counters_t;

// How long a worker must have waited before its next stage call counts as
// cold, and the wait `ridge profile` measures the cold call after (a
// layer's hop to another worker and back takes 0.5-1.5 ms on this
// project's 2-core machines).
#define RG_STAGE_COLD_IDLE_S 200e-6
#define RG_STAGE_COLD_GAP_S 1e-3

// The op kinds a stage of this kind submits (*ops: a static list), and how
// many: what a device must run for it, and which first-use costs a process
// running it pays (rg_class_process_first).
size_t rg_stage_kind_ops(rg_stage_kind_t kind, const rg_op_kind_t **ops);

RG_MUST_USE rg_status_t rg_weight_cache_create(rg_weight_cache_t **out);
void rg_weight_cache_destroy(rg_weight_cache_t *c);

// Fails, naming the stage, on a spec the model cannot have (a layer range
// outside it, an ffn range without dense layers, an expert outside the
// model, a KV pool that does not fit) and on a device that lacks an op the
// stage needs, before any weight is loaded.
RG_MUST_USE rg_status_t rg_stage_create(const rg_model_t *m, const rg_stage_spec_t *spec,
                                        rg_device_t *dev, const rg_stage_options_t *opts,
                                        rg_stage_t **out);
void rg_stage_destroy(rg_stage_t *s);

const rg_stage_spec_t *rg_stage_spec(const rg_stage_t *s);
const char *rg_stage_name(const rg_stage_t *s);  // "attention[0,22) on cpu:0"
rg_device_t *rg_stage_device(const rg_stage_t *s);
rg_queue_t *rg_stage_queue(const rg_stage_t *s);
// Bytes of weights this instance holds, and of its KV pool.
double rg_stage_weight_bytes(const rg_stage_t *s);
double rg_stage_kv_bytes(const rg_stage_t *s);
// The host memory of the matrices this instance streams (every weight
// matrix but embed's table, whose rows it gathers), on a device that
// computes in host memory (the CPU): up to max spans into out, and how many
// there are (0 on other devices).
size_t rg_stage_weight_spans(rg_stage_t *s, rg_limits_span_t *out, size_t max);
// 1 when the instance runs this layer (attention, ffn, moe).
int rg_stage_has_layer(const rg_stage_t *s, int64_t layer);

RG_MUST_USE rg_status_t rg_stage_ctx_create(rg_stage_t *s, rg_stage_ctx_t **out);
void rg_stage_ctx_destroy(rg_stage_ctx_t *c);
// The context's normed hidden states (T, d) f32, on the instance's device:
// after an moe run, norm(x) of that layer; before a run with
// RG_STAGE_NORM_GIVEN, where the caller puts it. An expert split across
// instances hands it from the first to the next, since the first has already
// added its experts into x.
rg_buffer_t *rg_stage_ctx_hidden(rg_stage_ctx_t *c);

// c may be NULL (the instance's own context) in each of these.
RG_MUST_USE rg_status_t rg_stage_begin(rg_stage_t *s, rg_stage_ctx_t *c, const rg_step_t *step);
// x: (T, d) f32 on the instance's device; logits: (n_logits, vocab) f32 for
// lm_head (NULL for the others). layer is ignored by embed and lm_head.
RG_MUST_USE rg_status_t rg_stage_run(rg_stage_t *s, rg_stage_ctx_t *c, int64_t layer,
                                     rg_buffer_t *x, rg_buffer_t *logits);
// moe: the normed input is already in rg_stage_ctx_hidden(c).
#define RG_STAGE_NORM_GIVEN 1u
RG_MUST_USE rg_status_t rg_stage_run_ex(rg_stage_t *s, rg_stage_ctx_t *c, int64_t layer,
                                        rg_buffer_t *x, rg_buffer_t *logits, unsigned flags);
void rg_stage_end(rg_stage_t *s, rg_stage_ctx_t *c);
// Drops the step without counting it (a step run again to diagnose it).
void rg_stage_cancel(rg_stage_t *s, rg_stage_ctx_t *c);

// Block copies for the scheduler's swap tier: n blocks of every layer of the
// pool between the device pool and a host-visible tier buffer laid out as
// (tier blocks, layers of this instance, K|V, one block). to_tier 1:
// device -> tier (swap out), 0: tier -> device.
RG_MUST_USE rg_status_t rg_stage_kv_copy(rg_stage_t *s, rg_buffer_t *tier, const int32_t *src,
                                         const int32_t *dst, size_t n, int to_tier);
// Bytes one block takes in a tier buffer (all of this instance's layers).
size_t rg_stage_kv_block_bytes(const rg_stage_t *s);
// The KV pool (NULL for instances without one, borrowed) and its layout:
// layer i of the instance (from spec.layer_begin) keeps K at i * 2 *
// layer_bytes and V at (i * 2 + 1) * layer_bytes; block b of either starts
// b * block_bytes in, holding block_size positions of row_bytes each
// (n_kv_heads * head_dim elements of kv_dtype). What RMA transfers of KV
// pages address.
rg_buffer_t *rg_stage_kv_buffer(const rg_stage_t *s);
typedef struct {
  size_t layer_bytes, block_bytes, row_bytes;
  int64_t n_blocks, block_size;
} rg_stage_kv_layout_t;
void rg_stage_kv_layout(const rg_stage_t *s, rg_stage_kv_layout_t *out);

void rg_stage_counters(const rg_stage_t *s, rg_stage_counters_t *out);
void rg_stage_counters_reset(rg_stage_t *s);

#endif  // RG_RUNTIME_STAGE_H
