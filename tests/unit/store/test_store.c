/*
 * test_store.c - the state store against a real database, SQLite or
 * PostgreSQL: the same suite for both backends (store.h's promise that
 * callers never change when the backend does).  Without
 * CNLAB_TEST_STORE_PG it runs against SQLite files; with it (a URL
 * "postgresql://user:password@host:port", no database, as
 * tests/lib/pg-tmp exports) every test gets a new database on that
 * server, dropped after.  The few tests of one backend's own machinery
 * (SQLite's WAL, its group commit, a file that is not a database) skip
 * on the other.
 *
 * What it covers: schema
 * migrations (fresh file, reopen, a file newer than the code), WAL mode,
 * create/get/list of every entity with not-found and duplicate errors,
 * idempotency keys, paging through 2,500 jobs, the audit hash chain (an
 * edited record, a deleted record, the undetectable cut tail), bad inputs
 * that must change nothing, and a kill -9 of a writer mid-way after which
 * every acknowledged job must be in the file.
 *
 * Each test gets a fresh directory from mkdtemp() (and on PostgreSQL a
 * fresh database).  Where a test must see or damage the data behind the
 * store's back it opens a second connection with the plain sqlite3 or
 * libpq API.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "store/store.h"

#define T0 INT64_C(1700000000000)

/* The PostgreSQL server's URL without a database, or NULL: SQLite. */
static const char *pg_base;
static int pg_serial;

struct fixture {
	char dir[64];
	char path[512]; /* the SQLite file, or the PostgreSQL database's URL */
	char dbname[64];
	struct cnl_store *s;
	struct cnl_id_gen g;
	int64_t now;
	struct cnl_store_project proj;
	struct cnl_store_user user;
};

static void new_id(struct fixture *f, const char *prefix, char *buf)
{
	assert_true(cnl_id_new(&f->g, prefix, f->now++, buf, CNL_ID_MAX) > 0);
}

/* Ids live in CNL_ID_MAX buffers everywhere in this file. */
static void copy_id(char *dst, const char *src)
{
	memcpy(dst, src, CNL_ID_MAX);
}

static void open_store(struct fixture *f)
{
	char err[256];

	if (cnl_store_open(f->path, &f->s, err, sizeof(err)) != 0)
		fail_msg("cannot open %s: %s", f->path, err);
}

static bool is_pg(const char *path)
{
	return strncmp(path, "postgresql://", 13) == 0;
}

/* Run @sql on the server's maintenance database (CREATE/DROP DATABASE). */
static void pg_admin(const char *sql)
{
	char url[512];
	PGconn *c;
	PGresult *res;

	snprintf(url, sizeof(url), "%s/postgres", pg_base);
	c = PQconnectdb(url);
	if (PQstatus(c) != CONNECTION_OK)
		fail_msg("%s: %s", url, PQerrorMessage(c));
	res = PQexec(c, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		fail_msg("%s: %s", sql, PQerrorMessage(c));
	PQclear(res);
	PQfinish(c);
}

static void make_project(struct fixture *f, const char *name,
                         struct cnl_store_project *p)
{
	memset(p, 0, sizeof(*p));
	new_id(f, "prj", p->id);
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->created_ms = f->now;
	assert_int_equal(cnl_store_project_create(f->s, p), 0);
}

static void make_user(struct fixture *f, const char *name,
                      struct cnl_store_user *u)
{
	memset(u, 0, sizeof(*u));
	new_id(f, "usr", u->id);
	snprintf(u->name, sizeof(u->name), "%s", name);
	snprintf(u->password_hash, sizeof(u->password_hash), "$argon2id$x");
	u->created_ms = f->now;
	assert_int_equal(cnl_store_user_create(f->s, u), 0);
}

/* A valid job of the fixture's project and user, not yet stored. */
static void job_template(struct fixture *f, struct cnl_store_job *j)
{
	memset(j, 0, sizeof(*j));
	new_id(f, "job", j->id);
	copy_id(j->project_id, f->proj.id);
	copy_id(j->user_id, f->user.id);
	snprintf(j->command, sizeof(j->command), "python train.py --lr 3e-4");
	snprintf(j->profile, sizeof(j->profile), "default");
	snprintf(j->gpu_shape, sizeof(j->gpu_shape), "1g.18gb");
	j->priority = 2;
	j->deadline_ms = T0 + 3600000;
	j->runtime_ms = 600000;
	snprintf(j->state, sizeof(j->state), "pending");
	j->created_ms = f->now;
	memcpy(j->run, "{}", 3); /* what the store keeps for "none yet" */
	j->updated_ms = f->now;
}

static void server_template(struct fixture *f, const char *name,
                            struct cnl_store_server *v)
{
	memset(v, 0, sizeof(*v));
	new_id(f, "srv", v->id);
	copy_id(v->project_id, f->proj.id);
	copy_id(v->user_id, f->user.id);
	snprintf(v->name, sizeof(v->name), "%s", name);
	snprintf(v->image, sizeof(v->image), "jupyter/base:2024");
	snprintf(v->profile, sizeof(v->profile), "small");
	v->storage_gb = 20;
	v->idle_timeout_s = 3600;
	snprintf(v->state, sizeof(v->state), "pending");
	v->created_ms = f->now;
	memcpy(v->run, "{}", 3);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/cnl-store-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	if (pg_base) {
		char sql[128];

		snprintf(f->dbname, sizeof(f->dbname), "cnl_t%d_%d",
		         (int)getpid(), pg_serial++);
		snprintf(sql, sizeof(sql), "CREATE DATABASE %s", f->dbname);
		pg_admin(sql);
		snprintf(f->path, sizeof(f->path), "%s/%s", pg_base, f->dbname);
	} else {
		snprintf(f->path, sizeof(f->path), "%s/state.db", f->dir);
	}
	cnl_id_gen_init(&f->g, 7);
	f->now = T0;
	open_store(f);
	make_project(f, "vision", &f->proj);
	make_user(f, "alice", &f->user);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
	char p[600];

	cnl_store_close(f->s);
	if (f->dbname[0]) {
		char sql[128];

		snprintf(sql, sizeof(sql), "DROP DATABASE %s WITH (FORCE)",
		         f->dbname);
		pg_admin(sql);
	}
	for (size_t i = 0;
	     !f->dbname[0] && i < sizeof(suffix) / sizeof(suffix[0]); i++) {
		snprintf(p, sizeof(p), "%s%s", f->path, suffix[i]);
		unlink(p);
	}
	rmdir(f->dir);
	free(f);
	return 0;
}

/* Raw access through a second connection. */
static sqlite3 *raw_open(const char *path)
{
	sqlite3 *db = NULL;

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	return db;
}

/* @sql on PostgreSQL: its result (which the caller clears). */
static PGresult *raw_pg(const char *url, const char *sql)
{
	PGconn *c = PQconnectdb(url);
	PGresult *res;
	ExecStatusType st;

	if (PQstatus(c) != CONNECTION_OK)
		fail_msg("%s: %s", url, PQerrorMessage(c));
	res = PQexec(c, sql);
	st = PQresultStatus(res);
	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
		fail_msg("%s: %s", sql, PQerrorMessage(c));
	PQfinish(c);
	return res;
}

static void raw_exec(const char *path, const char *sql)
{
	sqlite3 *db;
	char *msg = NULL;
	int rc;

	if (is_pg(path)) {
		PQclear(raw_pg(path, sql));
		return;
	}
	db = raw_open(path);
	rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
	if (rc != SQLITE_OK)
		fail_msg("%s: %s", sql, msg ? msg : "?");
	sqlite3_free(msg);
	sqlite3_close(db);
}

/* The integer in the first column of the first row of @sql. */
static int64_t raw_int(const char *path, const char *sql)
{
	sqlite3 *db;
	sqlite3_stmt *st = NULL;
	int64_t v;

	if (is_pg(path)) {
		PGresult *res = raw_pg(path, sql);

		assert_true(PQntuples(res) >= 1);
		v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
		PQclear(res);
		return v;
	}
	db = raw_open(path);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}

/* Rows in every table, for "nothing was stored" checks. */
static int64_t raw_total(const char *path)
{
	return raw_int(path,
	               "SELECT (SELECT COUNT(*) FROM projects) * 1000000000"
	               " + (SELECT COUNT(*) FROM users) * 10000000"
	               " + (SELECT COUNT(*) FROM memberships) * 100000"
	               " + (SELECT COUNT(*) FROM jobs) * 1000"
	               " + (SELECT COUNT(*) FROM servers) * 100"
	               " + (SELECT COUNT(*) FROM idempotency) * 10"
	               " + (SELECT COUNT(*) FROM audit)");
}

static void test_migrations(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_project p;

	assert_int_equal(cnl_store_schema_version(f->s), 5);
	assert_int_equal(
	    raw_int(f->path, "SELECT COUNT(*) FROM schema_version"), 5);
	assert_int_equal(
	    raw_int(f->path,
	            is_pg(f->path)
	                ? "SELECT COUNT(*) FROM information_schema.tables"
	                  " WHERE table_schema = current_schema() AND"
	                  " table_name IN ('projects', 'users',"
	                  " 'memberships', 'jobs', 'servers',"
	                  " 'idempotency', 'audit', 'schema_version',"
	                  " 'docs', 'leases', 'live_status')"
	                : "SELECT COUNT(*) FROM sqlite_master WHERE type ="
	                  " 'table' AND name IN ('projects', 'users',"
	                  " 'memberships', 'jobs', 'servers',"
	                  " 'idempotency', 'audit', 'schema_version',"
	                  " 'docs', 'leases', 'live_status')"),
	    11);
	assert_int_equal(
	    raw_int(f->path,
	            is_pg(f->path)
	                ? "SELECT COUNT(*) FROM pg_indexes WHERE"
	                  " indexname = 'jobs_by_project'"
	                : "SELECT COUNT(*) FROM sqlite_master WHERE type ="
	                  " 'index' AND name = 'jobs_by_project'"),
	    1);

	/*
	 * Mark the applied rows: a reopen that applied anything again would
	 * fail on the existing tables or add rows with a real timestamp.
	 */
	cnl_store_close(f->s);
	f->s = NULL;
	raw_exec(f->path, "UPDATE schema_version SET applied_ms = 42");
	open_store(f);
	assert_int_equal(cnl_store_schema_version(f->s), 5);
	assert_int_equal(
	    raw_int(f->path, "SELECT COUNT(*) FROM schema_version"), 5);
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM schema_version"
	                                  " WHERE applied_ms = 42"),
	                 5);
	assert_int_equal(cnl_store_project_get_by_name(f->s, "vision", &p), 0);
	assert_string_equal(p.id, f->proj.id);
}

static void test_newer_schema_refused(void **state)
{
	struct fixture *f = *state;
	static struct cnl_store sentinel;
	struct cnl_store *s2 = &sentinel;
	char err[256] = "";

	raw_exec(f->path, "INSERT INTO schema_version VALUES (6, 1)");
	assert_int_equal(cnl_store_open(f->path, &s2, err, sizeof(err)),
	                 -CNL_ECONFIG);
	assert_ptr_equal(s2, &sentinel);
	assert_non_null(strstr(err, "newer"));
	assert_non_null(strstr(err, "6"));
	/* The refused open changed nothing. */
	assert_int_equal(
	    raw_int(f->path, "SELECT COUNT(*) FROM schema_version"), 6);
}

/* A file that is there but empty or not SQLite is refused, untouched. */
static void test_bad_file_refused(void **state)
{
	struct fixture *f = *state;
	/* Random bytes, a NUL among them: written by their size. */
	static const char rnd[] =
	    "\x8f\x01\x77random bytes\x00\xff\xfe and more of them";
	static const char *const contents[] = {
	    "", "these are my notes, not a database\n", rnd};
	static struct cnl_store sentinel;
	char path[160], err[256], back[128];

	if (is_pg(f->path))
		skip(); /* SQLite's own machinery */

	for (size_t i = 0; i < 3; i++) {
		struct cnl_store *s2 = &sentinel;
		size_t len = i == 2 ? sizeof(rnd) - 1 : strlen(contents[i]);
		FILE *fp;
		size_t n;

		snprintf(path, sizeof(path), "%s/bad-%zu.db", f->dir, i);
		fp = fopen(path, "wb");
		assert_non_null(fp);
		assert_int_equal(fwrite(contents[i], 1, len, fp), len);
		fclose(fp);
		err[0] = '\0';
		assert_int_equal(
		    cnl_store_open_sqlite(path, &s2, err, sizeof(err)),
		    -CNL_ECORRUPT);
		assert_ptr_equal(s2, &sentinel);
		assert_non_null(strstr(err, path));
		assert_non_null(strstr(err, i ? "not an SQLite database"
		                              : "is empty (0 bytes)"));
		fp = fopen(path, "rb");
		assert_non_null(fp);
		n = fread(back, 1, sizeof(back), fp);
		fclose(fp);
		assert_int_equal(n, len);
		assert_memory_equal(back, contents[i], len);
		unlink(path);
	}
	/* A missing file is created. */
	{
		struct cnl_store *s2 = NULL;

		snprintf(path, sizeof(path), "%s/new.db", f->dir);
		assert_int_equal(
		    cnl_store_open_sqlite(path, &s2, err, sizeof(err)), 0);
		cnl_store_close(s2);
		for (int k = 0; k < 3; k++) {
			char side[200];

			snprintf(side, sizeof(side), "%s%s", path,
			         k == 0   ? ""
			         : k == 1 ? "-wal"
			                  : "-shm");
			unlink(side);
		}
	}
}

static void test_wal_mode(void **state)
{
	struct fixture *f = *state;
	sqlite3 *db;
	sqlite3_stmt *st = NULL;

	if (is_pg(f->path))
		skip(); /* SQLite's own machinery */
	db = raw_open(f->path);
	assert_int_equal(
	    sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL),
	    SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
	sqlite3_finalize(st);
	sqlite3_close(db);
}

static void test_projects_and_users(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_project p, got, dup;
	struct cnl_store_user u, ugot, udup;

	memset(&got, 0x5a, sizeof(got));
	make_project(f, "robotics", &p);
	assert_int_equal(cnl_store_project_get(f->s, p.id, &got), 0);
	assert_memory_equal(&got, &p, sizeof(p));
	memset(&got, 0, sizeof(got));
	assert_int_equal(cnl_store_project_get_by_name(f->s, "robotics", &got),
	                 0);
	assert_string_equal(got.id, p.id);

	/* The on-prem-only flag round-trips. */
	memset(&p, 0, sizeof(p));
	new_id(f, "prj", p.id);
	snprintf(p.name, sizeof(p.name), "secret");
	p.on_prem_only = true;
	assert_int_equal(cnl_store_project_create(f->s, &p), 0);
	assert_int_equal(cnl_store_project_get(f->s, p.id, &got), 0);
	assert_true(got.on_prem_only);

	/* Not found leaves the output untouched. */
	memset(&got, 0x5a, sizeof(got));
	memcpy(&dup, &got, sizeof(dup));
	assert_int_equal(cnl_store_project_get(f->s, "prj_nope", &got),
	                 -CNL_ENOTFOUND);
	assert_int_equal(cnl_store_project_get_by_name(f->s, "nope", &got),
	                 -CNL_ENOTFOUND);
	assert_memory_equal(&got, &dup, sizeof(got));

	/* Duplicate name, duplicate id. */
	memset(&dup, 0, sizeof(dup));
	new_id(f, "prj", dup.id);
	snprintf(dup.name, sizeof(dup.name), "robotics");
	assert_int_equal(cnl_store_project_create(f->s, &dup), -CNL_EDUP);
	assert_non_null(strstr(cnl_store_errmsg(f->s), is_pg(f->path)
	                                                   ? "unique constraint"
	                                                   : "UNIQUE"));
	copy_id(dup.id, f->proj.id);
	snprintf(dup.name, sizeof(dup.name), "other");
	assert_int_equal(cnl_store_project_create(f->s, &dup), -CNL_EDUP);

	/* Listing pages in id order: the fixture's, robotics, secret. */
	{
		struct cnl_store_project page[2];
		int n = -1;

		assert_int_equal(
		    cnl_store_project_list(f->s, NULL, 2, page, &n), 0);
		assert_int_equal(n, 2);
		assert_string_equal(page[0].id, f->proj.id);
		assert_string_equal(page[1].name, "robotics");
		assert_int_equal(
		    cnl_store_project_list(f->s, page[1].id, 2, page, &n), 0);
		assert_int_equal(n, 1);
		assert_string_equal(page[0].id, p.id);
		assert_true(page[0].on_prem_only);
		assert_int_equal(
		    cnl_store_project_list(f->s, NULL, 0, page, &n),
		    -CNL_ESIZE);
	}

	make_user(f, "bob", &u);
	assert_int_equal(cnl_store_user_get(f->s, u.id, &ugot), 0);
	assert_memory_equal(&ugot, &u, sizeof(u));
	memset(&ugot, 0, sizeof(ugot));
	assert_int_equal(cnl_store_user_get_by_name(f->s, "bob", &ugot), 0);
	assert_string_equal(ugot.id, u.id);
	assert_string_equal(ugot.password_hash, "$argon2id$x");
	assert_int_equal(cnl_store_user_get(f->s, "usr_nope", &ugot),
	                 -CNL_ENOTFOUND);
	assert_int_equal(cnl_store_user_get_by_name(f->s, "carol", &ugot),
	                 -CNL_ENOTFOUND);
	memset(&udup, 0, sizeof(udup));
	new_id(f, "usr", udup.id);
	snprintf(udup.name, sizeof(udup.name), "bob");
	assert_int_equal(cnl_store_user_create(f->s, &udup), -CNL_EDUP);
}

static void test_memberships(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_project p[3];
	struct cnl_store_membership m, out[4];
	char role[CNL_STORE_ROLE_MAX] = "unset";
	int n = -1;

	make_project(f, "p0", &p[0]);
	make_project(f, "p1", &p[1]);
	make_project(f, "p2", &p[2]);
	for (int i = 0; i < 3; i++) {
		memset(&m, 0, sizeof(m));
		copy_id(m.user_id, f->user.id);
		copy_id(m.project_id, p[i].id);
		snprintf(m.role, sizeof(m.role), "%s",
		         i == 0 ? "viewer" : "member");
		assert_int_equal(cnl_store_membership_set(f->s, &m), 0);
	}
	assert_int_equal(cnl_store_membership_get_role(
	                     f->s, f->user.id, p[0].id, role, sizeof(role)),
	                 0);
	assert_string_equal(role, "viewer");

	/* Setting again replaces the role. */
	copy_id(m.project_id, p[0].id);
	snprintf(m.role, sizeof(m.role), "project-admin");
	assert_int_equal(cnl_store_membership_set(f->s, &m), 0);
	assert_int_equal(cnl_store_membership_get_role(
	                     f->s, f->user.id, p[0].id, role, sizeof(role)),
	                 0);
	assert_string_equal(role, "project-admin");

	/* Not a member of the fixture's own project. */
	snprintf(role, sizeof(role), "unset");
	assert_int_equal(cnl_store_membership_get_role(
	                     f->s, f->user.id, f->proj.id, role, sizeof(role)),
	                 -CNL_ENOTFOUND);
	assert_string_equal(role, "unset");

	/* Two pages of two, in project id order. */
	assert_int_equal(
	    cnl_store_membership_list(f->s, f->user.id, NULL, 2, out, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(out[0].project_id, p[0].id);
	assert_string_equal(out[0].role, "project-admin");
	assert_string_equal(out[1].project_id, p[1].id);
	assert_int_equal(cnl_store_membership_list(
	                     f->s, f->user.id, out[1].project_id, 2, out, &n),
	                 0);
	assert_int_equal(n, 1);
	assert_string_equal(out[0].project_id, p[2].id);

	/* Unknown role; missing user or project. */
	snprintf(m.role, sizeof(m.role), "root");
	assert_int_equal(cnl_store_membership_set(f->s, &m), -CNL_EFIELD);
	snprintf(m.role, sizeof(m.role), "admin");
	new_id(f, "usr", m.user_id);
	assert_int_equal(cnl_store_membership_set(f->s, &m), -CNL_ENOTFOUND);
	copy_id(m.user_id, f->user.id);
	new_id(f, "prj", m.project_id);
	assert_int_equal(cnl_store_membership_set(f->s, &m), -CNL_ENOTFOUND);
}

static void test_jobs(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_job j, got, ret;

	job_template(f, &j);
	memset(&ret, 0, sizeof(ret));
	assert_int_equal(cnl_store_job_create(f->s, &j, NULL, &ret),
	                 CNL_STORE_CREATED);
	assert_memory_equal(&ret, &j, sizeof(j));
	memset(&got, 0x5a, sizeof(got));
	assert_int_equal(cnl_store_job_get(f->s, j.id, &got), 0);
	assert_memory_equal(&got, &j, sizeof(j));

	assert_int_equal(
	    cnl_store_job_update_state(f->s, j.id, "failed", 137, T0 + 99), 0);
	assert_int_equal(cnl_store_job_get(f->s, j.id, &got), 0);
	assert_string_equal(got.state, "failed");
	assert_int_equal(got.exit_code, 137);
	assert_int_equal(got.updated_ms, T0 + 99);
	assert_int_equal(got.created_ms, j.created_ms);

	assert_int_equal(cnl_store_job_get(f->s, "job_nope", &got),
	                 -CNL_ENOTFOUND);
	assert_int_equal(
	    cnl_store_job_update_state(f->s, "job_nope", "running", 0, T0),
	    -CNL_ENOTFOUND);
	assert_int_equal(
	    cnl_store_job_update_state(f->s, j.id, "exploded", 0, T0),
	    -CNL_EFIELD);
	assert_int_equal(cnl_store_job_get(f->s, j.id, &got), 0);
	assert_string_equal(got.state, "failed");

	/* Same id again; a missing project; a missing user. */
	assert_int_equal(cnl_store_job_create(f->s, &j, NULL, NULL), -CNL_EDUP);
	job_template(f, &j);
	new_id(f, "prj", j.project_id);
	assert_int_equal(cnl_store_job_create(f->s, &j, NULL, NULL),
	                 -CNL_ENOTFOUND);
	job_template(f, &j);
	new_id(f, "usr", j.user_id);
	assert_int_equal(cnl_store_job_create(f->s, &j, NULL, NULL),
	                 -CNL_ENOTFOUND);
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM jobs"), 1);
}

/*
 * Group commit: off by default (nothing counted, no sync); on, each
 * commit (not each statement of a transaction, not a failed write) bumps
 * the written count, a sync covers what was written and is seen by a
 * fresh handle; in a test build a sync fails while the fault file named
 * by CNLAB_TEST_SYNC_FAULT exists and succeeds again once it is gone.
 */
static void test_group_commit(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_job a, b, c;
	char fault[300];
	int64_t w, seq = -1;

	if (is_pg(f->path))
		skip(); /* SQLite's own machinery */

	/* Before: every commit durable by itself, nothing counted. */
	assert_int_equal(cnl_store_written(f->s), 0);
	assert_int_equal(cnl_store_sync(f->s, &seq), -EINVAL);

	snprintf(fault, sizeof(fault), "%s/fault", f->dir);
	setenv("CNLAB_TEST_SYNC_FAULT", fault, 1);
	assert_int_equal(cnl_store_group_commit(f->s), 0);
	unsetenv("CNLAB_TEST_SYNC_FAULT");
	w = cnl_store_written(f->s);
	job_template(f, &a);
	assert_int_equal(cnl_store_job_create(f->s, &a, NULL, NULL),
	                 CNL_STORE_CREATED);
	assert_int_equal(cnl_store_written(f->s), w + 1);
	/* Two creates and an audit record in one transaction: one commit. */
	assert_int_equal(cnl_store_tx_begin(f->s), 0);
	job_template(f, &b);
	assert_int_equal(cnl_store_job_create(f->s, &b, NULL, NULL),
	                 CNL_STORE_CREATED);
	job_template(f, &c);
	assert_int_equal(cnl_store_job_create(f->s, &c, NULL, NULL),
	                 CNL_STORE_CREATED);
	assert_int_equal(cnl_store_audit_append(
	                     f->s,
	                     &(struct cnl_store_audit){.ts_ms = T0,
	                                               .actor = "alice",
	                                               .action = "job.create",
	                                               .target = "x",
	                                               .result = "201"},
	                     NULL),
	                 0);
	assert_int_equal(cnl_store_written(f->s), w + 1);
	assert_int_equal(cnl_store_tx_commit(f->s), 0);
	assert_int_equal(cnl_store_written(f->s), w + 2);
	/* A refused write commits nothing. */
	assert_int_equal(cnl_store_job_create(f->s, &a, NULL, NULL), -CNL_EDUP);
	assert_int_equal(cnl_store_written(f->s), w + 2);
	assert_int_equal(cnl_store_sync(f->s, &seq), 0);
	assert_int_equal(seq, w + 2);
	/* Another handle sees it all (the WAL was not deleted, nor lost). */
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM jobs"), 3);
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM audit"), 1);

#ifdef CNL_TEST_HOOKS
	{
		FILE *fp = fopen(fault, "w");

		assert_non_null(fp);
		fclose(fp);
		job_template(f, &a);
		assert_int_equal(cnl_store_job_create(f->s, &a, NULL, NULL),
		                 CNL_STORE_CREATED);
		seq = -1;
		assert_int_equal(cnl_store_sync(f->s, &seq), -EIO);
		assert_int_equal(seq, w + 3); /* what the failure covers */
		assert_int_equal(unlink(fault), 0);
		assert_int_equal(cnl_store_sync(f->s, &seq), 0);
		assert_int_equal(seq, w + 3);
	}
#endif
	/* Statements stay prepared across uses: the same query, nested in
	 * a transaction of its own kind, still reads right. */
	assert_int_equal(cnl_store_job_get(f->s, b.id, &a), 0);
	assert_string_equal(a.id, b.id);
	assert_int_equal(cnl_store_job_get(f->s, c.id, &a), 0);
	assert_string_equal(a.id, c.id);
}

/* The batch hook's calls (cnl_store_set_batch_hook()). */
struct batch_ends {
	int n, last;
};

static void on_batch_end(void *arg, int r)
{
	struct batch_ends *e = arg;

	e->n++;
	e->last = r;
}

/* Begin a transaction of the batch kind (@join: whether it joins the
 * open batch) and create a job in it, left open. */
static void batch_job(struct fixture *f, struct cnl_store_job *j, int join)
{
	assert_int_equal(cnl_store_tx_begin_batch(f->s), join);
	job_template(f, j);
	assert_int_equal(cnl_store_job_create(f->s, j, NULL, NULL),
	                 CNL_STORE_CREATED);
}

/* One create in a transaction of the batch kind: what its commit said. */
static int batch_create(struct fixture *f, struct cnl_store_job *j, int join)
{
	batch_job(f, j, join);
	return cnl_store_tx_commit_batch(f->s);
}

/*
 * Batches (store.h): with the window open, transactions that end are left
 * in one open transaction, which readers do not see and whose commit to
 * come cnl_store_written() already counts; one that fails is undone alone;
 * the batch's commit is one commit; a lost batch fails the next sync,
 * covering its count, and the hook hears of each end.  Shut, a
 * transaction commits as it ends.  PostgreSQL has no batches: the calls
 * are plain transactions there.
 */
static void test_batches(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_job a, b, c, d, e;
	struct batch_ends ends = {0};
	char fault[300];
	int64_t w, seq = -1;

	if (is_pg(f->path)) {
		assert_int_equal(batch_create(f, &a, 0), 0);
		assert_false(cnl_store_batch_open(f->s));
		assert_int_equal(cnl_store_batch_size(f->s), 0);
		assert_int_equal(cnl_store_flush(f->s), 0);
		return;
	}
	snprintf(fault, sizeof(fault), "%s/batch-fault", f->dir);
	setenv("CNLAB_TEST_BATCH_FAULT", fault, 1);
	assert_int_equal(cnl_store_group_commit(f->s), 0);
	unsetenv("CNLAB_TEST_BATCH_FAULT");
	cnl_store_set_batch_hook(f->s, on_batch_end, &ends);

	/* Shut (the syncer idle): committed at once. */
	w = cnl_store_written(f->s);
	assert_int_equal(batch_create(f, &a, 0), 0);
	assert_false(cnl_store_batch_open(f->s));
	assert_int_equal(cnl_store_batch_size(f->s), 0);
	assert_int_equal(cnl_store_written(f->s), w + 1);
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM jobs"), 1);

	/* Open: left in the batch, counted, unseen by readers. */
	cnl_store_batch_window(f->s, CNL_STORE_WINDOW_OPEN);
	assert_int_equal(batch_create(f, &b, 0), 1);
	assert_true(cnl_store_batch_open(f->s));
	assert_int_equal(cnl_store_batch_size(f->s), 1);
	assert_int_equal(cnl_store_written(f->s), w + 2);
	assert_int_equal(batch_create(f, &c, 1), 1);
	assert_int_equal(cnl_store_batch_size(f->s), 2);
	assert_int_equal(cnl_store_written(f->s), w + 2);
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM jobs"), 1);
	/* A joiner that fails is undone alone. */
	batch_job(f, &d, 1);
	assert_int_equal(cnl_store_tx_rollback(f->s), 0);
	assert_true(cnl_store_batch_open(f->s));
	assert_int_equal(cnl_store_batch_size(f->s), 2); /* not counted */
	/* The writer sees the batch, from inside it. */
	assert_int_equal(cnl_store_tx_begin_batch(f->s), 1);
	assert_int_equal(cnl_store_job_get(f->s, b.id, &e), 0);
	assert_int_equal(cnl_store_job_get(f->s, d.id, &e), -CNL_ENOTFOUND);
	assert_int_equal(cnl_store_tx_rollback(f->s), 0);
	assert_int_equal(ends.n, 0);
	/* Closing: the next to end commits the batch, in one commit. */
	cnl_store_batch_window(f->s, CNL_STORE_WINDOW_CLOSING);
	assert_int_equal(batch_create(f, &d, 1), 0);
	assert_false(cnl_store_batch_open(f->s));
	assert_int_equal(cnl_store_batch_size(f->s), 0);
	assert_int_equal(cnl_store_written(f->s), w + 2);
	assert_int_equal(ends.n, 1);
	assert_int_equal(ends.last, 0);
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM jobs"), 4);
	assert_int_equal(cnl_store_sync(f->s, &seq), 0);
	assert_int_equal(seq, w + 2);

	/* A plain transaction (or a statement) commits the batch first. */
	cnl_store_batch_window(f->s, CNL_STORE_WINDOW_OPEN);
	assert_int_equal(batch_create(f, &e, 0), 1);
	assert_int_equal(cnl_store_job_get(f->s, a.id, &d), 0); /* depth 0 */
	assert_false(cnl_store_batch_open(f->s));
	assert_int_equal(ends.n, 2);
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM jobs"), 5);
	assert_int_equal(cnl_store_written(f->s), w + 3);

	/* A joiner's plain commit commits the batch with it. */
	assert_int_equal(batch_create(f, &d, 0), 1);
	batch_job(f, &e, 1);
	assert_int_equal(cnl_store_tx_commit(f->s), 0);
	assert_false(cnl_store_batch_open(f->s));
	assert_int_equal(cnl_store_written(f->s), w + 4);
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM jobs"), 7);

	/* A lost batch: its count consumed with one more, named lost, its
	 * jobs gone, the store usable after. */
	assert_int_equal(batch_create(f, &d, 0), 1);
	assert_int_equal(batch_create(f, &e, 1), 1);
	assert_int_equal(cnl_store_written(f->s), w + 5);
	fclose(fopen(fault, "w"));
	assert_int_equal(cnl_store_flush(f->s), -ENOSPC);
	assert_int_equal(access(fault, F_OK), -1);
	assert_false(cnl_store_batch_open(f->s));
	assert_int_equal(cnl_store_batch_size(f->s), 0);
	assert_int_equal(ends.n, 4);
	assert_int_equal(ends.last, -ENOSPC);
	assert_int_equal(cnl_store_written(f->s), w + 6);
	assert_int_equal(cnl_store_lost(f->s, w + 5), -ENOSPC);
	assert_int_equal(cnl_store_lost(f->s, w + 6), 0);
	assert_int_equal(cnl_store_lost(f->s, w + 4), 0);
	assert_int_equal(cnl_store_job_get(f->s, d.id, &a), -CNL_ENOTFOUND);
	assert_int_equal(cnl_store_job_get(f->s, e.id, &a), -CNL_ENOTFOUND);
	/* A sync covers it, and the ring still names it lost: a waiter of
	 * w + 5 fails; the other counts it covers are durable. */
	seq = -1;
	assert_int_equal(cnl_store_sync(f->s, &seq), 0);
	assert_int_equal(seq, w + 6);
	/* What follows takes the next count; the lost one stays lost. */
	cnl_store_batch_window(f->s, CNL_STORE_WINDOW_SHUT);
	assert_int_equal(batch_create(f, &d, 0), 0);
	assert_int_equal(cnl_store_written(f->s), w + 7);
	assert_int_equal(cnl_store_sync(f->s, &seq), 0);
	assert_int_equal(seq, w + 7);
	assert_int_equal(cnl_store_lost(f->s, w + 5), -ENOSPC);
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM jobs"), 8);
	cnl_store_set_batch_hook(f->s, NULL, NULL);
}

/*
 * A reader (cnl_store_open_sqlite_reader(), for cnlabd's lock-free GETs):
 * it sees what was committed and nothing of a transaction still open, it
 * cannot write, and under group commit the count of commits it may have
 * seen (cnl_store_seen()) never lags the count written, also after a
 * transaction that wrote nothing.
 */
static void test_reader(void **state)
{
	struct fixture *f = *state;
	struct cnl_store *rd = NULL;
	struct cnl_store_job a, b, got;
	int64_t w;

	/* PostgreSQL has no group commit: each commit is durable. */
	assert_int_equal(cnl_store_group_commit(f->s),
	                 is_pg(f->path) ? -ENOTSUP : 0);
	assert_int_equal(cnl_store_open_reader(f->s, &rd), 0);
	job_template(f, &a);
	assert_int_equal(cnl_store_job_create(f->s, &a, NULL, NULL),
	                 CNL_STORE_CREATED);
	assert_int_equal(cnl_store_job_get(rd, a.id, &got), 0);
	assert_string_equal(got.id, a.id);
	assert_int_equal(cnl_store_seen(f->s), cnl_store_written(f->s));

	/* Uncommitted: invisible to the reader, then visible. */
	w = cnl_store_written(f->s);
	assert_int_equal(cnl_store_tx_begin(f->s), 0);
	job_template(f, &b);
	assert_int_equal(cnl_store_job_create(f->s, &b, NULL, NULL),
	                 CNL_STORE_CREATED);
	assert_int_equal(cnl_store_job_get(rd, b.id, &got), -CNL_ENOTFOUND);
	assert_int_equal(cnl_store_tx_commit(f->s), 0);
	assert_int_equal(cnl_store_job_get(rd, b.id, &got), 0);
	assert_int_equal(cnl_store_written(f->s), is_pg(f->path) ? 0 : w + 1);
	assert_int_equal(cnl_store_seen(f->s), is_pg(f->path) ? 0 : w + 1);

	/* A transaction that writes nothing leaves the counts level. */
	assert_int_equal(cnl_store_tx_begin(f->s), 0);
	assert_int_equal(cnl_store_tx_commit(f->s), 0);
	assert_int_equal(cnl_store_seen(f->s), cnl_store_written(f->s));

	/* The reader cannot write, and its failure changes nothing. */
	job_template(f, &b);
	assert_true(cnl_store_job_create(rd, &b, NULL, NULL) < 0);
	assert_int_equal(cnl_store_job_get(f->s, b.id, &got), -CNL_ENOTFOUND);
	assert_int_equal(cnl_store_seen(f->s), cnl_store_written(f->s));
	cnl_store_close(rd);
}

/* Write system calls made so far by this thread (/proc/thread-self/io),
 * or -1 where the kernel does not count them. */
static long thread_writes(void)
{
	FILE *fp = fopen("/proc/thread-self/io", "r");
	char line[128];
	long n = -1;

	if (!fp)
		return -1;
	while (fgets(line, sizeof(line), fp))
		if (sscanf(line, "syscw: %ld", &n) == 1)
			break;
	fclose(fp);
	return n;
}

/*
 * The writer's WAL (sqlite_walbuf.c): a commit of several frames (two
 * jobs, their index entries and an audit record) reaches the file in one
 * write system call, not two per frame; and a reader sees every commit
 * at once, also once the WAL has been checkpointed and restarts from its
 * start (a write that does not follow the buffered ones), with
 * cnl_store_sync() checkpointing on the way; and a transaction of
 * thousands of frames commits whole.
 */
static void test_wal_one_write_per_commit(void **state)
{
	struct fixture *f = *state;
	struct cnl_store *rd = NULL;
	struct cnl_store_job a, b, got;
	long w0, w1;
	int64_t seq;

	if (is_pg(f->path))
		skip(); /* SQLite's own machinery */

	assert_int_equal(cnl_store_group_commit(f->s), 0);
	assert_int_equal(cnl_store_open_sqlite_reader(f->s, &rd), 0);
	job_template(f, &a);
	assert_int_equal(cnl_store_job_create(f->s, &a, NULL, NULL),
	                 CNL_STORE_CREATED);
	w0 = thread_writes();
	assert_true(w0 >= 0); /* Linux counts them: the test must not pass
	                       * for want of a count */
	assert_int_equal(cnl_store_tx_begin(f->s), 0);
	job_template(f, &a);
	assert_int_equal(cnl_store_job_create(f->s, &a, NULL, NULL),
	                 CNL_STORE_CREATED);
	job_template(f, &b);
	assert_int_equal(cnl_store_job_create(f->s, &b, NULL, NULL),
	                 CNL_STORE_CREATED);
	assert_int_equal(cnl_store_audit_append(
	                     f->s,
	                     &(struct cnl_store_audit){.ts_ms = T0,
	                                               .actor = "alice",
	                                               .action = "job.create",
	                                               .target = "x",
	                                               .result = "201"},
	                     NULL),
	                 0);
	assert_int_equal(cnl_store_tx_commit(f->s), 0);
	w1 = thread_writes();
	assert_int_equal(w1 - w0, 1);
	assert_int_equal(cnl_store_job_get(rd, a.id, &got), 0);
	assert_int_equal(cnl_store_job_get(rd, b.id, &got), 0);

	/* Enough commits for the syncer's checkpoints to let the WAL
	 * restart; each one visible to the reader as soon as it returns. */
	for (int i = 0; i < 1500; i++) {
		job_template(f, &a);
		assert_int_equal(cnl_store_job_create(f->s, &a, NULL, NULL),
		                 CNL_STORE_CREATED);
		assert_int_equal(cnl_store_job_get(rd, a.id, &got), 0);
		assert_string_equal(got.id, a.id);
		if (i % 100 == 99)
			assert_int_equal(cnl_store_sync(f->s, &seq), 0);
	}
	/* One transaction of far more frames than one write may carry
	 * (the default VFS cuts a write at 128 KiB). */
	assert_int_equal(cnl_store_tx_begin(f->s), 0);
	for (int i = 0; i < 2000; i++) {
		job_template(f, &a);
		assert_int_equal(cnl_store_job_create(f->s, &a, NULL, NULL),
		                 CNL_STORE_CREATED);
	}
	assert_int_equal(cnl_store_tx_commit(f->s), 0);
	assert_int_equal(cnl_store_job_get(rd, a.id, &got), 0);
	cnl_store_close(rd);
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM jobs"), 3503);
}

static void test_servers(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_project other;
	struct cnl_store_server v, w, got, out[3];
	int n = -1;

	server_template(f, "nb", &v);
	assert_int_equal(cnl_store_server_create(f->s, &v, NULL, NULL),
	                 CNL_STORE_CREATED);
	assert_int_equal(cnl_store_server_get(f->s, v.id, &got), 0);
	assert_memory_equal(&got, &v, sizeof(v));
	assert_int_equal(cnl_store_server_get(f->s, "srv_nope", &got),
	                 -CNL_ENOTFOUND);

	/* A name is unique per project, not globally. */
	server_template(f, "nb", &w);
	assert_int_equal(cnl_store_server_create(f->s, &w, NULL, NULL),
	                 -CNL_EDUP);
	make_project(f, "other", &other);
	copy_id(w.project_id, other.id);
	assert_int_equal(cnl_store_server_create(f->s, &w, NULL, NULL),
	                 CNL_STORE_CREATED);

	server_template(f, "nb2", &w);
	assert_int_equal(cnl_store_server_create(f->s, &w, NULL, NULL),
	                 CNL_STORE_CREATED);
	assert_int_equal(
	    cnl_store_server_list(f->s, f->proj.id, NULL, 3, out, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(out[0].id, v.id);
	assert_string_equal(out[1].id, w.id);
	assert_int_equal(cnl_store_server_list(f->s, NULL, NULL, 3, out, &n),
	                 0);
	assert_int_equal(n, 3);
	assert_int_equal(
	    cnl_store_server_list(f->s, NULL, out[1].id, 3, out, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(out[0].id, w.id);
}

/* Password reset, membership removal, and project deletion: refused while
 * the project has unfinished work or servers, then all or nothing. */
static void test_user_member_project_removal(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_membership m = {0};
	struct cnl_store_user got;
	struct cnl_store_project other, p;
	struct cnl_store_job j, k;
	struct cnl_store_server v;
	struct cnl_store_doc d = {0};
	char role[CNL_STORE_ROLE_MAX];

	assert_int_equal(cnl_store_user_set_password(f->s, f->user.id, "$new"),
	                 0);
	assert_int_equal(cnl_store_user_get(f->s, f->user.id, &got), 0);
	assert_string_equal(got.password_hash, "$new");
	assert_int_equal(cnl_store_user_set_password(f->s, "usr_nope", "$x"),
	                 -CNL_ENOTFOUND);

	copy_id(m.user_id, f->user.id);
	copy_id(m.project_id, f->proj.id);
	snprintf(m.role, sizeof(m.role), "member");
	assert_int_equal(cnl_store_membership_set(f->s, &m), 0);
	assert_int_equal(
	    cnl_store_membership_delete(f->s, f->user.id, f->proj.id), 0);
	assert_int_equal(cnl_store_membership_get_role(
	                     f->s, f->user.id, f->proj.id, role, sizeof(role)),
	                 -CNL_ENOTFOUND);
	assert_int_equal(
	    cnl_store_membership_delete(f->s, f->user.id, f->proj.id),
	    -CNL_ENOTFOUND);

	/* A project with a pending job is busy; so is one with a server. */
	assert_int_equal(cnl_store_membership_set(f->s, &m), 0);
	job_template(f, &j);
	assert_int_equal(cnl_store_job_create(f->s, &j, "key-1", NULL),
	                 CNL_STORE_CREATED);
	snprintf(d.kind, sizeof(d.kind), "log");
	snprintf(d.id, sizeof(d.id), "%s/1", j.id);
	snprintf(d.parent, sizeof(d.parent), "%s", j.id);
	d.body = (char *)"{\"data\":\"x\"}";
	assert_int_equal(cnl_store_doc_put(f->s, &d, true), 0);
	snprintf(d.kind, sizeof(d.kind), "quota");
	snprintf(d.id, sizeof(d.id), "%s", f->proj.id);
	d.parent[0] = '\0';
	d.body = (char *)"{\"gpu_hours\":1}";
	assert_int_equal(cnl_store_doc_put(f->s, &d, true), 0);
	assert_int_equal(cnl_store_project_delete(f->s, f->proj.id), -EBUSY);
	assert_int_equal(
	    cnl_store_job_update_state(f->s, j.id, "succeeded", 0, f->now), 0);
	server_template(f, "nb", &v);
	assert_int_equal(cnl_store_server_create(f->s, &v, NULL, NULL),
	                 CNL_STORE_CREATED);
	assert_int_equal(cnl_store_project_delete(f->s, f->proj.id), -EBUSY);
	/* Nothing was removed by the refusals. */
	assert_int_equal(cnl_store_job_get(f->s, j.id, &k), 0);
	assert_int_equal(cnl_store_membership_get_role(
	                     f->s, f->user.id, f->proj.id, role, sizeof(role)),
	                 0);
	assert_int_equal(cnl_store_server_delete(f->s, v.id), 0);

	/* Another project's things are untouched by the delete. */
	make_project(f, "other", &other);
	job_template(f, &k);
	copy_id(k.project_id, other.id);
	assert_int_equal(cnl_store_job_create(f->s, &k, "key-2", NULL),
	                 CNL_STORE_CREATED);

	assert_int_equal(cnl_store_project_delete(f->s, f->proj.id), 0);
	assert_int_equal(cnl_store_project_get(f->s, f->proj.id, &p),
	                 -CNL_ENOTFOUND);
	assert_int_equal(cnl_store_job_get(f->s, j.id, &j), -CNL_ENOTFOUND);
	assert_int_equal(cnl_store_doc_get(f->s, "quota", f->proj.id, &d),
	                 -CNL_ENOTFOUND);
	assert_int_equal(raw_int(f->path, "SELECT count(*) FROM docs WHERE "
	                                  "kind = 'log'"),
	                 0);
	assert_int_equal(raw_int(f->path, "SELECT count(*) FROM memberships"),
	                 0);
	assert_int_equal(raw_int(f->path, "SELECT count(*) FROM idempotency"),
	                 1);
	assert_int_equal(cnl_store_job_get(f->s, k.id, &j), 0);
	/* Its name is free again. */
	make_project(f, "vision", &p);
	assert_int_equal(cnl_store_project_delete(f->s, "prj_nope"),
	                 -CNL_ENOTFOUND);
}

static void test_idempotency(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_job a, b, ret;
	struct cnl_store_server v, vret;
	struct cnl_store_user bob;

	job_template(f, &a);
	assert_int_equal(cnl_store_job_create(f->s, &a, "key-1", &ret),
	                 CNL_STORE_CREATED);

	/* A retry with a new id and other fields gets the original back. */
	job_template(f, &b);
	snprintf(b.command, sizeof(b.command), "something else");
	memset(&ret, 0, sizeof(ret));
	assert_int_equal(cnl_store_job_create(f->s, &b, "key-1", &ret),
	                 CNL_STORE_REPLAYED);
	assert_string_equal(ret.id, a.id);
	assert_string_equal(ret.command, a.command);
	assert_int_equal(cnl_store_job_get(f->s, b.id, &ret), -CNL_ENOTFOUND);
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM jobs"), 1);

	/* Another key makes another job; "" means no key. */
	assert_int_equal(cnl_store_job_create(f->s, &b, "key-2", &ret),
	                 CNL_STORE_CREATED);
	assert_string_equal(ret.id, b.id);
	job_template(f, &b);
	assert_int_equal(cnl_store_job_create(f->s, &b, "", NULL),
	                 CNL_STORE_CREATED);
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM jobs"), 3);
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM idempotency"),
	                 2);

	/* A job's key is refused for a server (one namespace). */
	server_template(f, "nb", &v);
	assert_int_equal(cnl_store_server_create(f->s, &v, "key-1", &vret),
	                 -CNL_EDUP);
	assert_int_equal(cnl_store_server_get(f->s, v.id, &vret),
	                 -CNL_ENOTFOUND);
	/* ... and server keys replay like job keys. */
	assert_int_equal(cnl_store_server_create(f->s, &v, "key-s", &vret),
	                 CNL_STORE_CREATED);
	server_template(f, "nb-retry", &vret);
	assert_int_equal(cnl_store_server_create(f->s, &vret, "key-s", &vret),
	                 CNL_STORE_REPLAYED);
	assert_string_equal(vret.id, v.id);
	assert_string_equal(vret.name, "nb");

	/* Another user cannot replay, and so cannot read, alice's job. */
	make_user(f, "bob", &bob);
	job_template(f, &b);
	copy_id(b.user_id, bob.id);
	assert_int_equal(cnl_store_job_create(f->s, &b, "key-1", &ret),
	                 -CNL_EDUP);

	/* A failed create stores neither the job nor the key. */
	job_template(f, &b);
	copy_id(b.id, a.id); /* duplicate id */
	assert_int_equal(cnl_store_job_create(f->s, &b, "key-3", &ret),
	                 -CNL_EDUP);
	job_template(f, &b);
	assert_int_equal(cnl_store_job_create(f->s, &b, "key-3", &ret),
	                 CNL_STORE_CREATED);
	assert_string_equal(ret.id, b.id);
}

#define PAGING_JOBS 2500

static void test_paging(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_project other;
	struct cnl_store_job j, *page;
	char(*ids)[CNL_ID_MAX] = calloc(PAGING_JOBS, CNL_ID_MAX);
	const int expect[] = {1000, 1000, 500, 0};
	const char *after = NULL;
	int n, seen = 0;

	assert_non_null(ids);
	page = calloc(CNL_STORE_LIST_MAX, sizeof(*page));
	assert_non_null(page);
	make_project(f, "other", &other);
	for (int i = 0; i < PAGING_JOBS; i++) {
		job_template(f, &j);
		memcpy(ids[i], j.id, CNL_ID_MAX);
		assert_int_equal(cnl_store_job_create(f->s, &j, NULL, NULL),
		                 CNL_STORE_CREATED);
		/* Interleave jobs of another project, which must not show. */
		if (i % 100 == 0) {
			job_template(f, &j);
			copy_id(j.project_id, other.id);
			assert_int_equal(
			    cnl_store_job_create(f->s, &j, NULL, NULL),
			    CNL_STORE_CREATED);
		}
	}

	for (size_t k = 0; k < sizeof(expect) / sizeof(expect[0]); k++) {
		n = -1;
		assert_int_equal(cnl_store_job_list(f->s, f->proj.id, after,
		                                    CNL_STORE_LIST_MAX, page,
		                                    &n),
		                 0);
		assert_int_equal(n, expect[k]);
		/* The ids were made in order: page order must be theirs. */
		for (int i = 0; i < n; i++)
			assert_string_equal(page[i].id, ids[seen + i]);
		seen += n;
		if (n)
			after = ids[seen - 1];
	}
	assert_int_equal(seen, PAGING_JOBS);

	/* Without a project filter every job is listed. */
	assert_int_equal(
	    cnl_store_job_list(f->s, other.id, NULL, 1000, page, &n), 0);
	assert_int_equal(n, PAGING_JOBS / 100);
	assert_int_equal(cnl_store_job_list(f->s, NULL, ids[PAGING_JOBS - 2],
	                                    1000, page, &n),
	                 0);
	assert_int_equal(n, 1);
	assert_string_equal(page[0].id, ids[PAGING_JOBS - 1]);
	free(page);
	free(ids);
}

/* What cnl_store_job_each_state() hands over, and what the callback does
 * meanwhile: as a restarting controller may, it fails the job named
 * "fail", and it stops the walk at the job named "stop". */
struct walk {
	struct cnl_store *s;
	struct cnl_store_job seen[8];
	int n;
	char fail[CNL_ID_MAX], stop[CNL_ID_MAX];
};

static int walk_seen(void *ud, const struct cnl_store_job *j)
{
	struct walk *w = ud;

	assert_true(w->n < 8);
	w->seen[w->n++] = *j;
	if (strcmp(j->id, w->stop) == 0)
		return -CNL_EFIELD;
	if (strcmp(j->id, w->fail) == 0)
		assert_int_equal(cnl_store_job_update_run(w->s, j->id, "failed",
		                                          -1, j->updated_ms + 1,
		                                          "{}"),
		                 0);
	return 0;
}

/* A restart's bulk reads: counts per state, and every job of a state in
 * one walk, in id order, each row as cnl_store_job_get() reads it; the
 * callback may write (the job it fails is stored failed and seen once),
 * and its error stops the walk and comes back. */
static void test_job_each_state(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_job j[5], got;
	struct walk w = {.s = f->s};
	int64_t n = -1;

	for (int i = 0; i < 5; i++) {
		job_template(f, &j[i]);
		j[i].priority = i % 4;
		snprintf(j[i].run, sizeof(j[i].run), "{\"n\":%d}", i);
		assert_int_equal(cnl_store_job_create(f->s, &j[i], NULL, NULL),
		                 CNL_STORE_CREATED);
	}
	assert_int_equal(cnl_store_job_update_run(f->s, j[1].id, "running", 0,
	                                          f->now, "{\"node\":\"n1\"}"),
	                 0);
	assert_int_equal(cnl_store_job_count_state(f->s, "pending", &n), 0);
	assert_int_equal(n, 4);
	assert_int_equal(cnl_store_job_count_state(f->s, "running", &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(cnl_store_job_count_state(f->s, "failed", &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(cnl_store_job_count_state(f->s, "lost", &n),
	                 -CNL_EFIELD);

	copy_id(w.fail, j[2].id);
	assert_int_equal(
	    cnl_store_job_each_state(f->s, "pending", walk_seen, &w), 0);
	assert_int_equal(w.n, 4);
	for (int i = 0, k = 0; i < 5; i++) {
		if (i == 1)
			continue;
		assert_string_equal(w.seen[k].id, j[i].id);
		assert_int_equal(w.seen[k].priority, j[i].priority);
		assert_string_equal(w.seen[k].run, j[i].run);
		assert_int_equal(cnl_store_job_get(f->s, j[i].id, &got), 0);
		if (i != 2)
			assert_memory_equal(&w.seen[k], &got, sizeof(got));
		k++;
	}
	assert_int_equal(cnl_store_job_get(f->s, j[2].id, &got), 0);
	assert_string_equal(got.state, "failed");
	assert_int_equal(cnl_store_job_count_state(f->s, "pending", &n), 0);
	assert_int_equal(n, 3);

	w.n = 0;
	w.fail[0] = '\0';
	assert_int_equal(
	    cnl_store_job_each_state(f->s, "running", walk_seen, &w), 0);
	assert_int_equal(w.n, 1);
	assert_string_equal(w.seen[0].run, "{\"node\":\"n1\"}");

	w.n = 0;
	copy_id(w.stop, j[3].id);
	assert_int_equal(
	    cnl_store_job_each_state(f->s, "pending", walk_seen, &w),
	    -CNL_EFIELD);
	assert_int_equal(w.n, 2); /* j[0], then j[3] stopped it */
	assert_int_equal(cnl_store_job_each_state(f->s, "lost", walk_seen, &w),
	                 -CNL_EFIELD);
	assert_int_equal(cnl_store_job_each_state(f->s, "pending", NULL, &w),
	                 -EINVAL);
}

static void append_audit(struct fixture *f, int i, struct cnl_store_audit *ret)
{
	struct cnl_store_audit a;

	memset(&a, 0, sizeof(a));
	a.ts_ms = T0 + i;
	snprintf(a.actor, sizeof(a.actor), "alice");
	snprintf(a.action, sizeof(a.action), "job.create");
	snprintf(a.target, sizeof(a.target), "job_%d", i);
	snprintf(a.result, sizeof(a.result), "ok");
	assert_int_equal(cnl_store_audit_append(f->s, &a, ret), 0);
}

/* What cnl_store_audit_latest() hands over, as "target=result;" in a
 * buffer (in target order: the walk groups by target). */
static int latest_seen(void *ud, const char *target, const char *result)
{
	char *buf = ud;
	size_t at = strlen(buf);

	snprintf(buf + at, 512 - at, "%s=%s;", target, result);
	return strcmp(target, "stop") == 0 ? -CNL_EFIELD : 0;
}

/* The latest record of one action per target, in one walk: later records
 * win, other actions and their targets are not seen, and an error from
 * the callback stops the walk and comes back. */
static void test_audit_latest(void **state)
{
	static const char *const rec[][3] = {
	    {"job_a", "sched.slice", "pending: first"},
	    {"job_b", "sched.slice", "pending: b only"},
	    {"job_a", "sched.queue", "queued"},
	    {"job_a", "sched.slice", "pending: second"},
	    {"job_c", "sched.queue", "not a slice"},
	    {"job_a", "sched.slicer", "another action"},
	};
	struct fixture *f = *state;
	char buf[512] = "";

	for (size_t i = 0; i < sizeof(rec) / sizeof(rec[0]); i++) {
		struct cnl_store_audit a = {.ts_ms = T0 + (int64_t)i};

		snprintf(a.actor, sizeof(a.actor), "scheduler");
		snprintf(a.target, sizeof(a.target), "%s", rec[i][0]);
		snprintf(a.action, sizeof(a.action), "%s", rec[i][1]);
		snprintf(a.result, sizeof(a.result), "%s", rec[i][2]);
		assert_int_equal(cnl_store_audit_append(f->s, &a, NULL), 0);
	}
	assert_int_equal(
	    cnl_store_audit_latest(f->s, "sched.slice", latest_seen, buf), 0);
	assert_string_equal(buf,
	                    "job_a=pending: second;job_b=pending: b only;");
	buf[0] = '\0';
	assert_int_equal(
	    cnl_store_audit_latest(f->s, "nothing", latest_seen, buf), 0);
	assert_string_equal(buf, "");
	{
		struct cnl_store_audit a = {.ts_ms = T0 + 10};

		snprintf(a.actor, sizeof(a.actor), "scheduler");
		snprintf(a.target, sizeof(a.target), "stop");
		snprintf(a.action, sizeof(a.action), "sched.slice");
		snprintf(a.result, sizeof(a.result), "x");
		assert_int_equal(cnl_store_audit_append(f->s, &a, NULL), 0);
	}
	buf[0] = '\0';
	assert_int_equal(
	    cnl_store_audit_latest(f->s, "sched.slice", latest_seen, buf),
	    -CNL_EFIELD);
	assert_int_equal(cnl_store_audit_latest(f->s, NULL, latest_seen, buf),
	                 -EINVAL);
}

/* The chain's hashes are those the format of sqlite_audit.c defines
 * (SHA-256 of the predecessor's hash and the canonical text), computed
 * here by another program: what an auditor's own tool recomputes. */
/* An append inside a write transaction links to the one before it in the
 * same transaction without reading the table (sqlite_audit.c): whatever
 * undoes that one (a rollback, whole or to a savepoint; a batch's joiner
 * that fails) or moves the head from elsewhere (another handle, between
 * two transactions) must leave the chain whole. */
static void test_audit_in_transactions(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_audit a1, a2, a3, a4, b, c, o, n;
	struct cnl_store *s2 = NULL;
	char err[256];
	int64_t bad = -1;

	assert_int_equal(cnl_store_tx_begin(f->s), 0);
	append_audit(f, 1, &a1);
	append_audit(f, 2, &a2);
	assert_string_equal(a2.prev_hash, a1.hash);
	assert_int_equal(cnl_store_tx_begin(f->s), 0); /* a savepoint */
	append_audit(f, 3, &a3);
	assert_int_equal(a3.seq, 3);
	assert_int_equal(cnl_store_tx_rollback(f->s), 0);
	append_audit(f, 4, &a4);
	assert_int_equal(a4.seq, 3); /* the undone one's seq, again */
	assert_string_equal(a4.prev_hash, a2.hash);
	assert_int_equal(cnl_store_tx_commit(f->s), 0);

	assert_int_equal(cnl_store_tx_begin(f->s), 0);
	append_audit(f, 5, &b);
	assert_int_equal(cnl_store_tx_rollback(f->s), 0);
	append_audit(f, 6, &c); /* alone, after the rollback */
	assert_int_equal(c.seq, 4);
	assert_string_equal(c.prev_hash, a4.hash);

	/* Another handle appends between two transactions of this one. */
	if (cnl_store_open(f->path, &s2, err, sizeof(err)) != 0)
		fail_msg("second handle: %s", err);
	assert_int_equal(cnl_store_tx_begin(f->s), 0);
	append_audit(f, 7, &n);
	assert_int_equal(cnl_store_tx_commit(f->s), 0);
	o = n;
	snprintf(o.target, sizeof(o.target), "other");
	assert_int_equal(cnl_store_audit_append(s2, &o, &o), 0);
	assert_string_equal(o.prev_hash, n.hash);
	assert_int_equal(cnl_store_tx_begin(f->s), 0);
	append_audit(f, 8, &n);
	assert_int_equal(cnl_store_tx_commit(f->s), 0);
	assert_string_equal(n.prev_hash, o.hash);
	assert_int_equal(n.seq, o.seq + 1);
	cnl_store_close(s2);

	/* A batch: the joiner that fails takes its record with it. */
	if (!is_pg(f->path)) {
		struct cnl_store_job j;

		assert_int_equal(cnl_store_group_commit(f->s), 0);
		cnl_store_batch_window(f->s, CNL_STORE_WINDOW_OPEN);
		batch_job(f, &j, 0);
		append_audit(f, 9, &a1);
		assert_int_equal(cnl_store_tx_commit_batch(f->s), 1);
		batch_job(f, &j, 1);
		append_audit(f, 10, &a2);
		assert_int_equal(cnl_store_tx_rollback(f->s), 0);
		batch_job(f, &j, 1);
		append_audit(f, 11, &a3);
		assert_string_equal(a3.prev_hash, a1.hash);
		assert_int_equal(a3.seq, a1.seq + 1);
		assert_int_equal(cnl_store_tx_commit_batch(f->s), 1);
		cnl_store_batch_window(f->s, CNL_STORE_WINDOW_SHUT);
		assert_int_equal(cnl_store_flush(f->s), 0);
	}
	assert_int_equal(cnl_store_audit_verify(f->s, &bad), 0);
	assert_int_equal(bad, -1);
}

static void test_audit_hash_known(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_audit a, b;
	int64_t bad = 0;

	append_audit(f, 0, &a);
	append_audit(f, 1, &b);
	assert_int_equal(a.seq, 1);
	assert_string_equal(a.prev_hash, "0000000000000000000000000000000000000"
	                                 "000000000000000000000000000");
	assert_string_equal(a.hash, "d3654d47bcc6354f70d6f3d60c76b2dd57db9d98"
	                            "ba98f40af805d48f7469bab6");
	assert_string_equal(b.prev_hash, a.hash);
	assert_string_equal(b.hash, "dfa9498eff2887850974e7d4bb894a3882c7ba29"
	                            "aec8df643eccc617b608b774");
	assert_int_equal(cnl_store_audit_verify(f->s, &bad), 0);
}

static void test_audit_chain(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_audit r, prev, page[64];
	int64_t bad = -1;
	int n;

	for (int i = 1; i <= 100; i++) {
		append_audit(f, i, &r);
		assert_int_equal(r.seq, i);
		assert_int_equal(strlen(r.hash), 64);
		if (i == 1)
			assert_string_equal(
			    r.prev_hash, "0000000000000000000000000000000"
			                 "000000000000000000000000000000000");
		else
			assert_string_equal(r.prev_hash, prev.hash);
		prev = r;
	}
	assert_int_equal(cnl_store_audit_verify(f->s, &bad), 0);
	assert_int_equal(bad, -1);

	/* List in pages of 64: 64 + 36. */
	assert_int_equal(cnl_store_audit_list(f->s, 0, 64, page, &n), 0);
	assert_int_equal(n, 64);
	assert_int_equal(page[0].seq, 1);
	assert_string_equal(page[9].target, "job_10");
	assert_int_equal(cnl_store_audit_list(f->s, page[63].seq, 64, page, &n),
	                 0);
	assert_int_equal(n, 36);
	assert_int_equal(page[35].seq, 100);
	assert_string_equal(page[35].hash, prev.hash);

	/* An edited field breaks that record's hash. */
	raw_exec(f->path, "UPDATE audit SET result = 'denied' WHERE seq = 37");
	assert_int_equal(cnl_store_audit_verify(f->s, &bad), -CNL_ECORRUPT);
	assert_int_equal(bad, 37);
	raw_exec(f->path, "UPDATE audit SET result = 'ok' WHERE seq = 37");
	bad = -1;
	assert_int_equal(cnl_store_audit_verify(f->s, &bad), 0);
	assert_int_equal(bad, -1);

	/* An edited timestamp, too. */
	raw_exec(f->path, "UPDATE audit SET ts_ms = ts_ms + 1 WHERE seq = 1");
	assert_int_equal(cnl_store_audit_verify(f->s, &bad), -CNL_ECORRUPT);
	assert_int_equal(bad, 1);
	raw_exec(f->path, "UPDATE audit SET ts_ms = ts_ms - 1 WHERE seq = 1");
	assert_int_equal(cnl_store_audit_verify(f->s, &bad), 0);

	/* A deleted middle record leaves a gap. */
	raw_exec(f->path, "DELETE FROM audit WHERE seq = 50");
	assert_int_equal(cnl_store_audit_verify(f->s, &bad), -CNL_ECORRUPT);
	assert_int_equal(bad, 50);
}

static void test_audit_renumbered_and_tail(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_audit r;
	int64_t bad = -1;

	for (int i = 1; i <= 10; i++)
		append_audit(f, i, &r);

	/* Deleting a record and renumbering the rest breaks the links. */
	raw_exec(f->path, "DELETE FROM audit WHERE seq = 4;"
	                  "UPDATE audit SET seq = seq - 1 WHERE seq > 4");
	assert_int_equal(cnl_store_audit_verify(f->s, &bad), -CNL_ECORRUPT);
	assert_int_equal(bad, 4);

	/*
	 * A cut tail is a valid shorter chain (documented), but seq is never
	 * reused, so the next append exposes the gap.
	 */
	cnl_store_close(f->s);
	f->s = NULL;
	teardown(state);
	setup(state);
	f = *state;
	for (int i = 1; i <= 10; i++)
		append_audit(f, i, &r);
	raw_exec(f->path, "DELETE FROM audit WHERE seq >= 9");
	assert_int_equal(cnl_store_audit_verify(f->s, &bad), 0);
	append_audit(f, 11, &r);
	assert_int_equal(r.seq, 11);
	assert_int_equal(cnl_store_audit_verify(f->s, &bad), -CNL_ECORRUPT);
	assert_int_equal(bad, 9);
}

static void test_bad_inputs_change_nothing(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_project p;
	struct cnl_store_user u;
	struct cnl_store_job j, out[2];
	struct cnl_store_server v;
	struct cnl_store_audit a;
	struct cnl_store_membership m;
	char key[CNL_STORE_IDEM_MAX + 8];
	int64_t before = raw_total(f->path);
	int n = -7;

	memset(&p, 0, sizeof(p));
	new_id(f, "prj", p.id);
	assert_int_equal(cnl_store_project_create(f->s, &p), -CNL_EFIELD);
	memset(p.name, 'a', sizeof(p.name)); /* no room for the NUL */
	assert_int_equal(cnl_store_project_create(f->s, &p), -CNL_ESIZE);
	snprintf(p.name, sizeof(p.name), "fine");
	snprintf(p.id, sizeof(p.id), "not-an-id");
	assert_int_equal(cnl_store_project_create(f->s, &p), -CNL_EFIELD);
	new_id(f, "prj", p.id);
	p.created_ms = -1;
	assert_int_equal(cnl_store_project_create(f->s, &p), -CNL_ESIZE);

	memset(&u, 0, sizeof(u));
	new_id(f, "usr", u.id);
	assert_int_equal(cnl_store_user_create(f->s, &u), -CNL_EFIELD);
	snprintf(u.name, sizeof(u.name), "dave");
	memset(u.password_hash, 'h', sizeof(u.password_hash));
	assert_int_equal(cnl_store_user_create(f->s, &u), -CNL_ESIZE);

	job_template(f, &j);
	j.priority = 4;
	assert_int_equal(cnl_store_job_create(f->s, &j, NULL, NULL),
	                 -CNL_ESIZE);
	j.priority = -1;
	assert_int_equal(cnl_store_job_create(f->s, &j, NULL, NULL),
	                 -CNL_ESIZE);
	j.priority = 0;
	snprintf(j.state, sizeof(j.state), "bogus");
	assert_int_equal(cnl_store_job_create(f->s, &j, NULL, NULL),
	                 -CNL_EFIELD);
	snprintf(j.state, sizeof(j.state), "pending");
	j.command[0] = '\0';
	assert_int_equal(cnl_store_job_create(f->s, &j, NULL, NULL),
	                 -CNL_EFIELD);
	memset(j.command, 'c', sizeof(j.command));
	assert_int_equal(cnl_store_job_create(f->s, &j, NULL, NULL),
	                 -CNL_ESIZE);
	job_template(f, &j);
	memset(key, 'k', sizeof(key) - 1);
	key[sizeof(key) - 1] = '\0';
	assert_int_equal(cnl_store_job_create(f->s, &j, key, NULL), -CNL_ESIZE);
	j.deadline_ms = -5;
	assert_int_equal(cnl_store_job_create(f->s, &j, NULL, NULL),
	                 -CNL_ESIZE);

	assert_int_equal(cnl_store_job_list(f->s, NULL, NULL, 0, out, &n),
	                 -CNL_ESIZE);
	assert_int_equal(cnl_store_job_list(f->s, NULL, NULL, 1001, out, &n),
	                 -CNL_ESIZE);
	assert_int_equal(n, -7);

	server_template(f, "", &v);
	assert_int_equal(cnl_store_server_create(f->s, &v, NULL, NULL),
	                 -CNL_EFIELD);
	server_template(f, "ok", &v);
	v.storage_gb = -1;
	assert_int_equal(cnl_store_server_create(f->s, &v, NULL, NULL),
	                 -CNL_ESIZE);

	memset(&a, 0, sizeof(a));
	snprintf(a.action, sizeof(a.action), "x");
	assert_int_equal(cnl_store_audit_append(f->s, &a, NULL), -CNL_EFIELD);
	snprintf(a.actor, sizeof(a.actor), "alice");
	memset(a.target, 't', sizeof(a.target));
	assert_int_equal(cnl_store_audit_append(f->s, &a, NULL), -CNL_ESIZE);

	memset(&m, 0, sizeof(m));
	copy_id(m.user_id, f->user.id);
	copy_id(m.project_id, f->proj.id);
	assert_int_equal(cnl_store_membership_set(f->s, &m), -CNL_EFIELD);

	assert_int_equal(raw_total(f->path), before);
}

/* Read exactly @len bytes unless EOF comes first: bytes read, or -1. */
static ssize_t read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t r = read(fd, (char *)buf + got, len - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* The child: create jobs until killed, acknowledging each on @fd. */
static void __attribute__((noreturn))
durability_child(struct fixture *f, int fd)
{
	struct cnl_store *s = NULL;
	struct cnl_store_job j;

	if (cnl_store_open(f->path, &s, NULL, 0) < 0)
		_exit(2);
	f->s = s;
	cnl_id_gen_init(&f->g, 99);
	for (int i = 0; i < 1000000; i++) {
		job_template(f, &j);
		if (cnl_store_job_create(s, &j, NULL, NULL) !=
		    CNL_STORE_CREATED)
			_exit(3);
		if (write(fd, j.id, CNL_ID_MAX) != CNL_ID_MAX)
			_exit(4);
	}
	_exit(5);
}

#define ACKS_BEFORE_KILL 200
#define ACKS_MAX         100000

static void doc_init(struct cnl_store_doc *d, const char *kind, const char *id,
                     const char *parent, const char *name, const char *body)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->kind, sizeof(d->kind), "%s", kind);
	snprintf(d->id, sizeof(d->id), "%s", id);
	snprintf(d->parent, sizeof(d->parent), "%s", parent);
	snprintf(d->name, sizeof(d->name), "%s", name);
	d->body = (char *)body;
	d->updated_ms = 7;
}

static void test_documents(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_doc d, got, out[4];
	int64_t before;
	int n = -1;

	doc_init(&d, "profile", "p1", "", "h100-25pct", "{\"blocks\":25}");
	assert_int_equal(cnl_store_doc_put(f->s, &d, true), 0);
	/* create refuses an existing id; a plain put replaces it */
	assert_int_equal(cnl_store_doc_put(f->s, &d, true), -CNL_EDUP);
	d.body = "{\"blocks\":30}";
	assert_int_equal(cnl_store_doc_put(f->s, &d, false), 0);
	assert_int_equal(cnl_store_doc_get(f->s, "profile", "p1", &got), 0);
	assert_string_equal(got.body, "{\"blocks\":30}");
	assert_string_equal(got.name, "h100-25pct");
	assert_int_equal(got.updated_ms, 7);
	cnl_store_doc_done(&got);
	assert_null(got.body);
	assert_int_equal(
	    cnl_store_doc_get_by_name(f->s, "profile", "", "h100-25pct", &got),
	    0);
	assert_string_equal(got.id, "p1");
	cnl_store_doc_done(&got);
	/* names are unique per kind and parent, not across kinds */
	doc_init(&d, "profile", "p2", "", "h100-25pct", "{}");
	assert_int_equal(cnl_store_doc_put(f->s, &d, true), -CNL_EDUP);
	doc_init(&d, "quota", "q1", "", "h100-25pct", "{}");
	assert_int_equal(cnl_store_doc_put(f->s, &d, true), 0);
	/* bodies must be JSON; a refused put stores nothing */
	before = raw_int(f->path, "SELECT COUNT(*) FROM docs");
	doc_init(&d, "profile", "p3", "", "x", "{not json");
	assert_int_equal(cnl_store_doc_put(f->s, &d, true), -CNL_EFIELD);
	doc_init(&d, "profile", "p3", "", "", "");
	assert_int_equal(cnl_store_doc_put(f->s, &d, true), -CNL_EFIELD);
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM docs"), before);
	/* list by kind and parent, paged by id */
	for (int i = 0; i < 5; i++) {
		char id[8];

		snprintf(id, sizeof(id), "c%d", i);
		doc_init(&d, "log", id, i < 3 ? "job_a" : "job_b", "", "[1]");
		assert_int_equal(cnl_store_doc_put(f->s, &d, true), 0);
	}
	assert_int_equal(
	    cnl_store_doc_list(f->s, "log", "job_a", NULL, 2, out, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(out[0].id, "c0");
	assert_string_equal(out[1].id, "c1");
	cnl_store_docs_done(out, n);
	assert_int_equal(
	    cnl_store_doc_list(f->s, "log", "job_a", "c1", 2, out, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(out[0].id, "c2");
	cnl_store_docs_done(out, n);
	assert_int_equal(
	    cnl_store_doc_list(f->s, "log", NULL, NULL, 4, out, &n), 0);
	assert_int_equal(n, 4);
	cnl_store_docs_done(out, n);
	assert_int_equal(cnl_store_doc_delete(f->s, "log", "c4"), 0);
	assert_int_equal(cnl_store_doc_delete(f->s, "log", "c4"),
	                 -CNL_ENOTFOUND);
	assert_int_equal(cnl_store_doc_get(f->s, "log", "c4", &got),
	                 -CNL_ENOTFOUND);
}

/*
 * A replace (put without create) that would take another document's name
 * is refused and leaves both documents as they were: it never deletes
 * the other one to make room.
 */
static void test_doc_replace_keeps_other_names(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_doc d, got;

	doc_init(&d, "profile", "a", "", "small", "{\"v\":1}");
	assert_int_equal(cnl_store_doc_put(f->s, &d, true), 0);
	doc_init(&d, "profile", "b", "", "large", "{\"v\":2}");
	assert_int_equal(cnl_store_doc_put(f->s, &d, true), 0);
	doc_init(&d, "profile", "b", "", "small", "{\"v\":3}");
	assert_int_equal(cnl_store_doc_put(f->s, &d, false), -CNL_EDUP);
	assert_int_equal(cnl_store_doc_get(f->s, "profile", "a", &got), 0);
	assert_string_equal(got.name, "small");
	assert_string_equal(got.body, "{\"v\":1}");
	cnl_store_doc_done(&got);
	assert_int_equal(cnl_store_doc_get(f->s, "profile", "b", &got), 0);
	assert_string_equal(got.name, "large");
	assert_string_equal(got.body, "{\"v\":2}");
	cnl_store_doc_done(&got);
	/* Its own name, a new body: replaced. */
	doc_init(&d, "profile", "b", "", "large", "{\"v\":4}");
	assert_int_equal(cnl_store_doc_put(f->s, &d, false), 0);
	assert_int_equal(cnl_store_doc_get(f->s, "profile", "b", &got), 0);
	assert_string_equal(got.body, "{\"v\":4}");
	cnl_store_doc_done(&got);
}

/*
 * Two handles on one database (two cnlabd replicas): creates with the
 * same idempotency key from both give one object, the second handle
 * getting the first's back; audit records appended from both, in turns
 * and inside one handle's open transaction, make one chain that verifies.
 */
static void test_two_handles(void **state)
{
	struct fixture *f = *state;
	struct cnl_store *s2 = NULL;
	struct cnl_store_job a, b, got;
	char err[256];

	if (cnl_store_open(f->path, &s2, err, sizeof(err)) != 0)
		fail_msg("second handle: %s", err);
	job_template(f, &a);
	job_template(f, &b);
	assert_int_equal(cnl_store_job_create(f->s, &a, "key-1", &got),
	                 CNL_STORE_CREATED);
	assert_int_equal(cnl_store_job_create(s2, &b, "key-1", &got),
	                 CNL_STORE_REPLAYED);
	assert_string_equal(got.id, a.id);
	assert_int_equal(cnl_store_job_get(s2, b.id, &got), -CNL_ENOTFOUND);
	for (int i = 0; i < 20; i++) {
		struct cnl_store_audit rec = {.ts_ms = T0 + i,
		                              .actor = "alice",
		                              .action = "job.create",
		                              .target = "x",
		                              .result = "201"};

		assert_int_equal(
		    cnl_store_audit_append(i % 2 ? s2 : f->s, &rec, NULL), 0);
	}
	/* One handle's transaction appends; the other's append lands
	 * after it commits, linked to its record. */
	assert_int_equal(cnl_store_tx_begin(f->s), 0);
	assert_int_equal(
	    cnl_store_audit_append(f->s,
	                           &(struct cnl_store_audit){.ts_ms = T0,
	                                                     .actor = "bob",
	                                                     .action = "x",
	                                                     .target = "y",
	                                                     .result = "ok"},
	                           NULL),
	    0);
	assert_int_equal(cnl_store_tx_commit(f->s), 0);
	assert_int_equal(
	    cnl_store_audit_append(s2,
	                           &(struct cnl_store_audit){.ts_ms = T0,
	                                                     .actor = "carol",
	                                                     .action = "x",
	                                                     .target = "y",
	                                                     .result = "ok"},
	                           NULL),
	    0);
	assert_int_equal(cnl_store_audit_verify(f->s, NULL), 0);
	assert_int_equal(cnl_store_audit_verify(s2, NULL), 0);
	assert_int_equal(raw_int(f->path, "SELECT COUNT(*) FROM audit"), 22);
	cnl_store_close(s2);
}

/*
 * The leader's lease and fencing (PostgreSQL; SQLite has one writer by
 * construction and says -ENOTSUP): one holder at a time, epochs that grow
 * with each new holder, a renewal that keeps its epoch; a fenced handle
 * whose lease another took writes nothing, whatever the call; and a
 * takeover waits for the old leader's open transaction, which commits
 * before it, so nothing of the old epoch commits after the new one exists.
 */
static void test_lease_and_fence(void **state)
{
	struct fixture *f = *state;
	struct cnl_store *s2 = NULL;
	struct cnl_store_lease l;
	struct cnl_store_project p;
	char err[256];
	int64_t before;
	pid_t pid;
	int status;

	if (!is_pg(f->path)) {
		assert_int_equal(cnl_store_lease_acquire(f->s, "a", 1000, &l),
		                 -ENOTSUP);
		assert_int_equal(cnl_store_fence(f->s, 1, 1000), -ENOTSUP);
		return;
	}
	if (cnl_store_open(f->path, &s2, err, sizeof(err)) != 0)
		fail_msg("second handle: %s", err);
	assert_int_equal(cnl_store_lease_get(f->s, &l), -CNL_ENOTFOUND);
	assert_int_equal(cnl_store_lease_acquire(f->s, "a", 60000, &l), 0);
	assert_string_equal(l.holder, "a");
	assert_int_equal(l.epoch, 1);
	assert_true(l.expires_ms >= l.now_ms + 59000);
	assert_int_equal(cnl_store_lease_acquire(s2, "b", 60000, &l), -EBUSY);
	assert_string_equal(l.holder, "a");
	assert_int_equal(l.epoch, 1);
	assert_int_equal(cnl_store_lease_acquire(f->s, "a", 60000, &l), 0);
	assert_int_equal(l.epoch, 1); /* its own: renewed, same epoch */
	assert_int_equal(cnl_store_lease_renew(f->s, "a", 1, 60000, &l), 0);
	assert_int_equal(cnl_store_lease_renew(s2, "b", 1, 60000, &l),
	                 -CNL_EFENCED);
	assert_int_equal(cnl_store_lease_acquire(f->s, "bad\nname", 1000, &l),
	                 -CNL_EFIELD);

	/* Fenced at epoch 1: writes go through while the lease is a's. */
	assert_int_equal(cnl_store_fence(f->s, 1, 60000), 0);
	make_project(f, "while-leader", &p);
	/* b takes over once a lets go: epoch 2. */
	assert_int_equal(cnl_store_lease_release(f->s, "a", 1), 0);
	assert_int_equal(cnl_store_lease_acquire(s2, "b", 60000, &l), 0);
	assert_int_equal(l.epoch, 2);
	before = raw_total(f->path);
	memset(&p, 0, sizeof(p));
	new_id(f, "prj", p.id);
	snprintf(p.name, sizeof(p.name), "after-takeover");
	assert_int_equal(cnl_store_project_create(f->s, &p), -CNL_EFENCED);
	assert_non_null(strstr(cnl_store_errmsg(f->s), "fenced"));
	assert_int_equal(cnl_store_tx_begin(f->s), -CNL_EFENCED);
	assert_int_equal(
	    cnl_store_audit_append(f->s,
	                           &(struct cnl_store_audit){.ts_ms = T0,
	                                                     .actor = "a",
	                                                     .action = "x",
	                                                     .target = "y",
	                                                     .result = "ok"},
	                           NULL),
	    -CNL_EFENCED);
	assert_int_equal(raw_total(f->path), before);
	assert_int_equal(cnl_store_lease_renew(f->s, "a", 1, 60000, &l),
	                 -CNL_EFENCED);
	assert_string_equal(l.holder, "b");
	/* Reads still work: a fenced replica can say who leads. */
	assert_int_equal(
	    cnl_store_project_get_by_name(f->s, "while-leader", &p), 0);

	/* b's transaction is open when c takes over: c's acquire waits
	 * for it, and it commits first. */
	assert_int_equal(cnl_store_fence(s2, 2, 60000), 0);
	assert_int_equal(cnl_store_lease_renew(s2, "b", 2, 1500, &l), 0);
	assert_int_equal(cnl_store_tx_begin(s2), 0);
	memset(&p, 0, sizeof(p));
	new_id(f, "prj", p.id);
	snprintf(p.name, sizeof(p.name), "in-flight");
	assert_int_equal(cnl_store_project_create(s2, &p), 0);
	/* Past b's lease (the server's clock). */
	do {
		usleep(100000);
		assert_int_equal(cnl_store_lease_get(f->s, &l), 0);
	} while (l.now_ms < l.expires_ms);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct cnl_store *s3 = NULL;
		struct cnl_store_lease l3;

		if (cnl_store_open(f->path, &s3, NULL, 0) < 0)
			_exit(2);
		if (cnl_store_lease_acquire(s3, "c", 60000, &l3) != 0)
			_exit(3);
		_exit(l3.epoch == 3 ? 0 : 4);
	}
	/* Wait until c's backend waits on the lease row's lock. */
	while (raw_int(f->path, "SELECT count(*) FROM pg_stat_activity WHERE"
	                        " datname = current_database() AND"
	                        " wait_event_type = 'Lock'") < 1) {
		assert_int_equal(waitpid(pid, &status, WNOHANG), 0);
		usleep(20000);
	}
	assert_int_equal(waitpid(pid, &status, WNOHANG), 0);
	assert_int_equal(cnl_store_tx_commit(s2), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(cnl_store_project_get_by_name(f->s, "in-flight", &p),
	                 0);
	/* And from now on b writes nothing. */
	memset(&p, 0, sizeof(p));
	new_id(f, "prj", p.id);
	snprintf(p.name, sizeof(p.name), "too-late");
	assert_int_equal(cnl_store_project_create(s2, &p), -CNL_EFENCED);
	assert_int_equal(cnl_store_project_get_by_name(f->s, "too-late", &p),
	                 -CNL_ENOTFOUND);
	cnl_store_close(s2);

	/* A leader paused inside a transaction: the server ends it once
	 * idle past the hold, so the next holder is not barred, and the
	 * paused one's commit, when it wakes, stores nothing. */
	assert_int_equal(cnl_store_fence(f->s, 0, 1000), 0); /* unfenced */
	assert_int_equal(cnl_store_lease_release(f->s, "c", 3), 0);
	if (cnl_store_open(f->path, &s2, err, sizeof(err)) != 0)
		fail_msg("another handle: %s", err);
	assert_int_equal(cnl_store_lease_acquire(s2, "d", 1000, &l), 0);
	assert_int_equal(l.epoch, 4);
	assert_int_equal(cnl_store_fence(s2, 4, 300), 0);
	assert_int_equal(cnl_store_tx_begin(s2), 0);
	memset(&p, 0, sizeof(p));
	new_id(f, "prj", p.id);
	snprintf(p.name, sizeof(p.name), "paused-inside");
	assert_int_equal(cnl_store_project_create(s2, &p), 0);
	do {
		usleep(100000);
		assert_int_equal(cnl_store_lease_get(f->s, &l), 0);
	} while (l.now_ms < l.expires_ms + 400);
	assert_int_equal(cnl_store_lease_acquire(f->s, "e", 60000, &l), 0);
	assert_int_equal(l.epoch, 5);
	assert_true(cnl_store_tx_commit(s2) < 0);
	assert_int_equal(
	    cnl_store_project_get_by_name(f->s, "paused-inside", &p),
	    -CNL_ENOTFOUND);
	cnl_store_close(s2);
}

/*
 * The lease's hints (LISTEN/NOTIFY): a follower waiting on its handle
 * hears a takeover and a release at once, and nothing of a renewal.
 * Behind pgbouncer in transaction mode no hint need come, but waiting
 * must not break the handle.
 */
/* Live statuses: puts, removals and a reset in one transaction each; bad
 * changes refused naming nothing stored; a fenced peer writes only while
 * its epoch holds (PostgreSQL). */
static void test_live(void **state)
{
	struct fixture *f = *state;
	struct cnl_store *peer = NULL;
	struct cnl_store_lease l;
	char *b = NULL;

	assert_int_equal(cnl_store_live_get(f->s, "job_1", &b), -CNL_ENOTFOUND);
	assert_int_equal(
	    cnl_store_live_put(f->s, false,
	                       "{\"job_1\":{\"phase\":\"pending\"},"
	                       "\"job_2\":{\"phase\":\"running\",\"node\":"
	                       "\"n1\"}}"),
	    0);
	assert_int_equal(cnl_store_live_get(f->s, "job_2", &b), 0);
	assert_non_null(strstr(b, "\"node\""));
	assert_non_null(strstr(b, "\"n1\""));
	free(b);
	/* Set again, and removed, in one call. */
	assert_int_equal(cnl_store_live_put(f->s, false,
	                                    "{\"job_1\":{\"phase\":\"placed\"},"
	                                    "\"job_2\":null}"),
	                 0);
	assert_int_equal(cnl_store_live_get(f->s, "job_1", &b), 0);
	assert_non_null(strstr(b, "placed"));
	free(b);
	assert_int_equal(cnl_store_live_get(f->s, "job_2", &b), -CNL_ENOTFOUND);
	/* Refused whole: not an object, a value neither object nor null, an
	 * empty id; nothing changed. */
	assert_int_equal(cnl_store_live_put(f->s, false, "[1]"), -CNL_EFIELD);
	assert_int_equal(cnl_store_live_put(f->s, false, "{\"job_1\":3}"),
	                 -CNL_EFIELD);
	assert_int_equal(
	    cnl_store_live_put(f->s, false, "{\"\":{},\"job_3\":{}}"),
	    -CNL_EFIELD);
	assert_int_equal(cnl_store_live_put(f->s, true, "not json"),
	                 -CNL_EFIELD);
	assert_int_equal(cnl_store_live_get(f->s, "job_1", &b), 0);
	free(b);
	assert_int_equal(cnl_store_live_get(f->s, "job_3", &b), -CNL_ENOTFOUND);
	/* A reset leaves only what it sets. */
	assert_int_equal(
	    cnl_store_live_put(f->s, true, "{\"job_4\":{\"phase\":\"x\"}}"), 0);
	assert_int_equal(cnl_store_live_get(f->s, "job_1", &b), -CNL_ENOTFOUND);
	assert_int_equal(cnl_store_live_get(f->s, "job_4", &b), 0);
	free(b);
	if (!is_pg(f->path)) {
		assert_int_equal(cnl_store_open_peer(f->s, &peer), -ENOTSUP);
		return;
	}
	/* A peer fenced at epoch 1 writes while it holds, and not once
	 * another holder took the lease. */
	assert_int_equal(cnl_store_lease_acquire(f->s, "a", 60000, &l), 0);
	assert_int_equal(cnl_store_fence(f->s, l.epoch, 2000), 0);
	assert_int_equal(cnl_store_open_peer(f->s, &peer), 0);
	assert_int_equal(
	    cnl_store_live_put(peer, false, "{\"job_5\":{\"phase\":\"y\"}}"),
	    0);
	raw_exec(f->path, "UPDATE leases SET expires_ms = 0");
	assert_int_equal(cnl_store_lease_acquire(f->s, "b", 60000, &l), 0);
	assert_int_equal(cnl_store_live_put(peer, true, "{}"), -CNL_EFENCED);
	assert_int_equal(cnl_store_live_get(f->s, "job_5", &b), 0);
	free(b);
	cnl_store_close(peer);
}

static void test_lease_hints(void **state)
{
	struct fixture *f = *state;
	const char *direct = getenv("CNLAB_TEST_PG_DIRECT");
	struct cnl_store *s2 = NULL;
	struct cnl_store_lease l;
	char err[256];
	bool hints;

	if (!is_pg(f->path)) {
		assert_int_equal(cnl_store_lease_wait(f->s, 10), -ENOTSUP);
		return;
	}
	hints = direct && pg_base && strcmp(direct, pg_base) == 0;
	if (cnl_store_open(f->path, &s2, err, sizeof(err)) != 0)
		fail_msg("second handle: %s", err);
	assert_int_equal(cnl_store_lease_wait(s2, 0), 0); /* listening */
	assert_int_equal(cnl_store_lease_acquire(f->s, "a", 60000, &l), 0);
	if (hints)
		assert_int_equal(cnl_store_lease_wait(s2, 10000), 1);
	else
		assert_true(cnl_store_lease_wait(s2, 200) >= 0);
	assert_int_equal(cnl_store_lease_renew(f->s, "a", 1, 60000, &l), 0);
	if (hints)
		assert_int_equal(cnl_store_lease_wait(s2, 300), 0);
	assert_int_equal(cnl_store_lease_release(f->s, "a", 1), 0);
	if (hints)
		assert_int_equal(cnl_store_lease_wait(s2, 10000), 1);
	else
		assert_true(cnl_store_lease_wait(s2, 200) >= 0);
	/* The waiting handle goes on as any other. */
	assert_int_equal(cnl_store_lease_acquire(s2, "b", 60000, &l), 0);
	assert_int_equal(l.epoch, 2);
	assert_int_equal(cnl_store_lease_wait(s2, -1), -EINVAL);
	cnl_store_close(s2);
}

static void test_transactions(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_doc d, got;

	/* rolled back: neither write is kept, though each succeeded */
	assert_int_equal(cnl_store_tx_begin(f->s), 0);
	doc_init(&d, "usage", "a", "", "", "{}");
	assert_int_equal(cnl_store_doc_put(f->s, &d, true), 0);
	doc_init(&d, "usage", "b", "", "", "{}");
	assert_int_equal(cnl_store_doc_put(f->s, &d, true), 0);
	assert_int_equal(cnl_store_tx_rollback(f->s), 0);
	assert_int_equal(cnl_store_doc_get(f->s, "usage", "a", &got),
	                 -CNL_ENOTFOUND);
	/* a failed call inside keeps the others; commit makes them durable */
	assert_int_equal(cnl_store_tx_begin(f->s), 0);
	doc_init(&d, "usage", "a", "", "", "{}");
	assert_int_equal(cnl_store_doc_put(f->s, &d, true), 0);
	assert_int_equal(cnl_store_doc_put(f->s, &d, true), -CNL_EDUP);
	assert_int_equal(
	    cnl_store_job_update_run(f->s, "job_none", "running", 0, 1, "{}"),
	    -CNL_ENOTFOUND);
	doc_init(&d, "usage", "b", "", "", "{}");
	assert_int_equal(cnl_store_doc_put(f->s, &d, true), 0);
	assert_int_equal(cnl_store_tx_commit(f->s), 0);
	assert_int_equal(
	    raw_int(f->path, "SELECT COUNT(*) FROM docs WHERE kind = 'usage'"),
	    2);
	/* commit or rollback without a transaction is refused */
	assert_int_equal(cnl_store_tx_commit(f->s), -EINVAL);
	assert_int_equal(cnl_store_tx_rollback(f->s), -EINVAL);
	/* the idempotent job create nests inside a caller's transaction */
	{
		struct cnl_store_job j;

		job_template(f, &j);
		assert_int_equal(cnl_store_tx_begin(f->s), 0);
		assert_int_equal(cnl_store_job_create(f->s, &j, "k-tx", NULL),
		                 CNL_STORE_CREATED);
		assert_int_equal(cnl_store_tx_rollback(f->s), 0);
		assert_int_equal(cnl_store_job_get(f->s, j.id, &j),
		                 -CNL_ENOTFOUND);
	}
}

static void test_run_records(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_job j, got, out[4];
	struct cnl_store_server v, sv;
	struct cnl_store_membership m[4];
	struct cnl_store_user u[4];
	struct cnl_store_project p;
	int n = -1;

	job_template(f, &j);
	assert_int_equal(cnl_store_job_create(f->s, &j, NULL, NULL), 1);
	assert_int_equal(cnl_store_job_update_run(f->s, j.id, "running", 0, 99,
	                                          "{\"node\":\"n1\"}"),
	                 0);
	assert_int_equal(cnl_store_job_get(f->s, j.id, &got), 0);
	assert_string_equal(got.state, "running");
	assert_string_equal(got.run, "{\"node\":\"n1\"}");
	assert_int_equal(got.updated_ms, 99);
	/* not JSON, or an unknown state: refused, nothing changes */
	assert_int_equal(
	    cnl_store_job_update_run(f->s, j.id, "failed", 1, 100, "{"),
	    -CNL_EFIELD);
	assert_int_equal(
	    cnl_store_job_update_run(f->s, j.id, "lost", 1, 100, "{}"),
	    -CNL_EFIELD);
	assert_int_equal(cnl_store_job_get(f->s, j.id, &got), 0);
	assert_string_equal(got.state, "running");
	assert_int_equal(
	    cnl_store_job_list_state(f->s, "running", NULL, 4, out, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(out[0].id, j.id);
	assert_int_equal(
	    cnl_store_job_list_state(f->s, "pending", NULL, 4, out, &n), 0);
	assert_int_equal(n, 0);

	server_template(f, "nb", &v);
	assert_int_equal(cnl_store_server_create(f->s, &v, NULL, NULL), 1);
	assert_int_equal(cnl_store_server_update(f->s, v.id, "running",
	                                         "http://n1:8888/", "{}"),
	                 0);
	assert_int_equal(cnl_store_server_get(f->s, v.id, &sv), 0);
	assert_string_equal(sv.state, "running");
	assert_string_equal(sv.url, "http://n1:8888/");
	assert_int_equal(
	    cnl_store_server_update(f->s, "srv_none", "running", "", "{}"),
	    -CNL_ENOTFOUND);

	assert_int_equal(cnl_store_project_set_flags(f->s, f->proj.id, true),
	                 0);
	assert_int_equal(cnl_store_project_get(f->s, f->proj.id, &p), 0);
	assert_true(p.on_prem_only);
	assert_int_equal(cnl_store_user_list(f->s, NULL, 4, u, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(u[0].id, f->user.id);
	m[0] = (struct cnl_store_membership){0};
	memcpy(m[0].user_id, f->user.id, sizeof(m[0].user_id));
	memcpy(m[0].project_id, f->proj.id, sizeof(m[0].project_id));
	snprintf(m[0].role, sizeof(m[0].role), "viewer");
	assert_int_equal(cnl_store_membership_set(f->s, &m[0]), 0);
	memset(m, 0, sizeof(m));
	assert_int_equal(
	    cnl_store_membership_list_project(f->s, f->proj.id, NULL, 4, m, &n),
	    0);
	assert_int_equal(n, 1);
	assert_string_equal(m[0].role, "viewer");
}

static void test_kill9_keeps_acknowledged_jobs(void **state)
{
	struct fixture *f = *state;
	struct cnl_store_job got;
	char(*ids)[CNL_ID_MAX] = calloc(ACKS_MAX, CNL_ID_MAX);
	int pfd[2], status = 0;
	size_t acked = 0;
	pid_t pid;

	assert_non_null(ids);
	/* SQLite connections must not cross fork(): close ours first. */
	cnl_store_close(f->s);
	f->s = NULL;
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pfd[0]);
		durability_child(f, pfd[1]);
	}
	close(pfd[1]);

	while (acked < ACKS_BEFORE_KILL) {
		ssize_t r = read_full(pfd[0], ids[acked], CNL_ID_MAX);

		assert_int_equal(r, CNL_ID_MAX);
		acked++;
	}
	assert_int_equal(kill(pid, SIGKILL), 0);
	/* Acknowledgements written before the kill are still in the pipe. */
	while (acked < ACKS_MAX &&
	       read_full(pfd[0], ids[acked], CNL_ID_MAX) == CNL_ID_MAX)
		acked++;
	close(pfd[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGKILL);

	open_store(f);
	for (size_t i = 0; i < acked; i++) {
		assert_int_equal(ids[i][CNL_ID_MAX - 1], '\0');
		if (cnl_store_job_get(f->s, ids[i], &got) != 0)
			fail_msg("acknowledged job %s (%zu of %zu) lost",
			         ids[i], i + 1, acked);
		assert_string_equal(got.id, ids[i]);
	}
	/* At most the one unacknowledged job in flight may be extra. */
	assert_true(raw_int(f->path, "SELECT COUNT(*) FROM jobs") >=
	            (int64_t)acked);
	assert_true(raw_int(f->path, "SELECT COUNT(*) FROM jobs") <=
	            (int64_t)acked + 1);
	free(ids);
}

int main(void)
{
	pg_base = getenv("CNLAB_TEST_STORE_PG");
	if (pg_base && !pg_base[0])
		pg_base = NULL;
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_migrations, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_live, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_newer_schema_refused, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_wal_mode, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_file_refused, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_projects_and_users, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_memberships, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_jobs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_group_commit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_batches, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_wal_one_write_per_commit,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reader, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_servers, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_idempotency, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_user_member_project_removal,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_paging, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_job_each_state, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_audit_chain, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_audit_in_transactions, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_audit_hash_known, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_audit_latest, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_audit_renumbered_and_tail,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_inputs_change_nothing,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_documents, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_doc_replace_keeps_other_names,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_two_handles, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lease_hints, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lease_and_fence, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_transactions, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_run_records, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_kill9_keeps_acknowledged_jobs,
	                                    setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
