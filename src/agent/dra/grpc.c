/*
 * grpc.c - unary gRPC over h2c on Unix sockets, on nghttp2 (grpc.h).
 *
 * Why not gRPC's own C core (libgrpc-dev): it brings abseil, re2, c-ares
 * and a C++ runtime into a node daemon for two unary services on a local
 * socket; nghttp2 is one small C library (libcurl's HTTP/2 already uses
 * it) and the framing gRPC adds on top of HTTP/2 is a five-byte prefix
 * and two trailers.
 *
 * Each connection is an nghttp2 server session fed from the socket
 * (nghttp2_session_mem_recv) and flushed to it (mem_send) after every
 * read; a request is handled when its stream ends, inside the frame
 * callback, and its reply submitted at once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "agent/dra/grpc.h"
#include "common/log.h"
#include "common/util.h"

#define MAX_LISTEN 4
#define MAX_CONNS  64

struct stream {
	char path[256];
	bool post, grpc_type, path_long;
	uint8_t *body;
	size_t len, cap;
	bool too_big;
	/* The reply message, framed, and how much of it went out. */
	uint8_t *out;
	size_t out_len, out_off;
	char status[12];
};

struct conn {
	int fd;
	nghttp2_session *sess;
	struct cnl_grpc_server *srv;
};

struct cnl_grpc_server {
	struct cnl_grpc_method *m;
	int n;
	int lfd[MAX_LISTEN];
	char lpath[MAX_LISTEN][sizeof(((struct sockaddr_un *)0)->sun_path)];
	int nl;
	struct conn *conns[MAX_CONNS];
};

struct cnl_grpc_server *cnl_grpc_server_new(const struct cnl_grpc_method *m,
                                            int n)
{
	struct cnl_grpc_server *s = cnl_xcalloc(1, sizeof(*s));

	s->m = cnl_xcalloc((size_t)(n > 0 ? n : 1), sizeof(*m));
	memcpy(s->m, m, (size_t)n * sizeof(*m));
	s->n = n;
	return s;
}

int cnl_grpc_server_listen(struct cnl_grpc_server *s, const char *path,
                           char *err, size_t errlen)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, r;

	if (s->nl == MAX_LISTEN) {
		cnl_seterr(err, errlen, "too many sockets");
		return -ENOSPC;
	}
	if (strlen(path) >= sizeof(sa.sun_path)) {
		cnl_seterr(err, errlen, "socket path too long: %s", path);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		r = -errno;
		cnl_seterr(err, errlen, "socket: %s", strerror(errno));
		return r;
	}
	/* A socket a previous run left behind would make bind() fail; only
	 * a socket is removed, never another kind of file. */
	struct stat st;
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(path);
	mode_t old = umask(0177);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0 || listen(fd, 16) < 0) {
		r = -errno;
		cnl_seterr(err, errlen, "cannot listen on %s: %s", path,
		           strerror(errno));
		close(fd);
		return r;
	}
	s->lfd[s->nl] = fd;
	memcpy(s->lpath[s->nl], path, strlen(path) + 1);
	s->nl++;
	return 0;
}

static void conn_free(struct cnl_grpc_server *s, int i)
{
	struct conn *c = s->conns[i];

	nghttp2_session_del(c->sess);
	close(c->fd);
	free(c);
	s->conns[i] = NULL;
}

void cnl_grpc_server_free(struct cnl_grpc_server *s)
{
	if (!s)
		return;
	for (int i = 0; i < MAX_CONNS; i++)
		if (s->conns[i])
			conn_free(s, i);
	for (int i = 0; i < s->nl; i++) {
		close(s->lfd[i]);
		unlink(s->lpath[i]);
	}
	free(s->m);
	free(s);
}

/* ---- the HTTP/2 side -------------------------------------------------- */

static bool is_request_headers(const nghttp2_frame *f)
{
	return f->hd.type == NGHTTP2_HEADERS &&
	       f->headers.cat == NGHTTP2_HCAT_REQUEST;
}

static int on_begin_headers(nghttp2_session *sess, const nghttp2_frame *f,
                            void *ud)
{
	(void)ud;
	if (!is_request_headers(f))
		return 0;
	struct stream *st = cnl_xcalloc(1, sizeof(*st));
	nghttp2_session_set_stream_user_data(sess, f->hd.stream_id, st);
	return 0;
}

static bool eq(const uint8_t *a, size_t alen, const char *b)
{
	return alen == strlen(b) && memcmp(a, b, alen) == 0;
}

static int on_header(nghttp2_session *sess, const nghttp2_frame *f,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *ud)
{
	struct stream *st;

	(void)flags;
	(void)ud;
	if (!is_request_headers(f) ||
	    !(st = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id)))
		return 0;
	if (eq(name, namelen, ":path")) {
		if (valuelen >= sizeof(st->path)) {
			st->path_long = true;
			return 0;
		}
		memcpy(st->path, value, valuelen);
		st->path[valuelen] = '\0';
	} else if (eq(name, namelen, ":method")) {
		st->post = eq(value, valuelen, "POST");
	} else if (eq(name, namelen, "content-type")) {
		/* "application/grpc", or with a subtype: "+proto" or ";..." */
		static const char ct[] = "application/grpc";
		size_t n = sizeof(ct) - 1;
		st->grpc_type =
		    valuelen >= n && memcmp(value, ct, n) == 0 &&
		    (valuelen == n || value[n] == '+' || value[n] == ';');
	}
	return 0;
}

static int on_data_chunk(nghttp2_session *sess, uint8_t flags,
                         int32_t stream_id, const uint8_t *data, size_t len,
                         void *ud)
{
	struct stream *st =
	    nghttp2_session_get_stream_user_data(sess, stream_id);

	(void)flags;
	(void)ud;
	if (!st || st->too_big)
		return 0;
	if (st->len + len > CNL_GRPC_MSG_MAX + 5) {
		st->too_big = true;
		return 0;
	}
	if (st->len + len > st->cap) {
		st->cap = (st->len + len) * 2;
		st->body = cnl_xrealloc(st->body, st->cap);
	}
	memcpy(st->body + st->len, data, len);
	st->len += len;
	return 0;
}

/* grpc-message is percent-encoded: every byte outside 0x20-0x7e, and
 * '%' itself. */
static void percent_encode(const char *in, char *out, size_t cap)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (const unsigned char *p = (const unsigned char *)in;
	     *p && o + 4 < cap; p++) {
		if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
			out[o++] = (char)*p;
		} else {
			out[o++] = '%';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		}
	}
	out[o] = '\0';
}

#define NV(n, v)                                                          \
	{                                                                 \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), \
		    NGHTTP2_NV_FLAG_NONE                                  \
	}

static void reply_error(nghttp2_session *sess, int32_t id, int code,
                        const char *msg)
{
	char status[12], enc[1024];

	snprintf(status, sizeof(status), "%d", code);
	percent_encode(msg, enc, sizeof(enc));
	nghttp2_nv hdr[] = {NV(":status", "200"),
	                    NV("content-type", "application/grpc"),
	                    NV("grpc-status", status), NV("grpc-message", enc)};
	/* Trailers-Only: no data provider, so the HEADERS frame ends the
	 * stream. */
	nghttp2_submit_response(sess, id, hdr, CNL_ARRAY_SIZE(hdr), NULL);
}

static ssize_t read_reply(nghttp2_session *sess, int32_t id, uint8_t *buf,
                          size_t len, uint32_t *flags, nghttp2_data_source *src,
                          void *ud)
{
	struct stream *st = src->ptr;
	size_t n = st->out_len - st->out_off;

	(void)ud;
	if (n > len)
		n = len;
	memcpy(buf, st->out + st->out_off, n);
	st->out_off += n;
	if (st->out_off == st->out_len) {
		nghttp2_nv tr[] = {NV("grpc-status", "0")};
		*flags |=
		    NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
		if (nghttp2_submit_trailer(sess, id, tr, CNL_ARRAY_SIZE(tr)) !=
		    0)
			return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	return (ssize_t)n;
}

static void handle(struct cnl_grpc_server *s, nghttp2_session *sess, int32_t id,
                   struct stream *st)
{
	const struct cnl_grpc_method *m = NULL;
	uint8_t *resp = NULL;
	size_t resp_len = 0, mlen;
	char msg[512] = "";
	int code;

	if (!st->post || !st->grpc_type) {
		reply_error(sess, id, CNL_GRPC_INVALID_ARGUMENT,
		            "not a gRPC request (a POST of application/grpc)");
		return;
	}
	for (int i = 0; !st->path_long && i < s->n; i++)
		if (strcmp(s->m[i].path, st->path) == 0)
			m = &s->m[i];
	if (!m) {
		snprintf(msg, sizeof(msg), "unknown method %s",
		         st->path_long ? "(path too long)" : st->path);
		reply_error(sess, id, CNL_GRPC_UNIMPLEMENTED, msg);
		return;
	}
	if (st->too_big) {
		reply_error(sess, id, CNL_GRPC_RESOURCE_EXHAUSTED,
		            "request message larger than 4 MiB");
		return;
	}
	if (st->len < 5) {
		reply_error(sess, id, CNL_GRPC_INVALID_ARGUMENT,
		            "no request message");
		return;
	}
	mlen = (size_t)st->body[1] << 24 | (size_t)st->body[2] << 16 |
	       (size_t)st->body[3] << 8 | st->body[4];
	if (st->body[0] != 0) {
		reply_error(sess, id, CNL_GRPC_UNIMPLEMENTED,
		            "compressed messages are not accepted (no "
		            "grpc-encoding is offered)");
		return;
	}
	if (mlen != st->len - 5) {
		reply_error(sess, id, CNL_GRPC_INVALID_ARGUMENT,
		            mlen > st->len - 5
		                ? "request message cut short"
		                : "more than one request message on a unary "
		                  "call");
		return;
	}
	code = m->fn(m->ud, st->body + 5, mlen, &resp, &resp_len, msg,
	             sizeof(msg));
	if (code != CNL_GRPC_OK) {
		free(resp);
		reply_error(sess, id, code, msg[0] ? msg : "failed");
		return;
	}
	st->out = cnl_xmalloc(resp_len + 5);
	st->out[0] = 0;
	st->out[1] = (uint8_t)(resp_len >> 24);
	st->out[2] = (uint8_t)(resp_len >> 16);
	st->out[3] = (uint8_t)(resp_len >> 8);
	st->out[4] = (uint8_t)resp_len;
	if (resp_len)
		memcpy(st->out + 5, resp, resp_len);
	free(resp);
	st->out_len = resp_len + 5;
	nghttp2_nv hdr[] = {NV(":status", "200"),
	                    NV("content-type", "application/grpc")};
	nghttp2_data_provider dp = {.source.ptr = st,
	                            .read_callback = read_reply};
	nghttp2_submit_response(sess, id, hdr, CNL_ARRAY_SIZE(hdr), &dp);
}

static int on_frame_recv(nghttp2_session *sess, const nghttp2_frame *f,
                         void *ud)
{
	struct conn *c = ud;
	struct stream *st;

	if ((f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS) ||
	    !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
		return 0;
	st = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
	if (st)
		handle(c->srv, sess, f->hd.stream_id, st);
	return 0;
}

static int on_stream_close(nghttp2_session *sess, int32_t id, uint32_t code,
                           void *ud)
{
	struct stream *st = nghttp2_session_get_stream_user_data(sess, id);

	(void)code;
	(void)ud;
	if (st) {
		nghttp2_session_set_stream_user_data(sess, id, NULL);
		free(st->body);
		free(st->out);
		free(st);
	}
	return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			/* The peer reads slowly: wait for room, up to 5 s. */
			struct pollfd pf = {.fd = fd, .events = POLLOUT};
			if (poll(&pf, 1, 5000) <= 0)
				return -ETIMEDOUT;
			continue;
		}
		if (w <= 0)
			return -EPIPE;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Everything nghttp2 has to send, sent; < 0 when the connection is gone. */
static int flush(struct conn *c)
{
	const uint8_t *p;
	ssize_t n;

	while ((n = nghttp2_session_mem_send(c->sess, &p)) > 0)
		if (write_all(c->fd, p, (size_t)n) < 0)
			return -EPIPE;
	return n < 0 ? -EPROTO : 0;
}

/* A new connection on @fd (non-blocking): its session, our SETTINGS
 * sent.  0, or < 0 with @fd closed. */
static int conn_add(struct cnl_grpc_server *s, int fd)
{
	nghttp2_session_callbacks *cb;
	nghttp2_settings_entry iv[] = {
	    {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 32}};
	struct conn *c;
	int i;

	for (i = 0; i < MAX_CONNS && s->conns[i]; i++)
		;
	if (i == MAX_CONNS) {
		cnl_log(CNL_LOG_WARN, "gRPC connection refused: too many open",
		        "open=%d", MAX_CONNS);
		close(fd);
		return -EMFILE;
	}
	c = cnl_xcalloc(1, sizeof(*c));
	c->fd = fd;
	c->srv = s;
	if (nghttp2_session_callbacks_new(&cb) != 0) {
		close(fd);
		free(c);
		return -ENOMEM;
	}
	nghttp2_session_callbacks_set_on_begin_headers_callback(
	    cb, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
	    cb, on_data_chunk);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb,
	                                                       on_stream_close);
	if (nghttp2_session_server_new(&c->sess, cb, c) != 0) {
		nghttp2_session_callbacks_del(cb);
		close(fd);
		free(c);
		return -ENOMEM;
	}
	nghttp2_session_callbacks_del(cb);
	nghttp2_submit_settings(c->sess, NGHTTP2_FLAG_NONE, iv,
	                        CNL_ARRAY_SIZE(iv));
	s->conns[i] = c;
	if (flush(c) < 0) {
		conn_free(s, i);
		return -EPIPE;
	}
	return 0;
}

static void accept_one(struct cnl_grpc_server *s, int lfd)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd >= 0)
		conn_add(s, fd);
}

/* Read what is there; 0 to keep the connection, < 0 to drop it. */
static int serve_conn(struct conn *c)
{
	uint8_t buf[16384];

	for (;;) {
		ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0)
			return -EPIPE;
		if (nghttp2_session_mem_recv(c->sess, buf, (size_t)n) < 0)
			return -EPROTO;
		if (flush(c) < 0)
			return -EPIPE;
	}
	if (flush(c) < 0)
		return -EPIPE;
	return nghttp2_session_want_read(c->sess) ||
	               nghttp2_session_want_write(c->sess)
	           ? 0
	           : -EPIPE;
}

int cnl_grpc_server_feed(struct cnl_grpc_server *s, const uint8_t *in,
                         size_t len)
{
	uint8_t sink[65536];
	size_t off = 0;
	bool closed = false;
	int sp[2], i;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0,
	               sp) < 0)
		return -errno;
	for (i = 0; i < MAX_CONNS && s->conns[i]; i++)
		;
	if (conn_add(s, sp[1]) < 0) {
		close(sp[0]);
		return -EMFILE;
	}
	/* The client's bytes a piece at a time, what the server says read
	 * and dropped in between, until the server sees the end. */
	while (s->conns[i]) {
		if (off < len) {
			size_t n = len - off > 4096 ? 4096 : len - off;
			ssize_t w = send(sp[0], in + off, n, MSG_NOSIGNAL);
			if (w > 0)
				off += (size_t)w;
		} else if (!closed) {
			shutdown(sp[0], SHUT_WR);
			closed = true;
		}
		while (recv(sp[0], sink, sizeof(sink), 0) > 0)
			;
		if (serve_conn(s->conns[i]) < 0)
			conn_free(s, i);
	}
	close(sp[0]);
	return 0;
}

int cnl_grpc_server_run(struct cnl_grpc_server *s, int stop_fd)
{
	struct pollfd pf[1 + MAX_LISTEN + MAX_CONNS];
	int who[CNL_ARRAY_SIZE(pf)];

	for (;;) {
		int n = 0;

		pf[n] = (struct pollfd){.fd = stop_fd, .events = POLLIN};
		who[n++] = -1;
		for (int i = 0; i < s->nl; i++) {
			pf[n] =
			    (struct pollfd){.fd = s->lfd[i], .events = POLLIN};
			who[n++] = -2 - i;
		}
		for (int i = 0; i < MAX_CONNS; i++)
			if (s->conns[i]) {
				pf[n] = (struct pollfd){.fd = s->conns[i]->fd,
				                        .events = POLLIN};
				who[n++] = i;
			}
		if (poll(pf, (nfds_t)n, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (pf[0].revents)
			return 0;
		for (int k = 1; k < n; k++) {
			if (!pf[k].revents)
				continue;
			if (who[k] <= -2)
				accept_one(s, s->lfd[-2 - who[k]]);
			else if (serve_conn(s->conns[who[k]]) < 0)
				conn_free(s, who[k]);
		}
	}
}
