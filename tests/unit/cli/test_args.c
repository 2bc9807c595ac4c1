/*
 * test_args.c - table-driven argument parsing: --flag value and
 * --flag=value, booleans, -o and -h, "--", flags among positional
 * arguments, passthrough of a script's own flags for cnlab run, and the
 * errors (unknown flag, missing value, value on a boolean).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "cli/args.h"

static const struct cnl_cli_flag flags[] = {
    {"output", "FORMAT", "", 'o'},  {"help", NULL, "", 0},
    {"gpu", "SHAPE", "", 's'},      {"detach", NULL, "", 0},
    {"priority", "CLASS", "", 'r'},
};
#define NF (sizeof(flags) / sizeof(flags[0]))

static int parse(char **argv, int argc, bool pass, struct cnl_cli_args *a,
                 char *err)
{
	return cnl_cli_args_parse(flags, NF, argc, argv, pass, a, err, 128);
}

static void test_values(void **state)
{
	char *argv[] = {"--gpu", "h100-25", "train.py", "--priority=high",
	                "-o",    "json",    "--detach", "x"};
	struct cnl_cli_args a;
	char err[128];

	(void)state;
	assert_int_equal(parse(argv, 8, false, &a, err), 0);
	assert_string_equal(a.values[2], "h100-25");
	assert_string_equal(a.values[4], "high");
	assert_string_equal(a.values[0], "json");
	assert_string_equal(a.values[3], "");
	assert_null(a.values[1]);
	assert_int_equal(a.npos, 2);
	assert_string_equal(a.pos[0], "train.py");
	assert_string_equal(a.pos[1], "x");
	assert_int_equal(cnl_cli_flag_find(flags, NF, "gpu"), 2);
	assert_int_equal(cnl_cli_flag_find(flags, NF, "nope"), -1);
}

static void test_last_wins_and_dashdash(void **state)
{
	char *argv[] = {"--gpu", "a", "--gpu=b", "-h", "--", "--gpu", "-"};
	struct cnl_cli_args a;
	char err[128];

	(void)state;
	assert_int_equal(parse(argv, 7, false, &a, err), 0);
	assert_string_equal(a.values[2], "b");
	assert_string_equal(a.values[1], "");
	assert_int_equal(a.npos, 2);
	assert_string_equal(a.pos[0], "--gpu");
	assert_string_equal(a.pos[1], "-");
}

static void test_passthrough(void **state)
{
	/* cnlab run train.py --lr 0.1 --gpu h100-25 --epochs=3 */
	char *argv[] = {"train.py", "--lr",    "0.1",
	                "--gpu",    "h100-25", "--epochs=3"};
	char *before[] = {"--lr", "train.py"};
	struct cnl_cli_args a;
	char err[128];

	(void)state;
	assert_int_equal(parse(argv, 6, true, &a, err), 0);
	assert_string_equal(a.values[2], "h100-25");
	assert_int_equal(a.npos, 4);
	assert_string_equal(a.pos[1], "--lr");
	assert_string_equal(a.pos[2], "0.1");
	assert_string_equal(a.pos[3], "--epochs=3");
	/* Before the script, an unknown flag is still an error. */
	assert_int_equal(parse(before, 2, true, &a, err), -EINVAL);
	assert_string_equal(err, "unknown flag --lr");
	/* Without passthrough, too. */
	assert_int_equal(parse(argv, 6, false, &a, err), -EINVAL);
}

static void test_errors(void **state)
{
	char *missing[] = {"x", "--gpu"};
	char *boolval[] = {"--detach=yes"};
	char *unknown[] = {"--colour", "red"};
	struct cnl_cli_args a;
	char err[128];

	(void)state;
	a.npos = 99;
	assert_int_equal(parse(missing, 2, false, &a, err), -EINVAL);
	assert_string_equal(err, "flag --gpu needs a value (SHAPE)");
	assert_int_equal(a.npos, 99); /* untouched on failure */
	assert_int_equal(parse(boolval, 1, false, &a, err), -EINVAL);
	assert_string_equal(err, "flag --detach takes no value");
	assert_int_equal(parse(unknown, 2, false, &a, err), -EINVAL);
	assert_string_equal(err, "unknown flag --colour");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_values),
	    cmocka_unit_test(test_last_wins_and_dashdash),
	    cmocka_unit_test(test_passthrough),
	    cmocka_unit_test(test_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
