/*
 * test_forecast.c - the saturation forecast (sched/forecast.h): the queue
 * arithmetic, the arrivals' level and trend, the time-of-day season
 * learnt over days, idle gaps, run-time error, and the scoring of each
 * forecast when its time comes.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sched/forecast.h"

#define S    1000LL
#define STEP CNL_FC_STEP_MS
#define DAY  CNL_FC_DAY_MS
#define T0   (100 * DAY) /* midnight, some day */

static void test_queue_arithmetic(void **state)
{
	struct cnl_forecast fc;
	struct cnl_fc_now st = {
	    .capacity = 400, .held = 300, .ending = 100, .pending = 100};
	double u;

	(void)state;
	cnl_fc_init(&fc);
	/* Nothing observed: no arrivals expected. */
	assert_true(cnl_fc_arrivals(&fc, T0, CNL_FC_HORIZON_MS) == 0);
	u = cnl_fc_predict(&fc, T0, &st);
	assert_true(fabs(u - 0.75) < 1e-9);
	/* More ending than held counts as all of it; no capacity, 0. */
	st.ending = 1000;
	assert_true(fabs(cnl_fc_predict(&fc, T0, &st) - 0.25) < 1e-9);
	st.capacity = 0;
	assert_true(cnl_fc_predict(&fc, T0, &st) == 0);
	/* Saturation: more asked than room. */
	st = (struct cnl_fc_now){.capacity = 100, .held = 100, .pending = 50};
	assert_true(fabs(cnl_fc_predict(&fc, T0 + STEP, &st) - 1.5) < 1e-9);
}

static void test_level(void **state)
{
	struct cnl_forecast fc;
	double a;

	(void)state;
	cnl_fc_init(&fc);
	/* 10 blocks every step for 20 minutes. */
	for (int64_t t = T0; t < T0 + 20 * 60 * S; t += STEP) {
		cnl_fc_arrival(&fc, t + 1, 10);
		cnl_fc_tick(&fc, t + 2, 0);
	}
	a = cnl_fc_arrivals(&fc, T0 + 20 * 60 * S, CNL_FC_HORIZON_MS);
	assert_true(fabs(a - 90) < 9); /* 9 steps of 10, within 10% */
	/* Then nothing for 40 minutes: the forecast falls to near 0. */
	cnl_fc_tick(&fc, T0 + 60 * 60 * S, 0);
	a = cnl_fc_arrivals(&fc, T0 + 60 * 60 * S, CNL_FC_HORIZON_MS);
	assert_true(a < 5);
}

static void test_trend(void **state)
{
	struct cnl_forecast fc;
	double a;
	int k = 0;

	(void)state;
	cnl_fc_init(&fc);
	/* Arrivals growing by one block per step for 3 hours: the forecast
	 * over the next 90 s adds the trend. */
	for (int64_t t = T0; t < T0 + 3 * 3600 * S; t += STEP, k++) {
		cnl_fc_arrival(&fc, t + 1, k);
		cnl_fc_tick(&fc, t + 2, 0);
	}
	a = cnl_fc_arrivals(&fc, T0 + 3 * 3600 * S, CNL_FC_HORIZON_MS);
	/* More than the level alone, and within 5% of what comes (k, k+1,
	 * ..., k+8). */
	assert_true(a > 9.0 * fc.level + 40);
	assert_true(fabs(a - (9.0 * k + 36)) < 0.05 * (9.0 * k + 36));
}

static void test_daily_season(void **state)
{
	struct cnl_forecast fc;
	int64_t rush = 9 * 3600 * S; /* 09:00-09:15 every day */
	double before, quiet;

	(void)state;
	cnl_fc_init(&fc);
	for (int d = 0; d < 8; d++)
		for (int64_t t = T0 + d * DAY; t < T0 + (d + 1) * DAY;
		     t += STEP) {
			int64_t tod = t - T0 - d * DAY;

			if (tod >= rush && tod < rush + 15 * 60 * S)
				cnl_fc_arrival(&fc, t + 1, 50);
			cnl_fc_tick(&fc, t + 2, 0);
		}
	/* Day 9, 08:59:00: nothing has arrived all night, yet the next 90
	 * s reach into the rush; a forecast at 03:00 expects nothing. */
	cnl_fc_tick(&fc, T0 + 8 * DAY + rush - 60 * S, 0);
	before = cnl_fc_arrivals(&fc, T0 + 8 * DAY + rush - 60 * S,
	                         CNL_FC_HORIZON_MS);
	quiet = cnl_fc_arrivals(&fc, T0 + 8 * DAY + 3 * 3600 * S,
	                        CNL_FC_HORIZON_MS);
	/* The season raises it ahead of the rush (the level, near 0 all
	 * night, would say nothing comes). */
	assert_true(before > 5);
	assert_true(fc.level < 1);
	assert_true(quiet < 1);
}

static void test_first_step(void **state)
{
	struct cnl_forecast fc;

	(void)state;
	cnl_fc_init(&fc);
	/* A burst in the first step seen is not the rate from then on:
	 * its 700 blocks raise the next 90 s by about a thirtieth of it
	 * per step, not 9 x 700. */
	cnl_fc_arrival(&fc, T0 + 1, 700);
	cnl_fc_tick(&fc, T0 + STEP + 1, 0);
	assert_true(cnl_fc_arrivals(&fc, T0 + STEP + 1, CNL_FC_HORIZON_MS) <
	            9 * 700 / 10);
}

static void test_idle_gap(void **state)
{
	struct cnl_forecast fc;

	(void)state;
	cnl_fc_init(&fc);
	cnl_fc_arrival(&fc, T0, 10);
	cnl_fc_tick(&fc, T0 + STEP, 0);
	/* A month of silence is skipped past, not looped through. */
	cnl_fc_tick(&fc, T0 + 30 * DAY, 0);
	assert_true(fc.steps <= (uint64_t)(DAY / STEP) + 2);
	assert_true(cnl_fc_arrivals(&fc, T0 + 30 * DAY, CNL_FC_HORIZON_MS) < 1);
	/* Time going backwards (a clock step) changes nothing. */
	cnl_fc_tick(&fc, T0, 0);
	cnl_fc_arrival(&fc, T0, 5);
}

static void test_runtime_ratio(void **state)
{
	struct cnl_forecast fc;

	(void)state;
	cnl_fc_init(&fc);
	assert_true(cnl_fc_runtime_ratio(&fc) == 1);
	cnl_fc_ended(&fc, 100, 200);
	assert_true(cnl_fc_runtime_ratio(&fc) == 2);
	cnl_fc_ended(&fc, 100, 100);
	assert_true(fabs(cnl_fc_runtime_ratio(&fc) - 1.9) < 1e-9);
	cnl_fc_ended(&fc, 0, 100);     /* no estimate: nothing learnt */
	cnl_fc_ended(&fc, 1, 1000000); /* clamped to 20 */
	assert_true(fabs(cnl_fc_runtime_ratio(&fc) - (0.9 * 1.9 + 2)) < 1e-9);
}

static void test_scoring(void **state)
{
	struct cnl_forecast fc;
	struct cnl_fc_now st = {.capacity = 100, .held = 80};

	(void)state;
	cnl_fc_init(&fc);
	assert_true(cnl_fc_error(&fc) == -1);
	cnl_fc_predict(&fc, T0, &st); /* 0.8, due at T0 + 90 s */
	st.held = 40;
	cnl_fc_predict(&fc, T0 + 1 * S, &st); /* same step: replaces it */
	cnl_fc_tick(&fc, T0 + 60 * S, 0.9);   /* not due yet */
	assert_true(cnl_fc_error(&fc) == -1);
	cnl_fc_tick(&fc, T0 + 95 * S, 0.9);
	assert_true(fabs(cnl_fc_error(&fc) - 0.5) < 1e-9);
	/* Forecasts every step for long: the oldest beyond the horizon
	 * are scored, none is lost or kept past its time. */
	for (int64_t t = T0 + 100 * S; t < T0 + 400 * S; t += STEP) {
		cnl_fc_predict(&fc, t, &st); /* 0.4 */
		cnl_fc_tick(&fc, t, 0.4);
	}
	assert_true(fc.scored >= 20);
	assert_true(fc.n_due <= CNL_FC_PENDING);
	assert_true(cnl_fc_error(&fc) < 0.5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_queue_arithmetic),
	    cmocka_unit_test(test_level),
	    cmocka_unit_test(test_trend),
	    cmocka_unit_test(test_daily_season),
	    cmocka_unit_test(test_first_step),
	    cmocka_unit_test(test_idle_gap),
	    cmocka_unit_test(test_runtime_ratio),
	    cmocka_unit_test(test_scoring),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
