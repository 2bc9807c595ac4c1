/*
 * cli_start_runs.c - run a command N times (fork, exec, wait, its output
 * to /dev/null) and print the CPU it used per run, user + system, as the
 * kernel counts it for waited-for children (getrusage RUSAGE_CHILDREN),
 * and the wall time per run.  bench/cli_start.sh calls it for each row.
 *
 *   cli_start_runs N LABEL COMMAND [ARG...]
 *
 * Prints one line: "LABEL  cpu_ms_per_run  wall_ms_per_run  failures".
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double tv_ms(struct timeval tv)
{
	return (double)tv.tv_sec * 1000.0 + (double)tv.tv_usec / 1000.0;
}

int main(int argc, char **argv)
{
	struct rusage ru;
	struct timespec t0, t1;
	long n, failures = 0;
	char *end;

	if (argc < 4) {
		fprintf(stderr,
		        "usage: cli_start_runs N LABEL COMMAND [ARG...]\n");
		return 2;
	}
	n = strtol(argv[1], &end, 10);
	if (*end || n <= 0) {
		fprintf(stderr, "cli_start_runs: N: \"%s\" is not a count\n",
		        argv[1]);
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < n; i++) {
		pid_t pid = fork();
		int st;

		if (pid == 0) {
			int null = open("/dev/null", O_RDWR);

			dup2(null, 1);
			dup2(null, 2);
			execv(argv[3], argv + 3);
			_exit(127);
		}
		if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) ||
		    WEXITSTATUS(st) != 0)
			failures++;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	getrusage(RUSAGE_CHILDREN, &ru);
	printf("%-44s %8.3f %8.3f %6ld\n", argv[2],
	       (tv_ms(ru.ru_utime) + tv_ms(ru.ru_stime)) / (double)n,
	       ((double)(t1.tv_sec - t0.tv_sec) * 1000.0 +
	        (double)(t1.tv_nsec - t0.tv_nsec) / 1e6) /
	           (double)n,
	       failures);
	return 0;
}
