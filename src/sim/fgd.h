/*
 * fgd.h - the FGD experiment protocol (Weng et al., USENIX ATC'23) over the
 * Alibaba openb trace, run with any placement policy of the scheduler's
 * registry.
 *
 * The protocol, as the paper's simulator runs it:
 *
 *   1. The pod list, in name order, is shuffled with the seed.  If its GPU
 *      request is below `tune` x the cluster's GPU capacity, pods drawn at
 *      random (with replacement, CPU-only pods included) are appended
 *      until it is reached; if above, random pods are dropped until it is
 *      not.  ("GPU request" is the total: GPUs x share.)
 *   2. The typical task mix is built from the original pod list (CPU-only
 *      pods included): a task type is (CPU, GPU share, GPU count, allowed
 *      GPU types), memory aside; types are taken by popularity until they
 *      cover 95% of the pods, and weighted by their counts.
 *   3. Pods arrive one at a time and never leave.  Each is placed on the
 *      best node by the policy; equal scores go to a node priority order
 *      drawn with the seed.  A pod that fits nowhere fails and is not
 *      retried.  CPU and memory must fit; only CPU counts in scores.
 *   4. After every arrival: arrived GPU demand (all attempted pods) and
 *      allocated GPUs, as % of GPU capacity; at 90% arrived, the cluster's
 *      fragmentation (the mix's unusable free GPU capacity) as % of
 *      capacity.
 *
 * Everything is deterministic for a given trace, policy and seed.
 */
#ifndef CNL_SIM_FGD_H
#define CNL_SIM_FGD_H

#include <stddef.h>
#include <stdint.h>

#include "sched/sched.h"
#include "sim/trace.h"

#define CNL_FGD_CURVE_MAX 200 /* arrived % points recorded: 0..199 */

/* A cluster and a pod list, loaded once and run many times. */
struct cnl_fgd_world {
	struct cnl_catalog cat;
	struct cnl_node_spec *nodes;
	char (*names)[64];
	size_t n_nodes;
	int64_t gpus; /* GPU capacity */
	struct cnl_trace_pod *pods;
	size_t n_pods;
	struct cnl_task_mix mix; /* the typical tasks */
	double mix_coverage;     /* share of pods the mix covers */
};

/*
 * cnl_fgd_world_load - read `nodes_csv` and `pods_csv` (trace loader
 * errors, with file, line and column, come back in `err`) and derive the
 * typical task mix.  -CNL_EPARSE also for a pod list with no pods or a
 * node list with no GPU.
 */
int cnl_fgd_world_load(struct cnl_fgd_world *w, const char *nodes_csv,
                       const char *pods_csv, char *err, size_t errlen);
void cnl_fgd_world_done(struct cnl_fgd_world *w);

struct cnl_fgd_result {
	char policy[CNL_NAME_MAX];
	uint64_t seed;
	double tune;
	size_t arrived, placed, failed; /* pods */
	double arrived_pct;             /* at the end */
	double alloc_pct;               /* allocated GPUs at the end, % */
	double frag_pct_90;             /* fragmentation at 90% arrived, % */
	double alloc_pct_90;
	/* curve[p]: allocated % when arrived first reached p %; -1 if not.
	 * frag_curve[p]: the cluster's fragmentation then, % of capacity. */
	double curve[CNL_FGD_CURVE_MAX];
	double frag_curve[CNL_FGD_CURVE_MAX];
	double seconds; /* filled in by callers that time runs */
};

/*
 * cnl_fgd_run - one run of the protocol with `policy` (a registry name)
 * and `seed`, `tune` x capacity of GPU demand.  -CNL_ECONFIG for an
 * unknown policy or a tune outside (0, 10].
 */
int cnl_fgd_run(const struct cnl_fgd_world *w, const char *policy,
                uint64_t seed, double tune, struct cnl_fgd_result *ret);

/*
 * cnl_fgd_config_default - the scheduler configuration the protocol runs
 * policies with: the production defaults, except that the cnlab policy
 * uses the weights tuned on this trace with this simulator — placement by
 * the exact growth of fragmentation (w_frag 1 per block, no packing term)
 * plus a soft node order drawn with the seed (w_order 300 blocks; 0.3 of
 * that for multi-GPU pods), under which near-equal placements fill the
 * same nodes and the rest stay whole.
 * Production keeps packing-first weights, which favour powering nodes
 * down; `cnlab-sim fgd --set` overrides these.
 */
void cnl_fgd_config_default(struct cnl_sched_config *cfg);

/* cnl_fgd_run_cfg - the same with the scheduler configuration `cfg`
 * (weights); its policy and mix are set by the run. */
int cnl_fgd_run_cfg(const struct cnl_fgd_world *w, const char *policy,
                    uint64_t seed, double tune,
                    const struct cnl_sched_config *cfg,
                    struct cnl_fgd_result *ret);

#endif /* CNL_SIM_FGD_H */
