/*
 * alloc.c - the two-tier slice allocator (see alloc.h for the model and the
 * tenant rules R1..R4).
 *
 * Design notes.
 *
 * 1. Every change goes through a plan.  plan_gpu_*() look at one GPU and
 *    propose the best option there; plan_node() keeps the best over a
 *    node's GPUs; commit() re-checks the plan against the current state and
 *    applies it.  Nothing is changed until every check has passed and every
 *    allocation that can fail (the allocation table, a GPU's project list)
 *    has been made, so a failed call leaves the cluster as it was.
 *
 * 2. Blocks are named: a block-mode GPU's occupancy is a 100-bit mask and an
 *    allocation records the bits it holds, so "no block promised twice" is
 *    a mask-overlap test, and VRAM follows (block i owns bytes
 *    [i * V / 100, (i + 1) * V / 100) of the GPU's V).
 *
 * 3. MIG geometry is two masks per GPU: memory slices (8 bits) and compute
 *    slices (7 bits).  An instance of profile P at start s takes memory
 *    [s, s + P.mem_slots) and compute [s, s + P.compute).  A new instance
 *    goes at the allowed free start that keeps the most room for other
 *    profiles (pick_start), so small instances drift to the high slots and
 *    leave 0..3 for 3g/4g, as NVIDIA recommends.
 *
 * 4. Each node keeps a summary (empty GPUs, most free blocks, most free
 *    compute slices, most free host blocks), recomputed after each change
 *    of that node, so a cluster-wide search rejects most nodes with a few
 *    compares.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "sched/alloc-internal.h"

#define SLOT_BITS       24
#define SLOT_MASK       ((1u << SLOT_BITS) - 1)
#define SCORE_OPEN_GPU  CNL_SCORE_OPEN_GPU
#define SCORE_NEW_HOST  500 /* creating a host instance */
#define SCORE_OPEN_NODE CNL_SCORE_OPEN_NODE

/* ---- small helpers ---------------------------------------------------- */

/* Bits set in a 16-bit mask (slice and GPU masks).  By nibbles: the
 * portable build has no POPCNT instruction, and the libgcc fallback
 * showed in profiles of the scheduler. */
static inline int popc(unsigned x)
{
	static const uint8_t nib[16] = {0, 1, 1, 2, 1, 2, 2, 3,
	                                1, 2, 2, 3, 2, 3, 3, 4};
	return nib[x & 15] + nib[(x >> 4) & 15] + nib[(x >> 8) & 15] +
	       nib[(x >> 12) & 15];
}

static inline uint8_t range8(int start, int len)
{
	return (uint8_t)(((1u << len) - 1) << start);
}

static inline const struct cnl_gpu_type *node_type(const struct cnl_cluster *c,
                                                   const struct cnl_node *n)
{
	return &c->cat->types[n->gpu_type];
}

static inline bool gpu_empty(const struct cnl_gpu *g)
{
	return g->n_allocs == 0;
}

static inline bool mask_test(const uint64_t m[2], int bit)
{
	return (m[bit >> 6] >> (bit & 63)) & 1;
}

static inline int mask_count(const uint64_t m[2])
{
	return __builtin_popcountll(m[0]) + __builtin_popcountll(m[1]);
}

/* The n lowest bits of 0..limit-1 that are clear in `used`. */
static void mask_take(const uint64_t used[2], int n, int limit, uint64_t out[2])
{
	out[0] = out[1] = 0;
	for (int w = 0; w < 2 && n > 0; w++) {
		uint64_t valid =
		    limit >= (w + 1) * 64
		        ? ~0ULL
		        : (limit <= w * 64 ? 0
		                           : (1ULL << (limit - w * 64)) - 1);
		uint64_t avail = ~used[w] & valid;
		while (avail && n > 0) {
			uint64_t bit = avail & -avail;
			out[w] |= bit;
			avail &= avail - 1;
			n--;
		}
	}
}

static bool single_project(const struct cnl_gpu *g, uint32_t p)
{
	return g->n_projs == 0 || (g->n_projs == 1 && g->projs[0].project == p);
}

static int proj_reserve(struct cnl_gpu *g)
{
	struct cnl_gpu_proj *np;
	int cap;

	if (g->n_projs < g->cap_projs)
		return 0;
	cap = g->cap_projs ? g->cap_projs * 2 : 4;
	if (cap > 255)
		cap = 255;
	if (g->n_projs >= cap)
		return -CNL_ELIMIT;
	np = realloc(g->projs, (size_t)cap * sizeof(*np));
	if (!np)
		return -ENOMEM;
	g->projs = np;
	g->cap_projs = (uint8_t)cap;
	return 0;
}

/* Caller has reserved room with proj_reserve(). */
static void proj_add(struct cnl_gpu *g, uint32_t p)
{
	for (int i = 0; i < g->n_projs; i++)
		if (g->projs[i].project == p) {
			g->projs[i].allocs++;
			return;
		}
	g->projs[g->n_projs].project = p;
	g->projs[g->n_projs].allocs = 1;
	g->n_projs++;
}

static void proj_del(struct cnl_gpu *g, uint32_t p)
{
	for (int i = 0; i < g->n_projs; i++)
		if (g->projs[i].project == p) {
			if (--g->projs[i].allocs == 0)
				g->projs[i] = g->projs[--g->n_projs];
			return;
		}
}

static int find_inst(const struct cnl_gpu *g, int start)
{
	for (int i = 0; i < g->n_inst; i++)
		if (g->inst[i].start == start)
			return i;
	return -1;
}

static int count_profile(const struct cnl_gpu *g, int prof)
{
	int n = 0;

	for (int i = 0; i < g->n_inst; i++)
		n += g->inst[i].profile == prof;
	return n;
}

static bool start_fits(const struct cnl_mig_profile *p, uint8_t mem, uint8_t sm,
                       int s)
{
	return (p->starts >> s & 1) && !(mem & range8(s, p->mem_slots)) &&
	       !(sm & range8(s, p->compute));
}

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

/* The start slot for a new instance of profile `k` on `g` (MIG mode or
 * empty), or -1 when it does not fit: the allowed free start that leaves
 * the most room for other instances. */
static int pick_start(const struct cnl_cluster *c, int type,
                      const struct cnl_gpu *g, int k)
{
	const struct cnl_gpu_type *t = &c->cat->types[type];
	const struct cnl_mig_profile *p = &t->mig[k];
	const int16_t *room = c->room[type];
	uint8_t mem = gpu_empty(g) ? 0 : g->mem_mask;
	uint8_t sm = gpu_empty(g) ? 0 : g->sm_mask;
	int best = -1, best_room = -1;

	if (!gpu_empty(g) &&
	    (g->mode != CNL_GPU_MIG || count_profile(g, k) >= p->max_instances))
		return -1;
	for (int s = 0; s < CNL_MIG_COMPUTE_SLICES; s++) {
		if (!start_fits(p, mem, sm, s))
			continue;
		unsigned nm = mem | range8(s, p->mem_slots);
		unsigned ns = sm | range8(s, p->compute);
		int r = room[nm | ns << 8];
		if (r > best_room) {
			best_room = r;
			best = s;
		}
	}
	return best;
}

static int mig_free_blocks(uint8_t sm_mask)
{
	return 100 * (CNL_MIG_COMPUTE_SLICES - popc(sm_mask)) /
	       CNL_MIG_COMPUTE_SLICES;
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
	h->cpu_free = n->cpu_total - n->cpu_used;
	h->mem_free = n->mem_total - n->mem_used;
	h->gpu_type = n->gpu_type;
	h->state = n->state;
	h->n_gpus = n->n_gpus;
	h->n_empty = n->n_empty;
	h->max_block_free = n->max_block_free;
	h->max_mig_free = n->max_mig_free;
	h->max_host_free = n->max_host_free;
	h->n_allocs = n->n_allocs;
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

/* ---- requests --------------------------------------------------------- */

int cnl_alloc_prepare(const struct cnl_cluster *c,
                      const struct cnl_alloc_req *req, struct cnl_req_prep *ret)
{
	const struct cnl_catalog *cat = c->cat;
	struct cnl_req_prep p;
	int first_err = 0;

	memset(&p, 0, sizeof(p));
	p.req = *req;
	p.req.profile = NULL; /* resolved into prof[] below */
	memset(p.prof, -1, sizeof(p.prof));
	if (req->cpu_milli < 0 || req->mem_mib < 0)
		return -CNL_ESIZE;
	if (req->project == CNL_PROJECT_NONE)
		return -EINVAL;
	if (req->gpu_type != CNL_GPU_TYPE_ANY &&
	    (req->gpu_type < 0 || req->gpu_type >= cat->n))
		return -CNL_EGPUTYPE;
	switch (req->kind) {
	case CNL_REQ_BLOCKS:
		if (req->blocks < 1 || req->blocks > CNL_BLOCKS_PER_GPU)
			return req->blocks < 0 ? -CNL_ESIZE : -CNL_EBLOCKS;
		break;
	case CNL_REQ_WHOLE:
		if (req->gpus < 0)
			return -CNL_ESIZE;
		if (req->gpus < 1 || req->gpus > CNL_NODE_MAX_GPUS)
			return -CNL_EGANG;
		break;
	case CNL_REQ_MIG:
		if (!req->profile || !req->profile[0])
			return -CNL_EPROFILE;
		break;
	case CNL_REQ_CPU:
		/* Any node, GPUs or not: the type does not matter. */
		p.type_ok = ~0ULL;
		*ret = p;
		return 0;
	default:
		return -EINVAL;
	}
	for (int t = 0; t < cat->n; t++) {
		const struct cnl_gpu_type *ty = &cat->types[t];
		int k = -1;
		if (req->gpu_type != CNL_GPU_TYPE_ANY && req->gpu_type != t)
			continue;
		if (req->gpu_types && !(req->gpu_types >> t & 1))
			continue;
		if (req->kind == CNL_REQ_MIG) {
			k = cnl_mig_find(ty, req->profile);
			if (k < 0) {
				/* Report "no MIG" only when the one type asked
				 * for has none; else the profile is unknown. */
				if (!first_err || k == -CNL_EPROFILE)
					first_err = k;
				continue;
			}
		} else if (req->kind == CNL_REQ_BLOCKS && ty->n_mig > 0) {
			k = req->blocks > CNL_SMALL_BLOCKS_MAX
			        ? cnl_mig_pick(ty, req->blocks)
			        : ty->host_profile;
			/* A full-GPU profile is no better than the GPU. */
			if (k >= 0 &&
			    ty->mig[k].compute == CNL_MIG_COMPUTE_SLICES)
				k = -1;
		}
		p.prof[t] = (int8_t)(k < 0 ? -1 : k);
		p.type_ok |= 1ULL << t;
	}
	if (req->kind == CNL_REQ_MIG && !p.type_ok)
		return first_err ? first_err : -CNL_EPROFILE;
	*ret = p;
	return 0;
}

/* ---- planning --------------------------------------------------------- */

static inline void plan_take(struct cnl_plan *best, const struct cnl_plan *cand)
{
	if (cand->score < best->score)
		*best = *cand;
}

/*
 * The candidates below carry no block masks: only the winner needs one,
 * and plan_masks() fills it in, so the search does no bit picking.
 */
static void plan_blocks_gpu(const struct cnl_cluster *c,
                            const struct cnl_node *n, const struct cnl_gpu *g,
                            int gi, const struct cnl_req_prep *p, int prof,
                            struct cnl_plan *best)
{
	const struct cnl_gpu_type *t = node_type(c, n);
	int want = p->req.blocks;
	uint32_t proj = p->req.project;
	bool big = want > CNL_SMALL_BLOCKS_MAX, empty = gpu_empty(g);
	struct cnl_plan cand;

	cand.gpu = (uint8_t)gi;
	cand.n_blocks = (uint8_t)want;
	cand.new_inst = 0;
	cand.gpu_mask = 0;

	/* Block mode: R1 for small requests, R2 for big ones.  A big request
	 * on an empty MIG-capable GPU takes MIG instead (below). */
	if (empty || g->mode == CNL_GPU_BLOCK) {
		bool ok = CNL_BLOCKS_PER_GPU - g->used >= want &&
		          (big ? single_project(g, proj)
		               : (g->big == 0 || single_project(g, proj)));
		if (ok && big && empty && prof >= 0)
			ok = false;
		if (ok) {
			cand.kind = CNL_PLACE_BLOCKS;
			cand.profile = cand.start = 0;
			cand.score = CNL_BLOCKS_PER_GPU - g->used - want +
			             (empty ? SCORE_OPEN_GPU : 0);
			plan_take(best, &cand);
		}
	}
	if (prof < 0 || (!empty && g->mode != CNL_GPU_MIG))
		return;
	if (big) {
		int s = pick_start(c, n->gpu_type, g, prof);
		if (s < 0)
			return;
		cand.kind = CNL_PLACE_MIG;
		cand.profile = (uint8_t)prof;
		cand.start = (uint8_t)s;
		cand.score = mig_free_blocks((empty ? 0 : g->sm_mask) |
		                             range8(s, t->mig[prof].compute)) +
		             (empty ? SCORE_OPEN_GPU : 0);
		plan_take(best, &cand);
		return;
	}
	if (empty)
		return; /* small requests open a GPU in block mode */
	/* R3: an existing host instance of the project, or a new one. */
	cand.kind = CNL_PLACE_MIG_BLOCKS;
	for (int i = 0; i < g->n_inst; i++) {
		const struct cnl_mig_inst *in = &g->inst[i];
		if (!in->host || in->project != proj ||
		    CNL_MIG_HOST_BLOCKS - in->used < want)
			continue;
		cand.profile = in->profile;
		cand.start = in->start;
		cand.score = CNL_MIG_HOST_BLOCKS - in->used - want;
		plan_take(best, &cand);
	}
	int s = pick_start(c, n->gpu_type, g, prof);
	if (s >= 0) {
		cand.profile = (uint8_t)prof;
		cand.start = (uint8_t)s;
		cand.new_inst = 1;
		cand.score =
		    SCORE_NEW_HOST + mig_free_blocks(g->sm_mask | range8(s, 1));
		plan_take(best, &cand);
	}
}

static void plan_mig_gpu(const struct cnl_cluster *c, const struct cnl_node *n,
                         const struct cnl_gpu *g, int gi, int prof,
                         struct cnl_plan *best)
{
	const struct cnl_gpu_type *t = node_type(c, n);
	struct cnl_plan cand;
	int s = pick_start(c, n->gpu_type, g, prof);

	if (s < 0)
		return;
	memset(&cand, 0, sizeof(cand));
	cand.kind = CNL_PLACE_MIG;
	cand.gpu = (uint8_t)gi;
	cand.profile = (uint8_t)prof;
	cand.start = (uint8_t)s;
	cand.score = mig_free_blocks((gpu_empty(g) ? 0 : g->sm_mask) |
	                             range8(s, t->mig[prof].compute)) +
	             (gpu_empty(g) ? SCORE_OPEN_GPU : 0);
	plan_take(best, &cand);
}

/* Fill in the block masks of a chosen plan: the lowest free blocks. */
static void plan_masks(const struct cnl_cluster *c, struct cnl_plan *pl)
{
	const struct cnl_gpu *g;
	uint64_t used[2] = {0, 0};

	pl->mask[0] = pl->mask[1] = 0;
	if (pl->kind == CNL_PLACE_BLOCKS) {
		g = &c->nodes[pl->node].gpus[pl->gpu];
		mask_take(g->mask, pl->n_blocks, CNL_BLOCKS_PER_GPU, pl->mask);
	} else if (pl->kind == CNL_PLACE_MIG_BLOCKS) {
		g = &c->nodes[pl->node].gpus[pl->gpu];
		if (!pl->new_inst)
			used[0] = g->inst[find_inst(g, pl->start)].mask;
		mask_take(used, pl->n_blocks, CNL_MIG_HOST_BLOCKS, pl->mask);
	}
}

/* A cheap upper bound: false means the request cannot fit node `i`. */
static inline bool node_may_fit(const struct cnl_cluster *c, uint32_t i,
                                const struct cnl_req_prep *p)
{
	const struct cnl_node_hot *h = &c->hot[i];
	const struct cnl_alloc_req *r = &p->req;
	int prof;

	if (h->state != CNL_NODE_UP || h->cpu_free < r->cpu_milli ||
	    h->mem_free < r->mem_mib)
		return false;
	if (r->kind == CNL_REQ_CPU)
		return true;
	if (h->n_gpus == 0 || !(p->type_ok >> h->gpu_type & 1))
		return false;
	prof = p->prof[h->gpu_type];
	switch (r->kind) {
	case CNL_REQ_BLOCKS:
		if (r->blocks <= h->max_block_free)
			return true;
		if (prof < 0)
			return false;
		if (r->blocks <= CNL_SMALL_BLOCKS_MAX)
			return r->blocks <= h->max_host_free ||
			       h->max_mig_free >= 1;
		return h->max_mig_free >=
		       c->cat->types[h->gpu_type].mig[prof].compute;
	case CNL_REQ_MIG:
		return h->max_mig_free >=
		       c->cat->types[h->gpu_type].mig[prof].compute;
	case CNL_REQ_WHOLE:
		return h->n_empty >= r->gpus;
	case CNL_REQ_CPU:
		return true;
	}
	return false;
}

/* Best option on node `node` without masks; false when none. */
static bool plan_node(const struct cnl_cluster *c, const struct cnl_req_prep *p,
                      uint32_t node, struct cnl_plan *best)
{
	const struct cnl_node *n = &c->nodes[node];
	int prof = p->prof[n->gpu_type];

	best->score = INT64_MAX;
	if (p->req.kind == CNL_REQ_CPU) {
		/* Keep GPU nodes' CPUs for GPU work: CPU-only nodes first,
		 * then the least CPU left over (in cores). */
		memset(best, 0, sizeof(*best));
		best->kind = CNL_PLACE_CPU;
		best->score =
		    (n->n_gpus ? SCORE_OPEN_GPU : 0) +
		    (n->cpu_total - n->cpu_used - p->req.cpu_milli) / 1000;
	} else if (p->req.kind == CNL_REQ_WHOLE) {
		int need = p->req.gpus;
		best->gpu_mask = 0;
		for (int i = 0; i < n->n_gpus && need > 0; i++)
			if (gpu_empty(&n->gpus[i])) {
				best->gpu_mask |= (uint16_t)(1u << i);
				need--;
			}
		if (need > 0)
			return false;
		best->kind = CNL_PLACE_WHOLE;
		best->gpu = best->profile = best->start = 0;
		best->new_inst = best->n_blocks = 0;
		best->score = (int64_t)(n->n_empty - p->req.gpus) * 100;
	} else {
		for (int i = 0; i < n->n_gpus; i++) {
			const struct cnl_gpu *g = &n->gpus[i];
			if (p->req.kind == CNL_REQ_BLOCKS)
				plan_blocks_gpu(c, n, g, i, p, prof, best);
			else
				plan_mig_gpu(c, n, g, i, prof, best);
		}
		if (best->score == INT64_MAX)
			return false;
	}
	best->node = node;
	if (n->n_allocs == 0)
		best->score += SCORE_OPEN_NODE;
	return true;
}

bool cnl_alloc_may_fit(const struct cnl_cluster *c, uint32_t node,
                       const struct cnl_req_prep *p)
{
	return node_may_fit(c, node, p);
}

bool cnl_alloc_plan_fast(const struct cnl_cluster *c,
                         const struct cnl_req_prep *p, uint32_t node,
                         struct cnl_plan *ret)
{
	return node_may_fit(c, node, p) && plan_node(c, p, node, ret);
}

void cnl_alloc_plan_masks(const struct cnl_cluster *c, struct cnl_plan *pl)
{
	plan_masks(c, pl);
}

int cnl_alloc_plan_node(const struct cnl_cluster *c,
                        const struct cnl_req_prep *p, uint32_t node,
                        struct cnl_plan *ret)
{
	struct cnl_plan best;

	if (node >= c->n_nodes)
		return -CNL_ENODE;
	if (c->nodes[node].state != CNL_NODE_UP)
		return -CNL_ENODESTATE;
	if (!node_may_fit(c, node, p) || !plan_node(c, p, node, &best))
		return -CNL_ENOSPACE;
	plan_masks(c, &best);
	*ret = best;
	return 0;
}

int cnl_alloc_plan(const struct cnl_cluster *c, const struct cnl_req_prep *p,
                   struct cnl_plan *ret)
{
	struct cnl_plan best, cand;

	best.score = INT64_MAX;
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		/* An empty node scores at least SCORE_OPEN_NODE. */
		if (c->hot[i].n_allocs == 0 && best.score <= SCORE_OPEN_NODE)
			continue;
		if (!node_may_fit(c, i, p) || !plan_node(c, p, i, &cand) ||
		    cand.score >= best.score)
			continue;
		best = cand;
		/* Scores are >= 0 and ties go to the lowest index: nothing
		 * later can beat an exact fit. */
		if (best.score == 0)
			break;
	}
	if (best.score == INT64_MAX)
		return -CNL_ENOSPACE;
	plan_masks(c, &best);
	*ret = best;
	return 0;
}

/* ---- allocation table ------------------------------------------------- */

static struct cnl_alloc *slot_of(const struct cnl_cluster *c, uint32_t id)
{
	uint32_t s = (id & SLOT_MASK);

	if (s == 0 || s > c->n_slots || c->slots[s - 1].id != id)
		return NULL;
	return &c->slots[s - 1];
}

const struct cnl_alloc *cnl_alloc_get(const struct cnl_cluster *c, uint32_t id)
{
	return slot_of(c, id);
}

/* Make sure a slot is available without taking it. */
static int slot_reserve(struct cnl_cluster *c)
{
	if (c->n_free_slots > 0 || c->n_slots < c->cap_slots)
		return 0;
	if (c->cap_slots >= SLOT_MASK)
		return -CNL_ELIMIT;
	uint32_t cap = c->cap_slots ? c->cap_slots * 2 : 1024;
	if (cap > SLOT_MASK)
		cap = SLOT_MASK;
	struct cnl_alloc *ns = realloc(c->slots, cap * sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	c->slots = ns;
	uint32_t *nf = realloc(c->free_slots, cap * sizeof(*nf));
	if (!nf)
		return -ENOMEM;
	c->free_slots = nf;
	c->cap_slots = cap;
	return 0;
}

static struct cnl_alloc *slot_take(struct cnl_cluster *c)
{
	uint32_t s;

	if (c->n_free_slots > 0)
		s = c->free_slots[--c->n_free_slots];
	else
		s = c->n_slots++;
	c->gen = (c->gen + 1) & 0xff;
	if (c->gen == 0)
		c->gen = 1;
	memset(&c->slots[s], 0, sizeof(c->slots[s]));
	c->slots[s].id = (c->gen << SLOT_BITS) | (s + 1);
	return &c->slots[s];
}

/* ---- commit ----------------------------------------------------------- */

/* Check that `pl` still fits; 0 or a negative code.  No changes. */
static int plan_valid(const struct cnl_cluster *c, const struct cnl_req_prep *p,
                      const struct cnl_plan *pl, bool any_state)
{
	const struct cnl_node *n;
	const struct cnl_gpu *g;
	const struct cnl_gpu_type *t;
	uint32_t proj = p->req.project;
	int want = p->req.blocks;

	if (pl->node >= c->n_nodes)
		return -CNL_ENODE;
	n = &c->nodes[pl->node];
	/* A restore puts back work that lives on a node whatever its state. */
	if (n->state != CNL_NODE_UP && !any_state)
		return -CNL_ENODESTATE;
	if (n->cpu_total - n->cpu_used < p->req.cpu_milli ||
	    n->mem_total - n->mem_used < p->req.mem_mib)
		return -CNL_ENOSPACE;
	if (pl->kind == CNL_PLACE_CPU || p->req.kind == CNL_REQ_CPU)
		return pl->kind == CNL_PLACE_CPU && p->req.kind == CNL_REQ_CPU
		           ? 0
		           : -CNL_ENOSPACE;
	if (!(p->type_ok >> n->gpu_type & 1) || n->n_gpus == 0)
		return -CNL_ENOSPACE;
	t = node_type(c, n);
	if (pl->kind == CNL_PLACE_WHOLE) {
		if (p->req.kind != CNL_REQ_WHOLE ||
		    popc(pl->gpu_mask) != p->req.gpus ||
		    pl->gpu_mask >> n->n_gpus)
			return -CNL_ENOSPACE;
		for (int i = 0; i < n->n_gpus; i++)
			if ((pl->gpu_mask >> i & 1) && !gpu_empty(&n->gpus[i]))
				return -CNL_ENOSPACE;
		return 0;
	}
	if (pl->gpu >= n->n_gpus)
		return -CNL_ENOSPACE;
	g = &n->gpus[pl->gpu];
	switch (pl->kind) {
	case CNL_PLACE_BLOCKS:
		if (p->req.kind != CNL_REQ_BLOCKS ||
		    mask_count(pl->mask) != want || pl->mask[1] >> 36)
			return -CNL_ENOSPACE;
		if (!gpu_empty(g) && g->mode != CNL_GPU_BLOCK)
			return -CNL_ENOSPACE;
		if ((g->mask[0] & pl->mask[0]) || (g->mask[1] & pl->mask[1]))
			return -CNL_ENOSPACE;
		if (want > CNL_SMALL_BLOCKS_MAX
		        ? !single_project(g, proj)
		        : (g->big && !single_project(g, proj)))
			return -CNL_ETENANT;
		return 0;
	case CNL_PLACE_MIG:
	case CNL_PLACE_MIG_BLOCKS:
		if (pl->profile >= t->n_mig || pl->start >= 7)
			return -CNL_ENOSPACE;
		if (pl->kind == CNL_PLACE_MIG &&
		    pl->profile != p->prof[n->gpu_type])
			return -CNL_ENOSPACE;
		if (pl->kind == CNL_PLACE_MIG_BLOCKS &&
		    (p->req.kind != CNL_REQ_BLOCKS ||
		     want > CNL_SMALL_BLOCKS_MAX ||
		     mask_count(pl->mask) != want || pl->mask[1] ||
		     pl->mask[0] >> CNL_MIG_HOST_BLOCKS ||
		     pl->profile != t->host_profile))
			return -CNL_ENOSPACE;
		if (pl->kind == CNL_PLACE_MIG || pl->new_inst) {
			const struct cnl_mig_profile *mp = &t->mig[pl->profile];
			if (!gpu_empty(g) && (g->mode != CNL_GPU_MIG ||
			                      count_profile(g, pl->profile) >=
			                          mp->max_instances))
				return -CNL_ENOSPACE;
			if (!start_fits(mp, gpu_empty(g) ? 0 : g->mem_mask,
			                gpu_empty(g) ? 0 : g->sm_mask,
			                pl->start))
				return -CNL_ENOSPACE;
			return 0;
		}
		if (gpu_empty(g) || g->mode != CNL_GPU_MIG)
			return -CNL_ENOSPACE;
		int k = find_inst(g, pl->start);
		if (k < 0 || !g->inst[k].host || g->inst[k].project != proj ||
		    (g->inst[k].mask & pl->mask[0]) ||
		    g->inst[k].used + want > CNL_MIG_HOST_BLOCKS)
			return -CNL_ENOSPACE;
		return 0;
	}
	return -CNL_ENOSPACE;
}

/* Take the free slot of `id` (restoring an allocation under its old id);
 * NULL when that slot is not free. */
static struct cnl_alloc *slot_take_id(struct cnl_cluster *c, uint32_t id)
{
	uint32_t s = (id & SLOT_MASK) - 1;

	for (uint32_t i = c->n_free_slots; i-- > 0;)
		if (c->free_slots[i] == s) {
			c->free_slots[i] = c->free_slots[--c->n_free_slots];
			memset(&c->slots[s], 0, sizeof(c->slots[s]));
			c->slots[s].id = id;
			return &c->slots[s];
		}
	return NULL;
}

static bool slot_is_free(const struct cnl_cluster *c, uint32_t id)
{
	uint32_t s = (id & SLOT_MASK) - 1;

	if ((id & SLOT_MASK) == 0 || s >= c->n_slots || c->slots[s].id)
		return false;
	for (uint32_t i = c->n_free_slots; i-- > 0;)
		if (c->free_slots[i] == s)
			return true;
	return false;
}

static int commit_as(struct cnl_cluster *c, const struct cnl_req_prep *p,
                     const struct cnl_plan *pl, uint32_t restore_id,
                     uint32_t *ret_id);

int cnl_alloc_commit(struct cnl_cluster *c, const struct cnl_req_prep *p,
                     const struct cnl_plan *pl, uint32_t *ret_id)
{
	return commit_as(c, p, pl, 0, ret_id);
}

static int restore_as(struct cnl_cluster *c, const struct cnl_alloc *saved,
                      bool same_id, uint32_t *ret_id)
{
	struct cnl_req_prep p;
	struct cnl_plan pl;
	uint32_t id;

	if (saved->node >= c->n_nodes || (same_id && !saved->id))
		return -CNL_ENOALLOC;
	if (same_id && !slot_is_free(c, saved->id))
		return -CNL_EDUP;
	const struct cnl_node *n = &c->nodes[saved->node];
	memset(&p, 0, sizeof(p));
	memset(p.prof, -1, sizeof(p.prof));
	p.req.kind = (enum cnl_req_kind)saved->req_kind;
	p.req.project = saved->project;
	p.req.cpu_milli = saved->cpu_milli;
	p.req.mem_mib = saved->mem_mib;
	p.req.gpu_type = CNL_GPU_TYPE_ANY;
	p.req.gpus = popc(saved->gpu_mask);
	p.req.blocks = saved->kind == CNL_PLACE_MIG ? saved->blocks
	                                            : mask_count(saved->mask);
	p.type_ok = ~0ULL;
	if (n->n_gpus)
		p.prof[n->gpu_type] = (int8_t)saved->profile;
	memset(&pl, 0, sizeof(pl));
	pl.node = saved->node;
	pl.kind = saved->kind;
	pl.gpu = saved->gpu;
	pl.profile = saved->profile;
	pl.start = saved->start;
	pl.gpu_mask = saved->gpu_mask;
	pl.mask[0] = saved->mask[0];
	pl.mask[1] = saved->mask[1];
	pl.n_blocks = (uint8_t)mask_count(saved->mask);
	if (saved->kind == CNL_PLACE_MIG_BLOCKS && saved->gpu < n->n_gpus)
		pl.new_inst = find_inst(&n->gpus[saved->gpu], saved->start) < 0;
	int r = commit_as(c, &p, &pl, same_id ? saved->id : 0, &id);
	if (r == 0 && saved->req_kind == CNL_REQ_BLOCKS)
		c->slots[(id & SLOT_MASK) - 1].blocks = saved->blocks;
	if (r == 0 && ret_id)
		*ret_id = id;
	return r;
}

int cnl_alloc_restore(struct cnl_cluster *c, const struct cnl_alloc *saved)
{
	return restore_as(c, saved, true, NULL);
}

int cnl_alloc_adopt(struct cnl_cluster *c, const struct cnl_alloc *saved,
                    uint32_t *ret_id)
{
	return restore_as(c, saved, false, ret_id);
}

static int commit_as(struct cnl_cluster *c, const struct cnl_req_prep *p,
                     const struct cnl_plan *pl, uint32_t restore_id,
                     uint32_t *ret_id)
{
	struct cnl_node *n;
	struct cnl_gpu *g = NULL;
	struct cnl_alloc *a;
	uint32_t proj = p->req.project;
	int r;

	r = plan_valid(c, p, pl, restore_id != 0);
	if (r < 0)
		return r;
	n = &c->nodes[pl->node];
	/* Everything that can fail comes before the first change. */
	if (!restore_id && (r = slot_reserve(c)) < 0)
		return r;
	for (int i = 0; i < n->n_gpus && pl->kind != CNL_PLACE_CPU; i++) {
		bool touched = pl->kind == CNL_PLACE_WHOLE
		                   ? (pl->gpu_mask >> i & 1)
		                   : i == pl->gpu;
		if (touched && (r = proj_reserve(&n->gpus[i])) < 0)
			return r;
	}

	a = restore_id ? slot_take_id(c, restore_id) : slot_take(c);
	a->project = proj;
	a->node = pl->node;
	a->req_kind = (uint8_t)p->req.kind;
	a->kind = pl->kind;
	a->gpu = pl->gpu;
	a->profile = pl->profile;
	a->start = pl->start;
	a->blocks =
	    (uint8_t)(p->req.kind == CNL_REQ_BLOCKS ? p->req.blocks : 0);
	a->gpu_mask = pl->gpu_mask;
	a->mask[0] = pl->mask[0];
	a->mask[1] = pl->mask[1];
	a->cpu_milli = p->req.cpu_milli;
	a->mem_mib = p->req.mem_mib;

	if (pl->kind != CNL_PLACE_WHOLE && pl->kind != CNL_PLACE_CPU) {
		g = &n->gpus[pl->gpu];
		if (gpu_empty(g)) {
			g->mode = pl->kind == CNL_PLACE_BLOCKS ? CNL_GPU_BLOCK
			                                       : CNL_GPU_MIG;
			g->mem_mask = g->sm_mask = 0;
			g->n_inst = 0;
		}
	}
	switch (pl->kind) {
	case CNL_PLACE_CPU:
		break;
	case CNL_PLACE_WHOLE:
		for (int i = 0; i < n->n_gpus; i++) {
			if (!(pl->gpu_mask >> i & 1))
				continue;
			struct cnl_gpu *w = &n->gpus[i];
			w->mode = CNL_GPU_BLOCK;
			w->mask[0] = ~0ULL;
			w->mask[1] = (1ULL << 36) - 1;
			w->used = CNL_BLOCKS_PER_GPU;
			w->big = 1;
			w->n_allocs = 1;
			proj_add(w, proj);
		}
		break;
	case CNL_PLACE_BLOCKS:
		g->mask[0] |= pl->mask[0];
		g->mask[1] |= pl->mask[1];
		g->used += pl->n_blocks;
		g->big += pl->n_blocks > CNL_SMALL_BLOCKS_MAX;
		break;
	case CNL_PLACE_MIG:
	case CNL_PLACE_MIG_BLOCKS: {
		const struct cnl_mig_profile *mp =
		    &node_type(c, n)->mig[pl->profile];
		struct cnl_mig_inst *in;
		if (pl->kind == CNL_PLACE_MIG || pl->new_inst) {
			in = &g->inst[g->n_inst++];
			memset(in, 0, sizeof(*in));
			in->profile = pl->profile;
			in->start = pl->start;
			in->project = proj;
			in->host = pl->kind == CNL_PLACE_MIG_BLOCKS;
			in->alloc = in->host ? 0 : a->id;
			g->mem_mask |= range8(pl->start, mp->mem_slots);
			g->sm_mask |= range8(pl->start, mp->compute);
		} else {
			in = &g->inst[find_inst(g, pl->start)];
		}
		if (in->host) {
			in->mask |= (uint16_t)pl->mask[0];
			in->used += pl->n_blocks;
		}
		break;
	}
	}
	if (g) {
		g->n_allocs++;
		proj_add(g, proj);
	}
	n->cpu_used += p->req.cpu_milli;
	n->mem_used += p->req.mem_mib;
	n->n_allocs++;
	n->n_whole += pl->kind == CNL_PLACE_WHOLE;
	n->n_shared += pl->kind != CNL_PLACE_WHOLE && pl->kind != CNL_PLACE_CPU;
	c->n_allocs++;
	cnl_node_summary(c, pl->node);
	*ret_id = a->id;
	return 0;
}

int cnl_alloc_place(struct cnl_cluster *c, const struct cnl_alloc_req *req,
                    uint32_t *ret_id)
{
	struct cnl_req_prep p;
	struct cnl_plan pl;
	int r;

	if ((r = cnl_alloc_prepare(c, req, &p)) < 0)
		return r;
	if ((r = cnl_alloc_plan(c, &p, &pl)) < 0)
		return r;
	return cnl_alloc_commit(c, &p, &pl, ret_id);
}

/* ---- free and resize -------------------------------------------------- */

int cnl_alloc_free(struct cnl_cluster *c, uint32_t id)
{
	struct cnl_alloc *a = slot_of(c, id);
	struct cnl_node *n;
	struct cnl_gpu *g;

	if (!a)
		return -CNL_ENOALLOC;
	n = &c->nodes[a->node];
	if (a->kind == CNL_PLACE_WHOLE) {
		for (int i = 0; i < n->n_gpus; i++) {
			if (!(a->gpu_mask >> i & 1))
				continue;
			g = &n->gpus[i];
			g->mask[0] = g->mask[1] = 0;
			g->used = 0;
			g->big = 0;
			g->n_allocs = 0;
			proj_del(g, a->project);
		}
	} else if (a->kind != CNL_PLACE_CPU) {
		g = &n->gpus[a->gpu];
		if (a->kind == CNL_PLACE_BLOCKS) {
			int nb = mask_count(a->mask);
			g->mask[0] &= ~a->mask[0];
			g->mask[1] &= ~a->mask[1];
			g->used -= (uint8_t)nb;
			g->big -= nb > CNL_SMALL_BLOCKS_MAX;
		} else {
			int k = find_inst(g, a->start);
			struct cnl_mig_inst *in = &g->inst[k];
			if (in->host) {
				in->mask &= (uint16_t)~a->mask[0];
				in->used -= (uint8_t)mask_count(a->mask);
			}
			if (!in->host || in->used == 0) {
				const struct cnl_mig_profile *mp =
				    &node_type(c, n)->mig[in->profile];
				g->mem_mask &=
				    (uint8_t)~range8(in->start, mp->mem_slots);
				g->sm_mask &=
				    (uint8_t)~range8(in->start, mp->compute);
				g->inst[k] = g->inst[--g->n_inst];
			}
		}
		g->n_allocs--;
		proj_del(g, a->project);
		if (gpu_empty(g))
			g->mode = CNL_GPU_BLOCK;
	}
	n->cpu_used -= a->cpu_milli;
	n->mem_used -= a->mem_mib;
	n->n_allocs--;
	n->n_whole -= a->kind == CNL_PLACE_WHOLE;
	n->n_shared -= a->kind != CNL_PLACE_WHOLE && a->kind != CNL_PLACE_CPU;
	c->n_allocs--;
	c->free_slots[c->n_free_slots++] = (a->id & SLOT_MASK) - 1;
	a->id = 0;
	cnl_node_summary(c, a->node);
	return 0;
}

int cnl_alloc_resize(struct cnl_cluster *c, uint32_t id, int blocks)
{
	struct cnl_alloc *a = slot_of(c, id);
	struct cnl_gpu *g;
	int have, limit;
	uint64_t *used, host_used[2] = {0, 0}, add[2];
	struct cnl_mig_inst *in = NULL;

	if (!a)
		return -CNL_ENOALLOC;
	if (a->kind != CNL_PLACE_BLOCKS && a->kind != CNL_PLACE_MIG_BLOCKS)
		return -CNL_EKIND;
	if (blocks < 1 || blocks > CNL_BLOCKS_PER_GPU)
		return blocks < 0 ? -CNL_ESIZE : -CNL_EBLOCKS;
	g = &c->nodes[a->node].gpus[a->gpu];
	have = mask_count(a->mask);
	if (a->kind == CNL_PLACE_MIG_BLOCKS) {
		in = &g->inst[find_inst(g, a->start)];
		if (blocks > CNL_MIG_HOST_BLOCKS ||
		    blocks - have > CNL_MIG_HOST_BLOCKS - in->used)
			return -CNL_ENOSPACE;
		host_used[0] = in->mask;
		used = host_used;
		limit = CNL_MIG_HOST_BLOCKS;
	} else {
		if (blocks - have > CNL_BLOCKS_PER_GPU - g->used)
			return -CNL_ENOSPACE;
		/* Growing past 14 blocks brings R2 in. */
		if (blocks > CNL_SMALL_BLOCKS_MAX &&
		    have <= CNL_SMALL_BLOCKS_MAX &&
		    !single_project(g, a->project))
			return -CNL_ETENANT;
		used = g->mask;
		limit = CNL_BLOCKS_PER_GPU;
	}
	if (blocks > have) {
		mask_take(used, blocks - have, limit, add);
	} else {
		/* Give back the highest blocks. */
		add[0] = add[1] = 0;
		uint64_t keep[2] = {a->mask[0], a->mask[1]};
		for (int b = limit - 1, drop = have - blocks; b >= 0 && drop;
		     b--)
			if (mask_test(keep, b)) {
				keep[b >> 6] &= ~(1ULL << (b & 63));
				drop--;
			}
		add[0] = a->mask[0] & ~keep[0];
		add[1] = a->mask[1] & ~keep[1];
	}
	if (a->kind == CNL_PLACE_MIG_BLOCKS) {
		in->mask ^= (uint16_t)add[0];
		in->used = (uint8_t)(in->used - have + blocks);
	} else {
		g->mask[0] ^= add[0];
		g->mask[1] ^= add[1];
		g->used = (uint8_t)(g->used - have + blocks);
		g->big += (blocks > CNL_SMALL_BLOCKS_MAX) -
		          (have > CNL_SMALL_BLOCKS_MAX);
	}
	a->mask[0] ^= add[0];
	a->mask[1] ^= add[1];
	if (a->req_kind == CNL_REQ_BLOCKS)
		a->blocks = (uint8_t)blocks;
	cnl_node_summary(c, a->node);
	return 0;
}

/* ---- accounting ------------------------------------------------------- */

uint64_t cnl_alloc_vram_mib(const struct cnl_cluster *c,
                            const struct cnl_alloc *a)
{
	const struct cnl_gpu_type *t = node_type(c, &c->nodes[a->node]);

	switch (a->kind) {
	case CNL_PLACE_WHOLE:
		return t->vram_mib * (uint64_t)popc(a->gpu_mask);
	case CNL_PLACE_MIG:
		return t->mig[a->profile].mem_mib;
	default:
		return t->vram_mib * (uint64_t)mask_count(a->mask) /
		       CNL_BLOCKS_PER_GPU;
	}
}

int cnl_alloc_blocks_held(const struct cnl_cluster *c,
                          const struct cnl_alloc *a)
{
	const struct cnl_gpu_type *t = node_type(c, &c->nodes[a->node]);

	switch (a->kind) {
	case CNL_PLACE_WHOLE:
		return CNL_BLOCKS_PER_GPU * popc(a->gpu_mask);
	case CNL_PLACE_MIG:
		return CNL_BLOCKS_PER_GPU * t->mig[a->profile].compute /
		       CNL_MIG_COMPUTE_SLICES;
	default:
		return mask_count(a->mask);
	}
}

int cnl_gpu_free_blocks(const struct cnl_cluster *c, uint32_t node, int gpu)
{
	const struct cnl_gpu *g = &c->nodes[node].gpus[gpu];
	int f;

	if (gpu_empty(g))
		return CNL_BLOCKS_PER_GPU;
	if (g->mode == CNL_GPU_BLOCK)
		return CNL_BLOCKS_PER_GPU - g->used;
	f = mig_free_blocks(g->sm_mask);
	for (int i = 0; i < g->n_inst; i++)
		if (g->inst[i].host)
			f += CNL_MIG_HOST_BLOCKS - g->inst[i].used;
	return f;
}
