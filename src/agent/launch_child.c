/*
 * launch_child.c - the workload's supervisor (launch-child.h): the
 * command's fork, its stdio, user and working directory, the lease
 * watchdog and the exit record.  Linked into the launcher and into the
 * static cnlab-init; between fork and execve, system calls only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "agent/launch-child.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

void cnl_child_fail(int fd, int step)
{
	struct cnl_child_err e = {step, errno};

	if (write(fd, &e, sizeof(e)) < 0) {
		/* nothing more to do: the parent sees EOF and a dead child */
	}
	_exit(127);
}

void cnl_child_detach_fds(const struct cnl_child_ctx *c)
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
static void write_record(const struct cnl_child_ctx *c, int status)
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

static void __attribute__((noreturn)) run_command(const struct cnl_child_ctx *c)
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
		cnl_child_fail(c->errpipe, CNL_STEP_STDIO);

	if (c->gid >= 0 || c->uid >= 0) {
		gid_t g = (gid_t)c->gid;
		if (syscall(SYS_setgroups, c->gid >= 0 ? 1 : 0,
		            c->gid >= 0 ? &g : NULL) < 0)
			cnl_child_fail(c->errpipe, CNL_STEP_SETGROUPS);
	}
	if (c->gid >= 0 && syscall(SYS_setresgid, c->gid, c->gid, c->gid) < 0)
		cnl_child_fail(c->errpipe, CNL_STEP_SETGID);
	if (c->uid >= 0 && syscall(SYS_setresuid, c->uid, c->uid, c->uid) < 0)
		cnl_child_fail(c->errpipe, CNL_STEP_SETUID);
	if (chdir(c->cwd) < 0)
		cnl_child_fail(c->errpipe, CNL_STEP_CHDIR);
	/* Everything else the agent had open closes at execve. */
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		for (int i = 3; i < 4096; i++)
			if (i != c->errpipe)
				(void)fcntl(i, F_SETFD, FD_CLOEXEC);
	execve(c->exe, (char *const *)c->argv, (char *const *)c->env);
	cnl_child_fail(c->errpipe, CNL_STEP_EXEC);
}

/* Milliseconds until the lease file is lease_ms old; the full lease when
 * it cannot be read (a missing file is no reason to kill). */
static int64_t lease_left_ms(const struct cnl_child_ctx *c)
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
static void kill_others(const struct cnl_child_ctx *c)
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

void cnl_child_supervise(const struct cnl_child_ctx *c, bool subreaper)
{
	sigset_t chld;
	pid_t w, r;
	int st = 0;

	if (subreaper)
		(void)prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	w = fork();
	if (w < 0)
		cnl_child_fail(c->errpipe, CNL_STEP_FORK);
	if (w == 0)
		run_command(c);
	cnl_child_detach_fds(c);
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

void cnl_child_run(const struct cnl_child_ctx *c)
{
	if (c->pid_ns) {
		pid_t p = fork();
		int st = 0;

		if (p < 0)
			cnl_child_fail(c->errpipe, CNL_STEP_FORK);
		if (p == 0) {
			/* pid 1 of the new namespace: a /proc that shows it. */
			if (c->mount_ns &&
			    mount("proc", "/proc", "proc",
			          MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
				cnl_child_fail(c->errpipe, CNL_STEP_MOUNT_PROC);
			cnl_child_supervise(c, false);
		}
		cnl_child_detach_fds(c);
		while (waitpid(p, &st, 0) < 0 && errno == EINTR)
			;
		_exit(WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st));
	}
	cnl_child_supervise(c, true);
}
