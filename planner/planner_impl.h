// Private to planner/: shared between the cost model, search and output.
#ifndef RG_PLANNER_PLANNER_IMPL_H
#define RG_PLANNER_PLANNER_IMPL_H

#include "base/units.h"
#include "planner/planner.h"

rg_link_t rg__link_between(const rg_fleet_t *f, const rg_group_t *a, const rg_group_t *b);
double rg__group_capacity(const rg_group_t *g);
// Fills tp/pp of a group from its size and the fleet's devices per node.
void rg__group_shape(const rg_fleet_t *f, rg_group_t *g);
// Objective value of a whole option.
double rg__option_score(const rg_plan_option_t *o, rg_objective_t obj);
// Recomputes an option's totals from its pools.
rg_status_t rg__option_finish(const rg_plan_request_t *req, rg_plan_option_t *o);
// One-line description of a pool: "8 x h100-sxm" or "attn 8 x h100-sxm | ffn 16 x bertha-500".
void rg__pool_describe(const rg_placement_t *p, char *buf, size_t len);

#endif  // RG_PLANNER_PLANNER_IMPL_H
