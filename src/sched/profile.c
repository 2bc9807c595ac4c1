/*
 * profile.c - the availability profile in time: the running work of each
 * node with its expected end, the reservations made this cycle, the
 * earliest time a blocked job could start, and the backfill rule.
 *
 * What-if on the real state.  Reservations ("when could this job start on
 * node n?"), the backfill rule ("does reservation R still fit at its time
 * if this job starts now?") and pre-emption ("which victims make room?")
 * are answered by releasing allocations with cnl_alloc_free(), asking the
 * allocator, and putting them back with cnl_alloc_restore() in reverse
 * order (cnl_cyc_save_free, cnl_cyc_restore_all).  The allocator's exact
 * rules (MIG geometry, tenant boundaries) thus apply to future time too,
 * with no second model.
 *
 * Cheap before exact.  The earliest start of a blocked job is bounded from
 * below per node by a capacity-only replay (struct cnl_cyc_cap_view: CPU,
 * memory and GPU blocks return as work ends, without the allocator's
 * placement rules), cached per shape: placements only raise the true
 * bounds, so a cached one stays a lower bound.  The exact replay then runs
 * on nodes in order of that bound until the bound passes the best time
 * found: usually the first node or two settle it.  The incremental cycle
 * also keeps, per shape, a min-tree of each node's bound raised to its
 * first instant free of reservations (tree_next, free_at): the scan goes
 * straight to the next node in that order that could still beat the best
 * time, skipping the nodes whose reservations rule them out.
 *
 * Reservations on one node never overlap in time (a conservative rule);
 * a job may start now beside a reservation only if it ends before it or
 * leaves the reserved job room at its time (cnl_cyc_resv_ok).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "sched/cycle-internal.h"

/* ---- running work per node ------------------------------------------- */

int cnl_cyc_run_add(struct cnl_sched *s, uint32_t node, int64_t end,
                    uint32_t alloc_id, uint32_t job)
{
	struct cnl_run_vec *rv = &s->runs[node];
	uint32_t i;

	if (rv->n == rv->cap) {
		uint32_t cap = rv->cap ? rv->cap * 2 : 8;
		struct cnl_run *nv = realloc(rv->v, cap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		rv->v = nv;
		rv->cap = cap;
	}
	/* Kept sorted by (end, alloc id). */
	for (i = rv->n; i > 0; i--) {
		const struct cnl_run *q = &rv->v[i - 1];
		if (q->end_ms < end ||
		    (q->end_ms == end && q->alloc_id < alloc_id))
			break;
		rv->v[i] = rv->v[i - 1];
	}
	rv->v[i] =
	    (struct cnl_run){.end_ms = end, .alloc_id = alloc_id, .job = job};
	rv->n++;
	return 0;
}

void cnl_cyc_run_del(struct cnl_sched *s, uint32_t node, uint32_t alloc_id)
{
	struct cnl_run_vec *rv = &s->runs[node];

	for (uint32_t i = 0; i < rv->n; i++)
		if (rv->v[i].alloc_id == alloc_id) {
			memmove(&rv->v[i], &rv->v[i + 1],
			        (rv->n - i - 1) * sizeof(rv->v[0]));
			rv->n--;
			return;
		}
}

int cnl_cyc_setup_runs(struct cnl_cyc *y)
{
	struct cnl_sched *s = y->s;
	uint32_t nn = y->c->n_nodes;

	if (s->n_runs < nn) {
		struct cnl_run_vec *nr = realloc(s->runs, nn * sizeof(*nr));
		if (!nr)
			return -ENOMEM;
		memset(nr + s->n_runs, 0, (nn - s->n_runs) * sizeof(*nr));
		s->runs = nr;
		s->n_runs = nn;
		int64_t *ni = realloc(s->idle_since, nn * sizeof(*ni));
		if (!ni)
			return -ENOMEM;
		memset(ni + s->n_idle, 0, (nn - s->n_idle) * sizeof(*ni));
		s->idle_since = ni;
		s->n_idle = nn;
	}
	uint32_t *nh = realloc(s->resv_head, (nn + 1) * sizeof(*nh));
	if (!nh)
		return -ENOMEM;
	s->resv_head = nh;
	for (uint32_t i = 0; i < nn; i++) {
		s->runs[i].n = 0;
		s->resv_head[i] = NONE;
	}
	for (size_t i = 0; i < y->n_jobs; i++) {
		const struct cnl_job *j = &y->jobs[i];
		const struct cnl_alloc *a;
		int64_t end;
		if (j->state != CNL_JOB_RUNNING)
			continue;
		a = cnl_alloc_get(y->c, j->alloc_id);
		if (!a)
			return -EINVAL;
		end = j->start_ms + cnl_cyc_runtime_of(y, j);
		if (end <= y->now)
			end = y->now + 1; /* overdue: expected any moment */
		int r =
		    cnl_cyc_run_add(s, a->node, end, j->alloc_id, (uint32_t)i);
		if (r < 0)
			return -ENOMEM;
	}
	return 0;
}

/* ---- what-if ---------------------------------------------------------- */

int cnl_cyc_save_free(struct cnl_cluster *c, struct cnl_cyc_saved *sv,
                      uint32_t id)
{
	const struct cnl_alloc *a = cnl_alloc_get(c, id);

	if (!a)
		return -CNL_ENOALLOC;
	if (sv->n == sv->cap) {
		int cap = sv->cap ? sv->cap * 2 : 16;
		struct cnl_alloc *na =
		    realloc(sv->a, (size_t)cap * sizeof(*na));
		if (!na)
			return -ENOMEM;
		sv->a = na;
		sv->cap = cap;
	}
	sv->a[sv->n++] = *a;
	return cnl_alloc_free(c, id);
}

void cnl_cyc_restore_all(struct cnl_cluster *c, struct cnl_cyc_saved *sv)
{
	while (sv->n > 0) {
		int r = cnl_alloc_restore(c, &sv->a[--sv->n]);
		(void)r; /* LIFO restores of what was just freed succeed */
	}
}

/*
 * The earliest time >= t_from at which job `p` fits on `node` by the ends
 * of the node's running work, on the real allocator state; T_INF if never
 * (within the work known to end).  Leaves the cluster as it was.
 */
static int64_t replay_fit(struct cnl_cyc *y, uint32_t node,
                          const struct cnl_req_prep *p, int64_t t_from,
                          struct cnl_cyc_saved *sv)
{
	const struct cnl_run_vec *rv = &y->s->runs[node];
	struct cnl_plan pl;
	int64_t t = T_INF;
	uint32_t i = 0;

	while (i < rv->n && rv->v[i].end_ms <= t_from)
		if (cnl_cyc_save_free(y->c, sv, rv->v[i++].alloc_id) < 0)
			goto out;
	if (cnl_alloc_plan_fast(y->c, p, node, &pl)) {
		t = t_from;
		goto out;
	}
	while (i < rv->n) {
		int64_t end = rv->v[i].end_ms;
		while (i < rv->n && rv->v[i].end_ms == end) {
			uint32_t id = rv->v[i++].alloc_id;
			if (cnl_cyc_save_free(y->c, sv, id) < 0)
				goto out;
		}
		if (cnl_alloc_plan_fast(y->c, p, node, &pl)) {
			t = end;
			break;
		}
	}
out:
	cnl_cyc_restore_all(y->c, sv);
	return t;
}

/* Reservations on `node` overlapping [t0, t1). */
static const struct cnl_resv *
resv_overlap(const struct cnl_sched *s, uint32_t node, int64_t t0, int64_t t1)
{
	for (uint32_t i = s->resv_head[node]; i != NONE; i = s->resv[i].next) {
		const struct cnl_resv *r = &s->resv[i];
		if (r->t0 < t1 && t0 < r->t1)
			return r;
	}
	return NULL;
}

/*
 * node_earliest() in one sweep (the incremental cycle's): the same answer,
 * but each time a reservation pushes the start later the replay goes on
 * from where it stopped instead of putting the node back and releasing
 * its work again from the start.  The state after releasing the node's
 * first k pieces of work in order is the same either way, since a restore
 * undoes a release exactly.
 */
static int64_t node_earliest_sweep(struct cnl_cyc *y, uint32_t node,
                                   const struct cnl_req_prep *p, int64_t rt,
                                   int64_t t, struct cnl_cyc_saved *sv)
{
	const struct cnl_run_vec *rv = &y->s->runs[node];
	struct cnl_plan pl;
	int64_t res = T_INF;
	uint32_t i = 0;

	for (size_t guard = 0; guard <= y->s->n_resv; guard++) {
		const struct cnl_resv *r;
		int64_t fit = T_INF;

		while (i < rv->n && rv->v[i].end_ms <= t)
			if (cnl_cyc_save_free(y->c, sv, rv->v[i++].alloc_id) <
			    0)
				goto out;
		if (cnl_alloc_plan_fast(y->c, p, node, &pl))
			fit = t;
		while (fit == T_INF && i < rv->n) {
			int64_t end = rv->v[i].end_ms;
			while (i < rv->n && rv->v[i].end_ms == end)
				if (cnl_cyc_save_free(y->c, sv,
				                      rv->v[i++].alloc_id) < 0)
					goto out;
			if (cnl_alloc_plan_fast(y->c, p, node, &pl))
				fit = end;
		}
		if (fit == T_INF)
			goto out;
		r = resv_overlap(y->s, node, fit, fit + rt);
		if (!r) {
			res = fit;
			goto out;
		}
		t = r->t1;
	}
out:
	cnl_cyc_restore_all(y->c, sv);
	return res;
}

/* Earliest start on `node` that also keeps clear of the reservations
 * already there (a conservative rule: reservations on one node never
 * overlap in time). */
static int64_t node_earliest(struct cnl_cyc *y, uint32_t node,
                             const struct cnl_req_prep *p, int64_t rt,
                             int64_t lower_bound, struct cnl_cyc_saved *sv)
{
	/* Nothing fits before the lower bound: start the replay there. */
	int64_t t = lower_bound > y->now ? lower_bound : y->now;

	if (y->s->inc)
		return node_earliest_sweep(y, node, p, rt, t, sv);
	for (size_t guard = 0; guard <= y->s->n_resv; guard++) {
		const struct cnl_resv *r;
		t = replay_fit(y, node, p, t, sv);
		if (t == T_INF)
			return T_INF;
		r = resv_overlap(y->s, node, t, t + rt);
		if (!r)
			return t;
		t = r->t1;
	}
	return T_INF;
}

/* ---- capacity-only lower bounds ------------------------------------- */

bool cnl_cyc_cap_fits(const struct cnl_cyc_cap_view *cv,
                      const struct cnl_alloc_req *r, int need)
{
	int empty = 0;

	if (cv->cpu < r->cpu_milli || cv->mem < r->mem_mib || cv->slots < 1)
		return false;
	if (r->kind == CNL_REQ_CPU)
		return true;
	for (int g = 0; g < cv->n_gpus; g++) {
		if (r->kind != CNL_REQ_WHOLE && cv->freeb[g] >= need)
			return true;
		empty += cv->freeb[g] >= CNL_BLOCKS_PER_GPU;
	}
	return r->kind == CNL_REQ_WHOLE && empty >= r->gpus;
}

/* The node's free capacity as the capacity-only reasoning sees it, and
 * the GPU blocks `p` needs on one GPU. */
int cnl_cyc_cap_view_init(const struct cnl_cyc *y, uint32_t node,
                          const struct cnl_req_prep *p, bool gpu_only,
                          struct cnl_cyc_cap_view *cv)
{
	const struct cnl_cluster *c = y->c;
	const struct cnl_node *n = &c->nodes[node];
	const struct cnl_alloc_req *r = &p->req;

	cv->cpu = gpu_only ? INT64_MAX / 2
	                   : n->cpu_total - n->cpu_used - n->cpu_others;
	cv->mem = gpu_only ? INT64_MAX / 2
	                   : n->mem_total - n->mem_used - n->mem_others;
	cv->slots = c->hot[node].slots_free;
	cv->n_gpus = n->n_gpus;
	for (int g = 0; g < n->n_gpus; g++) {
		cv->freeb[g] = cnl_gpu_free_blocks(c, node, g);
		cv->left[g] = n->gpus[g].n_allocs;
	}
	if (r->kind == CNL_REQ_BLOCKS)
		return r->blocks;
	if (r->kind == CNL_REQ_MIG && p->prof[n->gpu_type] >= 0)
		return CNL_BLOCKS_PER_GPU *
		       c->cat->types[n->gpu_type]
		           .mig[p->prof[n->gpu_type]]
		           .compute /
		       CNL_MIG_COMPUTE_SLICES;
	return 0;
}

/* Give allocation `id` back to the view. */
void cnl_cyc_cap_view_release(const struct cnl_cluster *c,
                              struct cnl_cyc_cap_view *cv, uint32_t id)
{
	const struct cnl_alloc *a = cnl_alloc_get(c, id);

	if (!a)
		return;
	cv->cpu += a->cpu_milli;
	cv->mem += a->mem_mib;
	cv->slots++;
	if (a->kind == CNL_PLACE_WHOLE) {
		for (int g = 0; g < cv->n_gpus; g++)
			if (a->gpu_mask >> g & 1) {
				cv->freeb[g] = CNL_BLOCKS_PER_GPU;
				cv->left[g] = 0;
			}
	} else if (a->kind != CNL_PLACE_CPU) {
		/* Rounding of MIG shares must not make an empty GPU look
		 * less than empty. */
		cv->freeb[a->gpu] += cnl_alloc_blocks_held(c, a);
		if (--cv->left[a->gpu] <= 0)
			cv->freeb[a->gpu] = CNL_BLOCKS_PER_GPU;
	}
}

/* A capacity-only lower bound on node_earliest(): CPU, memory and GPU
 * blocks return as work ends, without the allocator's placement rules. */
static int64_t node_lower_bound(const struct cnl_cyc *y, uint32_t node,
                                const struct cnl_req_prep *p, bool gpu_only)
{
	const struct cnl_run_vec *rv = &y->s->runs[node];
	struct cnl_cyc_cap_view cv;
	int need = cnl_cyc_cap_view_init(y, node, p, gpu_only, &cv);
	uint32_t i = 0;

	if (cnl_cyc_cap_fits(&cv, &p->req, need))
		return y->now;
	while (i < rv->n) {
		int64_t end = rv->v[i].end_ms;
		for (; i < rv->n && rv->v[i].end_ms == end; i++)
			cnl_cyc_cap_view_release(y->c, &cv, rv->v[i].alloc_id);
		if (cnl_cyc_cap_fits(&cv, &p->req, need))
			return end;
	}
	return T_INF;
}

static int cmp_lb(const void *a, const void *b)
{
	const struct cnl_cyc_lb *x = a, *y = b;
	if (x->lb != y->lb)
		return x->lb < y->lb ? -1 : 1;
	return (x->node > y->node) - (x->node < y->node);
}

/* The min-tree of a bounds entry (struct cnl_cyc_lb_cache): leaves
 * max(lb, now) until the node's free instant is known. */
static int tree_build(const struct cnl_cyc *y, struct cnl_cyc_lb_cache *lc)
{
	uint32_t p2 = 1;

	while (p2 < lc->n)
		p2 *= 2;
	lc->p2 = p2;
	lc->mt = malloc(2 * (size_t)p2 * sizeof(*lc->mt));
	if (!lc->mt)
		return -ENOMEM;
	for (uint32_t k = 0; k < p2; k++)
		lc->mt[p2 + k] = k >= lc->n             ? T_INF
		                 : lc->v[k].lb > y->now ? lc->v[k].lb
		                                        : y->now;
	for (uint32_t i = p2 - 1; i >= 1; i--)
		lc->mt[i] = lc->mt[2 * i] < lc->mt[2 * i + 1]
		                ? lc->mt[2 * i]
		                : lc->mt[2 * i + 1];
	return 0;
}

/* Raise leaf `k` of the tree to `v`. */
static void tree_raise(struct cnl_cyc_lb_cache *lc, uint32_t k, int64_t v)
{
	uint32_t i = lc->p2 + k;

	if (lc->mt[i] >= v)
		return;
	lc->mt[i] = v;
	for (i /= 2; i >= 1; i /= 2) {
		int64_t m = lc->mt[2 * i] < lc->mt[2 * i + 1]
		                ? lc->mt[2 * i]
		                : lc->mt[2 * i + 1];
		if (lc->mt[i] == m)
			break;
		lc->mt[i] = m;
	}
}

/* The first position from `k` on whose leaf is under `x`, or lc->n: the
 * next node of the scan that could start before `x`. */
static uint32_t tree_next(const struct cnl_cyc_lb_cache *lc, uint32_t k,
                          int64_t x)
{
	uint32_t i;

	if (!lc->mt || k >= lc->n)
		return k;
	for (i = lc->p2 + k;;) {
		if (lc->mt[i] < x) {
			while (i < lc->p2)
				i = lc->mt[2 * i] < x ? 2 * i : 2 * i + 1;
			return i - lc->p2 < lc->n ? i - lc->p2 : lc->n;
		}
		while (i & 1)
			i /= 2;
		if (!i)
			return lc->n;
		i++;
	}
}

/* Node `i`'s entry for the shape of `p` into *e: false when the shape
 * can never start there (down, no GPU of its types, too small). */
static bool node_bound(const struct cnl_cyc *y, uint32_t i,
                       const struct cnl_req_prep *p, struct cnl_cyc_lb *e)
{
	const struct cnl_node *n = &y->c->nodes[i];

	if (n->state != CNL_NODE_UP)
		return false;
	if (p->req.kind != CNL_REQ_CPU &&
	    (!n->n_gpus || !(p->type_ok >> n->gpu_type & 1)))
		return false;
	int64_t lb = node_lower_bound(y, i, p, true);
	if (lb == T_INF)
		return false;
	/* The shape's part of cnl_cyc_node_could_host(): with no CPU and
	 * memory asked, only the node's size is left to test. */
	struct cnl_req_prep shape = *p;
	shape.req.cpu_milli = shape.req.mem_mib = 0;
	bool ok = cnl_cyc_node_could_host(y, i, &shape);
	*e = (struct cnl_cyc_lb){.lb = lb,
	                         .node = i,
	                         .cpu_total = ok ? n->cpu_total : -1,
	                         .mem_total = ok ? n->mem_total : -1};
	return true;
}

static void lb_cache_free(struct cnl_cyc_lb_cache *e)
{
	free(e->v);
	free(e->mt);
	free(e->vers);
}

/* The entry for `key` that pre-emption set aside, taken out of
 * y->lbs; false when there is none. */
static bool stale_take(struct cnl_cyc *y, uint64_t key,
                       struct cnl_cyc_lb_cache *ret)
{
	for (size_t i = 0; i < y->n_lbs; i++)
		if (y->lbs[i].key == key) {
			*ret = y->lbs[i];
			y->lbs[i] = y->lbs[--y->n_lbs];
			return true;
		}
	return false;
}

/* The sorted lower bounds for the shape of `p` (see struct cnl_cyc_lb_cache);
 * NULL on allocation failure.  Made again after pre-emption from the entry
 * set aside: the nodes whose version moved since (the node pre-empted on,
 * and those work started on) are bounded again, the others' entries kept
 * (a node's bound reads its own state only), then sorted as a fresh one:
 * the same entry as made from scratch, without a replay per node. */
static struct cnl_cyc_lb_cache *bounds(struct cnl_cyc *y,
                                       const struct cnl_req_prep *p)
{
	uint64_t key = cnl_cyc_shape_key(p, false);
	struct cnl_cyc_lb_cache tmp = {.key = key}, old;
	struct cnl_cluster *c = y->c;
	bool again;

	for (size_t i = 0; i < y->n_lbc; i++)
		if (y->lbc[i].key == key)
			return &y->lbc[i];
	again = y->nver && stale_take(y, key, &old);
	tmp.v = malloc((c->n_nodes + 1) * sizeof(*tmp.v));
	if (!tmp.v) {
		if (again)
			lb_cache_free(&old);
		return NULL;
	}
	if (again) {
		for (uint32_t k = 0; k < old.n; k++) {
			const struct cnl_cyc_lb *e = &old.v[k];
			if (old.vers[e->node] == y->nver[e->node])
				tmp.v[tmp.n++] = (struct cnl_cyc_lb){
				    .lb = e->lb,
				    .node = e->node,
				    .cpu_total = e->cpu_total,
				    .mem_total = e->mem_total};
		}
		for (uint32_t i = 0; i < c->n_nodes; i++) {
			if (old.vers[i] == y->nver[i])
				continue;
			old.vers[i] = y->nver[i];
			if (node_bound(y, i, p, &tmp.v[tmp.n]))
				tmp.n++;
		}
		tmp.vers = old.vers;
		old.vers = NULL;
		lb_cache_free(&old);
	} else {
		for (uint32_t i = 0; i < c->n_nodes; i++)
			if (node_bound(y, i, p, &tmp.v[tmp.n]))
				tmp.n++;
		if (y->nver) {
			tmp.vers = malloc((c->n_nodes + 1) * sizeof(*tmp.vers));
			if (!tmp.vers) {
				free(tmp.v);
				return NULL;
			}
			memcpy(tmp.vers, y->nver,
			       c->n_nodes * sizeof(*tmp.vers));
		}
	}
	qsort(tmp.v, tmp.n, sizeof(*tmp.v), cmp_lb);
	if (y->rver && tree_build(y, &tmp) < 0) {
		lb_cache_free(&tmp);
		return NULL;
	}
	if (y->n_lbc == LBC_MAX) {
		/* Full: recycle the oldest entry (a summary may have read
		 * it: a recomputed bound may differ). */
		y->sum_gen++;
		lb_cache_free(&y->lbc[0]);
		memmove(&y->lbc[0], &y->lbc[1],
		        (LBC_MAX - 1) * sizeof(y->lbc[0]));
		y->n_lbc--;
	}
	y->lbc[y->n_lbc] = tmp;
	return &y->lbc[y->n_lbc++];
}

void cnl_cyc_bounds_clear(struct cnl_cyc *y)
{
	for (size_t i = 0; i < y->n_lbc; i++)
		lb_cache_free(&y->lbc[i]);
	y->n_lbc = 0;
	for (size_t i = 0; i < y->n_lbs; i++)
		lb_cache_free(&y->lbs[i]);
	y->n_lbs = 0;
	free(y->lbs);
	y->lbs = NULL;
	y->sum_gen++;
	/* The cycle ends (or, in the from-scratch cycle, which keeps no fit
	 * memory, capacity grew). */
	cnl_cyc_fit_done(y);
}

void cnl_cyc_bounds_stale(struct cnl_cyc *y)
{
	if (!y->nver ||
	    (!y->lbs && !(y->lbs = calloc(LBC_MAX, sizeof(*y->lbs))))) {
		cnl_cyc_bounds_clear(y);
		return;
	}
	for (size_t i = 0; i < y->n_lbc; i++) {
		struct cnl_cyc_lb_cache *e = &y->lbc[i], dup;

		/* One set aside per shape: an older one of the key goes. */
		if (stale_take(y, e->key, &dup))
			lb_cache_free(&dup);
		if (y->n_lbs == LBC_MAX) {
			lb_cache_free(&y->lbs[0]);
			y->lbs[0] = y->lbs[--y->n_lbs];
		}
		y->lbs[y->n_lbs++] = *e;
	}
	y->n_lbc = 0;
	y->sum_gen++;
	/* The fit memory: only the grown node's times go
	 * (cnl_cyc_fit_grown). */
}

void cnl_cyc_fit_grown(struct cnl_cyc *y, uint32_t node)
{
	if (y->gver)
		y->gver[node] = y->nver[node];
}

/* ---- the fit memory --------------------------------------------------- */

void cnl_cyc_fit_done(struct cnl_cyc *y)
{
	struct cnl_sched *s = y->s;

	for (size_t i = 0; s->fit && i < s->fit_cap; i++)
		s->fit[i].key = 0;
}

void cnl_sched_fit_free(struct cnl_sched *s)
{
	for (size_t i = 0; s->fit && i < s->fit_cap; i++) {
		free(s->fit[i].v);
	}
	free(s->fit);
	s->fit = NULL;
	s->fit_cap = 0;
	s->fit_nn = 0;
}

/* Everything the allocator reads of a request (not the profile's name:
 * prof holds what it resolved to). */
static bool same_req(const struct cnl_req_prep *a, const struct cnl_req_prep *b)
{
	const struct cnl_alloc_req *x = &a->req, *z = &b->req;

	return x->kind == z->kind && x->blocks == z->blocks &&
	       x->gpus == z->gpus && x->gpu_type == z->gpu_type &&
	       x->gpu_types == z->gpu_types && x->project == z->project &&
	       x->cpu_milli == z->cpu_milli && x->mem_mib == z->mem_mib &&
	       x->nodes == z->nodes && a->type_ok == b->type_ok &&
	       memcmp(a->prof, b->prof, sizeof(a->prof)) == 0;
}

/* The scheduler's fit memory sized for the cluster's nodes (made, or
 * made again when nodes were added); false when out of memory. */
static bool fit_ready(struct cnl_sched *s, uint32_t nn)
{
	size_t cap = FIT_BYTES / (((size_t)nn + 1) * 16);

	if (s->fit && s->fit_nn >= nn)
		return true;
	cnl_sched_fit_free(s);
	cap = cap < FIT_MIN ? FIT_MIN : cap > FIT_MAX ? FIT_MAX : cap;
	cap -= cap % FIT_WAYS;
	if (!(s->fit = calloc(cap, sizeof(*s->fit))))
		return false;
	s->fit_cap = cap;
	s->fit_nn = nn;
	return true;
}

/* The fit memory's entry for `p`, made (empty) if there is none; NULL
 * when the cycle keeps none or on allocation failure. */
static struct cnl_cyc_fit *fit_of(struct cnl_cyc *y,
                                  const struct cnl_req_prep *p)
{
	struct cnl_sched *s = y->s;
	uint64_t key = cnl_cyc_shape_key(p, true) ^
	               ((uint64_t)p->req.cpu_milli * 0x9e3779b97f4a7c15ULL) ^
	               ((uint64_t)p->req.mem_mib * 0xc2b2ae3d27d4eb4fULL);
	uint32_t nn = y->c->n_nodes;
	struct cnl_cyc_fit *set, *e = NULL;

	key |= 1;
	if (!y->nver || !fit_ready(s, nn))
		return NULL;
	set = &s->fit[((key >> 17) % (s->fit_cap / FIT_WAYS)) * FIT_WAYS];
	for (int w = 0; w < FIT_WAYS; w++) {
		if (set[w].key == key && same_req(&set[w].p, p))
			return &set[w];
		/* A free way, else the one made first. */
		if (!e || (e->key && (!set[w].key || set[w].use < e->use)))
			e = &set[w];
	}
	if (!e->v) {
		e->v = calloc((size_t)s->fit_nn + 1, sizeof(*e->v));
		if (!e->v) {
			e->key = 0;
			return NULL;
		}
	}
	/* A new stamp: whatever the arrays hold is another use's.  (Should
	 * the stamp come round, every array is cleared first.) */
	if (++s->fit_use == 0) {
		for (size_t i = 0; i < s->fit_cap; i++)
			if (s->fit[i].v)
				memset(s->fit[i].v, 0,
				       ((size_t)s->fit_nn + 1) *
				           sizeof(*s->fit[i].v));
		s->fit_use = 1;
	}
	e->use = s->fit_use;
	e->key = key;
	e->p = *p;
	return e;
}

/* The fit memory's time for `node`: 0 when not known, or found before
 * the node's capacity last grew (then not even a lower bound). */
static inline int64_t fit_t(const struct cnl_cyc *y,
                            const struct cnl_cyc_fit *f, uint32_t node)
{
	uint64_t at = f->v[node].at;

	if ((uint32_t)(at >> 32) != f->use || (uint32_t)at - 1 < y->gver[node])
		return 0;
	return f->v[node].t;
}

/* ---- earliest start, reservations, backfill ------------------------- */

/* cnl_cyc_node_could_host() from a bounds entry of the job's shape (the
 * same answer: node states and sizes do not change within a cycle). */
static inline bool lb_could_host(const struct cnl_cyc_lb *e,
                                 const struct cnl_req_prep *p)
{
	return e->cpu_total >= p->req.cpu_milli &&
	       e->mem_total >= p->req.mem_mib && e->cpu_total >= 0;
}

/* A lower bound on node_earliest() from the reservations alone: the first
 * time from `t` on that [t, t + rt) overlaps none of the node's. */
static int64_t resv_gap(const struct cnl_sched *s, uint32_t node, int64_t t,
                        int64_t rt)
{
	/* One pass: a node's reservations are kept by start time and never
	 * overlap one another, so their ends come in the same order, and one
	 * that ends before `t` (or starts after the window) is past for every
	 * later `t` too.  Each overlap moves `t` to its end, as the repeated
	 * search did. */
	for (uint32_t i = s->resv_head[node]; i != NONE; i = s->resv[i].next) {
		const struct cnl_resv *r = &s->resv[i];
		if (r->t0 >= t + rt)
			break;
		if (t < r->t1)
			t = r->t1;
	}
	return t;
}

/* The first instant from max(lb, now) on free of node e->node's
 * reservations (resv_gap() for a run of 1 ms), found again only when a
 * reservation was made on the node since.  A value kept past a new
 * reservation would still be a lower bound (a cycle only adds
 * reservations, which only move the instant later), just a weaker one;
 * one found for a longer run would not (test_sched_inc fails). */
static int64_t free_at(struct cnl_cyc *y, struct cnl_cyc_lb_cache *lc,
                       uint32_t k)
{
	struct cnl_cyc_lb *e = &lc->v[k];
	uint32_t v = y->rver[e->node] + 1;

	if (e->free_ver != v) {
		e->free_at =
		    resv_gap(y->s, e->node, e->lb > y->now ? e->lb : y->now, 1);
		e->free_ver = v;
		if (lc->mt)
			tree_raise(lc, k, e->free_at);
	}
	return e->free_at;
}

/* The earliest time and node at which job `p` could start, honouring the
 * reservations already made.  T_INF when none is known.  Nodes are tried
 * in order of their lower bound until the bound passes the best exact
 * time found: usually the first node or two settle it. */
int64_t cnl_cyc_earliest(struct cnl_cyc *y, const struct cnl_req_prep *p,
                         int64_t rt, uint32_t *ret_node)
{
	struct cnl_cyc_lb_cache *lc = bounds(y, p);
	struct cnl_cyc_fit *fit = y->s->inc ? fit_of(y, p) : NULL;
	struct cnl_cyc_saved sv = {0};
	int64_t best = T_INF;
	uint32_t best_node = NONE;

	/* The tree's bounds hold for runs of 1 ms or more (free_at). */
	for (uint32_t k = lc ? tree_next(lc, 0, rt >= 1 ? best : T_INF) : 0;
	     lc && k < lc->n && lc->v[k].lb < best;
	     k = tree_next(lc, k + 1, rt >= 1 ? best : T_INF)) {
		uint32_t node = lc->v[k].node;
		if (y->s->inc ? !lb_could_host(&lc->v[k], p)
		              : !cnl_cyc_node_could_host(y, node, p))
			continue;
		int64_t t0 = lc->v[k].lb > y->now ? lc->v[k].lb : y->now, t;
		/* The incremental cycle skips a node whose reservations alone
		 * put its start at or past the best found: it could not win
		 * (only an earlier time does), so the answer is the same.  A
		 * fit time remembered for the request raises the bound. */
		int64_t ft = fit ? fit_t(y, fit, node) : 0;
		if (ft > t0)
			t0 = ft;
		if (ft == T_INF)
			continue; /* never fits: T_INF, which cannot win */
		/* The node's first free instant (kept in the bounds entry
		 * while its reservations stand) is no later than any start
		 * there: resv_gap() only moves later with a later start or a
		 * longer run.  At or past the best, no walk is needed. */
		if (y->rver && best != T_INF && rt >= 1 &&
		    free_at(y, lc, k) >= best)
			continue;
		if (y->s->inc && best != T_INF &&
		    resv_gap(y->s, node, t0, rt) >= best)
			continue;
		if (fit) {
			/* node_earliest() is the first time from t0 on, past
			 * the node's reservations, at or after the first
			 * fit: that fit is remembered (exact while the node
			 * keeps its version), or found from the remembered
			 * lower bound on. */
			int64_t f = ft;
			uint64_t at = (uint64_t)fit->use << 32 |
			              (uint64_t)(y->nver[node] + 1);
			if (!f || fit->v[node].at != at) {
				f = replay_fit(y, node, p,
				               f > y->now ? f : y->now, &sv);
				fit->v[node].t = f;
				fit->v[node].at = at;
			}
			t = f == T_INF
			        ? T_INF
			        : resv_gap(y->s, node, f > t0 ? f : t0, rt);
		} else {
			t = node_earliest(y, node, p, rt, lc->v[k].lb, &sv);
		}
		if (t < best) {
			best = t;
			best_node = node;
		}
	}
	free(sv.a);
	*ret_node = best_node;
	return best;
}

/* The estimated start of a waiting job: the first lower bound among the
 * nodes that could host it (GPU capacity as work ends). */
int64_t cnl_cyc_estimate(struct cnl_cyc *y, const struct cnl_req_prep *p)
{
	const struct cnl_cyc_lb_cache *lc = bounds(y, p);

	for (uint32_t k = 0; lc && k < lc->n; k++)
		if (y->s->inc ? lb_could_host(&lc->v[k], p)
		              : cnl_cyc_node_could_host(y, lc->v[k].node, p))
			return lc->v[k].lb;
	return T_INF;
}

int cnl_cyc_reserve(struct cnl_cyc *y, uint32_t job, uint32_t node, int64_t t0,
                    int64_t rt)
{
	struct cnl_sched *s = y->s;

	if (s->n_resv == s->cap_resv) {
		size_t cap = s->cap_resv ? s->cap_resv * 2 : 16;
		struct cnl_resv *nr = realloc(s->resv, cap * sizeof(*nr));
		if (!nr)
			return -ENOMEM;
		s->resv = nr;
		s->cap_resv = cap;
	}
	/* Into the node's list by start time (resv_gap() walks it once). */
	uint32_t *at = &s->resv_head[node];
	while (*at != NONE && s->resv[*at].t0 <= t0)
		at = &s->resv[*at].next;
	s->resv[s->n_resv] = (struct cnl_resv){
	    .job = job, .node = node, .next = *at, .t0 = t0, .t1 = t0 + rt};
	*at = (uint32_t)s->n_resv++;
	if (y->rver)
		y->rver[node]++;
	return 0;
}

/*
 * Backfill rule: may `p` (ending at `end`) start now by `plan` without
 * delaying any reservation on the plan's node?  Yes if it ends before
 * each, or if each reserved job still fits at its time beside it.
 */
bool cnl_cyc_resv_ok(struct cnl_cyc *y, const struct cnl_req_prep *p,
                     const struct cnl_plan *plan, int64_t end)
{
	struct cnl_sched *s = y->s;
	struct cnl_cyc_saved sv = {0};
	uint32_t id = 0;
	bool ok = true, placed = false;

	for (uint32_t i = s->resv_head[plan->node]; i != NONE && ok;
	     i = s->resv[i].next) {
		const struct cnl_resv *r = &s->resv[i];
		if (end <= r->t0)
			continue;
		if (!placed) {
			if (cnl_cyc_commit_plan(y->c, p, plan, &id) < 0) {
				ok = false;
				break;
			}
			placed = true;
		}
		/* The tentative allocation is not in the node's run list,
		 * so the replay keeps it: it outlives the reservation. */
		ok = replay_fit(y, r->node, &y->prep[r->job], r->t0, &sv) <=
		     r->t0;
	}
	if (placed)
		cnl_alloc_free(y->c, id);
	free(sv.a);
	return ok;
}
