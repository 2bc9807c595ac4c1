/*
 * test_alloc.c - readable scenarios, one per allocator rule: blocks, the
 * tenant boundary (R1/R2), MIG profile choice and geometry, block hosting
 * in 1g instances (R3), whole-GPU gangs (R4), mode switching, resize, node
 * states, bin-packing, bad requests, and the fragmentation measure.  Every
 * test ends with the invariant checker.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "sched/alloc.h"

enum { PA = 1, PB = 2, PC = 3, PD = 4 };

struct fx {
	struct cnl_catalog cat;
	struct cnl_cluster *c;
};

static struct fx fx;

static int tidx(const char *name)
{
	int t = cnl_catalog_find(&fx.cat, name);
	assert_true(t >= 0);
	return t;
}

static int add_node(const char *name, const char *type, int gpus)
{
	struct cnl_node_spec s = {.name = name,
	                          .gpu_type = tidx(type),
	                          .n_gpus = gpus,
	                          .cpu_milli = 64000,
	                          .mem_mib = 512 * 1024,
	                          .cluster = "c1",
	                          .zone = "z1",
	                          .rack = "r1"};
	int r = cnl_cluster_add_node(fx.c, &s);
	assert_true(r >= 0);
	return r;
}

static int setup(void **state)
{
	(void)state;
	cnl_catalog_init(&fx.cat);
	assert_int_equal(cnl_cluster_new(&fx.cat, &fx.c), 0);
	return 0;
}

static void checked(void)
{
	char err[256] = "";
	int r = cnl_cluster_check(fx.c, err, sizeof(err));
	if (r != 0)
		fail_msg("invariant broken: %s", err);
}

static int teardown(void **state)
{
	(void)state;
	checked();
	cnl_cluster_free(fx.c);
	return 0;
}

static struct cnl_alloc_req blocks(uint32_t project, int n)
{
	return (struct cnl_alloc_req){.kind = CNL_REQ_BLOCKS,
	                              .blocks = n,
	                              .gpu_type = CNL_GPU_TYPE_ANY,
	                              .project = project};
}

static struct cnl_alloc_req mig(uint32_t project, const char *profile)
{
	return (struct cnl_alloc_req){.kind = CNL_REQ_MIG,
	                              .profile = profile,
	                              .gpu_type = CNL_GPU_TYPE_ANY,
	                              .project = project};
}

static struct cnl_alloc_req whole(uint32_t project, int gpus)
{
	return (struct cnl_alloc_req){.kind = CNL_REQ_WHOLE,
	                              .gpus = gpus,
	                              .gpu_type = CNL_GPU_TYPE_ANY,
	                              .project = project};
}

static const struct cnl_alloc *place(struct cnl_alloc_req r)
{
	uint32_t id = 0;
	int rc = cnl_alloc_place(fx.c, &r, &id);
	if (rc != 0)
		fail_msg("place failed: %s", cnl_strerror(rc));
	checked();
	return cnl_alloc_get(fx.c, id);
}

static int place_rc(struct cnl_alloc_req r)
{
	uint32_t id = 0;
	int rc = cnl_alloc_place(fx.c, &r, &id);
	checked();
	return rc;
}

static const char *profile_name(const struct cnl_alloc *a)
{
	const struct cnl_node *n = &fx.c->nodes[a->node];
	return fx.cat.types[n->gpu_type].mig[a->profile].name;
}

static const struct cnl_gpu *gpu(int node, int g)
{
	return &fx.c->nodes[node].gpus[g];
}

/* ---- blocks and R1 ---------------------------------------------------- */

static void test_blocks_basic(void **state)
{
	(void)state;
	add_node("n0", "H100-80GB-SXM", 2);
	const struct cnl_alloc *a = place(blocks(PA, 10));
	assert_int_equal(a->kind, CNL_PLACE_BLOCKS);
	assert_int_equal(a->gpu, 0);
	assert_int_equal(a->mask[0], (1ULL << 10) - 1); /* blocks 0..9 */
	assert_int_equal(gpu(0, 0)->mode, CNL_GPU_BLOCK);
	assert_int_equal(gpu(0, 0)->used, 10);
	assert_int_equal(cnl_alloc_vram_mib(fx.c, a), 81559 * 10 / 100);
	/* The minimum is one block. */
	a = place(blocks(PA, 1));
	assert_int_equal(a->mask[0], 1ULL << 10);
	assert_int_equal(gpu(0, 0)->used, 11);
	assert_int_equal(gpu(0, 1)->used, 0);
}

static void test_r1_small_slices_share_across_projects(void **state)
{
	(void)state;
	add_node("n0", "H100-80GB-SXM", 2);
	const struct cnl_alloc *a = place(blocks(PA, 10));
	const struct cnl_alloc *b = place(blocks(PB, 14));
	const struct cnl_alloc *c = place(blocks(PC, 5));
	/* Best fit packs all three on GPU 0. */
	assert_int_equal(a->gpu, 0);
	assert_int_equal(b->gpu, 0);
	assert_int_equal(c->gpu, 0);
	assert_int_equal(b->kind, CNL_PLACE_BLOCKS);
	assert_int_equal(gpu(0, 0)->used, 29);
	assert_int_equal(gpu(0, 0)->n_projs, 3);
}

/* 100 students, one block each, on one GPU. */
static void test_hundred_tenants_on_one_gpu(void **state)
{
	(void)state;
	add_node("n0", "L40S", 1);
	for (uint32_t p = 1; p <= 100; p++)
		assert_int_equal(place(blocks(p, 1))->gpu, 0);
	assert_int_equal(gpu(0, 0)->used, 100);
	assert_int_equal(place_rc(blocks(101, 1)), -CNL_ENOSPACE);
}

/* ---- R2: the tenant boundary ------------------------------------------ */

static void test_r2_big_slice_gets_mig(void **state)
{
	(void)state;
	add_node("n0", "H100-80GB-SXM", 2);
	place(blocks(PA, 10));
	/* 25% for another project: MIG 2g.20gb on the empty GPU. */
	const struct cnl_alloc *b = place(blocks(PB, 25));
	assert_int_equal(b->kind, CNL_PLACE_MIG);
	assert_int_equal(b->gpu, 1);
	assert_string_equal(profile_name(b), "2g.20gb");
	assert_int_equal(gpu(0, 1)->mode, CNL_GPU_MIG);
	/* 50% for a third project: 4g.40gb next to it. */
	const struct cnl_alloc *c = place(blocks(PC, 50));
	assert_int_equal(c->kind, CNL_PLACE_MIG);
	assert_int_equal(c->gpu, 1);
	assert_string_equal(profile_name(c), "4g.40gb");
	assert_int_equal(c->start, 0);
	assert_int_equal(cnl_alloc_blocks_held(fx.c, c), 57);
	assert_int_equal(cnl_alloc_vram_mib(fx.c, c), 40448);
	/* Block-mode GPU 0 keeps serving small slices. */
	assert_int_equal(place(blocks(PD, 10))->gpu, 0);
}

static void test_r2_big_slice_even_on_empty_cluster_is_mig(void **state)
{
	(void)state;
	add_node("n0", "H100-80GB-SXM", 1);
	const struct cnl_alloc *a = place(blocks(PA, 25));
	assert_int_equal(a->kind, CNL_PLACE_MIG);
	assert_string_equal(profile_name(a), "2g.20gb");
	/* The rest of the GPU stays open to other tenants, behind MIG. */
	const struct cnl_alloc *b = place(blocks(PB, 40));
	assert_string_equal(profile_name(b), "3g.40gb");
}

static void test_r2_same_project_may_use_blocks(void **state)
{
	(void)state;
	add_node("n0", "H100-80GB-SXM", 1);
	place(blocks(PA, 10));
	/* No tenant boundary is crossed: blocks beside its own slice. */
	const struct cnl_alloc *a = place(blocks(PA, 25));
	assert_int_equal(a->kind, CNL_PLACE_BLOCKS);
	assert_int_equal(gpu(0, 0)->used, 35);
	assert_int_equal(gpu(0, 0)->big, 1);
	/* While it lives the GPU takes no other project, even small. */
	assert_int_equal(place_rc(blocks(PB, 1)), -CNL_ENOSPACE);
	assert_int_equal(place(blocks(PA, 5))->gpu, 0);
	cnl_alloc_free(fx.c, a->id);
	checked();
	assert_int_equal(place(blocks(PB, 1))->gpu, 0);
}

static void test_r2_without_mig_takes_an_empty_gpu(void **state)
{
	(void)state;
	add_node("n0", "L40S", 2);
	place(blocks(PA, 5));
	const struct cnl_alloc *b = place(blocks(PB, 30));
	assert_int_equal(b->kind, CNL_PLACE_BLOCKS);
	assert_int_equal(b->gpu, 1);
	/* No GPU left that B's 30% could have without sharing. */
	assert_int_equal(place_rc(blocks(PC, 30)), -CNL_ENOSPACE);
	/* Small slices of others still fit GPU 0 (R1), not GPU 1 (R2). */
	assert_int_equal(place(blocks(PC, 10))->gpu, 0);
}

static void test_mode_switch_only_when_empty(void **state)
{
	(void)state;
	add_node("n0", "H100-80GB-SXM", 1);
	const struct cnl_alloc *a = place(blocks(PA, 1));
	/* The GPU is in block mode with A on it: B's 25% has nowhere. */
	assert_int_equal(place_rc(blocks(PB, 25)), -CNL_ENOSPACE);
	assert_int_equal(gpu(0, 0)->mode, CNL_GPU_BLOCK);
	assert_int_equal(cnl_alloc_free(fx.c, a->id), 0);
	/* Empty now: it switches to MIG. */
	assert_int_equal(place(blocks(PB, 25))->kind, CNL_PLACE_MIG);
	assert_int_equal(gpu(0, 0)->mode, CNL_GPU_MIG);
	/* And a MIG GPU takes no plain blocks. */
	assert_int_equal(place(blocks(PA, 5))->kind, CNL_PLACE_MIG_BLOCKS);
}

/* ---- MIG geometry ----------------------------------------------------- */

static void test_mig_geometry_1g(void **state)
{
	uint8_t starts = 0;
	(void)state;
	add_node("n0", "H100-80GB-SXM", 1);
	for (int i = 0; i < 7; i++) {
		const struct cnl_alloc *a =
		    place(mig(PA + (uint32_t)i, "1g.10gb"));
		assert_int_equal(a->kind, CNL_PLACE_MIG);
		starts |= (uint8_t)(1u << a->start);
	}
	assert_int_equal(starts, 0x7f);
	assert_int_equal(gpu(0, 0)->sm_mask, 0x7f);
	assert_int_equal(place_rc(mig(PA, "1g.10gb")), -CNL_ENOSPACE);
}

static void test_mig_geometry_limits(void **state)
{
	(void)state;
	add_node("n0", "H100-80GB-SXM", 1);
	/* 1g.20gb: at most 4, at starts 0, 2, 4, 6. */
	for (int i = 0; i < 4; i++) {
		const struct cnl_alloc *a = place(mig(PA, "1g.20gb"));
		assert_int_equal(a->start % 2, 0);
	}
	assert_int_equal(place_rc(mig(PA, "1g.20gb")), -CNL_ENOSPACE);
	/* Memory is full (8 of 8 slices); even 1g.10gb is refused. */
	assert_int_equal(gpu(0, 0)->mem_mask, 0xff);
	assert_int_equal(place_rc(mig(PA, "1g.10gb")), -CNL_ENOSPACE);
}

static void test_mig_small_first_keeps_room_for_big(void **state)
{
	(void)state;
	add_node("n0", "H100-80GB-SXM", 1);
	const struct cnl_alloc *a = place(mig(PA, "1g.10gb"));
	/* A lone 1g goes to a high slot so that 4g still fits at 0. */
	assert_true(a->start >= 4);
	const struct cnl_alloc *b = place(mig(PB, "4g.40gb"));
	assert_int_equal(b->start, 0);
	/* 3g.40gb would need slots 4..7: one is taken. */
	assert_int_equal(place_rc(mig(PC, "3g.40gb")), -CNL_ENOSPACE);
	assert_int_equal(place(mig(PC, "2g.20gb"))->kind, CNL_PLACE_MIG);
}

static void test_mig_3g_plus_4g(void **state)
{
	(void)state;
	add_node("n0", "A100-40GB", 1);
	const struct cnl_alloc *a = place(mig(PA, "3g.20gb"));
	const struct cnl_alloc *b = place(mig(PB, "4g.20gb"));
	assert_int_equal(b->start, 0);
	assert_int_equal(a->start, 4);
	assert_int_equal(gpu(0, 0)->sm_mask, 0x7f);
	assert_int_equal(place_rc(mig(PC, "1g.5gb")), -CNL_ENOSPACE);
}

static void test_mig_teardown(void **state)
{
	(void)state;
	add_node("n0", "H100-80GB-SXM", 1);
	const struct cnl_alloc *a = place(mig(PA, "3g.40gb"));
	uint32_t id = a->id;
	assert_int_equal(gpu(0, 0)->n_inst, 1);
	assert_int_equal(cnl_alloc_free(fx.c, id), 0);
	checked();
	assert_int_equal(gpu(0, 0)->n_inst, 0);
	assert_int_equal(gpu(0, 0)->mem_mask, 0);
	assert_int_equal(gpu(0, 0)->mode, CNL_GPU_BLOCK);
	/* A whole GPU is possible again. */
	assert_int_equal(place(whole(PB, 1))->kind, CNL_PLACE_WHOLE);
}

/* ---- R3: blocks in 1g host instances ---------------------------------- */

static void test_r3_blocks_in_host_instance(void **state)
{
	(void)state;
	add_node("n0", "H100-80GB-SXM", 1);
	place(blocks(PA, 25)); /* turns the GPU to MIG */
	const struct cnl_alloc *c1 = place(blocks(PC, 5));
	assert_int_equal(c1->kind, CNL_PLACE_MIG_BLOCKS);
	assert_string_equal(profile_name(c1), "1g.20gb");
	assert_int_equal(c1->mask[0], 0x1f);
	/* The same project's next slice joins that instance. */
	const struct cnl_alloc *c2 = place(blocks(PC, 9));
	assert_int_equal(c2->kind, CNL_PLACE_MIG_BLOCKS);
	assert_int_equal(c2->start, c1->start);
	assert_int_equal(gpu(0, 0)->n_inst, 2);
	/* 14 blocks is the limit: a third goes to a new instance. */
	const struct cnl_alloc *c3 = place(blocks(PC, 1));
	assert_int_not_equal(c3->start, c1->start);
	/* Another project never joins C's instance. */
	const struct cnl_alloc *d = place(blocks(PD, 1));
	assert_int_not_equal(d->start, c1->start);
	assert_int_not_equal(d->start, c3->start);
	assert_int_equal(gpu(0, 0)->n_inst, 4);
	/* Emptying an instance tears it down. */
	uint32_t c3id = c3->id, did = d->id;
	cnl_alloc_free(fx.c, did);
	cnl_alloc_free(fx.c, c3id);
	checked();
	assert_int_equal(gpu(0, 0)->n_inst, 2);
}

/* ---- R4: whole GPUs --------------------------------------------------- */

static void test_whole_gpu_gang(void **state)
{
	(void)state;
	add_node("n0", "A100-80GB", 4);
	add_node("n1", "A100-80GB", 2);
	place(blocks(PA, 1)); /* n0 or n1 GPU 0 partly used */
	/* A gang of 3 needs 3 empty GPUs on one node. */
	const struct cnl_alloc *a = place(whole(PB, 3));
	assert_int_equal(a->kind, CNL_PLACE_WHOLE);
	assert_int_equal(__builtin_popcount(a->gpu_mask), 3);
	assert_int_equal(a->node, 0);
	assert_int_equal(cnl_alloc_blocks_held(fx.c, a), 300);
	/* 2 GPUs free on n1 and none on n0: a gang of 3 fails whole,
	 * and nothing is taken. */
	int before = fx.c->nodes[1].n_empty;
	assert_int_equal(place_rc(whole(PC, 3)), -CNL_ENOSPACE);
	assert_int_equal(fx.c->nodes[1].n_empty, before);
	assert_int_equal(place(whole(PC, 2))->node, 1);
	assert_int_equal(place_rc(whole(PC, 0)), -CNL_EGANG);
	assert_int_equal(place_rc(whole(PC, 17)), -CNL_EGANG);
}

static void test_whole_gpu_best_fit(void **state)
{
	(void)state;
	add_node("big", "H100-80GB-SXM", 8);
	add_node("small", "H100-80GB-SXM", 2);
	/* Both empty: a gang of 2 fits "small" exactly. */
	assert_int_equal(place(whole(PA, 2))->node, 1);
}

/* ---- resize ----------------------------------------------------------- */

static void test_resize(void **state)
{
	(void)state;
	add_node("n0", "H100-80GB-SXM", 1);
	const struct cnl_alloc *a = place(blocks(PA, 5));
	const struct cnl_alloc *b = place(blocks(PB, 10));
	uint32_t ida = a->id;
	assert_int_equal(cnl_alloc_resize(fx.c, ida, 12), 0);
	checked();
	assert_int_equal(a->blocks, 12);
	assert_int_equal(gpu(0, 0)->used, 22);
	assert_int_equal(cnl_alloc_resize(fx.c, ida, 3), 0);
	checked();
	assert_int_equal(gpu(0, 0)->used, 13);
	/* Growing past 14 with B on the GPU would cross the boundary. */
	assert_int_equal(cnl_alloc_resize(fx.c, ida, 20), -CNL_ETENANT);
	assert_int_equal(a->blocks, 3);
	assert_int_equal(cnl_alloc_resize(fx.c, ida, 0), -CNL_EBLOCKS);
	assert_int_equal(cnl_alloc_resize(fx.c, ida, 101), -CNL_EBLOCKS);
	assert_int_equal(cnl_alloc_resize(fx.c, ida, -3), -CNL_ESIZE);
	/* B alone: may grow to 90 (100 - A's 3 = 97 free to it). */
	uint32_t idb = b->id;
	assert_int_equal(cnl_alloc_free(fx.c, ida), 0);
	assert_int_equal(cnl_alloc_resize(fx.c, idb, 100), 0);
	checked();
	assert_int_equal(gpu(0, 0)->big, 1);
	assert_int_equal(place_rc(blocks(PA, 1)), -CNL_ENOSPACE);
	assert_int_equal(cnl_alloc_resize(fx.c, idb, 14), 0);
	checked();
	assert_int_equal(gpu(0, 0)->big, 0);
	assert_int_equal(place(blocks(PA, 1))->gpu, 0);
}

static void test_resize_no_room(void **state)
{
	(void)state;
	add_node("n0", "L4", 1);
	const struct cnl_alloc *a = place(blocks(PA, 10));
	place(blocks(PA, 85));
	uint32_t id = a->id;
	assert_int_equal(cnl_alloc_resize(fx.c, id, 16), -CNL_ENOSPACE);
	assert_int_equal(cnl_alloc_resize(fx.c, id, 15), 0);
	checked();
	assert_int_equal(gpu(0, 0)->used, 100);
}

/*
 * In place, as an in-flight resize needs (the slice's processes keep
 * running on the blocks they have): growing keeps every block held and
 * adds free ones; shrinking keeps a subset and gives the rest back, which
 * other work may then take; a refused grow changes nothing; and the
 * shrunk record adopts back (a restarted control plane) to the same
 * blocks.
 */
static void test_resize_in_place(void **state)
{
	(void)state;
	add_node("n0", "L4", 1);
	const struct cnl_alloc *a = place(blocks(PA, 10));
	uint32_t id = a->id;
	uint64_t before[2] = {a->mask[0], a->mask[1]};
	struct cnl_alloc saved;
	uint32_t back;

	place(blocks(PA, 20));
	assert_int_equal(cnl_alloc_resize(fx.c, id, 40), 0);
	checked();
	a = cnl_alloc_get(fx.c, id);
	assert_int_equal(a->mask[0] & before[0], before[0]);
	assert_int_equal(a->mask[1] & before[1], before[1]);
	assert_int_equal(gpu(0, 0)->used, 60);
	before[0] = a->mask[0];
	before[1] = a->mask[1];
	/* No room for 81: nothing changes. */
	assert_int_equal(cnl_alloc_resize(fx.c, id, 81), -CNL_ENOSPACE);
	a = cnl_alloc_get(fx.c, id);
	assert_int_equal(a->mask[0], before[0]);
	assert_int_equal(a->mask[1], before[1]);
	assert_int_equal(gpu(0, 0)->used, 60);
	/* Shrink to 5: a subset of what it held; 75 free for others. */
	assert_int_equal(cnl_alloc_resize(fx.c, id, 5), 0);
	checked();
	a = cnl_alloc_get(fx.c, id);
	assert_int_equal(a->mask[0] & ~before[0], 0);
	assert_int_equal(a->mask[1] & ~before[1], 0);
	assert_int_equal(cnl_gpu_free_blocks(fx.c, 0, 0), 75);
	assert_int_equal(place(blocks(PA, 75))->gpu, 0);
	checked();
	/* The shrunk record adopts back to the same blocks. */
	saved = *a;
	assert_int_equal(cnl_alloc_free(fx.c, id), 0);
	assert_int_equal(cnl_alloc_adopt(fx.c, &saved, &back), 0);
	checked();
	assert_int_equal(cnl_alloc_get(fx.c, back)->mask[0], saved.mask[0]);
	assert_int_equal(cnl_alloc_get(fx.c, back)->mask[1], saved.mask[1]);
}

static void test_resize_host_and_kinds(void **state)
{
	(void)state;
	add_node("n0", "H100-80GB-SXM", 1);
	const struct cnl_alloc *m = place(blocks(PA, 25));
	const struct cnl_alloc *h = place(blocks(PB, 5));
	uint32_t mid = m->id, hid = h->id;
	assert_int_equal(cnl_alloc_resize(fx.c, mid, 30), -CNL_EKIND);
	assert_int_equal(cnl_alloc_resize(fx.c, hid, 14), 0);
	checked();
	assert_int_equal(cnl_alloc_resize(fx.c, hid, 15), -CNL_ENOSPACE);
	assert_int_equal(cnl_alloc_resize(fx.c, hid, 2), 0);
	checked();
	assert_int_equal(cnl_alloc_get(fx.c, hid)->mask[0], 0x3);
}

/* ---- nodes, CPU, memory, type, bin-packing ---------------------------- */

static void test_node_state_cpu_mem_type(void **state)
{
	(void)state;
	int a100 = add_node("a", "A100-80GB", 1);
	int h100 = add_node("h", "H100-80GB-SXM", 1);
	struct cnl_alloc_req r = blocks(PA, 5);
	r.gpu_type = tidx("H100-80GB-SXM");
	assert_int_equal(place(r)->node, h100);
	cnl_cluster_set_node_state(fx.c, (uint32_t)h100, CNL_NODE_CORDONED);
	assert_int_equal(place_rc(r), -CNL_ENOSPACE);
	r.gpu_type = CNL_GPU_TYPE_ANY;
	assert_int_equal(place(r)->node, a100);
	cnl_cluster_set_node_state(fx.c, (uint32_t)h100, CNL_NODE_UP);
	r.cpu_milli = 64001; /* more than any node has */
	assert_int_equal(place_rc(r), -CNL_ENOSPACE);
	r.cpu_milli = 60000;
	r.mem_mib = 400 * 1024;
	const struct cnl_alloc *x = place(r);
	assert_int_equal(fx.c->nodes[x->node].cpu_used, 60000);
	/* That node has 4000 milli-cores left. */
	r.cpu_milli = 5000;
	r.mem_mib = 0;
	assert_int_not_equal(place(r)->node, x->node);
}

static void test_bin_packing_prefers_used_nodes(void **state)
{
	(void)state;
	for (int i = 0; i < 4; i++) {
		char name[8] = {'n', (char)('0' + i), 0};
		add_node(name, "H100-80GB-SXM", 2);
	}
	const struct cnl_alloc *a = place(blocks(PA, 40));
	/* Later slices join the node in use instead of opening another. */
	for (int i = 0; i < 5; i++)
		assert_int_equal(place(blocks(PB + (uint32_t)i, 10))->node,
		                 a->node);
}

/* ---- bad requests change nothing -------------------------------------- */

static void test_bad_requests(void **state)
{
	(void)state;
	add_node("n0", "H100-80GB-SXM", 1);
	add_node("l", "L40S", 1);
	place(blocks(PA, 5));
	struct cnl_alloc_req r;
	struct {
		struct cnl_alloc_req req;
		int code;
	} bad[] = {
	    {blocks(PA, 0), -CNL_EBLOCKS},  {blocks(PA, 101), -CNL_EBLOCKS},
	    {blocks(PA, -4), -CNL_ESIZE},   {mig(PA, "5g.50gb"), -CNL_EPROFILE},
	    {mig(PA, NULL), -CNL_EPROFILE}, {whole(PA, -1), -CNL_ESIZE},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(place_rc(bad[i].req), bad[i].code);
	r = mig(PA, "2g.20gb");
	r.gpu_type = tidx("L40S");
	assert_int_equal(place_rc(r), -CNL_ENOMIG);
	r = blocks(PA, 5);
	r.cpu_milli = -1;
	assert_int_equal(place_rc(r), -CNL_ESIZE);
	r.cpu_milli = 0;
	r.mem_mib = -1;
	assert_int_equal(place_rc(r), -CNL_ESIZE);
	r.mem_mib = 0;
	r.gpu_type = 99;
	assert_int_equal(place_rc(r), -CNL_EGPUTYPE);
	/* Nothing changed. */
	assert_int_equal(fx.c->n_allocs, 1);
	assert_int_equal(gpu(0, 0)->used, 5);
	assert_int_equal(cnl_alloc_free(fx.c, 12345), -CNL_ENOALLOC);
	assert_int_equal(cnl_alloc_resize(fx.c, 0, 5), -CNL_ENOALLOC);
}

static void test_double_free_and_stale_plan(void **state)
{
	struct cnl_req_prep p;
	struct cnl_plan pl;
	uint32_t id, id2;
	(void)state;
	add_node("n0", "L4", 1);
	struct cnl_alloc_req r = blocks(PA, 60);
	assert_int_equal(cnl_alloc_prepare(fx.c, &r, &p), 0);
	assert_int_equal(cnl_alloc_plan(fx.c, &p, &pl), 0);
	/* Someone else takes the GPU between plan and commit. */
	struct cnl_alloc_req other = blocks(PB, 50);
	assert_int_equal(cnl_alloc_place(fx.c, &other, &id), 0);
	assert_int_equal(cnl_alloc_commit(fx.c, &p, &pl, &id2), -CNL_ENOSPACE);
	assert_int_equal(fx.c->n_allocs, 1);
	assert_int_equal(cnl_alloc_free(fx.c, id), 0);
	assert_int_equal(cnl_alloc_free(fx.c, id), -CNL_ENOALLOC);
	/* The reused slot gets a new id; the old one stays dead. */
	assert_int_equal(cnl_alloc_place(fx.c, &other, &id2), 0);
	assert_int_not_equal(id, id2);
	assert_null(cnl_alloc_get(fx.c, id));
	assert_int_equal(cnl_alloc_free(fx.c, id), -CNL_ENOALLOC);
}

static void test_node_errors(void **state)
{
	(void)state;
	struct cnl_node_spec s = {
	    .name = "n0", .gpu_type = 0, .n_gpus = 1, .cpu_milli = 1};
	assert_int_equal(cnl_cluster_add_node(fx.c, &s), 0);
	assert_int_equal(cnl_cluster_add_node(fx.c, &s), -CNL_EDUP);
	s.name = "n1";
	s.n_gpus = 17;
	assert_int_equal(cnl_cluster_add_node(fx.c, &s), -CNL_ESIZE);
	s.n_gpus = 1;
	s.cpu_milli = -1;
	assert_int_equal(cnl_cluster_add_node(fx.c, &s), -CNL_ESIZE);
	s.cpu_milli = 1;
	s.gpu_type = 500;
	assert_int_equal(cnl_cluster_add_node(fx.c, &s), -CNL_EGPUTYPE);
	s.gpu_type = 0;
	s.rack = "a-rack-label-that-is-far-too-long-to-keep";
	assert_int_equal(cnl_cluster_add_node(fx.c, &s), -CNL_ELIMIT);
	assert_int_equal(fx.c->n_nodes, 1);
	assert_int_equal(cnl_cluster_find_node(fx.c, "n0"), 0);
	assert_int_equal(cnl_cluster_find_node(fx.c, "n1"), -CNL_ENODE);
	assert_int_equal(cnl_cluster_set_node_state(fx.c, 7, CNL_NODE_UP),
	                 -CNL_ENODE);
}

static void test_node_labels(void **state)
{
	(void)state;
	struct cnl_node_spec s = {.name = "gpu-17",
	                          .gpu_type = tidx("H200-141GB"),
	                          .n_gpus = 8,
	                          .cpu_milli = 96000,
	                          .mem_mib = 2048 * 1024,
	                          .cluster = "seoul",
	                          .zone = "dc2",
	                          .rack = "r42",
	                          .datasets = {"imagenet", "laion-5b", NULL}};
	int i = cnl_cluster_add_node(fx.c, &s);
	assert_int_equal(i, 0);
	const struct cnl_node *n = &fx.c->nodes[i];
	assert_string_equal(n->cluster, "seoul");
	assert_string_equal(n->zone, "dc2");
	assert_string_equal(n->rack, "r42");
	assert_int_equal(n->n_datasets, 2);
	assert_string_equal(n->datasets[1], "laion-5b");
	assert_int_equal(n->state, CNL_NODE_UP);
	assert_int_equal(n->cpu_total, 96000);
	assert_int_equal(n->n_empty, 8);
	/* New labels replace the old ones whole; a bad one changes none. */
	char longname[CNL_DATASET_MAX + 1];
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	struct cnl_node_spec relabel = {.zone = "dc3",
	                                .datasets = {"coco", longname, NULL}};
	assert_int_equal(cnl_cluster_set_node_labels(fx.c, 0, &relabel),
	                 -CNL_ELIMIT);
	assert_string_equal(n->zone, "dc2");
	assert_int_equal(n->n_datasets, 2);
	relabel.datasets[1] = NULL;
	assert_int_equal(cnl_cluster_set_node_labels(fx.c, 0, &relabel), 0);
	assert_string_equal(n->zone, "dc3");
	assert_string_equal(n->cluster, "");
	assert_int_equal(n->n_datasets, 1);
	assert_string_equal(n->datasets[0], "coco");
	assert_int_equal(cnl_cluster_set_node_labels(fx.c, 9, &relabel),
	                 -CNL_ENODE);
	assert_int_equal(cnl_cluster_set_node_others(fx.c, 9, 0, 0),
	                 -CNL_ENODE);
	/* A CPU-only node: no GPU type needed, never picked for GPUs. */
	struct cnl_node_spec cpu = {
	    .name = "cpu-1", .gpu_type = -1, .cpu_milli = 8000};
	assert_int_equal(cnl_cluster_add_node(fx.c, &cpu), 1);
	assert_int_equal(place(blocks(PA, 5))->node, 0);
}

static void test_cpu_only_and_type_sets(void **state)
{
	(void)state;
	add_node("gpu", "H100-80GB-SXM", 1);
	struct cnl_node_spec cpu = {
	    .name = "cpu", .gpu_type = -1, .cpu_milli = 8000, .mem_mib = 1024};
	assert_int_equal(cnl_cluster_add_node(fx.c, &cpu), 1);
	struct cnl_alloc_req r = {.kind = CNL_REQ_CPU,
	                          .gpu_type = CNL_GPU_TYPE_ANY,
	                          .project = PA,
	                          .cpu_milli = 6000,
	                          .mem_mib = 512};
	/* CPU work goes to the CPU-only node first... */
	const struct cnl_alloc *a = place(r);
	assert_int_equal(a->kind, CNL_PLACE_CPU);
	assert_int_equal(a->node, 1);
	assert_int_equal(cnl_alloc_blocks_held(fx.c, a), 0);
	/* ...and to a GPU node when that one is full. */
	assert_int_equal(place(r)->node, 0);
	assert_int_equal(gpu(0, 0)->n_allocs, 0);
	assert_int_equal(cnl_alloc_resize(fx.c, a->id, 5), -CNL_EKIND);
	/* A set of allowed types. */
	add_node("a100", "A100-80GB", 1);
	struct cnl_alloc_req b = blocks(PB, 5);
	b.gpu_types = 1ULL << tidx("A100-80GB") | 1ULL << tidx("L4");
	assert_int_equal(place(b)->node, 2);
	b.gpu_types = 1ULL << tidx("L4");
	assert_int_equal(place_rc(b), -CNL_ENOSPACE);
}

/* A request's node set: only those nodes, and none past its length. */
static void test_node_set(void **state)
{
	(void)state;
	add_node("n0", "L4", 1);
	add_node("n1", "L4", 1);
	add_node("n2", "L4", 1);
	uint64_t bits = 1u << 2 | 1u << 1;
	struct cnl_node_set set = {&bits, 3};
	struct cnl_alloc_req r = blocks(PA, 10);
	r.nodes = &set;
	/* n0 would be the first pick of an empty cluster. */
	assert_int_equal(place(blocks(PB, 10))->node, 0);
	assert_int_not_equal(place(r)->node, 0);
	bits = 1u << 1;
	assert_int_equal(place(r)->node, 1);
	set.len = 1; /* n1 lies past it: not in the set */
	assert_int_equal(place_rc(r), -CNL_ENOSPACE);
	bits = 0;
	set.len = 3;
	assert_int_equal(place_rc(r), -CNL_ENOSPACE);
	r.nodes = NULL;
	assert_int_equal(place_rc(r), 0);
}

/* CPU and memory that work CNLab did not place holds (the pods of other
 * Kubernetes schedulers) are used: placement leaves them alone, and they
 * may overcommit the node without breaking the invariants. */
static void test_others_hold(void **state)
{
	(void)state;
	struct cnl_node_spec a = {.name = "a",
	                          .gpu_type = -1,
	                          .cpu_milli = 8000,
	                          .mem_mib = 8192},
	                     b = a;
	b.name = "b";
	assert_int_equal(cnl_cluster_add_node(fx.c, &a), 0);
	assert_int_equal(cnl_cluster_add_node(fx.c, &b), 1);
	struct cnl_alloc_req r = {.kind = CNL_REQ_CPU,
	                          .gpu_type = CNL_GPU_TYPE_ANY,
	                          .project = PA,
	                          .cpu_milli = 6000,
	                          .mem_mib = 1024};
	/* Node a is the first pick, until others hold 3 of its cores. */
	assert_int_equal(cnl_cluster_set_node_others(fx.c, 0, 3000, 0), 0);
	assert_int_equal(place(r)->node, 1);
	checked();
	/* Now b is full too; memory held by others counts the same. */
	assert_int_equal(cnl_cluster_set_node_others(fx.c, 0, 0, 7500), 0);
	assert_int_equal(place_rc(r), -CNL_ENOSPACE);
	assert_int_equal(cnl_cluster_set_node_others(fx.c, 0, 0, 0), 0);
	const struct cnl_alloc *x = place(r);
	uint32_t xid = x->id;
	assert_int_equal(x->node, 0);
	/* Others came after CNLab's work: overcommitted, still sound, and
	 * nothing more fits until they go. */
	assert_int_equal(cnl_cluster_set_node_others(fx.c, 0, 7000, 9000), 0);
	assert_int_equal(fx.c->nodes[0].cpu_used, 6000);
	checked();
	/* What CNLab placed there stays placed: freed and put back (as a
	 * what-if does), it fits again. */
	{
		struct cnl_alloc saved = *cnl_alloc_get(fx.c, xid);
		assert_int_equal(cnl_alloc_free(fx.c, xid), 0);
		assert_int_equal(cnl_alloc_restore(fx.c, &saved), 0);
		checked();
	}
	r.cpu_milli = 100;
	r.mem_mib = 1;
	assert_int_equal(place(r)->node, 1);
	assert_int_equal(cnl_alloc_free(fx.c, xid), 0);
	assert_int_equal(fx.c->nodes[0].cpu_used, 0);
	assert_int_equal(cnl_cluster_set_node_others(fx.c, 0, -1, 0),
	                 -CNL_ESIZE);
	assert_int_equal(fx.c->nodes[0].cpu_others, 7000);
	checked();
}

/* A node's limit on workloads (a Kubernetes node's allocatable pods),
 * CNLab's and others' together: a full node takes nothing more, whatever
 * CPU and GPU it has left; others over the limit break nothing. */
static void test_pods_limit(void **state)
{
	(void)state;
	add_node("a", "H100-80GB-SXM", 2);
	add_node("b", "H100-80GB-SXM", 2);
	/* a: 3 pods at most, 2 of them others'. */
	assert_int_equal(cnl_cluster_set_node_pods(fx.c, 0, 3, 2), 0);
	assert_int_equal(fx.c->hot[0].slots_free, 1);
	const struct cnl_alloc *x = place(blocks(PA, 10));
	uint32_t xid = x->id;
	assert_int_equal(x->node, 0);
	checked();
	/* a is full: the next goes to b, with a's GPUs nearly empty. */
	assert_int_equal(fx.c->hot[0].slots_free, 0);
	assert_int_equal(place(blocks(PA, 10))->node, 1);
	/* Others grew past the limit: still sound, still full. */
	assert_int_equal(cnl_cluster_set_node_pods(fx.c, 0, 3, 5), 0);
	checked();
	assert_int_equal(fx.c->hot[0].slots_free, 0);
	/* What CNLab placed stays placed: freed and put back, it fits. */
	{
		struct cnl_alloc saved = *cnl_alloc_get(fx.c, xid);
		assert_int_equal(cnl_alloc_free(fx.c, xid), 0);
		assert_int_equal(cnl_alloc_restore(fx.c, &saved), 0);
		checked();
	}
	/* b full too (1 pod, CNLab's): nothing fits anywhere. */
	assert_int_equal(cnl_cluster_set_node_pods(fx.c, 1, 1, 0), 0);
	assert_int_equal(place_rc(blocks(PA, 10)), -CNL_ENOSPACE);
	/* Others' pods end on a: room for one again. */
	assert_int_equal(cnl_cluster_set_node_pods(fx.c, 0, 3, 1), 0);
	assert_int_equal(place(blocks(PA, 10))->node, 0);
	/* No limit (0): any number. */
	assert_int_equal(cnl_cluster_set_node_pods(fx.c, 1, 0, 0), 0);
	assert_int_equal(fx.c->hot[1].slots_free, INT32_MAX);
	for (int i = 0; i < 5; i++)
		assert_int_equal(place(blocks(PA, 10))->node, 1);
	checked();
	assert_int_equal(cnl_cluster_set_node_pods(fx.c, 0, -1, 0), -CNL_ESIZE);
	assert_int_equal(cnl_cluster_set_node_pods(fx.c, 9, 1, 0), -CNL_ENODE);
	assert_int_equal(fx.c->nodes[0].pods_max, 3);
}

/* ---- fragmentation ---------------------------------------------------- */

static void test_fragmentation(void **state)
{
	struct cnl_task_mix mix;
	(void)state;
	add_node("n0", "L4", 2);
	memset(&mix, 0, sizeof(mix));
	mix.n = 2;
	mix.t[0].kind = CNL_REQ_BLOCKS;
	mix.t[0].blocks = 10;
	mix.t[0].weight = 1;
	mix.t[1].kind = CNL_REQ_BLOCKS;
	mix.t[1].blocks = 1;
	mix.t[1].weight = 1;
	/* Empty: every task fits, nothing is fragmented. */
	assert_true(cnl_frag_node(fx.c, 0, &mix) == 0.0);
	place(blocks(PA, 95));
	/* GPU 0 has 5 free blocks: the 10-block half of the mix cannot use
	 * them, the 1-block half can. */
	assert_true(cnl_frag_gpu(fx.c, 0, 0, &mix) == 2.5);
	assert_true(cnl_frag_gpu(fx.c, 0, 1, &mix) == 0.0);
	assert_true(cnl_frag_node(fx.c, 0, &mix) == 2.5);
	/* A task too big for the node's CPU finds all of it unusable. */
	mix.t[1].cpu_milli = 1000000;
	assert_true(cnl_frag_node(fx.c, 0, &mix) == (5.0 + 105.0) / 2);
	/* Whole-GPU tasks cannot use partly used GPUs. */
	mix.n = 1;
	mix.t[0].kind = CNL_REQ_WHOLE;
	mix.t[0].gpus = 1;
	assert_true(cnl_frag_node(fx.c, 0, &mix) == 5.0);
	mix.t[0].gpus = 2;
	assert_true(cnl_frag_node(fx.c, 0, &mix) == 105.0);
	cnl_task_mix_default(&mix);
	assert_true(mix.n > 0);
	assert_true(cnl_frag_node(fx.c, 0, &mix) > 0);
}

static void test_fragmentation_mig(void **state)
{
	struct cnl_task_mix mix;
	(void)state;
	add_node("n0", "H100-80GB-SXM", 1);
	memset(&mix, 0, sizeof(mix));
	mix.n = 1;
	mix.t[0].kind = CNL_REQ_BLOCKS;
	mix.t[0].blocks = 50; /* needs a 4g at start 0 */
	mix.t[0].weight = 1;
	place(mig(PA, "3g.40gb")); /* lands at 4 or 0 */
	/* 4 compute slices are free, but if 3g took start 0 no 4g fits. */
	double f = cnl_frag_gpu(fx.c, 0, 0, &mix);
	if (gpu(0, 0)->inst[0].start == 0)
		assert_true(f == 57.0);
	else
		assert_true(f == 0.0);
	assert_int_equal(cnl_gpu_free_blocks(fx.c, 0, 0), 57);
}

/* cnl_frag_node_after() predicts exactly what committing the plan gives. */
static void test_fragmentation_prediction(void **state)
{
	struct cnl_task_mix mix;
	uint32_t live[512];
	int n_live = 0;
	uint64_t x = 88172645463325252ULL;
	(void)state;
	add_node("n0", "L4", 4);
	add_node("n1", "T4", 2);
	add_node("n2", "A10", 8);
	cnl_task_mix_default(&mix);
	mix.t[mix.n].kind = CNL_REQ_CPU;
	mix.t[mix.n].cpu_milli = 20000;
	mix.t[mix.n++].weight = 0.1;
	mix.t[mix.n].kind = CNL_REQ_BLOCKS;
	mix.t[mix.n].blocks = 30;
	mix.t[mix.n].gpu_types = 1ULL << tidx("T4");
	mix.t[mix.n++].weight = 0.2;
	int checked = 0;
	for (int i = 0; i < 3000; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (n_live > 0 && x % 3 == 0) {
			int k = (int)(x / 3 % (uint64_t)n_live);
			assert_int_equal(cnl_alloc_free(fx.c, live[k]), 0);
			live[k] = live[--n_live];
			continue;
		}
		struct cnl_alloc_req r =
		    blocks(1 + (uint32_t)(x % 3), 1 + (int)(x / 7 % 100));
		if (x % 5 == 0) {
			r.kind = CNL_REQ_WHOLE;
			r.gpus = 1 + (int)(x / 11 % 3);
		} else if (x % 7 == 0) {
			r.kind = CNL_REQ_CPU;
		}
		r.cpu_milli = (int64_t)(x / 13 % 16000);
		struct cnl_req_prep p;
		struct cnl_plan pl;
		uint32_t id;
		assert_int_equal(cnl_alloc_prepare(fx.c, &r, &p), 0);
		if (cnl_alloc_plan(fx.c, &p, &pl) < 0 || n_live == 512)
			continue;
		double want = cnl_frag_node_after(fx.c, pl.node, &mix, &pl,
		                                  r.cpu_milli, r.mem_mib);
		assert_int_equal(cnl_alloc_commit(fx.c, &p, &pl, &id), 0);
		live[n_live++] = id;
		double got = cnl_frag_node(fx.c, pl.node, &mix);
		if (want < got - 1e-9 || want > got + 1e-9)
			fail_msg("op %d: predicted %f, measured %f", i, want,
			         got);
		checked++;
	}
	assert_true(checked > 500);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_blocks_basic),
	    T(test_r1_small_slices_share_across_projects),
	    T(test_hundred_tenants_on_one_gpu),
	    T(test_r2_big_slice_gets_mig),
	    T(test_r2_big_slice_even_on_empty_cluster_is_mig),
	    T(test_r2_same_project_may_use_blocks),
	    T(test_r2_without_mig_takes_an_empty_gpu),
	    T(test_mode_switch_only_when_empty),
	    T(test_mig_geometry_1g),
	    T(test_mig_geometry_limits),
	    T(test_mig_small_first_keeps_room_for_big),
	    T(test_mig_3g_plus_4g),
	    T(test_mig_teardown),
	    T(test_r3_blocks_in_host_instance),
	    T(test_whole_gpu_gang),
	    T(test_whole_gpu_best_fit),
	    T(test_resize),
	    T(test_resize_no_room),
	    T(test_resize_in_place),
	    T(test_resize_host_and_kinds),
	    T(test_node_state_cpu_mem_type),
	    T(test_bin_packing_prefers_used_nodes),
	    T(test_bad_requests),
	    T(test_double_free_and_stale_plan),
	    T(test_node_errors),
	    T(test_node_labels),
	    T(test_cpu_only_and_type_sets),
	    T(test_others_hold),
	    T(test_pods_limit),
	    T(test_node_set),
	    T(test_fragmentation),
	    T(test_fragmentation_mig),
	    T(test_fragmentation_prediction),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
