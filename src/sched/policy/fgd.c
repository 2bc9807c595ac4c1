/*
 * fgd.c - Fragmentation Gradient Descent (Weng et al., ATC'23; see
 * fgd-internal.h): the placement that grows the node's fragmentation (the
 * expected GPU capacity the typical tasks of the configured mix cannot
 * use, frag.c) least, through the simulator's sigmoid.  Scored per GPU by
 * the simulator (CNL_GPU_SCORED), so it also picks the GPU.
 */
#include <math.h>

#include "sched/policy/fgd-internal.h"

static double fgd_score(const struct cnl_sched_view *v, const struct cnl_job *j,
                        const struct cnl_plan *plan)
{
	const struct cnl_task_mix *mix = &cnl_sched_view_config(v)->mix;
	double before = cnl_frag_node(v->c, plan->node, mix);
	double after = cnl_frag_node_after(v->c, plan->node, mix, plan,
	                                   j->req.cpu_milli, 0);
	double delta = (before - after) * FGD_MILLI; /* milli-GPUs */

	if (after < 0)
		return 0;
	return -(double)(int)(100.0 / (1.0 + exp(-delta / 1000.0)));
}

const struct cnl_policy_ops cnl_policy_fgd = {
    .name = "fgd",
    .summary = "smallest growth of fragmentation, through a sigmoid "
               "(Weng et al., ATC'23)",
    .gpu_choice = CNL_GPU_SCORED,
    .score = fgd_score,
};
