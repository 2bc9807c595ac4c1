/*
 * sqlite_work.c - the SQLite backend's workloads: jobs and interactive
 * servers, their run records, and the idempotency keys of their creates.
 *
 * Idempotent creates (invariant 4 of store.h).  The idempotency table is
 * one namespace of keys, each naming the kind and id of the object it
 * created.  idempotent_create() takes the write lock (BEGIN IMMEDIATE),
 * looks the key up and either returns the object stored first (same kind,
 * same user: CNL_STORE_REPLAYED) or inserts the object and its key
 * together (CNL_STORE_CREATED); a key of another kind or user is
 * -CNL_EDUP.  What differs between jobs and servers is a struct idem_kind.
 *
 * Run records are JSON text in a column checked by json_valid(); a create
 * without one stores, and returns, "{}".  A state is checked for its
 * name (store.c), never for the transition to it: the state machines
 * belong to the layers above (the scheduler; the controller, whose
 * workload phases server/ctl.h draws).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/util.h"
#include "store/sqlite-internal.h"

#define JOB_COLS                                                 \
	"id, project_id, user_id, command, profile, gpu_shape, " \
	"priority, deadline_ms, runtime_ms, state, exit_code, "  \
	"created_ms, updated_ms, run"

static void read_job(sqlite3_stmt *st, void *out)
{
	struct cnl_store_job *j = out;

	memset(j, 0, sizeof(*j));
	cnl_sq_col_text(st, 0, j->id, sizeof(j->id));
	cnl_sq_col_text(st, 1, j->project_id, sizeof(j->project_id));
	cnl_sq_col_text(st, 2, j->user_id, sizeof(j->user_id));
	cnl_sq_col_text(st, 3, j->command, sizeof(j->command));
	cnl_sq_col_text(st, 4, j->profile, sizeof(j->profile));
	cnl_sq_col_text(st, 5, j->gpu_shape, sizeof(j->gpu_shape));
	j->priority = sqlite3_column_int(st, 6);
	j->deadline_ms = sqlite3_column_int64(st, 7);
	j->runtime_ms = sqlite3_column_int64(st, 8);
	cnl_sq_col_text(st, 9, j->state, sizeof(j->state));
	j->exit_code = sqlite3_column_int(st, 10);
	j->created_ms = sqlite3_column_int64(st, 11);
	j->updated_ms = sqlite3_column_int64(st, 12);
	cnl_sq_col_text(st, 13, j->run, sizeof(j->run));
}

#define SERVER_COLS                                                   \
	"id, project_id, user_id, name, image, profile, storage_gb, " \
	"idle_timeout_s, state, url, created_ms, run"

static void read_server(sqlite3_stmt *st, void *out)
{
	struct cnl_store_server *v = out;

	memset(v, 0, sizeof(*v));
	cnl_sq_col_text(st, 0, v->id, sizeof(v->id));
	cnl_sq_col_text(st, 1, v->project_id, sizeof(v->project_id));
	cnl_sq_col_text(st, 2, v->user_id, sizeof(v->user_id));
	cnl_sq_col_text(st, 3, v->name, sizeof(v->name));
	cnl_sq_col_text(st, 4, v->image, sizeof(v->image));
	cnl_sq_col_text(st, 5, v->profile, sizeof(v->profile));
	v->storage_gb = sqlite3_column_int64(st, 6);
	v->idle_timeout_s = sqlite3_column_int64(st, 7);
	cnl_sq_col_text(st, 8, v->state, sizeof(v->state));
	cnl_sq_col_text(st, 9, v->url, sizeof(v->url));
	v->created_ms = sqlite3_column_int64(st, 10);
	cnl_sq_col_text(st, 11, v->run, sizeof(v->run));
}

static int insert_job(struct cnl_sq_store *q, const void *obj)
{
	const struct cnl_store_job *in = obj;
	const char *t[] = {in->id,      in->project_id,
	                   in->user_id, in->command,
	                   in->profile, in->gpu_shape,
	                   in->state,   in->run[0] ? in->run : "{}",
	                   NULL};
	int64_t v[] = {in->priority,  in->deadline_ms, in->runtime_ms,
	               in->exit_code, in->created_ms,  in->updated_ms};

	return cnl_sq_run(q,
	                  "INSERT INTO jobs (id, project_id, user_id, command,"
	                  " profile, gpu_shape, state, run, priority,"
	                  " deadline_ms, runtime_ms, exit_code, created_ms,"
	                  " updated_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7,"
	                  " ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
	                  t, v, CNL_ARRAY_SIZE(v));
}

static int insert_server(struct cnl_sq_store *q, const void *obj)
{
	const struct cnl_store_server *in = obj;
	const char *t[] = {
	    in->id,    in->project_id, in->user_id,
	    in->name,  in->image,      in->profile,
	    in->state, in->url,        in->run[0] ? in->run : "{}",
	    NULL};
	int64_t v[] = {in->storage_gb, in->idle_timeout_s, in->created_ms};

	return cnl_sq_run(q,
	                  "INSERT INTO servers (id, project_id, user_id, name,"
	                  " image, profile, state, url, run, storage_gb,"
	                  " idle_timeout_s, created_ms) VALUES (?1, ?2, ?3,"
	                  " ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
	                  t, v, CNL_ARRAY_SIZE(v));
}

/* What idempotent_create needs to know about one kind of object. */
struct idem_kind {
	const char *kind; /* stored in idempotency.kind */
	const char *get_sql;
	void (*read)(sqlite3_stmt *, void *);
	int (*insert)(struct cnl_sq_store *q, const void *obj);
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

/* The row of a used idempotency key. */
struct idem_row {
	char kind[16]; /* "job" or "server" */
	char object_id[CNL_ID_MAX];
};

static void read_idem(sqlite3_stmt *st, void *out)
{
	struct idem_row *u = out;

	cnl_sq_col_text(st, 0, u->kind, sizeof(u->kind));
	cnl_sq_col_text(st, 1, u->object_id, sizeof(u->object_id));
}

static int idem_insert(struct cnl_sq_store *q, const char *key,
                       const char *kind, const char *object_id,
                       int64_t created_ms)
{
	const char *t[] = {key, kind, object_id, NULL};

	return cnl_sq_run(q,
	                  "INSERT INTO idempotency (key, kind, object_id,"
	                  " created_ms) VALUES (?1, ?2, ?3, ?4)",
	                  t, &created_ms, 1);
}

/*
 * Store @in (whose id, user id and creation time are given separately, the
 * structs differing) under @key in one transaction, or return the original
 * object of an earlier call with the same key.
 */
static int idempotent_create(struct cnl_sq_store *q, const struct idem_kind *k,
                             const void *in, const char *id,
                             const char *user_id, int64_t created_ms,
                             const char *key, void *ret)
{
	union {
		struct cnl_store_job job;
		struct cnl_store_server server;
	} orig;
	struct idem_row used;
	int r;

	if ((r = cnl_sq_begin(q)) < 0)
		return r;
	if (key) {
		r = cnl_sq_get_one(q,
		                   "SELECT kind, object_id FROM idempotency"
		                   " WHERE key = ?1",
		                   key, NULL, read_idem, &used);
		if (r < 0 && r != -CNL_ENOTFOUND)
			goto fail;
		if (r == 0) {
			if (strcmp(used.kind, k->kind) != 0) {
				r = -CNL_EDUP;
				goto fail;
			}
			r = cnl_sq_get_one(q, k->get_sql, used.object_id, NULL,
			                   k->read, &orig);
			if (r < 0)
				goto fail;
			/* Both structs start id, project_id, user_id. */
			if (strcmp(k == &job_kind ? orig.job.user_id
			                          : orig.server.user_id,
			           user_id) != 0) {
				r = -CNL_EDUP;
				goto fail;
			}
			if ((r = cnl_sq_commit(q)) < 0)
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
	if ((r = cnl_sq_commit(q)) < 0)
		return r;
	if (ret)
		memcpy(ret, in, k->size);
	return CNL_STORE_CREATED;
fail:
	cnl_sq_rollback(q);
	return r;
}

int cnl_sq_job_create(struct cnl_store *s, const struct cnl_store_job *in,
                      const char *idem_key, struct cnl_store_job *ret)
{
	int r = idempotent_create(cnl_sq(s), &job_kind, in, in->id, in->user_id,
	                          in->created_ms, idem_key, ret);

	if (r == CNL_STORE_CREATED && ret && !ret->run[0])
		memcpy(ret->run, "{}", 3); /* as stored */
	return r;
}

int cnl_sq_job_get(struct cnl_store *s, const char *id,
                   struct cnl_store_job *ret)
{
	return cnl_sq_get_one(cnl_sq(s), job_kind.get_sql, id, NULL, read_job,
	                      ret);
}

int cnl_sq_job_list(struct cnl_store *s, const char *project_id,
                    const char *after_id, int limit, struct cnl_store_job *out,
                    int *ret_n)
{
	const char *sql =
	    project_id ? "SELECT " JOB_COLS " FROM jobs WHERE project_id = ?1"
	                 " AND id > ?2 ORDER BY id LIMIT ?3"
	               : "SELECT " JOB_COLS " FROM jobs WHERE id > ?2"
	                 " ORDER BY id LIMIT ?3";

	return cnl_sq_list_page(cnl_sq(s), sql, project_id, after_id, limit,
	                        read_job, out, sizeof(*out), ret_n);
}

int cnl_sq_job_list_state(struct cnl_store *s, const char *state,
                          const char *after_id, int limit,
                          struct cnl_store_job *out, int *ret_n)
{
	return cnl_sq_list_page(cnl_sq(s),
	                        "SELECT " JOB_COLS " FROM jobs WHERE state = ?1"
	                        " AND id > ?2 ORDER BY id LIMIT ?3",
	                        state, after_id, limit, read_job, out,
	                        sizeof(*out), ret_n);
}

int cnl_sq_job_count_state(struct cnl_store *s, const char *state,
                           int64_t *ret_n)
{
	struct cnl_sq_store *q = cnl_sq(s);
	sqlite3_stmt *st = NULL;
	int r, rc;

	if ((r = cnl_sq_prep(q, "SELECT count(*) FROM jobs WHERE state = ?1",
	                     &st)) < 0)
		return r;
	if ((r = cnl_sq_bind_text(q, st, 1, state)) == 0) {
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW)
			*ret_n = sqlite3_column_int64(st, 0);
		else
			r = cnl_sq_err(q,
			               rc == SQLITE_DONE ? SQLITE_ERROR : rc);
	}
	cnl_sq_finalize(q, st);
	return r;
}

int cnl_sq_job_each_state(struct cnl_store *s, const char *state,
                          int (*fn)(void *ud, const struct cnl_store_job *j),
                          void *ud)
{
	struct cnl_sq_store *q = cnl_sq(s);
	struct cnl_store_job *j = malloc(sizeof(*j));
	sqlite3_stmt *st = NULL;
	int r, rc;

	if (!j)
		return -ENOMEM;
	if ((r = cnl_sq_prep(q,
	                     "SELECT " JOB_COLS " FROM jobs WHERE state = ?1"
	                     " ORDER BY id",
	                     &st)) < 0 ||
	    (r = cnl_sq_bind_text(q, st, 1, state)) < 0)
		goto out;
	r = 0;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		read_job(st, j);
		if ((r = fn(ud, j)) < 0)
			goto out;
	}
	if (rc != SQLITE_DONE)
		r = cnl_sq_err(q, rc);
out:
	cnl_sq_finalize(q, st);
	free(j);
	return r;
}

int cnl_sq_job_update_state(struct cnl_store *s, const char *id,
                            const char *state, int exit_code,
                            int64_t updated_ms)
{
	const char *t[] = {id, state, NULL};
	int64_t v[] = {exit_code, updated_ms};

	return cnl_sq_update_rows(cnl_sq(s),
	                          "UPDATE jobs SET state = ?2, exit_code = ?3,"
	                          " updated_ms = ?4 WHERE id = ?1",
	                          t, v, 2);
}

int cnl_sq_job_update_run(struct cnl_store *s, const char *id,
                          const char *state, int exit_code, int64_t updated_ms,
                          const char *run)
{
	const char *t[] = {id, state, run, NULL};
	int64_t v[] = {exit_code, updated_ms};

	return cnl_sq_update_rows(
	    cnl_sq(s),
	    "UPDATE jobs SET state = ?2, run = ?3,"
	    " exit_code = ?4, updated_ms = ?5 WHERE id = ?1",
	    t, v, 2);
}

int cnl_sq_server_create(struct cnl_store *s, const struct cnl_store_server *in,
                         const char *idem_key, struct cnl_store_server *ret)
{
	int r = idempotent_create(cnl_sq(s), &server_kind, in, in->id,
	                          in->user_id, in->created_ms, idem_key, ret);

	if (r == CNL_STORE_CREATED && ret && !ret->run[0])
		memcpy(ret->run, "{}", 3); /* as stored */
	return r;
}

int cnl_sq_server_get(struct cnl_store *s, const char *id,
                      struct cnl_store_server *ret)
{
	return cnl_sq_get_one(cnl_sq(s), server_kind.get_sql, id, NULL,
	                      read_server, ret);
}

int cnl_sq_server_list(struct cnl_store *s, const char *project_id,
                       const char *after_id, int limit,
                       struct cnl_store_server *out, int *ret_n)
{
	const char *sql =
	    project_id ? "SELECT " SERVER_COLS " FROM servers WHERE"
	                 " project_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3"
	               : "SELECT " SERVER_COLS " FROM servers WHERE id > ?2"
	                 " ORDER BY id LIMIT ?3";

	return cnl_sq_list_page(cnl_sq(s), sql, project_id, after_id, limit,
	                        read_server, out, sizeof(*out), ret_n);
}

int cnl_sq_server_update(struct cnl_store *s, const char *id, const char *state,
                         const char *url, const char *run)
{
	const char *t[] = {id, state, url, run, NULL};

	return cnl_sq_update_rows(
	    cnl_sq(s),
	    "UPDATE servers SET state = ?2, url = ?3, run = ?4"
	    " WHERE id = ?1",
	    t, NULL, 0);
}

int cnl_sq_server_delete(struct cnl_store *s, const char *id)
{
	const char *t[] = {id, NULL};

	return cnl_sq_update_rows(
	    cnl_sq(s), "DELETE FROM servers WHERE id = ?1", t, NULL, 0);
}
