// Private to planner/: shared between the cost model, search and output.
#ifndef RG_PLANNER_PLANNER_IMPL_H
#define RG_PLANNER_PLANNER_IMPL_H

#include "base/units.h"
#include "planner/planner.h"

rg_link_t rg__link_between(const rg_fleet_t *f, const rg_group_t *a, const rg_group_t *b);
// Usable first-tier bytes per device of g under the request's memory setting.
double rg__group_capacity(const rg_plan_request_t *req, const rg_group_t *g);
double rg__mem_util(const rg_plan_request_t *req);
double rg__prefill_chunk(const rg_plan_request_t *req);
// Utilisation queueing is judged at while searching, before the plan is
// packed and each replica's share of the workload's rate is known.
#define RG__PLANNING_LOAD 0.7
// Objective value of a whole option.
double rg__option_score(const rg_plan_option_t *o, rg_objective_t obj);
// Recomputes an option's totals from its pools.
rg_status_t rg__option_finish(const rg_plan_request_t *req, rg_plan_option_t *o);
// One-line description of a pool: "8 x h100-sxm" or "attn 8 x h100-sxm | ffn 16 x bertha-500".
void rg__pool_describe(const rg_placement_t *p, char *buf, size_t len);
// The largest batch (up to max_batch) that fits and meets the SLOs, by
// bisection; p->batch is set to it. *found is 0 when even batch 1 fails.
rg_status_t rg__largest_batch(const rg_plan_request_t *req, rg_placement_t *p, int max_batch,
                              rg_prediction_t *pred, int *found, int *evaluated);

// Latency percentiles (latency.c).
// Standard normal quantile.
double rg__norm_quantile(double p);
// The p-quantile of the waiting time in an M/G/1 queue with load rho and
// mean service s (exponential tail, matched to the Pollaczek-Khinchine mean
// with the given squared coefficient of variation of service).
double rg__wait_quantile(double rho, double s, double cv2, double p);
double rg__wait_mean(double rho, double s, double cv2);
// Erlang C: the chance of waiting in an M/M/c queue at offered load a.
double rg__erlang_c(double c, double a);

#endif  // RG_PLANNER_PLANNER_IMPL_H
