/*
 * test_hip_share.c - compute share of HIP programs under libcnlab-hip.so,
 * measured by the fake runtime's own ledger (busy_ns per tag in the fake
 * GPU state, counted by tests/fakes/fake_hip.c, not by the shim): a
 * 25-block slice gets 25% +- 3 points of the GPU, as the CUDA shim's test
 * requires (test_shim_share.c), and every HIP launch path is held to its
 * share.
 *
 * The greedy programs keep four 1 ms kernels in flight.  Shares are ratios
 * of GPU time over a window of wall time: a slow machine moves when
 * launches happen, not the ratios; no assertion is on a duration.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <cmocka.h>

#include "harness.h"
#include "fake_gpu.h"
#include "shim/region.h"

#define WARMUP_MS 400
#define WINDOW_MS 2500

static char gpu_path[300], env_gpu[400];
static struct fake_gpu *gpu;

static int group_setup(void **state)
{
	int fd;

	(void)state;
	scratch_init("hipshare");
	scratch_path(gpu_path, sizeof(gpu_path), "gpu");
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
	const char *mode;
	unsigned share;
	double got;
	uint64_t shim_busy;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One greedy process per slice, each in its own region; tag i + 1. */
static void measure(struct slice *s, int n)
{
	struct child c[8];
	char region[8][300], env_r[8][400], env_t[8][32], line[64], secs[32];
	struct cnl_region_handle h[8];
	uint64_t b0[8], b1[8];
	double t0, t1;

	snprintf(secs, sizeof(secs), "%.1f",
	         (WARMUP_MS + WINDOW_MS) / 1000.0 + 1.0);
	for (int i = 0; i < n; i++) {
		char leaf[32];

		snprintf(leaf, sizeof(leaf), "region-%s", s[i].mode);
		scratch_path(region[i], sizeof(region[i]), leaf);
		assert_int_equal(
		    cnl_region_create(region[i], 0, s[i].share, "p", NULL), 0);
		assert_int_equal(cnl_region_map(region[i], &h[i]), 0);
		snprintf(env_r[i], sizeof(env_r[i]), "CNLAB_REGION=%.300s",
		         region[i]);
		snprintf(env_t[i], sizeof(env_t[i]), "CNL_FAKE_TAG=%d", i + 1);
	}
	for (int i = 0; i < n; i++) {
		char *args[] = {"greedy", (char *)s[i].mode, "1000", secs,
		                NULL};
		char *env[] = {env_r[i], env_t[i], env_gpu, NULL};

		c[i] = spawn(args, env, 1);
		assert_int_equal(read_line(&c[i], line, sizeof(line)), 0);
		assert_string_equal(line, "ready");
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
		struct cnl_region_stat st;

		s[i].got = (double)(b1[i] - b0[i]) / 1e9 / (t1 - t0);
		assert_int_equal(reap(&c[i]), 0);
		assert_int_equal(cnl_region_stat(h[i].r, &st), 0);
		s[i].shim_busy = 0;
		for (unsigned k = 0; k < st.nprocs; k++)
			s[i].shim_busy += st.procs[k].busy_ns;
		print_message("%-9s share %3u%% got %5.1f%% of the GPU\n",
		              s[i].mode, s[i].share, 100.0 * s[i].got);
		cnl_region_unmap(&h[i]);
	}
}

static void test_cap_25(void **state)
{
	struct slice s[] = {{"kernel", 25, 0, 0}};

	(void)state;
	measure(s, 1);
	assert_true(s[0].got > 0.22 && s[0].got < 0.28);
}

/* Every launch path goes through the bucket. */
static void test_launch_paths_a(void **state)
{
	struct slice s[] = {{"spt", 20, 0, 0},
	                    {"ext", 20, 0, 0},
	                    {"module", 20, 0, 0},
	                    {"extmodule", 20, 0, 0}};

	(void)state;
	measure(s, 4);
	for (int i = 0; i < 4; i++)
		assert_true(s[i].got > 0.17 && s[i].got < 0.23);
}

static void test_launch_paths_b(void **state)
{
	struct slice s[] = {{"coop", 15, 0, 0},
	                    {"coopspt", 15, 0, 0},
	                    {"graph", 15, 0, 0},
	                    {"graphspt", 15, 0, 0}};

	(void)state;
	measure(s, 4);
	for (int i = 0; i < 4; i++)
		assert_true(s[i].got > 0.12 && s[i].got < 0.18);
}

/* hip_ext.h's launches, called by the C++ names a C++ program links. */
static void test_launch_paths_cxx(void **state)
{
	struct slice s[] = {{"extmodulecxx", 20, 0, 0},
	                    {"hccmodule", 20, 0, 0}};

	(void)state;
	measure(s, 2);
	for (int i = 0; i < 2; i++)
		assert_true(s[i].got > 0.17 && s[i].got < 0.23);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cap_25),
	    cmocka_unit_test(test_launch_paths_a),
	    cmocka_unit_test(test_launch_paths_b),
	    cmocka_unit_test(test_launch_paths_cxx),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
