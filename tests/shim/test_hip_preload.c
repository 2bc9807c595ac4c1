/*
 * test_hip_preload.c - libcnlab-hip.so preloaded into real processes
 * (tests/shim/hiptest) over the fake HIP runtime (an MI300X of 192 GiB,
 * tests/fakes/fake_hip.c): every hooked allocation path is charged what
 * the runtime really takes (the region's account equals the fake
 * runtime's own count after every step) and given back by its free;
 * hipMemGetInfo and hipDeviceTotalMem show the quota; over the quota
 * every path is refused with hipErrorOutOfMemory while the GPU has 192 GiB
 * free; lookups through dlsym are hooked; IPC handles of another project
 * are refused; a region that cannot be used fails closed.
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
#define GiB (1ULL << 30)

static char region_path[300], region2_path[300], region3_path[300];
static char ipc_dir[300], handle_path[300], gpu_path[300];
static char env_region[400], env_region2[400], env_region3[400], env_gpu[400];

static int group_setup(void **state)
{
	(void)state;
	scratch_init("hip");
	scratch_path(region_path, sizeof(region_path), "region");
	scratch_path(region2_path, sizeof(region2_path), "region2");
	scratch_path(region3_path, sizeof(region3_path), "region3");
	scratch_path(ipc_dir, sizeof(ipc_dir), "ipc");
	scratch_path(handle_path, sizeof(handle_path), "handle");
	scratch_path(gpu_path, sizeof(gpu_path), "gpu");
	snprintf(env_region, sizeof(env_region), "CNLAB_REGION=%s",
	         region_path);
	snprintf(env_region2, sizeof(env_region2), "CNLAB_REGION=%s",
	         region2_path);
	snprintf(env_region3, sizeof(env_region3), "CNLAB_REGION=%s",
	         region3_path);
	snprintf(env_gpu, sizeof(env_gpu), "CNL_FAKE_GPU=%s", gpu_path);
	return mkdir(ipc_dir, 0777);
}

static int group_teardown(void **state)
{
	(void)state;
	scratch_done();
	return 0;
}

static struct cnl_region_handle make_region(const char *path, uint64_t quota,
                                            const char *project)
{
	struct cnl_region_opts o = {.ipc_dir = ipc_dir};
	struct cnl_region_handle h;

	assert_int_equal(cnl_region_create(path, quota, 0, project, &o), 0);
	assert_int_equal(cnl_region_map(path, &h), 0);
	return h;
}

static uint64_t region_used(struct cnl_region_handle *h)
{
	struct cnl_region_stat st;

	assert_int_equal(cnl_region_stat(h->r, &st), 0);
	return st.used;
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

static uint64_t ask_u64(struct child *c, const char *cmd)
{
	char line[128];

	assert_int_equal(ask(c, cmd, line, sizeof(line)), 0);
	return strtoull(line, NULL, 10);
}

/* alloc through path; returns the object id, asserting success. */
static int alloc_ok(struct child *c, const char *path, uint64_t bytes)
{
	char cmd[128], line[128];
	int id = -1;

	snprintf(cmd, sizeof(cmd), "alloc %s %llu", path,
	         (unsigned long long)bytes);
	assert_int_equal(ask(c, cmd, line, sizeof(line)), 0);
	if (sscanf(line, "ok %d", &id) != 1)
		fail_msg("%s: %s", cmd, line);
	return id;
}

static void free_ok(struct child *c, int id)
{
	char cmd[64], line[128];

	snprintf(cmd, sizeof(cmd), "free %d", id);
	assert_int_equal(ask(c, cmd, line, sizeof(line)), 0);
	assert_string_equal(line, "ok");
}

/*
 * Every path, one at a time: the region is charged exactly what the fake
 * runtime took (its pages, pitch, pool growth), the free gives it back.
 */
static void test_paths(void **state)
{
	static const struct {
		const char *path;
		uint64_t ask, charged;
	} paths[] = {
	    {"malloc", 1000000, 245 * 4096}, /* 4 KiB pages */
	    {"malloc", 1, 4096},
	    {"managed", 5000, 8192},
	    {"ext", 4097, 8192},
	    {"pitch", 1000000, 1024 * 1000}, /* 1000 rows of 1000 -> 1024 */
	    {"3d", 1000000, 1024 * 1000},    /* 1000 x 10 x 100 */
	    {"array", MiB, MiB},
	    {"3darray", MiB, MiB},
	    {"mempitch", 1000000, 1024 * 1000},
	    {"darray", MiB, MiB},   /* hipArrayCreate */
	    {"darray3d", MiB, MiB}, /* hipArray3DCreate */
	    {"vmm", 4 * MiB, 4 * MiB},
	    {"vmm-host", 2 * MiB, 0}, /* not device memory */
	};
	struct cnl_region_handle h = make_region(region_path, GiB, "p1");
	char *env[] = {env_region, env_gpu, NULL};
	struct child c = repl(env);
	char line[128];

	(void)state;
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		int id = alloc_ok(&c, paths[i].path, paths[i].ask);

		print_message("%-8s %8llu bytes: charged %llu\n", paths[i].path,
		              (unsigned long long)paths[i].ask,
		              (unsigned long long)region_used(&h));
		assert_int_equal(region_used(&h), paths[i].charged);
		assert_int_equal(ask_u64(&c, "used"), paths[i].charged);
		free_ok(&c, id);
		assert_int_equal(region_used(&h), 0);
		assert_int_equal(ask_u64(&c, "used"), 0);
	}
	/* Stream-ordered: the pool's 2 MiB growth, kept after the free until
	 * the device synchronises, as the runtime keeps it. */
	for (int k = 0; k < 2; k++) {
		const char *path = k ? "pool" : "async";
		int id = alloc_ok(&c, path, 3 * MiB);

		assert_int_equal(region_used(&h), 4 * MiB);
		assert_int_equal(ask_u64(&c, "used"), 4 * MiB);
		free_ok(&c, id);
		assert_int_equal(region_used(&h), ask_u64(&c, "used"));
		if (!k) {
			assert_int_equal(ask(&c, "sync", line, sizeof(line)),
			                 0);
			assert_int_equal(region_used(&h), 0);
			assert_int_equal(ask_u64(&c, "used"), 0);
		}
	}
	/* A VMM size off the runtime's granularity: its error, no charge. */
	assert_int_equal(ask(&c, "alloc vmm 1048576", line, sizeof(line)), 0);
	assert_string_equal(line, "fail 1"); /* hipErrorInvalidValue */
	assert_int_equal(region_used(&h), ask_u64(&c, "used"));
	assert_int_equal(reap(&c), 0);
	cnl_region_unmap(&h);
}

/* Over the quota, every path is refused; the GPU (192 GiB) is not full. */
static void test_over_quota(void **state)
{
	static const char *const paths[] = {
	    "malloc", "managed", "ext",     "pitch",  "mempitch",
	    "3d",     "array",   "3darray", "darray", "darray3d",
	    "async",  "pool",    "vmm"};
	struct cnl_region_handle h = make_region(region_path, 64 * MiB, "p1");
	char *env[] = {env_region, env_gpu, NULL};

	(void)state;
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		struct child c = repl(env);
		char cmd[128], line[128];
		int ok = 0;

		/* 8 MiB at a time: the eighth fits, the ninth does not. */
		for (int k = 0; k < 12; k++) {
			snprintf(cmd, sizeof(cmd), "alloc %s %llu", paths[i],
			         8 * MiB);
			assert_int_equal(ask(&c, cmd, line, sizeof(line)), 0);
			if (strncmp(line, "ok", 2) != 0)
				break;
			ok++;
		}
		print_message("%-8s %d x 8 MiB under 64 MiB, then %s\n",
		              paths[i], ok, line);
		assert_string_equal(line, "fail 2"); /* hipErrorOutOfMemory */
		assert_true(ok >= 7 && ok <= 8);
		/* What the runtime holds never passed the quota. */
		assert_true(ask_u64(&c, "used") <= 64 * MiB);
		assert_int_equal(region_used(&h), ask_u64(&c, "used"));
		assert_int_equal(reap(&c), 0);
		/* Exit gave everything back. */
		assert_int_equal(region_used(&h), 0);
	}
	cnl_region_unmap(&h);
}

/* hipMemGetInfo and hipDeviceTotalMem show the quota, not the MI300X. */
static void test_meminfo(void **state)
{
	struct cnl_region_handle h = make_region(region_path, 64 * MiB, "p1");
	char *env[] = {env_region, env_gpu, NULL};
	char *env_none[] = {"CNLAB_REGION=", env_gpu, NULL};
	struct child c = repl(env);
	char line[128];
	int id;

	(void)state;
	assert_int_equal(ask(&c, "info", line, sizeof(line)), 0);
	assert_string_equal(line, "67108864 67108864");
	id = alloc_ok(&c, "malloc", 10 * MiB);
	assert_int_equal(ask(&c, "info", line, sizeof(line)), 0);
	assert_string_equal(line, "56623104 67108864");
	assert_int_equal(ask_u64(&c, "total"), 64 * MiB);
	free_ok(&c, id);
	/* A quota above the GPU shows the GPU; the agent may change it in
	 * flight and the next call sees it. */
	cnl_region_set_quota(h.r, 256 * GiB);
	assert_int_equal(ask(&c, "info", line, sizeof(line)), 0);
	assert_string_equal(line, "206158430208 206158430208");
	assert_int_equal(reap(&c), 0);
	/* No region: the real MI300X. */
	c = repl(env_none);
	assert_int_equal(ask(&c, "info", line, sizeof(line)), 0);
	assert_string_equal(line, "206158430208 206158430208");
	assert_int_equal(reap(&c), 0);
	cnl_region_unmap(&h);
}

/* Entry points found by dlsym, whichever the scope, and by HIP 6.2's
 * hipGetProcAddress, are our wrappers. */
static void test_dlsym(void **state)
{
	static const char *const hows[] = {"default", "handle", "next",
	                                   "procaddr"};
	struct cnl_region_handle h = make_region(region_path, 8 * MiB, "p1");
	char *env[] = {env_region, env_gpu, NULL};
	struct child c = repl(env);
	char cmd[64], line[128];

	(void)state;
	for (size_t i = 0; i < 4; i++) {
		snprintf(cmd, sizeof(cmd), "dl %s %llu", hows[i], 16 * MiB);
		assert_int_equal(ask(&c, cmd, line, sizeof(line)), 0);
		print_message("%-8s 16 MiB over 8 MiB: %s\n", hows[i], line);
		assert_string_equal(line, "fail 2");
		snprintf(cmd, sizeof(cmd), "dl %s %llu", hows[i], MiB);
		assert_int_equal(ask(&c, cmd, line, sizeof(line)), 0);
		assert_int_equal(strncmp(line, "ok", 2), 0);
		assert_int_equal(region_used(&h), (i + 1) * MiB);
	}
	assert_int_equal(ask_u64(&c, "used"), 4 * MiB);
	assert_int_equal(reap(&c), 0);
	cnl_region_unmap(&h);
}

/* A handle exported in project p1 opens in p1's other slice, never in p2. */
static void test_ipc(void **state)
{
	struct cnl_region_handle a = make_region(region_path, GiB, "p1");
	struct cnl_region_handle b = make_region(region2_path, GiB, "p1");
	struct cnl_region_handle x = make_region(region3_path, GiB, "p2");
	char *env_a[] = {env_region, env_gpu, NULL};
	char *env_b[] = {env_region2, env_gpu, NULL};
	char *env_x[] = {env_region3, env_gpu, NULL};
	char *env_none[] = {"CNLAB_REGION=", env_gpu, NULL};
	struct child ca = repl(env_a), cb, cx, cn;
	char cmd[400], line[128], open_cmd[400];
	int id;

	(void)state;
	id = alloc_ok(&ca, "malloc", MiB);
	snprintf(cmd, sizeof(cmd), "ipc-export %d %s", id, handle_path);
	assert_int_equal(ask(&ca, cmd, line, sizeof(line)), 0);
	assert_string_equal(line, "ok");
	snprintf(open_cmd, sizeof(open_cmd), "ipc-open %s", handle_path);

	cb = repl(env_b);
	assert_int_equal(ask(&cb, open_cmd, line, sizeof(line)), 0);
	assert_string_equal(line, "ok");
	assert_int_equal(reap(&cb), 0);

	cx = repl(env_x);
	assert_int_equal(ask(&cx, open_cmd, line, sizeof(line)), 0);
	print_message("p2 opening p1's handle: %s\n", line);
	assert_string_equal(line, "fail 801"); /* hipErrorNotSupported */
	assert_int_equal(reap(&cx), 0);

	/* The fake runtime itself opens it: the refusal is the shim's. */
	cn = spawn((char *[]){"repl", NULL}, env_none, 0);
	assert_int_equal(read_line(&cn, line, sizeof(line)), 0);
	assert_int_equal(ask(&cn, open_cmd, line, sizeof(line)), 0);
	assert_string_equal(line, "ok");
	assert_int_equal(reap(&cn), 0);

	assert_int_equal(reap(&ca), 0);
	cnl_region_unmap(&a);
	cnl_region_unmap(&b);
	cnl_region_unmap(&x);
}

/* The doors that cannot be charged or checked (imports by descriptor, pool
 * pointers, external memory, mipmapped arrays) are refused inside a slice,
 * and the launches the brackets cannot measure under a share; the fake
 * runtime itself serves every one of them. */
static void test_doors(void **state)
{
	static const char *const doors[] = {
	    "import-vmm",      "import-pool",
	    "import-ptr",      "import-ext",
	    "mipmap",          "mipmap-create",
	    "launch-ptr",      "launch-coop-multi",
	    "launch-ext-multi"};
	struct cnl_region_opts o = {.ipc_dir = ipc_dir};
	char *env[] = {env_region, env_gpu, NULL};
	char *env_none[] = {"CNLAB_REGION=", env_gpu, NULL};
	struct child c, cn;
	char cmd[64], line[128];

	(void)state;
	assert_int_equal(cnl_region_create(region_path, 64 * MiB, 30, "p1", &o),
	                 0);
	c = repl(env);
	cn = spawn((char *[]){"repl", NULL}, env_none, 0);
	assert_int_equal(read_line(&cn, line, sizeof(line)), 0);
	for (size_t i = 0; i < sizeof(doors) / sizeof(doors[0]); i++) {
		snprintf(cmd, sizeof(cmd), "door %s", doors[i]);
		assert_int_equal(ask(&c, cmd, line, sizeof(line)), 0);
		print_message("%s in a slice: %s\n", doors[i], line);
		assert_string_equal(line,
		                    "fail 801"); /* hipErrorNotSupported */
		assert_int_equal(ask(&cn, cmd, line, sizeof(line)), 0);
		assert_string_equal(line, "ok");
	}
	assert_int_equal(reap(&c), 0);
	assert_int_equal(reap(&cn), 0);
}

/* A region named but unusable: allocations refused, nothing free, IPC
 * refused, the program keeps running. */
static void test_broken_region(void **state)
{
	char bad[320], env_bad[400], env_missing[400];
	char *envs[2][3] = {{env_bad, env_gpu, NULL},
	                    {env_missing, env_gpu, NULL}};
	char open_cmd[400], line[128];
	int fd;

	(void)state;
	scratch_path(bad, sizeof(bad), "garbage");
	fd = open(bad, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "not a region\n", 13), 13);
	close(fd);
	snprintf(env_bad, sizeof(env_bad), "CNLAB_REGION=%s", bad);
	snprintf(env_missing, sizeof(env_missing), "CNLAB_REGION=%s/absent",
	         scratch);
	snprintf(open_cmd, sizeof(open_cmd), "ipc-open %s", handle_path);
	for (int i = 0; i < 2; i++) {
		struct child c = repl(envs[i]);

		assert_int_equal(
		    ask(&c, "alloc malloc 4096", line, sizeof(line)), 0);
		assert_string_equal(line, "fail 2");
		assert_int_equal(
		    ask(&c, "alloc async 4096", line, sizeof(line)), 0);
		assert_string_equal(line, "fail 2");
		assert_int_equal(
		    ask(&c, "alloc vmm 2097152", line, sizeof(line)), 0);
		assert_string_equal(line, "fail 2");
		assert_int_equal(ask(&c, "info", line, sizeof(line)), 0);
		assert_string_equal(line, "0 206158430208");
		assert_int_equal(ask_u64(&c, "used"), 0);
		assert_int_equal(ask(&c, open_cmd, line, sizeof(line)), 0);
		assert_string_equal(line, "fail 801");
		assert_int_equal(reap(&c), 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_paths),
	    cmocka_unit_test(test_over_quota),
	    cmocka_unit_test(test_meminfo),
	    cmocka_unit_test(test_dlsym),
	    cmocka_unit_test(test_ipc),
	    cmocka_unit_test(test_doors),
	    cmocka_unit_test(test_broken_region),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
