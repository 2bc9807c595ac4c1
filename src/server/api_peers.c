/*
 * api_peers.c - federation's trust, set by each site's administrator
 * (federate.h):
 *
 *   POST   /v1/peers/grants {"name", "project"}   this site lets peer NAME
 *          send work to PROJECT: a service user "peer-NAME" (no password,
 *          so no login), a member of that project only, and a token for
 *          it, shown once (201 {"name", "user", "project", "token"})
 *   GET    /v1/peers/grants                       the grants
 *   DELETE /v1/peers/grants/{peer}                the grant revoked: the
 *          token deleted, the membership removed, the peer's work here
 *          cancelled
 *   POST   /v1/peers {"name", "url", "token", "ca"}  a peer this site
 *          forwards work to (201; 200 replacing one of that name, whose
 *          forwarded jobs carry on with it): its URL (https, or http on the
 * loopback only: the token must not cross a network in clear), the PEM CA its
 * certificate must chain to (absent: the system's), and the token its grant
 * gave, sealed with the platform's secrets key (bound to the URL and CA: a row
 * pointed elsewhere by someone without the key does not open) GET    /v1/peers
 * the peers, with the jobs forwarded there, the last answer and the last error
 *   DELETE /v1/peers/{peer}                       refused (409) while jobs
 *          forwarded there have not ended
 *
 * Documents: "peer" (id: the name) {"url", "ca", "token_sealed", "key_id"};
 * "peer_grant" (id: the name) {"user_id", "user", "project_id",
 * "project"}.  No reply carries a token but the grant's own.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/util.h"
#include "server/api-internal.h"
#include "server/auth.h"
#include "server/secrets.h"

#define PEER_CA_MAX    (64 * 1024)
#define PEER_TOKEN_MAX 4096
#define PEER_URL_MAX   500

static void user_name(const char *peer, char *out, size_t len)
{
	snprintf(out, len, "peer-%s", peer);
}

/* ---- this site's grants to peers ----------------------------------------- */

/* Delete every token and membership of user @uid: 0 or a store error. */
static int purge_user(struct call *c, const char *uid)
{
	struct cnl_store_doc *d = cnl_xcalloc(64, sizeof(*d));
	struct cnl_store_membership *m = cnl_xcalloc(64, sizeof(*m));
	int n, r;

	do { /* the list's first page again, until none is left */
		n = 0;
		r = cnl_store_doc_list(c->api->store, "token", uid, NULL, 64, d,
		                       &n);
		for (int i = 0; r == 0 && i < n; i++)
			r = cnl_store_doc_delete(c->api->store, "token",
			                         d[i].id);
		for (int i = 0; i < n; i++)
			cnl_store_doc_done(&d[i]);
	} while (r == 0 && n > 0);
	do {
		n = 0;
		r = cnl_store_membership_list(c->api->store, uid, NULL, 64, m,
		                              &n);
		for (int i = 0; r == 0 && i < n; i++)
			r = cnl_store_membership_delete(c->api->store, uid,
			                                m[i].project_id);
	} while (r == 0 && n > 0);
	free(d);
	free(m);
	return r;
}

void cnl_api_h_peer_grant(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	static const char *const fields[] = {"name", "project", NULL};
	struct call *c = call;
	struct cnl_store_user u = {0};
	struct cnl_store_project p;
	struct cnl_store_membership m = {0};
	struct cnl_store_doc d = {0};
	char uname[CNL_STORE_NAME_MAX], token[CNL_AUTH_TOKEN_MAX],
	    digest[CNL_AUTH_DIGEST_MAX];
	const char *name, *project;
	struct cnl_id_gen ids;
	json_t *body, *o;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(name = cnl_api_get_name(body, "name", resp)) ||
	    !(project = cnl_api_get_string(body, "project", CNL_ID_MAX, resp)))
		goto out;
	if (strlen(name) > 40) {
		cnl_api_bad(resp, "field \"name\": at most 40 characters");
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "peer:%s", name);
	if (cnl_store_project_get_by_name(c->api->store, project, &p) < 0 &&
	    cnl_store_project_get(c->api->store, project, &p) < 0) {
		cnl_http_error(resp, 404, "not_found",
		               "field \"project\": no project %.64s", project);
		goto out;
	}
	if (cnl_store_doc_get(c->api->store, "peer_grant", name, &d) == 0) {
		cnl_store_doc_done(&d);
		cnl_http_error(resp, 409, "conflict",
		               "peer %s has a grant already (cnlab peer revoke "
		               "%s first)",
		               name, name);
		goto out;
	}
	user_name(name, uname, sizeof(uname));
	r = cnl_store_user_get_by_name(c->api->store, uname, &u);
	if (r == 0 && u.password_hash[0]) {
		cnl_http_error(resp, 409, "conflict",
		               "a user named %s exists and is not a peer's "
		               "service user (it has a password)",
		               uname);
		goto out;
	}
	/* A service user from an earlier grant starts afresh: nothing it
	 * held then (a token, a membership) comes back with this one. */
	if (r == 0)
		r = purge_user(c, u.id);
	else if (r == -CNL_ENOTFOUND) {
		cnl_id_gen_init_random(&ids);
		memset(&u, 0, sizeof(u));
		r = cnl_id_new(&ids, "usr", c->now_ms, u.id, sizeof(u.id));
		snprintf(u.name, sizeof(u.name), "%s", uname);
		u.created_ms = c->now_ms;
		if (r >= 0)
			r = cnl_store_user_create(c->api->store, &u);
	}
	snprintf(m.user_id, sizeof(m.user_id), "%s", u.id);
	snprintf(m.project_id, sizeof(m.project_id), "%s", p.id);
	snprintf(m.role, sizeof(m.role), "member");
	if (r == 0)
		r = cnl_store_membership_set(c->api->store, &m);
	if (r == 0)
		r = cnl_api_token_issue(c->api->store, u.id, "peer", 0,
		                        c->now_ms, token, digest);
	if (r == 0) {
		o = json_pack("{s:s,s:s,s:s,s:s,s:s}", "user_id", u.id, "user",
		              uname, "project_id", p.id, "project", p.name,
		              "token_id", digest);
		r = cnl_api_doc_save(c, "peer_grant", name, "", "", o, true);
		json_decref(o);
	}
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "peer grant");
		goto out;
	}
	cnl_http_reply(resp, 201,
	               json_pack("{s:s,s:s,s:s,s:s}", "name", name, "user",
	                         uname, "project", p.name, "token", token));
	explicit_bzero(token, sizeof(token));
out:
	json_decref(body);
}

static json_t *grant_item(struct call *c, const struct cnl_store_doc *d,
                          json_t *body)
{
	(void)c;
	return json_pack("{s:s,s:O,s:O,s:o}", "name", d->id, "user",
	                 json_object_get(body, "user"), "project",
	                 json_object_get(body, "project"), "created_at",
	                 cnl_api_time_json(d->updated_ms));
}

void cnl_api_h_peer_grants(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	cnl_api_doc_page(call, req, resp, "peer_grant", NULL, "peer grant",
	                 grant_item);
}

/* Cancel the active jobs of @user in @project (a revoked peer's). */
static int cancel_jobs_of(struct call *c, const char *user, const char *project,
                          int *ret_n)
{
	struct cnl_store_job *j = cnl_xcalloc(256, sizeof(*j));
	char after[CNL_ID_MAX] = "";
	int n = 0, r;

	*ret_n = 0;
	do {
		r = cnl_store_job_list(c->api->store, project,
		                       after[0] ? after : NULL, 256, j, &n);
		for (int i = 0; r == 0 && i < n; i++) {
			snprintf(after, sizeof(after), "%s", j[i].id);
			if (strcmp(j[i].user_id, user) != 0 ||
			    (strcmp(j[i].state, "pending") != 0 &&
			     strcmp(j[i].state, "running") != 0))
				continue;
			if (cnl_ctl_stop_workload(c->api->ctl, j[i].id,
			                          c->now_ms) == 0)
				(*ret_n)++;
		}
	} while (r == 0 && n == 256);
	free(j);
	return r;
}

void cnl_api_h_peer_revoke(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *name = cnl_http_param(req, "peer");
	const char *uid, *pid;
	json_t *g = NULL;
	int r, cancelled = 0;

	snprintf(c->target, sizeof(c->target), "peer:%s", name);
	if ((r = cnl_api_doc_json(c->api->store, "peer_grant", name, &g)) < 0) {
		cnl_api_store_error(c, resp, r, "peer grant");
		goto out;
	}
	uid = json_string_value(json_object_get(g, "user_id"));
	pid = json_string_value(json_object_get(g, "project_id"));
	if (!uid || !pid) {
		cnl_http_error(resp, 500, "internal", "a broken peer grant");
		goto out;
	}
	/* Its tokens and memberships, all of them: the peer's user has no
	 * other use. */
	r = purge_user(c, uid);
	if (r == 0)
		r = cancel_jobs_of(c, uid, pid, &cancelled);
	if (r == 0)
		r = cnl_store_doc_delete(c->api->store, "peer_grant", name);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "peer grant");
		goto out;
	}
	cnl_ctl_kick(c->api->ctl);
	cnl_http_reply(
	    resp, 200,
	    json_pack("{s:s,s:i}", "revoked", name, "cancelled", cancelled));
out:
	json_decref(g);
}

/* ---- the peers this site forwards to ------------------------------------- */

/* Whether @url is one a token may travel to: https, or http to this
 * machine's loopback. */
static bool url_ok(const char *url)
{
	static const char *const loop[] = {
	    "http://127.0.0.1:", "http://127.0.0.1/", "http://localhost:",
	    "http://localhost/", "http://[::1]:",     NULL};

	if (strlen(url) > PEER_URL_MAX || strpbrk(url, " \t\r\n@,"))
		return false;
	if (strncmp(url, "https://", 8) == 0 && url[8])
		return true;
	for (int i = 0; loop[i]; i++)
		if (strncmp(url, loop[i], strlen(loop[i])) == 0)
			return true;
	return false;
}

static char *sealed_plain(const char *token, const char *url, const char *ca)
{
	json_t *v = json_pack("{s:s,s:s,s:s}", "token", token, "url", url, "ca",
	                      ca ? ca : "");
	char *s = json_dumps(v, JSON_COMPACT);

	json_decref(v);
	return s;
}

void cnl_api_h_peer_add(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp)
{
	static const char *const fields[] = {"name", "url", "token", "ca",
	                                     NULL};
	struct call *c = call;
	struct cnl_store_doc d = {0};
	const char *name, *url, *token, *ca = NULL;
	char place[96], kid[CNL_SECRET_KEY_ID], *sealed = NULL, *plain;
	bool replaced = false;
	json_t *body, *o;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(name = cnl_api_get_name(body, "name", resp)) ||
	    !(url = cnl_api_get_string(body, "url", PEER_URL_MAX + 1, resp)) ||
	    !(token =
	          cnl_api_get_string(body, "token", PEER_TOKEN_MAX + 1, resp)))
		goto out;
	snprintf(c->target, sizeof(c->target), "peer:%s", name);
	if (!url_ok(url)) {
		cnl_api_bad(resp,
		            "field \"url\": an https:// URL of the peer's "
		            "API (http:// only to this machine's "
		            "loopback: the token must not cross a "
		            "network in clear)");
		goto out;
	}
	if (!cnl_api_printable(token, PEER_TOKEN_MAX)) {
		cnl_api_bad(resp, "field \"token\": the token the peer's grant "
		                  "gave (printable, no spaces)");
		goto out;
	}
	if (json_object_get(body, "ca") &&
	    (!(ca = json_string_value(json_object_get(body, "ca"))) ||
	     strlen(ca) > PEER_CA_MAX ||
	     !strstr(ca, "-----BEGIN CERTIFICATE-----"))) {
		cnl_api_bad(resp, "field \"ca\": PEM certificates (-----BEGIN "
		                  "CERTIFICATE-----), at most 64 KiB");
		goto out;
	}
	if (ca && strncmp(url, "https://", 8) != 0) {
		cnl_api_bad(resp, "field \"ca\": only for an https:// url");
		goto out;
	}
	if (!c->api->have_secrets_key) {
		cnl_http_error(resp, 409, "secrets_off",
		               "a peer's token is kept sealed with the "
		               "platform's secrets key, and this platform has "
		               "none: the operator sets secrets_key_file in "
		               "cnlabd's configuration");
		goto out;
	}
	/* Adding a peer again replaces it (a new token, URL or CA, or a
	 * secrets key changed): its forwarded jobs carry on with it. */
	if (cnl_store_doc_get(c->api->store, "peer", name, &d) == 0) {
		cnl_store_doc_done(&d);
		replaced = true;
	}
	plain = sealed_plain(token, url, ca);
	snprintf(place, sizeof(place), "peer/%s", name);
	r = plain ? cnl_secret_seal(c->api->secrets_key, place,
	                            (const uint8_t *)plain, strlen(plain),
	                            &sealed)
	          : -ENOMEM;
	if (plain) {
		explicit_bzero(plain, strlen(plain));
		free(plain);
	}
	if (r < 0) {
		cnl_http_error(resp, 500, "internal",
		               "cannot seal the token: %s", cnl_strerror(r));
		goto out;
	}
	cnl_secret_key_id(c->api->secrets_key, kid);
	o = json_pack("{s:s,s:s?,s:s,s:s}", "url", url, "ca", ca,
	              "token_sealed", sealed, "key_id", kid);
	free(sealed);
	r = cnl_api_doc_save(c, "peer", name, "", "", o, !replaced);
	json_decref(o);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "peer");
		goto out;
	}
	cnl_http_reply(resp, replaced ? 200 : 201,
	               json_pack("{s:s,s:s,s:b,s:b}", "name", name, "url", url,
	                         "ca", ca != NULL, "replaced", replaced));
out:
	json_decref(body);
}

static json_t *peer_item(struct call *c, const struct cnl_store_doc *d,
                         json_t *body)
{
	json_t *o = json_pack("{s:s,s:O,s:b,s:o}", "name", d->id, "url",
	                      json_object_get(body, "url"), "ca",
	                      json_is_string(json_object_get(body, "ca")),
	                      "updated_at", cnl_api_time_json(d->updated_ms));

	cnl_federate_peer_json(c->api->federate, d->id, o);
	return o;
}

void cnl_api_h_peers_list(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	cnl_api_doc_page(call, req, resp, "peer", NULL, "peer", peer_item);
}

void cnl_api_h_peer_remove(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *name = cnl_http_param(req, "peer");
	int r, busy = cnl_federate_busy(c->api->federate, name);

	snprintf(c->target, sizeof(c->target), "peer:%s", name);
	if (busy) {
		cnl_http_error(resp, 409, "conflict",
		               "%d job(s) forwarded to peer %s have not ended: "
		               "cancel them, or wait",
		               busy, name);
		return;
	}
	if ((r = cnl_store_doc_delete(c->api->store, "peer", name)) < 0) {
		cnl_api_store_error(c, resp, r, "peer");
		return;
	}
	cnl_http_reply(resp, 200, json_pack("{s:s}", "removed", name));
}
