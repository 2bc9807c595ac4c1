/*
 * fairshare.c - per-team decayed GPU usage and the fair-share factor.
 *
 * Design.  Each team owns a ring of CNL_FS_BUCKETS hourly buckets.  Hour h
 * (h = floor(t_ms / CNL_FS_BUCKET_MS), floored also for negative times)
 * lives in slot h mod CNL_FS_BUCKETS, and the slot records the absolute hour
 * it holds.  Two hours that share a slot are a multiple of 7 days apart, so
 * a slot holding another hour than the one asked for is stale by
 * construction: a write of a newer hour overwrites it, and a read checks
 * that the hour it finds lies in the window it wants.  No sweep is ever
 * needed and nothing depends on the order in which hours were charged.
 *
 * Invariants:
 *   1. fs->teams[0..n) is sorted by project, strictly increasing, so a team
 *      is found by binary search and appears once.
 *   2. A slot's hour is EMPTY or congruent to its index mod CNL_FS_BUCKETS.
 *   3. A charge never writes an hour at or below (the team's newest
 *      charged hour - 168): such usage is dropped when charged, as
 *      fairshare.h promises, so a read "in the past" never sees usage the
 *      account had already forgotten.  Slots written earlier may still
 *      hold such hours; they are stale and reads skip them.
 *
 * Reading at now_ms covers the hours (now_hour - 168, now_hour].  A bucket's
 * age is measured from the middle of its hour and clamped at 0, so the
 * current hour counts with weight 1.  The normaliser sums the same weights
 * over all 168 window hours, whether charged or not, so a cluster kept busy
 * for the whole window reads as 1 whatever the half-life.
 *
 * Arithmetic on times stays in hours or within one hour wherever possible,
 * so no product of a time and a constant can overflow int64.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "sched/fairshare.h"

#define EMPTY     INT64_MIN /* hour of a slot never written */
#define MIN_SHARE 1e-6      /* keeps the factor's exponent finite */

/* floor(a / b) and a - b * floor(a / b) for b > 0, also for negative a. */
static int64_t floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;

	return (a % b != 0 && a < 0) ? q - 1 : q;
}

static int64_t floor_mod(int64_t a, int64_t b)
{
	int64_t r = a % b;

	return r < 0 ? r + b : r;
}

static size_t slot_of(int64_t hour)
{
	return (size_t)floor_mod(hour, CNL_FS_BUCKETS);
}

/* Index of `project`, or of where it would be inserted; *found says which. */
static size_t lookup(const struct cnl_fairshare *fs, uint32_t project,
                     int *found)
{
	size_t lo = 0, hi = fs->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (fs->teams[mid].project < project)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < fs->n && fs->teams[lo].project == project;
	return lo;
}

static const struct cnl_fs_team *find(const struct cnl_fairshare *fs,
                                      uint32_t project)
{
	int found;
	size_t i = lookup(fs, project, &found);

	return found ? &fs->teams[i] : NULL;
}

/* The team of `project`, created (weight 1, no usage) if absent. */
static int get_team(struct cnl_fairshare *fs, uint32_t project,
                    struct cnl_fs_team **ret_team)
{
	int found;
	size_t i = lookup(fs, project, &found);
	struct cnl_fs_team *t;

	if (!found) {
		if (fs->n == fs->cap) {
			size_t cap = fs->cap ? fs->cap * 2 : 8;
			struct cnl_fs_team *nt;

			if (cap > SIZE_MAX / sizeof(*nt))
				return -ENOMEM;
			nt = realloc(fs->teams, cap * sizeof(*nt));
			if (!nt)
				return -ENOMEM;
			fs->teams = nt;
			fs->cap = cap;
		}
		memmove(&fs->teams[i + 1], &fs->teams[i],
		        (fs->n - i) * sizeof(fs->teams[0]));
		fs->n++;
		t = &fs->teams[i];
		t->project = project;
		t->weight = 1.0;
		for (size_t k = 0; k < CNL_FS_BUCKETS; k++) {
			t->hour[k] = EMPTY;
			t->usage[k] = 0.0;
		}
	}
	*ret_team = &fs->teams[i];
	return 0;
}

void cnl_fs_init(struct cnl_fairshare *fs, int64_t half_life_ms)
{
	memset(fs, 0, sizeof(*fs));
	fs->half_life_ms =
	    half_life_ms > 0 ? half_life_ms : CNL_FS_HALF_LIFE_DEFAULT_MS;
}

void cnl_fs_done(struct cnl_fairshare *fs)
{
	if (!fs)
		return;
	free(fs->teams);
	fs->teams = NULL;
	fs->n = fs->cap = 0;
}

int cnl_fs_set_weight(struct cnl_fairshare *fs, uint32_t project, double weight)
{
	struct cnl_fs_team *t;
	int r;

	/* Written so that NaN fails too. */
	if (!(weight > 0.0) || !isfinite(weight))
		return -CNL_ESIZE;
	r = get_team(fs, project, &t);
	if (r < 0)
		return r;
	t->weight = weight;
	return 0;
}

double cnl_fs_weight(const struct cnl_fairshare *fs, uint32_t project)
{
	const struct cnl_fs_team *t = find(fs, project);

	return t ? t->weight : 1.0;
}

static int64_t newest_hour(const struct cnl_fs_team *t)
{
	int64_t newest = EMPTY;

	for (size_t k = 0; k < CNL_FS_BUCKETS; k++)
		if (t->hour[k] > newest)
			newest = t->hour[k];
	return newest;
}

int cnl_fs_charge(struct cnl_fairshare *fs, uint32_t project, int64_t blocks,
                  int64_t t0_ms, int64_t t1_ms)
{
	const int64_t B = CNL_FS_BUCKET_MS;
	struct cnl_fs_team *t;
	const struct cnl_fs_team *old = find(fs, project);
	int64_t h0, hfirst, hlast, newest, from;
	int r;

	if (blocks < 0 || t1_ms < t0_ms)
		return -CNL_ESIZE;
	if (blocks == 0 || t1_ms == t0_ms)
		return 0; /* nothing to record; do not create a team for it */

	hfirst = floor_div(t0_ms, B);
	hlast = floor_div(t1_ms - 1, B); /* t1 is exclusive */

	/*
	 * Hours at or below newest - 168 would be forgotten at once (invariant
	 * 3); that drops whole intervals that are too old and the head of
	 * intervals longer than the window.  Decide before creating the team,
	 * so an ignored charge changes nothing.
	 */
	newest = old ? newest_hour(old) : EMPTY;
	if (hlast > newest)
		newest = hlast;
	from = newest - (CNL_FS_BUCKETS - 1);
	if (hlast < from)
		return 0;
	h0 = hfirst < from ? from : hfirst;

	r = get_team(fs, project, &t);
	if (r < 0)
		return r;

	for (int64_t h = h0; h <= hlast; h++) {
		size_t k = slot_of(h);
		int64_t overlap;

		/* Overlap of [t0, t1) with hour h, computed within the hour. */
		if (h == hfirst && h == hlast)
			overlap = t1_ms - t0_ms;
		else if (h == hfirst)
			overlap = B - floor_mod(t0_ms, B);
		else if (h == hlast)
			overlap = floor_mod(t1_ms - 1, B) + 1;
		else
			overlap = B;

		if (t->hour[k] != h) {
			/*
			 * Stale or empty.  It cannot hold a newer hour: that
			 * would be >= h + 168 > newest (invariant 3).
			 */
			t->hour[k] = h;
			t->usage[k] = 0.0;
		}
		t->usage[k] += (double)blocks * (double)overlap / 1000.0;
	}
	return 0;
}

static int in_window(int64_t hour, int64_t now_hour)
{
	return hour != EMPTY && hour <= now_hour &&
	       hour > now_hour - CNL_FS_BUCKETS;
}

double cnl_fs_raw(const struct cnl_fairshare *fs, uint32_t project,
                  int64_t now_ms)
{
	const struct cnl_fs_team *t = find(fs, project);
	int64_t now_hour = floor_div(now_ms, CNL_FS_BUCKET_MS);
	double sum = 0.0;

	if (!t)
		return 0.0;
	for (size_t k = 0; k < CNL_FS_BUCKETS; k++)
		if (in_window(t->hour[k], now_hour))
			sum += t->usage[k];
	return sum;
}

/* Weight of the hour `back` hours before now's hour (0 = now's hour). */
static double weight_of(int64_t back, int64_t now_ms, int64_t half_life_ms)
{
	const int64_t B = CNL_FS_BUCKET_MS;
	/* back <= 167, so this cannot overflow. */
	int64_t age = back * B + floor_mod(now_ms, B) - B / 2;

	if (age <= 0)
		return 1.0;
	return exp2(-(double)age / (double)half_life_ms);
}

double cnl_fs_usage(const struct cnl_fairshare *fs, uint32_t project,
                    int64_t now_ms, int64_t capacity_blocks)
{
	const struct cnl_fs_team *t = find(fs, project);
	int64_t now_hour = floor_div(now_ms, CNL_FS_BUCKET_MS);
	double used = 0.0, norm = 0.0;

	if (!t || capacity_blocks <= 0)
		return 0.0;
	for (size_t k = 0; k < CNL_FS_BUCKETS; k++)
		if (in_window(t->hour[k], now_hour))
			used +=
			    t->usage[k] * weight_of(now_hour - t->hour[k],
			                            now_ms, fs->half_life_ms);
	if (used == 0.0)
		return 0.0;
	for (int64_t back = 0; back < CNL_FS_BUCKETS; back++)
		norm += weight_of(back, now_ms, fs->half_life_ms);
	return used / ((double)capacity_blocks * 3600.0 * norm);
}

double cnl_fs_factor(double u_hist, double u_now, double share)
{
	double u = 0.0, f;

	/* Negative or NaN inputs count as nothing used / the minimum share. */
	if (u_hist > 0.0)
		u += u_hist;
	if (u_now > 0.0)
		u += u_now;
	if (!(share > MIN_SHARE))
		share = MIN_SHARE;
	f = exp2(-u / share);
	/* exp2 underflows to 0 for heavy users; the contract says (0, 1]. */
	return f < DBL_MIN ? DBL_MIN : f;
}
