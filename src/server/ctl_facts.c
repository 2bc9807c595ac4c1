/*
 * ctl_facts.c - the facts index (ctl.h): the live status of each active
 * workload, published for the API's GETs that run without the API's lock
 * (api.c, serve_read()).
 *
 * This file is the controller's bottom layer beside ctl_core.c (it calls
 * nothing in the others); publishing (cnl_ctl_facts_publish()) and the
 * tick's scan, which compute statuses, are ctl.c's.
 *
 * Two sides, two locks:
 *   the controller's (under the API's lock): ctl_facts_touch() notes a
 *     workload that may have changed, in a list of ids; publishing
 *     computes the status of each one noted (ctl_wl_status(), as a locked
 *     GET would) and puts it in the table;
 *   the readers' (f->mu, held for a lookup and a copy, or one insertion):
 *     cnl_ctl_facts_status() copies an entry out.
 * A reader therefore never waits for a scheduling cycle or a submission,
 * only, at worst, for another reader's copy or one insertion.
 *
 * What keeps the table true:
 *  1. Each workload carries the fingerprint of what was last published for
 *     it (wl.facts_fp): its state, epoch, node, wait reason, estimate,
 *     reservation, sizes and start times, and the controller-wide facts its
 *     status reads (no nodes at all; how many starts are remembered).  A
 *     touch whose fingerprint is unchanged costs a hash and nothing else,
 *     so a cycle may touch every workload it decided about.
 *  2. A workload no longer active (not found at publication) leaves the
 *     table: a GET then shows no status, as the locked path would.
 *  3. Touches sit where the controller changes a workload (added, removed,
 *     a cycle's decisions, a stop, an agent's report); the tick's scan,
 *     every CNL_CTL_FACTS_SCAN_MS, compares every workload's fingerprint
 *     and catches any change no touch announced.  A status may so lag the
 *     controller's memory by at most that long; the job's own row (its
 *     state) is read from the store, committed, by the GET itself.
 *  4. Two figures in a status are the controller's, not the workload's:
 *     how much running work has no run-time estimate (counted once per
 *     scan period, not per workload: a count of every workload per
 *     publication would make it quadratic), and a not-yet-scheduled job's
 *     expected readiness (now + the median start time, as of publication).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/util.h"
#include "server/ctl-internal.h"

struct fact {
	struct fact *next;
	uint32_t hash;
	char id[CNL_ID_MAX];
	struct cnl_wire_status st;
};

static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	return h;
}

/* Invariant 1; never 0, so that a new workload always publishes. */
uint64_t ctl_facts_fp(const struct cnl_ctl *ctl, const struct wl *w)
{
	uint64_t h = 1469598103934665603ULL;

	h = mix(h, (uint64_t)w->state);
	h = mix(h, (uint64_t)w->epoch);
	h = mix(h, (uint64_t)(int64_t)w->node);
	h = mix(h, (uint64_t)w->alloc_id);
	h = mix(h, (uint64_t)w->wait_reason);
	h = mix(h, (uint64_t)w->est_start_ms);
	h = mix(h, (uint64_t)(int64_t)w->resv_node);
	h = mix(h, (uint64_t)(int64_t)w->shrink_to);
	h = mix(h, (uint64_t)(int64_t)w->resized);
	h = mix(h, (uint64_t)w->started_ms);
	h = mix(h, (uint64_t)w->not_before_ms);
	/* Blocks held only while placed (as ctl_wl_status() reads them). */
	if (w->node >= 0 && w->alloc_id)
		h = mix(h, (uint64_t)cnl_alloc_blocks_held(ctl->cluster,
		                                           &w->placed));
	h = mix(h, ctl->n_nodes == 0);
	h = mix(h, ctl->n_starts[w->server ? 1 : 0]);
	return h ? h : 1;
}

struct ctl_facts *ctl_facts_new(void)
{
	struct ctl_facts *f = cnl_xcalloc(1, sizeof(*f));

	pthread_mutex_init(&f->mu, NULL);
	f->nb = 1024;
	f->buckets = cnl_xcalloc(f->nb, sizeof(*f->buckets));
	return f;
}

void ctl_facts_free(struct ctl_facts *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->nb; i++)
		while (f->buckets[i]) {
			struct fact *e = f->buckets[i];

			f->buckets[i] = e->next;
			free(e);
		}
	free(f->buckets);
	free(f->touched);
	free(f->changed);
	free(f->unest);
	pthread_mutex_destroy(&f->mu);
	free(f);
}

/* Double the buckets; f->mu held. */
static void grow(struct ctl_facts *f)
{
	size_t nb = f->nb * 2;
	struct fact **b = cnl_xcalloc(nb, sizeof(*b));

	for (size_t i = 0; i < f->nb; i++)
		while (f->buckets[i]) {
			struct fact *e = f->buckets[i];

			f->buckets[i] = e->next;
			e->next = b[e->hash & (nb - 1)];
			b[e->hash & (nb - 1)] = e;
		}
	free(f->buckets);
	f->buckets = b;
	f->nb = nb;
}

static struct fact **slot(struct ctl_facts *f, const char *id, uint32_t h)
{
	struct fact **p = &f->buckets[h & (f->nb - 1)];

	while (*p && ((*p)->hash != h || strcmp((*p)->id, id) != 0))
		p = &(*p)->next;
	return p;
}

/* Note @id as changed for the mirror; f->mu held. */
static void track(struct ctl_facts *f, const char *id)
{
	if (!f->track)
		return;
	if (f->n_changed == f->cap_changed) {
		f->cap_changed = f->cap_changed ? 2 * f->cap_changed : 256;
		f->changed = cnl_xrealloc(f->changed,
		                          f->cap_changed * sizeof(*f->changed));
	}
	snprintf(f->changed[f->n_changed++], CNL_ID_MAX, "%s", id);
}

/* Put @st as @id's status (a new entry made outside the lock). */
void ctl_facts_put(struct ctl_facts *f, const char *id,
                   const struct cnl_wire_status *st)
{
	uint32_t h = cnl_hash_str(id);
	struct fact *e = cnl_xcalloc(1, sizeof(*e)), **p, *old = NULL;

	e->hash = h;
	snprintf(e->id, sizeof(e->id), "%s", id);
	e->st = *st;
	pthread_mutex_lock(&f->mu);
	p = slot(f, id, h);
	if (*p) {
		old = *p;
		e->next = old->next;
	} else {
		f->n++;
	}
	*p = e;
	if (f->n > 2 * f->nb)
		grow(f);
	track(f, id);
	pthread_mutex_unlock(&f->mu);
	free(old);
}

void ctl_facts_drop(struct ctl_facts *f, const char *id)
{
	struct fact **p, *old = NULL;

	pthread_mutex_lock(&f->mu);
	p = slot(f, id, cnl_hash_str(id));
	if (*p) {
		old = *p;
		*p = old->next;
		f->n--;
		track(f, id);
	}
	pthread_mutex_unlock(&f->mu);
	free(old);
}

static void note(struct ctl_facts *f, const char *id)
{
	if (f->n_touched == f->cap_touched) {
		f->cap_touched = f->cap_touched ? 2 * f->cap_touched : 64;
		f->touched = cnl_xrealloc(f->touched,
		                          f->cap_touched * sizeof(*f->touched));
	}
	snprintf(f->touched[f->n_touched++], CNL_ID_MAX, "%s", id);
}

void ctl_facts_touch(struct cnl_ctl *ctl, const struct wl *w)
{
	/* One whose fingerprint is unchanged has nothing new to show. */
	if (ctl->facts && w->facts_fp != ctl_facts_fp(ctl, w))
		note(ctl->facts, w->id);
}

void ctl_facts_forget(struct cnl_ctl *ctl, const char *id)
{
	if (ctl->facts)
		note(ctl->facts, id);
}

bool cnl_ctl_facts_ready(struct cnl_ctl *ctl)
{
	return ctl && ctl->facts && atomic_load(&ctl->facts->ready);
}

int cnl_ctl_facts_status(struct cnl_ctl *ctl, const char *id,
                         struct cnl_wire_status *ret)
{
	struct ctl_facts *f = ctl ? ctl->facts : NULL;
	struct fact *e;
	int r = -CNL_ENOTFOUND;

	if (!f || !id)
		return r;
	pthread_mutex_lock(&f->mu);
	if ((e = *slot(f, id, cnl_hash_str(id)))) {
		*ret = e->st;
		r = 0;
	}
	pthread_mutex_unlock(&f->mu);
	return r;
}

void cnl_ctl_facts_track(struct cnl_ctl *ctl)
{
	struct ctl_facts *f = ctl ? ctl->facts : NULL;

	if (!f)
		return;
	pthread_mutex_lock(&f->mu);
	f->track = true;
	pthread_mutex_unlock(&f->mu);
}

size_t cnl_ctl_facts_changed(struct cnl_ctl *ctl, char (**ret)[CNL_ID_MAX])
{
	struct ctl_facts *f = ctl ? ctl->facts : NULL;
	size_t n;

	*ret = NULL;
	if (!f)
		return 0;
	pthread_mutex_lock(&f->mu);
	*ret = f->changed;
	n = f->n_changed;
	f->changed = NULL;
	f->n_changed = f->cap_changed = 0;
	pthread_mutex_unlock(&f->mu);
	return n;
}
