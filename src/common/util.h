/*
 * util.h - small helpers every CNLab module may use: array size, cleanup
 * attributes (after systemd's _cleanup_ and TAKE_PTR), and the one
 * abort-on-out-of-memory wrapper that daemons, the CLI and the simulator use.
 * Library code that must not abort (the shim, the pure scheduler) returns
 * -ENOMEM instead and does not call the cnl_x* functions.
 */
#ifndef CNL_UTIL_H
#define CNL_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define CNL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define CNL_MIN(a, b)     ((a) < (b) ? (a) : (b))
#define CNL_MAX(a, b)     ((a) > (b) ? (a) : (b))

static inline void cnl_freep(void *p)
{
	free(*(void **)p);
}

/* A pointer freed with free() when it leaves scope. */
#define _cleanup_free_ __attribute__((cleanup(cnl_freep)))

/* Hand a cleanup-managed pointer over: returns it and NULLs the variable. */
#define TAKE_PTR(p)                                \
	({                                         \
		__typeof__(p) take_ptr_tmp_ = (p); \
		(p) = NULL;                        \
		take_ptr_tmp_;                     \
	})

/*
 * cnl_xmalloc, cnl_xcalloc, cnl_xrealloc, cnl_xstrdup - allocate or abort
 * with a message.  Only for daemons, the CLI and the simulator, where an
 * out-of-memory condition is not recoverable.
 */
void *cnl_xmalloc(size_t n);
void *cnl_xcalloc(size_t nmemb, size_t size);
void *cnl_xrealloc(void *p, size_t n);
char *cnl_xstrdup(const char *s);

/*
 * cnl_seterr, cnl_vseterr - format an error message into @err (@errlen
 * bytes, truncated, always terminated); nothing when @err is NULL or
 * @errlen 0.  The one such helper of every module that reports errors as
 * text (config, JSON, JWT, OIDC, the store, the wire codecs).
 */
void cnl_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void cnl_vseterr(char *err, size_t errlen, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/*
 * cnl_heap_keep - keep freed memory in the process for its next use
 * instead of handing it back to the kernel: allocations up to 32 MiB come
 * from the heap, not a mapping of their own, and the heap's free top is
 * kept up to 256 MiB (glibc's own thresholds would move towards 32 and
 * 64 MiB, chunk by chunk, as mapped chunks are freed).  For a daemon whose
 * working set comes back every few milliseconds (cnlabd's scheduling cycle,
 * whose buffers run to megabytes at 10k pending): given back, each cycle paid
 * again a page fault per page, a fifth of a pre-emption storm's cycle on this
 * project's VMs. Call it once, before any thread starts.
 */
void cnl_heap_keep(void);

/* FNV-1a of a string: a small, stable hash for tables keyed by ids and
 * names (not for anything an attacker may choose to collide). */
static inline uint32_t cnl_hash_str(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

/* The length of @s, or @max when no NUL comes first: strnlen() for a
 * string that may sit in an array shorter than @max.  (Given such an
 * array, GCC takes strnlen's bound for the size it reads and warns when
 * whole-program optimisation lets it see the array; this stops at the
 * NUL as strnlen does.) */
static inline size_t cnl_strnlen(const char *s, size_t max)
{
	size_t n = 0;

	while (n < max && s[n])
		n++;
	return n;
}

#endif /* CNL_UTIL_H */
