/*
 * test_image.c - the node's image store (image.c): what the collector
 * keeps and deletes.  An image a workload runs stays whatever its age; one
 * no workload runs stays image_keep_s after its last start, then goes with
 * the blobs that only it named; a blob no unpacked image names goes at
 * once.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdbool.h>
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

#include "agent/image.h"

static char dir[64];

static void path(char *buf, size_t len, const char *rel)
{
	snprintf(buf, len, "%s/images/%s", dir, rel);
}

static void put(const char *rel, const char *text)
{
	char p[256];
	FILE *f;

	path(p, sizeof(p), rel);
	f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static bool there(const char *rel)
{
	char p[256];

	path(p, sizeof(p), rel);
	return access(p, F_OK) == 0;
}

static const char *hex(char c)
{
	static char h[4][65];
	static int k;
	char *s = h[k++ % 4];

	memset(s, c, 64);
	s[64] = '\0';
	return s;
}

/* An unpacked image: manifest @m naming config @c and layer @l. */
static void image(char m, char c, char l)
{
	char rel[128], text[512];

	snprintf(text, sizeof(text),
	         "{\"schemaVersion\":2,\"config\":{\"digest\":\"sha256:%s\"},"
	         "\"layers\":[{\"digest\":\"sha256:%s\"}]}",
	         hex(c), hex(l));
	snprintf(rel, sizeof(rel), "blobs/sha256/%s", hex(m));
	put(rel, text);
	snprintf(rel, sizeof(rel), "blobs/sha256/%s", hex(c));
	put(rel, "{}");
	snprintf(rel, sizeof(rel), "blobs/sha256/%s", hex(l));
	put(rel, "layer");
	snprintf(rel, sizeof(rel), "rootfs/%s", hex(m));
	path(text, sizeof(text), rel);
	assert_int_equal(mkdir(text, 0755), 0);
	snprintf(rel, sizeof(rel), "rootfs/%s/bin", hex(m));
	path(text, sizeof(text), rel);
	assert_int_equal(mkdir(text, 0755), 0);
}

static bool blob(char c)
{
	char rel[128];

	snprintf(rel, sizeof(rel), "blobs/sha256/%s", hex(c));
	return there(rel);
}

static bool unpacked(char c)
{
	char rel[128];

	snprintf(rel, sizeof(rel), "rootfs/%s", hex(c));
	return there(rel);
}

static void test_collector(void **state)
{
	char store[128], p[256], a[65];
	const char *in_use[1] = {a};

	(void)state;
	snprintf(store, sizeof(store), "%s/images", dir);
	/* No store yet: nothing to do. */
	assert_int_equal(cnl_images_collect(store, 0, NULL, 0), -ENOENT);
	assert_int_equal(mkdir(store, 0700), 0);
	path(p, sizeof(p), "blobs");
	assert_int_equal(mkdir(p, 0700), 0);
	path(p, sizeof(p), "blobs/sha256");
	assert_int_equal(mkdir(p, 0700), 0);
	path(p, sizeof(p), "rootfs");
	assert_int_equal(mkdir(p, 0700), 0);
	put("lock", "");
	/* A: run by a workload; B: by none; they share the layer F. */
	image('a', 'c', 'f');
	image('b', 'd', 'f');
	put("blobs/sha256/"
	    "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee",
	    "orphan");
	snprintf(a, sizeof(a), "%s", hex('a'));

	/* Both started within keep_s: only the orphan blob goes. */
	assert_int_equal(cnl_images_collect(store, 3600, in_use, 1), 0);
	assert_true(unpacked('a') && unpacked('b'));
	assert_true(blob('a'));
	assert_true(blob('b'));
	assert_true(blob('c'));
	assert_true(blob('d'));
	assert_true(blob('f'));
	assert_false(blob('e'));

	/* Past keep_s: B goes with what only it named; A is run. */
	assert_int_equal(cnl_images_collect(store, 0, in_use, 1), 0);
	assert_true(unpacked('a'));
	assert_false(unpacked('b'));
	assert_true(blob('a') && blob('c') && blob('f'));
	assert_false(blob('b') || blob('d'));

	/* Its workload gone, A goes too. */
	assert_int_equal(cnl_images_collect(store, 0, NULL, 0), 0);
	assert_false(unpacked('a') || blob('a') || blob('c') || blob('f'));
}

/* rm -rf dir */
static int run_rm(void)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		execlp("rm", "rm", "-rf", dir, (char *)NULL);
		_exit(127);
	}
	return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
	               WEXITSTATUS(st) == 0
	           ? 0
	           : -1;
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/cnl-img-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return run_rm();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_collector),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
