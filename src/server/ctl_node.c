/*
 * ctl_node.c - the node protocol as the controller sees it: nodes loaded
 * and registered (labels may change while work runs), heartbeats (which
 * list the work a node runs; what it stopped listing is lost), long-polled
 * assignments, reports of work starting and ending under its fencing
 * epoch, and the states administrators set (cordon, drain).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/json.h"
#include "common/label.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "net/metrics.h"
#include "sched/sched.h"
#include "server/ctl-internal.h"
#include "server/shape.h"

static int add_cluster_node(struct cnl_ctl *ctl, json_t *inv, char *err,
                            size_t errlen)
{
	struct cnl_node_spec spec = {0};
	const char *type = NULL, *name = NULL;
	json_int_t gpus = 0, cpu = 0, mem = 0;
	json_t *ds;
	size_t i;
	int r;

	if (json_unpack(inv, "{s:s,s?s,s:I,s:I,s:I}", "name", &name, "gpu_type",
	                &type, "gpus", &gpus, "cpu_milli", &cpu, "mem_mib",
	                &mem) < 0) {
		snprintf(err, errlen, "node inventory is incomplete");
		return -CNL_EFIELD;
	}
	spec.name = name;
	spec.n_gpus = (int)gpus;
	spec.cpu_milli = cpu;
	spec.mem_mib = mem;
	spec.gpu_type = 0;
	if (gpus > 0) {
		if (!type || (r = cnl_catalog_find(ctl->cfg.cat, type)) < 0) {
			snprintf(err, errlen,
			         "field \"gpu_type\": \"%s\" is not a GPU type "
			         "of the catalog",
			         type ? type : "");
			return -CNL_EFIELD;
		}
		spec.gpu_type = r;
	}
	spec.cluster = json_string_value(json_object_get(inv, "cluster"));
	spec.zone = json_string_value(json_object_get(inv, "zone"));
	spec.rack = json_string_value(json_object_get(inv, "rack"));
	ds = json_object_get(inv, "datasets");
	for (i = 0; ds && i < json_array_size(ds) && i < CNL_NODE_MAX_DATASETS;
	     i++)
		spec.datasets[i] = json_string_value(json_array_get(ds, i));
	r = cnl_cluster_add_node(ctl->cluster, &spec);
	if (r < 0)
		snprintf(err, errlen, "node \"%s\": %s", name, cnl_strerror(r));
	else
		ctl_nset_refresh(ctl);
	return r;
}

static void node_push(struct cnl_ctl *ctl, const char *id, json_t *inv,
                      int64_t epoch, uint8_t state, int64_t now)
{
	struct node *n;

	ctl->nodes =
	    cnl_xrealloc(ctl->nodes, (ctl->n_nodes + 1) * sizeof(*ctl->nodes));
	n = &ctl->nodes[ctl->n_nodes++];
	memset(n, 0, sizeof(*n));
	snprintf(n->id, sizeof(n->id), "%s", id);
	snprintf(n->name, sizeof(n->name), "%s",
	         json_string_value(json_object_get(inv, "name")));
	snprintf(n->address, sizeof(n->address), "%s",
	         json_string_value(json_object_get(inv, "address"))
	             ? json_string_value(json_object_get(inv, "address"))
	             : "");
	n->epoch = epoch;
	n->state = state;
	n->last_seen_ms = now; /* a restart gives every node a full timeout */
	n->version = 1;
	n->wake = cnl_xmalloc(sizeof(*n->wake));
	pthread_cond_init(n->wake, NULL);
	n->inventory = json_incref(inv);
	ctl_cloud_registered(ctl, ctl->n_nodes - 1);
}

int ctl_node_save(struct cnl_ctl *ctl, const struct node *n, int64_t now)
{
	struct cnl_store_doc d = {0};
	json_t *o = json_deep_copy(n->inventory);
	int r;

	json_object_set_new(o, "epoch", json_integer(n->epoch));
	json_object_set_new(o, "state",
	                    json_string(ctl_nstate_names[n->state]));
	if (n->protocol)
		json_object_set_new(o, "protocol", json_integer(n->protocol));
	if (n->power != PW_ON) /* off, or being switched on */
		json_object_set_new(
		    o, "power",
		    json_pack("{s:s,s:I}", "state", ctl_power_names[n->power],
		              "since", (json_int_t)n->power_ms));
	snprintf(d.kind, sizeof(d.kind), "node");
	snprintf(d.id, sizeof(d.id), "%s", n->id);
	snprintf(d.name, sizeof(d.name), "%s", n->name);
	d.body = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	d.updated_ms = now;
	json_decref(o);
	r = d.body ? cnl_store_doc_put(ctl->store, &d, false) : -ENOMEM;
	free(d.body);
	return r;
}

int ctl_load_nodes(struct cnl_ctl *ctl, int64_t now, char *err, size_t errlen)
{
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	const char *after = NULL;
	char last[CNL_STORE_DOC_ID_MAX];
	int n, r;

	do {
		r = cnl_store_doc_list(ctl->store, "node", NULL, after,
		                       CNL_STORE_LIST_MAX, d, &n);
		for (int i = 0; r == 0 && i < n; i++) {
			json_t *inv = json_loads(d[i].body, 0, NULL);
			const char *st;
			uint8_t state = N_UP;

			if (!inv) {
				r = -CNL_ECORRUPT;
				break;
			}
			st = json_string_value(json_object_get(inv, "state"));
			for (uint8_t k = 0; st && k < 4; k++)
				if (strcmp(st, ctl_nstate_names[k]) == 0)
					state = k;
			r = add_cluster_node(ctl, inv, err, errlen);
			if (r >= 0) {
				int pv = (int)json_integer_value(
				    json_object_get(inv, "protocol"));
				json_t *pw = json_object_get(inv, "power");
				const char *ps = json_string_value(
				    json_object_get(pw, "state"));
				uint8_t power = PW_ON;
				int64_t power_ms = json_integer_value(
				    json_object_get(pw, "since"));

				for (uint8_t k = 0; ps && k < 3; k++)
					if (strcmp(ps, ctl_power_names[k]) == 0)
						power = k;
				json_object_del(inv, "protocol");
				json_object_del(inv, "power");
				node_push(ctl, d[i].id, inv,
				          json_integer_value(
				              json_object_get(inv, "epoch")),
				          state, now);
				ctl->nodes[ctl->n_nodes - 1].protocol =
				    pv > 0 && pv < 256 ? (uint8_t)pv : 0;
				ctl->nodes[ctl->n_nodes - 1].power = power;
				ctl->nodes[ctl->n_nodes - 1].power_ms =
				    power_ms;
				/* The cluster's node stays UP until its work
				 * is re-adopted (ctl_node_states()): the
				 * allocator places nothing on a cordoned node,
				 * adopted work included. */
				r = 0;
			}
			json_decref(inv);
		}
		if (r == 0 && n)
			snprintf(last, sizeof(last), "%s", d[n - 1].id);
		cnl_store_docs_done(d, n);
		after = last;
	} while (r == 0 && n == CNL_STORE_LIST_MAX);
	free(d);
	if (r < 0 && !err[0])
		snprintf(err, errlen, "loading nodes: %s", cnl_strerror(r));
	return r;
}

/* Give the cluster the nodes' states, once their work is re-adopted. */
void ctl_node_states(struct cnl_ctl *ctl)
{
	for (size_t i = 0; i < ctl->n_nodes; i++)
		if (ctl->nodes[i].power != PW_ON)
			cnl_cluster_set_node_state(ctl->cluster, (uint32_t)i,
			                           CNL_NODE_DOWN);
		else if (ctl->nodes[i].state != N_UP)
			cnl_cluster_set_node_state(
			    ctl->cluster, (uint32_t)i,
			    ctl->nodes[i].state == N_LOST ? CNL_NODE_DOWN
			    : ctl->nodes[i].state == N_CORDONED
			        ? CNL_NODE_CORDONED
			        : CNL_NODE_DRAINING);
}

/* ---- nodes --------------------------------------------------------------- */

static int set_err(char *err, size_t errlen, int status, const char *msg)
{
	snprintf(err, errlen, "%s", msg);
	return status;
}

/* A failed write of a report: 507 naming the database when its disk is
 * full (the agent retries), else 500. */
static int store_err(struct cnl_ctl *ctl, int r, char *err, size_t errlen)
{
	if (r == -ENOSPC || r == -EDQUOT) {
		snprintf(err, errlen, "cannot store: the storage of %s is full",
		         cnl_store_path(ctl->store));
		return 507;
	}
	/* The database unreachable, or this replica no longer leading:
	 * nothing stored, and the agent retries (on another address). */
	if (r == -ENOTCONN)
		return set_err(err, errlen, 503,
		               "cannot store: the database is unreachable");
	if (r == -CNL_EFENCED)
		return set_err(err, errlen, 503,
		               "cannot store: this cnlabd no longer leads");
	return set_err(err, errlen, 500, "cannot store");
}

int cnl_ctl_fence_check(struct cnl_ctl *ctl, const char *node, const char *id,
                        int64_t epoch)
{
	int i = ctl_node_find(ctl, node);
	struct wl *w = ctl_wl_find(ctl, id);

	if (i < 0 || !w || w->node != i || w->epoch != epoch ||
	    !cnl_wl_placed(w->state)) {
		ctl->fenced++;
		return -CNL_EFENCED;
	}
	ctl->nodes[i].last_seen_ms = ctl_now_ms();
	return 0;
}

int cnl_ctl_job_node(struct cnl_ctl *ctl, const char *id, int64_t epoch,
                     char *ret_id, char *ret_name)
{
	struct wl *w = ctl_wl_find(ctl, id);

	if (!w || w->node < 0 || (size_t)w->node >= ctl->n_nodes ||
	    w->epoch != epoch || !cnl_wl_placed(w->state))
		return -CNL_EFENCED;
	snprintf(ret_id, CNL_STORE_NAME_MAX, "%s", ctl->nodes[w->node].id);
	snprintf(ret_name, CNL_STORE_NAME_MAX, "%s", ctl->nodes[w->node].name);
	return 0;
}

int cnl_ctl_node_check(struct cnl_ctl *ctl, const char *node)
{
	return ctl_node_find(ctl, node) < 0 ? -CNL_ENOTFOUND : 0;
}

int cnl_ctl_node_name(struct cnl_ctl *ctl, const char *key, char *ret,
                      size_t len)
{
	int i = ctl_node_find_any(ctl, key);

	if (i < 0)
		return -CNL_ENOTFOUND;
	snprintf(ret, len, "%s", ctl->nodes[i].name);
	return 0;
}

bool cnl_ctl_node_silent(struct cnl_ctl *ctl, const char *key, int64_t now)
{
	int i = ctl_node_find_any(ctl, key);

	return i >= 0 &&
	       now - ctl->nodes[i].last_seen_ms > ctl->cfg.node_lost_ms / 2;
}

/* The node as its agent is told it (the reply to register, heartbeat
 * and state changes). */
static void node_reply(struct cnl_ctl *ctl, const struct node *n,
                       struct cnl_wire_node *ret)
{
	memset(ret, 0, sizeof(*ret));
	snprintf(ret->id, sizeof(ret->id), "%s", n->id);
	snprintf(ret->name, sizeof(ret->name), "%s", n->name);
	ret->epoch = n->epoch;
	snprintf(ret->state, sizeof(ret->state), "%s",
	         ctl_nstate_names[n->state]);
	ret->lease_ms = ctl->cfg.node_lost_ms / 2;
	ret->heartbeat_ms = ctl->cfg.node_lost_ms / 6;
}

/* The labels of inventory @inv into @spec (pointers into @inv). */
static void labels_of(json_t *inv, struct cnl_node_spec *spec)
{
	json_t *ds = json_object_get(inv, "datasets");

	memset(spec, 0, sizeof(*spec));
	spec->cluster = json_string_value(json_object_get(inv, "cluster"));
	spec->zone = json_string_value(json_object_get(inv, "zone"));
	spec->rack = json_string_value(json_object_get(inv, "rack"));
	for (size_t k = 0; k < json_array_size(ds) && k < CNL_NODE_MAX_DATASETS;
	     k++)
		spec->datasets[k] = json_string_value(json_array_get(ds, k));
}

/*
 * Give node @i the labels of inventory @inv (an agent registering again
 * with other datasets, zone or rack): the cluster the scheduler reads and
 * the store change together, so the next cycle places by the new labels
 * and a restart keeps them.  0, or an HTTP status with @err.
 */
static int relabel_node(struct cnl_ctl *ctl, int i, json_t *inv, int64_t now,
                        char *err, size_t errlen)
{
	static const char *const labels[] = {"cluster", "zone", "rack",
	                                     "datasets"};
	struct node *n = &ctl->nodes[i];
	json_t *old = n->inventory;
	struct cnl_node_spec spec;

	labels_of(inv, &spec);
	if (cnl_cluster_set_node_labels(ctl->cluster, (uint32_t)i, &spec) < 0)
		return set_err(err, errlen, 400,
		               "a label (cluster, zone, rack: at most 31 "
		               "bytes) is too long");
	n->inventory = json_deep_copy(old);
	for (size_t k = 0; k < CNL_ARRAY_SIZE(labels); k++) {
		json_t *v = json_object_get(inv, labels[k]);

		if (v)
			json_object_set(n->inventory, labels[k], v);
		else
			json_object_del(n->inventory, labels[k]);
	}
	if (ctl_node_save(ctl, n, now) < 0) {
		json_decref(n->inventory);
		n->inventory = old;
		labels_of(old, &spec);
		cnl_cluster_set_node_labels(ctl->cluster, (uint32_t)i, &spec);
		return set_err(err, errlen, 500, "cannot store the node");
	}
	json_decref(old);
	cnl_log(CNL_LOG_INFO, "node labels changed", "node=%s", n->name);
	ctl->dirty = ctl->changed = true;
	return 0;
}

/* The agent's protocol version, stored with the node (a restart of
 * cnlabd keeps it: agents do not register again). */
static void node_protocol_set(struct cnl_ctl *ctl, struct node *n, int v)
{
	if (n->protocol == v)
		return;
	n->protocol = (uint8_t)v;
	(void)ctl_node_save(ctl, n, ctl_now_ms());
}

int cnl_ctl_node_register(struct cnl_ctl *ctl,
                          const struct cnl_wire_register *m, int64_t now,
                          struct cnl_wire_node *ret, char *err, size_t errlen)
{
	json_t *inv;
	struct node *n;
	int idx, r;

	if (strlen(m->name) >= CNL_STORE_NAME_MAX)
		return set_err(err, errlen, 400,
		               "field \"name\": must be 1..63 bytes");
	/* Labels: names of clusters (policies, metrics, the audit's picks
	 * are keyed by them), zones and racks. */
	{
		const char *const lab[][2] = {{"cluster", m->cluster},
		                              {"zone", m->zone},
		                              {"rack", m->rack}};

		for (size_t k = 0; k < CNL_ARRAY_SIZE(lab); k++)
			if (lab[k][1][0] &&
			    (!cnl_label_valid(lab[k][1]) ||
			     strlen(lab[k][1]) >= CNL_NAME_MAX)) {
				snprintf(
				    err, errlen,
				    "field \"%s\": must be a name of 1..31 "
				    "characters of A-Z a-z 0-9 . _ -, not "
				    "starting with . or -",
				    lab[k][0]);
				return 400;
			}
	}
	for (int i = 0; i < m->n_datasets; i++)
		if (!cnl_label_valid(m->datasets[i]))
			return set_err(
			    err, errlen, 400,
			    "field \"datasets\": each must be a name "
			    "of 1..63 characters of A-Z a-z 0-9 . _ "
			    "-, not starting with . or -");
	/* The inventory kept and listed: the registration (gpu_type always
	 * present, "" without GPUs), its protocol version kept apart. */
	inv = cnl_wire_register_encode(m);
	json_object_del(inv, "protocol");
	/* A cloud instance joins the cluster the burst gave it, whatever
	 * its agent says (ctl_cloud.c). */
	if (ctl_cloud_cluster_of(ctl, m->name))
		json_object_set_new(
		    inv, "cluster",
		    json_string(ctl_cloud_cluster_of(ctl, m->name)));
	json_object_set_new(inv, "gpu_type", json_string(m->gpu_type));
	/* Known name: an agent restarting.  Same inventory, same node. */
	for (size_t i = 0; i < ctl->n_nodes; i++) {
		n = &ctl->nodes[i];
		if (strcmp(n->name, m->name) != 0)
			continue;
		/* Its labels (cluster, zone, rack, datasets) may change
		 * (an operator moved data onto it); its resources may not,
		 * since running work is placed on them. */
		static const char *const labels[] = {"cluster", "zone", "rack",
		                                     "datasets", NULL};
		json_t *x = json_deep_copy(n->inventory),
		       *y = json_deep_copy(inv);
		static const char *const skip[] = {
		    "address", "epoch", "state",    "devices", "cluster",
		    "zone",    "rack",  "datasets", NULL};
		for (const char *const *f = skip; *f; f++) {
			json_object_del(x, *f);
			json_object_del(y, *f);
		}
		bool same = json_equal(x, y), relabel = false;
		json_decref(x);
		json_decref(y);
		if (!same) {
			json_decref(inv);
			return set_err(err, errlen, 409,
			               "a node of this name is registered with "
			               "another inventory");
		}
		for (const char *const *f = labels; *f; f++)
			relabel |=
			    !json_equal(json_object_get(n->inventory, *f),
			                json_object_get(inv, *f)) &&
			    (json_object_get(n->inventory, *f) ||
			     json_object_get(inv, *f));
		if (relabel && (r = relabel_node(ctl, (int)i, inv, now, err,
		                                 errlen)) != 0) {
			json_decref(inv);
			return r;
		}
		if (m->address[0])
			snprintf(n->address, sizeof(n->address), "%s",
			         m->address);
		if (m->has_devices) /* the latest health, for listings */
			json_object_set(n->inventory, "devices",
			                json_object_get(inv, "devices"));
		n->last_seen_ms = now;
		node_protocol_set(ctl, n, m->protocol);
		json_decref(inv);
		node_reply(ctl, n, ret);
		return 200;
	}
	if ((idx = add_cluster_node(ctl, inv, err, errlen)) < 0) {
		json_decref(inv);
		return idx == -CNL_EDUP ? 409 : 400;
	}
	char id[CNL_ID_MAX];
	if (cnl_id_new(&ctl->ids, "node", now, id, sizeof(id)) < 0) {
		json_decref(inv);
		return set_err(err, errlen, 500, "cannot make an id");
	}
	node_push(ctl, id, inv, 1, N_UP, now);
	json_decref(inv);
	n = &ctl->nodes[ctl->n_nodes - 1];
	n->protocol = (uint8_t)m->protocol;
	if ((r = ctl_node_save(ctl, n, now)) < 0) {
		/* The cluster cannot forget a node: keep it DOWN until the
		 * agent registers again (which retries the write). */
		n->state = N_LOST;
		cnl_cluster_set_node_state(ctl->cluster, (uint32_t)idx,
		                           CNL_NODE_DOWN);
		return set_err(err, errlen, 500, "cannot store the node");
	}
	cnl_ctl_kick(ctl);
	node_reply(ctl, n, ret);
	return 201;
}

/*
 * Work the node's agent started but no longer lists (it lost it: killed
 * while cnlabd could not be told, an agent that went away and came back
 * empty).  Two heartbeats in a row without it, so that one that raced a
 * start does not count: then a job is requeued, work being stopped ends.
 */
static void lost_by_agent(struct cnl_ctl *ctl, int node,
                          const struct cnl_wire_heartbeat *hb, int64_t now)
{
	for (size_t k = ctl->n_wl; k-- > 0;) {
		struct wl *w = &ctl->wl[k];
		bool listed = false;

		if (w->node != node || (w->state != CNL_WL_STARTED &&
		                        w->state != CNL_WL_STOPPING &&
		                        w->state != CNL_WL_REQUEUING))
			continue;
		for (size_t j = 0; j < hb->n_running && !listed; j++)
			listed = strcmp(hb->running[j].id, w->id) == 0 &&
			         hb->running[j].epoch == w->epoch;
		if (listed || ++w->hb_missing < 2) {
			if (listed)
				w->hb_missing = 0;
			continue;
		}
		cnl_log(CNL_LOG_WARN, "node no longer runs its work",
		        "id=%s node=%s", w->id, ctl->nodes[node].name);
		struct wl next = *w;
		bool end;

		if (ctl_step(&next, CNL_WL_EV_WORK_LOST) < 0)
			continue;
		end = cnl_wl_ended(next.state);
		if (!end)
			next.requeues++;
		if ((end ? ctl_persist_end(ctl, &next, true, -1, now)
		         : ctl_persist(ctl, &next, now)) < 0)
			continue;
		*w = next;
		if (w->alloc_id)
			cnl_alloc_free(ctl->cluster, w->alloc_id);
		w->alloc_id = 0;
		w->hb_missing = 0;
		ctl_node_changed(ctl, node);
		w->node = -1;
		ctl_facts_touch(ctl, w);
		if (end) {
			ctl_server_gone(ctl, w);
			ctl_wl_remove(ctl, w);
		}
		ctl->dirty = ctl->changed = true;
	}
}

int cnl_ctl_node_heartbeat(struct cnl_ctl *ctl, const char *node,
                           const struct cnl_wire_heartbeat *m, int64_t now,
                           struct cnl_wire_node *ret, char *err, size_t errlen)
{
	int i = ctl_node_find(ctl, node);
	struct node *n;
	size_t n_stop = 0;

	if (i < 0)
		return set_err(err, errlen, 404, "node not found");
	n = &ctl->nodes[i];
	n->last_seen_ms = now;
	/* Powered on (or on again by hand): it takes work again. */
	if (n->power == PW_WAKING || (n->power == PW_OFF && !n->power_pid &&
	                              now - n->power_ms > POWER_OFF_GRACE_MS)) {
		struct node next = *n;

		next.power = PW_ON;
		next.power_ms = now;
		if (ctl_node_save(ctl, &next, now) < 0)
			return set_err(err, errlen, 500,
			               "cannot store the node");
		n->power = PW_ON;
		n->power_ms = now;
		n->power_back = true;
		if (n->state == N_UP)
			cnl_cluster_set_node_state(ctl->cluster, (uint32_t)i,
			                           CNL_NODE_UP);
		else
			ctl_node_states(ctl);
		cnl_ctl_kick(ctl);
	}
	if (n->state == N_LOST) {
		/* Back: it may take work again, under its new epoch. */
		n->state = N_UP;
		if (ctl_node_save(ctl, n, now) < 0) {
			n->state = N_LOST;
			return set_err(err, errlen, 500,
			               "cannot store the node");
		}
		cnl_cluster_set_node_state(ctl->cluster, (uint32_t)i,
		                           CNL_NODE_UP);
		cnl_ctl_kick(ctl);
		cnl_log(CNL_LOG_INFO, "node back", "node=%s epoch=%" PRId64,
		        n->name, n->epoch);
	}
	/* Each GPU's use (protocol 7), kept for the dashboard. */
	n->use_known = m->n_gpus > 0;
	for (int g = 0; g < CNL_WIRE_GPUS_MAX; g++) {
		n->util_pct[g] = -1;
		n->mem_used[g] = -1;
	}
	for (size_t k = 0; k < m->n_gpus; k++) {
		n->util_pct[m->gpus[k].index] = (int16_t)m->gpus[k].util_pct;
		n->mem_used[m->gpus[k].index] = m->gpus[k].mem_used;
	}
	/* What work CNLab did not place holds of it (the pods of other
	 * Kubernetes schedulers): used, for placement.  Less of it is
	 * room, so a cycle runs. */
	if (m->has_others) {
		const struct cnl_node *cn = &ctl->cluster->nodes[i];
		bool freed = m->others_cpu_milli < cn->cpu_others ||
		             m->others_mem_mib < cn->mem_others;

		if (cnl_cluster_set_node_others(ctl->cluster, (uint32_t)i,
		                                m->others_cpu_milli,
		                                m->others_mem_mib) == 0 &&
		    freed)
			cnl_ctl_kick(ctl);
		/* Its limit on pods (0: none), and how many are others'. */
		int32_t max = m->has_pods ? (int32_t)m->pods_max : 0;
		int32_t op = m->has_pods ? (int32_t)m->others_pods : 0;
		freed = (max == 0 && cn->pods_max != 0) ||
		        op < cn->pods_others || max > cn->pods_max;
		if ((max != cn->pods_max || op != cn->pods_others) &&
		    cnl_cluster_set_node_pods(ctl->cluster, (uint32_t)i, max,
		                              op) == 0 &&
		    freed)
			cnl_ctl_kick(ctl);
	}
	node_reply(ctl, n, ret);
	/* What it runs that is no longer its to run. */
	ret->has_stop = true;
	ret->stop = cnl_xcalloc(m->n_running + 1, sizeof(*ret->stop));
	for (size_t k = 0; k < m->n_running; k++) {
		const struct cnl_wire_running *it = &m->running[k];
		struct wl *w = ctl_wl_find(ctl, it->id);

		if (!w || w->node != i || w->epoch != it->epoch) {
			snprintf(ret->stop[n_stop++], sizeof(ret->stop[0]),
			         "%s", it->id);
			ctl->fenced++;
		} else {
			w->util_pct =
			    it->has_util ? (int16_t)it->util_pct : (int16_t)-1;
			if (it->has_vram_used)
				ctl_resize_usage(ctl, w, it, now);
		}
	}
	ret->n_stop = n_stop;
	/* The workspaces it keeps of servers since deleted: to remove.
	 * Only an agent that sent its list gets the answer (protocol 3). */
	if (m->has_volumes) {
		ret->has_drop = true;
		ret->drop = cnl_xcalloc(m->n_volumes + 1, sizeof(*ret->drop));
		for (size_t k = 0; k < m->n_volumes; k++) {
			struct cnl_store_doc d = {0};

			if (cnl_store_doc_get(ctl->store, CNL_CTL_SERVER_GONE,
			                      m->volumes[k], &d) < 0)
				continue;
			cnl_store_doc_done(&d);
			snprintf(ret->drop[ret->n_drop++], sizeof(ret->drop[0]),
			         "%s", m->volumes[k]);
		}
	}
	if (m->has_running)
		lost_by_agent(ctl, i, m, now);
	return 200;
}

/* The image @name into @m, with its manifest's digest while it exists
 * ("host", the built-in, travels as nothing). */
static void image_of(struct cnl_ctl *ctl, const char *name,
                     struct cnl_wire_assignment *m)
{
	struct cnl_store_doc d = {0};
	json_t *o;

	if (!name || !name[0] || strcmp(name, "host") == 0)
		return;
	snprintf(m->image, sizeof(m->image), "%s", name);
	if (cnl_store_doc_get(ctl->store, "image", name, &d) == 0 &&
	    (o = json_loads(d.body, 0, NULL))) {
		const char *dg =
		    json_string_value(json_object_get(o, "manifest"));

		snprintf(m->image_digest, sizeof(m->image_digest), "%s",
		         dg ? dg : "");
		m->image_bytes =
		    json_integer_value(json_object_get(o, "unpacked_size"));
		json_decref(o);
	}
	cnl_store_doc_done(&d);
}

/* What node agents are told of @w: its assignment. */
static void assignment_of(struct cnl_ctl *ctl, const struct wl *w,
                          struct cnl_wire_assignment *m)
{
	const struct cnl_cluster *c = ctl->cluster;
	const struct cnl_alloc *a = &w->placed;
	struct cnl_store_user u;

	memset(m, 0, sizeof(*m));
	snprintf(m->id, sizeof(m->id), "%s", w->id);
	m->kind = w->server ? CNL_WIRE_SERVER : CNL_WIRE_JOB;
	m->epoch = w->epoch;
	m->action = w->state == CNL_WL_STOPPING || w->state == CNL_WL_REQUEUING
	                ? CNL_WIRE_STOP
	                : CNL_WIRE_RUN;
	snprintf(m->project_id, sizeof(m->project_id), "%s", w->project_id);
	snprintf(m->user_id, sizeof(m->user_id), "%s", w->user_id);
	snprintf(m->shape, sizeof(m->shape), "%s", w->shape);
	snprintf(m->traceparent, sizeof(m->traceparent), "%s", w->trace);
	/* The submitting user's name, for agents that run work as the
	 * matching local account. */
	if (cnl_store_user_get(ctl->store, w->user_id, &u) == 0)
		snprintf(m->user, sizeof(m->user), "%s", u.name);
	if (w->server) {
		struct cnl_store_server v;

		if (cnl_store_server_get(ctl->store, w->id, &v) == 0) {
			image_of(ctl, v.image, m);
			snprintf(m->name, sizeof(m->name), "%s", v.name);
			m->storage_gb = v.storage_gb;
			m->idle_timeout_s = v.idle_timeout_s;
		}
	} else {
		struct cnl_store_job j;

		if (cnl_store_job_get(ctl->store, w->id, &j) == 0)
			snprintf(m->command, sizeof(m->command), "%s",
			         j.command);
		image_of(ctl, w->image, m);
	}
	m->gpu.blocks = cnl_alloc_blocks_held(c, a);
	m->gpu.vram_mib = cnl_alloc_vram_mib(c, a);
	/* A pending shrink: the agent applies the smaller size at once,
	 * while the blocks stay held here until the use fits. */
	if (ctl_resize_pending(ctl, w)) {
		m->gpu.blocks = w->shrink_to;
		m->gpu.vram_mib = ctl_resize_vram_mib(ctl, w, w->shrink_to);
	}
	m->gpu.gpu_mask =
	    a->kind == CNL_PLACE_WHOLE ? a->gpu_mask : 1u << a->gpu;
	m->gpu.mig_start = -1;
	if (a->kind == CNL_PLACE_MIG || a->kind == CNL_PLACE_MIG_BLOCKS) {
		const struct cnl_gpu_type *t =
		    &c->cat->types[c->nodes[a->node].gpu_type];

		snprintf(m->gpu.mig_profile, sizeof(m->gpu.mig_profile), "%s",
		         t->mig[a->profile].name);
		m->gpu.mig_start = a->start;
	}
	if (w->gang_id[0]) {
		/* The nodes of all members, by rank, for the workload's
		 * environment (CNLAB_GANG_NODES): members start together,
		 * so each is placed when any is assigned. */
		m->has_gang = true;
		snprintf(m->gang.id, sizeof(m->gang.id), "%s", w->gang_id);
		m->gang.rank = w->rank;
		m->gang.size = w->gang_size;
		for (int r = 0; r < w->gang_size && r < CNL_WIRE_GANG_MAX;
		     r++) {
			for (size_t k = 0; k < ctl->n_wl; k++) {
				const struct wl *o = &ctl->wl[k];

				if (o->rank == r && o->node >= 0 &&
				    cnl_wl_placed(o->state) &&
				    strcmp(o->gang_id, w->gang_id) == 0)
					snprintf(m->gang.nodes[r],
					         sizeof(m->gang.nodes[r]), "%s",
					         ctl->nodes[o->node].name);
			}
			m->gang.n_nodes = r + 1;
		}
	}
	m->cpu_milli = a->cpu_milli;
	m->mem_mib = a->mem_mib;
	/* Agents before protocol 8 know no secrets (their decoder refuses
	 * the field): such work starts there without them, said once per
	 * workload. */
	if (w->node >= 0 && ctl->nodes[w->node].protocol >= 8)
		m->secrets = w->n_secrets;
	else if (w->n_secrets > 0 && strcmp(ctl->secrets_warned, w->id) != 0 &&
	         snprintf(ctl->secrets_warned, sizeof(ctl->secrets_warned),
	                  "%s", w->id) > 0)
		cnl_log(CNL_LOG_WARN,
		        "a node too old for secrets runs work that has some: "
		        "upgrade its agent",
		        "id=%s node=%s protocol=%d", w->id,
		        w->node >= 0 ? ctl->nodes[w->node].name : "-",
		        w->node >= 0 ? ctl->nodes[w->node].protocol : 0);
	m->not_before_ms = w->not_before_ms;
	if (m->action == CNL_WIRE_STOP) {
		m->signal_ms = w->signal_ms;
		m->kill_ms = w->kill_ms;
	}
}

int cnl_ctl_assignments(struct cnl_ctl *ctl, const char *node, uint64_t since,
                        int64_t wait_ms, struct cnl_wire_assignments *ret,
                        char *err, size_t errlen)
{
	int64_t deadline = ctl_now_ms() + wait_ms;
	int i = ctl_node_find(ctl, node);
	size_t n = 0;

	if (i < 0)
		return set_err(err, errlen, 404, "node not found");
	while (ctl->nodes[i].version <= since && !ctl->stop) {
		struct timespec ts;
		int64_t left = deadline - ctl_now_ms();

		if (left <= 0)
			break;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += left / 1000;
		ts.tv_nsec += (left % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		/* Only this node's changes wake it.  Nodes never go away,
		 * but the array may move meanwhile: index it again. */
		pthread_cond_timedwait(ctl->nodes[i].wake, ctl->mu, &ts);
	}
	memset(ret, 0, sizeof(*ret));
	ret->items = cnl_xcalloc(ctl->n_wl + 1, sizeof(*ret->items));
	for (size_t k = 0; k < ctl->n_wl; k++) {
		const struct wl *w = &ctl->wl[k];

		if (w->node == i && cnl_wl_placed(w->state))
			assignment_of(ctl, w, &ret->items[n++]);
	}
	ret->n = n;
	ctl->nodes[i].last_seen_ms = ctl_now_ms();
	ret->version = ctl->nodes[i].version;
	ret->epoch = ctl->nodes[i].epoch;
	return 200;
}

int cnl_ctl_node_report(struct cnl_ctl *ctl, const char *node,
                        const struct cnl_wire_report *m, int64_t now,
                        const char **ret, char *err, size_t errlen)
{
	static const enum cnl_wl_event events[] = {
	    [CNL_WIRE_REPORT_RUNNING] = CNL_WL_EV_REPORT_RUNNING,
	    [CNL_WIRE_REPORT_SUCCEEDED] = CNL_WL_EV_REPORT_SUCCEEDED,
	    [CNL_WIRE_REPORT_FAILED] = CNL_WL_EV_REPORT_FAILED,
	    [CNL_WIRE_REPORT_STOPPED] = CNL_WL_EV_REPORT_STOPPED};
	const char *id = m->id, *url = m->url[0] ? m->url : NULL,
	           *msg = m->message[0] ? m->message : NULL;
	int64_t epoch = m->epoch, code = m->has_exit_code ? m->exit_code : 0;
	int i = ctl_node_find(ctl, node), st = (int)m->state, r;
	struct wl *w, next;

	if (i < 0)
		return set_err(err, errlen, 404, "node not found");
	if (url && strlen(url) >= CNL_STORE_URL_MAX)
		return set_err(err, errlen, 400, "field \"url\": too long");
	ctl->nodes[i].last_seen_ms = now;
	w = ctl_wl_find(ctl, id);
	if (!w || w->node != i || w->epoch != epoch ||
	    !cnl_wl_placed(w->state)) {
		ctl->fenced++;
		return set_err(err, errlen, 409,
		               "stale fencing epoch: this work is no longer "
		               "assigned to this node under that epoch; stop "
		               "it");
	}
	next = *w;
	if ((r = ctl_step(&next, events[st])) < 0)
		return set_err(err, errlen, 409,
		               "this report does not fit the work's state");
	if (st == 0) { /* running */
		if (w->state == CNL_WL_ASSIGNED) {
			int64_t from = w->not_before_ms > w->started_ms
			                   ? w->not_before_ms
			                   : w->started_ms;

			if (now >= from)
				ctl_note_start(ctl, w->server, now - from);
			next.started_ms = now;
		}
		if (url)
			snprintf(next.url, sizeof(next.url), "%.*s",
			         (int)sizeof(next.url) - 1, url);
		if ((r = ctl_persist(ctl, &next, now)) < 0)
			return store_err(ctl, r, err, errlen);
		*w = next;
		ctl_facts_touch(ctl, w);
		*ret = ctl_store_state(w);
		return 200;
	}
	/* The workload left its node: back in the queue, or ended. */
	if (msg)
		snprintf(next.message, sizeof(next.message), "%.*s",
		         (int)sizeof(next.message) - 1, msg);
	if (next.state == CNL_WL_PENDING) {
		if ((r = ctl_persist(ctl, &next, now)) < 0)
			return store_err(ctl, r, err, errlen);
		*w = next;
		if (w->alloc_id)
			cnl_alloc_free(ctl->cluster, w->alloc_id);
		w->alloc_id = 0;
		ctl_node_changed(ctl, w->node);
		w->node = -1;
		ctl_facts_touch(ctl, w);
	} else {
		if ((r = ctl_persist_end(ctl, &next, true, (int)code, now)) < 0)
			return store_err(ctl, r, err, errlen);
		ctl_forecast_ended(ctl, w, now);
		ctl_cloud_ended(ctl, w, now);
		if (w->alloc_id)
			cnl_alloc_free(ctl->cluster, w->alloc_id);
		ctl_node_changed(ctl, w->node);
		ctl->finished[next.state == CNL_WL_SUCCEEDED   ? 0
		              : next.state == CNL_WL_FAILED    ? 1
		              : next.state == CNL_WL_CANCELLED ? 2
		                                               : 3]++;
		ctl_server_gone(ctl, w);
		ctl_wl_remove(ctl, w);
	}
	cnl_ctl_kick(ctl);
	*ret = ctl_store_state(&next);
	return 200;
}

int cnl_ctl_node_set_state(struct cnl_ctl *ctl, const char *node,
                           const char *state, json_t **ret, char *err,
                           size_t errlen)
{
	static const enum cnl_node_state map[] = {
	    CNL_NODE_UP, CNL_NODE_CORDONED, CNL_NODE_DRAINING};
	int i = ctl_node_find_any(ctl, node), st = -1;
	uint8_t old;

	if (i < 0)
		return set_err(err, errlen, 404, "node not found");
	for (int k = 0; k < 3; k++)
		if (strcmp(state, ctl_nstate_names[k]) == 0)
			st = k;
	if (st < 0)
		return set_err(err, errlen, 400,
		               "field \"state\": must be up, cordoned or "
		               "draining");
	if (ctl->nodes[i].state == N_LOST)
		return set_err(err, errlen, 409,
		               "node is lost; it must heartbeat first");
	old = ctl->nodes[i].state;
	ctl->nodes[i].state = (uint8_t)st;
	if (ctl_node_save(ctl, &ctl->nodes[i], ctl_now_ms()) < 0) {
		ctl->nodes[i].state = old;
		return set_err(err, errlen, 500, "cannot store the node");
	}
	/* A node off (or being switched on) takes no work whatever its
	 * state says. */
	cnl_cluster_set_node_state(ctl->cluster, (uint32_t)i,
	                           ctl->nodes[i].power != PW_ON ? CNL_NODE_DOWN
	                                                        : map[st]);
	cnl_ctl_kick(ctl);
	{
		struct cnl_wire_node nr;

		node_reply(ctl, &ctl->nodes[i], &nr);
		*ret = cnl_wire_node_encode(&nr);
	}
	return 200;
}

/* Node @i as the node listings show it. */
static json_t *node_json(struct cnl_ctl *ctl, size_t i, int64_t now)
{
	const struct node *n = &ctl->nodes[i];
	const struct cnl_node *cn = &ctl->cluster->nodes[i];
	int used = 0, total = cn->n_gpus * CNL_BLOCKS_PER_GPU;
	json_t *o = json_deep_copy(n->inventory);

	for (int g = 0; g < cn->n_gpus; g++)
		used += CNL_BLOCKS_PER_GPU -
		        cnl_gpu_free_blocks(ctl->cluster, (uint32_t)i, g);
	json_object_set_new(o, "id", json_string(n->id));
	json_object_set_new(o, "state",
	                    json_string(ctl_nstate_names[n->state]));
	json_object_set_new(o, "epoch", json_integer(n->epoch));
	json_object_set_new(o, "power", json_string(ctl_power_names[n->power]));
	json_object_set_new(o, "blocks_total", json_integer(total));
	json_object_set_new(o, "blocks_used", json_integer(used));
	json_object_set_new(o, "workloads", json_integer(cn->n_allocs));
	if (cn->cpu_others || cn->mem_others || cn->pods_others)
		json_object_set_new(o, "others", /* not CNLab's work */
		                    json_pack("{s:I,s:I,s:i}", "cpu_milli",
		                              (json_int_t)cn->cpu_others,
		                              "mem_mib",
		                              (json_int_t)cn->mem_others,
		                              "pods", cn->pods_others));
	if (cn->pods_max) /* a Kubernetes node's allocatable pods */
		json_object_set_new(o, "pods_max", json_integer(cn->pods_max));
	json_object_set_new(o, "last_seen_s_ago",
	                    json_integer((now - n->last_seen_ms) / 1000));
	return o;
}

json_t *cnl_ctl_nodes_json(struct cnl_ctl *ctl, int64_t now)
{
	json_t *items = json_array();

	for (size_t i = 0; i < ctl->n_nodes; i++)
		json_array_append_new(items, node_json(ctl, i, now));
	return items;
}

json_t *cnl_ctl_node_json(struct cnl_ctl *ctl, const char *node, int64_t now)
{
	int i = ctl_node_find_any(ctl, node);
	json_t *o, *list;

	if (i < 0)
		return NULL;
	o = node_json(ctl, (size_t)i, now);
	list = json_array();
	for (size_t k = 0; k < ctl->n_wl; k++) {
		const struct wl *w = &ctl->wl[k];

		if (w->node != i || !cnl_wl_placed(w->state))
			continue;
		json_array_append_new(
		    list, json_pack("{s:s,s:s,s:s,s:s,s:s,s:i}", "id", w->id,
		                    "kind", w->server ? "server" : "job",
		                    "project_id", w->project_id, "phase",
		                    cnl_wl_state_name(w->state), "shape",
		                    w->shape, "blocks",
		                    w->alloc_id ? cnl_alloc_blocks_held(
		                                      ctl->cluster, &w->placed)
		                                : 0));
	}
	json_object_set_new(o, "running", list);
	return o;
}
