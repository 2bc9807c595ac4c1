/*
 * hip-internal.h - state shared by the files of libcnlab-hip.so, the HIP
 * runtime interposer: the same enforcement as libcnlab-cuda.so (one slice
 * region, one VRAM account, one compute token bucket, one IPC registry)
 * for programs that use AMD's HIP runtime, libamdhip64.
 *
 * The structure is the CUDA shim's (docs/shim.md), written for HIP:
 * hooks.def is the one list of hooked entry points, expanded here into the
 * hook enum, one typedef per real function and the wrappers' prototypes
 * (the wrappers are the HIP names themselves, exported through
 * exports.map); real functions resolve lazily through RTLD_NEXT.
 *
 * The HIP headers are C-clean only with the platform chosen: we define
 * __HIP_PLATFORM_AMD__ before including them (hip_ext.h is C++-only, so
 * the one entry point it declares is declared below).
 */
#ifndef CNL_SHIM_HIP_INTERNAL_H
#define CNL_SHIM_HIP_INTERNAL_H

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif

#include <stdatomic.h>
#include <stdint.h>

#include <hip/hip_runtime_api.h>

#include "shim/region.h"

#define CNL_EXPORT __attribute__((visibility("default")))

/* Device memory is handed out in pages of 4 KiB (the HSA runtime's VRAM
 * allocation granule on MI200 and MI300): what a linear allocation really
 * takes, and what the slice is charged. */
#define CNL_HIP_PAGE 4096ULL

enum cnl_hip_hook_id {
#define CNL_HIP_HOOK(ret, name, params, args) CNL_HIP_HOOK_##name,
#include "shim/hip/hooks.def"
#undef CNL_HIP_HOOK
	CNL_HIP_HOOK_COUNT
};

extern const char *const cnl_hip_names[CNL_HIP_HOOK_COUNT];
/* Real entry points, resolved on first use (NULL until then). */
extern void *_Atomic cnl_hip_real[CNL_HIP_HOOK_COUNT];

/* HIP 6.2 added hipGetProcAddress and its status type; older headers
 * have neither (the enum is int-sized either way). */
#if HIP_VERSION < 60200000
typedef int hipDriverProcAddressQueryResult;
hipError_t hipGetProcAddress(const char *symbol, void **pfn, int version,
                             uint64_t flags,
                             hipDriverProcAddressQueryResult *status);
#endif

/* Entry points the C headers of HIP 5.2 do not declare. */
hipError_t hipGraphLaunch_spt(hipGraphExec_t exec, hipStream_t stream);
hipError_t hipExtModuleLaunchKernel(hipFunction_t f, uint32_t gx, uint32_t gy,
                                    uint32_t gz, uint32_t lx, uint32_t ly,
                                    uint32_t lz, size_t shm, hipStream_t stream,
                                    void **params, void **extra,
                                    hipEvent_t start, hipEvent_t stop,
                                    uint32_t flags);

#define CNL_HIP_HOOK(ret, name, params, args)         \
	typedef ret(*cnl_hip_real_##name##_t) params; \
	CNL_EXPORT ret name params;
#include "shim/hip/hooks.def"
#undef CNL_HIP_HOOK

/* libc's own dlsym (ours interposes it). */
typedef void *(*cnl_hip_dlsym_fn)(void *, const char *);
cnl_hip_dlsym_fn cnl_hip_real_dlsym(void);

/* The real function of hook id (resolved on first use), or NULL. */
void *cnl_hip_real_get(int id);
#define CNL_HIP_REAL(name) \
	((cnl_hip_real_##name##_t)cnl_hip_real_get(CNL_HIP_HOOK_##name))
/* Any HIP runtime function, hooked or not, from the real library. */
void *cnl_hip_real_sym(const char *name);
/* Look a hook up by exported name; -1 if it is not hooked. */
int cnl_hip_hook_find(const char *name);

/* Process state: as the CUDA shim's (PASS: no region; ON: enforcing;
 * BROKEN: a region was named but cannot be used: fail closed). */
enum cnl_hip_mode {
	CNL_HIP_PASS = 0,
	CNL_HIP_ON = 1,
	CNL_HIP_BROKEN = 2,
};

struct cnl_hip_shim {
	enum cnl_hip_mode mode;
	struct cnl_region_handle h;
	struct cnl_region *r;
	int slot;
	int board; /* descriptor of the GPU board (cnl_board_open); -1: none */
	const char *path; /* the region's path (pinned or CNLAB_REGION) */
};

extern struct cnl_hip_shim cnl_hip;

/* cnl_hip_init - attach to the region once; idempotent, cheap. */
void cnl_hip_init(void);
/* cnl_hip_region_path - the region this process belongs to: the path the
 * agent pinned in the container's /etc, else CNLAB_REGION (guard.h). */
const char *cnl_hip_region_path(void);

enum cnl_hip_log_key {
	CNL_HIP_LOG_BROKEN = 0,
	CNL_HIP_LOG_IPC_DENIED,
	CNL_HIP_LOG_OOM,
	CNL_HIP_LOG_NO_REAL,
	CNL_HIP_LOG_PIN,
	CNL_HIP_LOG_DLMOPEN,
	CNL_HIP_LOG_COUNT
};
void cnl_hip_log_once(int key, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

uint64_t cnl_hip_now_ns(void);

/* Memory (mem.c). */
void cnl_hip_pools_sync(void);

/* Throttle (throttle.c). */
void cnl_hip_throttle_harvest(int wait_all);

#endif /* CNL_SHIM_HIP_INTERNAL_H */
