/*
 * api.h - cnlabd's REST API under /v1: the route table, its handlers, and
 * the policy in front of them (authentication, RBAC, audit).
 *
 * Every request that net/http_server.c routes reaches cnl_api_serve(),
 * which, in this order:
 *   1. authenticates the caller unless the route is PUBLIC: the header
 *      "Authorization: Bearer <JWT>" must carry an HS256 token for the
 *      audience "cnlab" whose "sub" is the id of an existing user (else 401);
 *   2. authorizes: roles are read from the store on every request, so
 *      removing or changing a membership takes effect at once (else 403 or
 *      404, below);
 *   3. runs the route's handler, which parses a strict JSON body (unknown
 *      fields, wrong types and missing fields are 400s naming the field);
 *   4. appends an audit record for every request to a state-changing route,
 *      whatever its outcome: actor (user id, or "anonymous"; for login the
 *      name tried), action (the route's), target, result ("201",
 *      "200 replayed", "403 forbidden", ...).
 *
 * Roles.  A membership gives a user one role in one project: "viewer" <
 * "member" < "project-admin".  Platform administrators are the users with
 * the role "admin" in the project named CNL_API_ADMIN_PROJECT ("system"),
 * which --bootstrap-admin creates with the first admin in it.  An
 * administrator passes every check.  Anyone else needs, for a PROJECT_*
 * route, at least the route's role in the project the path names (through
 * {project}, or {job}'s project).
 *
 * Not a member vs. not allowed.  A caller with no role at all in the
 * project gets 404 not_found, exactly as if the project (or job) did not
 * exist, so project and job ids cannot be probed.  A member whose role is
 * too low gets 403 forbidden: the project's existence is no secret to them.
 * ADMIN routes answer 403 to every non-administrator.
 *
 * "admin" is granted only in the system project, and only an administrator
 * may change memberships there; project-admins manage viewer, member and
 * project-admin roles of their own projects.
 */
#ifndef CNL_SERVER_API_H
#define CNL_SERVER_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "net/http_server.h"
#include "store/store.h"
#include "wire/node.h"

/* The project whose "admin" members administer the platform. */
#define CNL_API_ADMIN_PROJECT "system"
/* The JWT audience and issuer of cnlabd's tokens. */
#define CNL_API_AUDIENCE "cnlab"
#define CNL_API_ISSUER   "cnlabd"
/* Session lifetime: 12 hours from the login, absolute (no renewal); a
 * session ends earlier at logout or when its user is disabled. */
#define CNL_API_TOKEN_TTL_S (12 * 3600)
/* Shortest JWT secret cnlabd accepts, in bytes. */
#define CNL_API_SECRET_MIN 32
/* Default page size of the list routes. */
#define CNL_API_PAGE_DEFAULT 100

struct cnl_oidc;

struct cnl_api_config {
	struct cnl_store *store; /* used under the API's lock only */
	const uint8_t *jwt_key;  /* HS256 secret, copied */
	size_t jwt_key_len;      /* >= CNL_API_SECRET_MIN */
	int scrypt_ln;           /* cost of new hashes; 0: the default */
	struct cnl_oidc *oidc;   /* NULL: no OIDC; not owned */
	/* Browser sign-in, published on GET /v1/auth/oidc for `cnlab login
	 * --web` (copied; NULL: not offered): the issuer, the client id
	 * (the ID tokens' audience) and the provider's endpoints. */
	const char *oidc_issuer, *oidc_client_id;
	const char *oidc_authorize_url, *oidc_token_url;
	const char *policy;   /* scheduling policy; NULL: "cnlab" */
	int64_t node_lost_ms; /* 0: 30 s */
	/* A rotated node credential stays valid this long; 0: 5 min. */
	int64_t node_credential_overlap_ms;
	int64_t cycle_interval_ms;  /* 0: 1 s */
	int64_t preempt_min_run_ms; /* 0: the scheduler's default (10 min) */
	int64_t preempt_grace_ms;   /* 0: the scheduler's default (5 min) */
	/* Idle nodes powered down (ctl.h); NULL command: never. */
	const char *power_command;
	int64_t power_idle_ms;
	int64_t power_spare_gpus;
	/* The cloud burst (burst.h): the machine image its instances boot
	 * (NULL: bursting off), cnlab-agent's path there, cnlabd's URL as
	 * they reach it (NULL: public_url, else the listener's), the
	 * burst's tick, idle time, boot time-out and most instances. */
	const char *burst_image;
	const char *burst_agent;
	const char *burst_url;
	int64_t burst_interval_ms;
	int64_t burst_idle_ms;
	int64_t burst_boot_ms;
	int64_t burst_max_instances;
	const char *cli_dir;    /* CLI binaries for /cli; NULL: beside us */
	const char *public_url; /* URL the installer names; NULL: Host */
	/* The notebook origin as users reach it (http(s)://host[:port],
	 * another origin than the API's); NULL: the API's scheme and Host
	 * name with the port of cnl_api_start_notebooks()'s listener. */
	const char *notebook_url;
	/* Job files (artifacts, checkpoints, inputs), streamed to disk in
	 * this folder (made 0700); NULL: the file routes answer 503. */
	const char *files_dir;
	int64_t artifacts_max_bytes; /* per job; 0: 10 GiB */
	int64_t inputs_max_bytes;    /* per job; 0: 2 GiB */
	int64_t images_max_bytes;    /* one image's archive; 0: 64 GiB */
	int64_t store_pool; /* read-only store connections at most (lock-free
	                     * GETs); more readers at once are served under
	                     * the lock; 0: 16 */
	int64_t artifacts_keep_ms; /* a job's files after its end; 0: kept
	                              until the project goes */
	/* The key that seals secrets at rest (secrets.h), 32 bytes, copied;
	 * NULL: secrets are off (their routes answer 409). */
	const uint8_t *secrets_key;
	/* A follower's API (forward.h): no controller, no scheduling, no
	 * housekeeping of the shared files_dir; it serves only the reads of
	 * cnl_api_follower_serves() from the store, and @store is its own
	 * handle (the lease's renewals have theirs). */
	bool follower;
};

/* Where and how cnl_api_start() serves. */
struct cnl_api_listen {
	const char *host;
	uint16_t port;
	const struct cnl_http_route *routes; /* normally cnl_api_routes() */
	size_t nroutes;
	const char *tls_cert_pem, *tls_key_pem; /* NULL: plain HTTP */
	bool run_loop; /* start the scheduling loop thread */
	/* HTTP limits (struct cnl_http_config); 0: its defaults. */
	unsigned conn_max, conn_per_client, retry_after_s;
	int64_t header_timeout_ms, body_timeout_ms;
	size_t body_max; /* JSON routes' bodies */
	/* Replicas: the proof a follower's forwarded connections carry
	 * (server/forward.h), which then do not count toward its address's
	 * conn_per_client; NULL: none.  Lives as long as the server. */
	const char *replica_proof;
};

struct cnl_api;

/*
 * cnl_api_new - an API over @cfg's store.  Returns 0, -EINVAL for a secret
 * shorter than CNL_API_SECRET_MIN or a bad scrypt cost, -CNL_ECONFIG for
 * a bad cli_dir or public_url (logged, see api_cli.h), -EIO.
 */
int cnl_api_new(const struct cnl_api_config *cfg, struct cnl_api **ret);

/*
 * cnl_api_agent_health - the all-in-one's supervisor says whether its
 * embedded node agent runs.  From the first call on, GET /healthz answers
 * 200 {"status":"ok","agent":"up"} while it does and 503
 * {"status":"degraded","agent":"down"} while it does not; a cnlabd that
 * never calls it (no embedded agent) answers 200 {"status":"ok"}.
 */
void cnl_api_agent_health(struct cnl_api *api, bool up);

/*
 * cnl_api_set_leader - this cnlabd leads with @leader's lease (several
 * cnlabd over one PostgreSQL; leader.h): GET /healthz then adds
 * "role":"leader" and "epoch", and /metrics cnlab_leader_epoch.  While
 * the lease is not surely its own (cnl_leader_valid() false) every
 * request but /healthz and /metrics answers 503 "not_leader" and
 * /healthz 503 "unsure".  @leader outlives the API.
 */
struct cnl_leader;
void cnl_api_set_leader(struct cnl_api *api, struct cnl_leader *leader);

/*
 * cnl_api_node_silent - whether node @name has not been heard from for
 * longer than its lease (cnl_ctl_node_silent), under the API's lock: the
 * all-in-one's supervisor asks it of its embedded agent, alive but maybe
 * stopped (SIGSTOP) or hung.
 */
bool cnl_api_node_silent(struct cnl_api *api, const char *name, int64_t now);

/* cnl_api_free - NULL is allowed. */
void cnl_api_free(struct cnl_api *api);

/* cnl_api_routes - the route table; its length in *@ret_n. */
const struct cnl_http_route *cnl_api_routes(size_t *ret_n);

/*
 * cnl_api_routes_check - cnl_http_routes_check() plus the API's own rules:
 * PUBLIC only on GET /healthz, GET /metrics, POST /v1/auth/login, POST
 * /v1/auth/redeem, GET /v1/auth/oidc (browser sign-in) and the CLI
 * installer's GET /cli, /cli/SHA256SUMS and /cli/{file}, and every
 * PROJECT_* row has a {project} or {job} segment to take the project from.
 * Returns 0 or -CNL_ECONFIG naming the row in @err.
 */
int cnl_api_routes_check(const struct cnl_http_route *routes, size_t n,
                         char *err, size_t errlen);

/*
 * cnl_api_follower_serves - whether a follower's API (cnl_api_config's
 * follower) answers @req itself rather than forwarding it to the leader:
 * a GET of the route table, not an upgrade, whose handler reads only the
 * store and the shared files_dir (the CLI installer and the web UI's
 * files, who am I, projects and their members, users, tokens, SSH keys,
 * images, secrets' names, the audit log and its verification, cloud
 * accounts and the burst policy, a job's logs and artifacts), and not
 * authenticated by an OIDC ID token (whose first use creates its user).
 * Whatever reads the controller's memory (a job's or server's live
 * status, nodes, availability, quota and usage, decisions, event streams)
 * and every write go to the leader.
 */
bool cnl_api_follower_serves(void *api, const struct cnl_http_request *req);

/* cnl_api_serve - the serve callback for struct cnl_http_config. */
void cnl_api_serve(void *api, const struct cnl_http_route *route,
                   struct cnl_http_request *req,
                   struct cnl_http_response *resp);

/* cnl_api_open_sink - the open_sink callback for struct cnl_http_config
 * (streamed uploads; see api_files.c). */
int cnl_api_open_sink(void *api, const struct cnl_http_route *route,
                      struct cnl_http_request *req,
                      struct cnl_http_response *resp,
                      struct cnl_http_sink **ret);

/*
 * cnl_api_start - check the route table with cnl_api_routes_check(),
 * start the scheduling loop when asked, and serve.  Refuses to start, with
 * -CNL_ECONFIG and the reason in @err, on any bad row.  Otherwise as
 * cnl_http_server_new().
 */
int cnl_api_start(struct cnl_api *api, const struct cnl_api_listen *l,
                  struct cnl_http_server **ret, char *err, size_t errlen);

/*
 * cnl_api_start_notebooks - serve the notebook proxy (/s/{server}/...) on
 * a listener of its own, the notebook origin: a tenant's pages run in the
 * viewer's browser, so they must not share an origin with the API and
 * the dashboard (whose cookie and CSRF token they could otherwise use).
 * That listener serves nothing but /s/ (anything else is a 404 naming
 * it), and accepts only the proxy's credentials, never the dashboard's
 * cookie; from then on the API's listener answers /s/ with a 308 to the
 * same path on the notebook origin.  @l's routes and run_loop are
 * ignored.  Call after cnl_api_start().  As cnl_http_server_new().
 */
int cnl_api_start_notebooks(struct cnl_api *api, const struct cnl_api_listen *l,
                            struct cnl_http_server **ret, char *err,
                            size_t errlen);

/* cnl_api_stop - stop the scheduling loop (before freeing the server). */
void cnl_api_stop(struct cnl_api *api);

/*
 * cnl_api_tick - run one controller pass (node liveness, metering, a
 * scheduling cycle) as of @now_ms, under the API's lock.  The loop thread
 * does this on its own; tests that start without it drive time with this.
 */
void cnl_api_tick(struct cnl_api *api, int64_t now_ms);

/*
 * cnl_api_bootstrap - on a store without projects, create the user @name
 * with @password, the project CNL_API_ADMIN_PROJECT and the membership that
 * makes the user an administrator, and audit it.  Returns 0 when done, 1
 * when the system project already exists (nothing is changed), -CNL_ECONFIG
 * when the store holds other projects, -CNL_EFIELD for a malformed name,
 * -CNL_ESIZE for a password outside its limits, or a store error.  @err
 * says why.  The steps are separate store writes: a crash midway leaves a
 * store that needs repair by hand.
 */
int cnl_api_bootstrap(struct cnl_store *s, const char *name,
                      const char *password, int scrypt_ln, char *err,
                      size_t errlen);

/*
 * cnl_api_token_issue - make an API token for @user_id named @name
 * (unique among the user's tokens), expiring at @expires_ms (0: never),
 * and store it as its SHA-256 digest.  The secret goes to @ret_token
 * (CNL_AUTH_TOKEN_MAX bytes) and is not kept; its id (the digest) to
 * @ret_id (CNL_AUTH_DIGEST_MAX).  Returns 0, -CNL_EDUP, or a store error.
 */
int cnl_api_token_issue(struct cnl_store *s, const char *user_id,
                        const char *name, int64_t expires_ms, int64_t now_ms,
                        char *ret_token, char *ret_id);

/* Room for a node credential or join token, NUL included. */
#define CNL_API_NODE_SECRET_MAX 64

/*
 * cnl_api_node_credential_issue - a new credential bound to node @node
 * (api_nodeid.c), stored as its digest; the secret to @ret_secret.  The
 * all-in-one gives its embedded agent one directly.  0 or a store error.
 */
int cnl_api_node_credential_issue(struct cnl_store *s, const char *node,
                                  int64_t now_ms,
                                  char ret_secret[CNL_API_NODE_SECRET_MAX]);

/*
 * cnl_api_node_mint - cnl_api_node_credential_issue() on a running API:
 * under its lock, in a transaction of its own that also ends node @node's
 * earlier credentials, acknowledged once durable.  For the Kubernetes
 * scheduler (kube_sched.h), which speaks the node protocol for the nodes
 * it registers.  0, -EEXIST for a node that an agent registered, or a
 * store error.
 */
struct cnl_api;

/*
 * cnl_api_cloud_open - the provider (cloud.h) of cloud account @id, its
 * credentials unsealed with the platform's secrets key, in *@ret (free
 * with cnl_cloud_free()).  0; -CNL_ENOTFOUND for no such account,
 * -ENOTSUP for a provider not built yet, -CNL_ECONFIG for an account
 * without credentials, -EACCES when they do not open with this key; @err
 * says which (never the secret).  Takes no lock of the API's: the
 * caller calls it outside a request, or holds the store.
 */
struct cnl_cloud;
int cnl_api_cloud_open(struct cnl_api *api, const char *id,
                       struct cnl_cloud **ret, char *err, size_t errlen);
/* cnl_api_cloud_account - the first cloud account of @provider with
 * credentials: its id into @id and its document into *@acct (json_t;
 * NULL: none). */
void cnl_api_cloud_account(struct cnl_api *api, const char *provider, char *id,
                           size_t idlen, json_t **acct);
/* cnl_api_cloud_offer - offer admission (cnl_ctl_cloud_offer) the
 * instance types of account @acct that the burst knows, as cluster
 * "cloud-@provider" (under the API's lock). */
void cnl_api_cloud_offer(struct cnl_api *api, const char *provider,
                         const json_t *acct);
/* cnl_api_cloud_type - instance type @name of account @acct of @provider:
 * the published table's (cloud_types.c), else the account's own "types"
 * (kept for the life of the process); NULL when neither has it. */
struct cnl_cloud_type;
const struct cnl_cloud_type *
cnl_api_cloud_type(const json_t *acct, const char *provider, const char *name);
int cnl_api_node_mint(struct cnl_api *api, const char *node,
                      char ret_secret[CNL_API_NODE_SECRET_MAX]);
/* The cluster label of the nodes the Kubernetes scheduler registers:
 * cnl_api_node_mint() refuses (-EEXIST) a node registered without it (an
 * agent's). */
#define CNL_API_KUBE_CLUSTER CNL_WIRE_KUBE_CLUSTER

/*
 * cnl_api_set_collect_verify - who checks the second half of a Kubernetes
 * run pod's collector credential ("TOKEN:POD-TOKEN", collect.c): @fn
 * answers whether POD-TOKEN is a token of the pod that runs job @job under
 * @epoch (0), or why not (-1 with @why), and may take seconds (it asks
 * the API server); it is called without the API's lock, from the
 * request's thread, and its answers are kept a while.  NULL: none (the
 * collector's route refuses everyone).  Set before the API serves, or
 * cleared before @ud goes: the call waits for a check under way.
 */
typedef int (*cnl_api_collect_verify_fn)(void *ud, const char *job,
                                         int64_t epoch, const char *pod_token,
                                         char *why, size_t whylen);
void cnl_api_set_collect_verify(struct cnl_api *api,
                                cnl_api_collect_verify_fn fn, void *ud);

/*
 * cnl_api_set_kube_exec - who runs `cnlab server exec` for a server in a
 * Kubernetes pod (a server of a node the Kubernetes scheduler minted):
 * @fn starts the command @argv (@argc words, checked by
 * cnl_wire_exec_check) in server @server's pod and answers 0 with
 * *@ret_fd, a socket from which the command's output comes in exec frames
 * (wire/node.h), its exit frame last; the API closes it, which ends the
 * command's stream.  Or -1 with @why.  Called without the API's lock, from
 * a relay's thread, and may take seconds.  NULL: none (such an exec is
 * answered with @why in its frames).  Set before the API serves, or
 * cleared before @ud goes: the call waits for an opening under way.
 */
typedef int (*cnl_api_kube_exec_fn)(void *ud, const char *server,
                                    const char *const *argv, size_t argc,
                                    int *ret_fd, char *why, size_t whylen);
void cnl_api_set_kube_exec(struct cnl_api *api, cnl_api_kube_exec_fn fn,
                           void *ud);

/*
 * cnl_api_set_kube_ssh - who opens `cnlab server ssh` for a server in a
 * Kubernetes pod: @fn starts an sshd in inetd mode in server @server's
 * pod with host key @host_key (private, OpenSSH's format) and
 * authorized_keys @keys, and answers 0 with *@ret_fd, a socket whose
 * bytes are sshd's stdin and stdout (the SSH protocol; when sshd did not
 * start, a line of text saying why instead); the API closes it, which
 * ends the session.  Or -1 with @why.  As cnl_api_set_kube_exec
 * otherwise.
 */
typedef int (*cnl_api_kube_ssh_fn)(void *ud, const char *server,
                                   const char *host_key, const char *keys,
                                   int *ret_fd, char *why, size_t whylen);
void cnl_api_set_kube_ssh(struct cnl_api *api, cnl_api_kube_ssh_fn fn,
                          void *ud);

/* cnl_api_node_forget - delete every credential and join token of node
 * @node.  0 or a store error. */
int cnl_api_node_forget(struct cnl_store *s, const char *node);

#endif /* CNL_SERVER_API_H */
