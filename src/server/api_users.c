/*
 * api_users.c - users (administrators): create (with a password or an
 * invitation), list, show, and invite again (a password reset).
 *
 * Invitations.  An invitation is a one-time token ("cnl_..." like API
 * tokens, 30 bytes of randomness), shown once and stored only as its
 * SHA-256 digest, as a document
 *   invite  id = digest, parent = user id   {"user_id", "expires_ms"}
 * POST /v1/auth/redeem (api_auth.c) takes the token and a new password,
 * sets the password, deletes every invitation of the user (one use), and
 * answers like a login.  An old password stays valid until an invitation
 * is redeemed, so a stray invitation cannot lock a user out.
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
#include <time.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/json.h"
#include "common/label.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "sched/sched.h"
#include "server/api-internal.h"
#include "server/auth.h"
#include "server/oidc.h"
#include "server/shape.h"

/* Create a user, before the lock: hash the password given, if any. */
void cnl_api_prepare_user_create(struct call *c, struct cnl_http_request *req)
{
	static const char *const fields[] = {"name", "password", "invite",
	                                     NULL};
	const char *password;
	json_t *body = NULL;
	char err[256];

	c->slow.hash_r = -EINVAL;
	if ((body = cnl_api_peek_body(req, fields)) &&
	    cnl_json_get_string(body, "password", true, &password, err,
	                        sizeof(err)) > 0 &&
	    strlen(password) <= CNL_AUTH_PASSWORD_MAX)
		c->slow.hash_r = cnl_auth_password_hash_cost(
		    password, c->api->scrypt_ln, c->slow.hash,
		    sizeof(c->slow.hash));
	json_decref(body);
}

void cnl_api_h_users_create(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	static const char *const fields[] = {"name", "password", "invite",
	                                     NULL};
	struct call *c = call;
	struct cnl_store_user u = {0};
	const char *name, *password = NULL;
	char token[CNL_AUTH_TOKEN_MAX], err[256];
	bool invite = false;
	int64_t exp = 0;
	json_t *body, *o;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(name = cnl_api_get_name(body, "name", resp)))
		goto out;
	if (cnl_json_get_bool(body, "invite", false, &invite, err,
	                      sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		goto out;
	}
	if (invite == !!json_object_get(body, "password")) {
		cnl_http_error(resp, 400, "bad_request",
		               "give exactly one of \"password\" and "
		               "\"invite\": true (a one-time invitation the "
		               "user redeems at cnlab login)");
		goto out;
	}
	if (!invite &&
	    !(password = cnl_api_get_string(body, "password",
	                                    CNL_AUTH_PASSWORD_MAX + 1, resp)))
		goto out;
	snprintf(c->target, sizeof(c->target), "%s", name);
	/* Hashed before the lock (cnl_api_prepare_user_create). */
	r = password ? c->slow.hash_r : 0;
	if (password && r == 0)
		memcpy(u.password_hash, c->slow.hash, sizeof(u.password_hash));
	if (r < 0 || cnl_api_new_id(c, "usr", u.id) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot create user");
		goto out;
	}
	snprintf(u.name, sizeof(u.name), "%s", name);
	u.created_ms = c->now_ms;
	/* The user and the invitation, together. */
	if ((r = cnl_store_tx_begin(c->api->store)) == 0) {
		r = cnl_store_user_create(c->api->store, &u);
		if (r == 0 && invite)
			r = cnl_api_invite_issue(c->api->store, u.id, c->now_ms,
			                         token, &exp);
		if (r == 0)
			r = cnl_store_tx_commit(c->api->store);
		if (r < 0)
			cnl_store_tx_rollback(c->api->store);
	}
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "user");
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "%s", u.id);
	o = cnl_api_user_json(&u);
	if (invite) {
		json_object_set_new(o, "invite",
		                    cnl_api_invite_json(token, exp));
		explicit_bzero(token, sizeof(token));
	}
	cnl_http_reply(resp, 201, o);
out:
	json_decref(body);
}

void cnl_api_h_users_list(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store_user *u;
	const char *after;
	int limit, n = 0, r;
	json_t *items;

	if (cnl_api_get_page(req, resp, &limit, &after) < 0)
		return;
	u = cnl_xcalloc((size_t)limit, sizeof(*u));
	if ((r = cnl_store_user_list(c->api->store, after, limit, u, &n)) < 0) {
		free(u);
		cnl_api_store_error(c, resp, r, "user");
		return;
	}
	items = json_array();
	for (int i = 0; i < n; i++) {
		json_t *o = cnl_api_user_json(&u[i]);

		cnl_api_user_state_json(c->api->store, u[i].id, o);
		json_array_append_new(items, o);
	}
	cnl_http_reply(
	    resp, 200,
	    cnl_api_page_json(items, n, limit, n ? u[n - 1].id : NULL));
	free(u);
}

#define INVITE_TTL_MS (7LL * 86400000) /* a week to accept */

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

	if (cnl_api_path_user(c, req, resp, &u) < 0)
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
	cnl_api_user_state_json(c->api->store, u.id, o);
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

	if (cnl_api_path_user(c, req, resp, &u) < 0)
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
