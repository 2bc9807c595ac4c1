/*
 * escape_hip.c - a tenant's library that allocates device memory through
 * the HIP runtime it was linked against: loaded with dlopen its calls bind
 * to the preloaded HIP shim; loaded with dlmopen into a new link-map
 * namespace they would bind to a private copy of libamdhip64 (hiptest's
 * "ns" command, test_hip_attack).
 */
#include <stddef.h>

#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>

int cnl_escape_hip_alloc(unsigned long long bytes);

int cnl_escape_hip_alloc(unsigned long long bytes)
{
	void *p = NULL;

	if (hipInit(0) != hipSuccess || hipSetDevice(0) != hipSuccess)
		return -1;
	return (int)hipMalloc(&p, (size_t)bytes);
}
