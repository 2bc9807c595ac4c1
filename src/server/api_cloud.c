/*
 * api_cloud.c - the hybrid-cloud settings of the seeds: the burst policy
 * and cloud accounts (validated per provider; acting on them comes
 * later).
 *
 *   policy   id = "burst"         {"threshold", "provider", "strategy",
 *                                  "max_cloud_budget", "enabled"}
 *   cloud    id = cld_...         {"provider", "account", "region",
 *                                  "instance_types", and with AWS
 *                                  credentials "access_key_id",
 *                                  "credentials_sealed", "key_id"}
 *
 * Credentials (AWS: an access key id, its secret access key and, for
 * temporary ones, a session token) are sealed with the platform's
 * secrets key (secrets.h; the operator's, never in the database) under
 * the place "cloud/ID", so that the database and its backups alone
 * reveal nothing and a sealed value moved to another account's row does
 * not open there.  No reply carries the secret or its sealed form: an
 * account shows its key id and that a secret is set.  The secret is read
 * back only to talk to the provider (cnl_api_cloud_open()).
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
#include "server/cloud.h"
#include "server/oidc.h"
#include "server/secrets.h"
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

/* An account as replies show it: never its sealed credentials. */
static json_t *cloud_json(const char *id, json_t *o)
{
	json_t *p = json_deep_copy(o);
	const char *akid =
	    json_string_value(json_object_get(p, "access_key_id"));

	json_object_set_new(p, "id", json_string(id));
	if (akid)
		json_object_set_new(p, "credentials",
		                    json_pack("{s:s,s:b,s:O}", "access_key_id",
		                              akid, "secret_set", 1, "key_id",
		                              json_object_get(p, "key_id")));
	json_object_del(p, "access_key_id");
	json_object_del(p, "credentials_sealed");
	json_object_del(p, "key_id");
	return p;
}

/* An endpoint: https://HOST[:PORT], or http://127.0.0.1:PORT (a test's
 * or a local proxy's), nothing after; the credentials are sent there. */
static bool endpoint_ok(const char *e)
{
	const char *h;
	size_t n;

	if (!e || strlen(e) > 200)
		return false;
	if (strncmp(e, "https://", 8) == 0) {
		h = e + 8;
		n = strspn(
		    h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		       "0123456789.-");
		if (n == 0)
			return false;
		h += n;
	} else if (strncmp(e, "http://127.0.0.1", 16) == 0) {
		h = e + 16;
		if (*h != ':')
			return false;
	} else {
		return false;
	}
	if (*h == ':') {
		h++;
		n = strspn(h, "0123456789");
		if (n == 0 || n > 5 || strtol(h, NULL, 10) > 65535)
			return false;
		h += n;
	}
	return *h == '\0';
}

/* An AWS access key id: 16..128 of A-Z and 0-9. */
static bool aws_key_id(const char *s)
{
	size_t n = strlen(s);

	if (n < 16 || n > 128)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isupper((unsigned char)s[i]) &&
		    !isdigit((unsigned char)s[i]))
			return false;
	return true;
}

/*
 * The "credentials" of a new account @id into @o (access_key_id,
 * credentials_sealed, key_id): 0, or -1 with the answer in @resp.
 */
static int seal_credentials(struct call *c, const char *provider,
                            const char *id, json_t *cr, json_t *o,
                            struct cnl_http_response *resp)
{
	static const char *const keys[] = {"access_key_id", "secret_access_key",
	                                   "session_token", NULL};
	const char *akid, *secret, *token, *k;
	char place[96], kid[CNL_SECRET_KEY_ID], *sealed = NULL, *plain;
	json_t *v;
	int r;

	if (!json_is_object(cr)) {
		cnl_api_bad(resp, "field \"credentials\": must be an object "
		                  "{access_key_id, secret_access_key[, "
		                  "session_token]}");
		return -1;
	}
	json_object_foreach (cr, k, v) {
		bool known = false;

		for (int i = 0; keys[i]; i++)
			known |= strcmp(k, keys[i]) == 0;
		if (!known) {
			cnl_http_error(resp, 400, "bad_request",
			               "field \"credentials\": unknown member "
			               "\"%.64s\"",
			               k);
			return -1;
		}
	}
	if (strcmp(provider, "aws") != 0) {
		cnl_api_bad(resp, "field \"credentials\": only aws accounts "
		                  "take credentials for now");
		return -1;
	}
	akid = json_string_value(json_object_get(cr, "access_key_id"));
	secret = json_string_value(json_object_get(cr, "secret_access_key"));
	token = json_string_value(json_object_get(cr, "session_token"));
	if (!akid || !aws_key_id(akid)) {
		cnl_api_bad(resp, "field \"credentials.access_key_id\": an AWS "
		                  "access key id (16..128 of A-Z, 0-9)");
		return -1;
	}
	if (!secret || !cnl_api_printable(secret, 256)) {
		cnl_api_bad(resp, "field \"credentials.secret_access_key\": "
		                  "required, 1..256 printable characters");
		return -1;
	}
	if (json_object_get(cr, "session_token") &&
	    (!token || !cnl_api_printable(token, 4096))) {
		cnl_api_bad(resp, "field \"credentials.session_token\": "
		                  "1..4096 printable characters");
		return -1;
	}
	if (!c->api->have_secrets_key) {
		cnl_http_error(
		    resp, 409, "secrets_off",
		    "cloud credentials are kept sealed with the "
		    "platform's secrets key, and this platform has "
		    "none: the operator sets secrets_key_file (a key "
		    "kept apart from the database) in cnlabd's "
		    "configuration");
		return -1;
	}
	/* Sealed with them: where they may be used (the row's endpoint,
	 * region, account and key id), so that a row rewritten by someone
	 * without the key (the endpoint to their host) does not open. */
	v = json_pack("{s:s,s:s*,s:O?,s:O,s:O,s:s}", "secret", secret, "token",
	              token, "endpoint", json_object_get(o, "endpoint"),
	              "region", json_object_get(o, "region"), "account",
	              json_object_get(o, "account"), "access_key_id", akid);
	plain = json_dumps(v, JSON_COMPACT);
	json_decref(v);
	snprintf(place, sizeof(place), "cloud/%s", id);
	r = cnl_secret_seal(c->api->secrets_key, place, (uint8_t *)plain,
	                    strlen(plain), &sealed);
	explicit_bzero(plain, strlen(plain));
	free(plain);
	if (r < 0) {
		cnl_http_error(resp, 500, "internal",
		               "cannot seal the credentials: %s",
		               cnl_strerror(r));
		return -1;
	}
	cnl_secret_key_id(c->api->secrets_key, kid);
	json_object_set_new(o, "access_key_id", json_string(akid));
	json_object_set_new(o, "credentials_sealed", json_string(sealed));
	json_object_set_new(o, "key_id", json_string(kid));
	free(sealed);
	return 0;
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

/* An instance the burst launched (burst.c), its cost so far. */
static json_t *instance_item(struct call *c, const struct cnl_store_doc *d,
                             json_t *body)
{
	json_t *o = json_deep_copy(body);
	int64_t from = json_integer_value(json_object_get(o, "launched_ms")),
	        to = json_integer_value(json_object_get(o, "ended_ms"));

	json_object_set_new(o, "id", json_string(d->id));
	json_object_del(o, "token");
	if (from > 0 && to <= 0 && c->now_ms > from)
		json_object_set_new(
		    o, "cost",
		    json_real(
		        (double)(c->now_ms - from) / 3600000.0 *
		        json_number_value(json_object_get(o, "price_h"))));
	return o;
}

/* GET /v1/cloud/instances: what the burst launched, oldest first. */
void cnl_api_h_cloud_instances(void *call, struct cnl_http_request *req,
                               struct cnl_http_response *resp)
{
	cnl_api_doc_page(call, req, resp, "cloud_instance", NULL,
	                 "cloud instance", instance_item);
}

void cnl_api_h_cloud_add(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp)
{
	static const char *const fields[] = {
	    "provider",    "account",  "region", "instance_types",
	    "credentials", "endpoint", "prices", NULL};
	struct call *c = call;
	const char *provider, *account, *region, *why;
	char id[CNL_ID_MAX], name[CNL_STORE_NAME_MAX];
	json_t *body, *types, *o, *ep;
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
	if ((ep = json_object_get(body, "endpoint"))) {
		const char *e = json_string_value(ep);

		/* Where the provider's API is (a region's own, a test's):
		 * the credentials go there, so https only, but for this
		 * machine's loopback. */
		if (!endpoint_ok(e)) {
			cnl_api_bad(resp, "field \"endpoint\": an https:// URL "
			                  "(http:// only to 127.0.0.1)");
			json_decref(o);
			goto out;
		}
		json_object_set(o, "endpoint", ep);
	}
	if ((ep = json_object_get(body, "prices"))) {
		const char *k;
		json_t *v;

		/* On-demand prices over the published list (cloud_types.c),
		 * for a region or a contract of its own. */
		if (!json_is_object(ep) || json_object_size(ep) > 64) {
			cnl_api_bad(resp, "field \"prices\": an object of at "
			                  "most 64 {TYPE: USD an hour}");
			json_decref(o);
			goto out;
		}
		json_object_foreach (ep, k, v)
			if (!k[0] || strlen(k) > 64 || !json_is_number(v) ||
			    !(json_number_value(v) > 0) ||
			    json_number_value(v) > 1e6) {
				cnl_http_error(
				    resp, 400, "bad_request",
				    "field \"prices\": \"%.64s\" "
				    "must be a price above 0 (USD an "
				    "hour)",
				    k);
				json_decref(o);
				goto out;
			}
		json_object_set(o, "prices", ep);
	}
	if (json_object_get(body, "credentials") &&
	    seal_credentials(c, provider, id,
	                     json_object_get(body, "credentials"), o,
	                     resp) < 0) {
		json_decref(o);
		goto out;
	}
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

/* Whether account @id has an instance not yet ended (burst.c). */
static bool live_instances(struct call *c, const char *id)
{
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	char after[CNL_STORE_DOC_ID_MAX] = "";
	bool live = false;
	int n;

	do {
		n = 0;
		if (cnl_store_doc_list(c->api->store, "cloud_instance", NULL,
		                       after[0] ? after : NULL,
		                       CNL_STORE_LIST_MAX, d, &n) < 0) {
			live = true; /* cannot tell: keep the account */
			break;
		}
		for (int i = 0; i < n && !live; i++) {
			json_t *o = json_loads(d[i].body, 0, NULL);
			const char *a =
			    json_string_value(json_object_get(o, "account"));
			const char *st =
			    json_string_value(json_object_get(o, "state"));

			live = a && st && strcmp(a, id) == 0 &&
			       strcmp(st, "ended") != 0 &&
			       strcmp(st, "failed") != 0;
			json_decref(o);
		}
		if (n > 0)
			snprintf(after, sizeof(after), "%s", d[n - 1].id);
		cnl_store_docs_done(d, n);
	} while (!live && n == CNL_STORE_LIST_MAX);
	free(d);
	return live;
}

void cnl_api_h_cloud_delete(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *id = cnl_http_param(req, "account");
	int r;

	snprintf(c->target, sizeof(c->target), "%s", id);
	if (live_instances(c, id)) {
		cnl_http_error(resp, 409, "conflict",
		               "cloud account %s still has instances the "
		               "burst launched (cnlab cloud instances): they "
		               "are given back first",
		               id);
		return;
	}
	if ((r = cnl_store_doc_delete(c->api->store, "cloud", id)) < 0) {
		cnl_api_store_error(c, resp, r, "cloud account");
		return;
	}
	cnl_http_reply(resp, 200, json_pack("{s:s}", "deleted", id));
}

int cnl_api_cloud_open(struct cnl_api *api, const char *id,
                       struct cnl_cloud **ret, char *err, size_t errlen)
{
	struct cnl_store_doc d = {0};
	struct cnl_cloud_aws_config cfg = {0};
	json_t *o, *cr = NULL;
	char place[96];
	uint8_t *plain = NULL;
	size_t n = 0;
	int r;

	if ((r = cnl_store_doc_get(api->store, "cloud", id, &d)) < 0) {
		cnl_seterr(err, errlen, "cloud account %s: %s", id,
		           cnl_strerror(r));
		return r;
	}
	o = json_loads(d.body, 0, NULL);
	cnl_store_doc_done(&d);
	if (!o || !json_string_value(json_object_get(o, "provider")) ||
	    strcmp(json_string_value(json_object_get(o, "provider")), "aws")) {
		cnl_seterr(err, errlen,
		           "cloud account %s: only aws accounts can be used "
		           "for now",
		           id);
		json_decref(o);
		return -ENOTSUP;
	}
	if (!json_object_get(o, "credentials_sealed")) {
		cnl_seterr(err, errlen, "cloud account %s: no credentials", id);
		json_decref(o);
		return -CNL_ECONFIG;
	}
	snprintf(place, sizeof(place), "cloud/%s", id);
	if (!api->have_secrets_key ||
	    cnl_secret_open(
	        api->secrets_key, place,
	        json_string_value(json_object_get(o, "credentials_sealed")),
	        &plain, &n) < 0 ||
	    !(cr = json_loadb((const char *)plain, n, 0, NULL))) {
		cnl_seterr(err, errlen,
		           "cloud account %s: its credentials do not open "
		           "with this platform's secrets key",
		           id);
		if (plain) {
			explicit_bzero(plain, n);
			free(plain);
		}
		json_decref(o);
		return -EACCES;
	}
	explicit_bzero(plain, n);
	free(plain);
	{
		static const char *const bound[] = {
		    "endpoint", "region", "account", "access_key_id", NULL};

		for (int i = 0; bound[i]; i++) {
			json_t *a = json_object_get(o, bound[i]),
			       *b = json_object_get(cr, bound[i]);

			if ((a || b) && !json_equal(a, b)) {
				cnl_seterr(err, errlen,
				           "cloud account %s: its %s changed "
				           "since its credentials were sealed "
				           "(add the account again)",
				           id, bound[i]);
				json_decref(cr);
				json_decref(o);
				return -EACCES;
			}
		}
	}
	cfg.region = json_string_value(json_object_get(o, "region"));
	cfg.endpoint = json_string_value(json_object_get(o, "endpoint"));
	cfg.access_key = json_string_value(json_object_get(o, "access_key_id"));
	cfg.secret_key = json_string_value(json_object_get(cr, "secret"));
	cfg.session_token = json_string_value(json_object_get(cr, "token"));
	r = cnl_cloud_aws_new(&cfg, ret, err, errlen);
	/* The provider keeps its own copy; ours is wiped. */
	if (cfg.secret_key)
		explicit_bzero((char *)cfg.secret_key, strlen(cfg.secret_key));
	if (cfg.session_token)
		explicit_bzero((char *)cfg.session_token,
		               strlen(cfg.session_token));
	json_decref(cr);
	json_decref(o);
	return r;
}
