/*
 * ctl_loop.c - the scheduling loop: one cycle of the scheduler library
 * over the live cluster, recorded in one transaction before it is applied
 * to memory; servers sent back to their home node; gangs kept whole;
 * nodes silent past their timeout declared lost; metering; the loop
 * thread and its wake-ups.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/json.h"
#include "common/label.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "net/metrics.h"
#include "net/otel.h"
#include "sched/sched.h"
#include "server/ctl-internal.h"
#include "server/shape.h"

/* ---- the cycle ----------------------------------------------------------- */

/*
 * The facts behind a START of @w on node @d->node, taken now from what the
 * controller knows for certain: the decision's reason, the node's labels
 * and GPU type, and the job's own fields.  @home: a server sent back to
 * its home node.
 */
static void explain(struct cnl_ctl *ctl, struct wl *w,
                    const struct cnl_decision *d, bool home, int64_t now)
{
	const struct cnl_cluster *c = ctl->cluster;
	const struct cnl_node *n = &c->nodes[d->node];
	struct why *y = &w->why;

	memset(y, 0, sizeof(*y));
	snprintf(y->node, sizeof(y->node), "%s", ctl->nodes[d->node].name);
	snprintf(y->cluster, sizeof(y->cluster), "%s", n->cluster);
	snprintf(y->zone, sizeof(y->zone), "%s", n->zone);
	snprintf(y->rack, sizeof(y->rack), "%s", n->rack);
	y->type_allowed = y->dataset_local = y->preferred = -1;
	if (w->j.prefer)
		y->preferred = cnl_node_set_has(w->j.prefer, d->node);
	if (n->n_gpus && w->j.req.kind != CNL_REQ_CPU) {
		snprintf(y->gpu_type, sizeof(y->gpu_type), "%s",
		         c->cat->types[n->gpu_type].name);
		if (w->n_gpu_types)
			y->type_allowed =
			    (w->j.req.gpu_types >> n->gpu_type & 1) != 0;
	}
	if (w->j.dataset[0]) {
		y->dataset_local = 0;
		for (uint32_t i = 0; i < c->n_nodes; i++)
			for (int k = 0; k < c->nodes[i].n_datasets; k++) {
				if (strcmp(c->nodes[i].datasets[k],
				           w->j.dataset) != 0)
					continue;
				if (i == d->node)
					y->dataset_local = 1;
				else if (y->holders < UINT8_MAX)
					y->holders++;
			}
	}
	y->reason = home ? WHY_HOME : d->reason;
	y->at_ms = now;
}

/* ---- the scheduler's decisions in the audit chain ------------------------ */

/*
 * One stage's decision for workload @id, appended to the hash-chained
 * audit log as actor "scheduler", action "sched.<stage>", target the
 * workload, result the decision in words (cut at the log's field size).
 * The stages are those of DESIGN.md's scheduler: auth, quota, queue and
 * admission are recorded at submission (api_decisions.c); cluster, slice
 * and preempt here, when the cycle decides them.  A pending workload's
 * slice decision is recorded when its reason changes, not every cycle.
 */
int ctl_decide(struct cnl_ctl *ctl, const char *id, const char *stage,
               int64_t now, const char *fmt, ...)
{
	struct cnl_store_audit a = {0};
	int64_t t0 = cnl_otel_now_ns();
	va_list ap;
	int r;

	a.ts_ms = now;
	snprintf(a.actor, sizeof(a.actor), "scheduler");
	snprintf(a.action, sizeof(a.action), "sched.%s", stage);
	snprintf(a.target, sizeof(a.target), "%s", id);
	va_start(ap, fmt);
	vsnprintf(a.result, sizeof(a.result), fmt, ap);
	va_end(ap);
	if ((r = cnl_store_audit_append(ctl->store, &a, NULL)) < 0)
		cnl_log(CNL_LOG_ERROR, "cannot audit a scheduling decision",
		        "id=%s stage=%s err=%s", id, stage, cnl_errname(r));
	ctl_trace_stage(ctl, id, stage, a.result, t0);
	return r;
}

/* The cluster and the slice of a START of @w (memory as recorded). */
static int decide_start(struct cnl_ctl *ctl, const struct wl *w, int64_t now)
{
	const struct cnl_cluster *c = ctl->cluster;
	const struct cnl_alloc *a = &w->placed;
	const struct cnl_node *n;
	const char *node;
	char gpus[64] = "";
	int r;

	if (w->node < 0 || (size_t)w->node >= ctl->n_nodes)
		return 0;
	n = &c->nodes[w->node];
	node = ctl->nodes[w->node].name;
	if ((r = ctl_decide(ctl, w->id, "cluster", now,
	                    "cluster %s chosen: node %s, zone %s, rack %s",
	                    n->cluster[0] ? n->cluster : "(default)", node,
	                    n->zone[0] ? n->zone : "-",
	                    n->rack[0] ? n->rack : "-")) < 0)
		return r;
	for (int g = 0, at = 0; g < 16 && at < (int)sizeof(gpus) - 4; g++)
		if (a->gpu_mask >> g & 1)
			at += snprintf(gpus + at, sizeof(gpus) - (size_t)at,
			               "%s%d", at ? "," : "", g);
	switch (a->kind) {
	case CNL_PLACE_BLOCKS:
	case CNL_PLACE_MIG_BLOCKS:
		return ctl_decide(
		    ctl, w->id, "slice", now,
		    "placed on node %s: GPU %d, %d blocks%s (shape %s)", node,
		    a->gpu, a->blocks,
		    a->kind == CNL_PLACE_MIG_BLOCKS ? " of a MIG host instance"
		                                    : "",
		    w->shape);
	case CNL_PLACE_MIG:
		return ctl_decide(
		    ctl, w->id, "slice", now,
		    "placed on node %s: GPU %d, MIG instance %s at slot %d "
		    "(shape %s)",
		    node, a->gpu,
		    n->gpu_type >= 0 && n->gpu_type < c->cat->n &&
		            a->profile < c->cat->types[n->gpu_type].n_mig
		        ? c->cat->types[n->gpu_type].mig[a->profile].name
		        : "?",
		    a->start, w->shape);
	case CNL_PLACE_WHOLE:
		return ctl_decide(ctl, w->id, "slice", now,
		                  "placed on node %s: whole GPUs %s (shape %s)",
		                  node, gpus, w->shape);
	default:
		return ctl_decide(ctl, w->id, "slice", now,
		                  "placed on node %s: CPU and memory only",
		                  node);
	}
}

/* PLACE: 0, or -CNL_ESTATE with @w unchanged. */
static int apply_start(struct cnl_ctl *ctl, struct wl *w,
                       const struct cnl_decision *d, bool home, int64_t now)
{
	const struct cnl_alloc *a = cnl_alloc_get(ctl->cluster, d->alloc_id);
	int r;

	if ((r = ctl_step(w, CNL_WL_EV_PLACE)) < 0)
		return r;
	w->node = (int)d->node;
	w->alloc_id = d->alloc_id;
	if (a)
		w->placed = *a;
	w->shrink_to = 0; /* placed at the size asked (ctl_resize.c) */
	w->epoch++;
	w->started_ms = d->at_ms > now ? d->at_ms : now;
	w->not_before_ms = d->at_ms > now ? d->at_ms : 0;
	explain(ctl, w, d, home, now);
	return 0;
}

/* PREEMPT: 0, or -CNL_ESTATE with @w unchanged. */
static int apply_preempt(struct wl *w, const struct cnl_decision *d)
{
	int r;

	if ((r = ctl_step(w, CNL_WL_EV_PREEMPT)) < 0)
		return r;
	/* The scheduler released the victim's allocation in the snapshot. */
	w->alloc_id = 0;
	w->signal_ms = d->at_ms;
	w->kill_ms = d->kill_ms;
	w->preemptions++;
	return 0;
}

/*
 * Record every START and PREEMPT of @dec in one transaction, working on
 * copies; 0 when committed, else an error and nothing is recorded.
 */
int ctl_record(struct cnl_ctl *ctl, const struct cnl_decisions *dec,
               const size_t *map, size_t n, int64_t now)
{
	size_t k = 0;
	int r;

	/* Most cycles start and pre-empt nothing: no transaction, so no
	 * empty commit each cycle. */
	while (k < dec->n && ((dec->d[k].kind != CNL_DEC_START &&
	                       dec->d[k].kind != CNL_DEC_PREEMPT) ||
	                      dec->d[k].job >= n))
		k++;
	if (k == dec->n)
		return 0;
	if ((r = cnl_store_tx_begin(ctl->store)) < 0)
		return r;
	for (size_t i = k; i < dec->n; i++) {
		const struct cnl_decision *d = &dec->d[i];
		struct wl tmp;

		if ((d->kind != CNL_DEC_START && d->kind != CNL_DEC_PREEMPT) ||
		    d->job >= n)
			continue;
		tmp = ctl->wl[map[d->job]];
		r = d->kind == CNL_DEC_START
		        ? apply_start(ctl, &tmp, d, false, now)
		        : apply_preempt(&tmp, d);
		if (r == 0)
			r = ctl_persist(ctl, &tmp, now);
		/* The decision enters the audit chain with the change it
		 * makes, or neither is recorded. */
		if (r == 0 && d->kind == CNL_DEC_START)
			r = decide_start(ctl, &tmp, now);
		if (r == 0 && d->kind == CNL_DEC_PREEMPT)
			r = ctl_decide(
			    ctl, tmp.id, "preempt", now,
			    "pre-empted to make room for %s on node %s; "
			    "killed after %" PRId64 " s unless it ends",
			    d->for_job < n ? ctl->wl[map[d->for_job]].id : "?",
			    tmp.node >= 0 && (size_t)tmp.node < ctl->n_nodes
			        ? ctl->nodes[tmp.node].name
			        : "?",
			    (d->kill_ms - d->at_ms) / 1000);
		if (r < 0) {
			cnl_store_tx_rollback(ctl->store);
			return r;
		}
	}
	if ((r = cnl_store_tx_commit(ctl->store)) < 0)
		cnl_store_tx_rollback(ctl->store);
	return r;
}

/*
 * Servers go back to their home node when it can take them: their
 * workspace is there (nodes share no storage).  Placed before the cycle,
 * recorded like a START; otherwise the scheduler places them anywhere.
 */
static void place_home(struct cnl_ctl *ctl, int64_t now)
{
	for (size_t i = 0; i < ctl->n_wl; i++) {
		struct wl *w = &ctl->wl[i], tmp;
		struct cnl_req_prep p;
		struct cnl_plan pl;
		uint32_t id;

		if (!w->server || w->state != CNL_WL_PENDING || w->home < 0 ||
		    (size_t)w->home >= ctl->n_nodes ||
		    ctl->nodes[w->home].state != N_UP)
			continue;
		/* Not where its project's quota is spent (ctl_cloud.c): the
		 * pick sends it elsewhere. */
		if (cnl_ctl_cluster_quota_spent(
		        ctl, w->project_id,
		        ctl->cluster->nodes[w->home].cluster[0]
		            ? ctl->cluster->nodes[w->home].cluster
		            : "default"))
			continue;
		if (cnl_alloc_prepare(ctl->cluster, &w->j.req, &p) < 0 ||
		    cnl_alloc_plan_node(ctl->cluster, &p, (uint32_t)w->home,
		                        &pl) < 0 ||
		    cnl_alloc_commit(ctl->cluster, &p, &pl, &id) < 0)
			continue;
		struct cnl_decision d = {.kind = CNL_DEC_START,
		                         .node = (uint32_t)w->home,
		                         .alloc_id = id,
		                         .at_ms = now};
		tmp = *w;
		if (apply_start(ctl, &tmp, &d, true, now) < 0 ||
		    ctl_persist(ctl, &tmp, now) < 0) {
			cnl_alloc_free(ctl->cluster, id);
			continue;
		}
		*w = tmp;
		ctl_metrics_placed(ctl, w, now);
		decide_start(ctl, w, now);
		ctl_node_changed(ctl, w->node);
		ctl_facts_touch(ctl, w);
	}
}

/* Whether @w is back in the queue or on its way there. */
bool ctl_requeued(const struct wl *w)
{
	return w->state == CNL_WL_PENDING || w->state == CNL_WL_REQUEUING;
}

/*
 * A gang runs whole or not at all.  When a member is back in the queue
 * (its node was lost, its agent lost it, it was pre-empted) while others
 * still hold their places, those are stopped and requeued too, keeping
 * their allocations until they have left: the scheduler starts a gang
 * only when all its members are pending, so the gang starts again
 * together.  When a member has ended for good (succeeded, failed,
 * cancelled), members still waiting could never start with it: they
 * fail, saying why.  Runs before each cycle.
 */
static void gangs_check(struct cnl_ctl *ctl, int64_t now)
{
	for (size_t i = 0; i < ctl->n_wl; i++) {
		const char *gid = ctl->wl[i].gang_id;
		size_t active = 0;
		bool back = false, first = true;

		if (!gid[0])
			continue;
		for (size_t k = 0; k < ctl->n_wl; k++) {
			const struct wl *m = &ctl->wl[k];

			if (strcmp(m->gang_id, gid) != 0)
				continue;
			first &= k >= i;
			active++;
			back |= ctl_requeued(m);
		}
		if (!first || !back)
			continue; /* seen already, or whole */
		for (size_t k = 0; k < ctl->n_wl; k++) {
			struct wl *m = &ctl->wl[k], next;

			if (strcmp(m->gang_id, gid) != 0)
				continue;
			if (active < ctl->wl[i].gang_size) {
				m->doomed = m->state == CNL_WL_PENDING;
				continue;
			}
			if (m->state != CNL_WL_ASSIGNED &&
			    m->state != CNL_WL_STARTED)
				continue;
			next = *m;
			if (ctl_step(&next, CNL_WL_EV_REQUEUE) < 0)
				continue;
			next.signal_ms = now;
			next.kill_ms = now + 30000;
			if (ctl_persist(ctl, &next, now) < 0)
				continue; /* tried again next cycle */
			*m = next;
			cnl_log(CNL_LOG_INFO,
			        "gang member requeued with its gang",
			        "id=%s gang=%s", m->id, gid);
			ctl_node_changed(ctl, m->node);
		}
	}
	/* Backwards: removal moves the last one, already seen, here. */
	for (size_t i = ctl->n_wl; i-- > 0;) {
		struct wl *w = &ctl->wl[i], end;

		if (!w->doomed)
			continue;
		w->doomed = false;
		end = *w;
		snprintf(end.message, sizeof(end.message),
		         "a member of its gang has ended, so the gang cannot "
		         "start again");
		if (ctl_step(&end, CNL_WL_EV_INVALID) < 0 ||
		    ctl_persist_end(ctl, &end, false, -1, now) < 0)
			continue;
		cnl_log(CNL_LOG_WARN, "gang cannot start again; member failed",
		        "id=%s gang=%s", w->id, w->gang_id);
		ctl->finished[1]++;
		ctl_wl_remove(ctl, w);
		ctl->dirty = ctl->changed = true;
	}
}

/* The clusters picked for jobs this cycle (ctl_cycle_split), audited in
 * one transaction; should it fail, only these records are lost (logged). */
static void audit_picks(struct cnl_ctl *ctl, int64_t now)
{
	bool tx;

	if (!ctl->n_picks)
		return;
	tx = cnl_store_tx_begin(ctl->store) == 0;
	for (size_t i = 0; i < ctl->n_picks; i++)
		ctl_decide(ctl, ctl->picks[i].id, "cluster", now, "%s",
		           ctl->picks[i].text);
	if (tx && cnl_store_tx_commit(ctl->store) < 0) {
		cnl_log(CNL_LOG_ERROR, "cannot audit cluster picks", "db=%s",
		        cnl_store_errmsg(ctl->store));
		cnl_store_tx_rollback(ctl->store);
	}
	ctl->n_picks = 0;
}

static void run_cycle(struct cnl_ctl *ctl, int64_t now)
{
	/* Kept between cycles, like the jobs array (ctl_cycle_jobs()). */
	struct cnl_decisions *dec = &ctl->cyc_dec;
	struct cnl_job *jobs;
	size_t *map, n;
	struct timespec t0, t1;
	bool tx, tried;
	int r;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	ctl->idle_cycle = true;
	ctl->changed = false; /* what changed before, this cycle sees */
	gangs_check(ctl, now);
	place_home(ctl, now);
	ctl_resize_admit(ctl, now);
	n = ctl_cycle_jobs(ctl, &jobs, &map);
	/* Several clusters: each its own cycle (ctl_cluster.c). */
	ctl->n_picks = 0;
	r = ctl_cycle_split(ctl, jobs, map, n, now, dec);
	audit_picks(ctl, now);
	if (r == 0)
		r = cnl_sched_cycle_inc(ctl->sched, ctl->cluster, jobs, n, now,
		                        ctl->cfg.seed ^ (uint64_t)now, dec);
	if (r < 0) {
		cnl_log(CNL_LOG_ERROR, "scheduling cycle failed", "err=%s",
		        cnl_errname(r));
		goto out;
	}
	if ((r = ctl_record(ctl, dec, map, n, now)) < 0) {
		/* Not recorded, so not visible: put the snapshot back and
		 * try again on the next tick (the timer's, which forces a
		 * cycle: not at once, so a failing store is not spun on). */
		cnl_log(CNL_LOG_ERROR, "cannot persist decisions",
		        "err=%s db=%s", cnl_errname(r),
		        cnl_store_errmsg(ctl->store));
		for (size_t i = 0; i < dec->n; i++)
			if (dec->d[i].kind == CNL_DEC_START)
				cnl_alloc_free(ctl->cluster,
				               dec->d[i].alloc_id);
		for (size_t i = 0; i < dec->n; i++)
			if (dec->d[i].kind == CNL_DEC_PREEMPT &&
			    dec->d[i].job < n) {
				struct wl *w = &ctl->wl[map[dec->d[i].job]];

				cnl_alloc_adopt(ctl->cluster, &w->placed,
				                &w->alloc_id);
			}
		goto out;
	}
	/* The wait reasons that changed are audited in one transaction (one
	 * commit): the first cycle after a restart, or after a burst of
	 * submissions, can change thousands.  Should it fail, memory keeps
	 * the reasons and only their audit records are lost (logged). */
	tx = tried = false;
	for (size_t i = 0; i < ctl->n_nodes; i++)
		ctl->nodes[i].power_idle = false;
	for (size_t i = 0; i < dec->n; i++) {
		const struct cnl_decision *d = &dec->d[i];
		struct wl *w;

		if (d->kind == CNL_DEC_POWER_DOWN)
			ctl_power_idle(ctl, (int)d->node, d->at_ms);
		if (d->kind == CNL_DEC_POWER_DOWN || d->job >= n)
			continue;
		w = &ctl->wl[map[d->job]];
		if (d->kind == CNL_DEC_START || d->kind == CNL_DEC_PREEMPT)
			ctl->idle_cycle = false;
		switch (d->kind) {
		case CNL_DEC_START:
			/* As recorded (ctl_record() took the same steps). */
			if (apply_start(ctl, w, d, false, now) == 0) {
				ctl_node_changed(ctl, w->node);
				ctl_metrics_placed(ctl, w, now);
			}
			break;
		case CNL_DEC_WAIT: {
			int64_t est = d->at_ms > 0 ? d->at_ms : 0;
			int resv = d->reason == CNL_WHY_RESERVED &&
			                   d->node < ctl->n_nodes
			               ? (int)d->node
			               : -1;

			/* Audited when the reason changes, not every cycle;
			 * the transaction begins with the first such record
			 * (none in a quiet cycle: no empty commit). */
			if (w->wait_reason != d->reason && !tried) {
				tried = true; /* once, as before */
				tx = cnl_store_tx_begin(ctl->store) == 0;
			}
			if (w->wait_reason != d->reason)
				ctl_decide(ctl, w->id, "slice", now,
				           "pending: %s",
				           cnl_reason_text(
				               (enum cnl_reason)d->reason));
			/* Every pending job waits again each cycle: one whose
			 * wait is unchanged has nothing new for the facts
			 * (what else moves them, the periodic scan sees). */
			if (w->wait_reason == d->reason &&
			    w->est_start_ms == est && w->resv_node == resv)
				continue;
			w->wait_reason = d->reason;
			w->est_start_ms = est;
			w->resv_node = resv;
			break;
		}
		case CNL_DEC_PREEMPT:
			if (apply_preempt(w, d) == 0) {
				ctl_node_changed(ctl, w->node);
				ctl->preemptions++;
			}
			break;
		default:
			break;
		}
		ctl_facts_touch(ctl, w);
	}
	if (tx && (r = cnl_store_tx_commit(ctl->store)) < 0) {
		cnl_log(CNL_LOG_ERROR, "cannot audit scheduling decisions",
		        "err=%s db=%s", cnl_errname(r),
		        cnl_store_errmsg(ctl->store));
		cnl_store_tx_rollback(ctl->store);
	}
	ctl->cycles++;
out:
	dec->n = 0;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	cnl_hist_observe(&ctl->cycle_hist,
	                 (double)(t1.tv_sec - t0.tv_sec) +
	                     (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
}

/* Nodes silent past the timeout: lost, their work requeued. */
static void check_nodes(struct cnl_ctl *ctl, int64_t now)
{
	for (size_t i = 0; i < ctl->n_nodes; i++) {
		struct node *nd = &ctl->nodes[i], lost;
		int r;

		/* A node powered off (or being switched on) is silent, not
		 * lost. */
		if (nd->state == N_LOST || nd->power != PW_ON ||
		    now - nd->last_seen_ms <= ctl->cfg.node_lost_ms)
			continue;
		/* Record first (on copies), then change memory. */
		lost = *nd;
		lost.state = N_LOST;
		lost.epoch++;
		if (cnl_store_tx_begin(ctl->store) < 0)
			return;
		r = ctl_node_save(ctl, &lost, now);
		for (size_t k = 0; r == 0 && k < ctl->n_wl; k++) {
			struct wl tmp = ctl->wl[k];

			if (tmp.node != (int)i || !cnl_wl_placed(tmp.state))
				continue;
			if ((r = ctl_step(&tmp, CNL_WL_EV_NODE_LOST)) < 0)
				break;
			if (cnl_wl_ended(tmp.state)) {
				r = ctl_persist_end(ctl, &tmp, true, -1, now);
				continue;
			}
			tmp.requeues++;
			r = ctl_persist(ctl, &tmp, now);
		}
		if (r < 0 || cnl_store_tx_commit(ctl->store) < 0) {
			cnl_store_tx_rollback(ctl->store);
			return; /* retried on the next tick */
		}
		nd->state = N_LOST;
		nd->epoch++;
		cnl_cluster_set_node_state(ctl->cluster, (uint32_t)i,
		                           CNL_NODE_DOWN);
		for (size_t k = ctl->n_wl; k-- > 0;) {
			struct wl *w = &ctl->wl[k];

			if (w->node != (int)i)
				continue;
			if (cnl_wl_placed(w->state))
				ctl_cloud_ended(ctl, w, now);
			if (w->alloc_id)
				cnl_alloc_free(ctl->cluster, w->alloc_id);
			w->alloc_id = 0;
			w->node = -1;
			if (!cnl_wl_placed(w->state) ||
			    ctl_step(w, CNL_WL_EV_NODE_LOST) < 0)
				continue;
			if (cnl_wl_ended(w->state)) {
				ctl->finished[3]++;
				ctl_server_gone(ctl, w);
				ctl_wl_remove(ctl, w);
			} else {
				w->requeues++;
			}
		}
		ctl->lost_nodes++;
		ctl->dirty = ctl->changed = true;
		ctl_node_changed(ctl, (int)i);
		cnl_log(CNL_LOG_WARN, "node lost; its work is requeued",
		        "node=%s epoch=%" PRId64, nd->name, nd->epoch);
	}
}

void cnl_ctl_node_revoke(struct cnl_ctl *ctl, const char *key, int64_t now)
{
	int i = ctl_node_find_any(ctl, key);

	if (i < 0)
		return;
	/* As if silent since long ago: lost now, as a node that stopped
	 * answering is (its work requeued or ended, no new work). */
	ctl->nodes[i].last_seen_ms = now - ctl->cfg.node_lost_ms - 1;
	check_nodes(ctl, now);
	cnl_ctl_kick(ctl);
}

/* Charge block-time and storage-time since the last tick. */
static void meter(struct cnl_ctl *ctl, int64_t now)
{
	double dt = (double)(now - ctl->last_meter_ms);

	if (dt <= 0)
		return;
	ctl->last_meter_ms = now;
	for (size_t i = 0; i < ctl->n_wl; i++) {
		struct wl *w = &ctl->wl[i];
		int b;

		if (!w->alloc_id || w->state == CNL_WL_PENDING)
			continue;
		b = cnl_alloc_blocks_held(ctl->cluster, &w->placed);
		if (b <= 0)
			continue;
		cnl_usage_day_add(ctl->usage_day, ctl->usage_day_dirty,
		                  w->project_id, w->user_id, now - (int64_t)dt,
		                  now, b);
		ctl_usage_of(ctl, w->project_id)->block_ms += b * dt;
		ctl_usage_of(ctl, w->user_id)->block_ms += b * dt;
		ctl_usage_of(ctl, w->project_id)->dirty = true;
		ctl_usage_of(ctl, w->user_id)->dirty = true;
		ctl_cluster_quota_charge(ctl, w, b * dt);
	}
	for (size_t i = 0; i < ctl->n_usage; i++) {
		struct usage *u = &ctl->usage[i];

		if (u->storage_gb > 0) {
			u->storage_gb_ms += (double)u->storage_gb * dt;
			u->dirty = true;
		}
	}
}

static void flush_usage(struct cnl_ctl *ctl, int64_t now)
{
	bool any = false;
	const char *k;
	json_t *v;

	for (size_t i = 0; i < ctl->n_usage; i++)
		any |= ctl->usage[i].dirty;
	any |= json_object_size(ctl->usage_day_dirty) > 0;
	if (!any || cnl_store_tx_begin(ctl->store) < 0)
		return;
	/* The days touched, in the same transaction as the totals. */
	json_object_foreach (ctl->usage_day_dirty, k, v) {
		struct cnl_store_doc d = {0};
		char body[64];

		snprintf(d.kind, sizeof(d.kind), "usage_day");
		snprintf(d.id, sizeof(d.id), "%s", k);
		snprintf(body, sizeof(body), "{\"block_ms\":%.0f}",
		         json_number_value(json_object_get(ctl->usage_day, k)));
		d.body = body;
		d.updated_ms = now;
		if (cnl_store_doc_put(ctl->store, &d, false) < 0) {
			cnl_store_tx_rollback(ctl->store);
			return;
		}
	}
	for (size_t i = 0; i < ctl->n_usage; i++) {
		struct usage *u = &ctl->usage[i];
		struct cnl_store_doc d = {0};
		char body[128];

		if (!u->dirty)
			continue;
		snprintf(d.kind, sizeof(d.kind), "usage");
		snprintf(d.id, sizeof(d.id), "%s", u->owner);
		snprintf(body, sizeof(body),
		         "{\"block_ms\":%.0f,\"storage_gb_ms\":%.0f}",
		         u->block_ms, u->storage_gb_ms);
		d.body = body;
		d.updated_ms = now;
		if (cnl_store_doc_put(ctl->store, &d, false) < 0) {
			cnl_store_tx_rollback(ctl->store);
			return;
		}
	}
	if (cnl_store_tx_commit(ctl->store) < 0) {
		cnl_store_tx_rollback(ctl->store);
		return;
	}
	for (size_t i = 0; i < ctl->n_usage; i++)
		ctl->usage[i].dirty = false;
	json_object_clear(ctl->usage_day_dirty);
	/* Once a day, the days that left the window leave memory. */
	if (now / 86400000 != ctl->usage_day_pruned) {
		ctl->usage_day_pruned = now / 86400000;
		cnl_usage_prune(ctl->usage_day, NULL, now);
	}
}

void cnl_ctl_tick(struct cnl_ctl *ctl, int64_t now, bool force)
{
	/* A batch of submissions left open is committed before the cycle
	 * sees its jobs (store.h, "Batches"): should it be lost, they are
	 * undone here, before anything holds them. */
	cnl_store_flush(ctl->store);
	check_nodes(ctl, now);
	meter(ctl, now);
	flush_usage(ctl, now);
	if (ctl->cfg.upkeep)
		ctl->cfg.upkeep(ctl->cfg.upkeep_ud, now);
	if (ctl->dirty || force) {
		ctl->dirty = false;
		run_cycle(ctl, now);
	}
	ctl_forecast_tick(ctl, now);
	ctl_power_tick(ctl, now);
	ctl_facts_scan(ctl, now);
}

/*
 * The loop: a kick (a submission, an end, a node that changed) runs a
 * cycle at once when the loop is idle; kicks that arrive while a cycle
 * runs (they wait for the lock it holds) leave the state dirty, and the
 * next cycle takes them all: the cycle's own duration (and the pause
 * below) is the batch, with no fixed gap and no timer on the path of a
 * job.  The periodic timer (cycle_interval_ms) remains for liveness, lost
 * nodes and metering, and forces a cycle.
 *
 * After each tick the loop pauses, the lock free (pause_after()), so that
 * requests waiting for the lock (submissions above all, which kick a cycle
 * each) get in and are taken by the next cycle together instead of each
 * paying for a cycle of its own.
 */
static void until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t at_ms,
                  int64_t now)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (at_ms - now) / 1000;
	ts.tv_nsec += ((at_ms - now) % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(cv, mu, &ts);
}

/* The pause after a tick, as a multiple of the tick's duration (the
 * longer one after a cycle that started nothing, while only submissions
 * come), and its longest (a cycle at 100k pending takes a few hundred
 * ms). */
#define PAUSE_FACTOR      2
#define PAUSE_FACTOR_IDLE 5
#define PAUSE_MAX_US      500000

/* Sleep @us microseconds without the lock. */
static void sleep_unlocked(struct cnl_ctl *ctl, int64_t us)
{
	struct timespec ts = {.tv_sec = us / 1000000,
	                      .tv_nsec = (long)(us % 1000000) * 1000};

	pthread_mutex_unlock(ctl->mu);
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	pthread_mutex_lock(ctl->mu);
}

/*
 * The pause after a tick that held the lock @held_us: PAUSE_FACTOR times
 * as long, to the microsecond, so the loop holds the lock at most a third
 * of the time however long a cycle takes (100k pending), and a burst of
 * submissions is taken a few dozen at a time by one cycle instead of one
 * or two each (a cycle over a few pending jobs costs about as much CPU as
 * the submissions it takes).  It is a pause, not a delay: it follows a
 * cycle that just ran, so a kick on an idle loop still runs one at once,
 * and a pause never lasts longer than a multiple of the work it follows.
 *
 * After a cycle that started and pre-empted nothing, the pause goes on,
 * a tick's length at a time, up to PAUSE_FACTOR_IDLE times the tick, for
 * as long as nothing but submissions came (ctl->changed): in a storm of
 * submissions that cannot start (a full cluster, no node) each of them
 * waits for the API's lock while a cycle holds it, and these cycles decide
 * nothing but wait reasons.  An end, a node or a cancel (what may let
 * work start) cuts it short at the next step.
 *
 * The loop sleeps without waiting on @ctl->wake, so that the kicks of the
 * pause (each signals it) wake no thread: with a condition wait, each
 * submission woke the loop only for it to sleep again, two context
 * switches per request on the API's path.  cnl_ctl_stop() waits out at
 * most one pause.
 */
static void pause_after(struct cnl_ctl *ctl, int64_t held_us)
{
	int64_t us = held_us * PAUSE_FACTOR, done;

	if (held_us <= 0)
		return;
	if (us > PAUSE_MAX_US)
		us = PAUSE_MAX_US;
	sleep_unlocked(ctl, us);
	for (done = us; ctl->idle_cycle && !ctl->changed && !ctl->stop &&
	                done < held_us * PAUSE_FACTOR_IDLE &&
	                done < PAUSE_MAX_US;) {
		int64_t step = held_us < PAUSE_MAX_US - done
		                   ? held_us
		                   : PAUSE_MAX_US - done;
		sleep_unlocked(ctl, step);
		done += step;
	}
}

static void *loop(void *arg)
{
	struct cnl_ctl *ctl = arg;
	int64_t next = ctl_now_ms();

	pthread_mutex_lock(ctl->mu);
	while (!ctl->stop) {
		int64_t now = ctl_now_ms();
		bool timer = now >= next;

		if (timer || ctl->dirty) {
			struct timespec t0, t1;

			clock_gettime(CLOCK_MONOTONIC, &t0);
			cnl_ctl_tick(ctl, now, timer);
			clock_gettime(CLOCK_MONOTONIC, &t1);
			if (timer)
				next = now + ctl->cfg.cycle_interval_ms;
			pause_after(ctl, (t1.tv_sec - t0.tv_sec) * 1000000 +
			                     (t1.tv_nsec - t0.tv_nsec) / 1000);
			continue;
		}
		until(&ctl->wake, ctl->mu, next, now);
	}
	pthread_mutex_unlock(ctl->mu);
	return NULL;
}

int cnl_ctl_start(struct cnl_ctl *ctl)
{
	int r = pthread_create(&ctl->thread, NULL, loop, ctl);

	if (r)
		return -r;
	ctl->running = true;
	return 0;
}

void cnl_ctl_stop(struct cnl_ctl *ctl)
{
	if (!ctl || !ctl->running)
		return;
	pthread_mutex_lock(ctl->mu);
	ctl->stop = true;
	pthread_cond_broadcast(&ctl->wake);
	for (size_t i = 0; i < ctl->n_nodes; i++)
		pthread_cond_broadcast(ctl->nodes[i].wake);
	pthread_mutex_unlock(ctl->mu);
	pthread_join(ctl->thread, NULL);
	ctl->running = false;
}
