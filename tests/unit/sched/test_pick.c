/*
 * test_pick.c - cluster-first placement (sched/pick.h): the clusters of a
 * snapshot and their load, and each rule of the pick in turn (the asked
 * cluster, starts now, the dataset, the least loaded, never, node sets,
 * clusters left out, spread gangs); and the per-cluster knobs
 * (cnl_sched_config_set).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "sched/pick.h"

static struct cnl_catalog cat;
static struct cnl_cluster *cl;
static struct cnl_picks pk;

static int setup(void **state)
{
	(void)state;
	cnl_catalog_init(&cat);
	assert_int_equal(cnl_cluster_new(&cat, &cl), 0);
	memset(&pk, 0, sizeof(pk));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	cnl_picks_done(&pk);
	cnl_cluster_free(cl);
	return 0;
}

static int node(const char *name, const char *cluster, const char *type,
                int gpus, const char *dataset)
{
	struct cnl_node_spec s = {.name = name,
	                          .gpu_type = cnl_catalog_find(&cat, type),
	                          .n_gpus = gpus,
	                          .cpu_milli = 64000,
	                          .mem_mib = 256 * 1024,
	                          .cluster = cluster,
	                          .datasets = {dataset, NULL}};
	int r = cnl_cluster_add_node(cl, &s);

	assert_true(r >= 0);
	return r;
}

static struct cnl_job job(int blocks, const char *dataset)
{
	struct cnl_job j = {.state = CNL_JOB_PENDING, .prio = CNL_PRIO_NORMAL};

	j.req.kind = CNL_REQ_BLOCKS;
	j.req.blocks = blocks;
	j.req.gpu_type = CNL_GPU_TYPE_ANY;
	j.req.project = 1;
	if (dataset)
		snprintf(j.dataset, sizeof(j.dataset), "%s", dataset);
	return j;
}

/* Fill node @n's GPUs with whole-GPU allocations of project 9. */
static void fill(int n, int gpus)
{
	struct cnl_alloc_req r = {.kind = CNL_REQ_WHOLE,
	                          .gpus = gpus,
	                          .gpu_type = CNL_GPU_TYPE_ANY,
	                          .project = 9};
	struct cnl_node_set s = {0};
	uint64_t bits[1] = {1ULL << n};
	uint32_t id;

	s.bits = bits;
	s.len = (uint32_t)n + 1;
	r.nodes = &s;
	assert_int_equal(cnl_alloc_place(cl, &r, &id), 0);
}

static void scan(void)
{
	cnl_picks_done(&pk);
	assert_int_equal(cnl_picks_scan(cl, NULL, 0, &pk), 0);
}

static void test_scan(void **state)
{
	static const char known[][CNL_NAME_MAX] = {"cloud", "east"};
	struct cnl_job j = job(50, NULL);

	(void)state;
	node("w1", "west", "H100-80GB-SXM", 2, NULL);
	node("e1", "east", "H100-80GB-SXM", 1, NULL);
	node("d1", "", "A100-80GB", 1, NULL);
	fill(0, 1);
	assert_int_equal(cnl_picks_scan(cl, known, 2, &pk), 0);
	/* Sorted, each once; unlabelled nodes are "default". */
	assert_int_equal(pk.n, 4);
	assert_string_equal(pk.name[0], "cloud");
	assert_string_equal(pk.name[1], "default");
	assert_string_equal(pk.name[2], "east");
	assert_string_equal(pk.name[3], "west");
	assert_int_equal(pk.of_node[0], 3);
	assert_int_equal(pk.of_node[1], 2);
	assert_int_equal(pk.of_node[2], 1);
	assert_int_equal(pk.load[3].nodes, 1);
	assert_int_equal(pk.load[3].gpus, 2);
	assert_int_equal(pk.load[3].blocks_total, 200);
	assert_int_equal(pk.load[3].blocks_used, 100);
	assert_true(cnl_picks_util(&pk, 3) == 0.5);
	assert_true(cnl_picks_util(&pk, 0) == 0); /* no nodes yet */
	assert_int_equal(cnl_picks_find(&pk, "east"), 2);
	assert_int_equal(cnl_picks_find(&pk, "nowhere"), -1);
	/* A configured cluster without nodes can be asked for: it never
	 * fits now, and is never picked unasked. */
	struct cnl_pick p;
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, 0, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, 0);
	assert_int_equal(p.why, CNL_PICK_ASKED);
	assert_false(p.now);
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_not_equal(p.cluster, 0);
}

static void test_starts_now_then_least_loaded(void **state)
{
	struct cnl_job j = job(60, NULL);
	struct cnl_pick p;

	(void)state;
	node("a1", "a", "H100-80GB-SXM", 1, NULL);
	node("b1", "b", "H100-80GB-SXM", 2, NULL);
	scan();
	/* Both fit; a and b are both empty: the name decides (a). */
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, 0);
	assert_int_equal(p.why, CNL_PICK_STARTS_NOW);
	assert_true(p.now);
	/* a is full: b, where it starts now, though a holds less. */
	fill(0, 1);
	fill(1, 1);
	scan();
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, 1);
	assert_true(p.now);
	/* Both full: the least loaded that could run it (a: 100%, b:
	 * 100% too after this; the name then). */
	fill(1, 1);
	scan();
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.why, CNL_PICK_LEAST_LOADED);
	assert_false(p.now);
	assert_int_equal(p.cluster, 0);
	assert_false(cnl_pick_fits_now(cl, &pk, &j, 1));
}

/* A cluster paid for by the hour (cost) takes work only where the owned
 * would not start it as soon: at equal rank the cheaper wins, whatever
 * the load; a cluster that starts it now still beats one that would make
 * it wait, however cheap. */
static void test_cost(void **state)
{
	struct cnl_job j = job(50, NULL);
	struct cnl_pick p;

	(void)state;
	node("c1", "cloud-aws", "H100-80GB-SXM", 8, NULL);
	node("o1", "owned", "H100-80GB-SXM", 2, NULL);
	fill(1, 1); /* owned: 50% in use; the cloud: empty */
	scan();
	/* Without costs the least loaded (the cloud) wins. */
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_string_equal(pk.name[p.cluster], "cloud-aws");
	/* With the cloud's price, the owned cluster, though more loaded. */
	pk.cost[cnl_picks_find(&pk, "cloud-aws")] = 12.29;
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_string_equal(pk.name[p.cluster], "owned");
	assert_true(p.now);
	/* The owned full: the cloud, which starts it now. */
	fill(1, 1);
	scan();
	pk.cost[cnl_picks_find(&pk, "cloud-aws")] = 12.29;
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_string_equal(pk.name[p.cluster], "cloud-aws");
	assert_int_equal(p.why, CNL_PICK_STARTS_NOW);
	/* Left out (on-prem-only work): the owned, to wait there. */
	assert_int_equal(
	    cnl_pick_cluster(cl, &pk, &j, -1,
	                     ~(1ULL << cnl_picks_find(&pk, "cloud-aws")), &p),
	    0);
	assert_string_equal(pk.name[p.cluster], "owned");
	assert_false(p.now);
}

static void test_dataset(void **state)
{
	struct cnl_job j = job(10, "coco");
	struct cnl_pick p;

	(void)state;
	node("a1", "a", "H100-80GB-SXM", 4, NULL);
	node("b1", "b", "H100-80GB-SXM", 1, "coco");
	fill(1, 1); /* b, where coco is, is full; a is empty */
	scan();
	/* Starting now beats the dataset. */
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, 0);
	assert_int_equal(p.why, CNL_PICK_STARTS_NOW);
	/* Where both fit, the dataset wins over the lighter load. */
	cnl_cluster_free(cl);
	assert_int_equal(cnl_cluster_new(&cat, &cl), 0);
	node("a1", "a", "H100-80GB-SXM", 4, NULL);
	node("b1", "b", "H100-80GB-SXM", 2, "coco");
	fill(1, 1);
	scan();
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, 1);
	assert_int_equal(p.why, CNL_PICK_DATA_NOW);
	/* Neither fits now: the dataset's cluster. */
	fill(1, 1);
	fill(0, 4);
	scan();
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, 1);
	assert_int_equal(p.why, CNL_PICK_DATA);
	assert_false(p.now);
}

static void test_never_and_limits(void **state)
{
	struct cnl_job j = job(10, NULL);
	struct cnl_pick p;
	struct cnl_node_set s = {0};
	uint64_t bits[1] = {1ULL << 1}; /* node b1 only */

	(void)state;
	node("a1", "a", "H100-80GB-SXM", 1, NULL);
	node("b1", "b", "A100-80GB", 1, NULL);
	node("c1", "c", "", 0, NULL); /* CPU only */
	scan();
	/* Only H100s: cluster a, the only one that could ever. */
	j.req.gpu_type = cnl_catalog_find(&cat, "H100-80GB-SXM");
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, 0);
	/* ... and with a left out, none. */
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~1ULL, &p), 0);
	assert_int_equal(p.cluster, -1);
	assert_int_equal(p.why, CNL_PICK_NONE);
	assert_string_equal(cnl_pick_why_text(CNL_PICK_NONE),
	                    "no cluster could ever run it");
	/* A node set holds it to b's node: b, though a sorts first. */
	j.req.gpu_type = CNL_GPU_TYPE_ANY;
	s.bits = bits;
	s.len = 3;
	j.req.nodes = &s;
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, 1);
	/* Whole GPUs: two on one node, which no cluster has. */
	j = job(0, NULL);
	j.req.kind = CNL_REQ_WHOLE;
	j.req.gpus = 2;
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, -1);
	/* CPU work: any cluster with room; a sorts first. */
	j.req.kind = CNL_REQ_CPU;
	j.req.gpus = 0;
	j.req.cpu_milli = 1000;
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, 0);
	/* An invalid request is an error, not a pick. */
	j = job(101, NULL);
	assert_true(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p) < 0);
}

static void test_down_nodes(void **state)
{
	struct cnl_job j = job(10, NULL);
	struct cnl_pick p;

	(void)state;
	node("a1", "a", "H100-80GB-SXM", 1, NULL);
	node("b1", "b", "H100-80GB-SXM", 1, NULL);
	assert_int_equal(cnl_cluster_set_node_state(cl, 0, CNL_NODE_DOWN), 0);
	scan();
	assert_int_equal(pk.load[0].nodes, 1);
	assert_int_equal(pk.load[0].nodes_up, 0);
	assert_int_equal(pk.load[0].gpus, 0);
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, 1);
	/* b full: neither starts it now; a, with nothing taking work, is
	 * still not "the least loaded". */
	fill(1, 1);
	scan();
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, 1);
	assert_int_equal(p.why, CNL_PICK_LEAST_LOADED);
	/* Cordoned: could run it later, not now. */
	assert_int_equal(cnl_cluster_set_node_state(cl, 0, CNL_NODE_CORDONED),
	                 0);
	assert_int_equal(cnl_cluster_set_node_state(cl, 1, CNL_NODE_CORDONED),
	                 0);
	scan();
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, 0);
	assert_int_equal(p.why, CNL_PICK_LEAST_LOADED);
	assert_false(p.now);
}

static void test_spread_gang(void **state)
{
	struct cnl_job j = job(10, NULL);
	struct cnl_pick p;

	(void)state;
	node("a1", "a", "H100-80GB-SXM", 4, NULL);
	node("b1", "b", "H100-80GB-SXM", 1, NULL);
	node("b2", "b", "H100-80GB-SXM", 1, NULL);
	scan();
	/* A gang of two, a node each: only b has two nodes. */
	j.gang = 7;
	j.gang_size = 2;
	j.spread = true;
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, 1);
	/* Of three: no cluster. */
	j.gang_size = 3;
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, -1);
	/* Not spread: a, which sorts first and fits now. */
	j.spread = false;
	assert_int_equal(cnl_pick_cluster(cl, &pk, &j, -1, ~0ULL, &p), 0);
	assert_int_equal(p.cluster, 0);
}

static void test_knobs(void **state)
{
	struct cnl_sched_config c;
	struct cnl_sched *s = NULL;
	size_t n = 0;

	(void)state;
	cnl_sched_config_default(&c);
	assert_int_equal(cnl_sched_config_set(&c, "w_fairshare", 8), 0);
	assert_true(c.w_fairshare == 8);
	assert_int_equal(cnl_sched_config_set(&c, "max_reservations", 2), 0);
	assert_int_equal(c.max_reservations, 2);
	assert_int_equal(cnl_sched_config_set(&c, "grace_s", 30), 0);
	assert_int_equal(c.grace_ms, 30000);
	assert_int_equal(cnl_sched_config_set(&c, "min_run_s", 0), 0);
	assert_int_equal(c.min_run_ms, 0);
	assert_int_equal(cnl_sched_config_set(&c, "w_nothing", 1),
	                 -CNL_ENOTFOUND);
	assert_int_equal(cnl_sched_config_set(&c, "w_age", -1), -CNL_ECONFIG);
	assert_int_equal(cnl_sched_config_set(&c, "w_age", 1.0 / 0.0),
	                 -CNL_ECONFIG);
	assert_int_equal(cnl_sched_config_set(&c, "max_reservations", 1.5),
	                 -CNL_ECONFIG);
	assert_int_equal(cnl_sched_config_set(&c, "preempt_class_gap", 0),
	                 -CNL_ECONFIG);
	assert_int_equal(cnl_sched_config_set(&c, "preempt_class_gap", 4),
	                 -CNL_ECONFIG);
	assert_int_equal(c.max_reservations, 2); /* refused: unchanged */
	assert_int_equal(cnl_sched_new(&c, &s), 0);
	assert_true(cnl_sched_config_of(s)->w_fairshare == 8);
	cnl_sched_free(s);
	while (cnl_sched_knob(n))
		n++;
	assert_int_equal(n, 12);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_scan, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_starts_now_then_least_loaded,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cost, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_dataset, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_never_and_limits, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_down_nodes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_spread_gang, setup, teardown),
	    cmocka_unit_test(test_knobs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
