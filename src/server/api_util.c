/*
 * api_util.c - what the handlers share: strict request bodies and fields
 * that name the field when they are wrong, paging, the JSON of stored
 * objects, store errors turned into responses, documents, base64.
 */
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

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/json.h"
#include "common/label.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "common/base64.h"
#include "net/error.h"
#include "net/jwt.h"
#include "sched/sched.h"
#include "server/api-internal.h"
#include "server/auth.h"
#include "server/oidc.h"
#include "server/shape.h"

json_t *cnl_api_time_json(int64_t ms)
{
	char buf[CNL_TIME_RFC3339_MAX];

	if (cnl_time_format_rfc3339(ms, buf, sizeof(buf)) < 0)
		return json_null();
	return json_string(buf);
}

json_t *cnl_api_project_json(const struct cnl_store_project *p)
{
	return json_pack("{s:s,s:s,s:b,s:o}", "id", p->id, "name", p->name,
	                 "on_prem_only", p->on_prem_only, "created_at",
	                 cnl_api_time_json(p->created_ms));
}

json_t *cnl_api_user_json(const struct cnl_store_user *u)
{
	return json_pack("{s:s,s:s,s:o}", "id", u->id, "name", u->name,
	                 "created_at", cnl_api_time_json(u->created_ms));
}

/* A follower's: the leader's status as mirrored in the store. */
static int mirrored_status(struct call *c, const char *id,
                           struct cnl_wire_status *ret)
{
	char *text = NULL, err[128];
	json_t *j;
	int r;

	if ((r = cnl_store_live_get(c->st, id, &text)) < 0)
		return r;
	j = json_loads(text, 0, NULL);
	free(text);
	memset(ret, 0, sizeof(*ret));
	r = j && cnl_wire_status_decode(j, ret, err, sizeof(err)) == 0
	        ? 0
	        : -CNL_ENOTFOUND;
	json_decref(j);
	return r;
}

int cnl_api_live_status(struct call *c, const char *id,
                        struct cnl_wire_status *ret)
{
	if (c->api->follower)
		return mirrored_status(c, id, ret);
	if (c->unlocked)
		return cnl_ctl_facts_status(c->api->ctl, id, ret);
	return cnl_ctl_workload_status(c->api->ctl, id, ret);
}

/* Turn a store error into a response; @what names the object. */
void cnl_api_store_error(struct call *c, struct cnl_http_response *resp, int r,
                         const char *what)
{
	char q[CNL_LOG_QUOTE_MAX];

	switch (r) {
	case -CNL_ENOTFOUND:
		cnl_http_error(resp, 404, "not_found", "%s not found", what);
		return;
	case -CNL_EDUP:
		cnl_http_error(resp, 409, "conflict", "%s already exists",
		               what);
		return;
	case -CNL_EFIELD:
	case -CNL_ESIZE:
		cnl_http_error(resp, 400, "bad_request", "invalid %s: %s", what,
		               cnl_strerror(r));
		return;
	case -ENOSPC:
	case -EDQUOT: {
		/* The store's message names the file (sqlite_db.c); nothing
		 * was written, reads go on, and writes work again once space
		 * is freed. */
		json_t *body = cnl_http_error_body("insufficient_storage", "");
		/* A database server's address is the operator's business,
		 * not a tenant's: named in the log only. */
		const char *path =
		    strcmp(cnl_store_backend(c->st), "postgresql") == 0
		        ? "the database"
		        : cnl_store_path(c->st);

		cnl_log(CNL_LOG_ERROR, "storage full", "route=%s path=%s",
		        c->route->pattern, path);
		json_object_set_new(
		    json_object_get(body, "error"), "message",
		    json_sprintf("%s not stored: the storage of %s is full "
		                 "(%s); free space there and retry",
		                 what, path, strerror(-r)));
		json_object_set_new(json_object_get(body, "error"), "path",
		                    json_string(path));
		cnl_http_reply(resp, 507, body);
		return;
	}
	case -CNL_EFENCED:
		/* This cnlabd's lease ran out or was taken (leader.c): it
		 * no longer writes; another replica serves. */
		cnl_http_error(
		    resp, 503, "not_leader",
		    "%s: this cnlabd no longer leads; retry, another "
		    "replica takes over",
		    what);
		free(resp->headers);
		resp->headers = cnl_xstrdup("Retry-After: 1\r\n");
		return;
	case -ENOTCONN:
		/* The database server is out of reach (PostgreSQL down or
		 * restarting): nothing was stored; the next request
		 * reconnects. */
		cnl_log(CNL_LOG_ERROR, "store unreachable", "route=%s db=%s",
		        c->route->pattern,
		        cnl_log_quote(q, sizeof(q), cnl_store_errmsg(c->st)));
		cnl_http_error(resp, 503, "store_unavailable",
		               "%s: the database is unreachable; retry shortly",
		               what);
		free(resp->headers);
		resp->headers = cnl_xstrdup("Retry-After: 5\r\n");
		return;
	default:
		cnl_log(CNL_LOG_ERROR, "store error", "route=%s err=%s db=%s",
		        c->route->pattern, cnl_errname(r),
		        cnl_log_quote(q, sizeof(q), cnl_store_errmsg(c->st)));
		cnl_http_error(resp, 500, "internal", "internal error");
	}
}

void cnl_api_storage_full(struct cnl_http_response *resp, const char *path,
                          const char *fmt, ...)
{
	json_t *body = cnl_http_error_body("insufficient_storage", "");
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_object_set_new(
	    json_object_get(body, "error"), "message",
	    json_sprintf("%s (store: %s)", msg, path ? path : "-"));
	json_object_set_new(json_object_get(body, "error"), "path",
	                    path ? json_string(path) : json_null());
	cnl_http_reply(resp, 507, body);
}

/*
 * Admission: refuse at once, with 422, work that no registered node could
 * ever run (ctl_admit.c says what counts), naming the reason and listing
 * the kinds of node that exist.  0 when it may be stored, else -1 with the
 * answer in @resp.
 */
int cnl_api_feasible(struct call *c, const char *shape, const char *run,
                     bool server, struct cnl_http_response *resp)
{
	char why[256];
	json_t *body;
	int r = cnl_ctl_feasible(c->api->ctl, c->project.id, shape, run, server,
	                         why, sizeof(why));

	if (r != -CNL_ENOSPACE)
		return 0; /* a bad shape is answered by its own check */
	body = cnl_http_error_body("unsatisfiable", "");
	json_object_set_new(
	    json_object_get(body, "error"), "message",
	    json_sprintf("no registered node could ever run this %s: %s",
	                 server ? "server" : "job", why));
	json_object_set_new(json_object_get(body, "error"), "reason",
	                    json_string(why));
	json_object_set_new(json_object_get(body, "error"), "shapes",
	                    cnl_ctl_shapes_json(c->api->ctl));
	cnl_http_reply(resp, 422, body);
	return -1;
}

/*
 * The body as a JSON object with only @allowed keys, or NULL with @err
 * saying why: what cnl_api_parse_body() and cnl_api_peek_body() share.
 */
static json_t *body_object(struct cnl_http_request *req,
                           const char *const allowed[], char *err,
                           size_t errlen)
{
	char why[200];
	json_t *j = NULL;

	if (req->body_len == 0 || !req->body) {
		snprintf(err, errlen, "request body must be a JSON object");
		return NULL;
	}
	if (strlen(req->body) != req->body_len) {
		snprintf(err, errlen, "request body contains a NUL byte");
		return NULL;
	}
	if (cnl_json_loads(req->body, &j, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "malformed JSON: %s", why);
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		snprintf(err, errlen, "request body must be a JSON object");
		return NULL;
	}
	if (allowed && cnl_json_check_fields(j, allowed, err, errlen) < 0) {
		json_decref(j);
		return NULL;
	}
	return j;
}

/*
 * Parse the body as a JSON object with only @allowed keys.  Returns the
 * object, or NULL with a 400 in @resp.
 */
json_t *cnl_api_parse_body(struct cnl_http_request *req,
                           struct cnl_http_response *resp,
                           const char *const allowed[])
{
	char err[256];
	json_t *j = body_object(req, allowed, err, sizeof(err));

	if (!j)
		cnl_http_error(resp, 400, "bad_request", "%s", err);
	return j;
}

json_t *cnl_api_peek_body(struct cnl_http_request *req,
                          const char *const allowed[])
{
	char err[256];

	return body_object(req, allowed, err, sizeof(err));
}

/* A required string field of 1..@max-1 bytes, or a 400 naming it. */
const char *cnl_api_get_string(json_t *j, const char *key, size_t max,
                               struct cnl_http_response *resp)
{
	const char *v = NULL;
	char err[256];

	if (cnl_json_get_string(j, key, true, &v, err, sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		return NULL;
	}
	if (v[0] == '\0' || strlen(v) >= max) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"%s\": must be 1..%zu bytes", key,
		               max - 1);
		return NULL;
	}
	return v;
}

_Static_assert(CNL_JWT_NAME_MAX == CNL_STORE_NAME_MAX,
               "user and project names are one rule (net/jwt.h)");

/* Names of users and projects: 1..63 of [A-Za-z0-9._-], not starting '.'. */
bool cnl_api_valid_name(const char *s)
{
	return cnl_jwt_name_valid(s);
}

const char *cnl_api_get_name(json_t *j, const char *key,
                             struct cnl_http_response *resp)
{
	const char *v = cnl_api_get_string(j, key, CNL_STORE_NAME_MAX, resp);

	if (v && !cnl_api_valid_name(v)) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"%s\": must be 1..63 characters of "
		               "A-Z a-z 0-9 . _ -, not starting with . or -",
		               key);
		return NULL;
	}
	return v;
}

/*
 * Read ?limit= and ?after= into @ret_limit and @ret_after.  Returns 0 or
 * -1 with a 400 in @resp.
 */
int cnl_api_get_page(struct cnl_http_request *req,
                     struct cnl_http_response *resp, int *ret_limit,
                     const char **ret_after)
{
	const char *l = cnl_http_query(req, "limit");
	const char *a = cnl_http_query(req, "after");
	long v = CNL_API_PAGE_DEFAULT;

	if (l) {
		char *end;

		errno = 0;
		v = strtol(l, &end, 10);
		if (errno || end == l || *end || v < CNL_STORE_LIST_MIN ||
		    v > CNL_STORE_LIST_MAX) {
			cnl_http_error(resp, 400, "bad_request",
			               "query \"limit\": must be an integer in "
			               "%d..%d",
			               CNL_STORE_LIST_MIN, CNL_STORE_LIST_MAX);
			return -1;
		}
	}
	/* An id is printable ASCII: anything else is refused here, the
	 * same on every store (PostgreSQL would refuse bytes that are not
	 * UTF-8 itself, SQLite would page past them). */
	for (const char *p = a; p && *p; p++)
		if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
			a = "";
	if (a && (a[0] == '\0' || strlen(a) >= CNL_ID_MAX)) {
		cnl_http_error(resp, 400, "bad_request",
		               "query \"after\": must be an id");
		return -1;
	}
	*ret_limit = (int)v;
	*ret_after = a;
	return 0;
}

/* {"items": @items, "next": last id when the page is full, else null}. */
json_t *cnl_api_page_json(json_t *items, int n, int limit, const char *last)
{
	return json_pack("{s:o,s:o}", "items", items, "next",
	                 n == limit && last ? json_string(last) : json_null());
}

int cnl_api_new_id(struct call *c, const char *prefix, char *buf)
{
	return cnl_id_new(&c->api->ids, prefix, c->now_ms, buf, CNL_ID_MAX);
}

void cnl_api_doc_page(struct call *c, struct cnl_http_request *req,
                      struct cnl_http_response *resp, const char *kind,
                      const char *parent, const char *what,
                      json_t *(*item)(struct call *c,
                                      const struct cnl_store_doc *d,
                                      json_t *body))
{
	struct cnl_store_doc *d;
	const char *after;
	int limit, n = 0, r;
	json_t *items;

	if (cnl_api_get_page(req, resp, &limit, &after) < 0)
		return;
	d = cnl_xcalloc((size_t)limit, sizeof(*d));
	r = cnl_store_doc_list(c->st, kind, parent, after, limit, d, &n);
	if (r < 0) {
		free(d);
		cnl_api_store_error(c, resp, r, what);
		return;
	}
	items = json_array();
	for (int i = 0; i < n; i++) {
		json_t *o = json_loads(d[i].body, 0, NULL);

		if (o)
			json_array_append_new(items, item(c, &d[i], o));
		json_decref(o);
	}
	cnl_http_reply(
	    resp, 200,
	    cnl_api_page_json(items, n, limit, n ? d[n - 1].id : NULL));
	cnl_store_docs_done(d, n);
	free(d);
}

/* The Idempotency-Key header: NULL, or 1..127 printable ASCII bytes. */
int cnl_api_get_idem_key(struct cnl_http_request *req,
                         struct cnl_http_response *resp, const char **ret)
{
	const char *k = cnl_http_header(req, "Idempotency-Key");
	size_t n;

	*ret = NULL;
	if (!k)
		return 0;
	n = strlen(k);
	for (size_t i = 0; i < n; i++)
		if (k[i] < 0x21 || k[i] > 0x7e)
			n = 0;
	if (n == 0 || n >= CNL_STORE_IDEM_MAX) {
		cnl_http_error(resp, 400, "bad_request",
		               "header \"Idempotency-Key\": must be 1..%d "
		               "printable characters",
		               CNL_STORE_IDEM_MAX - 1);
		return -1;
	}
	*ret = k;
	return 0;
}

void cnl_api_bad(struct cnl_http_response *resp, const char *err)
{
	cnl_http_error(resp, 400, "bad_request", "%s", err);
}

/* Load document @kind/@id as JSON into *@ret: 0, or a store error. */
int cnl_api_doc_json(struct cnl_store *s, const char *kind, const char *id,
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
int cnl_api_doc_save(struct call *c, const char *kind, const char *id,
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

/*
 * After an idempotent create (@r from the store) of object @id in
 * @project: names it in the audit, and refuses a key that replayed an
 * object of another project (the same key used for another request).
 * 0, or -1 with a 409 in @resp.
 */
int cnl_api_created_here(struct call *c, struct cnl_http_response *resp, int r,
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

/* The user the path's {user} names, by id or by name: 0 or a 404. */
int cnl_api_path_user(struct call *c, struct cnl_http_request *req,
                      struct cnl_http_response *resp,
                      struct cnl_store_user *ret)
{
	const char *key = cnl_http_param(req, "user");
	int r = cnl_store_user_get(c->api->store, key, ret);

	if (r == -CNL_ENOTFOUND || r == -CNL_EFIELD || r == -CNL_ESIZE)
		r = cnl_store_user_get_by_name(c->api->store, key, ret);
	if (r == -CNL_EFIELD || r == -CNL_ESIZE)
		r = -CNL_ENOTFOUND;
	if (r < 0)
		cnl_api_store_error(c, resp, r, "user");
	return r;
}

/* viewer 1, member 2, project-admin 3 ("admin" counts as 3 in a project). */
int cnl_api_role_rank(const char *role)
{
	if (strcmp(role, "viewer") == 0)
		return 1;
	if (strcmp(role, "member") == 0)
		return 2;
	if (strcmp(role, "project-admin") == 0 || strcmp(role, "admin") == 0)
		return 3;
	return 0;
}

void cnl_api_audit_as(struct cnl_api *api, const char *actor,
                      const char *action, const char *target, int64_t now,
                      const char *fmt, ...)
{
	struct cnl_store_audit a = {0};
	va_list ap;

	a.ts_ms = now;
	snprintf(a.actor, sizeof(a.actor), "%s", actor);
	snprintf(a.action, sizeof(a.action), "%s", action);
	snprintf(a.target, sizeof(a.target), "%s", target);
	va_start(ap, fmt);
	vsnprintf(a.result, sizeof(a.result), fmt, ap);
	va_end(ap);
	if (cnl_store_audit_append(api->store, &a, NULL) < 0)
		cnl_log(CNL_LOG_ERROR, "cannot audit", "actor=%s action=%s",
		        actor, action);
	cnl_log(CNL_LOG_INFO, actor, "action=%s target=%s %s", action, target,
	        a.result);
}

bool cnl_api_printable(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] > '~')
			return false;
	return true;
}
