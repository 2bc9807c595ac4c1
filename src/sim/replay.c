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
#include "sched/forecast.h"
#include "sched/pick.h"
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

/* A cloud instance of the burst (see replay.h). */
struct cloud {
	uint32_t node; /* its index in the cluster */
	uint8_t state; /* 0 terminated (slot free), 1 booting, 2 up */
	int64_t launched, ready, idle_since;
};

#define CLOUD_IDLE_S 30 /* an idle instance is terminated after this */

struct burst {
	const struct cnl_replay_config *rc;
	struct cloud *cl;
	size_t n_cl; /* slots made (nodes added to the cluster) */
	int gtype;   /* the instances' GPU type */
	double price, threshold;
	int gpus, max;
	int64_t boot;
	double cost, gpu_hours;
	size_t launched;
};

static void cloud_stop(struct burst *b, struct cnl_cluster *c, struct cloud *x,
                       int64_t t)
{
	double hours = (double)(t - x->launched) / 3600.0 * b->gpus;

	cnl_cluster_set_node_state(c, x->node, CNL_NODE_DOWN);
	x->state = 0;
	b->gpu_hours += hours;
	b->cost += hours * b->price;
}

/* Launch @n instances at @t (slots reused, else new nodes). */
static int cloud_launch(struct burst *b, struct cnl_cluster *c,
                        const struct cnl_catalog *cat, int n, int64_t t)
{
	for (size_t i = 0; i < (size_t)b->max && n > 0; i++) {
		struct cloud *x = &b->cl[i];

		if (i < b->n_cl && x->state)
			continue;
		if (i == b->n_cl) {
			char name[64];
			struct cnl_node_spec s = {.name = name,
			                          .gpu_type = b->gtype,
			                          .n_gpus = b->gpus,
			                          .cpu_milli = 192000,
			                          .mem_mib = 2048 * 1024,
			                          .cluster = "cloud"};
			int r;

			snprintf(name, sizeof(name), "cloud-%zu", i);
			if ((r = cnl_cluster_add_node(c, &s)) < 0)
				return r;
			x->node = (uint32_t)r;
			b->n_cl++;
		}
		(void)cat;
		cnl_cluster_set_node_state(c, x->node, CNL_NODE_DOWN);
		x->state = 1;
		x->launched = t;
		x->ready = t + b->boot;
		x->idle_since = 0;
		b->launched++;
		n--;
	}
	return 0;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

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
	struct cnl_forecast fc;
	struct {
		int64_t due;
		double v, naive; /* forecast; the demand when it was made */
	} preds[CNL_FC_PENDING + 2];
	size_t n_preds = 0, n_errs = 0, cap_errs = 0;
	double *errs = NULL, *nerrs = NULL, prev_demand = 0, cloud_only = 0;
	struct burst bu = {.rc = rc};
	struct cnl_node_set local = {0};

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
	cnl_fc_init(&fc);
	bu.threshold = rc->burst_threshold > 0 ? rc->burst_threshold : 0.9;
	bu.price = rc->cloud_gpu_price > 0 ? rc->cloud_gpu_price : 3.0;
	bu.gpus = rc->cloud_gpus > 0 ? rc->cloud_gpus : 8;
	bu.boot = rc->cloud_boot_s > 0 ? rc->cloud_boot_s : 120;
	bu.max = rc->cloud_max > 0 ? rc->cloud_max : 32;
	if (bu.threshold > 1 || bu.gpus > CNL_NODE_MAX_GPUS || bu.max > 4096) {
		r = -CNL_ECONFIG;
		goto out;
	}
	bu.cl = calloc((size_t)bu.max + 1, sizeof(*bu.cl));
	local.len = (uint32_t)w->n_nodes;
	local.bits = calloc(w->n_nodes / 64 + 1, sizeof(uint64_t));
	if (!pods || !order || !active || !jobs || !waits || !bu.cl ||
	    !local.bits) {
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
		cloud_only += (double)cnl_req_blocks(&x->req) / 100.0 *
		              (double)x->runtime / 3600.0 * bu.price;
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
	for (size_t i = 0; i < w->n_nodes; i++) {
		if ((r = cnl_cluster_add_node(c, &w->nodes[i])) < 0)
			goto out;
		local.bits[i >> 6] |= 1ULL << (i & 63);
	}
	/* The instances' GPU type: the world's most common. */
	{
		int64_t per[CNL_CATALOG_MAX_TYPES] = {0}, best = -1;

		for (size_t i = 0; i < w->n_nodes; i++)
			if (w->nodes[i].n_gpus && w->nodes[i].gpu_type >= 0)
				per[w->nodes[i].gpu_type] += w->nodes[i].n_gpus;
		for (int g = 0; g < CNL_CATALOG_MAX_TYPES; g++)
			if (per[g] > best) {
				best = per[g];
				bu.gtype = g;
			}
	}

	int64_t cap = w->gpus * CNL_BLOCKS_PER_GPU, held = 0;
	size_t next_arrival = 0, n_active = 0;
	int64_t t = n ? pods[order[0]].arrive : 0, t0 = t, last_t = t;
	int64_t t_last_arrival = n ? pods[order[n - 1]].arrive : 0;
	double alloc_area = 0, prev_ap = 0;
	if (rc->csv)
		fprintf(rc->csv, "t_seconds,alloc_pct,pending\n");
	for (;;) {
		/* Forecasts due by t, against the demand that held until t. */
		size_t kp = 0;
		for (size_t i = 0; i < n_preds; i++) {
			if (preds[i].due > t) {
				preds[kp++] = preds[i];
				continue;
			}
			/* Scored while pods arrive: the quiet tail of
			 * long runs would flatter any forecast. */
			if (preds[i].due > t_last_arrival)
				continue;
			if (n_errs == cap_errs) {
				cap_errs = cap_errs ? 2 * cap_errs : 4096;
				double *ne =
				    realloc(errs, cap_errs * sizeof(*ne));
				double *nn =
				    ne ? realloc(nerrs, cap_errs * sizeof(*nn))
				       : NULL;
				if (ne)
					errs = ne;
				if (!nn) {
					r = -ENOMEM;
					goto out;
				}
				nerrs = nn;
			}
			nerrs[n_errs] = fabs(preds[i].naive - prev_demand);
			errs[n_errs++] = fabs(preds[i].v - prev_demand);
		}
		n_preds = kp;
		/* Instances that finished booting take work. */
		for (size_t i = 0; i < bu.n_cl; i++)
			if (bu.cl[i].state == 1 && bu.cl[i].ready <= t) {
				bu.cl[i].state = 2;
				cnl_cluster_set_node_state(c, bu.cl[i].node,
				                           CNL_NODE_UP);
			}
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
			cnl_fc_arrival(
			    &fc, t * 1000,
			    cnl_req_blocks(&pods[order[next_arrival]].req));
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
			j->prefer = &local; /* on-prem first */
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
					int64_t b = cnl_req_blocks(&x->req);

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
		/* The forecast, and the burst that acts on it. */
		{
			double pend_b = 0, ending = 0, cap_on = (double)cap,
			       booting = 0, held_local = 0, pred;
			int idle_cloud = 0;
			int64_t step = t * 1000 / CNL_FC_STEP_MS;

			for (size_t i = 0; i < n_active; i++) {
				const struct rpod *x = &pods[active[i]];
				double b = cnl_req_blocks(&x->req);

				if (x->state == PENDING)
					pend_b += b;
				else if (x->state == RUNNING &&
				         x->end <= t + 90)
					ending += b;
			}
			for (size_t i = 0; i < bu.n_cl; i++)
				if (bu.cl[i].state == 2) {
					cap_on += 100.0 * bu.gpus;
					idle_cloud +=
					    !c->nodes[bu.cl[i].node].n_allocs;
				} else if (bu.cl[i].state == 1) {
					booting += 100.0 * bu.gpus;
				}
			for (size_t i = 0; i < w->n_nodes; i++)
				for (int g = 0; g < c->nodes[i].n_gpus; g++)
					held_local += CNL_BLOCKS_PER_GPU -
					              cnl_gpu_free_blocks(
					                  c, (uint32_t)i, g);
			prev_demand = ((double)held + pend_b) / cap_on;
			cnl_fc_tick(&fc, t * 1000, prev_demand);
			pred = cnl_fc_predict(
			    &fc, t * 1000,
			    &(struct cnl_fc_now){.capacity = cap_on,
			                         .held = (double)held,
			                         .ending = ending,
			                         .pending = pend_b});
			if (!n_preds ||
			    preds[n_preds - 1].due * 1000 / CNL_FC_STEP_MS !=
			        step + 9) {
				if (n_preds == CNL_FC_PENDING + 2) {
					memmove(preds, preds + 1,
					        (n_preds - 1) *
					            sizeof(preds[0]));
					n_preds--;
				}
				preds[n_preds].due = t + 90;
				preds[n_preds].naive = prev_demand;
				preds[n_preds++].v = pred;
			}
			/* At the stall: local use at the threshold, the
			 * launch sized by the work waiting.  At the forecast
			 * (cnlabd's burst.c): demand 90 s ahead at the
			 * threshold and beyond the capacity, the launch sized
			 * by that excess, no more than the work waiting; both
			 * less what is booting. */
			double excess = 0;
			if (rc->burst == CNL_BURST_STALL && pend_b > 0 &&
			    held_local >= bu.threshold * (double)cap)
				excess = pend_b - booting;
			if (rc->burst == CNL_BURST_FORECAST && pend_b > 0 &&
			    pred >= bu.threshold && pred > 1)
				excess =
				    fmin((pred - 1) * cap_on, pend_b) - booting;
			(void)idle_cloud;
			if (excess > 0) {
				int want =
				    (int)ceil(excess / (100.0 * bu.gpus));
				if ((r = cloud_launch(&bu, c, &w->cat, want,
				                      t)) < 0)
					goto out;
			}
			/* Idle instances go back once local use is below the
			 * threshold, or the work there is fits without them. */
			for (size_t i = 0; i < bu.n_cl; i++) {
				struct cloud *x = &bu.cl[i];

				if (x->state != 2)
					continue;
				if (c->nodes[x->node].n_allocs) {
					x->idle_since = 0;
					continue;
				}
				if (!x->idle_since)
					x->idle_since = t;
				if (t - x->idle_since >= CLOUD_IDLE_S &&
				    (held_local < bu.threshold * (double)cap ||
				     (double)held + pend_b <=
				         cap_on - 100.0 * bu.gpus)) {
					cloud_stop(&bu, c, x, t);
					cap_on -= 100.0 * bu.gpus;
				}
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
		for (size_t i = 0; i < bu.n_cl; i++) {
			const struct cloud *x = &bu.cl[i];
			int64_t at = x->state == 1 ? x->ready
			             : x->state == 2 && x->idle_since
			                 ? x->idle_since + CLOUD_IDLE_S
			                 : INT64_MAX;

			if (at < next)
				next = at > t ? at : t + 1;
		}
		if (next == INT64_MAX)
			break;
		t = next;
	}
	for (size_t i = 0; i < bu.n_cl; i++)
		if (bu.cl[i].state)
			cloud_stop(&bu, c, &bu.cl[i], last_t);
	res.cloud_launched = bu.launched;
	res.cloud_gpu_hours = bu.gpu_hours;
	res.cloud_cost = bu.cost;
	res.cloud_only_cost = cloud_only;
	if (n_errs) {
		double esum = 0, nsum = 0;
		size_t p95 = (size_t)ceil(0.95 * (double)n_errs) - 1;

		for (size_t i = 0; i < n_errs; i++) {
			esum += errs[i];
			nsum += nerrs[i];
		}
		qsort(errs, n_errs, sizeof(*errs), cmp_dbl);
		qsort(nerrs, n_errs, sizeof(*nerrs), cmp_dbl);
		res.fc_mae = esum / (double)n_errs;
		res.fc_p95 = errs[p95];
		res.naive_mae = nsum / (double)n_errs;
		res.naive_p95 = nerrs[p95];
		res.fc_scored = n_errs;
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
	free(errs);
	free(nerrs);
	free(bu.cl);
	free(local.bits);
	cnl_decisions_done(&dec);
	cnl_sched_free(s);
	cnl_cluster_free(c);
	return r;
}
