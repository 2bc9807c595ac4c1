/*
 * ctl.c - the controller (see ctl.h for fencing and locking, wire/state.h
 * for a workload's states;
 * ctl-internal.h for how its files divide the work): creation and
 * loading, the registry of active workloads, usage, metrics.
 *
 * Memory.  Nodes live in ctl->nodes, in the order they were added to the
 * cluster, so a node's index is its cluster index.  Active workloads live
 * in ctl->wl (unordered; removal swaps the last one in).  Usage is kept per
 * owner (project or user id) in ctl->usage and flushed to "usage"
 * documents once per tick in one transaction.
 *
 * Persistence before visibility.  A decision reaches an agent only through
 * cnl_ctl_assignments(), which reads the in-memory state; every path that
 * changes a workload's placement writes the store first (in one
 * transaction per cycle) and changes memory only once the write succeeded,
 * so what an agent is told is always what a restarted cnlabd will find.
 */
#include <errno.h>
#include <inttypes.h>
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
#include "sched/sched.h"
#include "server/ctl-internal.h"
#include "server/shape.h"

/* ------------------------------------------------------------------------ */

/* ---- loading ------------------------------------------------------------- */

static int job_seen(void *ud, const struct cnl_store_job *j)
{
	cnl_ctl_job_added(ud, j);
	return 0;
}

/* The active jobs, running first, in one query each, into a registry
 * sized for them (and a quarter more for what comes next) up front. */
static int load_jobs(struct cnl_ctl *ctl)
{
	int64_t running = 0, pending = 0;
	int r;

	if ((r = cnl_store_job_count_state(ctl->store, "running", &running)) <
	        0 ||
	    (r = cnl_store_job_count_state(ctl->store, "pending", &pending)) <
	        0)
		return r;
	ctl_wl_reserve(ctl, ctl->n_wl + (size_t)(running + pending) * 5 / 4);
	if ((r = cnl_store_job_each_state(ctl->store, "running", job_seen,
	                                  ctl)) < 0)
		return r;
	return cnl_store_job_each_state(ctl->store, "pending", job_seen, ctl);
}

static int load_servers(struct cnl_ctl *ctl)
{
	struct cnl_store_server *v = cnl_xcalloc(256, sizeof(*v));
	char last[CNL_ID_MAX] = "";
	int n, r;

	do {
		r = cnl_store_server_list(ctl->store, NULL,
		                          last[0] ? last : NULL, 256, v, &n);
		for (int i = 0; r == 0 && i < n; i++)
			cnl_ctl_server_added(ctl, &v[i]);
		if (r == 0 && n)
			snprintf(last, sizeof(last), "%s", v[n - 1].id);
	} while (r == 0 && n == 256);
	free(v);
	return r;
}

/* The per-day record (kind "usage_day", body {"block_ms"}): only the
 * days of the window.  Ids begin with the day ("YYYY-MM-DD/..."), so the
 * listing starts after every id of the day before the window ('~' sorts
 * after every character of an id); older days stay in the store. */
static int load_usage_days(struct cnl_ctl *ctl)
{
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	char last[CNL_STORE_DOC_ID_MAX];
	int n, r;

	cnl_usage_day_after(ctl_now_ms(), last, sizeof(last));
	do {
		r = cnl_store_doc_list(ctl->store, "usage_day", NULL, last,
		                       CNL_STORE_LIST_MAX, d, &n);
		for (int i = 0; r == 0 && i < n; i++) {
			json_t *o = json_loads(d[i].body, 0, NULL);

			json_object_set_new(
			    ctl->usage_day, d[i].id,
			    json_real(json_number_value(
			        json_object_get(o, "block_ms"))));
			json_decref(o);
		}
		if (r == 0 && n)
			snprintf(last, sizeof(last), "%s", d[n - 1].id);
		cnl_store_docs_done(d, n);
		/* Only the window stays in memory. */
		cnl_usage_prune(ctl->usage_day, NULL, ctl_now_ms());
	} while (r == 0 && n == CNL_STORE_LIST_MAX);
	free(d);
	return r;
}

void cnl_ctl_usage_7d(struct cnl_ctl *ctl, const char *project,
                      const char *user, int64_t now_ms, double ret[7])
{
	cnl_usage_7d(ctl->usage_day, project, user, now_ms, ret);
}

json_t *cnl_ctl_usage_recent(struct cnl_ctl *ctl, int64_t now_ms)
{
	return cnl_usage_recent(ctl->usage_day, now_ms);
}

static int load_usage(struct cnl_ctl *ctl)
{
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	char last[CNL_STORE_DOC_ID_MAX] = "";
	int n, r;

	do {
		r = cnl_store_doc_list(ctl->store, "usage", NULL,
		                       last[0] ? last : NULL,
		                       CNL_STORE_LIST_MAX, d, &n);
		for (int i = 0; r == 0 && i < n; i++) {
			json_t *o = json_loads(d[i].body, 0, NULL);
			struct usage *u = ctl_usage_of(ctl, d[i].id);

			u->block_ms =
			    json_number_value(json_object_get(o, "block_ms"));
			u->storage_gb_ms = json_number_value(
			    json_object_get(o, "storage_gb_ms"));
			json_decref(o);
		}
		if (r == 0 && n)
			snprintf(last, sizeof(last), "%s", d[n - 1].id);
		cnl_store_docs_done(d, n);
	} while (r == 0 && n == CNL_STORE_LIST_MAX);
	free(d);
	return r;
}

/* The reason in words of a "pending: ..." slice decision, back to its
 * code, for the pending workload @target. */
static int reason_seen(void *ud, const char *target, const char *result)
{
	static const char prefix[] = "pending: ";
	struct cnl_ctl *ctl = ud;
	struct wl *w = ctl_wl_find(ctl, target);

	if (!w || w->state != CNL_WL_PENDING ||
	    strncmp(result, prefix, sizeof(prefix) - 1) != 0)
		return 0;
	for (int i = 0; i < CNL_WHY_COUNT_; i++)
		if (strcmp(result + sizeof(prefix) - 1,
		           cnl_reason_text((enum cnl_reason)i)) == 0) {
			w->wait_reason = (uint8_t)i;
			break;
		}
	return 0;
}

/*
 * A pending workload's wait reason lives in memory, and the audit log
 * records each change of it (ctl_decide(), stage "slice").  Taking the
 * last one back at start keeps what a GET shows across a restart, and
 * keeps the first cycle from recording again, one audit append each,
 * every reason that did not change.  (Estimates and reservations come
 * back with that cycle.)
 */
static int load_reasons(struct cnl_ctl *ctl)
{
	return cnl_store_audit_latest(ctl->store, "sched.slice", reason_seen,
	                              ctl);
}

int cnl_ctl_new(const struct cnl_ctl_config *cfg, pthread_mutex_t *mu,
                struct cnl_ctl **ret, char *err, size_t errlen)
{
	struct cnl_sched_config sc;
	struct cnl_ctl *ctl = cnl_xcalloc(1, sizeof(*ctl));
	int64_t now = ctl_now_ms();
	int r;

	err[0] = '\0';
	ctl->cfg = *cfg;
	if (!ctl->cfg.node_lost_ms)
		ctl->cfg.node_lost_ms = 30000;
	if (!ctl->cfg.cycle_interval_ms)
		ctl->cfg.cycle_interval_ms = 1000;
	ctl->store = cfg->store;
	ctl->mu = mu;
	ctl->usage_day = json_object();
	ctl->usage_day_dirty = json_object();
	pthread_cond_init(&ctl->wake, NULL);
	cnl_id_gen_init_random(&ctl->ids);
	cnl_sched_config_default(&sc);
	if (cfg->policy)
		snprintf(sc.policy, sizeof(sc.policy), "%s", cfg->policy);
	if (cfg->preempt_min_run_ms >= 0)
		sc.min_run_ms = cfg->preempt_min_run_ms;
	if (cfg->preempt_grace_ms >= 0)
		sc.grace_ms = cfg->preempt_grace_ms;
	if (cfg->power_idle_ms > 0)
		sc.idle_power_down_ms = cfg->power_idle_ms;
	ctl->default_runtime_ms = sc.default_runtime_ms;
	if ((r = cnl_sched_new(&sc, &ctl->sched)) < 0) {
		snprintf(err, errlen, "scheduler: unknown policy \"%s\"",
		         sc.policy);
		goto fail;
	}
	if ((r = cnl_cluster_new(cfg->cat, &ctl->cluster)) < 0) {
		snprintf(err, errlen, "cluster: %s", cnl_strerror(r));
		goto fail;
	}
	if ((r = ctl_cloud_load(ctl)) < 0 ||
	    (r = ctl_load_nodes(ctl, now, err, errlen)) < 0 ||
	    (r = load_usage(ctl)) < 0 || (r = load_usage_days(ctl)) < 0 ||
	    (r = load_jobs(ctl)) < 0 || (r = load_servers(ctl)) < 0 ||
	    (r = load_reasons(ctl)) < 0 || (r = ctl_clusters_load(ctl)) < 0) {
		if (!err[0])
			snprintf(err, errlen, "loading state: %s%s%s",
			         cnl_strerror(r),
			         cnl_store_errmsg(ctl->store)[0] ? ": " : "",
			         cnl_store_errmsg(ctl->store));
		goto fail;
	}
	ctl_node_states(ctl);
	ctl->facts = ctl_facts_new(); /* filled by the first tick's scan */
	cnl_log(CNL_LOG_INFO, "controller state loaded",
	        "workloads=%zu nodes=%zu ms=%" PRId64, ctl->n_wl, ctl->n_nodes,
	        ctl_now_ms() - now);
	ctl->last_meter_ms = now;
	ctl->dirty = true;
	/* The journal of a batch of requests ends with the batch. */
	cnl_store_set_batch_hook(ctl->store, ctl_batch_ended, ctl);
	*ret = ctl;
	return 0;
fail:
	cnl_ctl_free(ctl);
	return r;
}

void cnl_ctl_free(struct cnl_ctl *ctl)
{
	if (!ctl)
		return;
	if (ctl->store)
		cnl_store_set_batch_hook(ctl->store, NULL, NULL);
	for (size_t i = 0; i < ctl->n_nodes; i++) {
		json_decref(ctl->nodes[i].inventory);
		pthread_cond_destroy(ctl->nodes[i].wake);
		free(ctl->nodes[i].wake);
	}
	free(ctl->nodes);
	free(ctl->wl);
	free(ctl->wl_slots);
	free(ctl->cyc_jobs);
	free(ctl->cyc_map);
	cnl_decisions_done(&ctl->cyc_dec);
	free(ctl->usage);
	json_decref(ctl->usage_day);
	json_decref(ctl->usage_day_dirty);
	free(ctl->teams);
	ctl_journal_free(ctl);
	ctl_nset_free_all(ctl);
	ctl_clusters_free(ctl);
	json_decref(ctl->cloud_nodes);
	json_decref(ctl->on_prem);
	json_decref(ctl->pins);
	json_decref(ctl->cl_quota);
	free(ctl->picks);
	free(ctl->fcs);
	cnl_cluster_free(ctl->cluster);
	cnl_sched_free(ctl->sched);
	ctl_facts_free(ctl->facts);
	pthread_cond_destroy(&ctl->wake);
	free(ctl);
}

/* ---- workloads ----------------------------------------------------------- */

bool cnl_ctl_node_named(struct cnl_ctl *ctl, const char *name)
{
	return cnl_cluster_find_node(ctl->cluster, name) >= 0;
}

int cnl_ctl_shape_check(struct cnl_ctl *ctl, const char *shape, char *err,
                        size_t errlen)
{
	struct cnl_alloc_req req;
	struct cnl_req_prep p;
	char buf[CNL_SHAPE_MAX];
	int r;

	if ((r = ctl_make_req(ctl, shape, &req, buf, err, errlen)) < 0)
		return r;
	req.project = 0;
	if ((r = cnl_alloc_prepare(ctl->cluster, &req, &p)) < 0) {
		snprintf(err, errlen, "GPU shape \"%s\": %s", shape,
		         cnl_strerror(r));
		return -CNL_EFIELD;
	}
	return 0;
}

/*
 * How many running workloads (on node @node, or anywhere for -1) the
 * scheduler assumes to run its default run time because they gave none:
 * an estimate made of their ends is a guess.
 */
static int unestimated(struct cnl_ctl *ctl, int node)
{
	int n = 0;

	for (size_t i = 0; i < ctl->n_wl; i++) {
		const struct wl *w = &ctl->wl[i];

		if (w->state != CNL_WL_PENDING && w->alloc_id &&
		    (node < 0 || w->node == node) && w->j.runtime_ms <= 0)
			n++;
	}
	return n;
}

int cnl_ctl_admit(struct cnl_ctl *ctl, const struct cnl_store_job *sj,
                  int64_t now, struct cnl_ctl_admission *ret)
{
	struct wl tmp = {0};
	struct cnl_job *jobs;
	size_t *map, n;
	int r;

	*ret = (struct cnl_ctl_admission){
	    .start = -1,
	    .finish = sj->runtime_ms > 0,
	    .runtime_ms = sj->runtime_ms,
	    .unestimated = unestimated(ctl, -1),
	    .assumed_runtime_ms = ctl->default_runtime_ms,
	};
	if (!sj->deadline_ms)
		return 0;
	snprintf(tmp.project_id, sizeof(tmp.project_id), "%s", sj->project_id);
	/* Without a run-time estimate the scheduler checks only that the
	 * job can start before its deadline (src/sched,
	 * cnl_cyc_deadline_runtime()). */
	if ((r = ctl_wl_job(ctl, &tmp, sj->gpu_shape, sj->priority, now,
	                    sj->deadline_ms, sj->runtime_ms, true)) < 0)
		return r;
	{
		json_t *run = json_loads(sj->run, 0, NULL);

		r = ctl_wl_job_fields(ctl, &tmp, run, false);
		json_decref(run);
		if (r < 0)
			return r;
	}
	n = ctl_build_jobs(ctl, &jobs, &map);
	r = cnl_sched_admit(ctl->sched, ctl->cluster, jobs, n, &tmp.j, now,
	                    &ret->start);
	free(jobs);
	free(map);
	return r;
}

int cnl_ctl_job_added(struct cnl_ctl *ctl, const struct cnl_store_job *j)
{
	struct wl *w;
	json_t *run;
	bool pre = true;
	int r;

	if (strcmp(j->state, "pending") != 0 &&
	    strcmp(j->state, "running") != 0)
		return 0;
	if (ctl_wl_find(ctl, j->id))
		return 0;
	run = json_loads(j->run, 0, NULL);
	/* Forwarded to a peer site (federate.h): its peer runs it. */
	if (json_object_get(run, "peer")) {
		json_decref(run);
		return 0;
	}
	if (json_is_false(json_object_get(run, "preemptible")))
		pre = false;
	w = ctl_wl_add(ctl, j->id);
	snprintf(w->project_id, sizeof(w->project_id), "%s", j->project_id);
	snprintf(w->user_id, sizeof(w->user_id), "%s", j->user_id);
	r = ctl_wl_job(ctl, w, j->gpu_shape, j->priority, j->created_ms,
	               j->deadline_ms, j->runtime_ms, pre);
	if (r == 0)
		r = ctl_wl_job_fields(ctl, w, run, true);
	if (r < 0) {
		json_decref(run);
		cnl_log(CNL_LOG_WARN, "job has an invalid shape; failed",
		        "id=%s shape=%s", j->id, j->gpu_shape);
		ctl->census_ok = false; /* never counted: count afresh */
		ctl_wl_remove(ctl, w);
		return cnl_store_job_update_run(ctl->store, j->id, "failed", -1,
		                                ctl_now_ms(), "{}");
	}
	/* Epochs and counts carry over; a placement only when running. */
	ctl_wl_adopt_json(ctl, w, run);
	json_decref(run);
	ctl_pending_count(ctl, w, +1);
	ctl->dirty = true;
	return 0;
}

int cnl_ctl_server_added(struct cnl_ctl *ctl, const struct cnl_store_server *v)
{
	bool active =
	    strcmp(v->state, "stopped") != 0 && strcmp(v->state, "failed") != 0;
	struct wl *w;

	/* Storage is held (and metered) while the server exists. */
	ctl_usage_of(ctl, v->project_id)->storage_gb += v->storage_gb;
	ctl_usage_of(ctl, v->user_id)->storage_gb += v->storage_gb;
	if (!active || ctl_wl_find(ctl, v->id))
		return 0;
	ctl_usage_of(ctl, v->project_id)->servers++;
	ctl_usage_of(ctl, v->user_id)->servers++;
	w = ctl_wl_add(ctl, v->id);
	w->server = true;
	snprintf(w->project_id, sizeof(w->project_id), "%s", v->project_id);
	snprintf(w->user_id, sizeof(w->user_id), "%s", v->user_id);
	snprintf(w->url, sizeof(w->url), "%s", v->url);
	/* Interactive work: normal priority, never pre-empted.  The server
	 * names a profile; its shape is read from the profile document. */
	char shape[CNL_SHAPE_MAX];
	struct cnl_store_doc d = {0};

	snprintf(shape, sizeof(shape), "%s", v->profile);
	if (cnl_store_doc_get(ctl->store, "profile", v->profile, &d) == 0) {
		json_t *o = json_loads(d.body, 0, NULL);
		const char *g = json_string_value(json_object_get(o, "gpu"));

		if (g)
			snprintf(shape, sizeof(shape), "%s", g);
		json_decref(o);
		cnl_store_doc_done(&d);
	}
	if (ctl_wl_job(ctl, w, shape, CNL_PRIO_NORMAL, v->created_ms, 0, 0,
	               false) < 0) {
		ctl->census_ok = false; /* never counted: count afresh */
		ctl_wl_remove(ctl, w);
		ctl_usage_of(ctl, v->project_id)->servers--;
		ctl_usage_of(ctl, v->user_id)->servers--;
		return cnl_store_server_update(ctl->store, v->id, "failed", "",
		                               "{}");
	}
	ctl_wl_adopt(ctl, w, v->run);
	ctl_pending_count(ctl, w, +1);
	ctl->dirty = true;
	return 0;
}

void cnl_ctl_server_deleted(struct cnl_ctl *ctl,
                            const struct cnl_store_server *v)
{
	ctl_usage_of(ctl, v->project_id)->storage_gb -= v->storage_gb;
	ctl_usage_of(ctl, v->user_id)->storage_gb -= v->storage_gb;
}

int cnl_ctl_stop_workload(struct cnl_ctl *ctl, const char *id, int64_t now)
{
	struct wl *w = ctl_wl_find(ctl, id);
	struct wl next;
	int r;

	if (!w)
		return -CNL_ENOTFOUND;
	if (w->state == CNL_WL_STOPPING)
		return 0; /* already told */
	next = *w;
	if ((r = ctl_step(&next, CNL_WL_EV_CANCEL)) < 0)
		return r;
	if (cnl_wl_ended(next.state)) { /* still queued: ends at once */
		if ((r = ctl_persist_end(ctl, &next, false, -1, now)) < 0)
			return r;
		ctl->finished[2]++;
		ctl_server_gone(ctl, w);
		ctl_wl_remove(ctl, w);
		ctl->dirty = ctl->changed = true;
		return 0;
	}
	/* Placed: told to stop; a requeue already under way keeps its
	 * signal and kill times, and now ends as asked instead. */
	if (w->state != CNL_WL_REQUEUING) {
		next.signal_ms = now;
		next.kill_ms = now + 30000;
	}
	if ((r = ctl_persist(ctl, &next, now)) < 0)
		return r;
	ctl_undo_save(ctl, w);
	*w = next;
	ctl_node_changed(ctl, w->node);
	ctl_facts_touch(ctl, w);
	return 0;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* The median of the remembered starts of a kind into *@ret_ms, and how
 * many there are (0: no estimate). */
static unsigned start_median(struct cnl_ctl *ctl, bool server, int64_t *ret_ms)
{
	unsigned n = ctl->n_starts[server] < START_HISTORY
	                 ? ctl->n_starts[server]
	                 : START_HISTORY;
	int64_t v[START_HISTORY];

	if (!n)
		return 0;
	memcpy(v, ctl->start_ms[server], n * sizeof(v[0]));
	qsort(v, n, sizeof(v[0]), cmp_i64);
	*ret_ms = v[n / 2];
	return n;
}

int cnl_ctl_stop_gang(struct cnl_ctl *ctl, const char *gang, int64_t now)
{
	int r = -CNL_ENOTFOUND;

	/* Backwards: a pending member is removed, and the last one, already
	 * seen, takes its place. */
	for (size_t i = ctl->n_wl; i-- > 0;) {
		int rr;

		if (strcmp(ctl->wl[i].gang_id, gang) != 0)
			continue;
		rr = cnl_ctl_stop_workload(ctl, ctl->wl[i].id, now);
		if (rr < 0 && rr != -CNL_ENOTFOUND)
			return rr;
		r = 0;
	}
	return r;
}

/* Whether @w's shape could be placed right now. */
static bool fits_now(struct cnl_ctl *ctl, const struct wl *w)
{
	struct cnl_req_prep p;
	struct cnl_plan plan;

	return cnl_alloc_prepare(ctl->cluster, &w->j.req, &p) == 0 &&
	       cnl_alloc_plan(ctl->cluster, &p, &plan) == 0;
}

int cnl_ctl_workload_node(struct cnl_ctl *ctl, const char *id, char *ret_node)
{
	struct wl *w = ctl_wl_find(ctl, id);

	if (!w || w->state != CNL_WL_STARTED || w->node < 0 ||
	    (size_t)w->node >= ctl->n_nodes)
		return -CNL_ENOTFOUND;
	snprintf(ret_node, CNL_ID_MAX, "%s", ctl->nodes[w->node].id);
	return 0;
}

int cnl_ctl_node_protocol(struct cnl_ctl *ctl, const char *node_id)
{
	int i = ctl_node_find(ctl, node_id);

	return i < 0 ? 0 : ctl->nodes[i].protocol;
}

int cnl_ctl_workload_status(struct cnl_ctl *ctl, const char *id,
                            struct cnl_wire_status *ret)
{
	struct wl *w = ctl_wl_find(ctl, id);

	if (!w)
		return -CNL_ENOTFOUND;
	ctl_wl_status(ctl, w, -1, ret);
	return 0;
}

void ctl_wl_status(struct cnl_ctl *ctl, const struct wl *w, int guessed,
                   struct cnl_wire_status *ret)
{
	struct cnl_wire_status st = {0};
	int64_t med;
	unsigned n;

	snprintf(st.phase, sizeof(st.phase), "%s", cnl_wl_state_name(w->state));
	st.epoch = w->epoch;
	st.resized = w->resized;
	if (w->state == CNL_WL_PENDING) {
		st.pending = true;
		/* A fresh platform takes work before its first node joins
		 * (admission refuses only against nodes that exist). */
		snprintf(st.reason, sizeof(st.reason), "%s",
		         ctl->n_nodes == 0 ? "no nodes registered"
		         : w->wait_reason < CNL_WHY_COUNT_
		             ? cnl_reason_text((enum cnl_reason)w->wait_reason)
		             : "being scheduled");
		st.estimated_start_ms = w->est_start_ms;
		if (w->resv_node >= 0 && (size_t)w->resv_node < ctl->n_nodes) {
			const struct node *nd = &ctl->nodes[w->resv_node];
			const char *cl = json_string_value(
			    json_object_get(nd->inventory, "cluster"));

			st.has_reservation = true;
			snprintf(st.reservation.node,
			         sizeof(st.reservation.node), "%s", nd->name);
			snprintf(st.reservation.cluster,
			         sizeof(st.reservation.cluster), "%s",
			         cl ? cl : "");
			st.reservation.at_ms = w->est_start_ms;
			snprintf(st.reservation.shape,
			         sizeof(st.reservation.shape), "%s", w->shape);
		}
		/* Not yet looked at by a cycle: when the shape fits now,
		 * it will be ready about as fast as recent starts were. */
		if (w->wait_reason >= CNL_WHY_COUNT_ &&
		    (n = start_median(ctl, w->server, &med)) > 0 &&
		    fits_now(ctl, w)) {
			st.has_estimated_ready = true;
			st.estimated_ready.at_ms = ctl_now_ms() + med;
			st.estimated_ready.from_starts = (int)n;
		}
		/* An estimate built on the default run time of running
		 * work says so: it is a guess, not a plan. */
		if (w->est_start_ms > 0) {
			if (guessed < 0)
				guessed = unestimated(ctl, w->resv_node);
			st.has_estimate = true;
			st.estimate.approximate = guessed > 0;
			st.estimate.unestimated_running = guessed;
			st.estimate.assumed_runtime_s =
			    ctl->default_runtime_ms / 1000;
		}
	} else if (w->node >= 0) {
		snprintf(st.node, sizeof(st.node), "%s",
		         ctl->nodes[w->node].name);
		st.blocks = cnl_alloc_blocks_held(ctl->cluster, &w->placed);
		st.shrinking_to = ctl_resize_pending(ctl, w);
		st.started_ms = w->started_ms;
		/* Provisioning: ready after as long as recent starts took. */
		if (w->state == CNL_WL_ASSIGNED &&
		    (n = start_median(ctl, w->server, &med)) > 0) {
			st.has_estimated_ready = true;
			st.estimated_ready.at_ms =
			    (w->not_before_ms > w->started_ms ? w->not_before_ms
			                                      : w->started_ms) +
			    med;
			st.estimated_ready.from_starts = (int)n;
		}
	}
	*ret = st;
}

/* The facts index (ctl_facts.c), its invariant 4: the count of running work
 * without an estimate. */
static int unestimated_of(struct cnl_ctl *ctl, int node, int64_t now)
{
	struct ctl_facts *f = ctl->facts;

	if (!f->unest || f->n_unest != ctl->n_nodes ||
	    now - f->unest_ms >= CNL_CTL_FACTS_SCAN_MS) {
		free(f->unest);
		f->n_unest = ctl->n_nodes;
		f->unest = cnl_xcalloc(f->n_unest + 1, sizeof(*f->unest));
		f->unest_all = 0;
		for (size_t i = 0; i < ctl->n_wl; i++) {
			const struct wl *w = &ctl->wl[i];

			if (w->state == CNL_WL_PENDING || !w->alloc_id ||
			    w->j.runtime_ms > 0)
				continue;
			f->unest_all++;
			if (w->node >= 0 && (size_t)w->node < f->n_unest)
				f->unest[w->node]++;
		}
		f->unest_ms = now;
	}
	if (node < 0)
		return f->unest_all;
	return (size_t)node < f->n_unest ? f->unest[node] : 0;
}

void cnl_ctl_facts_publish(struct cnl_ctl *ctl)
{
	struct ctl_facts *f = ctl ? ctl->facts : NULL;
	int64_t now;

	if (!f || !f->n_touched)
		return;
	now = ctl_now_ms();
	for (size_t i = 0; i < f->n_touched; i++) {
		struct wl *w = ctl_wl_find(ctl, f->touched[i]);
		struct cnl_wire_status st;
		uint64_t fp;

		if (!w) {
			ctl_facts_drop(f, f->touched[i]);
			continue;
		}
		if ((fp = ctl_facts_fp(ctl, w)) == w->facts_fp)
			continue; /* touched twice, published once */
		ctl_wl_status(ctl, w,
		              w->state == CNL_WL_PENDING && w->est_start_ms > 0
		                  ? unestimated_of(ctl, w->resv_node, now)
		                  : 0,
		              &st);
		ctl_facts_put(f, w->id, &st);
		w->facts_fp = fp;
	}
	f->n_touched = 0;
	/* A long list (a burst, a first scan) gives its memory back. */
	if (f->cap_touched > 4096) {
		free(f->touched);
		f->touched = NULL;
		f->cap_touched = 0;
	}
}

void ctl_facts_scan(struct cnl_ctl *ctl, int64_t now)
{
	struct ctl_facts *f = ctl->facts;

	if (!f)
		return;
	if (now - f->scan_ms >= CNL_CTL_FACTS_SCAN_MS || now < f->scan_ms) {
		f->scan_ms = now;
		for (size_t i = 0; i < ctl->n_wl; i++)
			ctl_facts_touch(ctl, &ctl->wl[i]);
	}
	cnl_ctl_facts_publish(ctl);
	atomic_store(&f->ready, true);
}

void cnl_ctl_usage_of(struct cnl_ctl *ctl, const char *owner,
                      struct cnl_ctl_usage *ret)
{
	struct usage *u = ctl_usage_of(ctl, owner);

	ret->gpu_hours = u->block_ms / 100.0 / 3600000.0;
	ret->storage_gb_days = u->storage_gb_ms / 86400000.0;
	ret->servers = u->servers;
}

json_t *cnl_ctl_availability(struct cnl_ctl *ctl, const char *shape,
                             int64_t now)
{
	struct wl tmp = {0};
	struct cnl_req_prep p;
	struct cnl_plan plan;
	struct cnl_job *jobs;
	size_t *map, n;
	int64_t start = -1;
	int r;

	snprintf(tmp.project_id, sizeof(tmp.project_id), "availability");
	if (ctl_wl_job(ctl, &tmp, shape, CNL_PRIO_LOW, now, now + 1, 0, true) <
	    0)
		return NULL;
	if (cnl_alloc_prepare(ctl->cluster, &tmp.j.req, &p) == 0 &&
	    cnl_alloc_plan(ctl->cluster, &p, &plan) == 0)
		return json_pack("{s:b}", "now", 1);
	n = ctl_build_jobs(ctl, &jobs, &map);
	r = cnl_sched_admit(ctl->sched, ctl->cluster, jobs, n, &tmp.j, now,
	                    &start);
	free(jobs);
	free(map);
	if (r == 0)
		start = now;
	return json_pack("{s:b,s:o}", "now", 0, "estimated_start",
	                 ctl_time_or_null(start > 0 ? start : 0));
}

/* ---- metrics ------------------------------------------------------------- */

void ctl_metrics_placed(struct cnl_ctl *ctl, const struct wl *w, int64_t now)
{
	int64_t waited = now - w->j.submit_ms;

	ctl->placements++;
	cnl_wait_hist_observe(&ctl->wait_hist[w->j.prio & 3],
	                      waited > 0 ? (double)waited / 1000 : 0);
}

/* Each project's fair-share factor and decayed usage, as the scheduler's
 * order computes them (sched/fairshare.h): the share is the project's
 * weight over the weights of all projects the controller has seen. */
static void fairshare_metrics(struct cnl_ctl *ctl, struct cnl_metrics_buf *b)
{
	const struct cnl_fairshare *fs = cnl_sched_fairshare(ctl->sched);
	const struct cnl_cluster *c = ctl->cluster;
	double *held = cnl_xcalloc(ctl->n_teams + 1, sizeof(*held));
	double wsum = 0;
	int64_t cap = 0, now = ctl_now_ms();
	char esc[2 * CNL_ID_MAX + 1];

	for (uint32_t i = 0; i < c->n_nodes; i++)
		cap += (int64_t)c->nodes[i].n_gpus * CNL_BLOCKS_PER_GPU;
	for (size_t i = 0; i < ctl->n_wl; i++) {
		const struct cnl_alloc *a;

		if (ctl->wl[i].j.req.project >= ctl->n_teams ||
		    !ctl->wl[i].alloc_id ||
		    !(a = cnl_alloc_get(c, ctl->wl[i].alloc_id)))
			continue;
		held[ctl->wl[i].j.req.project] +=
		    (double)cnl_alloc_blocks_held(c, a);
	}
	for (size_t t = 0; t < ctl->n_teams; t++)
		wsum += cnl_fs_weight(fs, (uint32_t)t);
	cnl_mb_family(b, "cnlab_fairshare_factor", "gauge",
	              "Fair-share factor by project: 1 used nothing, towards "
	              "0 used far more than its share.");
	for (size_t t = 0; t < ctl->n_teams; t++) {
		double u = cnl_fs_usage(fs, (uint32_t)t, now, cap);
		double share =
		    wsum > 0 ? cnl_fs_weight(fs, (uint32_t)t) / wsum : 1;

		cnl_mb_printf(
		    b, "cnlab_fairshare_factor{project=\"%s\"} %.6f\n",
		    cnl_mb_escape(ctl->teams[t], esc, sizeof(esc)),
		    cnl_fs_factor(u, cap ? held[t] / (double)cap : 0, share));
	}
	cnl_mb_family(b, "cnlab_fairshare_usage_ratio", "gauge",
	              "Decayed 7-day GPU use by project over what the cluster "
	              "could deliver (0..1).");
	for (size_t t = 0; t < ctl->n_teams; t++)
		cnl_mb_printf(
		    b, "cnlab_fairshare_usage_ratio{project=\"%s\"} %.6f\n",
		    cnl_mb_escape(ctl->teams[t], esc, sizeof(esc)),
		    cnl_fs_usage(fs, (uint32_t)t, now, cap));
	free(held);
}

void cnl_ctl_metrics(struct cnl_ctl *ctl, struct cnl_metrics_buf *b)
{
	static const char *const prio[] = {"low", "normal", "high", "critical"};
	static const char *const fin[] = {"succeeded", "failed", "cancelled",
	                                  "stopped"};
	const struct cnl_cluster *c = ctl->cluster;
	const struct cnl_catalog *cat = ctl->cfg.cat;
	uint64_t queue[4] = {0}, states[CNL_WL_NSTATES] = {0};
	char esc[2 * CNL_ID_MAX + 1];

	for (size_t i = 0; i < ctl->n_wl; i++) {
		states[ctl->wl[i].state]++;
		if (ctl->wl[i].state == CNL_WL_PENDING)
			queue[ctl->wl[i].j.prio & 3]++;
	}
	ctl_clusters_metrics(ctl, b);
	cnl_mb_family(b, "cnlab_queue_depth", "gauge",
	              "Pending workloads by priority class.");
	for (int p = 0; p < 4; p++)
		cnl_mb_printf(b, "cnlab_queue_depth{priority=\"%s\"} %llu\n",
		              prio[p], (unsigned long long)queue[p]);
	cnl_mb_family(b, "cnlab_workloads", "gauge",
	              "Active jobs and servers by phase.");
	for (int s = 0; s < CNL_WL_NSTATES; s++)
		if (!cnl_wl_ended((enum cnl_wl_state)s))
			cnl_mb_printf(b, "cnlab_workloads{phase=\"%s\"} %llu\n",
			              cnl_wl_state_name((enum cnl_wl_state)s),
			              (unsigned long long)states[s]);
	cnl_mb_family(b, "cnlab_workloads_finished_total", "counter",
	              "Workloads that ended since start, by final state.");
	for (int p = 0; p < 4; p++)
		cnl_mb_printf(b,
		              "cnlab_workloads_finished_total{state=\"%s\"} "
		              "%llu\n",
		              fin[p], (unsigned long long)ctl->finished[p]);

	/* Blocks and MIG instances per GPU type. */
	cnl_mb_family(b, "cnlab_gpu_blocks", "gauge",
	              "1% GPU blocks by GPU type and state (allocated, "
	              "free).");
	for (int t = 0; t < cat->n; t++) {
		int64_t total = 0, freeb = 0;
		bool any = false;

		for (uint32_t i = 0; i < c->n_nodes; i++) {
			if (!c->nodes[i].n_gpus || c->nodes[i].gpu_type != t)
				continue;
			any = true;
			for (int g = 0; g < c->nodes[i].n_gpus; g++) {
				total += CNL_BLOCKS_PER_GPU;
				freeb += cnl_gpu_free_blocks(c, i, g);
			}
		}
		if (!any)
			continue;
		cnl_mb_printf(b,
		              "cnlab_gpu_blocks{gpu_type=\"%s\",state="
		              "\"allocated\"} %lld\n",
		              cat->types[t].name, (long long)(total - freeb));
		cnl_mb_printf(
		    b,
		    "cnlab_gpu_blocks{gpu_type=\"%s\",state=\"free\"} "
		    "%lld\n",
		    cat->types[t].name, (long long)freeb);
	}
	cnl_mb_family(b, "cnlab_mig_instances", "gauge",
	              "MIG instances in use by GPU type and profile.");
	for (int t = 0; t < cat->n; t++)
		for (int p = 0; p < cat->types[t].n_mig; p++) {
			uint64_t n = 0;
			bool any = false;

			for (uint32_t i = 0; i < c->n_nodes; i++) {
				const struct cnl_node *nd = &c->nodes[i];

				if (!nd->n_gpus || nd->gpu_type != t)
					continue;
				any = true;
				for (int g = 0; g < nd->n_gpus; g++)
					for (int k = 0; k < nd->gpus[g].n_inst;
					     k++)
						n += nd->gpus[g]
						         .inst[k]
						         .profile == p;
			}
			if (any)
				cnl_mb_printf(b,
				              "cnlab_mig_instances{gpu_type="
				              "\"%s\",profile=\"%s\"} %llu\n",
				              cat->types[t].name,
				              cat->types[t].mig[p].name,
				              (unsigned long long)n);
		}
	cnl_mb_family(b, "cnlab_nodes", "gauge", "Nodes by state.");
	for (int s = 0; s < 4; s++) {
		uint64_t n = 0;

		for (size_t i = 0; i < ctl->n_nodes; i++)
			n += ctl->nodes[i].state == s;
		cnl_mb_printf(b, "cnlab_nodes{state=\"%s\"} %llu\n",
		              ctl_nstate_names[s], (unsigned long long)n);
	}
	cnl_mb_family(b, "cnlab_nodes_lost_total", "counter",
	              "Times a node was marked lost.");
	cnl_mb_printf(b, "cnlab_nodes_lost_total %llu\n",
	              (unsigned long long)ctl->lost_nodes);
	cnl_mb_family(b, "cnlab_fenced_reports_total", "counter",
	              "Agent reports refused or work told to stop for a "
	              "stale epoch.");
	cnl_mb_printf(b, "cnlab_fenced_reports_total %llu\n",
	              (unsigned long long)ctl->fenced);
	cnl_mb_family(b, "cnlab_scheduling_cycle_seconds", "histogram",
	              "Time of one scheduling cycle.");
	cnl_hist_write(b, "cnlab_scheduling_cycle_seconds", "",
	               &ctl->cycle_hist);
	cnl_mb_family(b, "cnlab_queue_wait_seconds", "histogram",
	              "Time from submission to placement, by priority class.");
	for (int p = 0; p < 4; p++) {
		char labels[32];

		snprintf(labels, sizeof(labels), "priority=\"%s\"", prio[p]);
		cnl_wait_hist_write(b, "cnlab_queue_wait_seconds", labels,
		                    &ctl->wait_hist[p]);
	}
	cnl_mb_family(b, "cnlab_placements_total", "counter",
	              "Workloads placed on a node (each start after a "
	              "requeue too).");
	cnl_mb_printf(b, "cnlab_placements_total %llu\n",
	              (unsigned long long)ctl->placements);
	cnl_mb_family(b, "cnlab_preemptions_total", "counter",
	              "Running workloads pre-empted to make room for "
	              "higher-priority work.");
	cnl_mb_printf(b, "cnlab_preemptions_total %llu\n",
	              (unsigned long long)ctl->preemptions);
	cnl_mb_family(b, "cnlab_scheduling_cycles_total", "counter",
	              "Scheduling cycles run.");
	cnl_mb_printf(b, "cnlab_scheduling_cycles_total %llu\n",
	              (unsigned long long)ctl->cycles);
	fairshare_metrics(ctl, b);
	/* Prometheus wants base units: GPU-hours are exported as 1% block-
	 * seconds (360,000 per GPU-hour), storage GB-days as byte-seconds. */
	cnl_mb_family(b, "cnlab_usage_block_seconds_total", "counter",
	              "GPU use in 1% block-seconds, by owner (project or user "
	              "id).");
	for (size_t i = 0; i < ctl->n_usage; i++)
		cnl_mb_printf(
		    b,
		    "cnlab_usage_block_seconds_total{owner=\"%s\"} "
		    "%.3f\n",
		    cnl_mb_escape(ctl->usage[i].owner, esc, sizeof(esc)),
		    ctl->usage[i].block_ms / 1000.0);
	cnl_mb_family(b, "cnlab_usage_storage_byte_seconds_total", "counter",
	              "Server storage held, in byte-seconds, by owner.");
	for (size_t i = 0; i < ctl->n_usage; i++)
		cnl_mb_printf(
		    b,
		    "cnlab_usage_storage_byte_seconds_total{owner="
		    "\"%s\"} %.0f\n",
		    cnl_mb_escape(ctl->usage[i].owner, esc, sizeof(esc)),
		    ctl->usage[i].storage_gb_ms / 1000.0 * 1e9);
}
