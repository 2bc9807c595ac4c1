/*
 * sqlite.c - the state store's SQLite backend: opening a database, its
 * schema and migrations, and the ops table that the generic layer
 * (store.c) calls through; the transactions and statement helpers every
 * query uses are in sqlite_db.c.
 *
 * The queries themselves are in one file per group of resources, sharing
 * sqlite_db.c's helpers through sqlite-internal.h: sqlite_tenancy.c
 * (projects, users, memberships), sqlite_work.c (jobs, servers,
 * idempotency keys), sqlite_docs.c (documents) and sqlite_audit.c (the
 * audit chain).  The schema stays here, whole, so one list of migrations
 * says what every table looks like.
 *
 * The backend, in numbered invariants:
 *  1. The connection runs journal_mode=WAL (readers never block the one
 *     writer) and synchronous=FULL: SQLite syncs the WAL on every commit, so
 *     a call that returned success has its write on stable storage and it
 *     survives kill -9 and power loss.  Under group commit (sqlite_sync.c)
 *     it runs synchronous=NORMAL instead: a commit is written to the WAL,
 *     and durable once the syncer's next fdatasync of the WAL covers it.
 * foreign_keys=ON makes a job, server or membership that names a missing
 * project or user fail; the failure maps to -CNL_ENOTFOUND.
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
 *     sqlite3_errmsg() kept in s->errmsg for cnl_store_errmsg(); a full
 *     disk (SQLITE_FULL, or an I/O error of ENOSPC/EDQUOT) becomes -ENOSPC
 *     (-EDQUOT), so the API can say which storage is full.  The failed
 *     write is rolled back whole: nothing stored before is lost.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cnlab/errors.h"
#include "common/time.h"
#include "common/util.h"
#include "store/sqlite-internal.h"

#define BUSY_TIMEOUT_MS 5000

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
    /* The leader's lease: PostgreSQL's (postgres_lease.c); here for the
     * versions to mean the same in both backends, never written (one
     * writer by construction: cnlabd locks its data directory). */
    {4, "CREATE TABLE leases ("
        " name TEXT PRIMARY KEY,"
        " holder TEXT NOT NULL,"
        " epoch INTEGER NOT NULL,"
        " expires_ms INTEGER NOT NULL);"},
    /* The leader's live statuses, for followers (PostgreSQL's; here for
     * the same versions: sqlite_docs.c). */
    {5, "CREATE TABLE live_status ("
        " id TEXT PRIMARY KEY,"
        " body TEXT NOT NULL CHECK (json_valid(body)),"
        " updated_ms INTEGER NOT NULL);"},
};

#define SCHEMA_LATEST \
	(migrations[sizeof(migrations) / sizeof(migrations[0]) - 1].version)

static int read_version(struct cnl_sq_store *q)
{
	sqlite3_stmt *st = NULL;
	int r, rc;

	if ((r = cnl_sq_prep(
	         q, "SELECT COALESCE(MAX(version), 0) FROM schema_version",
	         &st)) < 0)
		return r;
	rc = sqlite3_step(st);
	r = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : cnl_sq_err(q, rc);
	cnl_sq_finalize(q, st);
	return r;
}

static void sq_close(struct cnl_store *s)
{
	struct cnl_sq_store *q = cnl_sq(s);

	cnl_sq_flush(q); /* closing would roll an open batch back */
	cnl_sq_sync_close(q);
	cnl_sq_cache_clear(q);
	sqlite3_close(q->db);
	free(q);
}

static int sq_schema_version(struct cnl_store *s)
{
	return read_version(cnl_sq(s));
}

static int sq_tx(struct cnl_store *s, int op)
{
	struct cnl_sq_store *q = cnl_sq(s);

	switch (op) {
	case 0:
		return cnl_sq_begin(q);
	case 1:
		return cnl_sq_commit(q);
	default:
		/* A caller inside a batch that SQLite rolled back by itself
		 * still ends its transactions (q->aborted counts them). */
		if (q->depth == 0 && !q->aborted)
			return -EINVAL;
		cnl_sq_rollback(q);
		return 0;
	}
}

static int sq_batch(struct cnl_store *s, int op)
{
	struct cnl_sq_store *q = cnl_sq(s);

	switch (op) {
	case 0:
		return cnl_sq_begin_batch(q);
	case 1:
		return cnl_sq_commit_batch(q);
	case 2:
		return cnl_sq_flush(q);
	case 3: /* how many transactions the open batch holds, 0: none */
		if (!atomic_load(&q->batch))
			return 0;
		return (int)CNL_MAX(atomic_load(&q->batch_n), 1u);
	default: /* 4 + a window state */
		cnl_sq_batch_window(q, op - 4);
		return 0;
	}
}

static void sq_batch_hook(struct cnl_store *s, void (*fn)(void *, int),
                          void *arg)
{
	struct cnl_sq_store *q = cnl_sq(s);

	q->batch_hook = fn;
	q->batch_hook_arg = arg;
}

static const struct cnl_store_ops sqlite_ops = {
    .name = "sqlite",
    .close = sq_close,
    .schema_version = sq_schema_version,
    .project_create = cnl_sq_project_create,
    .project_get = cnl_sq_project_get,
    .project_get_by_name = cnl_sq_project_get_by_name,
    .project_list = cnl_sq_project_list,
    .user_create = cnl_sq_user_create,
    .user_get = cnl_sq_user_get,
    .user_get_by_name = cnl_sq_user_get_by_name,
    .membership_set = cnl_sq_membership_set,
    .membership_get_role = cnl_sq_membership_get_role,
    .membership_list = cnl_sq_membership_list,
    .job_create = cnl_sq_job_create,
    .job_get = cnl_sq_job_get,
    .job_list = cnl_sq_job_list,
    .job_update_state = cnl_sq_job_update_state,
    .server_create = cnl_sq_server_create,
    .server_get = cnl_sq_server_get,
    .server_list = cnl_sq_server_list,
    .tx = sq_tx,
    .project_set_flags = cnl_sq_project_set_flags,
    .user_list = cnl_sq_user_list,
    .membership_list_project = cnl_sq_membership_list_project,
    .job_list_state = cnl_sq_job_list_state,
    .job_update_run = cnl_sq_job_update_run,
    .server_update = cnl_sq_server_update,
    .server_delete = cnl_sq_server_delete,
    .user_set_password = cnl_sq_user_set_password,
    .membership_delete = cnl_sq_membership_delete,
    .project_delete = cnl_sq_project_delete,
    .doc_put = cnl_sq_doc_put,
    .doc_get = cnl_sq_doc_get,
    .doc_get_by_name = cnl_sq_doc_get_by_name,
    .doc_list = cnl_sq_doc_list,
    .doc_delete = cnl_sq_doc_delete,
    .audit_append = cnl_sq_audit_append,
    .audit_list = cnl_sq_audit_list,
    .audit_list_target = cnl_sq_audit_list_target,
    .audit_verify = cnl_sq_audit_verify,
    .audit_latest = cnl_sq_audit_latest,
    .job_count_state = cnl_sq_job_count_state,
    .job_each_state = cnl_sq_job_each_state,
    .group_commit = cnl_sq_group_commit,
    .written = cnl_sq_written,
    .seen = cnl_sq_seen,
    .sync = cnl_sq_sync,
    .batch = sq_batch,
    .lost = cnl_sq_lost,
    .batch_hook = sq_batch_hook,
    .open_reader = cnl_store_open_sqlite_reader,
    .live_put = cnl_sq_live_put,
    .live_get = cnl_sq_live_get,
};

/* Apply every migration newer than the file; see invariant 4. */
static int migrate(struct cnl_sq_store *q, char *err, size_t errlen)
{
	int r, cur;

	if ((r = cnl_sq_exec(q, "CREATE TABLE IF NOT EXISTS schema_version ("
	                        " version INTEGER PRIMARY KEY,"
	                        " applied_ms INTEGER NOT NULL)")) < 0)
		goto sqlerr;
	if ((cur = read_version(q)) < 0) {
		r = cur;
		goto sqlerr;
	}
	if (cur > SCHEMA_LATEST) {
		cnl_seterr(
		    err, errlen,
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
		if ((r = cnl_sq_begin(q)) < 0)
			goto sqlerr;
		/* Another process may have migrated while we waited. */
		if ((cur = read_version(q)) < 0) {
			r = cur;
			goto fail;
		}
		if (m->version <= cur) {
			cnl_sq_rollback(q);
			continue;
		}
		if ((r = cnl_sq_exec(q, m->sql)) < 0)
			goto fail;
		if ((r = cnl_sq_prep(
		         q,
		         "INSERT INTO schema_version (version, applied_ms)"
		         " VALUES (?1, ?2)",
		         &st)) < 0)
			goto fail;
		if ((r = cnl_sq_bind_int(q, st, 1, m->version)) < 0 ||
		    (r = cnl_sq_bind_int(q, st, 2, cnl_time_now_ms())) < 0 ||
		    (r = cnl_sq_step_done(q, st)) < 0) {
			cnl_sq_finalize(q, st);
			goto fail;
		}
		cnl_sq_finalize(q, st);
		if ((r = cnl_sq_commit(q)) < 0)
			goto sqlerr;
		cur = m->version;
	}
	return 0;
fail:
	cnl_sq_rollback(q);
sqlerr:
	cnl_seterr(err, errlen, "schema migration failed: %s", q->base.errmsg);
	return r;
}

/* PRAGMA journal_mode answers the mode in force, which may not be WAL. */
static int set_wal(struct cnl_sq_store *q, char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int r, rc;

	if ((r = cnl_sq_prep(q, "PRAGMA journal_mode=WAL", &st)) < 0)
		return r;
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		r = cnl_sq_err(q, rc);
	} else if (sqlite3_stricmp((const char *)sqlite3_column_text(st, 0),
	                           "wal") != 0) {
		cnl_seterr(err, errlen, "cannot enable WAL journal (got %s)",
		           (const char *)sqlite3_column_text(st, 0));
		r = -EIO;
	}
	cnl_sq_finalize(q, st);
	return r;
}

/*
 * The database holds password hashes and tokens' digests: 0600 whatever
 * the umask.  SQLite would create it 0644 (and sets that mode itself), so
 * the file is made here first; SQLite then gives the WAL and shared-memory
 * files the database's own mode.  Files an older version left open to
 * others are closed.  0 or a negative errno.
 */
static int private_file(const char *path)
{
	char side[4096];
	int fd;

	if (strcmp(path, ":memory:") == 0 || strncmp(path, "file:", 5) == 0)
		return 0;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	if (fchmod(fd, 0600) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	close(fd);
	for (int i = 0; i < 2; i++)
		if ((size_t)snprintf(side, sizeof(side), "%s%s", path,
		                     i ? "-shm" : "-wal") < sizeof(side))
			chmod(side, 0600); /* absent: nothing to do */
	return 0;
}

/*
 * A file that is there already must be an SQLite database: SQLite itself
 * would take a zero-length file for a new, empty database and start an
 * empty platform over what was meant to be the old one (a truncated copy,
 * a restore that wrote nothing), and would only fail on a file of other
 * bytes at its first query, with a message that names no file.  Both are
 * refused here, before anything writes to the file, so it stays as it was
 * for whoever looks into it.  A missing file is fine: it is created.  A
 * zero-length file beside a WAL with content is left to SQLite, which
 * recovers it from the WAL.  0, or -CNL_ECORRUPT / a negative errno with
 * @err naming the file and what is wrong.
 */
static int check_existing(const char *path, char *err, size_t errlen)
{
	static const char magic[16] = "SQLite format 3";
	char head[16], wal[4096];
	struct stat sb, wb;
	ssize_t n;
	int fd;

	if (strcmp(path, ":memory:") == 0 || strncmp(path, "file:", 5) == 0)
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0; /* missing: created; else private_file() says why */
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		cnl_seterr(err, errlen, "%s is not a regular file", path);
		return -CNL_ECORRUPT;
	}
	if (sb.st_size == 0) {
		close(fd);
		if ((size_t)snprintf(wal, sizeof(wal), "%s-wal", path) <
		        sizeof(wal) &&
		    stat(wal, &wb) == 0 && wb.st_size > 0)
			return 0;
		cnl_seterr(err, errlen,
		           "%s is empty (0 bytes), not an SQLite database; "
		           "it was left as it is: restore it from a backup, or "
		           "remove it to start a new, empty platform",
		           path);
		return -CNL_ECORRUPT;
	}
	n = read(fd, head, sizeof(head));
	close(fd);
	if (n != (ssize_t)sizeof(head) || memcmp(head, magic, 16) != 0) {
		cnl_seterr(err, errlen,
		           "%s is not an SQLite database (its first bytes are "
		           "not the SQLite header); it was left as it is",
		           path);
		return -CNL_ECORRUPT;
	}
	return 0;
}

int cnl_store_open_sqlite(const char *path, struct cnl_store **ret, char *err,
                          size_t errlen)
{
	struct cnl_sq_store *q;
	int r, rc;

	if (!path || !ret)
		return -EINVAL;
	cnl_seterr(err, errlen, "%s", "");
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->base.ops = &sqlite_ops;
	q->wal_fd = -1;
	snprintf(q->base.path, sizeof(q->base.path), "%s", path);

	if ((r = check_existing(path, err, errlen)) < 0)
		goto fail_free;
	if ((r = private_file(path)) < 0) {
		cnl_seterr(err, errlen, "cannot create %s: %s", path,
		           strerror(-r));
		goto fail;
	}
	/* The writer's WAL frames go out one write per commit
	 * (sqlite_walbuf.c). */
	rc = sqlite3_open_v2(path, &q->db,
	                     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
	                     cnl_sq_walbuf_vfs());
	if (rc != SQLITE_OK) {
		r = q->db ? cnl_sq_err(q, rc) : -ENOMEM;
		cnl_seterr(err, errlen, "cannot open %s: %s", path,
		           q->db ? sqlite3_errmsg(q->db) : "out of memory");
		goto fail;
	}
	sqlite3_extended_result_codes(q->db, 1);
	sqlite3_busy_timeout(q->db, BUSY_TIMEOUT_MS);
	if ((r = set_wal(q, err, errlen)) < 0)
		goto fail_msg;
	/* FULL: sync the WAL at every commit (invariant 1). */
	if ((r = cnl_sq_exec(q, "PRAGMA synchronous=FULL")) < 0 ||
	    (r = cnl_sq_exec(q, "PRAGMA foreign_keys=ON")) < 0)
		goto fail_msg;
	if ((r = migrate(q, err, errlen)) < 0)
		goto fail;
	*ret = &q->base;
	return 0;
fail_msg:
	if (err && errlen && !err[0])
		cnl_seterr(err, errlen, "cannot set up %s: %s", path,
		           q->base.errmsg);
fail:
	cnl_sq_cache_clear(q);
	sqlite3_close(q->db);
fail_free:
	free(q);
	return r;
}

int cnl_store_open_sqlite_reader(struct cnl_store *s, struct cnl_store **ret)
{
	struct cnl_sq_store *q;
	const char *path;
	int r, rc;

	if (!s || !ret || s->ops != &sqlite_ops)
		return -EINVAL;
	path = s->path;
	if (!path[0] || strcmp(path, ":memory:") == 0 ||
	    strncmp(path, "file:", 5) == 0)
		return -ENOTSUP;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->base.ops = &sqlite_ops;
	q->wal_fd = -1;
	snprintf(q->base.path, sizeof(q->base.path), "%s", path);
	/* The writer made the file, its schema and its WAL: this one only
	 * reads them (invariant 1: WAL readers never block the writer). */
	rc = sqlite3_open_v2(path, &q->db, SQLITE_OPEN_READONLY, NULL);
	if (rc != SQLITE_OK) {
		r = q->db ? -EIO : -ENOMEM;
		sqlite3_close(q->db);
		free(q);
		return r;
	}
	sqlite3_extended_result_codes(q->db, 1);
	sqlite3_busy_timeout(q->db, BUSY_TIMEOUT_MS);
	if ((r = cnl_sq_exec(q, "PRAGMA query_only=ON")) < 0) {
		cnl_sq_cache_clear(q);
		sqlite3_close(q->db);
		free(q);
		return r;
	}
	*ret = &q->base;
	return 0;
}
