/*
 * test_format.c - the cnlab CLI's pure text helpers: table alignment with
 * multi-byte cells, thousands separators, quota lines (limited and
 * unlimited), waiting times, storage sizes and idle durations from the
 * command line, shell quoting, and the inline script command, which is
 * also run through sh to prove the script and its arguments survive.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cli/format.h"
#include "cnlab/errors.h"
#include "common/base64.h"

/* The text @t prints. */
static char *table_text(struct cnl_cli_table *t)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	assert_int_equal(cnl_cli_table_print(t, f), 0);
	fclose(f);
	return buf;
}

static void test_table(void **state)
{
	struct cnl_cli_table t;
	char *s;

	(void)state;
	cnl_cli_table_init(&t, 4);
	cnl_cli_table_add(
	    &t, (const char *[]){"NAME", "GPU", "SLICE", "AVAILABLE"});
	cnl_cli_table_add(
	    &t, (const char *[]){"h100-25pct", "H100", "25%", "✓ now"});
	cnl_cli_table_add(
	    &t, (const char *[]){"h100-full", "H100", "100%", "queue: 12 min"});
	cnl_cli_table_add(&t, (const char *[]){"x", NULL, "", "✓ now"});
	s = table_text(&t);
	/* "✓" is three bytes but one column: the columns stay aligned. */
	assert_string_equal(s, "NAME        GPU   SLICE  AVAILABLE\n"
	                       "h100-25pct  H100  25%    ✓ now\n"
	                       "h100-full   H100  100%   queue: 12 min\n"
	                       "x                        ✓ now\n");
	free(s);
	cnl_cli_table_done(&t);
	/* Reusable after done + init; an empty table prints nothing. */
	cnl_cli_table_init(&t, 2);
	s = table_text(&t);
	assert_string_equal(s, "");
	free(s);
	cnl_cli_table_add(&t, (const char *[]){"✓✓", "b"});
	cnl_cli_table_add(&t, (const char *[]){"abc", "c"});
	cnl_cli_table_add(&t, (const char *[]){"d", ""});
	s = table_text(&t);
	/* An empty last cell leaves no trailing blanks. */
	assert_string_equal(s, "✓✓   b\nabc  c\nd\n");
	free(s);
	cnl_cli_table_done(&t);
	assert_int_equal(cnl_cli_utf8_width("✓ now"), 5);
	assert_int_equal(cnl_cli_utf8_width(""), 0);
}

static void test_number(void **state)
{
	static const struct {
		double v;
		const char *text;
	} cases[] = {
	    {0, "0"},
	    {342, "342"},
	    {1000, "1,000"},
	    {1820, "1,820"},
	    {5000, "5,000"},
	    {999999, "999,999"},
	    {1234567, "1,234,567"},
	    {0.25, "0.25"},
	    {1234.5, "1,234.50"},
	    {341.999, "342"},
	    {0.004, "0"},
	    {-1500, "-1,500"},
	    {99.995, "100"},
	};
	char buf[32];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(
		    cnl_cli_format_number(cases[i].v, buf, sizeof(buf)),
		    (int)strlen(cases[i].text));
		assert_string_equal(buf, cases[i].text);
	}
	assert_int_equal(cnl_cli_format_number(1234567, buf, 5), -ENOSPC);
}

static void test_quota(void **state)
{
	char buf[64];

	(void)state;
	/* The seed's lines. */
	assert_true(
	    cnl_cli_format_quota(342, 1000, 34, true, buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "342 / 1,000 (34%)");
	cnl_cli_format_quota(1820, 5000, 36, true, buf, sizeof(buf));
	assert_string_equal(buf, "1,820 / 5,000 (36%)");
	cnl_cli_format_quota(2, 5, 40, false, buf, sizeof(buf));
	assert_string_equal(buf, "2 / 5");
	cnl_cli_format_quota(0.5, -1, 0, true, buf, sizeof(buf));
	assert_string_equal(buf, "0.50 / unlimited");
	assert_int_equal(cnl_cli_format_quota(1, 2, 50, true, buf, 4), -ENOSPC);
}

static void test_wait(void **state)
{
	static const struct {
		int64_t ms;
		const char *text;
	} cases[] = {
	    {-5, "now"},        {0, "now"},          {1, "1s"},
	    {18000, "18s"},     {59999, "60s"},      {60000, "1 min"},
	    {60001, "2 min"},   {720000, "12 min"},  {7199999, "120 min"},
	    {7200000, "2h00m"}, {11100000, "3h05m"},
	};
	char buf[32];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_true(cnl_cli_format_wait(cases[i].ms, buf, sizeof(buf)) >
		            0);
		assert_string_equal(buf, cases[i].text);
	}
}

static void test_storage(void **state)
{
	static const struct {
		const char *s;
		int64_t gb;
	} good[] = {
	    {"50", 50},   {"50gb", 50},  {"50GB", 50},  {"50G", 50},
	    {"50Gi", 54}, {"50gib", 54}, {"1Ti", 1100}, {"1tb", 1000},
	    {"500mb", 1}, {"1500mb", 2}, {"0", 0},
	};
	static const char *const badv[] = {
	    "",    "gb", "-5", "5 gb", "5xb", "5.5gb", "99999999999999999999",
	    "5Gii"};
	int64_t gb;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_int_equal(cnl_cli_parse_storage(good[i].s, &gb), 0);
		assert_int_equal(gb, good[i].gb);
	}
	for (size_t i = 0; i < sizeof(badv) / sizeof(badv[0]); i++) {
		gb = 77;
		assert_int_equal(cnl_cli_parse_storage(badv[i], &gb),
		                 -CNL_EPARSE);
		assert_int_equal(gb, 77);
	}
}

static void test_cpu_and_memory(void **state)
{
	static const struct {
		const char *s;
		int64_t v;
	} cpu[] = {{"2", 2000},    {"0.5", 500},  {"500m", 500},
	           {"1.25", 1250}, {"0.001", 1},  {"1024", 1024000},
	           {"1m", 1},      {"3.10", 3100}},
	  mem[] = {{"512", 512},  {"8Gi", 8192}, {"8gib", 8192},
	           {"8g", 7630},  {"8gb", 7630}, {"512Mi", 512},
	           {"512m", 489}, {"1k", 1},     {"16Ti", 16777216}};
	static const char *const bad_cpu[] = {
	    "",        "0",  "0m",   "0.0001", "1.",   ".5",
	    "2 cores", "-1", "1025", "2c",     "1.5m", "99999999999"};
	static const char *const bad_mem[] = {"",    "0",  "0Mi",  "8 g",
	                                      "-8g", "8x", "17Ti", "8.5g"};
	int64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(cpu) / sizeof(cpu[0]); i++) {
		if (cnl_cli_parse_cpu(cpu[i].s, &v) != 0 || v != cpu[i].v)
			fail_msg("cpu %s", cpu[i].s);
	}
	for (size_t i = 0; i < sizeof(mem) / sizeof(mem[0]); i++) {
		if (cnl_cli_parse_memory(mem[i].s, &v) != 0 || v != mem[i].v)
			fail_msg("memory %s", mem[i].s);
	}
	for (size_t i = 0; i < sizeof(bad_cpu) / sizeof(bad_cpu[0]); i++) {
		v = 77;
		if (cnl_cli_parse_cpu(bad_cpu[i], &v) != -CNL_EPARSE || v != 77)
			fail_msg("cpu %s accepted", bad_cpu[i]);
	}
	for (size_t i = 0; i < sizeof(bad_mem) / sizeof(bad_mem[0]); i++) {
		v = 77;
		if (cnl_cli_parse_memory(bad_mem[i], &v) != -CNL_EPARSE ||
		    v != 77)
			fail_msg("memory %s accepted", bad_mem[i]);
	}
}

static void test_idle(void **state)
{
	int64_t s;

	(void)state;
	assert_int_equal(cnl_cli_parse_idle("2h", &s), 0);
	assert_int_equal(s, 7200);
	assert_int_equal(cnl_cli_parse_idle("4h", &s), 0);
	assert_int_equal(s, 14400);
	assert_int_equal(cnl_cli_parse_idle("1h30m", &s), 0);
	assert_int_equal(s, 5400);
	assert_int_equal(cnl_cli_parse_idle("600", &s), 0);
	assert_int_equal(s, 600);
	assert_int_equal(cnl_cli_parse_idle("1500ms", &s), 0);
	assert_int_equal(s, 2);
	s = 9;
	assert_int_equal(cnl_cli_parse_idle("2 hours", &s), -CNL_EPARSE);
	assert_int_equal(cnl_cli_parse_idle("", &s), -CNL_EPARSE);
	assert_int_equal(cnl_cli_parse_idle("-1h", &s), -CNL_EPARSE);
	assert_int_equal(s, 9);
}

static void test_quote(void **state)
{
	char buf[64];

	(void)state;
	buf[0] = '\0';
	assert_int_equal(cnl_cli_shell_quote("train.py", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "train.py");
	buf[0] = '\0';
	cnl_cli_shell_quote("it's $HOME", buf, sizeof(buf));
	assert_string_equal(buf, "'it'\\''s $HOME'");
	buf[0] = '\0';
	cnl_cli_shell_quote("", buf, sizeof(buf));
	assert_string_equal(buf, "''");
	/* Too long: the buffer keeps what it had. */
	snprintf(buf, sizeof(buf), "abc ");
	assert_int_equal(cnl_cli_shell_quote("0123456789", buf, 8), -ENOSPC);
	assert_string_equal(buf, "abc ");
	{
		char *argv[] = {"nvidia-smi", "-L", "a b"};

		assert_int_equal(
		    cnl_cli_plain_command(argv, 3, buf, sizeof(buf)), 0);
		assert_string_equal(buf, "nvidia-smi -L 'a b'");
		assert_int_equal(cnl_cli_plain_command(argv, 3, buf, 10),
		                 -ENOSPC);
	}
}

/* Run @cmd with sh in a scratch folder; its stdout in @out. */
static void run_sh(const char *cmd, char *out, size_t len)
{
	char dir[] = "/tmp/cnl-cli-XXXXXX", line[2048];
	FILE *p;
	size_t n;

	assert_non_null(mkdtemp(dir));
	snprintf(line, sizeof(line), "cd %s && { %s; } ; rm -rf %s", dir, cmd,
	         dir);
	p = popen(line, "r");
	assert_non_null(p);
	n = fread(out, 1, len - 1, p);
	out[n] = '\0';
	pclose(p);
}

static void test_script_command(void **state)
{
	static const char script[] =
	    "echo \"hi $1|$2\"\nprintf '%s\\n' \"$0\"\n";
	char *args[] = {"--lr", "it's"};
	char buf[1024], out[256], cmd[2048];
	const char *base = NULL;
	char *b64;

	(void)state;
	assert_int_equal(cnl_cli_script_command("/home/u/x/run.sh", args, 2,
	                                        buf, sizeof(buf), &base),
	                 0);
	assert_string_equal(base, "run.sh");
	assert_string_equal(buf, "sh run.sh --lr 'it'\\''s'");
	/* Run as the agent would: the file written from its base64, then
	 * the command, in the job's directory. */
	b64 = cnl_b64_encode_new(script, strlen(script), CNL_B64_PAD);
	snprintf(cmd, sizeof(cmd), "echo %s | base64 -d > run.sh && %s", b64,
	         buf);
	free(b64);
	run_sh(cmd, out, sizeof(out));
	assert_string_equal(out, "hi --lr|it's\nrun.sh\n");
	/* *.py runs with python3. */
	assert_int_equal(cnl_cli_script_command("train.py", NULL, 0, buf,
	                                        sizeof(buf), &base),
	                 0);
	assert_string_equal(buf, "python3 train.py");
	/* Every length of padding decodes back. */
	for (size_t n = 0; n < 5; n++) {
		char want[8] = "abcd";

		want[n] = '\0';
		b64 = cnl_b64_encode_new("abcd", n, CNL_B64_PAD);
		snprintf(cmd, sizeof(cmd), "printf %%s '%s' | base64 -d", b64);
		free(b64);
		run_sh(cmd, out, sizeof(out));
		assert_string_equal(out, want);
	}
	/* Arguments that do not fit the command. */
	{
		char *big[] = {buf};

		memset(buf, 'x', 900);
		buf[900] = '\0';
		assert_int_equal(
		    cnl_cli_script_command("a.sh", big, 1, cmd, 64, &base),
		    -ENOSPC);
	}
	assert_int_equal(
	    cnl_cli_script_command("dir/", NULL, 0, buf, sizeof(buf), &base),
	    -EINVAL);
	assert_int_equal(
	    cnl_cli_script_command("-rf", NULL, 0, buf, sizeof(buf), &base),
	    -EINVAL);
}

static void test_safe_name(void **state)
{
	(void)state;
	assert_true(cnl_cli_safe_name("model.bin"));
	assert_true(cnl_cli_safe_name(".hidden"));
	assert_false(cnl_cli_safe_name(""));
	assert_false(cnl_cli_safe_name("."));
	assert_false(cnl_cli_safe_name(".."));
	assert_false(cnl_cli_safe_name("../etc/passwd"));
	assert_false(cnl_cli_safe_name("a/b"));
	assert_false(cnl_cli_safe_name("a\nb"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_table),
	    cmocka_unit_test(test_number),
	    cmocka_unit_test(test_quota),
	    cmocka_unit_test(test_wait),
	    cmocka_unit_test(test_storage),
	    cmocka_unit_test(test_idle),
	    cmocka_unit_test(test_cpu_and_memory),
	    cmocka_unit_test(test_quote),
	    cmocka_unit_test(test_script_command),
	    cmocka_unit_test(test_safe_name),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
