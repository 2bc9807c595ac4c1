/*
 * postgres_audit.c - the PostgreSQL backend's audit log: append-only and
 * hash-chained with audit_chain.c's hash, as the SQLite backend's.
 *
 * Appends from several replicas.  The chain needs each record to link to
 * the one before it, so appends must be serial.  A one-row table,
 * audit_head, holds the last seq given and the last hash: an append
 * starts by incrementing its seq (UPDATE ... RETURNING), which locks the
 * row until the append's transaction ends, so a second appender, on this
 * connection's replica or another, waits there and then reads the head
 * the first one left.  A seq is never given twice, even when a
 * transaction that took one rolls back (its increment rolls back too)
 * or when the tail of the log is cut (the head keeps the highest seq, so
 * the next append leaves a gap that verify reports).
 *
 * Verify reads the chain in pages by seq inside one REPEATABLE READ
 * transaction: one snapshot, so the log is checked as of one instant.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cnlab/errors.h"
#include "store/postgres-internal.h"
#include "store/store-internal.h"

#define AUDIT_COLS "seq, ts_ms, actor, action, target, result, prev_hash, hash"

static void read_audit(const PGresult *res, int row, void *out)
{
	struct cnl_store_audit *a = out;

	memset(a, 0, sizeof(*a));
	a->seq = cnl_pg_col_i64(res, row, 0);
	a->ts_ms = cnl_pg_col_i64(res, row, 1);
	cnl_pg_col_text(res, row, 2, a->actor, sizeof(a->actor));
	cnl_pg_col_text(res, row, 3, a->action, sizeof(a->action));
	cnl_pg_col_text(res, row, 4, a->target, sizeof(a->target));
	cnl_pg_col_text(res, row, 5, a->result, sizeof(a->result));
	cnl_pg_col_text(res, row, 6, a->prev_hash, sizeof(a->prev_hash));
	cnl_pg_col_text(res, row, 7, a->hash, sizeof(a->hash));
}

/*
 * Two statements, whatever the caller's transaction: the head's increment
 * (which returns the seq and the hash to link to), then the record's
 * insert and the head's new hash in one statement.  No savepoint of its
 * own inside a caller's transaction: a failure here is the database's
 * (never a constraint of the caller's data), and the caller rolls back.
 */
int cnl_pg_audit_append(struct cnl_store *s, const struct cnl_store_audit *in,
                        struct cnl_store_audit *ret)
{
	struct cnl_pg_store *p = cnl_pg(s);
	struct cnl_store_audit a = *in;
	struct cnl_pg_num n[2];
	PGresult *res = NULL;
	bool own = p->depth == 0;
	int r;

	if (p->read_only)
		return -EROFS;
	if (own && (r = cnl_pg_begin(p)) < 0)
		return r;
	if ((r = cnl_pg_exec(p,
	                     "UPDATE audit_head SET seq = seq + 1"
	                     " RETURNING seq, hash",
	                     0, NULL, &res)) < 0)
		goto fail;
	if (PQntuples(res) != 1) {
		snprintf(p->base.errmsg, sizeof(p->base.errmsg),
		         "audit_head has no row");
		r = -CNL_ECORRUPT;
		goto fail;
	}
	a.seq = cnl_pg_col_i64(res, 0, 0);
	cnl_pg_col_text(res, 0, 1, a.prev_hash, sizeof(a.prev_hash));
	PQclear(res);
	res = NULL;
	if ((r = cnl_store_audit_hash(&a, a.prev_hash, a.hash)) < 0)
		goto fail;
	{
		const char *v[] = {a.actor,
		                   a.action,
		                   a.target,
		                   a.result,
		                   a.prev_hash,
		                   a.hash,
		                   cnl_pg_i64(&n[0], a.ts_ms),
		                   cnl_pg_i64(&n[1], a.seq)};

		if ((r = cnl_pg_exec(p,
		                     "WITH rec AS (INSERT INTO audit (actor,"
		                     " action, target, result, prev_hash, hash,"
		                     " ts_ms, seq) VALUES ($1, $2, $3, $4, $5,"
		                     " $6, $7, $8))"
		                     " UPDATE audit_head SET hash = $6",
		                     8, v, NULL)) < 0)
			goto fail;
	}
	if (own && (r = cnl_pg_commit(p)) < 0)
		return r;
	if (ret)
		*ret = a;
	return 0;
fail:
	PQclear(res);
	if (own)
		cnl_pg_rollback(p);
	return r;
}

int cnl_pg_audit_list(struct cnl_store *s, int64_t after_seq, int limit,
                      struct cnl_store_audit *out, int *ret_n)
{
	struct cnl_pg_num a, b;
	const char *v[] = {cnl_pg_i64(&a, after_seq), cnl_pg_i64(&b, limit)};

	return cnl_pg_read_rows(
	    cnl_pg(s),
	    "SELECT " AUDIT_COLS " FROM audit WHERE seq > $1"
	    " ORDER BY seq LIMIT $2",
	    2, v, limit, read_audit, out, sizeof(*out), ret_n);
}

/* The prefix is compared with left(), not LIKE: "_" and "%" in it are
 * plain characters. */
int cnl_pg_audit_list_target(struct cnl_store *s, const char *target,
                             const char *action_prefix, int64_t after_seq,
                             int limit, struct cnl_store_audit *out, int *ret_n)
{
	struct cnl_pg_num a, b;
	const char *v[] = {cnl_pg_i64(&a, after_seq), target, action_prefix,
	                   cnl_pg_i64(&b, limit)};

	return cnl_pg_read_rows(
	    cnl_pg(s),
	    "SELECT " AUDIT_COLS " FROM audit WHERE seq > $1"
	    " AND target = $2 AND left(action, length($3::text)) = $3::text"
	    " ORDER BY seq LIMIT $4",
	    4, v, limit, read_audit, out, sizeof(*out), ret_n);
}

int cnl_pg_audit_latest(struct cnl_store *s, const char *action,
                        int (*fn)(void *ud, const char *target,
                                  const char *result),
                        void *ud)
{
	PGresult *res;
	int r, rows;

	if ((r = cnl_pg_exec(cnl_pg(s),
	                     "SELECT DISTINCT ON (target) target, result"
	                     " FROM audit WHERE action = $1"
	                     " ORDER BY target, seq DESC",
	                     1, &action, &res)) < 0)
		return r;
	rows = PQntuples(res);
	for (int i = 0; i < rows && r == 0; i++)
		r = fn(ud, PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
	PQclear(res);
	return r;
}

/* A text column that cnl_pg_col_text() would have to truncate cannot be
 * genuine. */
static bool audit_row_fits(const PGresult *res, int row)
{
	for (int i = 2; i <= 5; i++)
		if (PQgetlength(res, row, i) >= CNL_STORE_AUDIT_MAX)
			return false;
	return PQgetlength(res, row, 6) == 64 && PQgetlength(res, row, 7) == 64;
}

int cnl_pg_audit_verify(struct cnl_store *s, int64_t *ret_bad_seq)
{
	enum { CHUNK = 5000 };
	struct cnl_pg_store *p = cnl_pg(s);
	struct cnl_store_audit a;
	char prev[CNL_STORE_SHA256_HEX] = CNL_STORE_ZERO_HASH;
	char hex[CNL_STORE_SHA256_HEX];
	int64_t want = 1, bad = 0;
	int r;

	if ((r = cnl_pg_begin_read(p)) < 0)
		return r;
	while (!bad) {
		struct cnl_pg_num after;
		const char *v[] = {cnl_pg_i64(&after, want - 1)};
		PGresult *res;
		int rows;

		if ((r = cnl_pg_exec(p,
		                     "SELECT " AUDIT_COLS " FROM audit"
		                     " WHERE seq > $1 ORDER BY seq LIMIT 5000",
		                     1, v, &res)) < 0)
			goto out;
		rows = PQntuples(res);
		for (int i = 0; i < rows && !bad; i++) {
			read_audit(res, i, &a);
			if (a.seq != want) {
				bad = want; /* the first missing seq */
				break;
			}
			if (!audit_row_fits(res, i) ||
			    strcmp(a.prev_hash, prev) != 0) {
				bad = a.seq;
				break;
			}
			if ((r = cnl_store_audit_hash(&a, prev, hex)) < 0) {
				PQclear(res);
				goto out;
			}
			if (strcmp(hex, a.hash) != 0) {
				bad = a.seq;
				break;
			}
			memcpy(prev, a.hash, sizeof(prev));
			want++;
		}
		PQclear(res);
		if (rows < CHUNK)
			break;
	}
	if (bad) {
		if (ret_bad_seq)
			*ret_bad_seq = bad;
		r = -CNL_ECORRUPT;
	}
out:
	cnl_pg_rollback(p);
	return r;
}
