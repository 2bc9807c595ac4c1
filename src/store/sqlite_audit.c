/*
 * sqlite_audit.c - the SQLite backend's audit log: append-only and
 * hash-chained (invariant 5 of store.h).
 *
 * The hash and its canonical text are audit_chain.c's, the same for every
 * backend.  seq is an AUTOINCREMENT key, so SQLite never reuses
 * one: if the tail of the log is cut, the next append leaves a gap that
 * verify reports, although the cut itself is invisible until then.
 *
 * An append reads the last hash and the next seq (sqlite_sequence's, as
 * AUTOINCREMENT would give it), then inserts the record with its hash in
 * one statement, under the write lock: in its own BEGIN IMMEDIATE
 * transaction, or in the caller's (which holds the lock already), so two
 * appends can never link to the same predecessor.  A second append in the
 * same write transaction (a submission writes five records, a batch many
 * more) takes both from the first instead (struct cnl_sq_store, head_*):
 * the lock is held throughout, and any rollback or new transaction makes
 * the next append read them again.  Verify reads the whole chain
 * in one read transaction, so it checks the log as of one instant.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cnlab/errors.h"
#include "store/sqlite-internal.h"
#include "store/store-internal.h"

#define AUDIT_COLS "seq, ts_ms, actor, action, target, result, prev_hash, hash"

static void read_audit(sqlite3_stmt *st, void *out)
{
	struct cnl_store_audit *a = out;

	memset(a, 0, sizeof(*a));
	a->seq = sqlite3_column_int64(st, 0);
	a->ts_ms = sqlite3_column_int64(st, 1);
	cnl_sq_col_text(st, 2, a->actor, sizeof(a->actor));
	cnl_sq_col_text(st, 3, a->action, sizeof(a->action));
	cnl_sq_col_text(st, 4, a->target, sizeof(a->target));
	cnl_sq_col_text(st, 5, a->result, sizeof(a->result));
	cnl_sq_col_text(st, 6, a->prev_hash, sizeof(a->prev_hash));
	cnl_sq_col_text(st, 7, a->hash, sizeof(a->hash));
}

int cnl_sq_audit_append(struct cnl_store *s, const struct cnl_store_audit *in,
                        struct cnl_store_audit *ret)
{
	struct cnl_sq_store *q = cnl_sq(s);
	struct cnl_store_audit a = *in;
	const char *t[] = {a.actor,     a.action, a.target, a.result,
	                   a.prev_hash, a.hash,   NULL};
	int64_t nums[2];
	sqlite3_stmt *st = NULL;
	/* Inside a caller's transaction the write lock is held already and
	 * the one INSERT below is atomic by itself: no savepoint. */
	bool own = q->depth == 0 || sqlite3_get_autocommit(q->db);
	int r, rc;

	if (own && (r = cnl_sq_begin(q)) < 0)
		return r;
	/* Appended already in this write transaction (a submission's
	 * records, a batch's): the head is the one kept, no other writer
	 * can have moved it, and no rollback has undone it (q->tx). */
	if (q->head_tx && q->head_tx == q->tx &&
	    !sqlite3_get_autocommit(q->db)) {
		a.seq = q->head_seq + 1;
		snprintf(a.prev_hash, sizeof(a.prev_hash), "%s", q->head_hash);
		goto link;
	}
	/* The chain links to the record with the highest seq, if any; the
	 * new seq is the next AUTOINCREMENT would give (sqlite_sequence
	 * keeps the highest ever used, so a cut tail is never reused). */
	if ((r = cnl_sq_prep(q,
	                     "SELECT (SELECT seq FROM sqlite_sequence"
	                     " WHERE name = 'audit'),"
	                     " (SELECT hash FROM audit ORDER BY seq DESC"
	                     " LIMIT 1)",
	                     &st)) < 0)
		goto fail;
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		r = cnl_sq_err(q, rc);
		goto fail;
	}
	a.seq = sqlite3_column_int64(st, 0) + 1; /* NULL reads 0 */
	if (sqlite3_column_type(st, 1) == SQLITE_NULL)
		snprintf(a.prev_hash, sizeof(a.prev_hash), "%s",
		         CNL_STORE_ZERO_HASH);
	else
		cnl_sq_col_text(st, 1, a.prev_hash, sizeof(a.prev_hash));
	cnl_sq_finalize(q, st);
	st = NULL;
link:
	if ((r = cnl_store_audit_hash(&a, a.prev_hash, a.hash)) < 0)
		goto fail;
	nums[0] = a.ts_ms;
	nums[1] = a.seq;
	if ((r = cnl_sq_run(q,
	                    "INSERT INTO audit (actor, action, target, result,"
	                    " prev_hash, hash, ts_ms, seq)"
	                    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
	                    t, nums, 2)) < 0)
		goto fail;
	q->head_tx = q->tx;
	q->head_seq = a.seq;
	snprintf(q->head_hash, sizeof(q->head_hash), "%s", a.hash);
	if (own && (r = cnl_sq_commit(q)) < 0)
		return r;
	if (ret)
		*ret = a;
	return 0;
fail:
	cnl_sq_finalize(q, st);
	if (own)
		cnl_sq_rollback(q);
	return r;
}

int cnl_sq_audit_list(struct cnl_store *s, int64_t after_seq, int limit,
                      struct cnl_store_audit *out, int *ret_n)
{
	struct cnl_sq_store *q = cnl_sq(s);
	sqlite3_stmt *st = NULL;
	int r;

	if ((r = cnl_sq_prep(q,
	                     "SELECT " AUDIT_COLS " FROM audit WHERE seq > ?1"
	                     " ORDER BY seq LIMIT ?2",
	                     &st)) < 0)
		return r;
	if ((r = cnl_sq_bind_int(q, st, 1, after_seq)) < 0 ||
	    (r = cnl_sq_bind_int(q, st, 2, limit)) < 0)
		goto out;
	r = cnl_sq_read_rows(q, st, limit, read_audit, out, sizeof(*out),
	                     ret_n);
out:
	cnl_sq_finalize(q, st);
	return r;
}

/*
 * One workload's records: the log has no index on target, so this reads
 * it whole (a workload's decisions are asked for one at a time, by
 * people); the prefix is compared with substr(), not LIKE, so "_" and "%"
 * in it are plain characters.
 */
int cnl_sq_audit_list_target(struct cnl_store *s, const char *target,
                             const char *action_prefix, int64_t after_seq,
                             int limit, struct cnl_store_audit *out, int *ret_n)
{
	struct cnl_sq_store *q = cnl_sq(s);
	sqlite3_stmt *st = NULL;
	int r;

	if ((r = cnl_sq_prep(q,
	                     "SELECT " AUDIT_COLS " FROM audit WHERE seq > ?1"
	                     " AND target = ?2"
	                     " AND substr(action, 1, length(?3)) = ?3"
	                     " ORDER BY seq LIMIT ?4",
	                     &st)) < 0)
		return r;
	if ((r = cnl_sq_bind_int(q, st, 1, after_seq)) < 0 ||
	    (r = cnl_sq_bind_text(q, st, 2, target)) < 0 ||
	    (r = cnl_sq_bind_text(q, st, 3, action_prefix)) < 0 ||
	    (r = cnl_sq_bind_int(q, st, 4, limit)) < 0)
		goto out;
	r = cnl_sq_read_rows(q, st, limit, read_audit, out, sizeof(*out),
	                     ret_n);
out:
	cnl_sq_finalize(q, st);
	return r;
}

/*
 * The latest record of an action per target: one pass over the log (it
 * has no index on action or target), grouped by target in a temporary
 * b-tree; MAX(seq) picks each group's row (SQLite's bare columns of an
 * aggregate query come from the row holding the MAX).
 */
int cnl_sq_audit_latest(struct cnl_store *s, const char *action,
                        int (*fn)(void *ud, const char *target,
                                  const char *result),
                        void *ud)
{
	struct cnl_sq_store *q = cnl_sq(s);
	sqlite3_stmt *st = NULL;
	int r, rc;

	if ((r = cnl_sq_prep(q,
	                     "SELECT target, result, MAX(seq) FROM audit"
	                     " WHERE action = ?1 GROUP BY target",
	                     &st)) < 0)
		return r;
	if ((r = cnl_sq_bind_text(q, st, 1, action)) < 0)
		goto out;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *t = (const char *)sqlite3_column_text(st, 0);
		const char *res = (const char *)sqlite3_column_text(st, 1);

		if ((r = fn(ud, t ? t : "", res ? res : "")) < 0)
			goto out;
	}
	r = rc == SQLITE_DONE ? 0 : cnl_sq_err(q, rc);
out:
	cnl_sq_finalize(q, st);
	return r;
}

/* A text column that cnl_sq_col_text() would have to truncate cannot be
 * genuine. */
static bool audit_row_fits(sqlite3_stmt *st)
{
	for (int i = 2; i <= 5; i++)
		if (sqlite3_column_bytes(st, i) >= CNL_STORE_AUDIT_MAX)
			return false;
	return sqlite3_column_bytes(st, 6) == 64 &&
	       sqlite3_column_bytes(st, 7) == 64;
}

int cnl_sq_audit_verify(struct cnl_store *s, int64_t *ret_bad_seq)
{
	struct cnl_sq_store *q = cnl_sq(s);
	struct cnl_store_audit a;
	char prev[CNL_STORE_SHA256_HEX] = CNL_STORE_ZERO_HASH;
	char hex[CNL_STORE_SHA256_HEX];
	sqlite3_stmt *st = NULL;
	int64_t want = 1, bad = 0;
	int r, rc;

	/* One read transaction, so the chain is checked as of one instant. */
	if ((r = cnl_sq_begin_read(q)) < 0)
		return r;
	if ((r = cnl_sq_prep(q, "SELECT " AUDIT_COLS " FROM audit ORDER BY seq",
	                     &st)) < 0)
		goto out;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		read_audit(st, &a);
		if (a.seq != want) {
			bad = want; /* the first missing seq */
			break;
		}
		if (!audit_row_fits(st) || strcmp(a.prev_hash, prev) != 0) {
			bad = a.seq;
			break;
		}
		if ((r = cnl_store_audit_hash(&a, prev, hex)) < 0)
			goto out;
		if (strcmp(hex, a.hash) != 0) {
			bad = a.seq;
			break;
		}
		memcpy(prev, a.hash, sizeof(prev));
		want++;
	}
	if (!bad && rc != SQLITE_DONE) {
		r = cnl_sq_err(q, rc);
		goto out;
	}
	if (bad) {
		if (ret_bad_seq)
			*ret_bad_seq = bad;
		r = -CNL_ECORRUPT;
	}
out:
	cnl_sq_finalize(q, st);
	cnl_sq_rollback(q);
	return r;
}
