/*
 * cloud_rest.h - the JSON REST client that the OAuth 2.0 providers of
 * cloud.h share (cloud_gcp.c, cloud_azure.c): an access token asked for
 * at the provider's token endpoint and kept until a minute before it
 * expires (or until a 401 says it no longer works: then once afresh),
 * each call retried with back-off on throttling (429 and the provider's
 * own codes) and outages (no answer, 5xx), answers read as JSON and
 * failures classified by the provider's lists of error codes.
 *
 * The token and the form that earns it are held in memory only, wiped
 * when done, and never logged nor put in an error.
 */
#ifndef CNL_SERVER_CLOUD_REST_H
#define CNL_SERVER_CLOUD_REST_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "server/cloud.h"

struct cnl_client;

#define CNL_CLOUD_REST_SIGN_LINES 3
#define CNL_CLOUD_REST_SIGN_LEN   256

struct cnl_cloud_rest {
	struct cnl_client *api;  /* the provider's API endpoint */
	struct cnl_client *auth; /* the token endpoint's host */
	char *token_path;
	const char *who; /* "Google", "Azure": for messages */
	/* The token request's form (x-www-form-urlencoded), made afresh
	 * each time (cloud_rest wipes and frees it); NULL with @e filled
	 * when it cannot be made. */
	char *(*grant)(void *ud, struct cnl_cloud_error *e);
	void *ud;
	/* The provider's error document @o (NULL: none) into e->code and
	 * e->message. */
	void (*read_error)(const json_t *o, struct cnl_cloud_error *e);
	/* The provider's error codes that mean no capacity (try another
	 * type or market), throttling and refused credentials; NULL-ended
	 * (cnl_cloud_rest_classify()). */
	const char *const *capacity_codes;
	const char *const *throttled_codes;
	const char *const *auth_codes;
	/* Providers that sign each request instead (Naver Cloud): up to
	 * CNL_CLOUD_REST_SIGN_LINES header lines ("Name: value") for
	 * @method @path into @lines; NULL: bearer tokens (grant). */
	void (*sign)(void *ud, const char *method, const char *path,
	             char lines[][CNL_CLOUD_REST_SIGN_LEN]);
	char bearer[8192];
	int64_t bearer_until_ms;
	int max_attempts;
	long backoff_ms;
	unsigned seed;
};

/*
 * cnl_cloud_rest_init - clients for @endpoint (scheme://host[:port], no path)
 * and @token_uri (https://host/path; http:// for tests; NULL for a provider
 * that signs).  The callbacks, the code lists and @who are the caller's to
 * set.  0, or -EINVAL with @err naming which.
 */
int cnl_cloud_rest_init(struct cnl_cloud_rest *r, const char *endpoint,
                        const char *token_uri, const char *cafile,
                        long timeout_ms, int max_attempts, long backoff_ms,
                        char *err, size_t errlen);
void cnl_cloud_rest_done(struct cnl_cloud_rest *r);

/*
 * cnl_cloud_rest_call - @method @path (after the endpoint) with the JSON
 * @body (NULL: none), the access token sent: 0 with a 2xx answer's JSON
 * in *@ret (NULL for an empty body); -ENOENT for a 404 and -EEXIST for a
 * 409 (@e filled, for the caller to read); else a negative errno with @e
 * classified (cloud.h).
 */
int cnl_cloud_rest_call(struct cnl_cloud_rest *r, const char *method,
                        const char *path, json_t *body, json_t **ret,
                        struct cnl_cloud_error *e);

/* cnl_cloud_rest_classify - the kind of failure the provider's @code is
 * (the provider's code lists), else by @status: 429 throttled,
 * 5xx unavailable, 401 and 403 auth, anything else (0: an operation's
 * error, no status) invalid. */
enum cnl_cloud_fail cnl_cloud_rest_classify(const struct cnl_cloud_rest *r,
                                            long status, const char *code);

/* cnl_cloud_rest_call_n - cnl_cloud_rest_call() without a body, tried at
 * most @attempts times (1: once, for a call that must not be repeated
 * blindly: one with no idempotency of its own). */
int cnl_cloud_rest_call_n(struct cnl_cloud_rest *r, const char *method,
                          const char *path, int attempts, json_t **ret,
                          struct cnl_cloud_error *e);

/* cnl_cloud_rest_call_long - the same without a body, for a call the
 * provider may hold for up to @timeout_ms (a long poll). */
int cnl_cloud_rest_call_long(struct cnl_cloud_rest *r, const char *method,
                             const char *path, long timeout_ms, json_t **ret,
                             struct cnl_cloud_error *e);

/* The OAuth error of a token endpoint ({"error": "invalid_client",
 * "error_description": ...}) into @e; false when @o is not one. */
bool cnl_cloud_rest_oauth_error(const json_t *o, struct cnl_cloud_error *e);

/*
 * For the providers whose instances take no tags and whose calls take no
 * client token (cloud_naver.c, cloud_kt.c): CNLab's instances carry
 * "cnlab-managed" and their tags as KEY=VALUE words in a free text (a
 * description, a display name), and are named from their launch.
 */
#define CNL_CLOUD_MANAGED "cnlab-managed"

/* cnl_cloud_tag_text - "cnlab-managed" and @l's tags as " KEY=VALUE" words
 * (spaces and '=' in a value become '_') in @out, cut at @n. */
void cnl_cloud_tag_text(const struct cnl_cloud_launch *l, char *out, size_t n);
/* cnl_cloud_tag_get - the value of word "@key=" of such a @text (NULL: none)
 * in @out; "" when it has none. */
void cnl_cloud_tag_get(const char *text, const char *key, char *out, size_t n);
/* cnl_cloud_tag_managed - whether @text (NULL: none) marks CNLab's own. */
bool cnl_cloud_tag_managed(const char *text);
/* cnl_cloud_short_name - "cnlab-" and 12 hex digits of the hash of a
 * launch's client token @token: its instances' names with "-K" (at most
 * 30 characters, as Naver takes). */
void cnl_cloud_short_name(const char *token, char out[32]);
/* cnl_cloud_no_spot - @e as the launch in the spot market of a provider
 * (@who) that has none: CAPACITY, NoSpotMarket; -EAGAIN. */
int cnl_cloud_no_spot(struct cnl_cloud_error *e, const char *who);
/* cnl_cloud_gone - @o as describe() shows instance @id that no longer
 * exists: "terminated", for @why. */
void cnl_cloud_gone(struct cnl_cloud_instance *o, const char *id,
                    const char *why);

/* cnl_cloud_instance_name - the name of the @k-th instance of the launch of
 * client token @token: "cnlab-", the token in lowercase letters, digits
 * and '-', "-K"; at most 62 characters (@n >= 64), a name Compute Engine
 * and Azure both take. */
void cnl_cloud_instance_name(const char *token, int k, char *out, size_t n);

#endif
