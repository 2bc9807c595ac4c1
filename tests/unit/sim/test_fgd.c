/*
 * test_fgd.c - the FGD protocol engine on small hand-made traces with
 * known answers (packing, failures, fragmentation, the typical mix,
 * tuning), determinism, and the real trace's reference results when the
 * trace is present.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "sim/fgd.h"

#include "fixture.h"

#define POD_HDR                                                               \
	"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase," \
	"creation_time,deletion_time,scheduled_time\n"

/* Two 1-GPU nodes; two half-GPU pods and one whole-GPU pod fill them
 * exactly, in whatever order they arrive, for the packing policies. */
static void test_exact_fill(void **state)
{
	static const char *const packers[] = {"fgd", "bestfit", "gpupacking",
	                                      "dotprod", "cnlab"};
	struct cnl_fgd_world w;
	struct cnl_fgd_result r;
	(void)state;
	put("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
	                 "a,32000,65536,1,T4\n"
	                 "b,32000,65536,1,T4\n");
	put("pods.csv", POD_HDR "p0,1000,1024,1,500,,LS,Running,0,10,0\n"
	                        "p1,1000,1024,1,500,,LS,Running,0,10,0\n"
	                        "p2,1000,1024,1,1000,,LS,Running,0,10,0\n");
	load(&w);
	assert_int_equal(w.gpus, 2);
	for (size_t i = 0; i < sizeof(packers) / sizeof(packers[0]); i++)
		for (uint64_t seed = 1; seed <= 6; seed++) {
			assert_int_equal(
			    cnl_fgd_run(&w, packers[i], seed, 1.0, &r), 0);
			if (r.failed != 0 || r.alloc_pct != 100.0)
				fail_msg("%s seed %llu: %.1f%%, %zu failed",
				         packers[i], (unsigned long long)seed,
				         r.alloc_pct, r.failed);
			assert_int_equal(r.arrived, 3);
			assert_true(r.curve[100] == 100.0);
			assert_true(r.curve[0] == 0.0 || r.curve[0] > 0);
		}
	cnl_fgd_world_done(&w);
}

/* A CPU-bound failure: the node's CPU runs out before its GPU. */
static void test_cpu_bound_failure(void **state)
{
	struct cnl_fgd_world w;
	struct cnl_fgd_result r;
	(void)state;
	put("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
	                 "a,4000,65536,2,T4\n");
	put("pods.csv", POD_HDR "p0,3000,1024,1,1000,,LS,Running,0,10,0\n"
	                        "p1,3000,1024,1,1000,,LS,Running,0,10,0\n");
	load(&w);
	assert_int_equal(cnl_fgd_run(&w, "fgd", 42, 1.0, &r), 0);
	assert_int_equal(r.placed, 1);
	assert_int_equal(r.failed, 1);
	assert_true(r.alloc_pct == 50.0);
	assert_true(r.arrived_pct == 100.0);
	cnl_fgd_world_done(&w);
}

/* The typical mix: types by popularity until 95% of pods are covered. */
static void test_typical_mix(void **state)
{
	struct cnl_fgd_world w;
	char pods[4096] = POD_HDR;
	(void)state;
	put("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
	                 "a,64000,65536,8,T4\n");
	/* 10 x A, 5 x B, 3 x C, 2 x D, 1 x E: 21 pods.  A+B+C = 85.7%,
	 * +D = 95.2% >= 95%: four types, E left out. */
	struct {
		int n, cpu, gpus, milli;
	} ty[] = {{10, 1000, 1, 500},
	          {5, 2000, 1, 1000},
	          {3, 4000, 0, 0},
	          {2, 1000, 2, 1000},
	          {1, 8000, 1, 250}};
	int k = 0;
	for (size_t t = 0; t < 5; t++)
		for (int i = 0; i < ty[t].n; i++) {
			char row[160];
			snprintf(row, sizeof(row),
			         "p%02d,%d,512,%d,%d,,LS,Running,0,1,0\n", k++,
			         ty[t].cpu, ty[t].gpus, ty[t].milli);
			strcat(pods, row); /* cnl-allow-banned */
		}
	put("pods.csv", pods);
	load(&w);
	assert_int_equal(w.mix.n, 4);
	assert_true(w.mix_coverage > 0.95 && w.mix_coverage < 0.953);
	assert_int_equal(w.mix.t[0].kind, CNL_REQ_BLOCKS);
	assert_int_equal(w.mix.t[0].blocks, 50);
	assert_true(w.mix.t[0].weight == 10);
	assert_int_equal(w.mix.t[1].kind, CNL_REQ_WHOLE);
	assert_int_equal(w.mix.t[2].kind, CNL_REQ_CPU);
	assert_int_equal(w.mix.t[2].cpu_milli, 4000);
	assert_int_equal(w.mix.t[3].gpus, 2);
	assert_int_equal(w.mix.t[3].mem_mib, 0); /* memory is no part */
	cnl_fgd_world_done(&w);
}

/* Fragmentation at 90%: one GPU, the mix needs 50% slices; a 60% pod
 * leaves 40% nobody typical can use. */
static void test_fragmentation_known(void **state)
{
	struct cnl_fgd_world w;
	struct cnl_fgd_result r;
	char pods[4096] = POD_HDR;
	(void)state;
	put("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
	                 "a,64000,65536,1,T4\n");
	/* Twenty 500-milli pods make the mix; one 600 arrives first... */
	for (int i = 0; i < 20; i++) {
		char row[128];
		snprintf(row, sizeof(row), "p%02d,100,1,1,500,,LS,R,0,1,0\n",
		         i);
		strcat(pods, row); /* cnl-allow-banned */
	}
	put("pods.csv", pods);
	load(&w);
	/* ...by construction: tune 0.6 keeps 600 milli of demand (one or
	 * two pods dropped at random until <= 600): a single 500 pod. */
	assert_int_equal(cnl_fgd_run(&w, "fgd", 7, 0.6, &r), 0);
	assert_int_equal(r.arrived, 1);
	assert_true(r.alloc_pct == 50.0);
	/* 500 free milli, usable by the 500-milli type: no fragmentation,
	 * and at 90% arrived (never reached) nothing is recorded. */
	assert_true(r.frag_pct_90 == 0.0);
	cnl_fgd_world_done(&w);
	/* Now the mix is 500s but the workload is a 600 pod. */
	put("pods.csv", POD_HDR "x,100,1,1,600,,LS,R,0,1,0\n"
	                        "y,100,1,1,500,,LS,R,0,1,0\n"
	                        "z,100,1,1,500,,LS,R,0,1,0\n");
	load(&w);
	/* Tune 1.6: the three pods (1600 milli) exactly. */
	assert_int_equal(cnl_fgd_run(&w, "bestfit", 3, 1.6, &r), 0);
	assert_int_equal(r.arrived, 3);
	assert_true(r.arrived_pct == 160.0);
	assert_int_equal(r.placed, 2); /* 600 + one 500 cannot share */
	cnl_fgd_world_done(&w);
}

/* Tuning inflates the workload by drawing pods with replacement. */
static void test_tune_and_determinism(void **state)
{
	struct cnl_fgd_world w;
	struct cnl_fgd_result a, b, c;
	char pods[16384] = POD_HDR;
	(void)state;
	put("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
	                 "a,64000,262144,8,T4\n"
	                 "b,64000,262144,8,T4\n"
	                 "c,32000,131072,2,P100\n");
	static const int milli[] = {100, 250, 500, 700, 1000, 1000, 0};
	/* 21 pods, 10,650 milli: below 1.3 x 18 GPUs = 23,400. */
	for (int i = 0; i < 21; i++) {
		char row[128];
		int m = milli[i % 7];
		snprintf(row, sizeof(row), "p%02d,%d,1024,%d,%d,,LS,R,0,1,0\n",
		         i, 1000 + 500 * (i % 5), m ? 1 : 0, m);
		strcat(pods, row); /* cnl-allow-banned */
	}
	put("pods.csv", pods);
	load(&w);
	assert_int_equal(cnl_fgd_run(&w, "fgd", 42, 1.3, &a), 0);
	assert_true(a.arrived_pct >= 130.0);
	assert_true(a.arrived > 21); /* inflated by draws */
	assert_true(a.failed > 0);
	assert_true(a.alloc_pct <= 100.0 && a.alloc_pct > 80.0);
	/* The curve rises with arrivals and is complete to the end. */
	for (int p = 1; p <= 130; p++) {
		assert_true(a.curve[p] >= 0);
		assert_true(a.curve[p] >= a.curve[p - 1]);
		assert_true(a.curve[p] <= 100.0);
	}
	assert_int_equal(cnl_fgd_run(&w, "fgd", 42, 1.3, &b), 0);
	assert_memory_equal(a.curve, b.curve, sizeof(a.curve));
	assert_int_equal(a.failed, b.failed);
	assert_true(a.frag_pct_90 == b.frag_pct_90);
	/* Another seed, another arrival order. */
	assert_int_equal(cnl_fgd_run(&w, "fgd", 43, 1.3, &c), 0);
	assert_true(memcmp(a.curve, c.curve, sizeof(a.curve)) != 0 ||
	            a.arrived != c.arrived);
	assert_int_equal(cnl_fgd_run(&w, "nope", 42, 1.3, &c), -CNL_ECONFIG);
	assert_int_equal(cnl_fgd_run(&w, "fgd", 42, 0, &c), -CNL_ECONFIG);
	cnl_fgd_world_done(&w);
}

static void test_bad_world(void **state)
{
	struct cnl_fgd_world w;
	char n[512], p[512], err[512] = "";
	(void)state;
	put("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
	                 "a,32000,65536,1,T4\n");
	put("pods.csv", POD_HDR "p0,1000,1024,1,abc,,LS,R,0,10,0\n");
	snprintf(n, sizeof(n), "%s/nodes.csv", dir);
	snprintf(p, sizeof(p), "%s/pods.csv", dir);
	assert_int_equal(cnl_fgd_world_load(&w, n, p, err, sizeof(err)),
	                 -CNL_EPARSE);
	assert_non_null(strstr(err, "pods.csv:2:5"));
	put("pods.csv", POD_HDR);
	assert_int_equal(cnl_fgd_world_load(&w, n, p, err, sizeof(err)),
	                 -CNL_EPARSE);
	assert_non_null(strstr(err, "no pods"));
	put("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
	                 "a,32000,65536,0,\n");
	put("pods.csv", POD_HDR "p0,1000,1024,0,0,,LS,R,0,10,0\n");
	assert_int_equal(cnl_fgd_world_load(&w, n, p, err, sizeof(err)),
	                 -CNL_EPARSE);
	assert_non_null(strstr(err, "no GPU"));
}

/* The real trace: our baselines near the FGD paper's published results
 * (mean of seeds 42-51 there; two seeds here to keep the suite quick). */
static void test_real_trace(void **state)
{
	char n[1024], p[1024], err[512];
	const char *src = getenv("CNL_SOURCE_DIR");
	struct cnl_fgd_world w;
	(void)state;
	snprintf(n, sizeof(n),
	         "%s/../shared/traces/alibaba-gpu-v2023/csv/"
	         "openb_node_list_gpu_node.csv",
	         src ? src : ".");
	snprintf(p, sizeof(p),
	         "%s/../shared/traces/alibaba-gpu-v2023/csv/"
	         "openb_pod_list_default.csv",
	         src ? src : ".");
	if (access(n, R_OK) != 0)
		skip();
	if (cnl_fgd_world_load(&w, n, p, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	assert_int_equal(w.n_nodes, 1213);
	assert_int_equal(w.gpus, 6212);
	static const struct {
		const char *policy;
		double published;
	} ref[] = {{"random", 87.47}, {"bestfit", 93.08}, {"fgd", 95.39}};
	for (size_t i = 0; i < sizeof(ref) / sizeof(ref[0]); i++) {
		double mean = 0;
		for (uint64_t seed = 42; seed <= 43; seed++) {
			struct cnl_fgd_result r;
			assert_int_equal(
			    cnl_fgd_run(&w, ref[i].policy, seed, 1.3, &r), 0);
			assert_true(r.arrived_pct >= 130.0);
			mean += r.alloc_pct / 2;
		}
		print_message("%s: %.2f%% (published %.2f%%)\n", ref[i].policy,
		              mean, ref[i].published);
		assert_true(mean > ref[i].published - 1.0 &&
		            mean < ref[i].published + 1.0);
	}
	/* CNLab's policy beats FGD on both counts (same seeds). */
	double ca = 0, cf = 0, fa = 0, ff = 0;
	for (uint64_t seed = 42; seed <= 43; seed++) {
		struct cnl_fgd_result r;
		assert_int_equal(cnl_fgd_run(&w, "cnlab", seed, 1.3, &r), 0);
		ca += r.alloc_pct / 2;
		cf += r.frag_pct_90 / 2;
		assert_int_equal(cnl_fgd_run(&w, "fgd", seed, 1.3, &r), 0);
		fa += r.alloc_pct / 2;
		ff += r.frag_pct_90 / 2;
	}
	print_message("cnlab %.2f%% / %.2f%% frag, fgd %.2f%% / %.2f%%\n", ca,
	              cf, fa, ff);
	assert_true(ca > fa);
	assert_true(cf < ff);
	cnl_fgd_world_done(&w);
}

/* The lists where CNLab's placement once lost to FGD on fragmentation
 * (cpu250: CPU-only pods stranding GPUs; gpushare40: GPU-sharing pods):
 * on one seed, cnlab allocates at least as much as fgd at 130% and leaves
 * no more fragmentation at 90%.  bench/fgd_all.sh measures every list
 * over ten seeds. */
static void test_beats_fgd_on_hard_lists(void **state)
{
	static const char *const lists[] = {"cpu250", "gpushare40"};
	const char *src = getenv("CNL_SOURCE_DIR");
	(void)state;
	for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
		char n[1024], p[1024], err[512];
		struct cnl_fgd_world w;
		struct cnl_fgd_result c, f;
		snprintf(n, sizeof(n),
		         "%s/../shared/traces/alibaba-gpu-v2023/csv/"
		         "openb_node_list_gpu_node.csv",
		         src ? src : ".");
		snprintf(p, sizeof(p),
		         "%s/../shared/traces/alibaba-gpu-v2023/csv/"
		         "openb_pod_list_%s.csv",
		         src ? src : ".", lists[i]);
		if (access(n, R_OK) != 0 || access(p, R_OK) != 0)
			skip();
		if (cnl_fgd_world_load(&w, n, p, err, sizeof(err)) < 0)
			fail_msg("%s", err);
		assert_int_equal(cnl_fgd_run(&w, "cnlab", 42, 1.3, &c), 0);
		assert_int_equal(cnl_fgd_run(&w, "fgd", 42, 1.3, &f), 0);
		print_message("%s: cnlab %.2f%% / %.2f%% frag, "
		              "fgd %.2f%% / %.2f%%\n",
		              lists[i], c.alloc_pct, c.frag_pct_90, f.alloc_pct,
		              f.frag_pct_90);
		assert_true(c.alloc_pct >= f.alloc_pct);
		assert_true(c.frag_pct_90 <= f.frag_pct_90);
		cnl_fgd_world_done(&w);
	}
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_exact_fill),           T(test_cpu_bound_failure),
	    T(test_typical_mix),          T(test_fragmentation_known),
	    T(test_tune_and_determinism), T(test_bad_world),
	    T(test_real_trace),           T(test_beats_fgd_on_hard_lists),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
