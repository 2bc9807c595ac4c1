/*
 * api_ssh.c - `cnlab server ssh` (issue 24): each user's SSH public keys,
 * each server's own host key, and what a session's sshd is given.
 *
 *   ssh-key       id = ssh-key/<user id>/<name>, parent = user/<user id>,
 *                 name = name; {"key", "type", "fingerprint", "comment",
 *                 "bits"}.  A user's own: nobody else lists or removes
 *                 them (the administrator included).  At most
 *                 CNL_SSH_KEYS_MAX each; a fingerprint once per user.
 *   ssh-host-key  id = ssh-host/<server id>, parent = <server id>;
 *                 {"public", "sealed", "key_id"}: an Ed25519 key made on
 *                 the first `ssh-config` or connection, its private half
 *                 sealed under the secrets key (secrets.h) with the
 *                 document's id as the additional data.  Deleted with
 *                 its server.
 *
 * A connection (POST /v1/servers/{server}/ssh, api_proxy.c) is its
 * owner's only, and the sshd it reaches authorises only the owner's keys
 * as they are at that moment (cnl_api_ssh_material).  Removing a key, or
 * anything that ends the owner's credential, closes the owner's open
 * sessions (cnl_api_ssh_keys_live, asked by the relay after each such
 * change).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/json.h"
#include "common/util.h"
#include "net/metrics.h"
#include "server/api-internal.h"
#include "server/secrets.h"
#include "server/sshkey.h"

#define KIND     "ssh-key"
#define HOST     "ssh-host-key"
#define LIST_MAX 64

static void key_place(const char *user_id, const char *name, char *parent,
                      size_t plen, char *id, size_t idlen)
{
	snprintf(parent, plen, "user/%s", user_id);
	snprintf(id, idlen, "ssh-key/%s/%s", user_id, name);
}

static json_t *key_item(struct call *c, const struct cnl_store_doc *d,
                        json_t *body)
{
	(void)c;
	return json_pack("{s:s,s:O?,s:O?,s:O?,s:O?,s:o}", "name", d->name,
	                 "type", json_object_get(body, "type"), "fingerprint",
	                 json_object_get(body, "fingerprint"), "comment",
	                 json_object_get(body, "comment"), "bits",
	                 json_object_get(body, "bits"), "added_at",
	                 cnl_api_time_json(d->updated_ms));
}

/* The keys of @user_id (at most LIST_MAX): their count, -errno. */
static int keys_of(struct cnl_store *st, const char *user_id,
                   struct cnl_store_doc *out)
{
	char parent[CNL_STORE_DOC_ID_MAX];
	int n = 0, r;

	snprintf(parent, sizeof(parent), "user/%s", user_id);
	r = cnl_store_doc_list(st, KIND, parent, NULL, LIST_MAX, out, &n);
	return r < 0 ? r : n;
}

void cnl_api_h_ssh_keys_list(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	struct call *c = call;
	char parent[CNL_STORE_DOC_ID_MAX], id[CNL_STORE_DOC_ID_MAX];

	key_place(c->user.id, "", parent, sizeof(parent), id, sizeof(id));
	cnl_api_doc_page(c, req, resp, KIND, parent, "ssh key", key_item);
}

/* A name made from the key's comment ("ana@laptop" -> "ana-laptop"), or
 * "key-N" when nothing of it is left. */
static void default_name(const struct cnl_sshkey *k, int n, char *out,
                         size_t len)
{
	size_t o = 0;

	for (const char *p = k->comment; *p && o + 1 < len && o < 40; p++) {
		char ch = *p;
		bool ok = (ch >= 'a' && ch <= 'z') ||
		          (ch >= 'A' && ch <= 'Z') ||
		          (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
		          ch == '-';

		if (!ok)
			ch = '-';
		if (o == 0 &&
		    !((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9')))
			continue;
		out[o++] = ch;
	}
	out[o] = '\0';
	if (!o)
		snprintf(out, len, "key-%d", n + 1);
}

void cnl_api_h_ssh_key_add(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	static const char *const fields[] = {"key", "name", NULL};
	struct call *c = call;
	struct cnl_store_doc have[LIST_MAX];
	char parent[CNL_STORE_DOC_ID_MAX], id[CNL_STORE_DOC_ID_MAX];
	char name[CNL_SECRET_NAME_MAX], err[256];
	struct cnl_sshkey k = {0};
	const char *line, *given;
	json_t *body, *o = NULL;
	int n = 0, r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	line = json_string_value(json_object_get(body, "key"));
	given = json_string_value(json_object_get(body, "name"));
	if (!line) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"key\": required, one public key line "
		               "(the contents of ~/.ssh/id_ed25519.pub)");
		goto out;
	}
	if (json_object_get(body, "name") &&
	    (!given || !cnl_api_secret_name_ok(given))) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"name\": 1..%d of letters, digits, '.', "
		               "'_' and '-', starting with a letter or digit",
		               CNL_SECRET_NAME_MAX - 1);
		goto out;
	}
	if (cnl_sshkey_parse(line, &k, err, sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "field \"key\": %s",
		               err);
		goto out;
	}
	if ((n = keys_of(c->api->store, c->user.id, have)) < 0) {
		cnl_api_store_error(c, resp, n, "ssh key");
		n = 0;
		goto out;
	}
	for (int i = 0; i < n; i++) {
		json_t *b = json_loads(have[i].body, 0, NULL);
		bool same =
		    b &&
		    strcmp(json_string_value(json_object_get(b, "fingerprint"))
		               ?: "",
		           k.fingerprint) == 0;

		json_decref(b);
		if (same) {
			cnl_http_error(resp, 409, "conflict",
			               "this key (%s) is already yours, as "
			               "\"%s\"",
			               k.fingerprint, have[i].name);
			goto out;
		}
	}
	if (n >= CNL_SSH_KEYS_MAX) {
		cnl_http_error(resp, 409, "conflict",
		               "you have %d SSH keys, the most one user may "
		               "have: remove one first (cnlab ssh-key remove)",
		               n);
		goto out;
	}
	if (given)
		snprintf(name, sizeof(name), "%s", given);
	else
		default_name(&k, n, name, sizeof(name));
	key_place(c->user.id, name, parent, sizeof(parent), id, sizeof(id));
	snprintf(c->target, sizeof(c->target), "ssh-key:%.30s/%.30s %.50s",
	         c->user.name, name, k.fingerprint);
	o = json_pack("{s:s,s:s,s:s,s:s,s:i}", "key", k.line, "type", k.type,
	              "fingerprint", k.fingerprint, "comment", k.comment,
	              "bits", k.bits);
	r = cnl_api_doc_save(c, KIND, id, parent, name, o, true);
	if (r == -CNL_EDUP) {
		cnl_http_error(resp, 409, "conflict",
		               "you already have an SSH key named \"%s\": "
		               "give this one another (--name)",
		               name);
		goto out;
	}
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "ssh key");
		goto out;
	}
	cnl_http_reply(resp, 201,
	               json_pack("{s:s,s:s,s:s,s:s,s:i,s:o}", "name", name,
	                         "type", k.type, "fingerprint", k.fingerprint,
	                         "comment", k.comment, "bits", k.bits,
	                         "added_at", cnl_api_time_json(c->now_ms)));
out:
	cnl_store_docs_done(have, n);
	cnl_sshkey_done(&k);
	json_decref(o);
	json_decref(body);
}

void cnl_api_h_ssh_key_remove(void *call, struct cnl_http_request *req,
                              struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *which = cnl_http_param(req, "key");
	struct cnl_store_doc have[LIST_MAX];
	char found[CNL_STORE_DOC_ID_MAX] = "", fname[CNL_STORE_NAME_MAX] = "";
	int n, r;

	snprintf(c->target, sizeof(c->target), "ssh-key:%.30s/%.80s",
	         c->user.name, which ? which : "");
	if ((n = keys_of(c->api->store, c->user.id, have)) < 0) {
		cnl_api_store_error(c, resp, n, "ssh key");
		return;
	}
	/* By name, or by fingerprint (with or without "SHA256:"). */
	for (int i = 0; i < n && which && !found[0]; i++) {
		json_t *b = json_loads(have[i].body, 0, NULL);
		const char *fp =
		    json_string_value(json_object_get(b, "fingerprint")) ?: "";

		if (strcmp(have[i].name, which) == 0 ||
		    strcmp(fp, which) == 0 ||
		    (strncmp(fp, "SHA256:", 7) == 0 &&
		     strcmp(fp + 7, which) == 0)) {
			snprintf(found, sizeof(found), "%s", have[i].id);
			snprintf(fname, sizeof(fname), "%s", have[i].name);
		}
		json_decref(b);
	}
	cnl_store_docs_done(have, n);
	if (!found[0]) {
		cnl_http_error(resp, 404, "not_found",
		               "you have no SSH key named \"%.80s\" (cnlab "
		               "ssh-key list shows them)",
		               which ? which : "");
		return;
	}
	if ((r = cnl_store_doc_delete(c->api->store, KIND, found)) < 0) {
		cnl_api_store_error(c, resp, r, "ssh key");
		return;
	}
	/* Open sessions authorised with it close (their relays ask). */
	cnl_api_dash_bump(c->api, true);
	cnl_http_reply(resp, 200, json_pack("{s:s}", "removed", fname));
}

/* ---- host keys ------------------------------------------------------ */

/* 409 when the operator set no secrets key: false then. */
static bool ssh_on(struct call *c, struct cnl_http_response *resp)
{
	if (c->api->have_secrets_key)
		return true;
	cnl_http_error(resp, 409, "ssh_off",
	               "ssh is off on this platform: a server's host key is "
	               "kept sealed, and the operator has set no "
	               "secrets_key_file in cnlabd's configuration");
	return false;
}

/* The server's host key, made on first use: its public line in @pub and,
 * when @priv, its private key (malloc'd).  0, or -1 with @resp set. */
static int host_key(struct call *c, struct cnl_http_response *resp,
                    char pub[CNL_SSHKEY_LINE_MAX], char **priv)
{
	char id[CNL_STORE_DOC_ID_MAX], kid[CNL_SECRET_KEY_ID];
	json_t *body = NULL;
	const char *p, *sealed;
	uint8_t *v = NULL;
	size_t vn = 0;
	int r;

	if (!ssh_on(c, resp))
		return -1;
	snprintf(id, sizeof(id), "ssh-host/%s", c->server.id);
	r = cnl_api_doc_json(c->api->store, HOST, id, &body);
	if (r == -CNL_ENOTFOUND) {
		char *newpriv = NULL, *newpub = NULL, *s = NULL;
		json_t *o;

		if (cnl_sshkey_host_new(c->server.name, &newpriv, &newpub) <
		        0 ||
		    cnl_secret_seal(c->api->secrets_key, id,
		                    (const uint8_t *)newpriv, strlen(newpriv),
		                    &s) < 0) {
			if (newpriv)
				explicit_bzero(newpriv, strlen(newpriv));
			free(newpriv);
			free(newpub);
			cnl_http_error(resp, 500, "internal",
			               "cannot make the server's host key");
			return -1;
		}
		explicit_bzero(newpriv, strlen(newpriv));
		free(newpriv);
		cnl_secret_key_id(c->api->secrets_key, kid);
		o = json_pack("{s:s,s:s,s:s}", "public", newpub, "sealed", s,
		              "key_id", kid);
		free(newpub);
		free(s);
		r = cnl_api_doc_save(c, HOST, id, c->server.id, "", o, true);
		json_decref(o);
		if (r == 0 || r == -CNL_EDUP)
			r = cnl_api_doc_json(c->api->store, HOST, id, &body);
	}
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "host key");
		return -1;
	}
	p = json_string_value(json_object_get(body, "public"));
	sealed = json_string_value(json_object_get(body, "sealed"));
	if (!p || !sealed || strlen(p) >= CNL_SSHKEY_LINE_MAX) {
		json_decref(body);
		cnl_http_error(resp, 500, "internal",
		               "the server's stored host key is damaged");
		return -1;
	}
	snprintf(pub, CNL_SSHKEY_LINE_MAX, "%s", p);
	if (priv) {
		r = cnl_secret_open(c->api->secrets_key, id, sealed, &v, &vn);
		if (r < 0) {
			json_decref(body);
			cnl_http_error(resp, 500, "internal",
			               "the server's host key does not open "
			               "under this platform's secrets key "
			               "(was secrets_key_file changed?)");
			return -1;
		}
		*priv = (char *)v;
	}
	json_decref(body);
	return 0;
}

void cnl_api_ssh_forget(struct cnl_store *st, const char *server_id)
{
	char id[CNL_STORE_DOC_ID_MAX];

	snprintf(id, sizeof(id), "ssh-host/%s", server_id);
	(void)cnl_store_doc_delete(st, HOST, id);
}

/* The server's owner's name, the container's user (container.c names the
 * tenant so). */
static int owner_name(struct call *c, char *out, size_t len)
{
	struct cnl_store_user u = {0};
	int r = cnl_store_user_get(c->api->store, c->server.user_id, &u);

	if (r == 0)
		snprintf(out, len, "%s", u.name);
	return r;
}

void cnl_api_h_server_ssh_info(void *call, struct cnl_http_request *req,
                               struct cnl_http_response *resp)
{
	struct call *c = call;
	char pub[CNL_SSHKEY_LINE_MAX], owner[CNL_STORE_NAME_MAX], host[160];
	int r;

	(void)req;
	snprintf(c->target, sizeof(c->target), "%s", c->server.id);
	if (host_key(c, resp, pub, NULL) < 0)
		return;
	if ((r = owner_name(c, owner, sizeof(owner))) < 0) {
		cnl_api_store_error(c, resp, r, "user");
		return;
	}
	snprintf(host, sizeof(host), "cnlab-%s", c->server.name);
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:s,s:s,s:s,s:b}", "server",
	                         c->server.name, "host", host, "user", owner,
	                         "host_key", pub, "owner",
	                         strcmp(c->user.id, c->server.user_id) == 0));
}

int cnl_api_ssh_material(struct call *c, struct cnl_http_response *resp,
                         char **host_priv, char **authorized,
                         json_t **fingerprints)
{
	struct cnl_store_doc have[LIST_MAX];
	struct cnl_metrics_buf ak = {0};
	char pub[CNL_SSHKEY_LINE_MAX];
	int n;

	*host_priv = *authorized = NULL;
	*fingerprints = NULL;
	if ((n = keys_of(c->api->store, c->server.user_id, have)) < 0) {
		cnl_api_store_error(c, resp, n, "ssh key");
		return -1;
	}
	if (n == 0) {
		cnl_store_docs_done(have, n);
		cnl_http_error(resp, 409, "no_ssh_keys",
		               "you have no SSH keys on this platform: add "
		               "your public key with `cnlab ssh-key add "
		               "~/.ssh/id_ed25519.pub`");
		return -1;
	}
	*fingerprints = json_array();
	for (int i = 0; i < n; i++) {
		json_t *b = json_loads(have[i].body, 0, NULL);
		struct cnl_sshkey k;
		char err[160];

		/* Checked again: nothing but a key line reaches the file. */
		if (b && cnl_sshkey_parse(
		             json_string_value(json_object_get(b, "key")) ?: "",
		             &k, err, sizeof(err)) == 0) {
			cnl_mb_printf(&ak, "%s\n", k.line);
			json_array_append_new(*fingerprints,
			                      json_string(k.fingerprint));
			cnl_sshkey_done(&k);
		}
		json_decref(b);
	}
	cnl_store_docs_done(have, n);
	if (host_key(c, resp, pub, host_priv) < 0) {
		free(ak.p);
		json_decref(*fingerprints);
		*fingerprints = NULL;
		return -1;
	}
	*authorized = ak.p ? ak.p : cnl_xstrdup("");
	return 0;
}

bool cnl_api_ssh_keys_live(struct cnl_store *st, const char *user_id,
                           const json_t *fingerprints)
{
	struct cnl_store_doc have[LIST_MAX];
	size_t i;
	json_t *fp;
	int n = keys_of(st, user_id, have);
	bool ok = n >= 0;

	json_array_foreach ((json_t *)fingerprints, i, fp) {
		bool there = false;

		for (int k = 0; ok && k < n && !there; k++) {
			json_t *b = json_loads(have[k].body, 0, NULL);

			there = b && json_equal(
			                 json_object_get(b, "fingerprint"), fp);
			json_decref(b);
		}
		ok = ok && there;
	}
	if (n > 0)
		cnl_store_docs_done(have, n);
	return ok;
}
