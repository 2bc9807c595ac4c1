/*
 * kube_ops.c - TrainingJobs into pods, and their status (kube_ops.h).
 */
#include "server/kube_ops.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/time.h"
#include "common/util.h"
#include "server/kube_map.h"

#define S(o, k) json_string_value(json_object_get((o), (k)))

/* spec.gpu into its parts: @type ("" for cpu), and one of @blocks,
 * @profile or @count.  0, or -1 when it is not a shape. */
static int shape_parts(const char *g, char *type, size_t tlen, int *blocks,
                       char *profile, size_t plen, int *count)
{
	size_t n = strlen(g);
	const char *dash, *x;

	*blocks = 0;
	*count = 1;
	profile[0] = type[0] = '\0';
	if (strcmp(g, "cpu") == 0) {
		*count = 0;
		return 0;
	}
	if (n == 0 || n >= tlen)
		return -1;
	if (n > 5 && strcmp(g + n - 5, "-full") == 0) {
		snprintf(type, tlen, "%.*s", (int)(n - 5), g);
		return 0;
	}
	if ((x = strrchr(g, 'x')) && x > g && x[1] &&
	    strspn(x + 1, "0123456789") == strlen(x + 1) &&
	    !strchr(x + 1, '-')) {
		*count = (int)strtol(x + 1, NULL, 10);
		snprintf(type, tlen, "%.*s", (int)(x - g), g);
		return *count >= 1 && *count <= 16 ? 0 : -1;
	}
	if ((dash = strrchr(g, '-')) && dash > g) {
		const char *last = dash + 1;
		size_t digits = strspn(last, "0123456789");
		unsigned gi;
		char gb[8];

		if (digits > 0 && (last[digits] == '\0' ||
		                   strcmp(last + digits, "pct") == 0)) {
			*blocks = (int)strtol(last, NULL, 10);
			snprintf(type, tlen, "%.*s", (int)(dash - g), g);
			return *blocks >= 1 && *blocks <= 100 ? 0 : -1;
		}
		if (sscanf(last, "%ug.%*[0-9]%7s", &gi, gb) == 2 &&
		    strcmp(gb, "gb") == 0 && gi >= 1 && gi <= 7) {
			snprintf(profile, plen, "%s", last);
			snprintf(type, tlen, "%.*s", (int)(dash - g), g);
			return 0;
		}
	}
	snprintf(type, tlen, "%s", g); /* one whole GPU of TYPE */
	return 0;
}

const char *cnl_kube_tj_owner(const json_t *pod)
{
	const json_t *refs = json_object_get(json_object_get(pod, "metadata"),
	                                     "ownerReferences"),
	             *r;
	size_t i;

	json_array_foreach (refs, i, r) {
		const char *k = S(r, "kind"), *a = S(r, "apiVersion");
		if (k && a && strcmp(k, "TrainingJob") == 0 &&
		    strcmp(a, CNL_KUBE_TJ_API) == 0)
			return S(r, "name");
	}
	return NULL;
}

int cnl_kube_tj_children(const json_t *tj, const char *project,
                         json_t **ret_claim, json_t **ret_pod, char *err,
                         size_t errlen)
{
	const json_t *md = json_object_get(tj, "metadata");
	const json_t *sp = json_object_get(tj, "spec");
	const char *name = S(md, "name"), *uid = S(md, "uid");
	const char *cmd = S(sp, "command"), *image = S(sp, "image"),
	           *gpu = S(sp, "gpu"), *p;
	char type[64], profile[32], claim[300], q[32];
	int blocks, count;
	json_t *ann, *owner, *container, *pod;

	*ret_claim = *ret_pod = NULL;
	if (!name || !uid || !cmd) {
		cnl_seterr(err, errlen,
		           "metadata.name, metadata.uid or "
		           "spec.command missing");
		return -EINVAL;
	}
	if ((p = S(sp, "project")) && strcmp(p, project) != 0) {
		cnl_seterr(err, errlen,
		           "spec.project %s: this namespace's project is %s "
		           "(a namespace's project is set by its label "
		           "cnlab.io/project)",
		           p, project);
		return -EINVAL;
	}
	if (json_object_get(sp, "profile")) {
		cnl_seterr(err, errlen,
		           "spec.profile: not in Kubernetes mode yet; give "
		           "spec.gpu");
		return -EINVAL;
	}
	if (json_integer_value(json_object_get(sp, "nodes")) > 1) {
		cnl_seterr(err, errlen,
		           "spec.nodes: gangs are not in Kubernetes mode yet");
		return -EINVAL;
	}
	if (json_object_get(sp, "gpuTypes")) {
		cnl_seterr(
		    err, errlen,
		    "spec.gpuTypes: not in Kubernetes mode yet; name the "
		    "type in spec.gpu");
		return -EINVAL;
	}
	if (!image) {
		cnl_seterr(err, errlen,
		           "spec.image: a pod needs one (an OCI image "
		           "reference)");
		return -EINVAL;
	}
	if (!gpu)
		gpu = "cpu";
	if (shape_parts(gpu, type, sizeof(type), &blocks, profile,
	                sizeof(profile), &count) < 0) {
		cnl_seterr(err, errlen, "spec.gpu %s: not a shape", gpu);
		return -EINVAL;
	}
	owner = json_pack("[{s:s,s:s,s:s,s:s,s:b,s:b}]", "apiVersion",
	                  CNL_KUBE_TJ_API, "kind", "TrainingJob", "name", name,
	                  "uid", uid, "controller", 1, "blockOwnerDeletion", 1);
	snprintf(claim, sizeof(claim), "%s-gpu", name);
	if (count > 0) {
		json_t *ex = json_pack("{s:s,s:s,s:i}", "deviceClassName",
		                       CNL_KUBE_DRIVER, "allocationMode",
		                       "ExactCount", "count", count);
		if (blocks) {
			snprintf(q, sizeof(q), "%d", blocks);
			json_object_set_new(
			    ex, "capacity",
			    json_pack("{s:{s:s}}", "requests", "blocks", q));
		}
		if (profile[0]) {
			char e[128];
			snprintf(e, sizeof(e),
			         "device.attributes[\"" CNL_KUBE_DRIVER
			         "\"].profile == \"%s\"",
			         profile);
			json_object_set_new(
			    ex, "selectors",
			    json_pack("[{s:{s:s}}]", "cel", "expression", e));
		}
		*ret_claim = json_pack(
		    "{s:s,s:s,s:{s:s,s:{s:s},s:O},s:{s:{s:[{s:s,s:o}]}}}",
		    "apiVersion", "resource.k8s.io/v1", "kind", "ResourceClaim",
		    "metadata", "name", claim, "labels", "cnlab.io/trainingjob",
		    name, "ownerReferences", owner, "spec", "devices",
		    "requests", "name", "gpu", "exactly", ex);
	}
	ann = json_object();
	if (type[0] && strcmp(type, "any") != 0)
		json_object_set_new(ann, "cnlab.io/gpu-type",
		                    json_string(type));
	json_object_set_new(ann, "cnlab.io/priority",
	                    json_string(S(sp, "priority") ?: "normal"));
	if ((p = S(sp, "deadline")))
		json_object_set_new(ann, "cnlab.io/deadline", json_string(p));
	if (json_integer_value(json_object_get(sp, "runtimeSeconds")) > 0) {
		snprintf(q, sizeof(q), "%lld",
		         (long long)json_integer_value(
		             json_object_get(sp, "runtimeSeconds")));
		json_object_set_new(ann, "cnlab.io/runtime-seconds",
		                    json_string(q));
	}
	if (json_is_false(json_object_get(sp, "preemptible")))
		json_object_set_new(ann, "cnlab.io/preemptible",
		                    json_string("false"));
	if ((p = S(sp, "dataset")))
		json_object_set_new(ann, "cnlab.io/dataset", json_string(p));
	json_int_t cpu = json_integer_value(json_object_get(sp, "cpuMilli"));
	json_int_t mem = json_integer_value(json_object_get(sp, "memMiB"));
	char cq[32], mq[32];
	snprintf(cq, sizeof(cq), "%lldm", (long long)(cpu > 0 ? cpu : 1000));
	snprintf(mq, sizeof(mq), "%lldMi", (long long)(mem > 0 ? mem : 4096));
	container = json_pack(
	    "{s:s,s:s,s:[s,s,s],s:s,s:{s:{s:s,s:s}},s:[{s:s,s:s}]}", "name",
	    "main", "image", image, "command", "sh", "-c", cmd, "workingDir",
	    "/workspace", "resources", "requests", "cpu", cq, "memory", mq,
	    "volumeMounts", "name", "workspace", "mountPath", "/workspace");
	pod = json_pack("{s:s,s:s,s:{s:s,s:{s:s},s:o,s:O},"
	                "s:{s:s,s:s,s:[o],s:[{s:s,s:{}}]}}",
	                "apiVersion", "v1", "kind", "Pod", "metadata", "name",
	                name, "labels", "cnlab.io/trainingjob", name,
	                "annotations", ann, "ownerReferences", owner, "spec",
	                "schedulerName", CNL_KUBE_SCHEDULER, "restartPolicy",
	                "Never", "containers", container, "volumes", "name",
	                "workspace", "emptyDir");
	if (*ret_claim) {
		json_object_set_new(json_object_get(pod, "spec"),
		                    "resourceClaims",
		                    json_pack("[{s:s,s:s}]", "name", "gpu",
		                              "resourceClaimName", claim));
		json_object_set_new(json_object_get(container, "resources"),
		                    "claims",
		                    json_pack("[{s:s}]", "name", "gpu"));
	}
	json_decref(owner);
	*ret_pod = pod;
	return 0;
}

json_t *cnl_kube_tj_status(const char *phase, const char *job, const char *node,
                           int exit_code, const char *message,
                           long long generation)
{
	char now[40];
	bool sched = strcmp(phase, "Pending") != 0;
	bool done = strcmp(phase, "Succeeded") == 0 ||
	            strcmp(phase, "Failed") == 0 ||
	            strcmp(phase, "Cancelled") == 0;
	json_t *st, *conds;

	cnl_time_format_rfc3339(cnl_time_now_ms() / 1000 * 1000, now,
	                        sizeof(now));
	char *dot = strchr(now, '.');
	if (dot)
		snprintf(dot, 2, "Z");
	conds = json_pack(
	    "[{s:s,s:s,s:s,s:s,s:s,s:I},{s:s,s:s,s:s,s:s,s:s,s:I}]", "type",
	    "Scheduled", "status", sched ? "True" : "False", "reason",
	    sched ? "Bound" : "Waiting", "message",
	    sched ? "bound to a node by cnlab" : "waiting in CNLab's queue",
	    "lastTransitionTime", now, "observedGeneration",
	    (json_int_t)generation, "type", "Complete", "status",
	    done ? "True" : "False", "reason", done ? phase : "NotEnded",
	    "message", message && *message ? message : phase,
	    "lastTransitionTime", now, "observedGeneration",
	    (json_int_t)generation);
	st = json_pack("{s:s,s:I,s:o}", "phase", phase, "observedGeneration",
	               (json_int_t)generation, "conditions", conds);
	if (job && *job)
		json_object_set_new(st, "jobID", json_string(job));
	if (node && *node)
		json_object_set_new(st, "node", json_string(node));
	if (exit_code >= -255)
		json_object_set_new(st, "exitCode", json_integer(exit_code));
	if (message && *message)
		json_object_set_new(st, "message", json_string(message));
	return json_pack("{s:o}", "status", st);
}
