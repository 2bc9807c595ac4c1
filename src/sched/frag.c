/*
 * frag.c - how much free GPU capacity the typical requests cannot use.
 *
 * After FGD (Weng et al., "Beware of Fragmentation", USENIX ATC'23): the
 * fragmentation of a GPU, for a task, is the GPU's free capacity when the
 * task cannot be placed on it, and 0 when it can; a node's fragmentation is
 * the expectation of that over the typical task mix.  The scheduler
 * minimises the growth of this measure when it places work, which keeps
 * free capacity in shapes that future requests can use.
 */
#include <string.h>

#include "sched/alloc.h"

void cnl_task_mix_default(struct cnl_task_mix *mix)
{
	/* Illustrative: student notebooks and sweeps dominate; a tail of
	 * half-GPU and whole-GPU training.  Sites pass their own mix. */
	static const struct {
		int kind, blocks, gpus;
		double w;
	} d[] = {
	    {CNL_REQ_BLOCKS, 1, 0, 0.10},  {CNL_REQ_BLOCKS, 5, 0, 0.20},
	    {CNL_REQ_BLOCKS, 10, 0, 0.20}, {CNL_REQ_BLOCKS, 25, 0, 0.15},
	    {CNL_REQ_BLOCKS, 50, 0, 0.15}, {CNL_REQ_WHOLE, 0, 1, 0.12},
	    {CNL_REQ_WHOLE, 0, 2, 0.05},   {CNL_REQ_WHOLE, 0, 4, 0.03},
	};

	memset(mix, 0, sizeof(*mix));
	for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++) {
		mix->t[i].kind = (enum cnl_req_kind)d[i].kind;
		mix->t[i].blocks = d[i].blocks;
		mix->t[i].gpus = d[i].gpus;
		mix->t[i].weight = d[i].w;
	}
	mix->n = (int)(sizeof(d) / sizeof(d[0]));
}

/* Can a single-GPU task of `blocks` use GPU g (capacity only)? */
static bool gpu_usable(const struct cnl_gpu_type *t, const struct cnl_gpu *g,
                       int blocks)
{
	if (g->n_allocs == 0)
		return true;
	if (g->mode == CNL_GPU_BLOCK)
		return CNL_BLOCKS_PER_GPU - g->used >= blocks;
	if (blocks <= CNL_SMALL_BLOCKS_MAX) {
		for (int i = 0; i < g->n_inst; i++)
			if (g->inst[i].host &&
			    CNL_MIG_HOST_BLOCKS - g->inst[i].used >= blocks)
				return true;
	}
	int k = blocks <= CNL_SMALL_BLOCKS_MAX ? t->host_profile
	                                       : cnl_mig_pick(t, blocks);
	if (k < 0)
		return false;
	const struct cnl_mig_profile *p = &t->mig[k];
	int count = 0;
	for (int i = 0; i < g->n_inst; i++)
		count += g->inst[i].profile == k;
	if (count >= p->max_instances)
		return false;
	for (int s = 0; s < CNL_MIG_COMPUTE_SLICES; s++) {
		uint8_t mm = (uint8_t)(((1u << p->mem_slots) - 1) << s);
		uint8_t cm = (uint8_t)(((1u << p->compute) - 1) << s);
		if ((p->starts >> s & 1) && !(g->mem_mask & mm) &&
		    !(g->sm_mask & cm))
			return true;
	}
	return false;
}

static double mix_total(const struct cnl_task_mix *mix)
{
	double w = 0;

	for (int i = 0; i < mix->n; i++)
		w += mix->t[i].weight;
	return w;
}

double cnl_frag_gpu(const struct cnl_cluster *c, uint32_t node, int gpu,
                    const struct cnl_task_mix *mix)
{
	const struct cnl_node *n = &c->nodes[node];
	const struct cnl_gpu *g = &n->gpus[gpu];
	const struct cnl_gpu_type *t = &c->cat->types[n->gpu_type];
	double total = mix_total(mix), frag = 0;
	int free_blocks = cnl_gpu_free_blocks(c, node, gpu);

	if (total <= 0 || free_blocks == 0)
		return 0;
	for (int i = 0; i < mix->n; i++) {
		bool ok = mix->t[i].kind == CNL_REQ_WHOLE
		              ? g->n_allocs == 0
		              : gpu_usable(t, g, mix->t[i].blocks);
		if (!ok)
			frag += mix->t[i].weight * free_blocks;
	}
	return frag / total;
}

double cnl_frag_node(const struct cnl_cluster *c, uint32_t node,
                     const struct cnl_task_mix *mix)
{
	const struct cnl_node *n = &c->nodes[node];
	const struct cnl_gpu_type *t = &c->cat->types[n->gpu_type];
	double total = mix_total(mix), frag = 0;
	int free_all = 0, free_partial = 0;
	int fb[CNL_NODE_MAX_GPUS];

	if (total <= 0 || n->n_gpus == 0)
		return 0;
	for (int g = 0; g < n->n_gpus; g++) {
		fb[g] = cnl_gpu_free_blocks(c, node, g);
		free_all += fb[g];
		if (n->gpus[g].n_allocs)
			free_partial += fb[g];
	}
	if (free_all == 0)
		return 0;
	for (int i = 0; i < mix->n; i++) {
		double unusable = 0;
		if (mix->t[i].cpu_milli > n->cpu_total - n->cpu_used ||
		    mix->t[i].mem_mib > n->mem_total - n->mem_used) {
			unusable = free_all;
		} else if (mix->t[i].kind == CNL_REQ_WHOLE) {
			unusable = n->n_empty >= mix->t[i].gpus ? free_partial
			                                        : free_all;
		} else {
			for (int g = 0; g < n->n_gpus; g++)
				if (!gpu_usable(t, &n->gpus[g],
				                mix->t[i].blocks))
					unusable += fb[g];
		}
		frag += mix->t[i].weight * unusable;
	}
	return frag / total;
}
