/*
 * mem.c - VRAM quota for HIP programs: every way the HIP runtime creates or
 * gives back device memory, the memory information a program sees, and
 * IPC across slices.  The shape is the CUDA shim's (src/shim/mem.c):
 *
 *     reserve the charge in the region (quota checked, atomically)
 *         | over quota: reap dead processes, settle pools, retry once,
 *         |             else hipErrorOutOfMemory (nothing called)
 *     call the runtime
 *         | failed: give the reservation back, return the runtime's error
 *     remember pointer -> charge (the free gives exactly that back)
 *
 * Charges are what the runtime takes, not what was asked: linear memory
 * and arrays in whole 4 KiB pages (CNL_HIP_PAGE), pitched memory at the
 * pitch the runtime chose, VMM handles at their size (which the runtime
 * requires to be a multiple of its granularity), stream-ordered memory at
 * its pool's reserved size (hipMemPoolAttrReservedMemCurrent), settled
 * after every allocation, free, trim, synchronise and hipMemGetInfo.
 *
 * A region that was named but cannot be used fails closed: allocations are
 * refused with hipErrorOutOfMemory, hipMemGetInfo reports nothing free and
 * IPC opens are refused.
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
#include "shim/hip/hip-internal.h"

/* Handle table: key -> charge, one mutex per shard. ----------------------- */

enum obj_kind {
	OBJ_PTR = 1, /* hipMalloc*, managed, pitched, 3D */
	OBJ_ASYNC,   /* stream-ordered: charged through its pool */
	OBJ_VMM,     /* hipMemCreate handle */
	OBJ_ARRAY,   /* hipMallocArray, hipMalloc3DArray */
};

#define SHARDS  64
#define BUCKETS 4096

struct obj {
	struct obj *next;
	uint64_t key, bytes, aux;
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

static int objs_put(int kind, uint64_t key, uint64_t bytes, uint64_t aux)
{
	struct obj *o = malloc(sizeof(*o));
	unsigned b = bucket_of(kind, key);

	if (!o)
		return -ENOMEM;
	o->key = key;
	o->bytes = bytes;
	o->aux = aux;
	o->kind = kind;
	pthread_mutex_lock(&shard_lock[b % SHARDS]);
	o->next = buckets[b];
	buckets[b] = o;
	pthread_mutex_unlock(&shard_lock[b % SHARDS]);
	return 0;
}

static int objs_take(int kind, uint64_t key, uint64_t *ret_bytes,
                     uint64_t *ret_aux)
{
	unsigned b = bucket_of(kind, key);
	struct obj **pp, *o = NULL;

	pthread_mutex_lock(&shard_lock[b % SHARDS]);
	for (pp = &buckets[b]; *pp; pp = &(*pp)->next)
		if ((*pp)->key == key && (*pp)->kind == kind) {
			o = *pp;
			*pp = o->next;
			break;
		}
	pthread_mutex_unlock(&shard_lock[b % SHARDS]);
	if (!o)
		return -ENOENT;
	*ret_bytes = o->bytes;
	*ret_aux = o->aux;
	free(o);
	return 0;
}

/* Charging ----------------------------------------------------------------- */

static uint64_t pages(uint64_t bytes)
{
	return (bytes + CNL_HIP_PAGE - 1) & ~(CNL_HIP_PAGE - 1);
}

/* Whether allocations are accounted at all (attaching on first use). */
static int accounting(void)
{
	cnl_hip_init();
	return cnl_hip.mode != CNL_HIP_PASS;
}

static hipError_t charge(uint64_t bytes)
{
	int rc;

	if (cnl_hip.mode == CNL_HIP_PASS)
		return hipSuccess;
	if (cnl_hip.mode == CNL_HIP_BROKEN)
		return hipErrorOutOfMemory;
	rc = cnl_region_reserve(cnl_hip.r, cnl_hip.slot, bytes, 0);
	if (rc == -ENOMEM) {
		cnl_region_reap(&cnl_hip.h, cnl_hip.slot);
		cnl_hip_pools_sync();
		rc = cnl_region_reserve(cnl_hip.r, cnl_hip.slot, bytes, 0);
	}
	if (rc < 0) {
		cnl_hip_log_once(
		    CNL_HIP_LOG_OOM,
		    "allocation of %llu bytes refused: slice quota %llu bytes, "
		    "%llu in use",
		    (unsigned long long)bytes,
		    (unsigned long long)atomic_load(&cnl_hip.r->quota),
		    (unsigned long long)cnl_region_used(cnl_hip.r,
		                                        cnl_hip.slot));
		return hipErrorOutOfMemory;
	}
	return hipSuccess;
}

static void uncharge(uint64_t bytes)
{
	if (cnl_hip.mode == CNL_HIP_ON && bytes)
		cnl_region_unreserve(cnl_hip.r, cnl_hip.slot, bytes);
}

static void charge_force(uint64_t bytes)
{
	if (cnl_hip.mode == CNL_HIP_ON && bytes)
		cnl_region_reserve(cnl_hip.r, cnl_hip.slot, bytes, 1);
}

/* Remember key -> bytes; if the table cannot grow, free through undo. */
static hipError_t track(int kind, uint64_t key, uint64_t bytes, uint64_t aux,
                        hipError_t (*undo)(void *), void *arg)
{
	if (objs_put(kind, key, bytes, aux) == 0)
		return hipSuccess;
	if (undo)
		undo(arg);
	uncharge(bytes);
	return hipErrorOutOfMemory;
}

static hipError_t free_raw(void *p)
{
	cnl_hip_real_hipFree_t real = CNL_HIP_REAL(hipFree);

	return real ? real(p) : hipErrorNotInitialized;
}

/* Linear allocations ------------------------------------------------------- */

typedef hipError_t (*alloc_flags_fn)(void **, size_t, unsigned int);

/* hipMalloc, hipMallocManaged, hipExtMallocWithFlags: size in pages. */
static hipError_t linear(void **ptr, size_t size, unsigned int flags,
                         void *real, int with_flags)
{
	uint64_t bytes = pages(size);
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
#define CALL()                                                 \
	(with_flags ? ((alloc_flags_fn)real)(ptr, size, flags) \
	            : ((hipError_t(*)(void **, size_t))real)(ptr, size))
	if (!accounting() || !ptr || !size)
		return CALL();
	if ((rc = charge(bytes)) != hipSuccess)
		return rc;
	rc = CALL();
#undef CALL
	if (rc != hipSuccess || !*ptr) {
		uncharge(bytes);
		return rc;
	}
	return track(OBJ_PTR, (uintptr_t)*ptr, bytes, 0, free_raw, *ptr);
}

hipError_t hipMalloc(void **ptr, size_t size)
{
	return linear(ptr, size, 0, (void *)CNL_HIP_REAL(hipMalloc), 0);
}

hipError_t hipMallocManaged(void **ptr, size_t size, unsigned int flags)
{
	return linear(ptr, size, flags, (void *)CNL_HIP_REAL(hipMallocManaged),
	              1);
}

hipError_t hipExtMallocWithFlags(void **ptr, size_t size, unsigned int flags)
{
	return linear(ptr, size, flags,
	              (void *)CNL_HIP_REAL(hipExtMallocWithFlags), 1);
}

/*
 * Pitched memory: the runtime picks the pitch.  Reserve for the widest it
 * could pick (rows aligned to 512 bytes), then settle to pitch x rows.
 */
static hipError_t settle_pitched(void *p, uint64_t guess, uint64_t bytes)
{
	if (bytes > guess)
		charge_force(bytes - guess);
	else
		uncharge(guess - bytes);
	return track(OBJ_PTR, (uintptr_t)p, bytes, 0, free_raw, p);
}

static uint64_t pitch_guess(uint64_t width, uint64_t rows)
{
	return pages(((width + 511) & ~511ULL) * rows);
}

hipError_t hipMallocPitch(void **ptr, size_t *pitch, size_t width,
                          size_t height)
{
	cnl_hip_real_hipMallocPitch_t real = CNL_HIP_REAL(hipMallocPitch);
	uint64_t guess;
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	if (!accounting() || !ptr || !pitch || !width || !height)
		return real(ptr, pitch, width, height);
	guess = pitch_guess(width, height);
	if ((rc = charge(guess)) != hipSuccess)
		return rc;
	rc = real(ptr, pitch, width, height);
	if (rc != hipSuccess || !*ptr) {
		uncharge(guess);
		return rc;
	}
	return settle_pitched(*ptr, guess, pages((uint64_t)*pitch * height));
}

hipError_t hipMalloc3D(hipPitchedPtr *pp, hipExtent e)
{
	cnl_hip_real_hipMalloc3D_t real = CNL_HIP_REAL(hipMalloc3D);
	uint64_t rows = (uint64_t)e.height * e.depth, guess;
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	if (!accounting() || !pp || !e.width || !rows)
		return real(pp, e);
	guess = pitch_guess(e.width, rows);
	if ((rc = charge(guess)) != hipSuccess)
		return rc;
	rc = real(pp, e);
	if (rc != hipSuccess || !pp->ptr) {
		uncharge(guess);
		return rc;
	}
	return settle_pitched(pp->ptr, guess,
	                      pages((uint64_t)pp->pitch * rows));
}

hipError_t hipMemAllocPitch(hipDeviceptr_t *ptr, size_t *pitch, size_t width,
                            size_t height, unsigned int elem)
{
	cnl_hip_real_hipMemAllocPitch_t real = CNL_HIP_REAL(hipMemAllocPitch);
	uint64_t guess;
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	if (!accounting() || !ptr || !pitch || !width || !height)
		return real(ptr, pitch, width, height, elem);
	guess = pitch_guess(width, height);
	if ((rc = charge(guess)) != hipSuccess)
		return rc;
	rc = real(ptr, pitch, width, height, elem);
	if (rc != hipSuccess || !*ptr) {
		uncharge(guess);
		return rc;
	}
	return settle_pitched(*ptr, guess, pages((uint64_t)*pitch * height));
}

static hipError_t undo_pool_free(void *p);

hipError_t hipFree(void *ptr)
{
	cnl_hip_real_hipFree_t real = CNL_HIP_REAL(hipFree);
	uint64_t bytes, aux;
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	if (!ptr || !accounting())
		return real(ptr);
	if (objs_take(OBJ_PTR, (uintptr_t)ptr, &bytes, &aux) == 0) {
		rc = real(ptr);
		if (rc == hipSuccess)
			uncharge(bytes);
		else
			objs_put(OBJ_PTR, (uintptr_t)ptr, bytes, aux);
		return rc;
	}
	if (objs_take(OBJ_ASYNC, (uintptr_t)ptr, &bytes, &aux) == 0) {
		rc = real(ptr);
		if (rc == hipSuccess)
			undo_pool_free((void *)(uintptr_t)aux);
		else
			objs_put(OBJ_ASYNC, (uintptr_t)ptr, bytes, aux);
		return rc;
	}
	return real(ptr);
}

/* Arrays: width x height x depth x element size, in pages. --------------- */

static uint64_t element_bytes(const struct hipChannelFormatDesc *d)
{
	int bits = d->x + d->y + d->z + d->w;

	return bits > 0 ? (uint64_t)(bits + 7) / 8 : 1;
}

static uint64_t extent1(size_t v)
{
	return v ? (uint64_t)v : 1;
}

static hipError_t array_done(hipError_t rc, hipArray *a, uint64_t bytes)
{
	if (rc != hipSuccess || !a) {
		uncharge(bytes);
		return rc;
	}
	return track(OBJ_ARRAY, (uintptr_t)a, bytes, 0,
	             (hipError_t(*)(void *))CNL_HIP_REAL(hipFreeArray), a);
}

hipError_t hipMallocArray(hipArray **array, const hipChannelFormatDesc *desc,
                          size_t width, size_t height, unsigned int flags)
{
	cnl_hip_real_hipMallocArray_t real = CNL_HIP_REAL(hipMallocArray);
	uint64_t bytes;
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	if (!accounting() || !array || !desc || !width)
		return real(array, desc, width, height, flags);
	bytes = pages(extent1(width) * extent1(height) * element_bytes(desc));
	if ((rc = charge(bytes)) != hipSuccess)
		return rc;
	rc = real(array, desc, width, height, flags);
	return array_done(rc, rc == hipSuccess ? *array : NULL, bytes);
}

hipError_t hipMalloc3DArray(hipArray **array,
                            const struct hipChannelFormatDesc *desc,
                            struct hipExtent extent, unsigned int flags)
{
	cnl_hip_real_hipMalloc3DArray_t real = CNL_HIP_REAL(hipMalloc3DArray);
	uint64_t bytes;
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	if (!accounting() || !array || !desc || !extent.width)
		return real(array, desc, extent, flags);
	bytes = pages(extent1(extent.width) * extent1(extent.height) *
	              extent1(extent.depth) * element_bytes(desc));
	if ((rc = charge(bytes)) != hipSuccess)
		return rc;
	rc = real(array, desc, extent, flags);
	return array_done(rc, rc == hipSuccess ? *array : NULL, bytes);
}

/* Bytes of one element of a driver-style array format. */
static uint64_t format_bytes(int f)
{
	return f == HIP_AD_FORMAT_UNSIGNED_INT8 ||
	               f == HIP_AD_FORMAT_SIGNED_INT8
	           ? 1
	       : f == HIP_AD_FORMAT_UNSIGNED_INT16 ||
	               f == HIP_AD_FORMAT_SIGNED_INT16 ||
	               f == HIP_AD_FORMAT_HALF
	           ? 2
	           : 4;
}

hipError_t hipArrayCreate(hipArray **array, const HIP_ARRAY_DESCRIPTOR *desc)
{
	cnl_hip_real_hipArrayCreate_t real = CNL_HIP_REAL(hipArrayCreate);
	uint64_t bytes;
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	if (!accounting() || !array || !desc || !desc->Width)
		return real(array, desc);
	bytes = pages(extent1(desc->Width) * extent1(desc->Height) *
	              format_bytes((int)desc->Format) * desc->NumChannels);
	if ((rc = charge(bytes)) != hipSuccess)
		return rc;
	rc = real(array, desc);
	return array_done(rc, rc == hipSuccess ? *array : NULL, bytes);
}

hipError_t hipArray3DCreate(hipArray **array,
                            const HIP_ARRAY3D_DESCRIPTOR *desc)
{
	cnl_hip_real_hipArray3DCreate_t real = CNL_HIP_REAL(hipArray3DCreate);
	uint64_t bytes;
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	if (!accounting() || !array || !desc || !desc->Width)
		return real(array, desc);
	bytes = pages(extent1(desc->Width) * extent1(desc->Height) *
	              extent1(desc->Depth) * format_bytes((int)desc->Format) *
	              desc->NumChannels);
	if ((rc = charge(bytes)) != hipSuccess)
		return rc;
	rc = real(array, desc);
	return array_done(rc, rc == hipSuccess ? *array : NULL, bytes);
}

/* hipFreeArray and hipArrayDestroy give an array back the same way. */
static hipError_t array_free(hipArray *array, hipError_t (*real)(hipArray *))
{
	uint64_t bytes, aux;
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	if (!array || !accounting() ||
	    objs_take(OBJ_ARRAY, (uintptr_t)array, &bytes, &aux) < 0)
		return real(array);
	rc = real(array);
	if (rc == hipSuccess)
		uncharge(bytes);
	else
		objs_put(OBJ_ARRAY, (uintptr_t)array, bytes, aux);
	return rc;
}

hipError_t hipArrayDestroy(hipArray *array)
{
	return array_free(array, CNL_HIP_REAL(hipArrayDestroy));
}

hipError_t hipFreeArray(hipArray *array)
{
	cnl_hip_real_hipFreeArray_t real = CNL_HIP_REAL(hipFreeArray);
	uint64_t bytes, aux;
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	if (!array || !accounting() ||
	    objs_take(OBJ_ARRAY, (uintptr_t)array, &bytes, &aux) < 0)
		return real(array);
	rc = real(array);
	if (rc == hipSuccess)
		uncharge(bytes);
	else
		objs_put(OBJ_ARRAY, (uintptr_t)array, bytes, aux);
	return rc;
}

/* Pools: stream-ordered allocation ---------------------------------------- */

#define POOLS 64

typedef hipError_t (*pool_attr_fn)(hipMemPool_t, hipMemPoolAttr, void *);
typedef hipError_t (*get_dev_fn)(int *);
typedef hipError_t (*dev_pool_fn)(hipMemPool_t *, int);

static struct {
	hipMemPool_t pool;
	uint64_t charged;
} pools[POOLS];
static int npools;
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;

static int64_t pool_reserved(hipMemPool_t pool)
{
	pool_attr_fn get =
	    (pool_attr_fn)cnl_hip_real_sym("hipMemPoolGetAttribute");
	uint64_t v = 0;

	if (!get ||
	    get(pool, hipMemPoolAttrReservedMemCurrent, &v) != hipSuccess)
		return -1;
	return (int64_t)v;
}

/* Bring the region's charge for pool in line with what the pool holds;
 * provisional is what the caller reserved for one allocation from it. */
static void pool_settle(hipMemPool_t pool, int64_t provisional)
{
	int64_t reserved = pool_reserved(pool), delta;
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
		/* Too many pools to follow: the provisional charge stays. */
		pthread_mutex_unlock(&pools_lock);
		return;
	}
	if (reserved < 0)
		reserved = (int64_t)pools[i].charged + provisional;
	delta = reserved - (int64_t)pools[i].charged;
	pools[i].charged = (uint64_t)reserved;
	pthread_mutex_unlock(&pools_lock);
	delta -= provisional;
	if (delta > 0)
		charge_force((uint64_t)delta);
	else if (delta < 0)
		uncharge((uint64_t)-delta);
}

static hipError_t undo_pool_free(void *pool)
{
	pool_settle((hipMemPool_t)pool, 0);
	return hipSuccess;
}

void cnl_hip_pools_sync(void)
{
	hipMemPool_t list[POOLS];
	int n;

	pthread_mutex_lock(&pools_lock);
	n = npools;
	for (int i = 0; i < n; i++)
		list[i] = pools[i].pool;
	pthread_mutex_unlock(&pools_lock);
	for (int i = 0; i < n; i++)
		pool_settle(list[i], 0);
}

static hipMemPool_t current_pool(void)
{
	get_dev_fn get_dev = (get_dev_fn)cnl_hip_real_sym("hipGetDevice");
	dev_pool_fn get_pool =
	    (dev_pool_fn)cnl_hip_real_sym("hipDeviceGetMemPool");
	hipMemPool_t pool = NULL;
	int dev;

	if (get_dev && get_pool && get_dev(&dev) == hipSuccess)
		get_pool(&pool, dev);
	return pool;
}

static hipError_t alloc_async(void **ptr, size_t size, hipMemPool_t pool,
                              hipStream_t s, int from_pool)
{
	cnl_hip_real_hipMallocAsync_t ra = NULL;
	cnl_hip_real_hipMallocFromPoolAsync_t rp = NULL;
	hipError_t rc;

	if (from_pool)
		rp = CNL_HIP_REAL(hipMallocFromPoolAsync);
	else
		ra = CNL_HIP_REAL(hipMallocAsync);
	if (!ra && !rp)
		return hipErrorNotInitialized;
#define CALL() (rp ? rp(ptr, size, pool, s) : ra(ptr, size, s))
	if (!accounting() || !ptr || !size)
		return CALL();
	if ((rc = charge(pages(size))) != hipSuccess)
		return rc;
	rc = CALL();
#undef CALL
	if (rc != hipSuccess || !*ptr) {
		uncharge(pages(size));
		return rc;
	}
	if (!from_pool)
		pool = current_pool();
	pool_settle(pool, (int64_t)pages(size));
	/* If the table cannot grow, the pool's charge still covers it. */
	objs_put(OBJ_ASYNC, (uintptr_t)*ptr, size, (uintptr_t)pool);
	return hipSuccess;
}

hipError_t hipMallocAsync(void **ptr, size_t size, hipStream_t stream)
{
	return alloc_async(ptr, size, NULL, stream, 0);
}

hipError_t hipMallocFromPoolAsync(void **ptr, size_t size, hipMemPool_t pool,
                                  hipStream_t stream)
{
	return alloc_async(ptr, size, pool, stream, 1);
}

hipError_t hipFreeAsync(void *ptr, hipStream_t stream)
{
	cnl_hip_real_hipFreeAsync_t real = CNL_HIP_REAL(hipFreeAsync);
	uint64_t bytes, aux;
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	if (!ptr || !accounting())
		return real(ptr, stream);
	if (objs_take(OBJ_ASYNC, (uintptr_t)ptr, &bytes, &aux) == 0) {
		rc = real(ptr, stream);
		if (rc == hipSuccess)
			pool_settle((hipMemPool_t)(uintptr_t)aux, 0);
		else
			objs_put(OBJ_ASYNC, (uintptr_t)ptr, bytes, aux);
		return rc;
	}
	/* hipFreeAsync may free a hipMalloc pointer too. */
	if (objs_take(OBJ_PTR, (uintptr_t)ptr, &bytes, &aux) == 0) {
		rc = real(ptr, stream);
		if (rc == hipSuccess)
			uncharge(bytes);
		else
			objs_put(OBJ_PTR, (uintptr_t)ptr, bytes, aux);
		return rc;
	}
	return real(ptr, stream);
}

hipError_t hipMemPoolTrimTo(hipMemPool_t pool, size_t keep)
{
	cnl_hip_real_hipMemPoolTrimTo_t real = CNL_HIP_REAL(hipMemPoolTrimTo);
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	rc = real(pool, keep);
	if (rc == hipSuccess && accounting())
		pool_settle(pool, 0);
	return rc;
}

/* Synchronisation: pools release memory, kernels finish (throttle.c). */
static void after_sync(void)
{
	if (cnl_hip.mode != CNL_HIP_ON)
		return;
	cnl_hip_throttle_harvest(1);
	if (npools)
		cnl_hip_pools_sync();
}

hipError_t hipDeviceSynchronize(void)
{
	cnl_hip_real_hipDeviceSynchronize_t real =
	    CNL_HIP_REAL(hipDeviceSynchronize);
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	rc = real();
	after_sync();
	return rc;
}

hipError_t hipStreamSynchronize(hipStream_t stream)
{
	cnl_hip_real_hipStreamSynchronize_t real =
	    CNL_HIP_REAL(hipStreamSynchronize);
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	rc = real(stream);
	after_sync();
	return rc;
}

/* Virtual memory management: the physical handle is what is charged. ---- */

hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *handle, size_t size,
                        const hipMemAllocationProp *prop,
                        unsigned long long flags)
{
	cnl_hip_real_hipMemCreate_t real = CNL_HIP_REAL(hipMemCreate);
	uint64_t bytes;
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	/* Host-located handles are not device memory. */
	if (!accounting() || !handle || !prop || !size ||
	    prop->location.type != hipMemLocationTypeDevice)
		return real(handle, size, prop, flags);
	bytes = pages(size);
	if ((rc = charge(bytes)) != hipSuccess)
		return rc;
	rc = real(handle, size, prop, flags);
	if (rc != hipSuccess) {
		uncharge(bytes);
		return rc;
	}
	return track(OBJ_VMM, (uintptr_t)*handle, bytes, 0,
	             (hipError_t(*)(void *))CNL_HIP_REAL(hipMemRelease),
	             *handle);
}

hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle)
{
	cnl_hip_real_hipMemRelease_t real = CNL_HIP_REAL(hipMemRelease);
	uint64_t bytes, aux;
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	if (!accounting() ||
	    objs_take(OBJ_VMM, (uintptr_t)handle, &bytes, &aux) < 0)
		return real(handle);
	rc = real(handle);
	if (rc == hipSuccess)
		uncharge(bytes);
	else
		objs_put(OBJ_VMM, (uintptr_t)handle, bytes, aux);
	return rc;
}

/* Memory information --------------------------------------------------------
 */

/* total = min(quota, real total); free = total - used, clamped at 0 and at
 * the real free; fail closed: nothing free. */
static void meminfo_apply(uint64_t *free, uint64_t *total)
{
	uint64_t quota, u, t, f;

	cnl_hip_init();
	if (cnl_hip.mode == CNL_HIP_BROKEN) {
		*free = 0;
		return;
	}
	if (cnl_hip.mode != CNL_HIP_ON ||
	    !(quota = atomic_load(&cnl_hip.r->quota)))
		return;
	u = cnl_region_used(cnl_hip.r, cnl_hip.slot);
	t = quota < *total ? quota : *total;
	f = t > u ? t - u : 0;
	if (f > *free)
		f = *free;
	*total = t;
	*free = f;
}

hipError_t hipMemGetInfo(size_t *free, size_t *total)
{
	cnl_hip_real_hipMemGetInfo_t real = CNL_HIP_REAL(hipMemGetInfo);
	uint64_t f, t;
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	rc = real(free, total);
	if (rc != hipSuccess || !free || !total)
		return rc;
	if (cnl_hip.mode == CNL_HIP_ON && npools)
		cnl_hip_pools_sync();
	f = *free;
	t = *total;
	meminfo_apply(&f, &t);
	*free = (size_t)f;
	*total = (size_t)t;
	return rc;
}

hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t dev)
{
	cnl_hip_real_hipDeviceTotalMem_t real = CNL_HIP_REAL(hipDeviceTotalMem);
	uint64_t quota;
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	rc = real(bytes, dev);
	if (rc != hipSuccess || !bytes)
		return rc;
	cnl_hip_init();
	if (cnl_hip.mode == CNL_HIP_ON &&
	    (quota = atomic_load(&cnl_hip.r->quota)) && quota < *bytes)
		*bytes = (size_t)quota;
	return rc;
}

/* IPC across slices --------------------------------------------------------
 */

/*
 * The CUDA shim's registry (docs/shim.md, "Isolation"), shared with it: an
 * exported handle is a file named after a hash of its 64 bytes, holding
 * the exporter's project, in the region's IPC directory or, where the
 * agent set none, "<region>.ipc" (this slice only).  HIP handles are
 * filed as "hipmem-" and "hipevent-", beside CUDA's "mem-" and "event-".
 */
static void ipc_register(const char *kind, const void *handle)
{
	cnl_guard_ipc_register(cnl_hip.r, cnl_hip_region_path(), kind, handle);
}

/* Whether a handle may be opened in this process (attaching first). */
static int ipc_allowed(const char *kind, const void *handle)
{
	if (!accounting())
		return 1;
	if (cnl_hip.mode == CNL_HIP_BROKEN)
		return 0;
	if (cnl_guard_ipc_owned(cnl_hip.r, cnl_hip_region_path(), kind, handle))
		return 1;
	cnl_hip_log_once(CNL_HIP_LOG_IPC_DENIED,
	                 "HIP IPC %s handle from outside project %s refused",
	                 kind, cnl_hip.r->project);
	return 0;
}

hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t *handle, void *ptr)
{
	cnl_hip_real_hipIpcGetMemHandle_t real =
	    CNL_HIP_REAL(hipIpcGetMemHandle);
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	rc = real(handle, ptr);
	if (rc == hipSuccess && accounting() && cnl_hip.mode == CNL_HIP_ON)
		ipc_register("hipmem", handle);
	return rc;
}

hipError_t hipIpcOpenMemHandle(void **ptr, hipIpcMemHandle_t handle,
                               unsigned int flags)
{
	cnl_hip_real_hipIpcOpenMemHandle_t real =
	    CNL_HIP_REAL(hipIpcOpenMemHandle);

	if (!real)
		return hipErrorNotInitialized;
	if (!ipc_allowed("hipmem", &handle))
		return hipErrorNotSupported;
	return real(ptr, handle, flags);
}

hipError_t hipIpcGetEventHandle(hipIpcEventHandle_t *handle, hipEvent_t event)
{
	cnl_hip_real_hipIpcGetEventHandle_t real =
	    CNL_HIP_REAL(hipIpcGetEventHandle);
	hipError_t rc;

	if (!real)
		return hipErrorNotInitialized;
	rc = real(handle, event);
	if (rc == hipSuccess && accounting() && cnl_hip.mode == CNL_HIP_ON)
		ipc_register("hipevent", handle);
	return rc;
}

hipError_t hipIpcOpenEventHandle(hipEvent_t *event, hipIpcEventHandle_t handle)
{
	cnl_hip_real_hipIpcOpenEventHandle_t real =
	    CNL_HIP_REAL(hipIpcOpenEventHandle);

	if (!real)
		return hipErrorNotInitialized;
	if (!ipc_allowed("hipevent", &handle))
		return hipErrorNotSupported;
	return real(event, handle);
}

/* Doors refused in a slice ------------------------------------------------
 *
 * Memory imported from a file descriptor, a pool's export or an external
 * API cannot be told to belong to this project (the CUDA shim keys such
 * handles by their open file; HIP 5.2's fake and real runtimes give no
 * way to register them at export), and mipmapped arrays are not charged:
 * inside a slice all are refused (hipErrorNotSupported, HIP 5.2 has no
 * "not permitted"), one line per process.  Outside one they pass.
 */
static int door_refused(const char *what)
{
	if (!accounting())
		return 0;
	cnl_hip_log_once(CNL_HIP_LOG_IPC_DENIED,
	                 "%s refused inside a slice: its memory cannot be "
	                 "charged or checked against the project",
	                 what);
	return 1;
}

hipError_t
hipMemImportFromShareableHandle(hipMemGenericAllocationHandle_t *handle,
                                void *osHandle, hipMemAllocationHandleType type)
{
	cnl_hip_real_hipMemImportFromShareableHandle_t real =
	    CNL_HIP_REAL(hipMemImportFromShareableHandle);

	if (door_refused("hipMemImportFromShareableHandle"))
		return hipErrorNotSupported;
	return real ? real(handle, osHandle, type) : hipErrorNotInitialized;
}

hipError_t hipMemPoolImportFromShareableHandle(hipMemPool_t *pool, void *shared,
                                               hipMemAllocationHandleType type,
                                               unsigned int flags)
{
	cnl_hip_real_hipMemPoolImportFromShareableHandle_t real =
	    CNL_HIP_REAL(hipMemPoolImportFromShareableHandle);

	if (door_refused("hipMemPoolImportFromShareableHandle"))
		return hipErrorNotSupported;
	return real ? real(pool, shared, type, flags) : hipErrorNotInitialized;
}

hipError_t hipMemPoolImportPointer(void **ptr, hipMemPool_t pool,
                                   hipMemPoolPtrExportData *data)
{
	cnl_hip_real_hipMemPoolImportPointer_t real =
	    CNL_HIP_REAL(hipMemPoolImportPointer);

	if (door_refused("hipMemPoolImportPointer"))
		return hipErrorNotSupported;
	return real ? real(ptr, pool, data) : hipErrorNotInitialized;
}

hipError_t hipImportExternalMemory(hipExternalMemory_t *mem,
                                   const hipExternalMemoryHandleDesc *desc)
{
	cnl_hip_real_hipImportExternalMemory_t real =
	    CNL_HIP_REAL(hipImportExternalMemory);

	if (door_refused("hipImportExternalMemory"))
		return hipErrorNotSupported;
	return real ? real(mem, desc) : hipErrorNotInitialized;
}

hipError_t hipMallocMipmappedArray(hipMipmappedArray_t *arr,
                                   const struct hipChannelFormatDesc *desc,
                                   struct hipExtent extent, unsigned int levels,
                                   unsigned int flags)
{
	cnl_hip_real_hipMallocMipmappedArray_t real =
	    CNL_HIP_REAL(hipMallocMipmappedArray);

	if (door_refused("hipMallocMipmappedArray"))
		return hipErrorNotSupported;
	return real ? real(arr, desc, extent, levels, flags)
	            : hipErrorNotInitialized;
}

hipError_t hipMipmappedArrayCreate(hipMipmappedArray_t *arr,
                                   HIP_ARRAY3D_DESCRIPTOR *desc,
                                   unsigned int levels)
{
	cnl_hip_real_hipMipmappedArrayCreate_t real =
	    CNL_HIP_REAL(hipMipmappedArrayCreate);

	if (door_refused("hipMipmappedArrayCreate"))
		return hipErrorNotSupported;
	return real ? real(arr, desc, levels) : hipErrorNotInitialized;
}
