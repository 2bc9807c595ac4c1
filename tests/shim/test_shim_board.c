/*
 * test_shim_board.c - the GPU board under a hostile tenant (issue 18).
 *
 * The board (region.h) is one file per GPU or MIG instance that every
 * slice on it writes (the agent makes it mode 0666 and mounts it into each
 * slice), so a tenant of one project can write or truncate it under the
 * slices of every other project on the GPU.  These tests are that tenant,
 * a process writing the board file directly, against a victim slice
 * running shimtest with the shim preloaded over the fake driver; the
 * victim's GPU time is the fake's own ledger (busy_ns per tag), not the
 * shim's figure.
 *
 *   - truncating the board does not kill the victim (a mapped board raised
 *     SIGBUS in every process of every slice on the GPU at its next
 *     launch), and the victim falls back to its own share;
 *   - rows forged with huge shares, kept "active", do not throttle the
 *     victim below its own share (they made it 30 * 100 / 9930 = 0.3%).
 *
 * Shares are ratios of GPU time over a window of wall time; every wait on
 * a child has a watchdog; no assertion is on a wall-clock duration.
 */
#define _GNU_SOURCE
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

#define WARMUP_MS 400
#define WINDOW_MS 2000
#define SHARE     30

static char gpu_path[300], board_path[300], region_path[300];
static char env_gpu[400], env_region[400];
static struct fake_gpu *gpu;

static int group_setup(void **state)
{
	int fd;

	(void)state;
	scratch_init("board");
	scratch_path(gpu_path, sizeof(gpu_path), "gpu");
	scratch_path(board_path, sizeof(board_path), "board");
	scratch_path(region_path, sizeof(region_path), "region");
	snprintf(env_gpu, sizeof(env_gpu), "CNL_FAKE_GPU=%s", gpu_path);
	snprintf(env_region, sizeof(env_region), "CNLAB_REGION=%s",
	         region_path);
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

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The victim: a slice of SHARE% in board row 0, one greedy process
 * (tag 1) launching 1 ms kernels for secs seconds. */
static struct child victim(double secs)
{
	struct cnl_region_opts o = {.board = board_path, .board_slot = 0};
	char s[32], line[64];
	char *args[] = {"greedy", "launch", "1000", s, NULL};
	char *env[] = {env_region, env_gpu, "CNL_FAKE_TAG=1", NULL};
	struct child c;

	assert_int_equal(cnl_board_create(board_path), 0);
	assert_int_equal(cnl_region_create(region_path, 0, SHARE, "victim", &o),
	                 0);
	snprintf(s, sizeof(s), "%.1f", secs);
	c = spawn(args, env, 1);
	assert_int_equal(read_line(&c, line, sizeof(line)), 0);
	assert_string_equal(line, "ready");
	return c;
}

/* The victim's share of the GPU over WINDOW_MS from now. */
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
 * Another project's process truncates the board while the victim runs.
 * The victim must live on (exit 0, not 128 + SIGBUS) and, with no board
 * left to borrow idle time from, keep to its own share.
 */
static void test_truncate(void **state)
{
	struct child v;
	double before, after;
	int fd;

	(void)state;
	v = victim((WARMUP_MS + 2 * WINDOW_MS + 300) / 1000.0 + 1.0);
	sleep_ms(WARMUP_MS);
	before = window_share(); /* alone on the board: all of the GPU */
	fd = open(board_path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 0), 0);
	close(fd);
	sleep_ms(300);
	after = window_share();
	print_message("board truncated: victim (share %d%%) had %.1f%% of "
	              "the GPU before, %.1f%% after\n",
	              SHARE, 100 * before, 100 * after);
	assert_int_equal(reap_within(&v, 20000), 0);
	assert_true(before > 0.80);
	assert_true(after < (SHARE + 3) / 100.0);
	assert_true(after > (SHARE - 3) / 100.0);
}

/*
 * Another project's process fills every other row of the board with a
 * huge share, marked active every few milliseconds: the victim must still
 * get its own share (it paid for it), though not the idle time it would
 * otherwise borrow.
 */
static void test_forged_rows(void **state)
{
	struct child v;
	double got;
	pid_t attacker;

	(void)state;
	v = victim((WARMUP_MS + WINDOW_MS) / 1000.0 + 1.0);
	attacker = fork();
	if (attacker == 0) {
		int fd = open(board_path, O_RDWR);

		if (fd < 0)
			_exit(1);
		for (;;) {
			struct cnl_board_slice row;
			uint64_t now = mono_ns();

			memset(&row, 0, sizeof(row));
			atomic_store(&row.share_pct, UINT32_MAX);
			atomic_store(&row.active_ns, now);
			for (unsigned i = 1; i < CNL_BOARD_SLICES; i++)
				if (pwrite(fd, &row, sizeof(row),
				           (off_t)(offsetof(struct cnl_board,
				                            slices) +
				                   i * sizeof(row))) < 0)
					_exit(1);
			sleep_ms(5);
		}
	}
	assert_true(attacker > 0);
	sleep_ms(WARMUP_MS);
	got = window_share();
	kill(attacker, SIGKILL);
	waitpid(attacker, NULL, 0);
	print_message("forged board rows: victim (share %d%%) got %.1f%% of "
	              "the GPU\n",
	              SHARE, 100 * got);
	assert_int_equal(reap_within(&v, 20000), 0);
	assert_true(got > (SHARE - 3) / 100.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_truncate),
	    cmocka_unit_test(test_forged_rows),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
