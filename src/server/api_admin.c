/*
 * api_admin.c - the administration routes the CLI needs beyond creating
 * things: one user and their memberships, invitations and their
 * redemption, deleting a project, removing a member, one node, and join
 * tokens for new nodes.
 *
 * Invitations.  An administrator may create a user without a password
 * ("invite": true) or invite an existing one again (a password reset);
 * either way the answer carries a one-time invite token ("cnl_..." like
 * API tokens, 30 bytes of randomness) that is shown once and stored only
 * as its SHA-256 digest, as a document
 *   invite  id = digest, parent = user id   {"user_id", "expires_ms"}
 * POST /v1/auth/redeem (public: the user has no credential yet) takes the
 * token and a new password, sets the password, deletes every invitation
 * of the user (one use), and answers like a login.  An old password stays
 * valid until an invitation is redeemed, so a stray invitation cannot lock
 * a user out.
 *
 * Join tokens.  A node agent authenticates with an API token of the
 * service user "agent" (role "agent" in the system project).  A join
 * token is such a token, named after the node it is for and short-lived
 * (24 h by default); binding it to one node is the security issue's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/json.h"
#include "common/util.h"
#include "server/api-internal.h"

#define INVITE_TTL_MS       (7LL * 86400000) /* a week to accept */
#define REDEEM_PASSWORD_MIN 8 /* a password users choose themselves */

static void bad(struct cnl_http_response *resp, const char *err)
{
	cnl_http_error(resp, 400, "bad_request", "%s", err);
}

/* The user the path's {user} names, by id or by name: 0 or a 404. */
static int path_user(struct call *c, struct cnl_http_request *req,
                     struct cnl_http_response *resp, struct cnl_store_user *ret)
{
	const char *key = cnl_http_param(req, "user");
	int r = cnl_store_user_get(c->api->store, key, ret);

	if (r == -CNL_ENOTFOUND || r == -CNL_EFIELD || r == -CNL_ESIZE)
		r = cnl_store_user_get_by_name(c->api->store, key, ret);
	if (r == -CNL_EFIELD || r == -CNL_ESIZE)
		r = -CNL_ENOTFOUND;
	if (r < 0)
		cnl_api_store_error(c, resp, r, "user");
	return r;
}

int cnl_api_invite_issue(struct cnl_store *s, const char *user_id,
                         int64_t now_ms, char *ret_token,
                         int64_t *ret_expires_ms)
{
	struct cnl_store_doc d = {0};
	char token[CNL_AUTH_TOKEN_MAX], digest[CNL_AUTH_DIGEST_MAX];
	int64_t exp = now_ms + INVITE_TTL_MS;
	json_t *o;
	int r;

	if (cnl_auth_token_new(token, sizeof(token)) < 0 ||
	    cnl_auth_token_digest(token, digest) < 0)
		return -EIO;
	snprintf(d.kind, sizeof(d.kind), "invite");
	snprintf(d.id, sizeof(d.id), "%s", digest);
	snprintf(d.parent, sizeof(d.parent), "%s", user_id);
	o = json_pack("{s:s,s:I}", "user_id", user_id, "expires_ms",
	              (json_int_t)exp);
	d.body = json_dumps(o, JSON_COMPACT);
	d.updated_ms = now_ms;
	json_decref(o);
	r = d.body ? cnl_store_doc_put(s, &d, true) : -ENOMEM;
	free(d.body);
	if (r == 0) {
		memcpy(ret_token, token, CNL_AUTH_TOKEN_MAX);
		*ret_expires_ms = exp;
	}
	explicit_bzero(token, sizeof(token));
	return r;
}

json_t *cnl_api_invite_json(const char *token, int64_t expires_ms)
{
	return json_pack("{s:s,s:o}", "token", token, "expires_at",
	                 cnl_api_time_json(expires_ms));
}

/* GET /v1/users/{user}: the user, whether they can log in, and where. */
void cnl_api_h_user_get(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store_membership m[CNL_STORE_LIST_MAX];
	struct cnl_store_project p;
	struct cnl_store_doc inv[CNL_STORE_LIST_MAX];
	struct cnl_store_user u;
	json_t *o, *list;
	int n = 0, ni = 0, r;

	if (path_user(c, req, resp, &u) < 0)
		return;
	list = json_array();
	if ((r = cnl_store_membership_list(c->api->store, u.id, NULL,
	                                   CNL_STORE_LIST_MAX, m, &n)) < 0 ||
	    (r = cnl_store_doc_list(c->api->store, "invite", u.id, NULL,
	                            CNL_STORE_LIST_MAX, inv, &ni)) < 0) {
		json_decref(list);
		cnl_api_store_error(c, resp, r, "user");
		return;
	}
	cnl_store_docs_done(inv, ni);
	for (int i = 0; i < n; i++)
		if (cnl_store_project_get(c->api->store, m[i].project_id, &p) ==
		    0)
			json_array_append_new(
			    list,
			    json_pack("{s:s,s:s,s:s}", "project_id", p.id,
			              "project", p.name, "role", m[i].role));
	o = cnl_api_user_json(&u);
	json_object_set_new(o, "password_set",
	                    json_boolean(u.password_hash[0] != '\0'));
	json_object_set_new(o, "invite_pending", json_boolean(ni > 0));
	json_object_set_new(o, "memberships", list);
	cnl_http_reply(resp, 200, o);
}

/* POST /v1/users/{user}/invite: a new one-time invitation (a reset). */
void cnl_api_h_user_invite(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store_user u;
	char token[CNL_AUTH_TOKEN_MAX];
	int64_t exp;
	int r;

	if (path_user(c, req, resp, &u) < 0)
		return;
	snprintf(c->target, sizeof(c->target), "%s", u.id);
	if ((r = cnl_api_invite_issue(c->api->store, u.id, c->now_ms, token,
	                              &exp)) < 0) {
		cnl_api_store_error(c, resp, r, "invitation");
		return;
	}
	cnl_http_reply(resp, 201,
	               json_pack("{s:s,s:s,s:o}", "id", u.id, "name", u.name,
	                         "invite", cnl_api_invite_json(token, exp)));
	explicit_bzero(token, sizeof(token));
}

/* POST /v1/auth/redeem {"invite", "password"}: set the password once. */
void cnl_api_h_auth_redeem(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	static const char *const fields[] = {"invite", "password", NULL};
	struct call *c = call;
	struct cnl_store_doc d = {0}, all[CNL_STORE_LIST_MAX];
	struct cnl_store_user u;
	char digest[CNL_AUTH_DIGEST_MAX], hash[CNL_STORE_HASH_MAX];
	const char *invite, *password, *uid;
	int64_t exp;
	json_t *body, *o = NULL;
	int n = 0, r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(invite = cnl_api_get_string(body, "invite", CNL_AUTH_TOKEN_MAX,
	                                  resp)) ||
	    !(password = cnl_api_get_string(body, "password",
	                                    CNL_AUTH_PASSWORD_MAX + 1, resp)))
		goto out;
	if (cnl_auth_token_check(invite) < 0 ||
	    cnl_auth_token_digest(invite, digest) < 0 ||
	    cnl_store_doc_get(c->api->store, "invite", digest, &d) < 0)
		goto refuse;
	o = json_loads(d.body, 0, NULL);
	cnl_store_doc_done(&d);
	uid = json_string_value(json_object_get(o, "user_id"));
	exp = json_integer_value(json_object_get(o, "expires_ms"));
	if (!uid || exp <= c->now_ms ||
	    cnl_store_user_get(c->api->store, uid, &u) < 0)
		goto refuse;
	snprintf(c->actor, sizeof(c->actor), "%s", u.id);
	snprintf(c->target, sizeof(c->target), "%s", u.id);
	if (strlen(password) < REDEEM_PASSWORD_MIN) {
		bad(resp, "field \"password\": must be at least 8 bytes");
		goto out;
	}
	/* scrypt takes ~0.1 s: not under the big lock. */
	pthread_mutex_unlock(&c->api->mu);
	r = cnl_auth_password_hash_cost(password, c->api->scrypt_ln, hash,
	                                sizeof(hash));
	pthread_mutex_lock(&c->api->mu);
	if (r < 0) {
		bad(resp, "field \"password\": must be 8..1024 bytes");
		goto out;
	}
	/* The password and the end of every invitation, together; the
	 * invitation may have been used meanwhile (the lock was let go). */
	if ((r = cnl_store_tx_begin(c->api->store)) < 0)
		goto store_err;
	if (cnl_store_doc_get(c->api->store, "invite", digest, &d) < 0) {
		cnl_store_tx_rollback(c->api->store);
		goto refuse;
	}
	cnl_store_doc_done(&d);
	r = cnl_store_user_set_password(c->api->store, u.id, hash);
	while (r == 0 &&
	       (r = cnl_store_doc_list(c->api->store, "invite", u.id, NULL,
	                               CNL_STORE_LIST_MAX, all, &n)) == 0 &&
	       n > 0) {
		for (int i = 0; r == 0 && i < n; i++)
			r = cnl_store_doc_delete(c->api->store, "invite",
			                         all[i].id);
		cnl_store_docs_done(all, n);
	}
	if (r < 0 || (r = cnl_store_tx_commit(c->api->store)) < 0) {
		cnl_store_tx_rollback(c->api->store);
		goto store_err;
	}
	explicit_bzero(hash, sizeof(hash));
	cnl_api_session_reply(c, &u, resp);
	goto out;
store_err:
	cnl_api_store_error(c, resp, r, "invitation");
	goto out;
refuse:
	cnl_http_error(resp, 401, "unauthenticated",
	               "invalid, used or expired invitation: ask an "
	               "administrator for a new one (cnlab user invite)");
out:
	explicit_bzero(hash, sizeof(hash));
	json_decref(o);
	json_decref(body);
}

/* DELETE /v1/projects/{project}: only when nothing of it is active. */
void cnl_api_h_project_delete(void *call, struct cnl_http_request *req,
                              struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *key = cnl_http_param(req, "project");
	int r;

	/* An administrators' route: the project is not loaded for us. */
	snprintf(c->target, sizeof(c->target), "%s", key);
	r = cnl_store_project_get(c->api->store, key, &c->project);
	if (r < 0)
		r = cnl_store_project_get_by_name(c->api->store, key,
		                                  &c->project);
	if (r < 0) {
		cnl_api_store_error(c, resp, -CNL_ENOTFOUND, "project");
		return;
	}
	snprintf(c->target, sizeof(c->target), "%s", c->project.id);
	if (strcmp(c->project.name, CNL_API_ADMIN_PROJECT) == 0) {
		cnl_http_error(resp, 409, "conflict",
		               "the %s project holds the administrators and "
		               "node agents; it cannot be deleted",
		               CNL_API_ADMIN_PROJECT);
		return;
	}
	r = cnl_store_project_delete(c->api->store, c->project.id);
	if (r == -EBUSY) {
		cnl_http_error(resp, 409, "conflict",
		               "project %s still has unfinished jobs or "
		               "servers: cancel its jobs and delete its "
		               "servers first",
		               c->project.name);
		return;
	}
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "project");
		return;
	}
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:s}", "deleted", c->project.id, "name",
	                         c->project.name));
}

/* DELETE /v1/projects/{project}/members/{user}. */
void cnl_api_h_member_remove(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store_user u;
	int r;

	if (strcmp(c->project.name, CNL_API_ADMIN_PROJECT) == 0 &&
	    !c->is_admin) {
		cnl_http_error(resp, 403, "forbidden",
		               "only administrators manage the %s project",
		               CNL_API_ADMIN_PROJECT);
		return;
	}
	if (path_user(c, req, resp, &u) < 0)
		return;
	snprintf(c->target, sizeof(c->target), "%s:%s", c->project.id, u.id);
	if (strcmp(c->project.name, CNL_API_ADMIN_PROJECT) == 0 &&
	    strcmp(u.id, c->user.id) == 0) {
		cnl_http_error(resp, 409, "conflict",
		               "administrators cannot remove themselves from "
		               "the %s project",
		               CNL_API_ADMIN_PROJECT);
		return;
	}
	r = cnl_store_membership_delete(c->api->store, u.id, c->project.id);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "membership");
		return;
	}
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:s,s:s}", "project_id", c->project.id,
	                         "user_id", u.id, "user", u.name));
}

/* GET /v1/nodes/{node}: one node (by id or name) and what runs there. */
void cnl_api_h_node_get(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp)
{
	struct call *c = call;
	json_t *o = cnl_ctl_node_json(c->api->ctl, cnl_http_param(req, "node"),
	                              c->now_ms);

	if (!o) {
		cnl_http_error(resp, 404, "not_found", "node not found");
		return;
	}
	cnl_http_reply(resp, 200, o);
}

int cnl_api_agent_token(struct cnl_store *s, struct cnl_id_gen *ids,
                        const char *name, int64_t ttl_ms, int64_t now_ms,
                        char *ret_token, char *ret_id)
{
	struct cnl_store_project sys;
	struct cnl_store_user u = {0};
	struct cnl_store_membership m = {0};
	int r;

	if ((r = cnl_store_project_get_by_name(s, CNL_API_ADMIN_PROJECT,
	                                       &sys)) < 0)
		return r;
	if ((r = cnl_store_tx_begin(s)) < 0)
		return r;
	if (cnl_store_user_get_by_name(s, "agent", &u) < 0) {
		/* No password: the agent holds tokens only. */
		if ((r = cnl_id_new(ids, "usr", now_ms, u.id, sizeof(u.id))) <
		    0)
			goto fail;
		snprintf(u.name, sizeof(u.name), "agent");
		u.created_ms = now_ms;
		if ((r = cnl_store_user_create(s, &u)) < 0)
			goto fail;
	}
	memcpy(m.user_id, u.id, sizeof(m.user_id));
	memcpy(m.project_id, sys.id, sizeof(m.project_id));
	snprintf(m.role, sizeof(m.role), "agent");
	if ((r = cnl_store_membership_set(s, &m)) < 0 ||
	    (r = cnl_api_token_issue(s, u.id, name, now_ms + ttl_ms, now_ms,
	                             ret_token, ret_id)) < 0)
		goto fail;
	return cnl_store_tx_commit(s);
fail:
	cnl_store_tx_rollback(s);
	return r;
}

/* POST /v1/nodes/join-tokens {"node", "expires_in_hours"}. */
void cnl_api_h_join_token(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	static const char *const fields[] = {"node", "expires_in_hours", NULL};
	struct call *c = call;
	char token[CNL_AUTH_TOKEN_MAX], digest[CNL_AUTH_DIGEST_MAX], err[256];
	char name[CNL_STORE_NAME_MAX];
	const char *node = NULL;
	int64_t hours = 24;
	json_t *body;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (cnl_json_get_string(body, "node", false, &node, err, sizeof(err)) <
	        0 ||
	    cnl_json_get_int(body, "expires_in_hours", false, 1, 24 * 30,
	                     &hours, err, sizeof(err)) < 0) {
		bad(resp, err);
		goto out;
	}
	if (node && (!cnl_api_valid_name(node) || strlen(node) > 40)) {
		bad(resp, "field \"node\": 1..40 of A-Z a-z 0-9 . _ -");
		goto out;
	}
	/* Unique among the agent's tokens: the node and the time. */
	snprintf(name, sizeof(name), "join-%s-%lld", node ? node : "any",
	         (long long)c->now_ms);
	r = cnl_api_agent_token(c->api->store, &c->api->ids, name,
	                        hours * 3600000, c->now_ms, token, digest);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "join token");
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "token:%.12s", digest);
	cnl_http_reply(
	    resp, 201,
	    json_pack("{s:s,s:s,s:s,s:o,s:o}", "id", digest, "name", name,
	              "token", token, "node",
	              node ? json_string(node) : json_null(), "expires_at",
	              cnl_api_time_json(c->now_ms + hours * 3600000)));
	explicit_bzero(token, sizeof(token));
out:
	json_decref(body);
}
