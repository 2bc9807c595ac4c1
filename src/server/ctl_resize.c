/*
 * ctl_resize.c - in-flight resize of a block slice (PATCH /v1/jobs/{id},
 * PATCH /v1/servers/{id}, `cnlab jobs resize`, `cnlab server resize`).
 *
 * Units.  A resize names N 1% blocks of the slice's GPU (1..100): the
 * slice's compute share becomes N% and its VRAM quota N% of the GPU's
 * memory.  Only block slices on a block-mode GPU resize; a dedicated MIG
 * instance, blocks inside a MIG host instance, whole GPUs and CPU-only
 * work are refused (409) with the reason.
 *
 * The resize of a workload in each state:
 *
 *   pending            the request changes (shape "TYPE-N"); nothing else
 *   placed, growing    the allocator grows the slice in place on its GPU
 *                      (cnl_alloc_resize) at once, or 409 naming the GPU's
 *                      free blocks; the agent raises the region's quota
 *                      and share when its assignment poll returns
 *   placed, shrinking  the target is marked (wl.shrink_to); the agent is
 *                      told the smaller size and lowers the region's quota
 *                      and share at once (new allocations above it are
 *                      refused); the blocks stay held by the slice until a
 *                      heartbeat reports the region's quota at or below the
 *                      target and its use at or below it too, then they
 *                      are released (ctl_resize_usage) and the scheduler
 *                      may place other work there
 *   stopping           409
 *
 *          PATCH (N < held)               heartbeat: quota <= target and
 *   held ─────────────────────▶ shrinking ───────────────────────────▶ held
 *    ▲ │  PATCH (N > held): grow    │  PATCH (N >= held): cancel,      (N)
 *    └─┘  in place or 409           └──▶ back to held (or grow) ──────▶
 *
 * Every accepted resize is written in the run record ("resized": N,
 * "shrinking_to": N) before the agent can see it, so a restarted cnlabd
 * carries on, and in the audit log: the API's row ("job.resize",
 * "server.resize") and the release of a shrink ("sched.resize").
 *
 * Shrink instead of pre-empt (ctl_resize_admit, before each cycle): a
 * pending block request that fits nowhere may get room from a running
 * preemptible block slice of lower priority on a GPU where shrinking it
 * makes room, to the largest size that lets the request fit and never
 * below the VRAM use its node last reported (a what-if on the real
 * allocator: shrink, plan, then free and restore the very blocks).  The
 * shrink then goes as above; the request stays out of the cycles
 * meanwhile (wl.admit_by), so that nothing is pre-empted for it, and
 * starts once the blocks are released.  A slice whose use does not fall
 * within ADMIT_WAIT_MS gets its size back and the request is scheduled
 * as any other.  Audited as the slice's "sched.preempt".  Not kept across
 * a restart of cnlabd (the shrink is, the link to the request is not).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/log.h"
#include "common/util.h"
#include "sched/sched.h"
#include "server/ctl-internal.h"

static int set_err(char *err, size_t errlen, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int set_err(char *err, size_t errlen, int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return status;
}

int64_t ctl_resize_vram_mib(const struct cnl_ctl *ctl, const struct wl *w,
                            int blocks)
{
	const struct cnl_cluster *c = ctl->cluster;
	const struct cnl_node *n = &c->nodes[w->placed.node];

	return (int64_t)(c->cat->types[n->gpu_type].vram_mib *
	                 (uint64_t)blocks / CNL_BLOCKS_PER_GPU);
}

int ctl_resize_pending(const struct cnl_ctl *ctl, const struct wl *w)
{
	/* A shrink outlives nothing: once its allocation is gone (requeued,
	 * pre-empted, stopping) or no larger than the target, none. */
	if (!w->shrink_to || !w->alloc_id || !cnl_wl_placed(w->state) ||
	    w->shrink_to >= cnl_alloc_blocks_held(ctl->cluster, &w->placed))
		return 0;
	return w->shrink_to;
}

/* Why a placed @w cannot resize, or NULL. */
static const char *not_resizable(const struct wl *w)
{
	if (w->j.req.kind == CNL_REQ_CPU)
		return "it has no GPU slice";
	if (w->j.req.kind == CNL_REQ_WHOLE)
		return "it holds whole GPUs; only block slices resize";
	if (w->j.req.kind == CNL_REQ_MIG ||
	    (cnl_wl_placed(w->state) && w->placed.kind == CNL_PLACE_MIG))
		return "it holds a dedicated MIG instance; only block slices "
		       "resize";
	if (cnl_wl_placed(w->state) && w->placed.kind == CNL_PLACE_MIG_BLOCKS)
		return "its blocks are inside a MIG instance; only block "
		       "slices of a block-mode GPU resize";
	return NULL;
}

/* Persist @w; on failure put back what @saved held. */
static int commit(struct cnl_ctl *ctl, struct wl *w, const struct wl *saved,
                  int64_t now, char *err, size_t errlen)
{
	int r = ctl_persist(ctl, w, now);

	if (r < 0) {
		*w = *saved;
		return set_err(err, errlen, 500, "cannot store the resize: %s",
		               cnl_strerror(r));
	}
	ctl_facts_touch(ctl, w);
	return 200;
}

int cnl_ctl_resize(struct cnl_ctl *ctl, const char *id, int blocks, int64_t now,
                   char *err, size_t errlen)
{
	struct wl *w = ctl_wl_find(ctl, id);
	struct wl saved;
	const char *why;
	int held, r;

	if (!w)
		return set_err(err, errlen, 409,
		               "it is not running or pending");
	if (blocks < 1 || blocks > CNL_BLOCKS_PER_GPU)
		return set_err(
		    err, errlen, 400,
		    "field \"blocks\": must be an integer in 1..100");
	if ((why = not_resizable(w)))
		return set_err(err, errlen, 409, "cannot resize: %s", why);
	saved = *w;
	if (w->state == CNL_WL_PENDING) {
		ctl_wl_set_blocks(w, blocks);
		w->shrink_to = 0;
		if ((r = commit(ctl, w, &saved, now, err, errlen)) != 200)
			return r;
		ctl->dirty = true;
		cnl_ctl_kick(ctl);
		return 200;
	}
	if (!w->alloc_id || w->state == CNL_WL_STOPPING ||
	    w->state == CNL_WL_REQUEUING || w->node < 0)
		return set_err(err, errlen, 409, "cannot resize: it is %s",
		               cnl_wl_state_name(w->state));
	/* A pod's slice is its ResourceClaim's allocation, which the kubelet
	 * prepared once: nothing on the node would apply a new size. */
	const char *cl = json_string_value(
	    json_object_get(ctl->nodes[w->node].inventory, "cluster"));
	if (cl && strcmp(cl, CNL_WIRE_KUBE_CLUSTER) == 0)
		return set_err(err, errlen, 409,
		               "cannot resize: it runs in a Kubernetes pod on "
		               "node %s, whose claim keeps the size it was "
		               "given",
		               ctl->nodes[w->node].name);
	held = cnl_alloc_blocks_held(ctl->cluster, &w->placed);
	if (blocks > held) {
		const struct cnl_alloc *a;

		r = cnl_alloc_resize(ctl->cluster, w->alloc_id, blocks);
		if (r == -CNL_ENOSPACE)
			return set_err(
			    err, errlen, 409,
			    "GPU %d of node %s has %d free blocks; growing "
			    "from %d to %d needs %d",
			    w->placed.gpu, ctl->nodes[w->node].name,
			    cnl_gpu_free_blocks(ctl->cluster, w->placed.node,
			                        w->placed.gpu),
			    held, blocks, blocks - held);
		if (r == -CNL_ETENANT)
			return set_err(
			    err, errlen, 409,
			    "GPU %d of node %s is shared with other projects; "
			    "a slice above %d blocks needs a GPU of its own "
			    "project",
			    w->placed.gpu, ctl->nodes[w->node].name,
			    CNL_SMALL_BLOCKS_MAX);
		if (r < 0)
			return set_err(err, errlen, 409, "cannot resize: %s",
			               cnl_strerror(r));
		a = cnl_alloc_get(ctl->cluster, w->alloc_id);
		w->placed = *a;
		w->shrink_to = 0;
		ctl_wl_set_blocks(w, blocks);
		if ((r = ctl_persist(ctl, w, now)) < 0) {
			/* Give the blocks back: not recorded, not promised. */
			cnl_alloc_resize(ctl->cluster, w->alloc_id, held);
			*w = saved;
			w->placed = *cnl_alloc_get(ctl->cluster, w->alloc_id);
			return set_err(err, errlen, 500,
			               "cannot store the resize: %s",
			               cnl_strerror(r));
		}
	} else {
		/* Shrinking (or back to the size held: a pending shrink
		 * cancelled).  The blocks stay held until the slice's use
		 * fits the new size. */
		w->shrink_to = blocks < held ? blocks : 0;
		ctl_wl_set_blocks(w, blocks);
		if ((r = commit(ctl, w, &saved, now, err, errlen)) != 200)
			return r;
	}
	w->admits[0] = '\0'; /* the owner's word now, not the scheduler's */
	cnl_log(CNL_LOG_INFO, "slice resized", "id=%s from=%d to=%d pending=%s",
	        w->id, held, blocks, w->shrink_to ? "shrink" : "no");
	ctl_node_changed(ctl, w->node);
	ctl_facts_touch(ctl, w);
	return 200;
}

void ctl_resize_usage(struct cnl_ctl *ctl, struct wl *w,
                      const struct cnl_wire_running *it, int64_t now)
{
	int64_t target;
	int held = 0, to = ctl_resize_pending(ctl, w);
	struct wl saved;
	int r;

	w->vram_used = it->vram_used;
	if (!to || !it->has_vram_used || !it->has_vram_quota || !w->alloc_id)
		return;
	target = ctl_resize_vram_mib(ctl, w, to) << 20;
	/* The agent has lowered the quota (nothing new above the target
	 * can be allocated) and what is held fits: release. */
	if (it->vram_quota == 0 || it->vram_quota > target ||
	    it->vram_used > target)
		return;
	saved = *w;
	held = cnl_alloc_blocks_held(ctl->cluster, &w->placed);
	if ((r = cnl_alloc_resize(ctl->cluster, w->alloc_id, to)) < 0) {
		cnl_log(CNL_LOG_ERROR, "cannot release a shrunk slice's blocks",
		        "id=%s to=%d err=%s", w->id, to, cnl_errname(r));
		return;
	}
	w->placed = *cnl_alloc_get(ctl->cluster, w->alloc_id);
	w->shrink_to = 0;
	w->admits[0] = '\0';
	if ((r = ctl_persist(ctl, w, now)) < 0) {
		cnl_alloc_resize(ctl->cluster, w->alloc_id, held);
		*w = saved;
		w->placed = *cnl_alloc_get(ctl->cluster, w->alloc_id);
		return;
	}
	/* In the audit log as the scheduler's decision (ctl_decide()'s
	 * form; ctl_node.c, which calls this, stands below ctl_loop.c). */
	{
		struct cnl_store_audit au = {0};

		au.ts_ms = now;
		snprintf(au.actor, sizeof(au.actor), "scheduler");
		snprintf(au.action, sizeof(au.action), "sched.resize");
		snprintf(au.target, sizeof(au.target), "%s", w->id);
		snprintf(au.result, sizeof(au.result),
		         "shrunk from %d to %d blocks: VRAM in use %" PRId64
		         " MiB fits the new quota of %" PRId64
		         " MiB; %d blocks released",
		         held, to, it->vram_used >> 20, target >> 20,
		         held - to);
		if ((r = cnl_store_audit_append(ctl->store, &au, NULL)) < 0)
			cnl_log(CNL_LOG_ERROR, "cannot audit a resize",
			        "id=%s err=%s", w->id, cnl_errname(r));
	}
	cnl_log(CNL_LOG_INFO, "slice shrunk", "id=%s from=%d to=%d", w->id,
	        held, to);
	ctl_facts_touch(ctl, w);
	ctl->dirty = true;
	cnl_ctl_kick(ctl);
}

/* ---- shrinking instead of pre-empting ------------------------------------ */

/* The size @v could shrink to for @p to fit on its node: the largest
 * below what it holds, not below its use (@min); 0 when none.  Leaves the
 * cluster exactly as it was. */
static int admit_size(struct cnl_ctl *ctl, const struct wl *v,
                      const struct cnl_req_prep *p, int min)
{
	struct cnl_cluster *c = ctl->cluster;
	struct cnl_alloc saved = *cnl_alloc_get(c, v->alloc_id);
	int held = cnl_alloc_blocks_held(c, &saved), t, fit = 0;
	struct cnl_plan pl;

	for (t = held - 1; t >= min && t >= 1 && !fit; t--)
		if (cnl_alloc_resize(c, v->alloc_id, t) == 0 &&
		    cnl_alloc_plan_node(c, p, saved.node, &pl) == 0)
			fit = t;
	/* Back to the very blocks it held. */
	if (cnl_alloc_free(c, v->alloc_id) < 0 ||
	    cnl_alloc_restore(c, &saved) < 0)
		cnl_log(CNL_LOG_ERROR, "cannot restore a slice after a what-if",
		        "id=%s", v->id);
	return fit;
}

/* Whether @v may be shrunk for @j: a running preemptible block slice of
 * lower priority, with a use reported and no shrink pending. */
static bool may_shrink_for(const struct cnl_ctl *ctl, const struct wl *v,
                           const struct wl *j)
{
	return v != j && v->alloc_id && v->node >= 0 &&
	       v->state == CNL_WL_STARTED && v->j.preemptible &&
	       v->j.prio < j->j.prio && v->placed.kind == CNL_PLACE_BLOCKS &&
	       v->vram_used >= 0 && !ctl_resize_pending(ctl, v) &&
	       !v->admits[0];
}

/* How long a shrink to admit work may wait for the slice's use to fit
 * before it is given up (the slice's size back, the work scheduled as
 * any other, pre-emption included). */
#define ADMIT_WAIT_MS (2 * 60 * 1000)

/* Give up the shrinks to admit work that waited too long. */
static void admit_expire(struct cnl_ctl *ctl, int64_t now)
{
	for (size_t k = 0; k < ctl->n_wl; k++) {
		struct wl *v = &ctl->wl[k], *j;

		if (!v->admits[0] || now - v->admit_ms < ADMIT_WAIT_MS)
			continue;
		if ((j = ctl_wl_find(ctl, v->admits)))
			j->admit_by[0] = '\0';
		v->admits[0] = '\0';
		if (ctl_resize_pending(ctl, v)) {
			v->shrink_to = 0;
			ctl_persist(ctl, v, now);
			ctl_node_changed(ctl, v->node);
			cnl_log(CNL_LOG_INFO,
			        "shrink to admit work given up; its use did "
			        "not fall",
			        "id=%s", v->id);
		}
	}
}

/* Whether any running slice could be shrunk for some pending work. */
static bool any_candidate(const struct cnl_ctl *ctl)
{
	for (size_t k = 0; k < ctl->n_wl; k++) {
		const struct wl *v = &ctl->wl[k];

		if (v->alloc_id && v->state == CNL_WL_STARTED &&
		    v->j.preemptible && v->placed.kind == CNL_PLACE_BLOCKS &&
		    v->vram_used >= 0 && !v->admits[0])
			return true;
	}
	return false;
}

void ctl_resize_admit(struct cnl_ctl *ctl, int64_t now)
{
	struct cnl_cluster *c = ctl->cluster;

	admit_expire(ctl, now);
	if (!any_candidate(ctl))
		return;
	for (size_t i = 0; i < ctl->n_wl; i++) {
		struct wl *j = &ctl->wl[i];
		struct cnl_req_prep p;
		struct cnl_plan pl;

		if (j->state != CNL_WL_PENDING || j->admit_by[0] ||
		    j->j.req.kind != CNL_REQ_BLOCKS || j->j.gang ||
		    j->not_before_ms > now ||
		    cnl_alloc_prepare(c, &j->j.req, &p) < 0 ||
		    cnl_alloc_plan(c, &p, &pl) == 0)
			continue; /* not a block request, or it fits now */
		for (size_t k = 0; k < ctl->n_wl; k++) {
			struct wl *v = &ctl->wl[k];
			const struct cnl_node *n;
			int64_t per_block;
			int min, held, to;

			if (!may_shrink_for(ctl, v, j) ||
			    !cnl_req_node_ok(&p.req, (uint32_t)v->placed.node))
				continue; /* not on a node it may use */
			n = &c->nodes[v->placed.node];
			if (n->state != CNL_NODE_UP)
				continue;
			/* Not below its use: one block is 1% of the VRAM. */
			per_block =
			    (int64_t)(c->cat->types[n->gpu_type].vram_mib
			              << 20) /
			    CNL_BLOCKS_PER_GPU;
			if (per_block <= 0)
				continue;
			min = (int)((v->vram_used + per_block - 1) / per_block);
			min = min < 1 ? 1 : min;
			held = cnl_alloc_blocks_held(c, &v->placed);
			if (min >= held || !(to = admit_size(ctl, v, &p, min)))
				continue;
			v->shrink_to = to;
			v->admit_ms = now;
			snprintf(v->admits, sizeof(v->admits), "%s", j->id);
			if (ctl_persist(ctl, v, now) < 0) {
				v->shrink_to = 0;
				v->admits[0] = '\0';
				continue;
			}
			snprintf(j->admit_by, sizeof(j->admit_by), "%s", v->id);
			{
				struct cnl_store_audit au = {0};

				au.ts_ms = now;
				snprintf(au.actor, sizeof(au.actor),
				         "scheduler");
				snprintf(au.action, sizeof(au.action),
				         "sched.preempt");
				snprintf(au.target, sizeof(au.target), "%s",
				         v->id);
				/* The other's id is in the log's target of its
				 * own records; here, as much as fits. */
				int w0 = snprintf(
				    au.result, sizeof(au.result),
				    "shrinking from %d to %d blocks (its VRAM "
				    "use, %" PRId64 " MiB, fits) to admit ",
				    held, to, v->vram_used >> 20);
				if (w0 > 0 && (size_t)w0 < sizeof(au.result))
					memcpy(
					    au.result + w0, j->id,
					    strnlen(j->id, sizeof(au.result) -
					                       (size_t)w0 - 1));
				cnl_store_audit_append(ctl->store, &au, NULL);
			}
			cnl_log(CNL_LOG_INFO,
			        "shrinking a preemptible slice to admit work",
			        "id=%s from=%d to=%d for=%s", v->id, held, to,
			        j->id);
			ctl_node_changed(ctl, v->node);
			break;
		}
	}
}
