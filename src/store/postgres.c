/*
 * postgres.c - the state store's PostgreSQL backend: opening a database
 * through libpq, its schema and migrations, readers, and the ops table
 * that the generic layer (store.c) calls through.  The queries are in
 * postgres_tenancy.c, postgres_work.c, postgres_docs.c and
 * postgres_audit.c; the helpers they share in postgres_db.c.
 *
 * The backend, in numbered invariants:
 *  1. Same semantics as the SQLite backend: the store test suite
 *     (tests/unit/store/test_store.c) runs unchanged against both.  Text
 *     keys are compared and ordered in the "C" collation, byte by byte as
 *     SQLite does, so paging by id is creation order whatever the
 *     database's locale.
 *  2. Every commit is durable when it returns (synchronous_commit is the
 *     server's business; its default, on, waits for the WAL flush).  There
 *     is no group commit here: the server batches concurrent commits'
 *     flushes itself, and several replicas write at once.
 *  3. The schema is a list of migrations {version, SQL} that means the
 *     same as the SQLite list version for version; schema_version holds
 *     one row per applied migration.  Opening applies the missing ones in
 *     one transaction (PostgreSQL's DDL is transactional) under a
 *     transaction-scoped advisory lock, so replicas starting together
 *     apply each once, and pgbouncer's transaction mode is no obstacle.
 *     A database newer than this build is refused before anything is
 *     written.
 *  4. The password in a URL never leaves the handle: the path shown in
 *     messages (cnl_store_path()) is the URL with it removed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/time.h"
#include "common/util.h"
#include "store/postgres-internal.h"
#include "store/store-internal.h"

/* Taken by every migrating opener: "cnlab" in ASCII. */
#define MIGRATE_LOCK "1668180065"

struct migration {
	int version;
	const char *sql;
};

/* Append only: a released migration is never edited, only followed. */
static const struct migration migrations[] = {
    {1, "CREATE TABLE projects ("
        " id TEXT COLLATE \"C\" PRIMARY KEY,"
        " name TEXT COLLATE \"C\" NOT NULL UNIQUE,"
        " on_prem_only INTEGER NOT NULL,"
        " created_ms BIGINT NOT NULL);"
        "CREATE TABLE users ("
        " id TEXT COLLATE \"C\" PRIMARY KEY,"
        " name TEXT COLLATE \"C\" NOT NULL UNIQUE,"
        " password_hash TEXT NOT NULL,"
        " created_ms BIGINT NOT NULL);"
        "CREATE TABLE memberships ("
        " user_id TEXT COLLATE \"C\" NOT NULL REFERENCES users(id),"
        " project_id TEXT COLLATE \"C\" NOT NULL REFERENCES projects(id),"
        " role TEXT NOT NULL,"
        " PRIMARY KEY (user_id, project_id));"
        "CREATE TABLE jobs ("
        " id TEXT COLLATE \"C\" PRIMARY KEY,"
        " project_id TEXT COLLATE \"C\" NOT NULL REFERENCES projects(id),"
        " user_id TEXT COLLATE \"C\" NOT NULL REFERENCES users(id),"
        " command TEXT NOT NULL,"
        " profile TEXT NOT NULL,"
        " gpu_shape TEXT NOT NULL,"
        " priority INTEGER NOT NULL CHECK (priority BETWEEN 0 AND 3),"
        " deadline_ms BIGINT NOT NULL,"
        " runtime_ms BIGINT NOT NULL,"
        " state TEXT COLLATE \"C\" NOT NULL,"
        " exit_code INTEGER NOT NULL,"
        " created_ms BIGINT NOT NULL,"
        " updated_ms BIGINT NOT NULL);"
        "CREATE TABLE servers ("
        " id TEXT COLLATE \"C\" PRIMARY KEY,"
        " project_id TEXT COLLATE \"C\" NOT NULL REFERENCES projects(id),"
        " user_id TEXT COLLATE \"C\" NOT NULL REFERENCES users(id),"
        " name TEXT COLLATE \"C\" NOT NULL,"
        " image TEXT NOT NULL,"
        " profile TEXT NOT NULL,"
        " storage_gb BIGINT NOT NULL,"
        " idle_timeout_s BIGINT NOT NULL,"
        " state TEXT NOT NULL,"
        " url TEXT NOT NULL,"
        " created_ms BIGINT NOT NULL,"
        " UNIQUE (project_id, name));"
        "CREATE TABLE idempotency ("
        " key TEXT COLLATE \"C\" PRIMARY KEY,"
        " kind TEXT NOT NULL,"
        " object_id TEXT COLLATE \"C\" NOT NULL,"
        " created_ms BIGINT NOT NULL);"
        "CREATE TABLE audit ("
        " seq BIGINT PRIMARY KEY,"
        " ts_ms BIGINT NOT NULL,"
        " actor TEXT NOT NULL,"
        " action TEXT COLLATE \"C\" NOT NULL,"
        " target TEXT COLLATE \"C\" NOT NULL,"
        " result TEXT NOT NULL,"
        " prev_hash TEXT NOT NULL,"
        " hash TEXT NOT NULL);"
        /* The chain's head: the last seq given and the last hash
         * (postgres_audit.c). */
        "CREATE TABLE audit_head ("
        " one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),"
        " seq BIGINT NOT NULL,"
        " hash TEXT NOT NULL);"
        "INSERT INTO audit_head (seq, hash) VALUES (0, '" CNL_STORE_ZERO_HASH
        "');"},
    {2, "CREATE INDEX jobs_by_project ON jobs(project_id, id);"
        "CREATE INDEX servers_by_project ON servers(project_id, id);"
        "CREATE INDEX memberships_by_project ON memberships(project_id);"},
    {3, "ALTER TABLE jobs ADD COLUMN run TEXT NOT NULL DEFAULT '{}'"
        " CHECK (run::json IS NOT NULL);"
        "ALTER TABLE servers ADD COLUMN run TEXT NOT NULL DEFAULT '{}'"
        " CHECK (run::json IS NOT NULL);"
        "CREATE INDEX jobs_by_state ON jobs(state, id);"
        "CREATE TABLE docs ("
        " kind TEXT COLLATE \"C\" NOT NULL,"
        " id TEXT COLLATE \"C\" NOT NULL,"
        " parent TEXT COLLATE \"C\" NOT NULL,"
        " name TEXT COLLATE \"C\" NOT NULL,"
        " body TEXT NOT NULL CHECK (body::json IS NOT NULL),"
        " updated_ms BIGINT NOT NULL,"
        " PRIMARY KEY (kind, id));"
        "CREATE INDEX docs_by_parent ON docs(kind, parent, id);"
        "CREATE UNIQUE INDEX docs_by_name ON docs(kind, parent, name)"
        " WHERE name <> '';"},
    /* The leader's lease (postgres_lease.c). */
    {4, "CREATE TABLE leases ("
        " name TEXT COLLATE \"C\" PRIMARY KEY,"
        " holder TEXT NOT NULL,"
        " epoch BIGINT NOT NULL,"
        " expires_ms BIGINT NOT NULL);"},
    /* The leader's live statuses, for followers (postgres_lease.c). */
    {5, "CREATE TABLE live_status ("
        " id TEXT COLLATE \"C\" PRIMARY KEY,"
        " body TEXT NOT NULL CHECK (body::json IS NOT NULL),"
        " updated_ms BIGINT NOT NULL);"},
};

#define SCHEMA_LATEST (migrations[CNL_ARRAY_SIZE(migrations) - 1].version)

static int read_version(struct cnl_pg_store *p)
{
	PGresult *res;
	int r;

	if ((r = cnl_pg_exec(p,
	                     "SELECT COALESCE(MAX(version), 0) FROM"
	                     " schema_version",
	                     0, NULL, &res)) < 0)
		return r;
	r = (int)cnl_pg_col_i64(res, 0, 0);
	PQclear(res);
	return r;
}

/* read_version() where the table may not be there yet: 0 then. */
static int read_version_any(struct cnl_pg_store *p)
{
	PGresult *res;
	int r;

	if ((r = cnl_pg_exec(p,
	                     "SELECT to_regclass('schema_version') IS NOT NULL",
	                     0, NULL, &res)) < 0)
		return r;
	r = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	return r ? read_version(p) : 0;
}

static void pg_close(struct cnl_store *s)
{
	struct cnl_pg_store *p = cnl_pg(s);

	PQfinish(p->conn);
	if (p->url) {
		explicit_bzero(p->url, strlen(p->url));
		free(p->url);
	}
	free(p);
}

static int pg_schema_version(struct cnl_store *s)
{
	return read_version_any(cnl_pg(s));
}

static int pg_tx(struct cnl_store *s, int op)
{
	struct cnl_pg_store *p = cnl_pg(s);

	switch (op) {
	case 0:
		return cnl_pg_begin(p);
	case 1:
		return cnl_pg_commit(p);
	default:
		if (p->depth == 0)
			return -EINVAL;
		cnl_pg_rollback(p);
		return 0;
	}
}

static int pg_open_reader(struct cnl_store *s, struct cnl_store **ret);
static int pg_open_peer(struct cnl_store *s, struct cnl_store **ret);

static const struct cnl_store_ops postgres_ops = {
    .name = "postgresql",
    .close = pg_close,
    .schema_version = pg_schema_version,
    .project_create = cnl_pg_project_create,
    .project_get = cnl_pg_project_get,
    .project_get_by_name = cnl_pg_project_get_by_name,
    .project_list = cnl_pg_project_list,
    .user_create = cnl_pg_user_create,
    .user_get = cnl_pg_user_get,
    .user_get_by_name = cnl_pg_user_get_by_name,
    .membership_set = cnl_pg_membership_set,
    .membership_get_role = cnl_pg_membership_get_role,
    .membership_list = cnl_pg_membership_list,
    .job_create = cnl_pg_job_create,
    .job_get = cnl_pg_job_get,
    .job_list = cnl_pg_job_list,
    .job_update_state = cnl_pg_job_update_state,
    .server_create = cnl_pg_server_create,
    .server_get = cnl_pg_server_get,
    .server_list = cnl_pg_server_list,
    .tx = pg_tx,
    .project_set_flags = cnl_pg_project_set_flags,
    .user_list = cnl_pg_user_list,
    .membership_list_project = cnl_pg_membership_list_project,
    .job_list_state = cnl_pg_job_list_state,
    .job_update_run = cnl_pg_job_update_run,
    .server_update = cnl_pg_server_update,
    .server_delete = cnl_pg_server_delete,
    .user_set_password = cnl_pg_user_set_password,
    .membership_delete = cnl_pg_membership_delete,
    .project_delete = cnl_pg_project_delete,
    .doc_put = cnl_pg_doc_put,
    .doc_get = cnl_pg_doc_get,
    .doc_get_by_name = cnl_pg_doc_get_by_name,
    .doc_list = cnl_pg_doc_list,
    .doc_delete = cnl_pg_doc_delete,
    .audit_append = cnl_pg_audit_append,
    .audit_list = cnl_pg_audit_list,
    .audit_list_target = cnl_pg_audit_list_target,
    .audit_verify = cnl_pg_audit_verify,
    .audit_latest = cnl_pg_audit_latest,
    .job_count_state = cnl_pg_job_count_state,
    .job_each_state = cnl_pg_job_each_state,
    .open_reader = pg_open_reader,
    .lease_acquire = cnl_pg_lease_acquire,
    .lease_renew = cnl_pg_lease_renew,
    .lease_get = cnl_pg_lease_get,
    .lease_release = cnl_pg_lease_release,
    .lease_wait = cnl_pg_lease_wait,
    .fence = cnl_pg_fence,
    .live_put = cnl_pg_live_put,
    .live_get = cnl_pg_live_get,
    .open_peer = pg_open_peer,
};

/* Invariant 3. */
static int migrate(struct cnl_pg_store *p, char *err, size_t errlen)
{
	int r, cur;

	if ((r = cnl_pg_begin(p)) < 0)
		goto sqlerr;
	if ((r = cnl_pg_exec(p,
	                     "SELECT pg_advisory_xact_lock(" MIGRATE_LOCK ")",
	                     0, NULL, NULL)) < 0 ||
	    (r = cnl_pg_exec(p,
	                     "CREATE TABLE IF NOT EXISTS schema_version ("
	                     " version INTEGER PRIMARY KEY,"
	                     " applied_ms BIGINT NOT NULL)",
	                     0, NULL, NULL)) < 0)
		goto fail;
	if ((cur = read_version(p)) < 0) {
		r = cur;
		goto fail;
	}
	if (cur > SCHEMA_LATEST) {
		cnl_pg_rollback(p);
		cnl_seterr(
		    err, errlen,
		    "database schema version %d is newer than this build "
		    "supports (%d); upgrade cnlab",
		    cur, SCHEMA_LATEST);
		return -CNL_ECONFIG;
	}
	for (size_t i = 0; i < CNL_ARRAY_SIZE(migrations); i++) {
		const struct migration *m = &migrations[i];
		struct cnl_pg_num v, ms;
		const char *args[2];
		PGresult *res;

		if (m->version <= cur)
			continue;
		res = PQexec(p->conn, m->sql);
		if (!res || PQresultStatus(res) != PGRES_COMMAND_OK) {
			r = cnl_pg_err(p, res);
			PQclear(res);
			goto fail;
		}
		PQclear(res);
		args[0] = cnl_pg_i64(&v, m->version);
		args[1] = cnl_pg_i64(&ms, cnl_time_now_ms());
		if ((r = cnl_pg_exec(p,
		                     "INSERT INTO schema_version (version,"
		                     " applied_ms) VALUES ($1, $2)",
		                     2, args, NULL)) < 0)
			goto fail;
	}
	if ((r = cnl_pg_commit(p)) < 0)
		goto sqlerr;
	return 0;
fail:
	cnl_pg_rollback(p);
sqlerr:
	cnl_seterr(err, errlen, "schema migration failed: %s", p->base.errmsg);
	return r;
}

/*
 * The URL without its password, for messages: "postgresql://u@h:p/db".
 * Built from the text itself, not from libpq's parse: a malformed URL (a
 * '/' or a bad escape in the password) would put the password in what
 * libpq takes for the host.  The user is what comes before the first ':'
 * or '@' of the authority, the rest is what follows the last '@'; a query
 * (which may hold password=) is left out.  A key=value string is named
 * only as such.
 */
static void redact(const char *url, char *out, size_t size)
{
	const char *scheme = strstr(url, "://");
	const char *auth, *at, *q, *end;
	size_t ulen;

	if (!scheme) {
		snprintf(out, size,
		         "postgresql (a key=value connection string)");
		return;
	}
	auth = scheme + 3;
	at = strrchr(auth, '@');
	q = strchr(at ? at : auth, '?');
	end = q ? q : auth + strlen(auth);
	ulen = at ? strcspn(auth, ":@") : 0;
	snprintf(out, size, "postgresql://%.*s%s%.*s", (int)ulen, auth,
	         at ? "@" : "", (int)(end - (at ? at + 1 : auth)),
	         at ? at + 1 : auth);
}

/* Replace every copy of @secret (if any, and not too short to be
 * mistaken) in @msg by "***". */
static void scrub_one(char *msg, const char *secret, size_t n)
{
	char *p;

	if (n < 1)
		return;
	while ((p = strstr(msg, secret)) && n >= 1) {
		size_t rest = strlen(p + n);

		if (n >= 3) {
			memcpy(p, "***", 3);
			memmove(p + 3, p + n, rest + 1);
		} else {
			memset(p, '*', n);
		}
	}
}

/*
 * Take the URL's password out of a message of libpq's (which may quote
 * the URL, or a piece of a malformed one): as written in the URL (between
 * the authority's first ':' and its last '@') and as libpq parsed it.
 */
static void scrub(const char *url, char *msg)
{
	const char *scheme = strstr(url, "://");
	PQconninfoOption *opts;

	if (scheme) {
		const char *auth = scheme + 3, *at = strrchr(auth, '@');
		const char *colon = strchr(auth, ':');

		if (at && colon && colon < at) {
			char raw[512];
			size_t n = (size_t)(at - colon - 1);

			if (n < sizeof(raw)) {
				memcpy(raw, colon + 1, n);
				raw[n] = '\0';
				scrub_one(msg, raw, n);
				/* A malformed one is cut where libpq cut it
				 * (at '/', ':' or '@'): each piece too. */
				for (char *t = strtok(raw, "/:@"); t;
				     t = strtok(NULL, "/:@"))
					scrub_one(msg, t, strlen(t));
			}
		}
	}
	if ((opts = PQconninfoParse(url, NULL))) {
		for (PQconninfoOption *o = opts; o->keyword; o++)
			if (o->val && o->val[0] &&
			    strcmp(o->keyword, "password") == 0)
				scrub_one(msg, o->val, strlen(o->val));
		PQconninfoFree(opts);
	}
}

static int pg_new(const char *url, bool read_only, struct cnl_pg_store **ret,
                  char *err, size_t errlen)
{
	struct cnl_pg_store *p = calloc(1, sizeof(*p));
	int r;

	if (!p || !(p->url = strdup(url))) {
		free(p);
		return -ENOMEM;
	}
	p->base.ops = &postgres_ops;
	p->read_only = read_only;
	redact(url, p->base.path, sizeof(p->base.path));
	if ((r = cnl_pg_connect(url, read_only, &p->conn, err, errlen)) < 0) {
		if (err && errlen)
			scrub(url, err);
		pg_close(&p->base);
		return r;
	}
#ifdef CNL_TEST_HOOKS
	{
		const char *f = getenv("CNLAB_TEST_COMMIT_FAULT");

		if (f && f[0])
			snprintf(p->commit_fault, sizeof(p->commit_fault), "%s",
			         f);
	}
#endif
	*ret = p;
	return 0;
}

int cnl_store_open_postgres(const char *url, struct cnl_store **ret, char *err,
                            size_t errlen)
{
	struct cnl_pg_store *p;
	char msg[256];
	int r;

	if (!url || !ret)
		return -EINVAL;
	cnl_seterr(err, errlen, "%s", "");
	if ((r = pg_new(url, false, &p, msg, sizeof(msg))) < 0) {
		char shown[512];

		redact(url, shown, sizeof(shown));
		cnl_seterr(err, errlen, "cannot connect to %s: %s", shown, msg);
		return r;
	}
	if ((r = migrate(p, err, errlen)) < 0) {
		pg_close(&p->base);
		return r;
	}
	*ret = &p->base;
	return 0;
}

/* Another connection to @s's database, fenced as @s is (a reader never
 * writes, so its fence is never checked). */
static int sibling(struct cnl_store *s, bool read_only, struct cnl_store **ret)
{
	struct cnl_pg_store *p;
	char msg[256];
	int r;

	if ((r = pg_new(cnl_pg(s)->url, read_only, &p, msg, sizeof(msg))) < 0)
		return r;
	p->fence_epoch = cnl_pg(s)->fence_epoch;
	p->fence_hold_ms = cnl_pg(s)->fence_hold_ms;
	*ret = &p->base;
	return 0;
}

static int pg_open_peer(struct cnl_store *s, struct cnl_store **ret)
{
	return sibling(s, false, ret);
}

static int pg_open_reader(struct cnl_store *s, struct cnl_store **ret)
{
	return sibling(s, true, ret);
}
