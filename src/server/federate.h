/*
 * federate.h - work forwarded to a peer site: two control planes (one per
 * site) that trust each other share their queues.
 *
 * Trust is set up by both administrators.  The receiving site grants the
 * sending one a service user bound to one of its projects
 * (`cnlab peer grant NAME --project P`: api_peers.c): a token that acts
 * only as that user, a member of that project only, so that the project's
 * quotas, policy and audit apply there to everything the peer sends.  The
 * sending site keeps the peer's URL, the CA that its certificate must chain
 * to (https), and that token, sealed with the platform's secrets key
 * (`cnlab peer add NAME --url URL --ca FILE --token-from-file FILE`): the
 * sender knows the receiver by its certificate, the receiver the sender by
 * its token.  Either side ends it alone: `cnlab peer revoke` (the token
 * gone, the peer's work there cancelled) or `cnlab peer remove`.
 *
 * A thread of the sending site's leader (federate.c).  Each tick, under
 * the API's lock, it takes the jobs that waited past their cluster's wait
 * target, that no cluster here expects to start within a minute, and that
 * may leave (cnl_ctl_forward_candidates(): not of an on-prem-only or a
 * pinned project, no --cluster, no secrets, dataset or node lists, not a
 * gang); each leaves the local queue, recorded (documents of kind
 * "forward") before anything is sent.  Without the lock it uploads the
 * job's inputs to the peer and submits the job there (an Idempotency-Key
 * derived from the job: a submission whose answer was lost is sent again
 * and made once), then follows it: its state, exit code and output are
 * copied into the local job, so that the user sees one job (cnlab jobs
 * show, logs, run's following), and a cancel of the local job cancels the
 * remote one.  A peer that refuses the job (its quota, a shape it does
 * not have, a revoked token) gives it back to the local queue, audited,
 * where it is not offered to a peer again for a minute.
 *
 * Audit here, as the scheduler's stage "federation" (sched.federation: cnlab
 * jobs explain lists it): forwarded (where, why), refused by the peer, ended
 * there (in which state).  The peer's own audit
 * names its service user.
 */
#ifndef CNL_SERVER_FEDERATE_H
#define CNL_SERVER_FEDERATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "net/metrics.h"

struct cnl_api;
struct cnl_federate;

/* cnl_federate_new - the forwards recorded before; with the API's lock
 * held.  @note is called (lock held) when a job's state, run record or
 * output changed (its event streams wake: api_events.c).  0 or -errno. */
int cnl_federate_new(struct cnl_api *api,
                     void (*note)(struct cnl_api *api, const char *job),
                     struct cnl_federate **ret);
int cnl_federate_start(struct cnl_federate *f);
void cnl_federate_stop(struct cnl_federate *f); /* WITHOUT the lock */
void cnl_federate_free(struct cnl_federate *f);

/* The following, with the API's lock held. */
/* cnl_federate_cancel - whether job @id is forwarded; if so, its cancel
 * goes to the peer at the next tick. */
bool cnl_federate_cancel(struct cnl_federate *f, const char *id);
/* cnl_federate_busy - how many jobs forwarded to @peer have not ended. */
int cnl_federate_busy(struct cnl_federate *f, const char *peer);
/* cnl_federate_peer_json - the live state of @peer into @o: "jobs" (not
 * ended), "last_ok", "error". */
void cnl_federate_peer_json(struct cnl_federate *f, const char *peer,
                            json_t *o);
void cnl_federate_metrics(struct cnl_federate *f, struct cnl_metrics_buf *mb);

#endif
