/*
 * postgres_work.c - the PostgreSQL backend's jobs and interactive servers,
 * their run records and the idempotency keys of their creates, with the
 * SQLite backend's semantics (sqlite_work.c).
 *
 * Idempotent creates under concurrency.  SQLite serialises writers with
 * one lock; here several cnlabd replicas may create with the same key at
 * once.  idempotent_create() looks the key up and inserts the object and
 * its key in one transaction; when two race, the key's primary key lets
 * one commit and makes the other's insert fail as a duplicate, after
 * waiting for the first to end.  The loser then rolls its attempt back
 * and looks again, and finds the winner's object: the same answer a
 * serial run would give (CNL_STORE_REPLAYED, or -CNL_EDUP for another
 * kind or user).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/util.h"
#include "store/postgres-internal.h"

#define JOB_COLS                                                 \
	"id, project_id, user_id, command, profile, gpu_shape, " \
	"priority, deadline_ms, runtime_ms, state, exit_code, "  \
	"created_ms, updated_ms, run"

static void read_job(const PGresult *res, int row, void *out)
{
	struct cnl_store_job *j = out;

	memset(j, 0, sizeof(*j));
	cnl_pg_col_text(res, row, 0, j->id, sizeof(j->id));
	cnl_pg_col_text(res, row, 1, j->project_id, sizeof(j->project_id));
	cnl_pg_col_text(res, row, 2, j->user_id, sizeof(j->user_id));
	cnl_pg_col_text(res, row, 3, j->command, sizeof(j->command));
	cnl_pg_col_text(res, row, 4, j->profile, sizeof(j->profile));
	cnl_pg_col_text(res, row, 5, j->gpu_shape, sizeof(j->gpu_shape));
	j->priority = (int)cnl_pg_col_i64(res, row, 6);
	j->deadline_ms = cnl_pg_col_i64(res, row, 7);
	j->runtime_ms = cnl_pg_col_i64(res, row, 8);
	cnl_pg_col_text(res, row, 9, j->state, sizeof(j->state));
	j->exit_code = (int)cnl_pg_col_i64(res, row, 10);
	j->created_ms = cnl_pg_col_i64(res, row, 11);
	j->updated_ms = cnl_pg_col_i64(res, row, 12);
	cnl_pg_col_text(res, row, 13, j->run, sizeof(j->run));
}

#define SERVER_COLS                                                   \
	"id, project_id, user_id, name, image, profile, storage_gb, " \
	"idle_timeout_s, state, url, created_ms, run"

static void read_server(const PGresult *res, int row, void *out)
{
	struct cnl_store_server *v = out;

	memset(v, 0, sizeof(*v));
	cnl_pg_col_text(res, row, 0, v->id, sizeof(v->id));
	cnl_pg_col_text(res, row, 1, v->project_id, sizeof(v->project_id));
	cnl_pg_col_text(res, row, 2, v->user_id, sizeof(v->user_id));
	cnl_pg_col_text(res, row, 3, v->name, sizeof(v->name));
	cnl_pg_col_text(res, row, 4, v->image, sizeof(v->image));
	cnl_pg_col_text(res, row, 5, v->profile, sizeof(v->profile));
	v->storage_gb = cnl_pg_col_i64(res, row, 6);
	v->idle_timeout_s = cnl_pg_col_i64(res, row, 7);
	cnl_pg_col_text(res, row, 8, v->state, sizeof(v->state));
	cnl_pg_col_text(res, row, 9, v->url, sizeof(v->url));
	v->created_ms = cnl_pg_col_i64(res, row, 10);
	cnl_pg_col_text(res, row, 11, v->run, sizeof(v->run));
}

static int insert_job(struct cnl_pg_store *p, const void *obj)
{
	const struct cnl_store_job *in = obj;
	struct cnl_pg_num n[6];
	const char *v[] = {in->id,
	                   in->project_id,
	                   in->user_id,
	                   in->command,
	                   in->profile,
	                   in->gpu_shape,
	                   in->state,
	                   in->run[0] ? in->run : "{}",
	                   cnl_pg_i64(&n[0], in->priority),
	                   cnl_pg_i64(&n[1], in->deadline_ms),
	                   cnl_pg_i64(&n[2], in->runtime_ms),
	                   cnl_pg_i64(&n[3], in->exit_code),
	                   cnl_pg_i64(&n[4], in->created_ms),
	                   cnl_pg_i64(&n[5], in->updated_ms)};

	return cnl_pg_write(
	    p,
	    "INSERT INTO jobs (id, project_id, user_id, command,"
	    " profile, gpu_shape, state, run, priority,"
	    " deadline_ms, runtime_ms, exit_code, created_ms,"
	    " updated_ms) VALUES ($1, $2, $3, $4, $5, $6, $7,"
	    " $8, $9, $10, $11, $12, $13, $14)",
	    CNL_ARRAY_SIZE(v), v, false);
}

static int insert_server(struct cnl_pg_store *p, const void *obj)
{
	const struct cnl_store_server *in = obj;
	struct cnl_pg_num n[3];
	const char *v[] = {in->id,
	                   in->project_id,
	                   in->user_id,
	                   in->name,
	                   in->image,
	                   in->profile,
	                   in->state,
	                   in->url,
	                   in->run[0] ? in->run : "{}",
	                   cnl_pg_i64(&n[0], in->storage_gb),
	                   cnl_pg_i64(&n[1], in->idle_timeout_s),
	                   cnl_pg_i64(&n[2], in->created_ms)};

	return cnl_pg_write(
	    p,
	    "INSERT INTO servers (id, project_id, user_id, name,"
	    " image, profile, state, url, run, storage_gb,"
	    " idle_timeout_s, created_ms) VALUES ($1, $2, $3,"
	    " $4, $5, $6, $7, $8, $9, $10, $11, $12)",
	    CNL_ARRAY_SIZE(v), v, false);
}

struct idem_kind {
	const char *kind;
	const char *get_sql;
	cnl_pg_read_fn *read;
	int (*insert)(struct cnl_pg_store *p, const void *obj);
	size_t size;
};

static const struct idem_kind job_kind = {
    "job",
    "SELECT " JOB_COLS " FROM jobs WHERE id = $1",
    read_job,
    insert_job,
    sizeof(struct cnl_store_job),
};

static const struct idem_kind server_kind = {
    "server",
    "SELECT " SERVER_COLS " FROM servers WHERE id = $1",
    read_server,
    insert_server,
    sizeof(struct cnl_store_server),
};

struct idem_row {
	char kind[16];
	char object_id[CNL_ID_MAX];
};

static void read_idem(const PGresult *res, int row, void *out)
{
	struct idem_row *u = out;

	cnl_pg_col_text(res, row, 0, u->kind, sizeof(u->kind));
	cnl_pg_col_text(res, row, 1, u->object_id, sizeof(u->object_id));
}

/*
 * One attempt: inside the transaction already begun, replay the key's
 * object or insert @in and the key.  CNL_STORE_REPLAYED (with the
 * original in @orig), CNL_STORE_CREATED, or an error.
 */
static int idem_attempt(struct cnl_pg_store *p, const struct idem_kind *k,
                        const void *in, const char *id, const char *user_id,
                        int64_t created_ms, const char *key, void *orig)
{
	struct idem_row used;
	struct cnl_pg_num ms;
	int r;

	if (key) {
		r = cnl_pg_get_one(p,
		                   "SELECT kind, object_id FROM idempotency"
		                   " WHERE key = $1",
		                   1, &key, read_idem, &used);
		if (r < 0 && r != -CNL_ENOTFOUND)
			return r;
		if (r == 0) {
			const char *oid = used.object_id;

			if (strcmp(used.kind, k->kind) != 0)
				return -CNL_EDUP;
			if ((r = cnl_pg_get_one(p, k->get_sql, 1, &oid, k->read,
			                        orig)) < 0)
				return r;
			/* Both structs start id, project_id, user_id. */
			if (strcmp(k == &job_kind
			               ? ((struct cnl_store_job *)orig)->user_id
			               : ((struct cnl_store_server *)orig)
			                     ->user_id,
			           user_id) != 0)
				return -CNL_EDUP;
			return CNL_STORE_REPLAYED;
		}
	}
	if ((r = k->insert(p, in)) < 0)
		return r;
	if (key) {
		const char *v[] = {key, k->kind, id,
		                   cnl_pg_i64(&ms, created_ms)};

		r = cnl_pg_write(
		    p,
		    "INSERT INTO idempotency (key, kind, object_id,"
		    " created_ms) VALUES ($1, $2, $3, $4)",
		    4, v, false);
		if (r < 0)
			return r;
	}
	return CNL_STORE_CREATED;
}

static int idempotent_create(struct cnl_pg_store *p, const struct idem_kind *k,
                             const void *in, const char *id,
                             const char *user_id, int64_t created_ms,
                             const char *key, void *ret)
{
	union {
		struct cnl_store_job job;
		struct cnl_store_server server;
	} orig;
	int r;

	for (int attempt = 0;; attempt++) {
		if ((r = cnl_pg_begin(p)) < 0)
			return r;
		r = idem_attempt(p, k, in, id, user_id, created_ms, key, &orig);
		if (r < 0) {
			cnl_pg_rollback(p);
			/* A racing create of the same key won: look again. */
			if (r == -CNL_EDUP && key && attempt == 0)
				continue;
			return r;
		}
		break;
	}
	{
		int c = cnl_pg_commit(p);

		if (c < 0)
			return c;
	}
	if (ret)
		memcpy(ret, r == CNL_STORE_REPLAYED ? (const void *)&orig : in,
		       k->size);
	return r;
}

int cnl_pg_job_create(struct cnl_store *s, const struct cnl_store_job *in,
                      const char *idem_key, struct cnl_store_job *ret)
{
	int r = idempotent_create(cnl_pg(s), &job_kind, in, in->id, in->user_id,
	                          in->created_ms, idem_key, ret);

	if (r == CNL_STORE_CREATED && ret && !ret->run[0])
		memcpy(ret->run, "{}", 3);
	return r;
}

int cnl_pg_job_get(struct cnl_store *s, const char *id,
                   struct cnl_store_job *ret)
{
	return cnl_pg_get_one(cnl_pg(s), job_kind.get_sql, 1, &id, read_job,
	                      ret);
}

int cnl_pg_job_list(struct cnl_store *s, const char *project_id,
                    const char *after_id, int limit, struct cnl_store_job *out,
                    int *ret_n)
{
	return cnl_pg_page(
	    cnl_pg(s),
	    project_id ? "SELECT " JOB_COLS " FROM jobs WHERE"
	                 " project_id = $1 AND id > $2 ORDER BY id"
	                 " LIMIT $3"
	               : "SELECT " JOB_COLS " FROM jobs WHERE id > $1"
	                 " ORDER BY id LIMIT $2",
	    project_id, after_id, limit, read_job, out, sizeof(*out), ret_n);
}

int cnl_pg_job_list_state(struct cnl_store *s, const char *state,
                          const char *after_id, int limit,
                          struct cnl_store_job *out, int *ret_n)
{
	return cnl_pg_page(cnl_pg(s),
	                   "SELECT " JOB_COLS " FROM jobs WHERE state = $1"
	                   " AND id > $2 ORDER BY id LIMIT $3",
	                   state, after_id, limit, read_job, out, sizeof(*out),
	                   ret_n);
}

int cnl_pg_job_count_state(struct cnl_store *s, const char *state,
                           int64_t *ret_n)
{
	PGresult *res;
	int r;

	if ((r = cnl_pg_exec(cnl_pg(s),
	                     "SELECT count(*) FROM jobs WHERE state = $1", 1,
	                     &state, &res)) < 0)
		return r;
	*ret_n = cnl_pg_col_i64(res, 0, 0);
	PQclear(res);
	return 0;
}

/*
 * Every job in @state, read in pages of 2,000 by id (a restart reads
 * 100,000 pending jobs: one result of them all would hold them twice in
 * memory), outside any transaction of its own, so that what @fn writes
 * meanwhile commits as it would with SQLite.
 */
int cnl_pg_job_each_state(struct cnl_store *s, const char *state,
                          int (*fn)(void *ud, const struct cnl_store_job *j),
                          void *ud)
{
	enum { CHUNK = 2000 };
	struct cnl_pg_store *p = cnl_pg(s);
	struct cnl_store_job *j = malloc(sizeof(*j));
	char last[CNL_ID_MAX] = "";
	int r = 0;

	if (!j)
		return -ENOMEM;
	for (;;) {
		const char *v[] = {state, last};
		PGresult *res;
		int rows;

		if ((r = cnl_pg_exec(p,
		                     "SELECT " JOB_COLS " FROM jobs WHERE"
		                     " state = $1 AND id > $2 ORDER BY id"
		                     " LIMIT 2000",
		                     2, v, &res)) < 0)
			break;
		rows = PQntuples(res);
		for (int i = 0; i < rows && r == 0; i++) {
			read_job(res, i, j);
			memcpy(last, j->id, sizeof(last));
			r = fn(ud, j);
		}
		PQclear(res);
		if (r < 0 || rows < CHUNK)
			break;
	}
	free(j);
	return r;
}

int cnl_pg_job_update_state(struct cnl_store *s, const char *id,
                            const char *state, int exit_code,
                            int64_t updated_ms)
{
	struct cnl_pg_num a, b;
	const char *v[] = {id, state, cnl_pg_i64(&a, exit_code),
	                   cnl_pg_i64(&b, updated_ms)};

	return cnl_pg_write(cnl_pg(s),
	                    "UPDATE jobs SET state = $2, exit_code = $3,"
	                    " updated_ms = $4 WHERE id = $1",
	                    4, v, true);
}

int cnl_pg_job_update_run(struct cnl_store *s, const char *id,
                          const char *state, int exit_code, int64_t updated_ms,
                          const char *run)
{
	struct cnl_pg_num a, b;
	const char *v[] = {id, state, run, cnl_pg_i64(&a, exit_code),
	                   cnl_pg_i64(&b, updated_ms)};

	return cnl_pg_write(cnl_pg(s),
	                    "UPDATE jobs SET state = $2, run = $3,"
	                    " exit_code = $4, updated_ms = $5 WHERE id = $1",
	                    5, v, true);
}

int cnl_pg_server_create(struct cnl_store *s, const struct cnl_store_server *in,
                         const char *idem_key, struct cnl_store_server *ret)
{
	int r = idempotent_create(cnl_pg(s), &server_kind, in, in->id,
	                          in->user_id, in->created_ms, idem_key, ret);

	if (r == CNL_STORE_CREATED && ret && !ret->run[0])
		memcpy(ret->run, "{}", 3);
	return r;
}

int cnl_pg_server_get(struct cnl_store *s, const char *id,
                      struct cnl_store_server *ret)
{
	return cnl_pg_get_one(cnl_pg(s), server_kind.get_sql, 1, &id,
	                      read_server, ret);
}

int cnl_pg_server_list(struct cnl_store *s, const char *project_id,
                       const char *after_id, int limit,
                       struct cnl_store_server *out, int *ret_n)
{
	return cnl_pg_page(
	    cnl_pg(s),
	    project_id ? "SELECT " SERVER_COLS " FROM servers WHERE"
	                 " project_id = $1 AND id > $2 ORDER BY id"
	                 " LIMIT $3"
	               : "SELECT " SERVER_COLS " FROM servers WHERE"
	                 " id > $1 ORDER BY id LIMIT $2",
	    project_id, after_id, limit, read_server, out, sizeof(*out), ret_n);
}

int cnl_pg_server_update(struct cnl_store *s, const char *id, const char *state,
                         const char *url, const char *run)
{
	const char *v[] = {id, state, url, run};

	return cnl_pg_write(cnl_pg(s),
	                    "UPDATE servers SET state = $2, url = $3, run = $4"
	                    " WHERE id = $1",
	                    4, v, true);
}

int cnl_pg_server_delete(struct cnl_store *s, const char *id)
{
	return cnl_pg_write(cnl_pg(s), "DELETE FROM servers WHERE id = $1", 1,
	                    &id, true);
}
