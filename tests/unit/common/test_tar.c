/*
 * test_tar.c - common/tar.h: archives written by GNU tar in its three
 * formats (ustar with its prefix field, pax with extended headers, GNU
 * with long-name entries), fed in chunks of every awkward size, come out
 * entry by entry with their names, sizes and bytes; a damaged header, a
 * truncated archive and a header after the end are refused by name.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "common/tar.h"

#define LONG_DIR                                                             \
	"a-folder-name-long-enough-that-the-whole-path-is-over-one-hundred-" \
	"bytes/and-then-some-more"

struct seen {
	char paths[16][CNL_TAR_PATH_MAX];
	char types[16];
	uint64_t sizes[16], got[16], sum[16];
	int n;
	bool open;
};

static int on_begin(void *ud, const struct cnl_tar_entry *e)
{
	struct seen *s = ud;

	assert_true(s->n < 16);
	assert_false(s->open);
	snprintf(s->paths[s->n], sizeof(s->paths[0]), "%s", e->path);
	s->types[s->n] = e->type;
	s->sizes[s->n] = e->size;
	s->open = true;
	return 0;
}

static int on_data(void *ud, const char *p, size_t n)
{
	struct seen *s = ud;

	assert_true(s->open);
	for (size_t i = 0; i < n; i++)
		s->sum[s->n] = s->sum[s->n] * 31 + (unsigned char)p[i];
	s->got[s->n] += n;
	return 0;
}

static int on_end(void *ud)
{
	struct seen *s = ud;

	assert_true(s->open);
	assert_int_equal(s->got[s->n], s->sizes[s->n]);
	s->open = false;
	s->n++;
	return 0;
}

static const struct cnl_tar_ops ops = {on_begin, on_data, on_end};

static char dir[64];

/* Run @argv (a program in PATH) and wait: its exit status, -1 if none. */
static int run(char *const argv[])
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		execvp(argv[0], argv);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* @path with @text in it. */
static int put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f);
}

/* The archive of dir/in in @format, read whole into *@len bytes. */
static char *make(const char *format, size_t *len)
{
	char fmt[32], in[96], out[128];
	struct stat st;
	char *buf;
	FILE *f;

	snprintf(fmt, sizeof(fmt), "--format=%s", format);
	snprintf(in, sizeof(in), "%s/in", dir);
	snprintf(out, sizeof(out), "%s/%s.tar", dir, format);
	assert_int_equal(run((char *const[]){"tar", fmt, "-C", in, "-cf", out,
	                                     "./a.txt", "./d", "./big.bin",
	                                     "./" LONG_DIR "/file.txt", NULL}),
	                 0);
	assert_int_equal(stat(out, &st), 0);
	buf = malloc((size_t)st.st_size);
	f = fopen(out, "rb");
	assert_non_null(f);
	assert_int_equal(fread(buf, 1, (size_t)st.st_size, f),
	                 (size_t)st.st_size);
	fclose(f);
	*len = (size_t)st.st_size;
	return buf;
}

static uint64_t sum_of(const char *s, size_t n)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n; i++)
		v = v * 31 + (unsigned char)s[i];
	return v;
}

static void check_format(const char *format)
{
	static const size_t chunks[] = {1, 7, 511, 512, 513, 65536};
	size_t len;
	char *buf = make(format, &len);
	char *big = malloc(1000003);

	for (size_t i = 0; i < 1000003; i++)
		big[i] = (char)(i * 7 + i / 1000);
	for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
		struct seen s = {0};
		struct cnl_tar t;

		cnl_tar_init(&t, &ops, &s);
		for (size_t o = 0; o < len; o += chunks[c]) {
			size_t k = len - o < chunks[c] ? len - o : chunks[c];

			assert_int_equal(cnl_tar_feed(&t, buf + o, k), 0);
		}
		assert_int_equal(cnl_tar_finish(&t), 0);
		assert_int_equal(s.n, 4);
		assert_string_equal(s.paths[0], "./a.txt");
		assert_int_equal(s.types[0], '0');
		assert_int_equal(s.sizes[0], 6);
		assert_int_equal(s.sum[0], sum_of("hello\n", 6));
		assert_string_equal(s.paths[1], "./d/");
		assert_int_equal(s.types[1], '5');
		assert_int_equal(s.sizes[1], 0);
		assert_string_equal(s.paths[2], "./big.bin");
		assert_int_equal(s.sizes[2], 1000003);
		assert_int_equal(s.sum[2], sum_of(big, 1000003));
		/* A path over ustar's 100 bytes: in the prefix field, a pax
		 * header or a GNU long-name entry, as the format has it. */
		assert_string_equal(s.paths[3], "./" LONG_DIR "/file.txt");
		assert_int_equal(s.sum[3], sum_of("long\n", 5));
		cnl_tar_done(&t);
	}
	free(big);
	free(buf);
}

static void test_formats(void **state)
{
	(void)state;
	check_format("ustar");
	check_format("pax");
	check_format("gnu");
}

static void test_damage(void **state)
{
	struct seen s = {0};
	struct cnl_tar t;
	size_t len;
	char *buf = make("pax", &len);

	(void)state;
	/* A header whose checksum does not add up. */
	buf[0] ^= 1;
	cnl_tar_init(&t, &ops, &s);
	assert_int_equal(cnl_tar_feed(&t, buf, len), -CNL_EPARSE);
	assert_non_null(strstr(t.err, "checksum"));
	/* Nothing more is taken after an error. */
	assert_int_equal(cnl_tar_feed(&t, buf, 1), -CNL_EPARSE);
	cnl_tar_done(&t);
	buf[0] ^= 1;

	/* Cut short in the middle of big.bin's data: named at the end. */
	memset(&s, 0, sizeof(s));
	cnl_tar_init(&t, &ops, &s);
	assert_int_equal(cnl_tar_feed(&t, buf, 600000), 0);
	assert_int_equal(cnl_tar_finish(&t), -CNL_EPARSE);
	assert_non_null(strstr(t.err, "truncated in \"./big.bin\""));
	cnl_tar_done(&t);

	/* Not a tar at all. */
	memset(&s, 0, sizeof(s));
	cnl_tar_init(&t, &ops, &s);
	assert_int_equal(
	    cnl_tar_feed(&t, "{\"this\": \"is json, not a tar archive\"}", 38),
	    0);
	assert_int_equal(cnl_tar_finish(&t), -CNL_EPARSE);
	cnl_tar_done(&t);
	free(buf);
}

/* A callback's refusal stops the reader with its reason. */
static int refuse(void *ud, const struct cnl_tar_entry *e)
{
	struct cnl_tar *t = ud;

	return cnl_tar_fail(t, "no \"%s\" here", e->path);
}

static void test_refusal(void **state)
{
	static const struct cnl_tar_ops no = {refuse, NULL, NULL};
	struct cnl_tar t;
	size_t len;
	char *buf = make("gnu", &len);

	(void)state;
	cnl_tar_init(&t, &no, &t);
	assert_int_equal(cnl_tar_feed(&t, buf, len), -CNL_EPARSE);
	assert_string_equal(t.err, "no \"./a.txt\" here");
	cnl_tar_done(&t);
	free(buf);
}

static int group_setup(void **state)
{
	char cmd[1024], d1[128], d2[256];
	FILE *f;

	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/cnl-tar-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(d1, sizeof(d1), "%s/in/d", dir);
	snprintf(d2, sizeof(d2), "%s/in/" LONG_DIR, dir);
	if (run((char *const[]){"mkdir", "-p", d1, d2, NULL}) != 0)
		return -1;
	snprintf(cmd, sizeof(cmd), "%s/in/a.txt", dir);
	if (put(cmd, "hello\n") < 0)
		return -1;
	snprintf(cmd, sizeof(cmd), "%s/file.txt", d2);
	if (put(cmd, "long\n") < 0)
		return -1;
	snprintf(cmd, sizeof(cmd), "%s/in/big.bin", dir);
	if (!(f = fopen(cmd, "wb")))
		return -1;
	for (size_t i = 0; i < 1000003; i++)
		fputc((char)(i * 7 + i / 1000), f);
	fclose(f);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	return run((char *const[]){"rm", "-rf", dir, NULL}) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_formats),
	    cmocka_unit_test(test_damage),
	    cmocka_unit_test(test_refusal),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
