/*
 * api_clusters.c - the clusters one control plane governs (ctl.h,
 * "clusters"):
 *
 *   GET /v1/clusters                    every cluster: nodes, GPUs, load,
 *                                       pending and running work, policy
 *   GET /v1/clusters/{cluster}          one, with its nodes' names (for
 *                                       administrators)
 *   PATCH /v1/clusters/{cluster}/policy its policy, weights and wait
 *                                       target (administrators; audited)
 *
 * A policy is stored as a document of kind "cluster" under the cluster's
 * name, then applied; a cluster may be given one before its first node
 * joins.  A field left out of a PATCH keeps its value; "weights", when
 * given, replace the cluster's weights whole.
 */
#include <stdio.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/label.h"
#include "sched/catalog.h"
#include "server/api-internal.h"
#include "sched/pick.h"
#include "server/ctl.h"

int cnl_api_cluster_name(struct call *c, const char *name,
                         struct cnl_http_response *resp)
{
	if (!name || !cnl_label_valid(name) || strlen(name) >= CNL_NAME_MAX) {
		cnl_api_bad(resp, "field \"cluster\": must be a cluster name "
		                  "of 1..31 characters of A-Z a-z 0-9 . _ -");
		return -1;
	}
	if (!cnl_ctl_cluster_known(c->api->ctl, name)) {
		cnl_http_error(resp, 400, "bad_request",
		               "field \"cluster\": no cluster named \"%s\" "
		               "(cnlab cluster list)",
		               name);
		return -1;
	}
	return 0;
}

void cnl_api_h_clusters_list(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	struct call *c = call;
	json_t *a = cnl_ctl_clusters_json(c->api->ctl, NULL);

	(void)req;
	if (!a) {
		cnl_http_error(resp, 500, "internal", "cannot list clusters");
		return;
	}
	cnl_http_reply(resp, 200, json_pack("{s:o}", "items", a));
}

void cnl_api_h_cluster_get(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *name = cnl_http_param(req, "cluster");
	json_t *o = cnl_ctl_clusters_json(c->api->ctl, name);

	if (!o) {
		cnl_http_error(
		    resp, 404, "not_found",
		    "no cluster named \"%.64s\" (cnlab cluster list)", name);
		return;
	}
	if (!c->is_admin)
		json_object_del(o, "node_names");
	cnl_http_reply(resp, 200, o);
}

void cnl_api_h_cluster_policy_put(void *call, struct cnl_http_request *req,
                                  struct cnl_http_response *resp)
{
	static const char *const fields[] = {"policy", "weights",
	                                     "wait_target_s", NULL};
	struct call *c = call;
	const char *name = cnl_http_param(req, "cluster");
	char err[640];
	json_t *body, *old = NULL;
	const char *k;
	json_t *v;
	int r;

	snprintf(c->target, sizeof(c->target), "cluster:%.64s", name);
	if (!cnl_label_valid(name) || strlen(name) >= CNL_NAME_MAX) {
		cnl_api_bad(resp,
		            "cluster name: must be 1..31 characters of "
		            "A-Z a-z 0-9 . _ -, not starting with . or -");
		return;
	}
	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if (!json_object_size(body)) {
		cnl_api_bad(resp, "give at least one of \"policy\", "
		                  "\"weights\" and \"wait_target_s\"");
		goto out;
	}
	r = cnl_api_doc_json(c->api->store, "cluster", name, &old);
	if (r < 0 && r != -CNL_ENOTFOUND) {
		cnl_api_store_error(c, resp, r, "cluster policy");
		goto out;
	}
	json_object_foreach (old, k, v)
		if (!json_object_get(body, k))
			json_object_set(body, k, v);
	if (!old && !cnl_ctl_cluster_room(c->api->ctl)) {
		cnl_http_error(resp, 409, "conflict",
		               "at most %d clusters have policies of their own",
		               CNL_PICK_MAX - 1);
		goto out;
	}
	if (cnl_ctl_cluster_check(c->api->ctl, name, body, err, sizeof(err)) <
	    0) {
		cnl_api_bad(resp, err);
		goto out;
	}
	if ((r = cnl_api_doc_save(c, "cluster", name, "", "", body, false)) <
	    0) {
		cnl_api_store_error(c, resp, r, "cluster policy");
		goto out;
	}
	if (cnl_ctl_cluster_set(c->api->ctl, name, body, c->now_ms, err,
	                        sizeof(err)) < 0) {
		cnl_http_error(resp, 500, "internal", "%s", err);
		goto out;
	}
	/* (NULL only with more clusters than can be told apart: the
	 * policy is set all the same.) */
	{
		json_t *o = cnl_ctl_clusters_json(c->api->ctl, name);

		cnl_http_reply(
		    resp, 200,
		    o ? o
		      : json_pack("{s:s,s:b}", "name", name, "configured", 1));
	}
out:
	json_decref(old);
	json_decref(body);
}
