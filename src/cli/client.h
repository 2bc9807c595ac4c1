/*
 * client.h - the cnlab CLI's HTTP client for the cnlabd REST API (libcurl).
 *
 * One request at a time, JSON in and out, with the bearer token; errors
 * come back as the API's {"error": {"code", "message"}} and are turned
 * into the CLI's exit codes (cli.h) and a message that says what to do.
 */
#ifndef CNL_CLI_CLIENT_H
#define CNL_CLI_CLIENT_H

#include <stddef.h>

#include <jansson.h>

struct cnl_cli_client;

/* A response. */
struct cnl_cli_reply {
	long status;     /* HTTP status, 0 when the server was not reached */
	char *body;      /* raw bytes, NUL-terminated; owned */
	size_t len;      /* bytes in body */
	json_t *json;    /* parsed body when it is JSON, else NULL; owned */
	char error[512]; /* transport error when status is 0 */
};

/*
 * cnl_cli_client_new - a client for @base (e.g. "http://127.0.0.1:8080",
 * trailing '/' ignored) sending @token (may be NULL) as the bearer.
 */
struct cnl_cli_client *cnl_cli_client_new(const char *base, const char *token);

/* cnl_cli_client_free - NULL-safe. */
void cnl_cli_client_free(struct cnl_cli_client *c);

/*
 * cnl_cli_request - @method @path (starting with "/v1/...") with @body
 * (JSON, may be NULL) and an optional Idempotency-Key @idem.  Fills *@ret
 * (free with cnl_cli_reply_done()).  Returns 0 when a response arrived
 * (whatever its status), or -EIO when the server could not be reached
 * (ret->error says why).
 */
int cnl_cli_request(struct cnl_cli_client *c, const char *method,
                    const char *path, json_t *body, const char *idem,
                    struct cnl_cli_reply *ret);

/* cnl_cli_reply_done - free what a reply holds; NULL-safe. */
void cnl_cli_reply_done(struct cnl_cli_reply *r);

/*
 * cnl_cli_url_escape - @s percent-encoded for one path segment or query
 * value.  Returns a string to free().
 */
char *cnl_cli_url_escape(const char *s);

#endif /* CNL_CLI_CLIENT_H */
