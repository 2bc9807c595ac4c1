/*
 * postgres-internal.h - what the files of the PostgreSQL backend share: the
 * backend's handle, the statement helpers, and the per-resource methods
 * that the ops table in postgres.c points to.
 *
 * The backend mirrors the SQLite one file for file, in the same layers (a
 * file calls only the ones listed before it):
 *
 *   postgres_db.c       the connection (and reconnecting after a lost
 *                       one), error mapping by SQLSTATE, nested
 *                       transactions, the statement helpers below
 *   postgres_tenancy.c  projects, users and memberships
 *   postgres_work.c     jobs and servers, their run records, and the
 *                       idempotency keys of their creates
 *   postgres_docs.c     JSON documents
 *   postgres_audit.c    the hash-chained audit log
 *   postgres_lease.c    the leader's lease (its fence check, part of
 *                       beginning a transaction, is postgres_db.c's)
 *   postgres.c          opening, the schema and its migrations, readers,
 *                       and the ops table
 *
 * Statements.  Every statement is a static SQL text with $n parameters,
 * sent with PQexecParams() in text format: never a named prepared
 * statement, so the backend works through pgbouncer in transaction mode,
 * where consecutive transactions may run on different server connections.
 * Numbers travel as decimal text (cnl_pg_i64()).
 *
 * Naming: every name this header declares is cnl_pg() or starts cnl_pg_,
 * shared by src/store/postgres*.c only.  A method of the ops table is
 * cnl_pg_ followed by its struct cnl_store_ops member's name.
 */
#ifndef CNL_STORE_POSTGRES_INTERNAL_H
#define CNL_STORE_POSTGRES_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "store/store.h"

/* The database server's clock in ms, read once per statement. */
#define CNL_PG_NOW_MS "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

/* The PostgreSQL backend's handle. */
struct cnl_pg_store {
	struct cnl_store base; /* first, so the wrappers' handle is ours */
	PGconn *conn;
	char *url;             /* what it was opened with (password included) */
	int depth;             /* open transactions: 1 + savepoints */
	bool read_only;        /* a reader: every transaction READ ONLY */
	int64_t fence_epoch;   /* > 0: writes check the lease (fence) */
	int64_t fence_hold_ms; /* ... and end if idle this long */
	int listen_pid;        /* the backend that LISTENs for the lease */
	char commit_fault[256]; /* test builds: one commit fails */
};

static inline struct cnl_pg_store *cnl_pg(struct cnl_store *s)
{
	return (struct cnl_pg_store *)s;
}

/* ---- connection, errors and statements (postgres_db.c) ---------------- */

/*
 * cnl_pg_connect - open @url (a postgresql:// URI or a libpq key=value
 * string) with the backend's session settings (UTF-8, UTC, a connect
 * timeout unless the URL sets one) into *@ret.  0, or -ENOTCONN with
 * the server's message in @err.
 */
int cnl_pg_connect(const char *url, bool read_only, PGconn **ret, char *err,
                   size_t errlen);

/*
 * cnl_pg_err - keep the server's message in the handle's errmsg and map
 * @res's SQLSTATE: unique violation -CNL_EDUP, foreign key violation
 * -CNL_ENOTFOUND, check violation and malformed text (JSON, encoding)
 * -CNL_EFIELD, disk full -ENOSPC, out of memory -ENOMEM, a lost
 * connection (no SQLSTATE, or class 08, or the server shutting down)
 * -ENOTCONN, anything else -EIO.  @res may be NULL (out of memory or no
 * connection).
 */
int cnl_pg_err(struct cnl_pg_store *p, const PGresult *res);

/*
 * cnl_pg_exec - run @sql with the @n text parameters @params (NULL
 * elements are SQL NULL).  On success *@ret (may be NULL: the result is
 * then dropped) holds the result, which the caller PQclear()s; on failure
 * nothing is held.  Outside a transaction a connection found dead is
 * re-established before the statement is sent; a reader's statement that
 * failed as its connection died is sent once more on a new one (it
 * changes nothing), a writer's never (postgres_db.c, invariant 2).
 */
int cnl_pg_exec(struct cnl_pg_store *p, const char *sql, int n,
                const char *const *params, PGresult **ret);

/*
 * cnl_pg_write - run a write; with @must_change, -CNL_ENOTFOUND when it
 * changed no row.  Inside a caller's transaction it runs under a
 * savepoint, so that a failure (a duplicate, say) undoes only itself and
 * leaves the transaction usable, as the SQLite backend's does.
 */
int cnl_pg_write(struct cnl_pg_store *p, const char *sql, int n,
                 const char *const *params, bool must_change);

/* A row reader: fill @out from row @row of @res. */
typedef void cnl_pg_read_fn(const PGresult *res, int row, void *out);

/* cnl_pg_get_one - run @sql and read its one row: 0, -CNL_ENOTFOUND. */
int cnl_pg_get_one(struct cnl_pg_store *p, const char *sql, int n,
                   const char *const *params, cnl_pg_read_fn *read, void *ret);

/* cnl_pg_read_rows - run @sql and read up to @limit rows into @out,
 * @size bytes apart; *@ret_n is their number. */
int cnl_pg_read_rows(struct cnl_pg_store *p, const char *sql, int n,
                     const char *const *params, int limit, cnl_pg_read_fn *read,
                     void *out, size_t size, int *ret_n);

/*
 * cnl_pg_page - one page of a listing: @sql takes $1 the filter (only
 * when @filter is not NULL), then the cursor ("" when @after is NULL:
 * every key sorts after it in the "C" collation) and the limit.
 */
int cnl_pg_page(struct cnl_pg_store *p, const char *sql, const char *filter,
                const char *after, int limit, cnl_pg_read_fn *read, void *out,
                size_t size, int *ret_n);

/* cnl_pg_col_text - copy text column @col into the fixed field @dst of
 * @size bytes, truncating what does not fit. */
void cnl_pg_col_text(const PGresult *res, int row, int col, char *dst,
                     size_t size);

/* cnl_pg_col_i64 - an integer column (NULL reads 0). */
int64_t cnl_pg_col_i64(const PGresult *res, int row, int col);

/* A number as a parameter's text. */
struct cnl_pg_num {
	char s[24];
};
const char *cnl_pg_i64(struct cnl_pg_num *buf, int64_t v);

/*
 * Transactions nest as the SQLite backend's: the outermost is BEGIN
 * (READ COMMITTED; REPEATABLE READ READ ONLY for cnl_pg_begin_read()),
 * the inner ones savepoints.  cnl_pg_commit() ends the innermost (undoing
 * it when the commit fails); cnl_pg_rollback() undoes it.  A lost
 * connection ends every level at once.
 */
int cnl_pg_begin(struct cnl_pg_store *p);
int cnl_pg_begin_read(struct cnl_pg_store *p);

/* cnl_pg_fence_check - inside a write transaction of a fenced handle:
 * 0 when the lease is still its epoch's (now held FOR KEY SHARE to the
 * transaction's end), -CNL_EFENCED otherwise (postgres_db.c). */
int cnl_pg_fence_check(struct cnl_pg_store *p);
int cnl_pg_commit(struct cnl_pg_store *p);
void cnl_pg_rollback(struct cnl_pg_store *p);

/* ---- the ops table's methods, as struct cnl_store_ops documents -------- */

/* postgres_lease.c: live statuses */
int cnl_pg_live_put(struct cnl_store *s, bool reset, const char *changes);
int cnl_pg_live_get(struct cnl_store *s, const char *id, char **ret);

/* postgres_tenancy.c */
int cnl_pg_project_create(struct cnl_store *s,
                          const struct cnl_store_project *in);
int cnl_pg_project_get(struct cnl_store *s, const char *id,
                       struct cnl_store_project *ret);
int cnl_pg_project_get_by_name(struct cnl_store *s, const char *name,
                               struct cnl_store_project *ret);
int cnl_pg_project_list(struct cnl_store *s, const char *after_id, int limit,
                        struct cnl_store_project *out, int *ret_n);
int cnl_pg_project_set_flags(struct cnl_store *s, const char *id,
                             bool on_prem_only);
int cnl_pg_project_delete(struct cnl_store *s, const char *id);
int cnl_pg_user_create(struct cnl_store *s, const struct cnl_store_user *in);
int cnl_pg_user_get(struct cnl_store *s, const char *id,
                    struct cnl_store_user *ret);
int cnl_pg_user_get_by_name(struct cnl_store *s, const char *name,
                            struct cnl_store_user *ret);
int cnl_pg_user_list(struct cnl_store *s, const char *after_id, int limit,
                     struct cnl_store_user *out, int *ret_n);
int cnl_pg_user_set_password(struct cnl_store *s, const char *id,
                             const char *password_hash);
int cnl_pg_membership_set(struct cnl_store *s,
                          const struct cnl_store_membership *in);
int cnl_pg_membership_get_role(struct cnl_store *s, const char *user_id,
                               const char *project_id, char *ret_role,
                               size_t len);
int cnl_pg_membership_list(struct cnl_store *s, const char *user_id,
                           const char *after_project_id, int limit,
                           struct cnl_store_membership *out, int *ret_n);
int cnl_pg_membership_list_project(struct cnl_store *s, const char *project_id,
                                   const char *after_user_id, int limit,
                                   struct cnl_store_membership *out,
                                   int *ret_n);
int cnl_pg_membership_delete(struct cnl_store *s, const char *user_id,
                             const char *project_id);

/* postgres_work.c */
int cnl_pg_job_create(struct cnl_store *s, const struct cnl_store_job *in,
                      const char *idem_key, struct cnl_store_job *ret);
int cnl_pg_job_get(struct cnl_store *s, const char *id,
                   struct cnl_store_job *ret);
int cnl_pg_job_list(struct cnl_store *s, const char *project_id,
                    const char *after_id, int limit, struct cnl_store_job *out,
                    int *ret_n);
int cnl_pg_job_list_state(struct cnl_store *s, const char *state,
                          const char *after_id, int limit,
                          struct cnl_store_job *out, int *ret_n);
int cnl_pg_job_count_state(struct cnl_store *s, const char *state,
                           int64_t *ret_n);
int cnl_pg_job_each_state(struct cnl_store *s, const char *state,
                          int (*fn)(void *ud, const struct cnl_store_job *j),
                          void *ud);
int cnl_pg_job_update_state(struct cnl_store *s, const char *id,
                            const char *state, int exit_code,
                            int64_t updated_ms);
int cnl_pg_job_update_run(struct cnl_store *s, const char *id,
                          const char *state, int exit_code, int64_t updated_ms,
                          const char *run);
int cnl_pg_server_create(struct cnl_store *s, const struct cnl_store_server *in,
                         const char *idem_key, struct cnl_store_server *ret);
int cnl_pg_server_get(struct cnl_store *s, const char *id,
                      struct cnl_store_server *ret);
int cnl_pg_server_list(struct cnl_store *s, const char *project_id,
                       const char *after_id, int limit,
                       struct cnl_store_server *out, int *ret_n);
int cnl_pg_server_update(struct cnl_store *s, const char *id, const char *state,
                         const char *url, const char *run);
int cnl_pg_server_delete(struct cnl_store *s, const char *id);

/* postgres_docs.c */
int cnl_pg_doc_put(struct cnl_store *s, const struct cnl_store_doc *in,
                   bool create);
int cnl_pg_doc_get(struct cnl_store *s, const char *kind, const char *id,
                   struct cnl_store_doc *ret);
int cnl_pg_doc_get_by_name(struct cnl_store *s, const char *kind,
                           const char *parent, const char *name,
                           struct cnl_store_doc *ret);
int cnl_pg_doc_list(struct cnl_store *s, const char *kind, const char *parent,
                    const char *after_id, int limit, struct cnl_store_doc *out,
                    int *ret_n);
int cnl_pg_doc_delete(struct cnl_store *s, const char *kind, const char *id);

/* postgres_audit.c */
int cnl_pg_audit_append(struct cnl_store *s, const struct cnl_store_audit *in,
                        struct cnl_store_audit *ret);
int cnl_pg_audit_list(struct cnl_store *s, int64_t after_seq, int limit,
                      struct cnl_store_audit *out, int *ret_n);
int cnl_pg_audit_list_target(struct cnl_store *s, const char *target,
                             const char *action_prefix, int64_t after_seq,
                             int limit, struct cnl_store_audit *out,
                             int *ret_n);
int cnl_pg_audit_verify(struct cnl_store *s, int64_t *ret_bad_seq);
int cnl_pg_audit_latest(struct cnl_store *s, const char *action,
                        int (*fn)(void *ud, const char *target,
                                  const char *result),
                        void *ud);

/* postgres_lease.c */
int cnl_pg_lease_acquire(struct cnl_store *s, const char *holder,
                         int64_t ttl_ms, struct cnl_store_lease *ret);
int cnl_pg_lease_renew(struct cnl_store *s, const char *holder, int64_t epoch,
                       int64_t ttl_ms, struct cnl_store_lease *ret);
int cnl_pg_lease_get(struct cnl_store *s, struct cnl_store_lease *ret);
int cnl_pg_lease_release(struct cnl_store *s, const char *holder,
                         int64_t epoch);
int cnl_pg_lease_wait(struct cnl_store *s, int64_t ms);
void cnl_pg_fence(struct cnl_store *s, int64_t epoch, int64_t hold_ms);

#endif /* CNL_STORE_POSTGRES_INTERNAL_H */
