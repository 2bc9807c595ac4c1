/*
 * abi_check.c - the layouts and values src/shim/cuda-abi.h declares,
 * checked against the toolkit's cuda.h (built only where it is installed).
 * Each number here is also asserted against cuda-abi.h in the shim's build
 * (cuda-abi.h's _Static_asserts), so the two cannot silently disagree.
 */
#include <stddef.h>
#include <cuda.h>

_Static_assert(sizeof(CUdeviceptr) == 8, "CUdeviceptr");
_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp");
_Static_assert(offsetof(CUmemAllocationProp, location) == 8, "location");
_Static_assert(sizeof(CUDA_ARRAY_DESCRIPTOR) == 24, "CUDA_ARRAY_DESCRIPTOR");
_Static_assert(sizeof(CUDA_ARRAY3D_DESCRIPTOR) == 40, "3D descriptor");
_Static_assert(offsetof(CUDA_ARRAY3D_DESCRIPTOR, Format) == 24, "Format");
_Static_assert(offsetof(CUlaunchConfig, hStream) == 32, "hStream");
_Static_assert(sizeof(CUipcMemHandle) == 64, "CUipcMemHandle");
_Static_assert(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT == 5, "reserved attr");
_Static_assert(CU_MEM_LOCATION_TYPE_DEVICE == 1, "location device");
_Static_assert(CU_MEM_ALLOCATION_TYPE_PINNED == 1, "pinned");
_Static_assert(CU_MEM_ALLOC_GRANULARITY_MINIMUM == 0 &&
                   CU_MEM_ALLOC_GRANULARITY_RECOMMENDED == 1,
               "granularity options");
_Static_assert(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM == 2, "ptds");
_Static_assert(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT == 2, "status");
_Static_assert(CUDA_ERROR_NOT_PERMITTED == 800, "not permitted");
_Static_assert(CUDA_ERROR_OUT_OF_MEMORY == 2, "oom");
_Static_assert(CUDA_ERROR_NOT_READY == 600, "not ready");
_Static_assert(CU_AD_FORMAT_HALF == 0x10 && CU_AD_FORMAT_SIGNED_INT16 == 0x09,
               "formats");

int main(void)
{
	return 0;
}
