/*
 * policy_fgd.c - the placement baselines of the FGD paper (Weng et al.,
 * "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
 * Fragmentation Gradient Descent", USENIX ATC'23), written from the
 * paper's and its simulator's definitions, as scheduler policies.
 *
 * Each returns the simulator's integer node score (0..100, higher wins)
 * negated, since our scores are lower-is-better; the integer truncation is
 * kept on purpose because it decides how often nodes tie, and ties go to a
 * node priority order in the caller.  Normalisers are the simulator's
 * constants: 128 cores of CPU and 8 GPUs per node.  GPU shares are in
 * blocks here (1% of a GPU = 10 milli).
 *
 *   random         a feasible node and a fitting GPU at random
 *   dotprod        the smallest dot product of the request and the node's
 *                  free (CPU, GPU) vector: the fullest aligned node
 *   gpuclustering  keeps sharing and whole-GPU work on separate nodes
 *   gpupacking     partly used GPUs first, then free GPUs on used nodes,
 *                  then free nodes
 *   bestfit        the least CPU and GPU left after placement
 *   fgd            the smallest growth of the node's fragmentation
 *                  (expected GPU capacity the typical tasks cannot use),
 *                  through a sigmoid; it also picks the GPU.
 */
#include <math.h>

#include "sched/sched-internal.h"

#define MAX_CPU 128000.0 /* milli-cores */
#define MAX_GPU 8000.0   /* milli-GPUs */
#define MILLI   10       /* per block */

static int64_t gpu_left_milli(const struct cnl_cluster *c, uint32_t node)
{
	const struct cnl_node *n = &c->nodes[node];
	int64_t left = 0;

	for (int g = 0; g < n->n_gpus; g++)
		left += cnl_gpu_free_blocks(c, node, g);
	return left * MILLI;
}

static int64_t req_milli(const struct cnl_job *j)
{
	switch (j->req.kind) {
	case CNL_REQ_BLOCKS:
		return (int64_t)j->req.blocks * MILLI;
	case CNL_REQ_WHOLE:
		return (int64_t)j->req.gpus * 1000;
	default:
		return 0;
	}
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* A uniform choice among feasible nodes: independent random scores. */
static double random_score(const struct cnl_sched_view *v,
                           const struct cnl_job *j, const struct cnl_plan *plan)
{
	uint64_t h = mix64(v->seed ^ mix64(j->id) ^ mix64(plan->node + 1));
	return (double)(h >> 11) / 9007199254740992.0;
}

static double dotprod_score(const struct cnl_sched_view *v,
                            const struct cnl_job *j,
                            const struct cnl_plan *plan)
{
	const struct cnl_node *n = &v->c->nodes[plan->node];
	double cpu_left = (double)(n->cpu_total - n->cpu_used) / MAX_CPU;
	double gpu_left = (double)gpu_left_milli(v->c, plan->node) / MAX_GPU;
	double dot = cpu_left * (double)j->req.cpu_milli / MAX_CPU +
	             gpu_left * (double)req_milli(j) / MAX_GPU;

	return -(double)(int)(100.0 * (1.0 - dot / 2.0));
}

static double gpuclustering_score(const struct cnl_sched_view *v,
                                  const struct cnl_job *j,
                                  const struct cnl_plan *plan)
{
	const struct cnl_node *n = &v->c->nodes[plan->node];
	int64_t base = 25 *
	               ((int64_t)MAX_GPU - gpu_left_milli(v->c, plan->node)) /
	               (int64_t)MAX_GPU;
	bool share = j->req.kind == CNL_REQ_BLOCKS;
	bool has_share = n->n_shared > 0, has_whole = n->n_whole > 0;

	if (j->req.kind == CNL_REQ_CPU)
		return 0;
	if (share ? has_share : has_whole)
		return -(double)(base + ((has_share && has_whole) ? 50 : 75));
	return -(double)(base + ((!has_share && !has_whole) ? 25 : 0));
}

static double gpupacking_score(const struct cnl_sched_view *v,
                               const struct cnl_job *j,
                               const struct cnl_plan *plan)
{
	const struct cnl_cluster *c = v->c;
	const struct cnl_node *n = &c->nodes[plan->node];
	int freeb[CNL_NODE_MAX_GPUS], order[CNL_NODE_MAX_GPUS];
	int want = j->req.kind == CNL_REQ_WHOLE ? j->req.gpus : 1;
	int need =
	    j->req.kind == CNL_REQ_WHOLE ? CNL_BLOCKS_PER_GPU : j->req.blocks;

	if (j->req.kind == CNL_REQ_CPU)
		return 0;
	if (n->n_empty == n->n_gpus) {
		int f = n->n_gpus;
		return -(double)(33 - f > f ? 33 - f : f);
	}
	/* Walk the GPUs by free capacity, ascending (stable). */
	for (int g = 0; g < n->n_gpus; g++) {
		freeb[g] = cnl_gpu_free_blocks(c, plan->node, g);
		int q = g;
		while (q > 0 && freeb[order[q - 1]] > freeb[g]) {
			order[q] = order[q - 1];
			q--;
		}
		order[q] = g;
	}
	int taken = 0, full_used = 0, sum = 0;
	for (int i = 0; i < n->n_gpus && taken < want; i++) {
		int g = order[i];
		if (freeb[g] < need)
			continue;
		taken++;
		full_used += freeb[g] == CNL_BLOCKS_PER_GPU;
		sum += freeb[g]; /* floor(free_milli * 100 / 1000) = blocks */
	}
	if (full_used)
		return -(double)(50 - full_used > 33 ? 50 - full_used : 33);
	return -(double)(100 - sum / 10 > 50 ? 100 - sum / 10 : 50);
}

static double bestfit_score(const struct cnl_sched_view *v,
                            const struct cnl_job *j,
                            const struct cnl_plan *plan)
{
	const struct cnl_node *n = &v->c->nodes[plan->node];
	double raw =
	    0.5 * (double)(n->cpu_total - n->cpu_used - j->req.cpu_milli) /
	        MAX_CPU +
	    0.5 * (double)(gpu_left_milli(v->c, plan->node) - req_milli(j)) /
	        MAX_GPU;

	/* The simulator min-max normalises over the feasible nodes before
	 * taking the highest; that keeps the set of highest nodes. */
	return -(double)(int)(100.0 * (1.0 - raw));
}

static double fgd_score(const struct cnl_sched_view *v, const struct cnl_job *j,
                        const struct cnl_plan *plan)
{
	const struct cnl_task_mix *mix = &v->s->cfg.mix;
	double before = cnl_frag_node(v->c, plan->node, mix);
	double after = cnl_frag_node_after(v->c, plan->node, mix, plan,
	                                   j->req.cpu_milli, 0);
	double delta = (before - after) * MILLI; /* milli-GPUs */

	if (after < 0)
		return 0;
	return -(double)(int)(100.0 / (1.0 + exp(-delta / 1000.0)));
}

const struct cnl_policy_ops cnl_policy_random = {
    .name = "random",
    .summary = "a feasible node and a fitting GPU at random (FGD baseline)",
    .gpu_choice = CNL_GPU_RANDOM,
    .score = random_score,
};

const struct cnl_policy_ops cnl_policy_dotprod = {
    .name = "dotprod",
    .summary = "smallest dot product of request and free resources "
               "(FGD baseline)",
    .gpu_choice = CNL_GPU_BEST_FIT,
    .score = dotprod_score,
};

const struct cnl_policy_ops cnl_policy_gpuclustering = {
    .name = "gpuclustering",
    .summary = "sharing and whole-GPU work on separate nodes (FGD baseline)",
    .gpu_choice = CNL_GPU_BEST_FIT,
    .score = gpuclustering_score,
};

const struct cnl_policy_ops cnl_policy_gpupacking = {
    .name = "gpupacking",
    .summary = "partly used GPUs, then free GPUs of used nodes, then free "
               "nodes (FGD baseline)",
    .gpu_choice = CNL_GPU_BEST_FIT,
    .score = gpupacking_score,
};

const struct cnl_policy_ops cnl_policy_bestfit = {
    .name = "bestfit",
    .summary = "least CPU and GPU left after placement (FGD baseline)",
    .gpu_choice = CNL_GPU_BEST_FIT,
    .score = bestfit_score,
};

const struct cnl_policy_ops cnl_policy_fgd = {
    .name = "fgd",
    .summary = "smallest growth of fragmentation, through a sigmoid "
               "(Weng et al., ATC'23)",
    .gpu_choice = CNL_GPU_SCORED,
    .score = fgd_score,
};
