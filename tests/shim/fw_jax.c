/*
 * fw_jax.c - a program that allocates as JAX (XLA's GPU client and its BFC
 * allocator) does, run unchanged with the shim preloaded over the fake
 * driver.  It knows nothing of the shim: it sizes itself from cuMemGetInfo.
 *
 *   fw_jax WORK_MIB       XLA_PYTHON_CLIENT_PREALLOCATE (default true) and
 *                         XLA_PYTHON_CLIENT_MEM_FRACTION (default 0.75)
 *                         read from the environment, as JAX does.
 *                         Preallocation: one cuMemAlloc of fraction x free
 *                         at start-up (failure is fatal, as in XLA), then
 *                         buffers sub-allocated inside it.  Without it, the
 *                         BFC allocator grows on demand up to the same
 *                         limit: regions starting at 2 MiB, doubling,
 *                         and backing off by 10% when the driver refuses.
 *
 * The work is buffers of 8 MiB (and a few small ones) up to WORK_MIB in
 * all, kept to the end like a model's parameters and activations.  Prints
 * "prealloc BYTES" (when it preallocates), then "ok N" when the work fit
 * or "oom N" when the allocator ran out (RESOURCE_EXHAUSTED in JAX) after
 * N buffers.  Checked throughout: the device memory the driver holds for
 * the process (fw_common.h: the fake's count, or NVML's on a real GPU)
 * never exceeds the total the program was told (CNL_TEST_QUOTA, when set,
 * is that total), and, over the fake, cuMemGetInfo's used is what the
 * driver holds for it plus what was in use when it started (other
 * processes of the slice, which do not change meanwhile).  Exit status 0
 * when every check passed (fitting or not), 1 otherwise, 3 when preallocation
 * failed, 2 for bad usage.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "fw_common.h"

#define ALIGN     256ULL /* the BFC allocator's */
#define BACKPEDAL 0.9
#define REGIONS   256

static uint64_t total_mem;
static uint64_t others; /* in use at start: other processes of the slice */

static uint64_t round_up(uint64_t n, uint64_t unit)
{
	return (n + unit - 1) / unit * unit;
}

static uint64_t info_used(void)
{
	size_t f = 0, t = 0;

	cuMemGetInfo(&f, &t);
	return (uint64_t)(t - f);
}

static void watch(void)
{
	CHECK(driver_holds() <= total_mem, "driver holds %llu of %llu",
	      (unsigned long long)driver_holds(),
	      (unsigned long long)total_mem);
	CHECK(!exact_driver || info_used() == others + driver_holds(),
	      "told %llu used (%llu by others), driver holds %llu",
	      (unsigned long long)info_used(), (unsigned long long)others,
	      (unsigned long long)driver_holds());
}

/*
 * The BFC allocator, reduced to what touches the driver: regions of device
 * memory, each carved from its start (the work never frees, so bins and
 * coalescing would not change what is asked of the driver).
 */
static struct {
	CUdeviceptr base;
	uint64_t size, used;
} regions[REGIONS];
static unsigned nregions;
static uint64_t limit, allocated, next_region = 2 * MiB;

/* Grow by a region large enough for bytes; 0 or CUDA_ERROR_OUT_OF_MEMORY. */
static CUresult extend(uint64_t bytes)
{
	uint64_t available = limit - allocated, size;
	CUdeviceptr p;
	CUresult rc;

	if (bytes > available || nregions == REGIONS)
		return CUDA_ERROR_OUT_OF_MEMORY;
	while (next_region < bytes)
		next_region *= 2;
	size = next_region < available ? next_region : available;
	rc = cuMemAlloc(&p, size);
	/* The driver refused: try 10% less each time, down to what the
	 * request needs. */
	while (rc == CUDA_ERROR_OUT_OF_MEMORY) {
		size = round_up((uint64_t)((double)size * BACKPEDAL), ALIGN);
		if (size < bytes)
			break;
		rc = cuMemAlloc(&p, size);
	}
	if (rc != CUDA_SUCCESS)
		return rc;
	watch();
	regions[nregions].base = p;
	regions[nregions].size = size;
	regions[nregions].used = 0;
	nregions++;
	allocated += size;
	next_region *= 2;
	return CUDA_SUCCESS;
}

static CUresult bfc_alloc(uint64_t want, int grow, CUdeviceptr *ret)
{
	uint64_t size = round_up(want, ALIGN);
	CUresult rc;

	for (int pass = 0; pass < 2; pass++) {
		for (unsigned i = 0; i < nregions; i++) {
			if (regions[i].size - regions[i].used >= size) {
				*ret = regions[i].base + regions[i].used;
				regions[i].used += size;
				return CUDA_SUCCESS;
			}
		}
		if (pass || !grow)
			break;
		if ((rc = extend(size)) != CUDA_SUCCESS)
			return rc;
	}
	return CUDA_ERROR_OUT_OF_MEMORY;
}

static int env_true(const char *name, int dflt)
{
	const char *v = getenv(name);

	if (!v || !*v)
		return dflt;
	return strcmp(v, "false") != 0 && strcmp(v, "0") != 0;
}

int main(int argc, char **argv)
{
	const char *want = getenv("CNL_TEST_QUOTA");
	const char *frac_env = getenv("XLA_PYTHON_CLIENT_MEM_FRACTION");
	int prealloc = env_true("XLA_PYTHON_CLIENT_PREALLOCATE", 1);
	double fraction = frac_env ? strtod(frac_env, NULL) : 0.75;
	uint64_t work, done = 0;
	unsigned n = 0;
	CUcontext ctx;
	CUdevice dev;
	size_t f, t;
	CUresult rc = CUDA_SUCCESS;

	if (argc < 2 || !(work = strtoull(argv[1], NULL, 10) * MiB) ||
	    fraction <= 0 || fraction > 1) {
		fprintf(stderr,
		        "usage: fw_jax WORK_MIB (fraction in (0, 1])\n");
		return 2;
	}
	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
		fprintf(stderr, "fw_jax: no CUDA context\n");
		return 1;
	}
	CHECK(cuMemGetInfo(&f, &t) == CUDA_SUCCESS, "cuMemGetInfo");
	CHECK(!want || t == strtoull(want, NULL, 0), "total %zu, want %s", t,
	      want);
	CHECK(f <= t, "free %zu above total %zu", f, t);
	total_mem = t;
	driver_init();
	others = t - f;
	limit = round_up((uint64_t)((double)f * fraction), ALIGN);
	if (limit > f)
		limit = f;
	if (prealloc) {
		CUdeviceptr p;

		rc = cuMemAlloc(&p, limit);
		if (rc != CUDA_SUCCESS) {
			fprintf(stderr,
			        "fw_jax: preallocating %llu bytes: %d\n",
			        (unsigned long long)limit, rc);
			return 3;
		}
		watch();
		regions[0].base = p;
		regions[0].size = limit;
		nregions = 1;
		allocated = limit;
		printf("prealloc %llu\n", (unsigned long long)limit);
	}
	while (done < work) {
		/* Mostly 8 MiB buffers, a small one every fourth. */
		uint64_t size = n % 4 == 3 ? 4096 + n * 512 : 8 * MiB;
		CUdeviceptr p;

		rc = bfc_alloc(size, !prealloc, &p);
		if (rc != CUDA_SUCCESS)
			break;
		done += size;
		n++;
	}
	CHECK(rc == CUDA_SUCCESS || rc == CUDA_ERROR_OUT_OF_MEMORY,
	      "allocation failed with %d", rc);
	watch();
	printf("%s %u\n", rc == CUDA_SUCCESS ? "ok" : "oom", n);
	return failures ? 1 : 0;
}
