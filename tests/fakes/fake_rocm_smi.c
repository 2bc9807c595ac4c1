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
 * and telemetry (FAKE_RSMI_BUSY, ..., at the end of this file).
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

/*
 * Telemetry, what the agent's /metrics reads (DCGM_FI_DEV_GPU_UTIL and the
 * others of docs/metrics.md), each from the environment at every call, a
 * comma-separated list by device (the last entry repeats), defaults that
 * differ by device:
 *
 *   FAKE_RSMI_BUSY        GPU busy percent (21 + 9 * dv)
 *   FAKE_RSMI_MEM_BUSY    memory busy percent (3 + dv)
 *   FAKE_RSMI_VRAM_USED_MIB  VRAM used (1024 * dv)
 *   FAKE_RSMI_TEMP_MC     edge temperature, millidegrees C (45000 + 1000 * dv)
 *   FAKE_RSMI_POWER_UW    average power, microwatts (550000000 + 1000000 * dv)
 *
 * As the library: INIT_ERROR before rsmi_init, INVALID_ARGS for a bad
 * index, a NULL pointer or an unknown memory type; temperature only of the
 * edge sensor's current value (others NOT_SUPPORTED); power of sensor 0.
 */
static uint64_t per_dev(const char *name, uint32_t dv, uint64_t def)
{
	const char *v = getenv(name);
	uint64_t x = def;

	if (!v || !*v)
		return def;
	for (uint32_t k = 0;; k++) {
		char *end;

		x = strtoull(v, &end, 10);
		if (end == v)
			return def;
		if (k == dv || *end != ',')
			return x;
		v = end + 1;
	}
}

API rsmi_status_t rsmi_dev_busy_percent_get(uint32_t dv, uint32_t *busy)
{
	rsmi_status_t s = check(dv, busy);

	if (s)
		return s;
	*busy = (uint32_t)per_dev("FAKE_RSMI_BUSY", dv, 21 + 9 * dv);
	return RSMI_STATUS_SUCCESS;
}

API rsmi_status_t rsmi_dev_memory_busy_percent_get(uint32_t dv, uint32_t *busy)
{
	rsmi_status_t s = check(dv, busy);

	if (s)
		return s;
	*busy = (uint32_t)per_dev("FAKE_RSMI_MEM_BUSY", dv, 3 + dv);
	return RSMI_STATUS_SUCCESS;
}

API rsmi_status_t rsmi_dev_memory_usage_get(uint32_t dv,
                                            rsmi_memory_type_t type,
                                            uint64_t *used)
{
	rsmi_status_t s = check(dv, used);

	if (s)
		return s;
	if (type != RSMI_MEM_TYPE_VRAM && type != RSMI_MEM_TYPE_VIS_VRAM &&
	    type != RSMI_MEM_TYPE_GTT)
		return RSMI_STATUS_INVALID_ARGS;
	if ((int)dv == lost)
		return RSMI_STATUS_UNEXPECTED_DATA;
	*used = per_dev("FAKE_RSMI_VRAM_USED_MIB", dv, 1024ULL * dv) << 20;
	return RSMI_STATUS_SUCCESS;
}

API rsmi_status_t rsmi_dev_temp_metric_get(uint32_t dv, uint32_t sensor,
                                           rsmi_temperature_metric_t metric,
                                           int64_t *temp)
{
	rsmi_status_t s = check(dv, temp);

	if (s)
		return s;
	if (sensor != RSMI_TEMP_TYPE_EDGE || metric != RSMI_TEMP_CURRENT)
		return RSMI_STATUS_NOT_SUPPORTED;
	*temp = (int64_t)per_dev("FAKE_RSMI_TEMP_MC", dv, 45000 + 1000 * dv);
	return RSMI_STATUS_SUCCESS;
}

API rsmi_status_t rsmi_dev_power_ave_get(uint32_t dv, uint32_t sensor,
                                         uint64_t *power)
{
	rsmi_status_t s = check(dv, power);

	if (s)
		return s;
	if (sensor != 0)
		return RSMI_STATUS_INVALID_ARGS;
	*power =
	    per_dev("FAKE_RSMI_POWER_UW", dv, 550000000ULL + 1000000ULL * dv);
	return RSMI_STATUS_SUCCESS;
}
