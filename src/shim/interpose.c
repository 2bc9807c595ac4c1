/*
 * interpose.c - the two lookup doors through which a program can reach the
 * driver without the dynamic linker's symbol binding: dlsym and
 * cuGetProcAddress(_v2); and dlmopen, through which it could load a
 * driver of its own beside ours.  The top layer of libcnlab-cuda.so: it alone
 * holds the table of every hook's wrapper (generated from hooks.def), so
 * the hook files (mem.c, throttle.c, nvml.c) and the core (shim.c) below it
 * never call back up.
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
#include <link.h>
#include <stdatomic.h>
#include <string.h>

#include "shim/shim-internal.h"

/* Marks a hook whose real function was looked for and does not exist
 * (shim.c's marker). */
#define ABSENT ((void *)1)

/* Every hook's wrapper, by hook id. */
static void *const wrappers[CNL_HOOK_COUNT] = {
#define CNL_HOOK(lib, ret, name, base, ver, ptds, params, args) \
	[CNL_HOOK_##name] = (void *)name,
#include "shim/hooks.def"
#undef CNL_HOOK
};

/* dlsym ------------------------------------------------------------------ */

#define NEXT_MAX 256

struct next_search {
	void *caller_base;
	int seen_caller;
	int n;
	const char *names[NEXT_MAX];
};

/* Collect the objects loaded after the caller's (no dlopen in here: the
 * loader's list lock is held). */
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

/*
 * RTLD_NEXT is relative to the caller, which libc would take to be us:
 * search the objects loaded after the caller's, in load order.
 */
static void *dlsym_next(const char *symbol, void *caller)
{
	struct next_search s = {0};
	struct link_map *lm = NULL;
	dlsym_fn d = cnl_real_dlsym();
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

CNL_EXPORT void *dlsym(void *handle, const char *symbol);
CNL_EXPORT void *dlsym(void *handle, const char *symbol)
{
	dlsym_fn d = cnl_real_dlsym();
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
	if (!p || (id = cnl_hook_find(symbol)) < 0)
		return p;
	/* Remember what the program's own lookup found, if we had nothing. */
	if (p != wrappers[id]) {
		void *expect = NULL;
		atomic_compare_exchange_strong(&cnl_real[id], &expect, p);
	}
	return wrappers[id];
}

/* dlmopen ------------------------------------------------------------------ */

/*
 * A library loaded into a new link-map namespace (dlmopen with LM_ID_NEWLM
 * or another namespace) gets its own copy of libcuda.so.1 and of
 * everything it needs, and the preloaded shim is not in that namespace:
 * its CUDA calls bind to the copy and reach the driver unaccounted (1 GiB
 * under a 64 MiB quota on the fake).  While the process belongs to a slice
 * (enforcing, or failing closed) such a load is refused; the base
 * namespace, where the shim is, loads as dlopen would.
 */
typedef void *(*dlmopen_fn)(Lmid_t, const char *, int);

static dlmopen_fn real_dlmopen(void)
{
	static void *_Atomic fn;
	void *f = atomic_load_explicit(&fn, memory_order_acquire);
	dlsym_fn d;

	if (f)
		return (dlmopen_fn)f;
	d = cnl_real_dlsym();
	/* RTLD_NEXT of libc's dlsym, called from here: after the shim. */
	f = d ? d(RTLD_NEXT, "dlmopen") : NULL;
	atomic_store_explicit(&fn, f, memory_order_release);
	return (dlmopen_fn)f;
}

CNL_EXPORT void *dlmopen(Lmid_t lmid, const char *file, int mode)
{
	dlmopen_fn real = real_dlmopen();

	if (lmid != LM_ID_BASE) {
		cnl_shim_init();
		if (cnl_shim.mode != CNL_MODE_PASS) {
			cnl_log_once(CNL_LOG_DLMOPEN,
			             "dlmopen of %s into a new link-map "
			             "namespace refused: CUDA there would not "
			             "be accounted",
			             file ? file : "(main program)");
			return NULL;
		}
	}
	return real ? real(lmid, file, mode) : NULL;
}

/* cuGetProcAddress --------------------------------------------------------- */

/* Replace the driver's answer by our wrapper of the same variant. */
static void wrap_proc(const char *symbol, void **pfn, int version,
                      cuuint64_t flags)
{
	int want_ptds =
	    (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? 1 : 0;
	int best[2] = {-1, -1};

	if (!symbol || !pfn || !*pfn)
		return;
	for (int i = 0; i < CNL_HOOK_COUNT; i++) {
		int p = cnl_hooks[i].ptds;

		if (cnl_hooks[i].lib != CNL_LIB_CU ||
		    strcmp(cnl_hooks[i].base, symbol) != 0)
			continue;
		if (*pfn == cnl_real_get(i)) {
			*pfn = wrappers[i];
			return;
		}
		if (cnl_hooks[i].version <= version &&
		    (best[p] < 0 ||
		     cnl_hooks[i].version > cnl_hooks[best[p]].version))
			best[p] = i;
	}
	/*
	 * A driver may hand out an internal entry point rather than the
	 * exported one: pick the variant by version and flag, as the driver
	 * does (a name without a per-thread variant gives its legacy one to
	 * both flags), and keep the driver's pointer as the real one if we
	 * had none.
	 */
	if (want_ptds && best[1] < 0)
		want_ptds = 0;
	if (best[want_ptds] >= 0) {
		int b = best[want_ptds];
		void *expect = ABSENT;
		atomic_compare_exchange_strong(&cnl_real[b], &expect, *pfn);
		*pfn = wrappers[b];
	}
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                          cuuint64_t flags)
{
	cnl_real_cuGetProcAddress_t real = CNL_REAL(cuGetProcAddress);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_FOUND;
	rc = real(symbol, pfn, cudaVersion, flags);
	if (rc == CUDA_SUCCESS)
		wrap_proc(symbol, pfn, cudaVersion, flags);
	return rc;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                             cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
	cnl_real_cuGetProcAddress_v2_t real = CNL_REAL(cuGetProcAddress_v2);
	CUresult rc;

	if (!real)
		return CUDA_ERROR_NOT_FOUND;
	rc = real(symbol, pfn, cudaVersion, flags, symbolStatus);
	if (rc == CUDA_SUCCESS)
		wrap_proc(symbol, pfn, cudaVersion, flags);
	return rc;
}
