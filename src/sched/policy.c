/*
 * policy.c - the scheduling policies: ops tables in one static registry,
 * the generic wrappers the cycle calls, and the factors policies combine.
 *
 * A policy decides two things: the order of pending jobs within a priority
 * class (order) and the preference among nodes that can take a job
 * (score).  Admission, reservations, backfill and pre-emption are the
 * cycle's, the same for every policy, so that policies compare fairly.
 *
 *   cnlab  multi-criteria: deadline urgency + fair share + age for order;
 *          packing (the allocator's best fit, used nodes and GPUs first) +
 *          data locality + network distance to gang peers for placement,
 *          with fragmentation growth re-scored on the best candidates.
 *   fifo   submit order; the allocator's best fit.  A baseline.
 *
 * The placement baselines of the FGD paper (random, dotprod, gpuclustering,
 * gpupacking, bestfit, fgd) are in policy_fgd.c.
 */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "sched/sched-internal.h"

double cnl_sched_urgency(const struct cnl_sched_view *v,
                         const struct cnl_job *j)
{
	const struct cnl_sched_config *cfg = &v->s->cfg;
	int64_t rt, slack;

	if (!j->deadline_ms)
		return 0;
	/* Without a run time the deadline is a start-by time. */
	rt = j->runtime_ms > 0 ? j->runtime_ms : 0;
	slack = j->deadline_ms - v->now_ms - rt;
	if (slack <= 0)
		return 1;
	if (slack >= cfg->deadline_horizon_ms)
		return 0;
	return 1.0 - (double)slack / (double)cfg->deadline_horizon_ms;
}

double cnl_sched_age(const struct cnl_sched_view *v, const struct cnl_job *j)
{
	int64_t age = v->now_ms - j->submit_ms;

	if (age <= 0)
		return 0;
	if (age >= v->s->cfg.age_max_ms)
		return 1;
	return (double)age / (double)v->s->cfg.age_max_ms;
}

static double cnlab_order(const struct cnl_sched_view *v,
                          const struct cnl_job *j)
{
	const struct cnl_sched_config *cfg = &v->s->cfg;

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
	const struct cnl_sched_config *cfg = &v->s->cfg;
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
	const struct cnl_sched_config *cfg = &v->s->cfg;
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

static double fifo_order(const struct cnl_sched_view *v,
                         const struct cnl_job *j)
{
	(void)v;
	return -(double)j->submit_ms;
}

static const struct cnl_policy_ops policy_cnlab = {
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

static const struct cnl_policy_ops policy_fifo = {
    .name = "fifo",
    .summary = "submit order within a class; best fit",
    .order = fifo_order,
    .score = NULL,
    .fairshare = false,
};

static const struct cnl_policy_ops *const registry[] = {
    &policy_cnlab,
    &policy_fifo,
    &cnl_policy_random,
    &cnl_policy_dotprod,
    &cnl_policy_gpuclustering,
    &cnl_policy_gpupacking,
    &cnl_policy_bestfit,
    &cnl_policy_fgd,
    NULL,
};

const struct cnl_policy_ops *const *cnl_policy_list(void)
{
	return registry;
}

const struct cnl_policy_ops *cnl_policy_find(const char *name)
{
	for (size_t i = 0; registry[i]; i++)
		if (strcasecmp(registry[i]->name, name) == 0)
			return registry[i];
	return NULL;
}

double cnl_policy_order(const struct cnl_sched_view *v, const struct cnl_job *j)
{
	const struct cnl_policy_ops *p = v->s->pol;

	return p->order ? p->order(v, j) : -(double)j->submit_ms;
}

double cnl_policy_score(const struct cnl_sched_view *v, const struct cnl_job *j,
                        const struct cnl_plan *plan)
{
	const struct cnl_policy_ops *p = v->s->pol;

	return p->score ? p->score(v, j, plan) : (double)plan->score;
}

double cnl_policy_refine(const struct cnl_sched_view *v,
                         const struct cnl_job *j, const struct cnl_plan *plan,
                         double score)
{
	const struct cnl_policy_ops *p = v->s->pol;

	return p->refine ? p->refine(v, j, plan, score) : score;
}

const struct cnl_policy_ops *cnl_sched_policy(const struct cnl_sched *s)
{
	return s->pol;
}
