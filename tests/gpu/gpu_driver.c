/*
 * gpu_driver.c - the shim's checks against the real driver through the
 * driver API: quota as memory information (CUDA and NVML), every
 * allocation path charged and given back, over-quota refusal and recovery,
 * cuGetProcAddress answers, and the compute share of a spinning kernel.
 *
 *   CNLAB_REGION=R LD_PRELOAD=libcnlab-cuda.so gpu_driver SPIN.PTX QUOTA PCT
 *
 * R has quota QUOTA bytes, share PCT, no context reserve.
 *
 * The granularity attack (issue 18, item 2) runs too: allocations of
 * 2 MiB + 1 byte (the driver takes 4 MiB for each), 1 byte and 4 KiB, and
 * pitched rows just over 2 MiB, and VMM granules mapped then released
 * with the mapping kept, until refused; what the driver holds
 * for the process, as NVML's process list reports it (the driver's own
 * count, not the shim's), must not grow by more than the quota.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

static uint64_t used(uint64_t quota)
{
	size_t f = 0, t = 0;

	cuMemGetInfo(&f, &t);
	return quota - f;
}

typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_fn)(unsigned, void **);
typedef int (*nvml_mem_fn)(void *, unsigned long long *);

static void check_nvml(uint64_t quota)
{
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	unsigned long long m[3] = {0}; /* total, free, used */
	void *dev;

	if (!h) {
		printf("skip NVML: libnvidia-ml.so.1 not found\n");
		return;
	}
	((nvml_init_fn)dlsym(h, "nvmlInit_v2"))();
	((nvml_handle_fn)dlsym(h, "nvmlDeviceGetHandleByIndex_v2"))(0, &dev);
	CHECK(((nvml_mem_fn)dlsym(h, "nvmlDeviceGetMemoryInfo"))(dev, m) == 0 &&
	          m[0] == quota,
	      "NVML total %llu = quota", m[0]);
}

static void check_paths(uint64_t quota)
{
	uint64_t base = used(quota);
	CUdeviceptr p;
	size_t pitch, gran = 0;
	CUmemoryPool pool;
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle h;
	CUDA_ARRAY_DESCRIPTOR ad;
	CUarray arr;

	CHECK(cuMemAlloc(&p, 64 * MiB) == CUDA_SUCCESS &&
	          used(quota) == base + 64 * MiB,
	      "cuMemAlloc charged 64 MiB");
	CHECK(cuMemFree(p) == CUDA_SUCCESS && used(quota) == base,
	      "cuMemFree gave it back");
	/* Charged in the driver's 2 MiB pages. */
	CHECK(cuMemAllocPitch(&p, &pitch, 1000, 1000, 4) == CUDA_SUCCESS &&
	          used(quota) == base + (pitch * 1000 + 2 * MiB - 1) /
	                                    (2 * MiB) * (2 * MiB),
	      "pitch charged pitch x height in 2 MiB pages (pitch %zu)", pitch);
	cuMemFree(p);
	CHECK(cuMemAllocManaged(&p, 32 * MiB, CU_MEM_ATTACH_GLOBAL) ==
	              CUDA_SUCCESS &&
	          used(quota) == base + 32 * MiB,
	      "managed charged");
	cuMemFree(p);
	cuDeviceGetMemPool(&pool, 0);
	CHECK(cuMemAllocAsync(&p, 16 * MiB, NULL) == CUDA_SUCCESS &&
	          used(quota) >= base + 16 * MiB,
	      "async charged at the pool (%llu)",
	      (unsigned long long)(used(quota) - base));
	cuMemFreeAsync(p, NULL);
	cuStreamSynchronize(NULL);
	cuMemPoolTrimTo(pool, 0);
	CHECK(used(quota) == base, "pool trimmed, charge back to %llu",
	      (unsigned long long)base);
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	cuMemGetAllocationGranularity(&gran, &prop,
	                              CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	printf("info VMM granularity %zu bytes\n", gran);
	CHECK(
	    cuMemCreate(&h, gran + 1, &prop, 0) == CUDA_ERROR_INVALID_VALUE &&
	        used(quota) == base,
	    "cuMemCreate of a granule + 1 refused by the driver, not charged");
	CHECK(cuMemCreate(&h, 16 * gran, &prop, 0) == CUDA_SUCCESS &&
	          used(quota) == base + 16 * gran,
	      "cuMemCreate charged");
	CHECK(cuMemRelease(h) == CUDA_SUCCESS && used(quota) == base,
	      "cuMemRelease gave it back");
	memset(&ad, 0, sizeof(ad));
	ad.Width = 1024;
	ad.Height = 1024;
	ad.Format = CU_AD_FORMAT_FLOAT;
	ad.NumChannels = 4;
	CHECK(cuArrayCreate(&arr, &ad) == CUDA_SUCCESS &&
	          used(quota) == base + 16 * MiB,
	      "array charged");
	CHECK(cuArrayDestroy(arr) == CUDA_SUCCESS && used(quota) == base,
	      "array given back");
}

static void check_quota(uint64_t quota)
{
	CUdeviceptr a, b;
	size_t f, t;

	CHECK(cuMemGetInfo(&f, &t) == CUDA_SUCCESS && t == quota,
	      "cuMemGetInfo total %zu = quota", t);
	CHECK(cuMemAlloc(&a, quota / 2) == CUDA_SUCCESS, "half the quota");
	CHECK(cuMemAlloc(&b, quota / 2 + MiB) == CUDA_ERROR_OUT_OF_MEMORY,
	      "over quota refused with CUDA_ERROR_OUT_OF_MEMORY");
	cuMemFree(a);
	CHECK(cuMemAlloc(&b, quota / 2 + MiB) == CUDA_SUCCESS,
	      "after a free it fits");
	cuMemFree(b);
}

/* What the driver holds for this process (NVML's process list, which the
 * shim filters to the slice but does not change), or -1 if not listed. */
typedef struct {
	unsigned pid;
	unsigned long long used;
	unsigned gi, ci;
} proc_info;
typedef int (*nvml_procs_fn)(void *, unsigned *, proc_info *);

static long long driver_holds(void)
{
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	nvml_procs_fn list;
	proc_info infos[64];
	unsigned n = 64;
	void *dev;

	if (!h || !(list = (nvml_procs_fn)dlsym(
	                h, "nvmlDeviceGetComputeRunningProcesses_v3")))
		return -1;
	((nvml_init_fn)dlsym(h, "nvmlInit_v2"))();
	((nvml_handle_fn)dlsym(h, "nvmlDeviceGetHandleByIndex_v2"))(0, &dev);
	if (list(dev, &n, infos) != 0)
		return -1;
	for (unsigned i = 0; i < n; i++)
		if (infos[i].pid == (unsigned)getpid())
			return (long long)infos[i].used;
	return -1;
}

/* VMM granules mapped at the next place in one reservation, then
 * released with the mapping kept (the driver frees them at the unmap). */
static CUdeviceptr va;
static size_t va_size, va_at;

static CUresult vmm_mapped(size_t gran, CUdeviceptr *p)
{
	CUmemAllocationProp prop;
	CUmemAccessDesc acc;
	CUmemGenericAllocationHandle h;
	CUresult rc;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	memset(&acc, 0, sizeof(acc));
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (va_at + gran > va_size)
		return CUDA_ERROR_INVALID_VALUE;
	if ((rc = cuMemCreate(&h, gran, &prop, 0)) != CUDA_SUCCESS)
		return rc;
	if ((rc = cuMemMap(va + va_at, gran, 0, h, 0)) != CUDA_SUCCESS ||
	    (rc = cuMemSetAccess(va + va_at, gran, &acc, 1)) != CUDA_SUCCESS) {
		cuMemRelease(h);
		return rc;
	}
	cuMemRelease(h);
	*p = va + va_at;
	va_at += gran;
	return CUDA_SUCCESS;
}

static CUresult attack_one(const char *path, size_t n, CUdeviceptr *p)
{
	size_t pitch;

	if (strcmp(path, "pitch") == 0)
		return cuMemAllocPitch(p, &pitch, n, 1, 4);
	if (strcmp(path, "vmm-mapped") == 0)
		return vmm_mapped(n, p);
	return cuMemAlloc(p, n);
}

static void check_granularity_attack(uint64_t quota)
{
	static const struct {
		const char *path;
		size_t bytes;
	} cases[] = {{"alloc", 2 * MiB + 1},
	             {"alloc", 1},
	             {"alloc", 4096},
	             {"pitch", 2 * MiB + 1},
	             {"vmm-mapped", 2 * MiB}};
	static CUdeviceptr held[1 << 16];

	va_size = (size_t)quota * 4;
	if (cuMemAddressReserve(&va, va_size, 0, 0, 0) != CUDA_SUCCESS)
		va_size = 0;

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		long long before = driver_holds(), after;
		unsigned n = 0;
		CUresult rc;

		if (before < 0) {
			printf("skip granularity attack: this process is not "
			       "in NVML's process list\n");
			return;
		}
		while (n < sizeof(held) / sizeof(held[0]) &&
		       (rc = attack_one(cases[c].path, cases[c].bytes,
		                        &held[n])) == CUDA_SUCCESS)
			n++;
		after = driver_holds();
		CHECK(rc == CUDA_ERROR_OUT_OF_MEMORY,
		      "%s of %zu bytes ended with %d after %u", cases[c].path,
		      cases[c].bytes, rc, n);
		CHECK(after - before <= (long long)quota,
		      "%s of %zu bytes x %u: the driver holds %lld MiB more, "
		      "quota %llu MiB",
		      cases[c].path, cases[c].bytes, n, (after - before) >> 20,
		      (unsigned long long)quota >> 20);
		if (strcmp(cases[c].path, "vmm-mapped") == 0) {
			/* The unmaps give the memory (and charge) back. */
			while (n)
				cuMemUnmap(held[--n], cases[c].bytes);
			va_at = 0;
		}
		while (n)
			cuMemFree(held[--n]);
	}
	if (va_size)
		cuMemAddressFree(va, va_size);
}

static void check_procaddr(void)
{
	void *fn = NULL;
	CUdriverProcAddressQueryResult st;

	CHECK(cuGetProcAddress("cuMemAlloc", &fn, 12000, 0, &st) ==
	              CUDA_SUCCESS &&
	          fn == dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"),
	      "cuGetProcAddress(cuMemAlloc) is the shim's");
	CHECK(cuGetProcAddress("cuLaunchKernel", &fn, 12000,
	                       CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
	                       &st) == CUDA_SUCCESS &&
	          fn == dlsym(RTLD_DEFAULT, "cuLaunchKernel_ptsz"),
	      "per-thread cuLaunchKernel is the shim's _ptsz");
}

/* Spin kernels of ~2 ms, four in flight, for 4 s: share of GPU time. */
static void check_share(const char *ptx, double pct)
{
	CUmodule mod;
	CUfunction fn;
	CUevent s[4], e[4];
	int clock_khz = 0;
	long long cycles;
	void *args[] = {&cycles};
	double busy = 0, t0, t1;
	unsigned k = 0;

	CHECK(cuModuleLoad(&mod, ptx) == CUDA_SUCCESS, "module loaded");
	cuModuleGetFunction(&fn, mod, "spin");
	cuDeviceGetAttribute(&clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 0);
	cycles = (long long)clock_khz * 2; /* 2 ms */
	for (int i = 0; i < 4; i++) {
		cuEventCreate(&s[i], 0);
		cuEventCreate(&e[i], 0);
	}
	t0 = wall_s();
	for (; wall_s() - t0 < 4.0; k++) {
		float ms;
		if (k >= 4) {
			cuEventSynchronize(e[k % 4]);
			cuEventElapsedTime(&ms, s[k % 4], e[k % 4]);
			busy += ms / 1e3;
		}
		cuEventRecord(s[k % 4], NULL);
		cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
		cuEventRecord(e[k % 4], NULL);
	}
	cuCtxSynchronize();
	t1 = wall_s();
	for (unsigned i = k - 4; i < k; i++) {
		float ms;
		cuEventElapsedTime(&ms, s[i % 4], e[i % 4]);
		busy += ms / 1e3;
	}
	CHECK(busy / (t1 - t0) * 100 > pct - 5 &&
	          busy / (t1 - t0) * 100 < pct + 5,
	      "compute share %.1f%% (want %.0f%% +- 5)", busy / (t1 - t0) * 100,
	      pct);
}

int main(int argc, char **argv)
{
	CUcontext ctx;
	CUdevice dev;
	uint64_t quota;

	if (argc < 4) {
		fprintf(stderr, "usage: gpu_driver SPIN.PTX QUOTA PCT\n");
		return 2;
	}
	quota = strtoull(argv[2], NULL, 10);
	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		fprintf(stderr, "gpu_driver: no CUDA context\n");
		return 1;
	}
	check_quota(quota);
	check_paths(quota);
	check_granularity_attack(quota);
	check_nvml(quota);
	check_procaddr();
	check_share(argv[1], strtod(argv[3], NULL));
	return failures ? 1 : 0;
}
