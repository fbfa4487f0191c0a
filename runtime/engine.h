// runtime/engine.h — a single-device engine: one model, many sequences, a
// paged KV cache, prefill and decode in one batched forward step.
//
// The engine reads a model directory (config.json + safetensors, with its
// tokenizer.json) or a GGUF file, maps the weights (no copy for f32, bf16,
// f16 and Q8_0 matrices), and runs the transformer with ops/ kernels on the
// CPU device of devices/. Later issues split the same stages across devices
// and processes.
//
// Sequences and their KV blocks:
//
//     rg_engine_seq_new ──> [empty] ──forward(n tokens)──> [len n] ──forward──> ...
//                                                            │
//     rg_engine_seq_free <───────────────────────────────────┘ (blocks return to the pool)
//
// A sequence's KV lives in fixed-size blocks taken from one pool on demand
// as it grows; a forward step that needs more blocks than are free fails with
// RG_OUT_OF_MEMORY and changes nothing, so the caller can free sequences and
// retry. The engine is not thread-safe: one caller drives it.
//
// Ownership: rg_engine_create returns an engine the caller destroys; the
// arch, tokenizer and counters it hands out are borrowed.
#ifndef RG_RUNTIME_ENGINE_H
#define RG_RUNTIME_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "graphs/graphs.h"
#include "graphs/tokenizer.h"

typedef struct rg_engine_s rg_engine_t;

typedef struct {
  int threads;          // CPU threads; 0 = one per core
  rg_dtype_t kv_dtype;  // RG_F32, RG_BF16 or RG_F16, when kv_dtype_set
  int kv_dtype_set;     // 0: bf16, the dtype models are published in
  int block_size;       // tokens per KV block; 0 = 16
  int64_t kv_tokens;    // KV capacity in tokens over all sequences; 0 = max_seqs * max_context
  int64_t max_context;  // per sequence; 0 = min(model maximum, 4096)
  int max_seqs;         // 0 = 16
  // Cap on the CPU kernels' instruction set (RG_CPU_ISA_AUTO = the best the
  // CPU has). AVX512 rather than AVX512_BF16 keeps activations in f32 in
  // bf16 matmuls: slower, but exact to f32 rounding, for checking.
  int isa;              // an rg_cpu_isa_t from ops/convert.h
  // How matrices are held: AUTO copies them into huge-page memory when the
  // weights fit in a quarter of RAM (decode streams them faster), else they
  // are used from the read-only file mapping.
  enum { RG_LOAD_AUTO, RG_LOAD_MMAP, RG_LOAD_COPY } load;
} rg_engine_options_t;

RG_MUST_USE rg_status_t rg_engine_create(const char *model_path, const rg_engine_options_t *opt,
                                         rg_engine_t **out);
void rg_engine_destroy(rg_engine_t *e);

const rg_arch_t *rg_engine_arch(const rg_engine_t *e);
// The tokenizer found beside the weights (tokenizer.json, or the GGUF
// vocabulary), or NULL when the model ships none.
const rg_tokenizer_t *rg_engine_tokenizer(const rg_engine_t *e);
int64_t rg_engine_vocab(const rg_engine_t *e);
const char *rg_engine_describe(const rg_engine_t *e);  // "llama, 2 layers, bf16 weights, ..."
double rg_engine_weight_bytes(const rg_engine_t *e);   // bytes of weights mapped
int rg_engine_threads(const rg_engine_t *e);
const char *rg_engine_device_name(const rg_engine_t *e);
struct rg_pool_s *rg_engine_pool(const rg_engine_t *e);

RG_MUST_USE rg_status_t rg_engine_seq_new(rg_engine_t *e, int *out_seq);
void rg_engine_seq_free(rg_engine_t *e, int seq);
int64_t rg_engine_seq_len(const rg_engine_t *e, int seq);
int64_t rg_engine_free_tokens(const rg_engine_t *e);  // KV tokens still free

// One entry of a forward step: append n tokens to seq. With want_logits,
// the logits after its last token go to the next row of `logits`.
typedef struct {
  int seq;
  const int32_t *tokens;
  int64_t n;
  int want_logits;
} rg_batch_entry_t;

// Runs one step over all entries (prefill chunks and decode tokens mixed);
// logits: one row of rg_engine_vocab() floats per entry with want_logits.
RG_MUST_USE rg_status_t rg_engine_forward(rg_engine_t *e, const rg_batch_entry_t *entries, size_t n,
                                          float *logits);

// What the engine did, summed since creation (or the last reset): bytes of
// weights streamed by matmuls, KV bytes read by attention, FLOPs of matmuls
// and attention, and wall time inside rg_engine_forward.
typedef struct {
  double weight_bytes, kv_bytes, flops, seconds;
  int64_t tokens, steps;
} rg_engine_counters_t;
void rg_engine_counters(const rg_engine_t *e, rg_engine_counters_t *out);
void rg_engine_counters_reset(rg_engine_t *e);

#endif  // RG_RUNTIME_ENGINE_H
