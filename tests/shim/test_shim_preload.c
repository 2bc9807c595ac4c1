/*
 * test_shim_preload.c - libcnlab-cuda.so preloaded into real processes
 * (tests/shim/shimtest) over the fake driver: every allocation path, lookup
 * interposition, memory information, quota exhaustion and recovery, four
 * processes on one quota, in-flight resize, kill -9 at any instant many
 * times, PID-independent accounting, IPC across projects, NVML process
 * lists, and a region that cannot be used.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"
#include "shim/region.h"

#define MiB (1ULL << 20)

static char gpu_path[300], region_path[300];
static char env_region[400], env_gpu[400];
static char *const env_mem = "CNL_FAKE_MEM=1073741824"; /* 1 GiB */

static int group_setup(void **state)
{
	(void)state;
	scratch_init("preload");
	scratch_path(gpu_path, sizeof(gpu_path), "gpu");
	scratch_path(region_path, sizeof(region_path), "region");
	snprintf(env_region, sizeof(env_region), "CNLAB_REGION=%s",
	         region_path);
	snprintf(env_gpu, sizeof(env_gpu), "CNL_FAKE_GPU=%s", gpu_path);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	scratch_done();
	return 0;
}

static struct cnl_region_handle region(uint64_t quota, uint64_t ctx)
{
	struct cnl_region_opts o = {.ctx_reserve = ctx};
	struct cnl_region_handle h;

	assert_int_equal(cnl_region_create(region_path, quota, 0, "p1", &o), 0);
	assert_int_equal(cnl_region_map(region_path, &h), 0);
	return h;
}

static void test_paths(void **state)
{
	struct cnl_region_handle h = region(1ULL << 30, 7 * MiB);
	char *args[] = {"paths", NULL};
	char *env[] = {env_region, env_gpu, env_mem, "CNL_TEST_CTX=7340032",
	               NULL};

	(void)state;
	assert_int_equal(run(args, env), 0);
	/* Exit gave everything back, context footprint included. */
	assert_int_equal(atomic_load(&h.r->used), 0);
	/* The largest single object is the 8 MiB array. */
	assert_int_equal(atomic_load(&h.r->peak), 7 * MiB + 8 * MiB);
	cnl_region_unmap(&h);
}

static void test_procaddr(void **state)
{
	struct cnl_region_handle h = region(256 * MiB, 0);
	char *args[] = {"procaddr", NULL};
	char *env[] = {env_region, env_gpu, env_mem, "CNL_TEST_QUOTA=268435456",
	               NULL};

	(void)state;
	assert_int_equal(run(args, env), 0);
	cnl_region_unmap(&h);
}

static void test_meminfo(void **state)
{
	struct cnl_region_handle h = region(64 * MiB, 0);
	char *small[] = {"meminfo", "67108864", NULL};
	char *large[] = {"meminfo", "4294967296", NULL};
	char *none[] = {"meminfo", "0", NULL};
	char *env[] = {env_region, env_gpu, env_mem, NULL};
	char *env_none[] = {"CNLAB_REGION=", env_gpu, env_mem, NULL};

	(void)state;
	assert_int_equal(run(small, env), 0);
	/* A quota above the GPU reports the GPU. */
	cnl_region_set_quota(h.r, 4ULL << 30);
	assert_int_equal(run(large, env), 0);
	/* No quota in the region: the real values. */
	cnl_region_set_quota(h.r, 0);
	assert_int_equal(run(none, env), 0);
	/* No region at all: the real values. */
	assert_int_equal(run(none, env_none), 0);
	cnl_region_unmap(&h);
}

static struct child repl(char *const env[])
{
	char *args[] = {"repl", NULL};
	char line[128];
	struct child c = spawn(args, env, 1);

	assert_int_equal(read_line(&c, line, sizeof(line)), 0);
	assert_string_equal(line, "ready");
	return c;
}

static void test_quota_exhaustion(void **state)
{
	struct cnl_region_handle h = region(64 * MiB, 0);
	char *env[] = {env_region, env_gpu, env_mem, NULL};
	struct child c = repl(env);
	char line[128];

	(void)state;
	/* Each 1 MiB takes a 2 MiB page: 32 fit in 64 MiB. */
	assert_int_equal(ask(&c, "fill 1048576", line, sizeof(line)), 0);
	assert_string_equal(line, "32 2"); /* CUDA_ERROR_OUT_OF_MEMORY */
	/* Nothing leaked: the driver holds exactly what was granted. */
	assert_int_equal(ask(&c, "used", line, sizeof(line)), 0);
	assert_string_equal(line, "67108864");
	assert_int_equal(ask(&c, "info", line, sizeof(line)), 0);
	assert_string_equal(line, "0 67108864");
	assert_int_equal(ask(&c, "alloc 1", line, sizeof(line)), 0);
	assert_string_equal(line, "fail 2");
	/* Recovery: free one, allocate again; the process kept running. */
	assert_int_equal(ask(&c, "free 1", line, sizeof(line)), 0);
	assert_int_equal(ask(&c, "alloc 1048576", line, sizeof(line)), 0);
	assert_string_equal(line, "ok 0");
	assert_int_equal(ask(&c, "free-all", line, sizeof(line)), 0);
	assert_int_equal(atomic_load(&h.r->used), 0);
	assert_true(atomic_load(&h.r->oom) >= 2);
	assert_int_equal(reap(&c), 0);
	cnl_region_unmap(&h);
}

/* The driver refuses (its memory is smaller than the quota): the
 * reservation is rolled back, and free memory is never above the real. */
static void test_driver_failure_rolls_back(void **state)
{
	struct cnl_region_handle h = region(1ULL << 30, 0);
	char *env[] = {env_region, env_gpu, "CNL_FAKE_MEM=33554432", NULL};
	struct child c = repl(env);
	char line[128];

	(void)state;
	/* 16 pages of 2 MiB fill the driver's 32 MiB. */
	assert_int_equal(ask(&c, "fill 1048576", line, sizeof(line)), 0);
	assert_string_equal(line, "16 2");
	assert_int_equal(atomic_load(&h.r->used), 32 * MiB);
	assert_int_equal(atomic_load(&h.r->oom), 0); /* not the quota's */
	assert_int_equal(ask(&c, "info", line, sizeof(line)), 0);
	assert_string_equal(line, "0 33554432");
	assert_int_equal(ask(&c, "free-all", line, sizeof(line)), 0);
	assert_int_equal(atomic_load(&h.r->used), 0);
	ask(&c, "exit", line, sizeof(line));
	assert_int_equal(reap(&c), 0);
	cnl_region_unmap(&h);
}

static void test_four_processes(void **state)
{
	struct cnl_region_handle h = region(100 * MiB, 0);
	char *env[] = {env_region, env_gpu, env_mem, NULL};
	struct child c[4];
	char line[128];
	unsigned long long total = 0;

	(void)state;
	for (int i = 0; i < 4; i++)
		c[i] = repl(env);
	/* All four fill at once. */
	for (int i = 0; i < 4; i++) {
		fprintf(c[i].in, "fill 1048576\n");
		fflush(c[i].in);
	}
	for (int i = 0; i < 4; i++) {
		unsigned long long n;
		int rc;
		assert_int_equal(read_line(&c[i], line, sizeof(line)), 0);
		assert_int_equal(sscanf(line, "%llu %d", &n, &rc), 2);
		assert_int_equal(rc, 2);
		total += n;
	}
	assert_int_equal(total, 50); /* 1 MiB each, in 2 MiB pages */
	assert_int_equal(atomic_load(&h.r->used), 100 * MiB);
	for (int i = 0; i < 4; i++) {
		ask(&c[i], "exit", line, sizeof(line));
		reap(&c[i]);
	}
	assert_int_equal(atomic_load(&h.r->used), 0);
	cnl_region_unmap(&h);
}

static void test_resize_in_flight(void **state)
{
	struct cnl_region_handle h = region(16 * MiB, 0);
	char *env[] = {env_region, env_gpu, env_mem, NULL};
	struct child c = repl(env);
	struct cnl_region_stat st;
	char line[128];

	(void)state;
	/* 1 MiB each, charged as the 2 MiB page the driver takes. */
	assert_int_equal(ask(&c, "fill 1048576", line, sizeof(line)), 0);
	assert_string_equal(line, "8 2");
	cnl_region_set_quota(h.r, 32 * MiB); /* raised: no restart */
	assert_int_equal(ask(&c, "fill 1048576", line, sizeof(line)), 0);
	assert_string_equal(line, "8 2");
	cnl_region_set_quota(h.r, 8 * MiB); /* lowered below use */
	assert_int_equal(ask(&c, "info", line, sizeof(line)), 0);
	assert_string_equal(line, "0 8388608");
	assert_int_equal(ask(&c, "alloc 1048576", line, sizeof(line)), 0);
	assert_string_equal(line, "fail 2");
	/* Down to 3 pages (6 MiB): one more fits under 8 MiB. */
	assert_int_equal(ask(&c, "free 13", line, sizeof(line)), 0);
	assert_int_equal(ask(&c, "alloc 1048576", line, sizeof(line)), 0);
	assert_string_equal(line, "ok 0");
	/* Current and peak use, per process, for the agent to watch. */
	assert_int_equal(cnl_region_stat(h.r, &st), 0);
	assert_int_equal(st.nprocs, 1);
	assert_int_equal(st.procs[0].pid, c.pid);
	assert_int_equal(st.procs[0].used, 8 * MiB);
	assert_int_equal(st.procs[0].peak, 32 * MiB);
	assert_int_equal(st.peak, 32 * MiB);
	ask(&c, "exit", line, sizeof(line));
	assert_int_equal(reap(&c), 0);
	cnl_region_unmap(&h);
}

/*
 * kill -9 at random instants of processes allocating and freeing in two
 * threads (through every lock the shim and the region take), many times:
 * afterwards the region holds exactly what the survivors hold.
 */
static void test_kill9(void **state)
{
	struct cnl_region_handle h = region(4ULL << 30, 0);
	char *env[] = {env_region, env_gpu, env_mem, NULL};
	char *hargs[] = {"hammer", NULL};
	struct child a = repl(env), b = repl(env);
	struct cnl_region_stat st;
	unsigned seed = (unsigned)getpid();
	char line[128];
	int rounds = 60;

	(void)state;
	assert_int_equal(ask(&a, "alloc 10485760", line, sizeof(line)), 0);
	assert_int_equal(ask(&b, "alloc 20971520", line, sizeof(line)), 0);
	for (int i = 0; i < rounds; i++) {
		struct child k[2];

		for (int j = 0; j < 2; j++) {
			k[j] = spawn(hargs, env, 1);
			assert_int_equal(read_line(&k[j], line, sizeof(line)),
			                 0);
		}
		sleep_ms((unsigned)rand_r(&seed) % 15);
		for (int j = 0; j < 2; j++)
			kill9(&k[j]);
	}
	cnl_region_reap(&h, -1);
	assert_int_equal(cnl_region_stat(h.r, &st), 0);
	assert_int_equal(st.nprocs, 2);
	assert_int_equal(st.used, 30 * MiB);
	assert_int_equal(st.reaped, 2 * rounds);
	print_message("kill9: %d processes killed, %llu lock repairs\n",
	              2 * rounds, (unsigned long long)st.repairs);
	/* Nothing is wedged: the survivors allocate and free. */
	assert_int_equal(ask(&a, "alloc 1048576", line, sizeof(line)), 0);
	assert_string_equal(line, "ok 0");
	assert_int_equal(ask(&a, "free-all", line, sizeof(line)), 0);
	assert_int_equal(ask(&b, "free-all", line, sizeof(line)), 0);
	assert_int_equal(atomic_load(&h.r->used), 0);
	reap(&a);
	reap(&b);
	cnl_region_unmap(&h);
}

static void test_ipc(void **state)
{
	char ra[300], rb[300], rc_[300], rd[300], ipc[300], file[300];
	char ea[400], eb[400], ec[400], ed[400];
	struct cnl_region_opts shared = {.ipc_dir = ipc};
	char *exp[] = {"ipc-export", file, NULL};
	char *opn[] = {"ipc-open", file, NULL};
	char line[128];
	struct {
		char *env_region;
		const char *want;
	} cases[5];

	(void)state;
	scratch_path(ra, sizeof(ra), "ra");
	scratch_path(rb, sizeof(rb), "rb");
	scratch_path(rc_, sizeof(rc_), "rc");
	scratch_path(rd, sizeof(rd), "rd");
	scratch_path(ipc, sizeof(ipc), "ipc");
	scratch_path(file, sizeof(file), "handles");
	assert_int_equal(mkdir(ipc, 0777), 0);
	assert_int_equal(cnl_region_create(ra, 0, 0, "p1", &shared), 0);
	assert_int_equal(cnl_region_create(rb, 0, 0, "p1", &shared), 0);
	assert_int_equal(cnl_region_create(rc_, 0, 0, "p2", &shared), 0);
	assert_int_equal(cnl_region_create(rd, 0, 0, "p1", NULL), 0);
	snprintf(ea, sizeof(ea), "CNLAB_REGION=%s", ra);
	snprintf(eb, sizeof(eb), "CNLAB_REGION=%s", rb);
	snprintf(ec, sizeof(ec), "CNLAB_REGION=%s", rc_);
	snprintf(ed, sizeof(ed), "CNLAB_REGION=%s", rd);
	{
		char *env[] = {ea, env_gpu, env_mem, NULL};
		assert_int_equal(run(exp, env), 0);
	}
	cases[0].env_region = ea; /* same slice */
	cases[0].want = "mem 0 legacy 0 proc 0 event 0";
	cases[1].env_region = eb; /* same project, another slice */
	cases[1].want = "mem 0 legacy 0 proc 0 event 0";
	cases[2].env_region = ec; /* another project */
	cases[2].want = "mem 800 legacy 800 proc 800 event 800";
	cases[3].env_region = ed; /* no node-wide registry: slice only */
	cases[3].want = "mem 800 legacy 800 proc 800 event 800";
	cases[4].env_region = "CNLAB_REGION="; /* unmanaged process */
	cases[4].want = "mem 0 legacy 0 proc 0 event 0";
	for (int i = 0; i < 5; i++) {
		char *env[] = {cases[i].env_region, env_gpu, env_mem, NULL};
		struct child c = spawn(opn, env, 1);

		assert_int_equal(read_line(&c, line, sizeof(line)), 0);
		assert_string_equal(line, cases[i].want);
		assert_int_equal(reap(&c), 0);
	}
}

static int has_pid(const char *list, pid_t pid)
{
	char needle[32];

	snprintf(needle, sizeof(needle), "\n%d\n", (int)pid);
	return strstr(list, needle) != NULL;
}

static void test_nvml_processes(void **state)
{
	char rb[300], eb[400], list[4096] = "\n", line[128];
	struct cnl_region_handle h = region(0, 0);
	char *env_a[] = {env_region, env_gpu, env_mem, NULL};
	char *env_b[] = {eb, env_gpu, env_mem, NULL};
	char *args[] = {"nvml", NULL};
	struct child a1, a2, b1, n;
	size_t len = 1;

	(void)state;
	scratch_path(rb, sizeof(rb), "region-b");
	assert_int_equal(cnl_region_create(rb, 0, 0, "p2", NULL), 0);
	snprintf(eb, sizeof(eb), "CNLAB_REGION=%s", rb);
	a1 = repl(env_a);
	a2 = repl(env_a);
	b1 = repl(env_b);
	ask(&a1, "alloc 1", line, sizeof(line));
	ask(&a2, "alloc 1", line, sizeof(line));
	ask(&b1, "alloc 1", line, sizeof(line));
	n = spawn(args, env_a, 1);
	while (read_line(&n, line, sizeof(line)) == 0 &&
	       len + strlen(line) + 2 < sizeof(list))
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s\n",
		                        line);
	assert_int_equal(reap(&n), 0);
	assert_true(has_pid(list, a1.pid));
	assert_true(has_pid(list, a2.pid));
	assert_true(has_pid(list, n.pid));
	assert_false(has_pid(list, b1.pid));
	assert_false(has_pid(list, getpid()));
	reap(&a1);
	reap(&a2);
	reap(&b1);
	cnl_region_unmap(&h);
}

/* First CUDA calls from eight threads at once: one attach, no deadlock. */
static void test_threads_at_startup(void **state)
{
	struct cnl_region_handle h = region(1ULL << 30, 3 * MiB);
	char *args[] = {"threads", NULL};
	char *env[] = {env_region, env_gpu, env_mem, NULL};
	struct cnl_region_stat st;
	struct child c = spawn(args, env, 1);
	char line[64];

	(void)state;
	assert_int_equal(read_line(&c, line, sizeof(line)), 0);
	assert_string_equal(line, "ok");
	assert_int_equal(cnl_region_stat(h.r, &st), 0);
	assert_int_equal(st.nprocs, 1);
	/* 1 MiB per thread in 2 MiB pages, the context once. */
	assert_int_equal(st.used, 8 * 2 * MiB + 3 * MiB);
	fprintf(c.in, "exit\n");
	assert_int_equal(reap(&c), 0);
	assert_int_equal(atomic_load(&h.r->used), 0);
	cnl_region_unmap(&h);
}

/*
 * The granularity attack (issue 18, item 2): allocations just above a page
 * (2 MiB + 1 byte takes 4 MiB of the driver's), or far below one (1 byte
 * and 4 KiB each take a page), through every path, kept until refused
 * under a 4 GiB quota on a 16 GiB GPU.  The fake driver's own count of
 * what the process holds must never pass the quota; charged on requested
 * bytes, it reached 8 GiB (16 GiB for 1-byte allocations).
 */
struct attack {
	unsigned long long count, max, charged, driver;
	int rc;
};

static struct attack attack(const char *path, const char *bytes,
                            char *const env[])
{
	char *args[] = {"attack", (char *)path, (char *)bytes, NULL};
	struct child c = spawn(args, env, 1);
	struct attack a = {0};
	char line[256];

	assert_int_equal(read_line(&c, line, sizeof(line)), 0);
	assert_int_equal(sscanf(line, "%llu %d %llu %llu %llu", &a.count, &a.rc,
	                        &a.max, &a.charged, &a.driver),
	                 5);
	assert_int_equal(reap(&c), 0);
	print_message("attack %-8s %10s bytes: %llu allocations, driver held "
	              "at most %llu MiB, charged %llu MiB\n",
	              path, bytes, a.count, a.max >> 20, a.charged >> 20);
	return a;
}

static void test_granularity_attack(void **state)
{
	const unsigned long long quota = 4ULL << 30;
	struct cnl_region_handle h = region(quota, 0);
	char *env[] = {env_region, env_gpu, "CNL_FAKE_MEM=17179869184", NULL};
	static const char *paths[] = {"alloc", "pitch",   "managed",
	                              "array", "array3d", "mipmap"};
	static const struct {
		const char *bytes;
		unsigned long long count; /* 2 MiB pages each: 4 GiB / that */
	} sizes[] = {{"2097153", 1024}, {"1", 2048}, {"4096", 2048}};

	(void)state;
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		for (size_t j = 0; j < sizeof(sizes) / sizeof(sizes[0]); j++) {
			struct attack a = attack(paths[i], sizes[j].bytes, env);

			assert_int_equal(a.rc, 2); /* refused by the quota */
			assert_true(a.max <= quota);
			/* The whole quota was usable, in whole pages. */
			assert_int_equal(a.count, sizes[j].count);
			/* What the slice is told it uses is what the driver
			 * holds. */
			assert_int_equal(a.charged, a.driver);
			assert_int_equal(atomic_load(&h.r->used), 0);
		}
	}
	/* VMM granules mapped, then released with the mapping kept. */
	{
		struct attack a = attack("vmm-mapped", "2097152", env);

		assert_int_equal(a.rc, 2);
		assert_true(a.max <= quota);
		assert_int_equal(a.count, 2048);
		assert_int_equal(a.charged, a.driver);
	}
	/* Stream-ordered: the pool packs allocations into the pages it
	 * reserves; the slice is charged the pool's reservation. */
	for (size_t j = 0; j < 4; j++) {
		struct attack a = attack(j % 2 ? "pool" : "async",
		                         j / 2 ? "65536" : "2097153", env);

		assert_int_equal(a.rc, 2);
		assert_true(a.max <= quota);
		assert_true(a.max > quota - (8ULL << 20));
		assert_int_equal(a.charged, a.driver);
	}
	cnl_region_unmap(&h);
}

/* A pool that grows 32 MiB at a time (more than a page, as a real
 * driver's pool may): the growth that would pass the quota is undone and
 * refused, not kept. */
static void test_pool_grain(void **state)
{
	const unsigned long long quota = 100ULL << 20;
	struct cnl_region_handle h = region(quota, 0);
	char *env[] = {env_region, env_gpu, env_mem,
	               "CNL_FAKE_POOL_GRAIN=33554432", NULL};

	(void)state;
	for (size_t j = 0; j < 2; j++) {
		struct attack a = attack(j ? "pool" : "async", "2097153", env);

		assert_int_equal(a.rc, 2);
		assert_true(a.max <= quota);
		/* Three grains of 32 MiB fit, a fourth does not. */
		assert_int_equal(a.max, 96ULL << 20);
		assert_int_equal(a.charged, a.driver);
		assert_true(a.charged <= quota);
	}
	assert_int_equal(atomic_load(&h.r->used), 0);
	cnl_region_unmap(&h);
}

/* A driver that says less than it takes, or reserves larger pages than 2
 * MiB: the shim charges at least 2 MiB, and the granularity the driver
 * reports above that. */
static void test_granularity_learnt(void **state)
{
	const unsigned long long quota = 256ULL << 20;
	struct cnl_region_handle h = region(quota, 0);
	char *small[] = {env_region, env_gpu, env_mem, "CNL_FAKE_GRAN=65536",
	                 NULL};
	char *large[] = {env_region, env_gpu, env_mem, "CNL_FAKE_PAGE=4194304",
	                 NULL};
	struct attack a;

	(void)state;
	a = attack("alloc", "1", small);
	assert_int_equal(a.rc, 2);
	assert_true(a.max <= quota);
	assert_int_equal(a.count, 128);
	a = attack("alloc", "1", large);
	assert_int_equal(a.rc, 2);
	assert_true(a.max <= quota);
	assert_int_equal(a.count, 64);
	assert_int_equal(a.charged, a.driver);
	a = attack("array", "2097153", large);
	assert_int_equal(a.rc, 2);
	assert_true(a.max <= quota);
	assert_int_equal(a.count, 64);
	cnl_region_unmap(&h);
}

/* A region that cannot be mapped: fail closed, keep running. */
static void test_broken_region(void **state)
{
	char bad[300], eb[400], line[128];
	char *env[] = {eb, env_gpu, env_mem, NULL};
	struct child c;
	FILE *f;

	(void)state;
	scratch_path(bad, sizeof(bad), "not-a-region");
	f = fopen(bad, "w");
	assert_non_null(f);
	fputs("garbage", f);
	fclose(f);
	snprintf(eb, sizeof(eb), "CNLAB_REGION=%s", bad);
	c = repl(env);
	assert_int_equal(ask(&c, "alloc 1048576", line, sizeof(line)), 0);
	assert_string_equal(line, "fail 2");
	/* Fail closed for real: no memory is free, whatever the GPU has. */
	assert_int_equal(ask(&c, "info", line, sizeof(line)), 0);
	assert_int_equal(strncmp(line, "0 ", 2), 0);
	assert_true(strtoull(line + 2, NULL, 10) > 0);
	ask(&c, "exit", line, sizeof(line));
	assert_int_equal(reap(&c), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_paths),
	    cmocka_unit_test(test_procaddr),
	    cmocka_unit_test(test_meminfo),
	    cmocka_unit_test(test_quota_exhaustion),
	    cmocka_unit_test(test_driver_failure_rolls_back),
	    cmocka_unit_test(test_four_processes),
	    cmocka_unit_test(test_resize_in_flight),
	    cmocka_unit_test(test_kill9),
	    cmocka_unit_test(test_ipc),
	    cmocka_unit_test(test_nvml_processes),
	    cmocka_unit_test(test_threads_at_startup),
	    cmocka_unit_test(test_broken_region),
	    cmocka_unit_test(test_granularity_attack),
	    cmocka_unit_test(test_granularity_learnt),
	    cmocka_unit_test(test_pool_grain),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
