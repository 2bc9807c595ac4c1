/*
 * fake_nvml.c - a fake libnvidia-ml.so.1 for the fake GPU of fake_gpu.h:
 * one device whose memory is CNL_FAKE_MEM bytes, used by the processes
 * registered in the shared fake GPU state (each one's device memory as the
 * fake driver counts it), which the process lists report.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shim/cuda-abi.h"
#include "fake_gpu.h"

#define API __attribute__((visibility("default")))

/* The entry points implement an ABI that cuda.h and nvml.h declare. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"

static struct fake_gpu *gpu;
static int device_dummy;

static struct fake_gpu *state(void)
{
	const char *path = getenv("CNL_FAKE_GPU");
	int fd;

	if (gpu)
		return gpu;
	if (!path || (fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
		return NULL;
	gpu =
	    mmap(NULL, sizeof(*gpu), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (gpu == MAP_FAILED)
		gpu = NULL;
	return gpu;
}

static unsigned long long capacity(void)
{
	const char *mem = getenv("CNL_FAKE_MEM");

	return mem ? strtoull(mem, NULL, 0) : FAKE_DEFAULT_MEM;
}

API nvmlReturn_t nvmlInit_v2(void)
{
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlShutdown(void)
{
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
	*n = 1;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
	if (i != 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = (nvmlDevice_t)&device_dummy;
	return NVML_SUCCESS;
}

/* Live registered processes, as (pid, used) pairs. */
static unsigned procs(unsigned *pids, unsigned long long *used, unsigned cap)
{
	struct fake_gpu *g = state();
	unsigned n = 0;

	if (!g)
		return 0;
	for (int i = 0; i < FAKE_PROCS; i++) {
		int32_t p = atomic_load(&g->procs[i].pid);

		if (!p || (kill(p, 0) < 0 && errno == ESRCH))
			continue;
		if (n < cap) {
			pids[n] = (unsigned)p;
			used[n] = atomic_load(&g->procs[i].used);
		}
		n++;
	}
	return n;
}

static unsigned long long used_total(void)
{
	unsigned pids[FAKE_PROCS];
	unsigned long long used[FAKE_PROCS], sum = 0;
	unsigned n = procs(pids, used, FAKE_PROCS);

	for (unsigned i = 0; i < n && i < FAKE_PROCS; i++)
		sum += used[i];
	return sum;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	if (!m)
		return NVML_ERROR_INVALID_ARGUMENT;
	m->total = capacity();
	m->used = used_total();
	m->free = m->total - m->used;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
	if (!m)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (m->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	m->total = capacity();
	m->reserved = 5ULL << 20;
	m->used = used_total();
	m->free = m->total - m->used - m->reserved;
	return NVML_SUCCESS;
}

static nvmlReturn_t list(unsigned int *count, void *infos, size_t size)
{
	unsigned pids[FAKE_PROCS];
	unsigned long long used[FAKE_PROCS];
	unsigned n = procs(pids, used, FAKE_PROCS);

	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (n > *count || (n && !infos)) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	for (unsigned i = 0; i < n; i++) {
		nvmlProcessInfo_t p = {.pid = pids[i],
		                       .usedGpuMemory = used[i]};
		memcpy((char *)infos + i * size, &p, size);
	}
	*count = n;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(
    nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_v1_t *infos)
{
	return list(count, infos, sizeof(*infos));
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(
    nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos)
{
	return list(count, infos, sizeof(*infos));
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos)
{
	return list(count, infos, sizeof(*infos));
}

API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(
    nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos)
{
	*count = 0;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(
    nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos)
{
	*count = 0;
	return NVML_SUCCESS;
}
