/*
 * postgres_lease.c - the leader's lease and fencing on PostgreSQL (store.h,
 * "Leadership").
 *
 * One row of the leases table per lease ("leader"): holder, epoch and
 * expiry in the server's clock (clock_timestamp(), read once per
 * statement), so that the replicas' own clocks never decide who leads.
 *
 * Invariants:
 *  1. Acquire is one INSERT ... ON CONFLICT DO UPDATE: it takes a free or
 *     expired lease, or renews the caller's own, atomically.  A new
 *     holder's epoch is the old one plus one; the row never goes away, so
 *     epochs only grow.
 *  2. A fenced handle's write transactions start by reading the lease row
 *     FOR KEY SHARE and checking that it is their epoch's and unexpired.
 *     The lock is held to the transaction's end, and acquire's update of
 *     the row must wait for every such lock: a takeover happens
 *     between the old leader's transactions, never inside one, and after
 *     it every check of the old epoch fails.  So no write of an old epoch
 *     commits after a new epoch exists, however long its process was
 *     paused.  Acquire locks the row FOR UPDATE for that (its upsert
 *     alone would take FOR NO KEY UPDATE, which KEY SHARE lets by).  A
 *     renewal (or a release) is a plain UPDATE of columns no key holds,
 *     which KEY SHARE does not block: with several threads'
 *     fenced transactions overlapping (the API's, the mirror's), a FOR
 *     SHARE check left no moment free of lockers and starved the
 *     renewals until the lease was lost.
 *  3. A lease that expired while still its holder's is renewed with its
 *     epoch: nobody took it in between (that would have changed the row).
 *  4. A fenced transaction that sits idle (its process paused, or cut
 *     off, in the middle of it) is ended by the server after the hold
 *     time: its lock on the lease row cannot bar a takeover for longer.
 *  5. Acquire reads the row first and tries the update only when the
 *     lease looks free, expired or the caller's: INSERT ... ON CONFLICT
 *     locks the row before its WHERE is evaluated, so the followers'
 *     attempts every second would each wait for every fenced transaction
 *     of the leader and, queued, hold up its renewals behind them.  The
 *     read decides nothing: the update's WHERE still does.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "cnlab/errors.h"
#include "store/postgres-internal.h"

/* Where the lease's changes are announced (NOTIFY): a hint only. */
#define LEASE_CHANNEL "cnlab_lease"

static void read_lease(const PGresult *res, int row, void *out)
{
	struct cnl_store_lease *l = out;

	memset(l, 0, sizeof(*l));
	cnl_pg_col_text(res, row, 0, l->holder, sizeof(l->holder));
	l->epoch = cnl_pg_col_i64(res, row, 1);
	l->expires_ms = cnl_pg_col_i64(res, row, 2);
	l->now_ms = cnl_pg_col_i64(res, row, 3);
}

int cnl_pg_lease_get(struct cnl_store *s, struct cnl_store_lease *ret)
{
	return cnl_pg_get_one(cnl_pg(s),
	                      "SELECT holder, epoch, expires_ms, " CNL_PG_NOW_MS
	                      " FROM leases WHERE name = 'leader'",
	                      0, NULL, read_lease, ret);
}

int cnl_pg_lease_acquire(struct cnl_store *s, const char *holder,
                         int64_t ttl_ms, struct cnl_store_lease *ret)
{
	struct cnl_pg_store *p = cnl_pg(s);
	struct cnl_pg_num ttl;
	const char *v[] = {holder, cnl_pg_i64(&ttl, ttl_ms)};
	int r;

	if (p->read_only || p->depth)
		return -EINVAL;
	/* Held by another and unexpired, as a plain read sees it: busy,
	 * without the update's lock (invariant 5). */
	r = cnl_pg_lease_get(s, ret);
	if (r < 0 && r != -CNL_ENOTFOUND)
		return r;
	if (r == 0 && strcmp(ret->holder, holder) != 0 &&
	    ret->expires_ms > ret->now_ms)
		return -EBUSY;
	/* FOR UPDATE first (invariant 2): the upsert alone updates no key,
	 * so it would lock the row as FOR NO KEY UPDATE, which does not wait
	 * for the fenced transactions' FOR KEY SHARE.  The time is read once
	 * the lock is held. */
	r = cnl_pg_get_one(
	    p,
	    "WITH lk AS (SELECT name FROM leases WHERE name = 'leader'"
	    " FOR UPDATE),"
	    " now AS (SELECT " CNL_PG_NOW_MS " AS ms"
	    " FROM (SELECT count(*) FROM lk) AS c)"
	    " INSERT INTO leases AS l (name, holder, epoch, expires_ms)"
	    " SELECT 'leader', $1, 1, ms + $2::bigint FROM now"
	    " ON CONFLICT (name) DO UPDATE SET"
	    " epoch = CASE WHEN l.holder = excluded.holder THEN l.epoch"
	    " ELSE l.epoch + 1 END,"
	    " holder = excluded.holder, expires_ms = excluded.expires_ms"
	    " WHERE l.holder = excluded.holder"
	    " OR l.expires_ms <= (SELECT ms FROM now)"
	    " RETURNING holder, epoch, expires_ms, (SELECT ms FROM now)",
	    2, v, read_lease, ret);
	/* A hint to the others that the lease changed hands
	 * (cnl_pg_lease_wait): taken now, or renewed by its own holder,
	 * which happens only at a takeover (renewals go through renew). */
	if (r == 0)
		(void)cnl_pg_write(p,
		                   "SELECT pg_notify('" LEASE_CHANNEL "', $1)",
		                   1, (const char *[]){ret->holder}, false);
	if (r != -CNL_ENOTFOUND)
		return r;
	/* Held by another, unexpired: say by whom. */
	if ((r = cnl_pg_lease_get(s, ret)) < 0)
		return r;
	return -EBUSY;
}

int cnl_pg_lease_renew(struct cnl_store *s, const char *holder, int64_t epoch,
                       int64_t ttl_ms, struct cnl_store_lease *ret)
{
	struct cnl_pg_store *p = cnl_pg(s);
	struct cnl_store_lease got;
	struct cnl_pg_num e, ttl;
	const char *v[] = {holder, cnl_pg_i64(&e, epoch),
	                   cnl_pg_i64(&ttl, ttl_ms)};
	int r;

	if (p->read_only || p->depth)
		return -EINVAL;
	r = cnl_pg_get_one(
	    p,
	    "UPDATE leases SET expires_ms = " CNL_PG_NOW_MS
	    " + $3::bigint WHERE name = 'leader' AND"
	    " holder = $1 AND epoch = $2::bigint"
	    " RETURNING holder, epoch, expires_ms, " CNL_PG_NOW_MS,
	    3, v, read_lease, &got);
	if (r == -CNL_ENOTFOUND) {
		if (ret && cnl_pg_lease_get(s, &got) == 0)
			*ret = got;
		return -CNL_EFENCED;
	}
	if (r == 0 && ret)
		*ret = got;
	return r;
}

int cnl_pg_lease_release(struct cnl_store *s, const char *holder, int64_t epoch)
{
	struct cnl_pg_num e;
	const char *v[] = {holder, cnl_pg_i64(&e, epoch)};
	int r;

	/* The holder stays: the next acquire is another's, a new epoch. */
	r = cnl_pg_write(cnl_pg(s),
	                 "WITH u AS (UPDATE leases SET expires_ms = 0 WHERE"
	                 " name = 'leader' AND holder = $1 AND"
	                 " epoch = $2::bigint RETURNING holder)"
	                 " SELECT pg_notify('" LEASE_CHANNEL "', holder)"
	                 " FROM u",
	                 2, v, true);
	return r == -CNL_ENOTFOUND ? -CNL_EFENCED : r;
}

void cnl_pg_fence(struct cnl_store *s, int64_t epoch, int64_t hold_ms)
{
	cnl_pg(s)->fence_epoch = epoch;
	cnl_pg(s)->fence_hold_ms = hold_ms;
}

/* Drain the notifications libpq holds: whether there was one. */
static bool drain(PGconn *c)
{
	PGnotify *n;
	bool got = false;

	while ((n = PQnotifies(c))) {
		got = true;
		PQfreemem(n);
	}
	return got;
}

int cnl_pg_lease_wait(struct cnl_store *s, int64_t ms)
{
	struct cnl_pg_store *p = cnl_pg(s);
	struct pollfd pf;
	int r;

	if (p->depth)
		return -EINVAL;
	/* LISTEN once per session: a connection made again is a new one. */
	if (PQstatus(p->conn) != CONNECTION_OK ||
	    PQbackendPID(p->conn) != p->listen_pid) {
		if ((r = cnl_pg_exec(p, "LISTEN " LEASE_CHANNEL, 0, NULL,
		                     NULL)) < 0)
			return r;
		p->listen_pid = PQbackendPID(p->conn);
	}
	if (!PQconsumeInput(p->conn))
		return -ENOTCONN;
	if (drain(p->conn))
		return 1;
	pf = (struct pollfd){PQsocket(p->conn), POLLIN, 0};
	r = poll(&pf, 1, (int)(ms > 60000 ? 60000 : ms));
	if (r < 0)
		return errno == EINTR ? 0 : -errno;
	if (r == 0)
		return 0;
	if (!PQconsumeInput(p->conn))
		return -ENOTCONN;
	return drain(p->conn) ? 1 : 0;
}

/* ---- live statuses (store.h: cnl_store_live_put()) ------------------- */

int cnl_pg_live_put(struct cnl_store *s, bool reset, const char *changes)
{
	struct cnl_pg_store *p = cnl_pg(s);
	const char *v[] = {changes};
	int r;

	if ((r = cnl_pg_begin(p)) < 0)
		return r;
	if ((reset && (r = cnl_pg_write(p, "DELETE FROM live_status", 0, NULL,
	                                false)) < 0) ||
	    (r = cnl_pg_write(p,
	                      "DELETE FROM live_status WHERE id IN"
	                      " (SELECT key FROM json_each($1::json)"
	                      " WHERE json_typeof(value) = 'null')",
	                      1, v, false)) < 0 ||
	    (r = cnl_pg_write(p,
	                      "INSERT INTO live_status (id, body, updated_ms)"
	                      " SELECT key, value::text, " CNL_PG_NOW_MS
	                      " FROM json_each($1::json)"
	                      " WHERE json_typeof(value) = 'object'"
	                      " ON CONFLICT (id) DO UPDATE SET"
	                      " body = excluded.body,"
	                      " updated_ms = excluded.updated_ms",
	                      1, v, false)) < 0) {
		cnl_pg_rollback(p);
		return r;
	}
	return cnl_pg_commit(p);
}

static void read_body(const PGresult *res, int row, void *out)
{
	*(char **)out = strdup(PQgetvalue(res, row, 0));
}

int cnl_pg_live_get(struct cnl_store *s, const char *id, char **ret)
{
	const char *v[] = {id};
	int r = cnl_pg_get_one(cnl_pg(s),
	                       "SELECT body FROM live_status WHERE id = $1", 1,
	                       v, read_body, ret);

	if (r == 0 && !*ret)
		return -ENOMEM;
	return r;
}
