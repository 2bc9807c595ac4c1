/*
 * fifo.c - the submit-order baseline: jobs within a class in the order
 * they came, each on the allocator's best fit (no score of its own).  Same
 * cycle machinery as every policy, so it measures what the cnlab policy's
 * order and placement add.
 */
#include "sched/policy/policy-internal.h"

static double fifo_order(const struct cnl_sched_view *v,
                         const struct cnl_job *j)
{
	(void)v;
	return -(double)j->submit_ms;
}

const struct cnl_policy_ops cnl_policy_fifo = {
    .name = "fifo",
    .summary = "submit order within a class; best fit",
    .order = fifo_order,
    .score = NULL,
    .fairshare = false,
};
