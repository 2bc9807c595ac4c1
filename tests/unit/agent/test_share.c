/*
 * test_share.c - the compute share the agent writes into a slice's region
 * (share.h): N blocks buy N% of a GPU's compute wherever they live.  On a
 * GPU in block mode that is a share of N%; inside a MIG instance of c
 * compute slices, whose processes see only the instance, N * 7 / c percent
 * of the instance (5 blocks in a 1g host: 35%), with a board per instance;
 * a slice worth its whole device is not throttled; every slice but a whole
 * GPU gets its device's board (so a resize can throttle it).  Before this
 * rule a
 * slice in a MIG instance got share 0 (unthrottled) and no board.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "agent/share.h"
#include "cnlab/errors.h"

static struct cnl_catalog cat;

static const struct cnl_gpu_type *type(const char *name)
{
	int t = cnl_catalog_find(&cat, name);

	assert_true(t >= 0);
	return &cat.types[t];
}

static struct cnl_slice_share share(const char *t, int blocks, const char *mig)
{
	struct cnl_slice_share s = {12345, true};

	assert_int_equal(cnl_agent_slice_share(type(t), blocks, mig, &s), 0);
	return s;
}

static void test_block_mode(void **state)
{
	struct cnl_slice_share s;

	(void)state;
	s = share("H100-80GB-SXM", 25, NULL);
	assert_int_equal(s.share_pct, 25);
	assert_true(s.board);
	s = share("H100-80GB-SXM", 1, "");
	assert_int_equal(s.share_pct, 1);
	assert_true(s.board);
	/* A whole GPU (or several) is not throttled and has no board. */
	s = share("H100-80GB-SXM", 100, NULL);
	assert_int_equal(s.share_pct, 0);
	assert_false(s.board);
	s = share("H100-80GB-SXM", 400, NULL);
	assert_int_equal(s.share_pct, 0);
	assert_false(s.board);
}

/* The case: blocks in a block-hosting 1g instance of an H100. */
static void test_mig_host_1g(void **state)
{
	struct cnl_slice_share s;

	(void)state;
	s = share("H100-80GB-SXM", 5, "1g.10gb");
	assert_int_equal(s.share_pct, 35); /* 5% of the GPU = 35% of 1/7 */
	assert_true(s.board);
	s = share("H100-80GB-SXM", 1, "1g.10gb");
	assert_int_equal(s.share_pct, 7);
	s = share("H100-80GB-SXM", 9, "1g.10gb");
	assert_int_equal(s.share_pct, 63);
	s = share("H100-80GB-SXM", 13, "1g.10gb");
	assert_int_equal(s.share_pct, 91);
	assert_true(s.board);
	/* All 14 blocks of the host: the whole instance, like a dedicated
	 * 1g (the allocator counts one as 14 blocks); still on the board,
	 * as a host slice that may shrink. */
	s = share("H100-80GB-SXM", 14, "1g.10gb");
	assert_int_equal(s.share_pct, 0);
	assert_true(s.board);
	/* The rule reads the catalog's profile, not a fixed 1g. */
	s = share("A100-40GB", 5, "1g.5gb");
	assert_int_equal(s.share_pct, 35);
	s = share("H200-141GB", 3, "1g.18gb");
	assert_int_equal(s.share_pct, 21);
}

/* A dedicated instance holds exactly what the allocator counts it as
 * (100 * compute / 7 blocks) and is not throttled (its board, of an
 * instance no one else uses, is never read). */
static void test_mig_dedicated(void **state)
{
	const struct cnl_gpu_type *t = type("H100-80GB-SXM");
	struct cnl_slice_share s;

	(void)state;
	for (int k = 0; k < t->n_mig; k++) {
		int worth = 100 * t->mig[k].compute / 7;

		assert_int_equal(
		    cnl_agent_slice_share(t, worth, t->mig[k].name, &s), 0);
		assert_int_equal(s.share_pct, 0);
		assert_true(s.board);
	}
	s = share("H100-80GB-SXM", 10, "2g.20gb");
	assert_int_equal(s.share_pct, 35);
}

/* N blocks buy N% of the GPU wherever they live: for every MIG profile of
 * every catalog type, share x compute / 7 is within rounding (half a
 * percent of the instance) of the blocks, and grows with them. */
static void test_same_compute_everywhere(void **state)
{
	(void)state;
	for (int i = 0; i < cat.n; i++) {
		const struct cnl_gpu_type *t = &cat.types[i];

		for (int k = 0; k < t->n_mig; k++) {
			unsigned c = t->mig[k].compute, last = 0;
			int worth = 100 * (int)c / 7;

			for (int b = 1; b < worth; b++) {
				struct cnl_slice_share s;
				double gpu_pct;

				assert_int_equal(cnl_agent_slice_share(
				                     t, b, t->mig[k].name, &s),
				                 0);
				gpu_pct = s.share_pct * c / 7.0;
				assert_true(gpu_pct > b - 0.5 * c / 7.0 - 1e-9);
				assert_true(gpu_pct < b + 0.5 * c / 7.0 + 1e-9);
				assert_true(s.share_pct > last);
				assert_true(s.share_pct < 100);
				assert_true(s.board);
				last = s.share_pct;
			}
		}
	}
}

static void test_errors(void **state)
{
	struct cnl_slice_share s = {77, true};

	(void)state;
	assert_int_equal(
	    cnl_agent_slice_share(type("H100-80GB-SXM"), 5, "9g.999gb", &s),
	    -CNL_EPROFILE);
	assert_int_equal(cnl_agent_slice_share(NULL, 5, "1g.10gb", &s),
	                 -CNL_ENOMIG);
	assert_int_equal(
	    cnl_agent_slice_share(type("H100-80GB-SXM"), -1, NULL, &s),
	    -CNL_EBLOCKS);
	/* Untouched on failure. */
	assert_int_equal(s.share_pct, 77);
	assert_true(s.board);
}

/* One board per GPU in block mode, one per MIG instance inside MIG. */
static void test_board_paths(void **state)
{
	char a[64], b[64], c[64];

	(void)state;
	assert_int_equal(cnl_agent_slice_board("/w", 0, NULL, -1, a, sizeof(a)),
	                 0);
	assert_string_equal(a, "/w/regions/gpu0.board");
	assert_int_equal(
	    cnl_agent_slice_board("/w", 0, "1g.10gb", 3, b, sizeof(b)), 0);
	assert_string_equal(b, "/w/regions/gpu0.mig3.board");
	assert_int_equal(
	    cnl_agent_slice_board("/w", 0, "1g.10gb", 4, c, sizeof(c)), 0);
	assert_string_not_equal(b, c);
	assert_int_equal(cnl_agent_slice_board("/w", 0, "1g.10gb", 3, c, 10),
	                 -ENAMETOOLONG);
}

static int setup(void **state)
{
	(void)state;
	cnl_catalog_init(&cat);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_block_mode),
	    cmocka_unit_test(test_mig_host_1g),
	    cmocka_unit_test(test_mig_dedicated),
	    cmocka_unit_test(test_same_compute_everywhere),
	    cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_board_paths),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
