/*
 * api_projects.c - projects and their members: list, create, show, set
 * flags, delete (only with nothing active), and memberships (set a role,
 * list, remove).
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

void cnl_api_h_projects_list(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store *s = c->st;
	const char *after, *last = NULL;
	int limit, n = 0, r;
	json_t *items;

	if (cnl_api_get_page(req, resp, &limit, &after) < 0)
		return;
	items = json_array();
	if (c->is_admin) {
		struct cnl_store_project *p =
		    cnl_xcalloc((size_t)limit, sizeof(*p));

		r = cnl_store_project_list(s, after, limit, p, &n);
		for (int i = 0; r == 0 && i < n; i++)
			json_array_append_new(items,
			                      cnl_api_project_json(&p[i]));
		if (r == 0 && n)
			last = json_string_value(json_object_get(
			    json_array_get(items, (size_t)n - 1), "id"));
		free(p);
	} else {
		struct cnl_store_membership *m =
		    cnl_xcalloc((size_t)limit, sizeof(*m));
		struct cnl_store_project p;

		r = cnl_store_membership_list(s, c->user.id, after, limit, m,
		                              &n);
		for (int i = 0; r == 0 && i < n; i++) {
			r = cnl_store_project_get(s, m[i].project_id, &p);
			if (r == 0)
				json_array_append_new(items,
				                      cnl_api_project_json(&p));
		}
		if (r == 0 && n)
			last = json_string_value(json_object_get(
			    json_array_get(items, (size_t)n - 1), "id"));
		free(m);
	}
	if (r < 0) {
		json_decref(items);
		cnl_api_store_error(c, resp, r, "project");
		return;
	}
	json_incref(items);
	cnl_http_reply(resp, 200, cnl_api_page_json(items, n, limit, last));
	json_decref(items);
}

void cnl_api_h_projects_create(void *call, struct cnl_http_request *req,
                               struct cnl_http_response *resp)
{
	static const char *const fields[] = {"name", "on_prem_only", NULL};
	struct call *c = call;
	struct cnl_store_project p = {0};
	const char *name;
	json_t *body;
	char err[256];
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(name = cnl_api_get_name(body, "name", resp)))
		goto out;
	if (cnl_json_get_bool(body, "on_prem_only", false, &p.on_prem_only, err,
	                      sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "%s", name);
	if (cnl_api_new_id(c, "prj", p.id) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot make an id");
		goto out;
	}
	snprintf(p.name, sizeof(p.name), "%s", name);
	p.created_ms = c->now_ms;
	if ((r = cnl_store_project_create(c->api->store, &p)) < 0) {
		cnl_api_store_error(c, resp, r, "project");
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "%s", p.id);
	if (p.on_prem_only && c->api->ctl)
		cnl_ctl_project_on_prem(c->api->ctl, p.id, true);
	cnl_http_reply(resp, 201, cnl_api_project_json(&p));
out:
	json_decref(body);
}

void cnl_api_h_members_set(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	static const char *const fields[] = {"user", "role", NULL};
	struct call *c = call;
	struct cnl_store_membership m = {0};
	struct cnl_store_user u;
	bool system = strcmp(c->project.name, CNL_API_ADMIN_PROJECT) == 0;
	const char *name, *role;
	json_t *body;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(name = cnl_api_get_name(body, "user", resp)) ||
	    !(role =
	          cnl_api_get_string(body, "role", CNL_STORE_ROLE_MAX, resp)))
		goto out;
	if (cnl_api_role_rank(role) == 0 && strcmp(role, "agent") != 0) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"role\": must be viewer, member, "
		               "project-admin, admin or agent");
		goto out;
	}
	if (system && !c->is_admin) {
		cnl_http_error(resp, 403, "forbidden",
		               "only administrators manage the %s project",
		               CNL_API_ADMIN_PROJECT);
		goto out;
	}
	if ((strcmp(role, "admin") == 0 || strcmp(role, "agent") == 0) &&
	    !system) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"role\": \"%s\" is granted only in "
		               "the %s project",
		               role, CNL_API_ADMIN_PROJECT);
		goto out;
	}
	if ((r = cnl_store_user_get_by_name(c->api->store, name, &u)) < 0) {
		cnl_api_store_error(c, resp, r, "user");
		goto out;
	}
	snprintf(c->target, sizeof(c->target), "%s:%s", c->project.id, u.id);
	/* As with removal: an administrator giving up their own admin role
	 * could leave the platform with none. */
	if (system && strcmp(u.id, c->user.id) == 0 &&
	    strcmp(role, "admin") != 0) {
		cnl_http_error(resp, 409, "conflict",
		               "administrators cannot change their own role "
		               "in the %s project",
		               CNL_API_ADMIN_PROJECT);
		goto out;
	}
	memcpy(m.user_id, u.id, sizeof(m.user_id));
	memcpy(m.project_id, c->project.id, sizeof(m.project_id));
	snprintf(m.role, sizeof(m.role), "%s", role);
	if ((r = cnl_store_membership_set(c->api->store, &m)) < 0) {
		cnl_api_store_error(c, resp, r, "membership");
		goto out;
	}
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:s,s:s,s:s}", "project_id",
	                         m.project_id, "user_id", m.user_id, "user",
	                         u.name, "role", m.role));
out:
	json_decref(body);
}

/* The clusters project @o is pinned to ("clusters", [] for any). */
static void project_pins(struct call *c, json_t *o)
{
	json_t *d = NULL;

	if (cnl_api_doc_json(c->st ? c->st : c->api->store, "project_pins",
	                     c->project.id, &d) == 0 &&
	    json_is_array(json_object_get(d, "clusters")))
		json_object_set(o, "clusters", json_object_get(d, "clusters"));
	else
		json_object_set_new(o, "clusters", json_array());
	json_decref(d);
}

void cnl_api_h_project_get(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call *c = call;

	json_t *o = cnl_api_project_json(&c->project);

	project_pins(c, o);
	cnl_http_reply(resp, 200, o);
}

/* PATCH: the project's flags ("on_prem_only" pins it to our own GPUs). */
void cnl_api_h_project_patch(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	static const char *const fields[] = {"on_prem_only", "clusters", NULL};
	struct call *c = call;
	bool v = c->project.on_prem_only;
	json_t *body, *pins, *o;
	char err[256];
	int r;

	snprintf(c->target, sizeof(c->target), "%s", c->project.id);
	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!json_object_get(body, "on_prem_only") &&
	    !json_object_get(body, "clusters")) {
		cnl_api_bad(resp, "give \"on_prem_only\" or \"clusters\"");
		goto out;
	}
	if (cnl_json_get_bool(body, "on_prem_only", false, &v, err,
	                      sizeof(err)) < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		goto out;
	}
	/* Pins: the clusters its work may be picked for ([]: any). */
	if ((pins = json_object_get(body, "clusters"))) {
		size_t k;
		json_t *n;

		if (!json_is_array(pins) || json_array_size(pins) > 16) {
			cnl_api_bad(resp, "field \"clusters\": a list of at "
			                  "most 16 cluster names ([]: any)");
			goto out;
		}
		json_array_foreach (pins, k, n) {
			const char *name = json_string_value(n);

			if (!name || !c->api->ctl ||
			    !cnl_ctl_cluster_known(c->api->ctl, name)) {
				cnl_http_error(resp, 400, "bad_request",
				               "field \"clusters\": no cluster "
				               "named \"%.64s\" (cnlab cluster "
				               "list)",
				               name ? name : "?");
				goto out;
			}
		}
		o = json_pack("{s:O}", "clusters", pins);
		r = json_array_size(pins)
		        ? cnl_api_doc_save(c, "project_pins", c->project.id,
		                           c->project.id, "", o, false)
		        : cnl_store_doc_delete(c->api->store, "project_pins",
		                               c->project.id);
		if (r == -CNL_ENOTFOUND)
			r = 0;
		json_decref(o);
		if (r < 0) {
			cnl_api_store_error(c, resp, r, "project");
			goto out;
		}
		if (c->api->ctl)
			cnl_ctl_project_pins(c->api->ctl, c->project.id, pins);
	}
	if (v != c->project.on_prem_only &&
	    (r = cnl_store_project_set_flags(c->api->store, c->project.id, v)) <
	        0) {
		cnl_api_store_error(c, resp, r, "project");
		goto out;
	}
	c->project.on_prem_only = v;
	if (c->api->ctl)
		cnl_ctl_project_on_prem(c->api->ctl, c->project.id, v);
	o = cnl_api_project_json(&c->project);
	project_pins(c, o);
	cnl_http_reply(resp, 200, o);
out:
	json_decref(body);
}

void cnl_api_h_members_list(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store_membership *m;
	struct cnl_store_user u;
	const char *after;
	int limit, n = 0, r;
	json_t *items;

	if (cnl_api_get_page(req, resp, &limit, &after) < 0)
		return;
	m = cnl_xcalloc((size_t)limit, sizeof(*m));
	r = cnl_store_membership_list_project(c->api->store, c->project.id,
	                                      after, limit, m, &n);
	if (r < 0) {
		free(m);
		cnl_api_store_error(c, resp, r, "membership");
		return;
	}
	items = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(
		    items,
		    json_pack(
		        "{s:s,s:s,s:s}", "user_id", m[i].user_id, "user",
		        cnl_store_user_get(c->api->store, m[i].user_id, &u) == 0
		            ? u.name
		            : "",
		        "role", m[i].role));
	cnl_http_reply(
	    resp, 200,
	    cnl_api_page_json(items, n, limit, n ? m[n - 1].user_id : NULL));
	free(m);
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
	/* Its jobs' files and uploads went with it from the store. */
	cnl_api_files_forget_project(c->api, c->project.id);
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
	if (cnl_api_path_user(c, req, resp, &u) < 0)
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
