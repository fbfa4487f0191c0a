// ops/cpu/sample.c — token sampling: greedy, temperature, top-k, top-p.
//
// Candidates are ordered by (logit descending, id ascending), a total order,
// so every path — this one and rg_sample_filter_ref — agrees on ties. This
// path avoids sorting the vocabulary: top-k keeps a min-heap of k ids, and
// top-p first drops tokens too unlikely to matter, then pops a max-heap only
// until the nucleus is complete.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

struct rg_sampler_s {
  rg_sampler_config_t cfg;
  size_t vocab;
  uint64_t state;  // splitmix64
  int32_t *idx;    // (vocab) candidates
  float *prob;     // (vocab)
};

// splitmix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number
// generators", 2014; the constants are Stafford's mix13).
static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 53 random bits.
static double uniform(uint64_t *state) {
  return (double)(splitmix64(state) >> 11) * 0x1.0p-53;
}

static rg_status_t check_config(const rg_sampler_config_t *c, size_t vocab) {
  if (!(c->temperature >= 0) || isinf(c->temperature))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "sampler: temperature %g must be 0 (greedy) or a positive number",
                          (double)c->temperature);
  if (c->top_k < 0)
    return rg_status_make(RG_INVALID_ARGUMENT, "sampler: top_k %d must be 0 (off) or positive",
                          (int)c->top_k);
  if (!(c->top_p > 0 && c->top_p <= 1))
    return rg_status_make(RG_INVALID_ARGUMENT, "sampler: top_p %g must be in (0, 1] (1 is off)",
                          (double)c->top_p);
  if (vocab == 0 || vocab > INT32_MAX)
    return rg_status_make(RG_INVALID_ARGUMENT, "sampler: vocabulary of %zu tokens", vocab);
  return NULL;
}

rg_status_t rg_sampler_create(const rg_sampler_config_t *config, size_t vocab, rg_sampler_t **out) {
  *out = NULL;
  RG_RETURN_IF_ERROR(check_config(config, vocab));
  rg_sampler_t *s = calloc(1, sizeof *s);
  if (s) {
    s->idx = malloc(vocab * sizeof *s->idx);
    s->prob = malloc(vocab * sizeof *s->prob);
  }
  if (!s || !s->idx || !s->prob) {
    rg_sampler_destroy(s);
    return rg_status_make(RG_OUT_OF_MEMORY, "sampler: out of memory for %zu tokens", vocab);
  }
  s->cfg = *config;
  s->vocab = vocab;
  s->state = config->seed;
  *out = s;
  return NULL;
}

void rg_sampler_destroy(rg_sampler_t *s) {
  if (!s) return;
  free(s->idx);
  free(s->prob);
  free(s);
}

// a ranks before b: higher logit, then lower id.
static inline int before(const float *logits, int32_t a, int32_t b) {
  return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

// Heap of ids whose root is the one that ranks *last* (min-heap for top-k).
static void sift_min(const float *lg, int32_t *h, size_t n, size_t i) {
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && before(lg, h[c], h[c + 1])) c++;
    if (!before(lg, h[i], h[c])) return;
    int32_t t = h[i];
    h[i] = h[c];
    h[c] = t;
    i = c;
  }
}

// Heap of (id, prob) whose root ranks *first* (max-heap for top-p).
static void sift_max(const float *lg, int32_t *h, float *p, size_t n, size_t i) {
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && before(lg, h[c + 1], h[c])) c++;
    if (!before(lg, h[c], h[i])) return;
    int32_t t = h[i];
    h[i] = h[c];
    h[c] = t;
    float f = p[i];
    p[i] = p[c];
    p[c] = f;
    i = c;
  }
}

static size_t argmax(const float *logits, size_t vocab) {
  size_t best = 0;
  for (size_t i = 1; i < vocab; i++)
    if (logits[i] > logits[best]) best = i;
  return best;
}

size_t rg_sample_filter(const rg_sampler_config_t *cfg, const float *logits, size_t vocab,
                        int32_t *idx, float *prob) {
  if (cfg->temperature == 0) {
    idx[0] = (int32_t)argmax(logits, vocab);
    prob[0] = 1;
    return 1;
  }
  float inv_t = 1.0f / cfg->temperature;
  int top_p = cfg->top_p < 1;
  size_t n;
  if (cfg->top_k > 0 && (size_t)cfg->top_k < vocab) {
    size_t k = (size_t)cfg->top_k;
    for (size_t i = 0; i < k; i++) idx[i] = (int32_t)i;
    for (size_t i = k / 2; i-- > 0;) sift_min(logits, idx, k, i);
    for (size_t i = k; i < vocab; i++)
      if (before(logits, (int32_t)i, idx[0])) {
        idx[0] = (int32_t)i;
        sift_min(logits, idx, k, 0);
      }
    // Heap sort: popping the last-ranked to the back leaves them in order.
    for (size_t e = k; e > 1; e--) {
      int32_t t = idx[0];
      idx[0] = idx[e - 1];
      idx[e - 1] = t;
      sift_min(logits, idx, e - 1, 0);
    }
    float mx = logits[idx[0]];
    double sum = 0;
    for (size_t i = 0; i < k; i++) {
      prob[i] = expf((logits[idx[i]] - mx) * inv_t);
      sum += prob[i];
    }
    for (size_t i = 0; i < k; i++) prob[i] = (float)(prob[i] / sum);
    n = k;
  } else {
    float mx = logits[argmax(logits, vocab)];
    double sum = 0;
    for (size_t i = 0; i < vocab; i++) {
      prob[i] = expf((logits[i] - mx) * inv_t);
      sum += prob[i];
    }
    for (size_t i = 0; i < vocab; i++) {
      prob[i] = (float)(prob[i] / sum);
      idx[i] = (int32_t)i;
    }
    n = vocab;
    if (!top_p) return n;
    // A token below (1 - top_p) / (vocab - 1) cannot be in the nucleus:
    // all such tokens together hold less than 1 - top_p, so the others
    // already reach top_p. Keeping only the rest makes the heap small.
    double cut = vocab > 1 ? (1.0 - cfg->top_p) / (double)(vocab - 1) : 0;
    size_t m = 0;
    for (size_t i = 0; i < vocab; i++)
      if (prob[i] >= cut) {
        idx[m] = (int32_t)i;
        prob[m++] = prob[i];
      }
    if (m == 0) {  // every token below the cut: only for tiny vocabularies
      for (size_t i = 0; i < vocab; i++) {
        prob[i] = (float)(expf((logits[i] - mx) * inv_t) / sum);
        idx[i] = (int32_t)i;
      }
      m = vocab;
    }
    // Pop the heap from the front until the nucleus is complete: popped
    // tokens gather at the back, best last.
    for (size_t i = m / 2; i-- > 0;) sift_max(logits, idx, prob, m, i);
    double cum = 0;
    size_t e = m;
    while (e > 0 && cum < cfg->top_p) {
      cum += prob[0];
      int32_t t = idx[0];
      idx[0] = idx[e - 1];
      idx[e - 1] = t;
      float f = prob[0];
      prob[0] = prob[e - 1];
      prob[e - 1] = f;
      e--;
      sift_max(logits, idx, prob, e, 0);
    }
    n = m - e;
    // Reverse [e, m) in place, then slide it to the front.
    for (size_t a = e, b = m - 1; a < b; a++, b--) {
      int32_t t = idx[a];
      idx[a] = idx[b];
      idx[b] = t;
      float f = prob[a];
      prob[a] = prob[b];
      prob[b] = f;
    }
    memmove(idx, idx + e, n * sizeof *idx);
    memmove(prob, prob + e, n * sizeof *prob);
    for (size_t i = 0; i < n; i++) prob[i] = (float)(prob[i] / cum);
    return n;
  }
  if (top_p) {
    double cum = 0;
    size_t keep = 0;
    while (keep < n && cum < cfg->top_p) cum += prob[keep++];
    for (size_t i = 0; i < keep; i++) prob[i] = (float)(prob[i] / cum);
    n = keep;
  }
  return n;
}

int32_t rg_sample_draw(const rg_sampler_config_t *cfg, const float *logits, size_t vocab, double u, int32_t *idx,
                       float *prob) {
  if (cfg->temperature == 0) return (int32_t)argmax(logits, vocab);
  size_t n = rg_sample_filter(cfg, logits, vocab, idx, prob);
  double cum = 0;
  for (size_t i = 0; i < n; i++) {
    cum += prob[i];
    if (u < cum) return idx[i];
  }
  return idx[n - 1];  // u within rounding of 1
}

const rg_sampler_config_t *rg_sampler_config(const rg_sampler_t *s) {
  return &s->cfg;
}

double rg_sampler_uniform(rg_sampler_t *s) {
  return s->cfg.temperature == 0 ? 0.0 : uniform(&s->state);
}

int32_t rg_sampler_sample(rg_sampler_t *s, const float *logits) {
  return rg_sample_draw(&s->cfg, logits, s->vocab, rg_sampler_uniform(s), s->idx, s->prob);
}
