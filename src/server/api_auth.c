/*
 * api_auth.c - identity routes: log in, redeem an invitation, who am I,
 * and API tokens (shown once, stored as their SHA-256).
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

/*
 * Login, before the lock: read the user's hash (under the lock, briefly),
 * then check the password against it (~0.1 s of scrypt) without it.
 * Unknown users and invited ones without a password cost one scrypt too
 * and get the same answer.
 */
void cnl_api_prepare_login(struct call *c, struct cnl_http_request *req)
{
	static const char *const fields[] = {"user", "password", NULL};
	struct cnl_store_user u;
	const char *name, *password;
	json_t *body = NULL;
	char err[256];
	bool found;
	int r;

	if (!(body = cnl_api_peek_body(req, fields)) ||
	    cnl_json_get_string(body, "user", true, &name, err, sizeof(err)) <
	        0 ||
	    cnl_json_get_string(body, "password", true, &password, err,
	                        sizeof(err)) < 0)
		goto out; /* the handler says what is wrong */
	pthread_mutex_lock(&c->api->mu);
	r = strlen(name) < CNL_STORE_NAME_MAX && name[0]
	        ? cnl_store_user_get_by_name(c->api->store, name, &u)
	        : -CNL_ENOTFOUND;
	pthread_mutex_unlock(&c->api->mu);
	/* A store that cannot answer is not a wrong password: the handler
	 * says so (503), after the same work as a check. */
	c->slow.store_err = r < 0 && r != -CNL_ENOTFOUND ? r : 0;
	found = r == 0 && u.password_hash[0]; /* invited: none yet */
	c->slow.password_ok =
	    cnl_auth_password_verify(
	        password, found ? u.password_hash : c->api->dummy_hash) == 0 &&
	    found;
	if (c->slow.password_ok)
		memcpy(c->slow.user_id, u.id, sizeof(c->slow.user_id));
out:
	json_decref(body);
}

void cnl_api_h_login(void *call, struct cnl_http_request *req,
                     struct cnl_http_response *resp)
{
	static const char *const fields[] = {"user", "password", NULL};
	struct call *c = call;
	struct cnl_store_user u;
	const char *name, *password;
	json_t *body;
	char err[256];
	int r = 0;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (cnl_json_get_string(body, "user", true, &name, err, sizeof(err)) <
	        0 ||
	    cnl_json_get_string(body, "password", true, &password, err,
	                        sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		goto out;
	}
	snprintf(c->actor, sizeof(c->actor), "%s", name);
	snprintf(c->target, sizeof(c->target), "%s", name);
	/* The password was checked before the lock (and the user may have
	 * gone meanwhile). */
	if (c->slow.store_err) {
		cnl_api_store_error(c, resp, c->slow.store_err, "login");
		goto out;
	}
	if (!c->slow.password_ok ||
	    (r = cnl_store_user_get(c->api->store, c->slow.user_id, &u)) < 0) {
		if (c->slow.password_ok && r != -CNL_ENOTFOUND) {
			cnl_api_store_error(c, resp, r, "login");
			goto out;
		}
		cnl_http_error(resp, 401, "unauthenticated",
		               "invalid user name or password");
		goto out;
	}
	snprintf(c->actor, sizeof(c->actor), "%s", u.id);
	snprintf(c->target, sizeof(c->target), "%s", u.id);
	cnl_api_session_reply(c, &u, resp);
out:
	json_decref(body);
}

void cnl_api_h_whoami(void *call, struct cnl_http_request *req,
                      struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store_membership m[CNL_STORE_LIST_MAX];
	struct cnl_store_project p;
	json_t *o = cnl_api_user_json(&c->user), *list = json_array();
	int n = 0;

	if (cnl_store_membership_list(c->st, c->user.id, NULL,
	                              CNL_STORE_LIST_MAX, m, &n) == 0)
		for (int i = 0; i < n; i++)
			if (cnl_store_project_get(c->st, m[i].project_id, &p) ==
			    0)
				json_array_append_new(
				    list,
				    json_pack("{s:s,s:s,s:s}", "project_id",
				              p.id, "project", p.name, "role",
				              m[i].role));
	json_object_set_new(o, "admin", json_boolean(c->is_admin));
	json_object_set_new(o, "memberships", list);
	cnl_http_reply(resp, 200, o);
}

/* API tokens: stored under the SHA-256 of the secret, which is shown once. */
int cnl_api_token_issue(struct cnl_store *s, const char *user_id,
                        const char *name, int64_t expires_ms, int64_t now_ms,
                        char *ret_token, char *ret_id)
{
	struct cnl_store_doc d = {0};
	char token[CNL_AUTH_TOKEN_MAX], digest[CNL_AUTH_DIGEST_MAX];
	json_t *o;
	int r;

	if (cnl_auth_token_new(token, sizeof(token)) < 0 ||
	    cnl_auth_token_digest(token, digest) < 0)
		return -EIO;
	snprintf(d.kind, sizeof(d.kind), "token");
	snprintf(d.id, sizeof(d.id), "%s", digest);
	snprintf(d.parent, sizeof(d.parent), "%s", user_id);
	snprintf(d.name, sizeof(d.name), "%s", name);
	o = json_pack("{s:s,s:s,s:I,s:I}", "user_id", user_id, "name", name,
	              "created_ms", (json_int_t)now_ms, "expires_ms",
	              (json_int_t)expires_ms);
	d.body = json_dumps(o, JSON_COMPACT);
	d.updated_ms = now_ms;
	json_decref(o);
	r = d.body ? cnl_store_doc_put(s, &d, true) : -ENOMEM;
	free(d.body);
	if (r == 0) {
		memcpy(ret_token, token, CNL_AUTH_TOKEN_MAX);
		memcpy(ret_id, digest, CNL_AUTH_DIGEST_MAX);
	}
	explicit_bzero(token, sizeof(token));
	return r;
}

void cnl_api_h_tokens_create(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	static const char *const fields[] = {"name", "expires_in_days", NULL};
	struct call *c = call;
	char token[CNL_AUTH_TOKEN_MAX], digest[CNL_AUTH_DIGEST_MAX], err[256];
	const char *name;
	int64_t days = 90, exp;
	json_t *body;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	/* A peer site's service user (api_peers.c) has the one token its
	 * grant made, which a revoke ends: it makes no others. */
	if (strncmp(c->user.name, "peer-", 5) == 0 &&
	    !c->user.password_hash[0]) {
		cnl_http_error(resp, 403, "forbidden",
		               "a peer site's service user makes no tokens");
		goto out;
	}
	if (!(name = cnl_api_get_name(body, "name", resp)))
		goto out;
	if (cnl_json_get_int(body, "expires_in_days", false, 0, 3650, &days,
	                     err, sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		goto out;
	}
	exp = days ? c->now_ms + days * 86400000 : 0;
	r = cnl_api_token_issue(c->api->store, c->user.id, name, exp, c->now_ms,
	                        token, digest);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "token");
		goto out;
	}
	/* The audit names the token by the first 12 hex of its digest. */
	snprintf(c->target, sizeof(c->target), "token:%.12s", digest);
	cnl_http_reply(resp, 201,
	               json_pack("{s:s,s:s,s:s,s:o}", "id", digest, "name",
	                         name, "token", token, "expires_at",
	                         exp ? cnl_api_time_json(exp) : json_null()));
	explicit_bzero(token, sizeof(token));
out:
	json_decref(body);
}

static json_t *token_item(struct call *c, const struct cnl_store_doc *d,
                          json_t *body)
{
	int64_t exp = json_integer_value(json_object_get(body, "expires_ms"));

	return json_pack("{s:s,s:s,s:o,s:o}", "id", d->id, "name", d->name,
	                 "created_at", cnl_api_time_json(d->updated_ms),
	                 "expires_at",
	                 exp ? cnl_api_time_json(exp) : json_null());
}

void cnl_api_h_tokens_list(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call *c = call;

	cnl_api_doc_page(c, req, resp, "token", c->user.id, "token",
	                 token_item);
}

void cnl_api_h_token_revoke(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *id = cnl_http_param(req, "token");
	struct cnl_store_doc d = {0};
	int r;

	snprintf(c->target, sizeof(c->target), "token:%.12s", id);
	r = cnl_store_doc_get(c->api->store, "token", id, &d);
	/* Someone else's token is as absent as a missing one. */
	if (r == 0 && strcmp(d.parent, c->user.id) != 0 && !c->is_admin)
		r = -CNL_ENOTFOUND;
	cnl_store_doc_done(&d);
	if (r == 0)
		r = cnl_store_doc_delete(c->api->store, "token", id);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "token");
		return;
	}
	cnl_http_reply(resp, 200, json_pack("{s:s}", "revoked", id));
}

#define REDEEM_PASSWORD_MIN 8 /* a password users choose themselves */

/* POST /v1/auth/redeem {"invite", "password"}: set the password once. */
/*
 * Redeem, before the lock: only for an invitation that exists and has not
 * expired (checked under the lock, briefly), hash the new password without
 * it, so that garbage invitations cost no scrypt.
 */
void cnl_api_prepare_redeem(struct call *c, struct cnl_http_request *req)
{
	static const char *const fields[] = {"invite", "password", NULL};
	struct cnl_store_doc d = {0};
	char digest[CNL_AUTH_DIGEST_MAX], err[256];
	const char *invite, *password;
	json_t *body = NULL, *o = NULL;
	int64_t exp = 0;
	int r;

	c->slow.hash_r = -EINVAL;
	if (!(body = cnl_api_peek_body(req, fields)) ||
	    cnl_json_get_string(body, "invite", true, &invite, err,
	                        sizeof(err)) < 0 ||
	    cnl_json_get_string(body, "password", true, &password, err,
	                        sizeof(err)) < 0 ||
	    strlen(password) < REDEEM_PASSWORD_MIN ||
	    cnl_auth_token_check(invite) < 0 ||
	    cnl_auth_token_digest(invite, digest) < 0)
		goto out;
	pthread_mutex_lock(&c->api->mu);
	r = cnl_store_doc_get(c->api->store, "invite", digest, &d);
	pthread_mutex_unlock(&c->api->mu);
	if (r < 0)
		goto out;
	o = json_loads(d.body, 0, NULL);
	exp = json_integer_value(json_object_get(o, "expires_ms"));
	cnl_store_doc_done(&d);
	if (exp <= c->now_ms)
		goto out;
	c->slow.hash_r = cnl_auth_password_hash_cost(
	    password, c->api->scrypt_ln, c->slow.hash, sizeof(c->slow.hash));
out:
	json_decref(o);
	json_decref(body);
}

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
	/* A disabled user's pending invitation sets no password: the
	 * account stays as the administrator left it. */
	if (cnl_api_user_disabled(c->api->store, u.id)) {
		cnl_http_error(resp, 401, "unauthenticated",
		               "account disabled: ask an administrator (cnlab "
		               "user enable %s)",
		               u.name);
		goto out;
	}
	if (strlen(password) < REDEEM_PASSWORD_MIN) {
		cnl_api_bad(resp,
		            "field \"password\": must be at least 8 bytes");
		goto out;
	}
	/* Hashed before the lock (cnl_api_prepare_redeem). */
	if (c->slow.hash_r < 0 || !c->slow.hash[0]) {
		cnl_api_bad(resp, "field \"password\": must be 8..1024 bytes");
		goto out;
	}
	memcpy(hash, c->slow.hash, sizeof(hash));
	/* The password and the end of every invitation, together; the
	 * invitation may have been used since it was checked. */
	if ((r = cnl_store_tx_begin(c->api->store)) < 0)
		goto store_err;
	if (cnl_store_doc_get(c->api->store, "invite", digest, &d) < 0) {
		cnl_store_tx_rollback(c->api->store);
		goto refuse;
	}
	cnl_store_doc_done(&d);
	r = cnl_store_user_set_password(c->api->store, u.id, hash);
	/* A new password ends the sessions of the old one: a reset is how
	 * a user who lost their password (or had it stolen) gets back. */
	if (r == 0)
		r = cnl_api_sessions_end(c->api->store, u.id);
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
