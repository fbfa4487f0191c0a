// CPU matmul: y = x W^T (+ bias) for f32/bf16/f16/q8_0 weights (ops/matmul.h).
//
// Sections: job setup and dispatch; the GEMV kernels (scalar, AVX2,
// AVX-512), which stream each weight row once and dot it with every row of x;
// the GEMM path, which hands f32 tiles of W to OpenBLAS. Vector kernels are
// compiled with function-level target attributes and chosen at run time, so
// one binary runs on any x86-64.
//
// GEMV register blocking: a tile is NR = 4 weight rows × MR rows of x
// (MR <= 4 on AVX-512, 2 on AVX2, whose 16 registers hold no more). The 4
// weight rows are widened to f32 once per step and reused for all MR rows of
// x; for m > MR the same 4 rows are dotted again with the next MR rows of x,
// now from L1. So every weight byte comes from DRAM once per call, and x
// (m × k floats, 128 KiB for m = 16, k = 2048) stays in L2.
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "ops/matmul.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RG_X86 1
#else
#define RG_X86 0
#endif

#define T_AVX2 "avx2,fma,f16c"
#define T_AVX512 "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"
#define T_AVX512BF16 T_AVX512 ",avx512bf16"
#define INLINE static inline __attribute__((always_inline))

enum { NR = 4 };  // weight rows per GEMV tile

typedef struct {
  const float *x;  // (m, k)
  int64_t m, n, k;
  const unsigned char *w;  // (n, row_bytes)
  size_t row_bytes;
  rg_wtype_t type;
  const float *bias;  // (n) or NULL
  float *y;           // (m, n)
  rg_cpu_isa_t isa;
  // GEMV: rows of x per pass over a thread's weight rows, so that the rows
  // of x in play stay in L2 however large m is.
  int64_t m_chunk;
  // GEMV with vdpbf16ps: x rounded to bf16, rows padded with zeros to kp.
  const uint16_t *xb;  // (m, kp)
  int64_t kp;
  // GEMM path: one f32 tile buffer of tile_rows × k per thread.
  float *tiles;
  int64_t tile_rows;
  // Work handed out in chunks of `chunk` items (GEMV: groups of NR rows;
  // GEMM: tiles) from a shared counter rather than in fixed shares, so a
  // thread the OS preempts does not hold the whole call back.
  atomic_size_t next;
  size_t items, chunk;
} job_t;

// Pointers to NR weight rows starting at row r; rows past the end repeat the
// last one, so tiles need no remainder variants (the extra results are
// dropped when stored).
static void tile_rows_at(const job_t *j, int64_t r, const unsigned char *rows[NR]) {
  for (int q = 0; q < NR; q++) {
    int64_t rr = r + q < j->n ? r + q : j->n - 1;
    rows[q] = j->w + (size_t)rr * j->row_bytes;
  }
}

static void store_tile(const job_t *j, int64_t i0, int mr, int64_t r0, float acc[][NR]) {
  int nr = j->n - r0 < NR ? (int)(j->n - r0) : NR;
  for (int i = 0; i < mr; i++)
    for (int q = 0; q < nr; q++) j->y[(i0 + i) * j->n + r0 + q] = acc[i][q] + (j->bias ? j->bias[r0 + q] : 0.0f);
}

// ---- Scalar GEMV ------------------------------------------------------------

static float scalar_weight(rg_wtype_t t, const unsigned char *row, int64_t p) {
  uint16_t h;
  float f;
  switch (t) {
    case RG_WTYPE_F32:
      memcpy(&f, row + 4 * p, 4);
      return f;
    case RG_WTYPE_BF16:
      memcpy(&h, row + 2 * p, 2);
      return rg_bf16_to_f32(h);
    case RG_WTYPE_F16:
      memcpy(&h, row + 2 * p, 2);
      return rg_f16_to_f32(h);
    default: {  // q8_0
      const unsigned char *blk = row + 34 * (p / 32);
      memcpy(&h, blk, 2);
      return rg_f16_to_f32(h) * (float)(int8_t)blk[2 + p % 32];
    }
  }
}

// One weight row at a time, widened 256 values at a go into a stack buffer
// (whole q8_0 blocks, since 256 = 8 × 32) and dotted with up to 8 rows of x.
// Eight partial sums per dot let the compiler keep several adds in flight
// without reassociating anything.
static void gemv_scalar(const job_t *j, int64_t r0, int64_t r1) {
  enum { CH = 256, MB = 8 };
  float wbuf[CH];
  for (int64_t r = r0; r < r1; r++) {
    const unsigned char *row = j->w + (size_t)r * j->row_bytes;
    for (int64_t i0 = 0; i0 < j->m; i0 += MB) {
      int mb = j->m - i0 < MB ? (int)(j->m - i0) : MB;
      float acc[MB][8] = {{0}};
      for (int64_t c = 0; c < j->k; c += CH) {
        int len = j->k - c < CH ? (int)(j->k - c) : CH;
        size_t off = j->type == RG_WTYPE_Q8_0 ? (size_t)c / 32 * 34 : (size_t)c * (j->row_bytes / (size_t)j->k);
        // Cannot fail: the type and k were checked before the job started.
        rg_status_free(rg_row_to_f32_isa(RG_CPU_ISA_SCALAR, j->type, row + off, wbuf, len));
        for (int i = 0; i < mb; i++) {
          const float *xi = j->x + (i0 + i) * j->k + c;
          float *a = acc[i];
          int p = 0;
          for (; p + 8 <= len; p += 8)
            for (int q = 0; q < 8; q++) a[q] += wbuf[p + q] * xi[p + q];
          for (; p < len; p++) a[p & 7] += wbuf[p] * xi[p];
        }
      }
      for (int i = 0; i < mb; i++) {
        float s = ((acc[i][0] + acc[i][1]) + (acc[i][2] + acc[i][3])) +
                  ((acc[i][4] + acc[i][5]) + (acc[i][6] + acc[i][7]));
        j->y[(i0 + i) * j->n + r] = s + (j->bias ? j->bias[r] : 0.0f);
      }
    }
  }
}

#if RG_X86
// ---- AVX2 GEMV ----------------------------------------------------------------

// 8 weights of a row from element p (a multiple of 8), widened to f32.
INLINE __attribute__((target(T_AVX2))) __m256 w8_avx2(rg_wtype_t t, const unsigned char *row,
                                                      int64_t p) {
  switch (t) {
    case RG_WTYPE_F32:
      return _mm256_loadu_ps((const float *)row + p);
    case RG_WTYPE_BF16: {
      __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + 2 * p)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    case RG_WTYPE_F16:
      return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * p)));
    default: {  // q8_0
      const unsigned char *blk = row + 34 * (p / 32);
      uint16_t h;
      memcpy(&h, blk, 2);
      __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + p % 32)));
      return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h)), _mm256_cvtepi32_ps(q));
    }
  }
}

// An NR × MR tile over the whole of k. The tail (k % 8 values, float types
// only) goes through zero-padded copies so the vector loop never reads past a
// row.
INLINE __attribute__((target(T_AVX2))) void tile_avx2(const job_t *j, rg_wtype_t t, int MR,
                                                      int64_t i0, int64_t r0) {
  const unsigned char *rows[NR];
  tile_rows_at(j, r0, rows);
  const float *xs[2];
  for (int i = 0; i < 2; i++) xs[i] = j->x + (i0 + (i < MR ? i : 0)) * j->k;
  __m256 acc[2][NR];
  for (int i = 0; i < MR; i++)
    for (int q = 0; q < NR; q++) acc[i][q] = _mm256_setzero_ps();
  int64_t k = j->k, p = 0;
  for (; p + 8 <= k; p += 8) {
    __m256 wv[NR];
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) wv[q] = w8_avx2(t, rows[q], p);
#pragma GCC unroll 2
    for (int i = 0; i < MR; i++) {
      __m256 xv = _mm256_loadu_ps(xs[i] + p);
#pragma GCC unroll 4
      for (int q = 0; q < NR; q++) acc[i][q] = _mm256_fmadd_ps(wv[q], xv, acc[i][q]);
    }
  }
  if (p < k) {
    float wt[NR][8] = {{0}}, xt[2][8] = {{0}};
    for (int64_t e = p; e < k; e++) {
      for (int q = 0; q < NR; q++) wt[q][e - p] = scalar_weight(t, rows[q], e);
      for (int i = 0; i < MR; i++) xt[i][e - p] = xs[i][e];
    }
    for (int i = 0; i < MR; i++)
      for (int q = 0; q < NR; q++)
        acc[i][q] = _mm256_fmadd_ps(_mm256_loadu_ps(wt[q]), _mm256_loadu_ps(xt[i]), acc[i][q]);
  }
  float out[2][NR] = {{0}};  // zeroed only to quiet -Wmaybe-uninitialized at -O3
  for (int i = 0; i < MR; i++)
    for (int q = 0; q < NR; q++) {
      __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[i][q]), _mm256_extractf128_ps(acc[i][q], 1));
      s = _mm_add_ps(s, _mm_movehl_ps(s, s));
      s = _mm_add_ss(s, _mm_movehdup_ps(s));
      out[i][q] = _mm_cvtss_f32(s);
    }
  store_tile(j, i0, MR, r0, out);
}

// q8_0 on AVX2: the block's scale is widened once per block and row (not per
// 8 weights), and each row's 8 weights are scaled and used at once, so the
// tile fits the 16 registers: 8 sums, 4 scales, 2 of x, 1 of weights.
INLINE __attribute__((target(T_AVX2))) void tile_q8_avx2(const job_t *j, int MR, int64_t i0, int64_t r0) {
  const unsigned char *rows[NR];
  tile_rows_at(j, r0, rows);
  const float *xs[2];
  for (int i = 0; i < 2; i++) xs[i] = j->x + (i0 + (i < MR ? i : 0)) * j->k;
  __m256 acc[2][NR];
  for (int i = 0; i < MR; i++)
    for (int q = 0; q < NR; q++) acc[i][q] = _mm256_setzero_ps();
  for (int64_t b = 0; b < j->k / 32; b++) {
    __m256 d[NR];
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) {
      uint16_t h;
      memcpy(&h, rows[q] + (size_t)b * 34, 2);
      d[q] = _mm256_set1_ps(_cvtsh_ss(h));
    }
#pragma GCC unroll 4
    for (int s = 0; s < 32; s += 8) {
      __m256 x0 = _mm256_loadu_ps(xs[0] + 32 * b + s), x1 = _mm256_loadu_ps(xs[1] + 32 * b + s);
#pragma GCC unroll 4
      for (int q = 0; q < NR; q++) {
        const unsigned char *qs = rows[q] + (size_t)b * 34 + 2 + s;
        __m256 w = _mm256_mul_ps(d[q], _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)qs))));
        acc[0][q] = _mm256_fmadd_ps(w, x0, acc[0][q]);
        if (MR > 1) acc[1][q] = _mm256_fmadd_ps(w, x1, acc[1][q]);
      }
    }
  }
  float out[2][NR] = {{0}};  // zeroed only to quiet -Wmaybe-uninitialized at -O3
  for (int i = 0; i < MR; i++)
    for (int q = 0; q < NR; q++) {
      __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc[i][q]), _mm256_extractf128_ps(acc[i][q], 1));
      v = _mm_add_ps(v, _mm_movehl_ps(v, v));
      v = _mm_add_ss(v, _mm_movehdup_ps(v));
      out[i][q] = _mm_cvtss_f32(v);
    }
  store_tile(j, i0, MR, r0, out);
}

#define AVX2_TILES(name, tile)                                                             \
  __attribute__((target(T_AVX2))) static void name(const job_t *j, int64_t r0, int64_t r1) { \
    for (int64_t c0 = 0; c0 < j->m; c0 += j->m_chunk) {                                    \
      int64_t c1 = j->m - c0 < j->m_chunk ? j->m : c0 + j->m_chunk;                        \
      for (int64_t r = r0; r < r1; r += NR) {                                              \
        int64_t i0 = c0;                                                                   \
        for (; i0 + 2 <= c1; i0 += 2) tile(2, i0, r);                                      \
        if (i0 < c1) tile(1, i0, r);                                                       \
      }                                                                                    \
    }                                                                                      \
  }
#define TILE2_F32(MR, i0, r) tile_avx2(j, RG_WTYPE_F32, MR, i0, r)
#define TILE2_BF16(MR, i0, r) tile_avx2(j, RG_WTYPE_BF16, MR, i0, r)
#define TILE2_F16(MR, i0, r) tile_avx2(j, RG_WTYPE_F16, MR, i0, r)
#define TILE2_Q8_0(MR, i0, r) tile_q8_avx2(j, MR, i0, r)
AVX2_TILES(gemv_avx2_f32, TILE2_F32)
AVX2_TILES(gemv_avx2_bf16, TILE2_BF16)
AVX2_TILES(gemv_avx2_f16, TILE2_F16)
AVX2_TILES(gemv_avx2_q8_0, TILE2_Q8_0)

// ---- AVX-512 GEMV -------------------------------------------------------------

// Weights are prefetched this many bytes ahead of the loads: far enough to
// cover DRAM latency at the per-core streaming rate, near enough to stay in L1.
enum { PF_AHEAD = 1024 };

// 16 float-type weights of a row from element p, widened to f32; elements
// outside `mask` read as 0 and are not touched in memory.
INLINE __attribute__((target(T_AVX512))) __m512 w16_avx512(rg_wtype_t t, const unsigned char *row,
                                                          int64_t p, __mmask16 mask) {
  switch (t) {
    case RG_WTYPE_F32:
      return _mm512_maskz_loadu_ps(mask, (const float *)row + p);
    case RG_WTYPE_BF16: {
      __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, row + 2 * p));
      return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    }
    default:  // f16
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, row + 2 * p));
  }
}

// Bytes of one row that 32 weights take (the main loop's step).
INLINE size_t step_bytes(rg_wtype_t t) {
  return t == RG_WTYPE_F32 ? 128 : t == RG_WTYPE_Q8_0 ? 34 : 64;
}

// An NR × MR tile of the float types over the whole of k, 32 values a step.
INLINE __attribute__((target(T_AVX512))) void tile_avx512(const job_t *j, rg_wtype_t t, int MR, int mv,
                                                          int64_t i0, int64_t r0) {
  const unsigned char *rows[NR];
  tile_rows_at(j, r0, rows);
  const float *xs[4];
  for (int i = 0; i < 4; i++) xs[i] = j->x + (i0 + (i < mv ? i : 0)) * j->k;
  __m512 acc[4][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) acc[i][q] = _mm512_setzero_ps();
  const int64_t k = j->k;
  const size_t sb = step_bytes(t);
  // One loop body for all steps: the last, partial one of a row whose k is
  // not a multiple of 32 just runs with shorter masks (full-mask loads cost
  // the same as plain ones, and one copy of the body compiles twice as fast).
  size_t off = 0;
  for (int64_t p = 0; p < k; p += 32, off += sb) {
    int64_t rem = k - p;
    __mmask16 m0 = rem >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << rem) - 1);
    __mmask16 m1 = rem >= 32 ? (__mmask16)0xffff : rem > 16 ? (__mmask16)((1u << (rem - 16)) - 1) : 0;
    __m512 w0[NR], w1[NR];
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) {
      _mm_prefetch((const char *)rows[q] + off + PF_AHEAD, _MM_HINT_T0);
      if (sb > 64) _mm_prefetch((const char *)rows[q] + off + PF_AHEAD + 64, _MM_HINT_T0);
      w0[q] = w16_avx512(t, rows[q], p, m0);
      w1[q] = w16_avx512(t, rows[q], p + 16, m1);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) {
      __m512 x0 = _mm512_maskz_loadu_ps(m0, xs[i] + p), x1 = _mm512_maskz_loadu_ps(m1, xs[i] + p + 16);
#pragma GCC unroll 4
      for (int q = 0; q < NR; q++) {
        acc[i][q] = _mm512_fmadd_ps(w0[q], x0, acc[i][q]);
        acc[i][q] = _mm512_fmadd_ps(w1[q], x1, acc[i][q]);
      }
    }
  }
  float out[4][NR] = {{0}};  // zeroed only to quiet -Wmaybe-uninitialized at -O3
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) out[i][q] = _mm512_reduce_add_ps(acc[i][q]);
  store_tile(j, i0, mv, r0, out);
}

// The q8_0 tile: one block (32 weights) a step. For one or two rows of x the
// block's scale is applied to each block's partial dot product rather than
// to every weight: at m = 1 that saves a third of the vector work, which is
// what keeps this kernel ahead of DRAM (41 against 34 GB/s a core from L2).
INLINE __attribute__((target(T_AVX512))) void tile_q8_avx512(const job_t *j, int MR, int mv, int64_t i0, int64_t r0) {
  const unsigned char *rows[NR];
  tile_rows_at(j, r0, rows);
  const float *xs[4];
  for (int i = 0; i < 4; i++) xs[i] = j->x + (i0 + (i < mv ? i : 0)) * j->k;
  __m512 acc[4][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) acc[i][q] = _mm512_setzero_ps();
  const int64_t nb = j->k / 32;
  for (int64_t b = 0; b < nb; b++) {
    __m512 lo[NR], hi[NR], d[NR];
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) {
      const unsigned char *blk = rows[q] + (size_t)b * 34;
      if (!(b & 1)) _mm_prefetch((const char *)blk + PF_AHEAD, _MM_HINT_T0);  // one per 68 bytes
      uint16_t h;
      memcpy(&h, blk, 2);
      d[q] = _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
      lo[q] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2))));
      hi[q] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 18))));
    }
    if (MR >= 3) {
      // Enough rows of x to share the work of scaling the weights instead.
#pragma GCC unroll 4
      for (int q = 0; q < NR; q++) lo[q] = _mm512_mul_ps(d[q], lo[q]), hi[q] = _mm512_mul_ps(d[q], hi[q]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) {
      __m512 x0 = _mm512_loadu_ps(xs[i] + 32 * b), x1 = _mm512_loadu_ps(xs[i] + 32 * b + 16);
#pragma GCC unroll 4
      for (int q = 0; q < NR; q++) {
        if (MR >= 3)
          acc[i][q] = _mm512_fmadd_ps(hi[q], x1, _mm512_fmadd_ps(lo[q], x0, acc[i][q]));
        else
          acc[i][q] = _mm512_fmadd_ps(d[q], _mm512_fmadd_ps(hi[q], x1, _mm512_mul_ps(lo[q], x0)), acc[i][q]);
      }
    }
  }
  float out[4][NR] = {{0}};  // zeroed only to quiet -Wmaybe-uninitialized at -O3
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) out[i][q] = _mm512_reduce_add_ps(acc[i][q]);
  store_tile(j, i0, mv, r0, out);
}

// Rows [r0, r1) for all of x, one m_chunk of x at a time. Tiles take 4 rows
// of x, or 1 (decode at m = 1); 2 or 3 leftover rows run in a 4-row tile
// that repeats the last row, which costs FMAs only where memory sets the
// pace, and halves the variants to compile.
#define AVX512_TILES(T, name, tile)                                                              \
  __attribute__((target(T))) static void name(const job_t *j, int64_t r0, int64_t r1) {          \
    for (int64_t c0 = 0; c0 < j->m; c0 += j->m_chunk) {                                          \
      int64_t c1 = j->m - c0 < j->m_chunk ? j->m : c0 + j->m_chunk;                              \
      for (int64_t r = r0; r < r1; r += NR) {                                                    \
        for (int64_t i0 = c0; i0 < c1; i0 += 4) {                                                \
          int mv = c1 - i0 < 4 ? (int)(c1 - i0) : 4;                                             \
          if (mv == 1)                                                                           \
            tile(1, 1, i0, r);                                                                   \
          else                                                                                   \
            tile(4, mv, i0, r);                                                                  \
        }                                                                                        \
      }                                                                                          \
    }                                                                                            \
  }
#define TILE_F32(MR, mv, i0, r) tile_avx512(j, RG_WTYPE_F32, MR, mv, i0, r)
#define TILE_BF16(MR, mv, i0, r) tile_avx512(j, RG_WTYPE_BF16, MR, mv, i0, r)
#define TILE_F16(MR, mv, i0, r) tile_avx512(j, RG_WTYPE_F16, MR, mv, i0, r)
#define TILE_Q8_0(MR, mv, i0, r) tile_q8_avx512(j, MR, mv, i0, r)
AVX512_TILES(T_AVX512, gemv_avx512_f32, TILE_F32)
AVX512_TILES(T_AVX512, gemv_avx512_bf16, TILE_BF16)
AVX512_TILES(T_AVX512, gemv_avx512_f16, TILE_F16)
AVX512_TILES(T_AVX512, gemv_avx512_q8_0, TILE_Q8_0)

// ---- AVX512_BF16 GEMV: vdpbf16ps on bf16 weights and x rounded to bf16 ---------

// The same NR × MR tiling, but the weights go to vdpbf16ps as they are
// stored, against x rounded to bf16 once per call: one instruction does 32
// multiply-adds where the widening kernel needs two FMAs plus the widening.
// Products of two bf16 are exact in f32 and the sums are f32, so the only
// extra error is x's rounding (relative 2^-9 per element; NMSE ~1e-6).
INLINE __attribute__((target(T_AVX512BF16))) void tile_dpbf16(const job_t *j, int MR, int mv, int64_t i0,
                                                               int64_t r0) {
  const unsigned char *rows[NR];
  tile_rows_at(j, r0, rows);
  const uint16_t *xs[4];
  for (int i = 0; i < 4; i++) xs[i] = j->xb + (i0 + (i < mv ? i : 0)) * j->kp;
  __m512 acc[4][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) acc[i][q] = _mm512_setzero_ps();
  const int64_t k = j->k;
  int64_t p = 0;
  for (; p < k; p += 32) {
    // x is zero-padded to kp; the weights' last partial step is masked.
    __mmask32 mask = k - p >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (k - p)) - 1);
    __m512bh wv[NR];
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) {
      _mm_prefetch((const char *)rows[q] + 2 * p + PF_AHEAD, _MM_HINT_T0);
      wv[q] = (__m512bh)_mm512_maskz_loadu_epi16(mask, rows[q] + 2 * p);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) {
      __m512bh xv = (__m512bh)_mm512_loadu_si512(xs[i] + p);
#pragma GCC unroll 4
      for (int q = 0; q < NR; q++) acc[i][q] = _mm512_dpbf16_ps(acc[i][q], wv[q], xv);
    }
  }
  float out[4][NR] = {{0}};  // zeroed only to quiet -Wmaybe-uninitialized at -O3
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) out[i][q] = _mm512_reduce_add_ps(acc[i][q]);
  store_tile(j, i0, mv, r0, out);
}
#define TILE_DP(MR, mv, i0, r) tile_dpbf16(j, MR, mv, i0, r)
AVX512_TILES(T_AVX512BF16, gemv_dpbf16, TILE_DP)
#endif  // RG_X86

typedef void (*gemv_fn)(const job_t *j, int64_t r0, int64_t r1);

// The GEMV kernel for a level and type; dp picks vdpbf16ps for bf16.
static gemv_fn pick_gemv(rg_cpu_isa_t isa, rg_wtype_t t, int dp) {
#if RG_X86
  static const gemv_fn avx512[RG_WTYPE_COUNT] = {gemv_avx512_f32, gemv_avx512_bf16, gemv_avx512_f16,
                                                 gemv_avx512_q8_0};
  static const gemv_fn avx2[RG_WTYPE_COUNT] = {gemv_avx2_f32, gemv_avx2_bf16, gemv_avx2_f16,
                                               gemv_avx2_q8_0};
  if (dp) return gemv_dpbf16;
  if (isa >= RG_CPU_ISA_AVX512) return avx512[t];
  if (isa >= RG_CPU_ISA_AVX2) return avx2[t];
#endif
  (void)isa, (void)t, (void)dp;
  return gemv_scalar;
}

typedef struct {
  job_t *job;
  gemv_fn fn;
} gemv_ctx_t;

// Claims the next chunk of items; returns 0 when none is left.
static int next_chunk(job_t *j, size_t *b, size_t *e) {
  *b = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
  if (*b >= j->items) return 0;
  *e = j->items - *b < j->chunk ? j->items : *b + j->chunk;
  return 1;
}

// Each participating thread takes chunks of NR-row groups until none is left.
static void gemv_worker(void *ctx, size_t unused_b, size_t unused_e, int thread) {
  const gemv_ctx_t *c = ctx;
  job_t *j = c->job;
  size_t b, e;
  while (next_chunk(j, &b, &e)) {
    int64_t r1 = (int64_t)e * NR < j->n ? (int64_t)e * NR : j->n;
    c->fn(j, (int64_t)b * NR, r1);
  }
}

// Pool items are rows of x, rounded to bf16 and zero-padded to kp.
static void x_to_bf16_worker(void *ctx, size_t b, size_t e, int thread) {
  const job_t *j = ctx;
  uint16_t *xb = (uint16_t *)j->xb;
  for (size_t i = b; i < e; i++) {
    rg_status_free(rg_row_from_f32_isa(j->isa, RG_WTYPE_BF16, j->x + i * (size_t)j->k, xb + i * (size_t)j->kp, j->k));
    memset(xb + i * (size_t)j->kp + j->k, 0, (size_t)(j->kp - j->k) * sizeof(uint16_t));
  }
}

// ---- GEMM path: OpenBLAS on f32 tiles ------------------------------------------

// Each pool thread calls sgemm single-threaded on its own columns of y.
// cblas is row-major here: y (m, cols) = x (m, k) · Wtile^T, Wtile (cols, k).
static void sgemm_cols(const job_t *j, const float *wt, int64_t r0, int64_t cols) {
  float *y = j->y + r0;
  float beta = 0.0f;
  if (j->bias) {
    for (int64_t i = 0; i < j->m; i++) memcpy(y + i * j->n, j->bias + r0, (size_t)cols * sizeof(float));
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)j->m, (blasint)cols, (blasint)j->k, 1.0f,
              j->x, (blasint)j->k, wt, (blasint)j->k, beta, y, (blasint)j->n);
}

// Each participating thread takes chunks of tiles until none is left.
static void gemm_worker(void *ctx, size_t unused_b, size_t unused_e, int thread) {
  job_t *j = ctx;
  float *buf = j->tiles ? j->tiles + (size_t)thread * (size_t)j->tile_rows * (size_t)j->k : NULL;
  size_t b, e;
  while (next_chunk(j, &b, &e)) {
    int64_t r0 = (int64_t)b * j->tile_rows, r1 = (int64_t)e * j->tile_rows < j->n ? (int64_t)e * j->tile_rows : j->n;
    if (j->type == RG_WTYPE_F32) {
      sgemm_cols(j, (const float *)(j->w + (size_t)r0 * j->row_bytes), r0, r1 - r0);
      continue;
    }
    for (int64_t t0 = r0; t0 < r1; t0 += j->tile_rows) {
      int64_t rows = r1 - t0 < j->tile_rows ? r1 - t0 : j->tile_rows;
      for (int64_t r = 0; r < rows; r++) {
        // Cannot fail: type, k and isa were checked before the job started.
        rg_status_free(rg_row_to_f32_isa(j->isa, j->type, j->w + (size_t)(t0 + r) * j->row_bytes, buf + r * j->k, j->k));
      }
      sgemm_cols(j, buf, t0, rows);
    }
  }
}

// Runs fn on `threads` threads of the pool at most, over `items` items
// handed out `chunk` at a time, and no more threads than there are chunks
// of at least `grain` items.
static void run_chunked(rg_pool_t *pool, job_t *j, size_t items, size_t grain, size_t chunk, rg_pool_fn_t fn,
                        void *ctx) {
  size_t threads = (size_t)rg_pool_threads(pool), want = (items + grain - 1) / grain;
  if (want < threads) threads = want;
  if (threads < 1) threads = 1;
  atomic_store_explicit(&j->next, 0, memory_order_relaxed);
  j->items = items;
  j->chunk = chunk < 1 ? 1 : chunk;
  // The pool's own split gives each participating thread one item: the
  // worker ignores it and takes chunks from j->next instead.
  rg_pool_parallel_for(pool, threads, 1, fn, ctx);
}

// ---- Choice of path, names, entry points ----------------------------------------

// Tuning. Crossovers measured on a 2-core Zen 5 (AVX-512, AVX512_BF16),
// single-threaded, weights from cache, n = 128..256, k = 1024..2048, best of
// many interleaved runs (bench/bench_matmul.c reports the full-size ones):
//
// - bf16 goes to vdpbf16ps from m = DP_MIN_M on. Below it both bf16 kernels
//   wait on memory, so the exact widening one is used; from about m = 8 the
//   widening kernel runs out of FMA throughput (~170 GFLOP/s a core against
//   the ~200 that m = 16 needs to keep up with DRAM), vdpbf16ps has twice.
//   It then also beats sgemm at every m (m = 512: 230 against 177 GFLOP/s
//   a core for OpenBLAS's AVX-512 kernels), so bf16 never takes the GEMM path.
// - The GEMV kernels lose to sgemm from m = 64 (f32) or 128 (f16, q8_0, bf16
//   widened) when OpenBLAS runs its AVX-512 kernels. With its AVX2 kernels
//   (OPENBLAS_CORETYPE=Haswell, as this environment sets) sgemm is ~100
//   GFLOP/s a core: the GEMV kernels win at every m for the converted types
//   (m = 512 f16: 110 against 97) and up to m = 256 for f32.
// - The AVX2 GEMV kernels (16 registers, 2 rows of x at a time) lose from
//   m = 16 (f32), 32 (q8_0) or 64 (bf16, f16); the scalar ones from m = 8.
enum { DP_MIN_M = 8 };
#define NEVER INT64_MAX

// Whether OpenBLAS picked AVX-512 sgemm kernels (its core names as of 0.3.21).
static int openblas_avx512(void) {
  static const char *const cores[] = {"skylakex", "cooperlake", "sapphirerapids"};
  const char *c = openblas_get_corename();
  for (size_t i = 0; c && i < sizeof cores / sizeof cores[0]; i++)
    if (strcasecmp(c, cores[i]) == 0) return 1;
  return 0;
}

static int64_t gemm_min_m(rg_cpu_isa_t isa, rg_wtype_t t) {
  static const int64_t avx512_fast_blas[RG_WTYPE_COUNT] = {64, 128, 128, 128};
  static const int64_t avx512_slow_blas[RG_WTYPE_COUNT] = {256, NEVER, NEVER, NEVER};
  static const int64_t avx2[RG_WTYPE_COUNT] = {16, 64, 64, 32};
  if (isa >= RG_CPU_ISA_AVX512_BF16 && t == RG_WTYPE_BF16) return NEVER;
  if (isa >= RG_CPU_ISA_AVX512) {
    static _Atomic int fast = -1;  // computed once; racing threads store the same
    int f = atomic_load_explicit(&fast, memory_order_relaxed);
    if (f < 0) atomic_store_explicit(&fast, f = openblas_avx512(), memory_order_relaxed);
    return (f ? avx512_fast_blas : avx512_slow_blas)[t];
  }
  return isa == RG_CPU_ISA_AVX2 ? avx2[t] : 8;
}

typedef struct {
  rg_matmul_path_t path;
  int dp;  // GEMV with vdpbf16ps
} plan_t;

static plan_t plan_for(rg_cpu_isa_t isa, rg_wtype_t t, int64_t m, const rg_matmul_opts_t *o) {
  plan_t p = {o ? o->path : RG_MATMUL_AUTO, 0};
  if (p.path == RG_MATMUL_AUTO) p.path = m >= gemm_min_m(isa, t) ? RG_MATMUL_GEMM : RG_MATMUL_GEMV;
  p.dp = p.path == RG_MATMUL_GEMV && isa >= RG_CPU_ISA_AVX512_BF16 && t == RG_WTYPE_BF16 && m >= DP_MIN_M;
  return p;
}

// [isa][type][0 gemv, 1 gemm]; the AVX512_BF16 row holds the vdpbf16ps names.
static char names[RG_CPU_ISA_COUNT][RG_WTYPE_COUNT][2][64];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void names_init(void) {
  for (int i = RG_CPU_ISA_SCALAR; i < RG_CPU_ISA_COUNT; i++)
    for (int t = 0; t < RG_WTYPE_COUNT; t++) {
      const char *in = rg_cpu_isa_name((rg_cpu_isa_t)i), *tn = rg_wtype_name((rg_wtype_t)t);
      if (i == RG_CPU_ISA_AVX512_BF16)
        snprintf(names[i][t][0], 64, "%s %s gemv (vdpbf16ps, x in bf16)", in, tn);
      else
        snprintf(names[i][t][0], 64, "%s %s gemv", in, tn);
      if (t == RG_WTYPE_F32)
        snprintf(names[i][t][1], 64, "openblas sgemm");
      else
        snprintf(names[i][t][1], 64, "openblas sgemm on %s %s->f32 tiles", in, tn);
    }
}

static const char *name_of(rg_cpu_isa_t isa, rg_wtype_t t, plan_t p) {
  pthread_once(&names_once, names_init);
  // Only the vdpbf16ps kernel needs more than avx512.
  if (!p.dp && isa > RG_CPU_ISA_AVX512) isa = RG_CPU_ISA_AVX512;
  return names[isa][t][p.path == RG_MATMUL_GEMM];
}

const char *rg_matmul_kernel_name_ex(const rg_wmat_t *w, int64_t m, const rg_matmul_opts_t *opts) {
  rg_cpu_isa_t isa;
  rg_status_t s = rg_cpu_isa_resolve(opts ? opts->isa : RG_CPU_ISA_AUTO, &isa);
  if (!s) s = rg_matmul_check(NULL, 0, w, NULL, NULL);
  if (s || m < 0 || (opts && (unsigned)opts->path >= RG_MATMUL_PATH_COUNT)) {
    rg_status_free(s);
    return "invalid";
  }
  return name_of(isa, w->type, plan_for(isa, w->type, m, opts));
}

const char *rg_matmul_kernel_name(const rg_wmat_t *w, int64_t m) { return rg_matmul_kernel_name_ex(w, m, NULL); }

static rg_status_t run_gemv(rg_pool_t *pool, job_t *j, plan_t p) {
  uint16_t *xb = NULL;
  size_t x_row_bytes = (size_t)j->k * sizeof(float);
  if (p.dp) {
    j->kp = (j->k + 31) / 32 * 32;
    xb = malloc((size_t)j->m * (size_t)j->kp * sizeof(uint16_t));
    if (!xb)
      return rg_status_make(RG_OUT_OF_MEMORY, "matmul: no memory to round x (%lld x %lld) to bf16", (long long)j->m,
                            (long long)j->k);
    j->xb = xb;
    x_row_bytes = (size_t)j->kp * sizeof(uint16_t);
    rg_pool_parallel_for(pool, (size_t)j->m, 16, x_to_bf16_worker, j);
  }
  // About 384 KiB of x per pass: in L2 next to the weight rows being reused.
  j->m_chunk = (int64_t)((384u << 10) / x_row_bytes) / 4 * 4;
  if (j->m_chunk < 4) j->m_chunk = 4;
  // A thread's share should be worth waking it for: at least ~64 KiB of
  // weight traffic (counting one pass per 4 rows of x).
  // Chunks of about 256 KiB of weights, or 1/8 of a thread's share if
  // that is less, balance the threads without many trips to the counter.
  size_t groups = (size_t)((j->n + NR - 1) / NR);
  size_t per_group = NR * j->row_bytes * (size_t)((j->m + 3) / 4);
  size_t grain = (65536 + per_group - 1) / per_group;
  size_t chunk = (262144 + per_group - 1) / per_group, eighth = groups / (8 * (size_t)rg_pool_threads(pool));
  if (chunk > eighth) chunk = eighth > grain ? eighth : grain;
  gemv_ctx_t c = {j, pick_gemv(j->isa, j->type, p.dp)};
  run_chunked(pool, j, groups, grain, chunk, gemv_worker, &c);
  free(xb);
  return NULL;
}

static rg_status_t run_gemm(rg_pool_t *pool, job_t *j) {
  // Every sgemm call packs all of x (m × k) again, so tiles must be tall
  // enough to amortise that (~10/rows of the work): about 2 MiB of f32, at
  // least 64 rows. They stay in L3 between the widening and OpenBLAS's
  // packing of them.
  int64_t tr = ((int64_t)2 << 20) / 4 / j->k;
  tr = tr < 64 ? 64 : tr > 512 ? 512 : tr / 16 * 16;
  if (tr > j->n) tr = j->n;
  j->tile_rows = tr;
  int threads = rg_pool_threads(pool);
  if (j->type != RG_WTYPE_F32) {
    j->tiles = malloc((size_t)threads * (size_t)tr * (size_t)j->k * sizeof(float));
    if (!j->tiles)
      return rg_status_make(RG_OUT_OF_MEMORY, "matmul: no memory for %d f32 tiles of %lld x %lld", threads,
                            (long long)tr, (long long)j->k);
  }
  // The pool decides the parallelism; OpenBLAS must not add its own threads
  // on top (a process-wide setting, so it is re-asserted on every call).
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  run_chunked(pool, j, (size_t)((j->n + tr - 1) / tr), 1, 1, gemm_worker, j);
  free(j->tiles);
  j->tiles = NULL;
  return NULL;
}

rg_status_t rg_matmul_ex(rg_pool_t *pool, const float *x, int64_t m, const rg_wmat_t *w, const float *bias,
                         float *y, const rg_matmul_opts_t *opts) {
  RG_RETURN_IF_ERROR(rg_matmul_check(x, m, w, bias, y));
  if (opts && (unsigned)opts->path >= RG_MATMUL_PATH_COUNT)
    return rg_status_make(RG_INVALID_ARGUMENT, "matmul: unknown path %d", (int)opts->path);
  job_t j = {.x = x, .m = m, .n = w->rows, .k = w->cols, .w = w->data, .type = w->type, .bias = bias, .y = y};
  RG_RETURN_IF_ERROR(rg_cpu_isa_resolve(opts ? opts->isa : RG_CPU_ISA_AUTO, &j.isa));
  RG_RETURN_IF_ERROR(rg_wtype_row_bytes(w->type, w->cols, &j.row_bytes));
  if (m == 0) return NULL;
  plan_t p = plan_for(j.isa, j.type, m, opts);
  return p.path == RG_MATMUL_GEMM ? run_gemm(pool, &j) : run_gemv(pool, &j, p);
}

rg_status_t rg_matmul(rg_pool_t *pool, const float *x, int64_t m, const rg_wmat_t *w, const float *bias, float *y) {
  return rg_matmul_ex(pool, x, m, w, bias, y, NULL);
}
