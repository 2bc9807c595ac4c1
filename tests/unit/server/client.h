/*
 * client.h - the tests' HTTP client: libcurl requests against a cnlabd on
 * loopback (tc_base), JSON replies, and assertions on them.
 */
#ifndef CNL_TEST_CLIENT_H
#define CNL_TEST_CLIENT_H

#include <stddef.h>

#include <jansson.h>

/* "http://127.0.0.1:PORT" of the server under test. */
extern char tc_base[128];

struct reply {
	long status;
	json_t *body;
	char *raw;
	size_t len;
	char allow[128];
	char content_type[128];
};

void reply_done(struct reply *r);

/*
 * Send @method @path with @body (NULL: none; @body_len 0 means strlen),
 * the bearer @token (NULL: none) and one @extra header (NULL: none).  A
 * JSON reply is parsed into r->body (NULL for other content types).
 */
void http_n(const char *method, const char *path, const char *token,
            const char *body, size_t body_len, const char *extra,
            struct reply *r);
/*
 * The same without assertions, for worker threads: 0 with the reply in @r
 * (a JSON body parsed when it is JSON), or -1 when no HTTP reply came
 * within @timeout_s (@r still to be released with reply_done).
 */
int http_try(const char *method, const char *path, const char *token,
             const char *body, long timeout_s, struct reply *r);
void http(const char *method, const char *path, const char *token,
          const char *body, struct reply *r);

/* The reply is {"error": {"code": @code, "message": "..."}} and @status. */
void assert_error(const struct reply *r, long status, const char *code);
const char *err_message(const struct reply *r);
/* A string member that must exist. */
const char *str(const json_t *o, const char *k);
/* Expect @status; print the body when it differs. */
void expect(const struct reply *r, long status, const char *what);

#endif /* CNL_TEST_CLIENT_H */
