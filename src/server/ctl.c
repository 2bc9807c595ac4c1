/*
 * ctl.c - the controller (see ctl.h for the phases, fencing and locking).
 *
 * Memory.  Nodes live in ctl->nodes, in the order they were added to the
 * cluster, so a node's index is its cluster index.  Active workloads live
 * in ctl->wl (unordered; removal swaps the last one in).  Usage is kept per
 * owner (project or user id) in ctl->usage and flushed to "usage"
 * documents once per tick in one transaction.
 *
 * Persistence before visibility.  A decision reaches an agent only through
 * cnl_ctl_assignments(), which reads the in-memory state; every path that
 * changes a workload's placement writes the store first (in one
 * transaction per cycle) and changes memory only once the write succeeded,
 * so what an agent is told is always what a restarted cnlabd will find.
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
#include "sched/sched.h"
#include "server/ctl.h"
#include "server/metrics.h"
#include "server/shape.h"

enum phase { PH_PENDING, PH_ASSIGNED, PH_STARTED, PH_STOPPING };

#define START_HISTORY 16 /* starts remembered for provisioning ETAs */
static const char *const phase_names[] = {"pending", "assigned", "started",
                                          "stopping"};

enum nstate { N_UP, N_CORDONED, N_DRAINING, N_LOST };
static const char *const nstate_names[] = {"up", "cordoned", "draining",
                                           "lost"};

struct node {
	char id[CNL_ID_MAX];
	char name[CNL_STORE_NAME_MAX];
	char address[128];
	int64_t epoch;
	int64_t last_seen_ms;
	uint8_t state; /* enum nstate */
	uint64_t version;
	json_t *inventory; /* the registration body, for listings */
};

/*
 * Why a workload runs where it runs: facts taken at its START decision
 * (the decision's reason, the chosen node's labels, the job's own fields),
 * kept in the run record as "placement" so that they survive restarts and
 * stay true: nothing here is inferred later.
 */
struct why {
	char node[CNL_STORE_NAME_MAX]; /* "" before the first START */
	char gpu_type[CNL_NAME_MAX];   /* catalog name; "" for CPU work */
	char cluster[CNL_NAME_MAX], zone[CNL_NAME_MAX], rack[CNL_NAME_MAX];
	int8_t type_allowed;  /* the type is in gpu_types; -1: none given */
	int8_t dataset_local; /* the node lists the dataset; -1: none */
	uint8_t holders;      /* other nodes that list the dataset */
	uint8_t reason;       /* enum cnl_reason, or WHY_HOME */
	int64_t at_ms;        /* when it was decided */
};

/* A server placed on its home node (place_home), not by the scheduler. */
#define WHY_HOME CNL_WHY_COUNT_

/* The most GPU types (names or families) a job may list. */
#define GPU_TYPES_MAX 16

struct wl {
	char id[CNL_ID_MAX];
	char project_id[CNL_ID_MAX];
	char user_id[CNL_ID_MAX];
	bool server;
	char shape[CNL_SHAPE_MAX];
	struct cnl_job j; /* the scheduler's view */
	int node;         /* index, or -1 */
	uint32_t alloc_id;
	struct cnl_alloc placed; /* copy of the allocation when placed */
	int64_t epoch;
	uint8_t phase;
	int64_t not_before_ms; /* START after pre-emption */
	int64_t signal_ms, kill_ms;
	char stop_state[CNL_STORE_STATE_MAX]; /* state once stopped */
	bool requeue;                         /* pre-empted: back to pending */
	uint8_t wait_reason;
	int64_t est_start_ms;
	int resv_node; /* reserved for it (wait reason RESERVED), or -1 */
	int preemptions, requeues;
	int64_t started_ms;
	char url[CNL_STORE_URL_MAX];
	char message[160]; /* the agent's word on how it ended */
	int hb_missing;    /* heartbeats of its node that did not list it */
	int home;          /* servers: the node of the last run, -1: none */
	/* Jobs: asked for at submission (see the run record in ctl.h). */
	char gpu_types[GPU_TYPES_MAX][CNL_NAME_MAX];
	uint8_t n_gpu_types;
	char gang_id[CNL_ID_MAX]; /* the gang's leader (rank 0); "": none */
	uint16_t rank, gang_size;
	bool doomed; /* its gang can never start again (gangs_check) */
	struct why why;
};

struct usage {
	char owner[CNL_ID_MAX];
	double block_ms;      /* 1% blocks x milliseconds */
	double storage_gb_ms; /* GB x milliseconds */
	int64_t storage_gb;   /* held now by the owner's servers */
	int servers;          /* active servers */
	bool dirty;
};

struct cnl_ctl {
	struct cnl_ctl_config cfg;
	struct cnl_store *store;
	pthread_mutex_t *mu;
	pthread_cond_t wake;    /* the loop: kick or stop */
	pthread_cond_t changed; /* long polls: some node's version moved */
	pthread_t thread;
	bool running, stop, dirty;
	struct cnl_sched *sched;
	struct cnl_cluster *cluster;
	struct node *nodes;
	size_t n_nodes;
	struct wl *wl;
	size_t n_wl, cap_wl;
	struct usage *usage;
	size_t n_usage, cap_usage;
	char (*teams)[CNL_ID_MAX]; /* project id of each scheduler team */
	size_t n_teams;
	uint64_t next_job;
	uint64_t next_gang; /* scheduler gang ids, one per leader id */
	int64_t last_meter_ms;
	struct cnl_id_gen ids;
	int64_t default_runtime_ms; /* the scheduler's for work without one */
	/* How long the last starts took, assignment to running, per kind
	 * (0 jobs, 1 servers): what a provisioning ETA is made of. */
	int64_t start_ms[2][START_HISTORY];
	unsigned n_starts[2];
	/* metrics */
	struct cnl_hist cycle_hist;
	uint64_t cycles, finished[4], lost_nodes, fenced;
};

/* ------------------------------------------------------------------------ */

static int64_t now_ms(void)
{
	return cnl_time_now_ms();
}

static json_t *time_or_null(int64_t ms)
{
	char buf[CNL_TIME_RFC3339_MAX];

	if (ms <= 0 || cnl_time_format_rfc3339(ms, buf, sizeof(buf)) < 0)
		return json_null();
	return json_string(buf);
}

static uint32_t team_of(struct cnl_ctl *ctl, const char *project_id)
{
	for (size_t i = 0; i < ctl->n_teams; i++)
		if (strcmp(ctl->teams[i], project_id) == 0)
			return (uint32_t)i;
	ctl->teams =
	    cnl_xrealloc(ctl->teams, (ctl->n_teams + 1) * sizeof(*ctl->teams));
	snprintf(ctl->teams[ctl->n_teams], CNL_ID_MAX, "%s", project_id);
	return (uint32_t)ctl->n_teams++;
}

static struct usage *usage_of(struct cnl_ctl *ctl, const char *owner)
{
	for (size_t i = 0; i < ctl->n_usage; i++)
		if (strcmp(ctl->usage[i].owner, owner) == 0)
			return &ctl->usage[i];
	if (ctl->n_usage == ctl->cap_usage) {
		ctl->cap_usage = ctl->cap_usage ? 2 * ctl->cap_usage : 16;
		ctl->usage = cnl_xrealloc(ctl->usage,
		                          ctl->cap_usage * sizeof(*ctl->usage));
	}
	struct usage *u = &ctl->usage[ctl->n_usage++];
	memset(u, 0, sizeof(*u));
	snprintf(u->owner, sizeof(u->owner), "%s", owner);
	return u;
}

static struct wl *wl_find(struct cnl_ctl *ctl, const char *id)
{
	for (size_t i = 0; i < ctl->n_wl; i++)
		if (strcmp(ctl->wl[i].id, id) == 0)
			return &ctl->wl[i];
	return NULL;
}

static int node_find(struct cnl_ctl *ctl, const char *id)
{
	for (size_t i = 0; i < ctl->n_nodes; i++)
		if (strcmp(ctl->nodes[i].id, id) == 0)
			return (int)i;
	return -1;
}

/* A node by id, else by name (what administrators type). */
static int node_find_any(struct cnl_ctl *ctl, const char *key)
{
	int i = node_find(ctl, key);

	for (size_t k = 0; i < 0 && k < ctl->n_nodes; k++)
		if (strcmp(ctl->nodes[k].name, key) == 0)
			i = (int)k;
	return i;
}

static void node_changed(struct cnl_ctl *ctl, int node)
{
	if (node >= 0 && (size_t)node < ctl->n_nodes) {
		ctl->nodes[node].version++;
		pthread_cond_broadcast(&ctl->changed);
	}
}

static void wl_remove(struct cnl_ctl *ctl, struct wl *w)
{
	size_t i = (size_t)(w - ctl->wl);

	ctl->wl[i] = ctl->wl[--ctl->n_wl];
}

/* Parse @shape into @req for the scheduler; 0 or -CNL_EFIELD. */
static int make_req(struct cnl_ctl *ctl, const char *shape,
                    struct cnl_alloc_req *req, char *buf, char *err,
                    size_t errlen)
{
	return cnl_shape_parse(ctl->cfg.cat, shape, req, buf, err, errlen);
}

/* ---- run records --------------------------------------------------------- */

static json_t *alloc_json(const struct cnl_alloc *a)
{
	char m0[17], m1[17];

	snprintf(m0, sizeof(m0), "%016" PRIx64, a->mask[0]);
	snprintf(m1, sizeof(m1), "%016" PRIx64, a->mask[1]);
	return json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:s,s:I,s:I}",
	                 "req_kind", a->req_kind, "kind", a->kind, "gpu",
	                 a->gpu, "profile", a->profile, "start", a->start,
	                 "blocks", a->blocks, "gpu_mask", a->gpu_mask, "mask0",
	                 m0, "mask1", m1, "cpu_milli", (json_int_t)a->cpu_milli,
	                 "mem_mib", (json_int_t)a->mem_mib);
}

static int alloc_from_json(json_t *v, struct cnl_alloc *a)
{
	json_int_t rk, k, gpu, prof, start, blocks, gmask, cpu, mem;
	const char *m0, *m1;

	if (json_unpack(v, "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:s,s:s,s:I,s:I}",
	                "req_kind", &rk, "kind", &k, "gpu", &gpu, "profile",
	                &prof, "start", &start, "blocks", &blocks, "gpu_mask",
	                &gmask, "mask0", &m0, "mask1", &m1, "cpu_milli", &cpu,
	                "mem_mib", &mem) < 0)
		return -CNL_ECORRUPT;
	a->req_kind = (uint8_t)rk;
	a->kind = (uint8_t)k;
	a->gpu = (uint8_t)gpu;
	a->profile = (uint8_t)prof;
	a->start = (uint8_t)start;
	a->blocks = (uint8_t)blocks;
	a->gpu_mask = (uint16_t)gmask;
	a->mask[0] = strtoull(m0, NULL, 16);
	a->mask[1] = strtoull(m1, NULL, 16);
	a->cpu_milli = cpu;
	a->mem_mib = mem;
	return 0;
}

static const char *const why_keys[] = {
    [CNL_WHY_STARTED] = "started",
    [CNL_WHY_BACKFILLED] = "backfilled",
    [CNL_WHY_AFTER_PREEMPTION] = "after_preemption",
    [WHY_HOME] = "home",
};

static json_t *why_json(const struct why *y)
{
	const char *key =
	    y->reason < CNL_ARRAY_SIZE(why_keys) && why_keys[y->reason]
	        ? why_keys[y->reason]
	        : "started";
	json_t *o = json_pack(
	    "{s:s,s:s,s:s,s:I}", "node", y->node, "reason", key, "reason_text",
	    y->reason == WHY_HOME
	        ? "back on its home node, where its workspace is"
	        : cnl_reason_text((enum cnl_reason)y->reason),
	    "decided_ms", (json_int_t)y->at_ms);

	if (y->gpu_type[0])
		json_object_set_new(o, "gpu_type", json_string(y->gpu_type));
	if (y->type_allowed >= 0)
		json_object_set_new(o, "gpu_type_allowed",
		                    json_boolean(y->type_allowed));
	if (y->dataset_local >= 0) {
		json_object_set_new(o, "dataset_local",
		                    json_boolean(y->dataset_local));
		json_object_set_new(o, "dataset_elsewhere",
		                    json_integer(y->holders));
	}
	if (y->cluster[0])
		json_object_set_new(o, "cluster", json_string(y->cluster));
	if (y->zone[0])
		json_object_set_new(o, "zone", json_string(y->zone));
	if (y->rack[0])
		json_object_set_new(o, "rack", json_string(y->rack));
	return o;
}

/* Read back what why_json() wrote; a record without one leaves @y empty. */
static void why_from_json(json_t *o, struct why *y)
{
	const char *key = json_string_value(json_object_get(o, "reason"));
	json_t *v;

	memset(y, 0, sizeof(*y));
	y->type_allowed = y->dataset_local = -1;
	if (!json_is_object(o) || !key)
		return;
	for (size_t i = 0; i < CNL_ARRAY_SIZE(why_keys); i++)
		if (why_keys[i] && strcmp(why_keys[i], key) == 0)
			y->reason = (uint8_t)i;
#define STR(f)                                                   \
	snprintf(y->f, sizeof(y->f), "%s",                       \
	         json_string_value(json_object_get(o, #f))       \
	             ? json_string_value(json_object_get(o, #f)) \
	             : "")
	STR(node);
	STR(gpu_type);
	STR(cluster);
	STR(zone);
	STR(rack);
#undef STR
	if (json_is_boolean(v = json_object_get(o, "gpu_type_allowed")))
		y->type_allowed = json_is_true(v);
	if (json_is_boolean(v = json_object_get(o, "dataset_local")))
		y->dataset_local = json_is_true(v);
	y->holders = (uint8_t)json_integer_value(
	    json_object_get(o, "dataset_elsewhere"));
	y->at_ms = json_integer_value(json_object_get(o, "decided_ms"));
}

/*
 * The run record of @w as JSON text in @buf.  @final: the record of a
 * workload that ended while placed, which keeps where it ran
 * ("placement") but not its allocation.  Should the record not fit, the
 * explanation goes first and the agent's message next: a record that
 * cannot be written would stop every decision of the cycle from being
 * recorded.
 */
static int run_text(struct cnl_ctl *ctl, const struct wl *w, bool final,
                    char *buf, size_t len)
{
	json_t *o = json_pack(
	    "{s:s,s:I,s:i,s:i,s:b,s:I,s:I}", "phase", phase_names[w->phase],
	    "epoch", (json_int_t)w->epoch, "preemptions", w->preemptions,
	    "requeues", w->requeues, "preemptible", w->j.preemptible,
	    "cpu_milli", (json_int_t)w->j.req.cpu_milli, "mem_mib",
	    (json_int_t)w->j.req.mem_mib);
	char *t = NULL;
	int r = -CNL_ESIZE;

	if (w->node >= 0 && w->phase != PH_PENDING) {
		json_object_set_new(o, "node",
		                    json_string(ctl->nodes[w->node].id));
		json_object_set_new(o, "alloc", alloc_json(&w->placed));
		json_object_set_new(o, "started_ms",
		                    json_integer(w->started_ms));
		if (w->not_before_ms)
			json_object_set_new(o, "not_before_ms",
			                    json_integer(w->not_before_ms));
	}
	if (w->message[0])
		json_object_set_new(o, "message", json_string(w->message));
	/* A server's workspace stays on the node it ran on. */
	if (w->server && (w->node >= 0 || w->home >= 0))
		json_object_set_new(
		    o, "home",
		    json_string(
		        ctl->nodes[w->node >= 0 ? w->node : w->home].id));
	if (w->phase == PH_STOPPING) {
		json_object_set_new(o, "signal_ms", json_integer(w->signal_ms));
		json_object_set_new(o, "kill_ms", json_integer(w->kill_ms));
		json_object_set_new(o, "stop_state",
		                    json_string(w->stop_state));
		json_object_set_new(o, "requeue", json_boolean(w->requeue));
		/* Whether it still holds its resources until it has left (a
		 * pre-empted job's went to another at once; one requeued with
		 * its gang or cancelled keeps them). */
		json_object_set_new(o, "held", json_boolean(w->alloc_id != 0));
	}
	/* What the job asked for, so that a restart rebuilds it. */
	if (w->n_gpu_types) {
		json_t *a = json_array();

		for (int i = 0; i < w->n_gpu_types; i++)
			json_array_append_new(a, json_string(w->gpu_types[i]));
		json_object_set_new(o, "gpu_types", a);
	}
	if (w->j.dataset[0])
		json_object_set_new(o, "dataset", json_string(w->j.dataset));
	if (w->gang_id[0])
		json_object_set_new(o, "gang",
		                    json_pack("{s:s,s:i,s:i}", "id", w->gang_id,
		                              "rank", w->rank, "size",
		                              w->gang_size));
	if (w->why.node[0] && (final || w->phase != PH_PENDING))
		json_object_set_new(o, "placement", why_json(&w->why));
	for (int pass = 0; pass < 3 && r < 0; pass++) {
		if (pass == 1)
			json_object_del(o, "placement");
		if (pass == 2)
			json_object_del(o, "message");
		free(t);
		t = json_dumps(o, JSON_COMPACT);
		if (t && strlen(t) < len) {
			memcpy(buf, t, strlen(t) + 1);
			r = 0;
		}
	}
	json_decref(o);
	free(t);
	return r;
}

/* Store state for @w in @phase: the job or server state name. */
static const char *store_state(const struct wl *w)
{
	if (!w->server)
		return w->phase == PH_PENDING ? "pending" : "running";
	switch (w->phase) {
	case PH_PENDING:
		return "pending";
	case PH_ASSIGNED:
		return "starting";
	case PH_STARTED:
		return "running";
	default:
		return "stopping";
	}
}

/* Write @w's current state and run record; 0 or a store error. */
static int persist(struct cnl_ctl *ctl, const struct wl *w, int64_t now)
{
	char run[CNL_STORE_RUN_MAX];
	int r;

	if ((r = run_text(ctl, w, false, run, sizeof(run))) < 0)
		return r;
	if (w->server)
		return cnl_store_server_update(ctl->store, w->id,
		                               store_state(w), w->url, run);
	return cnl_store_job_update_run(ctl->store, w->id, store_state(w), 0,
	                                now, run);
}

/* Write a workload's end (done: no longer active). */
static int persist_end(struct cnl_ctl *ctl, const struct wl *w,
                       const char *state, int exit_code, int64_t now)
{
	char run[CNL_STORE_RUN_MAX];
	struct wl end = *w;
	int r;

	end.phase = PH_PENDING; /* no allocation in the final record */
	/* Where it ran stays, if it ends from there. */
	if ((r = run_text(ctl, &end, w->phase != PH_PENDING, run,
	                  sizeof(run))) < 0)
		return r;
	if (w->server)
		return cnl_store_server_update(ctl->store, w->id, state, "",
		                               run);
	return cnl_store_job_update_run(ctl->store, w->id, state, exit_code,
	                                now, run);
}

/* ---- loading ------------------------------------------------------------- */

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

static int node_save(struct cnl_ctl *ctl, const struct node *n, int64_t now)
{
	struct cnl_store_doc d = {0};
	json_t *o = json_deep_copy(n->inventory);
	int r;

	json_object_set_new(o, "epoch", json_integer(n->epoch));
	json_object_set_new(o, "state", json_string(nstate_names[n->state]));
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

static int load_nodes(struct cnl_ctl *ctl, int64_t now, char *err,
                      size_t errlen)
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
				if (strcmp(st, nstate_names[k]) == 0)
					state = k;
			r = add_cluster_node(ctl, inv, err, errlen);
			if (r >= 0) {
				node_push(ctl, d[i].id, inv,
				          json_integer_value(
				              json_object_get(inv, "epoch")),
				          state, now);
				/* The cluster's node stays UP until its work
				 * is re-adopted (node_states()): the allocator
				 * places nothing on a cordoned node, adopted
				 * work included. */
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
static void node_states(struct cnl_ctl *ctl)
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

static struct wl *wl_new(struct cnl_ctl *ctl)
{
	struct wl *w;

	if (ctl->n_wl == ctl->cap_wl) {
		ctl->cap_wl = ctl->cap_wl ? 2 * ctl->cap_wl : 64;
		ctl->wl = cnl_xrealloc(ctl->wl, ctl->cap_wl * sizeof(*ctl->wl));
	}
	w = &ctl->wl[ctl->n_wl++];
	memset(w, 0, sizeof(*w));
	w->node = -1;
	w->home = -1;
	w->resv_node = -1;
	w->wait_reason = CNL_WHY_COUNT_; /* no cycle has looked at it yet */
	return w;
}

/* Set up @w's scheduler job; 0 or -CNL_EFIELD for a shape gone bad. */
static int wl_job(struct cnl_ctl *ctl, struct wl *w, const char *shape,
                  int prio, int64_t created, int64_t deadline, int64_t runtime,
                  bool preemptible)
{
	char err[256], buf[CNL_SHAPE_MAX];
	struct cnl_alloc_req req;
	int r;

	snprintf(w->shape, sizeof(w->shape), "%s", shape);
	if ((r = make_req(ctl, w->shape, &req, buf, err, sizeof(err))) < 0)
		return r;
	if (req.kind == CNL_REQ_MIG)
		req.profile = w->shape + (req.profile - buf);
	req.project = team_of(ctl, w->project_id);
	req.cpu_milli = 1000;
	req.mem_mib = 4096;
	w->j.id = ++ctl->next_job;
	w->j.req = req;
	w->j.prio = (uint8_t)prio;
	w->j.preemptible = preemptible;
	w->j.submit_ms = created;
	w->j.deadline_ms = deadline;
	w->j.runtime_ms = runtime;
	return 0;
}

/* The scheduler's gang id of @w's gang: the one its fellow members have,
 * else a new one. */
static uint64_t gang_number(struct cnl_ctl *ctl, const struct wl *w)
{
	for (size_t i = 0; i < ctl->n_wl; i++)
		if (&ctl->wl[i] != w && ctl->wl[i].j.gang &&
		    strcmp(ctl->wl[i].gang_id, w->gang_id) == 0)
			return ctl->wl[i].j.gang;
	return ++ctl->next_gang;
}

/*
 * The fields a job asked for at submission, from its run record @run (see
 * ctl.h): CPU and memory, the GPU types that narrow its shape, its
 * dataset, and with @gang its gang.  0, or -CNL_EFIELD when the types no
 * longer leave any type the shape allows (the catalog changed).
 */
static int wl_job_fields(struct cnl_ctl *ctl, struct wl *w, json_t *run,
                         bool gang)
{
	json_t *types = json_object_get(run, "gpu_types");
	json_t *g = json_object_get(run, "gang");
	const char *ds = json_string_value(json_object_get(run, "dataset"));
	const char *gid = json_string_value(json_object_get(g, "id"));

	/* CPU and memory asked for at submission (else the defaults). */
	if (json_integer_value(json_object_get(run, "cpu_milli")) > 0)
		w->j.req.cpu_milli =
		    json_integer_value(json_object_get(run, "cpu_milli"));
	if (json_integer_value(json_object_get(run, "mem_mib")) > 0)
		w->j.req.mem_mib =
		    json_integer_value(json_object_get(run, "mem_mib"));
	if (json_array_size(types) > 0) {
		uint64_t m = 0;

		for (size_t i = 0;
		     i < json_array_size(types) && i < GPU_TYPES_MAX; i++) {
			const char *t =
			    json_string_value(json_array_get(types, i));

			if (!t)
				continue;
			m |= cnl_shape_family(ctl->cfg.cat, t);
			snprintf(w->gpu_types[w->n_gpu_types++], CNL_NAME_MAX,
			         "%s", t);
		}
		if (w->j.req.kind == CNL_REQ_CPU || !(w->j.req.gpu_types & m))
			return -CNL_EFIELD;
		w->j.req.gpu_types &= m;
	}
	if (ds && cnl_label_valid(ds))
		snprintf(w->j.dataset, sizeof(w->j.dataset), "%s", ds);
	if (gang && gid && json_integer_value(json_object_get(g, "size")) > 1) {
		snprintf(w->gang_id, sizeof(w->gang_id), "%s", gid);
		w->rank =
		    (uint16_t)json_integer_value(json_object_get(g, "rank"));
		w->gang_size =
		    (uint16_t)json_integer_value(json_object_get(g, "size"));
		w->j.gang = gang_number(ctl, w);
		w->j.gang_size = w->gang_size;
		w->j.spread = true; /* one member per node */
	}
	return 0;
}

/* Re-adopt the placement in @run for @w; on failure @w stays pending. */
static void wl_adopt(struct cnl_ctl *ctl, struct wl *w, const char *run_txt)
{
	json_t *run = json_loads(run_txt, 0, NULL), *held;
	const char *node, *ph;
	struct cnl_alloc a = {0};
	uint32_t id;
	int n;

	if (!run)
		return;
	w->epoch = json_integer_value(json_object_get(run, "epoch"));
	w->preemptions =
	    (int)json_integer_value(json_object_get(run, "preemptions"));
	w->requeues = (int)json_integer_value(json_object_get(run, "requeues"));
	if ((node = json_string_value(json_object_get(run, "home"))))
		w->home = node_find(ctl, node);
	why_from_json(json_object_get(run, "placement"), &w->why);
	node = json_string_value(json_object_get(run, "node"));
	ph = json_string_value(json_object_get(run, "phase"));
	if (!node || !ph || strcmp(ph, "pending") == 0 ||
	    (n = node_find(ctl, node)) < 0 ||
	    alloc_from_json(json_object_get(run, "alloc"), &a) < 0)
		goto out;
	a.node = (uint32_t)n;
	a.project = w->j.req.project;
	/* Told to stop with its resources already given to other work (a
	 * pre-empted job; records before "held" say so by "requeue"): it
	 * keeps its node until it has left, not its allocation. */
	held = json_object_get(run, "held");
	if (strcmp(ph, "stopping") == 0 &&
	    (json_is_boolean(held)
	         ? json_is_false(held)
	         : json_is_true(json_object_get(run, "requeue")))) {
		w->alloc_id = 0;
		w->placed = a;
	} else if (cnl_alloc_adopt(ctl->cluster, &a, &id) < 0) {
		cnl_log(CNL_LOG_WARN, "cannot re-adopt allocation; requeued",
		        "id=%s node=%s", w->id, node);
		goto out;
	} else {
		w->alloc_id = id;
		w->placed = *cnl_alloc_get(ctl->cluster, id);
	}
	w->node = n;
	w->phase = strcmp(ph, "started") == 0    ? PH_STARTED
	           : strcmp(ph, "stopping") == 0 ? PH_STOPPING
	                                         : PH_ASSIGNED;
	w->started_ms = json_integer_value(json_object_get(run, "started_ms"));
	w->not_before_ms =
	    json_integer_value(json_object_get(run, "not_before_ms"));
	w->signal_ms = json_integer_value(json_object_get(run, "signal_ms"));
	w->kill_ms = json_integer_value(json_object_get(run, "kill_ms"));
	w->requeue = json_is_true(json_object_get(run, "requeue"));
	snprintf(w->stop_state, sizeof(w->stop_state), "%s",
	         json_string_value(json_object_get(run, "stop_state"))
	             ? json_string_value(json_object_get(run, "stop_state"))
	             : "");
out:
	json_decref(run);
}

static int load_jobs(struct cnl_ctl *ctl, const char *state)
{
	struct cnl_store_job *j = cnl_xcalloc(256, sizeof(*j));
	char last[CNL_ID_MAX] = "";
	int n, r;

	do {
		r = cnl_store_job_list_state(ctl->store, state,
		                             last[0] ? last : NULL, 256, j, &n);
		for (int i = 0; r == 0 && i < n; i++)
			cnl_ctl_job_added(ctl, &j[i]);
		if (r == 0 && n)
			snprintf(last, sizeof(last), "%s", j[n - 1].id);
	} while (r == 0 && n == 256);
	free(j);
	return r;
}

static int load_servers(struct cnl_ctl *ctl)
{
	struct cnl_store_server *v = cnl_xcalloc(256, sizeof(*v));
	char last[CNL_ID_MAX] = "";
	int n, r;

	do {
		r = cnl_store_server_list(ctl->store, NULL,
		                          last[0] ? last : NULL, 256, v, &n);
		for (int i = 0; r == 0 && i < n; i++)
			cnl_ctl_server_added(ctl, &v[i]);
		if (r == 0 && n)
			snprintf(last, sizeof(last), "%s", v[n - 1].id);
	} while (r == 0 && n == 256);
	free(v);
	return r;
}

static int load_usage(struct cnl_ctl *ctl)
{
	struct cnl_store_doc *d = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*d));
	char last[CNL_STORE_DOC_ID_MAX] = "";
	int n, r;

	do {
		r = cnl_store_doc_list(ctl->store, "usage", NULL,
		                       last[0] ? last : NULL,
		                       CNL_STORE_LIST_MAX, d, &n);
		for (int i = 0; r == 0 && i < n; i++) {
			json_t *o = json_loads(d[i].body, 0, NULL);
			struct usage *u = usage_of(ctl, d[i].id);

			u->block_ms =
			    json_number_value(json_object_get(o, "block_ms"));
			u->storage_gb_ms = json_number_value(
			    json_object_get(o, "storage_gb_ms"));
			json_decref(o);
		}
		if (r == 0 && n)
			snprintf(last, sizeof(last), "%s", d[n - 1].id);
		cnl_store_docs_done(d, n);
	} while (r == 0 && n == CNL_STORE_LIST_MAX);
	free(d);
	return r;
}

int cnl_ctl_new(const struct cnl_ctl_config *cfg, pthread_mutex_t *mu,
                struct cnl_ctl **ret, char *err, size_t errlen)
{
	struct cnl_sched_config sc;
	struct cnl_ctl *ctl = cnl_xcalloc(1, sizeof(*ctl));
	int64_t now = now_ms();
	int r;

	err[0] = '\0';
	ctl->cfg = *cfg;
	if (!ctl->cfg.node_lost_ms)
		ctl->cfg.node_lost_ms = 30000;
	if (!ctl->cfg.cycle_interval_ms)
		ctl->cfg.cycle_interval_ms = 1000;
	ctl->store = cfg->store;
	ctl->mu = mu;
	pthread_cond_init(&ctl->wake, NULL);
	pthread_cond_init(&ctl->changed, NULL);
	cnl_id_gen_init_random(&ctl->ids);
	cnl_sched_config_default(&sc);
	if (cfg->policy)
		snprintf(sc.policy, sizeof(sc.policy), "%s", cfg->policy);
	if (cfg->preempt_min_run_ms >= 0)
		sc.min_run_ms = cfg->preempt_min_run_ms;
	if (cfg->preempt_grace_ms >= 0)
		sc.grace_ms = cfg->preempt_grace_ms;
	ctl->default_runtime_ms = sc.default_runtime_ms;
	if ((r = cnl_sched_new(&sc, &ctl->sched)) < 0) {
		snprintf(err, errlen, "scheduler: unknown policy \"%s\"",
		         sc.policy);
		goto fail;
	}
	if ((r = cnl_cluster_new(cfg->cat, &ctl->cluster)) < 0) {
		snprintf(err, errlen, "cluster: %s", cnl_strerror(r));
		goto fail;
	}
	if ((r = load_nodes(ctl, now, err, errlen)) < 0 ||
	    (r = load_usage(ctl)) < 0 || (r = load_jobs(ctl, "running")) < 0 ||
	    (r = load_jobs(ctl, "pending")) < 0 ||
	    (r = load_servers(ctl)) < 0) {
		if (!err[0])
			snprintf(err, errlen, "loading state: %s%s%s",
			         cnl_strerror(r),
			         cnl_store_errmsg(ctl->store)[0] ? ": " : "",
			         cnl_store_errmsg(ctl->store));
		goto fail;
	}
	node_states(ctl);
	ctl->last_meter_ms = now;
	ctl->dirty = true;
	*ret = ctl;
	return 0;
fail:
	cnl_ctl_free(ctl);
	return r;
}

void cnl_ctl_free(struct cnl_ctl *ctl)
{
	if (!ctl)
		return;
	for (size_t i = 0; i < ctl->n_nodes; i++)
		json_decref(ctl->nodes[i].inventory);
	free(ctl->nodes);
	free(ctl->wl);
	free(ctl->usage);
	free(ctl->teams);
	cnl_cluster_free(ctl->cluster);
	cnl_sched_free(ctl->sched);
	pthread_cond_destroy(&ctl->wake);
	pthread_cond_destroy(&ctl->changed);
	free(ctl);
}

/* ---- workloads ----------------------------------------------------------- */

int cnl_ctl_shape_check(struct cnl_ctl *ctl, const char *shape, char *err,
                        size_t errlen)
{
	struct cnl_alloc_req req;
	struct cnl_req_prep p;
	char buf[CNL_SHAPE_MAX];
	int r;

	if ((r = make_req(ctl, shape, &req, buf, err, errlen)) < 0)
		return r;
	req.project = 0;
	if ((r = cnl_alloc_prepare(ctl->cluster, &req, &p)) < 0) {
		snprintf(err, errlen, "GPU shape \"%s\": %s", shape,
		         cnl_strerror(r));
		return -CNL_EFIELD;
	}
	return 0;
}

/* The scheduler's jobs array from the active workloads; @map[i] is the
 * workload of jobs[i]. */
static size_t build_jobs(struct cnl_ctl *ctl, struct cnl_job **ret,
                         size_t **ret_map)
{
	struct cnl_job *jobs = cnl_xcalloc(ctl->n_wl + 1, sizeof(*jobs));
	size_t *map = cnl_xcalloc(ctl->n_wl + 1, sizeof(*map)), n = 0;

	for (size_t i = 0; i < ctl->n_wl; i++) {
		struct wl *w = &ctl->wl[i];

		if (w->phase != PH_PENDING && !w->alloc_id)
			continue; /* stopping, resources already released */
		jobs[n] = w->j;
		if (w->phase == PH_PENDING) {
			jobs[n].state = CNL_JOB_PENDING;
		} else {
			jobs[n].state = CNL_JOB_RUNNING;
			jobs[n].alloc_id = w->alloc_id;
			jobs[n].start_ms = w->started_ms;
			if (w->phase == PH_STOPPING)
				jobs[n].preemptible = false;
		}
		map[n++] = i;
	}
	*ret = jobs;
	*ret_map = map;
	return n;
}

/*
 * How many running workloads (on node @node, or anywhere for -1) the
 * scheduler assumes to run its default run time because they gave none:
 * an estimate made of their ends is a guess.
 */
static int unestimated(struct cnl_ctl *ctl, int node)
{
	int n = 0;

	for (size_t i = 0; i < ctl->n_wl; i++) {
		const struct wl *w = &ctl->wl[i];

		if (w->phase != PH_PENDING && w->alloc_id &&
		    (node < 0 || w->node == node) && w->j.runtime_ms <= 0)
			n++;
	}
	return n;
}

int cnl_ctl_admit(struct cnl_ctl *ctl, const struct cnl_store_job *sj,
                  int64_t now, struct cnl_ctl_admission *ret)
{
	struct wl tmp = {0};
	struct cnl_job *jobs;
	size_t *map, n;
	int r;

	*ret = (struct cnl_ctl_admission){
	    .start = -1,
	    .finish = sj->runtime_ms > 0,
	    .runtime_ms = sj->runtime_ms,
	    .unestimated = unestimated(ctl, -1),
	    .assumed_runtime_ms = ctl->default_runtime_ms,
	};
	if (!sj->deadline_ms)
		return 0;
	snprintf(tmp.project_id, sizeof(tmp.project_id), "%s", sj->project_id);
	/* Without a run-time estimate the scheduler checks only that the
	 * job can start before its deadline (sched.c, deadline_runtime()). */
	if ((r = wl_job(ctl, &tmp, sj->gpu_shape, sj->priority, now,
	                sj->deadline_ms, sj->runtime_ms, true)) < 0)
		return r;
	{
		json_t *run = json_loads(sj->run, 0, NULL);

		r = wl_job_fields(ctl, &tmp, run, false);
		json_decref(run);
		if (r < 0)
			return r;
	}
	n = build_jobs(ctl, &jobs, &map);
	r = cnl_sched_admit(ctl->sched, ctl->cluster, jobs, n, &tmp.j, now,
	                    &ret->start);
	free(jobs);
	free(map);
	return r;
}

int cnl_ctl_job_added(struct cnl_ctl *ctl, const struct cnl_store_job *j)
{
	struct wl *w;
	json_t *run;
	bool pre = true;
	int r;

	if (strcmp(j->state, "pending") != 0 &&
	    strcmp(j->state, "running") != 0)
		return 0;
	if (wl_find(ctl, j->id))
		return 0;
	run = json_loads(j->run, 0, NULL);
	if (json_is_false(json_object_get(run, "preemptible")))
		pre = false;
	w = wl_new(ctl);
	snprintf(w->id, sizeof(w->id), "%s", j->id);
	snprintf(w->project_id, sizeof(w->project_id), "%s", j->project_id);
	snprintf(w->user_id, sizeof(w->user_id), "%s", j->user_id);
	r = wl_job(ctl, w, j->gpu_shape, j->priority, j->created_ms,
	           j->deadline_ms, j->runtime_ms, pre);
	if (r == 0)
		r = wl_job_fields(ctl, w, run, true);
	json_decref(run);
	if (r < 0) {
		cnl_log(CNL_LOG_WARN, "job has an invalid shape; failed",
		        "id=%s shape=%s", j->id, j->gpu_shape);
		wl_remove(ctl, w);
		return cnl_store_job_update_run(ctl->store, j->id, "failed", -1,
		                                now_ms(), "{}");
	}
	/* Epochs and counts carry over; a placement only when running. */
	wl_adopt(ctl, w, j->run);
	ctl->dirty = true;
	return 0;
}

int cnl_ctl_server_added(struct cnl_ctl *ctl, const struct cnl_store_server *v)
{
	bool active =
	    strcmp(v->state, "stopped") != 0 && strcmp(v->state, "failed") != 0;
	struct wl *w;

	/* Storage is held (and metered) while the server exists. */
	usage_of(ctl, v->project_id)->storage_gb += v->storage_gb;
	usage_of(ctl, v->user_id)->storage_gb += v->storage_gb;
	if (!active || wl_find(ctl, v->id))
		return 0;
	usage_of(ctl, v->project_id)->servers++;
	usage_of(ctl, v->user_id)->servers++;
	w = wl_new(ctl);
	w->server = true;
	snprintf(w->id, sizeof(w->id), "%s", v->id);
	snprintf(w->project_id, sizeof(w->project_id), "%s", v->project_id);
	snprintf(w->user_id, sizeof(w->user_id), "%s", v->user_id);
	snprintf(w->url, sizeof(w->url), "%s", v->url);
	/* Interactive work: normal priority, never pre-empted.  The server
	 * names a profile; its shape is read from the profile document. */
	char shape[CNL_SHAPE_MAX];
	struct cnl_store_doc d = {0};

	snprintf(shape, sizeof(shape), "%s", v->profile);
	if (cnl_store_doc_get(ctl->store, "profile", v->profile, &d) == 0) {
		json_t *o = json_loads(d.body, 0, NULL);
		const char *g = json_string_value(json_object_get(o, "gpu"));

		if (g)
			snprintf(shape, sizeof(shape), "%s", g);
		json_decref(o);
		cnl_store_doc_done(&d);
	}
	if (wl_job(ctl, w, shape, CNL_PRIO_NORMAL, v->created_ms, 0, 0, false) <
	    0) {
		wl_remove(ctl, w);
		usage_of(ctl, v->project_id)->servers--;
		usage_of(ctl, v->user_id)->servers--;
		return cnl_store_server_update(ctl->store, v->id, "failed", "",
		                               "{}");
	}
	wl_adopt(ctl, w, v->run);
	ctl->dirty = true;
	return 0;
}

void cnl_ctl_server_deleted(struct cnl_ctl *ctl,
                            const struct cnl_store_server *v)
{
	usage_of(ctl, v->project_id)->storage_gb -= v->storage_gb;
	usage_of(ctl, v->user_id)->storage_gb -= v->storage_gb;
}

static void server_gone(struct cnl_ctl *ctl, const struct wl *w)
{
	if (!w->server)
		return;
	usage_of(ctl, w->project_id)->servers--;
	usage_of(ctl, w->user_id)->servers--;
}

int cnl_ctl_stop_workload(struct cnl_ctl *ctl, const char *id,
                          const char *final_state, int64_t now)
{
	struct wl *w = wl_find(ctl, id);
	struct wl saved;
	int r;

	if (!w)
		return -CNL_ENOTFOUND;
	if (w->phase == PH_STOPPING && (!w->requeue || w->server))
		return 0;
	if (w->phase == PH_STOPPING) {
		/* Being pre-empted (or requeued with its gang): it ends as
		 * asked instead of going back to the queue. */
		saved = *w;
		w->requeue = false;
		snprintf(w->stop_state, sizeof(w->stop_state), "%s",
		         final_state);
		if ((r = persist(ctl, w, now)) < 0)
			*w = saved;
		return r;
	}
	if (w->phase == PH_PENDING) {
		if ((r = persist_end(ctl, w, final_state, -1, now)) < 0)
			return r;
		ctl->finished[2]++;
		server_gone(ctl, w);
		wl_remove(ctl, w);
		ctl->dirty = true;
		return 0;
	}
	saved = *w;
	w->phase = PH_STOPPING;
	w->signal_ms = now;
	w->kill_ms = now + 30000;
	w->requeue = false;
	snprintf(w->stop_state, sizeof(w->stop_state), "%s", final_state);
	if ((r = persist(ctl, w, now)) < 0) {
		*w = saved;
		return r;
	}
	node_changed(ctl, w->node);
	return 0;
}

/* Remember that a start took @ms from assignment to running. */
static void note_start(struct cnl_ctl *ctl, bool server, int64_t ms)
{
	unsigned *n = &ctl->n_starts[server];

	ctl->start_ms[server][*n % START_HISTORY] = ms;
	(*n)++;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* The median of the remembered starts of a kind into *@ret_ms, and how
 * many there are (0: no estimate). */
static unsigned start_median(struct cnl_ctl *ctl, bool server, int64_t *ret_ms)
{
	unsigned n = ctl->n_starts[server] < START_HISTORY
	                 ? ctl->n_starts[server]
	                 : START_HISTORY;
	int64_t v[START_HISTORY];

	if (!n)
		return 0;
	memcpy(v, ctl->start_ms[server], n * sizeof(v[0]));
	qsort(v, n, sizeof(v[0]), cmp_i64);
	*ret_ms = v[n / 2];
	return n;
}

int cnl_ctl_stop_gang(struct cnl_ctl *ctl, const char *gang,
                      const char *final_state, int64_t now)
{
	int r = -CNL_ENOTFOUND;

	/* Backwards: a pending member is removed, and the last one, already
	 * seen, takes its place. */
	for (size_t i = ctl->n_wl; i-- > 0;) {
		int rr;

		if (strcmp(ctl->wl[i].gang_id, gang) != 0)
			continue;
		rr =
		    cnl_ctl_stop_workload(ctl, ctl->wl[i].id, final_state, now);
		if (rr < 0 && rr != -CNL_ENOTFOUND)
			return rr;
		r = 0;
	}
	return r;
}

json_t *cnl_ctl_workload_json(struct cnl_ctl *ctl, const char *id)
{
	struct wl *w = wl_find(ctl, id);
	int64_t med;
	unsigned n;
	json_t *o;

	if (!w)
		return NULL;
	o = json_pack("{s:s,s:I}", "phase", phase_names[w->phase], "epoch",
	              (json_int_t)w->epoch);
	if (w->phase == PH_PENDING) {
		json_object_set_new(
		    o, "reason",
		    json_string(
		        w->wait_reason < CNL_WHY_COUNT_
		            ? cnl_reason_text((enum cnl_reason)w->wait_reason)
		            : "being scheduled"));
		json_object_set_new(o, "estimated_start",
		                    time_or_null(w->est_start_ms));
		if (w->resv_node >= 0 && (size_t)w->resv_node < ctl->n_nodes) {
			const struct node *nd = &ctl->nodes[w->resv_node];
			json_t *cl = json_object_get(nd->inventory, "cluster");

			json_object_set_new(
			    o, "reservation",
			    json_pack("{s:s,s:O,s:o,s:s}", "node", nd->name,
			              "cluster", cl ? cl : json_null(), "at",
			              time_or_null(w->est_start_ms), "shape",
			              w->shape));
		}
		/* An estimate built on the default run time of running
		 * work says so: it is a guess, not a plan. */
		if (w->est_start_ms > 0) {
			int guessed = unestimated(ctl, w->resv_node);

			json_object_set_new(
			    o, "estimate",
			    json_pack(
			        "{s:b,s:i,s:I}", "approximate", guessed > 0,
			        "unestimated_running", guessed,
			        "assumed_runtime_s",
			        (json_int_t)(ctl->default_runtime_ms / 1000)));
		}
	} else if (w->node >= 0) {
		json_object_set_new(o, "node",
		                    json_string(ctl->nodes[w->node].name));
		json_object_set_new(o, "blocks",
		                    json_integer(cnl_alloc_blocks_held(
		                        ctl->cluster, &w->placed)));
		json_object_set_new(o, "started_at",
		                    time_or_null(w->started_ms));
		/* Provisioning: ready after as long as recent starts took. */
		if (w->phase == PH_ASSIGNED &&
		    (n = start_median(ctl, w->server, &med)) > 0)
			json_object_set_new(
			    o, "estimated_ready",
			    json_pack(
			        "{s:o,s:i}", "at",
			        time_or_null((w->not_before_ms > w->started_ms
			                          ? w->not_before_ms
			                          : w->started_ms) +
			                     med),
			        "from_starts", (int)n));
	}
	return o;
}

void cnl_ctl_usage_of(struct cnl_ctl *ctl, const char *owner,
                      struct cnl_ctl_usage *ret)
{
	struct usage *u = usage_of(ctl, owner);

	ret->gpu_hours = u->block_ms / 100.0 / 3600000.0;
	ret->storage_gb_days = u->storage_gb_ms / 86400000.0;
	ret->servers = u->servers;
}

json_t *cnl_ctl_availability(struct cnl_ctl *ctl, const char *shape,
                             int64_t now)
{
	struct wl tmp = {0};
	struct cnl_req_prep p;
	struct cnl_plan plan;
	struct cnl_job *jobs;
	size_t *map, n;
	int64_t start = -1;
	int r;

	snprintf(tmp.project_id, sizeof(tmp.project_id), "availability");
	if (wl_job(ctl, &tmp, shape, CNL_PRIO_LOW, now, now + 1, 0, true) < 0)
		return NULL;
	if (cnl_alloc_prepare(ctl->cluster, &tmp.j.req, &p) == 0 &&
	    cnl_alloc_plan(ctl->cluster, &p, &plan) == 0)
		return json_pack("{s:b}", "now", 1);
	n = build_jobs(ctl, &jobs, &map);
	r = cnl_sched_admit(ctl->sched, ctl->cluster, jobs, n, &tmp.j, now,
	                    &start);
	free(jobs);
	free(map);
	if (r == 0)
		start = now;
	return json_pack("{s:b,s:o}", "now", 0, "estimated_start",
	                 time_or_null(start > 0 ? start : 0));
}

/* ---- the cycle ----------------------------------------------------------- */

/*
 * The facts behind a START of @w on node @d->node, taken now from what the
 * controller knows for certain: the decision's reason, the node's labels
 * and GPU type, and the job's own fields.  @home: a server sent back to
 * its home node.
 */
static void explain(struct cnl_ctl *ctl, struct wl *w,
                    const struct cnl_decision *d, bool home, int64_t now)
{
	const struct cnl_cluster *c = ctl->cluster;
	const struct cnl_node *n = &c->nodes[d->node];
	struct why *y = &w->why;

	memset(y, 0, sizeof(*y));
	snprintf(y->node, sizeof(y->node), "%s", ctl->nodes[d->node].name);
	snprintf(y->cluster, sizeof(y->cluster), "%s", n->cluster);
	snprintf(y->zone, sizeof(y->zone), "%s", n->zone);
	snprintf(y->rack, sizeof(y->rack), "%s", n->rack);
	y->type_allowed = y->dataset_local = -1;
	if (n->n_gpus && w->j.req.kind != CNL_REQ_CPU) {
		snprintf(y->gpu_type, sizeof(y->gpu_type), "%s",
		         c->cat->types[n->gpu_type].name);
		if (w->n_gpu_types)
			y->type_allowed =
			    (w->j.req.gpu_types >> n->gpu_type & 1) != 0;
	}
	if (w->j.dataset[0]) {
		y->dataset_local = 0;
		for (uint32_t i = 0; i < c->n_nodes; i++)
			for (int k = 0; k < c->nodes[i].n_datasets; k++) {
				if (strcmp(c->nodes[i].datasets[k],
				           w->j.dataset) != 0)
					continue;
				if (i == d->node)
					y->dataset_local = 1;
				else if (y->holders < UINT8_MAX)
					y->holders++;
			}
	}
	y->reason = home ? WHY_HOME : d->reason;
	y->at_ms = now;
}

static void apply_start(struct cnl_ctl *ctl, struct wl *w,
                        const struct cnl_decision *d, bool home, int64_t now)
{
	const struct cnl_alloc *a = cnl_alloc_get(ctl->cluster, d->alloc_id);

	w->node = (int)d->node;
	w->alloc_id = d->alloc_id;
	if (a)
		w->placed = *a;
	w->epoch++;
	w->phase = PH_ASSIGNED;
	w->started_ms = d->at_ms > now ? d->at_ms : now;
	w->not_before_ms = d->at_ms > now ? d->at_ms : 0;
	explain(ctl, w, d, home, now);
}

static void apply_preempt(struct wl *w, const struct cnl_decision *d)
{
	/* The scheduler released the victim's allocation in the snapshot. */
	w->alloc_id = 0;
	w->phase = PH_STOPPING;
	w->signal_ms = d->at_ms;
	w->kill_ms = d->kill_ms;
	w->requeue = true;
	w->preemptions++;
	snprintf(w->stop_state, sizeof(w->stop_state), "pending");
}

/*
 * Record every START and PREEMPT of @dec in one transaction, working on
 * copies; 0 when committed, else an error and nothing is recorded.
 */
static int record(struct cnl_ctl *ctl, const struct cnl_decisions *dec,
                  const size_t *map, size_t n, int64_t now)
{
	int r;

	if ((r = cnl_store_tx_begin(ctl->store)) < 0)
		return r;
	for (size_t i = 0; i < dec->n; i++) {
		const struct cnl_decision *d = &dec->d[i];
		struct wl tmp;

		if ((d->kind != CNL_DEC_START && d->kind != CNL_DEC_PREEMPT) ||
		    d->job >= n)
			continue;
		tmp = ctl->wl[map[d->job]];
		if (d->kind == CNL_DEC_START)
			apply_start(ctl, &tmp, d, false, now);
		else
			apply_preempt(&tmp, d);
		if ((r = persist(ctl, &tmp, now)) < 0) {
			cnl_store_tx_rollback(ctl->store);
			return r;
		}
	}
	if ((r = cnl_store_tx_commit(ctl->store)) < 0)
		cnl_store_tx_rollback(ctl->store);
	return r;
}

/*
 * Servers go back to their home node when it can take them: their
 * workspace is there (nodes share no storage).  Placed before the cycle,
 * recorded like a START; otherwise the scheduler places them anywhere.
 */
static void place_home(struct cnl_ctl *ctl, int64_t now)
{
	for (size_t i = 0; i < ctl->n_wl; i++) {
		struct wl *w = &ctl->wl[i], tmp;
		struct cnl_req_prep p;
		struct cnl_plan pl;
		uint32_t id;

		if (!w->server || w->phase != PH_PENDING || w->home < 0 ||
		    (size_t)w->home >= ctl->n_nodes ||
		    ctl->nodes[w->home].state != N_UP)
			continue;
		if (cnl_alloc_prepare(ctl->cluster, &w->j.req, &p) < 0 ||
		    cnl_alloc_plan_node(ctl->cluster, &p, (uint32_t)w->home,
		                        &pl) < 0 ||
		    cnl_alloc_commit(ctl->cluster, &p, &pl, &id) < 0)
			continue;
		struct cnl_decision d = {.kind = CNL_DEC_START,
		                         .node = (uint32_t)w->home,
		                         .alloc_id = id,
		                         .at_ms = now};
		tmp = *w;
		apply_start(ctl, &tmp, &d, true, now);
		if (persist(ctl, &tmp, now) < 0) {
			cnl_alloc_free(ctl->cluster, id);
			continue;
		}
		*w = tmp;
		node_changed(ctl, w->node);
	}
}

/* Whether @w is back in the queue or on its way there. */
static bool requeued(const struct wl *w)
{
	return w->phase == PH_PENDING ||
	       (w->phase == PH_STOPPING && w->requeue);
}

/*
 * A gang runs whole or not at all.  When a member is back in the queue
 * (its node was lost, its agent lost it, it was pre-empted) while others
 * still hold their places, those are stopped and requeued too, keeping
 * their allocations until they have left: the scheduler starts a gang
 * only when all its members are pending, so the gang starts again
 * together.  When a member has ended for good (succeeded, failed,
 * cancelled), members still waiting could never start with it: they
 * fail, saying why.  Runs before each cycle.
 */
static void gangs_check(struct cnl_ctl *ctl, int64_t now)
{
	for (size_t i = 0; i < ctl->n_wl; i++) {
		const char *gid = ctl->wl[i].gang_id;
		size_t active = 0;
		bool back = false, first = true;

		if (!gid[0])
			continue;
		for (size_t k = 0; k < ctl->n_wl; k++) {
			const struct wl *m = &ctl->wl[k];

			if (strcmp(m->gang_id, gid) != 0)
				continue;
			first &= k >= i;
			active++;
			back |= requeued(m);
		}
		if (!first || !back)
			continue; /* seen already, or whole */
		for (size_t k = 0; k < ctl->n_wl; k++) {
			struct wl *m = &ctl->wl[k], saved;

			if (strcmp(m->gang_id, gid) != 0)
				continue;
			if (active < ctl->wl[i].gang_size) {
				m->doomed = m->phase == PH_PENDING;
				continue;
			}
			if (m->phase != PH_ASSIGNED && m->phase != PH_STARTED)
				continue;
			saved = *m;
			m->phase = PH_STOPPING;
			m->signal_ms = now;
			m->kill_ms = now + 30000;
			m->requeue = true;
			snprintf(m->stop_state, sizeof(m->stop_state),
			         "pending");
			if (persist(ctl, m, now) < 0) {
				*m = saved; /* tried again next cycle */
				continue;
			}
			cnl_log(CNL_LOG_INFO,
			        "gang member requeued with its gang",
			        "id=%s gang=%s", m->id, gid);
			node_changed(ctl, m->node);
		}
	}
	/* Backwards: removal moves the last one, already seen, here. */
	for (size_t i = ctl->n_wl; i-- > 0;) {
		struct wl *w = &ctl->wl[i];

		if (!w->doomed)
			continue;
		w->doomed = false;
		snprintf(w->message, sizeof(w->message),
		         "a member of its gang has ended, so the gang cannot "
		         "start again");
		if (persist_end(ctl, w, "failed", -1, now) < 0) {
			w->message[0] = '\0';
			continue;
		}
		cnl_log(CNL_LOG_WARN, "gang cannot start again; member failed",
		        "id=%s gang=%s", w->id, w->gang_id);
		ctl->finished[1]++;
		wl_remove(ctl, w);
		ctl->dirty = true;
	}
}

static void run_cycle(struct cnl_ctl *ctl, int64_t now)
{
	struct cnl_decisions dec = {0};
	struct cnl_job *jobs;
	size_t *map, n;
	struct timespec t0, t1;
	int r;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	gangs_check(ctl, now);
	place_home(ctl, now);
	n = build_jobs(ctl, &jobs, &map);
	r = cnl_sched_cycle(ctl->sched, ctl->cluster, jobs, n, now,
	                    ctl->cfg.seed ^ (uint64_t)now, &dec);
	if (r < 0) {
		cnl_log(CNL_LOG_ERROR, "scheduling cycle failed", "err=%s",
		        cnl_errname(r));
		goto out;
	}
	if ((r = record(ctl, &dec, map, n, now)) < 0) {
		/* Not recorded, so not visible: put the snapshot back and
		 * try again on the next tick. */
		cnl_log(CNL_LOG_ERROR, "cannot persist decisions",
		        "err=%s db=%s", cnl_errname(r),
		        cnl_store_errmsg(ctl->store));
		for (size_t i = 0; i < dec.n; i++)
			if (dec.d[i].kind == CNL_DEC_START)
				cnl_alloc_free(ctl->cluster, dec.d[i].alloc_id);
		for (size_t i = 0; i < dec.n; i++)
			if (dec.d[i].kind == CNL_DEC_PREEMPT &&
			    dec.d[i].job < n) {
				struct wl *w = &ctl->wl[map[dec.d[i].job]];

				cnl_alloc_adopt(ctl->cluster, &w->placed,
				                &w->alloc_id);
			}
		ctl->dirty = true;
		goto out;
	}
	for (size_t i = 0; i < dec.n; i++) {
		const struct cnl_decision *d = &dec.d[i];
		struct wl *w;

		if (d->kind == CNL_DEC_POWER_DOWN || d->job >= n)
			continue;
		w = &ctl->wl[map[d->job]];
		switch (d->kind) {
		case CNL_DEC_START:
			apply_start(ctl, w, d, false, now);
			node_changed(ctl, w->node);
			break;
		case CNL_DEC_WAIT:
			w->wait_reason = d->reason;
			w->est_start_ms = d->at_ms > 0 ? d->at_ms : 0;
			w->resv_node = d->reason == CNL_WHY_RESERVED &&
			                       d->node < ctl->n_nodes
			                   ? (int)d->node
			                   : -1;
			break;
		case CNL_DEC_PREEMPT:
			apply_preempt(w, d);
			node_changed(ctl, w->node);
			break;
		default:
			break;
		}
	}
	ctl->cycles++;
out:
	cnl_decisions_done(&dec);
	free(jobs);
	free(map);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	cnl_hist_observe(&ctl->cycle_hist,
	                 (double)(t1.tv_sec - t0.tv_sec) +
	                     (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
}

/* Nodes silent past the timeout: lost, their work requeued. */
static void check_nodes(struct cnl_ctl *ctl, int64_t now)
{
	for (size_t i = 0; i < ctl->n_nodes; i++) {
		struct node *nd = &ctl->nodes[i], lost;
		int r;

		if (nd->state == N_LOST ||
		    now - nd->last_seen_ms <= ctl->cfg.node_lost_ms)
			continue;
		/* Record first (on copies), then change memory. */
		lost = *nd;
		lost.state = N_LOST;
		lost.epoch++;
		if (cnl_store_tx_begin(ctl->store) < 0)
			return;
		r = node_save(ctl, &lost, now);
		for (size_t k = 0; r == 0 && k < ctl->n_wl; k++) {
			struct wl tmp = ctl->wl[k];

			if (tmp.node != (int)i || tmp.phase == PH_PENDING)
				continue;
			if (tmp.phase == PH_STOPPING && !tmp.requeue) {
				r = persist_end(ctl, &tmp, tmp.stop_state, -1,
				                now);
				continue;
			}
			tmp.requeues++;
			tmp.phase = PH_PENDING;
			r = persist(ctl, &tmp, now);
		}
		if (r < 0 || cnl_store_tx_commit(ctl->store) < 0) {
			cnl_store_tx_rollback(ctl->store);
			return; /* retried on the next tick */
		}
		nd->state = N_LOST;
		nd->epoch++;
		cnl_cluster_set_node_state(ctl->cluster, (uint32_t)i,
		                           CNL_NODE_DOWN);
		for (size_t k = ctl->n_wl; k-- > 0;) {
			struct wl *w = &ctl->wl[k];

			if (w->node != (int)i)
				continue;
			if (w->alloc_id)
				cnl_alloc_free(ctl->cluster, w->alloc_id);
			w->alloc_id = 0;
			w->node = -1;
			if (w->phase == PH_STOPPING && !w->requeue) {
				ctl->finished[3]++;
				server_gone(ctl, w);
				wl_remove(ctl, w);
			} else if (w->phase != PH_PENDING) {
				w->requeues++;
				w->phase = PH_PENDING;
			}
		}
		ctl->lost_nodes++;
		ctl->dirty = true;
		node_changed(ctl, (int)i);
		cnl_log(CNL_LOG_WARN, "node lost; its work is requeued",
		        "node=%s epoch=%" PRId64, nd->name, nd->epoch);
	}
}

/* Charge block-time and storage-time since the last tick. */
static void meter(struct cnl_ctl *ctl, int64_t now)
{
	double dt = (double)(now - ctl->last_meter_ms);

	if (dt <= 0)
		return;
	ctl->last_meter_ms = now;
	for (size_t i = 0; i < ctl->n_wl; i++) {
		struct wl *w = &ctl->wl[i];
		int b;

		if (!w->alloc_id || w->phase == PH_PENDING)
			continue;
		b = cnl_alloc_blocks_held(ctl->cluster, &w->placed);
		if (b <= 0)
			continue;
		usage_of(ctl, w->project_id)->block_ms += b * dt;
		usage_of(ctl, w->user_id)->block_ms += b * dt;
		usage_of(ctl, w->project_id)->dirty = true;
		usage_of(ctl, w->user_id)->dirty = true;
	}
	for (size_t i = 0; i < ctl->n_usage; i++) {
		struct usage *u = &ctl->usage[i];

		if (u->storage_gb > 0) {
			u->storage_gb_ms += (double)u->storage_gb * dt;
			u->dirty = true;
		}
	}
}

static void flush_usage(struct cnl_ctl *ctl, int64_t now)
{
	bool any = false;

	for (size_t i = 0; i < ctl->n_usage; i++)
		any |= ctl->usage[i].dirty;
	if (!any || cnl_store_tx_begin(ctl->store) < 0)
		return;
	for (size_t i = 0; i < ctl->n_usage; i++) {
		struct usage *u = &ctl->usage[i];
		struct cnl_store_doc d = {0};
		char body[128];

		if (!u->dirty)
			continue;
		snprintf(d.kind, sizeof(d.kind), "usage");
		snprintf(d.id, sizeof(d.id), "%s", u->owner);
		snprintf(body, sizeof(body),
		         "{\"block_ms\":%.0f,\"storage_gb_ms\":%.0f}",
		         u->block_ms, u->storage_gb_ms);
		d.body = body;
		d.updated_ms = now;
		if (cnl_store_doc_put(ctl->store, &d, false) < 0) {
			cnl_store_tx_rollback(ctl->store);
			return;
		}
	}
	if (cnl_store_tx_commit(ctl->store) < 0) {
		cnl_store_tx_rollback(ctl->store);
		return;
	}
	for (size_t i = 0; i < ctl->n_usage; i++)
		ctl->usage[i].dirty = false;
}

void cnl_ctl_tick(struct cnl_ctl *ctl, int64_t now, bool force)
{
	check_nodes(ctl, now);
	meter(ctl, now);
	flush_usage(ctl, now);
	if (ctl->dirty || force) {
		ctl->dirty = false;
		run_cycle(ctl, now);
	}
}

/* Cycles triggered by changes run at most this often, so a burst of
 * submissions costs one cycle per interval, not one per submission. */
#define CYCLE_GAP_MS 50

static void *loop(void *arg)
{
	struct cnl_ctl *ctl = arg;
	int64_t next = now_ms(), last = 0;

	pthread_mutex_lock(ctl->mu);
	while (!ctl->stop) {
		int64_t now = now_ms(), until;
		bool timer = now >= next;
		struct timespec ts;

		if (timer || (ctl->dirty && now - last >= CYCLE_GAP_MS)) {
			cnl_ctl_tick(ctl, now, timer);
			last = now;
			if (timer)
				next = now + ctl->cfg.cycle_interval_ms;
		}
		until = ctl->dirty ? last + CYCLE_GAP_MS : next;
		if (until > next)
			until = next;
		now = now_ms();
		if (until <= now)
			continue;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += (until - now) / 1000;
		ts.tv_nsec += ((until - now) % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&ctl->wake, ctl->mu, &ts);
	}
	pthread_mutex_unlock(ctl->mu);
	return NULL;
}

int cnl_ctl_start(struct cnl_ctl *ctl)
{
	int r = pthread_create(&ctl->thread, NULL, loop, ctl);

	if (r)
		return -r;
	ctl->running = true;
	return 0;
}

void cnl_ctl_stop(struct cnl_ctl *ctl)
{
	if (!ctl || !ctl->running)
		return;
	pthread_mutex_lock(ctl->mu);
	ctl->stop = true;
	pthread_cond_broadcast(&ctl->wake);
	pthread_cond_broadcast(&ctl->changed);
	pthread_mutex_unlock(ctl->mu);
	pthread_join(ctl->thread, NULL);
	ctl->running = false;
}

void cnl_ctl_kick(struct cnl_ctl *ctl)
{
	ctl->dirty = true;
	pthread_cond_signal(&ctl->wake);
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
	int i = node_find(ctl, node);
	struct wl *w = wl_find(ctl, id);

	if (i < 0 || !w || w->node != i || w->epoch != epoch ||
	    w->phase == PH_PENDING) {
		ctl->fenced++;
		return -CNL_EFENCED;
	}
	ctl->nodes[i].last_seen_ms = now_ms();
	return 0;
}

int cnl_ctl_node_check(struct cnl_ctl *ctl, const char *node)
{
	return node_find(ctl, node) < 0 ? -CNL_ENOTFOUND : 0;
}

static json_t *node_reply(struct cnl_ctl *ctl, const struct node *n)
{
	return json_pack(
	    "{s:s,s:s,s:I,s:s,s:I,s:I}", "id", n->id, "name", n->name, "epoch",
	    (json_int_t)n->epoch, "state", nstate_names[n->state], "lease_ms",
	    (json_int_t)(ctl->cfg.node_lost_ms / 2), "heartbeat_ms",
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
	if (node_save(ctl, n, now) < 0) {
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
	if ((r = node_save(ctl, n, now)) < 0) {
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

		if (w->node != node ||
		    (w->phase != PH_STARTED && w->phase != PH_STOPPING))
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
		struct wl saved = *w;
		bool end = w->phase == PH_STOPPING && !w->requeue;

		if (!end) {
			w->phase = PH_PENDING;
			w->requeues++;
		}
		if ((end ? persist_end(ctl, w, w->stop_state, -1, now)
		         : persist(ctl, w, now)) < 0) {
			*w = saved;
			continue;
		}
		if (w->alloc_id)
			cnl_alloc_free(ctl->cluster, w->alloc_id);
		w->alloc_id = 0;
		w->hb_missing = 0;
		node_changed(ctl, node);
		w->node = -1;
		if (end) {
			server_gone(ctl, w);
			wl_remove(ctl, w);
		}
		ctl->dirty = true;
	}
}

int cnl_ctl_node_heartbeat(struct cnl_ctl *ctl, const char *node, json_t *body,
                           int64_t now, json_t **ret, char *err, size_t errlen)
{
	static const char *const fields[] = {"epoch", "running", NULL};
	int i = node_find(ctl, node);
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
		if (node_save(ctl, n, now) < 0) {
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
		struct wl *w = id ? wl_find(ctl, id) : NULL;

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

	o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:s}", "id", w->id, "kind",
	              w->server ? "server" : "job", "epoch",
	              (json_int_t)w->epoch, "action",
	              w->phase == PH_STOPPING ? "stop" : "run", "project_id",
	              w->project_id, "user_id", w->user_id, "shape", w->shape);
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
				    m->phase != PH_PENDING &&
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
		                    time_or_null(w->not_before_ms));
	if (w->phase == PH_STOPPING) {
		json_object_set_new(o, "signal_at", time_or_null(w->signal_ms));
		json_object_set_new(o, "kill_at", time_or_null(w->kill_ms));
	}
	return o;
}

int cnl_ctl_assignments(struct cnl_ctl *ctl, const char *node, uint64_t since,
                        int64_t wait_ms, json_t **ret, char *err, size_t errlen)
{
	int64_t deadline = now_ms() + wait_ms;
	int i = node_find(ctl, node);
	json_t *list;

	if (i < 0)
		return set_err(err, errlen, 404, "node not found");
	while (ctl->nodes[i].version <= since && !ctl->stop) {
		struct timespec ts;
		int64_t left = deadline - now_ms();

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

		if (w->node == i && w->phase != PH_PENDING)
			json_array_append_new(list, assignment_json(ctl, w));
	}
	ctl->nodes[i].last_seen_ms = now_ms();
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
	const char *id, *state, *url = NULL, *msg = NULL;
	int64_t epoch, code = 0;
	int i = node_find(ctl, node), st = -1, r;
	struct wl *w, saved;

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
	w = wl_find(ctl, id);
	if (!w || w->node != i || w->epoch != epoch || w->phase == PH_PENDING) {
		ctl->fenced++;
		return set_err(err, errlen, 409,
		               "stale fencing epoch: this work is no longer "
		               "assigned to this node under that epoch; stop "
		               "it");
	}
	saved = *w;
	if (st == 0) { /* running */
		if (w->phase == PH_ASSIGNED) {
			int64_t from = w->not_before_ms > w->started_ms
			                   ? w->not_before_ms
			                   : w->started_ms;

			if (now >= from)
				note_start(ctl, w->server, now - from);
			w->phase = PH_STARTED;
			w->started_ms = now;
		}
		if (url)
			snprintf(w->url, sizeof(w->url), "%s", url);
		if ((r = persist(ctl, w, now)) < 0) {
			*w = saved;
			return set_err(err, errlen, 500, "cannot store");
		}
		*ret = json_pack("{s:s}", "phase", phase_names[w->phase]);
		return 200;
	}
	/* The workload ended. */
	const char *final = state;

	if (msg)
		snprintf(w->message, sizeof(w->message), "%s", msg);
	if (w->phase == PH_STOPPING)
		final = w->requeue ? "pending" : w->stop_state;
	else if (w->server && st != 2)
		final = "stopped";
	else if (!w->server && st == 3)
		final = "failed";
	if (w->phase == PH_STOPPING && w->requeue) {
		w->phase = PH_PENDING;
		r = persist(ctl, w, now);
		if (r < 0) {
			*w = saved;
			return set_err(err, errlen, 500, "cannot store");
		}
		if (w->alloc_id)
			cnl_alloc_free(ctl->cluster, w->alloc_id);
		w->alloc_id = 0;
		node_changed(ctl, w->node);
		w->node = -1;
	} else {
		if ((r = persist_end(ctl, w, final, (int)code, now)) < 0)
			return set_err(err, errlen, 500, "cannot store");
		if (w->alloc_id)
			cnl_alloc_free(ctl->cluster, w->alloc_id);
		node_changed(ctl, w->node);
		ctl->finished[strcmp(final, "succeeded") == 0   ? 0
		              : strcmp(final, "failed") == 0    ? 1
		              : strcmp(final, "cancelled") == 0 ? 2
		                                                : 3]++;
		server_gone(ctl, w);
		wl_remove(ctl, w);
	}
	cnl_ctl_kick(ctl);
	*ret = json_pack("{s:s}", "state", final);
	return 200;
}

int cnl_ctl_node_set_state(struct cnl_ctl *ctl, const char *node,
                           const char *state, json_t **ret, char *err,
                           size_t errlen)
{
	static const enum cnl_node_state map[] = {
	    CNL_NODE_UP, CNL_NODE_CORDONED, CNL_NODE_DRAINING};
	int i = node_find_any(ctl, node), st = -1;
	uint8_t old;

	if (i < 0)
		return set_err(err, errlen, 404, "node not found");
	for (int k = 0; k < 3; k++)
		if (strcmp(state, nstate_names[k]) == 0)
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
	if (node_save(ctl, &ctl->nodes[i], now_ms()) < 0) {
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
	json_object_set_new(o, "state", json_string(nstate_names[n->state]));
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
	int i = node_find_any(ctl, node);
	json_t *o, *list;

	if (i < 0)
		return NULL;
	o = node_json(ctl, (size_t)i, now);
	list = json_array();
	for (size_t k = 0; k < ctl->n_wl; k++) {
		const struct wl *w = &ctl->wl[k];

		if (w->node != i || w->phase == PH_PENDING)
			continue;
		json_array_append_new(
		    list,
		    json_pack("{s:s,s:s,s:s,s:s,s:s,s:i}", "id", w->id, "kind",
		              w->server ? "server" : "job", "project_id",
		              w->project_id, "phase", phase_names[w->phase],
		              "shape", w->shape, "blocks",
		              w->alloc_id ? cnl_alloc_blocks_held(ctl->cluster,
		                                                  &w->placed)
		                          : 0));
	}
	json_object_set_new(o, "running", list);
	return o;
}

/* ---- metrics ------------------------------------------------------------- */

void cnl_ctl_metrics(struct cnl_ctl *ctl, struct cnl_metrics_buf *b)
{
	static const char *const prio[] = {"low", "normal", "high", "critical"};
	static const char *const fin[] = {"succeeded", "failed", "cancelled",
	                                  "stopped"};
	const struct cnl_cluster *c = ctl->cluster;
	const struct cnl_catalog *cat = ctl->cfg.cat;
	uint64_t queue[4] = {0}, phases[4] = {0};
	char esc[2 * CNL_ID_MAX + 1];

	for (size_t i = 0; i < ctl->n_wl; i++) {
		phases[ctl->wl[i].phase]++;
		if (ctl->wl[i].phase == PH_PENDING)
			queue[ctl->wl[i].j.prio & 3]++;
	}
	cnl_mb_family(b, "cnlab_queue_depth", "gauge",
	              "Pending workloads by priority class.");
	for (int p = 0; p < 4; p++)
		cnl_mb_printf(b, "cnlab_queue_depth{priority=\"%s\"} %llu\n",
		              prio[p], (unsigned long long)queue[p]);
	cnl_mb_family(b, "cnlab_workloads", "gauge",
	              "Active jobs and servers by phase.");
	for (int p = 0; p < 4; p++)
		cnl_mb_printf(b, "cnlab_workloads{phase=\"%s\"} %llu\n",
		              phase_names[p], (unsigned long long)phases[p]);
	cnl_mb_family(b, "cnlab_workloads_finished_total", "counter",
	              "Workloads that ended since start, by final state.");
	for (int p = 0; p < 4; p++)
		cnl_mb_printf(b,
		              "cnlab_workloads_finished_total{state=\"%s\"} "
		              "%llu\n",
		              fin[p], (unsigned long long)ctl->finished[p]);

	/* Blocks and MIG instances per GPU type. */
	cnl_mb_family(b, "cnlab_gpu_blocks", "gauge",
	              "1% GPU blocks by GPU type and state (allocated, "
	              "free).");
	for (int t = 0; t < cat->n; t++) {
		int64_t total = 0, freeb = 0;
		bool any = false;

		for (uint32_t i = 0; i < c->n_nodes; i++) {
			if (!c->nodes[i].n_gpus || c->nodes[i].gpu_type != t)
				continue;
			any = true;
			for (int g = 0; g < c->nodes[i].n_gpus; g++) {
				total += CNL_BLOCKS_PER_GPU;
				freeb += cnl_gpu_free_blocks(c, i, g);
			}
		}
		if (!any)
			continue;
		cnl_mb_printf(b,
		              "cnlab_gpu_blocks{gpu_type=\"%s\",state="
		              "\"allocated\"} %lld\n",
		              cat->types[t].name, (long long)(total - freeb));
		cnl_mb_printf(
		    b,
		    "cnlab_gpu_blocks{gpu_type=\"%s\",state=\"free\"} "
		    "%lld\n",
		    cat->types[t].name, (long long)freeb);
	}
	cnl_mb_family(b, "cnlab_mig_instances", "gauge",
	              "MIG instances in use by GPU type and profile.");
	for (int t = 0; t < cat->n; t++)
		for (int p = 0; p < cat->types[t].n_mig; p++) {
			uint64_t n = 0;
			bool any = false;

			for (uint32_t i = 0; i < c->n_nodes; i++) {
				const struct cnl_node *nd = &c->nodes[i];

				if (!nd->n_gpus || nd->gpu_type != t)
					continue;
				any = true;
				for (int g = 0; g < nd->n_gpus; g++)
					for (int k = 0; k < nd->gpus[g].n_inst;
					     k++)
						n += nd->gpus[g]
						         .inst[k]
						         .profile == p;
			}
			if (any)
				cnl_mb_printf(b,
				              "cnlab_mig_instances{gpu_type="
				              "\"%s\",profile=\"%s\"} %llu\n",
				              cat->types[t].name,
				              cat->types[t].mig[p].name,
				              (unsigned long long)n);
		}
	cnl_mb_family(b, "cnlab_nodes", "gauge", "Nodes by state.");
	for (int s = 0; s < 4; s++) {
		uint64_t n = 0;

		for (size_t i = 0; i < ctl->n_nodes; i++)
			n += ctl->nodes[i].state == s;
		cnl_mb_printf(b, "cnlab_nodes{state=\"%s\"} %llu\n",
		              nstate_names[s], (unsigned long long)n);
	}
	cnl_mb_family(b, "cnlab_nodes_lost_total", "counter",
	              "Times a node was marked lost.");
	cnl_mb_printf(b, "cnlab_nodes_lost_total %llu\n",
	              (unsigned long long)ctl->lost_nodes);
	cnl_mb_family(b, "cnlab_fenced_reports_total", "counter",
	              "Agent reports refused or work told to stop for a "
	              "stale epoch.");
	cnl_mb_printf(b, "cnlab_fenced_reports_total %llu\n",
	              (unsigned long long)ctl->fenced);
	cnl_mb_family(b, "cnlab_scheduling_cycle_seconds", "histogram",
	              "Time of one scheduling cycle.");
	cnl_hist_write(b, "cnlab_scheduling_cycle_seconds", "",
	               &ctl->cycle_hist);
	/* Prometheus wants base units: GPU-hours are exported as 1% block-
	 * seconds (360,000 per GPU-hour), storage GB-days as byte-seconds. */
	cnl_mb_family(b, "cnlab_usage_block_seconds_total", "counter",
	              "GPU use in 1% block-seconds, by owner (project or user "
	              "id).");
	for (size_t i = 0; i < ctl->n_usage; i++)
		cnl_mb_printf(
		    b,
		    "cnlab_usage_block_seconds_total{owner=\"%s\"} "
		    "%.3f\n",
		    cnl_mb_escape(ctl->usage[i].owner, esc, sizeof(esc)),
		    ctl->usage[i].block_ms / 1000.0);
	cnl_mb_family(b, "cnlab_usage_storage_byte_seconds_total", "counter",
	              "Server storage held, in byte-seconds, by owner.");
	for (size_t i = 0; i < ctl->n_usage; i++)
		cnl_mb_printf(
		    b,
		    "cnlab_usage_storage_byte_seconds_total{owner="
		    "\"%s\"} %.0f\n",
		    cnl_mb_escape(ctl->usage[i].owner, esc, sizeof(esc)),
		    ctl->usage[i].storage_gb_ms / 1000.0 * 1e9);
}
