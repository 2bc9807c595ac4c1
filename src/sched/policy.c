/*
 * policy.c - the policy interface: the static registry of ops tables,
 * chosen by name (cnl_policy_find), and the generic wrappers the cycle and
 * the simulator call (cnl_policy_order/score/refine), which run the
 * scheduler's policy or the default when the policy leaves an op out.
 *
 * As in Slurm's select interface: the cycle calls the wrappers, the
 * wrappers call the policies (policy/<name>.c, see policy-internal.h),
 * and nothing below calls back up.  The registry's order is the order
 * `cnlab-sim` and the docs list them in.
 */
#include <strings.h>

#include "sched/policy/policy-internal.h"
#include "sched/sched-internal.h"

static const struct cnl_policy_ops *const registry[] = {
    &cnl_policy_cnlab,   &cnl_policy_fifo,          &cnl_policy_random,
    &cnl_policy_dotprod, &cnl_policy_gpuclustering, &cnl_policy_gpupacking,
    &cnl_policy_bestfit, &cnl_policy_fgd,           NULL,
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
	double sc = p->score ? p->score(v, j, plan) : (double)plan->score;

	/* A node outside the job's preferred ones costs w_prefer, whatever
	 * the policy.  Never negative: the search's lower bounds on a
	 * node's score still hold. */
	if (j->prefer && !cnl_node_set_has(j->prefer, plan->node))
		sc += v->s->cfg.w_prefer;
	return sc;
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
