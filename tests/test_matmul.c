// Matmul and weight-conversion tests: every fast path (each instruction-set
// level × GEMV/GEMM × NULL/1-thread/2-thread pool × with/without bias)
// against rg_matmul_ref over awkward shapes, compared by normalized mean
// squared error with no NaN/inf allowed, plus exact conversion round trips,
// the q8_0 error bound and the messages for bad input.
//
// Tolerances (NMSE = sum (a-b)^2 / sum b^2), one per weight type, all 1e-7.
// Every kernel widens the weights to f32 exactly, as the reference does, so
// a fast path differs from the double-accumulating reference only by f32
// rounding of the sums: NMSE ~1e-13..1e-11 over many outputs. Shapes with a
// single output (m = n = 1) divide by one y^2 that random signs can make
// small, which pushed one such case to 3e-9; 1e-7 covers that and still
// fails any indexing bug (one wrong output among 130 × 257 gives ~6e-5, one
// dropped term of k = 4128 ~2e-4). The vdpbf16ps kernel (bf16 weights,
// avx512-bf16 level) rounds x to bf16, so it is held to the same 1e-7
// against the reference run on rounded x, and separately to its expected
// accuracy against exact x (NMSE ~1.3e-6, bound 1e-5). The k-quant kernel
// with vpdpwssd quantizes x to int16 per 256 values ("x in int16"): held to
// 1e-7 against the reference run on x quantized the same way, and to its
// expected accuracy against exact x (~1e-10) separately.
#include <stdint.h>
#include <stdlib.h>

#include "base/pool.h"
#include "ops/convert.h"
#include "ops/matmul.h"
#include "tests/test.h"

static const double tolerance[RG_DTYPE_COUNT] = {
    [RG_F32] = 1e-7,  [RG_BF16] = 1e-7, [RG_F16] = 1e-7,
    [RG_Q8_0] = 1e-7, [RG_Q4_K] = 1e-7, [RG_Q6_K] = 1e-7,
};

static uint64_t rng_next(uint64_t *s) {  // splitmix64
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static float rng_uniform(uint64_t *s) {  // [-1, 1)
  return (float)((double)(rng_next(s) >> 11) * 0x1p-52 - 1.0);
}

static double nmse(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)a[i] - (double)b[i];
    num += d * d;
    den += (double)b[i] * (double)b[i];
  }
  return den > 0 ? num / den : num;
}

static int all_finite(const float *a, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(a[i])) return 0;
  return 1;
}

// A random (n, k) weight of the given type, values in [-1, 1), stored as the
// checkpoint would (rounded or quantized from f32). The k-quants, which
// ridge only reads, are random blocks with super-block scales that keep the
// weights within about ±1. Caller frees.
static void *make_weight(rg_dtype_t type, int64_t n, int64_t k, uint64_t *seed) {
  size_t rb;
  rg_status_t s = rg_dtype_row_bytes(type, k, &rb);
  if (s) {
    rg_status_free(s);
    return NULL;
  }
  unsigned char *w = malloc(rb * (size_t)n);
  if (type == RG_Q4_K || type == RG_Q6_K) {
    if (!w) abort();
    for (size_t i = 0; i < rb * (size_t)n; i++) w[i] = (unsigned char)rng_next(seed);
    for (size_t b = 0; b < rb * (size_t)n / (size_t)rg_dtype_block_bytes(type); b++) {
      unsigned char *blk = w + b * (size_t)rg_dtype_block_bytes(type);
      float d = (0.5f + 0.5f * rng_uniform(seed)) * (type == RG_Q4_K ? 2e-3f : 1.5e-4f);
      uint16_t hd = rg_f32_to_f16(d), hm = rg_f32_to_f16(0.5f * d * 15 * 32 / 63);
      if (type == RG_Q4_K)
        memcpy(blk, &hd, 2), memcpy(blk + 2, &hm, 2);
      else
        memcpy(blk + 208, &hd, 2);
    }
    return w;
  }
  float *row = malloc((size_t)k * sizeof(float));
  if (!w || !row) abort();
  for (int64_t r = 0; r < n; r++) {
    for (int64_t p = 0; p < k; p++) row[p] = rng_uniform(seed);
    s = rg_row_from_f32_isa(RG_CPU_ISA_SCALAR, type, row, w + (size_t)r * rb, k);
    if (s) abort();
  }
  free(row);
  return w;
}

// 11: the vdpbf16ps GEMV's 6-row pass, then a partial one of 5 (16: 6, 6 and 4).
static const int64_t shape_m[] = {1, 2, 3, 7, 11, 16, 33, 130};
static const int64_t shape_k[] = {32, 64, 96, 4096 + 32, 1, 5, 17, 1000};
static const int64_t shape_k256[] = {256, 512, 1280};  // the k-quants: whole super-blocks
static const int64_t shape_n[] = {1, 3, 17, 64, 257};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

// Every (m, k, n) of the lists up to a budget of multiply-adds, so each
// value of each list meets many of the others; past it only two larger
// shapes, to keep the suite within seconds under AddressSanitizer. The
// scalar kernels, slow under the sanitizer and simpler, get a smaller budget
// that still reaches every value.
static int shape_wanted(rg_cpu_isa_t isa, int64_t m, int64_t k, int64_t n) {
  if (isa == RG_CPU_ISA_SCALAR) return m * k * n <= (1 << 16) || (k >= 256 && m * n <= 64);
  return m * k * n <= (1 << 19) || (m == 16 && k == 4128 && n == 64) ||
         (m == 130 && k == 1000 && n == 17) || (m == 130 && k == 256 && n == 17) ||
         (m == 33 && k == 1280 && n == 64);
}

typedef struct {
  rg_pool_t *pools[3];  // NULL, 1 thread, 2 threads
  float *y, *want;      // room for the largest output (y plus guards)
} fixture_t;

// The references a kernel is held to, by what its name says it computes:
// exact x; x rounded to bf16 ("x in bf16"); x and the weights rounded to
// bf16 ("x, w in bf16"). NULL where no kernel of the level computes it.
typedef struct {
  const float *exact, *x_bf16, *xw_bf16, *x_int16;
} refs_t;

static const float *ref_for(const refs_t *r, const char *kernel) {
  if (strstr(kernel, "x, w in bf16")) return r->xw_bf16;
  if (strstr(kernel, "x in bf16")) return r->x_bf16;
  if (strstr(kernel, "x in int16")) return r->x_int16;
  return r->exact;
}

// x (m, k) as the vpdpwssd kernels see it (ops/cpu/gemv_kquant.c): per
// row and 256 values (fewer at a row's end), dx = amax / 32767 and x = dx *
// round(x / dx), with the kernels' float operations, so the reference on it
// differs from them only by the rounding of sums.
static void x_as_int16(const float *x, int64_t m, int64_t k, float *out) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t b0 = 0; b0 < k; b0 += 256) {
      const int64_t len = k - b0 < 256 ? k - b0 : 256;
      const float *p = x + i * k + b0;
      float am = 0;
      for (int64_t e = 0; e < len; e++) am = fabsf(p[e]) > am ? fabsf(p[e]) : am;
      const float sc = am < 0x1p-60f ? 0x1p64f : 1.0f, inv = 32767.0f / (am * sc),
                  dx = am * sc / 32767.0f / sc;
      for (int64_t e = 0; e < len; e++)
        out[i * k + b0 + e] = am > 0 ? (float)((double)nearbyintf(p[e] * sc * inv) * dx) : 0.0f;
    }
}

// Paths a level runs: GEMV and GEMM everywhere, the tiles where AMX is.
// The automatic choice runs too where it picks a kernel that no forced
// path does (bf16 prefill on packed panels).
static int path_runs(rg_cpu_isa_t isa, const rg_wmat_t *w, int64_t m, int path) {
  if (path == RG_MATMUL_AUTO) {
    rg_matmul_opts_t o = {.isa = isa};
    const char *auto_name = rg_matmul_kernel_name_ex(w, m, &o);
    for (int q = RG_MATMUL_GEMV; q < RG_MATMUL_PATH_COUNT; q++) {
      o.path = (rg_matmul_path_t)q;
      if (path_runs(isa, w, m, q) && !strcmp(rg_matmul_kernel_name_ex(w, m, &o), auto_name))
        return 0;
    }
    return 1;
  }
  if (path != RG_MATMUL_TILES) return 1;
  return w->type != RG_F32 && rg_matmul_tiles_available(isa, NULL);
}

static const char *const pool_names[] = {"NULL", "1-thread", "2-thread"};
enum { GUARDS = 8, MAX_M = 130, MAX_N = 257, MAX_K = 4128 };

// Runs one shape through every path (and the automatic choice where it
// picks a kernel of its own), each with a NULL pool without bias, a
// 1-thread pool with bias, and a 2-thread pool with and without. ref is the
// reference for x as given; ref_r for x rounded to bf16, which the kernels
// whose name says "x in bf16" compute (NULL where none can run). Returns 0
// after reporting the first mismatch.
static int check_shape(rg_test_ctx_t *t, fixture_t *f, rg_cpu_isa_t isa, const rg_wmat_t *w,
                       const float *x, int64_t m, const float *bias, const refs_t *refs) {
  static const int combos[][2] = {{0, 0}, {1, 1}, {2, 0}, {2, 1}};
  int64_t n = w->rows;
  size_t ny = (size_t)(m * n);
  for (int path = RG_MATMUL_AUTO; path < RG_MATMUL_PATH_COUNT; path++)
    for (size_t c = 0; c < COUNT(combos) && path_runs(isa, w, m, path); c++) {
      int pi = combos[c][0], with_bias = combos[c][1];
      rg_matmul_opts_t o = {.isa = isa, .path = (rg_matmul_path_t)path};
      const char *kernel = rg_matmul_kernel_name_ex(w, m, &o);
      const float *base = ref_for(refs, kernel);
      if (!base) {
        rg_test_fail(t, __FILE__, __LINE__, "%s rounds x or w, unexpected here", kernel);
        return 0;
      }
      // The biased reference adds the bias to the f32 result once more: an
      // extra rounding of 2^-24, far inside every tolerance.
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
          f->want[i * n + j] = (float)((double)base[i * n + j] + (with_bias ? bias[j] : 0));
      for (size_t i = 0; i < ny + GUARDS; i++) f->y[i] = -12345.0f;
      rg_status_t s = rg_matmul_ex(f->pools[pi], x, m, w, with_bias ? bias : NULL, f->y, &o);
      if (s) {
        rg_test_fail(t, __FILE__, __LINE__, "%s: %s", kernel, rg_status_message(s));
        rg_status_free(s);
        return 0;
      }
      // Against the product's own size: a bias that all but cancels it
      // (0.712 + -0.713 at n = 1) left a result whose relative error says
      // nothing about the kernel's.
      double e = nmse(f->y, f->want, ny), scale = 0, size = 0;
      for (size_t i = 0; i < ny; i++)
        scale += (double)base[i] * base[i], size += (double)f->want[i] * f->want[i];
      if (scale > size && size > 0) e *= size / scale;
      int finite = all_finite(f->y, ny), guards = 1;
      for (size_t i = ny; i < ny + GUARDS; i++) guards &= f->y[i] == -12345.0f;
      if (!(e <= tolerance[w->type]) || !finite || !guards) {
        rg_test_fail(t, __FILE__, __LINE__,
                     "%s: m=%lld k=%lld n=%lld, %s pool, %s bias: nmse %.3g (tolerance %.3g)%s%s",
                     kernel, (long long)m, (long long)w->cols, (long long)n, pool_names[pi],
                     with_bias ? "with" : "without", e, tolerance[w->type],
                     finite ? "" : ", non-finite output", guards ? "" : ", wrote past y");
        return 0;
      }
    }
  return 1;
}

// Whether this CPU has the level; skips the test with the reason if not.
static int level_runs(rg_test_ctx_t *t, rg_cpu_isa_t isa) {
  rg_cpu_isa_t got;
  rg_status_t st = rg_cpu_isa_resolve(isa, &got);
  if (!st) return 1;
  rg_test_skip(t, rg_status_message(st));
  rg_status_free(st);
  return 0;
}

static void check_paths(rg_test_ctx_t *t, rg_dtype_t type, rg_cpu_isa_t isa) {
  if (!level_runs(t, isa)) return;
  // Levels from avx512-bf16 up have kernels that round x: vdpbf16ps and the
  // tiles for bf16 weights, and the tiles round the other types' weights
  // too. Each reference is computed only where some kernel needs it.
  const int need_r = isa >= RG_CPU_ISA_AVX512_BF16 && type == RG_BF16;
  // ... and at avx512-bf16 the quantized types' GEMM on bf16 panels rounds them.
  const int need_rw =
      (isa >= RG_CPU_ISA_AMX && type != RG_BF16 && type != RG_F32) ||
      (isa >= RG_CPU_ISA_AVX512_BF16 && (type == RG_Q4_K || type == RG_Q6_K || type == RG_Q8_0));
  const int rounds_x = need_r || need_rw;
  const int need_q =
      isa >= RG_CPU_ISA_AVX512_BF16 && (type == RG_Q4_K || type == RG_Q6_K || type == RG_Q8_0);
  fixture_t f = {{NULL}, NULL, NULL};
  RG_REQUIRE_OK(rg_pool_create(1, &f.pools[1]));
  RG_REQUIRE_OK(rg_pool_create(2, &f.pools[2]));
  f.y = malloc((MAX_M * MAX_N + GUARDS) * sizeof(float));
  f.want = malloc(MAX_M * MAX_N * sizeof(float));
  float *x = malloc(MAX_M * MAX_K * sizeof(float)), *xr = malloc(MAX_M * MAX_K * sizeof(float));
  float *ref = malloc(MAX_M * MAX_N * sizeof(float)),
        *ref_r = malloc(MAX_M * MAX_N * sizeof(float)),
        *ref_rw = malloc(MAX_M * MAX_N * sizeof(float)),
        *ref_q = malloc(MAX_M * MAX_N * sizeof(float)), *xq = malloc(MAX_M * MAX_K * sizeof(float));
  float *bias = malloc(MAX_N * sizeof(float)), *wr = malloc((size_t)MAX_N * MAX_K * sizeof(float));
  RG_REQUIRE(f.y && f.want && x && xr && ref && ref_r && ref_rw && ref_q && xq && bias && wr);
  uint64_t seed = 0x5eed0000u + (uint64_t)type * 131 + (uint64_t)isa;
  int shapes = 0, ok = 1;
  const int kq = rg_dtype_block_elems(type) == 256;
  const int64_t *ks = kq ? shape_k256 : shape_k;
  const size_t nks = kq ? COUNT(shape_k256) : COUNT(shape_k);
  for (size_t ki = 0; ok && ki < nks; ki++) {
    int64_t k = ks[ki];
    if (k % rg_dtype_block_elems(type)) continue;
    for (size_t ni = 0; ok && ni < COUNT(shape_n); ni++) {
      int64_t n = shape_n[ni];
      void *wdata = make_weight(type, n, k, &seed);
      RG_REQUIRE(wdata);
      rg_wmat_t w = {wdata, type, n, k, RG_WLAYOUT_ROWS};
      // The weights as the tiles see them when they round: dequantized,
      // then rounded to bf16, as an f32 matrix.
      rg_wmat_t w_r = {wr, RG_F32, n, k, RG_WLAYOUT_ROWS};
      if (need_rw) {
        size_t rb;
        RG_REQUIRE_OK(rg_dtype_row_bytes(type, k, &rb));
        for (int64_t r = 0; r < n; r++) {
          RG_REQUIRE_OK(
              rg_dtype_to_f32(type, (const unsigned char *)wdata + (size_t)r * rb, wr + r * k, k));
          for (int64_t p = 0; p < k; p++)
            wr[r * k + p] = rg_bf16_to_f32(rg_f32_to_bf16(wr[r * k + p]));
        }
      }
      for (int64_t j = 0; j < n; j++) bias[j] = rng_uniform(&seed);
      for (size_t mi = 0; ok && mi < COUNT(shape_m); mi++) {
        int64_t m = shape_m[mi];
        if (!shape_wanted(isa, m, k, n)) continue;
        for (int64_t i = 0; i < m * k; i++) x[i] = rng_uniform(&seed);
        RG_REQUIRE_OK(rg_matmul_ref(x, m, &w, NULL, ref));
        if (rounds_x)
          for (int64_t i = 0; i < m * k; i++) xr[i] = rg_bf16_to_f32(rg_f32_to_bf16(x[i]));
        if (need_r) RG_REQUIRE_OK(rg_matmul_ref(xr, m, &w, NULL, ref_r));
        if (need_rw) RG_REQUIRE_OK(rg_matmul_ref(xr, m, &w_r, NULL, ref_rw));
        if (need_q) {
          x_as_int16(x, m, k, xq);
          RG_REQUIRE_OK(rg_matmul_ref(xq, m, &w, NULL, ref_q));
        }
        refs_t refs = {ref, need_r ? ref_r : NULL, need_rw ? ref_rw : NULL, need_q ? ref_q : NULL};
        ok = check_shape(t, &f, isa, &w, x, m, bias, &refs);
        shapes++;
      }
      free(wdata);
    }
  }
  RG_CHECK(!ok || shapes >= (kq ? 25 : 40));
  free(f.y), free(f.want), free(x), free(xr), free(ref), free(ref_r), free(ref_rw), free(ref_q),
      free(xq), free(bias), free(wr);
  rg_pool_destroy(f.pools[1]);
  rg_pool_destroy(f.pools[2]);
}

#define PATH_TEST(isa_tag, isa, type_tag, type)                \
  RG_TEST(matmul_##isa_tag##_##type_tag##_matches_reference) { \
    check_paths(t, type, isa);                                 \
  }
#define PATH_TESTS(isa_tag, isa)         \
  PATH_TEST(isa_tag, isa, f32, RG_F32)   \
  PATH_TEST(isa_tag, isa, bf16, RG_BF16) \
  PATH_TEST(isa_tag, isa, f16, RG_F16)   \
  PATH_TEST(isa_tag, isa, q8_0, RG_Q8_0) \
  PATH_TEST(isa_tag, isa, q4_K, RG_Q4_K) \
  PATH_TEST(isa_tag, isa, q6_K, RG_Q6_K)
PATH_TESTS(scalar, RG_CPU_ISA_SCALAR)
PATH_TESTS(avx2, RG_CPU_ISA_AVX2)
PATH_TESTS(avx512, RG_CPU_ISA_AVX512)
// The avx512-bf16 level changes the bf16 kernel (vdpbf16ps), the k-quant
// GEMV and q8_0's for m <= 2 (vpdpwssd, where the CPU has AVX512_VNNI); amx adds the tiles for
// every type but f32.
PATH_TEST(avx512bf16, RG_CPU_ISA_AVX512_BF16, bf16, RG_BF16)
PATH_TEST(avx512bf16, RG_CPU_ISA_AVX512_BF16, q8_0, RG_Q8_0)
PATH_TEST(avx512bf16, RG_CPU_ISA_AVX512_BF16, q4_K, RG_Q4_K)
PATH_TEST(avx512bf16, RG_CPU_ISA_AVX512_BF16, q6_K, RG_Q6_K)
PATH_TEST(amx, RG_CPU_ISA_AMX, bf16, RG_BF16)
PATH_TEST(amx, RG_CPU_ISA_AMX, f16, RG_F16)
PATH_TEST(amx, RG_CPU_ISA_AMX, q8_0, RG_Q8_0)
PATH_TEST(amx, RG_CPU_ISA_AMX, q4_K, RG_Q4_K)
PATH_TEST(amx, RG_CPU_ISA_AMX, q6_K, RG_Q6_K)

// The tiles' prefill path (m > 16) at the shapes its blocking has edges
// for: several units per thread, so each unit's panel is built while the
// previous one runs; k sliced (more than 64 steps of k at 128 weight rows),
// so C is carried between slices; and m, n, k that are not multiples of
// the tiles (rows past m and n, values past k). Held to 1e-7 against the
// reference on x and w rounded to bf16, as the path computes.
RG_TEST(matmul_amx_prefill_matches_reference) {
  if (!level_runs(t, RG_CPU_ISA_AMX)) return;
  static const struct {
    rg_dtype_t type;
    int64_t m, n, k;
    int threads;
  } cases[] = {
      {RG_BF16, 60, 130, 2080, 1},  // 2 units of 128 rows, 2 slices each (64 + 1 steps)
      {RG_BF16, 600, 40, 200, 1},   // the largest m: 19 passes of 32 rows of x, the last 24 deep
      {RG_BF16, 17, 300, 1000, 2},  // the smallest prefill m; units of 96 rows, k unsliced
      {RG_BF16, 20, 257, 4100, 1},  // 3 slices (64, 64, 1 steps); the last unit one row deep
      {RG_F16, 24, 130, 2080, 1},  {RG_F16, 33, 300, 999, 2},   {RG_Q8_0, 24, 130, 2080, 1},
      {RG_Q4_K, 24, 130, 2304, 1}, {RG_Q6_K, 24, 200, 2304, 2},
  };
  rg_pool_t *pools[3] = {NULL};
  RG_REQUIRE_OK(rg_pool_create(1, &pools[1]));
  RG_REQUIRE_OK(rg_pool_create(2, &pools[2]));
  uint64_t seed = 0x9afe11u;
  for (size_t c = 0; c < COUNT(cases); c++) {
    const int64_t m = cases[c].m, n = cases[c].n, k = cases[c].k;
    const rg_dtype_t type = cases[c].type;
    void *wdata = make_weight(type, n, k, &seed);
    float *x = malloc((size_t)(m * k) * sizeof(float)),
          *wr = malloc((size_t)(n * k) * sizeof(float));
    float *y = malloc((size_t)(m * n + GUARDS) * sizeof(float)),
          *want = malloc((size_t)(m * n) * sizeof(float));
    float *bias = malloc((size_t)n * sizeof(float));
    RG_REQUIRE(wdata && x && wr && y && want && bias);
    size_t rb;
    RG_REQUIRE_OK(rg_dtype_row_bytes(type, k, &rb));
    for (int64_t r = 0; r < n; r++) {
      RG_REQUIRE_OK(
          rg_dtype_to_f32(type, (const unsigned char *)wdata + (size_t)r * rb, wr + r * k, k));
      for (int64_t p = 0; p < k; p++) wr[r * k + p] = rg_bf16_to_f32(rg_f32_to_bf16(wr[r * k + p]));
    }
    for (int64_t i = 0; i < m * k; i++) x[i] = rg_bf16_to_f32(rg_f32_to_bf16(rng_uniform(&seed)));
    for (int64_t j = 0; j < n; j++) bias[j] = rng_uniform(&seed);
    rg_wmat_t w = {wdata, type, n, k, RG_WLAYOUT_ROWS}, w_r = {wr, RG_F32, n, k, RG_WLAYOUT_ROWS};
    RG_REQUIRE_OK(rg_matmul_ref(x, m, &w_r, bias, want));
    for (size_t i = 0; i < (size_t)(m * n) + GUARDS; i++) y[i] = -12345.0f;
    rg_matmul_opts_t o = {.isa = RG_CPU_ISA_AMX, .path = RG_MATMUL_TILES};
    RG_CHECK_OK(rg_matmul_ex(pools[cases[c].threads], x, m, &w, bias, y, &o));
    double e = nmse(y, want, (size_t)(m * n));
    int guards = 1;
    for (size_t i = (size_t)(m * n); i < (size_t)(m * n) + GUARDS; i++) guards &= y[i] == -12345.0f;
    if (!(e <= 1e-7) || !all_finite(y, (size_t)(m * n)) || !guards)
      rg_test_fail(t, __FILE__, __LINE__, "%s m=%lld n=%lld k=%lld, %d threads: nmse %.3g%s%s",
                   rg_dtype_name(type), (long long)m, (long long)n, (long long)k, cases[c].threads,
                   e, all_finite(y, (size_t)(m * n)) ? "" : ", non-finite output",
                   guards ? "" : ", wrote past y");
    free(wdata), free(x), free(wr), free(y), free(want), free(bias);
  }
  rg_pool_destroy(pools[1]);
  rg_pool_destroy(pools[2]);
}

// What rounding x to bf16 costs the vdpbf16ps kernel against the exact
// reference, on a shape with enough outputs for the NMSE to settle: x's
// rounding (relative error up to 2^-9) gives NMSE ~ 2^-18 / 3 ≈ 1.3e-6.
RG_TEST(matmul_avx512bf16_accuracy_of_bf16_x) {
  rg_matmul_opts_t o = {.isa = RG_CPU_ISA_AVX512_BF16, .path = RG_MATMUL_GEMV};
  if (!level_runs(t, o.isa)) return;
  enum { M = 16, N = 64, K = 2048 };
  uint64_t seed = 99;
  void *wd = make_weight(RG_BF16, N, K, &seed);
  float *x = malloc(M * K * sizeof(float)), *y = malloc(M * N * sizeof(float)),
        *ref = malloc(M * N * sizeof(float));
  RG_REQUIRE(wd && x && y && ref);
  for (int i = 0; i < M * K; i++) x[i] = rng_uniform(&seed);
  rg_wmat_t w = {wd, RG_BF16, N, K, RG_WLAYOUT_ROWS};
  RG_CHECK(strstr(rg_matmul_kernel_name_ex(&w, M, &o), "x in bf16") != NULL);
  RG_REQUIRE_OK(rg_matmul_ref(x, M, &w, NULL, ref));
  RG_REQUIRE_OK(rg_matmul_ex(NULL, x, M, &w, NULL, y, &o));
  double e = nmse(y, ref, M * N);
  if (!(e < 1e-5 && e > 1e-8))
    rg_test_fail(t, __FILE__, __LINE__, "nmse %.3g, expected about 1.3e-6", e);
  free(wd), free(x), free(y), free(ref);
}

// y (m, n) less bias (when given) against ref; *guards: the G floats after
// y still hold -12345 (nothing written past it).
static double unbiased_nmse(float *y, const float *bias, const float *ref, int64_t m, int64_t n,
                            int g, int *guards) {
  if (bias)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) y[i * n + j] -= bias[j];
  *guards = 1;
  for (int64_t i = m * n; i < m * n + g; i++) *guards &= y[i] == -12345.0f;
  return nmse(y, ref, (size_t)(m * n));
}

// bf16 prefill on packed weight panels (the automatic choice at avx512-bf16
// from 96 rows of x, or 16 where k fits one 256-value block; 17 and 95 rows
// stay on the GEMV where it does not): the edges of its blocking. Rows of x
// past a multiple of the 8-row micro-kernel (17, 261) and past a 512-row
// chunk (520), weight
// rows past a 32-row panel, k below one 32-value step, past a 256-value
// block and inside one, with and without bias, 1 and 2 threads. Held to
// 1e-7 against the reference on x rounded to bf16, as the kernel computes,
// with guards after y.
RG_TEST(matmul_bf16_packed_panels_match_reference) {
  rg_matmul_opts_t o = {.isa = RG_CPU_ISA_AVX512_BF16};
  if (!level_runs(t, o.isa)) return;
  static const int64_t ms[] = {17, 95, 96, 261, 520}, ns[] = {5, 33, 64}, ks[] = {7, 256, 300, 777};
  enum { MM = 520, MN = 64, MK = 777, G = 8 };
  rg_pool_t *pools[2];
  RG_REQUIRE_OK(rg_pool_create(1, &pools[0]));
  RG_REQUIRE_OK(rg_pool_create(2, &pools[1]));
  float *x = malloc(MM * MK * sizeof(float)), *y = malloc((MM * MN + G) * sizeof(float)),
        *ref = malloc(MM * MN * sizeof(float)), *bias = malloc(MN * sizeof(float));
  RG_REQUIRE(x && y && ref && bias);
  uint64_t seed = 0x9ac4;
  int cases = 0;
  for (size_t ki = 0; ki < COUNT(ks); ki++)
    for (size_t ni = 0; ni < COUNT(ns); ni++) {
      const int64_t k = ks[ki], n = ns[ni];
      void *wd = make_weight(RG_BF16, n, k, &seed);
      RG_REQUIRE(wd);
      rg_wmat_t w = {wd, RG_BF16, n, k, RG_WLAYOUT_ROWS};
      for (int64_t j = 0; j < n; j++) bias[j] = rng_uniform(&seed);
      for (size_t mi = 0; mi < COUNT(ms); mi++) {
        const int64_t m = ms[mi];
        if (m == 520 && k * n > 300 * 33) continue;  // the chunk edge once per few shapes
        const int packed = m >= 96 || (k <= 256 && m >= 16);
        if (!packed) {
          RG_CHECK(strstr(rg_matmul_kernel_name_ex(&w, m, &o), "packed panels") == NULL);
          continue;
        }
        RG_CHECK(strstr(rg_matmul_kernel_name_ex(&w, m, &o), "packed panels") != NULL);
        for (int64_t i = 0; i < m * k; i++)
          x[i] = rg_bf16_to_f32(rg_f32_to_bf16(rng_uniform(&seed)));
        RG_REQUIRE_OK(rg_matmul_ref(x, m, &w, NULL, ref));
        for (int c = 0; c < 3; c++) {
          const int with_bias = c != 1;
          rg_pool_t *pool = pools[c == 0 ? 0 : 1];
          for (int64_t i = 0; i < m * n + G; i++) y[i] = -12345.0f;
          RG_REQUIRE_OK(rg_matmul_ex(pool, x, m, &w, with_bias ? bias : NULL, y, &o));
          int guards;
          const double e = unbiased_nmse(y, with_bias ? bias : NULL, ref, m, n, G, &guards);
          if (!(e <= 1e-7) || !all_finite(y, (size_t)(m * n)) || !guards)
            rg_test_fail(t, __FILE__, __LINE__,
                         "m=%lld n=%lld k=%lld %s bias, %d thread(s): nmse %.3g%s", (long long)m,
                         (long long)n, (long long)k, with_bias ? "with" : "without", c == 0 ? 1 : 2,
                         e, guards ? "" : ", wrote past y");
          cases++;
        }
      }
      free(wd);
    }
  // 12 shapes at m = 96 and 261, the 6 with k <= 256 at 17 and 95, 8 at 520.
  RG_CHECK(cases == 3 * (6 + 6 + 12 + 12 + 8));
  free(x), free(y), free(ref), free(bias);
  rg_pool_destroy(pools[0]);
  rg_pool_destroy(pools[1]);
}

// bf16 weights packed once into panels (RG_WLAYOUT_BF16_PANELS, what the
// CPU device asks a stage for at avx512-bf16), and f16 ones
// (RG_WLAYOUT_F16_PANELS, at avx512 and avx512-bf16): the reference reads the
// packed words itself (it shares no code with the pack) and gives the same
// sums as from the rows, bit for bit; the kernel matches it (bf16: on x
// rounded to bf16; f16: on x as it is, to f32 rounding) at every m from 1
// (decode) to past a 512-row chunk, on weight rows past a 32-row panel and k
// past 32- and 256-value steps, with and without bias, on 1 and 2 threads,
// writing nothing past y; and each row of y comes out bit for bit the same
// whatever m it ran in (one kernel for every m).
static void packed_at_load_case(rg_test_ctx_t *t, rg_dtype_t type, rg_wlayout_t layout,
                                rg_cpu_isa_t isa, double tol) {
  rg_matmul_opts_t o = {.isa = isa};
  if (!level_runs(t, o.isa)) return;
  static const int64_t ms[] = {1, 2, 3, 7, 8, 9, 17, 300, 520}, ns[] = {5, 33, 64},
                       ks[] = {7, 64, 300, 777};
  enum { MM = 520, MN = 64, MK = 777, G = 8 };
  rg_pool_t *pools[2];
  RG_REQUIRE_OK(rg_pool_create(1, &pools[0]));
  RG_REQUIRE_OK(rg_pool_create(2, &pools[1]));
  float *x = malloc(MM * MK * sizeof(float)), *y = malloc((MM * MN + G) * sizeof(float)),
        *ref = malloc(MM * MN * sizeof(float)), *ref2 = malloc(MM * MN * sizeof(float)),
        *bias = malloc(MN * sizeof(float)), *row = malloc(MN * sizeof(float));
  RG_REQUIRE(x && y && ref && ref2 && bias && row);
  uint64_t seed = 0x51ab;
  for (int64_t i = 0; i < MM * MK; i++)
    x[i] =
        type == RG_BF16 ? rg_bf16_to_f32(rg_f32_to_bf16(rng_uniform(&seed))) : rng_uniform(&seed);
  int cases = 0;
  for (size_t ki = 0; ki < COUNT(ks); ki++)
    for (size_t ni = 0; ni < COUNT(ns); ni++) {
      const int64_t k = ks[ki], n = ns[ni];
      void *wd = make_weight(type, n, k, &seed);
      size_t bytes = rg_matmul_layout_bytes(layout, type, n, k);
      void *pd = aligned_alloc(64, (bytes + 63) / 64 * 64);
      RG_REQUIRE(wd && pd);
      rg_wmat_t w = {wd, type, n, k, RG_WLAYOUT_ROWS}, p = {pd, type, n, k, layout};
      RG_REQUIRE_OK(rg_matmul_relayout(pools[1], &w, layout, pd));
      RG_CHECK(strstr(rg_matmul_kernel_name_ex(&p, 1, &o), "packed at load") != NULL);
      for (int64_t j = 0; j < n; j++) bias[j] = rng_uniform(&seed);
      RG_REQUIRE_OK(rg_matmul_ref(x, MM, &w, NULL, ref));
      RG_REQUIRE_OK(rg_matmul_ref(x, MM, &p, NULL, ref2));
      RG_CHECK(memcmp(ref, ref2, (size_t)(MM * n) * sizeof(float)) == 0);
      for (size_t mi = 0; mi < COUNT(ms); mi++) {
        const int64_t m = ms[mi];
        if (m == 520 && k * n > 300 * 33) continue;  // the chunk edge once per few shapes
        for (int c = 0; c < 3; c++) {
          const int with_bias = c != 1;
          rg_pool_t *pool = pools[c == 0 ? 0 : 1];
          for (int64_t i = 0; i < m * n + G; i++) y[i] = -12345.0f;
          RG_REQUIRE_OK(rg_matmul_ex(pool, x, m, &p, with_bias ? bias : NULL, y, &o));
          // The last row alone: the same bits as in the batch.
          RG_REQUIRE_OK(
              rg_matmul_ex(pool, x + (m - 1) * k, 1, &p, with_bias ? bias : NULL, row, &o));
          int same = memcmp(row, y + (m - 1) * n, (size_t)n * sizeof(float)) == 0;
          int guards;
          const double e = unbiased_nmse(y, with_bias ? bias : NULL, ref, m, n, G, &guards);
          if (!(e <= tol) || !all_finite(y, (size_t)(m * n)) || !guards || !same)
            rg_test_fail(t, __FILE__, __LINE__,
                         "%s m=%lld n=%lld k=%lld %s bias, %d thread(s): nmse %.3g%s%s",
                         rg_dtype_name(type), (long long)m, (long long)n, (long long)k,
                         with_bias ? "with" : "without", c == 0 ? 1 : 2, e,
                         guards ? "" : ", wrote past y",
                         same ? "" : ", its last row alone differs");
          cases++;
        }
      }
      free(wd), free(pd);
    }
  RG_CHECK(cases == 3 * (12 * 8 + 9));  // 520 rows on the 9 shapes of k * n <= 9900
  free(x), free(y), free(ref), free(ref2), free(bias), free(row);
  rg_pool_destroy(pools[0]);
  rg_pool_destroy(pools[1]);
}

RG_TEST(matmul_bf16_weights_packed_at_load) {
  RG_CHECK(rg_matmul_preferred_layout(RG_CPU_ISA_AVX512_BF16, RG_BF16) == RG_WLAYOUT_BF16_PANELS);
  RG_CHECK(rg_matmul_preferred_layout(RG_CPU_ISA_AVX512, RG_BF16) == RG_WLAYOUT_ROWS);
  RG_CHECK(rg_matmul_preferred_layout(RG_CPU_ISA_AMX, RG_BF16) == RG_WLAYOUT_ROWS);
  RG_CHECK(rg_matmul_preferred_layout(RG_CPU_ISA_AMX, RG_F16) == RG_WLAYOUT_ROWS);
  RG_CHECK(rg_matmul_layout_bytes(RG_WLAYOUT_BF16_PANELS, RG_BF16, 33, 7) == 64 * 32 * 2);
  RG_CHECK(rg_matmul_layout_bytes(RG_WLAYOUT_BF16_PANELS, RG_F32, 32, 32) == 0);
  RG_CHECK(rg_matmul_layout_bytes(RG_WLAYOUT_BF16_PANELS, RG_F16, 32, 32) == 0);
  RG_CHECK(rg_matmul_layout_bytes(RG_WLAYOUT_ROWS, RG_BF16, 3, 5) == 30);
  packed_at_load_case(t, RG_BF16, RG_WLAYOUT_BF16_PANELS, RG_CPU_ISA_AVX512_BF16, 1e-7);
}

// f16 panels: the same checks; x is not rounded, so the kernel is held to
// f32 summation order (the row kernels' NMSE is ~1e-13).
RG_TEST(matmul_f16_weights_packed_at_load) {
  RG_CHECK(rg_matmul_preferred_layout(RG_CPU_ISA_AVX512_BF16, RG_F16) == RG_WLAYOUT_F16_PANELS ||
           rg_cpu_isa_best() < RG_CPU_ISA_AVX512_BF16);
  RG_CHECK(rg_matmul_preferred_layout(RG_CPU_ISA_AVX512, RG_F16) == RG_WLAYOUT_F16_PANELS ||
           rg_cpu_isa_best() < RG_CPU_ISA_AVX512);
  RG_CHECK(rg_matmul_preferred_layout(RG_CPU_ISA_AVX2, RG_F16) == RG_WLAYOUT_ROWS);
  RG_CHECK(rg_matmul_layout_bytes(RG_WLAYOUT_F16_PANELS, RG_F16, 33, 7) == 64 * 32 * 2);
  RG_CHECK(rg_matmul_layout_bytes(RG_WLAYOUT_F16_PANELS, RG_BF16, 32, 32) == 0);
  packed_at_load_case(t, RG_F16, RG_WLAYOUT_F16_PANELS, RG_CPU_ISA_AVX512, 1e-10);
  packed_at_load_case(t, RG_F16, RG_WLAYOUT_F16_PANELS, RG_CPU_ISA_AVX512_BF16, 1e-10);
}

// What packed weights refuse: another type, a level without vdpbf16ps, a
// forced path, an unaligned or missing output; and the HAL's matmul op
// refuses a layout its device did not ask for.
RG_TEST(matmul_bf16_packed_refusals) {
  uint16_t wb[64 * 32] = {0};
  float x[64] = {0}, y[64];
  rg_wmat_t w = {wb, RG_BF16, 2, 32, RG_WLAYOUT_ROWS};
  rg_wmat_t f = {wb, RG_F32, 2, 8, RG_WLAYOUT_BF16_PANELS};
  RG_CHECK_ERR(rg_matmul_ref(x, 1, &f, NULL, y), "no bf16 packed-panel layout");
  rg_wmat_t bad = {wb, RG_BF16, 2, 32, (rg_wlayout_t)7};
  RG_CHECK_ERR(rg_matmul(NULL, x, 1, &bad, NULL, y), "unknown weight layout");
  RG_CHECK_ERR(rg_matmul_relayout(NULL, &w, RG_WLAYOUT_BF16_PANELS, NULL), "the output is NULL");
  rg_wmat_t wf = {wb, RG_F32, 2, 8, RG_WLAYOUT_ROWS};
  RG_CHECK_ERR(rg_matmul_relayout(NULL, &wf, RG_WLAYOUT_BF16_PANELS, y),
               "f32 weights have no layout");
  if (!level_runs(t, RG_CPU_ISA_AVX512_BF16)) return;
  _Alignas(64) uint16_t pd[64 * 32 + 32];
  RG_CHECK_ERR(rg_matmul_relayout(NULL, &w, RG_WLAYOUT_BF16_PANELS, pd + 1), "not 64-byte aligned");
  RG_REQUIRE_OK(rg_matmul_relayout(NULL, &w, RG_WLAYOUT_BF16_PANELS, pd));
  rg_wmat_t p = {pd, RG_BF16, 2, 32, RG_WLAYOUT_BF16_PANELS};
  rg_matmul_opts_t low = {.isa = RG_CPU_ISA_AVX512}, gemv = {.path = RG_MATMUL_GEMV};
  RG_CHECK_ERR(rg_matmul_ex(NULL, x, 1, &p, NULL, y, &low), "avx512-bf16");
  RG_CHECK_ERR(rg_matmul_ex(NULL, x, 1, &p, NULL, y, &gemv), "only the auto path");
  RG_CHECK_ERR(rg_matmul_relayout(NULL, &p, RG_WLAYOUT_BF16_PANELS, y), "not in rows");
  // f16 panels: bf16 weights cannot claim them, and below avx512 they do not run.
  rg_wmat_t hb = {pd, RG_BF16, 2, 32, RG_WLAYOUT_F16_PANELS};
  RG_CHECK_ERR(rg_matmul(NULL, x, 1, &hb, NULL, y), "no f16 packed-panel layout");
  rg_wmat_t hr = {wb, RG_F16, 2, 32, RG_WLAYOUT_ROWS};
  RG_REQUIRE_OK(rg_matmul_relayout(NULL, &hr, RG_WLAYOUT_F16_PANELS, pd));
  rg_wmat_t hp = {pd, RG_F16, 2, 32, RG_WLAYOUT_F16_PANELS};
  rg_matmul_opts_t avx2 = {.isa = RG_CPU_ISA_AVX2};
  RG_CHECK_ERR(rg_matmul_ex(NULL, x, 1, &hp, NULL, y, &avx2),
               "f16 weights packed in panels run at avx512");
  RG_CHECK_ERR(rg_matmul_ex(NULL, x, 1, &hp, NULL, y, &gemv), "only the auto path");
}

// The k-quant kernel that quantizes x to int16 (vpdpwssd) where the CPU has
// AVX512_VNNI; skipped, with the reason, elsewhere.
static int int16_kernel_runs(rg_test_ctx_t *t, rg_dtype_t type, rg_matmul_opts_t *o) {
  if (!level_runs(t, o->isa)) return 0;
  unsigned char blk[210] = {0};
  rg_wmat_t w = {blk, type, 1, 256, RG_WLAYOUT_ROWS};
  if (!strstr(rg_matmul_kernel_name_ex(&w, 1, o), "x in int16")) {
    rg_test_skip(t, "this CPU lacks AVX512_VNNI (the k-quants keep the vdpbf16ps kernel)");
    return 0;
  }
  return 1;
}

// Every m from 1 to 18 (the kernel applies each unpacked super-block to
// register blocks of 1, 2, 4 or 8 rows of x, the last block padded with
// zero rows it must not store), odd n, several k, both k-quants, on the
// GEMV path whatever the tiles' threshold: against the reference on x
// quantized as the kernel does, to 1e-7.
RG_TEST(matmul_kquant_int16_x_every_m_up_to_16) {
  rg_matmul_opts_t o = {.isa = RG_CPU_ISA_AVX512_BF16, .path = RG_MATMUL_GEMV};
  if (!int16_kernel_runs(t, RG_Q4_K, &o)) return;
  enum { MAXM = 18, MAXN = 37, MAXK = 1312 };
  static const int64_t ks[] = {256, 1312}, ns[] = {1, 37};
  rg_pool_t *pool;
  RG_REQUIRE_OK(rg_pool_create(2, &pool));
  float *x = malloc(MAXM * MAXK * sizeof(float)), *xq = malloc(MAXM * MAXK * sizeof(float)),
        *y = malloc((MAXM * MAXN + GUARDS) * sizeof(float)),
        *ref = malloc(MAXM * MAXN * sizeof(float));
  RG_REQUIRE(x && xq && y && ref);
  uint64_t seed = 16;
  static const rg_dtype_t types[] = {RG_Q4_K, RG_Q6_K, RG_Q8_0};
  for (size_t ti = 0; ti < COUNT(types); ti++)
    for (size_t ki = 0; ki < COUNT(ks); ki++)
      for (size_t ni = 0; ni < COUNT(ns); ni++) {
        // 1312 = 5 x 256 + 32: q8_0's rows end inside a block of 256 of x.
        const int64_t k = ks[ki] == 1312 && types[ti] != RG_Q8_0 ? 1280 : ks[ki], n = ns[ni];
        void *wd = make_weight(types[ti], n, k, &seed);
        RG_REQUIRE(wd);
        rg_wmat_t w = {wd, types[ti], n, k, RG_WLAYOUT_ROWS};
        for (int64_t m = 1; m <= MAXM; m++) {
          // Rows of x of different magnitudes, so each row's own scales
          // matter; one row is all zeros.
          for (int64_t i = 0; i < m; i++)
            for (int64_t p = 0; p < k; p++)
              x[i * k + p] = i == 5 ? 0.0f : rng_uniform(&seed) * (float)(1 + 3 * i);
          // q8_0 from m = 3 runs the f32 tiles, on exact x.
          const int q = strstr(rg_matmul_kernel_name_ex(&w, m, &o), "x in int16") != NULL;
          x_as_int16(x, m, k, xq);
          RG_REQUIRE_OK(rg_matmul_ref(q ? xq : x, m, &w, NULL, ref));
          for (int64_t i = 0; i < m * n + GUARDS; i++) y[i] = -12345.0f;
          RG_REQUIRE_OK(rg_matmul_ex(pool, x, m, &w, NULL, y, &o));
          double e = nmse(y, ref, (size_t)(m * n));
          int guards = 1;
          for (int64_t i = m * n; i < m * n + GUARDS; i++) guards &= y[i] == -12345.0f;
          if (!(e <= 1e-7) || !all_finite(y, (size_t)(m * n)) || !guards) {
            rg_test_fail(t, __FILE__, __LINE__, "%s: m=%lld k=%lld n=%lld: nmse %.3g%s",
                         rg_matmul_kernel_name_ex(&w, m, &o), (long long)m, (long long)k,
                         (long long)n, e, guards ? "" : ", wrote past y");
            m = MAXM, ki = COUNT(ks), ni = COUNT(ns), ti = COUNT(types);
          }
        }
        free(wd);
      }
  free(x), free(xq), free(y), free(ref);
  rg_pool_destroy(pool);
}

// Enough rows of x at a long k that the kernel runs them in several passes
// (about 384 KiB of int16 x each: 24 rows at k = 8192), the last pass
// ending in a padded register block.
RG_TEST(matmul_kquant_int16_x_in_passes_over_x) {
  rg_matmul_opts_t o = {.isa = RG_CPU_ISA_AVX512_BF16, .path = RG_MATMUL_GEMV};
  if (!int16_kernel_runs(t, RG_Q4_K, &o)) return;
  enum { M = 43, N = 5, K = 8192 };
  uint64_t seed = 43;
  float *x = malloc(M * K * sizeof(float)), *xq = malloc(M * K * sizeof(float)),
        *y = malloc(M * N * sizeof(float)), *ref = malloc(M * N * sizeof(float));
  RG_REQUIRE(x && xq && y && ref);
  for (int i = 0; i < M * K; i++) x[i] = rng_uniform(&seed);
  x_as_int16(x, M, K, xq);
  static const rg_dtype_t types[] = {RG_Q4_K, RG_Q6_K};
  for (size_t ti = 0; ti < COUNT(types); ti++) {
    void *wd = make_weight(types[ti], N, K, &seed);
    RG_REQUIRE(wd);
    rg_wmat_t w = {wd, types[ti], N, K, RG_WLAYOUT_ROWS};
    RG_REQUIRE_OK(rg_matmul_ref(xq, M, &w, NULL, ref));
    RG_REQUIRE_OK(rg_matmul_ex(NULL, x, M, &w, NULL, y, &o));
    double e = nmse(y, ref, M * N);
    if (!(e <= 1e-7))
      rg_test_fail(t, __FILE__, __LINE__, "%s: m=%d k=%d n=%d: nmse %.3g",
                   rg_matmul_kernel_name_ex(&w, M, &o), M, K, N, e);
    free(wd);
  }
  free(x), free(xq), free(y), free(ref);
}

// What quantizing x to int16 per 256 values costs against exact x, on
// enough outputs for the NMSE to settle: the error is up to amax / 65534
// per element, so for uniform x NMSE ~ (1/32767)^2 / 12 * 3 ≈ 2.3e-10, and
// for a block with an outlier channel 20 times the rest's range about 400
// times that. Both must stay far inside the 2e-5 the conformance suite
// allows narrow-weight matmuls (and above 1e-13, so the kernel really
// quantizes).
RG_TEST(matmul_kquant_accuracy_of_int16_x) {
  rg_matmul_opts_t o = {.isa = RG_CPU_ISA_AVX512_BF16, .path = RG_MATMUL_GEMV};
  if (!int16_kernel_runs(t, RG_Q4_K, &o)) return;
  enum { M = 8, N = 64, K = 2048 };
  uint64_t seed = 77;
  float *x = malloc(M * K * sizeof(float)), *y = malloc(M * N * sizeof(float)),
        *ref = malloc(M * N * sizeof(float));
  RG_REQUIRE(x && y && ref);
  static const rg_dtype_t types[] = {RG_Q4_K, RG_Q6_K, RG_Q8_0};
  // m = 1 runs its own kernel for the k-quants (x as two int8 terms on
  // vpdpbusd), from the same int16 x.
  for (size_t ti = 0; ti < 2 * COUNT(types); ti++) {
    const rg_dtype_t type = types[ti / 2];
    const int64_t m = ti % 2 ? 1 : type == RG_Q8_0 ? 2 : M;  // q8_0 takes it up to m = 2
    void *wd = make_weight(type, N, K, &seed);
    RG_REQUIRE(wd);
    rg_wmat_t w = {wd, type, N, K, RG_WLAYOUT_ROWS};
    if (m == 1 && type != RG_Q8_0)
      RG_CHECK(strstr(rg_matmul_kernel_name_ex(&w, m, &o), "vpdpbusd"));
    for (int outlier = 0; outlier < 2; outlier++) {
      for (int i = 0; i < M * K; i++)
        x[i] = rng_uniform(&seed) * (outlier && i % 256 == 100 ? 20.0f : 1.0f);
      RG_REQUIRE_OK(rg_matmul_ref(x, m, &w, NULL, ref));
      RG_REQUIRE_OK(rg_matmul_ex(NULL, x, m, &w, NULL, y, &o));
      double e = nmse(y, ref, (size_t)(m * N)), lo = 1e-13, hi = outlier ? 1e-6 : 2e-9;
      printf("    %s, %s x: nmse %.2g against exact x\n", rg_matmul_kernel_name_ex(&w, m, &o),
             outlier ? "outlier" : "uniform", e);
      if (!(e < hi && e > lo))
        rg_test_fail(t, __FILE__, __LINE__, "%s, %s x: nmse %.3g, expected in (%.0g, %.0g)",
                     rg_matmul_kernel_name_ex(&w, m, &o), outlier ? "outlier" : "uniform", e, lo,
                     hi);
    }
    free(wd);
  }
  free(x), free(y), free(ref);
}

// The m = 1 kernels' word packing at its bounds: x all +1 or all -1 (every
// xq = +-32767, so every high byte is 127 or -128 and every low byte 255 or
// 1), against weight rows whose quants are all at their largest or all 0
// and whose scales are all at their largest magnitude (q6_K: 127 and
// -128). A lane sum past a word would saturate in vpackssdw and show as an
// error of order 1; exact sums meet the reference on the same x to 1e-7.
RG_TEST(matmul_kquant_m1_kernels_at_their_bounds) {
  rg_matmul_opts_t o = {.isa = RG_CPU_ISA_AVX512_BF16, .path = RG_MATMUL_GEMV};
  if (!int16_kernel_runs(t, RG_Q4_K, &o)) return;
  enum { N = 4, K = 512 };
  static const rg_dtype_t types[] = {RG_Q4_K, RG_Q6_K};
  float x[K], xq[K], y[N], ref[N];
  for (size_t ti = 0; ti < COUNT(types); ti++) {
    const size_t bb = types[ti] == RG_Q4_K ? 144 : 210, nb = K / 256;
    unsigned char *wd = calloc(N * nb, bb);
    RG_REQUIRE(wd);
    const uint16_t d = rg_f32_to_f16(0.01f);
    for (int r = 0; r < N; r++)
      for (size_t b = 0; b < nb; b++) {
        unsigned char *blk = wd + (r * nb + b) * bb;
        // Rows 0 and 2: quants at their largest; 1 and 3: all 0.
        const unsigned char q = r % 2 ? 0x00 : 0xff;
        if (types[ti] == RG_Q4_K) {
          memcpy(blk, &d, 2), memcpy(blk + 2, &d, 2);
          memset(blk + 4, 0xff, 12);  // scales and mins 63
          memset(blk + 16, q, 128);
        } else {
          memset(blk, q, 192);                         // ql, qh
          memset(blk + 192, r < 2 ? 0x7f : 0x80, 16);  // scales 127 / -128
          memcpy(blk + 208, &d, 2);
        }
      }
    rg_wmat_t w = {wd, types[ti], N, K, RG_WLAYOUT_ROWS};
    RG_CHECK(strstr(rg_matmul_kernel_name_ex(&w, 1, &o), "vpdpbusd"));
    for (int sign = -1; sign <= 1; sign += 2) {
      for (int i = 0; i < K; i++) x[i] = (float)sign;
      x_as_int16(x, 1, K, xq);
      RG_REQUIRE_OK(rg_matmul_ref(xq, 1, &w, NULL, ref));
      RG_REQUIRE_OK(rg_matmul_ex(NULL, x, 1, &w, NULL, y, &o));
      for (int r = 0; r < N; r++)
        if (!(fabs((double)y[r] - ref[r]) <= 1e-4 * fabs((double)ref[r]) + 1e-6))
          rg_test_fail(t, __FILE__, __LINE__, "%s, x all %+d, row %d: %g, expected %g",
                       rg_matmul_kernel_name_ex(&w, 1, &o), sign, r, (double)y[r], (double)ref[r]);
    }
    free(wd);
  }
}

// A NaN or inf in a row of x must make that row's outputs non-finite, as
// exact arithmetic would, and leave the other rows alone: the quantizer must
// not turn them into ordinary int16 values. Each row alone too (m = 1 has its
// own kernel).
RG_TEST(matmul_kquant_int16_x_keeps_nan_and_inf) {
  rg_matmul_opts_t o = {.isa = RG_CPU_ISA_AVX512_BF16, .path = RG_MATMUL_GEMV};
  if (!int16_kernel_runs(t, RG_Q4_K, &o)) return;
  enum { M = 3, N = 5, K = 512 };
  uint64_t seed = 3;
  float x[M * K], y[M * N];
  for (int i = 0; i < M * K; i++) x[i] = rng_uniform(&seed);
  x[0 * K + 300] = NAN;
  x[2 * K + 7] = INFINITY;
  static const rg_dtype_t types[] = {RG_Q4_K, RG_Q6_K, RG_Q8_0};
  for (size_t ti = 0; ti < COUNT(types); ti++) {
    void *wd = make_weight(types[ti], N, K, &seed);
    RG_REQUIRE(wd);
    rg_wmat_t w = {wd, types[ti], N, K, RG_WLAYOUT_ROWS};
    RG_REQUIRE_OK(rg_matmul_ex(NULL, x, M, &w, NULL, y, &o));
    for (int j = 0; j < N; j++) {
      RG_CHECK(!isfinite(y[0 * N + j]));
      RG_CHECK(isfinite(y[1 * N + j]));
      RG_CHECK(!isfinite(y[2 * N + j]));
    }
    for (int i = 0; i < M; i++) {
      float y1[N];
      RG_REQUIRE_OK(rg_matmul_ex(NULL, x + i * K, 1, &w, NULL, y1, &o));
      for (int j = 0; j < N; j++)
        if (!isfinite(y1[j]) != (i != 1))
          rg_test_fail(t, __FILE__, __LINE__, "%s: row %d alone, output %d is %g",
                       rg_matmul_kernel_name_ex(&w, 1, &o), i, j, (double)y1[j]);
    }
    free(wd);
  }
}

// The 1 x 1 tile of the float types (ops/cpu/matmul.c row_1x1) runs 64
// values a step unmasked, then the rest 16 at a time with a mask: every k
// from 1 to 150 gives every length of both tails, alone (m = 1) and as the
// leftover row after a 4 x 4 tile (m = 5), at each level from avx512 up,
// against the reference to 1e-7.
RG_TEST(matmul_one_row_tile_every_tail_length) {
  static const rg_dtype_t types[] = {RG_F32, RG_BF16, RG_F16};
  static const rg_cpu_isa_t isas[] = {RG_CPU_ISA_AVX512, RG_CPU_ISA_AVX512_BF16, RG_CPU_ISA_AMX};
  enum { M = 5, N = 3, K = 150 };
  if (rg_cpu_isa_best() < RG_CPU_ISA_AVX512) {
    rg_test_skip(t, "this CPU lacks AVX-512 (the 1 x 1 tile is an AVX-512 kernel)");
    return;
  }
  uint64_t seed = 150;
  float x[M * K], y[M * N + GUARDS], ref[M * N];
  int cases = 0;
  for (size_t ti = 0; ti < COUNT(types); ti++)
    for (int64_t k = 1; k <= K; k++) {
      void *wd = make_weight(types[ti], N, k, &seed);
      RG_REQUIRE(wd);
      rg_wmat_t w = {wd, types[ti], N, k, RG_WLAYOUT_ROWS};
      for (int64_t i = 0; i < M * k; i++) x[i] = rng_uniform(&seed);
      for (size_t li = 0; li < COUNT(isas) && isas[li] <= rg_cpu_isa_best(); li++)
        for (int64_t m = 1; m <= M; m += M - 1) {
          // Exact x only: the GEMV path widens bf16 weights exactly below m
          // = 8, where vdpbf16ps starts (the case count below checks that
          // nothing was skipped).
          rg_matmul_opts_t o = {.isa = isas[li], .path = RG_MATMUL_GEMV};
          const char *kernel = rg_matmul_kernel_name_ex(&w, m, &o);
          if (strstr(kernel, "x in bf16")) continue;
          RG_REQUIRE_OK(rg_matmul_ref(x, m, &w, NULL, ref));
          for (int i = 0; i < M * N + GUARDS; i++) y[i] = -12345.0f;
          RG_REQUIRE_OK(rg_matmul_ex(NULL, x, m, &w, NULL, y, &o));
          double e = nmse(y, ref, (size_t)(m * N));
          int guards = 1;
          for (int64_t i = m * N; i < M * N + GUARDS; i++) guards &= y[i] == -12345.0f;
          cases++;
          if (!(e <= 1e-7) || !all_finite(y, (size_t)(m * N)) || !guards) {
            rg_test_fail(t, __FILE__, __LINE__, "%s: m=%lld k=%lld: nmse %.3g%s", kernel,
                         (long long)m, (long long)k, e, guards ? "" : ", wrote past y");
            li = COUNT(isas), m = M + 1, k = K + 1, ti = COUNT(types);
          }
        }
      free(wd);
    }
  RG_CHECK(cases >= 3 * K * 2);
}

// More threads than cores, so that threads finish their shares at different
// times and claim chunks from the back of each other's (see claim() in
// ops/cpu/matmul.c); every output must still be written exactly once.
RG_TEST(matmul_oversubscribed_pool_matches_reference) {
  rg_pool_t *pool;
  RG_REQUIRE_OK(rg_pool_create(5, &pool));
  uint64_t seed = 5;
  enum { M = 3, N = 1031, K = 256 };
  float *x = malloc(M * K * sizeof(float)), *y = malloc(M * N * sizeof(float)),
        *ref = malloc(M * N * sizeof(float));
  RG_REQUIRE(x && y && ref);
  for (int i = 0; i < M * K; i++) x[i] = rng_uniform(&seed);
  for (int ty = 0; ty < RG_DTYPE_COUNT; ty++) {
    if (!rg_dtype_has_codec((rg_dtype_t)ty)) continue;
    void *wd = make_weight((rg_dtype_t)ty, N, K, &seed);
    RG_REQUIRE(wd);
    rg_wmat_t w = {wd, (rg_dtype_t)ty, N, K, RG_WLAYOUT_ROWS};
    RG_REQUIRE_OK(rg_matmul_ref(x, M, &w, NULL, ref));
    for (int path = RG_MATMUL_GEMV; path <= RG_MATMUL_GEMM; path++)
      for (int rep = 0; rep < 20; rep++) {
        rg_matmul_opts_t o = {.isa = RG_CPU_ISA_AVX512, .path = (rg_matmul_path_t)path};
        if (rg_cpu_isa_best() < RG_CPU_ISA_AVX512) o.isa = RG_CPU_ISA_AUTO;
        for (int i = 0; i < M * N; i++) y[i] = NAN;
        RG_REQUIRE_OK(rg_matmul_ex(pool, x, M, &w, NULL, y, &o));
        double e = nmse(y, ref, M * N);
        if (!(e <= tolerance[ty]) || !all_finite(y, M * N)) {
          rg_test_fail(t, __FILE__, __LINE__, "%s with 5 threads: nmse %.3g",
                       rg_matmul_kernel_name_ex(&w, M, &o), e);
          rep = 20, path = RG_MATMUL_GEMM;
        }
      }
    free(wd);
  }
  free(x), free(y), free(ref);
  rg_pool_destroy(pool);
}

// Batch invariance: with opts.batch_invariant every row of y is the same
// bits whether it is computed alone (m = 1, decode), among a small batch
// (m = 13: whole and partial blocks of 4 rows, a leftover row) or in a
// prefill-sized one (m = 40: the tiles' prefill loop), at every level the
// CPU has and for every type. Without it the default choice may differ by
// m (the GEMV at m = 1, the tiles from m = 5), which is why it exists.
RG_TEST(matmul_batch_invariant_rows_match_at_every_m) {
  rg_pool_t *pool;
  RG_REQUIRE_OK(rg_pool_create(2, &pool));
  uint64_t seed = 11;
  enum { MB = 40, N = 70, K = 512 };
  static const int64_t ms[] = {13, MB};
  float *x = malloc(MB * K * sizeof(float)), *y = malloc(MB * N * sizeof(float)),
        *one = malloc(N * sizeof(float));
  RG_REQUIRE(x && y && one);
  for (int i = 0; i < MB * K; i++) x[i] = rng_uniform(&seed);
  int checked = 0;
  for (int isa = RG_CPU_ISA_SCALAR; isa <= (int)rg_cpu_isa_best(); isa++)
    for (int ty = 0; ty < RG_DTYPE_COUNT; ty++) {
      if (!rg_dtype_has_codec((rg_dtype_t)ty) && ty != RG_Q4_K && ty != RG_Q6_K) continue;
      void *wd = make_weight((rg_dtype_t)ty, N, K, &seed);
      if (!wd) continue;
      rg_wmat_t w = {wd, (rg_dtype_t)ty, N, K, RG_WLAYOUT_ROWS};
      rg_matmul_opts_t o = {.isa = (rg_cpu_isa_t)isa, .batch_invariant = 1};
      for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        const int64_t m = ms[mi];
        RG_REQUIRE_OK(rg_matmul_ex(pool, x, m, &w, NULL, y, &o));
        int bad = -1;
        for (int64_t i = 0; i < m && bad < 0; i++) {
          RG_REQUIRE_OK(rg_matmul_ex(pool, x + i * K, 1, &w, NULL, one, &o));
          if (memcmp(one, y + i * N, N * sizeof(float))) bad = (int)i;
        }
        if (bad >= 0)
          rg_test_fail(t, __FILE__, __LINE__,
                       "%s at %s: row %d of m = %lld differs from the same row alone (%s)",
                       rg_dtype_name((rg_dtype_t)ty), rg_cpu_isa_name((rg_cpu_isa_t)isa), bad,
                       (long long)m, rg_matmul_kernel_name_ex(&w, m, &o));
        checked++;
      }
      free(wd);
    }
  printf("    %d (level, type, m) cases bit for bit\n", checked);
  RG_CHECK(checked > 0);
  free(x), free(y), free(one);
  rg_pool_destroy(pool);
}

// The reference itself, on numbers small enough to check by hand.
RG_TEST(matmul_ref_small_example) {
  // x (2, 3), W (2, 3) as f32 and bf16 (all values exact in bf16 and f16).
  const float x[] = {1, 2, 3, -1, 0.5f, 0.25f};
  const float wf[] = {1, 0, -1, 0.5f, 2, 4};
  const float bias[] = {10, -10};
  // y[0] = {1-3, 0.5+4+12} = {-2, 16.5}; y[1] = {-1-0.25, -0.5+1+1} = {-1.25, 1.5}
  const float want[] = {8, 6.5f, 8.75f, -8.5f};
  uint16_t wb[6], wh[6];
  for (int i = 0; i < 6; i++) wb[i] = rg_f32_to_bf16(wf[i]), wh[i] = rg_f32_to_f16(wf[i]);
  const void *datas[] = {wf, wb, wh};
  for (int ty = 0; ty < 3; ty++) {
    rg_wmat_t w = {datas[ty], (rg_dtype_t)ty, 2, 3, RG_WLAYOUT_ROWS};
    float y[4];
    RG_REQUIRE_OK(rg_matmul_ref(x, 2, &w, bias, y));
    for (int i = 0; i < 4; i++) RG_CHECK(y[i] == want[i]);
    RG_REQUIRE_OK(rg_matmul(NULL, x, 2, &w, bias, y));
    for (int i = 0; i < 4; i++) RG_CHECK(y[i] == want[i]);
  }
  // q8_0: one row of 32 with d = 0.5 (f16 0x3800) and q = 0..31 against x = 1.
  unsigned char blk[34] = {0x00, 0x38};
  float ones[32], y1;
  for (int i = 0; i < 32; i++) blk[2 + i] = (unsigned char)i, ones[i] = 1.0f;
  rg_wmat_t wq = {blk, RG_Q8_0, 1, 32, RG_WLAYOUT_ROWS};
  RG_REQUIRE_OK(rg_matmul_ref(ones, 1, &wq, NULL, &y1));
  RG_CHECK(y1 == 0.5f * 496);
  RG_REQUIRE_OK(rg_matmul(NULL, ones, 1, &wq, NULL, &y1));
  RG_CHECK(y1 == 0.5f * 496);
}

// ---- Conversions ----------------------------------------------------------------

static int same_bits_or_both_nan(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  return memcmp(&a, &b, sizeof a) == 0;
}

RG_TEST(matmul_convert_scalar_round_trips) {
  // Every bf16 and f16 bit pattern widens and narrows back to itself; NaNs
  // stay NaN.
  int bad_bf16 = 0, bad_f16 = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float fb = rg_bf16_to_f32((uint16_t)h), fh = rg_f16_to_f32((uint16_t)h);
    if (isnan(fb) ? !isnan(rg_bf16_to_f32(rg_f32_to_bf16(fb))) : rg_f32_to_bf16(fb) != h)
      bad_bf16++;
    if (isnan(fh) ? !isnan(rg_f16_to_f32(rg_f32_to_f16(fh))) : rg_f32_to_f16(fh) != h) bad_f16++;
  }
  RG_CHECK(bad_bf16 == 0);
  RG_CHECK(bad_f16 == 0);
  // Known values: limits, subnormals, ties to even.
  RG_CHECK(rg_f32_to_f16(65504.0f) == 0x7bff);
  RG_CHECK(rg_f32_to_f16(65519.0f) == 0x7bff);
  RG_CHECK(rg_f32_to_f16(65520.0f) == 0x7c00);
  RG_CHECK(rg_f32_to_f16(-INFINITY) == 0xfc00);
  RG_CHECK(rg_f32_to_f16(0x1p-24f) == 0x0001);
  RG_CHECK(rg_f32_to_f16(0x1p-25f) == 0x0000);         // tie: to even (0)
  RG_CHECK(rg_f32_to_f16(3 * 0x1p-25f) == 0x0002);     // tie between 1 and 2: to 2
  RG_CHECK(rg_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00);  // tie: to even (1.0)
  RG_CHECK(rg_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02);
  RG_CHECK(rg_f16_to_f32(0x3555) == 0x1.554p-2f);
  RG_CHECK(rg_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);  // tie: to even
  RG_CHECK(rg_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);
  RG_CHECK(rg_f32_to_bf16(3.4e38f) == 0x7f80);  // rounds past the largest bf16
  RG_CHECK(isnan(rg_bf16_to_f32(rg_f32_to_bf16(NAN))));
}

// Each level's row conversions give the scalar helpers' bits, over every
// 16-bit pattern one way and over random f32 bit patterns (plus all widened
// 16-bit values, the round-trip cases) the other way.
RG_TEST(matmul_convert_rows_match_scalar_at_every_level) {
  enum { N16 = 65536, NR32 = 1 << 17 };
  uint16_t *h = malloc(N16 * sizeof(uint16_t)), *h2 = malloc((N16 + NR32) * sizeof(uint16_t));
  float *f = malloc((N16 + NR32) * sizeof(float));
  RG_REQUIRE(h && h2 && f);
  for (uint32_t i = 0; i < N16; i++) h[i] = (uint16_t)i;
  uint64_t seed = 42;
  int tested = 0;
  for (int isa = RG_CPU_ISA_SCALAR; isa < RG_CPU_ISA_COUNT; isa++) {
    rg_cpu_isa_t got;
    rg_status_t st = rg_cpu_isa_resolve((rg_cpu_isa_t)isa, &got);
    if (st) {
      rg_status_free(st);
      continue;
    }
    tested++;
    for (int ty = RG_BF16; ty <= RG_F16; ty++) {
      float (*widen)(uint16_t) = ty == RG_BF16 ? rg_bf16_to_f32 : rg_f16_to_f32;
      uint16_t (*narrow)(float) = ty == RG_BF16 ? rg_f32_to_bf16 : rg_f32_to_f16;
      // Odd lengths and offsets reach the vector tails.
      RG_REQUIRE_OK(rg_row_to_f32_isa((rg_cpu_isa_t)isa, (rg_dtype_t)ty, h + 1, f + 1, N16 - 1));
      f[0] = widen(0);
      int bad = 0;
      for (uint32_t i = 0; i < N16; i++) bad += !same_bits_or_both_nan(f[i], widen(h[i]));
      if (bad)
        rg_test_fail(t, __FILE__, __LINE__, "%s %s->f32: %d of 65536 differ from scalar",
                     rg_cpu_isa_name((rg_cpu_isa_t)isa), rg_dtype_name((rg_dtype_t)ty), bad);
      for (uint32_t i = 0; i < NR32; i++) {
        uint32_t b = (uint32_t)rng_next(&seed);
        memcpy(&f[N16 + i], &b, 4);
      }
      RG_REQUIRE_OK(rg_row_from_f32_isa((rg_cpu_isa_t)isa, (rg_dtype_t)ty, f, h2, N16 + NR32 - 3));
      bad = 0;
      for (uint32_t i = 0; i < N16 + NR32 - 3; i++) {
        uint16_t want = narrow(f[i]);
        bad += isnan(f[i]) ? !isnan(widen(h2[i])) : h2[i] != want;
      }
      if (bad)
        rg_test_fail(t, __FILE__, __LINE__, "%s f32->%s: %d values differ from scalar",
                     rg_cpu_isa_name((rg_cpu_isa_t)isa), rg_dtype_name((rg_dtype_t)ty), bad);
    }
  }
  RG_CHECK(tested >= 1);
  free(h), free(h2), free(f);
}

// Quantize -> dequantize: every error within half the block's scale plus the
// f16 rounding of that scale (ggml's rule divides by the unrounded d: see
// base/dtype.h), the scale within 1/127 of the block's largest magnitude (to
// f16 rounding), and values already on the grid come back exactly.
RG_TEST(matmul_q8_0_error_bound) {
  enum { N = 32 * 64 };
  float x[N], back[N];
  unsigned char q[N / 32 * 34];
  uint64_t seed = 7;
  const float scales[] = {1e-2f, 1.0f, 37.0f, 1e4f};
  for (size_t s = 0; s < COUNT(scales); s++) {
    for (int i = 0; i < N; i++) x[i] = scales[s] * rng_uniform(&seed) * (i % 97 == 0 ? 8.0f : 1.0f);
    for (int i = 0; i < 32; i++) x[i] = 0.0f;  // an all-zero block: d = 0
    RG_REQUIRE_OK(rg_q8_0_quantize_row(x, q, N));
    RG_REQUIRE_OK(rg_q8_0_dequantize_row(q, back, N));
    for (int b = 0; b < N / 32; b++) {
      uint16_t hd;
      memcpy(&hd, q + 34 * b, 2);
      float d = rg_f16_to_f32(hd), amax = 0;
      for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * b + i]));
      float bound = 0.5f * d + 127.0f * fabsf(d - amax / 127.0f);
      RG_CHECK(d <= amax / 127.0f * (1.0f + 0x1p-11f) && d >= amax / 127.0f * (1.0f - 0x1p-11f));
      for (int i = 0; i < 32; i++) {
        float err = fabsf(x[32 * b + i] - back[32 * b + i]);
        if (!(err <= bound * (1.0f + 1e-6f))) {
          rg_test_fail(t, __FILE__, __LINE__, "scale %g block %d: |%g - %g| > %g",
                       (double)scales[s], b, (double)x[32 * b + i], (double)back[32 * b + i],
                       (double)bound);
          return;
        }
      }
    }
    // Every level dequantizes to the same bits.
    for (int isa = RG_CPU_ISA_SCALAR; isa < RG_CPU_ISA_COUNT; isa++) {
      float other[N];
      rg_status_t st = rg_row_to_f32_isa((rg_cpu_isa_t)isa, RG_Q8_0, q, other, N);
      if (st && rg_status_code(st) == RG_UNAVAILABLE) {
        rg_status_free(st);
        continue;
      }
      RG_REQUIRE_OK(st);
      RG_CHECK(memcmp(other, back, sizeof back) == 0);
    }
  }
  // ggml's reference rounds x/d half away from zero with the unrounded d:
  // amax 1.27 gives d = 0.01 (stored as f16 0x211f), and 0.005 / 0.01 = 0.5
  // rounds to 1, -0.015 to -2 (ties away), 0.0049 to 0.
  for (int i = 0; i < 32; i++) x[i] = 0.0f;
  x[0] = 1.27f, x[1] = 0.005f, x[2] = -0.015f, x[3] = 0.0049f;
  RG_REQUIRE_OK(rg_q8_0_quantize_row(x, q, 32));
  uint16_t d01;
  memcpy(&d01, q, 2);
  RG_CHECK(d01 == rg_f32_to_f16(1.27f / 127.0f));
  RG_CHECK((int8_t)q[2] == 127 && (int8_t)q[3] == 1 && (int8_t)q[4] == -2 && (int8_t)q[5] == 0);
  // On the grid: d = 0.25 (exact in f16), q spanning -127..127.
  for (int i = 0; i < 64; i++) x[i] = 0.25f * (float)((i * 37) % 255 - 127);
  x[0] = 0.25f * 127;
  x[32] = -0.25f * 127;
  RG_REQUIRE_OK(rg_q8_0_quantize_row(x, q, 64));
  RG_REQUIRE_OK(rg_q8_0_dequantize_row(q, back, 64));
  RG_CHECK(memcmp(x, back, 64 * sizeof(float)) == 0);
}

RG_TEST(matmul_rejects_bad_input_with_clear_messages) {
  float x[64] = {0}, y[4] = {1, 2, 3, 4};
  unsigned char q[34 * 2] = {0};
  size_t rb;
  RG_CHECK_ERR(rg_dtype_row_bytes(RG_Q8_0, 40, &rb), "q8_0 rows must be a multiple of 32 wide");
  RG_CHECK_OK(rg_dtype_row_bytes(RG_Q8_0, 64, &rb));
  RG_CHECK(rb == 68);
  RG_CHECK_OK(rg_dtype_row_bytes(RG_BF16, 5, &rb));
  RG_CHECK(rb == 10);
  RG_CHECK_ERR(rg_q8_0_quantize_row(x, q, 33), "q8_0 rows must be a multiple of 32 wide");
  RG_CHECK_ERR(rg_q8_0_dequantize_row(q, x, 33), "q8_0 rows must be a multiple of 32 wide");
  // A q8_0 weight whose rows are 40 wide: rejected, y untouched, no crash.
  rg_wmat_t bad = {q, RG_Q8_0, 1, 40, RG_WLAYOUT_ROWS};
  RG_CHECK_ERR(rg_matmul(NULL, x, 1, &bad, NULL, y), "q8_0 rows must be a multiple of 32 wide");
  RG_CHECK_ERR(rg_matmul(NULL, x, 1, &bad, NULL, y), "weight (1, 40)");
  RG_CHECK_ERR(rg_matmul_ref(x, 1, &bad, NULL, y), "q8_0 rows must be a multiple of 32 wide");
  RG_CHECK(y[0] == 1 && y[1] == 2 && y[2] == 3 && y[3] == 4);
  RG_CHECK(strcmp(rg_matmul_kernel_name(&bad, 1), "invalid") == 0);
  // Values q8_0 cannot hold.
  x[3] = NAN;
  RG_CHECK_ERR(rg_q8_0_quantize_row(x, q, 32), "cannot hold value nan at index 3");
  x[3] = 1e7f;
  RG_CHECK_ERR(rg_q8_0_quantize_row(x, q, 32), "scale overflows f16");
  x[3] = 0;
  // Shapes and pointers.
  rg_wmat_t w = {q, RG_Q8_0, 2, 32, RG_WLAYOUT_ROWS};
  RG_CHECK_ERR(rg_matmul(NULL, x, -1, &w, NULL, y), "negative m");
  RG_CHECK_ERR(rg_matmul(NULL, NULL, 1, &w, NULL, y), "x is NULL");
  RG_CHECK_ERR(rg_matmul(NULL, x, 1, NULL, NULL, y), "no weight matrix");
  rg_wmat_t empty = {q, RG_F32, 0, 32, RG_WLAYOUT_ROWS};
  RG_CHECK_ERR(rg_matmul(NULL, x, 1, &empty, NULL, y), "both must be >= 1");
  rg_wmat_t unknown = {q, (rg_dtype_t)99, 1, 32, RG_WLAYOUT_ROWS};
  RG_CHECK_ERR(rg_matmul(NULL, x, 1, &unknown, NULL, y), "unknown weight type 99");
  RG_CHECK_OK(rg_matmul(NULL, x, 0, &w, NULL, y));  // m = 0: nothing to do
  rg_matmul_opts_t o = {.path = (rg_matmul_path_t)7};
  RG_CHECK_ERR(rg_matmul_ex(NULL, x, 1, &w, NULL, y, &o), "unknown path 7");
  RG_CHECK(y[0] == 1 && y[3] == 4);
  // A level above this CPU's is refused, not run.
  if (rg_cpu_isa_best() < RG_CPU_ISA_AVX512_BF16) {
    o = (rg_matmul_opts_t){.isa = RG_CPU_ISA_AVX512_BF16};
    RG_CHECK_ERR(rg_matmul_ex(NULL, x, 1, &w, NULL, y, &o), "which this CPU lacks");
  }
  // The tiles: refused below the amx level, saying why, and for f32.
  uint16_t wb[32] = {0};
  rg_wmat_t b16 = {wb, RG_BF16, 1, 32, RG_WLAYOUT_ROWS};
  o = (rg_matmul_opts_t){.isa = RG_CPU_ISA_AVX512, .path = RG_MATMUL_TILES};
  if (rg_cpu_isa_best() >= RG_CPU_ISA_AVX512)
    RG_CHECK_ERR(rg_matmul_ex(NULL, x, 1, &b16, NULL, y, &o),
                 "the tiles path needs the amx level; the level is capped at avx512");
  const char *why = NULL;
  RG_CHECK(!rg_matmul_tiles_available(RG_CPU_ISA_AVX512, &why) && why);
  o = (rg_matmul_opts_t){.path = RG_MATMUL_TILES};
  if (rg_matmul_tiles_available(RG_CPU_ISA_AUTO, &why)) {
    RG_CHECK(why == NULL);
    rg_wmat_t f32 = {x, RG_F32, 1, 32, RG_WLAYOUT_ROWS};
    RG_CHECK_ERR(rg_matmul_ex(NULL, x, 1, &f32, NULL, y, &o), "not f32");
  } else {
    RG_CHECK(why != NULL);
    RG_CHECK_ERR(rg_matmul_ex(NULL, x, 1, &b16, NULL, y, &o), "the tiles path needs the amx level");
    RG_CHECK_ERR(rg_cpu_isa_resolve(RG_CPU_ISA_AMX, &(rg_cpu_isa_t){0}), "amx kernels need");
  }
  // k-quant rows must be whole super-blocks.
  rg_wmat_t kq = {q, RG_Q4_K, 1, 300, RG_WLAYOUT_ROWS};
  RG_CHECK_ERR(rg_matmul(NULL, x, 1, &kq, NULL, y), "q4_K rows must be a multiple of 256 wide");
  RG_CHECK(y[0] == 1 && y[3] == 4);
}

RG_TEST(matmul_kernel_names) {
  unsigned char q[34] = {0};
  rg_wmat_t w = {q, RG_Q8_0, 1, 32, RG_WLAYOUT_ROWS};
  rg_matmul_opts_t o = {.isa = RG_CPU_ISA_SCALAR};
  RG_CHECK(strcmp(rg_matmul_kernel_name_ex(&w, 1, &o), "scalar q8_0 gemv") == 0);
  RG_CHECK(strcmp(rg_matmul_kernel_name_ex(&w, 512, &o),
                  "openblas sgemm on scalar q8_0->f32 tiles") == 0);
  w.type = RG_F32;
  RG_CHECK(strcmp(rg_matmul_kernel_name_ex(&w, 512, &o), "openblas sgemm") == 0);
  RG_CHECK(strstr(rg_matmul_kernel_name(&w, 1), "f32 gemv") != NULL);
  uint16_t wb[32] = {0};
  rg_wmat_t b16 = {wb, RG_BF16, 1, 32, RG_WLAYOUT_ROWS}, f32 = {wb, RG_F32, 1, 8, RG_WLAYOUT_ROWS};
  rg_matmul_opts_t tiles = {.path = RG_MATMUL_TILES};
  if (rg_matmul_tiles_available(RG_CPU_ISA_AUTO, NULL)) {
    RG_CHECK(strcmp(rg_matmul_kernel_name_ex(&b16, 1, &tiles), "amx bf16 tiles (x in bf16)") == 0);
    RG_CHECK(strcmp(rg_matmul_kernel_name(&b16, 64), "amx bf16 tiles (x in bf16)") == 0);
    // Batch-1 to 4 decode streams faster through the widening GEMV.
    RG_CHECK(strstr(rg_matmul_kernel_name(&b16, 1), "bf16 gemv") != NULL);
    RG_CHECK(strstr(rg_matmul_kernel_name(&b16, 4), "bf16 gemv") != NULL);
    RG_CHECK(strcmp(rg_matmul_kernel_name(&b16, 5), "amx bf16 tiles (x in bf16)") == 0);
    rg_wmat_t h = {wb, RG_F16, 1, 32, RG_WLAYOUT_ROWS};
    RG_CHECK(strcmp(rg_matmul_kernel_name(&h, 64), "amx f16->bf16 tiles (x, w in bf16)") == 0);
  } else {
    RG_CHECK(strcmp(rg_matmul_kernel_name_ex(&b16, 1, &tiles), "invalid") == 0);
  }
  RG_CHECK(strcmp(rg_matmul_kernel_name_ex(&f32, 64, &tiles), "invalid") == 0);
  if (rg_cpu_isa_best() >= RG_CPU_ISA_AVX512_BF16) {
    rg_matmul_opts_t cap = {.isa = RG_CPU_ISA_AVX512_BF16};
    rg_wmat_t k4 = {wb, RG_Q4_K, 1, 256, RG_WLAYOUT_ROWS};
    // The VNNI kernels where the CPU has AVX512_VNNI (vpdpbusd at m = 1 but
    // in batch-invariant mode, vpdpwssd for more rows), else vdpbf16ps.
    const int vnni = __builtin_cpu_supports("avx512vnni");
    const char *want1 = vnni ? "avx512-bf16 q4_K gemv (vpdpbusd, x in int16 as 2 int8)"
                             : "avx512-bf16 q4_K gemv (vdpbf16ps, x as bf16 hi+lo)",
               *want2 = vnni ? "avx512-bf16 q4_K gemv (vpdpwssd, x in int16)"
                             : "avx512-bf16 q4_K gemv (vdpbf16ps, x as bf16 hi+lo)";
    RG_CHECK(strcmp(rg_matmul_kernel_name_ex(&k4, 1, &cap), want1) == 0);
    RG_CHECK(strcmp(rg_matmul_kernel_name_ex(&k4, 2, &cap), want2) == 0);
    rg_matmul_opts_t inv = {.isa = RG_CPU_ISA_AVX512_BF16, .batch_invariant = 1};
    RG_CHECK(strcmp(rg_matmul_kernel_name_ex(&k4, 1, &inv), want2) == 0);
  }
  RG_CHECK(strcmp(rg_dtype_name(RG_BF16), "bf16") == 0);
  RG_CHECK(strcmp(rg_dtype_name((rg_dtype_t)42), "?") == 0);
}
