/*
 * api_oidc_web.c - single sign-on for the dashboard: the OpenID Connect
 * authorization code flow with PKCE (S256), run by cnlabd for the browser
 * (the page cannot: its CSP's connect-src 'self' forbids a fetch to the
 * identity provider, and the code verifier is better kept off the page).
 *
 *   GET /v1/auth/oidc/start[?return_to=/ui/#/...]  (public)
 *       a sign-in under way: a random pre-login cookie, state and code
 *       verifier, kept here (in memory, CNL_OIDC_WEB_TTL_MS), then
 *       302 to the provider's authorization endpoint with
 *       redirect_uri = SCHEME://HOST/v1/auth/oidc/callback, the state and
 *       the verifier's S256 challenge, and
 *       Set-Cookie: cnlab_oidc=<random>; Path=/v1/auth/oidc/; HttpOnly;
 *                   SameSite=Lax; Max-Age=600 [; Secure]
 *       (Lax: the provider sends the browser back by a cross-site
 *       top-level GET, which a Strict cookie would not follow).
 *   GET /v1/auth/oidc/callback?code=...&state=...  (public, audited as
 *       "auth.oidc")
 *       the sign-in the cookie names is taken out of the table first, so
 *       it is good for one callback whatever happens; then its state must
 *       equal the query's, the provider must not have answered an error,
 *       the code is exchanged at the token endpoint (with the verifier and
 *       the same redirect_uri) and the ID token checked by
 *       cnl_oidc_verify() exactly as a CLI's bearer is (issuer, audience,
 *       signature, dates), its (iss, sub) mapped to a user as for the CLI
 *       (cnl_api_oidc_user()), a session made (cnl_api_session_reply()),
 *       and the answer is 302 to the return_to path with the dashboard's
 *       cookie set (api_cookie.c) and the pre-login cookie cleared.
 *
 * Refusals, as JSON errors (no session, no cookie): no pre-login cookie
 * (400), a sign-in unknown, ended or already used (400), a state that is
 * not the one sent (400), an error from the provider (401, its code), no
 * code (400), a code the token endpoint refuses (401: a reused code, or
 * one bound to another verifier), an unreachable endpoint or a reply
 * without an ID token (502), an ID token that does not verify (401), a
 * disabled user (401).  return_to must be a local path: one '/' then not
 * '/' or '\\', no backslash, no control byte or space (an open redirect
 * otherwise); anything else is a 400 at the start.
 *
 * The exchange and the verification go over the network, so they run in
 * the route's prepare step, without the API's lock (cnl_api_serve); the
 * step takes the lock only to take the sign-in out of the table.  The
 * table holds CNL_OIDC_WEB_MAX sign-ins; when it is full the oldest goes
 * (a flood of starts can end others' sign-ins under way, never make one).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "cnlab/errors.h"
#include "common/base64.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "net/client.h"
#include "net/metrics.h"
#include "server/api-internal.h"
#include "server/auth.h"
#include "server/oidc.h"

#define CALLBACK_PATH "/v1/auth/oidc/callback"
#define RAND_BYTES    32
#define HEX_LEN       (2 * RAND_BYTES)
#define HOST_MAX      256

struct cnl_api_oidc_web {
	char
	    cookie[CNL_AUTH_DIGEST_MAX]; /* SHA-256 hex of its value; "" free */
	char state[HEX_LEN + 1];
	char verifier[HEX_LEN + 1];
	char redirect_uri[HOST_MAX + 64];
	char return_to[CNL_OIDC_WEB_RETURN_MAX];
	int64_t created_ms;
};

/* @n random bytes as lowercase hex into @out (2n + 1 bytes): 0 or -EIO. */
static int random_hex(char *out, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char b[RAND_BYTES];

	if (n > sizeof(b) || RAND_bytes(b, (int)n) != 1)
		return -EIO;
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[b[i] >> 4];
		out[2 * i + 1] = hex[b[i] & 15];
	}
	out[2 * n] = '\0';
	return 0;
}

/* Whether @s is a path on this server (see the header). */
static bool local_path(const char *s)
{
	if (s[0] != '/' || s[1] == '/' || s[1] == '\\' ||
	    strlen(s) >= CNL_OIDC_WEB_RETURN_MAX)
		return false;
	for (; *s; s++)
		if ((unsigned char)*s <= 0x20 || *s == 0x7f || *s == '\\')
			return false;
	return true;
}

/* Whether @h is a Host header fit for a URL: host[:port] of letters,
 * digits, '.', '-', ':', '[' and ']' (an IPv6 literal). */
static bool host_ok(const char *h)
{
	if (!h || !h[0] || strlen(h) >= HOST_MAX)
		return false;
	for (; *h; h++)
		if (!((*h >= 'a' && *h <= 'z') || (*h >= 'A' && *h <= 'Z') ||
		      (*h >= '0' && *h <= '9') || strchr(".-:[]", *h)))
			return false;
	return true;
}

/* @s percent-encoded (all but unreserved characters) onto @b. */
static void url_encode(struct cnl_metrics_buf *b, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";

	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || strchr("-._~", ch))
			cnl_mb_printf(b, "%c", ch);
		else
			cnl_mb_printf(b, "%%%c%c", hex[ch >> 4], hex[ch & 15]);
	}
}

/* A free slot of the table (made on first use), or the oldest. */
static struct cnl_api_oidc_web *slot(struct cnl_api *api, int64_t now_ms)
{
	struct cnl_api_oidc_web *t, *old = NULL;

	if (!api->oidc_web)
		api->oidc_web = cnl_xcalloc(CNL_OIDC_WEB_MAX, sizeof(*t));
	t = api->oidc_web;
	for (size_t i = 0; i < CNL_OIDC_WEB_MAX; i++) {
		if (!t[i].cookie[0] ||
		    t[i].created_ms + CNL_OIDC_WEB_TTL_MS <= now_ms)
			return &t[i];
		if (!old || t[i].created_ms < old->created_ms)
			old = &t[i];
	}
	return old;
}

void cnl_api_oidc_web_free(struct cnl_api *api)
{
	if (api->oidc_web)
		OPENSSL_cleanse(api->oidc_web,
		                CNL_OIDC_WEB_MAX * sizeof(*api->oidc_web));
	free(api->oidc_web);
	api->oidc_web = NULL;
}

static bool web_configured(const struct cnl_api *api)
{
	return api->oidc && api->oidc_authorize_url && api->oidc_token_url &&
	       api->oidc_client_id;
}

/* GET /v1/auth/oidc/start: see the header. */
void cnl_api_h_oidc_start(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_api *api = c->api;
	struct cnl_api_oidc_web w = {0}, *s;
	struct cnl_metrics_buf loc = {0};
	const char *ret = cnl_http_query(req, "return_to");
	const char *host = cnl_http_header(req, "Host");
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char value[HEX_LEN + 1], challenge[64], hdr[512];

	if (!web_configured(api)) {
		cnl_http_error(resp, 404, "not_found",
		               "browser sign-in is not configured on this "
		               "server (oidc_authorization_endpoint, "
		               "oidc_token_endpoint)");
		return;
	}
	if (!ret || !ret[0])
		ret = "/ui/";
	if (!local_path(ret)) {
		cnl_http_error(resp, 400, "bad_request",
		               "query \"return_to\": must be a path on this "
		               "server (one '/' first, no '//', no backslash, "
		               "space or control character, under %d bytes)",
		               CNL_OIDC_WEB_RETURN_MAX);
		return;
	}
	if (!host_ok(host)) {
		cnl_http_error(resp, 400, "bad_request",
		               "header \"Host\": missing or not a host[:port]");
		return;
	}
	if (random_hex(value, RAND_BYTES) < 0 ||
	    random_hex(w.state, RAND_BYTES) < 0 ||
	    random_hex(w.verifier, RAND_BYTES) < 0 ||
	    cnl_auth_token_digest(value, w.cookie) < 0 ||
	    EVP_Digest(w.verifier, strlen(w.verifier), md, &mdlen, EVP_sha256(),
	               NULL) != 1 ||
	    cnl_b64_encode(md, mdlen, CNL_B64_URL, challenge,
	                   sizeof(challenge)) < 0) {
		cnl_http_error(resp, 500, "internal",
		               "cannot make a sign-in (random bytes)");
		return;
	}
	snprintf(w.redirect_uri, sizeof(w.redirect_uri), "%s://%s%s",
	         api->tls ? "https" : "http", host, CALLBACK_PATH);
	snprintf(w.return_to, sizeof(w.return_to), "%s", ret);
	w.created_ms = c->now_ms;
	s = slot(api, c->now_ms);
	*s = w;

	cnl_mb_printf(&loc, "Location: %s%cresponse_type=code&client_id=",
	              api->oidc_authorize_url,
	              strchr(api->oidc_authorize_url, '?') ? '&' : '?');
	url_encode(&loc, api->oidc_client_id);
	cnl_mb_printf(&loc, "&redirect_uri=");
	url_encode(&loc, w.redirect_uri);
	cnl_mb_printf(&loc,
	              "&scope=openid%%20profile%%20email&state=%s"
	              "&code_challenge=%s&code_challenge_method=S256\r\n",
	              w.state, challenge);
	snprintf(hdr, sizeof(hdr),
	         "Set-Cookie: " CNL_API_OIDC_COOKIE
	         "=%s; Path=/v1/auth/oidc/; HttpOnly; SameSite=Lax; "
	         "Max-Age=%d%s\r\nReferrer-Policy: no-referrer\r\n",
	         value, (int)(CNL_OIDC_WEB_TTL_MS / 1000),
	         api->tls ? "; Secure" : "");
	cnl_mb_printf(&loc, "%s", hdr);
	resp->status = 302;
	resp->headers = loc.p;
	resp->content_type = "text/plain; charset=utf-8";
	resp->text = cnl_xstrdup("to the identity provider\n");
	OPENSSL_cleanse(&w, sizeof(w));
	OPENSSL_cleanse(value, sizeof(value));
}

/* Refuse the callback (prepare step): @status, a short @reason for the
 * page (refuse()) and the message. */
static void fail(struct call *c, unsigned status, const char *reason,
                 const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void fail(struct call *c, unsigned status, const char *reason,
                 const char *fmt, ...)
{
	va_list ap;

	c->oidc_web.status = status;
	c->oidc_web.reason = reason;
	va_start(ap, fmt);
	vsnprintf(c->oidc_web.err, sizeof(c->oidc_web.err), fmt, ap);
	va_end(ap);
}

/* Whether @s is short printable ASCII (a provider's error code). */
static bool printable(const char *s)
{
	if (strlen(s) > 64)
		return false;
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return false;
	return true;
}

/* The token endpoint's ID token for @code (@w's verifier and
 * redirect_uri), checked; 0 with c->oidc set, or -1 after fail(). */
static int exchange(struct call *c, const struct cnl_api_oidc_web *w,
                    const char *code)
{
	struct cnl_api *api = c->api;
	struct cnl_client *cl = NULL;
	struct cnl_client_reply r = {0};
	struct cnl_metrics_buf body = {0};
	struct cnl_oidc_identity id = {0};
	const char *tok;
	char err[256];
	int rc = -1;

	cnl_mb_printf(&body, "grant_type=authorization_code&code=");
	url_encode(&body, code);
	cnl_mb_printf(&body, "&redirect_uri=");
	url_encode(&body, w->redirect_uri);
	cnl_mb_printf(&body, "&client_id=");
	url_encode(&body, api->oidc_client_id);
	cnl_mb_printf(&body, "&code_verifier=%s", w->verifier);
	if (cnl_client_new(
	        &(struct cnl_client_config){
	            .base = "",
	            .user_agent = "cnlabd",
	            .connect_timeout_ms = CNL_OIDC_FETCH_TIMEOUT_MS,
	            .timeout_ms = CNL_OIDC_FETCH_TIMEOUT_MS,
	            .reply_max = CNL_OIDC_JWKS_MAX,
	        },
	        &cl) < 0) {
		fail(c, 500, "internal", "cannot make an HTTP client");
		goto out;
	}
	if (cnl_client_request(
	        cl,
	        &(struct cnl_client_request){
	            .method = "POST",
	            .path = api->oidc_token_url,
	            .body = body.p,
	            .body_len = body.n,
	            .content_type = "application/x-www-form-urlencoded"},
	        &r) < 0) {
		fail(c, 502, "unreachable",
		     "the identity provider's token endpoint %s: %s",
		     api->oidc_token_url, r.detail[0] ? r.detail : r.error);
		goto out;
	}
	if (r.status != 200) {
		const char *e =
		    json_string_value(json_object_get(r.json, "error"));

		fail(c, 401, "code",
		     "the identity provider refused the code (HTTP %ld%s%s): "
		     "start the sign-in again",
		     r.status, e && printable(e) ? ", " : "",
		     e && printable(e) ? e : "");
		goto out;
	}
	tok = json_string_value(json_object_get(r.json, "id_token"));
	if (!tok) {
		fail(c, 502, "unreachable",
		     "the identity provider's token endpoint answered "
		     "no id_token");
		goto out;
	}
	if (cnl_oidc_verify(api->oidc, tok, c->now_ms / 1000, &id, err,
	                    sizeof(err)) < 0) {
		cnl_log(CNL_LOG_INFO, "OIDC token refused", "why=%s", err);
		fail(c, 401, "token",
		     "the identity provider's ID token does not "
		     "verify (see the server's log)");
		goto out;
	}
	c->oidc = id;
	c->oidc_done = true;
	c->oidc_r = 0;
	rc = 0;
out:
	if (body.p)
		OPENSSL_cleanse(body.p, body.n);
	free(body.p);
	cnl_client_reply_done(&r);
	cnl_client_free(cl);
	return rc;
}

void cnl_api_prepare_oidc_callback(struct call *c, struct cnl_http_request *req)
{
	struct cnl_api *api = c->api;
	struct cnl_api_oidc_web w = {0};
	const char *state = cnl_http_query(req, "state");
	const char *code = cnl_http_query(req, "code");
	const char *error = cnl_http_query(req, "error");
	char value[HEX_LEN + 1], digest[CNL_AUTH_DIGEST_MAX];
	bool found = false;

	c->oidc_done = false;
	if (!web_configured(api)) {
		fail(c, 404, "config",
		     "browser sign-in is not configured on this server");
		return;
	}
	if (cnl_api_cookie_value(req, CNL_API_OIDC_COOKIE, value,
	                         sizeof(value)) < 0 ||
	    cnl_auth_token_digest(value, digest) < 0) {
		fail(c, 400, "cookie",
		     "cookie \"" CNL_API_OIDC_COOKIE "\": missing: this "
		     "browser started no sign-in (GET /v1/auth/oidc/start)");
		return;
	}
	/* Taken out first: one callback per sign-in, whatever follows. */
	pthread_mutex_lock(&api->mu);
	for (size_t i = 0; api->oidc_web && i < CNL_OIDC_WEB_MAX; i++) {
		struct cnl_api_oidc_web *t = &api->oidc_web[i];

		if (t->cookie[0] &&
		    CRYPTO_memcmp(t->cookie, digest, sizeof(digest)) == 0) {
			found = t->created_ms + CNL_OIDC_WEB_TTL_MS > c->now_ms;
			w = *t;
			OPENSSL_cleanse(t, sizeof(*t));
			break;
		}
	}
	pthread_mutex_unlock(&api->mu);
	if (!found) {
		fail(c, 400, "used",
		     "cookie \"" CNL_API_OIDC_COOKIE "\": no sign-in under "
		     "way for it (ended after %d s, or already used): start "
		     "again",
		     (int)(CNL_OIDC_WEB_TTL_MS / 1000));
		goto out;
	}
	if (!state || strlen(state) != HEX_LEN ||
	    CRYPTO_memcmp(state, w.state, HEX_LEN) != 0) {
		fail(c, 400, "state",
		     "query \"state\": %s this browser's sign-in",
		     state ? "is not" : "missing: it must be");
		goto out;
	}
	if (error) {
		fail(c, 401, "denied",
		     "the identity provider refused the sign-in: %s",
		     printable(error) ? error : "(unreadable error)");
		goto out;
	}
	if (!code || !code[0] || strlen(code) > 2048) {
		fail(c, 400, "code", "query \"code\": missing");
		goto out;
	}
	if (exchange(c, &w, code) < 0)
		goto out;
	snprintf(c->oidc_web.return_to, sizeof(c->oidc_web.return_to), "%s",
	         w.return_to);
out:
	OPENSSL_cleanse(&w, sizeof(w));
	OPENSSL_cleanse(value, sizeof(value));
}

#define CLEAR_COOKIE                       \
	"Set-Cookie: " CNL_API_OIDC_COOKIE \
	"=; Path=/v1/auth/oidc/; Max-Age=0\r\n"

/*
 * A refused callback (@resp holds the JSON error).  A browser's (Accept:
 * text/html) gets, with the same status, a page that sends it back to
 * the sign-in form with the short reason (/ui/?sso_error=REASON, one of
 * a fixed set: the page words it; nothing the request said is echoed).
 */
static void refuse(struct cnl_http_request *req, struct cnl_http_response *resp,
                   const char *reason)
{
	const char *accept = cnl_http_header(req, "Accept");
	struct cnl_metrics_buf b = {0};

	free(resp->headers);
	resp->headers = cnl_xstrdup(CLEAR_COOKIE);
	if (!accept || !strstr(accept, "text/html"))
		return;
	cnl_mb_printf(&b,
	              "<!doctype html><meta charset=\"utf-8\">"
	              "<meta http-equiv=\"refresh\" content=\"0; "
	              "url=/ui/?sso_error=%s\"><title>Sign-in refused</title>"
	              "<p>Single sign-on was refused. <a "
	              "href=\"/ui/?sso_error=%s\">Back to sign-in</a>.</p>\n",
	              reason, reason);
	json_decref(resp->body);
	resp->body = NULL;
	resp->content_type = "text/html; charset=utf-8";
	resp->text = b.p;
	free(resp->headers);
	resp->headers = cnl_xstrdup(
	    CLEAR_COOKIE "Content-Security-Policy: default-src 'none'; "
	                 "frame-ancestors 'none'\r\n");
}

/* GET /v1/auth/oidc/callback: see the header; the work was done by
 * cnl_api_prepare_oidc_callback() without the lock. */
void cnl_api_h_oidc_callback(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_auth_claims cl = {0};
	struct cnl_metrics_buf h = {0};
	char cookie[CNL_AUTH_JWT_MAX + 300];
	const char *token;
	int r;

	if (c->oidc_web.status || !c->oidc_done || !c->oidc_web.return_to[0]) {
		cnl_http_error(
		    resp, c->oidc_web.status ? c->oidc_web.status : 500,
		    c->oidc_web.status == 400   ? "bad_request"
		    : c->oidc_web.status == 404 ? "not_found"
		    : c->oidc_web.status == 401 ? "unauthenticated"
		    : c->oidc_web.status == 502 ? "bad_gateway"
		                                : "internal",
		    "%s",
		    c->oidc_web.err[0] ? c->oidc_web.err
		                       : "the sign-in did not finish");
		refuse(req, resp,
		       c->oidc_web.reason ? c->oidc_web.reason : "internal");
		return;
	}
	if ((r = cnl_api_oidc_user(c, &c->oidc, &c->user)) < 0) {
		cnl_api_store_error(c, resp, r, "user");
		refuse(req, resp, "internal");
		return;
	}
	snprintf(c->actor, sizeof(c->actor), "%s", c->user.id);
	snprintf(c->target, sizeof(c->target), "%s", c->user.id);
	cnl_api_session_reply(c, &c->user, resp);
	if (resp->status != 200) {
		refuse(req, resp,
		       resp->status == 401 ? "disabled" : "internal");
		return;
	}
	token = json_string_value(json_object_get(resp->body, "token"));
	if (!token ||
	    cnl_auth_jwt_verify(token, c->api->key, c->api->keylen,
	                        CNL_API_AUDIENCE, c->now_ms / 1000, &cl) < 0 ||
	    cnl_api_cookie_header(c, token, &cl, cookie, sizeof(cookie)) < 0) {
		cnl_http_error(resp, 500, "internal",
		               "cannot read the session");
		return;
	}
	/* The token goes in the cookie only, never in a body. */
	json_decref(resp->body);
	resp->body = NULL;
	cnl_mb_printf(&h,
	              "Location: %s\r\n%s%sReferrer-Policy: no-referrer\r\n",
	              c->oidc_web.return_to, cookie, CLEAR_COOKIE);
	OPENSSL_cleanse(cookie, sizeof(cookie));
	resp->status = 302;
	free(resp->headers);
	resp->headers = h.p;
	resp->content_type = "text/plain; charset=utf-8";
	resp->text = cnl_xstrdup("signed in\n");
}
