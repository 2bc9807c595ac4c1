/*
 * forecast.c - a cluster's saturation forecast (see forecast.h).
 */
#include <math.h>
#include <string.h>

#include "sched/forecast.h"

#define BUCKET_MS (CNL_FC_DAY_MS / CNL_FC_BUCKETS)
/* Observations a bucket averages: a week of its steps; the prior: a
 * day's. */
#define SEASON_MEMORY (7 * BUCKET_MS / CNL_FC_STEP_MS)
#define SEASON_PRIOR  (BUCKET_MS / CNL_FC_STEP_MS)

void cnl_fc_init(struct cnl_forecast *fc)
{
	memset(fc, 0, sizeof(*fc));
	/* The level follows about the last 5 minutes (30 steps): a burst
	 * of submissions raises it, one submission barely. */
	fc->alpha = 1.0 / 30;
	fc->beta = 0.05;
	fc->rt_ratio = 1;
	fc->last_util = 0;
}

static size_t bucket(int64_t t)
{
	int64_t d = t % CNL_FC_DAY_MS;

	if (d < 0)
		d += CNL_FC_DAY_MS;
	return (size_t)(d / BUCKET_MS);
}

/* The step [step_start, step_start + STEP) saw @x blocks arrive. */
static void close_step(struct cnl_forecast *fc, double x)
{
	size_t k = bucket(fc->step_start);
	double s = fc->season[k], prev = fc->level;

	/* From a level of 0: the first step seen (a queue's first
	 * submissions, or the moment a forecast begins) is one step, not
	 * the rate of every step to come. */
	fc->level = fc->alpha * (x - s) + (1 - fc->alpha) * (prev + fc->trend);
	fc->trend = fc->beta * (fc->level - prev) + (1 - fc->beta) * fc->trend;
	/* A bucket's index is the mean of its deviations from the level
	 * over about the last week of its observations (SEASON_MEMORY),
	 * shrunk toward 0 by a day's worth of them (SEASON_PRIOR): a
	 * bucket seen once does not forecast that once again. */
	if (fc->season_n[k] < SEASON_MEMORY)
		fc->season_n[k]++;
	fc->season[k] =
	    s + (x - fc->level - s) / (fc->season_n[k] + SEASON_PRIOR);
	fc->steps++;
	fc->step_start += CNL_FC_STEP_MS;
}

/* Close the steps that ended by @now. */
static void advance(struct cnl_forecast *fc, int64_t now)
{
	int64_t gap;

	if (!fc->step_start) {
		fc->step_start = now - now % CNL_FC_STEP_MS;
		return;
	}
	if (now < fc->step_start + CNL_FC_STEP_MS)
		return;
	close_step(fc, fc->arrived);
	fc->arrived = 0;
	/* Idle steps count zero arrivals; beyond a day of them, the model
	 * has seen a whole season of nothing and the rest is skipped. */
	gap = (now - fc->step_start) / CNL_FC_STEP_MS;
	if (gap > CNL_FC_DAY_MS / CNL_FC_STEP_MS) {
		fc->step_start +=
		    (gap - CNL_FC_DAY_MS / CNL_FC_STEP_MS) * CNL_FC_STEP_MS;
		gap = CNL_FC_DAY_MS / CNL_FC_STEP_MS;
	}
	for (; gap > 0; gap--)
		close_step(fc, 0);
}

void cnl_fc_arrival(struct cnl_forecast *fc, int64_t now_ms, double blocks)
{
	advance(fc, now_ms);
	if (blocks > 0 && isfinite(blocks))
		fc->arrived += blocks;
}

void cnl_fc_tick(struct cnl_forecast *fc, int64_t now_ms, double util_now)
{
	size_t o = 0;

	advance(fc, now_ms);
	for (size_t i = 0; i < fc->n_due; i++) {
		if (fc->due[i].due > now_ms) {
			fc->due[o++] = fc->due[i];
			continue;
		}
		fc->abs_err_sum += fabs(fc->due[i].util - util_now);
		fc->scored++;
	}
	fc->n_due = o;
}

void cnl_fc_ended(struct cnl_forecast *fc, int64_t est_ms, int64_t actual_ms)
{
	double r;

	if (est_ms <= 0 || actual_ms <= 0)
		return;
	r = (double)actual_ms / (double)est_ms;
	r = r < 0.05 ? 0.05 : r > 20 ? 20 : r;
	fc->rt_ratio = fc->rt_n ? 0.9 * fc->rt_ratio + 0.1 * r : r;
	fc->rt_n++;
}

double cnl_fc_runtime_ratio(const struct cnl_forecast *fc)
{
	return fc->rt_ratio;
}

double cnl_fc_arrivals(const struct cnl_forecast *fc, int64_t now_ms,
                       int64_t horizon_ms)
{
	double sum = 0;
	int64_t steps = horizon_ms / CNL_FC_STEP_MS;

	if (!fc->steps)
		return 0;
	for (int64_t h = 1; h <= steps; h++) {
		double v = fc->level + (double)h * fc->trend +
		           fc->season[bucket(now_ms + h * CNL_FC_STEP_MS)];

		sum += v > 0 ? v : 0;
	}
	return sum;
}

double cnl_fc_predict(struct cnl_forecast *fc, int64_t now_ms,
                      const struct cnl_fc_now *st)
{
	double ending = st->ending < st->held ? st->ending : st->held;
	double demand = st->held - ending + st->pending +
	                cnl_fc_arrivals(fc, now_ms, CNL_FC_HORIZON_MS);
	double util = st->capacity > 0 ? demand / st->capacity : 0;
	int64_t due = now_ms + CNL_FC_HORIZON_MS;

	if (!isfinite(util) || util < 0)
		util = 0;
	fc->last_util = util;
	/* One forecast scored per step: a later one in the same step
	 * replaces it. */
	if (fc->n_due && fc->due[fc->n_due - 1].due / CNL_FC_STEP_MS ==
	                     due / CNL_FC_STEP_MS) {
		fc->due[fc->n_due - 1].due = due;
		fc->due[fc->n_due - 1].util = util;
		return util;
	}
	if (fc->n_due == CNL_FC_PENDING) {
		memmove(fc->due, fc->due + 1,
		        (CNL_FC_PENDING - 1) * sizeof(fc->due[0]));
		fc->n_due--;
	}
	fc->due[fc->n_due].due = due;
	fc->due[fc->n_due].util = util;
	fc->n_due++;
	return util;
}

double cnl_fc_error(const struct cnl_forecast *fc)
{
	return fc->scored ? fc->abs_err_sum / (double)fc->scored : -1;
}
