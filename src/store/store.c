/*
 * store.c - the state store's generic layer: the cnl_store_*() functions of
 * store.h, the same for every backend.
 *
 * Design (after Slurm's _g_ wrappers).  Each public function checks its
 * arguments against the limits that store.h sets for every backend (NULL
 * pointers, fixed-size fields that must hold their NUL, ids that must parse,
 * enumerated states and roles, paging limits, non-negative numbers) and
 * only then calls through s->ops.  A backend's methods may therefore assume
 * what struct cnl_store_ops promises and check nothing again; a new backend
 * (PostgreSQL) fills in an ops table and reuses this file unchanged.  The
 * wrappers hold no state and never touch a database: nothing here knows
 * SQL.
 *
 * The one backend so far is SQLite: sqlite.c and its sqlite_*.c files.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/util.h"
#include "store/store.h"
#include "wire/state.h"

#define CHECK(expr)                      \
	do {                             \
		int check_r_ = (expr);   \
		if (check_r_ < 0)        \
			return check_r_; \
	} while (0)

static const char *const roles[] = {
    "admin",  "project-admin", "member",
    "viewer", "agent", /* node agents; granted in the system project only */
};

/* A fixed-size field: NUL inside @size, and not empty when @required. */
static int check_field(const char *f, size_t size, bool required)
{
	if (!memchr(f, '\0', size))
		return -CNL_ESIZE;
	if (required && f[0] == '\0')
		return -CNL_EFIELD;
	return 0;
}

/* A field holding an id made by cnl_id_new(). */
static int check_id_field(const char *f, size_t size)
{
	CHECK(check_field(f, size, true));
	if (cnl_id_parse(f, NULL, 0, NULL) < 0)
		return -CNL_EFIELD;
	return 0;
}

/* A string argument that may be empty: shorter than @max. */
static int check_len(const char *a, size_t max)
{
	return cnl_strnlen(a, max) >= max ? -CNL_ESIZE : 0;
}

/* A caller's string argument: non-NULL, non-empty, shorter than @max. */
static int check_arg(const char *a, size_t max)
{
	if (!a || a[0] == '\0')
		return -CNL_EFIELD;
	return check_len(a, max);
}

static int check_enum(const char *f, size_t size, const char *const *set,
                      size_t n)
{
	CHECK(check_field(f, size, true));
	for (size_t i = 0; i < n; i++)
		if (strcmp(f, set[i]) == 0)
			return 0;
	return -CNL_EFIELD;
}

/* A state of @kind as the store keeps it: the state machine's names
 * (wire/state.h, cnl_wl_store_state()), nothing else. */
static int check_state(const char *state, enum cnl_wl_kind kind)
{
	CHECK(check_arg(state, CNL_STORE_STATE_MAX));
	return cnl_wl_store_state_valid(kind, state) ? 0 : -CNL_EFIELD;
}

static int check_nonneg(int64_t v)
{
	return v < 0 ? -CNL_ESIZE : 0;
}

/* A page of a listing: a handle, somewhere for the rows, a limit in range. */
static int check_page(const struct cnl_store *s, int limit, const void *out,
                      const int *ret_n)
{
	if (!s || !out || !ret_n)
		return -EINVAL;
	if (limit < CNL_STORE_LIST_MIN || limit > CNL_STORE_LIST_MAX)
		return -CNL_ESIZE;
	return 0;
}

/* A lookup: a handle, somewhere for the answer and a valid @key. */
static int check_get(const struct cnl_store *s, const void *ret,
                     const char *key, size_t max)
{
	if (!s || !ret)
		return -EINVAL;
	return check_arg(key, max);
}

/* A change to one object: a handle and a valid @id. */
static int check_target(const struct cnl_store *s, const char *id)
{
	if (!s)
		return -EINVAL;
	return check_arg(id, CNL_ID_MAX);
}

/* An optional cursor or filter: NULL, or a valid argument. */
static int check_opt_arg(const char *a, size_t max)
{
	return a ? check_arg(a, max) : 0;
}

/* An optional idempotency key: NULL and "" both mean none. */
static int check_idem(const char *key)
{
	return key ? check_len(key, CNL_STORE_IDEM_MAX) : 0;
}

static const char *idem_or_null(const char *key)
{
	return key && key[0] ? key : NULL;
}

void cnl_store_close(struct cnl_store *s)
{
	if (s)
		s->ops->close(s);
}

int cnl_store_schema_version(struct cnl_store *s)
{
	if (!s)
		return -EINVAL;
	return s->ops->schema_version(s);
}

const char *cnl_store_backend(struct cnl_store *s)
{
	return s ? s->ops->name : "";
}

int cnl_store_open_reader(struct cnl_store *s, struct cnl_store **ret)
{
	if (!s || !ret)
		return -EINVAL;
	if (!s->ops->open_reader)
		return -ENOTSUP;
	return s->ops->open_reader(s, ret);
}

/* A lease holder's name: printable, no longer than its field. */
static int check_holder(const char *holder)
{
	CHECK(check_arg(holder, CNL_STORE_LEASE_HOLDER_MAX));
	for (const char *p = holder; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return -CNL_EFIELD;
	return 0;
}

int cnl_store_lease_acquire(struct cnl_store *s, const char *holder,
                            int64_t ttl_ms, struct cnl_store_lease *ret)
{
	if (!s || !ret)
		return -EINVAL;
	CHECK(check_holder(holder));
	if (ttl_ms < 1 || ttl_ms > 3600000)
		return -CNL_ESIZE;
	if (!s->ops->lease_acquire)
		return -ENOTSUP;
	return s->ops->lease_acquire(s, holder, ttl_ms, ret);
}

int cnl_store_lease_renew(struct cnl_store *s, const char *holder,
                          int64_t epoch, int64_t ttl_ms,
                          struct cnl_store_lease *ret)
{
	if (!s)
		return -EINVAL;
	CHECK(check_holder(holder));
	if (ttl_ms < 1 || ttl_ms > 3600000 || epoch < 1)
		return -CNL_ESIZE;
	if (!s->ops->lease_renew)
		return -ENOTSUP;
	return s->ops->lease_renew(s, holder, epoch, ttl_ms, ret);
}

int cnl_store_lease_get(struct cnl_store *s, struct cnl_store_lease *ret)
{
	if (!s || !ret)
		return -EINVAL;
	if (!s->ops->lease_get)
		return -ENOTSUP;
	return s->ops->lease_get(s, ret);
}

int cnl_store_lease_release(struct cnl_store *s, const char *holder,
                            int64_t epoch)
{
	if (!s)
		return -EINVAL;
	CHECK(check_holder(holder));
	if (!s->ops->lease_release)
		return -ENOTSUP;
	return s->ops->lease_release(s, holder, epoch);
}

int cnl_store_lease_wait(struct cnl_store *s, int64_t ms)
{
	if (!s || ms < 0)
		return -EINVAL;
	if (!s->ops->lease_wait)
		return -ENOTSUP;
	return s->ops->lease_wait(s, ms);
}

int cnl_store_fence(struct cnl_store *s, int64_t epoch, int64_t hold_ms)
{
	if (!s || epoch < 0 || hold_ms < 1 || hold_ms > 3600000)
		return -EINVAL;
	if (!s->ops->fence)
		return -ENOTSUP;
	s->ops->fence(s, epoch, hold_ms);
	return 0;
}

/* An object of id -> object or null, each id a valid one. */
static int check_live(const char *changes)
{
	json_t *o = json_loads(changes, 0, NULL), *v;
	const char *k;
	int r = json_is_object(o) ? 0 : -CNL_EFIELD;

	json_object_foreach (o, k, v) {
		if (r == 0 && check_arg(k, CNL_ID_MAX) < 0)
			r = -CNL_EFIELD;
		if (!json_is_object(v) && !json_is_null(v))
			r = -CNL_EFIELD;
	}
	json_decref(o);
	return r;
}

int cnl_store_live_put(struct cnl_store *s, bool reset, const char *changes)
{
	if (!s || !changes)
		return -EINVAL;
	CHECK(check_live(changes));
	if (!s->ops->live_put)
		return -ENOTSUP;
	return s->ops->live_put(s, reset, changes);
}

int cnl_store_live_get(struct cnl_store *s, const char *id, char **ret)
{
	if (!s || !ret)
		return -EINVAL;
	*ret = NULL;
	CHECK(check_arg(id, CNL_ID_MAX));
	if (!s->ops->live_get)
		return -ENOTSUP;
	return s->ops->live_get(s, id, ret);
}

int cnl_store_open_peer(struct cnl_store *s, struct cnl_store **ret)
{
	if (!s || !ret)
		return -EINVAL;
	if (!s->ops->open_peer)
		return -ENOTSUP;
	return s->ops->open_peer(s, ret);
}

const char *cnl_store_path(struct cnl_store *s)
{
	return s && s->path[0] ? s->path : "the database";
}

const char *cnl_store_errmsg(struct cnl_store *s)
{
	return s ? s->errmsg : "";
}

int cnl_store_project_create(struct cnl_store *s,
                             const struct cnl_store_project *in)
{
	if (!s || !in)
		return -EINVAL;
	CHECK(check_id_field(in->id, sizeof(in->id)));
	CHECK(check_field(in->name, sizeof(in->name), true));
	CHECK(check_nonneg(in->created_ms));
	return s->ops->project_create(s, in);
}

int cnl_store_project_get(struct cnl_store *s, const char *id,
                          struct cnl_store_project *ret)
{
	CHECK(check_get(s, ret, id, CNL_ID_MAX));
	return s->ops->project_get(s, id, ret);
}

int cnl_store_project_get_by_name(struct cnl_store *s, const char *name,
                                  struct cnl_store_project *ret)
{
	CHECK(check_get(s, ret, name, CNL_STORE_NAME_MAX));
	return s->ops->project_get_by_name(s, name, ret);
}

int cnl_store_project_list(struct cnl_store *s, const char *after_id, int limit,
                           struct cnl_store_project *out, int *ret_n)
{
	CHECK(check_page(s, limit, out, ret_n));
	CHECK(check_opt_arg(after_id, CNL_ID_MAX));
	return s->ops->project_list(s, after_id, limit, out, ret_n);
}

int cnl_store_user_create(struct cnl_store *s, const struct cnl_store_user *in)
{
	if (!s || !in)
		return -EINVAL;
	CHECK(check_id_field(in->id, sizeof(in->id)));
	CHECK(check_field(in->name, sizeof(in->name), true));
	CHECK(check_field(in->password_hash, sizeof(in->password_hash), false));
	CHECK(check_nonneg(in->created_ms));
	return s->ops->user_create(s, in);
}

int cnl_store_user_get(struct cnl_store *s, const char *id,
                       struct cnl_store_user *ret)
{
	CHECK(check_get(s, ret, id, CNL_ID_MAX));
	return s->ops->user_get(s, id, ret);
}

int cnl_store_user_get_by_name(struct cnl_store *s, const char *name,
                               struct cnl_store_user *ret)
{
	CHECK(check_get(s, ret, name, CNL_STORE_NAME_MAX));
	return s->ops->user_get_by_name(s, name, ret);
}

int cnl_store_membership_set(struct cnl_store *s,
                             const struct cnl_store_membership *in)
{
	if (!s || !in)
		return -EINVAL;
	CHECK(check_id_field(in->user_id, sizeof(in->user_id)));
	CHECK(check_id_field(in->project_id, sizeof(in->project_id)));
	CHECK(check_enum(in->role, sizeof(in->role), roles,
	                 CNL_ARRAY_SIZE(roles)));
	return s->ops->membership_set(s, in);
}

int cnl_store_membership_get_role(struct cnl_store *s, const char *user_id,
                                  const char *project_id, char *ret_role,
                                  size_t len)
{
	if (!s || !ret_role)
		return -EINVAL;
	if (len < CNL_STORE_ROLE_MAX)
		return -ENOSPC;
	CHECK(check_arg(user_id, CNL_ID_MAX));
	CHECK(check_arg(project_id, CNL_ID_MAX));
	return s->ops->membership_get_role(s, user_id, project_id, ret_role,
	                                   len);
}

int cnl_store_membership_list(struct cnl_store *s, const char *user_id,
                              const char *after_project_id, int limit,
                              struct cnl_store_membership *out, int *ret_n)
{
	CHECK(check_page(s, limit, out, ret_n));
	CHECK(check_arg(user_id, CNL_ID_MAX));
	CHECK(check_opt_arg(after_project_id, CNL_ID_MAX));
	return s->ops->membership_list(s, user_id, after_project_id, limit, out,
	                               ret_n);
}

int cnl_store_job_create(struct cnl_store *s, const struct cnl_store_job *in,
                         const char *idem_key, struct cnl_store_job *ret)
{
	if (!s || !in)
		return -EINVAL;
	CHECK(check_id_field(in->id, sizeof(in->id)));
	CHECK(check_id_field(in->project_id, sizeof(in->project_id)));
	CHECK(check_id_field(in->user_id, sizeof(in->user_id)));
	CHECK(check_field(in->command, sizeof(in->command), true));
	CHECK(check_field(in->profile, sizeof(in->profile), false));
	CHECK(check_field(in->gpu_shape, sizeof(in->gpu_shape), false));
	if (in->priority < 0 || in->priority > CNL_STORE_PRIO_MAX)
		return -CNL_ESIZE;
	CHECK(check_nonneg(in->deadline_ms));
	CHECK(check_nonneg(in->runtime_ms));
	CHECK(check_nonneg(in->created_ms));
	CHECK(check_nonneg(in->updated_ms));
	CHECK(check_field(in->state, sizeof(in->state), true));
	CHECK(check_state(in->state, CNL_WL_JOB));
	CHECK(check_idem(idem_key));
	return s->ops->job_create(s, in, idem_or_null(idem_key), ret);
}

int cnl_store_job_get(struct cnl_store *s, const char *id,
                      struct cnl_store_job *ret)
{
	CHECK(check_get(s, ret, id, CNL_ID_MAX));
	return s->ops->job_get(s, id, ret);
}

int cnl_store_job_list(struct cnl_store *s, const char *project_id,
                       const char *after_id, int limit,
                       struct cnl_store_job *out, int *ret_n)
{
	CHECK(check_page(s, limit, out, ret_n));
	CHECK(check_opt_arg(project_id, CNL_ID_MAX));
	CHECK(check_opt_arg(after_id, CNL_ID_MAX));
	return s->ops->job_list(s, project_id, after_id, limit, out, ret_n);
}

int cnl_store_job_update_state(struct cnl_store *s, const char *id,
                               const char *state, int exit_code,
                               int64_t updated_ms)
{
	CHECK(check_target(s, id));
	CHECK(check_state(state, CNL_WL_JOB));
	CHECK(check_nonneg(updated_ms));
	return s->ops->job_update_state(s, id, state, exit_code, updated_ms);
}

int cnl_store_server_create(struct cnl_store *s,
                            const struct cnl_store_server *in,
                            const char *idem_key, struct cnl_store_server *ret)
{
	if (!s || !in)
		return -EINVAL;
	CHECK(check_id_field(in->id, sizeof(in->id)));
	CHECK(check_id_field(in->project_id, sizeof(in->project_id)));
	CHECK(check_id_field(in->user_id, sizeof(in->user_id)));
	CHECK(check_field(in->name, sizeof(in->name), true));
	CHECK(check_field(in->image, sizeof(in->image), true));
	CHECK(check_field(in->profile, sizeof(in->profile), false));
	CHECK(check_field(in->url, sizeof(in->url), false));
	CHECK(check_nonneg(in->storage_gb));
	CHECK(check_nonneg(in->idle_timeout_s));
	CHECK(check_nonneg(in->created_ms));
	CHECK(check_field(in->state, sizeof(in->state), true));
	CHECK(check_state(in->state, CNL_WL_SERVER));
	CHECK(check_idem(idem_key));
	return s->ops->server_create(s, in, idem_or_null(idem_key), ret);
}

int cnl_store_server_get(struct cnl_store *s, const char *id,
                         struct cnl_store_server *ret)
{
	CHECK(check_get(s, ret, id, CNL_ID_MAX));
	return s->ops->server_get(s, id, ret);
}

int cnl_store_server_list(struct cnl_store *s, const char *project_id,
                          const char *after_id, int limit,
                          struct cnl_store_server *out, int *ret_n)
{
	CHECK(check_page(s, limit, out, ret_n));
	CHECK(check_opt_arg(project_id, CNL_ID_MAX));
	CHECK(check_opt_arg(after_id, CNL_ID_MAX));
	return s->ops->server_list(s, project_id, after_id, limit, out, ret_n);
}

int cnl_store_audit_append(struct cnl_store *s,
                           const struct cnl_store_audit *in,
                           struct cnl_store_audit *ret)
{
	if (!s || !in)
		return -EINVAL;
	CHECK(check_nonneg(in->ts_ms));
	CHECK(check_field(in->actor, sizeof(in->actor), true));
	CHECK(check_field(in->action, sizeof(in->action), true));
	CHECK(check_field(in->target, sizeof(in->target), false));
	CHECK(check_field(in->result, sizeof(in->result), false));
	return s->ops->audit_append(s, in, ret);
}

int cnl_store_audit_list(struct cnl_store *s, int64_t after_seq, int limit,
                         struct cnl_store_audit *out, int *ret_n)
{
	CHECK(check_page(s, limit, out, ret_n));
	CHECK(check_nonneg(after_seq));
	return s->ops->audit_list(s, after_seq, limit, out, ret_n);
}

int cnl_store_audit_list_target(struct cnl_store *s, const char *target,
                                const char *action_prefix, int64_t after_seq,
                                int limit, struct cnl_store_audit *out,
                                int *ret_n)
{
	CHECK(check_page(s, limit, out, ret_n));
	CHECK(check_nonneg(after_seq));
	if (!target || !action_prefix)
		return -EINVAL;
	if (cnl_strnlen(target, CNL_STORE_AUDIT_MAX) >= CNL_STORE_AUDIT_MAX ||
	    cnl_strnlen(action_prefix, CNL_STORE_AUDIT_MAX) >=
	        CNL_STORE_AUDIT_MAX)
		return -CNL_ESIZE;
	if (!target[0])
		return -CNL_EFIELD;
	return s->ops->audit_list_target(s, target, action_prefix, after_seq,
	                                 limit, out, ret_n);
}

int cnl_store_audit_latest(struct cnl_store *s, const char *action,
                           int (*fn)(void *ud, const char *target,
                                     const char *result),
                           void *ud)
{
	if (!s || !action || !fn)
		return -EINVAL;
	if (strnlen(action, CNL_STORE_AUDIT_MAX) >= CNL_STORE_AUDIT_MAX)
		return -CNL_ESIZE;
	return s->ops->audit_latest(s, action, fn, ud);
}

int cnl_store_audit_verify(struct cnl_store *s, int64_t *ret_bad_seq)
{
	if (!s)
		return -EINVAL;
	return s->ops->audit_verify(s, ret_bad_seq);
}

int cnl_store_tx_begin(struct cnl_store *s)
{
	return s ? s->ops->tx(s, 0) : -EINVAL;
}

int cnl_store_tx_commit(struct cnl_store *s)
{
	return s ? s->ops->tx(s, 1) : -EINVAL;
}

int cnl_store_tx_rollback(struct cnl_store *s)
{
	return s ? s->ops->tx(s, 2) : -EINVAL;
}

int cnl_store_tx_begin_batch(struct cnl_store *s)
{
	if (!s)
		return -EINVAL;
	return s->ops->batch ? s->ops->batch(s, 0) : s->ops->tx(s, 0);
}

int cnl_store_tx_commit_batch(struct cnl_store *s)
{
	if (!s)
		return -EINVAL;
	return s->ops->batch ? s->ops->batch(s, 1) : s->ops->tx(s, 1);
}

int cnl_store_flush(struct cnl_store *s)
{
	return s && s->ops->batch ? s->ops->batch(s, 2) : 0;
}

void cnl_store_batch_window(struct cnl_store *s, int state)
{
	if (s && s->ops->batch)
		s->ops->batch(s, 4 + state);
}

int cnl_store_lost(struct cnl_store *s, int64_t seq)
{
	return s && s->ops->lost ? s->ops->lost(s, seq) : 0;
}

bool cnl_store_batch_open(struct cnl_store *s)
{
	return cnl_store_batch_size(s) > 0;
}

unsigned cnl_store_batch_size(struct cnl_store *s)
{
	int n = s && s->ops->batch ? s->ops->batch(s, 3) : 0;

	return n > 0 ? (unsigned)n : 0;
}

void cnl_store_set_batch_hook(struct cnl_store *s, void (*fn)(void *, int),
                              void *arg)
{
	if (s && s->ops->batch_hook)
		s->ops->batch_hook(s, fn, arg);
}

int cnl_store_group_commit(struct cnl_store *s)
{
	if (!s)
		return -EINVAL;
	return s->ops->group_commit ? s->ops->group_commit(s) : -ENOTSUP;
}

int64_t cnl_store_written(struct cnl_store *s)
{
	return s && s->ops->written ? s->ops->written(s) : 0;
}

int64_t cnl_store_seen(struct cnl_store *s)
{
	return s && s->ops->seen ? s->ops->seen(s) : 0;
}

int cnl_store_sync(struct cnl_store *s, int64_t *ret_seq)
{
	if (!s || !ret_seq)
		return -EINVAL;
	if (!s->ops->sync) {
		*ret_seq = 0; /* every commit was durable already */
		return 0;
	}
	return s->ops->sync(s, ret_seq);
}

int cnl_store_project_set_flags(struct cnl_store *s, const char *id,
                                bool on_prem_only)
{
	CHECK(check_target(s, id));
	return s->ops->project_set_flags(s, id, on_prem_only);
}

int cnl_store_user_list(struct cnl_store *s, const char *after_id, int limit,
                        struct cnl_store_user *out, int *ret_n)
{
	CHECK(check_page(s, limit, out, ret_n));
	CHECK(check_opt_arg(after_id, CNL_ID_MAX));
	return s->ops->user_list(s, after_id, limit, out, ret_n);
}

int cnl_store_membership_list_project(struct cnl_store *s,
                                      const char *project_id,
                                      const char *after_user_id, int limit,
                                      struct cnl_store_membership *out,
                                      int *ret_n)
{
	CHECK(check_page(s, limit, out, ret_n));
	CHECK(check_arg(project_id, CNL_ID_MAX));
	CHECK(check_opt_arg(after_user_id, CNL_ID_MAX));
	return s->ops->membership_list_project(s, project_id, after_user_id,
	                                       limit, out, ret_n);
}

int cnl_store_job_list_state(struct cnl_store *s, const char *state,
                             const char *after_id, int limit,
                             struct cnl_store_job *out, int *ret_n)
{
	CHECK(check_page(s, limit, out, ret_n));
	CHECK(check_state(state, CNL_WL_JOB));
	CHECK(check_opt_arg(after_id, CNL_ID_MAX));
	return s->ops->job_list_state(s, state, after_id, limit, out, ret_n);
}

int cnl_store_job_count_state(struct cnl_store *s, const char *state,
                              int64_t *ret_n)
{
	if (!s || !ret_n)
		return -EINVAL;
	CHECK(check_state(state, CNL_WL_JOB));
	return s->ops->job_count_state(s, state, ret_n);
}

int cnl_store_job_each_state(struct cnl_store *s, const char *state,
                             int (*fn)(void *ud, const struct cnl_store_job *j),
                             void *ud)
{
	if (!s || !fn)
		return -EINVAL;
	CHECK(check_state(state, CNL_WL_JOB));
	return s->ops->job_each_state(s, state, fn, ud);
}

int cnl_store_job_update_run(struct cnl_store *s, const char *id,
                             const char *state, int exit_code,
                             int64_t updated_ms, const char *run)
{
	CHECK(check_target(s, id));
	CHECK(check_state(state, CNL_WL_JOB));
	CHECK(check_nonneg(updated_ms));
	CHECK(check_arg(run, CNL_STORE_RUN_MAX));
	return s->ops->job_update_run(s, id, state, exit_code, updated_ms, run);
}

int cnl_store_server_update(struct cnl_store *s, const char *id,
                            const char *state, const char *url, const char *run)
{
	if (!s || !url)
		return -EINVAL;
	CHECK(check_arg(id, CNL_ID_MAX));
	CHECK(check_state(state, CNL_WL_SERVER));
	CHECK(check_len(url, CNL_STORE_URL_MAX));
	CHECK(check_arg(run, CNL_STORE_RUN_MAX));
	return s->ops->server_update(s, id, state, url, run);
}

int cnl_store_server_delete(struct cnl_store *s, const char *id)
{
	CHECK(check_target(s, id));
	return s->ops->server_delete(s, id);
}

int cnl_store_user_set_password(struct cnl_store *s, const char *id,
                                const char *password_hash)
{
	CHECK(check_target(s, id));
	CHECK(check_field(password_hash, CNL_STORE_HASH_MAX, false));
	return s->ops->user_set_password(s, id, password_hash);
}

int cnl_store_membership_delete(struct cnl_store *s, const char *user_id,
                                const char *project_id)
{
	if (!s)
		return -EINVAL;
	CHECK(check_arg(user_id, CNL_ID_MAX));
	CHECK(check_arg(project_id, CNL_ID_MAX));
	return s->ops->membership_delete(s, user_id, project_id);
}

int cnl_store_project_delete(struct cnl_store *s, const char *id)
{
	CHECK(check_target(s, id));
	return s->ops->project_delete(s, id);
}

static int check_kind(const char *kind)
{
	return check_arg(kind, CNL_STORE_KIND_MAX);
}

int cnl_store_doc_put(struct cnl_store *s, const struct cnl_store_doc *in,
                      bool create)
{
	if (!s || !in)
		return -EINVAL;
	CHECK(check_field(in->kind, sizeof(in->kind), true));
	CHECK(check_field(in->id, sizeof(in->id), true));
	CHECK(check_field(in->parent, sizeof(in->parent), false));
	CHECK(check_field(in->name, sizeof(in->name), false));
	CHECK(check_arg(in->body, CNL_STORE_DOC_MAX));
	CHECK(check_nonneg(in->updated_ms));
	return s->ops->doc_put(s, in, create);
}

int cnl_store_doc_get(struct cnl_store *s, const char *kind, const char *id,
                      struct cnl_store_doc *ret)
{
	if (!s || !ret)
		return -EINVAL;
	CHECK(check_kind(kind));
	CHECK(check_arg(id, CNL_STORE_DOC_ID_MAX));
	return s->ops->doc_get(s, kind, id, ret);
}

int cnl_store_doc_get_by_name(struct cnl_store *s, const char *kind,
                              const char *parent, const char *name,
                              struct cnl_store_doc *ret)
{
	if (!s || !ret || !parent)
		return -EINVAL;
	CHECK(check_kind(kind));
	CHECK(check_len(parent, CNL_STORE_DOC_ID_MAX));
	CHECK(check_arg(name, CNL_STORE_NAME_MAX));
	return s->ops->doc_get_by_name(s, kind, parent, name, ret);
}

int cnl_store_doc_list(struct cnl_store *s, const char *kind,
                       const char *parent, const char *after_id, int limit,
                       struct cnl_store_doc *out, int *ret_n)
{
	CHECK(check_page(s, limit, out, ret_n));
	CHECK(check_kind(kind));
	CHECK(parent ? check_len(parent, CNL_STORE_DOC_ID_MAX) : 0);
	CHECK(check_opt_arg(after_id, CNL_STORE_DOC_ID_MAX));
	return s->ops->doc_list(s, kind, parent, after_id, limit, out, ret_n);
}

int cnl_store_doc_delete(struct cnl_store *s, const char *kind, const char *id)
{
	if (!s)
		return -EINVAL;
	CHECK(check_kind(kind));
	CHECK(check_arg(id, CNL_STORE_DOC_ID_MAX));
	return s->ops->doc_delete(s, kind, id);
}

void cnl_store_doc_done(struct cnl_store_doc *d)
{
	if (d) {
		free(d->body);
		d->body = NULL;
	}
}

void cnl_store_docs_done(struct cnl_store_doc *d, int n)
{
	for (int i = 0; d && i < n; i++)
		cnl_store_doc_done(&d[i]);
}
