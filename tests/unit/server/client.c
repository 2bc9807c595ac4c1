/*
 * client.c - the tests' HTTP client and the cnlabd they talk to (see
 * client.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <cmocka.h>

#include <curl/curl.h>

#include "client.h"
#include "server/auth.h"

char tc_base[128];

/* ------------------------------------------------------------------------ */
/* HTTP client                                                              */
/* ------------------------------------------------------------------------ */

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
	struct reply *r = ud;
	size_t add = size * n;

	r->raw = realloc(r->raw, r->len + add + 1);
	assert_non_null(r->raw);
	memcpy(r->raw + r->len, p, add);
	r->len += add;
	r->raw[r->len] = '\0';
	/* An event stream (a job's events) lasts as long as its job: its
	 * first whole event is enough to know how it answered. */
	if (strncmp(r->content_type, "text/event-stream", 17) == 0 &&
	    strstr(r->raw, "\n\n"))
		return 0;
	return add;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
	struct reply *r = ud;
	size_t len = size * n;

	if (len > 13 && strncasecmp(p, "Content-Type:", 13) == 0) {
		size_t v = len - 13;

		while (v && (p[13 + v - 1] == '\r' || p[13 + v - 1] == '\n'))
			v--;
		snprintf(r->content_type, sizeof(r->content_type), "%.*s",
		         (int)v - 1, p + 14);
	}
	if (len > 6 && strncasecmp(p, "Allow:", 6) == 0) {
		size_t v = len - 6;

		while (v && (p[6 + v - 1] == '\r' || p[6 + v - 1] == '\n'))
			v--;
		snprintf(r->allow, sizeof(r->allow), "%.*s", (int)v - 1, p + 7);
	}
	return len;
}

void reply_done(struct reply *r)
{
	json_decref(r->body);
	free(r->raw);
	memset(r, 0, sizeof(*r));
}

/*
 * Send @method @path with @body (NULL: none; @body_len 0 means strlen),
 * the bearer @token (NULL: none) and one @extra header (NULL: none).  The
 * reply body must be JSON (or raw text for another content type; of an
 * event stream, its first event only).
 */
/* http_n's request; the libcurl result, nothing asserted and nothing
 * parsed (for worker threads, where cmocka may not assert). */
static CURLcode perform(const char *method, const char *path, const char *token,
                        const char *body, size_t body_len, const char *extra,
                        long timeout_s, struct reply *r);

void http_n(const char *method, const char *path, const char *token,
            const char *body, size_t body_len, const char *extra,
            struct reply *r)
{
	json_error_t jerr;

	assert_int_equal(
	    perform(method, path, token, body, body_len, extra, 30, r),
	    CURLE_OK);
	if (!r->raw)
		fail_msg("%s %s: empty reply, status %ld", method, path,
		         r->status);
	if (strncmp(r->content_type, "application/json", 16) != 0)
		return; /* /metrics and the like: raw text only */
	r->body = json_loads(r->raw, 0, &jerr);
	if (!r->body)
		fail_msg("reply is not JSON: %s", r->raw);
}

int http_try(const char *method, const char *path, const char *token,
             const char *body, long timeout_s, struct reply *r)
{
	if (perform(method, path, token, body, 0, NULL, timeout_s, r) !=
	    CURLE_OK)
		return -1;
	if (r->raw && strncmp(r->content_type, "application/json", 16) == 0)
		r->body = json_loads(r->raw, 0, NULL);
	return 0;
}

static CURLcode perform(const char *method, const char *path, const char *token,
                        const char *body, size_t body_len, const char *extra,
                        long timeout_s, struct reply *r)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	char url[512], auth[CNL_AUTH_JWT_MAX + 32];
	CURLcode rc;

	memset(r, 0, sizeof(*r));
	assert_non_null(c);
	snprintf(url, sizeof(url), "%s%s", tc_base, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(
		    c, CURLOPT_POSTFIELDSIZE_LARGE,
		    (curl_off_t)(body_len ? body_len : strlen(body)));
		h = curl_slist_append(h, "Content-Type: application/json");
	}
	if (token) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
		h = curl_slist_append(h, auth);
	}
	if (extra)
		h = curl_slist_append(h, extra);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	rc = curl_easy_perform(c);
	/* Ended by on_data at an event stream's first event. */
	if (rc == CURLE_WRITE_ERROR &&
	    strncmp(r->content_type, "text/event-stream", 17) == 0)
		rc = CURLE_OK;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	return rc;
}

void http(const char *method, const char *path, const char *token,
          const char *body, struct reply *r)
{
	http_n(method, path, token, body, 0, NULL, r);
}

/* The reply is {"error": {"code": @code, "message": "..."}} and @status. */
void assert_error(const struct reply *r, long status, const char *code)
{
	json_t *e = json_object_get(r->body, "error");

	if (r->status != status)
		fail_msg("want %ld %s, got %ld %s", status, code, r->status,
		         r->raw);
	assert_int_equal(json_object_size(r->body), 1);
	assert_true(json_is_object(e));
	assert_int_equal(json_object_size(e), 2);
	assert_string_equal(json_string_value(json_object_get(e, "code")),
	                    code);
	assert_true(json_is_string(json_object_get(e, "message")));
}

const char *err_message(const struct reply *r)
{
	return json_string_value(
	    json_object_get(json_object_get(r->body, "error"), "message"));
}

const char *str(const json_t *o, const char *k)
{
	const char *v = json_string_value(json_object_get(o, k));

	assert_non_null(v);
	return v;
}

/* Expect @status; print the body when it differs. */
void expect(const struct reply *r, long status, const char *what)
{
	if (r->status != status)
		fail_msg("%s: want %ld, got %ld %s", what, status, r->status,
		         r->raw);
}

/* ------------------------------------------------------------------------ */
/* The cnlabd under test                                                    */
/* ------------------------------------------------------------------------ */

void tc_server_open(struct tc_server *s, const char *prefix)
{
	char err[512];

	memset(s, 0, sizeof(*s));
	assert_int_equal(curl_global_init(CURL_GLOBAL_DEFAULT), 0);
	snprintf(s->dir, sizeof(s->dir), "/tmp/%s-XXXXXX", prefix);
	assert_non_null(mkdtemp(s->dir));
	snprintf(s->path, sizeof(s->path), "%s/cnlab.db", s->dir);
	if (cnl_store_open_sqlite(s->path, &s->store, err, sizeof(err)) < 0)
		fail_msg("open %s: %s", s->path, err);
	if (cnl_api_bootstrap(s->store, "root", "pw-root",
	                      CNL_AUTH_SCRYPT_LN_MIN, err, sizeof(err)) < 0)
		fail_msg("bootstrap: %s", err);
}

void tc_server_start(struct tc_server *s, struct cnl_api_config *cfg,
                     bool run_loop)
{
	struct cnl_api_listen l = {.host = "127.0.0.1", .run_loop = run_loop};
	char err[512];

	if (!cfg->store)
		cfg->store = s->store;
	if (!cfg->scrypt_ln)
		cfg->scrypt_ln = CNL_AUTH_SCRYPT_LN_MIN;
	assert_int_equal(cnl_api_new(cfg, &s->api), 0);
	l.routes = cnl_api_routes(&l.nroutes);
	if (cnl_api_start(s->api, &l, &s->srv, err, sizeof(err)) < 0)
		fail_msg("start: %s", err);
	assert_true(cnl_http_server_port(s->srv) > 0);
	snprintf(tc_base, sizeof(tc_base), "http://127.0.0.1:%u",
	         (unsigned)cnl_http_server_port(s->srv));
}

void tc_server_close(struct tc_server *s)
{
	static const char *const suffix[] = {"", "-wal", "-shm"};
	char p[192];

	cnl_api_stop(s->api);
	cnl_http_server_free(s->srv);
	cnl_api_free(s->api);
	cnl_store_close(s->store);
	for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
		snprintf(p, sizeof(p), "%s%s", s->path, suffix[i]);
		unlink(p);
	}
	rmdir(s->dir);
	curl_global_cleanup();
}
