/*
 * sqlite.c - the state store's SQLite backend (the generic cnl_store_*()
 * layer in front of it is store.c).
 *
 * The backend, in numbered invariants:
 *  1. The connection runs journal_mode=WAL (readers never block the one
 *     writer) and synchronous=FULL: SQLite syncs the WAL on every commit, so
 *     a call that returned success has its write on stable storage and it
 *     survives kill -9 and power loss.  foreign_keys=ON makes a job, server
 *     or membership that names a missing project or user fail; the failure
 *     maps to -CNL_ENOTFOUND.
 *  2. Every statement is a static SQL string with bound parameters.  No SQL
 *     text is ever built from caller data.
 *  3. Writes of one statement run in autocommit and are atomic by
 *     themselves.  Writes of several statements (idempotent creates, audit
 *     append, each migration) run in BEGIN IMMEDIATE ... COMMIT, so the write
 *     lock is taken up front and a read-then-write cannot race another
 *     connection; any failure rolls back, so nothing is stored.
 *  4. The schema is a list of migrations {version, SQL}.  schema_version
 *     holds one row per applied migration.  Opening applies, in order and in
 *     one transaction each, those newer than MAX(version), re-reading the
 *     version inside the transaction so two processes opening one file at
 *     once apply each migration once.  A file newer than the newest
 *     migration here is refused: this build would not know its schema.
 *  5. SQLite errors other than constraint violations become -EIO, with
 *     sqlite3_errmsg() kept in s->errmsg for cnl_store_errmsg().
 *
 * Audit chain.  A record's hash is SHA-256 over its predecessor's hash (64
 * hex digits) followed by the canonical text of the record:
 *
 *     cnlab-audit-v1\n seq=<seq>\n ts_ms=<ms>\n actor=<len>:<text>\n
 *     action=<len>:<text>\n target=<len>:<text>\n result=<len>:<text>\n
 *
 * (without the spaces).  Length prefixes make the text unambiguous whatever
 * the fields contain.  seq is an AUTOINCREMENT key, so SQLite never reuses
 * one: if the tail of the log is cut, the next append leaves a gap that
 * verify reports, although the cut itself is invisible until then.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <sqlite3.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/time.h"
#include "store/store.h"

struct sq_store {
	struct cnl_store base; /* first, so the wrappers' handle is ours */
	sqlite3 *db;
	int depth; /* open transactions: 1 + savepoints */
};

static struct sq_store *sq(struct cnl_store *s)
{
	return (struct sq_store *)s;
}

#define BUSY_TIMEOUT_MS 5000
#define ZERO_HASH \
	"0000000000000000000000000000000000000000000000000000000000000000"

struct migration {
	int version;
	const char *sql;
};

/* Append only: a released migration is never edited, only followed. */
static const struct migration migrations[] = {
    {1, "CREATE TABLE projects ("
        " id TEXT PRIMARY KEY,"
        " name TEXT NOT NULL UNIQUE,"
        " on_prem_only INTEGER NOT NULL,"
        " created_ms INTEGER NOT NULL);"
        "CREATE TABLE users ("
        " id TEXT PRIMARY KEY,"
        " name TEXT NOT NULL UNIQUE,"
        " password_hash TEXT NOT NULL,"
        " created_ms INTEGER NOT NULL);"
        "CREATE TABLE memberships ("
        " user_id TEXT NOT NULL REFERENCES users(id),"
        " project_id TEXT NOT NULL REFERENCES projects(id),"
        " role TEXT NOT NULL,"
        " PRIMARY KEY (user_id, project_id)) WITHOUT ROWID;"
        "CREATE TABLE jobs ("
        " id TEXT PRIMARY KEY,"
        " project_id TEXT NOT NULL REFERENCES projects(id),"
        " user_id TEXT NOT NULL REFERENCES users(id),"
        " command TEXT NOT NULL,"
        " profile TEXT NOT NULL,"
        " gpu_shape TEXT NOT NULL,"
        " priority INTEGER NOT NULL CHECK (priority BETWEEN 0 AND 3),"
        " deadline_ms INTEGER NOT NULL,"
        " runtime_ms INTEGER NOT NULL,"
        " state TEXT NOT NULL,"
        " exit_code INTEGER NOT NULL,"
        " created_ms INTEGER NOT NULL,"
        " updated_ms INTEGER NOT NULL);"
        "CREATE TABLE servers ("
        " id TEXT PRIMARY KEY,"
        " project_id TEXT NOT NULL REFERENCES projects(id),"
        " user_id TEXT NOT NULL REFERENCES users(id),"
        " name TEXT NOT NULL,"
        " image TEXT NOT NULL,"
        " profile TEXT NOT NULL,"
        " storage_gb INTEGER NOT NULL,"
        " idle_timeout_s INTEGER NOT NULL,"
        " state TEXT NOT NULL,"
        " url TEXT NOT NULL,"
        " created_ms INTEGER NOT NULL,"
        " UNIQUE (project_id, name));"
        "CREATE TABLE idempotency ("
        " key TEXT PRIMARY KEY,"
        " kind TEXT NOT NULL,"
        " object_id TEXT NOT NULL,"
        " created_ms INTEGER NOT NULL);"
        "CREATE TABLE audit ("
        " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
        " ts_ms INTEGER NOT NULL,"
        " actor TEXT NOT NULL,"
        " action TEXT NOT NULL,"
        " target TEXT NOT NULL,"
        " result TEXT NOT NULL,"
        " prev_hash TEXT NOT NULL,"
        " hash TEXT NOT NULL);"},
    {2, "CREATE INDEX jobs_by_project ON jobs(project_id, id);"
        "CREATE INDEX servers_by_project ON servers(project_id, id);"
        "CREATE INDEX memberships_by_project ON memberships(project_id);"},
    {3, "ALTER TABLE jobs ADD COLUMN run TEXT NOT NULL DEFAULT '{}'"
        " CHECK (json_valid(run));"
        "ALTER TABLE servers ADD COLUMN run TEXT NOT NULL DEFAULT '{}'"
        " CHECK (json_valid(run));"
        "CREATE INDEX jobs_by_state ON jobs(state, id);"
        "CREATE TABLE docs ("
        " kind TEXT NOT NULL,"
        " id TEXT NOT NULL,"
        " parent TEXT NOT NULL,"
        " name TEXT NOT NULL,"
        " body TEXT NOT NULL CHECK (json_valid(body)),"
        " updated_ms INTEGER NOT NULL,"
        " PRIMARY KEY (kind, id)) WITHOUT ROWID;"
        "CREATE INDEX docs_by_parent ON docs(kind, parent, id);"
        "CREATE UNIQUE INDEX docs_by_name ON docs(kind, parent, name)"
        " WHERE name <> '';"},
};

#define SCHEMA_LATEST \
	(migrations[sizeof(migrations) / sizeof(migrations[0]) - 1].version)

/* Keep SQLite's message and map @rc (an extended result code). */
static int db_err(struct sq_store *q, int rc)
{
	snprintf(q->base.errmsg, sizeof(q->base.errmsg), "%s",
	         sqlite3_errmsg(q->db));
	switch (rc) {
	case SQLITE_CONSTRAINT_UNIQUE:
	case SQLITE_CONSTRAINT_PRIMARYKEY:
		return -CNL_EDUP;
	case SQLITE_CONSTRAINT_FOREIGNKEY:
		return -CNL_ENOTFOUND;
	case SQLITE_CONSTRAINT_CHECK:
		return -CNL_EFIELD;
	case SQLITE_NOMEM:
		return -ENOMEM;
	default:
		return -EIO;
	}
}

static int exec_sql(struct sq_store *q, const char *sql)
{
	int rc = sqlite3_exec(q->db, sql, NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : db_err(q, rc);
}

/*
 * Transactions nest: the outermost is BEGIN IMMEDIATE (BEGIN for @read),
 * the inner ones savepoints, so a wrapper's own transaction becomes part
 * of a caller's cnl_store_tx_begin().
 */
static int begin_kind(struct sq_store *q, bool read)
{
	int r;

	if (q->depth > 0 && sqlite3_get_autocommit(q->db))
		q->depth = 0; /* SQLite rolled the transaction back itself */
	r = exec_sql(q, q->depth ? "SAVEPOINT cnl"
	                : read   ? "BEGIN"
	                         : "BEGIN IMMEDIATE");
	if (r == 0)
		q->depth++;
	return r;
}

static int begin(struct sq_store *q)
{
	return begin_kind(q, false);
}

/* Undo the innermost transaction, keeping the first error's message. */
static void rollback(struct sq_store *q)
{
	if (q->depth == 0)
		return;
	q->depth--;
	if (sqlite3_get_autocommit(q->db))
		q->depth = 0;
	else if (q->depth)
		sqlite3_exec(q->db, "ROLLBACK TO cnl; RELEASE cnl", NULL, NULL,
		             NULL);
	else
		sqlite3_exec(q->db, "ROLLBACK", NULL, NULL, NULL);
}

static int commit(struct sq_store *q)
{
	int r;

	if (q->depth == 0)
		return -EINVAL;
	r = exec_sql(q, q->depth > 1 ? "RELEASE cnl" : "COMMIT");
	if (r < 0) {
		rollback(q);
		return r;
	}
	q->depth--;
	return 0;
}

static int prep(struct sq_store *q, const char *sql, sqlite3_stmt **ret)
{
	int rc = sqlite3_prepare_v2(q->db, sql, -1, ret, NULL);

	return rc == SQLITE_OK ? 0 : db_err(q, rc);
}

/* Bind text that outlives the statement's use (SQLITE_STATIC). */
static int bind_text(struct sq_store *q, sqlite3_stmt *st, int i, const char *v)
{
	int rc = sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);

	return rc == SQLITE_OK ? 0 : db_err(q, rc);
}

static int bind_int(struct sq_store *q, sqlite3_stmt *st, int i, int64_t v)
{
	int rc = sqlite3_bind_int64(st, i, v);

	return rc == SQLITE_OK ? 0 : db_err(q, rc);
}

/* Run a statement that returns no rows; 0 or an error. */
static int step_done(struct sq_store *q, sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	return rc == SQLITE_DONE ? 0 : db_err(q, rc);
}

/* Copy a text column into a fixed field, truncating what does not fit. */
static void col_text(sqlite3_stmt *st, int i, char *dst, size_t size)
{
	const unsigned char *t = sqlite3_column_text(st, i);
	size_t n = t ? (size_t)sqlite3_column_bytes(st, i) : 0;

	if (n >= size)
		n = size - 1;
	if (n)
		memcpy(dst, t, n);
	dst[n] = '\0';
}

/* Row readers: the column order is that of the *_COLS lists. */
#define PROJECT_COLS "id, name, on_prem_only, created_ms"

static void read_project(sqlite3_stmt *st, void *out)
{
	struct cnl_store_project *p = out;

	memset(p, 0, sizeof(*p));
	col_text(st, 0, p->id, sizeof(p->id));
	col_text(st, 1, p->name, sizeof(p->name));
	p->on_prem_only = sqlite3_column_int(st, 2) != 0;
	p->created_ms = sqlite3_column_int64(st, 3);
}

#define USER_COLS "id, name, password_hash, created_ms"

static void read_user(sqlite3_stmt *st, void *out)
{
	struct cnl_store_user *u = out;

	memset(u, 0, sizeof(*u));
	col_text(st, 0, u->id, sizeof(u->id));
	col_text(st, 1, u->name, sizeof(u->name));
	col_text(st, 2, u->password_hash, sizeof(u->password_hash));
	u->created_ms = sqlite3_column_int64(st, 3);
}

static void read_membership(sqlite3_stmt *st, void *out)
{
	struct cnl_store_membership *m = out;

	memset(m, 0, sizeof(*m));
	col_text(st, 0, m->user_id, sizeof(m->user_id));
	col_text(st, 1, m->project_id, sizeof(m->project_id));
	col_text(st, 2, m->role, sizeof(m->role));
}

#define JOB_COLS                                                 \
	"id, project_id, user_id, command, profile, gpu_shape, " \
	"priority, deadline_ms, runtime_ms, state, exit_code, "  \
	"created_ms, updated_ms, run"

static void read_job(sqlite3_stmt *st, void *out)
{
	struct cnl_store_job *j = out;

	memset(j, 0, sizeof(*j));
	col_text(st, 0, j->id, sizeof(j->id));
	col_text(st, 1, j->project_id, sizeof(j->project_id));
	col_text(st, 2, j->user_id, sizeof(j->user_id));
	col_text(st, 3, j->command, sizeof(j->command));
	col_text(st, 4, j->profile, sizeof(j->profile));
	col_text(st, 5, j->gpu_shape, sizeof(j->gpu_shape));
	j->priority = sqlite3_column_int(st, 6);
	j->deadline_ms = sqlite3_column_int64(st, 7);
	j->runtime_ms = sqlite3_column_int64(st, 8);
	col_text(st, 9, j->state, sizeof(j->state));
	j->exit_code = sqlite3_column_int(st, 10);
	j->created_ms = sqlite3_column_int64(st, 11);
	j->updated_ms = sqlite3_column_int64(st, 12);
	col_text(st, 13, j->run, sizeof(j->run));
}

#define SERVER_COLS                                                   \
	"id, project_id, user_id, name, image, profile, storage_gb, " \
	"idle_timeout_s, state, url, created_ms, run"

static void read_server(sqlite3_stmt *st, void *out)
{
	struct cnl_store_server *v = out;

	memset(v, 0, sizeof(*v));
	col_text(st, 0, v->id, sizeof(v->id));
	col_text(st, 1, v->project_id, sizeof(v->project_id));
	col_text(st, 2, v->user_id, sizeof(v->user_id));
	col_text(st, 3, v->name, sizeof(v->name));
	col_text(st, 4, v->image, sizeof(v->image));
	col_text(st, 5, v->profile, sizeof(v->profile));
	v->storage_gb = sqlite3_column_int64(st, 6);
	v->idle_timeout_s = sqlite3_column_int64(st, 7);
	col_text(st, 8, v->state, sizeof(v->state));
	col_text(st, 9, v->url, sizeof(v->url));
	v->created_ms = sqlite3_column_int64(st, 10);
	col_text(st, 11, v->run, sizeof(v->run));
}

#define AUDIT_COLS "seq, ts_ms, actor, action, target, result, prev_hash, hash"

static void read_audit(sqlite3_stmt *st, void *out)
{
	struct cnl_store_audit *a = out;

	memset(a, 0, sizeof(*a));
	a->seq = sqlite3_column_int64(st, 0);
	a->ts_ms = sqlite3_column_int64(st, 1);
	col_text(st, 2, a->actor, sizeof(a->actor));
	col_text(st, 3, a->action, sizeof(a->action));
	col_text(st, 4, a->target, sizeof(a->target));
	col_text(st, 5, a->result, sizeof(a->result));
	col_text(st, 6, a->prev_hash, sizeof(a->prev_hash));
	col_text(st, 7, a->hash, sizeof(a->hash));
}

/*
 * Run @sql with the text @k1 (and @k2 unless NULL) bound as ?1 (?2) and read
 * its one row into @ret with @read: 0, -CNL_ENOTFOUND or an error.
 */
static int get_one(struct sq_store *q, const char *sql, const char *k1,
                   const char *k2, void (*read)(sqlite3_stmt *, void *),
                   void *ret)
{
	sqlite3_stmt *st = NULL;
	int r, rc;

	if ((r = prep(q, sql, &st)) < 0)
		return r;
	if ((r = bind_text(q, st, 1, k1)) < 0)
		goto out;
	if (k2 && (r = bind_text(q, st, 2, k2)) < 0)
		goto out;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		read(st, ret);
	else
		r = rc == SQLITE_DONE ? -CNL_ENOTFOUND : db_err(q, rc);
out:
	sqlite3_finalize(st);
	return r;
}

/*
 * One page: @sql takes ?1 the filter (bound only when @filter is not NULL),
 * ?2 the cursor ("" when @after is NULL: every text key sorts after it) and
 * ?3 the limit.  Rows go to @out, @size bytes apart.
 */
static int list_page(struct sq_store *q, const char *sql, const char *filter,
                     const char *after, int limit,
                     void (*read)(sqlite3_stmt *, void *), void *out,
                     size_t size, int *ret_n)
{
	sqlite3_stmt *st = NULL;
	int r, rc, n = 0;

	if ((r = prep(q, sql, &st)) < 0)
		return r;
	if (filter && (r = bind_text(q, st, 1, filter)) < 0)
		goto out;
	if ((r = bind_text(q, st, 2, after ? after : "")) < 0)
		goto out;
	if ((r = bind_int(q, st, 3, limit)) < 0)
		goto out;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && n < limit)
		read(st, (char *)out + (size_t)n++ * size);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		r = db_err(q, rc);
		goto out;
	}
	*ret_n = n;
out:
	sqlite3_finalize(st);
	return r;
}

static void sq_close(struct cnl_store *s)
{
	struct sq_store *q = sq(s);

	sqlite3_close(q->db);
	free(q);
}

/* The highest applied migration, 0 for a new file, or an error. */
static int read_version(struct sq_store *q)
{
	sqlite3_stmt *st = NULL;
	int r, rc;

	if ((r = prep(q, "SELECT COALESCE(MAX(version), 0) FROM schema_version",
	              &st)) < 0)
		return r;
	rc = sqlite3_step(st);
	r = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : db_err(q, rc);
	sqlite3_finalize(st);
	return r;
}

static int sq_schema_version(struct cnl_store *s)
{
	return read_version(sq(s));
}

static int sq_project_create(struct cnl_store *s,
                             const struct cnl_store_project *in)
{
	struct sq_store *q = sq(s);
	sqlite3_stmt *st = NULL;
	int r;

	if ((r = prep(q,
	              "INSERT INTO projects (" PROJECT_COLS
	              ") VALUES (?1, ?2, ?3, ?4)",
	              &st)) < 0)
		return r;
	if ((r = bind_text(q, st, 1, in->id)) < 0 ||
	    (r = bind_text(q, st, 2, in->name)) < 0 ||
	    (r = bind_int(q, st, 3, in->on_prem_only ? 1 : 0)) < 0 ||
	    (r = bind_int(q, st, 4, in->created_ms)) < 0)
		goto out;
	r = step_done(q, st);
out:
	sqlite3_finalize(st);
	return r;
}

static int sq_project_get(struct cnl_store *s, const char *id,
                          struct cnl_store_project *ret)
{
	return get_one(sq(s),
	               "SELECT " PROJECT_COLS " FROM projects WHERE id = ?1",
	               id, NULL, read_project, ret);
}

static int sq_project_get_by_name(struct cnl_store *s, const char *name,
                                  struct cnl_store_project *ret)
{
	return get_one(sq(s),
	               "SELECT " PROJECT_COLS " FROM projects WHERE name = ?1",
	               name, NULL, read_project, ret);
}

static int sq_project_list(struct cnl_store *s, const char *after_id, int limit,
                           struct cnl_store_project *out, int *ret_n)
{
	return list_page(sq(s),
	                 "SELECT " PROJECT_COLS " FROM projects WHERE id > ?2"
	                 " ORDER BY id LIMIT ?3",
	                 NULL, after_id, limit, read_project, out, sizeof(*out),
	                 ret_n);
}

static int sq_user_create(struct cnl_store *s, const struct cnl_store_user *in)
{
	struct sq_store *q = sq(s);
	sqlite3_stmt *st = NULL;
	int r;

	if ((r = prep(
	         q, "INSERT INTO users (" USER_COLS ") VALUES (?1, ?2, ?3, ?4)",
	         &st)) < 0)
		return r;
	if ((r = bind_text(q, st, 1, in->id)) < 0 ||
	    (r = bind_text(q, st, 2, in->name)) < 0 ||
	    (r = bind_text(q, st, 3, in->password_hash)) < 0 ||
	    (r = bind_int(q, st, 4, in->created_ms)) < 0)
		goto out;
	r = step_done(q, st);
out:
	sqlite3_finalize(st);
	return r;
}

static int sq_user_get(struct cnl_store *s, const char *id,
                       struct cnl_store_user *ret)
{
	return get_one(sq(s), "SELECT " USER_COLS " FROM users WHERE id = ?1",
	               id, NULL, read_user, ret);
}

static int sq_user_get_by_name(struct cnl_store *s, const char *name,
                               struct cnl_store_user *ret)
{
	return get_one(sq(s), "SELECT " USER_COLS " FROM users WHERE name = ?1",
	               name, NULL, read_user, ret);
}

static int sq_membership_set(struct cnl_store *s,
                             const struct cnl_store_membership *in)
{
	struct sq_store *q = sq(s);
	sqlite3_stmt *st = NULL;
	int r;

	if ((r = prep(q,
	              "INSERT INTO memberships (user_id, project_id, role)"
	              " VALUES (?1, ?2, ?3) ON CONFLICT (user_id, project_id)"
	              " DO UPDATE SET role = excluded.role",
	              &st)) < 0)
		return r;
	if ((r = bind_text(q, st, 1, in->user_id)) < 0 ||
	    (r = bind_text(q, st, 2, in->project_id)) < 0 ||
	    (r = bind_text(q, st, 3, in->role)) < 0)
		goto out;
	r = step_done(q, st);
out:
	sqlite3_finalize(st);
	return r;
}

static int sq_membership_get_role(struct cnl_store *s, const char *user_id,
                                  const char *project_id, char *ret_role,
                                  size_t len)
{
	struct cnl_store_membership m;
	int r;

	r = get_one(sq(s),
	            "SELECT user_id, project_id, role FROM memberships"
	            " WHERE user_id = ?1 AND project_id = ?2",
	            user_id, project_id, read_membership, &m);
	if (r < 0)
		return r;
	snprintf(ret_role, len, "%s", m.role);
	return 0;
}

static int sq_membership_list(struct cnl_store *s, const char *user_id,
                              const char *after_project_id, int limit,
                              struct cnl_store_membership *out, int *ret_n)
{
	return list_page(sq(s),
	                 "SELECT user_id, project_id, role FROM memberships"
	                 " WHERE user_id = ?1 AND project_id > ?2"
	                 " ORDER BY project_id LIMIT ?3",
	                 user_id, after_project_id, limit, read_membership, out,
	                 sizeof(*out), ret_n);
}

static int insert_job(struct sq_store *q, const void *obj)
{
	const struct cnl_store_job *in = obj;
	sqlite3_stmt *st = NULL;
	int r;

	if ((r = prep(q,
	              "INSERT INTO jobs (" JOB_COLS ") VALUES (?1, ?2, ?3, ?4,"
	              " ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
	              &st)) < 0)
		return r;
	if ((r = bind_text(q, st, 1, in->id)) < 0 ||
	    (r = bind_text(q, st, 2, in->project_id)) < 0 ||
	    (r = bind_text(q, st, 3, in->user_id)) < 0 ||
	    (r = bind_text(q, st, 4, in->command)) < 0 ||
	    (r = bind_text(q, st, 5, in->profile)) < 0 ||
	    (r = bind_text(q, st, 6, in->gpu_shape)) < 0 ||
	    (r = bind_int(q, st, 7, in->priority)) < 0 ||
	    (r = bind_int(q, st, 8, in->deadline_ms)) < 0 ||
	    (r = bind_int(q, st, 9, in->runtime_ms)) < 0 ||
	    (r = bind_text(q, st, 10, in->state)) < 0 ||
	    (r = bind_int(q, st, 11, in->exit_code)) < 0 ||
	    (r = bind_int(q, st, 12, in->created_ms)) < 0 ||
	    (r = bind_int(q, st, 13, in->updated_ms)) < 0 ||
	    (r = bind_text(q, st, 14, in->run[0] ? in->run : "{}")) < 0)
		goto out;
	r = step_done(q, st);
out:
	sqlite3_finalize(st);
	return r;
}

static int insert_server(struct sq_store *q, const void *obj)
{
	const struct cnl_store_server *in = obj;
	sqlite3_stmt *st = NULL;
	int r;

	if ((r = prep(q,
	              "INSERT INTO servers (" SERVER_COLS ") VALUES (?1, ?2,"
	              " ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
	              &st)) < 0)
		return r;
	if ((r = bind_text(q, st, 1, in->id)) < 0 ||
	    (r = bind_text(q, st, 2, in->project_id)) < 0 ||
	    (r = bind_text(q, st, 3, in->user_id)) < 0 ||
	    (r = bind_text(q, st, 4, in->name)) < 0 ||
	    (r = bind_text(q, st, 5, in->image)) < 0 ||
	    (r = bind_text(q, st, 6, in->profile)) < 0 ||
	    (r = bind_int(q, st, 7, in->storage_gb)) < 0 ||
	    (r = bind_int(q, st, 8, in->idle_timeout_s)) < 0 ||
	    (r = bind_text(q, st, 9, in->state)) < 0 ||
	    (r = bind_text(q, st, 10, in->url)) < 0 ||
	    (r = bind_int(q, st, 11, in->created_ms)) < 0 ||
	    (r = bind_text(q, st, 12, in->run[0] ? in->run : "{}")) < 0)
		goto out;
	r = step_done(q, st);
out:
	sqlite3_finalize(st);
	return r;
}

/* What idempotent_create needs to know about one kind of object. */
struct idem_kind {
	const char *kind; /* stored in idempotency.kind */
	const char *get_sql;
	void (*read)(sqlite3_stmt *, void *);
	int (*insert)(struct sq_store *q, const void *obj);
	size_t size;
};

static const struct idem_kind job_kind = {
    "job",
    "SELECT " JOB_COLS " FROM jobs WHERE id = ?1",
    read_job,
    insert_job,
    sizeof(struct cnl_store_job),
};

static const struct idem_kind server_kind = {
    "server",
    "SELECT " SERVER_COLS " FROM servers WHERE id = ?1",
    read_server,
    insert_server,
    sizeof(struct cnl_store_server),
};

/*
 * Look up @key: 1 with the kind and object id written out, 0 when unused,
 * or an error.
 */
static int idem_lookup(struct sq_store *q, const char *key, char *kind,
                       size_t kindlen, char *object_id, size_t idlen)
{
	sqlite3_stmt *st = NULL;
	int r, rc;

	if ((r = prep(q,
	              "SELECT kind, object_id FROM idempotency WHERE key = ?1",
	              &st)) < 0)
		return r;
	if ((r = bind_text(q, st, 1, key)) < 0)
		goto out;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		col_text(st, 0, kind, kindlen);
		col_text(st, 1, object_id, idlen);
		r = 1;
	} else {
		r = rc == SQLITE_DONE ? 0 : db_err(q, rc);
	}
out:
	sqlite3_finalize(st);
	return r;
}

static int idem_insert(struct sq_store *q, const char *key, const char *kind,
                       const char *object_id, int64_t created_ms)
{
	sqlite3_stmt *st = NULL;
	int r;

	if ((r = prep(q,
	              "INSERT INTO idempotency (key, kind, object_id,"
	              " created_ms) VALUES (?1, ?2, ?3, ?4)",
	              &st)) < 0)
		return r;
	if ((r = bind_text(q, st, 1, key)) < 0 ||
	    (r = bind_text(q, st, 2, kind)) < 0 ||
	    (r = bind_text(q, st, 3, object_id)) < 0 ||
	    (r = bind_int(q, st, 4, created_ms)) < 0)
		goto out;
	r = step_done(q, st);
out:
	sqlite3_finalize(st);
	return r;
}

/*
 * Store @in (whose id, user id and creation time are given separately, the
 * structs differing) under @key in one transaction, or return the original
 * object of an earlier call with the same key.
 */
static int idempotent_create(struct sq_store *q, const struct idem_kind *k,
                             const void *in, const char *id,
                             const char *user_id, int64_t created_ms,
                             const char *key, void *ret)
{
	union {
		struct cnl_store_job job;
		struct cnl_store_server server;
	} orig;
	char kind[16], object_id[CNL_ID_MAX];
	int r;

	if ((r = begin(q)) < 0)
		return r;
	if (key) {
		r = idem_lookup(q, key, kind, sizeof(kind), object_id,
		                sizeof(object_id));
		if (r < 0)
			goto fail;
		if (r == 1) {
			if (strcmp(kind, k->kind) != 0) {
				r = -CNL_EDUP;
				goto fail;
			}
			r = get_one(q, k->get_sql, object_id, NULL, k->read,
			            &orig);
			if (r < 0)
				goto fail;
			/* Both structs start id, project_id, user_id. */
			if (strcmp(k == &job_kind ? orig.job.user_id
			                          : orig.server.user_id,
			           user_id) != 0) {
				r = -CNL_EDUP;
				goto fail;
			}
			if ((r = commit(q)) < 0)
				return r;
			if (ret)
				memcpy(ret, &orig, k->size);
			return CNL_STORE_REPLAYED;
		}
	}
	if ((r = k->insert(q, in)) < 0)
		goto fail;
	if (key && (r = idem_insert(q, key, k->kind, id, created_ms)) < 0)
		goto fail;
	if ((r = commit(q)) < 0)
		return r;
	if (ret)
		memcpy(ret, in, k->size);
	return CNL_STORE_CREATED;
fail:
	rollback(q);
	return r;
}

static int sq_job_create(struct cnl_store *s, const struct cnl_store_job *in,
                         const char *idem_key, struct cnl_store_job *ret)
{
	int r = idempotent_create(sq(s), &job_kind, in, in->id, in->user_id,
	                          in->created_ms, idem_key, ret);

	if (r == CNL_STORE_CREATED && ret && !ret->run[0])
		memcpy(ret->run, "{}", 3); /* as stored */
	return r;
}

static int sq_job_get(struct cnl_store *s, const char *id,
                      struct cnl_store_job *ret)
{
	return get_one(sq(s), job_kind.get_sql, id, NULL, read_job, ret);
}

static int sq_job_list(struct cnl_store *s, const char *project_id,
                       const char *after_id, int limit,
                       struct cnl_store_job *out, int *ret_n)
{
	const char *sql =
	    project_id ? "SELECT " JOB_COLS " FROM jobs WHERE project_id = ?1"
	                 " AND id > ?2 ORDER BY id LIMIT ?3"
	               : "SELECT " JOB_COLS " FROM jobs WHERE id > ?2"
	                 " ORDER BY id LIMIT ?3";

	return list_page(sq(s), sql, project_id, after_id, limit, read_job, out,
	                 sizeof(*out), ret_n);
}

static int sq_job_update_state(struct cnl_store *s, const char *id,
                               const char *state, int exit_code,
                               int64_t updated_ms)
{
	struct sq_store *q = sq(s);
	sqlite3_stmt *st = NULL;
	int r;

	if ((r = prep(q,
	              "UPDATE jobs SET state = ?2, exit_code = ?3,"
	              " updated_ms = ?4 WHERE id = ?1",
	              &st)) < 0)
		return r;
	if ((r = bind_text(q, st, 1, id)) < 0 ||
	    (r = bind_text(q, st, 2, state)) < 0 ||
	    (r = bind_int(q, st, 3, exit_code)) < 0 ||
	    (r = bind_int(q, st, 4, updated_ms)) < 0)
		goto out;
	if ((r = step_done(q, st)) < 0)
		goto out;
	if (sqlite3_changes(q->db) == 0)
		r = -CNL_ENOTFOUND;
out:
	sqlite3_finalize(st);
	return r;
}

static int sq_server_create(struct cnl_store *s,
                            const struct cnl_store_server *in,
                            const char *idem_key, struct cnl_store_server *ret)
{
	int r = idempotent_create(sq(s), &server_kind, in, in->id, in->user_id,
	                          in->created_ms, idem_key, ret);

	if (r == CNL_STORE_CREATED && ret && !ret->run[0])
		memcpy(ret->run, "{}", 3); /* as stored */
	return r;
}

static int sq_server_get(struct cnl_store *s, const char *id,
                         struct cnl_store_server *ret)
{
	return get_one(sq(s), server_kind.get_sql, id, NULL, read_server, ret);
}

static int sq_server_list(struct cnl_store *s, const char *project_id,
                          const char *after_id, int limit,
                          struct cnl_store_server *out, int *ret_n)
{
	const char *sql =
	    project_id ? "SELECT " SERVER_COLS " FROM servers WHERE"
	                 " project_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3"
	               : "SELECT " SERVER_COLS " FROM servers WHERE id > ?2"
	                 " ORDER BY id LIMIT ?3";

	return list_page(sq(s), sql, project_id, after_id, limit, read_server,
	                 out, sizeof(*out), ret_n);
}

/*
 * The hash of @a (its seq, ts_ms and four texts) chained to @prev_hash,
 * as 64 lowercase hex digits in @hex.  0, -ENOMEM or -EIO.
 */
static int audit_hash(const struct cnl_store_audit *a, const char *prev_hash,
                      char hex[CNL_STORE_SHA256_HEX])
{
	/* 64 + 4 texts of < CNL_STORE_AUDIT_MAX + labels and numbers. */
	char buf[64 + 4 * CNL_STORE_AUDIT_MAX + 256];
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int n;

	n = snprintf(buf, sizeof(buf),
	             "%.64s"
	             "cnlab-audit-v1\nseq=%lld\nts_ms=%lld\n"
	             "actor=%zu:%s\naction=%zu:%s\ntarget=%zu:%s\n"
	             "result=%zu:%s\n",
	             prev_hash, (long long)a->seq, (long long)a->ts_ms,
	             strlen(a->actor), a->actor, strlen(a->action), a->action,
	             strlen(a->target), a->target, strlen(a->result),
	             a->result);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return -EIO;
	if (EVP_Digest(buf, (size_t)n, md, &mdlen, EVP_sha256(), NULL) != 1 ||
	    mdlen != 32)
		return -EIO;
	for (unsigned int i = 0; i < mdlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return 0;
}

static int sq_audit_append(struct cnl_store *s,
                           const struct cnl_store_audit *in,
                           struct cnl_store_audit *ret)
{
	struct sq_store *q = sq(s);
	struct cnl_store_audit a = *in;
	sqlite3_stmt *st = NULL;
	int r, rc;

	if ((r = begin(q)) < 0)
		return r;
	/* The chain links to the record with the highest seq, if any. */
	if ((r = prep(q, "SELECT hash FROM audit ORDER BY seq DESC LIMIT 1",
	              &st)) < 0)
		goto fail;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		col_text(st, 0, a.prev_hash, sizeof(a.prev_hash));
	} else if (rc == SQLITE_DONE) {
		snprintf(a.prev_hash, sizeof(a.prev_hash), "%s", ZERO_HASH);
	} else {
		r = db_err(q, rc);
		goto fail;
	}
	sqlite3_finalize(st);
	st = NULL;

	/* Insert to learn seq from AUTOINCREMENT, then fill in the hash. */
	if ((r = prep(q,
	              "INSERT INTO audit (ts_ms, actor, action, target,"
	              " result, prev_hash, hash)"
	              " VALUES (?1, ?2, ?3, ?4, ?5, ?6, '')",
	              &st)) < 0)
		goto fail;
	if ((r = bind_int(q, st, 1, a.ts_ms)) < 0 ||
	    (r = bind_text(q, st, 2, a.actor)) < 0 ||
	    (r = bind_text(q, st, 3, a.action)) < 0 ||
	    (r = bind_text(q, st, 4, a.target)) < 0 ||
	    (r = bind_text(q, st, 5, a.result)) < 0 ||
	    (r = bind_text(q, st, 6, a.prev_hash)) < 0 ||
	    (r = step_done(q, st)) < 0)
		goto fail;
	sqlite3_finalize(st);
	st = NULL;
	a.seq = sqlite3_last_insert_rowid(q->db);
	if ((r = audit_hash(&a, a.prev_hash, a.hash)) < 0)
		goto fail;

	if ((r = prep(q, "UPDATE audit SET hash = ?2 WHERE seq = ?1", &st)) < 0)
		goto fail;
	if ((r = bind_int(q, st, 1, a.seq)) < 0 ||
	    (r = bind_text(q, st, 2, a.hash)) < 0 || (r = step_done(q, st)) < 0)
		goto fail;
	sqlite3_finalize(st);
	st = NULL;
	if ((r = commit(q)) < 0)
		return r;
	if (ret)
		*ret = a;
	return 0;
fail:
	sqlite3_finalize(st);
	rollback(q);
	return r;
}

static int sq_audit_list(struct cnl_store *s, int64_t after_seq, int limit,
                         struct cnl_store_audit *out, int *ret_n)
{
	struct sq_store *q = sq(s);
	sqlite3_stmt *st = NULL;
	int r, rc, n = 0;

	if ((r = prep(q,
	              "SELECT " AUDIT_COLS " FROM audit WHERE seq > ?1"
	              " ORDER BY seq LIMIT ?2",
	              &st)) < 0)
		return r;
	if ((r = bind_int(q, st, 1, after_seq)) < 0 ||
	    (r = bind_int(q, st, 2, limit)) < 0)
		goto out;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && n < limit)
		read_audit(st, &out[n++]);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		r = db_err(q, rc);
		goto out;
	}
	*ret_n = n;
out:
	sqlite3_finalize(st);
	return r;
}

/* A text column that col_text() would have to truncate cannot be genuine. */
static bool audit_row_fits(sqlite3_stmt *st)
{
	for (int i = 2; i <= 5; i++)
		if (sqlite3_column_bytes(st, i) >= CNL_STORE_AUDIT_MAX)
			return false;
	return sqlite3_column_bytes(st, 6) == 64 &&
	       sqlite3_column_bytes(st, 7) == 64;
}

static int sq_audit_verify(struct cnl_store *s, int64_t *ret_bad_seq)
{
	struct sq_store *q = sq(s);
	struct cnl_store_audit a;
	char prev[CNL_STORE_SHA256_HEX] = ZERO_HASH;
	char hex[CNL_STORE_SHA256_HEX];
	sqlite3_stmt *st = NULL;
	int64_t want = 1, bad = 0;
	int r, rc;

	/* One read transaction, so the chain is checked as of one instant. */
	if ((r = begin_kind(q, true)) < 0)
		return r;
	if ((r = prep(q, "SELECT " AUDIT_COLS " FROM audit ORDER BY seq",
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
		if ((r = audit_hash(&a, prev, hex)) < 0)
			goto out;
		if (strcmp(hex, a.hash) != 0) {
			bad = a.seq;
			break;
		}
		memcpy(prev, a.hash, sizeof(prev));
		want++;
	}
	if (!bad && rc != SQLITE_DONE) {
		r = db_err(q, rc);
		goto out;
	}
	if (bad) {
		if (ret_bad_seq)
			*ret_bad_seq = bad;
		r = -CNL_ECORRUPT;
	}
out:
	sqlite3_finalize(st);
	rollback(q);
	return r;
}

static int sq_tx(struct cnl_store *s, int op)
{
	struct sq_store *q = sq(s);

	switch (op) {
	case 0:
		return begin(q);
	case 1:
		return commit(q);
	default:
		if (q->depth == 0)
			return -EINVAL;
		rollback(q);
		return 0;
	}
}

/* Run @sql, which binds ?1..?n from @texts (NULL ends) and changes rows:
 * 0, -CNL_ENOTFOUND when no row changed, or an error. */
static int update_rows(struct sq_store *q, const char *sql,
                       const char *const *texts, const int64_t *ints, int nints)
{
	sqlite3_stmt *st = NULL;
	int r, i = 0;

	if ((r = prep(q, sql, &st)) < 0)
		return r;
	for (; texts[i]; i++)
		if ((r = bind_text(q, st, i + 1, texts[i])) < 0)
			goto out;
	for (int k = 0; k < nints; k++)
		if ((r = bind_int(q, st, i + k + 1, ints[k])) < 0)
			goto out;
	if ((r = step_done(q, st)) < 0)
		goto out;
	if (sqlite3_changes(q->db) == 0)
		r = -CNL_ENOTFOUND;
out:
	sqlite3_finalize(st);
	return r;
}

static int sq_project_set_flags(struct cnl_store *s, const char *id,
                                bool on_prem_only)
{
	const char *t[] = {id, NULL};
	int64_t v = on_prem_only;

	return update_rows(
	    sq(s), "UPDATE projects SET on_prem_only = ?2 WHERE id = ?1", t, &v,
	    1);
}

static int sq_user_list(struct cnl_store *s, const char *after_id, int limit,
                        struct cnl_store_user *out, int *ret_n)
{
	return list_page(sq(s),
	                 "SELECT " USER_COLS " FROM users WHERE id > ?2"
	                 " ORDER BY id LIMIT ?3",
	                 NULL, after_id, limit, read_user, out, sizeof(*out),
	                 ret_n);
}

static int sq_membership_list_project(struct cnl_store *s,
                                      const char *project_id,
                                      const char *after_user_id, int limit,
                                      struct cnl_store_membership *out,
                                      int *ret_n)
{
	return list_page(sq(s),
	                 "SELECT user_id, project_id, role FROM memberships"
	                 " WHERE project_id = ?1 AND user_id > ?2"
	                 " ORDER BY user_id LIMIT ?3",
	                 project_id, after_user_id, limit, read_membership, out,
	                 sizeof(*out), ret_n);
}

static int sq_job_list_state(struct cnl_store *s, const char *state,
                             const char *after_id, int limit,
                             struct cnl_store_job *out, int *ret_n)
{
	return list_page(sq(s),
	                 "SELECT " JOB_COLS " FROM jobs WHERE state = ?1"
	                 " AND id > ?2 ORDER BY id LIMIT ?3",
	                 state, after_id, limit, read_job, out, sizeof(*out),
	                 ret_n);
}

static int sq_job_update_run(struct cnl_store *s, const char *id,
                             const char *state, int exit_code,
                             int64_t updated_ms, const char *run)
{
	const char *t[] = {id, state, run, NULL};
	int64_t v[] = {exit_code, updated_ms};

	return update_rows(sq(s),
	                   "UPDATE jobs SET state = ?2, run = ?3,"
	                   " exit_code = ?4, updated_ms = ?5 WHERE id = ?1",
	                   t, v, 2);
}

static int sq_server_update(struct cnl_store *s, const char *id,
                            const char *state, const char *url, const char *run)
{
	const char *t[] = {id, state, url, run, NULL};

	return update_rows(sq(s),
	                   "UPDATE servers SET state = ?2, url = ?3, run = ?4"
	                   " WHERE id = ?1",
	                   t, NULL, 0);
}

static int sq_server_delete(struct cnl_store *s, const char *id)
{
	const char *t[] = {id, NULL};

	return update_rows(sq(s), "DELETE FROM servers WHERE id = ?1", t, NULL,
	                   0);
}

static int sq_user_set_password(struct cnl_store *s, const char *id,
                                const char *password_hash)
{
	const char *t[] = {id, password_hash, NULL};

	return update_rows(sq(s),
	                   "UPDATE users SET password_hash = ?2 WHERE id = ?1",
	                   t, NULL, 0);
}

static int sq_membership_delete(struct cnl_store *s, const char *user_id,
                                const char *project_id)
{
	const char *t[] = {user_id, project_id, NULL};

	return update_rows(sq(s),
	                   "DELETE FROM memberships WHERE user_id = ?1 AND"
	                   " project_id = ?2",
	                   t, NULL, 0);
}

/* How many rows @sql (binding ?1 to @id) counts into *@ret. */
static int count_rows(struct sq_store *q, const char *sql, const char *id,
                      int64_t *ret)
{
	sqlite3_stmt *st = NULL;
	int r;

	if ((r = prep(q, sql, &st)) < 0)
		return r;
	if ((r = bind_text(q, st, 1, id)) == 0) {
		int rc = sqlite3_step(st);

		if (rc == SQLITE_ROW)
			*ret = sqlite3_column_int64(st, 0);
		else
			r = db_err(q, rc);
	}
	sqlite3_finalize(st);
	return r;
}

static int sq_project_delete(struct cnl_store *s, const char *id)
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
	struct sq_store *q = sq(s);
	const char *t[] = {id, NULL};
	int64_t busy = 0, servers = 0;
	int r;

	if ((r = begin(q)) < 0)
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
		if ((r = update_rows(q, steps[i], t, NULL, 0)) < 0 &&
		    r != -CNL_ENOTFOUND)
			goto fail;
	if ((r = update_rows(q, "DELETE FROM projects WHERE id = ?1", t, NULL,
	                     0)) < 0)
		goto fail;
	return commit(q);
fail:
	rollback(q);
	return r;
}

#define DOC_COLS "kind, id, parent, name, body, updated_ms"

/* Reads a document; the body is malloc'd (NULL when out of memory, which
 * the callers turn into -ENOMEM). */
static void read_doc(sqlite3_stmt *st, void *out)
{
	struct cnl_store_doc *d = out;
	const unsigned char *b;
	size_t n;

	memset(d, 0, sizeof(*d));
	col_text(st, 0, d->kind, sizeof(d->kind));
	col_text(st, 1, d->id, sizeof(d->id));
	col_text(st, 2, d->parent, sizeof(d->parent));
	col_text(st, 3, d->name, sizeof(d->name));
	b = sqlite3_column_text(st, 4);
	n = b ? (size_t)sqlite3_column_bytes(st, 4) : 0;
	if ((d->body = malloc(n + 1))) {
		if (n)
			memcpy(d->body, b, n);
		d->body[n] = '\0';
	}
	d->updated_ms = sqlite3_column_int64(st, 5);
}

static int sq_doc_put(struct cnl_store *s, const struct cnl_store_doc *in,
                      bool create)
{
	const char *t[] = {in->kind, in->id,   in->parent,
	                   in->name, in->body, NULL};
	int64_t v = in->updated_ms;
	int r = update_rows(sq(s),
	                    create ? "INSERT INTO docs (" DOC_COLS ") VALUES"
	                             " (?1, ?2, ?3, ?4, ?5, ?6)"
	                           : "INSERT OR REPLACE INTO docs (" DOC_COLS
	                             ") VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
	                    t, &v, 1);

	return r == -CNL_ENOTFOUND ? -EIO : r;
}

/* get_one() for documents: the body's allocation is checked. */
static int doc_one(struct sq_store *q, const char *sql, const char *k1,
                   const char *k2, const char *k3, struct cnl_store_doc *ret)
{
	sqlite3_stmt *st = NULL;
	int r, rc;

	if ((r = prep(q, sql, &st)) < 0)
		return r;
	if ((r = bind_text(q, st, 1, k1)) < 0 ||
	    (r = bind_text(q, st, 2, k2)) < 0 ||
	    (k3 && (r = bind_text(q, st, 3, k3)) < 0))
		goto out;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		read_doc(st, ret);
		if (!ret->body)
			r = -ENOMEM;
	} else {
		r = rc == SQLITE_DONE ? -CNL_ENOTFOUND : db_err(q, rc);
	}
out:
	sqlite3_finalize(st);
	return r;
}

static int sq_doc_get(struct cnl_store *s, const char *kind, const char *id,
                      struct cnl_store_doc *ret)
{
	return doc_one(sq(s),
	               "SELECT " DOC_COLS " FROM docs WHERE kind = ?1"
	               " AND id = ?2",
	               kind, id, NULL, ret);
}

static int sq_doc_get_by_name(struct cnl_store *s, const char *kind,
                              const char *parent, const char *name,
                              struct cnl_store_doc *ret)
{
	return doc_one(sq(s),
	               "SELECT " DOC_COLS " FROM docs WHERE kind = ?1"
	               " AND parent = ?2 AND name = ?3",
	               kind, parent, name, ret);
}

static int sq_doc_list(struct cnl_store *s, const char *kind,
                       const char *parent, const char *after_id, int limit,
                       struct cnl_store_doc *out, int *ret_n)
{
	struct sq_store *q = sq(s);
	sqlite3_stmt *st = NULL;
	int r, rc = SQLITE_DONE, n = 0;

	if ((r = prep(q,
	              parent ? "SELECT " DOC_COLS " FROM docs WHERE kind = ?1"
	                       " AND parent = ?4 AND id > ?2 ORDER BY id"
	                       " LIMIT ?3"
	                     : "SELECT " DOC_COLS " FROM docs WHERE kind = ?1"
	                       " AND id > ?2 ORDER BY id LIMIT ?3",
	              &st)) < 0)
		return r;
	if ((r = bind_text(q, st, 1, kind)) < 0 ||
	    (r = bind_text(q, st, 2, after_id ? after_id : "")) < 0 ||
	    (r = bind_int(q, st, 3, limit)) < 0 ||
	    (parent && (r = bind_text(q, st, 4, parent)) < 0))
		goto out;
	while (n < limit && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		read_doc(st, &out[n]);
		if (!out[n++].body) {
			r = -ENOMEM;
			break;
		}
	}
	if (r == 0 && n < limit && rc != SQLITE_DONE)
		r = db_err(q, rc);
	if (r < 0)
		cnl_store_docs_done(out, n);
	else
		*ret_n = n;
out:
	sqlite3_finalize(st);
	return r;
}

static int sq_doc_delete(struct cnl_store *s, const char *kind, const char *id)
{
	const char *t[] = {kind, id, NULL};

	return update_rows(
	    sq(s), "DELETE FROM docs WHERE kind = ?1 AND id = ?2", t, NULL, 0);
}

static const struct cnl_store_ops sqlite_ops = {
    .name = "sqlite",
    .close = sq_close,
    .schema_version = sq_schema_version,
    .project_create = sq_project_create,
    .project_get = sq_project_get,
    .project_get_by_name = sq_project_get_by_name,
    .project_list = sq_project_list,
    .user_create = sq_user_create,
    .user_get = sq_user_get,
    .user_get_by_name = sq_user_get_by_name,
    .membership_set = sq_membership_set,
    .membership_get_role = sq_membership_get_role,
    .membership_list = sq_membership_list,
    .job_create = sq_job_create,
    .job_get = sq_job_get,
    .job_list = sq_job_list,
    .job_update_state = sq_job_update_state,
    .server_create = sq_server_create,
    .server_get = sq_server_get,
    .server_list = sq_server_list,
    .tx = sq_tx,
    .project_set_flags = sq_project_set_flags,
    .user_list = sq_user_list,
    .membership_list_project = sq_membership_list_project,
    .job_list_state = sq_job_list_state,
    .job_update_run = sq_job_update_run,
    .server_update = sq_server_update,
    .server_delete = sq_server_delete,
    .user_set_password = sq_user_set_password,
    .membership_delete = sq_membership_delete,
    .project_delete = sq_project_delete,
    .doc_put = sq_doc_put,
    .doc_get = sq_doc_get,
    .doc_get_by_name = sq_doc_get_by_name,
    .doc_list = sq_doc_list,
    .doc_delete = sq_doc_delete,
    .audit_append = sq_audit_append,
    .audit_list = sq_audit_list,
    .audit_verify = sq_audit_verify,
};

__attribute__((format(printf, 3, 4))) static void
set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* Apply every migration newer than the file; see invariant 4. */
static int migrate(struct sq_store *q, char *err, size_t errlen)
{
	int r, cur;

	if ((r = exec_sql(q, "CREATE TABLE IF NOT EXISTS schema_version ("
	                     " version INTEGER PRIMARY KEY,"
	                     " applied_ms INTEGER NOT NULL)")) < 0)
		goto sqlerr;
	if ((cur = read_version(q)) < 0) {
		r = cur;
		goto sqlerr;
	}
	if (cur > SCHEMA_LATEST) {
		set_err(err, errlen,
		        "database schema version %d is newer than this build "
		        "supports (%d); upgrade cnlab",
		        cur, SCHEMA_LATEST);
		return -CNL_ECONFIG;
	}
	for (size_t i = 0; i < sizeof(migrations) / sizeof(migrations[0]);
	     i++) {
		const struct migration *m = &migrations[i];
		sqlite3_stmt *st = NULL;

		if (m->version <= cur)
			continue;
		if ((r = begin(q)) < 0)
			goto sqlerr;
		/* Another process may have migrated while we waited. */
		if ((cur = read_version(q)) < 0) {
			r = cur;
			goto fail;
		}
		if (m->version <= cur) {
			rollback(q);
			continue;
		}
		if ((r = exec_sql(q, m->sql)) < 0)
			goto fail;
		if ((r = prep(q,
		              "INSERT INTO schema_version (version, applied_ms)"
		              " VALUES (?1, ?2)",
		              &st)) < 0)
			goto fail;
		if ((r = bind_int(q, st, 1, m->version)) < 0 ||
		    (r = bind_int(q, st, 2, cnl_time_now_ms())) < 0 ||
		    (r = step_done(q, st)) < 0) {
			sqlite3_finalize(st);
			goto fail;
		}
		sqlite3_finalize(st);
		if ((r = commit(q)) < 0)
			goto sqlerr;
		cur = m->version;
	}
	return 0;
fail:
	rollback(q);
sqlerr:
	set_err(err, errlen, "schema migration failed: %s", q->base.errmsg);
	return r;
}

/* PRAGMA journal_mode answers the mode in force, which may not be WAL. */
static int set_wal(struct sq_store *q, char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int r, rc;

	if ((r = prep(q, "PRAGMA journal_mode=WAL", &st)) < 0)
		return r;
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		r = db_err(q, rc);
	} else if (sqlite3_stricmp((const char *)sqlite3_column_text(st, 0),
	                           "wal") != 0) {
		set_err(err, errlen, "cannot enable WAL journal (got %s)",
		        (const char *)sqlite3_column_text(st, 0));
		r = -EIO;
	}
	sqlite3_finalize(st);
	return r;
}

int cnl_store_open_sqlite(const char *path, struct cnl_store **ret, char *err,
                          size_t errlen)
{
	struct sq_store *q;
	int r, rc;

	if (!path || !ret)
		return -EINVAL;
	set_err(err, errlen, "%s", "");
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->base.ops = &sqlite_ops;

	rc = sqlite3_open_v2(path, &q->db,
	                     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
	if (rc != SQLITE_OK) {
		r = q->db ? db_err(q, rc) : -ENOMEM;
		set_err(err, errlen, "cannot open %s: %s", path,
		        q->db ? sqlite3_errmsg(q->db) : "out of memory");
		goto fail;
	}
	sqlite3_extended_result_codes(q->db, 1);
	sqlite3_busy_timeout(q->db, BUSY_TIMEOUT_MS);
	if ((r = set_wal(q, err, errlen)) < 0)
		goto fail_msg;
	/* FULL: sync the WAL at every commit (invariant 1). */
	if ((r = exec_sql(q, "PRAGMA synchronous=FULL")) < 0 ||
	    (r = exec_sql(q, "PRAGMA foreign_keys=ON")) < 0)
		goto fail_msg;
	if ((r = migrate(q, err, errlen)) < 0)
		goto fail;
	*ret = &q->base;
	return 0;
fail_msg:
	if (err && errlen && !err[0])
		set_err(err, errlen, "cannot set up %s: %s", path,
		        q->base.errmsg);
fail:
	sqlite3_close(q->db);
	free(q);
	return r;
}
