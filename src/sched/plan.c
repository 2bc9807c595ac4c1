/*
 * plan.c - requests and planning: a request checked against the catalog
 * once (cnl_alloc_prepare), and the best placement for it on one GPU, on
 * one node, or in the whole cluster (see alloc.h for the model and the
 * tenant rules R1..R4).
 *
 * Every change goes through a plan.  plan_blocks_gpu() and plan_mig_gpu()
 * look at one GPU and propose the best option there; plan_node() keeps
 * the best over a node's GPUs; the commit (alloc.c) re-checks the plan
 * against the current state and applies it.  Plans are scored lower-is-
 * better: the blocks or slices a GPU would have left, with penalties for
 * opening an empty GPU, a new host instance or an empty node, so work
 * packs onto what is already in use.
 *
 * MIG geometry is two masks per GPU: memory slices (8 bits) and compute
 * slices (7 bits).  An instance of profile P at start s takes memory
 * [s, s + P.mem_slots) and compute [s, s + P.compute).  A new instance
 * goes at the allowed free start that keeps the most room for other
 * profiles (pick_start, with cluster.c's room table), so small instances
 * drift to the high slots and leave 0..3 for 3g/4g, as NVIDIA recommends.
 *
 * The search reads the node summaries first (node_may_fit) and plans only
 * where they pass; the candidates carry no block masks, only the winner
 * gets them (plan_masks).
 */
#include <errno.h>
#include <string.h>

#include "cnlab/errors.h"
#include "sched/alloc-internal.h"

#define SCORE_OPEN_GPU  CNL_SCORE_OPEN_GPU
#define SCORE_NEW_HOST  500 /* creating a host instance */
#define SCORE_OPEN_NODE CNL_SCORE_OPEN_NODE

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
	    h->mem_free < r->mem_mib || h->slots_free < 1 ||
	    !cnl_req_node_ok(r, i))
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
		best->score = (n->n_gpus ? SCORE_OPEN_GPU : 0) +
		              (n->cpu_total - n->cpu_used - n->cpu_others -
		               p->req.cpu_milli) /
		                  1000;
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
