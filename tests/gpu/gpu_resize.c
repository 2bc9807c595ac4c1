/*
 * gpu_resize.c - an in-flight resize against the real driver: a CUDA
 * program holds memory in its slice's region while the quota is lowered
 * below its use and raised again from outside (by cnlab-region, as the
 * node agent does with cnl_region_set_quota), and sees each change at its
 * next call: memory information follows the quota, an allocation above a
 * lowered quota is refused while what it holds stays valid, and frees
 * bring it back under.
 *
 *   CNLAB_REGION=R LD_PRELOAD=libcnlab-cuda.so gpu_resize R CNLAB_REGION_TOOL
 *
 * R starts with a quota of 4 GiB.
 */
#include <cuda.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define GiB (1ULL << 30)

/* Run the region tool: tool VERB REGION VALUE; 0 when it succeeded. */
static int tool(const char *path, const char *verb, const char *region,
                const char *value)
{
	int st = -1;
	pid_t pid = fork();

	if (pid == 0) {
		execl(path, path, verb, region, value, (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	CUdeviceptr big = 0, more = 0, small = 0;
	size_t f = 0, t = 0;
	CUcontext ctx;
	CUdevice dev;

	if (argc < 3) {
		fprintf(stderr, "usage: gpu_resize REGION CNLAB_REGION_TOOL\n");
		return 2;
	}
	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		fprintf(stderr, "gpu_resize: no CUDA context\n");
		return 1;
	}
	cuMemGetInfo(&f, &t);
	CHECK(t == 4 * GiB, "total %zu = the 4 GiB quota", t);
	CHECK(cuMemAlloc(&big, 2 * GiB) == CUDA_SUCCESS, "2 GiB allocated");

	/* Shrink below the use, in flight. */
	CHECK(tool(argv[2], "set-quota", argv[1], "1G") == 0 &&
	          tool(argv[2], "set-share", argv[1], "10") == 0,
	      "quota lowered to 1 GiB, share to 10%% from outside");
	cuMemGetInfo(&f, &t);
	CHECK(t == GiB && f == 0, "total %zu = 1 GiB, free %zu = 0", t, f);
	CHECK(cuMemAlloc(&more, 64 * MiB) == CUDA_ERROR_OUT_OF_MEMORY,
	      "64 MiB more refused above the lowered quota");
	CHECK(cuMemsetD8(big, 1, 2 * GiB) == CUDA_SUCCESS &&
	          cuCtxSynchronize() == CUDA_SUCCESS,
	      "the 2 GiB held before stay usable");
	/* Its use falls below the new quota: allocations work again. */
	CHECK(cuMemFree(big) == CUDA_SUCCESS, "2 GiB freed");
	CHECK(cuMemAlloc(&small, 512 * MiB) == CUDA_SUCCESS,
	      "512 MiB allocated under the new quota");
	cuMemGetInfo(&f, &t);
	CHECK(t == GiB && f == 512 * MiB, "free %zu = 512 MiB", f);

	/* Grow again, in flight. */
	CHECK(tool(argv[2], "set-quota", argv[1], "4G") == 0,
	      "quota raised to 4 GiB from outside");
	CHECK(cuMemAlloc(&big, 2 * GiB) == CUDA_SUCCESS,
	      "2 GiB allocated again after the grow");
	cuMemFree(big);
	cuMemFree(small);
	return failures ? 1 : 0;
}
