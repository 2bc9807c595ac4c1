/*
 * api_secrets.c - secrets (issue 24): set, list and delete, scoped to a
 * user (each user their own) or to a project (its admins set them, its
 * members list their names).  A value is sealed under the operator's key
 * before it reaches the store (secrets.h) and is never returned by these
 * routes, nor written to a log or the audit: the audit names the secret.
 *
 *   secret  id = user/<user id>/<name> or project/<project id>/<name>,
 *           parent = user/<user id> or project/<project id>, name = name;
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
	snprintf(parent, plen, "%s/%s", project ? "project" : "user", owner);
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
	/* The request's own copy of the value goes too. */
	if (body) {
		json_t *v = json_object_get(body, "value_base64");

		if (json_is_string(v))
			explicit_bzero((char *)json_string_value(v),
			               json_string_length(v));
	}
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
