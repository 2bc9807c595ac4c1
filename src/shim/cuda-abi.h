/*
 * cuda-abi.h - the slice of the CUDA driver API and NVML ABI that the shim
 * hooks or calls, declared here so that libcnlab-cuda.so builds on a machine
 * without the CUDA toolkit (DESIGN.md: the shim declares what it hooks).
 *
 * Only layouts the shim reads are spelled out; everything else is an opaque
 * handle.  Values and layouts are those of cuda.h (CUDA 12/13) and nvml.h;
 * tests/shim/abi_check.c compares them against the real headers wherever the
 * toolkit is installed.  The names are the CUDA names on purpose: the hooks
 * are the CUDA entry points themselves.
 */
#ifndef CNL_SHIM_CUDA_ABI_H
#define CNL_SHIM_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef uint64_t cuuint64_t;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUfunc_st *CUfunction;
typedef struct CUmod_st *CUmodule;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUgraphExec_st *CUgraphExec;

/* CUresult values the shim returns or tests for. */
#define CUDA_SUCCESS                0
#define CUDA_ERROR_INVALID_VALUE    1
#define CUDA_ERROR_OUT_OF_MEMORY    2
#define CUDA_ERROR_NOT_INITIALIZED  3
#define CUDA_ERROR_INVALID_CONTEXT  201
#define CUDA_ERROR_INVALID_HANDLE   400
#define CUDA_ERROR_NOT_FOUND        500
#define CUDA_ERROR_NOT_READY        600
#define CUDA_ERROR_OPERATING_SYSTEM 304
#define CUDA_ERROR_NOT_PERMITTED    800
#define CUDA_ERROR_NOT_SUPPORTED    801

/* Stream handles with a meaning of their own. */
#define CU_STREAM_LEGACY     ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

/* cuGetProcAddress flags and query results. */
#define CU_GET_PROC_ADDRESS_DEFAULT                   0
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM             (1 << 0)
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (1 << 1)
typedef int CUdriverProcAddressQueryResult;
#define CU_GET_PROC_ADDRESS_SUCCESS                0
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND       1
#define CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT 2

/* Event flags. */
#define CU_EVENT_DEFAULT 0x0

/* cuMemPool attributes the shim reads. */
#define CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT 5

/* cuMemCreate: where the physical memory lives. */
#define CU_MEM_ALLOCATION_TYPE_PINNED 0x1
#define CU_MEM_LOCATION_TYPE_DEVICE   0x1

/* cuMemGetAllocationGranularity options. */
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM     0x0
#define CU_MEM_ALLOC_GRANULARITY_RECOMMENDED 0x1

typedef struct {
	int type;
	int id;
} CUmemLocation;

typedef struct {
	int type;
	int requestedHandleTypes;
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

/* Arrays: formats and descriptors (the _v2 layouts with size_t extents). */
typedef int CUarray_format;
typedef struct {
	size_t Width;
	size_t Height;
	CUarray_format Format;
	unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct {
	size_t Width;
	size_t Height;
	size_t Depth;
	CUarray_format Format;
	unsigned int NumChannels;
	unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

/* cuLaunchKernelEx: only hStream is read. */
typedef struct CUlaunchAttribute_st CUlaunchAttribute;
typedef struct {
	unsigned int gridDimX;
	unsigned int gridDimY;
	unsigned int gridDimZ;
	unsigned int blockDimX;
	unsigned int blockDimY;
	unsigned int blockDimZ;
	unsigned int sharedMemBytes;
	CUstream hStream;
	CUlaunchAttribute *attrs;
	unsigned int numAttrs;
} CUlaunchConfig;

/* IPC handles: 64 opaque bytes. */
#define CU_IPC_HANDLE_SIZE 64
typedef struct {
	char reserved[CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;
typedef struct {
	char reserved[CU_IPC_HANDLE_SIZE];
} CUipcEventHandle;

/* Opaque context-creation parameter blocks (cuCtxCreate_v3/_v4). */
typedef struct CUexecAffinityParam_st CUexecAffinityParam;
typedef struct CUctxCreateParams_st CUctxCreateParams;

/* NVML. */
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
#define NVML_SUCCESS                         0
#define NVML_ERROR_INVALID_ARGUMENT          2
#define NVML_ERROR_NOT_SUPPORTED             3
#define NVML_ERROR_INSUFFICIENT_SIZE         7
#define NVML_ERROR_FUNCTION_NOT_FOUND        13
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25

typedef struct {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

typedef struct {
	unsigned int version;
	unsigned long long total;
	unsigned long long reserved;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_t;

/* The same numbers tests/shim/abi_check.c asserts against cuda.h. */
_Static_assert(sizeof(CUdeviceptr) == 8, "CUdeviceptr");
_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp");
_Static_assert(offsetof(CUmemAllocationProp, location) == 8, "location");
_Static_assert(sizeof(CUDA_ARRAY_DESCRIPTOR) == 24, "CUDA_ARRAY_DESCRIPTOR");
_Static_assert(sizeof(CUDA_ARRAY3D_DESCRIPTOR) == 40, "3D descriptor");
_Static_assert(offsetof(CUDA_ARRAY3D_DESCRIPTOR, Format) == 24, "Format");
_Static_assert(offsetof(CUlaunchConfig, hStream) == 32, "hStream");
_Static_assert(sizeof(CUipcMemHandle) == 64, "CUipcMemHandle");

/*
 * Entry points hooked so that no driver export obtains device memory
 * uncharged or opens another project's memory (driver-exports.tsv).
 */
/* The 32-bit entry points of CUDA < 3.2, which the driver still exports. */
typedef unsigned int CUdeviceptr_v1;
typedef struct CUDA_ARRAY_DESCRIPTOR_v1_st CUDA_ARRAY_DESCRIPTOR_v1;
typedef struct CUDA_ARRAY3D_DESCRIPTOR_v1_st CUDA_ARRAY3D_DESCRIPTOR_v1;

/* Graphs: allocation nodes own device memory no pool attribute shows. */
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphEdgeData_st CUgraphEdgeData;
#define CU_GRAPH_NODE_TYPE_MEM_ALLOC 10
typedef struct {
	unsigned char poolProps[88]; /* CUmemPoolProps */
	const void *accessDescs;
	size_t accessDescCount;
	size_t bytesize;
	CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS;
typedef struct {
	int type;
	int reserved0[3];
	union {
		long long reserved1[29];
		CUDA_MEM_ALLOC_NODE_PARAMS alloc;
	} u;
	long long reserved2;
} CUgraphNodeParams;
typedef int CUstreamCaptureStatus;
#define CU_STREAM_CAPTURE_STATUS_NONE 0

/* Shareable handles of VMM allocations and pools, and pool pointers. */
typedef int CUmemAllocationHandleType;
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 0x1
#define CU_MEM_HANDLE_TYPE_FABRIC                0x8
typedef struct {
	unsigned char reserved[64];
} CUmemPoolPtrExportData;
typedef struct {
	unsigned char data[64];
} CUmemFabricHandle;

/* External memory (Vulkan, OpenGL, NvSciBuf, opaque file descriptors). */
typedef struct CUextMemory_st *CUexternalMemory;
typedef struct CUDA_EXTERNAL_MEMORY_HANDLE_DESC_st
    CUDA_EXTERNAL_MEMORY_HANDLE_DESC;

/* cuLaunchCooperativeKernelMultiDevice's parameter blocks (opaque). */
typedef struct CUDA_LAUNCH_PARAMS_st CUDA_LAUNCH_PARAMS;

/* Context limits that reserve device memory. */
typedef int CUlimit;
#define CU_LIMIT_STACK_SIZE                                0x00
#define CU_LIMIT_PRINTF_FIFO_SIZE                          0x01
#define CU_LIMIT_MALLOC_HEAP_SIZE                          0x02
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT           16
#define CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR 39

/* Green contexts (CUDA 12.4+). */
typedef struct CUgreenCtx_st *CUgreenCtx;
typedef struct CUdevResourceDesc_st *CUdevResourceDesc;

_Static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS) == 120, "alloc node");
_Static_assert(offsetof(CUDA_MEM_ALLOC_NODE_PARAMS, bytesize) == 104,
               "bytesize");
_Static_assert(sizeof(CUgraphNodeParams) == 256, "CUgraphNodeParams");
_Static_assert(offsetof(CUgraphNodeParams, u.alloc.bytesize) == 120,
               "alloc.bytesize");
_Static_assert(sizeof(CUmemPoolPtrExportData) == 64, "pool export data");

#endif /* CNL_SHIM_CUDA_ABI_H */
