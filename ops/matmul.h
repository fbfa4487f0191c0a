// ops/matmul.h — the matmul every transformer layer runs: y = x W^T (+ bias).
//
//   x     (m, k)  f32 activations, one row per token, rows contiguous
//   W     (n, k)  weights stored row-major as (out_features, in_features),
//                 like a PyTorch Linear or a safetensors/GGUF weight, in any
//                 rg_wtype_t (f32, bf16, f16, q8_0)
//   bias  (n)     f32, optional
//   y     (m, n)  f32; y[i][j] = sum_p x[i][p] * W[j][p] + bias[j]
//
// Products and sums are f32 on every path (the reference sums in double).
// Weights are widened to f32 exactly inside the kernels, so the fast paths
// differ from the reference only by f32 summation order.
//
// Two regimes, picked per call from m (see rg_matmul_kernel_name()):
//   GEMV  small m (decode): memory-bound. Each weight row is streamed from
//         memory once per call and dotted with all m rows of x, which stay
//         in cache; output rows are split across the pool's threads. Kernels
//         for avx512, avx2 and scalar, chosen at run time.
//   GEMM  large m (prefill): compute-bound. OpenBLAS sgemm, called
//         single-threaded from each pool thread on its share of the output
//         columns; bf16/f16/q8_0 weights are first widened tile by tile into
//         a per-thread f32 buffer (a small cost next to the O(m) reuse).
//
// Threads: pool may be NULL (the caller's thread does everything). The GEMM
// path sets OpenBLAS to one thread (openblas_set_num_threads(1), a
// process-wide setting) so that the pool alone decides how many cores run:
// never pool threads × OpenBLAS threads. One call at a time per pool.
//
// Ownership: nothing is kept past the call; x, W, bias are only read; y must
// not overlap x, W or bias.
#ifndef RG_OPS_MATMUL_H
#define RG_OPS_MATMUL_H

#include <stdint.h>

#include "base/status.h"
#include "devices/cpu/pool.h"
#include "ops/convert.h"

typedef struct {
  const void *data;  // (rows, cols) in `type`; row r starts at r * rg_wtype_row_bytes(type, cols)
  rg_wtype_t type;
  int64_t rows;  // n: output features
  int64_t cols;  // k: input features; a multiple of 32 for q8_0
} rg_wmat_t;

#define RG_MATMUL_PATH_MAP(X)   \
  X(RG_MATMUL_AUTO, "auto")     \
  X(RG_MATMUL_GEMV, "gemv")     \
  X(RG_MATMUL_GEMM, "gemm")

typedef enum {
#define RG_X_(p, n) p,
  RG_MATMUL_PATH_MAP(RG_X_)
#undef RG_X_
  RG_MATMUL_PATH_COUNT
} rg_matmul_path_t;

// Overrides for tests and benchmarks; a zeroed struct (or NULL) means the
// defaults: the best instruction set and the path chosen from m.
typedef struct {
  rg_cpu_isa_t isa;       // cap on the kernels' instruction set
  rg_matmul_path_t path;  // force GEMV or GEMM regardless of m
} rg_matmul_opts_t;

// y = x W^T (+ bias); bias may be NULL. m = 0 does nothing. Fails with
// RG_INVALID_ARGUMENT (and writes nothing) for NULL pointers, negative m,
// rows or cols < 1, an unknown type, or q8_0 cols not a multiple of 32.
RG_MUST_USE rg_status_t rg_matmul(rg_pool_t *pool, const float *x, int64_t m, const rg_wmat_t *w,
                                  const float *bias, float *y);
// Same, with overrides. An isa above what the CPU has fails with RG_UNAVAILABLE.
RG_MUST_USE rg_status_t rg_matmul_ex(rg_pool_t *pool, const float *x, int64_t m,
                                     const rg_wmat_t *w, const float *bias, float *y,
                                     const rg_matmul_opts_t *opts);

// The argument checks rg_matmul and rg_matmul_ref make, for callers that
// want to validate a layer once before running it many times.
RG_MUST_USE rg_status_t rg_matmul_check(const float *x, int64_t m, const rg_wmat_t *w,
                                        const float *bias, const float *y);

// Plain loops with double accumulation: the reference every path is tested
// against. Same argument rules as rg_matmul.
RG_MUST_USE rg_status_t rg_matmul_ref(const float *x, int64_t m, const rg_wmat_t *w,
                                      const float *bias, float *y);

// The kernel rg_matmul_ex would run for this weight and m, for reports:
// "avx512 bf16 gemv", "openblas sgemm", "openblas sgemm on avx512 q8_0->f32
// tiles". opts may be NULL. A static string; "invalid" for arguments
// rg_matmul would reject.
const char *rg_matmul_kernel_name(const rg_wmat_t *w, int64_t m);
const char *rg_matmul_kernel_name_ex(const rg_wmat_t *w, int64_t m, const rg_matmul_opts_t *opts);

#endif  // RG_OPS_MATMUL_H
