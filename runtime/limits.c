#include "runtime/limits.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/hugemem.h"
#include "ops/matmul.h"

typedef struct {
  const float *buf;
  uint64_t sums[1024];
} read_ctx_t;

// Sums of bytes in integer adds (a reading of weights as floats could meet
// denormals, which some CPUs add slowly), defined with the span reader below.
static uint64_t isum(const unsigned char *p, size_t n);

static void read_range(void *ctx, size_t b, size_t e, int thread) {
  read_ctx_t *c = ctx;
  c->sums[thread & 1023] += isum((const unsigned char *)(c->buf + b), (e - b) * sizeof(float));
}

// Independent FMA chains, enough of them to cover the FMA latency on two
// ports. Named variables rather than an array, so they stay in registers;
// the result is kept so the compiler cannot drop the loop.
typedef struct {
  long iters;
  double sink[1024];
} fma_ctx_t;

#define FMA12(F, m, x)                                                                      \
  a0 = F(a0, m, x), a1 = F(a1, m, x), a2 = F(a2, m, x), a3 = F(a3, m, x), a4 = F(a4, m, x), \
  a5 = F(a5, m, x), a6 = F(a6, m, x), a7 = F(a7, m, x), a8 = F(a8, m, x), a9 = F(a9, m, x), \
  a10 = F(a10, m, x), a11 = F(a11, m, x)

__attribute__((target("avx512f"))) static void fma_avx512(void *ctx, size_t b, size_t e,
                                                          int thread) {
  fma_ctx_t *c = ctx;
  __m512 m = _mm512_set1_ps(0.999999f), x = _mm512_set1_ps(1e-7f);
  __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2),
         a3 = _mm512_set1_ps(3), a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5),
         a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7), a8 = _mm512_set1_ps(8),
         a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
  for (size_t r = b; r < e; r++)
    for (long it = 0; it < c->iters; it++) FMA12(_mm512_fmadd_ps, m, x);
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  c->sink[thread & 1023] += _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static void fma_avx2(void *ctx, size_t b, size_t e,
                                                         int thread) {
  fma_ctx_t *c = ctx;
  __m256 m = _mm256_set1_ps(0.999999f), x = _mm256_set1_ps(1e-7f);
  __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2),
         a3 = _mm256_set1_ps(3), a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5),
         a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7), a8 = _mm256_set1_ps(8),
         a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
  for (size_t r = b; r < e; r++)
    for (long it = 0; it < c->iters; it++) FMA12(_mm256_fmadd_ps, m, x);
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  float t[8];
  _mm256_storeu_ps(t, s);
  c->sink[thread & 1023] += t[0] + t[7];
}

// vdpbf16ps chains: 12 accumulators, each instruction 32 multiply-adds.
__attribute__((target("avx512f,avx512bf16"))) static void dp_bf16(void *ctx, size_t b, size_t e,
                                                                  int thread) {
  fma_ctx_t *c = ctx;
  __m512bh m = (__m512bh)_mm512_set1_epi16(0x3f80), x = (__m512bh)_mm512_set1_epi16(0x3380);
  __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2),
         a3 = _mm512_set1_ps(3), a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5),
         a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7), a8 = _mm512_set1_ps(8),
         a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
  for (size_t r = b; r < e; r++)
    for (long it = 0; it < c->iters; it++) FMA12(_mm512_dpbf16_ps, m, x);
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  c->sink[thread & 1023] += _mm512_reduce_add_ps(s);
}

// AMX: four accumulator tiles fed by two A and two B tiles, as the matmul's
// register blocking; tile numbers must be literals for GCC's intrinsics.
typedef struct {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tilecfg_t;

#define AMX_T "amx-tile,amx-bf16,amx-int8"
__attribute__((target(AMX_T))) static void amx_run(void *ctx, size_t b, size_t e, int thread,
                                                   int int8) {
  fma_ctx_t *c = ctx;
  // Static, as ops/cpu's rg__amx_load_tiles: built on the stack, GCC 12 may
  // drop the stores ldtilecfg reads as dead.
  static const tilecfg_t cfg = {.palette = 1,
                                .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
                                .rows = {16, 16, 16, 16, 16, 16, 16, 16}};
  _tile_loadconfig(&cfg);
  static const uint8_t src[1024] __attribute__((aligned(64)));  // zeros: no overflow, no NaN
  float out[256] __attribute__((aligned(64)));
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, src, 64);
  _tile_loadd(5, src, 64);
  _tile_loadd(6, src, 64);
  _tile_loadd(7, src, 64);
  for (size_t r = b; r < e; r++)
    for (long it = 0; it < c->iters; it++) {
      if (int8) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
      } else {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
  _tile_stored(0, out, 64);
  _tile_release();
  c->sink[thread & 1023] += out[0];
}
static void amx_bf16(void *ctx, size_t b, size_t e, int thread) {
  amx_run(ctx, b, e, thread, 0);
}
static void amx_int8(void *ctx, size_t b, size_t e, int thread) {
  amx_run(ctx, b, e, thread, 1);
}

// Best rate of `fn` over passes of `iters` iterations on every thread, each
// iteration `per_iter` operations, within about `budget_s`.
static double peak_of(rg_pool_t *pool, rg_pool_fn_t fn, long iters, double per_iter,
                      double budget_s) {
  int threads = rg_pool_threads(pool);
  fma_ctx_t fc = {.iters = iters};
  double best = 0, t_end = rg_clock_now() + budget_s;
  for (int rep = 0; rep < 8 && (rep < 2 || rg_clock_now() < t_end); rep++) {
    double t0 = rg_clock_now();
    rg_pool_parallel_for(pool, (size_t)threads, 1, fn, &fc);
    double rate = threads * (double)iters * per_iter / (rg_clock_now() - t0);
    if (rate > best) best = rate;
  }
  return best;
}

double rg_limits_matrix_peak(const rg_limits_t *l, rg_dtype_t t, rg_cpu_isa_t cap,
                             const char **path) {
  const char *p = "f32 fma";
  double v = l->fma_peak;
  rg_cpu_isa_t isa;
  rg_status_t s = rg_cpu_isa_resolve(cap, &isa);
  if (s) isa = RG_CPU_ISA_SCALAR;
  rg_status_free(s);
  if (isa >= RG_CPU_ISA_AMX && t != RG_F32 && l->amx_bf16_peak > 0)
    p = "amx-bf16", v = l->amx_bf16_peak;
  else if (isa >= RG_CPU_ISA_AVX512_BF16 && t == RG_BF16 && l->bf16_dot_peak > 0)
    p = "avx512-bf16 dot", v = l->bf16_dot_peak;
  if (path) *path = p;
  return v;
}

rg_status_t rg_limits_measure(rg_pool_t *pool, double budget_s, rg_limits_t *out) {
  memset(out, 0, sizeof(*out));
  int threads = rg_pool_threads(pool);
  out->threads = threads;
  if (budget_s <= 0) budget_s = 0.3;
  // Bandwidth: 256 MiB, far past any cache, read a few times; best pass.
  // On huge pages where the kernel gives them, as the weights a decode
  // streams are (base/hugemem.h): from 4 KiB pages the reading was the
  // page walks' limit, not the memory's, and the packed bf16 decode
  // streamed 1.09 of it.
  size_t n = (256u << 20) / sizeof(float), mapped;
  float *buf = rg_hugemem_alloc(n * sizeof(float), &mapped);
  if (!buf) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory measuring bandwidth (256 MiB)");
  for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 1023);  // also faults the pages in
  read_ctx_t rc = {.buf = buf};
  double best = 0, t_end = rg_clock_now() + budget_s / 2;
  for (int rep = 0; rep < 8 && (rep < 2 || rg_clock_now() < t_end); rep++) {
    double t0 = rg_clock_now();
    rg_pool_parallel_for(pool, n, 1 << 16, read_range, &rc);
    double bw = n * sizeof(float) / (rg_clock_now() - t0);
    if (bw > best) best = bw;
  }
  rg_hugemem_free(buf, mapped);
  out->read_bandwidth = best;
  // FMA peak: 12 chains x vector width x 2 FLOP per FMA per iteration.
  int avx512 = __builtin_cpu_supports("avx512f"),
      avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!avx512 && !avx2) {
    out->fma_isa = "scalar";
    return NULL;
  }
  out->fma_isa = avx512 ? "avx512f" : "avx2";
  double width = avx512 ? 16 : 8;
  // About 20 ms a pass at 200 GFLOP/s per core; the other peaks share the
  // second half of the budget.
  out->fma_peak =
      peak_of(pool, avx512 ? fma_avx512 : fma_avx2, 4000000, 12 * width * 2, budget_s / 4);
  rg_cpu_isa_t best_isa = rg_cpu_isa_best();
  out->bf16_dot_note = rg_cpu_isa_missing(RG_CPU_ISA_AVX512_BF16);
  if (best_isa >= RG_CPU_ISA_AVX512_BF16)
    out->bf16_dot_peak = peak_of(pool, dp_bf16, 2000000, 12 * 32 * 2, budget_s / 8);
  // The tiles need the permission rg_cpu_isa_best() asked Linux for.
  const char *why = NULL;
  if (rg_matmul_tiles_available(RG_CPU_ISA_AUTO, &why)) {
    const double per = 4.0 * 16 * 16 * 32 * 2;  // four TDPBF16PS per iteration
    out->amx_bf16_peak = peak_of(pool, amx_bf16, 100000, per, budget_s / 16);
    out->amx_int8_peak = peak_of(pool, amx_int8, 100000, 2 * per, budget_s / 16);
  } else {
    out->amx_note = why;
  }
  return NULL;
}

static double keep_higher(double *best, double other, double moved) {
  if (*best > 0 && other > 0) {
    double hi = *best > other ? *best : other, d = fabs(*best - other) / hi;
    if (d > moved) moved = d;
  }
  if (other > *best) *best = other;
  return moved;
}

double rg_limits_keep_best(rg_limits_t *best, const rg_limits_t *other) {
  double moved = 0;
  moved = keep_higher(&best->read_bandwidth, other->read_bandwidth, moved);
  moved = keep_higher(&best->fma_peak, other->fma_peak, moved);
  moved = keep_higher(&best->bf16_dot_peak, other->bf16_dot_peak, moved);
  moved = keep_higher(&best->amx_bf16_peak, other->amx_bf16_peak, moved);
  moved = keep_higher(&best->amx_int8_peak, other->amx_int8_peak, moved);
  if (!best->fma_isa) best->fma_isa = other->fma_isa;
  if (best->bf16_dot_peak > 0) best->bf16_dot_note = NULL;
  if (best->amx_bf16_peak > 0) best->amx_note = NULL;
  if (!best->threads) best->threads = other->threads;
  return moved;
}

double rg_limits_run_bandwidth(double run, double profiled) {
  return run > 0 ? run : profiled;
}

// ----- Reading given memory -------------------------------------------------------

// The spans cut into pieces of up to 1 MiB, so that the pool's threads
// share them evenly whatever their sizes.
typedef struct {
  const unsigned char *p;
  size_t bytes;
} piece_t;

typedef struct {
  const piece_t *pieces;
  uint64_t sums[1024];
} pieces_ctx_t;

__attribute__((target("avx512f"))) static uint64_t isum_avx512(const unsigned char *p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 256 <= n; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 192));
  }
  uint64_t s = (uint64_t)_mm512_reduce_add_epi64(
      _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  for (; i < n; i++) s += p[i];
  return s;
}

__attribute__((target("avx2"))) static uint64_t isum_avx2(const unsigned char *p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(p + i + 96)));
  }
  uint64_t t[4];
  _mm256_storeu_si256((__m256i *)t,
                      _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  uint64_t s = t[0] + t[1] + t[2] + t[3];
  for (; i < n; i++) s += p[i];
  return s;
}

static uint64_t isum(const unsigned char *p, size_t n) {
  if (__builtin_cpu_supports("avx512f")) return isum_avx512(p, n);
  if (__builtin_cpu_supports("avx2")) return isum_avx2(p, n);
  uint64_t s = 0;
  for (size_t k = 0; k < n; k += 8) s += p[k];  // every line, a few bytes of each
  return s;
}

static void read_pieces(void *ctx, size_t b, size_t e, int thread) {
  pieces_ctx_t *c = ctx;
  uint64_t s = 0;
  for (size_t i = b; i < e; i++) s += isum(c->pieces[i].p, c->pieces[i].bytes);
  c->sums[thread & 1023] += s;
}

static int cmp_rate(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double rg_limits_read_spans(rg_pool_t *pool, const rg_limits_span_t *spans, size_t n, int passes) {
  enum { PIECE = 1 << 20, MAX_PASSES = 15 };
  size_t n_pieces = 0, total = 0;
  for (size_t i = 0; i < n; i++) {
    n_pieces += (spans[i].bytes + PIECE - 1) / PIECE;
    total += spans[i].bytes;
  }
  if (!n_pieces || !total) return 0;
  piece_t *pieces = malloc(n_pieces * sizeof *pieces);
  pieces_ctx_t *c = calloc(1, sizeof *c);
  if (!pieces || !c) {
    free(pieces);
    free(c);
    return 0;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t off = 0; off < spans[i].bytes; off += PIECE)
      pieces[k++] = (piece_t){(const unsigned char *)spans[i].p + off,
                              spans[i].bytes - off < PIECE ? spans[i].bytes - off : PIECE};
  c->pieces = pieces;
  if (passes < 1) passes = 1;
  if (passes > MAX_PASSES) passes = MAX_PASSES;
  double rate[MAX_PASSES];
  for (int r = 0; r < passes; r++) {
    double t0 = rg_clock_now();
    rg_pool_parallel_for(pool, n_pieces, 1, read_pieces, c);
    double dt = rg_clock_now() - t0;
    rate[r] = dt > 0 ? (double)total / dt : 0;
  }
  qsort(rate, (size_t)passes, sizeof rate[0], cmp_rate);
  free(pieces);
  free(c);
  return rate[passes / 2];
}

size_t rg_limits_host_cache_bytes(void) {
  size_t best = 0;
  for (int i = 0; i < 8; i++) {
    char path[96], text[32] = "";
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(text, sizeof text, f)) {
      char *end;
      unsigned long long v = strtoull(text, &end, 10);
      v *= *end == 'K' ? 1024ull : *end == 'M' ? 1ull << 20 : *end == 'G' ? 1ull << 30 : 1;
      if (v > best) best = (size_t)v;
    }
    fclose(f);
  }
  return best;
}
