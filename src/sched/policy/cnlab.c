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
 *          the best frag_candidates nodes only, since it is dearer.  The
 *          growth counts, besides FGD's measure (frag.c), the free GPU
 *          blocks the node's free CPU could no longer feed at the CPU per
 *          block of the expected work (the mix's; the node's own when the
 *          mix gives no CPU): a placement that eats a node's CPU strands
 *          its GPUs long before no typical task fits at all.
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

/* CPU (milli) per GPU block that the mix's GPU tasks ask for; 0 when the
 * mix gives no CPU. */
static double mix_cpu_per_block(const struct cnl_task_mix *mix)
{
	double cpu = 0, blocks = 0;

	for (int i = 0; i < mix->n; i++) {
		const __typeof__(mix->t[0]) *m = &mix->t[i];
		double b = m->kind == CNL_REQ_BLOCKS  ? m->blocks
		           : m->kind == CNL_REQ_WHOLE ? 100.0 * m->gpus
		                                      : 0;
		cpu += m->weight * (double)m->cpu_milli * (b > 0);
		blocks += m->weight * b;
	}
	return blocks > 0 ? cpu / blocks : 0;
}

/* Free blocks that `cpu_free` cannot feed at `per_block` CPU each. */
static double stranded(double free_blocks, double cpu_free, double per_block)
{
	double fed = cpu_free > 0 ? cpu_free / per_block : 0;

	return free_blocks > fed ? free_blocks - fed : 0;
}

/* How many more of the node's free GPU blocks its free CPU cannot feed
 * once `plan` is placed. */
static double strand_growth(const struct cnl_sched_view *v,
                            const struct cnl_job *j,
                            const struct cnl_plan *plan)
{
	const struct cnl_sched_config *cfg = cnl_sched_view_config(v);
	const struct cnl_node *n = &v->c->nodes[plan->node];
	double per_block = mix_cpu_per_block(&cfg->mix);
	double freeb = 0, used = 0, cpu_free;

	if (n->n_gpus == 0)
		return 0;
	if (per_block <= 0)
		per_block = (double)n->cpu_total /
		            (double)(CNL_BLOCKS_PER_GPU * n->n_gpus);
	if (per_block <= 0)
		return 0;
	for (int g = 0; g < n->n_gpus; g++)
		freeb += cnl_gpu_free_blocks(v->c, plan->node, g);
	if (plan->kind == CNL_PLACE_BLOCKS)
		used = plan->n_blocks;
	else if (plan->kind == CNL_PLACE_WHOLE)
		/* The GPUs by clearing the lowest bit (at most 16): without
		 * -mpopcnt __builtin_popcount is a call into libgcc. */
		for (unsigned m = plan->gpu_mask; m; m &= m - 1)
			used += CNL_BLOCKS_PER_GPU;
	cpu_free = (double)(n->cpu_total - n->cpu_used);
	return stranded(freeb - used, cpu_free - (double)j->req.cpu_milli,
	                per_block) -
	       stranded(freeb, cpu_free, per_block);
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
	return score +
	       cfg->w_frag * (after - before + strand_growth(v, j, plan));
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
