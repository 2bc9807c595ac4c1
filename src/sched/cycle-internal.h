/*
 * cycle-internal.h - the working state of one scheduling cycle (struct
 * cnl_cyc) and the functions the cycle's files share, under the prefix
 * cnl_cyc_.
 *
 * The cycle of sched.h is split at its seams, one file each; a file calls
 * only the files below it (test sched.no_cycles):
 *
 *   cycle.c    the driver (cnl_sched_cycle) and admission (cnl_sched_admit)
 *     │
 *     ├── gang.c     gangs: all members start together or none does
 *     ├── preempt.c  pre-emption: the cheapest victims that make room
 *     │     │
 *     │     ▼
 *     ├── place.c    placement search and scoring; starting a job;
 *     │     │        recording decisions
 *     │     ├──────────────────────────────┐
 *     │     ▼                              ▼
 *     ├── profile.c  running work per node,  order.c  the order jobs are
 *     │     │        what-if, earliest start,         taken in; teams and
 *     │     │        reservations, backfill           their fair share
 *     │     ▼
 *     └── prune.c    cheap before exact: per-type maxima, the failure
 *                    memory, "could it ever run"
 *
 * Every file here also calls the allocator (alloc.h), and place.c and
 * order.c call the policies through the generic wrappers (policy.c).
 * sched.c (the scheduler object) and view.c (the factors policies read)
 * share struct cnl_sched (sched-internal.h) with these files but call none
 * of them.
 */
#ifndef CNL_SCHED_CYCLE_INTERNAL_H
#define CNL_SCHED_CYCLE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/sched-internal.h"

#define NONE  UINT32_MAX /* no job, node or reservation */
#define T_INF INT64_MAX  /* never (within the work known to end) */

/* The failure memory (prune.c): per request shape, open addressing over
 * FAIL_SLOTS, up to FAIL_PAIRS (CPU, memory) pairs that found no node;
 * in the memory of searches refused by reservations (cfail), each with
 * the end the search was for. */
#define FAIL_SLOTS 1024
#define FAIL_PAIRS 6

struct cnl_cyc_fail {
	uint64_t key;
	uint8_t n;
	int64_t cpu[FAIL_PAIRS], mem[FAIL_PAIRS], end[FAIL_PAIRS];
	uint32_t node[FAIL_PAIRS]; /* cfail: a node that was passed over */
};

/* A table of them, and the slots given a key since it was last cleared
 * (a clear, at each pre-emption, forgets those alone). */
struct cnl_cyc_fail_tab {
	uint32_t n_used;
	uint16_t used[FAIL_SLOTS];
	struct cnl_cyc_fail e[FAIL_SLOTS];
};

/* The class summary (cycle.c): per class of pending work (the whole
 * request, CPU and memory included, and the priority class), the WAIT
 * decision its first job got when no node could take it, no victims made
 * room and the reservations were spent.  Every later job of the class
 * without a deadline or gang gets the same decision by one lookup, until
 * capacity grows or a cached bound is recomputed (sum_gen moves).  The
 * classes are found while the jobs are prepared (in index order, each
 * job's request still in cache): a job's class is its index in the dense
 * array of classes, carried in its order entry, so deciding it reads no
 * request.  The classes are found by an open-addressing table of their
 * indexes, SUM_SLOTS at first and doubled (rebuilt from the dense array)
 * before it is half full: a table of fixed size filled to 93% at 100k
 * pending (3.8k classes), and its probes were a tenth of the cycle's own
 * time. */
#define SUM_SLOTS 8192

struct cnl_cyc_sum {
	uint64_t key;
	uint32_t gen; /* sum_gen when the decision was made */
	bool set;     /* a decision is kept */
	uint8_t reason;
	uint8_t prio; /* the priority of the class's first job */
	int64_t at;
	struct cnl_req_prep p; /* its prepared request (compared against) */
};

/* The lower-bound cache (profile.c): up to LBC_MAX shapes. */
#define LBC_MAX 256

struct cnl_cyc_lb {
	int64_t lb;
	uint32_t node;
	/* The incremental cycle's: free_at, the first instant from
	 * max(lb, now) on that none of the node's reservations holds, found
	 * when the node's reservation version was free_ver - 1 (0: never).
	 * No job of the shape can start there before it. */
	uint32_t free_ver;
	int64_t free_at;
	/* The node's size, for cnl_cyc_node_could_host() without reading
	 * the node (the rest of that test is the shape's, the same for every
	 * job of the entry): -1 when the shape could never run there. */
	int64_t cpu_total, mem_total;
};

struct cnl_cyc_lb_cache {
	uint64_t key;
	uint32_t n;
	struct cnl_cyc_lb *v;
	/* The incremental cycle's: a min-tree over v's order (leaves at
	 * [p2, p2 + n), padding T_INF) of each node's lower bound on any
	 * start of the shape there, max(lb, now, free_at).  Kept bounds only
	 * rise, so a stale leaf is still a lower bound: the earliest-start
	 * scan goes to the next node under the best time found in O(log n)
	 * instead of visiting the nodes between.  NULL otherwise. */
	int64_t *mt;
	uint32_t p2;
	/* The incremental cycle's: each node's version (nver) when its
	 * bound, or its having none, was taken; NULL otherwise. */
	uint32_t *vers;
};

/* The fit memory (profile.c): per request (every field the allocator
 * reads), each node's first time at which the request fits by the ends of
 * the node's running work, reservations aside.  Sets of FIT_WAYS entries
 * by key; as many sets as FIT_BYTES of per-node arrays allow (within
 * FIT_MIN..FIT_MAX entries): at 100k pending ~2k requests with deadlines
 * ask, and a memory of 128 entries taken in turn kept about half. */
#define FIT_WAYS  4
#define FIT_MIN   128
#define FIT_MAX   4096
#define FIT_BYTES (16u << 20)

struct cnl_cyc_fit {
	uint64_t key; /* 0: free */
	struct cnl_req_prep p;
	uint32_t use; /* the entry's stamp (struct cnl_sched's fit_use) */
	/* Per node, side by side (one cache line for both): the time, known
	 * when at >> 32 is use, and at: use << 32 | the node's version when
	 * t was found, + 1. */
	struct cnl_cyc_fit_node {
		int64_t t;
		uint64_t at;
	} * v;
};

/* One cycle's (or one admission's) working state. */
/* Per catalog type, the largest node of the type, and the largest in all. */
struct cnl_cyc_maxima {
	int64_t type_cpu[CNL_CATALOG_MAX_TYPES],
	    type_mem[CNL_CATALOG_MAX_TYPES];
	int type_gpus[CNL_CATALOG_MAX_TYPES];
	int64_t max_cpu, max_mem;
};

struct cnl_cyc {
	struct cnl_sched *s;
	struct cnl_cluster *c;
	const struct cnl_job *jobs;
	size_t n_jobs;
	int64_t now;
	struct cnl_sched_view v;
	struct cnl_decisions *out;
	struct cnl_req_prep *prep; /* per job */
	uint8_t *done;             /* per job: has its decision */
	uint8_t *victim;           /* per job: pre-empted this cycle */
	size_t n_resv_plain;       /* reservations without a deadline */
	struct cnl_cyc_fail_tab *fail;
	/* Per shape, the searches that found no node only because each
	 * node that could take the job now would delay a reservation there
	 * (the backfill rule), with the end they were for and one such
	 * node: a later search no smaller in CPU and memory, ending no
	 * sooner, finds no node either (reservations are only added within
	 * a cycle, and capacity only shrinks but by pre-emption, which
	 * clears this), and is one passed over for a reservation too when
	 * that node still is (else the full search runs, to say why).  The
	 * incremental cycle's only (NULL otherwise), so test_sched_inc
	 * checks it against the full searches. */
	struct cnl_cyc_fail_tab *cfail;
	uint32_t conflict_node; /* the last search's first such node */
	/* The largest nodes (for "never"): of the nodes taking work, and of
	 * all nodes, cordoned, draining and lost ones too. */
	struct cnl_cyc_maxima up, all;
	/* Pre-emption: victims eligible this cycle, by class; the nodes that
	 * hold any; shapes (per class) known to find none. */
	size_t victims_by_prio[4];
	uint32_t *victim_nodes;
	size_t n_victim_nodes;
	/* Per victim node (by position in victim_nodes), its eligible
	 * victims from vl_jobs[vl_off[i]] to vl_jobs[vl_off[i + 1]], by
	 * (class, work lost, index): the cheapest first. */
	uint32_t *vl_off, *vl_jobs;
	/* The victim nodes by the key of their cheapest victim at the
	 * cycle's start (class, work lost, node): a lower bound on any
	 * job's estimate there, so the search expands nodes lazily.  The
	 * search's buffers (estimates, a heap of them) live as long. */
	struct cnl_cyc_vlb {
		int64_t lost;
		uint32_t node, vn;
		int prio;
	} * vlb;
	struct cnl_cyc_vest *vest;
	uint32_t *vheap;
	struct cnl_cyc_fail_tab *pfail;
	/* Per GPU type, the best of each node summary field: a request no
	 * node of its types could pass is refused without a node scan. */
	struct cnl_cyc_type_max {
		int64_t cpu, mem;
		uint8_t n_empty, block, mig, host;
		bool dirty, any;
	} tmax[CNL_CATALOG_MAX_TYPES];
	/* Per shape, every node's capacity-only lower bound on the start
	 * time (GPU only), sorted.  Placements only raise the true bounds,
	 * so a cached one stays a lower bound; pre-emption clears it. */
	struct cnl_cyc_lb_cache *lbc;
	size_t n_lbc;
	/* The entries pre-emption set aside (the incremental cycle's):
	 * capacity grew on a node, so the bounds of the nodes whose version
	 * moved are taken again when the shape is next asked for, and the
	 * others kept: each node's bound is a function of its own state
	 * (cnl_cyc_bounds_stale). */
	struct cnl_cyc_lb_cache *lbs;
	size_t n_lbs;
	/* Per node, a version moved whenever its capacity changes (a start,
	 * a gang rolled back, a pre-emption: cnl_cyc_tmax_dirty); and the fit
	 * memory, whose times are exact while the node's version stands and
	 * lower bounds after (placements only make fits later), forgotten
	 * on a node when its capacity grows (gver).  The incremental cycle's
	 * only; NULL otherwise. */
	uint32_t *nver;
	/* Per node, its version when its capacity last grew (pre-emption,
	 * a gang rolled back): a fit time found before that is no bound at
	 * all (cnl_cyc_fit_grown), the rest of the fit memory stands.  The
	 * incremental cycle's only; NULL otherwise. */
	uint32_t *gver;
	/* Per node, a version moved by every reservation made on it (the
	 * incremental cycle's; NULL otherwise): struct cnl_cyc_lb's free_at
	 * stands while it does. */
	uint32_t *rver;
	/* The class summary (the incremental cycle's only, NULL
	 * otherwise) and its generation: moved by whatever could change a
	 * summarised decision (pre-emption: the failure memories cleared;
	 * a lower-bound cache entry dropped). */
	struct cnl_cyc_sum *sum; /* the classes, n_sum of them */
	uint32_t *sum_tab;       /* their indexes by key; NONE: free */
	size_t n_sum, sum_mask;  /* the table has sum_mask + 1 slots */
	uint32_t sum_gen;
	size_t sum_hits; /* jobs decided by the summary this cycle */
};

/* The scratch buffers a cycle keeps in its scheduler between cycles. */
enum {
	KEEP_PREP,
	KEEP_DONE,
	KEEP_VICTIM,
	KEEP_GANGS,
	KEEP_ORD,
	KEEP_QS,
	KEEP_TEAMS,
	KEEP_SUM,
	KEEP_ORD_TMP,
	KEEP_SUM_TAB,
	KEEP_ORD_BKT
};

/* `bytes` of scratch: the incremental cycle's kept buffer `k` (grown as
 * needed, owned by the scheduler), else a fresh one (the caller frees it,
 * see cnl_cyc_unkeep); NULL when out of memory. */
static inline void *cnl_cyc_keep(struct cnl_sched *s, int k, size_t bytes)
{
	struct cnl_keep *b = &s->keep[k];

	if (!s->inc)
		return malloc(bytes);
	if (b->cap < bytes) {
		void *n = malloc(bytes + bytes / 4);
		if (!n)
			return NULL;
		free(b->p);
		b->p = n;
		b->cap = bytes + bytes / 4;
	}
	return b->p;
}

/* Free scratch from cnl_cyc_keep() unless the scheduler keeps it. */
static inline void cnl_cyc_unkeep(struct cnl_sched *s, void *p)
{
	if (!s->inc)
		free(p);
}

/* The run time capacity is planned with: the job's estimate, or the
 * configured default for work without one. */
static inline int64_t cnl_cyc_runtime_of(const struct cnl_cyc *y,
                                         const struct cnl_job *j)
{
	return j->runtime_ms > 0 ? j->runtime_ms : y->s->cfg.default_runtime_ms;
}

/* What a deadline is checked against: the job's own run time, or none
 * (it must start by then) when it gave none.  Capacity is still planned
 * with cnl_cyc_runtime_of(). */
static inline int64_t cnl_cyc_deadline_runtime(const struct cnl_job *j)
{
	return j->runtime_ms > 0 ? j->runtime_ms : 0;
}

/* Commit a plan found without block masks (the search's): the masks are
 * filled in first. */
static inline int cnl_cyc_commit_plan(struct cnl_cluster *c,
                                      const struct cnl_req_prep *p,
                                      const struct cnl_plan *plan,
                                      uint32_t *ret_id)
{
	struct cnl_plan pl = *plan;

	cnl_alloc_plan_masks(c, &pl);
	return cnl_alloc_commit(c, p, &pl, ret_id);
}

/* ---- prune.c: cheap before exact -------------------------------------- */

/* The shape of a request for the caches: everything but CPU and memory,
 * and the project when asked for. */
uint64_t cnl_cyc_shape_key(const struct cnl_req_prep *p, bool with_project);
/* The failure memory's key (block requests depend on their project). */
uint64_t cnl_cyc_fail_key(const struct cnl_req_prep *p);
/* Whether table `tab` holds, under key `k`, a failure that `p` (no
 * smaller in CPU and memory) must repeat; note one. */
bool cnl_cyc_fail_known_in(const struct cnl_cyc_fail_tab *tab, uint64_t k,
                           const struct cnl_req_prep *p);
void cnl_cyc_fail_note_in(struct cnl_cyc_fail_tab *tab, uint64_t k,
                          const struct cnl_req_prep *p);
/* The same on the placement memory, by the request's own key. */
bool cnl_cyc_fail_known(const struct cnl_cyc *y, const struct cnl_req_prep *p);
void cnl_cyc_fail_note(struct cnl_cyc *y, const struct cnl_req_prep *p);
/* The same for searches refused only by reservations (y->cfail), for
 * work ending at `end`: the node the failure noted passed over for a
 * reservation, or NONE (also without y->cfail); note one, with such a
 * node. */
uint32_t cnl_cyc_cfail_known(const struct cnl_cyc *y,
                             const struct cnl_req_prep *p, int64_t end);
void cnl_cyc_cfail_note(struct cnl_cyc *y, const struct cnl_req_prep *p,
                        int64_t end, uint32_t node);
/* Forget every failure (capacity grew: pre-emption). */
void cnl_cyc_fail_clear(struct cnl_cyc *y);
/* Node `node` changed: its type's maxima are recomputed when next asked. */
void cnl_cyc_tmax_dirty(struct cnl_cyc *y, uint32_t node);
/* True when no node of the request's types could pass the allocator's
 * summary test. */
bool cnl_cyc_tmax_reject(struct cnl_cyc *y, const struct cnl_req_prep *p);
/* Could `p` ever run on node `i` (up, of its type, big enough)? */
bool cnl_cyc_node_could_host(const struct cnl_cyc *y, uint32_t i,
                             const struct cnl_req_prep *p);
/* Could `p` ever run on some node taking work, even an empty one? */
bool cnl_cyc_could_ever_fit(const struct cnl_cyc *y,
                            const struct cnl_req_prep *p);
/* Could it on some node of any state (once cordoned ones are back)? */
bool cnl_cyc_could_fit_any_node(const struct cnl_cyc *y,
                                const struct cnl_req_prep *p);
/* The largest node per type and in all, and the cluster's capacity. */
void cnl_cyc_setup_types(struct cnl_cyc *y);

/* ---- profile.c: the availability profile in time --------------------- */

/* The running work of node `node`, kept sorted by (end, allocation). */
int cnl_cyc_run_add(struct cnl_sched *s, uint32_t node, int64_t end,
                    uint32_t alloc_id, uint32_t job);
void cnl_cyc_run_del(struct cnl_sched *s, uint32_t node, uint32_t alloc_id);
/* Size the per-node state to the cluster and list the running work;
 * -EINVAL for a running job whose allocation is not in the cluster. */
int cnl_cyc_setup_runs(struct cnl_cyc *y);

/* What-if: allocations released with cnl_cyc_save_free() are put back,
 * in reverse order, by cnl_cyc_restore_all(). */
struct cnl_cyc_saved {
	int n, cap;
	struct cnl_alloc *a;
};

int cnl_cyc_save_free(struct cnl_cluster *c, struct cnl_cyc_saved *sv,
                      uint32_t id);
void cnl_cyc_restore_all(struct cnl_cluster *c, struct cnl_cyc_saved *sv);

/* A node's free capacity as the capacity-only reasoning sees it. */
struct cnl_cyc_cap_view {
	int64_t cpu, mem;
	int64_t slots; /* workloads it may still take (pods_max) */
	int n_gpus;
	int freeb[CNL_NODE_MAX_GPUS];
	int left[CNL_NODE_MAX_GPUS]; /* allocations still on the GPU */
};

/* Fill `cv` for node `node` (GPU only: CPU and memory unbounded); returns
 * the blocks `p` needs on one GPU. */
int cnl_cyc_cap_view_init(const struct cnl_cyc *y, uint32_t node,
                          const struct cnl_req_prep *p, bool gpu_only,
                          struct cnl_cyc_cap_view *cv);
bool cnl_cyc_cap_fits(const struct cnl_cyc_cap_view *cv,
                      const struct cnl_alloc_req *r, int need);
/* Give allocation `id` back to the view. */
void cnl_cyc_cap_view_release(const struct cnl_cluster *c,
                              struct cnl_cyc_cap_view *cv, uint32_t id);
/* Forget the cached lower bounds (the end of a cycle). */
void cnl_cyc_bounds_clear(struct cnl_cyc *y);
/* Capacity grew (pre-emption): the cached lower bounds may no longer be
 * the nodes'.  The incremental cycle sets them aside, to be taken again
 * node by node where a node's version moved (bounds()); the from-scratch
 * one forgets them.  The fit memory: cnl_cyc_fit_grown(). */
void cnl_cyc_bounds_stale(struct cnl_cyc *y);
/* Free the fit memory (the end of a cycle). */
void cnl_cyc_fit_done(struct cnl_cyc *y);
/* Capacity grew on `node` (after cnl_cyc_tmax_dirty moved its version):
 * the fit times found there before stop counting, even as lower bounds;
 * the from-scratch cycle, which keeps none, has nothing to do. */
void cnl_cyc_fit_grown(struct cnl_cyc *y, uint32_t node);
/* The earliest time and node at which `p` could start, honouring the
 * reservations already made; T_INF when none is known. */
int64_t cnl_cyc_earliest(struct cnl_cyc *y, const struct cnl_req_prep *p,
                         int64_t rt, uint32_t *ret_node);
/* The estimated start of a waiting job (a lower bound); T_INF: unknown. */
int64_t cnl_cyc_estimate(struct cnl_cyc *y, const struct cnl_req_prep *p);
/* Reserve `node` for `job` from t0 for rt. */
int cnl_cyc_reserve(struct cnl_cyc *y, uint32_t job, uint32_t node, int64_t t0,
                    int64_t rt);
/* The backfill rule: may `p`, ending at `end`, start now by `plan`
 * without delaying a reservation on the plan's node? */
bool cnl_cyc_resv_ok(struct cnl_cyc *y, const struct cnl_req_prep *p,
                     const struct cnl_plan *plan, int64_t end);

/* ---- order.c: the order jobs are taken in, and teams ------------------ */

/* Build this cycle's teams: their shares, decayed usage and holdings. */
int cnl_cyc_setup_teams(struct cnl_cyc *y);
/* Team `project` holds `blocks` more (or fewer); its factor follows. */
void cnl_cyc_team_hold(struct cnl_cyc *y, uint32_t project, int64_t blocks);

/* The pending jobs in the order they are taken. */
struct cnl_cyc_order {
	struct cnl_cyc_order_ent *ord; /* by (class, team, key, submit) */
	struct cnl_cyc_order_ent *tmp; /* the sort's scratch */
	uint32_t *bkt; /* per entry, its (class, team) bucket; NONE: none */
	size_t n;
	struct cnl_cyc_queue *qs; /* the current class's team queues */
	size_t nq;
	size_t b;     /* the current class ends at ord[b] */
	size_t last;  /* the queue taken from last, or SIZE_MAX */
	uint32_t cls; /* the summary class of the job returned last */
};

int cnl_cyc_order_init(struct cnl_sched *s, struct cnl_cyc_order *o,
                       size_t n_jobs);
void cnl_cyc_order_done(struct cnl_sched *s, struct cnl_cyc_order *o);
/* Add pending job `job` of summary class `cls` (NONE: none) with its
 * policy key as of now. */
void cnl_cyc_order_add(struct cnl_cyc *y, struct cnl_cyc_order *o, uint32_t job,
                       uint32_t cls);
/* Sort what was added; then take jobs with cnl_cyc_order_next(). */
void cnl_cyc_order_sort(struct cnl_cyc *y, struct cnl_cyc_order *o);
/* The next job without a decision, or NONE at the end (its summary class
 * in o->cls).  The team of the job returned before gets its head's key
 * recomputed first, so the decision just made (its held capacity)
 * counts. */
uint32_t cnl_cyc_order_next(struct cnl_cyc *y, struct cnl_cyc_order *o);

/* ---- place.c: placement, starting, decisions --------------------------- */

int cnl_cyc_push(struct cnl_decisions *out, const struct cnl_decision *d);
/* Record job `job`'s decision (it then counts as done). */
int cnl_cyc_decide(struct cnl_cyc *y, uint32_t job, enum cnl_dec_kind kind,
                   enum cnl_reason why, uint32_t node, uint32_t alloc_id,
                   int64_t at, int err);
/* The best node for pending job `job` now; false when none.  *conflict
 * is set when some node was passed over only for a reservation. */
bool cnl_cyc_search(struct cnl_cyc *y, uint32_t job, struct cnl_plan *ret,
                    bool *conflict);
/* Commit job `job` by `plan` from `start`: the allocation, its running
 * work entry, its team. */
int cnl_cyc_start_job(struct cnl_cyc *y, uint32_t job,
                      const struct cnl_plan *plan, int64_t start,
                      uint32_t *ret_id);
/* Try to start `job` now: 1 started, 0 not, < 0 error. */
int cnl_cyc_try_start(struct cnl_cyc *y, uint32_t job, bool *conflict);

/* ---- preempt.c: pre-emption ------------------------------------------- */

/* The running jobs pre-emption may take this cycle, per node. */
int cnl_cyc_setup_victims(struct cnl_cyc *y);
/* Pre-empt for `job` if victims exist: 1 done, 0 no, < 0 error. */
int cnl_cyc_try_preempt(struct cnl_cyc *y, uint32_t job);

/* ---- gang.c: gangs ----------------------------------------------------- */

/* Start all `n` of a gang's members (of `size` in all) now, or none. */
int cnl_cyc_start_gang(struct cnl_cyc *y, const uint32_t *members, size_t n,
                       size_t size);

#endif /* CNL_SCHED_CYCLE_INTERNAL_H */
