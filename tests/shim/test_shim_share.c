/*
 * test_shim_share.c - compute share, measured as shares of the fake GPU's
 * time by the fake's own ledger (busy_ns per tag, counted by the fake
 * driver, not by the shim): a 25-block slice gets 25% +- 3 points; slices
 * of 30 and 70 on one GPU split it 30/70 when both are busy; one alone uses
 * it all when the other is idle; every launch path is throttled.
 *
 * Inside MIG (the fake's model, fake_gpu.h: a 1g instance is its own
 * timeline at 1/7 of the GPU's speed) a slice's share is of the instance,
 * the device its processes see, as the agent computes it (share.h, called
 * here: N blocks in a 1g instance are 7N%): 5 blocks get 35% of the instance
 * (5% of the GPU) +- 3 points; slices of 5 and 9 blocks on one host
 * instance's board split it 35/63 while a dedicated 1g beside them keeps
 * its own instance; an idle slice's time goes to the busy one.
 *
 * The greedy programs keep four kernels of 1 ms in flight, as a training
 * loop would.  Shares are ratios of GPU time over a window of wall time, so
 * a slow or loaded machine moves when launches happen, not the ratios: no
 * assertion is on a wall-clock duration.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <cmocka.h>

#include "harness.h"
#include "agent/share.h"
#include "fake_gpu.h"
#include "shim/region.h"

#define WARMUP_MS 400
#define WINDOW_MS 2500

static char gpu_path[300], board_path[300], env_gpu[400];
static struct fake_gpu *gpu;

static int group_setup(void **state)
{
	int fd;

	(void)state;
	scratch_init("share");
	scratch_path(gpu_path, sizeof(gpu_path), "gpu");
	scratch_path(board_path, sizeof(board_path), "board");
	snprintf(env_gpu, sizeof(env_gpu), "CNL_FAKE_GPU=%s", gpu_path);
	fd = open(gpu_path, O_RDWR | O_CREAT, 0666);
	if (fd < 0 || ftruncate(fd, sizeof(*gpu)) < 0)
		return -1;
	gpu =
	    mmap(NULL, sizeof(*gpu), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return gpu == MAP_FAILED ? -1 : 0;
}

static int group_teardown(void **state)
{
	(void)state;
	munmap(gpu, sizeof(*gpu));
	scratch_done();
	return 0;
}

struct slice {
	const char *name;
	unsigned share;
	int board; /* on the GPU board, in row board - 1 */
	const char *mode;
	int idle;   /* no process runs in it */
	double got; /* measured share of the device's time */
	uint64_t shim_busy;
	const char *mig; /* CNL_FAKE_MIG: the MIG instance it runs in */
	unsigned us;     /* kernel duration on the whole GPU; 0: 1000 */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Run one greedy process per busy slice; measure each one's GPU share. */
static void measure(struct slice *s, int n)
{
	struct child c[8] = {0};
	char region[8][300], env_r[8][512], env_t[8][32], env_m[8][64];
	char line[64];
	struct cnl_region_handle h[8];
	uint64_t b0[8], b1[8];
	double t0, t1;
	char secs[32];

	assert_int_equal(cnl_board_create(board_path), 0);
	snprintf(secs, sizeof(secs), "%.1f",
	         (WARMUP_MS + WINDOW_MS) / 1000.0 + 1.0);
	for (int i = 0; i < n; i++) {
		struct cnl_region_opts o = {
		    .board = s[i].board ? board_path : NULL,
		    .board_slot = s[i].board ? (unsigned)s[i].board - 1 : 0};
		char leaf[32];

		snprintf(leaf, sizeof(leaf), "region-%s", s[i].name);
		scratch_path(region[i], sizeof(region[i]), leaf);
		assert_int_equal(
		    cnl_region_create(region[i], 0, s[i].share, s[i].name, &o),
		    0);
		assert_int_equal(cnl_region_map(region[i], &h[i]), 0);
		snprintf(env_r[i], sizeof(env_r[i]), "CNLAB_REGION=%.300s",
		         region[i]);
		snprintf(env_t[i], sizeof(env_t[i]), "CNL_FAKE_TAG=%d", i + 1);
		snprintf(env_m[i], sizeof(env_m[i]), "CNL_FAKE_MIG=%s",
		         s[i].mig ? s[i].mig : "");
	}
	for (int i = 0; i < n; i++) {
		char us[16];
		char *args[] = {"greedy", (char *)s[i].mode, us, secs, NULL};
		char *env[] = {env_r[i], env_t[i], env_gpu, env_m[i], NULL};

		snprintf(us, sizeof(us), "%u", s[i].us ? s[i].us : 1000);

		if (s[i].idle)
			continue;
		c[i] = spawn(args, env, 1);
		assert_int_equal(read_line(&c[i], line, sizeof(line)), 0);
	}
	sleep_ms(WARMUP_MS);
	t0 = now_s();
	for (int i = 0; i < n; i++)
		b0[i] = atomic_load(&gpu->busy_ns[i + 1]);
	sleep_ms(WINDOW_MS);
	t1 = now_s();
	for (int i = 0; i < n; i++)
		b1[i] = atomic_load(&gpu->busy_ns[i + 1]);
	for (int i = 0; i < n; i++) {
		s[i].got = (double)(b1[i] - b0[i]) / 1e9 / (t1 - t0);
		if (!s[i].idle)
			assert_int_equal(reap(&c[i]), 0);
		s[i].shim_busy = atomic_load(&h[i].r->procs[0].busy_ns);
		print_message("%-6s share %3u%% mode %-6s got %5.1f%% of the "
		              "%s%s\n",
		              s[i].name, s[i].share, s[i].mode,
		              100.0 * s[i].got, s[i].mig ? "instance " : "GPU",
		              s[i].mig ? s[i].mig : "");
		cnl_region_unmap(&h[i]);
	}
}

static void test_cap_25(void **state)
{
	struct slice s[] = {{"s25", 25, 0, "kernel", 0, 0, 0, NULL, 0}};

	(void)state;
	measure(s, 1);
	assert_true(s[0].got > 0.22 && s[0].got < 0.28);
	/* The shim measured (and charged) what the GPU ran. */
	assert_true(s[0].shim_busy > 0);
}

static void test_split_30_70(void **state)
{
	struct slice s[] = {{"s30", 30, 1, "kernel", 0, 0, 0, NULL, 0},
	                    {"s70", 70, 2, "kernel", 0, 0, 0, NULL, 0}};
	double ratio;

	(void)state;
	measure(s, 2);
	ratio = s[0].got / (s[0].got + s[1].got);
	print_message("split: %.1f%% / %.1f%% of the busy time, GPU %.1f%% "
	              "busy\n",
	              100 * ratio, 100 * (1 - ratio),
	              100 * (s[0].got + s[1].got));
	assert_true(ratio > 0.27 && ratio < 0.33);
	assert_true(s[0].got + s[1].got > 0.80);
}

static void test_idle_other(void **state)
{
	struct slice s[] = {{"s30", 30, 1, "kernel", 0, 0, 0, NULL, 0},
	                    {"s70", 70, 2, "kernel", 1, 0, 0, NULL, 0}};

	(void)state;
	measure(s, 2);
	assert_true(s[0].got > 0.90);
	assert_true(s[1].got == 0);
}

/* Every launch path goes through the bucket: four slices of 20%. */
static void test_launch_paths(void **state)
{
	struct slice s[] = {{"ex", 20, 0, "ex", 0, 0, 0, NULL, 0},
	                    {"coop", 20, 0, "coop", 0, 0, 0, NULL, 0},
	                    {"ptsz", 20, 0, "ptsz", 0, 0, 0, NULL, 0},
	                    {"graph", 20, 0, "graph", 0, 0, 0, NULL, 0}};

	(void)state;
	measure(s, 4);
	for (int i = 0; i < 4; i++)
		assert_true(s[i].got > 0.17 && s[i].got < 0.23);
}

/* The CUDA < 4.0 launch (cuLaunchGridAsync) is held to its share too. */
static void test_legacy_launch(void **state)
{
	struct slice s[] = {{"grid", 20, 0, "grid", 0, 0, 0, NULL, 0}};

	(void)state;
	measure(s, 1);
	assert_true(s[0].got > 0.17 && s[0].got < 0.23);
}

/* 150 us on the whole GPU: 1.05 ms on a 1g instance. */
#define MIG_US 150

/* The share the agent writes into the region of a slice of @blocks blocks
 * in a 1g instance of an H100 (share.h), and whether it gets a board. */
static unsigned mig_share(int blocks, bool *ret_board)
{
	static struct cnl_catalog cat;
	struct cnl_slice_share sh;
	int t;

	cnl_catalog_init(&cat);
	t = cnl_catalog_find(&cat, "H100-80GB-SXM");
	assert_true(t >= 0);
	assert_int_equal(
	    cnl_agent_slice_share(&cat.types[t], blocks, "1g.10gb", &sh), 0);
	if (ret_board)
		*ret_board = sh.board;
	return sh.share_pct;
}

/* 5 blocks inside a 1g instance: 35% of the instance, 5% of the GPU,
 * within the 25% test's tolerance (on the scale of the device seen). */
static void test_mig_5_blocks(void **state)
{
	struct slice s[] = {
	    {"m5", mig_share(5, NULL), 0, "kernel", 0, 0, 0, "1g@0", MIG_US}};

	(void)state;
	measure(s, 1);
	print_message("5 blocks in a 1g: %.2f%% of the GPU (target 5)\n",
	              100.0 * s[0].got / 7);
	assert_true(s[0].got > 0.32 && s[0].got < 0.38);
	assert_true(s[0].shim_busy > 0);
}

/* Two slices of one 1g host on its board split it by share; a dedicated
 * 1g instance beside them (not throttled) runs on its own
 * timeline, untouched by the host's work. */
static void test_mig_split(void **state)
{
	bool b5, b9;
	struct slice s[] = {
	    {"h5", mig_share(5, &b5), 1, "kernel", 0, 0, 0, "1g@0", MIG_US},
	    {"h9", mig_share(9, &b9), 2, "kernel", 0, 0, 0, "1g@0", MIG_US},
	    /* A dedicated 1g: the 14 blocks the allocator counts it as. */
	    {"d1", mig_share(14, NULL), 0, "kernel", 0, 0, 0, "1g@1", MIG_US}};
	double ratio, want = (double)s[0].share / (s[0].share + s[1].share);

	(void)state;
	/* The agent puts the slices of a host on its board; the whole
	 * instance is not throttled (its own board, alone, is not used
	 * here). */
	assert_true(b5 && b9);
	assert_int_equal(s[2].share, 0);
	measure(s, 3);
	ratio = s[0].got / (s[0].got + s[1].got);
	print_message("host split: %.1f%% / %.1f%% of the busy time (want "
	              "%.1f), instance %.1f%% busy\n",
	              100 * ratio, 100 * (1 - ratio), 100 * want,
	              100 * (s[0].got + s[1].got));
	assert_true(ratio > want - 0.03 && ratio < want + 0.03);
	assert_true(s[0].got + s[1].got > 0.80);
	assert_true(s[2].got > 0.90);
}

/* Work conservation inside the host: the idle slice's time goes to the
 * busy one. */
static void test_mig_idle_other(void **state)
{
	struct slice s[] = {
	    {"h5", mig_share(5, NULL), 1, "kernel", 0, 0, 0, "1g@0", MIG_US},
	    {"h9", mig_share(9, NULL), 2, "kernel", 1, 0, 0, "1g@0", MIG_US}};

	(void)state;
	measure(s, 2);
	assert_true(s[0].got > 0.90);
	assert_true(s[1].got == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cap_25),
	    cmocka_unit_test(test_split_30_70),
	    cmocka_unit_test(test_idle_other),
	    cmocka_unit_test(test_launch_paths),
	    cmocka_unit_test(test_legacy_launch),
	    cmocka_unit_test(test_mig_5_blocks),
	    cmocka_unit_test(test_mig_split),
	    cmocka_unit_test(test_mig_idle_other),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
