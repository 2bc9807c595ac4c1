/*
 * fake_hip.c - a fake HIP runtime (libamdhip64.so.5, the SONAME of Debian's
 * libamdhip64) that models one AMD Instinct MI300X well enough to test
 * libcnlab-hip.so without one: 192 GiB of device memory (CNL_FAKE_MEM
 * overrides) counted per process in the fake GPU state file shared with
 * the fake CUDA driver (fake_gpu.h: per-process use, the busy timeline and
 * the busy_ns ledger per CNL_FAKE_TAG), stream-ordered pools, VMM handles,
 * arrays, kernels that occupy the GPU for a virtual duration, events,
 * streams, graphs and IPC handles.
 *
 * As strict as the real runtime where the shim depends on it:
 *  - linear device memory is taken in whole 4 KiB pages (the HSA runtime's
 *    VRAM granule), pitched rows are aligned to 256 bytes, pools grow by
 *    2 MiB and keep freed memory until trimmed or synchronised;
 *  - hipMalloc(p, 0) succeeds with *p = NULL; a NULL out pointer, unknown
 *    flags, an unknown pointer or handle are hipErrorInvalidValue (or
 *    hipErrorInvalidResourceHandle for events and streams);
 *  - hipMemCreate wants a size that is a multiple of the 2 MiB granularity
 *    hipMemGetAllocationGranularity reports, and flags 0;
 *  - a kernel must be one hipModuleGetFunction handed out
 *    (hipErrorInvalidDeviceFunction otherwise); opening an IPC handle in
 *    the process that exported it is hipErrorInvalidContext.
 *
 * A kernel's duration comes from its name: "busy_N" runs N microseconds.
 * Graphs run 1000 microseconds.  hipLaunchKernel takes the handle from
 * hipModuleGetFunction as its function address (a real program passes a
 * host stub registered by the compiler; the fake has no compiler).
 *
 * Built with -Bsymbolic-functions so the fake's calls to itself never go
 * through the shim.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>

#include "fake_gpu.h"

#define API __attribute__((visibility("default")))

/* The entry points implement the ABI hip_runtime_api.h declares; a few
 * are declared only for C++ or by newer headers. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"

#define PAGE        4096ULL
#define PITCH_ALIGN 256ULL
#define POOL_GRAIN  (2ULL << 20)
#define VMM_GRAIN   (2ULL << 20)
#define MI300X_MEM  (192ULL << 30)

static struct fake_gpu *gpu;
static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;
static uint64_t capacity = MI300X_MEM;
static unsigned tag;
static _Atomic uint64_t used;
static _Atomic uint64_t next_ptr = 0x7e0000000000ULL;
static _Atomic uint64_t proc_last;
static struct fake_proc *me;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

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

API struct fake_gpu *cnlfake_hip_gpu(void)
{
	pthread_once(&gpu_once, gpu_open);
	return gpu;
}

/* Device memory the calling process holds, as the fake runtime counts it. */
API uint64_t cnlfake_hip_used(void)
{
	return atomic_load(&used);
}

/* The HIP runtime initialises itself on the first call of any entry
 * point; the process joins the shared table then. */
static void register_proc(void)
{
	pid_t pid = getpid();

	cnlfake_hip_gpu();
	for (int i = 0; i < FAKE_PROCS; i++) {
		int32_t p = atomic_load(&gpu->procs[i].pid);

		if (p == pid) {
			me = &gpu->procs[i];
			return;
		}
		if (p && kill(p, 0) < 0 && errno == ESRCH &&
		    atomic_compare_exchange_strong(&gpu->procs[i].pid, &p, 0))
			p = 0;
		if (!p && atomic_compare_exchange_strong(&gpu->procs[i].pid, &p,
		                                         pid)) {
			me = &gpu->procs[i];
			atomic_store(&me->used, 0);
			return;
		}
	}
}

static void init(void)
{
	pthread_once(&init_once, register_proc);
}

/* Memory ------------------------------------------------------------------ */

static uint64_t pages(uint64_t n)
{
	return (n + PAGE - 1) & ~(PAGE - 1);
}

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

/* Process-local table of live objects: key -> size (and aux). */
struct block {
	struct block *next;
	uint64_t key, size, aux;
	int kind;
};
#define NB 4096
static struct block *blocks[NB];
static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;

enum { B_LINEAR = 1, B_POOL, B_VMM, B_ARRAY };

static void put_block(int kind, uint64_t key, uint64_t size, uint64_t aux)
{
	struct block *b = malloc(sizeof(*b));

	if (!b)
		abort();
	b->key = key;
	b->size = size;
	b->aux = aux;
	b->kind = kind;
	pthread_mutex_lock(&blocks_lock);
	b->next = blocks[(key >> 8) % NB];
	blocks[(key >> 8) % NB] = b;
	pthread_mutex_unlock(&blocks_lock);
}

static int take_block(int kind, uint64_t key, uint64_t *ret_size,
                      uint64_t *ret_aux)
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
	if (ret_aux)
		*ret_aux = b->aux;
	free(b);
	return 0;
}

static uint64_t new_addr(uint64_t size)
{
	return atomic_fetch_add(&next_ptr, (size + 0xfffff) & ~0xfffffULL);
}

API hipError_t hipInit(unsigned int flags)
{
	if (flags)
		return hipErrorInvalidValue;
	init();
	return hipSuccess;
}

API hipError_t hipGetDeviceCount(int *n)
{
	if (!n)
		return hipErrorInvalidValue;
	init();
	*n = 1;
	return hipSuccess;
}

API hipError_t hipDeviceGet(hipDevice_t *d, int ordinal)
{
	if (!d || ordinal != 0)
		return hipErrorInvalidDevice;
	*d = 0;
	return hipSuccess;
}

API hipError_t hipSetDevice(int dev)
{
	init();
	return dev == 0 ? hipSuccess : hipErrorInvalidDevice;
}

API hipError_t hipGetDevice(int *dev)
{
	if (!dev)
		return hipErrorInvalidValue;
	*dev = 0;
	return hipSuccess;
}

API hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t dev)
{
	if (!bytes)
		return hipErrorInvalidValue;
	if (dev != 0)
		return hipErrorInvalidDevice;
	init();
	*bytes = (size_t)capacity;
	return hipSuccess;
}

API hipError_t hipMemGetInfo(size_t *free, size_t *total)
{
	if (!free || !total)
		return hipErrorInvalidValue;
	init();
	*total = (size_t)capacity;
	*free = (size_t)(capacity - atomic_load(&used));
	return hipSuccess;
}

static hipError_t linear_alloc(void **ptr, size_t size)
{
	uint64_t a, n = pages(size);

	if (!ptr)
		return hipErrorInvalidValue;
	init();
	if (!size) {
		*ptr = NULL;
		return hipSuccess;
	}
	if (take_mem(n) < 0)
		return hipErrorOutOfMemory;
	a = new_addr(n);
	put_block(B_LINEAR, a, n, 0);
	*ptr = (void *)(uintptr_t)a;
	return hipSuccess;
}

API hipError_t hipMalloc(void **ptr, size_t size)
{
	return linear_alloc(ptr, size);
}

API hipError_t hipMallocManaged(void **ptr, size_t size, unsigned int flags)
{
	if (flags != hipMemAttachGlobal && flags != hipMemAttachHost)
		return hipErrorInvalidValue;
	return linear_alloc(ptr, size);
}

API hipError_t hipExtMallocWithFlags(void **ptr, size_t size,
                                     unsigned int flags)
{
	if (flags > hipMallocSignalMemory)
		return hipErrorInvalidValue;
	/* Signal memory is 8 bytes exactly. */
	if (flags == hipMallocSignalMemory && size != 8)
		return hipErrorInvalidValue;
	return linear_alloc(ptr, size);
}

API hipError_t hipMallocPitch(void **ptr, size_t *pitch, size_t width,
                              size_t height)
{
	size_t p = (width + PITCH_ALIGN - 1) & ~(size_t)(PITCH_ALIGN - 1);
	hipError_t rc;

	if (!ptr || !pitch)
		return hipErrorInvalidValue;
	rc = linear_alloc(ptr, p * height);
	if (rc == hipSuccess)
		*pitch = p;
	return rc;
}

API hipError_t hipMalloc3D(hipPitchedPtr *pp, hipExtent e)
{
	size_t p = (e.width + PITCH_ALIGN - 1) & ~(size_t)(PITCH_ALIGN - 1);
	hipError_t rc;
	void *ptr = NULL;

	if (!pp)
		return hipErrorInvalidValue;
	rc = linear_alloc(&ptr, p * e.height * e.depth);
	if (rc != hipSuccess)
		return rc;
	pp->ptr = ptr;
	pp->pitch = p;
	pp->xsize = e.width;
	pp->ysize = e.height;
	return hipSuccess;
}

static uint64_t elem_bytes(const struct hipChannelFormatDesc *d)
{
	int bits = d->x + d->y + d->z + d->w;

	return bits > 0 ? (uint64_t)(bits + 7) / 8 : 1;
}

static uint64_t ext(size_t v)
{
	return v ? v : 1;
}

static hipError_t array_new(hipArray **array,
                            const struct hipChannelFormatDesc *desc, size_t w,
                            size_t h, size_t d, unsigned flags)
{
	uint64_t n;
	hipArray *a;

	if (!array || !desc || !w)
		return hipErrorInvalidValue;
	init();
	n = pages(ext(w) * ext(h) * ext(d) * elem_bytes(desc));
	if (take_mem(n) < 0)
		return hipErrorOutOfMemory;
	a = calloc(1, sizeof(*a));
	if (!a) {
		give_mem(n);
		return hipErrorOutOfMemory;
	}
	a->desc = *desc;
	a->width = (unsigned)w;
	a->height = (unsigned)h;
	a->depth = (unsigned)d;
	a->data = (void *)(uintptr_t)new_addr(n);
	put_block(B_ARRAY, (uintptr_t)a, n, 0);
	*array = a;
	return hipSuccess;
}

API hipError_t hipMallocArray(hipArray **array,
                              const hipChannelFormatDesc *desc, size_t width,
                              size_t height, unsigned int flags)
{
	return array_new(array, desc, width, height, 0, flags);
}

API hipError_t hipMalloc3DArray(hipArray **array,
                                const struct hipChannelFormatDesc *desc,
                                struct hipExtent e, unsigned int flags)
{
	return array_new(array, desc, e.width, e.height, e.depth, flags);
}

API hipError_t hipFreeArray(hipArray *array)
{
	uint64_t n;

	if (!array || take_block(B_ARRAY, (uintptr_t)array, &n, NULL) < 0)
		return hipErrorInvalidValue;
	give_mem(n);
	free(array);
	return hipSuccess;
}

/* The driver-style spellings. */
API hipError_t hipMemAllocPitch(hipDeviceptr_t *ptr, size_t *pitch,
                                size_t width, size_t height, unsigned elem)
{
	if (elem != 4 && elem != 8 && elem != 16)
		return hipErrorInvalidValue;
	return hipMallocPitch(ptr, pitch, width, height);
}

static uint64_t format_bytes(int f)
{
	switch (f) {
	case HIP_AD_FORMAT_UNSIGNED_INT8:
	case HIP_AD_FORMAT_SIGNED_INT8:
		return 1;
	case HIP_AD_FORMAT_UNSIGNED_INT16:
	case HIP_AD_FORMAT_SIGNED_INT16:
	case HIP_AD_FORMAT_HALF:
		return 2;
	case HIP_AD_FORMAT_UNSIGNED_INT32:
	case HIP_AD_FORMAT_SIGNED_INT32:
	case HIP_AD_FORMAT_FLOAT:
		return 4;
	default:
		return 0;
	}
}

/* As hipMallocArray, from a driver descriptor (element size x channels,
 * spelled as a channel descriptor of that many bits). */
static hipError_t darray_new(hipArray **array, size_t w, size_t h, size_t d,
                             int format, unsigned channels)
{
	uint64_t eb = format_bytes(format);
	struct hipChannelFormatDesc desc = {(int)(eb * channels * 8), 0, 0, 0,
	                                    hipChannelFormatKindNone};

	if (!eb || (channels != 1 && channels != 2 && channels != 4))
		return hipErrorInvalidValue;
	return array_new(array, &desc, w, h, d, 0);
}

API hipError_t hipArrayCreate(hipArray **array,
                              const HIP_ARRAY_DESCRIPTOR *desc)
{
	if (!desc)
		return hipErrorInvalidValue;
	return darray_new(array, desc->Width, desc->Height, 0,
	                  (int)desc->Format, desc->NumChannels);
}

API hipError_t hipArray3DCreate(hipArray **array,
                                const HIP_ARRAY3D_DESCRIPTOR *desc)
{
	if (!desc)
		return hipErrorInvalidValue;
	return darray_new(array, desc->Width, desc->Height, desc->Depth,
	                  (int)desc->Format, desc->NumChannels);
}

API hipError_t hipArrayDestroy(hipArray *array)
{
	return hipFreeArray(array);
}

/* Pools ------------------------------------------------------------------- */

struct pool {
	pthread_mutex_t lock;
	uint64_t reserved, cached;
};
static struct pool default_pool = {PTHREAD_MUTEX_INITIALIZER, 0, 0};

API hipError_t hipDeviceGetMemPool(hipMemPool_t *pool, int dev)
{
	if (!pool || dev != 0)
		return hipErrorInvalidValue;
	*pool = (hipMemPool_t)&default_pool;
	return hipSuccess;
}

API hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t *pool, int dev)
{
	return hipDeviceGetMemPool(pool, dev);
}

API hipError_t hipMemPoolCreate(hipMemPool_t *pool,
                                const hipMemPoolProps *props)
{
	struct pool *p;

	if (!pool || !props)
		return hipErrorInvalidValue;
	p = calloc(1, sizeof(*p));
	if (!p)
		return hipErrorOutOfMemory;
	pthread_mutex_init(&p->lock, NULL);
	*pool = (hipMemPool_t)p;
	return hipSuccess;
}

static void pool_trim(struct pool *p, uint64_t keep)
{
	uint64_t r;

	pthread_mutex_lock(&p->lock);
	r = p->reserved > keep ? p->reserved - keep : 0;
	/* Whole grains only, and only what no allocation uses. */
	r = r < p->cached ? r : p->cached;
	r &= ~(POOL_GRAIN - 1);
	p->reserved -= r;
	p->cached -= r;
	pthread_mutex_unlock(&p->lock);
	give_mem(r);
}

API hipError_t hipMemPoolDestroy(hipMemPool_t pool)
{
	if (!pool)
		return hipErrorInvalidValue;
	pool_trim((struct pool *)pool, 0);
	return hipSuccess;
}

API hipError_t hipMemPoolTrimTo(hipMemPool_t pool, size_t keep)
{
	if (!pool)
		return hipErrorInvalidValue;
	pool_trim((struct pool *)pool, keep);
	return hipSuccess;
}

API hipError_t hipMemPoolGetAttribute(hipMemPool_t pool, hipMemPoolAttr attr,
                                      void *value)
{
	struct pool *p = (struct pool *)pool;

	if (!p || !value)
		return hipErrorInvalidValue;
	if (attr != hipMemPoolAttrReservedMemCurrent)
		return hipErrorNotSupported;
	pthread_mutex_lock(&p->lock);
	*(uint64_t *)value = p->reserved;
	pthread_mutex_unlock(&p->lock);
	return hipSuccess;
}

static hipError_t pool_alloc(void **ptr, size_t size, struct pool *p)
{
	uint64_t a, n = pages(size);

	if (!ptr || !p || !size)
		return hipErrorInvalidValue;
	init();
	pthread_mutex_lock(&p->lock);
	if (p->cached < n) {
		uint64_t grow =
		    (n - p->cached + POOL_GRAIN - 1) & ~(POOL_GRAIN - 1);
		if (take_mem(grow) < 0) {
			pthread_mutex_unlock(&p->lock);
			return hipErrorOutOfMemory;
		}
		p->reserved += grow;
		p->cached += grow;
	}
	p->cached -= n;
	pthread_mutex_unlock(&p->lock);
	a = new_addr(n);
	put_block(B_POOL, a, n, (uintptr_t)p);
	*ptr = (void *)(uintptr_t)a;
	return hipSuccess;
}

API hipError_t hipMallocAsync(void **ptr, size_t size, hipStream_t s)
{
	return pool_alloc(ptr, size, &default_pool);
}

API hipError_t hipMallocFromPoolAsync(void **ptr, size_t size,
                                      hipMemPool_t pool, hipStream_t s)
{
	return pool_alloc(ptr, size, (struct pool *)pool);
}

static int pool_free(void *ptr)
{
	uint64_t n, pp;
	struct pool *p;

	if (take_block(B_POOL, (uintptr_t)ptr, &n, &pp) < 0)
		return -1;
	p = (struct pool *)(uintptr_t)pp;
	pthread_mutex_lock(&p->lock);
	p->cached += n;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

API hipError_t hipFree(void *ptr)
{
	uint64_t n;

	if (!ptr)
		return hipSuccess;
	if (take_block(B_LINEAR, (uintptr_t)ptr, &n, NULL) == 0) {
		give_mem(n);
		return hipSuccess;
	}
	if (pool_free(ptr) == 0)
		return hipSuccess;
	return hipErrorInvalidValue;
}

API hipError_t hipFreeAsync(void *ptr, hipStream_t s)
{
	if (!ptr)
		return hipErrorInvalidValue;
	return hipFree(ptr);
}

/* VMM --------------------------------------------------------------------- */

static _Atomic uint64_t next_handle = 0x1000;

API hipError_t hipMemGetAllocationGranularity(
    size_t *granularity, const hipMemAllocationProp *prop,
    hipMemAllocationGranularity_flags option)
{
	if (!granularity || !prop)
		return hipErrorInvalidValue;
	*granularity = VMM_GRAIN;
	return hipSuccess;
}

API hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *handle,
                            size_t size, const hipMemAllocationProp *prop,
                            unsigned long long flags)
{
	uint64_t h;
	int dev;

	if (!handle || !prop || !size || size % VMM_GRAIN || flags)
		return hipErrorInvalidValue;
	init();
	dev = prop->location.type == hipMemLocationTypeDevice;
	if (dev && take_mem(size) < 0)
		return hipErrorOutOfMemory;
	h = atomic_fetch_add(&next_handle, 16);
	put_block(B_VMM, h, dev ? size : 0, 0);
	*handle = (hipMemGenericAllocationHandle_t)(uintptr_t)h;
	return hipSuccess;
}

API hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle)
{
	uint64_t n;

	if (take_block(B_VMM, (uintptr_t)handle, &n, NULL) < 0)
		return hipErrorInvalidValue;
	give_mem(n);
	return hipSuccess;
}

/* Streams, kernels, events ------------------------------------------------- */

struct stream {
	_Atomic uint64_t last;
};
static struct stream default_stream;

static struct stream *stream_of(hipStream_t s)
{
	if (!s || s == hipStreamPerThread)
		return &default_stream;
	return (struct stream *)s;
}

static void raise_to(_Atomic uint64_t *v, uint64_t t)
{
	uint64_t c = atomic_load(v);

	while (t > c && !atomic_compare_exchange_weak(v, &c, t))
		;
}

static void submit(hipStream_t s, uint64_t d)
{
	uint64_t now = now_ns(), f, start;

	cnlfake_hip_gpu();
	f = atomic_load(&gpu->free_at);
	do {
		start = f > now ? f : now;
	} while (!atomic_compare_exchange_weak(&gpu->free_at, &f, start + d));
	atomic_fetch_add(&gpu->busy_ns[tag], d);
	atomic_fetch_add(&gpu->kernels, 1);
	raise_to(&stream_of(s)->last, start + d);
	raise_to(&proc_last, start + d);
}

API hipError_t hipStreamCreate(hipStream_t *s)
{
	struct stream *st;

	if (!s)
		return hipErrorInvalidValue;
	st = calloc(1, sizeof(*st));
	if (!st)
		return hipErrorOutOfMemory;
	*s = (hipStream_t)st;
	return hipSuccess;
}

API hipError_t hipStreamDestroy(hipStream_t s)
{
	if (!s || s == hipStreamPerThread)
		return hipErrorInvalidResourceHandle;
	free(s);
	return hipSuccess;
}

API hipError_t hipStreamSynchronize(hipStream_t s)
{
	sleep_until(atomic_load(&stream_of(s)->last));
	return hipSuccess;
}

API hipError_t hipDeviceSynchronize(void)
{
	sleep_until(atomic_load(&proc_last));
	/* Pools give memory back on synchronisation (release threshold 0). */
	pool_trim(&default_pool, 0);
	return hipSuccess;
}

static int module_dummy;

API hipError_t hipModuleLoadData(hipModule_t *m, const void *image)
{
	if (!m || !image)
		return hipErrorInvalidValue;
	init();
	*m = (hipModule_t)&module_dummy;
	return hipSuccess;
}

/* A function handle: (microseconds << 4) | 8, so launches can check it. */
API hipError_t hipModuleGetFunction(hipFunction_t *f, hipModule_t m,
                                    const char *name)
{
	uint64_t us = 0;

	if (!f || !m || !name)
		return hipErrorInvalidValue;
	if (strncmp(name, "busy_", 5) == 0)
		us = strtoull(name + 5, NULL, 10);
	else if (strcmp(name, "noop") != 0)
		return hipErrorNotFound;
	*f = (hipFunction_t)(uintptr_t)((us << 4) | 8);
	return hipSuccess;
}

static int valid_fn(const void *f)
{
	return f && ((uintptr_t)f & 0xf) == 8;
}

static uint64_t duration(const void *f)
{
	return ((uintptr_t)f >> 4) * 1000;
}

static hipError_t launch(const void *f, hipStream_t s)
{
	if (!valid_fn(f))
		return hipErrorInvalidDeviceFunction;
	submit(s, duration(f));
	return hipSuccess;
}

API hipError_t hipLaunchKernel(const void *f, dim3 grid, dim3 block,
                               void **args, size_t shm, hipStream_t s)
{
	return launch(f, s);
}

API hipError_t hipLaunchKernel_spt(const void *f, dim3 grid, dim3 block,
                                   void **args, size_t shm, hipStream_t s)
{
	return launch(f, s ? s : hipStreamPerThread);
}

struct event {
	_Atomic uint64_t ts; /* 0: never recorded */
};

API hipError_t hipEventRecord(hipEvent_t e, hipStream_t s);

API hipError_t hipExtLaunchKernel(const void *f, dim3 grid, dim3 block,
                                  void **args, size_t shm, hipStream_t s,
                                  hipEvent_t start, hipEvent_t stop, int flags)
{
	hipError_t rc;

	if (start)
		hipEventRecord(start, s);
	rc = launch(f, s);
	if (rc == hipSuccess && stop)
		hipEventRecord(stop, s);
	return rc;
}

API hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gx,
                                     unsigned int gy, unsigned int gz,
                                     unsigned int bx, unsigned int by,
                                     unsigned int bz, unsigned int shm,
                                     hipStream_t s, void **params, void **extra)
{
	if (!gx || !gy || !gz || !bx || !by || !bz)
		return hipErrorInvalidValue;
	return launch(f, s);
}

API hipError_t hipExtModuleLaunchKernel(hipFunction_t f, uint32_t gx,
                                        uint32_t gy, uint32_t gz, uint32_t lx,
                                        uint32_t ly, uint32_t lz, size_t shm,
                                        hipStream_t s, void **params,
                                        void **extra, hipEvent_t start,
                                        hipEvent_t stop, uint32_t flags)
{
	hipError_t rc;

	if (!gx || !gy || !gz || !lx || !ly || !lz)
		return hipErrorInvalidValue;
	if (start)
		hipEventRecord(start, s);
	rc = launch(f, s);
	if (rc == hipSuccess && stop)
		hipEventRecord(stop, s);
	return rc;
}

/* The real runtime exports hip_ext.h's launches by their C++ names. */
API hipError_t
_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j(
    hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx,
    uint32_t ly, uint32_t lz, size_t shm, hipStream_t s, void **params,
    void **extra, hipEvent_t start, hipEvent_t stop, uint32_t flags)
{
	return hipExtModuleLaunchKernel(f, gx, gy, gz, lx, ly, lz, shm, s,
	                                params, extra, start, stop, flags);
}

API hipError_t
_Z24hipHccModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_(
    hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx,
    uint32_t ly, uint32_t lz, size_t shm, hipStream_t s, void **params,
    void **extra, hipEvent_t start, hipEvent_t stop)
{
	return hipExtModuleLaunchKernel(f, gx, gy, gz, lx, ly, lz, shm, s,
	                                params, extra, start, stop, 0);
}

API hipError_t hipLaunchCooperativeKernel(const void *f, dim3 grid, dim3 block,
                                          void **args, unsigned int shm,
                                          hipStream_t s)
{
	return launch(f, s);
}

API hipError_t hipLaunchCooperativeKernel_spt(const void *f, dim3 grid,
                                              dim3 block, void **args,
                                              uint32_t shm, hipStream_t s)
{
	return launch(f, s ? s : hipStreamPerThread);
}

static int graph_dummy;

API hipError_t hipGraphCreate(hipGraph_t *g, unsigned int flags)
{
	if (!g || flags)
		return hipErrorInvalidValue;
	*g = (hipGraph_t)&graph_dummy;
	return hipSuccess;
}

API hipError_t hipGraphInstantiate(hipGraphExec_t *exec, hipGraph_t g,
                                   hipGraphNode_t *err, char *log, size_t len)
{
	if (!exec || g != (hipGraph_t)&graph_dummy)
		return hipErrorInvalidValue;
	*exec = (hipGraphExec_t)&graph_dummy;
	return hipSuccess;
}

API hipError_t hipGraphLaunch(hipGraphExec_t exec, hipStream_t s)
{
	if (exec != (hipGraphExec_t)&graph_dummy)
		return hipErrorInvalidValue;
	submit(s, 1000000);
	return hipSuccess;
}

API hipError_t hipGraphLaunch_spt(hipGraphExec_t exec, hipStream_t s)
{
	return hipGraphLaunch(exec, s ? s : hipStreamPerThread);
}

API hipError_t hipEventCreateWithFlags(hipEvent_t *e, unsigned flags)
{
	struct event *ev;

	if (!e)
		return hipErrorInvalidValue;
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return hipErrorOutOfMemory;
	*e = (hipEvent_t)ev;
	return hipSuccess;
}

API hipError_t hipEventCreate(hipEvent_t *e)
{
	return hipEventCreateWithFlags(e, 0);
}

API hipError_t hipEventDestroy(hipEvent_t e)
{
	if (!e)
		return hipErrorInvalidResourceHandle;
	free(e);
	return hipSuccess;
}

/* An event completes when the GPU reaches it: after all work queued. */
API hipError_t hipEventRecord(hipEvent_t e, hipStream_t s)
{
	uint64_t now = now_ns(), f;

	if (!e)
		return hipErrorInvalidResourceHandle;
	f = atomic_load(&cnlfake_hip_gpu()->free_at);
	atomic_store(&((struct event *)e)->ts, f > now ? f : now);
	return hipSuccess;
}

API hipError_t hipEventQuery(hipEvent_t e)
{
	uint64_t t;

	if (!e)
		return hipErrorInvalidResourceHandle;
	t = atomic_load(&((struct event *)e)->ts);
	return !t || now_ns() >= t ? hipSuccess : hipErrorNotReady;
}

API hipError_t hipEventSynchronize(hipEvent_t e)
{
	if (!e)
		return hipErrorInvalidResourceHandle;
	sleep_until(atomic_load(&((struct event *)e)->ts));
	return hipSuccess;
}

API hipError_t hipEventElapsedTime(float *ms, hipEvent_t a, hipEvent_t b)
{
	uint64_t ta, tb, now = now_ns();

	if (!ms)
		return hipErrorInvalidValue;
	if (!a || !b)
		return hipErrorInvalidResourceHandle;
	ta = atomic_load(&((struct event *)a)->ts);
	tb = atomic_load(&((struct event *)b)->ts);
	if (!ta || !tb)
		return hipErrorInvalidResourceHandle;
	if (now < ta || now < tb)
		return hipErrorNotReady;
	*ms = (float)((double)((int64_t)tb - (int64_t)ta) / 1e6);
	return hipSuccess;
}

/* IPC: a handle names the exporting process and the address. ------------- */

API hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t *h, void *ptr)
{
	uint64_t n;

	if (!h || !ptr)
		return hipErrorInvalidValue;
	/* Only a live linear allocation can be exported. */
	if (take_block(B_LINEAR, (uintptr_t)ptr, &n, NULL) < 0)
		return hipErrorInvalidDevicePointer;
	put_block(B_LINEAR, (uintptr_t)ptr, n, 0);
	memset(h, 0, sizeof(*h));
	snprintf(h->reserved, sizeof(h->reserved), "fake-hipmem %d %llx",
	         (int)getpid(), (unsigned long long)(uintptr_t)ptr);
	return hipSuccess;
}

API hipError_t hipIpcOpenMemHandle(void **ptr, hipIpcMemHandle_t h,
                                   unsigned int flags)
{
	unsigned long long a;
	int pid;

	if (!ptr || flags != hipIpcMemLazyEnablePeerAccess)
		return hipErrorInvalidValue;
	if (sscanf(h.reserved, "fake-hipmem %d %llx", &pid, &a) != 2)
		return hipErrorInvalidValue;
	if (pid == getpid())
		return hipErrorInvalidContext;
	*ptr = (void *)(uintptr_t)a;
	return hipSuccess;
}

API hipError_t hipIpcCloseMemHandle(void *ptr)
{
	return ptr ? hipSuccess : hipErrorInvalidValue;
}

API hipError_t hipIpcGetEventHandle(hipIpcEventHandle_t *h, hipEvent_t e)
{
	if (!h || !e)
		return hipErrorInvalidValue;
	memset(h, 0, sizeof(*h));
	snprintf(h->reserved, sizeof(h->reserved), "fake-hipevent %d %p",
	         (int)getpid(), (void *)e);
	return hipSuccess;
}

API hipError_t hipIpcOpenEventHandle(hipEvent_t *e, hipIpcEventHandle_t h)
{
	int pid;

	if (!e)
		return hipErrorInvalidValue;
	if (sscanf(h.reserved, "fake-hipevent %d", &pid) != 1)
		return hipErrorInvalidValue;
	if (pid == getpid())
		return hipErrorInvalidContext;
	return hipEventCreate(e);
}

/* hipGetProcAddress (HIP 6.2): the fake's own entry points by name, from
 * a table (a dlsym here would go through whatever interposes dlsym). */
#if HIP_VERSION < 60200000
typedef int hipDriverProcAddressQueryResult;
#endif

API hipError_t hipGetProcAddress(const char *symbol, void **pfn, int version,
                                 uint64_t flags,
                                 hipDriverProcAddressQueryResult *status)
{
	static const struct {
		const char *name;
		void *fn;
	} table[] = {
	    {"hipMalloc", (void *)hipMalloc},
	    {"hipFree", (void *)hipFree},
	    {"hipMemGetInfo", (void *)hipMemGetInfo},
	    {"hipMallocAsync", (void *)hipMallocAsync},
	    {"hipLaunchKernel", (void *)hipLaunchKernel},
	};

	if (!symbol || !pfn || version <= 0)
		return hipErrorInvalidValue;
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (strcmp(table[i].name, symbol) == 0) {
			*pfn = table[i].fn;
			if (status)
				*status = 0; /* HIP_GET_PROC_ADDRESS_SUCCESS */
			return hipSuccess;
		}
	*pfn = NULL;
	if (status)
		*status = 1; /* HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
	return hipErrorNotFound;
}

API const char *hipGetErrorString(hipError_t e)
{
	return e == hipSuccess ? "hipSuccess" : "fake HIP error";
}

/* Entry points the shim refuses inside a slice (imports, mipmapped arrays,
 * launches by host pointer or on several devices).  The fake checks its
 * arguments as the runtime does and answers as if the work were done, so
 * that a refusal the tests see is the shim's, never the fake's. */
API hipError_t
hipMemImportFromShareableHandle(hipMemGenericAllocationHandle_t *handle,
                                void *osHandle, hipMemAllocationHandleType type)
{
	if (!handle || (type == hipMemHandleTypePosixFileDescriptor &&
	                (intptr_t)osHandle < 0))
		return hipErrorInvalidValue;
	*handle = (hipMemGenericAllocationHandle_t)(uintptr_t)0x1000;
	return hipSuccess;
}

API hipError_t hipMemPoolImportFromShareableHandle(
    hipMemPool_t *pool, void *shared, hipMemAllocationHandleType type,
    unsigned int flags)
{
	if (!pool || flags)
		return hipErrorInvalidValue;
	*pool = (hipMemPool_t)(uintptr_t)0x2000;
	return hipSuccess;
}

API hipError_t hipMemPoolImportPointer(void **ptr, hipMemPool_t pool,
                                       hipMemPoolPtrExportData *data)
{
	if (!ptr || !pool || !data)
		return hipErrorInvalidValue;
	*ptr = (void *)(uintptr_t)0x3000;
	return hipSuccess;
}

API hipError_t hipImportExternalMemory(hipExternalMemory_t *mem,
                                       const hipExternalMemoryHandleDesc *desc)
{
	if (!mem || !desc || !desc->size)
		return hipErrorInvalidValue;
	*mem = (hipExternalMemory_t)(uintptr_t)0x4000;
	return hipSuccess;
}

API hipError_t hipMallocMipmappedArray(hipMipmappedArray_t *arr,
                                       const struct hipChannelFormatDesc *desc,
                                       struct hipExtent extent,
                                       unsigned int levels, unsigned int flags)
{
	if (!arr || !desc || !extent.width || !levels)
		return hipErrorInvalidValue;
	*arr = (hipMipmappedArray_t)(uintptr_t)0x5000;
	return hipSuccess;
}

API hipError_t hipMipmappedArrayCreate(hipMipmappedArray_t *arr,
                                       HIP_ARRAY3D_DESCRIPTOR *desc,
                                       unsigned int levels)
{
	if (!arr || !desc || !desc->Width || !levels)
		return hipErrorInvalidValue;
	*arr = (hipMipmappedArray_t)(uintptr_t)0x6000;
	return hipSuccess;
}

API hipError_t hipLaunchByPtr(const void *func)
{
	return func ? hipSuccess : hipErrorInvalidDeviceFunction;
}

API hipError_t hipLaunchCooperativeKernelMultiDevice(hipLaunchParams *list,
                                                     int n, unsigned int flags)
{
	return list && n == 1 ? hipSuccess : hipErrorInvalidValue;
}

API hipError_t hipExtLaunchMultiKernelMultiDevice(hipLaunchParams *list, int n,
                                                  unsigned int flags)
{
	return list && n == 1 ? hipSuccess : hipErrorInvalidValue;
}
