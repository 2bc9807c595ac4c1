/*
 * kube_map.c - Kubernetes objects to CNLab's asks and back (kube_map.h).
 */
#include "server/kube_map.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "common/time.h"

#define S(o, k) json_string_value(json_object_get((o), (k)))

/* ---- quantities ---------------------------------------------------------- */

/* The quantity @q as a number of its base unit (cores, bytes); NAN when
 * it is not one. */
static double quantity(const char *q)
{
	static const struct {
		const char *suffix;
		double mult;
	} sfx[] = {{"Ki", 1024.0},
	           {"Mi", 1048576.0},
	           {"Gi", 1073741824.0},
	           {"Ti", 1099511627776.0},
	           {"Pi", 1125899906842624.0},
	           {"Ei", 1152921504606846976.0},
	           {"m", 1e-3},
	           {"k", 1e3},
	           {"M", 1e6},
	           {"G", 1e9},
	           {"T", 1e12},
	           {"P", 1e15},
	           {"E", 1e18},
	           {"", 1.0}};
	char *end;
	double v;

	if (!q || !*q ||
	    !(isdigit((unsigned char)*q) || *q == '.' || *q == '+'))
		return NAN;
	errno = 0;
	v = strtod(q, &end);
	if (errno || end == q || v < 0)
		return NAN;
	for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++)
		if (strcmp(end, sfx[i].suffix) == 0)
			return v * sfx[i].mult;
	return NAN; /* "1e3" was read whole by strtod; anything else is bad */
}

int64_t cnl_kube_cpu_milli(const char *q)
{
	double v = quantity(q);

	if (isnan(v) || v > 1e12)
		return -1;
	return (int64_t)ceil(v * 1000.0 - 1e-9);
}

int64_t cnl_kube_mem_mib(const char *q)
{
	double v = quantity(q);

	if (isnan(v) || v > 1e18)
		return -1;
	return (int64_t)ceil(v / 1048576.0 - 1e-9);
}

/* ---- pods ---------------------------------------------------------------- */

int cnl_kube_pod_claim(const json_t *pod, char *ret, size_t len, char *err,
                       size_t errlen)
{
	const json_t *claims = json_object_get(json_object_get(pod, "spec"),
	                                       "resourceClaims"),
	             *x;
	const char *name, *direct, *tmpl;

	ret[0] = '\0';
	if (json_array_size(claims) == 0)
		return 0;
	if (json_array_size(claims) > 1) {
		cnl_seterr(
		    err, errlen,
		    "spec.resourceClaims: %zu claims; CNLab places a pod "
		    "with one",
		    json_array_size(claims));
		return -EINVAL;
	}
	x = json_array_get(claims, 0);
	name = S(x, "name");
	direct = S(x, "resourceClaimName");
	tmpl = S(x, "resourceClaimTemplateName");
	if (direct) {
		snprintf(ret, len, "%s", direct);
		return 0;
	}
	if (!tmpl || !name) {
		cnl_seterr(err, errlen,
		           "spec.resourceClaims[0]: neither resourceClaimName "
		           "nor resourceClaimTemplateName");
		return -EINVAL;
	}
	/* Made from the template by the claim controller; its name is in
	 * the pod's status once it is. */
	const json_t *sts = json_object_get(json_object_get(pod, "status"),
	                                    "resourceClaimStatuses");
	size_t i;
	json_array_foreach (sts, i, x) {
		const char *n = S(x, "name"), *c = S(x, "resourceClaimName");
		if (n && c && strcmp(n, name) == 0) {
			snprintf(ret, len, "%s", c);
			return 0;
		}
	}
	return -EAGAIN;
}

/* `device.attributes["gpu.cnlab.io"].NAME == "VALUE"` (or with single
 * quotes) into @attr and @val; `device.driver == "gpu.cnlab.io"` is 1;
 * anything else -1. */
static int selector(const char *e, char *attr, size_t alen, char *val,
                    size_t vlen)
{
	char drv[64], a[64], v[128], q1, q2, q3, q4, rest;

	attr[0] = val[0] = '\0';
	if (sscanf(e, " device.driver == %c%63[^\"']%c %c", &q1, drv, &q2,
	           &rest) == 3 &&
	    (q1 == '"' || q1 == '\'') && q1 == q2 &&
	    strcmp(drv, CNL_KUBE_DRIVER) == 0)
		return 1;
	if (sscanf(e,
	           " device.attributes[%c%63[^\"']%c].%63[a-zA-Z0-9_] == "
	           "%c%127[^\"']%c %c",
	           &q1, drv, &q2, a, &q3, v, &q4, &rest) != 7)
		return -1;
	if (!(q1 == '"' || q1 == '\'') || q1 != q2 ||
	    !(q3 == '"' || q3 == '\'') || q3 != q4 ||
	    strcmp(drv, CNL_KUBE_DRIVER) != 0)
		return -1;
	snprintf(attr, alen, "%s", a);
	snprintf(val, vlen, "%s", v);
	return 0;
}

static bool shape_word(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '-' && *s != '.')
			return false;
	return true;
}

/* The GPU part of the shape from the claim's one request. */
static int claim_shape(const json_t *pod, const json_t *claim,
                       struct cnl_kube_ask *ret, char *err, size_t errlen)
{
	const json_t *reqs = json_object_get(
	    json_object_get(json_object_get(claim, "spec"), "devices"),
	    "requests");
	const json_t *r, *ex, *sels, *x;
	const char *cls, *mode, *blocks_q, *anno;
	char type[64] = "any", profile[64] = "", a[64], v[128];
	json_int_t count = 1, blocks = 0;
	size_t i;

	if (json_array_size(reqs) != 1) {
		cnl_seterr(err, errlen,
		           "ResourceClaim spec.devices.requests: %zu requests; "
		           "CNLab places a claim with one",
		           json_array_size(reqs));
		return -EINVAL;
	}
	r = json_array_get(reqs, 0);
	snprintf(ret->request, sizeof(ret->request), "%s",
	         S(r, "name") ? S(r, "name") : "");
	if (!(ex = json_object_get(r, "exactly"))) {
		cnl_seterr(err, errlen,
		           "ResourceClaim request %s: only \"exactly\" is "
		           "placed by CNLab (no firstAvailable)",
		           ret->request);
		return -EINVAL;
	}
	cls = S(ex, "deviceClassName");
	if (!cls || strcmp(cls, CNL_KUBE_DRIVER) != 0) {
		cnl_seterr(err, errlen,
		           "ResourceClaim request %s: deviceClassName %s is "
		           "not " CNL_KUBE_DRIVER,
		           ret->request, cls ? cls : "(none)");
		return -EINVAL;
	}
	mode = S(ex, "allocationMode");
	if (mode && strcmp(mode, "ExactCount") != 0) {
		cnl_seterr(err, errlen,
		           "ResourceClaim request %s: allocationMode %s; CNLab "
		           "places ExactCount",
		           ret->request, mode);
		return -EINVAL;
	}
	if (json_object_get(ex, "count"))
		count = json_integer_value(json_object_get(ex, "count"));
	if (count < 1 || count > CNL_WIRE_GPUS_MAX) {
		cnl_seterr(err, errlen,
		           "ResourceClaim request %s: count must be 1..%d",
		           ret->request, CNL_WIRE_GPUS_MAX);
		return -EINVAL;
	}
	blocks_q =
	    S(json_object_get(json_object_get(ex, "capacity"), "requests"),
	      "blocks");
	if (blocks_q) {
		char *end;
		errno = 0;
		blocks = strtoll(blocks_q, &end, 10);
		if (errno || end == blocks_q || *end || blocks < 1 ||
		    blocks > 100) {
			cnl_seterr(err, errlen,
			           "ResourceClaim request %s: "
			           "capacity.requests.blocks must be a whole "
			           "number from 1 to 100",
			           ret->request);
			return -EINVAL;
		}
	}
	if ((anno = S(json_object_get(json_object_get(pod, "metadata"),
	                              "annotations"),
	              "cnlab.io/gpu-type")))
		snprintf(type, sizeof(type), "%s", anno);
	sels = json_object_get(ex, "selectors");
	json_array_foreach (sels, i, x) {
		const char *e = S(json_object_get(x, "cel"), "expression");
		int k = e ? selector(e, a, sizeof(a), v, sizeof(v)) : -1;

		if (k == 1)
			continue;
		if (k < 0 ||
		    (strcmp(a, "type") != 0 && strcmp(a, "profile") != 0)) {
			cnl_seterr(err, errlen,
			           "ResourceClaim request %s: selector %zu: "
			           "CNLab reads only "
			           "device.attributes[\"" CNL_KUBE_DRIVER
			           "\"].type or .profile == "
			           "\"VALUE\"",
			           ret->request, i);
			return -EINVAL;
		}
		if (strlen(v) >= sizeof(type)) {
			cnl_seterr(
			    err, errlen,
			    "ResourceClaim request %s: selector %zu: the "
			    "value is over %zu bytes",
			    ret->request, i, sizeof(type) - 1);
			return -EINVAL;
		}
		memcpy(strcmp(a, "type") == 0 ? type : profile, v,
		       strlen(v) + 1);
	}
	if (!shape_word(type) || (profile[0] && !shape_word(profile))) {
		cnl_seterr(err, errlen,
		           "ResourceClaim request %s: the GPU type or profile "
		           "has characters a shape cannot hold",
		           ret->request);
		return -EINVAL;
	}
	if ((blocks || profile[0]) && count != 1) {
		cnl_seterr(err, errlen,
		           "ResourceClaim request %s: count must be 1 with "
		           "blocks or a MIG profile",
		           ret->request);
		return -EINVAL;
	}
	if (blocks && profile[0]) {
		cnl_seterr(err, errlen,
		           "ResourceClaim request %s: blocks and a MIG profile "
		           "together",
		           ret->request);
		return -EINVAL;
	}
	if (profile[0])
		snprintf(ret->shape, sizeof(ret->shape), "%s-%s", type,
		         profile);
	else if (blocks)
		snprintf(ret->shape, sizeof(ret->shape), "%s-%d", type,
		         (int)blocks);
	else if (count == 1)
		snprintf(ret->shape, sizeof(ret->shape), "%s-full", type);
	else
		snprintf(ret->shape, sizeof(ret->shape), "%sx%d", type,
		         (int)count);
	return 0;
}

/* Container @c's request of @what in @conv's unit: 0 when it asks none,
 * -1 when it is not a quantity. */
static int64_t request_of(const json_t *c, const char *what,
                          int64_t (*conv)(const char *))
{
	const char *q = S(
	    json_object_get(json_object_get(c, "resources"), "requests"), what);

	return q ? conv(q) : 0;
}

/* The pod's request of @what ("cpu", "memory") as the kubelet and
 * kube-scheduler count it; -1 bad.  Its containers run together, and with
 * them the sidecars (init containers that restart Always), which start in
 * order before them; every other init container runs alone, beside the
 * sidecars started before it: the pod needs the largest of those sums,
 * and its RuntimeClass's overhead on top. */
static int64_t requests_sum(const json_t *pod, const char *what,
                            int64_t (*conv)(const char *))
{
	const json_t *spec = json_object_get(pod, "spec"), *c;
	const int64_t lim = INT64_MAX / 1024;
	int64_t sum = 0, side = 0, need = 0, v;
	size_t i;

	json_array_foreach (json_object_get(spec, "initContainers"), i, c) {
		const char *rp = S(c, "restartPolicy");
		if ((v = request_of(c, what, conv)) < 0 || v > lim - side)
			return -1;
		if (rp && strcmp(rp, "Always") == 0)
			side += v;
		else if (side + v > need)
			need = side + v;
	}
	json_array_foreach (json_object_get(spec, "containers"), i, c) {
		if ((v = request_of(c, what, conv)) < 0 || v > lim - sum)
			return -1;
		sum += v;
	}
	if (sum > lim - side)
		return -1;
	if (sum + side > need)
		need = sum + side;
	const char *o = S(json_object_get(spec, "overhead"), what);
	if (o && ((v = conv(o)) < 0 || v > lim - need))
		return -1;
	return need + (o ? v : 0);
}

int cnl_kube_pod_requests(const json_t *pod, int64_t *cpu_milli,
                          int64_t *mem_mib)
{
	*cpu_milli = requests_sum(pod, "cpu", cnl_kube_cpu_milli);
	*mem_mib = requests_sum(pod, "memory", cnl_kube_mem_mib);
	return *cpu_milli < 0 || *mem_mib < 0 ? -EINVAL : 0;
}

int cnl_kube_ask_of(const json_t *pod, const json_t *claim,
                    struct cnl_kube_ask *ret, char *err, size_t errlen)
{
	const json_t *anns =
	    json_object_get(json_object_get(pod, "metadata"), "annotations");
	const json_t *prio =
	    json_object_get(json_object_get(pod, "spec"), "priority");
	const char *a;
	json_int_t p = json_is_integer(prio) ? json_integer_value(prio) : 0;
	int64_t ms;

	memset(ret, 0, sizeof(*ret));
	ret->preemptible = 1;
	if (claim) {
		int r = claim_shape(pod, claim, ret, err, errlen);
		if (r < 0)
			return r;
	} else {
		snprintf(ret->shape, sizeof(ret->shape), "cpu");
	}
	ret->priority = p < 0         ? "low"
	                : p < 1000    ? "normal"
	                : p < 1000000 ? "high"
	                              : "critical";
	if ((a = S(anns, "cnlab.io/priority"))) {
		static const char *const names[] = {"low", "normal", "high",
		                                    "critical"};
		ret->priority = NULL;
		for (int i = 0; i < 4; i++)
			if (strcmp(a, names[i]) == 0)
				ret->priority = names[i];
		if (!ret->priority) {
			cnl_seterr(err, errlen,
			           "annotation cnlab.io/priority: must be low, "
			           "normal, high or critical");
			return -EINVAL;
		}
	}
	if ((a = S(anns, "cnlab.io/dataset"))) {
		if (strlen(a) >= sizeof(ret->dataset)) {
			cnl_seterr(
			    err, errlen,
			    "annotation cnlab.io/dataset: over %zu bytes",
			    sizeof(ret->dataset) - 1);
			return -EINVAL;
		}
		snprintf(ret->dataset, sizeof(ret->dataset), "%s", a);
	}
	if ((a = S(anns, "cnlab.io/gpu-types"))) {
		/* TYPE[,TYPE...]: what cnlabd's "gpu_types" takes, each
		 * checked there against the catalog; here only the form. */
		size_t n = strlen(a), items = 1;
		bool good =
		    n > 0 && n < sizeof(ret->gpu_types) &&
		    strspn(a, "abcdefghijklmnopqrstuvwxyz0123456789-,") == n &&
		    a[0] != ',' && a[n - 1] != ',' && !strstr(a, ",,");
		for (const char *c = a; good && *c; c++)
			items += *c == ',';
		if (!good || items > 16) {
			cnl_seterr(err, errlen,
			           "annotation cnlab.io/gpu-types: 1 to 16 GPU "
			           "types or families, comma-separated "
			           "(h100,a100)");
			return -EINVAL;
		}
		snprintf(ret->gpu_types, sizeof(ret->gpu_types), "%s", a);
	}
	if ((a = S(anns, "cnlab.io/deadline"))) {
		if (cnl_time_parse_rfc3339(a, &ms) < 0 ||
		    strlen(a) >= sizeof(ret->deadline)) {
			cnl_seterr(err, errlen,
			           "annotation cnlab.io/deadline: must be an "
			           "RFC 3339 time");
			return -EINVAL;
		}
		snprintf(ret->deadline, sizeof(ret->deadline), "%s", a);
	}
	if ((a = S(anns, "cnlab.io/runtime-seconds"))) {
		char *end;
		errno = 0;
		ret->runtime_s = strtoll(a, &end, 10);
		if (errno || end == a || *end || ret->runtime_s < 1 ||
		    ret->runtime_s > 366LL * 86400) {
			cnl_seterr(
			    err, errlen,
			    "annotation cnlab.io/runtime-seconds: must be "
			    "a whole number of seconds, 1..31622400");
			return -EINVAL;
		}
	}
	if ((a = S(anns, "cnlab.io/preemptible"))) {
		if (strcmp(a, "true") != 0 && strcmp(a, "false") != 0) {
			cnl_seterr(err, errlen,
			           "annotation cnlab.io/preemptible: must be "
			           "\"true\" or \"false\"");
			return -EINVAL;
		}
		ret->preemptible = strcmp(a, "true") == 0;
	}
	if ((ret->cpu_milli = requests_sum(pod, "cpu", cnl_kube_cpu_milli)) <
	        0 ||
	    (ret->mem_mib = requests_sum(pod, "memory", cnl_kube_mem_mib)) <
	        0) {
		cnl_seterr(err, errlen,
		           "spec.containers[].resources.requests: a cpu or "
		           "memory that is not a quantity");
		return -EINVAL;
	}
	return 0;
}

const char *cnl_kube_project_of(const json_t *ns)
{
	const json_t *md = json_object_get(ns, "metadata");
	const char *p = S(json_object_get(md, "labels"), "cnlab.io/project");

	return p && *p ? p : S(md, "name");
}

/* ---- nodes --------------------------------------------------------------- */

int cnl_kube_register_of(const json_t *node, const json_t *slices,
                         struct cnl_wire_register *ret, char *err,
                         size_t errlen)
{
	const json_t *md = json_object_get(node, "metadata");
	const json_t *alloc =
	    json_object_get(json_object_get(node, "status"), "allocatable");
	const char *name = S(md, "name"), *t;
	const json_t *s, *d;
	size_t i, j;

	memset(ret, 0, sizeof(*ret));
	ret->protocol = CNL_WIRE_PROTOCOL;
	if (!name || strlen(name) >= sizeof(ret->name)) {
		cnl_seterr(err, errlen, "node name missing or over %zu bytes",
		           sizeof(ret->name) - 1);
		return -EINVAL;
	}
	snprintf(ret->name, sizeof(ret->name), "%s", name);
	ret->has_devices = true;
	json_array_foreach (slices, i, s) {
		const json_t *spec = json_object_get(s, "spec");
		const char *drv = S(spec, "driver"), *nn = S(spec, "nodeName");

		if (!drv || strcmp(drv, CNL_KUBE_DRIVER) != 0 || !nn ||
		    strcmp(nn, name) != 0)
			continue;
		json_array_foreach (json_object_get(spec, "devices"), j, d) {
			const char *dn = S(d, "name");
			const json_t *at = json_object_get(d, "attributes");
			struct cnl_wire_device *w;
			const char *uuid, *mem;
			json_int_t idx;

			if (!dn || strncmp(dn, "gpu-", 4) != 0 ||
			    strstr(dn, "-mig-"))
				continue;
			idx = json_integer_value(json_object_get(
			    json_object_get(at, "index"), "int"));
			t = S(json_object_get(at, "type"), "string");
			uuid = S(json_object_get(at, "uuid"), "string");
			mem = S(json_object_get(json_object_get(d, "capacity"),
			                        "memory"),
			        "value");
			if (!t || !uuid || idx < 0 ||
			    idx >= CNL_WIRE_GPUS_MAX ||
			    ret->n_devices == CNL_WIRE_GPUS_MAX ||
			    strlen(uuid) >= CNL_WIRE_UUID_MAX) {
				cnl_seterr(
				    err, errlen,
				    "node %s: device %s: no type, uuid or "
				    "index in range",
				    name, dn);
				return -EINVAL;
			}
			if (!ret->gpu_type[0])
				snprintf(ret->gpu_type, sizeof(ret->gpu_type),
				         "%s", t);
			else if (strcmp(ret->gpu_type, t) != 0) {
				cnl_seterr(
				    err, errlen,
				    "node %s: GPUs of types %s and %s; a "
				    "CNLab node has one type",
				    name, ret->gpu_type, t);
				return -EINVAL;
			}
			w = &ret->devices[ret->n_devices++];
			w->index = (int)idx;
			snprintf(w->uuid, sizeof(w->uuid), "%s", uuid);
			w->mem_mib = mem ? cnl_kube_mem_mib(mem) : 0;
			w->healthy = true;
		}
	}
	if (!ret->n_devices)
		return -ENOENT;
	snprintf(ret->cluster, sizeof(ret->cluster), "kubernetes");
	/* By index: CNLab's GPU i is the device gpu-i. */
	for (int a = 0; a < ret->n_devices; a++)
		for (int b = a + 1; b < ret->n_devices; b++)
			if (ret->devices[b].index < ret->devices[a].index) {
				struct cnl_wire_device x = ret->devices[a];
				ret->devices[a] = ret->devices[b];
				ret->devices[b] = x;
			}
	for (int a = 0; a < ret->n_devices; a++)
		if (ret->devices[a].index != a) {
			cnl_seterr(err, errlen,
			           "node %s: GPU indexes are not 0..%d", name,
			           ret->n_devices - 1);
			return -EINVAL;
		}
	ret->gpus = ret->n_devices;
	ret->cpu_milli = cnl_kube_cpu_milli(S(alloc, "cpu"));
	ret->mem_mib = cnl_kube_mem_mib(S(alloc, "memory"));
	if (ret->cpu_milli <= 0 || ret->mem_mib <= 0) {
		cnl_seterr(err, errlen,
		           "node %s: status.allocatable lacks cpu or memory",
		           name);
		return -EINVAL;
	}
	return 0;
}

/* ---- allocation ---------------------------------------------------------- */

static void uuid_of(const unsigned char b[16], char out[37])
{
	unsigned char x[16];

	memcpy(x, b, 16);
	x[6] = (unsigned char)((x[6] & 0x0f) | 0x40);
	x[8] = (unsigned char)((x[8] & 0x3f) | 0x80);
	snprintf(out, 37,
	         "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
	         "%02x%02x%02x%02x%02x%02x",
	         x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9],
	         x[10], x[11], x[12], x[13], x[14], x[15]);
}

json_t *cnl_kube_allocation(const struct cnl_wire_slice *s, const char *node,
                            const char *request, const char *pod_name,
                            const char *pod_uid,
                            const unsigned char share[][16])
{
	json_t *results = json_array();
	char dev[128], q[16], id[37];
	int n = 0;

	for (int g = 0; g < CNL_WIRE_GPUS_MAX; g++) {
		if (!(s->gpu_mask >> g & 1))
			continue;
		if (s->mig_profile[0]) {
			char label[40];
			size_t o = 0;
			for (const char *c = s->mig_profile;
			     *c && o + 1 < sizeof(label); c++)
				label[o++] =
				    isalnum((unsigned char)*c)
				        ? (char)tolower((unsigned char)*c)
				        : '-';
			label[o] = '\0';
			snprintf(dev, sizeof(dev), "gpu-%d-mig-%s-%d", g, label,
			         s->mig_start);
			json_array_append_new(
			    results,
			    json_pack("{s:s,s:s,s:s,s:s}", "request", request,
			              "driver", CNL_KUBE_DRIVER, "pool", node,
			              "device", dev));
			n++;
			continue;
		}
		snprintf(dev, sizeof(dev), "gpu-%d", g);
		snprintf(q, sizeof(q), "%d", s->blocks > 100 ? 100 : s->blocks);
		uuid_of(share[n], id);
		json_array_append_new(
		    results,
		    json_pack("{s:s,s:s,s:s,s:s,s:s,s:{s:s}}", "request",
		              request, "driver", CNL_KUBE_DRIVER, "pool", node,
		              "device", dev, "shareID", id, "consumedCapacity",
		              "blocks", q));
		n++;
	}
	return json_pack(
	    "{s:{s:{s:o},s:{s:[{s:[{s:s,s:s,s:[s]}]}]}},s:[{s:s,s:s,s:s}]}",
	    "allocation", "devices", "results", results, "nodeSelector",
	    "nodeSelectorTerms", "matchFields", "key", "metadata.name",
	    "operator", "In", "values", node, "reservedFor", "resource", "pods",
	    "name", pod_name, "uid", pod_uid);
}

/* ---- where a pod may go ------------------------------------------------- */

/* Label @key of @labels against one matchExpression's @op and @values. */
static bool expr_holds(const json_t *labels, const json_t *e)
{
	const char *key = S(e, "key"), *op = S(e, "operator");
	const json_t *vals = json_object_get(e, "values"), *v;
	const char *have = key ? S(labels, key) : NULL;
	size_t i;

	if (!key || !op)
		return false;
	if (strcmp(op, "Exists") == 0)
		return have != NULL;
	if (strcmp(op, "DoesNotExist") == 0)
		return have == NULL;
	if (strcmp(op, "In") == 0 || strcmp(op, "NotIn") == 0) {
		bool in = false;
		json_array_foreach (vals, i, v)
			in |= have && json_string_value(v) &&
			      strcmp(have, json_string_value(v)) == 0;
		return op[0] == 'I' ? in : !in;
	}
	if (strcmp(op, "Gt") == 0 || strcmp(op, "Lt") == 0) {
		/* One integer value against the label's, both integers. */
		const char *w = json_string_value(json_array_get(vals, 0));
		char *e1 = NULL, *e2 = NULL;
		long long a, b;

		if (!have || !w || json_array_size(vals) != 1)
			return false;
		errno = 0;
		a = strtoll(have, &e1, 10);
		b = strtoll(w, &e2, 10);
		if (errno || e1 == have || *e1 || e2 == w || *e2)
			return false;
		return op[0] == 'G' ? a > b : a < b;
	}
	return false; /* an operator Kubernetes does not have */
}

/* One nodeSelectorTerm: every expression and field holds; a term with
 * neither selects nothing. */
static bool term_holds(const json_t *node, const json_t *t)
{
	const json_t *md = json_object_get(node, "metadata");
	const json_t *labels = json_object_get(md, "labels");
	const json_t *me = json_object_get(t, "matchExpressions");
	const json_t *mf = json_object_get(t, "matchFields"), *e;
	json_t *fields;
	bool ok = true;
	size_t i;

	if (!json_array_size(me) && !json_array_size(mf))
		return false;
	json_array_foreach (me, i, e)
		ok &= expr_holds(labels, e);
	/* The fields a term may name: metadata.name only. */
	fields = json_pack("{s:O}", "metadata.name",
	                   json_object_get(md, "name") ?: json_null());
	json_array_foreach (mf, i, e)
		ok &= S(e, "key") &&
		      strcmp(S(e, "key"), "metadata.name") == 0 &&
		      expr_holds(fields, e);
	json_decref(fields);
	return ok;
}

/* Whether one of @tols tolerates @taint. */
static bool tolerated(const json_t *tols, const json_t *taint)
{
	const char *tk = S(taint, "key") ?: "", *tv = S(taint, "value") ?: "";
	const char *te = S(taint, "effect") ?: "";
	const json_t *t;
	size_t i;

	json_array_foreach (tols, i, t) {
		const char *k = S(t, "key") ?: "", *op = S(t, "operator");
		const char *v = S(t, "value") ?: "", *e = S(t, "effect") ?: "";
		bool exists = op && strcmp(op, "Exists") == 0;

		if (op && !exists && strcmp(op, "Equal") != 0)
			continue; /* not an operator: tolerates nothing */
		if (e[0] && strcmp(e, te) != 0)
			continue;
		if (k[0] ? strcmp(k, tk) != 0 : !exists)
			continue;
		if (exists || strcmp(v, tv) == 0)
			return true;
	}
	return false;
}

/* @pod's nodeSelector and required node affinity against @node. */
static bool node_selected(const json_t *pod, const json_t *node, char *why,
                          size_t len)
{
	const json_t *ps = json_object_get(pod, "spec");
	const json_t *labels =
	    json_object_get(json_object_get(node, "metadata"), "labels");
	const json_t *x;
	const char *k;
	size_t i;
	json_t *v;

	json_object_foreach ((json_t *)json_object_get(ps, "nodeSelector"), k,
	                     v) {
		const char *have = S(labels, k);
		if (!have || !json_string_value(v) ||
		    strcmp(have, json_string_value(v)) != 0) {
			snprintf(why, len, "its nodeSelector %s=%s", k,
			         json_string_value(v) ?: "?");
			return false;
		}
	}
	const json_t *req = json_object_get(
	    json_object_get(json_object_get(ps, "affinity"), "nodeAffinity"),
	    "requiredDuringSchedulingIgnoredDuringExecution");
	if (req) {
		bool any = false;
		json_array_foreach (json_object_get(req, "nodeSelectorTerms"),
		                    i, x)
			any |= term_holds(node, x);
		if (!any) {
			snprintf(why, len, "its required node affinity");
			return false;
		}
	}
	return true;
}

/* @node's cordon and NoSchedule/NoExecute taints against @pod's
 * tolerations. */
static bool node_tolerated(const json_t *pod, const json_t *node, char *why,
                           size_t len)
{
	const json_t *ns = json_object_get(node, "spec");
	const json_t *tols =
	    json_object_get(json_object_get(pod, "spec"), "tolerations");
	const json_t *x;
	size_t i;

	/* A cordoned node carries this taint to kube-scheduler's eyes. */
	if (json_is_true(json_object_get(ns, "unschedulable"))) {
		json_t *t = json_pack("{s:s,s:s}", "key",
		                      "node.kubernetes.io/unschedulable",
		                      "effect", "NoSchedule");
		bool ok = tolerated(tols, t);
		json_decref(t);
		if (!ok) {
			snprintf(why, len, "the node is unschedulable");
			return false;
		}
	}
	json_array_foreach (json_object_get(ns, "taints"), i, x) {
		const char *e = S(x, "effect") ?: "";
		if (strcmp(e, "NoSchedule") != 0 && strcmp(e, "NoExecute") != 0)
			continue; /* PreferNoSchedule: a preference */
		if (!tolerated(tols, x)) {
			snprintf(why, len, "its taint %s%s%s:%s",
			         S(x, "key") ?: "", S(x, "value") ? "=" : "",
			         S(x, "value") ?: "", e);
			return false;
		}
	}
	return true;
}

bool cnl_kube_node_fits(const json_t *pod, const json_t *node, char *why,
                        size_t len)
{
	return node_selected(pod, node, why, len) &&
	       node_tolerated(pod, node, why, len);
}

/* ---- inter-pod affinity ------------------------------------------------- */

/* A LabelSelector against @labels: matchLabels and matchExpressions (In,
 * NotIn, Exists, DoesNotExist) all hold; an empty one selects all, none
 * (NULL) nothing. */
static bool selects(const json_t *sel, const json_t *labels)
{
	const json_t *e, *v;
	const char *k;
	size_t i;

	if (!json_is_object(sel))
		return false;
	json_object_foreach ((json_t *)json_object_get(sel, "matchLabels"), k,
	                     v) {
		const char *have = S(labels, k);
		if (!have || !json_string_value(v) ||
		    strcmp(have, json_string_value(v)) != 0)
			return false;
	}
	json_array_foreach (json_object_get(sel, "matchExpressions"), i, e) {
		const char *op = S(e, "operator");
		if (!op || op[0] == 'G' || op[0] == 'L' ||
		    !expr_holds(labels, e))
			return false; /* Gt and Lt are node selectors' only */
	}
	return true;
}

/* Whether a pod of namespace @ns is among @term's, for a pod of @own:
 * 1, 0, or -1 when the term names its namespaces by labels. */
static int in_namespaces(const json_t *term, const char *own, const char *ns)
{
	const json_t *nsel = json_object_get(term, "namespaceSelector");
	const json_t *list = json_object_get(term, "namespaces"), *v;
	size_t i;

	if (nsel && !json_is_null(nsel)) {
		if (json_object_size(json_object_get(nsel, "matchLabels")) ||
		    json_array_size(json_object_get(nsel, "matchExpressions")))
			return -1;
		return 1; /* {}: every namespace */
	}
	if (!json_array_size(list))
		return own && ns && strcmp(own, ns) == 0;
	json_array_foreach (list, i, v)
		if (ns && json_string_value(v) &&
		    strcmp(ns, json_string_value(v)) == 0)
			return 1;
	return 0;
}

/* Whether object metadata @om is of uid @uid. */
static bool same_uid(const char *uid, const json_t *om)
{
	const char *u = S(om, "uid");
	return uid && u && strcmp(uid, u) == 0;
}

static const json_t *labels_of(const json_t *o)
{
	return json_object_get(json_object_get(o, "metadata"), "labels");
}

static const json_t *terms(const json_t *pod, const char *kind)
{
	return json_object_get(
	    json_object_get(
	        json_object_get(json_object_get(pod, "spec"), "affinity"),
	        kind),
	    "requiredDuringSchedulingIgnoredDuringExecution");
}

/* Node @name's value of label @key, NULL when it has none. */
static const char *domain(const json_t *knodes, const char *name,
                          const char *key)
{
	return name && key ? S(labels_of(json_object_get(knodes, name)), key)
	                   : NULL;
}

bool cnl_kube_pod_has_affinity(const json_t *pod, bool anti_only)
{
	return json_array_size(terms(pod, "podAntiAffinity")) ||
	       (!anti_only && json_array_size(terms(pod, "podAffinity")));
}

bool cnl_kube_pod_affinity_fits(const json_t *pod, const char *node_name,
                                const json_t *knodes, const json_t *placed,
                                char *why, size_t len)
{
	const json_t *md = json_object_get(pod, "metadata");
	const char *own = S(md, "namespace"), *uid = S(md, "uid");
	const json_t *t, *q;
	size_t i, k;

	for (int anti = 0; anti < 2; anti++) {
		const char *kind = anti ? "podAntiAffinity" : "podAffinity";
		json_array_foreach (terms(pod, kind), i, t) {
			const char *key = S(t, "topologyKey");
			const json_t *sel = json_object_get(t, "labelSelector");
			const char *mine = domain(knodes, node_name, key);
			bool here = false, anywhere = false;

			if (!key || !key[0] || in_namespaces(t, own, own) < 0) {
				snprintf(
				    why, len,
				    "its %s term %zu: a namespaceSelector "
				    "with labels, or no topologyKey, is not "
				    "read by CNLab",
				    kind, i);
				return false;
			}
			json_array_foreach (placed, k, q) {
				const json_t *o = json_array_get(q, 0);
				const char *on =
				    json_string_value(json_array_get(q, 1));
				const json_t *om =
				    json_object_get(o, "metadata");
				const char *d;

				if (same_uid(uid, om) ||
				    in_namespaces(t, own, S(om, "namespace")) !=
				        1 ||
				    !selects(sel, labels_of(o)))
					continue;
				anywhere = true;
				d = domain(knodes, on, key);
				here |= mine && d && strcmp(mine, d) == 0;
			}
			if (anti && here) {
				snprintf(why, len,
				         "its podAntiAffinity at %s=%s", key,
				         mine);
				return false;
			}
			/* The first of a group: nothing selected anywhere,
			 * and the pod selects itself. */
			if (!anti && !here &&
			    (anywhere || !selects(sel, labels_of(pod)) ||
			     !mine)) {
				snprintf(why, len,
				         "its podAffinity (none at %s%s%s)",
				         key, mine ? "=" : "", mine ?: "");
				return false;
			}
		}
	}
	/* The pods placed there whose anti-affinity keeps this one away. */
	json_array_foreach (placed, k, q) {
		const json_t *o = json_array_get(q, 0);
		const char *on = json_string_value(json_array_get(q, 1));
		const json_t *om = json_object_get(o, "metadata");

		if (same_uid(uid, om))
			continue;
		json_array_foreach (terms(o, "podAntiAffinity"), i, t) {
			const char *key = S(t, "topologyKey");
			const char *mine = domain(knodes, node_name, key);
			const char *d = domain(knodes, on, key);

			if (mine && d && strcmp(mine, d) == 0 &&
			    in_namespaces(t, S(om, "namespace"), own) == 1 &&
			    selects(json_object_get(t, "labelSelector"),
			            labels_of(pod))) {
				snprintf(why, len,
				         "pod %s/%s's podAntiAffinity",
				         S(om, "namespace") ?: "?",
				         S(om, "name") ?: "?");
				return false;
			}
		}
	}
	return true;
}

/* ---- topology spread ------------------------------------------------------
 */

/* One of a pod's hard spread constraints, with the matching pods counted
 * per domain of its topologyKey. */
struct spread_c {
	const char *key;  /* topologyKey, the pod's */
	int64_t max_skew; /* at least 1 */
	int self;         /* 1 when the pod matches its own selector */
	int64_t min;      /* the fewest in any domain (0 below minDomains) */
	int64_t min_domains;
	bool affinity;  /* nodeAffinityPolicy Honor (the default) */
	bool taints;    /* nodeTaintsPolicy Honor (Ignore by default) */
	json_t *sel;    /* labelSelector with matchLabelKeys; NULL */
	json_t *counts; /* domain -> matching pods there */
};

struct cnl_kube_spread {
	const json_t *knodes;
	size_t n;
	struct spread_c c[];
};

static const json_t *spread_list(const json_t *pod)
{
	return json_object_get(json_object_get(pod, "spec"),
	                       "topologySpreadConstraints");
}

/* Whether constraint @t must hold (DoNotSchedule); ScheduleAnyway is a
 * preference. */
static bool spread_hard(const json_t *t)
{
	const char *w = S(t, "whenUnsatisfiable");
	return w && strcmp(w, "DoNotSchedule") == 0;
}

/* Whether @t is of the kind asked for: a preference (@soft) or a rule. */
static bool spread_kind(const json_t *t, bool soft)
{
	const char *w = S(t, "whenUnsatisfiable");
	return soft ? w && strcmp(w, "ScheduleAnyway") == 0 : spread_hard(t);
}

bool cnl_kube_pod_has_spread(const json_t *pod)
{
	const json_t *t;
	size_t i;

	json_array_foreach (spread_list(pod), i, t)
		if (spread_hard(t))
			return true;
	return false;
}

/* @t's labelSelector with matchLabelKeys read as kube-scheduler reads
 * them: each key the pod has a label of adds "key In [its value]" (the
 * pods of the same rollout).  No selector selects nothing.  New
 * reference, or NULL. */
static json_t *spread_selector(const json_t *pod, const json_t *t)
{
	const json_t *sel = json_object_get(t, "labelSelector"), *k;
	const json_t *own = labels_of(pod);
	json_t *out, *exprs;
	size_t i;

	if (!json_is_object(sel))
		return NULL;
	out = json_deep_copy(sel);
	exprs = json_object_get(out, "matchExpressions");
	if (!json_is_array(exprs)) {
		exprs = json_array();
		json_object_set_new(out, "matchExpressions", exprs);
	}
	json_array_foreach (json_object_get(t, "matchLabelKeys"), i, k) {
		const char *v =
		    json_string_value(k) ? S(own, json_string_value(k)) : NULL;
		if (v)
			json_array_append_new(
			    exprs, json_pack("{s:s,s:s,s:[s]}", "key",
			                     json_string_value(k), "operator",
			                     "In", "values", v));
	}
	return out;
}

/* Whether selector @sel has no requirement: kube-scheduler counts no pod
 * for such a constraint (its countPodsMatchSelector), though the pod
 * still matches it itself. */
static bool selector_empty(const json_t *sel)
{
	return !json_object_size(json_object_get(sel, "matchLabels")) &&
	       !json_array_size(json_object_get(sel, "matchExpressions"));
}

/* Whether node @node has a label for each hard constraint's key. */
static bool spread_keys_on(const struct cnl_kube_spread *sp, const json_t *node)
{
	for (size_t i = 0; i < sp->n; i++)
		if (!S(labels_of(node), sp->c[i].key))
			return false;
	return true;
}

struct cnl_kube_spread *cnl_kube_spread_new(const json_t *pod,
                                            const json_t *knodes,
                                            const json_t *placed, bool soft)
{
	const json_t *md = json_object_get(pod, "metadata"), *t, *q, *node;
	const char *ns = S(md, "namespace"), *uid = S(md, "uid"), *name;
	json_t *on_node = json_object(), *v;
	struct cnl_kube_spread *sp;
	size_t i, k, n = 0;
	char why[8];

	json_array_foreach (spread_list(pod), i, t)
		n += spread_kind(t, soft) && S(t, "topologyKey");
	if (!n) {
		json_decref(on_node);
		return NULL;
	}
	sp = cnl_xcalloc(1, sizeof(*sp) + n * sizeof(sp->c[0]));
	sp->knodes = knodes;
	json_array_foreach (spread_list(pod), i, t) {
		const char *ap = S(t, "nodeAffinityPolicy");
		const char *tp = S(t, "nodeTaintsPolicy");
		struct spread_c *c;

		if (!spread_kind(t, soft) || !S(t, "topologyKey"))
			continue;
		c = &sp->c[sp->n++];
		c->key = S(t, "topologyKey");
		c->max_skew = json_integer_value(json_object_get(t, "maxSkew"));
		if (c->max_skew < 1)
			c->max_skew = 1; /* the API server refuses less */
		c->min_domains =
		    json_integer_value(json_object_get(t, "minDomains"));
		c->affinity = !ap || strcmp(ap, "Ignore") != 0;
		c->taints = tp && strcmp(tp, "Honor") == 0;
		c->sel = spread_selector(pod, t);
		c->self = c->sel && selects(c->sel, labels_of(pod));
		c->counts = json_object();
	}
	/* The pods that count, by node: this namespace's, placed and not
	 * on their way out (kube-scheduler does not count ended or
	 * terminating pods), the pod itself not among them. */
	json_array_foreach (placed, k, q) {
		const json_t *o = json_array_get(q, 0);
		const json_t *om = json_object_get(o, "metadata");
		const char *on = json_string_value(json_array_get(q, 1));
		const char *ph = S(json_object_get(o, "status"), "phase");
		json_t *list;

		if (!on || same_uid(uid, om) || !ns || !S(om, "namespace") ||
		    strcmp(ns, S(om, "namespace")) != 0 ||
		    (json_object_get(om, "deletionTimestamp") &&
		     !json_is_null(json_object_get(om, "deletionTimestamp"))) ||
		    (ph && (strcmp(ph, "Succeeded") == 0 ||
		            strcmp(ph, "Failed") == 0)))
			continue;
		if (!(list = json_object_get(on_node, on))) {
			list = json_array();
			json_object_set_new(on_node, on, list);
		}
		json_array_append(list, (json_t *)o);
	}
	/* Each domain of a node that counts for a constraint (the node has
	 * every constraint's key; with nodeAffinityPolicy Honor, the
	 * default, the pod's node selector and required affinity take it;
	 * with nodeTaintsPolicy Honor it tolerates the node's taints),
	 * with its matching pods. */
	json_object_foreach ((json_t *)knodes, name, node) {
		if (!spread_keys_on(sp, node))
			continue;
		for (i = 0; i < sp->n; i++) {
			struct spread_c *c = &sp->c[i];
			const char *d = S(labels_of(node), c->key);
			json_int_t have;

			if ((c->affinity &&
			     !node_selected(pod, node, why, sizeof(why))) ||
			    (c->taints &&
			     !node_tolerated(pod, node, why, sizeof(why))))
				continue;
			have =
			    json_integer_value(json_object_get(c->counts, d));
			json_array_foreach (json_object_get(on_node, name), k,
			                    v)
				have += c->sel && !selector_empty(c->sel) &&
				        selects(c->sel, labels_of(v));
			json_object_set_new(c->counts, d, json_integer(have));
		}
	}
	/* The fewest in a domain: 0 when there are fewer domains than
	 * minDomains (kube-scheduler's rule). */
	for (i = 0; i < sp->n; i++) {
		struct spread_c *c = &sp->c[i];
		json_int_t min = -1;
		const char *d;

		json_object_foreach (c->counts, d, v)
			if (min < 0 || json_integer_value(v) < min)
				min = json_integer_value(v);
		if (min < 0 ||
		    (c->min_domains > 0 &&
		     (int64_t)json_object_size(c->counts) < c->min_domains))
			min = 0;
		c->min = min;
	}
	json_decref(on_node);
	return sp;
}

bool cnl_kube_spread_fits(const struct cnl_kube_spread *sp,
                          const char *node_name, char *why, size_t len)
{
	const json_t *node;

	if (!sp)
		return true;
	node = node_name ? json_object_get(sp->knodes, node_name) : NULL;
	for (size_t i = 0; i < sp->n; i++) {
		const struct spread_c *c = &sp->c[i];
		const char *d = node ? S(labels_of(node), c->key) : NULL;
		int64_t have, skew;

		if (!d) {
			snprintf(why, len, "its topology spread (no label %s)",
			         c->key);
			return false;
		}
		have = json_integer_value(json_object_get(c->counts, d));
		skew = have + c->self - c->min;
		if (skew > c->max_skew) {
			snprintf(why, len,
			         "its topology spread (%s=%s: %" PRId64
			         ", fewest %" PRId64 ", maxSkew %" PRId64 ")",
			         c->key, d, have, c->min, c->max_skew);
			return false;
		}
	}
	return true;
}

/* kube-scheduler's PodTopologySpread score for soft constraints: each
 * constraint's matching pods in the node's domain, plus maxSkew - 1,
 * weighted by log(domains + 2) so that a key of many domains counts more;
 * -1 when the node lacks a key (kube-scheduler scores such a node 0). */
static double spread_score(const struct cnl_kube_spread *sp,
                           const char *node_name)
{
	const json_t *node =
	    node_name ? json_object_get(sp->knodes, node_name) : NULL;
	double sc = 0;

	for (size_t i = 0; i < sp->n; i++) {
		const struct spread_c *c = &sp->c[i];
		const char *d = node ? S(labels_of(node), c->key) : NULL;

		if (!d)
			return -1;
		sc +=
		    (double)(json_integer_value(json_object_get(c->counts, d)) +
		             c->max_skew - 1) *
		    log((double)json_object_size(c->counts) + 2);
	}
	return sc;
}

void cnl_kube_spread_free(struct cnl_kube_spread *sp)
{
	if (!sp)
		return;
	for (size_t i = 0; i < sp->n; i++) {
		json_decref(sp->c[i].counts);
		json_decref(sp->c[i].sel);
	}
	free(sp);
}

/* ---- preferences ----------------------------------------------------------
 */

/* @pod's preferred terms of @kind (nodeAffinity, podAffinity,
 * podAntiAffinity). */
static const json_t *preferred(const json_t *pod, const char *kind)
{
	return json_object_get(
	    json_object_get(
	        json_object_get(json_object_get(pod, "spec"), "affinity"),
	        kind),
	    "preferredDuringSchedulingIgnoredDuringExecution");
}

bool cnl_kube_pod_prefers_pods(const json_t *pod)
{
	const json_t *t;
	size_t i;

	if (json_array_size(preferred(pod, "podAffinity")) ||
	    json_array_size(preferred(pod, "podAntiAffinity")))
		return true;
	json_array_foreach (spread_list(pod), i, t)
		if (spread_kind(t, true))
			return true;
	return false;
}

/* A weighted term's weight: 1..100 as the API server lets it. */
static int64_t weight_of(const json_t *t)
{
	json_int_t w = json_integer_value(json_object_get(t, "weight"));
	return w < 1 ? 1 : w > 100 ? 100 : w;
}

/* The weights of weighted terms @terms, of a pod of namespace @term_ns,
 * that select a pod of namespace @ns with labels @labels, where nodes
 * @node_name and @on share the term's domain. */
static int64_t terms_weight(const json_t *terms, const json_t *knodes,
                            const char *node_name, const char *on,
                            const char *term_ns, const char *ns,
                            const json_t *labels)
{
	const json_t *t;
	int64_t w = 0;
	size_t i;

	json_array_foreach (terms, i, t) {
		const json_t *at = json_object_get(t, "podAffinityTerm");
		const char *key = S(at, "topologyKey");
		const char *mine = domain(knodes, node_name, key);
		const char *d = domain(knodes, on, key);

		if (mine && d && strcmp(mine, d) == 0 &&
		    in_namespaces(at, term_ns, ns) == 1 &&
		    selects(json_object_get(at, "labelSelector"), labels))
			w += weight_of(t);
	}
	return w;
}

/* The weights of @pod's preferred inter-pod terms, and of the placed pods'
 * preferred terms that select it, whose pods share node @node_name's
 * domain (affinity adds, anti-affinity takes away), once per pod: kube-
 * scheduler's InterPodAffinity score. */
static int64_t pods_score(const json_t *pod, const char *node_name,
                          const json_t *knodes, const json_t *placed)
{
	const json_t *md = json_object_get(pod, "metadata");
	const char *own = S(md, "namespace"), *uid = S(md, "uid");
	const json_t *q;
	int64_t sc = 0;
	size_t k;

	json_array_foreach (placed, k, q) {
		const json_t *o = json_array_get(q, 0);
		const char *on = json_string_value(json_array_get(q, 1));
		const char *ons =
		    S(json_object_get(o, "metadata"), "namespace");

		if (same_uid(uid, json_object_get(o, "metadata")))
			continue;
		for (int anti = 0; anti < 2; anti++) {
			const char *kind =
			    anti ? "podAntiAffinity" : "podAffinity";
			/* The pod's own terms that select this placed pod,
			 * and the placed pod's terms that select it. */
			int64_t w =
			    terms_weight(preferred(pod, kind), knodes,
			                 node_name, on, own, ons,
			                 labels_of(o)) +
			    terms_weight(preferred(o, kind), knodes, node_name,
			                 on, ons, own, labels_of(pod));
			sc += anti ? -w : w;
		}
	}
	return sc;
}

void cnl_kube_pref_of(const json_t *pod, const json_t *knodes,
                      const char *node_name, const json_t *placed,
                      const struct cnl_kube_spread *soft,
                      struct cnl_kube_pref *ret)
{
	const json_t *node = json_object_get(knodes, node_name);
	const json_t *tols =
	    json_object_get(json_object_get(pod, "spec"), "tolerations");
	const json_t *t;
	size_t i;

	memset(ret, 0, sizeof(*ret));
	json_array_foreach (preferred(pod, "nodeAffinity"), i, t)
		if (term_holds(node, json_object_get(t, "preference")))
			ret->node_affinity += weight_of(t);
	json_array_foreach (
	    json_object_get(json_object_get(node, "spec"), "taints"), i, t) {
		const char *e = S(t, "effect");
		ret->taints += e && strcmp(e, "PreferNoSchedule") == 0 &&
		               !tolerated(tols, t);
	}
	ret->spread = soft ? spread_score(soft, node_name) : 0;
	ret->pods = placed ? pods_score(pod, node_name, knodes, placed) : 0;
}

/* Scores @raw (@n of them) as 0..100, kube-scheduler's
 * DefaultNormalizeScore: in proportion to the most, or (@reverse) 100 less
 * that. */
static void normalize(const double *raw, size_t n, bool reverse, double *out)
{
	double max = 0;

	for (size_t i = 0; i < n; i++)
		max = raw[i] > max ? raw[i] : max;
	for (size_t i = 0; i < n; i++) {
		double v = max > 0 ? 100 * raw[i] / max : 0;
		out[i] = reverse ? 100 - v : v;
	}
}

size_t cnl_kube_pref_best(const struct cnl_kube_pref *p, size_t n, bool *best)
{
	double *raw = cnl_xcalloc(n ? n : 1, sizeof(double));
	double *norm = cnl_xcalloc(n ? n : 1, sizeof(double));
	double *total = cnl_xcalloc(n ? n : 1, sizeof(double));
	double smin = INFINITY, smax = -INFINITY, pmin = INFINITY,
	       pmax = -INFINITY, top = -INFINITY;
	size_t count = 0;

	/* Node affinity (weight 2) and taints (3) as kube-scheduler's
	 * default profile weighs them. */
	for (size_t i = 0; i < n; i++)
		raw[i] = (double)p[i].node_affinity;
	normalize(raw, n, false, norm);
	for (size_t i = 0; i < n; i++)
		total[i] += 2 * norm[i];
	for (size_t i = 0; i < n; i++)
		raw[i] = (double)p[i].taints;
	normalize(raw, n, true, norm);
	for (size_t i = 0; i < n; i++)
		total[i] += 3 * norm[i];
	/* Topology spread (2): fewer pods in the node's domains is better;
	 * a node without a key scores 0. */
	for (size_t i = 0; i < n; i++) {
		if (p[i].spread < 0)
			continue;
		smin = p[i].spread < smin ? p[i].spread : smin;
		smax = p[i].spread > smax ? p[i].spread : smax;
	}
	for (size_t i = 0; i < n; i++)
		total[i] += p[i].spread < 0 ? 0
		            : smax > 0
		                ? 2 * 100 * (smax + smin - p[i].spread) / smax
		                : 2 * 100;
	/* Inter-pod preferences (2): from the least to the most. */
	for (size_t i = 0; i < n; i++) {
		pmin = (double)p[i].pods < pmin ? (double)p[i].pods : pmin;
		pmax = (double)p[i].pods > pmax ? (double)p[i].pods : pmax;
	}
	for (size_t i = 0; i < n; i++)
		total[i] += pmax > pmin ? 2 * 100 * ((double)p[i].pods - pmin) /
		                              (pmax - pmin)
		                        : 0;
	for (size_t i = 0; i < n; i++)
		top = total[i] > top ? total[i] : top;
	for (size_t i = 0; i < n; i++) {
		best[i] = total[i] >= top - 1e-9;
		count += best[i];
	}
	free(raw);
	free(norm);
	free(total);
	return count;
}
