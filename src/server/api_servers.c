/*
 * api_servers.c - notebook servers: create, list, show, stop, start,
 * delete (once stopped: its storage stops being held).
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
#include "common/trace.h"
#include "common/util.h"
#include "sched/sched.h"
#include "server/api-internal.h"
#include "server/auth.h"
#include "server/oidc.h"
#include "server/shape.h"
#include "wire/job.h"

/* The server document of @v (wire/job.h), with its live status while it
 * is active. */
static void server_doc(struct call *c, const struct cnl_store_server *v,
                       struct cnl_wire_server *ret)
{
	memset(ret, 0, sizeof(*ret));
	snprintf(ret->id, sizeof(ret->id), "%s", v->id);
	snprintf(ret->project_id, sizeof(ret->project_id), "%s", v->project_id);
	snprintf(ret->user_id, sizeof(ret->user_id), "%s", v->user_id);
	snprintf(ret->name, sizeof(ret->name), "%s", v->name);
	snprintf(ret->image, sizeof(ret->image), "%s", v->image);
	snprintf(ret->profile, sizeof(ret->profile), "%s", v->profile);
	ret->storage_gb = v->storage_gb;
	ret->idle_timeout_s = v->idle_timeout_s;
	snprintf(ret->state, sizeof(ret->state), "%s", v->state);
	/* Users reach a server through cnlabd's proxy, never the node: the
	 * URL carries the server's own token, which the proxy exchanges for
	 * its session cookie (api_proxy.c).  That token acts as the owner,
	 * so only those the proxy lets in anyway see it (the owner, an
	 * administrator, a member or above): a viewer gets the URL without
	 * it, or they would use the server as its owner. */
	if (strcmp(v->state, "running") == 0 && v->url[0]) {
		bool own = strcmp(c->user.id, v->user_id) == 0;
		bool may_use =
		    own || ((c->is_admin || cnl_api_role_rank(c->role) >= 2) &&
		            !cnl_api_server_private(c->st, v->id));
		const char *tok = may_use ? strstr(v->url, "token=") : NULL;
		char base[CNL_API_CLI_URL_MAX], url[CNL_API_CLI_URL_MAX + 256];
		int n;

		/* The notebook origin (api_proxy.c); the API's own only
		 * where none listens (an API served alone, in tests). */
		if ((cnl_api_notebook_base(c->api, c->host, base) == 0 ||
		     cnl_api_cli_base_url(c->api->cli, c->host, base) == 0) &&
		    (n = snprintf(url, sizeof(url), "%s/s/%s/%s%.*s", base,
		                  v->id, tok ? "?token=" : "",
		                  tok ? (int)strcspn(tok + 6, "&#") : 0,
		                  tok ? tok + 6 : "")) > 0 &&
		    (size_t)n < sizeof(ret->url))
			memcpy(ret->url, url, (size_t)n + 1);
	}
	ret->created_ms = v->created_ms;
	ret->has_status = cnl_api_live_status(c, v->id, &ret->status) == 0;
	/* How its last run ended, as the agent said (the run record). */
	if (strcmp(v->state, "failed") == 0 && v->run[0]) {
		json_t *run = json_loads(v->run, 0, NULL);
		const char *msg =
		    json_string_value(json_object_get(run, "message"));

		if (msg)
			snprintf(ret->message, sizeof(ret->message), "%s", msg);
		json_decref(run);
	}
}

json_t *cnl_api_server_json(struct call *c, const struct cnl_store_server *v)
{
	struct cnl_wire_server m;

	server_doc(c, v, &m);
	return cnl_wire_server_encode(&m);
}

void cnl_api_h_servers_create(void *call, struct cnl_http_request *req,
                              struct cnl_http_response *resp)
{
	static const char *const fields[] = {
	    "name",           "image",   "profile", "storage_gb",
	    "idle_timeout_s", "secrets", NULL};
	struct call *c = call;
	struct cnl_store_server v = {0}, got;
	const char *name, *image, *profile, *key;
	char shape[CNL_SHAPE_MAX], err[256], img[CNL_STORE_IMAGE_MAX];
	int64_t storage = 10, idle = 3600;
	json_t *body, *srefs = NULL, *run;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(name = cnl_api_get_name(body, "name", resp)) ||
	    !(image = cnl_api_get_string(body, "image", CNL_STORE_IMAGE_MAX,
	                                 resp)) ||
	    !(profile = cnl_api_get_string(body, "profile",
	                                   CNL_STORE_PROFILE_MAX, resp)))
		goto out;
	if (cnl_json_get_int(body, "storage_gb", false, 0, 100000, &storage,
	                     err, sizeof(err)) < 0 ||
	    cnl_json_get_int(body, "idle_timeout_s", false, 0, 30LL * 86400,
	                     &idle, err, sizeof(err)) < 0) {
		cnl_api_bad(resp, err);
		goto out;
	}
	if (cnl_api_profile_shape(c, profile, shape, sizeof(shape), NULL) < 0) {
		cnl_api_bad(resp, "field \"profile\": no such profile (see GET "
		                  "/v1/profiles)");
		goto out;
	}
	if (cnl_api_image_check(c, image, img, sizeof(img), resp) < 0 ||
	    cnl_api_idem_key(c, req, resp, "server", &key) < 0 ||
	    cnl_api_feasible(c, shape, NULL, true, resp) < 0 ||
	    cnl_api_secrets_take(c, body, &srefs, resp) < 0)
		goto out;
	snprintf(c->target, sizeof(c->target), "%s", name);
	if (cnl_api_new_id(c, "srv", v.id) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot make an id");
		goto out;
	}
	memcpy(v.project_id, c->project.id, sizeof(v.project_id));
	memcpy(v.user_id, c->user.id, sizeof(v.user_id));
	snprintf(v.name, sizeof(v.name), "%s", name);
	snprintf(v.image, sizeof(v.image), "%s", img);
	snprintf(v.profile, sizeof(v.profile), "%s", profile);
	v.storage_gb = storage;
	v.idle_timeout_s = idle;
	snprintf(v.state, sizeof(v.state), "pending");
	v.created_ms = c->now_ms;
	/* Its submission's trace context, kept across a restart of cnlabd
	 * before it is placed (ctl_trace.c), and how many secrets its node
	 * fetches at each start. */
	run = json_object();
	if (cnl_trace_current()) {
		char tp[CNL_TRACE_HEADER_MAX];

		cnl_trace_format(cnl_trace_current(), tp);
		json_object_set_new(run, "traceparent", json_string(tp));
	}
	if (json_array_size(srefs))
		json_object_set_new(
		    run, "secrets",
		    json_integer((json_int_t)json_array_size(srefs)));
	if (json_object_size(run)) {
		char *t = json_dumps(run, JSON_COMPACT);

		snprintf(v.run, sizeof(v.run), "%s", t ? t : "");
		free(t);
	}
	json_decref(run);
	if (key) {
		struct cnl_store_server tmp;

		if (cnl_store_tx_begin(c->api->store) < 0) {
			cnl_http_error(resp, 500, "internal", "store");
			goto out;
		}
		r = cnl_store_server_create(c->api->store, &v, key, &tmp);
		cnl_store_tx_rollback(c->api->store); /* just a lookup */
		if (r == CNL_STORE_CREATED &&
		    cnl_api_quota_admit(c, true, resp) < 0)
			goto out;
	} else if (cnl_api_quota_admit(c, true, resp) < 0) {
		goto out;
	}
	/* The server and its key's request hash, together. */
	if ((r = cnl_store_tx_begin(c->api->store)) == 0) {
		r = cnl_store_server_create(c->api->store, &v, key, &got);
		if (r == CNL_STORE_CREATED && key) {
			int ir = cnl_api_idem_record(c, got.id);

			if (ir < 0)
				r = ir;
		}
		if (r == CNL_STORE_CREATED && srefs) {
			int sr = cnl_api_secrets_attach(c, got.id, srefs);

			if (sr < 0)
				r = sr;
		}
		if (r >= 0 && cnl_store_tx_commit(c->api->store) < 0)
			r = -EIO;
		if (r < 0)
			cnl_store_tx_rollback(c->api->store);
	}
	if (r == -CNL_EDUP && key) {
		cnl_http_error(resp, 409, "conflict",
		               "Idempotency-Key already used for another "
		               "request, or the name is taken");
		goto out;
	}
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "server");
		goto out;
	}
	if (cnl_api_created_here(c, resp, r, got.id, got.project_id) < 0)
		goto out;
	if (r == CNL_STORE_CREATED) {
		cnl_ctl_server_added(c->api->ctl, &got);
		cnl_api_decisions_submit(c, got.id, shape, NULL,
		                         CNL_PRIO_NORMAL, true);
		cnl_ctl_kick(c->api->ctl);
	}
	cnl_http_reply(resp, r == CNL_STORE_REPLAYED ? 200 : 201,
	               cnl_api_server_json(c, &got));
out:
	json_decref(srefs);
	json_decref(body);
}

void cnl_api_h_servers_list(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store_server *v;
	struct cnl_wire_servers page = {0};
	const char *after;
	int limit, n = 0, r;

	if (cnl_api_get_page(req, resp, &limit, &after) < 0)
		return;
	v = cnl_xcalloc((size_t)limit, sizeof(*v));
	r = cnl_store_server_list(c->st, c->project.id, after, limit, v, &n);
	if (r < 0) {
		free(v);
		cnl_api_store_error(c, resp, r, "server");
		return;
	}
	page.items = cnl_xcalloc((size_t)n + 1, sizeof(*page.items));
	for (int i = 0; i < n; i++)
		server_doc(c, &v[i], &page.items[page.n++]);
	if (n == limit && n)
		snprintf(page.next, sizeof(page.next), "%s", v[n - 1].id);
	cnl_http_reply(resp, 200, cnl_wire_servers_encode(&page));
	cnl_wire_servers_done(&page);
	free(v);
}

void cnl_api_h_server_get(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct call *c = call;

	cnl_http_reply(resp, 200, cnl_api_server_json(c, &c->server));
}

void cnl_api_h_server_stop(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call *c = call;
	int r;

	snprintf(c->target, sizeof(c->target), "%s", c->server.id);
	r = cnl_ctl_stop_workload(c->api->ctl, c->server.id, c->now_ms);
	if (r == -CNL_ENOTFOUND) {
		cnl_http_error(resp, 409, "conflict", "server is already %s",
		               c->server.state);
		return;
	}
	if (r < 0 || (r = cnl_store_server_get(c->api->store, c->server.id,
	                                       &c->server)) < 0) {
		cnl_api_store_error(c, resp, r, "server");
		return;
	}
	cnl_ctl_kick(c->api->ctl);
	cnl_http_reply(resp, 200, cnl_api_server_json(c, &c->server));
}

/* Delete a stopped server: its storage stops being held and metered,
 * and its node removes its workspace. */
void cnl_api_h_server_delete(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store_doc gone = {0};
	char body[64];
	int r;

	snprintf(c->target, sizeof(c->target), "%s", c->server.id);
	if (strcmp(c->server.state, "stopped") != 0 &&
	    strcmp(c->server.state, "failed") != 0) {
		cnl_http_error(resp, 409, "conflict",
		               "server is %s: stop it first", c->server.state);
		return;
	}
	/* Its node removes the workspace when it learns of this record
	 * (cnl_ctl_node_heartbeat): both or neither. */
	snprintf(gone.kind, sizeof(gone.kind), "%s", CNL_CTL_SERVER_GONE);
	snprintf(gone.id, sizeof(gone.id), "%s", c->server.id);
	gone.body = body;
	snprintf(body, sizeof(body), "{\"deleted_ms\":%" PRId64 "}", c->now_ms);
	if ((r = cnl_store_tx_begin(c->api->store)) < 0 ||
	    (r = cnl_store_server_delete(c->api->store, c->server.id)) < 0 ||
	    (r = cnl_store_doc_put(c->api->store, &gone, false)) < 0 ||
	    (r = cnl_store_tx_commit(c->api->store)) < 0) {
		cnl_store_tx_rollback(c->api->store);
		cnl_api_store_error(c, resp, r, "server");
		return;
	}
	cnl_ctl_server_deleted(c->api->ctl, &c->server);
	cnl_api_ssh_forget(c->api->store, c->server.id);
	cnl_http_reply(resp, 200, json_pack("{s:s}", "deleted", c->server.id));
}

void cnl_api_h_server_start(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;
	int r;

	snprintf(c->target, sizeof(c->target), "%s", c->server.id);
	if (strcmp(c->server.state, "stopped") != 0 &&
	    strcmp(c->server.state, "failed") != 0) {
		cnl_http_error(resp, 409, "conflict", "server is already %s",
		               c->server.state);
		return;
	}
	if (cnl_api_quota_admit(c, true, resp) < 0)
		return;
	/* The run record keeps its epoch: a restarted server is placed
	 * under a newer one than any earlier run. */
	r = cnl_store_server_update(c->api->store, c->server.id, "pending", "",
	                            c->server.run[0] ? c->server.run : "{}");
	if (r < 0 || (r = cnl_store_server_get(c->api->store, c->server.id,
	                                       &c->server)) < 0) {
		cnl_api_store_error(c, resp, r, "server");
		return;
	}
	/* Its storage is already counted; only the workload is new. */
	c->server.storage_gb = 0;
	cnl_ctl_server_added(c->api->ctl, &c->server);
	cnl_store_server_get(c->api->store, c->server.id, &c->server);
	cnl_ctl_kick(c->api->ctl);
	cnl_http_reply(resp, 200, cnl_api_server_json(c, &c->server));
}
