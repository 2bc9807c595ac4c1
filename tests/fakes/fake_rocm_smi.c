/*
 * fake_rocm_smi.c - a fake librocm_smi64.so.1 (ROCm SMI, the SONAME of
 * Debian's librocm-smi64-1) for the agent's rocm provider tests: a node of
 * AMD GPUs described by the environment, read at rsmi_init:
 *
 *   FAKE_RSMI_GPUS      number of GPUs (default 0)
 *   FAKE_RSMI_NAME      device name (default "AMD Instinct MI300X")
 *   FAKE_RSMI_SUBSYS    board (subsystem) name; unset: not supported
 *   FAKE_RSMI_MEM_MIB   VRAM per GPU (default 196592, an MI300X)
 *   FAKE_RSMI_LOST      index of a GPU whose memory query fails
 *   FAKE_RSMI_NO_DRIVER rsmi_init fails (no amdgpu driver)
 *
 * As strict as the real library where the provider depends on it: every
 * query before rsmi_init is RSMI_STATUS_INIT_ERROR; a device index out of
 * range or a NULL pointer is RSMI_STATUS_INVALID_ARGS; a name buffer too
 * short is RSMI_STATUS_INSUFFICIENT_SIZE; rsmi_init and rsmi_shut_down
 * count references.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rocm_smi/rocm_smi.h>

#define API __attribute__((visibility("default")))

static int refs;
static uint32_t ngpus;
static int lost = -1;

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);

	return v ? v : dflt;
}

API rsmi_status_t rsmi_init(uint64_t flags)
{
	if (getenv("FAKE_RSMI_NO_DRIVER"))
		return RSMI_STATUS_INIT_ERROR;
	if (refs++ == 0) {
		ngpus =
		    (uint32_t)strtoul(env_or("FAKE_RSMI_GPUS", "0"), NULL, 10);
		lost = (int)strtol(env_or("FAKE_RSMI_LOST", "-1"), NULL, 10);
	}
	return RSMI_STATUS_SUCCESS;
}

API rsmi_status_t rsmi_shut_down(void)
{
	if (refs == 0)
		return RSMI_STATUS_INIT_ERROR;
	refs--;
	return RSMI_STATUS_SUCCESS;
}

static rsmi_status_t check(uint32_t dv, const void *out)
{
	if (refs == 0)
		return RSMI_STATUS_INIT_ERROR;
	if (dv >= ngpus || !out)
		return RSMI_STATUS_INVALID_ARGS;
	return RSMI_STATUS_SUCCESS;
}

API rsmi_status_t rsmi_num_monitor_devices(uint32_t *n)
{
	if (refs == 0)
		return RSMI_STATUS_INIT_ERROR;
	if (!n)
		return RSMI_STATUS_INVALID_ARGS;
	*n = ngpus;
	return RSMI_STATUS_SUCCESS;
}

static rsmi_status_t copy(const char *v, char *out, size_t len)
{
	if (len == 0 || strlen(v) >= len)
		return RSMI_STATUS_INSUFFICIENT_SIZE;
	memcpy(out, v, strlen(v) + 1);
	return RSMI_STATUS_SUCCESS;
}

API rsmi_status_t rsmi_dev_name_get(uint32_t dv, char *name, size_t len)
{
	rsmi_status_t s = check(dv, name);

	return s ? s
	         : copy(env_or("FAKE_RSMI_NAME", "AMD Instinct MI300X"), name,
	                len);
}

API rsmi_status_t rsmi_dev_subsystem_name_get(uint32_t dv, char *name,
                                              size_t len)
{
	rsmi_status_t s = check(dv, name);

	if (s)
		return s;
	if (!getenv("FAKE_RSMI_SUBSYS"))
		return RSMI_STATUS_NOT_SUPPORTED;
	return copy(getenv("FAKE_RSMI_SUBSYS"), name, len);
}

API rsmi_status_t rsmi_dev_memory_total_get(uint32_t dv,
                                            rsmi_memory_type_t type,
                                            uint64_t *total)
{
	rsmi_status_t s = check(dv, total);

	if (s)
		return s;
	if (type != RSMI_MEM_TYPE_VRAM && type != RSMI_MEM_TYPE_VIS_VRAM &&
	    type != RSMI_MEM_TYPE_GTT)
		return RSMI_STATUS_INVALID_ARGS;
	if ((int)dv == lost)
		return RSMI_STATUS_UNEXPECTED_DATA;
	*total = strtoull(env_or("FAKE_RSMI_MEM_MIB", "196592"), NULL, 10)
	         << 20;
	return RSMI_STATUS_SUCCESS;
}

API rsmi_status_t rsmi_dev_unique_id_get(uint32_t dv, uint64_t *id)
{
	rsmi_status_t s = check(dv, id);

	if (s)
		return s;
	*id = 0x1a2b3c4d00000000ULL + dv;
	return RSMI_STATUS_SUCCESS;
}

/* Domain 0, bus 0xc0 + dv: no such device in /sys, so no render node. */
API rsmi_status_t rsmi_dev_pci_id_get(uint32_t dv, uint64_t *bdf)
{
	rsmi_status_t s = check(dv, bdf);

	if (s)
		return s;
	*bdf = (uint64_t)(0xc0 + dv) << 8;
	return RSMI_STATUS_SUCCESS;
}
