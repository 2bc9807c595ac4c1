/*
 * test_http_events.c - the server wrapper's event mode (net/http_server.h,
 * cnl_http_config.quick) on loopback with raw sockets, two event threads:
 *
 *   - requests that block in their handler (more of them than there are
 *     event threads) run on workers: a quick request is answered while
 *     they all still block, and each gets its answer once let go;
 *   - a quick route's answer waits for its event without a thread
 *     (resp.wait): nothing is sent before cnl_http_wake(), the answer
 *     follows it, waited() may change it (a failed event, a 503), an
 *     event already there answers at once, and waited() runs once per
 *     wait even when the client left meanwhile;
 *   - a streamed answer whose reader blocks does not hold the event
 *     threads, and arrives whole, chunked;
 *   - one kept-alive connection takes quick, worker and waiting requests
 *     in turn, each answered in order;
 *   - a quick handler that finds it would block (retry_blocking) is
 *     served again on a worker, and the connection goes on;
 *   - freeing the server waits for a held answer's wake.
 */
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
#include <sys/time.h>
#include <unistd.h>
#include <cmocka.h>

#include "net/http_server.h"

/* Handlers that block wait here until the test lets them go. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool let_go;
static int blocked; /* handlers (or readers) waiting for let_go */

/* The waits handed out by /later, and how many waited() ran. */
static void *waiters[16];
static int waiter_tag[16]; /* the ?tag= of each */
static int nwaiters;
static atomic_int waited_calls;
static int wait_now; /* /later's wait(): 1 (done already), or 0 */

static void block_until_let_go(void)
{
	pthread_mutex_lock(&mu);
	blocked++;
	pthread_cond_broadcast(&cv);
	while (!let_go)
		pthread_cond_wait(&cv, &mu);
	blocked--;
	pthread_mutex_unlock(&mu);
}

static void h_ok(void *call, struct cnl_http_request *req,
                 struct cnl_http_response *resp)
{
	cnl_http_reply(resp, 200, json_pack("{s:b}", "quick", req->may_wait));
}

static void h_block(void *call, struct cnl_http_request *req,
                    struct cnl_http_response *resp)
{
	block_until_let_go();
	cnl_http_reply(resp, 200, json_pack("{s:b}", "quick", req->may_wait));
}

static int later_wait(void *arg, void *waiter)
{
	pthread_mutex_lock(&mu);
	if (!wait_now) {
		waiter_tag[nwaiters] = *(int *)arg;
		waiters[nwaiters++] = waiter;
	}
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	return wait_now;
}

static void later_waited(void *arg, int r, struct cnl_http_response *resp)
{
	int *tag = arg;

	if (r < 0)
		cnl_http_error(resp, 503, "unavailable", "event failed: %d", r);
	else
		cnl_http_reply(resp, 202, json_pack("{s:i}", "tag", *tag));
	free(tag);
	atomic_fetch_add(&waited_calls, 1);
}

static void h_later(void *call, struct cnl_http_request *req,
                    struct cnl_http_response *resp)
{
	int *tag = malloc(sizeof(*tag));
	const char *t = cnl_http_query(req, "tag");

	assert_true(req->may_wait);
	*tag = t ? (int)strtol(t, NULL, 10) : 7;
	/* What the handler answered before the wait is replaced after. */
	cnl_http_reply(resp, 200, json_pack("{s:s}", "not", "yet"));
	resp->wait = later_wait;
	resp->waited = later_waited;
	resp->wait_arg = tag;
}

/* A stream of three parts; the second comes once the test lets go. */
struct stream {
	int part;
};

static ssize_t s_read(void *arg, char *buf, size_t max)
{
	struct stream *s = arg;
	const char *parts[] = {"first-", "second-", "third"};

	if (s->part == 1)
		block_until_let_go();
	if (s->part >= 3)
		return 0;
	snprintf(buf, max, "%s", parts[s->part]);
	return (ssize_t)strlen(parts[s->part++]);
}

static void h_stream(void *call, struct cnl_http_request *req,
                     struct cnl_http_response *resp)
{
	resp->status = 200;
	resp->content_type = "text/plain";
	resp->stream_read = s_read;
	resp->stream_free = free;
	resp->stream_arg = calloc(1, sizeof(struct stream));
	resp->stream_size = -1;
}

/* Quick, but finds on an event thread that it would block: served again
 * on a worker. */
static atomic_int retry_calls;

static void h_retry(void *call, struct cnl_http_request *req,
                    struct cnl_http_response *resp)
{
	atomic_fetch_add(&retry_calls, 1);
	if (req->may_wait) {
		resp->retry_blocking = true;
		return;
	}
	cnl_http_reply(resp, 200, json_pack("{s:b}", "quick", req->may_wait));
}

static const struct cnl_http_route routes[] = {
    {"GET", "/retry", CNL_PERM_PUBLIC, NULL, h_retry},
    {"GET", "/ok", CNL_PERM_PUBLIC, NULL, h_ok},
    {"GET", "/block", CNL_PERM_PUBLIC, NULL, h_block},
    {"GET", "/later", CNL_PERM_PUBLIC, NULL, h_later},
    {"GET", "/stream", CNL_PERM_PUBLIC, NULL, h_stream},
};

static void serve(void *ud, const struct cnl_http_route *route,
                  struct cnl_http_request *req, struct cnl_http_response *resp)
{
	route->handler(NULL, req, resp);
}

static bool quick(void *ud, const struct cnl_http_route *route,
                  const struct cnl_http_request *req)
{
	return route->handler == h_ok || route->handler == h_later ||
	       route->handler == h_retry;
}

static struct cnl_http_server *start(void)
{
	struct cnl_http_config cfg = {
	    .host = "127.0.0.1",
	    .routes = routes,
	    .nroutes = sizeof(routes) / sizeof(routes[0]),
	    .serve = serve,
	    .quick = quick,
	    .threads = 2,
	};
	struct cnl_http_server *srv = NULL;
	char err[256];

	pthread_mutex_lock(&mu);
	let_go = false;
	nwaiters = 0;
	wait_now = 0;
	pthread_mutex_unlock(&mu);
	atomic_store(&waited_calls, 0);
	assert_int_equal(cnl_http_server_new(&cfg, &srv, err, sizeof(err)), 0);
	return srv;
}

static void release(void)
{
	pthread_mutex_lock(&mu);
	let_go = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

/* Wait until @n handlers block, or @n waits were handed out. */
static void until_blocked(int n)
{
	pthread_mutex_lock(&mu);
	while (blocked < n)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
}

static void until_waiters(int n)
{
	pthread_mutex_lock(&mu);
	while (nwaiters < n)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
}

/* A connection to @srv; a 30 s guard against a hang. */
static int dial(struct cnl_http_server *srv)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct timeval tv = {30, 0};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	sa.sin_port = htons(cnl_http_server_port(srv));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void send_get(int fd, const char *path, bool close_after)
{
	char req[256];
	int n =
	    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n",
	             path, close_after ? "Connection: close\r\n" : "");

	assert_int_equal(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
}

/* Everything until the end of the stream, NUL-ended. */
static void read_all(int fd, char *buf, size_t cap)
{
	size_t n = 0;

	for (;;) {
		ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);

		if (r <= 0)
			break;
		n += (size_t)r;
	}
	buf[n] = '\0';
}

/* One whole answer of a kept-alive connection (Content-Length framed),
 * NUL-ended in @buf. */
static void read_one(int fd, char *buf, size_t cap)
{
	size_t n = 0;

	for (;;) {
		const char *end = strstr(buf, "\r\n\r\n");
		const char *cl = strstr(buf, "Content-Length: ");
		ssize_t r;

		if (n && end && cl && cl < end &&
		    n >= (size_t)(end + 4 - buf) + strtoul(cl + 16, NULL, 10))
			return;
		r = recv(fd, buf + n, cap - 1 - n, 0);
		assert_true(r > 0);
		n += (size_t)r;
		buf[n] = '\0';
	}
}

/* Whether @fd has bytes to read within @ms. */
static bool readable(int fd, int ms)
{
	struct pollfd p = {fd, POLLIN, 0};

	return poll(&p, 1, ms) == 1;
}

static void test_blocking_handlers_run_on_workers(void **state)
{
	struct cnl_http_server *srv = start();
	int fds[6], fd;
	char buf[4096];

	/* Three times as many blockers as event threads. */
	for (int i = 0; i < 6; i++) {
		fds[i] = dial(srv);
		send_get(fds[i], "/block", true);
	}
	until_blocked(6);
	fd = dial(srv);
	send_get(fd, "/ok", true);
	read_all(fd, buf, sizeof(buf));
	close(fd);
	assert_non_null(strstr(buf, "HTTP/1.1 200 "));
	assert_non_null(strstr(buf, "{\"quick\":true}"));
	for (int i = 0; i < 6; i++)
		assert_false(readable(fds[i], 0));
	release();
	for (int i = 0; i < 6; i++) {
		read_all(fds[i], buf, sizeof(buf));
		close(fds[i]);
		assert_non_null(strstr(buf, "HTTP/1.1 200 "));
		/* A worker's handler may block: it was told so. */
		assert_non_null(strstr(buf, "{\"quick\":false}"));
	}
	cnl_http_server_free(srv);
}

/* Wake @waiter from another thread. */
struct waking {
	void *waiter;
	int r;
};

static void *wake_thread(void *arg)
{
	struct waking *w = arg;

	cnl_http_wake(w->waiter, w->r);
	return NULL;
}

static void wake_from_thread(void *waiter, int r)
{
	struct waking w = {waiter, r};
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, wake_thread, &w), 0);
	pthread_join(t, NULL);
}

/* The wait handed out for /later?tag=@tag. */
static void *waiter_of(int tag)
{
	void *w = NULL;

	pthread_mutex_lock(&mu);
	for (int i = 0; i < nwaiters; i++)
		if (waiter_tag[i] == tag)
			w = waiters[i];
	pthread_mutex_unlock(&mu);
	assert_non_null(w);
	return w;
}

static void test_wait_without_a_thread(void **state)
{
	struct cnl_http_server *srv = start();
	int a = dial(srv), b = dial(srv), c = dial(srv), fd;
	char buf[4096];

	send_get(a, "/later?tag=1", true);
	send_get(b, "/later?tag=2", true);
	send_get(c, "/later?tag=3", true);
	until_waiters(3);
	/* Held: no answer, and the event threads still serve. */
	assert_false(readable(a, 100));
	fd = dial(srv);
	send_get(fd, "/ok", true);
	read_all(fd, buf, sizeof(buf));
	close(fd);
	assert_non_null(strstr(buf, "HTTP/1.1 200 "));
	assert_false(readable(a, 0));
	assert_false(readable(b, 0));

	/* The answers follow their wakes, as waited() made them; the third
	 * client leaves before its wake. */
	wake_from_thread(waiter_of(1), 0);
	wake_from_thread(waiter_of(2), -EIO);
	close(c);
	wake_from_thread(waiter_of(3), 0);
	read_all(a, buf, sizeof(buf));
	close(a);
	assert_non_null(strstr(buf, "HTTP/1.1 202 "));
	assert_non_null(strstr(buf, "{\"tag\":1}"));
	read_all(b, buf, sizeof(buf));
	close(b);
	assert_non_null(strstr(buf, "HTTP/1.1 503 "));
	assert_non_null(strstr(buf, "event failed: -5"));
	assert_null(strstr(buf, "not"));
	/* An event already there: answered at once, waited() once. */
	pthread_mutex_lock(&mu);
	wait_now = 1;
	pthread_mutex_unlock(&mu);
	fd = dial(srv);
	send_get(fd, "/later", true);
	read_all(fd, buf, sizeof(buf));
	close(fd);
	assert_non_null(strstr(buf, "HTTP/1.1 202 "));
	cnl_http_server_free(srv);
	/* One waited() per wait, the client gone or not. */
	assert_int_equal(atomic_load(&waited_calls), 4);
}

static void test_stream_reader_blocks_on_its_own_thread(void **state)
{
	struct cnl_http_server *srv = start();
	int s = dial(srv), fd;
	char buf[4096];

	send_get(s, "/stream", true);
	until_blocked(1); /* the reader, after the first part */
	fd = dial(srv);
	send_get(fd, "/ok", true);
	read_all(fd, buf, sizeof(buf));
	close(fd);
	assert_non_null(strstr(buf, "HTTP/1.1 200 "));
	release();
	read_all(s, buf, sizeof(buf));
	close(s);
	assert_non_null(strstr(buf, "HTTP/1.1 200 "));
	assert_non_null(strstr(buf, "Transfer-Encoding: chunked"));
	/* The first part went before the reader blocked, as its own chunk;
	 * the others after it (one chunk or two), then the last chunk. */
	{
		const char *one = strstr(buf, "6\r\nfirst-\r\n");
		const char *two = strstr(buf, "second-");
		const char *three = strstr(buf, "third\r\n0\r\n\r\n");

		assert_non_null(one);
		assert_non_null(two);
		assert_non_null(three);
		assert_true(one < two && two < three);
	}
	cnl_http_server_free(srv);
}

static void test_kept_alive_in_turn(void **state)
{
	struct cnl_http_server *srv = start();
	int fd = dial(srv);
	char buf[4096];

	release(); /* /block answers at once here */
	for (int round = 0; round < 3; round++) {
		send_get(fd, "/ok", false);
		read_one(fd, buf, sizeof(buf));
		assert_non_null(strstr(buf, "HTTP/1.1 200 "));
		assert_non_null(strstr(buf, "{\"quick\":true}"));
		send_get(fd, "/block", false);
		read_one(fd, buf, sizeof(buf));
		assert_non_null(strstr(buf, "{\"quick\":false}"));
		send_get(fd, "/later", false);
		until_waiters(round + 1);
		assert_false(readable(fd, 50));
		pthread_mutex_lock(&mu);
		void *w = waiters[round];
		pthread_mutex_unlock(&mu);
		wake_from_thread(w, 0);
		read_one(fd, buf, sizeof(buf));
		assert_non_null(strstr(buf, "HTTP/1.1 202 "));
	}
	close(fd);
	cnl_http_server_free(srv);
	assert_int_equal(atomic_load(&waited_calls), 3);
}

static void *free_thread(void *arg)
{
	cnl_http_server_free(arg);
	return NULL;
}

static void test_retry_on_a_worker(void **state)
{
	struct cnl_http_server *srv = start();
	int fd = dial(srv);
	char buf[4096];

	atomic_store(&retry_calls, 0);
	send_get(fd, "/retry", false);
	read_one(fd, buf, sizeof(buf));
	assert_non_null(strstr(buf, "HTTP/1.1 200 "));
	assert_non_null(strstr(buf, "{\"quick\":false}"));
	/* The connection goes on as usual after it. */
	send_get(fd, "/ok", true);
	read_all(fd, buf, sizeof(buf));
	close(fd);
	assert_non_null(strstr(buf, "{\"quick\":true}"));
	cnl_http_server_free(srv);
	assert_int_equal(atomic_load(&retry_calls), 2);
}

static void test_free_waits_for_held_answers(void **state)
{
	struct cnl_http_server *srv = start();
	int fd = dial(srv);
	pthread_t t;
	char buf[4096];
	void *w;

	send_get(fd, "/later", true);
	until_waiters(1);
	assert_int_equal(pthread_create(&t, NULL, free_thread, srv), 0);
	/* The free waits for the held answer: not done before the wake
	 * (a free that did not wait would have finished the wait itself,
	 * or freed what the wake touches, which ASan sees). */
	usleep(100 * 1000);
	assert_int_equal(atomic_load(&waited_calls), 0);
	pthread_mutex_lock(&mu);
	w = waiters[0];
	pthread_mutex_unlock(&mu);
	cnl_http_wake(w, 0);
	pthread_join(t, NULL);
	/* Stopping may cut the answer, as it cuts any in flight; the
	 * connection ends either way, and waited() ran once. */
	read_all(fd, buf, sizeof(buf));
	close(fd);
	assert_true(buf[0] == '\0' || strstr(buf, "HTTP/1.1 202 "));
	assert_int_equal(atomic_load(&waited_calls), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_blocking_handlers_run_on_workers),
	    cmocka_unit_test(test_wait_without_a_thread),
	    cmocka_unit_test(test_stream_reader_blocks_on_its_own_thread),
	    cmocka_unit_test(test_kept_alive_in_turn),
	    cmocka_unit_test(test_retry_on_a_worker),
	    cmocka_unit_test(test_free_waits_for_held_answers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
