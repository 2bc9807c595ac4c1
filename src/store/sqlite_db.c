/*
 * sqlite_db.c - the SQLite machinery every query file stands on (declared
 * and documented in sqlite-internal.h): error mapping, nested
 * transactions over savepoints, and the prepare/bind/step/read helpers.
 * It calls nothing in the backend's other files; sqlite.c (opening,
 * migrations, the ops table) and the query files (sqlite_tenancy.c,
 * sqlite_work.c, sqlite_docs.c, sqlite_audit.c) call it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cnlab/errors.h"
#include "store/sqlite-internal.h"

int cnl_sq_err(struct cnl_sq_store *q, int rc)
{
	snprintf(q->base.errmsg, sizeof(q->base.errmsg), "%s",
	         sqlite3_errmsg(q->db));
	/* A full disk or quota (SQLITE_FULL, whatever the extended code)
	 * is its own error: the API answers it 507 naming the file. */
	if ((rc & 0xff) == SQLITE_FULL)
		return -ENOSPC;
	if ((rc & 0xff) == SQLITE_IOERR &&
	    (sqlite3_system_errno(q->db) == ENOSPC ||
	     sqlite3_system_errno(q->db) == EDQUOT))
		return -sqlite3_system_errno(q->db);
	switch (rc) {
	case SQLITE_CONSTRAINT_UNIQUE:
	case SQLITE_CONSTRAINT_PRIMARYKEY:
		return -CNL_EDUP;
	case SQLITE_CONSTRAINT_FOREIGNKEY:
		return -CNL_ENOTFOUND;
	case SQLITE_CONSTRAINT_CHECK:
		return -CNL_EFIELD;
	case SQLITE_NOMEM:
		return -ENOMEM;
	default:
		return -EIO;
	}
}

/* One statement (the transactions' own: BEGIN, SAVEPOINT, RELEASE,
 * COMMIT) runs from the cache; several, through sqlite3_exec(). */
int cnl_sq_exec(struct cnl_sq_store *q, const char *sql)
{
	sqlite3_stmt *st = NULL;
	int r, rc;

	if (strchr(sql, ';')) {
		rc = sqlite3_exec(q->db, sql, NULL, NULL, NULL);
		cnl_sq_settle(q);
		return rc == SQLITE_OK ? 0 : cnl_sq_err(q, rc);
	}
	if ((r = cnl_sq_prep(q, sql, &st)) < 0)
		return r;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		;
	r = rc == SQLITE_DONE ? 0 : cnl_sq_err(q, rc);
	cnl_sq_finalize(q, st);
	return r;
}

/*
 * Transactions nest: the outermost is BEGIN IMMEDIATE (BEGIN for @read),
 * the inner ones savepoints, so a method's own transaction becomes part
 * of a caller's cnl_store_tx_begin().  depth drops to 0 wherever SQLite
 * has rolled the whole transaction back by itself (on SQLITE_FULL, for
 * one), as sqlite3_get_autocommit() tells.
 *
 * Batches.  Under group commit a commit only writes its frames to the WAL;
 * the syncer makes them durable.  Each commit still costs its own WAL
 * frames (the same few pages written again: the jobs table's last leaf,
 * its indexes', the audit chain's), their checksums, the wal-index and
 * six fcntl() locks, all under the caller's lock.  So while a sync is
 * under way (the syncer opens the window: cnl_sq_batch_window(),
 * CNL_STORE_WINDOW_OPEN) the outermost transaction of a caller that asks
 * for it (cnl_sq_commit_batch()) is not committed but left open: the
 * batch (@batch).  The transactions that follow join it as savepoints
 * (cnl_sq_begin_batch()), each released when it ends, undone alone when
 * it fails; the batch is committed at once, as one transaction, when the
 * syncer wants it (the window closing): by the next caller to end a
 * transaction in it, or by the syncer (cnl_sq_flush(), under the caller's
 * lock).  Nobody waits on it longer than a sync they would have waited
 * for anyway.
 *
 * What keeps that true:
 *  1. Every commit count a waiter takes covers its work: with a batch
 *     open, cnl_sq_written() counts the batch's commit to come (the
 *     connection can make no other commit before it).
 *  2. Anything else this connection does at depth 0 while a batch is open
 *     (a statement outside a transaction, cnl_sq_begin()) commits the
 *     batch first (batch_commit()): only callers that asked for it join.
 *  3. A batch can be lost whole: its COMMIT fails (a full disk), or a
 *     statement in it makes SQLite roll everything back.  Its commit
 *     count is then consumed with one more after it (no later count
 *     taken equals it: only the batch's own waiters hold it), and put in
 *     the ring of lost counts (cnl_sq_lost()) before @written may reach
 *     it (@committing holds @written back during the COMMIT): a waiter
 *     that sees its count durable asks the ring, and fails with the
 *     loss's error; the other waiters of the sync are not failed.  A
 *     request inside the batch when SQLite rolled it back has every
 *     further statement fail (@aborted) until its transactions end, so
 *     that nothing of it commits on its own.  The hook
 *     (cnl_store_set_batch_hook()) hears of every batch's end, committed
 *     or lost, so that what the caller keeps in memory follows.
 *  4. Readers on other connections see a batch once it is committed, as
 *     any transaction; cnl_sq_seen() counts it then.
 */
static void batch_end(struct cnl_sq_store *q, int r)
{
	if (q->batch_hook)
		q->batch_hook(q->batch_hook_arg, r);
}

/*
 * The open batch is gone (invariant 3): @counted when the commit hook
 * already counted its failed COMMIT.  Its count, and one more that no
 * commit has, are consumed; the count goes in the ring before @written
 * may pass it (the syncer publishes only what @written reached), so a
 * waiter that sees its count durable finds it lost.  A caller whose
 * transactions were inside it (@depth) has them fail until they end.
 */
static void batch_lost(struct cnl_sq_store *q, int err, bool counted)
{
	unsigned i = atomic_fetch_add(&q->lost_next, 1) % CNL_SQ_LOST;
	int64_t seq = counted ? atomic_fetch_add(&q->seen, 1)
	                      : atomic_fetch_add(&q->seen, 2) + 1;

	atomic_store(&q->lost_ring_err[i], err);
	atomic_store(&q->lost_ring[i], seq);
	q->aborted = q->depth;
	q->aborted_err = err;
	q->joined = false;
	q->depth = 0;
	q->committing = false;
	atomic_store(&q->batch, false);
	atomic_store(&q->batch_n, 0);
	cnl_sq_settle(q);
	batch_end(q, err);
}

/* Whether SQLite rolled the open batch back by itself: then it is lost. */
static bool batch_gone(struct cnl_sq_store *q)
{
	if (!atomic_load_explicit(&q->batch, memory_order_relaxed) ||
	    !sqlite3_get_autocommit(q->db))
		return false;
	batch_lost(q, cnl_sq_err(q, sqlite3_extended_errcode(q->db)), false);
	return true;
}

/* Commit the open batch, if any: 0, or the error it was lost to. */
static int batch_commit(struct cnl_sq_store *q)
{
	int64_t seen;
	int r;

	if (batch_gone(q))
		return q->aborted_err;
	if (!atomic_load_explicit(&q->batch, memory_order_relaxed))
		return 0;
	seen = atomic_load(&q->seen);
	if (q->batch_fault[0] && unlink(q->batch_fault) == 0) {
		/* A test build's full disk (sqlite_sync.c, invariant 5), at
		 * the COMMIT, as the commit hook had counted it. */
		atomic_fetch_add(&q->seen, 1);
		sqlite3_exec(q->db, "ROLLBACK", NULL, NULL, NULL);
		q->tx++; /* the audit head kept, if any, is gone */
		snprintf(q->base.errmsg, sizeof(q->base.errmsg),
		         "database or disk is full (CNLAB_TEST_BATCH_FAULT)");
		batch_lost(q, -ENOSPC, true);
		return -ENOSPC;
	}
	/* Off first: the COMMIT's own statement must not commit it (nor
	 * fail as a lost batch's would); and @written must not count it
	 * until it is known to have been written. */
	atomic_store(&q->batch, false);
	atomic_store(&q->batch_n, 0);
	q->committing = true;
	r = cnl_sq_exec(q, "COMMIT"); /* at depth 0: every caller's */
	if (r < 0) {
		if (!sqlite3_get_autocommit(q->db))
			sqlite3_exec(q->db, "ROLLBACK", NULL, NULL, NULL);
		q->tx++; /* the audit head kept, if any, is gone */
		batch_lost(q, r, atomic_load(&q->seen) != seen);
		return r;
	}
	q->committing = false;
	cnl_sq_settle(q);
	batch_end(q, 0);
	return 0;
}

static int begin_kind(struct cnl_sq_store *q, bool read, bool join)
{
	int r;

	batch_gone(q);
	if (q->aborted)
		return q->aborted_err; /* nothing begun: nothing to end */
	if (q->depth > 0 && sqlite3_get_autocommit(q->db))
		q->depth = 0; /* SQLite rolled the transaction back itself */
	if (q->depth == 0 &&
	    atomic_load_explicit(&q->batch, memory_order_relaxed)) {
		if (!join) {
			batch_commit(q); /* invariant 2; a loss is heard of */
		} else {
			q->depth = 1; /* not a statement at depth 0 */
			if ((r = cnl_sq_exec(q, "SAVEPOINT cnl")) < 0) {
				q->depth = 0;
				return r;
			}
			q->joined = true;
			return 1;
		}
	}
	if (q->depth == 0)
		q->tx++; /* a new transaction: the head is read afresh */
	r = cnl_sq_exec(q, q->depth ? "SAVEPOINT cnl"
	                   : read   ? "BEGIN"
	                            : "BEGIN IMMEDIATE");
	if (r == 0)
		q->depth++;
	return r;
}

int cnl_sq_begin(struct cnl_sq_store *q)
{
	return begin_kind(q, false, false);
}

int cnl_sq_begin_read(struct cnl_sq_store *q)
{
	return begin_kind(q, true, false);
}

int cnl_sq_begin_batch(struct cnl_sq_store *q)
{
	return begin_kind(q, false, q->group);
}

void cnl_sq_rollback(struct cnl_sq_store *q)
{
	batch_gone(q);
	if (q->aborted) {
		q->aborted--;
		return;
	}
	if (q->depth == 0)
		return;
	q->depth--;
	q->tx++; /* the audit head kept, if any, may be undone */
	if (sqlite3_get_autocommit(q->db)) {
		q->depth = 0;
	} else if (q->depth || q->joined) {
		sqlite3_exec(q->db, "ROLLBACK TO cnl; RELEASE cnl", NULL, NULL,
		             NULL);
		if (!q->depth)
			q->joined = false;
	} else {
		sqlite3_exec(q->db, "ROLLBACK", NULL, NULL, NULL);
	}
	cnl_sq_settle(q);
}

/* Test builds: whether this outermost commit must fail (the file named by
 * CNLAB_TEST_COMMIT_FAULT existed and is now removed); never in other
 * builds, where the name stays empty.  sqlite_sync.c, invariant 5. */
static bool commit_fault(struct cnl_sq_store *q)
{
	return q->commit_fault[0] && unlink(q->commit_fault) == 0;
}

static int commit_kind(struct cnl_sq_store *q, bool batch)
{
	int r;

	batch_gone(q);
	if (q->aborted) {
		q->aborted--;
		return q->aborted_err;
	}
	if (q->depth == 0)
		return -EINVAL;
	if (q->depth == 1 && commit_fault(q)) {
		/* A test build's full disk (sqlite_sync.c, invariant 5). */
		snprintf(q->base.errmsg, sizeof(q->base.errmsg),
		         "database or disk is full (CNLAB_TEST_COMMIT_FAULT)");
		cnl_sq_rollback(q);
		return -ENOSPC;
	}
	if (q->depth == 1 && q->joined) {
		if ((r = cnl_sq_exec(q, "RELEASE cnl")) < 0) {
			cnl_sq_rollback(q);
			return r;
		}
		q->depth = 0;
		q->joined = false;
		/* A plain commit of a joiner commits the batch with it. */
		if (batch && atomic_load(&q->window) == CNL_STORE_WINDOW_OPEN) {
			atomic_fetch_add(&q->batch_n, 1);
			return 1;
		}
		return batch_commit(q);
	}
	if (q->depth == 1 && batch && q->group &&
	    atomic_load(&q->window) == CNL_STORE_WINDOW_OPEN) {
		q->depth = 0;
		atomic_store(&q->batch_n, 1);
		atomic_store(&q->batch, true);
		return 1;
	}
	r = cnl_sq_exec(q, q->depth > 1 ? "RELEASE cnl" : "COMMIT");
	if (r < 0) {
		cnl_sq_rollback(q);
		return r;
	}
	q->depth--;
	return 0;
}

int cnl_sq_commit(struct cnl_sq_store *q)
{
	return commit_kind(q, false);
}

int cnl_sq_commit_batch(struct cnl_sq_store *q)
{
	return commit_kind(q, true);
}

int cnl_sq_flush(struct cnl_sq_store *q)
{
	return q->depth ? 0 : batch_commit(q);
}

void cnl_sq_batch_window(struct cnl_sq_store *q, int state)
{
	atomic_store(&q->window, state);
}

/* Group commit's count of commits written catches up with the count of
 * those begun (sqlite_sync.c, invariant 4). */
void cnl_sq_settle(struct cnl_sq_store *q)
{
	int64_t seen;

	if (!q->group || q->committing)
		return;
	/* Only the writer's thread stores @written: no race between the
	 * load and the store. */
	seen = atomic_load_explicit(&q->seen, memory_order_seq_cst);
	if (atomic_load_explicit(&q->written, memory_order_relaxed) < seen)
		atomic_store_explicit(&q->written, seen, memory_order_release);
}

int cnl_sq_prep(struct cnl_sq_store *q, const char *sql, sqlite3_stmt **ret)
{
	bool keep = q->ncache < CNL_SQ_CACHE;
	int rc;

	/* Inside a batch that SQLite rolled back by itself: the statement
	 * would commit on its own; it fails instead ("Batches", 3). */
	if (q->depth > 0 &&
	    atomic_load_explicit(&q->batch, memory_order_relaxed) &&
	    sqlite3_get_autocommit(q->db))
		batch_gone(q);
	if (q->aborted)
		return q->aborted_err;
	/* A statement outside any transaction of ours, a batch open: the
	 * batch is committed first ("Batches", invariant 2). */
	if (q->depth == 0 &&
	    atomic_load_explicit(&q->batch, memory_order_relaxed))
		batch_commit(q);

	for (int i = 0; i < q->ncache; i++) {
		struct cnl_sq_cached *c = &q->cache[i];

		if (c->sql == sql && !c->busy &&
		    strcmp(sqlite3_sql(c->st), sql) == 0) {
			c->busy = true;
			*ret = c->st;
			return 0;
		}
	}
	rc = sqlite3_prepare_v3(
	    q->db, sql, -1, keep ? SQLITE_PREPARE_PERSISTENT : 0, ret, NULL);
	if (rc != SQLITE_OK)
		return cnl_sq_err(q, rc);
	if (keep && *ret)
		q->cache[q->ncache++] = (struct cnl_sq_cached){
		    .sql = sql, .st = *ret, .busy = true};
	return 0;
}

void cnl_sq_finalize(struct cnl_sq_store *q, sqlite3_stmt *st)
{
	if (!st)
		return;
	for (int i = 0; i < q->ncache; i++)
		if (q->cache[i].st == st) {
			sqlite3_reset(st);
			sqlite3_clear_bindings(st);
			q->cache[i].busy = false;
			cnl_sq_settle(
			    q); /* after the reset, which may commit */
			return;
		}
	sqlite3_finalize(st);
	cnl_sq_settle(q);
}

void cnl_sq_cache_clear(struct cnl_sq_store *q)
{
	for (int i = 0; i < q->ncache; i++)
		sqlite3_finalize(q->cache[i].st);
	q->ncache = 0;
}

int cnl_sq_bind_text(struct cnl_sq_store *q, sqlite3_stmt *st, int i,
                     const char *v)
{
	int rc = sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);

	return rc == SQLITE_OK ? 0 : cnl_sq_err(q, rc);
}

int cnl_sq_bind_int(struct cnl_sq_store *q, sqlite3_stmt *st, int i, int64_t v)
{
	int rc = sqlite3_bind_int64(st, i, v);

	return rc == SQLITE_OK ? 0 : cnl_sq_err(q, rc);
}

int cnl_sq_step_done(struct cnl_sq_store *q, sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	return rc == SQLITE_DONE ? 0 : cnl_sq_err(q, rc);
}

void cnl_sq_col_text(sqlite3_stmt *st, int i, char *dst, size_t size)
{
	const unsigned char *t = sqlite3_column_text(st, i);
	size_t n = t ? (size_t)sqlite3_column_bytes(st, i) : 0;

	if (n >= size)
		n = size - 1;
	if (n)
		memcpy(dst, t, n);
	dst[n] = '\0';
}

int cnl_sq_get_one(struct cnl_sq_store *q, const char *sql, const char *k1,
                   const char *k2, void (*read)(sqlite3_stmt *, void *),
                   void *ret)
{
	sqlite3_stmt *st = NULL;
	int r, rc;

	if ((r = cnl_sq_prep(q, sql, &st)) < 0)
		return r;
	if ((r = cnl_sq_bind_text(q, st, 1, k1)) < 0)
		goto out;
	if (k2 && (r = cnl_sq_bind_text(q, st, 2, k2)) < 0)
		goto out;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		read(st, ret);
	else
		r = rc == SQLITE_DONE ? -CNL_ENOTFOUND : cnl_sq_err(q, rc);
out:
	cnl_sq_finalize(q, st);
	return r;
}

int cnl_sq_read_rows(struct cnl_sq_store *q, sqlite3_stmt *st, int limit,
                     void (*read)(sqlite3_stmt *, void *), void *out,
                     size_t size, int *ret_n)
{
	int rc, n = 0;

	while ((rc = sqlite3_step(st)) == SQLITE_ROW && n < limit)
		read(st, (char *)out + (size_t)n++ * size);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return cnl_sq_err(q, rc);
	*ret_n = n;
	return 0;
}

int cnl_sq_list_page(struct cnl_sq_store *q, const char *sql,
                     const char *filter, const char *after, int limit,
                     void (*read)(sqlite3_stmt *, void *), void *out,
                     size_t size, int *ret_n)
{
	sqlite3_stmt *st = NULL;
	int r;

	if ((r = cnl_sq_prep(q, sql, &st)) < 0)
		return r;
	if (filter && (r = cnl_sq_bind_text(q, st, 1, filter)) < 0)
		goto out;
	if ((r = cnl_sq_bind_text(q, st, 2, after ? after : "")) < 0)
		goto out;
	if ((r = cnl_sq_bind_int(q, st, 3, limit)) < 0)
		goto out;
	r = cnl_sq_read_rows(q, st, limit, read, out, size, ret_n);
out:
	cnl_sq_finalize(q, st);
	return r;
}

/* cnl_sq_run(), and with @must_change -CNL_ENOTFOUND when no row changed. */
static int run_bound(struct cnl_sq_store *q, const char *sql,
                     const char *const *texts, const int64_t *ints, int nints,
                     bool must_change)
{
	sqlite3_stmt *st = NULL;
	int r, i = 0;

	if ((r = cnl_sq_prep(q, sql, &st)) < 0)
		return r;
	for (; texts[i]; i++)
		if ((r = cnl_sq_bind_text(q, st, i + 1, texts[i])) < 0)
			goto out;
	for (int k = 0; k < nints; k++)
		if ((r = cnl_sq_bind_int(q, st, i + k + 1, ints[k])) < 0)
			goto out;
	if ((r = cnl_sq_step_done(q, st)) < 0)
		goto out;
	if (must_change && sqlite3_changes(q->db) == 0)
		r = -CNL_ENOTFOUND;
out:
	cnl_sq_finalize(q, st);
	return r;
}

int cnl_sq_run(struct cnl_sq_store *q, const char *sql,
               const char *const *texts, const int64_t *ints, int nints)
{
	return run_bound(q, sql, texts, ints, nints, false);
}

int cnl_sq_update_rows(struct cnl_sq_store *q, const char *sql,
                       const char *const *texts, const int64_t *ints, int nints)
{
	return run_bound(q, sql, texts, ints, nints, true);
}

/* The highest applied migration, 0 for a new file, or an error. */
