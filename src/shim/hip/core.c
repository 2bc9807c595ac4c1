/*
 * core.c - the core of libcnlab-hip.so: the table of hooked names, lazy
 * resolution of the real HIP runtime's entry points, attachment to the
 * slice's region, logging, and dlsym.
 *
 * As in the CUDA shim (src/shim/shim.c), resolution is per hook and lazy
 * (one acquire load on the hot path), so no wrapper waits for a global
 * initialisation; the region attach is the only once-only step and never
 * calls the runtime.
 *
 * dlsym is interposed because frameworks (PyTorch's and TensorFlow's ROCm
 * builds, CuPy, JAX's plugin) dlopen libamdhip64 and look entry points up
 * by name: for a hooked name that exists in the lookup's scope we hand out
 * our wrapper, and RTLD_NEXT is answered relative to the caller's object.
 * The runtime's name: libamdhip64.so.6 (ROCm 6, MI300X), .so.5 (ROCm 5,
 * Debian's package) or the unversioned development link.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
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
#include "shim/hip/hip-internal.h"

const char *const cnl_hip_names[CNL_HIP_HOOK_COUNT] = {
#define CNL_HIP_HOOK(ret, name, params, args) [CNL_HIP_HOOK_##name] = #name,
#include "shim/hip/hooks.def"
#undef CNL_HIP_HOOK
};

static void *const wrappers[CNL_HIP_HOOK_COUNT] = {
#define CNL_HIP_HOOK(ret, name, params, args) \
	[CNL_HIP_HOOK_##name] = (void *)name,
#include "shim/hip/hooks.def"
#undef CNL_HIP_HOOK
};

void *_Atomic cnl_hip_real[CNL_HIP_HOOK_COUNT];
struct cnl_hip_shim cnl_hip = {.slot = -1, .h = {.fd = -1}, .board = -1};

/* Marks a hook whose real function was looked for and does not exist. */
#define ABSENT ((void *)1)

static cnl_hip_dlsym_fn _Atomic real_dlsym_p;
static void *_Atomic lib_handle;
static _Atomic int logged[CNL_HIP_LOG_COUNT];

uint64_t cnl_hip_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void cnl_hip_log_once(int key, const char *fmt, ...)
{
	va_list ap;
	char buf[512];
	int n;

	if (key < 0 || key >= CNL_HIP_LOG_COUNT ||
	    atomic_exchange(&logged[key], 1))
		return;
	n = snprintf(buf, sizeof(buf), "cnlab-hip[%d]: ", (int)getpid());
	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	n = (int)strnlen(buf, sizeof(buf) - 2);
	buf[n++] = '\n';
	if (write(STDERR_FILENO, buf, (size_t)n) < 0)
		return;
}

cnl_hip_dlsym_fn cnl_hip_real_dlsym(void)
{
	cnl_hip_dlsym_fn d =
	    atomic_load_explicit(&real_dlsym_p, memory_order_acquire);

	if (d)
		return d;
	d = (cnl_hip_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (!d)
		d = (cnl_hip_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	atomic_store_explicit(&real_dlsym_p, d, memory_order_release);
	return d;
}

static void *open_lib(void)
{
	static const char *const names[] = {
	    "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"};
	void *h = atomic_load(&lib_handle);

	if (h)
		return h;
	/* The one the program already loaded, else the newest there is. */
	for (size_t i = 0; !h && i < sizeof(names) / sizeof(names[0]); i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	for (size_t i = 0; !h && i < sizeof(names) / sizeof(names[0]); i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (h)
		atomic_store(&lib_handle, h);
	return h;
}

static bool ours(void *p)
{
	Dl_info self, it;

	return dladdr((void *)ours, &self) && dladdr(p, &it) &&
	       self.dli_fbase == it.dli_fbase;
}

static void *resolve(int id)
{
	cnl_hip_dlsym_fn d = cnl_hip_real_dlsym();
	void *p = NULL, *h;

	if (d) {
		p = d(RTLD_NEXT, cnl_hip_names[id]);
		if (!p && (h = open_lib()))
			p = d(h, cnl_hip_names[id]);
	}
	if (!p || ours(p))
		p = ABSENT;
	atomic_store_explicit(&cnl_hip_real[id], p, memory_order_release);
	return p;
}

void *cnl_hip_real_get(int id)
{
	void *p = atomic_load_explicit(&cnl_hip_real[id], memory_order_acquire);

	if (__builtin_expect(!p, 0))
		p = resolve(id);
	if (p == ABSENT) {
		cnl_hip_log_once(CNL_HIP_LOG_NO_REAL,
		                 "%s is not in the HIP runtime",
		                 cnl_hip_names[id]);
		return NULL;
	}
	return p;
}

void *cnl_hip_real_sym(const char *name)
{
	cnl_hip_dlsym_fn d = cnl_hip_real_dlsym();
	void *h = open_lib();

	return d && h ? d(h, name) : NULL;
}

int cnl_hip_hook_find(const char *name)
{
	/* HIP names, and the two C++ names of hip_ext.h's launches. */
	if (!name ||
	    (strncmp(name, "hip", 3) != 0 && strncmp(name, "_Z24hip", 7) != 0))
		return -1;
	for (int i = 0; i < CNL_HIP_HOOK_COUNT; i++)
		if (strcmp(cnl_hip_names[i], name) == 0)
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
	if (cnl_hip.mode == CNL_HIP_ON && cnl_hip.slot >= 0) {
		cnl_region_detach(&cnl_hip.h, cnl_hip.slot);
		cnl_hip.slot = -1;
		cnl_hip.mode = CNL_HIP_PASS;
	}
	pthread_mutex_unlock(&attach_lock);
}

/* The region's path: the pin, else CNLAB_REGION (guard.c).  A tenant
 * that unset CNLAB_REGION in a container ran with no quota at all. */
static char pinned[CNL_REGION_PATH_MAX * 4];

static const char *region_path(int *ret_broken)
{
	int env_ignored;
	const char *path = cnl_guard_region_path(pinned, sizeof(pinned),
	                                         ret_broken, &env_ignored);

	if (env_ignored)
		cnl_hip_log_once(
		    CNL_HIP_LOG_PIN,
		    "CNLAB_REGION ignored: this container's region "
		    "is %s",
		    path);
	return path;
}

const char *cnl_hip_region_path(void)
{
	int broken;

	return cnl_hip.path ? cnl_hip.path : region_path(&broken);
}

/* The descriptor close, closefrom and the like keep open (guard.c). */
static int slot_fd(void)
{
	return cnl_hip.mode == CNL_HIP_ON && cnl_hip.slot >= 0 ? cnl_hip.h.fd
	                                                       : -1;
}

static void attach_locked(void)
{
	int broken, rc, slot;
	const char *path = region_path(&broken);

	if (broken) {
		cnl_hip.mode = CNL_HIP_BROKEN;
		cnl_hip_log_once(CNL_HIP_LOG_BROKEN,
		                 "cannot read the region pinned in %s: "
		                 "allocations are refused",
		                 cnl_guard_pin_file);
		return;
	}
	cnl_hip.path = path;
	if (!path || !*path) {
		cnl_hip.mode = CNL_HIP_PASS;
		return;
	}
	if (!cnl_hip.r) {
		rc = cnl_region_map_ro(path, &cnl_hip.h);
		if (rc < 0) {
			cnl_hip.mode = CNL_HIP_BROKEN;
			cnl_hip_log_once(CNL_HIP_LOG_BROKEN,
			                 "cannot map region %s (%s): "
			                 "allocations are refused",
			                 path, strerror(-rc));
			return;
		}
		cnl_hip.r = cnl_hip.h.r;
		/* Never mapped: any slice of the GPU may truncate it. */
		if (cnl_hip.r->board[0]) {
			rc = cnl_board_open(cnl_hip.r->board);
			cnl_hip.board = rc < 0 ? -1 : rc;
		}
	}
	slot = cnl_region_attach(&cnl_hip.h);
	if (slot < 0) {
		cnl_hip.mode = CNL_HIP_BROKEN;
		cnl_hip_log_once(CNL_HIP_LOG_BROKEN,
		                 "no free process slot in region %s: "
		                 "allocations are refused",
		                 path);
		return;
	}
	cnl_hip.slot = slot;
	cnl_hip.mode = CNL_HIP_ON;
}

/* A forked child holds no slot lock: it attaches anew on its first call. */
static void atfork_child(void)
{
	pthread_mutex_init(&attach_lock, NULL);
	if (cnl_hip.mode == CNL_HIP_ON) {
		cnl_hip.slot = -1;
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

void cnl_hip_init(void)
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

/* dlsym ------------------------------------------------------------------ */

#define NEXT_MAX 256

struct next_search {
	void *caller_base;
	int seen_caller;
	int n;
	const char *names[NEXT_MAX];
};

static int next_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct next_search *s = data;

	if (!s->seen_caller) {
		if ((void *)info->dlpi_addr == s->caller_base)
			s->seen_caller = 1;
		return 0;
	}
	if (s->n < NEXT_MAX)
		s->names[s->n++] = info->dlpi_name;
	return 0;
}

/* RTLD_NEXT relative to the caller (libc would take it to be us). */
static void *dlsym_next(const char *symbol, void *caller)
{
	struct next_search s = {0};
	struct link_map *lm = NULL;
	cnl_hip_dlsym_fn d = cnl_hip_real_dlsym();
	Dl_info info;
	void *found = NULL;

	if (!dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return NULL;
	s.caller_base = (void *)lm->l_addr;
	dl_iterate_phdr(next_cb, &s);
	for (int i = 0; i < s.n && !found; i++) {
		void *h = dlopen(s.names[i][0] ? s.names[i] : NULL,
		                 RTLD_LAZY | RTLD_NOLOAD);
		if (!h)
			continue;
		found = d(h, symbol);
		dlclose(h);
	}
	return found;
}

/* hipGetProcAddress: the runtime answers (versions, unknown names and
 * errors are its own); a hooked name's real entry point becomes our
 * wrapper, and is remembered as the real one if we had none. */
hipError_t hipGetProcAddress(const char *symbol, void **pfn, int version,
                             uint64_t flags,
                             hipDriverProcAddressQueryResult *status)
{
	cnl_hip_real_hipGetProcAddress_t real = CNL_HIP_REAL(hipGetProcAddress);
	hipError_t rc;
	int id;

	if (!real)
		return hipErrorNotFound;
	rc = real(symbol, pfn, version, flags, status);
	if (rc != hipSuccess || !pfn || !*pfn ||
	    (id = cnl_hip_hook_find(symbol)) < 0 ||
	    id == CNL_HIP_HOOK_hipGetProcAddress)
		return rc;
	if (*pfn != wrappers[id]) {
		void *expect = NULL;
		atomic_compare_exchange_strong(&cnl_hip_real[id], &expect,
		                               *pfn);
	}
	*pfn = wrappers[id];
	return rc;
}

/* dlmopen ------------------------------------------------------------------ */

/*
 * A library loaded into a new link-map namespace (dlmopen with LM_ID_NEWLM
 * or another namespace) gets its own copy of libamdhip64 and of everything
 * it needs, and the preloaded shim is not in that namespace: its HIP calls
 * bind to the copy and reach the GPU unaccounted.  While the process
 * belongs to a slice (enforcing, or failing closed) such a load is
 * refused; the base namespace, where the shim is, loads as dlopen would.
 */
typedef void *(*dlmopen_fn)(Lmid_t, const char *, int);

static dlmopen_fn real_dlmopen(void)
{
	static void *_Atomic fn;
	void *f = atomic_load_explicit(&fn, memory_order_acquire);
	cnl_hip_dlsym_fn d;

	if (f)
		return (dlmopen_fn)f;
	d = cnl_hip_real_dlsym();
	/* RTLD_NEXT of libc's dlsym, called from here: after the shim. */
	f = d ? d(RTLD_NEXT, "dlmopen") : NULL;
	atomic_store_explicit(&fn, f, memory_order_release);
	return (dlmopen_fn)f;
}

CNL_EXPORT void *dlmopen(Lmid_t lmid, const char *file, int mode)
{
	dlmopen_fn real = real_dlmopen();

	if (lmid != LM_ID_BASE) {
		cnl_hip_init();
		if (cnl_hip.mode != CNL_HIP_PASS) {
			cnl_hip_log_once(CNL_HIP_LOG_DLMOPEN,
			                 "dlmopen of %s into a new link-map "
			                 "namespace refused: HIP there would "
			                 "not be accounted",
			                 file ? file : "(main program)");
			return NULL;
		}
	}
	return real ? real(lmid, file, mode) : NULL;
}

CNL_EXPORT void *dlsym(void *handle, const char *symbol);
CNL_EXPORT void *dlsym(void *handle, const char *symbol)
{
	cnl_hip_dlsym_fn d = cnl_hip_real_dlsym();
	void *p;
	int id;

	if (!d)
		return NULL;
	if (handle == RTLD_NEXT)
		p = dlsym_next(symbol, __builtin_return_address(0));
	else
		p = d(handle, symbol);
	/* The loader's namespace door is ours too, however it is found. */
	if (p && strcmp(symbol, "dlmopen") == 0)
		return (void *)dlmopen;
	if (!p || (id = cnl_hip_hook_find(symbol)) < 0)
		return p;
	if (p != wrappers[id]) {
		void *expect = NULL;
		atomic_compare_exchange_strong(&cnl_hip_real[id], &expect, p);
	}
	return wrappers[id];
}
