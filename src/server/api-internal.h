/*
 * api-internal.h - what the files of the REST API share: the API handle,
 * the per-request call, and the helpers every handler uses to read
 * requests and write replies.  api.c holds authorization, audit and the
 * route table; api_authn.c authentication (who the caller is); the
 * api_<resource>.c files the handlers; api_cli.c those of the CLI
 * installer; api_proxy.c the notebook proxy (/s/), its tunnels and
 * `server exec`.
 */
#ifndef CNL_SERVER_API_INTERNAL_H
#define CNL_SERVER_API_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <jansson.h>

#include "common/id.h"
#include "net/metrics.h"
#include "sched/catalog.h"
#include "server/api.h"
#include "server/api_cli.h"
#include "server/auth.h"
#include "server/burst.h"
#include "server/federate.h"
#include "server/commit.h"
#include "server/ctl.h"
#include "server/oidc.h"

/* A job's files (api_files.c): at most this many of each kind (artifacts,
 * checkpoint files, inputs), inputs named at submission, and how long an
 * upload waits for the job that uses it. */
#define CNL_API_FILES_PER_JOB 1000
/* A project's pending uploads: at most this many times inputs_max_bytes. */
#define CNL_API_UPLOADS_FACTOR 4
#define CNL_API_INPUTS_PER_JOB 256
#define CNL_API_UPLOAD_TTL_MS  (24LL * 3600 * 1000)

/* Per-route request counters for /metrics. */
/* Buckets of the job events' wait lists, by job id (api_events.c). */
#define CNL_API_EV_BUCKETS 64

struct route_stats {
	uint64_t by_class[5];       /* 1xx..5xx */
	struct cnl_hist latency[5]; /* by the same class */
};

/* A collector's credential checked (cnl_api_set_collect_verify): kept
 * CNL_API_COLLECT_KEEP_MS, so that each file's upload need not ask again. */
#define CNL_API_COLLECT_CACHE   64
#define CNL_API_COLLECT_KEEP_MS (5 * 60 * 1000)
struct cnl_api_collect_seen {
	unsigned char digest[32]; /* SHA-256 of the whole credential */
	char job[CNL_ID_MAX];
	int64_t epoch, until_ms;
};

struct cnl_api {
	/* The big lock: every request and every controller tick hold it,
	 * except while a handler waits (long poll) or hashes a password. */
	pthread_mutex_t mu;
	/* The Kubernetes scheduler's hooks (held for reading while one
	 * runs, for writing while one is set): who checks the collectors'
	 * pod tokens, and who runs an exec in a server's pod.  The
	 * credentials found good are under collect_mu, taken alone. */
	pthread_rwlock_t collect_rw;
	cnl_api_collect_verify_fn collect_verify;
	void *collect_ud;
	cnl_api_kube_exec_fn kube_exec;
	void *kube_exec_ud;
	cnl_api_kube_ssh_fn kube_ssh; /* under collect_rw too */
	void *kube_ssh_ud;
	pthread_mutex_t collect_mu;
	struct cnl_api_collect_seen collect_seen[CNL_API_COLLECT_CACHE];
	/* The nodes whose credentials the Kubernetes scheduler minted
	 * (cnl_api_node_mint): name -> true, under mu.  Their servers are
	 * pods that the proxy connects to. */
	json_t *kube_nodes;
	struct cnl_store *store;
	/* Group commit: answers wait for the syncer (commit.h); NULL when
	 * the store syncs every commit itself. */
	struct cnl_commit *commit;
	struct cnl_ctl *ctl;
	/* The cloud burst (burst.h), a leader's; NULL: not started. */
	struct cnl_burst *burst;
	struct cnl_burst_config burst_cfg;
	char *burst_strs[3]; /* image, agent, url: burst_cfg's copies */
	/* Work forwarded to peer sites (federate.h), a leader's; NULL: not
	 * started. */
	struct cnl_federate *federate;
	struct cnl_catalog cat;
	struct cnl_oidc *oidc; /* NULL: OIDC off */
	/* Browser sign-in (GET /v1/auth/oidc); NULL when not configured. */
	char *oidc_issuer, *oidc_client_id;
	char *oidc_authorize_url, *oidc_token_url;
	uint8_t *key;
	size_t keylen;
	int scrypt_ln;
	struct cnl_id_gen ids;
	/* Verified against for unknown users so they cost as much as known. */
	char dummy_hash[CNL_AUTH_HASH_MAX];
	struct route_stats *stats; /* one per row of the route table */
	size_t nstats;
	/* Guards stats, which requests served without mu (/healthz)
	 * update too; taken after mu, never before. */
	pthread_mutex_t stats_mu;
	const struct cnl_http_route *routes;
	struct cnl_api_cli *cli; /* the CLI installer's binaries (api_cli.c) */
	char *files_dir;         /* job files (api_files.c); NULL: none kept */
	int64_t artifacts_max, inputs_max; /* bytes per job */
	int64_t images_max;                /* bytes of one image's archive */
	int64_t artifacts_keep_ms;         /* 0: kept with the project */
	/* The retention sweep (api_files.c): where it goes on, when next. */
	char keep_after[3][CNL_ID_MAX];
	int64_t keep_next_ms;
	bool tls; /* served over HTTPS (the proxy's cookie is Secure) */
	/* The notebook origin (api_proxy.c): notebook_url, or NULL for the
	 * Host's name with nb_port, the notebook listener's port (0 while
	 * there is none: the API's listener then serves no /s/ at all). */
	char *notebook_url;
	atomic_uint nb_port;
	/* The all-in-one's embedded agent for /healthz: 0 none (plain
	 * cnlabd), 1 running, 2 down (cnl_api_agent_health). */
	atomic_int agent_health;
	/* The leader's lease epoch this cnlabd holds (cnl_api_set_leader());
	 * 0 with a store of one writer (SQLite). */
	_Atomic int64_t leader_epoch;
	struct cnl_leader *leader; /* set before serving; NULL: SQLite */
	bool follower; /* cnl_api_config's: no controller (ctl NULL) */
	struct cnl_mirror *mirror; /* a leader's live statuses (mirror.h) */
	/* The notebook proxy's tunnels (api_proxy.c), under mu; tun_cv
	 * wakes the agents' long polls and the proxies that wait. */
	struct cnl_api_tunnel *tunnels;
	pthread_cond_t tun_cv;
	atomic_bool proxy_stop; /* cnl_api_stop: waits and relays end */
	/* Job events (api_events.c), under mu: one wait list per job that
	 * event streams follow, chained in buckets by the id's hash; and
	 * how many times a stream's wait was woken (for /metrics). */
	struct cnl_api_ev_watch *ev_watch[CNL_API_EV_BUCKETS];
	atomic_uint_least64_t ev_wakeups;
	atomic_int ev_streams;   /* open */
	int64_t cred_overlap_ms; /* a rotated node credential lives on */
	/* Read-only connections for the routes served without mu
	 * (api.c, serve_read()): the idle ones, under readers_mu; made
	 * as more requests read at once, closed by cnl_api_free(). */
	pthread_mutex_t readers_mu;
	struct cnl_store **readers;
	size_t n_readers, cap_readers;
	size_t open_readers;    /* made and not closed, idle or in use */
	size_t max_readers;     /* store_pool */
	atomic_bool no_readers; /* the store has none (in memory): all locked */
	/* The operator's key for secrets at rest (secrets.h): without it
	 * the secret routes answer 409. */
	bool have_secrets_key;
	uint8_t secrets_key[32];
	/* The dashboard's snapshot and its streams (api_dashboard.c). */
	struct cnl_api_dash *dash;
	/* Browser sign-ins under way (api_oidc_web.c), under mu:
	 * CNL_OIDC_WEB_MAX of them, made on first use. */
	struct cnl_api_oidc_web *oidc_web;
};

/* The notebook proxy (api_proxy.c): open tunnels per user and per server,
 * and how long the agent has to open one. */
#define CNL_PROXY_PER_USER   64
#define CNL_PROXY_PER_SERVER 128
#define CNL_PROXY_OPEN_MS    10000

/*
 * The cookies cnlabd sets, each with a name of its own: the dashboard's
 * session (api_cookie.c; "__Host-" over TLS: Secure, Path=/, no Domain),
 * the browser's OIDC sign-in under way (api_oidc_web.c) and the notebook
 * proxy's (api_proxy.c, Path=/s/{server}/).  The proxy strips all of them
 * before a request reaches a tenant's server.
 */
#define CNL_API_UI_COOKIE     "cnlab_ui"
#define CNL_API_UI_COOKIE_TLS "__Host-cnlab_ui"
#define CNL_API_OIDC_COOKIE   "cnlab_oidc"
#define CNL_API_PROXY_COOKIE  "cnlab_session"
/* Browser OIDC sign-ins (api_oidc_web.c): how many may be under way, how
 * long one lasts, and the longest return_to path (NUL included). */
#define CNL_OIDC_WEB_MAX        256
#define CNL_OIDC_WEB_TTL_MS     (10 * 60 * 1000)
#define CNL_OIDC_WEB_RETURN_MAX 512

struct call {
	struct cnl_api *api;
	const struct cnl_http_route *route;
	/* The store this call reads and writes: the API's own under its
	 * lock, or a read-only connection for a route served without it
	 * (api.c, serve_read()), which then also reads the controller
	 * through its facts index (cnl_api_live_status()). */
	struct cnl_store *st;
	bool unlocked;
	bool authed;
	bool is_admin;
	bool is_agent;
	bool no_audit; /* the handler changed nothing worth a record */
	/* A submission's inputs, attached inside the request's transaction:
	 * their uploads' files go once that commit stands, the job's links
	 * if it was undone (cnl_api_job_inputs_settle(), api.c). */
	json_t *inputs_kept;
	bool undone; /* the request's commit failed: SQLite rolled it back */
	/* Node routes (api_nodeid.c): the caller's node's name, and the
	 * digest of the credential or join token it came with. */
	char node[CNL_STORE_NAME_MAX];
	char
	    collect_node[CNL_STORE_NAME_MAX]; /* a collector's: its node's id */
	/* A collector's pod token refused by cnl_api_collect_check: why. */
	char collect_why[256];
	char cred[CNL_AUTH_DIGEST_MAX];
	char join[CNL_AUTH_DIGEST_MAX];
	struct cnl_store_user user;
	bool have_project;
	struct cnl_store_project project;
	char role[CNL_STORE_ROLE_MAX]; /* in the project; "" for admins */
	bool have_job;
	struct cnl_store_job job;
	bool have_server;
	struct cnl_store_server server;
	char actor[CNL_STORE_AUDIT_MAX];
	char target[CNL_STORE_AUDIT_MAX];
	const char *note;  /* audit result suffix, e.g. "replayed" */
	char note_buf[24]; /* a note made for this call ("blocks 40") */
	const char *host;  /* the request's Host header, or NULL */
	/* Where the request's notes begin in the controller's undo
	 * journal: past those of the batch it joined (api.c). */
	size_t journal_mark;
	int64_t now_ms;
	/* An OIDC ID token verified before the API's lock was taken (the
	 * check may fetch keys): its result, for identify(). */
	bool oidc_done;
	int oidc_r;
	struct cnl_oidc_identity oidc;
	/* One of our session JWTs, its signature and claims checked before
	 * the lock too (the check needs no store): for identify(), which
	 * then looks up only what the store holds (the session, the user). */
	bool jwt_done;
	int jwt_r;
	struct cnl_auth_claims jwt;
	/* The session (jti) the bearer's JWT belongs to; "" for other
	 * credentials (api_session.c). */
	char session[CNL_AUTH_CLAIM_MAX];
	/* The digest of the API token the caller came with; "" for other
	 * credentials (api_authn.c). */
	char api_token[CNL_AUTH_DIGEST_MAX];
	/* Authenticated by the dashboard's cookie (api_cookie.c). */
	bool cookie;
	/* The request's Idempotency-Key as stored (per user) and the hash
	 * of the request (cnl_api_idem_key). */
	struct {
		char key[CNL_AUTH_DIGEST_MAX];
		char hash[CNL_AUTH_DIGEST_MAX];
		bool replay; /* the key's record is there: a retry */
	} idem;
	/* Slow work a route's prepare step did without the lock (see
	 * cnl_api_serve): a password checked or hashed. */
	struct {
		bool done;
		bool password_ok; /* login: the password matched */
		int store_err; /* login: the store could not answer (not 0) */
		char user_id[CNL_ID_MAX];     /* login: whose it was */
		int hash_r;                   /* hash: 0, or why it failed */
		char hash[CNL_AUTH_HASH_MAX]; /* hash: the new scrypt hash */
	} slow;
	/* The browser's OIDC callback, done without the lock
	 * (api_oidc_web.c): a refusal (status, message) or where to go. */
	struct {
		unsigned status;
		const char *reason; /* for the page: "state", "used", ... */
		char err[400];
		char return_to[CNL_OIDC_WEB_RETURN_MAX];
	} oidc_web;
};

/*
 * The prepare steps (cnl_api_serve runs a route's after authorizing it,
 * without the API's lock, then authorizes again and runs the handler):
 * each takes the lock itself if it must read the store, and releases it.
 */
void cnl_api_prepare_login(struct call *c, struct cnl_http_request *req);
void cnl_api_prepare_redeem(struct call *c, struct cnl_http_request *req);
void cnl_api_prepare_user_create(struct call *c, struct cnl_http_request *req);
void cnl_api_prepare_oidc_callback(struct call *c,
                                   struct cnl_http_request *req);

/* JSON of stored objects. */
json_t *cnl_api_time_json(int64_t ms);
json_t *cnl_api_project_json(const struct cnl_store_project *p);
json_t *cnl_api_user_json(const struct cnl_store_user *u);
json_t *cnl_api_job_json(struct call *c, const struct cnl_store_job *j);
json_t *cnl_api_server_json(struct call *c, const struct cnl_store_server *v);

/* Turn a store error into a response; @what names the object.  A full
 * disk (-ENOSPC, -EDQUOT) is 507 naming the database file. */
/*
 * cnl_api_live_status - the controller's live status of workload @id:
 * read under the API's lock from the controller itself, or, for a call
 * served without it, from the facts index the controller publishes
 * (ctl.h).  0, or -CNL_ENOTFOUND when it is not active.
 */
int cnl_api_live_status(struct call *c, const char *id,
                        struct cnl_wire_status *ret);

void cnl_api_store_error(struct call *c, struct cnl_http_response *resp, int r,
                         const char *what);

/* The submission stages of a new workload @id (auth, quota, queue,
 * admission) into the audit chain; api_decisions.c. */
void cnl_api_decisions_submit(struct call *c, const char *id, const char *shape,
                              const char *run, int prio, bool server);
/* quota in words: "project lab: GPU-hours 1.20 of 10.00; user ana: ..." */
void cnl_api_quota_text(struct call *c, bool servers, char *buf, size_t len);

/* A 507 insufficient_storage whose "path" names the store that could not
 * be written (the files or images directory), message formatted. */
void cnl_api_storage_full(struct cnl_http_response *resp, const char *path,
                          const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Admission: 0, or -1 and a 422 naming why no registered node could ever
 * run work of @shape with the run record @run, and the shapes that exist. */
int cnl_api_feasible(struct call *c, const char *shape, const char *run,
                     bool server, struct cnl_http_response *resp);

/* The body as a JSON object with only @allowed keys (NULL: any; the
 * caller checks them), or NULL and a 400. */
json_t *cnl_api_parse_body(struct cnl_http_request *req,
                           struct cnl_http_response *resp,
                           const char *const allowed[]);

/* The body as cnl_api_parse_body() takes it, or NULL, with no response:
 * for prepare steps, whose handler reports what is wrong. */
json_t *cnl_api_peek_body(struct cnl_http_request *req,
                          const char *const allowed[]);

/* A required string field of 1..@max-1 bytes, or NULL and a 400. */
const char *cnl_api_get_string(json_t *j, const char *key, size_t max,
                               struct cnl_http_response *resp);

/* Names of users, projects, servers, profiles: 1..63 of [A-Za-z0-9._-]. */
bool cnl_api_valid_name(const char *s);
const char *cnl_api_get_name(json_t *j, const char *key,
                             struct cnl_http_response *resp);

/* ?limit= and ?after=; 0, or -1 with a 400. */
int cnl_api_get_page(struct cnl_http_request *req,
                     struct cnl_http_response *resp, int *ret_limit,
                     const char **ret_after);

/* {"items": @items, "next": last id when the page is full, else null}. */
json_t *cnl_api_page_json(json_t *items, int n, int limit, const char *last);

int cnl_api_new_id(struct call *c, const char *prefix, char *buf);

/*
 * cnl_api_doc_page - reply with one page (?limit=, ?after=) of the
 * documents of @kind under @parent (NULL: all), each turned into an item
 * by @item from the document and its parsed body (the body is released
 * afterwards: @item takes a reference to keep it).  @what names the
 * documents in errors.
 */
void cnl_api_doc_page(struct call *c, struct cnl_http_request *req,
                      struct cnl_http_response *resp, const char *kind,
                      const char *parent, const char *what,
                      json_t *(*item)(struct call *c,
                                      const struct cnl_store_doc *d,
                                      json_t *body));

/* The Idempotency-Key header: NULL, or 1..127 printable ASCII bytes. */
int cnl_api_get_idem_key(struct cnl_http_request *req,
                         struct cnl_http_response *resp, const char **ret);

/* api_session.c: sessions, disabled users, OIDC identities, per-user
 * idempotency. */
/* Reply 200 with a new session token for @u, as a login does (a new
 * server-side session); 401 for a disabled user. */
void cnl_api_session_reply(struct call *c, const struct cnl_store_user *u,
                           struct cnl_http_response *resp);
/* 0 when @cl (a verified HS256 JWT) names a live session of its user
 * (c->session is set), else -CNL_EAUTH. */
int cnl_api_session_live(struct call *c, const struct cnl_auth_claims *cl);
/* End every session and notebook proxy cookie of @user_id (enable, a new
 * password): 0 or a store error.  Inside the caller's transaction. */
int cnl_api_sessions_end(struct cnl_store *s, const char *user_id);
/*
 * The notebook proxy's cookie (api_proxy.c) names a stored "proxy-cookie"
 * document by its jti, so logout, enable and disable can end it.
 * cnl_api_proxy_cookie_new stores one for @user_id and @server_id until
 * @expires_ms and puts its id (CNL_ID_MAX) in @ret_jti: 0 or an error.
 * cnl_api_proxy_cookie_live: 0 while the cookie's document exists, names
 * the claims' user and has not expired; -CNL_EAUTH otherwise.
 */
int cnl_api_proxy_cookie_new(struct call *c, const char *user_id,
                             const char *server_id, int64_t expires_ms,
                             char *ret_jti);
int cnl_api_proxy_cookie_live(struct call *c, const struct cnl_auth_claims *cl);
bool cnl_api_user_disabled(struct cnl_store *s, const char *user_id);
/* Add "disabled" and "oidc" (linked identities) to the user object @o. */
void cnl_api_user_state_json(struct cnl_store *s, const char *user_id,
                             json_t *o);
/* The user OIDC identity @id signs in as, made at its first sign-in: 0
 * with *@ret, or a store error. */
int cnl_api_oidc_user(struct call *c, const struct cnl_oidc_identity *id,
                      struct cnl_store_user *ret);
/*
 * cnl_api_idem_key - the request's Idempotency-Key scoped to the caller
 * (NULL when none) for the store's idempotent create of an object of
 * @kind: 0, or -1 with a 400 (malformed) or a 422 (the caller used the key
 * for another request) in @resp.  After a create that stored a new object,
 * cnl_api_idem_record() keeps the request's hash (in the same
 * transaction).
 */
int cnl_api_idem_key(struct call *c, struct cnl_http_request *req,
                     struct cnl_http_response *resp, const char *kind,
                     const char **ret);
int cnl_api_idem_record(struct call *c, const char *object_id);
void cnl_api_h_logout(void *call, struct cnl_http_request *req,
                      struct cnl_http_response *resp);
void cnl_api_h_user_disable(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);
void cnl_api_h_user_enable(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
void cnl_api_h_user_link(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp);
void cnl_api_h_user_unlink(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
void cnl_api_h_oidc_config(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
void cnl_api_h_oidc_session(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);

/*
 * cnl_api_invite_issue - a one-time invitation for @user_id, stored as
 * its digest (api_admin.c); the token to @ret_token (CNL_AUTH_TOKEN_MAX)
 * and its end to @ret_expires_ms.  0 or a store error.
 */
int cnl_api_invite_issue(struct cnl_store *s, const char *user_id,
                         int64_t now_ms, char *ret_token,
                         int64_t *ret_expires_ms);
/* {"token", "expires_at"} of an invitation. */
json_t *cnl_api_invite_json(const char *token, int64_t expires_ms);

/* Default profiles created at bootstrap (api_work.c). */
int cnl_api_seed_profiles(struct cnl_store *s, int64_t now_ms);

/* api_util.c */
/* Rank of a project role: viewer 1, member 2, project-admin (and admin)
 * 3, anything else 0. */
int cnl_api_role_rank(const char *role);
void cnl_api_bad(struct cnl_http_response *resp, const char *err);
int cnl_api_doc_json(struct cnl_store *s, const char *kind, const char *id,
                     json_t **ret);
/* Whether @s is 1..@max printable ASCII characters, no spaces (a key, a
 * token). */
bool cnl_api_printable(const char *s, size_t max);
/* An audit record (and an info log line) of a thread of cnlabd's own,
 * @actor ("burst", "federation"), with the lock held. */
void cnl_api_audit_as(struct cnl_api *api, const char *actor,
                      const char *action, const char *target, int64_t now,
                      const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
int cnl_api_doc_save(struct call *c, const char *kind, const char *id,
                     const char *parent, const char *name, json_t *o,
                     bool create);
int cnl_api_created_here(struct call *c, struct cnl_http_response *resp, int r,
                         const char *id, const char *project);

/* api_images.c */
/* An image name as users type it, normalised (":latest" added) into
 * @out; false when it is not one.  "host" is the built-in image. */
bool cnl_api_image_name(const char *in, char *out, size_t len);
/* @image (a field of a submission) names an image there is: 0 with the
 * normalised name in @norm, or -1 with a 400 naming those there are. */
int cnl_api_image_check(struct call *c, const char *image, char *norm,
                        size_t len, struct cnl_http_response *resp);
int cnl_api_open_import(struct call *c, struct cnl_http_request *req,
                        struct cnl_http_response *resp,
                        struct cnl_http_sink **ret);
void cnl_api_images_start(struct cnl_api *api);
void cnl_api_h_image_import(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);
void cnl_api_h_images_list(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
void cnl_api_h_image_delete(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);
void cnl_api_h_node_blob_get(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp);
/* api_files.c: the controller's upkeep hook: a job's files are deleted
 * artifacts_keep after its end (a bounded round at a time).  Under the
 * lock. */
void cnl_api_files_upkeep(void *ud, int64_t now_ms);
/* api_files.c: 32 random hex digits; a tree removed, following no link. */
int cnl_api_random_name(char *buf, size_t len);
void cnl_api_remove_tree_at(int parent, const char *name);

/* api_auth.c */
void cnl_api_h_login(void *call, struct cnl_http_request *req,
                     struct cnl_http_response *resp);
void cnl_api_h_whoami(void *call, struct cnl_http_request *req,
                      struct cnl_http_response *resp);
void cnl_api_h_tokens_create(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp);
void cnl_api_h_tokens_list(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
void cnl_api_h_token_revoke(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);
void cnl_api_h_auth_redeem(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);

/* api_users.c */
void cnl_api_h_users_create(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);
void cnl_api_h_users_list(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);
int cnl_api_path_user(struct call *c, struct cnl_http_request *req,
                      struct cnl_http_response *resp,
                      struct cnl_store_user *ret);
void cnl_api_h_user_get(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp);
void cnl_api_h_user_invite(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);

/* api_projects.c */
void cnl_api_h_projects_list(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp);
void cnl_api_h_projects_create(void *call, struct cnl_http_request *req,
                               struct cnl_http_response *resp);
void cnl_api_h_members_set(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
void cnl_api_h_project_get(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
void cnl_api_h_project_patch(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp);
void cnl_api_h_members_list(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);
void cnl_api_h_project_delete(void *call, struct cnl_http_request *req,
                              struct cnl_http_response *resp);
void cnl_api_h_member_remove(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp);

/* api_quota.c */
int cnl_api_quota_admit(struct call *c, bool servers,
                        struct cnl_http_response *resp);
void cnl_api_h_quota_show(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);
void cnl_api_h_project_quota_set(void *call, struct cnl_http_request *req,
                                 struct cnl_http_response *resp);
void cnl_api_h_user_quota_set(void *call, struct cnl_http_request *req,
                              struct cnl_http_response *resp);
void cnl_api_h_project_usage(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp);
void cnl_api_quota_metrics(struct call *c, struct cnl_metrics_buf *b);

/* api_profiles.c */
int cnl_api_profile_shape(struct call *c, const char *name, char *shape,
                          size_t len, json_t **ret_doc);
void cnl_api_h_profiles_list(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp);
void cnl_api_h_profiles_put(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);
void cnl_api_h_profile_delete(void *call, struct cnl_http_request *req,
                              struct cnl_http_response *resp);

/* api_jobs.c */
int cnl_api_job_gang(const struct cnl_store_job *j, char *ret_id, int *ret_rank,
                     int *ret_size);
void cnl_api_h_jobs_create(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
void cnl_api_h_jobs_list(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp);
void cnl_api_h_job_get(void *call, struct cnl_http_request *req,
                       struct cnl_http_response *resp);
void cnl_api_h_job_cancel(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);
/* api_resize.c: PATCH {"blocks": N}, an in-flight resize. */
void cnl_api_h_job_patch(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp);
void cnl_api_h_server_patch(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);
void cnl_api_h_job_decisions(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp);
void cnl_api_h_job_logs(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp);

/* api_events.c: GET /v1/jobs/{job}/events (Server-Sent Events), and
 * what wakes its streams (each called with the lock held): a job's state,
 * run record or output changed (note; changed is the controller's hook),
 * a controller tick ended (tick: pending estimates move). */
void cnl_api_h_job_events(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);
void cnl_api_events_note(struct cnl_api *api, const char *job_id);
void cnl_api_events_changed(void *ud, const char *id);
void cnl_api_events_tick(struct cnl_api *api);
/* Wake every stream so that it sees proxy_stop (lock held). */
void cnl_api_events_stop(struct cnl_api *api);
/* The event streams' figures for /metrics (atomics: no lock needed). */
void cnl_api_events_metrics(struct cnl_api *api, struct cnl_metrics_buf *b);

/* api_files.c */
/* Whether @route's body is streamed to a file (uploads). */
bool cnl_api_route_streams(const struct cnl_http_route *route);
/* Open the sink of a streamed route for the authorized call @c; 0, or -1
 * with the error in @resp.  Under the API's lock. */
int cnl_api_open_upload(struct call *c, struct cnl_http_request *req,
                        struct cnl_http_response *resp,
                        struct cnl_http_sink **ret);
void cnl_api_uploads_expire(struct call *c, const char *project);
/* Remove the files of a project the store has deleted. */
void cnl_api_files_forget_project(struct cnl_api *api, const char *project);
int cnl_api_job_inputs_check(struct call *c, json_t *body,
                             struct cnl_http_response *resp, json_t **ret);
int cnl_api_job_inputs_attach(struct call *c, const char *job, json_t *inputs);
void cnl_api_job_inputs_done(struct call *c, json_t *inputs, bool committed);
/* The request that attached @c->inputs_kept has ended: @kept, its commit
 * stands (the uploads' files go), or it was undone (the job's links go,
 * the uploads stay for a retry). */
void cnl_api_job_inputs_settle(struct call *c, bool kept);
void cnl_api_h_job_artifacts(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp);
void cnl_api_h_job_artifact_get(void *call, struct cnl_http_request *req,
                                struct cnl_http_response *resp);
void cnl_api_h_upload_put(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);
void cnl_api_h_node_artifact_put(void *call, struct cnl_http_request *req,
                                 struct cnl_http_response *resp);
/* PUT /v1/jobs/{job}/collect?epoch=E&path=P: an artifact from the
 * collector of the job's Kubernetes run pod, as a node's. */
void cnl_api_h_job_collect_put(void *call, struct cnl_http_request *req,
                               struct cnl_http_response *resp);
/* A collector's call: its credential (Authorization: Bearer
 * cnlc_...:POD-TOKEN) is the token of the path's {job} under ?epoch=,
 * which the job holds now, and a token of the pod that runs it, found so
 * by cnl_api_collect_check (its answer kept a while); the call then acts
 * as the job's node (c->node, c->collect_node the node's id).  0, or -1
 * with 401/409. */
int cnl_api_collect_authorize(struct call *c, struct cnl_http_request *req,
                              struct cnl_http_response *resp);
/* Before cnl_api_collect_authorize, without the API's lock: has the pod
 * token of a collector's credential checked (cnl_api_set_collect_verify),
 * unless a check found it good a short while ago; a refusal's reason into
 * c->collect_why. */
void cnl_api_collect_check(struct call *c, struct cnl_http_request *req);
void cnl_api_h_node_checkpoint_put(void *call, struct cnl_http_request *req,
                                   struct cnl_http_response *resp);
void cnl_api_h_node_checkpoint_get(void *call, struct cnl_http_request *req,
                                   struct cnl_http_response *resp);
void cnl_api_h_node_checkpoint_file(void *call, struct cnl_http_request *req,
                                    struct cnl_http_response *resp);
/* The job of a node's request (?job=&epoch=, fenced); NULL with the error
 * in @resp. */
const char *cnl_api_node_job(struct call *c, struct cnl_http_request *req,
                             struct cnl_http_response *resp);
/* The list of the inputs of job @owner, and one of them (?path=). */
void cnl_api_node_inputs_list(struct call *c, struct cnl_http_response *resp,
                              const char *owner);
void cnl_api_node_input_send(struct call *c, struct cnl_http_request *req,
                             struct cnl_http_response *resp, const char *owner);

/* api_servers.c */
void cnl_api_h_servers_create(void *call, struct cnl_http_request *req,
                              struct cnl_http_response *resp);
void cnl_api_h_servers_list(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);
void cnl_api_h_server_get(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);
void cnl_api_h_server_stop(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
void cnl_api_h_server_delete(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp);
void cnl_api_h_server_start(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);

/* api_nodes.c */
void cnl_api_h_nodes_list(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);
void cnl_api_h_nodes_register(void *call, struct cnl_http_request *req,
                              struct cnl_http_response *resp);
void cnl_api_h_node_update(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
void cnl_api_h_node_heartbeat(void *call, struct cnl_http_request *req,
                              struct cnl_http_response *resp);
void cnl_api_h_node_assignments(void *call, struct cnl_http_request *req,
                                struct cnl_http_response *resp);
void cnl_api_h_node_reports(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);
void cnl_api_h_node_gpu_kill(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp);
void cnl_api_h_node_logs(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp);
void cnl_api_h_node_inputs_get(void *call, struct cnl_http_request *req,
                               struct cnl_http_response *resp);
void cnl_api_h_node_input_file(void *call, struct cnl_http_request *req,
                               struct cnl_http_response *resp);
void cnl_api_h_node_get(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp);
void cnl_api_h_join_token(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);

/* api_nodeid.c: node identity (join tokens, node credentials). */
#define CNL_API_JOIN_PREFIX "cnlj_"
#define CNL_API_NODE_PREFIX "cnln_"
#define CNL_API_JOIN_MAX_MS (72LL * 3600 * 1000)
/* A node route's caller: its node credential (or, on POST /v1/nodes, a
 * join token), and the path's {node} its own.  0, or -1 with 401/403. */
int cnl_api_node_authorize(struct call *c, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
/* The registered @name is the caller's node: 0, or -1 with a 403. */
int cnl_api_node_register_check(struct call *c, const char *name,
                                struct cnl_http_response *resp);
/* A registration by join token succeeded: the token dies, the node's
 * earlier credentials too, and its new one goes to @ret.  0 or an error. */
int cnl_api_node_joined(struct call *c, char ret[CNL_API_NODE_SECRET_MAX]);
/* cnl_api_join_token_make - a join token for node @node, living @ttl_ms,
 * saved (its digest) and put in @token.  0, or a store error. */
int cnl_api_join_token_make(struct cnl_store *s, const char *node, int64_t now,
                            int64_t ttl_ms,
                            char token[CNL_API_NODE_SECRET_MAX]);
void cnl_api_h_node_credential(void *call, struct cnl_http_request *req,
                               struct cnl_http_response *resp);
void cnl_api_h_node_revoke(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);

/* api_audit.c */
void cnl_api_h_audit_list(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);
void cnl_api_h_audit_verify(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);

/* api_secrets.c */
/* A secret's name: 1..CNL_SECRET_NAME_MAX-1 of [A-Za-z0-9._-], the first a
 * letter or digit (a file name under /run/secrets). */
#define CNL_SECRET_NAME_MAX 64
bool cnl_api_secret_name_ok(const char *s);
/* The document parent and id of secret @name of a user or project. */
void cnl_api_secret_place(bool project, const char *owner, const char *name,
                          char *parent, size_t plen, char *id, size_t idlen);
void cnl_api_h_secrets_list(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);
void cnl_api_h_secret_set(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);
void cnl_api_h_secret_delete(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp);
void cnl_api_h_project_secrets_list(void *call, struct cnl_http_request *req,
                                    struct cnl_http_response *resp);
void cnl_api_h_project_secret_set(void *call, struct cnl_http_request *req,
                                  struct cnl_http_response *resp);
void cnl_api_h_project_secret_delete(void *call, struct cnl_http_request *req,
                                     struct cnl_http_response *resp);
/*
 * cnl_api_secrets_take - the submission's "secrets" (a list of {"name",
 * "scope", "env"}), each found among the caller's own secrets, then the
 * project's (or in the scope named): 0 with the references to store in
 * *@ret (NULL when none were asked for), or -1 with a 4xx in @resp.
 */
int cnl_api_secrets_take(struct call *c, json_t *body, json_t **ret,
                         struct cnl_http_response *resp);
/* Store @refs (from cnl_api_secrets_take) for @workload; in the caller's
 * transaction.  0, or a store error. */
int cnl_api_secrets_attach(struct call *c, const char *workload, json_t *refs);
void cnl_api_h_node_secrets(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);
/* Whether server @server_id holds secrets of its owner's own (user
 * scope): then it is its owner's alone (the proxy, exec and its URL's
 * token), since whoever opens it can read them. */
bool cnl_api_server_private(struct cnl_store *st, const char *server_id);

/* api_ssh.c: SSH keys and host keys (issue 24) */
#define CNL_SSH_KEYS_MAX 32 /* per user */
void cnl_api_h_ssh_keys_list(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp);
void cnl_api_h_ssh_key_add(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
void cnl_api_h_ssh_key_remove(void *call, struct cnl_http_request *req,
                              struct cnl_http_response *resp);
/* GET /v1/servers/{server}/ssh: the entry's facts (host alias, user, the
 * pinned host key), the host key made on first use. */
void cnl_api_h_server_ssh_info(void *call, struct cnl_http_request *req,
                               struct cnl_http_response *resp);
/* What a session of c->server's sshd gets: its host key (private, OpenSSH
 * format) and the owner's authorized_keys text, both malloc'd (zero and
 * free the key), and the keys' fingerprints (for cnl_api_ssh_keys_live).
 * 0, or -1 with a 4xx/5xx in @resp (no keys, ssh off). */
int cnl_api_ssh_material(struct call *c, struct cnl_http_response *resp,
                         char **host_priv, char **authorized,
                         json_t **fingerprints);
/* Whether @user_id still has every key of @fingerprints. */
bool cnl_api_ssh_keys_live(struct cnl_store *st, const char *user_id,
                           const json_t *fingerprints);
/* Delete server @server_id's host key (the server is being deleted). */
void cnl_api_ssh_forget(struct cnl_store *st, const char *server_id);

/* api_clusters.c */
void cnl_api_h_clusters_list(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp);
void cnl_api_h_cluster_get(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
void cnl_api_h_cluster_policy_put(void *call, struct cnl_http_request *req,
                                  struct cnl_http_response *resp);

/* api_cloud.c */
void cnl_api_h_burst_get(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp);
void cnl_api_h_burst_put(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp);
void cnl_api_h_cloud_list(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);
void cnl_api_h_cloud_instances(void *call, struct cnl_http_request *req,
                               struct cnl_http_response *resp);
void cnl_api_h_cloud_add(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp);
void cnl_api_h_cloud_delete(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);

/* api_clusters.c */
/* A request's "cluster": a name of a cluster this control plane knows;
 * 0, or -1 with a 400 naming the field in @resp. */
int cnl_api_cluster_name(struct call *c, const char *name,
                         struct cnl_http_response *resp);

/* api_peers.c */
void cnl_api_h_peer_grant(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);
void cnl_api_h_peer_grants(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
void cnl_api_h_peer_revoke(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
void cnl_api_h_peer_add(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp);
void cnl_api_h_peers_list(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);
void cnl_api_h_peer_remove(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);

/* api_ops.c */
void cnl_api_h_healthz(void *call, struct cnl_http_request *req,
                       struct cnl_http_response *resp);
void cnl_api_h_metrics(void *call, struct cnl_http_request *req,
                       struct cnl_http_response *resp);

/* api_proxy.c */
void cnl_api_h_node_tunnels(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp);
void cnl_api_h_node_tunnel_open(void *call, struct cnl_http_request *req,
                                struct cnl_http_response *resp);
void cnl_api_h_server_exec(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
/* POST /v1/servers/{server}/ssh, "Upgrade: cnlab-ssh": the owner's byte
 * stream to an sshd in the server's container. */
void cnl_api_h_server_ssh(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);
/* Set the pass callbacks of a server config: the proxy's for the notebook
 * listener (@notebooks), else the API listener's, which serves no /s/
 * content (a 308 to the notebook origin, or a 404 naming it). */
void cnl_api_proxy_config(struct cnl_api *api, struct cnl_http_config *cfg,
                          bool notebooks);
/* The notebook origin's base URL for a request with the Host header @host
 * (notebook_url, else the API's scheme, @host's name and nb_port) into
 * @buf (CNL_API_CLI_URL_MAX bytes): 0, or -CNL_EFIELD (no notebook
 * listener, or no usable Host). */
int cnl_api_notebook_base(struct cnl_api *api, const char *host, char *buf);

/* api_authn.c */
/* Who the bearer token names, and their system role: 0, or -1 with a
 * 401 (or 500) in @resp.  Under the lock. */
int cnl_api_authenticate(struct call *c, struct cnl_http_request *req,
                         struct cnl_http_response *resp);
/* c->user's system role into c->is_admin, c->is_agent. */
int cnl_api_authenticate_role(struct call *c, struct cnl_http_response *resp);
/* Verify an OIDC ID token of the request before the lock is taken. */
void cnl_api_oidc_check(struct call *c, struct cnl_http_request *req);
/*
 * The credential a long-lived answer (an event stream) was opened with,
 * kept to ask again later: cnl_api_grant_of() takes it from an
 * authenticated call; cnl_api_grant_live() (api->mu held) loads @c (api,
 * st, now_ms set by the caller) with the user and role as a new request
 * would and returns 0 when the user still exists, is not disabled, holds
 * the same system role (administrator or not), and the session (logout)
 * or API token (revoke, expiry) is still live; else -CNL_EAUTH (or a store
 * error).  Project membership is the caller's to check.
 */
struct cnl_api_grant {
	char user_id[CNL_ID_MAX];
	char session[CNL_AUTH_CLAIM_MAX];
	char api_token[CNL_AUTH_DIGEST_MAX];
	bool admin;
};
void cnl_api_grant_of(const struct call *c, struct cnl_api_grant *g);
int cnl_api_grant_live(struct call *c, const struct cnl_api_grant *g);

/*
 * api_dashboard.c: the dashboard's snapshot, built once per change and
 * shared by every viewer.  cnl_api_dash_bump: what it shows may have
 * changed (@auth: and who may see what: logout, disable, membership),
 * from any thread, api->mu held or not.  cnl_api_dash_changed: the
 * controller wrote workload @id's state (api->mu held).  cnl_api_dash_tick:
 * the controller's tick (api->mu held).
 */
void cnl_api_dash_new(struct cnl_api *api);
void cnl_api_dash_free(struct cnl_api *api);
void cnl_api_dash_bump(struct cnl_api *api, bool auth);
/* How many authentication-relevant changes were answered so far (the
 * count cnl_api_dash_bump(api, true) moves; 0 without a dashboard).  Takes
 * no lock: callable with api->mu held. */
uint64_t cnl_api_dash_auth_gen(struct cnl_api *api);
void cnl_api_dash_changed(struct cnl_api *api, const char *id);
void cnl_api_dash_tick(struct cnl_api *api, int64_t now_ms);
void cnl_api_dash_stop(struct cnl_api *api);
void cnl_api_dash_metrics(struct cnl_api *api, struct cnl_metrics_buf *b);
void cnl_api_h_dashboard(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp);
void cnl_api_h_dashboard_events(void *call, struct cnl_http_request *req,
                                struct cnl_http_response *resp);

/*
 * api_cookie.c: the dashboard's session cookie.  cnl_api_cookie_token: the
 * cookie's value into @buf (@len bytes): 0, or -1 when the request has
 * none (or one too long).  cnl_api_cookie_check: a cookie-authenticated
 * request's CSRF token and Origin: 0, or -1 with a 403 in @resp.
 */
int cnl_api_cookie_token(struct call *c, struct cnl_http_request *req,
                         char *buf, size_t len);
/* api_csrf.c: the value of the request's one cookie @name into @buf: 0,
 * or -1 when there is none, an empty or too long one, or two (a cookie
 * planted by another port of this host beside ours). */
int cnl_api_cookie_value(struct cnl_http_request *req, const char *name,
                         char *buf, size_t len);
/* api_cookie.c: the Set-Cookie line ("...\r\n") that makes session
 * @token (claims @cl) the browser's: 0, or -1 when @len is too small. */
int cnl_api_cookie_header(struct call *c, const char *token,
                          const struct cnl_auth_claims *cl, char *hdr,
                          size_t len);
/* api_csrf.c: whether @origin (an Origin header) is this request's own
 * origin (the listener's scheme :// the Host header). */
bool cnl_api_same_origin(struct call *c, struct cnl_http_request *req,
                         const char *origin);
/* api_csrf.c: the CSRF token of session @jti into @out (65 bytes). */
void cnl_api_csrf_of(struct cnl_api *api, const char *jti, char *out);
int cnl_api_cookie_check(struct call *c, struct cnl_http_request *req,
                         struct cnl_http_response *resp);
void cnl_api_h_auth_cookie(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp);
void cnl_api_h_auth_csrf(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp);
/* api_oidc_web.c: the dashboard's single sign-on (the code flow run by
 * cnlabd); cnl_api_oidc_web_free: forget the sign-ins under way. */
void cnl_api_h_oidc_start(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp);
void cnl_api_h_oidc_callback(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp);
void cnl_api_oidc_web_free(struct cnl_api *api);

/* api_ui.c: the dashboard's embedded pages; cnl_api_ui_route: whether
 * @h is one of their handlers (served without the lock). */
void cnl_api_h_ui_root(void *call, struct cnl_http_request *req,
                       struct cnl_http_response *resp);
void cnl_api_h_ui_index(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp);
void cnl_api_h_ui_file(void *call, struct cnl_http_request *req,
                       struct cnl_http_response *resp);
bool cnl_api_ui_route(void (*h)(void *, struct cnl_http_request *,
                                struct cnl_http_response *));

/* api.c */
void cnl_api_audit(struct call *c, struct cnl_http_request *req,
                   const struct cnl_http_response *resp);

#endif /* CNL_SERVER_API_INTERNAL_H */
