/*
 * volume.c - a server's workspace as a volume of its own size (volume.h
 * says why an image file and not a project quota): the image made with
 * mkfs.ext4, attached to a loop device and mounted; never twice.
 *
 * Making an image
 * ---------------
 *   @image.new  created (O_EXCL, 0600), truncated to the size (sparse),
 *               formatted by mkfs.ext4 (-m 0: the tenant gets all of it;
 *               lazy_itable_init, lazy_journal_init: nothing is zeroed,
 *               so a 50 GB image is made in well under a second and holds
 *               a few MiB), flushed, then renamed to @image.
 * A failure at any step removes @image.new: an @image that exists is
 * always whole, and a full disk leaves nothing behind.
 *
 * Mounting
 * --------
 * LOOP_CTL_GET_FREE names a free device; LOOP_CONFIGURE attaches the image
 * with LO_FLAGS_AUTOCLEAR, so that the device is released by the last
 * unmount and never outlives its file system.  Another process may take
 * the same number meanwhile: EBUSY, and we ask again.
 *
 * One image, one device, one file system.  An unmount on the node does
 * not end a file system that a mount namespace made meanwhile still holds
 * (every workload's supervisor makes one, with a copy of the node's
 * mounts; so may any process of the node): its device stays attached
 * until that namespace goes.  So before attaching, the backing file each
 * loop device names in /sys/block/loopN/loop/backing_file tells whether
 * the image is attached already; if so, that device's file system is
 * mounted (again, or left as it is when already on the folder: a
 * restarted agent), never a second device on the same image, which
 * would corrupt it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/loop.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/volume.h"
#include "common/util.h"

#ifndef LOOP_CONFIGURE
#define LOOP_CONFIGURE 0x4C0A /* Linux 5.8 */
#endif
#define LOOP_MAJOR 7

/* Bytes free for an unprivileged writer under @dir; UINT64_MAX when it
 * cannot be told. */
static uint64_t free_bytes(const char *dir)
{
	struct statvfs sv;

	if (statvfs(dir, &sv) < 0)
		return UINT64_MAX;
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

/* The size of the file system under @dir; UINT64_MAX when it cannot be
 * told. */
static uint64_t disk_bytes(const char *dir)
{
	struct statvfs sv;

	if (statvfs(dir, &sv) < 0)
		return UINT64_MAX;
	return (uint64_t)sv.f_blocks * sv.f_frsize;
}

/* The folder of @path into @buf ("." when it has none). */
static void parent_of(const char *path, char *buf, size_t len)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		snprintf(buf, len, ".");
	else if (slash == path)
		snprintf(buf, len, "/");
	else
		snprintf(buf, len, "%.*s", (int)(slash - path), path);
}

/* Run mkfs.ext4 on @file; its exit status (-1: it did not run), what it
 * wrote (stdout and stderr) in @out, one line. */
static int run_mkfs(const char *mkfs, const char *file, char *out,
                    size_t outlen)
{
	static char *const env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
	                            "LC_ALL=C", NULL};
	char *const argv[] = {
	    (char *)mkfs,
	    "-q",
	    "-F",
	    "-m",
	    "0",
	    "-L",
	    "cnlab-workspace",
	    "-E",
	    "lazy_itable_init=1,lazy_journal_init=1,nodiscard",
	    (char *)file,
	    NULL};
	posix_spawn_file_actions_t fa;
	int pipefd[2], status = 0, r;
	size_t n = 0;
	ssize_t got;
	pid_t pid;

	out[0] = '\0';
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -1;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
	r = posix_spawn(&pid, mkfs, &fa, NULL, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	close(pipefd[1]);
	if (r != 0) {
		close(pipefd[0]);
		snprintf(out, outlen, "%s", strerror(r));
		return -1;
	}
	while ((got = read(pipefd[0], out + n, outlen - 1 - n)) > 0 ||
	       (got < 0 && errno == EINTR)) {
		if (got > 0)
			n += (size_t)got;
		if (n + 1 >= outlen) {
			char sink[256];

			/* Drain the rest so mkfs never blocks on us. */
			while (read(pipefd[0], sink, sizeof(sink)) > 0)
				;
			break;
		}
	}
	out[n] = '\0';
	close(pipefd[0]);
	for (char *p = out; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	while (n > 0 && out[n - 1] == ' ')
		out[--n] = '\0';
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

int cnl_volume_create(const char *image, uint64_t bytes, const char *mkfs,
                      char *err, size_t errlen)
{
	char tmp[PATH_MAX], dir[PATH_MAX], out[512];
	uint64_t room;
	int fd, st, r;

	if (access(image, F_OK) == 0)
		return 0;
	if (bytes < CNL_VOLUME_MIN_BYTES || bytes > (uint64_t)INT64_MAX) {
		cnl_seterr(err, errlen,
		           "a volume of %" PRIu64 " bytes: want %" PRIu64
		           " MiB or more",
		           bytes, CNL_VOLUME_MIN_BYTES >> 20);
		return -EINVAL;
	}
	if (!mkfs || !mkfs[0]) {
		cnl_seterr(err, errlen,
		           "a workspace volume needs mkfs.ext4 on the node "
		           "(Debian: apt-get install e2fsprogs); not found");
		return -ENOENT;
	}
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.new", image) >= sizeof(tmp))
		return -ENAMETOOLONG;
	parent_of(image, dir, sizeof(dir));
	room = free_bytes(dir);
	if (room < CNL_VOLUME_MIN_FREE) {
		cnl_seterr(err, errlen,
		           "the node's disk is full: %" PRIu64
		           " MiB free under %s, a new workspace volume needs "
		           "%" PRIu64 " MiB",
		           room >> 20, dir, CNL_VOLUME_MIN_FREE >> 20);
		return -ENOSPC;
	}
	/* Sparse images may add up to more than the disk (volume.h), but
	 * one that could never be filled is a mistake to say now. */
	if (bytes > disk_bytes(dir)) {
		cnl_seterr(err, errlen,
		           "a volume of %" PRIu64 " MB is larger than the "
		           "node's disk under %s (%" PRIu64 " MB)",
		           bytes / 1000000, dir, disk_bytes(dir) / 1000000);
		return -EFBIG;
	}
	/* A .new left by an agent killed while making it is not whole. */
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
	          0600);
	if (fd < 0) {
		r = -errno;
		cnl_seterr(err, errlen, "cannot create %s: %s", tmp,
		           strerror(-r));
		return r;
	}
	if (ftruncate(fd, (off_t)bytes) < 0) {
		r = -errno;
		cnl_seterr(err, errlen,
		           "cannot size %s to %" PRIu64 " bytes: %s", tmp,
		           bytes, strerror(-r));
		goto fail;
	}
	st = run_mkfs(mkfs, tmp, out, sizeof(out));
	if (st != 0) {
		/* mkfs.ext4 says "No space left on device" in its own words;
		 * what is free now says it better. */
		room = free_bytes(dir);
		r = room < CNL_VOLUME_MIN_FREE || strstr(out, "No space left")
		        ? -ENOSPC
		        : -EIO;
		if (r == -ENOSPC)
			cnl_seterr(err, errlen,
			           "the node's disk is full: %" PRIu64
			           " MiB free under %s; mkfs.ext4 could not "
			           "make the workspace volume (%s)",
			           room >> 20, dir, out[0] ? out : "no output");
		else
			cnl_seterr(err, errlen,
			           "%s %s failed (exit status %d): %s", mkfs,
			           tmp, st, out[0] ? out : "no output");
		goto fail;
	}
	if (fsync(fd) < 0) {
		r = -errno;
		cnl_seterr(err, errlen, "cannot flush %s: %s", tmp,
		           strerror(-r));
		goto fail;
	}
	close(fd);
	fd = -1;
	if (rename(tmp, image) < 0) {
		r = -errno;
		cnl_seterr(err, errlen, "cannot rename %s to %s: %s", tmp,
		           image, strerror(-r));
		goto fail;
	}
	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		(void)fsync(fd);
		close(fd);
	}
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	return r;
}

int cnl_volume_mounted(const char *dir)
{
	char parent[PATH_MAX];
	struct stat st, pst;

	if ((size_t)snprintf(parent, sizeof(parent), "%s/..", dir) >=
	    sizeof(parent))
		return -ENAMETOOLONG;
	if (lstat(dir, &st) < 0 || stat(parent, &pst) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	return st.st_dev != pst.st_dev;
}

/* Read the first line of @path into @buf, without its newline. */
static int read_line(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -EIO;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

/* The loop device that holds @image: its name ("loop3") in @name and its
 * device number in @ret_dev; -ENOENT when none. */
static int loop_holding(const char *image, char *name, size_t len,
                        dev_t *ret_dev)
{
	char real[PATH_MAX], path[PATH_MAX], line[PATH_MAX + 16];
	DIR *d;
	struct dirent *e;
	int r = -ENOENT;

	if (!realpath(image, real))
		return -ENOENT;
	if (!(d = opendir("/sys/block")))
		return -ENOENT;
	while ((e = readdir(d))) {
		unsigned maj, min;

		if (strncmp(e->d_name, "loop", 4) != 0)
			continue;
		snprintf(path, sizeof(path), "/sys/block/%s/loop/backing_file",
		         e->d_name);
		if (read_line(path, line, sizeof(line)) < 0 ||
		    strcmp(line, real) != 0)
			continue;
		snprintf(path, sizeof(path), "/sys/block/%s/dev", e->d_name);
		if (read_line(path, line, sizeof(line)) < 0 ||
		    sscanf(line, "%u:%u", &maj, &min) != 2)
			continue;
		snprintf(name, len, "%s", e->d_name);
		*ret_dev = makedev(maj, min);
		r = 0;
		break;
	}
	closedir(d);
	return r;
}

int cnl_volume_loop_of(const char *image, char *ret_dev, size_t len)
{
	char name[256];
	dev_t dev;
	int r = loop_holding(image, name, sizeof(name), &dev);

	if (r == 0)
		snprintf(ret_dev, len, "/dev/%s", name);
	return r;
}

/* Open /dev/loop@n, making its node where the node's /dev lacks it (a
 * device made on demand in a container without udev). */
static int open_loop(int n, char *dev, size_t len)
{
	int fd;

	snprintf(dev, len, "/dev/loop%d", n);
	fd = open(dev, O_RDWR | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT &&
	    mknod(dev, S_IFBLK | 0600, makedev(LOOP_MAJOR, (unsigned)n)) == 0)
		fd = open(dev, O_RDWR | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* Attach @img_fd (the file @image) to a free loop device, autoclear; its
 * fd, and its path in @dev. */
static int attach(int img_fd, const char *image, char *dev, size_t len,
                  char *err, size_t errlen)
{
	struct loop_config cfg = {.fd = (unsigned)img_fd};
	int ctl, fd = -ENOSPC;

	cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
	snprintf((char *)cfg.info.lo_file_name, sizeof(cfg.info.lo_file_name),
	         "%s", image);
	if ((ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC)) < 0) {
		int r = -errno;

		cnl_seterr(err, errlen,
		           "no loop devices on this node (/dev/loop-control: "
		           "%s): a workspace volume needs one",
		           strerror(-r));
		return r;
	}
	/* Another process may take the device we were offered: ask again. */
	for (int tries = 0; tries < 16; tries++) {
		int n = ioctl(ctl, LOOP_CTL_GET_FREE);

		if (n < 0) {
			int e = errno;

			cnl_seterr(err, errlen,
			           "no free loop device for %s (%s): all of "
			           "this node's loop devices are in use",
			           image, strerror(e));
			close(ctl);
			return -ENOSPC;
		}
		if ((fd = open_loop(n, dev, len)) < 0) {
			cnl_seterr(err, errlen, "cannot open %s: %s", dev,
			           strerror(-fd));
			break;
		}
		if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0)
			break;
		int e = errno;

		close(fd);
		fd = -e;
		if (e != EBUSY) {
			cnl_seterr(err, errlen, "cannot attach %s to %s: %s",
			           image, dev, strerror(e));
			break;
		}
	}
	if (fd == -EBUSY)
		cnl_seterr(err, errlen,
		           "no free loop device for %s: each one offered was "
		           "taken first",
		           image);
	close(ctl);
	return fd;
}

/* Mount the loop device @dev on @dir. */
static int mount_dev(const char *dev, const char *image, const char *dir,
                     char *err, size_t errlen)
{
	if (mount(dev, dir, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME,
	          "noinit_itable") < 0) {
		int r = -errno;

		cnl_seterr(err, errlen, "cannot mount %s (%s) on %s: %s", image,
		           dev, dir, strerror(-r));
		return r;
	}
	return 0;
}

/*
 * Mount again the file system that loop device @name (@held_dev) already
 * holds for @image: one block device, one superblock, only another place
 * it is seen.  The device is held open meanwhile, so that it cannot be
 * cleared and given to another image; -EAGAIN when that happened first.
 */
static int mount_again(const char *image, const char *name, dev_t held_dev,
                       const char *dir, char *err, size_t errlen)
{
	char dev[300], again[256];
	dev_t now;
	int fd, r;

	snprintf(dev, sizeof(dev), "/dev/%s", name);
	if ((fd = open(dev, O_RDONLY | O_CLOEXEC)) < 0)
		return -EAGAIN;
	if (loop_holding(image, again, sizeof(again), &now) < 0 ||
	    now != held_dev) {
		close(fd);
		return -EAGAIN;
	}
	r = mount_dev(dev, image, dir, err, errlen);
	close(fd);
	return r;
}

int cnl_volume_mount(const char *image, const char *dir, char *err,
                     size_t errlen)
{
	char held[256], dev[64];
	struct stat st;
	dev_t held_dev;
	int mounted = cnl_volume_mounted(dir), img_fd, loop_fd, r;

	if (mounted < 0) {
		cnl_seterr(err, errlen, "cannot mount on %s: %s", dir,
		           strerror(-mounted));
		return mounted;
	}
	for (int tries = 0; tries < 8; tries++) {
		if (loop_holding(image, held, sizeof(held), &held_dev) < 0)
			break;
		/* Ours, from before a restart: leave it. */
		if (mounted && stat(dir, &st) == 0 && st.st_dev == held_dev)
			return 0;
		if (mounted)
			break;
		/* Attached, not mounted here: its file system lives on in a
		 * mount namespace made while it was mounted (a workload's
		 * supervisor, any other process's).  That same file system
		 * is mounted again; a second device on the image would be a
		 * second file system on the same blocks, and corrupt it. */
		if ((r = mount_again(image, held, held_dev, dir, err,
		                     errlen)) != -EAGAIN)
			return r;
	}
	if (mounted) {
		cnl_seterr(err, errlen,
		           "%s has another file system mounted on it", dir);
		return -EBUSY;
	}
	if (loop_holding(image, held, sizeof(held), &held_dev) == 0) {
		cnl_seterr(err, errlen,
		           "%s is attached to /dev/%s, which keeps changing: "
		           "not mounted",
		           image, held);
		return -EBUSY;
	}
	if ((img_fd = open(image, O_RDWR | O_CLOEXEC | O_NOFOLLOW)) < 0) {
		r = -errno;
		cnl_seterr(err, errlen, "cannot open %s: %s", image,
		           strerror(-r));
		return r;
	}
	loop_fd = attach(img_fd, image, dev, sizeof(dev), err, errlen);
	close(img_fd);
	if (loop_fd < 0)
		return loop_fd;
	/* The mount holds the device from now on (autoclear: it is freed
	 * with the last unmount); on failure our close frees it. */
	r = mount_dev(dev, image, dir, err, errlen);
	close(loop_fd);
	return r;
}

int cnl_volume_unmount(const char *dir)
{
	int r = cnl_volume_mounted(dir);

	if (r <= 0)
		return r == -ENOENT ? 0 : r;
	if (umount2(dir, UMOUNT_NOFOLLOW) == 0)
		return 0;
	if (errno != EBUSY)
		return -errno;
	/* Busy (a shell of the node's operator in it): gone from view now,
	 * released with its last user. */
	return umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW) == 0 ? 0 : -errno;
}
