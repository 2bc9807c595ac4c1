/*
 * ctl_cluster.c - several clusters under one controller: each its own
 * scheduling policy, and cluster-first placement (ctl.h, "clusters").
 *
 * A cluster's settings are documents of kind "cluster" (id: its name),
 * loaded at start and applied by cnl_ctl_cluster_set(); each becomes a
 * scheduler of its own (struct ctl_cl).  A cluster without settings runs
 * the controller's policy.
 *
 * With more than one cluster, a cycle (ctl_cycle_split) first gives every
 * pending job a cluster, and keeps it there: the pick is audited once
 * (stage "cluster", which `cnlab jobs explain` shows before the node's
 * decision), and a job moves only when it has waited past its cluster's
 * wait target and another cluster can start it at once (audited too).
 * A gang's members all go where its first member went.  The picks and
 * moves are noted (ctl->picks) for the cycle to audit.  Then each
 * cluster with pending work runs its own cycle: its jobs, held to its
 * nodes (their node sets intersected with the cluster's), and the work
 * running on its nodes, which is all its pre-emption and fair share see.
 * Picks live in memory and in the audit log, where a restart takes them
 * back from (pick_seen()).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/label.h"
#include "common/log.h"
#include "common/util.h"
#include "sched/pick.h"
#include "net/metrics.h"
#include "server/ctl-internal.h"

#define WAIT_TARGET_MAX_S (7 * 86400)
#define RECHECK_MS        10000 /* a stuck job looks elsewhere this often */

static struct ctl_cl *cl_find(struct cnl_ctl *ctl, const char *name)
{
	for (size_t i = 0; i < ctl->n_cls; i++)
		if (strcmp(ctl->cls[i].name, name) == 0)
			return &ctl->cls[i];
	return NULL;
}

static void cl_done(struct ctl_cl *cl)
{
	cnl_sched_free(cl->sched);
	json_decref(cl->weights);
	memset(cl, 0, sizeof(*cl));
}

static int fail(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return -CNL_EFIELD;
}

/* The knobs' names, for an error. */
static void knob_list(char *buf, size_t len)
{
	size_t at = 0;
	const char *k;

	buf[0] = '\0';
	for (size_t i = 0; (k = cnl_sched_knob(i)) && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%s",
		                       i ? ", " : "", k);
}

static void policy_list(char *buf, size_t len)
{
	const struct cnl_policy_ops *const *p = cnl_policy_list();
	size_t at = 0;

	buf[0] = '\0';
	for (size_t i = 0; p[i] && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%s",
		                       i ? ", " : "", p[i]->name);
}

/* @doc as a cluster's settings into @ret (its scheduler made). */
static int cl_make(struct cnl_ctl *ctl, const char *name, const json_t *doc,
                   struct ctl_cl *ret, char *err, size_t len)
{
	static const char *const fields[] = {"policy", "weights",
	                                     "wait_target_s", NULL};
	struct cnl_sched_config sc = *cnl_sched_config_of(ctl->sched);
	const json_t *pol, *w, *t, *v;
	const char *key;
	char list[512];
	int r;

	memset(ret, 0, sizeof(*ret));
	if (!cnl_label_valid(name) || strlen(name) >= sizeof(ret->name))
		return fail(err, len,
		            "cluster name: must be 1..31 characters of A-Z "
		            "a-z 0-9 . _ -, not starting with . or -");
	if (!json_is_object(doc))
		return fail(err, len, "body: must be a JSON object");
	json_object_foreach ((json_t *)doc, key, v) {
		size_t i = 0;

		while (fields[i] && strcmp(fields[i], key) != 0)
			i++;
		if (!fields[i])
			return fail(
			    err, len,
			    "field \"%.64s\": unknown (policy, weights, "
			    "wait_target_s)",
			    key);
	}
	pol = json_object_get(doc, "policy");
	if (pol && (!json_is_string(pol) ||
	            !cnl_policy_find(json_string_value(pol)))) {
		policy_list(list, sizeof(list));
		return fail(err, len, "field \"policy\": must be one of %s",
		            list);
	}
	if (pol)
		snprintf(sc.policy, sizeof(sc.policy), "%s",
		         json_string_value(pol));
	w = json_object_get(doc, "weights");
	if (w && !json_is_object(w))
		return fail(err, len,
		            "field \"weights\": must be an object of knob: "
		            "number");
	json_object_foreach ((json_t *)w, key, v) {
		if (!json_is_number(v))
			return fail(err, len,
			            "field \"weights.%.64s\": must be a number",
			            key);
		r = cnl_sched_config_set(&sc, key, json_number_value(v));
		if (r == -CNL_ENOTFOUND) {
			knob_list(list, sizeof(list));
			return fail(
			    err, len,
			    "field \"weights.%.64s\": unknown; one of %s", key,
			    list);
		}
		if (r < 0)
			return fail(
			    err, len,
			    "field \"weights.%.64s\": %g is out of range", key,
			    json_number_value(v));
	}
	ret->wait_target_ms = CTL_WAIT_TARGET_MS;
	t = json_object_get(doc, "wait_target_s");
	if (t) {
		if (!json_is_integer(t) || json_integer_value(t) < 0 ||
		    json_integer_value(t) > WAIT_TARGET_MAX_S)
			return fail(
			    err, len,
			    "field \"wait_target_s\": must be an integer "
			    "of 0..%d (0: work never moves away)",
			    WAIT_TARGET_MAX_S);
		ret->wait_target_ms = json_integer_value(t) * 1000;
	}
	if ((r = cnl_sched_new(&sc, &ret->sched)) < 0)
		return r == -ENOMEM ? r
		                    : fail(err, len,
		                           "weights: not a valid "
		                           "configuration");
	snprintf(ret->name, sizeof(ret->name), "%s", name);
	snprintf(ret->policy, sizeof(ret->policy), "%s", sc.policy);
	ret->weights = w ? json_deep_copy(w) : json_object();
	return 0;
}

int cnl_ctl_cluster_check(struct cnl_ctl *ctl, const char *name,
                          const json_t *doc, char *err, size_t errlen)
{
	struct ctl_cl cl;
	int r = cl_make(ctl, name, doc, &cl, err, errlen);

	if (r == 0)
		cl_done(&cl);
	return r;
}

int cnl_ctl_cluster_set(struct cnl_ctl *ctl, const char *name,
                        const json_t *doc, int64_t now, char *err,
                        size_t errlen)
{
	struct ctl_cl cl, *old;
	int r;

	if ((r = cl_make(ctl, name, doc, &cl, err, errlen)) < 0)
		return r;
	cl.updated_ms = now;
	if ((old = cl_find(ctl, name))) {
		cl_done(old);
		*old = cl;
	} else {
		ctl->cls = cnl_xrealloc(ctl->cls,
		                        (ctl->n_cls + 1) * sizeof(*ctl->cls));
		ctl->cls[ctl->n_cls++] = cl;
	}
	cnl_log(CNL_LOG_INFO, "cluster policy set", "cluster=%s policy=%s",
	        name, cl.policy);
	cnl_ctl_kick(ctl);
	return 0;
}

/*
 * The pick of pending workload @target from its latest "cluster" decision
 * ("cluster NAME picked: ..." or "moved to cluster NAME: ..."): a restart
 * keeps the picks, so the first cycle neither audits them again nor
 * moves work that had settled.  (A "cluster NAME chosen: node ..." is a
 * start, from before a requeue: that job is picked afresh.)
 */
static int pick_seen(void *ud, const char *target, const char *result)
{
	static const char moved[] = "moved to cluster ";
	struct cnl_ctl *ctl = ud;
	struct wl *w = ctl_wl_find(ctl, target);
	const char *name, *end;

	if (!w || w->state != CNL_WL_PENDING)
		return 0;
	if (strncmp(result, moved, sizeof(moved) - 1) == 0) {
		name = result + sizeof(moved) - 1;
		end = strchr(name, ':');
	} else if (strncmp(result, "cluster ", 8) == 0) {
		name = result + 8;
		end = strstr(name, " picked: ");
	} else {
		return 0;
	}
	if (end && end > name && (size_t)(end - name) < sizeof(w->cl_pick)) {
		memcpy(w->cl_pick, name, (size_t)(end - name));
		w->cl_pick[end - name] = '\0';
		w->cl_pick_ms = ctl_now_ms();
	}
	return 0;
}

int ctl_clusters_load(struct cnl_ctl *ctl)
{
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	char err[256];
	int n = 0, r;

	r = cnl_store_doc_list(ctl->store, "cluster", NULL, NULL,
	                       CNL_STORE_LIST_MAX, d, &n);
	for (int i = 0; r == 0 && i < n; i++) {
		json_t *o = json_loads(d[i].body, 0, NULL);

		/* A document this version cannot read is skipped, not fatal:
		 * the cluster runs the controller's policy meanwhile. */
		if (cnl_ctl_cluster_set(ctl, d[i].id, o, d[i].updated_ms, err,
		                        sizeof(err)) < 0)
			cnl_log(CNL_LOG_WARN, "cluster policy ignored",
			        "cluster=%s err=%s", d[i].id, err);
		json_decref(o);
	}
	cnl_store_docs_done(d, n);
	free(d);
	/* Work queued before a restart is not a burst of arrivals. */
	for (size_t i = 0; i < ctl->n_wl; i++)
		ctl->wl[i].fc_seen = true;
	if (r == 0)
		r = cnl_store_audit_latest(ctl->store, "sched.cluster",
		                           pick_seen, ctl);
	return r;
}

void ctl_clusters_free(struct cnl_ctl *ctl)
{
	for (size_t i = 0; i < ctl->n_cls; i++)
		cl_done(&ctl->cls[i]);
	free(ctl->cls);
	ctl->cls = NULL;
	ctl->n_cls = 0;
}

/* The clusters now: node labels and configured ones. */
static int scan(struct cnl_ctl *ctl, struct cnl_picks *p)
{
	char(*known)[CNL_NAME_MAX] =
	    cnl_xcalloc(ctl->n_cls + 1, sizeof(*known));
	int r;

	for (size_t i = 0; i < ctl->n_cls; i++)
		memcpy(known[i], ctl->cls[i].name, CNL_NAME_MAX);
	r = cnl_picks_scan(ctl->cluster, (const char(*)[CNL_NAME_MAX])known,
	                   ctl->n_cls, p);
	free(known);
	return r;
}

bool cnl_ctl_cluster_room(struct cnl_ctl *ctl)
{
	return ctl->n_cls < CNL_PICK_MAX - 1;
}

bool cnl_ctl_cluster_known(struct cnl_ctl *ctl, const char *name)
{
	struct cnl_picks p;
	bool found;

	if (cl_find(ctl, name))
		return true;
	if (scan(ctl, &p) < 0)
		return false;
	found = cnl_picks_find(&p, name) >= 0;
	cnl_picks_done(&p);
	return found;
}

static struct ctl_fc *fc_of(struct cnl_ctl *ctl, const char *name);

/* The cluster work without a pick belongs to: the one cluster with nodes
 * when there is only one (the single cycle picks nothing), else -1. */
static int only_cluster(const struct cnl_picks *p)
{
	int only = -1;

	for (size_t k = 0; k < p->n; k++)
		if (p->load[k].nodes) {
			if (only >= 0)
				return -1;
			only = (int)k;
		}
	return only;
}

/* The cluster pending workload @w counts in: its pick, else @only (the
 * only cluster with nodes, only_cluster()); -1: none yet. */
static int pending_in(const struct cnl_picks *p, const struct wl *w, int only)
{
	return w->cl_pick[0] ? cnl_picks_find(p, w->cl_pick) : only;
}

static bool placed(const struct wl *w)
{
	return w->node >= 0 && w->state != CNL_WL_PENDING &&
	       w->state != CNL_WL_REQUEUING;
}

/* Each cluster's pending and running work, in one pass over the
 * registry (@pending and @running: p->n each). */
static void work_counts(struct cnl_ctl *ctl, const struct cnl_picks *p,
                        int *pending, int *running)
{
	int only = only_cluster(p), k;

	for (size_t i = 0; i < ctl->n_wl; i++) {
		const struct wl *w = &ctl->wl[i];

		if (placed(w)) {
			if ((uint32_t)w->node < p->n_nodes)
				running[p->of_node[w->node]]++;
			continue;
		}
		if ((k = pending_in(p, w, only)) >= 0)
			pending[k]++;
	}
}

static json_t *cluster_json(struct cnl_ctl *ctl, const struct cnl_picks *p,
                            size_t k, int pending, int running, bool nodes)
{
	const struct ctl_cl *cl = cl_find(ctl, p->name[k]);
	const struct cnl_pick_load *l = &p->load[k];
	json_t *o;

	o = json_pack(
	    "{s:s,s:i,s:i,s:i,s:f,s:i,s:i,s:s,s:o,s:I,s:b}", "name", p->name[k],
	    "nodes", (int)l->nodes, "nodes_up", (int)l->nodes_up, "gpus",
	    (int)l->gpus, "utilisation",
	    round(cnl_picks_util(p, k) * 1000) / 1000, "pending", pending,
	    "running", running, "policy",
	    cl ? cl->policy : cnl_sched_config_of(ctl->sched)->policy,
	    "weights", cl ? json_deep_copy(cl->weights) : json_object(),
	    "wait_target_s",
	    (json_int_t)((cl ? cl->wait_target_ms : CTL_WAIT_TARGET_MS) / 1000),
	    "configured", cl != NULL);
	if (cl)
		json_object_set_new(o, "updated_at",
		                    ctl_time_or_null(cl->updated_ms));
	{
		struct ctl_fc *f = fc_of(ctl, p->name[k]);
		double e = cnl_fc_error(&f->fc);

		json_object_set_new(
		    o, "forecast",
		    json_pack("{s:f,s:f,s:f,s:o,s:s}", "utilisation_90s",
		              round(f->predicted * 1000) / 1000,
		              "arrivals_90s_blocks",
		              round(cnl_fc_arrivals(&f->fc, ctl_now_ms(),
		                                    CNL_FC_HORIZON_MS)),
		              "runtime_ratio",
		              round(cnl_fc_runtime_ratio(&f->fc) * 100) / 100,
		              "error",
		              e < 0 ? json_null()
		                    : json_real(round(e * 1000) / 1000),
		              "model",
		              "held - ending + pending + arrivals; arrivals by "
		              "additive Holt-Winters per 10 s, 15-minute "
		              "time-of-day season"));
	}
	if (nodes) {
		json_t *a = json_array();

		for (uint32_t i = 0; i < p->n_nodes && i < ctl->n_nodes; i++)
			if (p->of_node[i] == k)
				json_array_append_new(
				    a, json_string(ctl->nodes[i].name));
		json_object_set_new(o, "node_names", a);
	}
	return o;
}

json_t *cnl_ctl_clusters_json(struct cnl_ctl *ctl, const char *name)
{
	struct cnl_picks p;
	json_t *ret = NULL;
	int pending[CNL_PICK_MAX] = {0}, running[CNL_PICK_MAX] = {0};

	if (scan(ctl, &p) < 0)
		return NULL;
	work_counts(ctl, &p, pending, running);
	if (name) {
		int k = cnl_picks_find(&p, name);

		if (k >= 0)
			ret = cluster_json(ctl, &p, (size_t)k, pending[k],
			                   running[k], true);
	} else {
		ret = json_array();
		for (size_t k = 0; k < p.n; k++)
			json_array_append_new(
			    ret, cluster_json(ctl, &p, k, pending[k],
			                      running[k], false));
	}
	cnl_picks_done(&p);
	return ret;
}

/* ---- the split cycle ---------------------------------------------------- */

/* The node sets of one split cycle: a job's set within a cluster. */
struct xset {
	const struct cnl_node_set *base;
	size_t k;
	struct cnl_node_set set;
};

struct split {
	struct cnl_ctl *ctl;
	const size_t *map; /* job index to workload index */
	struct cnl_picks p;
	int16_t *of_job;  /* cluster of each job, -1: none */
	struct xset **xs; /* each its own allocation: jobs point into them */
	size_t n_xs, cap_xs;
	uint64_t cloud; /* clusters holding a cloud node (bit k) */
	uint64_t *gang; /* gangs picked this cycle, and their clusters */
	int16_t *gang_k;
	size_t n_gang;
	int64_t now;
};

static const struct cnl_node_set *
xset_of(struct split *s, const struct cnl_node_set *base, size_t k)
{
	uint32_t n = s->p.n_nodes;
	struct xset *x;

	for (size_t i = 0; i < s->n_xs; i++)
		if (s->xs[i]->base == base && s->xs[i]->k == k)
			return &s->xs[i]->set;
	if (s->n_xs == s->cap_xs) {
		s->cap_xs = 2 * s->cap_xs + 8;
		s->xs = cnl_xrealloc(s->xs, s->cap_xs * sizeof(*s->xs));
	}
	x = s->xs[s->n_xs++] = cnl_xcalloc(1, sizeof(*x));
	x->base = base;
	x->k = k;
	x->set.len = n;
	x->set.bits = cnl_xcalloc(n / 64 + 1, sizeof(uint64_t));
	for (uint32_t i = 0; i < n; i++)
		if (s->p.of_node[i] == k &&
		    (!base || cnl_node_set_has(base, i)))
			x->set.bits[i >> 6] |= 1ULL << (i & 63);
	return &x->set;
}

/* Note a pick for the audit (ctl->picks, written by the cycle). */
static void note_pick(struct split *s, const struct wl *w, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note_pick(struct split *s, const struct wl *w, const char *fmt, ...)
{
	struct cnl_ctl *ctl = s->ctl;
	struct ctl_pick_note *n;
	va_list ap;

	if (ctl->n_picks == ctl->cap_picks) {
		ctl->cap_picks = 2 * ctl->cap_picks + 16;
		ctl->picks = cnl_xrealloc(ctl->picks,
		                          ctl->cap_picks * sizeof(*ctl->picks));
	}
	n = &ctl->picks[ctl->n_picks++];
	memcpy(n->id, w->id, sizeof(n->id));
	va_start(ap, fmt);
	vsnprintf(n->text, sizeof(n->text), fmt, ap);
	va_end(ap);
}

static const char *policy_of(struct cnl_ctl *ctl, const char *name)
{
	const struct ctl_cl *cl = cl_find(ctl, name);

	return cl ? cl->policy : cnl_sched_config_of(ctl->sched)->policy;
}

static int64_t wait_target(struct cnl_ctl *ctl, const char *name)
{
	const struct ctl_cl *cl = cl_find(ctl, name);

	return cl ? cl->wait_target_ms : CTL_WAIT_TARGET_MS;
}

int64_t ctl_cluster_wait_target(struct cnl_ctl *ctl, const char *name)
{
	return wait_target(ctl, name);
}

/* The cluster of pending job @j (workload @w): -1 when none can run it. */
static int pick_one(struct split *s, const struct cnl_job *j, struct wl *w)
{
	struct cnl_ctl *ctl = s->ctl;
	const struct cnl_cluster *c = ctl->cluster;
	struct cnl_pick pk;
	int asked = -1, cur;
	int64_t target;
	/* On-prem-only work never goes where a cloud node is; a pinned
	 * project's only to its clusters. */
	uint64_t allowed = (ctl_on_prem_only(ctl, w) ? ~s->cloud : ~0ULL) &
	                   ctl_pinned_mask(ctl, w, &s->p) &
	                   ctl_quota_mask(ctl, w, &s->p);

	if (j->gang)
		for (size_t g = 0; g < s->n_gang; g++)
			if (s->gang[g] == j->gang) {
				if (s->gang_k[g] >= 0 &&
				    strcmp(w->cl_pick,
				           s->p.name[s->gang_k[g]]) != 0) {
					memcpy(w->cl_pick,
					       s->p.name[s->gang_k[g]],
					       CNL_NAME_MAX);
					w->cl_pick_ms = s->now;
				}
				return s->gang_k[g];
			}
	if (w->cl_want[0] && ((asked = cnl_picks_find(&s->p, w->cl_want)) < 0 ||
	                      !(allowed >> asked & 1)))
		return -1;
	cur = w->cl_pick[0] ? cnl_picks_find(&s->p, w->cl_pick) : -1;
	if (cur >= 0 && !(allowed >> cur & 1))
		cur = -1; /* its project was marked or pinned since */
	if (cur >= 0 && asked < 0 && s->cloud &&
	    !cnl_pick_fits_now(c, &s->p, j, (size_t)cur)) {
		/* Capacity bought by the hour serves at once: work that
		 * cannot start where it waits goes to a cloud cluster that
		 * can start it now, and back to owned GPUs as soon as they
		 * can (no wait target: the cloud is there for the queue). */
		bool in_cloud = s->cloud >> cur & 1;

		if (cnl_pick_cluster(c, &s->p, j, -1,
		                     allowed & ~(1ULL << (unsigned)cur) &
		                         (in_cloud ? ~s->cloud : s->cloud),
		                     &pk) == 0 &&
		    pk.cluster >= 0 && pk.now) {
			note_pick(s, w,
			          in_cloud ? "moved back to cluster %s: it can "
			                     "start there now, on GPUs owned "
			                     "(cluster %s cannot start it now)"
			                   : "moved to cloud cluster %s: it "
			                     "cannot start in cluster %s now; "
			                     "the cloud can",
			          s->p.name[pk.cluster], w->cl_pick);
			memcpy(w->cl_pick, s->p.name[pk.cluster], CNL_NAME_MAX);
			w->cl_pick_ms = s->now;
			return pk.cluster;
		}
	}
	if (cur >= 0 && (asked < 0 || cur == asked)) {
		target = wait_target(ctl, w->cl_pick);
		if (asked >= 0 || target <= 0 ||
		    s->now - w->cl_pick_ms < target ||
		    cnl_pick_fits_now(c, &s->p, j, (size_t)cur))
			return cur;
		/* Waited past the target: another cluster that can start it
		 * now takes it; else it looks again a little later. */
		if (cnl_pick_cluster(c, &s->p, j, -1,
		                     allowed & ~(1ULL << (unsigned)cur),
		                     &pk) == 0 &&
		    pk.cluster >= 0 && pk.now) {
			note_pick(s, w,
			          "moved to cluster %s: waited %" PRId64
			          " s in cluster %s (its wait target %" PRId64
			          " s), which cannot start it now; %s can "
			          "(policy %s)",
			          s->p.name[pk.cluster],
			          (s->now - w->cl_pick_ms) / 1000, w->cl_pick,
			          target / 1000, s->p.name[pk.cluster],
			          policy_of(ctl, s->p.name[pk.cluster]));
			memcpy(w->cl_pick, s->p.name[pk.cluster], CNL_NAME_MAX);
			w->cl_pick_ms = s->now;
			return pk.cluster;
		}
		w->cl_pick_ms = s->now - target + RECHECK_MS;
		return cur;
	}
	if (cnl_pick_cluster(c, &s->p, j, asked, allowed, &pk) < 0 ||
	    pk.cluster < 0)
		return -1;
	memcpy(w->cl_pick, s->p.name[pk.cluster], CNL_NAME_MAX);
	w->cl_pick_ms = s->now;
	note_pick(s, w,
	          "cluster %s picked: %s; its policy %s places it (%.0f%% "
	          "of its GPU capacity in use)",
	          w->cl_pick, cnl_pick_why_text((enum cnl_pick_why)pk.why),
	          policy_of(ctl, w->cl_pick),
	          100 * cnl_picks_util(&s->p, (size_t)pk.cluster));
	return pk.cluster;
}

/* The same, and a gang's first member's pick kept for the others. */
static int pick_pending(struct split *s, const struct cnl_job *j, struct wl *w)
{
	size_t g = 0;
	int k;

	while (j->gang && g < s->n_gang && s->gang[g] != j->gang)
		g++;
	k = pick_one(s, j, w);
	if (j->gang && g == s->n_gang) {
		s->gang[s->n_gang] = j->gang;
		s->gang_k[s->n_gang++] = (int16_t)k;
	}
	return k;
}

static void push(struct cnl_decisions *out, const struct cnl_decision *d)
{
	if (out->n == out->cap) {
		out->cap = 2 * out->cap + 64;
		out->d = cnl_xrealloc(out->d, out->cap * sizeof(*out->d));
	}
	out->d[out->n++] = *d;
}

/* Cluster @k's cycle over its jobs; its decisions appended to @out. */
static int run_one(struct split *s, const struct cnl_job *jobs, size_t n,
                   size_t k, struct cnl_decisions *out)
{
	struct cnl_ctl *ctl = s->ctl;
	const struct ctl_cl *cl = cl_find(ctl, s->p.name[k]);
	struct cnl_sched *sched = cl ? cl->sched : ctl->sched;
	struct cnl_decisions dec = {0};
	struct cnl_job *sub = cnl_xmalloc((n + 1) * sizeof(*sub));
	size_t *back = cnl_xmalloc((n + 1) * sizeof(*back)), ns = 0;
	int r;

	for (size_t i = 0; i < n; i++) {
		if (s->of_job[i] != (int16_t)k)
			continue;
		sub[ns] = jobs[i];
		if (jobs[i].state == CNL_JOB_PENDING)
			sub[ns].req.nodes = xset_of(s, jobs[i].req.nodes, k);
		back[ns++] = i;
	}
	/* Run even without pending work: its idle nodes are reported. */
	r = cnl_sched_cycle_inc(sched, ctl->cluster, sub, ns, s->now,
	                        ctl->cfg.seed ^ (uint64_t)s->now ^ k, &dec);
	if (r < 0) {
		/* Nothing of it stands: the starts it committed are freed,
		 * the victims it released are held again. */
		for (size_t i = 0; i < dec.n; i++) {
			const struct cnl_decision *d = &dec.d[i];

			if (d->kind == CNL_DEC_START)
				cnl_alloc_free(ctl->cluster, d->alloc_id);
			else if (d->kind == CNL_DEC_PREEMPT && d->job < ns) {
				struct wl *v = &ctl->wl[s->map[back[d->job]]];

				cnl_alloc_adopt(ctl->cluster, &v->placed,
				                &v->alloc_id);
			}
		}
	}
	for (size_t i = 0; r == 0 && i < dec.n; i++) {
		struct cnl_decision d = dec.d[i];

		if (d.kind == CNL_DEC_POWER_DOWN) {
			if (d.node < s->p.n_nodes && s->p.of_node[d.node] == k)
				push(out, &d);
			continue;
		}
		if (d.job >= ns)
			continue;
		d.job = (uint32_t)back[d.job];
		if (d.kind == CNL_DEC_PREEMPT)
			d.for_job = d.for_job < ns ? (uint32_t)back[d.for_job]
			                           : UINT32_MAX;
		push(out, &d);
	}
	cnl_decisions_done(&dec);
	free(sub);
	free(back);
	return r;
}

int ctl_cycle_split(struct cnl_ctl *ctl, const struct cnl_job *jobs,
                    const size_t *map, size_t n, int64_t now,
                    struct cnl_decisions *out)
{
	struct split s = {.ctl = ctl, .map = map, .now = now};
	int r;

	out->n = 0;
	if ((r = scan(ctl, &s.p)) < 0) {
		/* More clusters than one controller splits its cycle into
		 * (CNL_PICK_MAX): one cycle over all, as before clusters. */
		cnl_log(CNL_LOG_WARN, "too many clusters to schedule apart",
		        "max=%d err=%s", CNL_PICK_MAX, cnl_errname(r));
		return 0;
	}
	s.cloud = ctl_cloud_clusters(ctl, &s.p);
	/* One cluster with nodes, none of them cloud instances, and no
	 * work asking for another: one cycle, under that cluster's own
	 * policy if it has one. */
	if (!s.cloud) {
		int real = -1, n_real = 0;
		bool elsewhere = false;

		for (size_t k = 0; k < s.p.n; k++)
			if (s.p.load[k].nodes) {
				real = (int)k;
				n_real++;
			}
		for (size_t i = 0; n_real <= 1 && !elsewhere && i < n; i++) {
			const struct wl *w = &ctl->wl[map[i]];

			elsewhere =
			    jobs[i].state == CNL_JOB_PENDING &&
			    ((w->cl_want[0] &&
			      (real < 0 ||
			       strcmp(w->cl_want, s.p.name[real]) != 0)) ||
			     (real >= 0 &&
			      (!cnl_ctl_project_pinned(ctl, w->project_id,
			                               s.p.name[real]) ||
			       cnl_ctl_cluster_quota_spent(ctl, w->project_id,
			                                   s.p.name[real]))));
		}
		if (n_real <= 1 && !elsewhere) {
			const struct ctl_cl *cl =
			    real >= 0 ? cl_find(ctl, s.p.name[real]) : NULL;

			cnl_picks_done(&s.p);
			if (!cl)
				return 0;
			r = cnl_sched_cycle_inc(
			    cl->sched, ctl->cluster, jobs, n, now,
			    ctl->cfg.seed ^ (uint64_t)now, out);
			return r < 0 ? r : 1;
		}
	}
	s.of_job = cnl_xmalloc((n + 1) * sizeof(*s.of_job));
	s.gang = cnl_xmalloc((n + 1) * sizeof(*s.gang));
	s.gang_k = cnl_xmalloc((n + 1) * sizeof(*s.gang_k));
	for (size_t i = 0; i < n; i++) {
		const struct cnl_job *j = &jobs[i];
		struct wl *w = &ctl->wl[map[i]];
		const struct cnl_alloc *a;
		int k = -1;

		if (j->state == CNL_JOB_RUNNING) {
			a = cnl_alloc_get(ctl->cluster, j->alloc_id);
			if (a && a->node < s.p.n_nodes)
				k = s.p.of_node[a->node];
		} else {
			k = pick_pending(&s, j, w);
			if (k < 0)
				push(out,
				     &(struct cnl_decision){
				         .kind = CNL_DEC_WAIT,
				         .reason = CNL_WHY_NO_MATCHING_NODE,
				         .job = (uint32_t)i,
				         .node = UINT32_MAX,
				         .at_ms = -1,
				         .error = -CNL_ENOSPACE});
		}
		s.of_job[i] = (int16_t)k;
	}
	/* One cluster's failure leaves the others' decisions standing. */
	for (size_t k = 0; k < s.p.n; k++)
		if ((r = run_one(&s, jobs, n, k, out)) < 0)
			cnl_log(
			    CNL_LOG_ERROR, "cluster's scheduling cycle failed",
			    "cluster=%s err=%s", s.p.name[k], cnl_errname(r));
	ctl->split_cycles++;
	r = 1;
	for (size_t i = 0; i < s.n_xs; i++) {
		free(s.xs[i]->set.bits);
		free(s.xs[i]);
	}
	free(s.xs);
	free(s.of_job);
	free(s.gang);
	free(s.gang_k);
	cnl_picks_done(&s.p);
	return r;
}

/* ---- the saturation forecast --------------------------------------------- */

#define FORECAST_EVERY_MS 2000

static struct ctl_fc *fc_of(struct cnl_ctl *ctl, const char *name)
{
	struct ctl_fc *f;

	for (size_t i = 0; i < ctl->n_fcs; i++)
		if (strcmp(ctl->fcs[i].name, name) == 0)
			return &ctl->fcs[i];
	ctl->fcs = cnl_xrealloc(ctl->fcs, (ctl->n_fcs + 1) * sizeof(*ctl->fcs));
	f = &ctl->fcs[ctl->n_fcs++];
	memset(f, 0, sizeof(*f));
	snprintf(f->name, sizeof(f->name), "%s", name);
	cnl_fc_init(&f->fc);
	return f;
}

void ctl_forecast_ended(struct cnl_ctl *ctl, const struct wl *w, int64_t now)
{
	struct cnl_picks p;
	int k;

	if (w->node < 0 || w->j.runtime_ms <= 0 || w->started_ms <= 0 ||
	    scan(ctl, &p) < 0)
		return;
	k = (uint32_t)w->node < p.n_nodes ? p.of_node[w->node] : -1;
	if (k >= 0)
		cnl_fc_ended(&fc_of(ctl, p.name[k])->fc, w->j.runtime_ms,
		             now - w->started_ms);
	cnl_picks_done(&p);
}

void ctl_forecast_tick(struct cnl_ctl *ctl, int64_t now)
{
	struct cnl_picks p;
	int only;
	double *pending, *ending, *ratio;
	struct ctl_fc **f;

	if (now - ctl->fc_last_ms < FORECAST_EVERY_MS || scan(ctl, &p) < 0)
		return;
	ctl->fc_last_ms = now;
	only = only_cluster(&p);
	pending = cnl_xcalloc(p.n + 1, sizeof(*pending));
	ending = cnl_xcalloc(p.n + 1, sizeof(*ending));
	ratio = cnl_xcalloc(p.n + 1, sizeof(*ratio));
	f = cnl_xcalloc(p.n + 1, sizeof(*f));
	/* Every cluster's forecast made first: fc_of() may move the table,
	 * so the pointers are taken after. */
	for (size_t k = 0; k < p.n; k++)
		(void)fc_of(ctl, p.name[k]);
	for (size_t k = 0; k < p.n; k++) {
		f[k] = fc_of(ctl, p.name[k]);
		ratio[k] = cnl_fc_runtime_ratio(&f[k]->fc);
	}
	for (size_t i = 0; i < ctl->n_wl; i++) {
		struct wl *w = &ctl->wl[i];
		const struct cnl_alloc *a;
		int k;

		if (!placed(w)) {
			if (w->state != CNL_WL_PENDING)
				continue;
			/* Work not yet picked (several clusters) is counted
			 * once it is. */
			k = pending_in(&p, w, only);
			if (k < 0)
				continue;
			pending[k] += cnl_req_blocks(&w->j.req);
			if (!w->fc_seen) {
				w->fc_seen = true;
				cnl_fc_arrival(&f[k]->fc, now,
				               cnl_req_blocks(&w->j.req));
			}
			continue;
		}
		if ((uint32_t)w->node >= p.n_nodes || w->j.runtime_ms <= 0 ||
		    w->started_ms <= 0 || !w->alloc_id)
			continue;
		k = p.of_node[w->node];
		if (w->started_ms +
		            (int64_t)((double)w->j.runtime_ms * ratio[k]) <=
		        now + CNL_FC_HORIZON_MS &&
		    (a = cnl_alloc_get(ctl->cluster, w->alloc_id)))
			ending[k] += cnl_alloc_blocks_held(ctl->cluster, a);
	}
	for (size_t k = 0; k < p.n; k++) {
		struct cnl_fc_now st = {.capacity =
		                            (double)p.load[k].blocks_total,
		                        .held = (double)p.load[k].blocks_used,
		                        .ending = ending[k],
		                        .pending = pending[k]};

		f[k]->util = cnl_picks_util(&p, k);
		/* Forecasts are of demand (held + pending), scored so. */
		cnl_fc_tick(
		    &f[k]->fc, now,
		    st.capacity > 0 ? (st.held + st.pending) / st.capacity : 0);
		f[k]->predicted = cnl_fc_predict(&f[k]->fc, now, &st);
	}
	free(pending);
	free(ending);
	free(ratio);
	free(f);
	cnl_picks_done(&p);
}

void ctl_clusters_metrics(struct cnl_ctl *ctl, struct cnl_metrics_buf *b)
{
	/* Names are labels (A-Z a-z 0-9 . _ -), escaped all the same. */
	char(*q)[2 * CNL_NAME_MAX + 1] =
	    cnl_xcalloc(ctl->n_fcs + 1, sizeof(*q));

	for (size_t i = 0; i < ctl->n_fcs; i++)
		cnl_mb_escape(ctl->fcs[i].name, q[i], sizeof(q[i]));
	cnl_mb_family(b, "cnlab_cluster_utilisation", "gauge",
	              "Share of a cluster's GPU capacity (nodes taking work) "
	              "in use, at the last forecast.");
	for (size_t i = 0; i < ctl->n_fcs; i++)
		cnl_mb_printf(b,
		              "cnlab_cluster_utilisation{cluster=\"%s\"} %g\n",
		              q[i], ctl->fcs[i].util);
	cnl_mb_family(b, "cnlab_cluster_forecast_utilisation", "gauge",
	              "A cluster's GPU demand expected 90 s ahead, as a share "
	              "of its capacity (above 1: saturated).");
	for (size_t i = 0; i < ctl->n_fcs; i++)
		cnl_mb_printf(
		    b,
		    "cnlab_cluster_forecast_utilisation{cluster=\"%s\","
		    "horizon=\"90s\"} %g\n",
		    q[i], ctl->fcs[i].predicted);
	cnl_mb_family(b, "cnlab_cluster_forecast_error", "gauge",
	              "Mean absolute error of a cluster's 90 s forecasts so "
	              "far, in share of capacity.");
	for (size_t i = 0; i < ctl->n_fcs; i++)
		if (cnl_fc_error(&ctl->fcs[i].fc) >= 0)
			cnl_mb_printf(
			    b,
			    "cnlab_cluster_forecast_error{cluster=\"%s\"} "
			    "%g\n",
			    q[i], cnl_fc_error(&ctl->fcs[i].fc));
	free(q);
}

double ctl_forecast_demand(struct cnl_ctl *ctl, const char *name,
                           double capacity)
{
	for (size_t i = 0; i < ctl->n_fcs; i++)
		if (strcmp(ctl->fcs[i].name, name) == 0)
			return ctl->fcs[i].predicted * capacity;
	return 0;
}

bool ctl_cluster_starved(struct cnl_ctl *ctl, const char *name)
{
	struct cnl_picks p;
	bool starved = false;
	int k, only;

	if (scan(ctl, &p) < 0)
		return false;
	k = cnl_picks_find(&p, name);
	only = only_cluster(&p);
	for (size_t i = 0; k >= 0 && i < ctl->n_wl && !starved; i++) {
		const struct wl *w = &ctl->wl[i];

		starved = w->state == CNL_WL_PENDING &&
		          (w->wait_reason == CNL_WHY_NO_CAPACITY ||
		           w->wait_reason == CNL_WHY_NO_NODE_TAKING_WORK) &&
		          pending_in(&p, w, only) == k;
	}
	cnl_picks_done(&p);
	return starved;
}
