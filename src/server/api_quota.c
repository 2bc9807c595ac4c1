/*
 * api_quota.c - quotas per project and per user (GPU-hours, storage
 * GB-days, concurrent servers), admission against them, usage, and the
 * quota families of /metrics.
 *
 *   quota    id = project/user id {"gpu_hours", "storage_gb_days",
 *                                  "concurrent_servers"} (null: no limit)
 *            id = "<project id>@<cluster>" {"gpu_hours"}: the project's
 *                 quota in one cluster (the controller's pick leaves
 *                 the cluster out once it is spent)
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/json.h"
#include "common/label.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "sched/sched.h"
#include "server/api-internal.h"
#include "server/auth.h"
#include "server/oidc.h"
#include "server/shape.h"

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
		cnl_api_bad(resp, err);
		return -1;
	}
	*is_null = false;
	*ret = json_number_value(v);
	return 0;
}

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

	if (cnl_api_doc_json(c->api->store, "quota", owner, &o) < 0)
		o = NULL;
	limits_from(o, l);
	json_decref(o);
}

/*
 * Refuse new work beyond quota: 0, or -1 with a 403 naming the limit.
 * @servers: a server is being added (its limit applies too).
 */
int cnl_api_quota_admit(struct call *c, bool servers,
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

void cnl_api_quota_text(struct call *c, bool servers, char *buf, size_t len)
{
	const char *owners[2] = {c->project.id, c->user.id};
	const char *names[2] = {c->project.name, c->user.name};
	size_t at = 0;

	/* "project lab: GPU-hours 1.20 of 10.00; user ana: no limit" */
	for (int i = 0; i < 2 && at < len; i++) {
		struct cnl_ctl_usage u;
		struct limits l;
		int n;

		limits_of(c, owners[i], &l);
		cnl_ctl_usage_of(c->api->ctl, owners[i], &u);
		n = snprintf(buf + at, len - at, "%s%s %s: ", i ? "; " : "",
		             i ? "user" : "project", names[i]);
		if (n > 0)
			at += (size_t)n;
		if (at >= len)
			break;
		if (l.gpu_hours >= 0)
			n = snprintf(buf + at, len - at,
			             "GPU-hours %.2f of %.2f", u.gpu_hours,
			             l.gpu_hours);
		else
			n = snprintf(buf + at, len - at,
			             "GPU-hours %.2f, no limit", u.gpu_hours);
		if (n > 0)
			at += (size_t)n;
		if (servers && l.servers >= 0 && at < len) {
			n = snprintf(buf + at, len - at, ", servers %d of %.0f",
			             u.servers, l.servers);
			if (n > 0)
				at += (size_t)n;
		}
	}
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

static json_t *cluster_quotas(struct call *c, const char *project_id)
{
	json_t *a = cnl_ctl_cluster_quotas_json(c->api->ctl, project_id), *it;
	size_t i;

	json_array_foreach (a, i, it) {
		json_object_set_new(
		    it, "gpu_hours",
		    quota_item(
		        json_number_value(json_object_get(it, "used")),
		        json_number_value(json_object_get(it, "limit"))));
		json_object_del(it, "used");
		json_object_del(it, "limit");
	}
	return a;
}

void cnl_api_h_quota_show(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
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
		json_object_set_new(o, "clusters", cluster_quotas(c, p.id));
		json_object_set_new(o, "project", json_string(p.name));
		json_object_set_new(o, "project_id", json_string(p.id));
		json_array_append_new(projects, o);
	}
	o = quota_json(c, c->user.id);
	json_object_set_new(o, "user", json_string(c->user.name));
	cnl_http_reply(resp, 200,
	               json_pack("{s:o,s:o}", "projects", projects, "user", o));
}

/* PUT .../quota {"cluster", "gpu_hours"}: project @p's quota in one
 * cluster (null: none there). */
static void cluster_quota_set(struct call *c, const struct cnl_store_project *p,
                              json_t *body, struct cnl_http_response *resp)
{
	const char *cl = json_string_value(json_object_get(body, "cluster"));
	char id[CNL_STORE_DOC_ID_MAX];
	double gh = 0;
	bool none;
	json_t *o;
	int r;

	if (cnl_api_cluster_name(c, cl, resp) < 0)
		return;
	if (json_object_get(body, "storage_gb_days") ||
	    json_object_get(body, "concurrent_servers")) {
		cnl_api_bad(resp,
		            "field \"cluster\": only \"gpu_hours\" is set "
		            "per cluster");
		return;
	}
	if (!json_object_get(body, "gpu_hours")) {
		cnl_api_bad(resp, "field \"gpu_hours\": required with "
		                  "\"cluster\" (null removes it)");
		return;
	}
	if (get_limit(body, "gpu_hours", 1e9, &gh, &none, resp) < 0)
		return;
	snprintf(id, sizeof(id), "%s@%s", p->id, cl);
	snprintf(c->target, sizeof(c->target), "quota:%.64s", id);
	if (none) {
		r = cnl_store_doc_delete(c->api->store, "quota", id);
		if (r == -CNL_ENOTFOUND)
			r = 0;
	} else {
		o = json_pack("{s:f}", "gpu_hours", gh);
		r = cnl_api_doc_save(c, "quota", id, "", "", o, false);
		json_decref(o);
	}
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "quota");
		return;
	}
	cnl_ctl_cluster_quota(c->api->ctl, p->id, cl, none ? -1 : gh);
	cnl_ctl_kick(c->api->ctl);
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:o}", "project_id", p->id, "clusters",
	                         cluster_quotas(c, p->id)));
}

static void quota_set(struct call *c, const char *owner,
                      const struct cnl_store_project *project,
                      struct cnl_http_request *req,
                      struct cnl_http_response *resp)
{
	static const char *const fields[] = {"gpu_hours", "storage_gb_days",
	                                     "concurrent_servers", "cluster",
	                                     NULL};
	double gh = 0, gb = 0, sv = 0;
	bool n1, n2, n3;
	json_t *body, *o, *cur;
	int r;

	snprintf(c->target, sizeof(c->target), "quota:%s", owner);
	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (json_object_get(body, "cluster")) {
		if (!project)
			cnl_api_bad(resp, "field \"cluster\": a user's quota "
			                  "is not per cluster");
		else
			cluster_quota_set(c, project, body, resp);
		goto out;
	}
	if (get_limit(body, "gpu_hours", 1e9, &gh, &n1, resp) < 0 ||
	    get_limit(body, "storage_gb_days", 1e12, &gb, &n2, resp) < 0 ||
	    get_limit(body, "concurrent_servers", 1e6, &sv, &n3, resp) < 0)
		goto out;
	if (!n3 && sv != floor(sv)) {
		cnl_api_bad(resp,
		            "field \"concurrent_servers\": must be a whole "
		            "number");
		goto out;
	}
	o = json_pack("{s:o,s:o,s:o}", "gpu_hours",
	              n1 ? json_null() : json_real(gh), "storage_gb_days",
	              n2 ? json_null() : json_real(gb), "concurrent_servers",
	              n3 ? json_null() : json_integer((json_int_t)sv));
	/* A limit the body leaves out keeps its value (null removes it),
	 * so one limit can be changed alone. */
	if (cnl_api_doc_json(c->api->store, "quota", owner, &cur) == 0) {
		for (size_t i = 0; fields[i]; i++)
			if (!json_object_get(body, fields[i]) &&
			    json_object_get(cur, fields[i]))
				json_object_set(
				    o, fields[i],
				    json_object_get(cur, fields[i]));
		json_decref(cur);
	}
	r = cnl_api_doc_save(c, "quota", owner, "", "", o, false);
	json_decref(o);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "quota");
		goto out;
	}
	cnl_http_reply(resp, 200, quota_json(c, owner));
out:
	json_decref(body);
}

void cnl_api_h_project_quota_set(void *call, struct cnl_http_request *req,
                                 struct cnl_http_response *resp)
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
	quota_set(c, p.id, &p, req, resp);
}

void cnl_api_h_user_quota_set(void *call, struct cnl_http_request *req,
                              struct cnl_http_response *resp)
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
	quota_set(c, u.id, NULL, req, resp);
}

void cnl_api_h_project_usage(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
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

void cnl_api_quota_metrics(struct call *c, struct cnl_metrics_buf *b)
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
	/* The same as amounts, in base units: GPU-seconds, byte-seconds,
	 * servers; a limit only where one is set. */
	for (int k = 0; k < 2; k++) {
		if (k == 0)
			cnl_mb_family(b, "cnlab_quota_used", "gauge",
			              "Quota use by owner and resource "
			              "(gpu_seconds, storage_byte_seconds, "
			              "concurrent_servers).");
		else
			cnl_mb_family(b, "cnlab_quota_limit", "gauge",
			              "Quota limit by owner and resource (as "
			              "cnlab_quota_used).");
		for (int i = 0; i < n; i++) {
			static const char *const res[] = {
			    "gpu_seconds", "storage_byte_seconds",
			    "concurrent_servers"};
			const char *fam =
			    k ? "cnlab_quota_limit" : "cnlab_quota_used";
			const char *owner =
			    cnl_mb_escape(d[i].id, esc, sizeof(esc));
			json_t *o = json_loads(d[i].body, 0, NULL);
			struct cnl_ctl_usage u;
			struct limits l;
			double v[3][2];

			limits_from(o, &l);
			json_decref(o);
			cnl_ctl_usage_of(c->api->ctl, d[i].id, &u);
			v[0][0] = u.gpu_hours * 3600;
			v[0][1] = l.gpu_hours * 3600;
			v[1][0] = u.storage_gb_days * 1e9 * 86400;
			v[1][1] = l.storage_gb_days * 1e9 * 86400;
			v[2][0] = u.servers;
			v[2][1] = l.servers;
			for (int r = 0; r < 3; r++)
				if (v[r][1] > 0)
					cnl_mb_printf(
					    b,
					    "%s{owner=\"%s\",resource="
					    "\"%s\"} %.6g\n",
					    fam, owner, res[r], v[r][k]);
		}
	}
	cnl_store_docs_done(d, n);
	free(d);
}
