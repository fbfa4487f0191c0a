// GEMV kernels with AVX512_VNNI (vpdpwssd) for the k-quants and q8_0: x
// quantized to int16 per 256 values; for the k-quants the quants and their
// sub-block scales multiplied in 16-bit lanes and whole super-blocks summed
// exactly in int32 (q8_0, at the end of the file, sums each block of 32).
//
// Why: the avx512-bf16 kernel (kquants.c) streams q4_K at 0.4-0.5 of read
// bandwidth on a Sapphire Rapids VM, and from L2 it is no faster (10
// Gweights/s on one core): it is bound by its vector work, two vdpbf16ps
// per 32 weights (x as bf16 hi + lo), two table lookups and a float scale
// per sub-block. Here each 32 weights cost one vpdpwssd per row of x, one
// vpmullw that applies the sub-block's scale to the quants (shared by all
// rows of x), and the unpacking; the scales of x and of the super-block
// are applied once per 256 weights, in float.
//
// x, per row and super-block of 256 values: dx = amax / 32767 and xq =
// round(x / dx), int16. The error is at most dx / 2 per element, so the
// matmul's NMSE against exact x is about (amax / 32767)^2 / 12 / E[x^2]:
// ~2e-10 for uniform x, ~1e-8 for a super-block whose
// largest value is 20 times its RMS (an outlier channel). That is far inside
// the 2e-5 the conformance suite allows narrow-weight matmuls; a single
// int8 x (llama.cpp's q8_K) would be ~1.5e-5 for uniform x and worse with
// outliers, so it is not used. The kernel's name says "x in int16".
//
// Exactness of the integer part (why no lane overflows):
//   q4_K  w16 = q * sc, q <= 15, sc <= 63: |w16| <= 945.
//   q6_K  w16 = (q - 32) * sc, q - 32 in [-32, 31], sc in [-128, 127]:
//         |w16| <= 4096.
//   A lane of the super-block's int32 sum takes 16 products (8 vpdpwssd of
//   2 each): |sum| <= 16 * 4096 * 32767 = 2147418112 < 2^31.
// q4_K's min term, dmin * m * Σx per sub-block, uses float sums of exact x.
//
// Decode batches: one weight row's super-block is unpacked into 8 registers
// of scaled quants once and applied to up to 8 rows of x (more rows go in
// blocks of 8, unpacking again from L1: a 16-row block spilled registers and
// ran 13% slower than two of 8). Each row costs 8 vpdpwssd per super-block,
// and Intel runs one a cycle, so past a few rows this is compute-bound; the
// AMX path for k-quants (bf16 panels rebuilt for every call) takes over
// where it is faster (tiles_min_m in matmul.c).
//
// At m = 1 the 16-bit kernel is bound by its vector work too: 14-15 GB/s
// of q4_K (16 of q6_K) on one core from L2, about one core's share of DRAM
// bandwidth, so decode streamed ~0.6 of it. Batch 1 therefore has kernels of
// its own (q4_K_row_x8, q6_K_row_x8, below): the same int16 x split exactly
// into two int8 terms, x = 256 h + l, dotted with the quants as stored (u8)
// by vpdpbusd, 64 products an instruction; the two terms' lane sums are
// packed into words and one vpdpwssd per 64 quants multiplies them by the
// sub-blocks' scales. The integer sum of each super-block is the 16-bit
// kernel's exactly (same x, same quants), so the accuracy is unchanged; only
// the float rounding of the lane sums differs, which is why batch-invariant
// mode keeps the 16-bit kernel at m = 1. Per super-block q4_K takes 8
// vpdpbusd + 4 vpdpwssd (12 multiply-class instructions, against 16) and
// about 35 vector instructions in all (against ~45); q6_K 13 against 16, and
// ~45 against ~70 (its unpacking works on bytes, not words). One core, n =
// 512, k = 2048 from L2, 3000 calls alternating with the 16-bit kernel,
// median ratio of the pairs: q4_K 1.43x, q6_K 1.55x; from DRAM on 2 threads
// q4_K streams 0.90-0.93 of read bandwidth (0.75-0.83 before), q6_K
// 0.96-1.10 (0.74-0.87).
//
// Tried on a Sapphire Rapids VM and not kept, to save the next attempt the
// time:
//   - an earlier two-int8-term kernel for every m, 16 multiply-class
//     instructions per super-block: 14.7-14.9 against 14.1-14.5 GB/s. The
//     vpshufb controls of the m = 1 kernel must be constants: built per row
//     (256 byte stores for 8 super-blocks at k = 2048) it ran 0.6-0.8x; and
//     its scales must reach the vector unit as one 64-bit move (with the
//     compiler's dword inserts, 8 shuffles a super-block, it was 1.17x
//     instead of 1.43x the 16-bit kernel). A fresh
//     zeroed register (xor idiom) per vpdpbusd instead of copies of one
//     zero: no change.
//   - m = 1 on the AMX-INT8 tiles (tdpbusd, nibbles spread to a u8 A tile,
//     x's two terms in per-sub-block B columns): the spreading, the scales
//     applied per row to the 16 int32 of C and the tile ops run in turn cost
//     more than the multiplies saved; 9-10 GB/s.
//   - two sums per row (shorter chain), the scales broadcast from memory as
//     dwords instead of vpshufb, the high nibble by gf2p8affineqb: no gain.
// One int8 x (llama.cpp's q8_K) would halve the multiplies, at the accuracy
// cost given above.
#include <math.h>
#include <string.h>

#include "base/dtype.h"
#include "ops/cpu/cpu_impl.h"

typedef rg__mm_job_t job_t;

enum { XQ_MAX = 32767, MAX_MR = 8 };

#if RG_X86

int rg__cpu_has_vnni(void) {
  static _Atomic int has = -1;  // computed once; racing threads store the same
  int h = atomic_load_explicit(&has, memory_order_relaxed);
  if (h < 0) {
    __builtin_cpu_init();
    h = __builtin_cpu_supports("avx512vnni") ? 1 : 0;
    atomic_store_explicit(&has, h, memory_order_relaxed);
  }
  return h;
}

// Row i of x, k values (a multiple of 32), into the (ceil(k / 256), mp)
// layout of rg__prepare_x16: super-block b of the row goes to xq + (b mp +
// i) 256 (int16), its scale to xd[b mp + i] and its 8 group sums of 32, then
// 8 zeros (so the kernel applies them with one 16-lane FMA), to xs + (b mp +
// i) 16.
__attribute__((target(T_AVX512))) static void prepare_row(const float *x, int64_t k, int64_t mp,
                                                          int64_t i, int16_t *xq, float *xd,
                                                          float *xs) {
  const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  float tail[256];
  for (int64_t b = 0; b < (k + 255) / 256; b++) {
    const float *p = x + 256 * b;
    if (k - 256 * b < 256) {
      // q8_0 rows end on any multiple of 32: the last block is padded with
      // zeros, which no weight reads.
      memset(tail, 0, sizeof tail);
      memcpy(tail, p, (size_t)(k - 256 * b) * sizeof(float));
      p = tail;
    }
    const int64_t at = b * mp + i;
    __m512 amax = _mm512_setzero_ps();
    float sums[16] = {0};
    for (int g = 0; g < 8; g++) {
      __m512 a = _mm512_loadu_ps(p + 32 * g), c = _mm512_loadu_ps(p + 32 * g + 16);
      amax = _mm512_max_ps(amax, _mm512_max_ps(_mm512_and_ps(a, sign), _mm512_and_ps(c, sign)));
      sums[g] = _mm512_reduce_add_ps(_mm512_add_ps(a, c));
    }
    float am = _mm512_reduce_max_ps(amax);
    float total = 0;
    for (int g = 0; g < 8; g++) total += sums[g];
    memcpy(xs + 16 * at, sums, sizeof sums);
    int16_t *q = xq + 256 * at;
    if (!isfinite(total) || !(am > 0)) {
      // An inf or NaN in x (max ignores NaN) must reach y as it would with
      // exact arithmetic, not vanish into an int16; an all-zero block
      // contributes nothing.
      xd[at] = isfinite(total) ? 0.0f : NAN;
      memset(q, 0, 256 * sizeof *q);
      continue;
    }
    // Tiny blocks are scaled up by a power of two first (exact), so that
    // 32767 / amax stays finite.
    const float e = am < 0x1p-60f ? 0x1p64f : 1.0f;
    const float inv = (float)XQ_MAX / (am * e);
    xd[at] = am * e / (float)XQ_MAX / e;
    const __m512 ve = _mm512_set1_ps(e), vi = _mm512_set1_ps(inv);
    for (int v = 0; v < 16; v++) {
      // Rounded to nearest even (the default MXCSR mode), saturated to int16.
      __m512i qi =
          _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(p + 16 * v), ve), vi));
      _mm256_storeu_si256((__m256i *)(q + 16 * v), _mm512_cvtsepi32_epi16(qi));
    }
  }
}

// Register blocks of rows of x: 1, 2, 4 or 8 (= MAX_MR).
static int block_rows(int64_t mv) {
  return mv <= 2 ? (int)mv : mv <= 4 ? 4 : MAX_MR;
}

int64_t rg__x16_rows(int64_t m) {
  return m / MAX_MR * MAX_MR + (m % MAX_MR ? block_rows(m % MAX_MR) : 0);
}

void rg__prepare_x16(const float *x, int64_t m, int64_t k, int16_t *xq, float *xd, float *xs) {
  const int64_t nb = (k + 255) / 256, mp = rg__x16_rows(m);
  for (int64_t i = 0; i < m; i++) prepare_row(x + i * k, k, mp, i, xq, xd, xs);
  // The padding rows the last register block computes and drops: zeros.
  for (int64_t b = 0; b < nb; b++)
    for (int64_t i = m; i < mp; i++) {
      memset(xq + 256 * (b * mp + i), 0, 256 * sizeof *xq);
      xd[b * mp + i] = 0;
      memset(xs + 16 * (b * mp + i), 0, 16 * sizeof *xs);
    }
}

// Σ of the 8 products W[s] · x (x at xq, 256 int16) into one int32 vector;
// with few rows of x, two chains, so that they do not wait on vpdpwssd's
// latency.
INLINE __attribute__((target(T_VNNI))) __m512i dot8(const __m512i W[8], const int16_t *xq,
                                                    const int chains) {
  __m512i a = _mm512_setzero_si512(), c = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int s = 0; s < 8; s += 2) {
    a = _mm512_dpwssd_epi32(a, W[s], _mm512_loadu_si512(xq + 32 * s));
    if (chains == 2)
      c = _mm512_dpwssd_epi32(c, W[s + 1], _mm512_loadu_si512(xq + 32 * s + 32));
    else
      a = _mm512_dpwssd_epi32(a, W[s + 1], _mm512_loadu_si512(xq + 32 * s + 32));
  }
  return chains == 2 ? _mm512_add_epi32(a, c) : a;
}

// One weight row against MR rows of x from i0 (rows past m are the zero
// padding of the layout and are not stored), prefetching the weights ahead
// when asked. Row i of super-block b is 256 int16 on from row i0's: one
// pointer serves all MR rows.
INLINE __attribute__((target(T_VNNI))) void kq_rows(const job_t *j, rg_dtype_t type, int64_t r,
                                                    int64_t i0, const int MR, int prefetch) {
  const int64_t k = j->k, nb = k / 256, mp = j->mp;
  const uint8_t *row = j->w + (size_t)r * j->row_bytes;
  __m512 acc[MAX_MR];
  for (int i = 0; i < MR; i++) acc[i] = _mm512_setzero_ps();
  // The memory this thread reads next, into L2 (see RG__PF_L2_AHEAD): one
  // prefetch per line, issued by the first register block of a pass only.
  const size_t bb = type == RG_Q4_K ? 144 : 210, pf = RG__PF_L2_AHEAD;
  const __m512i low4 = _mm512_set1_epi16(0xF);
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *blk = row + (size_t)b * bb;
    if (prefetch)
      for (size_t o = 0; o < bb; o += 64) RG__PREFETCH_L2(blk + pf + o);
    __m512i W[8];
    float d;
    __m512 dmn = _mm512_setzero_ps();  // q4_K: dmin * m per sub-block, lanes 0-7
    uint16_t hd;
    if (type == RG_Q4_K) {
      uint16_t hm;
      memcpy(&hd, blk, 2);
      memcpy(&hm, blk + 2, 2);
      d = _cvtsh_ss(hd);
      uint32_t sm[4];
      rg__q4_K_unpack_scales(blk + 4, sm);
      // Scales as int16, all 8 in each 128-bit lane, so that vpshufb
      // broadcasts sub-block s's (bytes 2s, 2s + 1) to all 32 lanes; mins as
      // floats.
      const __m512i sc =
          _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sm)));
      dmn = _mm512_mul_ps(
          _mm512_set1_ps(_cvtsh_ss(hm)),
          _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sm + 2)))));
      const uint8_t *q = blk + 16;
#pragma GCC unroll 4
      for (int p = 0; p < 4; p++) {
        __m512i raw = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(q + 32 * p)));
        __m512i s0 = _mm512_shuffle_epi8(sc, _mm512_set1_epi16((short)(0x0100 + 0x0202 * 2 * p)));
        __m512i s1 =
            _mm512_shuffle_epi8(sc, _mm512_set1_epi16((short)(0x0100 + 0x0202 * (2 * p + 1))));
        W[2 * p] = _mm512_mullo_epi16(_mm512_and_si512(raw, low4), s0);
        W[2 * p + 1] = _mm512_mullo_epi16(_mm512_srli_epi16(raw, 4), s1);
      }
    } else {
      memcpy(&hd, blk + 208, 2);
      d = _cvtsh_ss(hd);
      // The 16 scales as int16 in the low half; vector u of half h takes
      // scale 8h + 2u in lanes 0-15 and 8h + 2u + 1 in lanes 16-31.
      const __m512i sc = _mm512_castsi256_si512(
          _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192))));
      const __m512i m30 = _mm512_set1_epi16(0x30), off = _mm512_set1_epi16(32);
#pragma GCC unroll 2
      for (int h = 0; h < 2; h++) {
        const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
        __m512i a = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)ql));
        __m512i c = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(ql + 32)));
        __m512i hh = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)qh));
        __m512i v[4];
        v[0] = _mm512_or_si512(_mm512_and_si512(a, low4),
                               _mm512_and_si512(_mm512_slli_epi16(hh, 4), m30));
        v[1] = _mm512_or_si512(_mm512_and_si512(c, low4),
                               _mm512_and_si512(_mm512_slli_epi16(hh, 2), m30));
        v[2] = _mm512_or_si512(_mm512_srli_epi16(a, 4), _mm512_and_si512(hh, m30));
        v[3] = _mm512_or_si512(_mm512_srli_epi16(c, 4),
                               _mm512_and_si512(_mm512_srli_epi16(hh, 2), m30));
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
          const short s = (short)(8 * h + 2 * u);
          __m512i idx = _mm512_mask_blend_epi16((__mmask32)0xffff0000u, _mm512_set1_epi16(s),
                                                _mm512_set1_epi16((short)(s + 1)));
          W[4 * h + u] =
              _mm512_mullo_epi16(_mm512_sub_epi16(v[u], off), _mm512_permutexvar_epi16(idx, sc));
        }
      }
    }
    const int16_t *xq = j->xq + 256 * (b * mp + i0);
    const float *xd = j->xd + b * mp + i0, *xs = j->xsum + 16 * (b * mp + i0);
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
      __m512i s = dot8(W, xq + 256 * i, MR <= 2 ? 2 : 1);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(d * xd[i]), acc[i]);
      if (type == RG_Q4_K) acc[i] = _mm512_fnmadd_ps(dmn, _mm512_loadu_ps(xs + 16 * i), acc[i]);
    }
  }
  const int mv = j->m - i0 < MR ? (int)(j->m - i0) : MR;
  for (int i = 0; i < mv; i++)
    j->y[(i0 + i) * j->n + r] = _mm512_reduce_add_ps(acc[i]) + (j->bias ? j->bias[r] : 0.0f);
}

#define KQ_TYPE(NAME, TYPE)                                                                       \
  __attribute__((target(T_VNNI))) static void NAME(const job_t *j, int64_t r, int64_t i0, int mr, \
                                                   int pf) {                                      \
    switch (mr) {                                                                                 \
      case 1:                                                                                     \
        kq_rows(j, TYPE, r, i0, 1, pf);                                                           \
        break;                                                                                    \
      case 2:                                                                                     \
        kq_rows(j, TYPE, r, i0, 2, pf);                                                           \
        break;                                                                                    \
      case 4:                                                                                     \
        kq_rows(j, TYPE, r, i0, 4, pf);                                                           \
        break;                                                                                    \
      default:                                                                                    \
        kq_rows(j, TYPE, r, i0, MAX_MR, pf);                                                      \
    }                                                                                             \
  }
KQ_TYPE(q4_K_rows, RG_Q4_K)
KQ_TYPE(q6_K_rows, RG_Q6_K)

// Rows of x in passes whose int16 x (512 bytes per row and 256 values)
// stays in L1 beside the weights: each weight row is dotted with every row
// of x in play, so x must not come from L2 once per weight row. Passes of
// j->m_chunk rows (sized for L2 with f32 x) had let m = 16 at k = 2048 read
// 64 KiB of x from L2 per weight row: q4_K fell from 311 GFLOP/s at m = 8
// to 168 at m = 16, and a q4_K_M model's batch-16 decode ran 1.3x its batch
// 1. The weight rows go in groups that every pass reads again from L2,
// and the first pass over a group prefetches them from memory.
enum { KQ_X_L1 = 24 << 10, KQ_GROUP = 64 };
void rg__gemv_kquant_vnni(const job_t *j, int64_t r0, int64_t r1) {
  void (*rows)(const job_t *, int64_t, int64_t, int, int) =
      j->type == RG_Q4_K ? q4_K_rows : q6_K_rows;
  int64_t chunk = (int64_t)KQ_X_L1 / (j->k * 2) / MAX_MR * MAX_MR;
  if (chunk < MAX_MR) chunk = MAX_MR;
  for (int64_t g0 = r0; g0 < r1; g0 += KQ_GROUP) {
    const int64_t g1 = r1 - g0 < KQ_GROUP ? r1 : g0 + KQ_GROUP;
    for (int64_t c0 = 0; c0 < j->m; c0 += chunk) {
      const int64_t c1 = j->m - c0 < chunk ? j->m : c0 + chunk;
      for (int64_t r = g0; r < g1; r++)
        for (int64_t i0 = c0; i0 < c1; i0 += MAX_MR)
          rows(j, r, i0, block_rows(j->m - i0 < MAX_MR ? j->m - i0 : MAX_MR), c0 == 0 && i0 == c0);
    }
  }
}

// ---- m = 1: x as two int8 terms on vpdpbusd ------------------------------------

// x at m = 1 for the vpdpbusd kernels: each int16 xq split exactly into xq =
// 256 h + l, h = xq >> 8 (signed, -128..127) and l = xq & 255 (unsigned),
// per super-block 256 bytes of h then 256 of l, the groups of 32 in the order
// the weight type's vectors hold them, so that a 64-byte load of x meets a
// 64-byte vector of quants; then -Σh per 16 values (|Σh| <= 2048), each
// twice, as int16, for q6_K's offset.
__attribute__((target(T_AVX512))) void rg__prepare_x8(const int16_t *xq, int64_t nb,
                                                      rg_dtype_t type, int8_t *x8) {
  // q4_K's nibbles: a 64-byte load holds groups g and g + 2 (low nibbles of
  // two 32-byte runs) or g + 1 and g + 3 (high nibbles).
  static const int q4[8] = {0, 2, 1, 3, 4, 6, 5, 7}, id[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  const int *order = type == RG_Q4_K ? q4 : id;
  const __m512i lo8 = _mm512_set1_epi16(0xff);
  for (int64_t b = 0; b < nb; b++) {
    int8_t *o = x8 + RG__X8_BYTES * b;
    int16_t sums[32];
    for (int s = 0; s < 8; s++) {
      __m512i v = _mm512_loadu_si512(xq + 256 * b + 32 * order[s]);
      __m512i h = _mm512_srai_epi16(v, 8);
      _mm256_storeu_si256((__m256i *)(o + 32 * s), _mm512_cvtepi16_epi8(h));
      _mm256_storeu_si256((__m256i *)(o + 256 + 32 * s),
                          _mm512_cvtepi16_epi8(_mm512_and_si512(v, lo8)));
    }
    // In natural order, for q6_K (q4_K does not read them).
    for (int g = 0; g < 16; g++) {
      int sum = 0;
      for (int e = 0; e < 16; e++) sum += xq[256 * b + 16 * g + e] >> 8;
      sums[2 * g] = sums[2 * g + 1] = (int16_t)-sum;
    }
    memcpy(o + 512, sums, sizeof sums);
  }
}

// One q4_K weight row against one row of x split as above. Per 64 quants
// (the low or high nibbles of 64 bytes, two sub-blocks of 32, used as
// stored, unsigned): h = vpdpbusd(quants, xh) and l = vpdpbusd(xl, quants),
// each lane 4 products of one sub-block; vpackssdw packs h and l into words
// (exact: |h| <= 4 * 15 * 128 = 7680, l <= 4 * 15 * 255 = 15300) and one
// vpdpwssd multiplies them by 256 sc and sc, the sub-block's scale, into the
// super-block's int32 sum: a lane takes 4 such vpdpwssd of 2 products of at
// most 7680 * 16128, < 2^30. Per super-block: 8 vpdpbusd, 4 vpackssdw, 4
// vpdpwssd, 4 vpshufb for the scale words and 2 shifts, against the 16-bit
// kernel's 8 vpdpwssd, 8 vpmullw, 8 vpshufb, 4 widenings and 4 shifts.
__attribute__((target(T_VNNI))) static void q4_K_row_x8(const job_t *j, int64_t r) {
  const int64_t nb = j->k / 256;
  const uint8_t *row = j->w + (size_t)r * j->row_bytes;
  const size_t pf = RG__PF_L2_AHEAD;
  const __m512i low4 = _mm512_set1_epi8(0xF);
  // vpshufb controls giving, in 128-bit lane c of the packed words of vector
  // v, 256 sc (bytes 0, sc) for the 4 words of h and sc (sc, 0) for the 4 of
  // l, sc that of v's first sub-block in lanes 0-1 and its second in 2-3.
  // The scales are broadcast as 8 bytes into each 64-bit half.
  static const uint8_t ctl_bytes[4][64] __attribute__((aligned(64))) = {
#define H(s) 0x80, s, 0x80, s, 0x80, s, 0x80, s
#define L(s) s, 0x80, s, 0x80, s, 0x80, s, 0x80
#define V(a, b) {H(a), L(a), H(a), L(a), H(b), L(b), H(b), L(b)}
      V(0, 2), V(1, 3), V(4, 6), V(5, 7)
#undef V
#undef L
#undef H
  };
  const __m512i ctl[4] = {_mm512_load_si512(ctl_bytes[0]), _mm512_load_si512(ctl_bytes[1]),
                          _mm512_load_si512(ctl_bytes[2]), _mm512_load_si512(ctl_bytes[3])};
  __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *blk = row + (size_t)b * 144;
    for (size_t o = 0; o < 144; o += 64) RG__PREFETCH_L2(blk + pf + o);
    // d and dmin converted together from memory; the scales and mins as 8
    // bytes each in a general register, one broadcast or move each into
    // the vector unit (inserting them dword by dword had cost 8 shuffles).
    const __m128 dm = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)blk));
    uint32_t sm[4];
    rg__q4_K_unpack_scales(blk + 4, sm);
    const uint64_t sc8 = sm[0] | (uint64_t)sm[1] << 32, mn8 = sm[2] | (uint64_t)sm[3] << 32;
    const __m512i scb = _mm512_set1_epi64((long long)sc8);
    const __m512 dmn =
        _mm512_mul_ps(_mm512_broadcastss_ps(_mm_movehdup_ps(dm)),
                      _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn8))));
    const __m512i r0 = _mm512_loadu_si512(blk + 16), r1 = _mm512_loadu_si512(blk + 80);
    const __m512i W[4] = {
        _mm512_and_si512(r0, low4), _mm512_and_si512(_mm512_srli_epi16(r0, 4), low4),
        _mm512_and_si512(r1, low4), _mm512_and_si512(_mm512_srli_epi16(r1, 4), low4)};
    const int8_t *xh = j->x8 + RG__X8_BYTES * b, *xl = xh + 256;
    __m512i s = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int v = 0; v < 4; v++) {
      __m512i h =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), W[v], _mm512_loadu_si512(xh + 64 * v));
      __m512i l =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(xl + 64 * v), W[v]);
      s = _mm512_dpwssd_epi32(s, _mm512_packs_epi32(h, l), _mm512_shuffle_epi8(scb, ctl[v]));
    }
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
                          _mm512_broadcastss_ps(_mm_mul_ss(dm, _mm_load_ss(j->xd + b))), acc);
    accm = _mm512_fmadd_ps(dmn, _mm512_loadu_ps(j->xsum + 16 * b), accm);
  }
  j->y[r] = _mm512_reduce_add_ps(_mm512_sub_ps(acc, accm)) + (j->bias ? j->bias[r] : 0.0f);
}

// One q6_K weight row against one row of x split as above. A half of the
// super-block is 64 bytes of low 4 bits and 32 of high 2 bits: its two
// vectors of 64 quants q (0..63, the weights in order; a 128-bit lane is
// one sub-block of 16) are the nibbles with the 2 bits put at bits 4-5
// (variable word shifts of the 32 bytes broadcast to both halves, merged by
// vpternlogd). h = vpdpbusd(q, xh) (|h| <= 4 * 63 * 128 = 32256) and l =
// vpdpbusd(xl, q - 32) (|l| <= 4 * 32 * 255 = 32640) fit words; two vectors'
// h (and l) are packed together and multiplied by their sub-blocks' scales
// in two int32 sums, sh and sl, by vpdpwssd. The -32 of the h part is
// -32 Σ sc Σh, one more vpdpwssd from the sums of x's high bytes. Every lane
// stays below 2^25; w.x = d dx (256 sh + sl). Per super-block: 8 vpdpbusd,
// 5 vpdpwssd, 4 vpackssdw, 3 vpermw and 18 to unpack, against the 16-bit
// kernel's 8 vpdpwssd, 8 vpmullw, 8 vpermw and ~40 to unpack.
__attribute__((target(T_VNNI))) static void q6_K_row_x8(const job_t *j, int64_t r) {
  const int64_t nb = j->k / 256;
  const uint8_t *row = j->w + (size_t)r * j->row_bytes;
  const size_t pf = RG__PF_L2_AHEAD;
  const __m512i low4 = _mm512_set1_epi8(0xF), b30 = _mm512_set1_epi8(0x30),
                m32 = _mm512_set1_epi8(32);
  // Word shifts putting qh's bits 0-1 / 2-3 (low vector) and 4-5 / 6-7 (high
  // vector) at bits 4-5 for the first / second 32 quants.
  const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1),
                shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  // vpermw indices: packed words of vectors (0, 1) take, in 128-bit lane c,
  // the scales of sub-blocks c (4 words) and 4 + c (4 words); (2, 3) 8 + c
  // and 12 + c; dup: each scale twice, for the offset's pairs.
  static const int16_t ix[3][32] __attribute__((aligned(64))) = {
#define P(a, b) a, a, a, a, b, b, b, b
      {P(0, 4), P(1, 5), P(2, 6), P(3, 7)},
      {P(8, 12), P(9, 13), P(10, 14), P(11, 15)},
#undef P
      {0, 0, 1, 1, 2,  2,  3,  3,  4,  4,  5,  5,  6,  6,  7,  7,
       8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15}};
  const __m512i i01 = _mm512_load_si512(ix[0]), i23 = _mm512_load_si512(ix[1]),
                idup = _mm512_load_si512(ix[2]);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *blk = row + (size_t)b * 210;
    for (size_t o = 0; o < 210; o += 64) RG__PREFETCH_L2(blk + pf + o);
    uint16_t hd;
    memcpy(&hd, blk + 208, 2);
    const __m512i sc =
        _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192))));
    const int8_t *xh = j->x8 + RG__X8_BYTES * b, *xl = xh + 256;
    __m512i H[4], L[4];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
      const __m512i ql = _mm512_loadu_si512(blk + 64 * h),
                    qh = _mm512_broadcast_i64x4(
                        _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
      // c ? b : a, c = 0x30: bits 4-5 from the shifted qh, the rest from the
      // nibble (whose bits 4-7 are clear).
      const __m512i q0 = _mm512_ternarylogic_epi32(_mm512_and_si512(ql, low4),
                                                   _mm512_sllv_epi16(qh, shl), b30, 0xD8),
                    q1 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                                   _mm512_srlv_epi16(qh, shr), b30, 0xD8);
      H[2 * h] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q0, _mm512_loadu_si512(xh + 128 * h));
      H[2 * h + 1] =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), q1, _mm512_loadu_si512(xh + 128 * h + 64));
      L[2 * h] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(xl + 128 * h),
                                     _mm512_sub_epi8(q0, m32));
      L[2 * h + 1] = _mm512_dpbusd_epi32(
          _mm512_setzero_si512(), _mm512_loadu_si512(xl + 128 * h + 64), _mm512_sub_epi8(q1, m32));
    }
    const __m512i s01 = _mm512_permutexvar_epi16(i01, sc), s23 = _mm512_permutexvar_epi16(i23, sc);
    __m512i sh = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_packs_epi32(H[0], H[1]), s01);
    sh = _mm512_dpwssd_epi32(sh, _mm512_packs_epi32(H[2], H[3]), s23);
    // -32 sc Σh = (-Σh) (16 sc) twice; |16 sc| <= 2048.
    sh = _mm512_dpwssd_epi32(sh, _mm512_loadu_si512(xh + 512),
                             _mm512_slli_epi16(_mm512_permutexvar_epi16(idup, sc), 4));
    __m512i sl = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_packs_epi32(L[0], L[1]), s01);
    sl = _mm512_dpwssd_epi32(sl, _mm512_packs_epi32(L[2], L[3]), s23);
    const __m512 dd = _mm512_set1_ps(_cvtsh_ss(hd) * j->xd[b]);
    acc = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(sh), _mm512_set1_ps(256.0f), _mm512_cvtepi32_ps(sl)), dd,
        acc);
  }
  j->y[r] = _mm512_reduce_add_ps(acc) + (j->bias ? j->bias[r] : 0.0f);
}

void rg__gemv_kquant_x8(const job_t *j, int64_t r0, int64_t r1) {
  if (j->type == RG_Q4_K)
    for (int64_t r = r0; r < r1; r++) q4_K_row_x8(j, r);
  else
    for (int64_t r = r0; r < r1; r++) q6_K_row_x8(j, r);
}

// ---- q8_0 -----------------------------------------------------------------------

// q8_0 with x in the same int16 layout, for one or two rows of x (from 3
// the 4 x 4 FMA tiles of matmul.c, which widen each block once for 4 rows,
// are faster). Per 32 weights: one widening, one vpdpwssd, one conversion
// and one FMA with the product of the block's and x's scales, against the
// f32 kernel's two widenings, two conversions, a multiply, an FMA and a
// vector scale. One core, n = 512, k = 2048 from L2: 43-44 against 59-60
// us at m = 1 (the f32 kernel's 20 GB/s a core from L2 was too close to
// the ~15 a core's share of DRAM bandwidth needs for it to keep up).
__attribute__((target(T_VNNI))) void rg__gemv_q8_0_vnni(const job_t *j, int64_t r0, int64_t r1) {
  const int64_t nb = j->k / 32, mp = j->mp;
  // Into L2 (see RG__PF_L2_AHEAD), each line of the row once.
  const size_t pf = RG__PF_L2_AHEAD;
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *row = j->w + (size_t)r * j->row_bytes;
    size_t line = 0;  // the next line of the row to prefetch (with x's first row)
    for (int64_t i = 0; i < j->m; i++) {
      // Four sums in turn, so that the FMAs do not wait on each other.
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                       _mm512_setzero_ps()};
      for (int64_t s = 0; s < (nb + 7) / 8; s++) {
        const int16_t *xq = j->xq + 256 * (s * mp + i);
        const float dx = j->xd[s * mp + i];
        const int64_t be = nb - 8 * s < 8 ? nb - 8 * s : 8;
        const uint8_t *blk0 = row + (size_t)(8 * s) * 34;
        // The 8 blocks' scales times dx, gathered and converted together and
        // kept in memory, so that each FMA broadcasts its own from there: a
        // conversion and broadcast per block had kept the shuffle port busy
        // for 4 of the 5 cycles a block took.
        const __m256i at = _mm256_setr_epi32(0, 34, 68, 102, 136, 170, 204, 238);
        __m256i hw = _mm256_mmask_i32gather_epi32(
            _mm256_setzero_si256(), (__mmask8)((1u << be) - 1), at, (const int *)blk0, 1);
        float sc[8] __attribute__((aligned(32)));
        _mm256_store_ps(
            sc, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_cvtepi32_epi16(hw)), _mm256_set1_ps(dx)));
#pragma GCC unroll 8
        for (int64_t u = 0; u < be; u++) {
          const uint8_t *blk = blk0 + 34 * u;
          size_t pl;
          if (i == 0 && rg__q8_line_due(&line, (size_t)(8 * s + u + 1) * 34, &pl))
            RG__PREFETCH_L2(row + pl + pf);
          __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(blk + 2)));
          __m512i dot =
              _mm512_dpwssd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(xq + 32 * u));
          acc[u & 3] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(sc[u]), acc[u & 3]);
        }
      }
      __m512 t = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
      j->y[i * j->n + r] = _mm512_reduce_add_ps(t) + (j->bias ? j->bias[r] : 0.0f);
    }
  }
}

#else  // !RG_X86

int rg__cpu_has_vnni(void) {
  return 0;
}
int64_t rg__x16_rows(int64_t m) {
  return m;
}
void rg__prepare_x16(const float *x, int64_t m, int64_t k, int16_t *xq, float *xd, float *xs) {
  (void)x, (void)m, (void)k, (void)xq, (void)xd, (void)xs;
}
void rg__gemv_kquant_vnni(const job_t *j, int64_t r0, int64_t r1) {
  (void)j, (void)r0, (void)r1;
}
void rg__gemv_q8_0_vnni(const job_t *j, int64_t r0, int64_t r1) {
  (void)j, (void)r0, (void)r1;
}
void rg__prepare_x8(const int16_t *xq, int64_t nb, rg_dtype_t type, int8_t *x8) {
  (void)xq, (void)nb, (void)type, (void)x8;
}
void rg__gemv_kquant_x8(const job_t *j, int64_t r0, int64_t r1) {
  (void)j, (void)r0, (void)r1;
}

#endif  // RG_X86
