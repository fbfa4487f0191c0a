// ops/cuda/kernels.h — what the host passes to ridge's GPU kernels, shared by
// the C backends (devices/cuda, devices/hip) and the kernel sources
// (ops/cuda/*.cu, built by nvcc for NVIDIA and hipcc for AMD).
//
// Every kernel takes exactly one parameter: one of the structs below, by
// value. So a launch packs one pointer (to the struct) and the C and CUDA
// compilers see one layout from one header; there is no list of loose
// arguments whose order or widths could drift apart between the two sides.
// Device addresses are uint64_t (CUdeviceptr, hipDeviceptr_t), sizes int64_t.
//
// Bad metadata. The host never reads device memory before a launch, so ids,
// positions, block tables and routing indices are clamped inside the
// kernels: nothing is read or written outside an operand whatever they
// hold. What a bad entry gives is stated per kernel (zeros, or the entry
// left out); the CPU backend refuses the same input with an error.
//
// Kernel names: RG_CUDA_KERNELS lists every __global__ function (extern
// "C", so the names are the symbols cuModuleGetFunction looks up). A
// backend resolves all of them when it opens a device; a name missing from
// the embedded modules is a build error caught there, not at a launch.
#ifndef RG_OPS_CUDA_KERNELS_H
#define RG_OPS_CUDA_KERNELS_H

#include <stdint.h>

// X(enum, symbol, argument struct). GEMV kernels exist per weight type and
// per m = 1..8 (the rows of x each weight row is applied to in registers);
// attention per KV type and per head_dim / 32 rounded up to 1, 2, 4 or 8.
// clang-format off
#define RG_CUK_GEMV_M(X, T, t)                                                   \
  X(RG_CUK_GEMV_##T##_1, rg_gemv_##t##_1, rg_cuk_matmul_t)                       \
  X(RG_CUK_GEMV_##T##_2, rg_gemv_##t##_2, rg_cuk_matmul_t)                       \
  X(RG_CUK_GEMV_##T##_3, rg_gemv_##t##_3, rg_cuk_matmul_t)                       \
  X(RG_CUK_GEMV_##T##_4, rg_gemv_##t##_4, rg_cuk_matmul_t)                       \
  X(RG_CUK_GEMV_##T##_5, rg_gemv_##t##_5, rg_cuk_matmul_t)                       \
  X(RG_CUK_GEMV_##T##_6, rg_gemv_##t##_6, rg_cuk_matmul_t)                       \
  X(RG_CUK_GEMV_##T##_7, rg_gemv_##t##_7, rg_cuk_matmul_t)                       \
  X(RG_CUK_GEMV_##T##_8, rg_gemv_##t##_8, rg_cuk_matmul_t)
#define RG_CUK_ATTN_E(X, T, t)                                                   \
  X(RG_CUK_ATTN_##T##_1, rg_attention_##t##_1, rg_cuk_attention_t)               \
  X(RG_CUK_ATTN_##T##_2, rg_attention_##t##_2, rg_cuk_attention_t)               \
  X(RG_CUK_ATTN_##T##_4, rg_attention_##t##_4, rg_cuk_attention_t)               \
  X(RG_CUK_ATTN_##T##_8, rg_attention_##t##_8, rg_cuk_attention_t)

#define RG_CUDA_KERNELS(X)                                                       \
  RG_CUK_GEMV_M(X, F32, f32)                                                     \
  RG_CUK_GEMV_M(X, BF16, bf16)                                                   \
  RG_CUK_GEMV_M(X, F16, f16)                                                     \
  RG_CUK_GEMV_M(X, Q8_0, q8_0)                                                   \
  X(RG_CUK_GEMM_TILED, rg_gemm_tiled, rg_cuk_gemm_t)                             \
  X(RG_CUK_ROWS_TO_16, rg_rows_to_16, rg_cuk_rows16_t)                           \
  X(RG_CUK_BIAS_ADD, rg_bias_add, rg_cuk_bias_t)                                 \
  X(RG_CUK_RMSNORM, rg_rmsnorm, rg_cuk_rmsnorm_t)                                \
  X(RG_CUK_ROPE, rg_rope, rg_cuk_rope_t)                                         \
  X(RG_CUK_SOFTMAX, rg_softmax, rg_cuk_softmax_t)                                \
  X(RG_CUK_KV_WRITE, rg_kv_write, rg_cuk_kv_write_t)                             \
  RG_CUK_ATTN_E(X, F32, f32)                                                     \
  RG_CUK_ATTN_E(X, BF16, bf16)                                                   \
  RG_CUK_ATTN_E(X, F16, f16)                                                     \
  X(RG_CUK_ATTN_MERGE, rg_attention_merge, rg_cuk_attention_t)                   \
  X(RG_CUK_SWIGLU, rg_swiglu, rg_cuk_binary_t)                                   \
  X(RG_CUK_ADD, rg_add, rg_cuk_binary_t)                                         \
  X(RG_CUK_MOE_ROUTE, rg_moe_route, rg_cuk_moe_route_t)                          \
  X(RG_CUK_MOE_GROUP, rg_moe_group, rg_cuk_moe_group_t)                          \
  X(RG_CUK_MOE_GATHER, rg_moe_gather, rg_cuk_moe_rows_t)                         \
  X(RG_CUK_MOE_SCATTER_ADD, rg_moe_scatter_add, rg_cuk_moe_rows_t)               \
  X(RG_CUK_EMBED, rg_embed, rg_cuk_embed_t)                                      \
  X(RG_CUK_CONVERT, rg_convert, rg_cuk_convert_t)                                \
  X(RG_CUK_ARGMAX, rg_argmax, rg_cuk_argmax_t)                                   \
  X(RG_CUK_STREAM_READ, rg_stream_read, rg_cuk_stream_t)

typedef enum {
#define RG_X_(e, s, a) e,
  RG_CUDA_KERNELS(RG_X_)
#undef RG_X_
  RG_CUK_COUNT
} rg_cuk_t;
// clang-format on

// The element types the kernels read, numbered as base/dtype.h's rg_dtype_t
// (checked there by a _Static_assert in devices/cuda/gpu_ops.c).
enum { RG_CUK_F32 = 0, RG_CUK_BF16 = 1, RG_CUK_F16 = 2, RG_CUK_Q8_0 = 6 };

// The largest m a GEMV kernel takes, and the threads of its blocks.
#define RG_CUK_GEMV_MAX_M 8
#define RG_CUK_GEMV_THREADS 256
// Rows of W each warp of a GEMV applies x to.
#define RG_CUK_GEMV_ROWS 2
// The tiled GEMM's output tile (rows of x by rows of W) and its threads.
#define RG_CUK_TILE_M 64
#define RG_CUK_TILE_N 64
#define RG_CUK_TILE_THREADS 256
// Attention: positions a block covers in one split (a multiple of 32).
#define RG_CUK_ATTN_SPLIT 256
// Attention: the most query heads per KV head (one warp each).
#define RG_CUK_ATTN_MAX_GROUP 32

// y (m, n) = x (m, k) W^T (+ bias). GEMV: grid.x = ceil(n / (warps per block
// / ksplit * RG_CUK_GEMV_ROWS)). `aligned` is 1 when x, W's rows and y allow 16-byte
// loads (the host checks the addresses); the kernels fall back to element
// loads otherwise.
typedef struct {
  uint64_t x, w, bias, y;  // bias 0: none
  int64_t m, n, k;
  int64_t w_row_bytes;
  int32_t wtype, aligned;
  int32_t ksplit, pad_;  // GEMV: warps sharing a row group, each a slice of k (1, 2, 4, 8)
} rg_cuk_matmul_t;

// The tiled GEMM for m beyond the GEMV kernels (and any m where cuBLAS is
// absent): grid (ceil(n / TILE_N), ceil(m / TILE_M)), f32 accumulation,
// weights widened in shared memory.
typedef rg_cuk_matmul_t rg_cuk_gemm_t;

// dst (n) of bf16 (to16 = 1) or f16 (to16 = 2) = src (n) f32, rounded to
// nearest even: activations narrowed for cuBLAS's tensor-core GEMM.
typedef struct {
  uint64_t src, dst;
  int64_t n;
  int32_t to16, pad_;
} rg_cuk_rows16_t;

// y (m, n) += bias (n).
typedef struct {
  uint64_t y, bias;
  int64_t m, n;
} rg_cuk_bias_t;

// One block per row.
typedef struct {
  uint64_t x, weight, y;
  int64_t rows, dim;
  float eps, pad_;
} rg_cuk_rmsnorm_t;

// grid (n_tokens, n_heads), head_dim / 2 threads (looping past 1024).
typedef struct {
  uint64_t x, pos, inv_freq;
  int64_t n_tokens, n_heads, head_dim;
} rg_cuk_rope_t;

// One block per row.
typedef struct {
  uint64_t x;
  int64_t rows, n;
} rg_cuk_softmax_t;

// The paged KV pool and the batch's metadata, as devices/op.h describes them.
typedef struct {
  uint64_t k, v;                        // (n_blocks, n_kv_heads, block_size, head_dim) of dtype
  uint64_t seq, pos, table_off, table;  // int32; table 0 when n_table is 0
  int64_t n_blocks, block_size, n_kv_heads, head_dim;
  int64_t n_tokens, n_seqs, n_table;
  int32_t dtype, pad_;
} rg_cuk_kv_t;

// grid (n_tokens, n_kv_heads), head_dim threads. A token whose sequence,
// position or block lies outside its tables writes nothing.
typedef struct {
  rg_cuk_kv_t kv;
  uint64_t k_in, v_in;  // (n_tokens, n_kv_heads, head_dim) f32
} rg_cuk_kv_write_t;

// grid (n_tokens, n_kv_heads, splits), one warp per query head of the GQA
// group. With splits == 1 it writes o; otherwise each split writes its
// partial softmax state to `part` ((n_tokens, n_heads, splits) records of
// head_dim + 2 floats: max, sum, then the unnormalised output) and
// rg_attention_merge combines them. A token whose sequence or position lies
// outside its tables gets zeros; a key in a block outside the pool is left
// out.
typedef struct {
  rg_cuk_kv_t kv;
  uint64_t q, o, sinks, part;  // sinks 0: none
  int64_t n_heads, window, splits, split_len;
  float scale;
  int32_t k_vec;  // 1: K rows are read 16 bytes at a time (head_dim % 8 == 0, aligned pool)
} rg_cuk_attention_t;

// Elementwise, grid-stride.
typedef struct {
  uint64_t a, b, out;
  int64_t n;
} rg_cuk_binary_t;

// One 32-thread block per token; dynamic shared memory E bytes.
typedef struct {
  uint64_t logits, idx, w;
  int64_t T, E, k;
  int32_t mode, pad_;
} rg_cuk_moe_route_t;

// One block. Pairs routed outside 0..E-1 are placed after the last expert's
// rows, in order, and offsets[E] counts only the valid ones.
typedef struct {
  uint64_t idx, offsets, rows;
  int64_t T, k, E;
} rg_cuk_moe_group_t;

// gather: grid (n), out row i = x row rows[i] / k, zeros for a bad row.
// scatter_add: columns across threads, rows in order (deterministic); a bad
// row is left out.
typedef struct {
  uint64_t x, rows, w, out;  // gather reads x; scatter_add reads x as y
  int64_t T, n, k, dim;
} rg_cuk_moe_rows_t;

// grid (n), dim threads (looping). An id outside the vocabulary gives a
// row of zeros.
typedef struct {
  uint64_t table, ids, out;
  int64_t vocab, n, dim, row_bytes;
  int32_t type, pad_;
} rg_cuk_embed_t;

// One warp per 32 elements (a q8_0 block). A q8_0 block holding NaN or inf,
// or whose scale overflows f16, is written with a NaN scale and zero
// quants (the CPU refuses it), so it cannot pass for data.
typedef struct {
  uint64_t src, dst;
  int64_t n;
  int32_t from, to;
} rg_cuk_convert_t;

// One block per row: the argmax, ties to the lower id, NaN never chosen
// (a row of NaN gives 0).
typedef struct {
  uint64_t logits, out;
  int64_t rows, vocab;
} rg_cuk_argmax_t;

// Reads n 16-byte words and writes one sum per block to out (so the reads
// cannot be optimised away): the benchmark's measure of memory bandwidth.
typedef struct {
  uint64_t src, out;
  int64_t n16;
} rg_cuk_stream_t;

#endif  // RG_OPS_CUDA_KERNELS_H
