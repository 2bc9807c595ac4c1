/*
 * alloc_bench.c - allocate+free operations per second of the two-tier
 * allocator on a 1,000-node mixed cluster held near 75% full.
 *
 * The stream is one cnl_alloc_place() of a random request (small and big
 * block slices, named MIG profiles, whole-GPU gangs, 50 projects) after
 * another; whenever the capacity held passes 75% of the cluster, random
 * live allocations are freed until it is below again.  Every place and
 * every free counts as one operation.  As a baseline measured in the same run,
 * the same request stream goes through a naive first-fit allocator that only
 * counts free blocks per GPU (no MIG, no tenant rules, no named blocks, no node
 * summaries): the ratio says what the full model costs over the least
 * work any allocator could do.
 *
 * Usage: alloc_bench [operations]   (default 200000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnlab/errors.h"
#include "sched/alloc.h"

#define NODES 1000

static uint64_t rng = 0x1234567;

static uint64_t next(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545F4914F6CDD1DULL;
}

static int below(int n)
{
	return (int)(next() % (uint64_t)n);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct shape {
	const char *type;
	int gpus, share;
};

static const struct shape shapes[] = {
    {"H100-80GB-SXM", 8, 40}, {"A100-80GB", 8, 20}, {"H200-141GB", 4, 10},
    {"L40S", 4, 15},          {"L4", 8, 10},        {"MI300X", 8, 5},
};

static const char *const migp[] = {"1g.10gb", "1g.20gb", "2g.20gb",
                                   "3g.40gb", "2g.35gb", "1g.18gb"};

static struct cnl_alloc_req request(void)
{
	struct cnl_alloc_req r = {.gpu_type = CNL_GPU_TYPE_ANY};
	int k = below(100);

	r.project = 1 + (uint32_t)below(50);
	r.cpu_milli = 1000 * (1 + below(4));
	r.mem_mib = 4096 * (1 + below(4));
	if (k < 50) {
		r.kind = CNL_REQ_BLOCKS;
		r.blocks = 1 + below(14);
	} else if (k < 70) {
		r.kind = CNL_REQ_BLOCKS;
		r.blocks = 15 + below(46);
	} else if (k < 80) {
		r.kind = CNL_REQ_MIG;
		r.profile = migp[below(6)];
	} else if (k < 95) {
		r.kind = CNL_REQ_WHOLE;
		r.gpus = 1 + below(2);
	} else {
		r.kind = CNL_REQ_WHOLE;
		r.gpus = 4 << below(2);
	}
	return r;
}

/* ---- the naive baseline ------------------------------------------------ */

struct naive {
	int n_gpus;
	uint8_t *used;   /* per GPU */
	int *node_first; /* first GPU index of each node */
	int *node_n;
	int64_t *cpu_free;
};

struct naive_alloc {
	int gpu, n, node;
	int64_t cpu;
};

static int naive_place(struct naive *nv, const struct cnl_alloc_req *r,
                       struct naive_alloc *ret)
{
	int want = r->kind == CNL_REQ_BLOCKS ? r->blocks : 100;
	int gangs = r->kind == CNL_REQ_WHOLE ? r->gpus : 1;

	if (r->kind == CNL_REQ_MIG)
		want = 25;
	for (int n = 0; n < NODES; n++) {
		if (nv->cpu_free[n] < r->cpu_milli)
			continue;
		int found = 0, first = -1;
		for (int g = nv->node_first[n];
		     g < nv->node_first[n] + nv->node_n[n]; g++)
			if (100 - nv->used[g] >= want) {
				if (first < 0)
					first = g;
				if (++found == gangs)
					break;
			}
		if (found < gangs)
			continue;
		/* Gangs take `gangs` GPUs from `first` on that fit. */
		for (int g = first, left = gangs; left > 0; g++)
			if (100 - nv->used[g] >= want) {
				nv->used[g] = (uint8_t)(nv->used[g] + want);
				left--;
			}
		nv->cpu_free[n] -= r->cpu_milli;
		ret->gpu = first;
		ret->n = want * 1000 + gangs;
		ret->node = n;
		ret->cpu = r->cpu_milli;
		return 0;
	}
	return -1;
}

static void naive_free(struct naive *nv, const struct naive_alloc *a)
{
	int want = a->n / 1000, gangs = a->n % 1000;

	for (int g = a->gpu; gangs > 0; g++)
		if (nv->used[g] >= want) {
			nv->used[g] = (uint8_t)(nv->used[g] - want);
			gangs--;
		}
	nv->cpu_free[a->node] += a->cpu;
}

/* ---- driver ----------------------------------------------------------- */

int main(int argc, char **argv)
{
	long ops = argc > 1 ? strtol(argv[1], NULL, 10) : 200000;
	struct cnl_catalog cat;
	struct cnl_cluster *c;
	struct naive nv = {0};
	int total_gpus = 0;

	if (ops <= 0) {
		fprintf(stderr, "usage: alloc_bench [operations > 0]\n");
		return 2;
	}
	cnl_catalog_init(&cat);
	if (cnl_cluster_new(&cat, &c) < 0)
		return 1;
	nv.node_first = calloc(NODES, sizeof(int));
	nv.node_n = calloc(NODES, sizeof(int));
	nv.cpu_free = calloc(NODES, sizeof(int64_t));
	for (int i = 0; i < NODES; i++) {
		int pick = below(100), acc = 0;
		const struct shape *s = &shapes[0];
		for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]);
		     k++) {
			acc += shapes[k].share;
			if (pick < acc) {
				s = &shapes[k];
				break;
			}
		}
		char name[32];
		snprintf(name, sizeof(name), "node-%04d", i);
		struct cnl_node_spec spec = {
		    .name = name,
		    .gpu_type = cnl_catalog_find(&cat, s->type),
		    .n_gpus = s->gpus,
		    .cpu_milli = 128000,
		    .mem_mib = 1024 * 1024};
		if (cnl_cluster_add_node(c, &spec) < 0)
			return 1;
		nv.node_first[i] = total_gpus;
		nv.node_n[i] = s->gpus;
		nv.cpu_free[i] = 128000;
		total_gpus += s->gpus;
	}
	nv.used = calloc((size_t)total_gpus, 1);

	/* One request stream for both allocators. */
	struct cnl_alloc_req *reqs = malloc((size_t)ops * sizeof(*reqs));
	int *victims = malloc((size_t)ops * sizeof(int));
	for (long i = 0; i < ops; i++) {
		reqs[i] = request();
		victims[i] = below(1 << 30);
	}
	long target = (long)total_gpus * 75; /* 75% of all blocks */
	uint32_t *live = malloc((size_t)ops * sizeof(*live));
	struct naive_alloc *nlive = malloc((size_t)ops * sizeof(*nlive));
	long n_live = 0, n_nlive = 0, placed = 0, failed = 0, frees = 0;
	long held = 0, nheld = 0, nfrees = 0, nplaced = 0;

	double t0 = now();
	for (long i = 0; i < ops; i++) {
		uint32_t id;
		if (cnl_alloc_place(c, &reqs[i], &id) == 0) {
			live[n_live++] = id;
			held += cnl_alloc_blocks_held(c, cnl_alloc_get(c, id));
			placed++;
		} else {
			failed++;
		}
		for (long k = i; held > target && n_live > 0; k++) {
			long v = victims[k % ops] % n_live;
			held -=
			    cnl_alloc_blocks_held(c, cnl_alloc_get(c, live[v]));
			cnl_alloc_free(c, live[v]);
			live[v] = live[--n_live];
			frees++;
		}
	}
	double t_cnl = now() - t0;

	t0 = now();
	for (long i = 0; i < ops; i++) {
		if (naive_place(&nv, &reqs[i], &nlive[n_nlive]) == 0) {
			const struct naive_alloc *a = &nlive[n_nlive++];
			nheld += (long)(a->n / 1000) * (a->n % 1000);
			nplaced++;
		}
		for (long k = i; nheld > target && n_nlive > 0; k++) {
			long v = victims[k % ops] % n_nlive;
			nheld -=
			    (long)(nlive[v].n / 1000) * (nlive[v].n % 1000);
			naive_free(&nv, &nlive[v]);
			nlive[v] = nlive[--n_nlive];
			nfrees++;
		}
	}
	double t_naive = now() - t0;

	char err[256];
	int chk = cnl_cluster_check(c, err, sizeof(err));
	long used_blocks = 0;
	for (uint32_t i = 0; i < c->n_nodes; i++)
		for (int g = 0; g < c->nodes[i].n_gpus; g++)
			used_blocks += 100 - cnl_gpu_free_blocks(c, i, g);

	printf("cluster: %d nodes, %d GPUs (H100 40%%, A100 20%%, H200 10%%, "
	       "L40S 15%%, L4 10%%, MI300X 5%% of nodes)\n",
	       NODES, total_gpus);
	printf("operations: %ld places (%ld placed, %ld refused) and %ld "
	       "frees\n",
	       ops, placed, failed, frees);
	printf("GPU capacity in use at the end: %.1f%%\n",
	       100.0 * (double)used_blocks / (total_gpus * 100.0));
	printf("cnlab allocator:   %10.0f alloc+free ops/s  (%.3f s)\n",
	       (double)(ops + frees) / t_cnl, t_cnl);
	printf("naive first-fit:   %10.0f alloc+free ops/s  (%.3f s, %ld "
	       "placed, %ld freed)\n",
	       (double)(ops + nfrees) / t_naive, t_naive, nplaced, nfrees);
	printf("ratio cnlab/naive: %.2f (ops/s over ops/s)\n",
	       ((double)(ops + frees) / t_cnl) /
	           ((double)(ops + nfrees) / t_naive));
	printf("invariants after the run: %s\n", chk == 0 ? "ok" : err);
	cnl_cluster_free(c);
	free(reqs);
	free(victims);
	free(live);
	free(nlive);
	free(nv.used);
	free(nv.node_first);
	free(nv.node_n);
	free(nv.cpu_free);
	return chk == 0 ? 0 : 1;
}
