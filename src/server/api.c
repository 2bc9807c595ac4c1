/*
 * api.c - the /v1 route table, its handlers and the authentication, RBAC
 * and audit steps in front of them (see api.h for the policy).
 *
 * The route table at the bottom is the one place that says who may call
 * what: each row names its permission, and cnl_api_start() refuses to serve
 * a table with a row that does not.  Handlers never check roles themselves,
 * except for the one rule a row cannot express (memberships of the system
 * project and the "admin" role are for administrators only).
 *
 * Each request gets a struct call on the stack of cnl_api_serve(): the
 * authenticated user, whether they administer the platform, the project
 * the path resolved to, and the audit target and note the handler sets.
 */
#include <errno.h>
#include <inttypes.h>
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
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "server/api-internal.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/oidc.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

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
	default:
		cnl_log(CNL_LOG_ERROR, "store error", "route=%s err=%s db=%s",
		        c->route->pattern, cnl_errname(r),
		        cnl_log_quote(q, sizeof(q),
		                      cnl_store_errmsg(c->api->store)));
		cnl_http_error(resp, 500, "internal", "internal error");
	}
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
	json_t *j = NULL;

	if (req->body_len == 0) {
		cnl_http_error(resp, 400, "bad_request",
		               "request body must be a JSON object");
		return NULL;
	}
	if (strlen(req->body) != req->body_len) {
		cnl_http_error(resp, 400, "bad_request",
		               "request body contains a NUL byte");
		return NULL;
	}
	if (cnl_json_loads(req->body, &j, err, sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "malformed JSON: %s",
		               err);
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		cnl_http_error(resp, 400, "bad_request",
		               "request body must be a JSON object");
		return NULL;
	}
	if (allowed &&
	    cnl_json_check_fields(j, allowed, err, sizeof(err)) < 0) {
		json_decref(j);
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		return NULL;
	}
	return j;
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

/* Names of users and projects: 1..63 of [A-Za-z0-9._-], not starting '.'. */
bool cnl_api_valid_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= CNL_STORE_NAME_MAX || s[0] == '.' || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
		      ch == '-'))
			return false;
	}
	return true;
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
	r = cnl_store_doc_list(c->api->store, kind, parent, after, limit, d,
	                       &n);
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

/* ------------------------------------------------------------------------ */
/* Roles                                                                    */
/* ------------------------------------------------------------------------ */

/* viewer 1, member 2, project-admin 3 ("admin" counts as 3 in a project). */
static int role_rank(const char *role)
{
	if (strcmp(role, "viewer") == 0)
		return 1;
	if (strcmp(role, "member") == 0)
		return 2;
	if (strcmp(role, "project-admin") == 0 || strcmp(role, "admin") == 0)
		return 3;
	return 0;
}

static int perm_rank(enum cnl_http_perm p)
{
	switch (p) {
	case CNL_PERM_PROJECT_VIEW:
		return 1;
	case CNL_PERM_PROJECT_MEMBER:
		return 2;
	case CNL_PERM_PROJECT_ADMIN:
		return 3;
	default:
		return 0;
	}
}

/*
 * The role of @user_id in the system project ("admin", "agent", ...) in
 * @role, "" when none: 0 or an error.
 */
static int system_role(struct cnl_store *s, const char *user_id, char *role,
                       size_t len)
{
	struct cnl_store_project sys;
	int r;

	role[0] = '\0';
	r = cnl_store_project_get_by_name(s, CNL_API_ADMIN_PROJECT, &sys);
	if (r == -CNL_ENOTFOUND)
		return 0;
	if (r < 0)
		return r;
	r = cnl_store_membership_get_role(s, user_id, sys.id, role, len);
	if (r == -CNL_ENOTFOUND) {
		role[0] = '\0';
		return 0;
	}
	return r;
}

/* ------------------------------------------------------------------------ */
/* Authentication and authorization                                         */
/* ------------------------------------------------------------------------ */

/*
 * Who a bearer credential names: an API token ("cnl_..."), an OIDC ID
 * token (RS256, when configured), or one of our HS256 JWTs.  Sets
 * c->user; returns 0, or -1 with a 401 (or 500) in @resp.
 */
static int identify(struct call *c, const char *h,
                    struct cnl_http_response *resp)
{
	struct cnl_store *s = c->api->store;
	struct cnl_auth_claims claims;
	char digest[CNL_AUTH_DIGEST_MAX], err[256];
	int r;

	if (strncmp(h, CNL_AUTH_TOKEN_PREFIX, strlen(CNL_AUTH_TOKEN_PREFIX)) ==
	    0) {
		struct cnl_store_doc d = {0};
		json_t *o;
		int64_t exp = 0;

		if (cnl_auth_token_check(h) < 0 ||
		    cnl_auth_token_digest(h, digest) < 0 ||
		    cnl_store_doc_get(s, "token", digest, &d) < 0)
			goto refuse;
		o = json_loads(d.body, 0, NULL);
		exp = json_integer_value(json_object_get(o, "expires_ms"));
		snprintf(claims.sub, sizeof(claims.sub), "%s",
		         json_string_value(json_object_get(o, "user_id"))
		             ? json_string_value(json_object_get(o, "user_id"))
		             : "");
		json_decref(o);
		cnl_store_doc_done(&d);
		if (exp && exp <= c->now_ms)
			goto refuse;
		r = cnl_store_user_get(s, claims.sub, &c->user);
	} else if (c->api->oidc && cnl_oidc_looks_like(h)) {
		struct cnl_oidc_identity id;

		/* Verification may fetch keys: not under the big lock. */
		pthread_mutex_unlock(&c->api->mu);
		r = cnl_oidc_verify(c->api->oidc, h, c->now_ms / 1000, &id, err,
		                    sizeof(err));
		pthread_mutex_lock(&c->api->mu);
		if (r < 0) {
			cnl_log(CNL_LOG_INFO, "OIDC token refused", "why=%s",
			        err);
			goto refuse;
		}
		r = cnl_store_user_get_by_name(s, id.username, &c->user);
	} else {
		if (cnl_auth_jwt_verify(h, c->api->key, c->api->keylen,
		                        CNL_API_AUDIENCE, c->now_ms / 1000,
		                        &claims) < 0)
			goto refuse;
		r = cnl_store_user_get(s, claims.sub, &c->user);
	}
	if (r == -CNL_ENOTFOUND || r == -CNL_EFIELD || r == -CNL_ESIZE)
		goto refuse;
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "user");
		return -1;
	}
	return 0;
refuse:
	cnl_http_error(resp, 401, "unauthenticated",
	               "invalid or expired token");
	return -1;
}

/* Returns 0, or -1 with a 401 (or 500) in @resp. */
static int authenticate(struct call *c, struct cnl_http_request *req,
                        struct cnl_http_response *resp)
{
	const char *h = cnl_http_header(req, "Authorization");
	char role[CNL_STORE_ROLE_MAX];
	int r;

	if (!h || strncasecmp(h, "Bearer ", 7) != 0) {
		cnl_http_error(resp, 401, "unauthenticated",
		               "missing bearer token: log in first");
		return -1;
	}
	h += 7;
	while (*h == ' ')
		h++;
	if (identify(c, h, resp) < 0)
		return -1;
	if ((r = system_role(c->api->store, c->user.id, role, sizeof(role))) <
	    0) {
		cnl_api_store_error(c, resp, r, "user");
		return -1;
	}
	c->is_admin = strcmp(role, "admin") == 0;
	c->is_agent = strcmp(role, "agent") == 0;
	c->authed = true;
	snprintf(c->actor, sizeof(c->actor), "%s", c->user.id);
	return 0;
}

/*
 * Resolve the project the path names and check the caller's role in it.
 * Returns 0, or -1 with 403/404 in @resp.
 */
static int authorize_project(struct call *c, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	const char *pid = cnl_http_param(req, "project");
	const char *jid = cnl_http_param(req, "job");
	const char *sid = cnl_http_param(req, "server");
	const char *what = pid ? "project" : jid ? "job" : "server";
	char role[CNL_STORE_ROLE_MAX];
	int r;

	if (jid) {
		r = cnl_store_job_get(c->api->store, jid, &c->job);
		if (r < 0)
			goto fail;
		c->have_job = true;
		pid = c->job.project_id;
	}
	if (sid) {
		r = cnl_store_server_get(c->api->store, sid, &c->server);
		if (r < 0)
			goto fail;
		c->have_server = true;
		pid = c->server.project_id;
	}
	if (!pid) {
		cnl_http_error(resp, 500, "internal", "route names no project");
		return -1;
	}
	r = cnl_store_project_get(c->api->store, pid, &c->project);
	if (r < 0)
		goto fail;
	c->have_project = true;
	if (c->is_admin)
		return 0;
	r = cnl_store_membership_get_role(c->api->store, c->user.id,
	                                  c->project.id, role, sizeof(role));
	if (r < 0)
		goto fail; /* not a member: as if it did not exist */
	snprintf(c->role, sizeof(c->role), "%s", role);
	if (role_rank(role) < perm_rank(c->route->perm)) {
		cnl_http_error(
		    resp, 403, "forbidden",
		    "role \"%s\" in this project does not allow this", role);
		return -1;
	}
	return 0;
fail:
	if (r == -CNL_ENOTFOUND || r == -CNL_EFIELD || r == -CNL_ESIZE)
		cnl_http_error(resp, 404, "not_found", "%s not found", what);
	else
		cnl_api_store_error(c, resp, r, what);
	return -1;
}

static int authorize(struct call *c, struct cnl_http_request *req,
                     struct cnl_http_response *resp)
{
	switch (c->route->perm) {
	case CNL_PERM_PUBLIC:
		return 0;
	case CNL_PERM_AUTHENTICATED:
		return authenticate(c, req, resp);
	case CNL_PERM_ADMIN:
		if (authenticate(c, req, resp) < 0)
			return -1;
		if (!c->is_admin) {
			cnl_http_error(resp, 403, "forbidden",
			               "only administrators may do this");
			return -1;
		}
		return 0;
	case CNL_PERM_AGENT:
		if (authenticate(c, req, resp) < 0)
			return -1;
		if (!c->is_admin && !c->is_agent) {
			cnl_http_error(resp, 403, "forbidden",
			               "only node agents may do this");
			return -1;
		}
		return 0;
	case CNL_PERM_PROJECT_VIEW:
	case CNL_PERM_PROJECT_MEMBER:
	case CNL_PERM_PROJECT_ADMIN:
		if (authenticate(c, req, resp) < 0)
			return -1;
		return authorize_project(c, req, resp);
	default:
		/* cnl_api_start() refuses such tables; never serve one. */
		cnl_http_error(resp, 500, "internal",
		               "route has no permission");
		return -1;
	}
}

/* ------------------------------------------------------------------------ */
/* Handlers                                                                 */
/* ------------------------------------------------------------------------ */

static void h_healthz(void *call, struct cnl_http_request *req,
                      struct cnl_http_response *resp)
{
	cnl_http_reply(resp, 200, json_pack("{s:s}", "status", "ok"));
}

void cnl_api_session_reply(struct call *c, const struct cnl_store_user *u,
                           struct cnl_http_response *resp)
{
	struct cnl_auth_claims claims = {0};
	char token[CNL_AUTH_JWT_MAX + 1];

	snprintf(claims.sub, sizeof(claims.sub), "%s", u->id);
	snprintf(claims.aud, sizeof(claims.aud), "%s", CNL_API_AUDIENCE);
	snprintf(claims.iss, sizeof(claims.iss), "%s", CNL_API_ISSUER);
	claims.iat = c->now_ms / 1000;
	claims.exp = claims.iat + CNL_API_TOKEN_TTL_S;
	if (cnl_auth_jwt_sign(&claims, c->api->key, c->api->keylen, token,
	                      sizeof(token)) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot sign token");
		return;
	}
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:o,s:s}", "token", token, "expires_at",
	                         cnl_api_time_json(claims.exp * 1000), "user",
	                         u->name));
}

static void h_login(void *call, struct cnl_http_request *req,
                    struct cnl_http_response *resp)
{
	static const char *const fields[] = {"user", "password", NULL};
	struct call *c = call;
	struct cnl_store_user u;
	const char *name, *password;
	json_t *body;
	char err[256];
	int r, found;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (cnl_json_get_string(body, "user", true, &name, err, sizeof(err)) <
	        0 ||
	    cnl_json_get_string(body, "password", true, &password, err,
	                        sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		goto out;
	}
	snprintf(c->actor, sizeof(c->actor), "%s", name);
	snprintf(c->target, sizeof(c->target), "%s", name);
	found = strlen(name) < CNL_STORE_NAME_MAX && name[0] &&
	        cnl_store_user_get_by_name(c->api->store, name, &u) == 0 &&
	        u.password_hash[0]; /* invited, not yet redeemed: none */
	/* Unknown users cost one scrypt too and get the same answer.  The
	 * hash takes ~0.1 s: other requests go on meanwhile. */
	pthread_mutex_unlock(&c->api->mu);
	r = cnl_auth_password_verify(password, found ? u.password_hash
	                                             : c->api->dummy_hash);
	pthread_mutex_lock(&c->api->mu);
	if (!found || r < 0) {
		cnl_http_error(resp, 401, "unauthenticated",
		               "invalid user name or password");
		goto out;
	}
	snprintf(c->actor, sizeof(c->actor), "%s", u.id);
	snprintf(c->target, sizeof(c->target), "%s", u.id);
	cnl_api_session_reply(c, &u, resp);
out:
	json_decref(body);
}

static void h_projects_list(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store *s = c->api->store;
	const char *after, *last = NULL;
	int limit, n = 0, r;
	json_t *items;

	if (cnl_api_get_page(req, resp, &limit, &after) < 0)
		return;
	items = json_array();
	if (c->is_admin) {
		struct cnl_store_project *p =
		    cnl_xcalloc((size_t)limit, sizeof(*p));

		r = cnl_store_project_list(s, after, limit, p, &n);
		for (int i = 0; r == 0 && i < n; i++)
			json_array_append_new(items,
			                      cnl_api_project_json(&p[i]));
		if (r == 0 && n)
			last = json_string_value(json_object_get(
			    json_array_get(items, (size_t)n - 1), "id"));
		free(p);
	} else {
		struct cnl_store_membership *m =
		    cnl_xcalloc((size_t)limit, sizeof(*m));
		struct cnl_store_project p;

		r = cnl_store_membership_list(s, c->user.id, after, limit, m,
		                              &n);
		for (int i = 0; r == 0 && i < n; i++) {
			r = cnl_store_project_get(s, m[i].project_id, &p);
			if (r == 0)
				json_array_append_new(items,
				                      cnl_api_project_json(&p));
		}
		if (r == 0 && n)
			last = json_string_value(json_object_get(
			    json_array_get(items, (size_t)n - 1), "id"));
		free(m);
	}
	if (r < 0) {
		json_decref(items);
		cnl_api_store_error(c, resp, r, "project");
		return;
	}
	json_incref(items);
	cnl_http_reply(resp, 200, cnl_api_page_json(items, n, limit, last));
	json_decref(items);
}

static void h_projects_create(void *call, struct cnl_http_request *req,
                              struct cnl_http_response *resp)
{
	static const char *const fields[] = {"name", "on_prem_only", NULL};
	struct call *c = call;
	struct cnl_store_project p = {0};
	const char *name;
	json_t *body;
	char err[256];
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(name = cnl_api_get_name(body, "name", resp)))
		goto out;
	if (cnl_json_get_bool(body, "on_prem_only", false, &p.on_prem_only, err,
	                      sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "%s", name);
	if (cnl_api_new_id(c, "prj", p.id) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot make an id");
		goto out;
	}
	snprintf(p.name, sizeof(p.name), "%s", name);
	p.created_ms = c->now_ms;
	if ((r = cnl_store_project_create(c->api->store, &p)) < 0) {
		cnl_api_store_error(c, resp, r, "project");
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "%s", p.id);
	cnl_http_reply(resp, 201, cnl_api_project_json(&p));
out:
	json_decref(body);
}

static void h_members_set(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	static const char *const fields[] = {"user", "role", NULL};
	struct call *c = call;
	struct cnl_store_membership m = {0};
	struct cnl_store_user u;
	bool system = strcmp(c->project.name, CNL_API_ADMIN_PROJECT) == 0;
	const char *name, *role;
	json_t *body;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(name = cnl_api_get_name(body, "user", resp)) ||
	    !(role =
	          cnl_api_get_string(body, "role", CNL_STORE_ROLE_MAX, resp)))
		goto out;
	if (role_rank(role) == 0 && strcmp(role, "agent") != 0) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"role\": must be viewer, member, "
		               "project-admin, admin or agent");
		goto out;
	}
	if (system && !c->is_admin) {
		cnl_http_error(resp, 403, "forbidden",
		               "only administrators manage the %s project",
		               CNL_API_ADMIN_PROJECT);
		goto out;
	}
	if ((strcmp(role, "admin") == 0 || strcmp(role, "agent") == 0) &&
	    !system) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"role\": \"%s\" is granted only in "
		               "the %s project",
		               role, CNL_API_ADMIN_PROJECT);
		goto out;
	}
	if ((r = cnl_store_user_get_by_name(c->api->store, name, &u)) < 0) {
		cnl_api_store_error(c, resp, r, "user");
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "%s:%s", c->project.id, u.id);
	/* As with removal: an administrator giving up their own admin role
	 * could leave the platform with none. */
	if (system && strcmp(u.id, c->user.id) == 0 &&
	    strcmp(role, "admin") != 0) {
		cnl_http_error(resp, 409, "conflict",
		               "administrators cannot change their own role "
		               "in the %s project",
		               CNL_API_ADMIN_PROJECT);
		goto out;
	}
	memcpy(m.user_id, u.id, sizeof(m.user_id));
	memcpy(m.project_id, c->project.id, sizeof(m.project_id));
	snprintf(m.role, sizeof(m.role), "%s", role);
	if ((r = cnl_store_membership_set(c->api->store, &m)) < 0) {
		cnl_api_store_error(c, resp, r, "membership");
		goto out;
	}
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:s,s:s,s:s}", "project_id",
	                         m.project_id, "user_id", m.user_id, "user",
	                         u.name, "role", m.role));
out:
	json_decref(body);
}

static void h_users_create(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	static const char *const fields[] = {"name", "password", "invite",
	                                     NULL};
	struct call *c = call;
	struct cnl_store_user u = {0};
	const char *name, *password = NULL;
	char token[CNL_AUTH_TOKEN_MAX], err[256];
	bool invite = false;
	int64_t exp = 0;
	json_t *body, *o;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(name = cnl_api_get_name(body, "name", resp)))
		goto out;
	if (cnl_json_get_bool(body, "invite", false, &invite, err,
	                      sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		goto out;
	}
	if (invite == !!json_object_get(body, "password")) {
		cnl_http_error(resp, 400, "bad_request",
		               "give exactly one of \"password\" and "
		               "\"invite\": true (a one-time invitation the "
		               "user redeems at cnlab login)");
		goto out;
	}
	if (!invite &&
	    !(password = cnl_api_get_string(body, "password",
	                                    CNL_AUTH_PASSWORD_MAX + 1, resp)))
		goto out;
	snprintf(c->target, sizeof(c->target), "%s", name);
	r = 0;
	if (password) {
		pthread_mutex_unlock(&c->api->mu);
		r = cnl_auth_password_hash_cost(password, c->api->scrypt_ln,
		                                u.password_hash,
		                                sizeof(u.password_hash));
		pthread_mutex_lock(&c->api->mu);
	}
	if (r < 0 || cnl_api_new_id(c, "usr", u.id) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot create user");
		goto out;
	}
	snprintf(u.name, sizeof(u.name), "%s", name);
	u.created_ms = c->now_ms;
	/* The user and the invitation, together. */
	if ((r = cnl_store_tx_begin(c->api->store)) == 0) {
		r = cnl_store_user_create(c->api->store, &u);
		if (r == 0 && invite)
			r = cnl_api_invite_issue(c->api->store, u.id, c->now_ms,
			                         token, &exp);
		if (r == 0)
			r = cnl_store_tx_commit(c->api->store);
		if (r < 0)
			cnl_store_tx_rollback(c->api->store);
	}
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "user");
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "%s", u.id);
	o = cnl_api_user_json(&u);
	if (invite) {
		json_object_set_new(o, "invite",
		                    cnl_api_invite_json(token, exp));
		explicit_bzero(token, sizeof(token));
	}
	cnl_http_reply(resp, 201, o);
out:
	json_decref(body);
}

static void h_whoami(void *call, struct cnl_http_request *req,
                     struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store_membership m[CNL_STORE_LIST_MAX];
	struct cnl_store_project p;
	json_t *o = cnl_api_user_json(&c->user), *list = json_array();
	int n = 0;

	if (cnl_store_membership_list(c->api->store, c->user.id, NULL,
	                              CNL_STORE_LIST_MAX, m, &n) == 0)
		for (int i = 0; i < n; i++)
			if (cnl_store_project_get(c->api->store,
			                          m[i].project_id, &p) == 0)
				json_array_append_new(
				    list,
				    json_pack("{s:s,s:s,s:s}", "project_id",
				              p.id, "project", p.name, "role",
				              m[i].role));
	json_object_set_new(o, "admin", json_boolean(c->is_admin));
	json_object_set_new(o, "memberships", list);
	cnl_http_reply(resp, 200, o);
}

/* API tokens: stored under the SHA-256 of the secret, which is shown once. */
int cnl_api_token_issue(struct cnl_store *s, const char *user_id,
                        const char *name, int64_t expires_ms, int64_t now_ms,
                        char *ret_token, char *ret_id)
{
	struct cnl_store_doc d = {0};
	char token[CNL_AUTH_TOKEN_MAX], digest[CNL_AUTH_DIGEST_MAX];
	json_t *o;
	int r;

	if (cnl_auth_token_new(token, sizeof(token)) < 0 ||
	    cnl_auth_token_digest(token, digest) < 0)
		return -EIO;
	snprintf(d.kind, sizeof(d.kind), "token");
	snprintf(d.id, sizeof(d.id), "%s", digest);
	snprintf(d.parent, sizeof(d.parent), "%s", user_id);
	snprintf(d.name, sizeof(d.name), "%s", name);
	o = json_pack("{s:s,s:s,s:I,s:I}", "user_id", user_id, "name", name,
	              "created_ms", (json_int_t)now_ms, "expires_ms",
	              (json_int_t)expires_ms);
	d.body = json_dumps(o, JSON_COMPACT);
	d.updated_ms = now_ms;
	json_decref(o);
	r = d.body ? cnl_store_doc_put(s, &d, true) : -ENOMEM;
	free(d.body);
	if (r == 0) {
		memcpy(ret_token, token, CNL_AUTH_TOKEN_MAX);
		memcpy(ret_id, digest, CNL_AUTH_DIGEST_MAX);
	}
	explicit_bzero(token, sizeof(token));
	return r;
}

static void h_tokens_create(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	static const char *const fields[] = {"name", "expires_in_days", NULL};
	struct call *c = call;
	char token[CNL_AUTH_TOKEN_MAX], digest[CNL_AUTH_DIGEST_MAX], err[256];
	const char *name;
	int64_t days = 90, exp;
	json_t *body;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(name = cnl_api_get_name(body, "name", resp)))
		goto out;
	if (cnl_json_get_int(body, "expires_in_days", false, 0, 3650, &days,
	                     err, sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		goto out;
	}
	exp = days ? c->now_ms + days * 86400000 : 0;
	r = cnl_api_token_issue(c->api->store, c->user.id, name, exp, c->now_ms,
	                        token, digest);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "token");
		goto out;
	}
	/* The audit names the token by the first 12 hex of its digest. */
	snprintf(c->target, sizeof(c->target), "token:%.12s", digest);
	cnl_http_reply(resp, 201,
	               json_pack("{s:s,s:s,s:s,s:o}", "id", digest, "name",
	                         name, "token", token, "expires_at",
	                         exp ? cnl_api_time_json(exp) : json_null()));
	explicit_bzero(token, sizeof(token));
out:
	json_decref(body);
}

static json_t *token_item(struct call *c, const struct cnl_store_doc *d,
                          json_t *body)
{
	int64_t exp = json_integer_value(json_object_get(body, "expires_ms"));

	return json_pack("{s:s,s:s,s:o,s:o}", "id", d->id, "name", d->name,
	                 "created_at", cnl_api_time_json(d->updated_ms),
	                 "expires_at",
	                 exp ? cnl_api_time_json(exp) : json_null());
}

static void h_tokens_list(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct call *c = call;

	cnl_api_doc_page(c, req, resp, "token", c->user.id, "token",
	                 token_item);
}

static void h_token_revoke(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *id = cnl_http_param(req, "token");
	struct cnl_store_doc d = {0};
	int r;

	snprintf(c->target, sizeof(c->target), "token:%.12s", id);
	r = cnl_store_doc_get(c->api->store, "token", id, &d);
	/* Someone else's token is as absent as a missing one. */
	if (r == 0 && strcmp(d.parent, c->user.id) != 0 && !c->is_admin)
		r = -CNL_ENOTFOUND;
	cnl_store_doc_done(&d);
	if (r == 0)
		r = cnl_store_doc_delete(c->api->store, "token", id);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "token");
		return;
	}
	cnl_http_reply(resp, 200, json_pack("{s:s}", "revoked", id));
}

static void h_users_list(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store_user *u;
	const char *after;
	int limit, n = 0, r;
	json_t *items;

	if (cnl_api_get_page(req, resp, &limit, &after) < 0)
		return;
	u = cnl_xcalloc((size_t)limit, sizeof(*u));
	if ((r = cnl_store_user_list(c->api->store, after, limit, u, &n)) < 0) {
		free(u);
		cnl_api_store_error(c, resp, r, "user");
		return;
	}
	items = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(items, cnl_api_user_json(&u[i]));
	cnl_http_reply(
	    resp, 200,
	    cnl_api_page_json(items, n, limit, n ? u[n - 1].id : NULL));
	free(u);
}

static void h_project_get(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct call *c = call;

	cnl_http_reply(resp, 200, cnl_api_project_json(&c->project));
}

/* PATCH: the project's flags ("on_prem_only" pins it to our own GPUs). */
static void h_project_patch(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	static const char *const fields[] = {"on_prem_only", NULL};
	struct call *c = call;
	bool v;
	json_t *body;
	char err[256];
	int r;

	snprintf(c->target, sizeof(c->target), "%s", c->project.id);
	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (cnl_json_get_bool(body, "on_prem_only", true, &v, err,
	                      sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		goto out;
	}
	if ((r = cnl_store_project_set_flags(c->api->store, c->project.id, v)) <
	    0) {
		cnl_api_store_error(c, resp, r, "project");
		goto out;
	}
	c->project.on_prem_only = v;
	cnl_http_reply(resp, 200, cnl_api_project_json(&c->project));
out:
	json_decref(body);
}

static void h_members_list(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store_membership *m;
	struct cnl_store_user u;
	const char *after;
	int limit, n = 0, r;
	json_t *items;

	if (cnl_api_get_page(req, resp, &limit, &after) < 0)
		return;
	m = cnl_xcalloc((size_t)limit, sizeof(*m));
	r = cnl_store_membership_list_project(c->api->store, c->project.id,
	                                      after, limit, m, &n);
	if (r < 0) {
		free(m);
		cnl_api_store_error(c, resp, r, "membership");
		return;
	}
	items = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(
		    items,
		    json_pack(
		        "{s:s,s:s,s:s}", "user_id", m[i].user_id, "user",
		        cnl_store_user_get(c->api->store, m[i].user_id, &u) == 0
		            ? u.name
		            : "",
		        "role", m[i].role));
	cnl_http_reply(
	    resp, 200,
	    cnl_api_page_json(items, n, limit, n ? m[n - 1].user_id : NULL));
	free(m);
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

/* ------------------------------------------------------------------------ */
/* The route table                                                          */
/* ------------------------------------------------------------------------ */

#define W(name) cnl_api_##name
#define PV      CNL_PERM_PROJECT_VIEW
#define PM      CNL_PERM_PROJECT_MEMBER
#define PA      CNL_PERM_PROJECT_ADMIN
#define ADM     CNL_PERM_ADMIN
#define AGT     CNL_PERM_AGENT
#define AUTH    CNL_PERM_AUTHENTICATED

/* The whole API: one row per route; docs/api/openapi.yaml lists the same. */
static const struct cnl_http_route routes[] = {
    {"GET", "/healthz", CNL_PERM_PUBLIC, NULL, h_healthz},
    {"GET", "/metrics", CNL_PERM_PUBLIC, NULL, W(h_metrics)},
    {"GET", "/cli", CNL_PERM_PUBLIC, NULL, W(h_cli_script)},
    {"GET", "/cli/SHA256SUMS", CNL_PERM_PUBLIC, NULL, W(h_cli_sums)},
    {"GET", "/cli/{file}", CNL_PERM_PUBLIC, NULL, W(h_cli_file)},
    {"POST", "/v1/auth/login", CNL_PERM_PUBLIC, "auth.login", h_login},
    {"POST", "/v1/auth/redeem", CNL_PERM_PUBLIC, "auth.redeem",
     cnl_api_h_auth_redeem},
    {"GET", "/v1/auth/whoami", AUTH, NULL, h_whoami},
    {"POST", "/v1/auth/tokens", AUTH, "token.create", h_tokens_create},
    {"GET", "/v1/auth/tokens", AUTH, NULL, h_tokens_list},
    {"DELETE", "/v1/auth/tokens/{token}", AUTH, "token.revoke", h_token_revoke},
    {"GET", "/v1/users", ADM, NULL, h_users_list},
    {"POST", "/v1/users", ADM, "user.create", h_users_create},
    {"GET", "/v1/users/{user}", ADM, NULL, cnl_api_h_user_get},
    {"POST", "/v1/users/{user}/invite", ADM, "user.invite",
     cnl_api_h_user_invite},
    {"PUT", "/v1/users/{user}/quota", ADM, "quota.set", W(h_user_quota_set)},
    {"GET", "/v1/projects", AUTH, NULL, h_projects_list},
    {"POST", "/v1/projects", ADM, "project.create", h_projects_create},
    {"GET", "/v1/projects/{project}", PV, NULL, h_project_get},
    {"PATCH", "/v1/projects/{project}", PA, "project.update", h_project_patch},
    {"DELETE", "/v1/projects/{project}", ADM, "project.delete",
     cnl_api_h_project_delete},
    {"GET", "/v1/projects/{project}/members", PV, NULL, h_members_list},
    {"POST", "/v1/projects/{project}/members", PA, "membership.set",
     h_members_set},
    {"DELETE", "/v1/projects/{project}/members/{user}", PA, "membership.remove",
     cnl_api_h_member_remove},
    {"PUT", "/v1/projects/{project}/quota", ADM, "quota.set",
     W(h_project_quota_set)},
    {"GET", "/v1/projects/{project}/usage", PV, NULL, W(h_project_usage)},
    {"GET", "/v1/quota", AUTH, NULL, W(h_quota_show)},
    {"POST", "/v1/projects/{project}/jobs", PM, "job.create", W(h_jobs_create)},
    {"GET", "/v1/projects/{project}/jobs", PV, NULL, W(h_jobs_list)},
    {"GET", "/v1/jobs/{job}", PV, NULL, W(h_job_get)},
    {"POST", "/v1/jobs/{job}/cancel", PM, "job.cancel", W(h_job_cancel)},
    {"GET", "/v1/jobs/{job}/logs", PV, NULL, W(h_job_logs)},
    {"GET", "/v1/jobs/{job}/artifacts", PV, NULL, W(h_job_artifacts)},
    {"GET", "/v1/jobs/{job}/artifacts/{name}", PV, NULL, W(h_job_artifact_get)},
    {"POST", "/v1/projects/{project}/servers", PM, "server.create",
     W(h_servers_create)},
    {"GET", "/v1/projects/{project}/servers", PV, NULL, W(h_servers_list)},
    {"GET", "/v1/servers/{server}", PV, NULL, W(h_server_get)},
    {"POST", "/v1/servers/{server}/stop", PM, "server.stop", W(h_server_stop)},
    {"POST", "/v1/servers/{server}/start", PM, "server.start",
     W(h_server_start)},
    {"DELETE", "/v1/servers/{server}", PM, "server.delete", W(h_server_delete)},
    {"GET", "/v1/profiles", AUTH, NULL, W(h_profiles_list)},
    {"POST", "/v1/profiles", ADM, "profile.put", W(h_profiles_put)},
    {"DELETE", "/v1/profiles/{profile}", ADM, "profile.delete",
     W(h_profile_delete)},
    {"GET", "/v1/nodes", ADM, NULL, W(h_nodes_list)},
    {"POST", "/v1/nodes", AGT, "node.register", W(h_nodes_register)},
    {"POST", "/v1/nodes/join-tokens", ADM, "node.join_token",
     cnl_api_h_join_token},
    {"GET", "/v1/nodes/{node}", ADM, NULL, cnl_api_h_node_get},
    {"PATCH", "/v1/nodes/{node}", ADM, "node.update", W(h_node_update)},
    {"POST", "/v1/nodes/{node}/heartbeat", AGT, "node.heartbeat",
     W(h_node_heartbeat)},
    {"GET", "/v1/nodes/{node}/assignments", AGT, NULL, W(h_node_assignments)},
    {"POST", "/v1/nodes/{node}/reports", AGT, "node.report", W(h_node_reports)},
    {"POST", "/v1/nodes/{node}/logs", AGT, "node.logs", W(h_node_logs)},
    {"POST", "/v1/nodes/{node}/artifacts", AGT, "node.artifact",
     W(h_node_artifacts)},
    {"POST", "/v1/nodes/{node}/checkpoints", AGT, "node.checkpoint",
     W(h_node_checkpoint_put)},
    {"GET", "/v1/nodes/{node}/checkpoints", AGT, NULL,
     W(h_node_checkpoint_get)},
    {"GET", "/v1/nodes/{node}/inputs", AGT, NULL, W(h_node_inputs_get)},
    {"GET", "/v1/audit", ADM, NULL, W(h_audit_list)},
    {"GET", "/v1/audit/verify", ADM, NULL, W(h_audit_verify)},
    {"GET", "/v1/policy/burst", ADM, NULL, W(h_burst_get)},
    {"PUT", "/v1/policy/burst", ADM, "policy.burst", W(h_burst_put)},
    {"GET", "/v1/cloud/accounts", ADM, NULL, W(h_cloud_list)},
    {"POST", "/v1/cloud/accounts", ADM, "cloud.add", W(h_cloud_add)},
    {"DELETE", "/v1/cloud/accounts/{account}", ADM, "cloud.delete",
     W(h_cloud_delete)},
};

#undef W
#undef PV
#undef PM
#undef PA
#undef ADM
#undef AGT
#undef AUTH

const struct cnl_http_route *cnl_api_routes(size_t *ret_n)
{
	*ret_n = CNL_ARRAY_SIZE(routes);
	return routes;
}

/* The only routes that may be PUBLIC: what a caller needs before it has a
 * token (health, metrics, login, and the CLI installer). */
static const char *const public_routes[][2] = {
    {"GET", "/healthz"},
    {"GET", "/metrics"},
    {"POST", "/v1/auth/login"},
    {"POST", "/v1/auth/redeem"},
    {"GET", "/cli"},
    {"GET", "/cli/SHA256SUMS"},
    {"GET", "/cli/{file}"},
};

int cnl_api_routes_check(const struct cnl_http_route *t, size_t n, char *err,
                         size_t errlen)
{
	int r = cnl_http_routes_check(t, n, err, errlen);

	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		bool public_ok = false;
		bool names_project = strstr(t[i].pattern, "{project}") ||
		                     strstr(t[i].pattern, "{job}") ||
		                     strstr(t[i].pattern, "{server}");

		for (size_t k = 0; k < CNL_ARRAY_SIZE(public_routes); k++)
			public_ok |=
			    strcmp(t[i].method, public_routes[k][0]) == 0 &&
			    strcmp(t[i].pattern, public_routes[k][1]) == 0;
		if (t[i].perm == CNL_PERM_PUBLIC && !public_ok) {
			snprintf(err, errlen,
			         "route %zu (%s %s): PUBLIC is reserved for "
			         "/healthz, /metrics, /v1/auth/login, "
			         "/v1/auth/redeem and /cli",
			         i, t[i].method, t[i].pattern);
			return -CNL_ECONFIG;
		}
		if (perm_rank(t[i].perm) > 0 && !names_project) {
			snprintf(err, errlen,
			         "route %zu (%s %s): %s needs a {project}, "
			         "{job} or {server} segment",
			         i, t[i].method, t[i].pattern,
			         cnl_http_perm_name(t[i].perm));
			return -CNL_ECONFIG;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Serving                                                                  */
/* ------------------------------------------------------------------------ */

static void audit(struct call *c, struct cnl_http_request *req,
                  const struct cnl_http_response *resp)
{
	struct cnl_store_audit a = {0};
	json_t *e =
	    json_object_get(json_object_get(resp->body, "error"), "code");
	char q[CNL_LOG_QUOTE_MAX];
	int r;

	a.ts_ms = c->now_ms;
	snprintf(a.actor, sizeof(a.actor), "%s",
	         c->actor[0] ? c->actor : "anonymous");
	snprintf(a.action, sizeof(a.action), "%s", c->route->action);
	snprintf(a.target, sizeof(a.target), "%s",
	         c->target[0] ? c->target : req->path);
	if (json_is_string(e))
		snprintf(a.result, sizeof(a.result), "%u %s", resp->status,
		         json_string_value(e));
	else if (c->note)
		snprintf(a.result, sizeof(a.result), "%u %s", resp->status,
		         c->note);
	else
		snprintf(a.result, sizeof(a.result), "%u", resp->status);
	if ((r = cnl_store_audit_append(c->api->store, &a, NULL)) < 0)
		cnl_log(CNL_LOG_ERROR, "audit append failed",
		        "action=%s err=%s db=%s", c->route->action,
		        cnl_errname(r),
		        cnl_log_quote(q, sizeof(q),
		                      cnl_store_errmsg(c->api->store)));
}

void cnl_api_serve(void *ud, const struct cnl_http_route *route,
                   struct cnl_http_request *req, struct cnl_http_response *resp)
{
	struct cnl_api *api = ud;
	struct call c = {0};
	char q[CNL_LOG_QUOTE_MAX];
	struct timespec t0, t1;
	size_t ri = (size_t)(route - api->routes);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	pthread_mutex_lock(&api->mu);
	c.api = api;
	c.route = route;
	c.now_ms = cnl_time_now_ms();
	if (authorize(&c, req, resp) == 0)
		route->handler(&c, req, resp);
	if (resp->status == 0)
		cnl_http_error(resp, 500, "internal", "no response");
	if (route->action && !c.no_audit)
		audit(&c, req, resp);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (api->stats && ri < api->nstats) {
		struct route_stats *st = &api->stats[ri];
		unsigned cls = resp->status / 100;

		st->by_class[cls >= 1 && cls <= 5 ? cls - 1 : 4]++;
		cnl_hist_observe(&st->latency,
		                 (double)(t1.tv_sec - t0.tv_sec) +
		                     (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	}
	pthread_mutex_unlock(&api->mu);
	cnl_log(resp->status >= 500 ? CNL_LOG_ERROR : CNL_LOG_DEBUG, "request",
	        "method=%s path=%s status=%u user=%s", req->method,
	        cnl_log_quote(q, sizeof(q), req->path), resp->status,
	        c.authed ? c.user.id : "-");
}

int cnl_api_new(const struct cnl_api_config *cfg, struct cnl_api **ret)
{
	struct cnl_api *api;
	int ln = cfg->scrypt_ln ? cfg->scrypt_ln : CNL_AUTH_SCRYPT_LN;
	char err[256], q[CNL_LOG_QUOTE_MAX];
	int r;

	if (!cfg->store || !cfg->jwt_key ||
	    cfg->jwt_key_len < CNL_API_SECRET_MIN ||
	    ln < CNL_AUTH_SCRYPT_LN_MIN || ln > CNL_AUTH_SCRYPT_LN_MAX)
		return -EINVAL;
	api = cnl_xcalloc(1, sizeof(*api));
	pthread_mutex_init(&api->mu, NULL);
	api->store = cfg->store;
	api->keylen = cfg->jwt_key_len;
	api->key = cnl_xmalloc(api->keylen);
	memcpy(api->key, cfg->jwt_key, api->keylen);
	api->scrypt_ln = ln;
	api->oidc = cfg->oidc;
	cnl_id_gen_init_random(&api->ids);
	cnl_catalog_init(&api->cat);
	if ((r = cnl_api_cli_new(cfg->cli_dir, cfg->public_url, &api->cli, err,
	                         sizeof(err))) < 0) {
		cnl_log(CNL_LOG_ERROR, "CLI installer", "err=%s",
		        cnl_log_quote(q, sizeof(q), err));
		cnl_api_free(api);
		return r;
	}
	if (cnl_auth_password_hash_cost("no user has this password", ln,
	                                api->dummy_hash,
	                                sizeof(api->dummy_hash)) < 0) {
		cnl_api_free(api);
		return -EIO;
	}
	r = cnl_ctl_new(
	    &(struct cnl_ctl_config){
	        .store = cfg->store,
	        .cat = &api->cat,
	        .policy = cfg->policy,
	        .node_lost_ms = cfg->node_lost_ms,
	        .cycle_interval_ms = cfg->cycle_interval_ms,
	        .seed = (uint64_t)cnl_time_now_ms(),
	        .preempt_min_run_ms =
	            cfg->preempt_min_run_ms ? cfg->preempt_min_run_ms : -1,
	        .preempt_grace_ms =
	            cfg->preempt_grace_ms ? cfg->preempt_grace_ms : -1,
	    },
	    &api->mu, &api->ctl, err, sizeof(err));
	if (r < 0) {
		cnl_log(CNL_LOG_ERROR, "controller", "err=%s", err);
		cnl_api_free(api);
		return r == -CNL_ECONFIG ? r : -EIO;
	}
	*ret = api;
	return 0;
}

void cnl_api_stop(struct cnl_api *api)
{
	if (api)
		cnl_ctl_stop(api->ctl);
}

void cnl_api_tick(struct cnl_api *api, int64_t now_ms)
{
	pthread_mutex_lock(&api->mu);
	cnl_ctl_tick(api->ctl, now_ms, true);
	pthread_mutex_unlock(&api->mu);
}

void cnl_api_free(struct cnl_api *api)
{
	if (!api)
		return;
	cnl_ctl_stop(api->ctl);
	cnl_ctl_free(api->ctl);
	if (api->key) {
		explicit_bzero(api->key, api->keylen);
		free(api->key);
	}
	free(api->stats);
	cnl_api_cli_free(api->cli);
	pthread_mutex_destroy(&api->mu);
	free(api);
}

int cnl_api_start(struct cnl_api *api, const struct cnl_api_listen *l,
                  struct cnl_http_server **ret, char *err, size_t errlen)
{
	struct cnl_http_config cfg = {
	    .host = l->host,
	    .port = l->port,
	    .routes = l->routes,
	    .nroutes = l->nroutes,
	    .tls_cert_pem = l->tls_cert_pem,
	    .tls_key_pem = l->tls_key_pem,
	    .serve = cnl_api_serve,
	    .ud = api,
	};
	int r;

	if ((r = cnl_api_routes_check(l->routes, l->nroutes, err, errlen)) < 0)
		return r;
	free(api->stats);
	api->stats = cnl_xcalloc(l->nroutes, sizeof(*api->stats));
	api->nstats = l->nroutes;
	api->routes = l->routes;
	cnl_api_cli_set_tls(api->cli, l->tls_cert_pem != NULL);
	if (l->run_loop && (r = cnl_ctl_start(api->ctl)) < 0) {
		snprintf(err, errlen, "cannot start the scheduling loop");
		return r;
	}
	r = cnl_http_server_new(&cfg, ret, err, errlen);
	if (r < 0)
		cnl_ctl_stop(api->ctl);
	return r;
}

int cnl_api_bootstrap(struct cnl_store *s, const char *name,
                      const char *password, int scrypt_ln, char *err,
                      size_t errlen)
{
	struct cnl_store_project sys = {0}, any;
	struct cnl_store_user u = {0};
	struct cnl_store_membership m = {0};
	struct cnl_store_audit a = {0};
	struct cnl_id_gen ids;
	int64_t now = cnl_time_now_ms();
	int r, n = 0;
	const char *step;

	if (cnl_store_project_get_by_name(s, CNL_API_ADMIN_PROJECT, &any) == 0)
		return 1;
	if ((r = cnl_store_project_list(s, NULL, 1, &any, &n)) < 0) {
		step = "list projects";
		goto fail;
	}
	if (n > 0) {
		snprintf(err, errlen,
		         "the store already holds projects but no \"%s\" "
		         "project; refusing to bootstrap",
		         CNL_API_ADMIN_PROJECT);
		return -CNL_ECONFIG;
	}
	if (!name || !cnl_api_valid_name(name)) {
		snprintf(err, errlen,
		         "admin name must be 1..63 characters of "
		         "A-Z a-z 0-9 . _ -");
		return -CNL_EFIELD;
	}
	cnl_id_gen_init_random(&ids);
	if (!scrypt_ln)
		scrypt_ln = CNL_AUTH_SCRYPT_LN;
	step = "hash password";
	if ((r = cnl_auth_password_hash_cost(password ? password : "",
	                                     scrypt_ln, u.password_hash,
	                                     sizeof(u.password_hash))) < 0)
		goto fail;
	step = "create user";
	if ((r = cnl_id_new(&ids, "usr", now, u.id, sizeof(u.id))) < 0)
		goto fail;
	snprintf(u.name, sizeof(u.name), "%s", name);
	u.created_ms = now;
	if ((r = cnl_store_user_create(s, &u)) < 0)
		goto fail;
	step = "create project";
	if ((r = cnl_id_new(&ids, "prj", now, sys.id, sizeof(sys.id))) < 0)
		goto fail;
	snprintf(sys.name, sizeof(sys.name), "%s", CNL_API_ADMIN_PROJECT);
	sys.created_ms = now;
	if ((r = cnl_store_project_create(s, &sys)) < 0)
		goto fail;
	step = "grant admin";
	memcpy(m.user_id, u.id, sizeof(m.user_id));
	memcpy(m.project_id, sys.id, sizeof(m.project_id));
	snprintf(m.role, sizeof(m.role), "admin");
	if ((r = cnl_store_membership_set(s, &m)) < 0)
		goto fail;
	step = "audit";
	a.ts_ms = now;
	snprintf(a.actor, sizeof(a.actor), "cnlabd");
	snprintf(a.action, sizeof(a.action), "admin.bootstrap");
	snprintf(a.target, sizeof(a.target), "%s", u.id);
	snprintf(a.result, sizeof(a.result), "ok");
	if ((r = cnl_store_audit_append(s, &a, NULL)) < 0)
		goto fail;
	step = "default profiles";
	if ((r = cnl_api_seed_profiles(s, now)) < 0)
		goto fail;
	return 0;
fail:
	snprintf(err, errlen, "bootstrap: %s: %s%s%s", step, cnl_strerror(r),
	         cnl_store_errmsg(s)[0] ? ": " : "", cnl_store_errmsg(s));
	return r;
}
