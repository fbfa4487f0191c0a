// ops/cpu/attention.c — the paged KV cache, KV writes, and attention.
//
// Work is split over (token, kv head) items, handed out from an atomic
// counter so that mixed context lengths balance across threads. One item
// streams its sequence's keys and values once for all the query heads of its
// GQA group, a tile of up to 16 positions at a time (a tile may span
// blocks), and keeps a running max m, denominator l and unnormalized output acc per
// query head (online softmax):
//   m' = max(m, max_j s_j),  l' = l e^(m-m') + sum_j e^(s_j-m'),
//   acc' = acc e^(m-m') + sum_j e^(s_j-m') v_j,   o = acc / l.
// When there are fewer items than threads to keep busy and contexts are long
// (decode of few sequences, MQA), each item's positions are also split in
// parts ("flash-decoding"); the parts' (m, l, acc) are merged after.
// At the AVX-512 levels, runs of consecutive positions of one sequence
// (prefill chunks) skip the per-token items: blocks of up to 64 query rows
// read each tile once for all of them ("Prefill blocks" below).
//
// Decode attention is bound by reading the cache, so the AVX-512 kernel
// reads f32 and bf16 rows where they lie (no copy), does all 16 scores of a
// tile with 16 accumulators and one transposing reduction, adds value rows
// for up to 4 query heads per load, and prefetches ahead of itself. The
// AVX2 and scalar kernels widen each tile into scratch first.
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/cpu_impl.h"
#include "ops/ops.h"

#if RG_X86
#define RG_T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define RG_T256 __attribute__((target("avx2,fma,f16c")))
#endif

// Positions per tile: one AVX-512 vector of scores per query head.
#define TILE 16
// Below this many positions per part, splitting a context costs more in
// merging than it gains.
#define SPLIT_MIN 512
// Work (attended positions x query heads x head_dim) below which one more
// thread costs more than it saves: waking it, and the cache lines the two
// then share, cost 1-2 us, about what this much work takes on one core. The
// tiny test model's decode attention (4 heads of 16, ~100 positions) took
// 4.8 us a call on two threads against 3.0 us on one (Zen 4 VM).
#define ITEM_WORK_PER_THREAD ((size_t)1 << 16)
// Tiles the kernels prefetch ahead of the one they compute.
#define PREFETCH_TILES 2

// ---------------------------------------------------------------------------
// The cache

static int kv_dtype_ok(rg_dtype_t t) {
  return t == RG_F32 || t == RG_BF16 || t == RG_F16;
}

// Bytes per element of a KV dtype.
static inline size_t esize(rg_dtype_t t) {
  return t == RG_F32 ? 4 : 2;
}

struct rg_kv_cache_s {
  rg_dtype_t dtype;
  size_t n_layers, n_blocks, block_size, n_kv_heads, head_dim;
  size_t half_bytes;  // bytes of one layer's K (or V) blocks
  unsigned char *mem;
};

rg_status_t rg_kv_cache_create(rg_dtype_t dtype, size_t n_layers, size_t n_blocks,
                               size_t block_size, size_t n_kv_heads, size_t head_dim,
                               rg_kv_cache_t **out) {
  *out = NULL;
  if (!kv_dtype_ok(dtype))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "kv cache: dtype %s (%d) is not one of f32, bf16, f16",
                          rg_dtype_name(dtype), (int)dtype);
  if (!n_layers || !n_blocks || !block_size || !n_kv_heads || !head_dim)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "kv cache: layers %zu, blocks %zu, block_size %zu, kv heads %zu and "
                          "head_dim %zu must all be above 0",
                          n_layers, n_blocks, block_size, n_kv_heads, head_dim);
  size_t half, total;
  if (__builtin_mul_overflow(n_blocks, block_size, &half) ||
      __builtin_mul_overflow(half, n_kv_heads, &half) ||
      __builtin_mul_overflow(half, head_dim, &half) ||
      __builtin_mul_overflow(half, esize(dtype), &half) ||
      __builtin_add_overflow(half, (size_t)63, &half) ||
      __builtin_mul_overflow(half & ~(size_t)63, 2 * n_layers, &total))
    return rg_status_make(RG_INVALID_ARGUMENT, "kv cache: size overflows");
  half &= ~(size_t)63;
  rg_kv_cache_t *c = calloc(1, sizeof *c);
  void *mem = NULL;
  if (!c || posix_memalign(&mem, 64, total)) {
    free(c);
    return rg_status_make(RG_OUT_OF_MEMORY, "kv cache: out of memory for %zu bytes", total);
  }
  memset(mem, 0, total);
  *c = (rg_kv_cache_t){dtype, n_layers, n_blocks, block_size, n_kv_heads, head_dim, half, mem};
  *out = c;
  return NULL;
}

void rg_kv_cache_destroy(rg_kv_cache_t *c) {
  if (!c) return;
  free(c->mem);
  free(c);
}

rg_kv_layer_t rg_kv_cache_layer(const rg_kv_cache_t *c, size_t layer) {
  unsigned char *base = c->mem + 2 * layer * c->half_bytes;
  return (rg_kv_layer_t){c->dtype,    c->n_blocks, c->block_size,       c->n_kv_heads,
                         c->head_dim, base,        base + c->half_bytes};
}

rg_status_t rg_attn_batch_check(const rg_kv_layer_t *kv, const rg_attn_batch_t *b) {
  if (!kv_dtype_ok(kv->dtype))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "kv layer: dtype %s (%d) is not one of f32, bf16, f16",
                          rg_dtype_name(kv->dtype), (int)kv->dtype);
  if (!kv->n_blocks || !kv->block_size || !kv->n_kv_heads || !kv->head_dim || !kv->k || !kv->v)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "kv layer: blocks %zu, block_size %zu, kv heads %zu, head_dim %zu "
                          "must be above 0 and k, v set",
                          kv->n_blocks, kv->block_size, kv->n_kv_heads, kv->head_dim);
  for (size_t s = 0; s < b->n_seqs; s++) {
    const rg_block_table_t *tb = &b->tables[s];
    for (size_t i = 0; i < tb->n_blocks; i++)
      if (tb->blocks[i] < 0 || (size_t)tb->blocks[i] >= kv->n_blocks)
        return rg_status_make(RG_INVALID_ARGUMENT,
                              "sequence %zu: block table entry %zu is block %d, outside the "
                              "layer's %zu blocks",
                              s, i, (int)tb->blocks[i], kv->n_blocks);
  }
  for (size_t t = 0; t < b->n_tokens; t++) {
    int32_t s = b->seq[t], p = b->pos[t];
    if (s < 0 || (size_t)s >= b->n_seqs)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "token %zu belongs to sequence %d, but the batch has %zu sequences", t,
                            (int)s, b->n_seqs);
    size_t cap = b->tables[s].n_blocks * kv->block_size;
    if (p < 0 || (size_t)p >= cap)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "token %zu is at position %d of sequence %d, whose block table "
                            "holds %zu blocks of %zu positions (0..%zu)",
                            t, (int)p, (int)s, b->tables[s].n_blocks, kv->block_size,
                            cap ? cap - 1 : 0);
  }
  return NULL;
}

// Element offset of (block, head, slot) in a layer's K or V array.
static inline size_t kv_offset(const rg_kv_layer_t *kv, size_t block, size_t head, size_t slot) {
  return ((block * kv->n_kv_heads + head) * kv->block_size + slot) * kv->head_dim;
}

// ---------------------------------------------------------------------------
// Widening rows of the cache, per level. (ops/convert.h has row converters
// too; these are inlined into attention's tile loop, where a call per
// 128-element row would cost as much as the conversion.)

typedef void (*widen_fn)(const void *src, rg_dtype_t dtype, float *dst, size_t n);

static void widen_scalar(const void *src, rg_dtype_t dtype, float *dst, size_t n) {
  const uint16_t *h = src;
  switch (dtype) {
    case RG_F32:
      memcpy(dst, src, n * sizeof(float));
      break;
    case RG_BF16:
      for (size_t i = 0; i < n; i++) dst[i] = rg_bf16_to_f32(h[i]);
      break;
    case RG_F16:
      for (size_t i = 0; i < n; i++) dst[i] = rg_f16_to_f32(h[i]);
      break;
    default:
      break;
  }
}

#if RG_X86
RG_T512 static inline __mmask16 tail16(size_t n) {
  return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

RG_T512 static void widen_avx512(const void *src, rg_dtype_t dtype, float *dst, size_t n) {
  const uint16_t *h = src;
  switch (dtype) {
    case RG_F32:
      memcpy(dst, src, n * sizeof(float));
      break;
    case RG_BF16:
      for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = tail16(n - i);
        __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, h + i));
        _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
      }
      break;
    case RG_F16:
      for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = tail16(n - i);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, h + i)));
      }
      break;
    default:
      break;
  }
}

RG_T256 static void widen_avx2(const void *src, rg_dtype_t dtype, float *dst, size_t n) {
  const uint16_t *h = src;
  size_t i = 0;
  switch (dtype) {
    case RG_F32:
      memcpy(dst, src, n * sizeof(float));
      return;
    case RG_BF16:
      for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
      }
      break;
    case RG_F16:
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
      break;
    default:
      return;
  }
  widen_scalar(h + i, dtype, dst + i, n - i);
}
#endif

// ---------------------------------------------------------------------------
// KV write

typedef struct {
  rg_cpu_isa_t isa;
  const rg_kv_layer_t *kv;
  const rg_attn_batch_t *b;
  const float *k, *v;
} write_ctx_t;

static void write_rows(void *vc, size_t begin, size_t end, int thread) {
  const write_ctx_t *c = vc;
  const rg_kv_layer_t *kv = c->kv;
  size_t hd = kv->head_dim, es = esize(kv->dtype);
  for (size_t r = begin; r < end; r++) {
    size_t t = r / kv->n_kv_heads, h = r % kv->n_kv_heads;
    size_t p = (size_t)c->b->pos[t];
    const rg_block_table_t *tb = &c->b->tables[c->b->seq[t]];
    size_t off = kv_offset(kv, (size_t)tb->blocks[p / kv->block_size], h, p % kv->block_size);
    // Cannot fail: the dtype and the level were checked before.
    rg_status_free(rg_row_from_f32_isa(c->isa, kv->dtype, c->k + r * hd, (char *)kv->k + off * es,
                                       (int64_t)hd));
    rg_status_free(rg_row_from_f32_isa(c->isa, kv->dtype, c->v + r * hd, (char *)kv->v + off * es,
                                       (int64_t)hd));
  }
}

rg_status_t rg_op_kv_write(rg_pool_t *pool, const rg_kv_layer_t *kv, const rg_attn_batch_t *b,
                           const float *k, const float *v) {
  RG_RETURN_IF_ERROR(rg_attn_batch_check(kv, b));
  write_ctx_t c = {rg_ops_isa(), kv, b, k, v};
  rg_pool_parallel_for(pool, b->n_tokens * kv->n_kv_heads, (8192 + kv->head_dim - 1) / kv->head_dim,
                       write_rows, &c);
  return NULL;
}

// ---------------------------------------------------------------------------
// Attention

// What one item needs to stream one kv head of one sequence.
typedef struct {
  const rg_kv_layer_t *kv;
  const int32_t *blocks;
  size_t h;           // kv head
  size_t G;           // query heads in the group
  size_t hdp;         // head_dim rounded up to 32: row stride of the scratch
  const float *qs;    // (G, hdp) queries times scale, zero padded (see perm32)
  float *kf, *vf;     // (TILE, hdp) widened tile, zero padded
  float *s;           // (G, TILE) scores, then probabilities; then (G) corrections
  const float *zero;  // (hdp) zeros: the rows past the end of a short tile
} attn_job_t;

// Runs the online softmax over positions [j0, j1), updating m, l: (G) and
// acc: (G, hdp).
typedef void (*attn_range_fn)(const attn_job_t *J, size_t j0, size_t j1, float *m, float *l,
                              float *acc);

// Asks for row jj of the tile starting at fa (if it is before j1), all of
// its K and V lines. The scalar and AVX2 kernels call it row by row as they
// load the current tile, so requests trickle out rather than burst (see
// the AVX-512 kernel's notes on prefetching).
static inline void prefetch_row(const attn_job_t *J, size_t fa, size_t jj, size_t j1) {
  if (fa + jj >= j1) return;
  const rg_kv_layer_t *kv = J->kv;
  size_t p = fa + jj, es = esize(kv->dtype), row = kv->head_dim * es;
  size_t off = kv_offset(kv, (size_t)J->blocks[p / kv->block_size], J->h, p % kv->block_size) * es;
  for (size_t b = 0; b < row; b += 64) {
    __builtin_prefetch((const char *)kv->k + off + b, 0, 3);
    __builtin_prefetch((const char *)kv->v + off + b, 0, 3);
  }
}

// Loads the tile of positions [j, j+n), n <= TILE, which may span blocks,
// for the scalar and AVX2 kernels: rows are widened into kf/vf (stride hdp,
// padding columns zero). A full f32 tile inside one block whose rows are
// already hdp wide is read in place instead. Prefetches the tile
// PREFETCH_TILES ahead on the way.
static inline void tile_rows(const attn_job_t *J, widen_fn widen, size_t j, size_t n, size_t j1,
                             const float **kr, const float **vr) {
  const rg_kv_layer_t *kv = J->kv;
  size_t bs = kv->block_size, hd = kv->head_dim, es = esize(kv->dtype), hdp = J->hdp;
  size_t fa = j + PREFETCH_TILES * TILE;
  if (kv->dtype == RG_F32 && hd == hdp && n == TILE && j % bs + TILE <= bs) {
    size_t off = kv_offset(kv, (size_t)J->blocks[j / bs], J->h, j % bs);
    *kr = (const float *)kv->k + off;
    *vr = (const float *)kv->v + off;
    for (size_t jj = 0; jj < TILE; jj++) prefetch_row(J, fa, jj, j1);
    return;
  }
  for (size_t jj = 0; jj < n;) {
    // A run of rows inside one block is contiguous in the cache.
    size_t p = j + jj, run = bs - p % bs;
    if (run > n - jj) run = n - jj;
    size_t off = kv_offset(kv, (size_t)J->blocks[p / bs], J->h, p % bs) * es;
    const char *kb = (const char *)kv->k + off, *vb = (const char *)kv->v + off;
    for (size_t r = 0; r < run; r++, jj++) {
      prefetch_row(J, fa, jj, j1);
      widen(kb + r * hd * es, kv->dtype, J->kf + jj * hdp, hd);
      widen(vb + r * hd * es, kv->dtype, J->vf + jj * hdp, hd);
    }
  }
  *kr = J->kf;
  *vr = J->vf;
}

static inline size_t tile_len(size_t j, size_t j1) {
  return j1 - j < TILE ? j1 - j : TILE;
}

static void attn_range_scalar(const attn_job_t *J, size_t j0, size_t j1, float *m, float *l,
                              float *acc) {
  size_t G = J->G, hdp = J->hdp, hd = J->kv->head_dim;
  for (size_t j = j0; j < j1;) {
    size_t n = tile_len(j, j1);
    const float *kr, *vr;
    tile_rows(J, widen_scalar, j, n, j1, &kr, &vr);
    for (size_t g = 0; g < G; g++) {
      const float *q = J->qs + g * hdp;
      float *s = J->s + g * TILE, mt = -INFINITY;
      for (size_t jj = 0; jj < n; jj++) {
        const float *kk = kr + jj * hdp;
        float d = 0;
        for (size_t i = 0; i < hd; i++) d += q[i] * kk[i];
        s[jj] = d;
        mt = d > mt ? d : mt;
      }
      float mn = m[g] > mt ? m[g] : mt, corr = expf(m[g] - mn), sum = 0;
      for (size_t jj = 0; jj < n; jj++) {
        s[jj] = expf(s[jj] - mn);
        sum += s[jj];
      }
      l[g] = l[g] * corr + sum;
      m[g] = mn;
      float *a = acc + g * hdp;
      if (corr != 1.0f)
        for (size_t i = 0; i < hd; i++) a[i] *= corr;
      for (size_t jj = 0; jj < n; jj++) {
        const float *vv = vr + jj * hdp;
        for (size_t i = 0; i < hd; i++) a[i] += s[jj] * vv[i];
      }
    }
    j += n;
  }
}

#if RG_X86
#include "ops/cpu/simd_exp.h"

// out[j] = sum of the lanes of a[j], j < 16: a transpose folded into adds
// (45 shuffles and adds instead of 16 full reductions). The halving steps
// leave the sums in the lane order sigma below, an involution, so one
// permute by sigma puts sum j in lane j.
RG_T512 static inline __m512 reduce16(const __m512 *a) {
  static const int32_t sigma[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};
  __m512 c[8], d[4], e[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++)
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[i], a[i + 8], 0x44),
                         _mm512_shuffle_f32x4(a[i], a[i + 8], 0xee));
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++)
    d[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[i], c[i + 4], 0x88),
                         _mm512_shuffle_f32x4(c[i], c[i + 4], 0xdd));
#pragma GCC unroll 2
  for (int i = 0; i < 2; i++)
    e[i] = _mm512_add_ps(_mm512_shuffle_ps(d[i], d[i + 2], 0x44),
                         _mm512_shuffle_ps(d[i], d[i + 2], 0xee));
  __m512 f =
      _mm512_add_ps(_mm512_shuffle_ps(e[0], e[1], 0x88), _mm512_shuffle_ps(e[0], e[1], 0xdd));
  return _mm512_permutexvar_ps(_mm512_loadu_si512(sigma), f);
}

RG_T512 static inline __mmask32 tail32(size_t n) {
  return n >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << n) - 1u);
}

// The rows of one tile, read in place from the cache (f32, bf16) or from
// kf/vf (f16, widened there); rows past the tile's end point at zeros.
typedef struct {
  const void *k[TILE], *v[TILE];
} rows512_t;

// raw: point at the cache even for f16 (for prefetching, not reading).
RG_T512 static void rows512(const attn_job_t *J, size_t j, size_t n, int raw, rows512_t *R) {
  const rg_kv_layer_t *kv = J->kv;
  size_t bs = kv->block_size, hd = kv->head_dim, es = esize(kv->dtype);
  size_t bi = j / bs, slot = j % bs;
  for (size_t jj = 0; jj < n; jj++) {
    size_t off = kv_offset(kv, (size_t)J->blocks[bi], J->h, slot) * es;
    const char *kp = (const char *)kv->k + off, *vp = (const char *)kv->v + off;
    if (kv->dtype == RG_F16 && !raw) {
      widen_avx512(kp, RG_F16, J->kf + jj * J->hdp, hd);
      widen_avx512(vp, RG_F16, J->vf + jj * J->hdp, hd);
      kp = (const char *)(J->kf + jj * J->hdp);
      vp = (const char *)(J->vf + jj * J->hdp);
    }
    R->k[jj] = kp;
    R->v[jj] = vp;
    if (++slot == bs) slot = 0, bi++;
  }
  for (size_t jj = n; jj < TILE; jj++) R->k[jj] = R->v[jj] = J->zero;
}

// Prefetching. Blocks sit at scattered addresses and hardware prefetchers
// stop at each 4 KiB page, so the kernels ask for the tile PREFETCH_TILES
// ahead themselves: each line of it while they read the same line of the
// current tile. Spread out like this the requests overlap with compute;
// issued as one burst per tile they would queue behind the few miss
// buffers a core has and stall it. Into L2 (prefetcht1), not L1: a
// prefetch into L1 holds one of those buffers until its line comes from
// DRAM, which capped the lines in flight; on a Zen 4 VM (2 threads,
// bench_attention decode, two alternated runs) KV streamed at 11-22 GB/s
// (0.5-0.83 of read bandwidth) against 6.5-15 (0.15-0.45) into L1.
static inline const char *pf_at(const rows512_t *pf, int v, int jj, size_t byte) {
  return (const char *)(v ? pf->v[jj] : pf->k[jj]) + byte;
}

// Scores of the 16 rows for query q (f32 rows): one accumulator per row, so
// each query vector is loaded once per tile and no row is reduced alone.
RG_T512 static inline __m512 scores_f32(const float *q, const rows512_t *R, size_t hd,
                                        const rows512_t *pf, size_t pes) {
  __m512 a[TILE];
#pragma GCC unroll 16
  for (int jj = 0; jj < TILE; jj++) a[jj] = _mm512_setzero_ps();
  for (size_t i = 0; i < hd; i += 16) {
    __mmask16 m = tail16(hd - i);
    __m512 qv = _mm512_load_ps(q + i);
    if (pf)
      for (int jj = 0; jj < TILE; jj++) _mm_prefetch(pf_at(pf, 0, jj, i * pes), _MM_HINT_T1);
#pragma GCC unroll 16
    for (int jj = 0; jj < TILE; jj++)
      a[jj] = _mm512_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, (const float *)R->k[jj] + i), a[jj]);
  }
  return reduce16(a);
}

// bf16 rows are read 32 at a time and split without a shuffle: a 32-bit
// lane holds elements 2i (low half) and 2i+1 (high half), and each half
// moved to the top is that element as an f32. So the query is stored
// permuted to match — per 32 columns, the 16 even ones then the 16 odd ones
// ("perm32") — and so is acc, which is put back in order at the end.
RG_T512 static inline __m512 scores_bf16(const float *q, const rows512_t *R, size_t hd,
                                         const rows512_t *pf) {
  const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
  __m512 a[TILE];
#pragma GCC unroll 16
  for (int jj = 0; jj < TILE; jj++) a[jj] = _mm512_setzero_ps();
  for (size_t i = 0; i < hd; i += 32) {
    __mmask32 m = tail32(hd - i);
    __m512 qe = _mm512_load_ps(q + i), qo = _mm512_load_ps(q + i + 16);
    if (pf)
      for (int jj = 0; jj < TILE; jj++) _mm_prefetch(pf_at(pf, 0, jj, i * 2), _MM_HINT_T1);
#pragma GCC unroll 16
    for (int jj = 0; jj < TILE; jj++) {
      __m512i x = _mm512_maskz_loadu_epi16(m, (const uint16_t *)R->k[jj] + i);
      a[jj] = _mm512_fmadd_ps(qe, _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)), a[jj]);
      a[jj] = _mm512_fmadd_ps(qo, _mm512_castsi512_ps(_mm512_and_si512(x, hi)), a[jj]);
    }
  }
  return reduce16(a);
}

// Into and out of the perm32 order, 32 columns a step: a decode item's
// query setup and output had been scalar loops over the column order, which at
// short contexts cost more than the item's tiles (1B shapes, 16 sequences
// of 1-32 positions: ~0.7 us of an item's 1 us on one thread).
// perm32: per 32 columns, the 16 even ones first, then the 16 odd ones.
// dst[0, hdp) = src[0, hd) * s in perm32 order, zeros past hd.
RG_T512 static void perm32_in(const float *src, float *dst, size_t hd, size_t hdp, float s) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30),
                od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
  const __m512 sv = _mm512_set1_ps(s);
  for (size_t c = 0; c < hdp; c += 32) {
    const __m512 lo = _mm512_maskz_loadu_ps(c < hd ? tail16(hd - c) : 0, src + c),
                 hi = _mm512_maskz_loadu_ps(c + 16 < hd ? tail16(hd - c - 16) : 0, src + c + 16);
    _mm512_store_ps(dst + c, _mm512_mul_ps(_mm512_permutex2var_ps(lo, ev, hi), sv));
    _mm512_store_ps(dst + c + 16, _mm512_mul_ps(_mm512_permutex2var_ps(lo, od, hi), sv));
  }
}

// o[0, hd) = acc (perm32 order) * s.
RG_T512 static void perm32_out(const float *acc, float *o, size_t hd, float s) {
  const __m512i lo_ix = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23),
                hi_ix = _mm512_add_epi32(lo_ix, _mm512_set1_epi32(8));
  const __m512 sv = _mm512_set1_ps(s);
  for (size_t c = 0; c < hd; c += 32) {
    const __m512 e = _mm512_load_ps(acc + c), d = _mm512_load_ps(acc + c + 16);
    _mm512_mask_storeu_ps(o + c, tail16(hd - c),
                          _mm512_mul_ps(_mm512_permutex2var_ps(e, lo_ix, d), sv));
    if (c + 16 < hd)
      _mm512_mask_storeu_ps(o + c + 16, tail16(hd - c - 16),
                            _mm512_mul_ps(_mm512_permutex2var_ps(e, hi_ix, d), sv));
  }
}

// The scores of four heads that share the KV head (GQA), qs those heads'
// queries (4 x hdp, perm32), against the tile's 16 bf16 rows: each key
// vector loaded and widened once for the four, where scores_bf16 per head
// loads and widens every row four times. Rows go four at a time, 16
// accumulators (head h, row r at h * 4 + r), so each reduce16 yields four
// rows of all four heads; a 4 x 4 transpose of 128-bit blocks then gives
// each head its 16 scores in row order. On the 1B shapes (32/8 heads,
// head_dim 64) the scores had been three quarters of a tile's time.
RG_T512 static void scores_bf16_g4(const float *qs, size_t hdp, const rows512_t *R, size_t hd,
                                   const rows512_t *pf, __m512 out[4]) {
  const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
  __m512 v[4];
  for (int grp = 0; grp < 4; grp++) {
    __m512 a[16];
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) a[k] = _mm512_setzero_ps();
    for (size_t i = 0; i < hd; i += 32) {
      const __mmask32 m = tail32(hd - i);
      if (pf && grp == 0)
        for (int jj = 0; jj < TILE; jj++) _mm_prefetch(pf_at(pf, 0, jj, i * 2), _MM_HINT_T1);
      __m512 qe[4], qo[4];
#pragma GCC unroll 4
      for (int h = 0; h < 4; h++) {
        qe[h] = _mm512_load_ps(qs + h * hdp + i);
        qo[h] = _mm512_load_ps(qs + h * hdp + i + 16);
      }
#pragma GCC unroll 4
      for (int r = 0; r < 4; r++) {
        const __m512i x = _mm512_maskz_loadu_epi16(m, (const uint16_t *)R->k[grp * 4 + r] + i);
        const __m512 ke = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)),
                     ko = _mm512_castsi512_ps(_mm512_and_si512(x, hi));
#pragma GCC unroll 4
        for (int h = 0; h < 4; h++) {
          a[h * 4 + r] = _mm512_fmadd_ps(qe[h], ke, a[h * 4 + r]);
          a[h * 4 + r] = _mm512_fmadd_ps(qo[h], ko, a[h * 4 + r]);
        }
      }
    }
    v[grp] = reduce16(a);  // lane h * 4 + r: head h, row grp * 4 + r
  }
  // Head h's scores: block h of each v[grp], in grp order.
  const __m512 t0 = _mm512_shuffle_f32x4(v[0], v[1], 0x44),
               t1 = _mm512_shuffle_f32x4(v[0], v[1], 0xee),
               t2 = _mm512_shuffle_f32x4(v[2], v[3], 0x44),
               t3 = _mm512_shuffle_f32x4(v[2], v[3], 0xee);
  out[0] = _mm512_shuffle_f32x4(t0, t2, 0x88);
  out[1] = _mm512_shuffle_f32x4(t0, t2, 0xdd);
  out[2] = _mm512_shuffle_f32x4(t1, t3, 0x88);
  out[3] = _mm512_shuffle_f32x4(t1, t3, 0xdd);
}

// acc[g0+gi][c .. c+16*CW) = acc * corr + sum_j p[g0+gi][j] v[j][...] for
// GN heads at once, so each value vector loaded serves GN heads. GN, CW <= 4
// are constants at every call: the accumulators stay in registers.
RG_T512 static inline __attribute__((always_inline)) void vacc_f32(
    float *acc, size_t hdp, size_t hd, const float *corr, const float *p, const rows512_t *R,
    const rows512_t *pf, size_t pes, size_t g0, size_t c, const int GN, const int CW) {
  __m512 a[4][4];
  __mmask16 m[4];
#pragma GCC unroll 4
  for (int v = 0; v < CW; v++) m[v] = c + 16 * v < hd ? tail16(hd - c - 16 * v) : 0;
#pragma GCC unroll 4
  for (int gi = 0; gi < GN; gi++) {
    __m512 cr = _mm512_set1_ps(corr[g0 + gi]);
#pragma GCC unroll 4
    for (int v = 0; v < CW; v++)
      a[gi][v] = _mm512_mul_ps(_mm512_load_ps(acc + (g0 + gi) * hdp + c + 16 * v), cr);
  }
  for (size_t jj = 0; jj < TILE; jj++) {
    const float *vr = (const float *)R->v[jj] + c;
    if (pf)
      for (int v = 0; v < CW; v++)
        _mm_prefetch(pf_at(pf, 1, (int)jj, (c + 16 * (size_t)v) * pes), _MM_HINT_T1);
    __m512 vv[4];
#pragma GCC unroll 4
    for (int v = 0; v < CW; v++) vv[v] = _mm512_maskz_loadu_ps(m[v], vr + 16 * v);
#pragma GCC unroll 4
    for (int gi = 0; gi < GN; gi++) {
      __m512 pb = _mm512_set1_ps(p[(g0 + gi) * TILE + jj]);
#pragma GCC unroll 4
      for (int v = 0; v < CW; v++) a[gi][v] = _mm512_fmadd_ps(pb, vv[v], a[gi][v]);
    }
  }
#pragma GCC unroll 4
  for (int gi = 0; gi < GN; gi++)
#pragma GCC unroll 4
    for (int v = 0; v < CW; v++) _mm512_store_ps(acc + (g0 + gi) * hdp + c + 16 * v, a[gi][v]);
}

// The same for bf16 rows in the perm32 layout: NL loads of 32 columns.
RG_T512 static inline __attribute__((always_inline)) void vacc_bf16(
    float *acc, size_t hdp, size_t hd, const float *corr, const float *p, const rows512_t *R,
    const rows512_t *pf, size_t g0, size_t c, const int GN, const int NL) {
  const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
  __m512 a[4][4];
  __mmask32 m[2];
#pragma GCC unroll 2
  for (int l = 0; l < NL; l++) m[l] = c + 32 * l < hd ? tail32(hd - c - 32 * l) : 0;
#pragma GCC unroll 4
  for (int gi = 0; gi < GN; gi++) {
    __m512 cr = _mm512_set1_ps(corr[g0 + gi]);
#pragma GCC unroll 4
    for (int v = 0; v < 2 * NL; v++)
      a[gi][v] = _mm512_mul_ps(_mm512_load_ps(acc + (g0 + gi) * hdp + c + 16 * v), cr);
  }
  for (size_t jj = 0; jj < TILE; jj++) {
    const uint16_t *vr = (const uint16_t *)R->v[jj] + c;
    if (pf)
      for (int l = 0; l < NL; l++)
        _mm_prefetch(pf_at(pf, 1, (int)jj, (c + 32 * (size_t)l) * 2), _MM_HINT_T1);
    __m512 vv[4];
#pragma GCC unroll 2
    for (int l = 0; l < NL; l++) {
      __m512i x = _mm512_maskz_loadu_epi16(m[l], vr + 32 * l);
      vv[2 * l] = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
      vv[2 * l + 1] = _mm512_castsi512_ps(_mm512_and_si512(x, hi));
    }
#pragma GCC unroll 4
    for (int gi = 0; gi < GN; gi++) {
      __m512 pb = _mm512_set1_ps(p[(g0 + gi) * TILE + jj]);
#pragma GCC unroll 4
      for (int v = 0; v < 2 * NL; v++) a[gi][v] = _mm512_fmadd_ps(pb, vv[v], a[gi][v]);
    }
  }
#pragma GCC unroll 4
  for (int gi = 0; gi < GN; gi++)
#pragma GCC unroll 4
    for (int v = 0; v < 2 * NL; v++) _mm512_store_ps(acc + (g0 + gi) * hdp + c + 16 * v, a[gi][v]);
}

#define VACC_F32(gn, cw)                                          \
  case (gn)*8 + (cw):                                             \
    vacc_f32(acc, hdp, hd, corr, p, &R, vpf, pes, g0, c, gn, cw); \
    break;
#define VACC_BF16(gn, nl)                                     \
  case (gn)*8 + (nl):                                         \
    vacc_bf16(acc, hdp, hd, corr, p, &R, vpf, g0, c, gn, nl); \
    break;

RG_T512 static void attn_range_avx512(const attn_job_t *J, size_t j0, size_t j1, float *m, float *l,
                                      float *acc) {
  size_t G = J->G, hdp = J->hdp, hd = J->kv->head_dim;
  int bf16 = J->kv->dtype == RG_BF16;
  float *p = J->s, *corr = J->s + G * TILE;  // corr: (G) after s in the scratch
  size_t pes = esize(J->kv->dtype);          // bytes per element of the rows prefetched
  rows512_t R, ahead;
  for (size_t j = j0; j < j1;) {
    size_t n = tile_len(j, j1), fa = j + PREFETCH_TILES * TILE;
    const rows512_t *pf = NULL;
    if (j == j0)  // the tiles before the first prefetched one: ask now
      for (size_t a = j + n; a < fa && a < j1; a += TILE) {
        rows512(J, a, tile_len(a, j1), 1, &ahead);
        for (int jj = 0; jj < TILE; jj++)
          for (size_t b = 0; b < hd * pes; b += 64) {
            _mm_prefetch(pf_at(&ahead, 0, jj, b), _MM_HINT_T1);
            _mm_prefetch(pf_at(&ahead, 1, jj, b), _MM_HINT_T1);
          }
      }
    if (fa < j1) {
      rows512(J, fa, tile_len(fa, j1), 1, &ahead);
      pf = &ahead;
    }
    rows512(J, j, n, 0, &R);
    __mmask16 live = tail16(n);
    // Heads four at a time where they come in fours (bf16 KV), else one.
    const size_t gb = bf16 && G % 4 == 0 ? 4 : 1;
    // Which takes the rows four at a time: the tile's keys asked into L1
    // first, all of them, so that their lines come in together rather than
    // four rows' at a time.
    if (gb == 4)
      for (int jj = 0; jj < TILE; jj++)
        for (size_t b = 0; b < hd * 2; b += 64)
          _mm_prefetch((const char *)R.k[jj] + b, _MM_HINT_T0);
    for (size_t g0 = 0; g0 < G; g0 += gb) {
      // Only the first pass prefetches: one request per line.
      const rows512_t *kpf = g0 == 0 ? pf : NULL;
      __m512 sc[4];
      if (gb == 4)
        scores_bf16_g4(J->qs + g0 * hdp, hdp, &R, hd, kpf, sc);
      else
        sc[0] = bf16 ? scores_bf16(J->qs + g0 * hdp, &R, hd, kpf)
                     : scores_f32(J->qs + g0 * hdp, &R, hd, kpf, pes);
      for (size_t h = 0; h < gb; h++) {
        const size_t g = g0 + h;
        __m512 sv = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), live, sc[h]);
        float mt = _mm512_reduce_max_ps(sv), mn = m[g] > mt ? m[g] : mt;
        // The running sums are rescaled only when the maximum moves, which
        // after a sequence's first tiles it seldom does (exp(0) is 1
        // exactly, so the result is the same): the exp of one scalar in a
        // whole vector had been a sixth of a tile.
        corr[g] = mt > m[g] ? _mm512_cvtss_f32(exp512(_mm512_set1_ps(m[g] - mn))) : 1.0f;
        __m512 pv = exp512(_mm512_sub_ps(sv, _mm512_set1_ps(mn)));  // dead rows: 0
        _mm512_store_ps(p + g * TILE, pv);
        l[g] = l[g] * corr[g] + _mm512_reduce_add_ps(pv);
        m[g] = mn;
      }
    }
    for (size_t g0 = 0; g0 < G; g0 += 4) {
      size_t gn = G - g0 < 4 ? G - g0 : 4;
      const rows512_t *vpf = g0 == 0 ? pf : NULL;
      for (size_t c = 0; c < hdp; c += 64) {
        size_t cw = hdp - c < 64 ? (hdp - c) / 16 : 4;  // 2 or 4: hdp is a multiple of 32
        // clang-format off
        if (bf16) {
          switch (gn * 8 + cw / 2) {
            VACC_BF16(1, 1) VACC_BF16(1, 2) VACC_BF16(2, 1) VACC_BF16(2, 2)
            VACC_BF16(3, 1) VACC_BF16(3, 2) VACC_BF16(4, 1) VACC_BF16(4, 2)
            default: break;
          }
        } else {
          switch (gn * 8 + cw) {
            VACC_F32(1, 2) VACC_F32(1, 4) VACC_F32(2, 2) VACC_F32(2, 4)
            VACC_F32(3, 2) VACC_F32(3, 4) VACC_F32(4, 2) VACC_F32(4, 4)
            default: break;
          }
        }
        // clang-format on
      }
    }
    j += n;
  }
}
#undef VACC_F32
#undef VACC_BF16

RG_T256 static inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// AVX2 reads the same zero-padded rows (hdp is a multiple of 32, so of 16)
// and leaves the few exps per tile to expf.
RG_T256 static void attn_range_avx2(const attn_job_t *J, size_t j0, size_t j1, float *m, float *l,
                                    float *acc) {
  size_t G = J->G, hdp = J->hdp;
  for (size_t j = j0; j < j1;) {
    size_t n = tile_len(j, j1);
    const float *kr, *vr;
    tile_rows(J, widen_avx2, j, n, j1, &kr, &vr);
    for (size_t jj = 0; jj < n; jj++) {
      const float *kk = kr + jj * hdp;
      for (size_t g = 0; g < G; g++) {
        const float *q = J->qs + g * hdp;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (size_t i = 0; i < hdp; i += 16) {
          a0 = _mm256_fmadd_ps(_mm256_load_ps(q + i), _mm256_loadu_ps(kk + i), a0);
          a1 = _mm256_fmadd_ps(_mm256_load_ps(q + i + 8), _mm256_loadu_ps(kk + i + 8), a1);
        }
        J->s[g * TILE + jj] = hsum256(_mm256_add_ps(a0, a1));
      }
    }
    for (size_t g = 0; g < G; g++) {
      float *s = J->s + g * TILE, mt = -INFINITY;
      for (size_t jj = 0; jj < n; jj++) mt = s[jj] > mt ? s[jj] : mt;
      float mn = m[g] > mt ? m[g] : mt, corr = expf(m[g] - mn), sum = 0;
      for (size_t jj = 0; jj < n; jj++) {
        s[jj] = expf(s[jj] - mn);
        sum += s[jj];
      }
      l[g] = l[g] * corr + sum;
      m[g] = mn;
      float *a = acc + g * hdp;
      __m256 c = _mm256_set1_ps(corr);
      for (size_t i = 0; i < hdp; i += 16) {
        __m256 a0 = _mm256_mul_ps(_mm256_load_ps(a + i), c);
        __m256 a1 = _mm256_mul_ps(_mm256_load_ps(a + i + 8), c);
        for (size_t jj = 0; jj < n; jj++) {
          const float *vv = vr + jj * hdp + i;
          __m256 pj = _mm256_set1_ps(s[jj]);
          a0 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vv), a0);
          a1 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vv + 8), a1);
        }
        _mm256_store_ps(a + i, a0);
        _mm256_store_ps(a + i + 8, a1);
      }
    }
    j += n;
  }
}
#endif

typedef struct {
  const rg_kv_layer_t *kv;
  const rg_attn_batch_t *b;
  const float *q;
  float *o;
  const float *sinks;
  attn_range_fn range;
  size_t n_heads, G, hdp, window, splits, n_items;
  int perm32;  // qs and acc in the AVX-512 bf16 kernel's column order
  float scale;
  atomic_size_t next;
  float *scratch;  // per thread: thread_floats floats
  size_t thread_floats;
  float *parts;  // splits > 1: per (token, kv head, part): (G) m, (G) l, (G, hdp) acc
  // Tokens the per-token items cover (NULL: all of the batch's, in order);
  // the others run as prefill blocks (see "Prefill blocks" below).
  const int32_t *tok;
  const int32_t *blk;  // (n_blk) first token of each block; its length in blk_len
  const uint8_t *blk_len;
  size_t n_blk, blk_floats;
  atomic_size_t blk_next;
  int amx;  // blocks run on the AMX tiles (attention_amx.c)
  // On the tiles: the runs of the blocks (blk_run[block]), and V^T of
  // every run and kv head, packed once for all of the run's blocks.
  const struct amx_run_s *runs;
  const int32_t *blk_run;
  size_t n_runs, vt_units;
  uint16_t *vt;  // (vt_units, SLICE, head_dim) bf16
} attn_ctx_t;

// A prefill run as the tiles see it: its positions [lo, hi), packed in
// slices of RG__ATTN_AMX_SLICE from jb0; units [u0, u0 + n_kv_heads *
// slices) of vt are its kv heads' slices, head by head.
typedef struct amx_run_s {
  size_t jb0, lo, hi, slices, u0;
  int32_t t0;  // its first token
} amx_run_t;

static size_t part_floats(const attn_ctx_t *c) {
  return c->G * (2 + c->hdp);
}

// First position token t sees.
static size_t attn_start(const attn_ctx_t *c, size_t t) {
  size_t p = (size_t)c->b->pos[t];
  return c->window && p + 1 > c->window ? p + 1 - c->window : 0;
}

// Writes o for query head qh from a final (m, l, acc), folding in the head's
// sink logit if any: it joins the denominator only. perm: acc's columns are
// in perm32 order (see perm32_in).
static void attn_finish_cols(const attn_ctx_t *c, size_t t, size_t qh, float m, float l,
                             const float *acc, int perm) {
  size_t hd = c->kv->head_dim;
  float *o = c->o + (t * c->n_heads + qh) * hd;
  float scale;
  if (c->sinks) {
    float sk = c->sinks[qh], mm = m > sk ? m : sk;
    float cm = expf(m - mm);
    l = l * cm + expf(sk - mm);
    scale = l > 0 ? cm / l : 0;
  } else {
    scale = l > 0 ? 1.0f / l : 0;
  }
#if RG_X86
  if (perm) {  // only the AVX-512 levels set perm32
    perm32_out(acc, o, hd, scale);
    return;
  }
#endif
  for (size_t i = 0; i < hd; i++) o[i] = acc[i] * scale;
}

static void attn_finish(const attn_ctx_t *c, size_t t, size_t qh, float m, float l,
                        const float *acc) {
  attn_finish_cols(c, t, qh, m, l, acc, c->perm32);
}

static void attn_worker(void *vc, size_t begin, size_t end, int thread) {
  attn_ctx_t *c = vc;
  size_t G = c->G, hdp = c->hdp, hd = c->kv->head_dim, nkv = c->kv->n_kv_heads;
  float *base = c->scratch + (size_t)thread * c->thread_floats;
  // The padding columns of kf and vf are never written by widening and
  // must read as zeros in the padded dot products.
  memset(base, 0, c->thread_floats * sizeof *base);
  attn_job_t J = {.kv = c->kv, .G = G, .hdp = hdp};
  float *qs = base, *acc = qs + G * hdp;
  J.qs = qs;
  J.kf = acc + G * hdp;
  J.vf = J.kf + TILE * hdp;
  J.s = J.vf + TILE * hdp;
  float *m = J.s + G * TILE + G, *l = m + G;  // corr sits between s and m
  J.zero = l + G;
  for (;;) {
    size_t it = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
    if (it >= c->n_items) break;
    // Hand out the last tokens first: in a prefill chunk they see the
    // longest contexts, and starting them early shortens the tail.
    it = c->n_items - 1 - it;
    size_t part = it % c->splits, th = it / c->splits, t = th / nkv, h = th % nkv;
    if (c->tok) t = (size_t)c->tok[t];
    J.h = h;
    J.blocks = c->b->tables[c->b->seq[t]].blocks;
    size_t j0 = attn_start(c, t), j1 = (size_t)c->b->pos[t] + 1;
    if (c->splits > 1) {
      // Parts start on tile boundaries so that no tile is cut in two.
      size_t len = j1 - j0, per = (len + c->splits - 1) / c->splits;
      per = (per + TILE - 1) / TILE * TILE;
      size_t a = j0 + part * per, e = a + per;
      j0 = a < j1 ? a : j1;
      j1 = e < j1 ? e : j1;
    }
    for (size_t g = 0; g < G; g++) {
      const float *q = c->q + (t * c->n_heads + h * G + g) * hd;
#if RG_X86
      if (c->perm32) {
        perm32_in(q, qs + g * hdp, hd, hdp, c->scale);
      } else
#endif
      {
        for (size_t i = 0; i < hd; i++) qs[g * hdp + i] = q[i] * c->scale;
        for (size_t i = hd; i < hdp; i++) qs[g * hdp + i] = 0;
      }
      m[g] = -INFINITY;
      l[g] = 0;
    }
    memset(acc, 0, G * hdp * sizeof *acc);
    if (j0 < j1) c->range(&J, j0, j1, m, l, acc);
    if (c->splits == 1) {
      for (size_t g = 0; g < G; g++) attn_finish(c, t, h * G + g, m[g], l[g], acc + g * hdp);
    } else {
      float *pp = c->parts + it * part_floats(c);
      memcpy(pp, m, G * sizeof *m);
      memcpy(pp + G, l, G * sizeof *l);
      memcpy(pp + 2 * G, acc, G * hdp * sizeof *acc);
    }
  }
}

// Merges the parts of (token, kv head) items [begin, end).
static void attn_merge(void *vc, size_t begin, size_t end, int thread) {
  attn_ctx_t *c = vc;
  size_t G = c->G, hdp = c->hdp, S = c->splits, nkv = c->kv->n_kv_heads;
  float *acc = c->scratch + (size_t)thread * c->thread_floats;
  for (size_t th = begin; th < end; th++) {
    const float *p0 = c->parts + th * S * part_floats(c);
    for (size_t g = 0; g < G; g++) {
      float mm = -INFINITY, l = 0;
      for (size_t s = 0; s < S; s++) {
        float ms = p0[s * part_floats(c) + g];
        mm = ms > mm ? ms : mm;
      }
      memset(acc, 0, hdp * sizeof *acc);
      for (size_t s = 0; s < S; s++) {
        const float *ps = p0 + s * part_floats(c);
        if (ps[G + g] == 0) continue;  // an empty part
        float w = expf(ps[g] - mm);
        l += ps[G + g] * w;
        const float *a = ps + 2 * G + g * hdp;
        for (size_t i = 0; i < hdp; i++) acc[i] += a[i] * w;
      }
      size_t t = th / nkv;
      if (c->tok) t = (size_t)c->tok[t];
      attn_finish(c, t, (th % nkv) * G + g, mm, l, acc);
    }
  }
}

#if RG_X86
// ---------------------------------------------------------------------------
// Prefill blocks
//
// A prefill chunk is a run of consecutive positions of one sequence, and
// every token of it reads the same keys and values: one item per (block of
// up to QROWS / G tokens, kv head) streams each tile of 16 positions once
// for all its QROWS query rows, as two small matrix products with the
// online softmax between them, instead of once per token. Rows sit in
// vector lanes (queries transposed once per item): the 16 scores of a tile
// for 16 rows are hd FMAs of a query vector by broadcast key elements, and
// the softmax's max, exp and sums run across positions with no reduction
// across lanes; each row's probabilities then weight the value rows, 2
// rows per value load. Positions a row does not see (causal, window) are
// masked per lane.
enum { QROWS = 64, BLK_MIN = 4 };

// Floats of one thread's block scratch for G heads and hdp columns.
static size_t blk_scratch_floats(size_t hdp) {
  // qT (hdp, QROWS), acc (QROWS, hdp); kf, vf (16, hdp); sT (16, QROWS);
  // corr, m, l, and the rows' first and last positions (QROWS each)
  return (2 * QROWS + 32) * hdp + QROWS * (TILE + 5);
}

// acc rows r and r + 1 (NV vectors each) scaled by their corrections, plus
// the n value rows weighted by their probabilities (p[cc * QROWS] and the
// next row's beside it: rows are in lanes). NV is a constant, so
// both rows' accumulators stay in registers.
#define BLK_PV(NV)                                                                               \
  RG_T512 static void blk_pv##NV(float *acc, const float *p, const float *corr, const float *vf, \
                                 size_t hdp, size_t n) {                                         \
    __m512 a0[NV], a1[NV];                                                                       \
    const __m512 c0 = _mm512_set1_ps(corr[0]), c1 = _mm512_set1_ps(corr[1]);                     \
    _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) {                                       \
      a0[v] = _mm512_mul_ps(_mm512_load_ps(acc + 16 * v), c0);                                   \
      a1[v] = _mm512_mul_ps(_mm512_load_ps(acc + hdp + 16 * v), c1);                             \
    }                                                                                            \
    for (size_t cc = 0; cc < n; cc++) {                                                          \
      const __m512 p0 = _mm512_set1_ps(p[cc * QROWS]), p1 = _mm512_set1_ps(p[cc * QROWS + 1]);   \
      _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) {                                     \
        const __m512 x = _mm512_load_ps(vf + cc * hdp + 16 * v);                                 \
        a0[v] = _mm512_fmadd_ps(p0, x, a0[v]);                                                   \
        a1[v] = _mm512_fmadd_ps(p1, x, a1[v]);                                                   \
      }                                                                                          \
    }                                                                                            \
    _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) {                                       \
      _mm512_store_ps(acc + 16 * v, a0[v]);                                                      \
      _mm512_store_ps(acc + hdp + 16 * v, a1[v]);                                                \
    }                                                                                            \
  }
BLK_PV(2)
BLK_PV(4)
BLK_PV(6)
BLK_PV(8)
#undef BLK_PV

// Rows [j, j + n) of K (kv = 0) or V (1) of kv head h, widened into dst
// (16, hdp); rows past n are zero.
RG_T512 static void blk_rows(const attn_ctx_t *c, const int32_t *blocks, size_t h, size_t j,
                             size_t n, int v, float *dst) {
  const rg_kv_layer_t *kv = c->kv;
  size_t es = esize(kv->dtype), hd = kv->head_dim, bs = kv->block_size;
  const char *base = v ? kv->v : kv->k;
  for (size_t cc = 0; cc < TILE; cc++) {
    float *row = dst + cc * c->hdp;
    if (cc < n) {
      size_t p = j + cc;
      widen_avx512(base + kv_offset(kv, (size_t)blocks[p / bs], h, p % bs) * es, kv->dtype, row,
                   hd);
    } else {
      memset(row, 0, hd * sizeof *row);
    }
  }
}

// One item: block bi of the prefill blocks, kv head h.
RG_T512 static void blk_item(const attn_ctx_t *c, size_t bi, size_t h, float *base) {
  const size_t G = c->G, hdp = c->hdp, hd = c->kv->head_dim, T = c->blk_len[bi], R = T * G;
  // Rows past R (to a multiple of 16) are zero queries that see nothing, so
  // every vector below holds 16 whole rows.
  const size_t Rp = (R + 15) / 16 * 16;
  const size_t t0 = (size_t)c->blk[bi], P0 = (size_t)c->b->pos[t0];
  const int32_t *blocks = c->b->tables[c->b->seq[t0]].blocks;
  float *qT = base, *acc = qT + QROWS * hdp, *kf = acc + QROWS * hdp, *vf = kf + TILE * hdp,
        *sT = vf + TILE * hdp, *corr = sT + QROWS * TILE, *m = corr + QROWS, *l = m + QROWS;
  int32_t *lo = (int32_t *)(l + QROWS), *hi = lo + QROWS;
  memset(qT, 0, hdp * Rp * sizeof *qT);
  memset(acc, 0, Rp * hdp * sizeof *acc);
  for (size_t r = 0; r < Rp; r++) {
    m[r] = -INFINITY, l[r] = 0;
    // Positions row r's token sees: [lo, hi); none for the padding rows.
    lo[r] = r < R ? (int32_t)attn_start(c, t0 + r / G) : 0;
    hi[r] = r < R ? (int32_t)(P0 + r / G + 1) : 0;
    if (r >= R) continue;
    const float *q = c->q + ((t0 + r / G) * c->n_heads + h * G + r % G) * hd;
    for (size_t i = 0; i < hd; i++) qT[i * Rp + r] = q[i] * c->scale;
  }
  // The padding columns of kf and vf stay zero: rows are widened hd wide.
  memset(kf, 0, 2 * TILE * hdp * sizeof *kf);
  const size_t j_lo = attn_start(c, t0), j_hi = P0 + T;
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  for (size_t j = j_lo; j < j_hi; j += TILE) {
    const size_t n = j_hi - j < TILE ? j_hi - j : TILE;
    blk_rows(c, blocks, h, j, n, 0, kf);
    blk_rows(c, blocks, h, j, n, 1, vf);
    for (size_t g = 0; g < Rp; g += 16) {
      // Scores with rows in lanes: sT[cc] = sum_d k[cc][d] * qT[d], one
      // broadcast key element per product, so no reduction across lanes.
      __m512 a[TILE];
      _Pragma("GCC unroll 16") for (int cc = 0; cc < TILE; cc++) a[cc] = _mm512_setzero_ps();
      for (size_t d = 0; d < hd; d++) {
        const __m512 qv = _mm512_load_ps(qT + d * Rp + g);
        _Pragma("GCC unroll 16") for (int cc = 0; cc < TILE; cc++) a[cc] =
            _mm512_fmadd_ps(_mm512_set1_ps(kf[(size_t)cc * hdp + d]), qv, a[cc]);
      }
      // The online softmax for 16 rows at once; positions a row does not
      // see are -inf, and a row that sees none of the tile keeps its state.
      const __m512i lov = _mm512_load_si512(lo + g), hiv = _mm512_load_si512(hi + g);
      __m512 mx = ninf;
      __mmask16 vis[TILE];
      for (size_t cc = 0; cc < n; cc++) {
        const __m512i pj = _mm512_set1_epi32((int32_t)(j + cc));
        vis[cc] = _mm512_cmpge_epi32_mask(pj, lov) & _mm512_cmplt_epi32_mask(pj, hiv);
        mx = _mm512_mask_max_ps(mx, vis[cc], mx, a[cc]);
      }
      const __m512 mo = _mm512_load_ps(m + g), mn = _mm512_max_ps(mo, mx);
      const __mmask16 live = _mm512_cmp_ps_mask(mn, ninf, _CMP_GT_OQ);
      const __m512 mz = _mm512_maskz_mov_ps(live, mn);  // 0 where no row state yet
      const __m512 cr =
          _mm512_mask_blend_ps(live, _mm512_set1_ps(1.0f), exp512(_mm512_sub_ps(mo, mz)));
      __m512 sum = _mm512_setzero_ps();
      for (size_t cc = 0; cc < TILE; cc++) {
        __m512 pv = _mm512_setzero_ps();
        if (cc < n) pv = _mm512_maskz_mov_ps(vis[cc], exp512(_mm512_sub_ps(a[cc], mz)));
        _mm512_store_ps(sT + cc * QROWS + g, pv);
        sum = _mm512_add_ps(sum, pv);
      }
      _mm512_store_ps(corr + g, cr);
      _mm512_store_ps(l + g, _mm512_fmadd_ps(_mm512_load_ps(l + g), cr, sum));
      _mm512_store_ps(m + g, mn);
    }
    for (size_t r = 0; r < Rp; r += 2) {
      float *ar = acc + r * hdp;
      const float *pr = sT + r, *cr = corr + r;
      switch (hdp / 16) {
        case 2:
          blk_pv2(ar, pr, cr, vf, hdp, n);
          break;
        case 4:
          blk_pv4(ar, pr, cr, vf, hdp, n);
          break;
        case 6:
          blk_pv6(ar, pr, cr, vf, hdp, n);
          break;
        default:
          blk_pv8(ar, pr, cr, vf, hdp, n);
          break;
      }
    }
  }
  for (size_t r = 0; r < R; r++)
    attn_finish_cols(c, t0 + r / G, h * G + r % G, m[r], l[r], acc + r * hdp, 0);
}

// One item on the tiles: block bi, kv head h.
static void blk_item_amx(const attn_ctx_t *c, size_t bi, size_t h, float *base) {
  const rg_kv_layer_t *kv = c->kv;
  const size_t t0 = (size_t)c->blk[bi], hd = kv->head_dim;
  rg__attn_amx_block_t a = {.k = kv->k,
                            .v = kv->v,
                            .n_kv_heads = kv->n_kv_heads,
                            .block_size = kv->block_size,
                            .head_dim = hd,
                            .blocks = c->b->tables[c->b->seq[t0]].blocks,
                            .h = h,
                            .G = c->G,
                            .T = c->blk_len[bi],
                            .P0 = (size_t)c->b->pos[t0],
                            .window = c->window,
                            .scale = c->scale,
                            .q = c->q + (t0 * c->n_heads + h * c->G) * hd,
                            .o = c->o + (t0 * c->n_heads + h * c->G) * hd,
                            .q_stride = c->n_heads * hd,
                            .sinks = c->sinks ? c->sinks + h * c->G : NULL,
                            .scratch = base};
  const amx_run_t *r = &c->runs[c->blk_run[bi]];
  a.vt = c->vt + (r->u0 + h * r->slices) * RG__ATTN_AMX_SLICE * hd;
  a.vt_lo = r->jb0;
  rg__attn_amx_run(&a);
}

// Packs V^T units [begin, end) (see amx_run_t).
static void vt_worker(void *vc, size_t begin, size_t end, int thread) {
  const attn_ctx_t *c = vc;
  const rg_kv_layer_t *kv = c->kv;
  const size_t se = RG__ATTN_AMX_SLICE * kv->head_dim;
  size_t r = 0;
  while (r + 1 < c->n_runs && c->runs[r + 1].u0 <= begin) r++;
  for (size_t u = begin; u < end; u++) {
    while (r + 1 < c->n_runs && c->runs[r + 1].u0 <= u) r++;
    const amx_run_t *rn = &c->runs[r];
    const size_t local = u - rn->u0;
    rg__attn_amx_block_t a = {.v = kv->v,
                              .n_kv_heads = kv->n_kv_heads,
                              .block_size = kv->block_size,
                              .head_dim = kv->head_dim,
                              .blocks = c->b->tables[c->b->seq[rn->t0]].blocks,
                              .h = local / rn->slices};
    rg__attn_amx_pack_vt(&a, rn->jb0 + local % rn->slices * RG__ATTN_AMX_SLICE, rn->lo, rn->hi,
                         c->vt + u * se);
  }
}

static void blk_worker(void *vc, size_t begin, size_t end, int thread) {
  attn_ctx_t *c = vc;
  size_t nkv = c->kv->n_kv_heads;
  float *base = c->scratch + (size_t)thread * c->blk_floats;
  if (c->amx) rg__attn_amx_begin();
  for (;;) {
    size_t it = atomic_fetch_add_explicit(&c->blk_next, 1, memory_order_relaxed);
    if (it >= c->n_blk * nkv) break;
    // On the tiles kv head by kv head, so that one head's keys and values
    // stay in L2 for all of its blocks (it is the tiles' main stream).
    if (c->amx)
      blk_item_amx(c, it % c->n_blk, it / c->n_blk, base);
    else
      blk_item(c, it / nkv, it % nkv, base);
  }
  if (c->amx) rg__attn_amx_end();
}
#endif

rg_status_t rg_op_attention(rg_pool_t *pool, const rg_kv_layer_t *kv, const rg_attn_batch_t *b,
                            const rg_attn_params_t *params, const float *q, float *o) {
  RG_RETURN_IF_ERROR(rg_attn_batch_check(kv, b));
  size_t nh = params->n_heads, nkv = kv->n_kv_heads;
  if (!nh || nh % nkv)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "attention: %zu query heads is not a positive multiple of the %zu kv "
                          "heads",
                          nh, nkv);
  if (!b->n_tokens) return NULL;
  attn_ctx_t c = {.kv = kv,
                  .b = b,
                  .q = q,
                  .o = o,
                  .sinks = params->sinks,
                  .n_heads = nh,
                  .G = nh / nkv,
                  .window = params->window};
  c.scale = params->scale != 0 ? params->scale : 1.0f / sqrtf((float)kv->head_dim);
  c.hdp = (kv->head_dim + 31) / 32 * 32;
  c.range = attn_range_scalar;
#if RG_X86
  switch (rg_ops_isa()) {
    case RG_CPU_ISA_AVX512:
    case RG_CPU_ISA_AVX512_BF16:
    case RG_CPU_ISA_AMX:
      c.range = attn_range_avx512;
      c.perm32 = kv->dtype == RG_BF16;
      break;
    case RG_CPU_ISA_AVX2:
      c.range = attn_range_avx2;
      break;
    default:
      break;
  }
#endif
  // Prefill runs (AVX-512 levels) go to blocks; the rest to per-token items.
  void *lists = NULL;
  size_t n_tok = b->n_tokens;
#if RG_X86
  // bf16 KV at the amx level runs its blocks on the tiles, unless the
  // device must keep one numerical path per query row (see
  // rg_attn_params_t.batch_invariant): head_dim a multiple of 32 (a tile
  // step) up to 256.
  c.amx = rg_ops_isa() == RG_CPU_ISA_AMX && kv->dtype == RG_BF16 && kv->head_dim % 32 == 0 &&
          kv->head_dim <= 256 && !params->batch_invariant;
  const size_t blk_max = (c.amx ? RG__ATTN_AMX_ROWS : QROWS) / c.G;
  if (c.range == attn_range_avx512 && (c.amx || c.hdp <= 128) && blk_max >= 2) {
    // runs; tok, blk, blk_run (int32); blk_len (uint8).
    lists = malloc((b->n_tokens / BLK_MIN + 1) * sizeof(amx_run_t) +
                   b->n_tokens * (3 * sizeof(int32_t) + 1));
    if (!lists)
      return rg_status_make(RG_OUT_OF_MEMORY, "attention: out of memory for %zu tokens' lists",
                            b->n_tokens);
    amx_run_t *runs = lists;
    int32_t *tok = (int32_t *)(runs + b->n_tokens / BLK_MIN + 1), *blk = tok + b->n_tokens,
            *blk_run = blk + b->n_tokens;
    uint8_t *blk_len = (uint8_t *)(blk_run + b->n_tokens);
    n_tok = 0;
    for (size_t t = 0; t < b->n_tokens;) {
      size_t e = t + 1;
      while (e < b->n_tokens && b->seq[e] == b->seq[t] && b->pos[e] == b->pos[e - 1] + 1) e++;
      if (e - t < BLK_MIN) {
        for (; t < e; t++) tok[n_tok++] = (int32_t)t;
        continue;
      }
      for (size_t a = t; a < e; a += blk_max) {
        blk[c.n_blk] = (int32_t)a;
        blk_run[c.n_blk] = (int32_t)c.n_runs;
        blk_len[c.n_blk++] = (uint8_t)(e - a < blk_max ? e - a : blk_max);
      }
      const size_t lo = attn_start(&c, t), jb0 = lo / RG__ATTN_AMX_SLICE * RG__ATTN_AMX_SLICE,
                   hi = (size_t)b->pos[e - 1] + 1;
      const size_t slices = (hi - jb0 + RG__ATTN_AMX_SLICE - 1) / RG__ATTN_AMX_SLICE;
      runs[c.n_runs++] = (amx_run_t){jb0, lo, hi, slices, c.vt_units, (int32_t)t};
      c.vt_units += slices * nkv;
      t = e;
    }
    c.tok = tok, c.blk = blk, c.blk_len = blk_len, c.blk_run = blk_run, c.runs = runs;
  }
#endif
  size_t threads = (size_t)rg_pool_threads(pool), items = n_tok * nkv;
  // The per-token items run on as many threads as their work pays for (see
  // ITEM_WORK_PER_THREAD); contexts are split only when items alone leave
  // those threads idle.
  size_t longest = 0, positions = 0;
  for (size_t i = 0; i < n_tok; i++) {
    size_t t = c.tok ? (size_t)c.tok[i] : i;
    size_t len = (size_t)b->pos[t] + 1 - attn_start(&c, t);
    longest = len > longest ? len : longest;
    positions += len;
  }
  size_t use = positions * nh * kv->head_dim / ITEM_WORK_PER_THREAD;
  use = use < 1 ? 1 : use > threads ? threads : use;
  c.splits = 1;
  if (use > 1 && items < 2 * use) {
    size_t want = (2 * use + items - 1) / items, most = longest / SPLIT_MIN;
    c.splits = want < most ? want : most;
    if (c.splits < 1) c.splits = 1;
  }
  c.n_items = items * c.splits;
  // Per thread: qs and acc (G, hdp), kf and vf (TILE, hdp), s (G, TILE),
  // corr, m and l (G), a zero row (hdp); rounded to whole cache lines.
  c.thread_floats =
      (2 * c.G * c.hdp + 2 * TILE * c.hdp + c.G * TILE + 3 * c.G + c.hdp + 15) / 16 * 16;
  if (c.thread_floats < c.hdp) c.thread_floats = c.hdp;  // merge uses one row
#if RG_X86
  if (c.n_blk) {
    c.blk_floats = c.amx ? (rg__attn_amx_scratch_bytes(kv->head_dim) + 63) / 64 * 16
                         : blk_scratch_floats(c.hdp);
    if (c.thread_floats < c.blk_floats) c.thread_floats = c.blk_floats;
    c.blk_floats = c.thread_floats;
  }
#endif
  size_t parts = c.splits > 1 ? c.n_items * part_floats(&c) : 0;
  void *mem = NULL;
  size_t bytes = (threads * c.thread_floats + parts) * sizeof(float);
  if (posix_memalign(&mem, 64, bytes)) {
    free(lists);
    return rg_status_make(RG_OUT_OF_MEMORY, "attention: out of memory for %zu bytes of scratch",
                          bytes);
  }
  c.scratch = mem;
  c.parts = c.scratch + threads * c.thread_floats;
#if RG_X86
  atomic_init(&c.blk_next, 0);
  if (c.n_blk && c.amx) {
    size_t vt_bytes = c.vt_units * RG__ATTN_AMX_SLICE * kv->head_dim * 2;
    void *vt = NULL;
    if (posix_memalign(&vt, 64, vt_bytes)) {
      free(mem);
      free(lists);
      return rg_status_make(RG_OUT_OF_MEMORY,
                            "attention: out of memory for %zu bytes of packed values", vt_bytes);
    }
    c.vt = vt;
    rg_pool_parallel_for(pool, c.vt_units, 8, vt_worker, &c);
  }
  if (c.n_blk) rg_pool_parallel_for(pool, threads, 1, blk_worker, &c);
  free(c.vt);
#endif
  atomic_init(&c.next, 0);
  if (c.n_items) rg_pool_parallel_for(pool, use, 1, attn_worker, &c);
  if (c.splits > 1) rg_pool_parallel_for(pool, items, 1, attn_merge, &c);
  free(mem);
  free(lists);
  return NULL;
}
