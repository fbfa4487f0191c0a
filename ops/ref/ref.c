// ops/ref/ref.c — reference kernels: the plainest loops that are right.
//
// These are what every fast kernel and every other backend is measured
// against, so they favour clarity over speed: one thread, no vectors, sums
// in double where a long reduction would otherwise lose digits. They take the
// same arguments as the fast kernels (the pool is ignored).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

void rg_op_rmsnorm_ref(rg_pool_t *pool, const float *x, const float *weight, float *y, size_t rows,
                       size_t dim, float eps) {
  for (size_t r = 0; r < rows; r++) {
    const float *xr = x + r * dim;
    float *yr = y + r * dim;
    double ss = 0;
    for (size_t i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
    float scale = (float)(1.0 / sqrt(ss / (double)dim + eps));
    for (size_t i = 0; i < dim; i++) yr[i] = xr[i] * scale * weight[i];
  }
}

void rg_op_rope_ref(rg_pool_t *pool, const rg_rope_t *rope, float *x, size_t n_tokens,
                    size_t n_heads, const int32_t *positions) {
  size_t hd = rope->head_dim, half = hd / 2;
  for (size_t t = 0; t < n_tokens; t++)
    for (size_t h = 0; h < n_heads; h++) {
      float *v = x + (t * n_heads + h) * hd;
      for (size_t i = 0; i < half; i++) {
        float angle = (float)positions[t] * rope->inv_freq[i];  // f32, as HF
        float c = (float)cos((double)angle), s = (float)sin((double)angle);
        float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
}

void rg_op_softmax_ref(rg_pool_t *pool, float *x, size_t rows, size_t n) {
  for (size_t r = 0; r < rows; r++) {
    float *v = x + r * n;
    float mx = -INFINITY;
    for (size_t i = 0; i < n; i++)
      if (v[i] > mx) mx = v[i];
    if (mx == -INFINITY) {  // fully masked: no mass anywhere
      for (size_t i = 0; i < n; i++) v[i] = 0;
      continue;
    }
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += exp((double)v[i] - mx);
    for (size_t i = 0; i < n; i++) v[i] = (float)(exp((double)v[i] - mx) / sum);
  }
}

void rg_op_add_ref(rg_pool_t *pool, const float *a, const float *b, float *out, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void rg_op_swiglu_ref(rg_pool_t *pool, const float *gate, const float *up, float *out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double g = gate[i];
    out[i] = (float)(g / (1.0 + exp(-g)) * up[i]);
  }
}

rg_status_t rg_op_embed_ref(rg_pool_t *pool, const void *table, rg_dtype_t type, size_t vocab,
                            const int32_t *ids, size_t n, size_t dim, float *out) {
  if (dim > INT64_MAX)
    return rg_status_make(RG_INVALID_ARGUMENT, "embed: dim %zu is too large", dim);
  size_t row_bytes = 0;
  if (dim)
    RG_RETURN_IF_ERROR(rg_status_wrap(rg_dtype_row_bytes(type, (int64_t)dim, &row_bytes),
                                      "embed: %s table rows of %zu", rg_dtype_name(type), dim));
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || (size_t)ids[i] >= vocab)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "embed: token id %d at index %zu is outside the vocabulary of %zu "
                            "tokens (valid ids 0..%zu)",
                            (int)ids[i], i, vocab, vocab ? vocab - 1 : 0);
  for (size_t i = 0; i < n; i++) {
    const unsigned char *row = (const unsigned char *)table + (size_t)ids[i] * row_bytes;
    for (size_t d = 0; d < dim; d++) {
      float v;
      uint16_t h;
      switch (type) {
        case RG_F32:
          memcpy(&v, row + 4 * d, 4);
          break;
        case RG_BF16:
          memcpy(&h, row + 2 * d, 2);
          v = rg_bf16_to_f32(h);
          break;
        case RG_F16:
          memcpy(&h, row + 2 * d, 2);
          v = rg_f16_to_f32(h);
          break;
        default: {  // q8_0: blocks of {f16 d; int8 q[32]}, w = d * q
          const unsigned char *blk = row + (d / 32) * 34;
          memcpy(&h, blk, 2);
          v = rg_f16_to_f32(h) * (float)(int8_t)blk[2 + d % 32];
          break;
        }
      }
      out[i * dim + d] = v;
    }
  }
  return NULL;
}

// ---------------------------------------------------------------------------
// MoE

rg_status_t rg_op_moe_route_ref(rg_pool_t *pool, const float *logits, size_t T, size_t E, size_t k,
                                rg_moe_mode_t mode, int32_t *out_idx, float *out_w) {
  if ((unsigned)mode >= RG_MOE_MODE_COUNT)
    return rg_status_make(RG_INVALID_ARGUMENT, "moe route: unknown mode %d", (int)mode);
  if (k == 0 || k > E)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "moe route: top-k %zu must be between 1 and the number of experts %zu", k,
                          E);
  for (size_t t = 0; t < T; t++) {
    const float *l = logits + t * E;
    int32_t *id = out_idx + t * k;
    float *w = out_w + t * k;
    // Pick k times the best expert not yet taken; '>' keeps the lower index
    // on ties.
    for (size_t j = 0; j < k; j++) {
      int32_t best = -1;
      for (size_t x = 0; x < E; x++) {
        int taken = 0;
        for (size_t i = 0; i < j; i++) taken |= id[i] == (int32_t)x;
        if (!taken && (best < 0 || l[x] > l[best])) best = (int32_t)x;
      }
      id[j] = best;
    }
    double mx = l[id[0]], all = 0, top = 0;
    for (size_t x = 0; x < E; x++) all += exp(l[x] - mx);
    for (size_t j = 0; j < k; j++) top += exp(l[id[j]] - mx);
    for (size_t j = 0; j < k; j++) {
      double p = exp(l[id[j]] - mx);
      switch (mode) {
        case RG_MOE_SOFTMAX_TOPK_RENORM:
          w[j] = (float)((p / all) / (top / all));
          break;
        case RG_MOE_SOFTMAX_TOPK:
          w[j] = (float)(p / all);
          break;
        default:
          w[j] = (float)(p / top);
          break;  // softmax over the top k
      }
    }
  }
  return NULL;
}

rg_status_t rg_op_moe_group_ref(const int32_t *idx, size_t T, size_t k, size_t E,
                                int32_t *out_offsets, int32_t *out_rows) {
  size_t n = T * k;
  if ((k && n / k != T) || n > INT32_MAX || E > INT32_MAX)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "moe group: %zu tokens x %zu slots is more than INT32_MAX rows", T, k);
  for (size_t r = 0; r < n; r++)
    if (idx[r] < 0 || (size_t)idx[r] >= E)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "moe group: token %zu slot %zu routes to expert %d, outside 0..%zu",
                            r / k, r % k, (int)idx[r], E ? E - 1 : 0);
  size_t at = 0;
  for (size_t e = 0; e < E; e++) {
    out_offsets[e] = (int32_t)at;
    for (size_t r = 0; r < n; r++)
      if ((size_t)idx[r] == e) out_rows[at++] = (int32_t)r;
  }
  out_offsets[E] = (int32_t)at;
  return NULL;
}

void rg_op_moe_gather_ref(rg_pool_t *pool, const float *x, const int32_t *rows, size_t n, size_t k,
                          size_t dim, float *out) {
  for (size_t i = 0; i < n; i++) {
    size_t t = (size_t)rows[i] / k;
    for (size_t d = 0; d < dim; d++) out[i * dim + d] = x[t * dim + d];
  }
}

void rg_op_moe_scatter_add_ref(rg_pool_t *pool, const float *y, const int32_t *rows, size_t n,
                               size_t k, const float *w, size_t dim, float *out) {
  for (size_t i = 0; i < n; i++) {
    size_t r = (size_t)rows[i], t = r / k;
    for (size_t d = 0; d < dim; d++) out[t * dim + d] += w[r] * y[i * dim + d];
  }
}

// ---------------------------------------------------------------------------
// Sampling: sort everything, then cut. Mirrors the arithmetic of the fast
// path (f32 exps summed in double, in the same order) so both give the same
// candidates and the same probabilities, not merely close ones.

typedef struct {
  float logit;
  int32_t id;
} ranked_t;

static int by_rank(const void *a, const void *b) {
  const ranked_t *x = a, *y = b;
  if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

size_t rg_sample_filter_ref(const rg_sampler_config_t *cfg, const float *logits, size_t vocab,
                            int32_t *out_idx, float *out_prob) {
  ranked_t *r = malloc(vocab * sizeof *r);
  if (!r) return 0;
  for (size_t i = 0; i < vocab; i++) r[i] = (ranked_t){logits[i], (int32_t)i};
  qsort(r, vocab, sizeof *r, by_rank);
  size_t n;
  if (cfg->temperature == 0) {
    out_idx[0] = r[0].id;
    out_prob[0] = 1;
    free(r);
    return 1;
  }
  float inv_t = 1.0f / cfg->temperature, mx = r[0].logit;
  if (cfg->top_k > 0 && (size_t)cfg->top_k < vocab) {
    n = (size_t)cfg->top_k;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
      out_idx[i] = r[i].id;
      out_prob[i] = expf((r[i].logit - mx) * inv_t);
      sum += out_prob[i];
    }
    for (size_t i = 0; i < n; i++) out_prob[i] = (float)(out_prob[i] / sum);
  } else {
    // Normalize in id order, as the fast path does, then list by rank.
    float *p = malloc(vocab * sizeof *p);
    if (!p) {
      free(r);
      return 0;
    }
    double sum = 0;
    for (size_t i = 0; i < vocab; i++) {
      p[i] = expf((logits[i] - mx) * inv_t);
      sum += p[i];
    }
    for (size_t i = 0; i < vocab; i++) p[i] = (float)(p[i] / sum);
    n = vocab;
    for (size_t i = 0; i < n; i++) {
      int32_t id = cfg->top_p < 1 ? r[i].id : (int32_t)i;  // no top-p: id order
      out_idx[i] = id;
      out_prob[i] = p[id];
    }
    free(p);
  }
  free(r);
  if (cfg->top_p < 1) {
    double cum = 0;
    size_t keep = 0;
    while (keep < n && cum < cfg->top_p) cum += out_prob[keep++];
    for (size_t i = 0; i < keep; i++) out_prob[i] = (float)(out_prob[i] / cum);
    n = keep;
  }
  return n;
}

int32_t rg_sample_draw_ref(const rg_sampler_config_t *cfg, const float *logits, size_t vocab, double u,
                           int32_t *idx, float *prob) {
  size_t n = rg_sample_filter_ref(cfg, logits, vocab, idx, prob);
  if (cfg->temperature == 0 || n == 0) return n ? idx[0] : 0;
  double cum = 0;
  for (size_t i = 0; i < n; i++) {
    cum += prob[i];
    if (u < cum) return idx[i];
  }
  return idx[n - 1];
}
