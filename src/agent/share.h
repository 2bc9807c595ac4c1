/*
 * share.h - what a GPU slice is worth in compute, in the terms of the
 * device its processes see, and which board it shares (the rule behind
 * the share_pct and board of every slice's region; region.h).
 *
 * A block is 1% of a whole GPU's compute wherever it lives.  On a GPU in
 * block mode the processes see the whole GPU, so N blocks are a share of
 * N%.  Inside a MIG instance the processes see only the instance, whose
 * compute is `compute` of the GPU's 7 compute slices (the catalog's
 * profile), so N blocks are N% of the GPU = N * 7 / compute percent of the
 * instance, rounded to the nearest percent: a block-hosting 1g instance
 * gives each of its blocks 7% of its time (5 blocks: 35%; its 14 blocks:
 * 98%).  A slice worth the whole device (100 blocks on a GPU; on an
 * instance at least the blocks the allocator counts for it, 100 * compute
 * / 7 rounded down, which is what a dedicated instance holds) is not
 * throttled.
 *
 * A slice shares a board with the other slices of its device, so the time
 * of idle slices goes to busy ones by share: one board per GPU in block
 * mode, one per MIG instance (named by its GPU and start slot) inside MIG.
 * Every slice that can be resized gets its device's board, even while its
 * share is 0: a slice of a block-mode GPU, and any slice inside MIG (the
 * agent cannot tell all 14 blocks of a host, which may shrink, from a
 * dedicated 1g instance, which cannot; a board costs an unthrottled slice
 * nothing).  Only a whole GPU has none.  The agent calls
 * cnl_agent_slice_share() when it creates a region and again when it
 * resizes a live slice (the board, written at creation, stays).
 */
#ifndef CNL_AGENT_SHARE_H
#define CNL_AGENT_SHARE_H

#include <stdbool.h>
#include <stddef.h>

#include "sched/catalog.h"

struct cnl_slice_share {
	unsigned share_pct; /* of the device seen; 0: not throttled */
	bool board;         /* gets its device's board (share.h) */
};

/*
 * cnl_agent_slice_share - the compute share of a slice of @blocks blocks
 * on a GPU of type @t, inside a MIG instance of @mig_profile (catalog
 * name) or, with @mig_profile NULL or "", on the GPU itself.  Returns 0,
 * or -CNL_EBLOCKS (blocks < 0), -CNL_EPROFILE / -CNL_ENOMIG (@t has no such
 * profile); @ret is untouched on failure.
 */
int cnl_agent_slice_share(const struct cnl_gpu_type *t, int blocks,
                          const char *mig_profile, struct cnl_slice_share *ret);

/*
 * cnl_agent_slice_board - the path of the board of the device a slice
 * sees, under @work_dir: "regions/gpuG.board" for GPU @gpu in block mode,
 * "regions/gpuG.migS.board" for the MIG instance at start slot @mig_start
 * (with @mig_profile set).  Returns 0 or -ENAMETOOLONG.
 */
int cnl_agent_slice_board(const char *work_dir, int gpu,
                          const char *mig_profile, int mig_start, char *buf,
                          size_t len);

#endif /* CNL_AGENT_SHARE_H */
