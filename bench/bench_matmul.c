// Matmul throughput against this machine's own limits, measured in the same
// run by runtime/limits.h (the code `ridge run` and `ridge profile` use):
// STREAM-style read bandwidth and the matrix peak of each instruction path
// (f32 FMA, AVX512_BF16 dot, AMX-BF16 and AMX-INT8 tiles where present),
// plus OpenBLAS sgemm on its own threads. Then
//   decode   m = 1, 4 and 16 for every weight type at n = k = 2048 and
//            n = 8192, k = 2048, plus one Llama-3.2-1B-shaped bf16 layer at
//            m = 1: GB/s of weights streamed and the ratio to the read
//            bandwidth, and for m > 1 the share of the path's peak; where
//            the default path is not the GEMV, the GEMV too, so the choice
//            of tiles_min_m() can be checked, and where the CPU device packs
//            a type at load (bf16 at avx512-bf16), the packed panels a
//            stage runs (--decode-only stops here);
//   prefill  m = 512, n = k = 2048 on each path the CPU has (and on panels
//            packed at load where the CPU device packs): GFLOP/s, the
//            ratio to sgemm and to the matrix peak of the path it runs;
//   accuracy of the kernels that round against the double reference;
//   crossover GFLOP/s of the GEMV, GEMM and tile paths over m, which set
//            DP_MIN_M, gemm_min_m() and tiles_min_m() in ops/cpu/matmul.c.
// Weights are cycled through enough copies (>= 256 MiB) that every call
// streams them from DRAM, as a real model's layers do. Timings are the best
// of several repetitions. Prints ratios; never fails on a timing.
//
// The m = 1 kernels can read faster than the plain sum (105-135% on a 2-core
// Zen 5 VM, also with a 1 GiB footprint): their software prefetch keeps
// more lines in flight than the sum's hardware prefetchers do.
//
// Run it as `env -u OPENBLAS_CORETYPE build/bench_matmul [threads]
// [--no-crossover] [--decode-only] [--layer-only] [--small-m] [--only TYPE,...]` (--only: the
// small-m table for those weight types and nothing else, for A/B runs): this environment pins
// OPENBLAS_CORETYPE=Haswell, which holds OpenBLAS to its AVX2 kernels, and a process cannot
// reliably unset it for itself before OpenBLAS reads it at load time. The value seen is printed,
// and the matmul's choice of path follows the kernels OpenBLAS uses.
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "base/hugemem.h"
#include "base/pool.h"
#include "ops/convert.h"
#include "ops/matmul.h"
#include "runtime/limits.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(rg_status_t s) {
  if (!s) return;
  fprintf(stderr, "bench_matmul: %s\n", rg_status_message(s));
  exit(1);
}

// Large buffers on 2 MiB pages where the kernel gives them, as a stage's
// weights are (base/hugemem.h), and still released with free().
static void *xmalloc(size_t n) {
  const size_t huge = (size_t)2 << 20;
  void *p = n >= huge ? aligned_alloc(huge, (n + huge - 1) / huge * huge)
                      : aligned_alloc(64, (n + 63) / 64 * 64);
  if (p && n >= huge) madvise(p, (n + huge - 1) / huge * huge, MADV_HUGEPAGE);
  if (!p) {
    fprintf(stderr, "bench_matmul: out of memory (%zu bytes)\n", n);
    exit(1);
  }
  return p;
}

static uint64_t seed = 1;
static float frand(void) {
  seed = seed * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(seed >> 40) / (double)(1 << 24) * 2.0 - 1.0);
}

// ---- Machine limits ------------------------------------------------------------

typedef struct {
  const float *a;
  size_t n;
  double partial[1024];
} sum_ctx_t;

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static double sum_avx512(const float *a, size_t b, size_t e) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = b; i < e; i += 64) {
    s0 = _mm512_add_ps(s0, _mm512_load_ps(a + i));
    s1 = _mm512_add_ps(s1, _mm512_load_ps(a + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_load_ps(a + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_load_ps(a + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}
#endif

static double sum_plain(const float *a, size_t b, size_t e) {
  float s[16] = {0};
  for (size_t i = b; i < e; i += 16)
    for (int q = 0; q < 16; q++) s[q] += a[i + q];
  double t = 0;
  for (int q = 0; q < 16; q++) t += s[q];
  return t;
}

// Items are 64-float (256-byte) chunks; each thread sums one contiguous share.
static void sum_worker(void *ctx, size_t b, size_t e, int thread) {
  sum_ctx_t *c = ctx;
#if defined(__x86_64__)
  if (rg_cpu_isa_best() >= RG_CPU_ISA_AVX512) {
    c->partial[thread] += sum_avx512(c->a, b * 64, e * 64);
    return;
  }
#endif
  c->partial[thread] += sum_plain(c->a, b * 64, e * 64);
}

// The best of `reps` sums of a (n floats, all 1).
static double sum_bandwidth(rg_pool_t *pool, const float *a, size_t n, int reps) {
  double best = 0;
  for (int rep = 0; rep < reps; rep++) {
    sum_ctx_t c = {.a = a, .n = n};
    double t0 = now();
    rg_pool_parallel_for(pool, n / 64, 1024, sum_worker, &c);
    double dt = now() - t0, s = 0;
    for (int i = 0; i < 1024; i++) s += c.partial[i];
    if (s != (double)n) printf("  (sum check failed: %.0f)\n", s);
    if ((double)n * sizeof(float) / dt > best) best = (double)n * sizeof(float) / dt;
  }
  return best;
}

// STREAM-style read bandwidth: the best of 7 sums of a 512 MiB array.
// On huge pages, as runtime/limits reads and the engine's weights sit.
static double read_bandwidth(rg_pool_t *pool) {
  const size_t bytes = (size_t)512 << 20;
  size_t mapped;
  float *a = rg_hugemem_alloc(bytes, &mapped);
  if (!a) die(rg_status_make(RG_OUT_OF_MEMORY, "out of memory for the bandwidth reading"));
  size_t n = bytes / sizeof(float);
  for (size_t i = 0; i < n; i++) a[i] = 1.0f;
  double best = sum_bandwidth(pool, a, n, 7);
  rg_hugemem_free(a, mapped);
  return best;
}

// OpenBLAS on its own threads, the whole problem in one call.
static double sgemm_gflops(int threads, int m, int n, int k) {
  float *x = xmalloc((size_t)m * k * 4), *w = xmalloc((size_t)n * k * 4),
        *y = xmalloc((size_t)m * n * 4);
  for (size_t i = 0; i < (size_t)m * k; i++) x[i] = frand();
  for (size_t i = 0; i < (size_t)n * k; i++) w[i] = frand();
  openblas_set_num_threads(threads);
  double best = 0;
  for (int rep = 0; rep < 6; rep++) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, k, w, k, 0.0f, y, n);
    double dt = now() - t0;
    if (2.0 * m * n * k / dt > best) best = 2.0 * m * n * k / dt;
  }
  free(x), free(w), free(y);
  return best;
}

// ---- Matmul measurements ------------------------------------------------------------

// `copies` distinct copies of one random (n, k) weight of type t, so that
// cycling through them streams from DRAM. Returns the base; copy c starts at
// c * bytes.
static unsigned char *make_copies(rg_dtype_t t, int64_t n, int64_t k, int copies,
                                  size_t *out_bytes) {
  size_t rb;
  die(rg_dtype_row_bytes(t, k, &rb));
  size_t bytes = rb * (size_t)n;
  unsigned char *w = xmalloc(bytes * (size_t)copies);
  float *row = xmalloc((size_t)k * 4);
  for (int64_t r = 0; r < n; r++) {
    if (!rg_dtype_can_narrow(t)) {
      // The k-quants, which ridge only reads: random blocks with scales
      // that keep the weights near ±1.
      unsigned char *p = w + (size_t)r * rb;
      for (size_t i = 0; i < rb; i++) p[i] = (unsigned char)(frand() * 127.5f + 128);
      for (size_t b = 0; b < rb; b += (size_t)rg_dtype_block_bytes(t)) {
        uint16_t d = rg_f32_to_f16(t == RG_Q4_K ? 2e-3f : 1.5e-4f), dm = rg_f32_to_f16(1e-3f);
        if (t == RG_Q4_K)
          memcpy(p + b, &d, 2), memcpy(p + b + 2, &dm, 2);
        else
          memcpy(p + b + 208, &d, 2);
      }
      continue;
    }
    for (int64_t p = 0; p < k; p++) row[p] = frand();
    die(rg_row_from_f32(t, row, w + (size_t)r * rb, k));
  }
  for (int c = 1; c < copies; c++) memcpy(w + (size_t)c * bytes, w, bytes);
  free(row);
  *out_bytes = bytes;
  return w;
}

// The copies packed as the CPU device asks a stage to (bf16 panels at the
// avx512-bf16 level, f16 ones at avx512 and avx512-bf16:
// rg_matmul_preferred_layout), or NULL where it keeps rows. Copy c starts at c * *out_bytes.
static unsigned char *packed_copies(rg_pool_t *pool, rg_dtype_t t, int64_t n, int64_t k,
                                    const unsigned char *w, size_t bytes, int copies,
                                    size_t *out_bytes) {
  rg_wlayout_t l = rg_matmul_preferred_layout(RG_CPU_ISA_AUTO, t);
  if (l == RG_WLAYOUT_ROWS) return NULL;
  size_t pb = (rg_matmul_layout_bytes(l, t, n, k) + 63) / 64 * 64;
  unsigned char *p = xmalloc(pb * (size_t)copies);
  for (int c = 0; c < copies; c++) {
    rg_wmat_t rows = {w + (size_t)c * bytes, t, n, k, RG_WLAYOUT_ROWS};
    die(rg_matmul_relayout(pool, &rows, l, p + (size_t)c * pb));
  }
  *out_bytes = pb;
  return p;
}

static int copies_for(size_t bytes) {
  size_t want = (size_t)256 << 20;
  int c = (int)((want + bytes - 1) / bytes);
  return c < 2 ? 2 : c;
}

// Seconds per call, best of reps, each rep cycling through all copies.
static double time_layout(rg_pool_t *pool, const float *x, int64_t m, rg_dtype_t t, int64_t n,
                          int64_t k, rg_wlayout_t layout, const unsigned char *w, size_t bytes,
                          int copies, float *y, const rg_matmul_opts_t *o, int reps) {
  double best = 1e30;
  for (int rep = 0; rep < reps; rep++) {
    double t0 = now();
    for (int c = 0; c < copies; c++) {
      rg_wmat_t wm = {w + (size_t)c * bytes, t, n, k, layout};
      die(rg_matmul_ex(pool, x, m, &wm, NULL, y, o));
    }
    double dt = (now() - t0) / copies;
    if (dt < best) best = dt;
  }
  return best;
}

static double time_matmul(rg_pool_t *pool, const float *x, int64_t m, rg_dtype_t t, int64_t n,
                          int64_t k, const unsigned char *w, size_t bytes, int copies, float *y,
                          const rg_matmul_opts_t *o, int reps) {
  return time_layout(pool, x, m, t, n, k, RG_WLAYOUT_ROWS, w, bytes, copies, y, o, reps);
}

static const rg_dtype_t types[] = {RG_BF16, RG_F16, RG_Q8_0, RG_Q4_K, RG_Q6_K, RG_F32};
static rg_limits_t lim;

// The peak of the path a kernel runs, from its name.
static double path_peak(const char *kernel, const char **path) {
  if (!strncmp(kernel, "amx", 3)) return *path = "amx-bf16", lim.amx_bf16_peak;
  if (strstr(kernel, "vdpbf16ps")) return *path = "bf16 dot", lim.bf16_dot_peak;
  return *path = "f32 fma", lim.fma_peak;
}

// One row of the decode table: the call's weight stream against the read
// bandwidth, and above m = 1 its FLOP/s against its path's peak.
static void decode_row(rg_dtype_t t, int64_t n, int64_t k, int64_t m, const char *kn, double dt,
                       size_t bytes, double bw) {
  double gbs = (double)bytes / dt, gf = 2.0 * m * n * k / dt;
  printf("%-6s %5lld x %-4lld %4lld %-56s %9.1f %7.1f %6.0f%% %8.1f", rg_dtype_name(t),
         (long long)n, (long long)k, (long long)m, kn, dt * 1e6, gbs / 1e9, 100 * gbs / bw,
         gf / 1e9);
  const char *pp;
  double pk = path_peak(kn, &pp);
  if (m > 1 && pk > 0) printf("  (%.0f%% of %s peak)", 100 * gf / pk, pp);
  printf("\n");
}

static void decode_table(rg_pool_t *pool, double bw) {
  printf("\ndecode (GEMV): weight GB/s streamed per call, and ratio to read bandwidth %.1f GB/s\n",
         bw / 1e9);
  printf("%-6s %-12s %4s %-56s %9s %7s %7s %8s\n", "type", "n x k", "m", "kernel", "us/call",
         "GB/s", "vs bw", "GFLOP/s");
  const int64_t shapes[][2] = {{2048, 2048}, {8192, 2048}}, ms[] = {1, 4, 16};
  float *x = xmalloc(16 * 2048 * 4), *y = xmalloc(16 * 8192 * 4);
  for (int i = 0; i < 16 * 2048; i++) x[i] = frand();
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
    for (int s = 0; s < 2; s++) {
      int64_t n = shapes[s][0], k = shapes[s][1];
      size_t bytes;
      size_t rb;
      die(rg_dtype_row_bytes(types[ti], k, &rb));
      int copies = copies_for(rb * (size_t)n);
      unsigned char *w = make_copies(types[ti], n, k, copies, &bytes);
      for (int mi = 0; mi < 3 * 2; mi++) {
        // Each m with the default path, then, where that is not the GEMV,
        // with the GEMV forced, so the two can be compared.
        int64_t m = ms[mi / 2];
        rg_wmat_t wm = {w, types[ti], n, k, RG_WLAYOUT_ROWS};
        const rg_matmul_opts_t gemv = {.path = RG_MATMUL_GEMV};
        const rg_matmul_opts_t *o = mi % 2 ? &gemv : NULL;
        if (mi % 2 && !strcmp(rg_matmul_kernel_name(&wm, m), rg_matmul_kernel_name_ex(&wm, m, o)))
          continue;
        double dt = time_matmul(pool, x, m, types[ti], n, k, w, bytes, copies, y, o, 10);
        decode_row(types[ti], n, k, m, rg_matmul_kernel_name_ex(&wm, m, o), dt, bytes, bw);
      }
      // Packed at load, as a stage on this CPU holds them (where it packs).
      size_t pbytes;
      unsigned char *pw = packed_copies(pool, types[ti], n, k, w, bytes, copies, &pbytes);
      for (int mi = 0; pw && mi < 3; mi++) {
        int64_t m = ms[mi];
        rg_wlayout_t l = rg_matmul_preferred_layout(RG_CPU_ISA_AUTO, types[ti]);
        rg_wmat_t wm = {pw, types[ti], n, k, l};
        double dt = time_layout(pool, x, m, types[ti], n, k, l, pw, pbytes, copies, y, NULL, 10);
        decode_row(types[ti], n, k, m, rg_matmul_kernel_name(&wm, m), dt, bytes, bw);
      }
      free(pw);
      free(w);
    }
  free(x), free(y);
}

// One decoder layer of Llama-3.2-1B (d 2048, 8 KV heads of 64, FFN 8192),
// bf16, m = 1: q, k, v, o, gate, up, down, cycled over enough layers' copies
// to exceed any cache, in rows and, where the CPU device asks a stage for
// another layout (packed panels at avx512-bf16), in that one too: the
// engine's decode runs the packed form there.
static void llama_layer_in(rg_pool_t *pool, double bw, int packed) {
  const int64_t mats[7][2] = {{2048, 2048}, {512, 2048},  {512, 2048}, {2048, 2048},
                              {8192, 2048}, {8192, 2048}, {2048, 8192}};
  enum { LAYERS = 4 };
  rg_wlayout_t layout =
      packed ? rg_matmul_preferred_layout(RG_CPU_ISA_AUTO, RG_BF16) : RG_WLAYOUT_ROWS;
  unsigned char *w[7];
  size_t bytes[7], layer_bytes = 0;
  for (int i = 0; i < 7; i++) {
    w[i] = make_copies(RG_BF16, mats[i][0], mats[i][1], LAYERS, &bytes[i]);
    if (packed) {
      size_t pb;
      unsigned char *p =
          packed_copies(pool, RG_BF16, mats[i][0], mats[i][1], w[i], bytes[i], LAYERS, &pb);
      free(w[i]);
      w[i] = p, bytes[i] = pb;
    }
    layer_bytes += bytes[i];
  }
  float *x = xmalloc(8192 * 4), *y = xmalloc(8192 * 4);
  for (int i = 0; i < 8192; i++) x[i] = frand();
  double best = 1e30, best_each[7];
  for (int rep = 0; rep < 8; rep++) {
    double t0 = now(), each[7] = {0};
    for (int l = 0; l < LAYERS; l++)
      for (int i = 0; i < 7; i++) {
        rg_wmat_t wm = {w[i] + (size_t)l * bytes[i], RG_BF16, mats[i][0], mats[i][1], layout};
        double t1 = now();
        die(rg_matmul(pool, x, 1, &wm, NULL, y));
        each[i] += now() - t1;
      }
    double dt = (now() - t0) / LAYERS;
    if (dt < best) best = dt, memcpy(best_each, each, sizeof each);
  }
  double gbs = (double)layer_bytes / best;
  printf(
      "llama-3.2-1b layer, bf16 %s, m=1 (7 matrices, %.1f MB): %.0f us/layer, %.1f GB/s = %.0f%% "
      "of read bandwidth (goal >= 90%%)\n",
      packed ? "packed at load" : "rows", layer_bytes / 1e6, best * 1e6, gbs / 1e9, 100 * gbs / bw);
  // Per matrix of that best layer: the small ones pay the call's fixed cost
  // (waking the pool, the first lines' latency) on few bytes.
  static const char *const names[7] = {"q", "k", "v", "o", "gate", "up", "down"};
  printf("  per matrix:");
  for (int i = 0; i < 7; i++)
    printf(" %s %lldx%lld %.0f us %.0f%%", names[i], (long long)mats[i][0], (long long)mats[i][1],
           best_each[i] / LAYERS * 1e6, 100.0 * (double)bytes[i] * LAYERS / best_each[i] / bw);
  printf("\n");
  for (int i = 0; i < 7; i++) free(w[i]);
  free(x), free(y);
}

static void llama_layer(rg_pool_t *pool, double bw) {
  llama_layer_in(pool, bw, 0);
  if (rg_matmul_preferred_layout(RG_CPU_ISA_AUTO, RG_BF16) != RG_WLAYOUT_ROWS)
    llama_layer_in(pool, bw, 1);
}

static void prefill_table(rg_pool_t *pool, double sgemm) {
  const int64_t m = 512, n = 2048, k = 2048;
  printf(
      "\nprefill m=%lld n=%lld k=%lld: GFLOP/s, ratio to OpenBLAS sgemm %.1f GFLOP/s, and to the "
      "matrix peak of the path run (goal >= 0.6 of the best path's peak)\n",
      (long long)m, (long long)n, (long long)k, sgemm / 1e9);
  printf("%-6s %-50s %9s %9s %8s %s\n", "type", "kernel", "ms/call", "GFLOP/s", "vs sgemm",
         "vs peak");
  float *x = xmalloc((size_t)m * k * 4), *y = xmalloc((size_t)m * n * 4);
  for (int64_t i = 0; i < m * k; i++) x[i] = frand();
  const rg_matmul_opts_t paths[] = {{.path = RG_MATMUL_AUTO},
                                    {.path = RG_MATMUL_TILES},
                                    {.path = RG_MATMUL_GEMM},
                                    {.path = RG_MATMUL_GEMV}};
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    size_t bytes;
    unsigned char *w = make_copies(types[ti], n, k, 1, &bytes);
    rg_wmat_t wm = {w, types[ti], n, k, RG_WLAYOUT_ROWS};
    const char *auto_name = rg_matmul_kernel_name_ex(&wm, m, &paths[0]);
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
      const char *kn = rg_matmul_kernel_name_ex(&wm, m, &paths[pi]);
      if (!strcmp(kn, "invalid") || (pi > 0 && !strcmp(kn, auto_name))) continue;
      double dt = time_matmul(pool, x, m, types[ti], n, k, w, bytes, 1, y, &paths[pi], 6);
      double gf = 2.0 * m * n * k / dt;
      const char *pp;
      double pk = path_peak(kn, &pp);
      printf("%-6s %-50s %9.2f %9.1f %8.2f %.2f of %s%s\n", rg_dtype_name(types[ti]), kn, dt * 1e3,
             gf / 1e9, gf / sgemm, pk > 0 ? gf / pk : 0.0, pp, pi == 0 ? "  (default)" : "");
    }
    size_t pbytes;
    unsigned char *pw = packed_copies(pool, types[ti], n, k, w, bytes, 1, &pbytes);
    if (pw) {
      rg_wlayout_t l = rg_matmul_preferred_layout(RG_CPU_ISA_AUTO, types[ti]);
      rg_wmat_t pm = {pw, types[ti], n, k, l};
      const char *kn = rg_matmul_kernel_name(&pm, m), *pp;
      double dt = time_layout(pool, x, m, types[ti], n, k, l, pw, pbytes, 1, y, NULL, 6);
      double gf = 2.0 * m * n * k / dt, pk = path_peak(kn, &pp);
      char label[64];
      snprintf(label, sizeof label, "%s on panels packed at load", rg_dtype_name(types[ti]));
      printf("%-6s %-50s %9.2f %9.1f %8.2f %.2f of %s  (what a stage runs)\n",
             rg_dtype_name(types[ti]), label, dt * 1e3, gf / 1e9, gf / sgemm,
             pk > 0 ? gf / pk : 0.0, pp);
      free(pw);
    }
    free(w);
  }
  free(x), free(y);
}

// Prefill at a Llama-3.2-1B-like layer's other shapes (k and v, gate and
// up, down) on the default path, bf16 and f16: the tiles slice large k, so
// the down projection (k = 8192) should run near the n = k = 2048 rate.
static void prefill_shapes(rg_pool_t *pool) {
  const int64_t m = 512, shapes[][2] = {{512, 2048}, {8192, 2048}, {2048, 8192}};
  printf("\nprefill m=%lld at a 1b layer's shapes: GFLOP/s and ratio to the path's peak\n",
         (long long)m);
  printf("%-6s %-12s %-50s %9s %9s %s\n", "type", "n x k", "kernel", "ms/call", "GFLOP/s",
         "vs peak");
  float *x = xmalloc((size_t)m * 8192 * 4), *y = xmalloc((size_t)m * 8192 * 4);
  for (int64_t i = 0; i < m * 8192; i++) x[i] = frand();
  static const rg_dtype_t pt[] = {RG_BF16, RG_F16};
  for (size_t ti = 0; ti < 2; ti++)
    for (size_t si = 0; si < 3; si++) {
      const int64_t n = shapes[si][0], k = shapes[si][1];
      size_t bytes;
      unsigned char *w = make_copies(pt[ti], n, k, 1, &bytes);
      rg_wmat_t wm = {w, pt[ti], n, k, RG_WLAYOUT_ROWS};
      const char *kn = rg_matmul_kernel_name(&wm, m), *pp;
      double dt = time_matmul(pool, x, m, pt[ti], n, k, w, bytes, 1, y, NULL, 6);
      double gf = 2.0 * m * n * k / dt, pk = path_peak(kn, &pp);
      printf("%-6s %5lld x %-4lld %-50s %9.2f %9.1f %.2f of %s\n", rg_dtype_name(pt[ti]),
             (long long)n, (long long)k, kn, dt * 1e3, gf / 1e9, pk > 0 ? gf / pk : 0.0, pp);
      free(w);
    }
  free(x), free(y);
}

// GEMV against GEMM over m (n = k = 2048, weights from DRAM): where the GEMM
// path starts to win sets gemm_min_m in ops/cpu/matmul.c, and the bf16 rows
// compare the widening kernel with vdpbf16ps (DP_MIN_M).
static void crossover(rg_pool_t *pool) {
  const int64_t n = 2048, k = 2048, ms[] = {1, 4, 8, 16, 32, 64, 128, 256, 512};
  enum { NM = sizeof ms / sizeof ms[0] };
  printf("\ncrossover, n = k = %lld: GFLOP/s by m\n%-22s", (long long)n, "type, path");
  for (int i = 0; i < NM; i++) printf(" %6lld", (long long)ms[i]);
  printf("\n");
  float *x = xmalloc(512 * k * 4), *y = xmalloc(512 * n * 4);
  for (int64_t i = 0; i < 512 * k; i++) x[i] = frand();
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    size_t bytes, rb;
    die(rg_dtype_row_bytes(types[ti], k, &rb));
    int copies = copies_for(rb * (size_t)n) / 4;  // 64 MiB: past L3, and quicker
    unsigned char *w = make_copies(types[ti], n, k, copies, &bytes);
    const struct {
      const char *label;
      rg_matmul_opts_t o;
    } rows[] = {{"gemv", {.path = RG_MATMUL_GEMV}},
                {"gemv widening (avx512)", {.isa = RG_CPU_ISA_AVX512, .path = RG_MATMUL_GEMV}},
                {"gemm", {.path = RG_MATMUL_GEMM}},
                {"tiles", {.path = RG_MATMUL_TILES}}};
    for (size_t r = 0; r < 4; r++) {
      if (r == 1 && (types[ti] != RG_BF16 || rg_cpu_isa_best() < RG_CPU_ISA_AVX512_BF16)) continue;
      rg_wmat_t probe = {w, types[ti], n, k, RG_WLAYOUT_ROWS};
      if (!strcmp(rg_matmul_kernel_name_ex(&probe, 64, &rows[r].o), "invalid")) continue;
      printf("%-4s %-17s", rg_dtype_name(types[ti]), rows[r].label);
      for (int i = 0; i < NM; i++) {
        int c = ms[i] >= 64 ? 1 : copies;
        double dt = time_matmul(pool, x, ms[i], types[ti], n, k, w, bytes, c, y, &rows[r].o,
                                ms[i] >= 64 ? 3 : 2);
        printf(" %6.0f", 2.0 * ms[i] * n * k / dt / 1e9);
      }
      printf("\n");
    }
    free(w);
  }
  free(x), free(y);
}

// --only TYPE[,TYPE]: the small-m table for those weight types alone (and
// nothing else), for quick A/B runs of one kernel.
static const char *only_types;

static int type_wanted(rg_dtype_t t) {
  if (!only_types) return 1;
  const char *name = rg_dtype_name(t), *p = only_types;
  const size_t len = strlen(name);
  while ((p = strstr(p, name))) {
    if ((p == only_types || p[-1] == ',') && (p[len] == ',' || p[len] == 0)) return 1;
    p += len;
  }
  return 0;
}

// Small batches at n = 8192, k = 2048 (gate, up) and n = 2048, k = 8192
// (down: 16 KiB rows, where the tiles stream far less), from DRAM: weight GB/s (as a share of
// read bandwidth) by m for each path that can run, so tiles_min_m() and
// DP_MIN_M in ops/cpu/matmul.c can be checked where decode batches live.
// Each cell is divided by a sum of 256 MiB timed just before it, not by
// the run's one figure: on a machine shared with other jobs the bandwidth
// moves by 2x within a run, which had put cells anywhere from 40% to 190%.
static void small_m_shape(rg_pool_t *pool, int64_t n, int64_t k) {
  const int64_t ms[] = {1, 2, 3, 4, 5, 6, 8, 12, 16};
  enum { NM = sizeof ms / sizeof ms[0] };
  const size_t sn = ((size_t)256 << 20) / sizeof(float);
  float *a = xmalloc(sn * sizeof(float));
  for (size_t i = 0; i < sn; i++) a[i] = 1.0f;
  double lo = 1e30, hi = 0;
  printf(
      "\nsmall m, n = %lld, k = %lld: weight GB/s streamed by m, as a share of the read bandwidth "
      "measured next to each cell\n%-28s",
      (long long)n, (long long)k, "type, path");
  for (int i = 0; i < NM; i++) printf(" %5lld", (long long)ms[i]);
  printf("\n");
  float *x = xmalloc(16 * k * 4), *y = xmalloc(16 * n * 4);
  for (int64_t i = 0; i < 16 * k; i++) x[i] = frand();
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    if (!type_wanted(types[ti])) continue;
    size_t bytes, rb;
    die(rg_dtype_row_bytes(types[ti], k, &rb));
    int copies = copies_for(rb * (size_t)n);
    unsigned char *w = make_copies(types[ti], n, k, copies, &bytes);
    const int kq = types[ti] == RG_Q4_K || types[ti] == RG_Q6_K;
    // Batch-invariant mode keeps the k-quants' 16-bit kernel at m = 1 too:
    // the m = 1 kernel's A/B in the same run.
    const struct {
      const char *label;
      rg_matmul_opts_t o;
    } rows[] = {{"default", {0}},
                {"gemv", {.path = RG_MATMUL_GEMV}},
                {"gemv widening (avx512)", {.isa = RG_CPU_ISA_AVX512, .path = RG_MATMUL_GEMV}},
                {"gemv batch-invariant", {.path = RG_MATMUL_GEMV, .batch_invariant = 1}},
                {"tiles", {.path = RG_MATMUL_TILES}}};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
      if (r == 2 && (types[ti] != RG_BF16 || rg_cpu_isa_best() < RG_CPU_ISA_AVX512_BF16)) continue;
      if (r == 3 && !kq) continue;
      rg_wmat_t probe = {w, types[ti], n, k, RG_WLAYOUT_ROWS};
      if (!strcmp(rg_matmul_kernel_name_ex(&probe, 1, &rows[r].o), "invalid")) continue;
      printf("%-4s %-23s", rg_dtype_name(types[ti]), rows[r].label);
      for (int i = 0; i < NM; i++) {
        const double bw = sum_bandwidth(pool, a, sn, 2);
        lo = bw < lo ? bw : lo, hi = bw > hi ? bw : hi;
        double dt =
            time_matmul(pool, x, ms[i], types[ti], n, k, w, bytes, copies, y, &rows[r].o, 3);
        printf(" %4.0f%%", 100.0 * (double)bytes / dt / bw);
      }
      printf("\n");
    }
    free(w);
  }
  printf("(read bandwidth next to the cells: %.1f to %.1f GB/s)\n", lo / 1e9, hi / 1e9);
  free(x), free(y), free(a);
}

static void small_m(rg_pool_t *pool) {
  small_m_shape(pool, 8192, 2048);
  small_m_shape(pool, 2048, 8192);
}

// NMSE against the double reference for bf16 weights, per kernel: what
// rounding x to bf16 (vdpbf16ps) costs next to widening the weights.
static void accuracy(rg_pool_t *pool) {
  const int64_t m = 64, n = 2048, k = 2048, nref = 64;
  size_t bytes;
  unsigned char *w = make_copies(RG_BF16, n, k, 1, &bytes);
  float *x = xmalloc((size_t)(m * k) * 4), *y = xmalloc((size_t)(m * n) * 4),
        *ref = xmalloc((size_t)(m * nref) * 4);
  for (int64_t i = 0; i < m * k; i++) x[i] = frand();
  rg_wmat_t head = {w, RG_BF16, nref, k, RG_WLAYOUT_ROWS}, wm = {w, RG_BF16, n, k, RG_WLAYOUT_ROWS};
  die(rg_matmul_ref(x, m, &head, NULL, ref));
  printf("\naccuracy, bf16 weights, m=%lld k=%lld, NMSE against the double reference:\n",
         (long long)m, (long long)k);
  const rg_matmul_opts_t os[] = {{.path = RG_MATMUL_GEMV},
                                 {.isa = RG_CPU_ISA_AVX512, .path = RG_MATMUL_GEMV},
                                 {.path = RG_MATMUL_GEMM},
                                 {.path = RG_MATMUL_TILES}};
  for (int v = 0; v < 4; v++) {
    if (v == 1 && rg_cpu_isa_best() < RG_CPU_ISA_AVX512_BF16) continue;
    if (!strcmp(rg_matmul_kernel_name_ex(&wm, m, &os[v]), "invalid")) continue;
    die(rg_matmul_ex(pool, x, m, &wm, NULL, y, &os[v]));
    double num = 0, den = 0;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < nref; j++) {
        double d = (double)y[i * n + j] - ref[i * nref + j];
        num += d * d, den += (double)ref[i * nref + j] * ref[i * nref + j];
      }
    printf("  %-48s %.2e\n", rg_matmul_kernel_name_ex(&wm, m, &os[v]), num / den);
  }
  free(w), free(x), free(y), free(ref);
}

static int has_flag(int argc, char **argv, const char *flag) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], flag)) return 1;
  return 0;
}

int main(int argc, char **argv) {
  // The thread count is the first argument when it is a number; a flag
  // there (`bench_matmul --layer-only`) keeps one thread per core.
  int threads = argc > 1 && argv[1][0] != '-' ? atoi(argv[1]) : rg_cpu_count();
  if (threads < 1) threads = rg_cpu_count();
  rg_pool_t *pool;
  die(rg_pool_create(threads, &pool));
  const char *ct = getenv("OPENBLAS_CORETYPE");
  printf("bench_matmul: %d threads, kernels up to %s; OpenBLAS %s, core %s, OPENBLAS_CORETYPE=%s\n",
         threads, rg_cpu_isa_name(rg_cpu_isa_best()), openblas_get_config(),
         openblas_get_corename(), ct ? ct : "(unset)");
  if (ct)
    printf("  note: run as `env -u OPENBLAS_CORETYPE %s` to let OpenBLAS pick its best kernels\n",
           argv[0]);
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--only")) only_types = argv[i + 1];
  if (only_types) {
    small_m(pool);
    rg_pool_destroy(pool);
    return 0;
  }
  // The ratios' limit: the better of two readings of the same thing, a
  // plain sum here and runtime/limits' (the one bench_engine and ridge run
  // use), so that no kernel reads above 100% of a bandwidth the machine
  // beat in the same run.
  double sum_bw = read_bandwidth(pool);
  die(rg_limits_measure(pool, 1.0, &lim));
  double bw = sum_bw > lim.read_bandwidth ? sum_bw : lim.read_bandwidth;
  printf(
      "read bandwidth: sum of 512 MiB on %d threads %.1f GB/s, runtime/limits %.1f GB/s: ratios "
      "below are to %.1f GB/s\n",
      threads, sum_bw / 1e9, lim.read_bandwidth / 1e9, bw / 1e9);
  if (has_flag(argc, argv, "--layer-only")) {
    llama_layer(pool, bw);
    printf("read bandwidth after: %.1f GB/s\n", read_bandwidth(pool) / 1e9);
    rg_pool_destroy(pool);
    return 0;
  }
  double sg = sgemm_gflops(threads, 512, 2048, 2048);
  printf("matrix peaks on %d threads: f32 FMA (%s) %.0f GFLOP/s", threads, lim.fma_isa,
         lim.fma_peak / 1e9);
  if (lim.bf16_dot_peak > 0)
    printf("; avx512-bf16 dot %.0f GFLOP/s", lim.bf16_dot_peak / 1e9);
  else
    printf("; no avx512-bf16 dot (%s)", lim.bf16_dot_note ? lim.bf16_dot_note : "?");
  if (lim.amx_bf16_peak > 0)
    printf("; AMX-BF16 %.0f GFLOP/s; AMX-INT8 %.0f GOP/s\n", lim.amx_bf16_peak / 1e9,
           lim.amx_int8_peak / 1e9);
  else
    printf("; no AMX (%s)\n", lim.amx_note ? lim.amx_note : "?");
  printf("OpenBLAS sgemm m=512 n=k=2048 on %d threads %.1f GFLOP/s (%.0f%% of f32 FMA peak)\n",
         threads, sg / 1e9, lim.fma_peak > 0 ? 100 * sg / lim.fma_peak : 0.0);
  decode_table(pool, bw);
  llama_layer(pool, bw);
  if (has_flag(argc, argv, "--small-m")) small_m(pool);
  if (!has_flag(argc, argv, "--decode-only")) {
    prefill_table(pool, sg);
    prefill_shapes(pool);
    accuracy(pool);
    if (!has_flag(argc, argv, "--no-crossover")) crossover(pool);
  }
  rg_pool_destroy(pool);
  return 0;
}
