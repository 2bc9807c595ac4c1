/*
 * resize.c - in-flight resize of a running block slice, the agent's half
 * (cnlabd's is server/ctl_resize.c).
 *
 * cnlabd tells a resize through the assignment itself: the slice's
 * "blocks" and "vram_mib" of a workload already running change (a shrink
 * is sent at its target size at once, while cnlabd keeps its blocks).  On
 * each assignment poll, cnl_agent_resize_apply() compares them with what
 * it last applied and writes the new limits into the live region: one
 * atomic store each (cnl_region_set_quota, cnl_region_set_share), seen by
 * the next allocation and launch of every process of the slice; memory
 * already allocated stays (a shrink below it only refuses new
 * allocations).  Each heartbeat then carries the region's quota and use
 * (cnl_agent_slice_usage), from which cnlabd releases a shrink's blocks
 * once the use fits.  The first size seen after a start (or an agent
 * restart) is the one the region was made with; writing it again is
 * harmless, except for a whole GPU's region, made without a quota, which
 * is left so.
 *
 * Only block slices of one block-mode GPU resize (cnlabd refuses the
 * others): MIG slices and whole GPUs are left alone here too.  This file
 * calls only wk.c and the region's API (map, set_quota, set_share, stat,
 * unmap); the region is never read under the agent's lock.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "agent/agent-internal.h"
#include "common/log.h"
#include "shim/region.h"

void cnl_agent_resize_apply(struct cnl_agent *a,
                            const struct cnl_wire_assignment *as)
{
	const struct cnl_wire_slice *g = &as->gpu;
	struct cnl_region_handle h;
	char region[sizeof(((struct wk *)0)->region)];
	struct wk *w;
	bool first;
	int r;

	if (as->action != CNL_WIRE_RUN || g->mig_profile[0] || g->blocks < 1 ||
	    g->blocks > 100 || __builtin_popcount(g->gpu_mask) != 1)
		return;
	pthread_mutex_lock(&a->mu);
	w = cnl_agent_wk_find(a, as->id);
	if (!w || w->epoch != as->epoch || w->gpu < 0 || w->gone ||
	    w->stopping || w->ended ||
	    (w->applied_blocks == g->blocks &&
	     w->applied_vram_mib == g->vram_mib)) {
		pthread_mutex_unlock(&a->mu);
		return;
	}
	snprintf(region, sizeof(region), "%s", w->region);
	first = w->applied_blocks == 0;
	pthread_mutex_unlock(&a->mu);
	/* First seen at 100 blocks: a whole GPU (or a slice of all its
	 * blocks), whose region was made without a quota; nothing to write
	 * until it changes. */
	if (!(first && g->blocks >= 100)) {
		if ((r = cnl_region_map(region, &h)) < 0) {
			cnl_log(CNL_LOG_WARN,
			        "cannot resize: region not mapped",
			        "id=%s region=%s err=%d", as->id, region, r);
			return;
		}
		if ((r = cnl_region_set_quota(h.r, (uint64_t)g->vram_mib
		                                       << 20)) == 0)
			r = cnl_region_set_share(h.r, (unsigned)g->blocks);
		cnl_region_unmap(&h);
		if (r < 0) {
			cnl_log(CNL_LOG_WARN,
			        "cannot resize the slice's region",
			        "id=%s err=%d", as->id, r);
			return;
		}
		if (!first)
			cnl_log(CNL_LOG_INFO, "slice resized",
			        "id=%s blocks=%d vram_mib=%" PRId64, as->id,
			        g->blocks, g->vram_mib);
	}
	pthread_mutex_lock(&a->mu);
	w = cnl_agent_wk_find(a, as->id);
	if (w && w->epoch == as->epoch) {
		int64_t q = g->vram_mib << 20;

		w->applied_blocks = g->blocks;
		w->applied_vram_mib = g->vram_mib;
		/* What the GPU memory audit holds the slice to: a grow at
		 * once, a shrink once the use is within it (gpu_audit.c). */
		if (!(first && g->blocks >= 100)) {
			if (w->vram_bytes < 0 || q < w->vram_bytes) {
				w->vram_shrink_to = q;
			} else {
				w->vram_bytes = q;
				w->vram_shrink_to = -1;
			}
		}
	}
	pthread_mutex_unlock(&a->mu);
}

int cnl_agent_slice_usage(const char *region, struct cnl_wire_running *ret,
                          uint64_t *ret_busy_ns)
{
	struct cnl_region_handle h;
	struct cnl_region_stat st;
	int r = -1;

	if (!region[0] || cnl_region_map(region, &h) < 0)
		return -1;
	if (cnl_region_stat(h.r, &st) == 0) {
		uint64_t busy = 0;

		ret->has_vram_used = ret->has_vram_quota = true;
		ret->vram_used = (int64_t)st.used;
		ret->vram_quota = (int64_t)st.quota;
		for (unsigned p = 0; p < st.nprocs; p++)
			busy += st.procs[p].busy_ns;
		*ret_busy_ns = busy;
		r = 0;
	}
	cnl_region_unmap(&h);
	return r;
}
