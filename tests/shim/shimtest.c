/*
 * shimtest.c - a CUDA driver API program the shim's tests run with
 * libcnlab-cuda.so preloaded and the fake libcuda.so.1 linked.  It knows
 * nothing of the shim: it sees what any CUDA program sees, and checks that.
 *
 *   shimtest paths        every allocation path and its free, as charged
 *                         (CNLAB_REGION with ctx_reserve CNL_TEST_CTX)
 *   shimtest procaddr     cuGetProcAddress(_v2) and dlsym answers
 *   shimtest meminfo Q    cuMemGetInfo/cuDeviceTotalMem/NVML v1, v2 with a
 *                         quota of Q bytes (0: no region, real values)
 *   shimtest repl         line commands on stdin, one answer line each:
 *                         alloc N | fill N | free K | free-all | info |
 *                         used | async N (eight threads allocate N-byte
 *                         stream-ordered blocks until refused; answers
 *                         the count) | exit
 *   shimtest hammer       allocate and free at random in two threads until
 *                         killed (the kill -9 test)
 *   shimtest greedy MODE US SECONDS  launch US-microsecond kernels with
 *                         MODE kernel|ex|coop|ptsz|graph|grid, four in
 *                         flight
 *   shimtest ipc-export FILE   write a memory and an event handle to FILE
 *   shimtest ipc-open FILE     open them; prints "mem RC event RC"
 *   shimtest nvml         print the PIDs NVML lists, one a line
 *   shimtest threads      eight threads make the process's first CUDA
 *                         calls at once; prints "ok", waits for a line
 *   shimtest attack PATH N  allocate N bytes through PATH (alloc, pitch,
 *                         managed, array, array3d, mipmap, async, pool:
 *                         from a pool of its own, vmm-mapped: VMM handles
 *                         mapped then released) until
 *                         refused, keeping everything; prints "COUNT RC
 *                         MAXDRIVER CHARGED DRIVER": allocations made, the
 *                         refusal, the most the driver ever held for the
 *                         process, and at the end what the slice is charged
 *                         (total - free) and what the driver holds
 *
 * Exit status 0 when every check passed; failures name the check.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_api.h"
#include "fake_gpu.h"

static int failures;

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                        \
			fputc('\n', stderr);                                 \
			failures++;                                          \
		}                                                            \
	} while (0)

#define MiB (1ULL << 20)

static CUcontext ctx;

static void setup(void)
{
	CUdevice dev;

	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		fprintf(stderr, "shimtest: no CUDA context\n");
		exit(2);
	}
}

/* Device memory the slice holds, as the program can tell: total - free. */
static uint64_t used(void)
{
	size_t f = 0, t = 0;

	cuMemGetInfo(&f, &t);
	return (uint64_t)(t - f);
}

static uint64_t env_u64(const char *name)
{
	const char *v = getenv(name);

	return v ? strtoull(v, NULL, 0) : 0;
}

/* paths ------------------------------------------------------------------- */

static int cmd_paths(void)
{
	uint64_t ctx_bytes = env_u64("CNL_TEST_CTX"), base, pool_before;
	CUdeviceptr p, q;
	CUmemoryPool pool, mine;
	CUmemPoolProps pp;
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle h;
	CUDA_ARRAY_DESCRIPTOR ad;
	CUDA_ARRAY3D_DESCRIPTOR a3;
	CUarray arr;
	CUmipmappedArray mip;
	CUresult (*direct_alloc)(CUdeviceptr *, size_t);
	size_t pitch, gran = 0;

	setup();
	base = used();
	CHECK(base == ctx_bytes, "context footprint %llu, want %llu",
	      (unsigned long long)base, (unsigned long long)ctx_bytes);

	/* The driver reserves whole 2 MiB pages: 3 MiB takes 4. */
	CHECK(cuMemAlloc(&p, 3 * MiB) == CUDA_SUCCESS, "cuMemAlloc");
	CHECK(used() == base + 4 * MiB, "cuMemAlloc charged %llu",
	      (unsigned long long)(used() - base));
	CHECK(cnlfake_used() == 4 * MiB, "driver took %llu",
	      (unsigned long long)cnlfake_used());
	CHECK(cuMemFree(p) == CUDA_SUCCESS, "cuMemFree");
	CHECK(used() == base, "cuMemFree gave back");

	/* The fake pitches rows to 256 bytes: 1000 -> 1024; 1024 x 300
	 * bytes take one 2 MiB page. */
	CHECK(cuMemAllocPitch(&p, &pitch, 1000, 300, 4) == CUDA_SUCCESS,
	      "cuMemAllocPitch");
	CHECK(pitch == 1024, "pitch %zu", pitch);
	CHECK(used() == base + 2 * MiB, "pitch charged %llu, want %llu",
	      (unsigned long long)(used() - base), 2 * MiB);
	CHECK(cnlfake_used() == 2 * MiB, "driver took %llu for pitch",
	      (unsigned long long)cnlfake_used());
	CHECK(cuMemFree(p) == CUDA_SUCCESS && used() == base, "pitch free");

	CHECK(cuMemAllocManaged(&p, 5 * MiB, 1) == CUDA_SUCCESS, "managed");
	CHECK(used() == base + 6 * MiB, "managed charged %llu",
	      (unsigned long long)(used() - base));
	CHECK(cuMemFree(p) == CUDA_SUCCESS && used() == base, "managed free");

	/* Stream-ordered: charged at the pool (2 MiB grains), kept when
	 * freed, given back on trim. */
	CHECK(cuDeviceGetMemPool(&pool, 0) == CUDA_SUCCESS, "pool");
	CHECK(cuMemAllocAsync(&p, 3 * MiB, NULL) == CUDA_SUCCESS, "async");
	CHECK(used() == base + 4 * MiB, "async charged %llu",
	      (unsigned long long)(used() - base));
	CHECK(cuMemAllocAsync(&q, 1 * MiB, NULL) == CUDA_SUCCESS, "async 2");
	CHECK(used() == base + 4 * MiB, "async reuse charged %llu",
	      (unsigned long long)(used() - base));
	CHECK(cuMemFreeAsync(p, NULL) == CUDA_SUCCESS, "free async");
	CHECK(cuMemFreeAsync(q, NULL) == CUDA_SUCCESS, "free async 2");
	CHECK(used() == base + 4 * MiB, "pool keeps freed memory");
	CHECK(cuMemPoolTrimTo(pool, 0) == CUDA_SUCCESS, "trim");
	CHECK(used() == base, "trim gave back %llu",
	      (unsigned long long)(used() - base));
	/* cuMemFree of a stream-ordered pointer, and synchronise. */
	CHECK(cuMemAllocAsync(&p, 1 * MiB, NULL) == CUDA_SUCCESS, "async 3");
	CHECK(cuMemFree(p) == CUDA_SUCCESS, "cuMemFree of async");
	CHECK(cuCtxSynchronize() == CUDA_SUCCESS && used() == base,
	      "synchronise gave the pool back");

	memset(&pp, 0, sizeof(pp));
	pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	CHECK(cuMemPoolCreate(&mine, &pp) == CUDA_SUCCESS, "pool create");
	pool_before = used();
	CHECK(cuMemAllocFromPoolAsync(&p, 5 * MiB, mine, NULL) == CUDA_SUCCESS,
	      "from pool");
	CHECK(used() == pool_before + 6 * MiB, "from pool charged %llu",
	      (unsigned long long)(used() - pool_before));
	CHECK(cuMemFreeAsync(p, NULL) == CUDA_SUCCESS, "from pool free");
	CHECK(cuMemPoolTrimTo(mine, 2 * MiB) == CUDA_SUCCESS, "trim to 2");
	CHECK(used() == base + 2 * MiB, "partial trim %llu",
	      (unsigned long long)(used() - base));
	CHECK(cuMemPoolTrimTo(mine, 0) == CUDA_SUCCESS && used() == base,
	      "full trim");

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	/* VMM works in granules (2 MiB): another size is refused by the
	 * driver, and nothing stays charged. */
	CHECK(cuMemGetAllocationGranularity(&gran, &prop,
	                                    CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
	              CUDA_SUCCESS &&
	          gran == 2 * MiB,
	      "granularity %zu", gran);
	CHECK(cuMemGetAllocationGranularity(
	          &gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) ==
	              CUDA_SUCCESS &&
	          gran == 2 * MiB,
	      "recommended granularity %zu", gran);
	CHECK(cuMemCreate(&h, 2 * MiB + 1, &prop, 0) ==
	          CUDA_ERROR_INVALID_VALUE,
	      "vmm of 2 MiB + 1 refused");
	CHECK(used() == base && cnlfake_used() == 0, "refused vmm not charged");
	CHECK(cuMemCreate(&h, 4 * MiB, &prop, 0) == CUDA_SUCCESS, "vmm");
	CHECK(used() == base + 4 * MiB, "vmm charged");
	CHECK(cuMemRelease(h) == CUDA_SUCCESS && used() == base, "vmm free");
	/* Released while mapped: the driver keeps the memory, and the
	 * charge stays, until the last unmap. */
	{
		CUdeviceptr va;
		CUmemAccessDesc acc;

		memset(&acc, 0, sizeof(acc));
		acc.location = prop.location;
		acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		CHECK(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0) ==
		              CUDA_SUCCESS &&
		          cuMemCreate(&h, 4 * MiB, &prop, 0) == CUDA_SUCCESS &&
		          cuMemMap(va, 4 * MiB, 0, h, 0) == CUDA_SUCCESS &&
		          cuMemMap(va + 4 * MiB, 4 * MiB, 0, h, 0) ==
		              CUDA_SUCCESS &&
		          cuMemSetAccess(va, 8 * MiB, &acc, 1) == CUDA_SUCCESS,
		      "vmm mapped twice");
		CHECK(cuMemRelease(h) == CUDA_SUCCESS &&
		          used() == base + 4 * MiB && cnlfake_used() == 4 * MiB,
		      "released while mapped: still charged %llu, held %llu",
		      (unsigned long long)(used() - base),
		      (unsigned long long)cnlfake_used());
		CHECK(cuMemUnmap(va, 4 * MiB) == CUDA_SUCCESS &&
		          used() == base + 4 * MiB,
		      "one mapping left: still charged");
		CHECK(cuMemUnmap(va + 4 * MiB, 4 * MiB) == CUDA_SUCCESS &&
		          used() == base && cnlfake_used() == 0,
		      "last unmap gave back: charged %llu, held %llu",
		      (unsigned long long)(used() - base),
		      (unsigned long long)cnlfake_used());
		CHECK(cuMemAddressFree(va, 8 * MiB) == CUDA_SUCCESS,
		      "cuMemAddressFree");
	}
	prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
	CHECK(cuMemCreate(&h, 4 * MiB, &prop, 0) == CUDA_SUCCESS, "vmm host");
	CHECK(used() == base, "host vmm not charged");
	CHECK(cuMemRelease(h) == CUDA_SUCCESS && used() == base,
	      "vmm host free");

	memset(&ad, 0, sizeof(ad));
	ad.Width = 1024;
	ad.Height = 512;
	ad.Format = CU_AD_FORMAT_FLOAT;
	ad.NumChannels = 4;
	CHECK(cuArrayCreate(&arr, &ad) == CUDA_SUCCESS, "array");
	CHECK(used() == base + 1024 * 512 * 16, "array charged");
	CHECK(cuArrayDestroy(arr) == CUDA_SUCCESS && used() == base,
	      "array free");

	memset(&a3, 0, sizeof(a3));
	a3.Width = 64;
	a3.Height = 64;
	a3.Depth = 64;
	a3.Format = CU_AD_FORMAT_UNSIGNED_INT8;
	a3.NumChannels = 2;
	/* 512 KiB of texels in one 2 MiB page. */
	CHECK(cuArray3DCreate(&arr, &a3) == CUDA_SUCCESS, "array3d");
	CHECK(used() == base + 2 * MiB, "array3d charged %llu",
	      (unsigned long long)(used() - base));
	CHECK(cuArrayDestroy(arr) == CUDA_SUCCESS && used() == base,
	      "array3d free");

	/* 256x256 float, 3 levels: 256k + 64k + 16k bytes, one page. */
	a3.Width = 256;
	a3.Height = 256;
	a3.Depth = 0;
	a3.Format = CU_AD_FORMAT_FLOAT;
	a3.NumChannels = 1;
	CHECK(cuMipmappedArrayCreate(&mip, &a3, 3) == CUDA_SUCCESS, "mipmap");
	CHECK(used() == base + 2 * MiB, "mipmap charged %llu",
	      (unsigned long long)(used() - base));
	CHECK(cuMipmappedArrayDestroy(mip) == CUDA_SUCCESS && used() == base,
	      "mipmap free");

	/* A pointer the shim never saw goes to the driver untouched. */
	direct_alloc =
	    (CUresult(*)(CUdeviceptr *, size_t))cnlfake_sym("cuMemAlloc_v2");
	CHECK(direct_alloc(&p, 2 * MiB) == CUDA_SUCCESS, "direct alloc");
	CHECK(cuMemFree(p) == CUDA_SUCCESS, "unknown pointer freed");
	CHECK(used() == base, "unknown pointer not uncharged");
	CHECK(cuMemFree((CUdeviceptr)0x1234) == CUDA_ERROR_INVALID_VALUE,
	      "bogus pointer: the driver's answer");
	CHECK(cnlfake_used() == 0, "driver holds %llu after all frees",
	      (unsigned long long)cnlfake_used());
	return failures ? 1 : 0;
}

/* procaddr ----------------------------------------------------------------- */

typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t,
                              CUdriverProcAddressQueryResult *);

static int cmd_procaddr(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	gpa_v2_fn gpa2 = (gpa_v2_fn)dlsym(lib, "cuGetProcAddress_v2");
	gpa_v1_fn gpa1 = (gpa_v1_fn)dlsym(lib, "cuGetProcAddress");
	CUdriverProcAddressQueryResult st;
	void *fn = NULL;
	size_t f, t;

	setup();
	CHECK(lib, "libcuda.so.1 loaded");
	/* dlsym of hooked names gives the shim, of others the driver. */
	CHECK(dlsym(lib, "cuMemAlloc_v2") == (void *)cuMemAlloc_v2,
	      "dlsym(lib, cuMemAlloc_v2) is the shim's");
	CHECK(dlsym(RTLD_DEFAULT, "cuLaunchKernel") == (void *)cuLaunchKernel,
	      "dlsym(DEFAULT, cuLaunchKernel)");
	CHECK(dlsym(RTLD_NEXT, "cuMemFree_v2") == (void *)cuMemFree_v2,
	      "dlsym(NEXT, cuMemFree_v2)");
	CHECK(dlsym(lib, "cuInit") == cnlfake_sym("cuInit"),
	      "dlsym(lib, cuInit) is the driver's");
	CHECK(dlsym(RTLD_NEXT, "cuInit") == cnlfake_sym("cuInit"),
	      "dlsym(NEXT, cuInit) is the driver's");
	CHECK(dlsym(lib, "cuNoSuchThing") == NULL, "dlsym of nothing");
	CHECK(gpa2 && gpa2 != cnlfake_sym("cuGetProcAddress_v2"),
	      "cuGetProcAddress_v2 is wrapped");
	CHECK(gpa1 && gpa1 != cnlfake_sym("cuGetProcAddress"),
	      "cuGetProcAddress is wrapped");
	if (!gpa1 || !gpa2)
		return 1;

	CHECK(gpa2("cuMemAlloc", &fn, 12000, 0, &st) == CUDA_SUCCESS &&
	          st == CU_GET_PROC_ADDRESS_SUCCESS,
	      "lookup cuMemAlloc");
	CHECK(fn == (void *)cuMemAlloc_v2, "cuMemAlloc@12000 -> shim _v2");
	/* As the runtime does: allocate through what the lookup gave. */
	if (fn == (void *)cuMemAlloc_v2) {
		CUresult (*alloc)(CUdeviceptr *, size_t) =
		    (CUresult(*)(CUdeviceptr *, size_t))fn;
		uint64_t before = used();
		CUdeviceptr p;

		/* 1 MiB asked, one 2 MiB page charged. */
		CHECK(alloc(&p, MiB) == CUDA_SUCCESS &&
		          used() == before + 2 * MiB,
		      "allocation through the lookup charged");
		cuMemFree(p);
		CHECK(alloc(&p, env_u64("CNL_TEST_QUOTA") + 1) ==
		          CUDA_ERROR_OUT_OF_MEMORY,
		      "over quota through the lookup");
	}
	/* The 32-bit cuMemAlloc obtains device memory too: wrapped. */
	CHECK(gpa2("cuMemAlloc", &fn, 2000, 0, &st) == CUDA_SUCCESS &&
	          fn != cnlfake_sym("cuMemAlloc") &&
	          fn == dlsym(RTLD_DEFAULT, "cuMemAlloc"),
	      "cuMemAlloc@2000 -> the shim's v1");
	CHECK(gpa2("cuLaunchKernel", &fn, 12000,
	           CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
	           &st) == CUDA_SUCCESS &&
	          fn == (void *)cuLaunchKernel_ptsz,
	      "cuLaunchKernel per-thread -> shim _ptsz");
	CHECK(gpa2("cuLaunchKernel", &fn, 12000,
	           CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st) == CUDA_SUCCESS &&
	          fn == (void *)cuLaunchKernel,
	      "cuLaunchKernel legacy -> shim");
	CHECK(gpa2("cuLaunchKernelEx", &fn, 11000, 0, &st) ==
	              CUDA_ERROR_NOT_FOUND &&
	          st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
	      "cuLaunchKernelEx@11000: version not sufficient");
	CHECK(gpa2("cuNoSuchThing", &fn, 12000, 0, &st) ==
	              CUDA_ERROR_NOT_FOUND &&
	          st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
	      "unknown symbol");
	CHECK(gpa2("cuDriverGetVersion", &fn, 12000, 0, &st) == CUDA_SUCCESS &&
	          fn == cnlfake_sym("cuDriverGetVersion"),
	      "unhooked name untouched");
	/* The driver hands out an internal entry point for cuMemGetInfo:
	 * the variant is picked by version and wrapped all the same. */
	CHECK(gpa2("cuMemGetInfo", &fn, 12000, 0, &st) == CUDA_SUCCESS &&
	          fn == (void *)cuMemGetInfo_v2,
	      "internal entry point wrapped");
	if (fn == (void *)cuMemGetInfo_v2) {
		((CUresult(*)(size_t *, size_t *))fn)(&f, &t);
		CHECK(t == env_u64("CNL_TEST_QUOTA"), "quota seen through it");
	}
	CHECK(gpa2("cuGetProcAddress", &fn, 12000, 0, &st) == CUDA_SUCCESS &&
	          fn == (void *)gpa2,
	      "cuGetProcAddress through itself");
	CHECK(gpa1("cuMemAlloc", &fn, 12000, 0) == CUDA_SUCCESS &&
	          fn == (void *)cuMemAlloc_v2,
	      "v1 lookup wrapped");
	CHECK(gpa1("cuMemAllocAsync", &fn, 12000,
	           CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ==
	              CUDA_SUCCESS &&
	          fn == dlsym(RTLD_DEFAULT, "cuMemAllocAsync_ptsz"),
	      "v1 lookup per-thread");
	return failures ? 1 : 0;
}

/* meminfo ----------------------------------------------------------------- */

static int cmd_meminfo(uint64_t quota)
{
	uint64_t phys = env_u64("CNL_FAKE_MEM");
	uint64_t want_total = quota && quota < phys ? quota : phys;
	nvmlMemory_t m1;
	nvmlMemory_v2_t m2;
	nvmlDevice_t d;
	size_t f, t, tm;
	CUdeviceptr p;

	setup();
	CHECK(cuMemAlloc(&p, 10 * MiB) == CUDA_SUCCESS, "alloc");
	CHECK(cuMemGetInfo(&f, &t) == CUDA_SUCCESS, "cuMemGetInfo");
	CHECK(t == want_total, "total %zu want %llu", t,
	      (unsigned long long)want_total);
	CHECK(f == want_total - 10 * MiB, "free %zu", f);
	CHECK(cuDeviceTotalMem(&tm, 0) == CUDA_SUCCESS && tm == want_total,
	      "cuDeviceTotalMem %zu", tm);
	CHECK(nvmlInit_v2() == NVML_SUCCESS &&
	          nvmlDeviceGetHandleByIndex_v2(0, &d) == NVML_SUCCESS,
	      "nvml");
	CHECK(nvmlDeviceGetMemoryInfo(d, &m1) == NVML_SUCCESS, "nvml v1");
	CHECK(m1.total == want_total, "nvml v1 total %llu", m1.total);
	CHECK(m1.used == 10 * MiB, "nvml v1 used %llu", m1.used);
	CHECK(m1.free == want_total - 10 * MiB, "nvml v1 free %llu", m1.free);
	memset(&m2, 0, sizeof(m2));
	m2.version = nvmlMemory_v2;
	CHECK(nvmlDeviceGetMemoryInfo_v2(d, &m2) == NVML_SUCCESS, "nvml v2");
	CHECK(m2.total == want_total, "nvml v2 total %llu", m2.total);
	if (quota && quota < phys)
		CHECK(m2.free == want_total - 10 * MiB && m2.reserved == 0,
		      "nvml v2 free %llu reserved %llu", m2.free, m2.reserved);
	else
		CHECK(m2.free == phys - 10 * MiB - (5ULL << 20),
		      "nvml v2 real free %llu", m2.free);
	m2.version = 1;
	CHECK(nvmlDeviceGetMemoryInfo_v2(d, &m2) != NVML_SUCCESS,
	      "nvml v2 version mismatch passed through");
	cuMemFree(p);
	return failures ? 1 : 0;
}

/* repl -------------------------------------------------------------------- */

static CUdeviceptr held[1 << 16];
static size_t nheld;

struct async_fill {
	size_t n;
	unsigned long long count;
};

/* Allocate n-byte stream-ordered blocks until refused (kept: the test
 * reads what the driver holds afterwards). */
static void *async_filler(void *arg)
{
	struct async_fill *f = arg;
	CUdeviceptr p;

	cuCtxSetCurrent(ctx);
	while (f->count < 4096 &&
	       cuMemAllocAsync(&p, f->n, NULL) == CUDA_SUCCESS)
		f->count++;
	return NULL;
}

static unsigned long long async_fill(size_t n)
{
	struct async_fill f[8];
	pthread_t t[8];
	unsigned long long count = 0;

	for (int i = 0; i < 8; i++) {
		f[i] = (struct async_fill){n, 0};
		pthread_create(&t[i], NULL, async_filler, &f[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		count += f[i].count;
	}
	return count;
}

static int cmd_repl(void)
{
	char line[256];

	setup();
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		unsigned long long n = 0;
		char cmd[32];
		size_t f, t;
		CUresult rc;

		if (sscanf(line, "%31s %llu", cmd, &n) < 1)
			continue;
		if (strcmp(cmd, "alloc") == 0) {
			rc = cuMemAlloc(&held[nheld], n);
			if (rc == CUDA_SUCCESS)
				nheld++;
			printf("%s %d\n", rc ? "fail" : "ok", rc);
		} else if (strcmp(cmd, "fill") == 0) {
			unsigned long long count = 0;
			rc = CUDA_SUCCESS;
			while (nheld < sizeof(held) / sizeof(held[0]) &&
			       (rc = cuMemAlloc(&held[nheld], n)) ==
			           CUDA_SUCCESS) {
				nheld++;
				count++;
			}
			printf("%llu %d\n", count, rc);
		} else if (strcmp(cmd, "free") == 0) {
			while (n-- && nheld)
				cuMemFree(held[--nheld]);
			printf("ok\n");
		} else if (strcmp(cmd, "free-all") == 0) {
			while (nheld)
				cuMemFree(held[--nheld]);
			printf("ok\n");
		} else if (strcmp(cmd, "info") == 0) {
			cuMemGetInfo(&f, &t);
			printf("%zu %zu\n", f, t);
		} else if (strcmp(cmd, "used") == 0) {
			printf("%llu\n", (unsigned long long)cnlfake_used());
		} else if (strcmp(cmd, "async") == 0) {
			printf("%llu\n", async_fill(n));
		} else if (strcmp(cmd, "close-fds") == 0) {
			/* As a daemonising program does: every descriptor
			 * above stdio (n = 1: closefrom, else a loop of
			 * close), but the pipes of this conversation. */
			if (n == 1)
				closefrom(3);
			else
				for (int fd = 3; fd < 1024; fd++)
					close(fd);
			printf("ok\n");
		} else if (strcmp(cmd, "exit") == 0) {
			break;
		} else {
			printf("?\n");
		}
		fflush(stdout);
	}
	return 0;
}

/* hammer ------------------------------------------------------------------- */

static void *hammer(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg ^ (unsigned)getpid();
	CUdeviceptr mine[32] = {0};
	CUmemoryPool pool;

	cuCtxSetCurrent(ctx);
	cuDeviceGetMemPool(&pool, 0);
	for (;;) {
		unsigned i = (unsigned)rand_r(&seed) % 32;

		if (mine[i]) {
			if (i % 4 == 3)
				cuMemFreeAsync(mine[i], NULL);
			else
				cuMemFree(mine[i]);
			mine[i] = 0;
		} else if (i % 4 == 3) {
			cuMemAllocAsync(&mine[i],
			                1 + (size_t)rand_r(&seed) % (1 << 20),
			                NULL);
		} else if (cuMemAlloc(&mine[i],
		                      1 + (size_t)rand_r(&seed) % (4 << 20)) !=
		           CUDA_SUCCESS) {
			mine[i] = 0;
		}
		if (i == 0)
			cuMemPoolTrimTo(pool, 0);
	}
	return NULL;
}

static int cmd_hammer(void)
{
	pthread_t t;

	setup();
	pthread_create(&t, NULL, hammer, (void *)1);
	printf("ready\n");
	fflush(stdout);
	hammer((void *)2);
	return 0;
}

/* greedy ------------------------------------------------------------------- */

static int cmd_greedy(const char *mode, unsigned us, double seconds)
{
	CUevent inflight[4] = {0};
	CUmodule mod;
	CUfunction fn;
	CUstream s;
	CUlaunchConfig cfg;
	char name[32];
	struct timespec t0, t1;
	unsigned k = 0;

	setup();
	cuModuleLoadData(&mod, "fake");
	snprintf(name, sizeof(name), "busy_%u", us);
	cuModuleGetFunction(&fn, mod, name);
	cuStreamCreate(&s, 0);
	memset(&cfg, 0, sizeof(cfg));
	cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
	cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
	cfg.hStream = s;
	for (int i = 0; i < 4; i++)
		cuEventCreate(&inflight[i], 0);
	printf("ready\n");
	fflush(stdout);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;; k++) {
		CUresult rc;

		/* Like a training loop: a few steps in flight, no more. */
		if (k >= 4)
			cuEventSynchronize(inflight[k % 4]);
		if (strcmp(mode, "ex") == 0)
			rc = cuLaunchKernelEx(&cfg, fn, NULL, NULL);
		else if (strcmp(mode, "coop") == 0)
			rc = cuLaunchCooperativeKernel(fn, 1, 1, 1, 1, 1, 1, 0,
			                               s, NULL);
		else if (strcmp(mode, "ptsz") == 0)
			rc = cuLaunchKernel_ptsz(fn, 1, 1, 1, 1, 1, 1, 0, NULL,
			                         NULL, NULL);
		else if (strcmp(mode, "graph") == 0)
			rc = cuGraphLaunch((CUgraphExec)&mod, s);
		else if (strcmp(mode, "grid") == 0)
			/* The CUDA < 4.0 launch, as a program linked against
			 * it finds it (cuda.h marks it deprecated). */
			rc =
			    ((CUresult(*)(CUfunction, int, int, CUstream))dlsym(
			        RTLD_DEFAULT, "cuLaunchGridAsync"))(fn, 1, 1,
			                                            s);
		else
			rc = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, NULL,
			                    NULL);
		if (rc != CUDA_SUCCESS) {
			fprintf(stderr, "launch failed: %d\n", rc);
			return 1;
		}
		cuEventRecord(inflight[k % 4],
		              strcmp(mode, "ptsz") == 0 ? NULL : s);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if ((double)(t1.tv_sec - t0.tv_sec) +
		        (double)(t1.tv_nsec - t0.tv_nsec) / 1e9 >
		    seconds)
			break;
	}
	cuStreamSynchronize(s);
	return 0;
}

/* ipc --------------------------------------------------------------------- */

static int cmd_ipc_export(const char *file)
{
	CUipcMemHandle mh;
	CUipcEventHandle eh;
	CUdeviceptr p;
	CUevent e;
	FILE *f;

	setup();
	if (cuMemAlloc(&p, MiB) != CUDA_SUCCESS ||
	    cuIpcGetMemHandle(&mh, p) != CUDA_SUCCESS ||
	    cuEventCreate(&e, 0x3) != CUDA_SUCCESS ||
	    cuIpcGetEventHandle(&eh, e) != CUDA_SUCCESS)
		return 1;
	f = fopen(file, "wb");
	if (!f || fwrite(&mh, sizeof(mh), 1, f) != 1 ||
	    fwrite(&eh, sizeof(eh), 1, f) != 1)
		return 1;
	fclose(f);
	return 0;
}

typedef CUresult (*ipc_open_fn)(CUdeviceptr *, CUipcMemHandle, unsigned int);

static int cmd_ipc_open(const char *file)
{
	CUipcMemHandle mh;
	CUipcEventHandle eh;
	CUdeviceptr p;
	CUevent e;
	FILE *f = fopen(file, "rb");
	/* The symbol without _v2, as a program built before CUDA 11 finds
	 * it (the loader), and as cuGetProcAddress hands it out for such a
	 * version. */
	ipc_open_fn legacy =
	    (ipc_open_fn)dlsym(RTLD_DEFAULT, "cuIpcOpenMemHandle");
	void *proc = NULL;
	CUdriverProcAddressQueryResult st;

	setup();
	if (!f || fread(&mh, sizeof(mh), 1, f) != 1 ||
	    fread(&eh, sizeof(eh), 1, f) != 1)
		return 1;
	fclose(f);
	if (!legacy ||
	    cuGetProcAddress("cuIpcOpenMemHandle", &proc, 10000, 0, &st) !=
	        CUDA_SUCCESS ||
	    !proc)
		return 1;
	printf("mem %d legacy %d proc %d event %d\n",
	       cuIpcOpenMemHandle(&p, mh, 1), legacy(&p, mh, 1),
	       ((ipc_open_fn)proc)(&p, mh, 1), cuIpcOpenEventHandle(&e, eh));
	return 0;
}

/* nvml -------------------------------------------------------------------- */

static int cmd_nvml(void)
{
	nvmlProcessInfo_t infos[64];
	unsigned n = 64;
	nvmlDevice_t d;
	CUdeviceptr p;

	setup();
	cuMemAlloc(&p, MiB); /* attached to the slice */
	nvmlInit_v2();
	nvmlDeviceGetHandleByIndex_v2(0, &d);
	if (nvmlDeviceGetComputeRunningProcesses_v3(d, &n, infos) !=
	    NVML_SUCCESS)
		return 1;
	for (unsigned i = 0; i < n; i++)
		printf("%u\n", infos[i].pid);
	return 0;
}

/* threads ----------------------------------------------------------------- */

static pthread_barrier_t start_line;
static _Atomic int thread_failures;

static void *first_call(void *arg)
{
	CUcontext c;
	CUdeviceptr p;

	(void)arg;
	pthread_barrier_wait(&start_line);
	if (cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(c) != CUDA_SUCCESS ||
	    cuMemAlloc(&p, MiB) != CUDA_SUCCESS)
		atomic_fetch_add(&thread_failures, 1);
	return NULL;
}

static int cmd_threads(void)
{
	pthread_t t[8];
	char line[16];

	cuInit(0); /* not hooked: the shim's first call is in the threads */
	pthread_barrier_init(&start_line, NULL, 8);
	for (int i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, first_call, NULL);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	printf("%s\n", atomic_load(&thread_failures) ? "fail" : "ok");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	return 0;
}

/* attack ------------------------------------------------------------------- */

/* One allocation of n bytes through path, kept for ever. */
static CUresult attack_one(const char *path, size_t n)
{
	CUDA_ARRAY_DESCRIPTOR ad;
	CUDA_ARRAY3D_DESCRIPTOR a3;
	CUdeviceptr p;
	CUarray arr;
	CUmipmappedArray mip;
	size_t pitch;

	memset(&ad, 0, sizeof(ad));
	memset(&a3, 0, sizeof(a3));
	/* n one-byte texels in one row. */
	ad.Width = a3.Width = n;
	ad.Format = a3.Format = CU_AD_FORMAT_UNSIGNED_INT8;
	ad.NumChannels = a3.NumChannels = 1;
	if (strcmp(path, "pitch") == 0)
		return cuMemAllocPitch(&p, &pitch, n, 1, 4);
	if (strcmp(path, "managed") == 0)
		return cuMemAllocManaged(&p, n, 1);
	if (strcmp(path, "array") == 0)
		return cuArrayCreate(&arr, &ad);
	if (strcmp(path, "array3d") == 0)
		return cuArray3DCreate(&arr, &a3);
	if (strcmp(path, "mipmap") == 0)
		return cuMipmappedArrayCreate(&mip, &a3, 1);
	if (strcmp(path, "async") == 0)
		return cuMemAllocAsync(&p, n, NULL);
	if (strcmp(path, "vmm-mapped") == 0) {
		/* Granules mapped, then released with the mapping kept: the
		 * driver keeps the memory until the unmap. */
		static CUdeviceptr va;
		static size_t at;
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
		if (!va && cuMemAddressReserve(&va, 64ULL << 30, 0, 0, 0) !=
		               CUDA_SUCCESS)
			return CUDA_ERROR_INVALID_VALUE;
		if ((rc = cuMemCreate(&h, n, &prop, 0)) != CUDA_SUCCESS)
			return rc;
		if (cuMemMap(va + at, n, 0, h, 0) != CUDA_SUCCESS ||
		    cuMemSetAccess(va + at, n, &acc, 1) != CUDA_SUCCESS ||
		    cuMemRelease(h) != CUDA_SUCCESS)
			return CUDA_ERROR_INVALID_VALUE;
		at += n;
		return CUDA_SUCCESS;
	}
	if (strcmp(path, "pool") == 0) {
		static CUmemoryPool mine;
		CUmemPoolProps pp;

		memset(&pp, 0, sizeof(pp));
		pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
		pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		if (!mine && cuMemPoolCreate(&mine, &pp) != CUDA_SUCCESS)
			return CUDA_ERROR_INVALID_VALUE;
		return cuMemAllocFromPoolAsync(&p, n, mine, NULL);
	}
	return cuMemAlloc(&p, n);
}

static int cmd_attack(const char *path, size_t n)
{
	uint64_t count = 0, max = 0;
	CUresult rc;

	setup();
	while ((rc = attack_one(path, n)) == CUDA_SUCCESS &&
	       count < (1ULL << 22)) {
		count++;
		if (cnlfake_used() > max)
			max = cnlfake_used();
	}
	printf("%llu %d %llu %llu %llu\n", (unsigned long long)count, rc,
	       (unsigned long long)max, (unsigned long long)used(),
	       (unsigned long long)cnlfake_used());
	return 0;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";

	if (strcmp(cmd, "paths") == 0)
		return cmd_paths();
	if (strcmp(cmd, "procaddr") == 0)
		return cmd_procaddr();
	if (strcmp(cmd, "meminfo") == 0 && argc > 2)
		return cmd_meminfo(strtoull(argv[2], NULL, 0));
	if (strcmp(cmd, "repl") == 0)
		return cmd_repl();
	if (strcmp(cmd, "hammer") == 0)
		return cmd_hammer();
	if (strcmp(cmd, "greedy") == 0 && argc > 4)
		return cmd_greedy(argv[2], (unsigned)strtoul(argv[3], NULL, 10),
		                  strtod(argv[4], NULL));
	if (strcmp(cmd, "ipc-export") == 0 && argc > 2)
		return cmd_ipc_export(argv[2]);
	if (strcmp(cmd, "ipc-open") == 0 && argc > 2)
		return cmd_ipc_open(argv[2]);
	if (strcmp(cmd, "nvml") == 0)
		return cmd_nvml();
	if (strcmp(cmd, "threads") == 0)
		return cmd_threads();
	if (strcmp(cmd, "attack") == 0 && argc > 3)
		return cmd_attack(argv[2], (size_t)strtoull(argv[3], NULL, 0));
	fprintf(stderr, "usage: shimtest paths|procaddr|meminfo Q|repl|hammer|"
	                "greedy MODE US S|ipc-export F|ipc-open F|nvml|"
	                "threads|attack PATH N\n");
	return 2;
}
