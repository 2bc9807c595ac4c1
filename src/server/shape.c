/*
 * shape.c - parse GPU shapes (see shape.h for the grammar).
 *
 * The type part is matched before the size part is read: a shape is split
 * at each '-' or 'x' from the right until the left side names a type or
 * family, so "a100-80gb-3g.40gb" reads as family "a100-80gb" and profile
 * "3g.40gb", not as family "a100".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cnlab/errors.h"
#include "server/shape.h"

/* Types whose name is @fam or starts with "@fam-" (first @n bytes). */
static uint64_t family(const struct cnl_catalog *cat, const char *fam, size_t n)
{
	uint64_t m = 0;

	for (int t = 0; t < cat->n; t++) {
		const char *name = cat->types[t].name;

		if (strncasecmp(name, fam, n) == 0 &&
		    (name[n] == '\0' || name[n] == '-'))
			m |= UINT64_C(1) << t;
	}
	return m;
}

/* The types @name (@n bytes) stands for: "any" is every type of the
 * catalog, else the family. */
static uint64_t type_set(const struct cnl_catalog *cat, const char *name,
                         size_t n)
{
	if (n == 3 && strncasecmp(name, "any", 3) == 0)
		return cat->n >= 64 ? ~UINT64_C(0)
		                    : (UINT64_C(1) << cat->n) - 1;
	return family(cat, name, n);
}

uint64_t cnl_shape_family(const struct cnl_catalog *cat, const char *name)
{
	return name ? family(cat, name, strlen(name)) : 0;
}

/* A decimal integer filling all of @s within [lo, hi], or -1. */
static long whole_number(const char *s, long lo, long hi)
{
	char *end;
	long v;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -1;
	return v;
}

static int first_type(uint64_t m)
{
	return __builtin_ctzll(m);
}

/* Read the size part @rest for the types @m; 0 or -CNL_EFIELD. */
static int size_part(const struct cnl_catalog *cat, uint64_t m, char sep,
                     const char *rest, struct cnl_alloc_req *ret, char *err,
                     size_t errlen)
{
	char num[8];
	size_t n = strlen(rest);
	long v;

	if (sep == 'x') {
		if ((v = whole_number(rest, 1, CNL_NODE_MAX_GPUS)) < 0)
			goto bad;
		ret->kind = CNL_REQ_WHOLE;
		ret->gpus = (int)v;
		return 0;
	}
	if (strcasecmp(rest, "full") == 0) {
		ret->kind = CNL_REQ_WHOLE;
		ret->gpus = 1;
		return 0;
	}
	if (n > 3 && n - 3 < sizeof(num) &&
	    strcasecmp(rest + n - 3, "pct") == 0) {
		memcpy(num, rest, n - 3);
		num[n - 3] = '\0';
		rest = num;
	}
	if (rest[0] >= '0' && rest[0] <= '9' && !strchr(rest, '.')) {
		if ((v = whole_number(rest, 1, CNL_BLOCKS_PER_GPU)) < 0) {
			snprintf(err, errlen,
			         "GPU shape: blocks must be 1..%d (a %% of one "
			         "GPU), got \"%s\"",
			         CNL_BLOCKS_PER_GPU, rest);
			return -CNL_EFIELD;
		}
		ret->kind = CNL_REQ_BLOCKS;
		ret->blocks = (int)v;
		return 0;
	}
	/* A MIG profile: some type of the family must have it. */
	for (int t = 0; t < cat->n; t++)
		if ((m >> t & 1) && cnl_mig_find(&cat->types[t], rest) >= 0) {
			ret->kind = CNL_REQ_MIG;
			ret->profile = rest;
			return 0;
		}
bad:
	snprintf(err, errlen,
	         "GPU shape: \"%s\" is not a size for %s (want N for N%% of a "
	         "GPU, full, xK for K GPUs, or a MIG profile)",
	         rest, cat->types[first_type(m)].name);
	return -CNL_EFIELD;
}

int cnl_shape_parse(const struct cnl_catalog *cat, const char *shape,
                    struct cnl_alloc_req *ret, char *ret_buf, char *err,
                    size_t errlen)
{
	struct cnl_alloc_req req = {0};
	size_t n = shape ? strlen(shape) : 0;
	uint64_t m;
	int r;

	if (n == 0 || n >= CNL_SHAPE_MAX) {
		snprintf(err, errlen, "GPU shape: must be 1..%d characters",
		         CNL_SHAPE_MAX - 1);
		return -CNL_EFIELD;
	}
	memcpy(ret_buf, shape, n + 1);
	req.gpu_type = CNL_GPU_TYPE_ANY;
	if (strcasecmp(shape, "cpu") == 0) {
		req.kind = CNL_REQ_CPU;
		*ret = req;
		return 0;
	}
	if ((m = type_set(cat, shape, n))) {
		req.kind = CNL_REQ_WHOLE;
		req.gpus = 1;
		req.gpu_types = m;
		*ret = req;
		return 0;
	}
	for (size_t i = n; i-- > 1;) {
		char sep = (char)(ret_buf[i] | 0x20);

		if (sep != '-' && sep != 'x')
			continue;
		if (!(m = type_set(cat, ret_buf, i)) || i + 1 >= n)
			continue;
		r = size_part(cat, m, sep, ret_buf + i + 1, &req, err, errlen);
		if (r < 0)
			return r;
		req.gpu_types = m;
		*ret = req;
		return 0;
	}
	snprintf(err, errlen,
	         "GPU shape: \"%s\" names no GPU type of the catalog (e.g. "
	         "h100-25, a100-3g.20gb, h100x8, any-25, cpu)",
	         shape);
	return -CNL_EFIELD;
}

const char *cnl_shape_type_name(const struct cnl_catalog *cat,
                                const struct cnl_alloc_req *req)
{
	if (req->kind == CNL_REQ_CPU || !req->gpu_types)
		return "-";
	if (cat->n > 1 && req->gpu_types == type_set(cat, "any", 3))
		return "any";
	return cat->types[first_type(req->gpu_types)].name;
}
