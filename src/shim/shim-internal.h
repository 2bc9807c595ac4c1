/*
 * shim-internal.h - state shared by the files of libcnlab-cuda.so.
 *
 * Everything here has hidden visibility (the library is built with
 * -fvisibility=hidden and a version script): the only exported symbols are
 * the CUDA and NVML entry points of hooks.def and dlsym.
 *
 * hooks.def is expanded four times below: the hook enum, the table of real
 * function pointers (filled once, at initialisation), the typedef of each
 * real function, and the prototype of each wrapper (which is the exported
 * CUDA name itself).
 */
#ifndef CNL_SHIM_INTERNAL_H
#define CNL_SHIM_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "shim/cuda-abi.h"
#include "shim/region.h"

#define CNL_EXPORT __attribute__((visibility("default")))

enum cnl_hook_lib {
	CNL_LIB_CU = 0,
	CNL_LIB_NVML = 1,
};

enum cnl_hook_id {
#define CNL_HOOK(lib, ret, name, base, ver, ptds, params, args) CNL_HOOK_##name,
#include "shim/hooks.def"
#undef CNL_HOOK
	CNL_HOOK_COUNT
};

/* Row of the generated hook table. */
struct cnl_hook_info {
	const char *name;
	const char *base;
	int version;
	int ptds;
	enum cnl_hook_lib lib;
};

extern const struct cnl_hook_info cnl_hooks[CNL_HOOK_COUNT];
/* Real entry points, resolved by cnl_shim_init (NULL where absent). */
extern void *_Atomic cnl_real[CNL_HOOK_COUNT];

#define CNL_HOOK(lib, ret, name, base, ver, ptds, params, args) \
	typedef ret(*cnl_real_##name##_t) params;               \
	CNL_EXPORT ret name params;
#include "shim/hooks.def"
#undef CNL_HOOK

/* libc's own dlsym (the shim's interposes it). */
typedef void *(*dlsym_fn)(void *, const char *);
dlsym_fn cnl_real_dlsym(void);

/* The real function of hook id (resolved on first use), or NULL. */
void *cnl_real_get(int id);
#define CNL_REAL(name) ((cnl_real_##name##_t)cnl_real_get(CNL_HOOK_##name))
/* Any driver or NVML function, hooked or not, from the real library. */
void *cnl_real_sym(enum cnl_hook_lib lib, const char *name);

/* Look a hook up by exported name; -1 if it is not hooked. */
int cnl_hook_find(const char *name);

/*
 * Process state: the region this process belongs to and its slot.
 * mode is CNL_MODE_PASS (no region configured: report real values, enforce
 * nothing), CNL_MODE_ON (enforcing) or CNL_MODE_BROKEN (a region was
 * configured but could not be used: fail closed, refuse allocations).
 */
enum cnl_mode {
	CNL_MODE_PASS = 0,
	CNL_MODE_ON = 1,
	CNL_MODE_BROKEN = 2,
};

struct cnl_shim {
	enum cnl_mode mode;
	struct cnl_region_handle h;
	struct cnl_region *r; /* h.r, or NULL */
	int slot;
	int board; /* descriptor of the GPU board (cnl_board_open); -1: none */
	const char *path; /* the region's path (pinned or CNLAB_REGION) */
	_Atomic int ctx_charged;
};

extern struct cnl_shim cnl_shim;

/* cnl_shim_region_path - the region this process belongs to: the path
 * the agent pinned in the container's /etc, else CNLAB_REGION (guard.c). */
const char *cnl_shim_region_path(void);

/* cnl_shim_init - resolve real functions and attach; idempotent, cheap. */
void cnl_shim_init(void);
/* cnl_log_once - one line on stderr the first time key is seen. */
void cnl_log_once(int key, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

enum cnl_log_key {
	CNL_LOG_BROKEN = 0,
	CNL_LOG_IPC_DENIED,
	CNL_LOG_OOM,
	CNL_LOG_NO_REAL,
	CNL_LOG_ESCAPE,
	CNL_LOG_PIN,
	CNL_LOG_DLMOPEN,
	CNL_LOG_COUNT
};

/* Allocation table (mem.c): handle -> bytes charged. */
enum cnl_obj_kind {
	CNL_OBJ_PTR = 1,      /* cuMemAlloc*, managed */
	CNL_OBJ_ASYNC,        /* cuMemAlloc*Async: charged through its pool */
	CNL_OBJ_VMM,          /* cuMemCreate handle, aux its mappings */
	CNL_OBJ_ARRAY,        /* cuArray*Create */
	CNL_OBJ_MIPMAP,       /* cuMipmappedArrayCreate */
	CNL_OBJ_MAP,          /* cuMemMap: address -> size, aux the handle */
	CNL_OBJ_VMM_RELEASED, /* released while mapped: aux its mappings */
};
int cnl_objs_put(enum cnl_obj_kind kind, uint64_t key, uint64_t bytes,
                 uint64_t aux);
/* Remove and return bytes (and aux); -ENOENT when unknown. */
int cnl_objs_take(enum cnl_obj_kind kind, uint64_t key, uint64_t *ret_bytes,
                  uint64_t *ret_aux);

/* Charging helpers (mem.c). */
CUresult cnl_charge(uint64_t bytes);
void cnl_uncharge(uint64_t bytes);
void cnl_pools_sync(void);
/* Apply the quota to memory information (used may be NULL). */
void cnl_meminfo_apply(uint64_t *free, uint64_t *total, uint64_t *used);

/* Throttle (throttle.c). */
void cnl_throttle_before(void);
void cnl_throttle_measure_begin(CUstream s, int ptds, void **ret_ctx);
void cnl_throttle_measure_end(void *ctx, CUstream s, int ptds, CUresult rc);
void cnl_throttle_harvest(int wait_all);
int cnl_throttle_active(void);

uint64_t cnl_now_ns(void);

#endif /* CNL_SHIM_INTERNAL_H */
