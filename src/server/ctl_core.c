/*
 * ctl_core.c - the controller's lowest layer, which its other files stand
 * on: a workload's steps through the state machine (ctl_step()), lookups
 * of workloads, nodes, teams and usage, the scheduler's jobs array built
 * from the active workloads, start-time history, and the loop's wake-up.
 * It calls nothing in the controller's other files (ctl-internal.h gives
 * the layering).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

const char *const ctl_nstate_names[] = {"up", "cordoned", "draining", "lost"};
const char *const ctl_power_names[] = {"on", "off", "powering-on"};

enum cnl_wl_kind ctl_kind(const struct wl *w)
{
	return w->server ? CNL_WL_SERVER : CNL_WL_JOB;
}

int ctl_step(struct wl *w, enum cnl_wl_event event)
{
	enum cnl_wl_state next;
	char why[160];
	int r = cnl_wl_next(ctl_kind(w), w->state, event, &next);

	if (r < 0) {
		cnl_wl_explain(ctl_kind(w), w->state, event, why, sizeof(why));
		cnl_log(CNL_LOG_ERROR, "illegal state transition refused",
		        "id=%s why=\"%s\"", w->id, why);
		return r;
	}
	w->state = next;
	return 0;
}

const char *ctl_store_state(const struct wl *w)
{
	return cnl_wl_store_state(ctl_kind(w), w->state);
}

int64_t ctl_now_ms(void)
{
	return cnl_time_now_ms();
}

json_t *ctl_time_or_null(int64_t ms)
{
	char buf[CNL_TIME_RFC3339_MAX];

	if (ms <= 0 || cnl_time_format_rfc3339(ms, buf, sizeof(buf)) < 0)
		return json_null();
	return json_string(buf);
}

uint32_t ctl_team_of(struct cnl_ctl *ctl, const char *project_id)
{
	for (size_t i = 0; i < ctl->n_teams; i++)
		if (strcmp(ctl->teams[i], project_id) == 0)
			return (uint32_t)i;
	ctl->teams =
	    cnl_xrealloc(ctl->teams, (ctl->n_teams + 1) * sizeof(*ctl->teams));
	snprintf(ctl->teams[ctl->n_teams], CNL_ID_MAX, "%s", project_id);
	return (uint32_t)ctl->n_teams++;
}

/* ---- the undo journal's notes (replayed by ctl_undo.c) ----------------- */

static struct ctl_undo_rec *note(struct cnl_ctl *ctl, int kind)
{
	struct ctl_journal *j = &ctl->journal;

	if (j->n == j->cap) {
		j->cap = j->cap ? 2 * j->cap : 4;
		j->rec = cnl_xrealloc(j->rec, j->cap * sizeof(*j->rec));
	}
	j->rec[j->n].kind = kind;
	return &j->rec[j->n++];
}

void ctl_undo_added(struct cnl_ctl *ctl, const struct wl *w)
{
	if (ctl->journal.open)
		snprintf(note(ctl, CTL_UNDO_ADDED)->v.id, CNL_ID_MAX, "%s",
		         w->id);
}

void ctl_undo_save(struct cnl_ctl *ctl, const struct wl *w)
{
	if (ctl->journal.open)
		note(ctl, CTL_UNDO_SAVED)->v.w = *w;
}

void ctl_undo_usage(struct cnl_ctl *ctl, const struct usage *u)
{
	if (ctl->journal.open)
		note(ctl, CTL_UNDO_USAGE)->v.u = *u;
}

struct usage *ctl_usage_of(struct cnl_ctl *ctl, const char *owner)
{
	for (size_t i = 0; i < ctl->n_usage; i++)
		if (strcmp(ctl->usage[i].owner, owner) == 0) {
			ctl_undo_usage(ctl, &ctl->usage[i]);
			return &ctl->usage[i];
		}
	if (ctl->n_usage == ctl->cap_usage) {
		ctl->cap_usage = ctl->cap_usage ? 2 * ctl->cap_usage : 16;
		ctl->usage = cnl_xrealloc(ctl->usage,
		                          ctl->cap_usage * sizeof(*ctl->usage));
	}
	struct usage *u = &ctl->usage[ctl->n_usage++];
	memset(u, 0, sizeof(*u));
	snprintf(u->owner, sizeof(u->owner), "%s", owner);
	ctl_undo_usage(ctl, u);
	return u;
}

/* ---- the index of workloads by id ---------------------------------------
 *
 * Every lookup by id on a hot path (a submission, a report, a GET) was a
 * scan of ctl->wl; with 100k pending that made each submission cost
 * milliseconds.  The index maps an id to its position in ctl->wl: open
 * addressing with linear probing over a power-of-two table kept at most
 * half full, each slot the position + 1 (0: empty) and the id's hash.  Removal
 * shifts the entries of the probe run that follows back (no tombstones), and
 * ctl_wl_remove() re-points the slot of the workload it moves.
 */

static uint32_t id_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return (uint32_t)(h ^ h >> 32);
}

/* The slot holding @id (hash @h), or the empty slot where it would go.
 * The hash kept in the slot spares a visit to the workload (a cache miss
 * in a large registry) for every entry of the probe run but the match. */
static size_t slot_of(const struct cnl_ctl *ctl, const char *id, uint32_t h)
{
	size_t mask = ctl->cap_slots - 1, i = h & mask;

	while (ctl->wl_slots[i].pos &&
	       (ctl->wl_slots[i].hash != h ||
	        strcmp(ctl->wl[ctl->wl_slots[i].pos - 1].id, id) != 0))
		i = (i + 1) & mask;
	return i;
}

static void index_grow(struct cnl_ctl *ctl)
{
	struct ctl_slot *old = ctl->wl_slots;
	size_t n = ctl->cap_slots;

	ctl->cap_slots = n ? 2 * n : 256;
	ctl->wl_slots = cnl_xcalloc(ctl->cap_slots, sizeof(*ctl->wl_slots));
	for (size_t i = 0; i < n; i++) {
		size_t k = old[i].hash & (ctl->cap_slots - 1);

		if (!old[i].pos)
			continue;
		while (ctl->wl_slots[k].pos) /* ids are unique: no compare */
			k = (k + 1) & (ctl->cap_slots - 1);
		ctl->wl_slots[k] = old[i];
	}
	free(old);
}

/* Remove the entry in slot @i, moving back what its probe run needs. */
static void index_del(struct cnl_ctl *ctl, size_t i)
{
	size_t mask = ctl->cap_slots - 1, j = i;

	for (;;) {
		size_t home;

		j = (j + 1) & mask;
		if (!ctl->wl_slots[j].pos)
			break;
		home = ctl->wl_slots[j].hash & mask;
		/* The entry at j may fill the hole at i unless its home lies
		 * cyclically in (i, j]. */
		if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
			continue;
		ctl->wl_slots[i] = ctl->wl_slots[j];
		i = j;
	}
	ctl->wl_slots[i].pos = 0;
}

struct wl *ctl_wl_find(struct cnl_ctl *ctl, const char *id)
{
	size_t i;

	if (!ctl->cap_slots)
		return NULL;
	i = slot_of(ctl, id, id_hash(id));
	return ctl->wl_slots[i].pos ? &ctl->wl[ctl->wl_slots[i].pos - 1] : NULL;
}

/*
 * Room for at least @n workloads in ctl->wl, in memory the kernel may back
 * with huge pages.  A workload takes ~2 KB, so 100k pending make ctl->wl
 * ~190 MB: faulting that in 4 KiB pages one at a time was the largest part
 * of a restart's CPU, and of a submission's time under the API's lock
 * (a fault every other submission), and every scan of the registry (each
 * cycle) missed the TLB at almost every workload.  The load reserves what
 * it will hold; ctl_wl_add() grows the block through here once it is 2 MB
 * or more.  Without the memory, or without huge pages, nothing is lost but
 * the speed.
 */
void ctl_wl_reserve(struct cnl_ctl *ctl, size_t n)
{
	size_t bytes =
	    (n * sizeof(*ctl->wl) + CTL_HUGE - 1) / CTL_HUGE * CTL_HUGE;
	struct wl *p;

	if (n <= ctl->cap_wl || !(p = aligned_alloc(CTL_HUGE, bytes)))
		return;
	(void)madvise(p, bytes, MADV_HUGEPAGE);
	if (ctl->n_wl)
		memcpy(p, ctl->wl, ctl->n_wl * sizeof(*ctl->wl));
	free(ctl->wl);
	ctl->wl = p;
	ctl->cap_wl = bytes / sizeof(*ctl->wl);
	ctl_wl_rebase_all(ctl);
}

struct wl *ctl_wl_add(struct cnl_ctl *ctl, const char *id)
{
	struct wl *w;

	if (ctl->n_wl == ctl->cap_wl &&
	    2 * ctl->cap_wl * sizeof(*ctl->wl) >= CTL_HUGE)
		ctl_wl_reserve(ctl, 2 * ctl->cap_wl);
	if (ctl->n_wl == ctl->cap_wl) {
		ctl->cap_wl = ctl->cap_wl ? 2 * ctl->cap_wl : 64;
		ctl->wl = cnl_xrealloc(ctl->wl, ctl->cap_wl * sizeof(*ctl->wl));
		ctl_wl_rebase_all(ctl);
	}
	if (2 * (ctl->n_wl + 1) > ctl->cap_slots)
		index_grow(ctl);
	w = &ctl->wl[ctl->n_wl++];
	memset(w, 0, sizeof(*w));
	snprintf(w->id, sizeof(w->id), "%s", id);
	w->node = -1;
	w->home = -1;
	w->resv_node = -1;
	w->vram_used = -1;
	w->util_pct = -1;
	w->wait_reason = CNL_WHY_COUNT_; /* no cycle has looked at it yet */
	{
		uint32_t h = id_hash(w->id);

		ctl->wl_slots[slot_of(ctl, w->id, h)] =
		    (struct ctl_slot){(uint32_t)ctl->n_wl, h};
	}
	ctl_undo_added(ctl, w);
	ctl_facts_forget(ctl, w->id); /* published once it is filled in */
	return w;
}

/* ---- pending census ------------------------------------------------------
 *
 * A submission's "queued: position P of N pending" decision needs the
 * pending work per priority class.  Counting it scanned the registry on
 * every submission; now a scan runs at most once a second, and only when a
 * cycle has run since the last (cycles move work out of pending); between
 * scans, additions (cnl_ctl_job_added(), cnl_ctl_server_added()) and
 * removals (ctl_wl_remove()) move the counts.  A START decided since the
 * last scan still counts as pending until the next: the position is the
 * queue as the last census saw it, which the decision text never claimed
 * to be more than (fair share and deadlines move it anyway).
 */
void ctl_pending_census(struct cnl_ctl *ctl, int *ret)
{
	static const int64_t every_ms = 1000;
	int64_t now = ctl_now_ms();

	if (!ctl->census_ok || (ctl->census_cycle != ctl->cycles &&
	                        now - ctl->census_ms >= every_ms)) {
		memset(ctl->pending_n, 0, sizeof(ctl->pending_n));
		for (size_t i = 0; i < ctl->n_wl; i++)
			if (ctl->wl[i].state == CNL_WL_PENDING)
				ctl->pending_n[ctl->wl[i].j.prio & 3]++;
		ctl->census_cycle = ctl->cycles;
		ctl->census_ms = now;
		ctl->census_ok = true;
	}
	memcpy(ret, ctl->pending_n, sizeof(ctl->pending_n));
}

void ctl_pending_count(struct cnl_ctl *ctl, const struct wl *w, int delta)
{
	if (ctl->census_ok && w->state == CNL_WL_PENDING)
		ctl->pending_n[w->j.prio & 3] += delta;
}

int ctl_node_find(struct cnl_ctl *ctl, const char *id)
{
	for (size_t i = 0; i < ctl->n_nodes; i++)
		if (strcmp(ctl->nodes[i].id, id) == 0)
			return (int)i;
	return -1;
}

/* A node by id, else by name (what administrators type). */
int ctl_node_find_any(struct cnl_ctl *ctl, const char *key)
{
	int i = ctl_node_find(ctl, key);

	for (size_t k = 0; i < 0 && k < ctl->n_nodes; k++)
		if (strcmp(ctl->nodes[k].name, key) == 0)
			i = (int)k;
	return i;
}

void ctl_node_changed(struct cnl_ctl *ctl, int node)
{
	if (node >= 0 && (size_t)node < ctl->n_nodes) {
		ctl->nodes[node].version++;
		pthread_cond_broadcast(ctl->nodes[node].wake);
	}
}

void ctl_wl_remove(struct cnl_ctl *ctl, struct wl *w)
{
	size_t i = (size_t)(w - ctl->wl), last = ctl->n_wl - 1;

	ctl_undo_save(ctl, w);
	ctl_facts_forget(ctl, w->id);
	ctl_pending_count(ctl, w, -1);
	index_del(ctl, slot_of(ctl, w->id, id_hash(w->id)));
	if (i != last) {
		/* The last one takes its place: re-point its slot. */
		const char *id = ctl->wl[last].id;

		ctl->wl_slots[slot_of(ctl, id, id_hash(id))].pos =
		    (uint32_t)(i + 1);
		ctl->wl[i] = ctl->wl[last];
		ctl_wl_rebase(&ctl->wl[i]);
	}
	ctl->n_wl--;
}

void ctl_wl_rebase(struct wl *w)
{
	if (w->j.req.kind == CNL_REQ_MIG && w->j.req.profile)
		w->j.req.profile = w->shape + w->profile_off;
}

void ctl_wl_rebase_all(struct cnl_ctl *ctl)
{
	for (size_t i = 0; i < ctl->n_wl; i++)
		ctl_wl_rebase(&ctl->wl[i]);
}

/* Parse @shape into @req for the scheduler; 0 or -CNL_EFIELD. */
int ctl_make_req(struct cnl_ctl *ctl, const char *shape,
                 struct cnl_alloc_req *req, char *buf, char *err, size_t errlen)
{
	return cnl_shape_parse(ctl->cfg.cat, shape, req, buf, err, errlen);
}

/* Fill @jobs and @map (room for ctl->n_wl) from the active workloads. */
static size_t fill_jobs(struct cnl_ctl *ctl, struct cnl_job *jobs, size_t *map)
{
	size_t n = 0;

	for (size_t i = 0; i < ctl->n_wl; i++) {
		struct wl *w = &ctl->wl[i];

		if (w->state != CNL_WL_PENDING && !w->alloc_id)
			continue; /* stopping, resources already released */
		/* Waiting for a slice shrunk to admit it (ctl_resize.c): out
		 * of the cycle until its blocks are released, so that the
		 * cycle does not pre-empt others for it meanwhile. */
		if (w->state == CNL_WL_PENDING && w->admit_by[0]) {
			const struct wl *v = ctl_wl_find(ctl, w->admit_by);

			if (v && v->alloc_id && v->shrink_to &&
			    strcmp(v->admits, w->id) == 0)
				continue;
			w->admit_by[0] = '\0';
		}
		jobs[n] = w->j;
		if (w->state == CNL_WL_PENDING) {
			jobs[n].state = CNL_JOB_PENDING;
		} else {
			jobs[n].state = CNL_JOB_RUNNING;
			jobs[n].alloc_id = w->alloc_id;
			jobs[n].start_ms = w->started_ms;
			if (w->state == CNL_WL_STOPPING ||
			    w->state == CNL_WL_REQUEUING)
				jobs[n].preemptible = false;
		}
		map[n++] = i;
	}
	return n;
}

/* The scheduler's jobs array from the active workloads; @map[i] is the
 * workload of jobs[i]. */
size_t ctl_build_jobs(struct cnl_ctl *ctl, struct cnl_job **ret,
                      size_t **ret_map)
{
	struct cnl_job *jobs = cnl_xmalloc((ctl->n_wl + 1) * sizeof(*jobs));
	size_t *map = cnl_xmalloc((ctl->n_wl + 1) * sizeof(*map));
	size_t n = fill_jobs(ctl, jobs, map);

	*ret = jobs;
	*ret_map = map;
	return n;
}

size_t ctl_cycle_jobs(struct cnl_ctl *ctl, struct cnl_job **ret,
                      size_t **ret_map)
{
	/* Kept between cycles: with 100k pending, a fresh array each cycle
	 * cost its page faults again every time. */
	if (ctl->cap_cyc < ctl->n_wl + 1) {
		ctl->cap_cyc = 2 * ctl->n_wl + 64;
		free(ctl->cyc_jobs);
		free(ctl->cyc_map);
		ctl->cyc_jobs =
		    cnl_xmalloc(ctl->cap_cyc * sizeof(*ctl->cyc_jobs));
		ctl->cyc_map =
		    cnl_xmalloc(ctl->cap_cyc * sizeof(*ctl->cyc_map));
	}
	*ret = ctl->cyc_jobs;
	*ret_map = ctl->cyc_map;
	return fill_jobs(ctl, ctl->cyc_jobs, ctl->cyc_map);
}

void ctl_server_gone(struct cnl_ctl *ctl, const struct wl *w)
{
	if (!w->server)
		return;
	ctl_usage_of(ctl, w->project_id)->servers--;
	ctl_usage_of(ctl, w->user_id)->servers--;
}

/* Remember that a start took @ms from assignment to running. */
void ctl_note_start(struct cnl_ctl *ctl, bool server, int64_t ms)
{
	unsigned *n = &ctl->n_starts[server];

	ctl->start_ms[server][*n % START_HISTORY] = ms;
	(*n)++;
}

void cnl_ctl_kick(struct cnl_ctl *ctl)
{
	ctl->changed = true;
	cnl_ctl_kick_submitted(ctl);
}

void cnl_ctl_kick_submitted(struct cnl_ctl *ctl)
{
	ctl->dirty = true;
	pthread_cond_signal(&ctl->wake);
}
