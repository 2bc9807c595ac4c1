/*
 * api_profiles.c - profiles: the administrators' named GPU shapes, with
 * whether each can start now or when.
 *
 *   profile  id = name            {"gpu", "description"}
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

/* The shape a profile name stands for, into @shape; 0 or -CNL_ENOTFOUND. */
int cnl_api_profile_shape(struct call *c, const char *name, char *shape,
                          size_t len, json_t **ret_doc)
{
	json_t *o;
	int r;

	if (strlen(name) >= CNL_STORE_DOC_ID_MAX)
		return -CNL_ENOTFOUND;
	if ((r = cnl_api_doc_json(c->api->store, "profile", name, &o)) < 0)
		return r;
	snprintf(shape, len, "%s",
	         json_string_value(json_object_get(o, "gpu"))
	             ? json_string_value(json_object_get(o, "gpu"))
	             : "");
	if (ret_doc)
		*ret_doc = o;
	else
		json_decref(o);
	return 0;
}

static json_t *profile_json(struct call *c, const char *name, json_t *o)
{
	const char *gpu = json_string_value(json_object_get(o, "gpu"));
	struct cnl_alloc_req req;
	char buf[CNL_SHAPE_MAX], err[160], slice[16] = "-";
	const char *type = "-";
	json_t *p;

	if (gpu && cnl_shape_parse(&c->api->cat, gpu, &req, buf, err,
	                           sizeof(err)) == 0) {
		type = cnl_shape_type_name(&c->api->cat, &req);
		if (req.kind == CNL_REQ_BLOCKS)
			snprintf(slice, sizeof(slice), "%d%%", req.blocks);
		else if (req.kind == CNL_REQ_WHOLE)
			snprintf(slice, sizeof(slice), "%d00%%", req.gpus);
		else if (req.kind == CNL_REQ_MIG)
			snprintf(slice, sizeof(slice), "%s", req.profile);
	}
	p = json_deep_copy(o);
	json_object_set_new(p, "name", json_string(name));
	json_object_set_new(p, "gpu_type", json_string(type));
	json_object_set_new(p, "slice", json_string(slice));
	json_object_set_new(
	    p, "availability",
	    gpu ? cnl_ctl_availability(c->api->ctl, gpu, c->now_ms)
	        : json_null());
	if (!json_object_get(p, "availability"))
		json_object_set_new(p, "availability", json_null());
	return p;
}

static json_t *profile_item(struct call *c, const struct cnl_store_doc *d,
                            json_t *body)
{
	return profile_json(c, d->id, body);
}

void cnl_api_h_profiles_list(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	cnl_api_doc_page(call, req, resp, "profile", NULL, "profile",
	                 profile_item);
}

/* POST /v1/profiles: create or replace a profile by name. */
void cnl_api_h_profiles_put(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	static const char *const fields[] = {"name", "gpu", "description",
	                                     NULL};
	struct call *c = call;
	const char *name, *gpu, *desc = "";
	char err[256];
	json_t *body, *o;
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!(name = cnl_api_get_name(body, "name", resp)) ||
	    !(gpu = cnl_api_get_string(body, "gpu", CNL_SHAPE_MAX, resp)))
		goto out;
	snprintf(c->target, sizeof(c->target), "profile:%s", name);
	if (cnl_json_get_string(body, "description", false, &desc, err,
	                        sizeof(err)) < 0 ||
	    strlen(desc) > 200) {
		cnl_api_bad(
		    resp, "field \"description\": must be a string of at most "
		          "200 bytes");
		goto out;
	}
	if (cnl_ctl_shape_check(c->api->ctl, gpu, err, sizeof(err)) < 0) {
		char msg[320];

		snprintf(msg, sizeof(msg), "field \"gpu\": %s", err);
		cnl_api_bad(resp, msg);
		goto out;
	}
	o = json_pack("{s:s,s:s}", "gpu", gpu, "description", desc);
	r = cnl_api_doc_save(c, "profile", name, "", name, o, false);
	if (r < 0) {
		json_decref(o);
		cnl_api_store_error(c, resp, r, "profile");
		goto out;
	}
	cnl_http_reply(resp, 200, profile_json(c, name, o));
	json_decref(o);
out:
	json_decref(body);
}

void cnl_api_h_profile_delete(void *call, struct cnl_http_request *req,
                              struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *name = cnl_http_param(req, "profile");
	int r;

	snprintf(c->target, sizeof(c->target), "profile:%s", name);
	if ((r = cnl_store_doc_delete(c->api->store, "profile", name)) < 0) {
		cnl_api_store_error(c, resp, r, "profile");
		return;
	}
	cnl_http_reply(resp, 200, json_pack("{s:s}", "deleted", name));
}

int cnl_api_seed_profiles(struct cnl_store *s, int64_t now)
{
	static const char *const seeds[][3] = {
	    {"h100-25pct", "h100-25", "A quarter of an H100: 25 blocks."},
	    {"h100-full", "h100-full", "One whole H100."},
	    {"a100-50pct", "a100-50", "Half of an A100: 50 blocks."},
	    {"l40s-block", "l40s-10", "A tenth of an L40S: 10 blocks."},
	};
	int r = 0;

	for (size_t i = 0; r == 0 && i < CNL_ARRAY_SIZE(seeds); i++) {
		struct cnl_store_doc d = {0};
		json_t *o = json_pack("{s:s,s:s}", "gpu", seeds[i][1],
		                      "description", seeds[i][2]);

		snprintf(d.kind, sizeof(d.kind), "profile");
		snprintf(d.id, sizeof(d.id), "%s", seeds[i][0]);
		snprintf(d.name, sizeof(d.name), "%s", seeds[i][0]);
		d.body = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
		d.updated_ms = now;
		json_decref(o);
		r = d.body ? cnl_store_doc_put(s, &d, false) : -ENOMEM;
		free(d.body);
	}
	return r;
}
