/*
 * test_config.c - the config table: defaults, a file using every type and
 * syntax, environment overrides, JSON and Markdown output, cnl_size_parse,
 * command-line flags, and every error case, each of which must leave the object
 * exactly as it was (byte for byte, including the string pointers).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "common/config.h"
#include "common/json.h"
#include "common/util.h"

struct cfg {
	char *data_dir;
	char *name;
	int64_t workers;
	bool tls;
	int64_t lease_timeout;
	int64_t cache_size;
	int64_t bias;
};

static const struct cnl_config_def table[] = {
    {"data_dir", CNL_CONFIG_STRING, offsetof(struct cfg, data_dir),
     "/var/lib/cnlab", 0, 0, "Where state lives."},
    {"name", CNL_CONFIG_STRING, offsetof(struct cfg, name), NULL, 0, 0,
     "Cluster name | shown in the UI."},
    {"workers", CNL_CONFIG_INT, offsetof(struct cfg, workers), "4", 1, 64,
     "Worker threads."},
    {"tls", CNL_CONFIG_BOOL, offsetof(struct cfg, tls), "false", 0, 0,
     "Serve HTTPS."},
    {"lease_timeout", CNL_CONFIG_DURATION, offsetof(struct cfg, lease_timeout),
     "30s", 1000, 3600000, "How long a lease lives."},
    {"cache_size", CNL_CONFIG_SIZE, offsetof(struct cfg, cache_size), "512mib",
     0, 0, "Cache budget."},
    {"bias", CNL_CONFIG_INT, offsetof(struct cfg, bias), "-3", 0, 0,
     "Unbounded."},
};
#define N CNL_ARRAY_SIZE(table)

static char path[64];

static int setup(void **state)
{
	struct cfg *c = malloc(sizeof(*c));
	int fd;

	if (!c)
		return -1;
	/* Garbage, to show that defaults never read the old fields. */
	memset(c, 0xa5, sizeof(*c));
	if (cnl_config_defaults(table, N, c) < 0)
		return -1;
	memcpy(path, "/tmp/cnl-test-config-XXXXXX", 28);
	fd = mkstemp(path);
	if (fd < 0)
		return -1;
	close(fd);
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct cfg *c = *state;

	cnl_config_done(table, N, c);
	free(c);
	unlink(path);
	return 0;
}

static void write_file(const char *text, size_t len)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static void test_size_parse(void **state)
{
	static const struct {
		const char *text;
		int64_t bytes;
	} good[] = {
	    {"0", 0},
	    {"512", 512},
	    {"512b", 512},
	    {"1kb", 1000},
	    {"1KB", 1000},
	    {"1kib", 1024},
	    {"1KiB", 1024},
	    {"50gb", 50000000000},
	    {"512mib", 536870912},
	    {"3mb", 3000000},
	    {"1tb", 1000000000000},
	    {"2TiB", 2199023255552},
	    {"5gib", 5368709120},
	    {"9223372036854775807", INT64_MAX},
	    {"8388607tib", 9223370937343148032},
	};
	static const char *const bad[] = {
	    "",           "-1",
	    "+1",         "1.5gb",
	    "1 gb",       " 1gb",
	    "gb",         "1pb",
	    "1kbb",       "1k",
	    "1gb ",       "9223372036854775808",
	    "8388608tib", "9223372036854776kb",
	};

	(void)state;
	for (size_t i = 0; i < CNL_ARRAY_SIZE(good); i++) {
		int64_t v = -1;
		assert_int_equal(cnl_size_parse(good[i].text, &v), 0);
		assert_int_equal(v, good[i].bytes);
	}
	for (size_t i = 0; i < CNL_ARRAY_SIZE(bad); i++) {
		int64_t v = 42;
		if (cnl_size_parse(bad[i], &v) != -CNL_EPARSE)
			fail_msg("accepted \"%s\"", bad[i]);
		assert_int_equal(v, 42);
	}
}

static void test_defaults(void **state)
{
	struct cfg *c = *state;

	assert_string_equal(c->data_dir, "/var/lib/cnlab");
	assert_null(c->name);
	assert_int_equal(c->workers, 4);
	assert_false(c->tls);
	assert_int_equal(c->lease_timeout, 30000);
	assert_int_equal(c->cache_size, 536870912);
	assert_int_equal(c->bias, -3);
	assert_ptr_equal(cnl_config_find(table, N, "tls"), &table[3]);
	assert_null(cnl_config_find(table, N, "TLS"));
}

static void test_invalid_default(void **state)
{
	static const struct cnl_config_def bad_syntax[] = {
	    {"a", CNL_CONFIG_STRING, offsetof(struct cfg, data_dir), "x", 0, 0,
	     ""},
	    {"b", CNL_CONFIG_INT, offsetof(struct cfg, workers), "four", 0, 0,
	     ""},
	};
	static const struct cnl_config_def bad_range[] = {
	    {"b", CNL_CONFIG_INT, offsetof(struct cfg, workers), "0", 1, 2, ""},
	};
	struct cfg c, before;

	(void)state;
	memset(&c, 0x5a, sizeof(c));
	memcpy(&before, &c, sizeof(c));
	assert_int_equal(cnl_config_defaults(bad_syntax, 2, &c), -CNL_ECONFIG);
	assert_int_equal(cnl_config_defaults(bad_range, 1, &c), -CNL_ECONFIG);
	assert_memory_equal(&c, &before, sizeof(c));
}

static void test_set(void **state)
{
	struct cfg *c = *state;
	char err[256];

	assert_int_equal(
	    cnl_config_set(table, N, c, "data_dir", "/data", err, sizeof(err)),
	    0);
	assert_string_equal(c->data_dir, "/data");
	assert_int_equal(
	    cnl_config_set(table, N, c, "workers", "64", err, sizeof(err)), 0);
	assert_int_equal(c->workers, 64);
	assert_int_equal(
	    cnl_config_set(table, N, c, "tls", "ON", err, sizeof(err)), 0);
	assert_true(c->tls);
	assert_int_equal(cnl_config_set(table, N, c, "lease_timeout", "1h", err,
	                                sizeof(err)),
	                 0);
	assert_int_equal(c->lease_timeout, 3600000);
	assert_int_equal(
	    cnl_config_set(table, N, c, "cache_size", "50gb", err, sizeof(err)),
	    0);
	assert_int_equal(c->cache_size, 50000000000);
	assert_int_equal(cnl_config_set(table, N, c, "bias",
	                                "-9223372036854775808", err,
	                                sizeof(err)),
	                 0);
	assert_int_equal(c->bias, INT64_MIN);
}

static void test_set_errors(void **state)
{
	static const struct {
		const char *key, *value;
		int r;
		const char *err;
	} cases[] = {
	    {"nope", "1", -CNL_EFIELD, "unknown key \"nope\""},
	    {"workers", "0", -ERANGE,
	     "key \"workers\": must be an integer in 1..64, not \"0\""},
	    {"workers", "65", -ERANGE,
	     "key \"workers\": must be an integer in 1..64, not \"65\""},
	    {"workers", "8x", -CNL_ECONFIG,
	     "key \"workers\": must be an integer in 1..64, not \"8x\""},
	    {"workers", " 8", -CNL_ECONFIG,
	     "key \"workers\": must be an integer in 1..64, not \" 8\""},
	    {"bias", "", -CNL_ECONFIG,
	     "key \"bias\": must be an integer, not \"\""},
	    {"bias", "9223372036854775808", -CNL_ECONFIG,
	     "key \"bias\": must be an integer, not \"9223372036854775808\""},
	    {"tls", "maybe", -CNL_ECONFIG,
	     "key \"tls\": must be true or false (or yes/no, on/off, 1/0), "
	     "not \"maybe\""},
	    {"lease_timeout", "5 minutes", -CNL_ECONFIG,
	     "key \"lease_timeout\": must be a duration in 1s..1h, "
	     "not \"5 minutes\""},
	    {"lease_timeout", "2h", -ERANGE,
	     "key \"lease_timeout\": must be a duration in 1s..1h, not \"2h\""},
	    {"lease_timeout", "999ms", -ERANGE,
	     "key \"lease_timeout\": must be a duration in 1s..1h, "
	     "not \"999ms\""},
	    {"cache_size", "1.5gb", -CNL_ECONFIG,
	     "key \"cache_size\": must be a size like 512mib or 50gb, "
	     "not \"1.5gb\""},
	};
	struct cfg *c = *state, before;
	char err[256];

	memcpy(&before, c, sizeof(before));
	for (size_t i = 0; i < CNL_ARRAY_SIZE(cases); i++) {
		assert_int_equal(cnl_config_set(table, N, c, cases[i].key,
		                                cases[i].value, err,
		                                sizeof(err)),
		                 cases[i].r);
		assert_string_equal(err, cases[i].err);
		assert_memory_equal(c, &before, sizeof(before));
	}
}

static void test_load_file_every_type(void **state)
{
	static const char text[] =
	    "# CNLab test config\n"
	    "   # an indented comment\n"
	    "\n"
	    "data_dir = \"/srv/cnlab data\"   # a comment after a quote\n"
	    "name = cluster #1  \n"
	    "workers=8\n"
	    "\ttls\t=\tyes\r\n"
	    "lease_timeout = 1h\n"
	    "cache_size = 2GiB\n"
	    "bias = -7"; /* no final newline */
	struct cfg *c = *state;
	char err[256] = "";

	write_file(text, sizeof(text) - 1);
	assert_int_equal(
	    cnl_config_load_file(table, N, c, path, err, sizeof(err)), 0);
	assert_string_equal(err, "");
	assert_string_equal(c->data_dir, "/srv/cnlab data");
	/* An unquoted value is the rest of the line, '#' included. */
	assert_string_equal(c->name, "cluster #1");
	assert_int_equal(c->workers, 8);
	assert_true(c->tls);
	assert_int_equal(c->lease_timeout, 3600000);
	assert_int_equal(c->cache_size, INT64_C(2) << 30);
	assert_int_equal(c->bias, -7);

	/* Escapes in quotes; keys absent from the file keep their values. */
	static const char text2[] = "name = \"say \\\"hi\\\"\\tnow\\\\\"\n"
	                            "data_dir = \"\"\n";
	write_file(text2, sizeof(text2) - 1);
	assert_int_equal(
	    cnl_config_load_file(table, N, c, path, err, sizeof(err)), 0);
	assert_string_equal(c->name, "say \"hi\"\tnow\\");
	assert_string_equal(c->data_dir, "");
	assert_int_equal(c->workers, 8);

	/* An empty file changes nothing. */
	write_file("", 0);
	assert_int_equal(
	    cnl_config_load_file(table, N, c, path, err, sizeof(err)), 0);
	assert_int_equal(c->workers, 8);
}

static void test_load_file_errors(void **state)
{
	static const struct {
		const char *line;
		int r;
		const char *err; /* after "PATH:3: " */
	} cases[] = {
	    {"bogus = 1", -CNL_EFIELD, "unknown key \"bogus\""},
	    {"workers = 65", -ERANGE,
	     "key \"workers\": must be an integer in 1..64, not \"65\""},
	    {"tls = maybe", -CNL_ECONFIG,
	     "key \"tls\": must be true or false (or yes/no, on/off, 1/0), "
	     "not \"maybe\""},
	    {"lease_timeout = 5 minutes", -CNL_ECONFIG,
	     "key \"lease_timeout\": must be a duration in 1s..1h, "
	     "not \"5 minutes\""},
	    {"cache_size = 1.5gb", -CNL_ECONFIG,
	     "key \"cache_size\": must be a size like 512mib or 50gb, "
	     "not \"1.5gb\""},
	    {"data_dir = \"/x", -CNL_EPARSE, "unterminated quote"},
	    {"data_dir = \"/x\\", -CNL_EPARSE, "unterminated quote"},
	    {"data_dir = \"/x\\q\"", -CNL_EPARSE,
	     "unknown escape in quoted value"},
	    {"data_dir = \"/x\" y", -CNL_EPARSE, "text after closing quote"},
	    {"workers 8", -CNL_EPARSE, "expected \"key = value\""},
	    {"workers", -CNL_EPARSE, "expected \"key = value\""},
	    {"= 8", -CNL_EPARSE, "expected \"key = value\""},
	    {"work ers = 8", -CNL_EPARSE, "expected \"key = value\""},
	    {"bias = 10", -CNL_EDUP, "key \"bias\" already set on line 1"},
	};
	struct cfg *c = *state, before;
	char text[256], err[256], want[512];

	memcpy(&before, c, sizeof(before));
	for (size_t i = 0; i < CNL_ARRAY_SIZE(cases); i++) {
		/* Two valid lines first: they must not be applied either. */
		int n =
		    snprintf(text, sizeof(text),
		             "bias = 9\nname = changed\n%s\n", cases[i].line);
		write_file(text, (size_t)n);
		assert_int_equal(
		    cnl_config_load_file(table, N, c, path, err, sizeof(err)),
		    cases[i].r);
		snprintf(want, sizeof(want), "%s:3: %s", path, cases[i].err);
		assert_string_equal(err, want);
		assert_memory_equal(c, &before, sizeof(before));
	}

	write_file("workers = 9\nname = a\0b\n", 23);
	assert_int_equal(
	    cnl_config_load_file(table, N, c, path, err, sizeof(err)),
	    -CNL_EPARSE);
	snprintf(want, sizeof(want), "%s:2: NUL byte in line", path);
	assert_string_equal(err, want);
	assert_memory_equal(c, &before, sizeof(before));

	unlink(path);
	assert_int_equal(
	    cnl_config_load_file(table, N, c, path, err, sizeof(err)), -ENOENT);
	snprintf(want, sizeof(want), "%s: No such file or directory", path);
	assert_string_equal(err, want);
	assert_memory_equal(c, &before, sizeof(before));
}

static void test_load_env(void **state)
{
	char *env[] = {
	    "PATH=/usr/bin",
	    "CNLAB_DATA_DIR=/env/dir",
	    "CNLAB_WORKERS=16",
	    "CNLAB_TLS=on",
	    "CNLAB_LEASE_TIMEOUT=45s",
	    "CNLAB_CACHE_SIZE=1gb",
	    "CNLAB_NAME=\"kept literally\"",
	    "CNLAB_UNRELATED=x", /* not a key: ignored */
	    "CNLAB_WORKERSX=3",  /* not a key: ignored */
	    "CNLAB_workers=2",   /* keys are upper case: ignored */
	    "OTHER_BIAS=5",      /* other prefix: ignored */
	    "CNLAB_BIAS",        /* no '=': ignored */
	    NULL,
	};
	struct cfg *c = *state;
	char err[256] = "";

	assert_int_equal(
	    cnl_config_load_env(table, N, c, "CNLAB_", env, err, sizeof(err)),
	    0);
	assert_string_equal(c->data_dir, "/env/dir");
	assert_string_equal(c->name, "\"kept literally\"");
	assert_int_equal(c->workers, 16);
	assert_true(c->tls);
	assert_int_equal(c->lease_timeout, 45000);
	assert_int_equal(c->cache_size, 1000000000);
	assert_int_equal(c->bias, -3);
}

static void test_load_env_error(void **state)
{
	char *env[] = {
	    "CNLAB_DATA_DIR=/env/dir",
	    "CNLAB_WORKERS=0",
	    NULL,
	};
	struct cfg *c = *state, before;
	char err[256] = "";

	memcpy(&before, c, sizeof(before));
	assert_int_equal(
	    cnl_config_load_env(table, N, c, "CNLAB_", env, err, sizeof(err)),
	    -ERANGE);
	assert_string_equal(err, "CNLAB_WORKERS: key \"workers\": must be an "
	                         "integer in 1..64, not \"0\"");
	assert_memory_equal(c, &before, sizeof(before));
}

static void test_load_args(void **state)
{
	char *argv[] = {
	    "prog",         "--data-dir", "/flag/dir", "--lease_timeout=2m",
	    "--all-in-one", "--config",   "x.conf",    "-h",
	    "--workers",    "8",          "--name=",   "--workers=9",
	    "--gpus=fake",  NULL,
	};
	struct cnl_config_flag own[] = {
	    {"config", true, NULL}, {"all-in-one", false, NULL},
	    {"gpus", true, NULL},   {"h", false, NULL},
	    {"help", false, NULL},  {NULL, false, NULL}};
	struct cfg *c = *state, before;
	char err[256] = "";

	/* Checking only: the object is not touched, own flags are found. */
	memcpy(&before, c, sizeof(before));
	assert_int_equal(cnl_config_load_args(table, N, NULL, 13, argv, own,
	                                      err, sizeof(err)),
	                 0);
	assert_memory_equal(c, &before, sizeof(before));
	assert_string_equal(own[0].value, "x.conf");
	assert_string_equal(own[1].value, "");
	assert_string_equal(own[2].value, "fake");
	assert_string_equal(own[3].value, "");
	assert_null(own[4].value);
	assert_int_equal(
	    cnl_config_load_args(table, N, c, 13, argv, own, err, sizeof(err)),
	    0);
	assert_string_equal(c->data_dir, "/flag/dir");
	assert_int_equal(c->lease_timeout, 120000);
	assert_int_equal(c->workers, 9); /* the last wins */
	assert_string_equal(c->name, "");
	assert_int_equal(c->bias, -3);
}

static void test_load_args_errors(void **state)
{
	static const struct {
		int argc;
		char *argv[4];
		int r;
		const char *err;
	} cases[] = {
	    {2, {"p", "--colour"}, -CNL_EFIELD, "unknown flag --colour"},
	    {3,
	     {"p", "--colour=red", "x"},
	     -CNL_EFIELD,
	     "unknown flag --colour"},
	    {2, {"p", "-x"}, -CNL_EFIELD, "unknown flag -x"},
	    {2,
	     {"p", "stray"},
	     -CNL_EFIELD,
	     "unexpected argument stray (want --KEY VALUE)"},
	    {2,
	     {"p", "--workers"},
	     -CNL_EPARSE,
	     "flag --workers needs a value"},
	    {2, {"p", "--config"}, -CNL_EPARSE, "flag --config needs a value"},
	    {2,
	     {"p", "--tls-only=1"},
	     -CNL_EPARSE,
	     "flag --tls-only takes no value"},
	    {3,
	     {"p", "--data_dir=/d", "--workers=0"},
	     -ERANGE,
	     "flag --workers: must be an integer in 1..64, not \"0\""},
	    {3,
	     {"p", "--lease-timeout", "soon"},
	     -CNL_ECONFIG,
	     "flag --lease-timeout: must be a duration in 1s..1h, not "
	     "\"soon\""},
	};
	struct cnl_config_flag own[] = {{"config", true, NULL},
	                                {"tls-only", false, NULL},
	                                {NULL, false, NULL}};
	struct cfg *c = *state, before;

	memcpy(&before, c, sizeof(before));
	for (size_t i = 0; i < CNL_ARRAY_SIZE(cases); i++) {
		char err[256] = "";

		assert_int_equal(
		    cnl_config_load_args(table, N, c, cases[i].argc,
		                         cases[i].argv, own, err, sizeof(err)),
		    cases[i].r);
		assert_string_equal(err, cases[i].err);
		assert_memory_equal(c, &before, sizeof(before));
	}
}

static void test_to_json(void **state)
{
	struct cfg *c = *state;
	json_t *j = cnl_config_to_json(table, N, c);
	char *s;

	assert_non_null(j);
	s = cnl_json_dumps_compact(j);
	assert_string_equal(s, "{\"bias\":-3,\"cache_size\":536870912,"
	                       "\"data_dir\":\"/var/lib/cnlab\","
	                       "\"lease_timeout\":30000,\"name\":null,"
	                       "\"tls\":false,\"workers\":4}");
	free(s);
	json_decref(j);
}

static void test_doc_markdown(void **state)
{
	char *buf = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&buf, &size);

	(void)state;
	assert_non_null(f);
	assert_int_equal(cnl_config_doc_markdown(table, N, f), 0);
	fclose(f);
	assert_string_equal(
	    buf, "| Key | Type | Default | Range | Description |\n"
	         "|-----|------|---------|-------|-------------|\n"
	         "| `data_dir` | string | `/var/lib/cnlab` |  | Where state "
	         "lives. |\n"
	         "| `name` | string | (none) |  | Cluster name \\| shown in "
	         "the UI. |\n"
	         "| `workers` | integer | `4` | 1..64 | Worker threads. |\n"
	         "| `tls` | boolean | `false` |  | Serve HTTPS. |\n"
	         "| `lease_timeout` | duration | `30s` | 1s..1h | How long a "
	         "lease lives. |\n"
	         "| `cache_size` | size | `512mib` |  | Cache budget. |\n"
	         "| `bias` | integer | `-3` |  | Unbounded. |\n");
	free(buf);
}

static void test_done(void **state)
{
	struct cfg *c = *state;

	assert_int_equal(cnl_config_set(table, N, c, "name", "x", NULL, 0), 0);
	cnl_config_done(table, N, c);
	assert_null(c->data_dir);
	assert_null(c->name);
	cnl_config_done(table, N, c); /* idempotent */
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_size_parse),
	    T(test_defaults),
	    cmocka_unit_test(test_invalid_default),
	    T(test_set),
	    T(test_set_errors),
	    T(test_load_file_every_type),
	    T(test_load_file_errors),
	    T(test_load_env),
	    T(test_load_env_error),
	    T(test_load_args),
	    T(test_load_args_errors),
	    T(test_to_json),
	    cmocka_unit_test(test_doc_markdown),
	    T(test_done),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
