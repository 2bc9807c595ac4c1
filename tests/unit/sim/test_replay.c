/*
 * test_replay.c - cnlab-sim's replay on hand-made traces with known
 * answers: queueing delay and its percentiles, the share that waited,
 * pre-emption of best-effort work by latency-sensitive work, Jain's index,
 * copies and arrival scaling, and the refusal of lists without times.
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
#include "sim/replay.h"

#include "fixture.h"

#define HDR                                                                   \
	"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase," \
	"creation_time,deletion_time,scheduled_time\n"

/* One GPU; three whole-GPU pods arrive at once and run 100 s each: they
 * queue one behind the other. */
static void test_queue_on_one_gpu(void **state)
{
	struct cnl_fgd_world w;
	struct cnl_replay_result r;
	struct cnl_replay_config rc = {
	    .policy = "cnlab", .teams = 1, .arrival_scale = 1, .copies = 1};
	(void)state;
	put("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
	                 "a,32000,65536,1,T4\n");
	put("pods.csv", HDR "p0,1000,1024,1,1000,,Burstable,R,0,100,0\n"
	                    "p1,1000,1024,1,1000,,Burstable,R,0,100,0\n"
	                    "p2,1000,1024,1,1000,,Burstable,R,0,100,0\n");
	load(&w);
	assert_int_equal(cnl_replay_run(&w, &rc, &r), 0);
	assert_int_equal(r.pods, 3);
	assert_int_equal(r.started, 3);
	assert_int_equal(r.never_started, 0);
	assert_int_equal(r.preemptions, 0);
	/* Waits 0, 100, 200 s. */
	assert_true(r.wait_mean == 100.0);
	assert_true(r.wait_p50 == 100.0);
	assert_true(r.wait_p99 == 200.0);
	assert_true(r.waited_share > 0.66 && r.waited_share < 0.67);
	assert_int_equal(r.span, 300);
	assert_true(r.alloc_peak == 100.0);
	/* Every point of the series is 0 or 100%. */
	for (size_t i = 0; i < r.n_points; i++)
		assert_true(r.points[i].alloc_pct == 0 ||
		            r.points[i].alloc_pct == 100);
	free(r.points);
	cnl_fgd_world_done(&w);
}

/* Best-effort work is pre-empted by latency-sensitive work once it has
 * run its minimum time (10 min), and runs again afterwards. */
static void test_preemption(void **state)
{
	struct cnl_fgd_world w;
	struct cnl_replay_result r;
	struct cnl_replay_config rc = {
	    .policy = "cnlab", .teams = 2, .arrival_scale = 1, .copies = 1};
	(void)state;
	put("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
	                 "a,32000,65536,1,T4\n");
	put("pods.csv", HDR "be,1000,1024,1,1000,,BE,R,0,36000,0\n"
	                    "ls,1000,1024,1,1000,,LS,R,1200,4800,1200\n");
	load(&w);
	assert_int_equal(cnl_replay_run(&w, &rc, &r), 0);
	assert_int_equal(r.preemptions, 1);
	assert_int_equal(r.started, 2);
	/* 1200 s of a GPU lost. */
	assert_true(r.lost_gpu_hours > 0.33 && r.lost_gpu_hours < 0.34);
	/* LS waits the grace period (5 min); BE did not wait at first. */
	assert_true(r.wait_p99 == 300.0);
	free(r.points);
	cnl_fgd_world_done(&w);
}

/* Copies multiply the load; arrival scaling compresses time; teams are
 * tenants, so half-GPU slices of different teams never share a GPU. */
static void test_copies_scale_and_tenants(void **state)
{
	struct cnl_fgd_world w;
	struct cnl_replay_result r;
	struct cnl_replay_config rc = {
	    .policy = "fgd", .teams = 1, .arrival_scale = 0.5, .copies = 3};
	(void)state;
	put("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
	                 "a,32000,65536,2,T4\n");
	put("pods.csv", HDR "p0,1000,1024,1,500,,LS,R,0,1000,0\n"
	                    "p1,1000,1024,1,500,,LS,R,1000,2000,1000\n");
	load(&w);
	assert_int_equal(cnl_replay_run(&w, &rc, &r), 0);
	assert_int_equal(r.pods, 6);
	assert_int_equal(r.started, 6);
	/* Arrivals at 0, 1, 2 and 500, 501, 502 (half-GPU each, 1000 s):
	 * four fit at once; the last two start as the first two end, at
	 * 1000 and 1001, and end at 2000 and 2001.  Waits 0,0,0,0,499,499. */
	assert_int_equal(r.span, 2001);
	assert_true(r.wait_mean > 166.3 && r.wait_mean < 166.4);
	assert_true(r.jain == 1.0); /* one team */
	free(r.points);
	/* Four teams: no two teams' half-GPU slices share a GPU (R2), so
	 * more of them wait, and for longer. */
	rc.teams = 4;
	assert_int_equal(cnl_replay_run(&w, &rc, &r), 0);
	assert_int_equal(r.started, 6);
	assert_true(r.span > 2001);
	assert_true(r.wait_mean > 166.4);
	assert_true(r.jain > 0 && r.jain < 1.0);
	free(r.points);
	rc.copies = 0;
	assert_int_equal(cnl_replay_run(&w, &rc, &r), -CNL_ECONFIG);
	rc.copies = 1;
	rc.policy = "nope";
	assert_int_equal(cnl_replay_run(&w, &rc, &r), -CNL_ECONFIG);
	cnl_fgd_world_done(&w);
}

static void test_no_times(void **state)
{
	struct cnl_fgd_world w;
	struct cnl_replay_result r;
	struct cnl_replay_config rc = {
	    .policy = "cnlab", .teams = 1, .arrival_scale = 1, .copies = 1};
	(void)state;
	put("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
	                 "a,32000,65536,1,T4\n");
	put("pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
	                "p0,1000,1024,1,1000\n");
	load(&w);
	assert_int_equal(cnl_replay_run(&w, &rc, &r), -CNL_EPARSE);
	cnl_fgd_world_done(&w);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_queue_on_one_gpu),
	    T(test_preemption),
	    T(test_copies_scale_and_tenants),
	    T(test_no_times),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
