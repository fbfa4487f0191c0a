// ops/matmul.h — the matmul every transformer layer runs: y = x W^T (+ bias).
//
//   x     (m, k)  f32 activations, one row per token, rows contiguous
//   W     (n, k)  weights stored row-major as (out_features, in_features),
//                 like a PyTorch Linear or a safetensors/GGUF weight, in any
//                 rg_dtype_t (f32, bf16, f16, q8_0, q4_K, q6_K)
//   bias  (n)     f32, optional
//   y     (m, n)  f32; y[i][j] = sum_p x[i][p] * W[j][p] + bias[j]
//
// Accumulation is f32 on every path (the reference sums in double). Weights
// are widened to f32 exactly, so most paths differ from the reference only
// by f32 summation order (NMSE ~1e-13). The exceptions, all at levels from
// avx512-bf16 up, trade x's rounding to bf16 for 2-16 times the
// multiply-adds per instruction (NMSE ~1e-6 per matmul):
//   - bf16 weights at m >= 8 with vdpbf16ps (avx512-bf16);
//   - the AMX tiles (amx level, m from 1 for bf16, 4 for the others;
//     decode included, since they stream bf16 weights faster than the
//     GEMV kernels on Sapphire Rapids): bf16 weights exact, f16, q8_0,
//     q4_K and q6_K weights rounded to bf16 too (their names say "x, w in
//     bf16": NMSE ~3e-6); f32 weights never take the tiles.
// Cap the level at RG_CPU_ISA_AVX512 to keep x in f32 everywhere. The
// k-quant GEMV at avx512-bf16 splits x into two bf16 terms (16 bits of
// mantissa, NMSE ~1e-11), which is why it does not say "x in bf16".
//
// Three paths, picked per call from m, the weight type, the CPU, and which
// kernels OpenBLAS runs (rg_matmul_kernel_name() says which):
//   GEMV  ridge's kernels (avx512, avx512-bf16, avx2, scalar; chosen at run
//         time). Each weight row is streamed from memory once per call and
//         dotted with all m rows of x, which stay in cache; output rows are
//         split across the pool's threads, each streaming one contiguous
//         share. Decode (small m) is memory-bound and runs here; so does
//         prefill wherever these kernels beat sgemm (bf16 with vdpbf16ps
//         always; f16/q8_0 when OpenBLAS runs its AVX2 kernels).
//   GEMM  OpenBLAS sgemm, called single-threaded from each pool thread on
//         its share of the output columns; bf16/f16/q8_0/k-quant weights
//         are first widened tile by tile into a per-thread f32 buffer (a
//         small cost next to the m-fold reuse).
//   TILES AMX (amx level only): TDPBF16PS on 16 × 32 bf16 tiles, x packed
//         once per call, bf16 weights read in place, other types widened
//         into per-thread bf16 panels (ops/cpu/matmul_amx.c). Prefill and
//         decode; the level says why when refused.
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

#include "base/pool.h"
#include "base/status.h"
#include "ops/convert.h"

typedef struct {
  const void *data;  // (rows, cols) in `type`; row r starts at r * rg_dtype_row_bytes(type, cols)
  rg_dtype_t type;
  int64_t rows;  // n: output features
  int64_t cols;  // k: input features; whole blocks (32 for q8_0, 256 for q4_K/q6_K)
} rg_wmat_t;

#define RG_MATMUL_PATH_MAP(X) \
  X(RG_MATMUL_AUTO, "auto")   \
  X(RG_MATMUL_GEMV, "gemv")   \
  X(RG_MATMUL_GEMM, "gemm")   \
  X(RG_MATMUL_TILES, "tiles")

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
  rg_matmul_path_t path;  // force GEMV, GEMM or TILES regardless of m
  // Batch invariance: each row of y comes out bit for bit the same whatever
  // m is and wherever the row sits in x, so that a request's tokens do not
  // depend on what it was batched with (or whether it was preempted and
  // recomputed). AUTO then keeps one kernel for every m: the AMX tiles where
  // the CPU has them (all types but f32), else the GEMV in its 4-row shape
  // (vdpbf16ps for bf16 from avx512-bf16 on), never the GEMM. The price is
  // batch-1 decode at the tiles' speed rather than the GEMV's.
  int batch_invariant;
} rg_matmul_opts_t;

// 1 when the TILES path can run at this cap (AUTO: the best level): the CPU
// has AMX and Linux granted its tile state. Otherwise 0, and *why (when not
// NULL) says what is missing.
int rg_matmul_tiles_available(rg_cpu_isa_t isa, const char **why);

// y = x W^T (+ bias); bias may be NULL. m = 0 does nothing. Fails with
// RG_INVALID_ARGUMENT (and writes nothing) for NULL pointers, negative m,
// rows or cols < 1, an unknown type, or q8_0 cols not a multiple of 32.
RG_MUST_USE rg_status_t rg_matmul(rg_pool_t *pool, const float *x, int64_t m, const rg_wmat_t *w,
                                  const float *bias, float *y);
// Same, with overrides. An isa above what the CPU has fails with RG_UNAVAILABLE.
RG_MUST_USE rg_status_t rg_matmul_ex(rg_pool_t *pool, const float *x, int64_t m, const rg_wmat_t *w,
                                     const float *bias, float *y, const rg_matmul_opts_t *opts);

// The argument checks rg_matmul and rg_matmul_ref make, for callers that
// want to validate a layer once before running it many times.
RG_MUST_USE rg_status_t rg_matmul_check(const float *x, int64_t m, const rg_wmat_t *w,
                                        const float *bias, const float *y);

// Plain loops with double accumulation: the reference every path is tested
// against. Same argument rules as rg_matmul.
RG_MUST_USE rg_status_t rg_matmul_ref(const float *x, int64_t m, const rg_wmat_t *w,
                                      const float *bias, float *y);

// The kernel rg_matmul_ex would run for this weight and m, for reports:
// "avx512 bf16 gemv", "avx512-bf16 bf16 gemv (vdpbf16ps, x in bf16)",
// "openblas sgemm", "openblas sgemm on avx512 q8_0->f32 tiles". opts may be
// NULL. A static string; "invalid" for arguments rg_matmul would reject.
const char *rg_matmul_kernel_name(const rg_wmat_t *w, int64_t m);
const char *rg_matmul_kernel_name_ex(const rg_wmat_t *w, int64_t m, const rg_matmul_opts_t *opts);

#endif  // RG_OPS_MATMUL_H
