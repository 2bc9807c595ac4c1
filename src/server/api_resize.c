/*
 * api_resize.c - PATCH /v1/jobs/{job} and PATCH /v1/servers/{server}:
 * {"blocks": N} resizes the workload's block slice in flight (the
 * controller's cnl_ctl_resize(), ctl_resize.c, says what happens in each
 * state).  Project members reach the route; of them only the workload's
 * owner (a job's submitter, a server's owner) and the project's admins
 * (and administrators) may resize it: 403 for other members, 404 for
 * those outside the project, as everywhere in the API.
 */
#include <stdio.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/json.h"
#include "server/api-internal.h"
#include "sched/alloc.h"
#include "server/ctl.h"

/* Whether the caller may resize work owned by @owner. */
static bool may_resize(const struct call *c, const char *owner)
{
	return c->is_admin || strcmp(c->user.id, owner) == 0 ||
	       cnl_api_role_rank(c->role) >= 3;
}

/* The body's size: 0, or -1 with 400 in @resp naming the field. */
static int body_blocks(struct cnl_http_request *req,
                       struct cnl_http_response *resp, int *ret)
{
	static const char *const fields[] = {"blocks", NULL};
	json_t *body;
	int64_t v;
	char err[256];
	int r;

	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return -1;
	r = cnl_json_get_int(body, "blocks", true, 1, CNL_BLOCKS_PER_GPU, &v,
	                     err, sizeof(err));
	json_decref(body);
	if (r < 0) {
		cnl_http_error(resp, 400, "bad_request", "%s", err);
		return -1;
	}
	*ret = (int)v;
	return 0;
}

/* Resize workload @id of @kind ("job", "server"); 0 when done. */
static int resize(struct call *c, struct cnl_http_request *req,
                  struct cnl_http_response *resp, const char *id,
                  const char *owner, const char *kind)
{
	char err[256];
	int blocks, st;

	snprintf(c->target, sizeof(c->target), "%s", id);
	if (!may_resize(c, owner)) {
		cnl_http_error(resp, 403, "forbidden",
		               "only the %s's owner or a project admin may "
		               "resize it",
		               kind);
		return -1;
	}
	if (body_blocks(req, resp, &blocks) < 0)
		return -1;
	/* The audit record says the size asked: "200 blocks 40". */
	snprintf(c->note_buf, sizeof(c->note_buf), "blocks %d", blocks);
	c->note = c->note_buf;
	st = cnl_ctl_resize(c->api->ctl, id, blocks, c->now_ms, err,
	                    sizeof(err));
	if (st != 200) {
		cnl_http_error(resp, st,
		               st == 400   ? "bad_request"
		               : st == 409 ? "conflict"
		                           : "internal",
		               "%s %s: %s", kind, id, err);
		return -1;
	}
	return 0;
}

void cnl_api_h_job_patch(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp)
{
	struct call *c = call;
	int r;

	if (resize(c, req, resp, c->job.id, c->job.user_id, "job") < 0)
		return;
	if ((r = cnl_store_job_get(c->api->store, c->job.id, &c->job)) < 0) {
		cnl_api_store_error(c, resp, r, "job");
		return;
	}
	cnl_http_reply(resp, 200, cnl_api_job_json(c, &c->job));
}

void cnl_api_h_server_patch(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;
	int r;

	if (resize(c, req, resp, c->server.id, c->server.user_id, "server") < 0)
		return;
	if ((r = cnl_store_server_get(c->api->store, c->server.id,
	                              &c->server)) < 0) {
		cnl_api_store_error(c, resp, r, "server");
		return;
	}
	cnl_http_reply(resp, 200, cnl_api_server_json(c, &c->server));
}
