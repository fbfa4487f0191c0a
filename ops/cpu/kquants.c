// GGUF k-quants on the CPU: q4_K and q6_K rows to f32 (the vectorised
// versions of base/dtype.c's references, same bits) and their GEMV kernels.
//
// Layouts (ggml's block_q4_K / block_q6_K, 256 weights each):
//   q4_K  f16 d, f16 dmin, 12 bytes of 6-bit scales and mins for 8
//         sub-blocks of 32, 128 bytes of 4-bit quants (the low nibbles of 32
//         bytes are one sub-block, their high nibbles the next):
//         w = (d*sc)*q - dmin*m.
//   q6_K  128 bytes of low 4 bits, 64 of high 2 bits, 16 int8 scales (one
//         per 16 weights), f16 d: w = (d*sc)*(q - 32).
//
// Decode streams 4.5 (q4_K) or 6.6 (q6_K) bits per weight, so the kernels
// must spend under a cycle per 6-10 weights per core to keep up with memory.
// Widening every weight to f32 and multiplying it by x, as the other GEMV
// kernels do, costs about 6 vector operations per 16 weights here, which at
// two vector ports is 2-3 times too slow. The avx512-bf16 kernel instead
// turns each quant into bf16 with one table lookup (vpermw; every quant is
// an integer below 64, exact in bf16) and lets vdpbf16ps multiply 32 of
// them by x. x goes in as two bf16 terms, hi = bf16(x) and lo = bf16(x -
// hi), so 16 of its 24 mantissa bits take part (relative error 2^-17, NMSE
// ~1e-11: "x as bf16 hi+lo" in the kernel's name, not "x in bf16"). The
// scales then apply once per sub-block, w·x = (d*sc) Σ q·x - dmin*m Σ x,
// with Σ x per 32 values of x computed once per call.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "ops/cpu/cpu_impl.h"

typedef rg__mm_job_t job_t;

#if RG_X86

// ---- Rows to f32 -----------------------------------------------------------------

// 16 quant bytes widened to 32-bit lanes.
INLINE __attribute__((target(T_AVX512))) __m512i bytes16(const uint8_t *p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

__attribute__((target(T_AVX512))) static void q4_K_block_avx512(const uint8_t *b, float *out) {
  uint16_t hd, hm;
  memcpy(&hd, b, 2);
  memcpy(&hm, b + 2, 2);
  // F16C's conversion is exact and gives rg_f16_to_f32's bits, in one
  // instruction instead of a branchy portable routine.
  const float d = _cvtsh_ss(hd), dmin = _cvtsh_ss(hm);
  const uint8_t *scales = b + 4, *q = b + 16;
  const __m512i low4 = _mm512_set1_epi32(0xF);
  for (int j = 0; j < 8; j += 2, q += 32, out += 64) {
    uint8_t sc, m;
    rg_q4_K_scale_min(j, scales, &sc, &m);
    const __m512 d1 = _mm512_set1_ps(d * sc), m1 = _mm512_set1_ps(dmin * m);
    rg_q4_K_scale_min(j + 1, scales, &sc, &m);
    const __m512 d2 = _mm512_set1_ps(d * sc), m2 = _mm512_set1_ps(dmin * m);
    for (int h = 0; h < 32; h += 16) {
      __m512i v = bytes16(q + h);
      __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, low4));
      __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
      // Product, then difference: the reference's two roundings (the
      // product is exact anyway).
      _mm512_storeu_ps(out + h, _mm512_sub_ps(_mm512_mul_ps(d1, lo), m1));
      _mm512_storeu_ps(out + 32 + h, _mm512_sub_ps(_mm512_mul_ps(d2, hi), m2));
    }
  }
}

__attribute__((target(T_AVX512))) static void q6_K_block_avx512(const uint8_t *b, float *out) {
  uint16_t hd;
  memcpy(&hd, b + 208, 2);
  const float d = _cvtsh_ss(hd);
  const uint8_t *ql = b, *qh = b + 128;
  const int8_t *sc = (const int8_t *)(b + 192);
  const __m512i low4 = _mm512_set1_epi32(0xF), three = _mm512_set1_epi32(3),
                off = _mm512_set1_epi32(32);
  for (int half = 0; half < 2; half++, out += 128, ql += 64, qh += 32, sc += 8)
    for (int l = 0; l < 32; l += 16) {
      const int is = l / 16;
      __m512i a = bytes16(ql + l), c = bytes16(ql + l + 32), h = bytes16(qh + l);
      __m512i q1 = _mm512_or_si512(_mm512_and_si512(a, low4),
                                   _mm512_slli_epi32(_mm512_and_si512(h, three), 4));
      __m512i q2 =
          _mm512_or_si512(_mm512_and_si512(c, low4),
                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2), three), 4));
      __m512i q3 =
          _mm512_or_si512(_mm512_srli_epi32(a, 4),
                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 4), three), 4));
      __m512i q4 =
          _mm512_or_si512(_mm512_srli_epi32(c, 4), _mm512_slli_epi32(_mm512_srli_epi32(h, 6), 4));
      // (d*sc) first, then the quant, as the reference.
      _mm512_storeu_ps(out + l, _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[is]),
                                              _mm512_cvtepi32_ps(_mm512_sub_epi32(q1, off))));
      _mm512_storeu_ps(out + l + 32, _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[is + 2]),
                                                   _mm512_cvtepi32_ps(_mm512_sub_epi32(q2, off))));
      _mm512_storeu_ps(out + l + 64, _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[is + 4]),
                                                   _mm512_cvtepi32_ps(_mm512_sub_epi32(q3, off))));
      _mm512_storeu_ps(out + l + 96, _mm512_mul_ps(_mm512_set1_ps(d * (float)sc[is + 6]),
                                                   _mm512_cvtepi32_ps(_mm512_sub_epi32(q4, off))));
    }
}

#endif  // RG_X86

// The AVX2 level uses the reference: the k-quants' AVX2 machines (before
// AVX-512) are not ones ridge tunes for, and the reference is exact.
void rg__kquant_to_f32(rg_cpu_isa_t isa, rg_dtype_t t, const void *src, float *dst,
                       int64_t blocks) {
  const uint8_t *b = src;
#if RG_X86
  if (isa >= RG_CPU_ISA_AVX512) {
    const size_t bb = t == RG_Q4_K ? 144 : 210;
    for (int64_t i = 0; i < blocks; i++, b += bb, dst += 256)
      (t == RG_Q4_K ? q4_K_block_avx512 : q6_K_block_avx512)(b, dst);
    return;
  }
#endif
  // Cannot fail: the caller checked the type and the length.
  rg_status_free(t == RG_Q4_K ? rg_q4_K_dequantize_row_ref(b, dst, blocks * 256)
                              : rg_q6_K_dequantize_row_ref(b, dst, blocks * 256));
}

#if RG_X86

// ---- GEMV, avx512: dequantize a super-block, then FMAs -------------------------

// One weight row at a time (one stream per thread, as the 1 × 1 tiles of
// matmul.c), each super-block widened into L1 and dotted with up to 4 rows
// of x.
__attribute__((target(T_AVX512))) void rg__gemv_kquant_avx512(const job_t *j, int64_t r0,
                                                              int64_t r1) {
  const int64_t nb = j->k / 256;
  const size_t bb = (size_t)rg_dtype_block_bytes(j->type);
  const size_t pf = 2 * j->row_bytes < 2048 ? 2048 : 2 * j->row_bytes;
  float w[256] __attribute__((aligned(64)));
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *row = j->w + (size_t)r * j->row_bytes;
    for (int64_t i0 = 0; i0 < j->m; i0 += 4) {
      const int mv = j->m - i0 < 4 ? (int)(j->m - i0) : 4;
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                       _mm512_setzero_ps()};
      for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * bb;
        for (size_t o = 0; o < bb; o += 64) _mm_prefetch((const char *)blk + pf + o, _MM_HINT_T0);
        (j->type == RG_Q4_K ? q4_K_block_avx512 : q6_K_block_avx512)(blk, w);
        for (int i = 0; i < mv; i++) {
          const float *x = j->x + (i0 + i) * j->k + 256 * b;
          __m512 a = acc[i];
#pragma GCC unroll 16
          for (int v = 0; v < 16; v++)
            a = _mm512_fmadd_ps(_mm512_load_ps(w + 16 * v), _mm512_loadu_ps(x + 16 * v), a);
          acc[i] = a;
        }
      }
      for (int i = 0; i < mv; i++)
        j->y[(i0 + i) * j->n + r] = _mm512_reduce_add_ps(acc[i]) + (j->bias ? j->bias[r] : 0.0f);
    }
  }
}

// ---- GEMV, avx512-bf16: quants as bf16 through vdpbf16ps --------------------------

// x rows into (hi, lo) bf16 pairs of 32-value groups, [hi 32 | lo 32] per
// group, and the f32 sum of each group.
__attribute__((target(T_AVX512BF16))) void rg__kquant_prepare_x(const float *x, int64_t m,
                                                                int64_t k, int64_t kp,
                                                                uint16_t *xhl, float *xsum) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t g = 0; g < k / 32; g++) {
      const float *p = x + i * k + 32 * g;
      __m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + 16);
      // Rounded to nearest even by integer arithmetic, as rg_f32_to_bf16,
      // so hi + lo carries x's subnormals too.
      uint16_t h[32], l[32];
      float rest[32];
      for (int e = 0; e < 32; e++) {
        h[e] = rg_f32_to_bf16(p[e]);
        rest[e] = p[e] - rg_bf16_to_f32(h[e]);
        l[e] = rg_f32_to_bf16(rest[e]);
      }
      uint16_t *dst = xhl + (i * kp + 32 * g) * 2;
      memcpy(dst, h, sizeof h);
      memcpy(dst + 32, l, sizeof l);
      xsum[i * (kp / 32) + g] = _mm512_reduce_add_ps(_mm512_add_ps(a, b));
    }
}

// bf16 bits of the integers 0..31 (q4_K quants use 0..15) and of -32..31
// (q6_K, q - 32), for vpermw / vpermt2w.
static uint16_t bf16_ints[96];
static void bf16_ints_init(void) {
  for (int v = 0; v < 32; v++) bf16_ints[v] = rg_f32_to_bf16((float)v);
  for (int v = 0; v < 64; v++) bf16_ints[32 + v] = rg_f32_to_bf16((float)(v - 32));
}

// Σ over one weight row's q4_K super-block b of w·x for up to 4 rows of x.
// The 8 scales and mins are unpacked and multiplied by d and dmin once per
// super-block as vectors (the products are exact), the min terms go into an
// 8-lane sum against x's group sums, and each sub-block's dot product is
// scaled with one broadcast: per-sub-block scalar work had made this kernel
// several times slower than the weights' memory time.
INLINE __attribute__((target(T_AVX512BF16))) void q4_K_dot(const job_t *j, const uint8_t *blk,
                                                           int64_t b, int64_t i0, int mv,
                                                           __m512 acc[4], __m256 accm[4],
                                                           __m512i table) {
  uint16_t hd, hm;
  memcpy(&hd, blk, 2);
  memcpy(&hm, blk + 2, 2);
  const uint8_t *q = blk + 16;
  uint32_t sm[4];
  rg__q4_K_unpack_scales(blk + 4, sm);
  const __m256 dsc =
      _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(hd)),
                    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)sm))));
  const __m256 dmn = _mm256_mul_ps(
      _mm256_set1_ps(_cvtsh_ss(hm)),
      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sm + 2)))));
  float ds[8] __attribute__((aligned(32)));
  _mm256_store_ps(ds, dsc);
  const int64_t g0 = 8 * b;  // x's 32-value group of sub-block 0
  for (int i = 0; i < mv; i++)
    accm[i] =
        _mm256_fmadd_ps(dmn, _mm256_loadu_ps(j->xsum + (i0 + i) * (j->kp / 32) + g0), accm[i]);
  const __m512i low4 = _mm512_set1_epi16(0xF);
  for (int s = 0; s < 8; s += 2, q += 32) {
    __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)q));
    __m512bh lo = (__m512bh)_mm512_permutexvar_epi16(_mm512_and_si512(w, low4), table);
    __m512bh hi = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(w, 4), table);
    const __m512 d1 = _mm512_set1_ps(ds[s]), d2 = _mm512_set1_ps(ds[s + 1]);
    for (int i = 0; i < mv; i++) {
      const uint16_t *xg = j->xhl + ((i0 + i) * j->kp + 32 * (g0 + s)) * 2;
      __m512 p = _mm512_dpbf16_ps(_mm512_setzero_ps(), lo, (__m512bh)_mm512_load_si512(xg));
      p = _mm512_dpbf16_ps(p, lo, (__m512bh)_mm512_load_si512(xg + 32));
      __m512 p2 = _mm512_dpbf16_ps(_mm512_setzero_ps(), hi, (__m512bh)_mm512_load_si512(xg + 64));
      p2 = _mm512_dpbf16_ps(p2, hi, (__m512bh)_mm512_load_si512(xg + 96));
      if (mv == 1) {
        // One row of x: four sums in turn, so the multiply-adds do not wait
        // on each other (a single chain of 8 per super-block was the limit).
        acc[(s >> 1) & 1 ? 2 : 0] = _mm512_fmadd_ps(d1, p, acc[(s >> 1) & 1 ? 2 : 0]);
        acc[(s >> 1) & 1 ? 3 : 1] = _mm512_fmadd_ps(d2, p2, acc[(s >> 1) & 1 ? 3 : 1]);
      } else {
        acc[i] = _mm512_fmadd_ps(d2, p2, _mm512_fmadd_ps(d1, p, acc[i]));
      }
    }
  }
}

// The same for q6_K: four 32-weight vectors per half super-block, each with
// two scales (one per 16 weights, so per 8 lanes of vdpbf16ps's sums),
// picked with one permute from the 16 scales times d (exact products).
INLINE __attribute__((target(T_AVX512BF16))) void q6_K_dot(const job_t *j, const uint8_t *blk,
                                                           int64_t b, int64_t i0, int mv,
                                                           __m512 acc[4], __m512i tlo,
                                                           __m512i thi) {
  uint16_t hd;
  memcpy(&hd, blk + 208, 2);
  const __m512 dsv = _mm512_mul_ps(
      _mm512_set1_ps(_cvtsh_ss(hd)),
      _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 192)))));
  const __m512i low4 = _mm512_set1_epi16(0xF), three = _mm512_set1_epi16(3);
  for (int half = 0; half < 2; half++) {
    const uint8_t *ql = blk + 64 * half, *qh = blk + 128 + 32 * half;
    __m512i a = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)ql));
    __m512i c = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(ql + 32)));
    __m512i h = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)qh));
    __m512i v[4];
    v[0] = _mm512_or_si512(_mm512_and_si512(a, low4),
                           _mm512_slli_epi16(_mm512_and_si512(h, three), 4));
    v[1] = _mm512_or_si512(_mm512_and_si512(c, low4),
                           _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 2), three), 4));
    v[2] = _mm512_or_si512(_mm512_srli_epi16(a, 4),
                           _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 4), three), 4));
    v[3] = _mm512_or_si512(_mm512_srli_epi16(c, 4), _mm512_slli_epi16(_mm512_srli_epi16(h, 6), 4));
    for (int u = 0; u < 4; u++) {
      __m512bh q = (__m512bh)_mm512_permutex2var_epi16(tlo, v[u], thi);
      // Lanes 0-7 sum weights 0-15 of the vector (scale 8 half + 2u),
      // lanes 8-15 weights 16-31 (the next scale).
      const int si = 8 * half + 2 * u;
      __m512 s =
          _mm512_permutexvar_ps(_mm512_mask_blend_epi32((__mmask16)0xff00, _mm512_set1_epi32(si),
                                                        _mm512_set1_epi32(si + 1)),
                                dsv);
      const int64_t g = 8 * b + 4 * half + u;
      for (int i = 0; i < mv; i++) {
        const uint16_t *xg = j->xhl + ((i0 + i) * j->kp + 32 * g) * 2;
        __m512 p = _mm512_dpbf16_ps(_mm512_setzero_ps(), q, (__m512bh)_mm512_load_si512(xg));
        p = _mm512_dpbf16_ps(p, q, (__m512bh)_mm512_load_si512(xg + 32));
        acc[mv == 1 ? u : i] = _mm512_fmadd_ps(s, p, acc[mv == 1 ? u : i]);  // as q4_K_dot
      }
    }
  }
}

static pthread_once_t ints_once = PTHREAD_ONCE_INIT;

__attribute__((target(T_AVX512BF16))) void rg__gemv_kquant_dpbf16(const job_t *j, int64_t r0,
                                                                  int64_t r1) {
  pthread_once(&ints_once, bf16_ints_init);
  const __m512i t4 = _mm512_loadu_si512(bf16_ints), t6lo = _mm512_loadu_si512(bf16_ints + 32),
                t6hi = _mm512_loadu_si512(bf16_ints + 64);
  const int64_t nb = j->k / 256;
  const size_t bb = (size_t)rg_dtype_block_bytes(j->type);
  // Two rows ahead, one line per 64 bytes: the next memory this thread reads.
  const size_t pf = 2 * j->row_bytes < 2048 ? 2048 : 2 * j->row_bytes;
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *row = j->w + (size_t)r * j->row_bytes;
    for (int64_t i0 = 0; i0 < j->m; i0 += 4) {
      const int mv = j->m - i0 < 4 ? (int)(j->m - i0) : 4;
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                       _mm512_setzero_ps()};
      __m256 accm[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                        _mm256_setzero_ps()};
      for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + (size_t)b * bb;
        if (i0 == 0)
          for (size_t o = 0; o < bb; o += 64) _mm_prefetch((const char *)blk + pf + o, _MM_HINT_T0);
        // mv = 1 (decode) gets its own copy, with the row loop unrolled away.
        if (j->type == RG_Q4_K) {
          if (mv == 1)
            q4_K_dot(j, blk, b, i0, 1, acc, accm, t4);
          else
            q4_K_dot(j, blk, b, i0, mv, acc, accm, t4);
        } else {
          if (mv == 1)
            q6_K_dot(j, blk, b, i0, 1, acc, t6lo, t6hi);
          else
            q6_K_dot(j, blk, b, i0, mv, acc, t6lo, t6hi);
        }
      }
      if (mv == 1)
        acc[0] = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
      for (int i = 0; i < mv; i++) {
        __m128 m4 = _mm_add_ps(_mm256_castps256_ps128(accm[i]), _mm256_extractf128_ps(accm[i], 1));
        m4 = _mm_add_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_add_ss(m4, _mm_movehdup_ps(m4));
        j->y[(i0 + i) * j->n + r] =
            (_mm512_reduce_add_ps(acc[i]) - _mm_cvtss_f32(m4)) + (j->bias ? j->bias[r] : 0.0f);
      }
    }
  }
}

#else  // !RG_X86: only the scalar GEMV runs.

void rg__gemv_kquant_avx512(const job_t *j, int64_t r0, int64_t r1) {
  (void)j, (void)r0, (void)r1;
}
void rg__gemv_kquant_dpbf16(const job_t *j, int64_t r0, int64_t r1) {
  (void)j, (void)r0, (void)r1;
}
void rg__kquant_prepare_x(const float *x, int64_t m, int64_t k, int64_t kp, uint16_t *xhl,
                          float *xsum) {
  (void)x, (void)m, (void)k, (void)kp, (void)xhl, (void)xsum;
}

#endif  // RG_X86
