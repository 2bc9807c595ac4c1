/*
 * api_cookie.c - the browser's session: the cookie that carries a session
 * JWT (POST /v1/auth/cookie), its CSRF token (GET /v1/auth/csrf) and the
 * checks every cookie-authenticated request passes (those are in
 * api_csrf.c, which api_authn.c calls).
 *
 * The cookie is the very session a login gives (a "session" document, its
 * JWT signed with the API's key), so logout, disable, enable, a new
 * password and a removed membership end it as they end a bearer's:
 *
 *   Set-Cookie: cnlab_ui=<JWT>; Path=/; HttpOnly; SameSite=Strict;
 *               Max-Age=<seconds left>
 *
 * over TLS named __Host-cnlab_ui and Secure (the prefix makes the browser
 * refuse it without Secure, with a Domain, or with another Path).  Its
 * name is its own (api-internal.h): the notebook proxy's cookie is
 * another, and the proxy strips this one before a tenant's server sees a
 * request.
 *
 * CSRF.  A request authenticated by the cookie, with any method but GET
 * and HEAD, must carry X-CSRF-Token equal to HMAC-SHA256(API key, "csrf:"
 * session id) in hex (stateless: nothing stored; a new session, a new
 * token), and, when it has an Origin header, that origin must be the
 * request's own (scheme of the listener, Host header).  Otherwise 403
 * naming the header.  The sign-in itself (POST /v1/auth/cookie) is refused
 * with 403 from another Origin too: a cross-site form could otherwise sign
 * the victim's browser in to the attacker's account (login CSRF).  A bearer
 * wins over the cookie when both are sent, and a bearer request needs no CSRF
 * token (a browser never adds one).
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "cnlab/errors.h"
#include "common/json.h"
#include "common/util.h"
#include "server/api-internal.h"

#define CSRF_HEX 64

int cnl_api_cookie_header(struct call *c, const char *token,
                          const struct cnl_auth_claims *cl, char *hdr,
                          size_t len)
{
	int64_t left = cl->exp - c->now_ms / 1000;
	int n = snprintf(
	    hdr, len,
	    "Set-Cookie: %s=%s; Path=/; HttpOnly; "
	    "SameSite=Strict; Max-Age=%lld%s\r\n",
	    c->api->tls ? CNL_API_UI_COOKIE_TLS : CNL_API_UI_COOKIE, token,
	    (long long)(left > 0 ? left : 0), c->api->tls ? "; Secure" : "");

	return n > 0 && (size_t)n < len ? 0 : -1;
}

/* The answer to a sign-in: the cookie for @token (claims @cl) and the
 * body {"user", "role", "csrf", "expires_at"}. */
static void cookie_reply(struct call *c, const char *token,
                         const struct cnl_auth_claims *cl,
                         struct cnl_http_response *resp)
{
	char csrf[CSRF_HEX + 1], hdr[CNL_AUTH_JWT_MAX + 200];

	if (cnl_api_authenticate_role(c, resp) < 0)
		return;
	if (cnl_api_cookie_header(c, token, cl, hdr, sizeof(hdr)) < 0) {
		cnl_http_error(resp, 500, "internal", "session too long");
		return;
	}
	cnl_api_csrf_of(c->api, cl->jti, csrf);
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:s,s:s,s:o}", "user", c->user.name,
	                         "role", c->is_admin ? "admin" : "user", "csrf",
	                         csrf, "expires_at",
	                         cnl_api_time_json(cl->exp * 1000)));
	free(resp->headers);
	resp->headers = cnl_xstrdup(hdr);
}

static void refuse(struct cnl_http_response *resp, const char *what)
{
	cnl_http_error(resp, 401, "unauthenticated", "%s", what);
}

void cnl_api_h_auth_cookie(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	static const char *const fields[] = {"user", "password", "token", NULL};
	struct call *c = call;
	struct cnl_auth_claims cl = {0};
	const char *origin = cnl_http_header(req, "Origin");
	const char *token, *name, *password;
	json_t *body;
	char err[256];

	/* Login CSRF: another site's form (text/plain can carry JSON)
	 * would otherwise sign the browser in to the attacker's account. */
	if (origin && !cnl_api_same_origin(c, req, origin)) {
		cnl_http_error(resp, 403, "forbidden",
		               "header \"Origin\": %.200s is not this server's "
		               "origin: sign in from the dashboard's own pages",
		               origin);
		return;
	}
	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	token = json_string_value(json_object_get(body, "token"));
	if (token) {
		/* A session got otherwise (OIDC, an invitation): the same
		 * session, carried by the cookie from now on. */
		if (json_object_get(body, "user") ||
		    json_object_get(body, "password")) {
			cnl_http_error(
			    resp, 400, "bad_request",
			    "field \"token\": give either a token or "
			    "user and password, not both");
			goto out;
		}
		if (strlen(token) > CNL_AUTH_JWT_MAX ||
		    cnl_auth_jwt_verify(token, c->api->key, c->api->keylen,
		                        CNL_API_AUDIENCE, c->now_ms / 1000,
		                        &cl) < 0 ||
		    cnl_api_session_live(c, &cl) < 0 ||
		    cnl_store_user_get(c->st, cl.sub, &c->user) < 0) {
			refuse(resp, "field \"token\": invalid or expired "
			             "session token");
			goto out;
		}
		snprintf(c->actor, sizeof(c->actor), "%s", c->user.id);
		snprintf(c->target, sizeof(c->target), "%s", c->user.id);
		cookie_reply(c, token, &cl, resp);
		goto out;
	}
	if (cnl_json_get_string(body, "user", true, &name, err, sizeof(err)) <
	        0 ||
	    cnl_json_get_string(body, "password", true, &password, err,
	                        sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		goto out;
	}
	snprintf(c->actor, sizeof(c->actor), "%s", name);
	snprintf(c->target, sizeof(c->target), "%s", name);
	/* Checked before the lock, as a login's (cnl_api_prepare_login). */
	if (!c->slow.password_ok ||
	    cnl_store_user_get(c->api->store, c->slow.user_id, &c->user) < 0) {
		refuse(resp, "invalid user name or password");
		goto out;
	}
	snprintf(c->actor, sizeof(c->actor), "%s", c->user.id);
	snprintf(c->target, sizeof(c->target), "%s", c->user.id);
	/* A new session, as a login makes; its token goes in the cookie
	 * only, never in the body a script could read. */
	cnl_api_session_reply(c, &c->user, resp);
	if (resp->status != 200)
		goto out;
	token = json_string_value(json_object_get(resp->body, "token"));
	if (!token ||
	    cnl_auth_jwt_verify(token, c->api->key, c->api->keylen,
	                        CNL_API_AUDIENCE, c->now_ms / 1000, &cl) < 0) {
		cnl_http_error(resp, 500, "internal",
		               "cannot read the session");
		goto out;
	}
	{
		char *t = cnl_xstrdup(token);

		cookie_reply(c, t, &cl, resp);
		explicit_bzero(t, strlen(t));
		free(t);
	}
out:
	json_decref(body);
}

void cnl_api_h_auth_csrf(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp)
{
	struct call *c = call;
	char csrf[CSRF_HEX + 1];

	(void)req;
	if (!c->session[0]) {
		cnl_http_error(resp, 400, "bad_request",
		               "the credential is not a session (an API token "
		               "or an OIDC ID token): no CSRF token");
		return;
	}
	cnl_api_csrf_of(c->api, c->session, csrf);
	cnl_http_reply(resp, 200, json_pack("{s:s}", "csrf", csrf));
}
