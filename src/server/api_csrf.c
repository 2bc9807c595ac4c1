/*
 * api_csrf.c - what every cookie-authenticated request passes through
 * (api_authn.c calls it): the session cookie read from the Cookie header
 * (cnl_api_cookie_token()), the CSRF token of a session
 * (cnl_api_csrf_of(): HMAC-SHA256(API key, "csrf:" session id) in hex,
 * stateless) and the check of X-CSRF-Token and Origin on any method but
 * GET and HEAD (cnl_api_cookie_check(): 403 naming the header).  The
 * routes that hand out the cookie and the token are in api_cookie.c.
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

/* The CSRF token of session @jti into @out (CSRF_HEX + 1 bytes). */
void cnl_api_csrf_of(struct cnl_api *api, const char *jti, char *out)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char mac[EVP_MAX_MD_SIZE], msg[CNL_AUTH_CLAIM_MAX + 8];
	unsigned int n = 0;
	int len = snprintf((char *)msg, sizeof(msg), "csrf:%s", jti);

	HMAC(EVP_sha256(), api->key, (int)api->keylen, msg, (size_t)len, mac,
	     &n);
	for (unsigned int i = 0; i < n && i < CSRF_HEX / 2; i++) {
		out[2 * i] = hex[mac[i] >> 4];
		out[2 * i + 1] = hex[mac[i] & 15];
	}
	out[CSRF_HEX] = '\0';
}

int cnl_api_cookie_value(struct cnl_http_request *req, const char *name,
                         char *buf, size_t len)
{
	const char *h = cnl_http_header(req, "Cookie");
	size_t nl = strlen(name);
	bool found = false;

	/* Cookies ignore ports: a page of another port of this host (a
	 * notebook's) can plant a cookie of this name with a longer Path,
	 * which the browser sends first.  Two of them, and neither is
	 * trusted: the viewer is signed out, never signed in as someone
	 * else. */
	while (h && *h) {
		size_t n;

		while (*h == ' ' || *h == ';')
			h++;
		n = strcspn(h, ";");
		if (n > nl && strncmp(h, name, nl) == 0 && h[nl] == '=') {
			size_t v = n - nl - 1;

			if (found || v == 0 || v >= len)
				return -1;
			memcpy(buf, h + nl + 1, v);
			buf[v] = '\0';
			found = true;
		}
		h += n;
	}
	return found ? 0 : -1;
}

int cnl_api_cookie_token(struct call *c, struct cnl_http_request *req,
                         char *buf, size_t len)
{
	return cnl_api_cookie_value(
	    req, c->api->tls ? CNL_API_UI_COOKIE_TLS : CNL_API_UI_COOKIE, buf,
	    len);
}

bool cnl_api_same_origin(struct call *c, struct cnl_http_request *req,
                         const char *origin)
{
	const char *host = cnl_http_header(req, "Host");
	const char *scheme = c->api->tls ? "https://" : "http://";
	size_t sl = strlen(scheme);

	return host && strncasecmp(origin, scheme, sl) == 0 &&
	       strcasecmp(origin + sl, host) == 0;
}

int cnl_api_cookie_check(struct call *c, struct cnl_http_request *req,
                         struct cnl_http_response *resp)
{
	const char *origin = cnl_http_header(req, "Origin");
	const char *tok = cnl_http_header(req, "X-CSRF-Token");
	char want[CSRF_HEX + 1];

	if (strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0)
		return 0;
	if (origin && !cnl_api_same_origin(c, req, origin)) {
		cnl_http_error(
		    resp, 403, "forbidden",
		    "header \"Origin\": %.200s is not this server's "
		    "origin: a cookie-authenticated request must come "
		    "from the dashboard's own pages",
		    origin);
		return -1;
	}
	if (!c->session[0]) {
		cnl_http_error(resp, 403, "forbidden",
		               "header \"X-CSRF-Token\": the cookie names no "
		               "session");
		return -1;
	}
	cnl_api_csrf_of(c->api, c->session, want);
	if (!tok || strlen(tok) != CSRF_HEX ||
	    CRYPTO_memcmp(tok, want, CSRF_HEX) != 0) {
		cnl_http_error(resp, 403, "forbidden",
		               "header \"X-CSRF-Token\": %s: a cookie-"
		               "authenticated %s needs the session's CSRF "
		               "token (GET /v1/auth/csrf)",
		               tok ? "does not match the session" : "missing",
		               req->method);
		return -1;
	}
	return 0;
}
