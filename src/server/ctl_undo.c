/*
 * ctl_undo.c - the controller's undo journal: what a request changed in
 * the controller's memory, undone when the request's transaction fails
 * to commit (ctl.h, cnl_ctl_journal_begin()).
 *
 * A request's handler changes the store inside the request's transaction
 * and the controller's memory at once (a submission adds a pending
 * workload, a cancel ends or stops one).  Should the commit then fail (a
 * full disk), SQLite rolls the store back; without this journal memory
 * would keep the change: a job the client was told failed would still be
 * scheduled, and a restart would show another view than before it.
 *
 * While a journal is open, the registry's primitives (ctl_core.c) note
 * what they are about to change, before they change it:
 *   ADDED   ctl_wl_add(): the id of a workload that was not active;
 *   SAVED   ctl_wl_remove(), and a change in place (ctl_undo_save()): a
 *           copy of the workload as it was;
 *   USAGE   ctl_usage_of(): a copy of an owner's counters as they were
 *           (their callers change them through the pointer it returns).
 * Undoing replays the notes newest first, so that each sees memory as it
 * was right after its own change: an ADDED removes, a SAVED puts the copy
 * back (adding the workload again if it was removed), a USAGE restores
 * the held storage and the server count.  Nothing else ran meanwhile: the
 * request holds the API's lock from its transaction's begin to the end
 * of the journal, so no cycle, heartbeat or other request saw the change.
 *
 * What the journal does not cover: the cluster's allocations and the
 * nodes (registration, heartbeats, reports of placed work).  A workload
 * removed while it held an allocation is not put back (its allocation
 * was already released); cnl_ctl_journal_end() says so in the log, and
 * the controller's view of it differs from the store's until a restart.
 */
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/log.h"
#include "common/util.h"
#include "server/ctl-internal.h"

void cnl_ctl_journal_begin(struct cnl_ctl *ctl)
{
	ctl->journal.open = true;
	ctl->journal.n = 0;
}

/* Put back the workload saved in @saved. */
static void restore(struct cnl_ctl *ctl, const struct wl *saved)
{
	struct wl *w = ctl_wl_find(ctl, saved->id);

	if (w) {
		ctl_pending_count(ctl, w, -1);
		*w = *saved;
		ctl_wl_rebase(w);
		ctl_pending_count(ctl, w, +1);
		return;
	}
	if (saved->alloc_id) {
		/* Its allocation is gone from the cluster: not undone. */
		cnl_log(CNL_LOG_ERROR, "failed commit not undone in memory",
		        "id=%s: the workload ended holding an allocation; the "
		        "store still has it active until a restart reloads it",
		        saved->id);
		return;
	}
	w = ctl_wl_add(ctl, saved->id);
	*w = *saved;
	ctl_wl_rebase(w);
	ctl_pending_count(ctl, w, +1);
}

/* A workload put back as it was: what watches it (its event streams, the
 * dashboard's snapshot) looks again.  A lost batch is undone after its
 * requests were answered (store.h, "Batches"): a snapshot built since may
 * show what is now undone. */
static void undone(struct cnl_ctl *ctl, const char *id)
{
	if (ctl->cfg.changed)
		ctl->cfg.changed(ctl->cfg.changed_ud, id);
}

/* Undo the notes from the newest down to @mark, and drop them. */
static void undo(struct cnl_ctl *ctl, size_t mark)
{
	struct ctl_journal *j = &ctl->journal;
	bool open = j->open;

	j->open = false; /* undoing notes nothing */
	for (size_t i = j->n; i-- > mark;) {
		struct ctl_undo_rec *r = &j->rec[i];
		struct wl *w;
		struct usage *u;

		switch (r->kind) {
		case CTL_UNDO_ADDED:
			if ((w = ctl_wl_find(ctl, r->v.id)))
				ctl_wl_remove(ctl, w);
			undone(ctl, r->v.id);
			break;
		case CTL_UNDO_SAVED:
			restore(ctl, &r->v.w);
			undone(ctl, r->v.w.id);
			break;
		case CTL_UNDO_USAGE:
			u = ctl_usage_of(ctl, r->v.u.owner);
			u->storage_gb = r->v.u.storage_gb;
			u->servers = r->v.u.servers;
			break;
		}
	}
	j->n = mark;
	j->open = open;
	/* The census's moves are not worth replaying exactly: count afresh,
	 * and let the loop look at the registry again. */
	ctl->census_ok = false;
	cnl_ctl_kick(ctl);
}

size_t cnl_ctl_journal_mark(const struct cnl_ctl *ctl)
{
	return ctl->journal.n;
}

void cnl_ctl_journal_undo_to(struct cnl_ctl *ctl, size_t mark)
{
	if (ctl->journal.n > mark)
		undo(ctl, mark);
}

void ctl_batch_ended(void *arg, int r)
{
	struct cnl_ctl *ctl = arg;

	if (r < 0 && ctl->journal.n)
		cnl_log(CNL_LOG_ERROR, "batch of requests lost",
		        "err=%s notes=%zu: none was acknowledged; what they "
		        "changed in memory is undone",
		        cnl_errname(r), ctl->journal.n);
	cnl_ctl_journal_end(ctl, r < 0);
}

void cnl_ctl_journal_end(struct cnl_ctl *ctl, bool failed)
{
	struct ctl_journal *j = &ctl->journal;

	j->open = false; /* undoing notes nothing */
	if (failed && j->n)
		undo(ctl, 0);
	j->n = 0;
	/* A batch of submissions notes two per request (store.h,
	 * "Batches"): kept for the next, as a fresh array's first writes
	 * are page faults; a large gang's or a long batch's is let go. */
	if (j->cap > 1024) {
		free(j->rec);
		j->rec = NULL;
		j->cap = 0;
	}
}

void ctl_journal_free(struct cnl_ctl *ctl)
{
	free(ctl->journal.rec);
	ctl->journal.rec = NULL;
	ctl->journal.cap = ctl->journal.n = 0;
}
