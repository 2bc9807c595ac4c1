/*
 * replay.c - a pod list replayed in time through cnl_sched_cycle() (see
 * replay.h).  Events are arrivals and departures; the scheduler runs once
 * per distinct event time, over the pods waiting and running then, and
 * its decisions are applied as cnlabd would apply them.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/util.h"
#include "sim/replay.h"

enum { FUTURE, PENDING, RUNNING, DONE };

struct rpod {
	int64_t arrive, runtime; /* seconds */
	int64_t start, end, first_start;
	uint32_t team, alloc;
	uint8_t prio, state;
	bool preemptible;
	struct cnl_alloc_req req;
};

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static const struct rpod *sort_base;

static int cmp_arrive(const void *a, const void *b)
{
	const struct rpod *x = &sort_base[*(const uint32_t *)a];
	const struct rpod *y = &sort_base[*(const uint32_t *)b];
	if (x->arrive != y->arrive)
		return x->arrive < y->arrive ? -1 : 1;
	return (*(const uint32_t *)a > *(const uint32_t *)b) -
	       (*(const uint32_t *)a < *(const uint32_t *)b);
}

static double pct(const int64_t *v, size_t n, double q)
{
	if (n == 0)
		return 0;
	size_t i = (size_t)ceil(q * (double)n) - 1;
	return (double)v[i < n ? i : n - 1];
}

int cnl_replay_run(const struct cnl_fgd_world *w,
                   const struct cnl_replay_config *rc,
                   struct cnl_replay_result *ret)
{
	struct cnl_sched_config cfg;
	struct cnl_sched *s = NULL;
	struct cnl_cluster *c = NULL;
	struct cnl_decisions dec = {0};
	struct cnl_replay_result res;
	struct rpod *pods = NULL;
	uint32_t *order = NULL, *active = NULL;
	struct cnl_job *jobs = NULL;
	int64_t *waits = NULL;
	size_t n = w->n_pods * (size_t)(rc->copies > 0 ? rc->copies : 1);
	size_t cap_pts = 0;
	int r;

	if (!rc->policy || !cnl_policy_find(rc->policy) || rc->teams < 1 ||
	    rc->copies < 1 || rc->copies > 16 || rc->teams > 64 ||
	    !(rc->arrival_scale > 0))
		return -CNL_ECONFIG;
	memset(&res, 0, sizeof(res));
	pods = calloc(n + 1, sizeof(*pods));
	order = malloc((n + 1) * sizeof(*order));
	active = malloc((n + 1) * sizeof(*active));
	jobs = malloc((n + 1) * sizeof(*jobs));
	waits = malloc((n + 1) * sizeof(*waits));
	if (!pods || !order || !active || !jobs || !waits) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		const struct cnl_trace_pod *p = &w->pods[i % w->n_pods];
		size_t copy = i / w->n_pods;
		struct rpod *x = &pods[i];
		if (p->creation < 0 || p->deletion < 0) {
			r = -CNL_EPARSE;
			goto out;
		}
		x->arrive = (int64_t)((double)p->creation * rc->arrival_scale) +
		            (int64_t)copy;
		int64_t run = p->scheduled >= 0 ? p->deletion - p->scheduled
		                                : p->deletion - p->creation;
		x->runtime = run > 0 ? run : 1;
		x->team =
		    1 + (cnl_hash_str(p->name) + 2654435761u * (uint32_t)copy) %
		            (uint32_t)rc->teams;
		if (!strcmp(p->qos, "Guaranteed"))
			x->prio = CNL_PRIO_CRITICAL;
		else if (!strcmp(p->qos, "LS"))
			x->prio = CNL_PRIO_HIGH;
		else if (!strcmp(p->qos, "Burstable"))
			x->prio = CNL_PRIO_NORMAL;
		else
			x->prio = CNL_PRIO_LOW;
		x->preemptible = x->prio == CNL_PRIO_LOW;
		x->first_start = -1;
		if ((r = cnl_trace_pod_req(&w->cat, p, x->team, &x->req)) < 0)
			goto out;
		order[i] = (uint32_t)i;
	}
	sort_base = pods;
	qsort(order, n, sizeof(*order), cmp_arrive);

	cnl_sched_config_default(&cfg);
	snprintf(cfg.policy, sizeof(cfg.policy), "%s", rc->policy);
	cfg.mix = w->mix;
	cfg.idle_power_down_ms = 0;
	if ((r = cnl_sched_new(&cfg, &s)) < 0 ||
	    (r = cnl_cluster_new(&w->cat, &c)) < 0)
		goto out;
	for (size_t i = 0; i < w->n_nodes; i++)
		if ((r = cnl_cluster_add_node(c, &w->nodes[i])) < 0)
			goto out;

	int64_t cap = w->gpus * CNL_BLOCKS_PER_GPU, held = 0;
	size_t next_arrival = 0, n_active = 0;
	int64_t t = n ? pods[order[0]].arrive : 0, t0 = t, last_t = t;
	int64_t t_last_arrival = n ? pods[order[n - 1]].arrive : 0;
	double alloc_area = 0, prev_ap = 0;
	if (rc->csv)
		fprintf(rc->csv, "t_seconds,alloc_pct,pending\n");
	for (;;) {
		/* Departures and arrivals up to t. */
		size_t k = 0;
		for (size_t i = 0; i < n_active; i++) {
			struct rpod *x = &pods[active[i]];
			if (x->state == RUNNING && x->end <= t) {
				const struct cnl_alloc *a =
				    cnl_alloc_get(c, x->alloc);
				int64_t b = a ? cnl_alloc_blocks_held(c, a) : 0;
				cnl_fs_charge(cnl_sched_fairshare(s), x->team,
				              b, x->start * 1000,
				              x->end * 1000);
				cnl_alloc_free(c, x->alloc);
				held -= b;
				x->state = DONE;
				continue;
			}
			active[k++] = active[i];
		}
		n_active = k;
		while (next_arrival < n &&
		       pods[order[next_arrival]].arrive <= t) {
			pods[order[next_arrival]].state = PENDING;
			active[n_active++] = order[next_arrival++];
		}
		/* The scheduler, over waiting and running pods. */
		size_t nj = 0, n_pend = 0;
		for (size_t i = 0; i < n_active; i++) {
			struct rpod *x = &pods[active[i]];
			struct cnl_job *j = &jobs[nj++];
			memset(j, 0, sizeof(*j));
			j->id = active[i];
			j->state = x->state == RUNNING ? CNL_JOB_RUNNING
			                               : CNL_JOB_PENDING;
			j->prio = x->prio;
			j->preemptible = x->preemptible;
			j->req = x->req;
			j->submit_ms = x->arrive * 1000;
			j->runtime_ms = x->runtime * 1000;
			j->alloc_id = x->alloc;
			j->start_ms = x->start * 1000;
			n_pend += x->state == PENDING;
		}
		if (n_pend) {
			if ((r = cnl_sched_cycle(s, c, jobs, nj, t * 1000,
			                         (uint64_t)t, &dec)) < 0)
				goto out;
			res.cycles++;
			for (size_t i = 0; i < dec.n; i++) {
				const struct cnl_decision *d = &dec.d[i];
				if (d->kind != CNL_DEC_START &&
				    d->kind != CNL_DEC_PREEMPT)
					continue;
				struct rpod *x = &pods[jobs[d->job].id];
				if (d->kind == CNL_DEC_PREEMPT) {
					/* Released in the snapshot already;
					 * the work done is lost. */
					int64_t b = 0;
					const struct cnl_alloc_req *q = &x->req;
					b = q->kind == CNL_REQ_BLOCKS
					        ? q->blocks
					    : q->kind == CNL_REQ_WHOLE
					        ? 100 * q->gpus
					        : 0;
					held -= b;
					res.preemptions++;
					res.lost_gpu_hours +=
					    (double)b / 100.0 *
					    (double)(t - x->start) / 3600.0;
					cnl_fs_charge(
					    cnl_sched_fairshare(s), x->team, b,
					    x->start * 1000, t * 1000);
					x->state = PENDING;
					x->alloc = 0;
					continue;
				}
				const struct cnl_alloc *a =
				    cnl_alloc_get(c, d->alloc_id);
				x->state = RUNNING;
				x->alloc = d->alloc_id;
				x->start =
				    d->at_ms / 1000 > t ? d->at_ms / 1000 : t;
				x->end = x->start + x->runtime;
				if (x->first_start < 0)
					x->first_start = x->start;
				held += a ? cnl_alloc_blocks_held(c, a) : 0;
			}
		}
		/* The time series. */
		/* The allocation held since the previous event, then now;
		 * the mean is taken while pods still arrive. */
		double ap = 100.0 * (double)held / (double)cap;
		if (last_t < t_last_arrival)
			alloc_area +=
			    prev_ap *
			    (double)((t < t_last_arrival ? t : t_last_arrival) -
			             last_t);
		if (ap > res.alloc_peak)
			res.alloc_peak = ap;
		prev_ap = ap;
		last_t = t;
		uint32_t pend = 0;
		for (size_t i = 0; i < n_active; i++)
			pend += pods[active[i]].state == PENDING;
		if (res.n_points == cap_pts) {
			cap_pts = cap_pts ? cap_pts * 2 : 1024;
			struct cnl_replay_point *np =
			    realloc(res.points, cap_pts * sizeof(*np));
			if (!np) {
				r = -ENOMEM;
				goto out;
			}
			res.points = np;
		}
		res.points[res.n_points++] =
		    (struct cnl_replay_point){t, ap, pend};
		if (rc->csv)
			fprintf(rc->csv, "%lld,%.3f,%u\n", (long long)t, ap,
			        pend);
		/* The next event. */
		int64_t next = INT64_MAX;
		if (next_arrival < n)
			next = pods[order[next_arrival]].arrive;
		for (size_t i = 0; i < n_active; i++) {
			const struct rpod *x = &pods[active[i]];
			if (x->state == RUNNING && x->end < next)
				next = x->end > t ? x->end : t + 1;
		}
		if (next == INT64_MAX)
			break;
		t = next;
	}
	/* Statistics. */
	size_t nw = 0;
	double sum = 0;
	double num[65] = {0}, den[65] = {0};
	for (size_t i = 0; i < n; i++) {
		const struct rpod *x = &pods[i];
		res.pods++;
		if (x->first_start < 0) {
			res.never_started++;
			continue;
		}
		res.started++;
		waits[nw] = x->first_start - x->arrive;
		sum += (double)waits[nw];
		res.waited_share += waits[nw] > 0;
		nw++;
		if (x->state == DONE) {
			num[x->team] +=
			    (double)(x->end - x->arrive) / (double)x->runtime;
			den[x->team] += 1;
		}
	}
	qsort(waits, nw, sizeof(*waits), cmp_i64);
	res.wait_mean = nw ? sum / (double)nw : 0;
	res.wait_p50 = pct(waits, nw, 0.50);
	res.wait_p95 = pct(waits, nw, 0.95);
	res.wait_p99 = pct(waits, nw, 0.99);
	res.waited_share = nw ? res.waited_share / (double)nw : 0;
	double sx = 0, sxx = 0;
	int teams = 0;
	for (int tm = 1; tm <= rc->teams; tm++) {
		if (!den[tm])
			continue;
		double xv = 1.0 / (num[tm] / den[tm]); /* 1 / mean slowdown */
		sx += xv;
		sxx += xv * xv;
		teams++;
	}
	res.jain = teams && sxx > 0 ? sx * sx / ((double)teams * sxx) : 1;
	res.span = last_t - t0;
	res.alloc_mean = t_last_arrival > t0
	                     ? alloc_area / (double)(t_last_arrival - t0)
	                     : 0;
	*ret = res;
	res.points = NULL;
	r = 0;
out:
	free(res.points);
	free(pods);
	free(order);
	free(active);
	free(jobs);
	free(waits);
	cnl_decisions_done(&dec);
	cnl_sched_free(s);
	cnl_cluster_free(c);
	return r;
}
