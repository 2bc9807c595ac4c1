/*
 * view-internal.h - what a scheduling policy may see of a cycle, beyond
 * the public struct cnl_sched_view and the factors of sched.h (urgency,
 * age, team factor): the scheduler's configuration and the network
 * distance to the gang being placed.
 *
 * This is the policies' whole window on the scheduler.  A policy file
 * (policy/<name>.c) includes this header (through policy-internal.h), never
 * sched-internal.h, and calls only view.c, the allocator and the
 * fragmentation measure: so policies sit below the cycle that calls them,
 * and no call goes back up (scripts/check-objects --cycles, test
 * sched.no_cycles).
 *
 *   cycle files ──> policy.c (registry, wrappers) ──> policy/<name>.c
 *        │                                                  │
 *        └───────────────> view.c (factors) <───────────────┘
 */
#ifndef CNL_SCHED_VIEW_INTERNAL_H
#define CNL_SCHED_VIEW_INTERNAL_H

#include "sched/sched.h"

/*
 * cnl_sched_view_config - the configuration of the scheduler `v` belongs
 * to.  struct cnl_sched begins with its configuration (sched-internal.h
 * asserts it), so a pointer to the scheduler is a pointer to its config:
 * the policies read their weights without a call and without seeing the
 * rest of the scheduler's state.
 */
static inline const struct cnl_sched_config *
cnl_sched_view_config(const struct cnl_sched_view *v)
{
	return (const struct cnl_sched_config *)(const void *)v->s;
}

/* cnl_sched_gang_distance - the network distance from `node` to the gang
 * members placed so far: 0 same node or no gang, 1 same rack, 2 same zone,
 * 3 same cluster, 4 elsewhere (the largest over members). */
double cnl_sched_gang_distance(const struct cnl_sched_view *v, uint32_t node);

#endif /* CNL_SCHED_VIEW_INTERNAL_H */
