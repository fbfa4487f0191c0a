// Requests drawn from a workload (see planner/workload_gen.h).
#include "planner/workload_gen.h"

#include <math.h>
#include <string.h>

static const char *const arrival_names[] = {
#define RG_X_(e, n) n,
    RG_ARRIVAL_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof(arrival_names) / sizeof(arrival_names[0]) == RG_ARRIVAL_COUNT,
               "arrival names out of step");

const char *rg_arrival_name(rg_arrival_process_t p) {
  return (unsigned)p < RG_ARRIVAL_COUNT ? arrival_names[p] : "?";
}

rg_status_t rg_arrival_parse(const char *word, rg_arrival_process_t *out) {
  for (int i = 0; i < RG_ARRIVAL_COUNT; i++)
    if (!strcmp(word, arrival_names[i])) {
      *out = (rg_arrival_process_t)i;
      return NULL;
    }
  return rg_status_make(RG_INVALID_ARGUMENT,
                        "unknown arrival process '%s'; expected poisson or gamma", word);
}

static uint64_t next(uint64_t *s) {  // splitmix64
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// (0, 1], never 0, so logs are finite.
double rg_gen_uniform(uint64_t *s) {
  return ((double)(next(s) >> 11) + 1.0) * 0x1p-53;
}

double rg_gen_normal(uint64_t *s) {  // Box-Muller, one of the pair
  return sqrt(-2.0 * log(rg_gen_uniform(s))) * cos(2.0 * M_PI * rg_gen_uniform(s));
}

// Marsaglia and Tsang's squeeze for k >= 1; for k < 1, a variate of shape
// k + 1 times U^(1/k) has shape k.
double rg_gen_gamma(uint64_t *s, double k) {
  double boost = 1;
  if (k < 1) {
    boost = pow(rg_gen_uniform(s), 1.0 / k);
    k += 1;
  }
  double d = k - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
  for (;;) {
    double x = rg_gen_normal(s), v = 1 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    double u = rg_gen_uniform(s);
    if (u < 1 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1 - v + log(v)))
      return d * v * boost;
  }
}

static int64_t draw(const rg_dist_t *d, uint64_t *s) {
  double v;
  switch (d->kind) {
    case RG_DIST_UNIFORM:
      v = d->min + (d->max - d->min) * rg_gen_uniform(s);
      break;
    case RG_DIST_LOGNORMAL: {
      double mu = log(d->mean > 1 ? d->mean : 1) - d->sigma * d->sigma / 2.0;
      v = exp(mu + d->sigma * rg_gen_normal(s));
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

rg_status_t rg_workload_sample_arrivals(const rg_workload_t *w, size_t n, uint64_t seed,
                                        int64_t max_context, const rg_arrival_t *a,
                                        rg_gen_request_t *out) {
  if (max_context > 0 && max_context < 2)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "workload %s: a context of %lld tokens holds no prompt and output",
                          w->name, (long long)max_context);
  double r = a->rate >= 0 ? a->rate : w->rate;
  if (!isfinite(r))
    return rg_status_make(RG_INVALID_ARGUMENT, "arrival rate %g req/s is not a finite number", r);
  int gamma = a->process == RG_ARRIVAL_GAMMA;
  if (gamma && !(a->cv > 0 && a->cv <= 100))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "gamma arrivals: cv %g is not a coefficient of variation from 0 to 100 "
                          "(1 is Poisson; 2-4 is bursty)",
                          a->cv);
  // Gaps of shape k and scale 1 / (r k) have mean 1 / r and cv 1 / sqrt(k).
  double k = gamma ? 1.0 / (a->cv * a->cv) : 1;
  uint64_t s = seed ^ 0x5eed5eed5eedull;
  double t = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t p = draw(&w->prompt, &s), o = draw(&w->output, &s);
    if (max_context > 0 && p + o > max_context) {
      if (p > max_context - 1) p = max_context - 1;
      if (p + o > max_context) o = max_context - p;
    }
    if (r > 0 && i > 0) t += gamma ? rg_gen_gamma(&s, k) / (r * k) : -log(rg_gen_uniform(&s)) / r;
    out[i] = (rg_gen_request_t){p, o, r > 0 ? t : 0};
  }
  return NULL;
}

rg_status_t rg_workload_sample(const rg_workload_t *w, size_t n, uint64_t seed, int64_t max_context,
                               double rate, rg_gen_request_t *out) {
  rg_arrival_t a = {RG_ARRIVAL_POISSON, rate, 1};
  return rg_workload_sample_arrivals(w, n, seed, max_context, &a, out);
}
