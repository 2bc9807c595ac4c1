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

/* @fn on each document of @kind (id, parsed body), a page at a time. */
static int each_doc(struct cnl_ctl *ctl, const char *kind,
                    void (*fn)(struct cnl_ctl *, const char *, json_t *))
{
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	char last[CNL_STORE_DOC_ID_MAX] = "";
	int nd, r;

	do {
		nd = 0;
		if ((r = cnl_store_doc_list(ctl->store, kind, NULL,
		                            last[0] ? last : NULL,
		                            CNL_STORE_LIST_MAX, d, &nd)) < 0)
			break;
		for (int i = 0; i < nd; i++) {
			json_t *o = json_loads(d[i].body, 0, NULL);

			fn(ctl, d[i].id, o);
			json_decref(o);
		}
		if (nd > 0)
			snprintf(last, sizeof(last), "%s", d[nd - 1].id);
		cnl_store_docs_done(d, nd);
	} while (nd == CNL_STORE_LIST_MAX);
	free(d);
	return r;
}

static void pins_seen(struct cnl_ctl *ctl, const char *id, json_t *o)
{
	cnl_ctl_project_pins(ctl, id, json_object_get(o, "clusters"));
}

/* A quota document "<project>@<cluster>": a project's quota in a cluster
 * (api_quota.c); the others are projects' and users' own. */
static void quota_seen(struct cnl_ctl *ctl, const char *id, json_t *o)
{
	const char *at = strchr(id, '@');
	char project[CNL_ID_MAX];

	if (!at || (size_t)(at - id) >= sizeof(project) ||
	    !json_is_number(json_object_get(o, "gpu_hours")))
		return;
	memcpy(project, id, (size_t)(at - id));
	project[at - id] = 0;
	cnl_ctl_cluster_quota(
	    ctl, project, at + 1,
	    json_number_value(json_object_get(o, "gpu_hours")));
}

int ctl_cloud_load(struct cnl_ctl *ctl)
{
	struct cnl_store_project *p = cnl_xcalloc(256, sizeof(*p));
	char after[CNL_ID_MAX] = "";
	int n, r = 0;

	ctl->cloud_nodes = json_object();
	ctl->on_prem = json_object();
	ctl->pins = json_object();
	ctl->cl_quota = json_object();
	if ((r = each_doc(ctl, "project_pins", pins_seen)) < 0 ||
	    (r = each_doc(ctl, "quota", quota_seen)) < 0) {
		free(p);
		return r;
	}
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

void cnl_ctl_cloud_offer(struct cnl_ctl *ctl,
                         const struct cnl_ctl_cloud_offer *o, size_t n)
{
	ctl->n_cloud_offer = 0;
	for (size_t i = 0; i < n && ctl->n_cloud_offer < 16; i++) {
		int t = cnl_catalog_find(ctl->cfg.cat, o[i].model);

		if (t < 0 || o[i].gpus < 1 || o[i].gpus > 255)
			continue;
		ctl->cloud_offer[ctl->n_cloud_offer].type = (int16_t)t;
		ctl->cloud_offer[ctl->n_cloud_offer].gpus = (uint8_t)o[i].gpus;
		ctl->cloud_offer[ctl->n_cloud_offer].cpu_milli = o[i].cpu_milli;
		ctl->cloud_offer[ctl->n_cloud_offer].mem_mib = o[i].mem_mib;
		snprintf(ctl->cloud_offer[ctl->n_cloud_offer].cluster,
		         CNL_NAME_MAX, "%s", o[i].cluster ? o[i].cluster : "");
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
		     r->gpus <= ctl->cloud_offer[i].gpus) &&
		    r->cpu_milli <= ctl->cloud_offer[i].cpu_milli &&
		    r->mem_mib <= ctl->cloud_offer[i].mem_mib &&
		    cnl_ctl_project_pinned((struct cnl_ctl *)ctl, project_id,
		                           ctl->cloud_offer[i].cluster))
			return true;
	return false;
}

bool ctl_owned_could_host(struct cnl_ctl *ctl, const struct wl *w)
{
	struct cnl_req_prep p;
	struct cnl_alloc_req r = w->j.req;

	r.nodes = NULL;
	if (cnl_alloc_prepare(ctl->cluster, &r, &p) < 0)
		return false;
	for (size_t i = 0; i < ctl->n_nodes; i++)
		if (!ctl->nodes[i].cloud &&
		    cnl_node_could_host(&ctl->cluster->nodes[i], &p))
			return true;
	return false;
}

bool cnl_ctl_cloud_movable(struct cnl_ctl *ctl, const char *node)
{
	int i = ctl_node_find_any(ctl, node);

	if (i < 0)
		return false;
	for (size_t k = 0; k < ctl->n_wl; k++)
		if (ctl->wl[k].node == i &&
		    !ctl_owned_could_host(ctl, &ctl->wl[k]))
			return false;
	return true;
}

void cnl_ctl_project_pins(struct cnl_ctl *ctl, const char *project_id,
                          const json_t *names)
{
	if (json_array_size(names))
		json_object_set_new(ctl->pins, project_id,
		                    json_deep_copy(names));
	else
		json_object_del(ctl->pins, project_id);
	ctl->dirty = true;
}

bool cnl_ctl_project_pinned(struct cnl_ctl *ctl, const char *project_id,
                            const char *name)
{
	const json_t *a = json_object_get(ctl->pins, project_id);
	size_t k;
	json_t *v;

	if (!a)
		return true;
	json_array_foreach (a, k, v)
		if (strcmp(json_string_value(v), name) == 0)
			return true;
	return false;
}

/* ---- quotas per cluster ------------------------------------------------- */

static void quota_key(const char *project_id, const char *cluster, char *buf,
                      size_t len)
{
	snprintf(buf, len, "%s@%s", project_id, cluster);
}

void cnl_ctl_cluster_quota(struct cnl_ctl *ctl, const char *project_id,
                           const char *cluster, double gpu_hours)
{
	char key[CNL_ID_MAX + CNL_NAME_MAX + 2];

	quota_key(project_id, cluster, key, sizeof(key));
	if (gpu_hours >= 0)
		json_object_set_new(ctl->cl_quota, key, json_real(gpu_hours));
	else
		json_object_del(ctl->cl_quota, key);
	ctl->dirty = true;
}

/* GPU-hours project @project_id used in @cluster. */
static double used_in(struct cnl_ctl *ctl, const char *key)
{
	return ctl_usage_of(ctl, key)->block_ms / 100.0 / 3600000.0;
}

bool cnl_ctl_cluster_quota_spent(struct cnl_ctl *ctl, const char *project_id,
                                 const char *cluster)
{
	char key[CNL_ID_MAX + CNL_NAME_MAX + 2];
	const json_t *l;

	quota_key(project_id, cluster, key, sizeof(key));
	l = json_object_get(ctl->cl_quota, key);
	return l && used_in(ctl, key) >= json_number_value(l);
}

json_t *cnl_ctl_cluster_quotas_json(struct cnl_ctl *ctl, const char *project_id)
{
	size_t n = strlen(project_id);
	json_t *a = json_array(), *v;
	const char *k;

	json_object_foreach (ctl->cl_quota, k, v)
		if (strncmp(k, project_id, n) == 0 && k[n] == '@')
			json_array_append_new(
			    a, json_pack("{s:s,s:f,s:f}", "cluster", k + n + 1,
			                 "used", used_in(ctl, k), "limit",
			                 json_number_value(v)));
	return a;
}

void ctl_cluster_quota_charge(struct cnl_ctl *ctl, const struct wl *w,
                              double block_ms)
{
	char key[CNL_ID_MAX + CNL_NAME_MAX + 2];
	const struct cnl_node *n;
	struct usage *u;

	if (w->node < 0 || (size_t)w->node >= ctl->n_nodes)
		return;
	n = &ctl->cluster->nodes[w->node];
	quota_key(w->project_id, n->cluster[0] ? n->cluster : "default", key,
	          sizeof(key));
	u = ctl_usage_of(ctl, key);
	u->block_ms += block_ms;
	u->dirty = true;
}

uint64_t ctl_quota_mask(struct cnl_ctl *ctl, const struct wl *w,
                        const struct cnl_picks *p)
{
	uint64_t m = ~0ULL;

	if (!json_object_size(ctl->cl_quota))
		return m;
	for (size_t k = 0; k < p->n && k < 64; k++)
		if (cnl_ctl_cluster_quota_spent(ctl, w->project_id, p->name[k]))
			m &= ~(1ULL << k);
	return m;
}

uint64_t ctl_pinned_mask(const struct cnl_ctl *ctl, const struct wl *w,
                         const struct cnl_picks *p)
{
	const json_t *a = json_object_get(ctl->pins, w->project_id);
	uint64_t m = 0;
	size_t k;
	json_t *v;
	int i;

	if (!a)
		return ~0ULL;
	json_array_foreach (a, k, v)
		if ((i = cnl_picks_find(p, json_string_value(v))) >= 0 &&
		    i < 64)
			m |= 1ULL << i;
	return m;
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

/* Whether an owned cluster of @p (those not in @cloud) could start @w
 * now. */
static bool owned_starts_now(struct cnl_ctl *ctl, const struct cnl_picks *p,
                             uint64_t cloud, const struct wl *w)
{
	struct cnl_job j = w->j;

	j.state = CNL_JOB_PENDING;
	for (size_t k = 0; k < p->n && k < 64; k++)
		if (!(cloud >> k & 1) &&
		    cnl_pick_fits_now(ctl->cluster, p, &j, k))
			return true;
	return false;
}

int cnl_ctl_cloud_return(struct cnl_ctl *ctl, const char *node, int64_t budget,
                         int64_t now, json_t *ret)
{
	int i = ctl_node_find_any(ctl, node), n = 0;
	const int64_t grace = 30000;
	struct cnl_picks p = {0};
	uint64_t cloud = 0;
	bool scanned = false;

	if (i < 0 || !ctl->nodes[i].cloud)
		return 0;
	for (size_t k = 0; k < ctl->n_wl; k++) {
		struct wl *w = &ctl->wl[k], next;
		int blocks;

		/* Gangs come back whole (only on-prem-only ones are moved,
		 * a member at a time: the gang check requeues the rest);
		 * servers stay. */
		if (w->node != i || w->server ||
		    (w->gang_id[0] && !ctl_on_prem_only(ctl, w)) ||
		    (w->state != CNL_WL_ASSIGNED && w->state != CNL_WL_STARTED))
			continue;
		blocks = cnl_alloc_blocks_held(ctl->cluster, &w->placed);
		/* Work of a project marked on-prem-only since it went out
		 * leaves at once, whatever it declared. */
		if (!ctl_on_prem_only(ctl, w)) {
			if (budget < 0 || !w->j.preemptible || blocks > budget)
				continue;
			/* The clusters, once per call (a requeue keeps its
			 * allocation until its agent reports). */
			if (!scanned) {
				if (cnl_picks_scan(ctl->cluster, NULL, 0, &p) <
				    0)
					break;
				scanned = true;
				cloud = ctl_cloud_clusters(ctl, &p);
			}
			if (!owned_starts_now(ctl, &p, cloud, w))
				continue;
		}
		next = *w;
		if (ctl_step(&next, CNL_WL_EV_REQUEUE) < 0)
			continue;
		next.signal_ms = now;
		next.kill_ms = now + grace;
		if (ctl_persist(ctl, &next, now) < 0)
			continue;
		*w = next;
		if (budget >= 0 && !ctl_on_prem_only(ctl, w))
			budget -= blocks;
		n++;
		ctl_node_changed(ctl, w->node);
		ctl_facts_touch(ctl, w);
		if (ret)
			json_array_append_new(ret, json_string(w->id));
	}
	if (scanned)
		cnl_picks_done(&p);
	if (n) {
		ctl->dirty = ctl->changed = true;
		cnl_ctl_kick(ctl);
	}
	return n;
}
