/*
 * api_authn.c - who the caller of a request is: the bearer credential (an
 * API token, an OIDC ID token, or one of our HS256 JWTs) read into the
 * call's user, and the user's role in the system project (administrator,
 * node agent).  The API's policy (api.c) and the notebook proxy
 * (api_proxy.c) both ask here; authorization (what the caller may do) is
 * theirs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cnlab/errors.h"
#include "common/log.h"
#include "server/api-internal.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/oidc.h"

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

/*
 * Who a bearer credential names: an API token ("cnl_..."), an OIDC ID
 * token (RS256, when configured; the user its (iss, sub) is linked to, made
 * at the first sign-in), or one of our HS256 session JWTs (whose session
 * must be live: not logged out, not expired).  Sets c->user; returns 0, or
 * -1 with a 401 (or 500) in @resp.
 */
static int identify(struct call *c, const char *h,
                    struct cnl_http_response *resp)
{
	struct cnl_store *s = c->st;
	struct cnl_auth_claims claims;
	char digest[CNL_AUTH_DIGEST_MAX];
	int r;

	if (strncmp(h, CNL_AUTH_TOKEN_PREFIX, strlen(CNL_AUTH_TOKEN_PREFIX)) ==
	    0) {
		struct cnl_store_doc d = {0};
		json_t *o;
		int64_t exp = 0;

		if (cnl_auth_token_check(h) < 0 ||
		    cnl_auth_token_digest(h, digest) < 0)
			goto refuse;
		if ((r = cnl_store_doc_get(s, "token", digest, &d)) < 0) {
			if (r == -CNL_ENOTFOUND)
				goto refuse;
			cnl_api_store_error(c, resp, r, "token");
			return -1;
		}
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
		snprintf(c->api_token, sizeof(c->api_token), "%s", digest);
		r = cnl_store_user_get(s, claims.sub, &c->user);
	} else if (c->api->oidc && cnl_oidc_looks_like(h)) {
		/* Verified before the lock was taken (oidc_check()). */
		if (!c->oidc_done || c->oidc_r < 0)
			goto refuse;
		/* By (iss, sub), never by name (api_session.c). */
		r = cnl_api_oidc_user(c, &c->oidc, &c->user);
	} else {
		if (c->jwt_done)
			claims = c->jwt; /* checked before the lock */
		if (c->jwt_done
		        ? c->jwt_r < 0
		        : cnl_auth_jwt_verify(h, c->api->key, c->api->keylen,
		                              CNL_API_AUDIENCE,
		                              c->now_ms / 1000, &claims) < 0)
			goto refuse;
		if ((r = cnl_api_session_live(c, &claims)) == -CNL_EAUTH)
			goto refuse;
		if (r < 0) {
			cnl_api_store_error(c, resp, r, "session");
			return -1;
		}
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

int cnl_api_authenticate_role(struct call *c, struct cnl_http_response *resp)
{
	char role[CNL_STORE_ROLE_MAX];
	int r;

	if ((r = system_role(c->st, c->user.id, role, sizeof(role))) < 0) {
		cnl_api_store_error(c, resp, r, "user");
		return -1;
	}
	/* Whatever the credential: a disabled user is refused from the
	 * next request on (api_session.c). */
	if (cnl_api_user_disabled(c->st, c->user.id)) {
		cnl_http_error(resp, 401, "unauthenticated",
		               "account disabled: ask an administrator (cnlab "
		               "user enable %s)",
		               c->user.name);
		return -1;
	}
	c->is_admin = strcmp(role, "admin") == 0;
	c->is_agent = strcmp(role, "agent") == 0;
	c->authed = true;
	snprintf(c->actor, sizeof(c->actor), "%s", c->user.id);
	return 0;
}

/*
 * Returns 0, or -1 with a 401 (or 500, or a cookie's 403) in @resp.  The
 * bearer, else the dashboard's session cookie (api_cookie.c), which holds
 * a session JWT only and, for a method other than GET or HEAD, must come
 * with its CSRF token and from this server's origin.
 */
static int authenticate(struct call *c, struct cnl_http_request *req,
                        struct cnl_http_response *resp)
{
	const char *h = cnl_http_header(req, "Authorization");
	char cookie[CNL_AUTH_JWT_MAX + 1];

	if ((!h || strncasecmp(h, "Bearer ", 7) != 0) &&
	    cnl_api_cookie_token(c, req, cookie, sizeof(cookie)) == 0) {
		/* Only our session JWTs: never an API token or an ID
		 * token, which a cookie has no business carrying. */
		c->jwt_done = false;
		if (strncmp(cookie, CNL_AUTH_TOKEN_PREFIX,
		            strlen(CNL_AUTH_TOKEN_PREFIX)) == 0 ||
		    (c->api->oidc && cnl_oidc_looks_like(cookie))) {
			cnl_http_error(resp, 401, "unauthenticated",
			               "invalid or expired session cookie");
			return -1;
		}
		if (identify(c, cookie, resp) < 0)
			return -1;
		c->cookie = true;
		if (cnl_api_cookie_check(c, req, resp) < 0)
			return -1;
		return cnl_api_authenticate_role(c, resp);
	}
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
	return cnl_api_authenticate_role(c, resp);
}

int cnl_api_authenticate(struct call *c, struct cnl_http_request *req,
                         struct cnl_http_response *resp)
{
	return authenticate(c, req, resp);
}

/*
 * An OIDC ID token in the request is verified before the API's lock is
 * taken: verification may fetch the issuer's keys.  identify() then only
 * looks the user up.  So is one of our session JWTs (its HMAC and claims:
 * CPU the lock need not cover, under a burst of submissions); identify()
 * then checks its session and user in the store, under the lock.
 */
void cnl_api_oidc_check(struct call *c, struct cnl_http_request *req)
{
	const char *h = cnl_http_header(req, "Authorization");
	char err[256];

	if (!h || strncasecmp(h, "Bearer ", 7) != 0)
		return;
	for (h += 7; *h == ' ';)
		h++;
	/* The same choice as identify()'s, in the same order. */
	if (strncmp(h, CNL_AUTH_TOKEN_PREFIX, strlen(CNL_AUTH_TOKEN_PREFIX)) ==
	    0)
		return;
	if (!c->api->oidc || !cnl_oidc_looks_like(h)) {
		c->jwt_done = true;
		c->jwt_r = cnl_auth_jwt_verify(h, c->api->key, c->api->keylen,
		                               CNL_API_AUDIENCE,
		                               c->now_ms / 1000, &c->jwt);
		return;
	}
	c->oidc_done = true;
	c->oidc_r = cnl_oidc_verify(c->api->oidc, h, c->now_ms / 1000, &c->oidc,
	                            err, sizeof(err));
	if (c->oidc_r < 0)
		cnl_log(CNL_LOG_INFO, "OIDC token refused", "why=%s", err);
}

void cnl_api_grant_of(const struct call *c, struct cnl_api_grant *g)
{
	memset(g, 0, sizeof(*g));
	snprintf(g->user_id, sizeof(g->user_id), "%s", c->user.id);
	snprintf(g->session, sizeof(g->session), "%s", c->session);
	snprintf(g->api_token, sizeof(g->api_token), "%s", c->api_token);
	g->admin = c->is_admin;
}

/* Is the API token of digest @digest still there and unexpired, for @user? */
static bool token_live(struct call *c, const char *digest, const char *user)
{
	struct cnl_store_doc d = {0};
	json_t *o;
	bool ok;

	if (cnl_store_doc_get(c->st, "token", digest, &d) < 0)
		return false;
	o = json_loads(d.body, 0, NULL);
	ok = o && strcmp(json_string_value(json_object_get(o, "user_id"))
	                     ? json_string_value(json_object_get(o, "user_id"))
	                     : "",
	                 user) == 0;
	if (ok) {
		int64_t exp =
		    json_integer_value(json_object_get(o, "expires_ms"));

		ok = !exp || exp > c->now_ms;
	}
	json_decref(o);
	cnl_store_doc_done(&d);
	return ok;
}

int cnl_api_grant_live(struct call *c, const struct cnl_api_grant *g)
{
	struct cnl_http_response resp = {0};
	int r;

	if ((r = cnl_store_user_get(c->st, g->user_id, &c->user)) < 0)
		return r == -CNL_ENOTFOUND ? -CNL_EAUTH : r;
	r = cnl_api_authenticate_role(c, &resp);
	json_decref(resp.body);
	free(resp.headers);
	if (r < 0 || c->is_admin != g->admin)
		return -CNL_EAUTH;
	if (g->session[0]) {
		struct cnl_auth_claims cl = {0};

		snprintf(cl.jti, sizeof(cl.jti), "%s", g->session);
		snprintf(cl.sub, sizeof(cl.sub), "%s", g->user_id);
		if (cnl_api_session_live(c, &cl) < 0)
			return -CNL_EAUTH;
	}
	if (g->api_token[0] && !token_live(c, g->api_token, g->user_id))
		return -CNL_EAUTH;
	return 0;
}
