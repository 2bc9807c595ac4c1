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
	n->inventory = json_incref(inv);
}

int ctl_node_save(struct cnl_ctl *ctl, const struct node *n, int64_t now)
{
	struct cnl_store_doc d = {0};
	json_t *o = json_deep_copy(n->inventory);
	int r;

	json_object_set_new(o, "epoch", json_integer(n->epoch));
	json_object_set_new(o, "state",
	                    json_string(ctl_nstate_names[n->state]));
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
				node_push(ctl, d[i].id, inv,
				          json_integer_value(
				              json_object_get(inv, "epoch")),
				          state, now);
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
		if (ctl->nodes[i].state != N_UP)
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

int cnl_ctl_node_check(struct cnl_ctl *ctl, const char *node)
{
	return ctl_node_find(ctl, node) < 0 ? -CNL_ENOTFOUND : 0;
}

static json_t *node_reply(struct cnl_ctl *ctl, const struct node *n)
{
	return json_pack(
	    "{s:s,s:s,s:I,s:s,s:I,s:I}", "id", n->id, "name", n->name, "epoch",
	    (json_int_t)n->epoch, "state", ctl_nstate_names[n->state],
	    "lease_ms", (json_int_t)(ctl->cfg.node_lost_ms / 2), "heartbeat_ms",
	    (json_int_t)(ctl->cfg.node_lost_ms / 6));
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
	ctl->dirty = true;
	return 0;
}

int cnl_ctl_node_register(struct cnl_ctl *ctl, json_t *body, int64_t now,
                          json_t **ret, char *err, size_t errlen)
{
	static const char *const fields[] = {
	    "name", "gpu_type", "gpus",     "cpu_milli", "mem_mib", "cluster",
	    "zone", "rack",     "datasets", "address",   "devices", NULL};
	const char *name, *type = NULL, *s;
	json_t *devs;
	int64_t gpus, cpu, mem;
	json_t *inv, *ds;
	struct node *n;
	int idx, r;

	if (cnl_json_check_fields(body, fields, err, errlen) < 0 ||
	    cnl_json_get_string(body, "name", true, &name, err, errlen) < 0 ||
	    cnl_json_get_string(body, "gpu_type", false, &type, err, errlen) <
	        0 ||
	    cnl_json_get_int(body, "gpus", true, 0, CNL_NODE_MAX_GPUS, &gpus,
	                     err, errlen) < 0 ||
	    cnl_json_get_int(body, "cpu_milli", true, 0, INT64_C(1) << 40, &cpu,
	                     err, errlen) < 0 ||
	    cnl_json_get_int(body, "mem_mib", true, 0, INT64_C(1) << 40, &mem,
	                     err, errlen) < 0)
		return 400;
	if (!name[0] || strlen(name) >= CNL_STORE_NAME_MAX)
		return set_err(err, errlen, 400,
		               "field \"name\": must be 1..63 bytes");
	for (const char *const *f = &fields[5]; *f; f++) {
		if (strcmp(*f, "datasets") == 0 || strcmp(*f, "devices") == 0)
			continue;
		if (cnl_json_get_string(body, *f, false, &s, err, errlen) < 0)
			return 400;
	}
	ds = json_object_get(body, "datasets");
	if (ds &&
	    (!json_is_array(ds) || json_array_size(ds) > CNL_NODE_MAX_DATASETS))
		return set_err(err, errlen, 400,
		               "field \"datasets\": must be an array of at "
		               "most 8 names");
	for (size_t i = 0; ds && i < json_array_size(ds); i++)
		if (!cnl_label_valid(json_string_value(json_array_get(ds, i))))
			return set_err(
			    err, errlen, 400,
			    "field \"datasets\": each must be a name "
			    "of 1..63 characters of A-Z a-z 0-9 . _ "
			    "-, not starting with . or -");
	/* The GPU inventory: [{"index","uuid","mem_mib","healthy"}], one
	 * per GPU, shown in node listings. */
	devs = json_object_get(body, "devices");
	if (devs &&
	    (!json_is_array(devs) || json_array_size(devs) != (size_t)gpus))
		return set_err(
		    err, errlen, 400,
		    "field \"devices\": must list one entry per GPU");
	for (size_t i = 0; devs && i < json_array_size(devs); i++) {
		json_t *d = json_array_get(devs, i);
		const char *u = json_string_value(json_object_get(d, "uuid"));

		if (!json_is_object(d) || !u || !u[0] || strlen(u) > 96 ||
		    !json_is_integer(json_object_get(d, "mem_mib")) ||
		    !json_is_boolean(json_object_get(d, "healthy")))
			return set_err(err, errlen, 400,
			               "field \"devices\": each needs uuid, "
			               "mem_mib and healthy");
	}
	inv = json_pack("{s:s,s:s,s:I,s:I,s:I}", "name", name, "gpu_type",
	                type ? type : "", "gpus", (json_int_t)gpus, "cpu_milli",
	                (json_int_t)cpu, "mem_mib", (json_int_t)mem);
	for (const char *const *f = &fields[5]; *f; f++)
		if (json_object_get(body, *f))
			json_object_set(inv, *f, json_object_get(body, *f));
	/* Known name: an agent restarting.  Same inventory, same node. */
	for (size_t i = 0; i < ctl->n_nodes; i++) {
		n = &ctl->nodes[i];
		if (strcmp(n->name, name) != 0)
			continue;
		/* Its labels (cluster, zone, rack, datasets) may change
		 * (an operator moved data onto it); its resources may not,
		 * since running work is placed on them. */
		static const char *const labels[] = {"cluster", "zone", "rack",
		                                     "datasets", NULL};
		json_t *a = json_deep_copy(n->inventory),
		       *b = json_deep_copy(inv);
		static const char *const skip[] = {
		    "address", "epoch", "state",    "devices", "cluster",
		    "zone",    "rack",  "datasets", NULL};
		for (const char *const *f = skip; *f; f++) {
			json_object_del(a, *f);
			json_object_del(b, *f);
		}
		bool same = json_equal(a, b), relabel = false;
		json_decref(a);
		json_decref(b);
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
		if (json_object_get(body, "address"))
			snprintf(n->address, sizeof(n->address), "%s",
			         json_string_value(
			             json_object_get(body, "address")));
		if (devs) /* the latest inventory (health) for listings */
			json_object_set(n->inventory, "devices", devs);
		n->last_seen_ms = now;
		json_decref(inv);
		*ret = node_reply(ctl, n);
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
	if ((r = ctl_node_save(ctl, n, now)) < 0) {
		/* The cluster cannot forget a node: keep it DOWN until the
		 * agent registers again (which retries the write). */
		n->state = N_LOST;
		cnl_cluster_set_node_state(ctl->cluster, (uint32_t)idx,
		                           CNL_NODE_DOWN);
		return set_err(err, errlen, 500, "cannot store the node");
	}
	cnl_ctl_kick(ctl);
	*ret = node_reply(ctl, n);
	return 201;
}

/*
 * Work the node's agent started but no longer lists (it lost it: killed
 * while cnlabd could not be told, an agent that went away and came back
 * empty).  Two heartbeats in a row without it, so that one that raced a
 * start does not count: then a job is requeued, work being stopped ends.
 */
static void lost_by_agent(struct cnl_ctl *ctl, int node, json_t *running,
                          int64_t now)
{
	for (size_t k = ctl->n_wl; k-- > 0;) {
		struct wl *w = &ctl->wl[k];
		bool listed = false;

		if (w->node != node || (w->state != CNL_WL_STARTED &&
		                        w->state != CNL_WL_STOPPING &&
		                        w->state != CNL_WL_REQUEUING))
			continue;
		for (size_t j = 0; j < json_array_size(running) && !listed;
		     j++) {
			json_t *it = json_array_get(running, j);
			const char *id =
			    json_string_value(json_object_get(it, "id"));

			listed = id && strcmp(id, w->id) == 0 &&
			         json_integer_value(
			             json_object_get(it, "epoch")) == w->epoch;
		}
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
		if (end) {
			ctl_server_gone(ctl, w);
			ctl_wl_remove(ctl, w);
		}
		ctl->dirty = true;
	}
}

int cnl_ctl_node_heartbeat(struct cnl_ctl *ctl, const char *node, json_t *body,
                           int64_t now, json_t **ret, char *err, size_t errlen)
{
	static const char *const fields[] = {"epoch", "running", NULL};
	int i = ctl_node_find(ctl, node);
	json_t *running, *stop;
	struct node *n;

	if (i < 0)
		return set_err(err, errlen, 404, "node not found");
	if (cnl_json_check_fields(body, fields, err, errlen) < 0)
		return 400;
	running = json_object_get(body, "running");
	if (running && !json_is_array(running))
		return set_err(err, errlen, 400,
		               "field \"running\": must be an array");
	n = &ctl->nodes[i];
	n->last_seen_ms = now;
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
	/* What it runs that is no longer its to run. */
	stop = json_array();
	for (size_t k = 0; running && k < json_array_size(running); k++) {
		json_t *it = json_array_get(running, k);
		const char *id = json_string_value(json_object_get(it, "id"));
		json_int_t ep =
		    json_integer_value(json_object_get(it, "epoch"));
		struct wl *w = id ? ctl_wl_find(ctl, id) : NULL;

		if (!id)
			continue;
		if (!w || w->node != i || w->epoch != ep) {
			json_array_append_new(stop, json_string(id));
			ctl->fenced++;
		}
	}
	if (running)
		lost_by_agent(ctl, i, running, now);
	*ret = node_reply(ctl, n);
	json_object_set_new(*ret, "stop", stop);
	return 200;
}

static json_t *assignment_json(struct cnl_ctl *ctl, const struct wl *w)
{
	const struct cnl_cluster *c = ctl->cluster;
	const struct cnl_alloc *a = &w->placed;
	json_t *o, *gpu;

	o = json_pack(
	    "{s:s,s:s,s:I,s:s,s:s,s:s,s:s}", "id", w->id, "kind",
	    w->server ? "server" : "job", "epoch", (json_int_t)w->epoch,
	    "action",
	    w->state == CNL_WL_STOPPING || w->state == CNL_WL_REQUEUING ? "stop"
	                                                                : "run",
	    "project_id", w->project_id, "user_id", w->user_id, "shape",
	    w->shape);
	{
		/* The submitting user's name, for agents that run work as
		 * the matching local account. */
		struct cnl_store_user u;

		if (cnl_store_user_get(ctl->store, w->user_id, &u) == 0)
			json_object_set_new(o, "user", json_string(u.name));
	}
	if (w->server) {
		struct cnl_store_server v;

		if (cnl_store_server_get(ctl->store, w->id, &v) == 0) {
			json_object_set_new(o, "image", json_string(v.image));
			json_object_set_new(o, "name", json_string(v.name));
			json_object_set_new(o, "storage_gb",
			                    json_integer(v.storage_gb));
			json_object_set_new(o, "idle_timeout_s",
			                    json_integer(v.idle_timeout_s));
		}
	} else {
		struct cnl_store_job j;

		if (cnl_store_job_get(ctl->store, w->id, &j) == 0)
			json_object_set_new(o, "command",
			                    json_string(j.command));
	}
	gpu = json_pack("{s:i,s:I,s:i}", "blocks", cnl_alloc_blocks_held(c, a),
	                "vram_mib", (json_int_t)cnl_alloc_vram_mib(c, a),
	                "gpu_mask",
	                a->kind == CNL_PLACE_WHOLE ? a->gpu_mask : 1 << a->gpu);
	if (a->kind == CNL_PLACE_MIG || a->kind == CNL_PLACE_MIG_BLOCKS) {
		const struct cnl_gpu_type *t =
		    &c->cat->types[c->nodes[a->node].gpu_type];

		json_object_set_new(gpu, "mig_profile",
		                    json_string(t->mig[a->profile].name));
		json_object_set_new(gpu, "mig_start", json_integer(a->start));
	}
	json_object_set_new(o, "gpu", gpu);
	if (w->gang_id[0]) {
		/* The nodes of all members, by rank, for the workload's
		 * environment (CNLAB_GANG_NODES): members start together,
		 * so each is placed when any is assigned. */
		json_t *nodes = json_array();

		for (int r = 0; r < w->gang_size; r++) {
			const char *name = "";

			for (size_t k = 0; k < ctl->n_wl; k++) {
				const struct wl *m = &ctl->wl[k];

				if (m->rank == r && m->node >= 0 &&
				    cnl_wl_placed(m->state) &&
				    strcmp(m->gang_id, w->gang_id) == 0)
					name = ctl->nodes[m->node].name;
			}
			json_array_append_new(nodes, json_string(name));
		}
		json_object_set_new(
		    o, "gang",
		    json_pack("{s:s,s:i,s:i,s:o}", "id", w->gang_id, "rank",
		              w->rank, "size", w->gang_size, "nodes", nodes));
	}
	json_object_set_new(o, "cpu_milli", json_integer(a->cpu_milli));
	json_object_set_new(o, "mem_mib", json_integer(a->mem_mib));
	if (w->not_before_ms)
		json_object_set_new(o, "not_before",
		                    ctl_time_or_null(w->not_before_ms));
	if (w->state == CNL_WL_STOPPING || w->state == CNL_WL_REQUEUING) {
		json_object_set_new(o, "signal_at",
		                    ctl_time_or_null(w->signal_ms));
		json_object_set_new(o, "kill_at", ctl_time_or_null(w->kill_ms));
	}
	return o;
}

int cnl_ctl_assignments(struct cnl_ctl *ctl, const char *node, uint64_t since,
                        int64_t wait_ms, json_t **ret, char *err, size_t errlen)
{
	int64_t deadline = ctl_now_ms() + wait_ms;
	int i = ctl_node_find(ctl, node);
	json_t *list;

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
		pthread_cond_timedwait(&ctl->changed, ctl->mu, &ts);
		/* Nodes never go away, but the array may have moved. */
	}
	list = json_array();
	for (size_t k = 0; k < ctl->n_wl; k++) {
		const struct wl *w = &ctl->wl[k];

		if (w->node == i && cnl_wl_placed(w->state))
			json_array_append_new(list, assignment_json(ctl, w));
	}
	ctl->nodes[i].last_seen_ms = ctl_now_ms();
	*ret = json_pack("{s:I,s:I,s:o}", "version",
	                 (json_int_t)ctl->nodes[i].version, "epoch",
	                 (json_int_t)ctl->nodes[i].epoch, "assignments", list);
	return 200;
}

int cnl_ctl_node_report(struct cnl_ctl *ctl, const char *node, json_t *body,
                        int64_t now, json_t **ret, char *err, size_t errlen)
{
	static const char *const fields[] = {
	    "id", "epoch", "state", "exit_code", "url", "message", NULL};
	static const char *const states[] = {"running", "succeeded", "failed",
	                                     "stopped", NULL};
	static const enum cnl_wl_event events[] = {
	    CNL_WL_EV_REPORT_RUNNING, CNL_WL_EV_REPORT_SUCCEEDED,
	    CNL_WL_EV_REPORT_FAILED, CNL_WL_EV_REPORT_STOPPED};
	const char *id, *state, *url = NULL, *msg = NULL;
	int64_t epoch, code = 0;
	int i = ctl_node_find(ctl, node), st = -1, r;
	struct wl *w, next;

	if (i < 0)
		return set_err(err, errlen, 404, "node not found");
	if (cnl_json_check_fields(body, fields, err, errlen) < 0 ||
	    cnl_json_get_string(body, "id", true, &id, err, errlen) < 0 ||
	    cnl_json_get_int(body, "epoch", true, 0, INT64_MAX, &epoch, err,
	                     errlen) < 0 ||
	    cnl_json_get_string(body, "state", true, &state, err, errlen) < 0 ||
	    cnl_json_get_int(body, "exit_code", false, -255, 255, &code, err,
	                     errlen) < 0 ||
	    cnl_json_get_string(body, "url", false, &url, err, errlen) < 0 ||
	    cnl_json_get_string(body, "message", false, &msg, err, errlen) < 0)
		return 400;
	for (int k = 0; states[k]; k++)
		if (strcmp(state, states[k]) == 0)
			st = k;
	if (st < 0)
		return set_err(err, errlen, 400,
		               "field \"state\": must be running, succeeded, "
		               "failed or stopped");
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
			snprintf(next.url, sizeof(next.url), "%s", url);
		if ((r = ctl_persist(ctl, &next, now)) < 0)
			return set_err(err, errlen, 500, "cannot store");
		*w = next;
		*ret = json_pack("{s:s}", "phase", cnl_wl_state_name(w->state));
		return 200;
	}
	/* The workload left its node: back in the queue, or ended. */
	if (msg)
		snprintf(next.message, sizeof(next.message), "%s", msg);
	if (next.state == CNL_WL_PENDING) {
		if ((r = ctl_persist(ctl, &next, now)) < 0)
			return set_err(err, errlen, 500, "cannot store");
		*w = next;
		if (w->alloc_id)
			cnl_alloc_free(ctl->cluster, w->alloc_id);
		w->alloc_id = 0;
		ctl_node_changed(ctl, w->node);
		w->node = -1;
	} else {
		if ((r = ctl_persist_end(ctl, &next, true, (int)code, now)) < 0)
			return set_err(err, errlen, 500, "cannot store");
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
	*ret = json_pack("{s:s}", "state", ctl_store_state(&next));
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
	cnl_cluster_set_node_state(ctl->cluster, (uint32_t)i, map[st]);
	cnl_ctl_kick(ctl);
	*ret = node_reply(ctl, &ctl->nodes[i]);
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
	json_object_set_new(o, "blocks_total", json_integer(total));
	json_object_set_new(o, "blocks_used", json_integer(used));
	json_object_set_new(o, "workloads", json_integer(cn->n_allocs));
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
