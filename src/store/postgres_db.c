/*
 * postgres_db.c - the libpq machinery every query of the PostgreSQL backend
 * stands on (declared and documented in postgres-internal.h): the
 * connection, error mapping by SQLSTATE, nested transactions over
 * savepoints, and the exec/read helpers.
 *
 * Invariants:
 *  1. Every statement goes through cnl_pg_exec(), one PQexecParams() with
 *     text parameters: no SQL text is built from data, and no named
 *     prepared statement outlives a transaction (pgbouncer's transaction
 *     mode hands each transaction to any server connection).
 *  2. A lost connection is noticed where a statement fails (libpq's
 *     status turns CONNECTION_BAD) and answered -ENOTCONN; the next call
 *     outside a transaction re-establishes it.  A writer's statement is
 *     never sent twice: one that failed as the connection died may or may
 *     not have committed, and only the caller knows whether a retry is
 *     harmless.  A reader's is, once, on a new connection: it changes
 *     nothing.
 *  3. Inside a transaction a write that fails undoes only itself (its own
 *     savepoint): PostgreSQL would otherwise refuse every later statement
 *     of the transaction, where SQLite lets the caller go on or roll back.
 *  4. COMMIT of a transaction that PostgreSQL has aborted answers
 *     "ROLLBACK"; that is an error here, never a success.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cnlab/errors.h"
#include "store/postgres-internal.h"

static void quiet(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

int cnl_pg_connect(const char *url, bool read_only, PGconn **ret, char *err,
                   size_t errlen)
{
	/* Keywords before dbname are defaults the URL may override; the
	 * ones after it are ours whatever the URL says.  tcp_user_timeout:
	 * a server that stops acknowledging (a cut network) fails the call
	 * within 5 s, not the kernel's quarter of an hour, so a leader cut
	 * off notices before its lease runs out; keepalives find a dead
	 * idle connection. */
	const char *const keys[] = {"connect_timeout",
	                            "tcp_user_timeout",
	                            "keepalives",
	                            "keepalives_idle",
	                            "keepalives_interval",
	                            "keepalives_count",
	                            "dbname",
	                            "client_encoding",
	                            "application_name",
	                            NULL};
	const char *const vals[] = {
	    "5",  "5000", "1",
	    "10", "5",    "3",
	    url,  "UTF8", read_only ? "cnlabd-reader" : "cnlabd",
	    NULL};
	PGconn *c = PQconnectdbParams(keys, vals, 1);

	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (PQstatus(c) != CONNECTION_OK) {
		const char *m = PQerrorMessage(c);
		size_t n = strlen(m);

		while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
			n--;
		snprintf(err, errlen, "%.*s", (int)n, m);
		PQfinish(c);
		return -ENOTCONN;
	}
	/* The server's notices ("relation already exists, skipping") are
	 * not errors; libpq would print them on stderr. */
	PQsetNoticeProcessor(c, quiet, NULL);
	*ret = c;
	return 0;
}

/* The server's message without its trailing newline. */
static void keep_message(struct cnl_pg_store *p, const PGresult *res)
{
	const char *m = res ? PQresultErrorMessage(res) : "";
	size_t n;

	if (!m[0])
		m = PQerrorMessage(p->conn);
	if (!m[0])
		m = "no answer from the PostgreSQL server";
	n = strlen(m);
	while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
		n--;
	snprintf(p->base.errmsg, sizeof(p->base.errmsg), "%.*s", (int)n, m);
}

int cnl_pg_err(struct cnl_pg_store *p, const PGresult *res)
{
	const char *code =
	    res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	keep_message(p, res);
	if (PQstatus(p->conn) == CONNECTION_BAD)
		return -ENOTCONN;
	if (!code)
		return res ? -EIO : -ENOMEM;
	if (strcmp(code, "23505") == 0) /* unique_violation */
		return -CNL_EDUP;
	if (strcmp(code, "23503") == 0) /* foreign_key_violation */
		return -CNL_ENOTFOUND;
	if (strcmp(code, "23514") == 0 || /* check_violation */
	    strcmp(code, "22P02") == 0 || /* invalid_text_representation */
	    strcmp(code, "22021") == 0 || /* character_not_in_repertoire */
	    strcmp(code, "22001") == 0)   /* string_data_right_truncation */
		return -CNL_EFIELD;
	if (strcmp(code, "53100") == 0) /* disk_full */
		return -ENOSPC;
	if (strcmp(code, "53200") == 0) /* out_of_memory */
		return -ENOMEM;
	if (strncmp(code, "08", 2) == 0 || /* connection_exception */
	    strcmp(code, "57P01") == 0 ||  /* admin_shutdown */
	    strcmp(code, "57P02") == 0 ||  /* crash_shutdown */
	    strcmp(code, "57P03") == 0)    /* cannot_connect_now */
		return -ENOTCONN;
	return -EIO;
}

/* Outside a transaction, a connection found dead is made again. */
static void revive(struct cnl_pg_store *p)
{
	if (p->depth == 0 && PQstatus(p->conn) != CONNECTION_OK)
		PQreset(p->conn);
}

int cnl_pg_exec(struct cnl_pg_store *p, const char *sql, int n,
                const char *const *params, PGresult **ret)
{
	PGresult *res;
	ExecStatusType st;
	int r;

	if (ret)
		*ret = NULL;
	revive(p);
	res = PQexecParams(p->conn, sql, n, NULL, params, NULL, NULL, 0);
	/* A reader's statement changes nothing: on a connection that died
	 * since its last use (the server restarted, the backend was
	 * killed), it is sent again once on a new one. */
	if (p->read_only && p->depth == 0 &&
	    PQstatus(p->conn) == CONNECTION_BAD) {
		PQclear(res);
		PQreset(p->conn);
		res =
		    PQexecParams(p->conn, sql, n, NULL, params, NULL, NULL, 0);
	}
	st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
		if (ret)
			*ret = res;
		else
			PQclear(res);
		return 0;
	}
	r = cnl_pg_err(p, res);
	PQclear(res);
	if (r == -ENOTCONN)
		p->depth = 0; /* the server ended every level */
	return r;
}

/* A transaction's own statement (no parameters, possibly several). */
static int simple(struct cnl_pg_store *p, const char *sql)
{
	PGresult *res;
	int r = 0;

	revive(p);
	res = PQexec(p->conn, sql);
	if (!res || PQresultStatus(res) != PGRES_COMMAND_OK) {
		r = cnl_pg_err(p, res);
		if (r == -ENOTCONN)
			p->depth = 0;
	} else if (strcmp(PQcmdStatus(res), "ROLLBACK") == 0 &&
	           strcmp(sql, "COMMIT") == 0) {
		/* Invariant 4: the server had aborted the transaction. */
		snprintf(p->base.errmsg, sizeof(p->base.errmsg),
		         "the transaction was aborted by an earlier error");
		r = -EIO;
	}
	PQclear(res);
	return r;
}

/* One write statement; with @guard, under a savepoint of its own. */
static int write_stmt(struct cnl_pg_store *p, const char *sql, int n,
                      const char *const *params, bool must_change, bool guard)
{
	PGresult *res = NULL;
	bool failed;
	int r;

	if (guard && (r = simple(p, "SAVEPOINT cnl_w")) < 0)
		return r;
	r = cnl_pg_exec(p, sql, n, params, &res);
	failed = r < 0; /* the statement, not a count of rows */
	if (r == 0 && must_change && strcmp(PQcmdTuples(res), "0") == 0)
		r = -CNL_ENOTFOUND;
	PQclear(res);
	if (guard && p->depth > 0) {
		if (failed) {
			char keep[sizeof(p->base.errmsg)];

			memcpy(keep, p->base.errmsg, sizeof(keep));
			simple(p, "ROLLBACK TO SAVEPOINT cnl_w;"
			          " RELEASE SAVEPOINT cnl_w");
			memcpy(p->base.errmsg, keep, sizeof(keep));
		} else {
			int r2 = simple(p, "RELEASE SAVEPOINT cnl_w");

			if (r2 < 0)
				r = r2;
		}
	}
	return r;
}

int cnl_pg_write(struct cnl_pg_store *p, const char *sql, int n,
                 const char *const *params, bool must_change)
{
	int r;

	if (p->read_only) {
		snprintf(p->base.errmsg, sizeof(p->base.errmsg),
		         "a reader does not write");
		return -EROFS;
	}
	if (p->depth > 0)
		return write_stmt(p, sql, n, params, must_change, true);
	if (p->fence_epoch <= 0)
		return write_stmt(p, sql, n, params, must_change, false);
	/* One statement, fenced: in a transaction of its own that checks
	 * the lease first (postgres_lease.c, invariant 2). */
	if ((r = cnl_pg_begin(p)) < 0)
		return r;
	if ((r = write_stmt(p, sql, n, params, must_change, false)) < 0) {
		cnl_pg_rollback(p);
		return r;
	}
	return cnl_pg_commit(p);
}

int cnl_pg_get_one(struct cnl_pg_store *p, const char *sql, int n,
                   const char *const *params, cnl_pg_read_fn *read, void *ret)
{
	PGresult *res;
	int r;

	if ((r = cnl_pg_exec(p, sql, n, params, &res)) < 0)
		return r;
	if (PQntuples(res) < 1)
		r = -CNL_ENOTFOUND;
	else
		read(res, 0, ret);
	PQclear(res);
	return r;
}

int cnl_pg_read_rows(struct cnl_pg_store *p, const char *sql, int n,
                     const char *const *params, int limit, cnl_pg_read_fn *read,
                     void *out, size_t size, int *ret_n)
{
	PGresult *res;
	int r, rows;

	if ((r = cnl_pg_exec(p, sql, n, params, &res)) < 0)
		return r;
	rows = PQntuples(res);
	if (rows > limit)
		rows = limit;
	for (int i = 0; i < rows; i++)
		read(res, i, (char *)out + (size_t)i * size);
	PQclear(res);
	*ret_n = rows;
	return 0;
}

int cnl_pg_page(struct cnl_pg_store *p, const char *sql, const char *filter,
                const char *after, int limit, cnl_pg_read_fn *read, void *out,
                size_t size, int *ret_n)
{
	struct cnl_pg_num lim;
	const char *v[3];
	int n = 0;

	if (filter)
		v[n++] = filter;
	v[n++] = after ? after : "";
	v[n++] = cnl_pg_i64(&lim, limit);
	return cnl_pg_read_rows(p, sql, n, v, limit, read, out, size, ret_n);
}

void cnl_pg_col_text(const PGresult *res, int row, int col, char *dst,
                     size_t size)
{
	size_t n = (size_t)PQgetlength(res, row, col);

	if (n >= size)
		n = size - 1;
	if (n)
		memcpy(dst, PQgetvalue(res, row, col), n);
	dst[n] = '\0';
}

int64_t cnl_pg_col_i64(const PGresult *res, int row, int col)
{
	if (PQgetisnull(res, row, col))
		return 0;
	return strtoll(PQgetvalue(res, row, col), NULL, 10);
}

const char *cnl_pg_i64(struct cnl_pg_num *buf, int64_t v)
{
	snprintf(buf->s, sizeof(buf->s), "%" PRId64, v);
	return buf->s;
}

/* The lease check of a fenced write transaction (postgres_lease.c,
 * invariants 2 and 4): part of beginning one, so it lives here. */
int cnl_pg_fence_check(struct cnl_pg_store *p)
{
	struct cnl_pg_num e, h;
	const char *v[] = {cnl_pg_i64(&e, p->fence_epoch),
	                   cnl_pg_i64(&h, p->fence_hold_ms)};
	PGresult *res;
	bool ok;
	int r;

	/* set_config(..., true) is SET LOCAL: this transaction only, so
	 * it holds behind pgbouncer's transaction mode too (invariant 4).
	 * FOR KEY SHARE: a takeover's update waits for it, a renewal's
	 * does not (postgres_lease.c, invariant 2). */
	if ((r = cnl_pg_exec(
	         p,
	         "SELECT epoch = $1::bigint AND expires_ms > " CNL_PG_NOW_MS
	         ", set_config("
	         "'idle_in_transaction_session_timeout', $2, true)"
	         " FROM leases WHERE name = 'leader' FOR KEY SHARE",
	         2, v, &res)) < 0)
		return r;
	ok = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	if (!ok) {
		snprintf(p->base.errmsg, sizeof(p->base.errmsg),
		         "fenced: the leader's lease is no longer epoch %lld's",
		         (long long)p->fence_epoch);
		return -CNL_EFENCED;
	}
	return 0;
}

static int begin_kind(struct cnl_pg_store *p, bool read)
{
	int r;

	if (p->depth > 0 && PQtransactionStatus(p->conn) == PQTRANS_IDLE)
		p->depth = 0; /* the transaction ended under us */
	r = simple(p, p->depth       ? "SAVEPOINT cnl"
	              : read         ? "BEGIN ISOLATION LEVEL"
	                               " REPEATABLE READ READ ONLY"
	              : p->read_only ? "BEGIN READ ONLY"
	                             : "BEGIN");
	if (r < 0)
		return r;
	p->depth++;
	/* A fenced handle's write transaction starts by checking the
	 * lease (postgres_lease.c, invariant 2). */
	if (p->depth == 1 && !read && !p->read_only && p->fence_epoch > 0 &&
	    (r = cnl_pg_fence_check(p)) < 0) {
		cnl_pg_rollback(p);
		return r;
	}
	return 0;
}

int cnl_pg_begin(struct cnl_pg_store *p)
{
	return begin_kind(p, false);
}

int cnl_pg_begin_read(struct cnl_pg_store *p)
{
	return begin_kind(p, true);
}

void cnl_pg_rollback(struct cnl_pg_store *p)
{
	char keep[sizeof(p->base.errmsg)];

	if (p->depth == 0)
		return;
	memcpy(keep, p->base.errmsg, sizeof(keep));
	p->depth--;
	if (PQtransactionStatus(p->conn) == PQTRANS_IDLE ||
	    PQstatus(p->conn) != CONNECTION_OK)
		p->depth = 0;
	else if (p->depth)
		simple(p, "ROLLBACK TO SAVEPOINT cnl; RELEASE SAVEPOINT cnl");
	else
		simple(p, "ROLLBACK");
	memcpy(p->base.errmsg, keep, sizeof(keep));
}

/* Test builds: whether this outermost commit must fail, as the SQLite
 * backend's (CNLAB_TEST_COMMIT_FAULT). */
static bool commit_fault(struct cnl_pg_store *p)
{
	return p->commit_fault[0] && unlink(p->commit_fault) == 0;
}

int cnl_pg_commit(struct cnl_pg_store *p)
{
	int r;

	if (p->depth == 0)
		return -EINVAL;
	if (p->depth == 1 && commit_fault(p)) {
		snprintf(p->base.errmsg, sizeof(p->base.errmsg),
		         "could not extend file: No space left on device "
		         "(CNLAB_TEST_COMMIT_FAULT)");
		cnl_pg_rollback(p);
		return -ENOSPC;
	}
	r = simple(p, p->depth > 1 ? "RELEASE SAVEPOINT cnl" : "COMMIT");
	if (r < 0) {
		if (p->depth > 1)
			cnl_pg_rollback(p);
		else
			p->depth = 0; /* a failed COMMIT ends the transaction */
		return r;
	}
	p->depth--;
	return 0;
}
