/*
 * gpu_escapes.c - the escapes of test_shim_escapes against the real
 * driver: a malloc heap larger than the quota, graph allocation nodes
 * (direct and by stream capture), the 32-bit memory information, and VMM
 * shareable handles (a file descriptor exported twice: the shim keys a
 * descriptor by its open file, so two exports must not share an inode, or
 * imports fail closed; printed either way).
 *
 *   CNLAB_REGION=R LD_PRELOAD=libcnlab-cuda.so gpu_escapes QUOTA [ESCAPE_NS_SO]
 *
 * R has quota QUOTA bytes and no context reserve.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

typedef CUresult (*meminfo_v1_fn)(unsigned int *, unsigned int *);

static void heap_and_graphs(uint64_t quota)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	CUgraphNode node;
	CUgraph g;
	CUstream s;
	CUdeviceptr d;
	CUresult rc;

	rc = cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, (size_t)quota * 4);
	CHECK(rc == CUDA_ERROR_OUT_OF_MEMORY,
	      "malloc heap of 4x the quota refused (rc %d)", rc);
	rc = cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 16 * MiB);
	CHECK(rc == CUDA_SUCCESS, "16 MiB malloc heap (rc %d)", rc);

	memset(&p, 0, sizeof(p));
	p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.bytesize = quota * 4;
	CHECK(cuGraphCreate(&g, 0) == CUDA_SUCCESS, "graph");
	rc = cuGraphAddMemAllocNode(&node, g, NULL, 0, &p);
	CHECK(rc == CUDA_ERROR_NOT_PERMITTED,
	      "cuGraphAddMemAllocNode refused (rc %d)", rc);
	cuGraphDestroy(g);

	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS,
	      "stream");
	CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED) ==
	          CUDA_SUCCESS,
	      "capture");
	rc = cuMemAllocAsync(&d, quota * 4, s);
	CHECK(rc == CUDA_ERROR_NOT_PERMITTED,
	      "cuMemAllocAsync while capturing refused (rc %d)", rc);
	if (cuStreamEndCapture(s, &g) == CUDA_SUCCESS)
		cuGraphDestroy(g);
	rc = cuMemAllocAsync(&d, MiB, s);
	CHECK(rc == CUDA_SUCCESS, "cuMemAllocAsync outside capture (rc %d)",
	      rc);
	if (rc == CUDA_SUCCESS)
		cuMemFreeAsync(d, s);
	cuStreamSynchronize(s);
	cuStreamDestroy(s);
}

static void meminfo_v1(uint64_t quota)
{
	meminfo_v1_fn f = (meminfo_v1_fn)dlsym(RTLD_DEFAULT, "cuMemGetInfo");
	unsigned int fr = 0, t = 0;

	if (!f || quota > 0xffffffffu) {
		printf("skip 32-bit cuMemGetInfo\n");
		return;
	}
	CHECK(f(&fr, &t) == CUDA_SUCCESS && t == quota,
	      "32-bit cuMemGetInfo total %u is the quota", t);
}

static void shareable_fds(void)
{
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle h[2], in;
	size_t gran = 0;
	struct stat st[2];
	int fd[2] = {-1, -1};
	CUresult rc;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	cuMemGetAllocationGranularity(&gran, &prop,
	                              CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	for (int i = 0; i < 2; i++) {
		rc = cuMemCreate(&h[i], gran ? gran : 2 * MiB, &prop, 0);
		if (rc == CUDA_SUCCESS)
			rc = cuMemExportToShareableHandle(
			    &fd[i], h[i],
			    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		CHECK(rc == CUDA_SUCCESS && fstat(fd[i], &st[i]) == 0,
		      "export %d as a file descriptor (rc %d)", i, rc);
	}
	if (fd[0] < 0 || fd[1] < 0)
		return;
	printf(
	    "info exported fds: dev %llx ino %llx and dev %llx ino %llx "
	    "(%s)\n",
	    (unsigned long long)st[0].st_dev, (unsigned long long)st[0].st_ino,
	    (unsigned long long)st[1].st_dev, (unsigned long long)st[1].st_ino,
	    st[0].st_ino == st[1].st_ino ? "shared inode: imports fail closed"
	                                 : "distinct");
	if (st[0].st_ino != st[1].st_ino) {
		rc = cuMemImportFromShareableHandle(
		    &in, (void *)(intptr_t)fd[0],
		    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		CHECK(rc == CUDA_SUCCESS,
		      "own project's descriptor imported (rc %d)", rc);
		if (rc == CUDA_SUCCESS)
			cuMemRelease(in);
	}
	for (int i = 0; i < 2; i++) {
		close(fd[i]);
		cuMemRelease(h[i]);
	}
}

/* A stack size whose product with the resident threads wraps, and a
 * tenant's library (tests/shim/escape_ns.c, built here against the real
 * driver) loaded into a new link-map namespace, where a private copy of
 * libcuda.so.1 would be out of the shim's reach. */
static void stack_and_namespaces(uint64_t quota, const char *lib)
{
	int (*f)(unsigned long long);
	void *h;

	CHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, ((size_t)1 << 51) + 1024) !=
	          CUDA_SUCCESS,
	      "a stack size that wraps refused");
	if (!lib)
		return;
	h = dlmopen(LM_ID_NEWLM, lib, RTLD_NOW);
	f = h ? (int (*)(unsigned long long))dlsym(h, "cnl_escape_alloc")
	      : NULL;
	CHECK(!h || (f && f(quota * 4) != CUDA_SUCCESS),
	      "4x the quota from a private link-map namespace");
	printf("dlmopen of a CUDA library in a slice: %s\n",
	       h ? "loaded (and charged)" : "refused");
}

int main(int argc, char **argv)
{
	uint64_t quota = argc > 1 ? strtoull(argv[1], NULL, 0) : 0;
	CUcontext ctx;
	CUdevice dev;

	if (!quota || cuInit(0) != CUDA_SUCCESS ||
	    cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		fprintf(stderr, "usage: gpu_escapes QUOTA (with a GPU)\n");
		return 2;
	}
	heap_and_graphs(quota);
	meminfo_v1(quota);
	shareable_fds();
	stack_and_namespaces(quota, argc > 2 ? argv[2] : NULL);
	return failures ? 1 : 0;
}
