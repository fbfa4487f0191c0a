// Tests for ops/: every fast kernel against its reference at every
// instruction-set level this CPU has, by normalized mean squared error
//   nmse(a, b) = sum (a - b)^2 / sum b^2
// with a per-op tolerance, plus NaN/inf checks, over shapes that are not
// multiples of any vector width. Then closed forms (RoPE, Llama 3 frequencies,
// hand-made MoE routing) and the sampler's statistics.
//
// Tolerances, and why:
//   rmsnorm, softmax, swiglu, rope  1e-10  f32 kernels vs double (or same
//                                          f32 formula) references: rounding only
//   attention (any KV dtype)        1e-9   both read the same stored values;
//                                          online softmax in f32 vs double
//   attention bf16 / f16 KV vs f32  1e-4 / 1e-6  storage rounding (8 / 11 bits)
//   attention on the AMX tiles      2e-5   queries and probabilities rounded
//                                          to bf16 (measured <= 4.3e-6)
//   embed, kv write, moe group,     exact  copies and conversions
//   gather, sample filter
//   moe route weights               1e-6 relative, expert ids exact
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "ops/matmul.h"
#include "ops/ops.h"
#include "tests/test.h"

// ---------------------------------------------------------------------------
// Helpers

static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// Uniform in [lo, hi).
static float urand(uint64_t *s, float lo, float hi) {
  return lo + (hi - lo) * (float)((double)(mix(s) >> 11) * 0x1.0p-53);
}
static void fill(uint64_t *s, float *x, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) x[i] = urand(s, lo, hi);
}

static double nmse(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)a[i] - b[i];
    num += d * d;
    den += (double)b[i] * b[i];
  }
  return den > 0 ? num / den : num;
}

static int all_finite(const float *a, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(a[i])) return 0;
  return 1;
}

#define CHECK_NMSE(a, b, n, tol, ...)                                                   \
  do {                                                                                  \
    double e_ = nmse(a, b, n);                                                          \
    int fin_ = all_finite(a, n);                                                        \
    if (!(e_ <= (tol)) || !fin_) {                                                      \
      char ctx_[256];                                                                   \
      snprintf(ctx_, sizeof ctx_, __VA_ARGS__);                                         \
      rg_test_fail(t, __FILE__, __LINE__, "%s: nmse %.3g (tolerance %.1g)%s", ctx_, e_, \
                   (double)(tol), fin_ ? "" : ", non-finite output");                   \
    }                                                                                   \
  } while (0)

// The kernel families to run: scalar, avx2, avx512 — each that the CPU has.
// (avx512-bf16 runs the avx512 kernels.)
static int n_levels(void) {
  rg_cpu_isa_t best = rg_cpu_isa_best();
  return best >= RG_CPU_ISA_AVX512 ? 3 : best >= RG_CPU_ISA_AVX2 ? 2 : 1;
}
static rg_cpu_isa_t level(int i) {
  static const rg_cpu_isa_t l[] = {RG_CPU_ISA_SCALAR, RG_CPU_ISA_AVX2, RG_CPU_ISA_AVX512};
  return l[i];
}
// Sets kernel family i; false (and the loop ends) if the CPU lacks it.
static int set_level(int i) {
  if (i >= n_levels()) return 0;
  rg_status_t st = rg_ops_set_isa(level(i));
  rg_status_free(st);
  return st == NULL;
}
#define FOR_EACH_LEVEL(lv)                          \
  for (int lv##_i = 0; set_level(lv##_i); lv##_i++) \
    for (const char *lv = rg_cpu_isa_name(level(lv##_i)); lv; lv = NULL)
static void reset_level(void) {
  rg_status_free(rg_ops_set_isa(RG_CPU_ISA_AUTO));
}

static rg_pool_t *make_pool(rg_test_ctx_t *t) {
  rg_pool_t *p = NULL;
  RG_CHECK_OK(rg_pool_create(2, &p));
  return p;
}

static const size_t awkward[] = {1, 3, 17, 33, 4096 + 5};
#define N_AWKWARD (sizeof awkward / sizeof awkward[0])

// ---------------------------------------------------------------------------
// Element- and row-wise ops

RG_TEST(ops_isa_levels) {
  RG_CHECK(rg_ops_isa() == rg_cpu_isa_best());
  RG_CHECK_OK(rg_ops_set_isa(RG_CPU_ISA_SCALAR));
  RG_CHECK(rg_ops_isa() == RG_CPU_ISA_SCALAR);
  if (rg_cpu_isa_best() < RG_CPU_ISA_AVX512_BF16)
    RG_CHECK_ERR(rg_ops_set_isa(RG_CPU_ISA_AVX512_BF16), "lacks");
  reset_level();
  RG_CHECK(rg_ops_isa() == rg_cpu_isa_best());
}

RG_TEST(ops_rmsnorm) {
  rg_pool_t *pool = make_pool(t);
  uint64_t s = 1;
  // Closed form: x = (3, 4): mean square 12.5.
  float x2[2] = {3, 4}, w2[2] = {1, 2}, y2[2];
  rg_op_rmsnorm(pool, x2, w2, y2, 1, 2, 0);
  RG_CHECK_NEAR(y2[0], 3 / sqrt(12.5), 1e-6);
  RG_CHECK_NEAR(y2[1], 2 * 4 / sqrt(12.5), 1e-6);
  for (size_t k = 0; k <= N_AWKWARD; k++) {
    // The last case is Qwen3's QK-norm: 7 tokens x 8 heads of 128.
    size_t dim = k < N_AWKWARD ? awkward[k] : 128, rows = k < N_AWKWARD ? 5 : 7 * 8;
    float *x = malloc(rows * dim * 4), *w = malloc(dim * 4), *ref = malloc(rows * dim * 4),
          *y = malloc(rows * dim * 4);
    fill(&s, x, rows * dim, -3, 3);
    fill(&s, w, dim, 0.5f, 1.5f);
    rg_op_rmsnorm_ref(NULL, x, w, ref, rows, dim, 1e-6f);
    FOR_EACH_LEVEL(lv) {
      rg_op_rmsnorm(pool, x, w, y, rows, dim, 1e-6f);
      CHECK_NMSE(y, ref, rows * dim, 1e-10, "rmsnorm %s rows %zu dim %zu", lv, rows, dim);
      memcpy(y, x, rows * dim * 4);  // in place
      rg_op_rmsnorm(NULL, y, w, y, rows, dim, 1e-6f);
      CHECK_NMSE(y, ref, rows * dim, 1e-10, "rmsnorm in place %s dim %zu", lv, dim);
    }
    free(x), free(w), free(ref), free(y);
  }
  reset_level();
  rg_pool_destroy(pool);
}

RG_TEST(ops_softmax) {
  rg_pool_t *pool = make_pool(t);
  uint64_t s = 2;
  for (size_t k = 0; k < N_AWKWARD; k++) {
    size_t n = awkward[k], rows = 4;
    float *x = malloc(rows * n * 4), *ref = malloc(rows * n * 4), *y = malloc(rows * n * 4);
    fill(&s, x, rows * n, -40, 40);
    for (size_t i = 0; i < n; i += 3) x[n + i] = -INFINITY;   // row 1: masked entries
    for (size_t i = 0; i < n; i++) x[3 * n + i] = -INFINITY;  // row 3: fully masked
    if (n > 1) x[2 * n + n / 2] = 80;                         // row 2: one dominant
    memcpy(ref, x, rows * n * 4);
    rg_op_softmax_ref(NULL, ref, rows, n);
    FOR_EACH_LEVEL(lv) {
      memcpy(y, x, rows * n * 4);
      rg_op_softmax(pool, y, rows, n);
      CHECK_NMSE(y, ref, rows * n, 1e-10, "softmax %s n %zu", lv, n);
      for (size_t r = 0; r < 3; r++) {
        double sum = 0;
        int live = 0;
        for (size_t i = 0; i < n; i++) {
          sum += y[r * n + i];
          live |= x[r * n + i] != -INFINITY;
        }
        if (live) RG_CHECK_NEAR(sum, 1.0, 1e-5);
      }
      for (size_t i = 0; i < n; i += 3) RG_CHECK(y[n + i] == 0);
      for (size_t i = 0; i < n; i++) RG_CHECK(y[3 * n + i] == 0);
    }
    free(x), free(ref), free(y);
  }
  reset_level();
  rg_pool_destroy(pool);
}

RG_TEST(ops_swiglu) {
  rg_pool_t *pool = make_pool(t);
  uint64_t s = 3;
  float g1 = 2, u1 = 3, o1;
  rg_op_swiglu(NULL, &g1, &u1, &o1, 1);
  RG_CHECK_NEAR(o1, 2 / (1 + exp(-2.0)) * 3, 1e-6);
  for (size_t k = 0; k < N_AWKWARD; k++) {
    size_t n = awkward[k] * 3;
    float *g = malloc(n * 4), *u = malloc(n * 4), *ref = malloc(n * 4), *o = malloc(n * 4);
    fill(&s, g, n, -20, 20);
    fill(&s, u, n, -2, 2);
    g[0] = -100;  // exp(100) overflows: silu must still be ~0, not NaN
    if (n > 1) g[1] = 100;
    rg_op_swiglu_ref(NULL, g, u, ref, n);
    FOR_EACH_LEVEL(lv) {
      rg_op_swiglu(pool, g, u, o, n);
      CHECK_NMSE(o, ref, n, 1e-10, "swiglu %s n %zu", lv, n);
      memcpy(o, g, n * 4);
      rg_op_swiglu(pool, o, u, o, n);  // out == gate
      CHECK_NMSE(o, ref, n, 1e-10, "swiglu in place %s n %zu", lv, n);
    }
    free(g), free(u), free(ref), free(o);
  }
  reset_level();
  rg_pool_destroy(pool);
}

// ---------------------------------------------------------------------------
// RoPE

RG_TEST(ops_rope_closed_form) {
  rg_rope_t rope;
  RG_REQUIRE_OK(rg_rope_init(&rope, 4, 10000, NULL));
  RG_CHECK(rope.inv_freq[0] == 1.0f);
  RG_CHECK_NEAR(rope.inv_freq[1], 0.01, 1e-6);
  // Token 0 (two heads) at position 3; token 1 (two heads) at 0: identity.
  float x[16] = {1, 2, 3, 4, -1, 0.5f, 2, 1, 1, 2, 3, 4, 5, 6, 7, 8};
  int32_t pos[2] = {3, 0};
  rg_op_rope(NULL, &rope, x, 2, 2, pos);
  double c0 = cos(3.0), s0 = sin(3.0), c1 = cos(0.03), s1 = sin(0.03);
  RG_CHECK_NEAR(x[0], 1 * c0 - 3 * s0, 1e-5);
  RG_CHECK_NEAR(x[2], 3 * c0 + 1 * s0, 1e-5);
  RG_CHECK_NEAR(x[1], 2 * c1 - 4 * s1, 1e-5);
  RG_CHECK_NEAR(x[3], 4 * c1 + 2 * s1, 1e-5);
  RG_CHECK_NEAR(x[4], -1 * c0 - 2 * s0, 1e-5);
  RG_CHECK_NEAR(x[6], 2 * c0 + -1 * s0, 1e-5);
  for (int i = 0; i < 8; i++) RG_CHECK(x[8 + i] == (float)(i + 1));
  rg_rope_deinit(&rope);
  RG_CHECK_ERR(rg_rope_init(&rope, 7, 10000, NULL), "head_dim 7 must be even");
  rg_rope_scaling_t bad = {8, 4, 1, 8192};
  RG_CHECK_ERR(rg_rope_init(&rope, 64, 10000, &bad), "low_freq_factor");
}

RG_TEST(ops_rope_llama3_frequencies) {
  // Llama 3.1: theta 500000, factor 8, low 1, high 4, original 8192. With
  // head_dim 128 the band 2048 < wavelength < 8192 is i = 29..34.
  rg_rope_scaling_t sc = {8, 1, 4, 8192};
  rg_rope_t plain, l3;
  RG_REQUIRE_OK(rg_rope_init(&plain, 128, 500000, NULL));
  RG_REQUIRE_OK(rg_rope_init(&l3, 128, 500000, &sc));
  for (int i = 0; i <= 28; i++) RG_CHECK(l3.inv_freq[i] == plain.inv_freq[i]);
  for (int i = 35; i < 64; i++) RG_CHECK_NEAR(l3.inv_freq[i], plain.inv_freq[i] / 8.0, 1e-6);
  for (int i = 29; i <= 34; i++) {
    RG_CHECK(l3.inv_freq[i] < plain.inv_freq[i]);
    RG_CHECK(l3.inv_freq[i] > plain.inv_freq[i] / 8);
    // The scale falls smoothly from 1 to 1/8 across the band.
    RG_CHECK(l3.inv_freq[i] / plain.inv_freq[i] < l3.inv_freq[i - 1] / plain.inv_freq[i - 1]);
  }
  // Values from transformers' _compute_llama3_parameters (f32).
  RG_CHECK_NEAR(plain.inv_freq[1], 0.8146172165870667, 1e-6);
  RG_CHECK_NEAR(plain.inv_freq[63], 2.4551407022954663e-06, 1e-5);
  RG_CHECK_NEAR(l3.inv_freq[29], 0.002166570397093892, 1e-5);
  RG_CHECK_NEAR(l3.inv_freq[32], 0.000524846080224961, 1e-5);
  RG_CHECK_NEAR(l3.inv_freq[34], 0.00017850780568551272, 1e-5);
  RG_CHECK_NEAR(l3.inv_freq[63], 3.068925877869333e-07, 1e-5);
  rg_rope_deinit(&plain);
  rg_rope_deinit(&l3);
}

RG_TEST(ops_rope_fast_vs_ref) {
  rg_pool_t *pool = make_pool(t);
  uint64_t s = 4;
  static const size_t hds[] = {2, 6, 34, 64, 128, 600};  // 600: half above the 256 piece
  rg_rope_scaling_t sc = {8, 1, 4, 8192};
  for (size_t k = 0; k < sizeof hds / sizeof hds[0]; k++)
    for (int tokens = 1; tokens <= 9; tokens += 8) {
      size_t hd = hds[k], heads = 3, n = (size_t)tokens * heads * hd;
      rg_rope_t rope;
      RG_REQUIRE_OK(rg_rope_init(&rope, hd, 1e6, k % 2 ? &sc : NULL));
      float *x = malloc(n * 4), *ref = malloc(n * 4), *y = malloc(n * 4);
      int32_t pos[9];
      for (int i = 0; i < tokens; i++) pos[i] = (int32_t)(mix(&s) % 200000) - 1000;
      fill(&s, x, n, -2, 2);
      memcpy(ref, x, n * 4);
      rg_op_rope_ref(NULL, &rope, ref, (size_t)tokens, heads, pos);
      FOR_EACH_LEVEL(lv) {
        memcpy(y, x, n * 4);
        rg_op_rope(pool, &rope, y, (size_t)tokens, heads, pos);
        CHECK_NMSE(y, ref, n, 1e-10, "rope %s head_dim %zu tokens %d", lv, hd, tokens);
      }
      free(x), free(ref), free(y);
      rg_rope_deinit(&rope);
    }
  reset_level();
  rg_pool_destroy(pool);
}

// ---------------------------------------------------------------------------
// Embedding

RG_TEST(ops_embed) {
  rg_pool_t *pool = make_pool(t);
  uint64_t s = 5;
  size_t vocab = 50;
  int32_t ids[6] = {0, 49, 7, 7, 13, 1};
  static const rg_dtype_t types[] = {RG_F32, RG_BF16, RG_F16, RG_Q8_0};
  static const size_t dims[] = {3, 17, 64, 96};
  for (size_t ti = 0; ti < 4; ti++)
    for (size_t di = 0; di < 4; di++) {
      rg_dtype_t ty = types[ti];
      size_t dim = dims[di];
      if (ty == RG_Q8_0 && dim % 32) continue;
      float *src = malloc(vocab * dim * 4), *ref = malloc(6 * dim * 4), *out = malloc(6 * dim * 4);
      size_t rb;
      RG_REQUIRE_OK(rg_dtype_row_bytes(ty, (int64_t)dim, &rb));
      unsigned char *table = malloc(vocab * rb);
      fill(&s, src, vocab * dim, -2, 2);
      for (size_t r = 0; r < vocab; r++)
        RG_REQUIRE_OK(rg_row_from_f32(ty, src + r * dim, table + r * rb, (int64_t)dim));
      RG_REQUIRE_OK(rg_op_embed_ref(NULL, table, ty, vocab, ids, 6, dim, ref));
      // Against the source: exact for f32, the type's rounding otherwise.
      for (size_t i = 0; i < 6; i++) {
        double tol = ty == RG_F32 ? 0 : ty == RG_BF16 ? 1e-5 : ty == RG_F16 ? 1e-7 : 1e-4;
        CHECK_NMSE(ref + i * dim, src + (size_t)ids[i] * dim, dim, tol, "embed_ref %s dim %zu",
                   rg_dtype_name(ty), dim);
      }
      FOR_EACH_LEVEL(lv) {
        memset(out, 0, 6 * dim * 4);
        RG_CHECK_OK(rg_op_embed(pool, table, ty, vocab, ids, 6, dim, out));
        RG_CHECK(memcmp(out, ref, 6 * dim * 4) == 0);
      }
      free(src), free(ref), free(out), free(table);
    }
  reset_level();
  float table[50 * 4] = {0}, out[3 * 4];
  int32_t bad[3] = {1, 2, 50};
  RG_CHECK_ERR(rg_op_embed(pool, table, RG_F32, 50, bad, 3, 4, out),
               "token id 50 at index 2 is outside the vocabulary of 50 tokens");
  bad[0] = -1;
  RG_CHECK_ERR(rg_op_embed(pool, table, RG_F32, 50, bad, 3, 4, out), "token id -1 at index 0");
  RG_CHECK_ERR(rg_op_embed_ref(NULL, table, RG_F32, 50, bad, 3, 4, out), "token id -1");
  RG_CHECK_ERR(rg_op_embed(pool, table, RG_Q8_0, 50, ids, 3, 33, out), "embed: q8_0");
  rg_pool_destroy(pool);
}

// ---------------------------------------------------------------------------
// KV cache and attention

typedef struct {
  size_t n_seqs;
  size_t len[8];
  int32_t *blocks;  // all tables, back to back
  rg_block_table_t tables[8];
} seqs_t;

// Gives each sequence enough blocks for its length, drawn from a shuffled
// pool so no table is in order and sequences interleave.
static void make_seqs(seqs_t *q, const size_t *lens, size_t n, size_t bs, size_t n_blocks,
                      uint64_t *s) {
  q->n_seqs = n;
  q->blocks = malloc(n_blocks * sizeof *q->blocks);
  for (size_t i = 0; i < n_blocks; i++) q->blocks[i] = (int32_t)i;
  for (size_t i = n_blocks; i > 1; i--) {
    size_t j = mix(s) % i;
    int32_t tmp = q->blocks[i - 1];
    q->blocks[i - 1] = q->blocks[j];
    q->blocks[j] = tmp;
  }
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    q->len[i] = lens[i];
    size_t nb = (lens[i] + bs - 1) / bs;
    q->tables[i] = (rg_block_table_t){q->blocks + at, nb};
    at += nb;
  }
}

// Writes K and V for every position of every sequence (one batch, fast path
// at the level in effect, or the reference).
static rg_status_t fill_cache(rg_pool_t *pool, const rg_kv_layer_t *kv, const seqs_t *q,
                              const float *kvsrc, int ref) {
  size_t total = 0;
  for (size_t i = 0; i < q->n_seqs; i++) total += q->len[i];
  int32_t *seq = malloc(total * 4), *pos = malloc(total * 4);
  size_t at = 0;
  for (size_t i = 0; i < q->n_seqs; i++)
    for (size_t p = 0; p < q->len[i]; p++, at++) {
      seq[at] = (int32_t)i;
      pos[at] = (int32_t)p;
    }
  rg_attn_batch_t b = {total, seq, pos, q->tables, q->n_seqs};
  size_t row = kv->n_kv_heads * kv->head_dim;
  const float *k = kvsrc, *v = kvsrc + total * row;
  rg_status_t st =
      ref ? rg_op_kv_write_ref(pool, kv, &b, k, v) : rg_op_kv_write(pool, kv, &b, k, v);
  free(seq), free(pos);
  return st;
}

typedef struct {
  size_t n_heads, n_kv_heads, head_dim;
} heads_t;

// Runs one attention case at every level against the reference: KV written
// in every dtype, many query tokens from the given sequences.
static void attention_case(rg_test_ctx_t *t, rg_pool_t *pool, const size_t *lens, size_t n_seqs,
                           size_t bs, heads_t hh, const int32_t *qseq, const int32_t *qpos,
                           size_t n_q, size_t window, int sinks, uint64_t seed) {
  uint64_t s = seed;
  size_t total = 0, n_blocks = 0;
  for (size_t i = 0; i < n_seqs; i++) {
    total += lens[i];
    n_blocks += (lens[i] + bs - 1) / bs;
  }
  n_blocks += 3;  // spare blocks nobody uses
  seqs_t q;
  make_seqs(&q, lens, n_seqs, bs, n_blocks, &s);
  size_t row = hh.n_kv_heads * hh.head_dim, qn = n_q * hh.n_heads * hh.head_dim;
  float *kvsrc = malloc(2 * total * row * 4), *qv = malloc(qn * 4), *o = malloc(qn * 4);
  float *ref = malloc(qn * 4), *ref32 = malloc(qn * 4), sink[64];
  fill(&s, kvsrc, 2 * total * row, -1, 1);
  fill(&s, qv, qn, -2, 2);  // large enough for peaked attention
  fill(&s, sink, hh.n_heads, -1, 3);
  rg_attn_batch_t b = {n_q, qseq, qpos, q.tables, n_seqs};
  rg_attn_params_t prm = {hh.n_heads, 0, window, sinks ? sink : NULL, 0};
  static const rg_dtype_t dts[] = {RG_F32, RG_BF16, RG_F16};
  for (size_t d = 0; d < 3; d++) {
    rg_kv_cache_t *cache, *cache_ref;
    RG_REQUIRE_OK(rg_kv_cache_create(dts[d], 2, n_blocks, bs, hh.n_kv_heads, hh.head_dim, &cache));
    RG_REQUIRE_OK(
        rg_kv_cache_create(dts[d], 2, n_blocks, bs, hh.n_kv_heads, hh.head_dim, &cache_ref));
    rg_kv_layer_t kv = rg_kv_cache_layer(cache, 1), kvr = rg_kv_cache_layer(cache_ref, 1);
    RG_REQUIRE_OK(fill_cache(NULL, &kvr, &q, kvsrc, 1));
    RG_REQUIRE_OK(rg_op_attention_ref(NULL, &kvr, &b, &prm, qv, ref));
    if (d == 0) memcpy(ref32, ref, qn * 4);
    size_t bytes = n_blocks * bs * row * (dts[d] == RG_F32 ? 4 : 2);
    FOR_EACH_LEVEL(lv) {
      RG_REQUIRE_OK(fill_cache(pool, &kv, &q, kvsrc, 0));
      RG_CHECK(memcmp(kv.k, kvr.k, bytes) == 0 && memcmp(kv.v, kvr.v, bytes) == 0);
      memset(o, 0xff, qn * 4);  // NaN: every output must be written
      RG_CHECK_OK(rg_op_attention(pool, &kv, &b, &prm, qv, o));
      CHECK_NMSE(o, ref, qn, 1e-9, "attention %s kv %s heads %zu/%zu hd %zu window %zu sinks %d",
                 lv, rg_dtype_name(dts[d]), hh.n_heads, hh.n_kv_heads, hh.head_dim, window, sinks);
    }
    // Storage rounding only: bf16 keeps 8 bits, f16 11.
    if (d > 0)
      CHECK_NMSE(ref, ref32, qn, d == 1 ? 1e-4 : 1e-6, "attention_ref %s vs f32 kv",
                 rg_dtype_name(dts[d]));
    rg_kv_cache_destroy(cache);
    rg_kv_cache_destroy(cache_ref);
  }
  reset_level();
  free(kvsrc), free(qv), free(o), free(ref), free(ref32), free(q.blocks);
}

RG_TEST(ops_attention_mixed_batch) {
  // Five sequences of lengths 1, 7, 64, 300, 1000 in one call, block size 16,
  // scrambled tables; queries: the last few positions of each (prefill
  // chunks and decode tokens), in shuffled order.
  rg_pool_t *pool = make_pool(t);
  static const size_t lens[] = {1, 7, 64, 300, 1000};
  int32_t qseq[32], qpos[32];
  size_t n_q = 0;
  for (int i = 0; i < 5; i++)
    for (size_t p = lens[i] > 4 ? lens[i] - 4 : 0; p < lens[i]; p++) {
      qseq[n_q] = i;
      qpos[n_q++] = (int32_t)p;
    }
  qseq[n_q] = 4, qpos[n_q++] = 500;  // a token in the middle of a long context
  qseq[n_q] = 3, qpos[n_q++] = 15;   // and one on a block's last slot
  uint64_t s = 9;
  for (size_t i = n_q; i > 1; i--) {
    size_t j = mix(&s) % i;
    int32_t a = qseq[i - 1], b = qpos[i - 1];
    qseq[i - 1] = qseq[j], qpos[i - 1] = qpos[j];
    qseq[j] = a, qpos[j] = b;
  }
  attention_case(t, pool, lens, 5, 16, (heads_t){8, 2, 64}, qseq, qpos, n_q, 0, 0, 11);   // GQA
  attention_case(t, pool, lens, 5, 16, (heads_t){8, 1, 80}, qseq, qpos, n_q, 0, 0, 12);   // MQA
  attention_case(t, pool, lens, 5, 16, (heads_t){4, 4, 128}, qseq, qpos, n_q, 0, 0, 13);  // MHA
  // Odd head_dim and block size, a pool of none.
  attention_case(t, NULL, lens, 5, 5, (heads_t){6, 3, 17}, qseq, qpos, n_q, 0, 0, 14);
  rg_pool_destroy(pool);
}

RG_TEST(ops_attention_long_context) {
  // One decode token at position 3999: few items, so contexts are split
  // across threads and merged.
  rg_pool_t *pool = make_pool(t);
  size_t len = 4000;
  int32_t qseq[2] = {0, 0}, qpos[2] = {3999, 2100};
  attention_case(t, pool, &len, 1, 16, (heads_t){8, 2, 64}, qseq, qpos, 1, 0, 0, 21);
  attention_case(t, pool, &len, 1, 32, (heads_t){8, 1, 64}, qseq, qpos, 2, 0, 0, 22);
  attention_case(t, NULL, &len, 1, 16, (heads_t){4, 1, 32}, qseq, qpos, 1, 0, 0, 23);
  rg_pool_destroy(pool);
}

RG_TEST(ops_attention_prefill_blocks) {
  // Prefill chunks: runs of consecutive positions of one sequence, which the
  // AVX-512 levels run as blocks of query rows over shared key tiles. A
  // chunk from position 0 (70 tokens: blocks of 16 or 8 tokens and a short
  // last one), a chunk after 130 positions of context, a run of 3 (too short
  // for a block), a decode token, and a chunk crossing a block boundary of
  // the cache; with causal, window and sink variants and GQA, MQA, MHA.
  rg_pool_t *pool = make_pool(t);
  static const size_t lens[] = {70, 160, 40};
  int32_t qseq[160], qpos[160];
  size_t n_q = 0;
  for (int32_t p = 0; p < 70; p++) qseq[n_q] = 0, qpos[n_q++] = p;
  for (int32_t p = 130; p < 160; p++) qseq[n_q] = 1, qpos[n_q++] = p;
  for (int32_t p = 10; p < 13; p++) qseq[n_q] = 2, qpos[n_q++] = p;
  qseq[n_q] = 2, qpos[n_q++] = 39;
  for (int32_t p = 14; p < 35; p++) qseq[n_q] = 2, qpos[n_q++] = p;
  attention_case(t, pool, lens, 3, 16, (heads_t){8, 2, 64}, qseq, qpos, n_q, 0, 0, 41);   // GQA
  attention_case(t, pool, lens, 3, 16, (heads_t){8, 1, 96}, qseq, qpos, n_q, 0, 1, 42);   // MQA
  attention_case(t, pool, lens, 3, 16, (heads_t){4, 4, 128}, qseq, qpos, n_q, 0, 0, 43);  // MHA
  attention_case(t, pool, lens, 3, 16, (heads_t){8, 2, 64}, qseq, qpos, n_q, 24, 1, 44);
  // Odd head_dim and block size, a pool of none, a window inside a block.
  attention_case(t, NULL, lens, 3, 5, (heads_t){6, 3, 17}, qseq, qpos, n_q, 7, 0, 45);
  rg_pool_destroy(pool);
}

// The AMX prefill blocks (bf16 KV at the amx level) round queries and
// probabilities to bf16 (8 significant bits), so they have their own bound
// against the reference: measured NMSE 1.9e-6 to 4.3e-6 over the shapes
// below (the f32 kernels: ~1e-14), bound AMX_TOL = 2e-5. Each case also
// runs in batch-invariant mode, which must keep the f32 path (1e-9), and so
// differ from the tiles' output wherever a block ran (tiles = 1) or match it
// bit for bit where none can (tiles = 0: head_dim not a multiple of 32).
#define AMX_TOL 2e-5
static void attention_case_amx(rg_test_ctx_t *t, rg_pool_t *pool, const size_t *lens, size_t n_seqs,
                               size_t bs, heads_t hh, const int32_t *qseq, const int32_t *qpos,
                               size_t n_q, size_t window, int sinks, uint64_t seed, int tiles) {
  uint64_t s = seed;
  size_t total = 0, n_blocks = 0;
  for (size_t i = 0; i < n_seqs; i++) {
    total += lens[i];
    n_blocks += (lens[i] + bs - 1) / bs;
  }
  n_blocks += 3;
  seqs_t q;
  make_seqs(&q, lens, n_seqs, bs, n_blocks, &s);
  size_t row = hh.n_kv_heads * hh.head_dim, qn = n_q * hh.n_heads * hh.head_dim;
  float *kvsrc = malloc(2 * total * row * 4), *qv = malloc(qn * 4), *o = malloc(qn * 4);
  float *ref = malloc(qn * 4), *inv = malloc(qn * 4), sink[64];
  fill(&s, kvsrc, 2 * total * row, -1, 1);
  fill(&s, qv, qn, -2, 2);
  fill(&s, sink, hh.n_heads, -1, 3);
  rg_attn_batch_t b = {n_q, qseq, qpos, q.tables, n_seqs};
  rg_attn_params_t prm = {hh.n_heads, 0, window, sinks ? sink : NULL, 0};
  rg_kv_cache_t *cache;
  RG_REQUIRE_OK(rg_kv_cache_create(RG_BF16, 1, n_blocks, bs, hh.n_kv_heads, hh.head_dim, &cache));
  rg_kv_layer_t kv = rg_kv_cache_layer(cache, 0);
  RG_REQUIRE_OK(fill_cache(NULL, &kv, &q, kvsrc, 1));
  RG_REQUIRE_OK(rg_op_attention_ref(NULL, &kv, &b, &prm, qv, ref));
  RG_REQUIRE_OK(rg_ops_set_isa(RG_CPU_ISA_AMX));
  memset(o, 0xff, qn * 4);
  RG_CHECK_OK(rg_op_attention(pool, &kv, &b, &prm, qv, o));
  CHECK_NMSE(o, ref, qn, AMX_TOL, "amx attention heads %zu/%zu hd %zu window %zu sinks %d",
             hh.n_heads, hh.n_kv_heads, hh.head_dim, window, sinks);
  if (getenv("RG_TEST_PRINT_NMSE"))
    fprintf(stderr, "amx attention heads %zu/%zu hd %zu window %zu sinks %d: nmse %.3g\n",
            hh.n_heads, hh.n_kv_heads, hh.head_dim, window, sinks, nmse(o, ref, qn));
  prm.batch_invariant = 1;
  memset(inv, 0xff, qn * 4);
  RG_CHECK_OK(rg_op_attention(pool, &kv, &b, &prm, qv, inv));
  CHECK_NMSE(inv, ref, qn, 1e-9, "batch-invariant attention at amx, heads %zu/%zu hd %zu",
             hh.n_heads, hh.n_kv_heads, hh.head_dim);
  if (tiles)
    RG_CHECK(nmse(o, inv, qn) > 0);
  else
    RG_CHECK(memcmp(o, inv, qn * 4) == 0);
  reset_level();
  rg_kv_cache_destroy(cache);
  free(kvsrc), free(qv), free(o), free(ref), free(inv), free(q.blocks);
}

RG_TEST(ops_attention_prefill_amx) {
  const char *why;
  if (!rg_matmul_tiles_available(RG_CPU_ISA_AUTO, &why)) RG_SKIP(why);
  // The shapes of ops_attention_prefill_blocks, and a chunk of 100 tokens
  // after 130 positions (blocks of 32 and 64 tokens, slices crossing cache
  // blocks of 16 and 48 positions), head_dim 64, 128 and 256.
  rg_pool_t *pool = make_pool(t);
  static const size_t lens[] = {70, 160, 40};
  int32_t qseq[160], qpos[160];
  size_t n_q = 0;
  for (int32_t p = 0; p < 70; p++) qseq[n_q] = 0, qpos[n_q++] = p;
  for (int32_t p = 130; p < 160; p++) qseq[n_q] = 1, qpos[n_q++] = p;
  for (int32_t p = 10; p < 13; p++) qseq[n_q] = 2, qpos[n_q++] = p;
  qseq[n_q] = 2, qpos[n_q++] = 39;
  for (int32_t p = 14; p < 35; p++) qseq[n_q] = 2, qpos[n_q++] = p;
  attention_case_amx(t, pool, lens, 3, 16, (heads_t){8, 2, 64}, qseq, qpos, n_q, 0, 0, 41, 1);
  attention_case_amx(t, pool, lens, 3, 16, (heads_t){8, 1, 96}, qseq, qpos, n_q, 0, 1, 42, 1);
  attention_case_amx(t, pool, lens, 3, 16, (heads_t){4, 4, 128}, qseq, qpos, n_q, 0, 0, 43, 1);
  attention_case_amx(t, pool, lens, 3, 16, (heads_t){8, 2, 64}, qseq, qpos, n_q, 24, 1, 44, 1);
  attention_case_amx(t, NULL, lens, 3, 5, (heads_t){6, 3, 64}, qseq, qpos, n_q, 7, 0, 45, 1);
  attention_case_amx(t, NULL, lens, 3, 5, (heads_t){6, 3, 17}, qseq, qpos, n_q, 7, 0, 46, 0);
  static const size_t lens2[] = {230};
  int32_t qseq2[100], qpos2[100];
  for (int32_t i = 0; i < 100; i++) qseq2[i] = 0, qpos2[i] = 130 + i;
  attention_case_amx(t, pool, lens2, 1, 48, (heads_t){32, 8, 64}, qseq2, qpos2, 100, 0, 0, 47, 1);
  attention_case_amx(t, pool, lens2, 1, 16, (heads_t){4, 2, 128}, qseq2, qpos2, 100, 70, 1, 48, 1);
  attention_case_amx(t, pool, lens2, 1, 16, (heads_t){2, 1, 256}, qseq2, qpos2, 100, 0, 0, 49, 1);
  rg_pool_destroy(pool);
}

RG_TEST(ops_attention_window_and_sinks) {
  rg_pool_t *pool = make_pool(t);
  static const size_t lens[] = {3, 200, 1500};
  int32_t qseq[5] = {0, 1, 1, 2, 2}, qpos[5] = {2, 127, 199, 100, 1499};
  attention_case(t, pool, lens, 3, 16, (heads_t){8, 2, 64}, qseq, qpos, 5, 128, 0, 31);
  attention_case(t, pool, lens, 3, 16, (heads_t){8, 2, 64}, qseq, qpos, 5, 0, 1, 32);
  attention_case(t, pool, lens, 3, 16, (heads_t){8, 1, 64}, qseq + 4, qpos + 4, 1, 128, 1, 33);
  attention_case(t, pool, lens, 3, 16, (heads_t){8, 1, 64}, qseq + 4, qpos + 4, 1, 0, 1, 34);
  rg_pool_destroy(pool);
}

RG_TEST(ops_attention_closed_form) {
  // With every key equal, attention is the plain mean of the values.
  rg_kv_cache_t *c;
  RG_REQUIRE_OK(rg_kv_cache_create(RG_F32, 1, 2, 4, 1, 2, &c));
  rg_kv_layer_t kv = rg_kv_cache_layer(c, 0);
  int32_t blocks[2] = {1, 0};
  rg_block_table_t tb = {blocks, 2};
  int32_t seq[5] = {0, 0, 0, 0, 0}, pos[5] = {0, 1, 2, 3, 4};
  float k[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, v[10] = {1, 10, 2, 20, 3, 30, 4, 40, 5, 50};
  rg_attn_batch_t b = {5, seq, pos, &tb, 1};
  RG_REQUIRE_OK(rg_op_kv_write(NULL, &kv, &b, k, v));
  float q[4] = {0.3f, -0.2f, 1, 1}, o[4];
  int32_t qs[2] = {0, 0}, qp[2] = {4, 2};
  rg_attn_batch_t bq = {2, qs, qp, &tb, 1};
  rg_attn_params_t prm = {1, 0, 0, NULL, 0};
  RG_REQUIRE_OK(rg_op_attention(NULL, &kv, &bq, &prm, q, o));
  RG_CHECK_NEAR(o[0], 3, 1e-6);
  RG_CHECK_NEAR(o[1], 30, 1e-6);
  RG_CHECK_NEAR(o[2], 2, 1e-6);
  RG_CHECK_NEAR(o[3], 20, 1e-6);
  // A sink logit equal to each key's logit takes one share of the mass.
  float sink = 0.1f / sqrtf(2.0f);
  rg_attn_params_t ps = {1, 0, 0, &sink, 0};
  float q1[4] = {0.05f, 0.05f, 0.05f, 0.05f};
  RG_REQUIRE_OK(rg_op_attention(NULL, &kv, &bq, &ps, q1, o));
  RG_CHECK_NEAR(o[0], 15.0 / 6, 1e-5);
  RG_CHECK_NEAR(o[2], 6.0 / 4, 1e-5);
  // Window 2 at position 4: positions 3 and 4.
  rg_attn_params_t pw = {1, 0, 2, NULL, 0};
  RG_REQUIRE_OK(rg_op_attention(NULL, &kv, &bq, &pw, q, o));
  RG_CHECK_NEAR(o[0], 4.5, 1e-6);
  RG_CHECK_NEAR(o[3], 25, 1e-6);
  rg_kv_cache_destroy(c);
}

RG_TEST(ops_attention_bad_input) {
  rg_kv_cache_t *c;
  RG_REQUIRE_OK(rg_kv_cache_create(RG_BF16, 1, 4, 16, 2, 8, &c));
  rg_kv_layer_t kv = rg_kv_cache_layer(c, 0);
  int32_t blocks[2] = {3, 1};
  rg_block_table_t tb = {blocks, 2};
  int32_t seq[1] = {0}, pos[1] = {32};
  float q[4 * 8] = {0}, o[4 * 8], k[2 * 8] = {0};
  rg_attn_batch_t b = {1, seq, pos, &tb, 1};
  rg_attn_params_t prm = {4, 0, 0, NULL, 0};
  RG_CHECK_ERR(rg_op_attention(NULL, &kv, &b, &prm, q, o),
               "token 0 is at position 32 of sequence 0, whose block table holds 2 blocks of 16 "
               "positions (0..31)");
  RG_CHECK_ERR(rg_op_kv_write(NULL, &kv, &b, k, k), "position 32");
  pos[0] = 3;
  seq[0] = 1;
  RG_CHECK_ERR(rg_op_attention(NULL, &kv, &b, &prm, q, o),
               "belongs to sequence 1, but the batch has 1");
  seq[0] = 0;
  blocks[1] = 4;
  RG_CHECK_ERR(rg_op_attention_ref(NULL, &kv, &b, &prm, q, o),
               "sequence 0: block table entry 1 is block 4, outside the layer's 4 blocks");
  blocks[1] = 1;
  prm.n_heads = 3;
  RG_CHECK_ERR(rg_op_attention(NULL, &kv, &b, &prm, q, o),
               "3 query heads is not a positive multiple of the 2 kv heads");
  rg_kv_cache_t *bad = NULL;
  RG_CHECK_ERR(rg_kv_cache_create(RG_Q8_0, 1, 4, 16, 2, 8, &bad), "q8_0");
  RG_CHECK(bad == NULL);
  rg_kv_cache_destroy(c);
}

// ---------------------------------------------------------------------------
// MoE

RG_TEST(ops_moe_route_hand_made) {
  // Experts 1 and 2 tie: the lower index comes first.
  float l[2 * 4] = {1, 3, 3, 0, 0, 1, 2, 3};
  int32_t idx[4];
  float w[4];
  double e = exp(1.0), e3 = exp(3.0);
  for (int ref = 0; ref < 2; ref++) {
    rg_status_t (*route)(rg_pool_t *, const float *, size_t, size_t, size_t, rg_moe_mode_t,
                         int32_t *, float *) = ref ? rg_op_moe_route_ref : rg_op_moe_route;
    RG_REQUIRE_OK(route(NULL, l, 2, 4, 2, RG_MOE_SOFTMAX_TOPK_RENORM, idx, w));
    RG_CHECK(idx[0] == 1 && idx[1] == 2 && idx[2] == 3 && idx[3] == 2);
    RG_CHECK_NEAR(w[0], 0.5, 1e-6);
    RG_CHECK_NEAR(w[1], 0.5, 1e-6);
    RG_CHECK_NEAR(w[2], 1 / (1 + 1 / e), 1e-6);
    RG_CHECK_NEAR(w[3], (1 / e) / (1 + 1 / e), 1e-6);
    RG_REQUIRE_OK(route(NULL, l, 2, 4, 2, RG_MOE_SOFTMAX_TOPK, idx, w));
    RG_CHECK_NEAR(w[0], e3 / (e + 2 * e3 + 1), 1e-6);
    RG_CHECK_NEAR(w[1], e3 / (e + 2 * e3 + 1), 1e-6);
    RG_CHECK_NEAR(w[2], e3 / (1 + e + e * e + e3), 1e-6);
    RG_REQUIRE_OK(route(NULL, l, 2, 4, 2, RG_MOE_TOPK_SOFTMAX, idx, w));
    RG_CHECK_NEAR(w[0], 0.5, 1e-6);
    RG_CHECK_NEAR(w[2], 1 / (1 + 1 / e), 1e-6);
    // All equal: the first k experts, equal weights.
    float flat[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    RG_REQUIRE_OK(route(NULL, flat, 1, 4, 3, RG_MOE_SOFTMAX_TOPK, idx, w));
    RG_CHECK(idx[0] == 0 && idx[1] == 1 && idx[2] == 2);
    RG_CHECK_NEAR(w[2], 0.25, 1e-6);
    RG_CHECK_ERR(route(NULL, l, 2, 4, 5, RG_MOE_SOFTMAX_TOPK, idx, w),
                 "top-k 5 must be between 1 and the number of experts 4");
    RG_CHECK_ERR(route(NULL, l, 2, 4, 0, RG_MOE_SOFTMAX_TOPK, idx, w), "top-k 0");
  }
  RG_CHECK(strcmp(rg_moe_mode_name(RG_MOE_TOPK_SOFTMAX), "topk_softmax") == 0);
}

RG_TEST(ops_moe_route_fast_vs_ref) {
  rg_pool_t *pool = make_pool(t);
  uint64_t s = 6;
  static const size_t shapes[][3] = {{37, 64, 8}, {5, 128, 8}, {300, 32, 4}, {1, 8, 2}, {3, 3, 3}};
  for (size_t c = 0; c < 5; c++) {
    size_t T = shapes[c][0], E = shapes[c][1], k = shapes[c][2];
    float *l = malloc(T * E * 4), *w = malloc(T * k * 4), *wr = malloc(T * k * 4);
    int32_t *id = malloc(T * k * 4), *idr = malloc(T * k * 4);
    // Quantized logits so ties happen.
    for (size_t i = 0; i < T * E; i++) l[i] = roundf(urand(&s, -4, 4) * 4) / 4;
    for (int m = 0; m < RG_MOE_MODE_COUNT; m++) {
      RG_REQUIRE_OK(rg_op_moe_route_ref(NULL, l, T, E, k, (rg_moe_mode_t)m, idr, wr));
      RG_REQUIRE_OK(rg_op_moe_route(pool, l, T, E, k, (rg_moe_mode_t)m, id, w));
      RG_CHECK(memcmp(id, idr, T * k * 4) == 0);
      for (size_t i = 0; i < T * k; i++) RG_CHECK_NEAR(w[i], wr[i], 1e-6);
      if (m != RG_MOE_SOFTMAX_TOPK)
        for (size_t r = 0; r < T; r++) {
          double sum = 0;
          for (size_t j = 0; j < k; j++) sum += w[r * k + j];
          RG_CHECK_NEAR(sum, 1.0, 1e-6);
        }
    }
    free(l), free(w), free(wr), free(id), free(idr);
  }
  rg_pool_destroy(pool);
}

RG_TEST(ops_moe_dispatch) {
  // Route, group, gather, run "experts" (expert e scales by e + 1), scatter
  // back; compare with computing each token directly.
  rg_pool_t *pool = make_pool(t);
  uint64_t s = 7;
  size_t T = 33, E = 8, k = 2, dim = 4096 + 5;
  float *logits = malloc(T * E * 4), *w = malloc(T * k * 4), *x = malloc(T * dim * 4);
  int32_t *idx = malloc(T * k * 4), off[9], offr[9], *rows = malloc(T * k * 4),
          *rowsr = malloc(T * k * 4);
  fill(&s, logits, T * E, -2, 2);
  fill(&s, x, T * dim, -1, 1);
  RG_REQUIRE_OK(rg_op_moe_route(pool, logits, T, E, k, RG_MOE_SOFTMAX_TOPK_RENORM, idx, w));
  RG_REQUIRE_OK(rg_op_moe_group(idx, T, k, E, off, rows));
  RG_REQUIRE_OK(rg_op_moe_group_ref(idx, T, k, E, offr, rowsr));
  RG_CHECK(memcmp(off, offr, sizeof off) == 0);
  RG_CHECK(memcmp(rows, rowsr, T * k * 4) == 0);
  RG_CHECK(off[0] == 0 && off[E] == (int32_t)(T * k));
  int *seen = calloc(T * k, sizeof *seen);
  for (size_t e = 0; e < E; e++)
    for (int32_t i = off[e]; i < off[e + 1]; i++) {
      RG_CHECK(idx[rows[i]] == (int32_t)e);
      if (i > off[e]) RG_CHECK(rows[i] > rows[i - 1]);
      seen[rows[i]]++;
    }
  for (size_t r = 0; r < T * k; r++) RG_CHECK(seen[r] == 1);
  float *xe = malloc(T * k * dim * 4), *xer = malloc(T * k * dim * 4);
  float *out = calloc(T * dim, 4), *outr = calloc(T * dim, 4), *want = calloc(T * dim, 4);
  rg_op_moe_gather(pool, x, rows, T * k, k, dim, xe);
  rg_op_moe_gather_ref(NULL, x, rows, T * k, k, dim, xer);
  RG_CHECK(memcmp(xe, xer, T * k * dim * 4) == 0);
  for (size_t e = 0; e < E; e++)
    for (int32_t i = off[e]; i < off[e + 1]; i++)
      for (size_t d = 0; d < dim; d++) xe[(size_t)i * dim + d] *= (float)(e + 1);
  rg_op_moe_scatter_add(pool, xe, rows, T * k, k, w, dim, out);
  rg_op_moe_scatter_add_ref(NULL, xe, rows, T * k, k, w, dim, outr);
  RG_CHECK(memcmp(out, outr, T * dim * 4) == 0);
  for (size_t tk = 0; tk < T; tk++)
    for (size_t j = 0; j < k; j++)
      for (size_t d = 0; d < dim; d++)
        want[tk * dim + d] += w[tk * k + j] * (float)(idx[tk * k + j] + 1) * x[tk * dim + d];
  CHECK_NMSE(out, want, T * dim, 1e-12, "moe dispatch");
  idx[5] = 8;
  RG_CHECK_ERR(rg_op_moe_group(idx, T, k, E, off, rows),
               "token 2 slot 1 routes to expert 8, outside 0..7");
  RG_CHECK_ERR(rg_op_moe_group_ref(idx, T, k, E, off, rows), "expert 8");
  free(logits), free(w), free(x), free(idx), free(rows), free(rowsr), free(seen);
  free(xe), free(xer), free(out), free(outr), free(want);
  rg_pool_destroy(pool);
}

// ---------------------------------------------------------------------------
// Sampling

static int32_t argmax_of(const float *l, size_t n) {
  size_t b = 0;
  for (size_t i = 1; i < n; i++)
    if (l[i] > l[b]) b = i;
  return (int32_t)b;
}

RG_TEST(ops_sample_greedy_and_seeds) {
  uint64_t s = 8;
  size_t V = 1000;
  float *l = malloc(V * 4);
  rg_sampler_t *g, *k1, *a, *b, *c;
  RG_REQUIRE_OK(rg_sampler_create(&(rg_sampler_config_t){0, 0, 1, 1}, V, &g));
  RG_REQUIRE_OK(rg_sampler_create(&(rg_sampler_config_t){1.0f, 1, 1, 99}, V, &k1));
  RG_REQUIRE_OK(rg_sampler_create(&(rg_sampler_config_t){0.8f, 50, 0.95f, 42}, V, &a));
  RG_REQUIRE_OK(rg_sampler_create(&(rg_sampler_config_t){0.8f, 50, 0.95f, 42}, V, &b));
  RG_REQUIRE_OK(rg_sampler_create(&(rg_sampler_config_t){0.8f, 50, 0.95f, 43}, V, &c));
  int differ = 0;
  for (int it = 0; it < 100; it++) {
    fill(&s, l, V, -3, 3);
    if (it % 2) l[700] = l[300] = 5;  // a tie for the top: the lower id wins
    int32_t am = argmax_of(l, V);
    RG_CHECK(rg_sampler_sample(g, l) == am);
    RG_CHECK(rg_sampler_sample(k1, l) == am);
    int32_t ta = rg_sampler_sample(a, l), tb = rg_sampler_sample(b, l),
            tc = rg_sampler_sample(c, l);
    RG_CHECK(ta == tb);
    differ += ta != tc;
    RG_CHECK(ta >= 0 && (size_t)ta < V);
  }
  RG_CHECK(differ > 10);  // another seed, another stream
  // A nucleus smaller than the top token's probability (about 0.006 here)
  // keeps that token only.
  int32_t idx[1000];
  float p[1000];
  fill(&s, l, V, -3, 3);
  RG_CHECK(rg_sample_filter(&(rg_sampler_config_t){1, 0, 0.001f, 0}, l, V, idx, p) == 1);
  RG_CHECK(idx[0] == argmax_of(l, V) && p[0] == 1.0f);
  rg_sampler_destroy(g), rg_sampler_destroy(k1), rg_sampler_destroy(a), rg_sampler_destroy(b);
  rg_sampler_destroy(c);
  free(l);
  rg_sampler_t *bad = NULL;
  RG_CHECK_ERR(rg_sampler_create(&(rg_sampler_config_t){-1, 0, 1, 0}, V, &bad), "temperature -1");
  RG_CHECK_ERR(rg_sampler_create(&(rg_sampler_config_t){1, 0, 0, 0}, V, &bad),
               "top_p 0 must be in (0, 1]");
  RG_CHECK_ERR(rg_sampler_create(&(rg_sampler_config_t){1, -2, 1, 0}, V, &bad), "top_k -2");
  RG_CHECK(bad == NULL);
}

RG_TEST(ops_sample_filter_fast_vs_ref) {
  uint64_t s = 10;
  static const rg_sampler_config_t cfgs[] = {
      {0.7f, 0, 0.9f, 0}, {1, 40, 1, 0},    {1.3f, 50, 0.8f, 0}, {1, 0, 1, 0},
      {0.5f, 0, 0.5f, 0}, {2, 3, 0.99f, 0}, {1, 2000, 0.7f, 0},  {0, 0, 1, 0}};
  size_t V = 1000;
  float *l = malloc(V * 4), *p = malloc(V * 4), *pr = malloc(V * 4);
  int32_t *id = malloc(V * 4), *idr = malloc(V * 4);
  for (int rep = 0; rep < 4; rep++) {
    // rep 1: quantized logits, so ties straddle every cut; rep 3: flat.
    for (size_t i = 0; i < V; i++) {
      float x = urand(&s, -6, 6);
      l[i] = rep == 1 ? roundf(x * 2) / 2 : rep == 3 ? 0.25f : x;
    }
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
      size_t n = rg_sample_filter(&cfgs[c], l, V, id, p);
      size_t nr = rg_sample_filter_ref(&cfgs[c], l, V, idr, pr);
      RG_CHECK(n == nr);
      if (n != nr) continue;
      RG_CHECK(memcmp(id, idr, n * 4) == 0);
      RG_CHECK(memcmp(p, pr, n * 4) == 0);
      double sum = 0;
      for (size_t i = 0; i < n; i++) sum += p[i];
      RG_CHECK_NEAR(sum, 1.0, 1e-5);
    }
  }
  free(l), free(p), free(pr), free(id), free(idr);
}

RG_TEST(ops_sample_frequencies) {
  // 20k draws at temperature 1 follow softmax(logits); with top-k 3 the
  // renormalized top three.
  float l[6] = {1.0f, 0.2f, -0.5f, 1.5f, 0.0f, -1.0f};
  double p[6], sum = 0;
  for (int i = 0; i < 6; i++) sum += p[i] = exp(l[i]);
  for (int i = 0; i < 6; i++) p[i] /= sum;
  for (int topk = 0; topk <= 3; topk += 3) {
    rg_sampler_t *sp;
    RG_REQUIRE_OK(rg_sampler_create(&(rg_sampler_config_t){1, topk, 1, 12345}, 6, &sp));
    int cnt[6] = {0};
    int n = 20000;
    for (int i = 0; i < n; i++) cnt[rg_sampler_sample(sp, l)]++;
    double top3 = p[3] + p[0] + p[1];
    for (int i = 0; i < 6; i++) {
      double want = topk ? (i == 3 || i == 0 || i == 1 ? p[i] / top3 : 0) : p[i];
      double got = (double)cnt[i] / n;
      // 4 standard deviations of a binomial proportion: under 0.7
      // percentage points for every token here.
      double tol = 4 * sqrt(want * (1 - want) / n) + 1e-9;
      if (fabs(got - want) > tol)
        rg_test_fail(t, __FILE__, __LINE__, "top_k %d token %d: frequency %.4f, softmax %.4f", topk,
                     i, got, want);
    }
    rg_sampler_destroy(sp);
  }
}
