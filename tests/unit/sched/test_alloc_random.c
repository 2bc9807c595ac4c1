/*
 * test_alloc_random.c - many thousands of random allocate / free / resize /
 * node-state sequences over a small mixed cluster that runs full.  After
 * every operation the invariant checker must pass (no block, VRAM byte,
 * CPU, memory or MIG slice promised twice; instances at allowed slots
 * without overlap; counters true), a failed operation must leave the state
 * byte-for-byte as it was, and freeing everything at the end must leave
 * every GPU, CPU and byte of memory free.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "sched/alloc.h"

#define SEEDS 20
#define OPS   10000

static uint64_t rng;

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

static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	return h;
}

/* A digest of all state a failed operation must not touch. */
static uint64_t digest(const struct cnl_cluster *c)
{
	uint64_t h = c->n_allocs;

	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct cnl_node *n = &c->nodes[i];
		h = mix(h, (uint64_t)n->cpu_used);
		h = mix(h, (uint64_t)n->mem_used);
		h = mix(h, n->n_allocs);
		h = mix(h, n->state);
		for (int g = 0; g < n->n_gpus; g++) {
			const struct cnl_gpu *gp = &n->gpus[g];
			h = mix(h, gp->mode | gp->used << 8 | gp->big << 16 |
			               (uint64_t)gp->n_inst << 24 |
			               (uint64_t)gp->mem_mask << 32 |
			               (uint64_t)gp->sm_mask << 40);
			h = mix(h, gp->mask[0]);
			h = mix(h, gp->mask[1]);
			h = mix(h, gp->n_allocs);
			/* Instances by start slot and projects as a sum:
			 * their array order is not state. */
			for (int st = 0; st < 7; st++)
				for (int k = 0; k < gp->n_inst; k++)
					if (gp->inst[k].start == st)
						h = mix(
						    h,
						    gp->inst[k].profile |
						        gp->inst[k].used << 8 |
						        (uint64_t)gp->inst[k]
						                .mask
						            << 24 |
						        (uint64_t)st << 40);
			uint64_t ps = 0;
			for (int k = 0; k < gp->n_projs; k++)
				ps += mix(0, gp->projs[k].project * 1000ULL +
				                 gp->projs[k].allocs);
			h = mix(h, ps);
		}
	}
	for (uint32_t s = 0; s < c->n_slots; s++)
		h = mix(h, c->slots[s].id);
	return h;
}

static const char *const profiles[] = {
    "1g.10gb", "1g.20gb",    "2g.20gb", "3g.40gb", "4g.40gb",
    "7g.80gb", "1g.5gb",     "2g.10gb", "3g.20gb", "1g.18gb",
    "2g.35gb", "1g.10gb+me", "9g.1gb",  ""};

static struct cnl_alloc_req random_req(const struct cnl_catalog *cat)
{
	struct cnl_alloc_req r = {.gpu_type = CNL_GPU_TYPE_ANY};
	int k = below(100);

	r.project = 1 + (uint32_t)below(6);
	if (k < 70) {
		r.kind = CNL_REQ_BLOCKS;
		int s = below(100);
		r.blocks = s < 60   ? 1 + below(14)
		           : s < 92 ? 15 + below(86)
		                    : (int[]){0, 101, -3, 150}[below(4)];
	} else if (k < 85) {
		r.kind = CNL_REQ_MIG;
		r.profile = profiles[below(
		    (int)(sizeof(profiles) / sizeof(profiles[0])))];
	} else if (k < 95) {
		r.kind = CNL_REQ_WHOLE;
		r.gpus =
		    below(20) ? 1 + below(4) : (int[]){0, 17, -1}[below(3)];
	} else {
		r.kind = CNL_REQ_CPU;
	}
	if (below(10) < 3)
		r.gpu_type = below(50) ? below(cat->n) : 99;
	else if (below(10) == 0)
		r.gpu_types = next() & ((1ULL << cat->n) - 1);
	r.cpu_milli = below(20) ? below(8000) : (below(2) ? -1 : 70000);
	r.mem_mib = below(20) ? below(32768) : (below(2) ? -5 : 0);
	return r;
}

static void add(struct cnl_cluster *c, const struct cnl_catalog *cat,
                const char *name, const char *type, int gpus)
{
	struct cnl_node_spec s = {.name = name,
	                          .gpu_type = cnl_catalog_find(cat, type),
	                          .n_gpus = gpus,
	                          .cpu_milli = 64000,
	                          .mem_mib = 256 * 1024};
	assert_true(cnl_cluster_add_node(c, &s) >= 0);
}

static void check_or_fail(const struct cnl_cluster *c, uint64_t seed, int op,
                          const char *what)
{
	char err[256] = "";

	if (cnl_cluster_check(c, err, sizeof(err)) != 0)
		fail_msg("seed %llu op %d (%s): %s", (unsigned long long)seed,
		         op, what, err);
}

static int kinds[5];

static void run_seed(uint64_t seed, int *placed, int *refused)
{
	struct cnl_catalog cat;
	struct cnl_cluster *c;
	uint32_t live[4096];
	int n_live = 0;

	rng = seed * 0x9E3779B97F4A7C15ULL + 1;
	cnl_catalog_init(&cat);
	assert_int_equal(cnl_cluster_new(&cat, &c), 0);
	add(c, &cat, "h0", "H100-80GB-SXM", 2);
	add(c, &cat, "h1", "H100-80GB-SXM", 2);
	add(c, &cat, "a0", "A100-40GB", 4);
	add(c, &cat, "x0", "H200-141GB", 1);
	add(c, &cat, "l0", "L40S", 2);
	add(c, &cat, "l1", "L4", 1);
	add(c, &cat, "m0", "MI300X", 8);
	add(c, &cat, "cpu", "L4", 0);

	for (int op = 0; op < OPS; op++) {
		int k = below(100), rc;
		uint64_t before = digest(c);
		const char *what;

		if (k < 55) {
			struct cnl_alloc_req r = random_req(&cat);
			uint32_t id;
			what = "place";
			rc = cnl_alloc_place(c, &r, &id);
			if (rc == 0) {
				assert_true(n_live < 4096);
				live[n_live++] = id;
				(*placed)++;
				const struct cnl_alloc *a =
				    cnl_alloc_get(c, id);
				assert_non_null(a);
				assert_int_equal(a->project, r.project);
				kinds[a->kind]++;
				if (r.kind == CNL_REQ_WHOLE)
					assert_int_equal(
					    __builtin_popcount(a->gpu_mask),
					    r.gpus);
				if (r.kind == CNL_REQ_BLOCKS &&
				    a->kind != CNL_PLACE_MIG)
					assert_int_equal(
					    cnl_alloc_blocks_held(c, a),
					    r.blocks);
				if (r.kind == CNL_REQ_BLOCKS &&
				    a->kind == CNL_PLACE_MIG)
					assert_true(cnl_alloc_blocks_held(
					                c, a) >= r.blocks - 1);
			} else {
				(*refused)++;
			}
		} else if (k < 85) {
			what = "free";
			if (n_live == 0 || below(20) == 0) {
				rc = cnl_alloc_free(c, (uint32_t)next());
				assert_int_equal(rc, -CNL_ENOALLOC);
			} else {
				int i = below(n_live);
				rc = cnl_alloc_free(c, live[i]);
				assert_int_equal(rc, 0);
				live[i] = live[--n_live];
			}
		} else if (k < 90) {
			/* What-if: free some, restore in reverse, and the
			 * cluster is exactly as it was. */
			what = "free+restore";
			struct cnl_alloc saved[8];
			int m = n_live < 8 ? n_live : 1 + below(8);
			for (int j = 0; j < m; j++) {
				saved[j] = *cnl_alloc_get(c, live[j]);
				assert_int_equal(cnl_alloc_free(c, live[j]), 0);
			}
			check_or_fail(c, seed, op, what);
			for (int j = m; j-- > 0;)
				assert_int_equal(
				    cnl_alloc_restore(c, &saved[j]), 0);
			for (int j = 0; j < m; j++)
				assert_memory_equal(cnl_alloc_get(c, live[j]),
				                    &saved[j],
				                    sizeof(saved[j]));
			if (digest(c) != before)
				fail_msg("seed %llu op %d: restore differs",
				         (unsigned long long)seed, op);
			rc = 0;
		} else if (k < 96) {
			what = "resize";
			if (n_live == 0)
				continue;
			int i = below(n_live);
			int nb = below(10) ? 1 + below(30) : below(2) ? 0 : 200;
			rc = cnl_alloc_resize(c, live[i], nb);
		} else {
			what = "node state";
			uint32_t n = (uint32_t)below((int)c->n_nodes);
			rc = cnl_cluster_set_node_state(
			    c, n,
			    below(3) ? CNL_NODE_UP
			             : (enum cnl_node_state)below(4));
			before = digest(c); /* a state change is a change */
		}
		if (rc < 0 && digest(c) != before)
			fail_msg(
			    "seed %llu op %d: failed %s (%s) changed state",
			    (unsigned long long)seed, op, what,
			    cnl_strerror(rc));
		check_or_fail(c, seed, op, what);
	}
	/* Everything back: nothing leaks. */
	while (n_live > 0)
		assert_int_equal(cnl_alloc_free(c, live[--n_live]), 0);
	check_or_fail(c, seed, OPS, "final");
	assert_int_equal(c->n_allocs, 0);
	for (uint32_t i = 0; i < c->n_nodes; i++) {
		const struct cnl_node *n = &c->nodes[i];
		assert_int_equal(n->cpu_used, 0);
		assert_int_equal(n->mem_used, 0);
		assert_int_equal(n->n_empty, n->n_gpus);
		for (int g = 0; g < n->n_gpus; g++) {
			assert_int_equal(n->gpus[g].n_allocs, 0);
			assert_int_equal(n->gpus[g].n_inst, 0);
			assert_int_equal(
			    n->gpus[g].mask[0] | n->gpus[g].mask[1], 0);
			assert_int_equal(n->gpus[g].n_projs, 0);
		}
	}
	cnl_cluster_free(c);
}

static void test_random_sequences(void **state)
{
	int placed = 0, refused = 0;
	(void)state;
	for (uint64_t seed = 1; seed <= SEEDS; seed++)
		run_seed(seed, &placed, &refused);
	/* The run must exercise both outcomes, or it proves little. */
	print_message("placed %d, refused %d over %d operations\n", placed,
	              refused, SEEDS * OPS);
	print_message("blocks %d, mig %d, hosted %d, whole %d\n",
	              kinds[CNL_PLACE_BLOCKS], kinds[CNL_PLACE_MIG],
	              kinds[CNL_PLACE_MIG_BLOCKS], kinds[CNL_PLACE_WHOLE]);
	for (int k = 0; k < 5; k++)
		assert_true(kinds[k] > SEEDS * OPS / 200);
	assert_true(placed > SEEDS * OPS / 10);
	assert_true(refused > SEEDS * OPS / 20);
}

/* The checker is the oracle above; prove it sees each kind of damage. */
static void test_checker_detects_corruption(void **state)
{
	struct cnl_catalog cat;
	struct cnl_cluster *c;
	char err[256];
	uint32_t id1, id2;
	(void)state;
	cnl_catalog_init(&cat);
	assert_int_equal(cnl_cluster_new(&cat, &c), 0);
	add(c, &cat, "h0", "H100-80GB-SXM", 2);
	struct cnl_alloc_req b = {.kind = CNL_REQ_BLOCKS,
	                          .blocks = 10,
	                          .gpu_type = CNL_GPU_TYPE_ANY,
	                          .project = 1,
	                          .cpu_milli = 100};
	struct cnl_alloc_req m = b;
	m.project = 2;
	m.blocks = 25;
	assert_int_equal(cnl_alloc_place(c, &b, &id1), 0);
	assert_int_equal(cnl_alloc_place(c, &m, &id2), 0);
	assert_int_equal(cnl_cluster_check(c, err, sizeof(err)), 0);
	struct cnl_gpu *g0 = &c->nodes[0].gpus[0], *g1 = &c->nodes[0].gpus[1];
	struct {
		void *p;
		size_t size;
		uint64_t bad;
		const char *needle;
	} cases[] = {
	    {&g0->mask[0], 8, 0x7ff, "I1"},
	    {&g0->used, 1, 11, "I7"},
	    {&g1->inst[0].start, 1, 3, "I2"},
	    {&g1->sm_mask, 1, 0x7f, "I2"},
	    {&c->nodes[0].cpu_used, 8, 50, "I6"},
	    {&c->nodes[0].max_block_free, 1, 3, "I7"},
	    {&g0->projs[0].project, 4, 9, "I7"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t saved = 0;
		memcpy(&saved, cases[i].p, cases[i].size);
		memcpy(cases[i].p, &cases[i].bad, cases[i].size);
		err[0] = 0;
		assert_int_equal(cnl_cluster_check(c, err, sizeof(err)),
		                 -CNL_ECONFIG);
		if (!strstr(err, cases[i].needle))
			fail_msg("case %zu: \"%s\" lacks %s", i, err,
			         cases[i].needle);
		memcpy(cases[i].p, &saved, cases[i].size);
		assert_int_equal(cnl_cluster_check(c, err, sizeof(err)), 0);
	}
	/* Two allocations claiming one block. */
	struct cnl_alloc *a = (struct cnl_alloc *)cnl_alloc_get(c, id1);
	uint32_t node = a->node;
	uint8_t gpu = a->gpu;
	assert_int_equal(cnl_alloc_place(c, &b, &id2), 0);
	struct cnl_alloc *a2 = (struct cnl_alloc *)cnl_alloc_get(c, id2);
	assert_int_equal(a2->node, node);
	assert_int_equal(a2->gpu, gpu);
	uint64_t saved = a2->mask[0];
	a2->mask[0] = a->mask[0];
	assert_int_equal(cnl_cluster_check(c, err, sizeof(err)), -CNL_ECONFIG);
	assert_non_null(strstr(err, "promised twice"));
	a2->mask[0] = saved;
	assert_int_equal(cnl_cluster_check(c, err, sizeof(err)), 0);
	cnl_cluster_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_random_sequences),
	    cmocka_unit_test(test_checker_detects_corruption),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
