/*
 * kube_ops.h - the operator of the TrainingJob custom resource
 * (cnlab.io/v1alpha1), run by cnlabd's Kubernetes scheduler
 * (kube_sched.h).
 *
 * A TrainingJob becomes a pod of the scheduler cnlab, owned by it (its
 * deletion deletes them): its ResourceClaim NAME-gpu made from spec.gpu
 * (N blocks, a MIG profile, whole GPUs; the type family goes to the pod's
 * annotation cnlab.io/gpu-type), the container running `sh -c COMMAND` in
 * spec.image with /workspace an emptyDir, the CPU and memory asked, and the
 * spec's priority, deadline, run time, pre-emptibility and dataset as the
 * pod's cnlab.io annotations (kube_map.h).  The pod then goes the way of
 * every pod of ours, and what happens to it is written back into the
 * TrainingJob's status: phase Pending (with its CNLab jobID), Running
 * (node), Succeeded or Failed (exitCode), Cancelled; the conditions
 * Scheduled and Complete.
 *
 * spec.profile gives the shape of that CNLab profile (@profile_shape, which
 * the caller looked up), spec.gpuTypes the pod's annotation
 * cnlab.io/gpu-types.  Refused, with phase Failed and the reason in the
 * status: a spec.project other than the namespace's project (a namespace's
 * project is its administrators' choice, not a tenant's), gangs (nodes >
 * 1).
 */
#ifndef CNL_SERVER_KUBE_OPS_H
#define CNL_SERVER_KUBE_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define CNL_KUBE_TJ_API  "cnlab.io/v1alpha1"
#define CNL_KUBE_TJ_PATH "/apis/cnlab.io/v1alpha1/trainingjobs"

/*
 * cnl_kube_tj_children - the ResourceClaim (*@ret_claim, NULL for a cpu
 * job) and the Pod (*@ret_pod) of TrainingJob @tj whose namespace's
 * project is @project.  0, or -EINVAL with the reason in @err.
 */
int cnl_kube_tj_children(const json_t *tj, const char *project,
                         const char *profile_shape, json_t **ret_claim,
                         json_t **ret_pod, char *err, size_t errlen);

/*
 * cnl_kube_tj_status - the TrainingJob status for its pod's news: @phase
 * ("Pending", "Running", "Succeeded", "Failed", "Cancelled"), the CNLab
 * job @job ("" none yet), @node ("" none), @exit_code (< -255: none),
 * @message.  A merge patch's body.  New reference.
 */
json_t *cnl_kube_tj_status(const char *phase, const char *job, const char *node,
                           int exit_code, const char *message,
                           long long generation);

/* cnl_kube_tj_owner - the name of the TrainingJob that owns @pod, or
 * NULL.  cnl_kube_cr_owner - of the TrainingJob or NotebookServer, its
 * kind into *@ret_kind. */
const char *cnl_kube_tj_owner(const json_t *pod);
const char *cnl_kube_cr_owner(const json_t *pod, const char **ret_kind);
/* cnl_kube_cr_controls - whether custom resource @cr is @pod's
 * controller: an owner reference with its uid and controller true. */
bool cnl_kube_cr_controls(const json_t *cr, const json_t *pod);

/*
 * NotebookServers: the server becomes a pod of the scheduler cnlab
 * running spec.image as it is (it serves on port 8888), not pre-emptible,
 * its GPU the shape of the CNLab profile spec.profile names (@shape, which
 * the caller looked up), /workspace the PersistentVolumeClaim
 * NAME-workspace of spec.storageGB (10 by default) that outlives the pod
 * but not the server, and a Service NAME on port 8888; all owned by it.
 * cnl_kube_nb_children - those four objects (the claim NULL for "cpu").
 * cnl_kube_nb_status - its status: phase Pending, Running, Stopped or
 * Failed, serverID (the CNLab job that holds its slice), node, url (the
 * Service's address while Running), condition Ready.
 */
int cnl_kube_nb_children(const json_t *nb, const char *project,
                         const char *shape, json_t **ret_claim,
                         json_t **ret_pod, json_t **ret_service,
                         json_t **ret_pvc, char *err, size_t errlen);
json_t *cnl_kube_nb_status(const char *phase, const char *job, const char *node,
                           const char *url, const char *message,
                           long long generation);
/*
 * `cnlab run` jobs that CNLab placed on a Kubernetes node run as pods of
 * the job's project's namespace (kube_sched.h), made here:
 *
 * cnl_kube_run_name - the pod's name: "cnlab-" and the job's id in lower
 * case with '-' for '_', then "-EPOCH" (each run of a pre-empted job is a
 * new pod, whatever the last one's deletion still takes).
 *
 * cnl_kube_run_pod - the pod: scheduler cnlab, labels cnlab.io/job and
 * cnlab.io/epoch, container "job" running `sh -c COMMAND` in @r->image,
 * its working folder /workspace an emptyDir, the CPU asked and the memory
 * asked as request and limit (0: one CPU, 4 GiB), and the claim NAME-gpu
 * unless the shape is "cpu".  0, or -EINVAL for a shape it cannot read.
 *
 * With inputs (r->inputs, paths already checked, and r->input_sums, the
 * SHA-256 of each in hex), an init container "inputs" of the same image
 * and resources copies each from the ConfigMaps NAME-inputs,
 * NAME-inputs-1, ... (r->n_input_maps of them; key "inN" for the N-th
 * input, in any of them) to /workspace/PATH, checks the copy's SHA-256
 * against the one in its arguments and makes it read-only; a copy whose
 * bytes differ fails the pod (its message says which input), so a
 * ConfigMap swapped or planted by whoever may write ConfigMaps in the
 * namespace never reaches the job.  The job's container does not mount
 * the ConfigMaps: what it reads was checked.  The pod spec (the
 * arguments) cannot be changed after it is made; its images can, which
 * cnlabd looks for (kube_sched.c).
 *
 * With secrets, the pod mounts the Secret NAME-secrets read-only at
 * /run/secrets (CNLAB_SECRETS_DIR, each file 0400) and takes the variables
 * asked for from it (secretKeyRef), as a node's container would.
 *
 * With a collector (r->collect_image), the job's container has
 * CNLAB_ARTIFACTS_DIR=/workspace/artifacts, and a native sidecar (an init
 * container "collect" with restartPolicy Always, after "inputs") of that
 * image runs `cnlab-agent collect`: the emptyDir "artifacts", which the
 * job's container has at /workspace/artifacts (there when it starts, as
 * on an agent's node), read-only and nothing else of the pod's, the Secret
 * NAME-collect (its token and CA, which the job's container does not
 * mount) at /run/cnlab/collect, and the pod's own ServiceAccount token
 * for cnlabd (a projected token of audience CNL_KUBE_COLLECT_AUDIENCE,
 * bound by the kubelet to the pod's uid) at /run/cnlab/pod/token, which
 * cnlabd reviews so that the Secret's token is good in this pod alone,
 * every capability dropped but DAC_OVERRIDE
 * (to read what a job running as another user left 0600; Pod Security's
 * baseline allows it), no privilege escalation, a
 * read-only root, and no resources of its own (the pod asks what the job
 * asked).  The kubelet stops it once the job's container has ended, and
 * it then uploads the artifacts (collect.c); the pod's grace period is 5
 * minutes, CNLab's, for that upload as for a job's stop.
 * cnl_kube_run_collect_secret - that Secret, immutable, owned by the pod:
 * "token" (cnl_auth_collect_token's) and, when given, "ca.crt" (@ca, PEM).
 *
 * cnl_kube_run_claim - that claim (NULL for "cpu"), owned by the pod of
 * uid @pod_uid; cnl_kube_run_inputs - the @map-th ConfigMap of the inputs
 * (cnl_kube_run_inputs_name()), immutable, its binaryData @data (stolen:
 * {"inN": base64}), owned by the pod too.  So the pod's deletion takes
 * them all.
 *
 * Every run pod has CNLAB_RANK and CNLAB_WORLD_SIZE (0 and 1 alone), as a
 * node's job does.  A gang's member also has CNLAB_GANG_ID (the leader's
 * job id), CNLAB_GANG_NODES (the members' nodes by rank) and
 * CNLAB_GANG_HOSTS (by rank, the DNS name of each member's headless
 * Service, cnl_kube_gang_host(): pods share no host network here), and
 * the labels cnlab.io/gang and cnlab.io/rank its Service selects.
 * cnl_kube_run_gang_service - that Service for the member @r is: headless,
 * publishing the pod before it is ready (a rendezvous does not wait for
 * readiness), owned by the pod of uid @pod_uid.
 */
#define CNL_KUBE_RUN_PATH_MAX 512
/* The audience of a run pod's token for its collector: cnlabd's alone (the
 * API server refuses it, and cnlabd refuses the API server's). */
#define CNL_KUBE_COLLECT_AUDIENCE "cnlab-collect"
/* The user and group a run pod's containers run as (never root: Pod
 * Security "restricted"), with HOME /workspace, as an agent's tenant. */
#define CNL_KUBE_TENANT_ID 1000

struct cnl_kube_run {
	const char *job, *project, *shape, *image, *command;
	/* Its submitter's name (a server's owner): a server's account in
	 * its /etc/passwd; NULL or not a label: "tenant". */
	const char *user;
	int64_t epoch, cpu_milli, mem_mib;
	const char *const *inputs;
	const char *const *input_sums;
	size_t n_inputs, n_input_maps;
	/* Its secrets (names checked by cnlabd): each a file of
	 * /run/secrets from the Secret NAME-secrets, and @env[i], when not
	 * NULL, the variable that holds secrets[i] too. */
	const char *const *secrets;
	const char *const *env;
	size_t n_secrets;
	/* A gang's member (gang_size > 1): the leader's job id, this one's
	 * rank, the members' nodes by rank, its namespace. */
	const char *gang_id, *ns;
	int gang_rank, gang_size;
	const char *const *gang_nodes;
	/* Its collector of artifacts (NULL: none): the image holding
	 * cnlab-agent, and cnlabd's URL as pods reach it. */
	const char *collect_image, *collect_url;
	/* A notebook server (`cnlab server create`; @job its id): its
	 * workspace's size (GB; 0: 10) and idle timeout (s; 0: never), and
	 * the image holding cnlab-notebook.py (the agent's; NULL: none). */
	bool server;
	int64_t storage_gb, idle_timeout_s;
	const char *notebook_image;
	/* Its pod in a user namespace of its own (cnl_kube_pod_own_users). */
	bool user_namespaces;
};

/*
 * cnl_kube_pod_own_users - @pod (a Pod) in a user namespace of its own
 * (spec.hostUsers false): its uid 1000 is, on the node, an unprivileged
 * id of a range the kubelet gives that pod alone, so two tenants' pods
 * on one node share no host uid (as an agent's containers, each user's
 * range its own).  Needs a node whose kernel and runtime support it
 * (Kubernetes 1.33+ has it on by default: Linux 6.3+, containerd 2.0+
 * or CRI-O, runc 1.2+ or crun 1.9+); cnlabd's kube_user_namespaces
 * false turns it off for clusters that lack it.
 */
void cnl_kube_pod_own_users(json_t *pod);

/* "cnlab-GANG-RANK", GANG the leader's id as in a pod's name. */
void cnl_kube_gang_service_name(const char *gang, int rank, char *buf,
                                size_t len);
/* Its DNS name in namespace @ns, as pods of the cluster resolve it. */
void cnl_kube_gang_host(const char *gang, int rank, const char *ns, char *buf,
                        size_t len);
json_t *cnl_kube_run_gang_service(const struct cnl_kube_run *r,
                                  const char *pod_uid);
/* Whether @svc is a gang Service as cnl_kube_run_gang_service() makes
 * them for member @r (headless, its selector exactly the member's): one
 * left by an earlier pod of the member, to be replaced. */
bool cnl_kube_gang_service_like(const json_t *svc,
                                const struct cnl_kube_run *r);

void cnl_kube_run_name(const char *job, int64_t epoch, char *buf, size_t len);
int cnl_kube_run_pod(const struct cnl_kube_run *r, json_t **ret_pod, char *err,
                     size_t errlen);
json_t *cnl_kube_run_claim(const struct cnl_kube_run *r, const char *pod_uid);
json_t *cnl_kube_run_inputs(const struct cnl_kube_run *r, const char *pod_uid,
                            size_t map, json_t *data);
/* "NAME-inputs" for the first, "NAME-inputs-MAP" for the others. */
void cnl_kube_run_inputs_name(const struct cnl_kube_run *r, size_t map,
                              char *buf, size_t len);
/* cnl_kube_pem_certs - the CERTIFICATE blocks of PEM text @pem alone
 * (malloc'd; NULL when it has none): the collector's CA goes into every
 * run pod's namespace, and must not carry the key a combined
 * certificate-and-key file holds. */
char *cnl_kube_pem_certs(const char *pem);
json_t *cnl_kube_run_collect_secret(const struct cnl_kube_run *r,
                                    const char *pod_uid, const char *token,
                                    const char *ca);
/*
 * A notebook server placed on a Kubernetes node (r->server) is a run pod
 * too, with these differences: its container "server" runs JupyterLab
 * where the image has it, else cnlab-notebook.py (an init container
 * "notebook" of r->notebook_image copies it into an emptyDir the server
 * mounts read-only at /opt/cnlab), listening on the pod's address, port
 * CNL_KUBE_SERVER_PORT, with the environment an agent gives a server
 * (CNLAB_PORT, CNLAB_BASE_URL /s/ID/, CNLAB_WORKSPACE, CNLAB_NOTEBOOK,
 * CNLAB_ADDRESS 0.0.0.0, and CNLAB_SERVER_TOKEN from the Secret
 * NAME-server, cnl_kube_run_server_secret: immutable, owned by the pod,
 * which also holds the /etc/passwd and /etc/group the container mounts,
 * naming r->user as uid CNL_KUBE_TENANT_ID, home /workspace);
 * its /workspace is the PersistentVolumeClaim cnl_kube_server_pvc() of
 * r->storage_gb (labelled cnlab.io/server, owned by nothing: it outlives
 * each pod, as a server's workspace does on an agent's node); its idle
 * timeout is its Jupyter's configuration, as a NotebookServer's; it has
 * no collector (a server has no artifacts); the pod is labelled
 * cnlab.io/server.
 */
#define CNL_KUBE_SERVER_PORT 8888
json_t *cnl_kube_run_server_secret(const struct cnl_kube_run *r,
                                   const char *pod_uid, const char *token);
/* "cnlab-ID-workspace" */
void cnl_kube_server_pvc_name(const char *server, char *buf, size_t len);
json_t *cnl_kube_server_pvc(const struct cnl_kube_run *r);

/* cnl_kube_run_secret - the Secret NAME-secrets of the run's secrets, its
 * data @data (stolen: {"NAME": base64}), immutable, owned by the pod. */
json_t *cnl_kube_run_secret(const struct cnl_kube_run *r, const char *pod_uid,
                            json_t *data);

#define CNL_KUBE_NB_PATH "/apis/cnlab.io/v1alpha1/notebookservers"

#endif /* CNL_SERVER_KUBE_OPS_H */
