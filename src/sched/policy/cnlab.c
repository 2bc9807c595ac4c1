/*
 * cnlab.c - our policy: multi-criteria order and placement.
 *
 *   order  deadline urgency + the team's fair-share factor + age, weighted
 *          by config (w_deadline, w_fairshare, w_age).  The cycle keeps
 *          the team factor current as it places work (fairshare = true).
 *   score  packing (the allocator's best fit, used nodes and GPUs first;
 *          w_pack) + data locality (w_locality when the job's dataset is
 *          not on the node) + network distance to gang peers (w_network)
 *          + a node order drawn with the seed (w_order).
 *   refine the growth of the node's fragmentation (w_frag), re-scored on
 *          the best frag_candidates nodes only, since it is dearer.
 */
#include <string.h>

#include "sched/policy/policy-internal.h"

static double cnlab_order(const struct cnl_sched_view *v,
                          const struct cnl_job *j)
{
	const struct cnl_sched_config *cfg = cnl_sched_view_config(v);

	return cfg->w_deadline * cnl_sched_urgency(v, j) +
	       cfg->w_fairshare * cnl_sched_team_factor(v, j->req.project) +
	       cfg->w_age * cnl_sched_age(v, j);
}

/*
 * The node's place in an order drawn with the seed, in [0, 1): the same
 * for every job, so that among placements of nearly equal merit the same
 * nodes fill first (first fit over a random order) and the others stay
 * whole for what needs a whole node.  In the FGD trace experiments this
 * soft order beats both exact ties broken by the order (too few ties) and
 * FGD's truncated scores (ties decided by the order alone).
 */
static double node_order(const struct cnl_sched_view *v, uint32_t node)
{
	uint64_t x = v->seed ^ (0x9e3779b97f4a7c15ULL * (node + 1));

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return (double)(x >> 11) / 9007199254740992.0;
}

static double cnlab_score(const struct cnl_sched_view *v,
                          const struct cnl_job *j, const struct cnl_plan *plan)
{
	const struct cnl_sched_config *cfg = cnl_sched_view_config(v);
	const struct cnl_node *n = &v->c->nodes[plan->node];
	double score = cfg->w_pack * (double)plan->score;

	if (j->dataset[0]) {
		bool local = false;
		for (int i = 0; i < n->n_datasets && !local; i++)
			local = strcmp(n->datasets[i], j->dataset) == 0;
		if (!local)
			score += cfg->w_locality;
	}
	score += cfg->w_network * cnl_sched_gang_distance(v, plan->node);
	if (cfg->w_order > 0) {
		/* A multi-GPU pod's placements differ more in fragmentation;
		 * the order sways it less. */
		double w = cfg->w_order;
		if (j->req.kind == CNL_REQ_WHOLE && j->req.gpus > 1)
			w *= cfg->order_multi;
		score += w * node_order(v, plan->node);
	}
	return score;
}

/* The growth of the node's fragmentation, weighted.  Plans the analytic
 * measure cannot evaluate (MIG) keep their score. */
static double cnlab_refine(const struct cnl_sched_view *v,
                           const struct cnl_job *j, const struct cnl_plan *plan,
                           double score)
{
	const struct cnl_sched_config *cfg = cnl_sched_view_config(v);
	double before, after;

	if (cfg->w_frag <= 0)
		return score;
	after = cnl_frag_node_after(v->c, plan->node, &cfg->mix, plan,
	                            j->req.cpu_milli, j->req.mem_mib);
	if (after < 0)
		return score;
	before = cnl_frag_node(v->c, plan->node, &cfg->mix);
	return score + cfg->w_frag * (after - before);
}

const struct cnl_policy_ops cnl_policy_cnlab = {
    .name = "cnlab",
    .summary = "priority, deadline, fair share and age; packing, locality, "
               "network distance and fragmentation",
    .gpu_choice = CNL_GPU_SCORED,
    .order = cnlab_order,
    .score = cnlab_score,
    .refine = cnlab_refine,
    .fairshare = true,
    .pack_bound = true,
};
