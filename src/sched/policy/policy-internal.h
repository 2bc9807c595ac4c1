/*
 * policy-internal.h - the policies, one ops table per file of this
 * directory, as the registry (policy.c) lists them.
 *
 * A policy decides two things: the order of pending jobs within a priority
 * class (order) and the preference among nodes that can take a job
 * (score, and optionally a dearer refine of the best few).  Admission,
 * reservations, backfill and pre-emption are the cycle's, the same for
 * every policy, so that policies compare fairly.
 *
 * A policy file includes this header and nothing of the scheduler's
 * state: it sees the cycle through struct cnl_sched_view, the factors of
 * sched.h and view-internal.h (view.c), the allocator (alloc.h) and the
 * fragmentation measure (frag.c).  Adding a policy: a file here defining
 * one `const struct cnl_policy_ops cnl_policy_<name>`, its declaration
 * below, a row in policy.c's registry and a line in CMakeLists.txt.
 */
#ifndef CNL_SCHED_POLICY_INTERNAL_H
#define CNL_SCHED_POLICY_INTERNAL_H

#include "sched/view-internal.h"

/* Our own (cnlab.c) and the submit-order baseline (fifo.c). */
extern const struct cnl_policy_ops cnl_policy_cnlab, cnl_policy_fifo;

/* The placement baselines of the FGD paper (see fgd-internal.h), each in
 * the file of its name. */
extern const struct cnl_policy_ops cnl_policy_random, cnl_policy_dotprod,
    cnl_policy_gpuclustering, cnl_policy_gpupacking, cnl_policy_bestfit,
    cnl_policy_fgd;

#endif /* CNL_SCHED_POLICY_INTERNAL_H */
