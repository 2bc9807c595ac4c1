/*
 * alloc-internal.h - what the allocator's files share and nobody else:
 *
 *   cluster.c  the cluster and its nodes, MIG room tables, node summaries
 *   plan.c     requests checked against the catalog, and planning: the
 *              best option per GPU, per node, in the cluster
 *   alloc.c    the allocation table, commit (and restore), free, resize,
 *              accounting
 *   check.c    the invariant checker (cnl_cluster_check)
 *   frag.c     the fragmentation measure (public API only)
 *
 * alloc.c calls plan.c (cnl_alloc_place) and cluster.c (summaries after
 * each change); check.c calls cluster.c; plan.c and cluster.c call none of
 * the others (test sched.no_cycles).  The small helpers over GPU state
 * below are static inline, so the planner's hot loops stay free of calls.
 */
#ifndef CNL_SCHED_ALLOC_INTERNAL_H
#define CNL_SCHED_ALLOC_INTERNAL_H

#include "sched/alloc.h"

/* cnl_node_summary - recompute node `i`'s summary fields and its hot copy
 * after any change to it. */
void cnl_node_summary(struct cnl_cluster *c, uint32_t i);

/* cnl_node_summary_of - the summary fields of `n` computed afresh into
 * `out` (a copy of the node), for the checker. */
void cnl_node_summary_of(const struct cnl_cluster *c, struct cnl_node *out);

/* ---- helpers over GPU state ------------------------------------------- */

/* Workloads node @n may still take (pods_max); INT32_MAX: no limit.
 * Others' count may exceed the limit (they came after CNLab's work). */
static inline int32_t cnl_node_slots_free(const struct cnl_node *n)
{
	int64_t f;

	if (n->pods_max <= 0)
		return INT32_MAX;
	f = (int64_t)n->pods_max - n->pods_others - (int64_t)n->n_allocs;
	return f < 0 ? 0 : (int32_t)f;
}

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

/* The bits set in a 128-bit block mask, counted in parallel (SWAR) and
 * inline: the build targets any x86-64 (no -mpopcnt), where
 * __builtin_popcountll is a call to libgcc's __popcountdi2 (3.4% of a
 * pre-emption cycle). */
static inline int mask_count(const uint64_t m[2])
{
	const uint64_t k1 = 0x5555555555555555ULL, k2 = 0x3333333333333333ULL,
	               k4 = 0x0f0f0f0f0f0f0f0fULL;
	uint64_t a = m[0] - ((m[0] >> 1) & k1), b = m[1] - ((m[1] >> 1) & k1);

	a = (a & k2) + ((a >> 2) & k2);
	b = (b & k2) + ((b >> 2) & k2);
	/* Each byte of the sum is at most 16, the total at most 128. */
	a = ((a + (a >> 4)) & k4) + ((b + (b >> 4)) & k4);
	return (int)((a * 0x0101010101010101ULL) >> 56);
}

/* The n lowest bits of 0..limit-1 that are clear in `used`. */
static inline void mask_take(const uint64_t used[2], int n, int limit,
                             uint64_t out[2])
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

static inline bool single_project(const struct cnl_gpu *g, uint32_t p)
{
	return g->n_projs == 0 || (g->n_projs == 1 && g->projs[0].project == p);
}

static inline int find_inst(const struct cnl_gpu *g, int start)
{
	for (int i = 0; i < g->n_inst; i++)
		if (g->inst[i].start == start)
			return i;
	return -1;
}

static inline int count_profile(const struct cnl_gpu *g, int prof)
{
	int n = 0;

	for (int i = 0; i < g->n_inst; i++)
		n += g->inst[i].profile == prof;
	return n;
}

static inline bool start_fits(const struct cnl_mig_profile *p, uint8_t mem,
                              uint8_t sm, int s)
{
	return (p->starts >> s & 1) && !(mem & range8(s, p->mem_slots)) &&
	       !(sm & range8(s, p->compute));
}

static inline int mig_free_blocks(uint8_t sm_mask)
{
	return 100 * (CNL_MIG_COMPUTE_SLICES - popc(sm_mask)) /
	       CNL_MIG_COMPUTE_SLICES;
}

#endif /* CNL_SCHED_ALLOC_INTERNAL_H */
