// planner/workload_gen.h — requests drawn from a workload's description:
// prompt and output lengths from its distributions, arrival times from its
// arrival process. The runtime's `ridge run --workload` and a simulator draw
// the same requests for the same seed.
//
// Lognormal lengths take `mean` as the arithmetic mean (mu = ln(mean) -
// sigma^2 / 2), as configs/ documents; every length is rounded, at least 1
// and at most the distribution's max. Poisson arrivals have exponential gaps
// at the workload's rate (or the override); rate 0 means every request
// arrives at once. Randomness is splitmix64 from the seed, so a seed
// reproduces a stream on every machine.
#ifndef RG_PLANNER_WORKLOAD_GEN_H
#define RG_PLANNER_WORKLOAD_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "planner/planner.h"

typedef struct {
  int64_t prompt_tokens, output_tokens;
  double arrival;  // seconds from the start
} rg_gen_request_t;

// Fills out[0..n). max_context > 0 caps prompt + output (the prompt is cut
// first, to at least 1 token, then the output). rate < 0 uses the
// workload's rate. Fails on a workload whose lengths cannot fit at all.
RG_MUST_USE rg_status_t rg_workload_sample(const rg_workload_t *w, size_t n, uint64_t seed,
                                           int64_t max_context, double rate, rg_gen_request_t *out);

#endif  // RG_PLANNER_WORKLOAD_GEN_H
