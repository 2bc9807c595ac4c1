/*
 * cloud_gcp.c - the Google Compute Engine provider of cloud.h: the
 * Compute REST API (v1) with OAuth 2.0 bearer tokens that a service
 * account's key earns (RFC 7523: a JWT assertion signed RS256).
 *
 * Authentication.  The operator gives the service account's JSON key (its
 * client_email, private_key and token_uri).  The plugin signs an
 * assertion {iss: the account, scope: compute, aud: the token URI, iat,
 * exp: an hour later} with the key, trades it at the token URI for an
 * access token, and keeps that token until a minute before it expires
 * (or until a 401 says it is no longer good: then it asks once afresh).
 * The key and the tokens are held in memory only and never logged.
 *
 * Instances.  GCP names instances; the plugin's instance id is the name.
 * A launch of N makes N instances named from the launch's client token
 * ("cnlab-" and the token in lowercase, "-K"), each by instances.insert
 * with a requestId derived from the token, so that a retry after a lost
 * answer makes nothing twice (the same request, or the name taken by the
 * first: 409 alreadyExists, which is then the instance).  An insert
 * answers with an operation; Compute Engine reports capacity only when
 * the operation ends (ZONE_RESOURCE_POOL_EXHAUSTED), so the plugin waits
 * for it (operations.wait).  All or none: a launch that fails part-way
 * deletes what it made.
 *
 * Tags become metadata items ("cnlab-record" ...: free text, read back
 * exactly) and every instance carries the label cnlab-managed=true, which
 * describe() filters on to list what CNLab launched.  The user data is
 * the "startup-script" metadata item, which Google's images run at boot.
 *
 * Spot: scheduling.provisioningModel SPOT with instanceTerminationAction
 * STOP, so that a preempted VM stays (TERMINATED) and can be seen.  CNLab
 * never stops an instance (it deletes them), so a spot VM that is
 * stopping or stopped was preempted: describe() marks it interrupted.
 * An instance that no longer exists is described as "terminated".
 *
 * Errors are Google's JSON {"error": {"code", "message", "errors":
 * [{"reason"}], "status"}} or an operation's error.errors[].code,
 * classified as cloud.h says; 429 and 5xx are retried with back-off.
 * Spot prices are Google's published list (cloud_types.c), not a market.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>

#include "common/base64.h"
#include "common/time.h"
#include "common/util.h"
#include "net/sigv4.h"
#include "server/cloud.h"
#include "server/cloud_rest.h"

#define SCOPE         "https://www.googleapis.com/auth/compute"
#define TOKEN_URI     "https://oauth2.googleapis.com/token"
#define API_ENDPOINT  "https://compute.googleapis.com"
#define MANAGED_LABEL "cnlab-managed"
/* Compute Engine takes 256 KiB of metadata in all. */
#define USER_DATA_MAX (128 * 1024)
/* How long a launch waits for Compute Engine to end an insert. */
#define OP_WAIT_MS 300000
/* One operations.wait call: Google holds it up to two minutes. */
#define WAIT_CALL_MS 135000

struct gcp {
	struct cnl_cloud base;
	struct cnl_cloud_rest rest;
	char *token_uri; /* the assertion's audience */
	char *email;
	EVP_PKEY *key;
	char prefix[256]; /* "/compute/v1/projects/P/zones/Z" */
	char zone[64];
};

static void copy(char *dst, size_t n, const char *s)
{
	snprintf(dst, n, "%s", s ? s : "");
}

static char *b64url(const void *p, size_t n)
{
	return cnl_b64_encode_new(p, n, CNL_B64_URL);
}

/* An encrypted key is refused, never asked a passphrase for (OpenSSL's
 * default would read the terminal). */
static int no_passphrase(char *buf, int size, int rw, void *u)
{
	(void)buf;
	(void)size;
	(void)rw;
	(void)u;
	return -1;
}

static EVP_PKEY *load_key(const char *pem)
{
	BIO *bio = BIO_new_mem_buf(pem, -1);
	EVP_PKEY *k =
	    bio ? PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL)
	        : NULL;

	BIO_free(bio);
	if (k && EVP_PKEY_base_id(k) != EVP_PKEY_RSA) {
		EVP_PKEY_free(k);
		k = NULL;
	}
	return k;
}

/* The assertion of @email for @aud, signed with @key, valid an hour from
 * @now_s; NULL when the key cannot sign. */
static char *assertion(EVP_PKEY *key, const char *email, const char *aud,
                       int64_t now_s)
{
	static const char header[] = "{\"alg\":\"RS256\",\"typ\":\"JWT\"}";
	json_t *claims = json_pack(
	    "{s:s,s:s,s:s,s:I,s:I}", "iss", email, "scope", SCOPE, "aud", aud,
	    "iat", (json_int_t)now_s, "exp", (json_int_t)(now_s + 3600));
	char *cj = json_dumps(claims, JSON_COMPACT), *h = NULL, *c = NULL,
	     *input = NULL, *sig64 = NULL, *out = NULL;
	unsigned char sig[1024];
	size_t siglen = sizeof(sig), n;
	EVP_MD_CTX *md = EVP_MD_CTX_new();

	json_decref(claims);
	if (!cj || !md)
		goto out;
	h = b64url(header, strlen(header));
	c = b64url(cj, strlen(cj));
	n = strlen(h) + strlen(c) + 2;
	input = cnl_xmalloc(n);
	snprintf(input, n, "%s.%s", h, c);
	if (EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, key) != 1 ||
	    EVP_DigestSign(md, sig, &siglen, (unsigned char *)input,
	                   strlen(input)) != 1)
		goto out;
	sig64 = b64url(sig, siglen);
	n = strlen(input) + strlen(sig64) + 2;
	out = cnl_xmalloc(n);
	snprintf(out, n, "%s.%s", input, sig64);
out:
	EVP_MD_CTX_free(md);
	free(cj);
	free(h);
	free(c);
	free(input);
	free(sig64);
	return out;
}

int cnl_cloud_gcp_assertion(const char *email, const char *private_key_pem,
                            const char *aud, int64_t now_s, char **ret)
{
	EVP_PKEY *k = load_key(private_key_pem);

	if (!k)
		return -EINVAL;
	*ret = assertion(k, email, aud, now_s);
	EVP_PKEY_free(k);
	return *ret ? 0 : -EINVAL;
}

/* Google's error codes, by kind (cnl_cloud_rest_classify()). */
static const char *const capacity[] = {
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "QUOTA_EXCEEDED",
    "quotaExceeded",
    "RESOURCE_NOT_READY",
    NULL};
static const char *const throttled[] = {
    "rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED", NULL};
static const char *const auth[] = {
    "forbidden",           "insufficientPermissions",
    "accessNotConfigured", "authError",
    "invalid_grant",       "unauthorized_client",
    "PERMISSION_DENIED",   NULL};

/* The reason and message of Google's error document @o into @e. */
static void read_error(const json_t *o, struct cnl_cloud_error *e)
{
	const json_t *er = json_object_get(o, "error");
	const char *reason = json_string_value(json_object_get(
	    json_array_get(json_object_get(er, "errors"), 0), "reason"));
	const char *msg = json_string_value(json_object_get(er, "message"));

	if (!reason)
		reason = json_string_value(json_object_get(er, "status"));
	copy(e->code, sizeof(e->code), reason ? reason : "Unknown");
	copy(e->message, sizeof(e->message), msg);
}

/* The token request: a fresh assertion, signed. */
static char *grant(void *ud, struct cnl_cloud_error *e)
{
	struct gcp *g = ud;
	char *jwt = assertion(g->key, g->email, g->token_uri,
	                      cnl_time_now_ms() / 1000),
	     *esc, *form;
	size_t n;

	if (!jwt) {
		e->kind = CNL_CLOUD_AUTH;
		copy(e->code, sizeof(e->code), "BadKey");
		copy(e->message, sizeof(e->message),
		     "the service account's key cannot sign");
		return NULL;
	}
	esc = cnl_sigv4_escape(jwt);
	n = strlen(esc) + 96;
	form = cnl_xmalloc(n);
	snprintf(form, n,
	         "grant_type=urn%%3Aietf%%3Aparams%%3Aoauth%%3Agrant-type%%3A"
	         "jwt-bearer&assertion=%s",
	         esc);
	explicit_bzero(jwt, strlen(jwt));
	explicit_bzero(esc, strlen(esc));
	free(jwt);
	free(esc);
	return form;
}

/* The last part of a URL ("zones/us-central1-a/machineTypes/g2-standard-4"
 * -> "g2-standard-4"). */
static const char *last_part(const char *url)
{
	const char *s = url ? strrchr(url, '/') : NULL;

	return s ? s + 1 : url ? url : "";
}

static const char *meta_item(const json_t *inst, const char *key)
{
	size_t i;
	json_t *it;

	json_array_foreach (
	    json_object_get(json_object_get(inst, "metadata"), "items"), i,
	    it) {
		const char *k = json_string_value(json_object_get(it, "key"));

		if (k && strcmp(k, key) == 0)
			return json_string_value(json_object_get(it, "value"));
	}
	return NULL;
}

/* An instance resource as cloud.h describes it; false when it has none
 * of the fields an instance has. */
static bool read_instance(const json_t *o, struct cnl_cloud_instance *out)
{
	const char *name = json_string_value(json_object_get(o, "name"));
	const char *st = json_string_value(json_object_get(o, "status"));
	const char *model = json_string_value(json_object_get(
	    json_object_get(o, "scheduling"), "provisioningModel"));

	memset(out, 0, sizeof(*out));
	if (!name || !st || strlen(name) >= sizeof(out->id))
		return false;
	copy(out->id, sizeof(out->id), name);
	copy(out->type, sizeof(out->type),
	     last_part(json_string_value(json_object_get(o, "machineType"))));
	copy(out->zone, sizeof(out->zone),
	     last_part(json_string_value(json_object_get(o, "zone"))));
	copy(out->private_ip, sizeof(out->private_ip),
	     json_string_value(json_object_get(
	         json_array_get(json_object_get(o, "networkInterfaces"), 0),
	         "networkIP")));
	copy(out->record, sizeof(out->record), meta_item(o, "cnlab-record"));
	out->spot = model && strcmp(model, "SPOT") == 0;
	if (strcmp(st, "PROVISIONING") == 0 || strcmp(st, "STAGING") == 0 ||
	    strcmp(st, "REPAIRING") == 0)
		copy(out->state, sizeof(out->state), "pending");
	else if (strcmp(st, "RUNNING") == 0)
		copy(out->state, sizeof(out->state), "running");
	else if (strcmp(st, "STOPPING") == 0 || strcmp(st, "SUSPENDING") == 0)
		copy(out->state, sizeof(out->state), "stopping");
	else
		copy(out->state, sizeof(out->state), "stopped");
	/* CNLab deletes, never stops: a spot VM stopping was preempted. */
	if (out->spot && strcmp(out->state, "pending") != 0 &&
	    strcmp(out->state, "running") != 0) {
		out->interrupted = true;
		copy(out->reason, sizeof(out->reason),
		     "preempted: Compute Engine reclaimed the spot VM");
	} else if (strcmp(out->state, "stopping") == 0 ||
	           strcmp(out->state, "stopped") == 0) {
		snprintf(out->reason, sizeof(out->reason),
		         "stopped outside CNLab (%s)", st);
	}
	return true;
}

static int protocol(struct cnl_cloud_error *e, const char *what)
{
	e->kind = CNL_CLOUD_PROTOCOL;
	copy(e->code, sizeof(e->code), "BadAnswer");
	snprintf(e->message, sizeof(e->message), "Compute Engine's answer: %s",
	         what);
	return -EPROTO;
}

/* A requestId (a UUID) that is the same for the same @name. */
static void request_id(const char *what, const char *name, char out[37])
{
	unsigned char h[SHA256_DIGEST_LENGTH];
	char in[256];
	int o = 0;

	snprintf(in, sizeof(in), "%s/%s", what, name);
	SHA256((const unsigned char *)in, strlen(in), h);
	h[6] = (unsigned char)((h[6] & 0x0f) | 0x50); /* version 5's shape */
	h[8] = (unsigned char)((h[8] & 0x3f) | 0x80);
	for (int i = 0; i < 16; i++) {
		o += snprintf(out + o, (size_t)(37 - o), "%02x", h[i]);
		if (i == 3 || i == 5 || i == 7 || i == 9)
			out[o++] = '-';
	}
	out[36] = '\0';
}

/* Wait for operation @op to end: 0 when it ended without error, else the
 * error it ended with (or could not be waited for) in @e. */
static bool name_ok(const char *s)
{
	size_t n = strlen(s);

	return n > 0 && n < 64 &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789") >= 1 &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-_.") == n;
}

static int wait_op(struct gcp *g, json_t *op, struct cnl_cloud_error *e)
{
	int64_t until = cnl_time_now_ms() + OP_WAIT_MS;
	json_t *cur = json_incref(op), *errs;
	bool waited = false;
	int r = 0;

	for (;;) {
		const char *st =
		    json_string_value(json_object_get(cur, "status"));
		const char *name =
		    json_string_value(json_object_get(cur, "name"));
		char path[512];
		json_t *next = NULL;

		if (st && strcmp(st, "DONE") == 0)
			break;
		if (!name || !name_ok(name)) {
			json_decref(cur);
			return protocol(e, "an operation without a name that "
			                   "can be sent back");
		}
		if (cnl_time_now_ms() >= until) {
			e->kind = CNL_CLOUD_UNAVAILABLE;
			copy(e->code, sizeof(e->code), "OperationTimeout");
			snprintf(e->message, sizeof(e->message),
			         "operation %s did not end in %d s", name,
			         OP_WAIT_MS / 1000);
			json_decref(cur); /* name with it */
			return -EIO;
		}
		/* Google may hold a wait up to two minutes, or answer at
		 * once: never more than a call a second. */
		if (waited)
			sleep(1);
		waited = true;
		snprintf(path, sizeof(path), "%s/operations/%s/wait", g->prefix,
		         name);
		if ((r = cnl_cloud_rest_call_long(
		         &g->rest, "POST", path, WAIT_CALL_MS, &next, e)) < 0) {
			json_decref(cur);
			return r;
		}
		json_decref(cur);
		cur = next;
	}
	errs = json_object_get(json_object_get(cur, "error"), "errors");
	if (json_array_size(errs) > 0) {
		json_t *x = json_array_get(errs, 0);

		copy(e->code, sizeof(e->code),
		     json_string_value(json_object_get(x, "code")));
		copy(e->message, sizeof(e->message),
		     json_string_value(json_object_get(x, "message")));
		e->kind = cnl_cloud_rest_classify(&g->rest, 0, e->code);
		/* An operation's errors are final: no status to retry. */
		if (e->kind == CNL_CLOUD_UNAVAILABLE)
			e->kind = CNL_CLOUD_INVALID;
		r = cnl_cloud_errno(e->kind);
	}
	json_decref(cur);
	return r;
}

static int get_instance(struct gcp *g, const char *name,
                        struct cnl_cloud_instance *out,
                        struct cnl_cloud_error *e)
{
	char path[512];
	json_t *o = NULL;
	int r;

	snprintf(path, sizeof(path), "%s/instances/%s", g->prefix, name);
	if ((r = cnl_cloud_rest_call(&g->rest, "GET", path, NULL, &o, e)) < 0)
		return r;
	if (!read_instance(o, out))
		r = protocol(e, "an instance without name or status");
	json_decref(o);
	return r;
}

static int delete_one(struct gcp *g, const char *name,
                      struct cnl_cloud_error *e)
{
	char path[512], rid[37];
	json_t *o = NULL;
	int r;

	request_id("delete", name, rid);
	snprintf(path, sizeof(path), "%s/instances/%s?requestId=%s", g->prefix,
	         name, rid);
	r = cnl_cloud_rest_call(&g->rest, "DELETE", path, NULL, &o, e);
	json_decref(o);
	return r == -ENOENT ? 0 : r;
}

/* The insert of @name for launch @l. */
static json_t *insert_body(struct gcp *g, const struct cnl_cloud_launch *l,
                           const char *name)
{
	bool spot = l->market == CNL_CLOUD_SPOT;
	json_t *items = json_array(), *nic = json_object(), *o;
	bool ok = true;
	char mt[256];

	if (l->user_data)
		ok &= json_array_append_new(
		          items, json_pack("{s:s,s:s}", "key", "startup-script",
		                           "value", l->user_data)) == 0;
	for (size_t i = 0; i < l->ntags; i++) {
		char k[128];
		size_t j = 0;

		/* Metadata keys: [a-zA-Z0-9-_]; "cnlab:record" ->
		 * "cnlab-record". */
		for (const char *s = l->tags[i].key; *s && j + 1 < sizeof(k);
		     s++)
			k[j++] = (*s >= 'a' && *s <= 'z') ||
			                 (*s >= 'A' && *s <= 'Z') ||
			                 (*s >= '0' && *s <= '9') || *s == '_'
			             ? *s
			             : '-';
		k[j] = '\0';
		ok &= json_array_append_new(
		          items, json_pack("{s:s,s:s}", "key", k, "value",
		                           l->tags[i].value ? l->tags[i].value
		                                            : "")) == 0;
	}
	if (!ok) {
		json_decref(items);
		json_decref(nic);
		return NULL;
	}
	if (l->subnet)
		json_object_set_new(nic, "subnetwork", json_string(l->subnet));
	else
		json_object_set_new(nic, "network",
		                    json_string("global/networks/default"));
	snprintf(mt, sizeof(mt), "zones/%s/machineTypes/%s", g->zone,
	         l->instance_type);
	o = json_pack(
	    "{s:s,s:s,s:[{s:b,s:b,s:{s:s}}],s:[o],s:{s:o},s:{s:s},"
	    "s:{s:s,s:s,s:b}}",
	    "name", name, "machineType", mt, "disks", "boot", 1, "autoDelete",
	    1, "initializeParams", "sourceImage", l->image, "networkInterfaces",
	    nic, "metadata", "items", items, "labels", MANAGED_LABEL, "true",
	    "scheduling", "provisioningModel", spot ? "SPOT" : "STANDARD",
	    "onHostMaintenance", "TERMINATE", "automaticRestart", !spot);
	if (spot)
		json_object_set_new(json_object_get(o, "scheduling"),
		                    "instanceTerminationAction",
		                    json_string("STOP"));
	return o;
}

static int provision(struct cnl_cloud *c, const struct cnl_cloud_launch *l,
                     struct cnl_cloud_instance *ret, size_t cap, size_t *ret_n,
                     struct cnl_cloud_error *e)
{
	struct gcp *g = (struct gcp *)c;
	char names[CNL_CLOUD_LAUNCH_MAX][64];
	int made = 0, r = 0;

	*ret_n = 0;
	memset(e, 0, sizeof(*e));
	if (!l->instance_type || !name_ok(l->instance_type) || !l->image ||
	    !*l->image || strlen(l->image) > 512 || l->count < 1 ||
	    l->count > CNL_CLOUD_LAUNCH_MAX || !l->client_token ||
	    !*l->client_token || strlen(l->client_token) > 64 ||
	    (size_t)l->count > cap ||
	    (l->user_data && strlen(l->user_data) > USER_DATA_MAX)) {
		e->kind = CNL_CLOUD_INVALID;
		snprintf(
		    e->message, sizeof(e->message),
		    "launch: a type name, an image, 1..%d instances within "
		    "the answer's room, a client token of 1..64 and user "
		    "data of at most %d bytes are required",
		    CNL_CLOUD_LAUNCH_MAX, USER_DATA_MAX);
		return -EINVAL;
	}
	for (int k = 0; k < l->count; k++) {
		char path[512], rid[37];
		json_t *body, *op = NULL;

		cnl_cloud_instance_name(l->client_token, k, names[k],
		                        sizeof(names[k]));
		request_id("insert", names[k], rid);
		snprintf(path, sizeof(path), "%s/instances?requestId=%s",
		         g->prefix, rid);
		body = insert_body(g, l, names[k]);
		if (!body) {
			/* Not UTF-8 (user data, a tag), or out of memory. */
			e->kind = CNL_CLOUD_INVALID;
			copy(e->message, sizeof(e->message),
			     "launch: user data and tags must be UTF-8 text");
			r = -EINVAL;
			break;
		}
		r = cnl_cloud_rest_call(&g->rest, "POST", path, body, &op, e);
		json_decref(body);
		if (r == -EEXIST) {
			/* Made by an earlier try of this launch (the name is
			 * the launch's): it is the instance. */
			made = k + 1;
			r = 0;
			continue;
		}
		/* Accepted, or its fate unknown (no answer): it may exist
		 * whatever comes next, so it is deleted if the launch
		 * fails. */
		if (r == 0 || e->kind == CNL_CLOUD_UNAVAILABLE ||
		    e->kind == CNL_CLOUD_THROTTLED)
			made = k + 1;
		if (r == 0)
			r = wait_op(g, op, e);
		json_decref(op);
		if (r < 0)
			break;
	}
	for (int k = 0; r == 0 && k < l->count; k++) {
		r = get_instance(g, names[k], &ret[k], e);
		if (r == -ENOENT)
			r = protocol(e, "a launched instance is not there");
	}
	if (r < 0) {
		struct cnl_cloud_error de;

		/* All or none: what this launch made goes. */
		for (int k = 0; k < made; k++)
			delete_one(g, names[k], &de);
		return r;
	}
	*ret_n = (size_t)l->count;
	return 0;
}

static int describe(struct cnl_cloud *c, const char *const *ids, size_t nids,
                    struct cnl_cloud_instance *ret, size_t cap, size_t *ret_n,
                    struct cnl_cloud_error *e)
{
	struct gcp *g = (struct gcp *)c;
	char page[400] = "";
	int r;

	*ret_n = 0;
	memset(e, 0, sizeof(*e));
	for (size_t i = 0; i < nids && *ret_n < cap; i++) {
		struct cnl_cloud_instance *o = &ret[*ret_n];

		if (!name_ok(ids[i]))
			continue;
		r = get_instance(g, ids[i], o, e);
		if (r == -ENOENT) /* deleted: as EC2 shows one that ended */
			cnl_cloud_gone(o, ids[i],
			               "the instance no longer exists");
		else if (r < 0)
			return r;
		(*ret_n)++;
	}
	if (nids)
		return 0;
	/* Every instance CNLab launched: by its label, page by page (the
	 * page token opaque: escaped; a token given twice, or a hundred
	 * pages, end it). */
	for (int pages = 0; pages < 100 && *ret_n < cap; pages++) {
		char path[2048], *esc;
		json_t *o = NULL, *it;
		const char *next;
		size_t i;

		esc = cnl_sigv4_escape(page);
		snprintf(path, sizeof(path),
		         "%s/instances?filter=labels.%s%%3Dtrue&maxResults=500"
		         "%s%s",
		         g->prefix, MANAGED_LABEL, page[0] ? "&pageToken=" : "",
		         esc);
		free(esc);
		if ((r = cnl_cloud_rest_call(&g->rest, "GET", path, NULL, &o,
		                             e)) < 0)
			return r;
		json_array_foreach (json_object_get(o, "items"), i, it)
			if (*ret_n < cap && read_instance(it, &ret[*ret_n]))
				(*ret_n)++;
		next = json_string_value(json_object_get(o, "nextPageToken"));
		if (!next || !*next) {
			json_decref(o);
			return 0;
		}
		if (strlen(next) >= 400 || strcmp(next, page) == 0) {
			json_decref(o);
			return protocol(e, "a page token too long, or the same "
			                   "again");
		}
		copy(page, sizeof(page), next);
		json_decref(o);
	}
	return 0;
}

static int terminate(struct cnl_cloud *c, const char *const *ids, size_t nids,
                     struct cnl_cloud_error *e)
{
	struct gcp *g = (struct gcp *)c;
	int r = 0;

	memset(e, 0, sizeof(*e));
	if (nids == 0) {
		e->kind = CNL_CLOUD_INVALID;
		copy(e->message, sizeof(e->message), "terminate: no instance");
		return -EINVAL;
	}
	for (size_t i = 0; i < nids; i++) {
		if (!name_ok(ids[i])) {
			e->kind = CNL_CLOUD_INVALID;
			snprintf(e->message, sizeof(e->message),
			         "terminate: \"%.64s\" is not an instance name",
			         ids[i]);
			return -EINVAL;
		}
		if ((r = delete_one(g, ids[i], e)) < 0)
			return r;
	}
	return 0;
}

static int spot_price(struct cnl_cloud *c, const char *type, double *ret,
                      struct cnl_cloud_error *e)
{
	(void)c;
	return cnl_cloud_listed_spot_price("gcp", type, ret, e);
}

static void gcp_free(struct cnl_cloud *c)
{
	struct gcp *g = (struct gcp *)c;

	cnl_cloud_rest_done(&g->rest);
	EVP_PKEY_free(g->key);
	free(g->token_uri);
	free(g->email);
	free(g);
}

static const struct cnl_cloud_ops gcp_ops = {
    .name = "gcp",
    .provision = provision,
    .describe = describe,
    .terminate = terminate,
    .spot_price = spot_price,
    .free = gcp_free,
};

static bool zone_ok(const char *z)
{
	size_t n = z ? strlen(z) : 0;

	return n >= 4 && n < 64 &&
	       strspn(z, "abcdefghijklmnopqrstuvwxyz0123456789-") == n &&
	       n > 2 && z[n - 2] == '-';
}

int cnl_cloud_gcp_new(const struct cnl_cloud_gcp_config *cfg,
                      struct cnl_cloud **ret, char *err, size_t errlen)
{
	const char *tu = cfg->token_uri ? cfg->token_uri : TOKEN_URI;
	struct gcp *g;

	if (!cfg->project || !name_ok(cfg->project)) {
		cnl_seterr(err, errlen, "project: missing or malformed");
		return -EINVAL;
	}
	if (!zone_ok(cfg->zone)) {
		cnl_seterr(err, errlen,
		           "zone: missing or malformed (us-central1-a)");
		return -EINVAL;
	}
	if (!cfg->client_email || !strchr(cfg->client_email, '@') ||
	    strlen(cfg->client_email) > 256) {
		cnl_seterr(err, errlen, "client_email: missing or malformed");
		return -EINVAL;
	}
	g = cnl_xcalloc(1, sizeof(*g));
	g->base.ops = &gcp_ops;
	if (!cfg->private_key || !(g->key = load_key(cfg->private_key))) {
		cnl_seterr(err, errlen,
		           "private_key: not an RSA private key in PEM");
		gcp_free(&g->base);
		return -EINVAL;
	}
	g->email = cnl_xstrdup(cfg->client_email);
	g->token_uri = cnl_xstrdup(tu);
	snprintf(g->zone, sizeof(g->zone), "%s", cfg->zone);
	snprintf(g->prefix, sizeof(g->prefix),
	         "/compute/v1/projects/%s/zones/%s", cfg->project, cfg->zone);
	g->rest.who = "Google";
	g->rest.grant = grant;
	g->rest.ud = g;
	g->rest.read_error = read_error;
	g->rest.capacity_codes = capacity;
	g->rest.throttled_codes = throttled;
	g->rest.auth_codes = auth;
	if (cnl_cloud_rest_init(
	        &g->rest, cfg->endpoint ? cfg->endpoint : API_ENDPOINT, tu,
	        cfg->cafile, cfg->timeout_ms, cfg->max_attempts,
	        cfg->backoff_ms, err, errlen) < 0) {
		gcp_free(&g->base);
		return -EINVAL;
	}
	*ret = &g->base;
	return 0;
}
