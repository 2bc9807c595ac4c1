/*
 * mirror.h - the leader's live statuses, mirrored in the database for the
 * followers (several cnlabd over one PostgreSQL).
 *
 * What a GET of a job or a server shows beyond its row (its wait reason,
 * estimated start, reservation, node and blocks: wire/job.h's status) is
 * the leader's memory, published in the controller's facts index
 * (ctl.h).  The mirror copies each change of that index into the store's
 * live statuses (store.h: cnl_store_live_put()), in one transaction every
 * CNL_MIRROR_MS at most, on a store handle of its own fenced at the
 * leader's epoch, so that a follower answers those reads from the
 * database (api.h: cnl_api_follower_serves()) and an old leader never
 * overwrites a new one's.  Its first write replaces every row (a new
 * leader's view replaces the last one's), once the index holds every
 * active workload.  A write that fails (the database down) is retried
 * with everything changed since; a follower's view may so lag the
 * leader's by CNL_MIRROR_MS plus a commit while the database answers.
 */
#ifndef CNL_SERVER_MIRROR_H
#define CNL_SERVER_MIRROR_H

struct cnl_ctl;
struct cnl_store;
struct cnl_mirror;

#define CNL_MIRROR_MS 200

/*
 * cnl_mirror_start - track @ctl's facts index from now on (call before
 * the controller's first tick) and mirror it through a peer of @store
 * (cnl_store_open_peer(): fenced as @store is).  0, -ENOTSUP where the
 * store has no peers (SQLite: no followers to mirror for), or an error.
 */
int cnl_mirror_start(struct cnl_ctl *ctl, struct cnl_store *store,
                     struct cnl_mirror **ret);

/* cnl_mirror_stop - stop and free (NULL allowed); what it had not yet
 * written is dropped (the next leader writes its own). */
void cnl_mirror_stop(struct cnl_mirror *m);

#endif /* CNL_SERVER_MIRROR_H */
