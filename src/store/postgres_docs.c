/*
 * postgres_docs.c - the PostgreSQL backend's documents, with the SQLite
 * backend's semantics (sqlite_docs.c): one table keyed by (kind, id), a
 * unique index on (kind, parent, name) for names that are not empty, and
 * a body checked as JSON by a cast in a CHECK constraint (a bad body is
 * -CNL_EFIELD).  Bodies are malloc'd by the readers; a failed allocation
 * is -ENOMEM with nothing left allocated.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "store/postgres-internal.h"

#define DOC_COLS "kind, id, parent, name, body, updated_ms"

static void read_doc(const PGresult *res, int row, void *out)
{
	struct cnl_store_doc *d = out;
	size_t n = (size_t)PQgetlength(res, row, 4);

	memset(d, 0, sizeof(*d));
	cnl_pg_col_text(res, row, 0, d->kind, sizeof(d->kind));
	cnl_pg_col_text(res, row, 1, d->id, sizeof(d->id));
	cnl_pg_col_text(res, row, 2, d->parent, sizeof(d->parent));
	cnl_pg_col_text(res, row, 3, d->name, sizeof(d->name));
	if ((d->body = malloc(n + 1))) {
		memcpy(d->body, PQgetvalue(res, row, 4), n);
		d->body[n] = '\0';
	}
	d->updated_ms = cnl_pg_col_i64(res, row, 5);
}

int cnl_pg_doc_put(struct cnl_store *s, const struct cnl_store_doc *in,
                   bool create)
{
	struct cnl_pg_num ms;
	const char *v[] = {in->kind, in->id,   in->parent,
	                   in->name, in->body, cnl_pg_i64(&ms, in->updated_ms)};

	/* A replace keeps (kind, id) and changes the rest; a name taken by
	 * another document still fails on the name's index. */
	return cnl_pg_write(cnl_pg(s),
	                    create ? "INSERT INTO docs (" DOC_COLS ") VALUES"
	                             " ($1, $2, $3, $4, $5, $6)"
	                           : "INSERT INTO docs (" DOC_COLS ") VALUES"
	                             " ($1, $2, $3, $4, $5, $6) ON CONFLICT"
	                             " (kind, id) DO UPDATE SET"
	                             " parent = excluded.parent,"
	                             " name = excluded.name,"
	                             " body = excluded.body,"
	                             " updated_ms = excluded.updated_ms",
	                    6, v, false);
}

static int doc_one(struct cnl_pg_store *p, const char *sql, int n,
                   const char *const *v, struct cnl_store_doc *ret)
{
	int r = cnl_pg_get_one(p, sql, n, v, read_doc, ret);

	if (r == 0 && !ret->body)
		return -ENOMEM;
	return r;
}

int cnl_pg_doc_get(struct cnl_store *s, const char *kind, const char *id,
                   struct cnl_store_doc *ret)
{
	const char *v[] = {kind, id};

	return doc_one(cnl_pg(s),
	               "SELECT " DOC_COLS " FROM docs WHERE kind = $1"
	               " AND id = $2",
	               2, v, ret);
}

int cnl_pg_doc_get_by_name(struct cnl_store *s, const char *kind,
                           const char *parent, const char *name,
                           struct cnl_store_doc *ret)
{
	const char *v[] = {kind, parent, name};

	return doc_one(cnl_pg(s),
	               "SELECT " DOC_COLS " FROM docs WHERE kind = $1"
	               " AND parent = $2 AND name = $3",
	               3, v, ret);
}

int cnl_pg_doc_list(struct cnl_store *s, const char *kind, const char *parent,
                    const char *after_id, int limit, struct cnl_store_doc *out,
                    int *ret_n)
{
	struct cnl_pg_num lim;
	const char *v[] = {kind, after_id ? after_id : "",
	                   cnl_pg_i64(&lim, limit), parent};
	PGresult *res;
	int r, rows;

	if ((r = cnl_pg_exec(cnl_pg(s),
	                     parent ? "SELECT " DOC_COLS " FROM docs WHERE"
	                              " kind = $1 AND parent = $4 AND id > $2"
	                              " ORDER BY id LIMIT $3"
	                            : "SELECT " DOC_COLS " FROM docs WHERE"
	                              " kind = $1 AND id > $2 ORDER BY id"
	                              " LIMIT $3",
	                     parent ? 4 : 3, v, &res)) < 0)
		return r;
	rows = PQntuples(res);
	if (rows > limit)
		rows = limit;
	for (int i = 0; i < rows; i++) {
		read_doc(res, i, &out[i]);
		if (!out[i].body) {
			cnl_store_docs_done(out, i);
			PQclear(res);
			return -ENOMEM;
		}
	}
	PQclear(res);
	*ret_n = rows;
	return 0;
}

int cnl_pg_doc_delete(struct cnl_store *s, const char *kind, const char *id)
{
	const char *v[] = {kind, id};

	return cnl_pg_write(cnl_pg(s),
	                    "DELETE FROM docs WHERE kind = $1 AND id = $2", 2,
	                    v, true);
}
