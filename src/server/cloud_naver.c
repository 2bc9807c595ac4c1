/*
 * cloud_naver.c - the NAVER Cloud Platform provider of cloud.h: servers
 * of a VPC through the Server (VPC) API, /vserver/v2, each request signed
 * with the account's API key.
 *
 * Authentication.  Naver's API gateway takes three headers on every call:
 * the time in milliseconds (x-ncp-apigw-timestamp), the access key
 * (x-ncp-iam-access-key) and x-ncp-apigw-signature-v2, the base64 of
 * HMAC-SHA256, keyed with the secret key, over
 *
 *     METHOD " " PATH-AND-QUERY "\n" TIMESTAMP "\n" ACCESS-KEY
 *
 * so a request is signed afresh each time it is sent (the gateway refuses
 * one more than five minutes off).  Calls are GETs whose parameters are
 * all in the query, so the signature covers every one of them.  The keys
 * are held in memory only and never logged.
 *
 * Servers.  Naver has no client token; a launch's servers are named from
 * its client token ("cnlab-" and 12 hex digits of its hash, "-K": Naver
 * takes 3..30 of lowercase letters, digits and '-'), and before making one
 * the plugin looks for a server of that name, so that a retry after a lost
 * answer makes nothing twice; the create itself is sent once per look.
 * The instance id is the serverInstanceNo.
 *
 * User data.  A VPC server takes no user data but an init script, made
 * beforehand (createInitScript) and named at creation (initScriptNo); the
 * plugin makes one per launch, named like its servers, and deletes it when
 * the launch fails and when the servers it started are terminated.
 *
 * Tags.  Servers have none: the description carries "cnlab-managed" and
 * the tags as KEY=VALUE words; describe() of every instance lists the
 * VPC's servers and keeps those.
 *
 * Spot.  Naver Cloud sells no spot servers: a spot launch fails as
 * CAPACITY (NoSpotMarket), so that spot-then-on-demand goes on to
 * on-demand and spot-only finds nothing here; there are no interruptions.
 *
 * Terminate.  Naver returns only stopped servers (terminateServerInstances
 * refuses a running one): terminate() stops a running server, waits up to
 * TERM_WAIT_MS for it to stop, then returns it; one still stopping then
 * fails THROTTLED (StillStopping), for the caller to try again.
 *
 * Errors.  The gateway's {"error": {"errorCode", "message"}} (401 for the
 * key, 429 for throttling and quotas, 5xx when the service is down) and the
 * service's {"responseError": {"returnCode", "returnMessage"}}, classified
 * as cloud.h says.  Naver's documentation lists no code for a server type
 * out of stock; a refused creation whose message says so (stock,
 * insufficient, not enough, capacity, exceeded, limit, or the Korean
 * 재고/부족) is CAPACITY.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>
#include <mbedtls/md.h>

#include "common/base64.h"
#include "common/time.h"
#include "common/util.h"
#include "net/sigv4.h"
#include "server/cloud.h"
#include "server/cloud_rest.h"

#define API_ENDPOINT "https://ncloud.apigw.ntruss.com"
#define API          "/vserver/v2/"
/* The init script's content: Naver takes up to 1 MiB; the query that
 * carries it stays well under what a gateway takes. */
#define USER_DATA_MAX (16 * 1024)
#define TERM_WAIT_MS  20000
#define PAGE_SIZE     100

struct naver {
	struct cnl_cloud base;
	struct cnl_cloud_rest rest;
	char region[16];
	char vpc[24];
	char subnet[24];
	char access_key[160];
	char secret_key[257];
};

static void copy(char *dst, size_t n, const char *s)
{
	snprintf(dst, n, "%s", s ? s : "");
}

/* A Naver number (a server, a VPC, a subnet): 1..20 digits. */
static bool number_ok(const char *s)
{
	return s && *s && strlen(s) <= 20 &&
	       strspn(s, "0123456789") == strlen(s);
}

int cnl_cloud_naver_signature(const char *method, const char *path,
                              const char *timestamp, const char *access_key,
                              const char *secret_key, char out[64])
{
	unsigned char mac[32];
	size_t n = strlen(method) + strlen(path) + strlen(timestamp) +
	           strlen(access_key) + 4;
	char *msg = cnl_xmalloc(n), *b64;
	int r;

	snprintf(msg, n, "%s %s\n%s\n%s", method, path, timestamp, access_key);
	r = mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256),
	                    (const unsigned char *)secret_key,
	                    strlen(secret_key), (const unsigned char *)msg,
	                    strlen(msg), mac);
	free(msg);
	if (r != 0)
		return -EINVAL;
	b64 = cnl_b64_encode_new(mac, sizeof(mac), CNL_B64_STD | CNL_B64_PAD);
	copy(out, 64, b64);
	free(b64);
	explicit_bzero(mac, sizeof(mac));
	return 0;
}

static void sign(void *ud, const char *method, const char *path,
                 char lines[][CNL_CLOUD_REST_SIGN_LEN])
{
	struct naver *v = ud;
	char ts[32], sig[64];

	snprintf(ts, sizeof(ts), "%lld", (long long)cnl_time_now_ms());
	if (cnl_cloud_naver_signature(method, path, ts, v->access_key,
	                              v->secret_key, sig) < 0)
		sig[0] = '\0'; /* unsigned: the gateway refuses it (401) */
	snprintf(lines[0], CNL_CLOUD_REST_SIGN_LEN, "x-ncp-apigw-timestamp: %s",
	         ts);
	snprintf(lines[1], CNL_CLOUD_REST_SIGN_LEN, "x-ncp-iam-access-key: %s",
	         v->access_key);
	snprintf(lines[2], CNL_CLOUD_REST_SIGN_LEN,
	         "x-ncp-apigw-signature-v2: %s", sig);
	explicit_bzero(sig, sizeof(sig));
}

/* The gateway's codes come with their HTTP status (401 the key, 429
 * throttling and quotas, 5xx the service down), which classifies them;
 * the service's own codes are numbers of its own, listed nowhere, so only
 * ours is named here. */
static const char *const capacity[] = {"NoSpotMarket", NULL};

/* A code that may be a string or a number. */
static void code_of(const json_t *v, char *out, size_t n)
{
	if (json_is_integer(v))
		snprintf(out, n, "%lld", (long long)json_integer_value(v));
	else
		copy(out, n, json_string_value(v));
}

static void read_error(const json_t *o, struct cnl_cloud_error *e)
{
	const json_t *gw = json_object_get(o, "error"),
	             *sv = json_object_get(o, "responseError");

	if (json_is_object(gw)) {
		code_of(json_object_get(gw, "errorCode"), e->code,
		        sizeof(e->code));
		copy(e->message, sizeof(e->message),
		     json_string_value(json_object_get(gw, "message")));
	} else if (json_is_object(sv)) {
		code_of(json_object_get(sv, "returnCode"), e->code,
		        sizeof(e->code));
		copy(e->message, sizeof(e->message),
		     json_string_value(json_object_get(sv, "returnMessage")));
	}
}

static int protocol(struct cnl_cloud_error *e, const char *what)
{
	e->kind = CNL_CLOUD_PROTOCOL;
	copy(e->code, sizeof(e->code), "BadAnswer");
	snprintf(e->message, sizeof(e->message), "Naver Cloud's answer: %s",
	         what);
	return -EPROTO;
}

/* Whether a refused creation's @msg says the type is out of stock. */
static bool says_no_stock(const char *msg)
{
	static const char *const words[] = {
	    "stock",
	    "insufficient",
	    "not enough",
	    "capacity",
	    "exceed",
	    "limit",
	    "\xec\x9e\xac\xea\xb3\xa0", /* 재고 */
	    "\xeb\xb6\x80\xec\xa1\xb1", /* 부족 */
	    NULL};

	for (int i = 0; words[i]; i++) {
		size_t n = strlen(words[i]);

		for (const char *s = msg; *s; s++)
			if (strncasecmp(s, words[i], n) == 0)
				return true;
	}
	return false;
}

/*
 * GET API @action with the query @q (after regionCode; "" or "&a=b..."),
 * tried at most @attempts times: 0 with the action's answer object in
 * *@ret (the caller's to json_decref()), else a negative errno with @e.
 */
static int call(struct naver *v, const char *action, const char *q,
                int attempts, json_t **ret, struct cnl_cloud_error *e)
{
	size_t n = strlen(API) + strlen(action) + strlen(q) + 96;
	char *path = cnl_xmalloc(n), key[96];
	json_t *o = NULL, *body;
	const char *rc;
	int r;

	*ret = NULL;
	snprintf(path, n, "%s%s?regionCode=%s%s&responseFormatType=json", API,
	         action, v->region, q);
	r = cnl_cloud_rest_call_n(&v->rest, "GET", path, attempts, &o, e);
	/* It may hold an init script (a join token). */
	explicit_bzero(path, strlen(path));
	free(path);
	if (r == -ENOENT || r == -EEXIST)
		r = -EINVAL; /* no such action; a conflict: refused */
	if (r < 0)
		return r;
	snprintf(key, sizeof(key), "%sResponse", action);
	body = json_object_get(o, key);
	rc = json_string_value(json_object_get(body, "returnCode"));
	if (!json_is_object(body) ||
	    (json_object_get(body, "returnCode") && (!rc || strcmp(rc, "0")))) {
		if (json_is_object(body) && rc) {
			/* A refusal in a 200 answer. */
			copy(e->code, sizeof(e->code), rc);
			copy(e->message, sizeof(e->message),
			     json_string_value(
			         json_object_get(body, "returnMessage")));
			e->kind = cnl_cloud_rest_classify(&v->rest, 0, e->code);
			json_decref(o);
			return cnl_cloud_errno(e->kind);
		}
		json_decref(o);
		return protocol(e, "no result object");
	}
	*ret = json_incref(body);
	json_decref(o);
	return 0;
}

/* "the code" of a CommonCode member ({"code": "RUN", "codeName": ...}). */
static const char *code_member(const json_t *o, const char *key)
{
	const char *c =
	    json_string_value(json_object_get(json_object_get(o, key), "code"));

	return c ? c : "";
}

static bool managed(const json_t *o)
{
	return cnl_cloud_tag_managed(
	    json_string_value(json_object_get(o, "serverDescription")));
}

static bool read_instance(const json_t *o, struct cnl_cloud_instance *out)
{
	const char *no =
	    json_string_value(json_object_get(o, "serverInstanceNo"));
	const char *st = code_member(o, "serverInstanceStatus");
	const char *op = code_member(o, "serverInstanceOperation");

	memset(out, 0, sizeof(*out));
	if (!no || !*no || strlen(no) >= sizeof(out->id) || !*st)
		return false;
	copy(out->id, sizeof(out->id), no);
	copy(out->type, sizeof(out->type),
	     json_string_value(json_object_get(o, "serverProductCode")));
	copy(out->zone, sizeof(out->zone),
	     json_string_value(json_object_get(o, "zoneCode")));
	cnl_cloud_tag_get(
	    json_string_value(json_object_get(o, "serverDescription")),
	    "cnlab:record", out->record, sizeof(out->record));
	if (strcmp(st, "RUN") == 0 && strcmp(op, "SHTDN") == 0)
		copy(out->state, sizeof(out->state), "stopping");
	else if (strcmp(st, "RUN") == 0 && strcmp(op, "TERMT") == 0)
		copy(out->state, sizeof(out->state), "shutting-down");
	else if (strcmp(st, "RUN") == 0)
		copy(out->state, sizeof(out->state), "running");
	else if (strcmp(st, "NSTOP") == 0 || strcmp(st, "FSTOP") == 0)
		copy(out->state, sizeof(out->state), "stopped");
	else if (strcmp(st, "TERMT") == 0)
		copy(out->state, sizeof(out->state), "shutting-down");
	else
		copy(out->state, sizeof(out->state), "pending");
	if (strcmp(out->state, "stopped") == 0 ||
	    strcmp(out->state, "stopping") == 0)
		snprintf(out->reason, sizeof(out->reason),
		         "stopped (%s), by CNLab returning it or outside", st);
	return true;
}

/* The servers of the answer @a into @ret (up to @cap; *@n of them); with
 * @only_managed, CNLab's only. */
static void read_list(const json_t *a, bool only_managed,
                      struct cnl_cloud_instance *ret, size_t cap, size_t *n)
{
	size_t i;
	json_t *it;

	json_array_foreach (json_object_get(a, "serverInstanceList"), i, it)
		if (*n < cap && (!only_managed || managed(it)) &&
		    read_instance(it, &ret[*n]))
			(*n)++;
}

/* The server @no as it is now: 0, -ENOENT when it is gone. */
static int get_server(struct naver *v, const char *no,
                      struct cnl_cloud_instance *out, char *script, size_t sn,
                      struct cnl_cloud_error *e)
{
	char q[96];
	json_t *a = NULL;
	size_t n = 0;
	int r;

	snprintf(q, sizeof(q), "&serverInstanceNoList.1=%s", no);
	if ((r = call(v, "getServerInstanceList", q, v->rest.max_attempts, &a,
	              e)) < 0)
		return r;
	read_list(a, false, out, 1, &n);
	if (script)
		copy(script, sn,
		     n ? json_string_value(json_object_get(
		             json_array_get(
		                 json_object_get(a, "serverInstanceList"), 0),
		             "initScriptNo"))
		       : "");
	json_decref(a);
	return n ? 0 : -ENOENT;
}

/* A server of the VPC named @name, not being returned: 0 with it in @out,
 * -ENOENT when there is none. */
static int find_named(struct naver *v, const char *name,
                      struct cnl_cloud_instance *out, struct cnl_cloud_error *e)
{
	char q[160];
	json_t *a = NULL, *it;
	size_t i;
	int r;

	snprintf(q, sizeof(q), "&vpcNo=%s&serverName=%s", v->vpc, name);
	if ((r = call(v, "getServerInstanceList", q, v->rest.max_attempts, &a,
	              e)) < 0)
		return r;
	r = -ENOENT;
	json_array_foreach (json_object_get(a, "serverInstanceList"), i, it) {
		const char *nm =
		    json_string_value(json_object_get(it, "serverName"));

		/* The filter may match a part: the name itself only. */
		if (nm && strcmp(nm, name) == 0 && read_instance(it, out) &&
		    strcmp(out->state, "shutting-down") != 0) {
			r = 0;
			break;
		}
	}
	json_decref(a);
	return r;
}

static void delete_script(struct naver *v, const char *no)
{
	struct cnl_cloud_error e;
	char q[96];
	json_t *a = NULL;

	if (!no || !*no || strspn(no, "0123456789") != strlen(no))
		return;
	snprintf(q, sizeof(q), "&initScriptNoList.1=%s", no);
	call(v, "deleteInitScripts", q, v->rest.max_attempts, &a, &e);
	json_decref(a);
}

/* The launch's init script (made, or found from an earlier try): its
 * number in @no. */
static int make_script(struct naver *v, const char *name, const char *content,
                       char no[32], struct cnl_cloud_error *e)
{
	json_t *a = NULL;
	char q[160], *esc, *qq;
	size_t n;
	int r;

	snprintf(q, sizeof(q), "&initScriptName=%s", name);
	if ((r = call(v, "getInitScriptList", q, v->rest.max_attempts, &a, e)) <
	    0)
		return r;
	copy(no, 32,
	     json_string_value(json_object_get(
	         json_array_get(json_object_get(a, "initScriptList"), 0),
	         "initScriptNo")));
	json_decref(a);
	if (no[0])
		return 0;
	esc = cnl_sigv4_escape(content);
	n = strlen(esc) + 128;
	qq = cnl_xmalloc(n);
	snprintf(qq, n,
	         "&initScriptName=%s&osTypeCode=LNX&initScriptContent=%s", name,
	         esc);
	explicit_bzero(esc, strlen(esc));
	free(esc);
	r = call(v, "createInitScript", qq, v->rest.max_attempts, &a, e);
	explicit_bzero(qq, strlen(qq));
	free(qq);
	if (r < 0)
		return r;
	copy(no, 32,
	     json_string_value(json_object_get(
	         json_array_get(json_object_get(a, "initScriptList"), 0),
	         "initScriptNo")));
	json_decref(a);
	if (!no[0] || strspn(no, "0123456789") != strlen(no))
		return protocol(e, "a made init script without its number");
	return 0;
}

/* Make server @name unless it exists: the create is sent once a look. */
static int make_server(struct naver *v, const struct cnl_cloud_launch *l,
                       const char *name, const char *script,
                       struct cnl_cloud_instance *out,
                       struct cnl_cloud_error *e)
{
	char desc[1000], *ed, *q;
	long wait = v->rest.backoff_ms;
	bool digits = strspn(l->image, "0123456789") == strlen(l->image);
	size_t n;
	int r = -EIO;

	cnl_cloud_tag_text(l, desc, sizeof(desc));
	ed = cnl_sigv4_escape(desc);
	n = strlen(ed) + strlen(l->image) + strlen(l->instance_type) + 512;
	q = cnl_xmalloc(n);
	snprintf(q, n,
	         "&vpcNo=%s&subnetNo=%s&%s=%s&serverProductCode=%s"
	         "&serverName=%s&serverDescription=%s&initScriptNo=%s"
	         "&serverCreateCount=1&feeSystemTypeCode=MTRAT"
	         "&isProtectServerTermination=false"
	         "&networkInterfaceList.1.networkInterfaceOrder=0",
	         v->vpc, v->subnet,
	         digits ? "memberServerImageInstanceNo"
	                : "serverImageProductCode",
	         l->image, l->instance_type, name, ed, script);
	free(ed);
	for (int i = 0; i < v->rest.max_attempts; i++) {
		json_t *a = NULL;
		size_t got = 0;

		if (i > 0)
			cnl_cloud_backoff(&wait, &v->rest.seed);
		if ((r = find_named(v, name, out, e)) != -ENOENT)
			break; /* there (an earlier try's), or no answer */
		r = call(v, "createServerInstances", q, 1, &a, e);
		if (r == 0) {
			read_list(a, false, out, 1, &got);
			json_decref(a);
			r = got ? 0 : protocol(e, "a made server not listed");
			break;
		}
		if (e->kind == CNL_CLOUD_INVALID && says_no_stock(e->message)) {
			e->kind = CNL_CLOUD_CAPACITY;
			r = -EAGAIN;
		}
		if (e->kind != CNL_CLOUD_THROTTLED &&
		    e->kind != CNL_CLOUD_UNAVAILABLE)
			break;
	}
	free(q);
	return r;
}

static bool type_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	return n > 0 && n < 64 &&
	       strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

static int terminate_list(struct naver *v, char (*ids)[CNL_CLOUD_ID_MAX],
                          size_t n, struct cnl_cloud_error *e);

static int provision(struct cnl_cloud *c, const struct cnl_cloud_launch *l,
                     struct cnl_cloud_instance *ret, size_t cap, size_t *ret_n,
                     struct cnl_cloud_error *e)
{
	struct naver *v = (struct naver *)c;
	char base[32], script[32] = "", (*made)[CNL_CLOUD_ID_MAX];
	size_t nmade = 0;
	int r = 0;

	*ret_n = 0;
	memset(e, 0, sizeof(*e));
	if (!type_ok(l->instance_type) || !l->image || !*l->image ||
	    strlen(l->image) > 128 ||
	    strspn(l->image, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
	        strlen(l->image) ||
	    l->count < 1 || l->count > CNL_CLOUD_LAUNCH_MAX ||
	    (size_t)l->count > cap || !l->client_token || !*l->client_token ||
	    strlen(l->client_token) > 64 ||
	    (l->user_data && strlen(l->user_data) > USER_DATA_MAX)) {
		e->kind = CNL_CLOUD_INVALID;
		snprintf(e->message, sizeof(e->message),
		         "launch: a server product code, an image (a product "
		         "code or a server image number), 1..%d servers within "
		         "the answer's room, a client token of 1..64 and user "
		         "data of at most %d bytes are required",
		         CNL_CLOUD_LAUNCH_MAX, USER_DATA_MAX);
		return -EINVAL;
	}
	if (l->market == CNL_CLOUD_SPOT)
		return cnl_cloud_no_spot(e, "Naver Cloud");
	cnl_cloud_short_name(l->client_token, base);
	if (l->user_data &&
	    (r = make_script(v, base, l->user_data, script, e)) < 0)
		return r;
	made = cnl_xcalloc((size_t)l->count, sizeof(*made));
	for (int k = 0; k < l->count; k++) {
		char name[48];

		snprintf(name, sizeof(name), "%s-%d", base, k);
		r = make_server(v, l, name, script, &ret[k], e);
		if (r < 0)
			break;
		copy(made[nmade++], CNL_CLOUD_ID_MAX, ret[k].id);
	}
	if (r < 0) {
		struct cnl_cloud_error te;

		/* All or none: what this launch made goes (a create whose
		 * answer never came is found by its name first). */
		for (int k = (int)nmade; k < l->count; k++) {
			struct cnl_cloud_instance x;
			char name[48];

			snprintf(name, sizeof(name), "%s-%d", base, k);
			if (find_named(v, name, &x, &te) == 0)
				copy(made[nmade++], CNL_CLOUD_ID_MAX, x.id);
		}
		if (nmade)
			terminate_list(v, made, nmade, &te);
		else
			delete_script(v, script);
		free(made);
		return r;
	}
	free(made);
	*ret_n = (size_t)l->count;
	return 0;
}

static int describe(struct cnl_cloud *c, const char *const *ids, size_t nids,
                    struct cnl_cloud_instance *ret, size_t cap, size_t *ret_n,
                    struct cnl_cloud_error *e)
{
	struct naver *v = (struct naver *)c;
	int r;

	*ret_n = 0;
	memset(e, 0, sizeof(*e));
	for (size_t i = 0; i < nids && *ret_n < cap; i++) {
		struct cnl_cloud_instance *o = &ret[*ret_n];

		if (!number_ok(ids[i]))
			continue;
		r = get_server(v, ids[i], o, NULL, 0, e);
		if (r == -ENOENT)
			cnl_cloud_gone(o, ids[i],
			               "the server no longer exists");
		else if (r < 0)
			return r;
		(*ret_n)++;
	}
	if (nids)
		return 0;
	/* Every server CNLab made in the VPC, a page at a time (a page may
	 * hold fewer than asked for: until totalRows are seen, or an empty
	 * page; a hundred pages at most). */
	for (int page = 1, seen = 0; page <= 100 && *ret_n < cap; page++) {
		char q[128];
		json_t *a = NULL;
		json_int_t total;
		size_t listed;

		snprintf(q, sizeof(q), "&vpcNo=%s&pageNo=%d&pageSize=%d",
		         v->vpc, page, PAGE_SIZE);
		if ((r = call(v, "getServerInstanceList", q,
		              v->rest.max_attempts, &a, e)) < 0)
			return r;
		listed =
		    json_array_size(json_object_get(a, "serverInstanceList"));
		total = json_integer_value(json_object_get(a, "totalRows"));
		read_list(a, true, ret, cap, ret_n);
		json_decref(a);
		seen += (int)listed;
		if (listed == 0 || seen >= total)
			break;
	}
	return 0;
}

/* Return the servers of @ids: stop those running, return those stopped,
 * waiting up to TERM_WAIT_MS for the stops. */
static int terminate_list(struct naver *v, char (*ids)[CNL_CLOUD_ID_MAX],
                          size_t n, struct cnl_cloud_error *e)
{
	int64_t until = cnl_time_now_ms() + TERM_WAIT_MS;
	bool *done = cnl_xcalloc(n, sizeof(*done)),
	     *stopped = cnl_xcalloc(n, sizeof(*stopped));
	int r = 0;

	for (;;) {
		size_t left = 0;

		for (size_t i = 0; i < n && r == 0; i++) {
			struct cnl_cloud_instance s;
			char q[96], script[32];
			json_t *a = NULL;

			if (done[i])
				continue;
			r = get_server(v, ids[i], &s, script, sizeof(script),
			               e);
			if (r == -ENOENT ||
			    (r == 0 && strcmp(s.state, "shutting-down") == 0)) {
				done[i] = true;
				r = 0;
				continue;
			}
			if (r < 0)
				break;
			snprintf(q, sizeof(q), "&serverInstanceNoList.1=%s",
			         ids[i]);
			if (strcmp(s.state, "stopped") == 0) {
				r = call(v, "terminateServerInstances", q,
				         v->rest.max_attempts, &a, e);
				json_decref(a);
				if (r == 0) {
					done[i] = true;
					delete_script(v, script);
				}
				continue;
			}
			if (strcmp(s.state, "running") == 0 && !stopped[i]) {
				r = call(v, "stopServerInstances", q,
				         v->rest.max_attempts, &a, e);
				json_decref(a);
				/* Refused: it changed since it was read (a
				 * stop whose answer was lost is under way);
				 * the next look tells. */
				if (r < 0 && e->kind == CNL_CLOUD_INVALID)
					r = 0;
				stopped[i] = r == 0;
			}
			left++;
		}
		if (r < 0 || left == 0 || cnl_time_now_ms() >= until)
			break;
		sleep(2);
	}
	for (size_t i = 0; r == 0 && i < n; i++)
		if (!done[i]) {
			e->kind = CNL_CLOUD_THROTTLED;
			copy(e->code, sizeof(e->code), "StillStopping");
			snprintf(e->message, sizeof(e->message),
			         "server %s is still stopping (Naver returns "
			         "only stopped servers): try again",
			         ids[i]);
			r = -EAGAIN;
		}
	free(done);
	free(stopped);
	return r;
}

static int terminate(struct cnl_cloud *c, const char *const *ids, size_t nids,
                     struct cnl_cloud_error *e)
{
	struct naver *v = (struct naver *)c;
	char(*list)[CNL_CLOUD_ID_MAX];
	int r;

	memset(e, 0, sizeof(*e));
	if (nids == 0 || nids > CNL_CLOUD_LAUNCH_MAX) {
		e->kind = CNL_CLOUD_INVALID;
		copy(e->message, sizeof(e->message),
		     "terminate: 1..100 servers");
		return -EINVAL;
	}
	list = cnl_xcalloc(nids, sizeof(*list));
	for (size_t i = 0; i < nids; i++) {
		if (!number_ok(ids[i])) {
			e->kind = CNL_CLOUD_INVALID;
			snprintf(e->message, sizeof(e->message),
			         "terminate: \"%.64s\" is not a server "
			         "instance number",
			         ids[i]);
			free(list);
			return -EINVAL;
		}
		copy(list[i], CNL_CLOUD_ID_MAX, ids[i]);
	}
	r = terminate_list(v, list, nids, e);
	free(list);
	return r;
}

static int spot_price(struct cnl_cloud *c, const char *type, double *ret,
                      struct cnl_cloud_error *e)
{
	(void)c;
	return cnl_cloud_listed_spot_price("naver", type, ret, e); /* none */
}

static void naver_free(struct cnl_cloud *c)
{
	struct naver *v = (struct naver *)c;

	cnl_cloud_rest_done(&v->rest);
	explicit_bzero(v->secret_key, sizeof(v->secret_key));
	free(v);
}

static const struct cnl_cloud_ops naver_ops = {
    .name = "naver",
    .provision = provision,
    .describe = describe,
    .terminate = terminate,
    .spot_price = spot_price,
    .free = naver_free,
};

int cnl_cloud_naver_new(const struct cnl_cloud_naver_config *cfg,
                        struct cnl_cloud **ret, char *err, size_t errlen)
{
	struct naver *v;

	if (!cfg->region || !*cfg->region || strlen(cfg->region) > 8 ||
	    strspn(cfg->region, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") !=
	        strlen(cfg->region)) {
		cnl_seterr(err, errlen, "region: a Naver region code (KR)");
		return -EINVAL;
	}
	if (!number_ok(cfg->vpc_no) || !number_ok(cfg->subnet_no)) {
		cnl_seterr(err, errlen,
		           number_ok(cfg->vpc_no)
		               ? "subnet_no: the subnet's number"
		               : "vpc_no: the VPC's number");
		return -EINVAL;
	}
	if (!cfg->access_key || !*cfg->access_key ||
	    strlen(cfg->access_key) >= 160 ||
	    strspn(cfg->access_key,
	           "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmn"
	           "opqrstuvwxyz0123456789_") != strlen(cfg->access_key) ||
	    !cfg->secret_key || !*cfg->secret_key ||
	    strlen(cfg->secret_key) > 256) {
		cnl_seterr(err, errlen, "access_key and secret_key: required");
		return -EINVAL;
	}
	v = cnl_xcalloc(1, sizeof(*v));
	v->base.ops = &naver_ops;
	copy(v->region, sizeof(v->region), cfg->region);
	copy(v->vpc, sizeof(v->vpc), cfg->vpc_no);
	copy(v->subnet, sizeof(v->subnet), cfg->subnet_no);
	copy(v->access_key, sizeof(v->access_key), cfg->access_key);
	copy(v->secret_key, sizeof(v->secret_key), cfg->secret_key);
	v->rest.who = "Naver Cloud";
	v->rest.sign = sign;
	v->rest.ud = v;
	v->rest.read_error = read_error;
	v->rest.capacity_codes = capacity;
	if (cnl_cloud_rest_init(
	        &v->rest, cfg->endpoint ? cfg->endpoint : API_ENDPOINT, NULL,
	        cfg->cafile, cfg->timeout_ms, cfg->max_attempts,
	        cfg->backoff_ms, err, errlen) < 0) {
		naver_free(&v->base);
		return -EINVAL;
	}
	*ret = &v->base;
	return 0;
}
