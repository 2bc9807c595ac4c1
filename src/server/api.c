/*
 * api.c - cnlabd's REST API: the route table (every row names its
 * permission and its handler), the policy in front of every handler
 * (authentication, RBAC, audit, per-route statistics) and the API's life
 * (new, start, stop, free, bootstrap).  The handlers live in one file per
 * resource (api_<resource>.c); what they share is in api_util.c.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/json.h"
#include "common/label.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "net/error.h"
#include "sched/sched.h"
#include "server/api-internal.h"
#include "server/forward.h"
#include "server/mirror.h"
#include "server/trace.h"
#include "server/api.h"
#include "server/leader.h"
#include "server/auth.h"
#include "server/oidc.h"
#include "server/shape.h"

static int perm_rank(enum cnl_http_perm p)
{
	switch (p) {
	case CNL_PERM_PROJECT_VIEW:
		return 1;
	case CNL_PERM_PROJECT_MEMBER:
		return 2;
	case CNL_PERM_PROJECT_ADMIN:
		return 3;
	default:
		return 0;
	}
}

/*
 * Resolve the project the path names and check the caller's role in it.
 * Returns 0, or -1 with 403/404 in @resp.
 */
static int authorize_project(struct call *c, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	const char *pid = cnl_http_param(req, "project");
	const char *jid = cnl_http_param(req, "job");
	const char *sid = cnl_http_param(req, "server");
	const char *what = pid ? "project" : jid ? "job" : "server";
	char role[CNL_STORE_ROLE_MAX];
	int r;

	if (jid) {
		r = cnl_store_job_get(c->st, jid, &c->job);
		if (r < 0)
			goto fail;
		c->have_job = true;
		pid = c->job.project_id;
	}
	if (sid) {
		r = cnl_store_server_get(c->st, sid, &c->server);
		if (r < 0)
			goto fail;
		c->have_server = true;
		pid = c->server.project_id;
	}
	if (!pid) {
		cnl_http_error(resp, 500, "internal", "route names no project");
		return -1;
	}
	r = cnl_store_project_get(c->st, pid, &c->project);
	if (r < 0)
		goto fail;
	c->have_project = true;
	if (c->is_admin)
		return 0;
	r = cnl_store_membership_get_role(c->st, c->user.id, c->project.id,
	                                  role, sizeof(role));
	if (r < 0)
		goto fail; /* not a member: as if it did not exist */
	snprintf(c->role, sizeof(c->role), "%s", role);
	if (cnl_api_role_rank(role) < perm_rank(c->route->perm)) {
		cnl_http_error(
		    resp, 403, "forbidden",
		    "role \"%s\" in this project does not allow this", role);
		return -1;
	}
	return 0;
fail:
	if (r == -CNL_ENOTFOUND || r == -CNL_EFIELD || r == -CNL_ESIZE)
		cnl_http_error(resp, 404, "not_found", "%s not found", what);
	else
		cnl_api_store_error(c, resp, r, what);
	return -1;
}

static int authorize(struct call *c, struct cnl_http_request *req,
                     struct cnl_http_response *resp)
{
	switch (c->route->perm) {
	case CNL_PERM_PUBLIC:
		return 0;
	case CNL_PERM_AUTHENTICATED:
		return cnl_api_authenticate(c, req, resp);
	case CNL_PERM_ADMIN:
		if (cnl_api_authenticate(c, req, resp) < 0)
			return -1;
		if (!c->is_admin) {
			cnl_http_error(resp, 403, "forbidden",
			               "only administrators may do this");
			return -1;
		}
		return 0;
	case CNL_PERM_AGENT:
		/* A node's own credential, for its own node only. */
		return cnl_api_node_authorize(c, req, resp);
	case CNL_PERM_COLLECT:
		/* A collector's token, for its job's epoch only. */
		return cnl_api_collect_authorize(c, req, resp);
	case CNL_PERM_PROJECT_VIEW:
	case CNL_PERM_PROJECT_MEMBER:
	case CNL_PERM_PROJECT_ADMIN:
		if (cnl_api_authenticate(c, req, resp) < 0)
			return -1;
		return authorize_project(c, req, resp);
	default:
		/* cnl_api_start() refuses such tables; never serve one. */
		cnl_http_error(resp, 500, "internal",
		               "route has no permission");
		return -1;
	}
}

/* Short names for the permissions, for the table's sake. */
#define PV   CNL_PERM_PROJECT_VIEW
#define PM   CNL_PERM_PROJECT_MEMBER
#define PA   CNL_PERM_PROJECT_ADMIN
#define ADM  CNL_PERM_ADMIN
#define AGT  CNL_PERM_AGENT
#define AUTH CNL_PERM_AUTHENTICATED

/* The whole API: one row per route; docs/api/openapi.yaml lists the same. */
static const struct cnl_http_route routes[] = {
    {"GET", "/healthz", CNL_PERM_PUBLIC, NULL, cnl_api_h_healthz},
    {"GET", "/metrics", CNL_PERM_PUBLIC, NULL, cnl_api_h_metrics},
    {"GET", "/cli", CNL_PERM_PUBLIC, NULL, cnl_api_h_cli_script},
    {"GET", "/cli/SHA256SUMS", CNL_PERM_PUBLIC, NULL, cnl_api_h_cli_sums},
    {"GET", "/cli/{file}", CNL_PERM_PUBLIC, NULL, cnl_api_h_cli_file},
    {"GET", "/", CNL_PERM_PUBLIC, NULL, cnl_api_h_ui_root},
    {"GET", "/ui", CNL_PERM_PUBLIC, NULL, cnl_api_h_ui_root},
    {"GET", "/ui/", CNL_PERM_PUBLIC, NULL, cnl_api_h_ui_index},
    {"GET", "/ui/{file}", CNL_PERM_PUBLIC, NULL, cnl_api_h_ui_file},
    {"POST", "/v1/auth/login", CNL_PERM_PUBLIC, "auth.login", cnl_api_h_login},
    {"POST", "/v1/auth/redeem", CNL_PERM_PUBLIC, "auth.redeem",
     cnl_api_h_auth_redeem},
    {"GET", "/v1/auth/oidc", CNL_PERM_PUBLIC, NULL, cnl_api_h_oidc_config},
    {"GET", "/v1/auth/oidc/start", CNL_PERM_PUBLIC, NULL, cnl_api_h_oidc_start},
    {"GET", "/v1/auth/oidc/callback", CNL_PERM_PUBLIC, "auth.oidc",
     cnl_api_h_oidc_callback},
    {"POST", "/v1/auth/session", AUTH, "auth.session", cnl_api_h_oidc_session},
    {"POST", "/v1/auth/logout", AUTH, "auth.logout", cnl_api_h_logout},
    {"POST", "/v1/auth/cookie", CNL_PERM_PUBLIC, "auth.cookie",
     cnl_api_h_auth_cookie},
    {"GET", "/v1/auth/csrf", AUTH, NULL, cnl_api_h_auth_csrf},
    {"GET", "/v1/auth/whoami", AUTH, NULL, cnl_api_h_whoami},
    {"GET", "/v1/dashboard", AUTH, NULL, cnl_api_h_dashboard},
    {"GET", "/v1/dashboard/events", AUTH, NULL, cnl_api_h_dashboard_events},
    {"POST", "/v1/auth/tokens", AUTH, "token.create", cnl_api_h_tokens_create},
    {"GET", "/v1/auth/tokens", AUTH, NULL, cnl_api_h_tokens_list},
    {"DELETE", "/v1/auth/tokens/{token}", AUTH, "token.revoke",
     cnl_api_h_token_revoke},
    {"GET", "/v1/users", ADM, NULL, cnl_api_h_users_list},
    {"POST", "/v1/users", ADM, "user.create", cnl_api_h_users_create},
    {"GET", "/v1/users/{user}", ADM, NULL, cnl_api_h_user_get},
    {"POST", "/v1/users/{user}/invite", ADM, "user.invite",
     cnl_api_h_user_invite},
    {"PUT", "/v1/users/{user}/quota", ADM, "quota.set",
     cnl_api_h_user_quota_set},
    {"POST", "/v1/users/{user}/disable", ADM, "user.disable",
     cnl_api_h_user_disable},
    {"POST", "/v1/users/{user}/enable", ADM, "user.enable",
     cnl_api_h_user_enable},
    {"POST", "/v1/users/{user}/oidc", ADM, "user.link", cnl_api_h_user_link},
    {"DELETE", "/v1/users/{user}/oidc", ADM, "user.unlink",
     cnl_api_h_user_unlink},
    {"GET", "/v1/projects", AUTH, NULL, cnl_api_h_projects_list},
    {"POST", "/v1/projects", ADM, "project.create", cnl_api_h_projects_create},
    {"GET", "/v1/projects/{project}", PV, NULL, cnl_api_h_project_get},
    {"PATCH", "/v1/projects/{project}", PA, "project.update",
     cnl_api_h_project_patch},
    {"DELETE", "/v1/projects/{project}", ADM, "project.delete",
     cnl_api_h_project_delete},
    {"GET", "/v1/projects/{project}/members", PV, NULL, cnl_api_h_members_list},
    {"POST", "/v1/projects/{project}/members", PA, "membership.set",
     cnl_api_h_members_set},
    {"DELETE", "/v1/projects/{project}/members/{user}", PA, "membership.remove",
     cnl_api_h_member_remove},
    {"PUT", "/v1/projects/{project}/quota", ADM, "quota.set",
     cnl_api_h_project_quota_set},
    {"GET", "/v1/projects/{project}/usage", PV, NULL, cnl_api_h_project_usage},
    {"GET", "/v1/quota", AUTH, NULL, cnl_api_h_quota_show},
    {"POST", "/v1/projects/{project}/jobs", PM, "job.create",
     cnl_api_h_jobs_create},
    {"GET", "/v1/projects/{project}/jobs", PV, NULL, cnl_api_h_jobs_list},
    {"GET", "/v1/jobs/{job}", PV, NULL, cnl_api_h_job_get},
    {"PATCH", "/v1/jobs/{job}", PM, "job.resize", cnl_api_h_job_patch},
    {"POST", "/v1/jobs/{job}/cancel", PM, "job.cancel", cnl_api_h_job_cancel},
    {"GET", "/v1/jobs/{job}/logs", PV, NULL, cnl_api_h_job_logs},
    {"GET", "/v1/jobs/{job}/events", PV, NULL, cnl_api_h_job_events},
    {"GET", "/v1/jobs/{job}/decisions", PV, NULL, cnl_api_h_job_decisions},
    {"GET", "/v1/jobs/{job}/artifacts", PV, NULL, cnl_api_h_job_artifacts},
    {"GET", "/v1/jobs/{job}/artifact", PV, NULL, cnl_api_h_job_artifact_get},
    {"PUT", "/v1/projects/{project}/uploads", PM, "upload.create",
     cnl_api_h_upload_put},
    {"POST", "/v1/projects/{project}/servers", PM, "server.create",
     cnl_api_h_servers_create},
    {"GET", "/v1/projects/{project}/servers", PV, NULL, cnl_api_h_servers_list},
    {"GET", "/v1/servers/{server}", PV, NULL, cnl_api_h_server_get},
    {"PATCH", "/v1/servers/{server}", PM, "server.resize",
     cnl_api_h_server_patch},
    {"GET", "/v1/servers/{server}/decisions", PV, NULL,
     cnl_api_h_job_decisions},
    {"POST", "/v1/servers/{server}/stop", PM, "server.stop",
     cnl_api_h_server_stop},
    {"POST", "/v1/servers/{server}/start", PM, "server.start",
     cnl_api_h_server_start},
    {"DELETE", "/v1/servers/{server}", PM, "server.delete",
     cnl_api_h_server_delete},
    {"GET", "/v1/images", AUTH, NULL, cnl_api_h_images_list},
    {"PUT", "/v1/images", ADM, "image.import", cnl_api_h_image_import},
    {"DELETE", "/v1/images", ADM, "image.delete", cnl_api_h_image_delete},
    {"POST", "/v1/servers/{server}/exec", PM, "server.exec",
     cnl_api_h_server_exec},
    {"GET", "/v1/servers/{server}/ssh", PM, NULL, cnl_api_h_server_ssh_info},
    {"POST", "/v1/servers/{server}/ssh", PM, "server.ssh",
     cnl_api_h_server_ssh},
    {"GET", "/v1/ssh-keys", AUTH, NULL, cnl_api_h_ssh_keys_list},
    {"POST", "/v1/ssh-keys", AUTH, "ssh_key.add", cnl_api_h_ssh_key_add},
    {"DELETE", "/v1/ssh-keys/{key}", AUTH, "ssh_key.remove",
     cnl_api_h_ssh_key_remove},
    {"GET", "/v1/profiles", AUTH, NULL, cnl_api_h_profiles_list},
    {"POST", "/v1/profiles", ADM, "profile.put", cnl_api_h_profiles_put},
    {"DELETE", "/v1/profiles/{profile}", ADM, "profile.delete",
     cnl_api_h_profile_delete},
    {"GET", "/v1/nodes", ADM, NULL, cnl_api_h_nodes_list},
    {"POST", "/v1/nodes", AGT, "node.register", cnl_api_h_nodes_register},
    {"POST", "/v1/nodes/join-tokens", ADM, "node.join_token",
     cnl_api_h_join_token},
    {"GET", "/v1/nodes/{node}", ADM, NULL, cnl_api_h_node_get},
    {"PATCH", "/v1/nodes/{node}", ADM, "node.update", cnl_api_h_node_update},
    {"POST", "/v1/nodes/{node}/heartbeat", AGT, "node.heartbeat",
     cnl_api_h_node_heartbeat},
    {"GET", "/v1/nodes/{node}/assignments", AGT, NULL,
     cnl_api_h_node_assignments},
    {"POST", "/v1/nodes/{node}/reports", AGT, "node.report",
     cnl_api_h_node_reports},
    {"POST", "/v1/nodes/{node}/logs", AGT, "node.logs", cnl_api_h_node_logs},
    {"POST", "/v1/nodes/{node}/gpu-kills", AGT, "node.gpu_kill",
     cnl_api_h_node_gpu_kill},
    {"PUT", "/v1/nodes/{node}/artifacts", AGT, "node.artifact",
     cnl_api_h_node_artifact_put},
    {"PUT", "/v1/jobs/{job}/collect", CNL_PERM_COLLECT, "job.collect",
     cnl_api_h_job_collect_put},
    {"PUT", "/v1/nodes/{node}/checkpoints", AGT, "node.checkpoint",
     cnl_api_h_node_checkpoint_put},
    {"GET", "/v1/nodes/{node}/checkpoints", AGT, NULL,
     cnl_api_h_node_checkpoint_get},
    {"GET", "/v1/nodes/{node}/checkpoints/file", AGT, NULL,
     cnl_api_h_node_checkpoint_file},
    {"GET", "/v1/nodes/{node}/inputs", AGT, NULL, cnl_api_h_node_inputs_get},
    {"POST", "/v1/nodes/{node}/secrets", AGT, "secret.use",
     cnl_api_h_node_secrets},
    {"GET", "/v1/nodes/{node}/blobs/{digest}", AGT, NULL,
     cnl_api_h_node_blob_get},
    {"GET", "/v1/nodes/{node}/inputs/file", AGT, NULL,
     cnl_api_h_node_input_file},
    {"GET", "/v1/nodes/{node}/tunnels", AGT, NULL, cnl_api_h_node_tunnels},
    {"POST", "/v1/nodes/{node}/tunnels/{tunnel}", AGT, "node.tunnel",
     cnl_api_h_node_tunnel_open},
    {"POST", "/v1/nodes/{node}/credential", AGT, "node.credential",
     cnl_api_h_node_credential},
    {"POST", "/v1/nodes/{node}/revoke", ADM, "node.revoke",
     cnl_api_h_node_revoke},
    {"GET", "/v1/audit", ADM, NULL, cnl_api_h_audit_list},
    {"GET", "/v1/audit/verify", ADM, NULL, cnl_api_h_audit_verify},
    {"GET", "/v1/clusters", AUTH, NULL, cnl_api_h_clusters_list},
    {"GET", "/v1/clusters/{cluster}", AUTH, NULL, cnl_api_h_cluster_get},
    {"PATCH", "/v1/clusters/{cluster}/policy", ADM, "cluster.policy",
     cnl_api_h_cluster_policy_put},
    {"GET", "/v1/policy/burst", ADM, NULL, cnl_api_h_burst_get},
    {"PUT", "/v1/policy/burst", ADM, "policy.burst", cnl_api_h_burst_put},
    {"GET", "/v1/secrets", AUTH, NULL, cnl_api_h_secrets_list},
    {"PUT", "/v1/secrets/{secret}", AUTH, "secret.set", cnl_api_h_secret_set},
    {"DELETE", "/v1/secrets/{secret}", AUTH, "secret.delete",
     cnl_api_h_secret_delete},
    {"GET", "/v1/projects/{project}/secrets", PV, NULL,
     cnl_api_h_project_secrets_list},
    {"PUT", "/v1/projects/{project}/secrets/{secret}", PA, "secret.set",
     cnl_api_h_project_secret_set},
    {"DELETE", "/v1/projects/{project}/secrets/{secret}", PA, "secret.delete",
     cnl_api_h_project_secret_delete},
    {"GET", "/v1/cloud/accounts", ADM, NULL, cnl_api_h_cloud_list},
    {"GET", "/v1/cloud/instances", ADM, NULL, cnl_api_h_cloud_instances},
    {"POST", "/v1/cloud/accounts", ADM, "cloud.add", cnl_api_h_cloud_add},
    {"DELETE", "/v1/cloud/accounts/{account}", ADM, "cloud.delete",
     cnl_api_h_cloud_delete},
    {"GET", "/v1/peers", ADM, NULL, cnl_api_h_peers_list},
    {"POST", "/v1/peers", ADM, "peer.add", cnl_api_h_peer_add},
    {"DELETE", "/v1/peers/{peer}", ADM, "peer.remove", cnl_api_h_peer_remove},
    {"GET", "/v1/peers/grants", ADM, NULL, cnl_api_h_peer_grants},
    {"POST", "/v1/peers/grants", ADM, "peer.grant", cnl_api_h_peer_grant},
    {"DELETE", "/v1/peers/grants/{peer}", ADM, "peer.revoke",
     cnl_api_h_peer_revoke},
};

#undef PV
#undef PM
#undef PA
#undef ADM
#undef AGT
#undef AUTH

const struct cnl_http_route *cnl_api_routes(size_t *ret_n)
{
	*ret_n = CNL_ARRAY_SIZE(routes);
	return routes;
}

/* The only routes that may be PUBLIC: what a caller needs before it has a
 * token (health, metrics, login, browser sign-in's settings, and the CLI
 * installer). */
static const char *const public_routes[][2] = {
    {"GET", "/healthz"},
    {"GET", "/metrics"},
    {"POST", "/v1/auth/login"},
    {"POST", "/v1/auth/redeem"},
    {"GET", "/v1/auth/oidc"},
    {"GET", "/v1/auth/oidc/start"},
    {"GET", "/v1/auth/oidc/callback"},
    {"GET", "/cli"},
    {"POST", "/v1/auth/cookie"},
    {"GET", "/"},
    {"GET", "/ui"},
    {"GET", "/ui/"},
    {"GET", "/ui/{file}"},
    {"GET", "/cli/SHA256SUMS"},
    {"GET", "/cli/{file}"},
};

int cnl_api_routes_check(const struct cnl_http_route *t, size_t n, char *err,
                         size_t errlen)
{
	int r = cnl_http_routes_check(t, n, err, errlen);

	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		bool public_ok = false;
		bool names_project = strstr(t[i].pattern, "{project}") ||
		                     strstr(t[i].pattern, "{job}") ||
		                     strstr(t[i].pattern, "{server}");

		for (size_t k = 0; k < CNL_ARRAY_SIZE(public_routes); k++)
			public_ok |=
			    strcmp(t[i].method, public_routes[k][0]) == 0 &&
			    strcmp(t[i].pattern, public_routes[k][1]) == 0;
		if (t[i].perm == CNL_PERM_PUBLIC && !public_ok) {
			snprintf(err, errlen,
			         "route %zu (%s %s): PUBLIC is reserved for "
			         "/healthz, /metrics, /v1/auth/login, "
			         "/v1/auth/cookie, /v1/auth/redeem, "
			         "/v1/auth/oidc, /cli and the dashboard's "
			         "pages (/, /ui/)",
			         i, t[i].method, t[i].pattern);
			return -CNL_ECONFIG;
		}
		if (perm_rank(t[i].perm) > 0 && !names_project) {
			snprintf(err, errlen,
			         "route %zu (%s %s): %s needs a {project}, "
			         "{job} or {server} segment",
			         i, t[i].method, t[i].pattern,
			         cnl_http_perm_name(t[i].perm));
			return -CNL_ECONFIG;
		}
	}
	return 0;
}

void cnl_api_audit(struct call *c, struct cnl_http_request *req,
                   const struct cnl_http_response *resp)
{
	struct cnl_store_audit a = {0};
	const char *code;
	char q[CNL_LOG_QUOTE_MAX];
	int r;

	a.ts_ms = c->now_ms;
	snprintf(a.actor, sizeof(a.actor), "%s",
	         c->actor[0] ? c->actor : "anonymous");
	snprintf(a.action, sizeof(a.action), "%s", c->route->action);
	snprintf(a.target, sizeof(a.target), "%s",
	         c->target[0] ? c->target : req->path);
	cnl_http_error_read(resp->body, &code, NULL);
	if (code)
		snprintf(a.result, sizeof(a.result), "%u %s", resp->status,
		         code);
	else if (c->note)
		snprintf(a.result, sizeof(a.result), "%u %s", resp->status,
		         c->note);
	else
		snprintf(a.result, sizeof(a.result), "%u", resp->status);
	if ((r = cnl_store_audit_append(c->api->store, &a, NULL)) < 0)
		cnl_log(CNL_LOG_ERROR, "audit append failed",
		        "action=%s err=%s db=%s", c->route->action,
		        cnl_errname(r),
		        cnl_log_quote(q, sizeof(q),
		                      cnl_store_errmsg(c->api->store)));
}

/*
 * Group commit, the request's side.  A state-changing request runs in one
 * transaction, begun before its handler and committed after its audit
 * record, so that the two are stored together or not at all (a refused
 * request commits its audit record alone).  Exec and ssh are the
 * exceptions: their handlers let the lock go while they wait for the
 * node's tunnel, and a transaction left open meanwhile would take in
 * other requests' writes (and their transactions would nest in it: a
 * cnlabd serving 16 ssh sessions at once aborted so).
 */
static bool one_transaction(const struct cnl_http_route *route)
{
	return route->action && route->handler != cnl_api_h_server_exec &&
	       route->handler != cnl_api_h_server_ssh;
}

/* An answer waits until what it wrote or could have read is durable;
 * only the public reads that touch no record (health, metrics, the CLI
 * installer) do not. */
static bool waits_durable(const struct cnl_http_route *route)
{
	return route->action || route->perm != CNL_PERM_PUBLIC;
}

/*
 * The routes whose transactions may be committed together (store.h,
 * "Batches"): submissions, the hot path, whose changes in memory (a
 * pending workload, the owner's counters) the journal undoes exactly
 * should their batch be lost.
 */
static bool batches(const struct cnl_http_route *route)
{
	return route->handler == cnl_api_h_jobs_create;
}

/*
 * Begin the request's transaction and the controller's undo journal
 * beside it: 0, or the error of the begin (then neither is open).  A
 * route that batches joins the open batch, if any: its journal is the
 * batch's, from where the request begins (c->journal_mark).
 */
static int begin_request(struct call *c)
{
	struct cnl_api *api = c->api;
	int r = batches(c->route) ? cnl_store_tx_begin_batch(api->store)
	                          : cnl_store_tx_begin(api->store);

	c->journal_mark = 0;
	if (r == 1) {
		c->journal_mark = cnl_ctl_journal_mark(api->ctl);
		return 0;
	}
	if (r == 0)
		cnl_ctl_journal_begin(api->ctl);
	return r;
}

/*
 * Commit the request's transaction; should that fail, SQLite has rolled
 * it back, so what the handler changed in the controller's memory is
 * undone too (cnl_ctl_journal_end()): memory follows the store, and a
 * job the client is told failed is never scheduled.  An answer that said
 * yes then says what went wrong instead (a refusal stands).
 */
static void commit_request(struct call *c, struct cnl_http_response *resp)
{
	char q[CNL_LOG_QUOTE_MAX];
	int r = batches(c->route) ? cnl_store_tx_commit_batch(c->api->store)
	                          : cnl_store_tx_commit(c->api->store);

	/* 1: left in the batch, whose end (the store's hook) ends the
	 * journal.  0: committed, with any batch it was in. */
	if (r == 1)
		return;
	if (r == 0) {
		cnl_ctl_journal_end(c->api->ctl, false);
		return;
	}
	c->undone = true;
	/* Its own changes undone; the batch's too if it was lost (the hook
	 * did, and ended the journal); a batch that goes on keeps it. */
	cnl_ctl_journal_undo_to(c->api->ctl, c->journal_mark);
	if (!cnl_store_batch_open(c->api->store))
		cnl_ctl_journal_end(c->api->ctl, false);
	cnl_log(CNL_LOG_ERROR, "request commit failed",
	        "action=%s status=%u err=%s db=%s", c->route->action,
	        resp->status, cnl_errname(r),
	        cnl_log_quote(q, sizeof(q), cnl_store_errmsg(c->api->store)));
	if (resp->status < 400)
		cnl_api_store_error(c, resp, r, "request");
}

/* Drop whatever @resp was going to send (a file, a stream, an upgrade,
 * extra headers) and make it a 503: its data is not durable (@r, the
 * wait's error); a 507 naming the database when the store lost it to a
 * full disk (a batch whose commit failed: store.h, "Batches"). */
static void answer_not_durable(struct cnl_api *api,
                               const struct cnl_http_route *route,
                               struct cnl_http_response *resp, int r)
{
	if (resp->upgraded && resp->upgrade_free)
		resp->upgrade_free(resp->upgrade_arg);
	resp->upgraded = NULL;
	resp->upgrade_free = NULL;
	if (resp->stream_read && resp->stream_free)
		resp->stream_free(resp->stream_arg);
	resp->stream_read = NULL;
	resp->stream_free = NULL;
	if (resp->send_file)
		close(resp->file_fd);
	resp->send_file = false;
	free(resp->text);
	resp->text = NULL;
	resp->text_len = 0;
	free(resp->headers);
	resp->headers = NULL;
	resp->no_defaults = false;
	resp->content_type = NULL;
	resp->allow[0] = '\0';
	if (r == -ENOSPC || r == -EDQUOT) {
		struct call c = {.api = api, .st = api->store, .route = route};

		cnl_api_store_error(&c, resp, r, "request");
		return;
	}
	cnl_http_error(resp, 503, "unavailable",
	               "the state store could not make the change durable "
	               "(its disk failed to sync); it was not acknowledged: "
	               "retry (with the same Idempotency-Key) later");
}

/* Wait, without the lock, for the commits up to @seq to be durable. */
static void wait_durable(struct cnl_api *api, int64_t seq,
                         const struct cnl_http_route *route,
                         struct cnl_http_response *resp)
{
	int r = cnl_commit_wait(api->commit, seq);

	if (r < 0)
		answer_not_durable(api, route, resp, r);
}

static void observe(struct cnl_api *api, size_t ri, unsigned status,
                    const struct timespec *t0);
static bool bearer_is_oidc(struct cnl_api *api,
                           const struct cnl_http_request *req);

/* An answer waiting, without a thread, for its commits to be durable
 * (req->may_wait: the HTTP server's event threads). */
struct durable_later {
	struct cnl_api *api;
	int64_t seq;
	size_t ri; /* the route's row, for observe() */
	struct timespec t0;
};

static int later_wait(void *arg, void *waiter)
{
	struct durable_later *l = arg;

	return cnl_commit_when(l->api->commit, l->seq, cnl_http_wake, waiter);
}

static void later_done(void *arg, int r, struct cnl_http_response *resp)
{
	struct durable_later *l = arg;

	if (r < 0)
		answer_not_durable(l->api, &l->api->routes[l->ri], resp, r);
	observe(l->api, l->ri, resp->status, &l->t0);
	free(l);
}

/*
 * What a request does last: wait for the commits up to @seq to be
 * durable, then count its latency (from @t0) on route row @ri.  On an
 * event thread, the server holds the answer and no thread waits.
 */
static void answer_durable(struct cnl_api *api, int64_t seq, size_t ri,
                           const struct timespec *t0,
                           struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct durable_later *l;

	if (!req->may_wait || !api->commit) {
		wait_durable(api, seq, &api->routes[ri], resp);
		observe(api, ri, resp->status, t0);
		return;
	}
	l = cnl_xmalloc(sizeof(*l));
	*l = (struct durable_later){api, seq, ri, *t0};
	resp->wait = later_wait;
	resp->waited = later_done;
	resp->wait_arg = l;
}

/*
 * The API listener's event mode (net/http_server.h), off for now: an
 * attack on it found that a client that half-closes after its request
 * can lose its answer under load (the answer is left to the access
 * handler's call after the resume, and libmicrohttpd ends the request
 * first), that an upload's refusal (open_sink) takes the lock and waits
 * for a sync on an event thread, and that a large job list holds an
 * event thread for tens of ms.  Until those are fixed the listener keeps
 * a thread per connection.  The first is libmicrohttpd 0.9.75's: a
 * resumed connection is read before its answer is looked at (its
 * event-loop state is not updated while suspended), so a FIN already
 * there closes it; queueing the answer before the resume would not
 * change that, by its code (docs/benchmarks.md, stop 54).
 */
#define CNL_API_EVENT_MODE 0

/*
 * The routes served on the HTTP server's event threads (quick in
 * cnl_http_config): hot, and none blocks but on the API's lock; their
 * answer waits for durability without a thread (answer_durable()).  An
 * OIDC bearer may fetch the issuer's keys: such calls go to a worker.
 */
static bool quick(void *ud, const struct cnl_http_route *route,
                  const struct cnl_http_request *req)
{
	void (*h)(void *, struct cnl_http_request *,
	          struct cnl_http_response *) = route->handler;

	if (h == cnl_api_h_healthz)
		return true;
	return (h == cnl_api_h_jobs_create || h == cnl_api_h_job_get ||
	        h == cnl_api_h_jobs_list || h == cnl_api_h_job_cancel ||
	        h == cnl_api_h_whoami) &&
	       !bearer_is_oidc(ud, req);
}

/* The routes with slow work to do before their handler (password hashing
 * and checks), and the step that does it without the lock. */
static void (*prepare_of(const struct cnl_http_route *route))(
    struct call *, struct cnl_http_request *)
{
	if (route->handler == cnl_api_h_login ||
	    route->handler == cnl_api_h_auth_cookie)
		return cnl_api_prepare_login;
	if (route->handler == cnl_api_h_auth_redeem)
		return cnl_api_prepare_redeem;
	if (route->handler == cnl_api_h_oidc_callback)
		return cnl_api_prepare_oidc_callback;
	if (route->handler == cnl_api_h_users_create)
		return cnl_api_prepare_user_create;
	return NULL;
}

/* A change to who may see what on the dashboard (its open streams check
 * their caller again). */
static bool changes_access(const struct cnl_http_route *route)
{
	static const char *const prefixes[] = {"auth.logout",    "user.",
	                                       "membership.",    "token.revoke",
	                                       "project.delete", "peer.revoke"};

	for (size_t i = 0; i < CNL_ARRAY_SIZE(prefixes); i++)
		if (strncmp(route->action, prefixes[i], strlen(prefixes[i])) ==
		    0)
			return true;
	return false;
}

/* Count a request of route @ri answered with @status, begun at @t0. */
static void observe(struct cnl_api *api, size_t ri, unsigned status,
                    const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (!api->stats || ri >= api->nstats)
		return;
	pthread_mutex_lock(&api->stats_mu);
	{
		struct route_stats *st = &api->stats[ri];
		unsigned cls = status / 100;

		cls = cls >= 1 && cls <= 5 ? cls - 1 : 4;
		st->by_class[cls]++;
		cnl_hist_observe(&st->latency[cls],
		                 (double)(t1.tv_sec - t0->tv_sec) +
		                     (double)(t1.tv_nsec - t0->tv_nsec) / 1e9);
	}
	pthread_mutex_unlock(&api->stats_mu);
}

/*
 * Routes answered without the API's lock: they read nothing it guards.
 * /healthz reads only the agent's health (an atomic), so that a load
 * balancer or a script sees a live server as live while a scheduling
 * cycle or a burst of submissions holds the lock.
 */
static bool lock_free(const struct cnl_http_route *route)
{
	return route->handler == cnl_api_h_healthz ||
	       cnl_api_ui_route(route->handler);
}

/* Serve a lock_free() route: no caller to authorize, nothing to audit. */
static void serve_unlocked(struct cnl_api *api,
                           const struct cnl_http_route *route,
                           struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call c = {0};
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	c.api = api;
	c.route = route;
	c.now_ms = cnl_time_now_ms();
	route->handler(&c, req, resp);
	if (resp->status == 0)
		cnl_http_error(resp, 500, "internal", "no response");
	observe(api, (size_t)(route - api->routes), resp->status, &t0);
}

/*
 * A state-changing route without a slow step begins its transaction
 * before the caller is authorized: the reads of authorization (session,
 * user, system role, project, membership) then run inside it, not each in
 * a read transaction of its own (SQLite takes and releases its file locks
 * for each: four fcntl() calls per read, a dozen per submission).  What
 * authorization writes (an OIDC user's first sign-in) is stored with the
 * request, as it was in autocommit.  (cnl_api_serve(): "early".)
 */

/*
 * Routes served without the API's lock (serve_read()): reads whose
 * handlers touch only the call's store (c->st, then a read-only
 * connection: SQLite WAL readers never wait for the writer and see only
 * committed transactions) and the controller's facts index
 * (cnl_api_live_status()).  Authentication and authorization run as on
 * the locked path, on the same connection, so a session revoked, a user
 * disabled or a member removed, once its answer was sent (committed and
 * durable), is refused here too.  The routes that read much of the
 * controller (nodes, availability, usage and quota, decisions, events'
 * streams), the agents' and the rest stay under the lock.
 */
static bool read_only(const struct cnl_http_route *route)
{
	void (*h)(void *, struct cnl_http_request *,
	          struct cnl_http_response *) = route->handler;

	if (route->action || strcmp(route->method, "GET") != 0)
		return false;
	return h == cnl_api_h_job_get || h == cnl_api_h_jobs_list ||
	       h == cnl_api_h_job_logs || h == cnl_api_h_server_get ||
	       h == cnl_api_h_servers_list || h == cnl_api_h_project_get ||
	       h == cnl_api_h_projects_list || h == cnl_api_h_whoami ||
	       h == cnl_api_h_dashboard || h == cnl_api_h_dashboard_events;
}

/* What a follower answers itself (api.h, cnl_api_follower_serves()):
 * reads of the store and the shared files_dir only. */
static bool follower_local(const struct cnl_http_route *route)
{
	void (*h)(void *, struct cnl_http_request *,
	          struct cnl_http_response *) = route->handler;

	if (route->action || strcmp(route->method, "GET") != 0)
		return false;
	return cnl_api_ui_route(h) || h == cnl_api_h_cli_script ||
	       h == cnl_api_h_cli_sums || h == cnl_api_h_cli_file ||
	       h == cnl_api_h_whoami || h == cnl_api_h_tokens_list ||
	       h == cnl_api_h_users_list || h == cnl_api_h_user_get ||
	       h == cnl_api_h_projects_list || h == cnl_api_h_project_get ||
	       h == cnl_api_h_members_list || h == cnl_api_h_images_list ||
	       h == cnl_api_h_ssh_keys_list || h == cnl_api_h_secrets_list ||
	       h == cnl_api_h_project_secrets_list ||
	       h == cnl_api_h_audit_list || h == cnl_api_h_audit_verify ||
	       h == cnl_api_h_burst_get || h == cnl_api_h_cloud_list ||
	       h == cnl_api_h_cloud_instances || h == cnl_api_h_job_logs ||
	       h == cnl_api_h_job_artifacts ||
	       h == cnl_api_h_job_artifact_get ||
	       /* with the leader's live statuses (mirror.h); not servers,
	        * whose URL names the leader's notebook origin */
	       h == cnl_api_h_job_get || h == cnl_api_h_jobs_list;
}

bool cnl_api_follower_serves(void *ud, const struct cnl_http_request *req)
{
	struct cnl_api *api = ud;
	struct cnl_http_request tmp = *req; /* the match fills params */
	const struct cnl_http_route *route;
	char allow[CNL_HTTP_ALLOW_MAX];

	if (!api || !api->follower || strcmp(req->method, "GET") != 0 ||
	    cnl_http_header(&tmp, "Upgrade") ||
	    cnl_http_route_match(routes, CNL_ARRAY_SIZE(routes), req->method,
	                         req->path, &tmp, &route,
	                         allow) != CNL_HTTP_MATCH_OK)
		return false;
	return follower_local(route) && !bearer_is_oidc(api, &tmp);
}

static void reader_uncount(struct cnl_api *api)
{
	pthread_mutex_lock(&api->readers_mu);
	api->open_readers--;
	pthread_mutex_unlock(&api->readers_mu);
}

/* An idle read-only connection, or a new one; NULL when the store has
 * none to give (in memory) or the pool is at its size, and the route is
 * then served locked. */
static struct cnl_store *reader_take(struct cnl_api *api)
{
	struct cnl_store *rd = NULL;
	int r;

	bool open_one = false;

	pthread_mutex_lock(&api->readers_mu);
	if (api->n_readers)
		rd = api->readers[--api->n_readers];
	else if (api->open_readers < api->max_readers)
		open_one = true, api->open_readers++; /* counted before */
	pthread_mutex_unlock(&api->readers_mu);
	/* At the pool's size (store_pool: each reader is a database
	 * connection), the route is served locked instead. */
	if (rd || !open_one || api->no_readers) {
		if (open_one)
			reader_uncount(api);
		return rd;
	}
	if ((r = cnl_store_open_reader(api->store, &rd)) < 0) {
		reader_uncount(api);
		if (r == -ENOTSUP)
			api->no_readers = true;
		else
			cnl_log(CNL_LOG_WARN, "cannot open a store reader",
			        "err=%s", cnl_errname(r));
		return NULL;
	}
	return rd;
}

static void reader_give(struct cnl_api *api, struct cnl_store *rd)
{
	pthread_mutex_lock(&api->readers_mu);
	if (api->n_readers == api->cap_readers) {
		api->cap_readers = api->cap_readers ? 2 * api->cap_readers : 8;
		api->readers = cnl_xrealloc(
		    api->readers, api->cap_readers * sizeof(*api->readers));
	}
	api->readers[api->n_readers++] = rd;
	pthread_mutex_unlock(&api->readers_mu);
}

/* An OIDC ID token names a user that its first sign-in creates (a
 * write): such calls are served locked. */
static bool bearer_is_oidc(struct cnl_api *api,
                           const struct cnl_http_request *req)
{
	const char *h = cnl_http_header(req, "Authorization");

	if (!api->oidc || !h || strncasecmp(h, "Bearer ", 7) != 0)
		return false;
	for (h += 7; *h == ' ';)
		h++;
	return cnl_oidc_looks_like(h);
}

/*
 * Serve a read_only() route without the API's lock: true, or false when
 * it must be served locked after all (no reader; an OIDC bearer; the
 * controller has not yet published its facts since it loaded).  The
 * answer waits, as a locked one does, until every commit its reads could
 * have seen is durable (cnl_commit_mark_seen(), taken after the reads).
 */
static bool serve_read(struct cnl_api *api, const struct cnl_http_route *route,
                       struct cnl_http_request *req,
                       struct cnl_http_response *resp)
{
	struct call c = {0};
	char q[CNL_LOG_QUOTE_MAX];
	struct cnl_store *rd;
	struct timespec t0;
	int64_t seq;

	/* A follower's API has no controller, and serves no route that
	 * reads its facts (follower_local()). */
	if ((api->ctl && !cnl_ctl_facts_ready(api->ctl)) ||
	    bearer_is_oidc(api, req) || !(rd = reader_take(api)))
		return false;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	c.api = api;
	c.route = route;
	c.st = rd;
	c.unlocked = true;
	c.now_ms = cnl_time_now_ms();
	c.host = cnl_http_header(req, "Host");
	if (authorize(&c, req, resp) == 0)
		route->handler(&c, req, resp);
	if (resp->status == 0)
		cnl_http_error(resp, 500, "internal", "no response");
	seq = cnl_commit_mark_seen(api->commit);
	reader_give(api, rd);
	answer_durable(api, seq, (size_t)(route - api->routes), &t0, req, resp);
	cnl_log(resp->status >= 500 ? CNL_LOG_ERROR : CNL_LOG_DEBUG, "request",
	        "method=%s path=%s status=%u user=%s unlocked=1", req->method,
	        cnl_log_quote(q, sizeof(q), req->path), resp->status,
	        c.authed ? c.user.id : "-");
	return true;
}

/* How long an event thread waits for the API's lock before it hands the
 * request to a worker. */
#define EVENT_LOCK_WAIT_NS (2 * 1000 * 1000)

/*
 * Take the API's lock.  On an event thread (req->may_wait) only if it
 * comes within EVENT_LOCK_WAIT_NS: a scheduling cycle with 100k pending
 * holds it for hundreds of ms, and an event thread waiting that long
 * holds up every connection it carries (health checks, the lock-free
 * reads).  false: not taken.
 */
static bool lock_api(struct cnl_api *api, const struct cnl_http_request *req)
{
	struct timespec ts;

	if (!req->may_wait) {
		pthread_mutex_lock(&api->mu);
		return true;
	}
	if (pthread_mutex_trylock(&api->mu) == 0)
		return true;
	cnl_time_deadline_ns(&ts, CLOCK_REALTIME, EVENT_LOCK_WAIT_NS);
	return pthread_mutex_timedlock(&api->mu, &ts) == 0;
}

/*
 * Locking: the API's lock is taken here and released here; no handler
 * releases it.  A route with slow work (prepare_of()) is authorized, the
 * lock let go while the work runs (the step takes the lock itself for any
 * store read), then taken again, the caller authorized afresh (roles may
 * have changed meanwhile) and the handler run.
 */
void cnl_api_serve(void *ud, const struct cnl_http_route *route,
                   struct cnl_http_request *req, struct cnl_http_response *resp)
{
	struct cnl_api *api = ud;
	struct call c = {0};
	char q[CNL_LOG_QUOTE_MAX];
	struct timespec t0;
	size_t ri = (size_t)(route - api->routes);
	void (*prepare)(struct call *, struct cnl_http_request *) =
	    prepare_of(route);
	bool tx = one_transaction(route), wait = waits_durable(route);
	bool early = tx && !prepare; /* begun before authorization, above */
	/* On its way to the open batch: the syncer waits for it. */
	bool coming = batches(route) && tx;
	int64_t seq = 0;
	int ok, btr = 0;

	if (api->follower && !follower_local(route)) {
		/* forward.c passes every other request to the leader. */
		cnl_http_error(resp, 503, "not_leader", "this cnlabd follows");
		return;
	}
	if (lock_free(route) && route->perm == CNL_PERM_PUBLIC &&
	    !route->action) {
		serve_unlocked(api, route, req, resp);
		return;
	}
	/* A leader whose lease is not surely its own any more serves
	 * nothing: another replica may lead (leader.h). */
	if (api->leader && !cnl_leader_valid(api->leader)) {
		cnl_http_error(resp, 503, "not_leader",
		               "this cnlabd cannot renew its lease (the "
		               "database is unreachable?): retry, another "
		               "replica may lead");
		free(resp->headers);
		resp->headers = cnl_xstrdup("Retry-After: 1\r\n");
		return;
	}
	if (read_only(route) && serve_read(api, route, req, resp))
		return;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	c.api = api;
	c.st = api->store;
	c.route = route;
	c.now_ms = cnl_time_now_ms();
	c.host = cnl_http_header(req, "Host");
	cnl_api_oidc_check(&c, req);
	if (route->handler == cnl_api_h_job_collect_put)
		cnl_api_collect_check(&c, req); /* kept from its opening */
	if (coming)
		cnl_commit_coming(api->commit, 1);
	if (!lock_api(api, req)) {
		if (coming)
			cnl_commit_coming(api->commit, -1);
		resp->retry_blocking = true; /* nothing done yet */
		return;
	}
	if (early) {
		btr = begin_request(&c);
		tx = btr == 0;
	}
	ok = authorize(&c, req, resp) == 0;
	if (ok && prepare) {
		pthread_mutex_unlock(&api->mu);
		prepare(&c, req);
		pthread_mutex_lock(&api->mu);
		c.slow.done = true;
		ok = authorize(&c, req, resp) == 0;
	}
	/* Begun here, after any slow step (the lock is then held to the
	 * commit), and undone only by a failed commit (commit_request()):
	 * what a failing handler stored, it stored, as it would have in
	 * autocommit. */
	if (tx && !early) {
		btr = begin_request(&c);
		tx = btr == 0;
	}
	/* No transaction, no handler: its writes would commit one by one
	 * (a store reconnected since, say), not together or not at all. */
	if (ok && btr < 0) {
		cnl_api_store_error(&c, resp, btr, "request");
		ok = 0;
	}
	if (ok)
		route->handler(&c, req, resp);
	if (resp->status == 0)
		cnl_http_error(resp, 500, "internal", "no response");
	if (route->action && !c.no_audit)
		cnl_api_audit(&c, req, resp);
	if (tx)
		commit_request(&c, resp);
	if (wait)
		seq = cnl_commit_mark(api->commit);
	/* What the call changed in the controller, for the lock-free GETs. */
	cnl_ctl_facts_publish(api->ctl);
	if (ok && route->action && resp->status < 400)
		cnl_api_dash_bump(api, changes_access(route));
	pthread_mutex_unlock(&api->mu);
	if (coming)
		cnl_commit_coming(api->commit, -1);
	/* After the lock: while this waits, others commit, and one sync
	 * covers them all. */
	/* The latency counts the wait for durability: what a client sees. */
	if (wait && c.inputs_kept) {
		/* A submission with inputs: whether its commit stands (its
		 * batch not lost) is known only after the wait, and its
		 * uploads' files go only then: waited for here, on this
		 * thread, whatever thread this is. */
		wait_durable(api, seq, route, resp);
		observe(api, ri, resp->status, &t0);
	} else if (wait) {
		answer_durable(api, seq, ri, &t0, req, resp);
	} else {
		observe(api, ri, resp->status, &t0);
	}
	/* Undone: the request's commit failed, or its batch was lost.  A
	 * commit whose sync failed stands (the next good sync makes it
	 * durable): the job keeps its inputs. */
	cnl_api_job_inputs_settle(
	    &c, !c.undone && !(wait && cnl_store_lost(api->store, seq) < 0));
	cnl_log(resp->status >= 500 ? CNL_LOG_ERROR : CNL_LOG_DEBUG, "request",
	        "method=%s path=%s status=%u user=%s", req->method,
	        cnl_log_quote(q, sizeof(q), req->path), resp->status,
	        c.authed ? c.user.id : "-");
}

/* cnl_api_serve() inside the request's span (trace.h). */
static void serve_traced(void *ud, const struct cnl_http_route *route,
                         struct cnl_http_request *req,
                         struct cnl_http_response *resp)
{
	struct cnl_api_trace t;

	cnl_api_trace_begin(&t, route, req);
	cnl_api_serve(ud, route, req, resp);
	/* Served again on a worker, in a span of its own. */
	if (resp->retry_blocking)
		cnl_trace_set_current(NULL);
	else
		cnl_api_trace_end(&t, resp);
}

/*
 * The open_sink callback: for a route whose body streams to a file
 * (cnl_api_route_streams), authorize the caller with the headers alone and
 * open the file, before any of the body is read; 1 for other routes.  The
 * handler, at the end of the body, runs through cnl_api_serve as usual.
 */
int cnl_api_open_sink(void *ud, const struct cnl_http_route *route,
                      struct cnl_http_request *req,
                      struct cnl_http_response *resp,
                      struct cnl_http_sink **ret)
{
	struct cnl_api *api = ud;
	struct call c = {0};
	int64_t seq;
	int r;

	if (!cnl_api_route_streams(route) &&
	    route->handler != cnl_api_h_image_import)
		return 1;
	c.api = api;
	c.st = api->store;
	c.route = route;
	c.now_ms = cnl_time_now_ms();
	cnl_api_oidc_check(&c, req);
	if (route->handler == cnl_api_h_job_collect_put)
		cnl_api_collect_check(&c, req); /* may ask the API server */
	pthread_mutex_lock(&api->mu);
	r = authorize(&c, req, resp) == 0 ? 0 : -1;
	if (r == 0 && route->handler == cnl_api_h_upload_put)
		cnl_api_uploads_expire(&c, c.project.id);
	if (r == 0 && route->handler == cnl_api_h_image_import)
		r = cnl_api_open_import(&c, req, resp, ret);
	else if (r == 0)
		r = cnl_api_open_upload(&c, req, resp, ret);
	/* A refusal here is the request's answer: audit it as the handler's
	 * would be. */
	if (r < 0 && route->action)
		cnl_api_audit(&c, req, resp);
	seq = cnl_commit_mark(api->commit);
	pthread_mutex_unlock(&api->mu);
	if (r < 0)
		wait_durable(api, seq, route, resp);
	return r;
}

void cnl_api_set_collect_verify(struct cnl_api *api,
                                cnl_api_collect_verify_fn fn, void *ud)
{
	pthread_rwlock_wrlock(&api->collect_rw);
	api->collect_verify = fn;
	api->collect_ud = ud;
	pthread_rwlock_unlock(&api->collect_rw);
}

void cnl_api_set_kube_exec(struct cnl_api *api, cnl_api_kube_exec_fn fn,
                           void *ud)
{
	pthread_rwlock_wrlock(&api->collect_rw);
	api->kube_exec = fn;
	api->kube_exec_ud = ud;
	pthread_rwlock_unlock(&api->collect_rw);
}

void cnl_api_set_kube_ssh(struct cnl_api *api, cnl_api_kube_ssh_fn fn, void *ud)
{
	pthread_rwlock_wrlock(&api->collect_rw);
	api->kube_ssh = fn;
	api->kube_ssh_ud = ud;
	pthread_rwlock_unlock(&api->collect_rw);
}

/* The controller's tick, lock held: files past their retention go, and
 * the event streams of pending jobs look at their estimates again. */
static void upkeep(void *ud, int64_t now_ms)
{
	cnl_api_files_upkeep(ud, now_ms);
	cnl_api_events_tick(ud);
	cnl_api_dash_tick(ud, now_ms);
}

/* The controller wrote a workload's state: its event streams and the
 * dashboard's snapshot. */
static void changed(void *ud, const char *id)
{
	cnl_api_events_changed(ud, id);
	cnl_api_dash_changed(ud, id);
}

/* The origin of an http(s) URL: its length up to the path. */
static size_t url_origin_len(const char *u)
{
	const char *p = strstr(u, "://");

	return p ? (size_t)(p + 3 - u) + strcspn(p + 3, "/?#") : 0;
}

/*
 * notebook_url: http(s)://host[:port] (a path is not allowed: the proxy's
 * paths are /s/ID/ from the root), of characters a URL and a Location
 * header take as they are, and never the API's own origin (public_url),
 * which is the hole the notebook origin closes.  0, or -1 with @err.
 */
static int notebook_url_check(const char *u, const char *public_url, char *err,
                              size_t errlen)
{
	size_t o = url_origin_len(u);

	if ((strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0) ||
	    o <= 8 || strlen(u) >= CNL_API_CLI_URL_MAX) {
		snprintf(err, errlen,
		         "notebook_url must be http:// or https:// with a "
		         "host, got %.80s",
		         u);
		return -1;
	}
	for (const char *p = u; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr(":/.-_[]", *p)) {
			snprintf(err, errlen,
			         "notebook_url: character '%c' not allowed",
			         *p);
			return -1;
		}
	if (u[o] && strspn(u + o, "/") != strlen(u + o)) {
		snprintf(err, errlen,
		         "notebook_url takes no path (the proxy's paths are "
		         "/s/SERVER-ID/), got %.80s",
		         u);
		return -1;
	}
	if (public_url && o == url_origin_len(public_url) &&
	    strncasecmp(u, public_url, o) == 0) {
		snprintf(err, errlen,
		         "notebook_url must be another origin than public_url "
		         "(%.80s): a tenant's pages would run on the API's",
		         public_url);
		return -1;
	}
	return 0;
}

/* How long the syncer lets requests commit the batch before it waits for
 * the API's lock itself (flush_batch()). */
#define FLUSH_SPIN_US  20
#define FLUSH_SPIN_MAX 200

/*
 * The syncer's flush (commit.h): the store's open batch, committed under
 * the API's lock as every use of the store.  Under load the lock has a
 * queue of requests (and a cycle may hold it for ms): a submission that
 * ends while the window closes commits the batch with its own
 * transaction (store.h), within one request's hold, so the syncer only
 * takes the lock when it is free, and waits for it only when no request
 * came for FLUSH_SPIN_MAX pauses.
 */
static void flush_batch(void *arg)
{
	struct cnl_api *api = arg;
	const struct timespec pause = {0, FLUSH_SPIN_US * 1000};

	for (int i = 0; cnl_store_batch_open(api->store); i++) {
		if (i < FLUSH_SPIN_MAX &&
		    pthread_mutex_trylock(&api->mu) != 0) {
			nanosleep(&pause, NULL);
			continue;
		}
		if (i >= FLUSH_SPIN_MAX)
			pthread_mutex_lock(&api->mu);
		cnl_store_flush(api->store);
		/* A lost batch is undone in memory: the lock-free reads see
		 * that as they see a request's changes. */
		cnl_ctl_facts_publish(api->ctl);
		pthread_mutex_unlock(&api->mu);
		break;
	}
}

int cnl_api_new(const struct cnl_api_config *cfg, struct cnl_api **ret)
{
	struct cnl_api *api;
	int ln = cfg->scrypt_ln ? cfg->scrypt_ln : CNL_AUTH_SCRYPT_LN;
	char err[256], q[CNL_LOG_QUOTE_MAX];
	int r;

	if (!cfg->store || !cfg->jwt_key ||
	    cfg->jwt_key_len < CNL_API_SECRET_MIN ||
	    ln < CNL_AUTH_SCRYPT_LN_MIN || ln > CNL_AUTH_SCRYPT_LN_MAX)
		return -EINVAL;
	api = cnl_xcalloc(1, sizeof(*api));
	pthread_mutex_init(&api->mu, NULL);
	pthread_mutex_init(&api->readers_mu, NULL);
	pthread_mutex_init(&api->stats_mu, NULL);
	pthread_mutex_init(&api->collect_mu, NULL);
	api->kube_nodes = json_object();
	{
		/* Writers first: the Kubernetes scheduler clearing its
		 * hooks at its stop is not kept waiting by a stream of
		 * checks and execs, each of which may take seconds. */
		pthread_rwlockattr_t ra;

		pthread_rwlockattr_init(&ra);
		pthread_rwlockattr_setkind_np(
		    &ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
		pthread_rwlock_init(&api->collect_rw, &ra);
		pthread_rwlockattr_destroy(&ra);
	}
	pthread_cond_init(&api->tun_cv, NULL);
	api->store = cfg->store;
	api->keylen = cfg->jwt_key_len;
	api->key = cnl_xmalloc(api->keylen);
	memcpy(api->key, cfg->jwt_key, api->keylen);
	api->scrypt_ln = ln;
	if (cfg->secrets_key) {
		memcpy(api->secrets_key, cfg->secrets_key,
		       sizeof(api->secrets_key));
		api->have_secrets_key = true;
	}
	api->oidc = cfg->oidc;
	api->oidc_issuer =
	    cfg->oidc_issuer ? cnl_xstrdup(cfg->oidc_issuer) : NULL;
	api->oidc_client_id =
	    cfg->oidc_client_id ? cnl_xstrdup(cfg->oidc_client_id) : NULL;
	if (cfg->oidc_authorize_url && cfg->oidc_token_url &&
	    api->oidc_issuer && api->oidc_client_id) {
		api->oidc_authorize_url = cnl_xstrdup(cfg->oidc_authorize_url);
		api->oidc_token_url = cnl_xstrdup(cfg->oidc_token_url);
	}
	api->files_dir = cfg->files_dir ? cnl_xstrdup(cfg->files_dir) : NULL;
	api->artifacts_max = cfg->artifacts_max_bytes > 0
	                         ? cfg->artifacts_max_bytes
	                         : 10LL << 30;
	api->inputs_max =
	    cfg->inputs_max_bytes > 0 ? cfg->inputs_max_bytes : 2LL << 30;
	api->images_max =
	    cfg->images_max_bytes > 0 ? cfg->images_max_bytes : 64LL << 30;
	api->artifacts_keep_ms = cfg->artifacts_keep_ms;
	api->max_readers = cfg->store_pool > 0 ? (size_t)cfg->store_pool : 16;
	if (api->files_dir && mkdir(api->files_dir, 0700) < 0 &&
	    errno != EEXIST) {
		cnl_log(CNL_LOG_ERROR, "files folder", "dir=%s err=\"%s\"",
		        api->files_dir, strerror(errno));
		cnl_api_free(api);
		return -EIO;
	}
	if ((r = cnl_commit_new(api->store, flush_batch, api, &api->commit)) <
	    0) {
		cnl_log(CNL_LOG_ERROR, "group commit", "db=%s err=%s",
		        cnl_store_path(api->store), cnl_errname(r));
		cnl_api_free(api);
		return r;
	}
	api->follower = cfg->follower;
	/* The leader keeps the shared folder (an upload in progress there
	 * is the leader's). */
	if (api->files_dir && !api->follower)
		cnl_api_images_start(api);
	cnl_id_gen_init_random(&api->ids);
	cnl_catalog_init(&api->cat);
	cnl_api_dash_new(api);
	api->cred_overlap_ms = cfg->node_credential_overlap_ms > 0
	                           ? cfg->node_credential_overlap_ms
	                           : 5 * 60 * 1000;
	if (cfg->notebook_url && cfg->notebook_url[0]) {
		if (notebook_url_check(cfg->notebook_url, cfg->public_url, err,
		                       sizeof(err)) < 0) {
			cnl_log(CNL_LOG_ERROR, "notebook_url", "err=%s",
			        cnl_log_quote(q, sizeof(q), err));
			cnl_api_free(api);
			return -CNL_ECONFIG;
		}
		api->notebook_url = cnl_xstrdup(cfg->notebook_url);
		for (size_t n = strlen(api->notebook_url);
		     n > 0 && api->notebook_url[n - 1] == '/'; n--)
			api->notebook_url[n - 1] = '\0';
	}
	if ((r = cnl_api_cli_new(cfg->cli_dir, cfg->public_url, &api->cli, err,
	                         sizeof(err))) < 0) {
		cnl_log(CNL_LOG_ERROR, "CLI installer", "err=%s",
		        cnl_log_quote(q, sizeof(q), err));
		cnl_api_free(api);
		return r;
	}
	/* A follower forwards logins (the decoy's only use) and has no
	 * controller. */
	if (api->follower) {
		api->routes = routes; /* served by forward.c's listener */
		*ret = api;
		return 0;
	}
	if (cnl_auth_password_decoy(ln, api->dummy_hash,
	                            sizeof(api->dummy_hash)) < 0) {
		cnl_api_free(api);
		return -EIO;
	}
	api->burst_strs[0] =
	    cfg->burst_image ? cnl_xstrdup(cfg->burst_image) : NULL;
	api->burst_strs[1] =
	    cfg->burst_agent ? cnl_xstrdup(cfg->burst_agent) : NULL;
	api->burst_strs[2] = cfg->burst_url    ? cnl_xstrdup(cfg->burst_url)
	                     : cfg->public_url ? cnl_xstrdup(cfg->public_url)
	                                       : NULL;
	api->burst_cfg = (struct cnl_burst_config){
	    .image = api->burst_strs[0],
	    .agent = api->burst_strs[1],
	    .url = api->burst_strs[2],
	    .interval_ms = cfg->burst_interval_ms,
	    .idle_ms = cfg->burst_idle_ms,
	    .boot_ms = cfg->burst_boot_ms,
	    .max_instances = (int)cfg->burst_max_instances,
	};
	r = cnl_ctl_new(
	    &(struct cnl_ctl_config){
	        .store = cfg->store,
	        .cat = &api->cat,
	        .policy = cfg->policy,
	        .node_lost_ms = cfg->node_lost_ms,
	        .cycle_interval_ms = cfg->cycle_interval_ms,
	        .seed = (uint64_t)cnl_time_now_ms(),
	        .preempt_min_run_ms =
	            cfg->preempt_min_run_ms ? cfg->preempt_min_run_ms : -1,
	        .preempt_grace_ms =
	            cfg->preempt_grace_ms ? cfg->preempt_grace_ms : -1,
	        .power_command = cfg->power_command,
	        .power_idle_ms = cfg->power_idle_ms,
	        .power_spare_gpus = cfg->power_spare_gpus,
	        .upkeep = upkeep,
	        .upkeep_ud = api,
	        .changed = changed,
	        .changed_ud = api,
	    },
	    &api->mu, &api->ctl, err, sizeof(err));
	if (r < 0) {
		cnl_log(CNL_LOG_ERROR, "controller", "err=%s", err);
		cnl_api_free(api);
		return r == -CNL_ECONFIG ? r : -EIO;
	}
	*ret = api;
	return 0;
}

void cnl_api_stop(struct cnl_api *api)
{
	if (!api)
		return;
	cnl_burst_stop(api->burst);
	cnl_federate_stop(api->federate);
	cnl_ctl_stop(api->ctl);
	cnl_mirror_stop(api->mirror);
	api->mirror = NULL;
	/* The proxy's waits and relays end within a second: the HTTP
	 * server's threads can then be joined. */
	atomic_store(&api->proxy_stop, true);
	pthread_mutex_lock(&api->mu);
	pthread_cond_broadcast(&api->tun_cv);
	cnl_api_events_stop(api);
	pthread_mutex_unlock(&api->mu);
	cnl_api_dash_stop(api);
}

int cnl_api_node_mint(struct cnl_api *api, const char *node,
                      char ret_secret[CNL_API_NODE_SECRET_MAX])
{
	int64_t seq;
	int r;

	pthread_mutex_lock(&api->mu);
	/* Never a node that an agent registered: its credentials are the
	 * agent's, and the node is not the scheduler's to speak for. */
	json_t *known = cnl_ctl_node_json(api->ctl, node, cnl_time_now_ms());
	const char *cl = json_string_value(json_object_get(known, "cluster"));
	bool theirs = known && (!cl || strcmp(cl, CNL_API_KUBE_CLUSTER) != 0);
	json_decref(known);
	if (theirs) {
		pthread_mutex_unlock(&api->mu);
		return -EEXIST;
	}
	if ((r = cnl_store_tx_begin(api->store)) == 0) {
		if ((r = cnl_api_node_forget(api->store, node)) < 0 ||
		    (r = cnl_api_node_credential_issue(
		         api->store, node, cnl_time_now_ms(), ret_secret)) < 0)
			cnl_store_tx_rollback(api->store);
		else
			r = cnl_store_tx_commit(api->store);
	}
	if (r == 0)
		json_object_set_new(api->kube_nodes, node, json_true());
	seq = cnl_commit_mark(api->commit);
	pthread_mutex_unlock(&api->mu);
	if (r == 0 && cnl_commit_wait(api->commit, seq) < 0)
		r = -EIO;
	if (r < 0)
		explicit_bzero(ret_secret, CNL_API_NODE_SECRET_MAX);
	return r;
}

void cnl_api_tick(struct cnl_api *api, int64_t now_ms)
{
	pthread_mutex_lock(&api->mu);
	cnl_ctl_tick(api->ctl, now_ms, true);
	pthread_mutex_unlock(&api->mu);
}

void cnl_api_free(struct cnl_api *api)
{
	if (!api)
		return;
	cnl_burst_free(api->burst);
	api->burst = NULL;
	cnl_federate_free(api->federate);
	api->federate = NULL;
	for (int i = 0; i < 3; i++)
		free(api->burst_strs[i]);
	cnl_ctl_stop(api->ctl);
	cnl_mirror_stop(api->mirror);
	/* An open batch is committed while the controller, which its end
	 * reports to, is still there. */
	pthread_mutex_lock(&api->mu);
	cnl_store_flush(api->store);
	pthread_mutex_unlock(&api->mu);
	cnl_ctl_free(api->ctl);
	/* The readers go before the writer's store (the caller's). */
	for (size_t i = 0; i < api->n_readers; i++)
		cnl_store_close(api->readers[i]);
	free(api->readers);
	cnl_commit_free(api->commit);
	explicit_bzero(api->secrets_key, sizeof(api->secrets_key));
	if (api->key) {
		explicit_bzero(api->key, api->keylen);
		free(api->key);
	}
	free(api->stats);
	free(api->files_dir);
	free(api->oidc_issuer);
	free(api->oidc_client_id);
	free(api->oidc_authorize_url);
	free(api->oidc_token_url);
	free(api->notebook_url);
	cnl_api_cli_free(api->cli);
	cnl_api_dash_free(api);
	cnl_api_oidc_web_free(api);
	pthread_cond_destroy(&api->tun_cv);
	pthread_mutex_destroy(&api->mu);
	pthread_mutex_destroy(&api->stats_mu);
	pthread_mutex_destroy(&api->collect_mu);
	json_decref(api->kube_nodes);
	pthread_rwlock_destroy(&api->collect_rw);
	pthread_mutex_destroy(&api->readers_mu);
	free(api);
}

int cnl_api_start(struct cnl_api *api, const struct cnl_api_listen *l,
                  struct cnl_http_server **ret, char *err, size_t errlen)
{
	struct cnl_http_config cfg = {
	    .host = l->host,
	    .port = l->port,
	    .routes = l->routes,
	    .nroutes = l->nroutes,
	    .tls_cert_pem = l->tls_cert_pem,
	    .tls_key_pem = l->tls_key_pem,
	    .serve = serve_traced,
	    .quick = CNL_API_EVENT_MODE ? quick : NULL,
	    .open_sink = cnl_api_open_sink,
	    .ud = api,
	    .body_max = l->body_max,
	    .conn_max = l->conn_max,
	    .conn_per_client = l->conn_per_client,
	    .header_timeout_ms = l->header_timeout_ms,
	    .body_timeout_ms = l->body_timeout_ms,
	    .retry_after_s = l->retry_after_s,
	};

	cnl_api_proxy_config(api, &cfg, false);
	int r;

	if (l->replica_proof) {
		cfg.trust_header = CNL_FORWARD_PROOF_HEADER;
		cfg.trust = cnl_forward_trusted;
		cfg.trust_ud = (void *)l->replica_proof;
	}

	if ((r = cnl_api_routes_check(l->routes, l->nroutes, err, errlen)) < 0)
		return r;
	free(api->stats);
	api->stats = cnl_xcalloc(l->nroutes, sizeof(*api->stats));
	api->nstats = l->nroutes;
	api->routes = l->routes;
	cnl_api_cli_set_tls(api->cli, l->tls_cert_pem != NULL);
	api->tls = l->tls_cert_pem != NULL;
	/* A leader over PostgreSQL mirrors its live statuses for the
	 * followers (mirror.h), from before the loop's first tick. */
	if (api->leader && !api->mirror &&
	    (r = cnl_mirror_start(api->ctl, api->store, &api->mirror)) < 0 &&
	    r != -ENOTSUP) {
		snprintf(err, errlen, "cannot mirror live statuses: %s",
		         cnl_strerror(r));
		return r;
	}
	/* The instances the burst launched before: known as cloud nodes
	 * before the first cycle places anything. */
	if (l->run_loop && api->ctl && !api->burst) {
		pthread_mutex_lock(&api->mu);
		r = cnl_burst_new(api, &api->burst_cfg, &api->burst);
		pthread_mutex_unlock(&api->mu);
		if (r < 0) {
			snprintf(err, errlen,
			         "cannot load the cloud instances: %s",
			         cnl_strerror(r));
			cnl_mirror_stop(api->mirror);
			api->mirror = NULL;
			return r;
		}
	}
	/* The jobs forwarded to peers before (federate.h). */
	if (l->run_loop && api->ctl && !api->federate) {
		pthread_mutex_lock(&api->mu);
		r = cnl_federate_new(api, cnl_api_events_note, &api->federate);
		pthread_mutex_unlock(&api->mu);
		if (r < 0) {
			snprintf(err, errlen,
			         "cannot load the forwarded jobs: %s",
			         cnl_strerror(r));
			cnl_mirror_stop(api->mirror);
			api->mirror = NULL;
			return r;
		}
	}
	if (l->run_loop && (r = cnl_ctl_start(api->ctl)) < 0) {
		snprintf(err, errlen, "cannot start the scheduling loop");
		cnl_mirror_stop(api->mirror);
		api->mirror = NULL;
		return r;
	}
	r = cnl_http_server_new(&cfg, ret, err, errlen);
	if (r < 0) {
		cnl_ctl_stop(api->ctl);
		cnl_mirror_stop(api->mirror);
		api->mirror = NULL;
		return r;
	}
	/* Always: instances launched before are watched, given back and
	 * held to the budget even where nothing new may be launched. */
	if (api->burst) {
		char url[160];

		/* Without a URL given, the listener's own (instances on
		 * this network reach it there). */
		if (!api->burst_cfg.url) {
			snprintf(url, sizeof(url), "%s://%s:%u",
			         l->tls_cert_pem ? "https" : "http",
			         strcmp(l->host, "0.0.0.0") == 0 ? "127.0.0.1"
			                                         : l->host,
			         (unsigned)cnl_http_server_port(*ret));
			api->burst_strs[2] = cnl_xstrdup(url);
			api->burst_cfg.url = api->burst_strs[2];
			cnl_burst_set_url(api->burst, url);
		}
		if ((r = cnl_burst_start(api->burst)) < 0)
			cnl_log(CNL_LOG_ERROR, "cannot start the cloud burst",
			        "err=%s", cnl_strerror(r));
	}
	if (api->federate && (r = cnl_federate_start(api->federate)) < 0)
		cnl_log(CNL_LOG_ERROR, "cannot start federation", "err=%s",
		        cnl_strerror(r));
	return 0;
}

int cnl_api_start_notebooks(struct cnl_api *api, const struct cnl_api_listen *l,
                            struct cnl_http_server **ret, char *err,
                            size_t errlen)
{
	/* The table is never consulted (every path is passed), but a server
	 * needs a valid one. */
	static const struct cnl_http_route none[] = {
	    {"GET", "/healthz", CNL_PERM_PUBLIC, NULL, cnl_api_h_healthz},
	};
	struct cnl_http_config cfg = {
	    .host = l->host,
	    .port = l->port,
	    .routes = none,
	    .nroutes = CNL_ARRAY_SIZE(none),
	    .tls_cert_pem = l->tls_cert_pem,
	    .tls_key_pem = l->tls_key_pem,
	    .serve = serve_traced,
	    .ud = api,
	    .body_max = l->body_max,
	    .conn_max = l->conn_max,
	    .conn_per_client = l->conn_per_client,
	    .header_timeout_ms = l->header_timeout_ms,
	    .body_timeout_ms = l->body_timeout_ms,
	    .retry_after_s = l->retry_after_s,
	};
	int r;

	if ((l->tls_cert_pem != NULL) != api->tls) {
		snprintf(err, errlen,
		         "the notebook listener serves HTTPS exactly when the "
		         "API does");
		return -CNL_ECONFIG;
	}
	cnl_api_proxy_config(api, &cfg, true);
	if ((r = cnl_http_server_new(&cfg, ret, err, errlen)) < 0)
		return r;
	atomic_store(&api->nb_port, cnl_http_server_port(*ret));
	return 0;
}

int cnl_api_bootstrap(struct cnl_store *s, const char *name,
                      const char *password, int scrypt_ln, char *err,
                      size_t errlen)
{
	struct cnl_store_project sys = {0}, any;
	struct cnl_store_user u = {0};
	struct cnl_store_membership m = {0};
	struct cnl_store_audit a = {0};
	struct cnl_id_gen ids;
	int64_t now = cnl_time_now_ms();
	int r, n = 0;
	const char *step;

	if (cnl_store_project_get_by_name(s, CNL_API_ADMIN_PROJECT, &any) == 0)
		return 1;
	if ((r = cnl_store_project_list(s, NULL, 1, &any, &n)) < 0) {
		step = "list projects";
		goto fail;
	}
	if (n > 0) {
		snprintf(err, errlen,
		         "the store already holds projects but no \"%s\" "
		         "project; refusing to bootstrap",
		         CNL_API_ADMIN_PROJECT);
		return -CNL_ECONFIG;
	}
	if (!name || !cnl_api_valid_name(name)) {
		snprintf(err, errlen,
		         "admin name must be 1..63 characters of "
		         "A-Z a-z 0-9 . _ -");
		return -CNL_EFIELD;
	}
	cnl_id_gen_init_random(&ids);
	if (!scrypt_ln)
		scrypt_ln = CNL_AUTH_SCRYPT_LN;
	step = "hash password";
	if ((r = cnl_auth_password_hash_cost(password ? password : "",
	                                     scrypt_ln, u.password_hash,
	                                     sizeof(u.password_hash))) < 0)
		goto fail;
	step = "create user";
	if ((r = cnl_id_new(&ids, "usr", now, u.id, sizeof(u.id))) < 0)
		goto fail;
	snprintf(u.name, sizeof(u.name), "%s", name);
	u.created_ms = now;
	if ((r = cnl_store_user_create(s, &u)) < 0)
		goto fail;
	step = "create project";
	if ((r = cnl_id_new(&ids, "prj", now, sys.id, sizeof(sys.id))) < 0)
		goto fail;
	snprintf(sys.name, sizeof(sys.name), "%s", CNL_API_ADMIN_PROJECT);
	sys.created_ms = now;
	if ((r = cnl_store_project_create(s, &sys)) < 0)
		goto fail;
	step = "grant admin";
	memcpy(m.user_id, u.id, sizeof(m.user_id));
	memcpy(m.project_id, sys.id, sizeof(m.project_id));
	snprintf(m.role, sizeof(m.role), "admin");
	if ((r = cnl_store_membership_set(s, &m)) < 0)
		goto fail;
	step = "audit";
	a.ts_ms = now;
	snprintf(a.actor, sizeof(a.actor), "cnlabd");
	snprintf(a.action, sizeof(a.action), "admin.bootstrap");
	snprintf(a.target, sizeof(a.target), "%s", u.id);
	snprintf(a.result, sizeof(a.result), "ok");
	if ((r = cnl_store_audit_append(s, &a, NULL)) < 0)
		goto fail;
	step = "default profiles";
	if ((r = cnl_api_seed_profiles(s, now)) < 0)
		goto fail;
	return 0;
fail:
	snprintf(err, errlen, "bootstrap: %s: %s%s%s", step, cnl_strerror(r),
	         cnl_store_errmsg(s)[0] ? ": " : "", cnl_store_errmsg(s));
	return r;
}
