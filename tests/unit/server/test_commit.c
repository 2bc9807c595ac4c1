/*
 * test_commit.c - group commit's syncer (server/commit.h) on a real
 * SQLite file: what it waits for before it commits and syncs a batch.
 *
 * The syncer waits for requests on their way to the open batch
 * (cnl_commit_coming()) so that one sync covers them all; it does not
 * wait for a request alone, it stops waiting when the last one has
 * joined, and stopping the syncer ends the wait.  The tests make the
 * wait's bound long (cnl_commit_gather_for(): 600 s) so that what ends
 * it is what they do, never the clock: a wait that ran to its bound
 * where none should (a lone request waited for, a last arrival or a stop
 * not heard) outlasts the test's timeout (300 s, CMakeLists.txt) and
 * fails it.  The pauses below only give a broken syncer the time to
 * sync early, which the test then sees.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <sqlite3.h>

#include "server/commit.h"
#include "store/store.h"

#define LONG_US ((int64_t)600 * 1000 * 1000) /* never reached */

struct fixture {
	char dir[64];
	char path[128];
	struct cnl_store *s;
	struct cnl_commit *gc;
	pthread_mutex_t mu; /* the API's lock: serialises the store's users */
	int records;        /* audit records appended */
};

/* The syncer's flush: the open batch committed under the users' lock. */
static void flush(void *arg)
{
	struct fixture *f = arg;

	pthread_mutex_lock(&f->mu);
	cnl_store_flush(f->s);
	pthread_mutex_unlock(&f->mu);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char err[256];

	snprintf(f->dir, sizeof(f->dir), "/tmp/cnl-commit-XXXXXX");
	if (!f || !mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/cnlab.db", f->dir);
	if (cnl_store_open(f->path, &f->s, err, sizeof(err)) != 0) {
		fprintf(stderr, "cannot open %s: %s\n", f->path, err);
		return -1;
	}
	pthread_mutex_init(&f->mu, NULL);
	if (cnl_commit_new(f->s, flush, f, &f->gc) != 0 || !f->gc)
		return -1;
	cnl_commit_gather_for(f->gc, LONG_US);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
	struct fixture *f = *state;
	char p[160];

	cnl_commit_free(f->gc);
	cnl_store_close(f->s);
	pthread_mutex_destroy(&f->mu);
	for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
		snprintf(p, sizeof(p), "%s%s", f->path, suffix[i]);
		unlink(p);
	}
	if (rmdir(f->dir) != 0)
		fprintf(stderr, "cannot remove %s\n", f->dir);
	free(f);
	return 0;
}

/* The records in the file, as another connection reads them. */
static int raw_records(const char *path)
{
	sqlite3 *db;
	sqlite3_stmt *st;
	int n = -1;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
	                 SQLITE_OK);
	assert_int_equal(
	    sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM audit", -1, &st, NULL),
	    SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return n;
}

/*
 * One request: a transaction of the batch kind with one audit record,
 * under the lock; what its commit said (1: left in the batch) and the
 * count it waits for.
 */
static int request(struct fixture *f, int64_t *seq)
{
	struct cnl_store_audit a = {.ts_ms = 1700000000000};
	int r;

	pthread_mutex_lock(&f->mu);
	assert_true(cnl_store_tx_begin_batch(f->s) >= 0);
	snprintf(a.actor, sizeof(a.actor), "alice");
	snprintf(a.action, sizeof(a.action), "job.create");
	snprintf(a.target, sizeof(a.target), "job-%d", f->records++);
	snprintf(a.result, sizeof(a.result), "201");
	assert_int_equal(cnl_store_audit_append(f->s, &a, NULL), 0);
	r = cnl_store_tx_commit_batch(f->s);
	*seq = cnl_commit_mark(f->gc);
	pthread_mutex_unlock(&f->mu);
	assert_true(r == 0 || r == 1);
	return r;
}

/*
 * A batch open with one request in it, the syncer idle: the window is
 * opened here, as a sync under way would have; should the syncer shut
 * it first (it may not have gone idle yet), the request committed at
 * once: wait for it and try again (the batch, unlike it, is not in the
 * file until it is committed).
 */
static int64_t open_batch(struct fixture *f)
{
	int64_t seq;

	for (;;) {
		pthread_mutex_lock(&f->mu);
		cnl_store_batch_window(f->s, CNL_STORE_WINDOW_OPEN);
		pthread_mutex_unlock(&f->mu);
		if (request(f, &seq) == 1)
			return seq;
		assert_int_equal(cnl_commit_wait(f->gc, seq), 0);
		usleep(10000);
	}
}

struct waiter {
	struct fixture *f;
	int64_t seq;
	atomic_int r;
	atomic_bool done;
	pthread_t t;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;

	atomic_store(&w->r, cnl_commit_wait(w->f->gc, w->seq));
	atomic_store(&w->done, true);
	return NULL;
}

static void start_waiter(struct waiter *w, struct fixture *f, int64_t seq)
{
	w->f = f;
	w->seq = seq;
	atomic_store(&w->done, false);
	assert_int_equal(pthread_create(&w->t, NULL, wait_thread, w), 0);
}

static int join_waiter(struct waiter *w)
{
	assert_int_equal(pthread_join(w->t, NULL), 0);
	return atomic_load(&w->r);
}

/*
 * Two requests on their way: the batch waits for both, then one commit
 * and one sync take all three; the waiter of the first is answered only
 * then, and every request's count is the batch's.
 */
static void test_waits_for_those_on_their_way(void **state)
{
	struct fixture *f = *state;
	struct waiter w;
	int64_t a, b, c;
	int before;

	/* On their way before the batch opens: the syncer's idle timer
	 * may find it open at any moment. */
	cnl_commit_coming(f->gc, 1);
	cnl_commit_coming(f->gc, 1);
	a = open_batch(f);
	before = raw_records(f->path); /* the batch is not in it yet */
	start_waiter(&w, f, a);
	usleep(200000);
	assert_false(atomic_load(&w.done));
	assert_int_equal(cnl_store_batch_size(f->s), 1);

	assert_int_equal(request(f, &b), 1);
	cnl_commit_coming(f->gc, -1);
	usleep(200000);
	assert_false(atomic_load(&w.done)); /* one is still on its way */
	assert_int_equal(cnl_store_batch_size(f->s), 2);
	assert_int_equal(raw_records(f->path), before);

	assert_int_equal(request(f, &c), 1);
	cnl_commit_coming(f->gc, -1); /* the last: the batch goes */
	assert_int_equal(join_waiter(&w), 0);
	assert_int_equal(b, a);
	assert_int_equal(c, a);
	assert_int_equal(cnl_commit_wait(f->gc, c), 0);
	assert_int_equal(raw_records(f->path), before + 3);
	assert_false(cnl_store_batch_open(f->s));
}

/* One request on its way is not worth a wait: the batch goes at once
 * (the waiter is answered although the request never arrives). */
static void test_one_on_its_way_is_not_waited_for(void **state)
{
	struct fixture *f = *state;
	struct waiter w;
	int64_t a = open_batch(f);
	int before = raw_records(f->path);

	cnl_commit_coming(f->gc, 1);
	start_waiter(&w, f, a);
	assert_int_equal(join_waiter(&w), 0);
	assert_int_equal(raw_records(f->path), before + 1);
	cnl_commit_coming(f->gc, -1);
}

/* Nothing open, nothing to wait for: a request on its own commits at
 * once and its sync does not wait for those on their way. */
static void test_no_batch_no_wait(void **state)
{
	struct fixture *f = *state;
	int64_t a;
	int before = raw_records(f->path);

	cnl_commit_coming(f->gc, 1);
	cnl_commit_coming(f->gc, 1);
	pthread_mutex_lock(&f->mu);
	cnl_store_batch_window(f->s, CNL_STORE_WINDOW_SHUT);
	pthread_mutex_unlock(&f->mu);
	if (request(f, &a) == 0) {
		assert_int_equal(cnl_commit_wait(f->gc, a), 0);
		assert_int_equal(raw_records(f->path), before + 1);
	}
	/* (1: the syncer opened the window meanwhile; then the batch may
	 * wait, and ends when the test's teardown stops the syncer.) */
	cnl_commit_coming(f->gc, -2);
}

static void answered(void *arg, int r)
{
	atomic_store((atomic_int *)arg, r == 0 ? 1 : r);
}

/* Stopping the syncer ends its wait: the batch is made durable and its
 * wait answered, although those on their way never arrived. */
static void test_stop_ends_the_wait(void **state)
{
	struct fixture *f = *state;
	atomic_int got = 0;
	int before;
	int64_t a;

	cnl_commit_coming(f->gc, 1);
	cnl_commit_coming(f->gc, 1);
	a = open_batch(f);
	before = raw_records(f->path);
	assert_int_equal(cnl_commit_when(f->gc, a, answered, &got), 0);
	usleep(200000);
	assert_int_equal(atomic_load(&got), 0);
	cnl_commit_free(f->gc);
	f->gc = NULL;
	assert_int_not_equal(atomic_load(&got), 0);
	/* Answered: durable (1) or, stopping first, -ESHUTDOWN; either
	 * way the batch's record is in the file once the store closes. */
	assert_true(atomic_load(&got) == 1 || atomic_load(&got) == -ESHUTDOWN);
	cnl_store_flush(f->s);
	assert_int_equal(raw_records(f->path), before + 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_waits_for_those_on_their_way,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(
	        test_one_on_its_way_is_not_waited_for, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_no_batch_no_wait, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_stop_ends_the_wait, setup,
	                                    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
