/*
 * gpuclustering.c - FGD baseline (see fgd-internal.h): keep GPU-sharing
 * work and whole-GPU work on separate nodes.  A node already running the
 * job's kind scores highest (less if it runs both kinds), then an empty
 * node, then a node of the other kind; fuller nodes win within a tier.
 */
#include "sched/policy/fgd-internal.h"

static double gpuclustering_score(const struct cnl_sched_view *v,
                                  const struct cnl_job *j,
                                  const struct cnl_plan *plan)
{
	const struct cnl_node *n = &v->c->nodes[plan->node];
	int64_t base =
	    25 * ((int64_t)FGD_MAX_GPU - fgd_gpu_left_milli(v->c, plan->node)) /
	    (int64_t)FGD_MAX_GPU;
	bool share = j->req.kind == CNL_REQ_BLOCKS;
	bool has_share = n->n_shared > 0, has_whole = n->n_whole > 0;

	if (j->req.kind == CNL_REQ_CPU)
		return 0;
	if (share ? has_share : has_whole)
		return -(double)(base + ((has_share && has_whole) ? 50 : 75));
	return -(double)(base + ((!has_share && !has_whole) ? 25 : 0));
}

const struct cnl_policy_ops cnl_policy_gpuclustering = {
    .name = "gpuclustering",
    .summary = "sharing and whole-GPU work on separate nodes (FGD baseline)",
    .gpu_choice = CNL_GPU_BEST_FIT,
    .score = gpuclustering_score,
};
