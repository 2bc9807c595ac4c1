/*
 * commit.h - group commit in cnlabd: the syncer thread that makes the
 * store's writes durable in batches, and the wait a request makes before
 * its answer is sent.
 *
 * The store, put in group commit (store.h, cnl_store_group_commit()),
 * writes each commit without syncing it and counts it.  A request does its
 * work under the API's lock, then takes the count (cnl_commit_mark(): every
 * commit it made or could have read is at or below it), lets the lock go
 * and waits (cnl_commit_wait()) until the syncer's last successful sync
 * covers the count.  Meanwhile other requests commit under the lock: the
 * syncer's next sync covers all of them at once.  A failed sync fails
 * every wait it covered; they answer 503, and the syncer tries again for
 * whoever waits next, so the daemon recovers when the fault clears.
 */
#ifndef CNL_SERVER_COMMIT_H
#define CNL_SERVER_COMMIT_H

#include <stdint.h>

#include "store/store.h"

struct cnl_commit;

/*
 * cnl_commit_new - put @store in group commit and start its syncer thread.
 * A store that cannot (an in-memory database) is left durable at each
 * commit, *@ret is set to NULL and 0 returned: the calls below then return
 * at once.  A negative errno when the store or the thread failed.
 * @flush(@flush_arg), unless NULL, commits the store's open batch
 * (cnl_store_flush() under the lock that serialises the store's users):
 * the syncer calls it, without any lock of its own, before a sync that
 * finds a batch open (store.h, "Batches").
 */
int cnl_commit_new(struct cnl_store *store, void (*flush)(void *arg),
                   void *flush_arg, struct cnl_commit **ret);

/*
 * cnl_commit_coming - @delta (+1 or -1) requests on their way to the
 * store's open batch: +1 before a request that commits in a batch takes
 * the lock that serialises the store's users, -1 once it has committed
 * (or given up).  While two or more are, the syncer waits a moment for
 * them before it commits and syncs the batch (commit.c, gather()), so
 * that one sync covers them all.  NULL @gc: nothing.
 */
void cnl_commit_coming(struct cnl_commit *gc, int delta);

/* cnl_commit_gather_for - how long at most (µs; 1,000 by default) the
 * syncer waits for requests on their way; tests make it long, to see
 * what it waits for. */
void cnl_commit_gather_for(struct cnl_commit *gc, int64_t us);

/* cnl_commit_mark - the count to wait for; call it holding the lock that
 * serialises the store's users, after the request's last store call. */
int64_t cnl_commit_mark(const struct cnl_commit *gc);

/* cnl_commit_mark_seen - the count to wait for after reads made without
 * that lock, on another connection (api.c's lock-free GETs): it covers
 * every commit such a read could have seen, including one whose commit
 * was under way meanwhile (cnl_store_seen()).  Call it after the last
 * read. */
int64_t cnl_commit_mark_seen(const struct cnl_commit *gc);

/*
 * cnl_commit_wait - block until the commits up to @seq are durable: 0, or
 * -EIO when the sync that covered them failed (the failure is logged once
 * by the syncer), -ENOSPC or -EDQUOT when the store lost them to a full
 * disk (a batch whose commit failed), -ESHUTDOWN when the syncer stopped
 * first.  Without the lock.  NULL @gc: 0 at once.
 */
int cnl_commit_wait(struct cnl_commit *gc, int64_t seq);

/*
 * cnl_commit_when - cnl_commit_wait() without blocking: 1 when the commits
 * up to @seq are durable already (@done is not called), -ESHUTDOWN when
 * the syncer stopped, the error of a lost batch whose count @seq is
 * (cnl_store_lost()); else 0, and @done(@arg, r) is called once, from the
 * syncer's thread and without any of its locks, with what
 * cnl_commit_wait() would have returned.  @done must not block: the
 * syncer's next sync waits for it.  Every wait is answered before
 * cnl_commit_free() returns.
 */
int cnl_commit_when(struct cnl_commit *gc, int64_t seq,
                    void (*done)(void *arg, int r), void *arg);

/* cnl_commit_free - stop the syncer, make what is left durable and free
 * @gc; no wait may be in progress.  NULL is allowed. */
void cnl_commit_free(struct cnl_commit *gc);

#endif /* CNL_SERVER_COMMIT_H */
