/*
 * cuda_api.h - the CUDA driver API and NVML as the shim's test programs see
 * them.  Where the CUDA toolkit is installed they are written against its
 * cuda.h (CNL_HAVE_CUDA_H, set by CMake); elsewhere (a fresh CI machine)
 * the same programs build against the declarations below, which use the
 * shim's own ABI header and the same spellings cuda.h gives them.  NVML is
 * always declared here: the toolkit does not ship nvml.h.
 */
#ifndef CNL_TESTS_CUDA_API_H
#define CNL_TESTS_CUDA_API_H

#ifdef CNL_HAVE_CUDA_H
#include <cuda.h>
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
	unsigned int version;
	unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
#define NVML_SUCCESS 0
#else
#include "shim/cuda-abi.h"

#define CU_MEM_LOCATION_TYPE_HOST          0x2
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 0x3
typedef int CUmemAllocationGranularity_flags;
typedef struct {
	CUmemLocation location;
	int flags;
} CUmemAccessDesc;
#define CU_AD_FORMAT_UNSIGNED_INT8         0x01
#define CU_AD_FORMAT_FLOAT                 0x20
typedef struct CUmemPoolProps_st {
	int allocType;
	int handleTypes;
	CUmemLocation location;
	void *win32SecurityAttributes;
	size_t maxSize;
	unsigned short usage;
	unsigned char reserved[54];
} CUmemPoolProps;

#define cuMemAlloc                         cuMemAlloc_v2
#define cuMemFree                          cuMemFree_v2
#define cuMemAllocPitch                    cuMemAllocPitch_v2
#define cuMemGetInfo                       cuMemGetInfo_v2
#define cuDeviceTotalMem                   cuDeviceTotalMem_v2
#define cuArrayCreate                      cuArrayCreate_v2
#define cuArray3DCreate                    cuArray3DCreate_v2
#define cuIpcOpenMemHandle                 cuIpcOpenMemHandle_v2
#define cuEventDestroy                     cuEventDestroy_v2
#define cuStreamDestroy                    cuStreamDestroy_v2
#define cuEventElapsedTime                 cuEventElapsedTime_v2
#define cuGetProcAddress                   cuGetProcAddress_v2
#define cuDevicePrimaryCtxRelease          cuDevicePrimaryCtxRelease_v2

CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *v);
CUresult cuDeviceGet(CUdevice *d, int ordinal);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxSynchronize(void);
CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch,
                            size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize,
                           unsigned int flags);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                 CUmemoryPool pool, CUstream s);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s);
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props);
CUresult cuMemPoolDestroy(CUmemoryPool pool);
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep);
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev);
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemGetAllocationGranularity(size_t *granularity,
                                       const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                             CUdeviceptr addr, unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                  CUmemGenericAllocationHandle handle,
                  unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size,
                        const CUmemAccessDesc *desc, size_t count);
CUresult cuArrayCreate_v2(CUarray *p, const CUDA_ARRAY_DESCRIPTOR *d);
CUresult cuArray3DCreate_v2(CUarray *p, const CUDA_ARRAY3D_DESCRIPTOR *d);
CUresult cuArrayDestroy(CUarray a);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *p,
                                const CUDA_ARRAY3D_DESCRIPTOR *d,
                                unsigned int levels);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray a);
CUresult cuStreamCreate(CUstream *s, unsigned int flags);
CUresult cuStreamDestroy_v2(CUstream s);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuModuleLoadData(CUmodule *m, const void *image);
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                        unsigned bx, unsigned by, unsigned bz, unsigned shm,
                        CUstream s, void **params, void **extra);
CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params,
                          void **extra);
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy,
                                   unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shm, CUstream s,
                                   void **params);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                             unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shm, CUstream s, void **params,
                             void **extra);
CUresult cuGraphLaunch(CUgraphExec g, CUstream s);
CUresult cuEventCreate(CUevent *e, unsigned int flags);
CUresult cuEventDestroy_v2(CUevent e);
CUresult cuEventRecord(CUevent e, CUstream s);
CUresult cuEventSynchronize(CUevent e);
CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b);
CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle h,
                               unsigned int flags);
CUresult cuIpcGetEventHandle(CUipcEventHandle *h, CUevent e);
CUresult cuIpcOpenEventHandle(CUevent *e, CUipcEventHandle h);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                             cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status);
#endif

/* Per-thread-stream variants: cuda.h declares them only for its own
 * builds; the programs call the one they test by name. */
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                             unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shm, CUstream s, void **params,
                             void **extra);

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d,
                                                     unsigned int *count,
                                                     nvmlProcessInfo_t *infos);

#endif /* CNL_TESTS_CUDA_API_H */
