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
 * What is charged is what the driver reserves, not what was asked: the
 * driver hands out device memory in whole pages (2 MiB on every current
 * GPU), so a request of 2 MiB + 1 byte takes 4 MiB.  Linear allocations,
 * arrays, VMM handles and the provisional charge of a pool allocation are
 * rounded up to the granularity (granularity() below).
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

#include "shim/guard.h"
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

/* Granularity -------------------------------------------------------------
 *
 * The unit the driver reserves device memory in, learnt once per process:
 * the largest CU_MEM_ALLOC_GRANULARITY_MINIMUM of pinned device memory over
 * every device (a slice sees the devices of one node, alike in practice;
 * charging by the largest never charges less than any device takes), and
 * never below 2 MiB: the page the driver reserves linear allocations in on
 * every GPU since Pascal, whatever a driver says of VMM.  A driver that
 * cannot say (no entry point, an error) is charged at 2 MiB; a driver not
 * yet initialised is asked again at the next allocation.
 *
 * Why not settle each allocation to the drop of cuMemGetInfo's free: that
 * figure is the device's, moved by every other thread and process on the
 * GPU between the two reads, so the drop is not the allocation's (it
 * over- or under-charges by whatever else happened); the agent's NVML
 * audit of per-process use is the check for a driver that takes more than
 * it reports.
 */

#define GRAN_FLOOR (2ULL << 20)
#define GRAN_MAX   (1ULL << 30) /* a larger answer is not a page size */

typedef CUresult (*gran_fn)(size_t *, const CUmemAllocationProp *, int);
typedef CUresult (*count_fn)(int *);

static _Atomic uint64_t gran_cached; /* 0: not learnt yet */

static uint64_t granularity(void)
{
	uint64_t g = atomic_load_explicit(&gran_cached, memory_order_relaxed);
	gran_fn get;
	count_fn count;
	int n = 0;

	if (g)
		return g;
	g = GRAN_FLOOR;
	get =
	    (gran_fn)cnl_real_sym(CNL_LIB_CU, "cuMemGetAllocationGranularity");
	count = (count_fn)cnl_real_sym(CNL_LIB_CU, "cuDeviceGetCount");
	if (get && count) {
		CUresult rc = count(&n);

		if (rc == CUDA_ERROR_NOT_INITIALIZED)
			return g; /* ask again once the driver is up */
		for (int d = 0; rc == CUDA_SUCCESS && d < n; d++) {
			CUmemAllocationProp prop;
			size_t v = 0;

			memset(&prop, 0, sizeof(prop));
			prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
			prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
			prop.location.id = d;
			if (get(&v, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
			        CUDA_SUCCESS &&
			    v > g && v <= GRAN_MAX)
				g = v;
		}
	}
	atomic_store_explicit(&gran_cached, g, memory_order_relaxed);
	return g;
}

/* bytes rounded up to the granularity (unchanged where that would wrap:
 * no driver reserves such a size, and refuses it). */
static uint64_t reserved_size(uint64_t bytes)
{
	uint64_t g = granularity();
	uint64_t r = (g & (g - 1)) == 0 ? (bytes + g - 1) & ~(g - 1)
	                                : (bytes + g - 1) / g * g;

	return r < bytes ? bytes : r;
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
	uint64_t bytes;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting())
		return real(dptr, bytesize);
	bytes = reserved_size(bytesize);
	if ((rc = cnl_charge(bytes)) != CUDA_SUCCESS)
		return rc;
	rc = real(dptr, bytesize);
	if (rc != CUDA_SUCCESS) {
		cnl_uncharge(bytes);
		return rc;
	}
	if (track(CNL_OBJ_PTR, *dptr, bytes, 0) != CUDA_SUCCESS) {
		cuMemFree_v2(*dptr);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

/* The driver picks the pitch: reserve for the widest it could pick (rows
 * aligned to 512 bytes), then settle to the real pitch x height; both in
 * whole pages. */
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
	guess =
	    reserved_size((((uint64_t)WidthInBytes + 511) & ~511ULL) * Height);
	if ((rc = cnl_charge(guess)) != CUDA_SUCCESS)
		return rc;
	rc = real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
	if (rc != CUDA_SUCCESS) {
		cnl_uncharge(guess);
		return rc;
	}
	bytes = reserved_size((uint64_t)*pPitch * Height);
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
	uint64_t bytes;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting())
		return real(dptr, bytesize, flags);
	bytes = reserved_size(bytesize);
	if ((rc = cnl_charge(bytes)) != CUDA_SUCCESS)
		return rc;
	rc = real(dptr, bytesize, flags);
	if (rc != CUDA_SUCCESS) {
		cnl_uncharge(bytes);
		return rc;
	}
	if (track(CNL_OBJ_PTR, *dptr, bytes, 0) != CUDA_SUCCESS) {
		cuMemFree_v2(*dptr);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

static int64_t pool_settle(CUmemoryPool pool, int64_t provisional);

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
 * it, now folded into the pool's charge.  Returns how far the pool grew
 * beyond provisional (charged over the quota if need be; 0 or less when
 * it did not).  Called with pools_lock free.
 */
static int64_t pool_settle(CUmemoryPool pool, int64_t provisional)
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
		return 0;
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
	return delta;
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

/* Whether the slice now holds more than its quota. */
static int over_quota(void)
{
	uint64_t quota;

	if (cnl_shim.mode != CNL_MODE_ON)
		return 0;
	quota = atomic_load(&cnl_shim.r->quota);
	return quota && cnl_region_used(cnl_shim.r, cnl_shim.slot) > quota;
}

/*
 * A pool that grows in chunks larger than the granularity (the real
 * driver's may) can take more than the provisional charge, past the quota.
 * Then the allocation is undone: freed, the stream work drained so the
 * pool holds it unused, the pool trimmed back to what it reserved before
 * (grown bytes less), and the charge settled; the caller reports
 * CUDA_ERROR_OUT_OF_MEMORY.  Rare (at the quota's edge) and slow on
 * purpose: it synchronises the context.
 */
static void pool_undo(CUmemoryPool pool, CUdeviceptr ptr, CUstream s,
                      int64_t grown)
{
	cnl_real_cuMemFreeAsync_t free_async_real = CNL_REAL(cuMemFreeAsync);
	cnl_real_cuCtxSynchronize_t sync = CNL_REAL(cuCtxSynchronize);
	cnl_real_cuMemPoolTrimTo_t trim = CNL_REAL(cuMemPoolTrimTo);
	int64_t reserved;

	if (free_async_real)
		free_async_real(ptr, s);
	if (sync)
		sync();
	reserved = pool_reserved(pool);
	if (trim && reserved >= 0)
		trim(pool, (size_t)(reserved > grown ? reserved - grown : 0));
	cnl_pools_sync(); /* the synchronisation may have trimmed others */
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize,
                            CUmemoryPool pool, CUstream s, void *real,
                            int from_pool)
{
	uint64_t bytes;
	int64_t grown;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting())
		return from_pool
		           ? ((alloc_async_fn)real)(dptr, bytesize, pool, s)
		           : ((CUresult(*)(CUdeviceptr *, size_t,
		                           CUstream))real)(dptr, bytesize, s);
	/* Provisional: what the pool grows by if it must (at least a page),
	 * settled to its reserved size at once. */
	bytes = reserved_size(bytesize);
	if ((rc = cnl_charge(bytes)) != CUDA_SUCCESS)
		return rc;
	if (from_pool)
		rc = ((alloc_async_fn)real)(dptr, bytesize, pool, s);
	else
		rc = ((CUresult(*)(CUdeviceptr *, size_t, CUstream))real)(
		    dptr, bytesize, s);
	if (rc != CUDA_SUCCESS) {
		cnl_uncharge(bytes);
		return rc;
	}
	if (!from_pool)
		pool = current_pool();
	grown = pool_settle(pool, (int64_t)bytes);
	if (grown > 0 && over_quota()) {
		pool_undo(pool, *dptr, s, grown + (int64_t)bytes);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (cnl_objs_put(CNL_OBJ_ASYNC, *dptr, bytesize, (uintptr_t)pool) < 0)
		return CUDA_SUCCESS; /* the pool's charge still covers it */
	return CUDA_SUCCESS;
}

/* Whether stream s is capturing into a graph (the allocation would become a
 * graph allocation node): refused under a quota (end of this file). */
static int capture_refused(CUstream s, int ptds);

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	if (capture_refused(hStream, 0))
		return CUDA_ERROR_NOT_PERMITTED;
	return alloc_async(dptr, bytesize, NULL, hStream,
	                   (void *)CNL_REAL(cuMemAllocAsync), 0);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                              CUstream hStream)
{
	if (capture_refused(hStream, 1))
		return CUDA_ERROR_NOT_PERMITTED;
	return alloc_async(dptr, bytesize, NULL, hStream,
	                   (void *)CNL_REAL(cuMemAllocAsync_ptsz), 0);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                 CUmemoryPool pool, CUstream hStream)
{
	if (capture_refused(hStream, 0))
		return CUDA_ERROR_NOT_PERMITTED;
	return alloc_async(dptr, bytesize, pool, hStream,
	                   (void *)CNL_REAL(cuMemAllocFromPoolAsync), 1);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                      CUmemoryPool pool, CUstream hStream)
{
	if (capture_refused(hStream, 0))
		return CUDA_ERROR_NOT_PERMITTED;
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
	uint64_t bytes;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	/* Host and host-NUMA locations are not VRAM. */
	if (!accounting() || !prop ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return real(handle, size, prop, flags);
	/* The driver refuses a size that is not a multiple of the
	 * granularity; were one accepted, it would take whole granules. */
	bytes = reserved_size(size);
	if ((rc = cnl_charge(bytes)) != CUDA_SUCCESS)
		return rc;
	rc = real(handle, size, prop, flags);
	if (rc != CUDA_SUCCESS) {
		cnl_uncharge(bytes);
		return rc;
	}
	if (track(CNL_OBJ_VMM, *handle, bytes, 0) != CUDA_SUCCESS) {
		cuMemRelease(*handle);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

/*
 * The driver frees a released handle's memory only when its last mapping
 * is unmapped (cuda.h, cuMemRelease): a handle released while mapped keeps
 * its charge, counted down by cuMemUnmap.  The handle's entry counts its
 * mappings in aux; each mapping is remembered by address.  One lock held
 * across the driver's map, unmap and release and the count's update, so
 * threads mapping and releasing one handle at once cannot lose a count
 * (VMM calls are not a hot path).
 */
static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	cnl_real_cuMemRelease_t real = CNL_REAL(cuMemRelease);
	uint64_t bytes, aux;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting())
		return real(handle);
	pthread_mutex_lock(&vmm_lock);
	if (cnl_objs_take(CNL_OBJ_VMM, handle, &bytes, &aux)) {
		pthread_mutex_unlock(&vmm_lock);
		return real(handle);
	}
	rc = real(handle);
	if (rc != CUDA_SUCCESS)
		cnl_objs_put(CNL_OBJ_VMM, handle, bytes, aux);
	else if (!aux ||
	         cnl_objs_put(CNL_OBJ_VMM_RELEASED, handle, bytes, aux) < 0)
		cnl_uncharge(bytes);
	pthread_mutex_unlock(&vmm_lock);
	return rc;
}

/* Add delta to the mapping count of handle; a released handle whose count
 * reaches 0 gives its charge back.  vmm_lock held. */
static void vmm_mappings(uint64_t handle, int delta)
{
	uint64_t bytes, n;

	if (cnl_objs_take(CNL_OBJ_VMM, handle, &bytes, &n) == 0) {
		n = delta < 0 && n == 0 ? 0 : n + (uint64_t)(int64_t)delta;
		cnl_objs_put(CNL_OBJ_VMM, handle, bytes, n);
	} else if (cnl_objs_take(CNL_OBJ_VMM_RELEASED, handle, &bytes, &n) ==
	           0) {
		n = delta < 0 && n == 0 ? 0 : n + (uint64_t)(int64_t)delta;
		if (n)
			cnl_objs_put(CNL_OBJ_VMM_RELEASED, handle, bytes, n);
		else
			cnl_uncharge(bytes);
	}
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                  CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	cnl_real_cuMemMap_t real = CNL_REAL(cuMemMap);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting())
		return real(ptr, size, offset, handle, flags);
	pthread_mutex_lock(&vmm_lock);
	rc = real(ptr, size, offset, handle, flags);
	if (rc == CUDA_SUCCESS &&
	    cnl_objs_put(CNL_OBJ_MAP, ptr, size, handle) == 0)
		vmm_mappings(handle, 1);
	pthread_mutex_unlock(&vmm_lock);
	return rc;
}

/* The driver unmaps whole mappings only: walk them from ptr. */
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	cnl_real_cuMemUnmap_t real = CNL_REAL(cuMemUnmap);
	uint64_t at = ptr, len, handle;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting())
		return real(ptr, size);
	pthread_mutex_lock(&vmm_lock);
	rc = real(ptr, size);
	while (rc == CUDA_SUCCESS && at < ptr + size &&
	       cnl_objs_take(CNL_OBJ_MAP, at, &len, &handle) == 0 && len) {
		vmm_mappings(handle, -1);
		at += len;
	}
	pthread_mutex_unlock(&vmm_lock);
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

/* An array takes whole pages like any device allocation. */
static uint64_t array_reserved(size_t w, size_t h, size_t d, CUarray_format f,
                               unsigned channels)
{
	return reserved_size(array_bytes(w, h, d, f, channels));
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
	bytes =
	    array_reserved(a->Width, a->Height, 1, a->Format, a->NumChannels);
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
	bytes = array_reserved(a->Width, a->Height, a->Depth, a->Format,
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
	bytes = reserved_size(bytes); /* the levels share the pages */
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
	return cnl_guard_ipc_path(cnl_shim.r, cnl_shim_region_path(), kind,
	                          handle, buf, cap);
}

static void ipc_register(const char *kind, const void *handle)
{
	cnl_guard_ipc_register(cnl_shim.r, cnl_shim_region_path(), kind,
	                       handle);
}

/* Whether a handle may be opened here; logs the first refusal. */
static int ipc_allowed(const char *kind, const void *handle)
{
	if (cnl_guard_ipc_owned(cnl_shim.r, cnl_shim_region_path(), kind,
	                        handle))
		return 1;
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

/* Every other driver export -----------------------------------------------
 *
 * driver-exports.tsv classifies every symbol the driver exports; these are
 * the ones besides the above through which a tenant could obtain device
 * memory uncharged or open another project's.  Where the memory can be
 * charged it is; where it cannot (graph allocation nodes, external memory,
 * the 32-bit pitch and array creators) the call is refused under a quota
 * with CUDA_ERROR_NOT_PERMITTED, one line on stderr, and passes through
 * untouched without a region.
 */

/* Whether a call that would escape the quota is refused here (a region is
 * configured, usable or not); logs the first refusal. */
static int refused(const char *what)
{
	if (!accounting())
		return 0;
	cnl_log_once(CNL_LOG_ESCAPE,
	             "%s refused: its device memory cannot be charged to the "
	             "slice's quota",
	             what);
	return 1;
}

typedef CUresult (*is_capturing_fn)(CUstream, CUstreamCaptureStatus *);
static is_capturing_fn _Atomic is_capturing[2];

static int capture_refused(CUstream s, int ptds)
{
	static const char *const names[2] = {"cuStreamIsCapturing",
	                                     "cuStreamIsCapturing_ptsz"};
	is_capturing_fn f;
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;

	if (!accounting())
		return 0;
	f = atomic_load_explicit(&is_capturing[ptds], memory_order_acquire);
	if (!f) {
		f = (is_capturing_fn)cnl_real_sym(CNL_LIB_CU, names[ptds]);
		if (!f)
			return 0; /* a driver without graphs cannot capture */
		atomic_store_explicit(&is_capturing[ptds], f,
		                      memory_order_release);
	}
	/* An error (a bad stream) is the allocation's to report. */
	if (f(s, &st) != CUDA_SUCCESS || st == CU_STREAM_CAPTURE_STATUS_NONE)
		return 0;
	return refused("cuMemAllocAsync on a capturing stream (a graph "
	               "allocation node)");
}

/* 32-bit entry points. */

CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
	cnl_real_cuMemAlloc_t real = CNL_REAL(cuMemAlloc);
	uint64_t bytes;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!accounting())
		return real(dptr, bytesize);
	/* Whole pages, as cuMemAlloc_v2: the driver reserves them alike. */
	bytes = reserved_size(bytesize);
	if ((rc = cnl_charge(bytes)) != CUDA_SUCCESS)
		return rc;
	rc = real(dptr, bytesize);
	if (rc != CUDA_SUCCESS) {
		cnl_uncharge(bytes);
		return rc;
	}
	if (track(CNL_OBJ_PTR, *dptr, bytes, 0) != CUDA_SUCCESS) {
		cuMemFree(*dptr);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
	cnl_real_cuMemFree_t real = CNL_REAL(cuMemFree);
	uint64_t bytes, aux;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || !accounting() ||
	    cnl_objs_take(CNL_OBJ_PTR, dptr, &bytes, &aux) < 0)
		return real(dptr);
	rc = real(dptr);
	if (rc == CUDA_SUCCESS)
		cnl_uncharge(bytes);
	else
		cnl_objs_put(CNL_OBJ_PTR, dptr, bytes, aux);
	return rc;
}

CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                         unsigned int WidthInBytes, unsigned int Height,
                         unsigned int ElementSizeBytes)
{
	cnl_real_cuMemAllocPitch_t real = CNL_REAL(cuMemAllocPitch);

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (refused("cuMemAllocPitch (32-bit)"))
		return CUDA_ERROR_NOT_PERMITTED;
	return real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
}

CUresult cuArrayCreate(CUarray *pHandle,
                       const CUDA_ARRAY_DESCRIPTOR_v1 *pAllocateArray)
{
	cnl_real_cuArrayCreate_t real = CNL_REAL(cuArrayCreate);

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (refused("cuArrayCreate (32-bit)"))
		return CUDA_ERROR_NOT_PERMITTED;
	return real(pHandle, pAllocateArray);
}

CUresult cuArray3DCreate(CUarray *pHandle,
                         const CUDA_ARRAY3D_DESCRIPTOR_v1 *pAllocateArray)
{
	cnl_real_cuArray3DCreate_t real = CNL_REAL(cuArray3DCreate);

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (refused("cuArray3DCreate (32-bit)"))
		return CUDA_ERROR_NOT_PERMITTED;
	return real(pHandle, pAllocateArray);
}

CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
	cnl_real_cuMemGetInfo_t real = CNL_REAL(cuMemGetInfo);
	uint64_t f, t;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	rc = real(free, total);
	if (rc != CUDA_SUCCESS || !free || !total)
		return rc;
	cnl_shim_init();
	if (cnl_shim.mode == CNL_MODE_ON && npools)
		cnl_pools_sync();
	f = *free;
	t = *total;
	cnl_meminfo_apply(&f, &t, NULL);
	*free = (unsigned int)f;
	*total = (unsigned int)t;
	return rc;
}

CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	cnl_real_cuDeviceTotalMem_t real = CNL_REAL(cuDeviceTotalMem);
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
		*bytes = (unsigned int)quota;
	return rc;
}

/* Graph allocation nodes. */

CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                const CUgraphNode *dependencies,
                                size_t numDependencies,
                                CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
	cnl_real_cuGraphAddMemAllocNode_t real =
	    CNL_REAL(cuGraphAddMemAllocNode);

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (refused("cuGraphAddMemAllocNode"))
		return CUDA_ERROR_NOT_PERMITTED;
	return real(phGraphNode, hGraph, dependencies, numDependencies,
	            nodeParams);
}

static int alloc_node(const CUgraphNodeParams *p)
{
	return p && p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC &&
	       refused("cuGraphAddNode of a memory allocation node");
}

CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                        const CUgraphNode *dependencies, size_t numDependencies,
                        CUgraphNodeParams *nodeParams)
{
	cnl_real_cuGraphAddNode_t real = CNL_REAL(cuGraphAddNode);

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (alloc_node(nodeParams))
		return CUDA_ERROR_NOT_PERMITTED;
	return real(phGraphNode, hGraph, dependencies, numDependencies,
	            nodeParams);
}

CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                           const CUgraphNode *dependencies,
                           const CUgraphEdgeData *dependencyData,
                           size_t numDependencies,
                           CUgraphNodeParams *nodeParams)
{
	cnl_real_cuGraphAddNode_v2_t real = CNL_REAL(cuGraphAddNode_v2);

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (alloc_node(nodeParams))
		return CUDA_ERROR_NOT_PERMITTED;
	return real(phGraphNode, hGraph, dependencies, dependencyData,
	            numDependencies, nodeParams);
}

/*
 * Shareable handles.  The key registered for a handle is 64 bytes, hashed
 * into the IPC registry as IPC handles are: a fabric handle or a pool
 * pointer's export data is its own 64 bytes; a file descriptor is named by
 * its open file (device and inode), which passing it over a socket or
 * opening /proc/PID/fd/N keeps.  Two projects registering the same file
 * (an inode reused, or a driver whose descriptors share one) make the key
 * nobody's: both are refused, never one let into the other's memory.
 */
#define CONFLICT "/" /* no project is named "/" */

static int handle_key(CUmemAllocationHandleType type, const void *handle,
                      int by_value, unsigned char key[CU_IPC_HANDLE_SIZE])
{
	struct stat st;
	int fd;

	memset(key, 0, CU_IPC_HANDLE_SIZE);
	if (type == CU_MEM_HANDLE_TYPE_FABRIC && handle) {
		memcpy(key, handle, CU_IPC_HANDLE_SIZE);
		return 0;
	}
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return -EINVAL;
	/* Exported: the driver wrote an int; imported: the fd is the value. */
	if (by_value)
		fd = (int)(intptr_t)handle;
	else if (handle)
		memcpy(&fd, handle, sizeof(fd));
	else
		return -EINVAL;
	if (fstat(fd, &st) < 0)
		return -errno;
	snprintf((char *)key, CU_IPC_HANDLE_SIZE, "fd %llx %llx",
	         (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
	return 1;
}

/* Register key for this project; a key another project registered
 * becomes nobody's (see above). */
static void share_register(const char *kind, const unsigned char *key,
                           int exclusive)
{
	char path[512], owner[CNL_REGION_PROJECT_MAX + 1];
	ssize_t n;
	int fd;

	if (exclusive && ipc_path(kind, key, path, sizeof(path)) == 0 &&
	    (fd = open(path, O_RDWR | O_CLOEXEC)) >= 0) {
		n = read(fd, owner, sizeof(owner) - 1);
		owner[n > 0 ? n : 0] = '\0';
		if (strcmp(owner, cnl_shim.r->project) != 0 &&
		    ftruncate(fd, 0) == 0 && pwrite(fd, CONFLICT, 1, 0) < 0)
			n = 0;
		close(fd);
		return;
	}
	ipc_register(kind, key);
}

static void share_exported(const char *kind, CUmemAllocationHandleType type,
                           const void *handle)
{
	unsigned char key[CU_IPC_HANDLE_SIZE];
	int rc;

	if (!accounting() || cnl_shim.mode != CNL_MODE_ON)
		return;
	if ((rc = handle_key(type, handle, 0, key)) >= 0)
		share_register(kind, key, rc == 1);
}

/* Whether an import of handle may go ahead here. */
static int share_import_allowed(const char *kind,
                                CUmemAllocationHandleType type,
                                const void *handle, int by_value)
{
	unsigned char key[CU_IPC_HANDLE_SIZE];

	if (!accounting())
		return 1;
	if (cnl_shim.mode == CNL_MODE_BROKEN ||
	    handle_key(type, handle, by_value, key) < 0) {
		cnl_log_once(CNL_LOG_IPC_DENIED,
		             "import of a %s handle of type %d refused", kind,
		             (int)type);
		return 0;
	}
	return ipc_allowed(kind, key);
}

CUresult cuMemExportToShareableHandle(void *shareableHandle,
                                      CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType,
                                      unsigned long long flags)
{
	cnl_real_cuMemExportToShareableHandle_t real =
	    CNL_REAL(cuMemExportToShareableHandle);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	rc = real(shareableHandle, handle, handleType, flags);
	if (rc == CUDA_SUCCESS)
		share_exported("vmm", handleType, shareableHandle);
	return rc;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                        void *osHandle,
                                        CUmemAllocationHandleType shHandleType)
{
	cnl_real_cuMemImportFromShareableHandle_t real =
	    CNL_REAL(cuMemImportFromShareableHandle);

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	/* A file descriptor is passed by value, a fabric handle by address. */
	if (!share_import_allowed("vmm", shHandleType, osHandle,
	                          shHandleType ==
	                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		return CUDA_ERROR_NOT_PERMITTED;
	return real(handle, osHandle, shHandleType);
}

CUresult cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                          CUmemAllocationHandleType handleType,
                                          unsigned long long flags)
{
	cnl_real_cuMemPoolExportToShareableHandle_t real =
	    CNL_REAL(cuMemPoolExportToShareableHandle);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	rc = real(handle_out, pool, handleType, flags);
	if (rc == CUDA_SUCCESS)
		share_exported("pool", handleType, handle_out);
	return rc;
}

CUresult
cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                   CUmemAllocationHandleType handleType,
                                   unsigned long long flags)
{
	cnl_real_cuMemPoolImportFromShareableHandle_t real =
	    CNL_REAL(cuMemPoolImportFromShareableHandle);

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!share_import_allowed("pool", handleType, handle,
	                          handleType ==
	                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		return CUDA_ERROR_NOT_PERMITTED;
	return real(pool_out, handle, handleType, flags);
}

CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out,
                                CUdeviceptr ptr)
{
	cnl_real_cuMemPoolExportPointer_t real =
	    CNL_REAL(cuMemPoolExportPointer);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	rc = real(shareData_out, ptr);
	if (rc == CUDA_SUCCESS && shareData_out && accounting() &&
	    cnl_shim.mode == CNL_MODE_ON)
		ipc_register("poolptr", shareData_out);
	return rc;
}

CUresult cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool,
                                CUmemPoolPtrExportData *shareData)
{
	cnl_real_cuMemPoolImportPointer_t real =
	    CNL_REAL(cuMemPoolImportPointer);

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (accounting() && (cnl_shim.mode == CNL_MODE_BROKEN || !shareData ||
	                     !ipc_allowed("poolptr", shareData)))
		return CUDA_ERROR_NOT_PERMITTED;
	return real(ptr_out, pool, shareData);
}

/* External memory. */

CUresult
cuImportExternalMemory(CUexternalMemory *extMem_out,
                       const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *memHandleDesc)
{
	cnl_real_cuImportExternalMemory_t real =
	    CNL_REAL(cuImportExternalMemory);

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (refused("cuImportExternalMemory"))
		return CUDA_ERROR_NOT_PERMITTED;
	return real(extMem_out, memHandleDesc);
}

/* Contexts the hooks above do not create. */

CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	cnl_real_cuCtxCreate_t real = CNL_REAL(cuCtxCreate);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if ((rc = ctx_charge()) != CUDA_SUCCESS)
		return rc;
	rc = real(pctx, flags, dev);
	ctx_settle(rc);
	return rc;
}

CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc,
                          CUdevice dev, unsigned int flags)
{
	cnl_real_cuGreenCtxCreate_t real = CNL_REAL(cuGreenCtxCreate);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if ((rc = ctx_charge()) != CUDA_SUCCESS)
		return rc;
	rc = real(phCtx, desc, dev, flags);
	ctx_settle(rc);
	return rc;
}

/*
 * Context limits.  The malloc heap and the printf FIFO are device memory
 * of their size; the stack limit is per thread, reserved for every thread
 * the device can hold at once.  What a limit adds to the value the
 * context had before the process first set it is charged (the defaults
 * are part of the context footprint); lowering it gives back.  One
 * process-wide figure per limit: the last value set is what it holds.
 */
#define LIMITS 3
static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t limit_base[LIMITS], limit_charged[LIMITS];
static int limit_based[LIMITS];

typedef CUresult (*get_limit_fn)(size_t *, CUlimit);
typedef CUresult (*get_attr_fn)(int *, int, CUdevice);

/* Threads the current device can hold at once (stack limit multiplier);
 * the largest current GPU's where the driver cannot say. */
static uint64_t resident_threads(void)
{
	ctx_dev_fn get_dev =
	    (ctx_dev_fn)cnl_real_sym(CNL_LIB_CU, "cuCtxGetDevice");
	get_attr_fn attr =
	    (get_attr_fn)cnl_real_sym(CNL_LIB_CU, "cuDeviceGetAttribute");
	CUdevice dev;
	int sms = 0, per_sm = 0;

	if (get_dev && attr && get_dev(&dev) == CUDA_SUCCESS &&
	    attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) ==
	        CUDA_SUCCESS &&
	    attr(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
	         dev) == CUDA_SUCCESS &&
	    sms > 0 && per_sm > 0)
		return (uint64_t)sms * (uint64_t)per_sm;
	return 160ULL * 2048ULL;
}

CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
	cnl_real_cuCtxSetLimit_t real = CNL_REAL(cuCtxSetLimit);
	get_limit_fn get;
	uint64_t want, have, mult;
	size_t base;
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (limit < 0 || limit >= LIMITS || !accounting())
		return real(limit, value);
	mult = limit == CU_LIMIT_STACK_SIZE ? resident_threads() : 1;
	pthread_mutex_lock(&limit_lock);
	if (!limit_based[limit]) {
		get = (get_limit_fn)cnl_real_sym(CNL_LIB_CU, "cuCtxGetLimit");
		if (get && get(&base, limit) == CUDA_SUCCESS)
			limit_base[limit] = base;
		limit_based[limit] = 1;
	}
	/* Saturating: a stack size whose product with the resident threads
	 * wraps would otherwise be charged next to nothing. */
	want = 0;
	if (value > limit_base[limit] &&
	    __builtin_mul_overflow((uint64_t)(value - limit_base[limit]), mult,
	                           &want))
		want = UINT64_MAX;
	have = limit_charged[limit];
	if (want > have && (rc = cnl_charge(want - have)) != CUDA_SUCCESS) {
		pthread_mutex_unlock(&limit_lock);
		return rc;
	}
	rc = real(limit, value);
	if (rc != CUDA_SUCCESS) {
		if (want > have)
			cnl_uncharge(want - have);
	} else {
		if (want < have)
			cnl_uncharge(have - want);
		limit_charged[limit] = want;
	}
	pthread_mutex_unlock(&limit_lock);
	return rc;
}
