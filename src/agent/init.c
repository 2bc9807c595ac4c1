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
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	pid_t child;

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
		fprintf(stderr, "cnlab-init: %s: %s\n", argv[1],
		        strerror(errno));
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
