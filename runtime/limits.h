// runtime/limits.h — this machine's own limits, measured in the same run as
// the work they are compared with: STREAM-style read bandwidth and f32 FMA
// peak. Reports of achieved GB/s and GFLOP/s divide by these, never by a
// datasheet figure, since the same CPU differs run to run (turbo, noise).
#ifndef RG_RUNTIME_LIMITS_H
#define RG_RUNTIME_LIMITS_H

#include "base/status.h"
#include "base/pool.h"

typedef struct {
  double read_bandwidth;  // bytes/s, summing a buffer far larger than cache
  double fma_peak;        // f32 FLOP/s, independent FMA chains on every thread
  int threads;
  const char *fma_isa;    // "avx512f", "avx2", "scalar"
} rg_limits_t;

// Takes about `budget_s` seconds (0.3 is enough for 2-digit figures).
RG_MUST_USE rg_status_t rg_limits_measure(rg_pool_t *pool, double budget_s, rg_limits_t *out);

#endif  // RG_RUNTIME_LIMITS_H
