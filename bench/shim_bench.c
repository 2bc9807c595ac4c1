/*
 * shim_bench.c - what libcnlab-cuda.so adds to a CUDA program: nanoseconds
 * per hooked call against the same fake driver called directly, and the
 * process start-up time with the shim preloaded.
 *
 *   shim_bench [SHIM_SO]
 *
 * The outer run creates a region and re-runs itself with the shim preloaded
 * (--inner), once per configuration; each inner run times the same calls
 * made through the dynamic linker (so through the shim) and through the
 * fake driver's own entry points (cnlfake_sym), and prints one line per
 * call.  Each figure is the best of 7 rounds of N calls, which filters out
 * the other tenants of a shared machine.  Start-up is the median wall time
 * of 201 runs of a program that calls cuInit and cuMemGetInfo, with and
 * without the shim.  Reports figures; never fails on a time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shim/cuda-abi.h"
#include "shim/region.h"
#include "fake_gpu.h"

extern char **environ;

CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice *d, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuModuleLoadData(CUmodule *m, const void *image);
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                        unsigned bx, unsigned by, unsigned bz, unsigned shm,
                        CUstream s, void **params, void **extra);
CUresult cuCtxSynchronize(void);

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned,
                              unsigned, unsigned, unsigned, unsigned, CUstream,
                              void **, void **);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*info_fn)(size_t *, size_t *);

#define ROUNDS 7

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static CUfunction noop;

static double time_launch(launch_fn f, long n)
{
	double best = 1e30;

	for (int r = 0; r < ROUNDS; r++) {
		double t0 = now_ns();
		for (long i = 0; i < n; i++)
			f(noop, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
		double t = (now_ns() - t0) / (double)n;
		best = t < best ? t : best;
		cuCtxSynchronize();
	}
	return best;
}

static double time_alloc_free(alloc_fn a, free_fn fr, long n)
{
	double best = 1e30;
	CUdeviceptr p;

	for (int r = 0; r < ROUNDS; r++) {
		double t0 = now_ns();
		for (long i = 0; i < n; i++) {
			a(&p, 4096);
			fr(p);
		}
		double t = (now_ns() - t0) / (double)n;
		best = t < best ? t : best;
	}
	return best;
}

static double time_info(info_fn f, long n)
{
	double best = 1e30;
	size_t fr, t;

	for (int r = 0; r < ROUNDS; r++) {
		double t0 = now_ns();
		for (long i = 0; i < n; i++)
			f(&fr, &t);
		double dt = (now_ns() - t0) / (double)n;
		best = dt < best ? dt : best;
	}
	return best;
}

typedef CUresult (*ev_create_fn)(CUevent *, unsigned int);
typedef CUresult (*ev_record_fn)(CUevent, CUstream);
typedef CUresult (*ev_query_fn)(CUevent);
typedef CUresult (*ev_elapsed_fn)(float *, CUevent, CUevent);

/* The driver calls the shim makes per measured launch, made directly. */
static double time_events(long n)
{
	ev_create_fn create = (ev_create_fn)cnlfake_sym("cuEventCreate");
	ev_record_fn record = (ev_record_fn)cnlfake_sym("cuEventRecord");
	ev_query_fn query = (ev_query_fn)cnlfake_sym("cuEventQuery");
	ev_elapsed_fn elapsed =
	    (ev_elapsed_fn)cnlfake_sym("cuEventElapsedTime_v2");
	double best = 1e30;
	CUevent s, e;
	float ms;

	create(&s, 0);
	create(&e, 0);
	for (int r = 0; r < ROUNDS; r++) {
		double t0 = now_ns();
		for (long i = 0; i < n; i++) {
			record(s, NULL);
			record(e, NULL);
			if (query(e) == CUDA_SUCCESS)
				elapsed(&ms, s, e);
		}
		double t = (now_ns() - t0) / (double)n;
		best = t < best ? t : best;
	}
	return best;
}

static void row(const char *what, double direct, double hooked)
{
	printf("| %-44s | %7.1f | %7.1f | %+7.1f | %5.2fx |\n", what, direct,
	       hooked, hooked - direct, hooked / direct);
}

/* Inside the preloaded process: time each call both ways. */
static int inner(const char *label, int launches_only)
{
	launch_fn d_launch = (launch_fn)cnlfake_sym("cuLaunchKernel");
	alloc_fn d_alloc = (alloc_fn)cnlfake_sym("cuMemAlloc_v2");
	free_fn d_free = (free_fn)cnlfake_sym("cuMemFree_v2");
	info_fn d_info = (info_fn)cnlfake_sym("cuMemGetInfo_v2");
	char what[96];
	CUcontext ctx;
	CUmodule mod;
	CUdevice dev;

	cuInit(0);
	cuDeviceGet(&dev, 0);
	cuDevicePrimaryCtxRetain(&ctx, dev);
	cuCtxSetCurrent(ctx);
	cuModuleLoadData(&mod, "bench");
	cuModuleGetFunction(&noop, mod, "noop");
	snprintf(what, sizeof(what), "cuLaunchKernel, %s", label);
	row(what, time_launch(d_launch, 2000000),
	    time_launch(cuLaunchKernel, 2000000));
	if (launches_only) {
		double ev = time_events(2000000);
		printf("| %-44s | %7.1f |         |         |        |\n",
		       "  of which driver event calls", ev);
		return 0;
	}
	snprintf(what, sizeof(what), "cuMemAlloc_v2+cuMemFree_v2, %s", label);
	row(what, time_alloc_free(d_alloc, d_free, 500000),
	    time_alloc_free(cuMemAlloc_v2, cuMemFree_v2, 500000));
	snprintf(what, sizeof(what), "cuMemGetInfo_v2, %s", label);
	row(what, time_info(d_info, 2000000),
	    time_info(cuMemGetInfo_v2, 2000000));
	return 0;
}

static int start_probe(void)
{
	size_t f, t;
	CUcontext ctx;
	CUdevice dev;

	cuInit(0);
	cuDeviceGet(&dev, 0);
	cuDevicePrimaryCtxRetain(&ctx, dev);
	return cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS ? 0 : 1;
}

/* Run ourselves with extra environment; returns the wall time in ns. */
static double run_self(char *const args[], char *const extra[])
{
	char *env[256];
	size_t n = 0;
	pid_t pid;
	double t0;
	int st;

	for (char **e = environ; *e && n < 200; e++)
		if (strncmp(*e, "LD_PRELOAD=", 11) &&
		    strncmp(*e, "CNLAB_REGION=", 13))
			env[n++] = *e;
	for (size_t i = 0; extra[i]; i++)
		env[n++] = extra[i];
	env[n] = NULL;
	t0 = now_ns();
	if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, env) != 0)
		return -1;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return now_ns() - t0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median_start(char *const extra[])
{
	char *args[] = {"shim_bench", "--start", NULL};
	double t[201];

	for (int i = 0; i < 201; i++)
		t[i] = run_self(args, extra);
	qsort(t, 201, sizeof(t[0]), cmp_double);
	return t[100];
}

int main(int argc, char **argv)
{
	const char *so = argc > 1 && argv[1][0] != '-' ? argv[1] : CNL_SHIM_SO;
	char dir[] = "/tmp/cnl-bench-XXXXXX", region[64];
	char pre[512], reg[128], reg_share[128], share_path[64];
	struct cnl_region_opts o = {0};

	if (argc > 2 && strcmp(argv[1], "--inner") == 0)
		return inner(argv[2], argc > 3);
	if (argc > 1 && strcmp(argv[1], "--start") == 0)
		return start_probe();
	if (!mkdtemp(dir))
		return 1;
	snprintf(region, sizeof(region), "%s/region", dir);
	snprintf(share_path, sizeof(share_path), "%s/region-share", dir);
	if (cnl_region_create(region, 8ULL << 30, 0, "bench", NULL) < 0 ||
	    cnl_region_create(share_path, 8ULL << 30, 50, "bench", &o) < 0)
		return 1;
	snprintf(pre, sizeof(pre), "LD_PRELOAD=%s", so);
	snprintf(reg, sizeof(reg), "CNLAB_REGION=%s", region);
	snprintf(reg_share, sizeof(reg_share), "CNLAB_REGION=%s", share_path);

	printf("libcnlab-cuda.so over the fake driver (ns per call, best of "
	       "%d rounds)\n\n",
	       ROUNDS);
	printf("| %-44s | %7s | %7s | %7s | %6s |\n", "call", "direct",
	       "hooked", "added", "ratio");
	printf("|%s|---------|---------|---------|--------|\n",
	       "----------------------------------------------");
	fflush(stdout);
	{
		char *a1[] = {"shim_bench", "--inner", "quota set", NULL};
		char *e1[] = {pre, reg, NULL};
		char *a2[] = {"shim_bench", "--inner", "50% share (measured)",
		              "launch", NULL};
		char *e2[] = {pre, reg_share, NULL};
		char *a3[] = {"shim_bench", "--inner", "no region (pass)",
		              NULL};
		char *e3[] = {pre, NULL};

		run_self(a1, e1);
		run_self(a2, e2);
		run_self(a3, e3);
	}
	{
		char *without[] = {NULL};
		char *with[] = {pre, reg, NULL};
		double t0 = median_start(without), t1 = median_start(with);

		printf("\nprocess start-up (exec, cuInit, context, "
		       "cuMemGetInfo; median of 201): without shim %.0f us, "
		       "with shim %.0f us, added %.0f us\n",
		       t0 / 1e3, t1 / 1e3, (t1 - t0) / 1e3);
	}
	cnl_region_remove(region);
	cnl_region_remove(share_path);
	rmdir(dir);
	return 0;
}
