/*
 * alloc.c - the two-tier slice allocator's state changes (see alloc.h for
 * the model and the tenant rules R1..R4): the allocation table, commit of
 * a plan (and restore of a saved allocation), free, resize, and what an
 * allocation holds.
 *
 * A commit re-checks its plan against the current state (plan_valid) and
 * applies it.  Nothing is changed until every check has passed and every
 * allocation that can fail (the allocation table, a GPU's project list)
 * has been made, so a failed call leaves the cluster as it was.
 *
 * Blocks are named: a block-mode GPU's occupancy is a 100-bit mask and an
 * allocation records the bits it holds, so "no block promised twice" is a
 * mask-overlap test, and VRAM follows (block i owns bytes
 * [i * V / 100, (i + 1) * V / 100) of the GPU's V).
 *
 * Allocation ids carry their slot in the low SLOT_BITS bits and a
 * generation above, so a stale id is told from the slot's new tenant.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "sched/alloc-internal.h"

#define SLOT_BITS 24
#define SLOT_MASK ((1u << SLOT_BITS) - 1)

/* ---- small helpers ---------------------------------------------------- */

static inline bool mask_test(const uint64_t m[2], int bit)
{
	return (m[bit >> 6] >> (bit & 63)) & 1;
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
