/*
 * escapetest.c - a CUDA driver API program that tries, as a hostile tenant
 * would, every driver export through which device memory could be
 * obtained uncharged or another project's memory opened (the "hook" rows
 * of src/shim/driver-exports.tsv that are not plain allocations), and
 * sweeps cuGetProcAddress over versions and flags.  Run with the shim
 * preloaded over the fake driver by test_shim_escapes; written against
 * the shim's ABI header (no cuda.h), so it builds anywhere.
 *
 *   escapetest escapes        the quota attacks (CNL_TEST_QUOTA bytes)
 *   escapetest ctx MODE       create a context with cuCtxCreate (v1) or
 *                             cuGreenCtxCreate (MODE v1|green), print the
 *                             slice's use (total - free)
 *   escapetest share-export FILE  export a VMM allocation (fd, fabric), a
 *                             pool (fd) and a pool pointer; write them to
 *                             FILE, print "ready", wait for a line
 *   escapetest share-import FILE  import each; print
 *                             "vmm-fd RC vmm-fabric RC pool-fd RC ptr RC"
 *   escapetest procaddr-sweep every hooked base name x versions x flags
 *                             x both lookups, against the driver's answer
 *
 * Exit status 0 when every check passed; failures name the check.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim/cuda-abi.h"
#include "fake_gpu.h"

/* The driver entry points this program calls (cuda.h's declarations). */
CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc,
                          CUdevice dev, unsigned int flags);
CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize);
CUresult cuMemFree(CUdeviceptr_v1 dptr);
CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                         unsigned int w, unsigned int h, unsigned int e);
CUresult cuArrayCreate(CUarray *p, const CUDA_ARRAY_DESCRIPTOR_v1 *d);
CUresult cuArray3DCreate(CUarray *p, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d);
CUresult cuMemGetInfo(unsigned int *free, unsigned int *total);
CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
CUresult cuGraphCreate(CUgraph *g, unsigned int flags);
CUresult cuGraphAddMemAllocNode(CUgraphNode *n, CUgraph g,
                                const CUgraphNode *deps, size_t ndeps,
                                CUDA_MEM_ALLOC_NODE_PARAMS *p);
CUresult cuGraphAddNode(CUgraphNode *n, CUgraph g, const CUgraphNode *deps,
                        size_t ndeps, CUgraphNodeParams *p);
CUresult cuGraphAddNode_v2(CUgraphNode *n, CUgraph g, const CUgraphNode *deps,
                           const CUgraphEdgeData *edges, size_t ndeps,
                           CUgraphNodeParams *p);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g,
                                     unsigned long long flags);
CUresult cuGraphExecDestroy(CUgraphExec e);
CUresult cuStreamCreate(CUstream *s, unsigned int flags);
CUresult cuStreamBeginCapture_v2(CUstream s, int mode);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, int mode);
CUresult cuStreamEndCapture(CUstream s, CUgraph *g);
CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t n, CUstream s);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t n, CUmemoryPool pool,
                                 CUstream s);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s);
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev);
CUresult cuMemPoolCreate(CUmemoryPool *pool, const void *props);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuImportExternalMemory(CUexternalMemory *m,
                                const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *d);
CUresult cuCtxSetLimit(CUlimit limit, size_t value);
CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags);
CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
                                      CUmemAllocationHandleType type,
                                      unsigned long long flags);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h,
                                        void *in,
                                        CUmemAllocationHandleType type);
CUresult cuMemPoolExportToShareableHandle(void *out, CUmemoryPool pool,
                                          CUmemAllocationHandleType type,
                                          unsigned long long flags);
CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *in,
                                            CUmemAllocationHandleType type,
                                            unsigned long long flags);
CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *out, CUdeviceptr p);
CUresult cuMemPoolImportPointer(CUdeviceptr *p, CUmemoryPool pool,
                                CUmemPoolPtrExportData *data);

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

static CUdevice dev;

static void setup(int primary)
{
	CUcontext ctx;

	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    (primary && (cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
	                 cuCtxSetCurrent(ctx) != CUDA_SUCCESS))) {
		fprintf(stderr, "escapetest: no CUDA context\n");
		exit(2);
	}
}

/* The slice's use as the program sees it: total - free. */
static uint64_t used(void)
{
	size_t f = 0, t = 0;

	cuMemGetInfo_v2(&f, &t);
	return (uint64_t)(t - f);
}

static uint64_t env_u64(const char *name)
{
	const char *v = getenv(name);

	return v ? strtoull(v, NULL, 0) : 0;
}

/* escapes ------------------------------------------------------------------ */

/* The v1 descriptors (32-bit extents), as cuda.h lays them out. */
struct CUDA_ARRAY_DESCRIPTOR_v1_st {
	unsigned int Width, Height;
	CUarray_format Format;
	unsigned int NumChannels;
};
struct CUDA_ARRAY3D_DESCRIPTOR_v1_st {
	unsigned int Width, Height, Depth;
	CUarray_format Format;
	unsigned int NumChannels, Flags;
};

static void legacy_32bit(uint64_t quota)
{
	CUdeviceptr_v1 p[256];
	unsigned int f = 0, t = 0, pitch = 0;
	uint64_t got = 0, before = cnlfake_used();
	struct CUDA_ARRAY_DESCRIPTOR_v1_st a = {4096, 4096, 0x01, 4};
	struct CUDA_ARRAY3D_DESCRIPTOR_v1_st a3 = {1024, 1024, 64, 0x01, 4, 0};
	CUdeviceptr_v1 q;
	CUarray arr;
	int n = 0;

	/* Allocate 16 MiB at a time through the 32-bit entry point. */
	while (n < 256 && cuMemAlloc(&p[n], 16 * MiB) == CUDA_SUCCESS) {
		got += 16 * MiB;
		n++;
	}
	CHECK(got <= quota,
	      "cuMemAlloc (32-bit) obtained %llu bytes under a "
	      "quota of %llu",
	      (unsigned long long)got, (unsigned long long)quota);
	CHECK(cnlfake_used() - before <= quota,
	      "the driver gave %llu bytes through cuMemAlloc (32-bit)",
	      (unsigned long long)(cnlfake_used() - before));
	CHECK(n > 0 && used() >= got, "cuMemAlloc (32-bit) charged");
	for (int i = 0; i < n; i++)
		cuMemFree(p[i]);
	/* The granularity attack through it: 2 MiB + 1 takes two pages. */
	for (n = 0; n < 256 && cuMemAlloc(&p[n], 2 * MiB + 1) == CUDA_SUCCESS;)
		n++;
	CHECK(cnlfake_used() - before <= quota,
	      "the driver gave %llu bytes through cuMemAlloc (32-bit) in "
	      "2 MiB + 1 steps under a quota of %llu",
	      (unsigned long long)(cnlfake_used() - before),
	      (unsigned long long)quota);
	for (int i = 0; i < n; i++)
		cuMemFree(p[i]);
	CHECK(used() < 16 * MiB, "cuMemFree (32-bit) gave back");

	CHECK(cuMemGetInfo(&f, &t) == CUDA_SUCCESS && t == quota,
	      "cuMemGetInfo (32-bit) total %u is the quota", t);
	CHECK(cuDeviceTotalMem(&t, dev) == CUDA_SUCCESS && t == quota,
	      "cuDeviceTotalMem (32-bit) %u is the quota", t);

	before = cnlfake_used();
	CHECK(cuMemAllocPitch(&q, &pitch, 64 * 1024, 2048, 4) ==
	          CUDA_ERROR_NOT_PERMITTED,
	      "cuMemAllocPitch (32-bit) refused");
	CHECK(cuArrayCreate(&arr, &a) == CUDA_ERROR_NOT_PERMITTED,
	      "cuArrayCreate (32-bit) refused");
	CHECK(cuArray3DCreate(&arr, &a3) == CUDA_ERROR_NOT_PERMITTED,
	      "cuArray3DCreate (32-bit) refused");
	CHECK(cnlfake_used() == before, "nothing obtained through them");
}

static void graph_memory(uint64_t quota)
{
	uint64_t big = quota * 4, before = cnlfake_used();
	CUDA_MEM_ALLOC_NODE_PARAMS p = {.bytesize = big};
	CUgraphNodeParams np;
	CUgraphNode node;
	CUgraphExec exec;
	CUgraph g;
	CUstream s;
	CUdeviceptr d;

	CHECK(cuGraphCreate(&g, 0) == CUDA_SUCCESS, "graph");
	CHECK(cuGraphAddMemAllocNode(&node, g, NULL, 0, &p) ==
	          CUDA_ERROR_NOT_PERMITTED,
	      "cuGraphAddMemAllocNode refused");
	memset(&np, 0, sizeof(np));
	np.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
	np.u.alloc.bytesize = big;
	CHECK(cuGraphAddNode_v2(&node, g, NULL, NULL, 0, &np) ==
	          CUDA_ERROR_NOT_PERMITTED,
	      "cuGraphAddNode_v2 of an allocation node refused");
	CHECK(cuGraphAddNode(&node, g, NULL, 0, &np) ==
	          CUDA_ERROR_NOT_PERMITTED,
	      "cuGraphAddNode of an allocation node refused");
	if (cuGraphInstantiateWithFlags(&exec, g, 0) == CUDA_SUCCESS) {
		CHECK(cnlfake_used() - before <= quota,
		      "graph memory obtained: %llu bytes under a quota of "
		      "%llu",
		      (unsigned long long)(cnlfake_used() - before),
		      (unsigned long long)quota);
		cuGraphExecDestroy(exec);
	}

	/* Stream capture turns cuMemAllocAsync into an allocation node. */
	CHECK(cuStreamCreate(&s, 0) == CUDA_SUCCESS, "stream");
	CHECK(cuStreamBeginCapture_v2(s, 0) == CUDA_SUCCESS, "capture");
	CHECK(cuMemAllocAsync(&d, big, s) == CUDA_ERROR_NOT_PERMITTED,
	      "cuMemAllocAsync while capturing refused");
	CHECK(cuMemAllocFromPoolAsync(&d, big, NULL, s) ==
	          CUDA_ERROR_NOT_PERMITTED,
	      "cuMemAllocFromPoolAsync while capturing refused");
	CHECK(cuStreamEndCapture(s, &g) == CUDA_SUCCESS, "end capture");
	CHECK(cuStreamBeginCapture_v2_ptsz(NULL, 0) == CUDA_SUCCESS,
	      "capture (per-thread stream)");
	CHECK(cuMemAllocAsync_ptsz(&d, big, NULL) == CUDA_ERROR_NOT_PERMITTED,
	      "cuMemAllocAsync_ptsz while capturing refused");
	CHECK(cuStreamEndCapture_ptsz(NULL, &g) == CUDA_SUCCESS,
	      "end capture (per-thread stream)");
	if (cuGraphInstantiateWithFlags(&exec, g, 0) == CUDA_SUCCESS) {
		CHECK(cnlfake_used() - before <= quota,
		      "captured graph memory obtained: %llu bytes under a "
		      "quota of %llu",
		      (unsigned long long)(cnlfake_used() - before),
		      (unsigned long long)quota);
		cuGraphExecDestroy(exec);
	}
	/* Not capturing: the ordinary stream-ordered path still works. */
	CHECK(cuMemAllocAsync(&d, MiB, s) == CUDA_SUCCESS,
	      "cuMemAllocAsync outside capture");
	cuMemFreeAsync(d, s);
	cuStreamSynchronize(s);
}

static void context_limits(uint64_t quota)
{
	uint64_t before = cnlfake_used(), u0 = used();

	CHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, (size_t)quota * 4) ==
	          CUDA_ERROR_OUT_OF_MEMORY,
	      "a malloc heap of 4x the quota refused");
	CHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 64 * 1024) ==
	          CUDA_ERROR_OUT_OF_MEMORY,
	      "a 64 KiB stack for every resident thread refused");
	/* 2^51 more bytes of stack for each of the 132 x 2048 resident
	 * threads is 33 x 2^64: a product that wraps to nothing. */
	CHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, ((size_t)1 << 51) + 1024) ==
	          CUDA_ERROR_OUT_OF_MEMORY,
	      "a stack whose size times the resident threads wraps refused");
	CHECK(used() == u0, "nothing charged for a wrapping stack size");
	CHECK(cnlfake_used() == before, "nothing reserved by refused limits");
	CHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 16 * MiB) ==
	          CUDA_SUCCESS,
	      "a 16 MiB heap within the quota");
	CHECK(used() == u0 + 8 * MiB, "the heap's growth (8 MiB) charged");
	CHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 8 * MiB) ==
	              CUDA_SUCCESS &&
	          used() == u0,
	      "lowering the heap gives back");
}

/*
 * A library of the tenant's loaded into a new link-map namespace would get
 * a libcuda.so.1 of its own, without the shim: refused while the process
 * belongs to a slice, however dlmopen is reached; dlopen still works and
 * is charged.
 */
typedef void *(*dlmopen_fn)(Lmid_t, const char *, int);
typedef int (*escape_fn)(unsigned long long);

static void loader_namespaces(uint64_t quota)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	dlmopen_fn doors[] = {
	    dlmopen,
	    (dlmopen_fn)dlsym(RTLD_DEFAULT, "dlmopen"),
	    (dlmopen_fn)dlsym(RTLD_NEXT, "dlmopen"),
	    libc ? (dlmopen_fn)dlsym(libc, "dlmopen") : dlmopen,
	};
	void *h;
	escape_fn f;

	for (size_t i = 0; i < sizeof(doors) / sizeof(doors[0]); i++) {
		h = doors[i] ? doors[i](LM_ID_NEWLM, ESCAPE_NS, RTLD_NOW)
		             : NULL;
		f = h ? (escape_fn)dlsym(h, "cnl_escape_alloc") : NULL;
		CHECK(!h || (f && f(quota * 4) != CUDA_SUCCESS),
		      "4x the quota from a private link-map namespace "
		      "(door %zu)",
		      i);
	}
	h = dlopen(ESCAPE_NS, RTLD_NOW);
	f = h ? (escape_fn)dlsym(h, "cnl_escape_alloc") : NULL;
	CHECK(f && f(quota * 4) == CUDA_ERROR_OUT_OF_MEMORY,
	      "4x the quota from a library loaded with dlopen refused");
}

static int cmd_escapes(void)
{
	uint64_t quota = env_u64("CNL_TEST_QUOTA");
	CUexternalMemory ext;
	int desc[64] = {1}; /* handle type 1: an opaque file descriptor */

	setup(1);
	legacy_32bit(quota);
	graph_memory(quota);
	context_limits(quota);
	loader_namespaces(quota);
	CHECK(cuImportExternalMemory(
	          &ext, (const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *)desc) ==
	          CUDA_ERROR_NOT_PERMITTED,
	      "cuImportExternalMemory refused");
	return failures ? 1 : 0;
}

/* ctx -----------------------------------------------------------------------
 */

static int cmd_ctx(const char *mode)
{
	CUcontext c;
	CUgreenCtx g;
	int desc;
	CUresult rc;

	setup(0);
	if (strcmp(mode, "green") == 0) {
		rc = cuGreenCtxCreate(&g, (CUdevResourceDesc)&desc, dev, 0);
		if (rc == CUDA_SUCCESS)
			rc = cuCtxSetCurrent((CUcontext)g);
	} else {
		rc = cuCtxCreate(&c, 0, dev);
	}
	printf("%d %llu\n", rc, (unsigned long long)used());
	return rc == CUDA_SUCCESS ? 0 : 1;
}

/* share -----------------------------------------------------------------------
 */

static void hex(FILE *f, const void *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%02x", ((const unsigned char *)p)[i]);
	fputc(' ', f);
}

static int unhex(const char *s, void *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		((unsigned char *)p)[i] = (unsigned char)v;
	}
	return 0;
}

static int cmd_share_export(const char *file)
{
	CUmemAllocationProp prop = {
	    .type = CU_MEM_ALLOCATION_TYPE_PINNED,
	    .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR |
	                            CU_MEM_HANDLE_TYPE_FABRIC,
	    .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
	CUmemGenericAllocationHandle h;
	CUmemFabricHandle fab;
	CUmemPoolPtrExportData data;
	int pool_props[22] = {CU_MEM_ALLOCATION_TYPE_PINNED,
	                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
	                      CU_MEM_LOCATION_TYPE_DEVICE, 0};
	CUmemoryPool pool;
	CUdeviceptr d;
	int vfd = -1, pfd = -1;
	char line[16];
	FILE *f;

	setup(1);
	CHECK(cuMemCreate(&h, 2 * MiB, &prop, 0) == CUDA_SUCCESS, "create");
	CHECK(cuMemExportToShareableHandle(
	          &vfd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
	          CUDA_SUCCESS,
	      "export fd");
	CHECK(cuMemExportToShareableHandle(&fab, h, CU_MEM_HANDLE_TYPE_FABRIC,
	                                   0) == CUDA_SUCCESS,
	      "export fabric");
	/* CUmemPoolProps: pinned, shareable as a file descriptor, device 0. */
	CHECK(cuMemPoolCreate(&pool, pool_props) == CUDA_SUCCESS, "pool");
	CHECK(cuMemPoolExportToShareableHandle(
	          &pfd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ==
	          CUDA_SUCCESS,
	      "export pool");
	CHECK(cuMemAllocFromPoolAsync(&d, MiB, pool, NULL) == CUDA_SUCCESS,
	      "pool alloc");
	CHECK(cuMemPoolExportPointer(&data, d) == CUDA_SUCCESS,
	      "export pointer");
	if (failures)
		return 1;
	f = fopen(file, "w");
	if (!f)
		return 1;
	fprintf(f, "%d %d %d ", (int)getpid(), vfd, pfd);
	hex(f, &fab, sizeof(fab));
	hex(f, &data, sizeof(data));
	fclose(f);
	printf("ready\n");
	fflush(stdout);
	/* Stay alive (the importers open /proc/PID/fd/N) until told. */
	if (!fgets(line, sizeof(line), stdin))
		return 0;
	return 0;
}

static int open_fd(int pid, int fd)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
	return open(path, O_RDONLY | O_CLOEXEC);
}

static int cmd_share_import(const char *file)
{
	char fab_hex[200], data_hex[200];
	CUmemFabricHandle fab;
	CUmemPoolPtrExportData data;
	CUmemGenericAllocationHandle h;
	CUmemoryPool pool = NULL, own;
	CUdeviceptr d;
	int pid, vfd, pfd, a, b;
	CUresult r1, r2, r3, r4;
	FILE *f = fopen(file, "r");

	setup(1);
	if (!f ||
	    fscanf(f, "%d %d %d %199s %199s", &pid, &vfd, &pfd, fab_hex,
	           data_hex) != 5 ||
	    unhex(fab_hex, &fab, sizeof(fab)) < 0 ||
	    unhex(data_hex, &data, sizeof(data)) < 0) {
		fprintf(stderr, "escapetest: cannot read %s\n", file);
		return 2;
	}
	fclose(f);
	a = open_fd(pid, vfd);
	b = open_fd(pid, pfd);
	if (a < 0 || b < 0) {
		fprintf(stderr, "escapetest: cannot open the exporter's fds\n");
		return 2;
	}
	r1 = cuMemImportFromShareableHandle(
	    &h, (void *)(intptr_t)a, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	r2 =
	    cuMemImportFromShareableHandle(&h, &fab, CU_MEM_HANDLE_TYPE_FABRIC);
	r3 = cuMemPoolImportFromShareableHandle(
	    &pool, (void *)(intptr_t)b,
	    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	/* A pointer is imported into an imported pool; where the pool
	 * import was refused, into one imported in the exporter's project
	 * would be needed: ask with our own pool, which the driver refuses
	 * too, but the shim must refuse first. */
	cuDeviceGetMemPool(&own, dev);
	r4 = cuMemPoolImportPointer(&d, pool ? pool : own, &data);
	printf("vmm-fd %d vmm-fabric %d pool-fd %d ptr %d\n", r1, r2, r3, r4);
	return 0;
}

/* procaddr-sweep --------------------------------------------------------------
 *
 * For every libcuda base name hooks.def hooks, every cudaVersion that
 * crosses a variant's introduction, the three flags and both lookups: the
 * shim's answer has the driver's status; where the driver hands out a
 * hooked variant's exported entry point the shim hands out its wrapper of
 * that variant; where it hands out an internal one, the wrapper of the
 * variant the driver would pick; never the driver's own pointer.
 */
static const struct {
	const char *lib, *name, *base;
	int version, ptds;
} hooks[] = {
#define CNL_HOOK(lib, ret, name, base, ver, ptds, params, args) \
	{#lib, #name, #base, ver, ptds},
#include "shim/hooks.def"
#undef CNL_HOOK
};
#define NHOOKS (sizeof(hooks) / sizeof(hooks[0]))

typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t,
                            CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa1_fn)(const char *, void **, int, cuuint64_t);

static const int versions[] = {1000,  2000,  2010,  2020,  3000,  3010,  3020,
                               4000,  4010,  5000,  6000,  7000,  8000,  9000,
                               10000, 10010, 10020, 11000, 11010, 11020, 11030,
                               11040, 11060, 12000, 12010, 12020, 12030, 12040,
                               12050, 12080, 13000, 13010, 99999};
static const cuuint64_t flag_set[] = {
    CU_GET_PROC_ADDRESS_DEFAULT, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM};

static int hooked(const char *name)
{
	for (size_t i = 0; i < NHOOKS; i++)
		if (strcmp(hooks[i].lib, "CU") == 0 &&
		    strcmp(hooks[i].name, name) == 0)
			return 1;
	return 0;
}

/* The variant the driver picks for base at version v (internal pointer). */
static const char *pick(const char *base, int v, int want_ptds)
{
	int best[2] = {-1, -1};

	for (size_t i = 0; i < NHOOKS; i++) {
		int p = hooks[i].ptds;
		if (strcmp(hooks[i].lib, "CU") != 0 ||
		    strcmp(hooks[i].base, base) != 0 || hooks[i].version > v)
			continue;
		if (best[p] < 0 || hooks[i].version > hooks[best[p]].version)
			best[p] = (int)i;
	}
	if (want_ptds && best[1] >= 0)
		return hooks[best[1]].name;
	return best[0] >= 0 ? hooks[best[0]].name : NULL;
}

static void sweep_one(const char *base, void *shim, void *shim_base,
                      gpa2_fn drv, gpa2_fn gpa2, gpa1_fn gpa1, int v,
                      cuuint64_t flags, int *lookups)
{
	CUdriverProcAddressQueryResult sd = -1, ss = -1;
	void *fd = NULL, *fs = NULL, *f1 = NULL;
	CUresult rd, rs, r1;
	Dl_info di, si;
	const char *want;

	rd = drv(base, &fd, v, flags, &sd);
	rs = gpa2(base, &fs, v, flags, &ss);
	r1 = gpa1(base, &f1, v, flags);
	(*lookups) += 2;
	CHECK(rs == rd && ss == sd && r1 == rd,
	      "%s@%d flags %llu: shim rc %d/%d status %d, driver rc %d "
	      "status %d",
	      base, v, (unsigned long long)flags, rs, r1, ss, rd, sd);
	CHECK(fs == f1, "%s@%d flags %llu: v1 and v2 lookups differ", base, v,
	      (unsigned long long)flags);
	if (rd != CUDA_SUCCESS || !fd)
		return;
	CHECK(fs != fd,
	      "%s@%d flags %llu: the driver's own entry point "
	      "handed out",
	      base, v, (unsigned long long)flags);
	CHECK(dladdr(fs, &si) && si.dli_fbase == shim_base,
	      "%s@%d flags %llu: answer is not in the shim", base, v,
	      (unsigned long long)flags);
	if (dladdr(fd, &di) && di.dli_sname && di.dli_saddr == fd) {
		/* An exported entry point: the same variant, wrapped. */
		CHECK(hooked(di.dli_sname),
		      "%s@%d flags %llu: the driver hands out %s, which the "
		      "shim does not hook",
		      base, v, (unsigned long long)flags, di.dli_sname);
		want = di.dli_sname;
	} else {
		want =
		    pick(base, v,
		         (flags &
		          CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0);
	}
	CHECK(want && fs == dlsym(shim, want),
	      "%s@%d flags %llu: got %s, want the shim's %s", base, v,
	      (unsigned long long)flags,
	      dladdr(fs, &si) && si.dli_sname ? si.dli_sname : "?",
	      want ? want : "(none)");
}

static int cmd_procaddr_sweep(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	void *shim = dlopen(SHIM_SO, RTLD_NOW | RTLD_NOLOAD);
	gpa2_fn drv = (gpa2_fn)cnlfake_sym("cuGetProcAddress_v2");
	gpa2_fn gpa2 = lib ? (gpa2_fn)dlsym(lib, "cuGetProcAddress_v2") : NULL;
	gpa1_fn gpa1 = lib ? (gpa1_fn)dlsym(lib, "cuGetProcAddress") : NULL;
	Dl_info si;
	int lookups = 0, bases = 0;

	setup(1);
	if (!lib || !shim || !drv || !gpa2 || !gpa1 ||
	    !dladdr((void *)gpa2, &si)) {
		fprintf(stderr, "escapetest: shim or driver missing\n");
		return 2;
	}
	for (size_t i = 0; i < NHOOKS; i++) {
		void *fn;
		int seen = 0;

		if (strcmp(hooks[i].lib, "CU") != 0)
			continue;
		for (size_t j = 0; j < i; j++)
			if (strcmp(hooks[j].base, hooks[i].base) == 0)
				seen = 1;
		if (seen)
			continue;
		bases++;
		/* The fake must model every hooked name, or this proves
		 * nothing about it. */
		CHECK(drv(hooks[i].base, &fn, 99999, 0, NULL) == CUDA_SUCCESS,
		      "the fake driver does not hand out %s", hooks[i].base);
		for (size_t v = 0; v < sizeof(versions) / sizeof(versions[0]);
		     v++)
			for (size_t f = 0; f < 3; f++)
				sweep_one(hooks[i].base, shim, si.dli_fbase,
				          drv, gpa2, gpa1, versions[v],
				          flag_set[f], &lookups);
	}
	printf("%d bases, %d lookups\n", bases, lookups);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";

	if (strcmp(cmd, "escapes") == 0)
		return cmd_escapes();
	if (strcmp(cmd, "ctx") == 0 && argc > 2)
		return cmd_ctx(argv[2]);
	if (strcmp(cmd, "share-export") == 0 && argc > 2)
		return cmd_share_export(argv[2]);
	if (strcmp(cmd, "share-import") == 0 && argc > 2)
		return cmd_share_import(argv[2]);
	if (strcmp(cmd, "procaddr-sweep") == 0)
		return cmd_procaddr_sweep();
	fprintf(stderr, "usage: escapetest escapes | ctx v1|green | "
	                "share-export FILE | share-import FILE | "
	                "procaddr-sweep\n");
	return 2;
}
