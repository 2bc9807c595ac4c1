/*
 * commit.c - group commit in cnlabd (see commit.h): one syncer thread per
 * store, and the waits of the requests.
 *
 * State, under gc->mu:
 *   durable  every commit counted up to here is durable (the count of the
 *            last successful cnl_store_sync());
 *   wanted   the highest count a waiter waits for; the syncer syncs while
 *            wanted > durable, and every SYNC_IDLE_MS while the store has
 *            written more than is durable (the controller's own writes);
 *   failed, fail_gen
 *            the count read before the last failed sync, and how many
 *            syncs have failed: a waiter fails when a sync that began
 *            after it started waiting failed covering its count.
 *
 * Waking: two futex words take turns.  Waiters whose count the sync under
 * way covers (at most the count it read before it began) sleep on
 * done[turn], the others on done[!turn]; the end of a sync bumps and wakes
 * only done[turn] and passes the turn, so that a waiter is woken once,
 * when its count is durable, not at every sync of a long batch (each wake
 * of 64 threads that go back to sleep is 64 context switches).  When
 * nothing is left to sync, or a sync failed, both are woken.  A waiter
 * sleeps without gc->mu and, woken, reads @durable (atomic) without it:
 * with a condition variable every woken waiter took gc->mu again on its
 * way out, and the batch's waiters, woken together, queued on it (each
 * one that found it taken slept and was woken once more).  A waiter reads
 * the word's value under gc->mu, where the syncer bumps it, and sleeps
 * only while it still holds that value (FUTEX_WAIT compares it), so a
 * sync ending between its unlock and its sleep is never missed.
 *
 * A request on one of the HTTP server's event threads waits without a
 * thread (cnl_commit_when()): its count and callback go in a list that
 * the syncer goes through after each sync, under mu, taking out those the
 * sync settled (durable, or failed as a waiter above would have) and
 * calling them after it lets mu go.
 *
 * The syncer reads the count before it syncs, so what it publishes is at
 * most what the sync covered (store.h).  It never holds gc->mu while it
 * syncs: waiters keep arriving and the next sync takes them all.  After a
 * failure it pauses FAIL_PAUSE_MS before trying again, so a failing disk
 * costs a few attempts a second, not a busy loop.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cnlab/errors.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "server/commit.h"

#define SYNC_IDLE_MS  1000
#define FAIL_PAUSE_MS 20
#define GATHER_US     1000
#define GATHER_MIN    2

/* A request that waits without a thread (cnl_commit_when()). */
struct later {
	int64_t seq;
	uint64_t gen; /* fail_gen when it began to wait */
	void (*done)(void *arg, int r);
	void *arg;
	int r; /* the answer, once settled */
};

struct cnl_commit {
	struct cnl_store *store;
	void (*flush)(void *arg); /* commits the store's open batch */
	void *flush_arg;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t kick;     /* the syncer waits here for work */
	atomic_uint done[2];     /* futex words: waiters sleep on them */
	unsigned turn;           /* done[turn]: those the next sync covers */
	bool syncing;            /* a sync is under way, covering ... */
	int64_t covering;        /* ... the commits counted up to here */
	_Atomic int64_t durable; /* written under mu, read also without */
	int64_t wanted;
	int64_t failed;
	uint64_t fail_gen;
	int fail_err; /* the last failed sync's error: its waiters' */
	bool faulty;  /* the last sync failed (logged; recovery is too) */
	bool stop;
	/* gather(): new waiters need not kick the syncer; the last request
	 * on its way to the batch does (cnl_commit_coming()). */
	atomic_bool gathering;
	atomic_int coming; /* requests on their way to the open batch */
	int64_t gather_us; /* gather()'s bound: GATHER_US, or a test's */
	/* The waits of cnl_commit_when(), in no order; each is answered,
	 * outside mu, by the sync that covers its count or fails it. */
	struct later *laters;
	size_t nlaters, caplaters;
	struct later *ready; /* the syncer's: taken out of laters */
	size_t capready;
};

/* Wake every thread asleep on @w, after changing its value (under mu). */
static void wake_all(atomic_uint *w)
{
	atomic_fetch_add_explicit(w, 1, memory_order_release);
	syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/*
 * Answer the waits of cnl_commit_when() that the state now settles: 0 for
 * those whose count is durable, -EIO for those a failed sync covered
 * (as cnl_commit_wait() decides), -ESHUTDOWN for all once stopping.
 * Called with mu and returns with it; the callbacks run without it.
 */
static void answer_laters(struct cnl_commit *gc)
{
	size_t n = 0, keep = 0;

	for (size_t i = 0; i < gc->nlaters; i++) {
		struct later *l = &gc->laters[i];
		bool failed = gc->fail_gen != l->gen && gc->failed >= l->seq;

		if (gc->durable >= l->seq || failed || gc->stop) {
			if (n == gc->capready) {
				gc->capready =
				    gc->capready ? 2 * gc->capready : 64;
				gc->ready = cnl_xrealloc(
				    gc->ready,
				    gc->capready * sizeof(*gc->ready));
			}
			gc->ready[n] = *l;
			/* A lost batch's count is never durable: the
			 * store's ring says so (store.h). */
			gc->ready[n++].r =
			    gc->durable >= l->seq
			        ? cnl_store_lost(gc->store, l->seq)
			    : failed ? gc->fail_err
			             : -ESHUTDOWN;
		} else {
			gc->laters[keep++] = *l;
		}
	}
	gc->nlaters = keep;
	if (!n)
		return;
	pthread_mutex_unlock(&gc->mu);
	for (size_t i = 0; i < n; i++)
		gc->ready[i].done(gc->ready[i].arg, gc->ready[i].r);
	pthread_mutex_lock(&gc->mu);
}

/* One sync, the lock dropped around it; called and returns with it. */
static void sync_once(struct cnl_commit *gc)
{
	int64_t before, seq = 0;
	int r;

	/* The batch that formed while the last sync ran (store.h,
	 * "Batches") is committed first: by the next request to end in it
	 * (the window closing), or by the flush; then the next forms while
	 * this sync runs. */
	if (gc->flush && cnl_store_batch_open(gc->store)) {
		cnl_store_batch_window(gc->store, CNL_STORE_WINDOW_CLOSING);
		pthread_mutex_unlock(&gc->mu);
		gc->flush(gc->flush_arg);
		pthread_mutex_lock(&gc->mu);
	}
	cnl_store_batch_window(gc->store, CNL_STORE_WINDOW_OPEN);
	before = cnl_store_written(gc->store);
	gc->syncing = true;
	gc->covering = before;
	pthread_mutex_unlock(&gc->mu);
	r = cnl_store_sync(gc->store, &seq);
	pthread_mutex_lock(&gc->mu);
	if (r == 0) {
		if (seq > gc->durable)
			gc->durable = seq;
		if (gc->faulty)
			cnl_log(CNL_LOG_INFO, "durable writes recovered",
			        "db=%s durable=%lld", cnl_store_path(gc->store),
			        (long long)gc->durable);
		gc->faulty = false;
	} else {
		/* The store says what its failure covers (a lost batch's
		 * count may be past @before); at least @before. */
		gc->failed = seq > before ? seq : before;
		gc->fail_gen++;
		gc->fail_err = r == -ENOSPC || r == -EDQUOT ? r : -EIO;
		/* The waiters it covered fail; those after it still want. */
		if (gc->wanted <= before)
			gc->wanted = gc->durable;
		if (!gc->faulty)
			cnl_log(CNL_LOG_ERROR, "durable sync failed",
			        "db=%s err=%s durable=%lld: requests answer "
			        "503 until a sync succeeds",
			        cnl_store_path(gc->store), cnl_errname(r),
			        (long long)gc->durable);
		gc->faulty = true;
	}
	gc->syncing = false;
	wake_all(&gc->done[gc->turn]);
	gc->turn ^= 1;
	/* Those of the next turn were counted after this sync read the count,
	 * but it may have covered them anyway; with no sync to come (or a
	 * failure, for them to see) they are woken now. */
	if (r < 0 || gc->wanted <= gc->durable)
		wake_all(&gc->done[gc->turn]);
	answer_laters(gc);
	if (r < 0) {
		struct timespec ts;

		cnl_time_deadline(&ts, CLOCK_MONOTONIC, FAIL_PAUSE_MS);
		while (!gc->stop && pthread_cond_timedwait(&gc->kick, &gc->mu,
		                                           &ts) != ETIMEDOUT)
			;
	}
}

/*
 * Before the batch that formed while the last sync ran is committed and
 * synced: while GATHER_MIN or more requests are on their way to it
 * (cnl_commit_coming(): past authentication, queued on or holding the
 * API's lock), the syncer leaves the window open for them, GATHER_US at
 * most, and commits and syncs once the last has joined.  Each batch's
 * fixed cost (its COMMIT, the fdatasync, waking its waiters) is then
 * shared by every request that was under way, instead of by the one or
 * two that ended while the last sync ran: with 64 clients, half the
 * syncs, and half the syncer's CPU, per submission (docs/benchmarks.md,
 * 2026-12-07).  A lone client never waits: its
 * transaction commits at once (no batch forms), and nothing else is on
 * its way.  Nor does one request on its way hold a batch: two clients
 * would then take turns, each sync waiting for the other's request,
 * where without the wait one's request runs while the other's syncs.
 * New waiters do not kick the syncer meanwhile; stopping does.
 */
static void gather(struct cnl_commit *gc)
{
	struct timespec ts;

	if (!gc->flush || !cnl_store_batch_open(gc->store))
		return;
	/* Set before @coming is read: the request that takes @coming to 0
	 * reads it after (cnl_commit_coming()), so one of the two sees the
	 * other (both sequentially consistent). */
	atomic_store(&gc->gathering, true);
	if (atomic_load(&gc->coming) >= GATHER_MIN) {
		/* Those that end meanwhile join the batch (the window may
		 * have been shut since: the syncer went idle before this
		 * batch's waiters came, or its idle timer brought it here). */
		cnl_store_batch_window(gc->store, CNL_STORE_WINDOW_OPEN);
		cnl_time_deadline_ns(&ts, CLOCK_MONOTONIC,
		                     gc->gather_us * 1000);
		/* Until the last has joined, or another commit took the batch
		 * (a transaction of another kind commits it first). */
		while (!gc->stop && atomic_load(&gc->coming) > 0 &&
		       cnl_store_batch_open(gc->store) &&
		       pthread_cond_timedwait(&gc->kick, &gc->mu, &ts) !=
		           ETIMEDOUT)
			;
	}
	atomic_store(&gc->gathering, false);
}

void cnl_commit_coming(struct cnl_commit *gc, int delta)
{
	if (!gc)
		return;
	if (atomic_fetch_add(&gc->coming, delta) + delta > 0 ||
	    !atomic_load(&gc->gathering))
		return;
	/* The last on its way: the batch waits for nobody now. */
	pthread_mutex_lock(&gc->mu);
	pthread_cond_signal(&gc->kick);
	pthread_mutex_unlock(&gc->mu);
}

static void *syncer(void *arg)
{
	struct cnl_commit *gc = arg;
	struct timespec ts;

	pthread_mutex_lock(&gc->mu);
	while (!gc->stop) {
		if (gc->wanted > gc->durable) {
			gather(gc);
			sync_once(gc);
			continue;
		}
		/* Idle: a transaction that ends now commits at once. */
		cnl_store_batch_window(gc->store, CNL_STORE_WINDOW_SHUT);
		cnl_time_deadline(&ts, CLOCK_MONOTONIC, SYNC_IDLE_MS);
		if (pthread_cond_timedwait(&gc->kick, &gc->mu, &ts) ==
		        ETIMEDOUT &&
		    cnl_store_written(gc->store) > gc->durable) {
			gather(gc);
			sync_once(gc);
		}
	}
	answer_laters(gc); /* stopping: every wait left answers */
	pthread_mutex_unlock(&gc->mu);
	return NULL;
}

int cnl_commit_new(struct cnl_store *store, void (*flush)(void *arg),
                   void *flush_arg, struct cnl_commit **ret)
{
	struct cnl_commit *gc;
	pthread_condattr_t ca;
	int r;

	*ret = NULL;
	r = cnl_store_group_commit(store);
	if (r == -ENOTSUP)
		return 0;
	if (r < 0)
		return r;
	gc = cnl_xcalloc(1, sizeof(*gc));
	gc->store = store;
	gc->flush = flush;
	gc->flush_arg = flush_arg;
	gc->gather_us = GATHER_US;
	pthread_mutex_init(&gc->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&gc->kick, &ca);
	pthread_condattr_destroy(&ca);
	if ((r = pthread_create(&gc->thread, NULL, syncer, gc)) != 0) {
		pthread_cond_destroy(&gc->kick);
		pthread_mutex_destroy(&gc->mu);
		free(gc);
		return -r;
	}
	/* A name, so that a profile or bench/submit_cpu.sh tells it apart. */
	(void)pthread_setname_np(gc->thread, "cnl-commit");
	*ret = gc;
	return 0;
}

void cnl_commit_gather_for(struct cnl_commit *gc, int64_t us)
{
	pthread_mutex_lock(&gc->mu);
	gc->gather_us = us;
	pthread_mutex_unlock(&gc->mu);
}

int64_t cnl_commit_mark(const struct cnl_commit *gc)
{
	return gc ? cnl_store_written(gc->store) : 0;
}

int64_t cnl_commit_mark_seen(const struct cnl_commit *gc)
{
	return gc ? cnl_store_seen(gc->store) : 0;
}

int cnl_commit_wait(struct cnl_commit *gc, int64_t seq)
{
	uint64_t gen;
	int r = 0;

	if (!gc)
		return 0;
	pthread_mutex_lock(&gc->mu);
	gen = gc->fail_gen;
	if (gc->durable < seq && gc->wanted < seq) {
		gc->wanted = seq;
		if (!gc->gathering)
			pthread_cond_signal(&gc->kick);
	}
	while (gc->durable < seq) {
		atomic_uint *w;
		unsigned v;

		if (gc->fail_gen != gen && gc->failed >= seq) {
			r = gc->fail_err;
			break;
		}
		if (gc->stop) {
			r = -ESHUTDOWN;
			break;
		}
		w = &gc->done[gc->syncing && seq > gc->covering ? gc->turn ^ 1
		                                                : gc->turn];
		v = atomic_load_explicit(w, memory_order_relaxed);
		pthread_mutex_unlock(&gc->mu);
		syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
		/* Woken by the sync that covered it: out without the lock
		 * (a lost count is never covered: see above). */
		if (atomic_load(&gc->durable) >= seq)
			return cnl_store_lost(gc->store, seq);
		pthread_mutex_lock(&gc->mu);
	}
	pthread_mutex_unlock(&gc->mu);
	/* A lost batch's count (store.h) is never durable, whatever a sync
	 * covers: asked wherever the wait ends in success. */
	return r == 0 ? cnl_store_lost(gc->store, seq) : r;
}

int cnl_commit_when(struct cnl_commit *gc, int64_t seq,
                    void (*done)(void *arg, int r), void *arg)
{
	int r = 1;

	if (!gc)
		return 1;
	pthread_mutex_lock(&gc->mu);
	if (gc->stop) {
		r = -ESHUTDOWN;
	} else if (gc->durable < seq) {
		if (gc->nlaters == gc->caplaters) {
			gc->caplaters = gc->caplaters ? 2 * gc->caplaters : 64;
			gc->laters = cnl_xrealloc(
			    gc->laters, gc->caplaters * sizeof(*gc->laters));
		}
		gc->laters[gc->nlaters++] = (struct later){
		    .seq = seq, .gen = gc->fail_gen, .done = done, .arg = arg};
		if (gc->wanted < seq) {
			gc->wanted = seq;
			if (!gc->gathering)
				pthread_cond_signal(&gc->kick);
		}
		r = 0;
	}
	pthread_mutex_unlock(&gc->mu);
	/* Durable already: unless it is a lost batch's count, which the
	 * ring had before any sync could seem to cover it (store.h). */
	if (r == 1) {
		int lost = cnl_store_lost(gc->store, seq);

		return lost < 0 ? lost : 1;
	}
	return r;
}

void cnl_commit_free(struct cnl_commit *gc)
{
	if (!gc)
		return;
	pthread_mutex_lock(&gc->mu);
	gc->stop = true;
	pthread_cond_broadcast(&gc->kick);
	wake_all(&gc->done[0]);
	wake_all(&gc->done[1]);
	pthread_mutex_unlock(&gc->mu);
	pthread_join(gc->thread, NULL);
	/* What the controller wrote last becomes durable before the store
	 * is closed (closing checkpoints the WAL, and syncs, anyway). */
	{
		int64_t seq;

		cnl_store_sync(gc->store, &seq);
	}
	pthread_cond_destroy(&gc->kick);
	pthread_mutex_destroy(&gc->mu);
	free(gc->laters);
	free(gc->ready);
	free(gc);
}
