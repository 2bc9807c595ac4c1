/*
 * order.c - the order pending jobs are taken in, and the fair-share state
 * it depends on.
 *
 * Classes go strictly in turn (critical, high, normal, low).  Within a
 * class each team (project) has a queue in the policy's key order, and the
 * team whose head has the highest key goes next.  Team order is live: when
 * a team places a job its held capacity and fair-share factor change
 * (cnl_cyc_team_hold) and only its head's key is recomputed, so a burst of
 * one team's submissions interleaves with other teams instead of jumping
 * the queue.  Keys come from the policy (cnl_policy_order); a policy that
 * does not use the team factor keeps the keys computed at the start.
 * The incremental cycle sorts by (class, team) buckets, each on its own
 * (cnl_cyc_order_sort), and fetches each team's next head while the other
 * teams take their turns (cnl_cyc_order_next).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sched/cycle-internal.h"

/* ---- teams ------------------------------------------------------------ */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

void cnl_cyc_team_hold(struct cnl_cyc *y, uint32_t project, int64_t blocks)
{
	struct cnl_team *t = cnl_sched_team_find(y->s, project);

	if (!t)
		return;
	if (blocks)
		t->moved = true;
	t->held_blocks += blocks;
	t->factor = cnl_fs_factor(t->u_hist,
	                          y->v.capacity_blocks
	                              ? (double)t->held_blocks /
	                                    (double)y->v.capacity_blocks
	                              : 0,
	                          t->share);
}

/* The distinct projects of the jobs, sorted, into ps; their count.  One
 * pass through an open-addressing set (tab, `slots` a power of two at
 * least twice the jobs) and a sort of the few distinct ones, instead of a
 * sort of every job's project. */
static size_t distinct_projects(const struct cnl_cyc *y, uint32_t *ps,
                                uint32_t *tab, size_t slots)
{
	size_t n = 0, mask = slots - 1;
	bool none = false;

	memset(tab, 0xff, slots * sizeof(*tab)); /* CNL_PROJECT_NONE: free */
	for (size_t i = 0; i < y->n_jobs; i++) {
		uint32_t p = y->jobs[i].req.project;
		if (p == CNL_PROJECT_NONE) {
			none = true;
			continue;
		}
		size_t h = (size_t)((p * 0x9e3779b97f4a7c15ULL) >> 32) & mask;
		while (tab[h] != CNL_PROJECT_NONE && tab[h] != p)
			h = (h + 1) & mask;
		if (tab[h] == CNL_PROJECT_NONE) {
			tab[h] = p;
			ps[n++] = p;
		}
	}
	if (none)
		ps[n++] = CNL_PROJECT_NONE;
	qsort(ps, n, sizeof(*ps), cmp_u32);
	return n;
}

int cnl_cyc_setup_teams(struct cnl_cyc *y)
{
	struct cnl_sched *s = y->s;
	size_t slots = 16;

	while (slots < 2 * (y->n_jobs + 1))
		slots *= 2;
	uint32_t *ps =
	    cnl_cyc_keep(s, KEEP_TEAMS, (y->n_jobs + 1 + slots) * sizeof(*ps));
	size_t n;
	double wsum = 0;

	if (!ps)
		return -ENOMEM;
	n = distinct_projects(y, ps, ps + y->n_jobs + 1, slots);
	s->n_teams = 0;
	for (size_t i = 0; i < n; i++) {
		if (s->n_teams == s->cap_teams) {
			size_t cap = s->cap_teams ? s->cap_teams * 2 : 32;
			struct cnl_team *nt =
			    realloc(s->teams, cap * sizeof(*nt));
			if (!nt) {
				cnl_cyc_unkeep(s, ps);
				return -ENOMEM;
			}
			s->teams = nt;
			s->cap_teams = cap;
		}
		struct cnl_team *t = &s->teams[s->n_teams++];
		memset(t, 0, sizeof(*t));
		t->project = ps[i];
		t->share = cnl_fs_weight(&s->fs, ps[i]);
		wsum += t->share;
		t->u_hist =
		    cnl_fs_usage(&s->fs, ps[i], y->now, y->v.capacity_blocks);
	}
	cnl_cyc_unkeep(s, ps);
	for (size_t i = 0; i < s->n_teams; i++)
		s->teams[i].share = wsum > 0 ? s->teams[i].share / wsum : 1;
	/* What each team holds now. */
	for (size_t i = 0; i < y->n_jobs; i++) {
		const struct cnl_job *j = &y->jobs[i];
		const struct cnl_alloc *a;
		if (j->state != CNL_JOB_RUNNING)
			continue;
		a = cnl_alloc_get(y->c, j->alloc_id);
		if (a)
			cnl_sched_team_find(s, j->req.project)->held_blocks +=
			    cnl_alloc_blocks_held(y->c, a);
	}
	for (size_t i = 0; i < s->n_teams; i++)
		cnl_cyc_team_hold(y, s->teams[i].project, 0);
	return 0;
}

/* ---- order ------------------------------------------------------------ */

/* A team's queue within the current class. */
struct cnl_cyc_queue {
	uint32_t project;
	size_t pos, end; /* into the ordered array */
	double key;      /* of the head */
};

struct cnl_cyc_order_ent {
	uint32_t job;
	uint32_t project;
	uint32_t cls; /* summary class (cycle.c), or NONE */
	uint8_t prio;
	double key;
	int64_t submit;
};

/* Whether `x` goes before `y`: by (class, team, key, submit, job), a
 * total order (no two entries share a job). */
static inline bool before(const struct cnl_cyc_order_ent *x,
                          const struct cnl_cyc_order_ent *y)
{
	if (x->prio != y->prio)
		return x->prio > y->prio;
	if (x->project != y->project)
		return x->project < y->project;
	if (x->key != y->key)
		return x->key > y->key;
	if (x->submit != y->submit)
		return x->submit < y->submit;
	return x->job < y->job;
}

/* Sort v[0, n) by before(), tmp holding n more: a bottom-up merge sort
 * with the comparison inlined (qsort's call per comparison and byte-wise
 * moves were a tenth of a 100k-pending cycle).  Runs of 16 by insertion
 * first.  The order is total, so the result is the one qsort gave. */
static void sort_ents(struct cnl_cyc_order_ent *v,
                      struct cnl_cyc_order_ent *tmp, size_t n)
{
	struct cnl_cyc_order_ent *src = v, *dst = tmp;

	for (size_t a = 0; a < n; a += 16) {
		size_t b = a + 16 < n ? a + 16 : n;
		for (size_t i = a + 1; i < b; i++) {
			struct cnl_cyc_order_ent e = v[i];
			size_t k = i;
			while (k > a && before(&e, &v[k - 1])) {
				v[k] = v[k - 1];
				k--;
			}
			v[k] = e;
		}
	}
	for (size_t w = 16; w < n; w *= 2) {
		for (size_t a = 0; a < n; a += 2 * w) {
			size_t m = a + w < n ? a + w : n,
			       b = a + 2 * w < n ? a + 2 * w : n, i = a, k = m,
			       o = a;
			while (i < m && k < b)
				dst[o++] = before(&src[k], &src[i]) ? src[k++]
				                                    : src[i++];
			while (i < m)
				dst[o++] = src[i++];
			while (k < b)
				dst[o++] = src[k++];
		}
		struct cnl_cyc_order_ent *t = src;
		src = dst;
		dst = t;
	}
	if (src != v)
		memcpy(v, src, n * sizeof(*v));
}

int cnl_cyc_order_init(struct cnl_sched *s, struct cnl_cyc_order *o,
                       size_t n_jobs)
{
	memset(o, 0, sizeof(*o));
	o->last = SIZE_MAX;
	o->ord = cnl_cyc_keep(s, KEEP_ORD, (n_jobs + 1) * sizeof(*o->ord));
	o->qs = cnl_cyc_keep(s, KEEP_QS, (n_jobs + 1) * sizeof(*o->qs));
	o->tmp = cnl_cyc_keep(s, KEEP_ORD_TMP, (n_jobs + 1) * sizeof(*o->tmp));
	o->bkt = cnl_cyc_keep(s, KEEP_ORD_BKT, (n_jobs + 1) * sizeof(*o->bkt));
	return o->ord && o->qs && o->tmp && o->bkt ? 0 : -ENOMEM;
}

void cnl_cyc_order_done(struct cnl_sched *s, struct cnl_cyc_order *o)
{
	cnl_cyc_unkeep(s, o->ord);
	cnl_cyc_unkeep(s, o->qs);
	cnl_cyc_unkeep(s, o->tmp);
	cnl_cyc_unkeep(s, o->bkt);
	o->ord = NULL;
	o->qs = NULL;
	o->tmp = NULL;
	o->bkt = NULL;
}

void cnl_cyc_order_add(struct cnl_cyc *y, struct cnl_cyc_order *o, uint32_t job,
                       uint32_t cls)
{
	const struct cnl_job *j = &y->jobs[job];
	const struct cnl_team *t = cnl_sched_team_find(y->s, j->req.project);

	/* Classes go from critical down, teams by project (the teams are
	 * sorted by project): the entry's place in the first two keys of
	 * before(). */
	o->bkt[o->n] =
	    t && j->prio <= CNL_PRIO_CRITICAL
	        ? (uint32_t)((CNL_PRIO_CRITICAL - j->prio) * y->s->n_teams +
	                     (size_t)(t - y->s->teams))
	        : NONE;
	o->ord[o->n++] =
	    (struct cnl_cyc_order_ent){.job = job,
	                               .cls = cls,
	                               .prio = j->prio,
	                               .project = j->req.project,
	                               .key = cnl_policy_order(&y->v, j),
	                               .submit = j->submit_ms};
}

/* Sort by buckets: the entries dealt by (class, team) into o->tmp (one
 * counting pass), then each bucket sorted on its own, in cache, with the
 * same slice of o->ord as scratch, and the arrays swapped.  Since before()
 * orders by class, then team, then the rest, the result is the one the
 * whole sort gives (the order is total).  The incremental cycle's only
 * (the from-scratch cycle sorts the whole, the reference test_sched_inc
 * compares against); the whole sort too when some entry has no bucket. */
void cnl_cyc_order_sort(struct cnl_cyc *y, struct cnl_cyc_order *o)
{
	size_t nb = (size_t)(CNL_PRIO_CRITICAL + 1) * y->s->n_teams;
	size_t *off =
	    y->s->inc && nb && nb < o->n ? calloc(nb + 1, sizeof(*off)) : NULL;
	struct cnl_cyc_order_ent *t;

	for (size_t i = 0; off && i < o->n; i++) {
		if (o->bkt[i] == NONE) {
			free(off);
			off = NULL;
		} else {
			off[o->bkt[i] + 1]++;
		}
	}
	if (!off) {
		sort_ents(o->ord, o->tmp, o->n);
		return;
	}
	for (size_t b = 0; b < nb; b++)
		off[b + 1] += off[b];
	/* Deal (off[b] moves to the bucket's end), then sort each. */
	for (size_t i = 0; i < o->n; i++)
		o->tmp[off[o->bkt[i]]++] = o->ord[i];
	for (size_t b = 0, a = 0; b < nb; b++) {
		sort_ents(o->tmp + a, o->ord + a, off[b] - a);
		a = off[b];
	}
	free(off);
	t = o->ord;
	o->ord = o->tmp;
	o->tmp = t;
}

/* Open the next class, ord[a, b): a queue per team, keyed by its head. */
static void open_class(struct cnl_cyc_order *o)
{
	size_t a = o->b, b = a;

	while (b < o->n && o->ord[b].prio == o->ord[a].prio)
		b++;
	o->nq = 0;
	for (size_t i = a; i < b;) {
		size_t e = i;
		while (e < b && o->ord[e].project == o->ord[i].project)
			e++;
		o->qs[o->nq++] =
		    (struct cnl_cyc_queue){.project = o->ord[i].project,
		                           .pos = i,
		                           .end = e,
		                           .key = o->ord[i].key};
		i = e;
	}
	o->b = b;
}

/* Start fetching the cache lines of job `job` a policy key reads (the
 * team, the times; not the dataset or the gang, a third of the job). */
static inline void prefetch_job(const struct cnl_cyc *y, uint32_t job)
{
	const struct cnl_job *j = &y->jobs[job];

	__builtin_prefetch(&j->req.project);
	__builtin_prefetch(&j->submit_ms);
	__builtin_prefetch(&j->runtime_ms);
}

uint32_t cnl_cyc_order_next(struct cnl_cyc *y, struct cnl_cyc_order *o)
{
	for (;;) {
		if (o->last != SIZE_MAX) {
			/* The team just served: skip heads already decided
			 * (gang members), then rekey its head. */
			struct cnl_cyc_queue *q = &o->qs[o->last];
			o->last = SIZE_MAX;
			while (q->pos < q->end && y->done[o->ord[q->pos].job])
				q->pos++;
			/* The incremental cycle keeps the key computed at
			 * the start while the team's factor stands (its
			 * holdings have not moved): the policy's inputs are
			 * the same. */
			const struct cnl_team *t =
			    y->s->pol->fairshare && y->s->inc
			        ? cnl_sched_team_find(y->s, q->project)
			        : NULL;
			if (q->pos < q->end)
				q->key =
				    y->s->pol->fairshare && (!t || t->moved)
				        ? cnl_policy_order(
				              &y->v,
				              &y->jobs[o->ord[q->pos].job])
				        : o->ord[q->pos].key;
			/* The team's next head is keyed from its job when
			 * the team next places: fetch the job now, while
			 * the other teams take their turns (read then in
			 * the order's sequence, each job was a cache miss,
			 * a tenth of a 100k-pending cycle); and its queue's
			 * entries a few ahead. */
			if (q->pos + 1 < q->end) {
				uint32_t nj = o->ord[q->pos + 1].job;
				prefetch_job(y, nj);
				__builtin_prefetch(&y->done[nj]);
			}
			if (q->pos + 8 < q->end)
				__builtin_prefetch(&o->ord[q->pos + 8]);
		}
		/* Within the class, the team whose head has the highest key;
		 * the next class when every queue is empty. */
		size_t best = o->nq;
		for (size_t q = 0; q < o->nq; q++)
			if (o->qs[q].pos < o->qs[q].end &&
			    (best == o->nq || o->qs[q].key > o->qs[best].key))
				best = q;
		if (best == o->nq) {
			if (o->b >= o->n)
				return NONE;
			open_class(o);
			continue;
		}
		o->last = best;
		const struct cnl_cyc_order_ent *e = &o->ord[o->qs[best].pos++];
		if (!y->done[e->job]) {
			o->cls = e->cls;
			return e->job;
		}
	}
}
