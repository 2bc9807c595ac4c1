/*
 * test_cloud_apikey.c - the providers of server/cloud.h that sign each
 * request with an API key, where they need no cloud:
 *
 *   - NAVER Cloud (cloud_naver.c): x-ncp-apigw-signature-v2 against
 *     vectors made with Python's hmac module (base64(HMAC-SHA256(secret,
 *     "METHOD PATH?QUERY\nTIMESTAMP\nACCESS")), as Naver's documentation
 *     gives it), the configuration it refuses, and the launches it refuses
 *     before any call (spot: Naver sells none);
 *   - KT Cloud (cloud_kt.c, CloudStack's API): the signature against the
 *     example of Apache CloudStack's developer guide (deployVirtualMachine
 *     signed "Lxx1DM40AjcXU/caiK8RAP0O1hU="), and what it refuses.
 *
 * The calls themselves, signed and checked by loopback clouds, are
 * integration.burst_naver's (fake_naver.py) and .burst_kt's (fake_kt.py).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "server/cloud.h"

static void signature_vectors(void **state)
{
	char sig[64];

	(void)state;
	assert_int_equal(
	    cnl_cloud_naver_signature(
	        "GET",
	        "/vserver/v2/getServerInstanceList?regionCode=KR&"
	        "serverInstanceNoList.1=1234&responseFormatType=json",
	        "1700000000000", "ncp_iam_BPAMKRtestAccessKey",
	        "testSecretKey0123456789", sig),
	    0);
	assert_string_equal(sig,
	                    "bnPkmwO6gevOgmLk+I+QvQCb+aimaIBmVznDlb0G1rg=");
	/* The query as sent, escapes and all; a secret that is not ASCII. */
	assert_int_equal(
	    cnl_cloud_naver_signature(
	        "GET",
	        "/vserver/v2/createInitScript?regionCode=KR&initScriptName="
	        "cnlab-0a1b2c3d4e5f&initScriptContent=%23%21%2Fbin%2Fsh%0Aecho"
	        "%20%C3%A9&responseFormatType=json",
	        "1796680853753", "AKIDNCP01", "\xe7\xa7\x98\xe5\xaf\x86-secret",
	        sig),
	    0);
	assert_string_equal(sig,
	                    "hwbc2kUTg3bYmRcYFUKE5aOE0c3hxYtlgLwO1Mqgm9g=");
	/* Any change to what is signed changes the signature. */
	assert_int_equal(
	    cnl_cloud_naver_signature(
	        "POST",
	        "/vserver/v2/getServerInstanceList?regionCode=KR&"
	        "serverInstanceNoList.1=1234&responseFormatType=json",
	        "1700000000000", "ncp_iam_BPAMKRtestAccessKey",
	        "testSecretKey0123456789", sig),
	    0);
	assert_string_not_equal(sig,
	                        "bnPkmwO6gevOgmLk+I+QvQCb+aimaIBmVznDlb0G1rg=");
}

static struct cnl_cloud_naver_config good(void)
{
	return (struct cnl_cloud_naver_config){
	    .region = "KR",
	    .vpc_no = "31337",
	    .subnet_no = "42424",
	    /* Nothing listens there: a call would fail, slowly. */
	    .endpoint = "http://127.0.0.1:9",
	    .access_key = "ncp_iam_BPAMKRtestAccessKey",
	    .secret_key = "testSecretKey0123456789",
	    .max_attempts = 1,
	    .backoff_ms = 1,
	    .timeout_ms = 2000};
}

static void config_refused(void **state)
{
	struct cnl_cloud_naver_config c;
	struct cnl_cloud *cl = NULL;
	char err[256];

	(void)state;
	c = good();
	c.region = "kr";
	assert_int_equal(cnl_cloud_naver_new(&c, &cl, err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "region"));
	c = good();
	c.vpc_no = "vpc-1";
	assert_int_equal(cnl_cloud_naver_new(&c, &cl, err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "vpc_no"));
	c = good();
	c.subnet_no = NULL;
	assert_int_equal(cnl_cloud_naver_new(&c, &cl, err, sizeof(err)),
	                 -EINVAL);
	assert_non_null(strstr(err, "subnet_no"));
	c = good();
	c.secret_key = "";
	assert_int_equal(cnl_cloud_naver_new(&c, &cl, err, sizeof(err)),
	                 -EINVAL);
	c = good();
	c.access_key = "key with spaces";
	assert_int_equal(cnl_cloud_naver_new(&c, &cl, err, sizeof(err)),
	                 -EINVAL);
	c = good();
	c.endpoint = "ftp://127.0.0.1";
	assert_int_equal(cnl_cloud_naver_new(&c, &cl, err, sizeof(err)),
	                 -EINVAL);
	assert_null(cl);
}

static void launches_refused(void **state)
{
	struct cnl_cloud_naver_config c = good();
	struct cnl_cloud *cl = NULL;
	struct cnl_cloud_instance got[2];
	struct cnl_cloud_error e;
	struct cnl_cloud_launch l = {
	    .instance_type = "SVR.VSVR.GPU.T4.G001.C004.M020.NET.SSD.B050.G001",
	    .market = CNL_CLOUD_SPOT,
	    .count = 1,
	    .image = "SW.VSVR.OS.LNX64.UBNTU.SVR2004.B050",
	    .user_data = "#!/bin/sh\n",
	    .client_token = "cin_1-0"};
	char err[256];
	size_t n = 9;
	double price;

	(void)state;
	assert_int_equal(cnl_cloud_naver_new(&c, &cl, err, sizeof(err)), 0);
	/* No spot market: CAPACITY at once (no call: nothing listens). */
	assert_int_equal(cl->ops->provision(cl, &l, got, 2, &n, &e), -EAGAIN);
	assert_int_equal(e.kind, CNL_CLOUD_CAPACITY);
	assert_string_equal(e.code, "NoSpotMarket");
	assert_int_equal(e.attempts, 0);
	assert_int_equal((int)n, 0);
	assert_int_equal(cl->ops->spot_price(cl, l.instance_type, &price, &e),
	                 -ENOENT);
	/* A type that is no product code; an image with a space. */
	l.market = CNL_CLOUD_ON_DEMAND;
	l.instance_type = "t4 please";
	assert_int_equal(cl->ops->provision(cl, &l, got, 2, &n, &e), -EINVAL);
	assert_int_equal(e.kind, CNL_CLOUD_INVALID);
	l.instance_type = "SVR.VSVR.GPU.T4.G001.C004.M020.NET.SSD.B050.G001";
	l.image = "my image";
	assert_int_equal(cl->ops->provision(cl, &l, got, 2, &n, &e), -EINVAL);
	l.image = "SW.VSVR.OS.LNX64.UBNTU.SVR2004.B050";
	l.count = 3; /* more than the answer's room */
	assert_int_equal(cl->ops->provision(cl, &l, got, 2, &n, &e), -EINVAL);
	/* A server id that is no number: refused, never sent. */
	assert_int_equal(
	    cl->ops->terminate(cl, (const char *const[]){"../x"}, 1, &e),
	    -EINVAL);
	assert_int_equal(e.attempts, 0);
	/* With nothing listening: no answer, an outage. */
	l.count = 1;
	assert_int_equal(cl->ops->provision(cl, &l, got, 2, &n, &e), -EIO);
	assert_int_equal(e.kind, CNL_CLOUD_UNAVAILABLE);
	cnl_cloud_free(cl);
}

/* The example of CloudStack's developer guide ("Signing API Requests"):
 * the parameters in any order and case of name, as a client sends them. */
static void kt_signature_vector(void **state)
{
	const char *const names[] = {"command",        "serviceOfferingId",
	                             "diskOfferingId", "templateId",
	                             "zoneId",         "apiKey"};
	const char *const values[] = {
	    "deployVirtualMachine",
	    "1",
	    "1",
	    "2",
	    "4",
	    "miVr6X7u6bN_sdahOBpjNejPgEsT35eXq-jB8CG20YI3yaxXcgpyuaIRmFI_"
	    "EJTVwZ0nUkkJbPmY3y2bciKwFQ"};
	const char *const shuffled_names[] = {
	    "zoneId",  "apiKey",         "templateId",
	    "command", "diskOfferingId", "serviceOfferingId"};
	const char *const shuffled_values[] = {
	    "4",
	    "miVr6X7u6bN_sdahOBpjNejPgEsT35eXq-jB8CG20YI3yaxXcgpyuaIRmFI_"
	    "EJTVwZ0nUkkJbPmY3y2bciKwFQ",
	    "2",
	    "deployVirtualMachine",
	    "1",
	    "1"};
	const char *secret = "AdpTvsQMZwv9MNvfqDcQhWSL9pHQvq7z13CFP2SU1iToDk"
	                     "kM3d8iZciWEKsGREhMtV9yLVMxmbbJJgrXo8O5jg";
	char sig[64];

	(void)state;
	assert_int_equal(cnl_cloud_kt_sign(names, values, 6, secret, sig), 0);
	assert_string_equal(sig, "Lxx1DM40AjcXU/caiK8RAP0O1hU=");
	assert_int_equal(
	    cnl_cloud_kt_sign(shuffled_names, shuffled_values, 6, secret, sig),
	    0);
	assert_string_equal(sig, "Lxx1DM40AjcXU/caiK8RAP0O1hU=");
	/* Another value: another signature. */
	assert_int_equal(cnl_cloud_kt_sign(names, values, 5, secret, sig), 0);
	assert_string_not_equal(sig, "Lxx1DM40AjcXU/caiK8RAP0O1hU=");
}

static void kt_refused(void **state)
{
	struct cnl_cloud_kt_config c = {
	    .zone = "95e2f517-d64a-4866-8585-5177c256f7c7",
	    .endpoint = "http://127.0.0.1:9",
	    .api_key = "key",
	    .secret_key = "secret",
	    .max_attempts = 1,
	    .backoff_ms = 1};
	struct cnl_cloud *cl = NULL;
	struct cnl_cloud_instance got[1];
	struct cnl_cloud_error e;
	struct cnl_cloud_launch l = {.instance_type = "offering-1",
	                             .market = CNL_CLOUD_SPOT,
	                             .count = 1,
	                             .image = "template-1",
	                             .client_token = "cin_2-0"};
	char err[256];
	size_t n;

	(void)state;
	/* The endpoint is the API's whole URL: without its path, refused. */
	assert_int_equal(cnl_cloud_kt_new(&c, &cl, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "endpoint"));
	c.endpoint = "http://127.0.0.1:9/server/v1/client/api";
	c.zone = "zone with spaces";
	assert_int_equal(cnl_cloud_kt_new(&c, &cl, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "zone"));
	c.zone = "95e2f517-d64a-4866-8585-5177c256f7c7";
	assert_int_equal(cnl_cloud_kt_new(&c, &cl, err, sizeof(err)), 0);
	assert_int_equal(cl->ops->provision(cl, &l, got, 1, &n, &e), -EAGAIN);
	assert_int_equal(e.kind, CNL_CLOUD_CAPACITY);
	assert_string_equal(e.code, "NoSpotMarket");
	l.market = CNL_CLOUD_ON_DEMAND;
	l.image = "template 1";
	assert_int_equal(cl->ops->provision(cl, &l, got, 1, &n, &e), -EINVAL);
	assert_int_equal(
	    cl->ops->terminate(cl, (const char *const[]){"a&b=c"}, 1, &e),
	    -EINVAL);
	cnl_cloud_free(cl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(signature_vectors),
	    cmocka_unit_test(config_refused),
	    cmocka_unit_test(launches_refused),
	    cmocka_unit_test(kt_signature_vector),
	    cmocka_unit_test(kt_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
