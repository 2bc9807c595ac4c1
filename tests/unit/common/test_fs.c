/*
 * test_fs.c - common/fs.h: folders made beneath a folder never follow a
 * link planted on the way (the attack: a job's artifacts folder holding a
 * link to /etc); hex.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/fs.h"

static void test_mkdirs_beneath(void **state)
{
	char top[] = "/tmp/cnl-fs-XXXXXX", outside[] = "/tmp/cnl-fs-out-XXXXXX";
	char p[128];
	struct stat st;
	int tfd, dfd = -1, fd;

	assert_non_null(mkdtemp(top));
	assert_non_null(mkdtemp(outside));
	tfd = open(top, O_RDONLY | O_DIRECTORY);
	assert_true(tfd >= 0);

	/* Folders made, with their mode; the file's folder comes back. */
	assert_int_equal(cnl_mkdirs_beneath(tfd, "a/b/c.txt", 0700, &dfd), 0);
	fd = openat(dfd, "c.txt", O_WRONLY | O_CREAT, 0600);
	assert_true(fd >= 0);
	close(fd);
	close(dfd);
	snprintf(p, sizeof(p), "%s/a/b/c.txt", top);
	assert_int_equal(stat(p, &st), 0);
	snprintf(p, sizeof(p), "%s/a/b", top);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	/* A file alone: its folder is the top. */
	assert_int_equal(cnl_mkdirs_beneath(tfd, "x.txt", 0700, &dfd), 0);
	close(dfd);

	/* A link on the way is never followed: nothing is made outside. */
	snprintf(p, sizeof(p), "%s/evil", top);
	assert_int_equal(symlink(outside, p), 0);
	dfd = -1;
	assert_true(cnl_mkdirs_beneath(tfd, "evil/sub/f", 0700, &dfd) < 0);
	assert_int_equal(dfd, -1);
	snprintf(p, sizeof(p), "%s/sub", outside);
	assert_int_equal(stat(p, &st), -1);
	assert_int_equal(cnl_mkdirs_beneath(tfd, "a//f", 0700, &dfd), -EINVAL);

	close(tfd);
	snprintf(p, sizeof(p), "%s/evil", top);
	unlink(p);
	snprintf(p, sizeof(p), "%s/a/b/c.txt", top);
	unlink(p);
	snprintf(p, sizeof(p), "%s/a/b", top);
	rmdir(p);
	snprintf(p, sizeof(p), "%s/a", top);
	rmdir(p);
	rmdir(top);
	rmdir(outside);
}

static void test_write_all(void **state)
{
	static char big[1 << 20];
	char path[] = "/tmp/cnl-write-all-XXXXXX";
	struct stat st;
	int fd = mkstemp(path), full = open("/dev/full", O_WRONLY);

	(void)state;
	assert_true(fd >= 0);
	memset(big, 'x', sizeof(big));
	/* All of it, in as many writes as the kernel takes. */
	assert_int_equal(cnl_write_all(fd, big, sizeof(big)), 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, sizeof(big));
	/* The error of the write that failed, not a made-up one. */
	assert_true(full >= 0);
	assert_int_equal(cnl_write_all(full, big, 10), -ENOSPC);
	assert_int_equal(cnl_write_all(-1, big, 10), -EBADF);
	close(full);
	close(fd);
	unlink(path);
}

static void test_hex(void **state)
{
	const unsigned char b[] = {0x00, 0x0f, 0xa5, 0xff};
	char out[9];

	cnl_hex(b, sizeof(b), out);
	assert_string_equal(out, "000fa5ff");
	cnl_hex(b, 0, out);
	assert_string_equal(out, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mkdirs_beneath),
	    cmocka_unit_test(test_write_all),
	    cmocka_unit_test(test_hex),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
