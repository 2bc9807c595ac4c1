/*
 * fake_cuda.c - a fake libcuda.so.1 that models one GPU well enough to test
 * the shim without one: device memory with a capacity (CNL_FAKE_MEM bytes,
 * 16 GiB by default) counted per process, stream-ordered pools that keep
 * freed memory until trimmed or synchronised, VMM handles, arrays, kernels
 * that occupy the GPU for a virtual duration (fake_gpu.h), events, streams,
 * IPC handles and cuGetProcAddress with versions and per-thread variants.
 *
 * A kernel's duration comes from its name: cuModuleGetFunction(..., "busy_N")
 * gives a kernel that runs N microseconds; any other name runs 0.  Graphs
 * run 1000 microseconds.
 *
 * Built with -Bsymbolic-functions so that the fake's calls to itself, and
 * the addresses cnlfake_sym() hands out, never go through the shim.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shim/cuda-abi.h"
#include "fake_gpu.h"

#define API __attribute__((visibility("default")))

/* The entry points implement an ABI that cuda.h and nvml.h declare. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"

static struct fake_gpu *gpu;
static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;
static uint64_t capacity = FAKE_DEFAULT_MEM;
static unsigned tag;
static _Atomic uint64_t used; /* this process's device memory */
static _Atomic uint64_t next_ptr = 0x7f0000000000ULL;
static _Atomic uint64_t proc_last; /* end of this process's last work */
static struct fake_proc *me;
static _Atomic int initialised;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ULL),
	                      .tv_nsec = (long)(t % 1000000000ULL)};

	while (now_ns() < t && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME,
	                                       &ts, NULL) == EINTR)
		;
}

static void gpu_open(void)
{
	const char *path = getenv("CNL_FAKE_GPU");
	const char *mem = getenv("CNL_FAKE_MEM");
	const char *t = getenv("CNL_FAKE_TAG");
	int fd = -1;

	if (mem)
		capacity = strtoull(mem, NULL, 0);
	if (t)
		tag = (unsigned)strtoul(t, NULL, 10) % FAKE_TAGS;
	if (path && *path) {
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
		if (fd >= 0) {
			struct stat st;
			if (fstat(fd, &st) == 0 &&
			    (size_t)st.st_size < sizeof(*gpu))
				if (ftruncate(fd, sizeof(*gpu)) < 0)
					st.st_size = 0;
		}
	}
	gpu = mmap(NULL, sizeof(*gpu), PROT_READ | PROT_WRITE,
	           fd >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, fd, 0);
	if (fd >= 0)
		close(fd);
	if (gpu == MAP_FAILED) {
		gpu = calloc(1, sizeof(*gpu));
		if (!gpu)
			abort(); /* a test double may */
	}
	atomic_store(&gpu->magic, FAKE_GPU_MAGIC);
}

API struct fake_gpu *cnlfake_gpu(void)
{
	pthread_once(&gpu_once, gpu_open);
	return gpu;
}

API uint64_t cnlfake_used(void)
{
	return atomic_load(&used);
}

/* The inode of the caller's PID namespace, 0 if it cannot tell. */
static uint64_t own_pidns(void)
{
	struct stat st;

	return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/*
 * Register the process in the shared table (NVML lists it from there), by
 * its pid and PID namespace: processes of other namespaces (containers)
 * may have the same pid, and only a slot of this namespace can be told
 * dead from here.
 */
static void register_proc(void)
{
	pid_t pid = getpid();
	uint64_t ns = own_pidns();

	cnlfake_gpu();
	for (int i = 0; i < FAKE_PROCS; i++) {
		int32_t p = atomic_load(&gpu->procs[i].pid);
		uint64_t pns = atomic_load(&gpu->procs[i].pidns);
		bool here = pns == ns || !pns || !ns;

		/* A slot with this pid is an ended process's (this one
		 * registers once): the same pid again, or a namespace whose
		 * inode the kernel gave out again.  Its memory is gone. */
		if (p == pid && here) {
			me = &gpu->procs[i];
			atomic_store(&me->pidns, ns);
			atomic_store(&me->used, 0);
			return;
		}
		if (p && here && kill(p, 0) < 0 && errno == ESRCH &&
		    atomic_compare_exchange_strong(&gpu->procs[i].pid, &p, 0))
			p = 0;
		if (!p && atomic_compare_exchange_strong(&gpu->procs[i].pid, &p,
		                                         pid)) {
			me = &gpu->procs[i];
			atomic_store(&me->pidns, ns);
			atomic_store(&me->used, 0);
			return;
		}
	}
}

static CUresult need_init(void)
{
	return atomic_load(&initialised) ? CUDA_SUCCESS
	                                 : CUDA_ERROR_NOT_INITIALIZED;
}

/* Memory ------------------------------------------------------------------ */

static int take_mem(uint64_t n)
{
	uint64_t u = atomic_load(&used);

	do {
		if (n > capacity || u > capacity - n)
			return -1;
	} while (!atomic_compare_exchange_weak(&used, &u, u + n));
	if (me)
		atomic_fetch_add(&me->used, n);
	return 0;
}

static void give_mem(uint64_t n)
{
	atomic_fetch_sub(&used, n);
	if (me)
		atomic_fetch_sub(&me->used, n);
}

/* Process-local table of live allocations: address -> size. */
struct block {
	struct block *next;
	uint64_t key, size;
	int kind;
};
#define NB 4096
static struct block *blocks[NB];
static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;

static void put_block(int kind, uint64_t key, uint64_t size)
{
	struct block *b = malloc(sizeof(*b));

	if (!b)
		abort();
	b->key = key;
	b->size = size;
	b->kind = kind;
	pthread_mutex_lock(&blocks_lock);
	b->next = blocks[(key >> 8) % NB];
	blocks[(key >> 8) % NB] = b;
	pthread_mutex_unlock(&blocks_lock);
}

static int take_block(int kind, uint64_t key, uint64_t *ret_size)
{
	struct block **pp, *b = NULL;

	pthread_mutex_lock(&blocks_lock);
	for (pp = &blocks[(key >> 8) % NB]; *pp; pp = &(*pp)->next)
		if ((*pp)->key == key && (*pp)->kind == kind) {
			b = *pp;
			*pp = b->next;
			break;
		}
	pthread_mutex_unlock(&blocks_lock);
	if (!b)
		return -1;
	*ret_size = b->size;
	free(b);
	return 0;
}

static uint64_t new_addr(uint64_t size)
{
	return atomic_fetch_add(&next_ptr, (size + 0xfffff) & ~0xfffffULL) + 0;
}

enum { B_LINEAR = 1, B_POOL, B_VMM, B_ARRAY, B_MIPMAP };

API CUresult cuInit(unsigned int flags)
{
	if (!atomic_exchange(&initialised, 1))
		register_proc();
	return CUDA_SUCCESS;
}

API CUresult cuDriverGetVersion(int *v)
{
	*v = 13000;
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *n)
{
	*n = 1;
	return need_init();
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	if (ordinal != 0)
		return CUDA_ERROR_INVALID_VALUE;
	*d = 0;
	return need_init();
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	*bytes = (size_t)capacity;
	return need_init();
}

static int ctx_dummy;
static __thread CUcontext current;

API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	*pctx = (CUcontext)&ctx_dummy;
	return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	return CUDA_SUCCESS;
}

API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	*pctx = current = (CUcontext)&ctx_dummy;
	return CUDA_SUCCESS;
}

API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(CUcontext ctx)
{
	current = ctx;
	return CUDA_SUCCESS;
}

API CUresult cuCtxGetCurrent(CUcontext *ctx)
{
	*ctx = current;
	return CUDA_SUCCESS;
}

API CUresult cuCtxGetDevice(CUdevice *dev)
{
	*dev = 0;
	return CUDA_SUCCESS;
}

API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	*total = (size_t)capacity;
	*free = (size_t)(capacity - atomic_load(&used));
	return CUDA_SUCCESS;
}

/* Not the exported cuMemGetInfo_v2: what cuGetProcAddress hands out for
 * "cuMemGetInfo", as real drivers may hand out internal entry points. */
static CUresult internal_mem_get_info(size_t *free, size_t *total)
{
	return cuMemGetInfo_v2(free, total);
}

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	uint64_t a;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	if (take_mem(bytesize) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a = new_addr(bytesize);
	put_block(B_LINEAR, a, bytesize);
	*dptr = a;
	return CUDA_SUCCESS;
}

/* The CUDA 2.x entry point, for cuGetProcAddress version tests. */
API CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize)
{
	return CUDA_ERROR_NOT_SUPPORTED;
}

API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch,
                                size_t WidthInBytes, size_t Height,
                                unsigned int ElementSizeBytes)
{
	size_t pitch = (WidthInBytes + 255) & ~(size_t)255;
	CUresult rc = cuMemAlloc_v2(dptr, pitch * Height);

	if (rc == CUDA_SUCCESS)
		*pPitch = pitch;
	return rc;
}

API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize,
                               unsigned int flags)
{
	return cuMemAlloc_v2(dptr, bytesize);
}

API CUresult cuMemFree_v2(CUdeviceptr dptr);

/* Pools ------------------------------------------------------------------ */

struct pool {
	pthread_mutex_t lock;
	uint64_t reserved, cached;
};
static struct pool default_pool = {PTHREAD_MUTEX_INITIALIZER, 0, 0};
#define POOL_GRAIN (2ULL << 20)

API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	*pool = (CUmemoryPool)&default_pool;
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
	return cuDeviceGetMemPool(pool, dev);
}

API CUresult cuMemPoolCreate(CUmemoryPool *pool, const void *props)
{
	struct pool *p = calloc(1, sizeof(*p));

	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_init(&p->lock, NULL);
	*pool = (CUmemoryPool)p;
	return CUDA_SUCCESS;
}

static void pool_trim(struct pool *p, uint64_t keep)
{
	uint64_t r;

	pthread_mutex_lock(&p->lock);
	r = p->reserved > keep ? p->reserved - keep : 0;
	if (r > p->cached)
		r = p->cached;
	p->reserved -= r;
	p->cached -= r;
	pthread_mutex_unlock(&p->lock);
	give_mem(r);
}

API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	pool_trim((struct pool *)pool, 0);
	return CUDA_SUCCESS;
}

API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
	pool_trim((struct pool *)pool, keep);
	return CUDA_SUCCESS;
}

API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value)
{
	struct pool *p = (struct pool *)pool;

	if (attr != CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
		return CUDA_ERROR_NOT_SUPPORTED;
	pthread_mutex_lock(&p->lock);
	*(unsigned long long *)value = p->reserved;
	pthread_mutex_unlock(&p->lock);
	return CUDA_SUCCESS;
}

static CUresult pool_alloc(CUdeviceptr *dptr, size_t n, struct pool *p)
{
	uint64_t a;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&p->lock);
	if (p->cached < n) {
		uint64_t grow =
		    (n - p->cached + POOL_GRAIN - 1) & ~(POOL_GRAIN - 1);
		if (take_mem(grow) < 0) {
			pthread_mutex_unlock(&p->lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		p->reserved += grow;
		p->cached += grow;
	}
	p->cached -= n;
	pthread_mutex_unlock(&p->lock);
	a = new_addr(n);
	put_block(B_POOL, a, n);
	put_block(B_POOL + 100, a, (uint64_t)(uintptr_t)p); /* its pool */
	*dptr = a;
	return CUDA_SUCCESS;
}

API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s)
{
	return pool_alloc(dptr, n, &default_pool);
}

API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t n, CUstream s)
{
	return pool_alloc(dptr, n, &default_pool);
}

API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t n,
                                     CUmemoryPool pool, CUstream s)
{
	return pool_alloc(dptr, n, (struct pool *)pool);
}

API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t n,
                                          CUmemoryPool pool, CUstream s)
{
	return pool_alloc(dptr, n, (struct pool *)pool);
}

static int pool_free(CUdeviceptr dptr)
{
	uint64_t n, pp = 0;
	struct pool *p;

	if (take_block(B_POOL, dptr, &n) < 0)
		return -1;
	if (take_block(B_POOL + 100, dptr, &pp) < 0 || !pp)
		return -1;
	p = (struct pool *)(uintptr_t)pp;
	pthread_mutex_lock(&p->lock);
	p->cached += n;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	uint64_t n;

	if (take_block(B_LINEAR, dptr, &n) == 0) {
		give_mem(n);
		return CUDA_SUCCESS;
	}
	if (pool_free(dptr) == 0)
		return CUDA_SUCCESS;
	return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
	return cuMemFree_v2(dptr);
}

API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
	return cuMemFree_v2(dptr);
}

/* VMM and arrays ---------------------------------------------------------- */

static _Atomic uint64_t next_handle = 0x1000;

API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                         const CUmemAllocationProp *prop,
                         unsigned long long flags)
{
	uint64_t h = atomic_fetch_add(&next_handle, 16);
	int dev = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!prop || !size)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev && take_mem(size) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	put_block(B_VMM, h, dev ? size : 0);
	*handle = h;
	return CUDA_SUCCESS;
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	uint64_t n;

	if (take_block(B_VMM, handle, &n) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	give_mem(n);
	return CUDA_SUCCESS;
}

static uint64_t fmt_bytes(int f)
{
	return f == 0x01 || f == 0x08                ? 1
	       : f == 0x02 || f == 0x09 || f == 0x10 ? 2
	                                             : 4;
}

static CUresult array_new(int kind, uint64_t bytes, uint64_t *ret)
{
	uint64_t h = atomic_fetch_add(&next_handle, 16);

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (take_mem(bytes) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	put_block(kind, h, bytes);
	*ret = h;
	return CUDA_SUCCESS;
}

static uint64_t ext(size_t v)
{
	return v ? v : 1;
}

API CUresult cuArrayCreate_v2(CUarray *p, const CUDA_ARRAY_DESCRIPTOR *d)
{
	uint64_t h;
	CUresult rc = array_new(B_ARRAY,
	                        ext(d->Width) * ext(d->Height) *
	                            fmt_bytes(d->Format) * d->NumChannels,
	                        &h);

	if (rc == CUDA_SUCCESS)
		*p = (CUarray)(uintptr_t)h;
	return rc;
}

API CUresult cuArray3DCreate_v2(CUarray *p, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	uint64_t h;
	CUresult rc = array_new(B_ARRAY,
	                        ext(d->Width) * ext(d->Height) * ext(d->Depth) *
	                            fmt_bytes(d->Format) * d->NumChannels,
	                        &h);

	if (rc == CUDA_SUCCESS)
		*p = (CUarray)(uintptr_t)h;
	return rc;
}

API CUresult cuArrayDestroy(CUarray a)
{
	uint64_t n;

	if (take_block(B_ARRAY, (uintptr_t)a, &n) < 0)
		return CUDA_ERROR_INVALID_HANDLE;
	give_mem(n);
	return CUDA_SUCCESS;
}

API CUresult cuMipmappedArrayCreate(CUmipmappedArray *p,
                                    const CUDA_ARRAY3D_DESCRIPTOR *d,
                                    unsigned int levels)
{
	uint64_t bytes = 0, h;
	size_t w = d->Width, ht = d->Height, dp = d->Depth;
	CUresult rc;

	for (unsigned l = 0; l < (levels ? levels : 1); l++) {
		bytes += ext(w) * ext(ht) * ext(dp) * fmt_bytes(d->Format) *
		         d->NumChannels;
		w = w > 1 ? w / 2 : w;
		ht = ht > 1 ? ht / 2 : ht;
		dp = dp > 1 ? dp / 2 : dp;
	}
	rc = array_new(B_MIPMAP, bytes, &h);
	if (rc == CUDA_SUCCESS)
		*p = (CUmipmappedArray)(uintptr_t)h;
	return rc;
}

API CUresult cuMipmappedArrayDestroy(CUmipmappedArray a)
{
	uint64_t n;

	if (take_block(B_MIPMAP, (uintptr_t)a, &n) < 0)
		return CUDA_ERROR_INVALID_HANDLE;
	give_mem(n);
	return CUDA_SUCCESS;
}

/* Streams, kernels, events ------------------------------------------------- */

struct stream {
	_Atomic uint64_t last; /* end of the last work submitted to it */
};
static struct stream default_stream;

static struct stream *stream_of(CUstream s)
{
	if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
		return &default_stream;
	return (struct stream *)s;
}

static void raise_to(_Atomic uint64_t *v, uint64_t t)
{
	uint64_t c = atomic_load(v);

	while (t > c && !atomic_compare_exchange_weak(v, &c, t))
		;
}

/* Put d nanoseconds of work at the end of the GPU's queue. */
static void submit(CUstream s, uint64_t d)
{
	uint64_t now = now_ns(), f, start;

	cnlfake_gpu();
	f = atomic_load(&gpu->free_at);
	do {
		start = f > now ? f : now;
	} while (!atomic_compare_exchange_weak(&gpu->free_at, &f, start + d));
	atomic_fetch_add(&gpu->busy_ns[tag], d);
	atomic_fetch_add(&gpu->kernels, 1);
	raise_to(&stream_of(s)->last, start + d);
	raise_to(&proc_last, start + d);
}

API CUresult cuStreamCreate(CUstream *s, unsigned int flags)
{
	struct stream *st = calloc(1, sizeof(*st));

	if (!st)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*s = (CUstream)st;
	return CUDA_SUCCESS;
}

API CUresult cuStreamDestroy_v2(CUstream s)
{
	if (s && stream_of(s) != &default_stream)
		free(s);
	return CUDA_SUCCESS;
}

API CUresult cuStreamSynchronize(CUstream s)
{
	sleep_until(atomic_load(&stream_of(s)->last));
	pool_trim(&default_pool, 0);
	return CUDA_SUCCESS;
}

API CUresult cuStreamSynchronize_ptsz(CUstream s)
{
	return cuStreamSynchronize(s);
}

API CUresult cuCtxSynchronize(void)
{
	sleep_until(atomic_load(&proc_last));
	/* Pools give memory back on synchronisation (release threshold 0). */
	pool_trim(&default_pool, 0);
	return CUDA_SUCCESS;
}

API CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	static int mod;

	*m = (CUmodule)&mod;
	return need_init();
}

API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	uint64_t us = 0;

	if (strncmp(name, "busy_", 5) == 0)
		us = strtoull(name + 5, NULL, 10);
	*f = (CUfunction)(uintptr_t)((us << 4) | 8);
	return CUDA_SUCCESS;
}

static uint64_t duration(CUfunction f)
{
	return ((uintptr_t)f >> 4) * 1000;
}

API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                            unsigned bx, unsigned by, unsigned bz, unsigned shm,
                            CUstream s, void **params, void **extra)
{
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	submit(s, duration(f));
	return CUDA_SUCCESS;
}

API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                 unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned shm, CUstream s,
                                 void **params, void **extra)
{
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}

API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f,
                              void **params, void **extra)
{
	if (!c || !f)
		return CUDA_ERROR_INVALID_VALUE;
	submit(c->hStream, duration(f));
	return CUDA_SUCCESS;
}

API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f,
                                   void **params, void **extra)
{
	return cuLaunchKernelEx(c, f, params, extra);
}

API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy,
                                       unsigned gz, unsigned bx, unsigned by,
                                       unsigned bz, unsigned shm, CUstream s,
                                       void **params)
{
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, params, NULL);
}

API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx,
                                            unsigned gy, unsigned gz,
                                            unsigned bx, unsigned by,
                                            unsigned bz, unsigned shm,
                                            CUstream s, void **params)
{
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, params, NULL);
}

API CUresult cuGraphLaunch(CUgraphExec g, CUstream s)
{
	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	submit(s, 1000000);
	return CUDA_SUCCESS;
}

API CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s)
{
	return cuGraphLaunch(g, s);
}

struct event {
	_Atomic uint64_t ts; /* 0: never recorded */
};

API CUresult cuEventCreate(CUevent *e, unsigned int flags)
{
	struct event *ev = calloc(1, sizeof(*ev));

	if (!ev)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*e = (CUevent)ev;
	return CUDA_SUCCESS;
}

API CUresult cuEventDestroy_v2(CUevent e)
{
	free(e);
	return CUDA_SUCCESS;
}

/* An event completes when the GPU reaches it: after all work queued. */
API CUresult cuEventRecord(CUevent e, CUstream s)
{
	uint64_t now = now_ns(), f;

	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	f = atomic_load(&cnlfake_gpu()->free_at);
	atomic_store(&((struct event *)e)->ts, f > now ? f : now);
	return CUDA_SUCCESS;
}

API CUresult cuEventRecord_ptsz(CUevent e, CUstream s)
{
	return cuEventRecord(e, s);
}

API CUresult cuEventQuery(CUevent e)
{
	uint64_t t = atomic_load(&((struct event *)e)->ts);

	return t && now_ns() >= t ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

API CUresult cuEventSynchronize(CUevent e)
{
	sleep_until(atomic_load(&((struct event *)e)->ts));
	return CUDA_SUCCESS;
}

API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
	uint64_t ta = atomic_load(&((struct event *)a)->ts);
	uint64_t tb = atomic_load(&((struct event *)b)->ts);
	uint64_t now = now_ns();

	if (!ta || !tb)
		return CUDA_ERROR_INVALID_HANDLE;
	if (now < ta || now < tb)
		return CUDA_ERROR_NOT_READY;
	*ms = (float)((double)((int64_t)tb - (int64_t)ta) / 1e6);
	return CUDA_SUCCESS;
}

API CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b)
{
	return cuEventElapsedTime(ms, a, b);
}

/* IPC: a handle names the exporting process and the address. ------------- */

API CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr)
{
	memset(h, 0, sizeof(*h));
	snprintf(h->reserved, sizeof(h->reserved), "fake-mem %d %llx",
	         (int)getpid(), (unsigned long long)dptr);
	return CUDA_SUCCESS;
}

static CUresult ipc_open_mem(CUdeviceptr *pdptr, CUipcMemHandle h)
{
	unsigned long long a;
	int pid;

	if (sscanf(h.reserved, "fake-mem %d %llx", &pid, &a) != 2)
		return CUDA_ERROR_INVALID_VALUE;
	*pdptr = a;
	return CUDA_SUCCESS;
}

API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle h,
                                   unsigned int flags)
{
	return ipc_open_mem(pdptr, h);
}

/* The symbol without _v2, which the real driver still exports (programs
 * built before CUDA 11 call it). */
API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle h,
                                unsigned int flags)
{
	return ipc_open_mem(pdptr, h);
}

API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	return CUDA_SUCCESS;
}

API CUresult cuIpcGetEventHandle(CUipcEventHandle *h, CUevent e)
{
	memset(h, 0, sizeof(*h));
	snprintf(h->reserved, sizeof(h->reserved), "fake-event %d %p",
	         (int)getpid(), (void *)e);
	return CUDA_SUCCESS;
}

API CUresult cuIpcOpenEventHandle(CUevent *e, CUipcEventHandle h)
{
	if (strncmp(h.reserved, "fake-event ", 11) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	return cuEventCreate(e, 0);
}

/* cuGetProcAddress ----------------------------------------------------------
 */

static const struct {
	const char *base;
	int version;
	int ptds;
	void *fn;
} procs[] = {
#define P(base, ver, ptds, fn)               \
	{                                    \
#base, ver, ptds, (void *)fn \
	}
    P(cuInit, 2000, 0, cuInit),
    P(cuDriverGetVersion, 2020, 0, cuDriverGetVersion),
    P(cuMemAlloc, 2000, 0, cuMemAlloc),
    P(cuMemAlloc, 3020, 0, cuMemAlloc_v2),
    P(cuMemFree, 3020, 0, cuMemFree_v2),
    P(cuMemGetInfo, 3020, 0, internal_mem_get_info),
    P(cuLaunchKernel, 4000, 0, cuLaunchKernel),
    P(cuLaunchKernel, 7000, 1, cuLaunchKernel_ptsz),
    P(cuLaunchKernelEx, 11060, 0, cuLaunchKernelEx),
    P(cuLaunchKernelEx, 11060, 1, cuLaunchKernelEx_ptsz),
    P(cuMemAllocAsync, 11020, 0, cuMemAllocAsync),
    P(cuMemAllocAsync, 11020, 1, cuMemAllocAsync_ptsz),
    P(cuStreamSynchronize, 2000, 0, cuStreamSynchronize),
    P(cuStreamSynchronize, 7000, 1, cuStreamSynchronize_ptsz),
    P(cuEventRecord, 2000, 0, cuEventRecord),
    P(cuEventRecord, 7000, 1, cuEventRecord_ptsz),
    P(cuGraphLaunch, 10000, 0, cuGraphLaunch),
    P(cuGraphLaunch, 10000, 1, cuGraphLaunch_ptsz),
    P(cuIpcOpenMemHandle, 4010, 0, cuIpcOpenMemHandle),
    P(cuIpcOpenMemHandle, 11000, 0, cuIpcOpenMemHandle_v2),
#undef P
};

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                 cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status);

static CUresult lookup(const char *symbol, void **pfn, int version,
                       cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
	int want = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
	int best = -1, seen = 0;

	if (!symbol || !pfn)
		return CUDA_ERROR_INVALID_VALUE;
	if (strcmp(symbol, "cuGetProcAddress") == 0) {
		*pfn = version >= 12000 ? (void *)cuGetProcAddress_v2
		                        : cnlfake_sym("cuGetProcAddress");
		if (status)
			*status = CU_GET_PROC_ADDRESS_SUCCESS;
		return CUDA_SUCCESS;
	}
	for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
		if (strcmp(procs[i].base, symbol) != 0)
			continue;
		seen = 1;
		if (procs[i].version > version)
			continue;
		/* A per-thread variant wins when asked for; else legacy. */
		if (procs[i].ptds && !want)
			continue;
		if (best < 0 || procs[i].ptds > procs[best].ptds ||
		    (procs[i].ptds == procs[best].ptds &&
		     procs[i].version > procs[best].version))
			best = (int)i;
	}
	*pfn = NULL;
	if (best < 0) {
		if (status)
			*status =
			    seen ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
			         : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
		return CUDA_ERROR_NOT_FOUND;
	}
	*pfn = procs[best].fn;
	if (status)
		*status = CU_GET_PROC_ADDRESS_SUCCESS;
	return CUDA_SUCCESS;
}

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                 cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status)
{
	return lookup(symbol, pfn, version, flags, status);
}

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version,
                              cuuint64_t flags)
{
	return lookup(symbol, pfn, version, flags, NULL);
}

/* The fake's own entry points, for tests and the benchmark. */
API void *cnlfake_sym(const char *name)
{
	static const struct {
		const char *name;
		void *fn;
	} syms[] = {
#define S(fn) {#fn, (void *)fn}
	    S(cuMemAlloc_v2),  S(cuMemFree_v2),          S(cuMemGetInfo_v2),
	    S(cuLaunchKernel), S(cuGetProcAddress),      S(cuGetProcAddress_v2),
	    S(cuInit),         S(cuDriverGetVersion),    S(cuLaunchKernel_ptsz),
	    S(cuMemAlloc),     S(cuEventCreate),         S(cuEventRecord),
	    S(cuEventQuery),   S(cuEventElapsedTime_v2),
#undef S
	};

	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
		if (strcmp(syms[i].name, name) == 0)
			return syms[i].fn;
	return NULL;
}
