/*
 * guard.c - the region pin and the descriptor guards, shared by the CUDA
 * and the HIP interposer (guard.h).
 *
 * The pin: in a container the shim is forced on every process by the
 * container's /etc/ld.so.preload, which the tenant cannot change, but the
 * environment is the tenant's: a program that unset CNLAB_REGION (or named
 * another region) ran with no quota and no throttle at all.  So the agent
 * writes the region's path beside the preload, and the pin wins.  Bare
 * processes on the node (no pin) are started by the tenant with an
 * environment of its choosing anyway: CNLAB_REGION.
 *
 * The descriptor guards: a slot is owned through a POSIX record lock on
 * the accounting file's descriptor (region.h, invariant 2), and the kernel
 * drops a process's locks on a file when the process closes any
 * descriptor of it.  A program that closes its descriptors (closefrom,
 * close_range, a loop of close, dup2 onto ours), as daemonising code does,
 * would look dead, be reaped by the next process of the slice and take
 * the slice over its quota.  So the calls that close descriptors keep the
 * slot's open (close says it closed it).  A raw system call still gets
 * past this, as writing the accounting file does (docs/shim.md, known
 * limits).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/close_range.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim/guard.h"
#include "shim/region.h"

#define CNL_EXPORT __attribute__((visibility("default")))

#ifndef CNL_SHIM_PIN
#define CNL_SHIM_PIN "/etc/cnlab/region"
#endif

const char cnl_guard_pin_file[] = CNL_SHIM_PIN;

const char *cnl_guard_region_path(char *buf, unsigned cap, int *ret_broken,
                                  int *ret_env_ignored)
{
	const char *env = getenv("CNLAB_REGION");
	ssize_t n = -1;
	int fd;

	*ret_broken = 0;
	*ret_env_ignored = 0;
	fd = open(CNL_SHIM_PIN, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0 && errno == ENOENT)
		return env;
	if (fd >= 0) {
		n = read(fd, buf, cap - 1);
		syscall(SYS_close, fd);
	}
	if (n > 0 && (size_t)n < cap - 1) {
		buf[n] = '\0';
		buf[strcspn(buf, "\n")] = '\0';
		if (buf[0] == '/') {
			*ret_env_ignored = env && strcmp(env, buf) != 0;
			return buf;
		}
	}
	*ret_broken = 1;
	return NULL;
}

static int (*_Atomic slot_fd_of)(void);

void cnl_guard_keep_slot_fd(int (*slot_fd)(void))
{
	atomic_store(&slot_fd_of, slot_fd);
}

static int slot_fd_now(void)
{
	int (*f)(void) = atomic_load(&slot_fd_of);

	return f ? f() : -1;
}

static int is_slot_fd(int fd)
{
	return fd >= 0 && fd == slot_fd_now();
}

/* Close [first, last] (flags as close_range's). */
static int close_span(unsigned int first, unsigned int last, int flags)
{
	long rc;

	if (first > last)
		return 0;
	rc = syscall(SYS_close_range, first, last, flags);
	if (rc < 0 && errno == ENOSYS && !flags) {
		/* Kernels before 5.9: one at a time, up to the limit. */
		long max = sysconf(_SC_OPEN_MAX);
		unsigned int end = max > 0 && (unsigned long)max - 1 < last
		                       ? (unsigned int)(max - 1)
		                       : last;

		for (unsigned int fd = first; fd <= end && fd <= INT_MAX; fd++)
			syscall(SYS_close, (int)fd);
		return 0;
	}
	return (int)rc;
}

CNL_EXPORT int close(int fd)
{
	if (is_slot_fd(fd))
		return 0;
	return (int)syscall(SYS_close, fd);
}

CNL_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	int keep = slot_fd_now();

	if ((flags & CLOSE_RANGE_CLOEXEC) || keep < 0 ||
	    (unsigned int)keep < first || (unsigned int)keep > last)
		return close_span(first, last, flags);
	if ((unsigned int)keep > first &&
	    close_span(first, (unsigned int)keep - 1, flags) < 0)
		return -1;
	if ((unsigned int)keep < last)
		return close_span((unsigned int)keep + 1, last, flags);
	return 0;
}

CNL_EXPORT void closefrom(int lowfd)
{
	close_range(lowfd < 0 ? 0 : (unsigned int)lowfd, ~0U, 0);
}

CNL_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	if (oldfd != newfd && is_slot_fd(newfd)) {
		errno = EBUSY;
		return -1;
	}
	return (int)syscall(SYS_dup3, oldfd, newfd, flags);
}

CNL_EXPORT int dup2(int oldfd, int newfd)
{
	if (oldfd == newfd) /* dup3 refuses it; dup2 checks oldfd */
		return fcntl(oldfd, F_GETFD) < 0 ? -1 : newfd;
	return dup3(oldfd, newfd, 0);
}

/* The IPC registry -------------------------------------------------------- */

int cnl_guard_ipc_path(const struct cnl_region *r, const char *region_path,
                       const char *kind, const void *handle, char *buf,
                       unsigned long cap)
{
	const unsigned char *p = handle;
	uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
	int n;

	for (int i = 0; i < CNL_GUARD_IPC_HANDLE; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	if (r->ipc_dir[0])
		n = snprintf(buf, cap, "%s/%s-%016llx", r->ipc_dir, kind,
		             (unsigned long long)h);
	else
		n = snprintf(buf, cap, "%s.ipc/%s-%016llx",
		             region_path ? region_path : "", kind,
		             (unsigned long long)h);
	return n > 0 && (unsigned long)n < cap ? 0 : -ENAMETOOLONG;
}

void cnl_guard_ipc_register(const struct cnl_region *r, const char *region_path,
                            const char *kind, const void *handle)
{
	char path[512], dir[512];
	size_t n;
	int fd;

	if (cnl_guard_ipc_path(r, region_path, kind, handle, path,
	                       sizeof(path)) < 0)
		return;
	n = (size_t)(strrchr(path, '/') - path);
	memcpy(dir, path, n);
	dir[n] = '\0';
	mkdir(dir, 0777); /* the slice's own registry, first export */
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	n = strnlen(r->project, sizeof(r->project));
	if (write(fd, r->project, n) < 0)
		n = 0;
	close(fd);
}

int cnl_guard_ipc_owned(const struct cnl_region *r, const char *region_path,
                        const char *kind, const void *handle)
{
	char path[512], owner[CNL_REGION_PROJECT_MAX + 1];
	ssize_t n = -1;
	int fd;

	if (cnl_guard_ipc_path(r, region_path, kind, handle, path,
	                       sizeof(path)) == 0 &&
	    (fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, owner, sizeof(owner) - 1);
		close(fd);
	}
	if (n < 0)
		return 0;
	owner[n] = '\0';
	return strcmp(owner, r->project) == 0;
}

/* The compute rate --------------------------------------------------------- */

#define BOARD_POLL_NS 1000000ULL

static _Atomic uint64_t board_at;
static _Atomic unsigned board_pct;

unsigned cnl_guard_rate(const struct cnl_region *r, int board_fd,
                        unsigned long long now)
{
	unsigned pct =
	    atomic_load_explicit(&r->share_pct, memory_order_relaxed);
	uint64_t at;

	if (board_fd < 0 || !pct)
		return pct;
	at = atomic_load_explicit(&board_at, memory_order_acquire);
	if (at && now >= at && now - at < BOARD_POLL_NS)
		return atomic_load_explicit(&board_pct, memory_order_relaxed);
	pct = cnl_board_rate_fd(
	    board_fd,
	    atomic_load_explicit(&r->board_slot, memory_order_relaxed), pct,
	    now);
	atomic_store_explicit(&board_pct, pct, memory_order_relaxed);
	atomic_store_explicit(&board_at, now, memory_order_release);
	return pct;
}
