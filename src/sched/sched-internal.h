/*
 * sched-internal.h - the scheduler's state (struct cnl_sched), shared by
 * the files of the scheduler proper: sched.c (creates and frees it), the
 * cycle's files (cycle-internal.h, which keep it current), view.c (reads
 * the teams and gang nodes for the policies) and policy.c (the wrappers
 * read the policy the scheduler runs).  Policy files never include it:
 * they see the scheduler through view-internal.h only.
 */
#ifndef CNL_SCHED_SCHED_INTERNAL_H
#define CNL_SCHED_SCHED_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "sched/alloc.h"
#include "sched/sched.h"

/* A team (project) as this cycle sees it. */
struct cnl_team {
	uint32_t project;
	double u_hist;       /* normalised decayed usage, 7 days */
	double share;        /* normalised share weight */
	int64_t held_blocks; /* held now, including this cycle's starts */
	double factor;       /* fair-share factor, kept current */
	bool moved;          /* held_blocks changed since the cycle began */
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
	uint32_t next; /* next on the node by start time, or UINT32_MAX */
	int64_t t0, t1;
};

struct cnl_sched {
	/* First: view-internal.h reads the config through the pointer. */
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
	/* The cycle running is cnl_sched_cycle_inc's (cycle.c): the same
	 * decisions, by the faster paths. */
	bool inc;
	/* The incremental cycle's per-job scratch, kept between its cycles
	 * (cnl_cyc_keep): with 100k pending, fresh arrays each cycle paid
	 * their page faults every time. */
	struct cnl_keep {
		void *p;
		size_t cap;
	} keep[12];
	/* Pending jobs the incremental cycles decided by their class's
	 * summary (cycle.c), in all: for tests and benchmarks. */
	size_t sum_hits;
	/* The incremental cycle's fit memory (profile.c): its entries and
	 * their per-node arrays (for fit_nn nodes) kept between cycles;
	 * fit_use stamps the times of an entry's each use, so a reused
	 * entry needs no clearing.  Every key is freed at a cycle's end. */
	struct cnl_cyc_fit *fit;
	size_t fit_cap;
	uint32_t fit_nn, fit_use;
};

/* cnl_sched_fit_free - free the fit memory (profile.c). */
void cnl_sched_fit_free(struct cnl_sched *s);

_Static_assert(offsetof(struct cnl_sched, cfg) == 0,
               "cnl_sched_view_config() reads the config at offset 0");

/* cnl_sched_team_find - the team of `project` this cycle, or NULL.  The
 * teams are sorted by project. */
static inline struct cnl_team *cnl_sched_team_find(const struct cnl_sched *s,
                                                   uint32_t project)
{
	size_t lo = 0, hi = s->n_teams;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (s->teams[mid].project < project)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < s->n_teams && s->teams[lo].project == project)
		return &s->teams[lo];
	return NULL;
}

#endif /* CNL_SCHED_SCHED_INTERNAL_H */
