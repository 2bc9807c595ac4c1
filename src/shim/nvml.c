/*
 * nvml.c - NVML as a slice sees it: memory information reports the quota
 * (as cuMemGetInfo does), and process lists show only the slice's own
 * processes, matched by either PID the region records for them (the PID in
 * the slice's namespace and the outermost one, which is what NVML reports).
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "shim/shim-internal.h"

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	cnl_real_nvmlDeviceGetMemoryInfo_t real =
	    CNL_REAL(nvmlDeviceGetMemoryInfo);
	uint64_t f, t, u;
	nvmlReturn_t rc;

	if (!real)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	rc = real(device, memory);
	if (rc != NVML_SUCCESS || !memory)
		return rc;
	f = memory->free;
	t = memory->total;
	u = memory->used;
	cnl_meminfo_apply(&f, &t, &u);
	memory->free = f;
	memory->total = t;
	memory->used = u;
	return rc;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                        nvmlMemory_v2_t *memory)
{
	cnl_real_nvmlDeviceGetMemoryInfo_v2_t real =
	    CNL_REAL(nvmlDeviceGetMemoryInfo_v2);
	uint64_t f, t, u;
	nvmlReturn_t rc;

	if (!real)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	rc = real(device, memory);
	if (rc != NVML_SUCCESS || !memory)
		return rc;
	f = memory->free;
	t = memory->total;
	u = memory->used;
	cnl_meminfo_apply(&f, &t, &u);
	if (t != memory->total)
		memory->reserved = 0; /* the quota has none of the driver's */
	memory->free = f;
	memory->total = t;
	memory->used = u;
	return rc;
}

static int in_slice(unsigned pid)
{
	struct cnl_region *r = cnl_shim.r;

	for (int i = 0; i < CNL_REGION_PROCS; i++) {
		struct cnl_region_proc *p = &r->procs[i];

		if (atomic_load(&p->state) == CNL_PROC_LIVE &&
		    ((unsigned)atomic_load(&p->pid) == pid ||
		     (unsigned)atomic_load(&p->host_pid) == pid))
			return 1;
	}
	return 0;
}

typedef nvmlReturn_t (*list_fn)(nvmlDevice_t, unsigned int *, void *);

/*
 * Ask the driver for the whole list into our own buffer, keep the slice's
 * entries, and answer as NVML would for the filtered list (including
 * NVML_ERROR_INSUFFICIENT_SIZE with the count needed).
 */
static nvmlReturn_t filtered(list_fn real, nvmlDevice_t device,
                             unsigned int *infoCount, void *infos, size_t size)
{
	unsigned int cap = 64, n, kept = 0;
	unsigned char *buf = NULL;
	nvmlReturn_t rc;

	if (!real)
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	cnl_shim_init();
	if (cnl_shim.mode != CNL_MODE_ON || !infoCount)
		return real(device, infoCount, infos);
	for (;;) {
		unsigned char *nb = realloc(buf, (size_t)cap * size);

		if (!nb) {
			free(buf);
			return real(device, infoCount, infos);
		}
		buf = nb;
		n = cap;
		rc = real(device, &n, buf);
		if (rc != NVML_ERROR_INSUFFICIENT_SIZE || n <= cap)
			break;
		cap = n + 16;
	}
	if (rc != NVML_SUCCESS) {
		free(buf);
		return rc;
	}
	for (unsigned i = 0; i < n; i++) {
		unsigned pid;

		memcpy(&pid, buf + (size_t)i * size, sizeof(pid));
		if (!in_slice(pid))
			continue;
		if (kept < *infoCount && infos)
			memcpy((unsigned char *)infos + (size_t)kept * size,
			       buf + (size_t)i * size, size);
		kept++;
	}
	free(buf);
	rc = kept > *infoCount || (kept && !infos)
	         ? NVML_ERROR_INSUFFICIENT_SIZE
	         : NVML_SUCCESS;
	*infoCount = kept;
	return rc;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                  unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos)
{
	return filtered((list_fn)CNL_REAL(nvmlDeviceGetComputeRunningProcesses),
	                device, infoCount, infos, sizeof(*infos));
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                     unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
	return filtered(
	    (list_fn)CNL_REAL(nvmlDeviceGetComputeRunningProcesses_v2), device,
	    infoCount, infos, sizeof(*infos));
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                     unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
	return filtered(
	    (list_fn)CNL_REAL(nvmlDeviceGetComputeRunningProcesses_v3), device,
	    infoCount, infos, sizeof(*infos));
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
                                                      unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos)
{
	return filtered(
	    (list_fn)CNL_REAL(nvmlDeviceGetGraphicsRunningProcesses_v3), device,
	    infoCount, infos, sizeof(*infos));
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(
    nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos)
{
	return filtered(
	    (list_fn)CNL_REAL(nvmlDeviceGetMPSComputeRunningProcesses_v3),
	    device, infoCount, infos, sizeof(*infos));
}
