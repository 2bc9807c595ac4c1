/*
 * gpu.c - GPU providers (see gpu.h): the fake pool and NVML by dlopen.
 *
 * NVML is declared here, not included: the agent builds without the CUDA
 * toolkit and runs on machines without a driver (the fake provider).  Only
 * the few calls the agent needs are looked up; a library that lacks one of
 * them is refused with its name.
 *
 * MIG.  The fake provider emulates instances: each has a UUID
 * "MIG-fake-<gpu>-<profile>-<start>" and occupies its start slot until
 * destroyed.  With NVML the agent lists the GPUs; creating instances
 * through NVML's GPU-instance calls is left to the real-GPU work (see the
 * README): nvml reports -CNL_ENOMIG for now, and the agent places MIG
 * slices only from a fake pool.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "agent/gpu.h"
#include "cnlab/errors.h"
#include "common/util.h"

struct mig {
	int gpu;
	int start;
	char uuid[CNL_GPU_UUID_MAX];
};

struct cnl_gpus {
	const char *kind;
	const struct cnl_catalog *cat;
	struct cnl_gpu_dev dev[CNL_GPU_MAX];
	int n;
	struct mig mig[CNL_GPU_MAX * CNL_MIG_COMPUTE_SLICES];
	int n_mig;
	void *nvml; /* dlopen handle */
	int (*nvml_shutdown)(void);
};

/* ---- fake --------------------------------------------------------------- */

/* "2xH100-80GB-SXM,1xA100-40GB" (one type per node, see gpu.h). */
static int open_fake(struct cnl_gpus *g, const char *spec, char *err,
                     size_t errlen)
{
	char buf[256], *save = NULL, *tok;

	if (strlen(spec) >= sizeof(buf)) {
		snprintf(err, errlen, "fake GPU pool: spec too long");
		return -CNL_ECONFIG;
	}
	memcpy(buf, spec, strlen(spec) + 1);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *x = strchr(tok, 'x'), *end;
		long n;
		int t;

		if (!x || x == tok) {
			snprintf(
			    err, errlen,
			    "fake GPU pool: \"%s\" is not COUNTxTYPE (e.g. "
			    "2xH100-80GB-SXM)",
			    tok);
			return -CNL_ECONFIG;
		}
		*x = '\0';
		errno = 0;
		n = strtol(tok, &end, 10);
		if (errno || *end || n < 1 || n > CNL_GPU_MAX - g->n) {
			snprintf(err, errlen,
			         "fake GPU pool: count \"%s\" must be 1..%d in "
			         "all",
			         tok, CNL_GPU_MAX);
			return -CNL_ECONFIG;
		}
		if ((t = cnl_catalog_find(g->cat, x + 1)) < 0) {
			snprintf(err, errlen,
			         "fake GPU pool: \"%s\" is not a GPU type of "
			         "the catalog",
			         x + 1);
			return -CNL_EGPUTYPE;
		}
		if (g->n && strcmp(g->dev[0].type, g->cat->types[t].name)) {
			snprintf(err, errlen,
			         "fake GPU pool: one GPU type per node (%s and "
			         "%s given)",
			         g->dev[0].type, g->cat->types[t].name);
			return -CNL_ECONFIG;
		}
		for (long i = 0; i < n; i++) {
			struct cnl_gpu_dev *d = &g->dev[g->n];

			d->index = g->n;
			snprintf(d->uuid, sizeof(d->uuid), "GPU-fake-%08x-%04d",
			         0xc0ffee00u + (unsigned)t, g->n);
			snprintf(d->type, sizeof(d->type), "%s",
			         g->cat->types[t].name);
			d->mem_mib = g->cat->types[t].vram_mib;
			d->healthy = true;
			g->n++;
		}
	}
	if (g->n == 0) {
		snprintf(err, errlen, "fake GPU pool: no GPUs given");
		return -CNL_ECONFIG;
	}
	return 0;
}

/* ---- NVML ---------------------------------------------------------------- */

typedef void *nvml_dev;
struct nvml_memory {
	unsigned long long total, free, used;
};

int cnl_gpus_type_from_name(const struct cnl_catalog *cat, const char *name,
                            uint64_t mem_mib)
{
	static const struct {
		const char *has, *also, *type;
	} map[] = {
	    {"H200", NULL, "H200-141GB"},
	    {"H100", "PCIe", "H100-80GB-PCIE"},
	    {"H100", NULL, "H100-80GB-SXM"},
	    {"A100", "80GB", "A100-80GB"},
	    {"A100", NULL, "A100-40GB"},
	    {"L40S", NULL, "L40S"},
	    {"L4", NULL, "L4"},
	    {"RTX 6000 Ada", NULL, "RTX-6000-Ada"},
	    {"A10", NULL, "A10"},
	    {"T4", NULL, "T4"},
	    {"V100", "32GB", "V100-32GB"},
	    {"V100", NULL, "V100-16GB"},
	};

	for (size_t i = 0; i < CNL_ARRAY_SIZE(map); i++) {
		if (!strstr(name, map[i].has) ||
		    (map[i].also && !strstr(name, map[i].also)))
			continue;
		/* An A100 with more than 41 GiB is the 80 GB model. */
		if (strcmp(map[i].type, "A100-40GB") == 0 && mem_mib > 42000)
			return cnl_catalog_find(cat, "A100-80GB");
		return cnl_catalog_find(cat, map[i].type);
	}
	return -1;
}

static int open_nvml(struct cnl_gpus *g, const char *lib, char *err,
                     size_t errlen)
{
	int (*init)(void), (*count)(unsigned *),
	    (*by_index)(unsigned, nvml_dev *),
	    (*name)(nvml_dev, char *, unsigned),
	    (*uuid)(nvml_dev, char *, unsigned),
	    (*mem)(nvml_dev, struct nvml_memory *);
	unsigned n = 0;
	int t;

	g->nvml = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!g->nvml) {
		snprintf(err, errlen, "nvml: cannot load %s: %s", lib,
		         dlerror());
		return -EIO;
	}
#define SYM(var, name)                                                         \
	do {                                                                   \
		*(void **)&(var) = dlsym(g->nvml, name);                       \
		if (!(var)) {                                                  \
			snprintf(err, errlen, "nvml: %s lacks %s", lib, name); \
			return -EIO;                                           \
		}                                                              \
	} while (0)
	SYM(init, "nvmlInit_v2");
	SYM(g->nvml_shutdown, "nvmlShutdown");
	SYM(count, "nvmlDeviceGetCount_v2");
	SYM(by_index, "nvmlDeviceGetHandleByIndex_v2");
	SYM(name, "nvmlDeviceGetName");
	SYM(uuid, "nvmlDeviceGetUUID");
	SYM(mem, "nvmlDeviceGetMemoryInfo");
#undef SYM
	if (init() != 0) {
		g->nvml_shutdown = NULL;
		snprintf(err, errlen, "nvml: nvmlInit failed (no driver?)");
		return -EIO;
	}
	if (count(&n) != 0 || n > CNL_GPU_MAX) {
		snprintf(err, errlen,
		         "nvml: cannot count GPUs (or more than %d)",
		         CNL_GPU_MAX);
		return -EIO;
	}
	for (unsigned i = 0; i < n; i++) {
		struct cnl_gpu_dev *d = &g->dev[i];
		struct nvml_memory m = {0};
		char nm[96] = "";
		nvml_dev h;

		if (by_index(i, &h) != 0 || name(h, nm, sizeof(nm)) != 0 ||
		    uuid(h, d->uuid, sizeof(d->uuid)) != 0 || mem(h, &m) != 0) {
			snprintf(err, errlen, "nvml: cannot read GPU %u", i);
			return -EIO;
		}
		d->index = (int)i;
		d->mem_mib = m.total >> 20;
		d->healthy = true;
		if ((t = cnl_gpus_type_from_name(g->cat, nm, d->mem_mib)) < 0) {
			snprintf(
			    err, errlen,
			    "nvml: GPU %u (\"%s\") matches no catalog type; "
			    "add it as a site type",
			    i, nm);
			return -CNL_EGPUTYPE;
		}
		snprintf(d->type, sizeof(d->type), "%s", g->cat->types[t].name);
		if (i && strcmp(d->type, g->dev[0].type) != 0) {
			snprintf(err, errlen,
			         "nvml: mixed GPU types on one node (%s, %s)",
			         g->dev[0].type, d->type);
			return -CNL_ECONFIG;
		}
	}
	g->n = (int)n;
	return 0;
}

/* ---- common -------------------------------------------------------------- */

int cnl_gpus_open(const char *spec, const struct cnl_catalog *cat,
                  struct cnl_gpus **ret, char *err, size_t errlen)
{
	struct cnl_gpus *g = cnl_xcalloc(1, sizeof(*g));
	int r;

	g->cat = cat;
	if (strncmp(spec, "fake:", 5) == 0) {
		g->kind = "fake";
		r = open_fake(g, spec + 5, err, errlen);
	} else if (strcmp(spec, "nvml") == 0 ||
	           strncmp(spec, "nvml:", 5) == 0) {
		g->kind = "nvml";
		r = open_nvml(g, spec[4] ? spec + 5 : "libnvidia-ml.so.1", err,
		              errlen);
	} else if (strcmp(spec, "none") == 0) {
		g->kind = "none";
		r = 0;
	} else {
		snprintf(err, errlen,
		         "GPU provider \"%s\": want fake:COUNTxTYPE,..., nvml "
		         "or none",
		         spec);
		r = -CNL_ECONFIG;
	}
	if (r < 0) {
		cnl_gpus_close(g);
		return r;
	}
	*ret = g;
	return 0;
}

void cnl_gpus_close(struct cnl_gpus *g)
{
	if (!g)
		return;
	if (g->nvml_shutdown)
		g->nvml_shutdown();
	if (g->nvml)
		dlclose(g->nvml);
	free(g);
}

const char *cnl_gpus_kind(const struct cnl_gpus *g)
{
	return g->kind;
}

int cnl_gpus_list(struct cnl_gpus *g, const struct cnl_gpu_dev **ret)
{
	*ret = g->dev;
	return g->n;
}

int cnl_gpus_mig_create(struct cnl_gpus *g, int index, const char *profile,
                        int start, char *uuid)
{
	int t, p;

	if (index < 0 || index >= g->n)
		return -CNL_ENOTFOUND;
	if (strcmp(g->kind, "fake") != 0)
		return -CNL_ENOMIG; /* see the top of this file */
	if ((t = cnl_catalog_find(g->cat, g->dev[index].type)) < 0 ||
	    (p = cnl_mig_find(&g->cat->types[t], profile)) < 0)
		return -CNL_ENOMIG;
	for (int i = 0; i < g->n_mig; i++)
		if (g->mig[i].gpu == index && g->mig[i].start == start)
			return -CNL_EDUP;
	if (g->n_mig == (int)CNL_ARRAY_SIZE(g->mig))
		return -CNL_ELIMIT;
	g->mig[g->n_mig].gpu = index;
	g->mig[g->n_mig].start = start;
	snprintf(g->mig[g->n_mig].uuid, CNL_GPU_UUID_MAX, "MIG-fake-%d-%s-%d",
	         index, profile, start);
	memcpy(uuid, g->mig[g->n_mig].uuid, CNL_GPU_UUID_MAX);
	g->n_mig++;
	return 0;
}

int cnl_gpus_mig_destroy(struct cnl_gpus *g, const char *uuid)
{
	for (int i = 0; i < g->n_mig; i++)
		if (strcmp(g->mig[i].uuid, uuid) == 0) {
			g->mig[i] = g->mig[--g->n_mig];
			return 0;
		}
	return -CNL_ENOTFOUND;
}

int cnl_gpus_mig_count(struct cnl_gpus *g, int index)
{
	int n = 0;

	for (int i = 0; i < g->n_mig; i++)
		n += g->mig[i].gpu == index;
	return n;
}
