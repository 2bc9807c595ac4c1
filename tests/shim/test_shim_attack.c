/*
 * test_shim_attack.c - the slice's region under a hostile tenant (issue
 * 18): real processes running shimtest with the shim preloaded over the
 * fake driver, stopped, killed and tampered with, while others allocate.
 *
 *   - SIGSTOP in the middle of allocation traffic wedges no one (100
 *     trials): the others allocate, cuMemGetInfo and the agent's stats
 *     answer;
 *   - garbage in every byte of the accounting file (0xff, random, zeros):
 *     a new process starts and never gets more than the quota;
 *   - a non-root tenant cannot raise its quota or share, nor truncate,
 *     replace or write the limits file (not even through /proc/self/mem),
 *     and truncating its accounting file does not crash the agent's stats;
 *   - a read lease the tenant takes on its accounting file (it owns it)
 *     blocks neither the agent's stats nor a new process of the slice;
 *   - a process that closes its descriptors (closefrom, close) keeps
 *     its slot and its memory counted;
 *   - a process SIGKILLed while holding memory leaves cuMemGetInfo of the
 *     others and `cnlab-region stat` within about a second, without the
 *     agent;
 *   - stream-ordered allocations from many threads and processes near the
 *     quota never exceed it as the fake driver counts;
 *   - kill-anywhere: 1,000 processes SIGKILLed or SIGSTOPped (then
 *     SIGCONT or SIGKILL) at random points while two others allocate;
 *     afterwards the accounting equals the fake driver's own count.
 *
 * A process that does not answer is a hang: every wait on a child has a
 * watchdog (a generous timeout that fails the test), never a duration
 * assertion.  Latencies are printed, not asserted (a loaded 2-core CI
 * machine would make any bound flaky).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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

#include "fake_gpu.h"
#include "harness.h"
#include "shim/region.h"

#define MiB (1ULL << 20)
/* A child that has not answered in this long is hung. */
#define WATCHDOG_MS 20000

static char gpu_path[300], region_path[300], acct_path[310];
static char env_region[400], env_gpu[400];
static char *const env_mem = "CNL_FAKE_MEM=4294967296"; /* 4 GiB */

static int group_setup(void **state)
{
	(void)state;
	scratch_init("attack");
	/* The non-root tenant of test_tamper must reach the files. */
	chmod(scratch, 0755);
	scratch_path(gpu_path, sizeof(gpu_path), "gpu");
	scratch_path(region_path, sizeof(region_path), "region");
	cnl_region_acct_path(region_path, acct_path, sizeof(acct_path));
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

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* One line from c within the watchdog; -1 on a hang or EOF. */
static int line_within(struct child *c, char *buf, size_t cap)
{
	struct pollfd p = {.fd = fileno(c->out), .events = POLLIN};

	if (poll(&p, 1, WATCHDOG_MS) <= 0)
		return -1;
	return read_line(c, buf, cap);
}

static uint64_t max_wait_ns;

/* ask() with the watchdog; records the longest answer time. */
static int ask_within(struct child *c, const char *cmd, char *buf, size_t cap)
{
	uint64_t t0 = mono_ns(), dt;
	int rc;

	fprintf(c->in, "%s\n", cmd);
	fflush(c->in);
	rc = line_within(c, buf, cap);
	dt = mono_ns() - t0;
	if (dt > max_wait_ns)
		max_wait_ns = dt;
	return rc;
}

static struct child repl(char *const env[])
{
	char *args[] = {"repl", NULL};
	char line[128];
	struct child c = spawn(args, env, 1);

	assert_int_equal(line_within(&c, line, sizeof(line)), 0);
	assert_string_equal(line, "ready");
	return c;
}

static struct cnl_region_handle region(uint64_t quota)
{
	struct cnl_region_handle h;

	assert_int_equal(cnl_region_create(region_path, quota, 0, "p1", NULL),
	                 0);
	assert_int_equal(cnl_region_map(region_path, &h), 0);
	return h;
}

/* cnl_region_stat as the agent calls it, in a child with a watchdog: 0
 * when it answered, -1 when it hung.  ret gets the snapshot. */
static int stat_within(struct cnl_region_stat *ret)
{
	struct cnl_region_stat *shared;
	int st = 0, rc = -1;
	pid_t pid;

	shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE,
	              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(shared != MAP_FAILED);
	pid = fork();
	if (pid == 0) {
		struct cnl_region_handle h;

		alarm(WATCHDOG_MS / 1000);
		if (cnl_region_map(region_path, &h) < 0 ||
		    cnl_region_stat(h.r, shared) < 0)
			_exit(1);
		_exit(0);
	}
	waitpid(pid, &st, 0);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		*ret = *shared;
		rc = 0;
	}
	munmap(shared, sizeof(*shared));
	return rc;
}

/* cnlab-region stat PATH: used= and procs= (-1 when it hung or failed). */
static int tool_stat(uint64_t *ret_used, unsigned *ret_procs)
{
	char *args[] = {(char *)REGION_TOOL, "stat", region_path, NULL};
	char line[256];
	int p[2], st = 0, got = 0;
	FILE *f;
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		close(p[0]);
		alarm(WATCHDOG_MS / 1000);
		execv(REGION_TOOL, args);
		_exit(127);
	}
	close(p[1]);
	f = fdopen(p[0], "r");
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "used=", 5) == 0 && ++got)
			*ret_used = strtoull(line + 5, NULL, 10);
		if (strncmp(line, "procs=", 6) == 0 && ++got)
			*ret_procs = (unsigned)strtoul(line + 6, NULL, 10);
	}
	fclose(f);
	waitpid(pid, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 && got == 2 ? 0 : -1;
}

/*
 * SIGSTOP a process at a random instant of its allocation traffic (two
 * threads allocating and freeing, linear and stream-ordered), 100 times:
 * each time another process allocates, frees and reads its memory
 * information, and the agent's stats answer, while it stays stopped.  With
 * a lock in the region, a process stopped holding it hung them all.
 */
static void test_stop_no_wedge(void **state)
{
	struct cnl_region_handle h = region(512 * MiB);
	char *env[] = {env_region, env_gpu, env_mem, NULL};
	char *hargs[] = {"hammer", NULL};
	struct child a = repl(env);
	struct cnl_region_stat st;
	unsigned seed = (unsigned)getpid();
	char line[128];

	(void)state;
	max_wait_ns = 0;
	for (int i = 0; i < 100; i++) {
		struct child k = spawn(hargs, env, 1);

		assert_int_equal(line_within(&k, line, sizeof(line)), 0);
		sleep_ms((unsigned)rand_r(&seed) % 4);
		kill(k.pid, SIGSTOP);
		assert_int_equal(
		    ask_within(&a, "alloc 1048576", line, sizeof(line)), 0);
		assert_string_equal(line, "ok 0");
		assert_int_equal(ask_within(&a, "free 1", line, sizeof(line)),
		                 0);
		assert_int_equal(ask_within(&a, "info", line, sizeof(line)), 0);
		assert_int_equal(stat_within(&st), 0);
		assert_true(st.nprocs >= 2);
		kill9(&k);
	}
	print_message("stop: 100 processes stopped mid-traffic; longest "
	              "answer of the other %.3f ms\n",
	              (double)max_wait_ns / 1e6);
	ask(&a, "exit", line, sizeof(line));
	assert_int_equal(reap(&a), 0);
	cnl_region_unmap(&h);
}

/* Overwrite every byte of the accounting file with pattern (-1: random). */
static void scribble(int pattern, unsigned *seed)
{
	struct stat sb;
	unsigned char *buf;
	int fd = open(acct_path, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &sb), 0);
	buf = malloc((size_t)sb.st_size);
	assert_non_null(buf);
	for (off_t i = 0; i < sb.st_size; i++)
		buf[i] = pattern < 0 ? (unsigned char)rand_r(seed)
		                     : (unsigned char)pattern;
	assert_int_equal(pwrite(fd, buf, (size_t)sb.st_size, 0), sb.st_size);
	free(buf);
	close(fd);
}

/*
 * Garbage in every byte of the accounting file, with a process of the
 * slice running: a new process starts, its allocations are refused or
 * bounded by the quota (as the fake driver counts them), its memory
 * information and the agent's stats answer.  Zeros are the issue's `dd`
 * attack, which used to clear the quota.
 */
static void test_garbage(void **state)
{
	static const int patterns[] = {0xff, -1, 0x00, -1, 0x7f};
	char *env[] = {env_region, env_gpu, env_mem, NULL};
	unsigned seed = (unsigned)getpid() * 7919u;
	char line[128];

	(void)state;
	for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++) {
		struct cnl_region_handle h = region(64 * MiB);
		struct cnl_region_stat st;
		struct child a = repl(env), b;
		unsigned long long count, used;

		assert_int_equal(
		    ask_within(&a, "alloc 16777216", line, sizeof(line)), 0);
		assert_string_equal(line, "ok 0");
		scribble(patterns[i], &seed);
		b = repl(env);
		assert_int_equal(
		    ask_within(&b, "fill 1048576", line, sizeof(line)), 0);
		count = strtoull(line, NULL, 10);
		assert_true(count <= 64);
		assert_int_equal(ask_within(&b, "used", line, sizeof(line)), 0);
		used = strtoull(line, NULL, 10);
		assert_true(used <= 64 * MiB);
		assert_int_equal(ask_within(&b, "info", line, sizeof(line)), 0);
		assert_true(strtoull(line, NULL, 10) <= 64 * MiB);
		assert_int_equal(ask_within(&a, "info", line, sizeof(line)), 0);
		assert_int_equal(stat_within(&st), 0);
		assert_int_equal(st.quota, 64 * MiB);
		print_message("garbage %d: new process got %llu MiB\n",
		              patterns[i], count);
		ask(&a, "exit", line, sizeof(line));
		ask(&b, "exit", line, sizeof(line));
		assert_int_equal(reap(&a), 0);
		assert_int_equal(reap(&b), 0);
		cnl_region_unmap(&h);
	}
}

/* Bits of the tamper child's exit status: each a defence that failed. */
enum {
	T_OPEN_RW = 1,
	T_TRUNCATE = 2,
	T_REPLACE = 4,
	T_SET_QUOTA = 8,
	T_MPROTECT = 16,
	T_PROC_MEM = 32,
	T_OVER_QUOTA = 64,
	T_SETUP = 128,
};

static int tamper_as_nobody(void)
{
	struct cnl_region_handle h;
	char tmp[400];
	int bad = 0, fd, slot;
	uint64_t big = 1ULL << 40;

	if (setgid(65534) < 0 || setuid(65534) < 0 || geteuid() != 65534)
		return T_SETUP;
	/* Write or truncate the limits file. */
	fd = open(region_path, O_RDWR);
	if (fd >= 0 || errno != EACCES)
		bad |= T_OPEN_RW;
	if (fd >= 0)
		close(fd);
	if (truncate(region_path, 0) == 0 || errno != EACCES)
		bad |= T_TRUNCATE;
	/* Replace it: a file of our own renamed over it, or unlinked. */
	snprintf(tmp, sizeof(tmp), "%s.mine", region_path);
	fd = open(tmp, O_RDWR | O_CREAT, 0644);
	if (fd >= 0 || unlink(region_path) == 0)
		bad |= T_REPLACE;
	if (fd >= 0)
		close(fd);
	/* Map it as the shim does, and try to write through the mapping. */
	if (cnl_region_map(region_path, &h) < 0)
		return bad | T_SETUP;
	if (cnl_region_set_quota(h.r, big) != -EROFS ||
	    cnl_region_set_share(h.r, 100) != -EROFS)
		bad |= T_SET_QUOTA;
	if (mprotect(h.r, CNL_REGION_LIMITS_SIZE, PROT_READ | PROT_WRITE) == 0)
		bad |= T_MPROTECT;
	fd = open("/proc/self/mem", O_RDWR);
	if (fd >= 0 &&
	    pwrite(fd, &big, sizeof(big), (off_t)(uintptr_t)&h.r->quota) ==
	        (ssize_t)sizeof(big))
		bad |= T_PROC_MEM;
	if (fd >= 0)
		close(fd);
	if (atomic_load(&h.r->quota) != 64 * MiB ||
	    atomic_load(&h.r->share_pct) != 30)
		bad |= T_SET_QUOTA;
	/* The accounting is ours: zero it all, then ask for twice the
	 * quota; the quota still holds. */
	memset((char *)h.r + CNL_REGION_LIMITS_SIZE, 0,
	       sizeof(*h.r) - CNL_REGION_LIMITS_SIZE);
	slot = cnl_region_attach(&h);
	if (slot < 0)
		return bad | T_SETUP;
	if (cnl_region_reserve(h.r, slot, 40 * MiB, 0) < 0)
		return bad | T_SETUP;
	if (cnl_region_reserve(h.r, slot, 40 * MiB, 0) == 0)
		bad |= T_OVER_QUOTA;
	/* Last, pull the file from under every mapping of it (ours and the
	 * agent's): whoever reads a mapping past the end gets SIGBUS. */
	if (truncate(acct_path, 0) < 0)
		return bad | T_SETUP;
	return bad;
}

/*
 * A tenant (uid 65534, as a container's processes are not root on the
 * host) cannot raise its quota or share, nor truncate, replace or write the
 * limits file, by any of the ways a process has; the file and the
 * agent's view stay as the agent made them.
 */
static void test_tamper(void **state)
{
	struct cnl_region_handle h;
	struct cnl_region_stat rs;
	struct stat sb;
	int st = 0;
	pid_t pid;

	(void)state;
	if (geteuid() != 0)
		skip(); /* needs root to become another uid */
	assert_int_equal(
	    cnl_region_create(region_path, 64 * MiB, 30, "p1", NULL), 0);
	assert_int_equal(stat(region_path, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0644);
	assert_int_equal(stat(acct_path, &sb), 0);
	assert_int_equal(sb.st_mode & 07777, 0600);
	/* As the agent does: the accounting file is the tenant's. */
	assert_int_equal(chown(acct_path, 65534, 65534), 0);
	assert_int_equal(cnl_region_map(region_path, &h), 0);
	pid = fork();
	if (pid == 0)
		_exit(tamper_as_nobody());
	waitpid(pid, &st, 0);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	/* The agent's stats survive the truncated accounting file. */
	assert_int_equal(cnl_region_stat(h.r, &rs), 0);
	assert_int_equal(rs.quota, 64 * MiB);
	assert_int_equal(rs.used, 0);
	assert_int_equal(atomic_load(&h.r->quota), 64 * MiB);
	assert_int_equal(atomic_load(&h.r->share_pct), 30);
	assert_int_equal(stat(region_path, &sb), 0);
	assert_int_equal(sb.st_size, CNL_REGION_LIMITS_SIZE);
	/* The agent still resizes. */
	assert_int_equal(cnl_region_set_quota(h.r, 32 * MiB), 0);
	cnl_region_unmap(&h);
	/* A new mapping of the truncated region is refused (fail closed). */
	assert_int_equal(cnl_region_map(region_path, &h), -EPROTO);
	assert_int_equal(
	    cnl_region_create(region_path, 32 * MiB, 30, "p1", NULL), 0);
	/* The shim maps the limits read-only even for root. */
	assert_int_equal(cnl_region_map_ro(region_path, &h), 0);
	assert_int_equal(cnl_region_set_quota(h.r, 1ULL << 40), -EROFS);
	assert_int_equal(atomic_load(&h.r->quota), 32 * MiB);
	cnl_region_unmap(&h);
}

/* The agent's cnl_region_map + cnl_region_stat of the slice in a child
 * with a watchdog: 0 stats, 2 refused at once, -1 hung (killed by the
 * watchdog's SIGALRM). */
static int agent_map_within(void)
{
	int st = 0;
	pid_t pid = fork();

	if (pid == 0) {
		struct cnl_region_handle h;
		struct cnl_region_stat rs;

		alarm(WATCHDOG_MS / 1000);
		if (cnl_region_map(region_path, &h) < 0)
			_exit(2);
		_exit(cnl_region_stat(h.r, &rs) == 0 ? 0 : 1);
	}
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/*
 * The tenant owns its accounting file (the agent chowns it), so it may
 * take a read lease on it (F_SETLEASE, owner or CAP_LEASE) and ignore the
 * lease-break signal: then every open of the file for writing blocks
 * until the lease-break time (45 s by default).  The agent's stats (its
 * /metrics and its supervisor) and a new process of the slice must not
 * wait for it: they are refused at once (the agent skips the slice this
 * time, the process fails closed), and answer again once the lease is
 * gone.
 */
static void test_lease_no_wedge(void **state)
{
	char *env[] = {env_region, env_gpu, env_mem, NULL};
	char *args[] = {"repl", NULL};
	int p[2], rc, started, refused;
	char c = 0, line[128];
	struct child k;
	pid_t tenant;

	(void)state;
	assert_int_equal(
	    cnl_region_create(region_path, 64 * MiB, 0, "p1", NULL), 0);
	if (geteuid() == 0)
		assert_int_equal(chown(acct_path, 65534, 65534), 0);
	assert_int_equal(pipe(p), 0);
	tenant = fork();
	if (tenant == 0) {
		int fd;

		signal(SIGIO, SIG_IGN); /* keep the lease when asked for it */
		if (geteuid() == 0 && (setgid(65534) < 0 || setuid(65534) < 0))
			_exit(1);
		fd = open(acct_path, O_RDONLY);
		if (fd < 0 || fcntl(fd, F_SETLEASE, F_RDLCK) < 0)
			_exit(1);
		if (write(p[1], "l", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	assert_int_equal(c, 'l');
	rc = agent_map_within();
	print_message("lease: the agent's map of the slice %s\n",
	              rc < 0    ? "hung"
	              : rc == 2 ? "was refused at once"
	                        : "answered");
	/* A new process of the slice starts and fails closed. */
	k = spawn_exe(SHIMTEST, args, env, 1);
	started = line_within(&k, line, sizeof(line)) == 0 &&
	          strcmp(line, "ready") == 0;
	refused = started &&
	          ask_within(&k, "alloc 1048576", line, sizeof(line)) == 0 &&
	          strcmp(line, "fail 2") == 0; /* CUDA_ERROR_OUT_OF_MEMORY */
	kill9(&k);
	/* The tenant goes before any assertion can leave it behind. */
	kill(tenant, SIGKILL);
	waitpid(tenant, NULL, 0);
	assert_true(rc == 0 || rc == 2);
	assert_true(started);
	assert_true(refused);
	assert_int_equal(agent_map_within(), 0);
}

/*
 * A process owns its slot through a record lock on the accounting file,
 * which POSIX drops when the process closes any descriptor of that file.
 * A program that closes its descriptors while holding memory (closefrom,
 * or a loop of close, as daemonising code does) must still count: another
 * process of the slice is refused what would take the slice over quota,
 * also after the reaper's interval has passed.
 */
static void test_close_fds(void **state)
{
	struct cnl_region_handle h = region(64 * MiB);
	char *env[] = {env_region, env_gpu, env_mem, NULL};
	const char *how[] = {"close-fds 0", "close-fds 1"};
	struct cnl_region_stat st;
	char line[128];

	(void)state;
	for (int i = 0; i < 2; i++) {
		struct child a = repl(env), b;

		assert_int_equal(
		    ask_within(&a, "alloc 41943040", line, sizeof(line)), 0);
		assert_string_equal(line, "ok 0");
		assert_int_equal(ask_within(&a, how[i], line, sizeof(line)), 0);
		assert_string_equal(line, "ok");
		sleep_ms(2 * (unsigned)(CNL_REGION_REAP_NS / 1000000));
		b = repl(env);
		assert_int_equal(
		    ask_within(&b, "alloc 41943040", line, sizeof(line)), 0);
		print_message("%s: another process's 40 MiB under 64: %s\n",
		              how[i], line);
		assert_string_equal(line, "fail 2");
		assert_int_equal(cnl_region_stat(h.r, &st), 0);
		assert_int_equal(st.used, 40 * MiB);
		ask(&b, "exit", line, sizeof(line));
		assert_int_equal(reap(&b), 0);
		/* What it frees still comes back. */
		assert_int_equal(ask_within(&a, "free-all", line, sizeof(line)),
		                 0);
		assert_int_equal(cnl_region_stat(h.r, &st), 0);
		assert_int_equal(st.used, 0);
		ask(&a, "exit", line, sizeof(line));
		assert_int_equal(reap(&a), 0);
	}
	cnl_region_unmap(&h);
}

/*
 * A process killed with memory leaves the accounting within about a
 * second, without the agent: another process's cuMemGetInfo shows it
 * free again, and `cnlab-region stat` no longer counts it.
 */
static void test_dead_leave(void **state)
{
	struct cnl_region_handle h = region(256 * MiB);
	char *env[] = {env_region, env_gpu, env_mem, NULL};
	struct child a = repl(env), b = repl(env);
	uint64_t t0, t_info = 0, t_tool = 0, used = 0;
	unsigned procs = 0;
	char line[128];

	(void)state;
	assert_int_equal(ask_within(&a, "alloc 16777216", line, sizeof(line)),
	                 0);
	assert_int_equal(ask_within(&b, "alloc 33554432", line, sizeof(line)),
	                 0);
	assert_int_equal(ask_within(&a, "info", line, sizeof(line)), 0);
	assert_int_equal(strtoull(line, NULL, 10), 208 * MiB);
	kill9(&b);
	t0 = mono_ns();
	/* Generous: a hang, not a slow machine, fails this. */
	while (mono_ns() - t0 < (uint64_t)WATCHDOG_MS * 1000000ULL) {
		if (!t_info) {
			assert_int_equal(
			    ask_within(&a, "info", line, sizeof(line)), 0);
			if (strtoull(line, NULL, 10) == 240 * MiB)
				t_info = mono_ns() - t0;
		}
		if (!t_tool) {
			assert_int_equal(tool_stat(&used, &procs), 0);
			if (used == 16 * MiB && procs == 1)
				t_tool = mono_ns() - t0;
		}
		if (t_info && t_tool)
			break;
		sleep_ms(20);
	}
	assert_true(t_info > 0);
	assert_true(t_tool > 0);
	print_message("dead: gone from cuMemGetInfo after %.0f ms, from "
	              "cnlab-region stat after %.0f ms\n",
	              (double)t_info / 1e6, (double)t_tool / 1e6);
	ask(&a, "exit", line, sizeof(line));
	assert_int_equal(reap(&a), 0);
	cnl_region_unmap(&h);
}

/*
 * Stream-ordered allocations from eight threads in each of four processes
 * at once, near the quota: what the fake driver holds for them (its pools
 * grow by 2 MiB) never exceeds the quota.
 */
static void test_async_race(void **state)
{
	const uint64_t quota = 97 * MiB;
	struct cnl_region_handle h = region(quota);
	char *env[] = {env_region, env_gpu, env_mem, NULL};
	struct child c[4];
	unsigned long long count = 0, held = 0;
	char line[128];

	(void)state;
	for (int i = 0; i < 4; i++)
		c[i] = repl(env);
	/* 1 MiB blocks: every other one grows its pool by 2 MiB, and the
	 * quota is odd, so the last growth would end 1 MiB over. */
	for (int i = 0; i < 4; i++) {
		fprintf(c[i].in, "async 1048576\n");
		fflush(c[i].in);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(line_within(&c[i], line, sizeof(line)), 0);
		count += strtoull(line, NULL, 10);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(ask_within(&c[i], "used", line, sizeof(line)),
		                 0);
		held += strtoull(line, NULL, 10);
	}
	print_message("async: %llu blocks of 1 MiB, the driver holds %llu "
	              "MiB of a %llu MiB quota\n",
	              count, held >> 20, (unsigned long long)(quota >> 20));
	assert_true(count > 0);
	assert_true(held <= quota);
	for (int i = 0; i < 4; i++) {
		ask(&c[i], "exit", line, sizeof(line));
		assert_int_equal(reap(&c[i]), 0);
	}
	cnl_region_unmap(&h);
}

/*
 * Kill anywhere: 1,000 processes allocating and freeing (linear and
 * stream-ordered, two threads, near the quota) are SIGKILLed, or
 * SIGSTOPped and then SIGCONTinued or SIGKILLed, at random points (some
 * before they finish starting), while two others allocate and free.
 * Those two always answer (watchdog); afterwards the accounting equals
 * the fake driver's own count of what the two hold, and no process needed
 * more than a bounded number of retries in any region loop.
 */
static void test_kill_anywhere(void **state)
{
	struct cnl_region_handle h = region(512 * MiB);
	char *env[] = {env_region, env_gpu, env_mem, NULL};
	char *hargs[] = {"hammer", NULL};
	struct child a = repl(env), b = repl(env);
	struct cnl_region_stat st;
	unsigned seed = (unsigned)getpid() * 31u;
	unsigned long long fake = 0;
	int killed = 0, stopped = 0, equal = 0;
	char line[128];
	uint64_t t0;

	(void)state;
	max_wait_ns = 0;
	while (killed < 1000) {
		struct child k[4];
		int act[4];

		for (int j = 0; j < 4; j++)
			k[j] = spawn(hargs, env, 1);
		for (int j = 0; j < 4; j++)
			if (rand_r(&seed) % 3)
				assert_int_equal(
				    line_within(&k[j], line, sizeof(line)), 0);
		sleep_ms((unsigned)rand_r(&seed) % 4);
		for (int j = 0; j < 4; j++) {
			act[j] = rand_r(&seed) % 3;
			kill(k[j].pid, act[j] ? SIGSTOP : SIGKILL);
			stopped += act[j] != 0;
		}
		assert_int_equal(
		    ask_within(&a, "alloc 1048576", line, sizeof(line)), 0);
		assert_int_equal(ask_within(&b, "free 1", line, sizeof(line)),
		                 0);
		assert_int_equal(
		    ask_within(&b, "alloc 2097152", line, sizeof(line)), 0);
		assert_int_equal(ask_within(&a, "info", line, sizeof(line)), 0);
		for (int j = 0; j < 4; j++)
			if (act[j] == 1)
				kill(k[j].pid, SIGCONT);
		sleep_ms((unsigned)rand_r(&seed) % 2);
		for (int j = 0; j < 4; j++) {
			kill9(&k[j]);
			killed++;
		}
	}
	/* The survivors are quiet; the dead leave within a second. */
	t0 = mono_ns();
	while (mono_ns() - t0 < (uint64_t)WATCHDOG_MS * 1000000ULL) {
		fake = 0;
		assert_int_equal(ask_within(&a, "used", line, sizeof(line)), 0);
		fake += strtoull(line, NULL, 10);
		assert_int_equal(ask_within(&b, "used", line, sizeof(line)), 0);
		fake += strtoull(line, NULL, 10);
		assert_int_equal(cnl_region_stat(h.r, &st), 0);
		if (st.used == fake && st.nprocs == 2) {
			equal = 1;
			break;
		}
		sleep_ms(50);
	}
	print_message("kill-anywhere: %d processes killed (%d stopped "
	              "first); accounting %llu, driver %llu; longest answer "
	              "of a survivor %.3f ms; at most %llu retries in a "
	              "region loop\n",
	              killed, stopped, (unsigned long long)st.used, fake,
	              (double)max_wait_ns / 1e6, (unsigned long long)st.spins);
	assert_true(equal);
	assert_int_equal(st.used, fake);
	assert_true(st.spins <= 2 * CNL_REGION_SPINS);
	/* Nothing is wedged and nothing leaked. */
	assert_int_equal(ask_within(&a, "free-all", line, sizeof(line)), 0);
	assert_int_equal(ask_within(&b, "free-all", line, sizeof(line)), 0);
	assert_int_equal(cnl_region_stat(h.r, &st), 0);
	assert_int_equal(st.used, 0);
	ask(&a, "exit", line, sizeof(line));
	ask(&b, "exit", line, sizeof(line));
	assert_int_equal(reap(&a), 0);
	assert_int_equal(reap(&b), 0);
	cnl_region_unmap(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tamper),
	    cmocka_unit_test(test_lease_no_wedge),
	    cmocka_unit_test(test_close_fds),
	    cmocka_unit_test(test_garbage),
	    cmocka_unit_test(test_dead_leave),
	    cmocka_unit_test(test_stop_no_wedge),
	    cmocka_unit_test(test_async_race),
	    cmocka_unit_test(test_kill_anywhere),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
