/*
 * bestfit.c - FGD baseline (see fgd-internal.h): the node with the least
 * CPU and GPU left after the placement, both normalised, equally weighted.
 */
#include "sched/policy/fgd-internal.h"

static double bestfit_score(const struct cnl_sched_view *v,
                            const struct cnl_job *j,
                            const struct cnl_plan *plan)
{
	const struct cnl_node *n = &v->c->nodes[plan->node];
	double raw =
	    0.5 * (double)(n->cpu_total - n->cpu_used - j->req.cpu_milli) /
	        FGD_MAX_CPU +
	    0.5 *
	        (double)(fgd_gpu_left_milli(v->c, plan->node) -
	                 fgd_req_milli(j)) /
	        FGD_MAX_GPU;

	/* The simulator min-max normalises over the feasible nodes before
	 * taking the highest; that keeps the set of highest nodes. */
	return -(double)(int)(100.0 * (1.0 - raw));
}

const struct cnl_policy_ops cnl_policy_bestfit = {
    .name = "bestfit",
    .summary = "least CPU and GPU left after placement (FGD baseline)",
    .gpu_choice = CNL_GPU_BEST_FIT,
    .score = bestfit_score,
};
