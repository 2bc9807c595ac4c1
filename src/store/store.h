/*
 * store.h - the control plane's state store: projects, users, memberships,
 * jobs, interactive servers, idempotency keys and the hash-chained audit log.
 *
 * Design.  Callers see one handle, struct cnl_store, and the cnl_store_*()
 * functions below.  Each function is a generic wrapper (after Slurm's _g_
 * layer, in store.c): it checks its arguments against the limits in this
 * header, which are the same for every backend, and then calls through the
 * handle's ops table.  A backend (SQLite today: sqlite.c and its
 * sqlite_*.c files; PostgreSQL later) fills in a struct cnl_store_ops and
 * embeds struct cnl_store as the first member of its own handle.  Callers
 * never change when a backend is added.
 *
 * Invariants every backend keeps:
 *  1. Every operation is atomic: on any failure nothing is stored.
 *  2. A write is acknowledged (returns >= 0) only once it is durable: the
 *     SQLite backend runs WAL with synchronous=FULL, so an acknowledged write
 *     survives kill -9 and power loss.  Under group commit
 *     (cnl_store_group_commit()) a write returns once written, and is
 *     durable once a later cnl_store_sync() covers it.
 *  3. Ids are made by the caller with cnl_id_new() (common/id.h) and are
 *     time-sortable, so listings ordered by id are in creation order and
 *     paging uses the last id seen as its cursor.
 *  4. Idempotency keys form one namespace across kinds.  Creating with a key
 *     already used for the same kind by the same user returns the ORIGINAL
 *     object and CNL_STORE_REPLAYED, whatever the new request said; a key
 *     used for another kind, or by another user, is refused with -CNL_EDUP.
 *  5. The audit log is append-only and hash-chained:
 *       hash = hex(SHA-256(prev_hash || canonical text of the record))
 *     where the first record's prev_hash is 64 zeros.
 *
 * Errors: -CNL_ENOTFOUND for a missing id (including a job or server that
 * names a missing project or user), -CNL_EDUP for a duplicate id, name or
 * idempotency key, -CNL_EFIELD for a malformed or empty field or an unknown
 * enumerated value (state, role), -CNL_ESIZE for a string that does not fit
 * its field or a number out of range, -CNL_ECONFIG for a file whose schema
 * is newer than this build, -CNL_ECORRUPT when the audit chain fails, -EIO
 * for a database error (cnl_store_errmsg() then says which), -ENOSPC (or
 * -EDQUOT) when the disk holding the database is full, -ENOMEM.
 *
 * A handle is not thread-safe: use it from one thread at a time, or open one
 * handle per thread (SQLite's busy_timeout serialises writers).
 */
#ifndef CNL_STORE_H
#define CNL_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/id.h"

/* Field sizes, each including the terminating NUL. */
#define CNL_STORE_NAME_MAX         64   /* project, user, server names */
#define CNL_STORE_HASH_MAX         256  /* opaque password hash */
#define CNL_STORE_ROLE_MAX         16   /* membership role */
#define CNL_STORE_STATE_MAX        16   /* job and server state */
#define CNL_STORE_COMMAND_MAX      1024 /* job command line */
#define CNL_STORE_PROFILE_MAX      64   /* profile and GPU shape names */
#define CNL_STORE_IMAGE_MAX        256  /* container image reference */
#define CNL_STORE_URL_MAX          256  /* server URL */
#define CNL_STORE_AUDIT_MAX        128 /* audit actor, action, target, result */
#define CNL_STORE_SHA256_HEX       65  /* 64 hex digits and the NUL */
#define CNL_STORE_IDEM_MAX         128 /* idempotency key, NUL included */
#define CNL_STORE_RUN_MAX          2048 /* run record of a job or server (JSON) */
#define CNL_STORE_KIND_MAX         16   /* document kind */
#define CNL_STORE_DOC_ID_MAX       128          /* document id and parent */
#define CNL_STORE_DOC_MAX          (256 * 1024) /* document body, JSON text */
#define CNL_STORE_LEASE_HOLDER_MAX 256          /* a lease holder's name */

/* Paging limits for every *_list() call. */
#define CNL_STORE_LIST_MIN 1
#define CNL_STORE_LIST_MAX 1000

/* Job priorities: 0 (lowest) .. 3 (highest). */
#define CNL_STORE_PRIO_MAX 3

/* Positive results of the idempotent create calls. */
#define CNL_STORE_CREATED  1 /* a new object was stored */
#define CNL_STORE_REPLAYED 2 /* the key was used: the original is returned */

struct cnl_store_project {
	char id[CNL_ID_MAX];
	char name[CNL_STORE_NAME_MAX]; /* unique */
	bool on_prem_only;             /* never burst to a cloud */
	int64_t created_ms;
};

struct cnl_store_user {
	char id[CNL_ID_MAX];
	char name[CNL_STORE_NAME_MAX];          /* unique */
	char password_hash[CNL_STORE_HASH_MAX]; /* opaque; may be empty */
	int64_t created_ms;
};

/* role: "admin", "project-admin", "member", "viewer" or "agent". */
struct cnl_store_membership {
	char user_id[CNL_ID_MAX];
	char project_id[CNL_ID_MAX];
	char role[CNL_STORE_ROLE_MAX];
};

/*
 * state: "pending", "running", "succeeded", "failed" or "cancelled", the
 * user-facing names of the workload state machine (wire/state.h).  The
 * store checks the value, not the transition: the machine belongs to the
 * controller.
 */
struct cnl_store_job {
	char id[CNL_ID_MAX];
	char project_id[CNL_ID_MAX];
	char user_id[CNL_ID_MAX];
	char command[CNL_STORE_COMMAND_MAX];
	char profile[CNL_STORE_PROFILE_MAX];
	char gpu_shape[CNL_STORE_PROFILE_MAX]; /* e.g. "1g.18gb" or "h200x8" */
	int priority;                          /* 0..CNL_STORE_PRIO_MAX */
	int64_t deadline_ms;                   /* 0: none */
	int64_t runtime_ms;                    /* expected or limit; 0: none */
	char state[CNL_STORE_STATE_MAX];
	int exit_code;
	int64_t created_ms;
	int64_t updated_ms;
	/* The control plane's run record (JSON object): node, allocation,
	 * fencing epoch, wait reason...  "{}" until scheduled. */
	char run[CNL_STORE_RUN_MAX];
};

/*
 * state: "pending", "starting", "running", "stopping", "stopped" or
 * "failed" (wire/state.h's names for servers).  name is unique within a
 * project.
 */
struct cnl_store_server {
	char id[CNL_ID_MAX];
	char project_id[CNL_ID_MAX];
	char user_id[CNL_ID_MAX];
	char name[CNL_STORE_NAME_MAX];
	char image[CNL_STORE_IMAGE_MAX];
	char profile[CNL_STORE_PROFILE_MAX];
	int64_t storage_gb;     /* >= 0 */
	int64_t idle_timeout_s; /* >= 0; 0: never */
	char state[CNL_STORE_STATE_MAX];
	char url[CNL_STORE_URL_MAX]; /* may be empty until running */
	int64_t created_ms;
	char run[CNL_STORE_RUN_MAX]; /* as for jobs */
};

/*
 * A document: a JSON body stored under (kind, id), for the resources whose
 * shape the API layer owns and validates (profiles, quotas, usage, nodes,
 * API tokens, burst policy, cloud accounts, log chunks).  @parent groups
 * documents (a quota's project, a log chunk's job; "" for none) and
 * @name, when not empty, is unique among the documents of one kind and
 * parent.  Bodies returned by get and list are malloc'd: release them with
 * cnl_store_doc_done().
 */
struct cnl_store_doc {
	char kind[CNL_STORE_KIND_MAX];
	char id[CNL_STORE_DOC_ID_MAX];
	char parent[CNL_STORE_DOC_ID_MAX];
	char name[CNL_STORE_NAME_MAX];
	char *body; /* JSON text, < CNL_STORE_DOC_MAX bytes */
	int64_t updated_ms;
};

/* One audit record.  seq, prev_hash and hash are set by the store. */
struct cnl_store_audit {
	int64_t seq; /* 1, 2, 3, ... */
	int64_t ts_ms;
	char actor[CNL_STORE_AUDIT_MAX];
	char action[CNL_STORE_AUDIT_MAX];
	char target[CNL_STORE_AUDIT_MAX];
	char result[CNL_STORE_AUDIT_MAX];
	char prev_hash[CNL_STORE_SHA256_HEX];
	char hash[CNL_STORE_SHA256_HEX];
};

/*
 * The leader's lease (several cnlabd over one database): who holds it,
 * its epoch (a fencing token: each new holder gets a higher one; a
 * renewal keeps it) and when it expires, in the database server's clock.
 */
struct cnl_store_lease {
	char holder[CNL_STORE_LEASE_HOLDER_MAX];
	int64_t epoch;
	int64_t expires_ms; /* the server's clock, ms since the epoch */
	int64_t now_ms;     /* the server's clock when it was read */
};

struct cnl_store;

/*
 * The backend's method table.  The wrappers below have checked every
 * argument before a method runs: pointers are non-NULL except where the
 * wrapper documents NULL, strings fit their fields, enumerations are known
 * and limits are in range.  Methods return as the wrappers document.
 */
struct cnl_store_ops {
	const char *name; /* "sqlite" */
	void (*close)(struct cnl_store *s);
	int (*schema_version)(struct cnl_store *s);

	int (*project_create)(struct cnl_store *s,
	                      const struct cnl_store_project *in);
	int (*project_get)(struct cnl_store *s, const char *id,
	                   struct cnl_store_project *ret);
	int (*project_get_by_name)(struct cnl_store *s, const char *name,
	                           struct cnl_store_project *ret);
	int (*project_list)(struct cnl_store *s, const char *after_id,
	                    int limit, struct cnl_store_project *out,
	                    int *ret_n);

	int (*user_create)(struct cnl_store *s,
	                   const struct cnl_store_user *in);
	int (*user_get)(struct cnl_store *s, const char *id,
	                struct cnl_store_user *ret);
	int (*user_get_by_name)(struct cnl_store *s, const char *name,
	                        struct cnl_store_user *ret);

	int (*membership_set)(struct cnl_store *s,
	                      const struct cnl_store_membership *in);
	int (*membership_get_role)(struct cnl_store *s, const char *user_id,
	                           const char *project_id, char *ret_role,
	                           size_t len);
	int (*membership_list)(struct cnl_store *s, const char *user_id,
	                       const char *after_project_id, int limit,
	                       struct cnl_store_membership *out, int *ret_n);

	int (*job_create)(struct cnl_store *s, const struct cnl_store_job *in,
	                  const char *idem_key, struct cnl_store_job *ret);
	int (*job_get)(struct cnl_store *s, const char *id,
	               struct cnl_store_job *ret);
	int (*job_list)(struct cnl_store *s, const char *project_id,
	                const char *after_id, int limit,
	                struct cnl_store_job *out, int *ret_n);
	int (*job_update_state)(struct cnl_store *s, const char *id,
	                        const char *state, int exit_code,
	                        int64_t updated_ms);

	int (*server_create)(struct cnl_store *s,
	                     const struct cnl_store_server *in,
	                     const char *idem_key,
	                     struct cnl_store_server *ret);
	int (*server_get)(struct cnl_store *s, const char *id,
	                  struct cnl_store_server *ret);
	int (*server_list)(struct cnl_store *s, const char *project_id,
	                   const char *after_id, int limit,
	                   struct cnl_store_server *out, int *ret_n);

	int (*tx)(struct cnl_store *s, int op); /* 0 begin, 1 commit, 2 undo */
	int (*project_set_flags)(struct cnl_store *s, const char *id,
	                         bool on_prem_only);
	int (*user_list)(struct cnl_store *s, const char *after_id, int limit,
	                 struct cnl_store_user *out, int *ret_n);
	int (*membership_list_project)(struct cnl_store *s,
	                               const char *project_id,
	                               const char *after_user_id, int limit,
	                               struct cnl_store_membership *out,
	                               int *ret_n);
	int (*job_list_state)(struct cnl_store *s, const char *state,
	                      const char *after_id, int limit,
	                      struct cnl_store_job *out, int *ret_n);
	int (*job_update_run)(struct cnl_store *s, const char *id,
	                      const char *state, int exit_code,
	                      int64_t updated_ms, const char *run);
	int (*server_update)(struct cnl_store *s, const char *id,
	                     const char *state, const char *url,
	                     const char *run);
	int (*server_delete)(struct cnl_store *s, const char *id);
	int (*user_set_password)(struct cnl_store *s, const char *id,
	                         const char *password_hash);
	int (*membership_delete)(struct cnl_store *s, const char *user_id,
	                         const char *project_id);
	int (*project_delete)(struct cnl_store *s, const char *id);
	int (*doc_put)(struct cnl_store *s, const struct cnl_store_doc *in,
	               bool create);
	int (*doc_get)(struct cnl_store *s, const char *kind, const char *id,
	               struct cnl_store_doc *ret);
	int (*doc_get_by_name)(struct cnl_store *s, const char *kind,
	                       const char *parent, const char *name,
	                       struct cnl_store_doc *ret);
	int (*doc_list)(struct cnl_store *s, const char *kind,
	                const char *parent, const char *after_id, int limit,
	                struct cnl_store_doc *out, int *ret_n);
	int (*doc_delete)(struct cnl_store *s, const char *kind,
	                  const char *id);

	int (*audit_append)(struct cnl_store *s,
	                    const struct cnl_store_audit *in,
	                    struct cnl_store_audit *ret);
	int (*audit_list)(struct cnl_store *s, int64_t after_seq, int limit,
	                  struct cnl_store_audit *out, int *ret_n);
	int (*audit_list_target)(struct cnl_store *s, const char *target,
	                         const char *action_prefix, int64_t after_seq,
	                         int limit, struct cnl_store_audit *out,
	                         int *ret_n);
	int (*audit_verify)(struct cnl_store *s, int64_t *ret_bad_seq);
	int (*audit_latest)(struct cnl_store *s, const char *action,
	                    int (*fn)(void *ud, const char *target,
	                              const char *result),
	                    void *ud);

	/* Bulk reads for a restart (cnl_store_job_count_state(),
	 * cnl_store_job_each_state()). */
	int (*job_count_state)(struct cnl_store *s, const char *state,
	                       int64_t *ret_n);
	int (*job_each_state)(struct cnl_store *s, const char *state,
	                      int (*fn)(void *ud,
	                                const struct cnl_store_job *j),
	                      void *ud);

	/* Group commit (optional: NULL where every commit is durable). */
	int (*group_commit)(struct cnl_store *s);
	int64_t (*written)(struct cnl_store *s);
	int64_t (*seen)(struct cnl_store *s);
	int (*sync)(struct cnl_store *s, int64_t *ret_seq);
	/* Batches (optional): @op 0 begin, 1 commit, 2 flush, 3 whether
	 * one is open, 4 + a CNL_STORE_WINDOW_* state: set it
	 * (cnl_store_tx_begin_batch() and what follows it). */
	int (*batch)(struct cnl_store *s, int op);
	void (*batch_hook)(struct cnl_store *s, void (*fn)(void *arg, int r),
	                   void *arg);
	int (*lost)(struct cnl_store *s, int64_t seq);

	/* A second, read-only handle on the same database for another
	 * thread (cnl_store_open_reader()); NULL: none. */
	int (*open_reader)(struct cnl_store *s, struct cnl_store **ret);

	/* The leader's lease and fencing (NULL: one writer by
	 * construction, as SQLite's data directory lock makes it). */
	int (*lease_acquire)(struct cnl_store *s, const char *holder,
	                     int64_t ttl_ms, struct cnl_store_lease *ret);
	int (*lease_renew)(struct cnl_store *s, const char *holder,
	                   int64_t epoch, int64_t ttl_ms,
	                   struct cnl_store_lease *ret);
	int (*lease_get)(struct cnl_store *s, struct cnl_store_lease *ret);
	int (*lease_release)(struct cnl_store *s, const char *holder,
	                     int64_t epoch);
	int (*lease_wait)(struct cnl_store *s, int64_t ms);
	void (*fence)(struct cnl_store *s, int64_t epoch, int64_t hold_ms);

	/* Live statuses, mirrored by the leader (cnl_store_live_put()). */
	int (*live_put)(struct cnl_store *s, bool reset, const char *changes);
	int (*live_get)(struct cnl_store *s, const char *id, char **ret);
	/* A second writable handle, fenced as @s is (NULL: none). */
	int (*open_peer)(struct cnl_store *s, struct cnl_store **ret);
};

/* The part of every backend's handle that the wrappers use. */
struct cnl_store {
	const struct cnl_store_ops *ops;
	char errmsg[256]; /* the last backend error, "" if none */
	char path[512];   /* the database, for messages ("" if not known) */
};

/*
 * cnl_store_open - open the store that @url names, bringing its schema up
 * to date:
 *   "sqlite:///var/lib/cnlab/cnlab.db", "sqlite:relative/path.db" or a
 *     plain path: the SQLite backend (cnl_store_open_sqlite());
 *   "postgresql://user:password@host:port/db?param=value" (or
 *     "postgres://"), or a libpq key=value string starting with one of
 *     host=, hostaddr=, port=, dbname=, user=, password=, service=,
 *     sslmode=: the PostgreSQL backend (cnl_store_open_postgres()).
 * Any other scheme is -CNL_ECONFIG with @err naming it.  Returns as the
 * backend's open.
 */
int cnl_store_open(const char *url, struct cnl_store **ret, char *err,
                   size_t errlen);

/*
 * cnl_store_open_postgres - connect to the PostgreSQL database at @url (a
 * libpq URI or key=value string) and apply the migrations it lacks, in
 * one transaction under an advisory lock, so that replicas starting
 * together apply each once.  A database whose schema is newer than this
 * build is refused with -CNL_ECONFIG before anything is written.  Every
 * commit is durable when it returns; there is no group commit.  A server
 * that cannot be reached is -ENOTCONN with @err naming it (the password
 * left out); later, a lost connection makes calls fail with -ENOTCONN and
 * is made again by the next call outside a transaction.  Returns 0,
 * -CNL_ECONFIG, -ENOTCONN, -EIO or -ENOMEM.
 */
int cnl_store_open_postgres(const char *url, struct cnl_store **ret, char *err,
                            size_t errlen);

/* cnl_store_backend - "sqlite" or "postgresql". */
const char *cnl_store_backend(struct cnl_store *s);

/*
 * cnl_store_open_reader - a second handle on @s's database for readers on
 * other threads: reads never wait for the writer and see only committed
 * transactions; every write through it fails.  Close it with
 * cnl_store_close() before @s.  0, -ENOTSUP for a store no other
 * connection can open (SQLite in memory), or -EIO / -ENOTCONN / -ENOMEM.
 */
int cnl_store_open_reader(struct cnl_store *s, struct cnl_store **ret);

/*
 * cnl_store_open_sqlite - open or create the SQLite database at @path and
 * bring its schema up to date.  Sets journal_mode=WAL, synchronous=FULL,
 * foreign_keys=ON and a busy timeout, then applies each migration newer
 * than the file's schema_version, in order, one transaction each.  A file
 * whose version is newer than this build knows is refused with -CNL_ECONFIG.
 * A file that exists but is empty (0 bytes) or does not start with the
 * SQLite header is refused with -CNL_ECORRUPT and left untouched; a
 * missing file is created.
 * On failure a message is written to @err (when @errlen > 0) and *@ret is
 * untouched.  Returns 0, -CNL_ECONFIG, -CNL_ECORRUPT, -EIO or -ENOMEM.
 */
int cnl_store_open_sqlite(const char *path, struct cnl_store **ret, char *err,
                          size_t errlen);

/*
 * cnl_store_open_sqlite_reader - a second, read-only connection to the
 * database that @s (opened by cnl_store_open_sqlite()) has open, for
 * readers on other threads: in WAL mode its reads never wait for the
 * writer and see only committed transactions.  Every write through it
 * fails.  Like any handle it serves one thread at a time; close it with
 * cnl_store_close() before @s.  0, -ENOTSUP for a store no other
 * connection can open (in memory), or -EIO / -ENOMEM.
 */
int cnl_store_open_sqlite_reader(struct cnl_store *s, struct cnl_store **ret);

/* cnl_store_close - close the handle; NULL is allowed. */
void cnl_store_close(struct cnl_store *s);

/* cnl_store_schema_version - the file's schema version, or -EIO. */
int cnl_store_schema_version(struct cnl_store *s);

/*
 * cnl_store_errmsg - the backend's message for the last -EIO (for example
 * sqlite3_errmsg()), or "" when there is none.  Valid until the next call.
 */
const char *cnl_store_errmsg(struct cnl_store *s);

/*
 * cnl_store_path - the database the handle stores to (a file's path), for
 * messages such as "the storage of /var/lib/cnlab/cnlab.db is full".
 */
const char *cnl_store_path(struct cnl_store *s);

/* Projects.  create: 0, -CNL_EDUP (id or name), -CNL_EFIELD, -CNL_ESIZE. */
int cnl_store_project_create(struct cnl_store *s,
                             const struct cnl_store_project *in);
/* get, get_by_name: 0 or -CNL_ENOTFOUND; *ret untouched on failure. */
int cnl_store_project_get(struct cnl_store *s, const char *id,
                          struct cnl_store_project *ret);
int cnl_store_project_get_by_name(struct cnl_store *s, const char *name,
                                  struct cnl_store_project *ret);
/*
 * cnl_store_project_list - up to @limit (1..1000) projects in id order,
 * starting after the id @after_id (NULL: from the first); pages as
 * cnl_store_job_list().  Returns 0 with *@ret_n set, or -CNL_ESIZE.
 */
int cnl_store_project_list(struct cnl_store *s, const char *after_id, int limit,
                           struct cnl_store_project *out, int *ret_n);

/* Users, as projects. */
int cnl_store_user_create(struct cnl_store *s, const struct cnl_store_user *in);
int cnl_store_user_get(struct cnl_store *s, const char *id,
                       struct cnl_store_user *ret);
int cnl_store_user_get_by_name(struct cnl_store *s, const char *name,
                               struct cnl_store_user *ret);

/*
 * cnl_store_membership_set - give @in->user_id the role @in->role in
 * @in->project_id, replacing any role held before.  Returns 0,
 * -CNL_ENOTFOUND when the user or project does not exist, -CNL_EFIELD for an
 * unknown role.
 */
int cnl_store_membership_set(struct cnl_store *s,
                             const struct cnl_store_membership *in);

/*
 * cnl_store_membership_get_role - write the role of @user_id in
 * @project_id into @ret_role (@len >= CNL_STORE_ROLE_MAX).  Returns 0 or
 * -CNL_ENOTFOUND when the user is not a member.
 */
int cnl_store_membership_get_role(struct cnl_store *s, const char *user_id,
                                  const char *project_id, char *ret_role,
                                  size_t len);

/*
 * cnl_store_membership_list - up to @limit memberships of @user_id, ordered
 * by project id, starting after @after_project_id (NULL: from the first).
 * *@ret_n is the number written to @out; fewer than @limit means the end.
 */
int cnl_store_membership_list(struct cnl_store *s, const char *user_id,
                              const char *after_project_id, int limit,
                              struct cnl_store_membership *out, int *ret_n);

/*
 * cnl_store_job_create - store the job @in (id from cnl_id_new("job"),
 * created_ms and updated_ms as given).  With @idem_key (NULL or "": none),
 * a key already used for a job by the same user makes this return the
 * original job in *@ret and CNL_STORE_REPLAYED without storing anything;
 * the key's own created_ms is @in->created_ms;
 * otherwise the job and the key are stored in one transaction and the call
 * returns CNL_STORE_CREATED with the stored job in *@ret (@ret may be NULL).
 * Errors: -CNL_EDUP (job id, or a key used for another kind or by another
 * user), -CNL_ENOTFOUND (project or user), -CNL_EFIELD, -CNL_ESIZE.
 */
int cnl_store_job_create(struct cnl_store *s, const struct cnl_store_job *in,
                         const char *idem_key, struct cnl_store_job *ret);

/* cnl_store_job_get - 0 or -CNL_ENOTFOUND. */
int cnl_store_job_get(struct cnl_store *s, const char *id,
                      struct cnl_store_job *ret);

/*
 * cnl_store_job_list - up to @limit (1..1000) jobs of @project_id (NULL:
 * every project) in id order, i.e. creation order, starting after the id
 * @after_id (NULL: from the first).  To walk every job, pass the last id of
 * one page as @after_id of the next until a page has fewer than @limit.
 * Returns 0 with *@ret_n set, or -CNL_ESIZE for a bad @limit.
 */
int cnl_store_job_list(struct cnl_store *s, const char *project_id,
                       const char *after_id, int limit,
                       struct cnl_store_job *out, int *ret_n);

/*
 * cnl_store_job_update_state - set the state, exit code and updated_ms of
 * job @id.  Returns 0, -CNL_ENOTFOUND, or -CNL_EFIELD for an unknown state.
 */
int cnl_store_job_update_state(struct cnl_store *s, const char *id,
                               const char *state, int exit_code,
                               int64_t updated_ms);

/*
 * Servers: create is idempotent exactly as cnl_store_job_create(); a name
 * already used in the same project is -CNL_EDUP.  list pages as job_list.
 */
int cnl_store_server_create(struct cnl_store *s,
                            const struct cnl_store_server *in,
                            const char *idem_key, struct cnl_store_server *ret);
int cnl_store_server_get(struct cnl_store *s, const char *id,
                         struct cnl_store_server *ret);
int cnl_store_server_list(struct cnl_store *s, const char *project_id,
                          const char *after_id, int limit,
                          struct cnl_store_server *out, int *ret_n);

/*
 * cnl_store_audit_append - append a record with @in's ts_ms, actor,
 * action, target and result (actor and action must not be empty).  The
 * store assigns seq, links prev_hash to the last record's hash and computes
 * hash, all in one transaction; the stored record is copied to *@ret (may
 * be NULL).  Returns 0 or an error.
 */
int cnl_store_audit_append(struct cnl_store *s,
                           const struct cnl_store_audit *in,
                           struct cnl_store_audit *ret);

/*
 * cnl_store_audit_list - up to @limit records with seq > @after_seq, in seq
 * order (pass 0 for the first page).
 */
int cnl_store_audit_list(struct cnl_store *s, int64_t after_seq, int limit,
                         struct cnl_store_audit *out, int *ret_n);

/*
 * cnl_store_audit_list_target - as cnl_store_audit_list(), only the records
 * whose target is @target and whose action starts with @action_prefix
 * ("" for any): a workload's scheduling decisions ("sched.").
 */
int cnl_store_audit_list_target(struct cnl_store *s, const char *target,
                                const char *action_prefix, int64_t after_seq,
                                int limit, struct cnl_store_audit *out,
                                int *ret_n);

/*
 * cnl_store_audit_latest - for each target, the result of its latest
 * record whose action is exactly @action, handed to @fn in one read of
 * the log (what a restarted controller takes its workloads' last
 * scheduling decisions from).  @fn returns 0 to go on, or an error that
 * stops the walk and is returned.
 */
int cnl_store_audit_latest(struct cnl_store *s, const char *action,
                           int (*fn)(void *ud, const char *target,
                                     const char *result),
                           void *ud);

/*
 * cnl_store_audit_verify - recompute the whole chain.  Returns 0 when every
 * record's hash, prev_hash link and seq (1, 2, 3, ... without gaps) check
 * out.  Otherwise returns -CNL_ECORRUPT and, unlike other outputs, sets
 * *@ret_bad_seq (may be NULL) on that failure: the seq of the first record
 * that fails, or for a gap the first missing seq.  Edited and deleted
 * records are detected; removing records from the END of the log is not,
 * since what remains is a valid shorter chain.  Detecting that needs the
 * last hash anchored outside the database (a signed checkpoint), which is
 * the caller's job.
 */
int cnl_store_audit_verify(struct cnl_store *s, int64_t *ret_bad_seq);

/*
 * Transactions.  Every call above is atomic on its own.  To make several
 * one atomic unit (and one disk flush), wrap them in cnl_store_tx_begin()
 * and cnl_store_tx_commit(), or cnl_store_tx_rollback() to undo them all.
 * Transactions nest: an inner begin/commit pair only marks a savepoint.
 * A call that fails inside a transaction has undone its own changes; the
 * caller decides whether to roll back the rest.
 */
int cnl_store_tx_begin(struct cnl_store *s);
int cnl_store_tx_commit(struct cnl_store *s);
int cnl_store_tx_rollback(struct cnl_store *s);

/*
 * Group commit.  By default every commit is durable when it returns
 * (invariant 2).  cnl_store_group_commit() trades that for speed: from
 * then on a commit only writes (SQLite: appends to the WAL, with
 * synchronous=NORMAL) and counts itself, and the caller makes what was
 * written durable in batches with cnl_store_sync(), from another thread,
 * outside every lock, so that one sync covers every commit made meanwhile.
 * Whoever acknowledges a write must then first see cnl_store_sync() reach
 * the count cnl_store_written() gave after that write.  Atomicity
 * (invariant 1) is kept: after a crash each transaction is there whole or
 * not at all, and every one that was synced is there.
 *
 * cnl_store_group_commit - switch @s to group commit: 0, or -ENOTSUP for a
 * store that cannot (an in-memory database; a backend without it), which
 * then stays durable at each commit.
 *
 * cnl_store_written - how many commits @s has written since it was opened
 * (0 for a store not in group commit).  Safe from any thread.
 *
 * cnl_store_seen - how many commits a reader on another connection may
 * have seen (0 for a store not in group commit).  A commit becomes
 * visible to readers a moment before cnl_store_written() counts it; this
 * count runs ahead of it by the commit under way, if any.  A lock-free
 * reader takes it after its reads and waits for a sync to reach it.  Safe
 * from any thread.
 *
 * cnl_store_sync - make every commit written so far durable and set
 * *@ret_seq to the cnl_store_written() count it covers: 0, or a negative
 * errno when the sync failed (nothing after the last successful sync may
 * then be taken as durable).  Safe against the handle's other calls made
 * meanwhile by one other thread (it uses descriptors and a connection of
 * its own); only one thread may call it.  It also checkpoints the WAL into
 * the database when the WAL has grown, so the writer never pays for that.
 * In a test build (not CMAKE_BUILD_TYPE Release), while the file named by
 * the environment variable CNLAB_TEST_SYNC_FAULT exists, every sync fails
 * with -EIO, as a failing disk's would; and once the file named by
 * CNLAB_TEST_COMMIT_FAULT exists, the next outermost commit removes it and
 * fails with -ENOSPC (rolled back), as a full disk's would; and once the
 * file named by CNLAB_TEST_BATCH_FAULT exists, the next batch (below) is
 * lost at its commit, the file removed.  On failure *@ret_seq is the
 * count the failure covers: every commit up to it may not be taken as
 * durable.
 */
int cnl_store_group_commit(struct cnl_store *s);
int64_t cnl_store_written(struct cnl_store *s);
int64_t cnl_store_seen(struct cnl_store *s);
int cnl_store_sync(struct cnl_store *s, int64_t *ret_seq);

/*
 * Batches: under group commit, transactions that end while a sync is
 * under way can be committed together, as one transaction: one set of WAL
 * frames, one set of locks (SQLite; sqlite_db.c, "Batches").  Only
 * callers that ask for it take part; for a store without batches the
 * calls below are cnl_store_tx_begin() and cnl_store_tx_commit(), and
 * nothing is ever open.  Every call is the writer's (under the lock that
 * serialises the store's users) but cnl_store_batch_open().
 *
 * cnl_store_tx_begin_batch - begin an outermost transaction: inside the
 * open batch (1), or as cnl_store_tx_begin() with none open (0); or an
 * error.
 *
 * cnl_store_tx_commit() of a transaction that joined a batch commits the
 * batch with it.
 *
 * cnl_store_tx_commit_batch - end the outermost transaction begun so:
 * 1 when its work was left in the batch (open now: cnl_store_written()
 * already counts its commit to come, so the wait for durability is the
 * same), 0 when it was committed, with the batch it was in; or an error:
 * its own work is undone, and the whole batch's when the batch was lost
 * (the hook says so).
 *
 * cnl_store_flush - commit the open batch (the syncer calls it, through
 * its owner, when a sync ends with one open): 0, also with none open, or
 * the error it was lost to.
 *
 * cnl_store_batch_open - whether a batch is open; from any thread.
 *
 * cnl_store_batch_size - how many transactions the open batch holds (0:
 * none is open); from any thread, a hint (it may change as it returns).
 *
 * cnl_store_batch_window - whether a transaction ending now
 * (cnl_store_tx_commit_batch()) is committed at once
 * (CNL_STORE_WINDOW_SHUT: nothing would wait for it, the syncer is idle),
 * left in the batch (CNL_STORE_WINDOW_OPEN: a sync is under way, or
 * about to be, and no waiter of this transaction could be answered
 * before it ends anyway), or commits the batch with it
 * (CNL_STORE_WINDOW_CLOSING: the syncer is ready for it).  The syncer's
 * call, from its thread, without the writer's lock; SHUT at first.
 *
 * cnl_store_set_batch_hook - @fn(@arg, r) is called, on the writer's
 * thread, whenever a batch ends: r 0 when it was committed, or the error
 * it was lost to, whole (its commit failed, or SQLite rolled it back by
 * itself: a full disk).  NULL @fn removes it.  A lost batch's commit
 * count is never durable, whatever a sync covers: cnl_store_lost() names
 * it, and whoever answers a waiter of it asks.
 */
enum {
	CNL_STORE_WINDOW_SHUT,    /* transactions commit as they end */
	CNL_STORE_WINDOW_OPEN,    /* they are left in the batch */
	CNL_STORE_WINDOW_CLOSING, /* the next to end commits the batch */
};
void cnl_store_batch_window(struct cnl_store *s, int state);
int cnl_store_tx_begin_batch(struct cnl_store *s);
int cnl_store_tx_commit_batch(struct cnl_store *s);
int cnl_store_flush(struct cnl_store *s);
bool cnl_store_batch_open(struct cnl_store *s);
unsigned cnl_store_batch_size(struct cnl_store *s);
void cnl_store_set_batch_hook(struct cnl_store *s, void (*fn)(void *, int),
                              void *arg);

/*
 * cnl_store_lost - whether @seq (a cnl_store_written() count) is that of a
 * batch lost lately (the last 128): its error, else 0.  A loss takes the
 * batch's count and one more, so that only the batch's own waiters hold
 * it, and is known here before cnl_store_written() reaches it: a waiter
 * that sees its count durable asks here, and fails.  From any thread.
 */
int cnl_store_lost(struct cnl_store *s, int64_t seq);

/*
 * Leadership.  Several cnlabd processes may share one PostgreSQL
 * database; one of them, the leader, schedules.  Leadership is a lease
 * in the database ("leader"), with an epoch that grows with each new
 * holder (a fencing token).  Times are the database server's, so the
 * replicas' clocks do not matter.  SQLite has one writer by construction
 * (cnlabd locks its data directory): these return -ENOTSUP there.
 *
 * cnl_store_lease_acquire - take the lease for @holder (a name unique to
 * this process's run) for @ttl_ms when it is free, expired or already
 * @holder's (then it is renewed and keeps its epoch; otherwise the epoch
 * grows by one).  0 with the lease in *@ret, or -EBUSY with the current
 * holder's lease in *@ret.
 *
 * cnl_store_lease_renew - extend @holder's lease of @epoch by @ttl_ms from
 * now: 0, or -CNL_EFENCED when another holder took it (or it is gone);
 * *@ret (may be NULL) then holds the lease as it stands.
 *
 * cnl_store_lease_get - the lease as it stands: 0, or -CNL_ENOTFOUND when
 * nobody ever took it.
 *
 * cnl_store_lease_release - give the lease up at once (a clean stop), so
 * a standby need not wait for it to expire: 0, or -CNL_EFENCED when it was
 * no longer @holder's.
 *
 * cnl_store_lease_wait - wait up to @ms for a hint that the lease changed
 * (a new holder took it, or its holder gave it up: PostgreSQL's
 * LISTEN/NOTIFY on the handle's own connection): 1 when one came, 0 when
 * none did, -ENOTSUP where the backend has none, another negative errno
 * when the connection failed.  Only a hint (behind pgbouncer in
 * transaction mode none comes): re-read the lease either way.
 *
 * cnl_store_fence - from now on every write transaction of @s (every
 * write call, and each cnl_store_tx_begin()) first checks, in the same
 * transaction, that the lease is @epoch's and unexpired, holding it
 * there (PostgreSQL: FOR KEY SHARE) until the transaction ends; otherwise
 * the write fails with -CNL_EFENCED and stores nothing.  A new holder's
 * acquire waits for such transactions to end, so once it has the lease
 * no write of an older epoch can commit: a leader paused past its lease
 * never writes after it wakes.  So that a transaction left open by a
 * process paused in its middle cannot hold the lease's row for ever, the
 * server ends one that sits idle for @hold_ms (PostgreSQL's
 * idle_in_transaction_session_timeout, set for each fenced transaction):
 * give less than the lease.  @epoch 0 leaves @s unfenced.
 */
int cnl_store_lease_acquire(struct cnl_store *s, const char *holder,
                            int64_t ttl_ms, struct cnl_store_lease *ret);
int cnl_store_lease_renew(struct cnl_store *s, const char *holder,
                          int64_t epoch, int64_t ttl_ms,
                          struct cnl_store_lease *ret);
int cnl_store_lease_get(struct cnl_store *s, struct cnl_store_lease *ret);
int cnl_store_lease_release(struct cnl_store *s, const char *holder,
                            int64_t epoch);
int cnl_store_lease_wait(struct cnl_store *s, int64_t ms);
int cnl_store_fence(struct cnl_store *s, int64_t epoch, int64_t hold_ms);

/*
 * Live statuses (several cnlabd over one PostgreSQL): the leader's view
 * of each active workload (wire/job.h's status, a JSON object, as a GET
 * of the job shows it), mirrored in the database so that followers answer
 * reads of jobs and servers themselves.  Derived, never authoritative: a
 * new leader rebuilds it from its own memory.
 *
 * cnl_store_live_put - apply @changes, the text of a JSON object of id ->
 * status object (set) or null (remove), in one write transaction (fenced
 * like every write of a fenced handle); with @reset every row goes first
 * (a new leader's first mirror).  0, -CNL_EFIELD for @changes that are
 * not such an object, or the store's error.
 *
 * cnl_store_live_get - @id's status text (malloc'd, the caller frees) in
 * *@ret: 0 or -CNL_ENOTFOUND.
 *
 * cnl_store_open_peer - a second handle that writes to the same
 * database, fenced at @s's epoch (for another thread: the mirror's).
 * -ENOTSUP where the backend has none (SQLite: one writer).
 */
int cnl_store_live_put(struct cnl_store *s, bool reset, const char *changes);
int cnl_store_live_get(struct cnl_store *s, const char *id, char **ret);
int cnl_store_open_peer(struct cnl_store *s, struct cnl_store **ret);

/* cnl_store_project_set_flags - 0 or -CNL_ENOTFOUND. */
int cnl_store_project_set_flags(struct cnl_store *s, const char *id,
                                bool on_prem_only);

/* cnl_store_user_list - users in id order, paged as cnl_store_job_list(). */
int cnl_store_user_list(struct cnl_store *s, const char *after_id, int limit,
                        struct cnl_store_user *out, int *ret_n);

/* cnl_store_membership_list_project - members of @project_id, ordered by
 * user id, starting after @after_user_id (NULL: from the first). */
int cnl_store_membership_list_project(struct cnl_store *s,
                                      const char *project_id,
                                      const char *after_user_id, int limit,
                                      struct cnl_store_membership *out,
                                      int *ret_n);

/* cnl_store_job_list_state - jobs in @state, every project, in id order. */
int cnl_store_job_list_state(struct cnl_store *s, const char *state,
                             const char *after_id, int limit,
                             struct cnl_store_job *out, int *ret_n);

/* cnl_store_job_count_state - how many jobs are in @state. */
int cnl_store_job_count_state(struct cnl_store *s, const char *state,
                              int64_t *ret_n);

/*
 * cnl_store_job_each_state - every job in @state, every project, in id
 * order, handed to @fn in one query (what a restarted controller loads its
 * work with: paging would sort and seek again for every page).  @j is valid
 * only during the call.  @fn may write to the store; a job it moves out of
 * @state may or may not be seen again, one moved in may or may not be
 * seen.  @fn returns 0 to go on, or an error that stops the walk and is
 * returned; -ENOMEM when a row cannot be held.
 */
int cnl_store_job_each_state(struct cnl_store *s, const char *state,
                             int (*fn)(void *ud, const struct cnl_store_job *j),
                             void *ud);

/*
 * cnl_store_job_update_run - as cnl_store_job_update_state() and also
 * replace the run record with @run (a JSON object's text,
 * < CNL_STORE_RUN_MAX bytes).
 */
int cnl_store_job_update_run(struct cnl_store *s, const char *id,
                             const char *state, int exit_code,
                             int64_t updated_ms, const char *run);

/* cnl_store_server_delete - remove server @id: 0 or -CNL_ENOTFOUND. */
int cnl_store_server_delete(struct cnl_store *s, const char *id);

/* cnl_store_user_set_password - replace the password hash of user @id
 * ("" leaves the user without a password): 0 or -CNL_ENOTFOUND. */
int cnl_store_user_set_password(struct cnl_store *s, const char *id,
                                const char *password_hash);

/* cnl_store_membership_delete - remove @user_id from @project_id: 0 or
 * -CNL_ENOTFOUND when the user was not a member. */
int cnl_store_membership_delete(struct cnl_store *s, const char *user_id,
                                const char *project_id);

/*
 * cnl_store_project_delete - delete project @id and everything that is
 * only its: memberships, finished jobs with their documents (logs,
 * artifacts, inputs, checkpoints) and idempotency keys, and the documents
 * whose parent or id is the project (quotas, usage).  Audit records stay.
 * All or nothing, in one transaction.  Returns 0, -CNL_ENOTFOUND, or
 * -EBUSY while the project has a job that is not finished or a server
 * (servers hold storage: delete them first).
 */
int cnl_store_project_delete(struct cnl_store *s, const char *id);

/* cnl_store_server_update - set state, URL and run record of server @id. */
int cnl_store_server_update(struct cnl_store *s, const char *id,
                            const char *state, const char *url,
                            const char *run);

/*
 * Documents.  put stores @in (kind, id and body required; body must be
 * valid JSON), replacing a document with the same kind and id unless
 * @create, in which case an existing one is -CNL_EDUP.  A name taken by
 * another document of the same kind and parent is -CNL_EDUP.  get and
 * get_by_name return 0 or -CNL_ENOTFOUND.  list pages by id within @kind
 * (and @parent unless NULL).  delete returns 0 or -CNL_ENOTFOUND.
 */
int cnl_store_doc_put(struct cnl_store *s, const struct cnl_store_doc *in,
                      bool create);
int cnl_store_doc_get(struct cnl_store *s, const char *kind, const char *id,
                      struct cnl_store_doc *ret);
int cnl_store_doc_get_by_name(struct cnl_store *s, const char *kind,
                              const char *parent, const char *name,
                              struct cnl_store_doc *ret);
int cnl_store_doc_list(struct cnl_store *s, const char *kind,
                       const char *parent, const char *after_id, int limit,
                       struct cnl_store_doc *out, int *ret_n);
int cnl_store_doc_delete(struct cnl_store *s, const char *kind, const char *id);

/* cnl_store_doc_done - free @d's body (and set it NULL); NULL is allowed. */
void cnl_store_doc_done(struct cnl_store_doc *d);

/* cnl_store_docs_done - cnl_store_doc_done() on @n documents. */
void cnl_store_docs_done(struct cnl_store_doc *d, int n);

#endif /* CNL_STORE_H */
