/*
 * kube.c - the Kubernetes API client (kube.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/sha1.h>

#include "cnlab/errors.h"
#include "common/base64.h"
#include "common/time.h"
#include "common/util.h"
#include "net/client.h"
#include "net/kube.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

struct cnl_kube {
	struct cnl_client *cl;
	char host[300];   /* the server's host[:port], for an exec's Host */
	char prefix[300]; /* the path of the server's URL ("": none) */
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
	if (strpbrk(server, "?#")) {
		/* Paths are put after it, an exec's too: no query there. */
		cnl_seterr(err, errlen,
		           "the Kubernetes API server's URL %s has a query or "
		           "a fragment: give its scheme, host, port and path "
		           "only",
		           server);
		return -CNL_ECONFIG;
	}
	k = cnl_xcalloc(1, sizeof(*k));
	{
		const char *h = strstr(server, "://");

		h = h ? h + 3 : server;
		size_t hl = strcspn(h, "/?#,");

		snprintf(k->host, sizeof(k->host), "%.*s", (int)hl, h);
		/* Requests go under the URL's path (client.h), an exec's
		 * too; without a trailing '/'. */
		snprintf(k->prefix, sizeof(k->prefix), "%.*s",
		         (int)strcspn(h + hl, "?#,"), h + hl);
		while (k->prefix[0] && k->prefix[strlen(k->prefix) - 1] == '/')
			k->prefix[strlen(k->prefix) - 1] = '\0';
	}
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

/* ---- exec over a WebSocket ------------------------------------------ */

#define WS_GUID     "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define WS_HEAD_MAX (16 * 1024)

struct cnl_kube_exec {
	struct cnl_client_stream *s;
	int version;
	char *buf; /* bytes read, not yet taken: [off, n) */
	size_t n, off, cap;
	char *msg; /* the message being put together */
	size_t msg_n, msg_cap;
	bool in_msg;
};

/* The value of header @name in the head @h (lines after the first, each
 * ending in CRLF), into @out; whether there is one. */
static bool head_value(const char *h, const char *name, char *out,
                       size_t outlen)
{
	size_t nl = strlen(name);

	for (const char *l = strstr(h, "\r\n"); l && l[2];
	     l = strstr(l + 2, "\r\n")) {
		const char *v = l + 2;

		if (strncasecmp(v, name, nl) == 0 && v[nl] == ':') {
			v += nl + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			nl = strcspn(v, "\r");
			while (nl && (v[nl - 1] == ' ' || v[nl - 1] == '\t'))
				nl--;
			snprintf(out, outlen, "%.*s", (int)nl, v);
			return true;
		}
	}
	return false;
}

/* Append at least one read's bytes to x->buf, waiting up to @wait_ms:
 * how many (> 0), 0 at the end, -EAGAIN, or a negative errno. */
static ssize_t exec_fill(struct cnl_kube_exec *x, int wait_ms)
{
	ssize_t r;

	if (x->off && x->off == x->n)
		x->off = x->n = 0;
	if (x->cap - x->n < 4096) {
		if (x->off) {
			memmove(x->buf, x->buf + x->off, x->n - x->off);
			x->n -= x->off;
			x->off = 0;
		}
		if (x->cap - x->n < 4096) {
			x->cap = x->cap ? x->cap * 2 : 16384;
			x->buf = cnl_xrealloc(x->buf, x->cap);
		}
	}
	/* One byte kept for a NUL after the reply's head. */
	r = cnl_client_stream_read(x->s, x->buf + x->n, x->cap - x->n - 1);
	if (r == -EAGAIN) {
		struct pollfd pf = {.fd = cnl_client_stream_fd(x->s),
		                    .events = POLLIN};

		if (poll(&pf, 1, wait_ms) <= 0)
			return -EAGAIN;
		r = cnl_client_stream_read(x->s, x->buf + x->n,
		                           x->cap - x->n - 1);
	}
	if (r > 0)
		x->n += (size_t)r;
	return r;
}

/* Whether a control frame can go now: one to a server that reads
 * nothing (its buffers full) is dropped, not waited for (a write waits up
 * to a minute, and a close or a pong must not hold a stop). */
static bool exec_writable(const struct cnl_kube_exec *x)
{
	struct pollfd pf = {.fd = cnl_client_stream_fd(x->s),
	                    .events = POLLOUT};

	return poll(&pf, 1, 0) == 1 && (pf.revents & POLLOUT);
}

/* One frame from the client: FIN, @opcode, masked (RFC 6455 5.3). */
static int exec_send(struct cnl_kube_exec *x, int opcode, const char *data,
                     size_t n)
{
	unsigned char h[14], mask[4];
	size_t hl = 2;
	char *b;
	int r;

	if (n > 125 && opcode >= 8)
		return -EINVAL; /* a control frame's payload */
	if (getrandom(mask, sizeof(mask), 0) != sizeof(mask))
		return -EIO;
	h[0] = (unsigned char)(0x80 | opcode);
	if (n < 126) {
		h[1] = (unsigned char)(0x80 | n);
	} else if (n <= 0xffff) {
		h[1] = 0x80 | 126;
		h[2] = (unsigned char)(n >> 8);
		h[3] = (unsigned char)n;
		hl = 4;
	} else {
		h[1] = 0x80 | 127;
		for (int i = 0; i < 8; i++)
			h[2 + i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
		hl = 10;
	}
	memcpy(h + hl, mask, 4);
	hl += 4;
	b = cnl_xmalloc(hl + n + 1);
	memcpy(b, h, hl);
	for (size_t i = 0; i < n; i++)
		b[hl + i] = (char)(data[i] ^ mask[i % 4]);
	r = cnl_client_stream_write(x->s, b, hl + n);
	/* Masked is not hidden: the mask is beside the bytes (a host
	 * key, on stdin). */
	explicit_bzero(b, hl + n);
	free(b);
	return r;
}

long cnl_kube_exec_open(struct cnl_kube *k, const char *ns, const char *pod,
                        const char *container, const char *const *argv,
                        size_t argc, unsigned flags, struct cnl_kube_exec **ret,
                        char *err, size_t errlen)
{
	struct cnl_kube_exec *x;
	unsigned char key_raw[16], sha[20];
	char key[32], want[40], have[64], proto[64], token[4096], *path = NULL;
	char where[600]; /* the path without the command, for errors */
	int64_t deadline;
	char *req = NULL;
	size_t pl, hl = 0;
	long status = -EPROTO;
	int r;

	*ret = NULL;
	if (!argc) {
		cnl_seterr(err, errlen, "exec: no command");
		return -EINVAL;
	}
	/* The path, the command's words one query argument each. */
	{
		char *c = cnl_client_url_escape(container);
		char *n = cnl_client_url_escape(ns),
		     *p = cnl_client_url_escape(pod);

		/* Errors name the path without the command's words: they
		 * are logged, and the words may be anything typed. */
		r = snprintf(where, sizeof(where),
		             "%s/api/v1/namespaces/%s/pods/%s/exec", k->prefix,
		             n, p);
		r = r < 0 || (size_t)r >= sizeof(where)
		        ? -1
		        : asprintf(&path,
		                   "%s?container=%s%s&stdout=true&stderr=true",
		                   where, c,
		                   flags & CNL_KUBE_EXEC_STDIN ? "&stdin=true"
		                                               : "");
		free(c);
		free(n);
		free(p);
		if (r < 0)
			return -ENOMEM;
	}
	for (size_t i = 0; i < argc; i++) {
		char *a = cnl_client_url_escape(argv[i]), *np;

		r = asprintf(&np, "%s&command=%s", path, a);
		free(a);
		free(path);
		if (r < 0)
			return -ENOMEM;
		path = np;
	}
	if (getrandom(key_raw, sizeof(key_raw), 0) != sizeof(key_raw) ||
	    cnl_b64_encode(key_raw, sizeof(key_raw), CNL_B64_PAD, key,
	                   sizeof(key)) < 0) {
		free(path);
		return -EIO;
	}
	read_token(k, token, sizeof(token));
	r = asprintf(&req,
	             "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: cnlab\r\n"
	             "%s%s%s"
	             "Connection: Upgrade\r\nUpgrade: websocket\r\n"
	             "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n"
	             "Sec-WebSocket-Protocol: v5.channel.k8s.io, "
	             "v4.channel.k8s.io\r\n\r\n",
	             path, k->host, token[0] ? "Authorization: Bearer " : "",
	             token, token[0] ? "\r\n" : "", key);
	explicit_bzero(token, sizeof(token));
	if (r < 0) {
		free(path);
		return -ENOMEM;
	}
	x = cnl_xcalloc(1, sizeof(*x));
	/* The request and the reply's head (and an error's body), all within
	 * the client's timeout: a server that trickles bytes is given up
	 * too. */
	deadline = cnl_time_mono_ns() / 1000000 + k->timeout_ms;
	if (cnl_client_dial(k->cl, &x->s, err, errlen) < 0) {
		status = -EIO;
		goto fail;
	}
	if (cnl_client_stream_write(x->s, req, strlen(req)) < 0) {
		cnl_seterr(err, errlen, "GET %s: the request could not be sent",
		           where);
		status = -EIO;
		goto fail;
	}
	for (;;) {
		ssize_t n;
		char *end;
		int64_t left = deadline - cnl_time_mono_ns() / 1000000;

		if (x->n > WS_HEAD_MAX) {
			cnl_seterr(err, errlen,
			           "GET %s: a reply head past %d "
			           "bytes",
			           where, WS_HEAD_MAX);
			goto fail;
		}
		n = left > 0 ? exec_fill(x, left > 1000 ? 1000 : (int)left)
		             : -EAGAIN;
		if (n == -EAGAIN && left > 0)
			continue;
		if (n <= 0) {
			cnl_seterr(err, errlen, "GET %s: no reply", where);
			status = -EIO;
			goto fail;
		}
		x->buf[x->n] = '\0';
		if ((end = strstr(x->buf, "\r\n\r\n"))) {
			hl = (size_t)(end + 4 - x->buf);
			break;
		}
		if (memchr(x->buf, '\0', x->n))
			break; /* not text: below */
	}
	if (!hl || sscanf(x->buf, "HTTP/1.%*d %ld", &status) != 1) {
		cnl_seterr(err, errlen, "GET %s: not an HTTP reply", where);
		status = -EPROTO;
		goto fail;
	}
	x->buf[hl - 2] = '\0';
	if (status != 101) {
		/* Its body (a Status), as much as came with the head or
		 * within a second more. */
		char len[32];
		size_t want_n =
		    head_value(x->buf, "Content-Length", len, sizeof(len))
		        ? (size_t)strtoul(len, NULL, 10)
		        : 0;
		json_t *st;

		for (int64_t left;
		     want_n && want_n <= 65536 && x->n - hl < want_n &&
		     (left = deadline - cnl_time_mono_ns() / 1000000) > 0 &&
		     exec_fill(x, left > 1000 ? 1000 : (int)left) > 0;)
			;
		x->buf[x->n] = '\0';
		st = json_loads(x->buf + hl, JSON_DISABLE_EOF_CHECK, NULL);
		cnl_seterr(err, errlen, "GET %s: %ld %s", where, status,
		           json_string_value(json_object_get(st, "message"))
		               ?: "");
		/* The server's words go to logs and terminals: no control
		 * character of theirs. */
		for (char *c = err; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = '?';
		json_decref(st);
		goto fail;
	}
	/* The server's answer to our key (RFC 6455 4.1). */
	pl = strlen(key);
	{
		char kg[sizeof(key) + sizeof(WS_GUID)];

		memcpy(kg, key, pl);
		memcpy(kg + pl, WS_GUID, sizeof(WS_GUID));
		if (mbedtls_sha1_ret((const unsigned char *)kg,
		                     pl + sizeof(WS_GUID) - 1, sha) != 0 ||
		    cnl_b64_encode(sha, sizeof(sha), CNL_B64_PAD, want,
		                   sizeof(want)) < 0) {
			status = -EIO;
			goto fail;
		}
	}
	if (!head_value(x->buf, "Sec-WebSocket-Accept", have, sizeof(have)) ||
	    strcmp(have, want) != 0) {
		cnl_seterr(err, errlen,
		           "GET %s: 101 without the WebSocket accept of our "
		           "key",
		           where);
		status = -EPROTO;
		goto fail;
	}
	if (!head_value(x->buf, "Sec-WebSocket-Protocol", proto,
	                sizeof(proto)) ||
	    (strcmp(proto, "v5.channel.k8s.io") != 0 &&
	     strcmp(proto, "v4.channel.k8s.io") != 0)) {
		cnl_seterr(err, errlen,
		           "GET %s: 101 without a subprotocol we offered "
		           "(v5.channel.k8s.io, v4.channel.k8s.io)",
		           where);
		status = -EPROTO;
		goto fail;
	}
	x->version = proto[1] - '0';
	x->off = hl;
	explicit_bzero(req, strlen(req)); /* the bearer */
	free(req);
	free(path);
	*ret = x;
	return 101;
fail:
	if (req)
		explicit_bzero(req, strlen(req));
	free(req);
	free(path);
	cnl_kube_exec_close(x);
	return status == 101 ? -EPROTO : status;
}

int cnl_kube_exec_next(struct cnl_kube_exec *x, int wait_ms, int *channel,
                       const char **data, size_t *len)
{
	/* @wait_ms in all: pings, empty messages or a frame trickled in do
	 * not hold the caller past it. */
	int64_t deadline = cnl_time_mono_ns() / 1000000 + wait_ms;

	for (;;) {
		int64_t left = deadline - cnl_time_mono_ns() / 1000000;

		const unsigned char *b = (const unsigned char *)x->buf + x->off;
		size_t have = x->n - x->off, hl = 2;
		uint64_t pn;
		int op;
		bool fin;
		ssize_t r;

		if (have >= 2) {
			pn = b[1] & 0x7f;
			if (b[1] & 0x80)
				return -EPROTO; /* a server never masks */
			if (pn == 126)
				hl = 4;
			else if (pn == 127)
				hl = 10;
		}
		if (have >= hl && have >= 2) {
			if (hl == 4)
				pn = (uint64_t)b[2] << 8 | b[3];
			else if (hl == 10)
				for (int i = (int)(pn = 0); i < 8; i++)
					pn = pn << 8 | b[2 + i];
			if (pn > CNL_KUBE_EXEC_MSG_MAX)
				return -EPROTO;
			if (have >= hl + pn) {
				const char *p = (const char *)b + hl;

				op = b[0] & 0x0f;
				fin = b[0] & 0x80;
				x->off += hl + (size_t)pn;
				if (b[0] & 0x70)
					return -EPROTO; /* no extension */
				if (op == 8)
					return 0;
				if (op == 9) {
					if (!fin || pn > 125)
						return -EPROTO;
					if (exec_writable(x) &&
					    exec_send(x, 10, p, (size_t)pn) < 0)
						return -EIO;
					if (left <= 0)
						return -EAGAIN;
					continue;
				}
				if (op == 10) {
					if (left <= 0)
						return -EAGAIN;
					continue;
				}
				if ((op == 0) != x->in_msg ||
				    (op != 0 && op != 1 && op != 2))
					return -EPROTO;
				if (!x->in_msg)
					x->msg_n = 0;
				if (x->msg_n + pn > CNL_KUBE_EXEC_MSG_MAX)
					return -EPROTO;
				if (x->msg_n + pn + 1 > x->msg_cap) {
					/* Doubled: fragments cost no more
					 * than the message. */
					while (x->msg_n + pn + 1 > x->msg_cap)
						x->msg_cap =
						    x->msg_cap ? x->msg_cap * 2
						               : 4096;
					x->msg =
					    cnl_xrealloc(x->msg, x->msg_cap);
				}
				memcpy(x->msg + x->msg_n, p, (size_t)pn);
				x->msg_n += (size_t)pn;
				x->in_msg = !fin;
				if (!fin || x->msg_n == 0) {
					if (left <= 0)
						return -EAGAIN;
					continue;
				}
				*channel = (unsigned char)x->msg[0];
				*data = x->msg + 1;
				*len = x->msg_n - 1;
				return 1;
			}
		}
		/* One read at least, even past the deadline: bytes there
		 * already are taken. */
		r = exec_fill(x, left > 0 ? (int)left : 0);
		if (r <= 0)
			return (int)r;
	}
}

int cnl_kube_exec_version(const struct cnl_kube_exec *x)
{
	return x->version;
}

int cnl_kube_exec_fd(const struct cnl_kube_exec *x)
{
	return cnl_client_stream_fd(x->s);
}

int cnl_kube_exec_send(struct cnl_kube_exec *x, const void *data, size_t n)
{
	enum { CHUNK = 64 * 1024 };
	char *b = cnl_xmalloc(CHUNK + 1);
	int r = 0;

	/* Channel 0, a message per CHUNK bytes: each within the API
	 * server's frame limits. */
	b[0] = 0;
	for (size_t off = 0; r == 0 && off < n;) {
		size_t k = n - off < CHUNK ? n - off : CHUNK;

		memcpy(b + 1, (const char *)data + off, k);
		r = exec_send(x, 2, b, k + 1) < 0 ? -EIO : 0;
		off += k;
	}
	explicit_bzero(b, CHUNK + 1);
	free(b);
	return r;
}

/* Whether a whole frame is in x->buf. */
static bool frame_ready(const struct cnl_kube_exec *x)
{
	const unsigned char *b = (const unsigned char *)x->buf + x->off;
	size_t have = x->n - x->off, hl = 2;
	uint64_t pn;

	if (have < 2)
		return false;
	pn = b[1] & 0x7f;
	if (pn == 126)
		hl = 4;
	else if (pn == 127)
		hl = 10;
	if (have < hl)
		return false;
	if (hl == 4)
		pn = (uint64_t)b[2] << 8 | b[3];
	else if (hl == 10)
		for (int i = (int)(pn = 0); i < 8; i++)
			pn = pn << 8 | b[2 + i];
	/* One past the limit is "ready": cnl_kube_exec_next() says so. */
	return pn > CNL_KUBE_EXEC_MSG_MAX || have - hl >= pn;
}

bool cnl_kube_exec_pending(struct cnl_kube_exec *x)
{
	return (x->buf && frame_ready(x)) || cnl_client_stream_pending(x->s);
}

int cnl_kube_exec_send_eof(struct cnl_kube_exec *x)
{
	/* v5: a message on channel 255 (the close signal) naming channel
	 * 0; v4 has no way to end stdin but closing the stream. */
	if (x->version < 5)
		return -ENOTSUP;
	/* As a control frame: not waited for by a server that reads
	 * nothing. */
	if (!exec_writable(x))
		return -EAGAIN;
	return exec_send(x, 2, "\xff\x00", 2) < 0 ? -EIO : 0;
}

void cnl_kube_exec_close(struct cnl_kube_exec *x)
{
	if (!x)
		return;
	if (x->s && x->version && exec_writable(x)) {
		/* 1000: a normal closure. */
		(void)exec_send(x, 8, "\x03\xe8", 2);
	}
	cnl_client_stream_free(x->s);
	free(x->buf);
	free(x->msg);
	free(x);
}
