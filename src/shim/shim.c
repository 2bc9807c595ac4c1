/*
 * shim.c - the core of libcnlab-cuda.so, which every hook file stands on:
 * the generated table of hooked names, lazy resolution of the real driver
 * and NVML entry points, attachment to the slice's region, logging.  The
 * two lookup doors through which a program can reach the driver without
 * the dynamic linker's symbol binding, dlsym and cuGetProcAddress(_v2),
 * are in interpose.c, the top layer, the only one that knows every hook's
 * wrapper (mem.c, throttle.c, nvml.c).
 *
 * Resolution is per hook and lazy (one atomic load on the hot path), so no
 * wrapper ever waits for a global initialisation: a driver or runtime that
 * calls back into a hooked function while being loaded, or several threads
 * calling CUDA at start-up, cannot deadlock on us.  The region attach is
 * the only once-only step and it never calls the driver.
 *
 * dlsym is interposed because the CUDA runtime dlopens libcuda.so.1 and
 * looks up cuGetProcAddress (and older runtimes, every entry point) by name;
 * for a hooked name that exists we hand out our wrapper.  cuGetProcAddress
 * is wrapped so that whatever variant the driver picks for the requested
 * CUDA version and stream flag (cuMemAlloc -> cuMemAlloc_v2, cuLaunchKernel
 * with the per-thread flag -> cuLaunchKernel_ptsz) is replaced by our
 * wrapper of that same variant; unhooked names come back untouched.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shim/guard.h"
#include "shim/shim-internal.h"

const struct cnl_hook_info cnl_hooks[CNL_HOOK_COUNT] = {
#define CNL_HOOK(lib, ret, name, base, ver, ptds, params, args) \
	[CNL_HOOK_##name] = {#name, #base, ver, ptds, CNL_LIB_##lib},
#include "shim/hooks.def"
#undef CNL_HOOK
};

void *_Atomic cnl_real[CNL_HOOK_COUNT];
struct cnl_shim cnl_shim = {.slot = -1, .h = {.fd = -1}, .board = -1};

/* Marks a hook whose real function was looked for and does not exist. */
#define ABSENT ((void *)1)

static dlsym_fn _Atomic real_dlsym_p;
static void *_Atomic lib_handle[2];
static _Atomic int logged[CNL_LOG_COUNT];

uint64_t cnl_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void cnl_log_once(int key, const char *fmt, ...)
{
	va_list ap;
	char buf[512];
	int n;

	if (key < 0 || key >= CNL_LOG_COUNT || atomic_exchange(&logged[key], 1))
		return;
	n = snprintf(buf, sizeof(buf), "cnlab-cuda[%d]: ", (int)getpid());
	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	n = (int)strnlen(buf, sizeof(buf) - 2);
	buf[n++] = '\n';
	if (write(STDERR_FILENO, buf, (size_t)n) < 0)
		return;
}

/* libc's dlsym: the GLIBC_2.34 version, or the older one. */
dlsym_fn cnl_real_dlsym(void)
{
	dlsym_fn d = atomic_load_explicit(&real_dlsym_p, memory_order_acquire);

	if (d)
		return d;
	d = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (!d)
		d = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	atomic_store_explicit(&real_dlsym_p, d, memory_order_release);
	return d;
}

static void *open_lib(enum cnl_hook_lib lib)
{
	static const char *const names[] = {"libcuda.so.1",
	                                    "libnvidia-ml.so.1"};
	void *h = atomic_load(&lib_handle[lib]);

	if (h)
		return h;
	h = dlopen(names[lib], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	if (!h)
		h = dlopen(names[lib], RTLD_NOW | RTLD_LOCAL);
	if (h)
		atomic_store(&lib_handle[lib], h);
	return h;
}

/* Whether @p is in this library (our own wrapper, never the real one). */
static bool ours(void *p)
{
	Dl_info self, it;

	return dladdr((void *)ours, &self) && dladdr(p, &it) &&
	       self.dli_fbase == it.dli_fbase;
}

/* Resolve one hook: next definition after us, else the library's own. */
static void *resolve(int id)
{
	dlsym_fn d = cnl_real_dlsym();
	void *p = NULL, *h;

	if (d) {
		p = d(RTLD_NEXT, cnl_hooks[id].name);
		if (!p && (h = open_lib(cnl_hooks[id].lib)))
			p = d(h, cnl_hooks[id].name);
	}
	if (!p || ours(p))
		p = ABSENT;
	atomic_store_explicit(&cnl_real[id], p, memory_order_release);
	return p;
}

/* Used through CNL_REAL: one acquire load once resolved. */
void *cnl_real_get(int id)
{
	void *p = atomic_load_explicit(&cnl_real[id], memory_order_acquire);

	if (__builtin_expect(!p, 0))
		p = resolve(id);
	if (p == ABSENT) {
		cnl_log_once(CNL_LOG_NO_REAL, "%s is not in the driver",
		             cnl_hooks[id].name);
		return NULL;
	}
	return p;
}

/* Any driver or NVML function, hooked or not, straight from the library. */
void *cnl_real_sym(enum cnl_hook_lib lib, const char *name)
{
	dlsym_fn d = cnl_real_dlsym();
	void *h = open_lib(lib);

	return d && h ? d(h, name) : NULL;
}

int cnl_hook_find(const char *name)
{
	if (!name || (name[0] != 'c' && name[0] != 'n'))
		return -1;
	for (int i = 0; i < CNL_HOOK_COUNT; i++)
		if (strcmp(cnl_hooks[i].name, name) == 0)
			return i;
	return -1;
}

/* Region attachment ------------------------------------------------------ */

static pthread_once_t attach_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int reattach;

static void detach(void)
{
	pthread_mutex_lock(&attach_lock);
	if (cnl_shim.mode == CNL_MODE_ON && cnl_shim.slot >= 0) {
		cnl_region_detach(&cnl_shim.h, cnl_shim.slot);
		cnl_shim.slot = -1;
		/* Memory freed after this point is the driver's business. */
		cnl_shim.mode = CNL_MODE_PASS;
	}
	pthread_mutex_unlock(&attach_lock);
}

/* The region's path: the pin, else CNLAB_REGION (guard.c). */
static char pinned[CNL_REGION_PATH_MAX * 4];

static const char *region_path(int *ret_broken)
{
	int env_ignored;
	const char *path = cnl_guard_region_path(pinned, sizeof(pinned),
	                                         ret_broken, &env_ignored);

	if (env_ignored)
		cnl_log_once(CNL_LOG_PIN,
		             "CNLAB_REGION ignored: this container's region is "
		             "%s",
		             path);
	return path;
}

const char *cnl_shim_region_path(void)
{
	int broken;

	return cnl_shim.path ? cnl_shim.path : region_path(&broken);
}

static void attach_locked(void)
{
	int broken;
	const char *path = region_path(&broken);
	int rc, slot;

	if (broken) {
		cnl_shim.mode = CNL_MODE_BROKEN;
		cnl_log_once(CNL_LOG_BROKEN,
		             "cannot read the region pinned in %s: allocations "
		             "are refused",
		             cnl_guard_pin_file);
		return;
	}
	cnl_shim.path = path;
	if (!path || !*path) {
		cnl_shim.mode = CNL_MODE_PASS;
		return;
	}
	if (!cnl_shim.r) {
		/* The limits read-only, whoever we run as (region.h). */
		rc = cnl_region_map_ro(path, &cnl_shim.h);
		if (rc < 0) {
			cnl_shim.mode = CNL_MODE_BROKEN;
			cnl_log_once(CNL_LOG_BROKEN,
			             "cannot map region %s (%s): allocations "
			             "are refused",
			             path, strerror(-rc));
			return;
		}
		cnl_shim.r = cnl_shim.h.r;
		/* Never mapped: any slice of the GPU may truncate it. */
		if (cnl_shim.r->board[0]) {
			rc = cnl_board_open(cnl_shim.r->board);
			cnl_shim.board = rc < 0 ? -1 : rc;
		}
	}
	slot = cnl_region_attach(&cnl_shim.h);
	if (slot < 0) {
		cnl_shim.mode = CNL_MODE_BROKEN;
		cnl_log_once(CNL_LOG_BROKEN,
		             "no free process slot in region %s: allocations "
		             "are refused",
		             path);
		return;
	}
	cnl_shim.slot = slot;
	cnl_shim.mode = CNL_MODE_ON;
	atomic_store(&cnl_shim.ctx_charged, 0);
}

/* The descriptor close, closefrom and the like keep open (guard.c). */
static int slot_fd(void)
{
	return cnl_shim.mode == CNL_MODE_ON && cnl_shim.slot >= 0
	           ? cnl_shim.h.fd
	           : -1;
}

/* After fork the child holds no slot lock: it attaches anew when it uses
 * CUDA; what the parent charged stays the parent's. */
static void atfork_child(void)
{
	pthread_mutex_init(&attach_lock, NULL);
	if (cnl_shim.mode == CNL_MODE_ON) {
		cnl_shim.slot = -1;
		atomic_store(&reattach, 1);
	}
}

static void attach_first(void)
{
	cnl_guard_keep_slot_fd(slot_fd);
	pthread_mutex_lock(&attach_lock);
	attach_locked();
	pthread_mutex_unlock(&attach_lock);
	pthread_atfork(NULL, NULL, atfork_child);
	atexit(detach);
}

void cnl_shim_init(void)
{
	pthread_once(&attach_once, attach_first);
	if (__builtin_expect(
	        atomic_load_explicit(&reattach, memory_order_relaxed), 0)) {
		pthread_mutex_lock(&attach_lock);
		if (atomic_exchange(&reattach, 0))
			attach_locked();
		pthread_mutex_unlock(&attach_lock);
	}
}
