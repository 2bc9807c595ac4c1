/*
 * kube_sched.h - cnlabd as a Kubernetes scheduler (`cnlabd --kube`).
 *
 * The leader runs it beside its API.  Pods with spec.schedulerName
 * "cnlab" become CNLab jobs (kube_map.h says how), so they go through the
 * same six stages as any job: admission, quota and fair share per project,
 * priority, deadline, placement by CNLab's allocator, pre-emption.
 *
 *   Kubernetes nodes whose GPUs the agent's DRA plugin publishes
 *   (ResourceSlices of driver gpu.cnlab.io) are registered as CNLab nodes,
 *   each with a credential bound to it that this process mints; it speaks
 *   the node protocol for them (heartbeats, assignments, reports) over
 *   cnlabd's own listener, as an agent would.
 *
 *   A pending pod is submitted to its project as the service user "kube"
 *   (a project lets it in with `cnlab project member add PROJECT kube`),
 *   its PodScheduled condition saying which job it waits as.  When the
 *   job is placed, the pod's ResourceClaim gets its allocation (the GPU's
 *   device with consumedCapacity blocks, or the MIG partition; reserved
 *   for the pod) and the pod is bound to the node (Binding subresource);
 *   the job is then running.  A pod that ends ends its job (exit code of
 *   its first container); a job cancelled or pre-empted evicts its pod
 *   (Eviction API: a PodDisruptionBudget that forbids it is honoured, and
 *   the eviction tried again), and a pod deleted before its job was
 *   placed cancels it.  A refusal (no such project, a claim CNLab cannot
 *   read, a deadline no plan meets) is written on the pod's condition.
 *
 * `cnlab run` jobs that CNLab places on these nodes become pods made
 * here (kube_ops.h, cnl_kube_run_pod): in the namespace that the job's
 * project's label names, with their claim and a ConfigMap of their
 * inputs; allocated and bound as any pod; their log copied into the job's
 * output; deleted when the job ends or is stopped.  `cnlab server create`
 * servers placed there become pods too (their workspace a claim that
 * outlives them; running once the pod has an address, which cnlabd's
 * notebook proxy then connects to).  A job that cannot be a pod (inputs
 * too large, a namespace where cnlabd may not make pods) fails, saying
 * why.
 *
 * Pods of other schedulers are left alone.  Threads: one watches the
 * pods (list, then watch with bookmarks; relist on 410 Gone), one does
 * the rest; each has its own API client.
 */
#ifndef CNL_SERVER_KUBE_SCHED_H
#define CNL_SERVER_KUBE_SCHED_H

#include <stddef.h>

#include "net/kube.h"
#include "store/store.h"

struct cnl_api;

struct cnl_kube_sched_config {
	const char *api_url;    /* cnlabd's own listener */
	const char *api_cafile; /* for an https listener; NULL: system's */
	const char *api_token;  /* the service user "kube"'s */
	struct cnl_api *api;    /* mints the nodes' credentials */
	struct cnl_kube_config kube;
	long resync_ms; /* nodes and slices listed again; 0: 10 s */
	/* The image of a `cnlab run` job that names none (an OCI reference
	 * the kubelet pulls); NULL: CNL_KUBE_DEFAULT_IMAGE. */
	const char *default_image;
	/* The registry (host[/path]) CNLab's images are pushed to: a run
	 * job's --image NAME becomes REGISTRY/NAME@DIGEST; NULL: NAME as it
	 * is. */
	const char *image_registry;
	/* cnlabd's signing secret (CNLAB_JWT_SECRET; NULL: none): the key
	 * of the proof a run job's pod carries that cnlabd made it, which
	 * a cnlabd restarted (or another replica) checks before it takes
	 * the pod for the job's. */
	const void *secret;
	size_t secret_len;
	/* How long a run job's pod may be unable to start (an image that
	 * cannot be pulled...) before its job fails; 0: 5 min. */
	long start_timeout_ms;
	/* The collector of run pods' artifacts (cnlab-agent collect, a
	 * native sidecar): the image holding cnlab-agent, cnlabd's URL as
	 * pods reach it, and the CA file of that URL's certificate (NULL:
	 * the system's); no image or URL: no collector, no artifacts. */
	const char *collect_image, *collect_url, *collect_cafile;
	long watch_timeout_s; /* one pod watch's length; 0: 60 (a stop
	                       * waits for the watch to end) */
	/* Pods in user namespaces of their own (cnl_kube_pod_own_users). */
	bool user_namespaces;
};

#define CNL_KUBE_DEFAULT_IMAGE "docker.io/library/python:3.12-slim"

struct cnl_kube_sched;

/*
 * cnl_kube_sched_user - before the API starts: the service user "kube"
 * (made when missing; it has no password, so nobody logs in as it) and a
 * new API token for it (the one of an earlier start dies), into
 * @ret_token (CNL_AUTH_TOKEN_MAX bytes).  0 or an error with @err.
 */
int cnl_kube_sched_user(struct cnl_store *s, char *ret_token, char *err,
                        size_t errlen);

int cnl_kube_sched_start(const struct cnl_kube_sched_config *cfg,
                         struct cnl_kube_sched **ret, char *err, size_t errlen);
/* Stops and frees (its threads end within a watch's read). */
void cnl_kube_sched_stop(struct cnl_kube_sched *ks);

#endif /* CNL_SERVER_KUBE_SCHED_H */
