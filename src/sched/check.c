/*
 * check.c - cnl_cluster_check(): prove the allocator's invariants by
 * rebuilding every GPU's state from the allocation table alone and
 * comparing it with the incremental state.  Used by the randomized tests
 * after every operation, and cheap enough for a daemon's debug mode.
 *
 * Invariants (numbered as the messages cite them):
 *   I1  a block of a GPU belongs to at most one allocation, and a GPU's
 *       block mask is exactly the union of its allocations' blocks;
 *   I2  a GPU's MIG instances sit at allowed start slots, do not overlap in
 *       memory or compute slices, respect each profile's instance limit,
 *       and the GPU's slice masks are exactly their union;
 *   I3  a dedicated instance has exactly one allocation; a host instance
 *       has 1..14 blocks, all of its own project, and its mask is the union
 *       of theirs;
 *   I4  a GPU is in one mode: block allocations and MIG instances never
 *       share it;
 *   I5  tenant rules: a GPU with an allocation above 14 blocks holds one
 *       project only;
 *   I6  CPU and memory used are the sums over the node's allocations and
 *       within capacity; VRAM promised on a GPU is within its VRAM;
 *   I7  counters (used, big, allocation and project counts) and the node
 *       summaries match the rebuilt state.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "sched/alloc-internal.h"

struct rgpu {
	uint64_t mask[2];
	int used, big, n_allocs, n_block_allocs;
	int dedicated[CNL_MIG_COMPUTE_SLICES]; /* allocs per instance start */
	int host_used[CNL_MIG_COMPUTE_SLICES];
	uint16_t host_mask[CNL_MIG_COMPUTE_SLICES];
	uint64_t vram_blocks;
};

static int bad(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bad(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -CNL_ECONFIG;
}

/* (GPU, project) of every allocation, sorted: each GPU's project counts
 * come from its slice of this array. */
struct gp {
	uint32_t gpu; /* global index: first[node] + gpu */
	uint32_t project;
};

static int cmp_gp(const void *x, const void *y)
{
	const struct gp *a = x, *b = y;

	if (a->gpu != b->gpu)
		return a->gpu < b->gpu ? -1 : 1;
	return (a->project > b->project) - (a->project < b->project);
}

/* Allocations of `project` in the GPU's slice [lo, hi). */
static int count_proj(const struct gp *v, size_t lo, size_t hi,
                      uint32_t project)
{
	int n = 0;

	for (size_t i = lo; i < hi; i++)
		n += v[i].project == project;
	return n;
}

static int check_gpu(const struct cnl_cluster *c, uint32_t ni, int gi,
                     const struct rgpu *r, const struct gp *gps, size_t lo,
                     size_t hi, char *err, size_t errlen)
{
	const struct cnl_node *n = &c->nodes[ni];
	const struct cnl_gpu *g = &n->gpus[gi];
	const struct cnl_gpu_type *t = &c->cat->types[n->gpu_type];
	uint8_t mem = 0, sm = 0;
	int per_prof[CNL_MIG_MAX_PROFILES] = {0};
	int proj_total = 0;

	if (g->n_allocs != r->n_allocs)
		return bad(err, errlen, "I7 %s/gpu%d: n_allocs %d, rebuilt %d",
		           n->name, gi, g->n_allocs, r->n_allocs);
	if (r->n_block_allocs && g->n_inst)
		return bad(err, errlen,
		           "I4 %s/gpu%d: block allocations on a MIG GPU",
		           n->name, gi);
	if (g->mode == CNL_GPU_BLOCK || g->n_allocs == 0) {
		if (g->n_inst)
			return bad(err, errlen,
			           "I4 %s/gpu%d: instances in block mode",
			           n->name, gi);
		if (g->mask[0] != r->mask[0] || g->mask[1] != r->mask[1])
			return bad(err, errlen,
			           "I1 %s/gpu%d: block mask differs from its "
			           "allocations",
			           n->name, gi);
		if (g->mask[1] >> 36)
			return bad(err, errlen, "I1 %s/gpu%d: block >= 100",
			           n->name, gi);
		if (g->used != r->used || g->big != r->big)
			return bad(err, errlen,
			           "I7 %s/gpu%d: used %d big %d, rebuilt %d %d",
			           n->name, gi, g->used, g->big, r->used,
			           r->big);
		if (r->vram_blocks > CNL_BLOCKS_PER_GPU)
			return bad(err, errlen,
			           "I6 %s/gpu%d: VRAM overcommitted", n->name,
			           gi);
	} else {
		uint64_t vram = 0;
		if (r->n_block_allocs || g->mask[0] || g->mask[1])
			return bad(err, errlen,
			           "I4 %s/gpu%d: blocks on a MIG GPU", n->name,
			           gi);
		for (int i = 0; i < g->n_inst; i++) {
			const struct cnl_mig_inst *in = &g->inst[i];
			if (in->profile >= t->n_mig)
				return bad(err, errlen,
				           "I2 %s/gpu%d: bad profile", n->name,
				           gi);
			const struct cnl_mig_profile *p = &t->mig[in->profile];
			uint8_t mm =
			    (uint8_t)(((1u << p->mem_slots) - 1) << in->start);
			uint8_t cm =
			    (uint8_t)(((1u << p->compute) - 1) << in->start);
			if (in->start >= 7 || !(p->starts >> in->start & 1))
				return bad(err, errlen,
				           "I2 %s/gpu%d: %s at start %d is not "
				           "an allowed placement",
				           n->name, gi, p->name, in->start);
			if (in->start + p->mem_slots > CNL_MIG_MEM_SLICES ||
			    (mem & mm) || (sm & cm))
				return bad(err, errlen,
				           "I2 %s/gpu%d: %s at %d overlaps",
				           n->name, gi, p->name, in->start);
			mem |= mm;
			sm |= cm;
			vram += p->mem_mib;
			if (++per_prof[in->profile] > p->max_instances)
				return bad(err, errlen,
				           "I2 %s/gpu%d: too many %s", n->name,
				           gi, p->name);
			if (in->host) {
				if (in->profile != t->host_profile ||
				    in->used < 1 ||
				    in->used > CNL_MIG_HOST_BLOCKS ||
				    in->used != r->host_used[in->start] ||
				    in->mask != r->host_mask[in->start] ||
				    __builtin_popcount(in->mask) != in->used ||
				    r->dedicated[in->start])
					return bad(
					    err, errlen,
					    "I3 %s/gpu%d: host at %d "
					    "holds %d blocks, rebuilt %d",
					    n->name, gi, in->start, in->used,
					    r->host_used[in->start]);
			} else if (r->dedicated[in->start] != 1 ||
			           r->host_used[in->start]) {
				return bad(err, errlen,
				           "I3 %s/gpu%d: dedicated instance at "
				           "%d has %d allocations",
				           n->name, gi, in->start,
				           r->dedicated[in->start]);
			}
		}
		for (int s = 0; s < CNL_MIG_COMPUTE_SLICES; s++)
			if ((r->dedicated[s] || r->host_used[s]) &&
			    !(mem >> s & 1))
				return bad(
				    err, errlen,
				    "I3 %s/gpu%d: allocation refers to a "
				    "missing instance at %d",
				    n->name, gi, s);
		if (mem != g->mem_mask || sm != g->sm_mask)
			return bad(err, errlen,
			           "I2 %s/gpu%d: slice masks differ from the "
			           "instances",
			           n->name, gi);
		if (vram > t->vram_mib)
			return bad(err, errlen,
			           "I6 %s/gpu%d: VRAM overcommitted", n->name,
			           gi);
	}
	for (int i = 0; i < g->n_projs; i++) {
		int want = count_proj(gps, lo, hi, g->projs[i].project);
		if (want != g->projs[i].allocs || want == 0)
			return bad(
			    err, errlen,
			    "I7 %s/gpu%d: project %u has %d allocations, "
			    "counted %d",
			    n->name, gi, g->projs[i].project, want,
			    g->projs[i].allocs);
		proj_total += want;
	}
	if (proj_total != g->n_allocs)
		return bad(err, errlen,
		           "I7 %s/gpu%d: project counts miss "
		           "allocations",
		           n->name, gi);
	if (g->big && g->n_projs > 1)
		return bad(
		    err, errlen,
		    "I5 %s/gpu%d: a slice above 14 blocks shares the GPU "
		    "with another project",
		    n->name, gi);
	return 0;
}

int cnl_cluster_check(const struct cnl_cluster *c, char *err, size_t errlen)
{
	uint32_t *first = calloc(c->n_nodes + 1, sizeof(*first));
	struct rgpu *rg = NULL;
	int64_t *cpu = NULL, *mem = NULL;
	uint32_t *nallocs = NULL, *nwhole = NULL, live = 0, total = 0;
	struct gp *gps = NULL;
	size_t n_gps = 0, cap_gps = 0;
	int rc = 0;

	if (!first)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->n_nodes; i++)
		first[i + 1] = first[i] + c->nodes[i].n_gpus;
	total = first[c->n_nodes];
	rg = calloc(total + 1, sizeof(*rg));
	cpu = calloc(c->n_nodes + 1, sizeof(*cpu));
	mem = calloc(c->n_nodes + 1, sizeof(*mem));
	nallocs = calloc(c->n_nodes + 1, sizeof(*nallocs));
	nwhole = calloc(c->n_nodes + 1, sizeof(*nwhole));
	/* Each allocation holds at most one GPU, or a gang of at most 16. */
	cap_gps = (size_t)c->n_allocs * CNL_NODE_MAX_GPUS + 1;
	gps = malloc(cap_gps * sizeof(*gps));
	if (!rg || !cpu || !mem || !nallocs || !nwhole || !gps) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t s = 0; s < c->n_slots && rc == 0; s++) {
		const struct cnl_alloc *a = &c->slots[s];
		if (!a->id)
			continue;
		live++;
		if (a->node >= c->n_nodes) {
			rc = bad(err, errlen, "allocation on a missing node");
			break;
		}
		const struct cnl_node *n = &c->nodes[a->node];
		cpu[a->node] += a->cpu_milli;
		mem[a->node] += a->mem_mib;
		nallocs[a->node]++;
		nwhole[a->node] += a->kind == CNL_PLACE_WHOLE;
		if (a->kind == CNL_PLACE_CPU)
			continue;
		for (int gi = 0; gi < n->n_gpus && n_gps < cap_gps; gi++)
			if (a->kind == CNL_PLACE_WHOLE ? (a->gpu_mask >> gi & 1)
			                               : a->gpu == gi)
				gps[n_gps++] = (struct gp){first[a->node] + gi,
				                           a->project};
		if (a->kind == CNL_PLACE_WHOLE) {
			for (int gi = 0; gi < n->n_gpus; gi++) {
				if (!(a->gpu_mask >> gi & 1))
					continue;
				struct rgpu *r = &rg[first[a->node] + gi];
				if (r->mask[0] || r->mask[1])
					rc = bad(err, errlen,
					         "I1 %s/gpu%d: whole GPU given "
					         "twice",
					         n->name, gi);
				r->mask[0] = ~0ULL;
				r->mask[1] = (1ULL << 36) - 1;
				r->used = CNL_BLOCKS_PER_GPU;
				r->big++;
				r->n_allocs++;
				r->n_block_allocs++;
				r->vram_blocks += CNL_BLOCKS_PER_GPU;
			}
			continue;
		}
		if (a->gpu >= n->n_gpus) {
			rc = bad(err, errlen, "allocation on a missing GPU");
			break;
		}
		struct rgpu *r = &rg[first[a->node] + a->gpu];
		r->n_allocs++;
		if (a->kind == CNL_PLACE_BLOCKS) {
			int nb = __builtin_popcountll(a->mask[0]) +
			         __builtin_popcountll(a->mask[1]);
			if ((r->mask[0] & a->mask[0]) ||
			    (r->mask[1] & a->mask[1]))
				rc = bad(err, errlen,
				         "I1 %s/gpu%d: a block is promised "
				         "twice",
				         n->name, a->gpu);
			r->mask[0] |= a->mask[0];
			r->mask[1] |= a->mask[1];
			r->used += nb;
			r->big += nb > CNL_SMALL_BLOCKS_MAX;
			r->n_block_allocs++;
			r->vram_blocks += (uint64_t)nb;
			if (a->req_kind == CNL_REQ_BLOCKS && a->blocks != nb)
				rc = bad(err, errlen,
				         "I7 allocation %u holds %d blocks, "
				         "asked %d",
				         a->id, nb, a->blocks);
		} else if (a->start >= CNL_MIG_COMPUTE_SLICES) {
			rc = bad(err, errlen, "I2 bad start slot");
		} else if (a->kind == CNL_PLACE_MIG) {
			r->dedicated[a->start]++;
		} else {
			if (r->host_mask[a->start] & a->mask[0])
				rc = bad(err, errlen,
				         "I3 %s/gpu%d: a hosted block is "
				         "promised twice",
				         n->name, a->gpu);
			r->host_mask[a->start] |= (uint16_t)a->mask[0];
			r->host_used[a->start] +=
			    __builtin_popcountll(a->mask[0]);
			for (int i = 0; i < n->gpus[a->gpu].n_inst; i++) {
				const struct cnl_mig_inst *in =
				    &n->gpus[a->gpu].inst[i];
				if (in->start == a->start &&
				    in->project != a->project)
					rc = bad(err, errlen,
					         "I3 %s/gpu%d: host instance "
					         "shared by two projects",
					         n->name, a->gpu);
			}
		}
	}
	qsort(gps, n_gps, sizeof(*gps), cmp_gp);
	size_t cursor = 0;
	if (rc == 0 && live != c->n_allocs)
		rc = bad(err, errlen, "I7 %u live allocations, counter %u",
		         live, c->n_allocs);
	for (uint32_t ni = 0; ni < c->n_nodes && rc == 0; ni++) {
		const struct cnl_node *n = &c->nodes[ni];
		struct cnl_node sum = *n;
		/* What others hold may overcommit the node; CNLab's own
		 * allocations may not. */
		if (cpu[ni] != n->cpu_used || mem[ni] != n->mem_used ||
		    n->cpu_used > n->cpu_total || n->mem_used > n->mem_total ||
		    n->cpu_used < 0 || n->mem_used < 0 || n->cpu_others < 0 ||
		    n->mem_others < 0)
			rc = bad(err, errlen,
			         "I6 %s: cpu %lld/%lld (rebuilt %lld), mem "
			         "%lld/%lld (rebuilt %lld)",
			         n->name, (long long)n->cpu_used,
			         (long long)n->cpu_total, (long long)cpu[ni],
			         (long long)n->mem_used,
			         (long long)n->mem_total, (long long)mem[ni]);
		else if (nallocs[ni] != n->n_allocs ||
		         nwhole[ni] != n->n_whole ||
		         n->n_shared + n->n_whole > n->n_allocs)
			rc = bad(err, errlen, "I7 %s: allocation count",
			         n->name);
		for (int gi = 0; gi < n->n_gpus && rc == 0; gi++) {
			/* This GPU's slice of the sorted (GPU, project):
			 * GPUs come in increasing order, so one cursor. */
			uint32_t want = first[ni] + (uint32_t)gi;
			while (cursor < n_gps && gps[cursor].gpu < want)
				cursor++;
			size_t lo = cursor, hi = cursor;
			while (hi < n_gps && gps[hi].gpu == want)
				hi++;
			rc = check_gpu(c, ni, gi, &rg[want], gps, lo, hi, err,
			               errlen);
		}
		if (rc)
			break;
		/* I7: the summary equals a fresh computation. */
		cnl_node_summary_of(c, &sum);
		if (sum.n_empty != n->n_empty ||
		    sum.max_block_free != n->max_block_free ||
		    sum.max_mig_free != n->max_mig_free ||
		    sum.max_host_free != n->max_host_free)
			rc = bad(err, errlen, "I7 %s: stale summary", n->name);
		const struct cnl_node_hot *h = &c->hot[ni];
		if (rc == 0 &&
		    (h->cpu_free !=
		         n->cpu_total - n->cpu_used - n->cpu_others ||
		     h->mem_free !=
		         n->mem_total - n->mem_used - n->mem_others ||
		     h->state != n->state || h->n_allocs != n->n_allocs ||
		     h->slots_free != cnl_node_slots_free(n) ||
		     h->n_empty != n->n_empty || h->gpu_type != n->gpu_type ||
		     h->max_block_free != n->max_block_free ||
		     h->max_mig_free != n->max_mig_free ||
		     h->max_host_free != n->max_host_free))
			rc = bad(err, errlen, "I7 %s: stale hot copy", n->name);
	}
out:
	free(first);
	free(rg);
	free(cpu);
	free(mem);
	free(nallocs);
	free(nwhole);
	free(gps);
	return rc;
}
