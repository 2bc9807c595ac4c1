/*
 * share.c - the compute share of a slice on the device its processes see
 * (share.h has the rule and why).  Pure: no state, no I/O, so the agent's
 * start and resize paths and the tests compute the same figure.
 */
#include <errno.h>
#include <stdio.h>

#include "agent/share.h"
#include "cnlab/errors.h"

int cnl_agent_slice_share(const struct cnl_gpu_type *t, int blocks,
                          const char *mig_profile, struct cnl_slice_share *ret)
{
	unsigned share, compute, worth;
	bool board = true;
	int k;

	if (blocks < 0)
		return -CNL_EBLOCKS;
	if (!mig_profile || !mig_profile[0]) {
		share = blocks >= 100 ? 0 : (unsigned)blocks;
		board = blocks < 100;
	} else {
		if (!t)
			return -CNL_ENOMIG;
		if ((k = cnl_mig_find(t, mig_profile)) < 0)
			return k;
		compute = t->mig[k].compute;
		/* What the allocator counts a dedicated instance as. */
		worth = 100 * compute / CNL_MIG_COMPUTE_SLICES;
		if ((unsigned)blocks >= worth)
			share = 0;
		else
			share = ((unsigned)blocks * CNL_MIG_COMPUTE_SLICES * 2 +
			         compute) /
			        (2 * compute);
	}
	if (share >= 100)
		share = 0;
	ret->share_pct = share;
	ret->board = board;
	return 0;
}

int cnl_agent_slice_board(const char *work_dir, int gpu,
                          const char *mig_profile, int mig_start, char *buf,
                          size_t len)
{
	int n;

	if (mig_profile && mig_profile[0])
		n = snprintf(buf, len, "%s/regions/gpu%d.mig%d.board", work_dir,
		             gpu, mig_start);
	else
		n = snprintf(buf, len, "%s/regions/gpu%d.board", work_dir, gpu);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}
