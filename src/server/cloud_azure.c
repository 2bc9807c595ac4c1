/*
 * cloud_azure.c - the Microsoft Azure provider of cloud.h: virtual
 * machines through Azure Resource Manager (Microsoft.Compute, api-version
 * 2024-03-01), with the access tokens a service principal's client
 * secret earns at Microsoft Entra ID (OAuth 2.0 client credentials, scope
 * https://management.azure.com/.default); the token kept and renewed by
 * the shared REST client (cloud_rest.h).
 *
 * Instances.  Azure names VMs; the plugin's instance id is the name,
 * derived from the launch's client token as GCP's are (cloud_rest.h), so
 * a PUT retried after a lost answer is the same VM, not a second one
 * (ARM's PUT is idempotent on the name).  A VM is made whole by one PUT:
 * its NIC inline on the account's subnet (networkApiVersion), deleted
 * with it, as its OS disk is; the image is a gallery or managed image id
 * (/subscriptions/...) or a marketplace URN (publisher:offer:sku:version);
 * the user data goes as customData, which cloud-init runs at boot; the
 * administrator password is random, made here and never kept (nobody
 * logs in: the agent is how work gets there).  ARM creates the VM after
 * the PUT answers: the plugin reads the VM (with its instance view) until
 * it is no longer "Creating", and a capacity failure (AllocationFailed,
 * ZonalAllocationFailed, ...) shows there, as a "ProvisioningState/failed/
 * CODE" status.  SkuNotAvailable and quota refusals come with the PUT
 * (409).  All or none: a launch that fails part-way deletes what it made,
 * the failed VM included.
 *
 * Spot: priority Spot, evictionPolicy Deallocate, maxPrice -1 (never
 * evicted for price), so that an evicted VM stays, deallocated, and can be
 * seen; CNLab never deallocates a VM (it deletes them), so a spot VM
 * deallocated was evicted: describe() marks it interrupted.  A VM that no
 * longer exists is described as "terminated".
 *
 * Tags are Azure tags, as given ("cnlab:record" ...), with
 * cnlab-managed=true, by which describe() lists what CNLab launched.
 * Errors are ARM's {"error": {"code", "message"}}, classified as cloud.h
 * says.  Spot prices are the list recorded in cloud_types.c (Azure's
 * spot prices move; an account's prices override the on-demand side).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <jansson.h>

#include "common/base64.h"
#include "common/time.h"
#include "common/util.h"
#include "net/sigv4.h"
#include "server/cloud.h"
#include "server/cloud_rest.h"

#define API_VERSION   "2024-03-01"
#define API_ENDPOINT  "https://management.azure.com"
#define LOGIN         "https://login.microsoftonline.com"
#define SCOPE         "https%3A%2F%2Fmanagement.azure.com%2F.default"
#define MANAGED_TAG   "cnlab-managed"
#define USER_DATA_MAX (48 * 1024) /* customData: 64 KiB after base64 */
/* How long a launch waits for ARM to make a VM. */
#define CREATE_WAIT_MS 300000

struct azure {
	struct cnl_cloud base;
	struct cnl_cloud_rest rest;
	char *client_id, *client_secret;
	char *location, *subnet;
	char prefix[512]; /* ".../resourceGroups/RG/providers/
	                   * Microsoft.Compute/virtualMachines" */
	char endpoint[256];
};

static void copy(char *dst, size_t n, const char *s)
{
	snprintf(dst, n, "%s", s ? s : "");
}

/* ARM's error codes, by kind (cnl_cloud_rest_classify()). */
static const char *const capacity[] = {"SkuNotAvailable",
                                       "AllocationFailed",
                                       "ZonalAllocationFailed",
                                       "OverconstrainedAllocationRequest",
                                       "OverconstrainedZonalAllocationRequest",
                                       "AllocationFailedVMSeriesNotSupported",
                                       "OperationNotAllowed", /* a quota */
                                       "QuotaExceeded",
                                       "SpotVMEvictedOrCapacityNotAvailable",
                                       NULL};
static const char *const throttled[] = {"TooManyRequests",
                                        "SubscriptionRequestsThrottled",
                                        "TenantRequestsThrottled", NULL};
static const char *const auth[] = {"AuthorizationFailed",
                                   "InvalidAuthenticationToken",
                                   "ExpiredAuthenticationToken",
                                   "AuthenticationFailed",
                                   "LinkedAuthorizationFailed",
                                   "SubscriptionNotFound",
                                   "invalid_client",
                                   "unauthorized_client",
                                   NULL};

static void read_error(const json_t *o, struct cnl_cloud_error *e)
{
	const json_t *er = json_object_get(o, "error");

	copy(e->code, sizeof(e->code),
	     json_string_value(json_object_get(er, "code")));
	copy(e->message, sizeof(e->message),
	     json_string_value(json_object_get(er, "message")));
}

/* The token request: the client credentials grant. */
static char *grant(void *ud, struct cnl_cloud_error *e)
{
	struct azure *a = ud;
	char *id = cnl_sigv4_escape(a->client_id),
	     *sec = cnl_sigv4_escape(a->client_secret), *form;
	size_t n = strlen(id) + strlen(sec) + 160;

	(void)e;
	form = cnl_xmalloc(n);
	snprintf(form, n,
	         "grant_type=client_credentials&client_id=%s&client_secret=%s"
	         "&scope=%s",
	         id, sec, SCOPE);
	explicit_bzero(sec, strlen(sec));
	free(sec);
	free(id);
	return form;
}

static int protocol(struct cnl_cloud_error *e, const char *what)
{
	e->kind = CNL_CLOUD_PROTOCOL;
	copy(e->code, sizeof(e->code), "BadAnswer");
	snprintf(e->message, sizeof(e->message), "Azure's answer: %s", what);
	return -EPROTO;
}

static bool name_ok(const char *s)
{
	size_t n = strlen(s);

	return n > 0 && n < 64 &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                 "0123456789") >= 1 &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                 "0123456789-_.") == n;
}

/* The instance view's "ProvisioningState/..." or "PowerState/..." code's
 * last part (NULL: none). */
static const char *status_of(const json_t *vm, const char *kind)
{
	const json_t *st = json_object_get(
	    json_object_get(json_object_get(vm, "properties"), "instanceView"),
	    "statuses");
	size_t i, n = strlen(kind);
	json_t *s;

	json_array_foreach (st, i, s) {
		const char *c = json_string_value(json_object_get(s, "code"));

		if (c && strncmp(c, kind, n) == 0 && c[n] == '/')
			return strrchr(c, '/') + 1;
	}
	return NULL;
}

static const char *status_message(const json_t *vm, const char *code)
{
	const json_t *st = json_object_get(
	    json_object_get(json_object_get(vm, "properties"), "instanceView"),
	    "statuses");
	size_t i;
	json_t *s;

	json_array_foreach (st, i, s) {
		const char *c = json_string_value(json_object_get(s, "code"));

		if (c && strstr(c, code))
			return json_string_value(json_object_get(s, "message"));
	}
	return NULL;
}

/* A VM resource as cloud.h describes it; false when it has no name. */
static bool read_vm(const json_t *o, struct cnl_cloud_instance *out)
{
	const json_t *p = json_object_get(o, "properties");
	const char *name = json_string_value(json_object_get(o, "name"));
	const char *prov =
	    json_string_value(json_object_get(p, "provisioningState"));
	const char *prio = json_string_value(json_object_get(p, "priority"));
	const char *power = status_of(o, "PowerState");

	memset(out, 0, sizeof(*out));
	if (!name || strlen(name) >= sizeof(out->id))
		return false;
	copy(out->id, sizeof(out->id), name);
	copy(out->type, sizeof(out->type),
	     json_string_value(json_object_get(
	         json_object_get(p, "hardwareProfile"), "vmSize")));
	copy(out->zone, sizeof(out->zone),
	     json_string_value(json_object_get(o, "location")));
	copy(out->record, sizeof(out->record),
	     json_string_value(
	         json_object_get(json_object_get(o, "tags"), "cnlab:record")));
	out->spot = prio && strcmp(prio, "Spot") == 0;
	if (prov && strcmp(prov, "Deleting") == 0)
		copy(out->state, sizeof(out->state), "shutting-down");
	else if (prov && strcmp(prov, "Failed") == 0) {
		copy(out->state, sizeof(out->state), "stopped");
		snprintf(out->reason, sizeof(out->reason), "failed: %s",
		         status_of(o, "ProvisioningState")
		             ? status_of(o, "ProvisioningState")
		             : "provisioning failed");
	} else if (power && (strcmp(power, "deallocated") == 0 ||
	                     strcmp(power, "stopped") == 0))
		copy(out->state, sizeof(out->state), "stopped");
	else if (power && (strcmp(power, "deallocating") == 0 ||
	                   strcmp(power, "stopping") == 0))
		copy(out->state, sizeof(out->state), "stopping");
	else if (power && strcmp(power, "running") == 0)
		copy(out->state, sizeof(out->state), "running");
	else if (!power && prov && strcmp(prov, "Succeeded") == 0)
		copy(out->state, sizeof(out->state), "running"); /* a list */
	else
		copy(out->state, sizeof(out->state), "pending");
	/* CNLab deletes, never deallocates: a spot VM deallocated was
	 * evicted. */
	if (out->spot &&
	    (strcmp(out->state, "stopped") == 0 ||
	     strcmp(out->state, "stopping") == 0) &&
	    !(prov && strcmp(prov, "Failed") == 0)) {
		out->interrupted = true;
		copy(out->reason, sizeof(out->reason),
		     "evicted: Azure reclaimed the spot VM");
	} else if (!out->reason[0] && strcmp(out->state, "stopped") == 0) {
		copy(out->reason, sizeof(out->reason),
		     "deallocated outside CNLab");
	}
	return true;
}

static int get_vm(struct azure *a, const char *name, json_t **ret,
                  struct cnl_cloud_error *e)
{
	char path[768];

	snprintf(path, sizeof(path),
	         "%s/%.63s?$expand=instanceView&api-version=" API_VERSION,
	         a->prefix, name);
	return cnl_cloud_rest_call(&a->rest, "GET", path, NULL, ret, e);
}

static int delete_vm(struct azure *a, const char *name,
                     struct cnl_cloud_error *e)
{
	char path[768];
	json_t *o = NULL;
	int r;

	snprintf(path, sizeof(path), "%s/%.63s?api-version=" API_VERSION,
	         a->prefix, name);
	r = cnl_cloud_rest_call(&a->rest, "DELETE", path, NULL, &o, e);
	json_decref(o);
	return r == -ENOENT ? 0 : r;
}

/* A password ARM takes (upper, lower, digit, special; 24 characters),
 * random; nobody is told it. */
static void password(char out[25])
{
	static const char *const sets[] = {"ABCDEFGHJKLMNPQRSTUVWXYZ",
	                                   "abcdefghijkmnopqrstuvwxyz",
	                                   "23456789", "!#%+-.:=@^_"};
	unsigned char r[24];

	/* getrandom() of 24 bytes does not fail once the pool is ready
	 * (blocking until it is), but for EINTR. */
	while (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		;
	for (int i = 0; i < 24; i++) {
		const char *s = sets[i < 4 ? i : r[i] % 4];

		out[i] = s[r[i] % strlen(s)];
	}
	out[24] = '\0';
	explicit_bzero(r, sizeof(r));
}

/* The image: an id, or a marketplace URN; NULL when it is neither. */
static json_t *image_ref(const char *img)
{
	char p[4][128];
	const char *s = img;

	if (strncmp(img, "/subscriptions/", 15) == 0)
		return json_pack("{s:s}", "id", img);
	for (int i = 0; i < 4; i++) {
		size_t n = strcspn(s, ":");

		if (n == 0 || n >= sizeof(p[i]) || (i < 3 && s[n] != ':') ||
		    (i == 3 && s[n]))
			return NULL;
		snprintf(p[i], sizeof(p[i]), "%.*s", (int)n, s);
		s += n + (i < 3);
	}
	return json_pack("{s:s,s:s,s:s,s:s}", "publisher", p[0], "offer", p[1],
	                 "sku", p[2], "version", p[3]);
}

static json_t *vm_body(struct azure *a, const struct cnl_cloud_launch *l,
                       const char *name, json_t *image)
{
	bool spot = l->market == CNL_CLOUD_SPOT;
	json_t *tags = json_pack("{s:s}", MANAGED_TAG, "true"), *o, *props;
	char pw[25], nic[80];
	char *ud = l->user_data
	               ? cnl_b64_encode_new(l->user_data, strlen(l->user_data),
	                                    CNL_B64_PAD)
	               : NULL;
	bool ok = true;

	for (size_t i = 0; i < l->ntags; i++)
		ok &= json_object_set_new(tags, l->tags[i].key,
		                          json_string(l->tags[i].value
		                                          ? l->tags[i].value
		                                          : "")) == 0;
	if (!ok) {
		json_decref(tags);
		json_decref(image);
		free(ud);
		return NULL;
	}
	password(pw);
	snprintf(nic, sizeof(nic), "%.63s-nic", name);
	props = json_pack(
	    "{s:{s:s},s:{s:o,s:{s:s,s:s}},"
	    "s:{s:s,s:s,s:s,s:{s:b}},"
	    "s:{s:s,s:[{s:s,s:{s:b,s:s,s:[{s:s,s:{s:{s:s}}}]}}]},s:s}",
	    "hardwareProfile", "vmSize", l->instance_type, "storageProfile",
	    "imageReference", image, "osDisk", "createOption", "FromImage",
	    "deleteOption", "Delete", "osProfile", "computerName", name,
	    "adminUsername", "cnlab", "adminPassword", pw, "linuxConfiguration",
	    "disablePasswordAuthentication", 0, "networkProfile",
	    "networkApiVersion", "2020-11-01", "networkInterfaceConfigurations",
	    "name", nic, "properties", "primary", 1, "deleteOption", "Delete",
	    "ipConfigurations", "name", "ipconfig1", "properties", "subnet",
	    "id", a->subnet, "priority", spot ? "Spot" : "Regular");
	explicit_bzero(pw, sizeof(pw));
	if (ud)
		json_object_set_new(json_object_get(props, "osProfile"),
		                    "customData", json_string(ud));
	free(ud);
	if (spot) {
		json_object_set_new(props, "evictionPolicy",
		                    json_string("Deallocate"));
		json_object_set_new(props, "billingProfile",
		                    json_pack("{s:i}", "maxPrice", -1));
	}
	o = json_pack("{s:s,s:o,s:o}", "location", a->location, "tags", tags,
	              "properties", props);
	return o;
}

/* Wait for VM @name to be made: 0 once it is, else the error it failed
 * with in @e. */
static int wait_made(struct azure *a, const char *name,
                     struct cnl_cloud_error *e)
{
	int64_t until = cnl_time_now_ms() + CREATE_WAIT_MS;

	for (;;) {
		json_t *vm = NULL;
		const char *prov, *why;
		bool made;
		int r = get_vm(a, name, &vm, e);

		if (r == -ENOENT)
			return protocol(e, "a VM just made is not there");
		if (r < 0)
			return r;
		prov = json_string_value(json_object_get(
		    json_object_get(vm, "properties"), "provisioningState"));
		if (prov && strcmp(prov, "Failed") == 0) {
			why = status_of(vm, "ProvisioningState");
			copy(e->code, sizeof(e->code),
			     why && strcmp(why, "failed")
			         ? why
			         : "ProvisioningFailed");
			copy(e->message, sizeof(e->message),
			     status_message(vm, "ProvisioningState/failed"));
			json_decref(vm);
			e->kind = cnl_cloud_rest_classify(&a->rest, 0, e->code);
			if (e->kind == CNL_CLOUD_UNAVAILABLE)
				e->kind = CNL_CLOUD_INVALID;
			return cnl_cloud_errno(e->kind);
		}
		made = !prov || (strcmp(prov, "Creating") != 0 &&
		                 strcmp(prov, "Updating") != 0);
		json_decref(vm); /* prov with it */
		if (made)
			return 0;
		if (cnl_time_now_ms() >= until) {
			/* Made, or about to be: the burst sees which. */
			return 0;
		}
		sleep(1);
	}
}

static int provision(struct cnl_cloud *c, const struct cnl_cloud_launch *l,
                     struct cnl_cloud_instance *ret, size_t cap, size_t *ret_n,
                     struct cnl_cloud_error *e)
{
	struct azure *a = (struct azure *)c;
	char names[CNL_CLOUD_LAUNCH_MAX][64];
	json_t *image = l->image ? image_ref(l->image) : NULL;
	int made = 0, r = 0;

	*ret_n = 0;
	memset(e, 0, sizeof(*e));
	if (!l->instance_type || !name_ok(l->instance_type) || !image ||
	    l->count < 1 || l->count > CNL_CLOUD_LAUNCH_MAX ||
	    !l->client_token || !*l->client_token ||
	    strlen(l->client_token) > 64 || (size_t)l->count > cap ||
	    (l->user_data && strlen(l->user_data) > USER_DATA_MAX)) {
		json_decref(image);
		e->kind = CNL_CLOUD_INVALID;
		snprintf(e->message, sizeof(e->message),
		         "launch: a VM size, an image (an id, or "
		         "publisher:offer:sku:version), 1..%d VMs within the "
		         "answer's room, a client token of 1..64 and user data "
		         "of at most %d bytes are required",
		         CNL_CLOUD_LAUNCH_MAX, USER_DATA_MAX);
		return -EINVAL;
	}
	for (int k = 0; k < l->count; k++) {
		char path[768];
		json_t *body, *vm = NULL;

		cnl_cloud_instance_name(l->client_token, k, names[k],
		                        sizeof(names[k]));
		snprintf(path, sizeof(path),
		         "%s/%.63s?api-version=" API_VERSION, a->prefix,
		         names[k]);
		body = vm_body(a, l, names[k], json_incref(image));
		if (!body) {
			/* Not UTF-8 (user data, a tag), or out of memory. */
			e->kind = CNL_CLOUD_INVALID;
			copy(e->message, sizeof(e->message),
			     "launch: user data and tags must be UTF-8 text");
			r = -EINVAL;
			break;
		}
		r = cnl_cloud_rest_call(&a->rest, "PUT", path, body, &vm, e);
		json_decref(body);
		json_decref(vm);
		/* Made (or perhaps, without an answer): ours to delete if
		 * the launch fails. */
		if (r == 0 || e->kind == CNL_CLOUD_UNAVAILABLE ||
		    e->kind == CNL_CLOUD_THROTTLED)
			made = k + 1;
		if (r == 0)
			r = wait_made(a, names[k], e);
		if (r < 0)
			break;
	}
	json_decref(image);
	for (int k = 0; r == 0 && k < l->count; k++) {
		json_t *vm = NULL;

		r = get_vm(a, names[k], &vm, e);
		if (r == 0 && !read_vm(vm, &ret[k]))
			r = protocol(e, "a VM without a name");
		if (r == -ENOENT)
			r = protocol(e, "a launched VM is not there");
		json_decref(vm);
	}
	if (r < 0) {
		struct cnl_cloud_error de;

		/* All or none: what this launch made goes. */
		for (int k = 0; k < made; k++)
			delete_vm(a, names[k], &de);
		return r;
	}
	*ret_n = (size_t)l->count;
	return 0;
}

static int describe(struct cnl_cloud *c, const char *const *ids, size_t nids,
                    struct cnl_cloud_instance *ret, size_t cap, size_t *ret_n,
                    struct cnl_cloud_error *e)
{
	struct azure *a = (struct azure *)c;
	char path[1024];
	int r;

	*ret_n = 0;
	memset(e, 0, sizeof(*e));
	for (size_t i = 0; i < nids && *ret_n < cap; i++) {
		struct cnl_cloud_instance *o = &ret[*ret_n];
		json_t *vm = NULL;

		if (!name_ok(ids[i]))
			continue;
		r = get_vm(a, ids[i], &vm, e);
		if (r == -ENOENT) {
			cnl_cloud_gone(o, ids[i], "the VM no longer exists");
		} else if (r < 0) {
			return r;
		} else if (!read_vm(vm, o)) {
			json_decref(vm);
			return protocol(e, "a VM without a name");
		}
		json_decref(vm);
		(*ret_n)++;
	}
	if (nids)
		return 0;
	/* Every VM CNLab launched, by its tag, page by page; a next page
	 * is followed only on the same endpoint (the token goes there). */
	snprintf(path, sizeof(path), "%s?api-version=" API_VERSION, a->prefix);
	for (int pages = 0; pages < 100 && *ret_n < cap; pages++) {
		json_t *o = NULL, *vm;
		const char *next;
		size_t i, el = strlen(a->endpoint);

		if ((r = cnl_cloud_rest_call(&a->rest, "GET", path, NULL, &o,
		                             e)) < 0)
			return r;
		json_array_foreach (json_object_get(o, "value"), i, vm) {
			const char *m = json_string_value(json_object_get(
			    json_object_get(vm, "tags"), MANAGED_TAG));

			if (m && strcmp(m, "true") == 0 && *ret_n < cap &&
			    read_vm(vm, &ret[*ret_n]))
				(*ret_n)++;
		}
		next = json_string_value(json_object_get(o, "nextLink"));
		if (!next || !*next) {
			json_decref(o);
			return 0;
		}
		if (strncmp(next, a->endpoint, el) != 0 || next[el] != '/' ||
		    strlen(next + el) >= sizeof(path) ||
		    strpbrk(next, " \r\n\t#")) {
			json_decref(o);
			return protocol(e, "a nextLink to another place");
		}
		copy(path, sizeof(path), next + el);
		json_decref(o);
	}
	return 0;
}

static int terminate(struct cnl_cloud *c, const char *const *ids, size_t nids,
                     struct cnl_cloud_error *e)
{
	struct azure *a = (struct azure *)c;
	int r;

	memset(e, 0, sizeof(*e));
	if (nids == 0) {
		e->kind = CNL_CLOUD_INVALID;
		copy(e->message, sizeof(e->message), "terminate: no VM");
		return -EINVAL;
	}
	for (size_t i = 0; i < nids; i++) {
		if (!name_ok(ids[i])) {
			e->kind = CNL_CLOUD_INVALID;
			snprintf(e->message, sizeof(e->message),
			         "terminate: \"%.64s\" is not a VM name",
			         ids[i]);
			return -EINVAL;
		}
		if ((r = delete_vm(a, ids[i], e)) < 0)
			return r;
	}
	return 0;
}

static int spot_price(struct cnl_cloud *c, const char *type, double *ret,
                      struct cnl_cloud_error *e)
{
	(void)c;
	return cnl_cloud_listed_spot_price("azure", type, ret, e);
}

static void azure_free(struct cnl_cloud *c)
{
	struct azure *a = (struct azure *)c;

	cnl_cloud_rest_done(&a->rest);
	if (a->client_secret)
		explicit_bzero(a->client_secret, strlen(a->client_secret));
	free(a->client_secret);
	free(a->client_id);
	free(a->location);
	free(a->subnet);
	free(a);
}

static const struct cnl_cloud_ops azure_ops = {
    .name = "azure",
    .provision = provision,
    .describe = describe,
    .terminate = terminate,
    .spot_price = spot_price,
    .free = azure_free,
};

/* A subscription, tenant or client id, a location or a resource group:
 * letters, digits, "-_.()". */
static bool id_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	return n > 0 && n <= 90 &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                 "0123456789-_.()") == n;
}

int cnl_cloud_azure_new(const struct cnl_cloud_azure_config *cfg,
                        struct cnl_cloud **ret, char *err, size_t errlen)
{
	char tu[512];
	struct azure *a;

	if (!id_ok(cfg->subscription) || !id_ok(cfg->location) ||
	    !id_ok(cfg->resource_group)) {
		cnl_seterr(err, errlen, "%s: missing or malformed",
		           !id_ok(cfg->subscription) ? "subscription"
		           : !id_ok(cfg->location)   ? "location"
		                                     : "resource_group");
		return -EINVAL;
	}
	if (!cfg->subnet || strncmp(cfg->subnet, "/subscriptions/", 15) != 0 ||
	    !strstr(cfg->subnet, "/subnets/") || strlen(cfg->subnet) > 400 ||
	    strpbrk(cfg->subnet, " \"\\?#%&\r\n")) {
		cnl_seterr(err, errlen,
		           "subnet: the subnet's resource id "
		           "(/subscriptions/.../subnets/NAME)");
		return -EINVAL;
	}
	if (!id_ok(cfg->tenant_id) || !id_ok(cfg->client_id) ||
	    !cfg->client_secret || !*cfg->client_secret) {
		cnl_seterr(err, errlen, "%s: missing or malformed",
		           !id_ok(cfg->tenant_id)   ? "tenant_id"
		           : !id_ok(cfg->client_id) ? "client_id"
		                                    : "client_secret");
		return -EINVAL;
	}
	if (cfg->token_uri)
		copy(tu, sizeof(tu), cfg->token_uri);
	else
		snprintf(tu, sizeof(tu), LOGIN "/%s/oauth2/v2.0/token",
		         cfg->tenant_id);
	a = cnl_xcalloc(1, sizeof(*a));
	a->base.ops = &azure_ops;
	a->client_id = cnl_xstrdup(cfg->client_id);
	a->client_secret = cnl_xstrdup(cfg->client_secret);
	a->location = cnl_xstrdup(cfg->location);
	a->subnet = cnl_xstrdup(cfg->subnet);
	copy(a->endpoint, sizeof(a->endpoint),
	     cfg->endpoint ? cfg->endpoint : API_ENDPOINT);
	snprintf(a->prefix, sizeof(a->prefix),
	         "/subscriptions/%s/resourceGroups/%s/providers/"
	         "Microsoft.Compute/virtualMachines",
	         cfg->subscription, cfg->resource_group);
	a->rest.who = "Azure";
	a->rest.grant = grant;
	a->rest.ud = a;
	a->rest.read_error = read_error;
	a->rest.capacity_codes = capacity;
	a->rest.throttled_codes = throttled;
	a->rest.auth_codes = auth;
	if (cnl_cloud_rest_init(&a->rest, a->endpoint, tu, cfg->cafile,
	                        cfg->timeout_ms, cfg->max_attempts,
	                        cfg->backoff_ms, err, errlen) < 0) {
		azure_free(&a->base);
		return -EINVAL;
	}
	*ret = &a->base;
	return 0;
}
