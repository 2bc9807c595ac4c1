/*
 * test_jwt.c - the claim checks every accepted token goes through
 * (net/jwt.h): issuer, audience in both forms, the exp/iat/nbf window at
 * its edges with and without leeway (and at the ends of int64), the order
 * of the checks, string claims, the CNLab name rule and the user-name
 * claim, and the strict decoding of a compact token's parts.
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
#include "common/base64.h"
#include "net/jwt.h"

#define NOW INT64_C(1700000000)

/* Check @json (a claims object) under @r: 0, or the refusal naming @why. */
static void check(const char *json, const struct cnl_jwt_rules *r,
                  const char *why)
{
	json_t *p = json_loads(json, 0, NULL);
	struct cnl_jwt_times t = {-1, -1, -1}, before = t;
	char err[256] = "";
	int rc;

	assert_non_null(p);
	rc = cnl_jwt_check_claims(p, r, &t, err, sizeof(err));
	json_decref(p);
	if (!why) {
		if (rc != 0)
			fail_msg("%s refused: %s", json, err);
		return;
	}
	if (rc != -CNL_EAUTH)
		fail_msg("%s: %d, not refused", json, rc);
	if (!strstr(err, why))
		fail_msg("%s: \"%s\" lacks \"%s\"", json, err, why);
	assert_memory_equal(&t, &before, sizeof(t));
}

static void test_audience_and_issuer(void **state)
{
	struct cnl_jwt_rules own = {.audience = "cnlab", .now_s = NOW};
	struct cnl_jwt_rules idp = {
	    .audience = "cnlab", .issuer = "https://idp", .now_s = NOW};

	check("{\"aud\":\"cnlab\",\"exp\":1700000100}", &own, NULL);
	check("{\"aud\":[\"x\",\"cnlab\"],\"exp\":1700000100}", &own, NULL);
	check("{\"aud\":\"other\",\"exp\":1700000100}", &own,
	      "\"aud\" does not contain cnlab");
	check("{\"aud\":[\"x\",1,\"cnlab\"],\"exp\":1700000100}", &own,
	      "\"aud\"");
	check("{\"aud\":[],\"exp\":1700000100}", &own, "\"aud\"");
	check("{\"exp\":1700000100}", &own, "\"aud\"");
	/* Without an issuer in the rules "iss" is not compared. */
	check("{\"iss\":\"anyone\",\"aud\":\"cnlab\",\"exp\":1700000100}", &own,
	      NULL);
	check("{\"iss\":\"https://idp\",\"aud\":\"cnlab\",\"exp\":1700000100}",
	      &idp, NULL);
	check("{\"iss\":\"https://idp/\",\"aud\":\"cnlab\","
	      "\"exp\":1700000100}",
	      &idp, "\"iss\" is not the issuer https://idp");
	check("{\"aud\":\"cnlab\",\"exp\":1700000100}", &idp, "\"iss\"");
	/* The order: issuer before audience before dates. */
	check("{\"iss\":\"x\",\"aud\":\"x\"}", &idp, "\"iss\"");
	check("{\"iss\":\"https://idp\",\"aud\":\"x\"}", &idp, "\"aud\"");
}

static void test_time_window(void **state)
{
	struct cnl_jwt_rules own = {.audience = "a", .now_s = NOW};
	struct cnl_jwt_rules far = {.audience = "a",
	                            .now_s = NOW,
	                            .exp_leeway_s = CNL_JWT_SKEW_S,
	                            .iat_required = true};
	char buf[256];

	/* No leeway: exp must be after now. */
	check("{\"aud\":\"a\",\"exp\":1700000001}", &own, NULL);
	check("{\"aud\":\"a\",\"exp\":1700000000}", &own, "expired 0 s ago");
	check("{\"aud\":\"a\"}", &own, "\"exp\" missing");
	check("{\"aud\":\"a\",\"exp\":1700000001.5}", &own, "\"exp\"");
	check("{\"aud\":\"a\",\"exp\":\"1700000001\"}", &own, "\"exp\"");
	/* Leeway: good while now < exp + leeway. */
	snprintf(buf, sizeof(buf), "{\"aud\":\"a\",\"exp\":%lld,\"iat\":1}",
	         (long long)(NOW - CNL_JWT_SKEW_S + 1));
	check(buf, &far, NULL);
	snprintf(buf, sizeof(buf), "{\"aud\":\"a\",\"exp\":%lld,\"iat\":1}",
	         (long long)(NOW - CNL_JWT_SKEW_S));
	check(buf, &far, "expired 60 s ago");
	/* iat: optional or required, never too far ahead. */
	check("{\"aud\":\"a\",\"exp\":1800000000}", &far, "\"iat\" missing");
	check("{\"aud\":\"a\",\"exp\":1800000000,\"iat\":null}", &own,
	      "\"iat\"");
	snprintf(buf, sizeof(buf),
	         "{\"aud\":\"a\",\"exp\":1800000000,"
	         "\"iat\":%lld}",
	         (long long)(NOW + CNL_JWT_SKEW_S));
	check(buf, &own, NULL);
	snprintf(buf, sizeof(buf),
	         "{\"aud\":\"a\",\"exp\":1800000000,"
	         "\"iat\":%lld}",
	         (long long)(NOW + CNL_JWT_SKEW_S + 1));
	check(buf, &far, "\"iat\" is in the future");
	/* nbf: optional, never too far ahead. */
	snprintf(buf, sizeof(buf),
	         "{\"aud\":\"a\",\"exp\":1800000000,"
	         "\"nbf\":%lld}",
	         (long long)(NOW + CNL_JWT_SKEW_S));
	check(buf, &own, NULL);
	snprintf(buf, sizeof(buf),
	         "{\"aud\":\"a\",\"exp\":1800000000,"
	         "\"nbf\":%lld}",
	         (long long)(NOW + CNL_JWT_SKEW_S + 1));
	check(buf, &own, "\"nbf\" is in the future");
	check("{\"aud\":\"a\",\"exp\":1800000000,\"nbf\":true}", &own,
	      "\"nbf\"");
	/* The ends of int64 do not wrap around. */
	check("{\"aud\":\"a\",\"exp\":-9223372036854775808}", &far, "expired");
	check("{\"aud\":\"a\",\"exp\":9223372036854775807,"
	      "\"iat\":9223372036854775807}",
	      &far, "\"iat\" is in the future");
	check("{\"aud\":\"a\",\"exp\":9223372036854775807,"
	      "\"iat\":-9223372036854775808,"
	      "\"nbf\":-9223372036854775808}",
	      &far, NULL);
}

static void test_times_returned_and_arguments(void **state)
{
	json_t *p = json_pack("{s:s,s:I,s:I}", "aud", "a", "exp",
	                      (json_int_t)(NOW + 5), "iat", (json_int_t)NOW);
	struct cnl_jwt_rules r = {.audience = "a", .now_s = NOW};
	struct cnl_jwt_times t;

	assert_int_equal(cnl_jwt_check_claims(p, &r, &t, NULL, 0), 0);
	assert_int_equal(t.exp, NOW + 5);
	assert_int_equal(t.iat, NOW);
	assert_int_equal(t.nbf, 0);
	assert_int_equal(cnl_jwt_check_claims(p, &r, NULL, NULL, 0), 0);
	assert_int_equal(cnl_jwt_check_claims(NULL, &r, &t, NULL, 0), -EINVAL);
	assert_int_equal(cnl_jwt_check_claims(p, NULL, &t, NULL, 0), -EINVAL);
	r.audience = NULL;
	assert_int_equal(cnl_jwt_check_claims(p, &r, &t, NULL, 0), -EINVAL);
	json_decref(p);
}

static void test_string_claims(void **state)
{
	json_t *p = json_loads("{\"sub\":\"u1\",\"empty\":\"\",\"num\":1,"
	                       "\"nul\":\"a\\u0000b\",\"long\":\"12345678\"}",
	                       JSON_ALLOW_NUL, NULL);
	char dst[16] = "keep";

	assert_non_null(p);
	assert_true(cnl_jwt_claim_str(p, "sub", true, dst, 8));
	assert_string_equal(dst, "u1");
	assert_true(cnl_jwt_claim_str(p, "absent", false, dst, 8));
	assert_string_equal(dst, "u1"); /* untouched */
	assert_false(cnl_jwt_claim_str(p, "absent", true, dst, 8));
	assert_true(cnl_jwt_claim_str(p, "empty", false, dst, 8));
	assert_false(cnl_jwt_claim_str(p, "empty", true, dst, 8));
	assert_false(cnl_jwt_claim_str(p, "num", false, dst, 8));
	assert_false(cnl_jwt_claim_str(p, "nul", false, dst, 8));
	assert_false(cnl_jwt_claim_str(p, "long", false, dst, 8));
	assert_true(cnl_jwt_claim_str(p, "long", false, dst, 9));
	json_decref(p);
}

static void test_names(void **state)
{
	static const char *const good[] = {
	    "a",
	    "alice",
	    "Bob_2",
	    "x.y-z",
	    "_under",
	    "0digit",
	    "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij123",
	};
	static const char *const bad[] = {
	    "",
	    ".dot",
	    "-dash",
	    "sp ace",
	    "sla/sh",
	    "é",
	    "at@host",
	    "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij1234",
	};
	char name[CNL_JWT_NAME_MAX] = "";
	char err[128];
	json_t *p;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		if (!cnl_jwt_name_valid(good[i]))
			fail_msg("\"%s\" refused", good[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (cnl_jwt_name_valid(bad[i]))
			fail_msg("\"%s\" accepted", bad[i]);
	assert_false(cnl_jwt_name_valid(NULL));

	p = json_pack("{s:s,s:s,s:i,s:s}", "preferred_username", "alice", "bad",
	              "-x", "num", 3, "long", bad[7]);
	assert_int_equal(
	    cnl_jwt_claim_name(p, "preferred_username", name, err, sizeof(err)),
	    0);
	assert_string_equal(name, "alice");
	assert_int_equal(cnl_jwt_claim_name(p, "login", name, err, sizeof(err)),
	                 -CNL_EAUTH);
	assert_string_equal(err, "token has no \"login\" claim");
	assert_int_equal(cnl_jwt_claim_name(p, "bad", name, err, sizeof(err)),
	                 -CNL_EAUTH);
	assert_string_equal(err,
	                    "token \"bad\" is not a valid CNLab user name");
	assert_int_equal(cnl_jwt_claim_name(p, "num", name, err, sizeof(err)),
	                 -CNL_EAUTH);
	assert_int_equal(cnl_jwt_claim_name(p, "long", name, err, sizeof(err)),
	                 -CNL_EAUTH);
	assert_string_equal(name, "alice"); /* untouched on failure */
	json_decref(p);
}

static void part(const char *json, char *out, size_t len)
{
	assert_true(cnl_b64_encode(json, strlen(json), CNL_B64_URL, out, len) >=
	            0);
}

static void test_parts(void **state)
{
	char b[256];
	json_t *j;

	part("{\"alg\":\"HS256\"}", b, sizeof(b));
	j = cnl_jwt_part_json(b, strlen(b));
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "alg")),
	                    "HS256");
	json_decref(j);
	part("{\"a\":1,\"a\":2}", b, sizeof(b));
	assert_null(cnl_jwt_part_json(b, strlen(b)));
	part("[1]", b, sizeof(b));
	assert_null(cnl_jwt_part_json(b, strlen(b)));
	part("\"s\"", b, sizeof(b));
	assert_null(cnl_jwt_part_json(b, strlen(b)));
	part("{\"a\":", b, sizeof(b));
	assert_null(cnl_jwt_part_json(b, strlen(b)));
	/* Padding and the standard alphabet are not base64url. */
	assert_null(cnl_jwt_part_json("e30=", 4));
	assert_non_null(j = cnl_jwt_part_json("e30", 3)); /* {} */
	json_decref(j);
	assert_null(cnl_jwt_part_json("", 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_audience_and_issuer),
	    cmocka_unit_test(test_time_window),
	    cmocka_unit_test(test_times_returned_and_arguments),
	    cmocka_unit_test(test_string_claims),
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_parts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
