/*
 * cpu_per_run.c - the CPU a command costs per run: user + system time of
 * the children, summed over N runs (the kernel's rusage of each waited
 * child, at microsecond resolution), divided by N.  bench/issue19.sh runs
 * it on `cnlab --version` beside /bin/true (the cost of a bare exec) for
 * the "CLI start" row of issue 19.
 *
 *   cpu_per_run N COMMAND [ARGS...]
 *
 * Each run is posix_spawn (vfork: the parent's pages are not copied) with
 * stdout and stderr on /dev/null, then wait4 for its rusage.  A run that
 * exits other than 0 stops the bench (exit 1): a failing command costs
 * less than a working one and would flatter it.  Prints one line:
 *
 *   runs=N user_us=U sys_us=S cpu_us_per_run=C wall_us_per_run=W
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static long long tv_us(const struct timeval *tv)
{
	return (long long)tv->tv_sec * 1000000 + tv->tv_usec;
}

static long long now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int main(int argc, char **argv)
{
	posix_spawn_file_actions_t fa;
	long long user = 0, sys = 0, t0;
	char *end;
	long n;

	if (argc < 3) {
		fprintf(stderr, "usage: cpu_per_run N COMMAND [ARGS...]\n");
		return 2;
	}
	errno = 0;
	n = strtol(argv[1], &end, 10);
	if (errno || *end || n < 1 || n > 1000000) {
		fprintf(stderr,
		        "cpu_per_run: N: want an integer in 1..1000000, got "
		        "\"%s\"\n",
		        argv[1]);
		return 2;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null",
	                                 O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null",
	                                 O_WRONLY, 0);
	t0 = now_us();
	for (long i = 0; i < n; i++) {
		struct rusage ru;
		pid_t pid;
		int r, st;

		r = posix_spawnp(&pid, argv[2], &fa, NULL, argv + 2, environ);
		if (r != 0) {
			fprintf(stderr, "cpu_per_run: cannot run %s: %s\n",
			        argv[2], strerror(r));
			return 1;
		}
		while (wait4(pid, &st, 0, &ru) < 0)
			if (errno != EINTR) {
				fprintf(stderr, "cpu_per_run: wait4: %s\n",
				        strerror(errno));
				return 1;
			}
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr,
			        "cpu_per_run: %s failed on run %ld (status "
			        "%d)\n",
			        argv[2], i + 1, st);
			return 1;
		}
		user += tv_us(&ru.ru_utime);
		sys += tv_us(&ru.ru_stime);
	}
	printf("runs=%ld user_us=%lld sys_us=%lld cpu_us_per_run=%.1f "
	       "wall_us_per_run=%.1f\n",
	       n, user, sys, (double)(user + sys) / (double)n,
	       (double)(now_us() - t0) / (double)n);
	posix_spawn_file_actions_destroy(&fa);
	return 0;
}
