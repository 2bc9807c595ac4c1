/*
 * cloud_rest.c - the OAuth 2.0 JSON REST client of the cloud providers
 * (cloud_rest.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "common/time.h"
#include "common/util.h"
#include "net/client.h"
#include "server/cloud_rest.h"

#define ATTEMPTS_MAX 10

static void copy(char *dst, size_t n, const char *s)
{
	snprintf(dst, n, "%s", s ? s : "");
}

bool cnl_cloud_rest_oauth_error(const json_t *o, struct cnl_cloud_error *e)
{
	const json_t *er = json_object_get(o, "error");

	if (!json_is_string(er))
		return false;
	copy(e->code, sizeof(e->code), json_string_value(er));
	copy(e->message, sizeof(e->message),
	     json_string_value(json_object_get(o, "error_description")));
	return true;
}

static bool listed(const char *const *list, const char *code)
{
	for (size_t i = 0; list && list[i]; i++)
		if (strcmp(code, list[i]) == 0)
			return true;
	return false;
}

enum cnl_cloud_fail cnl_cloud_rest_classify(const struct cnl_cloud_rest *r,
                                            long status, const char *code)
{
	if (listed(r->capacity_codes, code))
		return CNL_CLOUD_CAPACITY;
	if (listed(r->throttled_codes, code))
		return CNL_CLOUD_THROTTLED;
	if (listed(r->auth_codes, code))
		return CNL_CLOUD_AUTH;
	if (status == 429)
		return CNL_CLOUD_THROTTLED;
	if (status >= 500)
		return CNL_CLOUD_UNAVAILABLE;
	if (status == 401 || status == 403)
		return CNL_CLOUD_AUTH;
	return CNL_CLOUD_INVALID;
}

static int get_bearer(struct cnl_cloud_rest *r, struct cnl_cloud_error *e);

/* One request with retries (cnl_cloud_rest_call()); @form: a form body
 * instead of JSON; @bearer: send the access token. */
static int request(struct cnl_cloud_rest *r, struct cnl_client *cl,
                   const char *method, const char *path, json_t *body,
                   const char *form, bool bearer, long timeout_ms,
                   int attempts_max, json_t **ret, struct cnl_cloud_error *e)
{
	long wait = r->backoff_ms;
	bool renewed = false;
	int rc = -EIO;

	*ret = NULL;
	memset(e, 0, sizeof(*e));
	for (int i = 0; i < attempts_max; i++) {
		struct cnl_client_reply rep = {0};
		char auth[sizeof(r->bearer) + 32];
		char signed_[CNL_CLOUD_REST_SIGN_LINES]
		            [CNL_CLOUD_REST_SIGN_LEN] = {{0}};
		const char *lines[CNL_CLOUD_REST_SIGN_LINES + 1] = {NULL};
		struct cnl_client_request rq = {
		    .method = method,
		    .path = path,
		    .json = body,
		    .body = form,
		    .body_len = form ? strlen(form) : 0,
		    .content_type =
		        form ? "application/x-www-form-urlencoded" : NULL,
		    .headers = lines,
		    .timeout_ms = timeout_ms,
		};
		int attempts = e->attempts;

		if (i > 0)
			cnl_cloud_backoff(&wait, &r->seed);
		if (bearer && r->sign) {
			/* Signed afresh each time: a signature carries the
			 * time it was made. */
			r->sign(r->ud, method, path, signed_);
			for (int k = 0; k < CNL_CLOUD_REST_SIGN_LINES; k++)
				lines[k] = signed_[k][0] ? signed_[k] : NULL;
		} else if (bearer) {
			if ((rc = get_bearer(r, e)) < 0)
				return rc;
			snprintf(auth, sizeof(auth), "Authorization: Bearer %s",
			         r->bearer);
			lines[0] = auth;
		}
		e->attempts = attempts + 1;
		rc = cnl_client_request(cl, &rq, &rep);
		if (bearer)
			explicit_bzero(auth, sizeof(auth));
		explicit_bzero(signed_, sizeof(signed_));
		if (rc == -EINVAL) {
			e->kind = CNL_CLOUD_INVALID;
			snprintf(e->message, sizeof(e->message),
			         "the request: %.400s", rep.error);
			cnl_client_reply_done(&rep);
			return -EINVAL;
		}
		e->http_status = rep.status;
		if (rc < 0 || rep.status == 0) {
			e->kind = CNL_CLOUD_UNAVAILABLE;
			copy(e->code, sizeof(e->code), "NoAnswer");
			snprintf(e->message, sizeof(e->message),
			         "no answer from %s: %.400s", r->who,
			         rep.error[0] ? rep.error
			                      : "connection failed");
			cnl_client_reply_done(&rep);
			continue;
		}
		if (rep.status >= 200 && rep.status < 300) {
			if (rep.len && !rep.json) {
				e->kind = CNL_CLOUD_PROTOCOL;
				copy(e->code, sizeof(e->code), "BadAnswer");
				snprintf(e->message, sizeof(e->message),
				         "%s answered %ld with a body that is "
				         "not JSON",
				         r->who, rep.status);
				cnl_client_reply_done(&rep);
				return -EPROTO;
			}
			e->kind = CNL_CLOUD_OK;
			*ret = json_incref(rep.json);
			cnl_client_reply_done(&rep);
			return 0;
		}
		if (!cnl_cloud_rest_oauth_error(rep.json, e))
			r->read_error(rep.json, e);
		if (!e->code[0])
			copy(e->code, sizeof(e->code), "Unknown");
		if (!e->message[0])
			snprintf(e->message, sizeof(e->message),
			         "%s answered %ld", r->who, rep.status);
		cnl_client_reply_done(&rep);
		if (e->http_status == 404) {
			/* Gone (for the caller to read as such), or a project,
			 * zone or image that is not there: not to retry. */
			e->kind = CNL_CLOUD_INVALID;
			return -ENOENT;
		}
		if (e->http_status == 409) {
			e->kind = cnl_cloud_rest_classify(r, 409, e->code);
			return e->kind == CNL_CLOUD_CAPACITY
			           ? cnl_cloud_errno(e->kind)
			           : -EEXIST;
		}
		/* An access token no longer good: one more, afresh. */
		if (bearer && !r->sign && e->http_status == 401 && !renewed) {
			renewed = true;
			r->bearer_until_ms = 0;
			i--;
			continue;
		}
		e->kind = cnl_cloud_rest_classify(r, e->http_status, e->code);
		if (e->kind != CNL_CLOUD_THROTTLED &&
		    e->kind != CNL_CLOUD_UNAVAILABLE)
			return cnl_cloud_errno(e->kind);
	}
	return cnl_cloud_errno(e->kind);
}

/* An access token in r->bearer, asked for when there is none or it is
 * about to expire. */
static int get_bearer(struct cnl_cloud_rest *r, struct cnl_cloud_error *e)
{
	int64_t now = cnl_time_now_ms();
	const char *tok;
	json_t *o = NULL, *tv;
	json_int_t ttl;
	char *form;
	int rc;

	if (r->bearer[0] && now < r->bearer_until_ms)
		return 0;
	explicit_bzero(r->bearer, sizeof(r->bearer));
	if (!(form = r->grant(r->ud, e)))
		return -EACCES;
	rc = request(r, r->auth, "POST", r->token_path, NULL, form, false, 0,
	             r->max_attempts, &o, e);
	explicit_bzero(form, strlen(form));
	free(form);
	if (rc < 0) {
		/* The token endpoint refusing what was presented (400
		 * invalid_grant, 401 invalid_client), or not there. */
		if (e->http_status >= 400 && e->http_status < 500 &&
		    e->http_status != 429) {
			e->kind = CNL_CLOUD_AUTH;
			rc = -EACCES;
		}
		json_decref(o);
		return rc;
	}
	tok = json_string_value(json_object_get(o, "access_token"));
	/* A number, or (Azure's v1 endpoint) a number in a string. */
	tv = json_object_get(o, "expires_in");
	ttl = json_is_string(tv) ? strtoll(json_string_value(tv), NULL, 10)
	                         : json_integer_value(tv);
	if (!tok || !tok[0] || strlen(tok) >= sizeof(r->bearer) ||
	    strspn(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	                "0123456789-._~+/=") != strlen(tok) ||
	    ttl <= 0) {
		e->kind = CNL_CLOUD_PROTOCOL;
		copy(e->code, sizeof(e->code), "BadAnswer");
		copy(e->message, sizeof(e->message),
		     "the token endpoint's answer has no usable access_token "
		     "and expires_in");
		json_decref(o);
		return -EPROTO;
	}
	copy(r->bearer, sizeof(r->bearer), tok);
	/* A minute early, and never longer than an hour. */
	r->bearer_until_ms = now + (ttl > 3600  ? 3600
	                            : ttl > 120 ? ttl - 60
	                                        : ttl / 2) *
	                               1000;
	json_decref(o);
	return 0;
}

int cnl_cloud_rest_call(struct cnl_cloud_rest *r, const char *method,
                        const char *path, json_t *body, json_t **ret,
                        struct cnl_cloud_error *e)
{
	return request(r, r->api, method, path, body, NULL, true, 0,
	               r->max_attempts, ret, e);
}

int cnl_cloud_rest_call_n(struct cnl_cloud_rest *r, const char *method,
                          const char *path, int attempts, json_t **ret,
                          struct cnl_cloud_error *e)
{
	return request(r, r->api, method, path, NULL, NULL, true, 0,
	               attempts < 1                 ? 1
	               : attempts > r->max_attempts ? r->max_attempts
	                                            : attempts,
	               ret, e);
}

int cnl_cloud_rest_call_long(struct cnl_cloud_rest *r, const char *method,
                             const char *path, long timeout_ms, json_t **ret,
                             struct cnl_cloud_error *e)
{
	return request(r, r->api, method, path, NULL, NULL, true, timeout_ms,
	               r->max_attempts, ret, e);
}

/* @url's scheme://host[:port] into @base and the rest into *@path ("/"
 * when none); false unless https:// (or http://, for tests). */
static bool split_url(const char *url, char *base, size_t n, char **path)
{
	const char *h, *end;

	if (strncmp(url, "https://", 8) == 0)
		h = url + 8;
	else if (strncmp(url, "http://", 7) == 0)
		h = url + 7;
	else
		return false;
	end = h + strcspn(h, "/?#");
	if (end == h || (size_t)(end - url) >= n || (*end && *end != '/'))
		return false;
	snprintf(base, n, "%.*s", (int)(end - url), url);
	*path = cnl_xstrdup(*end ? end : "/");
	return true;
}

int cnl_cloud_rest_init(struct cnl_cloud_rest *r, const char *endpoint,
                        const char *token_uri, const char *cafile,
                        long timeout_ms, int max_attempts, long backoff_ms,
                        char *err, size_t errlen)
{
	struct cnl_client_config cc = {0};
	char base[512], *api_path = NULL;

	r->max_attempts = max_attempts <= 0             ? 5
	                  : max_attempts > ATTEMPTS_MAX ? ATTEMPTS_MAX
	                                                : max_attempts;
	r->backoff_ms = backoff_ms <= 0 ? 200
	                : backoff_ms > CNL_CLOUD_BACKOFF_MAX_MS
	                    ? CNL_CLOUD_BACKOFF_MAX_MS
	                    : backoff_ms;
	r->seed = (unsigned)cnl_time_now_ms();
	cc.cafile = cafile;
	cc.user_agent = "cnlabd";
	cc.connect_timeout_ms = 5000;
	cc.timeout_ms = timeout_ms > 0 ? timeout_ms : 20000;
	if (token_uri &&
	    !split_url(token_uri, base, sizeof(base), &r->token_path)) {
		cnl_seterr(err, errlen, "token_uri: want https://host/path");
		return -EINVAL;
	}
	cc.base = base;
	if (token_uri && cnl_client_new(&cc, &r->auth) < 0) {
		cnl_seterr(err, errlen, "token_uri: cannot make a client");
		return -EINVAL;
	}
	if (!split_url(endpoint, base, sizeof(base), &api_path) ||
	    strcmp(api_path, "/") != 0) {
		free(api_path);
		cnl_seterr(err, errlen,
		           "endpoint: want scheme://host[:port], no path");
		return -EINVAL;
	}
	free(api_path);
	cc.base = base;
	if (cnl_client_new(&cc, &r->api) < 0) {
		cnl_seterr(err, errlen, "endpoint: cannot make a client");
		return -EINVAL;
	}
	return 0;
}

void cnl_cloud_rest_done(struct cnl_cloud_rest *r)
{
	cnl_client_free(r->api);
	cnl_client_free(r->auth);
	free(r->token_path);
	explicit_bzero(r->bearer, sizeof(r->bearer));
	r->api = r->auth = NULL;
	r->token_path = NULL;
}

void cnl_cloud_tag_text(const struct cnl_cloud_launch *l, char *out, size_t n)
{
	size_t o = (size_t)snprintf(out, n, "%s", CNL_CLOUD_MANAGED);

	for (size_t i = 0; i < l->ntags && o + 4 < n; i++) {
		o += (size_t)snprintf(out + o, n - o, " %s=", l->tags[i].key);
		for (const char *s = l->tags[i].value; s && *s && o + 1 < n;
		     s++)
			out[o++] = *s == ' ' || *s == '=' ? '_' : *s;
		out[o < n ? o : n - 1] = '\0';
	}
}

void cnl_cloud_tag_get(const char *text, const char *key, char *out, size_t n)
{
	size_t kl = strlen(key);

	out[0] = '\0';
	for (const char *s = text; s && *s;) {
		size_t w = strcspn(s, " ");

		if (w > kl && strncmp(s, key, kl) == 0 && s[kl] == '=') {
			snprintf(out, n, "%.*s", (int)(w - kl - 1), s + kl + 1);
			return;
		}
		s += w;
		s += strspn(s, " ");
	}
}

bool cnl_cloud_tag_managed(const char *text)
{
	size_t n = strlen(CNL_CLOUD_MANAGED);

	return text && strncmp(text, CNL_CLOUD_MANAGED, n) == 0 &&
	       (text[n] == ' ' || text[n] == '\0');
}

void cnl_cloud_short_name(const char *token, char out[32])
{
	unsigned char h[SHA256_DIGEST_LENGTH];

	SHA256((const unsigned char *)token, strlen(token), h);
	snprintf(out, 32, "cnlab-%02x%02x%02x%02x%02x%02x", h[0], h[1], h[2],
	         h[3], h[4], h[5]);
}

int cnl_cloud_no_spot(struct cnl_cloud_error *e, const char *who)
{
	e->kind = CNL_CLOUD_CAPACITY;
	copy(e->code, sizeof(e->code), "NoSpotMarket");
	snprintf(e->message, sizeof(e->message), "%s sells no spot machines",
	         who);
	return -EAGAIN;
}

void cnl_cloud_gone(struct cnl_cloud_instance *o, const char *id,
                    const char *why)
{
	memset(o, 0, sizeof(*o));
	copy(o->id, sizeof(o->id), id);
	copy(o->state, sizeof(o->state), "terminated");
	copy(o->reason, sizeof(o->reason), why);
}

void cnl_cloud_instance_name(const char *token, int k, char *out, size_t n)
{
	size_t o = (size_t)snprintf(out, n, "cnlab-");

	for (const char *s = token; *s && o + 8 < n && o < 54; s++) {
		char ch = *s >= 'A' && *s <= 'Z' ? (char)(*s - 'A' + 'a') : *s;

		out[o++] = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')
		               ? ch
		               : '-';
	}
	snprintf(out + o, n - o, "-%d", k);
}
