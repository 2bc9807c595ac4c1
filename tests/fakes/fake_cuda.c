/*
 * fake_cuda.c - a fake libcuda.so.1 that models one GPU well enough to test
 * the shim without one: device memory with a capacity (CNL_FAKE_MEM bytes,
 * 16 GiB by default) counted per process, stream-ordered pools that keep
 * freed memory until trimmed or synchronised, VMM handles, arrays, kernels
 * that occupy the GPU for a virtual duration (fake_gpu.h), events, streams,
 * IPC handles and cuGetProcAddress with versions and per-thread variants.
 *
 * A kernel's duration comes from its name: cuModuleGetFunction(..., "busy_N")
 * gives a kernel that runs N microseconds on the whole GPU; any other name
 * runs 0.  Graphs run 1000 microseconds.  In a MIG instance (CNL_FAKE_MIG,
 * fake_gpu.h) work runs on the instance's own timeline, slower by the
 * share of the GPU's compute slices the instance has.
 *
 * Memory is reserved as the real driver reserves it (docs/shim.md, "What
 * the driver reserves"): every linear allocation (cuMemAlloc_v2, pitch x
 * height of cuMemAllocPitch_v2, cuMemAllocManaged) and every array takes
 * whole pages of CNL_FAKE_PAGE bytes (2 MiB by default); pools grow by
 * CNL_FAKE_POOL_GRAIN (2 MiB); cuMemGetAllocationGranularity answers
 * CNL_FAKE_GRAN (the page by default) for MINIMUM and RECOMMENDED, and
 * cuMemCreate, cuMemAddressReserve and cuMemMap refuse sizes that are not
 * a multiple of it with CUDA_ERROR_INVALID_VALUE.  A test can make the
 * fake report a granularity other than the pages it takes, to check that
 * the shim never charges less than the driver holds.
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

/* cuda.h's code for "no CUDA-capable device is detected" (the shim's
 * cuda-abi.h declares only the codes the shim uses). */
#ifndef CUDA_ERROR_NO_DEVICE
#define CUDA_ERROR_NO_DEVICE 100
#endif

/* The entry points implement an ABI that cuda.h and nvml.h declare. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"

static struct fake_gpu *gpu;
static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;
static uint64_t capacity = FAKE_DEFAULT_MEM;
static uint64_t page = FAKE_PAGE;       /* linear allocations and arrays */
static uint64_t gran = FAKE_PAGE;       /* what the granularity query says */
static uint64_t pool_grain = FAKE_PAGE; /* how pools grow */
static unsigned tag;
static _Atomic uint64_t used; /* this process's device memory */
static _Atomic uint64_t next_ptr = 0x7f0000000000ULL;
static _Atomic uint64_t proc_last; /* end of this process's last work */
static struct fake_proc *me;
static _Atomic int initialised;
/* The device this process sees: the whole GPU (mig_compute 0) or the MIG
 * instance of mig_compute slices at mig_start; mig_bad: CNL_FAKE_MIG
 * names no possible instance. */
static unsigned mig_compute, mig_start;
static int mig_bad;
static _Atomic uint64_t *timeline; /* when the device finishes its work */

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
	const char *pg = getenv("CNL_FAKE_PAGE");
	const char *gr = getenv("CNL_FAKE_GRAN");
	const char *pl = getenv("CNL_FAKE_POOL_GRAIN");
	const char *mig = getenv("CNL_FAKE_MIG");
	int fd = -1;

	if (mem)
		capacity = strtoull(mem, NULL, 0);
	if (pg && strtoull(pg, NULL, 0))
		page = strtoull(pg, NULL, 0);
	gran = page;
	if (gr && strtoull(gr, NULL, 0))
		gran = strtoull(gr, NULL, 0);
	if (pl && strtoull(pl, NULL, 0))
		pool_grain = strtoull(pl, NULL, 0);
	if (t)
		tag = (unsigned)strtoul(t, NULL, 10) % FAKE_TAGS;
	if (mig && *mig) {
		char g, at, extra;

		if (sscanf(mig, "%u%c%c%u%c", &mig_compute, &g, &at, &mig_start,
		           &extra) != 4 ||
		    g != 'g' || at != '@' || mig_compute < 1 ||
		    mig_compute > FAKE_MIG_SLICES ||
		    mig_start > FAKE_MIG_SLICES - mig_compute)
			mig_bad = 1;
	}
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
	timeline = mig_compute && !mig_bad ? &gpu->mig_free_at[mig_start]
	                                   : &gpu->free_at;
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

/* Field 22 of /proc/@pid/stat ("self" for 0): when it started, or 0. */
static uint64_t proc_start(unsigned pid)
{
	char path[64], buf[1024], *p;
	unsigned long long v = 0;
	ssize_t n;
	int fd;

	if (pid)
		snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	else
		snprintf(path, sizeof(path), "/proc/self/stat");
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* After the command's closing parenthesis: field 3 onwards. */
	if (!(p = strrchr(buf, ')')))
		return 0;
	p++;
	for (int field = 3; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (p)
		v = strtoull(p + 1, NULL, 10);
	return v;
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
			atomic_store(&me->start, proc_start(0));
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
			atomic_store(&me->start, proc_start(0));
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

static uint64_t round_up(uint64_t n, uint64_t unit)
{
	return (n + unit - 1) / unit * unit;
}

static uint64_t new_addr(uint64_t size)
{
	return atomic_fetch_add(&next_ptr, (size + 0xfffff) & ~0xfffffULL) + 0;
}

enum { B_LINEAR = 1, B_POOL, B_VMM, B_ARRAY, B_MIPMAP };

API CUresult cuInit(unsigned int flags)
{
	cnlfake_gpu();
	if (mig_bad)
		return CUDA_ERROR_NO_DEVICE;
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

/* A linear allocation takes whole pages, as the real driver's do. */
static CUresult linear_alloc(CUdeviceptr *dptr, uint64_t bytesize)
{
	uint64_t a, n;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	cnlfake_gpu(); /* the page size is read with the GPU's settings */
	n = round_up(bytesize, page);
	if (n < bytesize || take_mem(n) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a = new_addr(n);
	put_block(B_LINEAR, a, n);
	*dptr = a;
	return CUDA_SUCCESS;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	return linear_alloc(dptr, bytesize);
}

/* The CUDA 2.x entry point, which the driver still exports: it obtains
 * device memory like _v2 (below 4 GiB of address space, a 32-bit handle).
 * Defined with the other 32-bit entry points further down. */
API CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize);

API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch,
                                size_t WidthInBytes, size_t Height,
                                unsigned int ElementSizeBytes)
{
	size_t pitch = (WidthInBytes + 255) & ~(size_t)255;
	CUresult rc;

	if (!pPitch || !WidthInBytes || !Height ||
	    (ElementSizeBytes != 4 && ElementSizeBytes != 8 &&
	     ElementSizeBytes != 16))
		return CUDA_ERROR_INVALID_VALUE;
	rc = linear_alloc(dptr, (uint64_t)pitch * Height);
	if (rc == CUDA_SUCCESS)
		*pPitch = pitch;
	return rc;
}

API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize,
                               unsigned int flags)
{
	return linear_alloc(dptr, bytesize);
}

API CUresult cuMemFree_v2(CUdeviceptr dptr);

/* Pools ------------------------------------------------------------------ */

struct pool {
	pthread_mutex_t lock;
	uint64_t reserved, cached;
};
static struct pool default_pool = {PTHREAD_MUTEX_INITIALIZER, 0, 0};

API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	*pool = (CUmemoryPool)&default_pool;
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
	return cuDeviceGetMemPool(pool, dev);
}

static void note_pool(const void *pool, int types, int imported);

API CUresult cuMemPoolCreate(CUmemoryPool *pool, const void *props)
{
	struct pool *p = calloc(1, sizeof(*p));

	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_init(&p->lock, NULL);
	/* CUmemPoolProps: allocType, then handleTypes. */
	note_pool(p, props ? ((const int *)props)[1] : 0, 0);
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
	r -= r % pool_grain; /* a pool gives back whole chunks */
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
	if (n > capacity)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&p->lock);
	if (p->cached < n) {
		uint64_t grow = round_up(n - p->cached, pool_grain);
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

/* A capturing stream adds a graph allocation node instead (below). */
static int capture_alloc(CUstream s, size_t n, CUdeviceptr *dptr,
                         CUresult *ret);

API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s)
{
	CUresult rc;

	if (capture_alloc(s, n, dptr, &rc))
		return rc;
	return pool_alloc(dptr, n, &default_pool);
}

API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t n, CUstream s)
{
	CUresult rc;

	if (capture_alloc(s, n, dptr, &rc))
		return rc;
	return pool_alloc(dptr, n, &default_pool);
}

API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t n,
                                     CUmemoryPool pool, CUstream s)
{
	CUresult rc;

	if (capture_alloc(s, n, dptr, &rc))
		return rc;
	return pool_alloc(dptr, n, (struct pool *)pool);
}

API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t n,
                                          CUmemoryPool pool, CUstream s)
{
	CUresult rc;

	if (capture_alloc(s, n, dptr, &rc))
		return rc;
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
static void note_handle_types(uint64_t h, int types);

/*
 * The granularity of VMM, as cuMemGetAllocationGranularity gives it: the
 * same for MINIMUM and RECOMMENDED (2 MiB on current GPUs).  Only pinned
 * memory on device 0, the host or host NUMA node 0 is known.
 */
static int prop_ok(const CUmemAllocationProp *prop)
{
	if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
		return 0;
	switch (prop->location.type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
	case 0x3: /* HOST_NUMA */
		return prop->location.id == 0;
	case 0x2: /* HOST */
		return 1;
	default:
		return 0;
	}
}

API CUresult cuMemGetAllocationGranularity(size_t *granularity,
                                           const CUmemAllocationProp *prop,
                                           int option)
{
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!granularity || !prop_ok(prop) || (option != 0 && option != 1))
		return CUDA_ERROR_INVALID_VALUE;
	*granularity = (size_t)gran;
	return CUDA_SUCCESS;
}

API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                         const CUmemAllocationProp *prop,
                         unsigned long long flags)
{
	uint64_t h;
	int dev = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	/* The real driver refuses a size that is not a multiple of the
	 * granularity, and takes no more than the size. */
	if (!handle || !prop_ok(prop) || !size || size % gran || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev && take_mem(size) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	h = atomic_fetch_add(&next_handle, 16);
	put_block(B_VMM, h, dev ? size : 0);
	note_handle_types(h, prop->requestedHandleTypes);
	put_block(B_VMM + 100, h, size); /* its size, device or not */
	*handle = h;
	return CUDA_SUCCESS;
}

static int handle_mapped(uint64_t handle);

/* As in the real driver, memory released while still mapped stays taken
 * until its last mapping is unmapped. */
API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	uint64_t n, size;

	if (take_block(B_VMM, handle, &n) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	take_block(B_VMM + 100, handle, &size);
	if (handle_mapped(handle))
		put_block(B_VMM + 200, handle, n); /* freed at the last unmap */
	else
		give_mem(n);
	return CUDA_SUCCESS;
}

/*
 * Virtual address ranges and mappings.  A reservation is remembered by its
 * start and size (cuMemAddressFree must give both back); a mapping by its
 * start, with its size and handle.  Sizes, offsets and addresses must be
 * multiples of the granularity, mappings must lie inside a reservation,
 * not overlap, and map a live handle no further than its size.
 */
#define MAPS 4096
static struct {
	uint64_t va, size, handle;
} maps[MAPS];
static struct {
	uint64_t va, size;
} ranges[MAPS];
static pthread_mutex_t va_lock = PTHREAD_MUTEX_INITIALIZER;

API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size,
                                 size_t alignment, CUdeviceptr addr,
                                 unsigned long long flags)
{
	uint64_t a;
	int i;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ptr || !size || size % gran || (alignment & (alignment - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	a = round_up(atomic_fetch_add(&next_ptr, size + gran + alignment),
	             alignment > gran ? alignment : gran);
	pthread_mutex_lock(&va_lock);
	for (i = 0; i < MAPS && ranges[i].size; i++)
		;
	if (i < MAPS) {
		ranges[i].va = a;
		ranges[i].size = size;
	}
	pthread_mutex_unlock(&va_lock);
	if (i == MAPS)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*ptr = a;
	return CUDA_SUCCESS;
}

API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	CUresult rc = CUDA_ERROR_INVALID_VALUE;

	pthread_mutex_lock(&va_lock);
	for (int i = 0; i < MAPS; i++)
		if (ranges[i].size && ranges[i].va == ptr &&
		    ranges[i].size == size) {
			ranges[i].size = 0;
			rc = CUDA_SUCCESS;
			break;
		}
	pthread_mutex_unlock(&va_lock);
	return rc;
}

static int handle_mapped(uint64_t handle)
{
	int found = 0;

	pthread_mutex_lock(&va_lock);
	for (int i = 0; i < MAPS && !found; i++)
		found = maps[i].size && maps[i].handle == handle;
	pthread_mutex_unlock(&va_lock);
	return found;
}

/* Whether [va, va + size) lies inside one reservation (va_lock held). */
static int reserved_range(uint64_t va, uint64_t size)
{
	for (int i = 0; i < MAPS; i++)
		if (ranges[i].size && va >= ranges[i].va &&
		    va + size <= ranges[i].va + ranges[i].size)
			return 1;
	return 0;
}

API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                      CUmemGenericAllocationHandle handle,
                      unsigned long long flags)
{
	uint64_t hsize, free_slot = MAPS;
	CUresult rc = CUDA_SUCCESS;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	/* cuda.h: offset "currently must be zero". */
	if (!size || size % gran || ptr % gran || offset || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (take_block(B_VMM + 100, handle, &hsize) < 0)
		return CUDA_ERROR_INVALID_HANDLE;
	put_block(B_VMM + 100, handle, hsize);
	if (offset + size > hsize)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&va_lock);
	if (!reserved_range(ptr, size))
		rc = CUDA_ERROR_INVALID_VALUE;
	for (uint64_t i = 0; i < MAPS && rc == CUDA_SUCCESS; i++) {
		if (!maps[i].size) {
			if (free_slot == MAPS)
				free_slot = i;
		} else if (ptr < maps[i].va + maps[i].size &&
		           maps[i].va < ptr + size) {
			rc = CUDA_ERROR_INVALID_VALUE; /* already mapped */
		}
	}
	if (rc == CUDA_SUCCESS && free_slot == MAPS)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc == CUDA_SUCCESS) {
		maps[free_slot].va = ptr;
		maps[free_slot].size = size;
		maps[free_slot].handle = handle;
	}
	pthread_mutex_unlock(&va_lock);
	return rc;
}

/* Unmaps every mapping inside [ptr, ptr + size); the range must start and
 * end on mapping boundaries, as the real driver requires. */
API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	uint64_t covered = 0, gone[64], n;
	int ngone = 0;

	if (!size || size % gran || ptr % gran)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&va_lock);
	for (int i = 0; i < MAPS; i++)
		if (maps[i].size && maps[i].va >= ptr &&
		    maps[i].va + maps[i].size <= ptr + size)
			covered += maps[i].size;
	if (covered == size)
		for (int i = 0; i < MAPS; i++)
			if (maps[i].size && maps[i].va >= ptr &&
			    maps[i].va + maps[i].size <= ptr + size) {
				maps[i].size = 0;
				if (ngone < 64)
					gone[ngone++] = maps[i].handle;
			}
	pthread_mutex_unlock(&va_lock);
	/* Handles released while mapped: their memory goes back now. */
	for (int i = 0; i < ngone; i++)
		if (!handle_mapped(gone[i]) &&
		    take_block(B_VMM + 200, gone[i], &n) == 0)
			give_mem(n);
	return covered == size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Access can be set only on a range that is mapped throughout. */
API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const void *desc,
                            size_t count)
{
	uint64_t covered = 0;

	if (!size || !desc || !count || size % gran || ptr % gran)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&va_lock);
	for (int i = 0; i < MAPS; i++)
		if (maps[i].size && maps[i].va >= ptr &&
		    maps[i].va + maps[i].size <= ptr + size)
			covered += maps[i].size;
	pthread_mutex_unlock(&va_lock);
	return covered == size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
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
	/* Arrays take whole pages too (the real driver adds its own
	 * alignment padding on top, which the fake does not model). */
	if (round_up(bytes, page) < bytes)
		return CUDA_ERROR_OUT_OF_MEMORY;
	bytes = round_up(bytes, page);
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

/* Put d nanoseconds of work (its duration on the whole GPU) at the end of
 * the queue of the device this process sees; in a MIG instance it takes
 * 7 / compute times as long there. */
static void submit(CUstream s, uint64_t d)
{
	uint64_t now = now_ns(), f, start;

	cnlfake_gpu();
	if (mig_compute)
		d = d * FAKE_MIG_SLICES / mig_compute;
	f = atomic_load(timeline);
	do {
		start = f > now ? f : now;
	} while (!atomic_compare_exchange_weak(timeline, &f, start + d));
	atomic_fetch_add(&gpu->busy_ns[tag], d);
	if (mig_compute)
		atomic_fetch_add(&gpu->mig_busy_ns[mig_start], d);
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

/* An event completes when the device reaches it: after all work queued
 * on the GPU, or on the process's MIG instance. */
API CUresult cuEventRecord(CUevent e, CUstream s)
{
	uint64_t now = now_ns(), f;

	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	cnlfake_gpu();
	f = atomic_load(timeline);
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

/* Every other export the shim hooks ---------------------------------------
 *
 * Modelled as the real driver behaves where it matters to the shim: each
 * of these obtains device memory or opens memory of another process, so a
 * test that calls it with no shim in between sees the escape.
 */

#define CUDA_ERROR_ILLEGAL_STATE 401

/* The launches of CUDA < 4.0 and the multi-device cooperative launch. */
API CUresult cuLaunch(CUfunction f)
{
	return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
}

API CUresult cuLaunchGrid(CUfunction f, int w, int h)
{
	if (w <= 0 || h <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	return cuLaunchKernel(f, (unsigned)w, (unsigned)h, 1, 1, 1, 1, 0, NULL,
	                      NULL, NULL);
}

API CUresult cuLaunchGridAsync(CUfunction f, int w, int h, CUstream s)
{
	if (w <= 0 || h <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	return cuLaunchKernel(f, (unsigned)w, (unsigned)h, 1, 1, 1, 1, 0, s,
	                      NULL, NULL);
}

/* CUDA_LAUNCH_PARAMS: function, grid, block, shared memory, stream, args. */
struct CUDA_LAUNCH_PARAMS_st {
	CUfunction function;
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	CUstream hStream;
	void **kernelParams;
};

API CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *l,
                                                  unsigned int n,
                                                  unsigned int flags)
{
	CUresult rc = CUDA_SUCCESS;

	if (!l || !n)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < n && rc == CUDA_SUCCESS; i++)
		rc = cuLaunchKernel(
		    l[i].function, l[i].gridDimX, l[i].gridDimY, l[i].gridDimZ,
		    l[i].blockDimX, l[i].blockDimY, l[i].blockDimZ,
		    l[i].sharedMemBytes, l[i].hStream, l[i].kernelParams, NULL);
	return rc;
}

/* Contexts: the CUDA 2.x entry point, _v3 (affinity), _v4 (parameter
 * block) and green contexts all make a context like _v2. */
API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return cuCtxCreate_v2(pctx, flags, dev);
}

API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n,
                            unsigned int flags, CUdevice dev)
{
	if (n < 0 || (n && !params))
		return CUDA_ERROR_INVALID_VALUE;
	return cuCtxCreate_v2(pctx, flags, dev);
}

API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params,
                            unsigned int flags, CUdevice dev)
{
	return cuCtxCreate_v2(pctx, flags, dev);
}

API CUresult cuGreenCtxCreate(CUgreenCtx *pctx, CUdevResourceDesc desc,
                              CUdevice dev, unsigned int flags)
{
	CUcontext c;
	CUresult rc;

	if (!pctx || !desc)
		return CUDA_ERROR_INVALID_VALUE;
	rc = cuCtxCreate_v2(&c, 0, dev);
	if (rc == CUDA_SUCCESS)
		*pctx = (CUgreenCtx)c;
	return rc;
}

/* A device like an H100's SM count; and the context limits that reserve
 * device memory when set (the stack for every resident thread). */
#define FAKE_SMS        132
#define FAKE_SM_THREADS 2048

API CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice dev)
{
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!v || dev != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (attr == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
		*v = FAKE_SMS;
	else if (attr == CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)
		*v = FAKE_SM_THREADS;
	else
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static size_t limits[3] = {1024, 1 << 20, 8 << 20};
static pthread_mutex_t limits_lock = PTHREAD_MUTEX_INITIALIZER;

API CUresult cuCtxGetLimit(size_t *v, CUlimit limit)
{
	if (!v || limit < 0 || limit > 2)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&limits_lock);
	*v = limits[limit];
	pthread_mutex_unlock(&limits_lock);
	return CUDA_SUCCESS;
}

API CUresult cuCtxSetLimit(CUlimit limit, size_t v)
{
	uint64_t mult = limit == CU_LIMIT_STACK_SIZE
	                    ? (uint64_t)FAKE_SMS * FAKE_SM_THREADS
	                    : 1;
	CUresult rc = CUDA_SUCCESS;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (limit < 0 || limit > 2)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t grow;

	pthread_mutex_lock(&limits_lock);
	/* The driver sizes the reservation in full: a product that does
	 * not fit in 64 bits is more memory than any device has. */
	if (v > limits[limit] &&
	    (__builtin_mul_overflow((uint64_t)(v - limits[limit]), mult,
	                            &grow) ||
	     take_mem(grow) < 0))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	else if (v < limits[limit])
		give_mem((limits[limit] - v) * mult);
	if (rc == CUDA_SUCCESS)
		limits[limit] = v;
	pthread_mutex_unlock(&limits_lock);
	return rc;
}

/* 32-bit entry points (CUDA < 3.2), still exported by the driver. */
static _Atomic uint32_t next_ptr32 = 0x10000000u;

API CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
	uint64_t n;
	uint32_t a;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	cnlfake_gpu(); /* the page size is read with the GPU's settings */
	n = round_up(bytesize, page);
	if (take_mem(n) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a = atomic_fetch_add(&next_ptr32, (uint32_t)round_up(n, 0x100000));
	put_block(B_LINEAR, a, n);
	*dptr = a;
	return CUDA_SUCCESS;
}

API CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
	return cuMemFree_v2(dptr);
}

API CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                             unsigned int w, unsigned int h, unsigned int e)
{
	unsigned int pitch = (w + 255u) & ~255u;
	CUresult rc;

	if (!pPitch || (uint64_t)pitch * h > 0xffffffffu)
		return CUDA_ERROR_INVALID_VALUE;
	rc = cuMemAlloc(dptr, pitch * h);
	if (rc == CUDA_SUCCESS)
		*pPitch = pitch;
	return rc;
}

/* The v1 descriptors: 32-bit extents. */
struct CUDA_ARRAY_DESCRIPTOR_v1_st {
	unsigned int Width, Height;
	CUarray_format Format;
	unsigned int NumChannels;
};
struct CUDA_ARRAY3D_DESCRIPTOR_v1_st {
	unsigned int Width, Height, Depth;
	CUarray_format Format;
	unsigned int NumChannels, Flags;
};

API CUresult cuArrayCreate(CUarray *p, const CUDA_ARRAY_DESCRIPTOR_v1 *d)
{
	CUDA_ARRAY_DESCRIPTOR d2;

	if (!p || !d)
		return CUDA_ERROR_INVALID_VALUE;
	d2 = (CUDA_ARRAY_DESCRIPTOR){d->Width, d->Height, d->Format,
	                             d->NumChannels};
	return cuArrayCreate_v2(p, &d2);
}

API CUresult cuArray3DCreate(CUarray *p, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d)
{
	CUDA_ARRAY3D_DESCRIPTOR d2;

	if (!p || !d)
		return CUDA_ERROR_INVALID_VALUE;
	d2 = (CUDA_ARRAY3D_DESCRIPTOR){d->Width,  d->Height,      d->Depth,
	                               d->Format, d->NumChannels, d->Flags};
	return cuArray3DCreate_v2(p, &d2);
}

/* Values above 4 GiB are clamped, as a 32-bit count must be. */
static unsigned int clamp32(uint64_t v)
{
	return v > 0xffffffffu ? 0xffffffffu : (unsigned int)v;
}

API CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
	size_t f, t;
	CUresult rc = cuMemGetInfo_v2(&f, &t);

	if (rc == CUDA_SUCCESS) {
		*free = clamp32(f);
		*total = clamp32(t);
	}
	return rc;
}

API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	size_t b;
	CUresult rc = cuDeviceTotalMem_v2(&b, dev);

	if (rc == CUDA_SUCCESS)
		*bytes = clamp32(b);
	return rc;
}

/*
 * Graphs.  An allocation node reserves an address at once; the memory
 * behind it is taken from the GPU when the graph is instantiated and given
 * back when the executable graph is destroyed (the real driver keeps it
 * in the device's graph pool until cuDeviceGraphMemTrim: stricter than
 * this for a quota, never looser).  A stream being captured turns
 * cuMemAllocAsync into such a node.
 */
struct graph {
	_Atomic uint64_t alloc_bytes;
};
struct graph_exec {
	uint64_t bytes;
};

API CUresult cuGraphCreate(CUgraph *g, unsigned int flags)
{
	struct graph *gr;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!g || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(gr = calloc(1, sizeof(*gr))))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*g = (CUgraph)gr;
	return CUDA_SUCCESS;
}

API CUresult cuGraphDestroy(CUgraph g)
{
	if (!g)
		return CUDA_ERROR_INVALID_VALUE;
	free(g);
	return CUDA_SUCCESS;
}

static CUresult add_alloc_node(CUgraphNode *node, CUgraph g,
                               CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	struct graph *gr = (struct graph *)g;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!node || !gr || !p || !p->bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	atomic_fetch_add(&gr->alloc_bytes, p->bytesize);
	p->dptr = new_addr(p->bytesize);
	*node = (CUgraphNode)(uintptr_t)p->dptr;
	return CUDA_SUCCESS;
}

API CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g,
                                    const CUgraphNode *deps, size_t ndeps,
                                    CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	if (ndeps && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	return add_alloc_node(node, g, p);
}

/* Only allocation nodes are modelled; other types are "not supported". */
static CUresult add_node(CUgraphNode *node, CUgraph g, CUgraphNodeParams *p)
{
	if (!p || p->reserved0[0] || p->reserved0[1] || p->reserved0[2])
		return CUDA_ERROR_INVALID_VALUE;
	if (p->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
		return CUDA_ERROR_NOT_SUPPORTED;
	return add_alloc_node(node, g, &p->u.alloc);
}

API CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g,
                            const CUgraphNode *deps, size_t ndeps,
                            CUgraphNodeParams *p)
{
	if (ndeps && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	return add_node(node, g, p);
}

API CUresult cuGraphAddNode_v2(CUgraphNode *node, CUgraph g,
                               const CUgraphNode *deps,
                               const CUgraphEdgeData *edges, size_t ndeps,
                               CUgraphNodeParams *p)
{
	if (ndeps && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	return add_node(node, g, p);
}

API CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g,
                                         unsigned long long flags)
{
	struct graph *gr = (struct graph *)g;
	struct graph_exec *ex;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!e || !gr)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(ex = calloc(1, sizeof(*ex))))
		return CUDA_ERROR_OUT_OF_MEMORY;
	ex->bytes = atomic_load(&gr->alloc_bytes);
	if (ex->bytes && take_mem(ex->bytes) < 0) {
		free(ex);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*e = (CUgraphExec)ex;
	return CUDA_SUCCESS;
}

API CUresult cuGraphExecDestroy(CUgraphExec e)
{
	struct graph_exec *ex = (struct graph_exec *)e;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	give_mem(ex->bytes);
	free(ex);
	return CUDA_SUCCESS;
}

/* Stream capture: which streams capture into which graph. */
#define CAPTURES 16
static struct {
	CUstream s;
	struct graph *g;
} captures[CAPTURES];
static pthread_mutex_t captures_lock = PTHREAD_MUTEX_INITIALIZER;

/* The per-thread default stream is its own stream for capture. */
static CUstream capture_key(CUstream s, int ptds)
{
	if (!s)
		return ptds ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
	return s;
}

static struct graph *capturing(CUstream s)
{
	struct graph *g = NULL;

	pthread_mutex_lock(&captures_lock);
	for (int i = 0; i < CAPTURES; i++)
		if (captures[i].g && captures[i].s == s)
			g = captures[i].g;
	pthread_mutex_unlock(&captures_lock);
	return g;
}

static CUresult begin_capture(CUstream s)
{
	struct graph *g;
	CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (capturing(s))
		return CUDA_ERROR_INVALID_VALUE;
	if (cuGraphCreate((CUgraph *)&g, 0) != CUDA_SUCCESS)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&captures_lock);
	for (int i = 0; i < CAPTURES && rc != CUDA_SUCCESS; i++)
		if (!captures[i].g) {
			captures[i].s = s;
			captures[i].g = g;
			rc = CUDA_SUCCESS;
		}
	pthread_mutex_unlock(&captures_lock);
	if (rc != CUDA_SUCCESS)
		free(g);
	return rc;
}

static CUresult end_capture(CUstream s, CUgraph *ret)
{
	struct graph *g = NULL;

	if (!ret)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&captures_lock);
	for (int i = 0; i < CAPTURES; i++)
		if (captures[i].g && captures[i].s == s) {
			g = captures[i].g;
			captures[i].g = NULL;
		}
	pthread_mutex_unlock(&captures_lock);
	if (!g)
		return CUDA_ERROR_ILLEGAL_STATE;
	*ret = (CUgraph)g;
	return CUDA_SUCCESS;
}

API CUresult cuStreamBeginCapture_v2(CUstream s, int mode)
{
	return begin_capture(capture_key(s, 0));
}

API CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, int mode)
{
	return begin_capture(capture_key(s, 1));
}

API CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
	return end_capture(capture_key(s, 0), g);
}

API CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g)
{
	return end_capture(capture_key(s, 1), g);
}

API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st)
{
	if (!st)
		return CUDA_ERROR_INVALID_VALUE;
	*st = capturing(capture_key(s, 0)) ? 1 : CU_STREAM_CAPTURE_STATUS_NONE;
	return CUDA_SUCCESS;
}

API CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *st)
{
	if (!st)
		return CUDA_ERROR_INVALID_VALUE;
	*st = capturing(capture_key(s, 1)) ? 1 : CU_STREAM_CAPTURE_STATUS_NONE;
	return CUDA_SUCCESS;
}

/* Both the legacy and the per-thread allocators: the key is the same for
 * an explicit stream, and the null stream's capture is rare enough that
 * either reading of it adds the node. */
static int capture_alloc(CUstream s, size_t n, CUdeviceptr *dptr, CUresult *ret)
{
	struct graph *g = capturing(capture_key(s, 0));
	CUDA_MEM_ALLOC_NODE_PARAMS p = {.bytesize = n};
	CUgraphNode node;

	if (!g)
		g = capturing(capture_key(s, 1));
	if (!g)
		return 0;
	if (!dptr) {
		*ret = CUDA_ERROR_INVALID_VALUE;
		return 1;
	}
	*ret = add_alloc_node(&node, (CUgraph)g, &p);
	if (*ret == CUDA_SUCCESS)
		*dptr = p.dptr;
	return 1;
}

/*
 * Shareable handles.  A file descriptor handle is a memfd holding
 * "KIND PID HANDLE"; a fabric handle and a pool pointer's export data are
 * 64 bytes holding the same text.  Importing one in any process gives the
 * exporter's memory (the fake does not check who imports: the driver does
 * not either, beyond the handle itself).  With CNL_FAKE_SHARE_FILE set,
 * every descriptor is of that one file (a shared inode).  Export requires the
 * allocation or pool to have been created with that handle type, as the driver
 * does.
 */
static CUresult share_out(const char *kind, uint64_t h,
                          CUmemAllocationHandleType type, void *out)
{
	char text[64];
	int n, fd;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	n = snprintf(text, sizeof(text), "fake-%s %d %llx", kind, (int)getpid(),
	             (unsigned long long)h);
	if (type == CU_MEM_HANDLE_TYPE_FABRIC) {
		memset(out, 0, 64);
		memcpy(out, text, (size_t)n);
		return CUDA_SUCCESS;
	}
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	/* CNL_FAKE_SHARE_FILE: every descriptor is of one file, as with a
	 * driver whose exported descriptors share an inode. */
	if (getenv("CNL_FAKE_SHARE_FILE"))
		fd = open(getenv("CNL_FAKE_SHARE_FILE"),
		          O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	else
		fd = memfd_create("cnlfake-share", 0);
	if (fd < 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	if (pwrite(fd, text, (size_t)n, 0) != n) {
		close(fd);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	memcpy(out, &fd, sizeof(fd));
	return CUDA_SUCCESS;
}

static CUresult share_in(const char *kind, CUmemAllocationHandleType type,
                         void *in, uint64_t *ret_h)
{
	char text[65] = {0}, want[32];
	unsigned long long h;
	ssize_t n;
	int pid;

	if (type == CU_MEM_HANDLE_TYPE_FABRIC) {
		if (!in)
			return CUDA_ERROR_INVALID_VALUE;
		memcpy(text, in, 64);
	} else if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
		n = pread((int)(intptr_t)in, text, 64, 0);
		if (n <= 0)
			return CUDA_ERROR_INVALID_VALUE;
	} else {
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	snprintf(want, sizeof(want), "fake-%s ", kind);
	if (strncmp(text, want, strlen(want)) != 0 ||
	    sscanf(text + strlen(want), "%d %llx", &pid, &h) != 2)
		return CUDA_ERROR_INVALID_VALUE;
	*ret_h = h;
	return CUDA_SUCCESS;
}

/* Handle types each VMM allocation was created with (cuMemCreate). */
#define VMM_TYPES 256
static struct {
	_Atomic uint64_t h;
	_Atomic int types;
} vmm_types[VMM_TYPES];

static void note_handle_types(uint64_t h, int types)
{
	atomic_store(&vmm_types[(h >> 4) % VMM_TYPES].types, types);
	atomic_store(&vmm_types[(h >> 4) % VMM_TYPES].h, h);
}

API CUresult cuMemExportToShareableHandle(void *out,
                                          CUmemGenericAllocationHandle h,
                                          CUmemAllocationHandleType type,
                                          unsigned long long flags)
{
	unsigned i = (unsigned)((h >> 4) % VMM_TYPES);

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (flags || atomic_load(&vmm_types[i].h) != h)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(atomic_load(&vmm_types[i].types) & type))
		return CUDA_ERROR_INVALID_VALUE;
	return share_out("vmm", h, type, out);
}

API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h,
                                            void *in,
                                            CUmemAllocationHandleType type)
{
	uint64_t x;
	CUresult rc;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!h)
		return CUDA_ERROR_INVALID_VALUE;
	if ((rc = share_in("vmm", type, in, &x)) == CUDA_SUCCESS)
		*h = x; /* the exporter's memory, not charged here */
	return rc;
}

/* Pools created with shareable handle types, and pools imported (only
 * those export and import pointers, as with the driver). */
#define POOL_NOTES 64
static struct {
	const void *_Atomic pool;
	_Atomic int types, imported;
} pool_notes[POOL_NOTES];

static void note_pool(const void *pool, int types, int imported)
{
	unsigned i = (unsigned)(((uintptr_t)pool >> 4) % POOL_NOTES);

	atomic_store(&pool_notes[i].types, types);
	atomic_store(&pool_notes[i].imported, imported);
	atomic_store(&pool_notes[i].pool, pool);
}

static int pool_note(const void *pool, int imported)
{
	unsigned i = (unsigned)(((uintptr_t)pool >> 4) % POOL_NOTES);

	if (atomic_load(&pool_notes[i].pool) != pool)
		return 0;
	return imported ? atomic_load(&pool_notes[i].imported)
	                : atomic_load(&pool_notes[i].types);
}

API CUresult cuMemPoolExportToShareableHandle(void *out, CUmemoryPool pool,
                                              CUmemAllocationHandleType type,
                                              unsigned long long flags)
{
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pool || flags || !(pool_note(pool, 0) & type))
		return CUDA_ERROR_INVALID_VALUE;
	return share_out("pool", (uint64_t)(uintptr_t)pool, type, out);
}

API CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *in,
                                                CUmemAllocationHandleType type,
                                                unsigned long long flags)
{
	uint64_t x;
	CUresult rc;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pool || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if ((rc = share_in("pool", type, in, &x)) != CUDA_SUCCESS)
		return rc;
	rc = cuMemPoolCreate(pool, NULL); /* a local view of it */
	if (rc == CUDA_SUCCESS)
		note_pool(*pool, 0, 1);
	return rc;
}

API CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *out,
                                    CUdeviceptr ptr)
{
	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ptr)
		return CUDA_ERROR_INVALID_VALUE;
	return share_out("poolptr", ptr, CU_MEM_HANDLE_TYPE_FABRIC, out);
}

API CUresult cuMemPoolImportPointer(CUdeviceptr *ptr, CUmemoryPool pool,
                                    CUmemPoolPtrExportData *data)
{
	uint64_t x;
	CUresult rc;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ptr || !pool || !pool_note(pool, 1))
		return CUDA_ERROR_INVALID_VALUE;
	rc = share_in("poolptr", CU_MEM_HANDLE_TYPE_FABRIC, data, &x);
	if (rc == CUDA_SUCCESS)
		*ptr = x;
	return rc;
}

/* External memory: the descriptor's first field is its handle type; the
 * memory is another API's (or process's), so nothing is taken here. */
API CUresult cuImportExternalMemory(CUexternalMemory *out,
                                    const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *d)
{
	static _Atomic uint64_t next_ext = 0x100;

	if (need_init())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!out || !d || *(const int *)d <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	*out = (CUexternalMemory)(uintptr_t)atomic_fetch_add(&next_ext, 16);
	return CUDA_SUCCESS;
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
    /* The rest of what the shim hooks, at the versions the real driver
     * gives each variant (cuda.h's _v2/_v3 defines and cudaTypedefs.h). */
    P(cuMemFree, 2000, 0, cuMemFree),
    P(cuMemAllocPitch, 2000, 0, cuMemAllocPitch),
    P(cuMemAllocPitch, 3020, 0, cuMemAllocPitch_v2),
    P(cuMemAllocManaged, 6000, 0, cuMemAllocManaged),
    P(cuMemGetInfo, 2000, 0, cuMemGetInfo),
    P(cuDeviceTotalMem, 2000, 0, cuDeviceTotalMem),
    P(cuDeviceTotalMem, 3020, 0, cuDeviceTotalMem_v2),
    P(cuArrayCreate, 2000, 0, cuArrayCreate),
    P(cuArrayCreate, 3020, 0, cuArrayCreate_v2),
    P(cuArray3DCreate, 2000, 0, cuArray3DCreate),
    P(cuArray3DCreate, 3020, 0, cuArray3DCreate_v2),
    P(cuArrayDestroy, 2000, 0, cuArrayDestroy),
    P(cuMipmappedArrayCreate, 5000, 0, cuMipmappedArrayCreate),
    P(cuMipmappedArrayDestroy, 5000, 0, cuMipmappedArrayDestroy),
    P(cuMemAllocFromPoolAsync, 11020, 0, cuMemAllocFromPoolAsync),
    P(cuMemAllocFromPoolAsync, 11020, 1, cuMemAllocFromPoolAsync_ptsz),
    P(cuMemFreeAsync, 11020, 0, cuMemFreeAsync),
    P(cuMemFreeAsync, 11020, 1, cuMemFreeAsync_ptsz),
    P(cuMemPoolTrimTo, 11020, 0, cuMemPoolTrimTo),
    P(cuCtxSynchronize, 2000, 0, cuCtxSynchronize),
    P(cuMemCreate, 10020, 0, cuMemCreate),
    P(cuMemRelease, 10020, 0, cuMemRelease),
    P(cuMemMap, 10020, 0, cuMemMap),
    P(cuMemUnmap, 10020, 0, cuMemUnmap),
    P(cuCtxCreate, 2000, 0, cuCtxCreate),
    P(cuCtxCreate, 3020, 0, cuCtxCreate_v2),
    P(cuCtxCreate, 11040, 0, cuCtxCreate_v3),
    P(cuCtxCreate, 12050, 0, cuCtxCreate_v4),
    P(cuGreenCtxCreate, 12040, 0, cuGreenCtxCreate),
    P(cuDevicePrimaryCtxRetain, 7000, 0, cuDevicePrimaryCtxRetain),
    P(cuLaunchCooperativeKernel, 9000, 0, cuLaunchCooperativeKernel),
    P(cuLaunchCooperativeKernel, 9000, 1, cuLaunchCooperativeKernel_ptsz),
    P(cuIpcGetMemHandle, 4010, 0, cuIpcGetMemHandle),
    P(cuIpcGetEventHandle, 4010, 0, cuIpcGetEventHandle),
    P(cuIpcOpenEventHandle, 4010, 0, cuIpcOpenEventHandle),
    P(cuGraphAddMemAllocNode, 11040, 0, cuGraphAddMemAllocNode),
    P(cuGraphAddNode, 12020, 0, cuGraphAddNode),
    P(cuGraphAddNode, 12030, 0, cuGraphAddNode_v2),
    P(cuMemExportToShareableHandle, 10020, 0, cuMemExportToShareableHandle),
    P(cuMemImportFromShareableHandle, 10020, 0, cuMemImportFromShareableHandle),
    P(cuMemPoolExportToShareableHandle, 11020, 0,
      cuMemPoolExportToShareableHandle),
    P(cuMemPoolImportFromShareableHandle, 11020, 0,
      cuMemPoolImportFromShareableHandle),
    P(cuMemPoolExportPointer, 11020, 0, cuMemPoolExportPointer),
    P(cuMemPoolImportPointer, 11020, 0, cuMemPoolImportPointer),
    P(cuImportExternalMemory, 10000, 0, cuImportExternalMemory),
    P(cuLaunch, 2000, 0, cuLaunch),
    P(cuLaunchGrid, 2000, 0, cuLaunchGrid),
    P(cuLaunchGridAsync, 2000, 0, cuLaunchGridAsync),
    P(cuLaunchCooperativeKernelMultiDevice, 9000, 0,
      cuLaunchCooperativeKernelMultiDevice),
    P(cuCtxSetLimit, 3010, 0, cuCtxSetLimit),
    P(cuCtxGetLimit, 3010, 0, cuCtxGetLimit),
    P(cuDeviceGetAttribute, 2000, 0, cuDeviceGetAttribute),
    P(cuStreamIsCapturing, 10000, 0, cuStreamIsCapturing),
    P(cuStreamIsCapturing, 10000, 1, cuStreamIsCapturing_ptsz),
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
	    S(cuEventQuery),   S(cuEventElapsedTime_v2), S(cuMemAllocAsync),
	    S(cuMemFreeAsync),
#undef S
	};

	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
		if (strcmp(syms[i].name, name) == 0)
			return syms[i].fn;
	return NULL;
}
