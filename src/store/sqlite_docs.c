/*
 * sqlite_docs.c - the SQLite backend's documents: JSON bodies stored under
 * (kind, id) for the resources whose shape the API layer owns.
 *
 * One table holds every kind.  Its primary key is (kind, id); an index on
 * (kind, parent, id) serves the listings of one parent, and a partial
 * unique index on (kind, parent, name) for names that are not empty makes
 * a taken name -CNL_EDUP.  The body is checked by json_valid() (a bad one
 * is -CNL_EFIELD) and is the one variable-size field of the store: the
 * readers here malloc it, and an allocation that fails is -ENOMEM with
 * nothing left allocated.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/time.h"
#include "store/sqlite-internal.h"

#define DOC_COLS "kind, id, parent, name, body, updated_ms"

/* Reads a document; the body is malloc'd (NULL when out of memory, which
 * the callers turn into -ENOMEM). */
static void read_doc(sqlite3_stmt *st, void *out)
{
	struct cnl_store_doc *d = out;
	const unsigned char *b;
	size_t n;

	memset(d, 0, sizeof(*d));
	cnl_sq_col_text(st, 0, d->kind, sizeof(d->kind));
	cnl_sq_col_text(st, 1, d->id, sizeof(d->id));
	cnl_sq_col_text(st, 2, d->parent, sizeof(d->parent));
	cnl_sq_col_text(st, 3, d->name, sizeof(d->name));
	b = sqlite3_column_text(st, 4);
	n = b ? (size_t)sqlite3_column_bytes(st, 4) : 0;
	if ((d->body = malloc(n + 1))) {
		if (n)
			memcpy(d->body, b, n);
		d->body[n] = '\0';
	}
	d->updated_ms = sqlite3_column_int64(st, 5);
}

int cnl_sq_doc_put(struct cnl_store *s, const struct cnl_store_doc *in,
                   bool create)
{
	const char *t[] = {in->kind, in->id,   in->parent,
	                   in->name, in->body, NULL};
	int64_t v = in->updated_ms;

	return cnl_sq_run(cnl_sq(s),
	                  create ? "INSERT INTO docs (" DOC_COLS ") VALUES"
	                           " (?1, ?2, ?3, ?4, ?5, ?6)"
	                         /* Not INSERT OR REPLACE: that would delete
	                          * another document holding the name. */
	                         : "INSERT INTO docs (" DOC_COLS ") VALUES"
	                           " (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT"
	                           " (kind, id) DO UPDATE SET"
	                           " parent = excluded.parent,"
	                           " name = excluded.name,"
	                           " body = excluded.body,"
	                           " updated_ms = excluded.updated_ms",
	                  t, &v, 1);
}

/* cnl_sq_get_one() for documents: the body's allocation is checked. */
static int doc_one(struct cnl_sq_store *q, const char *sql, const char *k1,
                   const char *k2, const char *k3, struct cnl_store_doc *ret)
{
	sqlite3_stmt *st = NULL;
	int r, rc;

	if ((r = cnl_sq_prep(q, sql, &st)) < 0)
		return r;
	if ((r = cnl_sq_bind_text(q, st, 1, k1)) < 0 ||
	    (r = cnl_sq_bind_text(q, st, 2, k2)) < 0 ||
	    (k3 && (r = cnl_sq_bind_text(q, st, 3, k3)) < 0))
		goto out;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		read_doc(st, ret);
		if (!ret->body)
			r = -ENOMEM;
	} else {
		r = rc == SQLITE_DONE ? -CNL_ENOTFOUND : cnl_sq_err(q, rc);
	}
out:
	cnl_sq_finalize(q, st);
	return r;
}

int cnl_sq_doc_get(struct cnl_store *s, const char *kind, const char *id,
                   struct cnl_store_doc *ret)
{
	return doc_one(cnl_sq(s),
	               "SELECT " DOC_COLS " FROM docs WHERE kind = ?1"
	               " AND id = ?2",
	               kind, id, NULL, ret);
}

int cnl_sq_doc_get_by_name(struct cnl_store *s, const char *kind,
                           const char *parent, const char *name,
                           struct cnl_store_doc *ret)
{
	return doc_one(cnl_sq(s),
	               "SELECT " DOC_COLS " FROM docs WHERE kind = ?1"
	               " AND parent = ?2 AND name = ?3",
	               kind, parent, name, ret);
}

int cnl_sq_doc_list(struct cnl_store *s, const char *kind, const char *parent,
                    const char *after_id, int limit, struct cnl_store_doc *out,
                    int *ret_n)
{
	struct cnl_sq_store *q = cnl_sq(s);
	sqlite3_stmt *st = NULL;
	int r, rc = SQLITE_DONE, n = 0;

	if ((r = cnl_sq_prep(
	         q,
	         parent ? "SELECT " DOC_COLS " FROM docs WHERE kind = ?1"
	                  " AND parent = ?4 AND id > ?2 ORDER BY id"
	                  " LIMIT ?3"
	                : "SELECT " DOC_COLS " FROM docs WHERE kind = ?1"
	                  " AND id > ?2 ORDER BY id LIMIT ?3",
	         &st)) < 0)
		return r;
	if ((r = cnl_sq_bind_text(q, st, 1, kind)) < 0 ||
	    (r = cnl_sq_bind_text(q, st, 2, after_id ? after_id : "")) < 0 ||
	    (r = cnl_sq_bind_int(q, st, 3, limit)) < 0 ||
	    (parent && (r = cnl_sq_bind_text(q, st, 4, parent)) < 0))
		goto out;
	while (n < limit && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		read_doc(st, &out[n]);
		if (!out[n++].body) {
			r = -ENOMEM;
			break;
		}
	}
	if (r == 0 && n < limit && rc != SQLITE_DONE)
		r = cnl_sq_err(q, rc);
	if (r < 0)
		cnl_store_docs_done(out, n);
	else
		*ret_n = n;
out:
	cnl_sq_finalize(q, st);
	return r;
}

int cnl_sq_doc_delete(struct cnl_store *s, const char *kind, const char *id)
{
	const char *t[] = {kind, id, NULL};

	return cnl_sq_update_rows(
	    cnl_sq(s), "DELETE FROM docs WHERE kind = ?1 AND id = ?2", t, NULL,
	    0);
}

/* ---- live statuses (store.h: cnl_store_live_put()) ------------------- */

int cnl_sq_live_put(struct cnl_store *s, bool reset, const char *changes)
{
	struct cnl_sq_store *q = cnl_sq(s);
	const char *t[] = {changes, NULL};
	int64_t now = cnl_time_now_ms();
	int r;

	if ((r = cnl_sq_begin(q)) < 0)
		return r;
	if ((reset && (r = cnl_sq_exec(q, "DELETE FROM live_status")) < 0) ||
	    (r = cnl_sq_run(q,
	                    "DELETE FROM live_status WHERE id IN"
	                    " (SELECT key FROM json_each(?1)"
	                    " WHERE type = 'null')",
	                    t, NULL, 0)) < 0 ||
	    (r = cnl_sq_run(q,
	                    "INSERT INTO live_status (id, body, updated_ms)"
	                    " SELECT key, value, ?2 FROM json_each(?1)"
	                    " WHERE type = 'object' ON CONFLICT (id) DO"
	                    " UPDATE SET body = excluded.body,"
	                    " updated_ms = excluded.updated_ms",
	                    t, &now, 1)) < 0) {
		cnl_sq_rollback(q);
		return r;
	}
	return cnl_sq_commit(q);
}

static void read_body(sqlite3_stmt *st, void *out)
{
	const unsigned char *b = sqlite3_column_text(st, 0);

	*(char **)out = strdup(b ? (const char *)b : "");
}

int cnl_sq_live_get(struct cnl_store *s, const char *id, char **ret)
{
	int r = cnl_sq_get_one(cnl_sq(s),
	                       "SELECT body FROM live_status WHERE id = ?1", id,
	                       NULL, read_body, ret);

	if (r == 0 && !*ret)
		return -ENOMEM;
	return r;
}
