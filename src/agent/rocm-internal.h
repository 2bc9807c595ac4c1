/*
 * rocm-internal.h - the agent's ROCm SMI provider (gpu_rocm.c), behind
 * gpu.c's provider interface: "rocm" or "rocm:/path/librocm_smi64.so.N".
 */
#ifndef CNL_AGENT_ROCM_INTERNAL_H
#define CNL_AGENT_ROCM_INTERNAL_H

#include "agent/gpu.h"

struct cnl_rocm;

/* How a device name maps to a catalog type (gpu.c's
 * cnl_gpus_type_from_name, passed in: gpu.c calls this file, not back). */
typedef int (*cnl_rocm_type_fn)(const struct cnl_catalog *cat, const char *name,
                                uint64_t mem_mib);

/*
 * cnl_rocm_open - load ROCm SMI from @lib (NULL: the usual names), list
 * the node's AMD GPUs into @dev (at most @max) as catalog types of @cat,
 * named by @type_of.
 * Returns their number, or -EIO (no library, a missing entry point,
 * rsmi_init failed), -CNL_EGPUTYPE (a GPU matching no catalog type) or
 * -CNL_ECONFIG (mixed types on one node), with the reason in @err.
 */
int cnl_rocm_open(const char *lib, const struct cnl_catalog *cat,
                  cnl_rocm_type_fn type_of, struct cnl_gpu_dev *dev, int max,
                  struct cnl_rocm **ret, char *err, size_t errlen);
/* cnl_rocm_refresh - each GPU's health again (its memory query answers). */
void cnl_rocm_refresh(struct cnl_rocm *r, struct cnl_gpu_dev *dev, int n);
void cnl_rocm_close(struct cnl_rocm *r);
/* cnl_rocm_telemetry - GPU @index's busy percents, VRAM use, edge
 * temperature and average power into @t, each field the library answers
 * (the others left as they are; the SM clock is never read). */
void cnl_rocm_telemetry(struct cnl_rocm *r, int index,
                        struct cnl_gpu_telemetry *t);

#endif /* CNL_AGENT_ROCM_INTERNAL_H */
