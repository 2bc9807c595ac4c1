/*
 * sqlite_tenancy.c - the SQLite backend's projects, users and memberships:
 * the tenants and who may act in each.
 *
 * Each method but one is a single statement in autocommit (invariant 3 of
 * sqlite.c), written with the helpers of sqlite-internal.h.  A membership
 * is keyed by (user, project) and setting one is an upsert, which replaces
 * the role held before; the foreign keys turn a missing user or project
 * into -CNL_ENOTFOUND.  Deleting a project is the one write of several
 * statements: in one transaction it refuses a project that still has an
 * unfinished job or any server (-EBUSY), then deletes children before the
 * row they reference (documents, idempotency keys, jobs, memberships) and
 * the project last.  Audit records naming the project stay.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cnlab/errors.h"
#include "store/sqlite-internal.h"

/* Row readers: the column order is that of the *_COLS lists. */
#define PROJECT_COLS "id, name, on_prem_only, created_ms"

static void read_project(sqlite3_stmt *st, void *out)
{
	struct cnl_store_project *p = out;

	memset(p, 0, sizeof(*p));
	cnl_sq_col_text(st, 0, p->id, sizeof(p->id));
	cnl_sq_col_text(st, 1, p->name, sizeof(p->name));
	p->on_prem_only = sqlite3_column_int(st, 2) != 0;
	p->created_ms = sqlite3_column_int64(st, 3);
}

#define USER_COLS "id, name, password_hash, created_ms"

static void read_user(sqlite3_stmt *st, void *out)
{
	struct cnl_store_user *u = out;

	memset(u, 0, sizeof(*u));
	cnl_sq_col_text(st, 0, u->id, sizeof(u->id));
	cnl_sq_col_text(st, 1, u->name, sizeof(u->name));
	cnl_sq_col_text(st, 2, u->password_hash, sizeof(u->password_hash));
	u->created_ms = sqlite3_column_int64(st, 3);
}

#define MEMBERSHIP_COLS "user_id, project_id, role"

static void read_membership(sqlite3_stmt *st, void *out)
{
	struct cnl_store_membership *m = out;

	memset(m, 0, sizeof(*m));
	cnl_sq_col_text(st, 0, m->user_id, sizeof(m->user_id));
	cnl_sq_col_text(st, 1, m->project_id, sizeof(m->project_id));
	cnl_sq_col_text(st, 2, m->role, sizeof(m->role));
}

int cnl_sq_project_create(struct cnl_store *s,
                          const struct cnl_store_project *in)
{
	const char *t[] = {in->id, in->name, NULL};
	int64_t v[] = {in->on_prem_only ? 1 : 0, in->created_ms};

	return cnl_sq_run(cnl_sq(s),
	                  "INSERT INTO projects (" PROJECT_COLS
	                  ") VALUES (?1, ?2, ?3, ?4)",
	                  t, v, 2);
}

int cnl_sq_project_get(struct cnl_store *s, const char *id,
                       struct cnl_store_project *ret)
{
	return cnl_sq_get_one(
	    cnl_sq(s), "SELECT " PROJECT_COLS " FROM projects WHERE id = ?1",
	    id, NULL, read_project, ret);
}

int cnl_sq_project_get_by_name(struct cnl_store *s, const char *name,
                               struct cnl_store_project *ret)
{
	return cnl_sq_get_one(
	    cnl_sq(s), "SELECT " PROJECT_COLS " FROM projects WHERE name = ?1",
	    name, NULL, read_project, ret);
}

int cnl_sq_project_list(struct cnl_store *s, const char *after_id, int limit,
                        struct cnl_store_project *out, int *ret_n)
{
	return cnl_sq_list_page(
	    cnl_sq(s),
	    "SELECT " PROJECT_COLS " FROM projects WHERE id > ?2"
	    " ORDER BY id LIMIT ?3",
	    NULL, after_id, limit, read_project, out, sizeof(*out), ret_n);
}

int cnl_sq_project_set_flags(struct cnl_store *s, const char *id,
                             bool on_prem_only)
{
	const char *t[] = {id, NULL};
	int64_t v = on_prem_only;

	return cnl_sq_update_rows(
	    cnl_sq(s), "UPDATE projects SET on_prem_only = ?2 WHERE id = ?1", t,
	    &v, 1);
}

/* How many rows @sql (binding ?1 to @id) counts into *@ret. */
static int count_rows(struct cnl_sq_store *q, const char *sql, const char *id,
                      int64_t *ret)
{
	sqlite3_stmt *st = NULL;
	int r;

	if ((r = cnl_sq_prep(q, sql, &st)) < 0)
		return r;
	if ((r = cnl_sq_bind_text(q, st, 1, id)) == 0) {
		int rc = sqlite3_step(st);

		if (rc == SQLITE_ROW)
			*ret = sqlite3_column_int64(st, 0);
		else
			r = cnl_sq_err(q, rc);
	}
	cnl_sq_finalize(q, st);
	return r;
}

int cnl_sq_project_delete(struct cnl_store *s, const char *id)
{
	/* Children first: foreign keys are on. */
	static const char *const steps[] = {
	    "DELETE FROM docs WHERE parent IN"
	    " (SELECT id FROM jobs WHERE project_id = ?1)",
	    "DELETE FROM docs WHERE parent = ?1 OR id = ?1",
	    "DELETE FROM idempotency WHERE object_id IN"
	    " (SELECT id FROM jobs WHERE project_id = ?1)",
	    "DELETE FROM jobs WHERE project_id = ?1",
	    "DELETE FROM memberships WHERE project_id = ?1",
	};
	struct cnl_sq_store *q = cnl_sq(s);
	const char *t[] = {id, NULL};
	int64_t busy = 0, servers = 0;
	int r;

	if ((r = cnl_sq_begin(q)) < 0)
		return r;
	if ((r = count_rows(q,
	                    "SELECT count(*) FROM jobs WHERE project_id = ?1"
	                    " AND state IN ('pending', 'running')",
	                    id, &busy)) < 0 ||
	    (r = count_rows(
	         q, "SELECT count(*) FROM servers WHERE project_id = ?1", id,
	         &servers)) < 0)
		goto fail;
	if (busy || servers) {
		r = -EBUSY;
		goto fail;
	}
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if ((r = cnl_sq_update_rows(q, steps[i], t, NULL, 0)) < 0 &&
		    r != -CNL_ENOTFOUND)
			goto fail;
	if ((r = cnl_sq_update_rows(q, "DELETE FROM projects WHERE id = ?1", t,
	                            NULL, 0)) < 0)
		goto fail;
	return cnl_sq_commit(q);
fail:
	cnl_sq_rollback(q);
	return r;
}

int cnl_sq_user_create(struct cnl_store *s, const struct cnl_store_user *in)
{
	const char *t[] = {in->id, in->name, in->password_hash, NULL};
	int64_t v = in->created_ms;

	return cnl_sq_run(cnl_sq(s),
	                  "INSERT INTO users (" USER_COLS
	                  ") VALUES (?1, ?2, ?3, ?4)",
	                  t, &v, 1);
}

int cnl_sq_user_get(struct cnl_store *s, const char *id,
                    struct cnl_store_user *ret)
{
	return cnl_sq_get_one(cnl_sq(s),
	                      "SELECT " USER_COLS " FROM users WHERE id = ?1",
	                      id, NULL, read_user, ret);
}

int cnl_sq_user_get_by_name(struct cnl_store *s, const char *name,
                            struct cnl_store_user *ret)
{
	return cnl_sq_get_one(cnl_sq(s),
	                      "SELECT " USER_COLS " FROM users WHERE name = ?1",
	                      name, NULL, read_user, ret);
}

int cnl_sq_user_list(struct cnl_store *s, const char *after_id, int limit,
                     struct cnl_store_user *out, int *ret_n)
{
	return cnl_sq_list_page(cnl_sq(s),
	                        "SELECT " USER_COLS " FROM users WHERE id > ?2"
	                        " ORDER BY id LIMIT ?3",
	                        NULL, after_id, limit, read_user, out,
	                        sizeof(*out), ret_n);
}

int cnl_sq_user_set_password(struct cnl_store *s, const char *id,
                             const char *password_hash)
{
	const char *t[] = {id, password_hash, NULL};

	return cnl_sq_update_rows(
	    cnl_sq(s), "UPDATE users SET password_hash = ?2 WHERE id = ?1", t,
	    NULL, 0);
}

int cnl_sq_membership_set(struct cnl_store *s,
                          const struct cnl_store_membership *in)
{
	const char *t[] = {in->user_id, in->project_id, in->role, NULL};

	return cnl_sq_run(cnl_sq(s),
	                  "INSERT INTO memberships (" MEMBERSHIP_COLS
	                  ") VALUES (?1, ?2, ?3) ON CONFLICT (user_id,"
	                  " project_id) DO UPDATE SET role = excluded.role",
	                  t, NULL, 0);
}

int cnl_sq_membership_get_role(struct cnl_store *s, const char *user_id,
                               const char *project_id, char *ret_role,
                               size_t len)
{
	struct cnl_store_membership m;
	int r;

	r = cnl_sq_get_one(cnl_sq(s),
	                   "SELECT " MEMBERSHIP_COLS " FROM memberships"
	                   " WHERE user_id = ?1 AND project_id = ?2",
	                   user_id, project_id, read_membership, &m);
	if (r < 0)
		return r;
	snprintf(ret_role, len, "%s", m.role);
	return 0;
}

int cnl_sq_membership_list(struct cnl_store *s, const char *user_id,
                           const char *after_project_id, int limit,
                           struct cnl_store_membership *out, int *ret_n)
{
	return cnl_sq_list_page(cnl_sq(s),
	                        "SELECT " MEMBERSHIP_COLS " FROM memberships"
	                        " WHERE user_id = ?1 AND project_id > ?2"
	                        " ORDER BY project_id LIMIT ?3",
	                        user_id, after_project_id, limit,
	                        read_membership, out, sizeof(*out), ret_n);
}

int cnl_sq_membership_list_project(struct cnl_store *s, const char *project_id,
                                   const char *after_user_id, int limit,
                                   struct cnl_store_membership *out, int *ret_n)
{
	return cnl_sq_list_page(cnl_sq(s),
	                        "SELECT " MEMBERSHIP_COLS " FROM memberships"
	                        " WHERE project_id = ?1 AND user_id > ?2"
	                        " ORDER BY user_id LIMIT ?3",
	                        project_id, after_user_id, limit,
	                        read_membership, out, sizeof(*out), ret_n);
}

int cnl_sq_membership_delete(struct cnl_store *s, const char *user_id,
                             const char *project_id)
{
	const char *t[] = {user_id, project_id, NULL};

	return cnl_sq_update_rows(
	    cnl_sq(s),
	    "DELETE FROM memberships WHERE user_id = ?1 AND"
	    " project_id = ?2",
	    t, NULL, 0);
}
