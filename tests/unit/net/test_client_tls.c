/*
 * test_client_tls.c - the HTTP client over TLS against the server wrapper
 * (net/http_server.h, libmicrohttpd with gnutls) on loopback, with
 * certificates made for the run by the openssl command: the right CA file
 * is trusted by host name and by IP address; a CA file that did not sign
 * the server's certificate, and a certificate that names another host,
 * are refused before any request is sent (the bearer token never leaves);
 * a server that accepts and never starts the handshake is given up after
 * the idle timeout; keep-alive works over TLS.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "common/util.h"
#include "net/client.h"
#include "net/http_server.h"

static char dir[] = "/tmp/cnl-tls-XXXXXX";
static char good_pem[128], other_pem[128];
static struct cnl_http_server *good, *other;
static unsigned good_port, other_port;
static int seen_auth; /* requests that carried the token */

/* openssl req: a self-signed EC certificate for @san into @name.pem and
 * @name.key under dir. */
static int make_cert(const char *name, const char *san)
{
	char crt[128], key[128], ext[160];
	pid_t pid;
	int st;

	snprintf(crt, sizeof(crt), "%s/%s.pem", dir, name);
	snprintf(key, sizeof(key), "%s/%s.key", dir, name);
	snprintf(ext, sizeof(ext), "subjectAltName=%s", san);
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 2);
		execlp("openssl", "openssl", "req", "-x509", "-newkey", "ec",
		       "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
		       "-keyout", key, "-out", crt, "-subj", "/CN=cnlab test",
		       "-days", "1", "-addext", ext, (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) ||
	    WEXITSTATUS(st) != 0)
		return -1;
	return 0;
}

/* The whole of the file @path, malloc'd, or NULL. */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = cnl_xmalloc(1 << 16);
	size_t n;

	if (!f) {
		free(buf);
		return NULL;
	}
	n = fread(buf, 1, (1 << 16) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void no_handler(void *call, struct cnl_http_request *req,
                       struct cnl_http_response *resp)
{
}

static const struct cnl_http_route routes[] = {
    {"GET", "/hello", CNL_PERM_PUBLIC, NULL, no_handler},
};

static void serve(void *ud, const struct cnl_http_route *route,
                  struct cnl_http_request *req, struct cnl_http_response *resp)
{
	if (cnl_http_header(req, "Authorization"))
		__atomic_add_fetch(&seen_auth, 1, __ATOMIC_SEQ_CST);
	cnl_http_reply(resp, 200, json_pack("{s:s}", "hello", "tls"));
}

static struct cnl_http_server *start(const char *name, unsigned *port)
{
	char p[160], err[256];
	_cleanup_free_ char *crt = NULL, *key = NULL;
	struct cnl_http_server *s = NULL;

	snprintf(p, sizeof(p), "%s/%s.pem", dir, name);
	if (!(crt = slurp(p)))
		return NULL;
	snprintf(p, sizeof(p), "%s/%s.key", dir, name);
	if (!(key = slurp(p)))
		return NULL;
	if (cnl_http_server_new(
	        &(struct cnl_http_config){
	            .host = "127.0.0.1",
	            .routes = routes,
	            .nroutes = CNL_ARRAY_SIZE(routes),
	            .serve = serve,
	            .tls_cert_pem = crt,
	            .tls_key_pem = key,
	        },
	        &s, err, sizeof(err)) < 0) {
		fprintf(stderr, "server: %s\n", err);
		return NULL;
	}
	*port = cnl_http_server_port(s);
	return s;
}

static int setup(void **state)
{
	if (!mkdtemp(dir) ||
	    make_cert("good", "DNS:localhost,IP:127.0.0.1") < 0 ||
	    make_cert("other", "DNS:other.example") < 0)
		return -1;
	snprintf(good_pem, sizeof(good_pem), "%s/good.pem", dir);
	snprintf(other_pem, sizeof(other_pem), "%s/other.pem", dir);
	good = start("good", &good_port);
	other = start("other", &other_port);
	return good && other ? 0 : -1;
}

static int teardown(void **state)
{
	cnl_http_server_free(good);
	cnl_http_server_free(other);
	for (const char *const *f =
	         (const char *const[]){"good.pem", "good.key", "other.pem",
	                               "other.key", NULL};
	     *f; f++) {
		char p[160];

		snprintf(p, sizeof(p), "%s/%s", dir, *f);
		unlink(p);
	}
	rmdir(dir);
	return 0;
}

/* GET /hello from https://@host:@port trusting @cafile: the client's
 * return, the reply in *@r. */
static int hello(const char *host, unsigned port, const char *cafile,
                 long idle_ms, struct cnl_client_reply *r)
{
	struct cnl_client *cl = NULL;
	char url[128];
	int rc;

	snprintf(url, sizeof(url), "https://%s:%u", host, port);
	assert_int_equal(cnl_client_new(
	                     &(struct cnl_client_config){
	                         .base = url,
	                         .token = "secret",
	                         .cafile = cafile,
	                         .timeout_ms = 20000,
	                         .idle_timeout_ms = idle_ms,
	                     },
	                     &cl),
	                 0);
	rc = cnl_client_send(cl, "GET", "/hello", NULL, NULL, r);
	if (rc == 0) {
		/* Keep-alive over TLS: a second request on the same. */
		struct cnl_client_reply r2;

		assert_int_equal(
		    cnl_client_send(cl, "GET", "/hello", NULL, NULL, &r2), 0);
		assert_int_equal(r2.status, 200);
		cnl_client_reply_done(&r2);
	}
	cnl_client_free(cl);
	return rc;
}

static void test_trusted(void **state)
{
	struct cnl_client_reply r;

	assert_int_equal(hello("127.0.0.1", good_port, good_pem, 5000, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(json_string_value(json_object_get(r.json, "hello")),
	                    "tls");
	cnl_client_reply_done(&r);
	assert_int_equal(hello("localhost", good_port, good_pem, 5000, &r), 0);
	assert_int_equal(r.status, 200);
	cnl_client_reply_done(&r);
}

static void test_refused(void **state)
{
	struct cnl_client_reply r;
	int before = __atomic_load_n(&seen_auth, __ATOMIC_SEQ_CST);

	/* A CA that did not sign it. */
	assert_int_equal(hello("127.0.0.1", good_port, other_pem, 5000, &r),
	                 -EIO);
	assert_string_equal(
	    r.error, "SSL peer certificate or SSH remote key was not OK");
	assert_null(r.body);
	cnl_client_reply_done(&r);
	/* The system bundle does not know a self-signed one either. */
	assert_int_equal(hello("127.0.0.1", good_port, NULL, 5000, &r), -EIO);
	cnl_client_reply_done(&r);
	/* Trusted, but it names another host: by address and by name. */
	assert_int_equal(hello("127.0.0.1", other_port, other_pem, 5000, &r),
	                 -EIO);
	assert_string_equal(
	    r.error, "SSL peer certificate or SSH remote key was not OK");
	cnl_client_reply_done(&r);
	assert_int_equal(hello("localhost", other_port, other_pem, 5000, &r),
	                 -EIO);
	assert_string_equal(
	    r.error, "SSL peer certificate or SSH remote key was not OK");
	assert_non_null(strstr(r.detail, "localhost"));
	cnl_client_reply_done(&r);
	/* A CA file that is not there. */
	assert_int_equal(
	    hello("127.0.0.1", good_port, "/nonexistent.pem", 5000, &r), -EIO);
	assert_non_null(strstr(r.detail, "/nonexistent.pem"));
	cnl_client_reply_done(&r);
	/* None of these requests reached the server. */
	assert_int_equal(__atomic_load_n(&seen_auth, __ATOMIC_SEQ_CST), before);
}

static void test_silent_handshake(void **state)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	struct cnl_client_reply r;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	/* Listening, never accepting: the kernel completes the connect,
	 * then no handshake byte ever comes. */
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	assert_int_equal(
	    hello("127.0.0.1", ntohs(sa.sin_port), good_pem, 300, &r), -EIO);
	assert_int_equal(r.timed_out, CNL_CLIENT_TIMEOUT_IDLE);
	cnl_client_reply_done(&r);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_trusted),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_silent_handshake),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
