/*
 * cloud_kt.c - the KT Cloud provider of cloud.h: virtual machines through
 * KT Cloud's server API (ucloud biz), which is Apache CloudStack's API:
 * GET ENDPOINT?command=...&apiKey=...&response=json&signature=...
 *
 * Authentication.  Every request is signed as CloudStack signs it: the
 * parameters (apiKey among them) URL-encoded, sorted by name, the whole
 * lowercased, HMAC-SHA1 with the secret key, base64, sent as "signature".
 * The keys are held in memory only and never logged.
 *
 * Virtual machines.  deployVirtualMachine in the account's zone with the
 * service offering (the instance type: KT's offerings are ids of the
 * account's, so a KT account declares its types: cnlab cloud add kt
 * --type-specs), the template (the image), usageplantype=hourly, the user
 * data (base64) and, where set, the network.  CloudStack has no client
 * token: a launch's VMs are named from it ("cnlab-" and 12 hex digits of
 * its hash, "-K") and looked for by name before a deploy is sent again.
 * A deploy is an asynchronous job, followed with queryAsyncJobResult until
 * it ends; a failed job's errorcode 533 (insufficient capacity) or 532/535
 * (the account's resource limits) is CAPACITY, and the VM it may have left
 * is destroyed (all or none).  CNLab's VMs carry "cnlab-managed" and their
 * tags in their display name; describe() of every instance lists the
 * zone's VMs and keeps those.
 *
 * KT Cloud sells no spot VMs: a spot launch fails as CAPACITY
 * (NoSpotMarket).  terminate() destroys with expunge (a running VM too).
 *
 * Errors are CloudStack's {"<command>response": {"errorcode", "errortext"}}
 * with the errorcode as HTTP status: 401 and 531 the key or account, 429
 * the API limit, 431/430/432 the request, 530 and 534 the service.
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

#define API_URL "https://api.ucloudbiz.olleh.com/server/v1/client/api"
/* CloudStack takes 4 KB of base64 user data in a GET. */
#define USER_DATA_MAX 3000
#define JOB_WAIT_MS   300000
#define PAGE_SIZE     100
#define PARAMS_MAX    24

struct kt {
	struct cnl_cloud base;
	struct cnl_cloud_rest rest;
	char path[256]; /* the API's path: "/server/v1/client/api" */
	char zone[64];
	char network[64];
	char api_key[256];
	char secret_key[257];
};

struct param {
	const char *name;
	const char *value;
};

static void copy(char *dst, size_t n, const char *s)
{
	snprintf(dst, n, "%s", s ? s : "");
}

static int by_name(const void *a, const void *b)
{
	return strcasecmp(((const struct param *)a)->name,
	                  ((const struct param *)b)->name);
}

int cnl_cloud_kt_sign(const char *const *names, const char *const *values,
                      size_t n, const char *secret_key, char out[64])
{
	struct param p[PARAMS_MAX];
	unsigned char mac[20];
	size_t len = 1, o = 0;
	char *msg, *b64;
	int r;

	if (n == 0 || n > PARAMS_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		p[i] = (struct param){names[i], values[i]};
		len += strlen(names[i]) + 3 * strlen(values[i]) + 2;
	}
	qsort(p, n, sizeof(p[0]), by_name);
	msg = cnl_xmalloc(len);
	for (size_t i = 0; i < n; i++) {
		char *esc = cnl_sigv4_escape(p[i].value);

		o += (size_t)snprintf(msg + o, len - o, "%s%s=%s", i ? "&" : "",
		                      p[i].name, esc);
		free(esc);
	}
	for (size_t i = 0; i < o; i++)
		if (msg[i] >= 'A' && msg[i] <= 'Z')
			msg[i] = (char)(msg[i] - 'A' + 'a');
	r = mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA1),
	                    (const unsigned char *)secret_key,
	                    strlen(secret_key), (const unsigned char *)msg, o,
	                    mac);
	explicit_bzero(msg, o);
	free(msg);
	if (r != 0)
		return -EINVAL;
	b64 = cnl_b64_encode_new(mac, sizeof(mac), CNL_B64_STD | CNL_B64_PAD);
	copy(out, 64, b64);
	free(b64);
	return 0;
}

/* The request is signed in its query: nothing to add to the headers. */
static void no_headers(void *ud, const char *method, const char *path,
                       char lines[][CNL_CLOUD_REST_SIGN_LEN])
{
	(void)ud;
	(void)method;
	(void)path;
	(void)lines;
}

/* CloudStack's codes, by kind (the HTTP status is the errorcode). */
static const char *const capacity[] = {"533", "532", "535", "NoSpotMarket",
                                       NULL};
static const char *const throttled[] = {"429", NULL};
static const char *const auth[] = {"401", "531", NULL};

/* CloudStack's error document: its one member's errorcode and
 * errortext. */
static void read_error(const json_t *o, struct cnl_cloud_error *e)
{
	const char *k;
	json_t *v;

	json_object_foreach ((json_t *)o, k, v) {
		json_t *c = json_object_get(v, "errorcode");

		if (!json_is_object(v) || !c)
			continue;
		if (json_is_integer(c))
			snprintf(e->code, sizeof(e->code), "%lld",
			         (long long)json_integer_value(c));
		else
			copy(e->code, sizeof(e->code), json_string_value(c));
		copy(e->message, sizeof(e->message),
		     json_string_value(json_object_get(v, "errortext")));
		return;
	}
}

static int protocol(struct cnl_cloud_error *e, const char *what)
{
	e->kind = CNL_CLOUD_PROTOCOL;
	copy(e->code, sizeof(e->code), "BadAnswer");
	snprintf(e->message, sizeof(e->message), "KT Cloud's answer: %s", what);
	return -EPROTO;
}

/*
 * @command with @n parameters (command, apiKey, response and signature
 * added), tried at most @attempts times: 0 with the command's answer
 * object ("<command lowercased>response") in *@ret, else a negative errno
 * with @e.
 */
static int call(struct kt *k, const char *command, const struct param *ps,
                size_t n, int attempts, json_t **ret, struct cnl_cloud_error *e)
{
	const char *names[PARAMS_MAX], *values[PARAMS_MAX];
	char sig[64], key[96], *path, *esc;
	size_t m = 0, len, o;
	json_t *doc = NULL, *body;
	int r;

	*ret = NULL;
	if (n + 3 > PARAMS_MAX)
		return -EINVAL;
	names[m] = "command";
	values[m++] = command;
	names[m] = "apiKey";
	values[m++] = k->api_key;
	names[m] = "response";
	values[m++] = "json";
	len = strlen(k->path) + 2;
	for (size_t i = 0; i < n; i++) {
		names[m] = ps[i].name;
		values[m++] = ps[i].value;
	}
	for (size_t i = 0; i < m; i++)
		len += strlen(names[i]) + 3 * strlen(values[i]) + 2;
	if (cnl_cloud_kt_sign(names, values, m, k->secret_key, sig) < 0) {
		e->kind = CNL_CLOUD_INVALID;
		copy(e->message, sizeof(e->message), "cannot sign the request");
		return -EINVAL;
	}
	esc = cnl_sigv4_escape(sig);
	len += strlen(esc) + 16;
	path = cnl_xmalloc(len);
	o = (size_t)snprintf(path, len, "%s?", k->path);
	for (size_t i = 0; i < m; i++) {
		char *v = cnl_sigv4_escape(values[i]);

		o += (size_t)snprintf(path + o, len - o, "%s=%s&", names[i], v);
		free(v);
	}
	snprintf(path + o, len - o, "signature=%s", esc);
	free(esc);
	r = cnl_cloud_rest_call_n(&k->rest, "GET", path, attempts, &doc, e);
	explicit_bzero(path, strlen(path));
	free(path);
	if (r == -ENOENT || r == -EEXIST)
		r = -EINVAL;
	if (r < 0)
		return r;
	snprintf(key, sizeof(key), "%sresponse", command);
	for (char *s = key; *s; s++)
		if (*s >= 'A' && *s <= 'Z')
			*s = (char)(*s - 'A' + 'a');
	body = json_object_get(doc, key);
	if (!json_is_object(body)) {
		json_decref(doc);
		return protocol(e, "no answer object");
	}
	*ret = json_incref(body);
	json_decref(doc);
	return 0;
}

static bool managed(const json_t *vm)
{
	return cnl_cloud_tag_managed(
	    json_string_value(json_object_get(vm, "displayname")));
}

static bool read_instance(const json_t *o, struct cnl_cloud_instance *out)
{
	const char *id = json_string_value(json_object_get(o, "id"));
	const char *st = json_string_value(json_object_get(o, "state"));

	memset(out, 0, sizeof(*out));
	if (!id || !*id || strlen(id) >= sizeof(out->id) || !st)
		return false;
	copy(out->id, sizeof(out->id), id);
	copy(out->type, sizeof(out->type),
	     json_string_value(json_object_get(o, "serviceofferingid")));
	copy(out->zone, sizeof(out->zone),
	     json_string_value(json_object_get(o, "zonename")));
	copy(out->private_ip, sizeof(out->private_ip),
	     json_string_value(json_object_get(
	         json_array_get(json_object_get(o, "nic"), 0), "ipaddress")));
	cnl_cloud_tag_get(json_string_value(json_object_get(o, "displayname")),
	                  "cnlab:record", out->record, sizeof(out->record));
	if (strcmp(st, "Running") == 0 || strcmp(st, "Migrating") == 0)
		copy(out->state, sizeof(out->state), "running");
	else if (strcmp(st, "Starting") == 0 || strcmp(st, "Creating") == 0)
		copy(out->state, sizeof(out->state), "pending");
	else if (strcmp(st, "Stopping") == 0)
		copy(out->state, sizeof(out->state), "stopping");
	else if (strcmp(st, "Destroyed") == 0 || strcmp(st, "Expunging") == 0)
		copy(out->state, sizeof(out->state), "shutting-down");
	else
		copy(out->state, sizeof(out->state), "stopped");
	if (strcmp(out->state, "stopped") == 0)
		snprintf(out->reason, sizeof(out->reason), "%s outside CNLab",
		         st);
	return true;
}

static void read_list(const json_t *a, bool only_managed,
                      struct cnl_cloud_instance *ret, size_t cap, size_t *n)
{
	size_t i;
	json_t *it;

	json_array_foreach (json_object_get(a, "virtualmachine"), i, it)
		if (*n < cap && (!only_managed || managed(it)) &&
		    read_instance(it, &ret[*n]))
			(*n)++;
}

/* VM @id as it is: 0, -ENOENT when it is gone. */
static int get_vm(struct kt *k, const char *id, struct cnl_cloud_instance *out,
                  struct cnl_cloud_error *e)
{
	const struct param ps[] = {{"id", id}, {"listall", "true"}};
	json_t *a = NULL;
	size_t n = 0;
	int r =
	    call(k, "listVirtualMachines", ps, 2, k->rest.max_attempts, &a, e);

	/* CloudStack answers a VM id it does not know with 431. */
	if (r == -EINVAL && strcmp(e->code, "431") == 0)
		return -ENOENT;
	if (r < 0)
		return r;
	read_list(a, false, out, 1, &n);
	json_decref(a);
	return n ? 0 : -ENOENT;
}

/* The zone's VM named @name, not being destroyed: 0 with it in @out,
 * -ENOENT when there is none. */
static int find_named(struct kt *k, const char *name,
                      struct cnl_cloud_instance *out, struct cnl_cloud_error *e)
{
	const struct param ps[] = {
	    {"zoneid", k->zone}, {"name", name}, {"listall", "true"}};
	json_t *a = NULL, *it;
	size_t i;
	int r =
	    call(k, "listVirtualMachines", ps, 3, k->rest.max_attempts, &a, e);

	if (r < 0)
		return r;
	r = -ENOENT;
	json_array_foreach (json_object_get(a, "virtualmachine"), i, it) {
		const char *nm = json_string_value(json_object_get(it, "name"));

		if (nm && strcmp(nm, name) == 0 && read_instance(it, out) &&
		    strcmp(out->state, "shutting-down") != 0) {
			r = 0;
			break;
		}
	}
	json_decref(a);
	return r;
}

/* Wait for job @job to end: 0 with its result object in *@ret, or the
 * error it ended with in @e. */
static int wait_job(struct kt *k, const char *job, json_t **ret,
                    struct cnl_cloud_error *e)
{
	int64_t until = cnl_time_now_ms() + JOB_WAIT_MS;

	*ret = NULL;
	for (bool first = true;; first = false) {
		const struct param ps[] = {{"jobid", job}};
		json_t *a = NULL, *res;
		json_int_t st;
		int r;

		if (!first)
			sleep(1);
		if ((r = call(k, "queryAsyncJobResult", ps, 1,
		              k->rest.max_attempts, &a, e)) < 0)
			return r;
		st = json_integer_value(json_object_get(a, "jobstatus"));
		res = json_object_get(a, "jobresult");
		if (st == 1) {
			*ret = json_incref(res);
			json_decref(a);
			return 0;
		}
		if (st == 2) {
			json_t *c = json_object_get(res, "errorcode");

			snprintf(e->code, sizeof(e->code), "%lld",
			         (long long)json_integer_value(c));
			copy(e->message, sizeof(e->message),
			     json_string_value(
			         json_object_get(res, "errortext")));
			json_decref(a);
			e->kind = cnl_cloud_rest_classify(&k->rest, 0, e->code);
			return cnl_cloud_errno(e->kind);
		}
		json_decref(a);
		if (st != 0)
			return protocol(e,
			                "a job status that is not 0, 1 or 2");
		if (cnl_time_now_ms() >= until) {
			e->kind = CNL_CLOUD_UNAVAILABLE;
			copy(e->code, sizeof(e->code), "JobTimeout");
			snprintf(e->message, sizeof(e->message),
			         "job %.64s did not end in %d s", job,
			         JOB_WAIT_MS / 1000);
			return -EIO;
		}
	}
}

static int destroy_one(struct kt *k, const char *id, struct cnl_cloud_error *e)
{
	const struct param ps[] = {{"id", id}, {"expunge", "true"}};
	json_t *a = NULL;
	int r = call(k, "destroyVirtualMachine", ps, 2, k->rest.max_attempts,
	             &a, e);

	json_decref(a);
	/* Gone already (431: no such VM). */
	if (r == -EINVAL && strcmp(e->code, "431") == 0)
		return get_vm(k, id, &(struct cnl_cloud_instance){0}, e) ==
		               -ENOENT
		           ? 0
		           : r;
	return r;
}

/* Make VM @name unless it exists; the deploy is sent once a look. */
static int make_vm(struct kt *k, const struct cnl_cloud_launch *l,
                   const char *name, const char *userdata,
                   struct cnl_cloud_instance *out, char *made, size_t mn,
                   struct cnl_cloud_error *e)
{
	char dn[256];
	long wait = k->rest.backoff_ms;
	struct param ps[10];
	size_t n = 0;
	int r = -EIO;

	cnl_cloud_tag_text(l, dn, sizeof(dn));
	ps[n++] = (struct param){"zoneid", k->zone};
	ps[n++] = (struct param){"serviceofferingid", l->instance_type};
	ps[n++] = (struct param){"templateid", l->image};
	ps[n++] = (struct param){"name", name};
	ps[n++] = (struct param){"displayname", dn};
	ps[n++] = (struct param){"usageplantype", "hourly"};
	if (userdata)
		ps[n++] = (struct param){"userdata", userdata};
	if (k->network[0])
		ps[n++] = (struct param){"networkids", k->network};
	made[0] = '\0';
	for (int i = 0; i < k->rest.max_attempts; i++) {
		json_t *a = NULL, *res = NULL;
		const char *job, *id;

		if (i > 0)
			cnl_cloud_backoff(&wait, &k->rest.seed);
		if ((r = find_named(k, name, out, e)) != -ENOENT) {
			if (r == 0)
				copy(made, mn, out->id);
			return r; /* there (an earlier try's), or no answer */
		}
		r = call(k, "deployVirtualMachine", ps, n, 1, &a, e);
		if (r < 0) {
			if (e->kind != CNL_CLOUD_THROTTLED &&
			    e->kind != CNL_CLOUD_UNAVAILABLE)
				return r;
			continue;
		}
		job = json_string_value(json_object_get(a, "jobid"));
		id = json_string_value(json_object_get(a, "id"));
		if (id)
			copy(made, mn, id);
		if (!job) {
			json_decref(a);
			return protocol(e, "a deploy without its job");
		}
		r = wait_job(k, job, &res, e);
		json_decref(a);
		if (r == 0 &&
		    !read_instance(json_object_get(res, "virtualmachine"), out))
			r = protocol(e, "a finished deploy without its VM");
		if (r == 0)
			copy(made, mn, out->id);
		json_decref(res);
		return r;
	}
	return r;
}

static bool id_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	return n > 0 && n < 64 &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                 "0123456789-_.") == n;
}

static int provision(struct cnl_cloud *c, const struct cnl_cloud_launch *l,
                     struct cnl_cloud_instance *ret, size_t cap, size_t *ret_n,
                     struct cnl_cloud_error *e)
{
	struct kt *k = (struct kt *)c;
	char base[32], (*made)[CNL_CLOUD_ID_MAX], *ud = NULL;
	int r = 0, nmade = 0;

	*ret_n = 0;
	memset(e, 0, sizeof(*e));
	if (!id_ok(l->instance_type) || !id_ok(l->image) || l->count < 1 ||
	    l->count > CNL_CLOUD_LAUNCH_MAX || (size_t)l->count > cap ||
	    !l->client_token || !*l->client_token ||
	    strlen(l->client_token) > 64 ||
	    (l->user_data && strlen(l->user_data) > USER_DATA_MAX)) {
		e->kind = CNL_CLOUD_INVALID;
		snprintf(e->message, sizeof(e->message),
		         "launch: a service offering id, a template id, 1..%d "
		         "VMs within the answer's room, a client token of "
		         "1..64 and user data of at most %d bytes are required",
		         CNL_CLOUD_LAUNCH_MAX, USER_DATA_MAX);
		return -EINVAL;
	}
	if (l->market == CNL_CLOUD_SPOT)
		return cnl_cloud_no_spot(e, "KT Cloud");
	if (l->user_data)
		ud = cnl_b64_encode_new(l->user_data, strlen(l->user_data),
		                        CNL_B64_STD | CNL_B64_PAD);
	cnl_cloud_short_name(l->client_token, base);
	made = cnl_xcalloc((size_t)l->count, sizeof(*made));
	for (int q = 0; q < l->count; q++) {
		char name[48];

		snprintf(name, sizeof(name), "%s-%d", base, q);
		r = make_vm(k, l, name, ud, &ret[q], made[nmade],
		            sizeof(made[nmade]), e);
		if (made[nmade][0])
			nmade++;
		if (r < 0)
			break;
	}
	if (ud) {
		explicit_bzero(ud, strlen(ud));
		free(ud);
	}
	if (r < 0) {
		struct cnl_cloud_error de;

		/* All or none: what this launch made goes (a deploy whose
		 * answer never came is found by its name). */
		for (int q = 0; q < l->count; q++) {
			struct cnl_cloud_instance x;
			char name[48];

			snprintf(name, sizeof(name), "%s-%d", base, q);
			if (find_named(k, name, &x, &de) == 0)
				destroy_one(k, x.id, &de);
		}
		for (int q = 0; q < nmade; q++)
			destroy_one(k, made[q], &de);
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
	struct kt *k = (struct kt *)c;
	int r;

	*ret_n = 0;
	memset(e, 0, sizeof(*e));
	for (size_t i = 0; i < nids && *ret_n < cap; i++) {
		struct cnl_cloud_instance *o = &ret[*ret_n];

		if (!id_ok(ids[i]))
			continue;
		r = get_vm(k, ids[i], o, e);
		if (r == -ENOENT)
			cnl_cloud_gone(o, ids[i], "the VM no longer exists");
		else if (r < 0)
			return r;
		(*ret_n)++;
	}
	if (nids)
		return 0;
	/* The zone's VMs of CNLab, a page at a time, until "count" are
	 * seen or a page is empty; a hundred pages at most. */
	for (int page = 1, seen = 0; page <= 100 && *ret_n < cap; page++) {
		char pg[16], psz[16];
		const struct param ps[] = {{"zoneid", k->zone},
		                           {"keyword", "cnlab-"},
		                           {"listall", "true"},
		                           {"page", pg},
		                           {"pagesize", psz}};
		json_t *a = NULL;
		size_t listed;
		json_int_t total;

		snprintf(pg, sizeof(pg), "%d", page);
		snprintf(psz, sizeof(psz), "%d", PAGE_SIZE);
		if ((r = call(k, "listVirtualMachines", ps, 5,
		              k->rest.max_attempts, &a, e)) < 0)
			return r;
		listed = json_array_size(json_object_get(a, "virtualmachine"));
		total = json_integer_value(json_object_get(a, "count"));
		read_list(a, true, ret, cap, ret_n);
		json_decref(a);
		seen += (int)listed;
		if (listed == 0 || seen >= total)
			break;
	}
	return 0;
}

static int terminate(struct cnl_cloud *c, const char *const *ids, size_t nids,
                     struct cnl_cloud_error *e)
{
	struct kt *k = (struct kt *)c;
	int r;

	memset(e, 0, sizeof(*e));
	if (nids == 0) {
		e->kind = CNL_CLOUD_INVALID;
		copy(e->message, sizeof(e->message), "terminate: no VM");
		return -EINVAL;
	}
	for (size_t i = 0; i < nids; i++)
		if (!id_ok(ids[i])) {
			e->kind = CNL_CLOUD_INVALID;
			snprintf(e->message, sizeof(e->message),
			         "terminate: \"%.64s\" is not a VM id", ids[i]);
			return -EINVAL;
		}
	for (size_t i = 0; i < nids; i++)
		if ((r = destroy_one(k, ids[i], e)) < 0)
			return r;
	return 0;
}

static int spot_price(struct cnl_cloud *c, const char *type, double *ret,
                      struct cnl_cloud_error *e)
{
	(void)c;
	return cnl_cloud_listed_spot_price("kt", type, ret, e); /* none */
}

static void kt_free(struct cnl_cloud *c)
{
	struct kt *k = (struct kt *)c;

	cnl_cloud_rest_done(&k->rest);
	explicit_bzero(k->secret_key, sizeof(k->secret_key));
	free(k);
}

static const struct cnl_cloud_ops kt_ops = {
    .name = "kt",
    .provision = provision,
    .describe = describe,
    .terminate = terminate,
    .spot_price = spot_price,
    .free = kt_free,
};

int cnl_cloud_kt_new(const struct cnl_cloud_kt_config *cfg,
                     struct cnl_cloud **ret, char *err, size_t errlen)
{
	const char *url = cfg->endpoint ? cfg->endpoint : API_URL, *h, *p;
	char base[256];
	struct kt *k;

	if (!id_ok(cfg->zone)) {
		cnl_seterr(err, errlen, "zone: the zone's id");
		return -EINVAL;
	}
	if (cfg->network && *cfg->network && !id_ok(cfg->network)) {
		cnl_seterr(err, errlen, "network: the network's id");
		return -EINVAL;
	}
	if (!cfg->api_key || !*cfg->api_key || strlen(cfg->api_key) >= 256 ||
	    strspn(cfg->api_key,
	           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
	           "OPQRSTUVWXYZ0123456789-_") != strlen(cfg->api_key) ||
	    !cfg->secret_key || !*cfg->secret_key ||
	    strlen(cfg->secret_key) > 256) {
		cnl_seterr(err, errlen, "api_key and secret_key: required");
		return -EINVAL;
	}
	/* scheme://host[:port]/path: the client is the host's, the path
	 * the API's. */
	h = strncmp(url, "https://", 8) == 0  ? url + 8
	    : strncmp(url, "http://", 7) == 0 ? url + 7
	                                      : NULL;
	p = h ? strchr(h, '/') : NULL;
	if (!h || !p || p == h || (size_t)(p - url) >= sizeof(base) ||
	    strlen(p) >= 256 || strcspn(p, "?# ") != strlen(p)) {
		cnl_seterr(err, errlen,
		           "endpoint: want https://host/path/to/api");
		return -EINVAL;
	}
	snprintf(base, sizeof(base), "%.*s", (int)(p - url), url);
	k = cnl_xcalloc(1, sizeof(*k));
	k->base.ops = &kt_ops;
	copy(k->path, sizeof(k->path), p);
	copy(k->zone, sizeof(k->zone), cfg->zone);
	copy(k->network, sizeof(k->network), cfg->network);
	copy(k->api_key, sizeof(k->api_key), cfg->api_key);
	copy(k->secret_key, sizeof(k->secret_key), cfg->secret_key);
	k->rest.who = "KT Cloud";
	k->rest.sign = no_headers;
	k->rest.ud = k;
	k->rest.read_error = read_error;
	k->rest.capacity_codes = capacity;
	k->rest.throttled_codes = throttled;
	k->rest.auth_codes = auth;
	if (cnl_cloud_rest_init(&k->rest, base, NULL, cfg->cafile,
	                        cfg->timeout_ms, cfg->max_attempts,
	                        cfg->backoff_ms, err, errlen) < 0) {
		kt_free(&k->base);
		return -EINVAL;
	}
	*ret = &k->base;
	return 0;
}
