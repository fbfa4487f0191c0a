// ops/cpu/attention_amx.c — prefill blocks of attention on the AMX tiles,
// for bf16 KV (attention.c picks this at the amx level; see "Prefill
// blocks" there for what a block is).
//
// A block is R <= 128 query rows (tokens x the GQA heads of one kv head)
// against the positions they see, 64 positions (a slice) at a time,
// flash-attention style: S = Q K^T on the tiles, the online softmax in f32
// with AVX-512, O += P V on the tiles. Both products are computed
// transposed, so that no key is ever rearranged and the softmax needs no
// reduction across lanes:
//   S^T (16 positions x 16 rows) = K (16 positions x 32 dims, the A
//       operand, read where it lies: a 16-position run of one cache block
//       is 16 rows head_dim * 2 bytes apart) times Q^T (32 dims x 16 rows,
//       the B operand in its pair-interleaved layout, packed once per
//       block, q * scale rounded to bf16);
//   O^T (16 dims x 16 rows) += V^T (16 dims x 32 positions, A) times P^T
//       (32 positions x 16 rows, B, pair-interleaved: two position vectors
//       rounded to bf16 and interleaved, one permute per pair).
// S^T comes out of a tile as 16 vectors of 16 rows, one per position,
// which is the layout the AVX-512 block kernel's softmax already uses: max
// and sums run down positions, a row per lane, the causal and window
// masks per lane. O^T's rows are dims with rows in lanes, so the online
// softmax's correction per row is one vector multiply per tile row.
//
// V^T is the one operand packed: each 32 positions of V pair-interleaved
// and transposed (16 vpermw and 4 x 16 x 4 shuffles at head_dim 64), by
// attention.c once per prefill run and kv head before the blocks run
// (rg__attn_amx_pack_vt), so all the run's blocks share it; packed per
// block instead it was ~10 % of the time at chunk 512.
//
// Measured (bench_attention, one thread, GQA 32/8, the last 512-token chunk
// of a context): 360-540 GFLOP/s, 0.12-0.18 of the AMX-BF16 peak, 4.8-7.6
// times the AVX-512 f32 blocks in the same run. Where the time went
// (head_dim 64, context 2048, CPU time, parts left out one at a time, at
// 32-position slices): of ~20 ms, the softmax alone ~9 (its exps ~3), the
// tile products with their loads and stores ~10, the V^T pack (then per
// block) ~2. Blocks of 32 or 64 rows, and of 256, ran no faster than 128.
// Slices of 64 positions ran 8-10 % faster than 32 (half the O^T loads and
// stores per product). Software pipelining made no difference, measured
// both ways: the next group's S^T tiles issued before this group's softmax,
// and that plus the previous group's P V tiles after it (so that no tile
// load waits on the vector stores just before it, nor vector loads on tile
// stores).
//
// Accuracy: Q and P are rounded to bf16 (8 significant bits), the products
// sum in f32. Measured against the reference (tests/test_ops.c) the NMSE is
// 2e-6 to 4.3e-6, against ~1e-14 for the f32 kernels.
#include <math.h>
#include <string.h>

#include "ops/cpu/cpu_impl.h"

enum { ROWS = RG__ATTN_AMX_ROWS, GROUPS = ROWS / 16, SLICE = RG__ATTN_AMX_SLICE };

// Scratch, 64-byte aligned pieces, for head_dim hd:
//   qT    GROUPS x hd/32 B tiles (1 KiB each): Q^T per group of 16 rows
//   accT  GROUPS x hd/16 C tiles (1 KiB): O^T per group
//   kbuf  SLICE x hd bf16: K rows of a slice gathered where they do not lie
//         16 to a block run
//   sbuf  SLICE x 16 f32: S^T of one group and slice; pbuf: P^T's B tiles
//   m, l  (ROWS) f32; lo, wd (ROWS) int32: each row's first visible
//         position and how many it sees
static size_t off_accT(size_t hd) {
  return (size_t)GROUPS * hd / 32 * 1024;
}
static size_t off_kbuf(size_t hd) {
  return off_accT(hd) + (size_t)GROUPS * hd / 16 * 1024;
}
static size_t off_sbuf(size_t hd) {
  return off_kbuf(hd) + SLICE * hd * 2;
}
static size_t off_pbuf(size_t hd) {
  return off_sbuf(hd) + SLICE * 16 * 4;
}
static size_t off_rows(size_t hd) {
  return off_pbuf(hd) + SLICE / 32 * 1024;
}

size_t rg__attn_amx_scratch_bytes(size_t head_dim) {
  return off_rows(head_dim) + 4 * ROWS * 4;
}

#if RG_X86
#define RG_T512 __attribute__((target(T_AMX)))

// Scores are kept in log2 units (log2(e) is folded into the query scale),
// so the softmax's exps are 2^x: Cephes' exp2f, n = round(x), r = x - n in
// [-0.5, 0.5], 1 + r P(r) with P of degree 5, times 2^n by scalef (0 far
// below, as low as -1e30). 9 instructions against simd_exp.h's 15, which
// count: the exps are most of the softmax's vector work (with this exp and
// the lazy max below the kernel ran 25-30 % faster). Measured worst
// relative error 8e-8 over [-150, 10]. No clamps: x is finite and at most
// LAZY, or its lane is masked after.
RG_T512 static inline __m512 exp2_512(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.339887440266574e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.618437357674640e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.550332471162809e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.402264791363012e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.931472028550421e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

static const float LOG2E = 1.44269504088896341f;
// A row's running max moves only when a slice's exceeds it by more than
// LAZY (log2 units), so probabilities reach 2^LAZY = 256 at most (far from
// f32's and bf16's range limits) and O^T is rescaled rarely: with exact
// maxima, random scores moved some row of a group in ~40 % of slices at
// 1024 positions, each rescale a load, multiply and store per O^T row.
static const float LAZY = 8.0f;

// Tile registers. S^T: 0-3 the slice's four 16-position quarters, 4 and 6
// their K tiles in turn, 5 a Q^T tile. O^T += V^T P^T: 6 and 7 P^T's two
// halves; O^T tiles alternate between 0 (V^T tiles 2, 3) and 1 (4, 5), so
// that one tile's load, products and store need not wait for the one
// before (measured 0-7 % faster than one register for all, in the noise of
// a shared machine). GCC pastes the tile number into the instruction's
// text, so these must be literals.
#define T_S0 0
#define T_S1 1
#define T_S2 2
#define T_S3 3
#define T_K0 4
#define T_K1 6
#define T_Q 5
#define T_OA 0
#define T_OB 1
#define T_VA0 2
#define T_VA1 3
#define T_VB0 4
#define T_VB1 5
#define T_P0 6
#define T_P1 7

RG_T512 void rg__attn_amx_begin(void) {
  rg__amx_load_tiles();
}

RG_T512 void rg__attn_amx_end(void) {
  // Back to the init state, so the kernel need not save 8 KiB of tiles
  // when this thread is switched out.
  _tile_release();
}

// vpermw indices: pairs (a_i, b_i) of two 32-element vectors, i in [0, 16)
// (lo) or [16, 32) (hi); and, of one vector holding a in elements 0-15 and
// b in 16-31, the pairs (a_i, b_i).
static const uint16_t il_lo[32]
    __attribute__((aligned(64))) = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                    8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
static const uint16_t il_hi[32]
    __attribute__((aligned(64))) = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                    24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
static const uint16_t il_one[32]
    __attribute__((aligned(64))) = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                    8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

// Where position p's row of K (or V) of head h starts.
static inline size_t row_at(const rg__attn_amx_block_t *b, size_t p) {
  const size_t bs = b->block_size;
  return (((size_t)b->blocks[p / bs] * b->n_kv_heads + b->h) * bs + p % bs) * b->head_dim;
}

// Q^T of group g into its B tiles: rows 16g .. 16g + 15, scaled and rounded
// to bf16; rows past R are zero.
RG_T512 static void pack_q(const rg__attn_amx_block_t *b, size_t g, size_t R, uint16_t *qT) {
  const size_t hd = b->head_dim, G = b->G;
  for (size_t s = 0; s < hd / 32; s++) {
    __m512i r[16];
    const __m512 sc = _mm512_set1_ps(b->scale * LOG2E);
    for (size_t i = 0; i < 16; i++) {
      const size_t row = 16 * g + i;
      if (row >= R) {
        r[i] = _mm512_setzero_si512();
        continue;
      }
      const float *q = b->q + row / G * b->q_stride + row % G * hd + 32 * s;
      r[i] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(_mm512_loadu_ps(q + 16), sc),
                                          _mm512_mul_ps(_mm512_loadu_ps(q), sc));
    }
    rg__transpose16(r);
    for (int kk = 0; kk < 16; kk++) _mm512_store_si512(qT + s * 512 + kk * 32, r[kk]);
  }
}

// V^T of the slice whose 32 rows are vrow[]: A tile d holds dims 16d ..
// 16d + 15, each a row of the 32 positions in order.
RG_T512 static void pack_v(const uint16_t *const *vrow, size_t hd, uint16_t *vT) {
  const __m512i ilo = _mm512_load_si512(il_lo), ihi = _mm512_load_si512(il_hi);
  for (size_t d = 0; d < hd / 16; d++) {
    __m512i r[16];
    const __m512i idx = d & 1 ? ihi : ilo;
    // r[p] holds, for dims 16d .. 16d + 15, the pairs (position 2p, 2p + 1).
    for (int p = 0; p < 16; p++)
      r[p] = _mm512_permutex2var_epi16(_mm512_loadu_si512(vrow[2 * p] + 32 * (d / 2)), idx,
                                       _mm512_loadu_si512(vrow[2 * p + 1] + 32 * (d / 2)));
    rg__transpose16(r);
    for (int i = 0; i < 16; i++) _mm512_store_si512(vT + d * 512 + i * 32, r[i]);
  }
}

// Zeros for the V rows outside a run's positions.
static const uint16_t zero_row[256] __attribute__((aligned(64)));

RG_T512 void rg__attn_amx_pack_vt(const rg__attn_amx_block_t *b, size_t jb, size_t lo, size_t hi,
                                  uint16_t *dst) {
  const size_t hd = b->head_dim;
  const uint16_t *vrow[SLICE];
  for (size_t i = 0; i < SLICE; i++) {
    const size_t p = jb + i;
    vrow[i] = p >= lo && p < hi ? b->v + row_at(b, p) : zero_row;
  }
  for (size_t hf = 0; hf < SLICE / 32; hf++) pack_v(vrow + 32 * hf, hd, dst + hf * hd / 16 * 512);
}

// S^T of one group and slice into sbuf (SLICE x 16 f32): the slice's K
// quarters (16 rows kstride bytes apart each) times the group's Q^T tiles.
INLINE __attribute__((target(T_AMX))) void s_tiles(const uint16_t *qg, const uint16_t *const *ksrc,
                                                   size_t ks, long kstride, float *sbuf) {
  _tile_zero(T_S0);
  _tile_zero(T_S1);
  _tile_zero(T_S2);
  _tile_zero(T_S3);
  for (size_t s = 0; s < ks; s++) {
    _tile_loadd(T_Q, qg + s * 512, 64);
    _tile_loadd(T_K0, ksrc[0] + 32 * s, kstride);
    _tile_dpbf16ps(T_S0, T_K0, T_Q);
    _tile_loadd(T_K1, ksrc[1] + 32 * s, kstride);
    _tile_dpbf16ps(T_S1, T_K1, T_Q);
    _tile_loadd(T_K0, ksrc[2] + 32 * s, kstride);
    _tile_dpbf16ps(T_S2, T_K0, T_Q);
    _tile_loadd(T_K1, ksrc[3] + 32 * s, kstride);
    _tile_dpbf16ps(T_S3, T_K1, T_Q);
  }
  _tile_stored(T_S0, sbuf, 64);
  _tile_stored(T_S1, sbuf + 256, 64);
  _tile_stored(T_S2, sbuf + 512, 64);
  _tile_stored(T_S3, sbuf + 768, 64);
}

// O^T (ds tiles at ag) += V^T (the slice's tiles at vT) times P^T (pb).
INLINE __attribute__((target(T_AMX))) void pv_tiles(float *ag, const uint16_t *vT,
                                                    const uint16_t *pb, size_t ds) {
  _tile_loadd(T_P0, pb, 64);
  _tile_loadd(T_P1, pb + 512, 64);
  for (size_t d = 0; d < ds; d += 2) {  // ds = head_dim / 16 is even
    float *oa = ag + d * 256, *ob = oa + 256;
    _tile_loadd(T_OA, oa, 64);
    _tile_loadd(T_VA0, vT + d * 512, 64);
    _tile_loadd(T_VA1, vT + (ds + d) * 512, 64);
    _tile_loadd(T_OB, ob, 64);
    _tile_loadd(T_VB0, vT + (d + 1) * 512, 64);
    _tile_loadd(T_VB1, vT + (ds + d + 1) * 512, 64);
    _tile_dpbf16ps(T_OA, T_VA0, T_P0);
    _tile_dpbf16ps(T_OB, T_VB0, T_P0);
    _tile_dpbf16ps(T_OA, T_VA1, T_P1);
    _tile_dpbf16ps(T_OB, T_VB1, T_P1);
    _tile_stored(T_OA, oa, 64);
    _tile_stored(T_OB, ob, 64);
  }
}

// The online softmax of one group's 16 rows (lanes) over the slice from
// position jb: S^T in sb, P^T's B tiles out to pb, the rows' m and l
// updated and their O^T (ag) rescaled where a max moved. masked: some
// position of the slice is outside some row's [lo, lo + wd). Four running
// maxima and two sums, so that neither waits on a chain of dependent
// instructions.
INLINE __attribute__((target(T_AMX))) void softmax(const float *sb, uint16_t *pb, float *ag,
                                                   size_t ds, float *mg, float *lg,
                                                   const int32_t *lo, const int32_t *wd, size_t jb,
                                                   int masked) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
  __mmask16 vis[SLICE];
  __m512 mx4[4] = {ninf, ninf, ninf, ninf};
  if (masked) {
    const __m512i lov = _mm512_load_si512(lo), wdv = _mm512_load_si512(wd);
    for (int cc = 0; cc < SLICE; cc++) {
      const __m512i d = _mm512_sub_epi32(_mm512_set1_epi32((int32_t)(jb + (size_t)cc)), lov);
      vis[cc] = _mm512_cmplt_epu32_mask(d, wdv);
      mx4[cc & 3] =
          _mm512_mask_max_ps(mx4[cc & 3], vis[cc], mx4[cc & 3], _mm512_load_ps(sb + 16 * cc));
    }
  } else {
    for (int cc = 0; cc < SLICE; cc++) {
      vis[cc] = 0xffff;
      mx4[cc & 3] = _mm512_max_ps(mx4[cc & 3], _mm512_load_ps(sb + 16 * cc));
    }
  }
  const __m512 mx = _mm512_max_ps(_mm512_max_ps(mx4[0], mx4[1]), _mm512_max_ps(mx4[2], mx4[3]));
  const __m512 mo = _mm512_load_ps(mg);
  const __mmask16 up = _mm512_cmp_ps_mask(mx, _mm512_add_ps(mo, _mm512_set1_ps(LAZY)), _CMP_GT_OQ);
  const __m512 mn = _mm512_mask_mov_ps(mo, up, mx);
  const __mmask16 live = _mm512_cmp_ps_mask(mn, ninf, _CMP_GT_OQ);
  const __m512 mz = _mm512_maskz_mov_ps(live, mn);  // 0 where no row state yet
  // Rows with state whose max moved; a row's first max needs none (its O
  // and l are 0).
  const __mmask16 moved = _mm512_mask_cmp_ps_mask(up, mo, ninf, _CMP_GT_OQ);
  const __m512i il1 = _mm512_load_si512(il_one);
  __m512 sum2[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int kk = 0; kk < SLICE / 2; kk++) {
    const __m512 p0 = _mm512_maskz_mov_ps(
                     vis[2 * kk], exp2_512(_mm512_sub_ps(_mm512_load_ps(sb + 32 * kk), mz))),
                 p1 = _mm512_maskz_mov_ps(
                     vis[2 * kk + 1],
                     exp2_512(_mm512_sub_ps(_mm512_load_ps(sb + 32 * kk + 16), mz)));
    sum2[kk & 1] = _mm512_add_ps(sum2[kk & 1], _mm512_add_ps(p0, p1));
    _mm512_store_si512(pb + 32 * kk,
                       _mm512_permutexvar_epi16(il1, (__m512i)_mm512_cvtne2ps_pbh(p1, p0)));
  }
  const __m512 sum = _mm512_add_ps(sum2[0], sum2[1]);
  __m512 cr = one;
  if (moved) {
    cr = _mm512_mask_mov_ps(one, moved, exp2_512(_mm512_sub_ps(mo, mn)));
    for (size_t i = 0; i < ds * 16; i++)
      _mm512_store_ps(ag + 16 * i, _mm512_mul_ps(_mm512_load_ps(ag + 16 * i), cr));
  }
  _mm512_store_ps(lg, _mm512_fmadd_ps(_mm512_load_ps(lg), cr, sum));
  _mm512_store_ps(mg, mn);
}

RG_T512 void rg__attn_amx_run(const rg__attn_amx_block_t *b) {
  const size_t hd = b->head_dim, G = b->G, R = b->T * G, ng = (R + 15) / 16;
  const size_t ks = hd / 32, ds = hd / 16, bs = b->block_size;
  unsigned char *base = b->scratch;
  uint16_t *qT = (uint16_t *)base, *kbuf = (uint16_t *)(base + off_kbuf(hd)),
           *pbuf = (uint16_t *)(base + off_pbuf(hd));
  float *accT = (float *)(base + off_accT(hd)), *sbuf = (float *)(base + off_sbuf(hd));
  float *m = (float *)(base + off_rows(hd)), *l = m + ROWS;
  int32_t *lo = (int32_t *)(l + ROWS), *wd = lo + ROWS;
  // Each row's visible positions [lo, lo + wd); the padding rows of the
  // last group copy the last row's, so that they force no masking (their
  // zero queries give finite scores, and they are never written out).
  size_t glo_min[GROUPS] = {0}, glo_max[GROUPS] = {0}, ghi_min[GROUPS] = {0}, ghi_max[GROUPS] = {0};
  for (size_t r = 0; r < ng * 16; r++) {
    const size_t t = (r < R ? r : R - 1) / G, p = b->P0 + t;
    const size_t first = b->window && p + 1 > b->window ? p + 1 - b->window : 0;
    lo[r] = (int32_t)first, wd[r] = (int32_t)(p + 1 - first);
    m[r] = -INFINITY, l[r] = 0;
    const size_t g = r / 16, hi = p + 1;
    if (r % 16 == 0) glo_min[g] = glo_max[g] = first, ghi_min[g] = ghi_max[g] = hi;
    glo_min[g] = first < glo_min[g] ? first : glo_min[g];
    glo_max[g] = first > glo_max[g] ? first : glo_max[g];
    ghi_min[g] = hi < ghi_min[g] ? hi : ghi_min[g];
    ghi_max[g] = hi > ghi_max[g] ? hi : ghi_max[g];
  }
  for (size_t g = 0; g < ng; g++) pack_q(b, g, R, qT + g * ks * 512);
  memset(accT, 0, ng * ds * 1024);
  // Positions in play: from the first row's first to the last row's own.
  const size_t j_lo = glo_min[0], j_hi = b->P0 + b->T;
  const long kstride = (long)(hd * 2);
  for (size_t jb = j_lo / SLICE * SLICE; jb < j_hi; jb += SLICE) {
    // K: each quarter of the slice straight from the cache when its 16
    // positions are one run of a block and all in play, else gathered.
    const uint16_t *ksrc[SLICE / 16];
    for (size_t hf = 0; hf < SLICE / 16; hf++) {
      const size_t p0 = jb + 16 * hf;
      if (bs % 16 == 0 && p0 >= j_lo && p0 + 16 <= j_hi) {
        ksrc[hf] = b->k + row_at(b, p0);
        continue;
      }
      uint16_t *dst = kbuf + 16 * hf * hd;
      for (size_t i = 0; i < 16; i++) {
        const size_t p = p0 + i;
        if (p >= j_lo && p < j_hi)
          memcpy(dst + i * hd, b->k + row_at(b, p), hd * 2);
        else
          memset(dst + i * hd, 0, hd * 2);
      }
      ksrc[hf] = dst;
    }
    const uint16_t *vT = b->vt + (jb - b->vt_lo) * hd;
    for (size_t g = 0; g < ng; g++) {
      if (jb >= ghi_max[g] || jb + SLICE <= glo_min[g]) continue;  // sees none of the slice
      float *ag = accT + g * ds * 256;
      s_tiles(qT + g * ks * 512, ksrc, ks, kstride, sbuf);
      softmax(sbuf, pbuf, ag, ds, m + 16 * g, l + 16 * g, lo + 16 * g, wd + 16 * g, jb,
              jb < glo_max[g] || jb + SLICE > ghi_min[g]);
      pv_tiles(ag, vT, pbuf, ds);
    }
  }
  // o = O / l per row, sinks folded into the denominator (as attention.c's
  // attn_finish_cols); O^T's tiles transposed back into rows.
  for (size_t g = 0; g < ng; g++) {
    float sc[16] __attribute__((aligned(64)));
    for (size_t i = 0; i < 16; i++) {
      const size_t r = 16 * g + i;
      float mm = m[r], ll = l[r];
      if (b->sinks && r < R) {
        // m is in log2 units, the sink a natural logit.
        const float sk = b->sinks[r % G] * LOG2E, mx = mm > sk ? mm : sk, cm = exp2f(mm - mx);
        ll = ll * cm + exp2f(sk - mx);
        sc[i] = ll > 0 ? cm / ll : 0;
      } else {
        sc[i] = ll > 0 ? 1.0f / ll : 0;
      }
    }
    const __m512 scv = _mm512_load_ps(sc);
    const float *ag = accT + g * ds * 256;
    for (size_t d = 0; d < ds; d++) {
      __m512i r[16];
      for (int i = 0; i < 16; i++)
        r[i] = _mm512_castps_si512(_mm512_mul_ps(_mm512_load_ps(ag + d * 256 + 16 * i), scv));
      rg__transpose16(r);
      for (size_t i = 0; i < 16 && 16 * g + i < R; i++) {
        const size_t row = 16 * g + i;
        _mm512_storeu_si512(b->o + row / G * b->q_stride + row % G * hd + 16 * d, r[i]);
      }
    }
  }
}

#else  // !RG_X86: the amx level is never reached.

void rg__attn_amx_begin(void) {}
void rg__attn_amx_end(void) {}
void rg__attn_amx_run(const rg__attn_amx_block_t *b) {
  (void)b;
}
void rg__attn_amx_pack_vt(const rg__attn_amx_block_t *b, size_t jb, size_t lo, size_t hi,
                          uint16_t *dst) {
  (void)b, (void)jb, (void)lo, (void)hi, (void)dst;
}

#endif  // RG_X86
