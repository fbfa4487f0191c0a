// planner/workload_gen.h — requests drawn from a workload's description:
// prompt and output lengths from its distributions, arrival times from an
// arrival process. The runtime's `ridge run --workload` and the simulator
// draw the same requests for the same seed.
//
// Lognormal lengths take `mean` as the arithmetic mean (mu = ln(mean) -
// sigma^2 / 2), as configs/ documents; every length is rounded, at least 1
// and at most the distribution's max. Arrivals are a renewal process at the
// workload's rate (or the override): Poisson (exponential gaps, coefficient
// of variation 1) or gamma-distributed gaps with a chosen coefficient of
// variation, which for cv > 1 gives bursts (many requests close together,
// then lulls) at the same mean rate, as real traffic shows. Rate 0 means
// every request arrives at once. Randomness is splitmix64 from the seed, so
// a seed reproduces a stream on every machine.
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

#define RG_ARRIVAL_MAP(X)          \
  X(RG_ARRIVAL_POISSON, "poisson") \
  X(RG_ARRIVAL_GAMMA, "gamma")

typedef enum {
#define RG_X_(e, n) e,
  RG_ARRIVAL_MAP(RG_X_)
#undef RG_X_
      RG_ARRIVAL_COUNT
} rg_arrival_process_t;

const char *rg_arrival_name(rg_arrival_process_t p);  // "?" when out of range
// Parses "poisson" or "gamma"; the error names the word and the choices.
RG_MUST_USE rg_status_t rg_arrival_parse(const char *word, rg_arrival_process_t *out);

typedef struct {
  rg_arrival_process_t process;
  double rate;  // requests/s; < 0: the workload's; 0: all at once
  // Gamma only: the coefficient of variation of the gaps (> 0; 1 is
  // Poisson, 2-4 is bursty traffic). The gamma shape is 1 / cv^2.
  double cv;
} rg_arrival_t;

// Fills out[0..n). max_context > 0 caps prompt + output (the prompt is cut
// first, to at least 1 token, then the output). rate < 0 uses the
// workload's rate. Poisson arrivals. Fails on a workload whose lengths
// cannot fit at all.
RG_MUST_USE rg_status_t rg_workload_sample(const rg_workload_t *w, size_t n, uint64_t seed,
                                           int64_t max_context, double rate, rg_gen_request_t *out);
// The same with the arrival process given; a Poisson process draws exactly
// what rg_workload_sample draws. Errors name a bad rate or cv.
RG_MUST_USE rg_status_t rg_workload_sample_arrivals(const rg_workload_t *w, size_t n, uint64_t seed,
                                                    int64_t max_context, const rg_arrival_t *a,
                                                    rg_gen_request_t *out);

// One gamma variate of shape k > 0 and scale 1 (Marsaglia and Tsang), from
// the splitmix64 state *s. For the simulator's own draws.
double rg_gen_gamma(uint64_t *s, double k);
// A uniform variate in (0, 1] and a standard normal one from *s.
double rg_gen_uniform(uint64_t *s);
double rg_gen_normal(uint64_t *s);

#endif  // RG_PLANNER_WORKLOAD_GEN_H
