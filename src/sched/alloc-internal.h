/*
 * alloc-internal.h - state shared between the allocator's files (alloc.c,
 * check.c, frag.c) and nobody else.
 */
#ifndef CNL_SCHED_ALLOC_INTERNAL_H
#define CNL_SCHED_ALLOC_INTERNAL_H

#include "sched/alloc.h"

/* cnl_node_summary - recompute node `i`'s summary fields and its hot copy
 * after any change to it. */
void cnl_node_summary(struct cnl_cluster *c, uint32_t i);

/* cnl_node_summary_of - the summary fields of `n` computed afresh into
 * `out` (a copy of the node), for the checker. */
void cnl_node_summary_of(const struct cnl_cluster *c, struct cnl_node *out);

/* For the scheduler, which scores many nodes per job: the cheap upper-bound
 * test, planning without block masks, and filling in the winner's masks. */
bool cnl_alloc_may_fit(const struct cnl_cluster *c, uint32_t node,
                       const struct cnl_req_prep *p);
bool cnl_alloc_plan_fast(const struct cnl_cluster *c,
                         const struct cnl_req_prep *p, uint32_t node,
                         struct cnl_plan *ret);
void cnl_alloc_plan_masks(const struct cnl_cluster *c, struct cnl_plan *pl);

#endif /* CNL_SCHED_ALLOC_INTERNAL_H */
