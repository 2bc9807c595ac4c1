/*
 * frag.c - how much free GPU capacity the typical requests cannot use.
 *
 * After FGD (Weng et al., "Beware of Fragmentation", USENIX ATC'23): the
 * fragmentation of a node, for a task, is the free capacity of every GPU
 * of the node that the task cannot use — all of it when the task cannot
 * run on the node at all (CPU, memory, GPU type, or no GPU with room), and
 * all of it for a CPU-only task — and a node's fragmentation is the
 * expectation of that over the typical task mix.  Placement policies descend
 * its gradient: they prefer the placement that grows it least.
 *
 * Both the current value and the value after a hypothetical placement are
 * computed from one small view of the node (free blocks per GPU, free CPU
 * and memory), so a policy can score thousands of candidates without
 * touching the cluster.
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

/* The node as the measure sees it. */
struct view {
	int n_gpus, n_empty;
	int64_t cpu_free, mem_free;
	int freeb[CNL_NODE_MAX_GPUS];
	const struct cnl_gpu *mig[CNL_NODE_MAX_GPUS]; /* MIG GPUs, else NULL */
};

/* Can a single-GPU task of `blocks` use a MIG-mode GPU (capacity only)? */
static bool mig_usable(const struct cnl_gpu_type *t, const struct cnl_gpu *g,
                       int blocks)
{
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

static void view_of(const struct cnl_cluster *c, uint32_t node, struct view *v)
{
	const struct cnl_node *n = &c->nodes[node];

	v->n_gpus = n->n_gpus;
	v->n_empty = n->n_empty;
	v->cpu_free = n->cpu_total - n->cpu_used - n->cpu_others;
	v->mem_free = n->mem_total - n->mem_used - n->mem_others;
	for (int g = 0; g < n->n_gpus; g++) {
		const struct cnl_gpu *gp = &n->gpus[g];
		v->freeb[g] = cnl_gpu_free_blocks(c, node, g);
		v->mig[g] = gp->n_allocs && gp->mode == CNL_GPU_MIG ? gp : NULL;
	}
}

static bool usable(const struct cnl_gpu_type *t, const struct view *v, int g,
                   int blocks)
{
	if (v->mig[g])
		return mig_usable(t, v->mig[g], blocks);
	return v->freeb[g] >= blocks;
}

static double frag_of(const struct cnl_gpu_type *t, int type,
                      const struct view *v, const struct cnl_task_mix *mix)
{
	double total = 0, frag = 0;
	int free_all = 0, free_partial = 0;

	for (int g = 0; g < v->n_gpus; g++) {
		free_all += v->freeb[g];
		if (v->freeb[g] < CNL_BLOCKS_PER_GPU || v->mig[g])
			free_partial += v->freeb[g];
	}
	for (int i = 0; i < mix->n; i++)
		total += mix->t[i].weight;
	if (total <= 0 || free_all == 0)
		return 0;
	for (int i = 0; i < mix->n; i++) {
		double unusable = 0;
		const __typeof__(mix->t[0]) *m = &mix->t[i];
		if (m->cpu_milli > v->cpu_free || m->mem_mib > v->mem_free ||
		    (m->gpu_types && !(m->gpu_types >> type & 1))) {
			unusable = free_all;
		} else if (m->kind == CNL_REQ_CPU) {
			/* FGD's definition: a CPU-only task can use none of
			 * the free GPU capacity. */
			unusable = free_all;
		} else if (m->kind == CNL_REQ_WHOLE) {
			unusable =
			    v->n_empty >= m->gpus ? free_partial : free_all;
		} else {
			for (int g = 0; g < v->n_gpus; g++)
				if (!usable(t, v, g, m->blocks))
					unusable += v->freeb[g];
		}
		frag += m->weight * unusable;
	}
	return frag / total;
}

double cnl_frag_gpu(const struct cnl_cluster *c, uint32_t node, int gpu,
                    const struct cnl_task_mix *mix)
{
	const struct cnl_node *n = &c->nodes[node];
	const struct cnl_gpu_type *t = &c->cat->types[n->gpu_type];
	struct view v;

	/* The GPU alone: no CPU, memory or type limits, one GPU. */
	memset(&v, 0, sizeof(v));
	v.n_gpus = 1;
	v.cpu_free = v.mem_free = INT64_MAX;
	v.freeb[0] = cnl_gpu_free_blocks(c, node, gpu);
	v.n_empty = n->gpus[gpu].n_allocs == 0;
	v.mig[0] = n->gpus[gpu].n_allocs && n->gpus[gpu].mode == CNL_GPU_MIG
	               ? &n->gpus[gpu]
	               : NULL;
	double total = 0, frag = 0;
	for (int i = 0; i < mix->n; i++)
		total += mix->t[i].weight;
	if (total <= 0 || v.freeb[0] == 0)
		return 0;
	for (int i = 0; i < mix->n; i++) {
		bool ok;
		if (mix->t[i].kind == CNL_REQ_CPU)
			ok = true;
		else if (mix->t[i].kind == CNL_REQ_WHOLE)
			ok = v.n_empty;
		else
			ok = usable(t, &v, 0, mix->t[i].blocks);
		if (!ok)
			frag += mix->t[i].weight * v.freeb[0];
	}
	return frag / total;
}

double cnl_frag_node(const struct cnl_cluster *c, uint32_t node,
                     const struct cnl_task_mix *mix)
{
	const struct cnl_node *n = &c->nodes[node];
	struct view v;

	if (n->n_gpus == 0)
		return 0;
	view_of(c, node, &v);
	return frag_of(&c->cat->types[n->gpu_type], n->gpu_type, &v, mix);
}

double cnl_frag_node_after(const struct cnl_cluster *c, uint32_t node,
                           const struct cnl_task_mix *mix,
                           const struct cnl_plan *plan, int64_t cpu_milli,
                           int64_t mem_mib)
{
	const struct cnl_node *n = &c->nodes[node];
	struct view v;

	if (n->n_gpus == 0)
		return 0;
	view_of(c, node, &v);
	v.cpu_free -= cpu_milli;
	v.mem_free -= mem_mib;
	switch (plan->kind) {
	case CNL_PLACE_CPU:
		break;
	case CNL_PLACE_BLOCKS:
		if (v.freeb[plan->gpu] == CNL_BLOCKS_PER_GPU &&
		    !n->gpus[plan->gpu].n_allocs)
			v.n_empty--;
		v.freeb[plan->gpu] -= plan->n_blocks;
		break;
	case CNL_PLACE_WHOLE:
		for (int g = 0; g < n->n_gpus; g++)
			if (plan->gpu_mask >> g & 1) {
				v.freeb[g] = 0;
				v.n_empty--;
			}
		break;
	default:
		return -1;
	}
	return frag_of(&c->cat->types[n->gpu_type], n->gpu_type, &v, mix);
}
