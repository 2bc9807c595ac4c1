/*
 * launch.c - the workload launcher: validation before any side effect, the
 * fork into supervisor / init / command (see the process tree in launch.h),
 * exit records, poll, kill, usage and adoption.
 *
 * Everything the children need (paths, argv, env, fds) is prepared before
 * fork(); between fork and execve the children make system calls only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* The steps of the children that can fail, reported over the error pipe. */
enum child_step {
	STEP_JOIN,
	STEP_SETSID,
	STEP_UNSHARE,
	STEP_MOUNT_PRIVATE,
	STEP_HIDE_MOUNT,
	STEP_BIND,
	STEP_FORK,
	STEP_MOUNT_PROC,
	STEP_STDIO,
	STEP_SETGROUPS,
	STEP_SETGID,
	STEP_SETUID,
	STEP_CHDIR,
	STEP_EXEC,
};

static const char *const step_names[] = {
    [STEP_JOIN] = "join cgroup",
    [STEP_SETSID] = "setsid",
    [STEP_UNSHARE] = "unshare namespaces",
    [STEP_MOUNT_PRIVATE] = "make mounts private",
    [STEP_HIDE_MOUNT] = "detach the hidden mount",
    [STEP_BIND] = "bind the work folder",
    [STEP_FORK] = "fork",
    [STEP_MOUNT_PROC] = "mount /proc",
    [STEP_STDIO] = "set up stdio",
    [STEP_SETGROUPS] = "setgroups",
    [STEP_SETGID] = "setgid",
    [STEP_SETUID] = "setuid",
    [STEP_CHDIR] = "chdir",
    [STEP_EXEC] = "exec",
};

struct child_err {
	int step;
	int err;
};

/* What the children use; filled before fork. */
struct child_ctx {
	char procs[CNL_CG_MAXDIRS][CNL_CG_FILE_MAX];
	int nprocs;
	const char *exe;
	const char *const *argv;
	const char *const *env;
	const char *cwd;
	const char *exit_path;
	char exit_tmp[CNL_CG_PATH_MAX + 80];
	int uid, gid;
	bool pid_ns, mount_ns;
	const char *lease_path;
	int64_t lease_ms;
	const char *hide_mount;
	const char *bind_src, *bind_dst;
	const char *detach_under, *keep;
	int out_fd, err_fd; /* child side */
	int errpipe;        /* write end, close-on-exec */
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

/* ---- the children: system calls only from here to execve ---- */

static void __attribute__((noreturn)) child_fail(int fd, int step)
{
	struct child_err e = {step, errno};

	if (write(fd, &e, sizeof(e)) < 0) {
		/* nothing more to do: the parent sees EOF and a dead child */
	}
	_exit(127);
}

/* Drop every inherited descriptor; stdin and stdout go to /dev/null,
 * stderr to the command's (for the lease's last word). */
static void detach_fds(const struct child_ctx *c)
{
	int fd = open("/dev/null", O_RDWR);

	if (fd >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
	}
	if (c->err_fd >= 0)
		dup2(c->err_fd, 2);
	if (syscall(SYS_close_range, 3U, ~0U, 0U) < 0)
		for (int i = 3; i < 4096; i++)
			close(i);
}

static size_t fmt_uint(char *buf, unsigned v)
{
	char tmp[16];
	size_t n = 0, len = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		buf[len++] = tmp[--n];
	return len;
}

/* "exited <code>\n" or "signaled <sig>\n" to exit_path, atomically. */
static void write_record(const struct child_ctx *c, int status)
{
	char buf[32];
	size_t len;
	int fd;

	if (WIFSIGNALED(status)) {
		memcpy(buf, "signaled ", 9);
		len = 9 + fmt_uint(buf + 9, (unsigned)WTERMSIG(status));
	} else {
		memcpy(buf, "exited ", 7);
		len = 7 + fmt_uint(buf + 7, (unsigned)WEXITSTATUS(status));
	}
	buf[len++] = '\n';
	fd = open(c->exit_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, buf, len) == (ssize_t)len) {
		(void)fsync(fd);
		close(fd);
		(void)rename(c->exit_tmp, c->exit_path);
		return;
	}
	close(fd);
	(void)unlink(c->exit_tmp);
}

static void __attribute__((noreturn)) run_command(const struct child_ctx *c)
{
	struct sigaction sa;
	sigset_t none;
	int in, o, e;

	/* Ignored signals survive execve: give the command defaults. */
	for (int sig = 1; sig < NSIG; sig++) {
		if (sigaction(sig, NULL, &sa) == 0 &&
		    sa.sa_handler == SIG_IGN) {
			sa.sa_handler = SIG_DFL;
			(void)sigaction(sig, &sa, NULL);
		}
	}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	/* stdin: an empty pipe, not /dev/null: a container runtime may
	 * chown its stdio to the container's user (crun 1.8 does), and the
	 * node's /dev/null must stay root's. */
	{
		int p[2];

		in = pipe2(p, O_CLOEXEC) < 0 ? -1 : p[0];
		if (in >= 0)
			close(p[1]);
	}
	o = fcntl(c->out_fd, F_DUPFD_CLOEXEC, 3);
	e = fcntl(c->err_fd, F_DUPFD_CLOEXEC, 3);
	if (in < 0 || o < 0 || e < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 ||
	    dup2(e, 2) < 0)
		child_fail(c->errpipe, STEP_STDIO);

	if (c->gid >= 0 || c->uid >= 0) {
		gid_t g = (gid_t)c->gid;
		if (syscall(SYS_setgroups, c->gid >= 0 ? 1 : 0,
		            c->gid >= 0 ? &g : NULL) < 0)
			child_fail(c->errpipe, STEP_SETGROUPS);
	}
	if (c->gid >= 0 && syscall(SYS_setresgid, c->gid, c->gid, c->gid) < 0)
		child_fail(c->errpipe, STEP_SETGID);
	if (c->uid >= 0 && syscall(SYS_setresuid, c->uid, c->uid, c->uid) < 0)
		child_fail(c->errpipe, STEP_SETUID);
	if (chdir(c->cwd) < 0)
		child_fail(c->errpipe, STEP_CHDIR);
	/* Everything else the agent had open closes at execve. */
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		for (int i = 3; i < 4096; i++)
			if (i != c->errpipe)
				(void)fcntl(i, F_SETFD, FD_CLOEXEC);
	execve(c->exe, (char *const *)c->argv, (char *const *)c->env);
	child_fail(c->errpipe, STEP_EXEC);
}

/* Milliseconds until the lease file is lease_ms old; the full lease when
 * it cannot be read (a missing file is no reason to kill). */
static int64_t lease_left_ms(const struct child_ctx *c)
{
	struct timespec now;
	struct stat st;

	if (stat(c->lease_path, &st) < 0 ||
	    clock_gettime(CLOCK_REALTIME, &now) < 0)
		return c->lease_ms;
	return c->lease_ms - ((int64_t)(now.tv_sec - st.st_mtim.tv_sec) * 1000 +
	                      (now.tv_nsec - st.st_mtim.tv_nsec) / 1000000);
}

/* SIGKILL every other process of the workload: all of a PID namespace we
 * are init of, else each pid in the cgroup until none but us is left. */
static void kill_others(const struct child_ctx *c)
{
	pid_t self = getpid();

	if (self == 1) {
		(void)kill(-1, SIGKILL);
		return;
	}
	for (int round = 0; round < 100; round++) {
		bool others = false;

		for (int i = 0; i < c->nprocs; i++) {
			char buf[4096];
			int fd = open(c->procs[i], O_RDONLY | O_CLOEXEC);
			ssize_t n =
			    fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
			long pid = 0;

			if (fd >= 0)
				close(fd);
			for (ssize_t k = 0; k < n; k++) {
				if (buf[k] >= '0' && buf[k] <= '9') {
					pid = pid * 10 + (buf[k] - '0');
					continue;
				}
				if (pid > 0 && pid != self) {
					(void)kill((pid_t)pid, SIGKILL);
					others = true;
				}
				pid = 0;
			}
		}
		if (!others)
			return;
		/* Reap what died, so the next read lists only the living. */
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		(void)sched_yield();
	}
}

static void say(const char *s)
{
	if (write(2, s, strlen(s)) < 0) {
		/* the record still says how it ended */
	}
}

/* Fork the command, reap everything, keep the lease, record the command's
 * end, exit. */
static void __attribute__((noreturn))
supervise(const struct child_ctx *c, bool subreaper)
{
	sigset_t chld;
	pid_t w, r;
	int st = 0;

	if (subreaper)
		(void)prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	w = fork();
	if (w < 0)
		child_fail(c->errpipe, STEP_FORK);
	if (w == 0)
		run_command(c);
	detach_fds(c);
	/* SIGCHLD is blocked (every signal is, from the fork): wait for it
	 * with a deadline at the lease's end instead of blocking in wait. */
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	for (;;) {
		int s;

		r = waitpid(-1, &s, WNOHANG);
		if (r == w) {
			st = s;
			break;
		}
		if (r > 0)
			continue;
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			_exit(127);
		if (c->lease_path && c->lease_ms > 0) {
			int64_t left = lease_left_ms(c);
			struct timespec ts;

			if (left <= 0) {
				say("cnlab: this node lost the control plane "
				    "for longer than its lease; the workload "
				    "is stopped\n");
				kill_others(c);
				while (waitpid(w, NULL, 0) < 0 &&
				       errno == EINTR)
					;
				st = SIGKILL; /* as a wait status: killed */
				break;
			}
			ts.tv_sec = (time_t)(left / 1000);
			ts.tv_nsec = (long)(left % 1000) * 1000000 + 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			(void)sigtimedwait(&chld, NULL, &ts);
		} else {
			(void)sigwaitinfo(&chld, NULL);
		}
	}
	write_record(c, st);
	_exit(WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st));
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

static void __attribute__((noreturn)) run_s0(const struct child_ctx *c)
{
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	int flags = 0;

	/* An agent that ignores SIGCHLD would make waitpid lose statuses. */
	(void)sigaction(SIGCHLD, &dfl, NULL);
	if (setsid() < 0)
		child_fail(c->errpipe, STEP_SETSID);
	for (int i = 0; i < c->nprocs; i++) {
		int fd = open(c->procs[i], O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, "0", 1) != 1)
			child_fail(c->errpipe, STEP_JOIN);
		close(fd);
	}
	if (c->pid_ns)
		flags |= CLONE_NEWPID;
	if (c->mount_ns)
		flags |= CLONE_NEWNS;
	if (flags && unshare(flags) < 0)
		child_fail(c->errpipe, STEP_UNSHARE);
	if (c->mount_ns &&
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		child_fail(c->errpipe, STEP_MOUNT_PRIVATE);
	if (c->mount_ns && c->hide_mount &&
	    umount2(c->hide_mount, MNT_DETACH) < 0 && errno != EINVAL &&
	    errno != ENOENT)
		child_fail(c->errpipe, STEP_HIDE_MOUNT);
	if (c->mount_ns && c->detach_under)
		detach_below(c->detach_under, c->keep);
	if (c->mount_ns && c->bind_src && c->bind_dst &&
	    mount(c->bind_src, c->bind_dst, NULL, MS_BIND | MS_REC, NULL) < 0)
		child_fail(c->errpipe, STEP_BIND);
	if (c->pid_ns) {
		pid_t p = fork();
		int st = 0;

		if (p < 0)
			child_fail(c->errpipe, STEP_FORK);
		if (p == 0) {
			/* pid 1 of the new namespace: a /proc that shows it. */
			if (c->mount_ns &&
			    mount("proc", "/proc", "proc",
			          MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
				child_fail(c->errpipe, STEP_MOUNT_PROC);
			supervise(c, false);
		}
		detach_fds(c);
		while (waitpid(p, &st, 0) < 0 && errno == EINTR)
			;
		_exit(WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st));
	}
	supervise(c, true);
}

/* ---- the agent side ---- */

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

int cnl_launch(struct cnl_launcher *l, const struct cnl_launch_spec *s,
               struct cnl_workload **ret, char *err, size_t errlen)
{
	struct child_ctx c;
	struct cnl_workload *w;
	char exe[PATH_MAX];
	int outp[2] = {-1, -1}, errp[2] = {-1, -1}, ep[2];
	struct child_err ce = {0, 0};
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
	if (resolve(s->argv[0], s->env, s->cwd, exe, sizeof(exe)) < 0)
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

	/* The children start with every signal blocked: no agent handler
	 * runs in them; the command unblocks before execve. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid = fork();
	if (pid == 0)
		run_s0(&c);
	r = -errno;
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
		const char *step = ce.step >= 0 && ce.step <= STEP_EXEC
		                       ? step_names[ce.step]
		                       : "start";
		r = ce.err > 0 ? -ce.err : -EIO;
		if (ce.step == STEP_EXEC)
			errf(err, errlen, r, "exec %s: %s", exe,
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
