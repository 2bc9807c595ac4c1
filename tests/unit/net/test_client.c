/*
 * test_client.c - the one HTTP client (net/client.h) against the one
 * server wrapper (net/http_server.h) on loopback: what goes on the wire
 * (bearer, Accept, Idempotency-Key, User-Agent, JSON, raw and the "{}" of a
 * body-less POST), what comes back (status, bytes, JSON only for JSON),
 * the reply limit, what counts as unreachable, the daemon form's messages,
 * base and token limits, URL escaping, and streamed replies (on_data: each
 * piece handed over as it arrives, past the reply limit, and ended early
 * with -ECANCELED).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <time.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "common/util.h"
#include "net/client.h"
#include "net/error.h"
#include "net/http_server.h"

static struct cnl_http_server *srv;
static char base[64];

static void no_handler(void *call, struct cnl_http_request *req,
                       struct cnl_http_response *resp)
{
}

static const struct cnl_http_route routes[] = {
    {"GET", "/echo", CNL_PERM_PUBLIC, NULL, no_handler},
    {"POST", "/echo", CNL_PERM_PUBLIC, "echo", no_handler},
    {"GET", "/big", CNL_PERM_PUBLIC, NULL, no_handler},
    {"GET", "/text", CNL_PERM_PUBLIC, NULL, no_handler},
    {"GET", "/refused", CNL_PERM_PUBLIC, NULL, no_handler},
    {"GET", "/stream", CNL_PERM_PUBLIC, NULL, no_handler},
};

/*
 * /stream: a chunked reply of STREAM_PIECES pieces of STREAM_PIECE bytes
 * ('a', 'b', ...), more than a client's reply limit in all.  Before each
 * piece but the first the server waits (at most 5 s) until the client
 * has handed the one before to its callback (piece_seen): a client that
 * kept the body until its end never gets there, and the piece then comes
 * as 'L' (late) instead.
 */
#define STREAM_PIECE  4000
#define STREAM_PIECES 3
static atomic_int piece_seen;

struct piece_state {
	int sent;
};

static ssize_t stream_piece(void *arg, char *buf, size_t max)
{
	struct piece_state *ps = arg;
	char c = (char)('a' + ps->sent);

	if (ps->sent == STREAM_PIECES)
		return 0;
	if (max < STREAM_PIECE)
		return -1;
	for (int i = 0; ps->sent && i < 500; i++) {
		if (atomic_load(&piece_seen) >= ps->sent)
			break;
		nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	}
	if (ps->sent && atomic_load(&piece_seen) < ps->sent)
		c = 'L';
	memset(buf, c, STREAM_PIECE);
	ps->sent++;
	return STREAM_PIECE;
}

static json_t *header_or_null(struct cnl_http_request *req, const char *name)
{
	const char *v = cnl_http_header(req, name);

	return v ? json_string(v) : json_null();
}

/* /echo describes the request; /big is 5000 bytes; /text is not JSON. */
static void serve(void *ud, const struct cnl_http_route *route,
                  struct cnl_http_request *req, struct cnl_http_response *resp)
{
	if (strcmp(route->pattern, "/big") == 0) {
		resp->status = 200;
		resp->text = cnl_xmalloc(5001);
		memset(resp->text, 'x', 5000);
		resp->text[5000] = '\0';
		resp->content_type = "text/plain";
		return;
	}
	if (strcmp(route->pattern, "/text") == 0) {
		resp->status = 200;
		resp->text = cnl_xstrdup("plain words");
		resp->content_type = "text/plain";
		return;
	}
	if (strcmp(route->pattern, "/stream") == 0) {
		resp->status = 200;
		resp->content_type = "text/event-stream";
		resp->stream_read = stream_piece;
		resp->stream_free = free;
		resp->stream_arg = cnl_xcalloc(1, sizeof(struct piece_state));
		resp->stream_size = -1;
		return;
	}
	if (strcmp(route->pattern, "/refused") == 0) {
		cnl_http_error(resp, 409, "conflict", "already %s", "there");
		return;
	}
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:s,s:o,s:o,s:o,s:o,s:o}", "method",
	                         req->method, "body", req->body, "auth",
	                         header_or_null(req, "Authorization"), "accept",
	                         header_or_null(req, "Accept"), "idem",
	                         header_or_null(req, "Idempotency-Key"), "ua",
	                         header_or_null(req, "User-Agent"), "ctype",
	                         header_or_null(req, "Content-Type")));
}

static int setup(void **state)
{
	struct cnl_http_config cfg = {
	    .host = "127.0.0.1",
	    .routes = routes,
	    .nroutes = CNL_ARRAY_SIZE(routes),
	    .serve = serve,
	};
	char err[256];

	if (cnl_http_server_new(&cfg, &srv, err, sizeof(err)) < 0) {
		fprintf(stderr, "server: %s\n", err);
		return -1;
	}
	snprintf(base, sizeof(base), "http://127.0.0.1:%u/",
	         (unsigned)cnl_http_server_port(srv));
	return 0;
}

static int teardown(void **state)
{
	cnl_http_server_free(srv);
	return 0;
}

static struct cnl_client *client(const char *token, size_t reply_max)
{
	struct cnl_client *cl = NULL;

	assert_int_equal(cnl_client_new(
	                     &(struct cnl_client_config){
	                         .base = base,
	                         .token = token,
	                         .user_agent = token ? "cnlab-test/1" : NULL,
	                         .connect_timeout_ms = 5000,
	                         .timeout_ms = 10000,
	                         .reply_max = reply_max,
	                     },
	                     &cl),
	                 0);
	return cl;
}

static const char *member(const json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static void test_what_goes_on_the_wire(void **state)
{
	struct cnl_client *cl = client("tok123", 0);
	struct cnl_client_reply r;
	json_t *body = json_pack("{s:i}", "a", 1);

	/* GET: no body, bearer, Accept, User-Agent; the base's '/' goes. */
	assert_int_equal(cnl_client_send(cl, "GET", "/echo", NULL, NULL, &r),
	                 0);
	assert_int_equal(r.status, 200);
	assert_non_null(r.json);
	assert_string_equal(member(r.json, "method"), "GET");
	assert_string_equal(member(r.json, "body"), "");
	assert_string_equal(member(r.json, "auth"), "Bearer tok123");
	assert_string_equal(member(r.json, "accept"), "application/json");
	assert_string_equal(member(r.json, "ua"), "cnlab-test/1");
	assert_null(member(r.json, "idem"));
	cnl_client_reply_done(&r);
	cnl_client_reply_done(&r); /* repeatable */

	/* JSON body and Idempotency-Key; the connection is reused. */
	assert_int_equal(
	    cnl_client_send(cl, "POST", "/echo", body, "key-1", &r), 0);
	assert_string_equal(member(r.json, "body"), "{\"a\":1}");
	assert_string_equal(member(r.json, "ctype"), "application/json");
	assert_string_equal(member(r.json, "idem"), "key-1");
	cnl_client_reply_done(&r);

	/* A POST without a body sends an empty JSON object. */
	assert_int_equal(cnl_client_send(cl, "POST", "/echo", NULL, NULL, &r),
	                 0);
	assert_string_equal(member(r.json, "body"), "{}");
	assert_string_equal(member(r.json, "ctype"), "application/json");
	assert_null(member(r.json, "idem"));
	cnl_client_reply_done(&r);

	/* A raw body goes as it is, with its content type. */
	assert_int_equal(
	    cnl_client_request(cl,
	                       &(struct cnl_client_request){
	                           .method = "POST",
	                           .path = "/echo",
	                           .body = "raw bytes here",
	                           .body_len = 9,
	                           .content_type = "application/octet-stream",
	                       },
	                       &r),
	    0);
	assert_string_equal(member(r.json, "body"), "raw bytes");
	assert_string_equal(member(r.json, "ctype"),
	                    "application/octet-stream");
	cnl_client_reply_done(&r);

	/* A caller's header lines (a signed request's): a good one goes;
	 * one that would smuggle another header, or reframe the request,
	 * fails it before anything is sent. */
	{
		static const char *const good[] = {
		    "X-Amz-Date: 20261201T000000Z", NULL};
		static const char *const bad[][2] = {
		    {"X-A: b\r\nX-Evil: 1", NULL},
		    {"X-A:b", NULL},
		    {"Bad Name: v", NULL},
		    {"content-length: 0", NULL},
		    {"Host: elsewhere", NULL},
		    {"Transfer-Encoding: chunked", NULL},
		    {"Content-Type: text/plain", NULL},
		    {"X-A: bell\a", NULL},
		    {"Authorization: AWS4-HMAC-SHA256 x",
		     NULL}, /* has a bearer */
		};

		assert_int_equal(
		    cnl_client_request(cl,
		                       &(struct cnl_client_request){
		                           .method = "GET",
		                           .path = "/echo",
		                           .headers = good,
		                       },
		                       &r),
		    0);
		assert_int_equal(r.status, 200);
		cnl_client_reply_done(&r);
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			assert_int_equal(
			    cnl_client_request(cl,
			                       &(struct cnl_client_request){
			                           .method = "GET",
			                           .path = "/echo",
			                           .headers = bad[i],
			                       },
			                       &r),
			    -EINVAL);
			assert_int_equal(r.status, 0);
			assert_non_null(strstr(r.error, "bad header line"));
			cnl_client_reply_done(&r);
		}
	}
	json_decref(body);
	cnl_client_free(cl);

	/* No token: no Authorization header, no User-Agent. */
	cl = client(NULL, 0);
	assert_int_equal(cnl_client_send(cl, "GET", "/echo", NULL, NULL, &r),
	                 0);
	assert_null(member(r.json, "auth"));
	assert_null(member(r.json, "ua"));
	cnl_client_reply_done(&r);
	cnl_client_free(cl);
}

static void test_what_comes_back(void **state)
{
	struct cnl_client *cl = client(NULL, 5000);
	struct cnl_client_reply r;
	const char *code, *msg;

	/* Error statuses are replies: 0, with the error's two fields. */
	assert_int_equal(cnl_client_send(cl, "GET", "/refused", NULL, NULL, &r),
	                 0);
	assert_int_equal(r.status, 409);
	assert_true(cnl_http_error_read(r.json, &code, &msg));
	assert_string_equal(code, "conflict");
	assert_string_equal(msg, "already there");
	cnl_client_reply_done(&r);
	assert_int_equal(cnl_client_send(cl, "GET", "/nowhere", NULL, NULL, &r),
	                 0);
	assert_int_equal(r.status, 404);
	cnl_client_reply_done(&r);

	/* Not JSON: the bytes, no parse. */
	assert_int_equal(cnl_client_send(cl, "GET", "/text", NULL, NULL, &r),
	                 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "plain words");
	assert_int_equal(r.len, 11);
	assert_null(r.json);
	assert_false(cnl_http_error_read(r.json, &code, &msg));
	assert_null(code);
	assert_null(msg);
	cnl_client_reply_done(&r);

	/* Exactly the limit is fine; one byte less than the reply is not. */
	assert_int_equal(cnl_client_send(cl, "GET", "/big", NULL, NULL, &r), 0);
	assert_int_equal(r.len, 5000);
	cnl_client_reply_done(&r);
	cnl_client_free(cl);
	cl = client(NULL, 4999);
	assert_int_equal(cnl_client_send(cl, "GET", "/big", NULL, NULL, &r),
	                 -EIO);
	assert_true(r.too_large);
	assert_int_equal(r.status, 0);
	assert_null(r.body);
	assert_string_equal(r.error, "response too large");
	cnl_client_reply_done(&r);
	/* The handle still works after a refused reply. */
	assert_int_equal(cnl_client_send(cl, "GET", "/text", NULL, NULL, &r),
	                 0);
	assert_string_equal(r.body, "plain words");
	cnl_client_reply_done(&r);
	cnl_client_free(cl);
}

/* What a streamed reply's callback saw. */
struct seen {
	char *bytes;
	size_t n;
	int calls;
	int stop_after; /* bytes; 0: never asks to end */
};

static int take(void *ud, const char *buf, size_t len)
{
	struct seen *s = ud;

	s->bytes = cnl_xrealloc(s->bytes, s->n + len);
	memcpy(s->bytes + s->n, buf, len);
	s->n += len;
	s->calls++;
	atomic_store(&piece_seen, (int)(s->n / STREAM_PIECE));
	return s->stop_after && s->n >= (size_t)s->stop_after;
}

static void test_streamed_reply(void **state)
{
	struct cnl_client *cl = client(NULL, 5000);
	struct cnl_client_reply r;
	struct seen s = {0};
	struct cnl_client_request rq = {
	    .method = "GET",
	    .path = "/stream",
	    .on_data = take,
	    .on_data_ud = &s,
	};

	/* Every piece, in order, each handed over before the next was sent
	 * (no 'L'), 12000 bytes past the 5000-byte limit, none kept. */
	atomic_store(&piece_seen, 0);
	assert_int_equal(cnl_client_request(cl, &rq, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal(r.len, 0);
	assert_int_equal(s.n, STREAM_PIECE * STREAM_PIECES);
	for (size_t i = 0; i < s.n; i++)
		assert_int_equal(s.bytes[i], 'a' + (int)(i / STREAM_PIECE));
	assert_true(s.calls >= STREAM_PIECES);
	cnl_client_reply_done(&r);

	/* The callback ends it: -ECANCELED, after the first piece. */
	free(s.bytes);
	memset(&s, 0, sizeof(s));
	s.stop_after = STREAM_PIECE;
	atomic_store(&piece_seen, 0);
	assert_int_equal(cnl_client_request(cl, &rq, &r), -ECANCELED);
	assert_int_equal(s.n, STREAM_PIECE);
	cnl_client_reply_done(&r);

	/* Not 2xx: in memory as usual, the callback never called. */
	free(s.bytes);
	memset(&s, 0, sizeof(s));
	rq.path = "/refused";
	assert_int_equal(cnl_client_request(cl, &rq, &r), 0);
	assert_int_equal(r.status, 409);
	assert_non_null(r.json);
	assert_int_equal(s.calls, 0);
	cnl_client_reply_done(&r);

	/* The handle still works after a request the callback ended. */
	assert_int_equal(cnl_client_send(cl, "GET", "/text", NULL, NULL, &r),
	                 0);
	assert_string_equal(r.body, "plain words");
	cnl_client_reply_done(&r);
	free(s.bytes);
	cnl_client_free(cl);
}

/* A loopback port nobody listens on: bound, then closed again. */
static unsigned dead_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

static void test_unreachable_and_the_daemon_form(void **state)
{
	struct cnl_client *cl = NULL;
	struct cnl_client_reply r;
	char url[64], err[256];
	json_t *body = json_object(), *j = body;

	snprintf(url, sizeof(url), "http://127.0.0.1:%u", dead_port());
	assert_int_equal(
	    cnl_client_new(&(struct cnl_client_config){.base = url}, &cl), 0);
	assert_int_equal(cnl_client_send(cl, "GET", "/x", NULL, NULL, &r),
	                 -EIO);
	assert_int_equal(r.status, 0);
	assert_false(r.too_large);
	assert_string_equal(r.error, "Couldn't connect to server");
	assert_non_null(strstr(r.detail, "127.0.0.1"));
	cnl_client_reply_done(&r);
	assert_int_equal(
	    cnl_client_call(cl, "POST", "/v1/x", body, 5, &j, err, sizeof(err)),
	    -EIO);
	assert_null(j);
	json_decref(body);
	assert_string_equal(err, "POST /v1/x: Couldn't connect to server");
	cnl_client_free(cl);

	/* Only http and https. */
	assert_int_equal(
	    cnl_client_new(&(struct cnl_client_config){.base = ""}, &cl), 0);
	assert_int_equal(
	    cnl_client_send(cl, "GET", "file:///etc/passwd", NULL, NULL, &r),
	    -EIO);
	assert_null(r.body);
	cnl_client_reply_done(&r);
	cnl_client_free(cl);

	/* The daemon form: the status, the JSON, the error's message. */
	cl = client("t", 0);
	assert_int_equal(
	    cnl_client_call(cl, "GET", "/echo", NULL, 5, &j, err, sizeof(err)),
	    200);
	assert_string_equal(member(j, "method"), "GET");
	json_decref(j);
	assert_int_equal(cnl_client_call(cl, "GET", "/refused", NULL, 5, NULL,
	                                 err, sizeof(err)),
	                 409);
	assert_string_equal(err, "GET /refused: 409 already there");
	assert_int_equal(
	    cnl_client_call(cl, "GET", "/text", NULL, 0, &j, err, sizeof(err)),
	    200);
	assert_null(j);
	cnl_client_free(cl);
}

/*
 * Several bases (replicas' addresses, comma-separated): a request goes to
 * the first that takes the connection, and keeps going there; when none
 * does it fails as one unreachable server does.  A comma inside one URL
 * (not followed by another http(s) URL) is no list.
 */
/* A standby replica: 503 "not_leader" to everything, counting hits. */
static int standby_hits;

static void standby_serve(void *ud, const struct cnl_http_route *route,
                          struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	standby_hits++;
	cnl_http_error(resp, 503, "not_leader", "a standby");
}

static void test_several_bases(void **state)
{
	struct cnl_client *cl = NULL;
	struct cnl_client_reply r;
	char list[512], dead[64], dead2[64], sb[64];
	struct cnl_http_server *standby = NULL;
	json_t *j = NULL;
	char err[256];

	snprintf(dead, sizeof(dead), "http://127.0.0.1:%u", dead_port());
	snprintf(dead2, sizeof(dead2), "http://127.0.0.1:%u", dead_port());
	snprintf(list, sizeof(list), "%s,%s,%s", dead, base, dead2);
	assert_int_equal(
	    cnl_client_new(&(struct cnl_client_config){.base = list}, &cl), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(cnl_client_call(cl, "POST", "/echo", NULL, 5,
		                                 &j, err, sizeof(err)),
		                 200);
		assert_string_equal(member(j, "method"), "POST");
		json_decref(j);
	}
	cnl_client_free(cl);

	snprintf(list, sizeof(list), "%s,%s", dead, dead2);
	assert_int_equal(
	    cnl_client_new(&(struct cnl_client_config){.base = list}, &cl), 0);
	assert_int_equal(cnl_client_send(cl, "GET", "/x", NULL, NULL, &r),
	                 -EIO);
	assert_string_equal(r.error, "Couldn't connect to server");
	cnl_client_reply_done(&r);
	cnl_client_free(cl);

	/* A standby answers 503 not_leader: the request goes on to the
	 * next address, and sticks there. */
	assert_int_equal(
	    cnl_http_server_new(
	        &(struct cnl_http_config){.host = "127.0.0.1",
	                                  .routes = routes,
	                                  .nroutes = CNL_ARRAY_SIZE(routes),
	                                  .serve = standby_serve},
	        &standby, err, sizeof(err)),
	    0);
	snprintf(sb, sizeof(sb), "http://127.0.0.1:%u",
	         (unsigned)cnl_http_server_port(standby));
	snprintf(list, sizeof(list), "%s,%s", sb, base);
	assert_int_equal(
	    cnl_client_new(&(struct cnl_client_config){.base = list}, &cl), 0);
	standby_hits = 0;
	for (int i = 0; i < 3; i++) {
		assert_int_equal(cnl_client_call(cl, "POST", "/echo", NULL, 5,
		                                 &j, err, sizeof(err)),
		                 200);
		json_decref(j);
	}
	assert_int_equal(standby_hits, 1);
	cnl_client_free(cl);
	/* Only standbys: their answer comes back as it is. */
	snprintf(list, sizeof(list), "%s,%s", sb, sb);
	assert_int_equal(
	    cnl_client_new(&(struct cnl_client_config){.base = list}, &cl), 0);
	assert_int_equal(cnl_client_call(cl, "POST", "/echo", NULL, 5, NULL,
	                                 err, sizeof(err)),
	                 503);
	cnl_client_free(cl);
	cnl_http_server_free(standby);

	/* One URL with a comma in its path: not a list (and not found). */
	snprintf(list, sizeof(list), "%sa,b", base);
	assert_int_equal(
	    cnl_client_new(&(struct cnl_client_config){.base = list}, &cl), 0);
	assert_int_equal(cnl_client_send(cl, "GET", "/echo", NULL, NULL, &r),
	                 0);
	assert_int_equal(r.status, 404);
	cnl_client_reply_done(&r);
	cnl_client_free(cl);
}

static void test_limits_and_escaping(void **state)
{
	struct cnl_client *cl = (struct cnl_client *)&cl;
	char *long_base = cnl_xmalloc(CNL_CLIENT_BASE_MAX + 1);
	char *long_token = cnl_xmalloc(CNL_CLIENT_TOKEN_MAX + 2);
	char *e;

	memset(long_base, 'h', CNL_CLIENT_BASE_MAX);
	long_base[CNL_CLIENT_BASE_MAX] = '\0';
	memset(long_token, 't', CNL_CLIENT_TOKEN_MAX + 1);
	long_token[CNL_CLIENT_TOKEN_MAX + 1] = '\0';
	assert_int_equal(
	    cnl_client_new(&(struct cnl_client_config){.base = long_base}, &cl),
	    -EINVAL);
	assert_int_equal(
	    cnl_client_new(
	        &(struct cnl_client_config){.base = base, .token = long_token},
	        &cl),
	    -EINVAL);
	assert_int_equal(cnl_client_new(&(struct cnl_client_config){0}, &cl),
	                 -EINVAL);
	assert_int_equal(cnl_client_new(NULL, &cl), -EINVAL);
	assert_ptr_equal(cl, (struct cnl_client *)&cl); /* untouched */
	long_token[CNL_CLIENT_TOKEN_MAX] = '\0';
	assert_int_equal(
	    cnl_client_new(
	        &(struct cnl_client_config){.base = base, .token = long_token},
	        &cl),
	    0);
	cnl_client_free(cl);
	cnl_client_free(NULL);
	free(long_base);
	free(long_token);

	e = cnl_client_url_escape("a b/c?d=é&~-._Z9");
	assert_string_equal(e, "a%20b%2Fc%3Fd%3D%C3%A9%26~-._Z9");
	free(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_what_goes_on_the_wire),
	    cmocka_unit_test(test_what_comes_back),
	    cmocka_unit_test(test_unreachable_and_the_daemon_form),
	    cmocka_unit_test(test_several_bases),
	    cmocka_unit_test(test_limits_and_escaping),
	    cmocka_unit_test(test_streamed_reply),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
