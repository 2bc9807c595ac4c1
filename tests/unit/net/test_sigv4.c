/*
 * test_sigv4.c - the SigV4 signer (net/sigv4.h) against AWS's published
 * test suite (tests/data/sigv4/: each case's canonical request, string to
 * sign and Authorization header), the signing-key example of AWS's
 * documentation, and the input it must refuse: a CR or LF in a header
 * value (a header smuggled into the request that is sent), a missing Host
 * or X-Amz-Date, a malformed date, a bad percent-escape, an empty or
 * "/"-holding credential field.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "net/sigv4.h"

static const struct cnl_sigv4_credentials suite_cred = {
    .access_key = "AKIDEXAMPLE",
    .secret_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    .region = "us-east-1",
    .service = "service",
};

/* Every case of the suite, by name: a file missing fails the test. */
static const char *const cases[] = {
    "get-header-key-duplicate",
    "get-header-value-multiline",
    "get-header-value-order",
    "get-header-value-trim",
    "get-relative-relative",
    "get-relative",
    "get-slash-dot-slash",
    "get-slash-pointless-dot",
    "get-slash",
    "get-slashes",
    "get-space",
    "get-unreserved",
    "get-utf8",
    "get-vanilla-empty-query-key",
    "get-vanilla-query-order-key-case",
    "get-vanilla-query-order-key",
    "get-vanilla-query-order-value",
    "get-vanilla-query-unreserved",
    "get-vanilla-query",
    "get-vanilla-utf8-query",
    "get-vanilla",
    "post-header-key-case",
    "post-header-key-sort",
    "post-header-value-case",
    "post-sts-header-after",
    "post-sts-header-before",
    "post-vanilla-empty-query-value",
    "post-vanilla-query",
    "post-vanilla",
    "post-x-www-form-urlencoded-parameters",
    "post-x-www-form-urlencoded",
};

static char *slurp(const char *name, const char *ext)
{
	const char *src = getenv("CNL_SOURCE_DIR");
	char path[1024];
	FILE *f;
	char *buf;
	long n;

	assert_non_null(src);
	snprintf(path, sizeof(path), "%s/tests/data/sigv4/%s.%s", src, name,
	         ext);
	f = fopen(path, "rb");
	if (!f)
		fail_msg("%s: cannot open", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* A .req file parsed in place: "METHOD TARGET HTTP/1.1", header lines
 * "Name:value" (a line that begins with a space continues the last
 * header: another value of it, as the suite means), a blank line, the
 * body. */
struct parsed {
	struct cnl_sigv4_request req;
	struct cnl_sigv4_header h[16];
	char *path, *query;
};

static void parse_req(char *text, struct parsed *p)
{
	char *line = text, *next, *sp;
	size_t n = 0;

	memset(p, 0, sizeof(*p));
	next = strchr(line, '\n');
	assert_non_null(next);
	*next = '\0';
	sp = strchr(line, ' ');
	assert_non_null(sp);
	*sp = '\0';
	p->req.method = line;
	p->path = sp + 1;
	sp = strrchr(p->path, ' '); /* " HTTP/1.1" */
	assert_non_null(sp);
	*sp = '\0';
	if ((p->query = strchr(p->path, '?')))
		*p->query++ = '\0';
	line = next + 1;
	while (*line) {
		next = strchr(line, '\n');
		if (next)
			*next = '\0';
		if (*line == '\0') { /* the blank line: the body follows */
			p->req.body = next ? next + 1 : "";
			p->req.body_len = strlen(p->req.body);
			break;
		}
		assert_true(n < 16);
		if (*line == ' ' || *line == '\t') {
			assert_true(n > 0);
			p->h[n].name = p->h[n - 1].name;
			p->h[n++].value = line;
		} else {
			char *colon = strchr(line, ':');

			assert_non_null(colon);
			*colon = '\0';
			p->h[n].name = line;
			p->h[n++].value = colon + 1;
		}
		if (!next)
			break;
		line = next + 1;
	}
	p->req.path = p->path;
	p->req.query = p->query;
	p->req.headers = p->h;
	p->req.nheaders = n;
}

static void test_suite(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *req = slurp(cases[i], "req");
		char *creq = slurp(cases[i], "creq");
		char *sts = slurp(cases[i], "sts");
		char *authz = slurp(cases[i], "authz");
		struct parsed p;
		struct cnl_sigv4 s;
		char err[256] = "";
		int r;

		parse_req(req, &p);
		r = cnl_sigv4_sign(&p.req, &suite_cred, &s, err, sizeof(err));
		if (r != 0)
			fail_msg("%s: refused: %s", cases[i], err);
		if (strcmp(s.canonical, creq) != 0)
			fail_msg("%s: canonical request\n%s\nwant\n%s",
			         cases[i], s.canonical, creq);
		if (strcmp(s.string_to_sign, sts) != 0)
			fail_msg("%s: string to sign\n%s\nwant\n%s", cases[i],
			         s.string_to_sign, sts);
		if (strcmp(s.authorization, authz) != 0)
			fail_msg("%s: authorization\n%s\nwant\n%s", cases[i],
			         s.authorization, authz);
		assert_int_equal(strlen(s.signature), 64);
		assert_non_null(strstr(authz, s.signature));
		cnl_sigv4_done(&s);
		cnl_sigv4_done(&s); /* twice: harmless */
		free(req);
		free(creq);
		free(sts);
		free(authz);
	}
}

static void hex(const unsigned char *d, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* The example of AWS's "derive a signing key" documentation. */
static void test_signing_key(void **state)
{
	unsigned char k[32];
	char h[65];

	(void)state;
	assert_int_equal(
	    cnl_sigv4_signing_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
	                          "20120215", "us-east-1", "iam", k),
	    0);
	hex(k, sizeof(k), h);
	assert_string_equal(h, "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a0"
	                       "00a1a9e090d414db404d");
	assert_int_equal(cnl_sigv4_signing_key("s", "2012021", "r", "x", k),
	                 -EINVAL);
	assert_int_equal(cnl_sigv4_signing_key("s", "2012o215", "r", "x", k),
	                 -EINVAL);
}

static void test_amz_date(void **state)
{
	char d[CNL_SIGV4_DATE_LEN];

	(void)state;
	assert_int_equal(cnl_sigv4_amz_date(1440938160, d), 0);
	assert_string_equal(d, "20150830T123600Z");
	assert_int_equal(cnl_sigv4_amz_date(0, d), 0);
	assert_string_equal(d, "19700101T000000Z");
	assert_int_equal(cnl_sigv4_amz_date(-1, d), -EINVAL);
	assert_int_equal(cnl_sigv4_amz_date(INT64_C(253402300800), d), -EINVAL);
}

static void test_escape(void **state)
{
	char *e;

	(void)state;
	e = cnl_sigv4_escape("a b/c=d&e~f+\xe1\x88\xb4");
	assert_string_equal(e, "a%20b%2Fc%3Dd%26e~f%2B%E1%88%B4");
	free(e);
}

/* A valid request, for the refusals below to break one field of. */
static struct cnl_sigv4_header good_h[] = {
    {"Host", "ec2.us-east-1.amazonaws.com"},
    {"X-Amz-Date", "20261201T000000Z"},
};

static struct cnl_sigv4_request good(void)
{
	return (struct cnl_sigv4_request){
	    .method = "POST",
	    .path = "/",
	    .query = "Action=DescribeInstances&Version=2016-11-15",
	    .headers = good_h,
	    .nheaders = 2,
	};
}

/* @req or @cred refused with @want, @err naming @field. */
static void refused(const struct cnl_sigv4_request *req,
                    const struct cnl_sigv4_credentials *cred, int want,
                    const char *field)
{
	struct cnl_sigv4 s;
	char err[256] = "";
	int r = cnl_sigv4_sign(req, cred, &s, err, sizeof(err));

	if (r != want)
		fail_msg("want %d naming %s, got %d (%s)", want, field, r, err);
	if (!strstr(err, field))
		fail_msg("error \"%s\" does not name %s", err, field);
	assert_null(s.canonical);
	assert_null(s.authorization);
	assert_null(strstr(err, suite_cred.secret_key));
}

static void test_refusals(void **state)
{
	struct cnl_sigv4_request r = good();
	struct cnl_sigv4_credentials c = suite_cred;
	struct cnl_sigv4_header h[3];
	struct cnl_sigv4 s;
	char err[256];

	(void)state;
	/* The good one signs. */
	assert_int_equal(cnl_sigv4_sign(&r, &c, &s, err, sizeof(err)), 0);
	cnl_sigv4_done(&s);

	/* A header smuggled in through a value. */
	memcpy(h, good_h, sizeof(good_h));
	h[2] = (struct cnl_sigv4_header){"X-Note", "a\r\nX-Amz-Target: evil"};
	r.headers = h;
	r.nheaders = 3;
	refused(&r, &c, -EINVAL, "X-Note");
	h[2].value = "a\nb";
	refused(&r, &c, -EINVAL, "X-Note");
	h[2] = (struct cnl_sigv4_header){"Bad Name", "v"};
	refused(&r, &c, -EINVAL, "header 2");
	h[2] = (struct cnl_sigv4_header){"X-Amz-Date", "20261201T000000Z"};
	refused(&r, &c, -EINVAL, "X-Amz-Date"); /* two dates */

	/* What must be there, and of its form. */
	r = good();
	r.headers = &good_h[1];
	r.nheaders = 1;
	refused(&r, &c, -EINVAL, "Host");
	r.headers = good_h;
	r.nheaders = 1;
	refused(&r, &c, -EINVAL, "X-Amz-Date");
	h[0] = good_h[0];
	h[1] = (struct cnl_sigv4_header){"x-amz-date", "2026-12-01T00:00:00Z"};
	r.headers = h;
	r.nheaders = 2;
	refused(&r, &c, -EINVAL, "X-Amz-Date");

	r = good();
	r.query = "Action=%zz";
	refused(&r, &c, -EINVAL, "query");
	r.query = "Action=%4";
	refused(&r, &c, -EINVAL, "query");
	r.query = "Action=a b";
	refused(&r, &c, -EINVAL, "query");
	r = good();
	r.path = "relative";
	refused(&r, &c, -EINVAL, "path");
	r = good();
	r.method = "PO ST";
	refused(&r, &c, -EINVAL, "method");

	r = good();
	c.region = "";
	refused(&r, &c, -EINVAL, "region");
	c = suite_cred;
	c.service = "ec2/../x";
	refused(&r, &c, -EINVAL, "service");
	c = suite_cred;
	c.access_key = NULL;
	refused(&r, &c, -EINVAL, "access key");
	c = suite_cred;
	c.secret_key = "";
	refused(&r, &c, -EINVAL, "secret key");
}

/* The signature covers what it says: each part changed changes it. */
static void test_covers(void **state)
{
	struct cnl_sigv4_request r = good();
	struct cnl_sigv4_credentials c = suite_cred;
	struct cnl_sigv4 a, b;
	char err[256];

	(void)state;
	assert_int_equal(cnl_sigv4_sign(&r, &c, &a, err, sizeof(err)), 0);
	r.body = "x";
	r.body_len = 1;
	assert_int_equal(cnl_sigv4_sign(&r, &c, &b, err, sizeof(err)), 0);
	assert_string_not_equal(a.signature, b.signature);
	cnl_sigv4_done(&b);
	r = good();
	r.query = "Action=TerminateInstances&Version=2016-11-15";
	assert_int_equal(cnl_sigv4_sign(&r, &c, &b, err, sizeof(err)), 0);
	assert_string_not_equal(a.signature, b.signature);
	cnl_sigv4_done(&b);
	r = good();
	c.secret_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEZ";
	assert_int_equal(cnl_sigv4_sign(&r, &c, &b, err, sizeof(err)), 0);
	assert_string_not_equal(a.signature, b.signature);
	/* The secret is in no output. */
	assert_null(strstr(b.canonical, "EXAMPLEKEZ"));
	assert_null(strstr(b.string_to_sign, "EXAMPLEKEZ"));
	assert_null(strstr(b.authorization, "EXAMPLEKEZ"));
	cnl_sigv4_done(&b);
	/* The same input signs the same. */
	c = suite_cred;
	assert_int_equal(cnl_sigv4_sign(&r, &c, &b, err, sizeof(err)), 0);
	assert_string_equal(a.authorization, b.authorization);
	cnl_sigv4_done(&a);
	cnl_sigv4_done(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_suite),    cmocka_unit_test(test_signing_key),
	    cmocka_unit_test(test_amz_date), cmocka_unit_test(test_escape),
	    cmocka_unit_test(test_refusals), cmocka_unit_test(test_covers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
