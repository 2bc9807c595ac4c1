/*
 * test_client_wire.c - the HTTP client (net/client.h) against a raw socket
 * server on loopback that says exactly the bytes each test wants: chunked
 * replies (kept and streamed to on_data, which may end them), keep-alive
 * reuse and a kept connection the server closed, a server that closes
 * mid-reply, replies over the limit (announced or not), a slow-loris
 * server given up after the idle timeout while a slow one that moves is
 * waited for, malformed status lines and headers refused, a reply
 * delimited by the close, Upgrade streams (early bytes, echo, refusal),
 * a download into a descriptor (its SHA-256, its own limit) and an upload
 * from one (to a server that never says "100 Continue"), and URLs that
 * would move the token to another host.
 *
 * The server answers by the request's path; each connection is served by
 * a thread of its own, and the number of connections accepted is counted
 * so keep-alive shows.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/util.h"
#include "net/client.h"

static int lfd = -1;
static unsigned port;
static atomic_int accepted;
static char base[64];

static void say(int fd, const char *s)
{
	size_t n = strlen(s);

	while (n > 0) {
		ssize_t w = send(fd, s, n, MSG_NOSIGNAL);

		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

/* Wait until the peer closes @fd (or 10 s pass). */
static void until_closed(int fd)
{
	char buf[256];
	struct pollfd p = {fd, POLLIN, 0};

	while (poll(&p, 1, 10000) > 0 && recv(fd, buf, sizeof(buf), 0) > 0)
		;
}

/* Read one request head (and a Content-Length body) from @fd into @path;
 * false when the peer closed. */
static bool read_request(int fd, char *path, size_t n)
{
	char head[8192];
	size_t hn = 0;
	char *end = NULL, *cl;
	long body = 0;

	while (!end) {
		ssize_t r = recv(fd, head + hn, sizeof(head) - 1 - hn, 0);

		if (r <= 0)
			return false;
		hn += (size_t)r;
		head[hn] = '\0';
		end = strstr(head, "\r\n\r\n");
	}
	if (sscanf(head, "%*s %255s", path) != 1 || n < 256)
		return false;
	if ((cl = strcasestr(head, "Content-Length:")))
		body = strtol(cl + 15, NULL, 10);
	body -= (long)(hn - (size_t)(end + 4 - head));
	while (body > 0) {
		char buf[4096];
		ssize_t r = recv(fd, buf, sizeof(buf), 0);

		if (r <= 0)
			return false;
		body -= r;
	}
	return true;
}

#define HELLO_SHA \
	"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"

static const char ok2[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/* Serve one connection: requests until the peer closes or a path ends
 * it. */
static void *conn_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char path[256];

	while (read_request(fd, path, sizeof(path))) {
		if (strcmp(path, "/ka") == 0) {
			say(fd, ok2);
		} else if (strcmp(path, "/dl") == 0) {
			say(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
			        "X-Content-SHA256: " HELLO_SHA "\r\n\r\nhello");
		} else if (strcmp(path, "/chunked") == 0) {
			say(fd,
			    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
			    "\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n"
			    "0\r\nX-Trailer: t\r\n\r\n");
		} else if (strcmp(path, "/chunked404") == 0) {
			say(fd, "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: "
			        "chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
		} else if (strcmp(path, "/stale") == 0) {
			/* Kept alive by the reply, then closed anyway. */
			say(fd, ok2);
			break;
		} else if (strcmp(path, "/cut") == 0) {
			say(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
			        "only ten b");
			break;
		} else if (strcmp(path, "/cutchunk") == 0) {
			say(fd,
			    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
			    "\r\n100\r\nnot a hundred");
			break;
		} else if (strcmp(path, "/nothing") == 0) {
			break;
		} else if (strcmp(path, "/big") == 0) {
			say(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n"
			        "\r\n");
			until_closed(fd);
			break;
		} else if (strcmp(path, "/bigchunks") == 0) {
			char chunk[4010];

			say(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: "
			        "chunked\r\n\r\n");
			memcpy(chunk, "FA0\r\n", 5);
			memset(chunk + 5, 'x', 4000);
			memcpy(chunk + 4005, "\r\n", 3);
			for (int i = 0; i < 3; i++)
				say(fd, chunk);
			say(fd, "0\r\n\r\n");
		} else if (strcmp(path, "/loris") == 0) {
			say(fd, "HTTP/1.1 200 OK\r\n");
			until_closed(fd);
			break;
		} else if (strcmp(path, "/silent") == 0) {
			until_closed(fd);
			break;
		} else if (strcmp(path, "/drip") == 0) {
			say(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n");
			for (const char *p = "slow!"; *p; p++) {
				char b[2] = {*p, 0};

				usleep(150 * 1000);
				say(fd, b);
			}
		} else if (strcmp(path, "/untilclose") == 0) {
			say(fd, "HTTP/1.1 200 OK\r\n\r\nall of it");
			break;
		} else if (strcmp(path, "/http10") == 0) {
			say(fd,
			    "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
			break;
		} else if (strncmp(path, "/bad/", 5) == 0) {
			static const char *bad[] = {
			    "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
			    "HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n",
			    "ICY 200 OK\r\nContent-Length: 0\r\n\r\n",
			    "HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n",
			    "HTTP/1.1 200 OK\r\n: empty name\r\n\r\n",
			    "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
			    "HTTP/1.1 200 OK\r\nContent-Length: 5x\r\n\r\n",
			    "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n"
			    "Content-Length: 2\r\n\r\nab",
			    "HTTP/1.1 200 OK\r\nTransfer-Encoding: "
			    "gzip\r\n\r\n",
			    "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999"
			    "999999999\r\n\r\n",
			    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
			    "\r\nzz\r\n",
			    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
			    "\r\nFFFFFFFFFFFFFFFFFF\r\n",
			    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
			    "\r\n2\r\nabXX0\r\n\r\n",
			    "HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n",
			};
			long i = strtol(path + 5, NULL, 10);

			if (i >= 0 && i < (long)CNL_ARRAY_SIZE(bad))
				say(fd, bad[i]);
			break;
		} else if (strcmp(path, "/up") == 0) {
			char buf[256];
			ssize_t r;

			say(fd, "HTTP/1.1 101 Switching Protocols\r\n"
			        "Upgrade: test\r\nConnection: Upgrade\r\n\r\n"
			        "EARLY");
			while ((r = recv(fd, buf, sizeof(buf), 0)) > 0)
				send(fd, buf, (size_t)r, MSG_NOSIGNAL);
			break;
		} else if (strcmp(path, "/noup") == 0) {
			say(fd,
			    "HTTP/1.1 403 Forbidden\r\nContent-Length: 42\r\n"
			    "Content-Type: application/json\r\n\r\n"
			    "{\"error\":{\"code\":\"x\",\"message\":\"not "
			    "you\"}}");
			break;
		} else {
			say(fd,
			    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
			    "\r\n");
		}
	}
	close(fd);
	return NULL;
}

static void *accept_main(void *arg)
{
	for (;;) {
		int fd = accept(lfd, NULL, NULL);
		pthread_t t;

		if (fd < 0)
			return NULL;
		atomic_fetch_add(&accepted, 1);
		pthread_create(&t, NULL, conn_main, (void *)(intptr_t)fd);
		pthread_detach(t);
	}
}

static int setup(void **state)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	pthread_t t;

	lfd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(lfd, 64) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &len) < 0)
		return -1;
	port = ntohs(sa.sin_port);
	snprintf(base, sizeof(base), "http://127.0.0.1:%u", port);
	pthread_create(&t, NULL, accept_main, NULL);
	pthread_detach(t);
	return 0;
}

static struct cnl_client *client(size_t reply_max, long idle_ms)
{
	struct cnl_client *cl = NULL;

	assert_int_equal(cnl_client_new(
	                     &(struct cnl_client_config){
	                         .base = base,
	                         .token = "tok",
	                         .reply_max = reply_max,
	                         .timeout_ms = 20000,
	                         .idle_timeout_ms = idle_ms,
	                     },
	                     &cl),
	                 0);
	return cl;
}

static int get(struct cnl_client *cl, const char *path,
               struct cnl_client_reply *r)
{
	return cnl_client_send(cl, "GET", path, NULL, NULL, r);
}

struct got {
	char buf[256];
	size_t n;
	int calls;
	int stop_after;
};

static int on_data(void *ud, const char *buf, size_t len)
{
	struct got *g = ud;

	assert_true(g->n + len < sizeof(g->buf));
	memcpy(g->buf + g->n, buf, len);
	g->n += len;
	g->buf[g->n] = '\0';
	return ++g->calls == g->stop_after;
}

/* GET @path streamed to on_data into @g, which starts empty and stops
 * it after @stop_after calls (0: never); cnl_client_request()'s result. */
static int get_streamed(struct cnl_client *cl, const char *path, int stop_after,
                        struct got *g, struct cnl_client_reply *r)
{
	memset(g, 0, sizeof(*g));
	g->stop_after = stop_after;
	return cnl_client_request(cl,
	                          &(struct cnl_client_request){
	                              .method = "GET",
	                              .path = path,
	                              .on_data = on_data,
	                              .on_data_ud = g,
	                          },
	                          r);
}

static void test_chunked_and_streamed(void **state)
{
	struct cnl_client *cl = client(0, 5000);
	struct cnl_client_reply r;
	struct got g = {0};

	assert_int_equal(get(cl, "/chunked", &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "hello world");
	cnl_client_reply_done(&r);

	/* Streamed: on_data sees the bytes as they come, nothing kept. */
	assert_int_equal(get_streamed(cl, "/chunked", 0, &g, &r), 0);
	assert_string_equal(g.buf, "hello world");
	assert_true(g.calls >= 2);
	assert_int_equal(r.len, 0);
	cnl_client_reply_done(&r);

	/* on_data ends it: -ECANCELED after the first piece. */
	assert_int_equal(get_streamed(cl, "/chunked", 1, &g, &r), -ECANCELED);
	assert_int_equal(g.calls, 1);
	assert_int_equal(r.status, 200);
	cnl_client_reply_done(&r);

	/* Not a 2xx: in memory, on_data not called. */
	assert_int_equal(get_streamed(cl, "/chunked404", 0, &g, &r), 0);
	assert_int_equal(r.status, 404);
	assert_string_equal(r.body, "{}");
	assert_int_equal(g.calls, 0);
	cnl_client_reply_done(&r);

	/* Length-delimited streamed too. */
	assert_int_equal(get_streamed(cl, "/ka", 0, &g, &r), 0);
	assert_string_equal(g.buf, "ok");
	cnl_client_reply_done(&r);
	cnl_client_free(cl);
}

static void test_keep_alive(void **state)
{
	struct cnl_client *cl = client(0, 5000);
	struct cnl_client_reply r;
	int before = atomic_load(&accepted);

	for (int i = 0; i < 5; i++) {
		assert_int_equal(get(cl, i % 2 ? "/chunked" : "/ka", &r), 0);
		assert_int_equal(r.status, 200);
		cnl_client_reply_done(&r);
	}
	/* Five requests, one connection. */
	assert_int_equal(atomic_load(&accepted) - before, 1);

	/* A kept connection the server closed: sent again on a new one. */
	assert_int_equal(get(cl, "/stale", &r), 0);
	cnl_client_reply_done(&r);
	usleep(100 * 1000);
	before = atomic_load(&accepted);
	assert_int_equal(get(cl, "/ka", &r), 0);
	assert_string_equal(r.body, "ok");
	cnl_client_reply_done(&r);
	assert_int_equal(atomic_load(&accepted) - before, 1);

	/* HTTP/1.0 and a reply delimited by the close: not kept. */
	assert_int_equal(get(cl, "/http10", &r), 0);
	assert_string_equal(r.body, "ok");
	cnl_client_reply_done(&r);
	assert_int_equal(get(cl, "/untilclose", &r), 0);
	assert_string_equal(r.body, "all of it");
	cnl_client_reply_done(&r);
	before = atomic_load(&accepted);
	assert_int_equal(get(cl, "/ka", &r), 0);
	cnl_client_reply_done(&r);
	assert_int_equal(atomic_load(&accepted) - before, 1);
	cnl_client_free(cl);
}

static void test_cut_and_too_large(void **state)
{
	struct cnl_client *cl = client(5000, 5000);
	struct cnl_client_reply r;

	assert_int_equal(get(cl, "/cut", &r), -EIO);
	assert_int_equal(r.status, 0);
	assert_null(r.body);
	assert_string_equal(r.error, "Transferred a partial file");
	cnl_client_reply_done(&r);
	assert_int_equal(get(cl, "/cutchunk", &r), -EIO);
	assert_string_equal(r.error, "Transferred a partial file");
	cnl_client_reply_done(&r);
	assert_int_equal(get(cl, "/nothing", &r), -EIO);
	assert_string_equal(r.error,
	                    "Server returned nothing (no headers, no data)");
	cnl_client_reply_done(&r);

	/* Announced over the limit: refused before reading it. */
	assert_int_equal(get(cl, "/big", &r), -EIO);
	assert_true(r.too_large);
	assert_string_equal(r.error, "response too large");
	cnl_client_reply_done(&r);
	/* Chunked, 12,000 bytes against 5,000: refused as it grows. */
	assert_int_equal(get(cl, "/bigchunks", &r), -EIO);
	assert_true(r.too_large);
	cnl_client_reply_done(&r);
	cnl_client_free(cl);
	cl = client(12000, 5000);
	assert_int_equal(get(cl, "/bigchunks", &r), 0);
	assert_int_equal(r.len, 12000);
	cnl_client_reply_done(&r);
	/* Still usable after all that. */
	assert_int_equal(get(cl, "/ka", &r), 0);
	assert_string_equal(r.body, "ok");
	cnl_client_reply_done(&r);
	cnl_client_free(cl);
}

static void test_idle_timeout(void **state)
{
	struct cnl_client *cl = client(0, 400);
	struct cnl_client_reply r;

	/* Half a status line, then nothing: given up on, as idle. */
	assert_int_equal(get(cl, "/loris", &r), -EIO);
	assert_int_equal(r.timed_out, CNL_CLIENT_TIMEOUT_IDLE);
	assert_string_equal(r.error, "Timeout was reached");
	cnl_client_reply_done(&r);
	assert_int_equal(get(cl, "/silent", &r), -EIO);
	assert_int_equal(r.timed_out, CNL_CLIENT_TIMEOUT_IDLE);
	cnl_client_reply_done(&r);
	/* A byte every 150 ms keeps a 400 ms idle timeout at bay. */
	assert_int_equal(get(cl, "/drip", &r), 0);
	assert_string_equal(r.body, "slow!");
	cnl_client_reply_done(&r);
	cnl_client_free(cl);

	/* The whole-request limit is its own. */
	cl = client(0, 0);
	assert_int_equal(cnl_client_request(cl,
	                                    &(struct cnl_client_request){
	                                        .method = "GET",
	                                        .path = "/silent",
	                                        .timeout_ms = 300,
	                                    },
	                                    &r),
	                 -EIO);
	assert_int_equal(r.timed_out, CNL_CLIENT_TIMEOUT_TOTAL);
	cnl_client_reply_done(&r);
	cnl_client_free(cl);
}

static void test_malformed(void **state)
{
	struct cnl_client *cl = client(0, 5000);
	struct cnl_client_reply r;
	char path[32];

	for (int i = 0; i < 14; i++) {
		snprintf(path, sizeof(path), "/bad/%d", i);
		assert_int_equal(get(cl, path, &r), -EIO);
		assert_int_equal(r.status, 0);
		assert_null(r.body);
		if (strcmp(r.error, "Weird server reply") != 0)
			fail_msg("%s: %s", path, r.error);
		cnl_client_reply_done(&r);
	}
	cnl_client_free(cl);
}

/* Read @len bytes from the non-blocking stream @s into @buf, polling
 * (a hung peer fails the poll's 5 s guard). */
static void read_exactly(struct cnl_client_stream *s, char *buf, size_t len)
{
	for (size_t n = 0; n < len;) {
		ssize_t r = cnl_client_stream_read(s, buf + n, len - n);

		if (r == -EAGAIN) {
			struct pollfd p = {cnl_client_stream_fd(s), POLLIN, 0};

			assert_int_equal(poll(&p, 1, 5000), 1);
			continue;
		}
		assert_true(r > 0);
		n += (size_t)r;
	}
}

static void test_upgrade(void **state)
{
	struct cnl_client *cl = client(0, 5000);
	struct cnl_client_stream *s = NULL;
	char buf[64], err[256];

	assert_int_equal(
	    cnl_client_upgrade(cl, "/up", "test", &s, err, sizeof(err)), 0);
	/* What came with the 101 is the stream's first bytes. */
	read_exactly(s, buf, 5);
	assert_memory_equal(buf, "EARLY", 5);
	assert_int_equal(cnl_client_stream_write(s, "ping", 4), 0);
	read_exactly(s, buf, 4);
	assert_memory_equal(buf, "ping", 4);
	cnl_client_stream_free(s);

	/* No 101: the status and the error's message. */
	s = NULL;
	assert_int_equal(
	    cnl_client_upgrade(cl, "/noup", "test", &s, err, sizeof(err)),
	    -EIO);
	assert_null(s);
	assert_string_equal(err, "POST /noup: 403 not you");
	cnl_client_free(cl);
}

static void test_files(void **state)
{
	struct cnl_client *cl = client(0, 5000);
	struct cnl_client_reply r;
	char tmpl[] = "/tmp/cnl-wire-XXXXXX", got[16] = "";
	int fd = mkstemp(tmpl), before;
	char *big = cnl_xmalloc(300000);

	assert_true(fd >= 0);
	unlink(tmpl);
	/* Down into a descriptor, hashed on the way. */
	assert_int_equal(cnl_client_request(cl,
	                                    &(struct cnl_client_request){
	                                        .method = "GET",
	                                        .path = "/dl",
	                                        .download = true,
	                                        .download_fd = fd,
	                                    },
	                                    &r),
	                 0);
	assert_true(r.downloaded);
	assert_int_equal(r.download_len, 5);
	assert_string_equal(r.download_sha256, HELLO_SHA);
	assert_string_equal(r.server_sha256, HELLO_SHA);
	assert_int_equal(pread(fd, got, sizeof(got), 0), 5);
	assert_string_equal(got, "hello");
	cnl_client_reply_done(&r);
	/* Over its own limit: refused. */
	assert_int_equal(cnl_client_request(cl,
	                                    &(struct cnl_client_request){
	                                        .method = "GET",
	                                        .path = "/dl",
	                                        .download = true,
	                                        .download_fd = fd,
	                                        .download_max = 3,
	                                    },
	                                    &r),
	                 -EIO);
	assert_true(r.too_large);
	cnl_client_reply_done(&r);

	/* Up from a descriptor (300,000 bytes; a server that never says
	 * "100 Continue" gets it after a second), then the same connection
	 * serves the next request: every byte went. */
	memset(big, 'b', 300000);
	assert_int_equal(pwrite(fd, big, 300000, 0), 300000);
	assert_int_equal(get(cl, "/ka", &r), 0);
	cnl_client_reply_done(&r);
	before = atomic_load(&accepted);
	assert_int_equal(cnl_client_request(cl,
	                                    &(struct cnl_client_request){
	                                        .method = "PUT",
	                                        .path = "/ka",
	                                        .upload = true,
	                                        .upload_fd = fd,
	                                        .upload_size = 300000,
	                                        .sha256 = "x",
	                                    },
	                                    &r),
	                 0);
	assert_int_equal(r.status, 200);
	cnl_client_reply_done(&r);
	assert_int_equal(get(cl, "/ka", &r), 0);
	assert_string_equal(r.body, "ok");
	cnl_client_reply_done(&r);
	assert_int_equal(atomic_load(&accepted), before);
	free(big);
	close(fd);
	cnl_client_free(cl);
}

static void test_token_stays_home(void **state)
{
	struct cnl_client *cl = client(0, 5000);
	struct cnl_client_reply r;
	static const char *paths[] = {
	    "@127.0.0.2:1/x", /* userinfo: another host */
	    "x",              /* would extend the port */
	    ".evil.example/x",
	    "/a b", /* a space in the request line */
	    "/a\r\nX-Injected: 1",
	};

	for (size_t i = 0; i < CNL_ARRAY_SIZE(paths); i++) {
		assert_int_equal(get(cl, paths[i], &r), -EIO);
		assert_null(r.body);
		assert_non_null(strstr(r.error, "URL"));
		cnl_client_reply_done(&r);
	}
	cnl_client_free(cl);

	/* A whole URL of another scheme is refused by name. */
	assert_int_equal(
	    cnl_client_new(&(struct cnl_client_config){.base = ""}, &cl), 0);
	assert_int_equal(get(cl, "ftp://127.0.0.1/x", &r), -EIO);
	assert_string_equal(r.error, "Unsupported protocol");
	cnl_client_reply_done(&r);
	cnl_client_free(cl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_chunked_and_streamed),
	    cmocka_unit_test(test_keep_alive),
	    cmocka_unit_test(test_cut_and_too_large),
	    cmocka_unit_test(test_idle_timeout),
	    cmocka_unit_test(test_malformed),
	    cmocka_unit_test(test_upgrade),
	    cmocka_unit_test(test_files),
	    cmocka_unit_test(test_token_stays_home),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
