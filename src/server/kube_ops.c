/*
 * kube_ops.c - TrainingJobs into pods, and their status (kube_ops.h).
 */
#include "server/kube_ops.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/label.h"
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
	/* TYPExK: a type ending in a digit ("h100x8"), or "any" ("anyx2");
	 * not a type with an x of its own ("rtx4090"). */
	if ((x = strrchr(g, 'x')) && x > g && x[1] &&
	    strspn(x + 1, "0123456789") == strlen(x + 1) &&
	    strlen(x + 1) <= 2 &&
	    (isdigit((unsigned char)x[-1]) ||
	     (x - g == 3 && strncmp(g, "any", 3) == 0))) {
		*count = (int)strtol(x + 1, NULL, 10);
		snprintf(type, tlen, "%.*s", (int)(x - g), g);
		return *count >= 1 && *count <= 16 ? 0 : -1;
	}
	if ((dash = strrchr(g, '-')) && dash > g) {
		const char *last = dash + 1;
		size_t digits = strspn(last, "0123456789");
		unsigned gi;
		char gb[8];

		if (digits > 0 && digits <= 3 &&
		    (last[digits] == '\0' ||
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

const char *cnl_kube_cr_owner(const json_t *pod, const char **ret_kind)
{
	const json_t *refs = json_object_get(json_object_get(pod, "metadata"),
	                                     "ownerReferences"),
	             *r;
	size_t i;

	json_array_foreach (refs, i, r) {
		const char *k = S(r, "kind"), *a = S(r, "apiVersion");
		if (k && a && strcmp(a, CNL_KUBE_TJ_API) == 0 &&
		    (strcmp(k, "TrainingJob") == 0 ||
		     strcmp(k, "NotebookServer") == 0)) {
			if (ret_kind)
				*ret_kind = k;
			return S(r, "name");
		}
	}
	return NULL;
}

bool cnl_kube_cr_controls(const json_t *cr, const json_t *pod)
{
	const json_t *md = json_object_get(cr, "metadata");
	const json_t *refs = json_object_get(json_object_get(pod, "metadata"),
	                                     "ownerReferences"),
	             *r;
	const char *uid = S(md, "uid");
	size_t i;

	json_array_foreach (refs, i, r)
		if (uid && S(r, "uid") && strcmp(S(r, "uid"), uid) == 0 &&
		    json_is_true(json_object_get(r, "controller")) &&
		    S(r, "apiVersion") &&
		    strcmp(S(r, "apiVersion"), CNL_KUBE_TJ_API) == 0)
			return true;
	return false;
}

const char *cnl_kube_tj_owner(const json_t *pod)
{
	const char *kind = NULL, *name = cnl_kube_cr_owner(pod, &kind);

	return name && strcmp(kind, "TrainingJob") == 0 ? name : NULL;
}

/* The ResourceClaim @claim, labelled @label=@value and owned by @owner
 * (borrowed), of one request "gpu" for @count devices of the DeviceClass
 * gpu.cnlab.io: each @blocks blocks (0: whole), or the MIG partitions of
 * @profile ("": any). */
static json_t *claim_new(const char *claim, const char *label,
                         const char *value, json_t *owner, int blocks,
                         const char *profile, int count)
{
	char q[32];
	json_t *ex =
	    json_pack("{s:s,s:s,s:i}", "deviceClassName", CNL_KUBE_DRIVER,
	              "allocationMode", "ExactCount", "count", count);

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
	return json_pack("{s:s,s:s,s:{s:s,s:{s:s},s:O},s:{s:{s:[{s:s,s:o}]}}}",
	                 "apiVersion", "resource.k8s.io/v1", "kind",
	                 "ResourceClaim", "metadata", "name", claim, "labels",
	                 label, value, "ownerReferences", owner, "spec",
	                 "devices", "requests", "name", "gpu", "exactly", ex);
}

/* @pod's claim "gpu" is @claim, and its @container uses it. */
static void use_claim(json_t *pod, json_t *container, const char *claim)
{
	json_object_set_new(json_object_get(pod, "spec"), "resourceClaims",
	                    json_pack("[{s:s,s:s}]", "name", "gpu",
	                              "resourceClaimName", claim));
	json_object_set_new(json_object_get(container, "resources"), "claims",
	                    json_pack("[{s:s}]", "name", "gpu"));
}

/* The tenant's account name in a server's /etc/passwd: its owner's, as
 * `cnlab server ssh` logs in (a name of the label rule; else "tenant"). */
static const char *tenant_name(const struct cnl_kube_run *r)
{
	return r->user && cnl_label_valid(r->user) ? r->user : "tenant";
}

/*
 * Every container of a run pod as the tenant, never root: the pod's user
 * and group CNL_KUBE_TENANT_ID (as an agent's containers', whatever the
 * image says), its volumes the group's (fsGroup: a server's PVC, the
 * Secrets' files, 0440 for it), no privilege gained (setuid, file
 * capabilities), no capability, the runtime's seccomp filter: Pod
 * Security's "restricted" profile, which a namespace may enforce.  The
 * collector, of the same user, reads what the job leaves as the job
 * does.
 */
static void tenant_only(json_t *pod)
{
	json_t *spec = json_object_get(pod, "spec");
	const char *const lists[] = {"initContainers", "containers"};

	json_object_set_new(
	    spec, "securityContext",
	    json_pack("{s:b,s:i,s:i,s:i,s:s,s:{s:s}}", "runAsNonRoot", 1,
	              "runAsUser", CNL_KUBE_TENANT_ID, "runAsGroup",
	              CNL_KUBE_TENANT_ID, "fsGroup", CNL_KUBE_TENANT_ID,
	              "fsGroupChangePolicy", "OnRootMismatch", "seccompProfile",
	              "type", "RuntimeDefault"));
	for (size_t l = 0; l < CNL_ARRAY_SIZE(lists); l++) {
		json_t *c;
		size_t i;

		json_array_foreach (json_object_get(spec, lists[l]), i, c) {
			json_t *sc = json_object_get(c, "securityContext");

			if (!sc) {
				sc = json_object();
				json_object_set_new(c, "securityContext", sc);
			}
			json_object_set_new(sc, "allowPrivilegeEscalation",
			                    json_false());
			json_object_set_new(
			    sc, "capabilities",
			    json_pack("{s:[s]}", "drop", "ALL"));
		}
	}
}

void cnl_kube_pod_own_users(json_t *pod)
{
	json_object_set_new(json_object_get(pod, "spec"), "hostUsers",
	                    json_false());
}

/* What both kinds make: the owner reference to @cr (of @kind), the claim
 * NAME-gpu for @shape (NULL for cpu), and a pod of the scheduler cnlab
 * running @image with @command (NULL: the image's own) and /workspace
 * from @workspace (a volume source), with the annotations @ann (stolen)
 * and the CPU and memory of @sp (cpuMilli, memMiB).  0 or -EINVAL. */
static int children(const json_t *cr, const char *kind, const char *shape,
                    const char *image, const char *command, json_t *ann,
                    json_t *workspace, json_t **ret_claim, json_t **ret_pod,
                    json_t **ret_owner, char *err, size_t errlen)
{
	const json_t *md = json_object_get(cr, "metadata");
	const json_t *sp = json_object_get(cr, "spec");
	const char *name = S(md, "name"), *uid = S(md, "uid");
	char type[64], profile[32], claim[300];
	int blocks, count;
	json_t *owner, *container, *pod;

	*ret_claim = *ret_pod = *ret_owner = NULL;
	if (shape_parts(shape, type, sizeof(type), &blocks, profile,
	                sizeof(profile), &count) < 0) {
		cnl_seterr(err, errlen, "%s: not a GPU shape", shape);
		json_decref(ann);
		json_decref(workspace);
		return -EINVAL;
	}
	/* No blockOwnerDeletion: setting it needs update on the owner's
	 * finalizers where OwnerReferencesPermissionEnforcement is on, and
	 * nothing here waits on a foreground deletion. */
	owner =
	    json_pack("[{s:s,s:s,s:s,s:s,s:b}]", "apiVersion", CNL_KUBE_TJ_API,
	              "kind", kind, "name", name, "uid", uid, "controller", 1);
	snprintf(claim, sizeof(claim), "%s-gpu", name);
	if (count > 0)
		*ret_claim = claim_new(claim, "cnlab.io/owner", name, owner,
		                       blocks, profile, count);
	if (type[0] && strcmp(type, "any") != 0)
		json_object_set_new(ann, "cnlab.io/gpu-type",
		                    json_string(type));
	json_int_t cpu = json_integer_value(json_object_get(sp, "cpuMilli"));
	json_int_t mem = json_integer_value(json_object_get(sp, "memMiB"));
	char cq[32], mq[32];
	snprintf(cq, sizeof(cq), "%lldm", (long long)(cpu > 0 ? cpu : 1000));
	snprintf(mq, sizeof(mq), "%lldMi", (long long)(mem > 0 ? mem : 4096));
	container = json_pack(
	    "{s:s,s:s,s:s,s:{s:{s:s,s:s}},s:[{s:s,s:s}],s:[{s:s,s:s}]}", "name",
	    "main", "image", image, "workingDir", "/workspace", "resources",
	    "requests", "cpu", cq, "memory", mq, "volumeMounts", "name",
	    "workspace", "mountPath", "/workspace", "env", "name", "HOME",
	    "value", "/workspace");
	if (command)
		json_object_set_new(container, "command",
		                    json_pack("[s,s,s]", "sh", "-c", command));
	json_object_set_new(workspace, "name", json_string("workspace"));
	pod = json_pack("{s:s,s:s,s:{s:s,s:{s:s},s:o,s:O},"
	                "s:{s:s,s:s,s:[o],s:[o]}}",
	                "apiVersion", "v1", "kind", "Pod", "metadata", "name",
	                name, "labels", "cnlab.io/owner", name, "annotations",
	                ann, "ownerReferences", owner, "spec", "schedulerName",
	                CNL_KUBE_SCHEDULER, "restartPolicy", "Never",
	                "containers", container, "volumes", workspace);
	if (*ret_claim)
		use_claim(pod, container, claim);
	tenant_only(pod);
	*ret_pod = pod;
	*ret_owner = owner;
	return 0;
}

/* A spec.project other than the namespace's @project is refused. */
static int project_check(const json_t *sp, const char *project, char *err,
                         size_t errlen)
{
	const char *p = S(sp, "project");

	if (p && strcmp(p, project) != 0) {
		cnl_seterr(err, errlen,
		           "spec.project %s: this namespace's project is %s "
		           "(a namespace's project is set by its label "
		           "cnlab.io/project)",
		           p, project);
		return -EINVAL;
	}
	return 0;
}

int cnl_kube_tj_children(const json_t *tj, const char *project,
                         const char *profile_shape, json_t **ret_claim,
                         json_t **ret_pod, char *err, size_t errlen)
{
	const json_t *md = json_object_get(tj, "metadata");
	const json_t *sp = json_object_get(tj, "spec");
	const char *name = S(md, "name"), *uid = S(md, "uid");
	const char *cmd = S(sp, "command"), *image = S(sp, "image"),
	           *gpu = S(sp, "gpu"), *p;
	char q[32];
	json_t *ann, *owner;
	int r;

	*ret_claim = *ret_pod = NULL;
	if (!name || !uid || !cmd) {
		cnl_seterr(err, errlen,
		           "metadata.name, metadata.uid or "
		           "spec.command missing");
		return -EINVAL;
	}
	if (project_check(sp, project, err, errlen) < 0)
		return -EINVAL;
	if (json_object_get(sp, "profile")) {
		if (!profile_shape || gpu) {
			cnl_seterr(err, errlen,
			           "spec.profile: give it or spec.gpu, not "
			           "both");
			return -EINVAL;
		}
		gpu = profile_shape;
	}
	if (json_integer_value(json_object_get(sp, "nodes")) > 1) {
		cnl_seterr(err, errlen,
		           "spec.nodes: gangs are not in Kubernetes mode yet");
		return -EINVAL;
	}
	if (!image) {
		cnl_seterr(err, errlen,
		           "spec.image: a pod needs one (an OCI image "
		           "reference)");
		return -EINVAL;
	}
	ann = json_object();
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
	if (json_array_size(json_object_get(sp, "gpuTypes"))) {
		char list[520] = "";
		size_t i, o = 0;
		json_t *x;
		json_array_foreach (json_object_get(sp, "gpuTypes"), i, x) {
			const char *t = json_string_value(x);
			if (!t || o + strlen(t) + 2 > sizeof(list)) {
				cnl_seterr(
				    err, errlen,
				    "spec.gpuTypes[%zu]: not a type name", i);
				json_decref(ann);
				return -EINVAL;
			}
			o += (size_t)snprintf(list + o, sizeof(list) - o,
			                      "%s%s", i ? "," : "", t);
		}
		json_object_set_new(ann, "cnlab.io/gpu-types",
		                    json_string(list));
	}
	r = children(tj, "TrainingJob", gpu ? gpu : "cpu", image, cmd, ann,
	             json_pack("{s:{}}", "emptyDir"), ret_claim, ret_pod,
	             &owner, err, errlen);
	if (r < 0) {
		char why[256];
		snprintf(why, sizeof(why), "spec.gpu %s", err);
		cnl_seterr(err, errlen, "%s", why);
		return r;
	}
	json_decref(owner);
	return 0;
}

/*
 * idleTimeoutSeconds (cnlabd's default 3600; 0: never): the notebook's
 * own Jupyter server enforces it, as mybinder.org and JupyterHub's sites
 * do, by configuration handed to it in a file: kernels idle that long
 * with no browser connected are culled (a busy one never is), terminals
 * inactive that long too, and the server shuts itself down once it has
 * had neither kernels, terminals nor API requests for that long; its
 * container ends with it, so the pod succeeds, the NotebookServer is
 * Stopped and its slice is free.  The file is the pod's annotation
 * cnlab.io/jupyter-config, projected by the downward API into
 * /etc/cnlab/jupyter (for jupyter_server and the classic notebook
 * alike), which JUPYTER_CONFIG_PATH names.  An image whose server is not
 * Jupyter, or a user's own ~/.jupyter configuration that turns these
 * off, is not stopped.
 */
static void nb_idle(json_t *pod, json_t *ctr, const json_t *timeout)
{
	json_int_t t =
	    json_is_integer(timeout) ? json_integer_value(timeout) : 3600;
	json_int_t every = t / 4 < 10 ? 10 : t / 4 > 300 ? 300 : t / 4;
	const char *file[] = {"jupyter_server_config.json",
	                      "jupyter_notebook_config.json"};
	json_t *cfg, *items, *env;
	char *text;

	if (t <= 0)
		return;
	items = json_array();
	cfg = json_pack("{s:{s:I},s:{s:I},s:{s:I,s:I,s:b,s:b},s:{s:I,s:I}}",
	                "ServerApp", "shutdown_no_activity_timeout", t,
	                "NotebookApp", "shutdown_no_activity_timeout", t,
	                "MappingKernelManager", "cull_idle_timeout", t,
	                "cull_interval", every, "cull_connected", 0,
	                "cull_busy", 0, "TerminalManager",
	                "cull_inactive_timeout", t, "cull_interval", every);
	text = json_dumps(cfg, JSON_SORT_KEYS | JSON_COMPACT);
	json_decref(cfg);
	json_object_set_new(
	    json_object_get(json_object_get(pod, "metadata"), "annotations"),
	    "cnlab.io/jupyter-config", json_string(text));
	free(text);
	for (size_t i = 0; i < 2; i++)
		json_array_append_new(
		    items, json_pack("{s:s,s:{s:s}}", "path", file[i],
		                     "fieldRef", "fieldPath",
		                     "metadata.annotations['cnlab.io/"
		                     "jupyter-config']"));
	json_array_append_new(
	    json_object_get(json_object_get(pod, "spec"), "volumes"),
	    json_pack("{s:s,s:{s:o}}", "name", "jupyter-config", "downwardAPI",
	              "items", items));
	json_array_append_new(json_object_get(ctr, "volumeMounts"),
	                      json_pack("{s:s,s:s,s:b}", "name",
	                                "jupyter-config", "mountPath",
	                                "/etc/cnlab/jupyter", "readOnly", 1));
	if (!(env = json_object_get(ctr, "env"))) {
		env = json_array();
		json_object_set_new(ctr, "env", env);
	}
	json_array_append_new(env, json_pack("{s:s,s:s}", "name",
	                                     "JUPYTER_CONFIG_PATH", "value",
	                                     "/etc/cnlab/jupyter"));
}

int cnl_kube_nb_children(const json_t *nb, const char *project,
                         const char *shape, json_t **ret_claim,
                         json_t **ret_pod, json_t **ret_service,
                         json_t **ret_pvc, char *err, size_t errlen)
{
	const json_t *md = json_object_get(nb, "metadata");
	const json_t *sp = json_object_get(nb, "spec");
	const char *name = S(md, "name"), *uid = S(md, "uid");
	const char *image = S(sp, "image");
	char pvc[300], gb[32];
	json_t *owner, *ann;
	json_int_t size = json_integer_value(json_object_get(sp, "storageGB"));
	int r;

	*ret_claim = *ret_pod = *ret_service = *ret_pvc = NULL;
	if (!name || !uid || !image) {
		cnl_seterr(err, errlen,
		           "metadata.name, metadata.uid or "
		           "spec.image missing");
		return -EINVAL;
	}
	if (project_check(sp, project, err, errlen) < 0)
		return -EINVAL;
	snprintf(pvc, sizeof(pvc), "%s-workspace", name);
	ann = json_pack("{s:s,s:s}", "cnlab.io/priority", "normal",
	                "cnlab.io/preemptible", "false");
	r = children(
	    nb, "NotebookServer", shape, image, NULL, ann,
	    json_pack("{s:{s:s}}", "persistentVolumeClaim", "claimName", pvc),
	    ret_claim, ret_pod, &owner, err, errlen);
	if (r < 0)
		return r;
	json_t *ports = json_pack("[{s:s,s:i,s:s}]", "name", "notebook",
	                          "containerPort", 8888, "protocol", "TCP");
	json_t *ctr = json_array_get(
	    json_object_get(json_object_get(*ret_pod, "spec"), "containers"),
	    0);
	json_object_set_new(ctr, "ports", ports);
	nb_idle(*ret_pod, ctr, json_object_get(sp, "idleTimeoutSeconds"));
	snprintf(gb, sizeof(gb), "%lldGi", (long long)(size > 0 ? size : 10));
	*ret_pvc =
	    json_pack("{s:s,s:s,s:{s:s,s:{s:s},s:O},s:{s:[s],s:{s:{s:s}}}}",
	              "apiVersion", "v1", "kind", "PersistentVolumeClaim",
	              "metadata", "name", pvc, "labels", "cnlab.io/owner", name,
	              "ownerReferences", owner, "spec", "accessModes",
	              "ReadWriteOnce", "resources", "requests", "storage", gb);
	*ret_service = json_pack(
	    "{s:s,s:s,s:{s:s,s:{s:s},s:O},s:{s:{s:s},s:[{s:s,s:i,s:s,s:s}]}}",
	    "apiVersion", "v1", "kind", "Service", "metadata", "name", name,
	    "labels", "cnlab.io/owner", name, "ownerReferences", owner, "spec",
	    "selector", "cnlab.io/owner", name, "ports", "name", "notebook",
	    "port", 8888, "targetPort", "notebook", "protocol", "TCP");
	json_decref(owner);
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
	/* A merge patch: null takes an earlier message away. */
	json_object_set_new(st, "message",
	                    message && *message ? json_string(message)
	                                        : json_null());
	return json_pack("{s:o}", "status", st);
}

json_t *cnl_kube_nb_status(const char *phase, const char *job, const char *node,
                           const char *url, const char *message,
                           long long generation)
{
	char now[40];
	bool ready = strcmp(phase, "Running") == 0;
	json_t *st;

	cnl_time_format_rfc3339(cnl_time_now_ms() / 1000 * 1000, now,
	                        sizeof(now));
	char *dot = strchr(now, '.');
	if (dot)
		snprintf(dot, 2, "Z");
	st = json_pack("{s:s,s:I,s:[{s:s,s:s,s:s,s:s,s:s,s:I}]}", "phase",
	               phase, "observedGeneration", (json_int_t)generation,
	               "conditions", "type", "Ready", "status",
	               ready ? "True" : "False", "reason", phase, "message",
	               message && *message ? message : phase,
	               "lastTransitionTime", now, "observedGeneration",
	               (json_int_t)generation);
	if (job && *job)
		json_object_set_new(st, "serverID", json_string(job));
	if (node && *node)
		json_object_set_new(st, "node", json_string(node));
	if (url && *url && ready)
		json_object_set_new(st, "url", json_string(url));
	/* A merge patch: null takes an earlier message away. */
	json_object_set_new(st, "message",
	                    message && *message ? json_string(message)
	                                        : json_null());
	return json_pack("{s:o}", "status", st);
}

/* ---- `cnlab run` jobs on Kubernetes nodes -------------------------------- */

void cnl_kube_run_name(const char *job, int64_t epoch, char *buf, size_t len)
{
	size_t o = (size_t)snprintf(buf, len, "cnlab-");

	for (const char *c = job; *c && o + 1 < len; c++)
		buf[o++] = *c == '_' ? '-' : (char)tolower((unsigned char)*c);
	buf[o < len ? o : len - 1] = '\0';
	if (o < len)
		snprintf(buf + o, len - o, "-%lld", (long long)epoch);
}

/* The owner reference to the pod @name of uid @uid. */
static json_t *pod_owner(const char *name, const char *uid)
{
	return json_pack("[{s:s,s:s,s:s,s:s,s:b}]", "apiVersion", "v1", "kind",
	                 "Pod", "name", name, "uid", uid, "controller", 1);
}

void cnl_kube_gang_service_name(const char *gang, int rank, char *buf,
                                size_t len)
{
	char g[128];

	cnl_kube_run_name(gang, 0, g, sizeof(g));
	/* "cnlab-ID-0" less its epoch, then the rank. */
	*strrchr(g, '-') = '\0';
	snprintf(buf, len, "%s-%d", g, rank);
}

void cnl_kube_gang_host(const char *gang, int rank, const char *ns, char *buf,
                        size_t len)
{
	char svc[160];

	cnl_kube_gang_service_name(gang, rank, svc, sizeof(svc));
	snprintf(buf, len, "%s.%s.svc", svc, ns);
}

/* Variable @name of @env: @items[0..n) joined by commas. */
static void env_list(json_t *env, const char *name, const char *const *items,
                     int n)
{
	size_t cap = 1, o = 0;
	char *s;

	for (int i = 0; i < n; i++)
		cap += strlen(items[i]) + 1;
	s = cnl_xmalloc(cap);
	s[0] = '\0';
	for (int i = 0; i < n; i++)
		o += (size_t)snprintf(s + o, cap - o, "%s%s", i ? "," : "",
		                      items[i]);
	json_array_append_new(env,
	                      json_pack("{s:s,s:s}", "name", name, "value", s));
	free(s);
}

/* A run's place in its gang, in its container's variables @env. */
static void gang_env(const struct cnl_kube_run *r, json_t *env)
{
	char v[32], (*host)[256];
	const char **hosts;
	bool gang = r->gang_size > 1;

#define VAR(k, val)            \
	json_array_append_new( \
	    env, json_pack("{s:s,s:s}", "name", (k), "value", (val)))
	snprintf(v, sizeof(v), "%d", gang ? r->gang_rank : 0);
	VAR("CNLAB_RANK", v);
	snprintf(v, sizeof(v), "%d", gang ? r->gang_size : 1);
	VAR("CNLAB_WORLD_SIZE", v);
	if (!gang)
		return;
	VAR("CNLAB_GANG_ID", r->gang_id);
#undef VAR
	env_list(env, "CNLAB_GANG_NODES", r->gang_nodes, r->gang_size);
	host = cnl_xcalloc((size_t)r->gang_size, sizeof(*host));
	hosts = cnl_xcalloc((size_t)r->gang_size, sizeof(*hosts));
	for (int i = 0; i < r->gang_size; i++) {
		cnl_kube_gang_host(r->gang_id, i, r->ns, host[i],
		                   sizeof(host[i]));
		hosts[i] = host[i];
	}
	env_list(env, "CNLAB_GANG_HOSTS", hosts, r->gang_size);
	free(hosts);
	free(host);
}

json_t *cnl_kube_run_gang_service(const struct cnl_kube_run *r,
                                  const char *pod_uid)
{
	char name[128], svc[160], rk[16];

	cnl_kube_run_name(r->job, r->epoch, name, sizeof(name));
	cnl_kube_gang_service_name(r->gang_id, r->gang_rank, svc, sizeof(svc));
	snprintf(rk, sizeof(rk), "%d", r->gang_rank);
	return json_pack(
	    "{s:s,s:s,s:{s:s,s:{s:s,s:s},s:o},"
	    "s:{s:s,s:s,s:b,s:{s:s,s:s}}}",
	    "apiVersion", "v1", "kind", "Service", "metadata", "name", svc,
	    "labels", "cnlab.io/gang", r->gang_id, "cnlab.io/job", r->job,
	    "ownerReferences", pod_owner(name, pod_uid), "spec", "type",
	    "ClusterIP", "clusterIP", "None", "publishNotReadyAddresses", 1,
	    "selector", "cnlab.io/gang", r->gang_id, "cnlab.io/rank", rk);
}

bool cnl_kube_gang_service_like(const json_t *svc, const struct cnl_kube_run *r)
{
	const json_t *spec = json_object_get(svc, "spec");
	const json_t *sel = json_object_get(spec, "selector");
	const char *ip = json_string_value(json_object_get(spec, "clusterIP"));
	const char *g =
	    json_string_value(json_object_get(sel, "cnlab.io/gang"));
	const char *rk =
	    json_string_value(json_object_get(sel, "cnlab.io/rank"));
	char want[16];

	snprintf(want, sizeof(want), "%d", r->gang_rank);
	return json_object_size(sel) == 2 && g && rk && ip &&
	       strcmp(ip, "None") == 0 && strcmp(g, r->gang_id) == 0 &&
	       strcmp(rk, want) == 0;
}

/* Each input: its key's file copied to its path (folders made), the
 * copy's SHA-256 checked (the copy's, so nothing changes between the check
 * and the use) and made read-only.  Arguments KEY SHA256 PATH, never
 * parsed by the shell. */
static const char inputs_script[] =
    "set -eu\n"
    "command -v sha256sum >/dev/null 2>&1 || {\n"
    "  echo 'cnlab: the image has no sha256sum, which checks the job'\\''s "
    "inputs' >&2; exit 1; }\n"
    "while [ $# -ge 3 ]; do\n"
    "  key=$1 sum=$2 path=$3; shift 3\n"
    "  case /$path/ in */../*|*/./*|//*)\n"
    "    printf 'cnlab: input %s: not a path in /workspace\\n' \"$path\" >&2\n"
    "    exit 1;; esac\n"
    "  dir=${path%/*}\n"
    "  [ \"$dir\" = \"$path\" ] || mkdir -p -- \"$dir\"\n"
    "  cat -- \"/cnlab/inputs/$key\" >\"$path\" || {\n"
    "    printf 'cnlab: input %s: not in its ConfigMap\\n' \"$path\" >&2\n"
    "    exit 1; }\n"
    "  got=$(sha256sum <\"$path\"); got=${got%% *}\n"
    "  [ \"$got\" = \"$sum\" ] || {\n"
    "    rm -f -- \"$path\"\n"
    "    printf 'cnlab: input %s: its bytes are not those given to CNLab "
    "(SHA-256 %s, not %s): its ConfigMap was changed\\n' \"$path\" "
    "\"$got\" \"$sum\" >&2\n"
    "    exit 1; }\n"
    "  chmod a-w -- \"$path\"\n"
    "done\n";

void cnl_kube_run_inputs_name(const struct cnl_kube_run *r, size_t map,
                              char *buf, size_t len)
{
	char name[128];

	cnl_kube_run_name(r->job, r->epoch, name, sizeof(name));
	if (map == 0)
		snprintf(buf, len, "%s-inputs", name);
	else
		snprintf(buf, len, "%s-inputs-%zu", name, map);
}

/* The init container that puts @r's inputs in /workspace, checked; its
 * ConfigMaps as one projected volume "inputs" in @volumes. */
static json_t *inputs_init(const struct cnl_kube_run *r, const char *cq,
                           const char *mq, json_t *volumes)
{
	json_t *srcs = json_array(), *cmd, *c;
	char cm[192];

	for (size_t m = 0; m < r->n_input_maps; m++) {
		cnl_kube_run_inputs_name(r, m, cm, sizeof(cm));
		json_array_append_new(
		    srcs, json_pack("{s:{s:s}}", "configMap", "name", cm));
	}
	json_array_append_new(volumes,
	                      json_pack("{s:s,s:{s:o}}", "name", "inputs",
	                                "projected", "sources", srcs));
	cmd = json_pack("[s,s,s,s]", "sh", "-c", inputs_script, "cnlab-inputs");
	for (size_t i = 0; i < r->n_inputs; i++) {
		char key[32];
		snprintf(key, sizeof(key), "in%zu", i);
		json_array_append_new(cmd, json_string(key));
		json_array_append_new(cmd, json_string(r->input_sums[i]));
		json_array_append_new(cmd, json_string(r->inputs[i]));
	}
	/* Its resources are the job's: the pod asks no more than before
	 * (the larger of an init container's and the containers'). */
	c = json_pack("{s:s,s:s,s:o,s:s,s:{s:{s:s,s:s},s:{s:s}},"
	              "s:[{s:s,s:s},{s:s,s:s,s:b}],s:s}",
	              "name", "inputs", "image", r->image, "command", cmd,
	              "workingDir", "/workspace", "resources", "requests",
	              "cpu", cq, "memory", mq, "limits", "memory", mq,
	              "volumeMounts", "name", "workspace", "mountPath",
	              "/workspace", "name", "inputs", "mountPath",
	              "/cnlab/inputs", "readOnly", 1,
	              "terminationMessagePolicy", "FallbackToLogsOnError");
	return c;
}

/* A server's command: JupyterLab where the image has it, on the pod's
 * address (cnlabd's proxy comes there; JupyterLab takes its token alone),
 * else cnlab-notebook.py, from the agent's image (notebook_init). */
#define SERVER_COMMAND                                                    \
	"if command -v jupyter >/dev/null; then exec jupyter lab "        \
	"--ip=0.0.0.0 --port=\"$CNLAB_PORT\" --no-browser "               \
	"--ServerApp.token=\"$CNLAB_SERVER_TOKEN\" "                      \
	"--ServerApp.base_url=\"$CNLAB_BASE_URL\" "                       \
	"--notebook-dir=/workspace; "                                     \
	"elif [ -r \"$CNLAB_NOTEBOOK\" ]; then exec python3 "             \
	"\"$CNLAB_NOTEBOOK\"; "                                           \
	"else echo 'cnlab: the image has no jupyter, and cnlabd gave no " \
	"cnlab-notebook.py (kube_collect_image)' >&2; exit 127; fi"

/* A server's environment, as an agent gives it (its token from the
 * Secret NAME-server, made for the pod), and the folder of
 * cnlab-notebook.py. */
static void server_env(const struct cnl_kube_run *r, const char *name,
                       json_t *container, json_t *volumes)
{
	json_t *env = json_object_get(container, "env");
	char base[160], sec[160], port[16];

	snprintf(base, sizeof(base), "/s/%s/", r->job);
	snprintf(sec, sizeof(sec), "%s-server", name);
	snprintf(port, sizeof(port), "%d", CNL_KUBE_SERVER_PORT);
	json_t *more = json_pack(
	    "[{s:s,s:s},{s:s,s:s},{s:s,s:s},{s:s,s:s},"
	    "{s:s,s:s},{s:s,s:{s:{s:s,s:s}}}]",
	    "name", "CNLAB_PORT", "value", port, "name", "CNLAB_ADDRESS",
	    "value", "0.0.0.0", "name", "CNLAB_BASE_URL", "value", base, "name",
	    "CNLAB_WORKSPACE", "value", "/workspace", "name", "CNLAB_NOTEBOOK",
	    "value", "/opt/cnlab/cnlab-notebook.py", "name",
	    "CNLAB_SERVER_TOKEN", "valueFrom", "secretKeyRef", "name", sec,
	    "key", "token");

	json_array_extend(env, more);
	json_decref(more);
	/* /etc/passwd and /etc/group naming the owner (for sshd, whoami),
	 * from the same Secret, world-readable as the image's are. */
	json_array_append_new(
	    volumes,
	    json_pack("{s:s,s:{s:s,s:[{s:s,s:s},{s:s,s:s}],s:i}}", "name",
	              "cnlab-etc", "secret", "secretName", sec, "items", "key",
	              "passwd", "path", "passwd", "key", "group", "path",
	              "group", "defaultMode", 0444));
	for (int i = 0; i < 2; i++)
		json_array_append_new(
		    json_object_get(container, "volumeMounts"),
		    json_pack("{s:s,s:s,s:s,s:b}", "name", "cnlab-etc",
		              "mountPath", i ? "/etc/group" : "/etc/passwd",
		              "subPath", i ? "group" : "passwd", "readOnly",
		              1));
	if (!r->notebook_image)
		return;
	json_array_append_new(
	    volumes, json_pack("{s:s,s:{}}", "name", "cnlab", "emptyDir"));
	json_array_append_new(json_object_get(container, "volumeMounts"),
	                      json_pack("{s:s,s:s,s:b}", "name", "cnlab",
	                                "mountPath", "/opt/cnlab", "readOnly",
	                                1));
}

/* What the init container of a server copies beside it (an emptyDir
 * the server mounts read-only at /opt/cnlab): cnlab-notebook.py, and the
 * sshd the agent's image lends (scripts/sshd-bundle) to an image without
 * one (kube_sched.c, ssh_script). */
#define NOTEBOOK_INIT                                                    \
	"cp /usr/bin/cnlab-notebook.py /opt/cnlab/cnlab-notebook.py && " \
	"if [ -d /usr/lib/cnlab/sshd ]; then "                           \
	"cp -R /usr/lib/cnlab/sshd /opt/cnlab/sshd; fi"

/* The init container that puts cnlab-notebook.py beside a server. */
static json_t *notebook_init(const struct cnl_kube_run *r)
{
	return json_pack("{s:s,s:s,s:[s,s,s],s:[{s:s,s:s}],s:{s:b}}", "name",
	                 "notebook", "image", r->notebook_image, "command",
	                 "sh", "-c", NOTEBOOK_INIT, "volumeMounts", "name",
	                 "cnlab", "mountPath", "/opt/cnlab", "securityContext",
	                 "readOnlyRootFilesystem", 1);
}

/* The collector of the run's artifacts: a native sidecar (see
 * cnl_kube_run_pod). */
static json_t *collect_sidecar(const struct cnl_kube_run *r, const char *name,
                               json_t *volumes)
{
	char sec[160], ep[32];

	snprintf(sec, sizeof(sec), "%s-collect", name);
	snprintf(ep, sizeof(ep), "%lld", (long long)r->epoch);
	json_array_append_new(
	    volumes, json_pack("{s:s,s:{s:s,s:i}}", "name", "collect", "secret",
	                       "secretName", sec, "defaultMode", 0400));
	/* The pod's own token (its namespace's default ServiceAccount,
	 * bound to this pod's uid by the kubelet, for cnlabd alone): what
	 * makes the collector's credential this pod's and no other's
	 * (cnlabd reviews it: kube_sched.c, collect_verify). */
	json_array_append_new(
	    volumes, json_pack("{s:s,s:{s:[{s:{s:s,s:i,s:s}}],s:i}}", "name",
	                       "collect-pod", "projected", "sources",
	                       "serviceAccountToken", "audience",
	                       CNL_KUBE_COLLECT_AUDIENCE, "expirationSeconds",
	                       3600, "path", "token", "defaultMode", 0400));
	return json_pack(
	    "{s:s,s:s,s:s,s:[s,s],s:[{s:s,s:s},{s:s,s:s},{s:s,s:s}],"
	    "s:[{s:s,s:s,s:b},{s:s,s:s,s:b},{s:s,s:s,s:b}],"
	    "s:{s:b}}",
	    "name", "collect", "image", r->collect_image, "restartPolicy",
	    "Always", "command", "cnlab-agent", "collect", "env", "name",
	    "CNLAB_SERVER", "value", r->collect_url, "name", "CNLAB_JOB",
	    "value", r->job, "name", "CNLAB_EPOCH", "value", ep, "volumeMounts",
	    "name", "artifacts", "mountPath", "/workspace/artifacts",
	    "readOnly", 1, "name", "collect", "mountPath", "/run/cnlab/collect",
	    "readOnly", 1, "name", "collect-pod", "mountPath", "/run/cnlab/pod",
	    "readOnly", 1, "securityContext", "readOnlyRootFilesystem", 1);
}

int cnl_kube_run_pod(const struct cnl_kube_run *r, json_t **ret_pod, char *err,
                     size_t errlen)
{
	char name[128], claim[160], type[64], profile[32], cq[32], mq[32],
	    ep[32];
	int blocks, count;
	json_t *container, *mounts, *volumes, *pod;

	*ret_pod = NULL;
	if (shape_parts(r->shape, type, sizeof(type), &blocks, profile,
	                sizeof(profile), &count) < 0) {
		cnl_seterr(err, errlen, "%s: not a GPU shape", r->shape);
		return -EINVAL;
	}
	cnl_kube_run_name(r->job, r->epoch, name, sizeof(name));
	snprintf(claim, sizeof(claim), "%s-gpu", name);
	snprintf(ep, sizeof(ep), "%lld", (long long)r->epoch);
	snprintf(cq, sizeof(cq), "%lldm",
	         (long long)(r->cpu_milli > 0 ? r->cpu_milli : 1000));
	snprintf(mq, sizeof(mq), "%lldMi",
	         (long long)(r->mem_mib > 0 ? r->mem_mib : 4096));
	mounts = json_pack("[{s:s,s:s}]", "name", "workspace", "mountPath",
	                   "/workspace");
	if (r->server) { /* its workspace outlives the pod */
		char pvc[160];
		cnl_kube_server_pvc_name(r->job, pvc, sizeof(pvc));
		volumes = json_pack("[{s:s,s:{s:s}}]", "name", "workspace",
		                    "persistentVolumeClaim", "claimName", pvc);
	} else {
		volumes =
		    json_pack("[{s:s,s:{}}]", "name", "workspace", "emptyDir");
	}
	container = json_pack(
	    "{s:s,s:s,s:[s,s,s],s:s,s:{s:{s:s,s:s},s:{s:s}},s:o,"
	    "s:[{s:s,s:s},{s:s,s:s}]}",
	    "name", r->server ? "server" : "job", "image", r->image, "command",
	    "sh", "-c", r->server ? SERVER_COMMAND : r->command, "workingDir",
	    "/workspace", "resources", "requests", "cpu", cq, "memory", mq,
	    "limits", "memory", mq, "volumeMounts", mounts, "env", "name",
	    "CNLAB_JOB_ID", "value", r->job, "name", "HOME", "value",
	    "/workspace");
	gang_env(r, json_object_get(container, "env"));
	if (r->server)
		server_env(r, name, container, volumes);
	json_t *init = r->n_inputs ? inputs_init(r, cq, mq, volumes) : NULL;
	if (r->n_secrets) {
		char sec[160];
		json_t *env = json_object_get(container, "env");
		snprintf(sec, sizeof(sec), "%s-secrets", name);
		/* Files readable by the container's user alone (0400), on
		 * the kubelet's tmpfs. */
		json_array_append_new(
		    volumes,
		    json_pack("{s:s,s:{s:s,s:i}}", "name", "secrets", "secret",
		              "secretName", sec, "defaultMode", 0400));
		json_array_append_new(mounts,
		                      json_pack("{s:s,s:s,s:b}", "name",
		                                "secrets", "mountPath",
		                                "/run/secrets", "readOnly", 1));
		json_array_append_new(env, json_pack("{s:s,s:s}", "name",
		                                     "CNLAB_SECRETS_DIR",
		                                     "value", "/run/secrets"));
		for (size_t i = 0; i < r->n_secrets; i++)
			if (r->env && r->env[i])
				json_array_append_new(
				    env,
				    json_pack("{s:s,s:{s:{s:s,s:s}}}", "name",
				              r->env[i], "valueFrom",
				              "secretKeyRef", "name", sec,
				              "key", r->secrets[i]));
	}
	json_t *inits = json_array();
	if (init)
		json_array_append_new(inits, init);
	if (r->server && r->notebook_image)
		json_array_append_new(inits, notebook_init(r));
	if (r->collect_image && r->collect_url && !r->server) {
		/* The artifacts' folder is there when the job starts, as on
		 * an agent's node: a volume of its own in the workspace, which
		 * is all the collector sees of the pod. */
		json_array_append_new(json_object_get(container, "env"),
		                      json_pack("{s:s,s:s}", "name",
		                                "CNLAB_ARTIFACTS_DIR", "value",
		                                "/workspace/artifacts"));
		json_array_append_new(
		    volumes,
		    json_pack("{s:s,s:{}}", "name", "artifacts", "emptyDir"));
		json_array_append_new(
		    mounts, json_pack("{s:s,s:s}", "name", "artifacts",
		                      "mountPath", "/workspace/artifacts"));
		/* An input under artifacts/ lands where the job finds it,
		 * not under the folder's volume. */
		if (init)
			json_array_append_new(
			    json_object_get(init, "volumeMounts"),
			    json_pack("{s:s,s:s}", "name", "artifacts",
			              "mountPath", "/workspace/artifacts"));
		json_array_append_new(inits, collect_sidecar(r, name, volumes));
	}
	pod = json_pack("{s:s,s:s,s:{s:s,s:{s:s,s:s},s:{s:s}},"
	                "s:{s:s,s:s,s:b,s:[o],s:o}}",
	                "apiVersion", "v1", "kind", "Pod", "metadata", "name",
	                name, "labels", "cnlab.io/job", r->job,
	                "cnlab.io/epoch", ep, "annotations", "cnlab.io/project",
	                r->project, "spec", "schedulerName", CNL_KUBE_SCHEDULER,
	                "restartPolicy", "Never", "enableServiceLinks", 0,
	                "containers", container, "volumes", volumes);
	if (json_array_size(inits)) {
		json_object_set_new(json_object_get(pod, "spec"),
		                    "initContainers", inits);
		if (r->collect_image && r->collect_url && !r->server)
			json_object_set_new(json_object_get(pod, "spec"),
			                    "terminationGracePeriodSeconds",
			                    json_integer(300));
	} else {
		json_decref(inits);
	}
	if (r->gang_size > 1) {
		char rk[16];
		json_t *lab =
		    json_object_get(json_object_get(pod, "metadata"), "labels");
		snprintf(rk, sizeof(rk), "%d", r->gang_rank);
		json_object_set_new(lab, "cnlab.io/gang",
		                    json_string(r->gang_id));
		json_object_set_new(lab, "cnlab.io/rank", json_string(rk));
	}
	/* A project member need not hold the namespace's ServiceAccount
	 * token. */
	json_object_set_new(json_object_get(pod, "spec"),
	                    "automountServiceAccountToken", json_false());
	if (r->server) {
		json_t *idle = json_integer(r->idle_timeout_s);
		json_object_set_new(
		    json_object_get(json_object_get(pod, "metadata"), "labels"),
		    "cnlab.io/server", json_string(r->job));
		json_object_set_new(container, "ports",
		                    json_pack("[{s:s,s:i,s:s}]", "name",
		                              "notebook", "containerPort",
		                              CNL_KUBE_SERVER_PORT, "protocol",
		                              "TCP"));
		nb_idle(pod, container, idle);
		json_decref(idle);
	}
	if (count > 0)
		use_claim(pod, container, claim);
	tenant_only(pod);
	if (r->user_namespaces)
		cnl_kube_pod_own_users(pod);
	*ret_pod = pod;
	return 0;
}

json_t *cnl_kube_run_claim(const struct cnl_kube_run *r, const char *pod_uid)
{
	char name[128], claim[160], type[64], profile[32];
	int blocks, count;
	json_t *owner, *c;

	if (shape_parts(r->shape, type, sizeof(type), &blocks, profile,
	                sizeof(profile), &count) < 0 ||
	    count == 0)
		return NULL;
	cnl_kube_run_name(r->job, r->epoch, name, sizeof(name));
	snprintf(claim, sizeof(claim), "%s-gpu", name);
	owner = pod_owner(name, pod_uid);
	c = claim_new(claim, "cnlab.io/job", r->job, owner, blocks, profile,
	              count);
	json_decref(owner);
	return c;
}

json_t *cnl_kube_run_inputs(const struct cnl_kube_run *r, const char *pod_uid,
                            size_t map, json_t *data)
{
	char name[128], cm[192];

	cnl_kube_run_name(r->job, r->epoch, name, sizeof(name));
	cnl_kube_run_inputs_name(r, map, cm, sizeof(cm));
	return json_pack("{s:s,s:s,s:{s:s,s:{s:s},s:o},s:b,s:o}", "apiVersion",
	                 "v1", "kind", "ConfigMap", "metadata", "name", cm,
	                 "labels", "cnlab.io/job", r->job, "ownerReferences",
	                 pod_owner(name, pod_uid), "immutable", 1, "binaryData",
	                 data);
}

/* The Secret NAME-@suffix of run @r's pod: @keys[i] = @vals[i] (NULL or
 * "": left out), immutable, owned by the pod. */
static json_t *run_token_secret(const struct cnl_kube_run *r,
                                const char *pod_uid, const char *suffix,
                                const char *const *keys,
                                const char *const *vals, int n_keys)
{
	char name[128], sec[160];
	json_t *data = json_object();

	cnl_kube_run_name(r->job, r->epoch, name, sizeof(name));
	snprintf(sec, sizeof(sec), "%s-%s", name, suffix);
	for (int i = 0; i < n_keys; i++) {
		size_t n = vals[i] ? strlen(vals[i]) : 0;
		size_t m = cnl_b64_encoded_len(n, CNL_B64_PAD) + 1;
		char *b;

		if (!n || n > CNL_B64_INPUT_MAX)
			continue;
		b = cnl_xmalloc(m);
		if (cnl_b64_encode(vals[i], n, CNL_B64_PAD, b, m) >= 0)
			json_object_set_new(data, keys[i], json_string(b));
		free(b);
	}
	return json_pack("{s:s,s:s,s:{s:s,s:{s:s},s:o},s:s,s:b,s:o}",
	                 "apiVersion", "v1", "kind", "Secret", "metadata",
	                 "name", sec, "labels", "cnlab.io/job", r->job,
	                 "ownerReferences", pod_owner(name, pod_uid), "type",
	                 "Opaque", "immutable", 1, "data", data);
}

json_t *cnl_kube_run_collect_secret(const struct cnl_kube_run *r,
                                    const char *pod_uid, const char *token,
                                    const char *ca)
{
	const char *const keys[] = {"token", "ca.crt"};
	const char *const vals[] = {token, ca};

	return run_token_secret(r, pod_uid, "collect", keys, vals, 2);
}

json_t *cnl_kube_run_server_secret(const struct cnl_kube_run *r,
                                   const char *pod_uid, const char *token)
{
	const char *const keys[] = {"token", "passwd", "group"};
	char passwd[256], group[128];
	const char *const vals[] = {token, passwd, group};
	const char *u = tenant_name(r);

	/* The image's own accounts are not known here: root and nobody,
	 * and the tenant, as an agent's container of an image without
	 * /etc/passwd has them; an owner of one of those names is the only
	 * account of it (the first line of a name is the one looked up). */
	snprintf(passwd, sizeof(passwd),
	         "%s%s%s:x:%d:%d:%s:/workspace:/bin/sh\n",
	         strcmp(u, "root") ? "root:x:0:0:root:/root:/bin/sh\n" : "",
	         strcmp(u, "nobody") ? "nobody:x:65534:65534:nobody:"
	                               "/nonexistent:/usr/sbin/nologin\n"
	                             : "",
	         u, CNL_KUBE_TENANT_ID, CNL_KUBE_TENANT_ID, u);
	snprintf(group, sizeof(group), "%s%s%s:x:%d:\n",
	         strcmp(u, "root") ? "root:x:0:\n" : "",
	         strcmp(u, "nogroup") ? "nogroup:x:65534:\n" : "", u,
	         CNL_KUBE_TENANT_ID);
	return run_token_secret(r, pod_uid, "server", keys, vals, 3);
}

void cnl_kube_server_pvc_name(const char *server, char *buf, size_t len)
{
	char name[128];

	/* The epoch's place in a run's name: "cnlab-ID-workspace". */
	cnl_kube_run_name(server, 0, name, sizeof(name));
	name[strlen(name) - 2] = '\0';
	snprintf(buf, len, "%s-workspace", name);
}

json_t *cnl_kube_server_pvc(const struct cnl_kube_run *r)
{
	char pvc[160], gb[32];

	cnl_kube_server_pvc_name(r->job, pvc, sizeof(pvc));
	snprintf(gb, sizeof(gb), "%lldGi",
	         (long long)(r->storage_gb > 0 ? r->storage_gb : 10));
	return json_pack("{s:s,s:s,s:{s:s,s:{s:s}},s:{s:[s],s:{s:{s:s}}}}",
	                 "apiVersion", "v1", "kind", "PersistentVolumeClaim",
	                 "metadata", "name", pvc, "labels", "cnlab.io/server",
	                 r->job, "spec", "accessModes", "ReadWriteOnce",
	                 "resources", "requests", "storage", gb);
}

json_t *cnl_kube_run_secret(const struct cnl_kube_run *r, const char *pod_uid,
                            json_t *data)
{
	char name[128], sec[160];

	cnl_kube_run_name(r->job, r->epoch, name, sizeof(name));
	snprintf(sec, sizeof(sec), "%s-secrets", name);
	return json_pack("{s:s,s:s,s:{s:s,s:{s:s},s:o},s:s,s:b,s:o}",
	                 "apiVersion", "v1", "kind", "Secret", "metadata",
	                 "name", sec, "labels", "cnlab.io/job", r->job,
	                 "ownerReferences", pod_owner(name, pod_uid), "type",
	                 "Opaque", "immutable", 1, "data", data);
}

char *cnl_kube_pem_certs(const char *pem)
{
	static const char begin[] = "-----BEGIN CERTIFICATE-----";
	static const char end[] = "-----END CERTIFICATE-----";
	/* Each block copied is longer than the newline added after it. */
	char *out = cnl_xmalloc(2 * strlen(pem) + 2);
	const char *p = pem, *b, *e;
	size_t n = 0;

	while ((b = strstr(p, begin)) && (e = strstr(b, end))) {
		size_t len = (size_t)(e - b) + sizeof(end) - 1;
		const char *in = b + sizeof(begin) - 1;
		/* A block with another marker inside is no certificate's. */
		bool dash = false;
		for (const char *q = in; q + 5 <= e && !dash; q++)
			dash = strncmp(q, "-----", 5) == 0;
		if (!dash) {
			memcpy(out + n, b, len);
			n += len;
			out[n++] = '\n';
		}
		p = e + sizeof(end) - 1;
	}
	out[n] = '\0';
	if (!n) {
		free(out);
		return NULL;
	}
	return out;
}
