// devices/cuda/cuda_bench.h — two measurements of a GPU's own limits that
// are not HAL ops, for bench/bench_cuda.c (and `ridge profile`): how fast it
// streams its memory, and what cuBLAS reaches on a GEMM. Both queue work on
// a cuda queue like any op; time them with rg_queue_wait.
#ifndef RG_DEVICES_CUDA_CUDA_BENCH_H
#define RG_DEVICES_CUDA_CUDA_BENCH_H

#include "devices/devices.h"

// Reads all of src (a multiple of 16 bytes) once with the streaming kernel
// (16-byte evict-first loads, eight blocks per SM); sink (256 bytes) takes
// its checksum so the reads cannot be elided. RG_INVALID_ARGUMENT for a
// queue that is not a cuda queue.
RG_MUST_USE rg_status_t rg__cuda_stream_read(rg_queue_t *q, rg_buffer_t *src, rg_buffer_t *sink);

// y (m, n) f32 = x (m, k) W (n, k)^T with x and W of `type` (f32, bf16,
// f16), straight on cuBLAS (no narrowing of x: pass it in `type`).
// RG_UNAVAILABLE, with the reason, when cuBLAS cannot be used.
RG_MUST_USE rg_status_t rg__cuda_blas_gemm(rg_queue_t *q, rg_dtype_t type, rg_buffer_t *x,
                                           rg_buffer_t *w, rg_buffer_t *y, int64_t m, int64_t n,
                                           int64_t k);

#endif  // RG_DEVICES_CUDA_CUDA_BENCH_H
