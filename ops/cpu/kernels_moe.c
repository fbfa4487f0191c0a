// ops/cpu/kernels_moe.c — mixture-of-experts routing and dispatch.
//
// Routing is a handful of scalar operations per (token, expert), so it is
// split over tokens and left to the compiler; gather and scatter are copies
// and one multiply-add per element, bound by memory.
#include <math.h>
#include <string.h>

#include "ops/ops.h"

typedef struct {
  const float *logits;
  size_t E, k;
  rg_moe_mode_t mode;
  int32_t *idx;
  float *w;
} route_ctx_t;

static void route_tokens(void *vc, size_t b, size_t e, int thread) {
  const route_ctx_t *c = vc;
  size_t E = c->E, k = c->k;
  for (size_t t = b; t < e; t++) {
    const float *l = c->logits + t * E;
    int32_t *id = c->idx + t * k;
    float *w = c->w + t * k;
    // One pass of insertion into a sorted list of k: experts come in
    // ascending order and only a strictly larger logit moves ahead, so equal
    // logits keep the lower expert first.
    size_t n = 0;
    for (size_t x = 0; x < E; x++) {
      float v = l[x];
      if (n == k && !(v > w[k - 1])) continue;
      size_t j = n < k ? n++ : k - 1;
      while (j > 0 && w[j - 1] < v) {
        w[j] = w[j - 1];
        id[j] = id[j - 1];
        j--;
      }
      w[j] = v;
      id[j] = (int32_t)x;
    }
    // The top logit is the row's maximum, so it is the stable shift for
    // every mode's softmax.
    float mx = w[0], sum = 0;
    if (c->mode == RG_MOE_SOFTMAX_TOPK)
      for (size_t x = 0; x < E; x++) sum += expf(l[x] - mx);
    for (size_t j = 0; j < k; j++) {
      w[j] = expf(w[j] - mx);
      if (c->mode != RG_MOE_SOFTMAX_TOPK) sum += w[j];
    }
    float inv = 1.0f / sum;
    for (size_t j = 0; j < k; j++) w[j] *= inv;
  }
}

rg_status_t rg_op_moe_route(rg_pool_t *pool, const float *logits, size_t T, size_t E, size_t k,
                            rg_moe_mode_t mode, int32_t *out_idx, float *out_w) {
  if ((unsigned)mode >= RG_MOE_MODE_COUNT)
    return rg_status_make(RG_INVALID_ARGUMENT, "moe route: unknown mode %d", (int)mode);
  if (k == 0 || k > E)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "moe route: top-k %zu must be between 1 and the number of experts %zu", k,
                          E);
  if (E > INT32_MAX)
    return rg_status_make(RG_INVALID_ARGUMENT, "moe route: %zu experts is above INT32_MAX", E);
  if (!T) return NULL;
  route_ctx_t c = {logits, E, k, mode, out_idx, out_w};
  rg_pool_parallel_for(pool, T, (4096 + E - 1) / E, route_tokens, &c);
  return NULL;
}

rg_status_t rg_op_moe_group(const int32_t *idx, size_t T, size_t k, size_t E, int32_t *out_offsets,
                            int32_t *out_rows) {
  size_t n = T * k;
  if ((k && n / k != T) || n > INT32_MAX || E > INT32_MAX)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "moe group: %zu tokens x %zu slots is more than INT32_MAX rows", T, k);
  for (size_t r = 0; r < n; r++)
    if (idx[r] < 0 || (size_t)idx[r] >= E)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "moe group: token %zu slot %zu routes to expert %d, outside 0..%zu",
                            r / k, r % k, (int)idx[r], E ? E - 1 : 0);
  // Counting sort. offsets[e] first holds the start of e's run and is
  // advanced as rows are placed, ending as the start of e+1; one shift right
  // restores the starts.
  memset(out_offsets, 0, (E + 1) * sizeof *out_offsets);
  for (size_t r = 0; r < n; r++) out_offsets[idx[r] + 1]++;
  for (size_t e = 0; e < E; e++) out_offsets[e + 1] += out_offsets[e];
  for (size_t r = 0; r < n; r++) out_rows[out_offsets[idx[r]]++] = (int32_t)r;
  for (size_t e = E; e > 0; e--) out_offsets[e] = out_offsets[e - 1];
  out_offsets[0] = 0;
  return NULL;
}

typedef struct {
  const float *x;
  const int32_t *rows;
  size_t k, dim;
  float *out;
  const float *w;
  size_t n;
} moe_ctx_t;

static void gather_rows(void *vc, size_t b, size_t e, int thread) {
  const moe_ctx_t *c = vc;
  for (size_t i = b; i < e; i++)
    memcpy(c->out + i * c->dim, c->x + (size_t)(c->rows[i] / (int32_t)c->k) * c->dim,
           c->dim * sizeof(float));
}

void rg_op_moe_gather(rg_pool_t *pool, const float *x, const int32_t *rows, size_t n, size_t k,
                      size_t dim, float *out) {
  if (!n || !dim) return;
  moe_ctx_t c = {x, rows, k, dim, out, NULL, n};
  rg_pool_parallel_for(pool, n, (16384 + dim - 1) / dim, gather_rows, &c);
}

// Splits by columns: two rows of y may land on the same token, so splitting
// by rows would race; by columns each thread owns its slice of every output
// row and adds in the order of i, as the reference does.
static void scatter_cols(void *vc, size_t b, size_t e, int thread) {
  const moe_ctx_t *c = vc;
  for (size_t i = 0; i < c->n; i++) {
    size_t r = (size_t)c->rows[i];
    float wv = c->w[r];
    float *o = c->out + (r / c->k) * c->dim;
    const float *y = c->x + i * c->dim;
    for (size_t d = b; d < e; d++) o[d] += wv * y[d];
  }
}

void rg_op_moe_scatter_add(rg_pool_t *pool, const float *y, const int32_t *rows, size_t n, size_t k,
                           const float *w, size_t dim, float *out) {
  if (!n || !dim) return;
  moe_ctx_t c = {y, rows, k, dim, out, w, n};
  // At least 256 columns (1 KiB of each row) per task, more when rows are few.
  size_t grain = 256;
  if (n < 64) grain = 256 * (64 / n);
  rg_pool_parallel_for(pool, dim, grain, scatter_cols, &c);
}
