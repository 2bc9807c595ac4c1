/*
 * api_nodeid.c - node identity: join tokens, the credential each node
 * holds, and the check in front of every node route.
 *
 * A join token ("cnlj_…") is made by an administrator for one node name
 * (POST /v1/nodes/join-tokens), lives a short while (1 h by default, at
 * most 72 h) and is good for one registration of that name: POST
 * /v1/nodes with it registers the node, kills every earlier credential
 * of the node (a re-join), deletes the join token and answers with the
 * node's own credential ("cnln_…", in "credential").  Both are stored as
 * the SHA-256 of the secret only, as API tokens are, in documents whose
 * parent is the node's name:
 *
 *   node_join  {node, created_ms, expires_ms}     deleted when used
 *   node_cred  {node, created_ms, expires_ms}     expires_ms 0: until
 *                                                 rotated or revoked
 *
 * Every route of the node protocol (CNL_PERM_AGENT in api.c's table)
 * takes a node credential only: no administrator, no API token of a
 * user.  The credential names its node; a path's {node} must be that
 * node's id (403 otherwise), and the handlers check that any work named
 * is assigned to it (the fencing check, 409).  POST /v1/nodes takes a
 * join token (for its node's name) or the node's credential (an agent
 * registering again after a restart, same name).
 *
 * Rotation (POST /v1/nodes/{node}/credential): a new credential; the
 * others of the node stay valid for node_credential_overlap (5 min by
 * default) so requests in flight on the agent's other threads succeed,
 * then die.  Revocation (POST /v1/nodes/{node}/revoke, admin): every
 * credential and join token of the node is deleted at once, and the node
 * is lost at once (cnl_ctl_node_revoke): no new work, its work requeued
 * or ended as a lost node's.  Its agent, refused, stops that work when
 * its lease runs out.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cnlab/errors.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "server/api-internal.h"
#include "server/auth.h"
#include "wire/node.h"

#define KIND_JOIN "node_join"
#define KIND_CRED "node_cred"

/* A secret: @prefix and the random part of an API token. */
static int secret_new(const char *prefix, char out[CNL_API_NODE_SECRET_MAX],
                      char ret_digest[CNL_AUTH_DIGEST_MAX])
{
	char t[CNL_AUTH_TOKEN_MAX];
	int r;

	if ((r = cnl_auth_token_new(t, sizeof(t))) < 0)
		return r;
	snprintf(out, CNL_API_NODE_SECRET_MAX, "%s%s", prefix,
	         t + strlen(CNL_AUTH_TOKEN_PREFIX));
	explicit_bzero(t, sizeof(t));
	return cnl_auth_token_digest(out, ret_digest);
}

/* Whether @s has the form secret_new(@prefix) gives. */
static bool secret_form(const char *s, const char *prefix)
{
	size_t pl = strlen(prefix), tl = strlen(CNL_AUTH_TOKEN_PREFIX);
	char t[CNL_AUTH_TOKEN_MAX];
	bool ok;

	if (strncmp(s, prefix, pl) != 0 ||
	    strnlen(s + pl, CNL_AUTH_TOKEN_MAX) != CNL_AUTH_TOKEN_LEN - tl)
		return false;
	snprintf(t, sizeof(t), "%s%s", CNL_AUTH_TOKEN_PREFIX, s + pl);
	ok = cnl_auth_token_check(t) == 0;
	explicit_bzero(t, sizeof(t));
	return ok;
}

static int secret_save(struct cnl_store *s, const char *kind,
                       const char *digest, const char *node, int64_t now_ms,
                       int64_t expires_ms, bool create)
{
	struct cnl_store_doc d = {0};
	json_t *o;
	int r;

	snprintf(d.kind, sizeof(d.kind), "%s", kind);
	snprintf(d.id, sizeof(d.id), "%s", digest);
	snprintf(d.parent, sizeof(d.parent), "%s", node);
	snprintf(d.name, sizeof(d.name), "%.32s", digest);
	o = json_pack("{s:s,s:I,s:I}", "node", node, "created_ms",
	              (json_int_t)now_ms, "expires_ms", (json_int_t)expires_ms);
	d.body = json_dumps(o, JSON_COMPACT);
	d.updated_ms = now_ms;
	json_decref(o);
	r = d.body ? cnl_store_doc_put(s, &d, create) : -ENOMEM;
	free(d.body);
	return r;
}

/*
 * The document of @secret (of @kind): its node in @node and its end in
 * *@ret_exp, 0; -CNL_ENOTFOUND when there is none or it has expired
 * (then it is deleted).
 */
static int secret_find(struct cnl_store *s, const char *kind,
                       const char *secret, int64_t now_ms,
                       char digest[CNL_AUTH_DIGEST_MAX],
                       char node[CNL_STORE_NAME_MAX], int64_t *ret_exp)
{
	struct cnl_store_doc d = {0};
	json_t *o;
	int64_t exp;
	int r;

	if ((r = cnl_auth_token_digest(secret, digest)) < 0)
		return r;
	if ((r = cnl_store_doc_get(s, kind, digest, &d)) < 0)
		return r;
	o = json_loads(d.body, 0, NULL);
	exp = json_integer_value(json_object_get(o, "expires_ms"));
	snprintf(node, CNL_STORE_NAME_MAX, "%.*s", CNL_STORE_NAME_MAX - 1,
	         d.parent);
	json_decref(o);
	cnl_store_doc_done(&d);
	if (exp && exp <= now_ms) {
		cnl_store_doc_delete(s, kind, digest);
		return -CNL_ENOTFOUND;
	}
	*ret_exp = exp;
	return 0;
}

/* Delete the documents of @kind of node @node but @keep (NULL: none).
 * With @overlap_ms > 0, those that would outlive now + @overlap_ms end
 * then instead. */
static int node_secrets_end(struct cnl_store *s, const char *kind,
                            const char *node, const char *keep, int64_t now_ms,
                            int64_t overlap_ms)
{
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	char after[CNL_STORE_DOC_ID_MAX] = "";
	int n, r;

	do {
		r = cnl_store_doc_list(s, kind, node, after[0] ? after : NULL,
		                       CNL_STORE_LIST_MAX, d, &n);
		if (r < 0)
			break;
		for (int i = 0; i < n && r >= 0; i++) {
			json_t *o = json_loads(d[i].body, 0, NULL);
			int64_t exp = json_integer_value(
			    json_object_get(o, "expires_ms"));

			json_decref(o);
			if (keep && strcmp(d[i].id, keep) == 0)
				continue;
			if (overlap_ms > 0 && (exp == 0 || exp > now_ms)) {
				if (exp == 0 || exp > now_ms + overlap_ms)
					r = secret_save(s, kind, d[i].id, node,
					                d[i].updated_ms,
					                now_ms + overlap_ms,
					                false);
				continue;
			}
			r = cnl_store_doc_delete(s, kind, d[i].id);
		}
		if (n > 0)
			snprintf(after, sizeof(after), "%s", d[n - 1].id);
		cnl_store_docs_done(d, n);
	} while (r >= 0 && n == CNL_STORE_LIST_MAX);
	free(d);
	return r < 0 ? r : 0;
}

int cnl_api_node_credential_issue(struct cnl_store *s, const char *node,
                                  int64_t now_ms,
                                  char ret_secret[CNL_API_NODE_SECRET_MAX])
{
	char secret[CNL_API_NODE_SECRET_MAX], digest[CNL_AUTH_DIGEST_MAX];
	int r;

	if ((r = secret_new(CNL_API_NODE_PREFIX, secret, digest)) < 0)
		return r;
	r = secret_save(s, KIND_CRED, digest, node, now_ms, 0, true);
	if (r == 0)
		memcpy(ret_secret, secret, sizeof(secret));
	explicit_bzero(secret, sizeof(secret));
	return r;
}

int cnl_api_node_forget(struct cnl_store *s, const char *node)
{
	int r = node_secrets_end(s, KIND_CRED, node, NULL, 0, 0);

	return r < 0 ? r : node_secrets_end(s, KIND_JOIN, node, NULL, 0, 0);
}

/*
 * Who a node route's caller is: a node credential (c->node, c->cred),
 * or, where @join, a join token (c->node, c->join).  0, or -1 with 401
 * (an unknown, expired or dead secret) or 403 (a user's credential) in
 * @resp.
 */
static int node_authenticate(struct call *c, struct cnl_http_request *req,
                             struct cnl_http_response *resp, bool join)
{
	const char *h = cnl_http_header(req, "Authorization");
	int64_t exp;
	int r;

	if (h && strncasecmp(h, "Bearer ", 7) == 0)
		for (h += 7; *h == ' ';)
			h++;
	if (h && secret_form(h, CNL_API_NODE_PREFIX)) {
		r = secret_find(c->api->store, KIND_CRED, h, c->now_ms, c->cred,
		                c->node, &exp);
	} else if (h && secret_form(h, CNL_API_JOIN_PREFIX)) {
		if (!join) {
			cnl_http_error(resp, 401, "unauthenticated",
			               "a join token only registers its node "
			               "(POST /v1/nodes)");
			return -1;
		}
		r = secret_find(c->api->store, KIND_JOIN, h, c->now_ms, c->join,
		                c->node, &exp);
	} else {
		/* A user (administrators too): known, but not a node. */
		if (cnl_api_authenticate(c, req, resp) < 0)
			return -1;
		cnl_http_error(resp, 403, "forbidden",
		               "node routes take a node's own credential (an "
		               "administrator makes a join token: cnlab node "
		               "join-token --node NAME)");
		return -1;
	}
	if (r == -CNL_ENOTFOUND) {
		cnl_http_error(resp, 401, "unauthenticated",
		               "invalid, expired, used or revoked node "
		               "credential");
		return -1;
	}
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "node credential");
		return -1;
	}
	c->authed = true;
	c->is_agent = true;
	snprintf(c->actor, sizeof(c->actor), "node:%s", c->node);
	return 0;
}

int cnl_api_node_authorize(struct call *c, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	const char *id = cnl_http_param(req, "node");
	char name[CNL_STORE_NAME_MAX];

	if (node_authenticate(c, req, resp,
	                      strcmp(c->route->pattern, "/v1/nodes") == 0) < 0)
		return -1;
	if (!id)
		return 0;
	if (cnl_ctl_node_name(c->api->ctl, id, name, sizeof(name)) < 0 ||
	    strcmp(name, c->node) != 0) {
		cnl_http_error(resp, 403, "forbidden",
		               "this credential is node %s's; it acts for no "
		               "other node",
		               c->node);
		return -1;
	}
	return 0;
}

/*
 * After a registration the call was authorized for (c->node): the name
 * registered must be the credential's node.  0, or -1 with 403.
 */
int cnl_api_node_register_check(struct call *c, const char *name,
                                struct cnl_http_response *resp)
{
	if (strcmp(name, c->node) == 0)
		return 0;
	cnl_http_error(resp, 403, "forbidden",
	               c->join[0] ? "this join token registers node %s only"
	                          : "this credential is node %s's; it "
	                            "registers no other node",
	               c->node);
	return -1;
}

int cnl_api_node_joined(struct call *c, char ret[CNL_API_NODE_SECRET_MAX])
{
	struct cnl_store *s = c->api->store;
	int r;

	if ((r = cnl_store_tx_begin(s)) < 0)
		return r;
	if ((r = cnl_store_doc_delete(s, KIND_JOIN, c->join)) < 0 ||
	    (r = node_secrets_end(s, KIND_CRED, c->node, NULL, 0, 0)) < 0 ||
	    (r = cnl_api_node_credential_issue(s, c->node, c->now_ms, ret)) <
	        0) {
		cnl_store_tx_rollback(s);
		return r;
	}
	return cnl_store_tx_commit(s);
}

int cnl_api_join_token_make(struct cnl_store *s, const char *node, int64_t now,
                            int64_t ttl_ms, char token[CNL_API_NODE_SECRET_MAX])
{
	char digest[CNL_AUTH_DIGEST_MAX];
	int r;

	if ((r = secret_new(CNL_API_JOIN_PREFIX, token, digest)) == 0)
		r = secret_save(s, KIND_JOIN, digest, node, now, now + ttl_ms,
		                true);
	return r;
}

/* POST /v1/nodes/join-tokens {"node", "expires_in_hours" |
 * "expires_in_seconds"}. */
void cnl_api_h_join_token(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	static const char *const fields[] = {"node", "expires_in_hours",
	                                     "expires_in_seconds", NULL};
	struct call *c = call;
	char token[CNL_API_NODE_SECRET_MAX], digest[CNL_AUTH_DIGEST_MAX];
	char err[256];
	const char *node = NULL;
	int64_t hours = 0, secs = 0, ttl;
	json_t *body;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (cnl_json_get_string(body, "node", true, &node, err, sizeof(err)) <
	        0 ||
	    cnl_json_get_int(body, "expires_in_hours", false, 1,
	                     CNL_API_JOIN_MAX_MS / 3600000, &hours, err,
	                     sizeof(err)) < 0 ||
	    cnl_json_get_int(body, "expires_in_seconds", false, 1,
	                     CNL_API_JOIN_MAX_MS / 1000, &secs, err,
	                     sizeof(err)) < 0) {
		cnl_api_bad(resp, err);
		goto out;
	}
	if (!cnl_api_valid_name(node) || strlen(node) > 40) {
		cnl_api_bad(resp, "field \"node\": 1..40 of A-Z a-z 0-9 . _ -");
		goto out;
	}
	if (hours && secs) {
		cnl_api_bad(resp, "field \"expires_in_seconds\": give it or "
		                  "\"expires_in_hours\", not both");
		goto out;
	}
	ttl = secs ? secs * 1000 : hours ? hours * 3600000 : 3600000;
	if ((r = secret_new(CNL_API_JOIN_PREFIX, token, digest)) == 0)
		r = secret_save(c->api->store, KIND_JOIN, digest, node,
		                c->now_ms, c->now_ms + ttl, true);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "join token");
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "%s", node);
	cnl_http_reply(resp, 201,
	               json_pack("{s:s,s:s,s:s,s:o}", "id", digest, "token",
	                         token, "node", node, "expires_at",
	                         cnl_api_time_json(c->now_ms + ttl)));
	explicit_bzero(token, sizeof(token));
out:
	json_decref(body);
}

/* POST /v1/nodes/{node}/credential: a new credential for the caller's
 * node; the others end after the overlap. */
void cnl_api_h_node_credential(void *call, struct cnl_http_request *req,
                               struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store *s = c->api->store;
	struct cnl_wire_credential m = {0};
	char digest[CNL_AUTH_DIGEST_MAX];
	int r;

	snprintf(c->target, sizeof(c->target), "%s", c->node);
	if ((r = cnl_store_tx_begin(s)) < 0)
		goto fail;
	if ((r = cnl_api_node_credential_issue(s, c->node, c->now_ms,
	                                       m.credential)) < 0 ||
	    (r = cnl_auth_token_digest(m.credential, digest)) < 0 ||
	    (r = node_secrets_end(s, KIND_CRED, c->node, digest, c->now_ms,
	                          c->api->cred_overlap_ms)) < 0) {
		cnl_store_tx_rollback(s);
		goto fail;
	}
	if ((r = cnl_store_tx_commit(s)) < 0)
		goto fail;
	m.old_expires_ms = c->now_ms + c->api->cred_overlap_ms;
	cnl_log(CNL_LOG_INFO, "node credential rotated", "node=%s", c->node);
	cnl_http_reply(resp, 200, cnl_wire_credential_encode(&m));
	explicit_bzero(&m, sizeof(m));
	return;
fail:
	cnl_api_store_error(c, resp, r, "node credential");
}

/* POST /v1/nodes/{node}/revoke (admin): the node's credentials and join
 * tokens die now, and the node is lost. */
void cnl_api_h_node_revoke(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *key = cnl_http_param(req, "node");
	char name[CNL_STORE_NAME_MAX];
	bool known;
	int r;

	known = cnl_ctl_node_name(c->api->ctl, key, name, sizeof(name)) == 0;
	if (!known)
		snprintf(name, sizeof(name), "%s", key);
	snprintf(c->target, sizeof(c->target), "%s", name);
	if ((r = cnl_store_tx_begin(c->api->store)) < 0 ||
	    (r = cnl_api_node_forget(c->api->store, name)) < 0 ||
	    (r = cnl_store_tx_commit(c->api->store)) < 0) {
		cnl_store_tx_rollback(c->api->store);
		cnl_api_store_error(c, resp, r, "node credential");
		return;
	}
	if (!known) {
		/* Its join tokens, if any, are gone too. */
		cnl_http_error(resp, 404, "not_found",
		               "no node %s is registered", key);
		return;
	}
	cnl_ctl_node_revoke(c->api->ctl, name, c->now_ms);
	cnl_log(CNL_LOG_WARN, "node revoked", "node=%s", name);
	cnl_http_reply(resp, 200,
	               cnl_ctl_node_json(c->api->ctl, name, c->now_ms));
}
