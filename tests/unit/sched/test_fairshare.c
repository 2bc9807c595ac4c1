/*
 * test_fairshare.c - fair-share accounting: charges split exactly over
 * hourly buckets, usage older than 7 days is forgotten, decay and
 * normalisation follow fairshare.h, and the factor orders teams by recent
 * use relative to their weight.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "sched/fairshare.h"

#define HOUR   CNL_FS_BUCKET_MS
#define MIN    (60LL * 1000)
#define DAY    (24 * HOUR)
#define H0     472222LL /* an hour in late 2023, so times look real */
#define AT(h)  ((int64_t)(h)*HOUR)
#define PROJ_A 7u
#define PROJ_B 8u
#define PROJ_C 9u

static const struct cnl_fs_team *team(const struct cnl_fairshare *fs,
                                      uint32_t project)
{
	for (size_t i = 0; i < fs->n; i++)
		if (fs->teams[i].project == project)
			return &fs->teams[i];
	return NULL;
}

/* Block-seconds the struct holds for absolute hour h (0 if not held). */
static double bucket(const struct cnl_fairshare *fs, uint32_t project,
                     int64_t h)
{
	const struct cnl_fs_team *t = team(fs, project);
	int64_t k = h % CNL_FS_BUCKETS;

	if (k < 0)
		k += CNL_FS_BUCKETS;
	if (!t || t->hour[k] != h)
		return 0.0;
	return t->usage[k];
}

static void assert_close(double got, double want, double rel)
{
	double tol = rel * fabs(want);

	if (tol < 1e-12)
		tol = 1e-12;
	if (fabs(got - want) > tol)
		fail_msg("got %.17g, want %.17g (rel %.3g)", got, want, rel);
}

static void test_init_and_empty(void **state)
{
	struct cnl_fairshare fs;

	(void)state;
	cnl_fs_init(&fs, 0);
	assert_true(fs.half_life_ms == CNL_FS_HALF_LIFE_DEFAULT_MS);
	cnl_fs_done(&fs);
	cnl_fs_init(&fs, -5);
	assert_true(fs.half_life_ms == CNL_FS_HALF_LIFE_DEFAULT_MS);
	cnl_fs_done(&fs);
	cnl_fs_init(&fs, 6 * HOUR);
	assert_true(fs.half_life_ms == 6 * HOUR);
	assert_int_equal(fs.n, 0);
	assert_true(cnl_fs_raw(&fs, PROJ_A, AT(H0)) == 0.0);
	assert_true(cnl_fs_usage(&fs, PROJ_A, AT(H0), 8) == 0.0);
	assert_true(cnl_fs_weight(&fs, PROJ_A) == 1.0);
	cnl_fs_done(&fs);
	cnl_fs_done(&fs); /* idempotent */
	cnl_fs_done(NULL);
}

static void test_charge_two_hours(void **state)
{
	struct cnl_fairshare fs;

	(void)state;
	cnl_fs_init(&fs, 0);
	assert_int_equal(cnl_fs_charge(&fs, PROJ_A, 10, AT(H0), AT(H0 + 2)), 0);
	assert_true(cnl_fs_raw(&fs, PROJ_A, AT(H0 + 2) - 1) == 72000.0);
	assert_true(bucket(&fs, PROJ_A, H0) == 36000.0);
	assert_true(bucket(&fs, PROJ_A, H0 + 1) == 36000.0);
	assert_true(bucket(&fs, PROJ_A, H0 + 2) == 0.0);
	/* Another project is untouched. */
	assert_true(cnl_fs_raw(&fs, PROJ_B, AT(H0 + 2)) == 0.0);
	/* Charges to the same hour add up. */
	assert_int_equal(
	    cnl_fs_charge(&fs, PROJ_A, 3, AT(H0) + 10 * MIN, AT(H0) + 20 * MIN),
	    0);
	assert_true(bucket(&fs, PROJ_A, H0) == 36000.0 + 1800.0);
	cnl_fs_done(&fs);
}

static void test_charge_split_exactly(void **state)
{
	struct cnl_fairshare fs;
	int64_t t0 = AT(H0) + 30 * MIN, t1 = AT(H0 + 2) + 15 * MIN;

	(void)state;
	cnl_fs_init(&fs, 0);
	assert_int_equal(cnl_fs_charge(&fs, PROJ_A, 4, t0, t1), 0);
	/* 30 min, 60 min and 15 min of 4 blocks. */
	assert_true(bucket(&fs, PROJ_A, H0) == 7200.0);
	assert_true(bucket(&fs, PROJ_A, H0 + 1) == 14400.0);
	assert_true(bucket(&fs, PROJ_A, H0 + 2) == 3600.0);
	/* Raw at different now values sees the hours up to now's hour. */
	assert_true(cnl_fs_raw(&fs, PROJ_A, AT(H0) - 1) == 0.0);
	assert_true(cnl_fs_raw(&fs, PROJ_A, AT(H0)) == 7200.0);
	assert_true(cnl_fs_raw(&fs, PROJ_A, AT(H0 + 1) + 5) == 21600.0);
	assert_true(cnl_fs_raw(&fs, PROJ_A, AT(H0 + 2)) == 25200.0);
	/* And loses them one by one as they leave the 168-hour window. */
	assert_true(cnl_fs_raw(&fs, PROJ_A, AT(H0 + 167) + HOUR - 1) ==
	            25200.0);
	assert_true(cnl_fs_raw(&fs, PROJ_A, AT(H0 + 168)) == 18000.0);
	assert_true(cnl_fs_raw(&fs, PROJ_A, AT(H0 + 169)) == 3600.0);
	assert_true(cnl_fs_raw(&fs, PROJ_A, AT(H0 + 170)) == 0.0);

	/* Sub-second precision: 3 blocks for 1.5 s inside one hour. */
	assert_int_equal(
	    cnl_fs_charge(&fs, PROJ_B, 3, AT(H0 + 5) + 100, AT(H0 + 5) + 1600),
	    0);
	assert_true(cnl_fs_raw(&fs, PROJ_B, AT(H0 + 5)) == 4.5);
	/* Ending exactly on a boundary does not touch the next hour. */
	assert_int_equal(
	    cnl_fs_charge(&fs, PROJ_C, 1, AT(H0 + 3) - 1000, AT(H0 + 3)), 0);
	assert_true(bucket(&fs, PROJ_C, H0 + 2) == 1.0);
	assert_true(team(&fs, PROJ_C)->hour[(H0 + 3) % CNL_FS_BUCKETS] !=
	            H0 + 3);
	cnl_fs_done(&fs);
}

/* Hours are floored, so times before the epoch split like any others. */
static void test_negative_times(void **state)
{
	struct cnl_fairshare fs;

	(void)state;
	cnl_fs_init(&fs, 0);
	assert_int_equal(cnl_fs_charge(&fs, PROJ_A, 2, -HOUR / 2, HOUR / 2), 0);
	assert_true(bucket(&fs, PROJ_A, -1) == 3600.0);
	assert_true(bucket(&fs, PROJ_A, 0) == 3600.0);
	assert_true(team(&fs, PROJ_A)->hour[167] == -1);
	assert_true(cnl_fs_raw(&fs, PROJ_A, -1) == 3600.0);
	assert_true(cnl_fs_raw(&fs, PROJ_A, 0) == 7200.0);
	cnl_fs_done(&fs);
}

static void test_old_usage_forgotten(void **state)
{
	struct cnl_fairshare fs;

	(void)state;
	cnl_fs_init(&fs, 0);
	assert_int_equal(cnl_fs_charge(&fs, PROJ_A, 5, AT(H0), AT(H0 + 3)), 0);
	assert_true(cnl_fs_raw(&fs, PROJ_A, AT(H0 + 100)) == 54000.0);
	assert_true(cnl_fs_usage(&fs, PROJ_A, AT(H0 + 100), 10) > 0.0);
	/* Eight days on, all of it is gone from raw and usage. */
	assert_true(cnl_fs_raw(&fs, PROJ_A, AT(H0) + 8 * DAY) == 0.0);
	assert_true(cnl_fs_usage(&fs, PROJ_A, AT(H0) + 8 * DAY, 10) == 0.0);

	/* A newer hour in the same slot overwrites the stale one. */
	assert_int_equal(
	    cnl_fs_charge(&fs, PROJ_A, 1, AT(H0 + 168), AT(H0 + 169)), 0);
	assert_true(bucket(&fs, PROJ_A, H0) == 0.0);
	assert_true(bucket(&fs, PROJ_A, H0 + 168) == 3600.0);
	assert_true(cnl_fs_raw(&fs, PROJ_A, AT(H0 + 168)) == 3600.0 + 36000.0);

	/*
	 * With hour H0 + 168 charged, hours <= H0 are older than 7 days: a
	 * late charge for them is ignored, even for a slot that is free.
	 */
	assert_int_equal(
	    cnl_fs_charge(&fs, PROJ_A, 9, AT(H0 - 20), AT(H0 - 10)), 0);
	assert_true(cnl_fs_raw(&fs, PROJ_A, AT(H0 - 10)) == 0.0);
	assert_true(bucket(&fs, PROJ_A, H0 - 20) == 0.0);
	/* An ignored charge does not create a team either. */
	assert_int_equal(fs.n, 1);
	/* But an hour just inside the window is still accepted. */
	assert_int_equal(
	    cnl_fs_charge(&fs, PROJ_A, 1, AT(H0 + 1), AT(H0 + 1) + 1000), 0);
	assert_true(bucket(&fs, PROJ_A, H0 + 1) == 18000.0 + 1.0);
	cnl_fs_done(&fs);

	/*
	 * A charge straddling the 7-day edge keeps only its recent part, and
	 * its too-old part never clobbers the newer hour sharing its slot.
	 */
	cnl_fs_init(&fs, 0);
	assert_int_equal(
	    cnl_fs_charge(&fs, PROJ_B, 1, AT(H0 + 168), AT(H0 + 169)), 0);
	assert_int_equal(
	    cnl_fs_charge(&fs, PROJ_B, 2, AT(H0 + 136), AT(H0 + 137)), 0);
	assert_int_equal(
	    cnl_fs_charge(&fs, PROJ_B, 1, AT(H0 - 32), AT(H0 + 11)), 0);
	assert_true(bucket(&fs, PROJ_B, H0 + 136) ==
	            7200.0); /* H0 - 32's slot */
	assert_true(bucket(&fs, PROJ_B, H0) == 0.0);
	assert_true(bucket(&fs, PROJ_B, H0 + 1) == 3600.0);
	assert_true(cnl_fs_raw(&fs, PROJ_B, AT(H0 + 168)) ==
	            3600.0 + 7200.0 + 10 * 3600.0);
	cnl_fs_done(&fs);
}

/* An interval longer than the window keeps only its last 168 hours. */
static void test_long_interval(void **state)
{
	struct cnl_fairshare fs;
	int64_t end = AT(H0) + 10 * DAY;

	(void)state;
	cnl_fs_init(&fs, 0);
	assert_int_equal(cnl_fs_charge(&fs, PROJ_A, 1, AT(H0), end), 0);
	assert_true(cnl_fs_raw(&fs, PROJ_A, end - 1) == 168 * 3600.0);
	assert_true(bucket(&fs, PROJ_A, H0 + 240 - 168) == 3600.0);
	assert_true(bucket(&fs, PROJ_A, H0) == 0.0);
	cnl_fs_done(&fs);
}

static void test_recent_use_weighs_more(void **state)
{
	struct cnl_fairshare fs;
	int64_t now = AT(H0 + 7 * 24) + 17 * MIN;
	double ua, ub, uc, fa, fb, fc;

	(void)state;
	cnl_fs_init(&fs, 0);
	/* A: 8 blocks for 10 hours yesterday; B: the same 6 days ago. */
	assert_int_equal(
	    cnl_fs_charge(&fs, PROJ_A, 8, now - DAY, now - DAY + 10 * HOUR), 0);
	assert_int_equal(cnl_fs_charge(&fs, PROJ_B, 8, now - 6 * DAY,
	                               now - 6 * DAY + 10 * HOUR),
	                 0);
	assert_true(cnl_fs_raw(&fs, PROJ_A, now) ==
	            cnl_fs_raw(&fs, PROJ_B, now));
	ua = cnl_fs_usage(&fs, PROJ_A, now, 64);
	ub = cnl_fs_usage(&fs, PROJ_B, now, 64);
	uc = cnl_fs_usage(&fs, PROJ_C, now, 64);
	assert_true(ua > ub);
	assert_true(ub > 0.0);
	assert_true(uc == 0.0);
	fa = cnl_fs_factor(ua, 0, 1.0 / 3);
	fb = cnl_fs_factor(ub, 0, 1.0 / 3);
	fc = cnl_fs_factor(uc, 0, 1.0 / 3);
	assert_true(fa < fb);
	assert_true(fb < fc);
	assert_true(fc == 1.0);
	/* Five days apart at a one-day half-life: about 2^5 apart. */
	assert_close(ua / ub, 32.0, 1e-9);
	cnl_fs_done(&fs);
}

static void test_decay_half_life(void **state)
{
	/*
	 * Whole hours, so t and t + hl sit at the same point of their hours
	 * and the normaliser is the same at both.
	 */
	const int64_t hls[] = {CNL_FS_HALF_LIFE_DEFAULT_MS, 6 * HOUR, HOUR};
	struct cnl_fairshare fs;

	(void)state;
	for (size_t i = 0; i < sizeof(hls) / sizeof(hls[0]); i++) {
		int64_t hl = hls[i];
		int64_t t = AT(H0 + 10) + 7 * MIN;
		double u1, u2;

		cnl_fs_init(&fs, hl);
		assert_int_equal(
		    cnl_fs_charge(&fs, PROJ_A, 4, AT(H0), AT(H0 + 2)), 0);
		u1 = cnl_fs_usage(&fs, PROJ_A, t, 16);
		u2 = cnl_fs_usage(&fs, PROJ_A, t + hl, 16);
		/* Nothing has left the window yet. */
		assert_true(cnl_fs_raw(&fs, PROJ_A, t + hl) == 28800.0);
		assert_true(u1 > 0.0);
		assert_close(u2 / u1, 0.5, 1e-12);
		cnl_fs_done(&fs);
	}
}

/* One exact value, computed here from the formula in fairshare.h. */
static void test_usage_value(void **state)
{
	struct cnl_fairshare fs;
	int64_t now = AT(H0 + 1) + HOUR / 2; /* middle of the next hour */
	double sum = 0.0, want;

	(void)state;
	cnl_fs_init(&fs, 0);
	assert_int_equal(cnl_fs_charge(&fs, PROJ_A, 10, AT(H0), AT(H0 + 1)), 0);
	/* Window hour k back from now is aged exactly k hours. */
	for (int k = 0; k < CNL_FS_BUCKETS; k++)
		sum += pow(2.0, -k / 24.0);
	want = 36000.0 * pow(2.0, -1.0 / 24) / (40.0 * 3600.0 * sum);
	assert_close(cnl_fs_usage(&fs, PROJ_A, now, 40), want, 1e-12);
	/* Usage scales inversely with capacity. */
	assert_close(cnl_fs_usage(&fs, PROJ_A, now, 80), want / 2, 1e-12);
	/*
	 * Ten minutes into the hour: the current bucket's age (-20 min) is
	 * clamped to 0, hour k back is aged k hours - 20 minutes.
	 */
	sum = 1.0;
	for (int k = 1; k < CNL_FS_BUCKETS; k++)
		sum += pow(2.0, -(k * 60.0 - 20.0) / (24 * 60.0));
	want = 36000.0 / (10.0 * 3600.0 * sum);
	assert_close(cnl_fs_usage(&fs, PROJ_A, AT(H0) + 10 * MIN, 10), want,
	             1e-12);
	cnl_fs_done(&fs);
}

static void test_normalisation(void **state)
{
	const int64_t hls[] = {INT64_MAX / 4, CNL_FS_HALF_LIFE_DEFAULT_MS,
	                       2 * HOUR};
	const int64_t cap = 12;
	int64_t end = AT(H0 + 168), now = end - 1;
	struct cnl_fairshare fs;

	(void)state;
	for (size_t i = 0; i < sizeof(hls) / sizeof(hls[0]); i++) {
		cnl_fs_init(&fs, hls[i]);
		/* A uses the whole cluster for the whole window. */
		assert_int_equal(
		    cnl_fs_charge(&fs, PROJ_A, cap, end - 8 * DAY, end), 0);
		assert_close(cnl_fs_usage(&fs, PROJ_A, now, cap), 1.0, 1e-9);
		/* B and C split it evenly. */
		assert_int_equal(
		    cnl_fs_charge(&fs, PROJ_B, cap / 2, end - 7 * DAY, end), 0);
		assert_int_equal(
		    cnl_fs_charge(&fs, PROJ_C, cap / 2, end - 7 * DAY, end), 0);
		assert_close(cnl_fs_usage(&fs, PROJ_B, now, cap), 0.5, 1e-9);
		assert_close(cnl_fs_usage(&fs, PROJ_C, now, cap), 0.5, 1e-9);
		cnl_fs_done(&fs);
	}
}

static void test_u_now_lowers_factor(void **state)
{
	(void)state;
	assert_true(cnl_fs_factor(0, 0, 0.5) == 1.0);
	assert_true(cnl_fs_factor(0.1, 0.2, 0.5) < cnl_fs_factor(0.1, 0, 0.5));
	/* A burst counts with no history at all. */
	assert_true(cnl_fs_factor(0, 0.25, 0.5) < 1.0);
	assert_close(cnl_fs_factor(0.25, 0.25, 0.5), 0.5, 1e-15);
	assert_close(cnl_fs_factor(0.5, 0.5, 0.5), 0.25, 1e-15);
	/* u_now and u_hist are interchangeable. */
	assert_true(cnl_fs_factor(0.3, 0.1, 0.4) ==
	            cnl_fs_factor(0.1, 0.3, 0.4));
}

static void test_weights(void **state)
{
	struct cnl_fairshare fs;
	int64_t now = AT(H0 + 30);
	double wa, wb, sum, ua, ub;

	(void)state;
	cnl_fs_init(&fs, 0);
	assert_int_equal(cnl_fs_set_weight(&fs, PROJ_A, 2.0), 0);
	assert_int_equal(cnl_fs_charge(&fs, PROJ_A, 6, AT(H0), AT(H0 + 5)), 0);
	assert_int_equal(cnl_fs_charge(&fs, PROJ_B, 6, AT(H0), AT(H0 + 5)), 0);
	assert_true(cnl_fs_weight(&fs, PROJ_A) == 2.0);
	assert_true(cnl_fs_weight(&fs, PROJ_B) == 1.0);
	/* Setting a weight leaves usage alone, and the other way round. */
	assert_true(cnl_fs_raw(&fs, PROJ_A, now) == 108000.0);
	ua = cnl_fs_usage(&fs, PROJ_A, now, 24);
	ub = cnl_fs_usage(&fs, PROJ_B, now, 24);
	assert_true(ua == ub);
	wa = cnl_fs_weight(&fs, PROJ_A);
	wb = cnl_fs_weight(&fs, PROJ_B);
	sum = wa + wb;
	assert_true(cnl_fs_factor(ua, 0, wa / sum) >
	            cnl_fs_factor(ub, 0, wb / sum));
	/* Re-weighting an existing team replaces its weight. */
	assert_int_equal(cnl_fs_set_weight(&fs, PROJ_B, 0.5), 0);
	assert_true(cnl_fs_weight(&fs, PROJ_B) == 0.5);
	assert_true(cnl_fs_raw(&fs, PROJ_B, now) == 108000.0);
	assert_int_equal(fs.n, 2);
	cnl_fs_done(&fs);
}

static void test_errors_change_nothing(void **state)
{
	const double bad[] = {0.0, -1.0, NAN, INFINITY, -INFINITY};
	struct cnl_fairshare fs;
	int64_t now = AT(H0 + 1);

	(void)state;
	cnl_fs_init(&fs, 0);
	assert_int_equal(cnl_fs_charge(&fs, PROJ_A, 1, AT(H0), AT(H0 + 1)), 0);
	assert_int_equal(cnl_fs_set_weight(&fs, PROJ_A, 3.0), 0);

	assert_int_equal(cnl_fs_charge(&fs, PROJ_A, -1, AT(H0), AT(H0 + 1)),
	                 -CNL_ESIZE);
	assert_int_equal(cnl_fs_charge(&fs, PROJ_A, 1, AT(H0 + 1), AT(H0)),
	                 -CNL_ESIZE);
	assert_int_equal(cnl_fs_charge(&fs, PROJ_B, -4, AT(H0), AT(H0 + 1)),
	                 -CNL_ESIZE);
	assert_int_equal(cnl_fs_charge(&fs, PROJ_B, 4, AT(H0 + 1), AT(H0) + 1),
	                 -CNL_ESIZE);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(cnl_fs_set_weight(&fs, PROJ_A, bad[i]),
		                 -CNL_ESIZE);
		assert_int_equal(cnl_fs_set_weight(&fs, PROJ_B, bad[i]),
		                 -CNL_ESIZE);
	}
	assert_int_equal(fs.n, 1);
	assert_true(cnl_fs_raw(&fs, PROJ_A, now) == 3600.0);
	assert_true(cnl_fs_weight(&fs, PROJ_A) == 3.0);
	assert_true(cnl_fs_weight(&fs, PROJ_B) == 1.0);

	/* Empty charges succeed and record nothing. */
	assert_int_equal(cnl_fs_charge(&fs, PROJ_B, 0, AT(H0), AT(H0 + 1)), 0);
	assert_int_equal(cnl_fs_charge(&fs, PROJ_B, 5, AT(H0), AT(H0)), 0);
	assert_int_equal(fs.n, 1);

	/* No capacity, no usage. */
	assert_true(cnl_fs_usage(&fs, PROJ_A, now, 0) == 0.0);
	assert_true(cnl_fs_usage(&fs, PROJ_A, now, -3) == 0.0);
	assert_true(cnl_fs_usage(&fs, PROJ_A, now, 1) > 0.0);
	cnl_fs_done(&fs);
}

static void test_factor_edges(void **state)
{
	(void)state;
	/* Negative inputs count as 0. */
	assert_true(cnl_fs_factor(-5, -5, 0.5) == 1.0);
	assert_true(cnl_fs_factor(-5, 0.25, 0.5) ==
	            cnl_fs_factor(0, 0.25, 0.5));
	assert_true(cnl_fs_factor(NAN, 0, 0.5) == 1.0);
	/* A zero, negative or NaN share is clamped, the result stays > 0. */
	assert_true(cnl_fs_factor(0, 0, 0) == 1.0);
	assert_true(cnl_fs_factor(1e-7, 0, 0) < 1.0);
	assert_true(cnl_fs_factor(1e-3, 0, 0) < 1e-100);
	assert_true(cnl_fs_factor(1e-7, 0, -1) == cnl_fs_factor(1e-7, 0, 0));
	assert_true(cnl_fs_factor(1e-7, 0, NAN) == cnl_fs_factor(1e-7, 0, 0));
	assert_true(cnl_fs_factor(1, 0, 0) > 0.0);
	assert_true(cnl_fs_factor(INFINITY, 0, 1) > 0.0);
	assert_true(cnl_fs_factor(1, 1, 1) <= 1.0);
	/* Monotone: more use, lower factor; more share, higher factor. */
	assert_true(cnl_fs_factor(0.2, 0, 0.3) < cnl_fs_factor(0.1, 0, 0.3));
	assert_true(cnl_fs_factor(0.2, 0, 0.6) > cnl_fs_factor(0.2, 0, 0.3));
}

/* A small LCG so the test is reproducible on every libc. */
static uint32_t lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint32_t)(*s >> 32);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

static void test_many_teams(void **state)
{
	enum { N = 1000 };
	uint32_t *ids = malloc(N * sizeof(*ids));
	uint32_t *sorted = malloc(N * sizeof(*sorted));
	uint64_t seed = 42;
	struct cnl_fairshare fs;
	size_t n = 0;
	int64_t now = AT(H0 + 1);

	(void)state;
	assert_non_null(ids);
	assert_non_null(sorted);
	/* N distinct random ids, in random order. */
	while (n < N) {
		uint32_t id = lcg(&seed);
		int dup = 0;

		for (size_t i = 0; i < n; i++)
			dup |= ids[i] == id;
		if (!dup)
			ids[n++] = id;
	}
	cnl_fs_init(&fs, 0);
	for (size_t i = 0; i < N; i++) {
		int64_t blocks = (int64_t)(ids[i] % 97) + 1;

		assert_int_equal(
		    cnl_fs_charge(&fs, ids[i], blocks, AT(H0), AT(H0 + 1)), 0);
		if (i % 2)
			assert_int_equal(
			    cnl_fs_set_weight(&fs, ids[i], 1.0 + ids[i] % 5),
			    0);
	}
	assert_int_equal(fs.n, N);
	memcpy(sorted, ids, N * sizeof(*ids));
	qsort(sorted, N, sizeof(*sorted), cmp_u32);
	for (size_t i = 0; i < N; i++)
		assert_true(fs.teams[i].project == sorted[i]);
	for (size_t i = 0; i < N; i++) {
		double want = 3600.0 * (double)((ids[i] % 97) + 1);

		assert_true(cnl_fs_raw(&fs, ids[i], now) == want);
		assert_true(cnl_fs_weight(&fs, ids[i]) ==
		            (i % 2 ? 1.0 + ids[i] % 5 : 1.0));
	}
	/* Ids not inserted are not found. */
	for (int misses = 0; misses < 100;) {
		uint32_t id = lcg(&seed);

		if (bsearch(&id, sorted, N, sizeof(*sorted), cmp_u32))
			continue;
		assert_true(cnl_fs_raw(&fs, id, now) == 0.0);
		assert_true(cnl_fs_weight(&fs, id) == 1.0);
		misses++;
	}
	/* The extremes of the id range sort correctly too. */
	assert_int_equal(cnl_fs_charge(&fs, 0, 1, AT(H0), AT(H0 + 1)), 0);
	assert_int_equal(cnl_fs_charge(&fs, UINT32_MAX, 2, AT(H0), AT(H0 + 1)),
	                 0);
	assert_true(fs.teams[0].project == 0);
	assert_true(fs.teams[fs.n - 1].project == UINT32_MAX);
	assert_true(cnl_fs_raw(&fs, UINT32_MAX, now) == 7200.0);
	cnl_fs_done(&fs);
	free(ids);
	free(sorted);
}

/* The same charges in the same order give bit-identical results. */
static void run_script(struct cnl_fairshare *fs, double out[3])
{
	uint64_t seed = 7;

	cnl_fs_init(fs, 5 * HOUR);
	for (int i = 0; i < 500; i++) {
		uint32_t p = lcg(&seed) % 3;
		int64_t t0 = AT(H0) + (int64_t)(lcg(&seed) % (200 * 60)) * MIN;
		int64_t len = (int64_t)(lcg(&seed) % (300 * 60)) * 1000;

		assert_int_equal(
		    cnl_fs_charge(fs, p, lcg(&seed) % 8, t0, t0 + len), 0);
	}
	for (uint32_t p = 0; p < 3; p++)
		out[p] = cnl_fs_usage(fs, p, AT(H0 + 205) + 11 * MIN, 32);
}

static void test_determinism(void **state)
{
	struct cnl_fairshare a, b;
	double ua[3], ub[3];

	(void)state;
	run_script(&a, ua);
	run_script(&b, ub);
	assert_memory_equal(ua, ub, sizeof(ua));
	assert_int_equal(a.n, b.n);
	for (size_t i = 0; i < a.n; i++) {
		assert_memory_equal(a.teams[i].hour, b.teams[i].hour,
		                    sizeof(a.teams[i].hour));
		assert_memory_equal(a.teams[i].usage, b.teams[i].usage,
		                    sizeof(a.teams[i].usage));
	}
	for (int p = 0; p < 3; p++)
		assert_true(ua[p] > 0.0);
	cnl_fs_done(&a);
	cnl_fs_done(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_init_and_empty),
	    cmocka_unit_test(test_charge_two_hours),
	    cmocka_unit_test(test_charge_split_exactly),
	    cmocka_unit_test(test_negative_times),
	    cmocka_unit_test(test_old_usage_forgotten),
	    cmocka_unit_test(test_long_interval),
	    cmocka_unit_test(test_recent_use_weighs_more),
	    cmocka_unit_test(test_decay_half_life),
	    cmocka_unit_test(test_usage_value),
	    cmocka_unit_test(test_normalisation),
	    cmocka_unit_test(test_u_now_lowers_factor),
	    cmocka_unit_test(test_weights),
	    cmocka_unit_test(test_errors_change_nothing),
	    cmocka_unit_test(test_factor_edges),
	    cmocka_unit_test(test_many_teams),
	    cmocka_unit_test(test_determinism),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
