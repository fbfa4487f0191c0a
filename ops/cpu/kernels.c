// ops/cpu/kernels.c — instruction-set dispatch and the element-wise and
// row-wise fast kernels: RMSNorm, RoPE, softmax, SwiGLU, embedding lookup.
//
// Each kernel has a row (or span) function per level — scalar C, AVX2 and
// AVX-512 — and a driver that picks one from rg_ops_isa() and splits rows
// over the pool (embedding lookup borrows ops/convert.h's row converters at
// the same level). The AVX functions carry __attribute__((target)); nothing
// in the build sets -m flags, so the scalar functions stay runnable on any
// x86-64 (and the file builds on other architectures, scalar only).
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

#if defined(__x86_64__) || defined(__i386__)
#define RG_X86 1
#include <immintrin.h>
#define RG_T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define RG_T256 __attribute__((target("avx2,fma,f16c")))
#endif

// ---------------------------------------------------------------------------
// Names and dispatch

static const char *const moe_mode_names[] = {
#define RG_X_(c, n) n,
    RG_MOE_MODE_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof moe_mode_names / sizeof moe_mode_names[0] == RG_MOE_MODE_COUNT,
               "moe mode names");

const char *rg_moe_mode_name(rg_moe_mode_t mode) {
  return (unsigned)mode < RG_MOE_MODE_COUNT ? moe_mode_names[mode] : "?";
}

// AUTO until set; read with relaxed atomics since kernels on pool threads
// never read it (the driver picks the functions before splitting work).
static atomic_int g_isa = RG_CPU_ISA_AUTO;

rg_status_t rg_ops_set_isa(rg_cpu_isa_t want) {
  rg_cpu_isa_t isa;
  RG_RETURN_IF_ERROR(rg_cpu_isa_resolve(want, &isa));
  atomic_store_explicit(&g_isa, (int)want, memory_order_relaxed);
  return NULL;
}

// The calling thread's cap (AUTO: none pushed).
static _Thread_local rg_cpu_isa_t t_cap = RG_CPU_ISA_AUTO;

rg_cpu_isa_t rg_ops_isa(void) {
  if (t_cap != RG_CPU_ISA_AUTO) return t_cap;
  int want = atomic_load_explicit(&g_isa, memory_order_relaxed);
  return want == RG_CPU_ISA_AUTO ? rg_cpu_isa_best() : (rg_cpu_isa_t)want;
}

rg_cpu_isa_t rg_ops_isa_push(rg_cpu_isa_t cap) {
  rg_cpu_isa_t prev = t_cap, best = rg_cpu_isa_best();
  t_cap = cap == RG_CPU_ISA_AUTO || cap > best ? best : cap;
  return prev;
}

void rg_ops_isa_pop(rg_cpu_isa_t previous) {
  t_cap = previous;
}

#ifdef RG_X86
// The kernel family for the level in effect: AVX512_BF16 runs AVX512's.
typedef enum { K_SCALAR, K_AVX2, K_AVX512 } kfam_t;

static kfam_t kfam(void) {
  switch (rg_ops_isa()) {
    case RG_CPU_ISA_AVX512:
    case RG_CPU_ISA_AVX512_BF16:
    case RG_CPU_ISA_AMX:
      return K_AVX512;
    case RG_CPU_ISA_AVX2:
      return K_AVX2;
    default:
      return K_SCALAR;
  }
}
#endif

// ---------------------------------------------------------------------------
// exp, per level. The vector versions are Cephes' expf: n = round(x/ln2),
// r = x - n*ln2 in two parts, a degree-6 polynomial for e^r, times 2^n;
// about 1 ulp away from expf. -inf gives 0 and NaN stays NaN.

#ifdef RG_X86
#include "ops/cpu/simd_exp.h"

RG_T256 static inline __m256 exp256(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f), hi = _mm256_set1_ps(88.3762626647949f);
  __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ),
         over = _mm256_cmp_ps(x, _mm256_set1_ps(88.72283905f), _CMP_GT_OQ);
  __m256 xc = _mm256_min_ps(hi, _mm256_max_ps(lo, x));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  p = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  p = _mm256_blendv_ps(p, _mm256_setzero_ps(), under);
  return _mm256_blendv_ps(p, _mm256_set1_ps(INFINITY), over);
}

// Masks for the last, partial vector of a row.
RG_T512 static inline __mmask16 tail16(size_t n) {
  return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

RG_T512 static inline float hmax512(__m512 v) {
  return _mm512_reduce_max_ps(v);
}
RG_T512 static inline float hsum512(__m512 v) {
  return _mm512_reduce_add_ps(v);
}

RG_T256 static inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
RG_T256 static inline float hmax256(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

// ---------------------------------------------------------------------------
// RMSNorm

typedef void (*rmsnorm_row_fn)(const float *x, const float *w, float *y, size_t dim, float eps);

static void rmsnorm_row_scalar(const float *x, const float *w, float *y, size_t dim, float eps) {
  float s[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= dim; i += 4)
    for (int j = 0; j < 4; j++) s[j] += x[i + j] * x[i + j];
  for (; i < dim; i++) s[0] += x[i] * x[i];
  float ss = (s[0] + s[1]) + (s[2] + s[3]);
  float scale = 1.0f / sqrtf(ss / (float)dim + eps);
  for (i = 0; i < dim; i++) y[i] = x[i] * scale * w[i];
}

#ifdef RG_X86
RG_T512 static void rmsnorm_row_avx512(const float *x, const float *w, float *y, size_t dim,
                                       float eps) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
    a0 = _mm512_fmadd_ps(v0, v0, a0);
    a1 = _mm512_fmadd_ps(v1, v1, a1);
  }
  for (; i < dim; i += 16) {
    __m512 v = _mm512_maskz_loadu_ps(tail16(dim - i), x + i);
    a0 = _mm512_fmadd_ps(v, v, a0);
  }
  float scale = 1.0f / sqrtf(hsum512(_mm512_add_ps(a0, a1)) / (float)dim + eps);
  __m512 s = _mm512_set1_ps(scale);
  for (i = 0; i < dim; i += 16) {
    __mmask16 m = tail16(dim - i);
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), s);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
  }
}

RG_T256 static void rmsnorm_row_avx2(const float *x, const float *w, float *y, size_t dim,
                                     float eps) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  for (; i + 8 <= dim; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(v, v, a0);
  }
  float ss = hsum256(_mm256_add_ps(a0, a1));
  for (; i < dim; i++) ss += x[i] * x[i];
  float scale = 1.0f / sqrtf(ss / (float)dim + eps);
  __m256 s = _mm256_set1_ps(scale);
  for (i = 0; i + 8 <= dim; i += 8)
    _mm256_storeu_ps(
        y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), _mm256_loadu_ps(w + i)));
  for (; i < dim; i++) y[i] = x[i] * scale * w[i];
}
#endif

static rmsnorm_row_fn pick_rmsnorm(void) {
#ifdef RG_X86
  switch (kfam()) {
    case K_AVX512:
      return rmsnorm_row_avx512;
    case K_AVX2:
      return rmsnorm_row_avx2;
    default:
      break;
  }
#endif
  return rmsnorm_row_scalar;
}

typedef struct {
  rmsnorm_row_fn fn;
  const float *x, *w;
  float *y;
  size_t dim;
  float eps;
} rmsnorm_ctx_t;

static void rmsnorm_rows(void *vc, size_t b, size_t e, int thread) {
  const rmsnorm_ctx_t *c = vc;
  for (size_t r = b; r < e; r++) c->fn(c->x + r * c->dim, c->w, c->y + r * c->dim, c->dim, c->eps);
}

// Rows are split so that each task carries at least ~16k elements: less
// than that costs more in dispatch than it saves.
static size_t grain_rows(size_t row_elems) {
  size_t g = row_elems ? (16384 + row_elems - 1) / row_elems : 1;
  return g ? g : 1;
}

void rg_op_rmsnorm(rg_pool_t *pool, const float *x, const float *weight, float *y, size_t rows,
                   size_t dim, float eps) {
  if (!rows || !dim) return;
  rmsnorm_ctx_t c = {pick_rmsnorm(), x, weight, y, dim, eps};
  rg_pool_parallel_for(pool, rows, grain_rows(dim), rmsnorm_rows, &c);
}

// ---------------------------------------------------------------------------
// RoPE

rg_status_t rg_rope_init(rg_rope_t *rope, size_t head_dim, double theta,
                         const rg_rope_scaling_t *scaling) {
  rope->head_dim = 0;
  rope->inv_freq = NULL;
  if (head_dim == 0 || head_dim % 2)
    return rg_status_make(RG_INVALID_ARGUMENT, "rope: head_dim %zu must be even and above 0",
                          head_dim);
  if (!(theta > 1.0))
    return rg_status_make(RG_INVALID_ARGUMENT, "rope: theta %g must be above 1", theta);
  if (scaling && !(scaling->factor >= 1.0 && scaling->low_freq_factor > 0 &&
                   scaling->high_freq_factor > scaling->low_freq_factor &&
                   scaling->original_max_position_embeddings > 0))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "rope: llama3 scaling needs factor >= 1 (got %g), 0 < low_freq_factor "
                          "< high_freq_factor (got %g, %g) and original_max_position_embeddings "
                          "> 0 (got %g)",
                          scaling->factor, scaling->low_freq_factor, scaling->high_freq_factor,
                          scaling->original_max_position_embeddings);
  size_t half = head_dim / 2;
  float *f = malloc(half * sizeof *f);
  if (!f) return rg_status_make(RG_OUT_OF_MEMORY, "rope: out of memory for %zu frequencies", half);
  for (size_t i = 0; i < half; i++) {
    // HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in f32.
    float ex = (float)(2 * i) / (float)head_dim;
    float inv = 1.0f / (float)pow((double)(float)theta, (double)ex);
    if (scaling) {
      // transformers' _compute_llama3_parameters: long wavelengths are slowed
      // by `factor`, short ones kept, and the band between blended.
      double old = scaling->original_max_position_embeddings;
      double lo_wl = old / scaling->low_freq_factor, hi_wl = old / scaling->high_freq_factor;
      double wl = 2.0 * M_PI / (double)inv;
      if (wl > lo_wl) {
        inv = (float)((double)inv / scaling->factor);
      } else if (!(wl < hi_wl)) {
        double s = (old / wl - scaling->low_freq_factor) /
                   (scaling->high_freq_factor - scaling->low_freq_factor);
        inv = (float)((1.0 - s) * (double)inv / scaling->factor + s * (double)inv);
      }
    }
    f[i] = inv;
  }
  rope->head_dim = head_dim;
  rope->inv_freq = f;
  return NULL;
}

void rg_rope_deinit(rg_rope_t *rope) {
  free(rope->inv_freq);
  rope->inv_freq = NULL;
  rope->head_dim = 0;
}

// Rotates n pairs (x0[i], x1[i]) by the angles whose cos/sin are c[i], s[i].
typedef void (*rope_span_fn)(float *x0, float *x1, const float *c, const float *s, size_t n);

static void rope_span_scalar(float *x0, float *x1, const float *c, const float *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float a = x0[i], b = x1[i];
    x0[i] = a * c[i] - b * s[i];
    x1[i] = b * c[i] + a * s[i];
  }
}

#ifdef RG_X86
RG_T512 static void rope_span_avx512(float *x0, float *x1, const float *c, const float *s,
                                     size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = tail16(n - i);
    __m512 a = _mm512_maskz_loadu_ps(m, x0 + i), b = _mm512_maskz_loadu_ps(m, x1 + i);
    __m512 cv = _mm512_maskz_loadu_ps(m, c + i), sv = _mm512_maskz_loadu_ps(m, s + i);
    _mm512_mask_storeu_ps(x0 + i, m, _mm512_fmsub_ps(a, cv, _mm512_mul_ps(b, sv)));
    _mm512_mask_storeu_ps(x1 + i, m, _mm512_fmadd_ps(b, cv, _mm512_mul_ps(a, sv)));
  }
}

RG_T256 static void rope_span_avx2(float *x0, float *x1, const float *c, const float *s, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 a = _mm256_loadu_ps(x0 + i), b = _mm256_loadu_ps(x1 + i);
    __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
    _mm256_storeu_ps(x0 + i, _mm256_fmsub_ps(a, cv, _mm256_mul_ps(b, sv)));
    _mm256_storeu_ps(x1 + i, _mm256_fmadd_ps(b, cv, _mm256_mul_ps(a, sv)));
  }
  rope_span_scalar(x0 + i, x1 + i, c + i, s + i, n - i);
}
#endif

typedef struct {
  rope_span_fn fn;
  const rg_rope_t *rope;
  float *x;
  size_t n_heads;
  const int32_t *pos;
} rope_ctx_t;

// Frequencies are handled in pieces of this many, so the cos/sin table of a
// token lives on the stack whatever head_dim is.
#define ROPE_PIECE 256

static void rope_tokens(void *vc, size_t b, size_t e, int thread) {
  const rope_ctx_t *c = vc;
  size_t hd = c->rope->head_dim, half = hd / 2;
  float cs[ROPE_PIECE], sn[ROPE_PIECE];
  for (size_t t = b; t < e; t++) {
    float *xt = c->x + t * c->n_heads * hd;
    float p = (float)c->pos[t];
    for (size_t i0 = 0; i0 < half; i0 += ROPE_PIECE) {
      size_t n = half - i0 < ROPE_PIECE ? half - i0 : ROPE_PIECE;
      // The table costs one cos and sin per frequency per token; every
      // head of the token reuses it.
      for (size_t i = 0; i < n; i++) {
        double a = (double)(p * c->rope->inv_freq[i0 + i]);
        cs[i] = (float)cos(a);
        sn[i] = (float)sin(a);
      }
      for (size_t h = 0; h < c->n_heads; h++) {
        float *xh = xt + h * hd;
        c->fn(xh + i0, xh + half + i0, cs, sn, n);
      }
    }
  }
}

void rg_op_rope(rg_pool_t *pool, const rg_rope_t *rope, float *x, size_t n_tokens, size_t n_heads,
                const int32_t *positions) {
  if (!n_tokens || !n_heads || !rope->head_dim) return;
  rope_span_fn fn = rope_span_scalar;
#ifdef RG_X86
  switch (kfam()) {
    case K_AVX512:
      fn = rope_span_avx512;
      break;
    case K_AVX2:
      fn = rope_span_avx2;
      break;
    default:
      break;
  }
#endif
  rope_ctx_t c = {fn, rope, x, n_heads, positions};
  rg_pool_parallel_for(pool, n_tokens, grain_rows(n_heads * rope->head_dim), rope_tokens, &c);
}

// ---------------------------------------------------------------------------
// Softmax

typedef void (*softmax_row_fn)(float *x, size_t n);

static void softmax_row_scalar(float *x, size_t n) {
  float mx = -INFINITY;
  for (size_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  if (mx == -INFINITY) {  // every entry masked
    memset(x, 0, n * sizeof *x);
    return;
  }
  float sum = 0;
  for (size_t i = 0; i < n; i++) {
    x[i] = expf(x[i] - mx);
    sum += x[i];
  }
  float inv = 1.0f / sum;
  for (size_t i = 0; i < n; i++) x[i] *= inv;
}

#ifdef RG_X86
RG_T512 static void softmax_row_avx512(float *x, size_t n) {
  __m512 mv = _mm512_set1_ps(-INFINITY);
  for (size_t i = 0; i < n; i += 16)
    mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail16(n - i), x + i));
  float mx = hmax512(mv);
  if (mx == -INFINITY) {
    memset(x, 0, n * sizeof *x);
    return;
  }
  __m512 m = _mm512_set1_ps(mx), sum = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 k = tail16(n - i);
    __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), m));
    e = _mm512_maskz_mov_ps(k, e);
    sum = _mm512_add_ps(sum, e);
    _mm512_mask_storeu_ps(x + i, k, e);
  }
  __m512 inv = _mm512_set1_ps(1.0f / hsum512(sum));
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 k = tail16(n - i);
    _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv));
  }
}

RG_T256 static void softmax_row_avx2(float *x, size_t n) {
  __m256 mv = _mm256_set1_ps(-INFINITY);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
  float mx = hmax256(mv);
  for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
  if (mx == -INFINITY) {
    memset(x, 0, n * sizeof *x);
    return;
  }
  __m256 m = _mm256_set1_ps(mx), sv = _mm256_setzero_ps();
  for (i = 0; i + 8 <= n; i += 8) {
    __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    sv = _mm256_add_ps(sv, e);
    _mm256_storeu_ps(x + i, e);
  }
  float sum = hsum256(sv);
  for (; i < n; i++) {
    x[i] = expf(x[i] - mx);
    sum += x[i];
  }
  float inv = 1.0f / sum;
  __m256 iv = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), iv));
  for (; i < n; i++) x[i] *= inv;
}
#endif

typedef struct {
  softmax_row_fn fn;
  float *x;
  size_t n;
} softmax_ctx_t;

static void softmax_rows(void *vc, size_t b, size_t e, int thread) {
  const softmax_ctx_t *c = vc;
  for (size_t r = b; r < e; r++) c->fn(c->x + r * c->n, c->n);
}

void rg_op_softmax(rg_pool_t *pool, float *x, size_t rows, size_t n) {
  if (!rows || !n) return;
  softmax_row_fn fn = softmax_row_scalar;
#ifdef RG_X86
  switch (kfam()) {
    case K_AVX512:
      fn = softmax_row_avx512;
      break;
    case K_AVX2:
      fn = softmax_row_avx2;
      break;
    default:
      break;
  }
#endif
  softmax_ctx_t c = {fn, x, n};
  rg_pool_parallel_for(pool, rows, grain_rows(n), softmax_rows, &c);
}

// ---------------------------------------------------------------------------
// SwiGLU

typedef void (*swiglu_span_fn)(const float *g, const float *u, float *o, size_t n);

static void swiglu_span_scalar(const float *g, const float *u, float *o, size_t n) {
  for (size_t i = 0; i < n; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

#ifdef RG_X86
RG_T512 static void swiglu_span_avx512(const float *g, const float *u, float *o, size_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (size_t i = 0; i < n; i += 16) {
    __mmask16 m = tail16(n - i);
    __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
    __m512 d = _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv)));
    _mm512_mask_storeu_ps(o + i, m, _mm512_mul_ps(_mm512_div_ps(gv, d), uv));
  }
}

RG_T256 static void swiglu_span_avx2(const float *g, const float *u, float *o, size_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 gv = _mm256_loadu_ps(g + i), uv = _mm256_loadu_ps(u + i);
    __m256 d = _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), gv)));
    _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_div_ps(gv, d), uv));
  }
  swiglu_span_scalar(g + i, u + i, o + i, n - i);
}
#endif

typedef struct {
  swiglu_span_fn fn;
  const float *g, *u;
  float *o;
} swiglu_ctx_t;

static void swiglu_spans(void *vc, size_t b, size_t e, int thread) {
  const swiglu_ctx_t *c = vc;
  c->fn(c->g + b, c->u + b, c->o + b, e - b);
}

void rg_op_swiglu(rg_pool_t *pool, const float *gate, const float *up, float *out, size_t n) {
  if (!n) return;
  swiglu_span_fn fn = swiglu_span_scalar;
#ifdef RG_X86
  switch (kfam()) {
    case K_AVX512:
      fn = swiglu_span_avx512;
      break;
    case K_AVX2:
      fn = swiglu_span_avx2;
      break;
    default:
      break;
  }
#endif
  swiglu_ctx_t c = {fn, gate, up, out};
  rg_pool_parallel_for(pool, n, 16384, swiglu_spans, &c);
}

// ---------------------------------------------------------------------------
// Residual add: memory-bound; the compiler vectorises the plain loop. Its
// operands usually come from DRAM: the matmul before it streamed its weights
// through every cache. A 16 x 2048 add (batch 16) right after a 2048 x 2048
// bf16 matmul took 45-48 us on one thread, 23-25 us on two (10 and 7.6 us
// back to back, in cache), so it splits at 16k elements as swiglu does.

typedef struct {
  const float *a, *b;
  float *out;
} add_ctx_t;

static void add_span(void *ctx, size_t i0, size_t i1, int thread) {
  const add_ctx_t *c = ctx;
  for (size_t i = i0; i < i1; i++) c->out[i] = c->a[i] + c->b[i];
}

void rg_op_add(rg_pool_t *pool, const float *a, const float *b, float *out, size_t n) {
  add_ctx_t c = {a, b, out};
  if (n) rg_pool_parallel_for(pool, n, 16384, add_span, &c);
}

// ---------------------------------------------------------------------------
// Embedding lookup: a gather of rows, widened by ops/convert.h's row
// converters at the level in effect.

typedef struct {
  const char *table;
  rg_dtype_t type;
  size_t row_bytes;
  const int32_t *ids;
  size_t dim;
  float *out;
  rg_cpu_isa_t isa;
} embed_ctx_t;

static void embed_rows(void *vc, size_t b, size_t e, int thread) {
  const embed_ctx_t *c = vc;
  for (size_t i = b; i < e; i++) {
    // Cannot fail: the type, the level and the row length were checked.
    rg_status_free(rg_row_to_f32_isa(c->isa, c->type, c->table + (size_t)c->ids[i] * c->row_bytes,
                                     c->out + i * c->dim, (int64_t)c->dim));
  }
}

// The checks rg_op_embed and rg_op_embed_ref share.
static rg_status_t embed_check(rg_dtype_t type, size_t vocab, const int32_t *ids, size_t n,
                               size_t dim, size_t *row_bytes) {
  *row_bytes = 0;
  if (dim > INT64_MAX)
    return rg_status_make(RG_INVALID_ARGUMENT, "embed: dim %zu is too large", dim);
  if (dim)
    RG_RETURN_IF_ERROR(rg_status_wrap(rg_dtype_row_bytes(type, (int64_t)dim, row_bytes),
                                      "embed: %s table rows of %zu", rg_dtype_name(type), dim));
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || (size_t)ids[i] >= vocab)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "embed: token id %d at index %zu is outside the vocabulary of %zu "
                            "tokens (valid ids 0..%zu)",
                            (int)ids[i], i, vocab, vocab ? vocab - 1 : 0);
  return NULL;
}

rg_status_t rg_op_embed(rg_pool_t *pool, const void *table, rg_dtype_t type, size_t vocab,
                        const int32_t *ids, size_t n, size_t dim, float *out) {
  size_t row_bytes;
  RG_RETURN_IF_ERROR(embed_check(type, vocab, ids, n, dim, &row_bytes));
  if (!n || !dim) return NULL;
  embed_ctx_t c = {table, type, row_bytes, ids, dim, out, rg_ops_isa()};
  rg_pool_parallel_for(pool, n, grain_rows(dim), embed_rows, &c);
  return NULL;
}
