/*
 * kube_map.h - what cnlabd's Kubernetes scheduler (kube_sched.h) makes of
 * the API server's objects, and what it writes back; pure (no I/O).
 *
 * A pod with spec.schedulerName "cnlab" becomes one CNLab job:
 *   project    the namespace's label cnlab.io/project, else the namespace's
 *              own name (the project must let the service user "kube"
 *              submit: `cnlab project member add PROJECT kube`);
 *   shape      from its one ResourceClaim of device class gpu.cnlab.io:
 *              capacity.requests.blocks N -> TYPE-N (1% blocks), a selector
 *              on the attribute "profile" -> TYPE-PROFILE (MIG), else
 *              count K -> TYPE-full / TYPExK (whole GPUs); TYPE from a
 *              selector on the attribute "type" or the pod's annotation
 *              cnlab.io/gpu-type, else "any".  No claim: "cpu".  The
 *              annotation cnlab.io/gpu-types (h100,a100) narrows it to
 *              those types (the job's "gpu_types").
 *   priority   the annotation cnlab.io/priority (low, normal, high,
 *              critical), else spec.priority (its PriorityClass's
 *              value): below 0 low, below 1,000 normal, below 1,000,000
 *              high, else critical;
 *   deadline   the annotation cnlab.io/deadline (RFC 3339), and
 *              cnlab.io/runtime-seconds, cnlab.io/preemptible ("false"),
 *              cnlab.io/dataset;
 *   CPU, memory the sum of its containers' requests.
 * The selectors understood are CEL equalities of one attribute of our
 * driver, `device.attributes["gpu.cnlab.io"].NAME == "VALUE"`, and the
 * class's own `device.driver == "gpu.cnlab.io"`; any other is refused by
 * name (CNLab places by its own allocator, not by evaluating CEL).
 */
#ifndef CNL_SERVER_KUBE_MAP_H
#define CNL_SERVER_KUBE_MAP_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "wire/node.h"

#define CNL_KUBE_DRIVER    "gpu.cnlab.io"
#define CNL_KUBE_SCHEDULER "cnlab"

/* What a pod asks of CNLab. */
struct cnl_kube_ask {
	char shape[160];            /* cnlabd refuses one over CNL_SHAPE_MAX */
	const char *priority;       /* "low", "normal", "high", "critical" */
	char deadline[64];          /* RFC 3339, "" none */
	int64_t runtime_s;          /* 0: none */
	int preemptible;            /* 1 unless the pod says "false" */
	int64_t cpu_milli, mem_mib; /* 0: not requested */
	char request[64];           /* the claim's request name, "" no claim */
	char dataset[64];           /* "" none */
	char gpu_types[520];        /* "h100,a100" (cnlab.io/gpu-types); "" */
};

/*
 * cnl_kube_pod_claim - the name of @pod's ResourceClaim into @ret ("" when
 * it has none): a claim named by resourceClaimName, or the one made from
 * its template, as pod.status.resourceClaimStatuses says.  0; -EAGAIN
 * when the claim from a template is not made yet; -EINVAL (with @err)
 * for more than one claim, which CNLab does not place.
 */
int cnl_kube_pod_claim(const json_t *pod, char *ret, size_t len, char *err,
                       size_t errlen);

/*
 * cnl_kube_ask_of - what @pod asks, with its claim @claim (NULL: none).
 * 0, or -EINVAL with @err naming the field that CNLab cannot read.
 */
int cnl_kube_ask_of(const json_t *pod, const json_t *claim,
                    struct cnl_kube_ask *ret, char *err, size_t errlen);

/* cnl_kube_project_of - the project of namespace object @ns. */
const char *cnl_kube_project_of(const json_t *ns);

/*
 * cnl_kube_register_of - the CNLab node of Kubernetes node @node from its
 * ResourceSlices @slices (an array, ours only): its GPUs (the devices
 * gpu-N), their type (one per node), and the node's allocatable CPU and
 * memory.  0; -ENOENT for a node without GPUs of ours; -EINVAL with @err.
 */
int cnl_kube_register_of(const json_t *node, const json_t *slices,
                         struct cnl_wire_register *ret, char *err,
                         size_t errlen);

/*
 * cnl_kube_allocation - the claim status that gives @pod (name, uid) the
 * slice @s on @node: results for request @request (a device gpu-N with
 * consumedCapacity blocks and a shareID per GPU, or the MIG partition
 * gpu-N-mig-PROFILE-START), the node selector, reservedFor the pod.
 * @share: a fresh UUID per result is drawn from it (16 random bytes per
 * GPU).  New reference.
 */
json_t *cnl_kube_allocation(const struct cnl_wire_slice *s, const char *node,
                            const char *request, const char *pod_name,
                            const char *pod_uid,
                            const unsigned char share[][16]);

/*
 * cnl_kube_node_fits - whether @pod may go to @node as kube-scheduler
 * would let it: its nodeSelector, its required node affinity (In, NotIn,
 * Exists, DoesNotExist, Gt, Lt; matchFields on metadata.name), and the
 * node's NoSchedule and NoExecute taints (a cordoned node's
 * node.kubernetes.io/unschedulable among them) against its tolerations.
 * False with @why naming what does not hold.
 */
bool cnl_kube_node_fits(const json_t *pod, const json_t *node, char *why,
                        size_t len);

/*
 * cnl_kube_pod_affinity_fits - whether @pod may go to node @node_name as
 * kube-scheduler's required inter-pod rules let it, among the pods already
 * on nodes, @placed ([[pod, node name] ...]) with the nodes by name
 * @knodes (their labels give each topologyKey's domain):
 *   - each term of its required podAffinity has a pod it selects in the
 *     node's domain (or, for the first of a group, none anywhere, the pod
 *     selecting itself);
 *   - no term of its required podAntiAffinity selects a pod in the node's
 *     domain (a node without the topologyKey's label has no domain);
 *   - no pod placed in the node's domain has a required podAntiAffinity
 *     term that selects this pod.
 * A term's pods are those of its namespaces (none given: the pod's own),
 * or of every namespace with an empty namespaceSelector; a term naming
 * namespaces by labels, or without a topologyKey, is not read, and the
 * pod goes nowhere (said).  Preferred terms are not read (topology
 * spread: cnl_kube_spread_new).  False with @why naming what does not hold.
 * cnl_kube_pod_has_affinity - whether @pod has required inter-pod terms.
 */
bool cnl_kube_pod_affinity_fits(const json_t *pod, const char *node_name,
                                const json_t *knodes, const json_t *placed,
                                char *why, size_t len);
bool cnl_kube_pod_has_affinity(const json_t *pod, bool anti_only);

/*
 * Topology spread: @pod's hard topologySpreadConstraints (whenUnsatisfiable
 * DoNotSchedule) as kube-scheduler's PodTopologySpread filter reads them.
 * cnl_kube_spread_new counts, for each constraint, the pods it selects
 * (labelSelector, and matchLabelKeys: the pod's own values of those keys;
 * a selector with no requirement counts none, as kube-scheduler's)
 * among @placed ([[pod, node name] ...]: this namespace's, not ended nor
 * terminating, the pod itself not counted) per domain of its topologyKey,
 * over the nodes of @knodes (by name) that have every constraint's key and
 * that its nodeAffinityPolicy (Honor by default: the pod's nodeSelector
 * and required node affinity) and nodeTaintsPolicy (Ignore by default)
 * let count; NULL when the pod has no hard constraint.  @pod and @knodes
 * must outlive it.  cnl_kube_spread_fits: whether node @node_name keeps
 * every constraint's skew (the matching pods in its domain, plus the pod
 * when it matches itself, less the fewest in any domain, 0 below
 * minDomains domains) within maxSkew; a node without a constraint's key
 * never does.  False with @why naming the constraint.  With @soft, the
 * ScheduleAnyway constraints instead, for cnl_kube_pref_of (a node lacking
 * a key is then only the least preferred).
 * cnl_kube_pod_has_spread - whether @pod has hard constraints.
 */
struct cnl_kube_spread;
struct cnl_kube_spread *cnl_kube_spread_new(const json_t *pod,
                                            const json_t *knodes,
                                            const json_t *placed, bool soft);
bool cnl_kube_spread_fits(const struct cnl_kube_spread *sp,
                          const char *node_name, char *why, size_t len);
void cnl_kube_spread_free(struct cnl_kube_spread *sp);
bool cnl_kube_pod_has_spread(const json_t *pod);

/*
 * Preferences: what kube-scheduler's default scoring plugins read of a
 * pod, which CNLab honours by placing the pod on the best nodes first
 * (the job's "prefer"); among those, and when none of them has room,
 * CNLab's own placement decides.
 * cnl_kube_pref_of - @pod's raw scores for node @node_name of @knodes:
 *   node_affinity  the weights of its preferred node affinity terms that
 *                  hold (NodeAffinity);
 *   taints         the node's PreferNoSchedule taints it does not
 *                  tolerate (TaintToleration);
 *   spread         its ScheduleAnyway constraints (@soft, from
 *                  cnl_kube_spread_new(..., true); NULL: none): the
 *                  matching pods in the node's domains, each constraint
 *                  weighted by log(its domains + 2); -1 when the node
 *                  lacks a key (PodTopologySpread);
 *   pods           the weights of its preferred podAffinity (+) and
 *                  podAntiAffinity (-) terms, and of the placed pods'
 *                  preferred terms that select it, once per pod of
 *                  @placed in the node's domain (InterPodAffinity).
 * cnl_kube_pref_best - of @n nodes' scores @p, which are the best
 * (@best[i]), each plugin scaled to 0..100 and weighed as kube-scheduler's
 * default profile does (node affinity 2, taints 3, spread 2, pods 2);
 * returns how many: @n when they are all alike.
 * cnl_kube_pod_prefers_pods - whether @pod has preferences that read the
 * placed pods (preferred inter-pod terms, ScheduleAnyway spread).
 */
struct cnl_kube_pref {
	int64_t node_affinity, taints, pods;
	double spread;
};
void cnl_kube_pref_of(const json_t *pod, const json_t *knodes,
                      const char *node_name, const json_t *placed,
                      const struct cnl_kube_spread *soft,
                      struct cnl_kube_pref *ret);
size_t cnl_kube_pref_best(const struct cnl_kube_pref *p, size_t n, bool *best);
bool cnl_kube_pod_prefers_pods(const json_t *pod);

/*
 * cnl_kube_pod_requests - the CPU (millicores) and memory (MiB) @pod
 * holds on its node as the kubelet counts it: its containers and sidecars
 * together or its largest init step, whichever is more, plus its
 * overhead.  0; -EINVAL when a request is not a quantity.
 */
int cnl_kube_pod_requests(const json_t *pod, int64_t *cpu_milli,
                          int64_t *mem_mib);

/* A Kubernetes quantity ("500m", "2", "1Gi", "1e3") in CPU millis or in
 * MiB, rounded up; -1 when it is not one. */
int64_t cnl_kube_cpu_milli(const char *q);
int64_t cnl_kube_mem_mib(const char *q);

#endif /* CNL_SERVER_KUBE_MAP_H */
