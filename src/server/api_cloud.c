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
#include <pthread.h>
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

static const char *const providers[] = {"aws",   "gcp", "azure",
                                        "naver", "kt",  NULL};

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

void cnl_api_cloud_account(struct cnl_api *api, const char *provider, char *id,
                           size_t idlen, json_t **acct)
{
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	int n = 0;

	*acct = NULL;
	id[0] = '\0';
	if (cnl_store_doc_list(api->store, "cloud", NULL, NULL,
	                       CNL_STORE_LIST_MAX, d, &n) == 0)
		for (int i = 0; i < n && !*acct; i++) {
			json_t *o = json_loads(d[i].body, 0, NULL);
			const char *p =
			    json_string_value(json_object_get(o, "provider"));

			if (p && strcmp(p, provider) == 0 &&
			    json_object_get(o, "credentials_sealed")) {
				*acct = o;
				snprintf(id, idlen, "%s", d[i].id);
			} else {
				json_decref(o);
			}
		}
	cnl_store_docs_done(d, n);
	free(d);
}

/* The account-declared types seen so far: kept for the life of the
 * process, so that what cnl_api_cloud_type() returns stays valid (an
 * account's types change rarely; a full table declares no more). */
#define DECLARED_MAX 256
static struct cnl_cloud_type declared[DECLARED_MAX];
static size_t ndeclared;
static pthread_mutex_t declared_mu = PTHREAD_MUTEX_INITIALIZER;

const struct cnl_cloud_type *
cnl_api_cloud_type(const json_t *acct, const char *provider, const char *name)
{
	const struct cnl_cloud_type *t = cnl_cloud_type_find(provider, name);
	const json_t *spec =
	    json_object_get(json_object_get(acct, "types"), name);
	struct cnl_cloud_type want;

	if (t || !json_is_object(spec))
		return t;
	want = (struct cnl_cloud_type){
	    .provider = provider,
	    .name = name,
	    .model = json_string_value(json_object_get(spec, "model")),
	    .gpus = (int)json_integer_value(json_object_get(spec, "gpus")),
	    .vcpus = (int)json_integer_value(json_object_get(spec, "vcpus")),
	    .mem_gib =
	        (int)json_integer_value(json_object_get(spec, "mem_gib")),
	    .on_demand_h = json_number_value(json_object_get(spec, "price_h"))};
	if (!want.model || want.gpus < 1 || !(want.on_demand_h > 0))
		return NULL;
	pthread_mutex_lock(&declared_mu);
	for (size_t i = 0; i < ndeclared && !t; i++) {
		const struct cnl_cloud_type *d = &declared[i];

		if (strcmp(d->provider, provider) == 0 &&
		    strcmp(d->name, name) == 0 &&
		    strcmp(d->model, want.model) == 0 && d->gpus == want.gpus &&
		    d->vcpus == want.vcpus && d->mem_gib == want.mem_gib &&
		    d->on_demand_h == want.on_demand_h)
			t = d;
	}
	if (!t && ndeclared < DECLARED_MAX) {
		want.provider = cnl_xstrdup(provider);
		want.name = cnl_xstrdup(name);
		want.model = cnl_xstrdup(want.model);
		declared[ndeclared] = want;
		t = &declared[ndeclared++];
	}
	pthread_mutex_unlock(&declared_mu);
	return t;
}

/* The "types" of a new account (instance types of its own: what each
 * holds and costs) into @o; 0, or -1 with the answer in @resp. */
static int declared_types(struct call *c, json_t *body, json_t *o,
                          struct cnl_http_response *resp)
{
	json_t *ts = json_object_get(body, "types"), *v;
	const char *k;

	if (!ts)
		return 0;
	if (!json_is_object(ts) || json_object_size(ts) > 64) {
		cnl_api_bad(resp, "field \"types\": an object of at most 64 "
		                  "{TYPE: {model, gpus, vcpus, mem_gib, "
		                  "price_h}}");
		return -1;
	}
	json_object_foreach (ts, k, v) {
		const char *model =
		    json_string_value(json_object_get(v, "model"));
		json_t *g = json_object_get(v, "gpus"),
		       *cpu = json_object_get(v, "vcpus"),
		       *mem = json_object_get(v, "mem_gib"),
		       *pr = json_object_get(v, "price_h");

		if (!k[0] || strlen(k) > 64 || !json_is_object(v) ||
		    json_object_size(v) != 5 || !model ||
		    cnl_catalog_find(&c->api->cat, model) < 0 ||
		    !json_is_integer(g) || json_integer_value(g) < 1 ||
		    json_integer_value(g) > 64 || !json_is_integer(cpu) ||
		    json_integer_value(cpu) < 1 ||
		    json_integer_value(cpu) > 4096 || !json_is_integer(mem) ||
		    json_integer_value(mem) < 1 ||
		    json_integer_value(mem) > 65536 || !json_is_number(pr) ||
		    !(json_number_value(pr) > 0) ||
		    json_number_value(pr) > 1e6) {
			cnl_http_error(
			    resp, 400, "bad_request",
			    "field \"types\": \"%.64s\" must be "
			    "{model: a GPU type of the catalog, gpus: "
			    "1..64, vcpus: 1..4096, mem_gib: 1..65536, "
			    "price_h: USD an hour above 0}",
			    k);
			return -1;
		}
	}
	json_object_set(o, "types", ts);
	return 0;
}

void cnl_api_cloud_offer(struct cnl_api *api, const char *provider,
                         const json_t *acct)
{
	struct cnl_ctl_cloud_offer o[16];
	char cluster[CNL_NAME_MAX];
	const struct cnl_cloud_type *t;
	size_t n = 0, k;
	json_t *v;

	snprintf(cluster, sizeof(cluster), "cloud-%s", provider);
	json_array_foreach (json_object_get(acct, "instance_types"), k, v)
		if (n < 16 && json_string_value(v) &&
		    (t = cnl_api_cloud_type(acct, provider,
		                            json_string_value(v))))
			o[n++] = (struct cnl_ctl_cloud_offer){
			    .cluster = cluster,
			    .model = t->model,
			    .gpus = t->gpus,
			    .cpu_milli = (int64_t)t->vcpus * 1000,
			    .mem_mib = (int64_t)t->mem_gib * 1024};
	cnl_ctl_cloud_offer(api->ctl, o, n);
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
		cnl_api_bad(resp, "field \"provider\": must be aws, gcp, "
		                  "azure, naver or kt");
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
	/* Admission counts on the cloud from now on, not from the burst's
	 * next tick (which checks the account can be used, and takes the
	 * offer back where it cannot). */
	if (c->api->burst && c->api->burst_strs[0]) {
		char id[CNL_ID_MAX];
		json_t *acct = NULL;

		if (enabled)
			cnl_api_cloud_account(c->api, provider, id, sizeof(id),
			                      &acct);
		cnl_api_cloud_offer(c->api, provider, acct);
		json_decref(acct);
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

	if (strcmp(provider, "naver") == 0) {
		/* Naver's own codes: the VPC servers are made in, and a
		 * region as Naver writes it. */
		if (!account[0] || strlen(account) > 20 ||
		    !all_digits(account, strlen(account)))
			return "field \"account\": for naver, the number of "
			       "the VPC servers are made in";
		if (n < 2 || n > 8 ||
		    strspn(region, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != n)
			return "field \"region\": for naver, a region code "
			       "such as KR";
		return NULL;
	}
	if (strcmp(provider, "kt") == 0) {
		/* The account's name (the API key's owner), and the id of
		 * the zone its VMs are made in. */
		if (!account[0] ||
		    strspn(account,
		           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
		           "OPQRSTUVWXYZ0123456789@._-") != strlen(account))
			return "field \"account\": for kt, the account's "
			       "name (letters, digits, @._-)";
		if (n < 1 || n > 63 ||
		    strspn(region, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
		                   "OPQRSTUVWXYZ0123456789-_.") != n)
			return "field \"region\": for kt, the id of the zone "
			       "VMs are made in";
		return NULL;
	}
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
	if (strcmp(provider, "gcp") == 0 &&
	    (n < 4 || region[n - 2] != '-' ||
	     !islower((unsigned char)region[n - 1])))
		return "field \"region\": for gcp, the zone instances are "
		       "made in (us-central1-a)";
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
	const char *email =
	    json_string_value(json_object_get(p, "client_email"));
	const char *client = json_string_value(json_object_get(p, "client_id"));
	const char *pub = akid    ? "access_key_id"
	                  : email ? "client_email"
	                          : "client_id";

	json_object_set_new(p, "id", json_string(id));
	if (akid || email || client)
		json_object_set_new(p, "credentials",
		                    json_pack("{s:s,s:b,s:O}", pub,
		                              akid    ? akid
		                              : email ? email
		                                      : client,
		                              "secret_set", 1, "key_id",
		                              json_object_get(p, "key_id")));
	json_object_del(p, "access_key_id");
	json_object_del(p, "client_email");
	json_object_del(p, "client_id");
	json_object_del(p, "credentials_sealed");
	json_object_del(p, "key_id");
	return p;
}

/* An endpoint: https://HOST[:PORT], or http://127.0.0.1:PORT (a test's
 * or a local proxy's), nothing after (but a plain path with @path_ok);
 * the credentials are sent there. */
static bool endpoint_ok(const char *e, bool path_ok)
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
	if (path_ok && *h == '/')
		h += strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU"
		               "VWXYZ0123456789/._-");
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
 * AWS's credentials @cr: the sealed part into *@plain (with the public
 * access key id, to bind it) and the access key id into @o; 0, or -1 with
 * the answer in @resp.
 */
static int aws_credentials(json_t *cr, bool other, json_t *o, json_t **plain,
                           struct cnl_http_response *resp)
{
	const char *akid, *secret, *token;

	akid = json_string_value(json_object_get(cr, "access_key_id"));
	secret = json_string_value(json_object_get(cr, "secret_access_key"));
	token = json_string_value(json_object_get(cr, "session_token"));
	/* Naver's and KT's API keys. */
	if (other && (!akid || !akid[0] || strlen(akid) > 128 ||
	              strspn(akid, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnop"
	                           "qrstuvwxyz0123456789_-") != strlen(akid) ||
	              token)) {
		cnl_api_bad(resp, token
		                      ? "field \"credentials.session_token\": "
		                        "only for aws"
		                      : "field \"credentials.access_key_id\": "
		                        "the API key (1..128 of letters, "
		                        "digits, _ and -)");
		return -1;
	}
	if (!other && (!akid || !aws_key_id(akid))) {
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
	*plain = json_pack("{s:s,s:s*,s:s}", "secret", secret, "token", token,
	                   "access_key_id", akid);
	json_object_set_new(o, "access_key_id", json_string(akid));
	return 0;
}

/*
 * GCP's: a service account's key (client_email, private_key,
 * [token_uri]), the key checked to be an RSA key that signs.
 */
static int gcp_credentials(json_t *cr, json_t *o, json_t **plain,
                           struct cnl_http_response *resp)
{
	const char *email, *key, *uri;
	char *jwt = NULL;

	email = json_string_value(json_object_get(cr, "client_email"));
	key = json_string_value(json_object_get(cr, "private_key"));
	uri = json_string_value(json_object_get(cr, "token_uri"));
	if (!email || !cnl_api_printable(email, 256) || !strchr(email, '@')) {
		cnl_api_bad(resp, "field \"credentials.client_email\": the "
		                  "service account's e-mail address");
		return -1;
	}
	if (!key || strlen(key) > 16384 ||
	    cnl_cloud_gcp_assertion(email, key, "check", 0, &jwt) < 0) {
		cnl_api_bad(resp,
		            "field \"credentials.private_key\": the "
		            "service account key's RSA private key (PEM)");
		return -1;
	}
	free(jwt);
	if (json_object_get(cr, "token_uri") && !endpoint_ok(uri, true)) {
		cnl_api_bad(resp,
		            "field \"credentials.token_uri\": an https:// "
		            "URL (http:// only to 127.0.0.1)");
		return -1;
	}
	*plain = json_pack("{s:s,s:s,s:s*}", "private_key", key, "client_email",
	                   email, "token_uri", uri);
	json_object_set_new(o, "client_email", json_string(email));
	return 0;
}

/* An Azure tenant or client id: a GUID. */
static bool guid_ok(const char *s)
{
	if (!s || strlen(s) != 36)
		return false;
	for (int i = 0; i < 36; i++)
		if ((i == 8 || i == 13 || i == 18 || i == 23)
		        ? s[i] != '-'
		        : !isxdigit((unsigned char)s[i]))
			return false;
	return true;
}

/* Azure's: a service principal (tenant_id, client_id, client_secret,
 * [token_uri]). */
static int azure_credentials(json_t *cr, json_t *o, json_t **plain,
                             struct cnl_http_response *resp)
{
	const char *tenant, *client, *secret, *uri;

	tenant = json_string_value(json_object_get(cr, "tenant_id"));
	client = json_string_value(json_object_get(cr, "client_id"));
	secret = json_string_value(json_object_get(cr, "client_secret"));
	uri = json_string_value(json_object_get(cr, "token_uri"));
	if (!guid_ok(tenant) || !guid_ok(client)) {
		cnl_api_bad(resp, guid_ok(tenant)
		                      ? "field \"credentials.client_id\": the "
		                        "service principal's application id "
		                        "(a GUID)"
		                      : "field \"credentials.tenant_id\": the "
		                        "directory (tenant) id (a GUID)");
		return -1;
	}
	if (!secret || !cnl_api_printable(secret, 256)) {
		cnl_api_bad(resp, "field \"credentials.client_secret\": "
		                  "required, 1..256 printable characters");
		return -1;
	}
	if (json_object_get(cr, "token_uri") && !endpoint_ok(uri, true)) {
		cnl_api_bad(resp,
		            "field \"credentials.token_uri\": an https:// "
		            "URL (http:// only to 127.0.0.1)");
		return -1;
	}
	*plain = json_pack("{s:s,s:s,s:s,s:s*}", "client_secret", secret,
	                   "tenant_id", tenant, "client_id", client,
	                   "token_uri", uri);
	json_object_set_new(o, "client_id", json_string(client));
	return 0;
}

/*
 * The "credentials" of a new account @id into @o (its public part:
 * access_key_id or client_email; credentials_sealed, key_id): 0, or -1
 * with the answer in @resp.
 */
static int seal_credentials(struct call *c, const char *provider,
                            const char *id, json_t *cr, json_t *o,
                            struct cnl_http_response *resp)
{
	static const char *const aws_keys[] = {
	    "access_key_id", "secret_access_key", "session_token", NULL};
	static const char *const gcp_keys[] = {"client_email", "private_key",
	                                       "token_uri", NULL};
	static const char *const azure_keys[] = {
	    "tenant_id", "client_id", "client_secret", "token_uri", NULL};
	const char *const *keys = strcmp(provider, "gcp") == 0     ? gcp_keys
	                          : strcmp(provider, "azure") == 0 ? azure_keys
	                                                           : aws_keys;
	char place[96], kid[CNL_SECRET_KEY_ID], *sealed = NULL, *text;
	json_t *v, *plain = NULL;
	const char *k;
	int r;

	if (!json_is_object(cr)) {
		cnl_api_bad(resp,
		            keys == gcp_keys
		                ? "field \"credentials\": must be an object "
		                  "{client_email, private_key[, token_uri]}"
		            : keys == azure_keys
		                ? "field \"credentials\": must be an object "
		                  "{tenant_id, client_id, client_secret[, "
		                  "token_uri]}"
		                : "field \"credentials\": must be an object "
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
	if ((keys == gcp_keys ? gcp_credentials(cr, o, &plain, resp)
	     : keys == azure_keys
	         ? azure_credentials(cr, o, &plain, resp)
	         : aws_credentials(cr, strcmp(provider, "aws") != 0, o, &plain,
	                           resp)) < 0)
		return -1;
	if (!c->api->have_secrets_key) {
		json_decref(plain);
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
	 * region, account and public key id), so that a row rewritten by
	 * someone without the key (the endpoint to their host) does not
	 * open. */
	json_object_set(plain, "endpoint", json_object_get(o, "endpoint"));
	json_object_set(plain, "region", json_object_get(o, "region"));
	json_object_set(plain, "account", json_object_get(o, "account"));
	if (json_object_get(o, "resource_group"))
		json_object_set(plain, "resource_group",
		                json_object_get(o, "resource_group"));
	if (json_object_get(o, "subnet"))
		json_object_set(plain, "subnet", json_object_get(o, "subnet"));
	if (!json_object_get(plain, "endpoint"))
		json_object_del(plain, "endpoint");
	text = json_dumps(plain, JSON_COMPACT);
	json_decref(plain);
	snprintf(place, sizeof(place), "cloud/%s", id);
	r = cnl_secret_seal(c->api->secrets_key, place, (uint8_t *)text,
	                    strlen(text), &sealed);
	explicit_bzero(text, strlen(text));
	free(text);
	if (r < 0) {
		cnl_http_error(resp, 500, "internal",
		               "cannot seal the credentials: %s",
		               cnl_strerror(r));
		return -1;
	}
	cnl_secret_key_id(c->api->secrets_key, kid);
	json_object_set_new(o, "credentials_sealed", json_string(sealed));
	json_object_set_new(o, "key_id", json_string(kid));
	free(sealed);
	return 0;
}

/* An Azure account's resource group and subnet (where its VMs are made)
 * into @o; 0, or -1 with the answer in @resp. */
static int azure_place(json_t *body, const char *account, json_t *o,
                       struct cnl_http_response *resp)
{
	const char *rg =
	    json_string_value(json_object_get(body, "resource_group"));
	const char *sn = json_string_value(json_object_get(body, "subnet"));
	char want[128];

	if (!rg || !rg[0] || strlen(rg) > 90 ||
	    strspn(rg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	               "0123456789-_.()") != strlen(rg)) {
		cnl_api_bad(resp, "field \"resource_group\": required for "
		                  "azure, 1..90 of letters, digits, -_.()");
		return -1;
	}
	snprintf(want, sizeof(want), "/subscriptions/%s/resourceGroups/",
	         account);
	if (!sn || strncmp(sn, want, strlen(want)) != 0 || strlen(sn) > 400 ||
	    !strstr(sn, "/providers/Microsoft.Network/virtualNetworks/") ||
	    !strstr(sn, "/subnets/") ||
	    strspn(sn, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	               "0123456789-_.()/") != strlen(sn)) {
		cnl_api_bad(resp, "field \"subnet\": required for azure, the "
		                  "subnet's resource id in this subscription "
		                  "(/subscriptions/ID/resourceGroups/RG/"
		                  "providers/Microsoft.Network/virtualNetworks/"
		                  "VNET/subnets/NAME)");
		return -1;
	}
	json_object_set_new(o, "resource_group", json_string(rg));
	json_object_set_new(o, "subnet", json_string(sn));
	return 0;
}

/* A Naver account's subnet (the number of the subnet of its VPC servers
 * are put on; required) or a KT account's network (its id; optional) into
 * @o; 0, or -1 with the answer in @resp. */
static int network_place(const char *provider, json_t *body, json_t *o,
                         struct cnl_http_response *resp)
{
	const char *sn = json_string_value(json_object_get(body, "subnet"));
	bool naver = strcmp(provider, "naver") == 0;

	if (json_object_get(body, "resource_group")) {
		cnl_api_bad(resp, "field \"resource_group\": only for azure");
		return -1;
	}
	if (naver &&
	    (!sn || !sn[0] || strlen(sn) > 20 || !all_digits(sn, strlen(sn)))) {
		cnl_api_bad(resp, "field \"subnet\": required for naver, the "
		                  "number of the VPC's subnet servers are put "
		                  "on");
		return -1;
	}
	if (!naver && json_object_get(body, "subnet") &&
	    (!sn || !sn[0] || strlen(sn) > 63 ||
	     strspn(sn, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                "0123456789-_.") != strlen(sn))) {
		cnl_api_bad(resp, "field \"subnet\": for kt, the id of the "
		                  "network VMs are put on");
		return -1;
	}
	if (sn)
		json_object_set_new(o, "subnet", json_string(sn));
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
	    "credentials", "endpoint", "prices", "resource_group",
	    "subnet",      "types",    NULL};
	struct call *c = call;
	const char *provider, *account, *region, *why;
	char id[CNL_ID_MAX], name[CNL_STORE_NAME_MAX];
	json_t *body, *types, *o, *ep;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(provider = cnl_api_get_string(body, "provider", 16, resp)) ||
	    !(account = cnl_api_get_string(body, "account", 40, resp)) ||
	    !(region = cnl_api_get_string(body, "region", 65, resp)))
		goto out;
	if (!in_set(provider, providers)) {
		cnl_api_bad(resp, "field \"provider\": must be aws, gcp, "
		                  "azure, naver or kt");
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
		if (!endpoint_ok(e, strcmp(provider, "kt") == 0)) {
			cnl_api_bad(resp, "field \"endpoint\": an https:// URL "
			                  "(http:// only to 127.0.0.1)");
			json_decref(o);
			goto out;
		}
		/* KT's is the API's whole URL: its path too. */
		if (strcmp(provider, "kt") == 0 &&
		    !strchr(strstr(e, "://") + 3, '/')) {
			cnl_api_bad(resp,
			            "field \"endpoint\": for kt, the API's "
			            "URL with its path (https://HOST/server/"
			            "v1/client/api)");
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
	if (declared_types(c, body, o, resp) < 0) {
		json_decref(o);
		goto out;
	}
	if ((strcmp(provider, "naver") == 0 || strcmp(provider, "kt") == 0) &&
	    network_place(provider, body, o, resp) < 0) {
		json_decref(o);
		goto out;
	}
	if (strcmp(provider, "azure") == 0 &&
	    azure_place(body, account, o, resp) < 0) {
		json_decref(o);
		goto out;
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
	struct cnl_cloud_gcp_config gc = {0};
	struct cnl_cloud_azure_config ac = {0};
	struct cnl_cloud_naver_config nc = {0};
	struct cnl_cloud_kt_config kc = {0};
	const char *prov;
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
	prov = json_string_value(json_object_get(o, "provider"));
	if (!prov || !in_set(prov, providers)) {
		cnl_seterr(err, errlen,
		           "cloud account %s: its provider cannot be used", id);
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
		    "endpoint",       "region",       "account",
		    "access_key_id",  "client_email", "client_id",
		    "resource_group", "subnet",       NULL};

		for (int i = 0; bound[i]; i++) {
			json_t *a = json_object_get(o, bound[i]),
			       *b = json_object_get(cr, bound[i]);

			/* Sealed as null: absent. */
			a = json_is_null(a) ? NULL : a;
			b = json_is_null(b) ? NULL : b;

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
	if (strcmp(prov, "kt") == 0) {
		kc.zone = json_string_value(json_object_get(o, "region"));
		kc.network = json_string_value(json_object_get(o, "subnet"));
		kc.endpoint = json_string_value(json_object_get(o, "endpoint"));
		kc.api_key =
		    json_string_value(json_object_get(o, "access_key_id"));
		kc.secret_key =
		    json_string_value(json_object_get(cr, "secret"));
		r = cnl_cloud_kt_new(&kc, ret, err, errlen);
		if (kc.secret_key)
			explicit_bzero((char *)kc.secret_key,
			               strlen(kc.secret_key));
		json_decref(cr);
		json_decref(o);
		return r;
	}
	if (strcmp(prov, "naver") == 0) {
		nc.region = json_string_value(json_object_get(o, "region"));
		nc.vpc_no = json_string_value(json_object_get(o, "account"));
		nc.subnet_no = json_string_value(json_object_get(o, "subnet"));
		nc.endpoint = json_string_value(json_object_get(o, "endpoint"));
		nc.access_key =
		    json_string_value(json_object_get(o, "access_key_id"));
		nc.secret_key =
		    json_string_value(json_object_get(cr, "secret"));
		r = cnl_cloud_naver_new(&nc, ret, err, errlen);
		if (nc.secret_key)
			explicit_bzero((char *)nc.secret_key,
			               strlen(nc.secret_key));
		json_decref(cr);
		json_decref(o);
		return r;
	}
	if (strcmp(prov, "azure") == 0) {
		ac.subscription =
		    json_string_value(json_object_get(o, "account"));
		ac.location = json_string_value(json_object_get(o, "region"));
		ac.resource_group =
		    json_string_value(json_object_get(o, "resource_group"));
		ac.subnet = json_string_value(json_object_get(o, "subnet"));
		ac.endpoint = json_string_value(json_object_get(o, "endpoint"));
		ac.tenant_id =
		    json_string_value(json_object_get(cr, "tenant_id"));
		ac.client_id =
		    json_string_value(json_object_get(o, "client_id"));
		ac.client_secret =
		    json_string_value(json_object_get(cr, "client_secret"));
		ac.token_uri =
		    json_string_value(json_object_get(cr, "token_uri"));
		r = cnl_cloud_azure_new(&ac, ret, err, errlen);
		if (ac.client_secret)
			explicit_bzero((char *)ac.client_secret,
			               strlen(ac.client_secret));
		json_decref(cr);
		json_decref(o);
		return r;
	}
	if (strcmp(prov, "gcp") == 0) {
		gc.project = json_string_value(json_object_get(o, "account"));
		gc.zone = json_string_value(json_object_get(o, "region"));
		gc.endpoint = json_string_value(json_object_get(o, "endpoint"));
		gc.client_email =
		    json_string_value(json_object_get(o, "client_email"));
		gc.private_key =
		    json_string_value(json_object_get(cr, "private_key"));
		gc.token_uri =
		    json_string_value(json_object_get(cr, "token_uri"));
		r = cnl_cloud_gcp_new(&gc, ret, err, errlen);
		if (gc.private_key)
			explicit_bzero((char *)gc.private_key,
			               strlen(gc.private_key));
		json_decref(cr);
		json_decref(o);
		return r;
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
