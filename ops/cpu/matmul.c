// CPU matmul: y = x W^T (+ bias) for f32/bf16/f16/q8_0 weights (ops/matmul.h).
//
// Sections: shared helpers; the GEMV kernels (scalar, AVX2, AVX-512,
// AVX512_BF16), which stream each weight row once and dot it with every row
// of x; the work split across threads; the GEMM path, which hands f32 tiles
// of W to OpenBLAS; the choice between them and the entry points. Vector
// kernels are compiled with function-level target attributes and chosen at
// run time, so the build needs no -m flags and one binary runs on any x86-64.
//
// GEMV register tiles are NR = 4 weight rows × 4 rows of x (AVX-512; 2 rows
// of x on AVX2, whose 16 registers hold no more), or 1 × 1 for a single row
// of x (see row_1x1). A tile widens its weights to f32 once per step and
// reuses them for every row of x in it; for m > 4 the same weight rows are
// dotted again with the next rows of x, now from L1. So every weight byte
// comes from DRAM once per call, and x (m × k floats; 128 KiB at m = 16,
// k = 2048) stays in L2.
#include "ops/matmul.h"

#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "ops/cpu/cpu_impl.h"

enum { NR = RG__NR };  // weight rows per GEMV tile
typedef rg__mm_job_t job_t;

// Pointers to nr weight rows starting at row r; rows past the end repeat the
// last one, so tiles need no remainder variants (the extra results are
// dropped when stored).
static void tile_rows_at(const job_t *j, int64_t r, int nr, const unsigned char *rows[NR]) {
  for (int q = 0; q < nr; q++) {
    int64_t rr = r + q < j->n ? r + q : j->n - 1;
    rows[q] = j->w + (size_t)rr * j->row_bytes;
  }
}

// Stores mv rows of x by up to nr weight rows of results, plus the bias.
static void store_tile(const job_t *j, int64_t i0, int mv, int64_t r0, int nr, float acc[][NR]) {
  if (j->n - r0 < nr) nr = (int)(j->n - r0);
  for (int i = 0; i < mv; i++)
    for (int q = 0; q < nr; q++)
      j->y[(i0 + i) * j->n + r0 + q] = acc[i][q] + (j->bias ? j->bias[r0 + q] : 0.0f);
}

// How many rows of x the next pass of a GEMV tile takes, `left` rows still
// to go, for tiles of up to max_mr (4 or 6) rows: 6 where they fit, but 7-8
// rows as two passes of 4 (6 and a ragged 2 took 1.4x the time), and never
// more than left. Each pass streams the tile's weight rows once more (from
// cache after the first), so fewer, fuller passes save loads.
static inline int pass_rows(int64_t left, int max_mr) {
  if (left < 4) return (int)left;
  if (max_mr < 6 || left == 4 || left == 7 || left == 8) return 4;
  return left < 6 ? (int)left : 6;
}

// How far ahead the tiles prefetch weights: the same offset in the next
// tile's rows (nrt rows on), which is the next memory this thread streams.
// Each weight row is its own stream, and at a row's end the hardware
// prefetchers retrain on fresh pages (a bf16 row of k = 2048 is exactly one
// 4 KiB page), so without this the first lines of every row arrive at full
// DRAM latency. Measured with 4-row tiles at m = 1, bf16, n = k = 2048, 2
// threads, against STREAM-style read bandwidth: 40% with no software
// prefetch, 55% 1 KiB ahead within the row, 75-84% one tile ahead. At least
// 1 KiB ahead for short rows. The kernels that read one row at a time (1 ×
// 1) prefetch into L2 instead (RG__PF_L2_AHEAD in cpu_impl.h).
INLINE size_t prefetch_ahead(const job_t *j, int nrt) {
  size_t g = (size_t)nrt * j->row_bytes;
  return g < 1024 ? 1024 : g;
}

// ---- Scalar GEMV ------------------------------------------------------------

static float scalar_weight(rg_dtype_t t, const unsigned char *row, int64_t p) {
  uint16_t h;
  float f;
  switch (t) {
    case RG_F32:
      memcpy(&f, row + 4 * p, 4);
      return f;
    case RG_BF16:
      memcpy(&h, row + 2 * p, 2);
      return rg_bf16_to_f32(h);
    case RG_F16:
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
// (whole q8_0 blocks and one k-quant super-block, since 256 = 8 × 32) and
// dotted with up to 8 rows of x. The widening runs at the job's level, so
// on an AVX2 CPU the k-quants (which have no AVX2 tiles) are dequantized
// with vectors.
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
        const size_t be = (size_t)rg_dtype_block_elems(j->type);
        size_t off = (size_t)c / be * (size_t)rg_dtype_block_bytes(j->type);
        // Cannot fail: the type and k were checked before the job started.
        rg_status_free(rg_row_to_f32_isa(j->isa, j->type, row + off, wbuf, len));
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

// The quantized types the panels take, dequantized per call (pk_dequant).
static int panel_quant(rg_dtype_t t) {
  return t == RG_Q8_0 || t == RG_Q4_K || t == RG_Q6_K;
}

#if RG_X86
// ---- AVX2 GEMV ----------------------------------------------------------------

// 8 float-type weights of a row from element p (a multiple of 8), widened to f32.
INLINE __attribute__((target(T_AVX2))) __m256 w8_avx2(rg_dtype_t t, const unsigned char *row,
                                                      int64_t p) {
  switch (t) {
    case RG_F32:
      return _mm256_loadu_ps((const float *)row + p);
    case RG_BF16: {
      __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + 2 * p)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    default:  // f16 (q8_0 has its own tile)
      return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * p)));
  }
}

// An NR × MR tile of a float type over the whole of k. The tail (k % 8
// values) goes through zero-padded copies so the vector loop never reads
// past a row.
INLINE __attribute__((target(T_AVX2))) void tile_avx2(const job_t *j, rg_dtype_t t, int MR,
                                                      int64_t i0, int64_t r0) {
  const unsigned char *rows[NR];
  tile_rows_at(j, r0, NR, rows);
  const float *xs[2];
  for (int i = 0; i < 2; i++) xs[i] = j->x + (i0 + (i < MR ? i : 0)) * j->k;
  __m256 acc[2][NR];
  for (int i = 0; i < MR; i++)
    for (int q = 0; q < NR; q++) acc[i][q] = _mm256_setzero_ps();
  int64_t k = j->k, p = 0;
  const size_t pf = prefetch_ahead(j, NR), eb = t == RG_F32 ? 4 : 2;
  for (; p + 8 <= k; p += 8) {
    __m256 wv[NR];
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) {
      if (!((size_t)p * eb & 63)) RG__PREFETCH_L2((const char *)rows[q] + (size_t)p * eb + pf);
      wv[q] = w8_avx2(t, rows[q], p);
    }
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
  store_tile(j, i0, MR, r0, NR, out);
}

// q8_0 on AVX2: the block's scale is widened once per block and row (not per
// 8 weights), and each row's 8 weights are scaled and used at once, so the
// tile fits the 16 registers: 8 sums, 4 scales, 2 of x, 1 of weights.
INLINE __attribute__((target(T_AVX2))) void tile_q8_avx2(const job_t *j, int MR, int64_t i0,
                                                         int64_t r0) {
  const unsigned char *rows[NR];
  tile_rows_at(j, r0, NR, rows);
  const float *xs[2];
  for (int i = 0; i < 2; i++) xs[i] = j->x + (i0 + (i < MR ? i : 0)) * j->k;
  __m256 acc[2][NR];
  for (int i = 0; i < MR; i++)
    for (int q = 0; q < NR; q++) acc[i][q] = _mm256_setzero_ps();
  const size_t pf = prefetch_ahead(j, NR);
  size_t line = 0;  // the next line of the rows to prefetch
  for (int64_t b = 0; b < j->k / 32; b++) {
    size_t pl;
    const int fetch = rg__q8_line_due(&line, (size_t)(b + 1) * 34, &pl);
    __m256 d[NR];
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) {
      if (fetch) RG__PREFETCH_L2((const char *)rows[q] + pl + pf);
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
        __m256 w = _mm256_mul_ps(
            d[q], _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)qs))));
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
  store_tile(j, i0, MR, r0, NR, out);
}

#define AVX2_TILES(name, tile)                                                               \
  __attribute__((target(T_AVX2))) static void name(const job_t *j, int64_t r0, int64_t r1) { \
    for (int64_t c0 = 0; c0 < j->m; c0 += j->m_chunk) {                                      \
      int64_t c1 = j->m - c0 < j->m_chunk ? j->m : c0 + j->m_chunk;                          \
      for (int64_t r = r0; r < r1; r += NR) {                                                \
        int64_t i0 = c0;                                                                     \
        for (; i0 + 2 <= c1; i0 += 2) tile(2, i0, r);                                        \
        if (i0 < c1) tile(1, i0, r);                                                         \
      }                                                                                      \
    }                                                                                        \
  }
#define TILE2_F32(MR, i0, r) tile_avx2(j, RG_F32, MR, i0, r)
#define TILE2_BF16(MR, i0, r) tile_avx2(j, RG_BF16, MR, i0, r)
#define TILE2_F16(MR, i0, r) tile_avx2(j, RG_F16, MR, i0, r)
#define TILE2_Q8_0(MR, i0, r) tile_q8_avx2(j, MR, i0, r)
AVX2_TILES(gemv_avx2_f32, TILE2_F32)
AVX2_TILES(gemv_avx2_bf16, TILE2_BF16)
AVX2_TILES(gemv_avx2_f16, TILE2_F16)
AVX2_TILES(gemv_avx2_q8_0, TILE2_Q8_0)

// ---- AVX-512 GEMV -------------------------------------------------------------

// 16 float-type weights of a row from element p, widened to f32; elements
// outside `mask` read as 0 and are not touched in memory.
INLINE __attribute__((target(T_AVX512))) __m512 w16_avx512(rg_dtype_t t, const unsigned char *row,
                                                           int64_t p, __mmask16 mask) {
  switch (t) {
    case RG_F32:
      return _mm512_maskz_loadu_ps(mask, (const float *)row + p);
    case RG_BF16: {
      __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, row + 2 * p));
      return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    }
    default:  // f16
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, row + 2 * p));
  }
}

// Bytes of one row that 32 weights of a float type take (a loop step).
INLINE size_t step_bytes(rg_dtype_t t) {
  return t == RG_F32 ? 128 : 64;
}

// Two shapes of tile are built:
//   1 × 1  one row of x (m = 1, or the last row of a larger m): one weight
//          row at a time, so each thread reads one sequential stream, as a
//          STREAM sum does. At m = 1 that reached ~100% of the sum's
//          bandwidth where 4 rows at a time (4 streams) reached 80-85%.
//   4 × 4  more rows of x: each widened weight vector feeds 4 FMAs and each
//          x vector 4, so loads stay below the FMA rate. (1 × 4, one stream
//          but every x vector loaded once per weight row, ran out of load
//          bandwidth: 25-28 against 35-44 GB/s at m = 2..4.)

// A float-type weight row against one row of x (1 × 1): 64 values a step
// into four sums, with no masks, then the rest of the row masked 16 at a
// time. Against the 4 × 4 body run with one row (32 values a step, masks
// computed every step, two sums), one core from L2 (n = 256, k = 2048):
// f16 33 -> 55 GB/s, bf16 32 -> 49, f32 51 -> 53; from DRAM at m = 1 (n =
// 8192, 2 threads, A/B in one run) f16 went from 77-83% to 84-92% of read
// bandwidth, bf16 from 79-81% to 80-85%, f32 86% to 97%: a kernel that is
// not much faster than a core's share of the bus also leaves it idle part
// of the time.
// One row's dot product with x, in the order both m = 1 kernels keep (so
// rows_1xn_kblocked's results are row_1x1's, bit for bit): four sums over
// whole steps of 64 values, then the rest of k masked into the first, then
// the four added pairwise.
INLINE __attribute__((target(T_AVX512))) void dot64_step(rg_dtype_t t, const unsigned char *row,
                                                         const float *x, int64_t p, __m512 a[4]) {
#pragma GCC unroll 4
  for (int s = 0; s < 4; s++)
    a[s] = _mm512_fmadd_ps(w16_avx512(t, row, p + 16 * s, 0xffff), _mm512_loadu_ps(x + p + 16 * s),
                           a[s]);
}

INLINE __attribute__((target(T_AVX512))) float dot_finish(rg_dtype_t t, const unsigned char *row,
                                                          const float *x, int64_t p, int64_t k,
                                                          __m512 a[4]) {
  for (; p < k; p += 16) {
    const __mmask16 m = k - p >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - p)) - 1);
    a[0] = _mm512_fmadd_ps(w16_avx512(t, row, p, m), _mm512_maskz_loadu_ps(m, x + p), a[0]);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

INLINE __attribute__((target(T_AVX512))) void row_1x1(const job_t *j, rg_dtype_t t, int64_t i0,
                                                      int64_t r) {
  const unsigned char *row = j->w + (size_t)r * j->row_bytes;
  const float *x = j->x + i0 * j->k;
  const int64_t k = j->k;
  const size_t eb = t == RG_F32 ? 4 : 2;
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                 _mm512_setzero_ps()};
  int64_t p = 0;
  for (; p + 64 <= k; p += 64) {
    // One stream: into L2, RG__PF_L2_AHEAD on; a line per 64 bytes.
    const unsigned char *at = row + (size_t)p * eb;
    for (size_t o = 0; o < 64 * eb; o += 64) RG__PREFETCH_L2(at + RG__PF_L2_AHEAD + o);
    dot64_step(t, row, x, p, a);
  }
  float out[1][NR] = {{dot_finish(t, row, x, p, k, a)}};
  store_tile(j, i0, 1, r, 1, out);
}

// m = 1 against nr <= NR weight rows whose x does not fit L1 beside the
// weight stream (k > RG__X_L1_MAX floats: the down projection's k = 8192 is
// 32 KiB of x, all of a Zen 4 L1): the rows are walked in blocks of
// RG__X_BLOCK values, all nr rows per block, so the block of x stays in L1
// and each row's weights are read once. Each row's four sums take the same
// values in the same order as in row_1x1, so the results are bit-identical
// to it (dot64_step, dot_finish). The prefetch runs one group (nr rows) ahead, in address order and
// at the rate the group is read, so every line of the next group is in L2 when its turn comes
// although the group itself is read block by block.
enum { RG__X_L1_MAX = 4096, RG__X_BLOCK = 2048 };
INLINE __attribute__((target(T_AVX512))) void rows_1xn_kblocked(const job_t *j, rg_dtype_t t,
                                                                int64_t i0, int64_t r0, int nr) {
  const unsigned char *rows[NR];
  tile_rows_at(j, r0, NR, rows);
  const float *x = j->x + i0 * j->k;
  const int64_t k = j->k, k64 = k - k % 64;
  const size_t eb = t == RG_F32 ? 4 : 2;
  const unsigned char *pf = j->w + (size_t)(r0 + nr) * j->row_bytes;  // the next group
  __m512 a[NR][4];
#pragma GCC unroll 4
  for (int q = 0; q < NR; q++)
#pragma GCC unroll 4
    for (int s = 0; s < 4; s++) a[q][s] = _mm512_setzero_ps();
  for (int64_t kb = 0; kb < k64; kb += RG__X_BLOCK) {
    const int64_t ke = kb + RG__X_BLOCK < k64 ? kb + RG__X_BLOCK : k64;
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) {
      if (q >= nr) break;
      for (int64_t p = kb; p < ke; p += 64) {
        for (size_t o = 0; o < 64 * eb; o += 64) RG__PREFETCH_L2(pf + o);
        pf += 64 * eb;
        dot64_step(t, rows[q], x, p, a[q]);
      }
    }
  }
  float out[1][NR];
#pragma GCC unroll 4
  for (int q = 0; q < NR; q++) out[0][q] = dot_finish(t, rows[q], x, k64, k, a[q]);
  store_tile(j, i0, 1, r0, nr, out);
}

// One 32-value step of the 4 × 4 tile below: values past the masks read as
// 0 and are not touched in memory.
INLINE __attribute__((target(T_AVX512))) void tile_step(rg_dtype_t t, const unsigned char *rows[NR],
                                                        const float *xs[4], int64_t p, size_t off,
                                                        size_t pf, __mmask16 m0, __mmask16 m1,
                                                        __m512 acc[4][NR]) {
  const size_t sb = step_bytes(t);
  __m512 w0[NR], w1[NR];
#pragma GCC unroll 4
  for (int q = 0; q < NR; q++) {
    // Into L2: see RG__PF_L2_AHEAD in cpu_impl.h.
    RG__PREFETCH_L2((const char *)rows[q] + off + pf);
    if (sb > 64) RG__PREFETCH_L2((const char *)rows[q] + off + pf + 64);
    w0[q] = w16_avx512(t, rows[q], p, m0);
    w1[q] = w16_avx512(t, rows[q], p + 16, m1);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++) {
    __m512 x0 = _mm512_maskz_loadu_ps(m0, xs[i] + p),
           x1 = _mm512_maskz_loadu_ps(m1, xs[i] + p + 16);
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) {
      acc[i][q] = _mm512_fmadd_ps(w0[q], x0, acc[i][q]);
      acc[i][q] = _mm512_fmadd_ps(w1[q], x1, acc[i][q]);
    }
  }
}

// The float types, 4 × 4 (rows of x past mv repeat row mv - 1 and are not
// stored), 32 values a step. Whole steps run with constant full masks, which
// the compiler turns into plain loads; only a row's last, partial step is
// masked. (One masked body for all steps ran as fast in a release build, but
// AddressSanitizer checks masked loads lane by lane: f32 at m = 16 ran 16x
// slower than without it, behind the m = 1 kernel.) The sums are the same
// either way, bit for bit.
// tile_step for 6 rows of x, a half step at a time (4 weight vectors live,
// not 8, beside the 24 sums): each sum takes the same two FMAs in the same
// order as in tile_step, so the results are the same bits. Passes of 6
// widen each weight vector for 6 rows of x instead of 4: against 4-row
// passes only, 60 alternated calls each from DRAM in one process (Zen 4 VM,
// 2 threads), mean time ratio at n = 8192, k = 2048 / n = 2048, k = 8192:
// f16 m = 6 0.86 / 0.95, 12 0.87 / 0.90, 16 0.86 / 0.86; bf16 (avx512)
// 0.86 / 0.96, 0.84 / 0.90, 0.88 / 0.87. f32 at m = 16 gained nothing
// (1.0: twice the bytes, it waits on memory).
INLINE __attribute__((target(T_AVX512))) void tile_step6(rg_dtype_t t,
                                                         const unsigned char *rows[NR],
                                                         const float *xs[6], int64_t p, size_t off,
                                                         size_t pf, __mmask16 m0, __mmask16 m1,
                                                         __m512 acc[6][NR]) {
  const size_t sb = step_bytes(t);
  __m512 w[NR];
#pragma GCC unroll 4
  for (int q = 0; q < NR; q++) {
    RG__PREFETCH_L2((const char *)rows[q] + off + pf);
    if (sb > 64) RG__PREFETCH_L2((const char *)rows[q] + off + pf + 64);
    w[q] = w16_avx512(t, rows[q], p, m0);
  }
#pragma GCC unroll 6
  for (int i = 0; i < 6; i++) {
    __m512 x0 = _mm512_maskz_loadu_ps(m0, xs[i] + p);
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) acc[i][q] = _mm512_fmadd_ps(w[q], x0, acc[i][q]);
  }
#pragma GCC unroll 4
  for (int q = 0; q < NR; q++) w[q] = w16_avx512(t, rows[q], p + 16, m1);
#pragma GCC unroll 6
  for (int i = 0; i < 6; i++) {
    __m512 x1 = _mm512_maskz_loadu_ps(m1, xs[i] + p + 16);
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) acc[i][q] = _mm512_fmadd_ps(w[q], x1, acc[i][q]);
  }
}

// NR weight rows by MR (4 or 6) rows of x; see tile_step and tile_step6.
INLINE __attribute__((target(T_AVX512))) void tile_avx512(const job_t *j, rg_dtype_t t,
                                                          const int MR, int mv, int64_t i0,
                                                          int64_t r0) {
  const unsigned char *rows[NR];
  tile_rows_at(j, r0, NR, rows);
  const float *xs[6];
  for (int i = 0; i < MR; i++) xs[i] = j->x + (i0 + (i < mv ? i : 0)) * j->k;
  __m512 acc[6][NR];
#pragma GCC unroll 6
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) acc[i][q] = _mm512_setzero_ps();
  const int64_t k = j->k;
  const size_t sb = step_bytes(t), pf = prefetch_ahead(j, NR);
  size_t off = 0;
  int64_t p = 0;
  for (; p + 32 <= k; p += 32, off += sb)
    if (MR == 6)
      tile_step6(t, rows, xs, p, off, pf, (__mmask16)0xffff, (__mmask16)0xffff, acc);
    else
      tile_step(t, rows, xs, p, off, pf, (__mmask16)0xffff, (__mmask16)0xffff, acc);
  if (p < k) {
    int64_t rem = k - p;
    __mmask16 m0 = rem >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << rem) - 1);
    __mmask16 m1 = rem > 16 ? (__mmask16)((1u << (rem - 16)) - 1) : 0;
    if (MR == 6)
      tile_step6(t, rows, xs, p, off, pf, m0, m1, acc);
    else
      tile_step(t, rows, xs, p, off, pf, m0, m1, acc);
  }
  float out[6][NR];
#pragma GCC unroll 6
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) out[i][q] = _mm512_reduce_add_ps(acc[i][q]);
  store_tile(j, i0, mv, r0, NR, out);
}

// q8_0, 4 × 4, one block (32 weights) a step: each block's weights are
// scaled once and feed the 4 rows of x.
INLINE __attribute__((target(T_AVX512))) void tile_q8_4x4(const job_t *j, int mv, int64_t i0,
                                                          int64_t r0) {
  const unsigned char *rows[NR];
  tile_rows_at(j, r0, NR, rows);
  const float *xs[4];
  for (int i = 0; i < 4; i++) xs[i] = j->x + (i0 + (i < mv ? i : 0)) * j->k;
  __m512 acc[4][NR];
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) acc[i][q] = _mm512_setzero_ps();
  const int64_t nb = j->k / 32;
  const size_t pf = prefetch_ahead(j, NR);
  size_t line = 0;  // the next line of the rows to prefetch
  for (int64_t b = 0; b < nb; b++) {
    size_t pl;
    const int fetch = rg__q8_line_due(&line, (size_t)(b + 1) * 34, &pl);
    __m512 lo[NR], hi[NR];
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) {
      const unsigned char *blk = rows[q] + (size_t)b * 34;
      if (fetch) RG__PREFETCH_L2((const char *)rows[q] + pl + pf);
      uint16_t h;
      memcpy(&h, blk, 2);
      __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
      lo[q] = _mm512_mul_ps(
          d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)))));
      hi[q] = _mm512_mul_ps(
          d,
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 18)))));
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
      __m512 x0 = _mm512_loadu_ps(xs[i] + 32 * b), x1 = _mm512_loadu_ps(xs[i] + 32 * b + 16);
#pragma GCC unroll 4
      for (int q = 0; q < NR; q++)
        acc[i][q] = _mm512_fmadd_ps(hi[q], x1, _mm512_fmadd_ps(lo[q], x0, acc[i][q]));
    }
  }
  float out[4][NR];
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++)
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) out[i][q] = _mm512_reduce_add_ps(acc[i][q]);
  store_tile(j, i0, mv, r0, NR, out);
}

// The 32 weights of q8_0 block `blk` dotted with x (32 floats), unscaled.
INLINE __attribute__((target(T_AVX512))) __m512 q8_dot(const unsigned char *blk, const float *x) {
  __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2))));
  __m512 hi =
      _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 18))));
  return _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + 16), _mm512_mul_ps(lo, _mm512_loadu_ps(x)));
}

INLINE __attribute__((target(T_AVX512))) __m512 q8_scale(const unsigned char *blk) {
  uint16_t h;
  memcpy(&h, blk, 2);
  return _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
}

// q8_0, 1 × 1, two blocks a step into two sums. Each block's scale goes onto
// its partial dot product instead of onto every weight: a third less vector
// work, which is what keeps this kernel near DRAM speed at m = 1.
INLINE __attribute__((target(T_AVX512))) void tile_q8_1x1(const job_t *j, int64_t i0, int64_t r) {
  const unsigned char *row = j->w + (size_t)r * j->row_bytes;
  const float *x = j->x + i0 * j->k;
  const size_t pf = RG__PF_L2_AHEAD;
  const int64_t nb = j->k / 32;
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t b = 0;
  size_t line = 0, at;  // the next line of the row to prefetch
  for (; b + 2 <= nb; b += 2) {
    const unsigned char *blk = row + (size_t)b * 34;
    while (rg__q8_line_due(&line, (size_t)(b + 2) * 34, &at)) RG__PREFETCH_L2(row + at + pf);
    a0 = _mm512_fmadd_ps(q8_scale(blk), q8_dot(blk, x + 32 * b), a0);
    a1 = _mm512_fmadd_ps(q8_scale(blk + 34), q8_dot(blk + 34, x + 32 * b + 32), a1);
  }
  if (b < nb)
    a0 = _mm512_fmadd_ps(q8_scale(row + (size_t)b * 34), q8_dot(row + (size_t)b * 34, x + 32 * b),
                         a0);
  float out[1][NR] = {{_mm512_reduce_add_ps(_mm512_add_ps(a0, a1))}};
  store_tile(j, i0, 1, r, 1, out);
}

// Rows [r0, r1) for all of x, one m_chunk of x at a time, in groups of NR
// rows; within a group, rows of x in passes of up to max_mr (pass_rows),
// a single leftover row of x against each of the group's rows in turn
// (1 × 1), or against the whole group in blocks of k when x would not stay
// in L1 (rows_1xn_kblocked; `kblocked` names the float type, RG_DTYPE_COUNT
// for none).
#define AVX512_TILES(T, name, tile, max_mr, kblocked)                                   \
  __attribute__((target(T))) static void name(const job_t *j, int64_t r0, int64_t r1) { \
    for (int64_t c0 = 0; c0 < j->m; c0 += j->m_chunk) {                                 \
      int64_t c1 = j->m - c0 < j->m_chunk ? j->m : c0 + j->m_chunk;                     \
      for (int64_t r = r0; r < r1; r += NR) {                                           \
        int64_t re = r + NR < r1 ? r + NR : r1;                                         \
        for (int64_t i0 = c0; i0 < c1;) {                                               \
          int mv = pass_rows(c1 - i0, max_mr);                                          \
          if (mv > 4)                                                                   \
            tile(4, 6, mv, i0, r);                                                      \
          else if (mv > 1 || j->invariant)                                              \
            tile(4, 4, mv, i0, r);                                                      \
          else if (kblocked != RG_DTYPE_COUNT && j->k > RG__X_L1_MAX)                   \
            rows_1xn_kblocked(j, kblocked, i0, r, (int)(re - r));                       \
          else                                                                          \
            for (int64_t rr = r; rr < re; rr++) tile(1, 1, 1, i0, rr);                  \
          i0 += mv;                                                                     \
        }                                                                               \
      }                                                                                 \
    }                                                                                   \
  }
#define TILE_F32(NRT, MR, mv, i0, r) \
  (NRT == 1 ? row_1x1(j, RG_F32, i0, r) : tile_avx512(j, RG_F32, MR, mv, i0, r))
#define TILE_BF16(NRT, MR, mv, i0, r) \
  (NRT == 1 ? row_1x1(j, RG_BF16, i0, r) : tile_avx512(j, RG_BF16, MR, mv, i0, r))
#define TILE_F16(NRT, MR, mv, i0, r) \
  (NRT == 1 ? row_1x1(j, RG_F16, i0, r) : tile_avx512(j, RG_F16, MR, mv, i0, r))
#define TILE_Q8_0(NRT, MR, mv, i0, r) (NRT == 1 ? tile_q8_1x1(j, i0, r) : tile_q8_4x4(j, mv, i0, r))
AVX512_TILES(T_AVX512, gemv_avx512_f32, TILE_F32, 6, RG_F32)
AVX512_TILES(T_AVX512, gemv_avx512_bf16, TILE_BF16, 6, RG_BF16)
AVX512_TILES(T_AVX512, gemv_avx512_f16, TILE_F16, 6, RG_F16)
AVX512_TILES(T_AVX512, gemv_avx512_q8_0, TILE_Q8_0, 4, RG_DTYPE_COUNT)

// ---- AVX512_BF16 GEMV: vdpbf16ps on bf16 weights and x rounded to bf16 ---------

// The GEMV tiling, but the weights go to vdpbf16ps as they are stored,
// against x rounded to bf16 once per call: one instruction does 32
// multiply-adds where the widening kernel needs two FMAs plus the widening.
// Products of two bf16 are exact in f32 and the sums are f32, so the only
// extra error is x's rounding (relative 2^-9 per element; NMSE ~1e-6). Used
// from m = DP_MIN_M (8) on.
//
// A tile is NR (4) weight rows by MR rows of x, MR 4 or 6 (a partial block
// of x rows, mv < MR, repeats its last row). Each pass over the tile's
// weight rows costs NR loads and NR prefetches a step whatever MR is, so at
// m = 16 three passes of 6, 6 and 4 rows beat four of 4: 24 vdpbf16ps for
// 14 loads a step instead of 16 for 12 (the weights stream from DRAM, x and
// the passes after the first from cache). Against 4-row passes only, same
// process, 40 alternated calls each from DRAM (Zen 4 VM, 2 threads), mean
// time ratio n = 8192, k = 2048 / n = 2048, k = 8192, two runs: m = 12
// 0.84-0.88 / 0.86-0.88, 16 0.76-0.92 / 0.81-0.86, 24 0.92 / 0.82, 32 0.90 /
// 0.81, 64 0.93 / 0.87, 128 0.93 / 0.86. At m = 7-8 two 4-row passes do
// better than 6 and a ragged one (6 + 2: 1.4x the time at n = 8192), as
// pass_rows has it. 7 rows of x would need 28
// accumulators and the 4 weight vectors, more than the 32 registers. Each
// output's sum runs over k in the same order in either tile, so the results
// do not depend on the split (batch-invariant mode relies on that).
enum { DP_MAX_MR = 6 };
INLINE __attribute__((target(T_AVX512BF16))) void tile_dpbf16(const job_t *j, const int MR, int mv,
                                                              int64_t i0, int64_t r0) {
  const unsigned char *rows[NR];
  tile_rows_at(j, r0, NR, rows);
  const uint16_t *xs[DP_MAX_MR];
  for (int i = 0; i < MR; i++) xs[i] = j->xb + (i0 + (i < mv ? i : 0)) * j->kp;
  __m512 acc[DP_MAX_MR][NR];
#pragma GCC unroll 6
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) acc[i][q] = _mm512_setzero_ps();
  const int64_t k = j->k;
  const size_t pf = prefetch_ahead(j, NR);
  for (int64_t p = 0; p < k; p += 32) {
    // x is zero-padded to kp; the weights' last partial step is masked.
    __mmask32 mask = k - p >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (k - p)) - 1);
    __m512bh wv[NR];
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) {
      // Into L2, not L1: the rows of x streaming through L1 (16 x 4 KiB at
      // m = 16) evicted the next tile before its first pass, which then
      // waited on DRAM while the other passes left the bus idle (m = 16 at
      // 190-210 GFLOP/s, 260-310 with this, Zen 4 VM, 2 threads). Every
      // pass asks again: asking in the first pass only ran as slowly as L1.
      RG__PREFETCH_L2((const char *)rows[q] + 2 * p + pf);
      wv[q] = (__m512bh)_mm512_maskz_loadu_epi16(mask, rows[q] + 2 * p);
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
      __m512bh xv = (__m512bh)_mm512_loadu_si512(xs[i] + p);
#pragma GCC unroll 4
      for (int q = 0; q < NR; q++) acc[i][q] = _mm512_dpbf16_ps(acc[i][q], wv[q], xv);
    }
  }
  float out[DP_MAX_MR][NR];
#pragma GCC unroll 6
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
    for (int q = 0; q < NR; q++) out[i][q] = _mm512_reduce_add_ps(acc[i][q]);
  store_tile(j, i0, mv, r0, NR, out);
}

__attribute__((target(T_AVX512BF16))) static void gemv_dpbf16(const job_t *j, int64_t r0,
                                                              int64_t r1) {
  for (int64_t c0 = 0; c0 < j->m; c0 += j->m_chunk) {
    int64_t c1 = j->m - c0 < j->m_chunk ? j->m : c0 + j->m_chunk;
    for (int64_t r = r0; r < r1; r += NR)
      for (int64_t i0 = c0; i0 < c1;) {
        int mv = pass_rows(c1 - i0, 6);
        if (mv > 4)
          tile_dpbf16(j, 6, mv, i0, r);
        else
          tile_dpbf16(j, 4, mv, i0, r);
        i0 += mv;
      }
  }
}

// ---- AVX512_BF16 GEMM on packed weight panels: prefill-sized batches ----------

// The GEMV above dots each weight row with each row of x and sums 16 lanes
// at the end; in place it reaches 0.55-0.8 of the vdpbf16ps peak from m =
// 16 on (Zen 4 VM, its next tile prefetched into L2), though the same loop
// on data held in L1 runs at the peak. This path is a GEMM in the usual
// form instead: a panel of PK_NB weight rows and PK_KC values of k is
// packed, with a 16 x 16 transpose of 32-bit pairs (rg__transpose16, as the
// AMX kernels build their B tiles), so that one 64-byte load holds the same pair
// of k positions for 16 rows, and vdpbf16ps multiplies it by a pair of x
// broadcast from memory: PK_MR rows of x by 32 columns of y in 16
// accumulators, with no horizontal sums. The panel (16 KiB) stays in L1
// for every row of x, so the packing, read once from memory, is shared by
// all of them; below PK_MIN_M rows it costs more than it saves. Each
// output is the sum over k in pairs, in order, in f32; x is rounded to
// bf16 as in the GEMV (same error).
enum { PK_NB = 32, PK_KC = 256, PK_MR = 8, PK_MC = 512 };
_Static_assert(PK_KC % 256 == 0, "a panel's k block holds whole q4_K / q6_K blocks (pk_dequant)");

// Values [kc, kc + 256) of a quantized row (q8_0, q4_K, q6_K; zeros past
// k), dequantized (llama.cpp's arithmetic) and rounded to bf16 (round to
// nearest even).
__attribute__((target(T_AVX512BF16))) static void pk_dequant(const job_t *j,
                                                             const unsigned char *row, int64_t kc,
                                                             uint16_t *out) {
  float f[PK_KC] __attribute__((aligned(64)));
  const size_t be = (size_t)rg_dtype_block_elems(j->type),
               bb = (size_t)rg_dtype_block_bytes(j->type);
  // Cannot fail: the type, the level and the row length were checked.
  rg_status_free(rg_row_to_f32_isa(j->isa, j->type, row + (size_t)kc / be * bb, f,
                                   j->k - kc < PK_KC ? j->k - kc : PK_KC));
  for (int64_t i = j->k - kc; i < PK_KC; i++) f[i] = 0;  // past k
  for (int i = 0; i < PK_KC; i += 32)
    _mm512_store_si512(
        out + i, (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(f + i + 16), _mm512_load_ps(f + i)));
}

// Packs weight rows [r0, r0 + PK_NB) (rows past n repeat the last), values
// [kc, kc + 2 np) (np a multiple of 16; values past k are zero) into
// pan[np][PK_NB] 32-bit pairs.
__attribute__((target(T_AVX512))) static void pk_pack(const job_t *j, int64_t r0, int64_t kc,
                                                      int64_t np, uint32_t *pan) {
  const unsigned char *rows[PK_NB];
  // Quantized weights (q8_0, q4_K, q6_K): each row's 256 values at kc
  // dequantized and rounded to bf16 here first; the loads below then count
  // from kc in these rows.
  uint16_t dq[PK_NB][PK_KC] __attribute__((aligned(64)));
  const int quant = panel_quant(j->type);
  for (int q = 0; q < PK_NB; q++) {
    int64_t r = r0 + q < j->n ? r0 + q : j->n - 1;
    rows[q] = j->w + (size_t)r * j->row_bytes;
    if (quant) {
      rows[q] = (const unsigned char *)dq[q];
      if (r < r0 + q)  // past n: the last row again
        memcpy(dq[q], dq[q - 1], sizeof dq[q]);
      else
        pk_dequant(j, j->w + (size_t)r * j->row_bytes, kc, dq[q]);
    }
  }
  for (int64_t p0 = 0; p0 < np; p0 += 16) {
    const int64_t e0 = kc + 2 * p0;  // the first value of these 16 pairs
    const __mmask32 mask = j->k - e0 >= 32 ? (__mmask32)0xffffffffu
                           : j->k > e0     ? (__mmask32)((1u << (j->k - e0)) - 1)
                                           : 0;
    for (int h = 0; h < PK_NB / 16; h++) {
      __m512i r[16];
#pragma GCC unroll 16
      for (int q = 0; q < 16; q++)
        r[q] = _mm512_maskz_loadu_epi16(mask, rows[16 * h + q] + 2 * (quant ? e0 - kc : e0));
      rg__transpose16(r);  // r[c]: pair c of each of the 16 rows
#pragma GCC unroll 16
      for (int c = 0; c < 16; c++) _mm512_store_si512(pan + (p0 + c) * PK_NB + 16 * h, r[c]);
    }
  }
}

// The masks of y's columns [r0, r0 + 16) and [r0 + 16, r0 + 32) below n.
static inline void pk_col_masks(const job_t *j, int64_t r0, __mmask16 *m0, __mmask16 *m1) {
  const int64_t cols = j->n - r0 < PK_NB ? j->n - r0 : PK_NB;
  *m0 = cols >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << cols) - 1);
  *m1 = cols >= 32 ? (__mmask16)0xffff : cols > 16 ? (__mmask16)((1u << (cols - 16)) - 1) : 0;
}

// Rows [i0, i0 + mv) of x (mv <= MR <= PK_MR) against a packed panel of np
// pairs from value kc on (kc a multiple of PK_KC): y's columns [r0, r0 +
// PK_NB) (those below n) get the panel's sums, added to what they hold
// unless first; the last panel of k adds the bias.
// Rows past mv repeat row i0 and are not stored. pf, when not NULL, is
// asked into L2 a line at a time, 2 / pf_div lines a pair (from line 2p /
// pf_div on): the next weights this thread streams, for panels packed at
// load, spread over the pf_div passes of x that read this block so that
// memory stays busy through all of them. MR is a constant in each
// instantiation below, so a decode row costs 2 vdpbf16ps a pair, not 16.
__attribute__((target(T_AVX512BF16), always_inline)) static inline void pk_micro_mr(
    const job_t *j, const uint32_t *pan, int64_t np, int64_t kc, int64_t i0, int mv, int64_t r0,
    int first, int last, const uint32_t *pf, int pf_div, const int MR) {
  __mmask16 m0, m1;
  pk_col_masks(j, r0, &m0, &m1);
  __m512 acc[PK_MR][2];
#pragma GCC unroll 8
  for (int i = 0; i < MR; i++) {
    float *yr = j->y + (i0 + (i < mv ? i : 0)) * j->n + r0;
    acc[i][0] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, yr);
    acc[i][1] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, yr + 16);
  }
  // np may span several blocks of k (a whole panel in one call): x comes
  // in blocks of PK_KC values (x_to_blocks), row i of block b at
  // (b * m + i) * PK_KC, so the rows in play sit 512 bytes apart rather
  // than a row of k apart, which put all eight in one set of L1.
  int64_t line = 0;
  int due = 0;
  for (int64_t q0 = 0; q0 < np; q0 += PK_KC / 2) {
    const int64_t q1 = np - q0 < PK_KC / 2 ? np : q0 + PK_KC / 2, blk = (kc + 2 * q0) / PK_KC;
    const uint16_t *xs[PK_MR];
    for (int i = 0; i < MR; i++) xs[i] = j->xb + (blk * j->m + i0 + (i < mv ? i : 0)) * PK_KC;
    for (int64_t p = q0; p < q1; p++) {
      // 2 / pf_div lines a pair, counted without a division.
      if (pf)
        for (due += 2; due >= pf_div; due -= pf_div, line++)
          RG__PREFETCH_L2((const char *)pf + line * 64);
      const __m512bh w0 = (__m512bh)_mm512_load_si512(pan + p * PK_NB);
      const __m512bh w1 = (__m512bh)_mm512_load_si512(pan + p * PK_NB + 16);
#pragma GCC unroll 8
      for (int i = 0; i < MR; i++) {
        uint32_t xv;
        memcpy(&xv, xs[i] + 2 * (p - q0), 4);
        const __m512bh b = (__m512bh)_mm512_set1_epi32((int)xv);
        acc[i][0] = _mm512_dpbf16_ps(acc[i][0], w0, b);
        acc[i][1] = _mm512_dpbf16_ps(acc[i][1], w1, b);
      }
    }
  }
  __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
  if (last && j->bias) {
    b0 = _mm512_maskz_loadu_ps(m0, j->bias + r0);
    b1 = _mm512_maskz_loadu_ps(m1, j->bias + r0 + 16);
  }
  for (int i = 0; i < mv; i++) {
    float *yr = j->y + (i0 + i) * j->n + r0;
    _mm512_mask_storeu_ps(yr, m0, _mm512_add_ps(acc[i][0], b0));
    _mm512_mask_storeu_ps(yr + 16, m1, _mm512_add_ps(acc[i][1], b1));
  }
}

// The micro-kernels' instantiations, one per MR, and per number of rows of
// x the narrowest that holds them (f16's below take the same form).
typedef void (*pk_micro_fn)(const job_t *j, const uint32_t *pan, int64_t np, int64_t kc, int64_t i0,
                            int mv, int64_t r0, int first, int last, const uint32_t *pf,
                            int pf_div);
#define PK_MICRO_MR(NAME, TARGET, R)                                                               \
  __attribute__((target(TARGET))) static void NAME##R(                                             \
      const job_t *j, const uint32_t *pan, int64_t np, int64_t kc, int64_t i0, int mv, int64_t r0, \
      int first, int last, const uint32_t *pf, int pf_div) {                                       \
    NAME##_mr(j, pan, np, kc, i0, mv, r0, first, last, pf, pf_div, R);                             \
  }
PK_MICRO_MR(pk_micro, T_AVX512BF16, 1)
PK_MICRO_MR(pk_micro, T_AVX512BF16, 2)
PK_MICRO_MR(pk_micro, T_AVX512BF16, 4)
PK_MICRO_MR(pk_micro, T_AVX512BF16, 8)
static const pk_micro_fn pk_micro_for[PK_MR + 1] = {
    NULL, pk_micro1, pk_micro2, pk_micro4, pk_micro4, pk_micro8, pk_micro8, pk_micro8, pk_micro8};

// mv rows of x (1 to PK_MR) on the narrowest instantiation that holds them.
static void pk_micro(const job_t *j, const uint32_t *pan, int64_t np, int64_t kc, int64_t i0,
                     int mv, int64_t r0, int first, int last, const uint32_t *pf, int pf_div) {
  pk_micro_for[mv](j, pan, np, kc, i0, mv, r0, first, last, pf, pf_div);
}

// The same panels holding f16 (RG_WLAYOUT_F16_PANELS), widened by
// vcvtph2ps and multiplied with x in f32: a 64-byte load of a pair for 16
// rows becomes two vectors of (row, even k), (row, odd k) lanes, each
// multiplied by x's pair broadcast as one 64-bit (even, odd) value, so a
// row's even and odd products collect in neighbouring lanes, added together
// once at the end. x is not rounded: the sums are the row kernels' up to f32
// order. Per pair and row of x: 4 FMAs (32 weight rows), against 4 widenings
// shared by up to PKH_MR rows; at m = 1 that is 11 instructions per 128
// bytes of weights, far below what streaming them from DRAM leaves.
enum { PKH_MR = 4 };

__attribute__((target(T_AVX512), always_inline)) static inline void pkh_micro_mr(
    const job_t *j, const uint32_t *pan, int64_t np, int64_t kc, int64_t i0, int mv, int64_t r0,
    int first, int last, const uint32_t *pf, int pf_div, const int MR) {
  __mmask16 m0, m1;
  pk_col_masks(j, r0, &m0, &m1);
  __m512 acc[PKH_MR][4];
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
    for (int q = 0; q < 4; q++) acc[i][q] = _mm512_setzero_ps();
  const float *xs[PKH_MR];
  for (int i = 0; i < MR; i++) xs[i] = j->xf + (i0 + (i < mv ? i : 0)) * j->kp + kc;
  int64_t line = 0;
  int due = 0;
  for (int64_t p = 0; p < np; p++) {
    if (pf)
      for (due += 2; due >= pf_div; due -= pf_div, line++)
        RG__PREFETCH_L2((const char *)pf + line * 64);
    // 32-byte loads straight into vcvtph2ps (its memory form), rather
    // than 64-byte ones split by vextracti64x4.
    const uint32_t *wp = pan + p * PK_NB;
    const __m512 f0 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)wp));
    const __m512 f1 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wp + 8)));
    const __m512 f2 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wp + 16)));
    const __m512 f3 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wp + 24)));
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) {
      double xv;
      memcpy(&xv, xs[i] + 2 * p, 8);
      const __m512 b = _mm512_castpd_ps(_mm512_set1_pd(xv));
      acc[i][0] = _mm512_fmadd_ps(f0, b, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(f1, b, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(f2, b, acc[i][2]);
      acc[i][3] = _mm512_fmadd_ps(f3, b, acc[i][3]);
    }
  }
  // Lane 2r + e of acc[i][q] is row 8q + r's sum over k = e (mod 2).
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
  if (last && j->bias) {
    b0 = _mm512_maskz_loadu_ps(m0, j->bias + r0);
    b1 = _mm512_maskz_loadu_ps(m1, j->bias + r0 + 16);
  }
  for (int i = 0; i < mv; i++) {
    float *yr = j->y + (i0 + i) * j->n + r0;
    __m512 s0 = _mm512_add_ps(_mm512_permutex2var_ps(acc[i][0], even, acc[i][1]),
                              _mm512_permutex2var_ps(acc[i][0], odd, acc[i][1]));
    __m512 s1 = _mm512_add_ps(_mm512_permutex2var_ps(acc[i][2], even, acc[i][3]),
                              _mm512_permutex2var_ps(acc[i][2], odd, acc[i][3]));
    if (!first) {
      s0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, yr), s0);
      s1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, yr + 16), s1);
    }
    _mm512_mask_storeu_ps(yr, m0, _mm512_add_ps(s0, b0));
    _mm512_mask_storeu_ps(yr + 16, m1, _mm512_add_ps(s1, b1));
  }
}

PK_MICRO_MR(pkh_micro, T_AVX512, 1)
PK_MICRO_MR(pkh_micro, T_AVX512, 2)
PK_MICRO_MR(pkh_micro, T_AVX512, 4)
#undef PK_MICRO_MR
static const pk_micro_fn pkh_micro_for[PKH_MR + 1] = {NULL, pkh_micro1, pkh_micro2, pkh_micro4,
                                                      pkh_micro4};

// x rounded to bf16 in blocks of PK_KC values: block b of row i at
// (b * m + i) * PK_KC, zeros past k.
static void x_to_blocks_worker(void *ctx, size_t b, size_t e, int thread) {
  (void)thread;
  const job_t *j = ctx;
  uint16_t *xb = (uint16_t *)j->xb;
  const int64_t nblk = (j->k + PK_KC - 1) / PK_KC;
  for (size_t i = b; i < e; i++)
    for (int64_t kb = 0; kb < nblk; kb++) {
      const int64_t k0 = kb * PK_KC, len = j->k - k0 < PK_KC ? j->k - k0 : PK_KC;
      uint16_t *dst = xb + ((size_t)kb * (size_t)j->m + i) * PK_KC;
      rg_status_free(rg_row_from_f32_isa(j->isa, RG_BF16, j->x + i * (size_t)j->k + k0, dst, len));
      memset(dst + len, 0, (size_t)(PK_KC - len) * sizeof(uint16_t));
    }
}

// Asks for the weights the next pack reads (rows [nr, nr + PK_NB) at k
// offset nk) into L2 while the micro-kernels run on this panel: 32 rows
// read 512 bytes at a time are more streams than the hardware prefetchers
// follow.
static void pk_prefetch(const job_t *j, int64_t nr, int64_t nk) {
  const int64_t bytes = 2 * (j->k - nk < PK_KC ? j->k - nk : PK_KC);
  for (int q = 0; q < PK_NB && nr + q < j->n; q++) {
    const char *row = (const char *)j->w + (size_t)(nr + q) * j->row_bytes + 2 * nk;
    for (int64_t off = 0; off < bytes; off += 64) RG__PREFETCH_L2(row + off);
  }
}

// Weight-row panels [b, e) of PK_NB rows each: every row of x, in chunks
// of PK_MC rows, one block of k at a time, so each packed panel serves the
// whole chunk and y's tile stays in L1 from block to block. (Blocks of k
// outer and panels inner, which keeps a chunk's x for the block in L2
// when all of x does not fit, ran 1.2-1.4x slower at m = 32-64 and no
// faster at m = 512: y's partial sums then go through L2 every block.)
static void pk_worker(void *ctx, size_t b, size_t e, int thread) {
  (void)thread;
  const job_t *j = ctx;
  uint32_t pan[PK_KC / 2 * PK_NB] __attribute__((aligned(64)));
  // Pairs up to k rounded up to 32; zeros past k.
  const int64_t k32 = (j->k + 31) / 32 * 32;
  for (size_t blk = b; blk < e; blk++) {
    const int64_t r0 = (int64_t)blk * PK_NB;
    for (int64_t c0 = 0; c0 < j->m; c0 += PK_MC) {
      const int64_t c1 = j->m - c0 < PK_MC ? j->m : c0 + PK_MC;
      for (int64_t kc = 0; kc < k32; kc += PK_KC) {
        const int64_t np = (k32 - kc < PK_KC ? k32 - kc : PK_KC) / 2;
        pk_pack(j, r0, kc, np, pan);
        if (panel_quant(j->type)) {
          // Quantized rows: the hardware prefetchers follow them.
        } else if (kc + PK_KC < k32) {
          pk_prefetch(j, r0, kc + PK_KC);
        } else if (c1 == j->m && blk + 1 < e) {
          pk_prefetch(j, r0 + PK_NB, 0);
        }
        for (int64_t i0 = c0; i0 < c1; i0 += PK_MR)
          pk_micro(j, pan, np, kc, i0, c1 - i0 < PK_MR ? (int)(c1 - i0) : PK_MR, r0, kc == 0,
                   kc + PK_KC >= k32, NULL, 1);
      }
    }
  }
}

// How far ahead a one-pass (decode) call asks for the panels it streams, as
// the row GEMV does (RG__PF_L2_AHEAD), and from how many rows of x it asks
// at all. Up to 4 rows the micro-kernel reads the one stream fast enough
// for the hardware prefetchers alone, and the prefetch instructions only
// took issue slots: the 1b model's layer (its 7 matrices, 16 layers' copies
// from DRAM, in sequence) at m = 1 streamed 62.9-63.9 GB/s with them and
// 70.5 GB/s without (median of 15 alternated reps, three runs, Zen 4 VM, 2
// threads); m = 2, 3, 4 ran 6-8 % faster without. From 5 rows (the 8-row
// instance) they pay: 11-13 % faster with them at m = 5-7, 16 % at m = 8.
enum { PKW_AHEAD = 8192, PKW_PREFETCH_FROM_M = 5 };
// f16 panels ask from 2 rows of x: a pair of f16 costs 4 widenings on the
// FMA pipes before its FMAs, so from 2 rows a pass no longer keeps ahead of
// the stream on the hardware prefetchers alone. Zen 4 VM, 2 threads, 8192 x
// 2048 (alternated runs): m = 4 streamed 0.51-0.55 of read bandwidth without
// and 0.85-0.94 with; m = 1 0.88-0.92 without, 0.72-0.94 with.
enum { PKH_PREFETCH_FROM_M = 2 };

// The same GEMM on weights packed at load (RG_WLAYOUT_BF16_PANELS): panel
// b's block of k at kc is at w + (b * k32 / 2 + kc / 2) * PK_NB words, and
// the matrix is one stream in (panel, block) order, so each block asks for
// the next one into L2 while its first rows of x run.
// f16 panels take pkh_micro, PKH_MR rows of x at a time.
static int64_t pk_rows_per_pass(rg_dtype_t t) {
  return t == RG_F16 ? PKH_MR : PK_MR;
}

static void pkw_panels(const job_t *j, size_t b, size_t e) {
  const int64_t k32 = (j->k + 31) / 32 * 32;
  const size_t total = (size_t)((j->n + PK_NB - 1) / PK_NB);
  const uint32_t *w = (const uint32_t *)j->w;
  const bool f16 = j->type == RG_F16;
  const pk_micro_fn *micro_for = f16 ? pkh_micro_for : pk_micro_for;
  const int64_t MR = pk_rows_per_pass(j->type);
  for (size_t blk = b; blk < e; blk++) {
    const int64_t r0 = (int64_t)blk * PK_NB;
    const uint32_t *panel = w + (size_t)blk * (size_t)(k32 / 2) * PK_NB;
    if (f16) {
      // Every pass over the whole of k, its sums in registers: a row's
      // even and odd partial sums cannot resume from y, so k is not cut
      // into blocks, and each row of y comes out the same whatever m it ran
      // in. The panel (32 rows x k) stays in L2 for the later passes, each
      // of which asks its share of the next panel in; one pass asks for its
      // own stream PKW_AHEAD ahead, from 2 rows of x on (PKH_PREFETCH_FROM_M).
      const int64_t np = k32 / 2;
      const int passes = (int)((j->m + MR - 1) / MR);
      const uint32_t *next = blk + 1 < total ? panel + np * PK_NB : NULL;
      for (int64_t i0 = 0; i0 < j->m; i0 += MR) {
        const int64_t g = i0 / MR;
        const uint32_t *pf = j->m < PKH_PREFETCH_FROM_M ? NULL
                             : passes == 1              ? panel + PKW_AHEAD / 4
                             : next
                                 ? (const uint32_t *)((const char *)next + g * np * 2 / passes * 64)
                                 : NULL;
        const int mv = j->m - i0 < MR ? (int)(j->m - i0) : (int)MR;
        micro_for[mv](j, panel, np, 0, i0, mv, r0, 1, 1, pf, passes);
      }
      continue;
    }
    if (j->m <= MR) {
      // One pass over the rows of x: the whole panel in one call, its sums
      // in registers, the stream asked PKW_AHEAD bytes ahead from 5 rows.
      const uint32_t *pf = j->m >= PKW_PREFETCH_FROM_M ? panel + PKW_AHEAD / 4 : NULL;
      micro_for[j->m](j, panel, k32 / 2, 0, 0, (int)j->m, r0, 1, 1, pf, 1);
      continue;
    }
    for (int64_t c0 = 0; c0 < j->m; c0 += PK_MC) {
      const int64_t c1 = j->m - c0 < PK_MC ? j->m : c0 + PK_MC;
      // The next block asked for a share per pass of x, so that memory
      // stays busy while the later passes read this one from L1.
      const int passes = (int)((c1 - c0 + MR - 1) / MR);
      for (int64_t kc = 0; kc < k32; kc += PK_KC) {
        const int64_t np = (k32 - kc < PK_KC ? k32 - kc : PK_KC) / 2;
        const uint32_t *pan = panel + kc / 2 * PK_NB, *next = pan + np * PK_NB;
        // The stream goes on past this range: the thread's next claim is
        // the next panels of its share.
        const int more = blk + 1 < total || kc + PK_KC < k32;
        for (int64_t i0 = c0; i0 < c1; i0 += MR) {
          const int g = (int)((i0 - c0) / MR);
          const uint32_t *pf =
              more ? (const uint32_t *)((const char *)next + (int64_t)g * np * 2 / passes * 64)
                   : NULL;
          const int mv = c1 - i0 < MR ? (int)(c1 - i0) : (int)MR;
          micro_for[mv](j, pan, np, kc, i0, mv, r0, kc == 0, kc + PK_KC >= k32, pf, passes);
        }
      }
    }
  }
}

// Panels [b, e) of the matrix packed whole (pk_pack over all of k).
static void relayout_worker(void *ctx, size_t b, size_t e, int thread) {
  (void)thread;
  const job_t *j = ctx;
  const int64_t k32 = (j->k + 31) / 32 * 32;
  uint32_t *out = (uint32_t *)j->y;  // the packed matrix
  for (size_t blk = b; blk < e; blk++)
    pk_pack(j, (int64_t)blk * PK_NB, 0, k32 / 2, out + blk * (size_t)(k32 / 2) * PK_NB);
}
#endif  // RG_X86

typedef void (*gemv_fn)(const job_t *j, int64_t r0, int64_t r1);

// Whether k-quant weights take the vpdpwssd kernel (x in int16): from the
// avx512-bf16 level on (the levels below keep x in f32), where the CPU has
// AVX512_VNNI; otherwise the vdpbf16ps one (kquants.c).
static int kquant_vnni(rg_cpu_isa_t isa, rg_dtype_t t) {
  return (t == RG_Q4_K || t == RG_Q6_K) && isa >= RG_CPU_ISA_AVX512_BF16 && rg__cpu_has_vnni();
}

// Whether m = 1 takes the vpdpbusd kernel (x as two int8 terms) for t.
static int kquant_x8(rg_cpu_isa_t isa, rg_dtype_t t) {
  return kquant_vnni(isa, t);
}

// The GEMV kernel for a level and type; dp picks vdpbf16ps for bf16.
static gemv_fn pick_gemv(rg_cpu_isa_t isa, rg_dtype_t t, int dp) {
#if RG_X86
  static const gemv_fn avx512[RG_DTYPE_COUNT] = {[RG_F32] = gemv_avx512_f32,
                                                 [RG_BF16] = gemv_avx512_bf16,
                                                 [RG_F16] = gemv_avx512_f16,
                                                 [RG_Q8_0] = gemv_avx512_q8_0};
  static const gemv_fn avx2[RG_DTYPE_COUNT] = {[RG_F32] = gemv_avx2_f32,
                                               [RG_BF16] = gemv_avx2_bf16,
                                               [RG_F16] = gemv_avx2_f16,
                                               [RG_Q8_0] = gemv_avx2_q8_0};
  if (t == RG_Q4_K || t == RG_Q6_K) {
    if (kquant_vnni(isa, t)) return rg__gemv_kquant_vnni;
    if (isa >= RG_CPU_ISA_AVX512_BF16) return rg__gemv_kquant_dpbf16;
    if (isa >= RG_CPU_ISA_AVX512) return rg__gemv_kquant_avx512;
    return gemv_scalar;
  }
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

// The work split. Each participating thread owns a contiguous share of the
// items and claims it front to back, `chunk` items at a time, so it streams
// one region of memory and its prefetches run ahead into its own next chunk
// (handing chunks out round-robin from one counter cost 10-15% of bandwidth
// on a 32 MiB matrix). A thread that finishes its share claims chunks from the
// back of the others', so a thread the OS preempts does not hold the call back.
static int claim_from(_Atomic uint64_t *share, uint32_t chunk, int from_back, size_t *b,
                      size_t *e) {
  uint64_t v = atomic_load_explicit(share, memory_order_relaxed);
  for (;;) {
    uint32_t f = (uint32_t)v, k = (uint32_t)(v >> 32);
    if (f >= k) return 0;
    uint32_t nf = f, nk = k;
    if (from_back)
      nk = k - f > chunk ? k - chunk : f;
    else
      nf = k - f > chunk ? f + chunk : k;
    if (atomic_compare_exchange_weak_explicit(share, &v, nf | (uint64_t)nk << 32,
                                              memory_order_relaxed, memory_order_relaxed)) {
      *b = from_back ? nk : f;
      *e = from_back ? k : nf;
      return 1;
    }
  }
}

// The next chunk for the thread that owns share `me`; 0 when all are done.
int rg__mm_claim(job_t *j, int me, size_t *b, size_t *e) {
  if (claim_from(&j->shares[me], j->chunk, 0, b, e)) return 1;
  for (int d = 1; d < j->n_shares; d++)
    if (claim_from(&j->shares[(me + d) % j->n_shares], j->chunk, 1, b, e)) return 1;
  return 0;
}

// Item `me` of the pool's split is the share this thread owns; it claims
// chunks of NR-row groups until none is left anywhere.
static void gemv_worker(void *ctx, size_t me, size_t unused_e, int thread) {
  const gemv_ctx_t *c = ctx;
  job_t *j = c->job;
  size_t b, e;
  while (rg__mm_claim(j, (int)me, &b, &e)) {
    int64_t r1 = (int64_t)e * NR < j->n ? (int64_t)e * NR : j->n;
    c->fn(j, (int64_t)b * NR, r1);
  }
}

#if RG_X86
// Item `me`: the share of panels this thread owns (run_shared), claimed a
// chunk at a time, then the others' tails.
static void pkw_worker(void *ctx, size_t me, size_t unused_e, int thread) {
  (void)unused_e, (void)thread;
  job_t *j = ctx;
  size_t b, e;
  while (rg__mm_claim(j, (int)me, &b, &e)) pkw_panels(j, b, e);
}
#endif

// Pool items are rows of x, rounded to bf16 and zero-padded to kp.
static void x_to_bf16_worker(void *ctx, size_t b, size_t e, int thread) {
  const job_t *j = ctx;
  uint16_t *xb = (uint16_t *)j->xb;
  for (size_t i = b; i < e; i++) {
    rg_status_free(rg_row_from_f32_isa(j->isa, RG_BF16, j->x + i * (size_t)j->k,
                                       xb + i * (size_t)j->kp, j->k));
    memset(xb + i * (size_t)j->kp + j->k, 0, (size_t)(j->kp - j->k) * sizeof(uint16_t));
  }
}

#if RG_X86
// Pool items are rows of x, copied as they are and zero-padded to kp (the
// f16 panels' x).
static void x_pad_worker(void *ctx, size_t b, size_t e, int thread) {
  (void)thread;
  const job_t *j = ctx;
  float *xf = (float *)j->xf;
  for (size_t i = b; i < e; i++) {
    memcpy(xf + i * (size_t)j->kp, j->x + i * (size_t)j->k, (size_t)j->k * sizeof(float));
    memset(xf + i * (size_t)j->kp + j->k, 0, (size_t)(j->kp - j->k) * sizeof(float));
  }
}
#endif

// ---- GEMM path: OpenBLAS on f32 tiles ------------------------------------------

// Each pool thread calls sgemm single-threaded on its own columns of y.
// cblas is row-major here: y (m, cols) = x (m, k) · Wtile^T, Wtile (cols, k).
static void sgemm_cols(const job_t *j, const float *wt, int64_t r0, int64_t cols) {
  float *y = j->y + r0;
  float beta = 0.0f;
  if (j->bias) {
    for (int64_t i = 0; i < j->m; i++)
      memcpy(y + i * j->n, j->bias + r0, (size_t)cols * sizeof(float));
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)j->m, (blasint)cols, (blasint)j->k,
              1.0f, j->x, (blasint)j->k, wt, (blasint)j->k, beta, y, (blasint)j->n);
}

// As gemv_worker, over tiles; the tile buffer is the pool thread's own.
static void gemm_worker(void *ctx, size_t me, size_t unused_e, int thread) {
  job_t *j = ctx;
  float *buf = j->tiles ? j->tiles + (size_t)thread * (size_t)j->tile_rows * (size_t)j->k : NULL;
  size_t b, e;
  while (rg__mm_claim(j, (int)me, &b, &e)) {
    int64_t r0 = (int64_t)b * j->tile_rows,
            r1 = (int64_t)e * j->tile_rows < j->n ? (int64_t)e * j->tile_rows : j->n;
    if (j->type == RG_F32) {
      sgemm_cols(j, (const float *)(j->w + (size_t)r0 * j->row_bytes), r0, r1 - r0);
      continue;
    }
    for (int64_t t0 = r0; t0 < r1; t0 += j->tile_rows) {
      int64_t rows = r1 - t0 < j->tile_rows ? r1 - t0 : j->tile_rows;
      for (int64_t r = 0; r < rows; r++) {
        // Cannot fail: type, k and isa were checked before the job started.
        rg_status_free(rg_row_to_f32_isa(j->isa, j->type, j->w + (size_t)(t0 + r) * j->row_bytes,
                                         buf + r * j->k, j->k));
      }
      sgemm_cols(j, buf, t0, rows);
    }
  }
}

// How many threads a job of `items` items runs on: one per whole `grain`
// of items (a thread is woken only for a full grain of work), at least one,
// at most the pool's threads and `cap`. Rounding up had given the tiny
// model's lm_head (75 KB of weights, 1.2 grains) a second thread; in the
// default job's worker, beside the PoCL worker on the same two cores, that
// thread's wake-up made the call 1.5-2.4x its prediction, and 0.9-1.1x on
// one thread (three runs each, alternated).
static size_t share_count(rg_pool_t *pool, size_t items, size_t grain, size_t cap) {
  size_t threads = (size_t)rg_pool_threads(pool), want = items / grain;
  if (threads > cap) threads = cap;
  if (want < threads) threads = want;
  return threads < 1 ? 1 : threads;
}

// Shares claimed a chunk at a time (run_shared), work counted in weight
// traffic, `per` bytes an item: a thread is woken for at least ~64 KiB of
// it (*grain items, for share_count) and claims chunks of ~256 KiB, or 1/8
// of a share if less: small enough to rebalance, large enough to claim
// rarely. Returns the chunk in items.
static size_t claim_chunk(rg_pool_t *pool, size_t items, size_t per, size_t *grain) {
  *grain = (65536 + per - 1) / per;
  size_t chunk = (262144 + per - 1) / per, eighth = items / (8 * (size_t)rg_pool_threads(pool));
  if (chunk > eighth) chunk = eighth > *grain ? eighth : *grain;
  return chunk;
}

// Runs fn on `threads` of the pool's threads, each owning an equal
// contiguous share of the items, claimed `chunk` items at a time.
enum { MAX_SHARES = 256 };
static void run_shared(rg_pool_t *pool, job_t *j, size_t items, size_t threads, size_t chunk,
                       rg_pool_fn_t fn, void *ctx) {
  _Atomic uint64_t shares[MAX_SHARES];
  for (size_t t = 0; t < threads; t++) {
    uint64_t f = items * t / threads, k = items * (t + 1) / threads;
    atomic_init(&shares[t], f | k << 32);
  }
  j->shares = shares;
  j->n_shares = (int)threads;
  j->chunk = chunk < 1 ? 1 : chunk > UINT32_MAX ? UINT32_MAX : (uint32_t)chunk;
  // The pool gives each of `threads` threads one item, its share's index,
  // and runs item t on pool thread t.
  rg_pool_parallel_for(pool, threads, 1, fn, ctx);
  j->shares = NULL;
}

// ---- Choice of path, names, entry points ----------------------------------------

// Tuning, measured with bench/bench_matmul.c (2 threads, n = k = 2048) on
// a 2-core Zen 5 (AVX-512, AVX512_BF16), GFLOP/s of GEMV / GEMM path:
//
//   OpenBLAS AVX-512 kernels     m=32      64       128      512
//     bf16 (vdpbf16ps)          390/124  447/198  474/256  375/323
//     f16                       259/125  293/201  230/255  199/321
//     q8_0                      263/158  284/227  259/279  234/331
//     f32                       208/166  230/251  181/293  157/339
//   OpenBLAS AVX2 kernels (OPENBLAS_CORETYPE=Haswell, as this environment
//   sets): sgemm reaches ~190 GFLOP/s, so the GEMV kernels win at every m
//   for bf16, f16 and q8_0 (m = 512: 388/190, 197/186, 218/193) and up to
//   m = 128 for f32 (187/188).
//
// - bf16 goes to vdpbf16ps from m = DP_MIN_M on. Below it both bf16 kernels
//   wait on memory, so the exact widening one is used; from about m = 8 the
//   widening kernel runs out of FMA throughput (m = 8: 284 against 201
//   GFLOP/s). vdpbf16ps then beats sgemm at every m, so bf16 never takes the
//   GEMM path where the CPU has AVX512_BF16.
// - The AVX2 GEMV kernels (16 registers, 2 rows of x at a time) lose to
//   sgemm from m = 16 (f32), 32 (q8_0) or 64 (bf16, f16); the scalar ones
//   from m = 8 (measured single-threaded against OpenBLAS's AVX2 kernels).
// - q8_0 at m <= Q8V_MAX_M goes to the vpdpwssd kernel (gemv_kquant.c)
//   from avx512-bf16 on, where the CPU has AVX512_VNNI: 1.37x less time
//   than the FMA kernel at m = 1 from L2, 1.3x at m = 2, 0.9x at m = 3
//   (where the 4 x 4 tiles share each block's widening among 3 rows).
// - bf16 from m = PK_MIN_M on takes the GEMM on packed panels instead (a
//   GEMV path of its own, chosen only automatically). Time against the
//   vdpbf16ps GEMV on a 2-core Zen 4 VM (best of 6 alternated calls from
//   DRAM, two runs), n = 8192, k = 2048 / n = 2048, k = 8192: m = 128
//   1.13-1.16 / 0.93-1.01, 192 1.08-1.09 / 0.86-0.88, 256 1.00-1.04 / 0.85-0.87,
//   512 0.88-0.91 / 0.84-0.87. (Before the GEMV's tiles prefetched into L2
//   the panels won from m = 64 and by 0.75 at 512: the GEMV had waited on
//   memory.) The 1b test model's prefill of 512: 248 -> 327 GFLOP/s in the
//   first measurement, 0.53 -> 0.70 of the vdpbf16ps peak.
//   Measured again on 2026-12-07 (same VM, weights from DRAM, best of 12
//   calls alternated both ways): packed / GEMV time at m = 64, 96, 128, 192,
//   255: n = 2048, k = 2048 0.88-0.93, 0.85-0.93, 0.89-0.90, 0.83, 0.74-0.77;
//   n = 8192, k = 2048 1.02-1.09, 0.95-0.96, 0.88-0.89, 0.80-0.81, 0.73-0.74;
//   n = 2048, k = 8192 1.02-1.05, 0.83-0.84, 0.74-0.76, 0.66-0.67, 0.66; and
//   where k fits one panel (k <= PK_KC: the tiny test model's 64 and 128) the
//   GEMV's horizontal sums are most of its time, so the panels win from m =
//   16 (0.37-0.81). Panels from PK_MIN_M = 96 on, or PK_MIN_M_SHORT_K where
//   k <= PK_KC: at 256 alone a serving run's 234-token chunk took 1.6x the
//   time of its 256-token one.
enum { DP_MIN_M = 8, Q8V_MAX_M = 2, PK_MIN_M = 96, PK_MIN_M_SHORT_K = 16 };
#define NEVER INT64_MAX

// Whether OpenBLAS picked AVX-512 sgemm kernels (its core names as of 0.3.21).
static int openblas_avx512(void) {
  static const char *const cores[] = {"skylakex", "cooperlake", "sapphirerapids"};
  const char *c = openblas_get_corename();
  for (size_t i = 0; c && i < sizeof cores / sizeof cores[0]; i++)
    if (strcasecmp(c, cores[i]) == 0) return 1;
  return 0;
}

static int64_t gemm_min_m(rg_cpu_isa_t isa, rg_dtype_t t) {
  static const int64_t avx512_fast_blas[RG_DTYPE_COUNT] = {
      [RG_F32] = 64, [RG_BF16] = 96, [RG_F16] = 96, [RG_Q8_0] = 96, [RG_Q4_K] = 96, [RG_Q6_K] = 96};
  static const int64_t avx512_slow_blas[RG_DTYPE_COUNT] = {
      [RG_F32] = 128,    [RG_BF16] = NEVER, [RG_F16] = NEVER,
      [RG_Q8_0] = NEVER, [RG_Q4_K] = NEVER, [RG_Q6_K] = NEVER};
  static const int64_t avx2[RG_DTYPE_COUNT] = {
      [RG_F32] = 16, [RG_BF16] = 64, [RG_F16] = 64, [RG_Q8_0] = 32, [RG_Q4_K] = 16, [RG_Q6_K] = 16};
  if (isa >= RG_CPU_ISA_AVX512_BF16 && t == RG_BF16) return NEVER;
  // The quantized types' GEMM at avx512-bf16 is ridge's own (bf16 panels,
  // plan_for), whatever OpenBLAS's kernels. At n = k = 2048 (Zen 4 VM, 2
  // threads, median of 9), against the vpdpwssd GEMV with its x in L1
  // (gemv_kquant.c; 300-330 GFLOP/s from m = 8): q4_K 0.8x at m = 32, 1.2x
  // at 64, 1.5x at 96; q6_K 0.9x at 64, 1.2x at 96; q8_0 (against its FMA
  // GEMV) 0.84x at 32, 1.2x at 64, 1.45x at 96. Against the sgemm tiles
  // 1.6-1.7x from m = 96 to 512 (q4_K 573 against 333 GFLOP/s at 512, q8_0
  // 500 against 300).
  static const int64_t avx512bf16_panels[RG_DTYPE_COUNT] = {
      [RG_Q8_0] = 64, [RG_Q4_K] = 64, [RG_Q6_K] = 96};
  if (isa == RG_CPU_ISA_AVX512_BF16 && panel_quant(t)) return avx512bf16_panels[t];
  if (isa >= RG_CPU_ISA_AVX512) {
    static _Atomic int fast = -1;  // computed once; racing threads store the same
    int f = atomic_load_explicit(&fast, memory_order_relaxed);
    if (f < 0) atomic_store_explicit(&fast, f = openblas_avx512(), memory_order_relaxed);
    return (f ? avx512_fast_blas : avx512_slow_blas)[t];
  }
  return isa == RG_CPU_ISA_AVX2 ? avx2[t] : 8;
}

// Where the AMX tiles take over from the GEMV kernels (amx level). The
// tiles run at the same speed however many rows of x there are up to 16
// (one tile product is 16 rows of x), so from a few rows on they win. bf16
// weights take them from m = 5: read in place, 32 rows at a time with the
// next block prefetched in k order, they stream 0.8-1.0 of read bandwidth
// at every m up to 16 where rows are 4 KiB (k = 2048), but only 0.55-0.67
// where they are 16 KiB (k = 8192, the FFN's down projection), against
// 0.9 for the GEMV up to m = 4 there. Below that the widening GEMV (4-row
// tiles, one tile ahead prefetched) streams as fast or faster:
// bench_matmul --small-m, from DRAM, one run on a shared Sapphire Rapids
// VM, share of read bandwidth, GEMV / tiles:
//                       m = 1       2        3        4        5
//   n = 8192, k = 2048    91/107   83/85    85/89    84/82    62/82
//   n = 2048, k = 8192    97/67    94/63    89/59    90/67    66/63
//   n = 2048, k = 2048    99/80    82/79    85/78    81/80    61/78
// (the machine's bandwidth moves between runs, not within one). That keeps
// batch-1 decode exact in x as well; vdpbf16ps (from DP_MIN_M) never runs
// where the tiles are. --isa avx512-bf16 or lower keeps the GEMV at every m.
// The other types go through per-thread panels, whose build costs more than
// it saves for a few rows of x (below). f32 weights stay off the tiles:
// rounding them to bf16 would lose what an f32 checkpoint is kept for.
//
// The GEMV kernels take the other types' small batches: measured on one
// core of a Sapphire Rapids VM (n = 512, k = 2048, weights in L2, so that
// compute alone is compared; us per call, GEMV / tiles, best of 15 on a
// machine shared with other jobs, so +-15%):
//           m = 1      4        8        12       16
//   f16     65/148   108/201  219/151  317/153  434/164
//   q8_0    56/167   118/196  235/175  341/175  454/179
//   q4_K    40/206    77/234  137/227  242/258  ~280/247
//   q6_K    56/239    88/263  146/254  318/302  342/256
// f16 and q8_0 run 4 rows of x per pass (4 x 4 tiles) and a 5th costs a
// pass of its own, so the tiles win from m = 5; the k-quant GEMV
// (gemv_kquant.c) costs a vpdpwssd per 32 weights and row of x, and meets
// the tiles' panel build at m = 12.
static int64_t tiles_min_m(rg_dtype_t t) {
  static const int64_t min_m[RG_DTYPE_COUNT] = {
      [RG_F32] = NEVER, [RG_BF16] = 5, [RG_F16] = 5, [RG_Q8_0] = 5, [RG_Q4_K] = 12, [RG_Q6_K] = 12};
  return (unsigned)t < RG_DTYPE_COUNT && min_m[t] ? min_m[t] : NEVER;
}

typedef struct {
  rg_matmul_path_t path;
  int dp;   // GEMV with vdpbf16ps
  int q8v;  // q8_0 GEMV with vpdpwssd
  int x8;   // k-quant GEMV at m = 1 on vpdpbusd, x as two int8 terms
  int pk;   // bf16 on vdpbf16ps as a GEMM on packed weight panels
  int pkq;  // q8_0, q4_K, q6_K the same way, dequantized to bf16 panels per call
} plan_t;

static plan_t plan_for(rg_cpu_isa_t isa, rg_dtype_t t, int64_t m, int64_t k,
                       const rg_matmul_opts_t *o) {
  plan_t p = {o ? o->path : RG_MATMUL_AUTO, 0, 0, 0, 0, 0};
  if (o && o->batch_invariant) {
    // One kernel whatever m (see rg_matmul_opts_t): the tiles, else the
    // GEMV's 4-row shape, whose sums run in the same order for every row.
    if (p.path == RG_MATMUL_AUTO)
      p.path = isa >= RG_CPU_ISA_AMX && tiles_min_m(t) != NEVER ? RG_MATMUL_TILES : RG_MATMUL_GEMV;
    p.dp = p.path == RG_MATMUL_GEMV && isa >= RG_CPU_ISA_AVX512_BF16 && t == RG_BF16;
    return p;
  }
  if (p.path == RG_MATMUL_AUTO) {
    if (isa >= RG_CPU_ISA_AMX && m >= tiles_min_m(t))
      p.path = RG_MATMUL_TILES;
    else
      p.path = m >= gemm_min_m(isa, t) ? RG_MATMUL_GEMM : RG_MATMUL_GEMV;
  }
  p.dp = p.path == RG_MATMUL_GEMV && isa >= RG_CPU_ISA_AVX512_BF16 && t == RG_BF16 && m >= DP_MIN_M;
  p.q8v = p.path == RG_MATMUL_GEMV && isa >= RG_CPU_ISA_AVX512_BF16 && t == RG_Q8_0 &&
          m <= Q8V_MAX_M && rg__cpu_has_vnni();
  // Batch 1 only: its sums run in another order than the rows of a batch
  // (batch-invariant mode keeps the 16-bit kernel for every m).
  p.x8 = p.path == RG_MATMUL_GEMV && m == 1 && kquant_x8(isa, t);
  // Chosen, not forced: --path gemv keeps the GEMV kernel at every m.
  p.pk =
      p.dp && m >= (k <= PK_KC ? PK_MIN_M_SHORT_K : PK_MIN_M) && !(o && o->path == RG_MATMUL_GEMV);
  // The quantized types' GEMM at exactly avx512-bf16 (the amx level has its
  // tiles): 256 values of each weight row at a time dequantized into the
  // panels, so the weights are rounded to bf16 as the tiles round them.
  p.pkq = p.path == RG_MATMUL_GEMM && isa == RG_CPU_ISA_AVX512_BF16 && panel_quant(t);
  return p;
}

int rg_matmul_tiles_available(rg_cpu_isa_t isa, const char **why) {
  rg_cpu_isa_t got;
  rg_status_t s = rg_cpu_isa_resolve(isa, &got);
  rg_status_free(s);
  int ok = !s && got >= RG_CPU_ISA_AMX;
  if (why)
    *why = ok                        ? NULL
           : s                       ? "the requested level is above this CPU's"
           : got < rg_cpu_isa_best() ? "the level is capped below amx"
                                     : rg_cpu_isa_missing(RG_CPU_ISA_AMX);
  return ok;
}

// [isa][type][path]; the avx512-bf16 row holds the vdpbf16ps names, the
// amx row the tile names.
static char names[RG_CPU_ISA_COUNT][RG_DTYPE_COUNT][RG_MATMUL_PATH_COUNT][64];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void names_init(void) {
  for (int i = RG_CPU_ISA_SCALAR; i < RG_CPU_ISA_COUNT; i++)
    for (int t = 0; t < RG_DTYPE_COUNT; t++) {
      const char *in = rg_cpu_isa_name((rg_cpu_isa_t)i), *tn = rg_dtype_name((rg_dtype_t)t);
      char *gemv = names[i][t][RG_MATMUL_GEMV], *gemm = names[i][t][RG_MATMUL_GEMM],
           *tiles = names[i][t][RG_MATMUL_TILES];
      if (i == RG_CPU_ISA_AVX512_BF16 && rg__cpu_has_vnni() &&
          (t == RG_Q4_K || t == RG_Q6_K || t == RG_Q8_0))
        snprintf(gemv, 64, "%s %s gemv (vpdpwssd, x in int16)", in, tn);
      else if (i == RG_CPU_ISA_AVX512_BF16 && (t == RG_Q4_K || t == RG_Q6_K))
        snprintf(gemv, 64, "%s %s gemv (vdpbf16ps, x as bf16 hi+lo)", in, tn);
      else if (i == RG_CPU_ISA_AVX512_BF16)
        snprintf(gemv, 64, "%s %s gemv (vdpbf16ps, x in bf16)", in, tn);
      else
        snprintf(gemv, 64, "%s %s gemv", in, tn);
      if (t == RG_F32)
        snprintf(gemm, 64, "openblas sgemm");
      else
        snprintf(gemm, 64, "openblas sgemm on %s %s->f32 tiles", in, tn);
      if (t == RG_BF16)
        snprintf(tiles, 64, "amx bf16 tiles (x in bf16)");
      else
        snprintf(tiles, 64, "amx %s->bf16 tiles (x, w in bf16)", tn);
    }
}

static const char *name_of(rg_cpu_isa_t isa, rg_dtype_t t, plan_t p) {
  pthread_once(&names_once, names_init);
  if (p.pk) return "avx512-bf16 bf16 gemm (vdpbf16ps on packed panels, x in bf16)";
  if (p.pkq)
    return t == RG_Q4_K   ? "avx512-bf16 q4_K gemm (bf16 panels, vdpbf16ps, x, w in bf16)"
           : t == RG_Q6_K ? "avx512-bf16 q6_K gemm (bf16 panels, vdpbf16ps, x, w in bf16)"
                          : "avx512-bf16 q8_0 gemm (bf16 panels, vdpbf16ps, x, w in bf16)";
  if (p.x8)
    return t == RG_Q4_K ? "avx512-bf16 q4_K gemv (vpdpbusd, x in int16 as 2 int8)"
                        : "avx512-bf16 q6_K gemv (vpdpbusd, x in int16 as 2 int8)";
  // Only the vdpbf16ps and vpdpwssd kernels need more than avx512, and only
  // the tiles more than avx512-bf16.
  int kq = t == RG_Q4_K || t == RG_Q6_K;
  rg_cpu_isa_t top = p.path == RG_MATMUL_TILES                           ? RG_CPU_ISA_AMX
                     : p.dp || p.q8v || (kq && p.path == RG_MATMUL_GEMV) ? RG_CPU_ISA_AVX512_BF16
                                                                         : RG_CPU_ISA_AVX512;
  return names[isa > top ? top : isa][t][p.path];
}

// The checks the options need beyond rg_matmul_check's.
static rg_status_t check_opts(rg_cpu_isa_t isa, rg_dtype_t t, const rg_matmul_opts_t *o) {
  if (o && (unsigned)o->path >= RG_MATMUL_PATH_COUNT)
    return rg_status_make(RG_INVALID_ARGUMENT, "matmul: unknown path %d", (int)o->path);
  if (o && o->path == RG_MATMUL_TILES) {
    if (isa < RG_CPU_ISA_AMX) {
      const char *why = isa < rg_cpu_isa_best() ? NULL : rg_cpu_isa_missing(RG_CPU_ISA_AMX);
      return rg_status_make(RG_UNAVAILABLE, "matmul: the tiles path needs the amx level; %s%s",
                            why ? "this CPU lacks " : "the level is capped at ",
                            why ? why : rg_cpu_isa_name(isa));
    }
    if (t == RG_F32)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "matmul: the tiles path takes bf16, f16, q8_0, q4_K or q6_K "
                            "weights, not f32");
  }
  return NULL;
}

const char *rg_matmul_kernel_name_ex(const rg_wmat_t *w, int64_t m, const rg_matmul_opts_t *opts) {
  rg_cpu_isa_t isa;
  rg_status_t s = rg_cpu_isa_resolve(opts ? opts->isa : RG_CPU_ISA_AUTO, &isa);
  if (!s) s = rg_matmul_check(NULL, 0, w, NULL, NULL);
  if (!s) s = check_opts(isa, w->type, opts);
  if (s || m < 0) {
    rg_status_free(s);
    return "invalid";
  }
  if (w->layout == RG_WLAYOUT_BF16_PANELS)
    return "avx512-bf16 bf16 packed at load (vdpbf16ps, x in bf16)";
  if (w->layout == RG_WLAYOUT_F16_PANELS) return "avx512 f16 packed at load (vcvtph2ps, x in f32)";
  return name_of(isa, w->type, plan_for(isa, w->type, m, w->cols, opts));
}

const char *rg_matmul_kernel_name(const rg_wmat_t *w, int64_t m) {
  return rg_matmul_kernel_name_ex(w, m, NULL);
}

// x rounded to bf16 into *out (j->xb, freed by the caller): rows padded
// with zeros to 32 values for the vdpbf16ps GEMV, or (blocks) in blocks of
// PK_KC values for the packed panels (x_to_blocks).
static rg_status_t round_x(rg_pool_t *pool, job_t *j, int blocks, uint16_t **out) {
  rg_pool_fn_t to_bf16 = x_to_bf16_worker;
  j->kp = (j->k + 31) / 32 * 32;
#if RG_X86
  if (blocks) j->kp = (j->k + PK_KC - 1) / PK_KC * PK_KC, to_bf16 = x_to_blocks_worker;
#else
  (void)blocks;
#endif
  uint16_t *xb = malloc((size_t)j->m * (size_t)j->kp * sizeof(uint16_t));
  if (!xb)
    return rg_status_make(RG_OUT_OF_MEMORY, "matmul: no memory to round x (%lld x %lld) to bf16",
                          (long long)j->m, (long long)j->k);
  j->xb = xb;
  rg_pool_parallel_for(pool, (size_t)j->m, 16, to_bf16, j);
  *out = xb;
  return NULL;
}

#if RG_X86
// The GEMM on weight panels packed per call (pk_worker): bf16 rows from
// PK_MIN_M on (p.pk), and the quantized types dequantized into them at the
// avx512-bf16 level (p.pkq), x rounded to bf16 in 256-value blocks.
static rg_status_t run_pk(rg_pool_t *pool, job_t *j) {
  uint16_t *xb = NULL;
  RG_RETURN_IF_ERROR(round_x(pool, j, 1, &xb));
  rg_pool_parallel_for(pool, (size_t)((j->n + PK_NB - 1) / PK_NB), 1, pk_worker, j);
  free(xb);
  return NULL;
}
#endif

static rg_status_t run_gemv(rg_pool_t *pool, job_t *j, plan_t p) {
#if RG_X86
  if (p.pk) return run_pk(pool, j);
#endif
  uint16_t *xb = NULL;
  int8_t *x8 = NULL;
  size_t x_row_bytes = (size_t)j->k * sizeof(float);
  if (kquant_vnni(j->isa, j->type) || p.q8v) {
    // x as int16 per 256 values, its scales and its group sums (see
    // gemv_kquant.c), in one allocation.
    j->mp = rg__x16_rows(j->m);
    const size_t nb = (size_t)j->mp * (size_t)((j->k + 255) / 256),
                 qbytes = (nb * 256 * sizeof(int16_t) + 63) / 64 * 64,
                 dbytes = (nb * sizeof(float) + 63) / 64 * 64;
    unsigned char *buf = aligned_alloc(64, qbytes + dbytes + nb * 16 * sizeof(float));
    if (!buf)
      return rg_status_make(RG_OUT_OF_MEMORY, "matmul: no memory to quantize x (%lld x %lld)",
                            (long long)j->m, (long long)j->k);
    xb = (uint16_t *)buf;
    j->xq = (const int16_t *)buf;
    j->xd = (const float *)(buf + qbytes);
    j->xsum = (const float *)(buf + qbytes + dbytes);
    rg__prepare_x16(j->x, j->m, j->k, (int16_t *)buf, (float *)(buf + qbytes),
                    (float *)(buf + qbytes + dbytes));
    x_row_bytes = (size_t)j->k * 2;
    if (p.x8) {
      x8 = aligned_alloc(64, nb * RG__X8_BYTES);
      if (!x8) {
        free(xb);
        return rg_status_make(RG_OUT_OF_MEMORY, "matmul: no memory to split x (1 x %lld)",
                              (long long)j->k);
      }
      rg__prepare_x8(j->xq, (int64_t)nb, j->type, x8);
      j->x8 = x8;
    }
  } else if ((j->type == RG_Q4_K || j->type == RG_Q6_K) && j->isa >= RG_CPU_ISA_AVX512_BF16) {
    // x as two bf16 terms and its sums per 32 values (see kquants.c).
    j->kp = j->k;
    size_t n2 = (size_t)j->m * (size_t)j->k * 2;
    xb = aligned_alloc(
        64, (n2 * sizeof(uint16_t) + (size_t)j->m * (size_t)(j->k / 32) * 4 + 63) / 64 * 64);
    if (!xb)
      return rg_status_make(RG_OUT_OF_MEMORY, "matmul: no memory to split x (%lld x %lld)",
                            (long long)j->m, (long long)j->k);
    j->xhl = xb;
    j->xsum = (const float *)(xb + n2);
    rg__kquant_prepare_x(j->x, j->m, j->k, j->k, xb, (float *)(xb + n2));
    x_row_bytes = (size_t)j->k * 4;
  }
  if (p.dp) {
    RG_RETURN_IF_ERROR(round_x(pool, j, 0, &xb));
    x_row_bytes = (size_t)j->kp * sizeof(uint16_t);
  }
  // About 384 KiB of x per pass: in L2 next to the weight rows being reused.
  j->m_chunk = (int64_t)((384u << 10) / x_row_bytes) / 4 * 4;
  if (j->m_chunk < 4) j->m_chunk = 4;
  // Work is counted in weight traffic, one pass over a group of rows per 4
  // rows of x (claim_chunk).
  size_t groups = (size_t)((j->n + NR - 1) / NR), grain;
  size_t chunk = claim_chunk(pool, groups, NR * j->row_bytes * (size_t)((j->m + 3) / 4), &grain);
  gemv_ctx_t c = {j, p.q8v  ? rg__gemv_q8_0_vnni
                     : p.x8 ? rg__gemv_kquant_x8
                            : pick_gemv(j->isa, j->type, p.dp)};
  run_shared(pool, j, groups, share_count(pool, groups, grain, MAX_SHARES), chunk, gemv_worker, &c);
  free(x8);
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
  // OpenBLAS takes each call's work buffer from a table sized when it was
  // built (from its MAX_THREADS, 64 in Debian's build) and aborts the process
  // when more calls run at once than the table holds ("too many memory
  // regions"), so at most 32 threads call it concurrently.
  size_t tiles = (size_t)((j->n + tr - 1) / tr), threads = share_count(pool, tiles, 1, 32);
  if (j->type != RG_F32) {
    j->tiles = malloc(threads * (size_t)tr * (size_t)j->k * sizeof(float));
    if (!j->tiles)
      return rg_status_make(RG_OUT_OF_MEMORY, "matmul: no memory for %zu f32 tiles of %lld x %lld",
                            threads, (long long)tr, (long long)j->k);
  }
  // The pool decides the parallelism; OpenBLAS must not add its own threads
  // on top (a process-wide setting, so it is re-asserted on every call).
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  run_shared(pool, j, tiles, threads, 1, gemm_worker, j);
  free(j->tiles);
  j->tiles = NULL;
  return NULL;
}

static rg_status_t run_tiles(rg_pool_t *pool, job_t *j) {
  const size_t threads = (size_t)rg_pool_threads(pool);
  j->kp = (j->k + 31) / 32 * 32;
  j->mp = j->m <= 16 ? 16 : (j->m + 31) / 32 * 32;
  // Rows of weights per item: the tiles' blocking decides (matmul_amx.c).
  j->amx_rows = rg__amx_rows(j, threads);
  const int64_t rows = j->amx_rows;
  j->panel_elems = rg__amx_panel_elems(j);
  const size_t xbytes = (size_t)(j->mp / 16) * (size_t)(j->kp / 32) * 1024;
  uint16_t *xpack = aligned_alloc(64, xbytes);
  // Decode batches of bf16 weights whose blocks are all whole read every
  // tile in place (matmul_amx.c): no panels, which at k = 8192 would be
  // 512 KiB a thread for every call.
  const int in_place = j->type == RG_BF16 && j->k % 32 == 0 && j->m <= 16 && j->n % 32 == 0;
  j->panels = in_place ? NULL : aligned_alloc(64, threads * j->panel_elems * sizeof(uint16_t));
  j->scratch = in_place ? NULL : malloc(threads * (size_t)j->kp * sizeof(float));
  if (!xpack || (!in_place && (!j->panels || !j->scratch))) {
    free(xpack), free(j->panels), free(j->scratch);
    return rg_status_make(RG_OUT_OF_MEMORY, "matmul: no memory for AMX tiles of x (%lld x %lld)",
                          (long long)j->m, (long long)j->k);
  }
  j->xpack = xpack;
  rg__amx_pack_x(pool, j);
  const size_t items = (size_t)((j->n + rows - 1) / rows);
  run_shared(pool, j, items, share_count(pool, items, 1, MAX_SHARES), 1, rg__amx_worker, j);
  free(xpack), free(j->panels), free(j->scratch);
  j->panels = NULL, j->scratch = NULL, j->xpack = NULL;
  return NULL;
}

// ---- Weights packed at load ------------------------------------------------------

rg_wlayout_t rg_matmul_preferred_layout(rg_cpu_isa_t isa, rg_dtype_t t) {
#if RG_X86
  rg_cpu_isa_t got;
  rg_status_t s = rg_cpu_isa_resolve(isa, &got);
  if (s) {
    rg_status_free(s);
    return RG_WLAYOUT_ROWS;
  }
  if (t == RG_BF16 && got == RG_CPU_ISA_AVX512_BF16) return RG_WLAYOUT_BF16_PANELS;
  if (t == RG_F16 && (got == RG_CPU_ISA_AVX512 || got == RG_CPU_ISA_AVX512_BF16))
    return RG_WLAYOUT_F16_PANELS;
#else
  (void)isa, (void)t;
#endif
  return RG_WLAYOUT_ROWS;
}

size_t rg_matmul_layout_bytes(rg_wlayout_t l, rg_dtype_t t, int64_t rows, int64_t cols) {
  if (rows < 1 || cols < 1 || rows > INT32_MAX || cols > INT32_MAX) return 0;
  if (l == RG_WLAYOUT_ROWS) {
    size_t rb;
    rg_status_t s = rg_dtype_row_bytes(t, cols, &rb);
    if (s) {
      rg_status_free(s);
      return 0;
    }
    return rb * (size_t)rows;
  }
  if (!(l == RG_WLAYOUT_BF16_PANELS && t == RG_BF16) &&
      !(l == RG_WLAYOUT_F16_PANELS && t == RG_F16))
    return 0;
  // 32-row panels of k rounded up to 32, 2 bytes a value: at most
  // 2^26 panels of 2^32 bytes, which size_t holds.
  return (size_t)((rows + 31) / 32) * 32 * (size_t)((cols + 31) / 32 * 32) * 2;
}

rg_status_t rg_matmul_relayout(rg_pool_t *pool, const rg_wmat_t *w, rg_wlayout_t l, void *out) {
  RG_RETURN_IF_ERROR(rg_matmul_check(NULL, 0, w, NULL, NULL));
  if (!w->data || !out)
    return rg_status_make(RG_INVALID_ARGUMENT, "matmul relayout: %s is NULL",
                          !out ? "the output" : "weight data");
  if (w->layout != RG_WLAYOUT_ROWS)
    return rg_status_make(RG_INVALID_ARGUMENT, "matmul relayout: the weights are not in rows");
  const size_t bytes = rg_matmul_layout_bytes(l, w->type, w->rows, w->cols);
  if (!bytes)
    return rg_status_make(RG_INVALID_ARGUMENT, "matmul relayout: %s weights have no layout %d",
                          rg_dtype_name(w->type), (int)l);
  if (l == RG_WLAYOUT_ROWS) {
    memcpy(out, w->data, bytes);
    return NULL;
  }
  if ((uintptr_t)out % 64)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "matmul relayout: the output is not 64-byte aligned");
#if RG_X86
  rg_cpu_isa_t isa;
  RG_RETURN_IF_ERROR(rg_cpu_isa_resolve(RG_CPU_ISA_AUTO, &isa));
  if (isa < RG_CPU_ISA_AVX512)
    return rg_status_make(RG_UNAVAILABLE, "matmul relayout: packed panels need %s",
                          rg_cpu_isa_missing(RG_CPU_ISA_AVX512));
  job_t j = {.n = w->rows, .k = w->cols, .w = w->data, .type = w->type, .y = out};
  RG_RETURN_IF_ERROR(rg_dtype_row_bytes(w->type, w->cols, &j.row_bytes));
  rg_pool_parallel_for(pool, (size_t)((w->rows + PK_NB - 1) / PK_NB), 1, relayout_worker, &j);
  return NULL;
#else
  return rg_status_make(RG_UNAVAILABLE, "matmul relayout: packed panels are x86-64 code");
#endif
}

// y from weights packed at load: x rounded to bf16 in blocks, then every
// panel through the micro-kernels (pkw_worker).
static rg_status_t run_packed(rg_pool_t *pool, job_t *j) {
#if RG_X86
  const rg_cpu_isa_t need = j->type == RG_F16 ? RG_CPU_ISA_AVX512 : RG_CPU_ISA_AVX512_BF16;
  if (j->isa < need)
    return rg_status_make(RG_UNAVAILABLE,
                          "matmul: %s weights packed in panels run at %s and above, and the level "
                          "is %s",
                          rg_dtype_name(j->type), rg_cpu_isa_name(need), rg_cpu_isa_name(j->isa));
  uint16_t *xb = NULL;
  float *xf = NULL;
  if (j->type == RG_F16) {
    // x as it is, rows padded with zeros to k rounded up to 32 (the pairs
    // the panels hold past k are zeros, but 0 x NaN is not).
    j->kp = (j->k + 31) / 32 * 32;
    xf = aligned_alloc(64, (size_t)j->m * (size_t)j->kp * sizeof(float));
    if (!xf)
      return rg_status_make(RG_OUT_OF_MEMORY, "matmul: no memory to pad x (%lld x %lld)",
                            (long long)j->m, (long long)j->k);
    j->xf = xf;
    rg_pool_parallel_for(pool, (size_t)j->m, 16, x_pad_worker, j);
  } else {
    RG_RETURN_IF_ERROR(round_x(pool, j, 1, &xb));
  }
  // Panels in shares, claimed a chunk at a time as the row GEMV's groups
  // are (run_shared): a thread that falls behind (another process took its
  // core) has its share's tail taken rather than holding up the call, which
  // with fixed halves held batch-1 decode's matmuls to 0.83 of read
  // bandwidth where the same kernel alone streams at 0.95-1.0. Work is a
  // panel's weights per pass of x, up to 8 passes (claim_chunk).
  const size_t panels = (size_t)((j->n + PK_NB - 1) / PK_NB);
  const int64_t mr = pk_rows_per_pass(j->type);
  const size_t passes = (size_t)((j->m + mr - 1) / mr);
  size_t grain,
      chunk = claim_chunk(pool, panels,
                          (size_t)((j->k + 31) / 32 * 32) * PK_NB * 2 * (passes < 8 ? passes : 8),
                          &grain);
  run_shared(pool, j, panels, share_count(pool, panels, grain, MAX_SHARES), chunk, pkw_worker, j);
  free(xb);
  free(xf);
  return NULL;
#else
  (void)pool, (void)j;
  return rg_status_make(RG_UNAVAILABLE, "matmul: packed bf16 panels are x86-64 code");
#endif
}

rg_status_t rg_matmul_ex(rg_pool_t *pool, const float *x, int64_t m, const rg_wmat_t *w,
                         const float *bias, float *y, const rg_matmul_opts_t *opts) {
  RG_RETURN_IF_ERROR(rg_matmul_check(x, m, w, bias, y));
  if (opts && (unsigned)opts->path >= RG_MATMUL_PATH_COUNT)
    return rg_status_make(RG_INVALID_ARGUMENT, "matmul: unknown path %d", (int)opts->path);
  job_t j = {.x = x,
             .m = m,
             .n = w->rows,
             .k = w->cols,
             .w = w->data,
             .type = w->type,
             .bias = bias,
             .y = y};
  RG_RETURN_IF_ERROR(rg_cpu_isa_resolve(opts ? opts->isa : RG_CPU_ISA_AUTO, &j.isa));
  RG_RETURN_IF_ERROR(check_opts(j.isa, w->type, opts));
  j.invariant = opts && opts->batch_invariant;
  RG_RETURN_IF_ERROR(rg_dtype_row_bytes(w->type, w->cols, &j.row_bytes));
  if (w->layout != RG_WLAYOUT_ROWS) {
    // One kernel for every m; a forced path has nothing to choose.
    if (opts && opts->path != RG_MATMUL_AUTO)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "matmul: %s weights packed in panels take only the auto path",
                            rg_dtype_name(w->type));
    return m ? run_packed(pool, &j) : NULL;
  }
  if (m == 0) return NULL;
  plan_t p = plan_for(j.isa, j.type, m, w->cols, opts);
#if RG_X86
  if (p.pkq) return run_pk(pool, &j);
#endif
  switch (p.path) {
    case RG_MATMUL_GEMM:
      return run_gemm(pool, &j);
    case RG_MATMUL_TILES:
      return run_tiles(pool, &j);
    default:
      return run_gemv(pool, &j, p);
  }
}

rg_status_t rg_matmul(rg_pool_t *pool, const float *x, int64_t m, const rg_wmat_t *w,
                      const float *bias, float *y) {
  return rg_matmul_ex(pool, x, m, w, bias, y, NULL);
}
