// Requests drawn from a workload (see planner/workload_gen.h).
#include "planner/workload_gen.h"

#include <math.h>

static uint64_t next(uint64_t *s) {  // splitmix64
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// (0, 1], never 0, so logs are finite.
static double uniform(uint64_t *s) {
  return ((double)(next(s) >> 11) + 1.0) * 0x1p-53;
}

static double normal(uint64_t *s) {  // Box-Muller, one of the pair
  return sqrt(-2.0 * log(uniform(s))) * cos(2.0 * M_PI * uniform(s));
}

static int64_t draw(const rg_dist_t *d, uint64_t *s) {
  double v;
  switch (d->kind) {
    case RG_DIST_UNIFORM:
      v = d->min + (d->max - d->min) * uniform(s);
      break;
    case RG_DIST_LOGNORMAL: {
      double mu = log(d->mean > 1 ? d->mean : 1) - d->sigma * d->sigma / 2.0;
      v = exp(mu + d->sigma * normal(s));
      break;
    }
    default:
      v = d->mean;
      break;
  }
  if (d->max > 0 && v > d->max) v = d->max;
  int64_t r = (int64_t)llround(v);
  return r < 1 ? 1 : r;
}

rg_status_t rg_workload_sample(const rg_workload_t *w, size_t n, uint64_t seed, int64_t max_context,
                               double rate, rg_gen_request_t *out) {
  if (max_context > 0 && max_context < 2)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "workload %s: a context of %lld tokens holds no prompt and output",
                          w->name, (long long)max_context);
  double r = rate >= 0 ? rate : w->rate;
  uint64_t s = seed ^ 0x5eed5eed5eedull;
  double t = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t p = draw(&w->prompt, &s), o = draw(&w->output, &s);
    if (max_context > 0 && p + o > max_context) {
      if (p > max_context - 1) p = max_context - 1;
      if (p + o > max_context) o = max_context - p;
    }
    if (r > 0 && i > 0) t += -log(uniform(&s)) / r;
    out[i] = (rg_gen_request_t){p, o, r > 0 ? t : 0};
  }
  return NULL;
}
