/*
 * gpupacking.c - FGD baseline (see fgd-internal.h): partly used GPUs
 * first, then free GPUs of used nodes, then free nodes; the GPUs the job
 * would take are found by walking the node's GPUs by free capacity,
 * ascending, as the simulator does.
 */
#include "sched/policy/fgd-internal.h"

static double gpupacking_score(const struct cnl_sched_view *v,
                               const struct cnl_job *j,
                               const struct cnl_plan *plan)
{
	const struct cnl_cluster *c = v->c;
	const struct cnl_node *n = &c->nodes[plan->node];
	int freeb[CNL_NODE_MAX_GPUS], order[CNL_NODE_MAX_GPUS];
	int want = j->req.kind == CNL_REQ_WHOLE ? j->req.gpus : 1;
	int need =
	    j->req.kind == CNL_REQ_WHOLE ? CNL_BLOCKS_PER_GPU : j->req.blocks;

	if (j->req.kind == CNL_REQ_CPU)
		return 0;
	if (n->n_empty == n->n_gpus) {
		int f = n->n_gpus;
		return -(double)(33 - f > f ? 33 - f : f);
	}
	/* Walk the GPUs by free capacity, ascending (stable). */
	for (int g = 0; g < n->n_gpus; g++) {
		freeb[g] = cnl_gpu_free_blocks(c, plan->node, g);
		int q = g;
		while (q > 0 && freeb[order[q - 1]] > freeb[g]) {
			order[q] = order[q - 1];
			q--;
		}
		order[q] = g;
	}
	int taken = 0, full_used = 0, sum = 0;
	for (int i = 0; i < n->n_gpus && taken < want; i++) {
		int g = order[i];
		if (freeb[g] < need)
			continue;
		taken++;
		full_used += freeb[g] == CNL_BLOCKS_PER_GPU;
		sum += freeb[g]; /* floor(free_milli * 100 / 1000) = blocks */
	}
	if (full_used)
		return -(double)(50 - full_used > 33 ? 50 - full_used : 33);
	return -(double)(100 - sum / 10 > 50 ? 100 - sum / 10 : 50);
}

const struct cnl_policy_ops cnl_policy_gpupacking = {
    .name = "gpupacking",
    .summary = "partly used GPUs, then free GPUs of used nodes, then free "
               "nodes (FGD baseline)",
    .gpu_choice = CNL_GPU_BEST_FIT,
    .score = gpupacking_score,
};
