/*
 * ctl_run.c - run records: what the store keeps of a workload's placement
 * and history (node, allocation, fencing epoch, phase, counts, the
 * placement's explanation, a server's home), written before any change
 * is visible (persist(), persist_end()), and read back at start-up to
 * rebuild the scheduler's job and re-adopt its allocation (wl_adopt()).
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
	if (y->preferred >= 0)
		json_object_set_new(o, "preferred", json_boolean(y->preferred));
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
	y->type_allowed = y->dataset_local = y->preferred = -1;
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
	if (json_is_boolean(v = json_object_get(o, "preferred")))
		y->preferred = json_is_true(v);
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
	json_t *o =
	    json_pack("{s:s,s:I,s:i,s:i,s:b,s:I,s:I}", "phase",
	              cnl_wl_state_name(w->state), "epoch",
	              (json_int_t)w->epoch, "preemptions", w->preemptions,
	              "requeues", w->requeues, "preemptible", w->j.preemptible,
	              "cpu_milli", (json_int_t)w->j.req.cpu_milli, "mem_mib",
	              (json_int_t)w->j.req.mem_mib);
	char *t = NULL;
	int r = -CNL_ESIZE;

	if (w->node >= 0 && cnl_wl_placed(w->state)) {
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
	if (w->state == CNL_WL_STOPPING || w->state == CNL_WL_REQUEUING) {
		json_object_set_new(o, "signal_ms", json_integer(w->signal_ms));
		json_object_set_new(o, "kill_ms", json_integer(w->kill_ms));
		/* Whether it still holds its resources until it has left (a
		 * pre-empted job's went to another at once; one requeued
		 * with its gang or cancelled keeps them). */
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
	if (w->cl_want[0])
		json_object_set_new(o, "cluster", json_string(w->cl_want));
	if (w->j.req.nodes) {
		const json_t *in, *out;

		ctl_nset_lists(w->j.req.nodes, &in, &out);
		if (in)
			json_object_set(o, "nodelist", (json_t *)in);
		if (out)
			json_object_set(o, "exclude", (json_t *)out);
	}
	if (w->j.prefer) {
		const json_t *in, *out;

		ctl_nset_lists(w->j.prefer, &in, &out);
		if (in)
			json_object_set(o, "prefer", (json_t *)in);
		if (out)
			json_object_set(o, "avoid", (json_t *)out);
	}
	if (w->image[0])
		json_object_set_new(o, "image", json_string(w->image));
	if (w->gang_id[0])
		json_object_set_new(o, "gang",
		                    json_pack("{s:s,s:i,s:i}", "id", w->gang_id,
		                              "rank", w->rank, "size",
		                              w->gang_size));
	/* A resized block slice: its size now and a pending shrink. */
	if (w->resized)
		json_object_set_new(o, "resized", json_integer(w->resized));
	if (w->shrink_to && !final && w->alloc_id && cnl_wl_placed(w->state) &&
	    w->shrink_to < cnl_alloc_blocks_held(ctl->cluster, &w->placed))
		json_object_set_new(o, "shrinking_to",
		                    json_integer(w->shrink_to));
	if (w->why.node[0] && (final || w->state != CNL_WL_PENDING))
		json_object_set_new(o, "placement", why_json(&w->why));
	/* The secrets it asked for: its node fetches them at each start. */
	if (w->n_secrets > 0)
		json_object_set_new(o, "secrets", json_integer(w->n_secrets));
	/* Its trace, for the agent's spans after a restart (ctl_trace.c). */
	if (w->trace[0])
		json_object_set_new(o, "traceparent", json_string(w->trace));
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

/* Write @w's current state and run record; 0 or a store error. */
int ctl_persist(struct cnl_ctl *ctl, const struct wl *w, int64_t now)
{
	char run[CNL_STORE_RUN_MAX];
	int r;

	if ((r = run_text(ctl, w, false, run, sizeof(run))) < 0)
		return r;
	if (w->server)
		return cnl_store_server_update(ctl->store, w->id,
		                               ctl_store_state(w), w->url, run);
	r = cnl_store_job_update_run(ctl->store, w->id, ctl_store_state(w), 0,
	                             now, run);
	if (r >= 0 && ctl->cfg.changed)
		ctl->cfg.changed(ctl->cfg.changed_ud, w->id);
	return r;
}

/*
 * Write a workload's end: @w is in the state it ended in (cnl_wl_ended()),
 * and is no longer active.  @ran: it ended from a placement, whose
 * explanation the record keeps; its allocation is not kept.
 */
int ctl_persist_end(struct cnl_ctl *ctl, const struct wl *w, bool ran,
                    int exit_code, int64_t now)
{
	char run[CNL_STORE_RUN_MAX];
	int r;

	if ((r = run_text(ctl, w, ran, run, sizeof(run))) < 0)
		return r;
	if (w->server)
		return cnl_store_server_update(ctl->store, w->id,
		                               ctl_store_state(w), "", run);
	r = cnl_store_job_update_run(ctl->store, w->id, ctl_store_state(w),
	                             exit_code, now, run);
	if (r >= 0 && ctl->cfg.changed)
		ctl->cfg.changed(ctl->cfg.changed_ud, w->id);
	return r;
}

void ctl_wl_set_blocks(struct wl *w, int blocks)
{
	const char *dash = strrchr(w->shape, '-');
	char shape[CNL_SHAPE_MAX];
	int n;

	/* A block shape is "TYPE-N" or "TYPE-Npct". */
	if (dash) {
		n = snprintf(shape, sizeof(shape), "%.*s-%d",
		             (int)(dash - w->shape), w->shape, blocks);
		if (n > 0 && (size_t)n < sizeof(shape))
			snprintf(w->shape, sizeof(w->shape), "%s", shape);
	}
	w->j.req.blocks = blocks;
	w->resized = blocks;
}

/* Set up @w's scheduler job; 0 or -CNL_EFIELD for a shape gone bad. */
int ctl_wl_job(struct cnl_ctl *ctl, struct wl *w, const char *shape, int prio,
               int64_t created, int64_t deadline, int64_t runtime,
               bool preemptible)
{
	char err[256], buf[CNL_SHAPE_MAX];
	struct cnl_alloc_req req;
	int r;

	snprintf(w->shape, sizeof(w->shape), "%s", shape);
	if ((r = ctl_make_req(ctl, w->shape, &req, buf, err, sizeof(err))) < 0)
		return r;
	if (req.kind == CNL_REQ_MIG) {
		w->profile_off = (uint16_t)(req.profile - buf);
		req.profile = w->shape + w->profile_off;
	}
	req.project = ctl_team_of(ctl, w->project_id);
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
int ctl_wl_job_fields(struct cnl_ctl *ctl, struct wl *w, json_t *run, bool gang)
{
	json_t *types = json_object_get(run, "gpu_types");
	json_t *g = json_object_get(run, "gang");
	const char *ds = json_string_value(json_object_get(run, "dataset"));
	const char *img = json_string_value(json_object_get(run, "image"));
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
	/* The cluster it asked for (a submission's "cluster"). */
	const char *cl = json_string_value(json_object_get(run, "cluster"));
	if (cl && cnl_label_valid(cl) && strlen(cl) < sizeof(w->cl_want))
		snprintf(w->cl_want, sizeof(w->cl_want), "%s", cl);
	/* The nodes it may run on (a submission's "nodelist", "exclude"). */
	json_t *in = json_object_get(run, "nodelist"),
	       *out = json_object_get(run, "exclude");
	if (json_is_array(in) || json_is_array(out)) {
		int r = ctl_nset_intern(ctl, json_is_array(in) ? in : NULL,
		                        json_is_array(out) ? out : NULL,
		                        &w->j.req.nodes);
		if (r < 0)
			return r;
	}
	/* The nodes it is placed on first ("prefer", "avoid"). */
	in = json_object_get(run, "prefer");
	out = json_object_get(run, "avoid");
	if (json_is_array(in) || json_is_array(out)) {
		int r = ctl_nset_intern(ctl, json_is_array(in) ? in : NULL,
		                        json_is_array(out) ? out : NULL,
		                        &w->j.prefer);
		if (r < 0)
			return r;
	}
	if (img && strlen(img) < sizeof(w->image))
		snprintf(w->image, sizeof(w->image), "%s", img);
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
void ctl_wl_adopt(struct cnl_ctl *ctl, struct wl *w, const char *run_txt)
{
	json_t *run = json_loads(run_txt, 0, NULL);

	ctl_wl_adopt_json(ctl, w, run);
	json_decref(run);
}

void ctl_wl_adopt_json(struct cnl_ctl *ctl, struct wl *w, json_t *run)
{
	json_t *held;
	const char *node, *ph;
	enum cnl_wl_state st = CNL_WL_PENDING;
	struct cnl_alloc a = {0};
	uint32_t id;
	int n;

	if (!run)
		return;
	w->epoch = json_integer_value(json_object_get(run, "epoch"));
	n = (int)json_integer_value(json_object_get(run, "secrets"));
	w->n_secrets = n > 0 && n <= CNL_WIRE_SECRETS_MAX ? n : 0;
	{
		const char *tp =
		    json_string_value(json_object_get(run, "traceparent"));
		struct cnl_trace t;

		if (tp && cnl_trace_parse(tp, &t) == 0)
			cnl_trace_format(&t, w->trace);
	}
	/* A resize outlives a restart: the size, and a shrink pending. */
	n = (int)json_integer_value(json_object_get(run, "resized"));
	if (w->j.req.kind == CNL_REQ_BLOCKS && n >= 1 &&
	    n <= CNL_BLOCKS_PER_GPU)
		ctl_wl_set_blocks(w, n);
	w->preemptions =
	    (int)json_integer_value(json_object_get(run, "preemptions"));
	w->requeues = (int)json_integer_value(json_object_get(run, "requeues"));
	if ((node = json_string_value(json_object_get(run, "home"))))
		w->home = ctl_node_find(ctl, node);
	why_from_json(json_object_get(run, "placement"), &w->why);
	node = json_string_value(json_object_get(run, "node"));
	ph = json_string_value(json_object_get(run, "phase"));
	/* Records before wire/state.h wrote "stopping" for both stopping
	 * and requeuing work, told apart by "requeue". */
	if (ph && strcmp(ph, "stopping") == 0 &&
	    json_is_true(json_object_get(run, "requeue")))
		ph = "requeuing";
	if (!node || !ph || cnl_wl_state_parse(ph, &st) < 0 ||
	    !cnl_wl_placed(st) || (n = ctl_node_find(ctl, node)) < 0 ||
	    alloc_from_json(json_object_get(run, "alloc"), &a) < 0)
		return;
	a.node = (uint32_t)n;
	a.project = w->j.req.project;
	/* Told to stop with its resources already given to other work (a
	 * pre-empted job; records before "held" say so by "requeue"): it
	 * keeps its node until it has left, not its allocation. */
	held = json_object_get(run, "held");
	if ((st == CNL_WL_STOPPING || st == CNL_WL_REQUEUING) &&
	    (json_is_boolean(held) ? json_is_false(held)
	                           : st == CNL_WL_REQUEUING)) {
		w->alloc_id = 0;
		w->placed = a;
	} else if (cnl_alloc_adopt(ctl->cluster, &a, &id) < 0) {
		cnl_log(CNL_LOG_WARN, "cannot re-adopt allocation; requeued",
		        "id=%s node=%s", w->id, node);
		return;
	} else {
		w->alloc_id = id;
		w->placed = *cnl_alloc_get(ctl->cluster, id);
	}
	w->node = n;
	w->state = st;
	w->started_ms = json_integer_value(json_object_get(run, "started_ms"));
	w->not_before_ms =
	    json_integer_value(json_object_get(run, "not_before_ms"));
	w->signal_ms = json_integer_value(json_object_get(run, "signal_ms"));
	w->kill_ms = json_integer_value(json_object_get(run, "kill_ms"));
	n = (int)json_integer_value(json_object_get(run, "shrinking_to"));
	if (w->alloc_id && n >= 1 &&
	    n < cnl_alloc_blocks_held(ctl->cluster, &w->placed))
		w->shrink_to = n;
}
