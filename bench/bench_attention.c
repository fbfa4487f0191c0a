// bench_attention — decode attention over a long paged context, measured
// against this machine's own memory read bandwidth.
//
// Decode attention reads every key and value of every sequence once per
// token and does little arithmetic per byte, so its roof is memory read
// bandwidth. This measures that roof in the same run (threads summing a
// large array), then times rg_op_attention on one decode token per sequence
// and prints achieved KV GB/s and its ratio to the roof, per KV dtype and
// instruction-set level. It prints numbers and never fails: a machine that
// cannot allocate or run a case prints why and moves on.
//
// Prefill attention (a chunk of consecutive tokens of one sequence) does
// 4 * head_dim FLOPs per query head and visible position and re-reads keys
// that stay in cache: its roof is the matrix peak of the path it runs,
// measured in the same run (runtime/limits.h): the AMX-BF16 tiles' for the
// amx level (bf16 KV), the f32 FMA peak for the AVX-512 and AVX2 kernels.
// The second table times the last 512-token chunk of contexts of 512, 2048
// and 8192 positions, GQA 32/8 heads, head_dim 64 and 128, per level.
//
// Usage: bench_attention [threads [decode|prefill]]   (default: every core
// this process may use, both tables)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/pool.h"
#include "ops/ops.h"
#include "runtime/limits.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ---------------------------------------------------------------------------
// The roof: read bandwidth of a sum over an array much larger than caches.

typedef struct {
  const uint64_t *a;
  uint64_t sum[1024];  // per thread, written once
} sum_ctx_t;

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *a, size_t n) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_add_epi64(s0, _mm256_loadu_si256((const __m256i *)(a + i)));
    s1 = _mm256_add_epi64(s1, _mm256_loadu_si256((const __m256i *)(a + i + 4)));
    s2 = _mm256_add_epi64(s2, _mm256_loadu_si256((const __m256i *)(a + i + 8)));
    s3 = _mm256_add_epi64(s3, _mm256_loadu_si256((const __m256i *)(a + i + 12)));
  }
  s0 = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
  uint64_t l[4];
  _mm256_storeu_si256((__m256i *)l, s0);
  uint64_t s = l[0] + l[1] + l[2] + l[3];
  for (; i < n; i++) s += a[i];
  return s;
}
#endif

static uint64_t sum_scalar(const uint64_t *a, size_t n) {
  uint64_t s[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) s[j] += a[i + j];
  for (; i < n; i++) s[0] += a[i];
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

static void sum_range(void *vc, size_t b, size_t e, int thread) {
  sum_ctx_t *c = vc;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) {
    c->sum[thread] = sum_avx2(c->a + b, e - b);
    return;
  }
#endif
  c->sum[thread] = sum_scalar(c->a + b, e - b);
}

// Best of a few passes over `bytes`, in GB/s (1e9 bytes per second).
static double read_bandwidth(rg_pool_t *pool, size_t bytes) {
  size_t n = bytes / 8;
  uint64_t *a = malloc(n * 8);
  if (!a) return 0;
  for (size_t i = 0; i < n; i++) a[i] = i;  // touch every page
  sum_ctx_t c = {a, {0}};
  double best = 0;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now();
    rg_pool_parallel_for(pool, n, 1 << 16, sum_range, &c);
    double dt = now() - t0, gbs = (double)(n * 8) / dt / 1e9;
    if (gbs > best) best = gbs;
  }
  uint64_t total = 0;
  for (int i = 0; i < rg_pool_threads(pool); i++) total += c.sum[i];
  free(a);
  // Printing the sum keeps the compiler from dropping the reads.
  fprintf(stderr, "(checksum %llu)\n", (unsigned long long)total);
  return best;
}

// ---------------------------------------------------------------------------
// Attention cases

typedef struct {
  const char *name;
  size_t n_heads, n_kv_heads, head_dim, context, n_seqs;
} case_t;

static uint64_t rng = 0x1234567;
static uint32_t next32(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 32);
}

// The best time of one attention call, repeated for about half a second
// (at least 3 times).
static double best_of(rg_pool_t *pool, const rg_kv_layer_t *kv, const rg_attn_batch_t *b,
                      const rg_attn_params_t *prm, const float *q, float *o) {
  double best = 1e30, t_end = now() + 0.5;
  int reps = 0;
  do {
    double t0 = now();
    rg_status_free(rg_op_attention(pool, kv, b, prm, q, o));
    double dt = now() - t0;
    if (dt < best) best = dt;
    reps++;
  } while (now() < t_end || reps < 3);
  return best;
}

static void run_case(rg_pool_t *pool, const case_t *cs, rg_dtype_t dtype, double roof) {
  const size_t bs = 16;
  size_t per_seq = (cs->context + bs - 1) / bs, n_blocks = per_seq * cs->n_seqs;
  rg_kv_cache_t *cache = NULL;
  rg_status_t st = rg_kv_cache_create(dtype, 1, n_blocks, bs, cs->n_kv_heads, cs->head_dim, &cache);
  if (st) {
    printf("  %-26s %-4s skipped: %s\n", cs->name, rg_dtype_name(dtype), rg_status_message(st));
    rg_status_free(st);
    return;
  }
  rg_kv_layer_t kv = rg_kv_cache_layer(cache, 0);
  // Values of either sign and modest size: random bits under a fixed exponent.
  size_t elems = n_blocks * bs * cs->n_kv_heads * cs->head_dim;
  for (int half = 0; half < 2; half++) {
    void *base = half ? kv.v : kv.k;
    if (dtype == RG_F32) {
      uint32_t *p = base;
      for (size_t i = 0; i < elems; i++) p[i] = 0x3e000000u | (next32() & 0x807fffffu);
    } else {
      uint16_t *p = base;
      uint16_t e = dtype == RG_BF16 ? 0x3e00 : 0x3000, m = dtype == RG_BF16 ? 0x807f : 0x83ff;
      for (size_t i = 0; i < elems; i++) p[i] = (uint16_t)(e | (next32() & m));
    }
  }
  // Each sequence's blocks are a shuffled slice of the pool, as after churn.
  int32_t *blocks = malloc(n_blocks * sizeof *blocks);
  rg_block_table_t *tables = malloc(cs->n_seqs * sizeof *tables);
  int32_t *seq = malloc(cs->n_seqs * 4), *pos = malloc(cs->n_seqs * 4);
  size_t qn = cs->n_seqs * cs->n_heads * cs->head_dim;
  float *q = malloc(qn * 4), *o = malloc(qn * 4);
  if (!blocks || !tables || !seq || !pos || !q || !o) {
    printf("  %-26s %-4s skipped: out of memory\n", cs->name, rg_dtype_name(dtype));
    goto done;
  }
  for (size_t i = 0; i < n_blocks; i++) blocks[i] = (int32_t)i;
  for (size_t i = n_blocks; i > 1; i--) {
    size_t j = next32() % i;
    int32_t t = blocks[i - 1];
    blocks[i - 1] = blocks[j];
    blocks[j] = t;
  }
  for (size_t s = 0; s < cs->n_seqs; s++) {
    tables[s] = (rg_block_table_t){blocks + s * per_seq, per_seq};
    seq[s] = (int32_t)s;
    pos[s] = (int32_t)cs->context - 1;
  }
  for (size_t i = 0; i < qn; i++) q[i] = (float)(int32_t)(next32() % 2001 - 1000) / 1000.0f;
  rg_attn_batch_t b = {cs->n_seqs, seq, pos, tables, cs->n_seqs};
  rg_attn_params_t prm = {cs->n_heads, 0, 0, NULL, 0};
  double kv_bytes = (double)cs->n_seqs * (double)cs->context * (double)cs->n_kv_heads *
                    (double)cs->head_dim * 2.0 * (dtype == RG_F32 ? 4 : 2);
  rg_cpu_isa_t best = rg_cpu_isa_best();
  static const rg_cpu_isa_t levels[] = {RG_CPU_ISA_AVX512, RG_CPU_ISA_AVX2, RG_CPU_ISA_SCALAR};
  for (int li = 0; li < 3; li++) {
    if (levels[li] > best) continue;
    rg_status_free(rg_ops_set_isa(levels[li]));
    st = rg_op_attention(pool, &kv, &b, &prm, q, o);  // warm-up
    if (st) {
      printf("  %-26s %-4s failed: %s\n", cs->name, rg_dtype_name(dtype), rg_status_message(st));
      rg_status_free(st);
      break;
    }
    // Repeat for about half a second; report the best run.
    double best_dt = best_of(pool, &kv, &b, &prm, q, o);
    double gbs = kv_bytes / best_dt / 1e9;
    printf("  %-24s %-4s %-6s %8.3f ms  %7.2f GB/s  %5.2f of read bandwidth\n", cs->name,
           rg_dtype_name(dtype), rg_cpu_isa_name(levels[li]), best_dt * 1e3, gbs,
           roof > 0 ? gbs / roof : 0);
  }
  rg_status_free(rg_ops_set_isa(RG_CPU_ISA_AUTO));
done:
  free(blocks), free(tables), free(seq), free(pos), free(q), free(o);
  rg_kv_cache_destroy(cache);
}

// The last prefill chunk of T tokens of a context of C positions (tokens
// at C - T .. C - 1), one sequence: each token sees itself and all before
// it. The levels run interleaved, best_of each, several rounds, and each
// keeps its best: the machine is shared, and what runs beside a round
// slows one level's figure, not the comparison.
static void prefill_case(rg_pool_t *pool, size_t n_heads, size_t n_kv, size_t hd, size_t C,
                         size_t T, rg_dtype_t dtype, const rg_limits_t *lim) {
  const size_t bs = 16, n_blocks = (C + bs - 1) / bs;
  char name[64];
  snprintf(name, sizeof name, "%zu/%zu hd%zu ctx %zu chunk %zu", n_heads, n_kv, hd, C, T);
  rg_kv_cache_t *cache = NULL;
  rg_status_t st = rg_kv_cache_create(dtype, 1, n_blocks, bs, n_kv, hd, &cache);
  if (st) {
    printf("  %-30s %-4s skipped: %s\n", name, rg_dtype_name(dtype), rg_status_message(st));
    rg_status_free(st);
    return;
  }
  rg_kv_layer_t kv = rg_kv_cache_layer(cache, 0);
  int32_t *blocks = malloc(n_blocks * 4), *seq = malloc(C * 4), *pos = malloc(C * 4);
  float *q = malloc(T * n_heads * hd * 4), *o = malloc(T * n_heads * hd * 4),
        *kvs = malloc(2 * C * n_kv * hd * 4);
  if (!blocks || !seq || !pos || !q || !o || !kvs) {
    printf("  %-30s %-4s skipped: out of memory\n", name, rg_dtype_name(dtype));
    goto done;
  }
  // Blocks in reverse order: no two neighbours in the table are neighbours
  // in memory.
  for (size_t i = 0; i < n_blocks; i++) blocks[i] = (int32_t)(n_blocks - 1 - i);
  for (size_t t = 0; t < C; t++) seq[t] = 0, pos[t] = (int32_t)t;
  for (size_t i = 0; i < T * n_heads * hd; i++)
    q[i] = (float)(int32_t)(next32() % 2001 - 1000) / 1000.0f;
  for (size_t i = 0; i < 2 * C * n_kv * hd; i++)
    kvs[i] = (float)(int32_t)(next32() % 2001 - 1000) / 1000.0f;
  rg_block_table_t table = {blocks, n_blocks};
  rg_attn_batch_t all = {C, seq, pos, &table, 1}, b = {T, seq + (C - T), pos + (C - T), &table, 1};
  rg_attn_params_t prm = {n_heads, 0, 0, NULL, 0};
  if ((st = rg_op_kv_write(pool, &kv, &all, kvs, kvs + C * n_kv * hd))) {
    printf("  %-30s %-4s failed: %s\n", name, rg_dtype_name(dtype), rg_status_message(st));
    rg_status_free(st);
    goto done;
  }
  double flops =
      4.0 * (double)hd * (double)n_heads * ((double)T * (double)(C - T) + (double)T * (T + 1) / 2);
  // amx: the tiles (bf16 KV only); avx512: the f32 FMA blocks; avx2 at the
  // shortest context only, for scale.
  static const rg_cpu_isa_t levels[] = {RG_CPU_ISA_AMX, RG_CPU_ISA_AVX512, RG_CPU_ISA_AVX2};
  double best_dt[3] = {1e30, 1e30, 1e30};
  int run[3] = {0};
  rg_cpu_isa_t top = rg_cpu_isa_best();
  for (int li = 0; li < 3; li++)
    run[li] = levels[li] <= top && (li != 0 || dtype == RG_BF16) && (li != 2 || C <= 512);
  for (int round = 0; round < 3; round++)
    for (int li = 0; li < 3; li++) {
      if (!run[li]) continue;
      rg_status_free(rg_ops_set_isa(levels[li]));
      double dt = best_of(pool, &kv, &b, &prm, q, o);
      if (dt < best_dt[li]) best_dt[li] = dt;
    }
  for (int li = 0; li < 3; li++) {
    if (!run[li]) continue;
    double gf = flops / best_dt[li] / 1e9;
    double peak = li == 0 ? lim->amx_bf16_peak : lim->fma_peak;
    printf("  %-30s %-4s %-6s %9.3f ms  %7.1f GFLOP/s  %5.2f of %s peak\n", name,
           rg_dtype_name(dtype), rg_cpu_isa_name(levels[li]), best_dt[li] * 1e3, gf,
           peak > 0 ? gf * 1e9 / peak : 0, li == 0 ? "amx-bf16" : "f32 fma");
  }
  if (run[0] && run[1])
    printf("  %-30s %-4s amx / avx512: %.2fx\n", name, rg_dtype_name(dtype),
           best_dt[1] / best_dt[0]);
  rg_status_free(rg_ops_set_isa(RG_CPU_ISA_AUTO));
done:
  free(blocks), free(seq), free(pos), free(q), free(o), free(kvs);
  rg_kv_cache_destroy(cache);
}

static void decode_table(rg_pool_t *pool) {
  double roof = read_bandwidth(pool, (size_t)512 << 20);
  printf("read bandwidth (sum of 512 MiB): %.2f GB/s\n", roof);
  printf("decode attention, one token per sequence at the end of its context, block size 16:\n");
  // Every case holds 128 MiB of bf16 KV (256 MiB of f32): well beyond any
  // last-level cache, so the reads come from DRAM like the roof's.
  static const case_t cases[] = {
      {"gqa 8/2 hd128 32k x4", 8, 2, 128, 32768, 4},
      {"gqa 8/2 hd128 128k x1", 8, 2, 128, 131072, 1},
      {"llama 32/8 hd128 8k x4", 32, 8, 128, 8192, 4},
      {"mqa 8/1 hd128 256k x1", 8, 1, 128, 262144, 1},
  };
  static const rg_dtype_t dtypes[] = {RG_BF16, RG_F32};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (size_t d = 0; d < 2; d++) run_case(pool, &cases[c], dtypes[d], roof);
}

static void prefill_table(rg_pool_t *pool) {
  rg_status_t st;
  rg_limits_t lim = {0};
  if ((st = rg_limits_measure(pool, 0.5, &lim))) {
    printf("limits: %s\n", rg_status_message(st));
    rg_status_free(st);
  }
  printf(
      "prefill attention, the last chunk of a context, block size 16; f32 FMA peak %.0f "
      "GFLOP/s, AMX-BF16 peak %.0f GFLOP/s%s%s:\n",
      lim.fma_peak / 1e9, lim.amx_bf16_peak / 1e9, lim.amx_note ? " — " : "",
      lim.amx_note ? lim.amx_note : "");
  static const size_t hds[] = {64, 128}, ctxs[] = {512, 2048, 8192};
  for (size_t h = 0; h < 2; h++)
    for (size_t c = 0; c < 3; c++) prefill_case(pool, 32, 8, hds[h], ctxs[c], 512, RG_BF16, &lim);
  prefill_case(pool, 32, 8, 64, 2048, 512, RG_F32, &lim);
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 0;
  const char *only = argc > 2 ? argv[2] : "";
  const int decode = strcmp(only, "prefill") != 0, prefill = strcmp(only, "decode") != 0;
  rg_pool_t *pool = NULL;
  rg_status_t st = rg_pool_create(threads, &pool);
  if (st) {
    printf("bench_attention: no thread pool (%s); running on one thread\n", rg_status_message(st));
    rg_status_free(st);
    pool = NULL;
  }
  printf("bench_attention: %d threads, best instruction set %s\n", rg_pool_threads(pool),
         rg_cpu_isa_name(rg_cpu_isa_best()));
  if (decode) decode_table(pool);
  if (prefill) prefill_table(pool);
  rg_pool_destroy(pool);
  return 0;
}
