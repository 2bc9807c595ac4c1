/*
 * escape_ns.c - a tenant's library that allocates device memory through
 * the driver it was linked against: loaded with dlopen its calls bind to
 * the preloaded shim; loaded with dlmopen into a new link-map namespace
 * they would bind to a private copy of libcuda.so.1 (escapetest,
 * loader_namespaces).
 */
#include <stddef.h>

#include "shim/cuda-abi.h"

CUresult cuInit(unsigned int flags);
CUresult cuDeviceGet(CUdevice *dev, int ordinal);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
int cnl_escape_alloc(unsigned long long bytes);

int cnl_escape_alloc(unsigned long long bytes)
{
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr p;

	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuCtxCreate_v2(&ctx, 0, dev) != CUDA_SUCCESS)
		return -1;
	return (int)cuMemAlloc_v2(&p, (size_t)bytes);
}
