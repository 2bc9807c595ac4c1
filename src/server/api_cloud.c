/*
 * api_cloud.c - the hybrid-cloud settings of the seeds: the burst policy
 * and cloud accounts (validated per provider; acting on them comes
 * later).
 *
 *   policy   id = "burst"         {"threshold", "provider", "strategy",
 *                                  "max_cloud_budget", "enabled"}
 *   cloud    id = cld_...         {"provider", "account", "region",
 *                                  "instance_types"}
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

static const char *const providers[] = {"aws", "gcp", "azure", NULL};

static bool in_set(const char *v, const char *const *set)
{
	for (; *set; set++)
		if (strcmp(v, *set) == 0)
			return true;
	return false;
}

/* Whether some cloud account of @provider is registered. */
static bool have_account(struct call *c, const char *provider)
{
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	int n = 0;
	bool found = false;

	if (cnl_store_doc_list(c->api->store, "cloud", NULL, NULL,
	                       CNL_STORE_LIST_MAX, d, &n) == 0)
		for (int i = 0; i < n && !found; i++) {
			json_t *o = json_loads(d[i].body, 0, NULL);
			const char *p =
			    json_string_value(json_object_get(o, "provider"));

			found = p && strcmp(p, provider) == 0;
			json_decref(o);
		}
	cnl_store_docs_done(d, n);
	free(d);
	return found;
}

void cnl_api_h_burst_get(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp)
{
	struct call *c = call;
	json_t *o = NULL;
	int r = cnl_api_doc_json(c->api->store, "policy", "burst", &o);

	if (r == -CNL_ENOTFOUND)
		o = json_pack("{s:b}", "enabled", 0);
	else if (r < 0) {
		cnl_api_store_error(c, resp, r, "burst policy");
		return;
	}
	cnl_http_reply(resp, 200, o);
}

void cnl_api_h_burst_put(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp)
{
	static const char *const fields[] = {"threshold", "provider",
	                                     "strategy",  "max_cloud_budget",
	                                     "enabled",   NULL};
	static const char *const strategies[] = {"spot", "on-demand",
	                                         "spot-then-on-demand", NULL};
	struct call *c = call;
	const char *provider, *strategy;
	double threshold, budget;
	bool enabled = true;
	char err[256];
	json_t *body, *o;
	int r;

	snprintf(c->target, sizeof(c->target), "policy:burst");
	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (cnl_json_get_double(body, "threshold", true, 0.0, 1.0, &threshold,
	                        err, sizeof(err)) < 0 ||
	    cnl_json_get_double(body, "max_cloud_budget", true, 0.0, 1e12,
	                        &budget, err, sizeof(err)) < 0 ||
	    cnl_json_get_bool(body, "enabled", false, &enabled, err,
	                      sizeof(err)) < 0) {
		cnl_api_bad(resp, err);
		goto out;
	}
	if (threshold <= 0) {
		cnl_api_bad(
		    resp, "field \"threshold\": must be above 0 (a utilisation "
		          "such as 0.90)");
		goto out;
	}
	if (!(provider = cnl_api_get_string(body, "provider", 16, resp)) ||
	    !(strategy = cnl_api_get_string(body, "strategy", 32, resp)))
		goto out;
	if (!in_set(provider, providers)) {
		cnl_api_bad(resp,
		            "field \"provider\": must be aws, gcp or azure");
		goto out;
	}
	if (!in_set(strategy, strategies)) {
		cnl_api_bad(resp,
		            "field \"strategy\": must be spot, on-demand or "
		            "spot-then-on-demand");
		goto out;
	}
	if (!have_account(c, provider)) {
		cnl_http_error(resp, 409, "conflict",
		               "no cloud account for provider %s: add one "
		               "first (cnlab cloud add %s ...)",
		               provider, provider);
		goto out;
	}
	o = json_pack("{s:f,s:s,s:s,s:f,s:b}", "threshold", threshold,
	              "provider", provider, "strategy", strategy,
	              "max_cloud_budget", budget, "enabled", enabled);
	r = cnl_api_doc_save(c, "policy", "burst", "", "", o, false);
	if (r < 0) {
		json_decref(o);
		cnl_api_store_error(c, resp, r, "burst policy");
		goto out;
	}
	cnl_http_reply(resp, 200, o);
out:
	json_decref(body);
}

static bool all_digits(const char *s, size_t n)
{
	if (strlen(s) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isdigit((unsigned char)s[i]))
			return false;
	return true;
}

/* Provider-specific account and region formats; NULL when valid. */
static const char *check_account(const char *provider, const char *account,
                                 const char *region)
{
	size_t n = strlen(region);

	if (strcmp(provider, "aws") == 0 && !all_digits(account, 12))
		return "field \"account\": an AWS account id is 12 digits";
	if (strcmp(provider, "azure") == 0 &&
	    (strlen(account) != 36 || account[8] != '-' || account[13] != '-'))
		return "field \"account\": an Azure subscription id is a UUID";
	if (strcmp(provider, "gcp") == 0 &&
	    (strlen(account) < 6 || strlen(account) > 30 ||
	     !islower((unsigned char)account[0])))
		return "field \"account\": a GCP project id is 6..30 "
		       "characters starting with a lowercase letter";
	if (n < 4 || n > 32)
		return "field \"region\": must look like ap-northeast-2";
	for (size_t i = 0; i < n; i++)
		if (!islower((unsigned char)region[i]) &&
		    !isdigit((unsigned char)region[i]) && region[i] != '-')
			return "field \"region\": lowercase letters, digits "
			       "and '-' only";
	return NULL;
}

static json_t *cloud_json(const char *id, json_t *o)
{
	json_t *p = json_deep_copy(o);

	json_object_set_new(p, "id", json_string(id));
	return p;
}

static json_t *cloud_item(struct call *c, const struct cnl_store_doc *d,
                          json_t *body)
{
	return cloud_json(d->id, body);
}

void cnl_api_h_cloud_list(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	cnl_api_doc_page(call, req, resp, "cloud", NULL, "cloud account",
	                 cloud_item);
}

void cnl_api_h_cloud_add(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp)
{
	static const char *const fields[] = {"provider", "account", "region",
	                                     "instance_types", NULL};
	struct call *c = call;
	const char *provider, *account, *region, *why;
	char id[CNL_ID_MAX], name[CNL_STORE_NAME_MAX];
	json_t *body, *types, *o;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(provider = cnl_api_get_string(body, "provider", 16, resp)) ||
	    !(account = cnl_api_get_string(body, "account", 40, resp)) ||
	    !(region = cnl_api_get_string(body, "region", 33, resp)))
		goto out;
	if (!in_set(provider, providers)) {
		cnl_api_bad(resp,
		            "field \"provider\": must be aws, gcp or azure");
		goto out;
	}
	if ((why = check_account(provider, account, region))) {
		cnl_api_bad(resp, why);
		goto out;
	}
	types = json_object_get(body, "instance_types");
	if (!json_is_array(types) || json_array_size(types) == 0 ||
	    json_array_size(types) > 64) {
		cnl_api_bad(resp,
		            "field \"instance_types\": must be a list of 1..64 "
		            "instance type names");
		goto out;
	}
	for (size_t i = 0; i < json_array_size(types); i++) {
		const char *t = json_string_value(json_array_get(types, i));

		if (!t || !t[0] || strlen(t) > 64) {
			cnl_api_bad(resp,
			            "field \"instance_types\": each must be a "
			            "name such as g5.xlarge");
			goto out;
		}
	}
	snprintf(name, sizeof(name), "%s:%s:%s", provider, account, region);
	snprintf(c->target, sizeof(c->target), "cloud:%s", name);
	if (cnl_api_new_id(c, "cld", id) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot make an id");
		goto out;
	}
	o = json_pack("{s:s,s:s,s:s,s:O}", "provider", provider, "account",
	              account, "region", region, "instance_types", types);
	r = cnl_api_doc_save(c, "cloud", id, "", name, o, true);
	if (r < 0) {
		json_decref(o);
		cnl_api_store_error(c, resp, r, "cloud account");
		goto out;
	}
	cnl_http_reply(resp, 201, cloud_json(id, o));
	json_decref(o);
out:
	json_decref(body);
}

void cnl_api_h_cloud_delete(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *id = cnl_http_param(req, "account");
	int r;

	snprintf(c->target, sizeof(c->target), "%s", id);
	if ((r = cnl_store_doc_delete(c->api->store, "cloud", id)) < 0) {
		cnl_api_store_error(c, resp, r, "cloud account");
		return;
	}
	cnl_http_reply(resp, 200, json_pack("{s:s}", "deleted", id));
}
