/*
 * gang.c - gangs: jobs sharing a `gang` id start together or not at all.
 *
 * The members are placed one by one with the ordinary search (place.c),
 * each preferring nodes near those already placed (the policy's network
 * distance reads the gang's nodes from the scheduler, view.c) and, with
 * `spread`, each on a node of its own.  Only when all gang_size members
 * are placed do they start; otherwise the placed ones are rolled back and
 * every member waits with CNL_WHY_GANG_INCOMPLETE.
 */
#include <errno.h>

#include "sched/cycle-internal.h"

/* All of a gang's members start now, or none does. */
int cnl_cyc_start_gang(struct cnl_cyc *y, const uint32_t *members, size_t n,
                       size_t size)
{
	struct cnl_sched *s = y->s;
	uint32_t ids[CNL_NODE_MAX_GPUS * 4], nodes[CNL_NODE_MAX_GPUS * 4];
	size_t placed = 0;
	bool conflict = false;
	int r = 0;

	if (n != size || n > sizeof(ids) / sizeof(ids[0])) {
		for (size_t i = 0; i < n; i++)
			if ((r = cnl_cyc_decide(y, members[i], CNL_DEC_WAIT,
			                        CNL_WHY_GANG_INCOMPLETE, NONE,
			                        0, T_INF, 0)) < 0)
				return r;
		return 0;
	}
	s->n_gang_nodes = 0;
	for (; placed < n; placed++) {
		struct cnl_plan plan;
		bool c1;
		if (!cnl_cyc_search(y, members[placed], &plan, &c1)) {
			conflict |= c1;
			break;
		}
		if ((r = cnl_cyc_start_job(y, members[placed], &plan, y->now,
		                           &ids[placed])) < 0)
			break;
		nodes[placed] = plan.node;
		s->gang_nodes[s->n_gang_nodes++] = plan.node;
	}
	s->n_gang_nodes = 0;
	if (placed == n) {
		for (size_t i = 0; i < n; i++)
			if (cnl_cyc_decide(y, members[i], CNL_DEC_START,
			                   s->n_resv ? CNL_WHY_BACKFILLED
			                             : CNL_WHY_STARTED,
			                   nodes[i], ids[i], y->now, 0) < 0)
				return -ENOMEM;
		return 0;
	}
	/* Roll back the members already placed. */
	while (placed-- > 0) {
		const struct cnl_alloc *a = cnl_alloc_get(y->c, ids[placed]);
		cnl_cyc_team_hold(y, y->jobs[members[placed]].req.project,
		                  -(int64_t)cnl_alloc_blocks_held(y->c, a));
		cnl_cyc_run_del(s, nodes[placed], ids[placed]);
		cnl_alloc_free(y->c, ids[placed]);
		cnl_cyc_tmax_dirty(y, nodes[placed]);
		cnl_cyc_fit_grown(y, nodes[placed]);
	}
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++)
		if (cnl_cyc_decide(y, members[i], CNL_DEC_WAIT,
		                   CNL_WHY_GANG_INCOMPLETE, NONE, 0,
		                   cnl_cyc_estimate(y, &y->prep[members[i]]),
		                   0) < 0)
			return -ENOMEM;
	(void)conflict;
	return 0;
}
