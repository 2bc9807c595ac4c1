/*
 * test_volume.c - workspace volumes (agent/volume.h) against the real
 * kernel: real images made by the real mkfs.ext4, real loop devices, real
 * mounts; no mocks.  Needs root, loop devices and mkfs.ext4; skips with a
 * message where they are missing.
 *
 * The tests run in a mount namespace of their own (main), and every test
 * unmounts what it mounted, even when it fails (teardown), so that no
 * loop device of this shared machine is left taken.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "agent/volume.h"

#define GB 1000000000ull

static const char *mkfs_path(void)
{
	static const char *const where[] = {"/usr/sbin/mkfs.ext4",
	                                    "/sbin/mkfs.ext4"};

	for (size_t i = 0; i < 2; i++)
		if (access(where[i], X_OK) == 0)
			return where[i];
	return NULL;
}

struct fix {
	char top[64];    /* the test's folder */
	char image[128]; /* top/v.img */
	char dir[128];   /* top/ws, a mount point */
	char other[128]; /* top/other, another folder */
	char small[128]; /* top/small, a small tmpfs (full disk) */
	const char *mkfs;
};

static int fix_setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	*state = f;
	if (geteuid() != 0) {
		printf("skip: volumes need root\n");
		skip();
	}
	if (!(f->mkfs = mkfs_path())) {
		printf("skip: no mkfs.ext4 (e2fsprogs)\n");
		skip();
	}
	if (access("/dev/loop-control", F_OK) < 0) {
		printf("skip: no /dev/loop-control\n");
		skip();
	}
	snprintf(f->top, sizeof(f->top), "/tmp/cnl-volume-XXXXXX");
	assert_non_null(mkdtemp(f->top));
	snprintf(f->image, sizeof(f->image), "%s/v.img", f->top);
	snprintf(f->dir, sizeof(f->dir), "%s/ws", f->top);
	snprintf(f->other, sizeof(f->other), "%s/other", f->top);
	snprintf(f->small, sizeof(f->small), "%s/small", f->top);
	assert_int_equal(mkdir(f->dir, 0700), 0);
	assert_int_equal(mkdir(f->other, 0700), 0);
	assert_int_equal(mkdir(f->small, 0700), 0);
	return 0;
}

static int fix_teardown(void **state)
{
	struct fix *f = *state;
	char p[256];

	if (f->top[0]) {
		cnl_volume_unmount(f->dir);
		cnl_volume_unmount(f->other);
		cnl_volume_unmount(f->small);
		snprintf(p, sizeof(p), "%s/big", f->dir);
		unlink(p);
		unlink(f->image);
		snprintf(p, sizeof(p), "%s.new", f->image);
		unlink(p);
		rmdir(f->dir);
		rmdir(f->other);
		rmdir(f->small);
		rmdir(f->top);
	}
	free(f);
	return 0;
}

/* How many times @dir is a mount point in this mount namespace. */
static int mounts_on(const char *dir)
{
	FILE *m = fopen("/proc/self/mountinfo", "r");
	char line[4096], target[PATH_MAX];
	int n = 0;

	assert_non_null(m);
	while (fgets(line, sizeof(line), m))
		if (sscanf(line, "%*s %*s %*s %*s %4095s", target) == 1 &&
		    strcmp(target, dir) == 0)
			n++;
	fclose(m);
	return n;
}

/* The mount options of @dir (its fifth and sixth mountinfo fields). */
static void options_of(const char *dir, char *buf, size_t len)
{
	FILE *m = fopen("/proc/self/mountinfo", "r");
	char line[4096], target[PATH_MAX], opts[512];

	buf[0] = '\0';
	assert_non_null(m);
	while (fgets(line, sizeof(line), m))
		if (sscanf(line, "%*s %*s %*s %*s %4095s %511s", target,
		           opts) == 2 &&
		    strcmp(target, dir) == 0)
			snprintf(buf, len, "%s", opts);
	fclose(m);
}

/* Write @want bytes to @path as far as they go; the bytes written, and
 * the errno that stopped it in *@ret_errno (0: none). */
static uint64_t fill(const char *path, uint64_t want, int *ret_errno)
{
	static char buf[1 << 20];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	uint64_t done = 0;

	assert_true(fd >= 0);
	memset(buf, 'x', sizeof(buf));
	*ret_errno = 0;
	while (done < want) {
		ssize_t n = write(fd, buf, sizeof(buf));

		if (n < 0) {
			*ret_errno = errno;
			break;
		}
		done += (uint64_t)n;
	}
	if (fsync(fd) < 0 && !*ret_errno)
		*ret_errno = errno;
	close(fd);
	return done;
}

/* A 1 GB volume holds a little under 1 GB (ext4's journal and tables),
 * and a write past it fails with ENOSPC in the volume, not on the node. */
static void test_size_enforced(void **state)
{
	struct fix *f = *state;
	char err[512] = "", big[256], opts[512];
	struct stat st;
	uint64_t wrote;
	int e;

	assert_int_equal(
	    cnl_volume_create(f->image, GB, f->mkfs, err, sizeof(err)), 0);
	assert_int_equal(stat(f->image, &st), 0);
	assert_int_equal(st.st_size, (off_t)GB);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(cnl_volume_mount(f->image, f->dir, err, sizeof(err)),
	                 0);
	assert_int_equal(cnl_volume_mounted(f->dir), 1);
	options_of(f->dir, opts, sizeof(opts));
	assert_non_null(strstr(opts, "nosuid"));
	assert_non_null(strstr(opts, "nodev"));
	snprintf(big, sizeof(big), "%s/big", f->dir);
	wrote = fill(big, 3 * GB / 2, &e);
	printf("wrote %llu bytes into a 1 GB volume: %s\n",
	       (unsigned long long)wrote, strerror(e));
	assert_int_equal(e, ENOSPC);
	assert_true(wrote > 85 * GB / 100);
	assert_true(wrote <= GB);
	unlink(big);
	assert_int_equal(cnl_volume_unmount(f->dir), 0);
	assert_int_equal(cnl_volume_mounted(f->dir), 0);
}

/* A file written before an unmount is there after the next mount. */
static void test_kept_across_mounts(void **state)
{
	struct fix *f = *state;
	char err[512] = "", path[256], got[16] = "";
	int fd;

	assert_int_equal(
	    cnl_volume_create(f->image, GB, f->mkfs, err, sizeof(err)), 0);
	assert_int_equal(cnl_volume_mount(f->image, f->dir, err, sizeof(err)),
	                 0);
	snprintf(path, sizeof(path), "%s/kept", f->dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "kept\n", 5), 5);
	close(fd);
	assert_int_equal(cnl_volume_unmount(f->dir), 0);
	assert_int_equal(access(path, F_OK), -1); /* not on the node's disk */
	/* create again: the image exists and is kept as it is */
	assert_int_equal(
	    cnl_volume_create(f->image, GB, f->mkfs, err, sizeof(err)), 0);
	assert_int_equal(cnl_volume_mount(f->image, f->dir, err, sizeof(err)),
	                 0);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, got, sizeof(got) - 1), 5);
	close(fd);
	assert_string_equal(got, "kept\n");
	unlink(path);
}

/* A restarted agent mounting again finds it mounted: nothing twice; and
 * the image mounted on another folder is the same file system, on the
 * same single loop device. */
static void test_never_twice(void **state)
{
	struct fix *f = *state;
	char err[512] = "", dev[64] = "", dev2[64] = "", path[256];
	int fd;

	assert_int_equal(
	    cnl_volume_create(f->image, GB, f->mkfs, err, sizeof(err)), 0);
	assert_int_equal(cnl_volume_loop_of(f->image, dev, sizeof(dev)),
	                 -ENOENT);
	assert_int_equal(cnl_volume_mount(f->image, f->dir, err, sizeof(err)),
	                 0);
	assert_int_equal(cnl_volume_loop_of(f->image, dev, sizeof(dev)), 0);
	assert_int_equal(mounts_on(f->dir), 1);
	assert_int_equal(cnl_volume_mount(f->image, f->dir, err, sizeof(err)),
	                 0);
	assert_int_equal(mounts_on(f->dir), 1);
	assert_int_equal(cnl_volume_mount(f->image, f->other, err, sizeof(err)),
	                 0);
	assert_int_equal(mounts_on(f->other), 1);
	assert_int_equal(cnl_volume_loop_of(f->image, dev2, sizeof(dev2)), 0);
	assert_string_equal(dev, dev2);
	/* One file system: what is written through one is seen through the
	 * other at once. */
	snprintf(path, sizeof(path), "%s/seen", f->dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	close(fd);
	snprintf(path, sizeof(path), "%s/seen", f->other);
	assert_int_equal(access(path, F_OK), 0);
	unlink(path);
	assert_int_equal(cnl_volume_unmount(f->other), 0);
	/* The loop device goes with the last unmount (autoclear). */
	assert_int_equal(cnl_volume_unmount(f->dir), 0);
	assert_int_equal(cnl_volume_loop_of(f->image, dev, sizeof(dev)),
	                 -ENOENT);
	assert_int_equal(cnl_volume_unmount(f->dir), 0); /* not mounted: 0 */
}

/* Unmounted on the node while a mount namespace made before still holds
 * it (as each workload's supervisor does): its device stays attached, and
 * the next mount takes that same file system, not a second device on
 * the image. */
static void test_held_elsewhere(void **state)
{
	struct fix *f = *state;
	char err[512] = "", dev[64] = "", dev2[64] = "", path[256], c;
	int go[2], ready[2], status, fd;
	pid_t pid;

	assert_int_equal(
	    cnl_volume_create(f->image, GB, f->mkfs, err, sizeof(err)), 0);
	assert_int_equal(cnl_volume_mount(f->image, f->dir, err, sizeof(err)),
	                 0);
	snprintf(path, sizeof(path), "%s/before", f->dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(cnl_volume_loop_of(f->image, dev, sizeof(dev)), 0);
	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(ready), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* A namespace with a copy of the node's mounts, held until
		 * the parent says. */
		if (unshare(CLONE_NEWNS) < 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
			_exit(3);
		(void)!write(ready[1], "r", 1);
		(void)!read(go[0], &c, 1);
		_exit(0);
	}
	assert_int_equal(read(ready[0], &c, 1), 1);
	assert_int_equal(cnl_volume_unmount(f->dir), 0);
	assert_int_equal(mounts_on(f->dir), 0);
	/* Still held by the child's namespace. */
	assert_int_equal(cnl_volume_loop_of(f->image, dev2, sizeof(dev2)), 0);
	assert_string_equal(dev, dev2);
	assert_int_equal(cnl_volume_mount(f->image, f->dir, err, sizeof(err)),
	                 0);
	assert_int_equal(mounts_on(f->dir), 1);
	assert_int_equal(cnl_volume_loop_of(f->image, dev2, sizeof(dev2)), 0);
	assert_string_equal(dev, dev2);
	assert_int_equal(access(path, F_OK), 0);
	unlink(path);
	assert_int_equal(write(go[1], "g", 1), 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	close(go[0]);
	close(go[1]);
	close(ready[0]);
	close(ready[1]);
	assert_int_equal(cnl_volume_unmount(f->dir), 0);
	assert_int_equal(cnl_volume_loop_of(f->image, dev, sizeof(dev)),
	                 -ENOENT);
}

/* A 50 GB volume is made at once and holds a few MiB of the node's disk;
 * an image is never left half-made. */
static void test_sparse(void **state)
{
	struct fix *f = *state;
	char err[512] = "", tmp[256];
	struct stat st;

	assert_int_equal(
	    cnl_volume_create(f->image, 50 * GB, f->mkfs, err, sizeof(err)), 0);
	assert_int_equal(stat(f->image, &st), 0);
	assert_int_equal(st.st_size, (off_t)(50 * GB));
	printf("a 50 GB volume takes %lld KiB\n", (long long)st.st_blocks / 2);
	assert_true((uint64_t)st.st_blocks * 512 < (32ull << 20));
	snprintf(tmp, sizeof(tmp), "%s.new", f->image);
	assert_int_equal(access(tmp, F_OK), -1);
	/* Mounted, it stays sparse: no inode table zeroed behind it. */
	assert_int_equal(cnl_volume_mount(f->image, f->dir, err, sizeof(err)),
	                 0);
	assert_int_equal(cnl_volume_unmount(f->dir), 0);
	assert_int_equal(stat(f->image, &st), 0);
	assert_true((uint64_t)st.st_blocks * 512 < (32ull << 20));
}

/* A full node disk: a clear error, and nothing left. */
static void test_disk_full(void **state)
{
	struct fix *f = *state;
	char err[512] = "", image[200], tmp[256];

	assert_int_equal(mount("cnl-test", f->small, "tmpfs", 0, "size=16m"),
	                 0);
	snprintf(image, sizeof(image), "%s/v.img", f->small);
	snprintf(tmp, sizeof(tmp), "%s.new", image);
	assert_int_equal(
	    cnl_volume_create(image, GB, f->mkfs, err, sizeof(err)), -ENOSPC);
	printf("full disk: %s\n", err);
	assert_non_null(strstr(err, "disk is full"));
	assert_int_equal(access(image, F_OK), -1);
	assert_int_equal(access(tmp, F_OK), -1);
	/* Larger than the whole disk (100 MiB, room enough to start). */
	assert_int_equal(umount2(f->small, 0), 0);
	assert_int_equal(mount("cnl-test", f->small, "tmpfs", 0, "size=100m"),
	                 0);
	assert_int_equal(
	    cnl_volume_create(image, GB, f->mkfs, err, sizeof(err)), -EFBIG);
	printf("too large: %s\n", err);
	assert_non_null(strstr(err, "larger than the node's disk"));
	assert_int_equal(access(image, F_OK), -1);
	assert_int_equal(access(tmp, F_OK), -1);
	/* No mkfs.ext4: said so. */
	assert_int_equal(cnl_volume_create(f->image, GB, "", err, sizeof(err)),
	                 -ENOENT);
	assert_non_null(strstr(err, "mkfs.ext4"));
	/* Too small to be a volume. */
	assert_int_equal(
	    cnl_volume_create(f->image, 1 << 20, f->mkfs, err, sizeof(err)),
	    -EINVAL);
	assert_int_equal(access(f->image, F_OK), -1);
}

/* A node without loop devices (a /dev without loop-control, in a mount
 * namespace of a child): the mount fails naming the cause, nothing is
 * mounted. */
static void test_no_loop_device(void **state)
{
	struct fix *f = *state;
	char err[512] = "";
	int status = 0;
	pid_t pid;

	assert_int_equal(
	    cnl_volume_create(f->image, GB, f->mkfs, err, sizeof(err)), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int r;

		if (unshare(CLONE_NEWNS) < 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount("cnl-test", "/dev", "tmpfs", 0, "size=1m") < 0)
			_exit(3);
		r = cnl_volume_mount(f->image, f->dir, err, sizeof(err));
		printf("no loop device: %s\n", err);
		fflush(stdout);
		_exit(r == -ENOENT && strstr(err, "no loop devices") &&
		              cnl_volume_mounted(f->dir) == 0
		          ? 0
		          : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(mounts_on(f->dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_size_enforced, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_kept_across_mounts, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_never_twice, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_held_elsewhere, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_sparse, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_disk_full, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_no_loop_device, fix_setup,
	                                    fix_teardown),
	};

	/* The test's mounts in a namespace of its own: no process of this
	 * (shared) machine that makes a namespace meanwhile holds them, and
	 * whatever a crash leaves goes with the process. */
	if (geteuid() == 0 &&
	    (unshare(CLONE_NEWNS) < 0 ||
	     mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)) {
		perror("unshare");
		return 1;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
