/*
 * bench_http.h - what the benches that drive a real cnlabd over HTTP
 * share (submit_bench, restart_bench): dying with a message, a monotonic
 * clock, libcurl keep-alive handles with the options every request
 * shares, one request, and the set-up calls (log in, make a project).
 *
 * The daemon's address and the caller's credentials are process-wide:
 * bench_base_url ("http://127.0.0.1:PORT") and bench_auth_header
 * ("Authorization: Bearer ..."), set by the bench once it knows them.
 */
#ifndef CNL_BENCH_HTTP_H
#define CNL_BENCH_HTTP_H

#include <stddef.h>

#include <curl/curl.h>

extern char bench_base_url[64];
extern char bench_auth_header[1200];

/* Print "PROGRAM: " and the message on stderr and exit 1 (the bench's
 * atexit cleanup runs). */
__attribute__((format(printf, 1, 2), noreturn)) void bench_die(const char *fmt,
                                                               ...);

/* Seconds on CLOCK_MONOTONIC. */
double bench_now_s(void);

/* A response body, grown as it comes. */
struct bench_buf {
	char *p;
	size_t len, cap;
};

/* A keep-alive handle writing into @b, sending bench_auth_header and a
 * JSON content type, errors into @errbuf (CURL_ERROR_SIZE), each
 * transfer bounded by @timeout_s; its header list in *@ret_headers. */
CURL *bench_handle_new(struct bench_buf *b, struct curl_slist **ret_headers,
                       char *errbuf, long timeout_s);

/* One request (POST @body, or GET when NULL); the HTTP status, or minus
 * the curl error code. */
long bench_request(CURL *c, struct bench_buf *b, const char *url,
                   const char *body);

/* Copy the string field @key of the JSON @text into @out; 0 or -1. */
int bench_json_field(const char *text, const char *key, char *out, size_t len);

/* POST (@body) or GET @path during set-up; dies unless the status is
 * @want; with @key, its string field into @out. */
void bench_setup_call(const char *path, const char *body, long want,
                      const char *key, char *out, size_t outlen);

/* Log in as the bootstrap administrator "root" with @password (the
 * token goes into bench_auth_header) and create the project "bench",
 * its id into @project_id; dies on any failure. */
void bench_login(const char *password, char *project_id, size_t len);

#endif /* CNL_BENCH_HTTP_H */
