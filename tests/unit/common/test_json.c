/*
 * test_json.c - every error path of the strict JSON helpers: unknown
 * fields, missing and wrongly typed fields, ranges, syntax errors with line
 * and column, unreadable files, and the canonical compact dump.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "common/json.h"

static json_t *parse(const char *text)
{
	json_t *j = NULL;
	char err[128];

	assert_int_equal(cnl_json_loads(text, &j, err, sizeof(err)), 0);
	assert_non_null(j);
	return j;
}

static void test_check_fields(void **state)
{
	static const char *const allowed[] = {"name", "gpus", NULL};
	static const char *const none[] = {NULL};
	json_t *ok = parse("{\"name\": \"a\", \"gpus\": 2}");
	json_t *bad = parse("{\"name\": \"a\", \"zzz\": 1, \"aaa\": 2}");
	json_t *arr = parse("[1]");
	json_t *empty = parse("{}");
	char err[128] = "";

	(void)state;
	assert_int_equal(cnl_json_check_fields(ok, allowed, err, sizeof(err)),
	                 0);
	assert_int_equal(cnl_json_check_fields(empty, none, err, sizeof(err)),
	                 0);
	assert_int_equal(cnl_json_check_fields(ok, none, err, sizeof(err)),
	                 -CNL_EFIELD);
	assert_string_equal(err, "field \"name\": unknown field");
	/* The first unknown field in document order is named. */
	assert_int_equal(cnl_json_check_fields(bad, allowed, err, sizeof(err)),
	                 -CNL_EFIELD);
	assert_string_equal(err, "field \"zzz\": unknown field");
	assert_int_equal(cnl_json_check_fields(arr, allowed, err, sizeof(err)),
	                 -CNL_EFIELD);
	assert_string_equal(err, "expected a JSON object");
	/* No error buffer is fine. */
	assert_int_equal(cnl_json_check_fields(bad, allowed, NULL, 0),
	                 -CNL_EFIELD);
	json_decref(ok);
	json_decref(bad);
	json_decref(arr);
	json_decref(empty);
}

static void test_get_string(void **state)
{
	json_t *o = parse("{\"name\": \"n1\", \"num\": 3, \"nul\": null}");
	json_t *arr = parse("[]");
	const char *s = "default";
	char err[128] = "";

	(void)state;
	assert_int_equal(
	    cnl_json_get_string(o, "name", true, &s, err, sizeof(err)), 1);
	assert_string_equal(s, "n1");

	s = "default";
	assert_int_equal(
	    cnl_json_get_string(o, "absent", false, &s, err, sizeof(err)), 0);
	assert_string_equal(s, "default");
	assert_int_equal(
	    cnl_json_get_string(o, "absent", true, &s, err, sizeof(err)),
	    -CNL_EFIELD);
	assert_string_equal(err, "field \"absent\": required");
	assert_int_equal(
	    cnl_json_get_string(o, "num", false, &s, err, sizeof(err)),
	    -CNL_EFIELD);
	assert_string_equal(err, "field \"num\": must be a string");
	/* null is a value of the wrong type, not an absent field. */
	assert_int_equal(
	    cnl_json_get_string(o, "nul", false, &s, err, sizeof(err)),
	    -CNL_EFIELD);
	assert_string_equal(err, "field \"nul\": must be a string");
	assert_int_equal(
	    cnl_json_get_string(arr, "name", false, &s, err, sizeof(err)),
	    -CNL_EFIELD);
	assert_string_equal(err, "expected a JSON object");
	assert_string_equal(s, "default");
	json_decref(o);
	json_decref(arr);
}

static void test_get_int(void **state)
{
	json_t *o = parse("{\"blocks\": 7, \"zero\": 0, \"big\": 101, "
	                  "\"real\": 5.0, \"str\": \"5\", \"t\": true, "
	                  "\"max\": 9223372036854775807, \"neg\": -3}");
	int64_t v = -1;
	char err[128] = "";

	(void)state;
	assert_int_equal(
	    cnl_json_get_int(o, "blocks", true, 1, 100, &v, err, sizeof(err)),
	    1);
	assert_int_equal(v, 7);

	v = -1;
	assert_int_equal(
	    cnl_json_get_int(o, "absent", false, 1, 100, &v, err, sizeof(err)),
	    0);
	assert_int_equal(
	    cnl_json_get_int(o, "absent", true, 1, 100, &v, err, sizeof(err)),
	    -CNL_EFIELD);
	assert_string_equal(err, "field \"absent\": required");

	assert_int_equal(
	    cnl_json_get_int(o, "zero", true, 1, 100, &v, err, sizeof(err)),
	    -ERANGE);
	assert_string_equal(err,
	                    "field \"zero\": must be an integer in 1..100");
	assert_int_equal(
	    cnl_json_get_int(o, "big", true, 1, 100, &v, err, sizeof(err)),
	    -ERANGE);
	assert_string_equal(err, "field \"big\": must be an integer in 1..100");
	static const char *const wrong[] = {"real", "str", "t"};
	for (size_t i = 0; i < 3; i++) {
		char want[128];
		assert_int_equal(cnl_json_get_int(o, wrong[i], true, 1, 100, &v,
		                                  err, sizeof(err)),
		                 -CNL_EFIELD);
		snprintf(want, sizeof(want),
		         "field \"%s\": must be an integer in 1..100",
		         wrong[i]);
		assert_string_equal(err, want);
	}
	assert_int_equal(v, -1);

	assert_int_equal(cnl_json_get_int(o, "max", true, INT64_MIN, INT64_MAX,
	                                  &v, err, sizeof(err)),
	                 1);
	assert_int_equal(v, INT64_MAX);
	assert_int_equal(
	    cnl_json_get_int(o, "neg", true, -5, -1, &v, err, sizeof(err)), 1);
	assert_int_equal(v, -3);
	assert_int_equal(cnl_json_get_int(o, "real", true, INT64_MIN, INT64_MAX,
	                                  &v, err, sizeof(err)),
	                 -CNL_EFIELD);
	assert_string_equal(err, "field \"real\": must be an integer");
	assert_int_equal(v, -3);
	json_decref(o);
}

static void test_get_bool(void **state)
{
	json_t *o = parse("{\"t\": true, \"f\": false, \"one\": 1, "
	                  "\"s\": \"true\"}");
	bool b = false;
	char err[128] = "";

	(void)state;
	assert_int_equal(cnl_json_get_bool(o, "t", true, &b, err, sizeof(err)),
	                 1);
	assert_true(b);
	assert_int_equal(cnl_json_get_bool(o, "f", true, &b, err, sizeof(err)),
	                 1);
	assert_false(b);
	b = true;
	assert_int_equal(
	    cnl_json_get_bool(o, "absent", false, &b, err, sizeof(err)), 0);
	assert_true(b);
	assert_int_equal(
	    cnl_json_get_bool(o, "absent", true, &b, err, sizeof(err)),
	    -CNL_EFIELD);
	assert_int_equal(
	    cnl_json_get_bool(o, "one", true, &b, err, sizeof(err)),
	    -CNL_EFIELD);
	assert_string_equal(err, "field \"one\": must be true or false");
	assert_int_equal(cnl_json_get_bool(o, "s", true, &b, err, sizeof(err)),
	                 -CNL_EFIELD);
	assert_string_equal(err, "field \"s\": must be true or false");
	assert_true(b);
	json_decref(o);
}

static void test_get_double(void **state)
{
	json_t *o = parse("{\"r\": 0.25, \"i\": 2, \"hi\": 1.5, "
	                  "\"s\": \"0.5\"}");
	double d = -1;
	char err[128] = "";

	(void)state;
	assert_int_equal(
	    cnl_json_get_double(o, "r", true, 0, 1, &d, err, sizeof(err)), 1);
	assert_true(d == 0.25);
	assert_int_equal(
	    cnl_json_get_double(o, "i", true, 0, 10, &d, err, sizeof(err)), 1);
	assert_true(d == 2.0);
	d = -1;
	assert_int_equal(
	    cnl_json_get_double(o, "absent", false, 0, 1, &d, err, sizeof(err)),
	    0);
	assert_int_equal(
	    cnl_json_get_double(o, "absent", true, 0, 1, &d, err, sizeof(err)),
	    -CNL_EFIELD);
	assert_string_equal(err, "field \"absent\": required");
	assert_int_equal(
	    cnl_json_get_double(o, "hi", true, 0, 1, &d, err, sizeof(err)),
	    -ERANGE);
	assert_string_equal(err, "field \"hi\": must be a number in 0..1");
	assert_int_equal(
	    cnl_json_get_double(o, "s", true, 0, 1, &d, err, sizeof(err)),
	    -CNL_EFIELD);
	assert_string_equal(err, "field \"s\": must be a number in 0..1");
	assert_true(d == -1);
	json_decref(o);
}

static void test_loads_errors(void **state)
{
	static const struct {
		const char *text, *err;
	} cases[] = {
	    {"{\"a\": 1,\n  \"b\": }",
	     "line 2 column 8: unexpected token near '}'"},
	    {"{\"a\":1,\"a\":2}",
	     "line 1 column 10: duplicate object key near '\"a\"'"},
	    {"5", "line 1 column 1: '[' or '{' expected near '5'"},
	    {"", "line 1 column 0: '[' or '{' expected near end of file"},
	    {"{} x", "line 1 column 4: end of file expected near 'x'"},
	    {"{\"n\": 99999999999999999999}",
	     "line 1 column 26: too big integer near '99999999999999999999'"},
	};
	char err[128];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *j = (json_t *)&j; /* sentinel: must stay untouched */
		json_t *const sentinel = j;
		assert_int_equal(
		    cnl_json_loads(cases[i].text, &j, err, sizeof(err)),
		    -CNL_EPARSE);
		assert_string_equal(err, cases[i].err);
		assert_ptr_equal(j, sentinel);
	}
}

static void test_load_file(void **state)
{
	char path[] = "/tmp/cnl-test-json-XXXXXX";
	char err[256], want[256];
	json_t *j = NULL;
	int64_t v = 0;
	int fd;
	FILE *f;

	(void)state;
	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	assert_non_null(f);
	fputs("{\n  \"blocks\": 3\n}\n", f);
	fclose(f);
	assert_int_equal(cnl_json_load_file(path, &j, err, sizeof(err)), 0);
	assert_int_equal(
	    cnl_json_get_int(j, "blocks", true, 1, 100, &v, err, sizeof(err)),
	    1);
	assert_int_equal(v, 3);
	json_decref(j);

	f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\n  \"blocks\": 3,\n}\n", f);
	fclose(f);
	j = NULL;
	assert_int_equal(cnl_json_load_file(path, &j, err, sizeof(err)),
	                 -CNL_EPARSE);
	snprintf(want, sizeof(want), "%s:3:1: string or '}' expected near '}'",
	         path);
	assert_string_equal(err, want);
	assert_null(j);

	unlink(path);
	assert_int_equal(cnl_json_load_file(path, &j, err, sizeof(err)),
	                 -ENOENT);
	snprintf(want, sizeof(want), "%s: No such file or directory", path);
	assert_string_equal(err, want);
	assert_null(j);
}

static void test_dumps_compact(void **state)
{
	json_t *j = parse("{\"b\": 1, \"a\": [1, 2], "
	                  "\"c\": {\"z\": null, \"y\": true, \"x\": \"s\"}}");
	json_t *n = json_integer(5);
	char *s;

	(void)state;
	s = cnl_json_dumps_compact(j);
	assert_string_equal(
	    s, "{\"a\":[1,2],\"b\":1,\"c\":{\"x\":\"s\",\"y\":true,"
	       "\"z\":null}}");
	free(s);
	s = cnl_json_dumps_compact(n);
	assert_string_equal(s, "5");
	free(s);
	json_decref(j);
	json_decref(n);
}

/* Written whole with its mode whatever the umask, no temporary left; a
 * link at the temporary's name is not followed. */
/* Every string, however deep, zeroed in place; keys, numbers and the
 * lengths kept. */
static void test_wipe(void **state)
{
	json_t *v = json_pack("{s:s,s:[{s:s,s:i},s],s:{s:s}}", "value_base64",
	                      "c2VjcmV0", "items", "name", "db", "n", 7,
	                      "nested", "more", "deep", "wipe");
	const char *a = json_string_value(json_object_get(v, "value_base64"));
	json_t *it = json_array_get(json_object_get(v, "items"), 0);
	const char *b = json_string_value(json_object_get(it, "name"));
	const char *c =
	    json_string_value(json_array_get(json_object_get(v, "items"), 1));
	const char *d = json_string_value(
	    json_object_get(json_object_get(v, "more"), "deep"));

	(void)state;
	cnl_json_wipe(v);
	cnl_json_wipe(NULL);
	for (size_t i = 0; i < 8; i++)
		assert_int_equal(a[i], 0);
	assert_int_equal(b[0] | b[1], 0);
	for (size_t i = 0; i < 6; i++)
		assert_int_equal(c[i], 0);
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(d[i], 0);
	assert_int_equal(json_string_length(json_object_get(v, "value_base64")),
	                 8);
	assert_int_equal(json_integer_value(json_object_get(it, "n")), 7);
	assert_non_null(json_object_get(v, "more"));
	json_decref(v);
}

static void test_write_file(void **state)
{
	char dir[] = "/tmp/cnl-json-XXXXXX", path[64], tmp[80], out[64];
	json_t *doc = json_pack("{s:i}", "a", 1), *back;
	struct stat st;
	mode_t old;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/doc.json", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	old = umask(0);
	assert_int_equal(cnl_json_write_file(doc, path, 0600, JSON_COMPACT), 0);
	umask(old);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(access(tmp, F_OK), -1);
	back = json_load_file(path, 0, NULL);
	assert_true(json_equal(back, doc));
	json_decref(back);
	/* A planted link at the temporary's name: refused, nothing written
	 * through it, the document as it was. */
	snprintf(out, sizeof(out), "%s/out", dir);
	assert_int_equal(symlink(out, tmp), 0);
	assert_int_equal(cnl_json_write_file(doc, path, 0600, 0), -ELOOP);
	assert_int_equal(access(out, F_OK), -1);
	unlink(tmp);
	/* A document far larger than any one write the kernel may take
	 * whole (a container's config.json with many mounts): all of it. */
	json_t *big = json_array();
	for (int i = 0; i < 20000; i++)
		json_array_append_new(big, json_pack("{s:i,s:s}", "i", i, "s",
		                                     "abcdefghijklmnop"));
	assert_int_equal(cnl_json_write_file(big, path, 0600, 0), 0);
	back = json_load_file(path, 0, NULL);
	assert_non_null(back);
	assert_true(json_equal(back, big));
	json_decref(back);
	json_decref(big);
	/* Nothing Jansson can encode (no document; a bare string without
	 * JSON_ENCODE_ANY): refused, the file as it was, no temporary. */
	json_t *str = json_string("plain");
	assert_int_equal(cnl_json_write_file(NULL, path, 0600, 0), -EINVAL);
	assert_int_equal(cnl_json_write_file(str, path, 0600, 0), -EINVAL);
	json_decref(str);
	assert_int_equal(access(tmp, F_OK), -1);
	back = json_load_file(path, 0, NULL);
	assert_non_null(back);
	json_decref(back);
	unlink(path);
	rmdir(dir);
	json_decref(doc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_check_fields),
	    cmocka_unit_test(test_get_string),
	    cmocka_unit_test(test_get_int),
	    cmocka_unit_test(test_get_bool),
	    cmocka_unit_test(test_get_double),
	    cmocka_unit_test(test_loads_errors),
	    cmocka_unit_test(test_load_file),
	    cmocka_unit_test(test_dumps_compact),
	    cmocka_unit_test(test_write_file),
	    cmocka_unit_test(test_wipe),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
