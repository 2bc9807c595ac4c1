/*
 * ctl_cloud.c - the controller's side of the cloud burst (burst.c drives
 * it): which nodes are cloud instances, which work may go to them, and
 * what the burst needs to see of the queue.
 *
 * A node is a cloud one because the burst launched it under that name
 * (cnl_ctl_cloud_node(), before its agent ever registers), never because
 * its agent says so: its cluster is the one the burst gave it whatever
 * label the agent sends, so that an instance never joins a cluster of
 * owned GPUs and work pinned to those never lands on it.  Work of a
 * project marked on-prem-only is never picked for a cluster that holds a
 * cloud node (ctl_cluster.c takes the mask from here).  A cloud node is
 * never powered down (it is given back), and each run on one is charged
 * its share of the instance's price, audited on the job.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "server/ctl-internal.h"

int ctl_cloud_load(struct cnl_ctl *ctl)
{
	struct cnl_store_project *p = cnl_xcalloc(256, sizeof(*p));
	char after[CNL_ID_MAX] = "";
	int n, r = 0;

	ctl->cloud_nodes = json_object();
	ctl->on_prem = json_object();
	do {
		n = 0;
		if ((r = cnl_store_project_list(
		         ctl->store, after[0] ? after : NULL, 256, p, &n)) < 0)
			break;
		for (int i = 0; i < n; i++)
			if (p[i].on_prem_only)
				json_object_set_new(ctl->on_prem, p[i].id,
				                    json_true());
		if (n > 0)
			snprintf(after, sizeof(after), "%s", p[n - 1].id);
	} while (n == 256);
	free(p);
	return r < 0 ? r : 0;
}

void cnl_ctl_project_on_prem(struct cnl_ctl *ctl, const char *project_id,
                             bool on)
{
	if (on)
		json_object_set_new(ctl->on_prem, project_id, json_true());
	else
		json_object_del(ctl->on_prem, project_id);
	ctl->dirty = true;
}

void cnl_ctl_cloud_offer(struct cnl_ctl *ctl, const char *const *models,
                         const int *gpus, size_t n)
{
	ctl->n_cloud_offer = 0;
	for (size_t i = 0; i < n && ctl->n_cloud_offer < 16; i++) {
		int t = cnl_catalog_find(ctl->cfg.cat, models[i]);

		if (t < 0 || gpus[i] < 1 || gpus[i] > 255)
			continue;
		ctl->cloud_offer[ctl->n_cloud_offer].type = (int16_t)t;
		ctl->cloud_offer[ctl->n_cloud_offer].gpus = (uint8_t)gpus[i];
		ctl->n_cloud_offer++;
	}
}

bool ctl_cloud_could_run(const struct cnl_ctl *ctl, const char *project_id,
                         const struct cnl_req_prep *p)
{
	const struct cnl_alloc_req *r = &p->req;

	if (json_object_get(ctl->on_prem, project_id) ||
	    r->kind == CNL_REQ_CPU || r->kind == CNL_REQ_MIG)
		return false;
	for (size_t i = 0; i < ctl->n_cloud_offer; i++)
		if ((p->type_ok >> ctl->cloud_offer[i].type & 1) &&
		    (r->kind != CNL_REQ_WHOLE ||
		     r->gpus <= ctl->cloud_offer[i].gpus))
			return true;
	return false;
}

bool ctl_on_prem_only(const struct cnl_ctl *ctl, const struct wl *w)
{
	return json_object_get(ctl->on_prem, w->project_id) != NULL;
}

const char *ctl_cloud_cluster_of(const struct cnl_ctl *ctl, const char *name)
{
	return json_string_value(json_object_get(
	    json_object_get(ctl->cloud_nodes, name), "cluster"));
}

void ctl_cloud_registered(struct cnl_ctl *ctl, size_t i)
{
	struct node *n = &ctl->nodes[i];
	const json_t *o = json_object_get(ctl->cloud_nodes, n->name);

	n->cloud = o != NULL;
	n->cloud_price_h =
	    o ? json_number_value(json_object_get(o, "price_h")) : 0;
}

int cnl_ctl_cloud_node(struct cnl_ctl *ctl, const char *name,
                       const char *cluster, double price_h)
{
	int i;

	if (!name || !*name || strlen(name) >= CNL_STORE_NAME_MAX || !cluster ||
	    !*cluster || strlen(cluster) >= CNL_NAME_MAX || !(price_h >= 0) ||
	    !isfinite(price_h))
		return -EINVAL;
	json_object_set_new(
	    ctl->cloud_nodes, name,
	    json_pack("{s:s,s:f}", "cluster", cluster, "price_h", price_h));
	if ((i = ctl_node_find_any(ctl, name)) >= 0)
		ctl_cloud_registered(ctl, (size_t)i);
	return 0;
}

uint64_t ctl_cloud_clusters(struct cnl_ctl *ctl, struct cnl_picks *p)
{
	uint64_t mask = 0;

	for (size_t i = 0; i < ctl->n_nodes && i < p->n_nodes; i++) {
		const struct node *n = &ctl->nodes[i];
		size_t k = p->of_node[i];
		double per_gpu;

		if (!n->cloud || k >= 64)
			continue;
		mask |= 1ULL << k;
		per_gpu =
		    n->cloud_price_h / (ctl->cluster->nodes[i].n_gpus
		                            ? ctl->cluster->nodes[i].n_gpus
		                            : 1);
		/* Never 0: a free instance still costs more than owned. */
		if (per_gpu <= 0)
			per_gpu = 1e-9;
		if (p->cost[k] == 0 || per_gpu < p->cost[k])
			p->cost[k] = per_gpu;
	}
	return mask;
}

void ctl_cloud_ended(struct cnl_ctl *ctl, const struct wl *w, int64_t now)
{
	const struct node *n;
	struct cnl_store_audit a = {0};
	double share, secs, cost;
	int gpus;

	if (w->node < 0 || (size_t)w->node >= ctl->n_nodes)
		return;
	n = &ctl->nodes[w->node];
	if (!n->cloud || w->started_ms <= 0)
		return;
	gpus = ctl->cluster->nodes[w->node].n_gpus;
	share = gpus ? cnl_alloc_blocks_held(ctl->cluster, &w->placed) /
	                   (100.0 * gpus)
	             : 1.0;
	if (share > 1)
		share = 1;
	secs = (double)(now - w->started_ms) / 1000.0;
	if (secs < 0)
		secs = 0;
	cost = secs / 3600.0 * n->cloud_price_h * share;
	a.ts_ms = now;
	snprintf(a.actor, sizeof(a.actor), "scheduler");
	snprintf(a.action, sizeof(a.action), "job.cloud_cost");
	snprintf(a.target, sizeof(a.target), "%s", w->id);
	if (snprintf(a.result, sizeof(a.result),
	             "ran %.0f s on cloud node %.64s (cluster %.31s): %.0f%% "
	             "of its %.6g an hour, %.6g in all",
	             secs, n->name, ctl_cloud_cluster_of(ctl, n->name),
	             share * 100, n->cloud_price_h,
	             cost) >= (int)sizeof(a.result))
		a.result[sizeof(a.result) - 1] = '\0';
	if (cnl_store_audit_append(ctl->store, &a, NULL) < 0)
		cnl_log(CNL_LOG_ERROR, "cannot audit a cloud run's cost",
		        "job=%s", w->id);
}

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
		    json_pack("{s:s,s:s,s:b,s:b,s:s,s:s,s:I,s:i,s:i,s:o}", "id",
		              w->id, "project", w->project_id, "on_prem_only",
		              ctl_on_prem_only(ctl, w), "nowhere",
		              w->wait_reason == CNL_WHY_NO_MATCHING_NODE,
		              "cluster", w->cl_pick, "asked", w->cl_want,
		              "waiting_ms", (json_int_t)(now - w->j.submit_ms),
		              "gpus", r->kind == CNL_REQ_WHOLE ? r->gpus : 1,
		              "blocks",
		              r->kind == CNL_REQ_WHOLE ? 100 : r->blocks,
		              "models", models_of(ctl, w)));
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
