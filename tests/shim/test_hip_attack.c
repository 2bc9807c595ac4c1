/*
 * test_hip_attack.c - libcnlab-hip.so under a hostile tenant (issue 18):
 * the attacks that test_shim_attack.c, test_shim_board.c and
 * test_shim_escapes.c make on the CUDA shim, made on the HIP shim with
 * real processes (tests/shim/hiptest over the fake HIP runtime).
 *
 *   - a process that closes its descriptors (closefrom, a loop of close)
 *     keeps its slot and its memory counted: another process of the slice
 *     is still refused what would take the slice over its quota;
 *   - a tenant's library loaded with dlmopen into a new link-map namespace
 *     (a private libamdhip64, without the shim) is refused, however
 *     dlmopen is reached; loaded with dlopen it is charged;
 *   - another slice's process truncating the GPU board kills no process of
 *     the victim slice (a mapped board raised SIGBUS), which keeps to its
 *     own share;
 *   - a read lease the tenant takes on its accounting file does not hang a
 *     new process of the slice: it starts and fails closed.
 *
 * Every wait on a child has a watchdog (a hang fails the test); no
 * assertion is on a wall-clock duration.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <cmocka.h>

#include "fake_gpu.h"
#include "harness.h"
#include "shim/region.h"

#define MiB (1ULL << 20)
/* A child that has not answered in this long is hung. */
#define WATCHDOG_MS 20000
#define WARMUP_MS   400
#define WINDOW_MS   2000
#define SHARE       30

static char gpu_path[300], region_path[300], acct_path[310], board_path[300];
static char env_region[400], env_gpu[400];
static struct fake_gpu *gpu;

static int group_setup(void **state)
{
	int fd;

	(void)state;
	scratch_init("hipattack");
	/* The non-root tenant of test_lease must reach the files. */
	chmod(scratch, 0755);
	scratch_path(gpu_path, sizeof(gpu_path), "gpu");
	scratch_path(region_path, sizeof(region_path), "region");
	scratch_path(board_path, sizeof(board_path), "board");
	cnl_region_acct_path(region_path, acct_path, sizeof(acct_path));
	snprintf(env_region, sizeof(env_region), "CNLAB_REGION=%s",
	         region_path);
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

/* One line from c within the watchdog; -1 on a hang or EOF. */
static int line_within(struct child *c, char *buf, size_t cap)
{
	struct pollfd p = {.fd = fileno(c->out), .events = POLLIN};

	if (poll(&p, 1, WATCHDOG_MS) <= 0)
		return -1;
	return read_line(c, buf, cap);
}

static int ask_within(struct child *c, const char *cmd, char *buf, size_t cap)
{
	fprintf(c->in, "%s\n", cmd);
	fflush(c->in);
	return line_within(c, buf, cap);
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

/*
 * A process owns its slot through a record lock on the accounting file,
 * which POSIX drops when the process closes any descriptor of that file:
 * after closefrom or a loop of close, and the reaper's interval, its
 * 40 MiB must still count against the 64 MiB quota.
 */
static void test_close_fds(void **state)
{
	struct cnl_region_handle h = region(64 * MiB);
	char *env[] = {env_region, env_gpu, NULL};
	const char *how[] = {"close-fds 0", "close-fds 1"};
	struct cnl_region_stat st;
	char line[128];

	(void)state;
	for (int i = 0; i < 2; i++) {
		struct child a = repl(env), b;
		int id = -1;

		assert_int_equal(
		    ask_within(&a, "alloc malloc 41943040", line, sizeof(line)),
		    0);
		assert_int_equal(sscanf(line, "ok %d", &id), 1);
		assert_int_equal(ask_within(&a, how[i], line, sizeof(line)), 0);
		assert_string_equal(line, "ok");
		sleep_ms(2 * (unsigned)(CNL_REGION_REAP_NS / 1000000));
		b = repl(env);
		assert_int_equal(
		    ask_within(&b, "alloc malloc 41943040", line, sizeof(line)),
		    0);
		print_message("%s: another process's 40 MiB under 64: %s\n",
		              how[i], line);
		assert_string_equal(line, "fail 2"); /* hipErrorOutOfMemory */
		assert_int_equal(cnl_region_stat(h.r, &st), 0);
		assert_int_equal(st.used, 40 * MiB);
		kill9(&b);
		/* What it frees still comes back. */
		snprintf(line, sizeof(line), "free %d", id);
		assert_int_equal(ask_within(&a, line, line, sizeof(line)), 0);
		assert_string_equal(line, "ok");
		assert_int_equal(cnl_region_stat(h.r, &st), 0);
		assert_int_equal(st.used, 0);
		kill9(&a);
	}
	cnl_region_unmap(&h);
}

/*
 * A tenant's library loaded into a new link-map namespace gets a private
 * libamdhip64 that the shim does not hook: 256 MiB under a 64 MiB quota.
 * Refused through every door to dlmopen; dlopen still loads and is
 * charged.  Without a region the same loads work (the refusal is the
 * shim's, and the library really allocates).
 */
static void test_dlmopen(void **state)
{
	struct cnl_region_handle h = region(64 * MiB);
	char *env[] = {env_region, env_gpu, NULL};
	char *env_none[] = {"CNLAB_REGION=", env_gpu, NULL};
	const char *doors[] = {"direct", "default", "next", "libc"};
	char cmd[600], line[128];
	struct child c;

	(void)state;
	c = repl(env);
	for (size_t i = 0; i < sizeof(doors) / sizeof(doors[0]); i++) {
		snprintf(cmd, sizeof(cmd), "ns %s 268435456 %s", doors[i],
		         ESCAPE_HIP);
		assert_int_equal(ask_within(&c, cmd, line, sizeof(line)), 0);
		print_message("dlmopen (%s) of a HIP library in a 64 MiB "
		              "slice, 256 MiB: %s\n",
		              doors[i], line);
		assert_string_equal(line, "refused");
	}
	snprintf(cmd, sizeof(cmd), "ns dlopen 268435456 %s", ESCAPE_HIP);
	assert_int_equal(ask_within(&c, cmd, line, sizeof(line)), 0);
	assert_string_equal(line, "fail 2");
	kill9(&c);
	c = repl(env_none);
	snprintf(cmd, sizeof(cmd), "ns direct 268435456 %s", ESCAPE_HIP);
	assert_int_equal(ask_within(&c, cmd, line, sizeof(line)), 0);
	assert_string_equal(line, "ok");
	kill9(&c);
	cnl_region_unmap(&h);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The victim's share of the GPU (fake tag 1) over WINDOW_MS from now. */
static double window_share(void)
{
	uint64_t b0, b1, t0, t1;

	t0 = mono_ns();
	b0 = atomic_load(&gpu->busy_ns[1]);
	sleep_ms(WINDOW_MS);
	t1 = mono_ns();
	b1 = atomic_load(&gpu->busy_ns[1]);
	return (double)(b1 - b0) / (double)(t1 - t0);
}

/* Exit status of c, killing it if it has not ended within the watchdog. */
static int reap_within(struct child *c, unsigned watchdog_ms)
{
	for (unsigned waited = 0; waited < watchdog_ms; waited += 50) {
		int st;
		pid_t p = waitpid(c->pid, &st, WNOHANG);

		if (p == c->pid) {
			c->pid = -1;
			fclose(c->in);
			fclose(c->out);
			return WIFEXITED(st) ? WEXITSTATUS(st)
			                     : 128 + WTERMSIG(st);
		}
		sleep_ms(50);
	}
	kill9(c);
	return -1;
}

/*
 * Another project's process truncates the GPU board under a victim slice
 * of SHARE% (board row 0) running a greedy HIP program of 1 ms kernels:
 * the victim lives on (exit 0, not 128 + SIGBUS) and, with no board left
 * to borrow idle time from, keeps to its own share.
 */
static void test_board_truncate(void **state)
{
	struct cnl_region_opts o = {.board = board_path, .board_slot = 0};
	char secs[32], line[64];
	char *args[] = {"greedy", "kernel", "1000", secs, NULL};
	char *env[] = {env_region, env_gpu, "CNL_FAKE_TAG=1", NULL};
	double before, after;
	struct child v;
	int fd;

	(void)state;
	assert_int_equal(cnl_board_create(board_path), 0);
	assert_int_equal(cnl_region_create(region_path, 0, SHARE, "victim", &o),
	                 0);
	snprintf(secs, sizeof(secs), "%.1f",
	         (WARMUP_MS + 2 * WINDOW_MS + 300) / 1000.0 + 1.0);
	v = spawn(args, env, 1);
	assert_int_equal(line_within(&v, line, sizeof(line)), 0);
	assert_string_equal(line, "ready");
	sleep_ms(WARMUP_MS);
	before = window_share(); /* alone on the board: all of the GPU */
	fd = open(board_path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 0), 0);
	close(fd);
	sleep_ms(300);
	after = window_share();
	print_message("board truncated: HIP victim (share %d%%) had %.1f%% "
	              "of the GPU before, %.1f%% after\n",
	              SHARE, 100 * before, 100 * after);
	assert_int_equal(reap_within(&v, WATCHDOG_MS), 0);
	assert_true(before > 0.80);
	assert_true(after < (SHARE + 3) / 100.0);
	assert_true(after > (SHARE - 3) / 100.0);
}

/*
 * The tenant owns its accounting file, so it may take a read lease on it
 * and ignore the lease-break signal: every open of the file for writing
 * would then block for the lease-break time (45 s).  A new HIP process of
 * the slice goes through region.c's non-blocking open: it starts at once
 * and fails closed (hipErrorOutOfMemory), and works again once the lease
 * is gone.
 */
static void test_lease(void **state)
{
	char *env[] = {env_region, env_gpu, NULL};
	char *args[] = {"repl", NULL};
	int p[2], started, refused;
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
	k = spawn(args, env, 1);
	started = line_within(&k, line, sizeof(line)) == 0 &&
	          strcmp(line, "ready") == 0;
	refused =
	    started &&
	    ask_within(&k, "alloc malloc 1048576", line, sizeof(line)) == 0 &&
	    strcmp(line, "fail 2") == 0; /* hipErrorOutOfMemory */
	kill9(&k);
	/* The tenant goes before any assertion can leave it behind. */
	kill(tenant, SIGKILL);
	waitpid(tenant, NULL, 0);
	assert_true(started);
	assert_true(refused);
	k = repl(env);
	assert_int_equal(
	    ask_within(&k, "alloc malloc 1048576", line, sizeof(line)), 0);
	assert_string_equal(line, "ok 0");
	kill9(&k);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_close_fds),
	    cmocka_unit_test(test_dlmopen),
	    cmocka_unit_test(test_board_truncate),
	    cmocka_unit_test(test_lease),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
