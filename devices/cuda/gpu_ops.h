// devices/cuda/gpu_ops.h — HAL ops as GPU kernel launches, for the backends
// that run ridge's CUDA C kernels (ops/cuda): devices/cuda, and devices/hip
// with the same sources built by hipcc. What differs between vendors — how
// a kernel is launched, where scratch memory comes from, whether a vendor
// BLAS is there — is the table of functions a backend fills in; which
// kernels run, on what grid, with which argument struct, is decided here
// once. Private to devices/cuda/ and devices/hip/.
//
// Per call, rg__gpu_submit turns one rg_op_t (already checked by the queue
// and by rg__gpu_check_op) into launches on the backend's stream, in order.
// It never reads device memory, except for the sample op's non-greedy rows,
// whose logits it reads back to draw on the host with ops/'s sampler (the
// same draw as the CPU's), after a wait on the stream.
#ifndef RG_DEVICES_CUDA_GPU_OPS_H
#define RG_DEVICES_CUDA_GPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "devices/backend.h"
#include "ops/cuda/kernels.h"

// m at and above which bf16/f16 (and f32) matmuls go to the vendor BLAS when
// it is there: below it the GEMV and tiled kernels keep x in f32.
#define RG_GPU_BLAS_MIN_M 128

typedef struct {
  void *ctx;            // the backend's queue
  const char *label;    // "cuda:0"
  int multiprocessors;  // SMs or CUs: how many blocks keep the GPU busy
  // The device address of an operand (its buffer's base plus the offset);
  // 0 for an absent optional operand.
  uint64_t (*addr)(const rg_ref_t *r);
  // Queues kernel k on the stream with grid (gx, gy, gz), `threads` per
  // block, `smem` bytes of dynamic shared memory and its argument struct.
  rg_status_t (*launch)(void *ctx, rg_cuk_t k, unsigned gx, unsigned gy, unsigned gz,
                        unsigned threads, unsigned smem, const void *args, size_t args_size);
  // Device scratch of at least `bytes`, the queue's own, valid for the work
  // queued after this call until the next call (which may wait and grow it).
  rg_status_t (*scratch)(void *ctx, size_t bytes, uint64_t *out);
  // Waits for the stream, then copies synchronously.
  rg_status_t (*read)(void *ctx, void *dst, uint64_t src, size_t len);
  rg_status_t (*write)(void *ctx, uint64_t dst, const void *src, size_t len);
  // 1 when the vendor BLAS can run gemm on this queue (loading it, and
  // creating its handle, on the first call); NULL or 0: the tiled kernel.
  int (*have_gemm)(void *ctx);
  // y (m, n) f32 = x (m, k) W (n, k)^T with x and W both of `type` (RG_F32,
  // RG_BF16 or RG_F16), f32 accumulation, on the vendor BLAS.
  rg_status_t (*gemm)(void *ctx, rg_dtype_t type, uint64_t x, uint64_t w, uint64_t y, int64_t m,
                      int64_t n, int64_t k);
} rg__gpu_queue_t;

// NULL when the kernels take op as described; else RG_UNIMPLEMENTED naming
// what they lack (a type, a head_dim above 256, more than 32 query heads per
// KV head, an operand not aligned to its element size, a grid too large).
RG_MUST_USE rg_status_t rg__gpu_check_op(const char *label, const rg_op_t *op);

// Queues op (checked) on q's stream.
RG_MUST_USE rg_status_t rg__gpu_submit(const rg__gpu_queue_t *q, const rg_op_t *op);

// Which matmul path rg__gpu_submit takes for m rows of x with wtype
// weights, given whether the vendor BLAS is there: "gemv", "tiled" or
// "blas". For messages, tests and benchmarks.
const char *rg__gpu_matmul_path(int64_t m, rg_dtype_t wtype, int have_blas);

// The GEMV's split of k (ops/cuda/matmul.cu): how many warps share each
// group of W rows, from n, k and the GPU's size.
void rg__gpu_gemv_split(int64_t n, int64_t k, rg_dtype_t wtype, int aligned, int multiprocessors,
                        int32_t *out_ksplit);

// Attention's split of each context: how many parts of how many positions
// (a multiple of 32), for n_tokens tokens of n_kv_heads heads whose longest
// context is at most max_ctx, on a GPU of `multiprocessors`.
void rg__gpu_attention_split(int64_t n_tokens, int64_t n_kv_heads, int64_t max_ctx,
                             int multiprocessors, int64_t *out_splits, int64_t *out_len);

#endif  // RG_DEVICES_CUDA_GPU_OPS_H
