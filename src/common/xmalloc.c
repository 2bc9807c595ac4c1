/*
 * xmalloc.c - allocation wrappers that abort on out-of-memory (see util.h).
 */
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"

static void oom(size_t n)
{
	fprintf(stderr, "cnlab: out of memory allocating %zu bytes\n", n);
	abort();
}

void *cnl_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom(n);
	return p;
}

void *cnl_xcalloc(size_t nmemb, size_t size)
{
	void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
	if (!p)
		oom(nmemb * size);
	return p;
}

void *cnl_xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		oom(n);
	return q;
}

char *cnl_xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = cnl_xmalloc(n);
	memcpy(p, s, n);
	return p;
}

void cnl_heap_keep(void)
{
	/* Fixed values also keep glibc from raising the mmap threshold on
	 * its own, chunk by chunk, as it frees mapped ones. */
	(void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
	(void)mallopt(M_TRIM_THRESHOLD, 256 << 20);
}
