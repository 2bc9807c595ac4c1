/*
 * init.c - cnlab-init, process 1 of every workload's container: runs the
 * command as its child, reaps whatever reparents to it, and exits as the
 * command did (128 + the signal when a signal ended it).
 *
 * Why: in its PID namespace process 1 ignores every signal it has no
 * handler for, so a command that were process 1 itself (python, jupyter)
 * would ignore the grace SIGTERM of a stop and linger until the kill.  As
 * process 1's child it gets the default dispositions.  The agent signals
 * every process of the workload's cgroup, so init forwards nothing: the
 * command already has the signal, exactly once.
 *
 * Static, so that it runs in any image; the agent mounts it read-only.
 *
 * On the node, "cnlab-init --supervise ..." is also each workload's
 * supervisor (launch.h): the agent's child S0 becomes it by execve once
 * it has joined the workload's cgroups and made its namespaces, so that
 * no copy of the agent's memory lives on beside each workload (the agent
 * would pay a copy-on-write fault for each page it writes after each
 * launch).  Its arguments, all from the launcher:
 *
 *   --supervise FLAGS UID GID OUT_FD ERR_FD ERRPIPE LEASE_MS LEASE_PATH
 *               EXIT_PATH EXIT_TMP CWD EXE PROCS... -- ARGV...
 *
 * FLAGS: P (a PID namespace was made: fork its pid 1), M (a mount
 * namespace: with P, a fresh /proc), or "-"; the command's environment
 * is this process's.  Run by anyone else it does nothing they could not
 * do themselves: it runs a command as them.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/launch-child.h"

extern char **environ;

/* A decimal int of an argument; false when it is not one. */
static bool int_arg(const char *s, int *ret)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < INT_MIN || v > INT_MAX)
		return false;
	*ret = (int)v;
	return true;
}

static int supervise_main(int argc, char **argv)
{
	static struct cnl_child_ctx c;
	int lease_ms = 0, i = 14;

	if (argc < 16 || !int_arg(argv[3], &c.uid) ||
	    !int_arg(argv[4], &c.gid) || !int_arg(argv[5], &c.out_fd) ||
	    !int_arg(argv[6], &c.err_fd) || !int_arg(argv[7], &c.errpipe) ||
	    !int_arg(argv[8], &lease_ms)) {
		fprintf(stderr, "cnlab-init: bad --supervise arguments\n");
		return 2;
	}
	c.pid_ns = strchr(argv[2], 'P') != NULL;
	c.mount_ns = strchr(argv[2], 'M') != NULL;
	c.lease_ms = lease_ms;
	c.lease_path = argv[9][0] ? argv[9] : NULL;
	c.exit_path = argv[10];
	if (strlen(argv[11]) >= sizeof(c.exit_tmp)) {
		fprintf(stderr, "cnlab-init: exit path too long\n");
		return 2;
	}
	memcpy(c.exit_tmp, argv[11], strlen(argv[11]) + 1);
	c.cwd = argv[12];
	c.exe = argv[13];
	for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
		if (c.nprocs == CNL_CG_MAXDIRS ||
		    strlen(argv[i]) >= sizeof(c.procs[0])) {
			fprintf(stderr, "cnlab-init: bad cgroup list\n");
			return 2;
		}
		memcpy(c.procs[c.nprocs++], argv[i], strlen(argv[i]) + 1);
	}
	if (i + 1 >= argc) {
		fprintf(stderr, "cnlab-init: no command\n");
		return 2;
	}
	c.argv = (const char *const *)argv + i + 1;
	c.env = (const char *const *)environ;
	cnl_child_run(&c);
}

int main(int argc, char **argv)
{
	pid_t child;

	if (argc > 1 && strcmp(argv[1], "--supervise") == 0)
		return supervise_main(argc, argv);
	if (argc < 2) {
		fprintf(stderr, "usage: cnlab-init COMMAND [ARG...]\n");
		return 2;
	}
	child = fork();
	if (child < 0) {
		fprintf(stderr, "cnlab-init: fork: %s\n", strerror(errno));
		return 127;
	}
	if (child == 0) {
		execvp(argv[1], argv + 1);
		/* The shell's words for it: the command may be the job's own
		 * (no "/bin/sh -c" before plain words). */
		fprintf(stderr, "cnlab-init: %s: %s\n", argv[1],
		        errno == ENOENT ? "not found" : strerror(errno));
		_exit(errno == ENOENT ? 127 : 126);
	}
	for (;;) {
		int st;
		pid_t r = wait(&st);

		if (r == child)
			return WIFEXITED(st) ? WEXITSTATUS(st)
			                     : 128 + WTERMSIG(st);
		if (r < 0 && errno != EINTR)
			return 127;
	}
}
