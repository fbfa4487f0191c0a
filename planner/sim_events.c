// The simulator's event queue, link flow model and latency histograms (see
// planner/sim_impl.h).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/sim_impl.h"

// ----- Event queue -----------------------------------------------------------------

static int before(const rg__ev_t *a, const rg__ev_t *b) {
  return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

rg_status_t rg__heap_push(rg__heap_t *q, double t, int32_t kind, int32_t a, int64_t b) {
  if (q->n == q->cap) {
    size_t cap = q->cap ? q->cap * 2 : 256;
    rg__ev_t *h = realloc(q->h, cap * sizeof *h);
    if (!h) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %zu events", q->n);
    q->h = h;
    q->cap = cap;
  }
  rg__ev_t e = {t, q->seq++, kind, a, b};
  size_t i = q->n++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!before(&e, &q->h[p])) break;
    q->h[i] = q->h[p];
    i = p;
  }
  q->h[i] = e;
  return NULL;
}

int rg__heap_pop(rg__heap_t *q, rg__ev_t *out) {
  if (!q->n) return 0;
  *out = q->h[0];
  rg__ev_t last = q->h[--q->n];
  size_t i = 0, n = q->n;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && before(&q->h[c + 1], &q->h[c])) c++;
    if (!before(&q->h[c], &last)) break;
    q->h[i] = q->h[c];
    i = c;
  }
  if (n) q->h[i] = last;
  return 1;
}

void rg__heap_free(rg__heap_t *q) {
  free(q->h);
  memset(q, 0, sizeof *q);
}

// ----- Links -----------------------------------------------------------------------

// A flow is done when what is left would take the link under a nanosecond:
// remaining bytes come from subtracting rate x time, which leaves rounding
// dust.
#define DONE_SECONDS 1e-9

void rg__link_advance(rg__link_t *l, double now) {
  if (now <= l->last) return;
  if (l->n) {
    double moved = (now - l->last) * l->bw / l->n;
    for (int i = 0; i < l->n; i++) l->f[i].rem -= moved;
    l->busy += now - l->last;
  }
  l->last = now;
}

rg_status_t rg__link_add(rg__link_t *l, double now, double bytes, int32_t owner, int32_t kind,
                         int64_t tag) {
  rg__link_advance(l, now);
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 8;
    rg__flow_t *f = realloc(l->f, (size_t)cap * sizeof *f);
    if (!f) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %d flows on a link", l->n);
    l->f = f;
    l->cap = cap;
  }
  l->f[l->n++] = (rg__flow_t){bytes, owner, kind, tag, now};
  l->bytes += bytes;
  l->version++;
  return NULL;
}

double rg__link_next(const rg__link_t *l) {
  if (!l->n) return 1e300;
  double least = l->f[0].rem;
  for (int i = 1; i < l->n; i++)
    if (l->f[i].rem < least) least = l->f[i].rem;
  if (least < 0) least = 0;
  return l->last + least * l->n / l->bw;
}

void rg__link_take_done(rg__link_t *l, rg__flow_t *done, int cap, int *n_done) {
  *n_done = 0;
  int k = 0;
  // Keeps the order of the flows left (and of those done), so callbacks
  // run in the order the flows started.
  for (int i = 0; i < l->n; i++) {
    if (l->f[i].rem <= DONE_SECONDS * l->bw / l->n && *n_done < cap)
      done[(*n_done)++] = l->f[i];
    else
      l->f[k++] = l->f[i];
  }
  if (k != l->n) l->version++;
  l->n = k;
}

void rg__link_free(rg__link_t *l) {
  free(l->f);
  l->f = NULL;
  l->n = l->cap = 0;
}

// ----- Histograms ------------------------------------------------------------------

rg_status_t rg__hist_init(rg__hist_t *h) {
  memset(h, 0, sizeof *h);
  h->bins = calloc(RG__HIST_BINS, sizeof *h->bins);
  if (!h->bins) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for a histogram");
  h->min = INFINITY;
  h->max = 0;
  return NULL;
}

void rg__hist_free(rg__hist_t *h) {
  free(h->bins);
  h->bins = NULL;
}

// The bin of v: its binary exponent and the top bits of its mantissa, read
// straight from the IEEE representation (no log).
static int bin_of(double v) {
  if (!(v > 0)) return 0;
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  int e = (int)((bits >> 52) & 0x7ff) - 1023 - RG__HIST_MIN_EXP;
  if (e < 0) return 0;
  if (e >= RG__HIST_OCTAVES) return RG__HIST_BINS - 1;
  return (e << RG__HIST_SUB_BITS) |
         (int)((bits >> (52 - RG__HIST_SUB_BITS)) & ((1u << RG__HIST_SUB_BITS) - 1));
}

// The middle of bin b.
static double bin_mid(int b) {
  int e = b >> RG__HIST_SUB_BITS, m = b & ((1 << RG__HIST_SUB_BITS) - 1);
  return ldexp(1.0 + (m + 0.5) / (1 << RG__HIST_SUB_BITS), e + RG__HIST_MIN_EXP);
}

void rg__hist_add(rg__hist_t *h, double v) {
  h->bins[bin_of(v)]++;
  h->n++;
  h->sum += v;
  if (v < h->min) h->min = v;
  if (v > h->max) h->max = v;
}

// The value of rank r (0-based) in sorted order: the exact extremes, else
// its bin's middle (clamped to them).
static double rank_value(const rg__hist_t *h, int64_t r, int *b, int64_t *below) {
  if (r <= 0) return h->min;
  if (r >= h->n - 1) return h->max;
  while (*b < RG__HIST_BINS && *below + h->bins[*b] <= r) *below += h->bins[(*b)++];
  double v = bin_mid(*b);
  return v < h->min ? h->min : v > h->max ? h->max : v;
}

double rg__hist_quantile(const rg__hist_t *h, double q) {
  if (!h->n) return 0;
  double pos = q * (double)(h->n - 1);
  int64_t r = (int64_t)pos;
  int b = 0;
  int64_t below = 0;
  double lo = rank_value(h, r, &b, &below);
  if (r + 1 >= h->n) return lo;
  double hi = rank_value(h, r + 1, &b, &below);
  return lo + (pos - (double)r) * (hi - lo);
}

double rg__hist_share_below(const rg__hist_t *h, double v) {
  if (!h->n) return 0;
  if (v >= h->max) return 1;
  int64_t k = 0;
  int last = bin_of(v);
  for (int b = 0; b < last; b++) k += h->bins[b];
  return (double)k / (double)h->n;
}

rg_sim_pct_t rg__hist_pct(const rg__hist_t *h) {
  rg_sim_pct_t p = {0};
  p.n = h->n;
  if (!h->n) return p;
  p.p50 = rg__hist_quantile(h, 0.50);
  p.p90 = rg__hist_quantile(h, 0.90);
  p.p99 = rg__hist_quantile(h, 0.99);
  p.mean = h->sum / (double)h->n;
  return p;
}
