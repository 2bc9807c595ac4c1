/*
 * catalog.c - the built-in GPU types and the checks that site types pass.
 *
 * Sources.  SM counts and VRAM are the products' data sheets and what
 * nvidia-smi reports (MiB).  MIG profiles follow NVIDIA's MIG user guide:
 * compute slices of 7, memory slices of 8, maximum instances and the
 * placement start slots.  Usable memory per profile is what
 * `nvidia-smi mig -lgip` prints for the product (GiB, converted to MiB).
 * Where no published -lgip listing was at hand (H200 profiles above
 * 1g.18gb), the figure is the profile's memory share of the 7g instance,
 * rounded down to 256 MiB; such rows are marked "derived".
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cnlab/errors.h"
#include "sched/catalog.h"

#define S_1G   0x7f /* starts 0..6 */
#define S_1G2  0x55 /* starts 0, 2, 4, 6 (1g with two memory slices) */
#define S_2G   0x15 /* starts 0, 2, 4 */
#define S_3G   0x11 /* starts 0, 4 */
#define S_0    0x01 /* start 0 only */

#define GIB(x) ((uint64_t)((x)*1024.0))

#define P(n, c, m, max, st, me, mib)                                           \
	{                                                                      \
		.name = n, .compute = c, .mem_slots = m, .max_instances = max, \
		.starts = st, .media = me, .mem_mib = mib                      \
	}

/* H100 80 GB, SXM and PCIe alike. */
#define H100_80GB_MIG                                         \
	P("1g.10gb", 1, 1, 7, S_1G, false, GIB(9.75)),        \
	    P("1g.10gb+me", 1, 1, 1, S_1G, true, GIB(9.75)),  \
	    P("1g.20gb", 1, 2, 4, S_1G2, false, GIB(19.625)), \
	    P("2g.20gb", 2, 2, 3, S_2G, false, GIB(19.625)),  \
	    P("3g.40gb", 3, 4, 2, S_3G, false, GIB(39.5)),    \
	    P("4g.40gb", 4, 4, 1, S_0, false, GIB(39.5)),     \
	    P("7g.80gb", 7, 8, 1, S_0, false, GIB(79.25))

static const struct cnl_gpu_type builtin[] = {
    {.name = "A100-40GB",
     .vendor = "nvidia",
     .sm_count = 108,
     .vram_mib = 40960,
     .n_mig = 7,
     .mig = {P("1g.5gb", 1, 1, 7, S_1G, false, GIB(4.75)),
             P("1g.5gb+me", 1, 1, 1, S_1G, true, GIB(4.75)),
             P("1g.10gb", 1, 2, 4, S_1G2, false, GIB(9.625)),
             P("2g.10gb", 2, 2, 3, S_2G, false, GIB(9.625)),
             P("3g.20gb", 3, 4, 2, S_3G, false, GIB(19.625)),
             P("4g.20gb", 4, 4, 1, S_0, false, GIB(19.625)),
             P("7g.40gb", 7, 8, 1, S_0, false, GIB(39.5))}},
    {.name = "A100-80GB",
     .vendor = "nvidia",
     .sm_count = 108,
     .vram_mib = 81920,
     .n_mig = 7,
     .mig = {P("1g.10gb", 1, 1, 7, S_1G, false, GIB(9.5)),
             P("1g.10gb+me", 1, 1, 1, S_1G, true, GIB(9.5)),
             P("1g.20gb", 1, 2, 4, S_1G2, false, GIB(19.5)),
             P("2g.20gb", 2, 2, 3, S_2G, false, GIB(19.5)),
             P("3g.40gb", 3, 4, 2, S_3G, false, GIB(39.25)),
             P("4g.40gb", 4, 4, 1, S_0, false, GIB(39.25)),
             P("7g.80gb", 7, 8, 1, S_0, false, GIB(79.0))}},
    {.name = "H100-80GB-SXM",
     .vendor = "nvidia",
     .sm_count = 132,
     .vram_mib = 81559,
     .n_mig = 7,
     .mig = {H100_80GB_MIG}},
    {.name = "H100-80GB-PCIE",
     .vendor = "nvidia",
     .sm_count = 114,
     .vram_mib = 81559,
     .n_mig = 7,
     .mig = {H100_80GB_MIG}},
    {.name = "H200-141GB",
     .vendor = "nvidia",
     .sm_count = 132,
     .vram_mib = 143771,
     .n_mig = 7,
     .mig = {P("1g.18gb", 1, 1, 7, S_1G, false, GIB(16.0)),
             P("1g.18gb+me", 1, 1, 1, S_1G, true, GIB(16.0)),
             P("1g.35gb", 1, 2, 4, S_1G2, false, GIB(32.5)),   /* derived */
             P("2g.35gb", 2, 2, 3, S_2G, false, GIB(32.5)),    /* derived */
             P("3g.71gb", 3, 4, 2, S_3G, false, GIB(65.0)),    /* derived */
             P("4g.71gb", 4, 4, 1, S_0, false, GIB(65.0)),     /* derived */
             P("7g.141gb", 7, 8, 1, S_0, false, GIB(130.5))}}, /* derived */
    {.name = "L40S", .vendor = "nvidia", .sm_count = 142, .vram_mib = 46068},
    /* Older types found in production traces (Alibaba openb). */
    {.name = "T4", .vendor = "nvidia", .sm_count = 40, .vram_mib = 15360},
    {.name = "P100", .vendor = "nvidia", .sm_count = 56, .vram_mib = 16280},
    {.name = "V100-16GB",
     .vendor = "nvidia",
     .sm_count = 80,
     .vram_mib = 16160},
    {.name = "V100-32GB",
     .vendor = "nvidia",
     .sm_count = 80,
     .vram_mib = 32510},
    {.name = "A10", .vendor = "nvidia", .sm_count = 72, .vram_mib = 23028},
    {.name = "L4", .vendor = "nvidia", .sm_count = 58, .vram_mib = 23034},
    {.name = "RTX-6000-Ada",
     .vendor = "nvidia",
     .sm_count = 142,
     .vram_mib = 49140},
    {.name = "MI300X", .vendor = "amd", .sm_count = 304, .vram_mib = 196608},
    /* MI250 and MI250X: one graphics compute die, as the driver
     * enumerates it (104 and 110 compute units, 64 GiB each); no MIG. */
    {.name = "MI250", .vendor = "amd", .sm_count = 104, .vram_mib = 65536},
    {.name = "MI250X", .vendor = "amd", .sm_count = 110, .vram_mib = 65536},
};

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

/* The smallest 1g profile with enough memory for CNL_MIG_HOST_BLOCKS
 * blocks of 1% of the GPU's VRAM each. */
static int8_t derive_host_profile(const struct cnl_gpu_type *t)
{
	int best = -1;

	for (int i = 0; i < t->n_mig; i++) {
		const struct cnl_mig_profile *p = &t->mig[i];
		if (p->media || p->compute != 1)
			continue;
		if ((int)p->mem_slots * 100 <
		    CNL_MIG_HOST_BLOCKS * CNL_MIG_MEM_SLICES)
			continue;
		if (best < 0 || p->mem_slots < t->mig[best].mem_slots)
			best = i;
	}
	return (int8_t)best;
}

static int check_type(const struct cnl_catalog *cat,
                      const struct cnl_gpu_type *t, char *err, size_t errlen)
{
	if (t->name[0] == '\0' || memchr(t->name, '\0', CNL_NAME_MAX) == NULL)
		return fail(err, errlen, -CNL_ECONFIG,
		            "GPU type name must be 1..31 characters");
	if (cnl_catalog_find(cat, t->name) >= 0)
		return fail(err, errlen, -CNL_EDUP,
		            "GPU type \"%s\" is already defined", t->name);
	if (t->vram_mib == 0)
		return fail(err, errlen, -CNL_ECONFIG,
		            "GPU type \"%s\": vram_mib must be positive",
		            t->name);
	if (t->n_mig > CNL_MIG_MAX_PROFILES)
		return fail(err, errlen, -CNL_ELIMIT,
		            "GPU type \"%s\": too many MIG profiles", t->name);
	for (int i = 0; i < t->n_mig; i++) {
		const struct cnl_mig_profile *p = &t->mig[i];
		if (p->name[0] == '\0')
			return fail(err, errlen, -CNL_ECONFIG,
			            "GPU type \"%s\": MIG profile without a "
			            "name",
			            t->name);
		if (p->compute < 1 || p->compute > CNL_MIG_COMPUTE_SLICES)
			return fail(err, errlen, -CNL_ECONFIG,
			            "GPU type \"%s\", profile \"%s\": compute "
			            "must be 1..7",
			            t->name, p->name);
		if (p->mem_slots < 1 || p->mem_slots > CNL_MIG_MEM_SLICES)
			return fail(
			    err, errlen, -CNL_ECONFIG,
			    "GPU type \"%s\", profile \"%s\": mem_slots "
			    "must be 1..8",
			    t->name, p->name);
		if (p->max_instances < 1 ||
		    p->max_instances > CNL_MIG_COMPUTE_SLICES)
			return fail(err, errlen, -CNL_ECONFIG,
			            "GPU type \"%s\", profile \"%s\": "
			            "max_instances must be 1..7",
			            t->name, p->name);
		if (p->starts == 0 || (p->starts & 0x80))
			return fail(err, errlen, -CNL_ECONFIG,
			            "GPU type \"%s\", profile \"%s\": start "
			            "slots must be within 0..6",
			            t->name, p->name);
		for (int s = 0; s < 8; s++) {
			if (!(p->starts & (1u << s)))
				continue;
			if (s + p->mem_slots > CNL_MIG_MEM_SLICES ||
			    s + p->compute > CNL_MIG_COMPUTE_SLICES)
				return fail(
				    err, errlen, -CNL_ECONFIG,
				    "GPU type \"%s\", profile \"%s\": an "
				    "instance at an allowed start slot "
				    "runs past the last slice",
				    t->name, p->name);
		}
		if (p->mem_mib == 0 || p->mem_mib > t->vram_mib)
			return fail(err, errlen, -CNL_ECONFIG,
			            "GPU type \"%s\", profile \"%s\": mem_mib "
			            "must be 1..vram_mib",
			            t->name, p->name);
		for (int j = 0; j < i; j++)
			if (strcasecmp(t->mig[j].name, p->name) == 0)
				return fail(err, errlen, -CNL_EDUP,
				            "GPU type \"%s\": profile \"%s\" "
				            "defined twice",
				            t->name, p->name);
	}
	return 0;
}

void cnl_catalog_init(struct cnl_catalog *cat)
{
	memset(cat, 0, sizeof(*cat));
	for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++) {
		cat->types[i] = builtin[i];
		cat->types[i].host_profile = derive_host_profile(&builtin[i]);
	}
	cat->n = sizeof(builtin) / sizeof(builtin[0]);
}

int cnl_catalog_find(const struct cnl_catalog *cat, const char *name)
{
	if (!name)
		return -CNL_EGPUTYPE;
	for (int i = 0; i < cat->n; i++)
		if (strcasecmp(cat->types[i].name, name) == 0)
			return i;
	return -CNL_EGPUTYPE;
}

int cnl_catalog_add(struct cnl_catalog *cat, const struct cnl_gpu_type *t,
                    char *err, size_t errlen)
{
	int r;

	if (cat->n >= CNL_CATALOG_MAX_TYPES)
		return fail(err, errlen, -CNL_ELIMIT,
		            "GPU catalog is full (%d types)",
		            CNL_CATALOG_MAX_TYPES);
	r = check_type(cat, t, err, errlen);
	if (r < 0)
		return r;
	cat->types[cat->n] = *t;
	cat->types[cat->n].host_profile = derive_host_profile(t);
	return cat->n++;
}

int cnl_mig_find(const struct cnl_gpu_type *t, const char *name)
{
	if (t->n_mig == 0)
		return -CNL_ENOMIG;
	if (!name)
		return -CNL_EPROFILE;
	for (int i = 0; i < t->n_mig; i++)
		if (strcasecmp(t->mig[i].name, name) == 0)
			return i;
	return -CNL_EPROFILE;
}

int cnl_mig_pick(const struct cnl_gpu_type *t, int blocks)
{
	int best = -1;

	if (blocks < 1 || blocks > 100)
		return -CNL_EBLOCKS;
	if (t->n_mig == 0)
		return -CNL_ENOMIG;
	for (int i = 0; i < t->n_mig; i++) {
		const struct cnl_mig_profile *p = &t->mig[i];
		if (p->media)
			continue;
		if ((int)p->compute * 100 < blocks * CNL_MIG_COMPUTE_SLICES ||
		    (int)p->mem_slots * 100 < blocks * CNL_MIG_MEM_SLICES)
			continue;
		if (best < 0 || p->compute < t->mig[best].compute ||
		    (p->compute == t->mig[best].compute &&
		     p->mem_slots < t->mig[best].mem_slots))
			best = i;
	}
	return best >= 0 ? best : -CNL_ENOSPACE;
}

/* ---- site types from JSON ---------------------------------------------- */

static bool field_known(const char *key, const char *const *allowed)
{
	for (; *allowed; allowed++)
		if (strcmp(key, *allowed) == 0)
			return true;
	return false;
}

static int json_fields(const json_t *obj, const char *const *allowed,
                       const char *where, char *err, size_t errlen)
{
	const char *key;
	json_t *val;

	if (!json_is_object(obj))
		return fail(err, errlen, -CNL_EFIELD, "%s: must be an object",
		            where);
	json_object_foreach ((json_t *)obj, key, val) {
		if (!field_known(key, allowed))
			return fail(err, errlen, -CNL_EFIELD,
			            "%s: unknown field \"%s\"", where, key);
	}
	return 0;
}

/* Read integer field `key` in min..max into *ret; absent: 0 unless
 * required. */
static int json_uint(const json_t *obj, const char *key, bool required,
                     int64_t min, int64_t max, int64_t *ret, const char *where,
                     char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, key);

	if (!v) {
		if (required)
			return fail(err, errlen, -CNL_EFIELD,
			            "%s: missing field \"%s\"", where, key);
		return 0;
	}
	if (!json_is_integer(v))
		return fail(err, errlen, -CNL_EFIELD,
		            "%s: field \"%s\" must be an integer", where, key);
	if (json_integer_value(v) < min || json_integer_value(v) > max)
		return fail(err, errlen, -CNL_ECONFIG,
		            "%s: field \"%s\" is out of range", where, key);
	*ret = json_integer_value(v);
	return 0;
}

static int json_name(const json_t *obj, const char *key, bool required,
                     char *dst, size_t dstlen, const char *where, char *err,
                     size_t errlen)
{
	json_t *v = json_object_get(obj, key);
	const char *s;

	if (!v) {
		if (required)
			return fail(err, errlen, -CNL_EFIELD,
			            "%s: missing field \"%s\"", where, key);
		return 0;
	}
	if (!json_is_string(v))
		return fail(err, errlen, -CNL_EFIELD,
		            "%s: field \"%s\" must be a string", where, key);
	s = json_string_value(v);
	if (s[0] == '\0' || strlen(s) >= dstlen)
		return fail(err, errlen, -CNL_ECONFIG,
		            "%s: field \"%s\" must be 1..31 characters", where,
		            key);
	memcpy(dst, s, strlen(s) + 1);
	return 0;
}

static int parse_profile(const json_t *o, const char *type,
                         struct cnl_mig_profile *p, char *err, size_t errlen)
{
	static const char *const allowed[] = {
	    "name",          "compute", "mem_slots", "mem_mib",
	    "max_instances", "starts",  "media",     NULL};
	char where[96];
	int64_t v = 0;
	json_t *starts, *media, *s;
	size_t i;
	int r;

	snprintf(where, sizeof(where), "GPU type \"%s\", MIG profile", type);
	r = json_fields(o, allowed, where, err, errlen);
	if (r < 0)
		return r;
	r = json_name(o, "name", true, p->name, sizeof(p->name), where, err,
	              errlen);
	if (r < 0)
		return r;
	snprintf(where, sizeof(where), "GPU type \"%s\", MIG profile \"%s\"",
	         type, p->name);
	if ((r = json_uint(o, "compute", true, 1, 7, &v, where, err, errlen)) <
	    0)
		return r;
	p->compute = (uint8_t)v;
	if ((r = json_uint(o, "mem_slots", true, 1, 8, &v, where, err,
	                   errlen)) < 0)
		return r;
	p->mem_slots = (uint8_t)v;
	if ((r = json_uint(o, "max_instances", true, 1, 7, &v, where, err,
	                   errlen)) < 0)
		return r;
	p->max_instances = (uint8_t)v;
	if ((r = json_uint(o, "mem_mib", true, 1, INT64_MAX / 2, &v, where, err,
	                   errlen)) < 0)
		return r;
	p->mem_mib = (uint64_t)v;
	starts = json_object_get(o, "starts");
	if (!json_is_array(starts) || json_array_size(starts) == 0)
		return fail(err, errlen, -CNL_EFIELD,
		            "%s: field \"%s\" must be a non-empty array of "
		            "slots",
		            where, "starts");
	json_array_foreach (starts, i, s) {
		if (!json_is_integer(s) || json_integer_value(s) < 0 ||
		    json_integer_value(s) > 6)
			return fail(
			    err, errlen, -CNL_ECONFIG,
			    "%s: field \"%s\" holds a slot outside 0..6", where,
			    "starts");
		p->starts |= (uint8_t)(1u << json_integer_value(s));
	}
	media = json_object_get(o, "media");
	if (media && !json_is_boolean(media))
		return fail(err, errlen, -CNL_EFIELD,
		            "%s: field \"%s\" must be true or false", where,
		            "media");
	p->media = media && json_is_true(media);
	return 0;
}

static int parse_type(const json_t *o, struct cnl_gpu_type *t, char *err,
                      size_t errlen)
{
	static const char *const allowed[] = {"name",     "vendor", "sm_count",
	                                      "vram_mib", "mig",    NULL};
	char where[64];
	int64_t v = 0;
	json_t *mig, *p;
	size_t i;
	int r;

	memset(t, 0, sizeof(*t));
	r = json_fields(o, allowed, "GPU type", err, errlen);
	if (r < 0)
		return r;
	r = json_name(o, "name", true, t->name, sizeof(t->name), "GPU type",
	              err, errlen);
	if (r < 0)
		return r;
	snprintf(where, sizeof(where), "GPU type \"%s\"", t->name);
	memcpy(t->vendor, "site", 5);
	r = json_name(o, "vendor", false, t->vendor, sizeof(t->vendor), where,
	              err, errlen);
	if (r < 0)
		return r;
	if ((r = json_uint(o, "sm_count", true, 1, 1 << 20, &v, where, err,
	                   errlen)) < 0)
		return r;
	t->sm_count = (uint32_t)v;
	if ((r = json_uint(o, "vram_mib", true, 1, INT64_MAX / 2, &v, where,
	                   err, errlen)) < 0)
		return r;
	t->vram_mib = (uint64_t)v;
	mig = json_object_get(o, "mig");
	if (!mig)
		return 0;
	if (!json_is_array(mig))
		return fail(err, errlen, -CNL_EFIELD,
		            "%s: field \"%s\" must be an array", where, "mig");
	if (json_array_size(mig) > CNL_MIG_MAX_PROFILES)
		return fail(err, errlen, -CNL_ELIMIT,
		            "%s: more than %d MIG profiles", where,
		            CNL_MIG_MAX_PROFILES);
	json_array_foreach (mig, i, p) {
		r = parse_profile(p, t->name, &t->mig[i], err, errlen);
		if (r < 0)
			return r;
	}
	t->n_mig = (uint8_t)json_array_size(mig);
	return 0;
}

int cnl_catalog_add_json(struct cnl_catalog *cat, const json_t *v, char *err,
                         size_t errlen)
{
	struct cnl_catalog *tmp;
	struct cnl_gpu_type t;
	size_t i, n = json_is_array(v) ? json_array_size(v) : 1;
	int r = 0;

	tmp = malloc(sizeof(*tmp));
	if (!tmp)
		return -ENOMEM;
	*tmp = *cat;
	for (i = 0; i < n; i++) {
		const json_t *o = json_is_array(v) ? json_array_get(v, i) : v;
		r = parse_type(o, &t, err, errlen);
		if (r < 0)
			break;
		r = cnl_catalog_add(tmp, &t, err, errlen);
		if (r < 0)
			break;
	}
	if (r >= 0)
		*cat = *tmp;
	free(tmp);
	return r < 0 ? r : 0;
}
