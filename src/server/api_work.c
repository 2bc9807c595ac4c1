/*
 * api_work.c - the handlers of the workload, quota, node and platform
 * routes: jobs, notebook servers, profiles, quotas and usage, nodes and
 * their assignments, audit, burst policy and cloud accounts, /metrics.
 *
 * The route table in api.c says who may call each; by the time a handler
 * runs, the caller is authenticated and authorized and c->project (and
 * c->job or c->server) is loaded.  Handlers run under the API's lock.
 *
 * Documents.  Profiles, quotas, the burst policy, cloud accounts, API
 * tokens and log chunks are store documents (store.h): the shape of each
 * is defined and validated here, and the store keeps the JSON.
 *   profile  id = name            {"gpu", "description", "cpu_milli",
 *                                  "mem_mib"}
 *   quota    id = project/user id {"gpu_hours", "storage_gb_days",
 *                                  "concurrent_servers"} (null: no limit)
 *   policy   id = "burst"         {"threshold", "provider", "strategy",
 *                                  "max_cloud_budget", "enabled"}
 *   cloud    id = cld_...         {"provider", "account", "region",
 *                                  "instance_types"}
 *   log      id = log_..., parent = job or server id
 *                                 {"stream", "data", "epoch"}
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "cnlab/errors.h"
#include "common/json.h"
#include "common/label.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "sched/sched.h"
#include "server/api-internal.h"
#include "server/shape.h"

#define H(name)                                                       \
	void cnl_api_##name(void *call, struct cnl_http_request *req, \
	                    struct cnl_http_response *resp)

static const char *const prio_names[] = {"low", "normal", "high", "critical"};

/* ---- helpers ------------------------------------------------------------- */

static uint8_t *b64_decode(const char *in, size_t *ret_n);

static void bad(struct cnl_http_response *resp, const char *err)
{
	cnl_http_error(resp, 400, "bad_request", "%s", err);
}

/* Load document @kind/@id as JSON into *@ret: 0, or a store error. */
static int doc_json(struct cnl_store *s, const char *kind, const char *id,
                    json_t **ret)
{
	struct cnl_store_doc d = {0};
	int r = cnl_store_doc_get(s, kind, id, &d);

	if (r < 0)
		return r;
	*ret = json_loads(d.body, 0, NULL);
	cnl_store_doc_done(&d);
	return *ret ? 0 : -CNL_ECORRUPT;
}

/* Store @o as document @kind/@id (parent, name may be ""). */
static int doc_save(struct call *c, const char *kind, const char *id,
                    const char *parent, const char *name, json_t *o,
                    bool create)
{
	struct cnl_store_doc d = {0};
	int r;

	snprintf(d.kind, sizeof(d.kind), "%s", kind);
	snprintf(d.id, sizeof(d.id), "%s", id);
	snprintf(d.parent, sizeof(d.parent), "%s", parent);
	snprintf(d.name, sizeof(d.name), "%s", name);
	if (!(d.body = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS)))
		return -ENOMEM;
	d.updated_ms = c->now_ms;
	r = cnl_store_doc_put(c->api->store, &d, create);
	free(d.body);
	return r;
}

/* "priority": 0..3 or "low", "normal", "high", "critical". */
static int get_priority(json_t *body, int *ret, struct cnl_http_response *resp)
{
	json_t *v = json_object_get(body, "priority");

	if (!v) {
		*ret = CNL_PRIO_NORMAL;
		return 0;
	}
	if (json_is_integer(v) && json_integer_value(v) >= 0 &&
	    json_integer_value(v) <= CNL_STORE_PRIO_MAX) {
		*ret = (int)json_integer_value(v);
		return 0;
	}
	for (int i = 0; json_is_string(v) && i < 4; i++)
		if (strcmp(json_string_value(v), prio_names[i]) == 0) {
			*ret = i;
			return 0;
		}
	bad(resp, "field \"priority\": must be low, normal, high or critical "
	          "(or 0..3)");
	return -1;
}

/* An optional non-negative number or null; *@set says whether present. */
static int get_limit(json_t *body, const char *key, double max, double *ret,
                     bool *is_null, struct cnl_http_response *resp)
{
	json_t *v = json_object_get(body, key);
	char err[160];

	*is_null = true;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v) || json_number_value(v) < 0 ||
	    json_number_value(v) > max) {
		snprintf(err, sizeof(err),
		         "field \"%s\": must be a number in 0..%.0f, or null "
		         "for no limit",
		         key, max);
		bad(resp, err);
		return -1;
	}
	*is_null = false;
	*ret = json_number_value(v);
	return 0;
}

/* ---- quota --------------------------------------------------------------- */

struct limits {
	double gpu_hours, storage_gb_days, servers; /* < 0: none */
};

/* The limits of a quota document's body @o (NULL: none, all -1). */
static void limits_from(const json_t *o, struct limits *l)
{
	json_t *v;

	l->gpu_hours = l->storage_gb_days = l->servers = -1;
	if (json_is_number(v = json_object_get(o, "gpu_hours")))
		l->gpu_hours = json_number_value(v);
	if (json_is_number(v = json_object_get(o, "storage_gb_days")))
		l->storage_gb_days = json_number_value(v);
	if (json_is_number(v = json_object_get(o, "concurrent_servers")))
		l->servers = json_number_value(v);
}

static void limits_of(struct call *c, const char *owner, struct limits *l)
{
	json_t *o = NULL;

	if (doc_json(c->api->store, "quota", owner, &o) < 0)
		o = NULL;
	limits_from(o, l);
	json_decref(o);
}

/*
 * Refuse new work beyond quota: 0, or -1 with a 403 naming the limit.
 * @servers: a server is being added (its limit applies too).
 */
static int quota_admit(struct call *c, bool servers,
                       struct cnl_http_response *resp)
{
	const char *owners[2] = {c->project.id, c->user.id};
	const char *what[2] = {"project", "user"};
	const char *names[2] = {c->project.name, c->user.name};

	for (int i = 0; i < 2; i++) {
		struct cnl_ctl_usage u;
		struct limits l;
		const char *limit = NULL;
		double used = 0, max = 0;

		limits_of(c, owners[i], &l);
		cnl_ctl_usage_of(c->api->ctl, owners[i], &u);
		if (l.gpu_hours >= 0 && u.gpu_hours >= l.gpu_hours) {
			limit = "GPU-hours";
			used = u.gpu_hours;
			max = l.gpu_hours;
		} else if (servers && l.storage_gb_days >= 0 &&
		           u.storage_gb_days >= l.storage_gb_days) {
			limit = "storage GB-days";
			used = u.storage_gb_days;
			max = l.storage_gb_days;
		} else if (servers && l.servers >= 0 &&
		           u.servers + 1 > l.servers) {
			limit = "concurrent servers";
			used = u.servers;
			max = l.servers;
		}
		if (limit) {
			cnl_http_error(
			    resp, 403, "quota_exceeded",
			    "%s \"%s\" has used its %s quota (%.2f of "
			    "%.2f); ask an administrator to raise it",
			    what[i], names[i], limit, used, max);
			c->note = limit;
			return -1;
		}
	}
	return 0;
}

static json_t *quota_item(double used, double limit)
{
	if (limit < 0)
		return json_pack("{s:f,s:n,s:n}", "used", used, "limit",
		                 "percent");
	return json_pack("{s:f,s:f,s:f}", "used", used, "limit", limit,
	                 "percent",
	                 limit > 0 ? floor(100.0 * used / limit) : 100.0);
}

static json_t *quota_json(struct call *c, const char *owner)
{
	struct cnl_ctl_usage u;
	struct limits l;

	limits_of(c, owner, &l);
	cnl_ctl_usage_of(c->api->ctl, owner, &u);
	return json_pack(
	    "{s:o,s:o,s:o}", "gpu_hours", quota_item(u.gpu_hours, l.gpu_hours),
	    "storage_gb_days", quota_item(u.storage_gb_days, l.storage_gb_days),
	    "concurrent_servers", quota_item(u.servers, l.servers));
}

H(h_quota_show)
{
	struct call *c = call;
	struct cnl_store *s = c->api->store;
	const char *want = cnl_http_query(req, "project");
	struct cnl_store_membership m[64];
	struct cnl_store_project p;
	json_t *projects = json_array(), *o;
	char role[CNL_STORE_ROLE_MAX];
	int n = 0;

	if (want) {
		if ((cnl_store_project_get(s, want, &p) < 0 &&
		     cnl_store_project_get_by_name(s, want, &p) < 0) ||
		    (!c->is_admin &&
		     cnl_store_membership_get_role(s, c->user.id, p.id, role,
		                                   sizeof(role)) < 0)) {
			json_decref(projects);
			cnl_http_error(resp, 404, "not_found",
			               "project not found");
			return;
		}
		memset(m, 0, sizeof(m[0]));
		snprintf(m[0].project_id, sizeof(m[0].project_id), "%s", p.id);
		n = 1;
	} else if (cnl_store_membership_list(s, c->user.id, NULL, 64, m, &n) <
	           0) {
		n = 0;
	}
	for (int i = 0; i < n; i++) {
		if (cnl_store_project_get(s, m[i].project_id, &p) < 0 ||
		    strcmp(p.name, CNL_API_ADMIN_PROJECT) == 0)
			continue;
		o = quota_json(c, p.id);
		json_object_set_new(o, "project", json_string(p.name));
		json_object_set_new(o, "project_id", json_string(p.id));
		json_array_append_new(projects, o);
	}
	o = quota_json(c, c->user.id);
	json_object_set_new(o, "user", json_string(c->user.name));
	cnl_http_reply(resp, 200,
	               json_pack("{s:o,s:o}", "projects", projects, "user", o));
}

static void quota_set(struct call *c, const char *owner,
                      struct cnl_http_request *req,
                      struct cnl_http_response *resp)
{
	static const char *const fields[] = {"gpu_hours", "storage_gb_days",
	                                     "concurrent_servers", NULL};
	double gh = 0, gb = 0, sv = 0;
	bool n1, n2, n3;
	json_t *body, *o, *cur;
	int r;

	snprintf(c->target, sizeof(c->target), "quota:%s", owner);
	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (get_limit(body, "gpu_hours", 1e9, &gh, &n1, resp) < 0 ||
	    get_limit(body, "storage_gb_days", 1e12, &gb, &n2, resp) < 0 ||
	    get_limit(body, "concurrent_servers", 1e6, &sv, &n3, resp) < 0)
		goto out;
	if (!n3 && sv != floor(sv)) {
		bad(resp, "field \"concurrent_servers\": must be a whole "
		          "number");
		goto out;
	}
	o = json_pack("{s:o,s:o,s:o}", "gpu_hours",
	              n1 ? json_null() : json_real(gh), "storage_gb_days",
	              n2 ? json_null() : json_real(gb), "concurrent_servers",
	              n3 ? json_null() : json_integer((json_int_t)sv));
	/* A limit the body leaves out keeps its value (null removes it),
	 * so one limit can be changed alone. */
	if (doc_json(c->api->store, "quota", owner, &cur) == 0) {
		for (size_t i = 0; fields[i]; i++)
			if (!json_object_get(body, fields[i]) &&
			    json_object_get(cur, fields[i]))
				json_object_set(
				    o, fields[i],
				    json_object_get(cur, fields[i]));
		json_decref(cur);
	}
	r = doc_save(c, "quota", owner, "", "", o, false);
	json_decref(o);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "quota");
		goto out;
	}
	cnl_http_reply(resp, 200, quota_json(c, owner));
out:
	json_decref(body);
}

H(h_project_quota_set)
{
	struct call *c = call;
	struct cnl_store_project p;
	const char *id = cnl_http_param(req, "project");
	int r = cnl_store_project_get(c->api->store, id, &p);

	if (r < 0)
		r = cnl_store_project_get_by_name(c->api->store, id, &p);
	if (r < 0) {
		cnl_api_store_error(c, resp, -CNL_ENOTFOUND, "project");
		return;
	}
	quota_set(c, p.id, req, resp);
}

H(h_user_quota_set)
{
	struct call *c = call;
	struct cnl_store_user u;
	const char *id = cnl_http_param(req, "user");
	int r = cnl_store_user_get(c->api->store, id, &u);

	if (r < 0)
		r = cnl_store_user_get_by_name(c->api->store, id, &u);
	if (r < 0) {
		cnl_api_store_error(c, resp, -CNL_ENOTFOUND, "user");
		return;
	}
	quota_set(c, u.id, req, resp);
}

H(h_project_usage)
{
	struct call *c = call;
	struct cnl_ctl_usage u;

	cnl_ctl_usage_of(c->api->ctl, c->project.id, &u);
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:f,s:f,s:i}", "project_id",
	                         c->project.id, "gpu_hours", u.gpu_hours,
	                         "storage_gb_days", u.storage_gb_days,
	                         "active_servers", u.servers));
}

/* ---- profiles ------------------------------------------------------------ */

/* The shape a profile name stands for, into @shape; 0 or -CNL_ENOTFOUND. */
static int profile_shape(struct call *c, const char *name, char *shape,
                         size_t len, json_t **ret_doc)
{
	json_t *o;
	int r;

	if (strlen(name) >= CNL_STORE_DOC_ID_MAX)
		return -CNL_ENOTFOUND;
	if ((r = doc_json(c->api->store, "profile", name, &o)) < 0)
		return r;
	snprintf(shape, len, "%s",
	         json_string_value(json_object_get(o, "gpu"))
	             ? json_string_value(json_object_get(o, "gpu"))
	             : "");
	if (ret_doc)
		*ret_doc = o;
	else
		json_decref(o);
	return 0;
}

static json_t *profile_json(struct call *c, const char *name, json_t *o)
{
	const char *gpu = json_string_value(json_object_get(o, "gpu"));
	struct cnl_alloc_req req;
	char buf[CNL_SHAPE_MAX], err[160], slice[16] = "-";
	const char *type = "-";
	json_t *p;

	if (gpu && cnl_shape_parse(&c->api->cat, gpu, &req, buf, err,
	                           sizeof(err)) == 0) {
		type = cnl_shape_type_name(&c->api->cat, &req);
		if (req.kind == CNL_REQ_BLOCKS)
			snprintf(slice, sizeof(slice), "%d%%", req.blocks);
		else if (req.kind == CNL_REQ_WHOLE)
			snprintf(slice, sizeof(slice), "%d00%%", req.gpus);
		else if (req.kind == CNL_REQ_MIG)
			snprintf(slice, sizeof(slice), "%s", req.profile);
	}
	p = json_deep_copy(o);
	json_object_set_new(p, "name", json_string(name));
	json_object_set_new(p, "gpu_type", json_string(type));
	json_object_set_new(p, "slice", json_string(slice));
	json_object_set_new(
	    p, "availability",
	    gpu ? cnl_ctl_availability(c->api->ctl, gpu, c->now_ms)
	        : json_null());
	if (!json_object_get(p, "availability"))
		json_object_set_new(p, "availability", json_null());
	return p;
}

static json_t *profile_item(struct call *c, const struct cnl_store_doc *d,
                            json_t *body)
{
	return profile_json(c, d->id, body);
}

H(h_profiles_list)
{
	cnl_api_doc_page(call, req, resp, "profile", NULL, "profile",
	                 profile_item);
}

/* POST /v1/profiles: create or replace a profile by name. */
H(h_profiles_put)
{
	static const char *const fields[] = {"name", "gpu", "description",
	                                     NULL};
	struct call *c = call;
	const char *name, *gpu, *desc = "";
	char err[256];
	json_t *body, *o;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(name = cnl_api_get_name(body, "name", resp)) ||
	    !(gpu = cnl_api_get_string(body, "gpu", CNL_SHAPE_MAX, resp)))
		goto out;
	snprintf(c->target, sizeof(c->target), "profile:%s", name);
	if (cnl_json_get_string(body, "description", false, &desc, err,
	                        sizeof(err)) < 0 ||
	    strlen(desc) > 200) {
		bad(resp, "field \"description\": must be a string of at most "
		          "200 bytes");
		goto out;
	}
	if (cnl_ctl_shape_check(c->api->ctl, gpu, err, sizeof(err)) < 0) {
		char msg[320];

		snprintf(msg, sizeof(msg), "field \"gpu\": %s", err);
		bad(resp, msg);
		goto out;
	}
	o = json_pack("{s:s,s:s}", "gpu", gpu, "description", desc);
	r = doc_save(c, "profile", name, "", name, o, false);
	if (r < 0) {
		json_decref(o);
		cnl_api_store_error(c, resp, r, "profile");
		goto out;
	}
	cnl_http_reply(resp, 200, profile_json(c, name, o));
	json_decref(o);
out:
	json_decref(body);
}

H(h_profile_delete)
{
	struct call *c = call;
	const char *name = cnl_http_param(req, "profile");
	int r;

	snprintf(c->target, sizeof(c->target), "profile:%s", name);
	if ((r = cnl_store_doc_delete(c->api->store, "profile", name)) < 0) {
		cnl_api_store_error(c, resp, r, "profile");
		return;
	}
	cnl_http_reply(resp, 200, json_pack("{s:s}", "deleted", name));
}

int cnl_api_seed_profiles(struct cnl_store *s, int64_t now)
{
	static const char *const seeds[][3] = {
	    {"h100-25pct", "h100-25", "A quarter of an H100: 25 blocks."},
	    {"h100-full", "h100-full", "One whole H100."},
	    {"a100-50pct", "a100-50", "Half of an A100: 50 blocks."},
	    {"l40s-block", "l40s-10", "A tenth of an L40S: 10 blocks."},
	};
	int r = 0;

	for (size_t i = 0; r == 0 && i < CNL_ARRAY_SIZE(seeds); i++) {
		struct cnl_store_doc d = {0};
		json_t *o = json_pack("{s:s,s:s}", "gpu", seeds[i][1],
		                      "description", seeds[i][2]);

		snprintf(d.kind, sizeof(d.kind), "profile");
		snprintf(d.id, sizeof(d.id), "%s", seeds[i][0]);
		snprintf(d.name, sizeof(d.name), "%s", seeds[i][0]);
		d.body = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
		d.updated_ms = now;
		json_decref(o);
		r = d.body ? cnl_store_doc_put(s, &d, false) : -ENOMEM;
		free(d.body);
	}
	return r;
}

/*
 * After an idempotent create (@r from the store) of object @id in
 * @project: names it in the audit, and refuses a key that replayed an
 * object of another project (the same key used for another request).
 * 0, or -1 with a 409 in @resp.
 */
static int created_here(struct call *c, struct cnl_http_response *resp, int r,
                        const char *id, const char *project)
{
	snprintf(c->target, sizeof(c->target), "%s", id);
	if (r == CNL_STORE_REPLAYED && strcmp(project, c->project.id) != 0) {
		cnl_http_error(resp, 409, "conflict",
		               "Idempotency-Key already used for another "
		               "request");
		return -1;
	}
	c->note = r == CNL_STORE_REPLAYED ? "replayed" : NULL;
	return 0;
}

/* ---- jobs ---------------------------------------------------------------- */

/* The gang of job @j from its run record: the leader's id into @ret_id
 * (CNL_ID_MAX), rank and size.  0, or -1 for a job alone. */
static int job_gang(const struct cnl_store_job *j, char *ret_id, int *ret_rank,
                    int *ret_size)
{
	json_t *run = json_loads(j->run, 0, NULL);
	json_t *g = json_object_get(run, "gang");
	const char *id = json_string_value(json_object_get(g, "id"));
	int r = -1;

	if (id && strlen(id) < CNL_ID_MAX) {
		snprintf(ret_id, CNL_ID_MAX, "%s", id);
		if (ret_rank)
			*ret_rank =
			    (int)json_integer_value(json_object_get(g, "rank"));
		if (ret_size)
			*ret_size =
			    (int)json_integer_value(json_object_get(g, "size"));
		r = 0;
	}
	json_decref(run);
	return r;
}

/* A run record's "placement" as the API shows it (times in RFC 3339). */
static json_t *placement_json(json_t *p)
{
	json_t *o = json_deep_copy(p);
	json_int_t ms = json_integer_value(json_object_get(p, "decided_ms"));

	json_object_del(o, "decided_ms");
	json_object_set_new(o, "decided_at", cnl_api_time_json(ms));
	return o;
}

json_t *cnl_api_job_json(struct call *c, const struct cnl_store_job *j)
{
	json_t *o = json_pack(
	    "{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:i,s:o,s:I,s:o,s:o}", "id",
	    j->id, "project_id", j->project_id, "user_id", j->user_id,
	    "command", j->command, "profile", j->profile, "gpu", j->gpu_shape,
	    "priority", prio_names[j->priority & 3], "state", j->state,
	    "exit_code", j->exit_code, "deadline",
	    j->deadline_ms ? cnl_api_time_json(j->deadline_ms) : json_null(),
	    "runtime_s", (json_int_t)(j->runtime_ms / 1000), "created_at",
	    cnl_api_time_json(j->created_ms), "updated_at",
	    cnl_api_time_json(j->updated_ms));
	json_t *live = cnl_ctl_workload_json(c->api->ctl, j->id);
	json_t *run = json_loads(j->run, 0, NULL);
	json_t *g = json_object_get(run, "gang"), *v;

	if (live)
		json_object_set_new(o, "status", live);
	/* Resources asked for, and how it ended, from the run record. */
	json_object_set_new(
	    o, "preemptible",
	    json_boolean(!json_is_false(json_object_get(run, "preemptible"))));
	if (json_is_string(json_object_get(run, "message")))
		json_object_set(o, "message", json_object_get(run, "message"));
	if (json_integer_value(json_object_get(run, "mem_mib")) > 0)
		json_object_set(o, "mem_mib", json_object_get(run, "mem_mib"));
	if (json_integer_value(json_object_get(run, "cpu_milli")) > 0)
		json_object_set(o, "cpu_milli",
		                json_object_get(run, "cpu_milli"));
	if (json_is_array(v = json_object_get(run, "gpu_types")))
		json_object_set(o, "gpu_types", v);
	if (json_is_string(v = json_object_get(run, "dataset")))
		json_object_set(o, "dataset", v);
	json_object_set_new(
	    o, "nodes",
	    json_integer(json_is_object(g)
	                     ? json_integer_value(json_object_get(g, "size"))
	                     : 1));
	if (json_is_object(g)) {
		/* The gang, with its members from the gang document. */
		json_t *doc = NULL, *gj = json_deep_copy(g);
		const char *gid = json_string_value(json_object_get(g, "id"));

		if (gid && doc_json(c->api->store, "gang", gid, &doc) == 0)
			json_object_set(gj, "members",
			                json_object_get(doc, "members"));
		json_decref(doc);
		json_object_set_new(o, "gang", gj);
	}
	if (json_is_object(v = json_object_get(run, "placement")))
		json_object_set_new(o, "placement", placement_json(v));
	json_decref(run);
	return o;
}

/* The most members a gang may have (one node each). */
#define GANG_MAX 64
/* The most GPU types a job may list. */
#define GPU_TYPES_MAX 16

/*
 * "gpu_types": 1..16 type names or families of the catalog ("h100",
 * "A100-80GB"), which narrow the shape's own types: what is left must be
 * at least one type that can run the shape.  0 with the union of the
 * types in *@ret_mask (0 when absent), or -1 with a 400 naming the field.
 */
static int get_gpu_types(struct call *c, json_t *body, const char *shape,
                         uint64_t *ret_mask, struct cnl_http_response *resp)
{
	json_t *a = json_object_get(body, "gpu_types");
	const struct cnl_catalog *cat = &c->api->cat;
	struct cnl_alloc_req req;
	char buf[CNL_SHAPE_MAX], err[256];
	uint64_t m = 0, left;
	size_t i;

	*ret_mask = 0;
	if (!a)
		return 0;
	if (!json_is_array(a) || json_array_size(a) < 1 ||
	    json_array_size(a) > GPU_TYPES_MAX) {
		bad(resp, "field \"gpu_types\": must be an array of 1..16 GPU "
		          "type names, e.g. [\"h100\", \"a100\"]");
		return -1;
	}
	for (i = 0; i < json_array_size(a); i++) {
		const char *t = json_string_value(json_array_get(a, i));
		uint64_t f = t && strlen(t) < CNL_NAME_MAX
		                 ? cnl_shape_family(cat, t)
		                 : 0;

		if (!f) {
			cnl_http_error(
			    resp, 400, "bad_request",
			    "field \"gpu_types\": %s%s%s is not a "
			    "GPU type or family of the catalog (e.g. "
			    "h100, a100-80gb, L40S)",
			    t ? "\"" : "", t ? t : "an entry", t ? "\"" : "");
			return -1;
		}
		m |= f;
	}
	if (cnl_shape_parse(cat, shape, &req, buf, err, sizeof(err)) < 0)
		return 0; /* the shape itself is refused by its own check */
	left = req.gpu_types & m;
	if (req.kind == CNL_REQ_MIG) {
		uint64_t mig = 0;

		for (int t = 0; t < cat->n; t++)
			if ((left >> t & 1) &&
			    cnl_mig_find(&cat->types[t], req.profile) >= 0)
				mig |= UINT64_C(1) << t;
		left = mig;
	}
	if (req.kind == CNL_REQ_CPU || !left) {
		cnl_http_error(
		    resp, 400, "bad_request",
		    "field \"gpu_types\": conflicts with the shape \"%s\" "
		    "(%s): no type is both; use a shape of any type, such as "
		    "any-25, or drop gpu_types",
		    shape,
		    req.kind == CNL_REQ_CPU ? "no GPU"
		                            : cnl_shape_type_name(cat, &req));
		return -1;
	}
	*ret_mask = m;
	return 0;
}

/* The run record a job starts with: what it asks for beyond its shape
 * (see ctl.h, "Run records"). */
static int initial_run(char *buf, size_t len, bool preemptible, int64_t cpu,
                       int64_t mem, json_t *types, const char *dataset,
                       const char *gang, int rank, int size)
{
	json_t *o =
	    json_pack("{s:b,s:I,s:I}", "preemptible", preemptible, "cpu_milli",
	              (json_int_t)cpu, "mem_mib", (json_int_t)mem);
	char *t;
	int r = 0;

	if (types)
		json_object_set(o, "gpu_types", types);
	if (dataset)
		json_object_set_new(o, "dataset", json_string(dataset));
	if (size > 1)
		json_object_set_new(o, "gang",
		                    json_pack("{s:s,s:i,s:i}", "id", gang,
		                              "rank", rank, "size", size));
	t = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!t || strlen(t) >= len)
		r = -CNL_ESIZE;
	else
		memcpy(buf, t, strlen(t) + 1);
	free(t);
	return r;
}

/* In words: what a deadline check rested on. */
static void admission_text(const struct cnl_ctl_admission *a, char *buf,
                           size_t len)
{
	char rt[32], as[32];

	cnl_duration_format(a->runtime_ms, rt, sizeof(rt));
	cnl_duration_format(a->assumed_runtime_ms, as, sizeof(as));
	snprintf(buf, len,
	         "%s%s; %d running workload%s without a run time "
	         "assumed to run %s",
	         a->finish ? "checked that it finishes by then with its run "
	                     "time of "
	                   : "checked only that it starts by then: no "
	                     "run time given",
	         a->finish ? rt : "", a->unestimated,
	         a->unestimated == 1 ? "" : "s", as);
}

static json_t *admission_json(const struct cnl_ctl_admission *a)
{
	char text[256];

	admission_text(a, text, sizeof(text));
	return json_pack(
	    "{s:s,s:o,s:o,s:i,s:I,s:s}", "checked",
	    a->finish ? "finish" : "start", "runtime_s",
	    a->finish ? json_integer(a->runtime_ms / 1000) : json_null(),
	    "earliest_start",
	    a->start > 0 ? cnl_api_time_json(a->start) : json_null(),
	    "unestimated_running", a->unestimated, "assumed_runtime_s",
	    (json_int_t)(a->assumed_runtime_ms / 1000), "text", text);
}

H(h_jobs_create)
{
	static const char *const fields[] = {
	    "command",   "gpu",         "profile",   "priority", "deadline",
	    "runtime_s", "preemptible", "cpu_milli", "mem_mib",  "files",
	    "gpu_types", "dataset",     "nodes",     NULL};
	struct call *c = call;
	struct cnl_store_job j = {0}, got;
	const char *command, *gpu = NULL, *profile = NULL, *key, *dl = NULL;
	const char *dataset = NULL;
	int64_t runtime = 0, cpu = 0, mem = 0, nodes = 1;
	struct cnl_ctl_admission adm = {0};
	bool preemptible = true, fresh = true;
	json_t *files = NULL, *members = NULL;
	uint64_t types = 0;
	int prio, r;
	char err[256];
	json_t *body;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(command = cnl_api_get_string(body, "command",
	                                   CNL_STORE_COMMAND_MAX, resp)))
		goto out;
	if (cnl_json_get_string(body, "gpu", false, &gpu, err, sizeof(err)) <
	        0 ||
	    cnl_json_get_string(body, "profile", false, &profile, err,
	                        sizeof(err)) < 0 ||
	    cnl_json_get_string(body, "deadline", false, &dl, err,
	                        sizeof(err)) < 0 ||
	    cnl_json_get_int(body, "runtime_s", false, 0, 366LL * 86400,
	                     &runtime, err, sizeof(err)) < 0 ||
	    cnl_json_get_bool(body, "preemptible", false, &preemptible, err,
	                      sizeof(err)) < 0 ||
	    cnl_json_get_int(body, "cpu_milli", false, 1, 1024 * 1000, &cpu,
	                     err, sizeof(err)) < 0 ||
	    cnl_json_get_int(body, "mem_mib", false, 1, 16LL << 20, &mem, err,
	                     sizeof(err)) < 0 ||
	    cnl_json_get_string(body, "dataset", false, &dataset, err,
	                        sizeof(err)) < 0 ||
	    cnl_json_get_int(body, "nodes", false, 1, GANG_MAX, &nodes, err,
	                     sizeof(err)) < 0) {
		bad(resp, err);
		goto out;
	}
	if (dataset && !cnl_label_valid(dataset)) {
		bad(resp,
		    "field \"dataset\": must be a name of 1..63 "
		    "characters of A-Z a-z 0-9 . _ -, not starting with . "
		    "or -");
		goto out;
	}
	if (!gpu == !profile) {
		bad(resp, "give exactly one of \"gpu\" (a shape such as "
		          "h100-25) and \"profile\"");
		goto out;
	}
	if (get_priority(body, &prio, resp) < 0 ||
	    cnl_api_get_idem_key(req, resp, &key) < 0)
		goto out;
	/* "files": {"train.py": base64, ...} written into the job's working
	 * directory before it starts (nodes share no file system with the
	 * user's machine). */
	files = json_object_get(body, "files");
	if (files) {
		const char *fname;
		json_t *fdata;

		if (!json_is_object(files) || json_object_size(files) > 16) {
			bad(resp,
			    "field \"files\": must be an object of at most "
			    "16 NAME: base64 entries");
			goto out;
		}
		json_object_foreach (files, fname, fdata) {
			uint8_t *bytes;
			size_t n;

			if (!cnl_api_valid_name(fname) ||
			    !json_is_string(fdata) ||
			    !(bytes =
			          b64_decode(json_string_value(fdata), &n))) {
				bad(resp,
				    "field \"files\": each name must be a "
				    "plain file name and each value base64 "
				    "of at most 512 KiB");
				goto out;
			}
			free(bytes);
		}
	}
	if (profile) {
		if (profile_shape(c, profile, j.gpu_shape, sizeof(j.gpu_shape),
		                  NULL) < 0) {
			bad(resp, "field \"profile\": no such profile (see GET "
			          "/v1/profiles)");
			goto out;
		}
		snprintf(j.profile, sizeof(j.profile), "%s", profile);
	} else {
		if (strlen(gpu) >= sizeof(j.gpu_shape) ||
		    cnl_ctl_shape_check(c->api->ctl, gpu, err, sizeof(err)) <
		        0) {
			char msg[320];

			snprintf(msg, sizeof(msg), "field \"gpu\": %s",
			         strlen(gpu) >= sizeof(j.gpu_shape) ? "too long"
			                                            : err);
			bad(resp, msg);
			goto out;
		}
		snprintf(j.gpu_shape, sizeof(j.gpu_shape), "%s", gpu);
	}
	if (get_gpu_types(c, body, j.gpu_shape, &types, resp) < 0)
		goto out;
	if (dl && cnl_time_parse_rfc3339(dl, &j.deadline_ms) < 0) {
		bad(resp,
		    "field \"deadline\": must be an RFC 3339 time such as "
		    "2026-04-30T17:00:00Z");
		goto out;
	}
	if (j.deadline_ms && j.deadline_ms <= c->now_ms) {
		bad(resp, "field \"deadline\": is in the past");
		goto out;
	}
	if (cnl_api_new_id(c, "job", j.id) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot make an id");
		goto out;
	}
	memcpy(j.project_id, c->project.id, sizeof(j.project_id));
	memcpy(j.user_id, c->user.id, sizeof(j.user_id));
	snprintf(j.command, sizeof(j.command), "%s", command);
	j.priority = prio;
	j.runtime_ms = runtime * 1000;
	snprintf(j.state, sizeof(j.state), "pending");
	if (initial_run(j.run, sizeof(j.run), preemptible, cpu, mem,
	                types ? json_object_get(body, "gpu_types") : NULL,
	                dataset, j.id, 0, (int)nodes) < 0) {
		bad(resp, "the job's fields are too long together");
		goto out;
	}
	j.created_ms = j.updated_ms = c->now_ms;
	/* Quota and the deadline apply to new jobs: a retried request
	 * (same Idempotency-Key) gets its original job back regardless. */
	if (key) {
		if (cnl_store_tx_begin(c->api->store) < 0) {
			cnl_http_error(resp, 500, "internal", "store");
			goto out;
		}
		r = cnl_store_job_create(c->api->store, &j, key, &got);
		cnl_store_tx_rollback(c->api->store); /* only a lookup */
		fresh = r == CNL_STORE_CREATED;
	}
	if (fresh && quota_admit(c, false, resp) < 0)
		goto out;
	if (fresh && j.deadline_ms &&
	    cnl_ctl_admit(c->api->ctl, &j, c->now_ms, &adm) == -CNL_EDEADLINE) {
		char when[CNL_TIME_RFC3339_MAX] = "never", how[256];

		if (adm.start > 0)
			cnl_time_format_rfc3339(adm.start, when, sizeof(when));
		admission_text(&adm, how, sizeof(how));
		cnl_http_error(resp, 422, "deadline_infeasible",
		               "the deadline cannot be met: the earliest "
		               "possible start is %s (%s)",
		               when, how);
		goto out;
	}
	/* The job, the rest of its gang and its files are stored in one
	 * transaction.  The job made here is the gang's leader (rank 0),
	 * the one returned; a retry (Idempotency-Key) replays only it. */
	if ((r = cnl_store_tx_begin(c->api->store)) < 0) {
		cnl_api_store_error(c, resp, r, "job");
		goto out;
	}
	r = cnl_store_job_create(c->api->store, &j, key, &got);
	if (r == CNL_STORE_CREATED && nodes > 1) {
		members = json_array();
		json_array_append_new(members, json_string(got.id));
		for (int k = 1; r >= 0 && k < nodes; k++) {
			struct cnl_store_job m = j, mgot;

			if (cnl_api_new_id(c, "job", m.id) < 0 ||
			    initial_run(
			        m.run, sizeof(m.run), preemptible, cpu, mem,
			        types ? json_object_get(body, "gpu_types")
			              : NULL,
			        dataset, j.id, k, (int)nodes) < 0) {
				r = -ENOMEM;
				break;
			}
			r = cnl_store_job_create(c->api->store, &m, NULL,
			                         &mgot);
			if (r >= 0)
				json_array_append_new(members,
				                      json_string(mgot.id));
		}
		if (r >= 0) {
			json_t *g = json_pack("{s:O,s:I}", "members", members,
			                      "size", (json_int_t)nodes);

			r = doc_save(c, "gang", j.id, j.id, "", g, true);
			json_decref(g);
			if (r >= 0)
				r = CNL_STORE_CREATED;
		}
	}
	if (r == CNL_STORE_CREATED && files) {
		const char *fname;
		json_t *fdata;
		int fr = 0;

		json_object_foreach (files, fname, fdata) {
			char did[CNL_STORE_DOC_ID_MAX];
			json_t *o;

			snprintf(did, sizeof(did), "%s/%s", got.id, fname);
			o = json_pack("{s:s,s:O}", "name", fname, "data_base64",
			              fdata);
			fr = doc_save(c, "input", did, got.id, fname, o, true);
			json_decref(o);
			if (fr < 0)
				break;
		}
		if (fr < 0)
			r = fr;
	}
	if (r >= 0 && cnl_store_tx_commit(c->api->store) < 0)
		r = -EIO;
	if (r < 0) {
		cnl_store_tx_rollback(c->api->store);
		if (r == -CNL_EDUP && key) {
			cnl_http_error(
			    resp, 409, "conflict",
			    "Idempotency-Key already used for another "
			    "request");
			goto out;
		}
		cnl_api_store_error(c, resp, r, "job");
		goto out;
	}
	if (created_here(c, resp, r, got.id, got.project_id) < 0)
		goto out;
	if (r == CNL_STORE_CREATED) {
		cnl_ctl_job_added(c->api->ctl, &got);
		for (size_t k = 1; k < json_array_size(members); k++) {
			struct cnl_store_job m;

			if (cnl_store_job_get(
			        c->api->store,
			        json_string_value(json_array_get(members, k)),
			        &m) == 0)
				cnl_ctl_job_added(c->api->ctl, &m);
		}
		cnl_ctl_kick(c->api->ctl);
	}
	{
		json_t *o = cnl_api_job_json(c, &got);

		/* Which estimate the deadline was checked with. */
		if (fresh && j.deadline_ms)
			json_object_set_new(o, "deadline_check",
			                    admission_json(&adm));
		cnl_http_reply(resp, r == CNL_STORE_REPLAYED ? 200 : 201, o);
	}
out:
	json_decref(members);
	json_decref(body);
}

H(h_jobs_list)
{
	struct call *c = call;
	struct cnl_store_job *jobs;
	const char *after;
	int limit, n = 0, r;
	json_t *items;

	if (cnl_api_get_page(req, resp, &limit, &after) < 0)
		return;
	jobs = cnl_xcalloc((size_t)limit, sizeof(*jobs));
	r = cnl_store_job_list(c->api->store, c->project.id, after, limit, jobs,
	                       &n);
	if (r < 0) {
		free(jobs);
		cnl_api_store_error(c, resp, r, "job");
		return;
	}
	items = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(items, cnl_api_job_json(c, &jobs[i]));
	cnl_http_reply(
	    resp, 200,
	    cnl_api_page_json(items, n, limit, n ? jobs[n - 1].id : NULL));
	free(jobs);
}

H(h_job_get)
{
	struct call *c = call;
	json_t *o = cnl_api_job_json(c, &c->job);
	json_t *g = json_object_get(o, "gang"), *members, *ranks;

	/* One job shows where its whole gang runs: each member's state and
	 * node, zone and rack, by rank (the listings leave this out: it
	 * costs a read per member). */
	members = json_object_get(g, "members");
	ranks = json_array();
	for (size_t i = 0; i < json_array_size(members); i++) {
		const char *id = json_string_value(json_array_get(members, i));
		struct cnl_store_job m;
		json_t *it, *run, *p;

		if (!id || cnl_store_job_get(c->api->store, id, &m) < 0)
			continue;
		it = json_pack("{s:s,s:I,s:s}", "id", m.id, "rank",
		               (json_int_t)i, "state", m.state);
		run = json_loads(m.run, 0, NULL);
		p = json_object_get(run, "placement");
		for (const char *const *k =
		         (const char *const[]){"node", "zone", "rack", NULL};
		     json_is_object(p) && *k; k++)
			if (json_object_get(p, *k))
				json_object_set(it, *k, json_object_get(p, *k));
		json_decref(run);
		json_array_append_new(ranks, it);
	}
	if (g)
		json_object_set_new(g, "placements", ranks);
	else
		json_decref(ranks);
	cnl_http_reply(resp, 200, o);
}

H(h_job_cancel)
{
	struct call *c = call;
	int r;

	char gang[CNL_ID_MAX];

	snprintf(c->target, sizeof(c->target), "%s", c->job.id);
	/* Cancelling any member of a gang cancels the gang. */
	if (job_gang(&c->job, gang, NULL, NULL) == 0)
		r = cnl_ctl_stop_gang(c->api->ctl, gang, c->now_ms);
	else
		r = cnl_ctl_stop_workload(c->api->ctl, c->job.id, c->now_ms);
	if (r == -CNL_ENOTFOUND) {
		cnl_http_error(resp, 409, "conflict", "job already %s",
		               c->job.state);
		return;
	}
	if (r < 0 ||
	    (r = cnl_store_job_get(c->api->store, c->job.id, &c->job)) < 0) {
		cnl_api_store_error(c, resp, r, "job");
		return;
	}
	cnl_ctl_kick(c->api->ctl);
	cnl_http_reply(resp, 200, cnl_api_job_json(c, &c->job));
}

/* Log chunks of a job, oldest first, paged by chunk id. */
static json_t *log_item(struct call *c, const struct cnl_store_doc *d,
                        json_t *body)
{
	json_object_set_new(body, "id", json_string(d->id));
	json_object_set_new(body, "at", cnl_api_time_json(d->updated_ms));
	return json_incref(body);
}

H(h_job_logs)
{
	struct call *c = call;

	cnl_api_doc_page(c, req, resp, "log", c->job.id, "log", log_item);
}

/* ---- servers ------------------------------------------------------------- */

json_t *cnl_api_server_json(struct call *c, const struct cnl_store_server *v)
{
	json_t *o =
	    json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:s,s:o,s:o}", "id",
	              v->id, "project_id", v->project_id, "user_id", v->user_id,
	              "name", v->name, "image", v->image, "profile", v->profile,
	              "storage_gb", (json_int_t)v->storage_gb, "idle_timeout_s",
	              (json_int_t)v->idle_timeout_s, "state", v->state, "url",
	              v->url[0] ? json_string(v->url) : json_null(),
	              "created_at", cnl_api_time_json(v->created_ms));
	json_t *live = cnl_ctl_workload_json(c->api->ctl, v->id);

	if (live)
		json_object_set_new(o, "status", live);
	return o;
}

H(h_servers_create)
{
	static const char *const fields[] = {
	    "name", "image", "profile", "storage_gb", "idle_timeout_s", NULL};
	struct call *c = call;
	struct cnl_store_server v = {0}, got;
	const char *name, *image, *profile, *key;
	char shape[CNL_SHAPE_MAX], err[256];
	int64_t storage = 10, idle = 3600;
	json_t *body;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(name = cnl_api_get_name(body, "name", resp)) ||
	    !(image = cnl_api_get_string(body, "image", CNL_STORE_IMAGE_MAX,
	                                 resp)) ||
	    !(profile = cnl_api_get_string(body, "profile",
	                                   CNL_STORE_PROFILE_MAX, resp)))
		goto out;
	if (cnl_json_get_int(body, "storage_gb", false, 0, 100000, &storage,
	                     err, sizeof(err)) < 0 ||
	    cnl_json_get_int(body, "idle_timeout_s", false, 0, 30LL * 86400,
	                     &idle, err, sizeof(err)) < 0) {
		bad(resp, err);
		goto out;
	}
	if (profile_shape(c, profile, shape, sizeof(shape), NULL) < 0) {
		bad(resp, "field \"profile\": no such profile (see GET "
		          "/v1/profiles)");
		goto out;
	}
	if (cnl_api_get_idem_key(req, resp, &key) < 0)
		goto out;
	snprintf(c->target, sizeof(c->target), "%s", name);
	if (cnl_api_new_id(c, "srv", v.id) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot make an id");
		goto out;
	}
	memcpy(v.project_id, c->project.id, sizeof(v.project_id));
	memcpy(v.user_id, c->user.id, sizeof(v.user_id));
	snprintf(v.name, sizeof(v.name), "%s", name);
	snprintf(v.image, sizeof(v.image), "%s", image);
	snprintf(v.profile, sizeof(v.profile), "%s", profile);
	v.storage_gb = storage;
	v.idle_timeout_s = idle;
	snprintf(v.state, sizeof(v.state), "pending");
	v.created_ms = c->now_ms;
	if (key) {
		struct cnl_store_server tmp;

		if (cnl_store_tx_begin(c->api->store) < 0) {
			cnl_http_error(resp, 500, "internal", "store");
			goto out;
		}
		r = cnl_store_server_create(c->api->store, &v, key, &tmp);
		cnl_store_tx_rollback(c->api->store); /* just a lookup */
		if (r == CNL_STORE_CREATED && quota_admit(c, true, resp) < 0)
			goto out;
	} else if (quota_admit(c, true, resp) < 0) {
		goto out;
	}
	r = cnl_store_server_create(c->api->store, &v, key, &got);
	if (r == -CNL_EDUP && key) {
		cnl_http_error(resp, 409, "conflict",
		               "Idempotency-Key already used for another "
		               "request, or the name is taken");
		goto out;
	}
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "server");
		goto out;
	}
	if (created_here(c, resp, r, got.id, got.project_id) < 0)
		goto out;
	if (r == CNL_STORE_CREATED) {
		cnl_ctl_server_added(c->api->ctl, &got);
		cnl_ctl_kick(c->api->ctl);
	}
	cnl_http_reply(resp, r == CNL_STORE_REPLAYED ? 200 : 201,
	               cnl_api_server_json(c, &got));
out:
	json_decref(body);
}

H(h_servers_list)
{
	struct call *c = call;
	struct cnl_store_server *v;
	const char *after;
	int limit, n = 0, r;
	json_t *items;

	if (cnl_api_get_page(req, resp, &limit, &after) < 0)
		return;
	v = cnl_xcalloc((size_t)limit, sizeof(*v));
	r = cnl_store_server_list(c->api->store, c->project.id, after, limit, v,
	                          &n);
	if (r < 0) {
		free(v);
		cnl_api_store_error(c, resp, r, "server");
		return;
	}
	items = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(items, cnl_api_server_json(c, &v[i]));
	cnl_http_reply(
	    resp, 200,
	    cnl_api_page_json(items, n, limit, n ? v[n - 1].id : NULL));
	free(v);
}

H(h_server_get)
{
	struct call *c = call;

	cnl_http_reply(resp, 200, cnl_api_server_json(c, &c->server));
}

H(h_server_stop)
{
	struct call *c = call;
	int r;

	snprintf(c->target, sizeof(c->target), "%s", c->server.id);
	r = cnl_ctl_stop_workload(c->api->ctl, c->server.id, c->now_ms);
	if (r == -CNL_ENOTFOUND) {
		cnl_http_error(resp, 409, "conflict", "server is already %s",
		               c->server.state);
		return;
	}
	if (r < 0 || (r = cnl_store_server_get(c->api->store, c->server.id,
	                                       &c->server)) < 0) {
		cnl_api_store_error(c, resp, r, "server");
		return;
	}
	cnl_ctl_kick(c->api->ctl);
	cnl_http_reply(resp, 200, cnl_api_server_json(c, &c->server));
}

/* Delete a stopped server: its storage stops being held and metered. */
H(h_server_delete)
{
	struct call *c = call;
	int r;

	snprintf(c->target, sizeof(c->target), "%s", c->server.id);
	if (strcmp(c->server.state, "stopped") != 0 &&
	    strcmp(c->server.state, "failed") != 0) {
		cnl_http_error(resp, 409, "conflict",
		               "server is %s: stop it first", c->server.state);
		return;
	}
	if ((r = cnl_store_server_delete(c->api->store, c->server.id)) < 0) {
		cnl_api_store_error(c, resp, r, "server");
		return;
	}
	cnl_ctl_server_deleted(c->api->ctl, &c->server);
	cnl_http_reply(resp, 200, json_pack("{s:s}", "deleted", c->server.id));
}

H(h_server_start)
{
	struct call *c = call;
	int r;

	snprintf(c->target, sizeof(c->target), "%s", c->server.id);
	if (strcmp(c->server.state, "stopped") != 0 &&
	    strcmp(c->server.state, "failed") != 0) {
		cnl_http_error(resp, 409, "conflict", "server is already %s",
		               c->server.state);
		return;
	}
	if (quota_admit(c, true, resp) < 0)
		return;
	/* The run record keeps its epoch: a restarted server is placed
	 * under a newer one than any earlier run. */
	r = cnl_store_server_update(c->api->store, c->server.id, "pending", "",
	                            c->server.run[0] ? c->server.run : "{}");
	if (r < 0 || (r = cnl_store_server_get(c->api->store, c->server.id,
	                                       &c->server)) < 0) {
		cnl_api_store_error(c, resp, r, "server");
		return;
	}
	/* Its storage is already counted; only the workload is new. */
	c->server.storage_gb = 0;
	cnl_ctl_server_added(c->api->ctl, &c->server);
	cnl_store_server_get(c->api->store, c->server.id, &c->server);
	cnl_ctl_kick(c->api->ctl);
	cnl_http_reply(resp, 200, cnl_api_server_json(c, &c->server));
}

/* ---- nodes --------------------------------------------------------------- */

static void node_reply(struct cnl_http_response *resp, int status, json_t *body,
                       const char *err)
{
	static const char *const codes[] = {[400 - 400] = "bad_request",
	                                    [404 - 400] = "not_found",
	                                    [409 - 400] = "conflict"};

	if (status < 400) {
		cnl_http_reply(resp, (unsigned)status, body);
		return;
	}
	cnl_http_error(resp, (unsigned)status,
	               status < 410 && codes[status - 400] ? codes[status - 400]
	                                                   : "internal",
	               "%s", err);
}

H(h_nodes_list)
{
	struct call *c = call;
	json_t *all, *items;
	const char *after, *last = NULL;
	int limit, n = 0;

	if (cnl_api_get_page(req, resp, &limit, &after) < 0)
		return;
	/* Node ids sort by registration time, the order of the list. */
	all = cnl_ctl_nodes_json(c->api->ctl, c->now_ms);
	items = json_array();
	for (size_t i = 0; i < json_array_size(all) && n < limit; i++) {
		json_t *o = json_array_get(all, i);
		const char *id = json_string_value(json_object_get(o, "id"));

		if (after && strcmp(id, after) <= 0)
			continue;
		json_array_append(items, o);
		last = id;
		n++;
	}
	cnl_http_reply(resp, 200, cnl_api_page_json(items, n, limit, last));
	json_decref(all);
}

H(h_nodes_register)
{
	struct call *c = call;
	json_t *body, *out = NULL;
	char err[256] = "";
	int st;

	if (!(body = cnl_api_parse_body(req, resp, NULL)))
		return;
	st = cnl_ctl_node_register(c->api->ctl, body, c->now_ms, &out, err,
	                           sizeof(err));
	snprintf(c->target, sizeof(c->target), "%s",
	         out ? json_string_value(json_object_get(out, "id")) : "node");
	node_reply(resp, st, out, err);
	json_decref(body);
}

H(h_node_update)
{
	static const char *const fields[] = {"state", NULL};
	struct call *c = call;
	const char *node = cnl_http_param(req, "node"), *state;
	json_t *body, *out = NULL;
	char err[256] = "";

	snprintf(c->target, sizeof(c->target), "%s", node);
	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if ((state = cnl_api_get_string(body, "state", 16, resp))) {
		int st_ = cnl_ctl_node_set_state(c->api->ctl, node, state, &out,
		                                 err, sizeof(err));
		node_reply(resp, st_, out, err);
	}
	json_decref(body);
}

H(h_node_heartbeat)
{
	struct call *c = call;
	const char *node = cnl_http_param(req, "node");
	json_t *body, *out = NULL;
	char err[256] = "";
	int st;

	snprintf(c->target, sizeof(c->target), "%s", node);
	if (!(body = cnl_api_parse_body(req, resp, NULL)))
		return;
	st = cnl_ctl_node_heartbeat(c->api->ctl, node, body, c->now_ms, &out,
	                            err, sizeof(err));
	/* Liveness only is not worth an audit record; a stop order is. */
	c->no_audit =
	    st == 200 && json_array_size(json_object_get(out, "stop")) == 0;
	node_reply(resp, st, out, err);
	json_decref(body);
}

H(h_node_assignments)
{
	struct call *c = call;
	const char *node = cnl_http_param(req, "node");
	const char *qs = cnl_http_query(req, "since");
	const char *qw = cnl_http_query(req, "wait");
	unsigned long long since = 0;
	long wait = 0;
	json_t *out = NULL;
	char err[256] = "", *end;

	if (qs) {
		errno = 0;
		since = strtoull(qs, &end, 10);
		if (errno || end == qs || *end) {
			bad(resp, "query \"since\": must be a version number");
			return;
		}
	}
	if (qw) {
		errno = 0;
		wait = strtol(qw, &end, 10);
		if (errno || end == qw || *end || wait < 0 || wait > 50) {
			bad(resp, "query \"wait\": must be 0..50 seconds");
			return;
		}
	}
	int st_ = cnl_ctl_assignments(c->api->ctl, node, since, wait * 1000,
	                              &out, err, sizeof(err));
	node_reply(resp, st_, out, err);
}

H(h_node_reports)
{
	struct call *c = call;
	const char *node = cnl_http_param(req, "node");
	json_t *body, *out = NULL;
	char err[256] = "";

	if (!(body = cnl_api_parse_body(req, resp, NULL)))
		return;
	snprintf(c->target, sizeof(c->target), "%s",
	         json_string_value(json_object_get(body, "id"))
	             ? json_string_value(json_object_get(body, "id"))
	             : node);
	int st_ = cnl_ctl_node_report(c->api->ctl, node, body, c->now_ms, &out,
	                              err, sizeof(err));
	node_reply(resp, st_, out, err);
	json_decref(body);
}

/* Output of a workload, appended by its agent under the current epoch. */
H(h_node_logs)
{
	static const char *const fields[] = {"id", "epoch", "stream", "data",
	                                     NULL};
	struct call *c = call;
	const char *node = cnl_http_param(req, "node"), *id, *stream, *data;
	char lid[CNL_ID_MAX], err[256];
	int64_t epoch;
	json_t *body, *o;
	int r;

	c->no_audit = true; /* output, not a change of the platform */
	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(id = cnl_api_get_string(body, "id", CNL_ID_MAX, resp)) ||
	    !(stream = cnl_api_get_string(body, "stream", 8, resp)))
		goto out;
	if (cnl_json_get_int(body, "epoch", true, 0, INT64_MAX, &epoch, err,
	                     sizeof(err)) < 0 ||
	    cnl_json_get_string(body, "data", true, &data, err, sizeof(err)) <
	        0) {
		bad(resp, err);
		goto out;
	}
	if (strcmp(stream, "stdout") != 0 && strcmp(stream, "stderr") != 0) {
		bad(resp, "field \"stream\": must be stdout or stderr");
		goto out;
	}
	if (cnl_ctl_fence_check(c->api->ctl, node, id, epoch) < 0) {
		cnl_http_error(resp, 409, "fenced",
		               "stale fencing epoch: this work is no longer "
		               "assigned to this node under that epoch");
		goto out;
	}
	if (cnl_api_new_id(c, "log", lid) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot make an id");
		goto out;
	}
	o = json_pack("{s:s,s:s,s:I}", "stream", stream, "data", data, "epoch",
	              (json_int_t)epoch);
	r = doc_save(c, "log", lid, id, "", o, true);
	json_decref(o);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "log");
		goto out;
	}
	cnl_http_reply(resp, 201, json_pack("{s:s}", "id", lid));
out:
	json_decref(body);
}

/* ---- audit --------------------------------------------------------------- */

H(h_audit_list)
{
	struct call *c = call;
	const char *qa = cnl_http_query(req, "after");
	const char *ql = cnl_http_query(req, "limit");
	long long after = 0;
	long limit = CNL_API_PAGE_DEFAULT;
	struct cnl_store_audit *a;
	json_t *items;
	char *end;
	int n = 0, r;

	if (qa) {
		errno = 0;
		after = strtoll(qa, &end, 10);
		if (errno || end == qa || *end || after < 0) {
			bad(resp, "query \"after\": must be a sequence number");
			return;
		}
	}
	if (ql) {
		errno = 0;
		limit = strtol(ql, &end, 10);
		if (errno || end == ql || *end || limit < 1 ||
		    limit > CNL_STORE_LIST_MAX) {
			bad(resp, "query \"limit\": must be an integer in "
			          "1..1000");
			return;
		}
	}
	a = cnl_xcalloc((size_t)limit, sizeof(*a));
	r = cnl_store_audit_list(c->api->store, after, (int)limit, a, &n);
	if (r < 0) {
		free(a);
		cnl_api_store_error(c, resp, r, "audit");
		return;
	}
	items = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(
		    items, json_pack("{s:I,s:o,s:s,s:s,s:s,s:s,s:s}", "seq",
		                     (json_int_t)a[i].seq, "time",
		                     cnl_api_time_json(a[i].ts_ms), "actor",
		                     a[i].actor, "action", a[i].action,
		                     "target", a[i].target, "result",
		                     a[i].result, "hash", a[i].hash));
	cnl_http_reply(
	    resp, 200,
	    json_pack("{s:o,s:o}", "items", items, "next",
	              n == limit ? json_integer(a[n - 1].seq) : json_null()));
	free(a);
}

H(h_audit_verify)
{
	struct call *c = call;
	int64_t bad_seq = 0;
	int r = cnl_store_audit_verify(c->api->store, &bad_seq);

	if (r == -CNL_ECORRUPT) {
		cnl_http_reply(
		    resp, 200,
		    json_pack("{s:b,s:I,s:s}", "ok", 0, "bad_seq",
		              (json_int_t)bad_seq, "message",
		              "the audit chain fails at this record: "
		              "it was edited or deleted"));
		return;
	}
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "audit");
		return;
	}
	cnl_http_reply(resp, 200, json_pack("{s:b}", "ok", 1));
}

/* ---- burst policy and cloud accounts ----------------------------------- */

static const char *const providers[] = {"aws", "gcp", "azure", NULL};

static bool in_set(const char *v, const char *const *set)
{
	for (; *set; set++)
		if (strcmp(v, *set) == 0)
			return true;
	return false;
}

/* Whether some cloud account of @provider is registered. */
static bool have_account(struct call *c, const char *provider)
{
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	int n = 0;
	bool found = false;

	if (cnl_store_doc_list(c->api->store, "cloud", NULL, NULL,
	                       CNL_STORE_LIST_MAX, d, &n) == 0)
		for (int i = 0; i < n && !found; i++) {
			json_t *o = json_loads(d[i].body, 0, NULL);
			const char *p =
			    json_string_value(json_object_get(o, "provider"));

			found = p && strcmp(p, provider) == 0;
			json_decref(o);
		}
	cnl_store_docs_done(d, n);
	free(d);
	return found;
}

H(h_burst_get)
{
	struct call *c = call;
	json_t *o = NULL;
	int r = doc_json(c->api->store, "policy", "burst", &o);

	if (r == -CNL_ENOTFOUND)
		o = json_pack("{s:b}", "enabled", 0);
	else if (r < 0) {
		cnl_api_store_error(c, resp, r, "burst policy");
		return;
	}
	cnl_http_reply(resp, 200, o);
}

H(h_burst_put)
{
	static const char *const fields[] = {"threshold", "provider",
	                                     "strategy",  "max_cloud_budget",
	                                     "enabled",   NULL};
	static const char *const strategies[] = {"spot", "on-demand",
	                                         "spot-then-on-demand", NULL};
	struct call *c = call;
	const char *provider, *strategy;
	double threshold, budget;
	bool enabled = true;
	char err[256];
	json_t *body, *o;
	int r;

	snprintf(c->target, sizeof(c->target), "policy:burst");
	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (cnl_json_get_double(body, "threshold", true, 0.0, 1.0, &threshold,
	                        err, sizeof(err)) < 0 ||
	    cnl_json_get_double(body, "max_cloud_budget", true, 0.0, 1e12,
	                        &budget, err, sizeof(err)) < 0 ||
	    cnl_json_get_bool(body, "enabled", false, &enabled, err,
	                      sizeof(err)) < 0) {
		bad(resp, err);
		goto out;
	}
	if (threshold <= 0) {
		bad(resp, "field \"threshold\": must be above 0 (a utilisation "
		          "such as 0.90)");
		goto out;
	}
	if (!(provider = cnl_api_get_string(body, "provider", 16, resp)) ||
	    !(strategy = cnl_api_get_string(body, "strategy", 32, resp)))
		goto out;
	if (!in_set(provider, providers)) {
		bad(resp, "field \"provider\": must be aws, gcp or azure");
		goto out;
	}
	if (!in_set(strategy, strategies)) {
		bad(resp, "field \"strategy\": must be spot, on-demand or "
		          "spot-then-on-demand");
		goto out;
	}
	if (!have_account(c, provider)) {
		cnl_http_error(resp, 409, "conflict",
		               "no cloud account for provider %s: add one "
		               "first (cnlab cloud add %s ...)",
		               provider, provider);
		goto out;
	}
	o = json_pack("{s:f,s:s,s:s,s:f,s:b}", "threshold", threshold,
	              "provider", provider, "strategy", strategy,
	              "max_cloud_budget", budget, "enabled", enabled);
	r = doc_save(c, "policy", "burst", "", "", o, false);
	if (r < 0) {
		json_decref(o);
		cnl_api_store_error(c, resp, r, "burst policy");
		goto out;
	}
	cnl_http_reply(resp, 200, o);
out:
	json_decref(body);
}

static bool all_digits(const char *s, size_t n)
{
	if (strlen(s) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isdigit((unsigned char)s[i]))
			return false;
	return true;
}

/* Provider-specific account and region formats; NULL when valid. */
static const char *check_account(const char *provider, const char *account,
                                 const char *region)
{
	size_t n = strlen(region);

	if (strcmp(provider, "aws") == 0 && !all_digits(account, 12))
		return "field \"account\": an AWS account id is 12 digits";
	if (strcmp(provider, "azure") == 0 &&
	    (strlen(account) != 36 || account[8] != '-' || account[13] != '-'))
		return "field \"account\": an Azure subscription id is a UUID";
	if (strcmp(provider, "gcp") == 0 &&
	    (strlen(account) < 6 || strlen(account) > 30 ||
	     !islower((unsigned char)account[0])))
		return "field \"account\": a GCP project id is 6..30 "
		       "characters starting with a lowercase letter";
	if (n < 4 || n > 32)
		return "field \"region\": must look like ap-northeast-2";
	for (size_t i = 0; i < n; i++)
		if (!islower((unsigned char)region[i]) &&
		    !isdigit((unsigned char)region[i]) && region[i] != '-')
			return "field \"region\": lowercase letters, digits "
			       "and '-' only";
	return NULL;
}

static json_t *cloud_json(const char *id, json_t *o)
{
	json_t *p = json_deep_copy(o);

	json_object_set_new(p, "id", json_string(id));
	return p;
}

static json_t *cloud_item(struct call *c, const struct cnl_store_doc *d,
                          json_t *body)
{
	return cloud_json(d->id, body);
}

H(h_cloud_list)
{
	cnl_api_doc_page(call, req, resp, "cloud", NULL, "cloud account",
	                 cloud_item);
}

H(h_cloud_add)
{
	static const char *const fields[] = {"provider", "account", "region",
	                                     "instance_types", NULL};
	struct call *c = call;
	const char *provider, *account, *region, *why;
	char id[CNL_ID_MAX], name[CNL_STORE_NAME_MAX];
	json_t *body, *types, *o;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(provider = cnl_api_get_string(body, "provider", 16, resp)) ||
	    !(account = cnl_api_get_string(body, "account", 40, resp)) ||
	    !(region = cnl_api_get_string(body, "region", 33, resp)))
		goto out;
	if (!in_set(provider, providers)) {
		bad(resp, "field \"provider\": must be aws, gcp or azure");
		goto out;
	}
	if ((why = check_account(provider, account, region))) {
		bad(resp, why);
		goto out;
	}
	types = json_object_get(body, "instance_types");
	if (!json_is_array(types) || json_array_size(types) == 0 ||
	    json_array_size(types) > 64) {
		bad(resp, "field \"instance_types\": must be a list of 1..64 "
		          "instance type names");
		goto out;
	}
	for (size_t i = 0; i < json_array_size(types); i++) {
		const char *t = json_string_value(json_array_get(types, i));

		if (!t || !t[0] || strlen(t) > 64) {
			bad(resp, "field \"instance_types\": each must be a "
			          "name such as g5.xlarge");
			goto out;
		}
	}
	snprintf(name, sizeof(name), "%s:%s:%s", provider, account, region);
	snprintf(c->target, sizeof(c->target), "cloud:%s", name);
	if (cnl_api_new_id(c, "cld", id) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot make an id");
		goto out;
	}
	o = json_pack("{s:s,s:s,s:s,s:O}", "provider", provider, "account",
	              account, "region", region, "instance_types", types);
	r = doc_save(c, "cloud", id, "", name, o, true);
	if (r < 0) {
		json_decref(o);
		cnl_api_store_error(c, resp, r, "cloud account");
		goto out;
	}
	cnl_http_reply(resp, 201, cloud_json(id, o));
	json_decref(o);
out:
	json_decref(body);
}

H(h_cloud_delete)
{
	struct call *c = call;
	const char *id = cnl_http_param(req, "account");
	int r;

	snprintf(c->target, sizeof(c->target), "%s", id);
	if ((r = cnl_store_doc_delete(c->api->store, "cloud", id)) < 0) {
		cnl_api_store_error(c, resp, r, "cloud account");
		return;
	}
	cnl_http_reply(resp, 200, json_pack("{s:s}", "deleted", id));
}

/* ---- /metrics ------------------------------------------------------------ */

static void quota_metrics(struct call *c, struct cnl_metrics_buf *b)
{
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	char esc[2 * CNL_STORE_DOC_ID_MAX + 1];
	int n = 0;

	cnl_mb_family(b, "cnlab_quota_used_ratio", "gauge",
	              "Quota use as a fraction of the limit, by owner and "
	              "resource.");
	if (cnl_store_doc_list(c->api->store, "quota", NULL, NULL,
	                       CNL_STORE_LIST_MAX, d, &n) < 0)
		n = 0;
	for (int i = 0; i < n; i++) {
		struct cnl_ctl_usage u;
		struct limits l;
		const char *owner = cnl_mb_escape(d[i].id, esc, sizeof(esc));
		/* The listing has the bodies: no second read per owner. */
		json_t *o = json_loads(d[i].body, 0, NULL);

		limits_from(o, &l);
		json_decref(o);
		cnl_ctl_usage_of(c->api->ctl, d[i].id, &u);
		if (l.gpu_hours > 0)
			cnl_mb_printf(b,
			              "cnlab_quota_used_ratio{owner=\"%s\","
			              "resource=\"gpu_hours\"} %.6f\n",
			              owner, u.gpu_hours / l.gpu_hours);
		if (l.storage_gb_days > 0)
			cnl_mb_printf(b,
			              "cnlab_quota_used_ratio{owner=\"%s\","
			              "resource=\"storage_gb_days\"} %.6f\n",
			              owner,
			              u.storage_gb_days / l.storage_gb_days);
		if (l.servers > 0)
			cnl_mb_printf(b,
			              "cnlab_quota_used_ratio{owner=\"%s\","
			              "resource=\"concurrent_servers\"} %.6f\n",
			              owner, u.servers / l.servers);
	}
	cnl_store_docs_done(d, n);
	free(d);
}

H(h_metrics)
{
	static const char *const classes[] = {"1xx", "2xx", "3xx", "4xx",
	                                      "5xx"};
	struct call *c = call;
	struct cnl_api *api = c->api;
	struct cnl_metrics_buf b = {0};
	char labels[256];

	cnl_mb_family(&b, "cnlab_http_requests_total", "counter",
	              "API requests by route and status class.");
	for (size_t i = 0; i < api->nstats; i++)
		for (int k = 0; k < 5; k++)
			if (api->stats[i].by_class[k])
				cnl_mb_printf(
				    &b,
				    "cnlab_http_requests_total{method=\"%s\","
				    "route=\"%s\",code=\"%s\"} %llu\n",
				    api->routes[i].method,
				    api->routes[i].pattern, classes[k],
				    (unsigned long long)api->stats[i]
				        .by_class[k]);
	cnl_mb_family(&b, "cnlab_http_request_duration_seconds", "histogram",
	              "API request latency by route, including waits.");
	for (size_t i = 0; i < api->nstats; i++) {
		if (!api->stats[i].latency.count)
			continue;
		snprintf(labels, sizeof(labels), "method=\"%s\",route=\"%s\"",
		         api->routes[i].method, api->routes[i].pattern);
		cnl_hist_write(&b, "cnlab_http_request_duration_seconds",
		               labels, &api->stats[i].latency);
	}
	cnl_ctl_metrics(api->ctl, &b);
	quota_metrics(c, &b);
	resp->status = 200;
	resp->text = b.p ? b.p : cnl_xstrdup("");
	resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

/* ---- artifacts ----------------------------------------------------------- */

/* Largest artifact kept by the control plane (decoded bytes). */
#define ARTIFACT_MAX (512 * 1024)

/* Decode standard base64 @in into a new buffer; its length in *@ret_n.
 * NULL for malformed input or more than ARTIFACT_MAX bytes. */
static uint8_t *b64_decode(const char *in, size_t *ret_n)
{
	size_t len = strlen(in), pad = 0;
	uint8_t *out;
	int n;

	if (len % 4 || len / 4 * 3 > ARTIFACT_MAX + 2)
		return NULL;
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)in[i]) && in[i] != '+' &&
		    in[i] != '/' && !(in[i] == '=' && i >= len - 2))
			return NULL;
	if (len && in[len - 1] == '=')
		pad++;
	if (len > 1 && in[len - 2] == '=')
		pad++;
	out = cnl_xmalloc(len / 4 * 3 + 1);
	n = EVP_DecodeBlock(out, (const unsigned char *)in, (int)len);
	if (n < 0 || (size_t)n < pad || (size_t)n - pad > ARTIFACT_MAX) {
		free(out);
		return NULL;
	}
	*ret_n = (size_t)n - pad;
	return out;
}

/* Files a job left in its artifacts directory, sent by its agent. */
H(h_node_artifacts)
{
	static const char *const fields[] = {"id", "epoch", "name",
	                                     "data_base64", NULL};
	struct call *c = call;
	const char *node = cnl_http_param(req, "node"), *id, *name, *data;
	char did[CNL_STORE_DOC_ID_MAX], hex[2 * SHA256_DIGEST_LENGTH + 1];
	uint8_t md[SHA256_DIGEST_LENGTH], *bytes;
	int64_t epoch;
	size_t n;
	char err[256];
	json_t *body, *o;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(id = cnl_api_get_string(body, "id", CNL_ID_MAX, resp)) ||
	    !(name = cnl_api_get_name(body, "name", resp)))
		goto out;
	snprintf(c->target, sizeof(c->target), "%s/%s", id, name);
	if (cnl_json_get_int(body, "epoch", true, 0, INT64_MAX, &epoch, err,
	                     sizeof(err)) < 0 ||
	    cnl_json_get_string(body, "data_base64", true, &data, err,
	                        sizeof(err)) < 0) {
		bad(resp, err);
		goto out;
	}
	if (!(bytes = b64_decode(data, &n))) {
		bad(resp, "field \"data_base64\": must be base64 of at most "
		          "512 KiB");
		goto out;
	}
	SHA256(bytes, n, md);
	free(bytes);
	for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	if (cnl_ctl_fence_check(c->api->ctl, node, id, epoch) < 0) {
		cnl_http_error(resp, 409, "fenced",
		               "stale fencing epoch: this work is no longer "
		               "assigned to this node under that epoch");
		goto out;
	}
	snprintf(did, sizeof(did), "%s/%s", id, name);
	o = json_pack("{s:s,s:I,s:s,s:s}", "name", name, "size", (json_int_t)n,
	              "sha256", hex, "data_base64", data);
	r = doc_save(c, "artifact", did, id, name, o, false);
	json_decref(o);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "artifact");
		goto out;
	}
	cnl_http_reply(resp, 201,
	               json_pack("{s:s,s:I,s:s}", "name", name, "size",
	                         (json_int_t)n, "sha256", hex));
out:
	json_decref(body);
}

static json_t *artifact_item(struct call *c, const struct cnl_store_doc *d,
                             json_t *body)
{
	json_object_del(body, "data_base64");
	json_object_set_new(body, "at", cnl_api_time_json(d->updated_ms));
	return json_incref(body);
}

H(h_job_artifacts)
{
	struct call *c = call;

	cnl_api_doc_page(c, req, resp, "artifact", c->job.id, "artifact",
	                 artifact_item);
}

/* The artifact's bytes, as the job wrote them. */
H(h_job_artifact_get)
{
	struct call *c = call;
	const char *name = cnl_http_param(req, "name");
	char did[CNL_STORE_DOC_ID_MAX];
	json_t *o = NULL;
	uint8_t *bytes;
	size_t n;
	int r;

	snprintf(did, sizeof(did), "%s/%s", c->job.id, name);
	if ((r = doc_json(c->api->store, "artifact", did, &o)) < 0) {
		cnl_api_store_error(c, resp, r, "artifact");
		return;
	}
	bytes = b64_decode(
	    json_string_value(json_object_get(o, "data_base64")) ?: "", &n);
	json_decref(o);
	if (!bytes) {
		cnl_http_error(resp, 500, "internal", "artifact unreadable");
		return;
	}
	resp->status = 200;
	resp->text = (char *)bytes;
	resp->text_len = n;
	resp->content_type = "application/octet-stream";
	if (n == 0) {
		/* An empty file: send "" (the transport sends strlen). */
		bytes[0] = '\0';
	}
}

/* ---- checkpoints --------------------------------------------------------- */

/*
 * A pre-empted job's checkpoint travels through the control plane: its
 * agent uploads the files of CNLAB_CHECKPOINT_DIR when the job exits, and
 * the agent that runs it next (any node) downloads them before starting
 * it.  Each upload replaces the file of the same name.
 */
H(h_node_checkpoint_put)
{
	static const char *const fields[] = {"id", "epoch", "name",
	                                     "data_base64", NULL};
	struct call *c = call;
	const char *node = cnl_http_param(req, "node"), *id, *name, *data;
	char did[CNL_STORE_DOC_ID_MAX], err[256];
	uint8_t *bytes;
	int64_t epoch;
	size_t n;
	json_t *body, *o;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(id = cnl_api_get_string(body, "id", CNL_ID_MAX, resp)) ||
	    !(name = cnl_api_get_name(body, "name", resp)))
		goto out;
	snprintf(c->target, sizeof(c->target), "%s/%s", id, name);
	if (cnl_json_get_int(body, "epoch", true, 0, INT64_MAX, &epoch, err,
	                     sizeof(err)) < 0 ||
	    cnl_json_get_string(body, "data_base64", true, &data, err,
	                        sizeof(err)) < 0) {
		bad(resp, err);
		goto out;
	}
	if (!(bytes = b64_decode(data, &n))) {
		bad(resp, "field \"data_base64\": must be base64 of at most "
		          "512 KiB");
		goto out;
	}
	free(bytes);
	if (cnl_ctl_fence_check(c->api->ctl, node, id, epoch) < 0) {
		cnl_http_error(resp, 409, "fenced",
		               "stale fencing epoch: this work is no longer "
		               "assigned to this node under that epoch");
		goto out;
	}
	snprintf(did, sizeof(did), "%s/%s", id, name);
	o = json_pack("{s:s,s:I,s:I,s:s}", "name", name, "size", (json_int_t)n,
	              "epoch", (json_int_t)epoch, "data_base64", data);
	r = doc_save(c, "ckpt", did, id, name, o, false);
	json_decref(o);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "checkpoint");
		goto out;
	}
	cnl_http_reply(
	    resp, 201,
	    json_pack("{s:s,s:I}", "name", name, "size", (json_int_t)n));
out:
	json_decref(body);
}

/* GET ?job=ID&epoch=E: the job's files of @kind, with data. */
static void files_get(struct call *c, struct cnl_http_request *req,
                      struct cnl_http_response *resp, const char *kind)
{
	const char *node = cnl_http_param(req, "node");
	const char *job = cnl_http_query(req, "job");
	const char *qe = cnl_http_query(req, "epoch");
	struct cnl_store_job jb;
	char leader[CNL_ID_MAX];
	struct cnl_store_doc *d;
	long long epoch;
	json_t *items;
	char *end;
	int n = 0, r;

	if (!job || !qe || strlen(job) >= CNL_ID_MAX) {
		bad(resp, "query \"job\" and \"epoch\" are required");
		return;
	}
	errno = 0;
	epoch = strtoll(qe, &end, 10);
	if (errno || end == qe || *end || epoch < 0) {
		bad(resp, "query \"epoch\": must be an integer");
		return;
	}
	if (cnl_ctl_fence_check(c->api->ctl, node, job, epoch) < 0) {
		cnl_http_error(resp, 409, "fenced",
		               "stale fencing epoch: this work is not assigned "
		               "to this node under that epoch");
		return;
	}
	/* A gang's members run with the files its leader came with. */
	if (strcmp(kind, "input") == 0 &&
	    cnl_store_job_get(c->api->store, job, &jb) == 0 &&
	    job_gang(&jb, leader, NULL, NULL) == 0)
		job = leader;
	d = cnl_xcalloc(64, sizeof(*d));
	r = cnl_store_doc_list(c->api->store, kind, job, NULL, 64, d, &n);
	if (r < 0) {
		free(d);
		cnl_api_store_error(c, resp, r, "checkpoint");
		return;
	}
	items = json_array();
	for (int i = 0; i < n; i++) {
		json_t *o = json_loads(d[i].body, 0, NULL);

		if (o)
			json_array_append_new(items, o);
	}
	cnl_http_reply(resp, 200, json_pack("{s:o}", "items", items));
	cnl_store_docs_done(d, n);
	free(d);
}

H(h_node_checkpoint_get)
{
	files_get(call, req, resp, "ckpt");
}

/* The files a job was submitted with, for the node that runs it. */
H(h_node_inputs_get)
{
	files_get(call, req, resp, "input");
}
