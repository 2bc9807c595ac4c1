/*
 * test_shim_region.c - the shared region on its own: layout checks, slot
 * claims, lock-free quota reservation under thread races, reaping of dead
 * processes (by the tool, and by themselves within a second), a process
 * stopped or killed in the middle of an update wedging nobody, slot
 * liveness that never looks at PIDs, the token bucket and the GPU board.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "shim/region.h"

static char dir[] = "/tmp/cnl-region-XXXXXX";
static char path[256];

static int setup(void **state)
{
	(void)state;
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof(path), "%s/region", dir);
	return 0;
}

static int teardown(void **state)
{
	char p[300];

	(void)state;
	snprintf(p, sizeof(p), "%s/region", dir);
	cnl_region_remove(p);
	snprintf(p, sizeof(p), "%s/board", dir);
	unlink(p);
	snprintf(p, sizeof(p), "%s/bad", dir);
	unlink(p);
	rmdir(dir);
	return 0;
}

/* What the live slots hold, read as a snapshot without reaping. */
static uint64_t held(struct cnl_region *r)
{
	uint64_t m = atomic_load(&r->live), sum = 0;

	for (int i = 0; i < CNL_REGION_PROCS; i++)
		if (m & (1ULL << i))
			sum += atomic_load(&r->procs[i].used);
	return sum;
}

static void test_create_map(void **state)
{
	struct cnl_region_handle h;
	char bad[300];
	int fd;

	(void)state;
	assert_int_equal(cnl_region_create(path, 1000, 25, "proj", NULL), 0);
	assert_int_equal(cnl_region_map(path, &h), 0);
	assert_int_equal(h.r->version, CNL_REGION_VERSION);
	assert_string_equal(h.r->project, "proj");
	assert_int_equal(atomic_load(&h.r->quota), 1000);
	assert_int_equal(atomic_load(&h.r->share_pct), 25);
	assert_int_equal(atomic_load(&h.r->burst_ns), CNL_REGION_BURST_NS);
	assert_int_equal(cnl_region_set_share(h.r, 101), -EINVAL);
	assert_int_equal(cnl_region_set_quota(h.r, 5), 0);
	assert_int_equal(atomic_load(&h.r->quota), 5);
	cnl_region_unmap(&h);

	assert_int_equal(cnl_region_create(path, 0, 101, "p", NULL), -EINVAL);
	assert_int_equal(cnl_region_map("/nonexistent/region", &h), -ENOENT);
	/* A short file and a foreign magic are refused. */
	snprintf(bad, sizeof(bad), "%s/bad", dir);
	fd = open(bad, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "CNLREGN1", 8), 8);
	assert_int_equal(cnl_region_map(bad, &h), -EPROTO);
	assert_int_equal(ftruncate(fd, sizeof(struct cnl_region)), 0);
	close(fd);
	assert_int_equal(cnl_region_map(bad, &h), -EPROTO);
}

static void test_reserve_quota_peak(void **state)
{
	struct cnl_region_handle h;
	struct cnl_region_stat st;
	int slot;

	(void)state;
	assert_int_equal(cnl_region_create(path, 1000, 0, "p", NULL), 0);
	assert_int_equal(cnl_region_map(path, &h), 0);
	slot = cnl_region_attach(&h);
	assert_true(slot >= 0);
	assert_int_equal(cnl_region_reserve(h.r, slot, 600, 0), 0);
	assert_int_equal(cnl_region_reserve(h.r, slot, 401, 0), -ENOMEM);
	assert_int_equal(cnl_region_reserve(h.r, slot, 400, 0), 0);
	assert_int_equal(cnl_region_reserve(h.r, slot, 1, 0), -ENOMEM);
	assert_int_equal(cnl_region_reserve(h.r, slot, UINT64_MAX, 0), -ENOMEM);
	cnl_region_unreserve(h.r, slot, 700);
	assert_int_equal(cnl_region_reserve(h.r, slot, 50, 1), 0);
	assert_int_equal(cnl_region_stat(h.r, &st), 0);
	assert_int_equal(st.used, 350);
	assert_int_equal(st.peak, 1000);
	assert_int_equal(st.oom, 3);
	assert_int_equal(st.nprocs, 1);
	assert_int_equal(st.procs[0].pid, getpid());
	assert_int_equal(st.procs[0].used, 350);
	assert_int_equal(st.procs[0].peak, 1000);
	/* Giving back more than held clamps at zero. */
	cnl_region_unreserve(h.r, slot, 10000);
	assert_int_equal(held(h.r), 0);
	/* Unlimited. */
	cnl_region_set_quota(h.r, 0);
	assert_int_equal(cnl_region_reserve(h.r, slot, 1ULL << 50, 0), 0);
	cnl_region_detach(&h, slot);
	assert_int_equal(held(h.r), 0);
	cnl_region_unmap(&h);
}

struct race {
	struct cnl_region *r;
	int slot;
	long got;
};

static void *racer(void *arg)
{
	struct race *x = arg;

	while (cnl_region_reserve(x->r, x->slot, 7, 0) == 0)
		x->got++;
	return NULL;
}

/* Eight threads reserving concurrently never overshoot the quota. */
static void test_reserve_race(void **state)
{
	struct cnl_region_handle h;
	struct race x[8];
	pthread_t t[8];
	long sum = 0;
	int slot;

	(void)state;
	assert_int_equal(cnl_region_create(path, 70000, 0, "p", NULL), 0);
	assert_int_equal(cnl_region_map(path, &h), 0);
	slot = cnl_region_attach(&h);
	for (int i = 0; i < 8; i++) {
		x[i] = (struct race){h.r, slot, 0};
		pthread_create(&t[i], NULL, racer, &x[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		sum += x[i].got;
	}
	assert_int_equal(sum, 10000);
	assert_int_equal(held(h.r), 70000);
	cnl_region_detach(&h, slot);
	cnl_region_unmap(&h);
}

/*
 * Eight processes racing for one quota in small steps (lock-free: each
 * adds to its own slot, then sums): what they keep never exceeds the
 * quota, and a spurious refusal (a racer's add seen, then taken back)
 * leaves at most one step per process unused.
 */
static void test_reserve_race_processes(void **state)
{
	struct cnl_region_handle h;
	long *got;
	long sum = 0;
	pid_t pid[8];
	int p[2], d[2], q[2];
	char go = 'g';

	(void)state;
	got = mmap(NULL, 8 * sizeof(*got), PROT_READ | PROT_WRITE,
	           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(got != MAP_FAILED);
	assert_int_equal(cnl_region_create(path, 700000, 0, "p", NULL), 0);
	assert_int_equal(cnl_region_map(path, &h), 0);
	assert_int_equal(pipe(p), 0);
	assert_int_equal(pipe(d), 0);
	assert_int_equal(pipe(q), 0);
	for (int i = 0; i < 8; i++) {
		pid[i] = fork();
		if (pid[i] == 0) {
			struct cnl_region_handle hc;
			char c;
			int s;

			if (cnl_region_map(path, &hc) < 0 ||
			    (s = cnl_region_attach(&hc)) < 0 ||
			    read(p[0], &c, 1) != 1)
				_exit(1);
			/* Keep going past refusals: a refusal may be a
			 * racer's add in flight, not a full quota. */
			for (int miss = 0; miss < 1000;)
				if (cnl_region_reserve(hc.r, s, 7, 0) == 0)
					got[i]++;
				else
					miss++;
			/* Stay alive (holding the slot) until all are done:
			 * a dead racer's share would be reaped. */
			if (write(d[1], "d", 1) != 1 || read(q[0], &c, 1) != 1)
				_exit(1);
			_exit(0);
		}
	}
	for (int i = 0; i < 8; i++)
		assert_int_equal(write(p[1], &go, 1), 1);
	for (int i = 0; i < 8; i++) {
		char c;

		assert_int_equal(read(d[0], &c, 1), 1);
	}
	assert_true(held(h.r) <= 700000);
	for (int i = 0; i < 8; i++)
		assert_int_equal(write(q[1], &go, 1), 1);
	for (int i = 0; i < 8; i++) {
		int st;

		waitpid(pid[i], &st, 0);
		assert_int_equal(WEXITSTATUS(st), 0);
		sum += got[i];
	}
	print_message("race: %ld of 100000 steps kept by 8 processes\n", sum);
	assert_true(sum <= 100000);
	assert_true(sum >= 100000 - 8);
	munmap(got, 8 * sizeof(*got));
	close(p[0]);
	close(p[1]);
	close(d[0]);
	close(d[1]);
	close(q[0]);
	close(q[1]);
	cnl_region_unmap(&h);
}

/* A child that dies holding memory gives it back when reaped. */
static void test_reap_dead(void **state)
{
	struct cnl_region_handle h;
	int slot, st;
	pid_t pid;

	(void)state;
	assert_int_equal(cnl_region_create(path, 0, 0, "p", NULL), 0);
	assert_int_equal(cnl_region_map(path, &h), 0);
	slot = cnl_region_attach(&h);
	assert_int_equal(cnl_region_reserve(h.r, slot, 100, 0), 0);
	pid = fork();
	if (pid == 0) {
		struct cnl_region_handle hc;
		int s;

		if (cnl_region_map(path, &hc) < 0)
			_exit(1);
		s = cnl_region_attach(&hc);
		if (s < 0 || s == slot ||
		    cnl_region_reserve(hc.r, s, 1000, 0) < 0)
			_exit(1);
		_exit(0); /* no detach: as if killed */
	}
	waitpid(pid, &st, 0);
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(held(h.r), 1100);
	assert_int_equal(cnl_region_reap(&h, slot), 1);
	assert_int_equal(held(h.r), 100);
	/* Our own slot is not reaped, and reaping twice does nothing. */
	assert_int_equal(cnl_region_reap(&h, slot), 0);
	assert_int_equal(held(h.r), 100);
	assert_int_equal(atomic_load(&h.r->reaped), 1);
	cnl_region_detach(&h, slot);
	cnl_region_unmap(&h);
}

/*
 * A process stopped (SIGSTOP) or killed between its add and its take-back
 * holds nothing any other process waits for: the others reserve and read
 * at once, and a killed one's bytes leave the sum when reaped.
 */
static void test_stop_mid_update(void **state)
{
	struct cnl_region_handle h;
	struct cnl_region_stat st;
	int slot, p[2];
	char c;
	pid_t pid;

	(void)state;
	assert_int_equal(cnl_region_create(path, 10000, 0, "p", NULL), 0);
	assert_int_equal(cnl_region_map(path, &h), 0);
	slot = cnl_region_attach(&h);
	assert_int_equal(cnl_region_reserve(h.r, slot, 100, 0), 0);
	assert_int_equal(pipe(p), 0);
	pid = fork();
	if (pid == 0) {
		struct cnl_region_handle hc;
		int s;

		if (cnl_region_map(path, &hc) < 0)
			_exit(1);
		s = cnl_region_attach(&hc);
		cnl_region_reserve(hc.r, s, 500, 0);
		/* Half a reservation: added, not yet checked. */
		atomic_fetch_add(&hc.r->procs[s].used, 700);
		if (write(p[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	assert_int_equal(read(p[0], &c, 1), 1);
	kill(pid, SIGSTOP);
	/* Nothing is wedged: we reserve, give back and read at once. */
	assert_int_equal(cnl_region_reserve(h.r, slot, 1, 0), 0);
	cnl_region_unreserve(h.r, slot, 1);
	assert_int_equal(cnl_region_stat(h.r, &st), 0);
	assert_int_equal(st.nprocs, 2);
	assert_int_equal(st.used, 100 + 1200);
	assert_int_equal(cnl_region_reserve(h.r, slot, 8700, 0), 0);
	assert_int_equal(cnl_region_reserve(h.r, slot, 1, 0), -ENOMEM);
	cnl_region_unreserve(h.r, slot, 8700);
	/* Stopped is alive: not reaped. */
	assert_int_equal(cnl_region_reap(&h, slot), 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	assert_int_equal(cnl_region_reap(&h, slot), 1);
	assert_int_equal(held(h.r), 100);
	close(p[0]);
	close(p[1]);
	cnl_region_detach(&h, slot);
	cnl_region_unmap(&h);
}

/*
 * Liveness is the slot's file lock, never the PID: a slot whose recorded
 * PID is alive (ours) but whose owner is gone is reaped; a live owner
 * whose recorded PID is stale (reused or bogus) is not.
 */
static void test_pid_reuse(void **state)
{
	struct cnl_region_handle h;
	int slot, p[2], q[2];
	char c;
	pid_t pid;

	(void)state;
	assert_int_equal(cnl_region_create(path, 0, 0, "p", NULL), 0);
	assert_int_equal(cnl_region_map(path, &h), 0);
	slot = cnl_region_attach(&h);
	/* Slot 40: dead owner recorded with a live PID. */
	atomic_store(&h.r->procs[40].pid, getpid());
	atomic_store(&h.r->procs[40].used, 5000);
	atomic_store(&h.r->procs[40].state, CNL_PROC_LIVE);
	atomic_fetch_or(&h.r->live, 1ULL << 40);
	/* A live child whose PID we overwrite with one that is not alive. */
	assert_int_equal(pipe(p), 0);
	assert_int_equal(pipe(q), 0);
	pid = fork();
	if (pid == 0) {
		struct cnl_region_handle hc;
		int s;

		if (cnl_region_map(path, &hc) < 0)
			_exit(1);
		s = cnl_region_attach(&hc);
		cnl_region_reserve(hc.r, s, 300, 0);
		if (write(p[1], &s, sizeof(s)) != sizeof(s))
			_exit(1);
		if (read(q[0], &c, 1) < 0)
			_exit(1);
		_exit(0);
	}
	{
		int s;
		assert_int_equal(read(p[0], &s, sizeof(s)), sizeof(s));
		atomic_store(&h.r->procs[s].pid, 999999999);
	}
	assert_int_equal(cnl_region_reap(&h, slot), 1);
	assert_int_equal(held(h.r), 300);
	assert_int_equal(write(q[1], "x", 1), 1);
	waitpid(pid, NULL, 0);
	assert_int_equal(cnl_region_reap(&h, slot), 1);
	assert_int_equal(held(h.r), 0);
	close(p[0]);
	close(p[1]);
	close(q[0]);
	close(q[1]);
	cnl_region_detach(&h, slot);
	cnl_region_unmap(&h);
}

static void test_bucket(void **state)
{
	struct cnl_bucket b;
	uint64_t burst = 1000000;

	(void)state;
	atomic_store(&b.tokens, 0);
	atomic_store(&b.stamp, 1000);
	cnl_bucket_refill(&b, 1000 + 400000, 25, burst);
	assert_int_equal(atomic_load(&b.tokens), 100000);
	cnl_bucket_refill(&b, 1000, 25, burst); /* time never goes back */
	assert_int_equal(atomic_load(&b.tokens), 100000);
	/* Under 10 us is credited with the next step, not lost. */
	cnl_bucket_refill(&b, 1000 + 400000 + 4000, 25, burst);
	assert_int_equal(atomic_load(&b.tokens), 100000);
	cnl_bucket_refill(&b, 1000 + 400000 + 40000, 25, burst);
	assert_int_equal(atomic_load(&b.tokens), 110000);
	cnl_bucket_refill(&b, 1000 + 440000 + 100000000ULL, 25, burst);
	assert_int_equal(atomic_load(&b.tokens), (int64_t)burst);
	cnl_bucket_charge(&b, 3000000, burst);
	assert_int_equal(atomic_load(&b.tokens), -2000000);
	cnl_bucket_charge(&b, 1000000000000LL, burst);
	assert_int_equal(atomic_load(&b.tokens), -(int64_t)burst * 50);

	/* A depth of 0 (a zeroed region) is the default depth: tokens still
	 * come, so a throttled launch does not wait for ever. */
	atomic_store(&b.tokens, 0);
	atomic_store(&b.stamp, 1000);
	cnl_bucket_refill(&b, 1000 + 400000, 25, 0);
	assert_int_equal(atomic_load(&b.tokens), 100000);
	cnl_bucket_refill(&b, 1000 + 400000 + 10000000000ULL, 25, 0);
	assert_int_equal(atomic_load(&b.tokens), (int64_t)CNL_REGION_BURST_NS);
	cnl_bucket_charge(&b, 1000000000000LL, 0);
	assert_int_equal(atomic_load(&b.tokens),
	                 -(int64_t)CNL_REGION_BURST_NS * 50);
}

static void test_board(void **state)
{
	char bp[300];
	struct cnl_board *b;
	uint64_t t = 1000000000000ULL;

	(void)state;
	snprintf(bp, sizeof(bp), "%s/board", dir);
	assert_int_equal(cnl_board_create(bp), 0);
	b = cnl_board_map(bp);
	assert_non_null(b);
	/* Alone: everything. */
	assert_int_equal(cnl_board_rate(b, 0, 30, t), 100);
	/* Both busy: by share. */
	assert_int_equal(cnl_board_rate(b, 1, 70, t), 70);
	assert_int_equal(cnl_board_rate(b, 0, 30, t + 1000), 30);
	/* The other idle for longer than the activity window: everything. */
	assert_int_equal(cnl_board_rate(b, 0, 30, t + 2 * CNL_BOARD_ACTIVE_NS),
	                 100);
	/* Three slices, one idle: the idle share is split 25:50. */
	assert_int_equal(cnl_board_rate(b, 2, 50, t + 2 * CNL_BOARD_ACTIVE_NS),
	                 62);
	assert_int_equal(cnl_board_rate(b, 3, 20, t + 2 * CNL_BOARD_ACTIVE_NS),
	                 20);
	assert_null(cnl_board_map(path)); /* a region is not a board */
}

/* Any slice can write any row of the board: forged rows never push a
 * slice below its own share; the shim's descriptor path (no mapping, so
 * truncation cannot raise SIGBUS) agrees with the mapped one and falls
 * back to the share on a board cut short. */
static void test_board_hostile(void **state)
{
	char bp[300];
	struct cnl_board *b;
	uint64_t t = 1000000000000ULL;
	int fd;

	(void)state;
	snprintf(bp, sizeof(bp), "%s/board", dir);
	assert_int_equal(cnl_board_create(bp), 0);
	b = cnl_board_map(bp);
	assert_non_null(b);
	fd = cnl_board_open(bp);
	assert_true(fd >= 0);
	for (unsigned i = 1; i < CNL_BOARD_SLICES; i++) {
		atomic_store(&b->slices[i].share_pct, UINT32_MAX);
		atomic_store(&b->slices[i].active_ns, t);
	}
	assert_int_equal(cnl_board_rate(b, 0, 30, t), 30);
	assert_int_equal(cnl_board_rate_fd(fd, 0, 30, t), 30);
	/* Honest rows: the descriptor path gives what the mapping gives. */
	for (unsigned i = 2; i < CNL_BOARD_SLICES; i++)
		atomic_store(&b->slices[i].active_ns, 0);
	atomic_store(&b->slices[1].share_pct, 20);
	assert_int_equal(cnl_board_rate_fd(fd, 0, 30, t + 1), 60);
	assert_int_equal(cnl_board_rate(b, 0, 30, t + 2), 60);
	assert_int_equal(cnl_board_rate_fd(fd, 0, 30, t + 3), 60);
	assert_int_equal(cnl_board_rate_fd(fd, 0, 0, t + 3), 0);
	assert_int_equal(cnl_board_rate_fd(fd, CNL_BOARD_SLICES, 30, t), 30);
	munmap(b, sizeof(*b));
	/* Cut short by a tenant: the share, and no signal. */
	assert_int_equal(truncate(bp, 100), 0);
	assert_int_equal(cnl_board_rate_fd(fd, 0, 30, t + 4), 30);
	close(fd);
	assert_int_equal(cnl_board_open(bp), -EPROTO);
	assert_int_equal(cnl_board_open(path), -EPROTO); /* a region */
	assert_true(cnl_board_open("") < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_create_map),
	    cmocka_unit_test(test_reserve_quota_peak),
	    cmocka_unit_test(test_reserve_race),
	    cmocka_unit_test(test_reserve_race_processes),
	    cmocka_unit_test(test_reap_dead),
	    cmocka_unit_test(test_stop_mid_update),
	    cmocka_unit_test(test_pid_reuse),
	    cmocka_unit_test(test_bucket),
	    cmocka_unit_test(test_board),
	    cmocka_unit_test(test_board_hostile),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
