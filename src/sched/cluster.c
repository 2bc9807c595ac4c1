/*
 * cluster.c - the cluster and its nodes: creation, labels and state, the
 * per-type MIG room tables, and each node's summary.
 *
 * Each node keeps a summary (empty GPUs, most free blocks, most free
 * compute slices, most free host blocks), recomputed after each change of
 * that node (cnl_node_summary), and a hot copy of it beside its free CPU
 * and memory in c->hot, so a cluster-wide search rejects most nodes with a
 * few compares on one cache line.
 *
 * The room table of a MIG-capable type answers, for every pair of memory
 * and compute slice masks, how much room the masks leave for new
 * instances; the planner (plan.c) places a new instance where the most
 * room is left.  It is built once per type, when the first node of the
 * type is added.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "sched/alloc-internal.h"

/* ---- MIG room tables -------------------------------------------------- */

/* How much room masks (mem, sm) leave for new instances: the compute of
 * every (profile, start) that still fits, summed. */
static int room_left(const struct cnl_gpu_type *t, uint8_t mem, uint8_t sm)
{
	int room = 0;

	for (int k = 0; k < t->n_mig; k++) {
		if (t->mig[k].media)
			continue;
		for (int s = 0; s < CNL_MIG_COMPUTE_SLICES; s++)
			if (start_fits(&t->mig[k], mem, sm, s))
				room += t->mig[k].compute;
	}
	return room;
}

static int room_table(struct cnl_cluster *c, int type)
{
	const struct cnl_gpu_type *t = &c->cat->types[type];
	int16_t *tab;

	if (c->room[type] || t->n_mig == 0)
		return 0;
	tab = malloc(sizeof(*tab) << 15);
	if (!tab)
		return -ENOMEM;
	for (unsigned i = 0; i < 1u << 15; i++)
		tab[i] = (int16_t)room_left(t, (uint8_t)(i & 0xff),
		                            (uint8_t)(i >> 8));
	c->room[type] = tab;
	return 0;
}

/* ---- node summary ----------------------------------------------------- */

void cnl_node_summary_of(const struct cnl_cluster *c, struct cnl_node *n)
{
	bool mig = n->n_gpus && node_type(c, n)->n_mig > 0;

	n->n_empty = n->max_block_free = n->max_mig_free = n->max_host_free = 0;
	for (int i = 0; i < n->n_gpus; i++) {
		const struct cnl_gpu *g = &n->gpus[i];
		if (gpu_empty(g)) {
			n->n_empty++;
			n->max_block_free = CNL_BLOCKS_PER_GPU;
			if (mig)
				n->max_mig_free = CNL_MIG_COMPUTE_SLICES;
		} else if (g->mode == CNL_GPU_BLOCK) {
			int f = CNL_BLOCKS_PER_GPU - g->used;
			if (f > n->max_block_free)
				n->max_block_free = (uint8_t)f;
		} else {
			int f = CNL_MIG_COMPUTE_SLICES - popc(g->sm_mask);
			if (f > n->max_mig_free)
				n->max_mig_free = (uint8_t)f;
			for (int k = 0; k < g->n_inst; k++) {
				int h = CNL_MIG_HOST_BLOCKS - g->inst[k].used;
				if (g->inst[k].host && h > n->max_host_free)
					n->max_host_free = (uint8_t)h;
			}
		}
	}
}

void cnl_node_summary(struct cnl_cluster *c, uint32_t i)
{
	struct cnl_node *n = &c->nodes[i];
	struct cnl_node_hot *h = &c->hot[i];

	cnl_node_summary_of(c, n);
	h->cpu_free = n->cpu_total - n->cpu_used - n->cpu_others;
	h->mem_free = n->mem_total - n->mem_used - n->mem_others;
	h->gpu_type = n->gpu_type;
	h->state = n->state;
	h->n_gpus = n->n_gpus;
	h->n_empty = n->n_empty;
	h->max_block_free = n->max_block_free;
	h->max_mig_free = n->max_mig_free;
	h->max_host_free = n->max_host_free;
	h->n_allocs = n->n_allocs;
	h->slots_free = cnl_node_slots_free(n);
}

/* ---- cluster and nodes ------------------------------------------------ */

int cnl_cluster_new(const struct cnl_catalog *cat, struct cnl_cluster **ret)
{
	struct cnl_cluster *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->cat = cat;
	*ret = c;
	return 0;
}

void cnl_cluster_free(struct cnl_cluster *c)
{
	if (!c)
		return;
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		for (int g = 0; g < c->nodes[i].n_gpus; g++)
			free(c->nodes[i].gpus[g].projs);
		free(c->nodes[i].gpus);
	}
	free(c->nodes);
	free(c->hot);
	for (int t = 0; t < CNL_CATALOG_MAX_TYPES; t++)
		free(c->room[t]);
	free(c->slots);
	free(c->free_slots);
	free(c);
}

static int copy_label(char *dst, size_t len, const char *src)
{
	size_t n = src ? strlen(src) : 0;

	if (n >= len)
		return -CNL_ELIMIT;
	memcpy(dst, src ? src : "", n + 1);
	return 0;
}

int cnl_cluster_find_node(const struct cnl_cluster *c, const char *name)
{
	for (uint32_t i = 0; i < c->n_nodes; i++)
		if (strcmp(c->nodes[i].name, name) == 0)
			return (int)i;
	return -CNL_ENODE;
}

int cnl_cluster_add_node(struct cnl_cluster *c,
                         const struct cnl_node_spec *spec)
{
	struct cnl_node n;
	int r;

	memset(&n, 0, sizeof(n));
	if (!spec->name || !spec->name[0])
		return -CNL_ECONFIG;
	if (spec->cpu_milli < 0 || spec->mem_mib < 0 || spec->n_gpus < 0 ||
	    spec->n_gpus > CNL_NODE_MAX_GPUS)
		return -CNL_ESIZE;
	if (spec->n_gpus > 0 &&
	    (spec->gpu_type < 0 || spec->gpu_type >= c->cat->n))
		return -CNL_EGPUTYPE;
	if (c->n_nodes >= INT32_MAX)
		return -CNL_ELIMIT;
	if ((r = copy_label(n.name, sizeof(n.name), spec->name)) < 0 ||
	    (r = copy_label(n.cluster, sizeof(n.cluster), spec->cluster)) < 0 ||
	    (r = copy_label(n.zone, sizeof(n.zone), spec->zone)) < 0 ||
	    (r = copy_label(n.rack, sizeof(n.rack), spec->rack)) < 0)
		return r;
	for (int i = 0; i < CNL_NODE_MAX_DATASETS && spec->datasets[i]; i++) {
		r = copy_label(n.datasets[i], CNL_DATASET_MAX,
		               spec->datasets[i]);
		if (r < 0)
			return r;
		n.n_datasets++;
	}
	if (cnl_cluster_find_node(c, spec->name) >= 0)
		return -CNL_EDUP;
	if (c->n_nodes == c->cap_nodes) {
		uint32_t cap = c->cap_nodes ? c->cap_nodes * 2 : 64;
		struct cnl_node *nn = realloc(c->nodes, cap * sizeof(*nn));
		if (!nn)
			return -ENOMEM;
		c->nodes = nn;
		struct cnl_node_hot *nh = realloc(c->hot, cap * sizeof(*nh));
		if (!nh)
			return -ENOMEM;
		c->hot = nh;
		c->cap_nodes = cap;
	}
	if (spec->n_gpus > 0 && (r = room_table(c, spec->gpu_type)) < 0)
		return r;
	n.gpu_type = (int16_t)(spec->n_gpus > 0 ? spec->gpu_type : 0);
	n.n_gpus = (uint8_t)spec->n_gpus;
	n.cpu_total = spec->cpu_milli;
	n.mem_total = spec->mem_mib;
	n.state = CNL_NODE_UP;
	n.gpus = calloc(n.n_gpus ? n.n_gpus : 1, sizeof(*n.gpus));
	if (!n.gpus)
		return -ENOMEM;
	c->nodes[c->n_nodes] = n;
	cnl_node_summary(c, c->n_nodes);
	return (int)c->n_nodes++;
}

int cnl_cluster_set_node_state(struct cnl_cluster *c, uint32_t node,
                               enum cnl_node_state state)
{
	if (node >= c->n_nodes)
		return -CNL_ENODE;
	if ((unsigned)state > CNL_NODE_DOWN)
		return -EINVAL;
	c->nodes[node].state = (uint8_t)state;
	cnl_node_summary(c, node);
	return 0;
}

int cnl_cluster_set_node_labels(struct cnl_cluster *c, uint32_t node,
                                const struct cnl_node_spec *spec)
{
	struct cnl_node n;
	int r;

	if (node >= c->n_nodes)
		return -CNL_ENODE;
	/* Staged in a copy: all the labels change, or none. */
	memset(&n, 0, sizeof(n));
	if ((r = copy_label(n.cluster, sizeof(n.cluster), spec->cluster)) < 0 ||
	    (r = copy_label(n.zone, sizeof(n.zone), spec->zone)) < 0 ||
	    (r = copy_label(n.rack, sizeof(n.rack), spec->rack)) < 0)
		return r;
	for (int i = 0; i < CNL_NODE_MAX_DATASETS && spec->datasets[i]; i++) {
		r = copy_label(n.datasets[i], CNL_DATASET_MAX,
		               spec->datasets[i]);
		if (r < 0)
			return r;
		n.n_datasets++;
	}
	memcpy(c->nodes[node].cluster, n.cluster, sizeof(n.cluster));
	memcpy(c->nodes[node].zone, n.zone, sizeof(n.zone));
	memcpy(c->nodes[node].rack, n.rack, sizeof(n.rack));
	memcpy(c->nodes[node].datasets, n.datasets, sizeof(n.datasets));
	c->nodes[node].n_datasets = n.n_datasets;
	return 0;
}

int cnl_cluster_set_node_pods(struct cnl_cluster *c, uint32_t node, int32_t max,
                              int32_t others)
{
	if (node >= c->n_nodes)
		return -CNL_ENODE;
	if (max < 0 || others < 0)
		return -CNL_ESIZE;
	c->nodes[node].pods_max = max;
	c->nodes[node].pods_others = others;
	cnl_node_summary(c, node);
	return 0;
}

int cnl_cluster_set_node_others(struct cnl_cluster *c, uint32_t node,
                                int64_t cpu_milli, int64_t mem_mib)
{
	struct cnl_node *n;

	if (node >= c->n_nodes)
		return -CNL_ENODE;
	if (cpu_milli < 0 || mem_mib < 0)
		return -CNL_ESIZE;
	n = &c->nodes[node];
	n->cpu_others = cpu_milli;
	n->mem_others = mem_mib;
	cnl_node_summary(c, node);
	return 0;
}
