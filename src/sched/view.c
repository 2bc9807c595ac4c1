/*
 * view.c - the factors the policies combine, each read from the cycle's
 * view (struct cnl_sched_view): deadline urgency and age (sched.h), the
 * team's fair-share factor (sched.h) and the network distance to the gang
 * being placed (view-internal.h).
 *
 * This file sits below both the policies and the cycle: it reads the
 * scheduler's state (the teams and gang nodes the cycle keeps current) and
 * calls nobody in the scheduler, so policies can use it without depending
 * on the cycle that calls them.
 */
#include <string.h>

#include "sched/sched-internal.h"
#include "sched/view-internal.h"

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

double cnl_sched_team_factor(const struct cnl_sched_view *v, uint32_t team)
{
	const struct cnl_team *t = cnl_sched_team_find(v->s, team);

	return t ? t->factor : 1.0;
}

double cnl_sched_gang_distance(const struct cnl_sched_view *v, uint32_t node)
{
	const struct cnl_sched *s = v->s;
	const struct cnl_node *a = &v->c->nodes[node];
	int worst = 0;

	for (int i = 0; i < s->n_gang_nodes; i++) {
		const struct cnl_node *b = &v->c->nodes[s->gang_nodes[i]];
		int d;
		if (s->gang_nodes[i] == node)
			d = 0;
		else if (strcmp(a->cluster, b->cluster) != 0)
			d = 4;
		else if (strcmp(a->zone, b->zone) != 0)
			d = 3;
		else if (strcmp(a->rack, b->rack) != 0)
			d = 2;
		else
			d = 1;
		if (d > worst)
			worst = d;
	}
	return worst;
}
