/*
 * kube.c - the Kubernetes API client (kube.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cnlab/errors.h"
#include "common/util.h"
#include "net/client.h"
#include "net/kube.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

struct cnl_kube {
	struct cnl_client *cl;
	char token_file[512];
	int retries;
	long backoff_ms, timeout_ms;
};

/* The bearer, read from its file before each request. */
static void read_token(void *ud, char *buf, size_t len)
{
	const struct cnl_kube *k = ud;
	FILE *f = fopen(k->token_file, "re");
	size_t n = 0;

	buf[0] = '\0';
	if (!f)
		return;
	n = fread(buf, 1, len - 1, f);
	fclose(f);
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
}

int cnl_kube_open(const struct cnl_kube_config *cfg, struct cnl_kube **ret,
                  char *err, size_t errlen)
{
	static const struct cnl_kube_config none;
	char server[300];
	const char *ca;
	struct cnl_kube *k;

	if (!cfg)
		cfg = &none;
	if (cfg->server && cfg->server[0]) {
		snprintf(server, sizeof(server), "%s", cfg->server);
	} else {
		const char *h = getenv("KUBERNETES_SERVICE_HOST");
		const char *p = getenv("KUBERNETES_SERVICE_PORT");

		if (!h || !h[0]) {
			cnl_seterr(err, errlen,
			           "no Kubernetes API server: not in a pod "
			           "(KUBERNETES_SERVICE_HOST unset) and none "
			           "given");
			return -CNL_ECONFIG;
		}
		/* An IPv6 service address goes in brackets. */
		snprintf(server, sizeof(server),
		         strchr(h, ':') ? "https://[%s]:%s" : "https://%s:%s",
		         h, p && p[0] ? p : "443");
	}
	k = cnl_xcalloc(1, sizeof(*k));
	snprintf(k->token_file, sizeof(k->token_file), "%s",
	         cfg->token_file ? cfg->token_file : SA_DIR "/token");
	k->retries = cfg->retries < 0 ? 0 : cfg->retries ? cfg->retries : 5;
	k->backoff_ms = cfg->backoff_ms > 0 ? cfg->backoff_ms : 200;
	k->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 30000;
	ca = cfg->cafile                         ? cfg->cafile
	     : strncmp(server, "https:", 6) == 0 ? SA_DIR "/ca.crt"
	                                         : NULL;
	cnl_client_new(&(struct cnl_client_config){.base = server,
	                                           .token_fn = read_token,
	                                           .token_ud = k,
	                                           .cafile = ca,
	                                           .user_agent = "cnlab",
	                                           .connect_timeout_ms = 5000,
	                                           .timeout_ms = k->timeout_ms},
	               &k->cl);
	*ret = k;
	return 0;
}

void cnl_kube_close(struct cnl_kube *k)
{
	if (!k)
		return;
	cnl_client_free(k->cl);
	free(k);
}

static bool retryable(int rc, long status)
{
	return rc == -EIO || status == 429 || status == 500 || status == 502 ||
	       status == 503 || status == 504;
}

static void pause_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* @rq sent, and again after a backoff while retryable (up to the client's
 * retries), its reply into *@r (done by the caller when >= 0 returned).
 * The HTTP status, with @err as cnl_kube_call() says; or -EIO. */
static long send_retried(struct cnl_kube *k,
                         const struct cnl_client_request *rq,
                         struct cnl_client_reply *r, char *err, size_t errlen)
{
	long wait = k->backoff_ms;
	int rc;

	for (int attempt = 0;; attempt++) {
		rc = cnl_client_request(k->cl, rq, r);
		if (attempt >= k->retries || !retryable(rc, r->status))
			break;
		cnl_client_reply_done(r);
		/* Up to a quarter more, so that many nodes do not come back
		 * in step. */
		pause_ms(wait + rand() % (wait / 4 + 1));
		wait = wait * 2 > 5000 ? 5000 : wait * 2;
	}
	if (rc < 0) {
		cnl_seterr(err, errlen, "%s %s: %s", rq->method, rq->path,
		           r->error);
		cnl_client_reply_done(r);
		return rc;
	}
	if (r->status >= 400) {
		/* The API's errors are a Status object with a message. */
		json_t *m =
		    r->json ? json_object_get(r->json, "message") : NULL;
		cnl_seterr(err, errlen, "%s %s: %ld %s", rq->method, rq->path,
		           r->status,
		           json_is_string(m) ? json_string_value(m) : "");
	}
	return r->status;
}

long cnl_kube_call(struct cnl_kube *k, const char *method, const char *path,
                   json_t *body, const char *content_type, json_t **ret,
                   char *err, size_t errlen)
{
	char *raw = NULL;
	struct cnl_client_reply r;
	long st;

	if (ret)
		*ret = NULL;
	if (body && content_type && !(raw = json_dumps(body, JSON_COMPACT)))
		return -ENOMEM;
	st = send_retried(
	    k,
	    &(struct cnl_client_request){.method = method,
	                                 .path = path,
	                                 .json = raw ? NULL : body,
	                                 .body = raw,
	                                 .body_len = raw ? strlen(raw) : 0,
	                                 .content_type = content_type},
	    &r, err, errlen);
	free(raw);
	if (st < 0)
		return st;
	if (ret)
		*ret = json_incref(r.json);
	cnl_client_reply_done(&r);
	return st;
}

long cnl_kube_get_text(struct cnl_kube *k, const char *path, char **ret,
                       size_t *ret_len, char *err, size_t errlen)
{
	struct cnl_client_reply r;
	long st;

	*ret = NULL;
	*ret_len = 0;
	st = send_retried(
	    k, &(struct cnl_client_request){.method = "GET", .path = path}, &r,
	    err, errlen);
	if (st < 0)
		return st;
	if (st < 400 && r.body) {
		*ret = r.body;
		*ret_len = r.len;
		r.body = NULL;
	}
	cnl_client_reply_done(&r);
	return st;
}

/* ---- watch -------------------------------------------------------------- */

struct watch {
	char *buf; /* a line not ended yet */
	size_t len, cap;
	char *rv;
	size_t rvlen;
	cnl_kube_event_fn fn;
	void *ud;
	int result; /* set by a line that ends the watch */
	char *err;
	size_t errlen;
};

/* One line of the stream: {"type": ..., "object": {...}}. */
static int watch_line(struct watch *w, const char *line, size_t n)
{
	json_error_t je;
	json_t *ev = json_loadb(line, n, 0, &je), *obj;
	const char *type, *v;
	int r = 0;

	if (!ev) {
		cnl_seterr(w->err, w->errlen, "watch: not JSON: %s", je.text);
		w->result = -EPROTO;
		return 1;
	}
	type = json_string_value(json_object_get(ev, "type"));
	obj = json_object_get(ev, "object");
	if (!type || !json_is_object(obj)) {
		cnl_seterr(w->err, w->errlen,
		           "watch: an event without type "
		           "or object");
		w->result = -EPROTO;
		json_decref(ev);
		return 1;
	}
	if (strcmp(type, "ERROR") == 0) {
		json_t *code = json_object_get(obj, "code");
		const char *m =
		    json_string_value(json_object_get(obj, "message"));
		cnl_seterr(w->err, w->errlen, "watch: %s",
		           m ? m : "an ERROR event");
		w->result = json_integer_value(code) == 410 ? -ESTALE : -EPROTO;
		json_decref(ev);
		return 1;
	}
	v = json_string_value(json_object_get(json_object_get(obj, "metadata"),
	                                      "resourceVersion"));
	if (v)
		snprintf(w->rv, w->rvlen, "%s", v);
	if (strcmp(type, "BOOKMARK") != 0 && w->fn(w->ud, type, obj) != 0) {
		w->result = -ECANCELED;
		r = 1;
	}
	json_decref(ev);
	return r;
}

static int watch_data(void *ud, const char *data, size_t n)
{
	struct watch *w = ud;

	for (size_t i = 0; i < n; i++) {
		if (data[i] != '\n') {
			if (w->len + 1 >= w->cap) {
				if (w->cap >= (64u << 20)) {
					cnl_seterr(
					    w->err, w->errlen,
					    "watch: an event over 64 MiB");
					w->result = -EPROTO;
					return 1;
				}
				w->cap = w->cap ? w->cap * 2 : 65536;
				w->buf = cnl_xrealloc(w->buf, w->cap);
			}
			w->buf[w->len++] = data[i];
			continue;
		}
		if (w->len && watch_line(w, w->buf, w->len))
			return 1;
		w->len = 0;
	}
	return 0;
}

int cnl_kube_watch(struct cnl_kube *k, const char *path, char *rv, size_t rvlen,
                   long timeout_s, cnl_kube_event_fn fn, void *ud, char *err,
                   size_t errlen)
{
	struct watch w = {.rv = rv,
	                  .rvlen = rvlen,
	                  .fn = fn,
	                  .ud = ud,
	                  .err = err,
	                  .errlen = errlen};
	struct cnl_client_reply r;
	char *full, *erv = cnl_client_url_escape(rv);
	long wait = k->backoff_ms;
	int rc;

	if (asprintf(&full,
	             "%s%swatch=1&allowWatchBookmarks=true&resourceVersion=%s&"
	             "timeoutSeconds=%ld",
	             path, strchr(path, '?') ? "&" : "?", erv, timeout_s) < 0)
		abort();
	free(erv);
	for (int attempt = 0;; attempt++) {
		struct cnl_client_request rq = {
		    .method = "GET",
		    .path = full,
		    /* The server ends the stream at timeout_s; a minute
		     * more before we give up on it. */
		    .timeout_ms = (timeout_s + 60) * 1000,
		    .idle_timeout_ms = -1,
		    .on_data = watch_data,
		    .on_data_ud = &w,
		};
		w.len = 0;
		rc = cnl_client_request(k->cl, &rq, &r);
		if (rc == -ECANCELED || attempt >= k->retries ||
		    !retryable(rc, r.status))
			break;
		cnl_client_reply_done(&r);
		pause_ms(wait + rand() % (wait / 4 + 1));
		wait = wait * 2 > 5000 ? 5000 : wait * 2;
	}
	free(full);
	free(w.buf);
	if (rc == -ECANCELED) {
		cnl_client_reply_done(&r);
		return w.result ? w.result : -ECANCELED;
	}
	if (rc < 0) {
		cnl_seterr(err, errlen, "watch %s: %s", path, r.error);
		cnl_client_reply_done(&r);
		return rc;
	}
	if (r.status == 410) {
		cnl_seterr(err, errlen, "watch %s: 410 resource version gone",
		           path);
		rc = -ESTALE;
	} else if (r.status != 200) {
		json_t *m = r.json ? json_object_get(r.json, "message") : NULL;
		cnl_seterr(err, errlen, "watch %s: %ld %s", path, r.status,
		           json_is_string(m) ? json_string_value(m) : "");
		rc = -EPROTO;
	} else {
		rc = 0;
	}
	cnl_client_reply_done(&r);
	return rc;
}
