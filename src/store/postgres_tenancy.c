/*
 * postgres_tenancy.c - the PostgreSQL backend's projects, users and
 * memberships, with the SQLite backend's semantics (sqlite_tenancy.c).
 *
 * Each method but one is a single statement in autocommit.  A membership
 * is an upsert on (user, project).  Deleting a project runs in one
 * transaction that first locks the project's row (FOR UPDATE): a job or
 * server being created in it at that moment holds a key-share lock on the
 * same row through its foreign key, so the check for unfinished work and
 * the deletes cannot interleave with it, whichever replica runs them.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cnlab/errors.h"
#include "store/postgres-internal.h"

#define PROJECT_COLS "id, name, on_prem_only, created_ms"

static void read_project(const PGresult *res, int row, void *out)
{
	struct cnl_store_project *p = out;

	memset(p, 0, sizeof(*p));
	cnl_pg_col_text(res, row, 0, p->id, sizeof(p->id));
	cnl_pg_col_text(res, row, 1, p->name, sizeof(p->name));
	p->on_prem_only = cnl_pg_col_i64(res, row, 2) != 0;
	p->created_ms = cnl_pg_col_i64(res, row, 3);
}

#define USER_COLS "id, name, password_hash, created_ms"

static void read_user(const PGresult *res, int row, void *out)
{
	struct cnl_store_user *u = out;

	memset(u, 0, sizeof(*u));
	cnl_pg_col_text(res, row, 0, u->id, sizeof(u->id));
	cnl_pg_col_text(res, row, 1, u->name, sizeof(u->name));
	cnl_pg_col_text(res, row, 2, u->password_hash,
	                sizeof(u->password_hash));
	u->created_ms = cnl_pg_col_i64(res, row, 3);
}

#define MEMBERSHIP_COLS "user_id, project_id, role"

static void read_membership(const PGresult *res, int row, void *out)
{
	struct cnl_store_membership *m = out;

	memset(m, 0, sizeof(*m));
	cnl_pg_col_text(res, row, 0, m->user_id, sizeof(m->user_id));
	cnl_pg_col_text(res, row, 1, m->project_id, sizeof(m->project_id));
	cnl_pg_col_text(res, row, 2, m->role, sizeof(m->role));
}

int cnl_pg_project_create(struct cnl_store *s,
                          const struct cnl_store_project *in)
{
	struct cnl_pg_num a, b;
	const char *v[] = {in->id, in->name, cnl_pg_i64(&a, in->on_prem_only),
	                   cnl_pg_i64(&b, in->created_ms)};

	return cnl_pg_write(cnl_pg(s),
	                    "INSERT INTO projects (" PROJECT_COLS
	                    ") VALUES ($1, $2, $3, $4)",
	                    4, v, false);
}

int cnl_pg_project_get(struct cnl_store *s, const char *id,
                       struct cnl_store_project *ret)
{
	return cnl_pg_get_one(
	    cnl_pg(s), "SELECT " PROJECT_COLS " FROM projects WHERE id = $1", 1,
	    &id, read_project, ret);
}

int cnl_pg_project_get_by_name(struct cnl_store *s, const char *name,
                               struct cnl_store_project *ret)
{
	return cnl_pg_get_one(
	    cnl_pg(s), "SELECT " PROJECT_COLS " FROM projects WHERE name = $1",
	    1, &name, read_project, ret);
}

int cnl_pg_project_list(struct cnl_store *s, const char *after_id, int limit,
                        struct cnl_store_project *out, int *ret_n)
{
	return cnl_pg_page(cnl_pg(s),
	                   "SELECT " PROJECT_COLS " FROM projects WHERE id > $1"
	                   " ORDER BY id LIMIT $2",
	                   NULL, after_id, limit, read_project, out,
	                   sizeof(*out), ret_n);
}

int cnl_pg_project_set_flags(struct cnl_store *s, const char *id,
                             bool on_prem_only)
{
	struct cnl_pg_num a;
	const char *v[] = {id, cnl_pg_i64(&a, on_prem_only)};

	return cnl_pg_write(
	    cnl_pg(s), "UPDATE projects SET on_prem_only = $2 WHERE id = $1", 2,
	    v, true);
}

/* The integer in the first column of @sql's one row ($1 = @id). */
static int count_rows(struct cnl_pg_store *p, const char *sql, const char *id,
                      int64_t *ret)
{
	PGresult *res;
	int r;

	if ((r = cnl_pg_exec(p, sql, 1, &id, &res)) < 0)
		return r;
	*ret = PQntuples(res) ? cnl_pg_col_i64(res, 0, 0) : 0;
	PQclear(res);
	return 0;
}

int cnl_pg_project_delete(struct cnl_store *s, const char *id)
{
	/* Children first: the foreign keys hold. */
	static const char *const steps[] = {
	    "DELETE FROM docs WHERE parent IN"
	    " (SELECT id FROM jobs WHERE project_id = $1)",
	    "DELETE FROM docs WHERE parent = $1 OR id = $1",
	    "DELETE FROM idempotency WHERE object_id IN"
	    " (SELECT id FROM jobs WHERE project_id = $1)",
	    "DELETE FROM jobs WHERE project_id = $1",
	    "DELETE FROM memberships WHERE project_id = $1",
	};
	struct cnl_pg_store *p = cnl_pg(s);
	int64_t found = 0, busy = 0, servers = 0;
	int r;

	if ((r = cnl_pg_begin(p)) < 0)
		return r;
	if ((r = count_rows(p,
	                    "SELECT count(*) FROM (SELECT 1 FROM projects"
	                    " WHERE id = $1 FOR UPDATE) AS t",
	                    id, &found)) < 0)
		goto fail;
	if (!found) {
		r = -CNL_ENOTFOUND;
		goto fail;
	}
	if ((r = count_rows(p,
	                    "SELECT count(*) FROM jobs WHERE project_id = $1"
	                    " AND state IN ('pending', 'running')",
	                    id, &busy)) < 0 ||
	    (r = count_rows(
	         p, "SELECT count(*) FROM servers WHERE project_id = $1", id,
	         &servers)) < 0)
		goto fail;
	if (busy || servers) {
		r = -EBUSY;
		goto fail;
	}
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if ((r = cnl_pg_write(p, steps[i], 1, &id, false)) < 0)
			goto fail;
	if ((r = cnl_pg_write(p, "DELETE FROM projects WHERE id = $1", 1, &id,
	                      true)) < 0)
		goto fail;
	return cnl_pg_commit(p);
fail:
	cnl_pg_rollback(p);
	return r;
}

int cnl_pg_user_create(struct cnl_store *s, const struct cnl_store_user *in)
{
	struct cnl_pg_num a;
	const char *v[] = {in->id, in->name, in->password_hash,
	                   cnl_pg_i64(&a, in->created_ms)};

	return cnl_pg_write(cnl_pg(s),
	                    "INSERT INTO users (" USER_COLS
	                    ") VALUES ($1, $2, $3, $4)",
	                    4, v, false);
}

int cnl_pg_user_get(struct cnl_store *s, const char *id,
                    struct cnl_store_user *ret)
{
	return cnl_pg_get_one(cnl_pg(s),
	                      "SELECT " USER_COLS " FROM users WHERE id = $1",
	                      1, &id, read_user, ret);
}

int cnl_pg_user_get_by_name(struct cnl_store *s, const char *name,
                            struct cnl_store_user *ret)
{
	return cnl_pg_get_one(cnl_pg(s),
	                      "SELECT " USER_COLS " FROM users WHERE name = $1",
	                      1, &name, read_user, ret);
}

int cnl_pg_user_list(struct cnl_store *s, const char *after_id, int limit,
                     struct cnl_store_user *out, int *ret_n)
{
	return cnl_pg_page(cnl_pg(s),
	                   "SELECT " USER_COLS " FROM users WHERE id > $1"
	                   " ORDER BY id LIMIT $2",
	                   NULL, after_id, limit, read_user, out, sizeof(*out),
	                   ret_n);
}

int cnl_pg_user_set_password(struct cnl_store *s, const char *id,
                             const char *password_hash)
{
	const char *v[] = {id, password_hash};

	return cnl_pg_write(cnl_pg(s),
	                    "UPDATE users SET password_hash = $2 WHERE id = $1",
	                    2, v, true);
}

int cnl_pg_membership_set(struct cnl_store *s,
                          const struct cnl_store_membership *in)
{
	const char *v[] = {in->user_id, in->project_id, in->role};

	return cnl_pg_write(cnl_pg(s),
	                    "INSERT INTO memberships (" MEMBERSHIP_COLS
	                    ") VALUES ($1, $2, $3) ON CONFLICT (user_id,"
	                    " project_id) DO UPDATE SET role = excluded.role",
	                    3, v, false);
}

int cnl_pg_membership_get_role(struct cnl_store *s, const char *user_id,
                               const char *project_id, char *ret_role,
                               size_t len)
{
	struct cnl_store_membership m;
	const char *v[] = {user_id, project_id};
	int r;

	r = cnl_pg_get_one(cnl_pg(s),
	                   "SELECT " MEMBERSHIP_COLS " FROM memberships"
	                   " WHERE user_id = $1 AND project_id = $2",
	                   2, v, read_membership, &m);
	if (r < 0)
		return r;
	snprintf(ret_role, len, "%s", m.role);
	return 0;
}

int cnl_pg_membership_list(struct cnl_store *s, const char *user_id,
                           const char *after_project_id, int limit,
                           struct cnl_store_membership *out, int *ret_n)
{
	return cnl_pg_page(cnl_pg(s),
	                   "SELECT " MEMBERSHIP_COLS " FROM memberships"
	                   " WHERE user_id = $1 AND project_id > $2"
	                   " ORDER BY project_id LIMIT $3",
	                   user_id, after_project_id, limit, read_membership,
	                   out, sizeof(*out), ret_n);
}

int cnl_pg_membership_list_project(struct cnl_store *s, const char *project_id,
                                   const char *after_user_id, int limit,
                                   struct cnl_store_membership *out, int *ret_n)
{
	return cnl_pg_page(cnl_pg(s),
	                   "SELECT " MEMBERSHIP_COLS " FROM memberships"
	                   " WHERE project_id = $1 AND user_id > $2"
	                   " ORDER BY user_id LIMIT $3",
	                   project_id, after_user_id, limit, read_membership,
	                   out, sizeof(*out), ret_n);
}

int cnl_pg_membership_delete(struct cnl_store *s, const char *user_id,
                             const char *project_id)
{
	const char *v[] = {user_id, project_id};

	return cnl_pg_write(cnl_pg(s),
	                    "DELETE FROM memberships WHERE user_id = $1 AND"
	                    " project_id = $2",
	                    2, v, true);
}
