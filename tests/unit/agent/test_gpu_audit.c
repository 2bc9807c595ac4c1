/*
 * test_gpu_audit.c - the GPU memory audit's parts (src/agent/gpu_audit.h):
 *
 *   - the decision: which processes of a slice to kill for its usage,
 *     quota and granule (nothing at exactly quota + granule; the largest
 *     first until the rest is within the quota);
 *   - the reason a user reads;
 *   - what it reads: cnl_gpus_procs over tests/fakes' libnvidia-ml.so.1
 *     (FAKE_NVML) with real processes registered in a fake GPU state
 *     file: host pids (one registered from inside its own PID namespace
 *     too), each on the GPU or MIG device its CUDA_VISIBLE_DEVICES names,
 *     more processes than the first buffer holds (the driver's
 *     INSUFFICIENT_SIZE protocol), and a fake pool that has no NVML.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "agent/gpu.h"
#include "agent/gpu_audit.h"
#include "cnlab/errors.h"
#include "fake_gpu.h"
#include "sched/catalog.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)
#define G   CNL_GPU_AUDIT_GRANULE

static int pick(const struct cnl_audit_proc *p, int n, uint64_t quota, int *idx)
{
	return cnl_gpu_audit_pick(p, n, quota, G, idx);
}

/* ---- the decision ------------------------------------------------------- */

static void test_pick_threshold(void **state)
{
	struct cnl_audit_proc p[2] = {{10, 3 * GiB}, {11, 1 * GiB}};
	int idx[2];

	(void)state;
	/* At the quota, and up to one granule over it: left alone. */
	assert_int_equal(pick(p, 2, 4 * GiB, idx), 0);
	p[1].used = 1 * GiB + G;
	assert_int_equal(pick(p, 2, 4 * GiB, idx), 0);
	/* One byte more: the largest goes, and the rest is within. */
	p[1].used = 1 * GiB + G + 1;
	assert_int_equal(pick(p, 2, 4 * GiB, idx), 1);
	assert_int_equal(idx[0], 0);
	/* No quota (whole GPUs): never. */
	p[0].used = 80 * GiB;
	assert_int_equal(pick(p, 2, CNL_GPU_AUDIT_NO_QUOTA, idx), 0);
	/* A quota of 0 (a workload without a GPU): past the granule, all
	 * that holds memory goes. */
	p[0].used = G;
	p[1].used = 0;
	assert_int_equal(pick(p, 2, 0, idx), 0);
	p[1].used = 1;
	assert_int_equal(pick(p, 2, 0, idx), 2);
	/* No process, or a negative count. */
	assert_int_equal(pick(p, 0, 4 * GiB, idx), 0);
	assert_int_equal(pick(p, -1, 4 * GiB, idx), 0);
}

/* A shrink in flight holds the slice to the larger quota until its use is
 * within the smaller one, every process told. */
static void test_shrunk(void **state)
{
	struct cnl_audit_proc p[2] = {{10, 3 * GiB}, {11, 1 * GiB}};

	(void)state;
	assert_true(cnl_gpu_audit_shrunk(p, 2, 4 * GiB));
	assert_false(cnl_gpu_audit_shrunk(p, 2, 4 * GiB - 1));
	assert_true(cnl_gpu_audit_shrunk(p, 0, 0)); /* nothing running */
	p[1].used = CNL_GPU_USED_UNKNOWN;
	assert_false(cnl_gpu_audit_shrunk(p, 2, 40 * GiB));
	/* No wrap-around: huge figures are over, not under. */
	p[0].used = UINT64_MAX - 1;
	p[1].used = 2;
	assert_false(cnl_gpu_audit_shrunk(p, 2, 4 * GiB));
}

static void test_pick_order(void **state)
{
	struct cnl_audit_proc p[4] = {
	    {40, 1 * GiB}, {41, 3 * GiB}, {42, 2 * GiB}, {43, 512 * MiB}};
	struct cnl_audit_proc eq[3] = {
	    {9, 2 * GiB}, {7, 2 * GiB}, {8, 2 * GiB}};
	int idx[4];

	(void)state;
	/* 6.5 GiB under 2 GiB: 3 then 2 GiB go (1.5 GiB left). */
	assert_int_equal(pick(p, 4, 2 * GiB, idx), 2);
	assert_int_equal(idx[0], 1);
	assert_int_equal(idx[1], 2);
	/* Under 1 GiB: the 1 GiB one too (0.5 GiB left). */
	assert_int_equal(pick(p, 4, 1 * GiB, idx), 3);
	assert_int_equal(idx[2], 0);
	/* Equal holders: the lower pid first; until within (all three for
	 * 1 GiB, as two leave 2 GiB). */
	assert_int_equal(pick(eq, 3, 1 * GiB, idx), 3);
	assert_int_equal(eq[idx[0]].pid, 7);
	assert_int_equal(eq[idx[1]].pid, 8);
	assert_int_equal(eq[idx[2]].pid, 9);
	assert_int_equal(pick(eq, 3, 4 * GiB, idx), 1);
	assert_int_equal(eq[idx[0]].pid, 7);
}

static void test_pick_unknown(void **state)
{
	struct cnl_audit_proc p[3] = {
	    {1, CNL_GPU_USED_UNKNOWN}, {2, 5 * GiB}, {3, 0}};
	int idx[3];

	(void)state;
	/* Unknown counts as nothing and is never picked; a process that
	 * holds nothing is never picked either. */
	assert_int_equal(pick(p, 3, 4 * GiB, idx), 1);
	assert_int_equal(idx[0], 1);
	p[1].used = CNL_GPU_USED_UNKNOWN;
	assert_int_equal(pick(p, 3, 1, idx), 0);
}

static void test_reason(void **state)
{
	char b[200];

	(void)state;
	cnl_gpu_audit_reason(6 * GiB, 4 * GiB, 1234, b, sizeof(b));
	assert_string_equal(b, "killed: used 6 GiB of GPU memory, quota 4 GiB "
	                       "(GPU memory audit, pid 1234)");
	cnl_gpu_audit_reason(4 * GiB + 410 * MiB, 4 * GiB, 7, b, sizeof(b));
	assert_string_equal(b, "killed: used 4.4 GiB of GPU memory, quota 4 "
	                       "GiB (GPU memory audit, pid 7)");
	/* Just over: never words that read as within. */
	cnl_gpu_audit_reason(4 * GiB + 3 * MiB, 4 * GiB, 7, b, sizeof(b));
	assert_string_equal(b, "killed: used 4.003 GiB of GPU memory, quota 4 "
	                       "GiB (GPU memory audit, pid 7)");
	cnl_gpu_audit_reason(6 * GiB, 0, 7, b, sizeof(b));
	assert_string_equal(b, "killed: used 6 GiB of GPU memory without a GPU "
	                       "slice (GPU memory audit, pid 7)");
	cnl_gpu_audit_reason(900 * MiB, 819 * MiB, 7, b, sizeof(b));
	assert_string_equal(b, "killed: used 900 MiB of GPU memory, quota "
	                       "819 MiB (GPU memory audit, pid 7)");
}

/* ---- what the audit reads ----------------------------------------------- */

static struct cnl_catalog cat;
static struct fake_gpu *fg;
static char fg_path[64];
static pid_t kids[20];
static int n_kids;

/* Wait until @p runs sleep with its own environment (which the driver
 * reads; the kernel shows the exec's new program a moment before its
 * environment), one that holds @want when not NULL. */
static void exec_wait(pid_t p, const char *want)
{
	char path[64], buf[4096];

	for (int i = 0; i < 1000; i++) {
		ssize_t n;
		int fd;

		snprintf(path, sizeof(path), "/proc/%d/exe", (int)p);
		n = readlink(path, buf, sizeof(buf) - 1);
		if (n > 0) {
			buf[n] = '\0';
			if (strstr(buf, "sleep") && !want)
				return;
		}
		snprintf(path, sizeof(path), "/proc/%d/environ", (int)p);
		if (want && n > 0 && strstr(buf, "sleep") &&
		    (fd = open(path, O_RDONLY)) >= 0) {
			n = read(fd, buf, sizeof(buf) - 1);
			close(fd);
			if (n > 0) {
				buf[n] = '\0';
				if (strstr(buf, want))
					return;
			}
		}
		usleep(5 * 1000);
	}
	fail_msg("process %d did not start sleep", (int)p);
}

/* A process that sleeps with CUDA_VISIBLE_DEVICES=@cvd (NULL: unset),
 * registered in slot @slot of the fake GPU as holding @used bytes; its
 * pid. */
static pid_t holder(const char *cvd, int slot, uint64_t used)
{
	char env[128];
	char *envp[] = {env, NULL};
	pid_t p;

	snprintf(env, sizeof(env), "CUDA_VISIBLE_DEVICES=%s", cvd ? cvd : "");
	if (!cvd)
		envp[0] = NULL;
	p = fork();
	assert_true(p >= 0);
	if (p == 0) {
		execle("/bin/sleep", "sleep", "60", (char *)NULL, envp);
		_exit(127);
	}
	kids[n_kids++] = p;
	exec_wait(p, cvd ? "CUDA_VISIBLE_DEVICES=" : NULL);
	atomic_store(&fg->procs[slot].used, used);
	atomic_store(&fg->procs[slot].pidns, 0);
	atomic_store(&fg->procs[slot].pid, (int32_t)p);
	return p;
}

/* The entry of @pid in @ps (@n), or NULL. */
static const struct cnl_gpu_proc *find(const struct cnl_gpu_proc *ps, int n,
                                       int pid)
{
	for (int i = 0; i < n; i++)
		if (ps[i].pid == pid)
			return &ps[i];
	return NULL;
}

/* One fake GPU state file for the whole run (the fake NVML maps the first
 * it sees for the life of the process); each test starts it empty. */
static int setup_file(void **state)
{
	int fd;

	(void)state;
	snprintf(fg_path, sizeof(fg_path), "/tmp/cnl-audit-gpu-XXXXXX");
	fd = mkstemp(fg_path);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, sizeof(*fg)), 0);
	fg = mmap(NULL, sizeof(*fg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(fg != MAP_FAILED);
	close(fd);
	setenv("CNL_FAKE_GPU", fg_path, 1);
	return 0;
}

static int teardown_file(void **state)
{
	(void)state;
	munmap(fg, sizeof(*fg));
	unlink(fg_path);
	unsetenv("CNL_FAKE_GPU");
	return 0;
}

static int setup_node(void **state)
{
	(void)state;
	memset(fg->procs, 0, sizeof(fg->procs));
	setenv("FAKE_NVML_GPUS", "2", 1);
	setenv("FAKE_NVML_NAME", "NVIDIA H100 80GB HBM3", 1);
	setenv("FAKE_NVML_MEM_MIB", "81559", 1);
	return 0;
}

/* Also after a failed test: no process is left behind. */
static int teardown_node(void **state)
{
	(void)state;
	for (int i = 0; i < n_kids; i++) {
		kill(kids[i], SIGKILL);
		waitpid(kids[i], NULL, 0);
	}
	n_kids = 0;
	return 0;
}

static void test_procs_devices(void **state)
{
	struct cnl_gpu_proc ps[32];
	const struct cnl_gpu_proc *e;
	char mig[CNL_GPU_UUID_MAX], err[256];
	struct cnl_gpus *g = NULL, *fake = NULL;
	pid_t a, b, c, d;
	int n;

	(void)state;
	assert_int_equal(
	    cnl_gpus_open("nvml:" FAKE_NVML, &cat, &g, err, sizeof(err)), 0);
	/* GPU 1 in MIG mode with one instance. */
	assert_int_equal(cnl_gpus_mig_create(g, 1, "3g.40gb", 0, mig), 0);
	a = holder(NULL, 0, 100 * MiB); /* no CUDA_VISIBLE_DEVICES: GPU 0 */
	b = holder("0", 1, 200 * MiB);
	c = holder(mig, 2, 300 * MiB); /* in the MIG device of GPU 1 */
	d = holder("1", 3, 400 * MiB); /* on GPU 1, outside any instance */
	n = cnl_gpus_procs(g, ps, 32);
	assert_int_equal(n, 4);
	assert_non_null(e = find(ps, n, a));
	assert_int_equal(e->gpu, 0);
	assert_int_equal(e->used, 100 * MiB);
	assert_non_null(e = find(ps, n, b));
	assert_int_equal(e->gpu, 0);
	assert_int_equal(e->used, 200 * MiB);
	/* Seen in the GPU's list and in its MIG device's: counted once. */
	assert_non_null(e = find(ps, n, c));
	assert_int_equal(e->gpu, 1);
	assert_int_equal(e->used, 300 * MiB);
	assert_non_null(e = find(ps, n, d));
	assert_int_equal(e->gpu, 1);
	assert_int_equal(e->used, 400 * MiB);
	/* Room for two: the count of all, the first two written. */
	assert_int_equal(cnl_gpus_procs(g, ps, 2), 4);
	/* A dead process is not listed. */
	kill(a, SIGKILL);
	waitpid(a, NULL, 0);
	n = cnl_gpus_procs(g, ps, 32);
	assert_int_equal(n, 3);
	assert_null(find(ps, n, a));
	cnl_gpus_close(g);
	/* A fake pool has no NVML to read. */
	assert_int_equal(cnl_gpus_open("fake:1xH100-80GB-SXM", &cat, &fake, err,
	                               sizeof(err)),
	                 0);
	assert_int_equal(cnl_gpus_procs(fake, ps, 32), -EOPNOTSUPP);
	cnl_gpus_close(fake);
}

/* More processes than the first buffer (8): the driver says how many. */
static void test_procs_many(void **state)
{
	struct cnl_gpu_proc ps[32];
	struct cnl_gpus *g = NULL;
	char err[256];
	uint64_t sum = 0;
	int n;

	(void)state;
	for (int i = 0; i < 20; i++)
		holder("0", i, (uint64_t)(i + 1) * MiB);
	assert_int_equal(
	    cnl_gpus_open("nvml:" FAKE_NVML, &cat, &g, err, sizeof(err)), 0);
	n = cnl_gpus_procs(g, ps, 32);
	assert_int_equal(n, 20);
	for (int i = 0; i < n; i++)
		sum += ps[i].used;
	assert_int_equal(sum, 210 * MiB);
	cnl_gpus_close(g);
}

/*
 * A process registered from inside its own PID namespace (pid 1 there):
 * listed by its host pid, as the real driver does.  Needs the right to
 * make a PID namespace (root); skipped without it.
 */
static void test_procs_pidns(void **state)
{
	struct cnl_gpu_proc ps[8];
	struct cnl_gpus *g = NULL;
	char err[256];
	int pfd[2], n, st;
	pid_t mid, inner = 0;

	(void)state;
	assert_int_equal(pipe(pfd), 0);
	mid = fork();
	assert_true(mid >= 0);
	if (mid == 0) {
		pid_t k;

		if (unshare(CLONE_NEWPID) < 0)
			_exit(3);
		k = fork();
		if (k == 0) {
			struct stat sb;
			char *envp[] = {"CUDA_VISIBLE_DEVICES=1", NULL};

			/* As the fake driver registers: pid and namespace
			 * as the process itself sees them. */
			if (stat("/proc/self/ns/pid", &sb) < 0)
				_exit(4);
			atomic_store(&fg->procs[0].used, 64 * MiB);
			atomic_store(&fg->procs[0].pidns, (uint64_t)sb.st_ino);
			atomic_store(&fg->procs[0].pid, (int32_t)getpid());
			execle("/bin/sleep", "sleep", "60", (char *)NULL, envp);
			_exit(127);
		}
		if (k < 0 || write(pfd[1], &k, sizeof(k)) != sizeof(k))
			_exit(5);
		waitpid(k, NULL, 0);
		_exit(0);
	}
	close(pfd[1]);
	if (read(pfd[0], &inner, sizeof(inner)) != sizeof(inner)) {
		close(pfd[0]);
		waitpid(mid, &st, 0);
		if (WIFEXITED(st) && WEXITSTATUS(st) == 3)
			skip(); /* no right to make a PID namespace */
		fail_msg("the namespaced process did not start");
	}
	close(pfd[0]);
	kids[n_kids++] = inner;
	kids[n_kids++] = mid;
	exec_wait(inner, "CUDA_VISIBLE_DEVICES=");
	/* Registered as pid 1: wait until it has (it writes, then execs). */
	for (int i = 0; i < 500 && atomic_load(&fg->procs[0].pid) != 1; i++)
		usleep(10 * 1000);
	assert_int_equal(atomic_load(&fg->procs[0].pid), 1);
	assert_int_equal(
	    cnl_gpus_open("nvml:" FAKE_NVML, &cat, &g, err, sizeof(err)), 0);
	n = cnl_gpus_procs(g, ps, 8);
	assert_int_equal(n, 1);
	assert_int_equal(ps[0].pid, inner);
	assert_int_equal(ps[0].gpu, 1);
	assert_int_equal(ps[0].used, 64 * MiB);
	cnl_gpus_close(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pick_threshold),
	    cmocka_unit_test(test_pick_order),
	    cmocka_unit_test(test_shrunk),
	    cmocka_unit_test(test_pick_unknown),
	    cmocka_unit_test(test_reason),
	    cmocka_unit_test_setup_teardown(test_procs_devices, setup_node,
	                                    teardown_node),
	    cmocka_unit_test_setup_teardown(test_procs_many, setup_node,
	                                    teardown_node),
	    cmocka_unit_test_setup_teardown(test_procs_pidns, setup_node,
	                                    teardown_node),
	};

	cnl_catalog_init(&cat);
	return cmocka_run_group_tests(tests, setup_file, teardown_file);
}
