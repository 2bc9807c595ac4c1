/*
 * api_secrets.c - secrets (issue 24): set, list and delete, scoped to a
 * user (each user their own) or to a project (its admins set them, its
 * members list their names).  A value is sealed under the operator's key
 * before it reaches the store (secrets.h) and is never returned by these
 * routes, nor written to a log or the audit: the audit names the secret.
 *
 *   secret  id = user/<user id>/<name> or project/<project id>/<name>,
 *           parent = user/<user id> or <project id>, name = name;
 *           {"sealed", "key_id", "size", "set_by"}
 *
 * The sealed value's additional data is the document's id, so a value
 * moved onto another secret's row does not open there.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/base64.h"
#include "common/json.h"
#include "common/util.h"
#include "server/api-internal.h"
#include "server/secrets.h"
#include "wire/node.h"

bool cnl_api_secret_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > CNL_SECRET_NAME_MAX - 1)
		return false;
	if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') ||
	      (s[0] >= '0' && s[0] <= '9')))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '.' ||
		      s[i] == '_' || s[i] == '-'))
			return false;
	return true;
}

void cnl_api_secret_place(bool project, const char *owner, const char *name,
                          char *parent, size_t plen, char *id, size_t idlen)
{
	/* A project's under the project itself, so that deleting the
	 * project deletes them (store.h); a user's under "user/ID". */
	if (project)
		snprintf(parent, plen, "%s", owner);
	else
		snprintf(parent, plen, "user/%s", owner);
	snprintf(id, idlen, "%s/%s/%s", project ? "project" : "user", owner,
	         name);
}

/* 409 when the operator set no key; false then. */
static bool secrets_on(struct call *c, struct cnl_http_response *resp)
{
	if (c->api->have_secrets_key)
		return true;
	cnl_http_error(resp, 409, "secrets_off",
	               "secrets are off on this platform: the operator sets "
	               "secrets_key_file (a key kept apart from the "
	               "database) in cnlabd's configuration");
	return false;
}

/* The path's {secret}, checked: the name, or NULL and a 400. */
static const char *path_name(struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	const char *name = cnl_http_param(req, "secret");

	if (!name || !cnl_api_secret_name_ok(name)) {
		cnl_http_error(resp, 400, "bad_request",
		               "secret name: 1..%d of letters, digits, '.', "
		               "'_' and '-', starting with a letter or digit",
		               CNL_SECRET_NAME_MAX - 1);
		return NULL;
	}
	return name;
}

/* The audit's target: "secret:PROJECT/NAME" or "secret:user:USER/NAME". */
static void secret_target(struct call *c, bool project, const char *name)
{
	if (project)
		snprintf(c->target, sizeof(c->target), "secret:%s/%s",
		         c->project.name, name);
	else
		snprintf(c->target, sizeof(c->target), "secret:user:%s/%s",
		         c->user.name, name);
}

static json_t *secret_item(struct call *c, const struct cnl_store_doc *d,
                           json_t *body)
{
	bool project = strncmp(d->id, "project/", 8) == 0;
	json_t *o;

	(void)c;
	o = json_pack("{s:s,s:s,s:O?,s:O?,s:o}", "name", d->name, "scope",
	              project ? "project" : "user", "size",
	              json_object_get(body, "size"), "set_by",
	              json_object_get(body, "set_by"), "updated_at",
	              cnl_api_time_json(d->updated_ms));
	return o;
}

static void list(struct call *c, struct cnl_http_request *req,
                 struct cnl_http_response *resp, bool project)
{
	char parent[CNL_STORE_DOC_ID_MAX], id[CNL_STORE_DOC_ID_MAX];

	cnl_api_secret_place(project, project ? c->project.id : c->user.id, "",
	                     parent, sizeof(parent), id, sizeof(id));
	cnl_api_doc_page(c, req, resp, "secret", parent, "secret", secret_item);
}

static void set(struct call *c, struct cnl_http_request *req,
                struct cnl_http_response *resp, bool project)
{
	static const char *const fields[] = {"value_base64", NULL};
	char parent[CNL_STORE_DOC_ID_MAX], id[CNL_STORE_DOC_ID_MAX];
	struct cnl_store_doc old = {0};
	const char *name, *b64;
	uint8_t *value = NULL;
	size_t n = 0;
	char *sealed = NULL;
	char kid[CNL_SECRET_KEY_ID];
	json_t *body, *o;
	bool existed;
	int r;

	if (!(name = path_name(req, resp)))
		return;
	cnl_api_secret_place(project, project ? c->project.id : c->user.id,
	                     name, parent, sizeof(parent), id, sizeof(id));
	secret_target(c, project, name);
	if (!secrets_on(c, resp))
		return;
	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	b64 = json_string_value(json_object_get(body, "value_base64"));
	if (!b64) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"value_base64\": required, the value in "
		               "base64 (standard alphabet, padded)");
		goto out;
	}
	r = cnl_b64_decode_new(b64, CNL_B64_STD | CNL_B64_PAD,
	                       CNL_SECRET_VALUE_MAX, &value, &n);
	if (r == -CNL_ESIZE) {
		cnl_http_error(resp, 413, "too_large",
		               "field \"value_base64\": a secret holds at most "
		               "%d bytes",
		               CNL_SECRET_VALUE_MAX);
		goto out;
	}
	if (r < 0) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"value_base64\": not base64 (standard "
		               "alphabet, padded)");
		goto out;
	}
	if ((r = cnl_secret_seal(c->api->secrets_key, id, value, n, &sealed)) <
	    0) {
		cnl_http_error(resp, 500, "internal",
		               "cannot seal the secret: %s", cnl_strerror(r));
		goto out;
	}
	existed = cnl_store_doc_get(c->api->store, "secret", id, &old) == 0;
	cnl_store_doc_done(&old);
	cnl_secret_key_id(c->api->secrets_key, kid);
	o = json_pack("{s:s,s:s,s:I,s:s}", "sealed", sealed, "key_id", kid,
	              "size", (json_int_t)n, "set_by", c->user.name);
	r = cnl_api_doc_save(c, "secret", id, parent, name, o, false);
	json_decref(o);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "secret");
		goto out;
	}
	c->note = existed ? "replaced" : NULL;
	cnl_http_reply(resp, existed ? 200 : 201,
	               json_pack("{s:s,s:s,s:I,s:s,s:o}", "name", name, "scope",
	                         project ? "project" : "user", "size",
	                         (json_int_t)n, "set_by", c->user.name,
	                         "updated_at", cnl_api_time_json(c->now_ms)));
out:
	if (value) {
		explicit_bzero(value, n);
		free(value);
	}
	if (sealed)
		free(sealed);
	cnl_json_wipe(body); /* the request's own copy of the value too */
	json_decref(body);
}

static void del(struct call *c, struct cnl_http_request *req,
                struct cnl_http_response *resp, bool project)
{
	char parent[CNL_STORE_DOC_ID_MAX], id[CNL_STORE_DOC_ID_MAX];
	const char *name;
	int r;

	if (!(name = path_name(req, resp)))
		return;
	cnl_api_secret_place(project, project ? c->project.id : c->user.id,
	                     name, parent, sizeof(parent), id, sizeof(id));
	secret_target(c, project, name);
	if ((r = cnl_store_doc_delete(c->api->store, "secret", id)) < 0) {
		cnl_api_store_error(c, resp, r, "secret");
		return;
	}
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:s}", "deleted", name, "scope",
	                         project ? "project" : "user"));
}

void cnl_api_h_secrets_list(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	list(call, req, resp, false);
}

void cnl_api_h_secret_set(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	set(call, req, resp, false);
}

void cnl_api_h_secret_delete(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	del(call, req, resp, false);
}

void cnl_api_h_project_secrets_list(void *call, struct cnl_http_request *req,
                                    struct cnl_http_response *resp)
{
	list(call, req, resp, true);
}

void cnl_api_h_project_secret_set(void *call, struct cnl_http_request *req,
                                  struct cnl_http_response *resp)
{
	set(call, req, resp, true);
}

void cnl_api_h_project_secret_delete(void *call, struct cnl_http_request *req,
                                     struct cnl_http_response *resp)
{
	del(call, req, resp, true);
}

/* ---- secrets of a workload ------------------------------------------------
 */

/* Environment names a secret may not take: the platform's own, the
 * loader's, and what places the workload on its GPU. */
static bool env_name_ok(const char *s)
{
	static const char *const reserved[] = {"PATH",
	                                       "HOME",
	                                       "USER",
	                                       "CUDA_VISIBLE_DEVICES",
	                                       "NVIDIA_VISIBLE_DEVICES",
	                                       "HIP_VISIBLE_DEVICES",
	                                       "ROCR_VISIBLE_DEVICES",
	                                       NULL};
	size_t n = strlen(s);

	if (n == 0 || n > 127 || (s[0] >= '0' && s[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	if (strncmp(s, "CNLAB_", 6) == 0 || strncmp(s, "LD_", 3) == 0)
		return false;
	for (const char *const *r = reserved; *r; r++)
		if (strcmp(s, *r) == 0)
			return false;
	return true;
}

int cnl_api_secrets_take(struct call *c, json_t *body, json_t **ret,
                         struct cnl_http_response *resp)
{
	json_t *list = json_object_get(body, "secrets"), *refs, *it;
	size_t i;

	*ret = NULL;
	if (!list)
		return 0;
	if (!json_is_array(list) ||
	    json_array_size(list) > CNL_WIRE_SECRETS_MAX) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"secrets\": a list of at most %d "
		               "{\"name\", \"scope\", \"env\"}",
		               CNL_WIRE_SECRETS_MAX);
		return -1;
	}
	if (json_array_size(list) == 0)
		return 0;
	if (!secrets_on(c, resp))
		return -1;
	refs = json_array();
	json_array_foreach (list, i, it) {
		static const char *const keys[] = {"name", "scope", "env",
		                                   NULL};
		const char *name =
		    json_string_value(json_object_get(it, "name"));
		const char *scope =
		    json_string_value(json_object_get(it, "scope"));
		const char *env = json_string_value(json_object_get(it, "env"));
		char parent[CNL_STORE_DOC_ID_MAX], id[CNL_STORE_DOC_ID_MAX];
		struct cnl_store_doc d = {0};
		const char *k;
		json_t *v, *o;
		bool found = false;

		if (!json_is_object(it) || !name) {
			cnl_http_error(resp, 400, "bad_request",
			               "field \"secrets\": item %zu must be "
			               "{\"name\": ..., \"scope\": \"user\" or "
			               "\"project\" (optional), \"env\": a "
			               "variable (optional)}",
			               i);
			goto fail;
		}
		json_object_foreach (it, k, v) {
			bool known = false;

			for (const char *const *x = keys; *x; x++)
				known |= strcmp(k, *x) == 0;
			if (!known) {
				cnl_http_error(resp, 400, "bad_request",
				               "field \"secrets\": item %zu: "
				               "unknown field \"%.40s\"",
				               i, k);
				goto fail;
			}
		}
		if (!cnl_api_secret_name_ok(name)) {
			cnl_http_error(resp, 400, "bad_request",
			               "field \"secrets\": item %zu: not a "
			               "secret name",
			               i);
			goto fail;
		}
		if ((scope && strcmp(scope, "user") != 0 &&
		     strcmp(scope, "project") != 0) ||
		    (json_object_get(it, "scope") && !scope)) {
			cnl_http_error(resp, 400, "bad_request",
			               "field \"secrets\": item %zu: \"scope\" "
			               "must be \"user\" or \"project\"",
			               i);
			goto fail;
		}
		if ((json_object_get(it, "env") && !env) ||
		    (env && !env_name_ok(env))) {
			cnl_http_error(
			    resp, 400, "bad_request",
			    "field \"secrets\": item %zu: \"env\" must be a "
			    "variable name (letters, digits, '_'), not PATH, "
			    "HOME, USER, *_VISIBLE_DEVICES, CNLAB_* or LD_*",
			    i);
			goto fail;
		}
		for (size_t k2 = 0; k2 < json_array_size(refs); k2++) {
			json_t *p = json_array_get(refs, k2);
			const char *pe =
			    json_string_value(json_object_get(p, "env"));

			if (strcmp(
			        json_string_value(json_object_get(p, "name")),
			        name) == 0 ||
			    (env && pe && strcmp(env, pe) == 0)) {
				cnl_http_error(resp, 400, "bad_request",
				               "field \"secrets\": item %zu: "
				               "%s named twice",
				               i,
				               env && pe && !strcmp(env, pe)
				                   ? "its variable"
				                   : "the secret");
				goto fail;
			}
		}
		/* The user's own first, then the project's. */
		for (int proj = 0; proj < 2 && !found; proj++) {
			if (scope && strcmp(scope, proj ? "project" : "user"))
				continue;
			cnl_api_secret_place(
			    proj, proj ? c->project.id : c->user.id, name,
			    parent, sizeof(parent), id, sizeof(id));
			found = cnl_store_doc_get(c->st, "secret", id, &d) == 0;
			cnl_store_doc_done(&d);
		}
		if (!found) {
			cnl_http_error(resp, 400, "bad_request",
			               "field \"secrets\": no secret \"%s\" %s "
			               "(cnlab secret list%s)",
			               name,
			               !scope ? "of yours or of the project"
			               : strcmp(scope, "user") == 0
			                   ? "of yours"
			                   : "of the project",
			               scope && !strcmp(scope, "project")
			                   ? " --scope project"
			                   : "");
			goto fail;
		}
		o = json_pack("{s:s,s:s}", "id", id, "name", name);
		if (env)
			json_object_set_new(o, "env", json_string(env));
		json_array_append_new(refs, o);
	}
	*ret = refs;
	return 0;
fail:
	json_decref(refs);
	return -1;
}

int cnl_api_secrets_attach(struct call *c, const char *workload, json_t *refs)
{
	json_t *o;
	int r;

	if (!refs || json_array_size(refs) == 0)
		return 0;
	o = json_pack("{s:O}", "items", refs);
	r = cnl_api_doc_save(c, "secret-refs", workload, workload, "", o,
	                     false);
	json_decref(o);
	return r;
}

/*
 * POST /v1/nodes/{node}/secrets?job=ID&epoch=E: the values of the secrets
 * the workload asked for, for the node that runs it under that epoch
 * (a gang's members, their leader's).  The use is audited, by name.
 */
void cnl_api_h_node_secrets(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *job = cnl_api_node_job(c, req, resp);
	char owner[CNL_ID_MAX], names[CNL_STORE_AUDIT_MAX] = "";
	struct cnl_store_doc d = {0};
	struct cnl_store_job jb;
	json_t *refs = NULL, *items, *it;
	size_t i;
	int r;

	if (!job)
		return;
	/* A gang's members run with their leader's: the gang's id (its run
	 * record's "gang", api_jobs.c) is the leader's. */
	snprintf(owner, sizeof(owner), "%s", job);
	if (cnl_store_job_get(c->api->store, job, &jb) == 0) {
		json_t *run = json_loads(jb.run, 0, NULL);
		const char *gid = json_string_value(
		    json_object_get(json_object_get(run, "gang"), "id"));

		if (gid && strlen(gid) < sizeof(owner))
			snprintf(owner, sizeof(owner), "%s", gid);
		json_decref(run);
	}
	r = cnl_store_doc_get(c->api->store, "secret-refs", owner, &d);
	if (r == 0)
		refs = json_loads(d.body, 0, NULL);
	cnl_store_doc_done(&d);
	if (r < 0 && r != -CNL_ENOTFOUND) {
		cnl_api_store_error(c, resp, r, "secrets");
		return;
	}
	items = json_array();
	json_array_foreach (json_object_get(refs, "items"), i, it) {
		const char *id = json_string_value(json_object_get(it, "id"));
		const char *name =
		    json_string_value(json_object_get(it, "name"));
		const char *env = json_string_value(json_object_get(it, "env"));
		const char *sealed;
		struct cnl_store_doc s = {0};
		uint8_t *value = NULL;
		size_t n = 0;
		json_t *body, *o;
		char *b64;

		if (!id || !name)
			continue;
		if (cnl_store_doc_get(c->api->store, "secret", id, &s) < 0) {
			cnl_http_error(resp, 409, "secret_gone",
			               "secret \"%s\" was deleted after the "
			               "submission: set it again (cnlab secret "
			               "set %s) and submit again",
			               name, name);
			goto fail;
		}
		body = json_loads(s.body, 0, NULL);
		cnl_store_doc_done(&s);
		sealed = json_string_value(json_object_get(body, "sealed"));
		if (!c->api->have_secrets_key || !sealed ||
		    cnl_secret_open(c->api->secrets_key, id, sealed, &value,
		                    &n) < 0) {
			char kid[CNL_SECRET_KEY_ID] = "none";

			if (c->api->have_secrets_key)
				cnl_secret_key_id(c->api->secrets_key, kid);
			cnl_http_error(
			    resp, 409, "secret_sealed",
			    "secret \"%s\" cannot be opened with this "
			    "platform's key (key %s; it was sealed under key "
			    "%s): the operator's secrets_key_file changed",
			    name, kid,
			    json_string_value(json_object_get(body, "key_id"))
			        ?: "?");
			json_decref(body);
			goto fail;
		}
		json_decref(body);
		b64 = cnl_b64_encode_new(value, n, CNL_B64_STD | CNL_B64_PAD);
		explicit_bzero(value, n);
		free(value);
		o = json_pack("{s:s,s:s}", "name", name, "value_base64", b64);
		explicit_bzero(b64, strlen(b64));
		free(b64);
		if (env)
			json_object_set_new(o, "env", json_string(env));
		json_array_append_new(items, o);
		{
			size_t used = strlen(names);

			snprintf(names + used, sizeof(names) - used, "%s%s",
			         used ? "," : "", id);
		}
	}
	/* "JOB id,id,...", cut to the record's size. */
	{
		size_t jl = strnlen(job, CNL_ID_MAX - 1), nl = strlen(names);

		if (jl + 2 > sizeof(c->target))
			jl = sizeof(c->target) - 2;
		memcpy(c->target, job, jl);
		c->target[jl] = ' ';
		if (nl > sizeof(c->target) - jl - 2)
			nl = sizeof(c->target) - jl - 2;
		memcpy(c->target + jl + 1, names, nl);
		c->target[jl + 1 + nl] = '\0';
	}
	json_decref(refs);
	cnl_http_reply(resp, 200, json_pack("{s:o}", "items", items));
	return;
fail:
	json_decref(items);
	json_decref(refs);
}

bool cnl_api_server_private(struct cnl_store *st, const char *server_id)
{
	struct cnl_store_doc d = {0};
	json_t *o, *it;
	bool mine = false;
	size_t i;

	if (cnl_store_doc_get(st, "secret-refs", server_id, &d) < 0)
		return false;
	o = json_loads(d.body, 0, NULL);
	cnl_store_doc_done(&d);
	json_array_foreach (json_object_get(o, "items"), i, it) {
		const char *id = json_string_value(json_object_get(it, "id"));

		mine |= id && strncmp(id, "user/", 5) == 0;
	}
	json_decref(o);
	return mine;
}
