/*
 * fgd-internal.h - what the placement baselines of the FGD paper (Weng et
 * al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
 * Fragmentation Gradient Descent", USENIX ATC'23) share: the paper's
 * simulator's normalisers and the request and node in its units.  Written
 * from the paper's and its simulator's definitions, as scheduler policies:
 *
 *   random         a feasible node and a fitting GPU at random (random.c)
 *   dotprod        the smallest dot product of the request and the node's
 *                  free (CPU, GPU) vector: the fullest aligned node
 *                  (dotprod.c)
 *   gpuclustering  keeps sharing and whole-GPU work on separate nodes
 *                  (gpuclustering.c)
 *   gpupacking     partly used GPUs first, then free GPUs on used nodes,
 *                  then free nodes (gpupacking.c)
 *   bestfit        the least CPU and GPU left after placement (bestfit.c)
 *   fgd            the smallest growth of the node's fragmentation
 *                  (expected GPU capacity the typical tasks cannot use),
 *                  through a sigmoid; it also picks the GPU (fgd.c)
 *
 * Each returns the simulator's integer node score (0..100, higher wins)
 * negated, since our scores are lower-is-better; the integer truncation is
 * kept on purpose because it decides how often nodes tie, and ties go to a
 * node priority order in the caller.  Normalisers are the simulator's
 * constants: 128 cores of CPU and 8 GPUs per node.  GPU shares are in
 * blocks here (1% of a GPU = 10 milli).
 *
 * The helpers are static inline: each baseline file is then a leaf that
 * shares no symbol with the others.
 */
#ifndef CNL_SCHED_POLICY_FGD_INTERNAL_H
#define CNL_SCHED_POLICY_FGD_INTERNAL_H

#include "sched/policy/policy-internal.h"

#define FGD_MAX_CPU 128000.0 /* milli-cores */
#define FGD_MAX_GPU 8000.0   /* milli-GPUs */
#define FGD_MILLI   10       /* per block */

/* The node's free GPU capacity in milli-GPUs. */
static inline int64_t fgd_gpu_left_milli(const struct cnl_cluster *c,
                                         uint32_t node)
{
	const struct cnl_node *n = &c->nodes[node];
	int64_t left = 0;

	for (int g = 0; g < n->n_gpus; g++)
		left += cnl_gpu_free_blocks(c, node, g);
	return left * FGD_MILLI;
}

/* The job's GPU request in milli-GPUs (MIG and CPU-only: 0). */
static inline int64_t fgd_req_milli(const struct cnl_job *j)
{
	switch (j->req.kind) {
	case CNL_REQ_BLOCKS:
		return (int64_t)j->req.blocks * FGD_MILLI;
	case CNL_REQ_WHOLE:
		return (int64_t)j->req.gpus * 1000;
	default:
		return 0;
	}
}

#endif /* CNL_SCHED_POLICY_FGD_INTERNAL_H */
