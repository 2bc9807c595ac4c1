/*
 * api_audit.c - the audit log for administrators: records in order, and
 * the verification of their hash chain.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/json.h"
#include "common/label.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "sched/sched.h"
#include "server/api-internal.h"
#include "server/auth.h"
#include "server/oidc.h"
#include "server/shape.h"

void cnl_api_h_audit_list(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *qa = cnl_http_query(req, "after");
	const char *ql = cnl_http_query(req, "limit");
	long long after = 0;
	long limit = CNL_API_PAGE_DEFAULT;
	struct cnl_store_audit *a;
	json_t *items;
	char *end;
	int n = 0, r;

	if (qa) {
		errno = 0;
		after = strtoll(qa, &end, 10);
		if (errno || end == qa || *end || after < 0) {
			cnl_api_bad(
			    resp, "query \"after\": must be a sequence number");
			return;
		}
	}
	if (ql) {
		errno = 0;
		limit = strtol(ql, &end, 10);
		if (errno || end == ql || *end || limit < 1 ||
		    limit > CNL_STORE_LIST_MAX) {
			cnl_api_bad(resp,
			            "query \"limit\": must be an integer in "
			            "1..1000");
			return;
		}
	}
	a = cnl_xcalloc((size_t)limit, sizeof(*a));
	r = cnl_store_audit_list(c->api->store, after, (int)limit, a, &n);
	if (r < 0) {
		free(a);
		cnl_api_store_error(c, resp, r, "audit");
		return;
	}
	items = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(
		    items, json_pack("{s:I,s:o,s:s,s:s,s:s,s:s,s:s}", "seq",
		                     (json_int_t)a[i].seq, "time",
		                     cnl_api_time_json(a[i].ts_ms), "actor",
		                     a[i].actor, "action", a[i].action,
		                     "target", a[i].target, "result",
		                     a[i].result, "hash", a[i].hash));
	cnl_http_reply(
	    resp, 200,
	    json_pack("{s:o,s:o}", "items", items, "next",
	              n == limit ? json_integer(a[n - 1].seq) : json_null()));
	free(a);
}

void cnl_api_h_audit_verify(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;
	int64_t bad_seq = 0;
	int r = cnl_store_audit_verify(c->api->store, &bad_seq);

	if (r == -CNL_ECORRUPT) {
		cnl_http_reply(
		    resp, 200,
		    json_pack("{s:b,s:I,s:s}", "ok", 0, "bad_seq",
		              (json_int_t)bad_seq, "message",
		              "the audit chain fails at this record: "
		              "it was edited or deleted"));
		return;
	}
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "audit");
		return;
	}
	cnl_http_reply(resp, 200, json_pack("{s:b}", "ok", 1));
}
