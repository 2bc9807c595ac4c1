/*
 * alloc-internal.h - state shared between the allocator's files (alloc.c,
 * check.c, frag.c) and nobody else.
 */
#ifndef CNL_SCHED_ALLOC_INTERNAL_H
#define CNL_SCHED_ALLOC_INTERNAL_H

#include "sched/alloc.h"

/* cnl_node_summary - recompute `n`'s fast-rejection summary fields. */
void cnl_node_summary(const struct cnl_cluster *c, struct cnl_node *n);

#endif /* CNL_SCHED_ALLOC_INTERNAL_H */
