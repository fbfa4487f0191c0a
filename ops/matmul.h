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
//   - bf16 weights at m >= 8 with vdpbf16ps (avx512-bf16), and at every m
//     once packed in panels (RG_WLAYOUT_BF16_PANELS);
//   - the AMX tiles (amx level, m from 1 for bf16, 4 for the others;
//     decode included, since they stream bf16 weights faster than the
//     GEMV kernels on Sapphire Rapids): bf16 weights exact, f16, q8_0,
//     q4_K and q6_K weights rounded to bf16 too (their names say "x, w in
//     bf16": NMSE ~3e-6); f32 weights never take the tiles.
// Cap the level at RG_CPU_ISA_AVX512 to keep x in f32 everywhere. The
// k-quant GEMV at avx512-bf16 splits x into two bf16 terms (16 bits of
// mantissa, NMSE ~1e-11), which is why it does not say "x in bf16".
//
// Three paths for weights in rows, picked per call from m, the weight
// type, the CPU, and which kernels OpenBLAS runs, and one for packed bf16
// weights (rg_matmul_kernel_name() says which):
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
//   PANELS bf16 or f16 weights a caller packed once (RG_WLAYOUT_BF16_PANELS
//         and F16_PANELS, what the CPU device asks a stage for at
//         avx512-bf16, and for f16 at avx512 too): for bf16 one vdpbf16ps
//         micro-kernel for every m, decode included, with no per-call
//         packing. Against the row kernels on a Zen 4 VM (1B model's
//         shapes, 16 layers' weights from DRAM, median call): m = 1
//         0.81-0.96 of the time, m = 8 0.57-0.65, m = 16 0.71-0.74, m = 256
//         0.80-0.83 (the GEMM on panels packed per call).
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

// How a matrix's weights sit in memory.
//   ROWS         row-major as checkpoints store them (every type): row r
//                starts at r * rg_dtype_row_bytes(type, cols).
//   BF16_PANELS  bf16 only, packed once (at load) for the vdpbf16ps GEMM:
//                panels of 32 weight rows (rows past the end repeat the
//                last), each holding every pair of k (cols rounded up to
//                32, zeros past cols) as 32 uint32, one per row, the even
//                value of the pair in the low half: the word for row r,
//                pair q sits at ((r / 32) * (k32 / 2) + q) * 32 + r % 32.
//                One 64-byte load then holds a pair of k for 16 rows, and
//                every m runs one micro-kernel with no per-call packing
//                (which took a quarter of a prefill GEMM's time), the same
//                sums in the same order: batch-invariant by construction.
//                x is rounded to bf16 at every m (NMSE ~1e-6).
//   F16_PANELS   f16 only, the same panels holding f16 values (at the
//                avx512 and avx512-bf16 levels): the micro-kernel widens
//                them (vcvtph2ps) and multiplies x in f32, so the sums are
//                the row kernels' up to f32 order. Decode streams them
//                as bf16 panels are streamed; the row kernels' f16 GEMV
//                reduced each row's sums across lanes.
typedef enum {
  RG_WLAYOUT_ROWS = 0,
  RG_WLAYOUT_BF16_PANELS = 1,
  RG_WLAYOUT_F16_PANELS = 2
} rg_wlayout_t;

typedef struct {
  const void *data;  // (rows, cols) in `type`, laid out as `layout` says
  rg_dtype_t type;
  int64_t rows;  // n: output features
  int64_t cols;  // k: input features; whole blocks (32 for q8_0, 256 for q4_K/q6_K)
  rg_wlayout_t layout;
} rg_wmat_t;

// The layout this level's kernels run weights of type t fastest from:
// BF16_PANELS for bf16 at exactly avx512-bf16 (the amx level's tiles read
// bf16 rows in place), F16_PANELS for f16 at avx512 and avx512-bf16,
// otherwise ROWS. AUTO resolves to the best level.
rg_wlayout_t rg_matmul_preferred_layout(rg_cpu_isa_t isa, rg_dtype_t t);
// Bytes a (rows, cols) matrix of type t takes in layout l; 0 when the type
// has no such layout or the size overflows.
size_t rg_matmul_layout_bytes(rg_wlayout_t l, rg_dtype_t t, int64_t rows, int64_t cols);
// Writes w (layout ROWS) into out in layout l: rg_matmul_layout_bytes of
// it, 64-byte aligned. The panels need the avx512 level (the pack is
// AVX-512 code; bf16 panels run at avx512-bf16); pool may be NULL.
RG_MUST_USE rg_status_t rg_matmul_relayout(rg_pool_t *pool, const rg_wmat_t *w, rg_wlayout_t l,
                                           void *out);

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
