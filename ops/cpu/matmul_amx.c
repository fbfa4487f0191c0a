// AMX tile GEMM for the matmul (ops/matmul.h), at the amx level.
//
// One TDPBF16PS multiplies a 16 × 32 bf16 tile by a 32 × 16 one into a 16 ×
// 16 f32 tile: 16,384 FLOP in about 16 cycles, sixteen times what AVX-512
// FMAs do in f32. The orientation is y^T = W x^T:
//   A  16 weight rows × 32 of k, bf16, loaded straight from a bf16 matrix
//      (stride = the row's bytes) or from a per-thread panel the other types
//      are widened into;
//   B  32 of k × 16 rows of x, in the pair-interleaved ("VNNI") layout the
//      instruction wants, packed once per call (rg__amx_pack_x);
//   C  16 weight rows × 16 rows of x, f32, transposed into y when stored.
// So the weights, the large operand, are never rearranged: bf16 weights
// feed the tiles from the file's mapping, and only x (m × k) is transposed.
//
// Register blocking: 8 tile registers hold 2 A, 2 B and 4 C tiles (32
// weight rows × 32 rows of x); each A and B load feeds two products. With m
// at most 16 (decode batches) one B tile is enough and the kernel waits on
// weight memory, not on the tiles. Weight blocks are walked in k order and
// the next block's lines are prefetched, spread over the current block's
// steps, in the order they will be used.
//
// Types: bf16 weights are exact; f16 weights go in as two bf16 terms, hi =
// bf16(w) and lo = bf16(w - hi), whose sum is w exactly (f16 has 11
// significant bits, hi 8, and w - hi at most 3), at twice the tile work;
// q8_0 and the k-quants are dequantized to f32 and rounded to bf16 (their
// own quantization error is hundreds of times larger). x is rounded to
// bf16, as the vdpbf16ps kernels do, and sums are f32.
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "ops/cpu/cpu_impl.h"

typedef rg__mm_job_t job_t;

#if RG_X86

// The 64-byte tile configuration (palette 1): 8 tiles of 16 rows × 64 bytes.
typedef struct {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tilecfg_t;

// Tiles 0-3 accumulate C, 4-5 hold A, 6-7 hold B. GCC's tile intrinsics
// paste their tile number into the instruction's text, so it must reach
// them as a literal: hence macros, through one level of expansion.
#define T_C00 0
#define T_C01 1
#define T_C10 2
#define T_C11 3
#define T_A0 4
#define T_A1 5
#define T_B0 6
#define T_B1 7
#define TZERO(t) _tile_zero(t)
#define TLOAD(t, p, stride) _tile_loadd(t, p, stride)
#define TSTORE(t, p, stride) _tile_stored(t, p, stride)
#define TDP(c, a, b) _tile_dpbf16ps(c, a, b)
enum { NSUB = 32 };  // weight rows per register block (2 A tiles)

size_t rg__amx_panel_elems(const job_t *j) {
  return (size_t)j->amx_rows * (size_t)j->kp * (size_t)j->amx_terms;
}

// Transposes a 16 × 16 matrix of 32-bit elements held as 16 rows.
INLINE __attribute__((target(T_AMX))) void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[4b + c] holds, in 128-bit lane L, column 4L + c of rows 4b..4b+3.
  __m512i u[16];
  for (int b = 0; b < 16; b += 4) {
    u[b] = _mm512_unpacklo_epi64(t[b], t[b + 2]);
    u[b + 1] = _mm512_unpackhi_epi64(t[b], t[b + 2]);
    u[b + 2] = _mm512_unpacklo_epi64(t[b + 1], t[b + 3]);
    u[b + 3] = _mm512_unpackhi_epi64(t[b + 1], t[b + 3]);
  }
  // Column 4L + c is lane L of u[c], u[4 + c], u[8 + c], u[12 + c].
  for (int c = 0; c < 4; c++) {
    __m512i ab0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44),
            ab1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee),
            cd0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44),
            cd1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
    r[c] = _mm512_shuffle_i32x4(ab0, cd0, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(ab0, cd0, 0xdd);
    r[8 + c] = _mm512_shuffle_i32x4(ab1, cd1, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(ab1, cd1, 0xdd);
  }
}

INLINE __mmask16 mask16(int64_t rem) {
  return rem >= 16 ? (__mmask16)0xffff : rem > 0 ? (__mmask16)((1u << rem) - 1) : 0;
}

// ---- x into B tiles -----------------------------------------------------------

// Tile (b, s) covers rows 16b..16b+15 of x and k values 32s..32s+31; row kk
// of the tile holds, for each of the 16 rows of x, the pair (32s + 2kk,
// 32s + 2kk + 1). Rows past m and values past k are zero.
static uint16_t *xtile(const job_t *j, int64_t b, int64_t s) {
  return (uint16_t *)j->xpack + ((size_t)b * (size_t)(j->kp / 32) + (size_t)s) * 512;
}

__attribute__((target(T_AMX))) static void pack_x_blocks(void *ctx, size_t b0, size_t b1,
                                                         int thread) {
  const job_t *j = ctx;
  const int64_t ks = j->kp / 32;
  for (size_t b = b0; b < b1; b++)
    for (int64_t s = 0; s < ks; s++) {
      const int64_t p = s * 32;
      const __mmask16 m0 = mask16(j->k - p), m1 = mask16(j->k - p - 16);
      __m512i r[16];
      for (int i = 0; i < 16; i++) {
        int64_t row = (int64_t)b * 16 + i;
        if (row >= j->m) {
          r[i] = _mm512_setzero_si512();
          continue;
        }
        const float *xr = j->x + row * j->k + p;
        // Round to nearest even, as rg_f32_to_bf16 (bar subnormals, which
        // this instruction flushes: far below what changes an f32 sum).
        r[i] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, xr + 16),
                                            _mm512_maskz_loadu_ps(m0, xr));
      }
      transpose16(r);
      uint16_t *dst = xtile(j, (int64_t)b, s);
      for (int kk = 0; kk < 16; kk++) _mm512_store_si512(dst + kk * 32, r[kk]);
    }
}

void rg__amx_pack_x(rg_pool_t *pool, job_t *j) {
  rg_pool_parallel_for(pool, (size_t)(j->mp / 16), 1, pack_x_blocks, j);
}

// ---- Weights into A panels ------------------------------------------------------

// Row `r` of the weights into panel row `pr`: kp bf16 values (zero past k)
// per term, terms interleaved per 32 values of k.
__attribute__((target(T_AMX))) static void panel_row(const job_t *j, int64_t r, uint16_t *dst,
                                                     float *scratch) {
  const int64_t k = j->k, ks = j->kp / 32;
  const unsigned char *src = j->w + (size_t)r * j->row_bytes;
  const int terms = j->amx_terms;
  if (j->type == RG_BF16) {
    for (int64_t s = 0; s < ks; s++) {
      __mmask32 m = k - 32 * s >= 32 ? 0xffffffffu : (__mmask32)((1u << (k - 32 * s)) - 1);
      _mm512_store_si512(dst + s * 32 * terms, _mm512_maskz_loadu_epi16(m, src + 64 * s));
    }
    return;
  }
  const float *f;
  if (j->type == RG_F32) {
    f = (const float *)src;
  } else if (j->type == RG_F16) {
    f = NULL;
  } else {
    // Cannot fail: the type and k were checked before the job started.
    rg_status_free(rg_row_to_f32_isa(RG_CPU_ISA_AVX512, j->type, src, scratch, k));
    f = scratch;
  }
  for (int64_t s = 0; s < ks; s++) {
    const int64_t p = 32 * s;
    const __mmask16 m0 = mask16(k - p), m1 = mask16(k - p - 16);
    __m512 lo, hi;
    if (f) {
      lo = _mm512_maskz_loadu_ps(m0, f + p);
      hi = _mm512_maskz_loadu_ps(m1, f + p + 16);
    } else {
      lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, src + 2 * p));
      hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, src + 2 * p + 32));
    }
    __m512bh h = _mm512_cvtne2ps_pbh(hi, lo);
    _mm512_store_si512(dst + s * 32 * terms, (__m512i)h);
    if (terms == 2) {
      // The remainder w - hi, exact in f32 and (for f16 weights) in bf16.
      __m512i hb = (__m512i)h;
      __m512 hlo = _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(hb)), 16));
      __m512 hhi = _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hb, 1)), 16));
      __m512bh l = _mm512_cvtne2ps_pbh(_mm512_sub_ps(hi, hhi), _mm512_sub_ps(lo, hlo));
      _mm512_store_si512(dst + s * 32 * terms + 32, (__m512i)l);
    }
  }
}

// ---- The tile loops ------------------------------------------------------------

// C tiles (16 weight rows × 16 rows of x) into y, transposed, plus the bias;
// rows past n and columns past m are dropped.
__attribute__((target(T_AMX))) static void store_c(const job_t *j, const float *c, int64_t n0,
                                                   int64_t m0) {
  __m512i r[16];
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(c + 16 * i);
  transpose16(r);
  const __mmask16 mk = mask16(j->n - n0);
  const __m512 bias = j->bias ? _mm512_maskz_loadu_ps(mk, j->bias + n0) : _mm512_setzero_ps();
  for (int i = 0; i < 16 && m0 + i < j->m; i++)
    _mm512_mask_storeu_ps(j->y + (m0 + i) * j->n + n0, mk,
                          _mm512_add_ps(_mm512_castsi512_ps(r[i]), bias));
}

// `nsub` blocks of 32 weight rows (A at `a`, `stride` bytes apart; a step
// of k takes `step` bytes, its term tiles 64 bytes apart) against all of x.
// NB = 2: two B tiles (32 rows of x) per pass; NB = 1 for m <= 16. The rows
// of x are the outer loop, so one pass's B tiles are reused from L2 by every
// block of weights, and x streams from L3 once per nsub blocks. pf /
// pf_stride / pf_lines: the next chunk's weights (32 * nsub rows of
// pf_lines lines), prefetched in k order, spread over this chunk's steps.
INLINE __attribute__((target(T_AMX))) void chunk_tiles(const job_t *j, const unsigned char *a,
                                                       size_t stride, size_t step, int terms,
                                                       int NB, int64_t n0, int64_t nsub,
                                                       const unsigned char *pf, size_t pf_stride,
                                                       size_t pf_lines) {
  const int64_t ks = j->kp / 32, mblocks = j->mp / (16 * NB);
  const size_t pf_rows = 32 * (size_t)nsub, pf_total = pf ? pf_rows * pf_lines : 0;
  const size_t steps = (size_t)(mblocks * nsub * ks), per = (pf_total + steps - 1) / steps;
  size_t pf_next = 0;
  float c[4][256] __attribute__((aligned(64)));
  for (int64_t mb = 0; mb < mblocks; mb++)
    for (int64_t sb = 0; sb < nsub; sb++) {
      const unsigned char *a0 = a + (size_t)sb * 32 * stride, *a1 = a0 + 16 * stride;
      TZERO(T_C00);
      TZERO(T_C10);
      if (NB == 2) {
        TZERO(T_C01);
        TZERO(T_C11);
      }
      for (int64_t s = 0; s < ks; s++) {
        for (size_t q = 0; q < per && pf_next < pf_total; q++, pf_next++) {
          size_t line = pf_next / pf_rows, row = pf_next % pf_rows;  // all rows, then on in k
          _mm_prefetch((const char *)pf + row * pf_stride + line * 64, _MM_HINT_T0);
        }
        TLOAD(T_B0, xtile(j, mb * NB, s), 64);
        if (NB == 2) TLOAD(T_B1, xtile(j, mb * NB + 1, s), 64);
        for (int t = 0; t < terms; t++) {
          TLOAD(T_A0, a0 + (size_t)s * step + 64 * (size_t)t, (long)stride);
          TLOAD(T_A1, a1 + (size_t)s * step + 64 * (size_t)t, (long)stride);
          TDP(T_C00, T_A0, T_B0);
          TDP(T_C10, T_A1, T_B0);
          if (NB == 2) {
            TDP(T_C01, T_A0, T_B1);
            TDP(T_C11, T_A1, T_B1);
          }
        }
      }
      TSTORE(T_C00, c[0], 64);
      TSTORE(T_C10, c[2], 64);
      if (NB == 2) {
        TSTORE(T_C01, c[1], 64);
        TSTORE(T_C11, c[3], 64);
      }
      const int64_t m0 = mb * 16 * NB, r = n0 + sb * 32;
      store_c(j, c[0], r, m0);
      if (r + 16 < j->n) store_c(j, c[2], r + 16, m0);
      if (NB == 2 && m0 + 16 < j->m) {
        store_c(j, c[1], r, m0 + 16);
        if (r + 16 < j->n) store_c(j, c[3], r + 16, m0 + 16);
      }
    }
}

// Weight rows [r0, r1) (r1 - r0 <= amx_rows) against all of x.
__attribute__((target(T_AMX))) static void run_rows(const job_t *j, int64_t r0, int64_t r1,
                                                    uint16_t *panel, float *scratch) {
  const int NB = j->mp > 16 ? 2 : 1;
  const int64_t rows = (r1 - r0 + NSUB - 1) / NSUB * NSUB, nsub = rows / NSUB;
  // bf16 weights whose rows are whole steps and whose blocks lie inside the
  // matrix feed the tiles from where they are.
  if (j->type == RG_BF16 && j->k % 32 == 0 && r0 + rows <= j->n) {
    const unsigned char *a = j->w + (size_t)r0 * j->row_bytes;
    const unsigned char *pf = r0 + 2 * rows <= j->n ? a + (size_t)rows * j->row_bytes : NULL;
    if (NB == 2)
      chunk_tiles(j, a, j->row_bytes, 64, 1, 2, r0, nsub, pf, j->row_bytes, j->row_bytes / 64);
    else
      chunk_tiles(j, a, j->row_bytes, 64, 1, 1, r0, nsub, pf, j->row_bytes, j->row_bytes / 64);
    return;
  }
  const size_t pstride = (size_t)j->kp * (size_t)j->amx_terms;  // elements per panel row
  for (int64_t r = 0; r < rows; r++) {
    uint16_t *dst = panel + (size_t)r * pstride;
    if (r0 + r < j->n)
      panel_row(j, r0 + r, dst, scratch);
    else
      memset(dst, 0, pstride * sizeof(uint16_t));
  }
  const unsigned char *a = (const unsigned char *)panel;
  const size_t stride = pstride * 2, step = 64 * (size_t)j->amx_terms;
  if (NB == 2)
    chunk_tiles(j, a, stride, step, j->amx_terms, 2, r0, nsub, NULL, 0, 0);
  else
    chunk_tiles(j, a, stride, step, j->amx_terms, 1, r0, nsub, NULL, 0, 0);
}

__attribute__((target(T_AMX))) void rg__amx_worker(void *ctx, size_t me, size_t unused,
                                                   int thread) {
  job_t *j = ctx;
  tilecfg_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
  uint16_t *panel = j->panels + (size_t)thread * j->panel_elems;
  float *scratch = j->scratch + (size_t)thread * (size_t)j->kp;
  size_t b, e;
  while (rg__mm_claim(j, (int)me, &b, &e))
    for (size_t it = b; it < e; it++) {
      int64_t r0 = (int64_t)it * j->amx_rows,
              r1 = r0 + j->amx_rows < j->n ? r0 + j->amx_rows : j->n;
      run_rows(j, r0, r1, panel, scratch);
    }
  // Back to the init state, so the kernel need not save 8 KiB of tiles when
  // this thread is switched out.
  _tile_release();
}

#else  // !RG_X86: the amx level is never reached.

size_t rg__amx_panel_elems(const job_t *j) {
  return 0;
}
void rg__amx_pack_x(rg_pool_t *pool, job_t *j) {
  (void)pool, (void)j;
}
void rg__amx_worker(void *ctx, size_t me, size_t unused, int thread) {
  (void)ctx, (void)me, (void)thread;
}

#endif  // RG_X86
