/*
 * client.c - CNLab's one HTTP client over libcurl (see client.h).
 *
 * Each request resets the client's easy handle (curl_easy_reset keeps the
 * connection cache, so keep-alive survives) and sets every option again,
 * so no option of one request leaks into the next.  The reply is gathered
 * in a buffer that refuses to grow past the limit in the write callback;
 * CURLOPT_MAXFILESIZE refuses earlier when the server announces a larger
 * Content-Length, but the callback is what holds when it does not.
 *
 * Streamed files: an upload is read with pread from the caller's
 * descriptor as libcurl asks for it; a download is written to the
 * caller's descriptor once the status is known to be 2xx (before that,
 * and for any other status, the body goes to memory as usual), hashed as
 * it goes.  A streamed reply (on_data) is handed to the caller's
 * callback the same way, once its status is known to be 2xx.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "common/fs.h"
#include "common/util.h"
#include "net/client.h"
#include "net/error.h"

struct cnl_client {
	CURL *curl;
	char *base; /* without trailing '/' */
	char *auth; /* "Authorization: Bearer ..." or NULL */
	void (*token_fn)(void *ud, char *buf, size_t len);
	void *token_ud;
	char *cafile;     /* or NULL */
	char *user_agent; /* or NULL */
	long connect_timeout_ms;
	long timeout_ms;
	long idle_timeout_ms;
	size_t reply_max;
};

struct buf {
	char *p;
	size_t n;
	size_t max;
	bool too_large;
	/* Downloads (see client.h). */
	CURL *curl;
	const struct cnl_client_request *rq;
	int to_fd; /* 0 undecided, 1 to the descriptor, -1 to memory */
	uint64_t written;
	bool write_failed;
	EVP_MD_CTX *md;
	char server_sha256[65];
	/* Uploads. */
	uint64_t sent;
	/* Streamed replies (rq->on_data): 0 undecided, 1 to the callback,
	 * -1 to memory; whether the callback asked to end. */
	int to_cb;
	bool cancelled;
};

/* Write @n bytes to the download descriptor; false on failure. */
static bool to_file(struct buf *b, const char *data, size_t n)
{
	if (b->rq->download_max && n > b->rq->download_max - b->written) {
		b->too_large = true;
		return false;
	}
	for (size_t o = 0; o < n;) {
		ssize_t w = write(b->rq->download_fd, data + o, n - o);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			b->write_failed = true;
			return false;
		}
		o += (size_t)w;
	}
	EVP_DigestUpdate(b->md, data, n);
	b->written += n;
	return true;
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *ud)
{
	struct buf *b = ud;
	size_t n = size * nmemb;

	if (b->rq && b->rq->download && b->to_fd == 0) {
		long st = 0;

		curl_easy_getinfo(b->curl, CURLINFO_RESPONSE_CODE, &st);
		b->to_fd = st >= 200 && st < 300 ? 1 : -1;
	}
	if (b->to_fd == 1)
		return to_file(b, data, n) ? n : 0;
	if (b->rq && b->rq->on_data && b->to_cb == 0) {
		long st = 0;

		curl_easy_getinfo(b->curl, CURLINFO_RESPONSE_CODE, &st);
		b->to_cb = st >= 200 && st < 300 ? 1 : -1;
	}
	if (b->to_cb == 1) {
		if (b->rq->on_data(b->rq->on_data_ud, data, n) != 0) {
			b->cancelled = true;
			return 0; /* CURLE_WRITE_ERROR */
		}
		return n;
	}
	if (n > b->max - b->n) {
		b->too_large = true;
		return 0; /* makes libcurl fail with CURLE_WRITE_ERROR */
	}
	b->p = cnl_xrealloc(b->p, b->n + n + 1);
	memcpy(b->p + b->n, data, n);
	b->n += n;
	b->p[b->n] = '\0';
	return n;
}

/* The X-Content-SHA256 header of a reply, kept for the caller. */
static size_t on_header(char *data, size_t size, size_t nmemb, void *ud)
{
	struct buf *b = ud;
	size_t n = size * nmemb;
	static const char name[] = "X-Content-SHA256:";
	size_t k = sizeof(name) - 1, i = 0;

	if (n > k && strncasecmp(data, name, k) == 0) {
		while (k < n && data[k] == ' ')
			k++;
		while (k < n && i < 64 && data[k] != '\r' && data[k] != '\n')
			b->server_sha256[i++] = data[k++];
		b->server_sha256[i] = '\0';
	}
	return n;
}

/* Fill libcurl's buffer from the upload descriptor. */
static size_t on_read(char *buf, size_t size, size_t nmemb, void *ud)
{
	struct buf *b = ud;
	size_t want = size * nmemb;
	ssize_t got;

	if (b->sent >= b->rq->upload_size)
		return 0;
	if (want > b->rq->upload_size - b->sent)
		want = (size_t)(b->rq->upload_size - b->sent);
	do
		got = pread(b->rq->upload_fd, buf, want, (off_t)b->sent);
	while (got < 0 && errno == EINTR);
	if (got <= 0) /* an error, or the file shrank: fail the request */
		return CURL_READFUNC_ABORT;
	b->sent += (uint64_t)got;
	return (size_t)got;
}

void cnl_client_sha256(const void *buf, size_t len, uint8_t ret[32])
{
	unsigned int mdlen = 0;

	if (EVP_Digest(buf, len, ret, &mdlen, EVP_sha256(), NULL) != 1 ||
	    mdlen != 32)
		abort(); /* libcrypto out of memory, as cnl_xmalloc */
}

int cnl_client_file_sha256(int fd, uint64_t size, char ret_hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	char *buf = cnl_xmalloc(1 << 16);
	uint64_t off = 0;
	int r = 0;

	if (!ctx)
		abort(); /* out of memory, as cnl_xmalloc */
	EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	while (off < size) {
		size_t want = size - off < (1 << 16) ? (size_t)(size - off)
		                                     : (size_t)1 << 16;
		ssize_t got = pread(fd, buf, want, (off_t)off);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			r = got < 0 ? -EIO : -ENODATA;
			break;
		}
		EVP_DigestUpdate(ctx, buf, (size_t)got);
		off += (uint64_t)got;
	}
	if (r == 0) {
		EVP_DigestFinal_ex(ctx, md, &mdlen);
		cnl_hex(md, mdlen, ret_hex);
	}
	EVP_MD_CTX_free(ctx);
	free(buf);
	return r;
}

/* The Authorization line of the next request (malloc'd), or NULL. */
static char *auth_line(struct cnl_client *cl)
{
	char tok[512], *line;
	size_t n;

	if (!cl->token_fn)
		return cl->auth ? cnl_xstrdup(cl->auth) : NULL;
	tok[0] = '\0';
	cl->token_fn(cl->token_ud, tok, sizeof(tok));
	if (!tok[0])
		return NULL;
	n = strlen(tok) + 32;
	line = cnl_xmalloc(n);
	snprintf(line, n, "Authorization: Bearer %s", tok);
	explicit_bzero(tok, sizeof(tok));
	return line;
}

static void auth_line_free(char *line)
{
	if (line) {
		explicit_bzero(line, strlen(line));
		free(line);
	}
}

static char *dup_or_null(const char *s)
{
	return s && *s ? cnl_xstrdup(s) : NULL;
}

int cnl_client_new(const struct cnl_client_config *cfg, struct cnl_client **ret)
{
	struct cnl_client *cl;
	size_t n;

	if (!cfg || !ret || !cfg->base)
		return -EINVAL;
	if (strlen(cfg->base) >= CNL_CLIENT_BASE_MAX ||
	    (cfg->token && strnlen(cfg->token, CNL_CLIENT_TOKEN_MAX + 1) >
	                       CNL_CLIENT_TOKEN_MAX))
		return -EINVAL;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return -EIO;
	cl = cnl_xcalloc(1, sizeof(*cl));
	if (!(cl->curl = curl_easy_init())) {
		free(cl);
		curl_global_cleanup();
		return -EIO;
	}
	cl->base = cnl_xstrdup(cfg->base);
	n = strlen(cl->base);
	while (n > 0 && cl->base[n - 1] == '/')
		cl->base[--n] = '\0';
	if (cfg->token && *cfg->token) {
		n = strlen(cfg->token) + 32;
		cl->auth = cnl_xmalloc(n);
		snprintf(cl->auth, n, "Authorization: Bearer %s", cfg->token);
	}
	cl->token_fn = cfg->token_fn;
	cl->token_ud = cfg->token_ud;
	cl->cafile = dup_or_null(cfg->cafile);
	cl->user_agent = dup_or_null(cfg->user_agent);
	cl->connect_timeout_ms = cfg->connect_timeout_ms;
	cl->timeout_ms = cfg->timeout_ms;
	cl->idle_timeout_ms = cfg->idle_timeout_ms;
	cl->reply_max =
	    cfg->reply_max ? cfg->reply_max : CNL_CLIENT_REPLY_MAX_DEFAULT;
	*ret = cl;
	return 0;
}

void cnl_client_free(struct cnl_client *cl)
{
	if (!cl)
		return;
	curl_easy_cleanup(cl->curl);
	free(cl->base);
	if (cl->auth) {
		explicit_bzero(cl->auth, strlen(cl->auth));
		free(cl->auth);
	}
	free(cl->cafile);
	free(cl->user_agent);
	free(cl);
	curl_global_cleanup();
}

void cnl_client_reply_done(struct cnl_client_reply *r)
{
	if (!r)
		return;
	free(r->body);
	json_decref(r->json);
	r->body = NULL;
	r->json = NULL;
}

char *cnl_client_url_escape(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = cnl_xmalloc(strlen(s) * 3 + 1), *o = out;

	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || strchr("-._~", ch)) {
			*o++ = (char)ch;
		} else {
			*o++ = '%';
			*o++ = hex[ch >> 4];
			*o++ = hex[ch & 15];
		}
	}
	*o = '\0';
	return out;
}

/* Fill @ret for a request that got no reply; returns -EIO. */
static int no_reply(struct cnl_client_reply *ret, struct buf *b,
                    const char *error, const char *detail)
{
	ret->too_large = b->too_large;
	snprintf(ret->error, sizeof(ret->error), "%s",
	         b->too_large      ? "response too large"
	         : b->write_failed ? "cannot write the download"
	                           : error);
	snprintf(ret->detail, sizeof(ret->detail), "%s",
	         b->too_large || b->write_failed ? "" : detail);
	free(b->p);
	EVP_MD_CTX_free(b->md);
	b->md = NULL;
	return -EIO;
}

int cnl_client_request(struct cnl_client *cl,
                       const struct cnl_client_request *rq,
                       struct cnl_client_reply *ret)
{
	char cerr[CURL_ERROR_SIZE] = "";
	struct curl_slist *h = NULL;
	struct buf b = {0};
	_cleanup_free_ char *url = NULL, *text = NULL, *idem_h = NULL,
	                    *ct_h = NULL, *sha_h = NULL;
	long timeout_ms, idle_ms;
	size_t n;
	CURLcode cc;
	CURL *e;

	if (!ret)
		return -EINVAL;
	memset(ret, 0, sizeof(*ret));
	if (!cl || !rq || !rq->method || !rq->path)
		return -EINVAL;
	e = cl->curl;
	b.max = cl->reply_max;
	b.curl = e;
	b.rq = rq;
	if (rq->download) {
		if (!(b.md = EVP_MD_CTX_new()))
			abort(); /* out of memory, as cnl_xmalloc */
		EVP_DigestInit_ex(b.md, EVP_sha256(), NULL);
	}
	n = strlen(cl->base) + strlen(rq->path) + 1;
	url = cnl_xmalloc(n);
	snprintf(url, n, "%s%s", cl->base, rq->path);
	if (rq->json && !(text = json_dumps(rq->json, JSON_COMPACT))) {
		snprintf(ret->error, sizeof(ret->error),
		         "cannot encode the request");
		return -ENOMEM;
	}

	curl_easy_reset(e);
	if (curl_easy_setopt(e, CURLOPT_URL, url) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") !=
	        CURLE_OK)
		return no_reply(ret, &b, "URL refused by libcurl", "");
	curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, rq->method);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, cerr);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, &b);
	/* A download's limit is its own (0: none), a streamed reply has
	 * none (the callback keeps nothing); a reply in memory is held to
	 * the client's (the callback's check holds for a refusal). */
	curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE,
	                 rq->download  ? (curl_off_t)rq->download_max
	                 : rq->on_data ? (curl_off_t)0
	                               : (curl_off_t)cl->reply_max);
	if (cl->connect_timeout_ms > 0)
		curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
		                 cl->connect_timeout_ms);
	timeout_ms = rq->timeout_ms > 0 ? rq->timeout_ms : cl->timeout_ms;
	if (timeout_ms > 0)
		curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
	/* Idle: under a byte a second for that long, either way (libcurl
	 * counts in whole seconds). */
	idle_ms =
	    rq->idle_timeout_ms ? rq->idle_timeout_ms : cl->idle_timeout_ms;
	if (idle_ms > 0) {
		curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME,
		                 (idle_ms + 999) / 1000);
	}
	if (cl->cafile)
		curl_easy_setopt(e, CURLOPT_CAINFO, cl->cafile);
	if (cl->user_agent)
		curl_easy_setopt(e, CURLOPT_USERAGENT, cl->user_agent);

	{
		/* curl_slist_append() copies the line. */
		char *auth = auth_line(cl);

		if (auth)
			h = curl_slist_append(h, auth);
		auth_line_free(auth);
	}
	h = curl_slist_append(h, "Accept: application/json");
	if (rq->sha256) {
		n = strlen(rq->sha256) + 24;
		sha_h = cnl_xmalloc(n);
		snprintf(sha_h, n, "X-Content-SHA256: %s", rq->sha256);
		h = curl_slist_append(h, sha_h);
	}
	if (rq->idempotency_key) {
		n = strlen(rq->idempotency_key) + 20;
		idem_h = cnl_xmalloc(n);
		snprintf(idem_h, n, "Idempotency-Key: %s", rq->idempotency_key);
		h = curl_slist_append(h, idem_h);
	}
	if (rq->upload) {
		h = curl_slist_append(h,
		                      "Content-Type: application/octet-stream");
		/* "Expect: 100-continue": the server refuses from the headers
		 * alone (a limit, a name, permissions), and the refusal then
		 * comes before any of the body is sent, instead of a broken
		 * pipe halfway through a large file. */
		h = curl_slist_append(h, "Expect: 100-continue");
		curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(e, CURLOPT_READDATA, &b);
		curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE,
		                 (curl_off_t)rq->upload_size);
	} else if (text) {
		h = curl_slist_append(h, "Content-Type: application/json");
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, text);
	} else if (rq->body) {
		if (rq->content_type) {
			n = strlen(rq->content_type) + 16;
			ct_h = cnl_xmalloc(n);
			snprintf(ct_h, n, "Content-Type: %s", rq->content_type);
			h = curl_slist_append(h, ct_h);
		}
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
		                 (curl_off_t)rq->body_len);
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, rq->body);
	} else if (strcmp(rq->method, "GET") != 0) {
		h = curl_slist_append(h, "Content-Type: application/json");
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, "{}");
	}
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	cc = curl_easy_perform(e);
	curl_slist_free_all(h);
	if (cc == CURLE_FILESIZE_EXCEEDED)
		b.too_large = true;
	if (cc == CURLE_OPERATION_TIMEDOUT) {
		curl_off_t conn_us = 0;

		/* Not connected yet: the connect timeout (or the whole
		 * limit, when shorter); else which of the two ran out. */
		curl_easy_getinfo(e, CURLINFO_CONNECT_TIME_T, &conn_us);
		if (conn_us == 0)
			ret->timed_out = CNL_CLIENT_TIMEOUT_CONNECT;
		else if (idle_ms > 0 && strstr(cerr, "too slow"))
			ret->timed_out = CNL_CLIENT_TIMEOUT_IDLE;
		else
			ret->timed_out = CNL_CLIENT_TIMEOUT_TOTAL;
	}
	if (cc != CURLE_OK && b.cancelled) {
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &ret->status);
		no_reply(ret, &b, "cancelled by the caller", "");
		return -ECANCELED;
	}
	if (cc != CURLE_OK)
		return no_reply(ret, &b, curl_easy_strerror(cc), cerr);
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &ret->status);
	ret->body = b.p ? b.p : cnl_xstrdup("");
	ret->len = b.n;
	snprintf(ret->server_sha256, sizeof(ret->server_sha256), "%s",
	         b.server_sha256);
	if (rq->download &&
	    (b.to_fd == 1 || (ret->status >= 200 && ret->status < 300))) {
		unsigned char md[EVP_MAX_MD_SIZE];
		unsigned mdlen = 0;

		/* An empty 2xx body never reached on_data. */
		ret->downloaded = true;
		ret->download_len = b.written;
		EVP_DigestFinal_ex(b.md, md, &mdlen);
		cnl_hex(md, mdlen, ret->download_sha256);
	}
	EVP_MD_CTX_free(b.md);
	if (ret->len && (ret->body[0] == '{' || ret->body[0] == '['))
		ret->json = json_loadb(ret->body, ret->len, 0, NULL);
	return 0;
}

int cnl_client_send(struct cnl_client *cl, const char *method, const char *path,
                    json_t *body, const char *idem,
                    struct cnl_client_reply *ret)
{
	return cnl_client_request(cl,
	                          &(struct cnl_client_request){
	                              .method = method,
	                              .path = path,
	                              .json = body,
	                              .idempotency_key = idem,
	                          },
	                          ret);
}

long cnl_client_call(struct cnl_client *cl, const char *method,
                     const char *path, json_t *body, long timeout_s,
                     json_t **ret, char *err, size_t errlen)
{
	struct cnl_client_reply r;
	const char *msg;
	int rc;

	if (ret)
		*ret = NULL;
	rc = cnl_client_request(cl,
	                        &(struct cnl_client_request){
	                            .method = method,
	                            .path = path,
	                            .json = body,
	                            .timeout_ms = timeout_s * 1000,
	                        },
	                        &r);
	if (rc < 0) {
		snprintf(err, errlen, "%s %s: %s", method ? method : "",
		         path ? path : "", r.error);
		cnl_client_reply_done(&r);
		return rc;
	}
	if (r.status >= 400) {
		cnl_http_error_read(r.json, NULL, &msg);
		snprintf(err, errlen, "%s %s: %ld %s", method, path, r.status,
		         msg ? msg : "");
	}
	if (ret)
		*ret = json_incref(r.json);
	cnl_client_reply_done(&r);
	return r.status;
}

/* ---- upgraded connections -------------------------------------------- */

struct cnl_client_stream {
	CURL *curl;
	int fd;
	char *early; /* bytes read past the 101's head */
	size_t early_n, early_off;
};

int cnl_client_stream_fd(const struct cnl_client_stream *s)
{
	return s->fd;
}

void cnl_client_stream_free(struct cnl_client_stream *s)
{
	if (!s)
		return;
	curl_easy_cleanup(s->curl);
	free(s->early);
	free(s);
	curl_global_cleanup();
}

/* Wait until @fd is ready for @events (or failed); false on poll error. */
static bool wait_fd(int fd, short events, int ms)
{
	struct pollfd p = {fd, events, 0};
	int r;

	while ((r = poll(&p, 1, ms)) < 0 && errno == EINTR)
		;
	return r > 0;
}

ssize_t cnl_client_stream_read(struct cnl_client_stream *s, char *buf, size_t n)
{
	size_t got = 0;
	CURLcode rc;

	if (s->early_off < s->early_n) {
		size_t k = s->early_n - s->early_off;

		k = k < n ? k : n;
		memcpy(buf, s->early + s->early_off, k);
		s->early_off += k;
		return (ssize_t)k;
	}
	rc = curl_easy_recv(s->curl, buf, n, &got);
	if (rc == CURLE_AGAIN)
		return -EAGAIN;
	if (rc != CURLE_OK)
		return -EIO;
	return (ssize_t)got;
}

int cnl_client_stream_write(struct cnl_client_stream *s, const char *buf,
                            size_t n)
{
	while (n > 0) {
		size_t sent = 0;
		CURLcode rc = curl_easy_send(s->curl, buf, n, &sent);

		if (rc == CURLE_AGAIN) {
			if (!wait_fd(s->fd, POLLOUT, 60 * 1000))
				return -ETIMEDOUT;
			continue;
		}
		if (rc != CURLE_OK)
			return -EIO;
		buf += sent;
		n -= sent;
	}
	return 0;
}

int cnl_client_upgrade(struct cnl_client *cl, const char *path,
                       const char *proto, struct cnl_client_stream **ret,
                       char *err, size_t errlen)
{
	struct cnl_client_stream *s;
	const char *host = strstr(cl->base, "://"), *bpath;
	char head[8192];
	curl_socket_t sock = CURL_SOCKET_BAD;
	size_t hn = 0;
	char *end = NULL;
	int status = 0, r;
	long ms = cl->connect_timeout_ms ? cl->connect_timeout_ms : 10000;

	if (!host)
		return -EINVAL;
	host += 3;
	bpath = strchr(host, '/');
	if (!bpath)
		bpath = host + strlen(host);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return -EIO;
	s = cnl_xcalloc(1, sizeof(*s));
	if (!(s->curl = curl_easy_init())) {
		free(s);
		curl_global_cleanup();
		return -EIO;
	}
	curl_easy_setopt(s->curl, CURLOPT_URL, cl->base);
	curl_easy_setopt(s->curl, CURLOPT_CONNECT_ONLY, 1L);
	curl_easy_setopt(s->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(s->curl, CURLOPT_CONNECTTIMEOUT_MS, ms);
	if (cl->cafile)
		curl_easy_setopt(s->curl, CURLOPT_CAINFO, cl->cafile);
	if (curl_easy_perform(s->curl) != CURLE_OK ||
	    curl_easy_getinfo(s->curl, CURLINFO_ACTIVESOCKET, &sock) !=
	        CURLE_OK ||
	    sock == CURL_SOCKET_BAD) {
		snprintf(err, errlen, "POST %s: cannot connect to %s", path,
		         cl->base);
		goto fail;
	}
	s->fd = (int)sock;
	char *auth = auth_line(cl);
	r = snprintf(head, sizeof(head),
	             "POST %.*s%s HTTP/1.1\r\nHost: %.*s\r\n%s%s"
	             "Connection: Upgrade\r\nUpgrade: %s\r\n"
	             "Content-Length: 0\r\n\r\n",
	             (int)strlen(bpath), bpath, path, (int)(bpath - host), host,
	             auth ? auth : "", auth ? "\r\n" : "", proto);
	auth_line_free(auth);
	if (r < 0 || (size_t)r >= sizeof(head) ||
	    cnl_client_stream_write(s, head, (size_t)r) < 0) {
		snprintf(err, errlen, "POST %s: cannot send the request", path);
		goto fail;
	}
	/* The head of the reply, byte runs until its blank line; what comes
	 * after it is the stream's. */
	while (!end) {
		ssize_t n;

		if (hn + 1 >= sizeof(head)) {
			snprintf(err, errlen, "POST %s: reply head too long",
			         path);
			goto fail;
		}
		n = cnl_client_stream_read(s, head + hn, sizeof(head) - 1 - hn);
		if (n == -EAGAIN) {
			if (!wait_fd(s->fd, POLLIN, 30 * 1000)) {
				snprintf(err, errlen, "POST %s: no reply",
				         path);
				goto fail;
			}
			continue;
		}
		if (n <= 0) {
			snprintf(err, errlen,
			         "POST %s: connection closed before a reply",
			         path);
			goto fail;
		}
		hn += (size_t)n;
		head[hn] = '\0';
		end = strstr(head, "\r\n\r\n");
	}
	if (sscanf(head, "HTTP/%*d.%*d %d", &status) != 1 || status != 101) {
		const char *body = end + 4, *msg = NULL;
		json_t *j = json_loads(body, 0, NULL);

		cnl_http_error_read(j, NULL, &msg);
		snprintf(err, errlen, "POST %s: %d %s", path, status,
		         msg ? msg : "(no upgrade)");
		json_decref(j);
		goto fail;
	}
	end += 4;
	if ((size_t)(end - head) < hn) {
		s->early_n = hn - (size_t)(end - head);
		s->early = cnl_xmalloc(s->early_n);
		memcpy(s->early, end, s->early_n);
	}
	*ret = s;
	return 0;
fail:
	cnl_client_stream_free(s);
	return -EIO;
}
