/*
 * fw_torch.c - a program that allocates as PyTorch's CUDA caching allocator
 * does (c10/cuda/CUDACachingAllocator.cpp, read for its patterns, not its
 * code), run unchanged with the shim preloaded over the fake driver.  It
 * knows nothing of the shim: it sizes itself from cuMemGetInfo and
 * cuDeviceTotalMem, as PyTorch does.
 *
 *   fw_torch caching      requests rounded to 512 bytes; requests up to
 *                         1 MiB served from 2 MiB segments, up to 10 MiB
 *                         from 20 MiB segments, larger ones from segments
 *                         of their size rounded to 2 MiB; best fit among
 *                         cached free blocks, split, merged on free; on
 *                         CUDA_ERROR_OUT_OF_MEMORY every wholly free
 *                         segment is given back (cuMemFree) and the
 *                         allocation tried once more, then OOM reported
 *   fw_torch expandable   "expandable segments": one virtual range of
 *                         (total + total/8) rounded to 20 MiB segments
 *                         (cuMemAddressReserve), grown a 20 MiB handle at
 *                         a time (cuMemCreate, cuMemMap, cuMemSetAccess),
 *                         shrunk by cuMemUnmap and cuMemRelease
 *
 * Both run a training-like loop that fits (a third of the memory the
 * program is told it has, the same tensors every step), then grow until
 * the allocator reports out of memory.  Checked throughout: the device
 * memory the driver holds for the process (fw_common.h: the fake's count,
 * or NVML's on a real GPU) never exceeds the total the program was told
 * (CNL_TEST_QUOTA, when set, is that total); over the fake, what
 * cuMemGetInfo says is used is what the driver holds; the loop reuses its
 * cache (no new segment after the first step), OOM comes back as
 * CUDA_ERROR_OUT_OF_MEMORY and the program keeps running.
 *
 * Prints one "name value" line per phase; exit status 0 when every check
 * passed, 1 otherwise (the failures named on stderr), 2 for bad usage.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "fw_common.h"

/* PyTorch's constants. */
#define MIN_BLOCK    512ULL
#define SMALL_SIZE   (1 * MiB)
#define SMALL_BUFFER (2 * MiB)
#define LARGE_BUFFER (20 * MiB)
#define MIN_LARGE    (10 * MiB)
#define ROUND_LARGE  (2 * MiB)

static uint64_t total_mem; /* what the program was told */
static uint64_t most_held; /* the most the driver held for us */

static uint64_t round_up(uint64_t n, uint64_t unit)
{
	return (n + unit - 1) / unit * unit;
}

/* Device memory in use as cuMemGetInfo tells it. */
static uint64_t info_used(void)
{
	size_t f = 0, t = 0;

	cuMemGetInfo(&f, &t);
	return (uint64_t)(t - f);
}

/* After every driver allocation: the driver's count stays in bounds. */
static void watch(void)
{
	uint64_t d = driver_holds();

	if (d > most_held)
		most_held = d;
	CHECK(d <= total_mem, "driver holds %llu of %llu",
	      (unsigned long long)d, (unsigned long long)total_mem);
}

/* Caching allocator ------------------------------------------------------ */

struct block {
	CUdeviceptr ptr;
	uint64_t size;
	int allocated, small;
	struct block *prev, *next; /* neighbours in the segment */
	struct block *all;         /* every block */
};

static struct block *blocks;
static unsigned segments, retries, driver_allocs;

static struct block *block_new(CUdeviceptr ptr, uint64_t size, int small)
{
	struct block *b = calloc(1, sizeof(*b));

	if (!b) {
		perror("calloc");
		exit(1);
	}
	b->ptr = ptr;
	b->size = size;
	b->small = small;
	b->all = blocks;
	blocks = b;
	return b;
}

static void block_forget(struct block *b)
{
	struct block **pp;

	for (pp = &blocks; *pp != b; pp = &(*pp)->all)
		;
	*pp = b->all;
	free(b);
}

/* Give back every segment that is one free block; the bytes released. */
static uint64_t release_cached(void)
{
	uint64_t bytes = 0;
	struct block *b = blocks, *n;

	for (; b; b = n) {
		n = b->all;
		if (!b->allocated && !b->prev && !b->next) {
			CHECK(cuMemFree(b->ptr) == CUDA_SUCCESS, "cuMemFree");
			bytes += b->size;
			segments--;
			block_forget(b);
		}
	}
	return bytes;
}

static uint64_t segment_size(uint64_t size)
{
	if (size <= SMALL_SIZE)
		return SMALL_BUFFER;
	if (size < MIN_LARGE)
		return LARGE_BUFFER;
	return round_up(size, ROUND_LARGE);
}

static CUresult torch_malloc(uint64_t want, CUdeviceptr *ret)
{
	uint64_t size =
	    want < MIN_BLOCK ? MIN_BLOCK : round_up(want, MIN_BLOCK);
	int small = size <= SMALL_SIZE;
	struct block *best = NULL, *b;
	CUdeviceptr p;
	CUresult rc;

	for (b = blocks; b; b = b->all)
		if (!b->allocated && b->small == small && b->size >= size &&
		    (!best || b->size < best->size))
			best = b;
	if (!best) {
		uint64_t seg = segment_size(size);

		rc = cuMemAlloc(&p, seg);
		if (rc == CUDA_ERROR_OUT_OF_MEMORY && release_cached()) {
			retries++;
			rc = cuMemAlloc(&p, seg);
		}
		if (rc != CUDA_SUCCESS)
			return rc;
		driver_allocs++;
		segments++;
		watch();
		best = block_new(p, seg, small);
	}
	/* Split off the rest when it is worth keeping. */
	if (best->size - size >= (small ? MIN_BLOCK : SMALL_SIZE + 1)) {
		struct block *rest =
		    block_new(best->ptr + size, best->size - size, small);

		rest->prev = best;
		rest->next = best->next;
		if (best->next)
			best->next->prev = rest;
		best->next = rest;
		best->size = size;
	}
	best->allocated = 1;
	*ret = best->ptr;
	return CUDA_SUCCESS;
}

static void merge(struct block *a, struct block *b)
{
	a->size += b->size;
	a->next = b->next;
	if (b->next)
		b->next->prev = a;
	block_forget(b);
}

static void torch_free(CUdeviceptr ptr)
{
	struct block *b;

	for (b = blocks; b && !(b->ptr == ptr && b->allocated); b = b->all)
		;
	CHECK(b, "freeing an unknown tensor");
	if (!b)
		return;
	b->allocated = 0;
	if (b->next && !b->next->allocated)
		merge(b, b->next);
	if (b->prev && !b->prev->allocated)
		merge(b->prev, b);
}

/* Expandable segments ---------------------------------------------------- */

#define MAX_HANDLES 4096

static CUdeviceptr va_base;
static uint64_t va_size, top; /* bytes handed out from the start */
static CUmemGenericAllocationHandle handles[MAX_HANDLES];
static unsigned mapped;
static CUdevice device;

static CUresult grow_one(void)
{
	CUmemAllocationProp prop;
	CUmemAccessDesc access;
	CUdeviceptr at = va_base + (CUdeviceptr)mapped * LARGE_BUFFER;
	CUresult rc;

	if ((uint64_t)(mapped + 1) * LARGE_BUFFER > va_size ||
	    mapped + 1 >= MAX_HANDLES)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = device;
	rc = cuMemCreate(&handles[mapped], LARGE_BUFFER, &prop, 0);
	if (rc != CUDA_SUCCESS)
		return rc;
	watch();
	rc = cuMemMap(at, LARGE_BUFFER, 0, handles[mapped], 0);
	if (rc == CUDA_SUCCESS) {
		memset(&access, 0, sizeof(access));
		access.location = prop.location;
		access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		rc = cuMemSetAccess(at, LARGE_BUFFER, &access, 1);
		if (rc != CUDA_SUCCESS)
			cuMemUnmap(at, LARGE_BUFFER);
	}
	if (rc != CUDA_SUCCESS) {
		cuMemRelease(handles[mapped]);
		return rc;
	}
	mapped++;
	return CUDA_SUCCESS;
}

/* Unmap and release every handle above what the allocations use. */
static void shrink(void)
{
	unsigned keep = (unsigned)(round_up(top, LARGE_BUFFER) / LARGE_BUFFER);

	cuCtxSynchronize();
	while (mapped > keep) {
		mapped--;
		CHECK(cuMemUnmap(va_base + (CUdeviceptr)mapped * LARGE_BUFFER,
		                 LARGE_BUFFER) == CUDA_SUCCESS,
		      "cuMemUnmap");
		CHECK(cuMemRelease(handles[mapped]) == CUDA_SUCCESS,
		      "cuMemRelease");
	}
}

static CUresult expandable_malloc(uint64_t want, CUdeviceptr *ret)
{
	uint64_t size = round_up(want, MIN_BLOCK);
	unsigned before = mapped;
	CUresult rc = CUDA_SUCCESS;

	while ((uint64_t)mapped * LARGE_BUFFER < top + size &&
	       (rc = grow_one()) == CUDA_SUCCESS)
		;
	if (rc != CUDA_SUCCESS) {
		/* What this call mapped goes back before OOM is reported. */
		while (mapped > before) {
			mapped--;
			cuMemUnmap(va_base + (CUdeviceptr)mapped * LARGE_BUFFER,
			           LARGE_BUFFER);
			cuMemRelease(handles[mapped]);
		}
		return rc;
	}
	*ret = va_base + top;
	top += size;
	return CUDA_SUCCESS;
}

/* The workload ----------------------------------------------------------- */

struct alloc_ops {
	CUresult (*malloc)(uint64_t, CUdeviceptr *);
	void (*free_all)(CUdeviceptr *, unsigned);
	unsigned (*footprint)(void); /* segments or handles */
};

static void torch_free_all(CUdeviceptr *p, unsigned n)
{
	while (n)
		torch_free(p[--n]);
}

static void expandable_free_all(CUdeviceptr *p, unsigned n)
{
	(void)p;
	(void)n;
	top = 0; /* the tensors were a stack: all gone */
}

static unsigned torch_footprint(void)
{
	return segments;
}

static unsigned expandable_footprint(void)
{
	return mapped;
}

/* One training step's tensors: the same sizes every step, about a third
 * of the device (activations small and large, a few big weights). */
static unsigned step_sizes(uint64_t *sizes)
{
	uint64_t budget = total_mem / 3, sum = 0;
	unsigned n = 0;
	unsigned seed = 42;

	while (n < 512) {
		unsigned r = (unsigned)rand_r(&seed);
		uint64_t s = r % 4   ? 1024 + r % SMALL_SIZE
		             : r % 8 ? 3 * MiB + r % (6 * MiB)
		                     : 24 * MiB + r % (16 * MiB);

		if (sum + round_up(s, 2 * MiB) > budget)
			break;
		sizes[n++] = s;
		sum += round_up(s, 2 * MiB);
	}
	return n;
}

static int run(const struct alloc_ops *ops, int expandable)
{
	static CUdeviceptr held[1 << 14];
	uint64_t sizes[512];
	unsigned n = step_sizes(sizes), nheld = 0, after_first = 0;
	uint64_t big;
	CUresult rc = CUDA_SUCCESS;

	/* 1. A training loop that fits: the cache is reused. */
	for (int step = 0; step < 10; step++) {
		for (unsigned i = 0; i < n; i++) {
			rc = ops->malloc(sizes[i], &held[i]);
			CHECK(rc == CUDA_SUCCESS, "step %d tensor %u: %d", step,
			      i, rc);
			if (rc != CUDA_SUCCESS)
				return 1;
		}
		ops->free_all(held, n);
		if (step == 0)
			after_first = ops->footprint();
	}
	CHECK(ops->footprint() == after_first,
	      "cache not reused: %u segments after step 1, %u after 10",
	      after_first, ops->footprint());
	CHECK(!exact_driver || info_used() == driver_holds(),
	      "cuMemGetInfo says %llu used, the driver holds %llu",
	      (unsigned long long)info_used(),
	      (unsigned long long)driver_holds());
	printf("loop ok %u tensors, %u segments\n", n, after_first);

	/* 2. One tensor of 7/8 of the device: fits only once the cache is
	 * given back (the caching allocator's retry; expandable segments
	 * shrink first, as emptying the cache does). */
	if (expandable)
		shrink();
	big = total_mem / 8 * 7;
	CHECK(expandable ||
	          info_used() + round_up(big, ROUND_LARGE) > total_mem,
	      "the cache (%llu) leaves room for %llu: no retry to test",
	      (unsigned long long)info_used(), (unsigned long long)big);
	rc = ops->malloc(big, &held[0]);
	CHECK(rc == CUDA_SUCCESS, "7/8 of the device after the loop: %d", rc);
	CHECK(expandable || retries == 1, "%u retries", retries);
	printf("big %s retries %u\n", rc == CUDA_SUCCESS ? "ok" : "fail",
	       retries);
	if (rc == CUDA_SUCCESS)
		ops->free_all(held, 1);
	if (expandable)
		shrink();

	/* 3. More than there is: 24 MiB tensors until out of memory. */
	while (nheld < sizeof(held) / sizeof(held[0]) &&
	       (rc = ops->malloc(24 * MiB, &held[nheld])) == CUDA_SUCCESS)
		nheld++;
	CHECK(rc == CUDA_ERROR_OUT_OF_MEMORY, "overflow ended with %d", rc);
	/* Most of the memory was usable before the refusal. */
	CHECK((uint64_t)(nheld + 2) * 24 * MiB + 20 * MiB >= total_mem,
	      "only %u tensors of 24 MiB in %llu", nheld,
	      (unsigned long long)total_mem);
	CHECK(!exact_driver || info_used() == driver_holds(),
	      "after OOM: told %llu, holds %llu",
	      (unsigned long long)info_used(),
	      (unsigned long long)driver_holds());
	printf("overflow oom after %u tensors\n", nheld);

	/* 4. The program keeps running: free everything, empty the cache. */
	ops->free_all(held, nheld);
	if (expandable)
		shrink();
	else
		release_cached();
	CHECK((!exact_driver || driver_holds() == 0) && info_used() == 0,
	      "after emptying the cache the driver holds %llu, told %llu",
	      (unsigned long long)driver_holds(),
	      (unsigned long long)info_used());
	printf("most held %llu of %llu\n", (unsigned long long)most_held,
	       (unsigned long long)total_mem);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	const char *want = getenv("CNL_TEST_QUOTA");
	static const struct alloc_ops caching = {torch_malloc, torch_free_all,
	                                         torch_footprint};
	static const struct alloc_ops expand = {
	    expandable_malloc, expandable_free_all, expandable_footprint};
	CUcontext ctx;
	size_t f, t, dev_total;

	if (strcmp(mode, "caching") != 0 && strcmp(mode, "expandable") != 0) {
		fprintf(stderr, "usage: fw_torch caching|expandable\n");
		return 2;
	}
	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) ||
	    cuDevicePrimaryCtxRetain(&ctx, device) || cuCtxSetCurrent(ctx)) {
		fprintf(stderr, "fw_torch: no CUDA context\n");
		return 1;
	}
	/* What PyTorch asks first: the device's memory. */
	CHECK(cuMemGetInfo(&f, &t) == CUDA_SUCCESS, "cuMemGetInfo");
	CHECK(cuDeviceTotalMem(&dev_total, device) == CUDA_SUCCESS &&
	          dev_total == t,
	      "cuDeviceTotalMem %zu, cuMemGetInfo total %zu", dev_total, t);
	CHECK(!want || t == strtoull(want, NULL, 0), "total %zu, want %s", t,
	      want);
	total_mem = t;
	driver_init();
	printf("total %zu free %zu\n", t, f);
	if (strcmp(mode, "caching") == 0)
		return run(&caching, 0);

	{
		CUmemAllocationProp prop;
		size_t gran = 0;
		uint64_t handles_max;

		memset(&prop, 0, sizeof(prop));
		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop.location.id = device;
		CHECK(cuMemGetAllocationGranularity(
		          &gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
		              CUDA_SUCCESS &&
		          gran && LARGE_BUFFER % gran == 0,
		      "granularity %zu", gran);
		handles_max = round_up(t + t / 8, LARGE_BUFFER) / LARGE_BUFFER;
		va_size = handles_max * LARGE_BUFFER;
		CHECK(cuMemAddressReserve(&va_base, va_size, 0, 0, 0) ==
		          CUDA_SUCCESS,
		      "cuMemAddressReserve of %llu",
		      (unsigned long long)va_size);
		if (failures)
			return 1;
	}
	{
		int rc = run(&expand, 1);

		CHECK(cuMemAddressFree(va_base, va_size) == CUDA_SUCCESS,
		      "cuMemAddressFree");
		return rc || failures ? 1 : 0;
	}
}
