/*
 * test_cloud_aws.c - the EC2 provider (server/cloud.h, cloud_aws.c)
 * against a loopback EC2: a thread that reads each HTTP request, checks
 * its SigV4 signature by signing what it received with the account's
 * secret (a request not signed as sent gets EC2's 403
 * SignatureDoesNotMatch), records its form, and answers either the
 * test's script (recorded EC2 documents and errors:
 * InsufficientInstanceCapacity, RequestLimitExceeded, Unavailable,
 * AuthFailure, a spot interruption, an answer lost on the way) or, with
 * the script empty, a small model of EC2: instances launched per client
 * token (the same token launches once), described and terminated.
 *
 * And the account's side, through a real cnlabd on loopback: credentials
 * given to POST /v1/cloud/accounts are sealed with the secrets key (in
 * no reply, not in the database file as text or base64), refused without
 * a key or when malformed, a sealed value moved onto another account's
 * row does not open, and cnl_api_cloud_open() gives a provider that signs
 * with them (the loopback EC2 accepts its calls).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
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

#include "client.h"
#include "cnlab/errors.h"
#include "common/base64.h"
#include "net/sigv4.h"
#include "server/api.h"
#include "server/cloud.h"
#include "store/store.h"

#define AKID   "AKIAIOSFODNN7EXAMPLE"
#define SECRET "cnlabTestSecretKey/abc+def0123456789EXAMPLE"
#define TOKEN  "IQoJb3JpZ2luX2VjEXAMPLE//session+token="

struct step {
	int status;       /* 0: drop the connection unanswered */
	const char *body; /* the answer */
};

struct fake {
	int lfd, port;
	int cur; /* the connection being served, -1: none */
	pthread_t th;
	pthread_mutex_t mu;
	bool stop;
	const char *session_token; /* the one a request must carry */
	struct step script[16];
	int nscript, next;
	/* What came. */
	char *forms[64];
	int nforms, bad_sigs, with_token;
	/* The model: launches by client token. */
	char tokens[16][80];
	int first_id[16], count[16], ntokens, launches, next_id;
	char state[64][16]; /* by instance number */
};

static struct fake fk;

/* The value of @name in the form @f, decoded, into @out; false if none. */
static bool form_get(const char *f, const char *name, char *out, size_t n)
{
	size_t nl = strlen(name);

	for (const char *p = f; p && *p;) {
		const char *amp = strchr(p, '&');

		if (strncmp(p, name, nl) == 0 && p[nl] == '=') {
			const char *v = p + nl + 1,
			           *e = amp ? amp : v + strlen(v);
			size_t o = 0;

			for (; v < e && o + 1 < n; v++) {
				if (*v == '%' && e - v >= 3) {
					char hx[3] = {v[1], v[2], 0};

					out[o++] = (char)strtol(hx, NULL, 16);
					v += 2;
				} else {
					out[o++] = *v;
				}
			}
			out[o] = '\0';
			return true;
		}
		p = amp ? amp + 1 : NULL;
	}
	return false;
}

static void answer(int fd, int status, const char *body)
{
	char head[256];
	int n = snprintf(head, sizeof(head),
	                 "HTTP/1.1 %d X\r\nContent-Type: text/xml;charset=UTF-8"
	                 "\r\nContent-Length: %zu\r\n\r\n",
	                 status, strlen(body));

	assert_int_equal(write(fd, head, (size_t)n), n);
	assert_int_equal(write(fd, body, strlen(body)), (ssize_t)strlen(body));
}

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

/* The model's answer to @form into @buf: status. */
static int model(const char *form, char *buf, size_t n)
{
	char action[64] = "", tok[80] = "", v[64], id[32];
	size_t o = 0;

	form_get(form, "Action", action, sizeof(action));
	if (strcmp(action, "RunInstances") == 0) {
		int t, cnt;

		form_get(form, "ClientToken", tok, sizeof(tok));
		form_get(form, "MinCount", v, sizeof(v));
		cnt = (int)strtol(v, NULL, 10);
		for (t = 0; t < fk.ntokens; t++)
			if (strcmp(fk.tokens[t], tok) == 0)
				break;
		if (t == fk.ntokens) {
			snprintf(fk.tokens[t], sizeof(fk.tokens[t]), "%s", tok);
			fk.first_id[t] = fk.next_id;
			fk.count[t] = cnt;
			fk.next_id += cnt;
			fk.ntokens++;
			fk.launches++;
			for (int i = 0; i < cnt; i++)
				snprintf(fk.state[fk.first_id[t] + i], 16,
				         "pending");
		}
		form_get(form, "InstanceType", v, sizeof(v));
		o += (size_t)snprintf(
		    buf + o, n - o,
		    "<RunInstancesResponse xmlns=\"http://ec2."
		    "amazonaws.com/doc/2016-11-15/\"><requestId>"
		    "r1</requestId><reservationId>r-1</"
		    "reservationId><instancesSet>");
		for (int i = 0; i < fk.count[t]; i++)
			o += (size_t)snprintf(
			    buf + o, n - o,
			    "<item><instanceId>i-%04d</"
			    "instanceId><instanceType>"
			    "%s</instanceType><instanceState><code>0</"
			    "code><name>"
			    "pending</name></instanceState><placement><"
			    "availabilityZone>us-east-1a</availabilityZone></"
			    "placement><privateIpAddress>10.0.0.%d</"
			    "privateIpAddress></item>",
			    fk.first_id[t] + i, v, 10 + fk.first_id[t] + i);
		snprintf(buf + o, n - o,
		         "</instancesSet></RunInstancesResponse>");
		return 200;
	}
	if (strcmp(action, "TerminateInstances") == 0) {
		int k;

		form_get(form, "InstanceId.1", id, sizeof(id));
		k = (int)strtol(id + 2, NULL, 10);
		if (strncmp(id, "i-", 2) || k >= fk.next_id) {
			snprintf(
			    buf, n,
			    "<Response><Errors><Error><Code>InvalidInstanceID"
			    ".NotFound</Code><Message>The instance ID '%s' "
			    "does not exist</Message></Error></Errors>"
			    "<RequestID>x</RequestID></Response>",
			    id);
			return 400;
		}
		snprintf(fk.state[k], 16, "shutting-down");
		snprintf(
		    buf, n,
		    "<TerminateInstancesResponse><requestId>t</requestId>"
		    "<instancesSet><item><instanceId>%s</instanceId>"
		    "<currentState><code>32</code><name>shutting-down</name>"
		    "</currentState></item></instancesSet>"
		    "</TerminateInstancesResponse>",
		    id);
		return 200;
	}
	if (strcmp(action, "DescribeInstances") == 0) {
		o += (size_t)snprintf(buf + o, n - o,
		                      "<DescribeInstancesResponse><requestId>d"
		                      "</requestId><reservationSet><item>"
		                      "<instancesSet>");
		for (int i = 1; i < 64; i++) {
			char key[32];
			int k;

			snprintf(key, sizeof(key), "InstanceId.%d", i);
			if (!form_get(form, key, id, sizeof(id)))
				break;
			k = (int)strtol(id + 2, NULL, 10);
			o += (size_t)snprintf(
			    buf + o, n - o,
			    "<item><instanceId>%s</instanceId><instanceState>"
			    "<name>%s</name></instanceState></item>",
			    id, fk.state[k]);
		}
		snprintf(buf + o, n - o,
		         "</instancesSet></item></reservationSet>"
		         "</DescribeInstancesResponse>");
		return 200;
	}
	snprintf(buf, n,
	         "<Response><Errors><Error><Code>InvalidAction</Code>"
	         "<Message>no</Message></Error></Errors></Response>");
	return 400;
}

/* One request on @fd: false when the connection is to end. */
static bool serve_one(int fd)
{
	char buf[65536], hv[1024], date[64] = "", authz[1024] = "",
	                           host[256] = "", ctype[256] = "",
	                           tok[512] = "", *body, *sep, out[16384];
	size_t got = 0, blen;
	struct cnl_sigv4 sig;
	char err[256];
	int status;
	bool drop = false;

	for (;;) {
		ssize_t r = read(fd, buf + got, sizeof(buf) - 1 - got);

		if (r <= 0)
			return false;
		got += (size_t)r;
		buf[got] = '\0';
		if ((sep = strstr(buf, "\r\n\r\n"))) {
			size_t hl = (size_t)(sep + 4 - buf);

			/* The head ends after its last header's CRLF. */
			sep[2] = '\0';
			blen = header(buf, "Content-Length", hv, sizeof(hv))
			           ? (size_t)strtoul(hv, NULL, 10)
			           : 0;
			sep[2] = '\r';
			if (got >= hl + blen) {
				sep[2] = '\0';
				body = sep + 4;
				body[blen] = '\0';
				break;
			}
		}
	}
	header(buf, "X-Amz-Date", date, sizeof(date));
	header(buf, "Authorization", authz, sizeof(authz));
	header(buf, "Host", host, sizeof(host));
	header(buf, "Content-Type", ctype, sizeof(ctype));
	{
		bool has_tok = header(buf, "X-Amz-Security-Token", tok,
		                      sizeof(tok)) != NULL;
		struct cnl_sigv4_header h[4] = {{"Host", host},
		                                {"X-Amz-Date", date},
		                                {"Content-Type", ctype},
		                                {"X-Amz-Security-Token", tok}};
		struct cnl_sigv4_request req = {
		    .method = "POST",
		    .path = "/",
		    .headers = h,
		    .nheaders = has_tok ? 4 : 3,
		    .body = body,
		    .body_len = blen,
		};
		struct cnl_sigv4_credentials cred = {AKID, SECRET, "us-east-1",
		                                     "ec2"};
		bool ok =
		    strncmp(buf, "POST / HTTP/1.1", 15) == 0 &&
		    cnl_sigv4_sign(&req, &cred, &sig, err, sizeof(err)) == 0 &&
		    strcmp(sig.authorization, authz) == 0;

		if (sig.authorization)
			cnl_sigv4_done(&sig);
		pthread_mutex_lock(&fk.mu);
		if (has_tok &&
		    strcmp(tok, fk.session_token ? fk.session_token : "") == 0)
			fk.with_token++;
		if (!ok || (fk.session_token && !has_tok)) {
			fk.bad_sigs++;
			pthread_mutex_unlock(&fk.mu);
			answer(
			    fd, 403,
			    "<Response><Errors><Error><Code>"
			    "SignatureDoesNotMatch</Code><Message>no</Message>"
			    "</Error></Errors></Response>");
			return true;
		}
	}
	if (fk.nforms < 64)
		fk.forms[fk.nforms++] = strdup(body);
	if (fk.next < fk.nscript) {
		struct step s = fk.script[fk.next++];

		if (s.status == 0) {
			/* The call happens; its answer is lost. */
			model(body, out, sizeof(out));
			drop = true;
		} else {
			status = s.status;
			snprintf(out, sizeof(out), "%s", s.body);
		}
	} else {
		status = model(body, out, sizeof(out));
	}
	pthread_mutex_unlock(&fk.mu);
	if (drop)
		return false;
	answer(fd, status, out);
	return true;
}

static void *fake_main(void *arg)
{
	(void)arg;
	for (;;) {
		int fd = accept(fk.lfd, NULL, NULL);

		if (fd < 0)
			break;
		pthread_mutex_lock(&fk.mu);
		if (fk.stop) {
			pthread_mutex_unlock(&fk.mu);
			close(fd);
			break;
		}
		fk.cur = fd;
		pthread_mutex_unlock(&fk.mu);
		while (serve_one(fd))
			;
		pthread_mutex_lock(&fk.mu);
		fk.cur = -1;
		pthread_mutex_unlock(&fk.mu);
		close(fd);
	}
	return NULL;
}

static int setup(void **state)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);

	(void)state;
	memset(&fk, 0, sizeof(fk));
	fk.cur = -1;
	pthread_mutex_init(&fk.mu, NULL);
	fk.lfd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fk.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fk.lfd, 16), 0);
	getsockname(fk.lfd, (struct sockaddr *)&sa, &sl);
	fk.port = ntohs(sa.sin_port);
	pthread_create(&fk.th, NULL, fake_main, NULL);
	return 0;
}

static int teardown(void **state)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	(void)state;
	pthread_mutex_lock(&fk.mu);
	fk.stop = true;
	/* A test that failed left its client's connection open. */
	if (fk.cur >= 0)
		shutdown(fk.cur, SHUT_RDWR);
	pthread_mutex_unlock(&fk.mu);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)fk.port);
	connect(fd, (struct sockaddr *)&sa, sizeof(sa)); /* wakes accept */
	close(fd);
	pthread_join(fk.th, NULL);
	close(fk.lfd);
	for (int i = 0; i < fk.nforms; i++)
		free(fk.forms[i]);
	pthread_mutex_destroy(&fk.mu);
	return 0;
}

static struct cnl_cloud *provider(const char *token)
{
	char ep[64], err[256] = "";
	struct cnl_cloud *c = NULL;
	struct cnl_cloud_aws_config cfg = {
	    .region = "us-east-1",
	    .endpoint = ep,
	    .access_key = AKID,
	    .secret_key = SECRET,
	    .session_token = token,
	    .max_attempts = 4,
	    .backoff_ms = 1,
	    .timeout_ms = 5000,
	};

	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", fk.port);
	if (cnl_cloud_aws_new(&cfg, &c, err, sizeof(err)) != 0)
		fail_msg("provider: %s", err);
	return c;
}

static const struct cnl_cloud_tag tags[] = {
    {"cnlab:cluster", "cloud-us-east"},
    {"cnlab:burst", "burst 1 & co"},
};

static struct cnl_cloud_launch launch(enum cnl_cloud_market m,
                                      const char *token)
{
	return (struct cnl_cloud_launch){
	    .instance_type = "p5.48xlarge",
	    .market = m,
	    .count = 2,
	    .image = "ami-0123456789abcdef0",
	    .user_data = "#!/bin/sh\nCNLAB_AGENT_TOKEN=cnj_x cnlab-agent\n",
	    .tags = tags,
	    .ntags = 2,
	    .client_token = token,
	};
}

static void test_provision(void **state)
{
	struct cnl_cloud *c = provider(NULL);
	struct cnl_cloud_launch l = launch(CNL_CLOUD_ON_DEMAND, "burst-1-a");
	struct cnl_cloud_instance in[4];
	struct cnl_cloud_error e;
	size_t n = 0;
	char v[256];
	size_t udn;
	uint8_t *udp = NULL;

	(void)state;
	assert_int_equal(c->ops->provision(c, &l, in, 4, &n, &e), 0);
	assert_int_equal(n, 2);
	assert_int_equal(e.kind, CNL_CLOUD_OK);
	assert_int_equal(e.attempts, 1);
	assert_string_equal(in[0].id, "i-0000");
	assert_string_equal(in[1].id, "i-0001");
	assert_string_equal(in[0].state, "pending");
	assert_string_equal(in[0].type, "p5.48xlarge");
	assert_string_equal(in[1].private_ip, "10.0.0.11");
	assert_false(in[0].spot);
	assert_int_equal(fk.bad_sigs, 0);
	/* What EC2 was asked. */
	assert_int_equal(fk.nforms, 1);
	assert_true(form_get(fk.forms[0], "Version", v, sizeof(v)));
	assert_string_equal(v, "2016-11-15");
	assert_true(form_get(fk.forms[0], "MinCount", v, sizeof(v)));
	assert_string_equal(v, "2");
	assert_true(form_get(fk.forms[0], "MaxCount", v, sizeof(v)));
	assert_string_equal(v, "2");
	assert_true(form_get(fk.forms[0], "ClientToken", v, sizeof(v)));
	assert_string_equal(v, "burst-1-a");
	assert_true(form_get(fk.forms[0], "TagSpecification.1.Tag.2.Value", v,
	                     sizeof(v)));
	assert_string_equal(v, "burst 1 & co");
	assert_false(form_get(fk.forms[0], "InstanceMarketOptions.MarketType",
	                      v, sizeof(v)));
	assert_true(form_get(fk.forms[0], "UserData", v, sizeof(v)));
	assert_int_equal(cnl_b64_decode_new(v, CNL_B64_PAD, 1024, &udp, &udn),
	                 0);
	assert_string_equal((char *)udp, l.user_data);
	free(udp);

	/* Spot: the market options go, and the instances say so. */
	l = launch(CNL_CLOUD_SPOT, "burst-1-b");
	assert_int_equal(c->ops->provision(c, &l, in, 4, &n, &e), 0);
	assert_true(form_get(fk.forms[1], "InstanceMarketOptions.MarketType", v,
	                     sizeof(v)));
	assert_string_equal(v, "spot");
	assert_true(form_get(fk.forms[1],
	                     "InstanceMarketOptions.SpotOptions."
	                     "InstanceInterruptionBehavior",
	                     v, sizeof(v)));
	assert_string_equal(v, "terminate");
	assert_int_equal(fk.launches, 2);
	cnl_cloud_free(c);
}

static void test_capacity_and_auth(void **state)
{
	struct cnl_cloud *c = provider(NULL);
	struct cnl_cloud_launch l = launch(CNL_CLOUD_SPOT, "burst-2");
	struct cnl_cloud_instance in[4];
	struct cnl_cloud_error e;
	size_t n = 9;

	(void)state;
	/* EC2 answers InsufficientInstanceCapacity with a 500: not an
	 * outage to retry, but "try another type or market". */
	fk.script[fk.nscript++] = (struct step){
	    500, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response>"
	         "<Errors><Error><Code>InsufficientInstanceCapacity</Code>"
	         "<Message>We currently do not have sufficient p5.48xlarge "
	         "capacity in the Availability Zone you requested "
	         "(us-east-1a).</Message></Error></Errors><RequestID>"
	         "5a2d7f2e-8c3b-4b7e-9a51-1f8c0d2a9e11</RequestID>"
	         "</Response>"};
	assert_int_equal(c->ops->provision(c, &l, in, 4, &n, &e), -EAGAIN);
	assert_int_equal(n, 0);
	assert_int_equal(e.kind, CNL_CLOUD_CAPACITY);
	assert_string_equal(e.code, "InsufficientInstanceCapacity");
	assert_non_null(strstr(e.message, "p5.48xlarge capacity"));
	assert_int_equal(e.attempts, 1);
	assert_int_equal(e.http_status, 500);
	assert_int_equal(fk.launches, 0);

	fk.script[fk.nscript++] = (struct step){
	    401, "<Response><Errors><Error><Code>AuthFailure</Code><Message>"
	         "AWS was not able to validate the provided access "
	         "credentials</Message></Error></Errors></Response>"};
	assert_int_equal(c->ops->provision(c, &l, in, 4, &n, &e), -EACCES);
	assert_int_equal(e.kind, CNL_CLOUD_AUTH);
	assert_int_equal(e.attempts, 1);
	assert_null(strstr(e.message, SECRET));
	assert_string_equal(cnl_cloud_fail_name(e.kind), "auth");

	/* A bad request is refused before anything is sent. */
	l.count = 0;
	assert_int_equal(c->ops->provision(c, &l, in, 4, &n, &e), -EINVAL);
	l = launch(CNL_CLOUD_SPOT, NULL);
	assert_int_equal(c->ops->provision(c, &l, in, 4, &n, &e), -EINVAL);
	assert_int_equal(fk.nforms, 2);
	assert_int_equal(fk.bad_sigs, 0);
	cnl_cloud_free(c);
}

/* The price list's spot side: DescribeSpotPriceHistory from now, the
 * dearest zone's price of the type asked for (other types and bad
 * numbers ignored); a type without one is a protocol answer, not 0. */
static void test_spot_price(void **state)
{
	struct cnl_cloud *c = provider(NULL);
	struct cnl_cloud_error e;
	char v[64];
	double p = -1;

	(void)state;
	fk.script[fk.nscript++] = (struct step){
	    200, "<DescribeSpotPriceHistoryResponse><requestId>s</requestId>"
	         "<spotPriceHistorySet>"
	         "<item><instanceType>p5.48xlarge</instanceType>"
	         "<productDescription>Linux/UNIX</productDescription>"
	         "<spotPrice>31.450000</spotPrice><availabilityZone>us-east-1a"
	         "</availabilityZone></item>"
	         "<item><instanceType>p5.48xlarge</instanceType>"
	         "<spotPrice>29.870000</spotPrice><availabilityZone>us-east-1b"
	         "</availabilityZone></item>"
	         "<item><instanceType>g6.xlarge</instanceType>"
	         "<spotPrice>0.3100</spotPrice></item>"
	         "<item><instanceType>p5.48xlarge</instanceType>"
	         "<spotPrice>cheap</spotPrice></item>"
	         "</spotPriceHistorySet><nextToken/>"
	         "</DescribeSpotPriceHistoryResponse>"};
	assert_int_equal(c->ops->spot_price(c, "p5.48xlarge", &p, &e), 0);
	assert_true(p > 31.44 && p < 31.46); /* the dearest zone's */
	assert_true(form_get(fk.forms[fk.nforms - 1], "Action", v, sizeof(v)));
	assert_string_equal(v, "DescribeSpotPriceHistory");
	assert_true(
	    form_get(fk.forms[fk.nforms - 1], "InstanceType.1", v, sizeof(v)));
	assert_string_equal(v, "p5.48xlarge");
	assert_true(form_get(fk.forms[fk.nforms - 1], "ProductDescription.1", v,
	                     sizeof(v)));
	assert_string_equal(v, "Linux/UNIX");
	assert_true(
	    form_get(fk.forms[fk.nforms - 1], "StartTime", v, sizeof(v)));
	assert_int_equal(strlen(v), 20); /* 2026-12-07T12:00:00Z */
	fk.script[fk.nscript++] = (struct step){
	    200, "<DescribeSpotPriceHistoryResponse><spotPriceHistorySet/>"
	         "</DescribeSpotPriceHistoryResponse>"};
	assert_int_equal(c->ops->spot_price(c, "p5.48xlarge", &p, &e), -EPROTO);
	assert_true(p == 0);
	assert_int_equal(fk.bad_sigs, 0);
	/* The on-demand side: the published list. */
	assert_non_null(cnl_cloud_type_find("aws", "p5.48xlarge"));
	assert_string_equal(cnl_cloud_type_find("aws", "p5.48xlarge")->model,
	                    "H100-80GB-SXM");
	assert_int_equal(cnl_cloud_type_find("aws", "p5.48xlarge")->gpus, 8);
	assert_null(cnl_cloud_type_find("aws", "m5.large"));
	assert_null(cnl_cloud_type_find("gcp", "p5.48xlarge"));
	cnl_cloud_free(c);
}

static const char *const throttle =
    "<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>"
    "Request limit exceeded.</Message></Error></Errors></Response>";
static const char *const unavailable =
    "<Response><Errors><Error><Code>Unavailable</Code><Message>The server "
    "is overloaded and can't handle the request.</Message></Error>"
    "</Errors></Response>";

static void test_retries(void **state)
{
	struct cnl_cloud *c = provider(NULL);
	struct cnl_cloud_launch l = launch(CNL_CLOUD_ON_DEMAND, "burst-3");
	struct cnl_cloud_instance in[4];
	struct cnl_cloud_error e;
	size_t n = 0;
	char v[128];

	(void)state;
	/* Throttled twice, then through: one launch, three signed tries
	 * with the same client token. */
	fk.script[fk.nscript++] = (struct step){503, throttle};
	fk.script[fk.nscript++] = (struct step){503, throttle};
	assert_int_equal(c->ops->provision(c, &l, in, 4, &n, &e), 0);
	assert_int_equal(e.attempts, 3);
	assert_int_equal(n, 2);
	assert_int_equal(fk.nforms, 3);
	for (int i = 0; i < 3; i++) {
		assert_true(form_get(fk.forms[i], "ClientToken", v, sizeof(v)));
		assert_string_equal(v, "burst-3");
	}
	assert_int_equal(fk.launches, 1);

	/* The launch happens but its answer is lost: the retry (the HTTP
	 * client's own, on a kept-alive connection that closed, or ours)
	 * carries the same token, and EC2 gives the same instances back. */
	l = launch(CNL_CLOUD_ON_DEMAND, "burst-4");
	fk.script[fk.nscript++] = (struct step){0, NULL};
	assert_int_equal(c->ops->provision(c, &l, in, 4, &n, &e), 0);
	assert_int_equal(fk.nforms, 5);
	for (int i = 3; i < 5; i++) {
		assert_true(form_get(fk.forms[i], "ClientToken", v, sizeof(v)));
		assert_string_equal(v, "burst-4");
	}
	assert_int_equal(fk.launches, 2);
	assert_string_equal(in[0].id, "i-0002");
	assert_string_equal(in[1].id, "i-0003");

	/* An outage that lasts: every try answered 503 Unavailable. */
	for (int i = 0; i < 4; i++)
		fk.script[fk.nscript++] = (struct step){503, unavailable};
	l = launch(CNL_CLOUD_ON_DEMAND, "burst-5");
	assert_int_equal(c->ops->provision(c, &l, in, 4, &n, &e), -EIO);
	assert_int_equal(e.kind, CNL_CLOUD_UNAVAILABLE);
	assert_int_equal(e.attempts, 4);
	assert_string_equal(e.code, "Unavailable");
	/* Throttled past the retries. */
	for (int i = 0; i < 4; i++)
		fk.script[fk.nscript++] = (struct step){503, throttle};
	assert_int_equal(c->ops->provision(c, &l, in, 4, &n, &e), -EAGAIN);
	assert_int_equal(e.kind, CNL_CLOUD_THROTTLED);
	/* Not XML at all from a 200: unreadable, not retried. */
	fk.script[fk.nscript++] = (struct step){200, "{\"json\":true}"};
	assert_int_equal(c->ops->provision(c, &l, in, 4, &n, &e), -EPROTO);
	assert_int_equal(e.kind, CNL_CLOUD_PROTOCOL);
	assert_int_equal(e.attempts, 1);
	/* A 200 that does not list what was launched. */
	fk.script[fk.nscript++] =
	    (struct step){200, "<RunInstancesResponse><instancesSet>"
	                       "</instancesSet></RunInstancesResponse>"};
	assert_int_equal(c->ops->provision(c, &l, in, 4, &n, &e), -EPROTO);
	assert_int_equal(fk.bad_sigs, 0);
	cnl_cloud_free(c);
}

static void test_unreachable(void **state)
{
	struct cnl_cloud_aws_config cfg = {
	    .region = "us-east-1",
	    .endpoint = "http://127.0.0.1:1",
	    .access_key = AKID,
	    .secret_key = SECRET,
	    .max_attempts = 2,
	    .backoff_ms = 1,
	};
	struct cnl_cloud *c = NULL;
	struct cnl_cloud_instance in[2];
	struct cnl_cloud_error e;
	const char *ids[] = {"i-1"};
	size_t n;
	char err[256];

	(void)state;
	assert_int_equal(cnl_cloud_aws_new(&cfg, &c, err, sizeof(err)), 0);
	assert_int_equal(c->ops->describe(c, ids, 1, in, 2, &n, &e), -EIO);
	assert_int_equal(e.kind, CNL_CLOUD_UNAVAILABLE);
	assert_int_equal(e.attempts, 2);
	assert_int_equal(e.http_status, 0);
	cnl_cloud_free(c);
	/* Configuration refused, naming the field. */
	cfg.endpoint = "ftp://x";
	assert_int_equal(cnl_cloud_aws_new(&cfg, &c, err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "endpoint"));
	cfg.endpoint = "https://x/path";
	assert_int_equal(cnl_cloud_aws_new(&cfg, &c, err, sizeof(err)),
	                 -EINVAL);
	cfg.endpoint = NULL;
	cfg.secret_key = "";
	assert_int_equal(cnl_cloud_aws_new(&cfg, &c, err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "secret key"));
	cfg.secret_key = SECRET;
	cfg.region = "";
	assert_int_equal(cnl_cloud_aws_new(&cfg, &c, err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "region"));
}

static void test_describe_terminate(void **state)
{
	struct cnl_cloud *c = provider(TOKEN);
	struct cnl_cloud_launch l = launch(CNL_CLOUD_SPOT, "burst-6");
	struct cnl_cloud_instance in[4];
	struct cnl_cloud_error e;
	const char *ids[2];
	size_t n = 0;

	(void)state;
	fk.session_token = TOKEN;
	assert_int_equal(c->ops->provision(c, &l, in, 4, &n, &e), 0);
	ids[0] = in[0].id;
	ids[1] = in[1].id;
	assert_int_equal(c->ops->describe(c, ids, 2, in, 4, &n, &e), 0);
	assert_int_equal(n, 2);
	assert_string_equal(in[0].state, "pending");
	assert_int_equal(c->ops->terminate(c, ids, 1, &e), 0);
	assert_int_equal(c->ops->describe(c, ids, 2, in, 4, &n, &e), 0);
	assert_string_equal(in[0].state, "shutting-down");
	assert_string_equal(in[1].state, "pending");
	/* Terminating what EC2 no longer knows is done, not an error; an
	 * id it calls malformed is an error (the instance meant may run). */
	ids[0] = "i-9999";
	assert_int_equal(c->ops->terminate(c, ids, 1, &e), 0);
	fk.script[fk.nscript++] = (struct step){
	    400, "<Response><Errors><Error><Code>InvalidInstanceID.Malformed"
	         "</Code><Message>Invalid id: \"x\"</Message></Error>"
	         "</Errors></Response>"};
	ids[0] = "x";
	assert_int_equal(c->ops->terminate(c, ids, 1, &e), -EINVAL);
	assert_string_equal(e.code, "InvalidInstanceID.Malformed");
	ids[0] = "i-9999";
	assert_int_equal(c->ops->terminate(c, ids, 0, &e), -EINVAL);
	/* Every call carried the session token, signed. */
	assert_int_equal(fk.bad_sigs, 0);
	assert_int_equal(fk.with_token, fk.nforms);

	/* A spot interruption, as EC2 describes it. */
	fk.script[fk.nscript++] = (struct step){
	    200, "<DescribeInstancesResponse xmlns=\"http://ec2.amazonaws.com/"
	         "doc/2016-11-15/\"><requestId>x</requestId><reservationSet>"
	         "<item><reservationId>r-1</reservationId><instancesSet><item>"
	         "<instanceId>i-0000</instanceId><instanceType>p5.48xlarge"
	         "</instanceType><instanceState><code>48</code><name>"
	         "terminated</name></instanceState><stateReason><code>"
	         "Server.SpotInstanceTermination</code><message>Server.Spot"
	         "InstanceTermination: Spot instance termination</message>"
	         "</stateReason><instanceLifecycle>spot</instanceLifecycle>"
	         "</item></instancesSet></item></reservationSet>"
	         "</DescribeInstancesResponse>"};
	assert_int_equal(c->ops->describe(c, ids, 1, in, 4, &n, &e), 0);
	assert_int_equal(n, 1);
	assert_true(in[0].spot);
	assert_true(in[0].interrupted);
	assert_string_equal(in[0].state, "terminated");
	assert_string_equal(in[0].reason, "Server.SpotInstanceTermination");
	cnl_cloud_free(c);

	/* The loopback EC2 refuses what is not signed with the secret: a
	 * provider with the wrong one gets 403 and says "auth". */
	{
		char ep[64], err[256];
		struct cnl_cloud_aws_config cfg = {
		    .region = "us-east-1",
		    .endpoint = ep,
		    .access_key = AKID,
		    .secret_key = "not-the-secret",
		    .session_token = TOKEN,
		    .backoff_ms = 1,
		};

		snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", fk.port);
		assert_int_equal(cnl_cloud_aws_new(&cfg, &c, err, sizeof(err)),
		                 0);
		assert_int_equal(c->ops->terminate(c, ids, 1, &e), -EACCES);
		assert_string_equal(e.code, "SignatureDoesNotMatch");
		assert_int_equal(fk.bad_sigs, 1);
		cnl_cloud_free(c);
	}
}

#define JWT_SECRET "test-cloud-jwt-secret-0123456789abcdef0123"

static bool file_has(const char *path, const char *needle)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	size_t n;
	bool found = false;

	if (!f)
		return false;
	buf = malloc(1 << 24);
	assert_non_null(buf);
	n = fread(buf, 1, (1 << 24) - 1, f);
	fclose(f);
	buf[n] = '\0';
	for (size_t i = 0; i + strlen(needle) <= n && !found; i++)
		found = memcmp(buf + i, needle, strlen(needle)) == 0;
	free(buf);
	return found;
}

static void test_account_credentials(void **state)
{
	static const uint8_t key[32] = "0123456789abcdef0123456789abcdef";
	struct tc_server srv;
	struct reply r;
	char body[1024], tok[1024], id[64], id2[64], err[256], path[256];
	struct cnl_cloud *c = NULL;
	struct cnl_cloud_launch l = launch(CNL_CLOUD_ON_DEMAND, "acct-1");
	struct cnl_cloud_instance in[4];
	struct cnl_cloud_error e;
	struct cnl_store_doc d = {0};
	char *b64;
	size_t n;

	(void)state;
	fk.session_token = NULL;
	tc_server_open(&srv, "cnl-cloud");
	tc_server_start(&srv,
	                &(struct cnl_api_config){
	                    .jwt_key = (const uint8_t *)JWT_SECRET,
	                    .jwt_key_len = strlen(JWT_SECRET),
	                    .secrets_key = key,
	                },
	                false);
	http("POST", "/v1/auth/login", NULL,
	     "{\"user\":\"root\",\"password\":\"pw-root\"}", &r);
	expect(&r, 200, "login");
	snprintf(tok, sizeof(tok), "%s", str(r.body, "token"));
	reply_done(&r);

	snprintf(
	    body, sizeof(body),
	    "{\"provider\":\"aws\",\"account\":\"123456789012\","
	    "\"region\":\"us-east-1\",\"instance_types\":[\"p5.48xlarge\"],"
	    "\"endpoint\":\"http://127.0.0.1:%d\",\"credentials\":"
	    "{\"access_key_id\":\"" AKID "\",\"secret_access_key\":\"" SECRET
	    "\"}}",
	    fk.port);
	http("POST", "/v1/cloud/accounts", tok, body, &r);
	expect(&r, 201, "add with credentials");
	assert_null(strstr(r.raw, SECRET));
	assert_null(strstr(r.raw, "sealed\":\""));
	assert_string_equal(
	    str(json_object_get(r.body, "credentials"), "access_key_id"), AKID);
	snprintf(id, sizeof(id), "%s", str(r.body, "id"));
	reply_done(&r);
	http("GET", "/v1/cloud/accounts", tok, NULL, &r);
	expect(&r, 200, "list");
	assert_null(strstr(r.raw, SECRET));
	assert_null(strstr(r.raw, "credentials_sealed"));
	assert_non_null(strstr(r.raw, AKID));
	reply_done(&r);
	/* Not in the database, as text or as base64 (where the key id,
	 * which is no secret, is found: the look does find things). */
	assert_true(file_has(srv.path, AKID) ||
	            (snprintf(path, sizeof(path), "%s-wal", srv.path) > 0 &&
	             file_has(path, AKID)));
	b64 = cnl_b64_encode_new(SECRET, strlen(SECRET), CNL_B64_PAD);
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s%s", srv.path, i ? "-wal" : "");
		assert_false(file_has(path, SECRET));
		assert_false(file_has(path, b64));
	}
	free(b64);

	/* The provider it opens signs with them: the loopback EC2 takes
	 * its launch. */
	if (cnl_api_cloud_open(srv.api, id, &c, err, sizeof(err)) != 0)
		fail_msg("open: %s", err);
	assert_int_equal(c->ops->provision(c, &l, in, 4, &n, &e), 0);
	assert_int_equal(n, 2);
	assert_int_equal(fk.bad_sigs, 0);
	cnl_cloud_free(c);

	/* The row rewritten by someone without the key (the endpoint
	 * pointed elsewhere): its credentials no longer open. */
	{
		json_t *a;

		assert_int_equal(cnl_store_doc_get(srv.store, "cloud", id, &d),
		                 0);
		a = json_loads(d.body, 0, NULL);
		json_object_set_new(a, "endpoint",
		                    json_string("https://attacker.example"));
		free(d.body);
		d.body = json_dumps(a, JSON_COMPACT);
		json_decref(a);
		assert_int_equal(cnl_store_doc_put(srv.store, &d, false), 0);
		cnl_store_doc_done(&d);
		assert_int_equal(
		    cnl_api_cloud_open(srv.api, id, &c, err, sizeof(err)),
		    -EACCES);
		assert_non_null(strstr(err, "endpoint changed"));
	}

	/* Malformed credentials: refused, naming the field. */
	http("POST", "/v1/cloud/accounts", tok,
	     "{\"provider\":\"aws\",\"account\":\"123456789012\","
	     "\"region\":\"us-east-1\",\"instance_types\":[\"g5.xlarge\"],"
	     "\"credentials\":{\"access_key_id\":\"akid lower\","
	     "\"secret_access_key\":\"x\"}}",
	     &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(r.raw, "credentials.access_key_id"));
	reply_done(&r);
	http("POST", "/v1/cloud/accounts", tok,
	     "{\"provider\":\"aws\",\"account\":\"123456789012\","
	     "\"region\":\"us-east-1\",\"instance_types\":[\"g5.xlarge\"],"
	     "\"credentials\":{\"access_key_id\":\"" AKID "\","
	     "\"secret_access_key\":\"two words\"}}",
	     &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(r.raw, "secret_access_key"));
	reply_done(&r);
	http("POST", "/v1/cloud/accounts", tok,
	     "{\"provider\":\"aws\",\"account\":\"123456789012\","
	     "\"region\":\"us-east-1\",\"instance_types\":[\"g5.xlarge\"],"
	     "\"endpoint\":\"http://attacker.example\"}",
	     &r);
	assert_error(&r, 400, "bad_request");
	assert_non_null(strstr(r.raw, "endpoint"));
	reply_done(&r);
	{
		static const char *const eps[] = {
		    "https://",         "https://h/path",
		    "https://h:99999",  "https://user@h",
		    "http://127.0.0.1", "http://127.0.0.1.x:1"};

		char eb[512];

		for (size_t i = 0; i < sizeof(eps) / sizeof(eps[0]); i++) {
			snprintf(eb, sizeof(eb),
			         "{\"provider\":\"aws\",\"account\":"
			         "\"123456789012\",\"region\":\"us-east-1\","
			         "\"instance_types\":[\"g5.xlarge\"],"
			         "\"endpoint\":\"%s\"}",
			         eps[i]);
			http("POST", "/v1/cloud/accounts", tok, eb, &r);
			if (r.status != 400)
				fail_msg("endpoint %s: %ld", eps[i], r.status);
			reply_done(&r);
		}
	}

	/* A second account without credentials: opening it says so; the
	 * first one's sealed credentials moved onto its row do not open
	 * (they are sealed to their own account). */
	http("POST", "/v1/cloud/accounts", tok,
	     "{\"provider\":\"aws\",\"account\":\"210987654321\","
	     "\"region\":\"us-east-1\",\"instance_types\":[\"g5.xlarge\"]}",
	     &r);
	expect(&r, 201, "add without credentials");
	snprintf(id2, sizeof(id2), "%s", str(r.body, "id"));
	reply_done(&r);
	assert_int_equal(cnl_api_cloud_open(srv.api, id2, &c, err, sizeof(err)),
	                 -CNL_ECONFIG);
	assert_non_null(strstr(err, "no credentials"));
	{
		json_t *a, *b;

		assert_int_equal(cnl_store_doc_get(srv.store, "cloud", id, &d),
		                 0);
		a = json_loads(d.body, 0, NULL);
		cnl_store_doc_done(&d);
		assert_int_equal(cnl_store_doc_get(srv.store, "cloud", id2, &d),
		                 0);
		b = json_loads(d.body, 0, NULL);
		json_object_set(b, "credentials_sealed",
		                json_object_get(a, "credentials_sealed"));
		json_object_set(b, "access_key_id",
		                json_object_get(a, "access_key_id"));
		free(d.body);
		d.body = json_dumps(b, JSON_COMPACT);
		assert_int_equal(cnl_store_doc_put(srv.store, &d, false), 0);
		free(d.body);
		d.body = NULL;
		cnl_store_doc_done(&d);
		json_decref(a);
		json_decref(b);
	}
	assert_int_equal(cnl_api_cloud_open(srv.api, id2, &c, err, sizeof(err)),
	                 -EACCES);
	assert_null(strstr(err, SECRET));
	assert_int_equal(
	    cnl_api_cloud_open(srv.api, "cld_none", &c, err, sizeof(err)),
	    -CNL_ENOTFOUND);
	tc_server_close(&srv);

	/* Without a secrets key: credentials are refused, naming the
	 * setting that turns them on; an account without them is fine. */
	tc_server_open(&srv, "cnl-cloud");
	tc_server_start(&srv,
	                &(struct cnl_api_config){
	                    .jwt_key = (const uint8_t *)JWT_SECRET,
	                    .jwt_key_len = strlen(JWT_SECRET),
	                },
	                false);
	http("POST", "/v1/auth/login", NULL,
	     "{\"user\":\"root\",\"password\":\"pw-root\"}", &r);
	snprintf(tok, sizeof(tok), "%s", str(r.body, "token"));
	reply_done(&r);
	http("POST", "/v1/cloud/accounts", tok, body, &r);
	assert_error(&r, 409, "secrets_off");
	assert_non_null(strstr(r.raw, "secrets_key_file"));
	reply_done(&r);
	http("GET", "/v1/cloud/accounts", tok, NULL, &r);
	expect(&r, 200, "list");
	assert_int_equal(json_array_size(json_object_get(r.body, "items")), 0);
	reply_done(&r);
	tc_server_close(&srv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_provision, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_capacity_and_auth, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_retries, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_spot_price, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unreachable, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_describe_terminate, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_account_credentials, setup,
	                                    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
