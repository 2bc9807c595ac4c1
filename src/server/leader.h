/*
 * leader.h - who of several cnlabd over one PostgreSQL database leads.
 *
 * The leader holds the store's lease (store.h, "Leadership"); only it
 * serves, schedules and writes.  The others are standbys: they wait,
 * answering 503 on their address (cnl_leader_standby_listen()), until the
 * lease is free or expired, take it with a new epoch, load the platform's
 * state from the database (as a restart does) and serve.  A load
 * balancer in front of all of them (its health check GET /healthz) or
 * clients that know every replica's address find the one that serves.
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
 * keep the lease renewed every @ttl_ms / 3 from a thread of its own, on a
 * connection of its own.  @label names this process in the lease (its
 * address, for the standbys' logs).  A signal of @sigs (blocked by the
 * caller) ends the wait: 1, nothing held.  0 with *@ret, or a negative
 * error with @err.
 */
int cnl_leader_take(const char *url, struct cnl_store *store, const char *label,
                    int64_t ttl_ms, const sigset_t *sigs,
                    struct cnl_leader **ret, char *err, size_t errlen);

/*
 * cnl_leader_standby_listen - while cnl_leader_take() waits, answer on
 * @cfg's address (its host, port and TLS; routes and handlers are set
 * here): GET /healthz 503 {"status":"standby","role":"standby","leader":
 * LABEL,"epoch":N} (a load balancer's health check sees a replica that
 * does not serve), and every other request 503 "not_leader" naming the
 * leader, which the HTTP client takes as "try the next address".  0 with
 * the server in *@ret (free it with cnl_http_server_free() before the
 * leader's own listener binds the port: cnl_http_server_port() says which
 * it got), or the error of cnl_http_server_new().
 */
struct cnl_http_config;
struct cnl_http_server;
int cnl_leader_standby_listen(const struct cnl_http_config *cfg,
                              struct cnl_http_server **ret, char *err,
                              size_t errlen);

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

/* cnl_leader_free - stop renewing and give the lease up (a standby takes
 * over at once instead of after the lease); NULL is allowed. */
void cnl_leader_free(struct cnl_leader *l);

#endif /* CNL_SERVER_LEADER_H */
