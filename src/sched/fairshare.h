/*
 * fairshare.h - per-team GPU usage over a rolling 7-day window, decayed, and
 * the fair-share factor the scheduler orders teams by.
 *
 * Usage is GPU block-seconds (one block held for one second = 1).  It is
 * kept per project in hourly buckets covering the last 7 days (a ring of
 * 168 buckets); usage older than 7 days is forgotten.  When read at time
 * `now`, each bucket counts with weight 2^(-age / half_life), age measured
 * from the bucket's middle, so yesterday's heavy use weighs more than last
 * week's but less than today's.  Normalised usage divides that by what the
 * whole cluster could have delivered over the same weighted window
 * (capacity_blocks * sum of the bucket weights * 3600 s), so it is in 0..1
 * whatever the cluster's size.
 *
 * The factor is 2^(-(U_hist + U_now) / S): U_hist the normalised decayed
 * usage, U_now the team's share of the cluster held right now (so a burst
 * of placements within one scheduling cycle counts at once, before any
 * usage is charged), S the team's normalised share (its weight over the sum
 * of the weights of the teams given).  1 for a team that has used nothing,
 * towards 0 for one that has used far more than its share.
 *
 * Pure: time is an argument; no clock, no globals, no I/O.
 */
#ifndef CNL_SCHED_FAIRSHARE_H
#define CNL_SCHED_FAIRSHARE_H

#include <stddef.h>
#include <stdint.h>

#define CNL_FS_BUCKET_MS            (3600LL * 1000)
#define CNL_FS_BUCKETS              168 /* 7 days of hours */
#define CNL_FS_WINDOW_MS            (CNL_FS_BUCKETS * CNL_FS_BUCKET_MS)
#define CNL_FS_HALF_LIFE_DEFAULT_MS (24LL * 3600 * 1000)

struct cnl_fs_team {
	uint32_t project;
	double weight;                /* share weight, default 1 */
	int64_t hour[CNL_FS_BUCKETS]; /* absolute hour of each bucket */
	double usage[CNL_FS_BUCKETS]; /* block-seconds in that hour */
};

struct cnl_fairshare {
	int64_t half_life_ms;
	size_t n, cap;
	struct cnl_fs_team *teams; /* sorted by project */
};

/* cnl_fs_init - an empty account; half_life_ms <= 0 means the default. */
void cnl_fs_init(struct cnl_fairshare *fs, int64_t half_life_ms);
void cnl_fs_done(struct cnl_fairshare *fs);

/* cnl_fs_set_weight - a team's share weight (> 0); -CNL_ESIZE otherwise. */
int cnl_fs_set_weight(struct cnl_fairshare *fs, uint32_t project,
                      double weight);

/*
 * cnl_fs_charge - `blocks` blocks held by `project` from t0_ms to t1_ms,
 * split over the hourly buckets the interval covers.  Hours older than 7
 * days before the team's newest charged hour are ignored (a whole interval
 * that old changes nothing).  Errors:
 * -CNL_ESIZE (negative blocks, t1 < t0), -ENOMEM.
 */
int cnl_fs_charge(struct cnl_fairshare *fs, uint32_t project, int64_t blocks,
                  int64_t t0_ms, int64_t t1_ms);

/* cnl_fs_raw - block-seconds charged to `project` in the 168 hours ending
 * with the hour of `now_ms`, undecayed (for reports and tests). */
double cnl_fs_raw(const struct cnl_fairshare *fs, uint32_t project,
                  int64_t now_ms);

/* cnl_fs_usage - normalised decayed usage U_hist of `project` at `now_ms`
 * for a cluster of `capacity_blocks` blocks (0 when capacity is 0). */
double cnl_fs_usage(const struct cnl_fairshare *fs, uint32_t project,
                    int64_t now_ms, int64_t capacity_blocks);

/*
 * cnl_fs_factor - the fair-share factor of a team.  `u_hist` from
 * cnl_fs_usage(), `u_now` = blocks the team holds now / capacity, `share`
 * = the team's normalised share in (0, 1].  Returns a value in (0, 1].
 */
double cnl_fs_factor(double u_hist, double u_now, double share);

/* cnl_fs_weight - the team's weight (1 when never set). */
double cnl_fs_weight(const struct cnl_fairshare *fs, uint32_t project);

#endif /* CNL_SCHED_FAIRSHARE_H */
