/*
 * api_session.c - what makes a credential revocable, and whose it is:
 *
 *   - server-side sessions.  Every session JWT cnlabd signs (password
 *     login, invitation, OIDC exchange) carries a "jti" naming a document
 *     of kind "session" (id = jti, parent = the user).  A request with a
 *     session JWT passes only while that document exists, so logout
 *     (POST /v1/auth/logout) and user disable end a session on the very
 *     next request.  A session lives CNL_API_TOKEN_TTL_S (12 h) from the
 *     login, absolute: no sliding renewal, so a stolen token is good for
 *     at most that long even if nobody revokes it.  The notebook proxy's
 *     cookie names a document of kind "proxy-cookie" the same way; it is
 *     made from the server's token, not from a session, so logout ends
 *     all of the user's proxy cookies.
 *   - disabled users.  A document of kind "user-disabled" (id = the user)
 *     makes every credential of the user - sessions, API tokens, OIDC ID
 *     tokens, the notebook proxy's cookie - fail with 401 "account
 *     disabled".  Enabling deletes the sessions made before, so it
 *     restores the user's API tokens but not their sessions: they log in
 *     again.  Running work is left alone.
 *   - OIDC identities.  An ID token names a user by (iss, sub) only: a
 *     document of kind "oidc-link" (id = SHA-256 of "iss\nsub", parent =
 *     the user).  A pair seen for the first time gets a fresh user without
 *     any role; preferred_username (or the e-mail's local part) becomes
 *     its name only when that name is free, never a way into an existing
 *     account; the creation is audited ("user.create_oidc").  An
 *     administrator links an existing user explicitly (POST
 *     /v1/users/{user}/oidc) and unlinks (DELETE, which also ends the
 *     sessions made from that identity).
 *   - idempotency per user.  The Idempotency-Key header is stored as the
 *     SHA-256 of "user\nkey", so another user's key is invisible, with a
 *     document of kind "idem" that keeps the SHA-256 of the request (kind,
 *     project, body): the same key with another request is 422.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

#include "cnlab/errors.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "net/jwt.h"
#include "server/api-internal.h"
#include "server/auth.h"
#include "server/oidc.h"

#define SESSION_KIND  "session"
#define DISABLED_KIND "user-disabled"
#define OIDC_KIND     "oidc-link"
#define IDEM_KIND     "idem"
#define PROXY_KIND    "proxy-cookie"

static int link_id(const char *iss, const char *sub,
                   char out[CNL_AUTH_DIGEST_MAX]);

/* ------------------------------------------------------------------------ */
/* Sessions                                                                 */
/* ------------------------------------------------------------------------ */

/* Delete every session (@kind SESSION_KIND) or proxy cookie (PROXY_KIND)
 * of @user_id: 0 or a store error. */
static int sessions_revoke_all(struct cnl_store *s, const char *kind,
                               const char *user_id)
{
	struct cnl_store_doc d[CNL_STORE_LIST_MAX];
	int n = 0, r;

	while ((r = cnl_store_doc_list(s, kind, user_id, NULL,
	                               CNL_STORE_LIST_MAX, d, &n)) == 0 &&
	       n > 0) {
		for (int i = 0; r == 0 && i < n; i++)
			r = cnl_store_doc_delete(s, kind, d[i].id);
		cnl_store_docs_done(d, n);
		if (r < 0)
			return r;
	}
	return r;
}

int cnl_api_sessions_end(struct cnl_store *s, const char *user_id)
{
	int r = sessions_revoke_all(s, SESSION_KIND, user_id);

	return r < 0 ? r : sessions_revoke_all(s, PROXY_KIND, user_id);
}

/* Forget @user_id's sessions (or proxy cookies: @kind) that have expired
 * (a login's housekeeping). */
static void sessions_prune(struct cnl_store *s, const char *kind,
                           const char *user_id, int64_t now_ms)
{
	struct cnl_store_doc d[64];
	const char *after = NULL;
	char last[CNL_STORE_DOC_ID_MAX];
	int n = 0;

	while (cnl_store_doc_list(s, kind, user_id, after, 64, d, &n) == 0 &&
	       n > 0) {
		for (int i = 0; i < n; i++) {
			json_t *o = json_loads(d[i].body, 0, NULL);
			int64_t exp = json_integer_value(
			    json_object_get(o, "expires_ms"));

			json_decref(o);
			if (exp <= now_ms)
				cnl_store_doc_delete(s, SESSION_KIND, d[i].id);
		}
		snprintf(last, sizeof(last), "%s", d[n - 1].id);
		after = last;
		cnl_store_docs_done(d, n);
		if (n < 64)
			break;
	}
}

void cnl_api_session_reply(struct call *c, const struct cnl_store_user *u,
                           struct cnl_http_response *resp)
{
	struct cnl_auth_claims claims = {0};
	char token[CNL_AUTH_JWT_MAX + 1], link[CNL_AUTH_DIGEST_MAX];
	json_t *o;
	int r;

	if (cnl_api_user_disabled(c->api->store, u->id)) {
		cnl_http_error(resp, 401, "unauthenticated",
		               "account disabled: ask an administrator (cnlab "
		               "user enable %s)",
		               u->name);
		return;
	}
	snprintf(claims.sub, sizeof(claims.sub), "%s", u->id);
	snprintf(claims.aud, sizeof(claims.aud), "%s", CNL_API_AUDIENCE);
	snprintf(claims.iss, sizeof(claims.iss), "%s", CNL_API_ISSUER);
	claims.iat = c->now_ms / 1000;
	claims.exp = claims.iat + CNL_API_TOKEN_TTL_S;
	if (cnl_api_new_id(c, "ses", claims.jti) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot make a session");
		return;
	}
	sessions_prune(c->api->store, SESSION_KIND, u->id, c->now_ms);
	o = json_pack("{s:s,s:I,s:I}", "user_id", u->id, "created_ms",
	              (json_int_t)c->now_ms, "expires_ms",
	              (json_int_t)(claims.exp * 1000));
	/* A session made from an OIDC ID token remembers its identity: an
	 * unlink of that identity ends it. */
	if (c->oidc_done && c->oidc_r == 0 &&
	    link_id(c->oidc.iss, c->oidc.sub, link) == 0)
		json_object_set_new(o, "oidc_link", json_string(link));
	r = cnl_api_doc_save(c, SESSION_KIND, claims.jti, u->id, "", o, true);
	json_decref(o);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "session");
		return;
	}
	if (cnl_auth_jwt_sign(&claims, c->api->key, c->api->keylen, token,
	                      sizeof(token)) < 0) {
		cnl_store_doc_delete(c->api->store, SESSION_KIND, claims.jti);
		cnl_http_error(resp, 500, "internal", "cannot sign token");
		return;
	}
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:o,s:s}", "token", token, "expires_at",
	                         cnl_api_time_json(claims.exp * 1000), "user",
	                         u->name));
}

int cnl_api_session_live(struct call *c, const struct cnl_auth_claims *cl)
{
	struct cnl_store_doc d = {0};
	json_t *o;
	int64_t exp;
	bool ok;
	int r;

	if (!cl->jti[0])
		return -CNL_EAUTH;
	/* A store that cannot answer (a database outage) is not a
	 * session that ended: its error goes up, to be a 503. */
	if ((r = cnl_store_doc_get(c->st, SESSION_KIND, cl->jti, &d)) < 0)
		return r == -CNL_ENOTFOUND ? -CNL_EAUTH : r;
	o = json_loads(d.body, 0, NULL);
	exp = json_integer_value(json_object_get(o, "expires_ms"));
	ok = strcmp(d.parent, cl->sub) == 0 && exp > c->now_ms;
	json_decref(o);
	cnl_store_doc_done(&d);
	if (!ok)
		return -CNL_EAUTH;
	snprintf(c->session, sizeof(c->session), "%s", cl->jti);
	return 0;
}

int cnl_api_proxy_cookie_new(struct call *c, const char *user_id,
                             const char *server_id, int64_t expires_ms,
                             char *ret_jti)
{
	char jti[CNL_ID_MAX];
	json_t *o;
	int r;

	if ((r = cnl_api_new_id(c, "pxc", jti)) < 0)
		return r;
	sessions_prune(c->api->store, PROXY_KIND, user_id, c->now_ms);
	o = json_pack("{s:s,s:s,s:I,s:I}", "user_id", user_id, "server",
	              server_id, "created_ms", (json_int_t)c->now_ms,
	              "expires_ms", (json_int_t)expires_ms);
	r = cnl_api_doc_save(c, PROXY_KIND, jti, user_id, "", o, true);
	json_decref(o);
	if (r < 0)
		return r;
	memcpy(ret_jti, jti, sizeof(jti));
	return 0;
}

int cnl_api_proxy_cookie_live(struct call *c, const struct cnl_auth_claims *cl)
{
	struct cnl_store_doc d = {0};
	json_t *o;
	bool ok;

	if (!cl->jti[0] ||
	    cnl_store_doc_get(c->st, PROXY_KIND, cl->jti, &d) < 0)
		return -CNL_EAUTH;
	o = json_loads(d.body, 0, NULL);
	ok = strcmp(d.parent, cl->sub) == 0 &&
	     json_integer_value(json_object_get(o, "expires_ms")) > c->now_ms;
	json_decref(o);
	cnl_store_doc_done(&d);
	return ok ? 0 : -CNL_EAUTH;
}

/*
 * POST /v1/auth/logout: end the session whose token made the request, and
 * every notebook proxy cookie of its user: a browser that opened a server
 * is signed out with the CLI (the cookie is not made from a session, so
 * it cannot tell which login it belongs to; all of them end).
 */
void cnl_api_h_logout(void *call, struct cnl_http_request *req,
                      struct cnl_http_response *resp)
{
	struct call *c = call;
	int r;

	(void)req;
	if (!c->session[0]) {
		cnl_http_error(resp, 400, "bad_request",
		               "the bearer is not a session: an API token is "
		               "revoked with cnlab token revoke, an OIDC ID "
		               "token at its provider");
		return;
	}
	snprintf(c->target, sizeof(c->target), "session:%.100s", c->session);
	r = cnl_store_doc_delete(c->api->store, SESSION_KIND, c->session);
	if (r == 0 || r == -CNL_ENOTFOUND)
		r = sessions_revoke_all(c->api->store, PROXY_KIND, c->user.id);
	if (r < 0 && r != -CNL_ENOTFOUND) {
		cnl_api_store_error(c, resp, r, "session");
		return;
	}
	cnl_http_reply(resp, 200, json_pack("{s:s}", "revoked", c->session));
	/* The dashboard's cookie (api_cookie.c) goes with its session. */
	free(resp->headers);
	resp->headers = cnl_xstrdup(
	    c->api->tls
	        ? "Set-Cookie: " CNL_API_UI_COOKIE_TLS
	          "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict; "
	          "Secure\r\n"
	        : "Set-Cookie: " CNL_API_UI_COOKIE
	          "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict\r\n");
}

/* ------------------------------------------------------------------------ */
/* Disabled users                                                           */
/* ------------------------------------------------------------------------ */

bool cnl_api_user_disabled(struct cnl_store *s, const char *user_id)
{
	struct cnl_store_doc d = {0};
	int r = cnl_store_doc_get(s, DISABLED_KIND, user_id, &d);

	/* A read that failed (a busy reader, api.c's serve_read()) refuses:
	 * it cannot tell the user is still enabled. */
	if (r == -CNL_ENOTFOUND)
		return false;
	if (r == 0)
		cnl_store_doc_done(&d);
	return true;
}

/* The user's state for user list/show: "disabled" and OIDC links. */
void cnl_api_user_state_json(struct cnl_store *s, const char *user_id,
                             json_t *o)
{
	struct cnl_store_doc d[16];
	json_t *links = json_array();
	int n = 0;

	json_object_set_new(o, "disabled",
	                    json_boolean(cnl_api_user_disabled(s, user_id)));
	if (cnl_store_doc_list(s, OIDC_KIND, user_id, NULL, 16, d, &n) == 0) {
		for (int i = 0; i < n; i++) {
			json_t *b = json_loads(d[i].body, 0, NULL);

			if (b)
				json_array_append_new(
				    links,
				    json_pack("{s:O?,s:O?}", "issuer",
				              json_object_get(b, "iss"),
				              "subject",
				              json_object_get(b, "sub")));
			json_decref(b);
		}
		cnl_store_docs_done(d, n);
	}
	json_object_set_new(o, "oidc", links);
}

/* Whether @user_id is an administrator (the system project's "admin"). */
static bool is_admin(struct cnl_store *s, const char *user_id)
{
	struct cnl_store_project sys;
	char role[CNL_STORE_ROLE_MAX];

	return cnl_store_project_get_by_name(s, CNL_API_ADMIN_PROJECT, &sys) ==
	           0 &&
	       cnl_store_membership_get_role(s, user_id, sys.id, role,
	                                     sizeof(role)) == 0 &&
	       strcmp(role, "admin") == 0;
}

/* How many administrators other than @user_id are enabled. */
static int other_enabled_admins(struct cnl_store *s, const char *user_id)
{
	struct cnl_store_membership m[CNL_STORE_LIST_MAX];
	struct cnl_store_project sys;
	int n = 0, count = 0;

	if (cnl_store_project_get_by_name(s, CNL_API_ADMIN_PROJECT, &sys) < 0 ||
	    cnl_store_membership_list_project(s, sys.id, NULL,
	                                      CNL_STORE_LIST_MAX, m, &n) < 0)
		return 0;
	for (int i = 0; i < n; i++)
		if (strcmp(m[i].role, "admin") == 0 &&
		    strcmp(m[i].user_id, user_id) != 0 &&
		    !cnl_api_user_disabled(s, m[i].user_id))
			count++;
	return count;
}

static void user_reply(struct call *c, const struct cnl_store_user *u,
                       struct cnl_http_response *resp)
{
	json_t *o = cnl_api_user_json(u);

	cnl_api_user_state_json(c->api->store, u->id, o);
	cnl_http_reply(resp, 200, o);
}

/*
 * POST /v1/users/{user}/disable: every credential of the user is refused
 * from the next request on (401 "account disabled"); their running jobs
 * and servers are left alone.  The last enabled administrator cannot be
 * disabled (409).
 */
void cnl_api_h_user_disable(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store *s = c->api->store;
	struct cnl_store_user u;
	json_t *o;
	int r;

	if (cnl_api_path_user(c, req, resp, &u) < 0)
		return;
	snprintf(c->target, sizeof(c->target), "%s", u.id);
	if (!cnl_api_user_disabled(s, u.id) && is_admin(s, u.id) &&
	    other_enabled_admins(s, u.id) == 0) {
		cnl_http_error(resp, 409, "conflict",
		               "%s is the last enabled administrator: make "
		               "another one first",
		               u.name);
		return;
	}
	o = json_pack("{s:s,s:I}", "by", c->user.id, "disabled_ms",
	              (json_int_t)c->now_ms);
	r = cnl_api_doc_save(c, DISABLED_KIND, u.id, u.id, "", o, false);
	json_decref(o);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "user");
		return;
	}
	user_reply(c, &u, resp);
}

/* POST /v1/users/{user}/enable: API tokens work again; the sessions and
 * notebook proxy cookies of before do not (they are deleted here: the user
 * logs in, and opens their servers, again). */
void cnl_api_h_user_enable(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store *s = c->api->store;
	struct cnl_store_user u;
	int r;

	if (cnl_api_path_user(c, req, resp, &u) < 0)
		return;
	snprintf(c->target, sizeof(c->target), "%s", u.id);
	/* The sessions of before the disable end here, with it. */
	if ((r = cnl_store_tx_begin(s)) == 0) {
		r = cnl_store_doc_delete(s, DISABLED_KIND, u.id);
		if (r == -CNL_ENOTFOUND)
			r = 0;
		if (r == 0)
			r = cnl_api_sessions_end(s, u.id);
		if (r == 0)
			r = cnl_store_tx_commit(s);
		if (r < 0)
			cnl_store_tx_rollback(s);
	}
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "user");
		return;
	}
	user_reply(c, &u, resp);
}

/* ------------------------------------------------------------------------ */
/* OIDC identities                                                          */
/* ------------------------------------------------------------------------ */

/* The id of the link document of (@iss, @sub). */
static int link_id(const char *iss, const char *sub,
                   char out[CNL_AUTH_DIGEST_MAX])
{
	char both[CNL_OIDC_ISS_MAX + CNL_OIDC_SUB_MAX + 2];

	snprintf(both, sizeof(both), "%s\n%s", iss, sub);
	return cnl_auth_token_digest(both, out);
}

static int link_save(struct call *c, const char *iss, const char *sub,
                     const char *user_id)
{
	char id[CNL_AUTH_DIGEST_MAX];
	json_t *o;
	int r;

	if ((r = link_id(iss, sub, id)) < 0)
		return r;
	o = json_pack("{s:s,s:s,s:s}", "iss", iss, "sub", sub, "user_id",
	              user_id);
	r = cnl_api_doc_save(c, OIDC_KIND, id, user_id, "", o, true);
	json_decref(o);
	return r;
}

/* Whether @s holds a control byte. */
static bool has_control(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return false;
}

/*
 * Whether @name is a valid user name that nobody has, and none that looks
 * like authority: a self-made "admin" in a member list or the audit log
 * invites an administrator to grant it a role meant for someone else.
 */
static bool name_free(struct cnl_store *s, const char *name)
{
	static const char *const reserved[] = {
	    "admin", "administrator", "root", "system",
	    "cnlab", "cnlabd",        "kube", /* cnlabd's Kubernetes scheduler's
	                                         service user */
	};
	struct cnl_store_user u;

	/* "peer-NAME": a peer site's service user (api_peers.c). */
	if (strncasecmp(name, "peer-", 5) == 0)
		return false;
	for (size_t i = 0; i < CNL_ARRAY_SIZE(reserved); i++)
		if (strcasecmp(name, reserved[i]) == 0)
			return false;
	return cnl_jwt_name_valid(name) &&
	       cnl_store_user_get_by_name(s, name, &u) == -CNL_ENOTFOUND;
}

/*
 * Choose the name of the user made at the first sign-in of @id: the
 * username hint, the e-mail's local part, or "oidc-" and hex of the link
 * id, whichever is first valid and free.  Never a taken name.
 */
static int new_user_name(struct cnl_store *s,
                         const struct cnl_oidc_identity *id, const char *link,
                         char *out, size_t len)
{
	char buf[CNL_STORE_NAME_MAX];
	const char *at = strchr(id->email, '@');

	if (id->username[0] && name_free(s, id->username)) {
		snprintf(out, len, "%s", id->username);
		return 0;
	}
	if (at && at > id->email && (size_t)(at - id->email) < sizeof(buf)) {
		snprintf(buf, sizeof(buf), "%.*s", (int)(at - id->email),
		         id->email);
		if (name_free(s, buf)) {
			snprintf(out, len, "%s", buf);
			return 0;
		}
	}
	for (int n = 12; n <= 40; n += 4) {
		snprintf(buf, sizeof(buf), "oidc-%.*s", n, link);
		if (name_free(s, buf)) {
			snprintf(out, len, "%s", buf);
			return 0;
		}
	}
	return -CNL_EDUP;
}

/*
 * The audit record of a user made at a first OIDC sign-in: no route's
 * record names it (the request that made it may be any, even one then
 * refused), so it gets its own, by the new user: "user.create_oidc".
 */
static void audit_oidc_create(struct call *c, const struct cnl_store_user *u,
                              const char *link)
{
	struct cnl_store_audit a = {0};
	int r;

	a.ts_ms = c->now_ms;
	snprintf(a.actor, sizeof(a.actor), "%s", u->id);
	snprintf(a.action, sizeof(a.action), "user.create_oidc");
	snprintf(a.target, sizeof(a.target), "%s", u->id);
	snprintf(a.result, sizeof(a.result), "201 %.20s oidc-link:%.16s",
	         u->name, link);
	if ((r = cnl_store_audit_append(c->api->store, &a, NULL)) < 0)
		cnl_log(CNL_LOG_ERROR, "audit append failed",
		        "action=user.create_oidc err=%s", cnl_errname(r));
}

int cnl_api_oidc_user(struct call *c, const struct cnl_oidc_identity *id,
                      struct cnl_store_user *ret)
{
	struct cnl_store *s = c->api->store;
	struct cnl_store_doc d = {0};
	struct cnl_store_user u = {0};
	char link[CNL_AUTH_DIGEST_MAX];
	int r;

	if ((r = link_id(id->iss, id->sub, link)) < 0)
		return r;
	r = cnl_store_doc_get(s, OIDC_KIND, link, &d);
	if (r == 0) {
		r = cnl_store_user_get(s, d.parent, ret);
		cnl_store_doc_done(&d);
		return r;
	}
	if (r != -CNL_ENOTFOUND)
		return r;
	/* First sign-in of this (iss, sub): a new user, with no role. */
	if ((r = new_user_name(s, id, link, u.name, sizeof(u.name))) < 0 ||
	    (r = cnl_api_new_id(c, "usr", u.id)) < 0)
		return r;
	u.created_ms = c->now_ms;
	if ((r = cnl_store_tx_begin(s)) < 0)
		return r;
	r = cnl_store_user_create(s, &u);
	if (r == 0)
		r = link_save(c, id->iss, id->sub, u.id);
	if (r == 0)
		r = cnl_store_tx_commit(s);
	if (r < 0) {
		cnl_store_tx_rollback(s);
		return r;
	}
	cnl_log(CNL_LOG_INFO, "OIDC user created", "user=%s id=%s", u.name,
	        u.id);
	audit_oidc_create(c, &u, link);
	*ret = u;
	return 0;
}

/*
 * POST /v1/users/{user}/oidc {"subject", "issuer"}: the OIDC identity
 * (issuer, default the configured one; subject) signs in as this user
 * from now on.  An identity already linked to someone is 409.
 */
void cnl_api_h_user_link(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp)
{
	static const char *const fields[] = {"subject", "issuer", NULL};
	struct call *c = call;
	struct cnl_store_user u;
	const char *sub, *iss = c->api->oidc_issuer;
	json_t *body;
	char err[256];
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (cnl_api_path_user(c, req, resp, &u) < 0)
		goto out;
	snprintf(c->target, sizeof(c->target), "%s", u.id);
	if (!(sub =
	          cnl_api_get_string(body, "subject", CNL_OIDC_SUB_MAX, resp)))
		goto out;
	if (cnl_json_get_string(body, "issuer", false, &iss, err, sizeof(err)) <
	    0) {
		cnl_api_bad(resp, err);
		goto out;
	}
	if (!iss || !iss[0] || strlen(iss) >= CNL_OIDC_ISS_MAX) {
		cnl_api_bad(resp, "field \"issuer\": required (1..255 bytes) "
		                  "when the server has no oidc_issuer");
		goto out;
	}
	/* A line break would let ("a\nb", "c") and ("a", "b\nc") share
	 * one link id: no control bytes in either. */
	if (has_control(sub) || has_control(iss)) {
		cnl_api_bad(resp, has_control(sub)
		                      ? "field \"subject\": control characters "
		                        "are not allowed"
		                      : "field \"issuer\": control characters "
		                        "are not allowed");
		goto out;
	}
	r = link_save(c, iss, sub, u.id);
	if (r == -CNL_EDUP) {
		cnl_http_error(resp, 409, "conflict",
		               "field \"subject\": this OIDC identity is "
		               "already linked to a user");
		goto out;
	}
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "user");
		goto out;
	}
	user_reply(c, &u, resp);
out:
	json_decref(body);
}

/*
 * DELETE /v1/users/{user}/oidc?subject=SUB[&issuer=ISS]: the OIDC identity
 * (issuer, default the configured one; subject) no longer signs in as
 * this user, and the user's sessions made from it end.  Its next sign-in
 * makes a fresh user without any role.  Not linked to this user: 404.
 */
void cnl_api_h_user_unlink(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store *s = c->api->store;
	struct cnl_store_doc d = {0}, ses[64];
	struct cnl_store_user u;
	const char *sub = cnl_http_query(req, "subject");
	const char *iss = cnl_http_query(req, "issuer");
	const char *after = NULL;
	char id[CNL_AUTH_DIGEST_MAX], last[CNL_STORE_DOC_ID_MAX];
	bool mine;
	int n = 0, r;

	if (!iss || !iss[0])
		iss = c->api->oidc_issuer;
	if (cnl_api_path_user(c, req, resp, &u) < 0)
		return;
	snprintf(c->target, sizeof(c->target), "%s", u.id);
	if (!sub || !sub[0] || strlen(sub) >= CNL_OIDC_SUB_MAX ||
	    has_control(sub)) {
		cnl_api_bad(resp, "query \"subject\": required (1..127 bytes, "
		                  "no control characters)");
		return;
	}
	if (!iss || !iss[0] || strlen(iss) >= CNL_OIDC_ISS_MAX ||
	    has_control(iss)) {
		cnl_api_bad(resp, "query \"issuer\": required (1..255 bytes) "
		                  "when the server has no oidc_issuer");
		return;
	}
	if ((r = link_id(iss, sub, id)) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot hash");
		return;
	}
	r = cnl_store_doc_get(s, OIDC_KIND, id, &d);
	if (r < 0 && r != -CNL_ENOTFOUND) {
		cnl_api_store_error(c, resp, r, "user");
		return;
	}
	mine = r == 0 && strcmp(d.parent, u.id) == 0;
	if (r == 0)
		cnl_store_doc_done(&d);
	if (!mine) {
		cnl_http_error(resp, 404, "not_found",
		               "%s has no OIDC link with subject \"%s\" of "
		               "issuer %s",
		               u.name, sub, iss);
		return;
	}
	if ((r = cnl_store_tx_begin(s)) == 0) {
		r = cnl_store_doc_delete(s, OIDC_KIND, id);
		/* The sessions this identity made end with the link. */
		while (r == 0 &&
		       (r = cnl_store_doc_list(s, SESSION_KIND, u.id, after, 64,
		                               ses, &n)) == 0 &&
		       n > 0) {
			for (int i = 0; r == 0 && i < n; i++) {
				json_t *o = json_loads(ses[i].body, 0, NULL);
				const char *l = json_string_value(
				    json_object_get(o, "oidc_link"));

				if (l && strcmp(l, id) == 0)
					r = cnl_store_doc_delete(
					    s, SESSION_KIND, ses[i].id);
				json_decref(o);
			}
			snprintf(last, sizeof(last), "%s", ses[n - 1].id);
			after = last;
			cnl_store_docs_done(ses, n);
			if (n < 64)
				break;
		}
		if (r == 0)
			r = cnl_store_tx_commit(s);
		if (r < 0)
			cnl_store_tx_rollback(s);
	}
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "user");
		return;
	}
	user_reply(c, &u, resp);
}

/*
 * GET /v1/auth/oidc (public): what `cnlab login --web` needs to run an
 * authorization code flow with PKCE against the identity provider.
 */
void cnl_api_h_oidc_config(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_api *api = c->api;

	(void)req;
	if (!api->oidc || !api->oidc_authorize_url || !api->oidc_token_url) {
		cnl_http_error(resp, 404, "not_found",
		               "browser sign-in is not configured on this "
		               "server (oidc_authorization_endpoint, "
		               "oidc_token_endpoint)");
		return;
	}
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:s,s:s,s:s,s:s}", "issuer",
	                         api->oidc_issuer, "client_id",
	                         api->oidc_client_id, "authorization_endpoint",
	                         api->oidc_authorize_url, "token_endpoint",
	                         api->oidc_token_url, "scope",
	                         "openid profile email"));
}

/* POST /v1/auth/session: an OIDC ID token (the bearer) for a session. */
void cnl_api_h_oidc_session(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;

	(void)req;
	if (!c->oidc_done || c->oidc_r < 0) {
		cnl_http_error(resp, 400, "bad_request",
		               "send an OIDC ID token as the bearer to get a "
		               "session");
		return;
	}
	snprintf(c->target, sizeof(c->target), "%s", c->user.id);
	cnl_api_session_reply(c, &c->user, resp);
}

/* ------------------------------------------------------------------------ */
/* Idempotency per user                                                     */
/* ------------------------------------------------------------------------ */

/* Hex SHA-256 of @kind, the project and the body. */
static int request_hash(struct call *c, struct cnl_http_request *req,
                        const char *kind, char out[CNL_AUTH_DIGEST_MAX])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	EVP_MD_CTX *x = EVP_MD_CTX_new();
	bool ok;

	ok = x && EVP_DigestInit_ex(x, EVP_sha256(), NULL) == 1 &&
	     EVP_DigestUpdate(x, kind, strlen(kind) + 1) == 1 &&
	     EVP_DigestUpdate(x, c->project.id, strlen(c->project.id) + 1) ==
	         1 &&
	     EVP_DigestUpdate(x, req->body, req->body_len) == 1 &&
	     EVP_DigestFinal_ex(x, md, &mdlen) == 1 && mdlen == 32;
	EVP_MD_CTX_free(x);
	if (!ok)
		return -EIO;
	for (unsigned int i = 0; i < mdlen; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[2 * mdlen] = '\0';
	return 0;
}

int cnl_api_idem_key(struct call *c, struct cnl_http_request *req,
                     struct cnl_http_response *resp, const char *kind,
                     const char **ret)
{
	struct cnl_store_doc d = {0};
	char scoped[CNL_STORE_IDEM_MAX + CNL_ID_MAX + 2];
	const char *key;
	json_t *o;
	bool same;
	int r;

	*ret = NULL;
	if (cnl_api_get_idem_key(req, resp, &key) < 0)
		return -1;
	if (!key)
		return 0;
	snprintf(scoped, sizeof(scoped), "%s\n%s", c->user.id, key);
	if (cnl_auth_token_digest(scoped, c->idem.key) < 0 ||
	    request_hash(c, req, kind, c->idem.hash) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot hash");
		return -1;
	}
	r = cnl_store_doc_get(c->api->store, IDEM_KIND, c->idem.key, &d);
	if (r < 0 && r != -CNL_ENOTFOUND) {
		cnl_api_store_error(c, resp, r, "idempotency key");
		return -1;
	}
	if (r == 0) {
		o = json_loads(d.body, 0, NULL);
		same =
		    strcmp(json_string_value(json_object_get(o, "sha256"))
		               ? json_string_value(json_object_get(o, "sha256"))
		               : "",
		           c->idem.hash) == 0;
		json_decref(o);
		cnl_store_doc_done(&d);
		if (!same) {
			cnl_http_error(
			    resp, 422, "idempotency_conflict",
			    "header \"Idempotency-Key\": already used "
			    "by you for a different request (another "
			    "body, project or route); use a new key");
			return -1;
		}
		c->idem.replay = true;
	}
	*ret = c->idem.key;
	return 0;
}

int cnl_api_idem_record(struct call *c, const char *object_id)
{
	json_t *o = json_pack("{s:s,s:s}", "sha256", c->idem.hash, "object_id",
	                      object_id);
	int r = cnl_api_doc_save(c, IDEM_KIND, c->idem.key, c->user.id, "", o,
	                         false);

	json_decref(o);
	return r;
}
