/*
 * ctl_burst.c - what the cloud burst (burst.c) sees of the controller:
 * each cluster's capacity, use and forecast demand, the GPU work waiting,
 * and the cloud nodes (cnl_ctl_burst_view()); and what federation
 * (federate.c) takes of it: the jobs a peer site may take, and their
 * leaving (cnl_ctl_forward_candidates(), cnl_ctl_job_withdraw()).  Apart
 * from ctl_cloud.c, which the cluster pick uses, so that neither needs the
 * other's file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/util.h"

#include "server/ctl-internal.h"

/* The catalog names @r may run on ("[]": any GPU). */
static json_t *models_of(const struct cnl_ctl *ctl, const struct wl *w)
{
	const struct cnl_alloc_req *r = &w->j.req;
	const struct cnl_catalog *cat = ctl->cfg.cat;
	json_t *a = json_array();

	for (uint16_t t = 0; t < cat->n && t < 64; t++)
		if ((r->gpu_types && (r->gpu_types >> t & 1)) ||
		    (!r->gpu_types && r->gpu_type == (int)t))
			json_array_append_new(a,
			                      json_string(cat->types[t].name));
	return a;
}

json_t *cnl_ctl_burst_view(struct cnl_ctl *ctl, int64_t now)
{
	json_t *v = json_object(), *cls = json_array(), *pend = json_array(),
	       *nodes = json_array();
	struct cnl_picks p;
	uint64_t cloud = 0;

	if (cnl_picks_scan(ctl->cluster, NULL, 0, &p) == 0) {
		cloud = ctl_cloud_clusters(ctl, &p);
		for (size_t k = 0; k < p.n; k++) {
			double cap = (double)p.load[k].blocks_total;

			json_array_append_new(
			    cls, json_pack(
			             "{s:s,s:b,s:f,s:f,s:f}", "name", p.name[k],
			             "cloud", k < 64 && (cloud >> k & 1),
			             "capacity", cap, "used",
			             (double)p.load[k].blocks_used, "demand",
			             ctl_forecast_demand(ctl, p.name[k], cap)));
		}
		cnl_picks_done(&p);
	}
	for (size_t i = 0; i < ctl->n_wl; i++) {
		const struct wl *w = &ctl->wl[i];
		const struct cnl_alloc_req *r = &w->j.req;

		if (w->state != CNL_WL_PENDING || r->kind == CNL_REQ_CPU ||
		    r->kind == CNL_REQ_MIG || w->server)
			continue;
		json_array_append_new(
		    pend,
		    json_pack(
		        "{s:s,s:s,s:b,s:b,s:s,s:s,s:I,s:i,s:i,s:o,s:I,s:I}",
		        "id", w->id, "project", w->project_id, "on_prem_only",
		        ctl_on_prem_only(ctl, w), "nowhere",
		        w->wait_reason == CNL_WHY_NO_MATCHING_NODE ||
		            (w->wait_reason == CNL_WHY_NO_NODE_TAKING_WORK &&
		             !ctl_owned_could_host(ctl, w)),
		        "cluster", w->cl_pick, "asked", w->cl_want,
		        "waiting_ms", (json_int_t)(now - w->j.submit_ms),
		        "gpus", r->kind == CNL_REQ_WHOLE ? r->gpus : 1,
		        "blocks", r->kind == CNL_REQ_WHOLE ? 100 : r->blocks,
		        "models", models_of(ctl, w), "cpu_milli",
		        (json_int_t)r->cpu_milli, "mem_mib",
		        (json_int_t)r->mem_mib));
		/* Its project's pins, if any: the clusters it may use. */
		if (json_object_get(ctl->pins, w->project_id))
			json_object_set(
			    json_array_get(pend, json_array_size(pend) - 1),
			    "pins", json_object_get(ctl->pins, w->project_id));
	}
	for (size_t i = 0; i < ctl->n_nodes; i++) {
		const struct node *n = &ctl->nodes[i];
		const struct cnl_node *cn = &ctl->cluster->nodes[i];
		bool busy = cn->n_allocs > 0;

		if (!n->cloud)
			continue;
		for (size_t k = 0; !busy && k < ctl->n_wl; k++)
			busy = ctl->wl[k].node == (int)i;
		json_array_append_new(
		    nodes,
		    json_pack("{s:s,s:s,s:b,s:I}", "name", n->name, "state",
		              ctl_nstate_names[n->state], "busy", busy,
		              "last_seen_ms", (json_int_t)n->last_seen_ms));
	}
	json_object_set_new(v, "clusters", cls);
	json_object_set_new(v, "pending", pend);
	json_object_set_new(v, "nodes", nodes);
	return v;
}

/* ---- federation (federate.h) ----------------------------------------------
 */

static int by_wait(const void *a, const void *b)
{
	json_int_t x = json_integer_value(
	               json_object_get(*(json_t *const *)a, "waited_ms")),
	           y = json_integer_value(
	               json_object_get(*(json_t *const *)b, "waited_ms"));

	return x > y ? -1 : x < y;
}

json_t *cnl_ctl_forward_candidates(struct cnl_ctl *ctl, int64_t now,
                                   int64_t soon_ms)
{
	json_t **v = NULL, *out = json_array();
	size_t n = 0;

	for (size_t i = 0; i < ctl->n_wl; i++) {
		const struct wl *w = &ctl->wl[i];
		const char *cl = w->cl_pick[0] ? w->cl_pick : "default";
		int64_t target, waited = now - w->j.submit_ms;

		if (w->state != CNL_WL_PENDING || w->server || w->gang_id[0] ||
		    w->gang_size > 1 || w->cl_want[0] || w->n_secrets ||
		    ctl_on_prem_only(ctl, w) ||
		    json_object_get(ctl->pins, w->project_id))
			continue;
		target = ctl_cluster_wait_target(ctl, cl);
		if (target <= 0 || waited < target)
			continue;
		if (w->est_start_ms > 0 && w->est_start_ms - now < soon_ms)
			continue;
		v = cnl_xrealloc(v, (n + 1) * sizeof(*v));
		v[n++] = json_pack("{s:s,s:s,s:I,s:I}", "id", w->id, "cluster",
		                   cl, "waited_ms", (json_int_t)waited,
		                   "target_ms", (json_int_t)target);
	}
	if (n)
		qsort(v, n, sizeof(*v), by_wait);
	for (size_t i = 0; i < n; i++)
		json_array_append_new(out, v[i]);
	free(v);
	return out;
}

int cnl_ctl_job_withdraw(struct cnl_ctl *ctl, const char *id)
{
	struct wl *w = ctl_wl_find(ctl, id);

	if (!w || w->server)
		return -CNL_ENOTFOUND;
	if (w->state != CNL_WL_PENDING)
		return -EBUSY;
	ctl_wl_remove(ctl, w);
	ctl->dirty = ctl->changed = true;
	return 0;
}
