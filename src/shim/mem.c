/*
 * mem.c - VRAM quota: every way device memory is created or given back,
 * the memory information the program sees, and IPC across slices.
 *
 * Every allocation follows one shape:
 *
 *     reserve bytes in the region (quota checked, atomically)
 *         | over quota: reap dead processes, retry once, else
 *         |             CUDA_ERROR_OUT_OF_MEMORY (nothing called, nothing
 *         |             leaked)
 *     call the driver
 *         | failed: give the reservation back, return the driver's error
 *     remember handle -> bytes (the free path gives exactly that back)
 *
 * A free of a handle we do not know (allocated before the shim was
 * attached, or by another library) goes to the driver untouched.
 *
 * Stream-ordered allocations are charged at the pool level: a pool keeps
 * freed memory until it is trimmed or the stream synchronises, so what the
 * slice holds is the pool's reserved size (CU_MEMPOOL_ATTR_RESERVED_MEM_
 * CURRENT), settled after every allocation, free, trim and synchronise.
 *
 * The process-local handle table is a chained hash with one mutex per
 * shard: allocations are not the launch hot path, and a mutex that is not
 * contended costs one atomic.
 *
 * One file of about a thousand lines on purpose: its hooks are each a few
 * lines around the shape above and the handle table below, and they are
 * read and reviewed together (a quota hole is a path that leaves the
 * shape); split by hook family only with that shape in one place.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shim/shim-internal.h"

/* Handle table ---------------------------------------------------------------
 */

#define SHARDS  64
#define BUCKETS 4096

struct obj {
	struct obj *next;
	uint64_t key;
	uint64_t bytes;
	uint64_t aux;
	int kind;
};

static struct obj *buckets[BUCKETS];
static pthread_mutex_t shard_lock[SHARDS] = {[0 ... SHARDS - 1] =
                                                 PTHREAD_MUTEX_INITIALIZER};

static unsigned bucket_of(int kind, uint64_t key)
{
	uint64_t h = (key ^ ((uint64_t)kind << 56)) * 0x9e3779b97f4a7c15ULL;

	return (unsigned)(h >> 52) & (BUCKETS - 1);
}

int cnl_objs_put(enum cnl_obj_kind kind, uint64_t key, uint64_t bytes,
                 uint64_t aux)
{
	struct obj *o = malloc(sizeof(*o));
	unsigned b = bucket_of((int)kind, key);

	if (!o)
		return -ENOMEM;
	o->key = key;
	o->bytes = bytes;
	o->aux = aux;
	o->kind = (int)kind;
	pthread_mutex_lock(&shard_lock[b % SHARDS]);
	o->next = buckets[b];
	buckets[b] = o;
	pthread_mutex_unlock(&shard_lock[b % SHARDS]);
	return 0;
}

int cnl_objs_take(enum cnl_obj_kind kind, uint64_t key, uint64_t *ret_bytes,
                  uint64_t *ret_aux)
{
	unsigned b = bucket_of((int)kind, key);
	struct obj **pp, *o = NULL;

	pthread_mutex_lock(&shard_lock[b % SHARDS]);
	for (pp = &buckets[b]; *pp; pp = &(*pp)->next) {
		if ((*pp)->key == key && (*pp)->kind == (int)kind) {
			o = *pp;
			*pp = o->next;
			break;
		}
	}
	pthread_mutex_unlock(&shard_lock[b % SHARDS]);
	if (!o)
		return -ENOENT;
	if (ret_bytes)
		*ret_bytes = o->bytes;
	if (ret_aux)
		*ret_aux = o->aux;
	free(o);
	return 0;
}

/* Charging --------------------------------------------------------------- */

/* Whether allocations are accounted at all (attaching on first use). */
static int accounting(void)
{
	cnl_shim_init();
	return cnl_shim.mode != CNL_MODE_PASS;
}

CUresult cnl_charge(uint64_t bytes)
{
	int rc;

	if (cnl_shim.mode == CNL_MODE_PASS)
		return CUDA_SUCCESS;
	if (cnl_shim.mode == CNL_MODE_BROKEN)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = cnl_region_reserve(cnl_shim.r, cnl_shim.slot, bytes, 0);
	if (rc == -ENOMEM) {
		/* Memory of dead processes and of idle pools may come back. */
		cnl_region_reap(&cnl_shim.h, cnl_shim.slot);
		cnl_pools_sync();
		rc = cnl_region_reserve(cnl_shim.r, cnl_shim.slot, bytes, 0);
	}
	if (rc < 0) {
		cnl_log_once(
		    CNL_LOG_OOM,
		    "allocation of %llu bytes refused: slice quota "
		    "%llu bytes, %llu in use",
		    (unsigned long long)bytes,
		    (unsigned long long)atomic_load(&cnl_shim.r->quota),
		    (unsigned long long)cnl_region_used(cnl_shim.r,
		                                        cnl_shim.slot));
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

void cnl_uncharge(uint64_t bytes)
{
	if (cnl_shim.mode == CNL_MODE_ON && bytes)
		cnl_region_unreserve(cnl_shim.r, cnl_shim.slot, bytes);
}

static void charge_force(uint64_t bytes)
{
	if (cnl_shim.mode == CNL_MODE_ON && bytes)
		cnl_region_reserve(cnl_shim.r, cnl_shim.slot, bytes, 1);
}

/* Track a new object; if the table cannot grow, undo with undo(). */
static CUresult track(enum cnl_obj_kind kind, uint64_t key, uint64_t bytes,
                      uint64_t aux)
{
	if (cnl_objs_put(kind, key, bytes, aux) < 0) {
		cnl_uncharge(bytes);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

/* Linear allocations
 * ------------------------------------------------------------ */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	cnl_real_cuMemAlloc_v2_t real = CNL_REAL(cuMemAlloc_v2);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting())
		return real(dptr, bytesize);
	if ((rc = cnl_charge(bytesize)) != CUDA_SUCCESS)
		return rc;
	rc = real(dptr, bytesize);
	if (rc != CUDA_SUCCESS) {
		cnl_uncharge(bytesize);
		return rc;
	}
	if (track(CNL_OBJ_PTR, *dptr, bytesize, 0) != CUDA_SUCCESS) {
		cuMemFree_v2(*dptr);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

/* The driver picks the pitch: reserve for the widest it could pick (rows
 * aligned to 512 bytes), then settle to the real pitch x height. */
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch,
                            size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes)
{
	cnl_real_cuMemAllocPitch_v2_t real = CNL_REAL(cuMemAllocPitch_v2);
	uint64_t guess, bytes;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting())
		return real(dptr, pPitch, WidthInBytes, Height,
		            ElementSizeBytes);
	guess = (((uint64_t)WidthInBytes + 511) & ~511ULL) * Height;
	if ((rc = cnl_charge(guess)) != CUDA_SUCCESS)
		return rc;
	rc = real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
	if (rc != CUDA_SUCCESS) {
		cnl_uncharge(guess);
		return rc;
	}
	bytes = (uint64_t)*pPitch * Height;
	if (bytes > guess)
		charge_force(bytes - guess);
	else
		cnl_uncharge(guess - bytes);
	if (track(CNL_OBJ_PTR, *dptr, bytes, 0) != CUDA_SUCCESS) {
		cuMemFree_v2(*dptr);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize,
                           unsigned int flags)
{
	cnl_real_cuMemAllocManaged_t real = CNL_REAL(cuMemAllocManaged);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting())
		return real(dptr, bytesize, flags);
	if ((rc = cnl_charge(bytesize)) != CUDA_SUCCESS)
		return rc;
	rc = real(dptr, bytesize, flags);
	if (rc != CUDA_SUCCESS) {
		cnl_uncharge(bytesize);
		return rc;
	}
	if (track(CNL_OBJ_PTR, *dptr, bytesize, 0) != CUDA_SUCCESS) {
		cuMemFree_v2(*dptr);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

static void pool_settle(CUmemoryPool pool, int64_t provisional);

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	cnl_real_cuMemFree_v2_t real = CNL_REAL(cuMemFree_v2);
	uint64_t bytes, aux;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || !accounting())
		return real(dptr);
	if (cnl_objs_take(CNL_OBJ_PTR, dptr, &bytes, &aux) == 0) {
		rc = real(dptr);
		if (rc == CUDA_SUCCESS)
			cnl_uncharge(bytes);
		else
			cnl_objs_put(CNL_OBJ_PTR, dptr, bytes, aux);
		return rc;
	}
	if (cnl_objs_take(CNL_OBJ_ASYNC, dptr, &bytes, &aux) == 0) {
		rc = real(dptr);
		if (rc == CUDA_SUCCESS)
			pool_settle((CUmemoryPool)(uintptr_t)aux, 0);
		else
			cnl_objs_put(CNL_OBJ_ASYNC, dptr, bytes, aux);
		return rc;
	}
	return real(dptr);
}

/* Pools: stream-ordered allocation ------------------------------------------
 */

#define POOLS 64
/* The most a pool grows beyond a request: the driver's 2 MiB pages. */
#define POOL_GRAIN (2ULL << 20)

typedef CUresult (*pool_attr_fn)(CUmemoryPool, int, void *);
typedef CUresult (*ctx_dev_fn)(CUdevice *);
typedef CUresult (*dev_pool_fn)(CUmemoryPool *, CUdevice);

static struct {
	CUmemoryPool pool;
	uint64_t charged; /* what the region holds for this pool */
} pools[POOLS];
static int npools;
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;

/* The pool's reserved bytes, or -1 where the driver cannot tell. */
static int64_t pool_reserved(CUmemoryPool pool)
{
	pool_attr_fn get =
	    (pool_attr_fn)cnl_real_sym(CNL_LIB_CU, "cuMemPoolGetAttribute");
	unsigned long long v = 0;

	if (!get ||
	    get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) != CUDA_SUCCESS)
		return -1;
	return (int64_t)v;
}

/*
 * Bring the region's charge for pool in line with what the pool holds.
 * provisional is what the caller already reserved for an allocation from
 * it, now folded into the pool's charge.  Called with pools_lock free.
 */
static void pool_settle(CUmemoryPool pool, int64_t provisional)
{
	int64_t reserved = pool_reserved(pool);
	int64_t delta;
	int i;

	pthread_mutex_lock(&pools_lock);
	for (i = 0; i < npools && pools[i].pool != pool; i++)
		;
	if (i == npools && npools < POOLS) {
		pools[npools].pool = pool;
		pools[npools].charged = 0;
		npools++;
	}
	if (i == POOLS) {
		/* Too many pools to follow: charge per allocation instead. */
		pthread_mutex_unlock(&pools_lock);
		return;
	}
	if (reserved < 0) /* cannot read the pool: charge what was asked */
		reserved = (int64_t)pools[i].charged + provisional;
	delta = reserved - (int64_t)pools[i].charged;
	pools[i].charged = (uint64_t)reserved;
	pthread_mutex_unlock(&pools_lock);
	delta -= provisional;
	if (delta > 0)
		charge_force((uint64_t)delta);
	else if (delta < 0)
		cnl_uncharge((uint64_t)-delta);
}

void cnl_pools_sync(void)
{
	CUmemoryPool list[POOLS];
	int n;

	pthread_mutex_lock(&pools_lock);
	n = npools;
	for (int i = 0; i < n; i++)
		list[i] = pools[i].pool;
	pthread_mutex_unlock(&pools_lock);
	for (int i = 0; i < n; i++)
		pool_settle(list[i], 0);
}

/* The pool cuMemAllocAsync draws from: the current device's. */
static CUmemoryPool current_pool(void)
{
	ctx_dev_fn get_dev =
	    (ctx_dev_fn)cnl_real_sym(CNL_LIB_CU, "cuCtxGetDevice");
	dev_pool_fn get_pool =
	    (dev_pool_fn)cnl_real_sym(CNL_LIB_CU, "cuDeviceGetMemPool");
	CUmemoryPool pool = NULL;
	CUdevice dev;

	if (get_dev && get_pool && get_dev(&dev) == CUDA_SUCCESS)
		get_pool(&pool, dev);
	return pool;
}

typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUmemoryPool,
                                   CUstream);

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize,
                            CUmemoryPool pool, CUstream s, void *real,
                            int from_pool)
{
	/* A pool grows by up to the request rounded up to its grain: that is
	 * reserved beforehand, or the growth (charged after the fact) would
	 * take the slice over its quota; pool_settle gives back what the
	 * pool did not take. */
	uint64_t prov =
	    ((uint64_t)bytesize + POOL_GRAIN - 1) & ~(POOL_GRAIN - 1);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting())
		return from_pool
		           ? ((alloc_async_fn)real)(dptr, bytesize, pool, s)
		           : ((CUresult(*)(CUdeviceptr *, size_t,
		                           CUstream))real)(dptr, bytesize, s);
	if ((rc = cnl_charge(prov)) != CUDA_SUCCESS)
		return rc;
	if (from_pool)
		rc = ((alloc_async_fn)real)(dptr, bytesize, pool, s);
	else
		rc = ((CUresult(*)(CUdeviceptr *, size_t, CUstream))real)(
		    dptr, bytesize, s);
	if (rc != CUDA_SUCCESS) {
		cnl_uncharge(prov);
		return rc;
	}
	if (!from_pool)
		pool = current_pool();
	pool_settle(pool, (int64_t)prov);
	if (cnl_objs_put(CNL_OBJ_ASYNC, *dptr, bytesize, (uintptr_t)pool) < 0)
		return CUDA_SUCCESS; /* the pool's charge still covers it */
	return CUDA_SUCCESS;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	return alloc_async(dptr, bytesize, NULL, hStream,
	                   (void *)CNL_REAL(cuMemAllocAsync), 0);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                              CUstream hStream)
{
	return alloc_async(dptr, bytesize, NULL, hStream,
	                   (void *)CNL_REAL(cuMemAllocAsync_ptsz), 0);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                 CUmemoryPool pool, CUstream hStream)
{
	return alloc_async(dptr, bytesize, pool, hStream,
	                   (void *)CNL_REAL(cuMemAllocFromPoolAsync), 1);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                      CUmemoryPool pool, CUstream hStream)
{
	return alloc_async(dptr, bytesize, pool, hStream,
	                   (void *)CNL_REAL(cuMemAllocFromPoolAsync_ptsz), 1);
}

static CUresult free_async(CUdeviceptr dptr, CUstream s,
                           CUresult (*real)(CUdeviceptr, CUstream))
{
	uint64_t bytes, aux;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || !accounting())
		return real(dptr, s);
	if (cnl_objs_take(CNL_OBJ_ASYNC, dptr, &bytes, &aux) == 0) {
		rc = real(dptr, s);
		if (rc == CUDA_SUCCESS)
			pool_settle((CUmemoryPool)(uintptr_t)aux, 0);
		else
			cnl_objs_put(CNL_OBJ_ASYNC, dptr, bytes, aux);
		return rc;
	}
	/* cuMemFreeAsync may free a cuMemAlloc pointer too. */
	if (cnl_objs_take(CNL_OBJ_PTR, dptr, &bytes, &aux) == 0) {
		rc = real(dptr, s);
		if (rc == CUDA_SUCCESS)
			cnl_uncharge(bytes);
		else
			cnl_objs_put(CNL_OBJ_PTR, dptr, bytes, aux);
		return rc;
	}
	return real(dptr, s);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	return free_async(dptr, hStream, CNL_REAL(cuMemFreeAsync));
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	return free_async(dptr, hStream, CNL_REAL(cuMemFreeAsync_ptsz));
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	cnl_real_cuMemPoolTrimTo_t real = CNL_REAL(cuMemPoolTrimTo);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	rc = real(pool, minBytesToKeep);
	if (rc == CUDA_SUCCESS && accounting())
		pool_settle(pool, 0);
	return rc;
}

/* Synchronisation: pools release memory, kernels finish (throttle.c). */
static void after_sync(void)
{
	if (cnl_shim.mode != CNL_MODE_ON)
		return;
	if (npools)
		cnl_pools_sync();
	cnl_throttle_harvest(0);
}

CUresult cuStreamSynchronize(CUstream hStream)
{
	cnl_real_cuStreamSynchronize_t real = CNL_REAL(cuStreamSynchronize);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	rc = real(hStream);
	after_sync();
	return rc;
}

CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
	cnl_real_cuStreamSynchronize_ptsz_t real =
	    CNL_REAL(cuStreamSynchronize_ptsz);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	rc = real(hStream);
	after_sync();
	return rc;
}

CUresult cuCtxSynchronize(void)
{
	cnl_real_cuCtxSynchronize_t real = CNL_REAL(cuCtxSynchronize);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	rc = real();
	after_sync();
	return rc;
}

/* Virtual memory management --------------------------------------------------
 */

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
	cnl_real_cuMemCreate_t real = CNL_REAL(cuMemCreate);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	/* Host and host-NUMA locations are not VRAM. */
	if (!accounting() || !prop ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return real(handle, size, prop, flags);
	if ((rc = cnl_charge(size)) != CUDA_SUCCESS)
		return rc;
	rc = real(handle, size, prop, flags);
	if (rc != CUDA_SUCCESS) {
		cnl_uncharge(size);
		return rc;
	}
	if (track(CNL_OBJ_VMM, *handle, size, 0) != CUDA_SUCCESS) {
		cuMemRelease(*handle);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	cnl_real_cuMemRelease_t real = CNL_REAL(cuMemRelease);
	uint64_t bytes, aux;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting() || cnl_objs_take(CNL_OBJ_VMM, handle, &bytes, &aux))
		return real(handle);
	rc = real(handle);
	if (rc == CUDA_SUCCESS)
		cnl_uncharge(bytes);
	else
		cnl_objs_put(CNL_OBJ_VMM, handle, bytes, aux);
	return rc;
}

/* Arrays
 * ------------------------------------------------------------------------ */

/* Bytes per channel of a CUarray_format; 4 for formats we do not know. */
static uint64_t format_bytes(CUarray_format f)
{
	switch (f) {
	case 0x01: /* UNSIGNED_INT8 */
	case 0x08: /* SIGNED_INT8 */
		return 1;
	case 0x02: /* UNSIGNED_INT16 */
	case 0x09: /* SIGNED_INT16 */
	case 0x10: /* HALF */
		return 2;
	default: /* 32-bit integers, FLOAT, and the rest */
		return 4;
	}
}

static uint64_t extent(size_t v)
{
	return v ? (uint64_t)v : 1;
}

static uint64_t array_bytes(size_t w, size_t h, size_t d, CUarray_format f,
                            unsigned channels)
{
	return extent(w) * extent(h) * extent(d) * format_bytes(f) *
	       (channels ? channels : 1);
}

CUresult cuArrayCreate_v2(CUarray *pHandle,
                          const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
	cnl_real_cuArrayCreate_v2_t real = CNL_REAL(cuArrayCreate_v2);
	const CUDA_ARRAY_DESCRIPTOR *a = pAllocateArray;
	uint64_t bytes;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting() || !a)
		return real(pHandle, pAllocateArray);
	bytes = array_bytes(a->Width, a->Height, 1, a->Format, a->NumChannels);
	if ((rc = cnl_charge(bytes)) != CUDA_SUCCESS)
		return rc;
	rc = real(pHandle, pAllocateArray);
	if (rc != CUDA_SUCCESS) {
		cnl_uncharge(bytes);
		return rc;
	}
	if (track(CNL_OBJ_ARRAY, (uintptr_t)*pHandle, bytes, 0) !=
	    CUDA_SUCCESS) {
		cuArrayDestroy(*pHandle);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

CUresult cuArray3DCreate_v2(CUarray *pHandle,
                            const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
	cnl_real_cuArray3DCreate_v2_t real = CNL_REAL(cuArray3DCreate_v2);
	const CUDA_ARRAY3D_DESCRIPTOR *a = pAllocateArray;
	uint64_t bytes;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting() || !a)
		return real(pHandle, pAllocateArray);
	bytes = array_bytes(a->Width, a->Height, a->Depth, a->Format,
	                    a->NumChannels);
	if ((rc = cnl_charge(bytes)) != CUDA_SUCCESS)
		return rc;
	rc = real(pHandle, pAllocateArray);
	if (rc != CUDA_SUCCESS) {
		cnl_uncharge(bytes);
		return rc;
	}
	if (track(CNL_OBJ_ARRAY, (uintptr_t)*pHandle, bytes, 0) !=
	    CUDA_SUCCESS) {
		cuArrayDestroy(*pHandle);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

CUresult cuArrayDestroy(CUarray hArray)
{
	cnl_real_cuArrayDestroy_t real = CNL_REAL(cuArrayDestroy);
	uint64_t bytes, aux;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting() ||
	    cnl_objs_take(CNL_OBJ_ARRAY, (uintptr_t)hArray, &bytes, &aux))
		return real(hArray);
	rc = real(hArray);
	if (rc == CUDA_SUCCESS)
		cnl_uncharge(bytes);
	else
		cnl_objs_put(CNL_OBJ_ARRAY, (uintptr_t)hArray, bytes, aux);
	return rc;
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                const CUDA_ARRAY3D_DESCRIPTOR *pDesc,
                                unsigned int numMipmapLevels)
{
	cnl_real_cuMipmappedArrayCreate_t real =
	    CNL_REAL(cuMipmappedArrayCreate);
	uint64_t bytes = 0;
	size_t w, h, d;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting() || !pDesc)
		return real(pHandle, pDesc, numMipmapLevels);
	/* Every level halves each extent (at least 1). */
	w = pDesc->Width;
	h = pDesc->Height;
	d = pDesc->Depth;
	for (unsigned l = 0; l < (numMipmapLevels ? numMipmapLevels : 1); l++) {
		bytes +=
		    array_bytes(w, h, d, pDesc->Format, pDesc->NumChannels);
		w = w > 1 ? w / 2 : w;
		h = h > 1 ? h / 2 : h;
		d = d > 1 ? d / 2 : d;
	}
	if ((rc = cnl_charge(bytes)) != CUDA_SUCCESS)
		return rc;
	rc = real(pHandle, pDesc, numMipmapLevels);
	if (rc != CUDA_SUCCESS) {
		cnl_uncharge(bytes);
		return rc;
	}
	if (track(CNL_OBJ_MIPMAP, (uintptr_t)*pHandle, bytes, 0) !=
	    CUDA_SUCCESS) {
		cuMipmappedArrayDestroy(*pHandle);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
	cnl_real_cuMipmappedArrayDestroy_t real =
	    CNL_REAL(cuMipmappedArrayDestroy);
	uint64_t bytes, aux;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting() ||
	    cnl_objs_take(CNL_OBJ_MIPMAP, (uintptr_t)hMipmappedArray, &bytes,
	                  &aux))
		return real(hMipmappedArray);
	rc = real(hMipmappedArray);
	if (rc == CUDA_SUCCESS)
		cnl_uncharge(bytes);
	else
		cnl_objs_put(CNL_OBJ_MIPMAP, (uintptr_t)hMipmappedArray, bytes,
		             aux);
	return rc;
}

/* Contexts: the footprint the agent configured, once per process. ---------- */

static CUresult ctx_charge(void)
{
	uint64_t bytes;
	CUresult rc;

	if (!accounting() || cnl_shim.mode != CNL_MODE_ON ||
	    atomic_exchange(&cnl_shim.ctx_charged, 1))
		return CUDA_SUCCESS;
	bytes = atomic_load(&cnl_shim.r->ctx_reserve);
	rc = cnl_charge(bytes);
	if (rc != CUDA_SUCCESS)
		atomic_store(&cnl_shim.ctx_charged, 0);
	return rc;
}

static void ctx_settle(CUresult rc)
{
	/* The context was not created: its footprint is not ours to keep. */
	if (rc != CUDA_SUCCESS && cnl_shim.mode == CNL_MODE_ON &&
	    atomic_exchange(&cnl_shim.ctx_charged, 0))
		cnl_uncharge(atomic_load(&cnl_shim.r->ctx_reserve));
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	cnl_real_cuCtxCreate_v2_t real = CNL_REAL(cuCtxCreate_v2);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if ((rc = ctx_charge()) != CUDA_SUCCESS)
		return rc;
	rc = real(pctx, flags, dev);
	ctx_settle(rc);
	return rc;
}

CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray,
                        int numParams, unsigned int flags, CUdevice dev)
{
	cnl_real_cuCtxCreate_v3_t real = CNL_REAL(cuCtxCreate_v3);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if ((rc = ctx_charge()) != CUDA_SUCCESS)
		return rc;
	rc = real(pctx, paramsArray, numParams, flags, dev);
	ctx_settle(rc);
	return rc;
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                        unsigned int flags, CUdevice dev)
{
	cnl_real_cuCtxCreate_v4_t real = CNL_REAL(cuCtxCreate_v4);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if ((rc = ctx_charge()) != CUDA_SUCCESS)
		return rc;
	rc = real(pctx, ctxCreateParams, flags, dev);
	ctx_settle(rc);
	return rc;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	cnl_real_cuDevicePrimaryCtxRetain_t real =
	    CNL_REAL(cuDevicePrimaryCtxRetain);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if ((rc = ctx_charge()) != CUDA_SUCCESS)
		return rc;
	rc = real(pctx, dev);
	ctx_settle(rc);
	return rc;
}

/* Memory information ------------------------------------------------------ */

/*
 * What the slice sees: total = quota (never above the real total), free =
 * total - used (never below zero, never above the real free).  With no
 * quota, the real values.
 */
void cnl_meminfo_apply(uint64_t *free, uint64_t *total, uint64_t *used)
{
	uint64_t quota, u, t, f;

	cnl_shim_init();
	if (cnl_shim.mode == CNL_MODE_BROKEN) {
		/* Fail closed: nothing can be allocated, so nothing is free
		 * (a framework sizing its pool by this must not be told
		 * the whole GPU is there). */
		*free = 0;
		if (used)
			*used = *total;
		return;
	}
	if (cnl_shim.mode != CNL_MODE_ON ||
	    !(quota = atomic_load(&cnl_shim.r->quota)))
		return;
	u = cnl_region_used(cnl_shim.r, cnl_shim.slot);
	t = quota < *total ? quota : *total;
	f = t > u ? t - u : 0;
	if (f > *free)
		f = *free;
	*total = t;
	*free = f;
	if (used)
		*used = t - f;
}

CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	cnl_real_cuMemGetInfo_v2_t real = CNL_REAL(cuMemGetInfo_v2);
	uint64_t f, t;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	rc = real(free, total);
	if (rc != CUDA_SUCCESS || !free || !total)
		return rc;
	if (cnl_shim.mode == CNL_MODE_ON && npools)
		cnl_pools_sync();
	f = *free;
	t = *total;
	cnl_meminfo_apply(&f, &t, NULL);
	*free = (size_t)f;
	*total = (size_t)t;
	return rc;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	cnl_real_cuDeviceTotalMem_v2_t real = CNL_REAL(cuDeviceTotalMem_v2);
	uint64_t quota;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	rc = real(bytes, dev);
	if (rc != CUDA_SUCCESS || !bytes)
		return rc;
	cnl_shim_init();
	if (cnl_shim.mode == CNL_MODE_ON &&
	    (quota = atomic_load(&cnl_shim.r->quota)) && quota < *bytes)
		*bytes = (size_t)quota;
	return rc;
}

/* IPC across slices ----------------------------------------------------------
 */

/*
 * An exported handle is registered as a file named after a hash of its 64
 * bytes, holding the exporter's project, in the region's IPC directory
 * (node-wide, mounted into every slice by the agent) or, where the agent
 * set none, in "<region>.ipc" (this slice only).  Opening a handle that is
 * not registered, or registered by another project, is refused.
 */
static int ipc_path(const char *kind, const void *handle, char *buf, size_t cap)
{
	const unsigned char *p = handle;
	const char *dir = cnl_shim.r->ipc_dir;
	const char *region = getenv("CNLAB_REGION");
	uint64_t h = 0xcbf29ce484222325ULL;
	int n;

	for (int i = 0; i < CU_IPC_HANDLE_SIZE; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	if (dir[0])
		n = snprintf(buf, cap, "%s/%s-%016llx", dir, kind,
		             (unsigned long long)h);
	else
		n = snprintf(buf, cap, "%s.ipc/%s-%016llx",
		             region ? region : "", kind, (unsigned long long)h);
	return n > 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

static void ipc_register(const char *kind, const void *handle)
{
	char path[512], dir[512];
	int fd;
	size_t n;

	if (ipc_path(kind, handle, path, sizeof(path)) < 0)
		return;
	n = (size_t)(strrchr(path, '/') - path);
	memcpy(dir, path, n);
	dir[n] = '\0';
	mkdir(dir, 0777); /* the slice's own registry, first export */
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	n = strnlen(cnl_shim.r->project, sizeof(cnl_shim.r->project));
	if (write(fd, cnl_shim.r->project, n) < 0)
		n = 0;
	close(fd);
}

/* Whether a handle may be opened here; logs the first refusal. */
static int ipc_allowed(const char *kind, const void *handle)
{
	char path[512], owner[CNL_REGION_PROJECT_MAX + 1];
	ssize_t n = -1;
	int fd;

	if (ipc_path(kind, handle, path, sizeof(path)) == 0 &&
	    (fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, owner, sizeof(owner) - 1);
		close(fd);
	}
	if (n >= 0) {
		owner[n] = '\0';
		if (strcmp(owner, cnl_shim.r->project) == 0)
			return 1;
	}
	cnl_log_once(CNL_LOG_IPC_DENIED,
	             "CUDA IPC %s handle from outside project %s refused", kind,
	             cnl_shim.r->project);
	return 0;
}

CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	cnl_real_cuIpcGetMemHandle_t real = CNL_REAL(cuIpcGetMemHandle);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	rc = real(pHandle, dptr);
	if (rc == CUDA_SUCCESS && accounting() && cnl_shim.mode == CNL_MODE_ON)
		ipc_register("mem", pHandle);
	return rc;
}

/* Whether a memory handle may be opened here (both symbols ask). */
static int ipc_mem_open_allowed(CUipcMemHandle *handle)
{
	return !accounting() ||
	       (cnl_shim.mode != CNL_MODE_BROKEN && ipc_allowed("mem", handle));
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                               unsigned int Flags)
{
	cnl_real_cuIpcOpenMemHandle_v2_t real = CNL_REAL(cuIpcOpenMemHandle_v2);

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ipc_mem_open_allowed(&handle))
		return CUDA_ERROR_NOT_PERMITTED;
	return real(pdptr, handle, Flags);
}

CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle,
                            unsigned int Flags)
{
	cnl_real_cuIpcOpenMemHandle_t real = CNL_REAL(cuIpcOpenMemHandle);

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ipc_mem_open_allowed(&handle))
		return CUDA_ERROR_NOT_PERMITTED;
	return real(pdptr, handle, Flags);
}

CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
	cnl_real_cuIpcGetEventHandle_t real = CNL_REAL(cuIpcGetEventHandle);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	rc = real(pHandle, event);
	if (rc == CUDA_SUCCESS && accounting() && cnl_shim.mode == CNL_MODE_ON)
		ipc_register("event", pHandle);
	return rc;
}

CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
	cnl_real_cuIpcOpenEventHandle_t real = CNL_REAL(cuIpcOpenEventHandle);

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (accounting() && (cnl_shim.mode == CNL_MODE_BROKEN ||
	                     !ipc_allowed("event", &handle)))
		return CUDA_ERROR_NOT_PERMITTED;
	return real(phEvent, handle);
}
