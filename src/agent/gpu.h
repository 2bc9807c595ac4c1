/*
 * gpu.h - the node agent's GPU providers behind one interface.
 *
 *   "fake:2xH100-80GB-SXM,1xA100-40GB"  a pool described in config, with
 *                                        MIG instances emulated, so the
 *                                        platform runs on any machine;
 *   "nvml" or "nvml:/path/libnvidia-ml.so.1"
 *                                        the real GPUs, through NVML opened
 *                                        with dlopen at run time (the agent
 *                                        does not link against it);
 *   "rocm" or "rocm:/path/librocm_smi64.so.1"
 *                                        AMD GPUs (MI300X, MI250X, MI250)
 *                                        through ROCm SMI, also opened with
 *                                        dlopen (gpu_rocm.c).
 *
 * A provider lists the node's GPUs (index, UUID, catalog type, memory,
 * health) and creates and destroys MIG instances as the allocator decides.
 * All GPUs of a node must be of one catalog type (the allocator models a
 * node as n GPUs of one type); the provider refuses a mixed node.
 */
#ifndef CNL_AGENT_GPU_H
#define CNL_AGENT_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/catalog.h"

#define CNL_GPU_MAX      16
#define CNL_GPU_UUID_MAX 96

struct cnl_gpu_dev {
	int index;
	char uuid[CNL_GPU_UUID_MAX];
	char type[CNL_NAME_MAX]; /* catalog name, e.g. "H100-80GB-SXM" */
	/* The driver's name ("NVIDIA H100 80GB HBM3"); the catalog name for
	 * a fake pool's GPU or where the driver gave none. */
	char model[96];
	uint64_t mem_mib;
	bool healthy;
	/* AMD: the GPU's DRM render node ("/dev/dri/renderD128"), which a
	 * container needs beside /dev/kfd; "" for NVIDIA and fake GPUs. */
	char node[40];
};

struct cnl_gpus;

/*
 * cnl_gpus_open - the provider @spec names, over @cat (which must outlive
 * it).  Returns 0, or -CNL_ECONFIG / -CNL_EGPUTYPE / -EIO with the reason
 * in @err.
 */
int cnl_gpus_open(const char *spec, const struct cnl_catalog *cat,
                  struct cnl_gpus **ret, char *err, size_t errlen);
void cnl_gpus_close(struct cnl_gpus *g);

/* The provider's name: "fake", "nvml", "rocm" or "none". */
const char *cnl_gpus_kind(const struct cnl_gpus *g);

/* cnl_gpus_list - the GPUs, in index order; their number.  nvml reads
 * each GPU's health again. */
int cnl_gpus_list(struct cnl_gpus *g, const struct cnl_gpu_dev **ret);

/*
 * cnl_gpus_mig_create - create a MIG instance of @profile (catalog name)
 * at @start on GPU @index, its UUID into @uuid (CNL_GPU_UUID_MAX).
 * -CNL_ENOMIG when the GPU has no MIG, -CNL_EDUP when an instance of
 * @profile already sits at @start (its UUID is still written to @uuid:
 * a host instance is shared by several block slices), -EIO from the
 * driver.  With nvml also
 * -CNL_EPROFILE (no NVML profile matches), -EINVAL (@start is not one of
 * the profile's placements), -CNL_ENOSPACE (overlaps another instance),
 * -EBUSY (MIG mode is off and processes run on the GPU), -EAGAIN (MIG
 * mode waits for a GPU reset).  See gpu.c.
 */
int cnl_gpus_mig_create(struct cnl_gpus *g, int index, const char *profile,
                        int start, char *uuid);

/* cnl_gpus_mig_destroy - destroy the instance @uuid; -CNL_ENOTFOUND. */
int cnl_gpus_mig_destroy(struct cnl_gpus *g, const char *uuid);

/* cnl_gpus_mig_count - live MIG instances on GPU @index. */
int cnl_gpus_mig_count(struct cnl_gpus *g, int index);

/*
 * cnl_gpus_type_from_name - the catalog type of an NVML device name such
 * as "NVIDIA H100 80GB HBM3" (SXM) or "NVIDIA H100 PCIe", or of a ROCm SMI
 * name such as "AMD Instinct MI300X", or -1.
 */
int cnl_gpus_type_from_name(const struct cnl_catalog *cat, const char *name,
                            uint64_t mem_mib);

/*
 * cnl_gpus_vendor - the vendor of the node's GPUs as the catalog gives it
 * ("nvidia", "amd", a site's own), or "" without GPUs.  An "amd" node runs
 * HIP workloads: the agent preloads libcnlab-hip.so and names the GPUs in
 * ROCR_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES (supervisor.c).
 */
const char *cnl_gpus_vendor(const struct cnl_gpus *g);

/*
 * What a GPU reports now, for the agent's /metrics (the DCGM exporter's
 * fields of the same meaning).  Each field is -1 where the provider cannot
 * give it: the fake pool knows only its memory size, ROCm SMI gives all
 * but the SM clock (gpu_rocm.c), and the optional calls may be missing or
 * fail.
 */
struct cnl_gpu_telemetry {
	int64_t util_pct;     /* nvmlDeviceGetUtilizationRates .gpu */
	int64_t mem_util_pct; /* .memory: time memory was read or written */
	int64_t fb_total_mib, fb_used_mib, fb_free_mib; /* GetMemoryInfo */
	int64_t temp_c;       /* nvmlDeviceGetTemperature (GPU sensor) */
	int64_t power_mw;     /* nvmlDeviceGetPowerUsage */
	int64_t sm_clock_mhz; /* nvmlDeviceGetClockInfo (SM) */
};

/* cnl_gpus_telemetry - GPU @index's telemetry into @ret; 0, or -EINVAL
 * for an index out of range.  Read from the driver at each call. */
int cnl_gpus_telemetry(struct cnl_gpus *g, int index,
                       struct cnl_gpu_telemetry *ret);

/*
 * One MIG device (a GPU instance's compute instance) as the driver reports
 * it, for the agent's per-instance DCGM series.  gi_id and ci_id are the
 * driver's instance IDs (nvmlDeviceGetGpuInstanceId / ...ComputeInstanceId),
 * not slots; profile is the catalog name of the GPU instance's profile
 * ("2g.20gb"; "" where none matches).  Memory comes from
 * nvmlDeviceGetMemoryInfo on the MIG device's handle; util_pct is -1
 * where NVML has no utilization for a MIG device (it has none today).
 */
struct cnl_gpu_mig_telemetry {
	char uuid[CNL_GPU_UUID_MAX]; /* "MIG-..." */
	char profile[CNL_NAME_MAX];
	int gi_id, ci_id;
	int64_t fb_total_mib, fb_used_mib, fb_free_mib;
	int64_t util_pct;
};

/*
 * cnl_gpus_mig_telemetry - the MIG devices of GPU @index, at most @cap,
 * into @ret; their number.  0 for a GPU not in MIG mode and for providers
 * other than nvml (the fake pool and ROCm have no driver instances).
 */
int cnl_gpus_mig_telemetry(struct cnl_gpus *g, int index,
                           struct cnl_gpu_mig_telemetry *ret, int cap);

/* Device memory NVML could not tell for a process (NVML_VALUE_NOT_AVAILABLE,
 * e.g. an unprivileged caller in MIG mode). */
#define CNL_GPU_USED_UNKNOWN UINT64_MAX

/* One process on one physical GPU, as the driver sees it. */
struct cnl_gpu_proc {
	int pid;       /* host pid */
	int gpu;       /* physical GPU index */
	uint64_t used; /* device memory it holds there, or
	                * CNL_GPU_USED_UNKNOWN */
};

/*
 * cnl_gpus_procs - the compute processes on the node's GPUs and the device
 * memory each holds, read from the driver now: per GPU
 * nvmlDeviceGetComputeRunningProcesses_v3, and on a GPU in MIG mode also
 * each MIG device's list (a process's memory on a GPU is the larger of what
 * the GPU's list and the sum of its MIG devices' lists say, so a driver
 * that reports a MIG process in both is not counted twice).  One entry per
 * (pid, GPU), up to @max into @ret; returns how many there are (more than
 * @max: the rest left out), -EOPNOTSUPP for a provider without NVML or a
 * library without the call, -EIO when the driver fails.  Safe on its own
 * handle from one thread at a time.
 */
int cnl_gpus_procs(struct cnl_gpus *g, struct cnl_gpu_proc *ret, int max);

#endif /* CNL_AGENT_GPU_H */
