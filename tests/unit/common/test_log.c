/*
 * test_log.c - exact logfmt lines (with a fixed clock), level filtering,
 * quoting of hostile values, and that no value can start a second line or
 * interleave with another thread's line.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "common/log.h"

struct capture {
	FILE *f;
	char *buf;
	size_t size;
};

static int64_t fixed_clock(void)
{
	return 1700000000123; /* 2023-11-14T22:13:20.123Z */
}

static int setup(void **state)
{
	struct capture *c = calloc(1, sizeof(*c));

	if (!c)
		return -1;
	c->f = open_memstream(&c->buf, &c->size);
	if (!c->f)
		return -1;
	cnl_log_set_sink(c->f);
	cnl_log_set_clock(fixed_clock);
	cnl_log_set_level(CNL_LOG_INFO);
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct capture *c = *state;

	cnl_log_set_sink(NULL);
	cnl_log_set_clock(NULL);
	cnl_log_set_level(CNL_LOG_INFO);
	fclose(c->f);
	free(c->buf);
	free(c);
	return 0;
}

static size_t count_char(const char *s, char ch)
{
	size_t n = 0;

	for (; *s; s++)
		n += *s == ch;
	return n;
}

static void test_exact_line(void **state)
{
	struct capture *c = *state;

	assert_int_equal(cnl_log(CNL_LOG_INFO, "job placed",
	                         "job=%s node=%s gpus=%d", "job_01", "n1", 3),
	                 0);
	assert_string_equal(c->buf,
	                    "ts=2023-11-14T22:13:20.123Z level=info "
	                    "msg=\"job placed\" job=job_01 node=n1 gpus=3\n");
}

/* The hook (Loki's, net/loki.h) sees each line written, without its
 * newline, and nothing filtered out. */
static char hooked[512];
static int hooked_n;

static void hook(enum cnl_log_level level, const char *line, size_t len)
{
	assert_true(level >= CNL_LOG_INFO);
	assert_true(len < sizeof(hooked));
	memcpy(hooked, line, len);
	hooked[len] = '\0';
	hooked_n++;
}

static void test_hook(void **state)
{
	struct capture *c = *state;

	cnl_log_set_hook(hook);
	assert_int_equal(cnl_log(CNL_LOG_DEBUG, "filtered", NULL), 0);
	assert_int_equal(hooked_n, 0);
	assert_int_equal(cnl_log(CNL_LOG_WARN, "disk low", "free=%d", 3), 0);
	cnl_log_set_hook(NULL);
	assert_int_equal(cnl_log(CNL_LOG_WARN, "after", NULL), 0);
	assert_int_equal(hooked_n, 1);
	assert_string_equal(hooked, "ts=2023-11-14T22:13:20.123Z level=warn "
	                            "msg=\"disk low\" free=3");
	assert_non_null(strstr(c->buf, hooked));
}

static void test_no_fields_and_plain_msg(void **state)
{
	struct capture *c = *state;

	assert_int_equal(cnl_log(CNL_LOG_ERROR, "started", NULL), 0);
	assert_string_equal(c->buf, "ts=2023-11-14T22:13:20.123Z level=error "
	                            "msg=started\n");
}

static void test_level_filtering(void **state)
{
	struct capture *c = *state;

	cnl_log_set_level(CNL_LOG_WARN);
	assert_int_equal(cnl_log_get_level(), CNL_LOG_WARN);
	assert_false(cnl_log_enabled(CNL_LOG_INFO));
	assert_true(cnl_log_enabled(CNL_LOG_WARN));
	assert_int_equal(cnl_log(CNL_LOG_DEBUG, "d", NULL), 0);
	assert_int_equal(cnl_log(CNL_LOG_INFO, "i", NULL), 0);
	assert_int_equal(c->size, 0);
	cnl_log(CNL_LOG_WARN, "w", NULL);
	cnl_log(CNL_LOG_ERROR, "e", NULL);
	assert_string_equal(c->buf,
	                    "ts=2023-11-14T22:13:20.123Z level=warn msg=w\n"
	                    "ts=2023-11-14T22:13:20.123Z level=error msg=e\n");

	cnl_log_set_level(CNL_LOG_DEBUG);
	cnl_log(CNL_LOG_DEBUG, "d", "k=%d", 1);
	assert_non_null(strstr(c->buf, "level=debug msg=d k=1\n"));
	assert_int_equal(count_char(c->buf, '\n'), 3);
}

static void test_level_parse(void **state)
{
	enum cnl_log_level l = CNL_LOG_ERROR;

	(void)state;
	assert_int_equal(cnl_log_level_parse("debug", &l), 0);
	assert_int_equal(l, CNL_LOG_DEBUG);
	assert_int_equal(cnl_log_level_parse("WARN", &l), 0);
	assert_int_equal(l, CNL_LOG_WARN);
	assert_int_equal(cnl_log_level_parse("Info", &l), 0);
	assert_int_equal(l, CNL_LOG_INFO);
	assert_int_equal(cnl_log_level_parse("warning", &l), 0);
	assert_int_equal(l, CNL_LOG_WARN);
	assert_int_equal(cnl_log_level_parse("error", &l), 0);
	assert_int_equal(l, CNL_LOG_ERROR);
	assert_int_equal(cnl_log_level_parse("verbose", &l), -CNL_EPARSE);
	assert_int_equal(cnl_log_level_parse("", &l), -CNL_EPARSE);
	assert_int_equal(cnl_log_level_parse("info ", &l), -CNL_EPARSE);
	assert_int_equal(l, CNL_LOG_ERROR);
	assert_string_equal(cnl_log_level_name(CNL_LOG_WARN), "warn");
	assert_string_equal(cnl_log_level_name((enum cnl_log_level)7),
	                    "unknown");
}

static void test_quote(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
	    {"plain", "plain"},
	    {"n1/gpu-0:mig.3g", "n1/gpu-0:mig.3g"},
	    {"h\xc3\xa9llo", "h\xc3\xa9llo"}, /* UTF-8 passes through */
	    {"", "\"\""},
	    {"a b", "\"a b\""},
	    {"a=b", "\"a=b\""},
	    {"say \"hi\"", "\"say \\\"hi\\\"\""},
	    {"back\\slash", "\"back\\\\slash\""},
	    {"line\nbreak\r", "\"line\\nbreak\\r\""},
	    {"tab\there", "\"tab\\there\""},
	    {"bell\x07", "\"bell\\u0007\""},
	    {"del\x7f", "\"del\\u007f\""},
	};
	char buf[CNL_LOG_QUOTE_MAX];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *r = cnl_log_quote(buf, sizeof(buf), cases[i].in);
		assert_ptr_equal(r, buf);
		assert_string_equal(buf, cases[i].out);
	}
	assert_string_equal(cnl_log_quote(buf, sizeof(buf), NULL), "(null)");
}

static void test_quote_truncation(void **state)
{
	char buf[16];

	(void)state;
	/* Exactly fits: 5 chars + NUL in 6 bytes. */
	assert_string_equal(cnl_log_quote(buf, 6, "abcde"), "abcde");
	/* Too long: cut, marked, and always quoted. */
	assert_string_equal(cnl_log_quote(buf, 10, "abcdefghijklmnop"),
	                    "\"abcd...\"");
	assert_string_equal(cnl_log_quote(buf, 5, "abcde"), "");
	assert_string_equal(cnl_log_quote(buf, 6, "abcdefg"), "\"...\"");
	/* An escape is never split, so no stray backslash eats the quote. */
	assert_string_equal(cnl_log_quote(buf, 10, "ab\ncdefgh"),
	                    "\"ab\\n...\"");
	assert_string_equal(cnl_log_quote(buf, 9, "ab\"cdefgh"), "\"ab...\"");
	/* A quoted value that just fits is not cut. */
	assert_string_equal(cnl_log_quote(buf, 6, "a b"), "\"a b\"");
	assert_string_equal(cnl_log_quote(buf, 5, "a b"), "");
}

static void test_injection_single_line(void **state)
{
	struct capture *c = *state;
	const char *hostile = "bob\nts=2000-01-01T00:00:00.000Z level=error "
	                      "msg=forged";
	char q[CNL_LOG_QUOTE_MAX];

	cnl_log(CNL_LOG_INFO, "login", "user=%s",
	        cnl_log_quote(q, sizeof(q), hostile));
	assert_string_equal(c->buf,
	                    "ts=2023-11-14T22:13:20.123Z level=info msg=login "
	                    "user=\"bob\\nts=2000-01-01T00:00:00.000Z "
	                    "level=error msg=forged\"\n");

	/* A caller that forgot to quote still cannot start a new line. */
	cnl_log(CNL_LOG_INFO, "login\r\nlevel=error", "user=%s x=%c", hostile,
	        '\x1b');
	assert_int_equal(count_char(c->buf, '\n'), 2);
	assert_null(strchr(c->buf, '\r'));
	assert_null(strchr(c->buf, '\x1b'));
	assert_non_null(strstr(c->buf, "msg=\"login\\r\\nlevel=error\" "
	                               "user=bob?ts=2000"));
	assert_non_null(strstr(c->buf, "x=?\n"));
}

static void test_long_line(void **state)
{
	struct capture *c = *state;
	size_t n = 5000;
	char *big = malloc(n + 1);

	assert_non_null(big);
	memset(big, 'x', n);
	big[n] = '\0';
	assert_int_equal(cnl_log(CNL_LOG_INFO, "big", "v=%s end=1", big), 0);
	assert_int_equal(c->size,
	                 strlen("ts=2023-11-14T22:13:20.123Z level=info "
	                        "msg=big v=") +
	                     n + strlen(" end=1\n"));
	assert_non_null(strstr(c->buf, "msg=big v=xxxx"));
	assert_non_null(strstr(c->buf, "xxxx end=1\n"));
	free(big);
}

static void test_sink_failure(void **state)
{
	FILE *ro = fopen("/dev/null", "r");

	(void)state;
	assert_non_null(ro);
	cnl_log_set_sink(ro);
	assert_int_equal(cnl_log(CNL_LOG_ERROR, "x", "a=%d", 1), -EIO);
	cnl_log_set_sink(NULL);
	fclose(ro);
}

#define THREADS          4
#define LINES_PER_THREAD 2000

static void *writer(void *arg)
{
	long id = (long)(size_t)arg;

	for (int i = 0; i < LINES_PER_THREAD; i++)
		cnl_log(CNL_LOG_INFO, "tick",
		        "thread=%ld i=%d pad=%0200d end=%ld", id, i, 0, id);
	return NULL;
}

static void test_threads_do_not_interleave(void **state)
{
	struct capture *c = *state;
	pthread_t t[THREADS];
	char *line, *save = NULL;
	int count = 0;

	for (long i = 0; i < THREADS; i++)
		assert_int_equal(
		    pthread_create(&t[i], NULL, writer, (void *)(size_t)i), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);

	for (line = strtok_r(c->buf, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save), count++) {
		long id, id2;
		int i, used = 0;
		assert_int_equal(
		    sscanf(line,
		           "ts=2023-11-14T22:13:20.123Z level=info "
		           "msg=tick thread=%ld i=%d pad=%*d "
		           "end=%ld%n",
		           &id, &i, &id2, &used),
		    3);
		assert_int_equal(id, id2);
		assert_int_equal((size_t)used, strlen(line));
	}
	assert_int_equal(count, THREADS * LINES_PER_THREAD);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_exact_line, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_hook, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_no_fields_and_plain_msg, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_level_filtering, setup,
	                                    teardown),
	    cmocka_unit_test(test_level_parse),
	    cmocka_unit_test(test_quote),
	    cmocka_unit_test(test_quote_truncation),
	    cmocka_unit_test_setup_teardown(test_injection_single_line, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_long_line, setup, teardown),
	    cmocka_unit_test(test_sink_failure),
	    cmocka_unit_test_setup_teardown(test_threads_do_not_interleave,
	                                    setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
