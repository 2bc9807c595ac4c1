/*
 * leader.h - who of several cnlabd over one PostgreSQL database leads.
 *
 * The leader holds the store's lease (store.h, "Leadership"); only it
 * schedules and writes.  The others follow: they forward every request
 * to the leader (forward.h), and wait until the lease is free or expired,
 * take it with a new epoch, load the platform's state from the database
 * (as a restart does) and lead.  A load balancer in front of all of them
 * or clients that know every replica's address may use any of them.
 *
 * Fail-stop: a leader whose renewal finds the lease taken by another
 * (it was paused, or cut off from the database, past its lease) exits at
 * once with status 75 (EX_TEMPFAIL: restart me, I will be a standby).
 * Until then the store's fencing (cnl_store_fence()) already refuses every
 * write of its old epoch, so it never writes after the new leader took
 * over.  A leader that only loses the database keeps trying: its writes
 * fail (503) until the database is back, and its lease, if nobody took
 * it meanwhile, is renewed with the same epoch.
 */
#ifndef CNL_SERVER_LEADER_H
#define CNL_SERVER_LEADER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

struct cnl_leader;

/* Exit status of a leader that lost its lease: EX_TEMPFAIL. */
#define CNL_LEADER_LOST_EXIT 75

/*
 * cnl_leader_take - become the leader of the store at @url: wait as a
 * standby (logging who leads) until the lease can be taken, then fence
 * @store (the caller's handle on the same database) at the new epoch and
 * keep the lease renewed every @ttl_ms / 5 from a thread of its own, on a
 * connection of its own.  @label names this process in the lease (its
 * address, for the standbys' logs).  A signal of @sigs (blocked by the
 * caller) ends the wait: 1, nothing held.  0 with *@ret, or a negative
 * error with @err.
 */
int cnl_leader_take(const char *url, struct cnl_store *store, const char *label,
                    int64_t ttl_ms, const sigset_t *sigs,
                    struct cnl_leader **ret, char *err, size_t errlen);

/*
 * cnl_leader_seen - what the standby's wait last read of the lease: the
 * leader's label (its replica URL), its epoch, whether the lease was live
 * (held and not expired, counting from that read), and how long ago it
 * read it (-1: never), for the follower's listener (forward.h).  Safe
 * from any thread.
 */
struct cnl_leader_seen {
	char leader[CNL_STORE_LEASE_HOLDER_MAX];
	int64_t epoch;
	bool live;
	int64_t age_ms;
};
void cnl_leader_seen(struct cnl_leader_seen *ret);

/* cnl_leader_epoch - the epoch held. */
int64_t cnl_leader_epoch(const struct cnl_leader *l);

/*
 * cnl_leader_valid - whether the lease is surely still this process's:
 * less than a lease since the start of its last successful renewal.
 * Past that (the database unreachable, the process paused or cut off)
 * another may lead: the API then refuses every request with 503
 * "not_leader" and /healthz says so, so clients and load balancers move
 * on, until a renewal succeeds again (or finds the lease taken: exit 75).
 * Safe from any thread.
 */
bool cnl_leader_valid(const struct cnl_leader *l);

/* cnl_leader_lag_ms - how old the lease's last successful renewal (or
 * its taking) is, in ms: what /healthz calls the store lag of a leader
 * (a third of a lease in steady state; a lease and more: cut off).  Safe
 * from any thread. */
int64_t cnl_leader_lag_ms(const struct cnl_leader *l);

/* cnl_leader_free - stop renewing and give the lease up (a standby takes
 * over at once instead of after the lease); NULL is allowed. */
void cnl_leader_free(struct cnl_leader *l);

#endif /* CNL_SERVER_LEADER_H */
