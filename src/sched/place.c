/*
 * place.c - placement: the best node for a job now, and starting it.
 *
 * The search runs the allocator's summary test on every node and plans
 * only where it passes; the policy scores each plan (cnl_policy_score) and
 * the best k are kept, k being the policy's frag_candidates when it has a
 * dearer refine (fragmentation growth for cnlab), which then decides among
 * them.  Empty nodes are skipped once k candidates are known that no empty
 * node can beat (the policy's pack_bound), and the search stops at k
 * perfect fits.  A node is passed over when the job would delay a
 * reservation held there (the backfill rule, profile.c), and a member of a
 * spread gang skips the nodes its gang already took.
 *
 * Starting a job commits the allocation, adds it to the node's running
 * work (profile.c) and charges its team (order.c).  Every decision of the
 * cycle is recorded here (cnl_cyc_decide, cnl_cyc_push).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "sched/cycle-internal.h"

/* ---- decisions -------------------------------------------------------- */

int cnl_cyc_push(struct cnl_decisions *out, const struct cnl_decision *d)
{
	if (out->n == out->cap) {
		size_t cap = out->cap ? out->cap * 2 : 256;
		struct cnl_decision *nd = realloc(out->d, cap * sizeof(*nd));
		if (!nd)
			return -ENOMEM;
		out->d = nd;
		out->cap = cap;
	}
	out->d[out->n++] = *d;
	return 0;
}

int cnl_cyc_decide(struct cnl_cyc *y, uint32_t job, enum cnl_dec_kind kind,
                   enum cnl_reason why, uint32_t node, uint32_t alloc_id,
                   int64_t at, int err)
{
	struct cnl_decision d = {.kind = (uint8_t)kind,
	                         .reason = (uint8_t)why,
	                         .job = job,
	                         .node = node,
	                         .alloc_id = alloc_id,
	                         .for_job = NONE,
	                         .at_ms = at == T_INF ? -1 : at,
	                         .error = err};

	y->done[job] = 1;
	return cnl_cyc_push(y->out, &d);
}

/* ---- search ----------------------------------------------------------- */

#define TOPK_MAX 32

struct cand {
	double score;
	struct cnl_plan plan;
};

static void top_insert(struct cand *top, int *nt, int k, double score,
                       const struct cnl_plan *plan)
{
	int i;

	if (*nt == k) {
		if (score >= top[k - 1].score)
			return; /* ties keep the earlier node */
		i = k - 1;
	} else {
		i = (*nt)++;
	}
	while (i > 0 && top[i - 1].score > score) {
		top[i] = top[i - 1];
		i--;
	}
	top[i].score = score;
	top[i].plan = *plan;
}

/* Whether a member of the gang being placed already took `node`. */
static bool on_gang_node(const struct cnl_sched *s, uint32_t node)
{
	for (int i = 0; i < s->n_gang_nodes; i++)
		if (s->gang_nodes[i] == node)
			return true;
	return false;
}

/* The best node for pending job `job` now; false when none.  *conflict
 * is set when some node was passed over only for a reservation.  A member
 * of a spread gang skips the nodes its gang already took. */
bool cnl_cyc_search(struct cnl_cyc *y, uint32_t job, struct cnl_plan *ret,
                    bool *conflict)
{
	const struct cnl_sched_config *cfg = &y->s->cfg;
	const struct cnl_job *j = &y->jobs[job];
	const struct cnl_req_prep *p = &y->prep[job];
	struct cnl_cluster *c = y->c;
	struct cand top[TOPK_MAX];
	int nt = 0, k = y->s->pol->refine ? cfg->frag_candidates : 1;
	int64_t end = y->now + cnl_cyc_runtime_of(y, j);
	/* A lower bound on any empty node's score, when the policy has one. */
	double open_node =
	    !y->s->pol->score
	        ? CNL_SCORE_OPEN_NODE
	        : (y->s->pol->pack_bound ? cfg->w_pack * CNL_SCORE_OPEN_NODE
	                                 : -INFINITY);

	*conflict = false;
	y->conflict_node = NONE;
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		struct cnl_plan pl;
		if (!cnl_alloc_may_fit(c, i, p))
			continue;
		if (j->gang && j->spread && on_gang_node(y->s, i))
			continue; /* a node per member */
		if (nt == k && c->hot[i].n_allocs == 0 &&
		    open_node >= top[k - 1].score)
			continue;
		if (!cnl_alloc_plan_fast(c, p, i, &pl))
			continue;
		if (y->s->resv_head[i] != NONE &&
		    !cnl_cyc_resv_ok(y, p, &pl, end)) {
			if (!*conflict)
				y->conflict_node = i;
			*conflict = true;
			continue;
		}
		top_insert(top, &nt, k, cnl_policy_score(&y->v, j, &pl), &pl);
		if (nt == k && top[k - 1].score <= 0)
			break; /* nothing can beat k perfect fits */
	}
	if (nt == 0)
		return false;
	int best = 0;
	if (nt > 1 && y->s->pol->refine) {
		/* Refine the best few (fragmentation growth for cnlab). */
		double best_sc = 0;
		for (int i = 0; i < nt; i++) {
			double sc = cnl_policy_refine(&y->v, j, &top[i].plan,
			                              top[i].score);
			if (i == 0 || sc < best_sc) {
				best_sc = sc;
				best = i;
			}
		}
	}
	*ret = top[best].plan;
	return true;
}

/* Whether `p`, ending at `end`, would be passed over on `node` for a
 * reservation there: the search's test on that node alone. */
static bool passed_for_resv(struct cnl_cyc *y, const struct cnl_req_prep *p,
                            uint32_t node, int64_t end)
{
	struct cnl_plan pl;

	return y->s->resv_head[node] != NONE &&
	       cnl_alloc_may_fit(y->c, node, p) &&
	       cnl_alloc_plan_fast(y->c, p, node, &pl) &&
	       !cnl_cyc_resv_ok(y, p, &pl, end);
}

/* ---- starting --------------------------------------------------------- */

/* Commit job `job` by `plan`: the allocation, its run entry, its team. */
int cnl_cyc_start_job(struct cnl_cyc *y, uint32_t job,
                      const struct cnl_plan *plan, int64_t start,
                      uint32_t *ret_id)
{
	const struct cnl_job *j = &y->jobs[job];
	uint32_t id;
	int r;

	r = cnl_cyc_commit_plan(y->c, &y->prep[job], plan, &id);
	if (r < 0)
		return r;
	cnl_cyc_tmax_dirty(y, plan->node);
	r = cnl_cyc_run_add(y->s, plan->node, start + cnl_cyc_runtime_of(y, j),
	                    id, job);
	if (r < 0) {
		cnl_alloc_free(y->c, id);
		return r;
	}
	cnl_cyc_team_hold(y, j->req.project,
	                  cnl_alloc_blocks_held(y->c, cnl_alloc_get(y->c, id)));
	*ret_id = id;
	return 0;
}

/* Try to start `job` now.  1 started, 0 not, < 0 error. */
int cnl_cyc_try_start(struct cnl_cyc *y, uint32_t job, bool *conflict)
{
	const struct cnl_req_prep *p = &y->prep[job];
	/* When it would end: the search's reservation test reads nothing
	 * else of the job but its request. */
	int64_t end = y->now + cnl_cyc_runtime_of(y, &y->jobs[job]);
	struct cnl_plan plan;
	uint32_t id;
	int r;

	*conflict = false;
	if (cnl_cyc_tmax_reject(y, p) || cnl_cyc_fail_known(y, p))
		return 0;
	/* A search refused by reservations before, for no more: refused
	 * again, and for a reservation when that node still holds one up. */
	if (!y->jobs[job].gang) {
		uint32_t k = cnl_cyc_cfail_known(y, p, end);
		if (k != NONE && passed_for_resv(y, p, k, end)) {
			*conflict = true;
			return 0;
		}
	}
	if (!cnl_cyc_search(y, job, &plan, conflict)) {
		if (!*conflict)
			cnl_cyc_fail_note(y, p);
		else if (!y->jobs[job].gang)
			cnl_cyc_cfail_note(y, p, end, y->conflict_node);
		return 0;
	}
	r = cnl_cyc_start_job(y, job, &plan, y->now, &id);
	if (r < 0)
		return r;
	return cnl_cyc_decide(y, job, CNL_DEC_START,
	                      y->s->n_resv ? CNL_WHY_BACKFILLED
	                                   : CNL_WHY_STARTED,
	                      plan.node, id, y->now, 0) < 0
	           ? -ENOMEM
	           : 1;
}
