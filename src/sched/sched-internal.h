/*
 * sched-internal.h - the scheduler's state, shared by sched.c and
 * policy.c only.
 */
#ifndef CNL_SCHED_SCHED_INTERNAL_H
#define CNL_SCHED_SCHED_INTERNAL_H

#include "sched/alloc-internal.h"
#include "sched/sched.h"

/* A team (project) as this cycle sees it. */
struct cnl_team {
	uint32_t project;
	double u_hist;       /* normalised decayed usage, 7 days */
	double share;        /* normalised share weight */
	int64_t held_blocks; /* held now, including this cycle's starts */
	double factor;       /* fair-share factor, kept current */
};

/* A piece of running work on a node, with its expected end. */
struct cnl_run {
	int64_t end_ms;
	uint32_t alloc_id;
	uint32_t job; /* index in jobs, or UINT32_MAX for none */
};

struct cnl_run_vec {
	uint32_t n, cap;
	struct cnl_run *v;
};

/* A reservation made this cycle: `job` may start on `node` at t0. */
struct cnl_resv {
	uint32_t job;
	uint32_t node;
	uint32_t next; /* next reservation on the node, or UINT32_MAX */
	int64_t t0, t1;
};

struct cnl_sched {
	struct cnl_sched_config cfg;
	const struct cnl_policy_ops *pol;
	struct cnl_fairshare fs;
	/* Across cycles: when each node became idle (0: busy). */
	int64_t *idle_since;
	uint32_t n_idle;
	/* Per-cycle scratch, kept to avoid allocating every cycle. */
	struct cnl_team *teams;
	size_t n_teams, cap_teams;
	struct cnl_run_vec *runs; /* per node */
	uint32_t n_runs;
	struct cnl_resv *resv;
	size_t n_resv, cap_resv;
	uint32_t *resv_head;  /* per node: first reservation, or UINT32_MAX */
	uint32_t *gang_nodes; /* nodes of the gang being placed */
	int n_gang_nodes;
};

/* The placement baselines of the FGD paper (policy_fgd.c). */
extern const struct cnl_policy_ops cnl_policy_random, cnl_policy_dotprod,
    cnl_policy_gpuclustering, cnl_policy_gpupacking, cnl_policy_bestfit,
    cnl_policy_fgd;

/* The network distance from `node` to the gang members placed so far:
 * 0 same node or no gang, 1 same rack, 2 same zone, 3 same cluster,
 * 4 elsewhere (the largest over members). */
double cnl_sched_gang_distance(const struct cnl_sched_view *v, uint32_t node);

#endif /* CNL_SCHED_SCHED_INTERNAL_H */
