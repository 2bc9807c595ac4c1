/*
 * test_kube_exec.c - the Kubernetes client's exec (net/kube.h,
 * cnl_kube_exec_*) against a raw socket server on loopback that speaks
 * each case's bytes of RFC 6455 and the API server's channel protocol:
 * the request as the API server reads it (GET, the command one query
 * argument per word, escaped; the bearer from its file; the offered
 * subprotocols); messages fragmented and interleaved with a ping (which
 * must be answered with a masked pong of the same bytes); the v1 Status
 * on channel 3; then the refusals: a 403 Status, a Sec-WebSocket-Accept
 * that is not the key's, no subprotocol, a masked frame from the server,
 * a message past the limit; a wait that times out, also while pings come
 * without end; a head that trickles in, given up at the client's timeout;
 * a server URL with a path, which the exec goes under; and a command's
 * stdin (stdin=true): bytes past one message's size in several masked
 * messages of channel 0, their end v5's close message for channel 0.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include <mbedtls/sha1.h>

#include "cnlab/errors.h"
#include "common/base64.h"
#include "common/util.h"
#include "net/kube.h"

enum mode {
	GOOD,      /* the exec as a kubelet streams it */
	FORBIDDEN, /* 403 before any upgrade */
	BAD_ACCEPT,
	NO_PROTO,
	MASKED,  /* a frame masked by the server */
	HUGE,    /* a message past CNL_KUBE_EXEC_MSG_MAX */
	SILENT,  /* upgraded, then nothing */
	PINGS,   /* upgraded, then a ping every 20 ms, nothing else */
	TRICKLE, /* the 101's head a byte every 20 ms */
	STDIN,   /* stdin read to its end, then echoed on stdout */
	V4,      /* v4.channel.k8s.io, then nothing */
	PENDING, /* a ping and a message in one write */
};

static int lfd = -1;
static unsigned port;
static char server[64], token_file[64];
static enum mode mode;
static char request[8192];
static unsigned char pong[256]; /* the pong's payload, unmasked */
static size_t pong_n;
static bool pong_masked;
static pthread_t thread;
/* STDIN: what came on channel 0, in how many messages, whether each was
 * masked, and whether its end came (channel 255 naming 0). */
static unsigned char *in_got;
static size_t in_n, in_msgs;
static bool in_unmasked, in_eof;

static void say(int fd, const void *s, size_t n)
{
	const char *p = s;

	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

static bool recv_all(int fd, unsigned char *b, size_t n)
{
	while (n) {
		ssize_t r = recv(fd, b, n, 0);

		if (r <= 0)
			return false;
		b += r;
		n -= (size_t)r;
	}
	return true;
}

/* One frame from the server: FIN as @fin, @op, @payload. */
static void frame(int fd, bool fin, int op, const void *payload, size_t n,
                  bool masked)
{
	unsigned char h[14];
	size_t hl = 2;

	h[0] = (unsigned char)((fin ? 0x80 : 0) | op);
	if (n < 126) {
		h[1] = (unsigned char)n;
	} else if (n < 65536) {
		h[1] = 126;
		h[2] = (unsigned char)(n >> 8);
		h[3] = (unsigned char)n;
		hl = 4;
	} else {
		h[1] = 127;
		for (int i = 0; i < 8; i++)
			h[2 + i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
		hl = 10;
	}
	if (masked) {
		h[1] |= 0x80;
		memset(h + hl, 0, 4);
		hl += 4;
	}
	say(fd, h, hl);
	say(fd, payload, n);
}

static void accept_of(const char *key, char *out, size_t len)
{
	char kg[128];
	unsigned char sha[20];

	snprintf(kg, sizeof(kg), "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
	mbedtls_sha1_ret((const unsigned char *)kg, strlen(kg), sha);
	cnl_b64_encode(sha, sizeof(sha), CNL_B64_PAD, out, len);
}

/* The client's pong to our ping: its frame read and unmasked. */
static void read_pong(int fd)
{
	unsigned char h[6];
	size_t n;

	if (!recv_all(fd, h, 2))
		return;
	n = h[1] & 0x7f;
	pong_masked = (h[1] & 0x80) && (h[0] & 0x0f) == 10;
	if (!(h[1] & 0x80) || n > sizeof(pong) || !recv_all(fd, h + 2, 4) ||
	    !recv_all(fd, pong, n))
		return;
	for (size_t i = 0; i < n; i++)
		pong[i] ^= h[2 + i % 4];
	pong_n = n;
}

static void *serve(void *arg)
{
	int fd = accept(lfd, NULL, NULL);
	size_t hn = 0;
	char key[64] = "", acc[64], head[512];
	const char *k;

	(void)arg;
	if (fd < 0)
		return NULL;
	while (!strstr(request, "\r\n\r\n") && hn < sizeof(request) - 1) {
		ssize_t r = recv(fd, request + hn, sizeof(request) - 1 - hn, 0);

		if (r <= 0)
			break;
		hn += (size_t)r;
		request[hn] = '\0';
	}
	if ((k = strcasestr(request, "Sec-WebSocket-Key: ")))
		sscanf(k + 19, "%63[^\r]", key);
	accept_of(key, acc, sizeof(acc));
	if (mode == FORBIDDEN) {
		static const char b[] =
		    "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":"
		    "\"Failure\",\"message\":\"pods \\\"p\\\" is forbidden: "
		    "User \\\"x\\\" cannot get resource \\\"pods/exec\\\"\","
		    "\"reason\":\"Forbidden\",\"code\":403}";

		snprintf(head, sizeof(head),
		         "HTTP/1.1 403 Forbidden\r\nContent-Type: "
		         "application/json\r\nContent-Length: %zu\r\n\r\n",
		         strlen(b));
		say(fd, head, strlen(head));
		say(fd, b, strlen(b));
		close(fd);
		return NULL;
	}
	if (mode == TRICKLE) {
		static const char h[] = "HTTP/1.1 101 Switching Protocols\r\n"
		                        "Upgrade: websocket\r\nConnection: "
		                        "Upgrade\r\nX-Slow: 1\r\n\r\n";

		for (size_t i = 0; i < sizeof(h) - 1; i++) {
			struct pollfd p = {fd, POLLIN, 0};

			say(fd, h + i, 1);
			/* 20 ms, or the client gone */
			if (poll(&p, 1, 20) > 0)
				break;
		}
		close(fd);
		return NULL;
	}
	snprintf(head, sizeof(head),
	         "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
	         "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n%s\r\n",
	         mode == BAD_ACCEPT ? "c3VyZWx5IG5vdCB0aGUga2V5Lg==" : acc,
	         mode == NO_PROTO ? ""
	         : mode == V4
	             ? "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n"
	             : "Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n");
	say(fd, head, strlen(head));
	if (mode == GOOD) {
		static const char st[] = "\x03{\"metadata\":{},\"status\":"
		                         "\"Failure\",\"reason\":"
		                         "\"NonZeroExitCode\"}";

		/* Each channel announced, then "hello world" in three
		 * fragments with a ping between them, stderr, the Status. */
		frame(fd, true, 2, "\x01", 1, false);
		frame(fd, true, 2, "\x02", 1, false);
		frame(fd, false, 2, "\x01hel", 4, false);
		frame(fd, true, 9, "are you there", 13, false);
		read_pong(fd);
		frame(fd, false, 0, "lo wo", 5, false);
		frame(fd, true, 0, "rld", 3, false);
		frame(fd, true, 2, "\x02oops\n", 6, false);
		frame(fd, true, 2, st, sizeof(st) - 1, false);
		frame(fd, true, 8, "\x03\xe8", 2, false);
	} else if (mode == STDIN) {
		static const char ok[] = "\x03{\"metadata\":{},\"status\":"
		                         "\"Success\"}";

		/* The client's messages until its stdin's end. */
		for (;;) {
			unsigned char h[14], *b;
			uint64_t n;
			size_t hl = 2;

			if (!recv_all(fd, h, 2))
				break;
			n = h[1] & 0x7f;
			if (n == 126)
				hl = 4;
			else if (n == 127)
				hl = 10;
			if (!recv_all(fd, h + 2, hl - 2 + 4))
				break;
			if (hl == 4)
				n = (uint64_t)h[2] << 8 | h[3];
			else if (hl == 10)
				for (int i = (int)(n = 0); i < 8; i++)
					n = n << 8 | h[2 + i];
			in_unmasked |= !(h[1] & 0x80);
			b = malloc(n ? n : 1);
			if (!recv_all(fd, b, n)) {
				free(b);
				break;
			}
			for (size_t i = 0; i < n; i++)
				b[i] ^= h[hl + i % 4];
			if ((h[0] & 0x0f) == 2 && n >= 1 && b[0] == 0) {
				in_got = realloc(in_got, in_n + n);
				memcpy(in_got + in_n, b + 1, n - 1);
				in_n += n - 1;
				in_msgs++;
			} else if ((h[0] & 0x0f) == 2 && n == 2 &&
			           b[0] == 255 && b[1] == 0) {
				in_eof = true;
			}
			free(b);
			if (in_eof || (h[0] & 0x0f) == 8)
				break;
		}
		{
			unsigned char *echo = malloc(in_n + 1);

			echo[0] = 1;
			memcpy(echo + 1, in_got, in_n);
			frame(fd, true, 2, echo, in_n + 1, false);
			free(echo);
		}
		frame(fd, true, 2, ok, sizeof(ok) - 1, false);
		frame(fd, true, 8, "\x03\xe8", 2, false);
	} else if (mode == MASKED) {
		frame(fd, true, 2, "\x01hi", 3, true);
	} else if (mode == HUGE) {
		size_t n = CNL_KUBE_EXEC_MSG_MAX + 1;
		char *b = calloc(1, n);

		b[0] = 1;
		frame(fd, true, 2, b, n, false);
		free(b);
	} else if (mode == PINGS) {
		struct pollfd p = {fd, POLLIN, 0};

		unsigned char h[2], rest[4 + 125];

		/* Until the client closes (its close frame, or the end);
		 * its pongs read and dropped. */
		for (;;) {
			int r = poll(&p, 1, 20);

			if (r == 0) {
				frame(fd, true, 9, "x", 1, false);
				continue;
			}
			if (r < 0 || !recv_all(fd, h, 2) ||
			    !recv_all(fd, rest, 4 + (h[1] & 0x7f)) ||
			    (h[0] & 0x0f) == 8)
				break;
		}
	} else if (mode == PENDING) {
		/* Both frames in one segment: a read takes them together. */
		static const unsigned char two[] = {0x89, 1,    'p', 0x82,
		                                    3,    0x01, 'h', 'i'};
		struct pollfd p = {fd, POLLIN, 0};

		say(fd, two, sizeof(two));
		read_pong(fd);
		poll(&p, 1, 3000); /* until the client goes */
	} else if (mode == SILENT || mode == V4) {
		struct pollfd p = {fd, POLLIN, 0};

		poll(&p, 1, 3000); /* until the client goes */
	}
	shutdown(fd, SHUT_WR);
	{
		char sink[256];
		struct pollfd p = {fd, POLLIN, 0};

		while (poll(&p, 1, 3000) > 0 &&
		       recv(fd, sink, sizeof(sink), 0) > 0)
			;
	}
	close(fd);
	return NULL;
}

static struct cnl_kube *start_at(enum mode m, const char *base, long timeout_ms)
{
	struct cnl_kube *k = NULL;
	char err[256];

	mode = m;
	request[0] = '\0';
	pong_n = 0;
	pong_masked = false;
	assert_int_equal(pthread_create(&thread, NULL, serve, NULL), 0);
	assert_int_equal(
	    cnl_kube_open(&(struct cnl_kube_config){.server = base,
	                                            .token_file = token_file,
	                                            .retries = -1,
	                                            .timeout_ms = timeout_ms},
	                  &k, err, sizeof(err)),
	    0);
	return k;
}

static struct cnl_kube *start(enum mode m)
{
	return start_at(m, server, 5000);
}

static void finish(struct cnl_kube *k)
{
	pthread_join(thread, NULL);
	cnl_kube_close(k);
}

static long open_exec(struct cnl_kube *k, struct cnl_kube_exec **x, char *err,
                      size_t errlen)
{
	const char *argv[] = {"sh", "-c", "echo a&b; exit 3"};

	return cnl_kube_exec_open(k, "team-a", "srv-1", "server", argv, 3, 0, x,
	                          err, errlen);
}

static void test_exec_streams(void **state)
{
	struct cnl_kube *k = start(GOOD);
	struct cnl_kube_exec *x = NULL;
	char err[256] = "";
	const char *d;
	size_t n;
	int ch;

	(void)state;
	assert_int_equal(open_exec(k, &x, err, sizeof(err)), 101);
	assert_int_equal(cnl_kube_exec_version(x), 5);
	/* The request, as the API server reads it. */
	assert_non_null(strstr(request,
	                       "GET /api/v1/namespaces/team-a/pods/srv-1/exec"
	                       "?container=server&stdout=true&stderr=true"
	                       "&command=sh&command=-c&command=echo%20a%26b%3B"
	                       "%20exit%203 HTTP/1.1\r\n"));
	assert_non_null(strstr(request, "Authorization: Bearer tok-1\r\n"));
	assert_non_null(strstr(request,
	                       "Sec-WebSocket-Protocol: "
	                       "v5.channel.k8s.io, v4.channel.k8s.io"));
	assert_non_null(strstr(request, "Upgrade: websocket\r\n"));
	assert_non_null(strstr(request, "Sec-WebSocket-Version: 13\r\n"));
	assert_null(strstr(request, "stdin"));
	/* The announcements: empty. */
	assert_int_equal(cnl_kube_exec_next(x, 5000, &ch, &d, &n), 1);
	assert_int_equal(ch, 1);
	assert_int_equal(n, 0);
	assert_int_equal(cnl_kube_exec_next(x, 5000, &ch, &d, &n), 1);
	assert_int_equal(ch, 2);
	assert_int_equal(n, 0);
	/* Fragments put together, the ping answered in between. */
	assert_int_equal(cnl_kube_exec_next(x, 5000, &ch, &d, &n), 1);
	assert_int_equal(ch, 1);
	assert_int_equal(n, 11);
	assert_memory_equal(d, "hello world", 11);
	assert_true(pong_masked);
	assert_int_equal(pong_n, 13);
	assert_memory_equal(pong, "are you there", 13);
	assert_int_equal(cnl_kube_exec_next(x, 5000, &ch, &d, &n), 1);
	assert_int_equal(ch, 2);
	assert_int_equal(n, 5);
	assert_memory_equal(d, "oops\n", 5);
	assert_int_equal(cnl_kube_exec_next(x, 5000, &ch, &d, &n), 1);
	assert_int_equal(ch, 3);
	assert_non_null(memmem(d, n, "NonZeroExitCode", 15));
	/* The close frame ends it. */
	assert_int_equal(cnl_kube_exec_next(x, 5000, &ch, &d, &n), 0);
	cnl_kube_exec_close(x);
	finish(k);
}

/* 150 KiB to the command's stdin (more than one message holds), then its
 * end: the server has them all, in masked messages of channel 0, and the
 * end as v5 says it. */
static void test_exec_stdin(void **state)
{
	struct cnl_kube *k = start(STDIN);
	struct cnl_kube_exec *x = NULL;
	const char *argv[] = {"cat"};
	size_t want = 150 * 1024, got = 0;
	unsigned char *data = malloc(want), *out = calloc(1, want);
	char err[256] = "";
	const char *d;
	size_t n;
	int ch, r;

	(void)state;
	for (size_t i = 0; i < want; i++)
		data[i] = (unsigned char)(i * 7 + i / 251);
	in_got = NULL;
	in_n = in_msgs = 0;
	in_unmasked = in_eof = false;
	assert_int_equal(cnl_kube_exec_open(k, "team-a", "srv-1", "server",
	                                    argv, 1, CNL_KUBE_EXEC_STDIN, &x,
	                                    err, sizeof(err)),
	                 101);
	assert_non_null(strstr(request, "?container=server&stdin=true"
	                                "&stdout=true&stderr=true"
	                                "&command=cat HTTP/1.1\r\n"));
	assert_int_equal(cnl_kube_exec_send(x, data, want / 2), 0);
	assert_int_equal(cnl_kube_exec_send(x, data + want / 2, want / 2), 0);
	assert_int_equal(cnl_kube_exec_send_eof(x), 0);
	while ((r = cnl_kube_exec_next(x, 5000, &ch, &d, &n)) == 1)
		if (ch == 1 && got + n <= want) {
			memcpy(out + got, d, n);
			got += n;
		}
	assert_int_equal(r, 0);
	assert_int_equal(got, want);
	assert_memory_equal(out, data, want);
	assert_true(in_eof);
	assert_false(in_unmasked);
	assert_true(in_msgs >= 3); /* 75 KiB twice, 64 KiB a message */
	cnl_kube_exec_close(x);
	finish(k);
	free(in_got);
	free(data);
	free(out);
}

/* A message read with a ping before it, in one read: the wait of 0 ends
 * at the ping, and cnl_kube_exec_pending() says the message is there
 * (a poll of the socket would not: it was read already). */
static void test_exec_pending_after_ping(void **state)
{
	struct cnl_kube *k = start(PENDING);
	struct cnl_kube_exec *x = NULL;
	struct pollfd p;
	char err[256] = "";
	const char *d;
	size_t n;
	int ch;

	(void)state;
	assert_int_equal(open_exec(k, &x, err, sizeof(err)), 101);
	/* The frames may have come with the 101's head (then read with
	 * it, and pending already). */
	p = (struct pollfd){cnl_kube_exec_fd(x), POLLIN, 0};
	if (!cnl_kube_exec_pending(x))
		assert_int_equal(poll(&p, 1, 5000), 1);
	assert_int_equal(cnl_kube_exec_next(x, 0, &ch, &d, &n), -EAGAIN);
	assert_true(cnl_kube_exec_pending(x));
	p.revents = 0;
	assert_int_equal(poll(&p, 1, 0), 0); /* the socket says nothing */
	assert_int_equal(cnl_kube_exec_next(x, 0, &ch, &d, &n), 1);
	assert_int_equal(ch, 1);
	assert_int_equal(n, 2);
	assert_memory_equal(d, "hi", 2);
	assert_false(cnl_kube_exec_pending(x));
	cnl_kube_exec_close(x);
	finish(k);
}

/* v4 has no way to end stdin but the stream: said, nothing sent. */
static void test_exec_stdin_eof_v4(void **state)
{
	struct cnl_kube *k = start(V4);
	struct cnl_kube_exec *x = NULL;
	const char *argv[] = {"cat"};
	char err[256] = "";

	(void)state;
	assert_int_equal(cnl_kube_exec_open(k, "team-a", "srv-1", "server",
	                                    argv, 1, CNL_KUBE_EXEC_STDIN, &x,
	                                    err, sizeof(err)),
	                 101);
	assert_int_equal(cnl_kube_exec_version(x), 4);
	assert_int_equal(cnl_kube_exec_send(x, "hi", 2), 0);
	assert_int_equal(cnl_kube_exec_send_eof(x), -ENOTSUP);
	cnl_kube_exec_close(x);
	finish(k);
}

static void test_exec_forbidden(void **state)
{
	struct cnl_kube *k = start(FORBIDDEN);
	struct cnl_kube_exec *x = NULL;
	char err[512] = "";

	(void)state;
	assert_int_equal(open_exec(k, &x, err, sizeof(err)), 403);
	assert_null(x);
	assert_non_null(strstr(err, "403"));
	assert_non_null(strstr(err, "cannot get resource \"pods/exec\""));
	finish(k);
}

static void test_exec_bad_accept(void **state)
{
	struct cnl_kube *k = start(BAD_ACCEPT);
	struct cnl_kube_exec *x = NULL;
	char err[512] = "";

	(void)state;
	assert_int_equal(open_exec(k, &x, err, sizeof(err)), -EPROTO);
	assert_null(x);
	assert_non_null(strstr(err, "accept"));
	finish(k);
}

static void test_exec_no_subprotocol(void **state)
{
	struct cnl_kube *k = start(NO_PROTO);
	struct cnl_kube_exec *x = NULL;
	char err[512] = "";

	(void)state;
	assert_int_equal(open_exec(k, &x, err, sizeof(err)), -EPROTO);
	assert_null(x);
	assert_non_null(strstr(err, "subprotocol"));
	finish(k);
}

static void test_exec_masked_refused(void **state)
{
	struct cnl_kube *k = start(MASKED);
	struct cnl_kube_exec *x = NULL;
	char err[256] = "";
	const char *d;
	size_t n;
	int ch;

	(void)state;
	assert_int_equal(open_exec(k, &x, err, sizeof(err)), 101);
	assert_int_equal(cnl_kube_exec_next(x, 5000, &ch, &d, &n), -EPROTO);
	cnl_kube_exec_close(x);
	finish(k);
}

static void test_exec_huge_refused(void **state)
{
	struct cnl_kube *k = start(HUGE);
	struct cnl_kube_exec *x = NULL;
	char err[256] = "";
	const char *d;
	size_t n;
	int ch;

	(void)state;
	assert_int_equal(open_exec(k, &x, err, sizeof(err)), 101);
	assert_int_equal(cnl_kube_exec_next(x, 5000, &ch, &d, &n), -EPROTO);
	cnl_kube_exec_close(x);
	finish(k);
}

/* Behind a proxy's path (https://host/k8s/clusters/c1/): the exec goes
 * under it, as every other request. */
static void test_exec_under_prefix(void **state)
{
	char at[128];
	struct cnl_kube *k;
	struct cnl_kube_exec *x = NULL;
	char err[256] = "";

	(void)state;
	snprintf(at, sizeof(at), "%s/k8s/clusters/c1/", server);
	k = start_at(SILENT, at, 5000);
	assert_int_equal(open_exec(k, &x, err, sizeof(err)), 101);
	assert_non_null(strstr(request, "GET /k8s/clusters/c1/api/v1/"
	                                "namespaces/team-a/pods/srv-1/exec?"));
	cnl_kube_exec_close(x);
	finish(k);
}

/* Pings without end hold no wait past its time. */
static void test_exec_pings_do_not_hold(void **state)
{
	struct cnl_kube *k = start(PINGS);
	struct cnl_kube_exec *x = NULL;
	char err[256] = "";
	const char *d;
	size_t n;
	int ch;

	(void)state;
	assert_int_equal(open_exec(k, &x, err, sizeof(err)), 101);
	assert_int_equal(cnl_kube_exec_next(x, 200, &ch, &d, &n), -EAGAIN);
	assert_int_equal(cnl_kube_exec_next(x, 200, &ch, &d, &n), -EAGAIN);
	cnl_kube_exec_close(x);
	finish(k);
}

/* A head that trickles in is given up at the client's timeout, however
 * often a byte comes. */
static void test_exec_trickled_head_given_up(void **state)
{
	struct cnl_kube *k = start_at(TRICKLE, server, 300);
	struct cnl_kube_exec *x = NULL;
	char err[256] = "";

	(void)state;
	assert_int_equal(open_exec(k, &x, err, sizeof(err)), -EIO);
	assert_null(x);
	assert_non_null(strstr(err, "no reply"));
	/* Not the command's words: errors are logged. */
	assert_null(strstr(err, "command="));
	finish(k);
}

/* A server URL with a query: refused at opening, naming it (paths are
 * put after it). */
static void test_server_url_with_query_refused(void **state)
{
	struct cnl_kube *k = NULL;
	char err[256] = "";

	(void)state;
	assert_int_equal(
	    cnl_kube_open(
	        &(struct cnl_kube_config){.server = "https://h:6443/p?x=1"}, &k,
	        err, sizeof(err)),
	    -CNL_ECONFIG);
	assert_null(k);
	assert_non_null(strstr(err, "https://h:6443/p?x=1"));
}

static void test_exec_wait_times_out(void **state)
{
	struct cnl_kube *k = start(SILENT);
	struct cnl_kube_exec *x = NULL;
	char err[256] = "";
	const char *d;
	size_t n;
	int ch;

	(void)state;
	assert_int_equal(open_exec(k, &x, err, sizeof(err)), 101);
	assert_int_equal(cnl_kube_exec_next(x, 50, &ch, &d, &n), -EAGAIN);
	cnl_kube_exec_close(x);
	finish(k);
}

static int setup(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	FILE *f;

	(void)state;
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(lfd, 8) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &al) < 0)
		return -1;
	port = ntohs(a.sin_port);
	snprintf(server, sizeof(server), "http://127.0.0.1:%u", port);
	snprintf(token_file, sizeof(token_file), "/tmp/cnl-kexec-%d",
	         (int)getpid());
	if (!(f = fopen(token_file, "w")))
		return -1;
	fputs("tok-1\n", f);
	fclose(f);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	close(lfd);
	unlink(token_file);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exec_streams),
	    cmocka_unit_test(test_exec_stdin),
	    cmocka_unit_test(test_exec_stdin_eof_v4),
	    cmocka_unit_test(test_exec_pending_after_ping),
	    cmocka_unit_test(test_exec_forbidden),
	    cmocka_unit_test(test_exec_bad_accept),
	    cmocka_unit_test(test_exec_no_subprotocol),
	    cmocka_unit_test(test_exec_masked_refused),
	    cmocka_unit_test(test_exec_huge_refused),
	    cmocka_unit_test(test_exec_wait_times_out),
	    cmocka_unit_test(test_exec_under_prefix),
	    cmocka_unit_test(test_exec_pings_do_not_hold),
	    cmocka_unit_test(test_exec_trickled_head_given_up),
	    cmocka_unit_test(test_server_url_with_query_refused),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
