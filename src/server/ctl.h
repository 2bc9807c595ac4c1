/*
 * ctl.h - cnlabd's controller: the live cluster, the scheduling loop, node
 * liveness and fencing, usage metering, and what the API asks of them.
 *
 * State.  The store is the record; the controller keeps in memory what the
 * scheduler needs every cycle: the nodes (as a struct cnl_cluster with
 * every running allocation committed), and the ACTIVE workloads, i.e. the
 * jobs and notebook servers that are pending or placed.  cnl_ctl_new()
 * rebuilds all of it from the store, re-adopting each placed workload's
 * allocation from its run record, so a restarted cnlabd carries on.
 *
 * Workload states.  A job's or server's state belongs to the state machine
 * drawn in wire/state.h; the controller changes it only through that
 * machine (ctl_step() in ctl.c), and writes the state's name in the run
 * record ("phase") and the user-facing name in the store's state column.
 * A workload is active while it is pending or placed (assigned, started,
 * stopping, requeuing).
 *
 * Fencing.  Every placement gives the workload a new epoch; every report
 * from an agent names the epoch it runs, and a report with any other epoch
 * is refused (-CNL_EFENCED): work that was moved cannot finish, fail or
 * write logs in the name of the new placement.  A node silent for
 * node_lost_ms is marked lost: its workloads go back to PENDING and the
 * node's own epoch bumps.  An agent that comes back learns from its next
 * heartbeat the node's new epoch and the list of work it must stop.  To
 * make "never runs twice" hold even while the control plane cannot reach
 * it, an agent stops all work once it has gone lease_ms (half of
 * node_lost_ms) without a successful heartbeat: the lease ends before the
 * control plane may place the work elsewhere.
 *
 * Locking.  Every call below must be made holding the mutex given to
 * cnl_ctl_new() (the API's lock); the loop thread takes it for each tick.
 */
#ifndef CNL_SERVER_CTL_H
#define CNL_SERVER_CTL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "sched/catalog.h"
#include "store/store.h"
#include "wire/job.h"
#include "wire/node.h"

struct cnl_ctl_config {
	struct cnl_store *store;
	const struct cnl_catalog *cat; /* must outlive the controller */
	const char *policy;            /* NULL: "cnlab" */
	int64_t node_lost_ms;          /* 0: 30 s */
	int64_t cycle_interval_ms;     /* timer between cycles; 0: 1 s */
	uint64_t seed;                 /* placement tie-breaks */
	int64_t preempt_min_run_ms;    /* victims ran this long; -1: default */
	int64_t preempt_grace_ms;      /* signal to kill; -1: default */
	/* Idle nodes powered down through this command (ctl_power.c);
	 * NULL: never.  Idle this long (0: 30 min); idle GPUs each cluster
	 * keeps on. */
	const char *power_command;
	int64_t power_idle_ms;
	int64_t power_spare_gpus;
	/* Called at each tick with the lock held, for the API's own upkeep
	 * (deleting files past their retention); NULL: none. */
	void (*upkeep)(void *ud, int64_t now_ms);
	void *upkeep_ud;
	/* Called with the lock held once a job's state or run record was
	 * written (the API wakes the streams that follow it); NULL: none. */
	void (*changed)(void *ud, const char *job_id);
	void *changed_ud;
};

struct cnl_ctl;

/* Per owner (a project or a user). */
struct cnl_ctl_usage {
	double gpu_hours;       /* block-seconds / 100 / 3600 */
	double storage_gb_days; /* GB-seconds / 86400 */
	int servers;            /* active servers (pending..stopping) */
};

int cnl_ctl_new(const struct cnl_ctl_config *cfg, pthread_mutex_t *mu,
                struct cnl_ctl **ret, char *err, size_t errlen);
void cnl_ctl_free(struct cnl_ctl *ctl);

/* The loop thread: a tick every cycle_interval_ms or on cnl_ctl_kick(). */
int cnl_ctl_start(struct cnl_ctl *ctl);
void cnl_ctl_stop(struct cnl_ctl *ctl); /* call WITHOUT the lock */
void cnl_ctl_kick(struct cnl_ctl *ctl);
/* cnl_ctl_kick_submitted - the kick of a submission, the one change that
 * lets the loop pause longer after a cycle that started nothing (see
 * pause_after() in ctl_loop.c); every other change is cnl_ctl_kick(). */
void cnl_ctl_kick_submitted(struct cnl_ctl *ctl);

/*
 * cnl_ctl_tick - one pass: mark silent nodes lost, meter usage, and run
 * a scheduling cycle if anything changed (or @force).  Persists every
 * decision before it is visible to agents.
 */
void cnl_ctl_tick(struct cnl_ctl *ctl, int64_t now_ms, bool force);

/* ---- clusters ---------------------------------------------------------- */

/*
 * A cluster is the set of nodes sharing a `cluster` label ("default" for
 * nodes without one).  An operator may give one its own scheduling
 * policy: a document {"policy": NAME, "weights": {KNOB: N, ...},
 * "wait_target_s": N} (knobs: cnl_sched_config_set()).  With several
 * clusters, each pending job is given a cluster first (its submission's
 * "cluster", else sched/pick.h), then that cluster's policy places it on
 * that cluster's nodes; work that waits past the cluster's wait target
 * (default 300 s; 0: never) moves to another cluster that can start it
 * at once, unless the user asked for the cluster.
 */

/* cnl_ctl_cluster_check - 0 when @doc is a valid policy document for
 * cluster @name, else -CNL_EFIELD with the reason, naming the field. */
int cnl_ctl_cluster_check(struct cnl_ctl *ctl, const char *name,
                          const json_t *doc, char *err, size_t errlen);
/* cnl_ctl_cluster_set - apply a checked document (stored by the caller). */
int cnl_ctl_cluster_set(struct cnl_ctl *ctl, const char *name,
                        const json_t *doc, int64_t now, char *err,
                        size_t errlen);
/* cnl_ctl_cluster_room - whether another cluster may get a policy of its
 * own (at most CNL_PICK_MAX - 1). */
bool cnl_ctl_cluster_room(struct cnl_ctl *ctl);
/* cnl_ctl_cluster_known - whether a node is in cluster @name or it has a
 * policy of its own. */
bool cnl_ctl_cluster_known(struct cnl_ctl *ctl, const char *name);
/* cnl_ctl_clusters_json - every cluster (@name NULL) as an array, or the
 * one called @name with its nodes (NULL: no such cluster). */
json_t *cnl_ctl_clusters_json(struct cnl_ctl *ctl, const char *name);

/* ---- the cloud burst (burst.c drives it; ctl_cloud.c) -------------------- */

/*
 * cnl_ctl_cloud_node - node @name (not yet registered, or registered) is
 * a cloud instance of cluster @cluster costing @price_h an hour: it
 * joins that cluster whatever its agent says, is never powered down, and
 * takes no work of on-prem-only projects.  0, or -EINVAL.
 */
int cnl_ctl_cloud_node(struct cnl_ctl *ctl, const char *name,
                       const char *cluster, double price_h);
/* cnl_ctl_cloud_offer - the instance types the burst could launch now:
 * @n (at most 16) of them, each its catalog GPU type name, GPUs, CPU and
 * memory; admission then takes work that only these could run (for
 * projects that may leave).  @n 0: none. */
struct cnl_ctl_cloud_offer {
	const char *cluster; /* the cluster its instances join */
	const char *model;
	int gpus;
	int64_t cpu_milli, mem_mib;
};
void cnl_ctl_cloud_offer(struct cnl_ctl *ctl,
                         const struct cnl_ctl_cloud_offer *o, size_t n);
/* cnl_ctl_cloud_movable - whether every workload on cloud node @node
 * could run on some node owned (its GPU type, count, CPU, memory). */
bool cnl_ctl_cloud_movable(struct cnl_ctl *ctl, const char *node);
/*
 * cnl_ctl_cloud_return - work on cloud node @node that can be stopped and
 * resumed (preemptible jobs, alone: their checkpoint folder travels) and
 * that owned GPUs could start now is requeued, signalled now and killed
 * after 30 s, to come back to them; at most @budget blocks of it (< 0:
 * none).  Work of projects marked on-prem-only is requeued whatever it
 * is.  Their ids appended to @ret (an array, or NULL).  How many.
 */
int cnl_ctl_cloud_return(struct cnl_ctl *ctl, const char *node, int64_t budget,
                         int64_t now, json_t *ret);
/*
 * cnl_ctl_project_pins - project @project_id's work is picked only for
 * the clusters named in @names (an array of names), or for any (@names
 * NULL or empty).  cnl_ctl_project_pinned - whether it may use cluster
 * @name.
 */
void cnl_ctl_project_pins(struct cnl_ctl *ctl, const char *project_id,
                          const json_t *names);
bool cnl_ctl_project_pinned(struct cnl_ctl *ctl, const char *project_id,
                            const char *name);
/* cnl_ctl_project_on_prem - project @project_id's work never goes to a
 * cluster holding a cloud node (@on), or may again. */
void cnl_ctl_project_on_prem(struct cnl_ctl *ctl, const char *project_id,
                             bool on);
/*
 * cnl_ctl_burst_view - what the burst decides on: {"clusters": [{name,
 * cloud, capacity, used, demand}] (blocks; demand: the forecast 90 s
 * ahead), "pending": [{id, project, on_prem_only, nowhere (no node now
 * could ever run it), cluster, asked, waiting_ms, gpus, blocks, models}]
 * (GPU work of jobs), "nodes": [{name,
 * state, busy, last_seen_ms}] (cloud nodes)}.
 */
json_t *cnl_ctl_burst_view(struct cnl_ctl *ctl, int64_t now);

/*
 * Quotas per cluster (api_quota.c): project @project_id may use @gpu_hours
 * in @cluster (< 0: no limit there); once its use there reaches it, its
 * work is picked for other clusters only (running work runs on).
 */
void cnl_ctl_cluster_quota(struct cnl_ctl *ctl, const char *project_id,
                           const char *cluster, double gpu_hours);
bool cnl_ctl_cluster_quota_spent(struct cnl_ctl *ctl, const char *project_id,
                                 const char *cluster);
/* [{cluster, used, limit}] (GPU-hours) of the project's cluster quotas. */
json_t *cnl_ctl_cluster_quotas_json(struct cnl_ctl *ctl,
                                    const char *project_id);

/*
 * cnl_ctl_forward_candidates - the jobs a peer site may take (federate.h):
 * [{id, cluster, waited_ms, target_ms}], pending jobs (not servers, not
 * of a gang, asking for no cluster, fetching no secrets) that waited at
 * least their cluster's wait target (the cluster picked for them, else
 * "default"; a target of 0 keeps work home), that no node here expects to
 * start within @soon_ms, of a project neither on-prem-only nor pinned;
 * longest waiting first.
 */
json_t *cnl_ctl_forward_candidates(struct cnl_ctl *ctl, int64_t now,
                                   int64_t soon_ms);
/*
 * cnl_ctl_job_withdraw - pending job @id leaves the controller (forwarded
 * to a peer: the store keeps it, cnl_ctl_job_added() no longer takes it);
 * 0, -CNL_ENOTFOUND, or -EBUSY when it is placed.
 */
int cnl_ctl_job_withdraw(struct cnl_ctl *ctl, const char *id);

/* ---- workloads ------------------------------------------------------- */

/* cnl_ctl_node_named - whether a node of that name is registered. */
bool cnl_ctl_node_named(struct cnl_ctl *ctl, const char *name);

/* cnl_ctl_shape_check - 0, or -CNL_EFIELD with the reason in @err. */
int cnl_ctl_shape_check(struct cnl_ctl *ctl, const char *shape, char *err,
                        size_t errlen);

/*
 * cnl_ctl_admit - can @j (not yet stored) meet its deadline?  0, or
 * -CNL_EDEADLINE with the earliest possible start (-1: never) in
 * ret->start.  *@ret also says which estimate the check used: the job's
 * own run time (it must finish by the deadline) or none (it must start by
 * it), and how many running workloads were assumed to run the default
 * run time because they gave none.
 */
struct cnl_ctl_admission {
	int64_t start;              /* earliest start; -1: never */
	bool finish;                /* checked the end, not only the start */
	int64_t runtime_ms;         /* the job's own estimate, 0: none */
	int unestimated;            /* running work without an estimate */
	int64_t assumed_runtime_ms; /* what the scheduler assumes for them */
};
int cnl_ctl_admit(struct cnl_ctl *ctl, const struct cnl_store_job *j,
                  int64_t now, struct cnl_ctl_admission *ret);

/*
 * cnl_ctl_feasible - admission (ctl_admit.c): could a job or server of
 * project @project_id and @shape, with the fields of its run record @run (JSON
 * text or NULL: CPU, memory, gpu_types, a gang's size), ever run on the nodes
 * registered, counting every node whatever its state and as if it were empty?
 * 0 (also when no node is registered at all: the work waits for one),
 * -CNL_ENOSPACE with the reason in @why ("no node has GPU type B200", "8 whole
 * GPUs asked, the largest node has 4"), or another error for a bad shape.  On
 * success @why says how many nodes could run it, for the audit.
 */
int cnl_ctl_feasible(struct cnl_ctl *ctl, const char *project_id,
                     const char *shape, const char *run, bool server, char *why,
                     size_t whylen);

/*
 * cnl_ctl_queue_position - where pending workload @id, just added (the
 * newest of its class), stands in the queue by class and age: *@ret_pos
 * (1: first) of *@ret_n pending, as the pending census counts them (at
 * most a second old, ctl_pending_census()).  0 or -CNL_ENOTFOUND.
 */
int cnl_ctl_queue_position(struct cnl_ctl *ctl, const char *id, int *ret_pos,
                           int *ret_n);

/* cnl_ctl_shapes_json - the kinds of node registered, for a refusal:
 * [{"gpu_type", "gpus", "mig_profiles", "cpu_milli", "mem_mib", "nodes"}]. */
json_t *cnl_ctl_shapes_json(struct cnl_ctl *ctl);

/*
 * The undo journal (ctl_undo.c).  cnl_ctl_journal_begin - from now on,
 * note what the calls below change in the controller's memory (the
 * active workloads and the owners' counters), so that it can be undone.
 * cnl_ctl_journal_end - stop noting; with @failed (the transaction those
 * calls wrote in was rolled back), undo what was noted, newest first, so
 * that memory again matches the store.  The API opens one around each
 * request's transaction and holds the lock from begin to end.  Changes
 * to nodes and allocations are not noted (ctl_undo.c says which).
 */
void cnl_ctl_journal_begin(struct cnl_ctl *ctl);
void cnl_ctl_journal_end(struct cnl_ctl *ctl, bool failed);

/*
 * A batch of requests (store.h, "Batches") shares one journal: it stays
 * open from the batch's first request to the batch's end, which the
 * store's batch hook reports (ended there: undone when the batch was
 * lost).  cnl_ctl_journal_mark - where the request joining the batch
 * begins; cnl_ctl_journal_undo_to - undo what was noted since @mark (the
 * request's own transaction failed, the batch goes on).
 */
size_t cnl_ctl_journal_mark(const struct cnl_ctl *ctl);
void cnl_ctl_journal_undo_to(struct cnl_ctl *ctl, size_t mark);

/* After the store acknowledged a new job or server (or a restart). */
int cnl_ctl_job_added(struct cnl_ctl *ctl, const struct cnl_store_job *j);

/* Keep @t (the submission's request span; NULL: nothing) as workload
 * @id's trace context: the cycle's stage spans and the node agent's
 * spans become its children (ctl_trace.c). */
struct cnl_trace;
void cnl_ctl_job_trace(struct cnl_ctl *ctl, const char *id,
                       const struct cnl_trace *t);
int cnl_ctl_server_added(struct cnl_ctl *ctl, const struct cnl_store_server *v);

/* What a deleted server leaves in the store, in the transaction of its
 * deletion: a document of this kind with the server's id, so that the
 * node that keeps its workspace is told to remove it (the heartbeat's
 * "drop"), whenever that node next asks.  Only this says a server is
 * gone: a server merely unknown here (a control plane started afresh) is
 * never a reason to delete a tenant's data. */
#define CNL_CTL_SERVER_GONE "server_deleted"

/* After the store deleted a stopped server: its storage is no longer
 * held (or metered). */
void cnl_ctl_server_deleted(struct cnl_ctl *ctl,
                            const struct cnl_store_server *v);

/*
 * cnl_ctl_stop_workload - cancel a job or stop a server (the CANCEL event
 * of wire/state.h): a pending one ends at once (cancelled, stopped), a
 * placed one is told to stop with the grace period.  Returns 0, or
 * -CNL_ENOTFOUND when it is not active.
 */
int cnl_ctl_stop_workload(struct cnl_ctl *ctl, const char *id, int64_t now_ms);

/*
 * cnl_ctl_stop_gang - cnl_ctl_stop_workload() for every active member of
 * the gang whose leader is @gang: cancelling one member cancels the gang.
 * 0, or -CNL_ENOTFOUND when no member is active.
 */
int cnl_ctl_stop_gang(struct cnl_ctl *ctl, const char *gang, int64_t now_ms);

/*
 * cnl_ctl_resize - resize the block slice of active workload @id to
 * @blocks 1% blocks of its GPU (ctl_resize.c says what happens in each
 * state).  Returns an HTTP status: 200 (done, or a shrink pending), 400
 * (@blocks outside 1..100), 409 (not active, not a block slice, stopping,
 * no room on its GPU to grow: @err says which) or 500, with the reason in
 * @err.
 */
int cnl_ctl_resize(struct cnl_ctl *ctl, const char *id, int blocks,
                   int64_t now_ms, char *err, size_t errlen);

/*
 * cnl_ctl_workload_status - the live status of the active workload @id
 * into *@ret (the "status" of its job or server document, wire/job.h):
 * 0, or -CNL_ENOTFOUND when it is not active (*@ret untouched).
 */
int cnl_ctl_workload_status(struct cnl_ctl *ctl, const char *id,
                            struct cnl_wire_status *ret);

/*
 * The facts index: what a GET shows of the controller's memory (the live
 * status of each active workload), published for readers that do not
 * hold the API's lock.  The controller touches a workload where it
 * changes, and publishes what it touched at the end of each locked
 * section (cnl_ctl_facts_publish(), called by the API before it lets the
 * lock go, and by each tick); each tick also looks, every
 * CNL_CTL_FACTS_SCAN_MS, at every workload for a change no touch
 * announced.
 *
 * cnl_ctl_facts_publish - publish what was touched; holding the lock.
 *
 * cnl_ctl_facts_ready - whether the index holds every active workload (the
 * first tick after loading has published them); safe without the lock.
 *
 * cnl_ctl_facts_status - the published status of workload @id, as
 * cnl_ctl_workload_status() gave it at the last publication: 0, or
 * -CNL_ENOTFOUND (not active).  Safe from any thread WITHOUT the API's
 * lock: it takes only the index's own short lock.
 */
#define CNL_CTL_FACTS_SCAN_MS 1000
void cnl_ctl_facts_publish(struct cnl_ctl *ctl);
bool cnl_ctl_facts_ready(struct cnl_ctl *ctl);
int cnl_ctl_facts_status(struct cnl_ctl *ctl, const char *id,
                         struct cnl_wire_status *ret);

/*
 * The index's changes, for the leader's mirror of it in the database
 * (server/mirror.h).  cnl_ctl_facts_track - from now on note the id of
 * every entry set or removed.  cnl_ctl_facts_changed - hand over the ids
 * noted since the last call (*@ret, malloc'd, @n of them; may repeat):
 * the caller reads each one's status as it stands (cnl_ctl_facts_status())
 * or learns it is gone.  Both safe without the API's lock.
 */
void cnl_ctl_facts_track(struct cnl_ctl *ctl);
size_t cnl_ctl_facts_changed(struct cnl_ctl *ctl, char (**ret)[CNL_ID_MAX]);

/*
 * cnl_ctl_workload_node - the id of the node running workload @id, into
 * @ret_node (CNL_ID_MAX bytes): 0, or -CNL_ENOTFOUND when it is not
 * running (pending, starting, stopping or ended).
 */
int cnl_ctl_workload_node(struct cnl_ctl *ctl, const char *id, char *ret_node);

/* cnl_ctl_node_protocol - the node protocol node @node_id's agent last
 * registered with (CNL_WIRE_PROTOCOL), 0 when unknown. */
int cnl_ctl_node_protocol(struct cnl_ctl *ctl, const char *node_id);

/* cnl_ctl_usage - metered use of a project or user id. */
void cnl_ctl_usage_of(struct cnl_ctl *ctl, const char *owner,
                      struct cnl_ctl_usage *ret);

/*
 * GPU use per UTC day (ctl_usage.c).  cnl_usage_day_add - charge @blocks
 * held from @from_ms to @to_ms to (@project, @user), split at each UTC
 * midnight, into @days ("YYYY-MM-DD/project/user": block-ms), noting the
 * keys touched in @dirty (may be NULL).  cnl_usage_7d - the GPU-hours of
 * the 7 UTC days ending with @now_ms's, oldest first, of @project (and
 * only of @user in it unless NULL).  cnl_ctl_usage_7d - the same over the
 * controller's record.
 */
void cnl_usage_day_add(json_t *days, json_t *dirty, const char *project,
                       const char *user, int64_t from_ms, int64_t to_ms,
                       double blocks);
void cnl_usage_7d(const json_t *days, const char *project, const char *user,
                  int64_t now_ms, double ret[7]);
void cnl_ctl_usage_7d(struct cnl_ctl *ctl, const char *project,
                      const char *user, int64_t now_ms, double ret[7]);
/* The "project/user" pairs with use in those 7 days, as a new object's
 * keys. */
json_t *cnl_usage_recent(const json_t *days, int64_t now_ms);
/* Drop from memory the days before the 7 ending with @now_ms's, but those
 * in @dirty (not yet stored); the store keeps them all. */
void cnl_usage_prune(json_t *days, const json_t *dirty, int64_t now_ms);
/* Into @buf, a key after every key of the day before the window ending
 * with @now_ms's day and before every key of the window: where a listing
 * of the stored days starts. */
void cnl_usage_day_after(int64_t now_ms, char *buf, size_t len);
json_t *cnl_ctl_usage_recent(struct cnl_ctl *ctl, int64_t now_ms);

/*
 * cnl_ctl_availability - for the shape @shape: {"now": true} when it
 * could start at once, else {"now": false, "estimated_start": RFC 3339 or
 * null when no node could ever take it}.  NULL on a bad shape.
 */
json_t *cnl_ctl_availability(struct cnl_ctl *ctl, const char *shape,
                             int64_t now_ms);

/* ---- nodes ------------------------------------------------------------- */

/*
 * Node calls take the node protocol's typed messages (src/wire/node.h),
 * decoded by the caller, and return an HTTP status; they fill *@ret (the
 * node reply, the assignments, the work's stored state) or, for statuses
 * >= 400, an error message in @err.  A node reply or assignments filled
 * here is freed with its cnl_wire_*_done().
 */
int cnl_ctl_node_register(struct cnl_ctl *ctl,
                          const struct cnl_wire_register *m, int64_t now_ms,
                          struct cnl_wire_node *ret, char *err, size_t errlen);
int cnl_ctl_node_heartbeat(struct cnl_ctl *ctl, const char *node,
                           const struct cnl_wire_heartbeat *m, int64_t now_ms,
                           struct cnl_wire_node *ret, char *err, size_t errlen);
int cnl_ctl_node_report(struct cnl_ctl *ctl, const char *node,
                        const struct cnl_wire_report *m, int64_t now_ms,
                        const char **ret, char *err, size_t errlen);
int cnl_ctl_node_set_state(struct cnl_ctl *ctl, const char *node,
                           const char *state, json_t **ret, char *err,
                           size_t errlen);

/*
 * cnl_ctl_assignments - the work node @node must run, with the node's
 * version and epoch; waits (releasing the lock) up to @wait_ms for the
 * version to pass @since.  404 for an unknown node.
 */
int cnl_ctl_assignments(struct cnl_ctl *ctl, const char *node, uint64_t since,
                        int64_t wait_ms, struct cnl_wire_assignments *ret,
                        char *err, size_t errlen);

/*
 * cnl_ctl_job_node - the id and name of the node that runs workload @id
 * under @epoch (@ret_id, @ret_name: CNL_STORE_NAME_MAX bytes each);
 * -CNL_EFENCED when none does (moved, ended, or another epoch).
 */
int cnl_ctl_job_node(struct cnl_ctl *ctl, const char *id, int64_t epoch,
                     char *ret_id, char *ret_name);

/*
 * cnl_ctl_fence_check - 0 when workload @id runs on @node under @epoch;
 * -CNL_EFENCED otherwise (moved, ended, or another epoch).
 */
int cnl_ctl_fence_check(struct cnl_ctl *ctl, const char *node, const char *id,
                        int64_t epoch);

/* cnl_ctl_node_check - 0 when @node is a node's id, else -CNL_ENOTFOUND. */
int cnl_ctl_node_check(struct cnl_ctl *ctl, const char *node);

/* cnl_ctl_node_name - the name of the node @key (id or name) into @ret;
 * 0 or -CNL_ENOTFOUND. */
int cnl_ctl_node_name(struct cnl_ctl *ctl, const char *key, char *ret,
                      size_t len);

/* cnl_ctl_node_revoke - node @key (id or name) is lost now (no new work;
 * its work requeued or ended as a lost node's); a registration and a
 * heartbeat bring it back. */
void cnl_ctl_node_revoke(struct cnl_ctl *ctl, const char *key, int64_t now);

/* cnl_ctl_node_silent - whether node @key (id or name) has not been heard
 * from (registration, heartbeat) for longer than its lease; false when
 * there is no such node. */
bool cnl_ctl_node_silent(struct cnl_ctl *ctl, const char *key, int64_t now);

/* cnl_ctl_nodes_json - every node with capacity, use and state. */
json_t *cnl_ctl_nodes_json(struct cnl_ctl *ctl, int64_t now_ms);

/* One node by id or name, with the work placed on it ("running": id, kind,
 * project, phase, shape, blocks); NULL when there is none. */
json_t *cnl_ctl_node_json(struct cnl_ctl *ctl, const char *node, int64_t now);

/* ---- metrics ------------------------------------------------------------ */

/* cnl_ctl_metrics - append the controller's Prometheus families to @out. */
struct cnl_metrics_buf;
void cnl_ctl_metrics(struct cnl_ctl *ctl, struct cnl_metrics_buf *out);

/* ---- dashboard ---------------------------------------------------------- */

/*
 * cnl_ctl_dashboard_json - what the dashboard's snapshot shows of the
 * controller (ctl_dash.c), lock held: {"nodes": [{name, state,
 * state_detail, cluster, gpus: [{index, uuid, model, mode, vram_mib,
 * vram_used_mib, util_pct, free_blocks, slices: [{kind, id, project_id,
 * user_id, start + blocks | mig_profile + mig_start, vram_mib,
 * vram_used_mib, util_pct}]}]}], "pending": [...], "running": [...],
 * "servers": [...], "pending_counts": {priority: n}, "gpu_used":
 * {project id: GPUs held}}, projects and users by id.  New reference.
 */
json_t *cnl_ctl_dashboard_json(struct cnl_ctl *ctl, int64_t now_ms);
/* A fingerprint of the nodes and their states (the tick compares it to
 * learn that a node was lost or came back); lock held. */
uint64_t cnl_ctl_dashboard_nodes_fp(struct cnl_ctl *ctl);

#endif /* CNL_SERVER_CTL_H */
