/*
 * hip_bench.c - what libcnlab-hip.so adds per call over the fake HIP
 * runtime (tests/fakes/fake_hip.c): hipLaunchKernel, a hipMalloc+hipFree
 * pair and hipMemGetInfo, measured in child processes run without the
 * shim, with it and a quota (enforcing), and with it and no region (pass
 * through), in the same run.  Each figure is the best of 7 rounds of N
 * calls.  Figures, never a pass/fail: benchmarks do not gate tests.
 *
 *   build/bench/hip_bench [N]
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>

#include "shim/region.h"

extern char **environ;

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The child: three figures in ns per call, on one line. */
static int child(long n)
{
	double best[3] = {1e18, 1e18, 1e18};
	hipModule_t mod;
	hipFunction_t fn;
	dim3 one = {1, 1, 1};
	size_t f, t;
	void *p;

	if (hipInit(0) != hipSuccess ||
	    hipModuleLoadData(&mod, "fake") != hipSuccess ||
	    hipModuleGetFunction(&fn, mod, "noop") != hipSuccess)
		return 2;
	for (int r = 0; r < 7; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++)
			hipLaunchKernel(fn, one, one, NULL, 0, NULL);
		double t1 = now_ns();
		for (long i = 0; i < n; i++) {
			hipMalloc(&p, 1 << 20);
			hipFree(p);
		}
		double t2 = now_ns();
		for (long i = 0; i < n; i++)
			hipMemGetInfo(&f, &t);
		double t3 = now_ns();
		double v[3] = {(t1 - t0) / (double)n, (t2 - t1) / (double)n,
		               (t3 - t2) / (double)n};
		for (int k = 0; k < 3; k++)
			best[k] = v[k] < best[k] ? v[k] : best[k];
	}
	printf("%.1f %.1f %.1f\n", best[0], best[1], best[2]);
	return 0;
}

/* Run ourselves as a child with extra environment; its three figures. */
static int run(const char *self, long n, const char *preload,
               const char *region, double ret[3])
{
	char nbuf[32], pre[600], reg[600];
	char *argv[] = {(char *)self, "--child", nbuf, NULL};
	char *env[256];
	int fds[2], st, k = 0;
	pid_t pid;
	FILE *in;

	snprintf(nbuf, sizeof(nbuf), "%ld", n);
	for (char **e = environ; *e && k < 250; e++)
		if (strncmp(*e, "LD_PRELOAD=", 11) &&
		    strncmp(*e, "CNLAB_REGION=", 13))
			env[k++] = *e;
	if (preload) {
		snprintf(pre, sizeof(pre), "LD_PRELOAD=%s", preload);
		env[k++] = pre;
	}
	snprintf(reg, sizeof(reg), "CNLAB_REGION=%s", region ? region : "");
	env[k++] = reg;
	env[k] = NULL;
	if (pipe(fds) < 0 || (pid = fork()) < 0)
		return -1;
	if (pid == 0) {
		dup2(fds[1], 1);
		execve(self, argv, env);
		_exit(127);
	}
	close(fds[1]);
	in = fdopen(fds[0], "r");
	k = in ? fscanf(in, "%lf %lf %lf", &ret[0], &ret[1], &ret[2]) : 0;
	if (in)
		fclose(in);
	waitpid(pid, &st, 0);
	return k == 3 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	static const char *const rows[] = {
	    "hipLaunchKernel", "hipMalloc+hipFree (1 MiB)", "hipMemGetInfo"};
	char region[] = "/tmp/cnl-hipbench-XXXXXX";
	double direct[3], on[3], pass[3];
	long n;
	int fd;

	if (argc >= 3 && strcmp(argv[1], "--child") == 0)
		return child(strtol(argv[2], NULL, 10));
	n = argc >= 2 ? strtol(argv[1], NULL, 10) : 200000;
	if ((fd = mkstemp(region)) < 0)
		return 1;
	close(fd);
	if (cnl_region_create(region, 64ULL << 30, 0, "bench", NULL) < 0 ||
	    run(argv[0], n, NULL, NULL, direct) < 0 ||
	    run(argv[0], n, CNL_HIP_SO, region, on) < 0 ||
	    run(argv[0], n, CNL_HIP_SO, NULL, pass) < 0) {
		fprintf(stderr, "hip_bench: a run failed\n");
		unlink(region);
		return 1;
	}
	unlink(region);
	printf("libcnlab-hip.so over the fake HIP runtime (ns per call, best "
	       "of 7 rounds of %ld)\n",
	       n);
	printf("%-38s %8s %8s %8s\n", "call", "direct", "hooked", "added");
	for (int k = 0; k < 3; k++) {
		char label[64];

		snprintf(label, sizeof(label), "%s, quota set", rows[k]);
		printf("%-38s %8.1f %8.1f %+8.1f\n", label, direct[k], on[k],
		       on[k] - direct[k]);
		snprintf(label, sizeof(label), "%s, no region", rows[k]);
		printf("%-38s %8.1f %8.1f %+8.1f\n", label, direct[k], pass[k],
		       pass[k] - direct[k]);
	}
	return 0;
}
