/*
 * launch.c - the workload launcher: validation before any side effect, the
 * fork (or clone and execve of cnlab-init --supervise) into supervisor /
 * init / command (see the process tree in launch.h; the supervisor's code
 * is launch_child.c, shared with cnlab-init), exit records, poll, kill,
 * usage and adoption.
 *
 * Everything the children need (paths, argv, env, fds) is prepared before
 * fork(); between fork and execve the children make system calls only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "cnlab/errors.h"
#include "agent/cgroup.h"
#include "agent/launch-child.h"
#include "agent/launch.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

struct cnl_launcher {
	struct cnl_cg cg;
	char name[64];
	char state_dir[CNL_CG_PATH_MAX];
};

struct cnl_workload {
	struct cnl_cg cg; /* a copy: the handle outlives its launcher */
	char id[64];
	char exit_path[CNL_CG_PATH_MAX + 80];
	char pid_path[CNL_CG_PATH_MAX + 80];
	pid_t pid;
	bool own;    /* pid is our child, to be reaped */
	bool reaped; /* waitpid has collected it */
	int out_fd, err_fd;
	int pidfd; /* the supervisor's pidfd (readable once it ended), or -1 */
};

static const char *const step_names[] = {
    [CNL_STEP_JOIN] = "join cgroup",
    [CNL_STEP_SETSID] = "setsid",
    [CNL_STEP_UNSHARE] = "unshare namespaces",
    [CNL_STEP_MOUNT_PRIVATE] = "make mounts private",
    [CNL_STEP_HIDE_MOUNT] = "detach the hidden mount",
    [CNL_STEP_BIND] = "bind the work folder",
    [CNL_STEP_FORK] = "fork",
    [CNL_STEP_MOUNT_PROC] = "mount /proc",
    [CNL_STEP_STDIO] = "set up stdio",
    [CNL_STEP_SETGROUPS] = "setgroups",
    [CNL_STEP_SETGID] = "setgid",
    [CNL_STEP_SETUID] = "setuid",
    [CNL_STEP_CHDIR] = "chdir",
    [CNL_STEP_EXEC] = "exec",
    [CNL_STEP_SUPERVISOR] = "exec the supervisor",
};

static int errf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

static bool valid_name(const char *s)
{
	size_t n = 0;

	if (!s || !*s || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
		return false;
	for (; s[n]; n++) {
		char c = s[n];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '.' ||
		      c == '-'))
			return false;
	}
	return n <= CNL_LAUNCH_ID_MAX;
}

static int launcher_new(const char *name, const char *state_dir,
                        const char *v2_mount, struct cnl_launcher **ret,
                        char *err, size_t errlen)
{
	struct cnl_launcher *l;
	int r;

	if (!valid_name(name))
		return errf(err, errlen, -EINVAL,
		            "invalid agent name (want [A-Za-z0-9_.-]{1,63})");
	if (!state_dir || strlen(state_dir) >= CNL_CG_PATH_MAX)
		return errf(err, errlen, -EINVAL, "invalid state directory");
	if (mkdir(state_dir, 0755) < 0 && errno != EEXIST)
		return errf(err, errlen, -errno, "mkdir %s: %s", state_dir,
		            strerror(errno));
	l = calloc(1, sizeof(*l));
	if (!l)
		return errf(err, errlen, -ENOMEM, "out of memory");
	r = cnl_cg_open(&l->cg, "/proc/self/mountinfo", name, v2_mount, err,
	                errlen);
	if (r < 0) {
		free(l);
		return r;
	}
	snprintf(l->name, sizeof(l->name), "%s", name);
	snprintf(l->state_dir, sizeof(l->state_dir), "%s", state_dir);
	*ret = l;
	return 0;
}

int cnl_launcher_new(const char *name, const char *state_dir,
                     struct cnl_launcher **ret, char *err, size_t errlen)
{
	return launcher_new(name, state_dir, NULL, ret, err, errlen);
}

int cnl_launcher_new_v2_at(const char *name, const char *state_dir,
                           const char *v2_mount, struct cnl_launcher **ret,
                           char *err, size_t errlen)
{
	if (!v2_mount)
		return -EINVAL;
	return launcher_new(name, state_dir, v2_mount, ret, err, errlen);
}

void cnl_launcher_free(struct cnl_launcher *l)
{
	if (!l)
		return;
	cnl_cg_remove_root(&l->cg);
	free(l);
}

int cnl_launcher_cgroup_version(const struct cnl_launcher *l)
{
	return l->cg.version;
}

int cnl_launcher_cgroup_dir(const struct cnl_launcher *l,
                            const char *controller, const char *id, char *buf,
                            size_t n)
{
	static const char *const names[CNL_CG_NCTL] = {
	    "memory", "cpu", "cpuacct", "pids", "freezer"};

	if (!valid_name(id))
		return -EINVAL;
	for (int i = 0; i < CNL_CG_NCTL; i++)
		if (strcmp(controller, names[i]) == 0)
			return cnl_cg_dir(&l->cg, (enum cnl_cg_ctl)i, id, buf,
			                  n);
	return -EINVAL;
}

/* Field 5 of mountinfo line @line (its mount point), unescaped (\040 and
 * the like) into @out; false when the line has no such field or it does
 * not fit.  Async-signal-safe: S0 is a child of a threaded process. */
static bool mount_point(const char *line, size_t len, char *out, size_t n)
{
	size_t i = 0, o = 0;

	for (int field = 0; field < 4; field++) {
		while (i < len && line[i] != ' ')
			i++;
		if (i++ >= len)
			return false;
	}
	while (i < len && line[i] != ' ' && o + 1 < n) {
		if (line[i] == '\\' && i + 3 < len && line[i + 1] >= '0' &&
		    line[i + 1] <= '3') {
			out[o++] = (char)((line[i + 1] - '0') * 64 +
			                  (line[i + 2] - '0') * 8 +
			                  (line[i + 3] - '0'));
			i += 4;
		} else {
			out[o++] = line[i++];
		}
	}
	out[o] = '\0';
	return i >= len || line[i] == ' ';
}

/* The first mount point of this namespace below @under, other than @keep
 * and what is below it, past the first @skip of them, into @out. */
static bool next_below(const char *under, const char *keep, int skip, char *out,
                       size_t n)
{
	size_t ul = strlen(under), kl = keep ? strlen(keep) : 0, have = 0;
	char buf[8192];
	int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	bool found = false;
	ssize_t got;

	if (fd < 0)
		return false;
	while (!found && (got = read(fd, buf + have, sizeof(buf) - have)) > 0) {
		size_t end = have + (size_t)got, start = 0;
		char *nl;

		while (!found &&
		       (nl = memchr(buf + start, '\n', end - start))) {
			size_t len = (size_t)(nl - (buf + start));

			if (mount_point(buf + start, len, out, n) &&
			    strncmp(out, under, ul) == 0 && out[ul] == '/' &&
			    !(keep && strncmp(out, keep, kl) == 0 &&
			      (out[kl] == '\0' || out[kl] == '/')) &&
			    skip-- <= 0)
				found = true;
			start += len + 1;
		}
		/* A line longer than the buffer is dropped: no mount point
		 * of ours is. */
		have = end - start < sizeof(buf) ? end - start : 0;
		memmove(buf, buf + start, have);
	}
	close(fd);
	return found;
}

/* Detach every mount below @under but @keep (child_ctx.detach_under). */
static void detach_below(const char *under, const char *keep)
{
	char target[4096];
	int skip = 0;

	/* mountinfo is read again after each detach, from its start: it is
	 * not read while it changes. */
	while (next_below(under, keep, skip, target, sizeof(target)))
		if (umount2(target, MNT_DETACH) < 0)
			skip++;
}

static void __attribute__((noreturn)) run_s0(const struct cnl_child_ctx *c)
{
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	int flags = 0;

	/* An agent that ignores SIGCHLD would make waitpid lose statuses. */
	(void)sigaction(SIGCHLD, &dfl, NULL);
	if (setsid() < 0)
		cnl_child_fail(c->errpipe, CNL_STEP_SETSID);
	for (int i = 0; i < c->nprocs; i++) {
		int fd = open(c->procs[i], O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, "0", 1) != 1)
			cnl_child_fail(c->errpipe, CNL_STEP_JOIN);
		close(fd);
	}
	if (c->pid_ns)
		flags |= CLONE_NEWPID;
	if (c->mount_ns)
		flags |= CLONE_NEWNS;
	if (flags && unshare(flags) < 0)
		cnl_child_fail(c->errpipe, CNL_STEP_UNSHARE);
	if (c->mount_ns &&
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		cnl_child_fail(c->errpipe, CNL_STEP_MOUNT_PRIVATE);
	if (c->mount_ns && c->hide_mount &&
	    umount2(c->hide_mount, MNT_DETACH) < 0 && errno != EINVAL &&
	    errno != ENOENT)
		cnl_child_fail(c->errpipe, CNL_STEP_HIDE_MOUNT);
	if (c->mount_ns && c->detach_under)
		detach_below(c->detach_under, c->keep);
	if (c->mount_ns && c->bind_src && c->bind_dst &&
	    mount(c->bind_src, c->bind_dst, NULL, MS_BIND | MS_REC, NULL) < 0)
		cnl_child_fail(c->errpipe, CNL_STEP_BIND);
	if (c->helper_argv) {
		/* Become the supervisor (cnlab-init's supervise mode): no
		 * copy of the agent lives on beside the work.  What it is
		 * handed by number stays open across execve; the rest of
		 * the agent's descriptors do not. */
		if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
			for (int i = 3; i < 4096; i++)
				(void)fcntl(i, F_SETFD, FD_CLOEXEC);
		if (fcntl(c->out_fd, F_SETFD, 0) < 0 ||
		    fcntl(c->err_fd, F_SETFD, 0) < 0 ||
		    fcntl(c->errpipe, F_SETFD, 0) < 0 ||
		    (c->exe_fd > 0 && fcntl(c->exe_fd, F_SETFD, 0) < 0))
			cnl_child_fail(c->errpipe, CNL_STEP_STDIO);
		execve(c->helper_argv[0], (char *const *)c->helper_argv,
		       (char *const *)c->env);
		cnl_child_fail(c->errpipe, CNL_STEP_SUPERVISOR);
	}
	cnl_child_run(c);
}

/* S0 when it shares the agent's memory until its execve (clone with
 * CLONE_VM | CLONE_VFORK: the calling thread waits, nothing is copied). */
static int run_s0_vm(void *arg)
{
	run_s0(arg);
}

/* ---- the agent side ---- */

#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING 0x0002U
#endif
#ifndef F_ADD_SEALS
#define F_ADD_SEALS (1024 + 9)
#define F_GET_SEALS (1024 + 10)
#endif
#ifndef F_SEAL_SEAL
#define F_SEAL_SEAL   0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW   0x0004
#define F_SEAL_WRITE  0x0008
#endif
#define ALL_SEALS (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

int cnl_launch_sealed_copy(const char *path)
{
	char magic[4], self[40];
	struct stat st;
	off_t off = 0;
	int in, mfd = -1, ro = -1, r;

	in = open(path, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	if (fstat(in, &st) < 0) {
		r = -errno;
		goto out;
	}
	r = -ENOEXEC;
	if (!S_ISREG(st.st_mode) || !(st.st_mode & 0111) ||
	    pread(in, magic, sizeof(magic), 0) != (ssize_t)sizeof(magic) ||
	    memcmp(magic, "\177ELF", 4) != 0)
		goto out;
	mfd = (int)syscall(SYS_memfd_create, "cnlab-runtime",
	                   MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (mfd < 0) {
		r = -errno;
		goto out;
	}
	/* A plain copy (sendfile would do it in the kernel; the file is
	 * read once per agent start). */
	while (off < st.st_size) {
		char buf[65536];
		ssize_t n = pread(in, buf, sizeof(buf), off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || write(mfd, buf, (size_t)n) != n) {
			r = n < 0 ? -errno : -EIO;
			goto out;
		}
		off += n;
	}
	if (fchmod(mfd, 0555) < 0 || fcntl(mfd, F_ADD_SEALS, ALL_SEALS) < 0) {
		r = -errno;
		goto out;
	}
	if (fcntl(mfd, F_GET_SEALS) != ALL_SEALS) {
		r = -EIO;
		goto out;
	}
	/* Read-only from here on: no writable descriptor of the copy is
	 * left open (an older kernel refuses to execute a file open for
	 * writing, ETXTBSY). */
	snprintf(self, sizeof(self), "/proc/self/fd/%d", mfd);
	ro = open(self, O_RDONLY | O_CLOEXEC);
	r = ro < 0 ? -errno : ro;
out:
	if (mfd >= 0)
		close(mfd);
	close(in);
	return r;
}

/* Resolve argv0 like execvp, but before forking.  0 or -CNL_ENOTFOUND. */
static int resolve(const char *argv0, const char *const *env, const char *cwd,
                   char *out, size_t n)
{
	const char *path = "/usr/local/bin:/usr/bin:/bin";
	struct stat st;

	if (strchr(argv0, '/')) {
		int r = argv0[0] == '/' ? snprintf(out, n, "%s", argv0)
		                        : snprintf(out, n, "%s/%s", cwd, argv0);
		if (r < 0 || (size_t)r >= n)
			return -CNL_ENOTFOUND;
		return stat(out, &st) == 0 && S_ISREG(st.st_mode) &&
		               (st.st_mode & 0111)
		           ? 0
		           : -CNL_ENOTFOUND;
	}
	for (const char *const *e = env; *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0)
			path = *e + 5;
	while (*path) {
		const char *end = strchr(path, ':');
		size_t len = end ? (size_t)(end - path) : strlen(path);
		int r = len ? snprintf(out, n, "%.*s/%s", (int)len, path, argv0)
		            : snprintf(out, n, "%s/%s", cwd, argv0);

		if (r > 0 && (size_t)r < n && stat(out, &st) == 0 &&
		    S_ISREG(st.st_mode) && (st.st_mode & 0111))
			return 0;
		path += len;
		if (*path == ':')
			path++;
	}
	return -CNL_ENOTFOUND;
}

static void set_paths(struct cnl_workload *w, const char *state_dir,
                      const char *id)
{
	snprintf(w->id, sizeof(w->id), "%s", id);
	snprintf(w->exit_path, sizeof(w->exit_path), "%s/%s.exit", state_dir,
	         id);
	snprintf(w->pid_path, sizeof(w->pid_path), "%s/%s.pid", state_dir, id);
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* A pidfd of @pid (close-on-exec), or -1 (a kernel before 5.3, no such
 * process): the caller then learns of the end by polling. */
static int open_pidfd(pid_t pid)
{
#ifdef SYS_pidfd_open
	long fd = pid > 0 ? syscall(SYS_pidfd_open, pid, 0U) : -1;

	return fd >= 0 ? (int)fd : -1;
#else
	(void)pid;
	return -1;
#endif
}

static int write_pid_file(const struct cnl_workload *w)
{
	char tmp[sizeof(w->pid_path) + 8], buf[32];
	int fd, len = snprintf(buf, sizeof(buf), "%d\n", (int)w->pid);

	snprintf(tmp, sizeof(tmp), "%s.tmp", w->pid_path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (write(fd, buf, (size_t)len) != len) {
		int e = errno ? -errno : -EIO;
		close(fd);
		unlink(tmp);
		return e;
	}
	close(fd);
	return rename(tmp, w->pid_path) < 0 ? -errno : 0;
}

/* Whether S0 shares the agent's memory until its execve.  Not under ASan
 * or TSan: their runtimes follow each thread's stack and state, and a
 * clone on a stack of ours that runs instrumented code in the agent's
 * memory is neither (S0 is then a fork that execs the supervisor). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define S0_SHARES_MEMORY 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define S0_SHARES_MEMORY 0
#endif
#endif
#ifndef S0_SHARES_MEMORY
#define S0_SHARES_MEMORY 1
#endif

/* The supervisor's command line (cnlab-init --supervise, see init.c for
 * its fields) and the stack S0 runs on until it becomes it, made before
 * the clone. */
#define HELPER_STACK (256 * 1024)
struct helper {
	char num[6][24];
	char *stack; /* HELPER_STACK bytes, mmap'd */
	const char *argv[];
};

static void helper_free(struct helper *h)
{
	if (!h)
		return;
	if (h->stack && h->stack != MAP_FAILED)
		munmap(h->stack, HELPER_STACK);
	free(h);
}

static int helper_argv(const struct cnl_child_ctx *c, const char *path,
                       struct helper **ret)
{
	size_t nargv = 0, k = 0;
	struct helper *h;

	while (c->argv[nargv])
		nargv++;
	h = calloc(1, sizeof(*h) + (20 + (size_t)c->nprocs + nargv) *
	                               sizeof(h->argv[0]));
	if (!h)
		return -ENOMEM;
	h->stack = mmap(NULL, HELPER_STACK, PROT_READ | PROT_WRITE,
	                MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (h->stack == MAP_FAILED) {
		helper_free(h);
		return -ENOMEM;
	}
	snprintf(h->num[0], sizeof(h->num[0]), "%d", c->uid);
	snprintf(h->num[1], sizeof(h->num[1]), "%d", c->gid);
	snprintf(h->num[2], sizeof(h->num[2]), "%d", c->out_fd);
	snprintf(h->num[3], sizeof(h->num[3]), "%d", c->err_fd);
	snprintf(h->num[4], sizeof(h->num[4]), "%d", c->errpipe);
	snprintf(h->num[5], sizeof(h->num[5]), "%" PRId64,
	         c->lease_path ? c->lease_ms : 0);
	h->argv[k++] = path;
	h->argv[k++] = "--supervise";
	h->argv[k++] = c->pid_ns && c->mount_ns ? "PM"
	               : c->pid_ns              ? "P"
	               : c->mount_ns            ? "M"
	                                        : "-";
	for (int i = 0; i < 6; i++)
		h->argv[k++] = h->num[i];
	h->argv[k++] = c->lease_path ? c->lease_path : "";
	h->argv[k++] = c->exit_path;
	h->argv[k++] = c->exit_tmp;
	h->argv[k++] = c->cwd;
	h->argv[k++] = c->exe;
	for (int i = 0; i < c->nprocs; i++)
		h->argv[k++] = c->procs[i];
	h->argv[k++] = "--";
	for (size_t i = 0; i < nargv; i++)
		h->argv[k++] = c->argv[i];
	h->argv[k] = NULL;
	*ret = h;
	return 0;
}

int cnl_launch(struct cnl_launcher *l, const struct cnl_launch_spec *s,
               struct cnl_workload **ret, char *err, size_t errlen)
{
	struct cnl_child_ctx c;
	struct cnl_workload *w;
	char exe[PATH_MAX];
	int outp[2] = {-1, -1}, errp[2] = {-1, -1}, ep[2];
	struct cnl_child_err ce = {0, 0};
	struct helper *hv = NULL;
	sigset_t all, old;
	struct stat st;
	size_t got = 0;
	pid_t pid;
	int r;

	if (!l || !s || !ret)
		return -EINVAL;
	if (!valid_name(s->id))
		return errf(err, errlen, -EINVAL,
		            "invalid workload id (want [A-Za-z0-9_.-]{1,63})");
	if (!s->argv || !s->argv[0] || !s->argv[0][0] || !s->env || !s->cwd)
		return errf(err, errlen, -EINVAL,
		            "argv, env and cwd are required");
	if (s->cpu_milli < 0 || s->mem_bytes < 0 || s->pids_max < 0)
		return errf(err, errlen, -CNL_ESIZE, "negative limit");
	if (stat(s->cwd, &st) < 0)
		return errf(err, errlen, -errno, "working directory %s: %s",
		            s->cwd, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return errf(err, errlen, -ENOTDIR,
		            "working directory %s: not a directory", s->cwd);
	if (s->exe_fd > 0) {
		/* The program is the open file: it is run through its
		 * descriptor's name, found again in whatever /proc the
		 * command's process sees. */
		if (fstat(s->exe_fd, &st) < 0 || !S_ISREG(st.st_mode))
			return errf(err, errlen, -EBADF,
			            "%s: the program's descriptor %d is not an "
			            "open file",
			            s->argv[0], s->exe_fd);
		snprintf(exe, sizeof(exe), "/proc/self/fd/%d", s->exe_fd);
	} else if (resolve(s->argv[0], s->env, s->cwd, exe, sizeof(exe)) < 0)
		return errf(err, errlen, -CNL_ENOTFOUND,
		            "command not found: %s", s->argv[0]);

	w = calloc(1, sizeof(*w));
	if (!w)
		return errf(err, errlen, -ENOMEM, "out of memory");
	w->cg = l->cg;
	w->out_fd = w->err_fd = w->pidfd = -1;
	w->own = true;
	set_paths(w, l->state_dir, s->id);

	r = cnl_cg_create(&l->cg, s->id);
	/* An empty cgroup of the same id is what an earlier agent left when
	 * it died between making it and starting the workload (the restarted
	 * agent adopted nothing there, and the work was assigned again): it
	 * goes, and the start goes on.  One with processes in it is running
	 * work, never started twice. */
	if (r == -EEXIST) {
		pid_t p1;

		if (cnl_cg_pids(&l->cg, s->id, &p1, 1) == 0 &&
		    cnl_cg_remove(&l->cg, s->id) == 0)
			r = cnl_cg_create(&l->cg, s->id);
	}
	if (r < 0) {
		free(w);
		if (r == -EEXIST)
			return errf(err, errlen, r, "workload %s exists",
			            s->id);
		return errf(err, errlen, r, "create cgroup %s: %s", s->id,
		            strerror(-r));
	}
	r = cnl_cg_set_limits(&l->cg, s->id, s->cpu_milli, s->mem_bytes,
	                      s->pids_max);
	if (r < 0) {
		errf(err, errlen, r, "set limits of %s: %s", s->id,
		     cnl_strerror(r));
		goto fail_cgroup;
	}
	(void)unlink(w->exit_path);
	(void)unlink(w->pid_path);

	if ((s->stdout_fd < 0 && pipe2(outp, O_CLOEXEC) < 0) ||
	    (s->stderr_fd < 0 && pipe2(errp, O_CLOEXEC) < 0)) {
		r = errf(err, errlen, -errno, "pipe: %s", strerror(errno));
		goto fail_pipes;
	}
	if (pipe2(ep, O_CLOEXEC) < 0) {
		r = errf(err, errlen, -errno, "pipe: %s", strerror(errno));
		goto fail_pipes;
	}

	memset(&c, 0, sizeof(c));
	c.nprocs = cnl_cg_procs_paths(&l->cg, s->id, c.procs);
	c.exe = exe;
	c.exe_fd = s->exe_fd > 0 ? s->exe_fd : 0;
	c.argv = s->argv;
	c.env = s->env;
	c.cwd = s->cwd;
	c.exit_path = w->exit_path;
	snprintf(c.exit_tmp, sizeof(c.exit_tmp), "%s/.%s.exit.tmp",
	         l->state_dir, s->id);
	c.uid = s->uid;
	c.gid = s->gid;
	c.pid_ns = s->pid_ns;
	c.mount_ns = s->mount_ns;
	c.lease_path = s->lease_path;
	c.lease_ms = s->lease_ms;
	c.hide_mount = s->hide_mount;
	c.bind_src = s->bind_src;
	c.bind_dst = s->bind_dst;
	c.detach_under = s->detach_under;
	c.keep = s->keep;
	c.out_fd = s->stdout_fd >= 0 ? s->stdout_fd : outp[1];
	c.err_fd = s->stderr_fd >= 0 ? s->stderr_fd : errp[1];
	c.errpipe = ep[1];
	if (s->supervisor && (r = helper_argv(&c, s->supervisor, &hv)) < 0) {
		errf(err, errlen, r, "out of memory");
		close(ep[0]);
		close(ep[1]);
		goto fail_pipes;
	}
	c.helper_argv = hv ? (const char *const *)hv->argv : NULL;

	/* The children start with every signal blocked: no agent handler
	 * runs in them; the command unblocks before execve. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (hv && S0_SHARES_MEMORY) {
		pid = clone(run_s0_vm, hv->stack + HELPER_STACK,
		            CLONE_VM | CLONE_VFORK | SIGCHLD, &c);
	} else {
		pid = fork();
		if (pid == 0)
			run_s0(&c);
	}
	r = -errno;
	helper_free(hv);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close(ep[1]);
	close_fd(&outp[1]);
	close_fd(&errp[1]);
	if (pid < 0) {
		close(ep[0]);
		errf(err, errlen, r, "fork: %s", strerror(-r));
		goto fail_pipes;
	}
	w->pid = pid;

	/* EOF without a message: the command was exec'd. */
	while (got < sizeof(ce)) {
		ssize_t n = read(ep[0], (char *)&ce + got, sizeof(ce) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(ep[0]);
	if (got == sizeof(ce)) {
		const char *step =
		    ce.step >= 0 && ce.step <= CNL_STEP_SUPERVISOR
		        ? step_names[ce.step]
		        : "start";
		r = ce.err > 0 ? -ce.err : -EIO;
		if (ce.step == CNL_STEP_EXEC)
			errf(err, errlen, r, "exec %s: %s",
			     s->exe_fd > 0 ? s->argv[0] : exe,
			     strerror(ce.err));
		else
			errf(err, errlen, r, "%s for %s: %s", step, s->id,
			     strerror(ce.err));
		(void)cnl_cg_kill(&l->cg, s->id);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		(void)unlink(w->exit_path);
		(void)unlink(c.exit_tmp);
		goto fail_pipes;
	}
	if (got != 0 || write_pid_file(w) < 0) {
		/* A torn message or no pid file: do not run half-known. */
		r = errf(err, errlen, -EIO, "start of %s failed", s->id);
		(void)cnl_cg_kill(&l->cg, s->id);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		(void)unlink(w->exit_path);
		(void)unlink(w->pid_path);
		goto fail_pipes;
	}
	/* Our child, not reaped: the pid cannot have been reused. */
	w->pidfd = open_pidfd(pid);
	if (outp[0] >= 0)
		(void)fcntl(outp[0], F_SETFL, O_NONBLOCK);
	if (errp[0] >= 0)
		(void)fcntl(errp[0], F_SETFL, O_NONBLOCK);
	w->out_fd = outp[0];
	w->err_fd = errp[0];
	*ret = w;
	return 0;

fail_pipes:
	close_fd(&outp[0]);
	close_fd(&outp[1]);
	close_fd(&errp[0]);
	close_fd(&errp[1]);
fail_cgroup:
	(void)cnl_cg_remove(&l->cg, s->id);
	free(w);
	return r;
}

int cnl_workload_stdout(const struct cnl_workload *w)
{
	return w->out_fd;
}

int cnl_workload_stderr(const struct cnl_workload *w)
{
	return w->err_fd;
}

pid_t cnl_workload_pid(const struct cnl_workload *w)
{
	return w->pid;
}

int cnl_workload_pidfd(const struct cnl_workload *w)
{
	return w->pidfd;
}

const char *cnl_workload_id(const struct cnl_workload *w)
{
	return w->id;
}

int cnl_workload_signal(struct cnl_workload *w, int sig)
{
	return cnl_cg_signal(&w->cg, w->id, sig);
}

int cnl_workload_kill(struct cnl_workload *w)
{
	return cnl_cg_kill(&w->cg, w->id);
}

int cnl_workload_procs(struct cnl_workload *w, pid_t *pids, int max)
{
	return cnl_cg_pids(&w->cg, w->id, pids, max);
}

/* Reap our supervisor if it has ended (block: only once it must have). */
static void reap(struct cnl_workload *w, bool block)
{
	if (!w->own || w->reaped || w->pid <= 0)
		return;
	for (;;) {
		pid_t r = waitpid(w->pid, NULL, block ? 0 : WNOHANG);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == w->pid || (r < 0 && errno == ECHILD))
			w->reaped = true;
		return;
	}
}

int cnl_workload_poll(struct cnl_workload *w, struct cnl_exit *ret)
{
	struct cnl_exit e = {false, -1, 0, false};
	char buf[64];
	pid_t one;
	int n;

	reap(w, false);
	/* Our own supervisor, not ended: it is in the cgroup, so the work
	 * runs (no need to read the cgroup's list in every hierarchy). */
	if (w->own && !w->reaped && w->pid > 0) {
		*ret = e;
		return 0;
	}
	n = cnl_cg_pids(&w->cg, w->id, &one, 1);
	if (n < 0)
		return n;
	if (n > 0) {
		*ret = e;
		return 0;
	}
	/* The cgroup is empty, so the supervisor has exited. */
	reap(w, true);
	e.exited = true;
	if (cnl_cg_read_file(w->exit_path, buf, sizeof(buf)) > 0) {
		int64_t v;
		if (cnl_cg_parse_keyed(buf, "exited", &v) == 0) {
			e.code = (int)v;
		} else if (cnl_cg_parse_keyed(buf, "signaled", &v) == 0) {
			e.signal = (int)v;
		} else {
			e.signal = SIGKILL;
		}
	} else {
		/* The supervisor itself was SIGKILLed before recording. */
		e.signal = SIGKILL;
	}
	e.oom_killed =
	    cnl_cg_oom_killed(&w->cg, w->id, e.signal == SIGKILL) > 0;
	*ret = e;
	return 0;
}

int cnl_workload_usage(struct cnl_workload *w, struct cnl_usage *ret)
{
	struct cnl_usage u;
	int r = cnl_cg_usage(&w->cg, w->id, &u.cpu_usec, &u.mem_peak_bytes,
	                     &u.mem_current_bytes);

	if (r < 0)
		return r;
	*ret = u;
	return 0;
}

void cnl_workload_free(struct cnl_workload *w)
{
	pid_t one;

	if (!w)
		return;
	close_fd(&w->out_fd);
	close_fd(&w->err_fd);
	close_fd(&w->pidfd);
	reap(w, false);
	if (cnl_cg_pids(&w->cg, w->id, &one, 1) == 0) {
		reap(w, true);
		if (cnl_cg_remove(&w->cg, w->id) == 0) {
			(void)unlink(w->exit_path);
			(void)unlink(w->pid_path);
		}
	}
	free(w);
}

void cnl_workload_release(struct cnl_workload *w)
{
	if (!w)
		return;
	close_fd(&w->out_fd);
	close_fd(&w->err_fd);
	close_fd(&w->pidfd);
	free(w);
}

/* Whether @pid is listed in workload @id's cgroup. */
static bool in_cgroup(struct cnl_launcher *l, const char *id, pid_t pid)
{
	pid_t pids[256];
	int n = cnl_cg_pids(&l->cg, id, pids, 256);

	for (int i = 0; i < n && i < 256; i++)
		if (pids[i] == pid)
			return true;
	return false;
}

int cnl_launcher_adopt(struct cnl_launcher *l, const char *id,
                       struct cnl_workload **ret)
{
	struct cnl_workload *w;
	struct stat st;
	char buf[32];
	int64_t pid;

	if (!valid_name(id))
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->cg = l->cg;
	w->out_fd = w->err_fd = w->pidfd = -1;
	w->pid = -1;
	set_paths(w, l->state_dir, id);
	if (!cnl_cg_exists(&l->cg, id) && stat(w->exit_path, &st) < 0) {
		free(w);
		return -CNL_ENOTFOUND;
	}
	if (cnl_cg_read_file(w->pid_path, buf, sizeof(buf)) > 0 &&
	    cnl_cg_parse_int(buf, &pid) == 0 && pid > 0 && pid <= INT_MAX)
		w->pid = (pid_t)pid;
	/* Not our child: the pid is the workload's supervisor only while
	 * that process is in the workload's cgroup.  Checked after the
	 * pidfd is open, so that a reuse after the check cannot fool it. */
	if (w->pid > 0 && (w->pidfd = open_pidfd(w->pid)) >= 0 &&
	    !in_cgroup(l, id, w->pid))
		close_fd(&w->pidfd);
	*ret = w;
	return 0;
}

int cnl_launcher_procs(struct cnl_launcher *l, const char *id, pid_t *pids,
                       int max)
{
	if (!valid_name(id))
		return -EINVAL;
	return cnl_cg_pids(&l->cg, id, pids, max);
}

pid_t cnl_launcher_spawn_in(struct cnl_launcher *l, const char *id,
                            const char *const *argv, int in, int out, int err)
{
	char procs[CNL_CG_MAXDIRS][CNL_CG_FILE_MAX];
	sigset_t all, old;
	int n;
	pid_t pid;

	if (!valid_name(id) || !argv || !argv[0] || !cnl_cg_exists(&l->cg, id))
		return -EINVAL;
	n = cnl_cg_procs_paths(&l->cg, id, procs);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid = fork();
	if (pid == 0) {
		struct sigaction dfl = {.sa_handler = SIG_DFL};
		sigset_t none;

		/* Only what is safe after fork in a threaded process. */
		for (int i = 0; i < n; i++) {
			int fd = open(procs[i], O_WRONLY | O_CLOEXEC);

			if (fd < 0 || write(fd, "0", 1) != 1)
				_exit(126);
			close(fd);
		}
		if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
			_exit(126);
		(void)sigaction(SIGPIPE, &dfl, NULL);
		(void)sigaction(SIGCHLD, &dfl, NULL);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	n = pid < 0 ? -errno : 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return pid < 0 ? n : pid;
}

int cnl_launcher_list(struct cnl_launcher *l, char ids[][64], int max)
{
	return cnl_cg_list(&l->cg, ids, max);
}
