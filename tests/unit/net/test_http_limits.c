/*
 * test_http_limits.c - the server wrapper's connection limits and framing
 * (net/http_server.h) on loopback, with raw sockets: the per-address cap
 * and the global limit answer 503 overloaded with Retry-After and the
 * error body (and free their places when connections close), a head that
 * stalls is closed after the header timeout, a body that stalls after the
 * body timeout, a long reply and an upgraded connection left idle are
 * not cut by either, and the framing rules
 * as pure functions.  A passed request that pass_open declines is routed
 * as any other, also between passed ones on one connection.  The client's idle
 * timeout against a listener that never answers says which timeout ran out.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <cmocka.h>

#include "net/client.h"
#include "net/http_server.h"

/* /slow answers after 1.5 s: longer than the timeouts of the server. */
static void h_ok(void *call, struct cnl_http_request *req,
                 struct cnl_http_response *resp)
{
	if (strcmp(req->path, "/slow") == 0)
		usleep(1500 * 1000);
	cnl_http_reply(resp, 200, json_pack("{s:s}", "status", "ok"));
}

/* The upgraded stream: echo what comes, once, then close. */
static void echo_upgraded(void *arg, int fd, const char *extra, size_t n,
                          struct cnl_http_upgrade *u)
{
	char buf[64];
	struct pollfd p = {fd, POLLIN, 0};
	ssize_t r = -1;

	/* The socket is non-blocking; 30 s guards against a hang. */
	if (poll(&p, 1, 30 * 1000) == 1)
		r = recv(fd, buf, sizeof(buf), 0);
	if (r > 0)
		(void)!send(fd, buf, (size_t)r, MSG_NOSIGNAL);
	cnl_http_upgrade_close(u);
}

static void h_upgrade(void *call, struct cnl_http_request *req,
                      struct cnl_http_response *resp)
{
	resp->status = 101;
	resp->headers = strdup("Upgrade: echo\r\n");
	resp->upgraded = echo_upgraded;
}

static const struct cnl_http_route routes[] = {
    {"GET", "/ok", CNL_PERM_PUBLIC, NULL, h_ok},
    {"POST", "/echo", CNL_PERM_PUBLIC, "echo", h_upgrade},
    {"GET", "/slow", CNL_PERM_PUBLIC, NULL, h_ok},
    {"POST", "/ok", CNL_PERM_PUBLIC, "ok", h_ok},
};

static void serve(void *ud, const struct cnl_http_route *route,
                  struct cnl_http_request *req, struct cnl_http_response *resp)
{
	route->handler(NULL, req, resp);
}

static struct cnl_http_server *start(unsigned conn_max, unsigned per_client,
                                     int64_t header_ms, int64_t body_ms)
{
	struct cnl_http_config cfg = {
	    .host = "127.0.0.1",
	    .routes = routes,
	    .nroutes = sizeof(routes) / sizeof(routes[0]),
	    .serve = serve,
	    .conn_max = conn_max,
	    .conn_per_client = per_client,
	    .header_timeout_ms = header_ms,
	    .body_timeout_ms = body_ms,
	    .retry_after_s = 7,
	};
	struct cnl_http_server *srv = NULL;
	char err[256];

	assert_int_equal(cnl_http_server_new(&cfg, &srv, err, sizeof(err)), 0);
	return srv;
}

/* A connection from @src (NULL: any) to @srv; a guard against a hang. */
static int dial(struct cnl_http_server *srv, const char *src)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct timeval tv = {30, 0};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (src) {
		inet_pton(AF_INET, src, &sa.sin_addr);
		assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)),
		                 0);
	}
	sa.sin_port = htons(cnl_http_server_port(srv));
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Everything until the end of the stream (or a reset), NUL-ended. */
static size_t read_all(int fd, char *buf, size_t cap)
{
	size_t n = 0;

	for (;;) {
		ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);

		if (r <= 0)
			break;
		n += (size_t)r;
	}
	buf[n] = '\0';
	return n;
}

static void send_str(int fd, const char *s)
{
	assert_int_equal(send(fd, s, strlen(s), MSG_NOSIGNAL),
	                 (ssize_t)strlen(s));
}

static void assert_overloaded(const char *reply)
{
	const char *body = strstr(reply, "\r\n\r\n");
	json_t *j;

	assert_non_null(strstr(reply, "HTTP/1.1 503 "));
	assert_non_null(strstr(reply, "Retry-After: 7\r\n"));
	assert_non_null(body);
	j = json_loads(body + 4, 0, NULL);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(
	                        json_object_get(j, "error"), "code")),
	                    "overloaded");
	json_decref(j);
}

static const char get_ok[] =
    "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

static void test_per_client_cap(void **state)
{
	struct cnl_http_server *srv = start(0, 2, 60000, 60000);
	struct cnl_http_server_stats st;
	char buf[4096];
	int a = dial(srv, "127.0.0.2"), b = dial(srv, "127.0.0.2");
	int c = dial(srv, "127.0.0.2"), d;

	/* The third from 127.0.0.2 is answered at once, without a head. */
	read_all(c, buf, sizeof(buf));
	assert_overloaded(buf);
	close(c);
	/* Another address is served. */
	d = dial(srv, "127.0.0.3");
	send_str(d, get_ok);
	read_all(d, buf, sizeof(buf));
	assert_non_null(strstr(buf, "HTTP/1.1 200 "));
	close(d);
	/* A closed one frees its place. */
	close(a);
	for (int i = 0; i < 100; i++) {
		cnl_http_server_stats(srv, &st);
		if (st.open == 1)
			break;
		usleep(20 * 1000);
	}
	d = dial(srv, "127.0.0.2");
	send_str(d, get_ok);
	read_all(d, buf, sizeof(buf));
	assert_non_null(strstr(buf, "HTTP/1.1 200 "));
	close(d);
	close(b);
	cnl_http_server_stats(srv, &st);
	assert_true(st.refused >= 1);
	cnl_http_server_free(srv);
}

static void test_global_limit(void **state)
{
	struct cnl_http_server *srv = start(3, 100, 60000, 60000);
	int held[3];
	char buf[4096];
	int x;

	for (int i = 0; i < 3; i++)
		held[i] = dial(srv, NULL);
	x = dial(srv, "127.0.0.4");
	send_str(x, get_ok);
	read_all(x, buf, sizeof(buf));
	assert_overloaded(buf);
	assert_non_null(strstr(buf, "connection limit"));
	close(x);
	for (int i = 0; i < 3; i++)
		close(held[i]);
	cnl_http_server_free(srv);
}

static void test_timeouts(void **state)
{
	struct cnl_http_server *srv = start(0, 0, 300, 300);
	struct cnl_http_server_stats st;
	char buf[4096];
	int fd;

	/* Half a head: closed, nothing said. */
	fd = dial(srv, NULL);
	send_str(fd, "GET /ok HTTP/1.1\r\nHost: x\r\n");
	assert_int_equal(read_all(fd, buf, sizeof(buf)), 0);
	close(fd);
	/* Part of a body: closed. */
	fd = dial(srv, NULL);
	send_str(fd, "POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: "
	             "10\r\n\r\n{\"a\"");
	read_all(fd, buf, sizeof(buf));
	assert_null(strstr(buf, "HTTP/1.1 200"));
	close(fd);
	/* A reply slower than both timeouts is not cut. */
	fd = dial(srv, NULL);
	send_str(fd,
	         "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	read_all(fd, buf, sizeof(buf));
	assert_non_null(strstr(buf, "HTTP/1.1 200 "));
	assert_non_null(strstr(buf, "{\"status\":\"ok\"}"));
	close(fd);
	/* An upgraded connection idle longer than both is not cut. */
	fd = dial(srv, NULL);
	send_str(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: "
	             "Upgrade\r\nUpgrade: echo\r\nContent-Length: 0\r\n\r\n");
	{
		size_t n = 0;

		buf[0] = '\0';
		while (!strstr(buf, "\r\n\r\n") && n < sizeof(buf) - 1) {
			ssize_t r = recv(fd, buf + n, 1, 0);

			assert_true(r == 1);
			buf[++n] = '\0';
		}
	}
	assert_non_null(strstr(buf, "HTTP/1.1 101 "));
	usleep(1000 * 1000);
	send_str(fd, "ping");
	read_all(fd, buf, sizeof(buf));
	assert_string_equal(buf, "ping");
	close(fd);
	cnl_http_server_stats(srv, &st);
	assert_true(st.header_cut >= 1);
	assert_true(st.body_cut >= 1);
	cnl_http_server_free(srv);
}

static void test_framing(void **state)
{
	static const struct {
		const char *h[3][2];
		int ok;
		int64_t len;
		const char *why;
	} cases[] = {
	    {{{"Content-Length", "12"}}, 1, 12, NULL},
	    {{{"Host", "x"}}, 1, -1, NULL},
	    {{{"transfer-encoding", "Chunked"}}, 1, -1, NULL},
	    {{{"Content-Length", "2"}, {"content-length", "2"}},
	     0,
	     0,
	     "more than one Content-Length"},
	    {{{"Content-Length", "2"}, {"Transfer-Encoding", "chunked"}},
	     0,
	     0,
	     "Transfer-Encoding"},
	    {{{"Content-Length", "-1"}}, 0, 0, "not a decimal"},
	    {{{"Content-Length", "1x"}}, 0, 0, "not a decimal"},
	    {{{"Content-Length", ""}}, 0, 0, "not a decimal"},
	    {{{"Content-Length", "99999999999999999999999"}},
	     0,
	     0,
	     "too large"},
	    {{{"Transfer-Encoding", "gzip"}}, 0, 0, "other than chunked"},
	    {{{"Transfer-Encoding", "chunked"},
	      {"Transfer-Encoding", "chunked"}},
	     0,
	     0,
	     "more than one Transfer-Encoding"},
	    {{{"Transfer-Encoding", "chunked, identity"}},
	     0,
	     0,
	     "other than chunked"},
	    /* Smuggling: names a proxy in front may read otherwise. */
	    {{{"Transfer-Encoding ", "chunked"}, {"Content-Length", "3"}},
	     0,
	     0,
	     "header \"Transfer-Encoding?\""},
	    {{{"Content Length", "3"}}, 0, 0, "header \"Content?Length\""},
	    {{{"Content-Length0", "2"}}, 0, 0, "header \"Content-Length0\""},
	    {{{"X-ATransfer-Encoding:\tchunked", "b"}},
	     0,
	     0,
	     "header \"X-ATransfer-Encoding:?chunked\""},
	    {{{"X-A", "a\rContent-Length: 50"}, {"Content-Length", "2"}},
	     0,
	     0,
	     "header \"X-A\""},
	    {{{"", "x"}}, 0, 0, "header \"\""},
	    {{{"Host", "a"}, {"host", "b"}}, 0, 0, "more than one Host"},
	    {{{"X-Tab", "a\tb"}, {"Accept", "*/*"}}, 1, -1, NULL},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cnl_http_framing f = {0};
		char err[128] = "";
		int64_t len = 42;
		int r;

		for (int k = 0; k < 3 && cases[i].h[k][0]; k++)
			cnl_http_framing_add(&f, cases[i].h[k][0],
			                     cases[i].h[k][1]);
		r = cnl_http_framing_end(&f, &len, err, sizeof(err));
		if (cases[i].ok) {
			assert_int_equal(r, 0);
			assert_int_equal(len, cases[i].len);
		} else {
			assert_int_equal(r, -EINVAL);
			assert_non_null(strstr(err, cases[i].why));
		}
	}
}

/* The client against a listener that accepts and never answers. */
static void test_client_idle_timeout(void **state)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	struct cnl_client *cl;
	struct cnl_client_reply r;
	char base[64];

	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(ls, 4), 0);
	getsockname(ls, (struct sockaddr *)&sa, &len);
	snprintf(base, sizeof(base), "http://127.0.0.1:%u",
	         (unsigned)ntohs(sa.sin_port));
	assert_int_equal(
	    cnl_client_new(
	        &(struct cnl_client_config){.base = base,
	                                    .connect_timeout_ms = 5000,
	                                    .idle_timeout_ms = 1000},
	        &cl),
	    0);
	/* The kernel completes the connection; nobody ever reads it. */
	assert_int_equal(cnl_client_send(cl, "GET", "/x", NULL, NULL, &r),
	                 -EIO);
	assert_int_equal(r.timed_out, CNL_CLIENT_TIMEOUT_IDLE);
	cnl_client_reply_done(&r);
	cnl_client_free(cl);
	close(ls);
}

/* Passed requests: /ok is declined (left to the routes), the rest
 * answered by pass_open itself or passed and answered by pass_end. */
static int p_open(void *ud, struct cnl_http_request *req,
                  struct cnl_http_response *resp, void **ret_state)
{
	(void)ud;
	if (strcmp(req->path, "/ok") == 0)
		return 1;
	if (strcmp(req->path, "/refused") == 0) {
		cnl_http_error(resp, 418, "refused", "at the door");
		return -1;
	}
	*ret_state = calloc(1, sizeof(size_t));
	return 0;
}

static int p_body(void *state, const char *data, size_t n)
{
	(void)data;
	*(size_t *)state += n;
	return 0;
}

static void p_end(void *state, struct cnl_http_request *req,
                  struct cnl_http_response *resp)
{
	(void)req;
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:I}", "by", "pass", "bytes",
	                         (json_int_t) * (size_t *)state));
	free(state);
}

static void test_pass_declined(void **state)
{
	struct cnl_http_config cfg = {
	    .host = "127.0.0.1",
	    .routes = routes,
	    .nroutes = sizeof(routes) / sizeof(routes[0]),
	    .serve = serve,
	    .pass_prefix = "/",
	    .pass_open = p_open,
	    .pass_body = p_body,
	    .pass_end = p_end,
	    .pass_free = free,
	};
	struct cnl_http_server *srv = NULL;
	char err[256], buf[4096];
	int fd;

	(void)state;
	assert_int_equal(cnl_http_server_new(&cfg, &srv, err, sizeof(err)), 0);
	/* Declined: the route's handler answers. */
	fd = dial(srv, NULL);
	send_str(fd, get_ok);
	read_all(fd, buf, sizeof(buf));
	close(fd);
	assert_non_null(strstr(buf, "HTTP/1.1 200 "));
	assert_non_null(strstr(buf, "\"status\":\"ok\""));
	/* Declined on a second request of one kept-alive connection after
	 * a passed one, and passed again after it. */
	fd = dial(srv, NULL);
	send_str(fd, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n"
	             "abc"
	             "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"
	             "GET /y HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	read_all(fd, buf, sizeof(buf));
	close(fd);
	{
		const char *a = strstr(buf, "\"by\":\"pass\"");
		const char *b = a ? strstr(a, "\"status\":\"ok\"") : NULL;
		const char *c = b ? strstr(b, "\"by\":\"pass\"") : NULL;

		assert_non_null(a);
		assert_non_null(strstr(buf, "\"bytes\":3"));
		assert_non_null(b);
		assert_non_null(c);
	}
	/* Refused at the door: pass_open's answer. */
	fd = dial(srv, NULL);
	send_str(fd, "GET /refused HTTP/1.1\r\nHost: x\r\nConnection: "
	             "close\r\n\r\n");
	read_all(fd, buf, sizeof(buf));
	close(fd);
	assert_non_null(strstr(buf, "HTTP/1.1 418 "));
	cnl_http_server_free(srv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_per_client_cap),
	    cmocka_unit_test(test_global_limit),
	    cmocka_unit_test(test_timeouts),
	    cmocka_unit_test(test_framing),
	    cmocka_unit_test(test_client_idle_timeout),
	    cmocka_unit_test(test_pass_declined),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
