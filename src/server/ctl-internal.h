/*
 * ctl-internal.h - what the files of the controller share: its state (the
 * nodes, the active workloads, usage) and the functions one file calls in
 * another.  Module-internal names start with ctl_; only ctl.h is the
 * controller's API.
 *
 *   ctl.c       creation, loading, the workload registry (added, stopped,
 *               shown), usage, availability, metrics
 *   ctl_run.c   run records: a workload's placement and history as stored,
 *               and the scheduler job rebuilt from them
 *   ctl_loop.c  the scheduling loop: cycles, node liveness, metering
 *   ctl_node.c  the node protocol: registration, heartbeats, assignments,
 *               reports, node states
 *   ctl_resize.c  in-flight resize of block slices (grow in place, shrink
 *               once the agent reports the use fits)
 *   ctl_undo.c  the undo journal of a request whose commit failed
 *   ctl_nset.c  the node sets jobs are held to (nodelist, exclude)
 *
 * Locking: everything here runs under the API's lock (ctl.h).
 */
#ifndef CNL_SERVER_CTL_INTERNAL_H
#define CNL_SERVER_CTL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "common/id.h"
#include "common/trace.h"
#include "net/metrics.h"
#include "sched/forecast.h"
#include "sched/pick.h"
#include "sched/sched.h"
#include "server/ctl.h"
#include "server/shape.h"
#include "wire/state.h"

#define START_HISTORY 16 /* starts remembered for provisioning ETAs */
/* The names of enum nstate (ctl.c). */

enum nstate { N_UP, N_CORDONED, N_DRAINING, N_LOST };
extern const char *const ctl_nstate_names[];
/* A node's power (ctl_power.c); the names of enum power. */
enum power { PW_ON, PW_OFF, PW_WAKING };
extern const char *const ctl_power_names[];
/* Heartbeats this soon after a power-off are its last words, not a
 * node switched on again. */
#define POWER_OFF_GRACE_MS 120000

struct node {
	char id[CNL_ID_MAX];
	char name[CNL_STORE_NAME_MAX];
	char address[128];
	int64_t epoch;
	int64_t last_seen_ms;
	uint8_t state; /* enum nstate */
	uint64_t version;
	/* Wakes this node's long polls when its version moves (on the heap:
	 * the nodes array may move while a poll waits). */
	pthread_cond_t *wake;
	json_t *inventory; /* the registration body, for listings */
	uint8_t protocol;  /* its agent's (CNL_WIRE_PROTOCOL); 0: unknown */
	/* Each GPU's use as the last heartbeat gave it (protocol 7; memory
	 * only, for the dashboard): -1 where not reported; use_known is
	 * false before such a heartbeat. */
	bool use_known;
	int16_t util_pct[CNL_WIRE_GPUS_MAX];
	int64_t mem_used[CNL_WIRE_GPUS_MAX];
	/* Power (ctl_power.c): enum power, since when; the command running
	 * (0: none); no new try before power_retry_ms; the last cycle found
	 * it idle past the idle time (since power_idle_since); its agent
	 * came back after a power-on, to audit. */
	uint8_t power;
	int64_t power_ms;
	pid_t power_pid;      /* the command running, in a group of its own */
	uint8_t power_cmd;    /* what it does: PW_OFF (off) or PW_WAKING (on) */
	int64_t power_cmd_ms; /* since when */
	int64_t power_retry_ms;
	bool power_idle;
	int64_t power_idle_since;
	/* A cloud instance launched by the burst (ctl_cloud.c): what it
	 * costs per hour, whole; 0 for one's own.  Never powered down: it
	 * is given back instead. */
	bool cloud;
	double cloud_price_h;
	bool power_back;
};

/*
 * Why a workload runs where it runs: facts taken at its START decision
 * (the decision's reason, the chosen node's labels, the job's own fields),
 * kept in the run record as "placement" so that they survive restarts and
 * stay true: nothing here is inferred later.
 */
struct why {
	char node[CNL_STORE_NAME_MAX]; /* "" before the first START */
	char gpu_type[CNL_NAME_MAX];   /* catalog name; "" for CPU work */
	char cluster[CNL_NAME_MAX], zone[CNL_NAME_MAX], rack[CNL_NAME_MAX];
	int8_t type_allowed;  /* the type is in gpu_types; -1: none given */
	int8_t dataset_local; /* the node lists the dataset; -1: none */
	uint8_t holders;      /* other nodes that list the dataset */
	int8_t preferred;     /* the node is one it prefers; -1: none */
	uint8_t reason;       /* enum cnl_reason, or WHY_HOME */
	int64_t at_ms;        /* when it was decided */
};

/* A server placed on its home node (place_home), not by the scheduler. */
#define WHY_HOME CNL_WHY_COUNT_

/* The most GPU types (names or families) a job may list. */
#define GPU_TYPES_MAX 16

struct wl {
	char id[CNL_ID_MAX];
	char project_id[CNL_ID_MAX];
	char user_id[CNL_ID_MAX];
	bool server;
	char shape[CNL_SHAPE_MAX];
	/* A MIG request's profile is a piece of @shape: j.req.profile points
	 * into this very struct, so wherever the struct moves (the registry
	 * grows, a removal fills the hole, an undo copies it back)
	 * ctl_wl_rebase() points it here again. */
	uint16_t profile_off;
	struct cnl_job j; /* the scheduler's view */
	int node;         /* index, or -1 */
	uint32_t alloc_id;
	struct cnl_alloc placed; /* copy of the allocation when placed */
	int64_t epoch;
	enum cnl_wl_state state;    /* wire/state.h; changed by ctl_step() */
	int64_t not_before_ms;      /* START after pre-emption */
	int64_t signal_ms, kill_ms; /* stopping, requeuing */
	uint8_t wait_reason;
	int64_t est_start_ms;
	int resv_node; /* reserved for it (wait reason RESERVED), or -1 */
	int preemptions, requeues;
	int64_t started_ms;
	char url[CNL_STORE_URL_MAX];
	char message[160]; /* the agent's word on how it ended */
	int hb_missing;    /* heartbeats of its node that did not list it */
	int home;          /* servers: the node of the last run, -1: none */
	/* Jobs: asked for at submission (see the run record in ctl.h). */
	char gpu_types[GPU_TYPES_MAX][CNL_NAME_MAX];
	uint8_t n_gpu_types;
	char gang_id[CNL_ID_MAX]; /* the gang's leader (rank 0); "": none */
	char image[128];          /* jobs: the image asked for; "": host */
	int n_secrets;            /* secrets its node fetches before it
	                             starts (api_secrets.c) */
	uint16_t rank, gang_size;
	bool doomed; /* its gang can never start again (gangs_check) */
	/* Placed block slices: the size of a pending shrink, whose blocks
	 * are held until the agent reports the slice's use fits
	 * (ctl_resize.c); 0: none. */
	int shrink_to;
	int resized; /* block slices: the size of the last resize; 0: none */
	/* The slice's VRAM use as its node last reported it (bytes), -1:
	 * none yet; what a shrink to admit other work may not go below. */
	int64_t vram_used;
	/* Its kernels' share of its GPU's time between its node's last two
	 * heartbeats (percent, protocol 7, memory only), -1: none. */
	int16_t util_pct;
	/* A shrink of this preemptible slice to admit @admits (a pending
	 * workload's id) instead of pre-empting it; "": none.  That
	 * workload waits out of the cycles until the blocks are released. */
	char admits[CNL_ID_MAX];
	int64_t admit_ms; /* when that shrink was decided */
	/* Pending: the slice being shrunk for it (its id); "": none. */
	char admit_by[CNL_ID_MAX];
	struct why why;
	/* The cluster its submission asked for ("": any), and the one it
	 * was picked for while pending (ctl_cluster.c; "": not yet), when. */
	char cl_want[CNL_NAME_MAX], cl_pick[CNL_NAME_MAX];
	int64_t cl_pick_ms;
	bool fc_seen; /* counted as an arrival by its cluster's forecast */
	/* What the facts index last published for it (ctl_facts.c). */
	uint64_t facts_fp;
	/* Its submission's trace context (traceparent); "": none
	 * (ctl_trace.c). */
	char trace[CNL_TRACE_HEADER_MAX];
};

struct usage {
	char
	    owner[CNL_ID_MAX + CNL_NAME_MAX + 1]; /* or "<project>@<cluster>" */
	double block_ms;                          /* 1% blocks x milliseconds */
	double storage_gb_ms;                     /* GB x milliseconds */
	int64_t storage_gb; /* held now by the owner's servers */
	int servers;        /* active servers */
	bool dirty;
};

/* A note of the undo journal (ctl_undo.c): what one change replaced. */
enum { CTL_UNDO_ADDED, CTL_UNDO_SAVED, CTL_UNDO_USAGE };
struct ctl_undo_rec {
	int kind;
	union {
		char id[CNL_ID_MAX]; /* ADDED: the workload added */
		struct wl w;         /* SAVED: the workload as it was */
		struct usage u;      /* USAGE: the counters as they were */
	} v;
};

struct cnl_ctl {
	struct cnl_ctl_config cfg;
	struct cnl_store *store;
	pthread_mutex_t *mu;
	pthread_cond_t wake; /* the loop: kick or stop */
	pthread_t thread;
	bool running, stop, dirty;
	/* The last cycle started and pre-empted nothing; and something but
	 * a submission changed since it began (a kick other than
	 * cnl_ctl_kick_submitted(): an end, a node, a cancel): the loop's
	 * pause after such a cycle is longer unless the second holds
	 * (pause_after()). */
	bool idle_cycle, changed;
	struct cnl_sched *sched;
	struct cnl_cluster *cluster;
	struct node *nodes;
	size_t n_nodes;
	struct wl *wl;
	size_t n_wl, cap_wl;
	/* The index of ctl->wl by id (ctl_core.c): open addressing, linear
	 * probing, each slot a workload's index + 1 (0: empty) and its id's
	 * hash; at most half full.  Kept by ctl_wl_add() and
	 * ctl_wl_remove(). */
	struct ctl_slot {
		uint32_t pos, hash;
	} * wl_slots;
	size_t cap_slots;
	/* Pending workloads per priority class, counted at the last census
	 * (a scan once per cycle, ctl_pending_census()) and moved by the
	 * registry's own additions and removals since. */
	int pending_n[4];
	uint64_t census_cycle;
	int64_t census_ms;
	bool census_ok;
	/* The last workload warned of as having secrets on a node too old
	 * for them (ctl_node.c): one warning per workload, not per poll. */
	char secrets_warned[CNL_ID_MAX];
	struct usage *usage;
	size_t n_usage, cap_usage;
	/* GPU use per day, project and user, and the keys not yet stored
	 * (ctl_usage.c). */
	json_t *usage_day, *usage_day_dirty;
	int64_t usage_day_pruned;  /* the UTC day last pruned, in days */
	char (*teams)[CNL_ID_MAX]; /* project id of each scheduler team */
	size_t n_teams;
	uint64_t next_job;
	uint64_t next_gang; /* scheduler gang ids, one per leader id */
	int64_t last_meter_ms;
	struct cnl_id_gen ids;
	int64_t default_runtime_ms; /* the scheduler's for work without one */
	/* How long the last starts took, assignment to running, per kind
	 * (0 jobs, 1 servers): what a provisioning ETA is made of. */
	int64_t start_ms[2][START_HISTORY];
	unsigned n_starts[2];
	/* The undo journal of the request in progress (ctl_undo.c). */
	struct ctl_journal {
		bool open;
		size_t n, cap;
		struct ctl_undo_rec *rec;
	} journal;
	/* The cycle's jobs array and its map to ctl->wl (ctl_cycle_jobs). */
	struct cnl_job *cyc_jobs;
	size_t *cyc_map, cap_cyc;
	struct cnl_decisions cyc_dec; /* its decisions, kept likewise */
	/* metrics */
	struct cnl_hist cycle_hist;
	uint64_t cycles, finished[4], lost_nodes, fenced;
	/* Placements (ctl_metrics_placed) and their queue waits by
	 * priority class; pre-emptions decided. */
	struct cnl_wait_hist wait_hist[4];
	uint64_t placements, preemptions;
	/* What the API's lock-free GETs read (ctl_facts.c). */
	struct ctl_facts *facts;
	/* The clusters an operator has configured (ctl_cluster.c): each
	 * its own scheduler, policy and weights; and the pick of the last
	 * split cycle (memory only). */
	struct ctl_cl *cls;
	size_t n_cls;
	uint64_t split_cycles;
	/* Each cluster's saturation forecast (ctl_cluster.c), by name. */
	struct ctl_fc {
		char name[CNL_NAME_MAX];
		struct cnl_forecast fc;
		double util, predicted; /* now, and at the horizon */
	} * fcs;
	size_t n_fcs;
	int64_t fc_last_ms;
	/* The picks and moves of the last split cycle, for its audit. */
	struct ctl_pick_note {
		char id[CNL_ID_MAX];
		char text[400];
	} * picks;
	size_t n_picks, cap_picks;
	/* The cloud (ctl_cloud.c): node name -> {"cluster", "price_h"}
	 * of the instances the burst launched, known before they join; and
	 * the projects whose work never leaves the GPUs owned: id -> true. */
	json_t *cloud_nodes, *on_prem;
	/* Projects pinned to clusters: id -> ["east", ...] (the clusters
	 * its work may be picked for). */
	json_t *pins;
	/* Quotas per cluster: "<project id>@<cluster>" -> GPU-hours; the
	 * use there is the usage owner of the same key. */
	json_t *cl_quota;
	/* What the burst could launch now (cnl_ctl_cloud_offer()): per
	 * type, its catalog GPU type and GPUs; admission takes work only
	 * these could run. */
	struct {
		int16_t type;
		uint8_t gpus;
		int64_t cpu_milli, mem_mib;
		char cluster[CNL_NAME_MAX];
	} cloud_offer[16];
	size_t n_cloud_offer;
	/* The node sets of jobs (ctl_nset.c), each its own allocation. */
	struct ctl_nset **nsets;
	size_t n_nsets, cap_nsets;
	size_t nsets_sweep; /* sets that start a sweep of those unused */
};

/* ctl_nset.c */
#define CTL_NSETS_SWEEP 1024 /* sets before the first sweep */
/*
 * ctl_nset_intern - the set of the nodes named in @in (NULL: every node)
 * less those in @out (NULL: none), shared by every job asking the same
 * nodes; @in and @out are arrays of node names.  0 with *@ret, -ENOMEM.
 */
int ctl_nset_intern(struct cnl_ctl *ctl, const json_t *in, const json_t *out,
                    const struct cnl_node_set **ret);
/* The lists a set was made of (borrowed; NULL: absent). */
void ctl_nset_lists(const struct cnl_node_set *set, const json_t **in,
                    const json_t **out);
/* A node joined the cluster: the sets cover it. */
void ctl_nset_refresh(struct cnl_ctl *ctl);
void ctl_nset_free_all(struct cnl_ctl *ctl);

/* ctl_cluster.c */
/*
 * A cluster's own settings: its policy and weights (a scheduler of its
 * own) and how long work may wait there before another cluster that can
 * start it takes it (wait_target_ms).
 */
struct ctl_cl {
	char name[CNL_NAME_MAX];
	char policy[CNL_NAME_MAX];
	int64_t wait_target_ms;
	json_t *weights; /* as set: {"w_fairshare": 8, ...} */
	struct cnl_sched *sched;
	int64_t updated_ms;
};
#define CTL_WAIT_TARGET_MS (5 * 60 * 1000) /* when none is set */
/* The wait target of cluster @name (CTL_WAIT_TARGET_MS when none is set;
 * 0: work never moves away). */
int64_t ctl_cluster_wait_target(struct cnl_ctl *ctl, const char *name);
/* Load the configured clusters (documents of kind "cluster") and the
 * pending workloads' picks (their last "cluster" decisions). */
int ctl_clusters_load(struct cnl_ctl *ctl);
void ctl_clusters_free(struct cnl_ctl *ctl);
/*
 * ctl_cycle_split - the cycle of several clusters: each pending job of
 * @jobs is given a cluster (its own --cluster, else cnl_pick_cluster()),
 * then each cluster's scheduler decides for its jobs on its nodes; the
 * decisions, in @jobs' indexes, go to @out, and the picks to audit (stage
 * "cluster") to ctl->picks.  With one cluster of nodes (and no work asking
 * for another) one cycle runs, under that cluster's policy if it has one
 * of its own.  1 when done, 0 when the caller is to run its own one cycle
 * (a single cluster without a policy of its own), negative on failure.
 */
int ctl_cycle_split(struct cnl_ctl *ctl, const struct cnl_job *jobs,
                    const size_t *map, size_t n, int64_t now,
                    struct cnl_decisions *out);
/*
 * ctl_forecast_tick - at most once a second: each cluster's capacity,
 * held, pending and ending blocks into its forecast (sched/forecast.h),
 * new pending work counted as arrivals, the forecast 90 s ahead made.
 */
void ctl_forecast_tick(struct cnl_ctl *ctl, int64_t now);
/* The blocks cluster @name's forecast expects to be asked for 90 s ahead
 * (its forecast utilisation x @capacity; 0 before any forecast). */
double ctl_forecast_demand(struct cnl_ctl *ctl, const char *name,
                           double capacity);
/* Whether work picked for cluster @name waits for capacity, or for nodes
 * that are not taking work (off, lost, cordoned). */
bool ctl_cluster_starved(struct cnl_ctl *ctl, const char *name);
/* ctl_cloud.c: nodes the burst launched, and the work that may use them.
 * ctl_cloud_load: the projects marked on-prem-only, from the store. */
int ctl_cloud_load(struct cnl_ctl *ctl);
/* Each cluster's price per GPU-hour into @p->cost, and the clusters that
 * hold a cloud node as a mask (bit k: cluster k). */
uint64_t ctl_cloud_clusters(struct cnl_ctl *ctl, struct cnl_picks *p);
/* ctl_owned_could_host - whether a node owned (no cloud node) could ever
 * host @w: its GPU type and count, CPU, memory, the node as if empty. */
bool ctl_owned_could_host(struct cnl_ctl *ctl, const struct wl *w);
/* Whether an instance type the burst offers could run @p (a project
 * that may leave). */
bool ctl_cloud_could_run(const struct cnl_ctl *ctl, const char *project_id,
                         const struct cnl_req_prep *p);
/* The clusters of @p that @w's project is pinned to (bit k), ~0 when it
 * is not pinned. */
/* Charge @block_ms of @w's use to its project's use in its node's cluster. */
void ctl_cluster_quota_charge(struct cnl_ctl *ctl, const struct wl *w,
                              double block_ms);
/* The clusters of @p where @w's project has spent its quota there. */
uint64_t ctl_quota_mask(struct cnl_ctl *ctl, const struct wl *w,
                        const struct cnl_picks *p);
uint64_t ctl_pinned_mask(const struct cnl_ctl *ctl, const struct wl *w,
                         const struct cnl_picks *p);
/* Whether @w's project keeps its work on the GPUs owned. */
bool ctl_on_prem_only(const struct cnl_ctl *ctl, const struct wl *w);
/* A registration of a node the burst launched: its cluster is the one
 * the burst gave it, whatever its agent says; marks node @i a cloud one. */
void ctl_cloud_registered(struct cnl_ctl *ctl, size_t i);
const char *ctl_cloud_cluster_of(const struct cnl_ctl *ctl, const char *name);
/* A workload leaves cloud node w->node: what its run there cost, audited
 * on the job. */
void ctl_cloud_ended(struct cnl_ctl *ctl, const struct wl *w, int64_t now);

/* ctl_power.c: the power of idle nodes (see there).  Each tick; and the
 * cycle's report that node @node is idle past the idle time. */
void ctl_power_tick(struct cnl_ctl *ctl, int64_t now);
void ctl_power_idle(struct cnl_ctl *ctl, int node, int64_t since);
/* The clusters' gauges (utilisation, forecast, its error) into @b. */
void ctl_clusters_metrics(struct cnl_ctl *ctl, struct cnl_metrics_buf *b);
/* Workload @w, placed on a node, ended at @now: its run time against its
 * estimate, for its cluster's forecast. */
void ctl_forecast_ended(struct cnl_ctl *ctl, const struct wl *w, int64_t now);

/* ctl.c */
/* The kind of @w for the state machine. */
enum cnl_wl_kind ctl_kind(const struct wl *w);
/*
 * ctl_step - move @w by @event (wire/state.h).  0, or -CNL_ESTATE with a
 * logged error naming the state and the event, @w unchanged: the one
 * place a workload's state changes.
 */
int ctl_step(struct wl *w, enum cnl_wl_event event);
/* The user-facing state the store keeps for @w (cnl_wl_store_state). */
const char *ctl_store_state(const struct wl *w);
int64_t ctl_now_ms(void);
json_t *ctl_time_or_null(int64_t ms);
uint32_t ctl_team_of(struct cnl_ctl *ctl, const char *project_id);
struct usage *ctl_usage_of(struct cnl_ctl *ctl, const char *owner);
struct wl *ctl_wl_find(struct cnl_ctl *ctl, const char *id);
/* A new active workload @id at the end of ctl->wl, indexed, with the
 * fields of one no cycle has seen yet. */
struct wl *ctl_wl_add(struct cnl_ctl *ctl, const char *id);
/* Re-point what in @w points into itself (its MIG profile) after the
 * struct was moved or copied; ctl_wl_rebase_all() for the registry. */
void ctl_wl_rebase(struct wl *w);
void ctl_wl_rebase_all(struct cnl_ctl *ctl);
/* Room for at least @n workloads, in memory the kernel may back with huge
 * pages of CTL_HUGE bytes (ctl_core.c). */
#define CTL_HUGE ((size_t)2 << 20)
void ctl_wl_reserve(struct cnl_ctl *ctl, size_t n);
/* Pending workloads per priority class into @ret (4), without scanning
 * the registry more than once per cycle. */
void ctl_pending_census(struct cnl_ctl *ctl, int *ret);
/* Move the census by @delta for @w if it is pending (an addition, +1,
 * once its class is known; a removal, -1). */
void ctl_pending_count(struct cnl_ctl *ctl, const struct wl *w, int delta);
int ctl_node_find(struct cnl_ctl *ctl, const char *id);
int ctl_node_find_any(struct cnl_ctl *ctl, const char *key);
void ctl_node_changed(struct cnl_ctl *ctl, int node);
void ctl_wl_remove(struct cnl_ctl *ctl, struct wl *w);
int ctl_make_req(struct cnl_ctl *ctl, const char *shape,
                 struct cnl_alloc_req *req, char *buf, char *err,
                 size_t errlen);
size_t ctl_build_jobs(struct cnl_ctl *ctl, struct cnl_job **ret,
                      size_t **ret_map);
/* The same into arrays the controller keeps (not to be freed), valid
 * until the next call: the cycle's. */
size_t ctl_cycle_jobs(struct cnl_ctl *ctl, struct cnl_job **ret,
                      size_t **ret_map);
void ctl_server_gone(struct cnl_ctl *ctl, const struct wl *w);
void ctl_note_start(struct cnl_ctl *ctl, bool server, int64_t ms);
/* Count the placement of @w at @now, and its wait since submission. */
void ctl_metrics_placed(struct cnl_ctl *ctl, const struct wl *w, int64_t now);

/* The live status of @w (cnl_ctl_workload_status()); @guessed: the
 * running work without an estimated run time on its reserved node, or -1
 * to count it here (a scan of every workload). */
void ctl_wl_status(struct cnl_ctl *ctl, const struct wl *w, int guessed,
                   struct cnl_wire_status *ret);

/* ctl_facts.c: the index the API's lock-free GETs read */
struct ctl_facts {
	pthread_mutex_t mu; /* the table, for readers and the publisher */
	struct fact **buckets;
	size_t nb, n;
	/* Under the API's lock: ids touched since the last publication. */
	char (*touched)[CNL_ID_MAX];
	size_t n_touched, cap_touched;
	int64_t scan_ms; /* the last scan */
	/* The first scan after loading is published: until then the
	 * table does not have every active workload. */
	atomic_bool ready;
	/* Under @mu, when tracked (cnl_ctl_facts_track()): the ids set or
	 * removed since the mirror last took them. */
	bool track;
	char (*changed)[CNL_ID_MAX];
	size_t n_changed, cap_changed;
	/* Running work without a run-time estimate, per node and in all
	 * (invariant 4), as counted at @unest_ms. */
	int *unest;
	size_t n_unest;
	int unest_all;
	int64_t unest_ms;
};

struct ctl_facts *ctl_facts_new(void);
void ctl_facts_free(struct ctl_facts *f);
/* @w may have changed: publish it at the next cnl_ctl_facts_publish()
 * (nothing when what it shows has not changed since the last). */
void ctl_facts_touch(struct cnl_ctl *ctl, const struct wl *w);
/* Workload @id leaves the registry: unpublished at the next publication. */
void ctl_facts_forget(struct cnl_ctl *ctl, const char *id);
/* What @w's published status was computed from (never 0). */
uint64_t ctl_facts_fp(const struct cnl_ctl *ctl, const struct wl *w);
/* Publish @st as @id's status; unpublish @id. */
void ctl_facts_put(struct ctl_facts *f, const char *id,
                   const struct cnl_wire_status *st);
void ctl_facts_drop(struct ctl_facts *f, const char *id);
/* The controller's tick: every so often, look at every workload for
 * changes no touch announced, then publish. */
void ctl_facts_scan(struct cnl_ctl *ctl, int64_t now);

/* ctl_run.c */
int ctl_persist(struct cnl_ctl *ctl, const struct wl *w, int64_t now);
int ctl_persist_end(struct cnl_ctl *ctl, const struct wl *w, bool ran,
                    int exit_code, int64_t now);
int ctl_wl_job(struct cnl_ctl *ctl, struct wl *w, const char *shape, int prio,
               int64_t created, int64_t deadline, int64_t runtime,
               bool preemptible);
int ctl_wl_job_fields(struct cnl_ctl *ctl, struct wl *w, json_t *run,
                      bool gang);
void ctl_wl_adopt(struct cnl_ctl *ctl, struct wl *w, const char *run_txt);
/* ctl_wl_adopt_json - the same from the parsed record (NULL: nothing). */
void ctl_wl_adopt_json(struct cnl_ctl *ctl, struct wl *w, json_t *run);
/* The request of block slice @w becomes @blocks blocks: its shape
 * ("TYPE-N") and its scheduler job (a resize, ctl_resize.c). */
void ctl_wl_set_blocks(struct wl *w, int blocks);

/* ctl_loop.c */
/* The span of a stage's decision for @id, under its trace context
 * (ctl_trace.c). */
void ctl_trace_stage(struct cnl_ctl *ctl, const char *id, const char *stage,
                     const char *decision, int64_t start_ns);
int ctl_decide(struct cnl_ctl *ctl, const char *id, const char *stage,
               int64_t now, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int ctl_record(struct cnl_ctl *ctl, const struct cnl_decisions *dec,
               const size_t *map, size_t n, int64_t now);
bool ctl_requeued(const struct wl *w);

/* ctl_core.c, for ctl_undo.c: while a journal is open
 * (cnl_ctl_journal_begin()), note an active workload just added, a
 * workload about to change or be removed (its copy), an owner's counters
 * about to change. */
void ctl_undo_added(struct cnl_ctl *ctl, const struct wl *w);
void ctl_undo_save(struct cnl_ctl *ctl, const struct wl *w);
void ctl_undo_usage(struct cnl_ctl *ctl, const struct usage *u);
void ctl_journal_free(struct cnl_ctl *ctl);
/* The store's batch hook (cnl_store_set_batch_hook()): a batch of
 * requests ended, committed (0) or lost whole (an error). */
void ctl_batch_ended(void *arg, int r);

/* ctl_resize.c */
/* The size of @w's pending shrink, or 0 (none, or one its allocation
 * has outlived). */
int ctl_resize_pending(const struct cnl_ctl *ctl, const struct wl *w);
/* The VRAM (MiB) of @blocks blocks of the GPU type @w is placed on. */
int64_t ctl_resize_vram_mib(const struct cnl_ctl *ctl, const struct wl *w,
                            int blocks);
/* Before a cycle: for a pending block request that does not fit, shrink
 * a lower-priority preemptible block slice on a GPU where that makes room
 * (not below its reported use) instead of letting the cycle pre-empt it. */
void ctl_resize_admit(struct cnl_ctl *ctl, int64_t now);
/* A heartbeat's word @it on placed @w: its use; and release the blocks of
 * a pending shrink once the region's quota and use fit it. */
void ctl_resize_usage(struct cnl_ctl *ctl, struct wl *w,
                      const struct cnl_wire_running *it, int64_t now);

/* ctl_node.c */
int ctl_node_save(struct cnl_ctl *ctl, const struct node *n, int64_t now);
int ctl_load_nodes(struct cnl_ctl *ctl, int64_t now, char *err, size_t errlen);
void ctl_node_states(struct cnl_ctl *ctl);

#endif /* CNL_SERVER_CTL_INTERNAL_H */
