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
// Types: bf16 weights are exact; f16, q8_0 and the k-quants are widened to
// f32 and rounded to bf16 (for the quantized types their own quantization
// error is hundreds of times larger). f16 weights could be exact as two
// bf16 terms, hi = bf16(w) and lo = bf16(w - hi) (11 significant bits = 8
// + 3), but that doubles the tile work: measured at m = 512, n = k = 2048,
// one thread, 0.6 of the one-term speed (550-630 against 950-990 GFLOP/s),
// and the rounding costs what rounding x does (NMSE ~1e-6). x is rounded to
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
  return (size_t)j->amx_rows * (size_t)j->kp;
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

// Panels hold their weights tile by tile: tile (rb, s) is 16 rows × 32
// values of k, 1 KiB, contiguous, at (rb * ks + s) * 512 elements. So each A load reads one
// sequential KiB, as the B loads do, instead of 16 lines a row apart: with rows 4 KiB apart (k =
// 2048 bf16) those all fall in one L1 set, and the tiles ran at 0.3 of their peak.
static uint16_t *ptile(const job_t *j, uint16_t *panel, int64_t rb, int64_t s) {
  return panel + (size_t)(rb * (j->kp / 32) + s) * 512;
}

// Weight row `r` into row `pr` of the panel: kp bf16 values, zero past k.
__attribute__((target(T_AMX))) static void panel_row(const job_t *j, int64_t r, uint16_t *panel,
                                                     int64_t pr, float *scratch) {
  const int64_t k = j->k, ks = j->kp / 32, rb = pr / 16;
  const size_t rr = (size_t)(pr % 16) * 32;
  const unsigned char *src = j->w + (size_t)r * j->row_bytes;
  if (j->type == RG_BF16) {
    for (int64_t s = 0; s < ks; s++) {
      __mmask32 m = k - 32 * s >= 32 ? 0xffffffffu : (__mmask32)((1u << (k - 32 * s)) - 1);
      _mm512_store_si512(ptile(j, panel, rb, s) + rr, _mm512_maskz_loadu_epi16(m, src + 64 * s));
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
    _mm512_store_si512(ptile(j, panel, rb, s) + rr, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
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
  // Whole aligned lines bypass the cache: y is written once per call, and
  // reading its lines in first (as a plain store must) cost a sixth of the
  // tile time at m = 512.
  for (int i = 0; i < 16 && m0 + i < j->m; i++) {
    float *dst = j->y + (m0 + i) * j->n + n0;
    __m512 v = _mm512_add_ps(_mm512_castsi512_ps(r[i]), bias);
    if (mk == 0xffff && !((uintptr_t)dst & 63))
      _mm512_stream_ps(dst, v);
    else
      _mm512_mask_storeu_ps(dst, mk, v);
  }
}

// `nsub` blocks of 32 weight rows against all of x. The A tile of 16 rows
// `h` (0, 1) of block sb at step s is at a + (2 sb + h) * rb_bytes + s *
// step, its rows `stride` bytes apart. NB = 2: two B tiles
// (32 rows of x) per pass; NB = 1 for m <= 16.
//
// Loop order, for the caches: the rows of x are outermost, then k in
// blocks of KC steps, then the weight blocks. One pass's B tiles for a k
// block (16 KiB) stay in L1 while every weight block uses them, and the C
// tiles of the pass wait in an L1 buffer (16 KiB at nsub = 4) between k
// blocks; only the A tiles come from L2. Each step loads 4 KiB of tiles for
// 64 cycles of products, and L2 gives well under 64 B a cycle: with both A
// and B from L2 the tiles ran at about half their peak.
//
// pf / pf_stride / pf_lines: the next chunk's weights (32 * nsub rows of
// pf_lines lines), prefetched in k order, spread over this chunk's steps,
// into L1 when the tiles read them in place (decode), else into L2 for the
// panel build. nsub <= MAX_NSUB.
enum { KC = 8, MAX_NSUB = 8 };
INLINE __attribute__((target(T_AMX))) void chunk_tiles(const job_t *j, const unsigned char *a,
                                                       size_t rb_bytes, size_t step, size_t stride,
                                                       int NB, int64_t n0, int64_t nsub,
                                                       const unsigned char *pf, size_t pf_stride,
                                                       size_t pf_lines, int pf_l2) {
  const int64_t ks = j->kp / 32, mblocks = j->mp / (16 * NB);
  const size_t pf_rows = 32 * (size_t)nsub, pf_total = pf ? pf_rows * pf_lines : 0;
  const size_t steps = (size_t)(mblocks * nsub * ks), per = (pf_total + steps - 1) / steps;
  // Walked without divisions: row by row, then the next line.
  size_t pf_left = pf_total, pf_row = 0, pf_off = 0;
  float c[MAX_NSUB][4][256] __attribute__((aligned(64)));
  // The next pass's B tiles (NB KiB per step) go to L2 during this pass:
  // x is read once per chunk, from L3, and would otherwise stall the tiles.
  const size_t xb_per = (size_t)NB * 16 * (size_t)ks, xb_steps = (size_t)(nsub * ks),
               xb_q = (xb_per + xb_steps - 1) / xb_steps;
  for (int64_t mb = 0; mb < mblocks; mb++) {
    const char *xnext = mb + 1 < mblocks ? (const char *)xtile(j, (mb + 1) * NB, 0) : NULL;
    size_t xb_left = xnext ? xb_per : 0;
    for (int64_t k0 = 0; k0 < ks; k0 += KC) {
      const int64_t k1 = k0 + KC < ks ? k0 + KC : ks;
      for (int64_t sb = 0; sb < nsub; sb++) {
        const unsigned char *a0 = a + (size_t)(2 * sb) * rb_bytes, *a1 = a0 + rb_bytes;
        if (k0 == 0) {
          TZERO(T_C00);
          TZERO(T_C10);
          if (NB == 2) {
            TZERO(T_C01);
            TZERO(T_C11);
          }
        } else {
          TLOAD(T_C00, c[sb][0], 64);
          TLOAD(T_C10, c[sb][2], 64);
          if (NB == 2) {
            TLOAD(T_C01, c[sb][1], 64);
            TLOAD(T_C11, c[sb][3], 64);
          }
        }
        for (int64_t s = k0; s < k1; s++) {
          for (size_t q = 0; q < per && pf_left; q++, pf_left--) {
            const char *addr = (const char *)pf + pf_row * pf_stride + pf_off;
            if (pf_l2)
              _mm_prefetch(addr, _MM_HINT_T1);
            else
              _mm_prefetch(addr, _MM_HINT_T0);
            if (++pf_row == pf_rows) pf_row = 0, pf_off += 64;
          }
          for (size_t q = 0; q < xb_q && xb_left; q++, xb_left--, xnext += 64)
            _mm_prefetch(xnext, _MM_HINT_T1);
          TLOAD(T_B0, xtile(j, mb * NB, s), 64);
          if (NB == 2) TLOAD(T_B1, xtile(j, mb * NB + 1, s), 64);
          TLOAD(T_A0, a0 + (size_t)s * step, (long)stride);
          TLOAD(T_A1, a1 + (size_t)s * step, (long)stride);
          TDP(T_C00, T_A0, T_B0);
          TDP(T_C10, T_A1, T_B0);
          if (NB == 2) {
            TDP(T_C01, T_A0, T_B1);
            TDP(T_C11, T_A1, T_B1);
          }
        }
        TSTORE(T_C00, c[sb][0], 64);
        TSTORE(T_C10, c[sb][2], 64);
        if (NB == 2) {
          TSTORE(T_C01, c[sb][1], 64);
          TSTORE(T_C11, c[sb][3], 64);
        }
      }
    }
    const int64_t m0 = mb * 16 * NB;
    for (int64_t sb = 0; sb < nsub; sb++) {
      const int64_t r = n0 + sb * 32;
      store_c(j, c[sb][0], r, m0);
      if (r + 16 < j->n) store_c(j, c[sb][2], r + 16, m0);
      if (NB == 2 && m0 + 16 < j->m) {
        store_c(j, c[sb][1], r, m0 + 16);
        if (r + 16 < j->n) store_c(j, c[sb][3], r + 16, m0 + 16);
      }
    }
  }
}

// Weight rows [r0, r1) (r1 - r0 <= amx_rows) against all of x.
__attribute__((target(T_AMX))) static void run_rows(const job_t *j, int64_t r0, int64_t r1,
                                                    uint16_t *panel, float *scratch) {
  const int NB = j->mp > 16 ? 2 : 1;
  const int64_t rows = (r1 - r0 + NSUB - 1) / NSUB * NSUB, nsub = rows / NSUB;
  // Decode batches (m <= 16) read each weight once: bf16 weights whose rows
  // are whole steps and whose blocks lie inside the matrix feed the tiles
  // from where they are, the next chunk prefetched.
  if (NB == 1 && j->type == RG_BF16 && j->k % 32 == 0 && r0 + rows <= j->n) {
    const unsigned char *a = j->w + (size_t)r0 * j->row_bytes;
    const unsigned char *pf = r0 + 2 * rows <= j->n ? a + (size_t)rows * j->row_bytes : NULL;
    chunk_tiles(j, a, 16 * j->row_bytes, 64, j->row_bytes, 1, r0, nsub, pf, j->row_bytes,
                j->row_bytes / 64, 0);
    return;
  }
  // The panel is built from rows the previous chunk prefetched into L2.
  const unsigned char *src = j->w + (size_t)r0 * j->row_bytes;
  const unsigned char *pf = r0 + 2 * rows <= j->n ? src + (size_t)rows * j->row_bytes : NULL;
  for (int64_t r = 0; r < rows; r++) {
    if (r0 + r < j->n) {
      panel_row(j, r0 + r, panel, r, scratch);
    } else {
      for (int64_t s = 0; s < j->kp / 32; s++)
        memset(ptile(j, panel, r / 16, s) + (r % 16) * 32, 0, 64);
    }
  }
  const size_t rb_bytes = 1024 * (size_t)(j->kp / 32);
  const unsigned char *a = (const unsigned char *)panel;
  const size_t pf_lines = (j->row_bytes + 63) / 64;
  if (NB == 2)
    chunk_tiles(j, a, rb_bytes, 1024, 64, 2, r0, nsub, pf, j->row_bytes, pf_lines, 1);
  else
    chunk_tiles(j, a, rb_bytes, 1024, 64, 1, r0, nsub, pf, j->row_bytes, pf_lines, 1);
}

__attribute__((target(T_AMX))) void rg__amx_worker(void *ctx, size_t me, size_t unused,
                                                   int thread) {
  job_t *j = ctx;
  tilecfg_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
  uint16_t *panel = j->panels ? j->panels + (size_t)thread * j->panel_elems : NULL;
  float *scratch = j->scratch ? j->scratch + (size_t)thread * (size_t)j->kp : NULL;
  size_t b, e;
  while (rg__mm_claim(j, (int)me, &b, &e))
    for (size_t it = b; it < e; it++) {
      int64_t r0 = (int64_t)it * j->amx_rows,
              r1 = r0 + j->amx_rows < j->n ? r0 + j->amx_rows : j->n;
      run_rows(j, r0, r1, panel, scratch);
    }
  // Back to the init state, so the kernel need not save 8 KiB of tiles when
  // this thread is switched out; and the streamed stores made visible before
  // the pool reports the work done.
  _tile_release();
  _mm_sfence();
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
