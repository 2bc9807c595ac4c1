/*
 * sched.h - the scheduler: from a cluster snapshot, the pending and running
 * jobs, the time and a seed, decide who starts where, who waits (why, and
 * until when), who is pre-empted, and which nodes may power down.
 *
 * Pure: no I/O, no clock, no globals.  cnlabd and cnlab-sim run this same
 * code; the same inputs give the same decisions.
 *
 * One cycle (cnl_sched_cycle):
 *
 *   1. Order.  Pending jobs are taken by priority class (critical, high,
 *      normal, low; strict), and within a class by the policy's
 *      multi-criteria key: deadline urgency, the team's fair-share factor
 *      and age, weighted by config.  The fair-share factor counts the
 *      team's share of the cluster held right now, so each placement lowers
 *      the team's next key at once: a burst of one team's submissions
 *      interleaves with other teams instead of jumping the queue.
 *   2. Place.  The policy scores every node that can take the job (the
 *      allocator proposes the best option per node; the policy weighs
 *      packing, data locality, network distance to gang peers and growth of
 *      fragmentation) and the best node wins.  A node is skipped when the
 *      job would delay a reservation held there (backfill rule).
 *      A gang (jobs sharing a `gang` id) is placed member by member, each
 *      preferring nodes near those already placed, and starts only when
 *      all gang_size members are placed; with `spread`, no two members
 *      share a node (one process per node, as multi-node training
 *      wants), so a gang that cannot get gang_size distinct nodes waits.
 *   3. Reserve.  A job that cannot start gets, if it has a deadline or is
 *      among the first `max_reservations` blocked jobs, a reservation: the
 *      earliest time some node can take it, found by replaying the ends of
 *      the node's running work (start + run-time estimate) on the real
 *      allocator state.  Later jobs may start only where they end before
 *      the reservation or leave it room (backfill).
 *   4. Pre-empt.  A job that cannot start, and cannot meet its deadline by
 *      waiting or outranks running preemptible work by the configured class
 *      gap, looks for victims: preemptible jobs of a lower class that have
 *      run at least `min_run_ms`; per node the fewest victims, then the
 *      lowest classes, then the least work lost since the last checkpoint.
 *      Victims are signalled now and killed after `grace_ms`; the job
 *      starts then.
 *   5. Explain.  Every pending job gets one decision: START, or WAIT with a
 *      reason and an estimated start time.
 *   6. Power.  Nodes idle for `idle_power_down_ms` are reported.
 *
 * The cluster passed in is the live snapshot: on return it holds every
 * START (allocation committed) and every PREEMPT (victim released).  The
 * caller applies the decisions to its jobs.
 *
 * Policies are ops tables in a static registry chosen by name
 * (cnl_policy_find); cnl_policy_order() and cnl_policy_score() are the
 * generic wrappers the cycle calls.
 */
#ifndef CNL_SCHED_SCHED_H
#define CNL_SCHED_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/alloc.h"
#include "sched/fairshare.h"

enum cnl_prio {
	CNL_PRIO_LOW,
	CNL_PRIO_NORMAL,
	CNL_PRIO_HIGH,
	CNL_PRIO_CRITICAL,
};

enum cnl_job_state { CNL_JOB_PENDING, CNL_JOB_RUNNING };

struct cnl_job {
	uint64_t id;              /* the caller's */
	uint8_t state;            /* enum cnl_job_state */
	uint8_t prio;             /* enum cnl_prio */
	bool preemptible;         /* development training yes, inference no */
	struct cnl_alloc_req req; /* shape; req.project is the team */
	int64_t submit_ms;
	int64_t deadline_ms;           /* 0: none; with runtime_ms the job
	                                * must end by it, without one start
	                                * by it */
	int64_t runtime_ms;            /* estimate; 0: unknown (capacity is
	                                * then planned with
	                                * default_runtime_ms) */
	char dataset[CNL_DATASET_MAX]; /* prefer nodes labelled with it */
	/* If not NULL: the nodes it is placed on first (w_prefer apart from
	 * the others: a Kubernetes pod's preferences).  Not owned, like
	 * req.nodes. */
	const struct cnl_node_set *prefer;
	uint64_t gang;      /* 0: none; else all members start together */
	uint16_t gang_size; /* members the gang has in all */
	bool spread;        /* gang: each member on a node of its own */
	/* Running jobs only. */
	uint32_t alloc_id;
	int64_t start_ms;
	int64_t checkpoint_ms; /* last checkpoint; 0: never */
};

enum cnl_dec_kind {
	CNL_DEC_START,      /* pending job: starts at at_ms on alloc_id */
	CNL_DEC_WAIT,       /* pending job: waits; reason; at_ms estimate */
	CNL_DEC_PREEMPT,    /* running job: signal at at_ms, kill at kill_ms */
	CNL_DEC_POWER_DOWN, /* node idle since at_ms */
};

#define CNL_REASON_LIST(X)                                                   \
	X(CNL_WHY_STARTED, "started")                                        \
	X(CNL_WHY_BACKFILLED, "started ahead of reserved work (backfill)")   \
	X(CNL_WHY_AFTER_PREEMPTION, "starts when pre-empted work has left")  \
	X(CNL_WHY_RESERVED, "waiting for a reservation")                     \
	X(CNL_WHY_NO_CAPACITY, "waiting for capacity")                       \
	X(CNL_WHY_BEHIND_RESERVATION, "would delay reserved work")           \
	X(CNL_WHY_DEADLINE_INFEASIBLE, "deadline cannot be met by any plan") \
	X(CNL_WHY_NO_MATCHING_NODE, "no node could ever run it")             \
	X(CNL_WHY_GANG_INCOMPLETE, "gang members missing or not placeable")  \
	X(CNL_WHY_INVALID, "invalid request")                                \
	X(CNL_WHY_PREEMPTED, "pre-empted for higher-priority work")          \
	X(CNL_WHY_IDLE, "node idle")                                         \
	X(CNL_WHY_NO_NODE_TAKING_WORK,                                       \
	  "every node that could run it is cordoned, draining or lost")

enum cnl_reason {
#define CNL_REASON_ENUM(name, text) name,
	CNL_REASON_LIST(CNL_REASON_ENUM)
#undef CNL_REASON_ENUM
	    CNL_WHY_COUNT_
};

/* cnl_reason_text - a sentence for a reason code. */
const char *cnl_reason_text(enum cnl_reason r);

struct cnl_decision {
	uint8_t kind;      /* enum cnl_dec_kind */
	uint8_t reason;    /* enum cnl_reason */
	uint32_t job;      /* index into the jobs array (not POWER_DOWN) */
	uint32_t node;     /* START, PREEMPT, POWER_DOWN; WAIT: reserved node */
	uint32_t alloc_id; /* START: the allocation committed */
	uint32_t for_job;  /* PREEMPT: index of the job it makes room for */
	int64_t at_ms;     /* see enum cnl_dec_kind; -1: unknown */
	int64_t kill_ms;   /* PREEMPT */
	int error;         /* WAIT/INVALID: the CNL_E* code */
};

struct cnl_decisions {
	size_t n, cap;
	struct cnl_decision *d;
};

void cnl_decisions_done(struct cnl_decisions *d);

struct cnl_sched_config {
	char policy[CNL_NAME_MAX]; /* registry name; "cnlab" by default */
	/* Ordering weights within a class. */
	double w_deadline, w_fairshare, w_age;
	/* Placement weights. */
	double w_pack, w_locality, w_network, w_frag;
	/* Added to a placement on a node not among the job's preferred ones
	 * (struct cnl_job.prefer), for every policy: large enough by default
	 * that a preferred node where the job fits always wins. */
	double w_prefer;
	/* Placement: weight of a node order drawn with the cycle's seed (0
	 * first, 1 last), so that near-equal placements fill the same nodes
	 * first and the rest stay empty.  0: off. */
	double w_order;
	double order_multi; /* share of w_order for multi-GPU requests */
	int64_t age_max_ms; /* age factor reaches 1 */
	int64_t deadline_horizon_ms; /* slack below which urgency rises */
	int64_t min_run_ms;          /* victims must have run this long */
	int64_t grace_ms;            /* signal to kill */
	int64_t idle_power_down_ms;  /* 0: never report */
	int64_t default_runtime_ms;  /* for work without an estimate */
	int max_reservations;        /* blocked jobs given a reservation */
	int preempt_class_gap;       /* victims this many classes lower */
	int frag_candidates;         /* nodes re-scored by fragmentation */
	int64_t fs_half_life_ms;
	struct cnl_task_mix mix; /* typical requests, for fragmentation */
};

void cnl_sched_config_default(struct cnl_sched_config *cfg);

/*
 * cnl_sched_config_set - set knob @name of @cfg to @v: the weights
 * (w_deadline, w_fairshare, w_age, w_pack, w_locality, w_network, w_frag,
 * w_order: >= 0), max_reservations (0..1000), preempt_class_gap (1..3),
 * min_run_s and grace_s (seconds).  -CNL_ENOTFOUND for another name,
 * -CNL_ECONFIG for a value out of its range.  cnl_sched_knob(i): the
 * i-th name, NULL past the last.
 */
int cnl_sched_config_set(struct cnl_sched_config *cfg, const char *name,
                         double v);
const char *cnl_sched_knob(size_t i);

struct cnl_sched;

/* ---- policies --------------------------------------------------------- */

/* What a policy sees while the cycle runs. */
struct cnl_sched_view {
	const struct cnl_sched *s;
	const struct cnl_cluster *c;
	int64_t now_ms;
	uint64_t seed;
	int64_t capacity_blocks;
};

/* How a policy picks the GPU of a single-GPU slice on a node. */
enum cnl_gpu_choice {
	CNL_GPU_BEST_FIT, /* the fullest GPU that fits, lowest index on ties */
	CNL_GPU_SCORED,   /* every GPU that fits is scored; the best wins */
	CNL_GPU_RANDOM,   /* a GPU that fits, uniformly at random */
};

struct cnl_policy_ops {
	const char *name;
	const char *summary;
	uint8_t gpu_choice; /* enum cnl_gpu_choice (trace simulation) */
	/* Order key within a class; higher goes first.  NULL: submit order. */
	double (*order)(const struct cnl_sched_view *v,
	                const struct cnl_job *j);
	/* Score of placing `j` by `plan`; lower is better.  NULL: the
	 * allocator's own score (best fit). */
	double (*score)(const struct cnl_sched_view *v, const struct cnl_job *j,
	                const struct cnl_plan *plan);
	/* Optional, dearer refinement of a score, applied to the best few
	 * candidates by the scheduler and to every candidate by the
	 * simulator: returns the refined score. */
	double (*refine)(const struct cnl_sched_view *v,
	                 const struct cnl_job *j, const struct cnl_plan *plan,
	                 double score);
	bool fairshare;  /* order() uses the team factor (kept up to date) */
	bool pack_bound; /* score() >= w_pack * plan->score, other terms >= 0,
	                  * so empty nodes can be skipped once better ones
	                  * are known */
};

/* cnl_policy_find - the registered policy called `name`, or NULL. */
const struct cnl_policy_ops *cnl_policy_find(const char *name);

/* cnl_policy_list - the registry, NULL-terminated. */
const struct cnl_policy_ops *const *cnl_policy_list(void);

/* The generic wrappers: the policy's op, or the default. */
double cnl_policy_order(const struct cnl_sched_view *v,
                        const struct cnl_job *j);
double cnl_policy_score(const struct cnl_sched_view *v, const struct cnl_job *j,
                        const struct cnl_plan *plan);
double cnl_policy_refine(const struct cnl_sched_view *v,
                         const struct cnl_job *j, const struct cnl_plan *plan,
                         double score);

/* The policy a scheduler runs. */
const struct cnl_policy_ops *cnl_sched_policy(const struct cnl_sched *s);
/* The configuration it was made with. */
const struct cnl_sched_config *cnl_sched_config_of(const struct cnl_sched *s);

/* Factors the policies combine, each in 0..1. */
double cnl_sched_urgency(const struct cnl_sched_view *v,
                         const struct cnl_job *j);
double cnl_sched_age(const struct cnl_sched_view *v, const struct cnl_job *j);
double cnl_sched_team_factor(const struct cnl_sched_view *v, uint32_t team);

/* ---- the scheduler ---------------------------------------------------- */

/* cnl_sched_new - -CNL_ECONFIG for an unknown policy or a bad value. */
int cnl_sched_new(const struct cnl_sched_config *cfg, struct cnl_sched **ret);
void cnl_sched_free(struct cnl_sched *s);

/* The scheduler's fair-share account; the caller charges usage to it. */
struct cnl_fairshare *cnl_sched_fairshare(struct cnl_sched *s);

/*
 * cnl_sched_cycle - one scheduling cycle (see the top of this file).
 * `out` is emptied first.  Errors: -ENOMEM; -EINVAL for a running job
 * whose allocation is not in `c`.
 */
int cnl_sched_cycle(struct cnl_sched *s, struct cnl_cluster *c,
                    const struct cnl_job *jobs, size_t n_jobs, int64_t now_ms,
                    uint64_t seed, struct cnl_decisions *out);

/*
 * cnl_sched_cycle_inc - the same cycle, with the same decisions, kept
 * incremental: the scheduler keeps its working set between calls and
 * works on what changed since the last one.
 */
int cnl_sched_cycle_inc(struct cnl_sched *s, struct cnl_cluster *c,
                        const struct cnl_job *jobs, size_t n_jobs,
                        int64_t now_ms, uint64_t seed,
                        struct cnl_decisions *out);

/*
 * cnl_sched_summary_hits - how many pending jobs this scheduler's
 * incremental cycles have decided by their class's summary (the first
 * job of the class, same request and class, refused with the
 * reservations spent: see cycle.c) instead of searching again.
 */
size_t cnl_sched_summary_hits(const struct cnl_sched *s);

/*
 * cnl_sched_admit - at submission: can `job`'s deadline be met by some
 * plan, given the running work?  0 when it can (or has no deadline);
 * -CNL_EDEADLINE when not, with the earliest possible start in *ret_start;
 * other negative codes for invalid requests.  Changes nothing.
 */
int cnl_sched_admit(struct cnl_sched *s, struct cnl_cluster *c,
                    const struct cnl_job *jobs, size_t n_jobs,
                    const struct cnl_job *job, int64_t now_ms,
                    int64_t *ret_start);

#endif /* CNL_SCHED_SCHED_H */
