/*
 * api_dashboard.c - the web dashboard's data: GET /v1/dashboard (one
 * snapshot) and GET /v1/dashboard/events (the same as Server-Sent Events,
 * a new one whenever it changes).  docs/dashboard.md has the JSON.
 *
 * One snapshot for everyone.  cnlabd keeps a version counter, bumped
 * (cnl_api_dash_bump()) wherever what the dashboard shows may change: a
 * state-changing request answered (submit, cancel, heartbeat, drain...),
 * the controller's changed hook (a job's state or run record written by a
 * cycle or a report), and the tick when a node's liveness moved.  The
 * snapshot is built only when someone asks for it and its version is
 * behind: once per change however many dashboards are open, under the
 * API's lock (the controller's memory: cnl_ctl_dashboard_json()) plus a
 * few store reads whose answers are cached (names of projects, users, a
 * workload's name, an ended job for the recent list).  It is immutable,
 * refcounted and swapped under the hub's own small lock.
 *
 * Per viewer.  An administrator sees it all.  Anyone else sees the
 * slices, jobs and servers of the projects they belong to; another
 * tenant's slice is {"kind": "other"} with its place and size only, and
 * other projects' work is absent from the lists (only counted in
 * pending_counts).  The text of each viewer's view is made once per
 * snapshot and shared by that viewer's streams (views[]).
 *
 * Streams never take the API's lock to wait: each sleeps on the hub's
 * condition variable until the version moves or a ping is due, sends at
 * most one snapshot per DASH_MIN_GAP_MS (changes in between coalesce),
 * and waits, as every answer does, until the commits the snapshot could
 * have seen are durable (cnl_commit_wait()).  Authorization is checked
 * when a stream opens and again, on the store, whenever an
 * authentication-relevant change was answered since (logout, disable,
 * membership, password): a revoked session or a removed member's stream
 * ends.
 *
 * Lock order: api->mu, then the hub's mu; never the other way round (a
 * builder takes api->mu holding nothing, then the hub's to install).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnlab/errors.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "server/api-internal.h"

#define DASH_MIN_GAP_MS  250   /* at most ~4 snapshots a second */
#define DASH_PING_MS     15000 /* ": ping" when silent this long */
#define DASH_PENDING_MAX 200   /* pending items listed */
#define DASH_RECENT_MAX  50    /* ends listed */
#define DASH_VIEWS       64    /* per-viewer texts kept per snapshot */
#define DASH_PROJECTS    1000  /* a viewer's projects, at most */
#define DASH_SERVERS_MAX 1000  /* servers listed, running ones first */
#define DASH_SERVER_PAGE 256   /* servers read from the store at a time */
#define DASH_NODES_FP_MS 1000  /* how often the tick compares nodes */

/* A text shared by streams: refcounted, immutable. */
struct dash_text {
	atomic_int ref;
	size_t len;
	char s[];
};

struct dash_view {
	char key[CNL_ID_MAX + 8];
	struct dash_text *t;
};

struct dash_snap {
	atomic_int ref;
	uint64_t version;
	int64_t seq;      /* commits it could have read (cnl_commit_mark) */
	int64_t built_ms; /* monotonic */
	json_t *full;
	/* Under the hub's mu. */
	struct dash_view views[DASH_VIEWS];
	size_t n_views;
};

struct cnl_api_dash {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t version; /* under mu */
	/* Authentication-relevant changes: moved under mu, read anywhere
	 * (cnl_api_dash_auth_gen(), without mu: no lock under api->mu). */
	atomic_uint_least64_t auth_gen;
	struct dash_snap *cur;
	atomic_int streams;
	atomic_uint_least64_t builds;
	/* Under api->mu: the builder's caches. */
	json_t *names;    /* workload id -> name (this build's workloads) */
	json_t *projects; /* project id -> name */
	json_t *users;    /* user id -> name */
	json_t *noted;    /* ids whose state was written since the build */
	json_t *recent;   /* the last ends, newest first */
	uint64_t nodes_fp;
	int64_t nodes_fp_ms;
};

static struct dash_text *text_new(const char *s, size_t n)
{
	struct dash_text *t = cnl_xmalloc(sizeof(*t) + n + 1);

	atomic_init(&t->ref, 1);
	t->len = n;
	memcpy(t->s, s, n);
	t->s[n] = '\0';
	return t;
}

static void text_unref(struct dash_text *t)
{
	if (t && atomic_fetch_sub(&t->ref, 1) == 1)
		free(t);
}

static void snap_unref(struct dash_snap *s)
{
	if (!s || atomic_fetch_sub(&s->ref, 1) != 1)
		return;
	for (size_t i = 0; i < s->n_views; i++)
		text_unref(s->views[i].t);
	json_decref(s->full);
	free(s);
}

void cnl_api_dash_new(struct cnl_api *api)
{
	struct cnl_api_dash *d = cnl_xcalloc(1, sizeof(*d));

	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->cv, NULL);
	d->version = 1;
	d->names = json_object();
	d->projects = json_object();
	d->users = json_object();
	d->noted = json_object();
	d->recent = json_array();
	api->dash = d;
}

void cnl_api_dash_free(struct cnl_api *api)
{
	struct cnl_api_dash *d = api->dash;

	if (!d)
		return;
	snap_unref(d->cur);
	json_decref(d->names);
	json_decref(d->projects);
	json_decref(d->users);
	json_decref(d->noted);
	json_decref(d->recent);
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->mu);
	free(d);
	api->dash = NULL;
}

void cnl_api_dash_bump(struct cnl_api *api, bool auth)
{
	struct cnl_api_dash *d = api->dash;

	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	d->version++;
	d->auth_gen += auth;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

uint64_t cnl_api_dash_auth_gen(struct cnl_api *api)
{
	return api->dash ? atomic_load(&api->dash->auth_gen) : 0;
}

void cnl_api_dash_changed(struct cnl_api *api, const char *id)
{
	if (!api->dash)
		return;
	if (json_object_size(api->dash->noted) < 100000)
		json_object_set_new(api->dash->noted, id, json_true());
	cnl_api_dash_bump(api, false);
}

void cnl_api_dash_stop(struct cnl_api *api)
{
	if (!api->dash)
		return;
	pthread_mutex_lock(&api->dash->mu);
	pthread_cond_broadcast(&api->dash->cv);
	pthread_mutex_unlock(&api->dash->mu);
}

void cnl_api_dash_tick(struct cnl_api *api, int64_t now_ms)
{
	struct cnl_api_dash *d = api->dash;
	uint64_t fp;

	if (!d || now_ms - d->nodes_fp_ms < DASH_NODES_FP_MS)
		return;
	d->nodes_fp_ms = now_ms;
	fp = cnl_ctl_dashboard_nodes_fp(api->ctl);
	if (fp != d->nodes_fp) {
		d->nodes_fp = fp;
		cnl_api_dash_bump(api, false);
	}
}

void cnl_api_dash_metrics(struct cnl_api *api, struct cnl_metrics_buf *b)
{
	if (!api->dash)
		return;
	cnl_mb_family(b, "cnlab_dashboard_streams", "gauge",
	              "Dashboard event streams open "
	              "(GET /v1/dashboard/events).");
	cnl_mb_printf(b, "cnlab_dashboard_streams %d\n",
	              atomic_load(&api->dash->streams));
	cnl_mb_family(b, "cnlab_dashboard_builds_total", "counter",
	              "Dashboard snapshots built (one per change seen).");
	cnl_mb_printf(b, "cnlab_dashboard_builds_total %llu\n",
	              (unsigned long long)atomic_load(&api->dash->builds));
}

/* ---- building (api->mu held) ------------------------------------------- */

/* The name of project or user @id, cached in @map ("" stays unknown). */
static json_t *name_of(struct cnl_api *api, json_t *map, bool project,
                       const char *id)
{
	json_t *v = json_object_get(map, id);

	if (!v) {
		if (project) {
			struct cnl_store_project p;

			v = cnl_store_project_get(api->store, id, &p) == 0
			        ? json_string(p.name)
			        : json_null();
		} else {
			struct cnl_store_user u;

			v = cnl_store_user_get(api->store, id, &u) == 0
			        ? json_string(u.name)
			        : json_null();
		}
		json_object_set_new(map, id, v);
	}
	return json_incref(v);
}

/* The first line of @cmd, 64 bytes at most, into @buf (65). */
static void short_name(char *buf, const char *cmd)
{
	size_t n = strcspn(cmd, "\r\n");

	if (n > 64)
		n = 64;
	memcpy(buf, cmd, n);
	buf[n] = '\0';
}

/* A workload's name: a server's own, a job's command (first line,
 * 64 bytes at most); cached from one build to the next in @old. */
static json_t *wl_name(struct cnl_api *api, json_t *old, json_t *neu,
                       const char *id, bool server)
{
	json_t *v = json_object_get(old, id);

	if (!v) {
		char buf[65] = "";

		if (server) {
			struct cnl_store_server s;

			if (cnl_store_server_get(api->store, id, &s) == 0)
				snprintf(buf, sizeof(buf), "%s", s.name);
		} else {
			struct cnl_store_job j;

			if (cnl_store_job_get(api->store, id, &j) == 0)
				short_name(buf, j.command);
		}
		buf[strcspn(buf, "\r\n")] = '\0';
		v = buf[0] ? json_string(buf) : json_null();
		json_object_set_new(neu, id, v);
	} else {
		json_object_set(neu, id, v);
	}
	return json_incref(v);
}

/* Replace "project_id" and "user_id" of @o by "project" and "user"
 * names, and give workloads (with "id") their "name". */
static void name_item(struct cnl_api *api, json_t *o, json_t *old, json_t *neu,
                      bool workload)
{
	struct cnl_api_dash *d = api->dash;
	const char *p = json_string_value(json_object_get(o, "project_id"));
	const char *u = json_string_value(json_object_get(o, "user_id"));
	const char *id = json_string_value(json_object_get(o, "id"));
	const char *kind = json_string_value(json_object_get(o, "kind"));
	bool server = json_is_true(json_object_get(o, "server")) ||
	              (kind && strcmp(kind, "server") == 0);

	if (p)
		json_object_set_new(o, "project",
		                    name_of(api, d->projects, true, p));
	if (u)
		json_object_set_new(o, "user",
		                    name_of(api, d->users, false, u));
	if (workload && id)
		json_object_set_new(o, "name",
		                    wl_name(api, old, neu, id, server));
	json_object_del(o, "project_id");
	json_object_del(o, "user_id");
}

static void name_list(struct cnl_api *api, json_t *a, json_t *old, json_t *neu)
{
	size_t i;
	json_t *o;

	json_array_foreach (a, i, o)
		name_item(api, o, old, neu, true);
}

/*
 * The servers the registry does not hold (stopped ones: a server leaves
 * the registry when it stops) appended to @servers from the store, the
 * first DASH_SERVERS_MAX in all, so that a stopped server stays on the
 * page with its Start button.  Once per build, never per dashboard.
 */
static void stopped_servers(struct cnl_api *api, json_t *servers)
{
	struct cnl_store_server *page =
	    cnl_xcalloc(DASH_SERVER_PAGE, sizeof(*page));
	json_t *have = json_object();
	char after[CNL_ID_MAX] = "";
	size_t i;
	json_t *o;
	int n;

	json_array_foreach (servers, i, o)
		json_object_set_new(have,
		                    json_string_value(json_object_get(o, "id")),
		                    json_true());
	while (json_array_size(servers) < DASH_SERVERS_MAX &&
	       cnl_store_server_list(api->store, NULL, after[0] ? after : NULL,
	                             DASH_SERVER_PAGE, page, &n) == 0 &&
	       n > 0) {
		for (int k = 0; k < n; k++) {
			const struct cnl_store_server *sv = &page[k];

			if (json_object_get(have, sv->id) ||
			    json_array_size(servers) >= DASH_SERVERS_MAX)
				continue;
			json_array_append_new(
			    servers,
			    json_pack("{s:s,s:s,s:s,s:s,s:s,s:n,s:b}", "id",
			              sv->id, "project_id", sv->project_id,
			              "user_id", sv->user_id, "state",
			              sv->state, "gpu", sv->profile, "url",
			              "server", 1));
		}
		snprintf(after, sizeof(after), "%s", page[n - 1].id);
		if (n < DASH_SERVER_PAGE)
			break;
	}
	json_decref(have);
	free(page);
}

static int by_prio(const void *a, const void *b)
{
	json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	json_int_t px = json_integer_value(json_object_get(x, "_prio"));
	json_int_t py = json_integer_value(json_object_get(y, "_prio"));
	json_int_t ix = json_integer_value(json_object_get(x, "_i"));
	json_int_t iy = json_integer_value(json_object_get(y, "_i"));

	if (px != py)
		return px > py ? -1 : 1;
	return ix < iy ? -1 : ix > iy;
}

/* Pending work in scheduling order (priority, then submission), the
 * first DASH_PENDING_MAX. */
static json_t *pending_sorted(json_t *a)
{
	size_t n = json_array_size(a), i;
	json_t **v = cnl_xcalloc(n + 1, sizeof(*v)), *out = json_array();

	for (i = 0; i < n; i++) {
		v[i] = json_array_get(a, i);
		json_object_set_new(v[i], "_i", json_integer((json_int_t)i));
	}
	qsort(v, n, sizeof(*v), by_prio);
	for (i = 0; i < n && i < DASH_PENDING_MAX; i++) {
		json_object_del(v[i], "_i");
		json_object_del(v[i], "_prio");
		json_object_del(v[i], "server");
		json_array_append(out, v[i]);
	}
	free(v);
	return out;
}

/* Jobs noted since the last build that have ended go to the recent list. */
static void recent_update(struct cnl_api *api)
{
	struct cnl_api_dash *d = api->dash;
	const char *id;
	json_t *v;

	json_object_foreach (d->noted, id, v) {
		struct cnl_store_job j;
		json_t *o, *a;
		size_t i;

		if (cnl_store_job_get(api->store, id, &j) < 0 ||
		    (strcmp(j.state, "succeeded") != 0 &&
		     strcmp(j.state, "failed") != 0 &&
		     strcmp(j.state, "cancelled") != 0))
			continue;
		a = d->recent;
		for (i = 0; i < json_array_size(a); i++)
			if (strcmp(json_string_value(json_object_get(
			               json_array_get(a, i), "id")),
			           id) == 0)
				break;
		if (i < json_array_size(a))
			continue;
		o = json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", j.id, "project_id",
		              j.project_id, "user_id", j.user_id, "state",
		              j.state, "ended_at",
		              cnl_api_time_json(j.updated_ms));
		json_object_set_new(o, "exit_code",
		                    strcmp(j.state, "cancelled") == 0
		                        ? json_null()
		                        : json_integer(j.exit_code));
		{
			char buf[65];

			short_name(buf, j.command);
			json_object_set_new(o, "name", json_string(buf));
		}
		name_item(api, o, NULL, NULL, false);
		json_array_insert_new(a, 0, o);
		while (json_array_size(a) > DASH_RECENT_MAX)
			json_array_remove(a, json_array_size(a) - 1);
	}
	json_object_clear(d->noted);
}

static int by_usage(const void *a, const void *b)
{
	const double *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* The GPU-hours quota of project or user @owner; null: no limit. */
static json_t *gpu_limit(struct cnl_api *api, const char *owner)
{
	json_t *o = NULL, *v, *ret = json_null();

	if (owner && cnl_api_doc_json(api->store, "quota", owner, &o) == 0 &&
	    json_is_number(v = json_object_get(o, "gpu_hours")))
		ret = json_real(json_number_value(v));
	json_decref(o);
	return ret;
}

/* The GPU-hours of the last 7 UTC days, oldest first, today last. */
static json_t *usage_7d(struct cnl_api *api, const char *project,
                        const char *user, int64_t now)
{
	double h[7];
	json_t *a = json_array();

	cnl_ctl_usage_7d(api->ctl, project, user, now, h);
	for (int i = 0; i < 7; i++)
		json_array_append_new(a, json_real(h[i]));
	return a;
}

/*
 * Projects and users with use or work now, or use in the last 7 days:
 * GPUs held now (gpu_used), metered GPU-hours (gpu_hours), the
 * GPU-hours quota (gpu_limit, null: unlimited; compare with gpu_hours),
 * the 7-day curve and the fair-share rank (1: the least metered
 * GPU-hours, served first at equal priority).
 */
static void tenants(struct cnl_api *api, json_t *ctl, json_t *snap, int64_t now)
{
	struct cnl_api_dash *d = api->dash;
	json_t *used = json_object_get(ctl, "gpu_used");
	json_t *pu = json_object(), *uu = json_object();
	json_t *projects = json_array(), *users = json_array();
	const char *lists[] = {"running", "pending", "servers"};
	const char *k;
	json_t *v;

	/* (project, user) pairs of the work listed, before names. */
	for (size_t l = 0; l < 3; l++) {
		size_t i;
		json_t *o;

		json_array_foreach (json_object_get(ctl, lists[l]), i, o) {
			const char *p =
			    json_string_value(json_object_get(o, "project_id"));
			const char *u =
			    json_string_value(json_object_get(o, "user_id"));
			char key[2 * CNL_ID_MAX + 2];
			json_t *e;

			if (!p || !u)
				continue;
			if (!json_object_get(pu, p))
				json_object_set_new(pu, p, json_true());
			snprintf(key, sizeof(key), "%s/%s", u, p);
			if (!(e = json_object_get(uu, key))) {
				e = json_pack("{s:s,s:s,s:f}", "user_id", u,
				              "project_id", p, "gpu_used", 0.0);
				json_object_set_new(uu, key, e);
			}
			if (l == 0)
				json_object_set_new(
				    e, "gpu_used",
				    json_real(
				        json_real_value(
				            json_object_get(e, "gpu_used")) +
				        (double)json_integer_value(
				            json_object_get(o, "_blocks")) /
				            100.0));
		}
	}
	json_object_foreach (used, k, v)
		if (!json_object_get(pu, k))
			json_object_set_new(pu, k, json_true());
	/* And those with use in the last 7 days. */
	{
		json_t *recent = cnl_ctl_usage_recent(api->ctl, now);

		json_object_foreach (recent, k, v) {
			const char *sl = strchr(k, '/');
			char p[CNL_ID_MAX], key[2 * CNL_ID_MAX + 2];

			if (!sl || (size_t)(sl - k) >= sizeof(p))
				continue;
			snprintf(p, sizeof(p), "%.*s", (int)(sl - k), k);
			if (!json_object_get(pu, p))
				json_object_set_new(pu, p, json_true());
			snprintf(key, sizeof(key), "%s/%s", sl + 1, p);
			if (!json_object_get(uu, key))
				json_object_set_new(uu, key,
				                    json_pack("{s:s,s:s,s:f}",
				                              "user_id", sl + 1,
				                              "project_id", p,
				                              "gpu_used", 0.0));
		}
		json_decref(recent);
	}
	{
		size_t n = json_object_size(pu), i = 0;
		double(*r)[2] = cnl_xcalloc(n + 1, sizeof(*r));
		const char **ids = cnl_xcalloc(n + 1, sizeof(*ids));

		json_object_foreach (pu, k, v) {
			struct cnl_ctl_usage cu = {0};

			cnl_ctl_usage_of(api->ctl, k, &cu);
			r[i][0] = cu.gpu_hours;
			r[i][1] = (double)i;
			ids[i++] = k;
		}
		qsort(r, n, sizeof(*r), by_usage);
		for (i = 0; i < n; i++) {
			const char *id = ids[(size_t)r[i][1]];
			json_t *o = json_pack(
			    "{s:s,s:f,s:o,s:i,s:o,s:f}", "project_id", id,
			    "gpu_used",
			    json_real_value(json_object_get(used, id)),
			    "gpu_limit", gpu_limit(api, id), "fair_share_rank",
			    (int)i + 1, "usage_7d",
			    usage_7d(api, id, NULL, now), "gpu_hours", r[i][0]);

			name_item(api, o, NULL, NULL, false);
			json_object_set_new(
			    o, "name",
			    json_incref(json_object_get(o, "project")));
			json_object_del(o, "project");
			json_array_append_new(projects, o);
		}
		free(r);
		free(ids);
	}
	{
		size_t n = json_object_size(uu), i = 0;
		double(*r)[2] = cnl_xcalloc(n + 1, sizeof(*r));
		json_t **es = cnl_xcalloc(n + 1, sizeof(*es));

		json_object_foreach (uu, k, v) {
			struct cnl_ctl_usage cu = {0};

			cnl_ctl_usage_of(
			    api->ctl,
			    json_string_value(json_object_get(v, "user_id")),
			    &cu);
			r[i][0] = cu.gpu_hours;
			r[i][1] = (double)i;
			es[i++] = v;
		}
		qsort(r, n, sizeof(*r), by_usage);
		for (i = 0; i < n; i++) {
			json_t *o = json_deep_copy(es[(size_t)r[i][1]]);

			json_object_set_new(
			    o, "gpu_limit",
			    gpu_limit(api, json_string_value(
			                       json_object_get(o, "user_id"))));
			json_object_set_new(o, "gpu_hours", json_real(r[i][0]));
			json_object_set_new(
			    o, "usage_7d",
			    usage_7d(api,
			             json_string_value(
			                 json_object_get(o, "project_id")),
			             json_string_value(
			                 json_object_get(o, "user_id")),
			             now));
			json_object_set_new(o, "fair_share_rank",
			                    json_integer((json_int_t)i + 1));
			name_item(api, o, NULL, NULL, false);
			json_object_set_new(
			    o, "name", json_incref(json_object_get(o, "user")));
			json_object_del(o, "user");
			json_array_append_new(users, o);
		}
		free(r);
		free(es);
	}
	json_decref(pu);
	json_decref(uu);
	(void)d;
	json_object_set_new(snap, "projects", projects);
	json_object_set_new(snap, "users", users);
}

/* Build the snapshot of @version (api->mu held). */
static struct dash_snap *build(struct cnl_api *api, uint64_t version)
{
	struct cnl_api_dash *d = api->dash;
	int64_t now = cnl_time_now_ms();
	json_t *ctl = cnl_ctl_dashboard_json(api->ctl, now);
	json_t *old = d->names, *neu = json_object(), *snap, *q;
	struct dash_snap *s = cnl_xcalloc(1, sizeof(*s));
	size_t i, g, k;
	json_t *n, *gpu, *sl, *o;

	recent_update(api);
	/* Slices and lists get names; the running list keeps each one's
	 * blocks for the users' use, then drops them. */
	json_array_foreach (json_object_get(ctl, "nodes"), i, n)
		json_array_foreach (json_object_get(n, "gpus"), g, gpu)
			json_array_foreach (json_object_get(gpu, "slices"), k,
			                    sl)
				name_item(api, sl, old, neu, true);
	snap = json_object();
	tenants(api, ctl, snap, now);
	name_list(api, json_object_get(ctl, "running"), old, neu);
	name_list(api, json_object_get(ctl, "pending"), old, neu);
	stopped_servers(api, json_object_get(ctl, "servers"));
	name_list(api, json_object_get(ctl, "servers"), old, neu);
	json_array_foreach (json_object_get(ctl, "running"), i, o) {
		json_object_del(o, "_blocks");
		json_object_del(o, "server");
	}
	/* A server's url is the node's address with the server's token:
	 * the page asks GET /v1/servers/{id} for the notebook origin's URL
	 * as this viewer may see it (api_servers.c). */
	json_array_foreach (json_object_get(ctl, "servers"), i, o) {
		json_object_del(o, "server");
		json_object_del(o, "url");
	}
	json_decref(d->names);
	d->names = neu;
	/* The recent list goes on changing in the cache: a copy. */
	q = json_pack("{s:O,s:o,s:O,s:o}", "pending_counts",
	              json_object_get(ctl, "pending_counts"), "pending",
	              pending_sorted(json_object_get(ctl, "pending")),
	              "running", json_object_get(ctl, "running"), "recent",
	              json_deep_copy(d->recent));
	json_object_set_new(snap, "version", json_integer((json_int_t)version));
	json_object_set_new(snap, "generated_at", cnl_api_time_json(now));
	json_object_set(snap, "nodes", json_object_get(ctl, "nodes"));
	json_object_set_new(snap, "queues", q);
	json_object_set(snap, "servers", json_object_get(ctl, "servers"));
	json_decref(ctl);
	atomic_init(&s->ref, 1);
	s->version = version;
	s->full = snap;
	s->seq = cnl_commit_mark(api->commit);
	s->built_ms = cnl_time_mono_ns() / 1000000;
	atomic_fetch_add(&d->builds, 1);
	return s;
}

/*
 * The snapshot as of now, referenced; @locked: the caller holds api->mu.
 * With @fresh false (streams) one built less than DASH_MIN_GAP_MS ago
 * will do: however many streams ask, cnlabd builds at most ~4 a second.
 */
static struct dash_snap *snap_get(struct cnl_api *api, bool locked, bool fresh)
{
	struct cnl_api_dash *d = api->dash;
	struct dash_snap *s;
	uint64_t v;

	pthread_mutex_lock(&d->mu);
	if (d->cur &&
	    (d->cur->version == d->version ||
	     (!fresh && cnl_time_mono_ns() / 1000000 - d->cur->built_ms <
	                    DASH_MIN_GAP_MS))) {
		s = d->cur;
		atomic_fetch_add(&s->ref, 1);
		pthread_mutex_unlock(&d->mu);
		return s;
	}
	pthread_mutex_unlock(&d->mu);
	if (!locked)
		pthread_mutex_lock(&api->mu);
	/* Bumps happen under api->mu: the version read here is what the
	 * build sees.  Another builder may have installed it meanwhile. */
	pthread_mutex_lock(&d->mu);
	v = d->version;
	if (d->cur && d->cur->version == v) {
		s = d->cur;
		atomic_fetch_add(&s->ref, 1);
		pthread_mutex_unlock(&d->mu);
		if (!locked)
			pthread_mutex_unlock(&api->mu);
		return s;
	}
	pthread_mutex_unlock(&d->mu);
	s = build(api, v);
	/* The caller has the first reference; the hub takes another. */
	pthread_mutex_lock(&d->mu);
	if (!d->cur || d->cur->version < v) {
		snap_unref(d->cur);
		d->cur = s;
		atomic_fetch_add(&s->ref, 1);
	}
	pthread_mutex_unlock(&d->mu);
	if (!locked)
		pthread_mutex_unlock(&api->mu);
	return s;
}

/* ---- viewers ----------------------------------------------------------- */

struct viewer {
	char user_id[CNL_ID_MAX];
	char user[CNL_STORE_NAME_MAX];
	bool admin;
	json_t *projects; /* names, sorted */
};

static bool member_of(const struct viewer *vw, json_t *o)
{
	const char *p = json_string_value(json_object_get(o, "project"));
	size_t i;
	json_t *v;

	if (!p)
		return false;
	json_array_foreach (vw->projects, i, v)
		if (strcmp(json_string_value(v), p) == 0)
			return true;
	return false;
}

static json_t *filter_list(const struct viewer *vw, json_t *a)
{
	json_t *out = json_array(), *o;
	size_t i;

	json_array_foreach (a, i, o)
		if (member_of(vw, o))
			json_array_append(out, o);
	return out;
}

/* Another tenant's slice: where it is and how big, nothing else. */
static json_t *other_slice(json_t *sl)
{
	json_t *o = json_pack("{s:s}", "kind", "other");
	static const char *const keep[] = {"start",     "blocks", "mig_profile",
	                                   "mig_start", "gi",     "vram_mib"};

	for (size_t i = 0; i < CNL_ARRAY_SIZE(keep); i++) {
		json_t *v = json_object_get(sl, keep[i]);

		if (v)
			json_object_set(o, keep[i], v);
	}
	return o;
}

/* The text of @s as @vw may see it (shared, shallow copies only). */
static char *view_dump(struct dash_snap *s, const struct viewer *vw)
{
	json_t *full = s->full, *o = json_copy(full), *vj;
	char *text;

	vj = json_pack("{s:s,s:s,s:O}", "user", vw->user, "role",
	               vw->admin ? "admin" : "user", "projects", vw->projects);
	json_object_set_new(o, "viewer", vj);
	if (!vw->admin) {
		json_t *nodes = json_array(), *n, *q, *fq;
		size_t i;

		json_array_foreach (json_object_get(full, "nodes"), i, n) {
			json_t *nn = json_copy(n), *gpus = json_array(), *g;
			size_t k;

			json_array_foreach (json_object_get(n, "gpus"), k, g) {
				json_t *gg = json_copy(g), *sls = json_array(),
				       *sl;
				size_t m;

				json_array_foreach (
				    json_object_get(g, "slices"), m, sl)
					json_array_append_new(
					    sls, member_of(vw, sl)
					             ? json_incref(sl)
					             : other_slice(sl));
				json_object_set_new(gg, "slices", sls);
				json_array_append_new(gpus, gg);
			}
			json_object_set_new(nn, "gpus", gpus);
			json_array_append_new(nodes, nn);
		}
		json_object_set_new(o, "nodes", nodes);
		q = json_object_get(full, "queues");
		fq = json_copy(q);
		json_object_set_new(
		    fq, "pending",
		    filter_list(vw, json_object_get(q, "pending")));
		json_object_set_new(
		    fq, "running",
		    filter_list(vw, json_object_get(q, "running")));
		json_object_set_new(
		    fq, "recent",
		    filter_list(vw, json_object_get(q, "recent")));
		json_object_set_new(o, "queues", fq);
		json_object_set_new(
		    o, "servers",
		    filter_list(vw, json_object_get(full, "servers")));
		json_object_set_new(
		    o, "users",
		    filter_list(vw, json_object_get(full, "users")));
		{
			json_t *ps = json_array(), *p;

			json_array_foreach (json_object_get(full, "projects"),
			                    i, p) {
				json_t *tmp =
				    json_pack("{s:O}", "project",
				              json_object_get(p, "name"));

				if (member_of(vw, tmp))
					json_array_append(ps, p);
				json_decref(tmp);
			}
			json_object_set_new(o, "projects", ps);
		}
	}
	text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
	json_decref(o);
	return text;
}

/* The view of @s for @vw, made once per snapshot and viewer. */
static struct dash_text *view_get(struct cnl_api *api, struct dash_snap *s,
                                  const struct viewer *vw)
{
	struct cnl_api_dash *d = api->dash;
	struct dash_text *t = NULL;
	char key[sizeof(s->views[0].key)];
	char *text;

	snprintf(key, sizeof(key), "%s%s",
	         vw->admin ? "A:" : "U:", vw->user_id);
	pthread_mutex_lock(&d->mu);
	for (size_t i = 0; i < s->n_views; i++)
		if (strcmp(s->views[i].key, key) == 0) {
			t = s->views[i].t;
			atomic_fetch_add(&t->ref, 1);
			break;
		}
	pthread_mutex_unlock(&d->mu);
	if (t)
		return t;
	text = view_dump(s, vw);
	t = text_new(text ? text : "{}", text ? strlen(text) : 2);
	free(text);
	pthread_mutex_lock(&d->mu);
	if (s->n_views < DASH_VIEWS) {
		snprintf(s->views[s->n_views].key, sizeof(key), "%s", key);
		s->views[s->n_views++].t = t;
		atomic_fetch_add(&t->ref, 1);
	}
	pthread_mutex_unlock(&d->mu);
	return t;
}

/* Who the call's caller is, with the names of their projects: 0, or -1
 * with the error in @resp. */
static int viewer_load(struct call *c, struct viewer *vw,
                       struct cnl_http_response *resp)
{
	struct cnl_store_membership *m = cnl_xcalloc(DASH_PROJECTS, sizeof(*m));
	int n = 0, r;

	memset(vw, 0, sizeof(*vw));
	snprintf(vw->user_id, sizeof(vw->user_id), "%s", c->user.id);
	snprintf(vw->user, sizeof(vw->user), "%s", c->user.name);
	vw->admin = c->is_admin;
	vw->projects = json_array();
	r = cnl_store_membership_list(c->st, c->user.id, NULL, DASH_PROJECTS, m,
	                              &n);
	for (int i = 0; r == 0 && i < n; i++) {
		struct cnl_store_project p;

		if (cnl_store_project_get(c->st, m[i].project_id, &p) == 0 &&
		    strcmp(p.name, CNL_API_ADMIN_PROJECT) != 0)
			json_array_append_new(vw->projects,
			                      json_string(p.name));
	}
	free(m);
	if (r < 0) {
		json_decref(vw->projects);
		vw->projects = NULL;
		cnl_api_store_error(c, resp, r, "membership");
		return -1;
	}
	return 0;
}

void cnl_api_h_dashboard(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp)
{
	struct call *c = call;
	struct viewer vw;
	struct dash_snap *s;
	struct dash_text *t;

	(void)req;
	if (viewer_load(c, &vw, resp) < 0)
		return;
	s = snap_get(c->api, !c->unlocked, true);
	t = view_get(c->api, s, &vw);
	/* A locked call's own wait covers the snapshot's commits. */
	if (c->unlocked && cnl_commit_wait(c->api->commit, s->seq) < 0) {
		cnl_http_error(resp, 503, "unavailable",
		               "the state store could not make the snapshot "
		               "durable; retry later");
	} else {
		resp->status = 200;
		resp->content_type = "application/json";
		resp->text = cnl_xmalloc(t->len + 1);
		memcpy(resp->text, t->s, t->len + 1);
		resp->text_len = t->len;
	}
	text_unref(t);
	snap_unref(s);
	json_decref(vw.projects);
}

/* ---- the stream -------------------------------------------------------- */

struct dstream {
	struct cnl_api *api;
	struct viewer vw;
	struct cnl_api_grant grant; /* the caller's credential */
	uint64_t seen;              /* version last sent */
	uint64_t auth_gen;          /* as last checked */
	struct dash_text *t;        /* being sent */
	int part;                   /* 0 head, 1 text, 2 tail */
	size_t off;
	const char *lit; /* a literal being sent (ping) */
	int64_t last_ms; /* monotonic: the last send */
	bool counted;
};

static int64_t mono_ms(void)
{
	return cnl_time_mono_ns() / 1000000;
}

static void dwait(struct cnl_api_dash *d, int64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(&d->cv, &d->mu, &ts);
}

/* Is the stream's caller still who they were (session or API token live,
 * not disabled, the same projects)?  A store read, only after an
 * authentication-relevant change. */
static bool still_allowed(struct dstream *s)
{
	struct call c = {.api = s->api, .now_ms = cnl_time_now_ms()};
	struct cnl_http_response resp = {0};
	struct viewer vw;
	bool ok = false;

	pthread_mutex_lock(&s->api->mu);
	c.st = s->api->store;
	if (cnl_api_grant_live(&c, &s->grant) == 0 &&
	    viewer_load(&c, &vw, &resp) == 0) {
		ok = json_equal(vw.projects, s->vw.projects);
		json_decref(vw.projects);
	}
	pthread_mutex_unlock(&s->api->mu);
	json_decref(resp.body);
	return ok;
}

/* Wait for something to send: 1 a snapshot (s->t), 2 a ping, 0 the end. */
static int next(struct dstream *s)
{
	struct cnl_api *api = s->api;
	struct cnl_api_dash *d = api->dash;
	uint64_t v, ag;
	int64_t gap;

	pthread_mutex_lock(&d->mu);
	for (;;) {
		int64_t left = s->last_ms + DASH_PING_MS - mono_ms();

		if (atomic_load(&api->proxy_stop)) {
			pthread_mutex_unlock(&d->mu);
			return 0;
		}
		if (d->version != s->seen)
			break;
		if (left <= 0) {
			pthread_mutex_unlock(&d->mu);
			return 2;
		}
		dwait(d, left);
	}
	ag = d->auth_gen;
	pthread_mutex_unlock(&d->mu);
	/* Coalesce: at most one snapshot per DASH_MIN_GAP_MS. */
	if ((gap = s->last_ms + DASH_MIN_GAP_MS - mono_ms()) > 0) {
		struct timespec ts = {gap / 1000, (gap % 1000) * 1000000};

		nanosleep(&ts, NULL);
	}
	if (ag != s->auth_gen) {
		if (!still_allowed(s))
			return 0;
		s->auth_gen = ag;
	}
	for (;;) {
		struct dash_snap *snap = snap_get(api, false, false);
		struct timespec ts = {0, DASH_MIN_GAP_MS / 2 * 1000000L};

		v = snap->version;
		if (v == s->seen) { /* the shared one is due for a rebuild */
			snap_unref(snap);
			if (atomic_load(&api->proxy_stop))
				return 0;
			nanosleep(&ts, NULL);
			continue;
		}
		s->t = view_get(api, snap, &s->vw);
		if (cnl_commit_wait(api->commit, snap->seq) < 0) {
			snap_unref(snap);
			return 0;
		}
		snap_unref(snap);
		break;
	}
	s->seen = v;
	return 1;
}

static size_t put(char *buf, size_t max, const char *a, size_t n, size_t *off)
{
	size_t k = n - *off;

	if (k > max)
		k = max;
	memcpy(buf, a + *off, k);
	*off += k;
	return k;
}

static ssize_t d_read(void *arg, char *buf, size_t max)
{
	static const char head[] = "event: snapshot\ndata: ";
	static const char tail[] = "\n\n";
	static const char ping[] = ": ping\n\n";
	struct dstream *s = arg;
	size_t n;

	for (;;) {
		if (s->lit) {
			n = put(buf, max, s->lit, strlen(s->lit), &s->off);
			if (s->off == strlen(s->lit)) {
				s->lit = NULL;
				s->off = 0;
			}
			return (ssize_t)n;
		}
		if (s->t) {
			const char *a = s->part == 0   ? head
			                : s->part == 1 ? s->t->s
			                               : tail;
			size_t len = s->part == 0   ? sizeof(head) - 1
			             : s->part == 1 ? s->t->len
			                            : sizeof(tail) - 1;

			n = put(buf, max, a, len, &s->off);
			if (s->off == len) {
				s->off = 0;
				if (++s->part == 3) {
					text_unref(s->t);
					s->t = NULL;
					s->part = 0;
				}
			}
			return (ssize_t)n;
		}
		switch (next(s)) {
		case 0:
			return 0;
		case 2:
			s->lit = ping;
			s->off = 0;
			break;
		default:
			s->part = 0;
			s->off = 0;
			break;
		}
		s->last_ms = mono_ms();
	}
}

static void d_free(void *arg)
{
	struct dstream *s = arg;

	if (s->counted)
		atomic_fetch_sub(&s->api->dash->streams, 1);
	text_unref(s->t);
	json_decref(s->vw.projects);
	free(s);
}

void cnl_api_h_dashboard_events(void *call, struct cnl_http_request *req,
                                struct cnl_http_response *resp)
{
	struct call *c = call;
	struct dstream *s = cnl_xcalloc(1, sizeof(*s));
	struct dash_snap *snap;

	(void)req;
	s->api = c->api;
	if (viewer_load(c, &s->vw, resp) < 0) {
		free(s);
		return;
	}
	cnl_api_grant_of(c, &s->grant);
	pthread_mutex_lock(&c->api->dash->mu);
	s->auth_gen = c->api->dash->auth_gen;
	pthread_mutex_unlock(&c->api->dash->mu);
	/* The first snapshot goes out at once. */
	snap = snap_get(c->api, !c->unlocked, true);
	s->seen = snap->version;
	s->t = view_get(c->api, snap, &s->vw);
	snap_unref(snap);
	s->last_ms = mono_ms();
	s->counted = true;
	atomic_fetch_add(&c->api->dash->streams, 1);
	resp->status = 200;
	resp->content_type = "text/event-stream";
	resp->headers = cnl_xstrdup("X-Accel-Buffering: no\r\n");
	resp->stream_read = d_read;
	resp->stream_free = d_free;
	resp->stream_arg = s;
	resp->stream_size = -1;
}
