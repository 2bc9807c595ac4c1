/*
 * test_trace.c - W3C traceparent: the strict parser refuses every
 * malformed form the recommendation names (version, length, case,
 * separators, all-zero ids) and keeps only the sampled flag; formatting
 * round-trips; new traces and children have fresh, non-zero ids; the
 * current context is per thread.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "common/trace.h"

static const char *const valid =
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

static void test_parse_valid(void **state)
{
	struct cnl_trace t;
	char buf[CNL_TRACE_HEADER_MAX], hex[33];

	(void)state;
	assert_int_equal(cnl_trace_parse(valid, &t), 0);
	cnl_trace_hex(t.trace_id, 16, hex);
	assert_string_equal(hex, "4bf92f3577b34da6a3ce929d0e0e4736");
	cnl_trace_hex(t.span_id, 8, hex);
	assert_string_equal(hex, "00f067aa0ba902b7");
	assert_true(cnl_trace_sampled(&t));
	cnl_trace_format(&t, buf);
	assert_string_equal(buf, valid);
	/* Unknown flag bits are dropped; unsampled stays unsampled. */
	assert_int_equal(
	    cnl_trace_parse(
	        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-fe", &t),
	    0);
	assert_false(cnl_trace_sampled(&t));
	assert_int_equal(t.flags, 0);
}

static void test_parse_malformed(void **state)
{
	static const char *const bad[] = {
	    NULL,
	    "",
	    "garbage",
	    /* version */
	    "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	    /* upper case */
	    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
	    /* all-zero ids */
	    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
	    /* lengths */
	    "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
	    /* separators and non-hex */
	    "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	    "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
	    "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
	    " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	};
	struct cnl_trace t, before;

	(void)state;
	memset(&t, 0x5a, sizeof(t));
	before = t;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(cnl_trace_parse(bad[i], &t), -CNL_EPARSE);
		assert_memory_equal(&t, &before, sizeof(t)); /* untouched */
	}
}

static void test_new_and_child(void **state)
{
	struct cnl_trace a, b, c;
	char buf[CNL_TRACE_HEADER_MAX];

	(void)state;
	cnl_trace_new(true, &a);
	cnl_trace_new(false, &b);
	assert_memory_not_equal(a.trace_id, b.trace_id, 16);
	assert_true(cnl_trace_sampled(&a));
	assert_false(cnl_trace_sampled(&b));
	cnl_trace_child(&a, &c);
	assert_memory_equal(a.trace_id, c.trace_id, 16);
	assert_memory_not_equal(a.span_id, c.span_id, 8);
	assert_int_equal(c.flags, a.flags);
	/* What we make, we parse back. */
	for (int i = 0; i < 1000; i++) {
		struct cnl_trace x, y;

		cnl_trace_new(i & 1, &x);
		cnl_trace_format(&x, buf);
		assert_int_equal(strlen(buf), 55);
		assert_int_equal(cnl_trace_parse(buf, &y), 0);
		assert_memory_equal(&x, &y, sizeof(x));
	}
}

static void *other_thread(void *arg)
{
	(void)arg;
	return (void *)cnl_trace_current();
}

static void test_current_per_thread(void **state)
{
	struct cnl_trace t;
	pthread_t th;
	void *seen = (void *)1;

	(void)state;
	assert_null(cnl_trace_current());
	cnl_trace_new(true, &t);
	cnl_trace_set_current(&t);
	assert_memory_equal(cnl_trace_current(), &t, sizeof(t));
	assert_int_equal(pthread_create(&th, NULL, other_thread, NULL), 0);
	pthread_join(th, &seen);
	assert_null(seen);
	cnl_trace_set_current(NULL);
	assert_null(cnl_trace_current());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_valid),
	    cmocka_unit_test(test_parse_malformed),
	    cmocka_unit_test(test_new_and_child),
	    cmocka_unit_test(test_current_per_thread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
