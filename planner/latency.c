// Percentiles: of token-count distributions (prompt and output lengths) and
// of queueing delay, so that an SLO at p99 binds on the tail rather than on
// the mean.
//
// Queueing, for TTFT. A request arriving at a replica (Poisson) may wait
// twice: for a free sequence slot when the batch is full, and behind the
// prefills queued before it.
// - Slots: an M/M/c queue with c = the batch; the chance of waiting is
//   Erlang C, and the wait beyond it is exponential at rate (capacity -
//   arrival rate).
// - Prefills: an M/G/1 queue served at the batched prefill cost per request.
//   Its mean wait is the Pollaczek-Khinchine formula W = rho s (1 + cv^2) /
//   (2 (1 - rho)); for the tail, the exponential form exact for M/M/1 and
//   the heavy-traffic approximation otherwise, P(wait > t) = rho exp(-rho t /
//   W), whose quantile is (W / rho) ln(rho / (1 - p)), zero when p is below
//   the chance of not waiting (1 - rho).
#include <math.h>

#include "planner/planner_impl.h"

const double rg_pct[RG_N_PCT] = {50, 90, 99};

// Acklam's rational approximation of the inverse normal CDF (relative error
// below 1.2e-9), plenty for percentiles of token counts.
double rg__norm_quantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  if (p <= 0) return -INFINITY;
  if (p >= 1) return INFINITY;
  const double lo = 0.02425, hi = 1 - lo;
  if (p < lo) {
    double q = sqrt(-2 * log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > hi) {
    double q = sqrt(-2 * log(1 - p));
    return -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

double rg_dist_quantile(const rg_dist_t *d, double p) {
  switch (d->kind) {
    case RG_DIST_FIXED:
      return d->mean;
    case RG_DIST_UNIFORM:
      return d->min + p * (d->max - d->min);
    case RG_DIST_LOGNORMAL: {
      // `mean` is the distribution's mean, so mu = ln(mean) - sigma^2 / 2.
      double mu = log(d->mean) - d->sigma * d->sigma / 2;
      double v = exp(mu + d->sigma * rg__norm_quantile(p));
      if (d->max > 0 && v > d->max) v = d->max;
      return v < 1 ? 1 : v;
    }
  }
  return d->mean;
}

double rg__wait_mean(double rho, double s, double cv2) {
  if (rho <= 0) return 0;
  if (rho >= 1) return INFINITY;
  return rho * s * (1 + cv2) / (2 * (1 - rho));
}

double rg__wait_quantile(double rho, double s, double cv2, double p) {
  if (rho <= 0 || p <= 1 - rho) return 0;
  double w = rg__wait_mean(rho, s, cv2);
  return w / rho * log(rho / (1 - p));
}

// Erlang C: the chance an arrival finds all c servers busy at offered load a
// (in servers). Exact by the Erlang B recursion up to a few thousand
// servers; past that the Halfin-Whitt approximation, accurate at that size.
double rg__erlang_c(double c, double a) {
  if (a <= 0) return 0;
  if (a >= c) return 1;
  if (c <= 4096) {
    int n = (int)lround(c);
    double b = 1;
    for (int k = 1; k <= n; k++) b = a * b / (k + a * b);
    double rho = a / n;
    return b / (1 - rho * (1 - b));
  }
  double beta = (1 - a / c) * sqrt(c);
  double phi = exp(-beta * beta / 2) / sqrt(2 * M_PI), Phi = 0.5 * erfc(-beta / sqrt(2));
  return 1.0 / (1.0 + beta * Phi / phi);
}
