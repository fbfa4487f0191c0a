// ops/ref/ref_attention.c — reference KV write and paged attention.
//
// Attention here is the textbook form: all scores of a (token, head) into a
// buffer as long as its context, a softmax, then the weighted sum of values.
// It reads the cache one element at a time through the block table.
#include <math.h>
#include <stdlib.h>

#include "ops/ops.h"

// Element index of (position p, kv head h, dim i) of sequence table tb.
static size_t at(const rg_kv_layer_t *kv, const rg_block_table_t *tb, size_t p, size_t h,
                 size_t i) {
  size_t block = (size_t)tb->blocks[p / kv->block_size], slot = p % kv->block_size;
  return ((block * kv->n_kv_heads + h) * kv->block_size + slot) * kv->head_dim + i;
}

static float load(const rg_kv_layer_t *kv, const void *base, size_t e) {
  if (kv->dtype == RG_F32) return ((const float *)base)[e];
  uint16_t h = ((const uint16_t *)base)[e];
  return kv->dtype == RG_BF16 ? rg_bf16_to_f32(h) : rg_f16_to_f32(h);
}

static void store(const rg_kv_layer_t *kv, void *base, size_t e, float v) {
  if (kv->dtype == RG_F32)
    ((float *)base)[e] = v;
  else if (kv->dtype == RG_BF16)
    ((uint16_t *)base)[e] = rg_f32_to_bf16(v);
  else
    ((uint16_t *)base)[e] = rg_f32_to_f16(v);
}

rg_status_t rg_op_kv_write_ref(rg_pool_t *pool, const rg_kv_layer_t *kv, const rg_attn_batch_t *b,
                               const float *k, const float *v) {
  RG_RETURN_IF_ERROR(rg_attn_batch_check(kv, b));
  size_t hd = kv->head_dim;
  for (size_t t = 0; t < b->n_tokens; t++) {
    const rg_block_table_t *tb = &b->tables[b->seq[t]];
    for (size_t h = 0; h < kv->n_kv_heads; h++)
      for (size_t i = 0; i < hd; i++) {
        size_t e = at(kv, tb, (size_t)b->pos[t], h, i), src = (t * kv->n_kv_heads + h) * hd + i;
        store(kv, kv->k, e, k[src]);
        store(kv, kv->v, e, v[src]);
      }
  }
  return NULL;
}

rg_status_t rg_op_attention_ref(rg_pool_t *pool, const rg_kv_layer_t *kv, const rg_attn_batch_t *b,
                                const rg_attn_params_t *params, const float *q, float *o) {
  RG_RETURN_IF_ERROR(rg_attn_batch_check(kv, b));
  size_t nh = params->n_heads, nkv = kv->n_kv_heads, hd = kv->head_dim;
  if (!nh || nh % nkv)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "attention: %zu query heads is not a positive multiple of the %zu kv "
                          "heads",
                          nh, nkv);
  size_t longest = 0;
  for (size_t t = 0; t < b->n_tokens; t++)
    if ((size_t)b->pos[t] + 1 > longest) longest = (size_t)b->pos[t] + 1;
  double *score = malloc((longest + hd) * sizeof *score), *acc = score + longest;
  if (!score) return rg_status_make(RG_OUT_OF_MEMORY, "attention: out of memory");
  double scale = params->scale != 0 ? params->scale : 1.0 / sqrt((double)hd);
  size_t group = nh / nkv;
  for (size_t t = 0; t < b->n_tokens; t++) {
    const rg_block_table_t *tb = &b->tables[b->seq[t]];
    size_t p = (size_t)b->pos[t];
    size_t start = params->window && p + 1 > params->window ? p + 1 - params->window : 0;
    for (size_t qh = 0; qh < nh; qh++) {
      size_t kvh = qh / group;
      const float *qv = q + (t * nh + qh) * hd;
      double mx = -INFINITY;
      for (size_t j = start; j <= p; j++) {
        size_t row = at(kv, tb, j, kvh, 0);
        double d = 0;
        for (size_t i = 0; i < hd; i++) d += (double)qv[i] * load(kv, kv->k, row + i);
        score[j - start] = d * scale;
        if (score[j - start] > mx) mx = score[j - start];
      }
      // A sink logit takes part in the normalization like one more key
      // whose value is zero.
      double sink = params->sinks ? params->sinks[qh] : -INFINITY;
      if (sink > mx) mx = sink;
      double den = params->sinks ? exp(sink - mx) : 0;
      for (size_t j = start; j <= p; j++) {
        score[j - start] = exp(score[j - start] - mx);
        den += score[j - start];
      }
      for (size_t i = 0; i < hd; i++) acc[i] = 0;
      for (size_t j = start; j <= p; j++) {
        size_t row = at(kv, tb, j, kvh, 0);
        for (size_t i = 0; i < hd; i++) acc[i] += score[j - start] * load(kv, kv->v, row + i);
      }
      float *ov = o + (t * nh + qh) * hd;
      for (size_t i = 0; i < hd; i++) ov[i] = (float)(acc[i] / den);
    }
  }
  free(score);
  return NULL;
}
