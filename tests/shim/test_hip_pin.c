/*
 * test_hip_pin.c - the tenant's environment does not choose the region of
 * a HIP program either (issue 18; test_shim_pin.c for the CUDA shim).  In
 * a container the HIP shim is forced on every process by
 * /etc/ld.so.preload, but a program started with `env -u CNLAB_REGION`
 * ran with no quota and no throttle on an AMD node, and one naming
 * another region took that region's limits.  The HIP shim now reads the
 * pin the agent writes in the container's read-only /etc (guard.c,
 * CNL_SHIM_PIN); these tests run hiptest under a build of the HIP shim
 * whose pin is a file of the build tree (cnlab-hip-pintest), since a test
 * must not write the node's /etc.
 *
 *   - CNLAB_REGION unset: the pinned region's quota holds;
 *   - CNLAB_REGION naming a region with a larger quota: ignored;
 *   - a pin that cannot be used (empty, relative): allocations refused
 *     (fail closed), never the whole GPU.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "harness.h"
#include "shim/region.h"

#define MiB (1ULL << 20)

static char gpu_path[300], region_a[300], region_b[300];
static char env_gpu[400], env_b[400];

static void write_pin(const char *text)
{
	int fd;

	mkdir(PIN_DIR, 0755);
	fd = open(PIN_DIR "/region", O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static int group_setup(void **state)
{
	(void)state;
	unsetenv("CNLAB_REGION");
	scratch_init("hippin");
	scratch_path(gpu_path, sizeof(gpu_path), "gpu");
	scratch_path(region_a, sizeof(region_a), "region-a");
	scratch_path(region_b, sizeof(region_b), "region-b");
	snprintf(env_gpu, sizeof(env_gpu), "CNL_FAKE_GPU=%s", gpu_path);
	snprintf(env_b, sizeof(env_b), "CNLAB_REGION=%s", region_b);
	if (cnl_region_create(region_a, 64 * MiB, 0, "p1", NULL) < 0 ||
	    cnl_region_create(region_b, 1024 * MiB, 0, "p1", NULL) < 0)
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	unlink(PIN_DIR "/region");
	scratch_done();
	return 0;
}

/* Start a repl with env, ask cmd; the answer ("ok 0", "fail 2"). */
static void ask_in(char *const env[], const char *cmd, char *ret, size_t cap)
{
	char *args[] = {"repl", NULL};
	struct child c = spawn(args, env, 1);

	assert_int_equal(read_line(&c, ret, cap), 0);
	assert_string_equal(ret, "ready");
	assert_int_equal(ask(&c, cmd, ret, cap), 0);
	kill9(&c);
}

static void test_env_unset(void **state)
{
	char pin[320], line[64];
	char *env[] = {env_gpu, NULL};

	(void)state;
	snprintf(pin, sizeof(pin), "%s\n", region_a);
	write_pin(pin);
	ask_in(env, "alloc malloc 134217728", line, sizeof(line)); /* > 64 */
	assert_string_equal(line, "fail 2"); /* hipErrorOutOfMemory */
	ask_in(env, "alloc malloc 33554432", line, sizeof(line)); /* fits */
	assert_string_equal(line, "ok 0");
	/* hipMemGetInfo's total is the pinned quota, not the MI300X. */
	ask_in(env, "info", line, sizeof(line));
	assert_int_equal(strtoull(strchr(line, ' ') + 1, NULL, 10), 64 * MiB);
}

static void test_env_other_region(void **state)
{
	char pin[320], line[64];
	char *env[] = {env_gpu, env_b, NULL};

	(void)state;
	snprintf(pin, sizeof(pin), "%s\n", region_a);
	write_pin(pin);
	ask_in(env, "alloc malloc 134217728", line, sizeof(line));
	assert_string_equal(line, "fail 2");
}

static void test_bad_pin(void **state)
{
	char line[64];
	char *env[] = {env_gpu, env_b, NULL};

	(void)state;
	write_pin("");
	ask_in(env, "alloc malloc 1048576", line, sizeof(line));
	assert_string_equal(line, "fail 2");
	ask_in(env, "info", line, sizeof(line));
	assert_int_equal(strtoull(line, NULL, 10), 0); /* 0 free */
	write_pin("relative/path\n");
	ask_in(env, "alloc malloc 1048576", line, sizeof(line));
	assert_string_equal(line, "fail 2");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_env_unset),
	    cmocka_unit_test(test_env_other_region),
	    cmocka_unit_test(test_bad_pin),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
