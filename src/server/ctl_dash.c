/*
 * ctl_dash.c - the controller's side of the dashboard's snapshot
 * (cnl_ctl_dashboard_json(), ctl.h): its nodes, GPUs and slices, its
 * pending, running and server work, and each project's use, as one JSON
 * object made under the API's lock, with projects and users by id.
 *
 * The API (api_dashboard.c) calls it once per change of what it shows,
 * never per dashboard: it names the ids, filters per viewer and shares
 * the text between every open dashboard.
 *
 * What it reads and nothing more: the registry (ctl->wl), the nodes and
 * the allocator's cluster, and, for a pending workload's reason and
 * estimate, the facts index as last published (cnl_ctl_facts_status(): no
 * status is computed here, which would scan every workload for each).
 * Figures the controller does not have are null: a GPU's utilisation
 * before its node's first heartbeat that reports it (protocol 7; an
 * older agent or a driver that cannot tell never does), a slice's VRAM
 * use before its node's first heartbeat that lists it, a slice's
 * compute use before two heartbeats measured it (protocol 7: the shim's
 * ledger of its kernels' GPU time, not a driver's figure).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/util.h"
#include "server/ctl-internal.h"

/* The contract's node states (docs/dashboard.md). */
static const char *node_state(const struct node *n)
{
	switch (n->state) {
	case N_UP:
		return "ready";
	case N_CORDONED:
	case N_DRAINING:
		return "draining";
	default:
		return "down";
	}
}

static const char *prio_name(int p)
{
	static const char *const names[] = {"low", "normal", "high",
	                                    "critical"};

	return p >= 0 && p < 4 ? names[p] : "normal";
}

static json_t *mib_or_null(int64_t bytes)
{
	return bytes >= 0 ? json_integer(bytes >> 20) : json_null();
}

/* The first set bit of @m (128 bits) and how many are set. */
static void mask_span(const uint64_t m[2], int *ret_start, int *ret_n)
{
	int start = -1, n = 0;

	for (int b = 0; b < 128; b++)
		if (m[b / 64] >> (b % 64) & 1) {
			if (start < 0)
				start = b;
			n++;
		}
	*ret_start = start < 0 ? 0 : start;
	*ret_n = n;
}

/* One slice of @w on GPU @g of its node, or NULL when it has none. */
static json_t *slice_json(struct cnl_ctl *ctl, const struct wl *w, int g,
                          const struct cnl_gpu_type *t)
{
	const struct cnl_alloc *a = &w->placed;
	json_t *o;
	int start = 0, n = 0;

	switch (a->kind) {
	case CNL_PLACE_BLOCKS:
	case CNL_PLACE_MIG:
	case CNL_PLACE_MIG_BLOCKS:
		if (a->gpu != g)
			return NULL;
		break;
	case CNL_PLACE_WHOLE:
		if (!(a->gpu_mask >> g & 1))
			return NULL;
		break;
	default:
		return NULL;
	}
	o = json_pack("{s:s,s:s,s:s,s:s}", "kind", w->server ? "server" : "job",
	              "id", w->id, "project_id", w->project_id, "user_id",
	              w->user_id);
	if (a->kind == CNL_PLACE_BLOCKS || a->kind == CNL_PLACE_WHOLE) {
		if (a->kind == CNL_PLACE_BLOCKS)
			mask_span(a->mask, &start, &n);
		else
			n = CNL_BLOCKS_PER_GPU;
		json_object_set_new(o, "start", json_integer(start));
		json_object_set_new(o, "blocks", json_integer(n));
		json_object_set_new(
		    o, "vram_mib",
		    json_integer((json_int_t)(t ? t->vram_mib : 0) * n /
		                 CNL_BLOCKS_PER_GPU));
	} else {
		const struct cnl_mig_profile *p =
		    t && a->profile < t->n_mig ? &t->mig[a->profile] : NULL;

		json_object_set_new(o, "mig_profile",
		                    p ? json_string(p->name) : json_null());
		/* The instance's start slot: NVML's GI id is the agent's. */
		json_object_set_new(o, "mig_start", json_integer(a->start));
		json_object_set_new(o, "gi", json_null());
		if (a->kind == CNL_PLACE_MIG_BLOCKS) {
			mask_span(a->mask, &start, &n);
			json_object_set_new(o, "blocks", json_integer(n));
		}
		json_object_set_new(o, "vram_mib",
		                    p ? json_integer((json_int_t)p->mem_mib)
		                      : json_null());
	}
	json_object_set_new(o, "vram_used_mib", mib_or_null(w->vram_used));
	json_object_set_new(o, "util_pct",
	                    w->util_pct >= 0 ? json_integer(w->util_pct)
	                                     : json_null());
	return o;
}

static json_t *gpus_json(struct cnl_ctl *ctl, size_t i, int **slot_of)
{
	const struct node *n = &ctl->nodes[i];
	const struct cnl_node *cn = &ctl->cluster->nodes[i];
	const struct cnl_gpu_type *t =
	    cn->n_gpus && cn->gpu_type >= 0 && cn->gpu_type < ctl->cfg.cat->n
	        ? &ctl->cfg.cat->types[cn->gpu_type]
	        : NULL;
	json_t *devs = json_object_get(n->inventory, "devices");
	json_t *gpus = json_array();

	(void)slot_of;
	for (int g = 0; g < cn->n_gpus; g++) {
		const char *uuid = NULL;
		json_t *slices = json_array(), *o;
		int64_t used = 0;
		bool known = false;

		for (size_t k = 0; k < json_array_size(devs); k++) {
			json_t *d = json_array_get(devs, k);

			if (json_integer_value(json_object_get(d, "index")) ==
			    g)
				uuid = json_string_value(
				    json_object_get(d, "uuid"));
		}
		for (size_t k = 0; k < ctl->n_wl; k++) {
			const struct wl *w = &ctl->wl[k];
			json_t *s;

			if (w->node != (int)i || !w->alloc_id ||
			    !cnl_wl_placed(w->state))
				continue;
			if (!(s = slice_json(ctl, w, g, t)))
				continue;
			if (w->vram_used >= 0) {
				used += w->vram_used;
				known = true;
			}
			json_array_append_new(slices, s);
		}
		/* The driver's figure when the node reports it (protocol
		 * 7), else the slices' own sum. */
		if (n->use_known && g < CNL_WIRE_GPUS_MAX &&
		    n->mem_used[g] >= 0) {
			used = n->mem_used[g];
			known = true;
		}
		o = json_pack(
		    "{s:i,s:s?,s:s?,s:s,s:I,s:o,s:o,s:i,s:o}", "index", g,
		    "uuid", uuid, "model", t ? t->name : NULL, "mode",
		    cn->gpus[g].mode == CNL_GPU_MIG ? "mig" : "blocks",
		    "vram_mib", (json_int_t)(t ? t->vram_mib : 0),
		    "vram_used_mib",
		    known ? json_integer(used >> 20) : json_null(), "util_pct",
		    n->use_known && g < CNL_WIRE_GPUS_MAX && n->util_pct[g] >= 0
		        ? json_integer(n->util_pct[g])
		        : json_null(),
		    "free_blocks",
		    cnl_gpu_free_blocks(ctl->cluster, (uint32_t)i, g), "slices",
		    slices);
		json_array_append_new(gpus, o);
	}
	return gpus;
}

json_t *cnl_ctl_dashboard_json(struct cnl_ctl *ctl, int64_t now)
{
	json_t *nodes = json_array(), *pending = json_array();
	json_t *running = json_array(), *servers = json_array();
	json_t *counts = json_object(), *usage = json_object();
	int pend[4] = {0};

	(void)now;
	for (size_t i = 0; i < ctl->n_nodes; i++) {
		const struct node *n = &ctl->nodes[i];
		const char *cl =
		    json_string_value(json_object_get(n->inventory, "cluster"));

		json_array_append_new(
		    nodes, json_pack("{s:s,s:s,s:s,s:s,s:o}", "name", n->name,
		                     "state", node_state(n), "state_detail",
		                     ctl_nstate_names[n->state], "cluster",
		                     cl && cl[0] ? cl : "default", "gpus",
		                     gpus_json(ctl, i, NULL)));
	}
	for (size_t k = 0; k < ctl->n_wl; k++) {
		const struct wl *w = &ctl->wl[k];
		const char *state = ctl_store_state(w);
		bool placed = w->node >= 0 && cnl_wl_placed(w->state);
		json_t *o;

		if (w->server)
			json_array_append_new(
			    servers,
			    json_pack("{s:s,s:s,s:s,s:s,s:s,s:s?,s:b}", "id",
			              w->id, "project_id", w->project_id,
			              "user_id", w->user_id, "state", state,
			              "gpu", w->shape, "url",
			              w->url[0] ? w->url : NULL, "server", 1));
		if (placed) {
			int blocks = w->alloc_id ? cnl_alloc_blocks_held(
			                               ctl->cluster, &w->placed)
			                         : 0;
			json_t *u = json_object_get(usage, w->project_id);

			json_object_set_new(
			    usage, w->project_id,
			    json_real(json_real_value(u) +
			              (double)blocks / CNL_BLOCKS_PER_GPU));
			o = json_pack(
			    "{s:s,s:s,s:s,s:s,s:s,s:s,s:o,s:b}", "id", w->id,
			    "project_id", w->project_id, "user_id", w->user_id,
			    "priority", prio_name(w->j.prio), "gpu", w->shape,
			    "node", ctl->nodes[w->node].name, "started_at",
			    ctl_time_or_null(w->started_ms), "server",
			    w->server);
			/* For the users' use; dropped from the snapshot. */
			json_object_set_new(o, "_blocks", json_integer(blocks));
			json_array_append_new(running, o);
		} else if (w->state == CNL_WL_PENDING) {
			struct cnl_wire_status st;
			bool have = cnl_ctl_facts_status(ctl, w->id, &st) == 0;

			if (w->j.prio < 4)
				pend[w->j.prio]++;
			o = json_pack(
			    "{s:s,s:s,s:s,s:s,s:s,s:s?,s:o,s:o,s:b,s:i}", "id",
			    w->id, "project_id", w->project_id, "user_id",
			    w->user_id, "priority", prio_name(w->j.prio), "gpu",
			    w->shape, "reason",
			    have && st.reason[0] ? st.reason : NULL,
			    "estimated_start",
			    ctl_time_or_null(have ? st.estimated_start_ms : 0),
			    "submitted_at", ctl_time_or_null(w->j.submit_ms),
			    "server", w->server, "_prio", (int)w->j.prio);
			json_array_append_new(pending, o);
		}
	}
	for (int p = 0; p < 4; p++)
		json_object_set_new(counts, prio_name(p),
		                    json_integer(pend[p]));
	return json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}", "nodes", nodes, "pending",
	                 pending, "running", running, "servers", servers,
	                 "pending_counts", counts, "gpu_used", usage);
}

uint64_t cnl_ctl_dashboard_nodes_fp(struct cnl_ctl *ctl)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < ctl->n_nodes; i++) {
		h = (h ^ ctl->nodes[i].state) * 1099511628211ULL;
		h = (h ^ cnl_hash_str(ctl->nodes[i].name)) * 1099511628211ULL;
	}
	return (h ^ ctl->n_nodes) * 1099511628211ULL;
}
