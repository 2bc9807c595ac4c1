/*
 * test_usage.c - the per-day GPU-use record (server/ctl_usage.c): an
 * interval split at UTC midnight, whole GPUs, blocks and a MIG instance's
 * fraction in GPU-hours, the 7-day window (oldest first, today last) per
 * project and per user.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "server/ctl.h"

#define H (3600 * 1000LL)
/* 2026-12-03T00:00:00Z */
#define MIDNIGHT 1796256000000LL

static int near(double a, double b)
{
	return a - b < 1e-9 && b - a < 1e-9;
}

static void test_midnight_split(void **state)
{
	json_t *days = json_object(), *dirty = json_object();
	double h[7];

	(void)state;
	/* 25 blocks from 23:00 to 01:00: a quarter GPU-hour each day. */
	cnl_usage_day_add(days, dirty, "prj_a", "usr_1", MIDNIGHT - H,
	                  MIDNIGHT + H, 25);
	assert_int_equal(json_object_size(days), 2);
	assert_non_null(json_object_get(dirty, "2026-12-02/prj_a/usr_1"));
	assert_non_null(json_object_get(dirty, "2026-12-03/prj_a/usr_1"));
	cnl_usage_7d(days, "prj_a", NULL, MIDNIGHT + 2 * H, h);
	assert_true(near(h[6], 0.25));
	assert_true(near(h[5], 0.25));
	for (int i = 0; i < 5; i++)
		assert_true(near(h[i], 0));
	/* Seen from the next day, the window has moved by one. */
	cnl_usage_7d(days, "prj_a", NULL, MIDNIGHT + 25 * H, h);
	assert_true(near(h[6], 0) && near(h[5], 0.25) && near(h[4], 0.25));
	/* Eight days later both have left the window. */
	cnl_usage_7d(days, "prj_a", NULL, MIDNIGHT + 8 * 24 * H, h);
	for (int i = 0; i < 7; i++)
		assert_true(near(h[i], 0));
	json_decref(days);
	json_decref(dirty);
}

static void test_units_and_owners(void **state)
{
	json_t *days = json_object(), *recent;
	double h[7];

	(void)state;
	/* Two whole GPUs for 3 h: 6 GPU-hours. */
	cnl_usage_day_add(days, NULL, "prj_a", "usr_1", MIDNIGHT + H,
	                  MIDNIGHT + 4 * H, 200);
	/* A MIG instance of 1 of 7 compute slices, counted as its blocks
	 * (cnl_alloc_blocks_held: 100 * 1 / 7 = 14) for 7 h: 0.98. */
	cnl_usage_day_add(days, NULL, "prj_a", "usr_2", MIDNIGHT + H,
	                  MIDNIGHT + 8 * H, 100 * 1 / 7);
	/* Another project: not in prj_a's figures. */
	cnl_usage_day_add(days, NULL, "prj_ab", "usr_1", MIDNIGHT + H,
	                  MIDNIGHT + 2 * H, 100);
	/* An empty interval charges nothing. */
	cnl_usage_day_add(days, NULL, "prj_a", "usr_1", MIDNIGHT + H,
	                  MIDNIGHT + H, 100);
	cnl_usage_7d(days, "prj_a", NULL, MIDNIGHT + 9 * H, h);
	assert_true(near(h[6], 6.98));
	cnl_usage_7d(days, "prj_a", "usr_1", MIDNIGHT + 9 * H, h);
	assert_true(near(h[6], 6));
	cnl_usage_7d(days, "prj_a", "usr_2", MIDNIGHT + 9 * H, h);
	assert_true(near(h[6], 0.98));
	cnl_usage_7d(days, "prj_ab", NULL, MIDNIGHT + 9 * H, h);
	assert_true(near(h[6], 1));
	recent = cnl_usage_recent(days, MIDNIGHT + 9 * H);
	assert_int_equal(json_object_size(recent), 3);
	assert_non_null(json_object_get(recent, "prj_a/usr_2"));
	json_decref(recent);
	recent = cnl_usage_recent(days, MIDNIGHT + 8 * 24 * H);
	assert_int_equal(json_object_size(recent), 0);
	json_decref(recent);
	/* Pruning keeps the window and what is not stored yet. */
	cnl_usage_day_add(days, NULL, "prj_a", "usr_1", MIDNIGHT + 7 * 24 * H,
	                  MIDNIGHT + 7 * 24 * H + H, 100);
	{
		json_t *dirty =
		    json_pack("{s:b}", "2026-12-03/prj_ab/usr_1", 1);

		cnl_usage_prune(days, dirty, MIDNIGHT + 8 * 24 * H);
		json_decref(dirty);
	}
	assert_int_equal(json_object_size(days), 2);
	assert_non_null(json_object_get(days, "2026-12-03/prj_ab/usr_1"));
	assert_non_null(json_object_get(days, "2026-12-10/prj_a/usr_1"));
	cnl_usage_prune(days, NULL, MIDNIGHT + 8 * 24 * H);
	assert_int_equal(json_object_size(days), 1);
	json_decref(days);
}

/* Where a restart's listing of the stored days starts: after every key of
 * the day before the window, before every key of its first day. */
static void test_day_after(void **state)
{
	char after[64];
	int64_t now = MIDNIGHT + 8 * 24 * H + 5 * H; /* 2026-12-11 05:00 */

	(void)state;
	cnl_usage_day_after(now, after, sizeof(after));
	assert_string_equal(after, "2026-12-04/~");
	assert_true(strcmp("2026-12-04/prj_zzZZ99/usr_zzZZ99", after) < 0);
	assert_true(strcmp("2026-12-03/prj_a/usr_1", after) < 0);
	assert_true(strcmp("2026-12-05/prj_0/usr_0", after) > 0);
	assert_true(strcmp("2026-12-11/prj_a/usr_1", after) > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_midnight_split),
	    cmocka_unit_test(test_units_and_owners),
	    cmocka_unit_test(test_day_after),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
