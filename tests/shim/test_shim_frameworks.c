/*
 * test_shim_frameworks.c - programs shaped like the frameworks' allocators
 * (tests/shim/fw_torch.c: PyTorch's caching allocator and its expandable
 * segments; tests/shim/fw_jax.c: JAX's preallocation and on-demand growth)
 * run unchanged with libcnlab-cuda.so preloaded over the fake driver, in a
 * slice of 500 MiB on a 16 GiB GPU (500 MiB: three quarters of it is not a
 * whole number of 2 MiB pages).  Each program checks its own view (total =
 * the quota, used = what the driver holds) and that the driver never holds
 * more than the quota for it; here we check that it finished, fitted when
 * the work fits and reported out of memory when it does not.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "harness.h"
#include "shim/region.h"

#define MiB   (1ULL << 20)
#define QUOTA (500 * MiB)

static char gpu_path[300], region_path[300];
static char env_region[400], env_gpu[400];
static char *const env_mem = "CNL_FAKE_MEM=17179869184"; /* 16 GiB */
static char *const env_quota = "CNL_TEST_QUOTA=524288000";

static int group_setup(void **state)
{
	(void)state;
	scratch_init("frameworks");
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

static int setup(void **state)
{
	(void)state;
	assert_int_equal(cnl_region_create(region_path, QUOTA, 0, "p1", NULL),
	                 0);
	return 0;
}

/* Run exe to the end; its output in out (lines joined by '|'), its exit
 * status returned. */
static int run_fw(const char *exe, char *const args[], char *const env[],
                  char *out, size_t cap)
{
	struct child c = spawn_exe(exe, args, env, 1);
	char line[256];
	size_t len = 0;

	out[0] = '\0';
	while (read_line(&c, line, sizeof(line)) == 0 &&
	       len + strlen(line) + 2 < cap)
		len += (size_t)snprintf(out + len, cap - len, "%s|", line);
	print_message("%s: %s\n", args[0], out);
	return reap(&c);
}

static void assert_region_empty(void)
{
	struct cnl_region_handle h;

	assert_int_equal(cnl_region_map(region_path, &h), 0);
	assert_int_equal(atomic_load(&h.r->used), 0);
	assert_true(atomic_load(&h.r->peak) <= QUOTA);
	cnl_region_unmap(&h);
}

static void test_torch_caching(void **state)
{
	char *args[] = {"caching", NULL};
	char *env[] = {env_region, env_gpu, env_mem, env_quota, NULL};
	char out[2048];

	(void)state;
	assert_int_equal(run_fw(FW_TORCH, args, env, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "|loop ok "));
	/* 7/8 of the device fitted once the cache was given back. */
	assert_non_null(strstr(out, "|big ok retries 1|"));
	assert_non_null(strstr(out, "|overflow oom after "));
	assert_region_empty();
}

static void test_torch_expandable(void **state)
{
	char *args[] = {"expandable", NULL};
	char *env[] = {env_region, env_gpu, env_mem, env_quota, NULL};
	char out[2048];

	(void)state;
	assert_int_equal(run_fw(FW_TORCH, args, env, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "|loop ok "));
	assert_non_null(strstr(out, "|big ok "));
	assert_non_null(strstr(out, "|overflow oom after "));
	assert_region_empty();
}

static void test_jax_preallocate(void **state)
{
	char *fits[] = {"300", NULL}, *over[] = {"400", NULL};
	char *env[] = {env_region, env_gpu, env_mem, env_quota, NULL};
	char out[2048];

	(void)state;
	/* 75% of the 500 MiB free: 375 MiB, in 188 pages of the driver. */
	assert_int_equal(run_fw(FW_JAX, fits, env, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "prealloc 393216000|"));
	assert_non_null(strstr(out, "|ok "));
	assert_int_equal(run_fw(FW_JAX, over, env, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "|oom "));
	assert_region_empty();
}

static void test_jax_grow(void **state)
{
	char *fits[] = {"300", NULL}, *over[] = {"400", NULL};
	char *env[] = {env_region,
	               env_gpu,
	               env_mem,
	               env_quota,
	               "XLA_PYTHON_CLIENT_PREALLOCATE=false",
	               NULL};
	char out[2048];

	(void)state;
	assert_int_equal(run_fw(FW_JAX, fits, env, out, sizeof(out)), 0);
	assert_null(strstr(out, "prealloc"));
	assert_non_null(strstr(out, "ok "));
	assert_int_equal(run_fw(FW_JAX, over, env, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "oom "));
	assert_region_empty();
}

/* Another process of the slice holds 200 MiB: JAX is told 300 MiB are
 * free and preallocates 75% of that; 95% of it still fits (rounded up to
 * pages) beside the neighbour; all of the quota does not. */
static void test_jax_beside_a_neighbour(void **state)
{
	char *args[] = {"repl", NULL}, *work[] = {"100", NULL};
	char *env[] = {env_region, env_gpu, env_mem, env_quota, NULL};
	char *env95[] = {env_region,
	                 env_gpu,
	                 env_mem,
	                 env_quota,
	                 "XLA_PYTHON_CLIENT_MEM_FRACTION=0.95",
	                 NULL};
	char out[2048], line[128];
	struct child n = spawn(args, env, 1);

	(void)state;
	assert_int_equal(read_line(&n, line, sizeof(line)), 0);
	assert_int_equal(ask(&n, "alloc 209715200", line, sizeof(line)), 0);
	assert_string_equal(line, "ok 0");
	assert_int_equal(run_fw(FW_JAX, work, env, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "prealloc 235929600|")); /* 225 MiB */
	assert_int_equal(run_fw(FW_JAX, work, env95, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "|ok "));
	ask(&n, "exit", line, sizeof(line));
	assert_int_equal(reap(&n), 0);
	assert_region_empty();
}

/* The same programs without the shim, on a GPU of the quota's size: what
 * they do under the shim is what they do on such a GPU. */
static void test_without_the_shim(void **state)
{
	char *caching[] = {"caching", NULL},
	     *expandable[] = {"expandable", NULL};
	char *jax[] = {"300", NULL};
	char *env[] = {"CNLAB_REGION=", env_gpu, "CNL_FAKE_MEM=524288000",
	               env_quota, NULL};
	char out[2048];

	(void)state;
	assert_int_equal(run_fw(FW_TORCH, caching, env, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "|overflow oom after "));
	assert_int_equal(run_fw(FW_TORCH, expandable, env, out, sizeof(out)),
	                 0);
	assert_int_equal(run_fw(FW_JAX, jax, env, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "prealloc 393216000|"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup(test_torch_caching, setup),
	    cmocka_unit_test_setup(test_torch_expandable, setup),
	    cmocka_unit_test_setup(test_jax_preallocate, setup),
	    cmocka_unit_test_setup(test_jax_grow, setup),
	    cmocka_unit_test_setup(test_jax_beside_a_neighbour, setup),
	    cmocka_unit_test(test_without_the_shim),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
