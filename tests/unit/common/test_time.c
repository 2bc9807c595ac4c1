/*
 * test_time.c - RFC 3339 formatting and parsing against epoch values
 * computed independently (Python's datetime), duration parsing and
 * formatting, round-trips, and rejection of malformed input.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "common/time.h"

static void test_format_known(void **state)
{
	static const struct {
		int64_t ms;
		const char *text;
	} cases[] = {
	    {0, "1970-01-01T00:00:00.000Z"},
	    {1700000000123, "2023-11-14T22:13:20.123Z"},
	    {-1, "1969-12-31T23:59:59.999Z"},
	    {1709210096000, "2024-02-29T12:34:56.000Z"},
	    {1777568400000, "2026-04-30T17:00:00.000Z"},
	    {-2208988800000, "1900-01-01T00:00:00.000Z"},
	    {-62135596800000, "0001-01-01T00:00:00.000Z"},
	    {253402300799999, "9999-12-31T23:59:59.999Z"},
	};
	char buf[CNL_TIME_RFC3339_MAX];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(
		    cnl_time_format_rfc3339(cases[i].ms, buf, sizeof(buf)), 24);
		assert_string_equal(buf, cases[i].text);
	}
}

static void test_format_errors(void **state)
{
	char buf[CNL_TIME_RFC3339_MAX] = "untouched";

	(void)state;
	assert_int_equal(cnl_time_format_rfc3339(0, buf, 24), -ENOSPC);
	assert_string_equal(buf, "untouched");
	assert_int_equal(
	    cnl_time_format_rfc3339(253402300800000, buf, sizeof(buf)),
	    -ERANGE);
	assert_int_equal(cnl_time_format_rfc3339(INT64_MAX, buf, sizeof(buf)),
	                 -ERANGE);
	assert_int_equal(cnl_time_format_rfc3339(INT64_MIN, buf, sizeof(buf)),
	                 -ERANGE);
	assert_string_equal(buf, "untouched");
}

static void test_parse_known(void **state)
{
	static const struct {
		const char *text;
		int64_t ms;
	} cases[] = {
	    {"1970-01-01T00:00:00Z", 0},
	    {"2023-11-14T22:13:20.123Z", 1700000000123},
	    {"2023-11-14t22:13:20.123z", 1700000000123},
	    {"2023-11-14T23:13:20.123+01:00", 1700000000123},
	    {"2023-11-14T16:43:20.123-05:30", 1700000000123},
	    {"2023-11-14T22:13:20.1Z", 1700000000100},
	    {"2023-11-14T22:13:20.12Z", 1700000000120},
	    {"2023-11-14T22:13:20.123999999Z", 1700000000123},
	    {"2024-02-29T12:34:56Z", 1709210096000},
	    {"1969-12-31T23:59:59.999Z", -1},
	    /* The seeds' short form, UTC unless it carries an offset. */
	    {"2026-04-30T17:00", 1777568400000},
	    {"2026-04-30T17:00Z", 1777568400000},
	    {"2026-04-30T19:00+02:00", 1777568400000},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t ms = 42;
		assert_int_equal(cnl_time_parse_rfc3339(cases[i].text, &ms), 0);
		assert_int_equal(ms, cases[i].ms);
	}
}

static void test_parse_rejects(void **state)
{
	static const char *const bad[] = {
	    "",
	    "2026-04-30",
	    "2026-04-30T17",
	    "2026-04-30 17:00:00Z",
	    "2026-4-30T17:00:00Z",
	    "2026-04-30T17:00:00",   /* offset required with seconds */
	    "2026-04-30T17:00:00Z ", /* trailing text */
	    "2026-04-30T17:00:00ZZ", /* trailing text */
	    "2026-13-01T00:00:00Z",  /* month */
	    "2026-00-01T00:00:00Z",  /* month */
	    "2026-04-31T00:00:00Z",  /* April has 30 days */
	    "2026-02-29T00:00:00Z",  /* not a leap year */
	    "1900-02-29T00:00:00Z",  /* century, not a leap year */
	    "2026-04-30T24:00:00Z",  /* hour */
	    "2026-04-30T17:60:00Z",  /* minute */
	    "2026-04-30T17:00:60Z",  /* leap second */
	    "2026-04-30T17:00:00.Z", /* empty fraction */
	    "2026-04-30T17:00:00.1234567890Z", /* 10 fraction digits */
	    "2026-04-30T17:00:00+1:00",
	    "2026-04-30T17:00:00+01:60",
	    "2026-04-30T17:00:00+24:00",
	    "2026-04-30T17:00:00+0100",
	    "2026-04-30T17:00:00 Z",
	    "x026-04-30T17:00:00Z",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int64_t ms = 42;
		if (cnl_time_parse_rfc3339(bad[i], &ms) != -CNL_EPARSE)
			fail_msg("accepted \"%s\"", bad[i]);
		assert_int_equal(ms, 42);
	}
}

static void test_rfc3339_round_trip(void **state)
{
	char buf[CNL_TIME_RFC3339_MAX];
	uint64_t x = 88172645463325252ull;

	(void)state;
	/* xorshift-spread instants across years 0000..9999 and both signs. */
	for (int i = 0; i < 20000; i++) {
		int64_t ms, back = 0;
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		ms = (int64_t)(x % 315569520000000ull) - 62167219200000;
		assert_int_equal(cnl_time_format_rfc3339(ms, buf, sizeof(buf)),
		                 24);
		assert_int_equal(cnl_time_parse_rfc3339(buf, &back), 0);
		assert_int_equal(back, ms);
	}
}

static void test_duration_parse(void **state)
{
	static const struct {
		const char *text;
		int64_t ms;
	} good[] = {
	    {"0s", 0},
	    {"500ms", 500},
	    {"90s", 90000},
	    {"30m", 1800000},
	    {"4h", 14400000},
	    {"2d", 172800000},
	    {"1h30m", 5400000},
	    {"1d2h3m4s5ms", 93784005},
	    {"1m500ms", 60500},
	    {"90m", 5400000},
	    {"9223372036854775807ms", INT64_MAX},
	};
	static const char *const bad[] = {
	    "",
	    "5",
	    "-5s",
	    "+5s",
	    " 5s",
	    "5s ",
	    "5 s",
	    "5x",
	    "1.5h",
	    "h",
	    "1m1h",
	    "1h1h",
	    "5ms3s",
	    "1s1s",
	    "5S",
	    "1h30",
	    "m5",
	    "5mss",
	    "9223372036854775808ms",
	    "106751991167301d",
	    "9223372036854776s",
	    "106751991167d7h12m55s808ms",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		int64_t ms = -1;
		assert_int_equal(cnl_duration_parse(good[i].text, &ms), 0);
		assert_int_equal(ms, good[i].ms);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int64_t ms = 42;
		if (cnl_duration_parse(bad[i], &ms) != -CNL_EPARSE)
			fail_msg("accepted \"%s\"", bad[i]);
		assert_int_equal(ms, 42);
	}
}

static void test_duration_format(void **state)
{
	static const struct {
		int64_t ms;
		const char *text;
	} cases[] = {
	    {0, "0s"},
	    {500, "500ms"},
	    {90000, "1m30s"},
	    {5400000, "1h30m"},
	    {172800000, "2d"},
	    {93784005, "1d2h3m4s5ms"},
	    {INT64_MAX, "106751991167d7h12m55s807ms"},
	};
	char buf[CNL_DURATION_MAX];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t back = -1;
		int n = cnl_duration_format(cases[i].ms, buf, sizeof(buf));
		assert_int_equal(n, (int)strlen(cases[i].text));
		assert_string_equal(buf, cases[i].text);
		assert_int_equal(cnl_duration_parse(buf, &back), 0);
		assert_int_equal(back, cases[i].ms);
	}
	memcpy(buf, "untouched", 10);
	assert_int_equal(cnl_duration_format(-1, buf, sizeof(buf)), -EINVAL);
	assert_int_equal(cnl_duration_format(5400000, buf, 5), -ENOSPC);
	assert_string_equal(buf, "untouched");
	assert_int_equal(cnl_duration_format(5400000, buf, 6), 5);
	assert_string_equal(buf, "1h30m");
}

static void test_clocks(void **state)
{
	struct timespec ts;
	int64_t now, m1, m2;

	(void)state;
	clock_gettime(CLOCK_REALTIME, &ts);
	now = cnl_time_now_ms();
	assert_true(now >= (int64_t)ts.tv_sec * 1000);
	assert_true(now < (int64_t)ts.tv_sec * 1000 + 5000);
	m1 = cnl_time_mono_ns();
	ts = (struct timespec){.tv_nsec = 2000000};
	nanosleep(&ts, NULL);
	m2 = cnl_time_mono_ns();
	assert_true(m2 - m1 >= 2000000);
}

/* A deadline is the clock's reading plus the wait, its nanoseconds
 * carried into seconds. */
static void test_deadline(void **state)
{
	static const int64_t waits[] = {0, 1, 999, 1000, 1999, 123456};
	(void)state;
	for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++) {
		int64_t before = cnl_time_mono_ns(), at, after;
		struct timespec d;

		cnl_time_deadline(&d, CLOCK_MONOTONIC, waits[i]);
		after = cnl_time_mono_ns();
		assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
		at = (int64_t)d.tv_sec * 1000000000 + d.tv_nsec;
		assert_true(at >= before + waits[i] * 1000000);
		assert_true(at <= after + waits[i] * 1000000);
	}
}

/* In nanoseconds too: a wait under a millisecond, and one that carries
 * its nanoseconds into the next second. */
static void test_deadline_ns(void **state)
{
	static const int64_t waits[] = {0,       1,         999999,
	                                1000000, 999999999, 1500000000};
	(void)state;
	for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++) {
		int64_t before = cnl_time_mono_ns(), at, after;
		struct timespec d;

		cnl_time_deadline_ns(&d, CLOCK_MONOTONIC, waits[i]);
		after = cnl_time_mono_ns();
		assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
		at = (int64_t)d.tv_sec * 1000000000 + d.tv_nsec;
		assert_true(at >= before + waits[i]);
		assert_true(at <= after + waits[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_format_known),
	    cmocka_unit_test(test_format_errors),
	    cmocka_unit_test(test_parse_known),
	    cmocka_unit_test(test_parse_rejects),
	    cmocka_unit_test(test_rfc3339_round_trip),
	    cmocka_unit_test(test_duration_parse),
	    cmocka_unit_test(test_duration_format),
	    cmocka_unit_test(test_clocks),
	    cmocka_unit_test(test_deadline),
	    cmocka_unit_test(test_deadline_ns),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
