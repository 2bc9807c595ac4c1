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

_Static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS) == 120, "alloc node");
_Static_assert(offsetof(CUDA_MEM_ALLOC_NODE_PARAMS, bytesize) == 104,
               "bytesize");
_Static_assert(sizeof(CUgraphNodeParams) == 256, "CUgraphNodeParams");
_Static_assert(offsetof(CUgraphNodeParams, alloc.bytesize) == 120,
               "alloc.bytesize");
_Static_assert(CU_GRAPH_NODE_TYPE_MEM_ALLOC == 10, "mem alloc node");
_Static_assert(sizeof(CUmemPoolPtrExportData) == 64, "pool export data");
_Static_assert(sizeof(CUmemFabricHandle) == 64, "fabric handle");
_Static_assert(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR == 1 &&
                   CU_MEM_HANDLE_TYPE_FABRIC == 8,
               "handle types");
_Static_assert(CU_STREAM_CAPTURE_STATUS_NONE == 0, "capture status");

_Static_assert(CU_LIMIT_STACK_SIZE == 0 && CU_LIMIT_PRINTF_FIFO_SIZE == 1 &&
                   CU_LIMIT_MALLOC_HEAP_SIZE == 2,
               "limits");
_Static_assert(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT == 16 &&
                   CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR == 39,
               "attributes");

int main(void)
{
	return 0;
}
