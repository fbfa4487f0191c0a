// Weight-type conversions (see ops/convert.h).
//
// Each row conversion has a scalar version built on the inline helpers in the
// header and vector versions compiled with function-level target attributes,
// so the build needs no global -m flags and one binary runs on any x86-64;
// rg_cpu_isa_best() picks at run time. The vector versions must give the same
// bits as the scalar ones (tests compare them over every 16-bit pattern).
#include "ops/convert.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ops/cpu/cpu_impl.h"

#if RG_X86
#include <cpuid.h>
#include <sys/syscall.h>
#endif

static const char *const isa_names[] = {
#define RG_X_(i, n) n,
    RG_CPU_ISA_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof isa_names / sizeof isa_names[0] == RG_CPU_ISA_COUNT, "isa table");

// ---- CPU detection --------------------------------------------------------

const char *rg_cpu_isa_name(rg_cpu_isa_t isa) {
  return (unsigned)isa < RG_CPU_ISA_COUNT ? isa_names[isa] : "?";
}

rg_status_t rg_cpu_isa_parse(const char *flag, const char *s, rg_cpu_isa_t *out) {
  for (int i = 0; i < RG_CPU_ISA_COUNT; i++)
    if (!strcmp(s, isa_names[i])) return *out = (rg_cpu_isa_t)i, NULL;
  char list[160] = "";
  size_t u = 0;
  for (int i = 0; i < RG_CPU_ISA_COUNT && u < sizeof list; i++)
    u += (size_t)snprintf(list + u, sizeof list - u, "%s%s", i ? (i + 1 < RG_CPU_ISA_COUNT ? ", " : " or ") : "",
                          isa_names[i]);
  return rg_status_make(RG_INVALID_ARGUMENT, "%s: expected %s, got '%s'", flag, list, s);
}

// Also names the first missing feature of the next level up, for messages.
static const char *isa_missing[RG_CPU_ISA_COUNT];

#if RG_X86
// AMX: the CPU has the tiles (CPUID.(7,0).EDX bits 24 tile, 22 bf16, 25
// int8), the OS saves their state (XCR0 bits 17-18), and Linux lets this
// process use it. Since 5.16 the tile data is off by default and a process
// asks once; the grant covers all its threads, present and future.
enum { ARCH_REQ_XCOMP_PERM_ = 0x1023, XFEATURE_XTILEDATA_ = 18 };
static char amx_why[160];

static const char *amx_missing(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 22)) ||
      !(d & (1u << 25)))
    return "AMX-TILE, AMX-BF16 and AMX-INT8 (cpuid leaf 7)";
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return "AMX state (no OSXSAVE)";
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return "AMX state saved by the OS (XCR0 bits 17-18)";
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_) != 0) {
    snprintf(amx_why, sizeof amx_why,
             "permission for AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM: %s; Linux 5.16 "
             "or later grants it)",
             strerror(errno));
    return amx_why;
  }
  return NULL;
}
#endif

static rg_cpu_isa_t detect(void) {
#if RG_X86
  __builtin_cpu_init();
  // Not every compiler's __builtin_cpu_supports knows F16C; CPUID leaf 1
  // ECX bit 29 is the same thing. (Every AVX2 CPU shipped so far has it.)
  unsigned a, b, c, d;
  int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
  const char *miss = !__builtin_cpu_supports("avx2")  ? "avx2"
                     : !__builtin_cpu_supports("fma") ? "fma"
                     : !f16c                          ? "f16c"
                                                      : NULL;
  if (miss) {
    isa_missing[RG_CPU_ISA_AVX2] = isa_missing[RG_CPU_ISA_AVX512] =
        isa_missing[RG_CPU_ISA_AVX512_BF16] = isa_missing[RG_CPU_ISA_AMX] = miss;
    return RG_CPU_ISA_SCALAR;
  }
  miss = !__builtin_cpu_supports("avx512f")    ? "avx512f"
         : !__builtin_cpu_supports("avx512bw") ? "avx512bw"
         : !__builtin_cpu_supports("avx512vl") ? "avx512vl"
         : !__builtin_cpu_supports("avx512dq") ? "avx512dq"
                                               : NULL;
  if (miss) {
    isa_missing[RG_CPU_ISA_AVX512] = isa_missing[RG_CPU_ISA_AVX512_BF16] =
        isa_missing[RG_CPU_ISA_AMX] = miss;
    return RG_CPU_ISA_AVX2;
  }
  if (!__builtin_cpu_supports("avx512bf16")) {
    isa_missing[RG_CPU_ISA_AVX512_BF16] = isa_missing[RG_CPU_ISA_AMX] = "avx512bf16";
    return RG_CPU_ISA_AVX512;
  }
  if ((miss = amx_missing())) {
    isa_missing[RG_CPU_ISA_AMX] = miss;
    return RG_CPU_ISA_AVX512_BF16;
  }
  return RG_CPU_ISA_AMX;
#else
  isa_missing[RG_CPU_ISA_AVX2] = isa_missing[RG_CPU_ISA_AVX512] =
      isa_missing[RG_CPU_ISA_AVX512_BF16] = isa_missing[RG_CPU_ISA_AMX] = "x86-64";
  return RG_CPU_ISA_SCALAR;
#endif
}

static rg_cpu_isa_t best_isa;
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static void detect_once_fn(void) {
  best_isa = detect();
}

rg_cpu_isa_t rg_cpu_isa_best(void) {
  pthread_once(&detect_once, detect_once_fn);
  return best_isa;
}

const char *rg_cpu_isa_missing(rg_cpu_isa_t level) {
  rg_cpu_isa_t best = rg_cpu_isa_best();
  if ((unsigned)level >= RG_CPU_ISA_COUNT || level <= best) return NULL;
  return isa_missing[level];
}

rg_status_t rg_cpu_isa_resolve(rg_cpu_isa_t want, rg_cpu_isa_t *out) {
  rg_cpu_isa_t best = rg_cpu_isa_best();
  *out = best;
  if ((unsigned)want >= RG_CPU_ISA_COUNT)
    return rg_status_make(RG_INVALID_ARGUMENT, "unknown instruction-set level %d", (int)want);
  if (want == RG_CPU_ISA_AUTO) return NULL;
  if (want > best)
    return rg_status_make(RG_UNAVAILABLE, "%s kernels need %s, which this CPU lacks (best: %s)",
                          isa_names[want], isa_missing[want] ? isa_missing[want] : "?",
                          isa_names[best]);
  *out = want;
  return NULL;
}

// ---- Scalar rows -----------------------------------------------------------

static void bf16_to_f32_scalar(const uint16_t *s, float *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = rg_bf16_to_f32(s[i]);
}
static void f32_to_bf16_scalar(const float *s, uint16_t *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = rg_f32_to_bf16(s[i]);
}
static void f16_to_f32_scalar(const uint16_t *s, float *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = rg_f16_to_f32(s[i]);
}
static void f32_to_f16_scalar(const float *s, uint16_t *d, int64_t n) {
  for (int64_t i = 0; i < n; i++) d[i] = rg_f32_to_f16(s[i]);
}

// A q8_0 block as stored: the scale's f16 bits, then 32 signed weights. The
// scale is read with memcpy, since blocks are 34 bytes and only 2-aligned.
static void q8_0_dequant_scalar(const uint8_t *s, float *d, int64_t n) {
  for (int64_t b = 0; b < n / 32; b++, s += 34, d += 32) {
    uint16_t h;
    memcpy(&h, s, 2);
    float scale = rg_f16_to_f32(h);
    for (int j = 0; j < 32; j++) d[j] = scale * (float)(int8_t)s[2 + j];
  }
}

#if RG_X86
// ---- AVX2 rows ------------------------------------------------------------

__attribute__((target(T_AVX2))) static void bf16_to_f32_avx2(const uint16_t *s, float *d,
                                                             int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
    _mm256_storeu_ps(d + i, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
  }
  bf16_to_f32_scalar(s + i, d + i, n - i);
}

__attribute__((target(T_AVX2))) static void f16_to_f32_avx2(const uint16_t *s, float *d,
                                                            int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
  f16_to_f32_scalar(s + i, d + i, n - i);
}

__attribute__((target(T_AVX2))) static void f32_to_f16_avx2(const float *s, uint16_t *d,
                                                            int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  f32_to_f16_scalar(s + i, d + i, n - i);
}

__attribute__((target(T_AVX2))) static void q8_0_dequant_avx2(const uint8_t *s, float *d,
                                                              int64_t n) {
  for (int64_t b = 0; b < n / 32; b++, s += 34, d += 32) {
    uint16_t h;
    memcpy(&h, s, 2);
    __m256 scale = _mm256_set1_ps(_cvtsh_ss(h));
    for (int j = 0; j < 32; j += 8) {
      __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(s + 2 + j)));
      _mm256_storeu_ps(d + j, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(q)));
    }
  }
}

// ---- AVX-512 rows -----------------------------------------------------------

__attribute__((target(T_AVX512))) static void bf16_to_f32_avx512(const uint16_t *s, float *d,
                                                                 int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, s + i));
    _mm512_mask_storeu_ps(d + i, k, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
  }
}

// Integer round-to-nearest-even, exactly as rg_f32_to_bf16. (vcvtneps2bf16
// would be one instruction but flushes subnormals to zero, which breaks the
// exact round trip the header promises.)
__attribute__((target(T_AVX512))) static void f32_to_bf16_avx512(const float *s, uint16_t *d,
                                                                 int64_t n) {
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
  const __m512i absmask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m512i b = _mm512_castps_si512(_mm512_maskz_loadu_ps(k, s + i));
    __m512i r = _mm512_add_epi32(
        b, _mm512_add_epi32(bias, _mm512_and_si512(_mm512_srli_epi32(b, 16), one)));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, absmask), inf);
    r = _mm512_mask_or_epi32(r, nan, b, _mm512_set1_epi32(0x400000));  // quiet NaN, unrounded
    _mm256_mask_storeu_epi16(d + i, k, _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
  }
}

__attribute__((target(T_AVX512))) static void f16_to_f32_avx512(const uint16_t *s, float *d,
                                                                int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(d + i, k, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, s + i)));
  }
}

__attribute__((target(T_AVX512))) static void f32_to_f16_avx512(const float *s, uint16_t *d,
                                                                int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, s + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_mask_storeu_epi16(d + i, k, h);
  }
}

__attribute__((target(T_AVX512))) static void q8_0_dequant_avx512(const uint8_t *s, float *d,
                                                                  int64_t n) {
  for (int64_t b = 0; b < n / 32; b++, s += 34, d += 32) {
    uint16_t h;
    memcpy(&h, s, 2);
    __m512 scale = _mm512_set1_ps(_cvtsh_ss(h));
    for (int j = 0; j < 32; j += 16) {
      __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(s + 2 + j)));
      _mm512_storeu_ps(d + j, _mm512_mul_ps(scale, _mm512_cvtepi32_ps(q)));
    }
  }
}
#endif  // RG_X86

// ---- Dispatch --------------------------------------------------------------

typedef void (*u16_to_f32_fn)(const uint16_t *, float *, int64_t);
typedef void (*f32_to_u16_fn)(const float *, uint16_t *, int64_t);
typedef void (*q8_to_f32_fn)(const uint8_t *, float *, int64_t);

static u16_to_f32_fn pick_bf16_to_f32(rg_cpu_isa_t isa) {
#if RG_X86
  if (isa >= RG_CPU_ISA_AVX512) return bf16_to_f32_avx512;
  if (isa >= RG_CPU_ISA_AVX2) return bf16_to_f32_avx2;
#endif
  return bf16_to_f32_scalar;
}
static f32_to_u16_fn pick_f32_to_bf16(rg_cpu_isa_t isa) {
#if RG_X86
  if (isa >= RG_CPU_ISA_AVX512) return f32_to_bf16_avx512;
#endif
  return f32_to_bf16_scalar;  // narrowing is off the hot paths; AVX2 gets no version of its own
}
static u16_to_f32_fn pick_f16_to_f32(rg_cpu_isa_t isa) {
#if RG_X86
  if (isa >= RG_CPU_ISA_AVX512) return f16_to_f32_avx512;
  if (isa >= RG_CPU_ISA_AVX2) return f16_to_f32_avx2;
#endif
  return f16_to_f32_scalar;
}
static f32_to_u16_fn pick_f32_to_f16(rg_cpu_isa_t isa) {
#if RG_X86
  if (isa >= RG_CPU_ISA_AVX512) return f32_to_f16_avx512;
  if (isa >= RG_CPU_ISA_AVX2) return f32_to_f16_avx2;
#endif
  return f32_to_f16_scalar;
}
static q8_to_f32_fn pick_q8_0_to_f32(rg_cpu_isa_t isa) {
#if RG_X86
  if (isa >= RG_CPU_ISA_AVX512) return q8_0_dequant_avx512;
  if (isa >= RG_CPU_ISA_AVX2) return q8_0_dequant_avx2;
#endif
  return q8_0_dequant_scalar;
}

void rg_bf16_to_f32_row(const uint16_t *src, float *dst, int64_t n) {
  pick_bf16_to_f32(rg_cpu_isa_best())(src, dst, n);
}
void rg_f32_to_bf16_row(const float *src, uint16_t *dst, int64_t n) {
  pick_f32_to_bf16(rg_cpu_isa_best())(src, dst, n);
}
void rg_f16_to_f32_row(const uint16_t *src, float *dst, int64_t n) {
  pick_f16_to_f32(rg_cpu_isa_best())(src, dst, n);
}
void rg_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n) {
  pick_f32_to_f16(rg_cpu_isa_best())(src, dst, n);
}

static rg_status_t check_q8_0_len(int64_t n) {
  if (n < 0 || n % 32)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "q8_0 rows must be a multiple of 32 wide (whole blocks); this one has "
                          "%lld values",
                          (long long)n);
  return NULL;
}

rg_status_t rg_q8_0_dequantize_row(const void *src, float *dst, int64_t n) {
  return rg_row_to_f32_isa(RG_CPU_ISA_AUTO, RG_Q8_0, src, dst, n);
}
rg_status_t rg_q4_K_dequantize_row(const void *src, float *dst, int64_t n) {
  return rg_row_to_f32_isa(RG_CPU_ISA_AUTO, RG_Q4_K, src, dst, n);
}
rg_status_t rg_q6_K_dequantize_row(const void *src, float *dst, int64_t n) {
  return rg_row_to_f32_isa(RG_CPU_ISA_AUTO, RG_Q6_K, src, dst, n);
}

rg_status_t rg_row_to_f32_isa(rg_cpu_isa_t want, rg_dtype_t t, const void *src, float *dst,
                              int64_t n) {
  rg_cpu_isa_t isa;
  RG_RETURN_IF_ERROR(rg_cpu_isa_resolve(want, &isa));
  if (n < 0) return rg_status_make(RG_INVALID_ARGUMENT, "negative row length %lld", (long long)n);
  switch (t) {
    case RG_F32:
      if (n) memmove(dst, src, (size_t)n * sizeof(float));
      return NULL;
    case RG_BF16:
      pick_bf16_to_f32(isa)(src, dst, n);
      return NULL;
    case RG_F16:
      pick_f16_to_f32(isa)(src, dst, n);
      return NULL;
    case RG_Q8_0:
      RG_RETURN_IF_ERROR(check_q8_0_len(n));
      pick_q8_0_to_f32(isa)(src, dst, n);
      return NULL;
    case RG_Q4_K:
    case RG_Q6_K:
      if (n % 256)
        return rg_status_make(RG_INVALID_ARGUMENT,
                              "%s rows must be a multiple of 256 wide (whole blocks); this one has "
                              "%lld values",
                              rg_dtype_name(t), (long long)n);
      rg__kquant_to_f32(isa, t, src, dst, n / 256);
      return NULL;
    default:
      return rg_status_make(RG_INVALID_ARGUMENT, "no %s <-> f32 row conversion (the CPU converts f32, bf16, f16, q8_0)",
                            rg_dtype_name(t));
  }
}

rg_status_t rg_row_from_f32_isa(rg_cpu_isa_t want, rg_dtype_t t, const float *src, void *dst,
                                int64_t n) {
  rg_cpu_isa_t isa;
  RG_RETURN_IF_ERROR(rg_cpu_isa_resolve(want, &isa));
  if (n < 0) return rg_status_make(RG_INVALID_ARGUMENT, "negative row length %lld", (long long)n);
  switch (t) {
    case RG_F32:
      if (n) memmove(dst, src, (size_t)n * sizeof(float));
      return NULL;
    case RG_BF16:
      pick_f32_to_bf16(isa)(src, dst, n);
      return NULL;
    case RG_F16:
      pick_f32_to_f16(isa)(src, dst, n);
      return NULL;
    case RG_Q8_0:
      return rg_q8_0_quantize_row(src, dst, n);
    case RG_Q4_K:
    case RG_Q6_K:
      return rg_dtype_from_f32(t, src, dst, n);  // refuses, saying why
    default:
      return rg_status_make(RG_INVALID_ARGUMENT, "no %s <-> f32 row conversion (the CPU converts f32, bf16, f16, q8_0)",
                            rg_dtype_name(t));
  }
}

rg_status_t rg_row_to_f32(rg_dtype_t t, const void *src, float *dst, int64_t n) {
  return rg_row_to_f32_isa(RG_CPU_ISA_AUTO, t, src, dst, n);
}
rg_status_t rg_row_from_f32(rg_dtype_t t, const float *src, void *dst, int64_t n) {
  return rg_row_from_f32_isa(RG_CPU_ISA_AUTO, t, src, dst, n);
}
