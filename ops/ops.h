// ops/ops.h — the transformer kernels ridge runs on a CPU, and their references.
//
// Every op has two implementations with the same signature:
//   rg_op_<name>      fast: splits work over a thread pool and uses AVX-512 or
//                     AVX2 (chosen at run time, see rg_ops_isa), else scalar C;
//   rg_op_<name>_ref  reference: plain loops in ops/ref/, single-threaded,
//                     written to be read (llama2.c run.c style). Tests and
//                     other backends compare against these.
// The pool argument may be NULL (the caller's thread does all the work); the
// reference kernels ignore it.
//
// Conventions
// - Activations are f32, row-major, contiguous; shapes are given in comments
//   as (dim0, dim1, ...). KV caches and embedding tables may be stored in a
//   compact rg_dtype_t (ops/convert.h) and are widened to f32 on load.
// - Ops that can be handed bad input (ids, block tables, routing sizes)
//   return rg_status_t and check everything before writing any output; the
//   others are void and document their preconditions.
// - Unless stated otherwise an output may not alias an input. Exceptions are
//   noted per op ("in place" / "y may equal x").
//
// Ownership: what _create returns belongs to the caller, who _destroys it.
// _init fills a caller-owned struct that _deinit releases. Ops borrow their
// arguments for the duration of the call and keep nothing.
#ifndef RG_OPS_OPS_H
#define RG_OPS_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "base/pool.h"
#include "ops/convert.h"

// ---------------------------------------------------------------------------
// Storage types and instruction-set dispatch
//
// Stored tensors (KV cache, embedding table) use ops/convert.h's rg_dtype_t;
// the KV cache takes f32, bf16 and f16.
//
// Fast kernels run at one ops-wide instruction-set level, by default the
// best this CPU has (rg_cpu_isa_best()). AVX512_BF16 runs the AVX512
// kernels: bf16 dot-product instructions would round queries to bf16, which
// attention's accuracy does not allow. Nothing is compiled with global -m
// flags: each level's functions carry __attribute__((target)).

// Sets the level fast kernels use: RG_CPU_ISA_AUTO for the best, or any
// level up to it (tests and benchmarks run each level this way). Fails with
// RG_UNAVAILABLE, naming the missing feature, above what the CPU has. Not to
// be called while kernels run on other threads.
RG_MUST_USE rg_status_t rg_ops_set_isa(rg_cpu_isa_t want);
// The level in effect on the calling thread (never AUTO): the thread's cap
// when one is pushed, else the process-wide level.
rg_cpu_isa_t rg_ops_isa(void);
// Caps the calling thread's kernels at `cap` (resolved; AUTO = the best)
// until the matching pop, and returns what to pop. Kernels pick their code
// on the calling thread before splitting work, so the cap holds for the
// pool threads too. This is how a device (and so an engine) has its own
// level without touching other engines in the process.
rg_cpu_isa_t rg_ops_isa_push(rg_cpu_isa_t cap);
void rg_ops_isa_pop(rg_cpu_isa_t previous);

// ---------------------------------------------------------------------------
// Normalization, position encoding, activations

// y = x / sqrt(mean(x^2) + eps) * weight, per row.
// x, y: (rows, dim); weight: (dim). y may equal x. Qwen3's QK-norm is this
// op over the heads: rows = n_tokens * n_heads, dim = head_dim.
void rg_op_rmsnorm(rg_pool_t *pool, const float *x, const float *weight, float *y, size_t rows,
                   size_t dim, float eps);
void rg_op_rmsnorm_ref(rg_pool_t *pool, const float *x, const float *weight, float *y, size_t rows,
                       size_t dim, float eps);

// Llama 3.x frequency scaling, the fields of HF's config.rope_scaling with
// rope_type "llama3" (see transformers' _compute_llama3_parameters).
typedef struct {
  double factor;                            // 8 for Llama 3.1
  double low_freq_factor;                   // 1
  double high_freq_factor;                  // 4
  double original_max_position_embeddings;  // 8192
} rg_rope_scaling_t;

// Rotary embedding table: inv_freq[i] = theta^(-2i/head_dim), i < head_dim/2,
// computed in f32 as HF does, then rescaled when scaling is given.
typedef struct {
  size_t head_dim;  // even
  float *inv_freq;  // (head_dim / 2)
} rg_rope_t;

// Fails on an odd or zero head_dim, theta <= 1, or scaling with factor < 1
// or high_freq_factor <= low_freq_factor. scaling may be NULL.
RG_MUST_USE rg_status_t rg_rope_init(rg_rope_t *rope, size_t head_dim, double theta,
                                     const rg_rope_scaling_t *scaling);
void rg_rope_deinit(rg_rope_t *rope);

// In place on x: (n_tokens, n_heads, head_dim); token t sits at positions[t].
// Rotate-half ("NeoX", HF Llama) layout: element i pairs with i + head_dim/2:
//   x'[i]       = x[i] cos(a_i) - x[i+h] sin(a_i)
//   x'[i+h]     = x[i+h] cos(a_i) + x[i] sin(a_i),  a_i = pos * inv_freq[i]
// The angle is the f32 product pos*inv_freq[i], as in HF, and its cosine and
// sine are evaluated in double. Positions may be any int32 (negative rotates
// backwards).
void rg_op_rope(rg_pool_t *pool, const rg_rope_t *rope, float *x, size_t n_tokens, size_t n_heads,
                const int32_t *positions);
void rg_op_rope_ref(rg_pool_t *pool, const rg_rope_t *rope, float *x, size_t n_tokens,
                    size_t n_heads, const int32_t *positions);

// In place on x: (rows, n), each row replaced by its softmax, computed as
// exp(x - max) / sum. Entries may be -inf (masked: they get 0). A row that
// is all -inf becomes all zeros (no probability mass, rather than NaN), so a
// fully masked row contributes nothing downstream. NaN in a row gives NaN
// out; +inf entries are not supported (the row becomes NaN).
void rg_op_softmax(rg_pool_t *pool, float *x, size_t rows, size_t n);
void rg_op_softmax_ref(rg_pool_t *pool, float *x, size_t rows, size_t n);

// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)); n elements. out may
// equal gate or up. (gpt-oss's clamped variant, alpha 1.702 and limit 7, is
// not this op.)
void rg_op_swiglu(rg_pool_t *pool, const float *gate, const float *up, float *out, size_t n);
void rg_op_swiglu_ref(rg_pool_t *pool, const float *gate, const float *up, float *out, size_t n);

// out = a + b over n elements; out may equal a or b (the residual add).
void rg_op_add(rg_pool_t *pool, const float *a, const float *b, float *out, size_t n);
void rg_op_add_ref(rg_pool_t *pool, const float *a, const float *b, float *out, size_t n);

// ---------------------------------------------------------------------------
// Embedding lookup

// out[i] = table[ids[i]] widened to f32. table: (vocab, dim) of type, any
// rg_dtype_t (a q8_0 row is dim/32 blocks); ids: (n); out: (n, dim). Fails,
// naming the id, its index and the vocab size, when an id is negative or
// >= vocab, and on a dim the type cannot hold; out is untouched then.
RG_MUST_USE rg_status_t rg_op_embed(rg_pool_t *pool, const void *table, rg_dtype_t type,
                                    size_t vocab, const int32_t *ids, size_t n, size_t dim,
                                    float *out);
RG_MUST_USE rg_status_t rg_op_embed_ref(rg_pool_t *pool, const void *table, rg_dtype_t type,
                                        size_t vocab, const int32_t *ids, size_t n, size_t dim,
                                        float *out);

// ---------------------------------------------------------------------------
// Paged KV cache and attention
//
// Each layer owns a pool of blocks; a block holds `block_size` consecutive
// positions of one sequence. Within a block, K and V are each stored as
//   (n_kv_heads, block_size, head_dim)  elements of dtype (f32, bf16, f16),
// so one head's keys for a block are one contiguous run — the unit attention
// streams. Block b of a layer starts at element b * n_kv_heads * block_size
// * head_dim of that layer's k (and v) array. A sequence's block table lists
// its blocks in order: position p lives in block blocks[p / block_size] at
// slot p % block_size. Which blocks are free is the scheduler's business
// (sched/), not this module's.

// One layer's blocks: a borrowed view, valid while its storage lives.
typedef struct {
  rg_dtype_t dtype;  // f32, bf16 or f16
  size_t n_blocks, block_size, n_kv_heads, head_dim;
  void *k;  // (n_blocks, n_kv_heads, block_size, head_dim) of dtype
  void *v;  // (n_blocks, n_kv_heads, block_size, head_dim) of dtype
} rg_kv_layer_t;

// Host-memory KV cache for all layers (64-byte aligned, zero-filled).
typedef struct rg_kv_cache_s rg_kv_cache_t;
RG_MUST_USE rg_status_t rg_kv_cache_create(rg_dtype_t dtype, size_t n_layers, size_t n_blocks,
                                           size_t block_size, size_t n_kv_heads, size_t head_dim,
                                           rg_kv_cache_t **out);
void rg_kv_cache_destroy(rg_kv_cache_t *cache);
// The view of one layer (layer < n_layers); its pointers are borrowed.
rg_kv_layer_t rg_kv_cache_layer(const rg_kv_cache_t *cache, size_t layer);

// A sequence's block table.
typedef struct {
  const int32_t *blocks;  // (n_blocks) block ids of the layer's pool, in position order
  size_t n_blocks;        // capacity: positions 0 .. n_blocks*block_size - 1
} rg_block_table_t;

// The tokens of one step: any number of tokens from any number of
// sequences, in any order (a decode batch, prefill chunks, or both).
typedef struct {
  size_t n_tokens;
  const int32_t *seq;              // (n_tokens) index into tables of each token's sequence
  const int32_t *pos;              // (n_tokens) each token's position in its sequence (>= 0)
  const rg_block_table_t *tables;  // (n_seqs)
  size_t n_seqs;
} rg_attn_batch_t;

// Checks a batch against a layer: sequence indices, positions within their
// table's capacity, block ids within the pool, and the layer's own shape.
// rg_op_kv_write and rg_op_attention call it first.
RG_MUST_USE rg_status_t rg_attn_batch_check(const rg_kv_layer_t *kv, const rg_attn_batch_t *b);

// Writes each token's K and V into its slot, converting to the cache dtype.
// k, v: (n_tokens, n_kv_heads, head_dim). Two tokens of a batch must not
// share a (sequence, position) slot.
RG_MUST_USE rg_status_t rg_op_kv_write(rg_pool_t *pool, const rg_kv_layer_t *kv,
                                       const rg_attn_batch_t *b, const float *k, const float *v);
RG_MUST_USE rg_status_t rg_op_kv_write_ref(rg_pool_t *pool, const rg_kv_layer_t *kv,
                                           const rg_attn_batch_t *b, const float *k,
                                           const float *v);

typedef struct {
  size_t n_heads;       // query heads: a multiple of the layer's n_kv_heads. Query
                        // head h reads kv head h / (n_heads / n_kv_heads) (GQA;
                        // MQA is n_kv_heads 1, MHA n_kv_heads == n_heads)
  float scale;          // logit scale; 0 means 1/sqrt(head_dim)
  size_t window;        // 0: full causal; W > 0: a token at p sees only
                        // positions p-W+1 .. p (sliding window, gpt-oss / Mistral)
  const float *sinks;   // NULL, or (n_heads) learned per-head sink logits
                        // (gpt-oss): each adds exp(sink) to its head's
                        // softmax denominator and nothing to the output
  int batch_invariant;  // 1: one numerical path per query row whatever the
                        // batch or chunk it comes in (the CPU device's
                        // batch-invariant mode, see ops/matmul.h); 0 lets
                        // prefill runs of bf16 KV take the AMX tiles, which
                        // round queries and probabilities to bf16 where a
                        // decode token keeps them in f32
} rg_attn_params_t;

// Causal attention over the paged cache. q: (n_tokens, n_heads, head_dim);
// o: (n_tokens, n_heads, head_dim). A token at position p attends to
// positions 0..p (or its window) of its own sequence, which must already be
// in the cache — itself included (call rg_op_kv_write first). The fast
// kernel splits work over (token, kv head) pairs, reads each key and value
// once for the whole GQA group, and keeps an online (flash-style) softmax:
// its scratch is O(group * head_dim) per thread whatever the context length.
// When there are fewer pairs than threads to keep busy (decode of one or two
// sequences, MQA) it also splits long contexts into parts and merges their
// partial softmax states, adding O(parts * n_heads * head_dim) per token.
// At the amx level, prefill runs (consecutive positions of one sequence) of
// bf16 KV with head_dim a multiple of 32, up to 256, run on the AMX tiles
// unless params->batch_invariant: queries and probabilities are rounded to
// bf16 there (NMSE ~4e-6 against the reference, 1e-14 in f32), and the
// runs' values are packed once into scratch of the same size as their KV
// (run length * n_kv_heads * head_dim bf16).
// Allocation failure of that scratch is its only error besides bad input.
RG_MUST_USE rg_status_t rg_op_attention(rg_pool_t *pool, const rg_kv_layer_t *kv,
                                        const rg_attn_batch_t *b, const rg_attn_params_t *params,
                                        const float *q, float *o);
RG_MUST_USE rg_status_t rg_op_attention_ref(rg_pool_t *pool, const rg_kv_layer_t *kv,
                                            const rg_attn_batch_t *b,
                                            const rg_attn_params_t *params, const float *q,
                                            float *o);

// ---------------------------------------------------------------------------
// Mixture of experts: routing and dispatch
//
// A forward pass over T tokens with E experts and k experts per token:
//   rg_op_moe_route      logits (T, E)  -> idx (T, k), w (T, k)
//   rg_op_moe_group      idx            -> per-expert lists of rows r = t*k + slot
//   for each expert e with rows[offsets[e] .. offsets[e+1]):
//     rg_op_moe_gather       x (T, dim) -> xe (n_e, dim)
//     (the expert's FFN on xe, n_e rows at once) -> ye (n_e, dim)
//     rg_op_moe_scatter_add  out[t] += w[r] * ye[i]
//
// These are bookkeeping and copies, bound by memory: their fast versions are
// plain C split over the pool (moe_group is one sequential counting sort).
// DeepSeek-style sigmoid scoring with grouped top-k is not among the modes.

#define RG_MOE_MODE_MAP(X)                                                                   \
  X(RG_MOE_SOFTMAX_TOPK_RENORM, "softmax_topk_renorm") /* Mixtral, Qwen3-MoE */              \
  X(RG_MOE_SOFTMAX_TOPK, "softmax_topk")               /* Qwen2-MoE, norm_topk_prob false */ \
  X(RG_MOE_TOPK_SOFTMAX, "topk_softmax")               /* gpt-oss */

// clang-format off
typedef enum {
#define RG_X_(c, n) c,
  RG_MOE_MODE_MAP(RG_X_)
#undef RG_X_
  RG_MOE_MODE_COUNT
} rg_moe_mode_t;
// clang-format on

const char *rg_moe_mode_name(rg_moe_mode_t mode);

// Picks each token's k experts. logits: (T, E); out_idx, out_w: (T, k),
// slots in decreasing weight, equal logits broken by lower expert index.
//   SOFTMAX_TOPK_RENORM: softmax over all E, keep the top k, rescale to sum 1.
//   SOFTMAX_TOPK:        softmax over all E, keep the top k as they are.
//   TOPK_SOFTMAX:        top k logits, softmax over those k. (Equal to
//                        SOFTMAX_TOPK_RENORM up to rounding; both exist so a
//                        model's config maps to one name.)
// Fails when k is 0 or above E, or mode is unknown.
RG_MUST_USE rg_status_t rg_op_moe_route(rg_pool_t *pool, const float *logits, size_t T, size_t E,
                                        size_t k, rg_moe_mode_t mode, int32_t *out_idx,
                                        float *out_w);
RG_MUST_USE rg_status_t rg_op_moe_route_ref(rg_pool_t *pool, const float *logits, size_t T,
                                            size_t E, size_t k, rg_moe_mode_t mode,
                                            int32_t *out_idx, float *out_w);

// Groups the T*k (token, slot) pairs by expert with a stable counting sort.
// idx: (T, k) expert ids; out_offsets: (E + 1); out_rows: (T * k). Expert e
// owns out_rows[out_offsets[e] .. out_offsets[e+1]), each entry a flat pair
// index r = t*k + slot (token r / k, weight w[r]), ascending. Fails on an id
// outside 0..E-1 or T*k above INT32_MAX.
RG_MUST_USE rg_status_t rg_op_moe_group(const int32_t *idx, size_t T, size_t k, size_t E,
                                        int32_t *out_offsets, int32_t *out_rows);
RG_MUST_USE rg_status_t rg_op_moe_group_ref(const int32_t *idx, size_t T, size_t k, size_t E,
                                            int32_t *out_offsets, int32_t *out_rows);

// out[i] = x[rows[i] / k] for i < n. x: (T, dim); rows: (n); out: (n, dim).
void rg_op_moe_gather(rg_pool_t *pool, const float *x, const int32_t *rows, size_t n, size_t k,
                      size_t dim, float *out);
void rg_op_moe_gather_ref(rg_pool_t *pool, const float *x, const int32_t *rows, size_t n, size_t k,
                          size_t dim, float *out);

// out[rows[i] / k] += w[rows[i]] * y[i] for i < n, in order of i (so results
// do not depend on the thread count). y: (n, dim); w: (T * k); out: (T, dim)
// — pass the residual stream to add into it, or zeros.
void rg_op_moe_scatter_add(rg_pool_t *pool, const float *y, const int32_t *rows, size_t n, size_t k,
                           const float *w, size_t dim, float *out);
void rg_op_moe_scatter_add_ref(rg_pool_t *pool, const float *y, const int32_t *rows, size_t n,
                               size_t k, const float *w, size_t dim, float *out);

// ---------------------------------------------------------------------------
// Sampling
//
// A sampler belongs to one sequence and draws its tokens. Randomness comes
// from splitmix64 (Steele, Lea & Flood 2014): one 64-bit word of state, a few
// lines, passes BigCrush, accepts any seed, and gives the same stream on every
// machine, so a seed reproduces a generation bit for bit. Its quality is more
// than sampling needs; its portability and size are why it is here.
//
// Order, as in HF transformers: logits / temperature -> top-k -> softmax ->
// top-p (smallest set of most probable tokens whose mass reaches top_p) ->
// draw. temperature 0 is greedy: the argmax, ties to the lower id.

typedef struct {
  float temperature;  // 0: greedy; else > 0
  int32_t top_k;      // 0: off; else keep the k highest logits (ties: lower id)
  float top_p;        // 1: off; else in (0, 1]
  uint64_t seed;
} rg_sampler_config_t;

typedef struct rg_sampler_s rg_sampler_t;

// Fails on a negative or NaN temperature, top_k < 0, top_p outside (0, 1],
// or vocab 0 or above INT32_MAX.
RG_MUST_USE rg_status_t rg_sampler_create(const rg_sampler_config_t *config, size_t vocab,
                                          rg_sampler_t **out);
void rg_sampler_destroy(rg_sampler_t *s);
// Draws one token from logits (vocab); logits are not modified.
int32_t rg_sampler_sample(rg_sampler_t *s, const float *logits);

// The candidates a draw picks from: writes ids and probabilities (summing to
// 1) and returns their count. With top-k or top-p on they come most probable
// first (ties: lower id); with neither, all vocab ids in id order.
// out_idx, out_prob: room for vocab entries. Greedy configs (temperature 0)
// give the one argmax token. config must be valid (see rg_sampler_create).
size_t rg_sample_filter(const rg_sampler_config_t *config, const float *logits, size_t vocab,
                        int32_t *out_idx, float *out_prob);
size_t rg_sample_filter_ref(const rg_sampler_config_t *config, const float *logits, size_t vocab,
                            int32_t *out_idx, float *out_prob);

// One draw with a given uniform u in [0, 1): the candidates of
// rg_sample_filter, then the first whose cumulative probability exceeds u.
// Greedy configs ignore u. rg_sampler_sample is this with u from its own
// stream, so a sampler's stream and rg_sampler_uniform reproduce it on any
// device. scratch_idx, scratch_prob: room for vocab entries.
int32_t rg_sample_draw(const rg_sampler_config_t *config, const float *logits, size_t vocab, double u,
                       int32_t *scratch_idx, float *scratch_prob);
int32_t rg_sample_draw_ref(const rg_sampler_config_t *config, const float *logits, size_t vocab, double u,
                           int32_t *scratch_idx, float *scratch_prob);
// The sampler's config, and the next uniform of its stream (what
// rg_sampler_sample would draw with; greedy samplers draw none).
const rg_sampler_config_t *rg_sampler_config(const rg_sampler_t *s);
double rg_sampler_uniform(rg_sampler_t *s);

#endif  // RG_OPS_OPS_H
