/*
 * client.h - the tests' HTTP client: libcurl requests against a cnlabd on
 * loopback (tc_base), JSON replies, and assertions on them; and the
 * cnlabd they talk to (struct tc_server), set up and torn down alike.
 */
#ifndef CNL_TEST_CLIENT_H
#define CNL_TEST_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "net/http_server.h"
#include "server/api.h"
#include "store/store.h"

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

/*
 * The cnlabd under test: a scratch folder, its SQLite store with the
 * bootstrap admin "root" (password "pw-root"), the API on loopback.
 *
 * tc_server_open - libcurl initialised, the folder /tmp/@prefix-XXXXXX
 * made, the store dir/cnlab.db opened and bootstrapped.
 * tc_server_start - cnl_api_new(@cfg) (its store and scrypt cost filled
 * in when unset) serving every route on loopback, with the scheduling
 * loop thread when @run_loop; tc_base names it.
 * tc_server_close - stop and free it all, remove the store's files and
 * the folder (whatever else the test put there it removes first).
 */
struct tc_server {
	char dir[64];
	char path[160]; /* dir/cnlab.db */
	struct cnl_store *store;
	struct cnl_api *api;
	struct cnl_http_server *srv;
};
void tc_server_open(struct tc_server *s, const char *prefix);
void tc_server_start(struct tc_server *s, struct cnl_api_config *cfg,
                     bool run_loop);
void tc_server_close(struct tc_server *s);

#endif /* CNL_TEST_CLIENT_H */
