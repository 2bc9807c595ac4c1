/*
 * dotprod.c - FGD baseline (see fgd-internal.h): the smallest dot product
 * of the request and the node's free (CPU, GPU) vector, both normalised:
 * the fullest node aligned with the request.
 */
#include "sched/policy/fgd-internal.h"

static double dotprod_score(const struct cnl_sched_view *v,
                            const struct cnl_job *j,
                            const struct cnl_plan *plan)
{
	const struct cnl_node *n = &v->c->nodes[plan->node];
	double cpu_left = (double)(n->cpu_total - n->cpu_used) / FGD_MAX_CPU;
	double gpu_left =
	    (double)fgd_gpu_left_milli(v->c, plan->node) / FGD_MAX_GPU;
	double dot = cpu_left * (double)j->req.cpu_milli / FGD_MAX_CPU +
	             gpu_left * (double)fgd_req_milli(j) / FGD_MAX_GPU;

	return -(double)(int)(100.0 * (1.0 - dot / 2.0));
}

const struct cnl_policy_ops cnl_policy_dotprod = {
    .name = "dotprod",
    .summary = "smallest dot product of request and free resources "
               "(FGD baseline)",
    .gpu_choice = CNL_GPU_BEST_FIT,
    .score = dotprod_score,
};
