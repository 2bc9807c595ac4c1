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

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/json.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "server/api.h"
#include "server/auth.h"

struct cnl_api {
	struct cnl_store *store;
	uint8_t *key;
	size_t keylen;
	int scrypt_ln;
	struct cnl_id_gen ids;
	/* Verified against for unknown users so they cost as much as known. */
	char dummy_hash[CNL_AUTH_HASH_MAX];
};

struct call {
	struct cnl_api *api;
	const struct cnl_http_route *route;
	bool authed;
	bool is_admin;
	struct cnl_store_user user;
	bool have_project;
	struct cnl_store_project project;
	bool have_job;
	struct cnl_store_job job;
	char actor[CNL_STORE_AUDIT_MAX];
	char target[CNL_STORE_AUDIT_MAX];
	const char *note; /* audit result suffix, e.g. "replayed" */
	int64_t now_ms;
};

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static json_t *time_json(int64_t ms)
{
	char buf[CNL_TIME_RFC3339_MAX];

	if (cnl_time_format_rfc3339(ms, buf, sizeof(buf)) < 0)
		return json_null();
	return json_string(buf);
}

static json_t *project_json(const struct cnl_store_project *p)
{
	return json_pack("{s:s,s:s,s:b,s:o}", "id", p->id, "name", p->name,
	                 "on_prem_only", p->on_prem_only, "created_at",
	                 time_json(p->created_ms));
}

static json_t *user_json(const struct cnl_store_user *u)
{
	return json_pack("{s:s,s:s,s:o}", "id", u->id, "name", u->name,
	                 "created_at", time_json(u->created_ms));
}

static json_t *job_json(const struct cnl_store_job *j)
{
	return json_pack("{s:s,s:s,s:s,s:s,s:s,s:i,s:s,s:o,s:o}", "id", j->id,
	                 "project_id", j->project_id, "user_id", j->user_id,
	                 "command", j->command, "gpu", j->gpu_shape, "priority",
	                 j->priority, "state", j->state, "created_at",
	                 time_json(j->created_ms), "updated_at",
	                 time_json(j->updated_ms));
}

/* Turn a store error into a response; @what names the object. */
static void store_error(struct call *c, struct cnl_http_response *resp, int r,
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
static json_t *parse_body(struct cnl_http_request *req,
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
	if (cnl_json_check_fields(j, allowed, err, sizeof(err)) < 0) {
		json_decref(j);
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		return NULL;
	}
	return j;
}

/* A required string field of 1..@max-1 bytes, or a 400 naming it. */
static const char *get_string(json_t *j, const char *key, size_t max,
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
static bool valid_name(const char *s)
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

static const char *get_name(json_t *j, const char *key,
                            struct cnl_http_response *resp)
{
	const char *v = get_string(j, key, CNL_STORE_NAME_MAX, resp);

	if (v && !valid_name(v)) {
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
static int get_page(struct cnl_http_request *req,
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
static json_t *page_json(json_t *items, int n, int limit, const char *last)
{
	return json_pack("{s:o,s:o}", "items", items, "next",
	                 n == limit && last ? json_string(last) : json_null());
}

static int new_id(struct call *c, const char *prefix, char *buf)
{
	return cnl_id_new(&c->api->ids, prefix, c->now_ms, buf, CNL_ID_MAX);
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

/* Whether @user_id holds "admin" in the system project: 1, 0 or an error. */
static int user_is_admin(struct cnl_store *s, const char *user_id)
{
	struct cnl_store_project sys;
	char role[CNL_STORE_ROLE_MAX];
	int r;

	r = cnl_store_project_get_by_name(s, CNL_API_ADMIN_PROJECT, &sys);
	if (r == -CNL_ENOTFOUND)
		return 0;
	if (r < 0)
		return r;
	r = cnl_store_membership_get_role(s, user_id, sys.id, role,
	                                  sizeof(role));
	if (r == -CNL_ENOTFOUND)
		return 0;
	if (r < 0)
		return r;
	return strcmp(role, "admin") == 0;
}

/* ------------------------------------------------------------------------ */
/* Authentication and authorization                                         */
/* ------------------------------------------------------------------------ */

/* Returns 0, or -1 with a 401 (or 500) in @resp. */
static int authenticate(struct call *c, struct cnl_http_request *req,
                        struct cnl_http_response *resp)
{
	const char *h = cnl_http_header(req, "Authorization");
	struct cnl_auth_claims claims;
	int r;

	if (!h || strncasecmp(h, "Bearer ", 7) != 0) {
		cnl_http_error(resp, 401, "unauthenticated",
		               "missing bearer token");
		return -1;
	}
	h += 7;
	while (*h == ' ')
		h++;
	if (cnl_auth_jwt_verify(h, c->api->key, c->api->keylen,
	                        CNL_API_AUDIENCE, c->now_ms / 1000,
	                        &claims) < 0) {
		cnl_http_error(resp, 401, "unauthenticated",
		               "invalid or expired token");
		return -1;
	}
	r = cnl_store_user_get(c->api->store, claims.sub, &c->user);
	if (r == -CNL_ENOTFOUND || r == -CNL_EFIELD || r == -CNL_ESIZE) {
		cnl_http_error(resp, 401, "unauthenticated",
		               "invalid or expired token");
		return -1;
	}
	if (r < 0 || (r = user_is_admin(c->api->store, c->user.id)) < 0) {
		store_error(c, resp, r, "user");
		return -1;
	}
	c->is_admin = r == 1;
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
	const char *what = pid ? "project" : "job";
	char role[CNL_STORE_ROLE_MAX];
	int r;

	if (jid) {
		r = cnl_store_job_get(c->api->store, jid, &c->job);
		if (r < 0)
			goto fail;
		c->have_job = true;
		pid = c->job.project_id;
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
		store_error(c, resp, r, what);
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

static void h_login(void *call, struct cnl_http_request *req,
                    struct cnl_http_response *resp)
{
	static const char *const fields[] = {"user", "password", NULL};
	struct call *c = call;
	struct cnl_store_user u;
	struct cnl_auth_claims claims = {0};
	char token[CNL_AUTH_JWT_MAX + 1];
	const char *name, *password;
	json_t *body;
	char err[256];
	int r, found;

	if (!(body = parse_body(req, resp, fields)))
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
	        cnl_store_user_get_by_name(c->api->store, name, &u) == 0;
	/* Unknown users cost one scrypt too and get the same answer. */
	r = cnl_auth_password_verify(password, found ? u.password_hash
	                                             : c->api->dummy_hash);
	if (!found || r < 0) {
		cnl_http_error(resp, 401, "unauthenticated",
		               "invalid user name or password");
		goto out;
	}
	snprintf(c->actor, sizeof(c->actor), "%s", u.id);
	snprintf(c->target, sizeof(c->target), "%s", u.id);
	snprintf(claims.sub, sizeof(claims.sub), "%s", u.id);
	snprintf(claims.aud, sizeof(claims.aud), "%s", CNL_API_AUDIENCE);
	snprintf(claims.iss, sizeof(claims.iss), "%s", CNL_API_ISSUER);
	claims.iat = c->now_ms / 1000;
	claims.exp = claims.iat + CNL_API_TOKEN_TTL_S;
	r = cnl_auth_jwt_sign(&claims, c->api->key, c->api->keylen, token,
	                      sizeof(token));
	if (r < 0) {
		cnl_http_error(resp, 500, "internal", "cannot sign token");
		goto out;
	}
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:o}", "token", token, "expires_at",
	                         time_json(claims.exp * 1000)));
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

	if (get_page(req, resp, &limit, &after) < 0)
		return;
	items = json_array();
	if (c->is_admin) {
		struct cnl_store_project *p =
		    cnl_xcalloc((size_t)limit, sizeof(*p));

		r = cnl_store_project_list(s, after, limit, p, &n);
		for (int i = 0; r == 0 && i < n; i++)
			json_array_append_new(items, project_json(&p[i]));
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
				json_array_append_new(items, project_json(&p));
		}
		if (r == 0 && n)
			last = json_string_value(json_object_get(
			    json_array_get(items, (size_t)n - 1), "id"));
		free(m);
	}
	if (r < 0) {
		json_decref(items);
		store_error(c, resp, r, "project");
		return;
	}
	json_incref(items);
	cnl_http_reply(resp, 200, page_json(items, n, limit, last));
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

	if (!(body = parse_body(req, resp, fields)))
		return;
	if (!(name = get_name(body, "name", resp)))
		goto out;
	if (cnl_json_get_bool(body, "on_prem_only", false, &p.on_prem_only, err,
	                      sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "%s", name);
	if (new_id(c, "prj", p.id) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot make an id");
		goto out;
	}
	snprintf(p.name, sizeof(p.name), "%s", name);
	p.created_ms = c->now_ms;
	if ((r = cnl_store_project_create(c->api->store, &p)) < 0) {
		store_error(c, resp, r, "project");
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "%s", p.id);
	cnl_http_reply(resp, 201, project_json(&p));
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

	if (!(body = parse_body(req, resp, fields)))
		return;
	if (!(name = get_name(body, "user", resp)) ||
	    !(role = get_string(body, "role", CNL_STORE_ROLE_MAX, resp)))
		goto out;
	if (role_rank(role) == 0) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"role\": must be viewer, member, "
		               "project-admin or admin");
		goto out;
	}
	if (system && !c->is_admin) {
		cnl_http_error(resp, 403, "forbidden",
		               "only administrators manage the %s project",
		               CNL_API_ADMIN_PROJECT);
		goto out;
	}
	if (strcmp(role, "admin") == 0 && !system) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"role\": \"admin\" is granted only in "
		               "the %s project",
		               CNL_API_ADMIN_PROJECT);
		goto out;
	}
	if ((r = cnl_store_user_get_by_name(c->api->store, name, &u)) < 0) {
		store_error(c, resp, r, "user");
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "%s:%s", c->project.id, u.id);
	memcpy(m.user_id, u.id, sizeof(m.user_id));
	memcpy(m.project_id, c->project.id, sizeof(m.project_id));
	snprintf(m.role, sizeof(m.role), "%s", role);
	if ((r = cnl_store_membership_set(c->api->store, &m)) < 0) {
		store_error(c, resp, r, "membership");
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
	static const char *const fields[] = {"name", "password", NULL};
	struct call *c = call;
	struct cnl_store_user u = {0};
	const char *name, *password;
	json_t *body;
	int r;

	if (!(body = parse_body(req, resp, fields)))
		return;
	if (!(name = get_name(body, "name", resp)) ||
	    !(password = get_string(body, "password", CNL_AUTH_PASSWORD_MAX + 1,
	                            resp)))
		goto out;
	snprintf(c->target, sizeof(c->target), "%s", name);
	if (new_id(c, "usr", u.id) < 0 ||
	    cnl_auth_password_hash_cost(password, c->api->scrypt_ln,
	                                u.password_hash,
	                                sizeof(u.password_hash)) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot create user");
		goto out;
	}
	snprintf(u.name, sizeof(u.name), "%s", name);
	u.created_ms = c->now_ms;
	if ((r = cnl_store_user_create(c->api->store, &u)) < 0) {
		store_error(c, resp, r, "user");
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "%s", u.id);
	cnl_http_reply(resp, 201, user_json(&u));
out:
	json_decref(body);
}

/* The Idempotency-Key header: NULL, or 1..127 printable ASCII bytes. */
static int get_idem_key(struct cnl_http_request *req,
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

static void h_jobs_create(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	static const char *const fields[] = {"command", "gpu", "priority",
	                                     NULL};
	struct call *c = call;
	struct cnl_store_job j = {0}, got;
	const char *command, *gpu, *key;
	int64_t prio = 0;
	json_t *body;
	char err[256];
	int r;

	if (!(body = parse_body(req, resp, fields)))
		return;
	if (!(command =
	          get_string(body, "command", CNL_STORE_COMMAND_MAX, resp)) ||
	    !(gpu = get_string(body, "gpu", CNL_STORE_PROFILE_MAX, resp)))
		goto out;
	if (cnl_json_get_int(body, "priority", false, 0, CNL_STORE_PRIO_MAX,
	                     &prio, err, sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		goto out;
	}
	if (get_idem_key(req, resp, &key) < 0)
		goto out;
	if (new_id(c, "job", j.id) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot make an id");
		goto out;
	}
	memcpy(j.project_id, c->project.id, sizeof(j.project_id));
	memcpy(j.user_id, c->user.id, sizeof(j.user_id));
	snprintf(j.command, sizeof(j.command), "%s", command);
	snprintf(j.gpu_shape, sizeof(j.gpu_shape), "%s", gpu);
	j.priority = (int)prio;
	snprintf(j.state, sizeof(j.state), "pending");
	j.created_ms = j.updated_ms = c->now_ms;
	r = cnl_store_job_create(c->api->store, &j, key, &got);
	if (r == -CNL_EDUP && key) {
		cnl_http_error(resp, 409, "conflict",
		               "Idempotency-Key already used for another "
		               "request");
		goto out;
	}
	if (r < 0) {
		store_error(c, resp, r, "job");
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "%s", got.id);
	if (r == CNL_STORE_REPLAYED &&
	    strcmp(got.project_id, c->project.id) != 0) {
		cnl_http_error(resp, 409, "conflict",
		               "Idempotency-Key already used for another "
		               "request");
		goto out;
	}
	c->note = r == CNL_STORE_REPLAYED ? "replayed" : NULL;
	cnl_http_reply(resp, r == CNL_STORE_REPLAYED ? 200 : 201,
	               job_json(&got));
out:
	json_decref(body);
}

static void h_jobs_list(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store_job *jobs;
	const char *after;
	int limit, n = 0, r;
	json_t *items;

	if (get_page(req, resp, &limit, &after) < 0)
		return;
	jobs = cnl_xcalloc((size_t)limit, sizeof(*jobs));
	r = cnl_store_job_list(c->api->store, c->project.id, after, limit, jobs,
	                       &n);
	if (r < 0) {
		free(jobs);
		store_error(c, resp, r, "job");
		return;
	}
	items = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(items, job_json(&jobs[i]));
	cnl_http_reply(resp, 200,
	               page_json(items, n, limit, n ? jobs[n - 1].id : NULL));
	free(jobs);
}

static void h_job_get(void *call, struct cnl_http_request *req,
                      struct cnl_http_response *resp)
{
	struct call *c = call;

	cnl_http_reply(resp, 200, job_json(&c->job));
}

/* ------------------------------------------------------------------------ */
/* The route table                                                          */
/* ------------------------------------------------------------------------ */

static const struct cnl_http_route routes[] = {
    {"GET", "/healthz", CNL_PERM_PUBLIC, NULL, h_healthz},
    {"POST", "/v1/auth/login", CNL_PERM_PUBLIC, "auth.login", h_login},
    {"GET", "/v1/projects", CNL_PERM_AUTHENTICATED, NULL, h_projects_list},
    {"POST", "/v1/projects", CNL_PERM_ADMIN, "project.create",
     h_projects_create},
    {"POST", "/v1/projects/{project}/members", CNL_PERM_PROJECT_ADMIN,
     "membership.set", h_members_set},
    {"POST", "/v1/users", CNL_PERM_ADMIN, "user.create", h_users_create},
    {"POST", "/v1/projects/{project}/jobs", CNL_PERM_PROJECT_MEMBER,
     "job.create", h_jobs_create},
    {"GET", "/v1/projects/{project}/jobs", CNL_PERM_PROJECT_VIEW, NULL,
     h_jobs_list},
    {"GET", "/v1/jobs/{job}", CNL_PERM_PROJECT_VIEW, NULL, h_job_get},
};

const struct cnl_http_route *cnl_api_routes(size_t *ret_n)
{
	*ret_n = CNL_ARRAY_SIZE(routes);
	return routes;
}

int cnl_api_routes_check(const struct cnl_http_route *t, size_t n, char *err,
                         size_t errlen)
{
	int r = cnl_http_routes_check(t, n, err, errlen);

	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		bool public_ok = (strcmp(t[i].method, "GET") == 0 &&
		                  strcmp(t[i].pattern, "/healthz") == 0) ||
		                 (strcmp(t[i].method, "POST") == 0 &&
		                  strcmp(t[i].pattern, "/v1/auth/login") == 0);
		bool names_project = strstr(t[i].pattern, "{project}") ||
		                     strstr(t[i].pattern, "{job}");

		if (t[i].perm == CNL_PERM_PUBLIC && !public_ok) {
			snprintf(err, errlen,
			         "route %zu (%s %s): PUBLIC is reserved for "
			         "/healthz and /v1/auth/login",
			         i, t[i].method, t[i].pattern);
			return -CNL_ECONFIG;
		}
		if (perm_rank(t[i].perm) > 0 && !names_project) {
			snprintf(err, errlen,
			         "route %zu (%s %s): %s needs a {project} or "
			         "{job} segment",
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
	struct call c = {0};
	char q[CNL_LOG_QUOTE_MAX];

	c.api = ud;
	c.route = route;
	c.now_ms = cnl_time_now_ms();
	if (authorize(&c, req, resp) == 0)
		route->handler(&c, req, resp);
	if (resp->status == 0)
		cnl_http_error(resp, 500, "internal", "no response");
	if (route->action)
		audit(&c, req, resp);
	cnl_log(resp->status >= 500 ? CNL_LOG_ERROR : CNL_LOG_DEBUG, "request",
	        "method=%s path=%s status=%u user=%s", req->method,
	        cnl_log_quote(q, sizeof(q), req->path), resp->status,
	        c.authed ? c.user.id : "-");
}

int cnl_api_new(const struct cnl_api_config *cfg, struct cnl_api **ret)
{
	struct cnl_api *api;
	int ln = cfg->scrypt_ln ? cfg->scrypt_ln : CNL_AUTH_SCRYPT_LN;

	if (!cfg->store || !cfg->jwt_key ||
	    cfg->jwt_key_len < CNL_API_SECRET_MIN ||
	    ln < CNL_AUTH_SCRYPT_LN_MIN || ln > CNL_AUTH_SCRYPT_LN_MAX)
		return -EINVAL;
	api = cnl_xcalloc(1, sizeof(*api));
	api->store = cfg->store;
	api->keylen = cfg->jwt_key_len;
	api->key = cnl_xmalloc(api->keylen);
	memcpy(api->key, cfg->jwt_key, api->keylen);
	api->scrypt_ln = ln;
	cnl_id_gen_init_random(&api->ids);
	if (cnl_auth_password_hash_cost("no user has this password", ln,
	                                api->dummy_hash,
	                                sizeof(api->dummy_hash)) < 0) {
		cnl_api_free(api);
		return -EIO;
	}
	*ret = api;
	return 0;
}

void cnl_api_free(struct cnl_api *api)
{
	if (!api)
		return;
	if (api->key) {
		explicit_bzero(api->key, api->keylen);
		free(api->key);
	}
	free(api);
}

int cnl_api_start(struct cnl_api *api, const struct cnl_http_route *rt,
                  size_t nroutes, const char *host, uint16_t port,
                  struct cnl_http_server **ret, char *err, size_t errlen)
{
	struct cnl_http_config cfg = {
	    .host = host,
	    .port = port,
	    .routes = rt,
	    .nroutes = nroutes,
	    .serve = cnl_api_serve,
	    .ud = api,
	};
	int r;

	if ((r = cnl_api_routes_check(rt, nroutes, err, errlen)) < 0)
		return r;
	return cnl_http_server_new(&cfg, ret, err, errlen);
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
	if (!name || !valid_name(name)) {
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
	return 0;
fail:
	snprintf(err, errlen, "bootstrap: %s: %s%s%s", step, cnl_strerror(r),
	         cnl_store_errmsg(s)[0] ? ": " : "", cnl_store_errmsg(s));
	return r;
}
