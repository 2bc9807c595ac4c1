/*
 * cloud_aws.c - the AWS EC2 provider of cloud.h: RunInstances (with
 * InstanceMarketOptions for spot), DescribeInstances and
 * TerminateInstances over EC2's Query API (POST of a form, version
 * 2016-11-15), each request signed with SigV4 (net/sigv4.h), each answer
 * read with the strict XML reader (xml.h).
 *
 * One call: the form is built with every name and value escaped, signed
 * over Host, X-Amz-Date, Content-Type (and X-Amz-Security-Token with
 * temporary credentials), and sent; a 200 is parsed, anything else is an
 * EC2 error document (Response/Errors/Error/Code) classified by its code
 * (cloud.h).  Throttling (RequestLimitExceeded, 503) and outages (no
 * answer, 5xx) are retried with exponential back-off and full jitter,
 * signed afresh each time (the date moves); RunInstances carries the
 * launch's ClientToken, which EC2 keeps for the same launch, so a retry
 * after a lost answer gets the first launch's instances back instead of
 * new ones.
 *
 * Spot interruptions: an instance that EC2 ends for its spot capacity
 * says so in its state reason (Server.SpotInstanceTermination); describe()
 * marks it interrupted, for the burst policy to requeue its work.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base64.h"
#include "common/time.h"
#include "common/util.h"
#include "net/client.h"
#include "net/sigv4.h"
#include "server/cloud.h"
#include "server/xml.h"

#define EC2_VERSION  "2016-11-15"
#define FORM_TYPE    "application/x-www-form-urlencoded; charset=utf-8"
#define ATTEMPTS_MAX 10
/* EC2 takes 16 KiB of user data, before its base64. */
#define USER_DATA_MAX 16384

struct aws {
	struct cnl_cloud base;
	struct cnl_client *cl;
	char *host; /* the endpoint's host[:port], as the client sends it */
	char *region, *access_key, *secret_key, *session_token;
	int max_attempts;
	long backoff_ms;
	unsigned seed; /* jitter */
};

const char *cnl_cloud_fail_name(enum cnl_cloud_fail f)
{
	switch (f) {
	case CNL_CLOUD_OK:
		return "ok";
	case CNL_CLOUD_CAPACITY:
		return "capacity";
	case CNL_CLOUD_THROTTLED:
		return "throttled";
	case CNL_CLOUD_UNAVAILABLE:
		return "unavailable";
	case CNL_CLOUD_AUTH:
		return "auth";
	case CNL_CLOUD_INVALID:
		return "invalid";
	case CNL_CLOUD_PROTOCOL:
		return "protocol";
	}
	return "unknown";
}

void cnl_cloud_free(struct cnl_cloud *c)
{
	if (c)
		c->ops->free(c);
}

/* A form being built: "Action=...&Version=...&...". */
struct form {
	char *p;
	size_t len, cap;
};

static void form_add(struct form *f, const char *name, const char *value)
{
	char *n = cnl_sigv4_escape(name), *v = cnl_sigv4_escape(value);
	size_t need = strlen(n) + strlen(v) + 3;

	if (f->len + need > f->cap) {
		f->cap = (f->len + need) * 2;
		f->p = cnl_xrealloc(f->p, f->cap);
	}
	f->len += (size_t)snprintf(f->p + f->len, f->cap - f->len, "%s%s=%s",
	                           f->len ? "&" : "", n, v);
	free(n);
	free(v);
}

static void form_addf(struct form *f, const char *value, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void form_addf(struct form *f, const char *value, const char *fmt, ...)
{
	char name[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	form_add(f, name, value);
}

/* The form of @action on instances @ids (InstanceId.1, .2, ...). */
static void ids_form(struct form *f, const char *action, const char *const *ids,
                     size_t n)
{
	form_add(f, "Action", action);
	form_add(f, "Version", EC2_VERSION);
	for (size_t i = 0; i < n; i++)
		form_addf(f, ids[i], "InstanceId.%zu", i + 1);
}

static enum cnl_cloud_fail classify(long status, const char *code)
{
	static const char *const capacity[] = {
	    "InsufficientInstanceCapacity",
	    "InsufficientCapacity",
	    "InsufficientHostCapacity",
	    "InsufficientReservedInstanceCapacity",
	    "SpotMaxPriceTooLow",
	    "MaxSpotInstanceCountExceeded",
	    "InstanceLimitExceeded",
	    "VcpuLimitExceeded",
	    "Unsupported",
	    NULL};
	static const char *const throttled[] = {"RequestLimitExceeded",
	                                        "Throttling", "SlowDown", NULL};
	static const char *const auth[] = {"AuthFailure",
	                                   "UnauthorizedOperation",
	                                   "SignatureDoesNotMatch",
	                                   "InvalidClientTokenId",
	                                   "OptInRequired",
	                                   "Blocked",
	                                   "RequestExpired",
	                                   "PendingVerification",
	                                   NULL};

	for (int i = 0; capacity[i]; i++)
		if (strcmp(code, capacity[i]) == 0)
			return CNL_CLOUD_CAPACITY;
	for (int i = 0; throttled[i]; i++)
		if (strcmp(code, throttled[i]) == 0)
			return CNL_CLOUD_THROTTLED;
	for (int i = 0; auth[i]; i++)
		if (strcmp(code, auth[i]) == 0)
			return CNL_CLOUD_AUTH;
	if (status >= 500)
		return CNL_CLOUD_UNAVAILABLE;
	if (status == 401 || status == 403)
		return CNL_CLOUD_AUTH;
	return CNL_CLOUD_INVALID;
}

/* One signed attempt of the form @body: 0 with the answer in @rep;
 * *@refused when the signer refused the request (nothing was sent). */
static int attempt(struct aws *a, const char *body,
                   struct cnl_client_reply *rep, bool *refused, char *err,
                   size_t errlen)
{
	char date[CNL_SIGV4_DATE_LEN], l_date[64], *l_auth = NULL,
	                                           *l_token = NULL;
	struct cnl_sigv4_header h[4] = {
	    {"Host", a->host},
	    {"X-Amz-Date", date},
	    {"Content-Type", FORM_TYPE},
	    {"X-Amz-Security-Token", a->session_token},
	};
	struct cnl_sigv4_request req = {
	    .method = "POST",
	    .path = "/",
	    .headers = h,
	    .nheaders = a->session_token ? 4 : 3,
	    .body = body,
	    .body_len = strlen(body),
	};
	struct cnl_sigv4_credentials cred = {a->access_key, a->secret_key,
	                                     a->region, "ec2"};
	struct cnl_sigv4 sig;
	const char *lines[4] = {l_date, NULL, NULL, NULL};
	struct cnl_client_request rq = {
	    .method = "POST",
	    .path = "/",
	    .body = body,
	    .body_len = strlen(body),
	    .content_type = FORM_TYPE,
	    .headers = lines,
	};
	size_t n;
	int r;

	*refused = false;
	if ((r = cnl_sigv4_amz_date(cnl_time_now_ms() / 1000, date)) < 0 ||
	    (r = cnl_sigv4_sign(&req, &cred, &sig, err, errlen)) < 0) {
		*refused = true;
		return r;
	}
	snprintf(l_date, sizeof(l_date), "X-Amz-Date: %s", date);
	n = strlen(sig.authorization) + 32;
	l_auth = cnl_xmalloc(n);
	snprintf(l_auth, n, "Authorization: %s", sig.authorization);
	lines[1] = l_auth;
	if (a->session_token) {
		n = strlen(a->session_token) + 32;
		l_token = cnl_xmalloc(n);
		snprintf(l_token, n, "X-Amz-Security-Token: %s",
		         a->session_token);
		lines[2] = l_token;
	}
	r = cnl_client_request(a->cl, &rq, rep);
	cnl_sigv4_done(&sig);
	free(l_auth);
	free(l_token);
	return r;
}

/*
 * The call of the form @f: 0 with the answer's document in *@ret_doc,
 * else a negative errno with @e filled.  Retries throttling and outages.
 */
static int call(struct aws *a, struct form *f, struct cnl_xml **ret_doc,
                struct cnl_cloud_error *e)
{
	long wait = a->backoff_ms;
	int r = -EIO;

	memset(e, 0, sizeof(*e));
	for (int i = 0; i < a->max_attempts; i++) {
		struct cnl_client_reply rep = {0};
		struct cnl_xml *doc = NULL;
		char xerr[128];
		const char *code;
		bool refused;

		if (i > 0) {
			cnl_cloud_backoff(&wait, &a->seed);
		}
		e->attempts = i + 1;
		r = attempt(a, f->p, &rep, &refused, e->message,
		            sizeof(e->message));
		if (refused || r == -EINVAL) {
			/* Refused here, by the signer or the client: nothing
			 * was sent, and a retry would be refused the same. */
			e->kind = CNL_CLOUD_INVALID;
			if (!refused)
				snprintf(e->message, sizeof(e->message),
				         "the request: %.400s", rep.error);
			cnl_client_reply_done(&rep);
			return -EINVAL;
		}
		e->http_status = rep.status;
		if (r < 0 || rep.status == 0) {
			e->kind = CNL_CLOUD_UNAVAILABLE;
			snprintf(e->code, sizeof(e->code), "NoAnswer");
			snprintf(e->message, sizeof(e->message),
			         "no answer from EC2: %.400s",
			         rep.error[0] ? rep.error
			                      : "connection failed");
			cnl_client_reply_done(&rep);
			continue;
		}
		if (cnl_xml_parse(rep.body ? rep.body : "", rep.len, &doc, xerr,
		                  sizeof(xerr)) < 0) {
			e->kind = rep.status >= 500 ? CNL_CLOUD_UNAVAILABLE
			                            : CNL_CLOUD_PROTOCOL;
			snprintf(e->code, sizeof(e->code), "BadAnswer");
			snprintf(e->message, sizeof(e->message),
			         "EC2 answered %ld with a body that is not XML "
			         "(%s)",
			         rep.status, xerr);
			cnl_client_reply_done(&rep);
			if (e->kind == CNL_CLOUD_UNAVAILABLE)
				continue;
			return -EPROTO;
		}
		cnl_client_reply_done(&rep);
		if (e->http_status == 200) {
			e->kind = CNL_CLOUD_OK;
			e->code[0] = e->message[0] = '\0';
			*ret_doc = doc;
			return 0;
		}
		code = cnl_xml_path(doc, "Errors/Error/Code");
		snprintf(e->code, sizeof(e->code), "%s",
		         code && *code ? code : "Unknown");
		snprintf(e->message, sizeof(e->message), "%s",
		         cnl_xml_path(doc, "Errors/Error/Message")
		             ? cnl_xml_path(doc, "Errors/Error/Message")
		             : "");
		cnl_xml_free(doc);
		e->kind = classify(e->http_status, e->code);
		if (e->kind != CNL_CLOUD_THROTTLED &&
		    e->kind != CNL_CLOUD_UNAVAILABLE)
			return cnl_cloud_errno(e->kind);
	}
	return cnl_cloud_errno(e->kind);
}

static void copy(char *dst, size_t n, const char *s)
{
	snprintf(dst, n, "%s", s ? s : "");
}

static void read_instance(const struct cnl_xml *it,
                          struct cnl_cloud_instance *o)
{
	const char *reason = cnl_xml_path(it, "stateReason/code");

	memset(o, 0, sizeof(*o));
	copy(o->id, sizeof(o->id), cnl_xml_path(it, "instanceId"));
	copy(o->type, sizeof(o->type), cnl_xml_path(it, "instanceType"));
	copy(o->state, sizeof(o->state),
	     cnl_xml_path(it, "instanceState/name")
	         ? cnl_xml_path(it, "instanceState/name")
	         : cnl_xml_path(it, "currentState/name"));
	copy(o->zone, sizeof(o->zone),
	     cnl_xml_path(it, "placement/availabilityZone"));
	copy(o->private_ip, sizeof(o->private_ip),
	     cnl_xml_path(it, "privateIpAddress"));
	o->spot = cnl_xml_path(it, "instanceLifecycle") &&
	          strcmp(cnl_xml_path(it, "instanceLifecycle"), "spot") == 0;
	copy(o->reason, sizeof(o->reason), reason);
	for (const struct cnl_xml *t = cnl_xml_child(it, "tagSet")
	                                   ? cnl_xml_child(it, "tagSet")->child
	                                   : NULL;
	     t; t = t->next) {
		const char *k = cnl_xml_path(t, "key");

		if (strcmp(t->name, "item") == 0 && k &&
		    strcmp(k, "cnlab:record") == 0)
			copy(o->record, sizeof(o->record),
			     cnl_xml_path(t, "value"));
	}
	o->interrupted =
	    reason && strcmp(reason, "Server.SpotInstanceTermination") == 0;
}

/* The instances of an instancesSet into @ret; false when one has no id. */
static bool read_set(const struct cnl_xml *set, struct cnl_cloud_instance *ret,
                     size_t cap, size_t *n)
{
	for (const struct cnl_xml *it = set ? set->child : NULL; it;
	     it = it->next) {
		if (strcmp(it->name, "item") != 0)
			continue;
		if (*n < cap)
			read_instance(it, &ret[*n]);
		if (*n < cap && !ret[*n].id[0])
			return false;
		(*n)++;
	}
	return true;
}

static int protocol(struct cnl_cloud_error *e, const char *what)
{
	e->kind = CNL_CLOUD_PROTOCOL;
	snprintf(e->code, sizeof(e->code), "BadAnswer");
	snprintf(e->message, sizeof(e->message), "EC2's answer: %s", what);
	return -EPROTO;
}

static int provision(struct cnl_cloud *c, const struct cnl_cloud_launch *l,
                     struct cnl_cloud_instance *ret, size_t cap, size_t *ret_n,
                     struct cnl_cloud_error *e)
{
	struct aws *a = (struct aws *)c;
	struct form f = {0};
	struct cnl_xml *doc = NULL;
	char num[16];
	size_t n = 0;
	int r;

	memset(e, 0, sizeof(*e));
	*ret_n = 0;
	if (!l->instance_type || !*l->instance_type || !l->image ||
	    !*l->image || l->count < 1 || l->count > CNL_CLOUD_LAUNCH_MAX ||
	    !l->client_token || !*l->client_token ||
	    strlen(l->client_token) > 64 || (size_t)l->count > cap ||
	    (l->user_data && strlen(l->user_data) > USER_DATA_MAX)) {
		e->kind = CNL_CLOUD_INVALID;
		snprintf(e->message, sizeof(e->message),
		         "launch: want an instance type, an image, a count of "
		         "1 to %d (and room for it), a client token of 64 "
		         "bytes at most and user data of %d at most",
		         CNL_CLOUD_LAUNCH_MAX, USER_DATA_MAX);
		return -EINVAL;
	}
	form_add(&f, "Action", "RunInstances");
	form_add(&f, "Version", EC2_VERSION);
	form_add(&f, "ImageId", l->image);
	form_add(&f, "InstanceType", l->instance_type);
	snprintf(num, sizeof(num), "%d", l->count);
	/* All or none: a burst that gets half its nodes has not placed
	 * what it was for. */
	form_add(&f, "MinCount", num);
	form_add(&f, "MaxCount", num);
	form_add(&f, "ClientToken", l->client_token);
	if (l->subnet)
		form_add(&f, "SubnetId", l->subnet);
	if (l->user_data) {
		char *b64 = cnl_b64_encode_new(
		    l->user_data, strlen(l->user_data), CNL_B64_PAD);

		form_add(&f, "UserData", b64);
		free(b64);
	}
	if (l->market == CNL_CLOUD_SPOT) {
		form_add(&f, "InstanceMarketOptions.MarketType", "spot");
		form_add(&f,
		         "InstanceMarketOptions.SpotOptions.SpotInstanceType",
		         "one-time");
		form_add(&f,
		         "InstanceMarketOptions.SpotOptions."
		         "InstanceInterruptionBehavior",
		         "terminate");
	}
	if (l->ntags) {
		form_add(&f, "TagSpecification.1.ResourceType", "instance");
		for (size_t i = 0; i < l->ntags; i++) {
			form_addf(&f, l->tags[i].key,
			          "TagSpecification.1.Tag.%zu.Key", i + 1);
			form_addf(&f, l->tags[i].value ? l->tags[i].value : "",
			          "TagSpecification.1.Tag.%zu.Value", i + 1);
		}
	}
	r = call(a, &f, &doc, e);
	free(f.p);
	if (r < 0)
		return r;
	if (!read_set(cnl_xml_child(doc, "instancesSet"), ret, cap, &n)) {
		cnl_xml_free(doc);
		return protocol(e, "RunInstances listed an instance without "
		                   "an id");
	}
	if (n != (size_t)l->count) {
		cnl_xml_free(doc);
		/* Those it did list are handed back all the same: launched,
		 * they are the caller's to terminate. */
		*ret_n = n < cap ? n : cap;
		return protocol(e, "RunInstances listed another number of "
		                   "instances than asked for");
	}
	cnl_xml_free(doc);
	*ret_n = n;
	return 0;
}

static int describe(struct cnl_cloud *c, const char *const *ids, size_t nids,
                    struct cnl_cloud_instance *ret, size_t cap, size_t *ret_n,
                    struct cnl_cloud_error *e)
{
	struct aws *a = (struct aws *)c;
	struct form f = {0};
	struct cnl_xml *doc = NULL;
	const struct cnl_xml *rs;
	size_t n = 0;
	int r;

	*ret_n = 0;
	ids_form(&f, "DescribeInstances", ids, nids);
	/* All of them: only those CNLab launched (tagged with their
	 * record), at most a page of 1000. */
	if (nids == 0) {
		form_add(&f, "Filter.1.Name", "tag-key");
		form_add(&f, "Filter.1.Value.1", "cnlab:record");
		form_add(&f, "MaxResults", "1000");
	}
	r = call(a, &f, &doc, e);
	free(f.p);
	if (r < 0)
		return r;
	rs = cnl_xml_child(doc, "reservationSet");
	if (!rs) {
		cnl_xml_free(doc);
		return protocol(e, "DescribeInstances without a "
		                   "reservationSet");
	}
	for (const struct cnl_xml *res = rs->child; res; res = res->next)
		if (!read_set(cnl_xml_child(res, "instancesSet"), ret, cap,
		              &n)) {
			cnl_xml_free(doc);
			return protocol(e, "an instance without an id");
		}
	cnl_xml_free(doc);
	*ret_n = n < cap ? n : cap;
	return 0;
}

static int terminate(struct cnl_cloud *c, const char *const *ids, size_t nids,
                     struct cnl_cloud_error *e)
{
	struct aws *a = (struct aws *)c;
	struct form f = {0};
	struct cnl_xml *doc = NULL;
	int r;

	memset(e, 0, sizeof(*e));
	if (nids == 0) {
		e->kind = CNL_CLOUD_INVALID;
		snprintf(e->message, sizeof(e->message),
		         "terminate: no instance named");
		return -EINVAL;
	}
	ids_form(&f, "TerminateInstances", ids, nids);
	r = call(a, &f, &doc, e);
	free(f.p);
	if (r == -EINVAL &&
	    strcmp(e->code, "InvalidInstanceID.NotFound") == 0 && nids == 1) {
		/* Already gone (EC2 forgets terminated instances after a
		 * while): what was asked is so. */
		memset(e, 0, sizeof(*e));
		return 0;
	}
	cnl_xml_free(doc);
	return r;
}

/* The current spot price of @type (Linux/UNIX), the dearest of the
 * zones' (EC2 picks the zone), in USD an hour (DescribeSpotPriceHistory
 * from now). */
static int spot_price(struct cnl_cloud *c, const char *type, double *ret,
                      struct cnl_cloud_error *e)
{
	struct aws *a = (struct aws *)c;
	struct form f = {0};
	struct cnl_xml *doc = NULL;
	const struct cnl_xml *set;
	double best = -1;
	int r;

	*ret = 0;
	form_add(&f, "Action", "DescribeSpotPriceHistory");
	form_add(&f, "Version", EC2_VERSION);
	form_add(&f, "InstanceType.1", type);
	form_add(&f, "ProductDescription.1", "Linux/UNIX");
	/* Now: each zone's current price, not the history. */
	{
		char ts[32];
		time_t t = time(NULL);
		struct tm tm;

		gmtime_r(&t, &tm);
		strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
		form_add(&f, "StartTime", ts);
	}
	form_add(&f, "MaxResults", "100");
	r = call(a, &f, &doc, e);
	free(f.p);
	if (r < 0)
		return r;
	set = cnl_xml_child(doc, "spotPriceHistorySet");
	for (const struct cnl_xml *it = set ? set->child : NULL; it;
	     it = it->next) {
		const char *v = cnl_xml_path(it, "spotPrice"),
		           *t = cnl_xml_path(it, "instanceType");
		char *end;
		double d;

		if (!v || !t || strcmp(t, type) != 0)
			continue;
		d = strtod(v, &end);
		if (end == v || *end || !(d > 0) || d > 1e6)
			continue;
		/* The zone is EC2's choice: the dearest counts. */
		if (d > best)
			best = d;
	}
	cnl_xml_free(doc);
	if (best < 0)
		return protocol(e, "no spot price for this type");
	*ret = best;
	return 0;
}

static void aws_free(struct cnl_cloud *c)
{
	struct aws *a = (struct aws *)c;

	cnl_client_free(a->cl);
	free(a->host);
	free(a->region);
	free(a->access_key);
	if (a->secret_key) {
		explicit_bzero(a->secret_key, strlen(a->secret_key));
		free(a->secret_key);
	}
	if (a->session_token) {
		explicit_bzero(a->session_token, strlen(a->session_token));
		free(a->session_token);
	}
	free(a);
}

static const struct cnl_cloud_ops aws_ops = {
    .name = "aws",
    .provision = provision,
    .describe = describe,
    .terminate = terminate,
    .spot_price = spot_price,
    .free = aws_free,
};

int cnl_cloud_aws_new(const struct cnl_cloud_aws_config *cfg,
                      struct cnl_cloud **ret, char *err, size_t errlen)
{
	char endpoint[512];
	const char *h, *end;
	struct aws *a;
	struct cnl_client_config cc = {0};

	if (!cfg->region || !*cfg->region || strchr(cfg->region, '/') ||
	    strlen(cfg->region) > 64) {
		cnl_seterr(err, errlen, "region: missing or malformed");
		return -EINVAL;
	}
	if (!cfg->access_key || !*cfg->access_key || !cfg->secret_key ||
	    !*cfg->secret_key) {
		cnl_seterr(err, errlen, "%s: missing",
		           !cfg->access_key || !*cfg->access_key
		               ? "access key"
		               : "secret key");
		return -EINVAL;
	}
	if (cfg->endpoint)
		snprintf(endpoint, sizeof(endpoint), "%s", cfg->endpoint);
	else
		snprintf(endpoint, sizeof(endpoint),
		         "https://ec2.%s.amazonaws.com", cfg->region);
	if (strncmp(endpoint, "https://", 8) == 0)
		h = endpoint + 8;
	else if (strncmp(endpoint, "http://", 7) == 0)
		h = endpoint + 7;
	else {
		cnl_seterr(err, errlen,
		           "endpoint: want https:// (or http:// for a test "
		           "endpoint)");
		return -EINVAL;
	}
	end = h + strcspn(h, "/?#");
	if (end == h || *end) {
		cnl_seterr(err, errlen,
		           "endpoint: want scheme://host[:port], no path");
		return -EINVAL;
	}
	a = cnl_xcalloc(1, sizeof(*a));
	a->base.ops = &aws_ops;
	a->host = cnl_xstrdup(h);
	a->region = cnl_xstrdup(cfg->region);
	a->access_key = cnl_xstrdup(cfg->access_key);
	a->secret_key = cnl_xstrdup(cfg->secret_key);
	if (cfg->session_token && *cfg->session_token)
		a->session_token = cnl_xstrdup(cfg->session_token);
	a->max_attempts = cfg->max_attempts <= 0 ? 5
	                  : cfg->max_attempts > ATTEMPTS_MAX
	                      ? ATTEMPTS_MAX
	                      : cfg->max_attempts;
	a->backoff_ms = cfg->backoff_ms <= 0 ? 200
	                : cfg->backoff_ms > CNL_CLOUD_BACKOFF_MAX_MS
	                    ? CNL_CLOUD_BACKOFF_MAX_MS
	                    : cfg->backoff_ms;
	a->seed = (unsigned)cnl_time_now_ms();
	cc.base = endpoint;
	cc.cafile = cfg->cafile;
	cc.user_agent = "cnlabd";
	cc.connect_timeout_ms = 5000;
	cc.timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 20000;
	if (cnl_client_new(&cc, &a->cl) < 0) {
		cnl_seterr(err, errlen, "endpoint: cannot make a client");
		aws_free(&a->base);
		return -EINVAL;
	}
	*ret = &a->base;
	return 0;
}
