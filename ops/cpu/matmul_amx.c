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
// steps, in the order they will be used. Prefill (m > 16) walks units of
// 128 weight rows × up to 64 steps of k, each widened into a panel while
// the previous unit's tiles run ("Prefill" below).
//
// What bounds the tiles, measured with synthetic loops on one core of this
// Sapphire Rapids VM (GFLOP/s; runtime/limits' peak, chains on zero tiles
// with no loads, is ~3250):
//   products only, 4 C chains, C stored every 64 steps        2650
//   + A and B loads, all from L1                              2200
//   A from L2, B from L1, C in tiles over all of k            2000-2100
//   A from L2, B from L1, C through an L1 buffer every 8-16   1900-2050
//   A and B both from L2 (4 KiB a step), C over all of k      1400-1450
//   A from L2, a fresh B block every k block, reused by 4
//     weight blocks, C through L1 (this file's prefill)       1300-1500
// L2 gives the tile loads ~40 B a cycle, so a step (4 products, ~64 cycles)
// can take ~2.5 KiB from it; a loop whose B block changes every k block
// loses its B and C lines to the A stream in L1 (12 ways, every tile of a
// step in the same 16 sets), which the no-reuse hint on A loads only
// partly saves.
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
// A tiles of the prefill path: loaded with the hint that they will not be
// used again soon (TILELOADDT1), so they stream through without evicting
// the B and C tiles that are.
#define TLOAD_A(t, p, stride) _tile_stream_loadd(t, p, stride)
enum { NSUB = 32 };  // weight rows per register block (2 A tiles)
// Prefill units (see "Prefill" below): P_ROWS weight rows by P_SLICE steps
// of k at most, a 512 KiB panel, two of which sit in L2 beside x's stream.
enum { PANEL_BYTES = 512 << 10, P_ROWS = 128, P_SLICE = PANEL_BYTES / (P_ROWS * 64) };

static int64_t slice_steps(const job_t *j);

// Rows of weights per item. Decode batches (m <= 16) reuse nothing, so 32
// rows balance best. Prefill reuses each block of weights for every row of
// x: P_ROWS (see "Prefill" below), fewer only to give each thread at least
// 2 items, so they rebalance.
int64_t rg__amx_rows(const job_t *j, size_t threads) {
  if (j->m <= 16) return 32;
  int64_t rows = P_ROWS;
  while (rows > 32 && (j->n + rows - 1) / rows < 2 * (int64_t)threads) rows -= 32;
  return rows;
}

size_t rg__amx_panel_elems(const job_t *j) {
  if (j->m <= 16) return (size_t)j->amx_rows * (size_t)j->kp;
  // Two panels of a unit's rows and slice; with several slices, the C
  // accumulator (mp x rows f32) after them.
  const int64_t sl = slice_steps(j);
  size_t e = 2 * (size_t)j->amx_rows * (size_t)sl * 32;
  if (sl < j->kp / 32) e += (size_t)j->mp * (size_t)j->amx_rows * 2;
  return e;
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
      rg__transpose16(r);
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
  rg__transpose16(r);
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

// Decode batches (m <= 16, one B tile): `nsub` blocks of 32 weight rows
// against all of x. The A tile of 16 rows `h` (0, 1) of block sb at step s
// is at a + (2 sb + h) * rb_bytes + s * step, its rows `stride` bytes
// apart. The tiles wait on weight memory here, not on themselves: k runs in
// blocks of KC steps over the weight blocks, whose C tiles wait in an L1
// buffer between k blocks.
//
// pf / pf_stride / pf_lines: the next chunk's weights (32 * nsub rows of
// pf_lines lines), prefetched in k order, spread over this chunk's steps,
// into L1 when the tiles read them in place, else into L2 for the panel
// build. nsub <= MAX_NSUB.
enum { KC = 8, MAX_NSUB = 8 };
INLINE __attribute__((target(T_AMX))) void chunk_tiles(const job_t *j, const unsigned char *a,
                                                       size_t rb_bytes, size_t step, size_t stride,
                                                       int64_t n0, int64_t nsub,
                                                       const unsigned char *pf, size_t pf_stride,
                                                       size_t pf_lines, int pf_l2) {
  const int64_t ks = j->kp / 32;
  const size_t pf_rows = 32 * (size_t)nsub, pf_total = pf ? pf_rows * pf_lines : 0;
  const size_t steps = (size_t)(nsub * ks), per = (pf_total + steps - 1) / steps;
  // Walked without divisions: row by row, then the next line.
  size_t pf_left = pf_total, pf_row = 0, pf_off = 0;
  float c[MAX_NSUB][2][256] __attribute__((aligned(64)));
  for (int64_t k0 = 0; k0 < ks; k0 += KC) {
    const int64_t k1 = k0 + KC < ks ? k0 + KC : ks;
    for (int64_t sb = 0; sb < nsub; sb++) {
      const unsigned char *a0 = a + (size_t)(2 * sb) * rb_bytes, *a1 = a0 + rb_bytes;
      if (k0 == 0) {
        TZERO(T_C00);
        TZERO(T_C10);
      } else {
        TLOAD(T_C00, c[sb][0], 64);
        TLOAD(T_C10, c[sb][1], 64);
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
        TLOAD(T_B0, xtile(j, 0, s), 64);
        TLOAD(T_A0, a0 + (size_t)s * step, (long)stride);
        TLOAD(T_A1, a1 + (size_t)s * step, (long)stride);
        TDP(T_C00, T_A0, T_B0);
        TDP(T_C10, T_A1, T_B0);
      }
      TSTORE(T_C00, c[sb][0], 64);
      TSTORE(T_C10, c[sb][1], 64);
    }
  }
  for (int64_t sb = 0; sb < nsub; sb++) {
    const int64_t r = n0 + sb * 32;
    store_c(j, c[sb][0], r, 0);
    if (r + 16 < j->n) store_c(j, c[sb][1], r + 16, 0);
  }
}

// Decode batches (m <= 16): weight rows [r0, r1) (r1 - r0 <= amx_rows)
// against all of x. Prefill has its own loop (prefill_unit below).
__attribute__((target(T_AMX))) static void run_rows(const job_t *j, int64_t r0, int64_t r1,
                                                    uint16_t *panel, float *scratch) {
  const int64_t rows = (r1 - r0 + NSUB - 1) / NSUB * NSUB, nsub = rows / NSUB;
  // Decode batches (m <= 16) read each weight once: bf16 weights whose rows
  // are whole steps and whose blocks lie inside the matrix feed the tiles
  // from where they are, the next chunk prefetched.
  if (j->type == RG_BF16 && j->k % 32 == 0 && r0 + rows <= j->n) {
    const unsigned char *a = j->w + (size_t)r0 * j->row_bytes;
    const unsigned char *pf = r0 + 2 * rows <= j->n ? a + (size_t)rows * j->row_bytes : NULL;
    chunk_tiles(j, a, 16 * j->row_bytes, 64, j->row_bytes, r0, nsub, pf, j->row_bytes,
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
  chunk_tiles(j, a, rb_bytes, 1024, 64, r0, nsub, pf, j->row_bytes, pf_lines, 1);
}

// ---- Prefill: panels built while the tiles run ----------------------------------
//
// For m > 16 each thread walks units of work: a chunk of amx_rows weight
// rows times a slice of k (all of k when a chunk's panel of it fits in
// PANEL_BYTES, else slices of P_SLICE steps), each against all of x. Two
// panels per thread: for bf16 and f16 the tiles read one while the next
// unit's weights go into the other, a piece at a time between k blocks, so
// that work runs while the tiles multiply (serial, the panel build was a
// tenth of the time at m = 512); bf16 is copied by the tiles' own load and
// store units. Slicing k keeps chunks
// tall at large k: all of x streams from L3 once per unit, so a unit's rows
// set the FLOPs per byte of x (at k = 8192 unsliced chunks were 64 rows and
// x's stream halved the rate). With several slices, C is carried between
// them in a per-thread accumulator (m x rows f32, in L2).

// Panel tile (rb, sl) of a unit whose slice has `steps` steps.
static uint16_t *utile(uint16_t *panel, int64_t steps, int64_t rb, int64_t sl) {
  return panel + (size_t)(rb * steps + sl) * 512;
}

// One unit's panel, built a piece (one panel line: 32 values of one row) at
// a time: bf16 a tile (16 pieces) at a time, f16 piece by piece, both
// between the previous unit's k blocks; the other types a row's slice at a
// time (their conversion goes through f32 scratch), after it.
typedef struct {
  const job_t *j;
  uint16_t *panel;
  float *scratch;
  int64_t r0, rows;  // weight rows [r0, r0 + rows) into panel rows [0, rows)
  int64_t s0, s1;    // steps [s0, s1) of k
  int64_t r, s;      // the next piece: panel row r, step s
  int64_t credit;    // pieces due but not yet built (row-at-a-time types)
  int tiles;         // bf16 whose 16-row blocks all lie inside the matrix: whole tiles
} builder_t;

enum { PF_ROWS = 2 };  // how many rows ahead the builder prefetches its source

// Values [32 s0, min(32 s1, k)) of weight row r0 + r, through f32 scratch.
__attribute__((target(T_AMX))) static void build_row_slice(builder_t *b) {
  const job_t *j = b->j;
  const int64_t steps = b->s1 - b->s0, r = b->r0 + b->r, p0 = 32 * b->s0;
  const int64_t len = (32 * b->s1 < j->k ? 32 * b->s1 : j->k) - p0;
  const size_t off = (size_t)(p0 / rg_dtype_block_elems(j->type)) *
                     (size_t)rg_dtype_block_bytes(j->type),
               bytes = (size_t)(len / rg_dtype_block_elems(j->type)) *
                       (size_t)rg_dtype_block_bytes(j->type);
  if (r + PF_ROWS < j->n) {
    const char *src = (const char *)j->w + (size_t)(r + PF_ROWS) * j->row_bytes + off;
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(src + o, _MM_HINT_T1);
  }
  if (r >= j->n) {
    for (int64_t sl = 0; sl < steps; sl++)
      _mm512_store_si512(utile(b->panel, steps, b->r / 16, sl) + (b->r % 16) * 32,
                         _mm512_setzero_si512());
  } else {
    // Cannot fail: the type and k were checked before the job started, and
    // slices start on block boundaries (P_SLICE * 32 is a multiple of 256).
    rg_status_free(rg_row_to_f32_isa(RG_CPU_ISA_AVX512, j->type,
                                     j->w + (size_t)r * j->row_bytes + off, b->scratch, len));
    for (int64_t sl = 0; sl < steps; sl++) {
      const int64_t p = 32 * sl;
      const __mmask16 m0 = mask16(len - p), m1 = mask16(len - p - 16);
      __m512 lo = _mm512_maskz_loadu_ps(m0, b->scratch + p),
             hi = _mm512_maskz_loadu_ps(m1, b->scratch + p + 16);
      _mm512_store_si512(utile(b->panel, steps, b->r / 16, sl) + (b->r % 16) * 32,
                         (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
  b->r++;
}

// Whether a unit's panel can be copied a tile at a time (see build_pieces).
static int tile_copyable(const job_t *j, const builder_t *b) {
  return j->type == RG_BF16 && j->k % 32 == 0 && b->r0 + b->rows <= j->n;
}

// Builds up to `count` more pieces. bf16 panels whose tiles are whole are
// copied 16 rows at a time through tile register T_C00 (a tile load with
// the rows' stride, a store into the panel), which the tiles' own load and
// store units do with no vector work; so this runs only where T_C00 is free
// (between one weight block's C store and the next one's C load).
__attribute__((target(T_AMX))) static void build_pieces(builder_t *b, int64_t count) {
  const job_t *j = b->j;
  const int64_t steps = b->s1 - b->s0, k = j->k;
  if (b->tiles) {
    for (b->credit += count; b->credit >= 16 && b->r < b->rows; b->credit -= 16) {
      TLOAD(T_C00, j->w + (size_t)(b->r0 + b->r) * j->row_bytes + 64 * (size_t)b->s,
            (long)j->row_bytes);
      TSTORE(T_C00, utile(b->panel, steps, b->r / 16, b->s - b->s0), 64);
      if (++b->s == b->s1) b->s = b->s0, b->r += 16;
    }
    return;
  }
  if (j->type != RG_BF16 && j->type != RG_F16) {
    b->credit += count;
    while (b->credit >= steps && b->r < b->rows) build_row_slice(b), b->credit -= steps;
    return;
  }
  for (; count > 0 && b->r < b->rows; count--) {
    const int64_t r = b->r0 + b->r, p = 32 * b->s;
    uint16_t *dst = utile(b->panel, steps, b->r / 16, b->s - b->s0) + (size_t)(b->r % 16) * 32;
    if (r >= j->n) {
      _mm512_store_si512(dst, _mm512_setzero_si512());
    } else {
      // One source line a piece (32 bf16 or f16 values); the same line
      // PF_ROWS rows on is fetched into L2 now, so the widening never
      // waits on memory.
      const unsigned char *src = j->w + (size_t)r * j->row_bytes + 2 * p;
      if (r + PF_ROWS < j->n) _mm_prefetch((const char *)src + PF_ROWS * j->row_bytes, _MM_HINT_T1);
      if (j->type == RG_BF16) {
        __mmask32 m = k - p >= 32 ? 0xffffffffu : (__mmask32)((1u << (k - p)) - 1);
        _mm512_store_si512(dst, _mm512_maskz_loadu_epi16(m, src));
      } else {
        const __mmask16 m0 = mask16(k - p), m1 = mask16(k - p - 16);
        __m512 lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, src)),
               hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, src + 32));
        _mm512_store_si512(dst, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
      }
    }
    if (++b->s == b->s1) b->s = b->s0, b->r++;
  }
}

// C tiles of a finished group waiting to be written to y: flushed a tile at
// a time between the next group's k blocks, so neither the wait for the
// last products nor the transposes stall the tiles.
typedef struct {
  float (*c)[4][256];  // [block][tile]: tiles 0, 1 = rows r, 2, 3 = rows r + 16
  int64_t n0, m0;      // the group's first weight row and first row of x
  int left, total;     // tiles not yet flushed, of total
} pending_t;

__attribute__((target(T_AMX))) static void flush_one(const job_t *j, pending_t *p) {
  for (; p->left > 0; p->left--) {
    const int t = p->total - p->left, sb = t / 4, q = t % 4;
    const int64_t r = p->n0 + sb * 32 + (q >= 2 ? 16 : 0), m0 = p->m0 + (q & 1 ? 16 : 0);
    if (r < j->n && m0 < j->m) {
      store_c(j, p->c[sb][q], r, m0);
      p->left--;
      return;
    }
  }
}

__attribute__((target(T_AMX))) static void flush_all(const job_t *j, pending_t *p) {
  while (p->left > 0) flush_one(j, p);
}

// k steps per block and weight blocks per group. Measured at m = 512, n = k
// = 2048, one thread: 4 blocks of 8 steps ran 5-10 % faster than 2 of 16
// (noisy: the machine was shared).
enum { P_KC = 8, P_G = 4 };

// One unit: `nsub` blocks of 32 weight rows from n0 (the panel `u`, steps
// [u->s0, u->s1) of k) against all of x, 32 rows of x at a time (two B
// tiles), while `next` (may be NULL) builds the following unit's panel.
// Loop order: rows of x, then groups of P_G weight blocks, then k in blocks
// of P_KC steps, then the group's blocks: the B tiles of one k block are
// read by every block of the group, and the group's C tiles wait in L1
// between k blocks. A tiles are read from the panel (L2) once per pass with
// the no-reuse hint, so they do not push the B and C tiles out of L1. The
// vector work (the next panel, the previous group's C tiles into y) runs
// between k blocks. `acc` (mp/32 x nsub x 4 tiles) carries C between
// slices; NULL when the unit covers all of k.
__attribute__((target(T_AMX))) static void prefill_unit(const job_t *j, const builder_t *u,
                                                        float (*acc)[4][256], builder_t *next) {
  const int64_t ks = j->kp / 32, mblocks = j->mp / 32, nsub = u->rows / NSUB;
  const int64_t s0 = u->s0, s1 = u->s1, steps = s1 - s0, n0 = u->r0;
  const int first = s0 == 0, last = s1 == ks;
  const size_t rb_bytes = 1024 * (size_t)steps;
  const unsigned char *a = (const unsigned char *)u->panel;
  const int64_t kblocks = (steps + P_KC - 1) / P_KC, bursts = mblocks * nsub * kblocks;
  // The types widened a row at a time (q8_0, the k-quants) build the next
  // panel after this unit instead: a row's conversion between k blocks is
  // more vector work than the tiles hide (q8_0 ran 10-20 % slower).
  const int inl = next && (j->type == RG_BF16 || j->type == RG_F16);
  const int64_t per = inl ? (next->rows * (next->s1 - next->s0) + bursts - 1) / bursts : 0;
  float c[2][P_G][4][256] __attribute__((aligned(64)));
  pending_t pend = {c[1], 0, 0, 0, 0};
  int cur = 0;
  const size_t xb_per = 32 * (size_t)steps, xb_steps = (size_t)(nsub * steps),
               xb_q = (xb_per + xb_steps - 1) / xb_steps;
  for (int64_t mb = 0; mb < mblocks; mb++) {
    const char *xnext = mb + 1 < mblocks ? (const char *)xtile(j, (mb + 1) * 2, s0) : NULL;
    size_t xb_left = xnext ? xb_per : 0;
    const uint16_t *xb0 = xtile(j, mb * 2, 0), *xb1 = xtile(j, mb * 2 + 1, 0);
    for (int64_t g0 = 0; g0 < nsub; g0 += P_G) {
      const int64_t g1 = g0 + P_G < nsub ? g0 + P_G : nsub;
      float(*cg)[4][256] = acc ? acc + mb * nsub + g0 : c[cur];
      // Tiles to flush per burst, so the previous group is written by the
      // end of this one.
      const int fl = (int)((pend.left + (g1 - g0) * kblocks - 1) / ((g1 - g0) * kblocks));
      for (int64_t k0 = s0; k0 < s1; k0 += P_KC) {
        const int64_t k1 = k0 + P_KC < s1 ? k0 + P_KC : s1;
        for (int64_t sb = g0; sb < g1; sb++) {
          float(*cs)[256] = cg[sb - g0];
          const unsigned char *a0 = a + (size_t)(2 * sb) * rb_bytes - (size_t)s0 * 1024,
                              *a1 = a0 + rb_bytes;
          if (k0 == s0 && first) {
            TZERO(T_C00);
            TZERO(T_C01);
            TZERO(T_C10);
            TZERO(T_C11);
          } else {
            TLOAD(T_C00, cs[0], 64);
            TLOAD(T_C01, cs[1], 64);
            TLOAD(T_C10, cs[2], 64);
            TLOAD(T_C11, cs[3], 64);
          }
          for (int64_t s = k0; s < k1; s++) {
            for (size_t q = 0; q < xb_q && xb_left; q++, xb_left--, xnext += 64)
              _mm_prefetch(xnext, _MM_HINT_T1);
            TLOAD(T_B0, xb0 + (size_t)s * 512, 64);
            TLOAD(T_B1, xb1 + (size_t)s * 512, 64);
            TLOAD_A(T_A0, a0 + (size_t)s * 1024, 64);
            TLOAD_A(T_A1, a1 + (size_t)s * 1024, 64);
            TDP(T_C00, T_A0, T_B0);
            TDP(T_C10, T_A1, T_B0);
            TDP(T_C01, T_A0, T_B1);
            TDP(T_C11, T_A1, T_B1);
          }
          TSTORE(T_C00, cs[0], 64);
          TSTORE(T_C01, cs[1], 64);
          TSTORE(T_C10, cs[2], 64);
          TSTORE(T_C11, cs[3], 64);
          if (per) build_pieces(next, per);
          for (int f = 0; f < fl; f++) flush_one(j, &pend);
        }
      }
      flush_all(j, &pend);
      if (last) {
        pend = (pending_t){cg, n0 + g0 * 32, mb * 32, (int)(g1 - g0) * 4, (int)(g1 - g0) * 4};
        cur ^= 1;
      }
    }
  }
  flush_all(j, &pend);
}

// Steps of k per slice: all of k when the unit's panel of it fits.
static int64_t slice_steps(const job_t *j) {
  const int64_t ks = j->kp / 32;
  return ks <= (int64_t)P_SLICE * P_ROWS / j->amx_rows ? ks : P_SLICE;
}

// The unit after `u` for this thread: the next slice of its chunk, else the
// first slice of the rest of its last claim, else of a new claim. 0 when
// none is left.
static int next_unit(job_t *j, int me, size_t *it, size_t *end, const builder_t *u,
                     builder_t *out) {
  const int64_t ks = j->kp / 32, sl = slice_steps(j);
  int64_t r0 = u->r0, s0 = u->s1;
  if (s0 >= ks) {
    if (*it + 1 < *end)
      ++*it;
    else if (!rg__mm_claim(j, me, it, end))
      return 0;
    r0 = (int64_t)*it * j->amx_rows, s0 = 0;
  }
  const int64_t r1 = r0 + j->amx_rows < j->n ? r0 + j->amx_rows : j->n;
  out->r0 = r0, out->rows = (r1 - r0 + NSUB - 1) / NSUB * NSUB;
  out->s0 = s0, out->s1 = s0 + sl < ks ? s0 + sl : ks;
  out->r = 0, out->s = s0, out->credit = 0;
  out->tiles = tile_copyable(j, out);
  return 1;
}

// Prefill (m > 16): units are taken one ahead, and each one's panel is
// built during the previous one's tiles; only the first is built alone.
__attribute__((target(T_AMX))) static void prefill_worker(job_t *j, int me, uint16_t *panels,
                                                          float *scratch) {
  const int64_t sl = slice_steps(j);
  const size_t half = (size_t)j->amx_rows * (size_t)sl * 32;
  float(*acc)[4][256] = sl < j->kp / 32 ? (float(*)[4][256])(void *)(panels + 2 * half) : NULL;
  size_t it, end;
  if (!rg__mm_claim(j, me, &it, &end)) return;
  builder_t bl[2];
  for (int i = 0; i < 2; i++)
    bl[i] = (builder_t){.j = j, .panel = panels + i * half, .scratch = scratch};
  const int64_t r1 = (int64_t)it * j->amx_rows + j->amx_rows;
  bl[0].r0 = (int64_t)it * j->amx_rows;
  bl[0].rows = ((r1 < j->n ? r1 : j->n) - bl[0].r0 + NSUB - 1) / NSUB * NSUB;
  bl[0].s0 = bl[0].s = 0, bl[0].s1 = sl < j->kp / 32 ? sl : j->kp / 32;
  bl[0].tiles = tile_copyable(j, &bl[0]);
  build_pieces(&bl[0], INT64_MAX / 2);
  for (int cur = 0;; cur ^= 1) {
    builder_t *nb = &bl[cur ^ 1];
    if (!next_unit(j, me, &it, &end, &bl[cur], nb)) nb = NULL;
    prefill_unit(j, &bl[cur], acc, nb);
    if (!nb) break;
    build_pieces(nb, INT64_MAX / 2);
  }
}

__attribute__((target(T_AMX))) void rg__amx_worker(void *ctx, size_t me, size_t unused,
                                                   int thread) {
  job_t *j = ctx;
  rg__amx_load_tiles();
  uint16_t *panel = j->panels ? j->panels + (size_t)thread * j->panel_elems : NULL;
  float *scratch = j->scratch ? j->scratch + (size_t)thread * (size_t)j->kp : NULL;
  size_t b, e;
  if (j->mp > 16 && panel) {
    prefill_worker(j, (int)me, panel, scratch);
  } else {
    while (rg__mm_claim(j, (int)me, &b, &e))
      for (size_t it = b; it < e; it++) {
        int64_t r0 = (int64_t)it * j->amx_rows,
                r1 = r0 + j->amx_rows < j->n ? r0 + j->amx_rows : j->n;
        run_rows(j, r0, r1, panel, scratch);
      }
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
int64_t rg__amx_rows(const job_t *j, size_t threads) {
  (void)j, (void)threads;
  return 32;
}
void rg__amx_worker(void *ctx, size_t me, size_t unused, int thread) {
  (void)ctx, (void)me, (void)thread;
}

#endif  // RG_X86
