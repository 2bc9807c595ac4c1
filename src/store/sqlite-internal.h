/*
 * sqlite-internal.h - what the files of the SQLite backend share: the
 * backend's handle, the generic statement helpers, and the per-resource
 * methods that the ops table in sqlite.c points to.
 *
 * The backend is seven files around this header, in layers: a file calls
 * only the ones listed before it, so there is no cycle between them.
 *
 *   sqlite_db.c       error mapping, nested transactions, the statement
 *                     helpers below
 *   sqlite_tenancy.c  projects, users and memberships
 *   sqlite_work.c     jobs and servers, their run records, and the
 *                     idempotency keys of their creates
 *   sqlite_docs.c     JSON documents
 *   sqlite_audit.c    the hash-chained audit log
 *   sqlite_sync.c     group commit: the WAL hook that counts commits, and
 *                     the syncer's fdatasync of the WAL and checkpoints
 *   sqlite_walbuf.c   the writer's VFS: a commit's WAL frames in one write
 *   sqlite.c          opening (WAL, synchronous=FULL, foreign keys), the
 *                     schema and its migrations, and the ops table that
 *                     points at the query files' methods
 *
 * The per-resource files hold their SQL, their row readers (each table's
 * *_COLS list lives beside its reader) and what is particular to their
 * resources.  They prepare and bind statements, map SQLite's errors and
 * open transactions through the helpers here, so the numbered invariants at
 * the top of sqlite.c (static SQL with bound parameters, errors mapped in
 * one place, transactions that nest) hold for every query whatever file
 * it is in.
 *
 * Naming (curl's middle level): every name this header declares is
 * cnl_sq() or starts cnl_sq_, and is shared by the backend's files only;
 * nothing outside src/store/sqlite*.c includes it.  A method of the ops table
 * is named cnl_sq_ followed by the name of its struct cnl_store_ops member
 * (cnl_sq_job_get for .job_get); a helper is cnl_sq_ followed by what it
 * does (cnl_sq_prep, cnl_sq_get_one).  What one file alone uses is static
 * and unprefixed.
 *
 * Every int-returning helper returns 0 or a negative error, as store.h
 * describes; SQLite's result codes become those errors in cnl_sq_err()
 * only.
 */
#ifndef CNL_STORE_SQLITE_INTERNAL_H
#define CNL_STORE_SQLITE_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <sqlite3.h>

#include "store/store.h"

#define CNL_SQ_CACHE 64
#define CNL_SQ_LOST  128

/* A prepared statement kept for the next use of its SQL. */
struct cnl_sq_cached {
	const char *sql; /* the static text it was prepared from */
	sqlite3_stmt *st;
	bool busy; /* handed out, not yet given back */
};

/* The SQLite backend's handle. */
struct cnl_sq_store {
	struct cnl_store base; /* first, so the wrappers' handle is ours */
	sqlite3 *db;
	int depth; /* open transactions: 1 + savepoints */
	struct cnl_sq_cached cache[CNL_SQ_CACHE];
	int ncache;
	/* Group commit (sqlite_sync.c).  The writer's WAL hook bumps
	 * @written after each commit's frames are in the WAL and notes the
	 * WAL's length; the syncer thread reads both and owns the rest. */
	bool group;              /* synchronous=NORMAL; synced by the syncer */
	_Atomic int64_t written; /* commits written to the WAL */
	/* Commits begun (the commit hook runs before a commit becomes
	 * visible); written catches up after each statement
	 * (cnl_sq_settle()). */
	_Atomic int64_t seen;
	_Atomic int wal_frames; /* frames in the WAL at the last commit */
	sqlite3 *ckpt;          /* the syncer's connection: checkpoints */
	int wal_fd;             /* the WAL file, -1 while not open */
	dev_t wal_dev;          /* ... and which file it is, to notice */
	ino_t wal_ino;          /* one made anew under its name */
	char wal_path[520];     /* path + "-wal" */
	char fault[256];        /* test builds: syncs fail while it exists */
	char commit_fault[256]; /* test builds: one commit fails, see below */
	char batch_fault[256];  /* test builds: one batch is lost (ditto) */
	/* Batches (sqlite_db.c, "Batches"): under group commit, the
	 * transactions of requests that end while a sync is under way are
	 * left open together, as one transaction, and committed at once.
	 * The writer's thread owns all but the atomics. */
	_Atomic bool batch; /* an outer transaction holds work left open */
	_Atomic unsigned batch_n; /* the transactions left in it: a hint
	                           * for the syncer (cnl_store_batch_size()) */
	bool joined; /* the transaction at depth 1 is a savepoint in
	              * it (cnl_sq_begin_batch()) */
	/* CNL_STORE_WINDOW_*: whether transactions that end are left in a
	 * batch (the syncer is busy), committed at once, or commit the
	 * open batch (the syncer wants it); cnl_store_batch_window(). */
	_Atomic int window;
	/* Batches lost whole (their commit failed, or SQLite rolled them
	 * back by itself): the commit counts of the last CNL_SQ_LOST, and
	 * their errors (cnl_store_lost()), each stored before any count
	 * past it is published as written. */
	_Atomic int64_t lost_ring[CNL_SQ_LOST];
	_Atomic int lost_ring_err[CNL_SQ_LOST];
	_Atomic unsigned lost_next; /* batches lost so far */
	bool committing; /* the batch's COMMIT runs: @written waits */
	/* The audit chain's head as this connection last appended it, inside
	 * the write transaction of @head_tx (sqlite_audit.c): the next
	 * append in the same transaction links to it without reading the
	 * table.  @tx moves with every outermost BEGIN and every rollback,
	 * whole or to a savepoint, so a head that may be undone or that
	 * another connection may have moved is never used. */
	uint64_t tx;
	uint64_t head_tx; /* 0: none kept */
	int64_t head_seq;
	char head_hash[CNL_STORE_SHA256_HEX];
	/* A caller's transactions that were inside a batch SQLite rolled
	 * back by itself: how many of them have yet to end (each begin,
	 * statement and end fails with @aborted_err meanwhile, so that
	 * nothing of the request commits on its own). */
	int aborted;
	int aborted_err;
	/* Called when a batch ends: 0 committed, or the error it was lost
	 * to (cnl_store_set_batch_hook()). */
	void (*batch_hook)(void *arg, int r);
	void *batch_hook_arg;
};

/* The backend's handle behind a wrapper's one. */
static inline struct cnl_sq_store *cnl_sq(struct cnl_store *s)
{
	return (struct cnl_sq_store *)s;
}

/* ---- errors and statements (sqlite_db.c) ------------------------------- */

/*
 * cnl_sq_err - keep sqlite3_errmsg() in the handle's errmsg and map @rc (an
 * extended result code): a unique or primary key violation is -CNL_EDUP, a
 * foreign key one -CNL_ENOTFOUND, a CHECK one -CNL_EFIELD, SQLITE_NOMEM
 * -ENOMEM, anything else -EIO.
 */
int cnl_sq_err(struct cnl_sq_store *q, int rc);

/* cnl_sq_exec - run @sql, which returns no rows. */
int cnl_sq_exec(struct cnl_sq_store *q, const char *sql);

/*
 * cnl_sq_prep - prepare @sql into *@ret; release it with cnl_sq_finalize(),
 * which accepts NULL.  Statements are kept, prepared, in the handle's
 * cache (CNL_SQ_CACHE of them, found by the SQL text's address, which is
 * a static string by invariant 2, and checked by its text): a statement
 * run again is not parsed again.  One in use is not handed out twice; a
 * nested use of the same SQL gets a statement of its own.
 */
int cnl_sq_prep(struct cnl_sq_store *q, const char *sql, sqlite3_stmt **ret);

/* cnl_sq_finalize - give back a statement of cnl_sq_prep(): a cached one
 * is reset and its bindings cleared (it holds no lock nor pointer after),
 * any other finalized.  NULL is allowed. */
void cnl_sq_finalize(struct cnl_sq_store *q, sqlite3_stmt *st);

/* cnl_sq_cache_clear - finalize every cached statement (before closing). */
void cnl_sq_cache_clear(struct cnl_sq_store *q);

/* cnl_sq_bind_text - bind text that outlives the statement's use
 * (SQLITE_STATIC) as parameter @i. */
int cnl_sq_bind_text(struct cnl_sq_store *q, sqlite3_stmt *st, int i,
                     const char *v);

/* cnl_sq_bind_int - bind @v as parameter @i. */
int cnl_sq_bind_int(struct cnl_sq_store *q, sqlite3_stmt *st, int i, int64_t v);

/* cnl_sq_step_done - run a statement that returns no rows. */
int cnl_sq_step_done(struct cnl_sq_store *q, sqlite3_stmt *st);

/* cnl_sq_col_text - copy text column @i into the fixed field @dst of @size
 * bytes, truncating what does not fit. */
void cnl_sq_col_text(sqlite3_stmt *st, int i, char *dst, size_t size);

/*
 * cnl_sq_get_one - run @sql with the text @k1 (and @k2 unless NULL) bound
 * as ?1 (?2) and read its one row into @ret with @read: 0, -CNL_ENOTFOUND
 * or an error.
 */
int cnl_sq_get_one(struct cnl_sq_store *q, const char *sql, const char *k1,
                   const char *k2, void (*read)(sqlite3_stmt *, void *),
                   void *ret);

/*
 * cnl_sq_read_rows - step the bound statement @st for up to @limit rows,
 * reading each into @out (@size bytes apart) with @read, and set *@ret_n
 * to their number.  The caller finalizes @st.
 */
int cnl_sq_read_rows(struct cnl_sq_store *q, sqlite3_stmt *st, int limit,
                     void (*read)(sqlite3_stmt *, void *), void *out,
                     size_t size, int *ret_n);

/*
 * cnl_sq_list_page - one page: @sql takes ?1 the filter (bound only when
 * @filter is not NULL), ?2 the cursor ("" when @after is NULL: every text
 * key sorts after it) and ?3 the limit.  Rows go to @out, @size bytes
 * apart, read with @read; *@ret_n is set to their number.
 */
int cnl_sq_list_page(struct cnl_sq_store *q, const char *sql,
                     const char *filter, const char *after, int limit,
                     void (*read)(sqlite3_stmt *, void *), void *out,
                     size_t size, int *ret_n);

/*
 * cnl_sq_run - run @sql, which returns no rows and binds ?1..?n from
 * @texts (NULL ends) and then the @nints numbers of @ints: the texts come
 * first, so a statement names its columns in that order.
 */
int cnl_sq_run(struct cnl_sq_store *q, const char *sql,
               const char *const *texts, const int64_t *ints, int nints);

/*
 * cnl_sq_update_rows - cnl_sq_run() for a statement that changes rows
 * named by its parameters: 0, -CNL_ENOTFOUND when no row changed, or an
 * error.
 */
int cnl_sq_update_rows(struct cnl_sq_store *q, const char *sql,
                       const char *const *texts, const int64_t *ints,
                       int nints);

/* ---- transactions (sqlite_db.c) ---------------------------------------- */

/*
 * Transactions nest: the outermost is BEGIN IMMEDIATE (cnl_sq_begin(): the
 * write lock up front) or BEGIN (cnl_sq_begin_read(): a snapshot for
 * reading), the inner ones savepoints, so a method's own transaction
 * becomes part of a caller's cnl_store_tx_begin().  cnl_sq_commit() ends
 * the innermost one (undoing it when the commit fails);
 * cnl_sq_rollback() undoes it, keeping the first error's message.
 */
int cnl_sq_begin(struct cnl_sq_store *q);
int cnl_sq_begin_read(struct cnl_sq_store *q);
int cnl_sq_commit(struct cnl_sq_store *q);
void cnl_sq_rollback(struct cnl_sq_store *q);

/*
 * Batches (group commit; store.h, cnl_store_tx_begin_batch()).
 * cnl_sq_begin_batch - a transaction inside the open batch (1), or, with
 * none open, an outermost one as cnl_sq_begin() (0).
 * cnl_sq_commit_batch - end the outermost transaction: 1 when its work is
 * left in the open batch (a sync is under way), 0 when it is committed
 * (with the batch it was in), or an error: its own work is undone, and
 * the batch's too when the batch was lost.
 * cnl_sq_flush - commit the open batch: 0 (also with none open), or the
 * error it was lost to; a loss found earlier and not yet reported is
 * reported here once.
 */
int cnl_sq_begin_batch(struct cnl_sq_store *q);
int cnl_sq_commit_batch(struct cnl_sq_store *q);
int cnl_sq_flush(struct cnl_sq_store *q);
void cnl_sq_batch_window(struct cnl_sq_store *q, int state);

/* ---- the ops table's methods, as struct cnl_store_ops documents -------- */

/* sqlite_tenancy.c */
int cnl_sq_project_create(struct cnl_store *s,
                          const struct cnl_store_project *in);
int cnl_sq_project_get(struct cnl_store *s, const char *id,
                       struct cnl_store_project *ret);
int cnl_sq_project_get_by_name(struct cnl_store *s, const char *name,
                               struct cnl_store_project *ret);
int cnl_sq_project_list(struct cnl_store *s, const char *after_id, int limit,
                        struct cnl_store_project *out, int *ret_n);
int cnl_sq_project_set_flags(struct cnl_store *s, const char *id,
                             bool on_prem_only);
int cnl_sq_project_delete(struct cnl_store *s, const char *id);
int cnl_sq_user_create(struct cnl_store *s, const struct cnl_store_user *in);
int cnl_sq_user_get(struct cnl_store *s, const char *id,
                    struct cnl_store_user *ret);
int cnl_sq_user_get_by_name(struct cnl_store *s, const char *name,
                            struct cnl_store_user *ret);
int cnl_sq_user_list(struct cnl_store *s, const char *after_id, int limit,
                     struct cnl_store_user *out, int *ret_n);
int cnl_sq_user_set_password(struct cnl_store *s, const char *id,
                             const char *password_hash);
int cnl_sq_membership_set(struct cnl_store *s,
                          const struct cnl_store_membership *in);
int cnl_sq_membership_get_role(struct cnl_store *s, const char *user_id,
                               const char *project_id, char *ret_role,
                               size_t len);
int cnl_sq_membership_list(struct cnl_store *s, const char *user_id,
                           const char *after_project_id, int limit,
                           struct cnl_store_membership *out, int *ret_n);
int cnl_sq_membership_list_project(struct cnl_store *s, const char *project_id,
                                   const char *after_user_id, int limit,
                                   struct cnl_store_membership *out,
                                   int *ret_n);
int cnl_sq_membership_delete(struct cnl_store *s, const char *user_id,
                             const char *project_id);

/* sqlite_work.c */
int cnl_sq_job_create(struct cnl_store *s, const struct cnl_store_job *in,
                      const char *idem_key, struct cnl_store_job *ret);
int cnl_sq_job_get(struct cnl_store *s, const char *id,
                   struct cnl_store_job *ret);
int cnl_sq_job_list(struct cnl_store *s, const char *project_id,
                    const char *after_id, int limit, struct cnl_store_job *out,
                    int *ret_n);
int cnl_sq_job_list_state(struct cnl_store *s, const char *state,
                          const char *after_id, int limit,
                          struct cnl_store_job *out, int *ret_n);
int cnl_sq_job_count_state(struct cnl_store *s, const char *state,
                           int64_t *ret_n);
int cnl_sq_job_each_state(struct cnl_store *s, const char *state,
                          int (*fn)(void *ud, const struct cnl_store_job *j),
                          void *ud);
int cnl_sq_job_update_state(struct cnl_store *s, const char *id,
                            const char *state, int exit_code,
                            int64_t updated_ms);
int cnl_sq_job_update_run(struct cnl_store *s, const char *id,
                          const char *state, int exit_code, int64_t updated_ms,
                          const char *run);
int cnl_sq_server_create(struct cnl_store *s, const struct cnl_store_server *in,
                         const char *idem_key, struct cnl_store_server *ret);
int cnl_sq_server_get(struct cnl_store *s, const char *id,
                      struct cnl_store_server *ret);
int cnl_sq_server_list(struct cnl_store *s, const char *project_id,
                       const char *after_id, int limit,
                       struct cnl_store_server *out, int *ret_n);
int cnl_sq_server_update(struct cnl_store *s, const char *id, const char *state,
                         const char *url, const char *run);
int cnl_sq_server_delete(struct cnl_store *s, const char *id);

/* sqlite_docs.c */
int cnl_sq_doc_put(struct cnl_store *s, const struct cnl_store_doc *in,
                   bool create);
int cnl_sq_doc_get(struct cnl_store *s, const char *kind, const char *id,
                   struct cnl_store_doc *ret);
int cnl_sq_doc_get_by_name(struct cnl_store *s, const char *kind,
                           const char *parent, const char *name,
                           struct cnl_store_doc *ret);
int cnl_sq_doc_list(struct cnl_store *s, const char *kind, const char *parent,
                    const char *after_id, int limit, struct cnl_store_doc *out,
                    int *ret_n);
int cnl_sq_doc_delete(struct cnl_store *s, const char *kind, const char *id);

/* sqlite_audit.c */
int cnl_sq_audit_append(struct cnl_store *s, const struct cnl_store_audit *in,
                        struct cnl_store_audit *ret);
int cnl_sq_audit_list(struct cnl_store *s, int64_t after_seq, int limit,
                      struct cnl_store_audit *out, int *ret_n);
int cnl_sq_audit_list_target(struct cnl_store *s, const char *target,
                             const char *action_prefix, int64_t after_seq,
                             int limit, struct cnl_store_audit *out,
                             int *ret_n);
int cnl_sq_audit_verify(struct cnl_store *s, int64_t *ret_bad_seq);
int cnl_sq_audit_latest(struct cnl_store *s, const char *action,
                        int (*fn)(void *ud, const char *target,
                                  const char *result),
                        void *ud);

/* sqlite_walbuf.c: the name of the VFS that writes a commit's WAL frames
 * with one system call (registered on first use), or NULL (default). */
const char *cnl_sq_walbuf_vfs(void);

/* sqlite_sync.c; cnl_sq_sync_close() releases what group commit opened. */
int cnl_sq_group_commit(struct cnl_store *s);
int64_t cnl_sq_written(struct cnl_store *s);
int cnl_sq_lost(struct cnl_store *s, int64_t seq);
int64_t cnl_sq_seen(struct cnl_store *s);
/* cnl_sq_settle - after a statement of the writer's has run: every commit
 * begun is now written, or failed, or wrote nothing (sqlite_db.c; see
 * sqlite_sync.c, invariant 4). */
void cnl_sq_settle(struct cnl_sq_store *q);
int cnl_sq_sync(struct cnl_store *s, int64_t *ret_seq);
void cnl_sq_sync_close(struct cnl_sq_store *q);

/* sqlite_docs.c: live statuses (store.h) */
int cnl_sq_live_put(struct cnl_store *s, bool reset, const char *changes);
int cnl_sq_live_get(struct cnl_store *s, const char *id, char **ret);

#endif /* CNL_STORE_SQLITE_INTERNAL_H */
