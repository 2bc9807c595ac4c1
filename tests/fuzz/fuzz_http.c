/*
 * fuzz_http.c - fuzz target for cnlabd's HTTP request handling: the input
 * is the bytes a client sends on one connection.
 *
 * Two things are driven with it.  The head's framing and routing, as pure
 * functions (cnl_http_framing_*(), cnl_http_route_match() over a table
 * shaped like cnlabd's): the input's first line is split into a method
 * and a target, and each following line up to the empty one into a
 * header.  Then the real server (net/http_server.c in front of
 * libmicrohttpd, whose parser takes the bytes) on loopback: the input is
 * written on a fresh connection, our side is shut, and the reply read to
 * its end.  A reply must be nothing (the head never completed) or begin
 * with an HTTP status line; anything else is a crash.
 *
 * Built twice: with clang's libFuzzer (-DCNL_FUZZ=ON, scripts/fuzz), and
 * with a plain main() (replay.c) that feeds the files of the corpus and
 * of tests/fuzz/regress/http/ to the same entry point in every build.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "net/http_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void h_ok(void *call, struct cnl_http_request *req,
                 struct cnl_http_response *resp)
{
	json_t *in = req->body_len
	                 ? json_loadb(req->body, req->body_len, 0, NULL)
	                 : NULL;

	const char *thing = cnl_http_param(req, "thing");
	json_t *o = json_object();

	json_object_set_new(o, "thing", json_string(thing ? thing : ""));
	json_object_set_new(o, "bytes",
	                    json_integer((json_int_t)req->body_len));
	json_object_set_new(o, "json", json_boolean(in != NULL));
	cnl_http_reply(resp, 200, o);
	json_decref(in);
}

static const struct cnl_http_route routes[] = {
    {"GET", "/healthz", CNL_PERM_PUBLIC, NULL, h_ok},
    {"GET", "/v1/things/{thing}", CNL_PERM_AUTHENTICATED, NULL, h_ok},
    {"POST", "/v1/things/{thing}", CNL_PERM_AUTHENTICATED, "thing.make", h_ok},
    {"PUT", "/v1/things/{thing}/files/{file}", CNL_PERM_AUTHENTICATED,
     "thing.file", h_ok},
    {"DELETE", "/v1/things/{thing}", CNL_PERM_ADMIN, "thing.drop", h_ok},
};

static void serve(void *ud, const struct cnl_http_route *route,
                  struct cnl_http_request *req, struct cnl_http_response *resp)
{
	route->handler(NULL, req, resp);
}

/* A streamed body (the PUT route), counted and dropped. */
struct count_sink {
	struct cnl_http_sink s;
	size_t n;
};

static int sink_write(struct cnl_http_sink *s, const char *data, size_t n)
{
	struct count_sink *c = (struct count_sink *)s;

	c->n += n;
	return c->n > 65536 ? -1 : 0;
}

static void sink_free(struct cnl_http_sink *s)
{
	free(s);
}

static int open_sink(void *ud, const struct cnl_http_route *route,
                     struct cnl_http_request *req,
                     struct cnl_http_response *resp, struct cnl_http_sink **ret)
{
	struct count_sink *c;

	if (strcmp(route->method, "PUT") != 0)
		return 1;
	if (!(c = calloc(1, sizeof(*c))))
		abort();
	c->s.write = sink_write;
	c->s.free = sink_free;
	*ret = &c->s;
	return 0;
}

static struct cnl_http_server *srv;
static uint16_t port;

static void start(void)
{
	struct cnl_http_config cfg = {
	    .host = "127.0.0.1",
	    .routes = routes,
	    .nroutes = sizeof(routes) / sizeof(routes[0]),
	    .serve = serve,
	    .open_sink = open_sink,
	    .body_max = 4096,
	    .header_timeout_ms = 5000,
	    .body_timeout_ms = 5000,
	};
	char err[256];

	signal(SIGPIPE, SIG_IGN);
	if (cnl_http_server_new(&cfg, &srv, err, sizeof(err)) < 0) {
		fprintf(stderr, "fuzz_http: %s\n", err);
		abort();
	}
	port = cnl_http_server_port(srv);
}

/* The pure half: framing and routing of the input's head. */
static void head(const char *p, size_t n)
{
	struct cnl_http_framing f = {0};
	struct cnl_http_request req = {0};
	const struct cnl_http_route *route;
	char allow[CNL_HTTP_ALLOW_MAX];
	char line[1024], method[16] = "", target[512] = "", err[128];
	bool first = true;
	int64_t len;

	while (n) {
		const char *eol = memchr(p, '\n', n);
		size_t ll = eol ? (size_t)(eol - p) : n;
		size_t take = ll < sizeof(line) - 1 ? ll : sizeof(line) - 1;
		char *colon;

		memcpy(line, p, take);
		line[take] = '\0';
		if (take && line[take - 1] == '\r')
			line[--take] = '\0';
		p += ll + (eol ? 1 : 0);
		n -= ll + (eol ? 1 : 0);
		if (first) {
			first = false;
			if (sscanf(line, "%15s %511s", method, target) != 2)
				return;
			continue;
		}
		if (!take)
			break;
		if ((colon = strchr(line, ':'))) {
			const char *v = colon + 1;

			*colon = '\0';
			while (*v == ' ' || *v == '\t')
				v++;
			cnl_http_framing_add(&f, line, v);
		}
	}
	if (cnl_http_framing_end(&f, &len, err, sizeof(err)) == 0 &&
	    f.n_length && len != (int64_t)f.length)
		abort(); /* the length said is the length kept */
	{
		char *q = strchr(target, '?');

		if (q)
			*q = '\0';
	}
	if (cnl_http_route_match(routes, sizeof(routes) / sizeof(routes[0]),
	                         method, target, &req, &route,
	                         allow) == CNL_HTTP_MATCH_OK &&
	    strcmp(route->method, method) != 0)
		abort();
}

/* The whole server: the input on one connection; the reply read. */
static void wire(const uint8_t *data, size_t size)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
	                         .sin_port = htons(port),
	                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct timeval tv = {10, 0}; /* a hung server, not a finding */
	char reply[512];
	size_t got = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		abort();
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return;
	}
	for (size_t off = 0; off < size;) {
		ssize_t w = send(fd, data + off, size - off, MSG_NOSIGNAL);

		if (w <= 0)
			break; /* the server answered and closed early */
		off += (size_t)w;
	}
	shutdown(fd, SHUT_WR);
	for (;;) {
		char buf[4096];
		ssize_t r = recv(fd, buf, sizeof(buf), 0);

		if (r <= 0)
			break;
		if (got < sizeof(reply)) {
			size_t k = (size_t)r < sizeof(reply) - got
			               ? (size_t)r
			               : sizeof(reply) - got;

			memcpy(reply + got, buf, k);
			got += k;
		}
	}
	close(fd);
	if (got && (got < 9 || memcmp(reply, "HTTP/1.", 7) != 0)) {
		fprintf(stderr, "fuzz_http: a reply without a status line\n");
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!srv)
		start();
	if (size > 65536)
		return 0;
	head((const char *)data, size);
	wire(data, size);
	return 0;
}
