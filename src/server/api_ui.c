/*
 * api_ui.c - the web dashboard's pages: GET / (302 to /ui/), GET /ui (the
 * same), GET /ui/ (index.html) and GET /ui/{file}, from the table of
 * assets embedded at build time (ui_assets.h).  Nothing is read from the
 * file system, so no path can reach outside the table: a name not in it
 * ("..", "%2e%2e", "../etc/passwd") is a 404.  Public: the assets hold no
 * data; the data comes from /v1 behind the session.
 *
 * Every answer carries the headers of the dashboard's contract
 * (docs/dashboard.md): its Content-Type, a strong ETag (304 when
 * If-None-Match names it), Cache-Control (no-cache for index.html and
 * anything not content-addressed, a year for a bundle whose name carries
 * its hash), and the Content-Security-Policy, X-Content-Type-Options and
 * Referrer-Policy that keep the pages to their own scripts and styles.
 * They are served without the API's lock (api.c, lock_free()).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "server/api-internal.h"
#include "server/ui_assets.h"

#define CSP                                                               \
	"default-src 'self'; img-src 'self' data:; style-src 'self'; "    \
	"script-src 'self'; connect-src 'self'; frame-ancestors 'none'; " \
	"base-uri 'none'; form-action 'self'"

/* The contract's security headers, on every /ui answer. */
#define SECURITY_HEADERS                       \
	"Content-Security-Policy: " CSP "\r\n" \
	"X-Content-Type-Options: nosniff\r\n"  \
	"Referrer-Policy: no-referrer\r\n"     \
	"X-Frame-Options: DENY\r\n"

static const struct cnl_ui_asset *find(const char *path)
{
	size_t lo = 0, hi = cnl_ui_n_assets;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(path, cnl_ui_assets[mid].path);

		if (c == 0)
			return &cnl_ui_assets[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* A bundle named after its content ("app-5XKQ2M7A.js", esbuild's
 * [name]-[hash]): it never changes under that name. */
static bool hashed(const char *path)
{
	const char *dash = strrchr(path, '-'), *dot = strrchr(path, '.');
	bool digit = false;

	if (!dash || !dot || dot < dash || dot - dash - 1 < 8)
		return false;
	for (const char *p = dash + 1; p < dot; p++) {
		if (!isalnum((unsigned char)*p))
			return false;
		digit |= isdigit((unsigned char)*p) != 0;
	}
	return digit;
}

static void not_found(struct cnl_http_response *resp)
{
	cnl_http_error(resp, 404, "not_found", "no such file of the dashboard");
	resp->headers = cnl_xstrdup(SECURITY_HEADERS);
}

static void serve(struct cnl_http_request *req, struct cnl_http_response *resp,
                  const char *path)
{
	const struct cnl_ui_asset *a = path ? find(path) : NULL;
	const char *inm = cnl_http_header(req, "If-None-Match");
	char h[1024];

	if (!a) {
		not_found(resp);
		return;
	}
	snprintf(h, sizeof(h),
	         "Content-Type: %s\r\nETag: %s\r\nCache-Control: "
	         "%s\r\n" SECURITY_HEADERS,
	         a->content_type, a->etag,
	         hashed(a->path) ? "public, max-age=31536000, immutable"
	                         : "no-cache");
	resp->headers = cnl_xstrdup(h);
	resp->no_defaults = true;
	if (inm && strstr(inm, a->etag)) {
		resp->status = 304;
		return;
	}
	resp->status = 200;
	resp->text = cnl_xmalloc(a->len + 1);
	memcpy(resp->text, a->data, a->len);
	resp->text[a->len] = '\0';
	resp->text_len = a->len;
	/* An empty file: text_len 0 would read as "strlen(text)", also 0. */
}

void cnl_api_h_ui_root(void *call, struct cnl_http_request *req,
                       struct cnl_http_response *resp)
{
	(void)call;
	(void)req;
	resp->status = 302;
	resp->headers = cnl_xstrdup("Location: /ui/\r\n" SECURITY_HEADERS);
	resp->content_type = "text/plain; charset=utf-8";
	resp->text = cnl_xstrdup("the dashboard is at /ui/\n");
}

void cnl_api_h_ui_index(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp)
{
	(void)call;
	serve(req, resp, "index.html");
}

void cnl_api_h_ui_file(void *call, struct cnl_http_request *req,
                       struct cnl_http_response *resp)
{
	(void)call;
	serve(req, resp, cnl_http_param(req, "file"));
}

bool cnl_api_ui_route(void (*h)(void *, struct cnl_http_request *,
                                struct cnl_http_response *))
{
	return h == cnl_api_h_ui_root || h == cnl_api_h_ui_index ||
	       h == cnl_api_h_ui_file;
}
