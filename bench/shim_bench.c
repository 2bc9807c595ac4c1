/*
 * shim_bench.c - what libcnlab-cuda.so adds to a CUDA program: nanoseconds
 * per hooked call against the same fake driver called directly, the
 * process start-up time with the shim preloaded, and how close the compute
 * share it enforces comes to its target.
 *
 *   shim_bench [SHIM_SO]
 *
 * The outer run creates a region and re-runs itself with the shim preloaded
 * (--inner), once per configuration; each inner run times the same calls
 * made through the dynamic linker (so through the shim) and through the
 * fake driver's own entry points (cnlfake_sym), and prints one line per
 * call.  Each figure is the best of 7 rounds of N calls, which filters out
 * the other tenants of a shared machine.  Start-up is the median wall time
 * of 501 runs of a program that makes one CUDA call through the shim
 * (cuInit, which the shim passes by, then cuMemGetInfo_v2), with and
 * without the shim in turn, and the median CPU time (user + system) of the
 * same runs, which waiting for the cores of a busy machine does not
 * inflate.
 *
 * Share error: greedy processes (four 1 ms kernels in flight, as a
 * training loop keeps) run under the shim on a fake GPU shared through a
 * file, each with its own ledger tag; over a window of wall time the
 * fake's own ledger (busy_ns, not the shim's measurement) gives the share
 * each got, printed beside its target as |measured - target| in
 * percentage points: a slice of 25% and one of 50% alone on a GPU
 * (capped, no board), and 5 blocks in a 1g MIG instance (35% of the
 * instance, which runs at 1/7 of the GPU's speed on its own timeline:
 * fake_gpu.h), in points of the instance and of the GPU.  Reports
 * figures; never fails on a time.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
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
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s);
CUresult cuStreamCreate(CUstream *s, unsigned int flags);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuEventCreate(CUevent *e, unsigned int flags);
CUresult cuEventRecord(CUevent e, CUstream s);
CUresult cuEventSynchronize(CUevent e);

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned,
                              unsigned, unsigned, unsigned, unsigned, CUstream,
                              void **, void **);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*info_fn)(size_t *, size_t *);
typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);

#define ROUNDS 7

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static CUfunction noop;

/*
 * Each timer runs ROUNDS rounds of n calls the direct way (f[0]) and the
 * hooked way (f[1]) in turn, so that both see the same load of a shared
 * machine, and keeps the best round of each in best[0] and best[1].
 */
static void keep(double *best, double t0, long n)
{
	double t = (now_ns() - t0) / (double)n;

	*best = t < *best ? t : *best;
}

static void time_launch(const launch_fn f[2], long n, double best[2])
{
	best[0] = best[1] = 1e30;
	for (int r = 0; r < 2 * ROUNDS; r++) {
		double t0 = now_ns();
		for (long i = 0; i < n; i++)
			f[r & 1](noop, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
		keep(&best[r & 1], t0, n);
		cuCtxSynchronize();
	}
}

static void time_alloc_free(const alloc_fn a[2], const free_fn fr[2], long n,
                            double best[2])
{
	CUdeviceptr p;

	best[0] = best[1] = 1e30;
	for (int r = 0; r < 2 * ROUNDS; r++) {
		double t0 = now_ns();
		for (long i = 0; i < n; i++) {
			a[r & 1](&p, 4096);
			fr[r & 1](p);
		}
		keep(&best[r & 1], t0, n);
	}
}

/* Stream-ordered: the pair on the legacy stream, from the pool's cache
 * after the first round (what a caching framework does). */
static void time_alloc_async(const alloc_async_fn a[2],
                             const free_async_fn fr[2], long n, double best[2])
{
	CUdeviceptr p;

	best[0] = best[1] = 1e30;
	for (int r = 0; r < 2 * ROUNDS; r++) {
		double t0 = now_ns();
		for (long i = 0; i < n; i++) {
			a[r & 1](&p, 4096, NULL);
			fr[r & 1](p, NULL);
		}
		keep(&best[r & 1], t0, n);
	}
}

static void time_info(const info_fn f[2], long n, double best[2])
{
	size_t fr, t;

	best[0] = best[1] = 1e30;
	for (int r = 0; r < 2 * ROUNDS; r++) {
		double t0 = now_ns();
		for (long i = 0; i < n; i++)
			f[r & 1](&fr, &t);
		keep(&best[r & 1], t0, n);
	}
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
	printf("| %-50s | %7.1f | %7.1f | %+7.1f | %5.2fx |\n", what, direct,
	       hooked, hooked - direct, hooked / direct);
}

/* Inside the preloaded process: time each call both ways. */
static int inner(const char *label, int launches_only)
{
	launch_fn d_launch = (launch_fn)cnlfake_sym("cuLaunchKernel");
	alloc_fn d_alloc = (alloc_fn)cnlfake_sym("cuMemAlloc_v2");
	free_fn d_free = (free_fn)cnlfake_sym("cuMemFree_v2");
	info_fn d_info = (info_fn)cnlfake_sym("cuMemGetInfo_v2");
	alloc_async_fn d_alloc_async =
	    (alloc_async_fn)cnlfake_sym("cuMemAllocAsync");
	free_async_fn d_free_async =
	    (free_async_fn)cnlfake_sym("cuMemFreeAsync");
	char what[96];
	double b[2];
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
	time_launch((launch_fn[]){d_launch, cuLaunchKernel}, 2000000, b);
	row(what, b[0], b[1]);
	if (launches_only) {
		double ev = time_events(2000000);
		printf("| %-50s | %7.1f |         |         |        |\n",
		       "  of which driver event calls", ev);
		return 0;
	}
	snprintf(what, sizeof(what), "cuMemAlloc_v2+cuMemFree_v2, %s", label);
	time_alloc_free((alloc_fn[]){d_alloc, cuMemAlloc_v2},
	                (free_fn[]){d_free, cuMemFree_v2}, 500000, b);
	row(what, b[0], b[1]);
	snprintf(what, sizeof(what), "cuMemGetInfo_v2, %s", label);
	time_info((info_fn[]){d_info, cuMemGetInfo_v2}, 2000000, b);
	row(what, b[0], b[1]);
	snprintf(what, sizeof(what), "cuMemAllocAsync+cuMemFreeAsync, %s",
	         label);
	time_alloc_async((alloc_async_fn[]){d_alloc_async, cuMemAllocAsync},
	                 (free_async_fn[]){d_free_async, cuMemFreeAsync},
	                 500000, b);
	row(what, b[0], b[1]);
	return 0;
}

/* A greedy process: 1000 us kernels (on the whole GPU), four in flight,
 * for @seconds; prints "ready" when it starts. */
static int greedy(double seconds)
{
	CUevent inflight[4];
	CUcontext ctx;
	CUmodule mod;
	CUfunction fn;
	CUdevice dev;
	CUstream s;
	double t0;

	if (cuInit(0) != CUDA_SUCCESS)
		return 1;
	cuDeviceGet(&dev, 0);
	cuDevicePrimaryCtxRetain(&ctx, dev);
	cuCtxSetCurrent(ctx);
	cuModuleLoadData(&mod, "bench");
	cuModuleGetFunction(&fn, mod, "busy_1000");
	cuStreamCreate(&s, 0);
	for (int i = 0; i < 4; i++)
		cuEventCreate(&inflight[i], 0);
	printf("ready\n");
	fflush(stdout);
	t0 = now_ns();
	for (unsigned k = 0; now_ns() - t0 < seconds * 1e9; k++) {
		if (k >= 4)
			cuEventSynchronize(inflight[k % 4]);
		if (cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL) !=
		    CUDA_SUCCESS)
			return 1;
		cuEventRecord(inflight[k % 4], s);
	}
	cuStreamSynchronize(s);
	return 0;
}

/* The tiny program: one call through the shim (cuInit is not hooked). */
static int start_probe(void)
{
	size_t f, t;

	cuInit(0);
	return cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS ? 0 : 1;
}

/* Run ourselves with extra environment; returns the wall time in ns and
 * the child's CPU time in *ret_cpu. */
static double run_self_cpu(char *const args[], char *const extra[],
                           double *ret_cpu)
{
	char *env[256];
	struct rusage ru;
	size_t n = 0;
	pid_t pid;
	double t0, t;
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
	while (wait4(pid, &st, 0, &ru) < 0 && errno == EINTR)
		;
	t = now_ns() - t0;
	if (ret_cpu)
		*ret_cpu =
		    (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 +
		    (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3;
	return t;
}

/* Run ourselves with extra environment; returns the wall time in ns. */
static double run_self(char *const args[], char *const extra[])
{
	return run_self_cpu(args, extra, NULL);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

#define STARTS 501

/* Start-up without ([0]) and with ([1]) the extra environment, runs in
 * turn so that both see the same load: the median wall time of each in
 * ret_wall, and the median CPU time (user + system, which waiting for a
 * busy machine's cores does not inflate) in ret_cpu. */
static void median_start(char *const without[], char *const with[],
                         double ret_wall[2], double ret_cpu[2])
{
	char *args[] = {"shim_bench", "--start", NULL};
	static double t[2][STARTS], c[2][STARTS];

	for (int i = 0; i < STARTS; i++) {
		t[0][i] = run_self_cpu(args, without, &c[0][i]);
		t[1][i] = run_self_cpu(args, with, &c[1][i]);
	}
	for (int k = 0; k < 2; k++) {
		qsort(t[k], STARTS, sizeof(t[k][0]), cmp_double);
		qsort(c[k], STARTS, sizeof(c[k][0]), cmp_double);
		ret_wall[k] = t[k][STARTS / 2];
		ret_cpu[k] = c[k][STARTS / 2];
	}
}

#define SHARE_WARMUP_S 0.5
#define SHARE_WINDOW_S 3.0

/*
 * One greedy process under the shim with region @region, on the fake GPU
 * file @gpu_file (mapped at @g), in MIG instance @mig ("" for the whole
 * GPU), ledger tag @tag: the share of its device's time it got over the
 * window, by the fake's ledger; -1 if it could not run.
 */
static double share_run(const char *pre, const char *region,
                        const char *gpu_file, struct fake_gpu *g,
                        const char *mig, int tag)
{
	char secs[32], e_reg[600], e_gpu[600], e_mig[64], e_tag[32];
	char *args[] = {"shim_bench", "--greedy", secs, NULL};
	char *env[300], line[16] = "";
	posix_spawn_file_actions_t fa;
	size_t n = 0;
	uint64_t b0, b1;
	double t0, t1;
	int fd[2], st;
	pid_t pid;
	FILE *f;

	snprintf(secs, sizeof(secs), "%.1f",
	         SHARE_WARMUP_S + SHARE_WINDOW_S + 1.0);
	snprintf(e_reg, sizeof(e_reg), "CNLAB_REGION=%s", region);
	snprintf(e_gpu, sizeof(e_gpu), "CNL_FAKE_GPU=%s", gpu_file);
	snprintf(e_mig, sizeof(e_mig), "CNL_FAKE_MIG=%s", mig);
	snprintf(e_tag, sizeof(e_tag), "CNL_FAKE_TAG=%d", tag);
	for (char **e = environ; *e && n < 290; e++)
		if (strncmp(*e, "CNL_FAKE_", 9) && strncmp(*e, "CNLAB_", 6) &&
		    strncmp(*e, "LD_PRELOAD=", 11))
			env[n++] = *e;
	env[n++] = (char *)pre;
	env[n++] = e_reg;
	env[n++] = e_gpu;
	env[n++] = e_mig;
	env[n++] = e_tag;
	env[n] = NULL;
	if (pipe(fd) < 0)
		return -1;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
	posix_spawn_file_actions_addclose(&fa, fd[0]);
	st = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, env);
	posix_spawn_file_actions_destroy(&fa);
	close(fd[1]);
	if (st != 0) {
		close(fd[0]);
		return -1;
	}
	f = fdopen(fd[0], "r");
	if (!f || !fgets(line, sizeof(line), f) ||
	    strncmp(line, "ready", 5) != 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		if (f)
			fclose(f);
		return -1;
	}
	usleep((useconds_t)(SHARE_WARMUP_S * 1e6));
	t0 = now_ns();
	b0 = atomic_load(&g->busy_ns[tag]);
	usleep((useconds_t)(SHARE_WINDOW_S * 1e6));
	t1 = now_ns();
	b1 = atomic_load(&g->busy_ns[tag]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	fclose(f);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return -1;
	return (double)(b1 - b0) / (t1 - t0);
}

/* The share-error rows: measured beside target, in percentage points. */
static void share_rows(const char *dir, const char *pre)
{
	static const struct {
		const char *what, *mig;
		unsigned share;  /* of the device the process sees */
		double gpu_frac; /* of the GPU the device is */
	} cases[] = {
	    {"25% of a GPU", "", 25, 1.0},
	    {"50% of a GPU", "", 50, 1.0},
	    /* share.h: N blocks in a 1g instance are 7N% of it. */
	    {"5 blocks in a 1g MIG instance", "1g@0", 35, 1.0 / 7},
	};
	char gpu_file[300], region[300];
	struct fake_gpu *g;
	int fd;

	snprintf(gpu_file, sizeof(gpu_file), "%s/gpu", dir);
	snprintf(region, sizeof(region), "%s/region-greedy", dir);
	fd = open(gpu_file, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, sizeof(*g)) < 0) {
		printf("share: cannot create %s\n", gpu_file);
		if (fd >= 0)
			close(fd);
		return;
	}
	g = mmap(NULL, sizeof(*g), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (g == MAP_FAILED)
		return;
	printf("\ncompute share, one greedy process alone, by the fake "
	       "driver's ledger over %.1f s (1 ms kernels, 4 in flight)\n\n",
	       SHARE_WINDOW_S);
	printf("| %-30s | %7s | %8s | %9s | %13s |\n", "slice", "target",
	       "measured", "error pp", "error pp, GPU");
	printf("|--------------------------------|---------|----------|"
	       "-----------|---------------|\n");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		double got;

		if (cnl_region_create(region, 8ULL << 30, cases[i].share,
		                      "bench", NULL) < 0)
			break;
		got = share_run(pre, region, gpu_file, g, cases[i].mig,
		                (int)i + 1);
		if (got < 0) {
			printf("| %-30s | %6u%% | (did not run) |\n",
			       cases[i].what, cases[i].share);
			continue;
		}
		printf("| %-30s | %6u%% | %7.2f%% | %9.2f | %13.2f |\n",
		       cases[i].what, cases[i].share, 100 * got,
		       fabs(100 * got - cases[i].share),
		       fabs(100 * got - cases[i].share) * cases[i].gpu_frac);
		fflush(stdout);
	}
	cnl_region_remove(region);
	unlink(gpu_file);
	munmap(g, sizeof(*g));
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
	if (argc > 2 && strcmp(argv[1], "--greedy") == 0)
		return greedy(strtod(argv[2], NULL));
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
	printf("| %-50s | %7s | %7s | %7s | %6s |\n", "call", "direct",
	       "hooked", "added", "ratio");
	printf("|%s|---------|---------|---------|--------|\n",
	       "----------------------------------------------------");
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
		double t[2], c[2], t0, t1;

		median_start(without, with, t, c);
		t0 = t[0];
		t1 = t[1];

		printf("\nprocess start-up (exec, cuInit, one cuMemGetInfo_v2; "
		       "median of %d): without shim %.0f us, with shim %.0f "
		       "us, added %.0f us\n",
		       STARTS, t0 / 1e3, t1 / 1e3, (t1 - t0) / 1e3);
		printf("  CPU time (user + system) of the same runs: without "
		       "shim %.0f us, with shim %.0f us, added %.0f us\n",
		       c[0] / 1e3, c[1] / 1e3, (c[1] - c[0]) / 1e3);
	}
	fflush(stdout);
	share_rows(dir, pre);
	cnl_region_remove(region);
	cnl_region_remove(share_path);
	rmdir(dir);
	return 0;
}
