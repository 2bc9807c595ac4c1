/*
 * test_shim_escapes.c - the attacks of a hostile tenant through every
 * driver export that obtains device memory or opens another process's
 * memory besides the plain allocators (src/shim/driver-exports.tsv),
 * performed by real processes (tests/shim/escapetest) with the shim
 * preloaded over the fake driver; and cuGetProcAddress swept over every
 * hooked name, version and flag.  Each test fails where the escape works.
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
/* A GPU of 4 GiB, and slices of 64 MiB: an escape shows as far more. */
static char *const env_mem = "CNL_FAKE_MEM=4294967296";

static int group_setup(void **state)
{
	(void)state;
	scratch_init("escapes");
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

/* The 32-bit allocators and memory information, graph allocation nodes
 * (direct, cuGraphAddNode, stream capture), context limits and external
 * memory, under a 64 MiB quota on a 4 GiB GPU. */
static void test_quota_escapes(void **state)
{
	struct cnl_region_handle h = region(64 * MiB, 0);
	char *args[] = {"escapes", NULL};
	char *env[] = {env_region, env_gpu, env_mem, "CNL_TEST_QUOTA=67108864",
	               NULL};

	(void)state;
	assert_int_equal(run(args, env), 0);
	/* Exit gave everything back. */
	assert_int_equal(atomic_load(&h.r->used), 0);
	assert_true(atomic_load(&h.r->peak) <= 64 * MiB);
	cnl_region_unmap(&h);
}

/* Without a region the same calls reach the driver (nothing refused). */
static void test_no_region_passes(void **state)
{
	char *args[] = {"escapes", NULL};
	char *env[] = {"CNLAB_REGION=", env_gpu, env_mem,
	               "CNL_TEST_QUOTA=67108864", NULL};

	(void)state;
	/* Every refusal check fails: the program reports failures. */
	assert_int_equal(run(args, env), 1);
}

/* Contexts the primary-context and cuCtxCreate_v2 hooks do not see. */
static void test_other_contexts_charged(void **state)
{
	const char *modes[] = {"v1", "green"};

	(void)state;
	for (int i = 0; i < 2; i++) {
		struct cnl_region_handle h = region(64 * MiB, 7 * MiB);
		char *args[] = {"ctx", (char *)modes[i], NULL};
		char *env[] = {env_region, env_gpu, env_mem, NULL};
		struct child c = spawn(args, env, 1);
		char line[64];

		assert_int_equal(read_line(&c, line, sizeof(line)), 0);
		assert_string_equal(line, "0 7340032");
		assert_int_equal(reap(&c), 0);
		cnl_region_unmap(&h);
	}
}

/* Shareable handles of VMM memory and pools, and pool pointers: opened
 * within a project, refused across projects. */
static void test_shareable_handles(void **state)
{
	char ra[300], rb[300], rc_[300], ipc[300], file[300];
	char ea[400], eb[400], ec[400];
	struct cnl_region_opts shared = {.ipc_dir = ipc};
	char *exp[] = {"share-export", file, NULL};
	char *imp[] = {"share-import", file, NULL};
	char line[128];
	struct child ex;
	struct {
		char *env_region;
		const char *want;
	} cases[4];

	(void)state;
	scratch_path(ra, sizeof(ra), "sa");
	scratch_path(rb, sizeof(rb), "sb");
	scratch_path(rc_, sizeof(rc_), "sc");
	scratch_path(ipc, sizeof(ipc), "share-ipc");
	scratch_path(file, sizeof(file), "shared");
	assert_int_equal(mkdir(ipc, 0777), 0);
	assert_int_equal(cnl_region_create(ra, 0, 0, "p1", &shared), 0);
	assert_int_equal(cnl_region_create(rb, 0, 0, "p1", &shared), 0);
	assert_int_equal(cnl_region_create(rc_, 0, 0, "p2", &shared), 0);
	snprintf(ea, sizeof(ea), "CNLAB_REGION=%s", ra);
	snprintf(eb, sizeof(eb), "CNLAB_REGION=%s", rb);
	snprintf(ec, sizeof(ec), "CNLAB_REGION=%s", rc_);
	{
		char *env[] = {ea, env_gpu, env_mem, NULL};
		ex = spawn(exp, env, 1);
		assert_int_equal(read_line(&ex, line, sizeof(line)), 0);
		assert_string_equal(line, "ready");
	}
	cases[0].env_region = eb; /* same project, another slice */
	cases[0].want = "vmm-fd 0 vmm-fabric 0 pool-fd 0 ptr 0";
	cases[1].env_region = ec; /* another project */
	cases[1].want = "vmm-fd 800 vmm-fabric 800 pool-fd 800 ptr 800";
	cases[2].env_region = "CNLAB_REGION="; /* unmanaged process */
	cases[2].want = "vmm-fd 0 vmm-fabric 0 pool-fd 0 ptr 0";
	cases[3].env_region = ea; /* the exporter's own slice */
	cases[3].want = "vmm-fd 0 vmm-fabric 0 pool-fd 0 ptr 0";
	for (int i = 0; i < 4; i++) {
		char *env[] = {cases[i].env_region, env_gpu, env_mem, NULL};
		struct child c = spawn(imp, env, 1);

		assert_int_equal(read_line(&c, line, sizeof(line)), 0);
		assert_string_equal(line, cases[i].want);
		assert_int_equal(reap(&c), 0);
	}
	assert_int_equal(reap(&ex), 0);
}

/* Where every exported descriptor is of one file (a driver whose
 * descriptors share an inode), a second project's export makes the key
 * nobody's: the second project cannot import the first's descriptor by
 * registering its own, and descriptor imports fail closed for both. */
static void test_shared_inode_fails_closed(void **state)
{
	char ra[300], rb[300], rc_[300], ipc[300], f1[300], f2[300];
	char ea[400], eb[400], ec[400], share[400], path[300];
	struct cnl_region_opts shared = {.ipc_dir = ipc};
	char *exp1[] = {"share-export", f1, NULL};
	char *exp2[] = {"share-export", f2, NULL};
	char *imp[] = {"share-import", f1, NULL};
	char line[128];
	struct child x1, x2;

	(void)state;
	scratch_path(ra, sizeof(ra), "ua");
	scratch_path(rb, sizeof(rb), "ub");
	scratch_path(rc_, sizeof(rc_), "uc");
	scratch_path(ipc, sizeof(ipc), "inode-ipc");
	scratch_path(f1, sizeof(f1), "inode1");
	scratch_path(f2, sizeof(f2), "inode2");
	scratch_path(path, sizeof(path), "one-file");
	snprintf(share, sizeof(share), "CNL_FAKE_SHARE_FILE=%s", path);
	assert_int_equal(mkdir(ipc, 0777), 0);
	assert_int_equal(cnl_region_create(ra, 0, 0, "p1", &shared), 0);
	assert_int_equal(cnl_region_create(rb, 0, 0, "p1", &shared), 0);
	assert_int_equal(cnl_region_create(rc_, 0, 0, "p2", &shared), 0);
	snprintf(ea, sizeof(ea), "CNLAB_REGION=%s", ra);
	snprintf(eb, sizeof(eb), "CNLAB_REGION=%s", rb);
	snprintf(ec, sizeof(ec), "CNLAB_REGION=%s", rc_);
	{
		char *env[] = {ea, env_gpu, env_mem, share, NULL};
		x1 = spawn(exp1, env, 1);
		assert_int_equal(read_line(&x1, line, sizeof(line)), 0);
		assert_string_equal(line, "ready");
	}
	{
		char *env[] = {ec, env_gpu, env_mem, share, NULL};
		x2 = spawn(exp2, env, 1);
		assert_int_equal(read_line(&x2, line, sizeof(line)), 0);
		assert_string_equal(line, "ready");
	}
	/* p2 opens p1's descriptors: refused (its own export did not make
	 * the shared key its own). */
	{
		char *env[] = {ec, env_gpu, env_mem, NULL};
		struct child c = spawn(imp, env, 1);

		assert_int_equal(read_line(&c, line, sizeof(line)), 0);
		assert_string_equal(
		    line, "vmm-fd 800 vmm-fabric 800 pool-fd 800 ptr 800");
		assert_int_equal(reap(&c), 0);
	}
	/* p1 itself, from another slice: descriptors fail closed; the
	 * fabric handle (its own 64 bytes) still opens; the pointer needs
	 * the refused pool (the driver says invalid value). */
	{
		char *env[] = {eb, env_gpu, env_mem, NULL};
		struct child c = spawn(imp, env, 1);

		assert_int_equal(read_line(&c, line, sizeof(line)), 0);
		assert_string_equal(
		    line, "vmm-fd 800 vmm-fabric 0 pool-fd 800 ptr 1");
		assert_int_equal(reap(&c), 0);
	}
	assert_int_equal(reap(&x1), 0);
	assert_int_equal(reap(&x2), 0);
}

/* cuGetProcAddress(_v2) for every hooked name, cudaVersion 1000..99999
 * and the three flags: never the driver's own entry point. */
static void test_procaddr_sweep(void **state)
{
	char *args[] = {"procaddr-sweep", NULL};
	char *env[] = {env_region, env_gpu, env_mem, NULL};
	struct cnl_region_handle h = region(64 * MiB, 0);

	(void)state;
	assert_int_equal(run(args, env), 0);
	cnl_region_unmap(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_quota_escapes),
	    cmocka_unit_test(test_no_region_passes),
	    cmocka_unit_test(test_other_contexts_charged),
	    cmocka_unit_test(test_shareable_handles),
	    cmocka_unit_test(test_shared_inode_fails_closed),
	    cmocka_unit_test(test_procaddr_sweep),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
