/*
 * test_id.c - id format, the ULID time encoding (checked against the
 * example in the ULID specification), ordering by time, monotonicity within
 * one millisecond and when the clock steps back, determinism of seeded
 * generators, parsing, and rejection of malformed ids.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "common/id.h"

#define T0 INT64_C(1700000000123)

static const char crockford[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

static void assert_well_formed(const char *id, const char *prefix)
{
	size_t plen = strlen(prefix);

	assert_int_equal(strlen(id), plen + 1 + CNL_ID_ULID_LEN);
	assert_memory_equal(id, prefix, plen);
	assert_int_equal(id[plen], '_');
	assert_true(id[plen + 1] >= '0' && id[plen + 1] <= '7');
	for (size_t i = plen + 1; id[i]; i++)
		assert_non_null(strchr(crockford, id[i]));
}

static void test_format_and_time_encoding(void **state)
{
	struct cnl_id_gen g;
	char id[CNL_ID_MAX];
	char prefix[CNL_ID_PREFIX_MAX + 1];
	int64_t ms = 0;

	(void)state;
	cnl_id_gen_init(&g, 1);
	assert_int_equal(cnl_id_new(&g, "srv", T0, id, sizeof(id)), 30);
	assert_well_formed(id, "srv");

	/* The timestamp example of the ULID specification. */
	cnl_id_gen_init(&g, 1);
	assert_int_equal(cnl_id_new(&g, "job", 1469918176385, id, sizeof(id)),
	                 30);
	assert_memory_equal(id, "job_01ARYZ6S41", 14);
	assert_int_equal(cnl_id_parse(id, prefix, sizeof(prefix), &ms), 0);
	assert_string_equal(prefix, "job");
	assert_int_equal(ms, 1469918176385);

	cnl_id_gen_init(&g, 1);
	assert_int_equal(cnl_id_new(&g, "a", 0, id, sizeof(id)), 28);
	assert_memory_equal(id, "a_0000000000", 12);
	assert_int_equal(
	    cnl_id_new(&g, "abcdefgh", (INT64_C(1) << 48) - 1, id, sizeof(id)),
	    35);
	assert_memory_equal(id, "abcdefgh_7ZZZZZZZZZ", 19);
	assert_well_formed(id, "abcdefgh");
	assert_true(strlen(id) + 1 == CNL_ID_MAX);
}

static void test_seeded_is_deterministic(void **state)
{
	struct cnl_id_gen a, b, c;
	char x[CNL_ID_MAX], y[CNL_ID_MAX], z[CNL_ID_MAX];
	int same_as_c = 0;

	(void)state;
	cnl_id_gen_init(&a, 42);
	cnl_id_gen_init(&b, 42);
	cnl_id_gen_init(&c, 43);
	for (int i = 0; i < 100; i++) {
		int64_t t = T0 + i / 3;
		cnl_id_new(&a, "job", t, x, sizeof(x));
		cnl_id_new(&b, "job", t, y, sizeof(y));
		cnl_id_new(&c, "job", t, z, sizeof(z));
		assert_string_equal(x, y);
		same_as_c += strcmp(x, z) == 0;
	}
	assert_int_equal(same_as_c, 0);
}

static void test_order_follows_time(void **state)
{
	struct cnl_id_gen g1, g2;
	char prev[CNL_ID_MAX] = "", id[CNL_ID_MAX];

	(void)state;
	cnl_id_gen_init(&g1, 7);
	cnl_id_gen_init(&g2, 8);
	/* Two independent generators, alternating, times increasing. */
	for (int i = 0; i < 1000; i++) {
		struct cnl_id_gen *g = i % 2 ? &g1 : &g2;
		assert_int_equal(
		    cnl_id_new(g, "job", T0 + i * 7, id, sizeof(id)), 30);
		assert_true(strcmp(prev, id) < 0);
		memcpy(prev, id, sizeof(id));
	}
}

static void test_monotonic_within_ms(void **state)
{
	struct cnl_id_gen g;
	char prev[CNL_ID_MAX], id[CNL_ID_MAX];
	int64_t ms;

	(void)state;
	cnl_id_gen_init_random(&g);
	assert_int_equal(cnl_id_new(&g, "job", T0, prev, sizeof(prev)), 30);
	for (int i = 0; i < 10000; i++) {
		assert_int_equal(cnl_id_new(&g, "job", T0, id, sizeof(id)), 30);
		assert_true(strcmp(prev, id) < 0);
		assert_memory_equal(prev, id, 14); /* same time part */
		memcpy(prev, id, sizeof(id));
	}
	/* The clock steps back: ids keep increasing on the last time. */
	assert_int_equal(cnl_id_new(&g, "job", T0 - 5000, id, sizeof(id)), 30);
	assert_true(strcmp(prev, id) < 0);
	assert_int_equal(cnl_id_parse(id, NULL, 0, &ms), 0);
	assert_int_equal(ms, T0);
	memcpy(prev, id, sizeof(id));
	/* A later time starts over with fresh random bits. */
	assert_int_equal(cnl_id_new(&g, "job", T0 + 1, id, sizeof(id)), 30);
	assert_true(strcmp(prev, id) < 0);
	assert_int_equal(cnl_id_parse(id, NULL, 0, &ms), 0);
	assert_int_equal(ms, T0 + 1);
}

static void test_increment_carries_and_overflows(void **state)
{
	struct cnl_id_gen g, before;
	char id[CNL_ID_MAX] = "untouched";

	(void)state;
	cnl_id_gen_init(&g, 1);
	assert_int_equal(cnl_id_new(&g, "x", T0, id, sizeof(id)), 28);
	/* Force the random part to ...00FF FFFF: the next id must carry. */
	memset(g.last, 0, sizeof(g.last));
	memset(g.last + 7, 0xff, 3);
	assert_int_equal(cnl_id_new(&g, "x", T0, id, sizeof(id)), 28);
	assert_int_equal(g.last[6], 1);
	assert_int_equal(g.last[7], 0);
	assert_int_equal(g.last[9], 0);
	/* All ones: 2^80 ids in one millisecond, nothing left. */
	memset(g.last, 0xff, sizeof(g.last));
	before = g;
	memcpy(id, "untouched", 10);
	assert_int_equal(cnl_id_new(&g, "x", T0, id, sizeof(id)), -EOVERFLOW);
	assert_string_equal(id, "untouched");
	assert_memory_equal(&g, &before, sizeof(g));
}

static void test_new_rejects(void **state)
{
	static const char *const bad_prefixes[] = {
	    "", "abcdefghi", "Srv", "s1", "s_", "s-", "sé",
	};
	struct cnl_id_gen g, before;
	char id[CNL_ID_MAX] = "untouched";

	(void)state;
	cnl_id_gen_init(&g, 5);
	assert_int_equal(cnl_id_new(&g, "job", T0, id, sizeof(id)), 30);
	memcpy(id, "untouched", 10);
	before = g;
	for (size_t i = 0; i < sizeof(bad_prefixes) / sizeof(*bad_prefixes);
	     i++)
		assert_int_equal(
		    cnl_id_new(&g, bad_prefixes[i], T0 + 1, id, sizeof(id)),
		    -EINVAL);
	assert_int_equal(cnl_id_new(&g, "job", -1, id, sizeof(id)), -ERANGE);
	assert_int_equal(
	    cnl_id_new(&g, "job", INT64_C(1) << 48, id, sizeof(id)), -ERANGE);
	assert_int_equal(cnl_id_new(&g, "job", T0 + 1, id, 30), -ENOSPC);
	assert_string_equal(id, "untouched");
	assert_memory_equal(&g, &before, sizeof(g));
	assert_int_equal(cnl_id_new(&g, "job", T0 + 1, id, 31), 30);
}

static void test_parse(void **state)
{
	struct cnl_id_gen g;
	char id[CNL_ID_MAX], prefix[CNL_ID_PREFIX_MAX + 1] = "keep";
	int64_t ms = 0;

	(void)state;
	cnl_id_gen_init_random(&g);
	for (int i = 0; i < 100; i++) {
		int64_t t = T0 + i * 1000003;
		assert_int_equal(cnl_id_new(&g, "node", t, id, sizeof(id)), 31);
		assert_well_formed(id, "node");
		assert_int_equal(cnl_id_parse(id, prefix, sizeof(prefix), &ms),
		                 0);
		assert_string_equal(prefix, "node");
		assert_int_equal(ms, t);
	}
	/* Decoding is case-insensitive, as Crockford base32 specifies. */
	assert_int_equal(cnl_id_parse("job_01arYZ6s41zzzzzzzzzzzzzzzz", prefix,
	                              sizeof(prefix), &ms),
	                 0);
	assert_int_equal(ms, 1469918176385);
	/* The prefix buffer must hold the prefix. */
	assert_int_equal(
	    cnl_id_parse("job_01ARYZ6S41ZZZZZZZZZZZZZZZZ", prefix, 3, &ms),
	    -ENOSPC);
	assert_int_equal(
	    cnl_id_parse("job_01ARYZ6S41ZZZZZZZZZZZZZZZZ", prefix, 4, NULL), 0);
	assert_string_equal(prefix, "job");
}

static void test_parse_rejects(void **state)
{
	static const char *const bad[] = {
	    "",
	    "job",
	    "job_",
	    "_01ARYZ6S41ZZZZZZZZZZZZZZZZ",
	    "Job_01ARYZ6S41ZZZZZZZZZZZZZZZZ",
	    "j0b_01ARYZ6S41ZZZZZZZZZZZZZZZZ",
	    "abcdefghi_01ARYZ6S41ZZZZZZZZZZZZZZZZ",
	    "job-01ARYZ6S41ZZZZZZZZZZZZZZZZ",
	    "job_01ARYZ6S41ZZZZZZZZZZZZZZZ",   /* 25 */
	    "job_01ARYZ6S41ZZZZZZZZZZZZZZZZZ", /* 27 */
	    "job_01ARYZ6S41ZZZZZZZZZZZZZZZI",
	    "job_01ARYZ6S41ZZZZZZZZZZZZZZZL",
	    "job_01ARYZ6S41ZZZZZZZZZZZZZZZO",
	    "job_01ARYZ6S41ZZZZZZZZZZZZZZZU",
	    "job_01ARYZ6S41ZZZZZZZZZZZZZZ_Z",
	    "job_01ARYZ6S41ZZZZZZZZZZZZZZ Z",
	    "job_81ARYZ6S41ZZZZZZZZZZZZZZZZ", /* over 128 bits */
	    "job__01ARYZ6S41ZZZZZZZZZZZZZZZ",
	};
	char prefix[CNL_ID_PREFIX_MAX + 1] = "keep";
	int64_t ms = 42;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (cnl_id_parse(bad[i], prefix, sizeof(prefix), &ms) !=
		    -CNL_EPARSE)
			fail_msg("accepted \"%s\"", bad[i]);
	}
	assert_string_equal(prefix, "keep");
	assert_int_equal(ms, 42);
	/* The largest valid value still parses. */
	assert_int_equal(cnl_id_parse("z_7ZZZZZZZZZZZZZZZZZZZZZZZZZ", prefix,
	                              sizeof(prefix), &ms),
	                 0);
	assert_int_equal(ms, (INT64_C(1) << 48) - 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_format_and_time_encoding),
	    cmocka_unit_test(test_seeded_is_deterministic),
	    cmocka_unit_test(test_order_follows_time),
	    cmocka_unit_test(test_monotonic_within_ms),
	    cmocka_unit_test(test_increment_carries_and_overflows),
	    cmocka_unit_test(test_new_rejects),
	    cmocka_unit_test(test_parse),
	    cmocka_unit_test(test_parse_rejects),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
