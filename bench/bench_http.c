/*
 * bench_http.c - the HTTP side the cnlabd benches share (bench_http.h).
 */
#define _GNU_SOURCE /* program_invocation_short_name */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "bench_http.h"

char bench_base_url[64];
char bench_auth_header[1200];

void bench_die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", program_invocation_short_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1); /* the bench's cleanup runs from atexit */
}

double bench_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
	struct bench_buf *b = ud;
	size_t add = size * n;

	if (b->len + add + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 1024;
		char *np;

		while (b->len + add + 1 > cap)
			cap *= 2;
		if (!(np = realloc(b->p, cap)))
			return 0; /* curl fails the transfer */
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, add);
	b->len += add;
	b->p[b->len] = '\0';
	return add;
}

CURL *bench_handle_new(struct bench_buf *b, struct curl_slist **ret_headers,
                       char *errbuf, long timeout_s)
{
	struct curl_slist *h = NULL;
	CURL *c = curl_easy_init();

	if (!c)
		bench_die("curl_easy_init failed");
	h = curl_slist_append(h, bench_auth_header);
	h = curl_slist_append(h, "Content-Type: application/json");
	h = curl_slist_append(h, "Expect:");
	if (!h)
		bench_die("out of memory");
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
	/*
	 * Generous bounds: a busy cnlabd serves many clients one synced
	 * write at a time, and libmicrohttpd closes a connection idle for
	 * 30 s, which a client waiting its turn never is.
	 */
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 20L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s);
	*ret_headers = h;
	return c;
}

long bench_request(CURL *c, struct bench_buf *b, const char *url,
                   const char *body)
{
	long status = 0;
	CURLcode rc;

	b->len = 0;
	if (b->p)
		b->p[0] = '\0';
	curl_easy_setopt(c, CURLOPT_URL, url);
	if (body)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	else
		curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK)
		return -(long)rc;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	return status;
}

int bench_json_field(const char *text, const char *key, char *out, size_t len)
{
	json_t *j = json_loads(text ? text : "", 0, NULL);
	const char *v = json_string_value(json_object_get(j, key));
	int r = -1;

	if (v && strlen(v) < len) {
		memcpy(out, v, strlen(v) + 1);
		r = 0;
	}
	json_decref(j);
	return r;
}

void bench_setup_call(const char *path, const char *body, long want,
                      const char *key, char *out, size_t outlen)
{
	char url[512], errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *h;
	struct bench_buf b = {0};
	CURL *c = bench_handle_new(&b, &h, errbuf, 300);
	long st;

	snprintf(url, sizeof(url), "%s%s", bench_base_url, path);
	st = bench_request(c, &b, url, body);
	if (st != want)
		bench_die("%s %s: %ld (want %ld) %s%s", body ? "POST" : "GET",
		          path, st, want, st < 0 ? errbuf : "", b.p ? b.p : "");
	if (key && bench_json_field(b.p, key, out, outlen) < 0)
		bench_die("%s: no \"%s\" in %s", path, key, b.p ? b.p : "");
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	free(b.p);
}

void bench_login(const char *password, char *project_id, size_t len)
{
	char body[256], token[1024];
	json_t *o =
	    json_pack("{s:s,s:s}", "user", "root", "password", password);
	char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;

	if (!t || strlen(t) >= sizeof(body))
		bench_die("out of memory");
	snprintf(body, sizeof(body), "%s", t);
	free(t);
	json_decref(o);
	/* No token yet: a harmless header stands in for Authorization. */
	snprintf(bench_auth_header, sizeof(bench_auth_header),
	         "X-Bench: login");
	bench_setup_call("/v1/auth/login", body, 200, "token", token,
	                 sizeof(token));
	snprintf(bench_auth_header, sizeof(bench_auth_header),
	         "Authorization: Bearer %s", token);
	bench_setup_call("/v1/projects", "{\"name\":\"bench\"}", 201, "id",
	                 project_id, len);
}
