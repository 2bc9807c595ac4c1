/*
 * test_launch.c - the workload launcher against the real kernel: real
 * processes in real cgroups (v1 or v2, whichever this host has), no mocks.
 * Needs root; skips with a message where cgroups cannot be used.
 *
 * The binary doubles as its own workloads: run with "hog", "busy" or
 * "alloc <MB>" it becomes a memory hog, a busy loop or a resident
 * allocation (see main).  The cgroup v2 file formats are tested as pure
 * functions, and the v2 process paths (cgroup.kill, cgroup.procs) on the
 * hybrid unified mount where there is one.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "agent/cgroup.h"
#include "agent/launch.h"

#ifndef F_GET_SEALS
#define F_GET_SEALS (1024 + 10)
#endif
#define ALL_SEALS 15 /* F_SEAL_SEAL | SHRINK | GROW | WRITE */

static char self_exe[PATH_MAX];
/* The second run of every test: each workload's supervisor is cnlab-init
 * --supervise (launch.h), not a fork of this process. */
static const char *supervisor;

static const char *const base_env[] = {"PATH=/usr/local/bin:/usr/bin:/bin",
                                       "LC_ALL=C", NULL};

struct fix {
	char state[64];
	char name[64];
	struct cnl_launcher *l;
};

static int fix_setup(void **state)
{
	static int n;
	struct fix *f = calloc(1, sizeof(*f));
	char err[256] = "";
	int r;

	assert_non_null(f);
	snprintf(f->state, sizeof(f->state), "/tmp/cnl-launch-XXXXXX");
	assert_non_null(mkdtemp(f->state));
	snprintf(f->name, sizeof(f->name), "test-%d-%d", (int)getpid(), n++);
	*state = f;
	if (geteuid() != 0) {
		printf("skip: the launcher tests need root\n");
		skip();
	}
	r = cnl_launcher_new(f->name, f->state, &f->l, err, sizeof(err));
	if (r == -EOPNOTSUPP || r == -EROFS || r == -EACCES) {
		printf("skip: cgroups unavailable: %s\n", err);
		skip();
	}
	assert_int_equal(r, 0);
	return 0;
}

static int fix_teardown(void **state)
{
	struct fix *f = *state;
	char ids[16][64];
	int n;

	if (f->l) {
		/* Whatever a failed test left running. */
		n = cnl_launcher_list(f->l, ids, 16);
		for (int i = 0; i < n && i < 16; i++) {
			struct cnl_workload *w;
			struct cnl_exit e;
			if (cnl_launcher_adopt(f->l, ids[i], &w) == 0) {
				cnl_workload_kill(w);
				cnl_workload_poll(w, &e);
				cnl_workload_free(w);
			}
		}
		cnl_launcher_free(f->l);
	}
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	/* Empty once every workload was freed after its exit. */
	rmdir(f->state);
	free(f);
	return 0;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

static struct cnl_launch_spec spec(const char *id, const char *const *argv,
                                   const char *cwd)
{
	struct cnl_launch_spec s = {
	    .id = id,
	    .argv = argv,
	    .env = base_env,
	    .cwd = cwd,
	    .uid = -1,
	    .gid = -1,
	    .stdout_fd = -1,
	    .stderr_fd = -1,
	    .supervisor = supervisor,
	};
	return s;
}

/* Read a non-blocking fd until EOF (generous bound against hangs). */
static size_t read_all(int fd, char *buf, size_t n)
{
	size_t len = 0;

	for (int i = 0; i < 6000; i++) {
		struct pollfd p = {fd, POLLIN, 0};
		ssize_t r;

		poll(&p, 1, 10);
		r = read(fd, buf + len, n - 1 - len);
		if (r == 0)
			break;
		if (r > 0)
			len += (size_t)r;
		if (len + 1 >= n)
			break;
	}
	buf[len] = '\0';
	return len;
}

/* Read one line from a non-blocking fd. */
static void read_line(int fd, char *buf, size_t n)
{
	size_t len = 0;

	for (int i = 0; i < 6000 && len + 1 < n; i++) {
		struct pollfd p = {fd, POLLIN, 0};
		char c;

		poll(&p, 1, 10);
		if (read(fd, &c, 1) == 1) {
			if (c == '\n')
				break;
			buf[len++] = c;
		}
	}
	buf[len] = '\0';
}

static void wait_exit(struct cnl_workload *w, struct cnl_exit *e)
{
	for (int i = 0; i < 6000; i++) {
		assert_int_equal(cnl_workload_poll(w, e), 0);
		if (e->exited)
			return;
		sleep_ms(10);
	}
	fail_msg("workload %s did not exit", cnl_workload_id(w));
}

static bool process_gone(pid_t pid)
{
	char path[64], buf[512];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return true;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	/* A zombie no longer runs; its parent may not have reaped yet. */
	char *p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'Z';
}

static void test_env_cwd_pipes_exit(void **state)
{
	struct fix *f = *state;
	const char *argv[] = {"sh", "-c",
	                      "echo out:$FOO; pwd; echo err >&2; exit 3", NULL};
	const char *env[] = {"FOO=bar baz", "PATH=/usr/bin:/bin", NULL};
	struct cnl_launch_spec s = spec("env1", argv, f->state);
	struct cnl_workload *w;
	struct cnl_exit e;
	char out[256], errbuf[256], expect[256], err[256];

	s.env = env;
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	assert_true(cnl_workload_pid(w) > 0);
	read_all(cnl_workload_stdout(w), out, sizeof(out));
	read_all(cnl_workload_stderr(w), errbuf, sizeof(errbuf));
	snprintf(expect, sizeof(expect), "out:bar baz\n%s\n", f->state);
	assert_string_equal(out, expect);
	assert_string_equal(errbuf, "err\n");
	wait_exit(w, &e);
	assert_true(e.exited);
	assert_int_equal(e.code, 3);
	assert_int_equal(e.signal, 0);
	assert_false(e.oom_killed);
	cnl_workload_free(w);

	/* A death by signal is reported as the signal. */
	const char *argv2[] = {"sh", "-c", "kill -USR1 $$", NULL};
	s = spec("sig1", argv2, "/");
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	wait_exit(w, &e);
	assert_int_equal(e.signal, SIGUSR1);
	assert_int_equal(e.code, -1);
	assert_false(e.oom_killed);
	cnl_workload_free(w);
	assert_int_equal(cnl_launcher_list(f->l, NULL, 0), 0);
}

/* With a supervisor named, the workload's supervisor is that program
 * (no copy of the launching process lives on beside the work), in the
 * workload's cgroup, and the exit record is its. */
static void test_supervisor_exec(void **state)
{
	struct fix *f = *state;
	const char *argv[] = {"sleep", "1000", NULL};
	struct cnl_launch_spec s = spec("sup1", argv, "/");
	char exe[PATH_MAX], link[64], want[PATH_MAX], err[256];
	struct cnl_workload *w;
	struct cnl_exit e;
	pid_t pids[16];
	bool listed = false;
	ssize_t n;
	int k;

	if (!supervisor)
		skip();
	assert_non_null(realpath(supervisor, want));
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	snprintf(link, sizeof(link), "/proc/%d/exe", (int)cnl_workload_pid(w));
	n = readlink(link, exe, sizeof(exe) - 1);
	assert_true(n > 0);
	exe[n] = '\0';
	assert_string_equal(exe, want);
	k = cnl_workload_procs(w, pids, 16);
	for (int i = 0; i < k; i++)
		listed |= pids[i] == cnl_workload_pid(w);
	assert_true(listed);
	/* Supervisors block every signal: the command alone gets it. */
	assert_int_equal(cnl_workload_signal(w, SIGTERM), 0);
	wait_exit(w, &e);
	assert_true(e.exited);
	assert_int_equal(e.signal, SIGTERM);
	cnl_workload_free(w);
}

static void test_not_found(void **state)
{
	struct fix *f = *state;
	const char *argv[] = {"no-such-command-cnl", "x", NULL};
	const char *argv2[] = {"/bin/true", NULL};
	struct cnl_launch_spec s = spec("nf1", argv, "/");
	struct cnl_workload *w = NULL;
	char err[256] = "", dir[CNL_CG_PATH_MAX];
	struct stat st;

	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)),
	                 -CNL_ENOTFOUND);
	assert_null(w);
	assert_non_null(strstr(err, "command not found"));
	assert_non_null(strstr(err, "no-such-command-cnl"));
	assert_int_equal(
	    cnl_launcher_cgroup_dir(f->l, "memory", "nf1", dir, sizeof(dir)),
	    0);
	assert_int_equal(stat(dir, &st), -1);
	assert_int_equal(errno, ENOENT);
	assert_int_equal(cnl_launcher_list(f->l, NULL, 0), 0);

	/* A bad cwd and a bad id are refused the same way. */
	s = spec("nf2", argv2, "/nonexistent-dir-cnl");
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "/nonexistent-dir-cnl"));
	s = spec("../x", argv2, "/");
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), -EINVAL);
	/* A failure after the fork: nobody cannot enter the 0700 dir. */
	s = spec("nf3", argv2, f->state);
	s.uid = 65534;
	s.gid = 65534;
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), -EACCES);
	assert_non_null(strstr(err, "chdir"));
	assert_int_equal(cnl_launcher_list(f->l, NULL, 0), 0);
	assert_null(w);
}

static void test_oom(void **state)
{
	struct fix *f = *state;
	const char *argv[] = {self_exe, "hog", NULL};
	struct cnl_launch_spec s = spec("oom1", argv, "/");
	struct cnl_workload *w;
	struct cnl_exit e;
	char err[256];

	s.mem_bytes = 64 << 20;
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	wait_exit(w, &e);
	assert_true(e.oom_killed);
	assert_int_equal(e.signal, SIGKILL);
	cnl_workload_free(w);

	/* Without a limit the same cgroup would not have an OOM kill. */
	const char *argv2[] = {"true", NULL};
	s = spec("oom2", argv2, "/");
	s.mem_bytes = 64 << 20;
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	wait_exit(w, &e);
	assert_false(e.oom_killed);
	assert_int_equal(e.code, 0);
	cnl_workload_free(w);
}

static int64_t read_num(const char *dir, const char *file)
{
	char path[CNL_CG_PATH_MAX + 64], buf[128];
	int64_t v = -1;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	assert_true(cnl_cg_read_file(path, buf, sizeof(buf)) > 0);
	assert_int_equal(cnl_cg_parse_int(buf, &v), 0);
	return v;
}

static void test_limits_written(void **state)
{
	struct fix *f = *state;
	const char *argv[] = {"sleep", "1000", NULL};
	struct cnl_launch_spec s = spec("lim1", argv, "/");
	struct cnl_workload *w;
	struct cnl_exit e;
	char err[256], dir[CNL_CG_PATH_MAX], path[CNL_CG_PATH_MAX + 32];
	char buf[128];

	s.cpu_milli = 1500;
	s.mem_bytes = 256 << 20;
	s.pids_max = 50;
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	assert_int_equal(
	    cnl_launcher_cgroup_dir(f->l, "cpu", "lim1", dir, sizeof(dir)), 0);
	if (cnl_launcher_cgroup_version(f->l) == 2) {
		snprintf(path, sizeof(path), "%s/cpu.max", dir);
		assert_true(cnl_cg_read_file(path, buf, sizeof(buf)) > 0);
		assert_string_equal(buf, "150000 100000\n");
		assert_int_equal(read_num(dir, "memory.max"), 256 << 20);
		assert_int_equal(read_num(dir, "pids.max"), 50);
	} else {
		assert_int_equal(read_num(dir, "cpu.cfs_quota_us"), 150000);
		assert_int_equal(read_num(dir, "cpu.cfs_period_us"), 100000);
		assert_int_equal(cnl_launcher_cgroup_dir(f->l, "memory", "lim1",
		                                         dir, sizeof(dir)),
		                 0);
		assert_int_equal(read_num(dir, "memory.limit_in_bytes"),
		                 256 << 20);
		assert_int_equal(cnl_launcher_cgroup_dir(f->l, "pids", "lim1",
		                                         dir, sizeof(dir)),
		                 0);
		assert_int_equal(read_num(dir, "pids.max"), 50);
	}
	/* The id is taken while it exists. */
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), -EEXIST);
	assert_int_equal(cnl_workload_kill(w), 0);
	wait_exit(w, &e);
	assert_int_equal(e.signal, SIGKILL);
	cnl_workload_free(w);
}

/* An empty cgroup left by an earlier agent (it died between making it and
 * starting the workload) does not keep the same id from starting again;
 * one with a process in it does (test_limits_written). */
static void test_stale_empty_cgroup(void **state)
{
	struct fix *f = *state;
	const char *argv[] = {"true", NULL};
	struct cnl_launch_spec s = spec("stale1", argv, "/");
	struct cnl_workload *w;
	struct cnl_exit e;
	char err[256];

	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	wait_exit(w, &e);
	assert_int_equal(e.code, 0);
	cnl_workload_release(w); /* the cgroup stays, empty */
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	wait_exit(w, &e);
	assert_int_equal(e.code, 0);
	cnl_workload_free(w);
}

static void test_kill_daemon(void **state)
{
	struct fix *f = *state;
	/* Ignores SIGTERM (inherited by the daemon), double-forks a daemon
	 * and prints its pid, then its own. */
	const char *argv[] = {
	    "sh", "-c",
	    "trap '' TERM; (sleep 1000 </dev/null >/dev/null 2>&1 & echo $!);"
	    " echo $$; while :; do sleep 1; done",
	    NULL};
	struct cnl_launch_spec s = spec("kill1", argv, "/");
	struct cnl_workload *w;
	struct cnl_exit e;
	char err[256], line[64];
	pid_t pids[64], daemon, shell, sup;
	int n;

	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	sup = cnl_workload_pid(w);
	read_line(cnl_workload_stdout(w), line, sizeof(line));
	daemon = (pid_t)strtol(line, NULL, 10);
	read_line(cnl_workload_stdout(w), line, sizeof(line));
	shell = (pid_t)strtol(line, NULL, 10);
	assert_true(daemon > 0 && shell > 0);

	assert_int_equal(cnl_workload_signal(w, SIGTERM), 0);
	sleep_ms(300);
	assert_false(process_gone(daemon));
	assert_false(process_gone(shell));
	assert_false(process_gone(sup));
	assert_int_equal(cnl_workload_poll(w, &e), 0);
	assert_false(e.exited);
	n = cnl_workload_procs(w, pids, 64);
	assert_true(n >= 3);

	assert_int_equal(cnl_workload_kill(w), 0);
	assert_int_equal(cnl_workload_procs(w, NULL, 0), 0);
	/* Every process we learned of, not just the ones it printed. */
	pid_t known[64 + 3];
	int nknown = n < 64 ? n : 64;
	memcpy(known, pids, (size_t)nknown * sizeof(pid_t));
	known[nknown++] = daemon;
	known[nknown++] = shell;
	known[nknown++] = sup;
	for (int k = 0; k < nknown; k++) {
		for (int i = 0; i < 1000 && !process_gone(known[k]); i++)
			sleep_ms(10);
		assert_true(process_gone(known[k]));
	}
	wait_exit(w, &e);
	assert_int_equal(e.signal, SIGKILL);
	cnl_workload_free(w);
	assert_int_equal(cnl_launcher_list(f->l, NULL, 0), 0);
}

/* The lease: kept fresh, the workload runs; stale, the launcher's own
 * supervisor kills every process of it (a daemon too), says why on its
 * stderr and records SIGKILL; with and without a PID namespace. */
static void test_lease(void **state)
{
	struct fix *f = *state;
	const char *argv[] = {
	    "sh", "-c",
	    "trap '' TERM; (sleep 1000 </dev/null >/dev/null 2>&1 & echo $!);"
	    " while :; do sleep 0.1; done",
	    NULL};

	for (int ns = 0; ns < 2; ns++) {
		char id[16], lease[96], err[256], line[256], why[256];
		struct cnl_launch_spec s;
		struct cnl_workload *w;
		struct cnl_exit e;
		pid_t daemon;
		int fd;

		snprintf(id, sizeof(id), "lease%d", ns);
		snprintf(lease, sizeof(lease), "%s/lease", f->state);
		fd = open(lease, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		assert_true(fd >= 0);
		close(fd);
		s = spec(id, argv, "/");
		s.lease_path = lease;
		s.lease_ms = 600;
		s.pid_ns = ns;
		s.mount_ns = ns;
		assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
		read_line(cnl_workload_stdout(w), line, sizeof(line));
		/* The daemon by its command line, as the node sees it (in a
		 * PID namespace the printed pid is the namespace's). */
		daemon = 0;
		/* (Until its exec shows.) */
		for (int t = 0; t < 300 && !daemon; t++, sleep_ms(10)) {
			pid_t pids[32];
			int n = cnl_workload_procs(w, pids, 32);

			for (int i = 0; i < n && i < 32 && !daemon; i++) {
				char p[64], cmd[64] = "";
				ssize_t len;
				int cfd;

				snprintf(p, sizeof(p), "/proc/%d/cmdline",
				         (int)pids[i]);
				cfd = open(p, O_RDONLY);
				len = cfd < 0 ? -1
				              : read(cfd, cmd, sizeof(cmd) - 1);
				if (cfd >= 0)
					close(cfd);
				if (len == 11 &&
				    memcmp(cmd, "sleep\0001000", 10) == 0)
					daemon = pids[i];
			}
		}
		assert_true(daemon > 0);
		/* Renewed three times its length: still running. */
		for (int i = 0; i < 18; i++) {
			assert_int_equal(utimensat(AT_FDCWD, lease, NULL, 0),
			                 0);
			sleep_ms(100);
		}
		assert_int_equal(cnl_workload_poll(w, &e), 0);
		assert_false(e.exited);
		assert_false(process_gone(daemon));
		/* Not renewed: stopped, all of it. */
		wait_exit(w, &e);
		assert_int_equal(e.signal, SIGKILL);
		for (int i = 0; i < 500 && !process_gone(daemon); i++)
			sleep_ms(10);
		assert_true(process_gone(daemon));
		read_line(cnl_workload_stderr(w), why, sizeof(why));
		assert_non_null(strstr(why, "lost the control plane"));
		cnl_workload_free(w);
		unlink(lease);
	}
}

static void test_pid_ns(void **state)
{
	struct fix *f = *state;
	char script[128];
	const char *argv[] = {"sh", "-c", script, NULL};
	struct cnl_launch_spec s = spec("pidns1", argv, "/");
	struct cnl_workload *w;
	struct cnl_exit e;
	char err[256], out[4096];
	int count = 0;
	char *save = NULL;

	/* The test's own pid must not show in the new /proc. */
	snprintf(script, sizeof(script),
	         "echo $$; test -e /proc/%d && echo visible; ps -e -o pid=",
	         (int)getpid());
	s.pid_ns = true;
	s.mount_ns = true;
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	read_all(cnl_workload_stdout(w), out, sizeof(out));
	wait_exit(w, &e);
	assert_int_equal(e.code, 0);
	cnl_workload_free(w);

	assert_null(strstr(out, "visible"));
	/* Its own pid is 2 (under the init, pid 1); under ThreadSanitizer
	 * the runtime thread of an init forked from this (instrumented)
	 * process takes 2 in the namespace; cnlab-init is not instrumented. */
	char *tok = strtok_r(out, " \n", &save);
	assert_non_null(tok);
#ifdef CNL_TSAN
	assert_string_equal(tok, supervisor ? "2" : "3");
#else
	assert_string_equal(tok, "2");
#endif
	/* ps shows only its namespace: init, sh, ps. */
	while ((tok = strtok_r(NULL, " \n", &save)) != NULL) {
		long pid = strtol(tok, NULL, 10);
		assert_true(pid >= 1 && pid < 10);
		assert_int_not_equal(pid, getpid());
		count++;
	}
	assert_int_equal(count, 3);
	/* The host's /proc is untouched. */
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%d", (int)getpid());
	assert_int_equal(stat(path, &st), 0);
}

/* detach_under: the workload's namespace holds none of the mounts below
 * that folder but its own (keep), and a name with a space is read right
 * from mountinfo (\040); the node's mounts are untouched. */
static void test_detach_under(void **state)
{
	struct fix *f = *state;
	char top[64] = "/tmp/cnl-detach-XXXXXX", mine[128], other[128],
	     spaced[128], script[512], err[256], out[4096];
	const char *argv[] = {"sh", "-c", script, NULL};
	struct cnl_launch_spec s = spec("detach1", argv, "/");
	const char *const dirs[] = {mine, other, spaced};
	struct cnl_workload *w;
	struct cnl_exit e;

	assert_non_null(mkdtemp(top));
	snprintf(mine, sizeof(mine), "%s/mine", top);
	snprintf(other, sizeof(other), "%s/other", top);
	snprintf(spaced, sizeof(spaced), "%s/an other", top);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(mkdir(dirs[i], 0700), 0);
		assert_int_equal(
		    mount("cnl-test", dirs[i], "tmpfs", 0, "size=1m"), 0);
	}
	snprintf(script, sizeof(script),
	         "grep -c ' %s/mine ' /proc/self/mountinfo; "
	         "grep -c ' %s/other ' /proc/self/mountinfo; "
	         "grep -c ' %s/an\\\\040other ' /proc/self/mountinfo; "
	         "true",
	         top, top, top);
	s.mount_ns = true;
	s.detach_under = top;
	s.keep = mine;
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	read_all(cnl_workload_stdout(w), out, sizeof(out));
	wait_exit(w, &e);
	assert_int_equal(e.code, 0);
	cnl_workload_free(w);
	assert_string_equal(out, "1\n0\n0\n");
	/* On the node all three are still mounted. */
	for (size_t i = 0; i < 3; i++) {
		struct stat st, pst;

		assert_int_equal(stat(dirs[i], &st), 0);
		assert_int_equal(stat(top, &pst), 0);
		assert_int_not_equal(st.st_dev, pst.st_dev);
		assert_int_equal(umount2(dirs[i], MNT_DETACH), 0);
		rmdir(dirs[i]);
	}
	rmdir(top);
}

static void test_uid(void **state)
{
	struct fix *f = *state;
	const char *argv[] = {"sh", "-c", "id -u; id -g; id -G", NULL};
	struct cnl_launch_spec s = spec("uid1", argv, "/");
	struct cnl_workload *w;
	struct cnl_exit e;
	char err[256], out[256];

	s.uid = 65534;
	s.gid = 65534;
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	read_all(cnl_workload_stdout(w), out, sizeof(out));
	wait_exit(w, &e);
	assert_int_equal(e.code, 0);
	assert_string_equal(out, "65534\n65534\n65534\n");
	cnl_workload_free(w);
}

static void test_adopt(void **state)
{
	struct fix *f = *state;
	const char *argv[] = {"sleep", "1000", NULL};
	const char *argv2[] = {"sh", "-c", "sleep 0.3; exit 7", NULL};
	struct cnl_launch_spec s = spec("adopt1", argv, "/");
	struct cnl_workload *w, *w2;
	struct cnl_exit e;
	char err[256], ids[8][64];
	pid_t pid, pid2;
	int n;

	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	pid = cnl_workload_pid(w);
	s = spec("adopt2", argv2, "/");
	assert_int_equal(cnl_launch(f->l, &s, &w2, err, sizeof(err)), 0);
	pid2 = cnl_workload_pid(w2);
	/* The agent goes away without killing anything. */
	cnl_workload_free(w);
	cnl_workload_free(w2);
	cnl_launcher_free(f->l);
	f->l = NULL;
	assert_false(process_gone(pid));

	assert_int_equal(
	    cnl_launcher_new(f->name, f->state, &f->l, err, sizeof(err)), 0);
	n = cnl_launcher_list(f->l, ids, 8);
	assert_int_equal(n, 2);
	assert_true(
	    (strcmp(ids[0], "adopt1") == 0 && strcmp(ids[1], "adopt2") == 0) ||
	    (strcmp(ids[1], "adopt1") == 0 && strcmp(ids[0], "adopt2") == 0));
	assert_int_equal(cnl_launcher_adopt(f->l, "nope", &w), -CNL_ENOTFOUND);

	assert_int_equal(cnl_launcher_adopt(f->l, "adopt1", &w), 0);
	assert_int_equal(cnl_workload_pid(w), pid);
	assert_int_equal(cnl_workload_stdout(w), -1);
	assert_int_equal(cnl_workload_poll(w, &e), 0);
	assert_false(e.exited);
	assert_int_equal(cnl_workload_kill(w), 0);
	wait_exit(w, &e);
	assert_int_equal(e.signal, SIGKILL);
	cnl_workload_free(w);

	/* An adopted workload that ends by itself reports its real code
	 * (our test process is still its parent: reap the zombie). */
	assert_int_equal(cnl_launcher_adopt(f->l, "adopt2", &w2), 0);
	assert_int_equal(cnl_workload_pid(w2), pid2);
	wait_exit(w2, &e);
	assert_int_equal(e.code, 7);
	assert_int_equal(e.signal, 0);
	cnl_workload_free(w2);
	waitpid(pid2, NULL, 0);
	waitpid(pid, NULL, 0);
	assert_int_equal(cnl_launcher_list(f->l, ids, 8), 0);
	assert_int_equal(cnl_launcher_adopt(f->l, "adopt1", &w),
	                 -CNL_ENOTFOUND);
}

/* The end of a workload is an event: its pidfd polls readable once the
 * command has ended, not before; so for a workload adopted by a new
 * launcher (the agent restarted).  Waited on with poll, never a sleep. */
static void test_pidfd(void **state)
{
	struct fix *f = *state;
	const char *argv2[] = {"sleep", "1000", NULL};
	struct cnl_launch_spec s = spec("pidfd1", argv2, "/");
	struct cnl_workload *w;
	struct cnl_exit e;
	struct pollfd p;
	char err[256];
	pid_t pid;

	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	p = (struct pollfd){cnl_workload_pidfd(w), POLLIN, 0};
	assert_true(p.fd >= 0);
	assert_int_equal(poll(&p, 1, 200), 0); /* still running */
	assert_int_equal(cnl_workload_signal(w, SIGTERM), 0);
	assert_int_equal(poll(&p, 1, 60000), 1);
	assert_true(p.revents & POLLIN);
	assert_int_equal(cnl_workload_poll(w, &e), 0);
	assert_true(e.exited);
	assert_int_equal(e.signal, SIGTERM);
	cnl_workload_free(w);

	/* Adopted: a pidfd of the supervisor the old launcher started. */
	s = spec("pidfd2", argv2, "/");
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	pid = cnl_workload_pid(w);
	cnl_workload_release(w);
	assert_int_equal(cnl_launcher_adopt(f->l, "pidfd2", &w), 0);
	p = (struct pollfd){cnl_workload_pidfd(w), POLLIN, 0};
	assert_true(p.fd >= 0);
	assert_int_equal(poll(&p, 1, 200), 0);
	assert_int_equal(cnl_workload_kill(w), 0);
	assert_int_equal(poll(&p, 1, 60000), 1);
	waitpid(pid, NULL, 0); /* our child still: reap the zombie */
	wait_exit(w, &e);
	assert_int_equal(e.signal, SIGKILL);
	cnl_workload_free(w);

	/* A pid file naming a process outside the workload's cgroup (the
	 * supervisor gone, its pid reused) gives no pidfd. */
	s = spec("pidfd3", argv2, "/");
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	pid = cnl_workload_pid(w);
	cnl_workload_release(w);
	{
		char path[600];
		FILE *pf;

		snprintf(path, sizeof(path), "%s/pidfd3.pid", f->state);
		pf = fopen(path, "we");
		assert_non_null(pf);
		fprintf(pf, "%d\n", (int)getpid());
		fclose(pf);
	}
	assert_int_equal(cnl_launcher_adopt(f->l, "pidfd3", &w), 0);
	assert_int_equal(cnl_workload_pidfd(w), -1);
	assert_int_equal(cnl_workload_kill(w), 0);
	waitpid(pid, NULL, 0);
	wait_exit(w, &e);
	cnl_workload_free(w);
}

/* An agent that stops hands every workload to the next one, ended ones
 * included: an end not yet reported must still be there to adopt. */
static void test_release_keeps_end(void **state)
{
	struct fix *f = *state;
	const char *argv[] = {"sh", "-c", "exit 5", NULL};
	struct cnl_launch_spec s = spec("ended1", argv, "/");
	struct cnl_workload *w;
	struct cnl_exit e;
	char err[256], ids[8][64];

	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	wait_exit(w, &e); /* seen (and reaped), not yet reported */
	assert_int_equal(e.code, 5);
	cnl_workload_release(w);
	cnl_launcher_free(f->l);
	f->l = NULL;

	assert_int_equal(
	    cnl_launcher_new(f->name, f->state, &f->l, err, sizeof(err)), 0);
	assert_int_equal(cnl_launcher_list(f->l, ids, 8), 1);
	assert_string_equal(ids[0], "ended1");
	assert_int_equal(cnl_launcher_adopt(f->l, "ended1", &w), 0);
	assert_int_equal(cnl_workload_poll(w, &e), 0);
	assert_true(e.exited);
	assert_int_equal(e.code, 5);
	assert_int_equal(e.signal, 0);
	/* Reported now: free forgets it. */
	cnl_workload_free(w);
	assert_int_equal(cnl_launcher_list(f->l, ids, 8), 0);
	assert_int_equal(cnl_launcher_adopt(f->l, "ended1", &w),
	                 -CNL_ENOTFOUND);
}

static void test_usage(void **state)
{
	struct fix *f = *state;
	const char *argv[] = {self_exe, "busy", NULL};
	const char *argv2[] = {self_exe, "alloc", "48", NULL};
	struct cnl_launch_spec s = spec("use1", argv, "/");
	struct cnl_workload *w;
	struct cnl_usage u0, u = {0};
	struct cnl_exit e;
	char err[256], line[32];

	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	assert_int_equal(cnl_workload_usage(w, &u0), 0);
	for (int i = 0; i < 6000 && u.cpu_usec < u0.cpu_usec + 200000; i++) {
		sleep_ms(10);
		assert_int_equal(cnl_workload_usage(w, &u), 0);
	}
	assert_true(u.cpu_usec >= u0.cpu_usec + 200000);
	assert_int_equal(cnl_workload_kill(w), 0);
	wait_exit(w, &e);
	cnl_workload_free(w);

	s = spec("use2", argv2, "/");
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	/* It prints once its 48 MB are resident. */
	read_line(cnl_workload_stdout(w), line, sizeof(line));
	assert_string_equal(line, "ready");
	assert_int_equal(cnl_workload_usage(w, &u), 0);
	assert_true(u.mem_peak_bytes >= 48 << 20);
	assert_true(u.mem_current_bytes >= 48 << 20);
	assert_int_equal(cnl_workload_kill(w), 0);
	wait_exit(w, &e);
	cnl_workload_free(w);
}

/* cgroup v2 formats, as pure functions (this host may only have v1). */
static void test_v2_formats(void **state)
{
	static const char *const need[] = {"memory", "cpu", "pids", NULL};
	struct cnl_cg_mount m;
	char buf[64];
	int64_t v;

	(void)state;
	assert_int_equal(
	    cnl_cg_parse_keyed("populated 1\nfrozen 0\n", "populated", &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(cnl_cg_parse_keyed("low 0\nhigh 0\nmax 12\noom 3\n"
	                                    "oom_kill 2\noom_group_kill 0\n",
	                                    "oom_kill", &v),
	                 0);
	assert_int_equal(v, 2);
	assert_int_equal(cnl_cg_parse_keyed("usage_usec 123456\nuser_usec 1\n",
	                                    "usage_usec", &v),
	                 0);
	assert_int_equal(v, 123456);
	assert_int_equal(cnl_cg_parse_keyed("oom 3\n", "oom_kill", &v),
	                 -CNL_ENOTFOUND);
	assert_int_equal(cnl_cg_parse_keyed("oom_kill x\n", "oom_kill", &v),
	                 -CNL_EPARSE);
	assert_int_equal(cnl_cg_parse_int("max\n", &v), 0);
	assert_true(v == INT64_MAX);
	assert_int_equal(cnl_cg_parse_int("67108864\n", &v), 0);
	assert_int_equal(v, 67108864);

	assert_int_equal(cnl_cg_format_cpu_max(1500, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "150000 100000");
	assert_int_equal(cnl_cg_format_cpu_max(0, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "max 100000");
	assert_int_equal(cnl_cg_format_cpu_max(-1, buf, sizeof(buf)),
	                 -CNL_ESIZE);

	assert_true(
	    cnl_cg_has_controllers("cpuset cpu io memory pids\n", need));
	assert_false(cnl_cg_has_controllers("cpuset cpu io memory\n", need));
	assert_false(cnl_cg_has_controllers("cpuacct memory pids\n", need));

	assert_int_equal(
	    cnl_cg_parse_mountinfo_line("29 23 0:26 / /sys/fs/cgroup "
	                                "rw,nosuid shared:4 - cgroup2 cgroup2 "
	                                "rw,nsdelegate,memory_recursiveprot\n",
	                                &m),
	    1);
	assert_int_equal(m.version, 2);
	assert_string_equal(m.path, "/sys/fs/cgroup");
	assert_true(m.root);
	assert_int_equal(cnl_cg_parse_mountinfo_line(
	                     "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct"
	                     " rw - cgroup cgroup rw,cpu,cpuacct\n",
	                     &m),
	                 1);
	assert_int_equal(m.version, 1);
	assert_true(cnl_cg_has_controllers(
	    m.opts, (const char *const[]){"cpu", "cpuacct", NULL}));
	assert_false(cnl_cg_has_controllers(
	    m.opts, (const char *const[]){"memory", NULL}));
	assert_int_equal(cnl_cg_parse_mountinfo_line(
	                     "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n", &m),
	                 0);
	assert_int_equal(cnl_cg_parse_mountinfo_line("22 1 8:1\n", &m),
	                 -CNL_EPARSE);
}

/* The v2 process paths on a cgroup2 mount without controllers. */
static void test_v2_unified(void **state)
{
	const char *unified = "/sys/fs/cgroup/unified";
	const char *argv[] = {
	    "sh", "-c",
	    "(sleep 1000 </dev/null >/dev/null 2>&1 &); echo up; "
	    "while :; do sleep 1; done",
	    NULL};
	struct cnl_launch_spec s = spec("v2a", argv, "/");
	struct cnl_launcher *l;
	struct cnl_workload *w;
	struct cnl_exit e;
	char err[256] = "", state_dir[64], name[64], line[16];
	char path[CNL_CG_PATH_MAX + 32], buf[256];
	pid_t pids[16];

	(void)state;
	snprintf(path, sizeof(path), "%s/cgroup.kill", unified);
	if (geteuid() != 0 ||
	    cnl_cg_read_file("/proc/self/mountinfo", buf, sizeof(buf)) < 0 ||
	    access(unified, W_OK) < 0) {
		printf("skip: no writable cgroup2 mount at %s\n", unified);
		skip();
	}
	snprintf(state_dir, sizeof(state_dir), "/tmp/cnl-launch-XXXXXX");
	assert_non_null(mkdtemp(state_dir));
	snprintf(name, sizeof(name), "test-v2-%d", (int)getpid());
	assert_int_equal(cnl_launcher_new_v2_at(name, state_dir, unified, &l,
	                                        err, sizeof(err)),
	                 0);
	assert_int_equal(cnl_launcher_cgroup_version(l), 2);

	/* No controllers here: a limit is refused and nothing is left. */
	s.mem_bytes = 1 << 26;
	assert_int_equal(cnl_launch(l, &s, &w, err, sizeof(err)), -EOPNOTSUPP);
	assert_int_equal(cnl_launcher_list(l, NULL, 0), 0);
	s.mem_bytes = 0;

	assert_int_equal(cnl_launch(l, &s, &w, err, sizeof(err)), 0);
	read_line(cnl_workload_stdout(w), line, sizeof(line));
	assert_string_equal(line, "up");
	assert_true(cnl_workload_procs(w, pids, 16) >= 3);
	assert_int_equal(
	    cnl_launcher_cgroup_dir(l, "memory", "v2a", buf, sizeof(buf)),
	    -EOPNOTSUPP);
	assert_int_equal(cnl_workload_kill(w), 0);
	assert_int_equal(cnl_workload_procs(w, pids, 16), 0);
	wait_exit(w, &e);
	assert_int_equal(e.signal, SIGKILL);
	cnl_workload_free(w);
	assert_int_equal(cnl_launcher_list(l, NULL, 0), 0);
	cnl_launcher_free(l);
	rmdir(state_dir);
}

/* A program launched from a sealed copy (the agent's OCI runtime) runs
 * that copy: its /proc/self/exe is sealed against every change, so that
 * nothing it runs (a container's root, as root on the host here) can
 * write to the binary the next launch runs; and the file on disk is not
 * what runs.  A script is refused (its interpreter would find no file). */
static void test_sealed_exe(void **state)
{
	struct fix *f = *state;
	const char *argv[] = {"cnl-sealed", "sealcheck", NULL};
	struct cnl_launch_spec s = spec("seal1", argv, "/");
	char out[256], err[256], script[128];
	struct cnl_workload *w;
	struct cnl_exit e;
	int fd, sfd;

	fd = cnl_launch_sealed_copy(self_exe);
	assert_true(fd > 2);
	assert_int_equal(fcntl(fd, F_GET_SEALS), ALL_SEALS);
	/* Read-only, and sealed even for a descriptor opened anew. */
	assert_int_equal(write(fd, "x", 1), -1);
	snprintf(script, sizeof(script), "/proc/self/fd/%d", fd);
	sfd = open(script, O_RDWR | O_CLOEXEC);
	if (sfd >= 0) {
		assert_int_equal(write(sfd, "x", 1), -1);
		assert_int_equal(errno, EPERM);
		assert_int_equal(ftruncate(sfd, 0), -1);
		close(sfd);
	}

	/* No path in argv[0]: the launch runs the descriptor. */
	s.exe_fd = fd;
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), 0);
	read_all(cnl_workload_stdout(w), out, sizeof(out));
	assert_string_equal(out, "seals=15 write=no\n");
	wait_exit(w, &e);
	assert_int_equal(e.code, 0);
	cnl_workload_free(w);
	close(fd);

	/* A closed descriptor is refused before anything starts. */
	s = spec("seal2", argv, "/");
	s.exe_fd = fd;
	assert_int_equal(cnl_launch(f->l, &s, &w, err, sizeof(err)), -EBADF);
	assert_non_null(strstr(err, "cnl-sealed"));
	assert_int_equal(cnl_launcher_list(f->l, NULL, 0), 0);

	snprintf(script, sizeof(script), "%s/run.sh", f->state);
	sfd = open(script, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	assert_true(sfd >= 0);
	assert_int_equal(write(sfd, "#!/bin/sh\ntrue\n", 15), 15);
	close(sfd);
	assert_int_equal(cnl_launch_sealed_copy(script), -ENOEXEC);
	assert_int_equal(cnl_launch_sealed_copy("/nonexistent-cnl"), -ENOENT);
	unlink(script);
}

/* The binary as a workload. */
static int helper(int argc, char **argv)
{
	if (strcmp(argv[1], "sealcheck") == 0) {
		/* What a tenant would try: write to the running binary. */
		int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
		int seals = fd < 0 ? -1 : fcntl(fd, F_GET_SEALS);
		int wfd = open("/proc/self/exe", O_RDWR | O_CLOEXEC);
		bool wrote = wfd >= 0 && (write(wfd, "x", 1) == 1 ||
		                          ftruncate(wfd, 0) == 0);

		printf("seals=%d write=%s\n", seals, wrote ? "yes" : "no");
		return 0;
	}
	if (strcmp(argv[1], "hog") == 0) {
		size_t n = (size_t)200 << 20;
		char *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
		               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return 2;
		for (size_t i = 0; i < n; i += 4096)
			p[i] = 1;
		return 0; /* not reached under a 64 MB limit */
	}
	if (strcmp(argv[1], "busy") == 0) {
		volatile uint64_t x = 0;
		for (;;)
			x++;
	}
	if (strcmp(argv[1], "alloc") == 0 && argc > 2) {
		size_t n = (size_t)strtoul(argv[2], NULL, 10) << 20;
		char *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
		               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return 2;
		for (size_t i = 0; i < n; i += 4096)
			p[i] = 1;
		printf("ready\n");
		fflush(stdout);
		for (;;)
			pause();
	}
	return 64;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_v2_formats),
	    cmocka_unit_test_setup_teardown(test_env_cwd_pipes_exit, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_detach_under, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_not_found, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_supervisor_exec, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_sealed_exe, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_oom, fix_setup, fix_teardown),
	    cmocka_unit_test_setup_teardown(test_stale_empty_cgroup, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_limits_written, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_kill_daemon, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_lease, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_pid_ns, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_uid, fix_setup, fix_teardown),
	    cmocka_unit_test_setup_teardown(test_adopt, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_release_keeps_end, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_pidfd, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test_setup_teardown(test_usage, fix_setup,
	                                    fix_teardown),
	    cmocka_unit_test(test_v2_unified),
	};
	ssize_t n;

	if (argc > 1)
		return helper(argc, argv);
	n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
	if (n <= 0)
		return 1;
	self_exe[n] = '\0';
	if (cmocka_run_group_tests_name("supervised by a fork", tests, NULL,
	                                NULL) != 0)
		return 1;
	supervisor = CNLAB_INIT;
	return cmocka_run_group_tests_name("supervised by cnlab-init", tests,
	                                   NULL, NULL);
}
