/*
 * cycle.c - the cycle driver (cnl_sched_cycle) and admission
 * (cnl_sched_admit); see sched.h for the algorithm and cycle-internal.h
 * for the files it is made of.
 *
 * A cycle sets up its scratch (running work, teams, victims, per-type
 * maxima), prepares every pending job (invalid ones are answered at
 * once), then takes them in order (order.c): a gang as a whole (gang.c);
 * any other job starts now if it can (place.c), else is blocked: a
 * reservation if it has a deadline it can meet by waiting or is among the
 * first max_reservations blocked jobs (profile.c), pre-emption if waiting
 * would miss its deadline or it outranks running preemptible work
 * (preempt.c), else a wait with the reason and an estimate.  Last, idle
 * nodes are reported for power-down.
 *
 * Pending work beyond what can start is summarised per class (the whole
 * request and the priority class): in the incremental cycle, once a
 * class's first job without a deadline or gang has been refused (no node,
 * no victims, the reservations spent), the class's later jobs get the same
 * WAIT by their class's index (found while the jobs are prepared, carried
 * in the order) instead of the searches, until pre-emption grows capacity
 * or a cached bound is dropped (sum_class, sum_decide, sum_note).
 * test_sched_inc checks the decisions against the from-scratch cycle.
 */
#define _GNU_SOURCE /* qsort_r */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "sched/cycle-internal.h"

static int cmp_gang(const void *a, const void *b, void *arg)
{
	const struct cnl_job *jobs = arg;
	uint32_t x = *(const uint32_t *)a, z = *(const uint32_t *)b;

	if (jobs[x].gang != jobs[z].gang)
		return jobs[x].gang < jobs[z].gang ? -1 : 1;
	return (x > z) - (x < z);
}

/* A pending job that could not start now. */
static int blocked(struct cnl_cyc *y, uint32_t job, bool conflict)
{
	const struct cnl_sched_config *cfg = &y->s->cfg;
	const struct cnl_job *j = &y->jobs[job];
	const struct cnl_req_prep *p = &y->prep[job];
	int64_t rt = cnl_cyc_runtime_of(y, j),
	        drt = cnl_cyc_deadline_runtime(j), t;
	uint32_t node = NONE;
	int r;

	if (!cnl_cyc_could_ever_fit(y, p))
		return cnl_cyc_decide(y, job, CNL_DEC_WAIT,
		                      cnl_cyc_could_fit_any_node(y, p)
		                          ? CNL_WHY_NO_NODE_TAKING_WORK
		                          : CNL_WHY_NO_MATCHING_NODE,
		                      NONE, 0, T_INF, 0);
	if (j->deadline_ms) {
		t = cnl_cyc_earliest(y, p, rt, &node);
		if (y->now + drt <= j->deadline_ms) {
			if (t != T_INF && t + drt <= j->deadline_ms) {
				r = cnl_cyc_reserve(y, job, node, t, rt);
				if (r < 0)
					return r;
				return cnl_cyc_decide(y, job, CNL_DEC_WAIT,
				                      CNL_WHY_RESERVED, node, 0,
				                      t, 0);
			}
			/* Waiting misses the deadline: pre-empt.  (Nothing
			 * changes when no victims are found, so t stands.) */
			if ((r = cnl_cyc_try_preempt(y, job)) != 0)
				return r < 0 ? r : 0;
		}
		if (t != T_INF &&
		    (r = cnl_cyc_reserve(y, job, node, t, rt)) < 0)
			return r;
		return cnl_cyc_decide(y, job, CNL_DEC_WAIT,
		                      CNL_WHY_DEADLINE_INFEASIBLE, node, 0, t,
		                      0);
	}
	if ((r = cnl_cyc_try_preempt(y, job)) != 0)
		return r < 0 ? r : 0;
	if (y->n_resv_plain < (size_t)cfg->max_reservations) {
		t = cnl_cyc_earliest(y, p, rt, &node);
		if (t != T_INF) {
			if ((r = cnl_cyc_reserve(y, job, node, t, rt)) < 0)
				return r;
			y->n_resv_plain++;
			return cnl_cyc_decide(y, job, CNL_DEC_WAIT,
			                      CNL_WHY_RESERVED, node, 0, t, 0);
		}
	}
	return cnl_cyc_decide(y, job, CNL_DEC_WAIT,
	                      conflict ? CNL_WHY_BEHIND_RESERVATION
	                               : CNL_WHY_NO_CAPACITY,
	                      NONE, 0, cnl_cyc_estimate(y, p), 0);
}

/* ---- the class summary ------------------------------------------------ */

/* Job `job`'s class: its whole prepared request and its priority class.
 * A hash of the request's own fields only (the per-type profiles follow
 * from them, and same_class() compares everything): a few multiplies per
 * pending job instead of the shape key's pass over every type. */
static uint64_t sum_key(const struct cnl_cyc *y, uint32_t job)
{
	const struct cnl_alloc_req *r = &y->prep[job].req;
	uint64_t k = (uint64_t)r->kind << 56 ^
	             (uint64_t)(uint32_t)r->blocks << 32 ^
	             (uint64_t)(uint32_t)r->gpus << 8 ^ y->jobs[job].prio;

	k = (k ^ (uint64_t)(uint32_t)r->gpu_type) * 0x9e3779b97f4a7c15ULL;
	k = (k ^ (k >> 31) ^ r->gpu_types ^ (uint64_t)r->project << 17) *
	    0xff51afd7ed558ccdULL;
	k = (k ^ (k >> 29) ^ (uint64_t)r->cpu_milli) * 0xbf58476d1ce4e5b9ULL;
	k = (k ^ (k >> 32) ^ (uint64_t)r->mem_mib ^
	     (uint64_t)(uintptr_t)r->nodes) *
	    0x94d049bb133111ebULL;
	return (k ^ (k >> 29)) | 1;
}

/* Whether job `b` is of class `e`: everything the placement search, the
 * pre-emption search and the estimate read of them but the run time,
 * which a failed search without a reservation conflict does not depend
 * on.  Against the class's own copy of its first job's request and
 * priority: the first job itself, read in no order, was a cache miss per
 * job. */
static bool same_class(const struct cnl_cyc *y, const struct cnl_cyc_sum *e,
                       uint32_t b)
{
	const struct cnl_req_prep *p = &e->p, *q = &y->prep[b];
	const struct cnl_alloc_req *x = &p->req, *z = &q->req;

	return e->prio == y->jobs[b].prio && x->kind == z->kind &&
	       x->blocks == z->blocks && x->gpus == z->gpus &&
	       x->gpu_type == z->gpu_type && x->gpu_types == z->gpu_types &&
	       x->project == z->project && x->cpu_milli == z->cpu_milli &&
	       x->mem_mib == z->mem_mib && x->nodes == z->nodes &&
	       p->type_ok == q->type_ok &&
	       memcmp(p->prof, q->prof, sizeof(p->prof)) == 0;
}

/* Size the table of classes to `slots` (a power of two) and put every
 * class back in it; -ENOMEM (the table as it was) when out of memory. */
static int sum_grow(struct cnl_cyc *y, size_t slots)
{
	uint32_t *tab = cnl_cyc_keep(y->s, KEEP_SUM_TAB, slots * sizeof(*tab));

	if (!tab)
		return -ENOMEM;
	y->sum_tab = tab;
	y->sum_mask = slots - 1;
	memset(tab, 0xff, slots * sizeof(*tab));
	for (size_t id = 0; id < y->n_sum; id++) {
		size_t h = (size_t)y->sum[id].key & y->sum_mask;
		while (tab[h] != NONE)
			h = (h + 1) & y->sum_mask;
		tab[h] = (uint32_t)id;
	}
	return 0;
}

/* Whether `job` may take (or give) its class's summarised decision: work
 * without a deadline (its own reservation and pre-emption rules) or gang,
 * in the incremental cycle. */
static bool sum_eligible(const struct cnl_cyc *y, uint32_t job)
{
	const struct cnl_job *j = &y->jobs[job];

	return y->sum && !j->gang && !j->deadline_ms;
}

/* The summary class of prepared job `job` (its index in y->sum, the
 * class made if new), or NONE: not eligible, or out of memory. */
static uint32_t sum_class(struct cnl_cyc *y, uint32_t job)
{
	uint64_t key;
	size_t h;

	if (!sum_eligible(y, job))
		return NONE;
	key = sum_key(y, job);
	for (h = (size_t)key & y->sum_mask; y->sum_tab[h] != NONE;
	     h = (h + 1) & y->sum_mask) {
		const struct cnl_cyc_sum *e = &y->sum[y->sum_tab[h]];
		if (e->key == key && same_class(y, e, job))
			return y->sum_tab[h];
	}
	/* A new class; the table stays under half full. */
	if (2 * (y->n_sum + 1) > y->sum_mask + 1) {
		if (sum_grow(y, 2 * (y->sum_mask + 1)) < 0)
			return NONE;
		for (h = (size_t)key & y->sum_mask; y->sum_tab[h] != NONE;
		     h = (h + 1) & y->sum_mask)
			;
	}
	y->sum[y->n_sum] = (struct cnl_cyc_sum){
	    .key = key, .prio = y->jobs[job].prio, .p = y->prep[job]};
	y->sum_tab[h] = (uint32_t)y->n_sum;
	return (uint32_t)y->n_sum++;
}

/* Decide `job` (of class `cls`) by its class's summary if there is a
 * current one: 1 done, 0 none, < 0 error.  The decision is the one the
 * full path would make: since the class's first job was refused,
 * capacity has only shrunk (any pre-emption moves sum_gen), so the same
 * request fails the same placement search without a reservation conflict
 * and finds no victims (or none exist); the reservations stay spent; and
 * the estimate reads the same cached lower bounds (dropping one moves
 * sum_gen). */
static int sum_decide(struct cnl_cyc *y, uint32_t job, uint32_t cls)
{
	const struct cnl_cyc_sum *e;

	if (cls == NONE)
		return 0;
	e = &y->sum[cls];
	if (!e->set || e->gen != y->sum_gen)
		return 0;
	struct cnl_decision d = {.kind = CNL_DEC_WAIT,
	                         .reason = e->reason,
	                         .job = job,
	                         .node = NONE,
	                         .for_job = NONE,
	                         .at_ms = e->at};
	y->done[job] = 1;
	y->sum_hits++;
	return cnl_cyc_push(y->out, &d) < 0 ? -ENOMEM : 1;
}

/* After `job` (of class `cls`) went the full way: remember its decision
 * for its class if it is one a later job of the class must repeat (see
 * sum_decide). */
static void sum_note(struct cnl_cyc *y, uint32_t job, uint32_t cls)
{
	const struct cnl_decision *d;
	struct cnl_cyc_sum *e;

	if (cls == NONE || !y->out->n)
		return;
	d = &y->out->d[y->out->n - 1];
	if (d->job != job || d->kind != CNL_DEC_WAIT)
		return;
	if (d->reason == CNL_WHY_NO_CAPACITY) {
		/* Spent reservations only: a job that could still take one
		 * is decided by the full path. */
		if (y->n_resv_plain < (size_t)y->s->cfg.max_reservations)
			return;
	} else if (d->reason != CNL_WHY_NO_MATCHING_NODE &&
	           d->reason != CNL_WHY_NO_NODE_TAKING_WORK) {
		return;
	}
	e = &y->sum[cls];
	e->set = true;
	e->gen = y->sum_gen;
	e->reason = d->reason;
	e->at = d->at_ms;
}

/* Process one pending job (or its whole gang). */
static int process(struct cnl_cyc *y, uint32_t job, uint32_t cls,
                   const uint32_t *gangs, size_t n_gangs)
{
	const struct cnl_job *j = &y->jobs[job];
	bool conflict;
	int r;

	/* A job with a class has no gang (sum_eligible): its class's
	 * decision first, without reading the job (in the order's sequence,
	 * a cache miss each). */
	if ((r = sum_decide(y, job, cls)) != 0)
		return r < 0 ? r : 0;
	if (j->gang) {
		/* Find the gang's members (sorted by gang id). */
		size_t lo = 0, hi = n_gangs;
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (y->jobs[gangs[mid]].gang < j->gang)
				lo = mid + 1;
			else
				hi = mid;
		}
		size_t e = lo;
		while (e < n_gangs && y->jobs[gangs[e]].gang == j->gang)
			e++;
		return cnl_cyc_start_gang(y, gangs + lo, e - lo, j->gang_size);
	}
	r = cnl_cyc_try_start(y, job, &conflict);
	if (r != 0)
		return r < 0 ? r : 0;
	if ((r = blocked(y, job, conflict)) < 0)
		return r;
	sum_note(y, job, cls);
	return 0;
}

static void power(struct cnl_cyc *y)
{
	struct cnl_sched *s = y->s;
	const struct cnl_cluster *c = y->c;

	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct cnl_node *n = &c->nodes[i];
		if (n->n_allocs || n->state != CNL_NODE_UP) {
			s->idle_since[i] = 0;
			continue;
		}
		if (!s->idle_since[i])
			s->idle_since[i] = y->now;
		if (s->cfg.idle_power_down_ms &&
		    y->now - s->idle_since[i] >= s->cfg.idle_power_down_ms) {
			struct cnl_decision d = {.kind = CNL_DEC_POWER_DOWN,
			                         .reason = CNL_WHY_IDLE,
			                         .job = NONE,
			                         .node = i,
			                         .for_job = NONE,
			                         .at_ms = s->idle_since[i]};
			cnl_cyc_push(y->out, &d);
		}
	}
}

static int cycle(struct cnl_sched *s, struct cnl_cluster *c,
                 const struct cnl_job *jobs, size_t n_jobs, int64_t now_ms,
                 uint64_t seed, struct cnl_decisions *out)
{
	struct cnl_cyc y;
	struct cnl_cyc_order ord;
	uint32_t *gangs = NULL;
	size_t n_gangs = 0;
	uint32_t job;
	int r;

	memset(&y, 0, sizeof(y));
	out->n = 0;
	y.s = s;
	y.c = c;
	y.jobs = jobs;
	y.n_jobs = n_jobs;
	y.now = now_ms;
	y.out = out;
	y.v = (struct cnl_sched_view){
	    .s = s, .c = c, .now_ms = now_ms, .seed = seed};
	s->n_resv = 0;
	s->n_gang_nodes = 0;
	cnl_cyc_setup_types(&y);
	y.prep = cnl_cyc_keep(s, KEEP_PREP, (n_jobs + 1) * sizeof(*y.prep));
	y.done = cnl_cyc_keep(s, KEEP_DONE, n_jobs + 1);
	y.victim = cnl_cyc_keep(s, KEEP_VICTIM, n_jobs + 1);
	if (y.done)
		memset(y.done, 0, n_jobs + 1);
	if (y.victim)
		memset(y.victim, 0, n_jobs + 1);
	y.fail = calloc(1, sizeof(*y.fail));
	y.pfail = calloc(1, sizeof(*y.pfail));
	y.lbc = calloc(LBC_MAX, sizeof(*y.lbc));
	if (s->inc) {
		y.cfail = calloc(1, sizeof(*y.cfail));
		y.nver = calloc(c->n_nodes + 1, sizeof(*y.nver));
		y.gver = calloc(c->n_nodes + 1, sizeof(*y.gver));
		y.rver = calloc(c->n_nodes + 1, sizeof(*y.rver));
		y.sum =
		    cnl_cyc_keep(s, KEEP_SUM, (n_jobs + 1) * sizeof(*y.sum));
		if (y.sum && sum_grow(&y, SUM_SLOTS) < 0)
			y.sum = NULL;
	}
	r = cnl_cyc_order_init(s, &ord, n_jobs);
	gangs = cnl_cyc_keep(s, KEEP_GANGS, (n_jobs + 1) * sizeof(*gangs));
	s->gang_nodes = realloc(s->gang_nodes,
	                        (CNL_NODE_MAX_GPUS * 4 + 1) * sizeof(uint32_t));
	if (!y.prep || !y.done || !y.victim || !y.fail || !y.pfail || !y.lbc ||
	    r < 0 || !gangs || !s->gang_nodes ||
	    (s->inc && (!y.cfail || !y.nver || !y.gver || !y.rver || !y.sum))) {
		r = -ENOMEM;
		goto out;
	}
	if ((r = cnl_cyc_setup_runs(&y)) < 0 ||
	    (r = cnl_cyc_setup_teams(&y)) < 0 ||
	    (r = cnl_cyc_setup_victims(&y)) < 0)
		goto out;
	for (int t = 0; t < CNL_CATALOG_MAX_TYPES; t++)
		y.tmax[t].dirty = true;

	/* Prepare every pending job; invalid ones are answered at once. */
	for (size_t i = 0; i < n_jobs; i++) {
		const struct cnl_job *j = &jobs[i];
		if (j->state != CNL_JOB_PENDING)
			continue;
		int e = cnl_alloc_prepare(c, &j->req, &y.prep[i]);
		if (e < 0 || j->prio > CNL_PRIO_CRITICAL) {
			if ((r = cnl_cyc_decide(&y, (uint32_t)i, CNL_DEC_WAIT,
			                        CNL_WHY_INVALID, NONE, 0, T_INF,
			                        e < 0 ? e : -EINVAL)) < 0)
				goto out;
			continue;
		}
		cnl_cyc_order_add(&y, &ord, (uint32_t)i,
		                  sum_class(&y, (uint32_t)i));
		if (j->gang)
			gangs[n_gangs++] = (uint32_t)i;
	}
	cnl_cyc_order_sort(&y, &ord);
	qsort_r(gangs, n_gangs, sizeof(*gangs), cmp_gang, (void *)jobs);

	/* Classes in turn; within a class, the team whose head has the
	 * highest key, recomputed after each of its placements. */
	while ((job = cnl_cyc_order_next(&y, &ord)) != NONE)
		if ((r = process(&y, job, ord.cls, gangs, n_gangs)) < 0)
			goto out;
	power(&y);
	s->sum_hits += y.sum_hits;
	r = 0;
out:
	cnl_cyc_unkeep(s, y.prep);
	cnl_cyc_unkeep(s, y.done);
	cnl_cyc_unkeep(s, y.victim);
	free(y.fail);
	free(y.cfail);
	free(y.pfail);
	free(y.victim_nodes);
	free(y.vl_off);
	free(y.vl_jobs);
	free(y.vlb);
	free(y.vest);
	free(y.vheap);
	cnl_cyc_bounds_clear(&y);
	free(y.lbc);
	cnl_cyc_fit_done(&y);
	free(y.nver);
	free(y.gver);
	free(y.rver);
	if (y.sum)
		cnl_cyc_unkeep(s, y.sum);
	if (y.sum_tab)
		cnl_cyc_unkeep(s, y.sum_tab);
	cnl_cyc_order_done(s, &ord);
	cnl_cyc_unkeep(s, gangs);
	return r;
}

int cnl_sched_cycle_inc(struct cnl_sched *s, struct cnl_cluster *c,
                        const struct cnl_job *jobs, size_t n_jobs,
                        int64_t now_ms, uint64_t seed,
                        struct cnl_decisions *out)
{
	int r;

	s->inc = true;
	r = cycle(s, c, jobs, n_jobs, now_ms, seed, out);
	s->inc = false;
	return r;
}

int cnl_sched_cycle(struct cnl_sched *s, struct cnl_cluster *c,
                    const struct cnl_job *jobs, size_t n_jobs, int64_t now_ms,
                    uint64_t seed, struct cnl_decisions *out)
{
	return cycle(s, c, jobs, n_jobs, now_ms, seed, out);
}

/* ---- admission -------------------------------------------------------- */

int cnl_sched_admit(struct cnl_sched *s, struct cnl_cluster *c,
                    const struct cnl_job *jobs, size_t n_jobs,
                    const struct cnl_job *job, int64_t now_ms,
                    int64_t *ret_start)
{
	struct cnl_cyc y;
	struct cnl_req_prep p;
	struct cnl_cyc_saved pre = {0};
	int64_t rt, t = T_INF;
	uint32_t node;
	int r;

	memset(&y, 0, sizeof(y));
	if ((r = cnl_alloc_prepare(c, &job->req, &p)) < 0)
		return r;
	if (!job->deadline_ms)
		return 0;
	y.s = s;
	y.c = c;
	y.jobs = jobs;
	y.n_jobs = n_jobs;
	y.now = now_ms;
	y.v = (struct cnl_sched_view){.s = s, .c = c, .now_ms = now_ms};
	s->n_resv = 0;
	cnl_cyc_setup_types(&y);
	rt = cnl_cyc_runtime_of(&y, job);
	if ((r = cnl_cyc_setup_runs(&y)) < 0)
		return r;
	if (!cnl_cyc_could_ever_fit(&y, &p)) {
		*ret_start = -1;
		return -CNL_EDEADLINE;
	}
	/* The best any plan can do: every running job it may pre-empt gone
	 * after the grace period, the rest ending when expected. */
	for (size_t i = 0; i < n_jobs; i++) {
		const struct cnl_job *v = &jobs[i];
		if (v->state != CNL_JOB_RUNNING || !v->preemptible ||
		    v->prio + s->cfg.preempt_class_gap > job->prio)
			continue;
		const struct cnl_alloc *a = cnl_alloc_get(c, v->alloc_id);
		if (a) {
			cnl_cyc_run_del(s, a->node, v->alloc_id);
			if ((r = cnl_cyc_save_free(c, &pre, v->alloc_id)) < 0)
				break;
		}
	}
	if (r >= 0 && !(y.lbc = calloc(LBC_MAX, sizeof(*y.lbc))))
		r = -ENOMEM;
	if (r >= 0) {
		y.prep = &p;
		t = cnl_cyc_earliest(&y, &p, rt, &node);
		cnl_cyc_bounds_clear(&y);
		free(y.lbc);
		if (pre.n && t != T_INF && t < now_ms + s->cfg.grace_ms)
			t = now_ms + s->cfg.grace_ms;
	}
	cnl_cyc_restore_all(c, &pre);
	free(pre.a);
	if (r < 0)
		return r;
	*ret_start = t == T_INF ? -1 : t;
	if (t == T_INF || t + cnl_cyc_deadline_runtime(job) > job->deadline_ms)
		return -CNL_EDEADLINE;
	return 0;
}
