/*
 * forecast.h - a cluster's saturation forecast: its GPU demand 90 seconds
 * ahead, as a share of its capacity (above 1: more work than room).
 *
 *   demand(t + H) = held(t)            blocks held now
 *                 - ending(t, H)       of those, what is expected to end
 *                                      by t + H (start + run-time estimate
 *                                      x the estimates' observed error)
 *                 + pending(t)         blocks asked for by queued work
 *                 + arrivals(t, H)     blocks expected to be submitted
 *
 * The arrivals are the one part that needs a model.  They are forecast by
 * additive Holt-Winters on the blocks submitted per step (10 s): a level,
 * a trend and a time-of-day seasonal index (96 buckets of 15 minutes over
 * a day, so last week's Monday-morning rush raises this Monday's
 * forecast; each bucket's index is its mean deviation from the level
 * over its last week of observations).  Why Holt-Winters rather than a quantile
 * model: arrivals on a GPU platform are dominated by the daily working pattern
 * and by bursts (a class's assignment night, a sweep), which level-and-trend
 * follow within minutes, and it needs a few kilobytes of state per cluster and
 * constant time per step, updated in the control loop.  The queue terms
 * are not modelled: they are known (held, pending) or computed from the
 * running work (ending), corrected by the run-time estimates' error so
 * far (the mean of actual / estimated over finished work, an EWMA).
 *
 * Every forecast is kept until its time comes and then scored against
 * the utilisation seen (the mean absolute error, in share of capacity).
 *
 * Pure: time is passed in.
 */
#ifndef CNL_SCHED_FORECAST_H
#define CNL_SCHED_FORECAST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CNL_FC_STEP_MS    10000LL    /* one observation */
#define CNL_FC_HORIZON_MS 90000LL    /* how far ahead */
#define CNL_FC_BUCKETS    96         /* seasonal buckets per day */
#define CNL_FC_DAY_MS     86400000LL /* the season */
#define CNL_FC_PENDING    (CNL_FC_HORIZON_MS / CNL_FC_STEP_MS + 2)

struct cnl_forecast {
	double alpha, beta;  /* smoothing of level and trend */
	double level, trend; /* arrivals per step */
	double season[CNL_FC_BUCKETS];
	uint32_t season_n[CNL_FC_BUCKETS]; /* observations per bucket */
	int64_t step_start;                /* the step being counted; 0: none */
	double arrived;                    /* blocks submitted in it */
	uint64_t steps;                    /* steps observed */
	double rt_ratio;                   /* actual / estimated run time */
	uint64_t rt_n;
	/* Forecasts waiting for their time: (due, utilisation). */
	struct {
		int64_t due;
		double util;
	} due[CNL_FC_PENDING];
	size_t n_due;
	double abs_err_sum;
	uint64_t scored;
	double last_util; /* the last forecast made */
};

/* What the controller knows now, in blocks (1/100 of a GPU). */
struct cnl_fc_now {
	double capacity; /* of nodes taking work */
	double held;     /* held by running work */
	double ending;   /* of that, expected to end within the horizon */
	double pending;  /* asked for by queued work */
};

void cnl_fc_init(struct cnl_forecast *fc);

/* cnl_fc_arrival - @blocks were submitted at @now_ms. */
void cnl_fc_arrival(struct cnl_forecast *fc, int64_t now_ms, double blocks);

/*
 * cnl_fc_tick - close every step that ended by @now_ms (an idle step
 * counts zero arrivals), updating the model; score the forecasts due by
 * now against @util_now, the demand seen now ((held + pending) /
 * capacity, as forecast).
 */
void cnl_fc_tick(struct cnl_forecast *fc, int64_t now_ms, double util_now);

/* cnl_fc_ended - a job estimated to run @est_ms ran @actual_ms. */
void cnl_fc_ended(struct cnl_forecast *fc, int64_t est_ms, int64_t actual_ms);

/* The run-time estimates' observed error (1: exact; 2: twice as long). */
double cnl_fc_runtime_ratio(const struct cnl_forecast *fc);

/* Blocks expected to arrive in (@now_ms, @now_ms + @horizon_ms]. */
double cnl_fc_arrivals(const struct cnl_forecast *fc, int64_t now_ms,
                       int64_t horizon_ms);

/*
 * cnl_fc_predict - the utilisation expected at @now_ms + CNL_FC_HORIZON_MS
 * (demand / capacity; 0 with no capacity), remembered for scoring.
 */
double cnl_fc_predict(struct cnl_forecast *fc, int64_t now_ms,
                      const struct cnl_fc_now *st);

/* The mean absolute error of the forecasts scored so far (-1: none). */
double cnl_fc_error(const struct cnl_forecast *fc);

#endif /* CNL_SCHED_FORECAST_H */
