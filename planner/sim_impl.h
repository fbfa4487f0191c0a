// Private to the simulator's files (planner/sim_*.c): the event queue, the
// link flow model and the latency histograms.
#ifndef RG_PLANNER_SIM_IMPL_H
#define RG_PLANNER_SIM_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "planner/simulate.h"

// ----- Event queue: a binary min-heap on (time, insertion number) ------------------
// Ties go to the event pushed first, so the order of events never depends
// on the heap's layout: part of what makes a run deterministic.

typedef struct {
  double t;
  uint64_t seq;
  int32_t kind;
  int32_t a;  // a replica, link or session, by kind
  int64_t b;  // a version or tag, by kind
} rg__ev_t;

typedef struct {
  rg__ev_t *h;
  size_t n, cap;
  uint64_t seq;
} rg__heap_t;

RG_MUST_USE rg_status_t rg__heap_push(rg__heap_t *q, double t, int32_t kind, int32_t a, int64_t b);
// Removes the earliest event into *out; 0 when empty.
int rg__heap_pop(rg__heap_t *q, rg__ev_t *out);
static inline double rg__heap_top(const rg__heap_t *q) {
  return q->n ? q->h[0].t : 1e300;
}
void rg__heap_free(rg__heap_t *q);

// ----- Links: flows sharing bandwidth -----------------------------------------------
// A link carries flows (a KV transfer, a step's hidden states, a group of
// block copies); the n flows on it each move at bandwidth / n (processor
// sharing, the fluid limit of fair queueing), so a flow's finish time moves
// whenever another starts or ends. Latency is paid once per flow, after
// its bytes.

typedef struct {
  double rem;     // bytes still to move
  int32_t owner;  // who waits on it (by kind)
  int32_t kind;
  int64_t tag;
  double start;
} rg__flow_t;

typedef struct {
  double bw, lat;  // bytes/s, seconds
  double last;     // time the flows' remaining bytes are as of
  rg__flow_t *f;
  int n, cap;
  int64_t version;     // bumped at every change; a stale completion event is ignored
  double bytes, busy;  // moved in all, and seconds with at least one flow
} rg__link_t;

// Brings every flow's remaining bytes to `now`.
void rg__link_advance(rg__link_t *l, double now);
RG_MUST_USE rg_status_t rg__link_add(rg__link_t *l, double now, double bytes, int32_t owner,
                                     int32_t kind, int64_t tag);
// When the next flow finishes moving its bytes (1e300 when idle).
double rg__link_next(const rg__link_t *l);
// Removes the flows whose bytes are all moved (as of now, after advance)
// into done[0..*n_done), at most cap of them.
void rg__link_take_done(rg__link_t *l, rg__flow_t *done, int cap, int *n_done);
void rg__link_free(rg__link_t *l);

// ----- Latency histograms --------------------------------------------------------------
// Log-linear: 256 bins per octave (each under 0.4% wide) from 2^-30 s to
// 2^20 s, so a million requests' percentiles cost 100 KB, not their every
// value, and come out within a bin's width of the exact ones.

#define RG__HIST_SUB_BITS 8
#define RG__HIST_OCTAVES 50
#define RG__HIST_MIN_EXP (-30)
#define RG__HIST_BINS (RG__HIST_OCTAVES << RG__HIST_SUB_BITS)

typedef struct {
  int64_t *bins;  // (RG__HIST_BINS)
  int64_t n;
  double sum, min, max;
} rg__hist_t;

RG_MUST_USE rg_status_t rg__hist_init(rg__hist_t *h);
void rg__hist_free(rg__hist_t *h);
void rg__hist_add(rg__hist_t *h, double v);
// The q-quantile (0..1) as rg_percentiles computes it from the sorted
// values (linear interpolation between ranks), each value its bin's middle.
double rg__hist_quantile(const rg__hist_t *h, double q);
// Share of values <= v (bins wholly at or below v).
double rg__hist_share_below(const rg__hist_t *h, double v);
rg_sim_pct_t rg__hist_pct(const rg__hist_t *h);

#endif  // RG_PLANNER_SIM_IMPL_H
