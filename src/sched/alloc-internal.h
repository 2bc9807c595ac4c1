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

#endif /* CNL_SCHED_ALLOC_INTERNAL_H */
