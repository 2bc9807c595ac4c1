/*
 * preempt.c - pre-emption: victims for a job that cannot start.
 *
 * Eligible victims are preemptible running jobs of a class at least
 * preempt_class_gap below the job's that have run min_run_ms; each node
 * lists its own, cheapest first by (class, work lost since the last
 * checkpoint, index).  Per node the smallest set that makes room wins,
 * then the lowest classes, then the least work lost.
 *
 * Cheap before exact: a capacity-only estimate (profile.c's cap view) of
 * the victims each node needs orders the nodes, and the exact search (on
 * the real allocator state, what-if) stops once no estimate left can beat
 * the best set found.  Victims are released for real, signalled now and
 * killed after grace_ms; the job starts then.
 */
#include <errno.h>
#include <stdlib.h>

#include "cnlab/errors.h"
#include "sched/cycle-internal.h"

#define VICTIMS_MAX 12

struct vset {
	int n;
	uint32_t job[VICTIMS_MAX];
	int max_prio;
	int64_t lost;
	uint32_t node;
};

static int64_t work_lost(const struct cnl_cyc *y, const struct cnl_job *v)
{
	int64_t since =
	    v->checkpoint_ms > v->start_ms ? v->checkpoint_ms : v->start_ms;
	return y->now > since ? y->now - since : 0;
}

static bool vset_better(const struct vset *a, const struct vset *b)
{
	if (b->n == 0)
		return true;
	if (a->n != b->n)
		return a->n < b->n;
	if (a->max_prio != b->max_prio)
		return a->max_prio < b->max_prio;
	if (a->lost != b->lost)
		return a->lost < b->lost;
	return a->node < b->node;
}

/* Does `p` fit on `node` with the victims in `pick` released? */
static bool fits_without(struct cnl_cyc *y, uint32_t node,
                         const struct cnl_req_prep *p, const uint32_t *jobs,
                         int n, struct cnl_cyc_saved *sv)
{
	struct cnl_plan pl;
	bool ok = true;

	for (int i = 0; i < n && ok; i++)
		ok =
		    cnl_cyc_save_free(y->c, sv, y->jobs[jobs[i]].alloc_id) == 0;
	ok = ok && cnl_alloc_plan_fast(y->c, p, node, &pl);
	cnl_cyc_restore_all(y->c, sv);
	return ok;
}

static int cmp_victim_ctx_prio(const struct cnl_cyc *y, uint32_t a, uint32_t b)
{
	const struct cnl_job *x = &y->jobs[a], *z = &y->jobs[b];
	int64_t la, lb;

	if (x->prio != z->prio)
		return x->prio < z->prio ? -1 : 1;
	la = work_lost(y, x);
	lb = work_lost(y, z);
	if (la != lb)
		return la < lb ? -1 : 1;
	return (a > b) - (a < b);
}

/* A node's victims as capacity alone sees them: the cheapest prefix of
 * its candidates that makes room.  A lower bound on the exact answer. */
struct cnl_cyc_vest {
	uint32_t node;
	int m, k, max_prio;
	int64_t lost;
	uint32_t cand[VICTIMS_MAX];
};

static int cmp_vest(const void *a, const void *b)
{
	const struct cnl_cyc_vest *x = a, *z = b;

	if (x->k != z->k)
		return x->k < z->k ? -1 : 1;
	if (x->max_prio != z->max_prio)
		return x->max_prio < z->max_prio ? -1 : 1;
	if (x->lost != z->lost)
		return x->lost < z->lost ? -1 : 1;
	return (x->node > z->node) - (x->node < z->node);
}

static int cmp_vlb(const void *a, const void *b)
{
	const struct cnl_cyc_vlb *x = a, *z = b;

	if (x->prio != z->prio)
		return x->prio < z->prio ? -1 : 1;
	if (x->lost != z->lost)
		return x->lost < z->lost ? -1 : 1;
	return (x->node > z->node) - (x->node < z->node);
}

/* The running jobs pre-emption may take this cycle, per node, cheapest
 * first. */
int cnl_cyc_setup_victims(struct cnl_cyc *y)
{
	const struct cnl_sched_config *cfg = &y->s->cfg;
	size_t total = 0;

	y->victim_nodes = malloc((y->c->n_nodes + 1) * sizeof(uint32_t));
	y->vl_off = malloc((y->c->n_nodes + 2) * sizeof(uint32_t));
	y->vl_jobs = malloc((y->n_jobs + 1) * sizeof(uint32_t));
	if (!y->victim_nodes || !y->vl_off || !y->vl_jobs)
		return -ENOMEM;
	for (uint32_t n = 0; n < y->c->n_nodes; n++) {
		const struct cnl_run_vec *rv = &y->s->runs[n];
		size_t first = total;
		for (uint32_t i = 0; i < rv->n; i++) {
			uint32_t vj = rv->v[i].job;
			if (vj == NONE)
				continue;
			const struct cnl_job *v = &y->jobs[vj];
			if (v->state != CNL_JOB_RUNNING || !v->preemptible ||
			    v->prio > CNL_PRIO_CRITICAL ||
			    y->now - v->start_ms < cfg->min_run_ms)
				continue;
			y->victims_by_prio[v->prio]++;
			/* Insertion by (class, work lost, index). */
			size_t q = total++;
			while (q > first && cmp_victim_ctx_prio(
			                        y, y->vl_jobs[q - 1], vj) > 0) {
				y->vl_jobs[q] = y->vl_jobs[q - 1];
				q--;
			}
			y->vl_jobs[q] = vj;
		}
		if (total > first) {
			y->vl_off[y->n_victim_nodes] = (uint32_t)first;
			y->victim_nodes[y->n_victim_nodes++] = n;
		}
	}
	y->vl_off[y->n_victim_nodes] = (uint32_t)total;
	/* Each node's cheapest victim bounds every estimate there. */
	size_t nv = y->n_victim_nodes;
	y->vlb = malloc((nv + 1) * sizeof(*y->vlb));
	y->vest = malloc((nv + 1) * sizeof(*y->vest));
	y->vheap = malloc((nv + 1) * sizeof(*y->vheap));
	if (!y->vlb || !y->vest || !y->vheap)
		return -ENOMEM;
	for (size_t vn = 0; vn < nv; vn++) {
		const struct cnl_job *v = &y->jobs[y->vl_jobs[y->vl_off[vn]]];
		y->vlb[vn] = (struct cnl_cyc_vlb){.lost = work_lost(y, v),
		                                  .node = y->victim_nodes[vn],
		                                  .vn = (uint32_t)vn,
		                                  .prio = v->prio};
	}
	qsort(y->vlb, nv, sizeof(*y->vlb), cmp_vlb);
	return 0;
}

/* The smallest victim set on `node` for `job`, by the order of cand[]
 * (cheapest first); false when even all of them are not enough. */
static bool node_victims(struct cnl_cyc *y, uint32_t node,
                         const struct cnl_req_prep *p, const uint32_t *cand,
                         int m, int min_size, int max_size, struct vset *ret,
                         struct cnl_cyc_saved *sv)
{
	uint32_t pick[VICTIMS_MAX];
	int idx[VICTIMS_MAX];

	if (!fits_without(y, node, p, cand, m, sv))
		return false;
	for (int k = min_size > 1 ? min_size : 1; k <= m && k <= max_size;
	     k++) {
		for (int i = 0; i < k; i++)
			idx[i] = i;
		for (;;) {
			for (int i = 0; i < k; i++)
				pick[i] = cand[idx[i]];
			if (fits_without(y, node, p, pick, k, sv)) {
				ret->n = k;
				ret->node = node;
				ret->max_prio = 0;
				ret->lost = 0;
				for (int i = 0; i < k; i++) {
					const struct cnl_job *v =
					    &y->jobs[pick[i]];
					ret->job[i] = pick[i];
					if (v->prio > ret->max_prio)
						ret->max_prio = v->prio;
					ret->lost += work_lost(y, v);
				}
				return true;
			}
			/* Next combination in lexicographic order. */
			int i = k - 1;
			while (i >= 0 && idx[i] == m - k + i)
				i--;
			if (i < 0)
				break;
			idx[i]++;
			for (int q = i + 1; q < k; q++)
				idx[q] = idx[q - 1] + 1;
		}
	}
	return false;
}

/* Can a set of k victims (worst class max_prio, work lost `lost`) beat
 * `best`?  Monotone in cmp_vest()'s order: once an estimate cannot, no
 * later one can. */
static bool may_beat(const struct vset *best, int k, int max_prio, int64_t lost)
{
	if (!best->n || k < best->n)
		return true;
	if (k > best->n)
		return false;
	return max_prio < best->max_prio ||
	       (max_prio == best->max_prio && lost < best->lost);
}

/* Node `vn`'s estimate for `job` into `e`: its unused candidates of low
 * enough class, cheapest first, and the cheapest prefix that frees
 * enough by capacity alone.  False when the node cannot help. */
static bool node_estimate(struct cnl_cyc *y, uint32_t vn, uint32_t job,
                          struct cnl_cyc_vest *e)
{
	const struct cnl_sched_config *cfg = &y->s->cfg;
	const struct cnl_req_prep *p = &y->prep[job];
	int prio = y->jobs[job].prio;
	uint32_t node = y->victim_nodes[vn];
	int m = 0;

	if (!cnl_cyc_node_could_host(y, node, p))
		return false;
	/* The node's list is cheapest first and by class: take the unused
	 * ones of low enough class. */
	for (uint32_t i = y->vl_off[vn];
	     i < y->vl_off[vn + 1] && m < VICTIMS_MAX; i++) {
		uint32_t vj = y->vl_jobs[i];
		if (y->jobs[vj].prio + cfg->preempt_class_gap > prio)
			break;
		if (!y->victim[vj])
			e->cand[m++] = vj;
	}
	if (m == 0)
		return false;
	struct cnl_cyc_cap_view cv;
	int need = cnl_cyc_cap_view_init(y, node, p, false, &cv);
	e->node = node;
	e->m = m;
	e->k = 0;
	e->max_prio = 0;
	e->lost = 0;
	for (int i = 0; i < m && !e->k; i++) {
		const struct cnl_job *v = &y->jobs[e->cand[i]];
		cnl_cyc_cap_view_release(y->c, &cv, v->alloc_id);
		if (v->prio > e->max_prio)
			e->max_prio = v->prio;
		e->lost += work_lost(y, v);
		if (cnl_cyc_cap_fits(&cv, &p->req, need))
			e->k = i + 1;
	}
	return e->k != 0;
}

/* A min-heap of estimates (indices into y->vest) by cmp_vest(). */
static void vheap_push(struct cnl_cyc *y, size_t *n, uint32_t idx)
{
	uint32_t *h = y->vheap;
	size_t i = (*n)++;

	while (i > 0) {
		size_t up = (i - 1) / 2;
		if (cmp_vest(&y->vest[h[up]], &y->vest[idx]) <= 0)
			break;
		h[i] = h[up];
		i = up;
	}
	h[i] = idx;
}

static uint32_t vheap_pop(struct cnl_cyc *y, size_t *n)
{
	uint32_t *h = y->vheap, top = h[0], last = h[--*n];
	size_t i = 0;

	for (;;) {
		size_t l = 2 * i + 1, mi = l;
		if (l >= *n)
			break;
		if (l + 1 < *n &&
		    cmp_vest(&y->vest[h[l + 1]], &y->vest[h[l]]) < 0)
			mi = l + 1;
		if (cmp_vest(&y->vest[last], &y->vest[h[mi]]) <= 0)
			break;
		h[i] = h[mi];
		i = mi;
	}
	if (*n)
		h[i] = last;
	return top;
}

/* Pre-empt for `job` if victims exist.  1 done, 0 no, < 0 error.  Nodes
 * are examined in order of their capacity-only estimate, and the exact
 * search stops once no estimate left can beat the best set found.  The
 * estimates are made lazily: a node's cheapest victim at the cycle's
 * start (y->vlb, sorted) bounds its estimate from below, so a node is
 * estimated only once every estimate made is above its bound, and none
 * once the bound cannot beat the best set.  The order in which nodes are
 * examined, and so the result, is that of estimating them all and
 * sorting. */
int cnl_cyc_try_preempt(struct cnl_cyc *y, uint32_t job)
{
	const struct cnl_sched_config *cfg = &y->s->cfg;
	const struct cnl_job *j = &y->jobs[job];
	const struct cnl_req_prep *p = &y->prep[job];
	struct cnl_cluster *c = y->c;
	struct vset best = {0}, vs;
	struct cnl_cyc_saved sv = {0};
	size_t n_est = 0, n_heap = 0, w = 0;
	int r;

	size_t avail = 0;
	for (int q = 0; q + cfg->preempt_class_gap <= j->prio; q++)
		avail += y->victims_by_prio[q];
	if (!avail)
		return 0;
	uint64_t pk =
	    cnl_cyc_fail_key(p) ^ (0x51ed270b27b5aa3bULL * (j->prio + 1u));
	if (cnl_cyc_fail_known_in(y->pfail, pk | 1, p))
		return 0;
	for (;;) {
		/* Estimate nodes until the least estimate made is below
		 * every bound left. */
		while (w < y->n_victim_nodes) {
			const struct cnl_cyc_vlb *b = &y->vlb[w];
			struct cnl_cyc_vest lb = {.node = b->node,
			                          .k = 1,
			                          .max_prio = b->prio,
			                          .lost = b->lost};
			/* Nor any after it: no better bound, or (the bounds
			 * by class) no victim of a class low enough. */
			if (!may_beat(&best, 1, b->prio, b->lost) ||
			    b->prio + cfg->preempt_class_gap > j->prio) {
				w = y->n_victim_nodes;
				break;
			}
			if (n_heap && cmp_vest(&y->vest[y->vheap[0]], &lb) < 0)
				break;
			w++;
			if (node_estimate(y, b->vn, job, &y->vest[n_est]))
				vheap_push(y, &n_heap, (uint32_t)n_est++);
		}
		if (!n_heap)
			break;
		const struct cnl_cyc_vest *e = &y->vest[vheap_pop(y, &n_heap)];
		if (!may_beat(&best, e->k, e->max_prio, e->lost))
			break;
		if (node_victims(y, e->node, p, e->cand, e->m, e->k,
		                 best.n ? best.n : VICTIMS_MAX, &vs, &sv) &&
		    vset_better(&vs, &best))
			best = vs;
	}
	free(sv.a);
	if (best.n == 0) {
		cnl_cyc_fail_note_in(y->pfail, pk | 1, p);
		return 0;
	}
	/* Release the victims for real and start the job after the grace. */
	int64_t kill = y->now + cfg->grace_ms;
	for (int i = 0; i < best.n; i++) {
		const struct cnl_job *v = &y->jobs[best.job[i]];
		const struct cnl_alloc *a = cnl_alloc_get(c, v->alloc_id);
		int64_t held = a ? cnl_alloc_blocks_held(c, a) : 0;
		cnl_cyc_run_del(y->s, best.node, v->alloc_id);
		if ((r = cnl_alloc_free(c, v->alloc_id)) < 0)
			return r;
		cnl_cyc_team_hold(y, v->req.project, -held);
		y->victim[best.job[i]] = 1;
		y->victims_by_prio[v->prio]--;
		struct cnl_decision d = {.kind = CNL_DEC_PREEMPT,
		                         .reason = CNL_WHY_PREEMPTED,
		                         .job = best.job[i],
		                         .node = best.node,
		                         .alloc_id = v->alloc_id,
		                         .for_job = job,
		                         .at_ms = y->now,
		                         .kill_ms = kill};
		if (cnl_cyc_push(y->out, &d) < 0)
			return -ENOMEM;
	}
	cnl_cyc_fail_clear(y);
	cnl_cyc_bounds_stale(y);
	cnl_cyc_tmax_dirty(y, best.node);
	cnl_cyc_fit_grown(y, best.node);
	struct cnl_plan plan;
	uint32_t id;
	if (!cnl_alloc_plan_fast(c, p, best.node, &plan))
		return -EINVAL; /* cannot happen: fits_without said so */
	if ((r = cnl_cyc_start_job(y, job, &plan, kill, &id)) < 0)
		return r;
	return cnl_cyc_decide(y, job, CNL_DEC_START, CNL_WHY_AFTER_PREEMPTION,
	                      best.node, id, kill, 0) < 0
	           ? -ENOMEM
	           : 1;
}
