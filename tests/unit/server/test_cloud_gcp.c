/*
 * test_cloud_gcp.c - the Compute Engine provider (server/cloud.h,
 * cloud_gcp.c) against a loopback Google: a thread that reads each HTTP
 * request, records its method, path, bearer and body, checks the bearer
 * of every Compute call (401 without the token it gave), and answers the
 * test's script of recorded Google documents (operations, instances, and
 * errors: ZONE_RESOURCE_POOL_EXHAUSTED in an operation, 429
 * rateLimitExceeded, 503 backendError, 403 forbidden, 404 notFound,
 * invalid_grant), the token endpoint's answers included.
 *
 * A refused bearer is renewed once; a launch that fails part-way deletes
 * what it made, and what it may have made.
 *
 * And the assertion: signed RS256 with the service account's key, so
 * that its public key verifies it, with the claims Google requires.
 */
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
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "common/base64.h"
#include "server/cloud.h"

#define EMAIL  "burst@cnlab-test.iam.gserviceaccount.com"
#define BEARER "ya29.test-token"
#define PREFIX "/compute/v1/projects/cnlab-test/zones/us-central1-a"

struct step {
	int status;
	const char *body;
};

struct fake {
	int lfd, port;
	pthread_t th;
	/* A thread a connection (the token's and the API's are two). */
	pthread_t conn[16];
	int nconn;
	pthread_mutex_t mu;
	bool stop;
	struct step script[24];
	int nscript, next;
	/* What came: "METHOD PATH" per request, and the bodies. */
	char calls[64][256];
	char *bodies[64];
	int ncalls, grants, unauthorized;
	char assertion[4096];
};

static struct fake fk;
static char *key_pem, *pub_pem;

static const char *header(char *head, const char *name, char *out, size_t n)
{
	size_t nl = strlen(name);

	for (char *l = strstr(head, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
		if (strncasecmp(l + 2, name, nl) == 0 && l[2 + nl] == ':') {
			const char *v = l + 3 + nl, *e;

			while (*v == ' ')
				v++;
			e = strstr(v, "\r\n");
			snprintf(out, n, "%.*s", (int)(e - v), v);
			return out;
		}
	}
	return NULL;
}

static void answer(int fd, int status, const char *body)
{
	char head[256];
	int n = snprintf(head, sizeof(head),
	                 "HTTP/1.1 %d X\r\nContent-Type: application/json; "
	                 "charset=UTF-8\r\nContent-Length: %zu\r\n\r\n",
	                 status, strlen(body));

	assert_int_equal(write(fd, head, (size_t)n), n);
	assert_int_equal(write(fd, body, strlen(body)), (ssize_t)strlen(body));
}

static void serve(int fd)
{
	for (;;) {
		char buf[65536], v[4096], *end, *p;
		size_t got = 0, len = 0;
		ssize_t r;
		struct step st;
		bool token;

		while (!(end = got ? strstr(buf, "\r\n\r\n") : NULL)) {
			struct pollfd pf = {.fd = fd, .events = POLLIN};
			bool stop;

			pthread_mutex_lock(&fk.mu);
			stop = fk.stop;
			pthread_mutex_unlock(&fk.mu);
			if (stop)
				return;
			if (poll(&pf, 1, 50) == 0)
				continue;
			r = read(fd, buf + got, sizeof(buf) - 1 - got);
			if (r <= 0)
				return;
			got += (size_t)r;
			buf[got] = '\0';
		}
		*end = '\0';
		if (header(buf, "Content-Length", v, sizeof(v)))
			len = strtoul(v, NULL, 10);
		p = end + 4;
		while ((size_t)(buf + got - p) < len) {
			r = read(fd, buf + got, sizeof(buf) - 1 - got);
			if (r <= 0)
				return;
			got += (size_t)r;
		}
		buf[(size_t)(p - buf) + len] = '\0';
		pthread_mutex_lock(&fk.mu);
		token = strncmp(buf, "POST /token ", 12) == 0;
		if (fk.ncalls < 64) {
			snprintf(fk.calls[fk.ncalls], sizeof(fk.calls[0]),
			         "%.*s", (int)strcspn(buf, "\r\n"), buf);
			/* "POST /path HTTP/1.1" -> "POST /path". */
			*strrchr(fk.calls[fk.ncalls], ' ') = '\0';
			fk.bodies[fk.ncalls] = strdup(p);
			fk.ncalls++;
		}
		if (token) {
			const char *a = strstr(p, "assertion=");

			fk.grants++;
			snprintf(fk.assertion, sizeof(fk.assertion), "%s",
			         a ? a + 10 : "");
		}
		if (!token && (!header(buf, "Authorization", v, sizeof(v)) ||
		               strcmp(v, "Bearer " BEARER) != 0)) {
			fk.unauthorized++;
			st = (struct step){
			    401,
			    "{\"error\":{\"code\":401,\"message\":\"Request "
			    "had invalid authentication credentials.\","
			    "\"errors\":[{\"reason\":\"authError\"}],"
			    "\"status\":\"UNAUTHENTICATED\"}}"};
		} else if (fk.next < fk.nscript) {
			st = fk.script[fk.next++];
		} else {
			st = (struct step){500, "{\"error\":{\"code\":500,"
			                        "\"message\":\"unscripted\"}}"};
		}
		pthread_mutex_unlock(&fk.mu);
		answer(fd, st.status, st.body);
	}
}

static void *conn(void *arg)
{
	int fd = (int)(intptr_t)arg;

	serve(fd);
	close(fd);
	return NULL;
}

static void *loop(void *arg)
{
	(void)arg;
	for (;;) {
		int fd = accept(fk.lfd, NULL, NULL);

		if (fd < 0)
			return NULL;
		pthread_mutex_lock(&fk.mu);
		if (fk.stop || fk.nconn == 16) {
			pthread_mutex_unlock(&fk.mu);
			close(fd);
			return NULL;
		}
		assert_int_equal(pthread_create(&fk.conn[fk.nconn++], NULL,
		                                conn, (void *)(intptr_t)fd),
		                 0);
		pthread_mutex_unlock(&fk.mu);
	}
}

static void script(int status, const char *body)
{
	fk.script[fk.nscript++] = (struct step){status, body};
}

static const char *const TOKEN_OK =
    "{\"access_token\":\"" BEARER "\",\"expires_in\":3599,"
    "\"token_type\":\"Bearer\"}";
static const char *const OP_RUNNING =
    "{\"kind\":\"compute#operation\",\"name\":\"operation-1\","
    "\"status\":\"RUNNING\",\"operationType\":\"insert\"}";
static const char *const OP_DONE =
    "{\"kind\":\"compute#operation\",\"name\":\"operation-1\","
    "\"status\":\"DONE\",\"operationType\":\"insert\"}";
static const char *const OP_NOCAP =
    "{\"kind\":\"compute#operation\",\"name\":\"operation-1\","
    "\"status\":\"DONE\",\"error\":{\"errors\":[{\"code\":"
    "\"ZONE_RESOURCE_POOL_EXHAUSTED\",\"message\":\"The zone "
    "'projects/cnlab-test/zones/us-central1-a' does not have enough "
    "resources available to fulfill the request.\"}]}}";
static const char *const INSTANCE_SPOT_RUNNING =
    "{\"kind\":\"compute#instance\",\"id\":\"123\",\"name\":"
    "\"cnlab-cin-01-0-0\",\"zone\":\"https://www.googleapis.com/compute/"
    "v1/projects/cnlab-test/zones/us-central1-a\",\"machineType\":"
    "\"https://www.googleapis.com/compute/v1/projects/cnlab-test/zones/"
    "us-central1-a/machineTypes/g2-standard-4\",\"status\":\"RUNNING\","
    "\"networkInterfaces\":[{\"networkIP\":\"10.128.0.7\"}],"
    "\"scheduling\":{\"provisioningModel\":\"SPOT\"},\"metadata\":{"
    "\"items\":[{\"key\":\"cnlab-record\",\"value\":\"cin_01\"}]}}";
static const char *const INSTANCE_SPOT_STOPPED =
    "{\"kind\":\"compute#instance\",\"name\":\"cnlab-cin-01-0-0\","
    "\"status\":\"TERMINATED\",\"scheduling\":{\"provisioningModel\":"
    "\"SPOT\"}}";
static const char *const NOT_FOUND =
    "{\"error\":{\"code\":404,\"message\":\"The resource was not found\","
    "\"errors\":[{\"reason\":\"notFound\"}],\"status\":\"NOT_FOUND\"}}";
static const char *const RATE =
    "{\"error\":{\"code\":429,\"message\":\"Rate Limit Exceeded\","
    "\"errors\":[{\"reason\":\"rateLimitExceeded\"}],"
    "\"status\":\"RESOURCE_EXHAUSTED\"}}";
static const char *const BACKEND =
    "{\"error\":{\"code\":503,\"message\":\"The service is currently "
    "unavailable.\",\"errors\":[{\"reason\":\"backendError\"}]}}";

static int setup(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof(a);

	(void)state;
	memset(&fk, 0, sizeof(fk));
	pthread_mutex_init(&fk.mu, NULL);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fk.lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fk.lfd >= 0);
	assert_int_equal(bind(fk.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fk.lfd, 8), 0);
	assert_int_equal(getsockname(fk.lfd, (struct sockaddr *)&a, &al), 0);
	fk.port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&fk.th, NULL, loop, NULL), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	pthread_mutex_lock(&fk.mu);
	fk.stop = true;
	pthread_mutex_unlock(&fk.mu);
	shutdown(fk.lfd, SHUT_RDWR);
	close(fk.lfd);
	pthread_join(fk.th, NULL);
	for (int i = 0; i < fk.nconn; i++)
		pthread_join(fk.conn[i], NULL);
	for (int i = 0; i < fk.ncalls; i++)
		free(fk.bodies[i]);
	pthread_mutex_destroy(&fk.mu);
	return 0;
}

static struct cnl_cloud *open_gcp(void)
{
	char ep[64], tu[80], err[256];
	struct cnl_cloud_gcp_config cfg = {
	    .project = "cnlab-test",
	    .zone = "us-central1-a",
	    .client_email = EMAIL,
	    .private_key = key_pem,
	    .max_attempts = 4,
	    .backoff_ms = 1,
	};
	struct cnl_cloud *c = NULL;

	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", fk.port);
	snprintf(tu, sizeof(tu), "http://127.0.0.1:%d/token", fk.port);
	cfg.endpoint = ep;
	cfg.token_uri = tu;
	assert_int_equal(cnl_cloud_gcp_new(&cfg, &c, err, sizeof(err)), 0);
	return c;
}

static const struct cnl_cloud_launch launch = {
    .instance_type = "g2-standard-4",
    .market = CNL_CLOUD_SPOT,
    .count = 1,
    .image = "projects/debian-cloud/global/images/family/debian-12",
    .user_data = "#!/bin/sh\nexec cnlab-agent\n",
    .tags = (const struct cnl_cloud_tag[]){{"cnlab:record", "cin_01"}},
    .ntags = 1,
    .client_token = "cin_01-0",
};

/* A JWT part, decoded. */
static json_t *part(const char *s, size_t n)
{
	uint8_t *raw = NULL;
	size_t rn = 0;
	char *c = strndup(s, n);
	json_t *o;

	assert_int_equal(cnl_b64_decode_new(c, CNL_B64_URL, 1 << 16, &raw, &rn),
	                 0);
	o = json_loadb((const char *)raw, rn, 0, NULL);
	free(raw);
	free(c);
	return o;
}

/* The assertion verifies with the account's public key and says what
 * Google requires; a key that is not RSA is refused. */
static void test_assertion(void **state)
{
	char *jwt = NULL, *d1, *d2;
	json_t *h, *c;
	uint8_t *sig = NULL;
	size_t sn = 0;
	BIO *bio = BIO_new_mem_buf(pub_pem, -1);
	EVP_PKEY *pub = PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	EVP_PKEY *ec = EVP_EC_gen("P-256");
	char *ec_pem = NULL;
	BIO *eb = BIO_new(BIO_s_mem());
	long en;

	(void)state;
	assert_int_equal(
	    cnl_cloud_gcp_assertion(EMAIL, key_pem,
	                            "https://oauth2.googleapis.com/"
	                            "token",
	                            1796600000, &jwt),
	    0);
	d1 = strchr(jwt, '.');
	d2 = strchr(d1 + 1, '.');
	h = part(jwt, (size_t)(d1 - jwt));
	c = part(d1 + 1, (size_t)(d2 - d1 - 1));
	assert_string_equal(json_string_value(json_object_get(h, "alg")),
	                    "RS256");
	assert_string_equal(json_string_value(json_object_get(c, "iss")),
	                    EMAIL);
	assert_string_equal(json_string_value(json_object_get(c, "aud")),
	                    "https://oauth2.googleapis.com/token");
	assert_string_equal(json_string_value(json_object_get(c, "scope")),
	                    "https://www.googleapis.com/auth/compute");
	assert_int_equal(json_integer_value(json_object_get(c, "iat")),
	                 1796600000);
	assert_int_equal(json_integer_value(json_object_get(c, "exp")),
	                 1796600000 + 3600);
	assert_int_equal(
	    cnl_b64_decode_new(d2 + 1, CNL_B64_URL, 4096, &sig, &sn), 0);
	assert_int_equal(
	    EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, pub), 1);
	assert_int_equal(
	    EVP_DigestVerify(md, sig, sn, (uint8_t *)jwt, (size_t)(d2 - jwt)),
	    1);
	/* One bit changed in the claims: no longer verifies. */
	jwt[(d1 - jwt) + 3] ^= 1;
	EVP_MD_CTX_reset(md);
	EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, pub);
	assert_int_not_equal(
	    EVP_DigestVerify(md, sig, sn, (uint8_t *)jwt, (size_t)(d2 - jwt)),
	    1);
	free(jwt);
	jwt = NULL;
	PEM_write_bio_PrivateKey(eb, ec, NULL, NULL, 0, NULL, NULL);
	en = BIO_get_mem_data(eb, &ec_pem);
	ec_pem = strndup(ec_pem, (size_t)en);
	assert_int_equal(cnl_cloud_gcp_assertion(EMAIL, ec_pem, "x", 1, &jwt),
	                 -EINVAL);
	assert_int_equal(
	    cnl_cloud_gcp_assertion(EMAIL,
	                            "-----BEGIN PRIVATE KEY-----\nAAAA\n"
	                            "-----END PRIVATE KEY-----\n",
	                            "x", 1, &jwt),
	    -EINVAL);
	free(ec_pem);
	BIO_free(eb);
	EVP_PKEY_free(ec);
	free(sig);
	json_decref(h);
	json_decref(c);
	EVP_MD_CTX_free(md);
	EVP_PKEY_free(pub);
	BIO_free(bio);
}

/* The configuration: each bad field refused, named. */
static void test_config(void **state)
{
	struct cnl_cloud_gcp_config ok = {.project = "cnlab-test",
	                                  .zone = "us-central1-a",
	                                  .client_email = EMAIL,
	                                  .private_key = key_pem},
	                            bad;
	struct cnl_cloud *c = NULL;
	char err[256];

	(void)state;
	bad = ok;
	bad.zone = "us-central1";
	assert_int_equal(cnl_cloud_gcp_new(&bad, &c, err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "zone"));
	bad = ok;
	bad.project = "Bad/Project";
	assert_int_equal(cnl_cloud_gcp_new(&bad, &c, err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "project"));
	bad = ok;
	bad.private_key = "not a key";
	assert_int_equal(cnl_cloud_gcp_new(&bad, &c, err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "private_key"));
	bad = ok;
	bad.endpoint = "https://compute.googleapis.com/compute/v1";
	assert_int_equal(cnl_cloud_gcp_new(&bad, &c, err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "endpoint"));
	bad = ok;
	bad.token_uri = "ftp://example.com/token";
	assert_int_equal(cnl_cloud_gcp_new(&bad, &c, err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "token_uri"));
	assert_null(c);
	assert_int_equal(cnl_cloud_gcp_new(&ok, &c, err, sizeof(err)), 0);
	cnl_cloud_free(c);
}

/* A spot launch: the token once, the insert (its body as Compute Engine
 * wants it), the operation waited for, the instance read. */
static void test_provision(void **state)
{
	struct cnl_cloud *c = open_gcp();
	struct cnl_cloud_instance in[2];
	struct cnl_cloud_error e;
	size_t n = 0;
	json_t *b;

	(void)state;
	script(200, TOKEN_OK);
	script(200, OP_RUNNING);
	script(200, OP_DONE);
	script(200, INSTANCE_SPOT_RUNNING);
	assert_int_equal(c->ops->provision(c, &launch, in, 2, &n, &e), 0);
	assert_int_equal(n, 1);
	assert_string_equal(in[0].id, "cnlab-cin-01-0-0");
	assert_string_equal(in[0].type, "g2-standard-4");
	assert_string_equal(in[0].state, "running");
	assert_string_equal(in[0].zone, "us-central1-a");
	assert_string_equal(in[0].private_ip, "10.128.0.7");
	assert_string_equal(in[0].record, "cin_01");
	assert_true(in[0].spot);
	assert_false(in[0].interrupted);
	assert_int_equal(fk.grants, 1);
	assert_int_equal(fk.unauthorized, 0);
	assert_string_equal(fk.calls[0], "POST /token");
	assert_non_null(strstr(fk.bodies[0],
	                       "grant_type=urn%3Aietf%3Aparams%3A"
	                       "oauth%3Agrant-type%3Ajwt-bearer"));
	assert_int_equal(
	    strncmp(fk.calls[1],
	            "POST " PREFIX "/instances?"
	            "requestId=",
	            strlen("POST " PREFIX "/instances?requestId=")),
	    0);
	assert_string_equal(fk.calls[2],
	                    "POST " PREFIX "/operations/operation-1/wait");
	assert_string_equal(fk.calls[3],
	                    "GET " PREFIX "/instances/cnlab-cin-01-0-0");
	b = json_loads(fk.bodies[1], 0, NULL);
	assert_non_null(b);
	assert_string_equal(
	    json_string_value(json_object_get(b, "machineType")),
	    "zones/us-central1-a/machineTypes/g2-standard-4");
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(b, "scheduling"),
	                                      "provisioningModel")),
	    "SPOT");
	assert_string_equal(
	    json_string_value(json_object_get(json_object_get(b, "scheduling"),
	                                      "onHostMaintenance")),
	    "TERMINATE");
	assert_string_equal(json_string_value(json_object_get(
	                        json_object_get(b, "labels"), "cnlab-managed")),
	                    "true");
	assert_string_equal(
	    json_string_value(json_object_get(
	        json_array_get(
	            json_object_get(json_object_get(b, "metadata"), "items"),
	            1),
	        "key")),
	    "cnlab-record");
	json_decref(b);
	/* The same launch again: the same requestId (nothing made twice). */
	script(200, OP_DONE);
	script(200, INSTANCE_SPOT_RUNNING);
	assert_int_equal(c->ops->provision(c, &launch, in, 2, &n, &e), 0);
	assert_string_equal(fk.calls[4], fk.calls[1]);
	assert_int_equal(fk.grants, 1); /* the token kept */
	cnl_cloud_free(c);
}

/* No capacity, said when the operation ends: CAPACITY with Google's code;
 * rate limiting retried; a lasting outage UNAVAILABLE after the tries. */
static void test_errors(void **state)
{
	struct cnl_cloud *c = open_gcp();
	struct cnl_cloud_instance in[2];
	struct cnl_cloud_error e;
	size_t n = 9;

	(void)state;
	script(200, TOKEN_OK);
	script(200, OP_RUNNING);
	script(200, OP_NOCAP);
	assert_int_equal(c->ops->provision(c, &launch, in, 2, &n, &e), -EAGAIN);
	assert_int_equal(n, 0);
	assert_int_equal(e.kind, CNL_CLOUD_CAPACITY);
	assert_string_equal(e.code, "ZONE_RESOURCE_POOL_EXHAUSTED");
	assert_non_null(strstr(e.message, "enough resources"));

	script(429, RATE);
	script(429, RATE);
	script(200, OP_DONE);
	script(200, INSTANCE_SPOT_RUNNING);
	assert_int_equal(c->ops->provision(c, &launch, in, 2, &n, &e), 0);
	assert_int_equal(n, 1);

	for (int i = 0; i < 4; i++)
		script(503, BACKEND);
	assert_int_equal(c->ops->provision(c, &launch, in, 2, &n, &e), -EIO);
	assert_int_equal(e.kind, CNL_CLOUD_UNAVAILABLE);
	assert_int_equal(e.attempts, 4);
	assert_string_equal(e.code, "backendError");
	assert_int_equal(e.http_status, 503);
	/* The insert's fate unknown: the instance it may have made is
	 * deleted. */
	{
		bool deleted = false;

		for (int i = 0; i < fk.ncalls; i++)
			deleted |=
			    strncmp(fk.calls[i],
			            "DELETE " PREFIX
			            "/instances/cnlab-cin-01-0-0",
			            strlen("DELETE " PREFIX
			                   "/instances/cnlab-cin-01-0-0")) == 0;
		assert_true(deleted);
	}

	script(403, "{\"error\":{\"code\":403,\"message\":\"Required "
	            "'compute.instances.create' permission\",\"errors\":[{"
	            "\"reason\":\"forbidden\"}]}}");
	assert_int_equal(c->ops->provision(c, &launch, in, 2, &n, &e), -EACCES);
	assert_int_equal(e.kind, CNL_CLOUD_AUTH);
	cnl_cloud_free(c);
}

/* All or none: the second of two has no capacity, the first is deleted. */
static void test_all_or_none(void **state)
{
	struct cnl_cloud *c = open_gcp();
	struct cnl_cloud_launch two = launch;
	struct cnl_cloud_instance in[2];
	struct cnl_cloud_error e;
	size_t n = 0;

	(void)state;
	two.count = 2;
	script(200, TOKEN_OK);
	script(200, OP_DONE);
	script(200, OP_RUNNING);
	script(200, OP_NOCAP);
	script(200, OP_RUNNING); /* the first delete's operation */
	script(404, NOT_FOUND);  /* the second was never made */
	assert_int_equal(c->ops->provision(c, &two, in, 2, &n, &e), -EAGAIN);
	assert_int_equal(n, 0);
	/* Both deleted: the one made, and the one whose insert was
	 * accepted (its failed operation made nothing: 404, no error). */
	assert_int_equal(fk.ncalls, 6);
	assert_int_equal(
	    strncmp(fk.calls[5],
	            "DELETE " PREFIX "/instances/cnlab-cin-01-0-1?requestId=",
	            strlen("DELETE " PREFIX
	                   "/instances/cnlab-cin-01-0-1?requestId=")),
	    0);
	assert_int_equal(
	    strncmp(fk.calls[4],
	            "DELETE " PREFIX "/instances/cnlab-cin-01-0-0?requestId=",
	            strlen("DELETE " PREFIX
	                   "/instances/cnlab-cin-01-0-0?requestId=")),
	    0);
	cnl_cloud_free(c);
}

/* A stopped spot VM was preempted; one gone reads as terminated; a
 * bearer refused (401) is asked for afresh, once. */
static void test_describe(void **state)
{
	struct cnl_cloud *c = open_gcp();
	struct cnl_cloud_instance in[2];
	struct cnl_cloud_error e;
	const char *ids[] = {"cnlab-cin-01-0-0", "cnlab-cin-02-0-0"};
	size_t n = 0;

	(void)state;
	script(200, TOKEN_OK);
	script(200, INSTANCE_SPOT_STOPPED);
	script(404, NOT_FOUND);
	assert_int_equal(c->ops->describe(c, ids, 2, in, 2, &n, &e), 0);
	assert_int_equal(n, 2);
	assert_true(in[0].interrupted);
	assert_string_equal(in[0].state, "stopped");
	assert_string_equal(in[1].id, "cnlab-cin-02-0-0");
	assert_string_equal(in[1].state, "terminated");
	assert_false(in[1].interrupted);
	/* Terminating one already gone is no error. */
	script(404, NOT_FOUND);
	assert_int_equal(c->ops->terminate(c, ids + 1, 1, &e), 0);
	/* The token endpoint refusing the key: AUTH. */
	script(401, "{\"error\":\"invalid_grant\",\"error_description\":"
	            "\"Invalid JWT Signature.\"}");
	{
		struct cnl_cloud *c2 = open_gcp();

		assert_int_equal(c2->ops->describe(c2, ids, 1, in, 2, &n, &e),
		                 -EACCES);
		assert_int_equal(e.kind, CNL_CLOUD_AUTH);
		assert_string_equal(e.code, "invalid_grant");
		cnl_cloud_free(c2);
	}
	/* The spot price: Google's published list. */
	{
		double p = 0;

		assert_int_equal(c->ops->spot_price(c, "g2-standard-4", &p, &e),
		                 0);
		assert_true(p > 0 &&
		            p < cnl_cloud_type_find("gcp", "g2-standard-4")
		                    ->on_demand_h);
		assert_int_equal(c->ops->spot_price(c, "n1-standard-1", &p, &e),
		                 -ENOENT);
	}
	cnl_cloud_free(c);
}

/* A bearer refused (401) is asked for afresh, once: a second 401 with a
 * fresh token is AUTH, and no third token is asked for. */
static void test_renew(void **state)
{
	struct cnl_cloud *c = open_gcp();
	struct cnl_cloud_instance in[2];
	struct cnl_cloud_error e;
	const char *ids[] = {"cnlab-cin-01-0-0"};
	static const char *const expired =
	    "{\"error\":{\"code\":401,\"message\":\"Request had invalid "
	    "authentication credentials.\",\"errors\":[{\"reason\":"
	    "\"authError\"}],\"status\":\"UNAUTHENTICATED\"}}";
	size_t n = 0;

	(void)state;
	script(200, TOKEN_OK);
	script(401, expired);
	script(200, TOKEN_OK);
	script(200, INSTANCE_SPOT_RUNNING);
	assert_int_equal(c->ops->describe(c, ids, 1, in, 2, &n, &e), 0);
	assert_int_equal(n, 1);
	assert_int_equal(fk.grants, 2);
	script(401, expired);
	script(200, TOKEN_OK);
	script(401, expired);
	assert_int_equal(c->ops->describe(c, ids, 1, in, 2, &n, &e), -EACCES);
	assert_int_equal(e.kind, CNL_CLOUD_AUTH);
	assert_int_equal(fk.grants, 3);
	assert_int_equal(fk.next, fk.nscript);
	cnl_cloud_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_assertion),
	    cmocka_unit_test(test_config),
	    cmocka_unit_test_setup_teardown(test_provision, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_all_or_none, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_describe, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_renew, setup, teardown),
	};
	EVP_PKEY *k = EVP_RSA_gen(2048);
	BIO *b = BIO_new(BIO_s_mem()), *pb = BIO_new(BIO_s_mem());
	char *p;
	long n;
	int r;

	PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL);
	n = BIO_get_mem_data(b, &p);
	key_pem = strndup(p, (size_t)n);
	PEM_write_bio_PUBKEY(pb, k);
	n = BIO_get_mem_data(pb, &p);
	pub_pem = strndup(p, (size_t)n);
	BIO_free(b);
	BIO_free(pb);
	EVP_PKEY_free(k);
	r = cmocka_run_group_tests(tests, NULL, NULL);
	free(key_pem);
	free(pub_pem);
	return r;
}
