/*
 * gpu.c - GPU providers (see gpu.h): the fake pool and NVML by dlopen
 * (and, in gpu_rocm.c, AMD GPUs through ROCm SMI by dlopen).
 *
 * NVML is declared here, not included: the agent builds without the CUDA
 * toolkit and runs on machines without a driver (the fake provider).  Only
 * the calls the agent needs are looked up.  Listing needs seven; a library
 * that lacks one of them is refused with its name.  The MIG calls are
 * optional: a library without one of them lists GPUs, logs the missing
 * name once, and answers MIG requests with -CNL_ENOMIG.
 *
 * Health.  A GPU is healthy while the driver answers for it: its memory
 * query succeeds.  A GPU that fell off the bus (NVML_ERROR_GPU_IS_LOST) or
 * stopped answering turns unhealthy; cnl_gpus_list() looks again each time.
 * Retired pages, row remapping and XID events are not read.
 *
 * MIG.  The fake provider emulates instances: each has a UUID
 * "MIG-fake-<gpu>-<profile>-<start>" and occupies its start slot until
 * destroyed.  With NVML, creating a catalog profile at start s:
 *
 *   1. MIG mode: switched on if off, but only when no process runs on the
 *      GPU (the switch tears down its contexts); where the driver leaves
 *      the change pending until a GPU reset (A100), -EAGAIN and a log.
 *   2. Profile: the NVML GPU-instance profile with the catalog profile's
 *      compute slices whose memory is nearest the catalog's (1g.10gb and
 *      1g.20gb share one slice and differ in memory); +me catalog profiles
 *      map only to NVML's media constants, others never do.
 *   3. Placement: s must be one of the profile's possible placements (the
 *      catalog's start slots are NVML's memory-slice starts).  An instance
 *      of the same profile already at s is -CNL_EDUP; any other overlap is
 *      refused by the driver and reported as -CNL_ENOSPACE.
 *   4. A GPU instance at s, one compute instance covering all of it, and
 *      the UUID of the MIG device they form (the "MIG-..." string that
 *      CUDA_VISIBLE_DEVICES takes), found among the GPU's MIG devices by
 *      GPU- and compute-instance ID.  A failure after the GPU instance
 *      exists destroys what was made.
 *
 * Destroying finds the MIG device by UUID and destroys its compute
 * instance, then its GPU instance.  The provider keeps no MIG state of its
 * own: NVML is asked each time, so instances survive an agent restart and
 * can still be destroyed by UUID.  MIG mode is never switched off.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "agent/gpu.h"
#include "agent/rocm-internal.h"
#include "cnlab/errors.h"
#include "common/log.h"
#include "common/util.h"

/* ---- NVML declarations --------------------------------------------------- */

/*
 * nvml.h's declarations, as far as the provider uses them: the layouts of
 * nvmlMemory_t, nvmlGpuInstancePlacement_t, nvmlGpuInstanceProfileInfo_t,
 * nvmlGpuInstanceInfo_t, nvmlComputeInstanceProfileInfo_t and
 * nvmlComputeInstanceInfo_t, and the constants below.
 */
typedef void *nvml_dev;
typedef void *nvml_gi;
typedef void *nvml_ci;

#define NVML_OK                       0
#define NVML_E_NOT_SUPPORTED          3
#define NVML_E_NOT_FOUND              6
#define NVML_E_INSUFFICIENT_SIZE      7
#define NVML_E_INSUFFICIENT_RESOURCES 23
#define NVML_MIG_ENABLE               1
#define NVML_GI_PROFILE_COUNT         0x11
#define NVML_CI_PROFILE_COUNT         0x8
#define NVML_CI_ENGINE_SHARED         0
#define NVML_MAX_PLACEMENTS           8 /* a profile has at most 8 */

struct nvml_memory {
	unsigned long long total, free, used;
};

struct nvml_placement {
	unsigned start, size; /* memory slices */
};

struct nvml_gi_profile {
	unsigned id, p2p, slice_count, instance_count, sm_count, ce, dec, enc,
	    jpeg, ofa;
	unsigned long long mem_mb;
};

struct nvml_gi_info {
	nvml_dev device;
	unsigned id, profile_id;
	struct nvml_placement placement;
};

struct nvml_ci_profile {
	unsigned id, slice_count, instance_count, sm_count, ce, dec, enc, jpeg,
	    ofa;
};

struct nvml_ci_info {
	nvml_dev device;
	nvml_gi gi;
	unsigned id, profile_id;
	struct nvml_placement placement;
};

/* The entry points; those after `mig_mode` are the optional MIG set. */
struct nvml_fns {
	int (*init)(void);
	int (*shutdown)(void);
	int (*count)(unsigned *);
	int (*by_index)(unsigned, nvml_dev *);
	int (*name)(nvml_dev, char *, unsigned);
	int (*uuid)(nvml_dev, char *, unsigned);
	int (*mem)(nvml_dev, struct nvml_memory *);
	int (*mig_mode)(nvml_dev, unsigned *, unsigned *);
	int (*set_mig_mode)(nvml_dev, unsigned, int *);
	int (*procs)(nvml_dev, unsigned *, void *);
	int (*gi_profile)(nvml_dev, unsigned, struct nvml_gi_profile *);
	int (*placements)(nvml_dev, unsigned, struct nvml_placement *,
	                  unsigned *);
	int (*gi_create)(nvml_dev, unsigned, const struct nvml_placement *,
	                 nvml_gi *);
	int (*gi_info)(nvml_gi, struct nvml_gi_info *);
	int (*gi_list)(nvml_dev, unsigned, nvml_gi *, unsigned *);
	int (*gi_by_id)(nvml_dev, unsigned, nvml_gi *);
	int (*gi_destroy)(nvml_gi);
	int (*ci_profile)(nvml_gi, unsigned, unsigned,
	                  struct nvml_ci_profile *);
	int (*ci_create)(nvml_gi, unsigned, nvml_ci *);
	int (*ci_info)(nvml_ci, struct nvml_ci_info *);
	int (*ci_by_id)(nvml_gi, unsigned, nvml_ci *);
	int (*ci_destroy)(nvml_ci);
	int (*mig_max)(nvml_dev, unsigned *);
	int (*mig_by_index)(nvml_dev, unsigned, nvml_dev *);
	int (*gi_id)(nvml_dev, unsigned *);
	int (*ci_id)(nvml_dev, unsigned *);
	/* Telemetry, optional each (cnl_gpus_telemetry). */
	int (*util)(nvml_dev, unsigned *); /* {gpu, memory} percent */
	int (*temp)(nvml_dev, unsigned, unsigned *);
	int (*power)(nvml_dev, unsigned *); /* milliwatts */
	int (*clock)(nvml_dev, unsigned, unsigned *);
};

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
	void *nvml;   /* dlopen handle */
	bool nvml_up; /* nvmlInit succeeded: shut down on close */
	bool mig_ok;  /* the library has the MIG entry points */
	struct nvml_fns fn;
	struct cnl_rocm *rocm; /* the rocm provider (gpu_rocm.c) */
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
			snprintf(d->model, sizeof(d->model), "%s",
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
	    /* ROCm SMI's names: "AMD Instinct MI300X"; an Aldebaran's device
	     * name covers both boards ("[Instinct MI250X / MI250]"): the
	     * smaller unless its board (subsystem) name says MI250X. */
	    {"MI300X", NULL, "MI300X"},
	    {"MI250X / MI250", NULL, "MI250"},
	    {"MI250X", NULL, "MI250X"},
	    {"MI250", NULL, "MI250"},
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
	struct nvml_fns *f = &g->fn;
	const char *missing = NULL;
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
	SYM(f->init, "nvmlInit_v2");
	SYM(f->shutdown, "nvmlShutdown");
	SYM(f->count, "nvmlDeviceGetCount_v2");
	SYM(f->by_index, "nvmlDeviceGetHandleByIndex_v2");
	SYM(f->name, "nvmlDeviceGetName");
	SYM(f->uuid, "nvmlDeviceGetUUID");
	SYM(f->mem, "nvmlDeviceGetMemoryInfo");
#undef SYM
	/* MIG: optional; a driver without it lists GPUs but makes no MIG. */
#define OPT(var, name)                                   \
	do {                                             \
		*(void **)&(var) = dlsym(g->nvml, name); \
		if (!(var) && !missing)                  \
			missing = name;                  \
	} while (0)
	OPT(f->mig_mode, "nvmlDeviceGetMigMode");
	OPT(f->set_mig_mode, "nvmlDeviceSetMigMode");
	OPT(f->procs, "nvmlDeviceGetComputeRunningProcesses_v3");
	OPT(f->gi_profile, "nvmlDeviceGetGpuInstanceProfileInfo");
	OPT(f->placements, "nvmlDeviceGetGpuInstancePossiblePlacements_v2");
	OPT(f->gi_create, "nvmlDeviceCreateGpuInstanceWithPlacement");
	OPT(f->gi_info, "nvmlGpuInstanceGetInfo");
	OPT(f->gi_list, "nvmlDeviceGetGpuInstances");
	OPT(f->gi_by_id, "nvmlDeviceGetGpuInstanceById");
	OPT(f->gi_destroy, "nvmlGpuInstanceDestroy");
	OPT(f->ci_profile, "nvmlGpuInstanceGetComputeInstanceProfileInfo");
	OPT(f->ci_create, "nvmlGpuInstanceCreateComputeInstance");
	OPT(f->ci_info, "nvmlComputeInstanceGetInfo_v2");
	OPT(f->ci_by_id, "nvmlGpuInstanceGetComputeInstanceById");
	OPT(f->ci_destroy, "nvmlComputeInstanceDestroy");
	OPT(f->mig_max, "nvmlDeviceGetMaxMigDeviceCount");
	OPT(f->mig_by_index, "nvmlDeviceGetMigDeviceHandleByIndex");
	OPT(f->gi_id, "nvmlDeviceGetGpuInstanceId");
	OPT(f->ci_id, "nvmlDeviceGetComputeInstanceId");
#undef OPT
	/* Telemetry: each call on its own, a missing one leaves its field
	 * out of /metrics. */
	*(void **)&f->util = dlsym(g->nvml, "nvmlDeviceGetUtilizationRates");
	*(void **)&f->temp = dlsym(g->nvml, "nvmlDeviceGetTemperature");
	*(void **)&f->power = dlsym(g->nvml, "nvmlDeviceGetPowerUsage");
	*(void **)&f->clock = dlsym(g->nvml, "nvmlDeviceGetClockInfo");
	g->mig_ok = !missing;
	if (missing)
		cnl_log(CNL_LOG_WARN, "nvml: no MIG support in the library",
		        "lib=%s missing=%s", lib, missing);
	if (f->init() != NVML_OK) {
		snprintf(err, errlen, "nvml: nvmlInit failed (no driver?)");
		return -EIO;
	}
	g->nvml_up = true;
	if (f->count(&n) != NVML_OK || n > CNL_GPU_MAX) {
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

		if (f->by_index(i, &h) != NVML_OK ||
		    f->name(h, nm, sizeof(nm)) != NVML_OK ||
		    f->uuid(h, d->uuid, sizeof(d->uuid)) != NVML_OK) {
			snprintf(err, errlen, "nvml: cannot read GPU %u", i);
			return -EIO;
		}
		d->index = (int)i;
		/* Health: see the top of this file. */
		d->healthy = f->mem(h, &m) == NVML_OK;
		d->mem_mib = m.total >> 20;
		if ((t = cnl_gpus_type_from_name(g->cat, nm, d->mem_mib)) < 0) {
			snprintf(
			    err, errlen,
			    "nvml: GPU %u (\"%s\") matches no catalog type; "
			    "add it as a site type",
			    i, nm);
			return -CNL_EGPUTYPE;
		}
		snprintf(d->type, sizeof(d->type), "%s", g->cat->types[t].name);
		snprintf(d->model, sizeof(d->model), "%s", nm);
		if (!d->healthy)
			d->mem_mib = g->cat->types[t].vram_mib;
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

/* Re-read each GPU's health (listing is the agent's periodic look). */
static void nvml_refresh(struct cnl_gpus *g)
{
	for (int i = 0; i < g->n; i++) {
		struct nvml_memory m;
		nvml_dev h;

		g->dev[i].healthy =
		    g->fn.by_index((unsigned)i, &h) == NVML_OK &&
		    g->fn.mem(h, &m) == NVML_OK;
	}
}

/*
 * MIG mode on for GPU @index, switching it on when it is off and the GPU
 * runs nothing (the switch resets the GPU's contexts).  -CNL_ENOMIG where
 * the GPU has no MIG, -EBUSY while processes run on it, -EAGAIN when the
 * driver holds the change pending until a GPU reset.
 */
static int nvml_mig_on(struct cnl_gpus *g, int index, nvml_dev h)
{
	unsigned cur = 0, pend = 0, nproc = 0;
	int r, act = 0;

	r = g->fn.mig_mode(h, &cur, &pend);
	if (r == NVML_E_NOT_SUPPORTED)
		return -CNL_ENOMIG;
	if (r != NVML_OK)
		return -EIO;
	if (cur == NVML_MIG_ENABLE)
		return 0;
	r = g->fn.procs(h, &nproc, NULL);
	if ((r != NVML_OK && r != NVML_E_INSUFFICIENT_SIZE) || nproc > 0) {
		cnl_log(CNL_LOG_WARN,
		        "nvml: MIG mode is off and the GPU is in use; not "
		        "switching it",
		        "gpu=%d processes=%u", index, nproc);
		return -EBUSY;
	}
	if ((r = g->fn.set_mig_mode(h, NVML_MIG_ENABLE, &act)) != NVML_OK) {
		cnl_log(CNL_LOG_WARN, "nvml: cannot enable MIG mode",
		        "gpu=%d nvml_error=%d", index, r);
		return r == NVML_E_NOT_SUPPORTED ? -CNL_ENOMIG : -EIO;
	}
	if (g->fn.mig_mode(h, &cur, &pend) != NVML_OK)
		return -EIO;
	if (cur != NVML_MIG_ENABLE) {
		cnl_log(CNL_LOG_WARN,
		        "nvml: MIG mode is pending until the GPU is reset",
		        "gpu=%d activation=%d", index, act);
		return -EAGAIN;
	}
	cnl_log(CNL_LOG_INFO, "nvml: MIG mode enabled", "gpu=%d", index);
	return 0;
}

/*
 * The NVML GPU-instance profile for catalog profile @mp: one with the same
 * number of compute slices whose memory is nearest the catalog's, the +me
 * (media) constants only for a media profile.  A 1g profile with two
 * memory slices (1g.20gb on an H100) is told from 1g.10gb by its memory.
 * None within a quarter of the catalog's memory: -CNL_EPROFILE.
 */
static int nvml_pick_profile(struct cnl_gpus *g, nvml_dev h,
                             const struct cnl_mig_profile *mp,
                             struct nvml_gi_profile *ret)
{
	/* 1, 2, 3, 4, 7, 8, 6 slices, 1 slice REV2, and NO_ME variants. */
	static const unsigned plain[] = {0x0, 0x1, 0x2, 0x3, 0x4,
	                                 0x5, 0x6, 0x9, 0xd, 0xe};
	/* 1 and 2 slices REV1 (+me), and ALL_ME variants. */
	static const unsigned media[] = {0x7, 0x8, 0xf, 0x10};
	const unsigned *c = mp->media ? media : plain;
	size_t nc = mp->media ? CNL_ARRAY_SIZE(media) : CNL_ARRAY_SIZE(plain);
	unsigned long long best = ~0ULL;

	for (size_t i = 0; i < nc; i++) {
		struct nvml_gi_profile p;
		unsigned long long d;

		if (g->fn.gi_profile(h, c[i], &p) != NVML_OK ||
		    p.slice_count != mp->compute)
			continue;
		d = p.mem_mb > mp->mem_mib ? p.mem_mb - mp->mem_mib
		                           : mp->mem_mib - p.mem_mb;
		if (d < best) {
			best = d;
			*ret = p;
		}
	}
	return best != ~0ULL && best * 4 <= mp->mem_mib ? 0 : -CNL_EPROFILE;
}

/* The UUID of the MIG device of GPU instance @gid, compute instance @cid. */
static int nvml_mig_uuid(struct cnl_gpus *g, nvml_dev h, unsigned gid,
                         unsigned cid, char *uuid)
{
	unsigned max = 0, a, b;
	nvml_dev m;

	if (g->fn.mig_max(h, &max) != NVML_OK)
		return -EIO;
	for (unsigned i = 0; i < max; i++)
		if (g->fn.mig_by_index(h, i, &m) == NVML_OK &&
		    g->fn.gi_id(m, &a) == NVML_OK &&
		    g->fn.ci_id(m, &b) == NVML_OK && a == gid && b == cid)
			return g->fn.uuid(m, uuid, CNL_GPU_UUID_MAX) == NVML_OK
			           ? 0
			           : -EIO;
	return -EIO;
}

/* The UUID of the (first) MIG device of GPU instance @gid, or "". */
static void nvml_gi_uuid(struct cnl_gpus *g, nvml_dev h, unsigned gid,
                         char *uuid)
{
	unsigned max = 0, a;
	nvml_dev m;

	uuid[0] = '\0';
	if (g->fn.mig_max(h, &max) != NVML_OK)
		return;
	for (unsigned i = 0; i < max; i++)
		if (g->fn.mig_by_index(h, i, &m) == NVML_OK &&
		    g->fn.gi_id(m, &a) == NVML_OK && a == gid) {
			if (g->fn.uuid(m, uuid, CNL_GPU_UUID_MAX) != NVML_OK)
				uuid[0] = '\0';
			return;
		}
}

static int nvml_mig_create(struct cnl_gpus *g, int index,
                           const struct cnl_mig_profile *mp, int start,
                           char *uuid)
{
	struct nvml_placement pl[NVML_MAX_PLACEMENTS];
	struct nvml_gi_profile prof = {0};
	struct nvml_ci_profile cp;
	struct nvml_gi_info gii;
	struct nvml_ci_info cii;
	nvml_gi gis[CNL_MIG_COMPUTE_SLICES + 1], gi;
	unsigned n = NVML_MAX_PLACEMENTS, ok = 0;
	nvml_ci ci = NULL;
	nvml_dev h;
	int r;

	if (!g->mig_ok)
		return -CNL_ENOMIG;
	if (g->fn.by_index((unsigned)index, &h) != NVML_OK)
		return -EIO;
	if ((r = nvml_mig_on(g, index, h)) < 0)
		return r;
	if ((r = nvml_pick_profile(g, h, mp, &prof)) < 0)
		return r;
	/* The start must be one of the profile's placements. */
	if (g->fn.placements(h, prof.id, pl, &n) != NVML_OK)
		return -EIO;
	for (unsigned i = 0; i < n && i < NVML_MAX_PLACEMENTS; i++)
		ok |= start >= 0 && pl[i].start == (unsigned)start;
	if (!ok)
		return -EINVAL;
	/* An instance of this profile already at @start: -CNL_EDUP. */
	n = CNL_ARRAY_SIZE(gis);
	if (prof.instance_count <= n &&
	    g->fn.gi_list(h, prof.id, gis, &n) == NVML_OK)
		for (unsigned i = 0; i < n && i < CNL_ARRAY_SIZE(gis); i++)
			if (g->fn.gi_info(gis[i], &gii) == NVML_OK &&
			    gii.placement.start == (unsigned)start) {
				/* Shared (a host instance): its UUID too. */
				nvml_gi_uuid(g, h, gii.id, uuid);
				return -CNL_EDUP;
			}
	pl[0].start = (unsigned)start;
	pl[0].size = mp->mem_slots;
	r = g->fn.gi_create(h, prof.id, &pl[0], &gi);
	if (r == NVML_E_INSUFFICIENT_RESOURCES)
		return -CNL_ENOSPACE;
	if (r != NVML_OK) {
		cnl_log(CNL_LOG_WARN, "nvml: cannot create GPU instance",
		        "gpu=%d profile=%s start=%d nvml_error=%d", index,
		        mp->name, start, r);
		return -EIO;
	}
	/* One compute instance over the whole GPU instance. */
	r = -EIO;
	for (unsigned c = 0; c < NVML_CI_PROFILE_COUNT && !ci; c++)
		if (g->fn.ci_profile(gi, c, NVML_CI_ENGINE_SHARED, &cp) ==
		        NVML_OK &&
		    cp.slice_count == prof.slice_count &&
		    g->fn.ci_create(gi, cp.id, &ci) != NVML_OK)
			ci = NULL;
	if (ci && g->fn.gi_info(gi, &gii) == NVML_OK &&
	    g->fn.ci_info(ci, &cii) == NVML_OK)
		r = nvml_mig_uuid(g, h, gii.id, cii.id, uuid);
	if (r < 0) {
		cnl_log(CNL_LOG_WARN, "nvml: cannot set up compute instance",
		        "gpu=%d profile=%s start=%d", index, mp->name, start);
		if (ci)
			g->fn.ci_destroy(ci);
		g->fn.gi_destroy(gi);
	}
	return r;
}

static int nvml_mig_destroy(struct cnl_gpus *g, const char *uuid)
{
	char u[CNL_GPU_UUID_MAX];
	unsigned max, gid, cid;
	nvml_dev h, m;
	nvml_gi gi;
	nvml_ci ci;

	if (!g->mig_ok)
		return -CNL_ENOTFOUND;
	for (int d = 0; d < g->n; d++) {
		if (g->fn.by_index((unsigned)d, &h) != NVML_OK ||
		    g->fn.mig_max(h, &max) != NVML_OK)
			continue;
		for (unsigned i = 0; i < max; i++) {
			if (g->fn.mig_by_index(h, i, &m) != NVML_OK ||
			    g->fn.uuid(m, u, sizeof(u)) != NVML_OK ||
			    strcmp(u, uuid) != 0)
				continue;
			/* Compute instance first: a GPU instance holding one
			 * cannot be destroyed. */
			if (g->fn.gi_id(m, &gid) != NVML_OK ||
			    g->fn.ci_id(m, &cid) != NVML_OK ||
			    g->fn.gi_by_id(h, gid, &gi) != NVML_OK ||
			    g->fn.ci_by_id(gi, cid, &ci) != NVML_OK ||
			    g->fn.ci_destroy(ci) != NVML_OK ||
			    g->fn.gi_destroy(gi) != NVML_OK) {
				cnl_log(CNL_LOG_WARN,
				        "nvml: cannot destroy MIG instance",
				        "gpu=%d uuid=%s", d, uuid);
				return -EIO;
			}
			return 0;
		}
	}
	return -CNL_ENOTFOUND;
}

/* GPU instances on GPU @index, of every profile. */
static int nvml_mig_count(struct cnl_gpus *g, int index)
{
	nvml_gi gis[CNL_MIG_COMPUTE_SLICES + 1];
	unsigned cur, pend, n;
	int total = 0;
	nvml_dev h;

	if (!g->mig_ok || g->fn.by_index((unsigned)index, &h) != NVML_OK ||
	    g->fn.mig_mode(h, &cur, &pend) != NVML_OK || cur != NVML_MIG_ENABLE)
		return 0;
	for (unsigned c = 0; c < NVML_GI_PROFILE_COUNT; c++) {
		struct nvml_gi_profile p;

		n = CNL_ARRAY_SIZE(gis);
		if (g->fn.gi_profile(h, c, &p) == NVML_OK &&
		    p.instance_count <= n &&
		    g->fn.gi_list(h, p.id, gis, &n) == NVML_OK)
			total += (int)n;
	}
	return total;
}

/* ---- processes (the GPU memory audit) ------------------------------------ */

/* nvmlProcessInfo_t of nvml.h (the _v2/_v3 calls' layout). */
struct nvml_proc {
	unsigned pid;
	unsigned long long used;
	unsigned gi, ci;
};

#define NVML_VALUE_NOT_AVAILABLE (~0ULL)

/* What one pid holds on one GPU: by the GPU's own list, and summed over
 * its MIG devices' lists. */
struct proc_acc {
	int pid;
	uint64_t gpu_used, mig_used;
	bool gpu_known, mig_known;
};

/*
 * The processes of device (or MIG device) @h into *@buf, which grows as
 * the driver asks (NVML_ERROR_INSUFFICIENT_SIZE sets the count it needs;
 * processes may start between two calls, so a few tries, each with room
 * to spare).  0 with their number in *@ret_n, or -EIO.
 */
static int nvml_list(struct cnl_gpus *g, nvml_dev h, struct nvml_proc **buf,
                     unsigned *cap, unsigned *ret_n)
{
	for (int tries = 0; tries < 4; tries++) {
		unsigned n = *cap;
		int r = g->fn.procs(h, &n, *buf);

		if (r == NVML_OK) {
			*ret_n = n <= *cap ? n : *cap;
			return 0;
		}
		if (r != NVML_E_INSUFFICIENT_SIZE || n > 1u << 20)
			return -EIO;
		*cap = n + 16;
		*buf = cnl_xrealloc(*buf, *cap * sizeof(**buf));
	}
	return -EIO;
}

/* Add @n entries of @p to the accumulators of one GPU (@mig: from a MIG
 * device's list). */
static void acc_add(struct proc_acc **acc, size_t *n_acc, size_t *cap_acc,
                    const struct nvml_proc *p, unsigned n, bool mig)
{
	for (unsigned i = 0; i < n; i++) {
		struct proc_acc *a = NULL;

		if (p[i].pid == 0 || p[i].pid > INT32_MAX)
			continue;
		for (size_t k = 0; k < *n_acc && !a; k++)
			if ((*acc)[k].pid == (int)p[i].pid)
				a = &(*acc)[k];
		if (!a) {
			if (*n_acc == *cap_acc) {
				*cap_acc = *cap_acc ? *cap_acc * 2 : 16;
				*acc = cnl_xrealloc(*acc,
				                    *cap_acc * sizeof(**acc));
			}
			a = &(*acc)[(*n_acc)++];
			memset(a, 0, sizeof(*a));
			a->pid = (int)p[i].pid;
		}
		if (p[i].used == NVML_VALUE_NOT_AVAILABLE)
			continue;
		if (mig) {
			a->mig_used += p[i].used;
			a->mig_known = true;
		} else {
			a->gpu_used += p[i].used;
			a->gpu_known = true;
		}
	}
}

static int nvml_procs(struct cnl_gpus *g, struct cnl_gpu_proc *ret, int max)
{
	struct nvml_proc *buf = NULL;
	struct proc_acc *acc = NULL;
	size_t cap_acc = 0;
	unsigned cap = 0;
	int total = 0;

	if (!g->fn.procs)
		return -EOPNOTSUPP;
	cap = 8; /* grows as the driver asks */
	buf = cnl_xcalloc(cap, sizeof(*buf));
	for (int d = 0; d < g->n; d++) {
		unsigned cur = 0, pend = 0, nmig = 0, n = 0;
		size_t n_acc = 0;
		bool mig;
		nvml_dev h, m;

		if (g->fn.by_index((unsigned)d, &h) != NVML_OK)
			continue;
		mig = g->mig_ok && g->fn.mig_mode(h, &cur, &pend) == NVML_OK &&
		      cur == NVML_MIG_ENABLE;
		/* The GPU's own list; in MIG mode a driver may refuse it
		 * (the MIG devices' lists then say it all). */
		if (nvml_list(g, h, &buf, &cap, &n) == 0)
			acc_add(&acc, &n_acc, &cap_acc, buf, n, false);
		else if (!mig)
			continue; /* lost or not answering: nothing to read */
		if (mig && g->fn.mig_max(h, &nmig) == NVML_OK)
			for (unsigned i = 0; i < nmig; i++)
				if (g->fn.mig_by_index(h, i, &m) == NVML_OK &&
				    nvml_list(g, m, &buf, &cap, &n) == 0)
					acc_add(&acc, &n_acc, &cap_acc, buf, n,
					        true);
		for (size_t k = 0; k < n_acc; k++, total++) {
			const struct proc_acc *a = &acc[k];

			if (total >= max)
				continue;
			ret[total].pid = a->pid;
			ret[total].gpu = d;
			if (!a->gpu_known && !a->mig_known)
				ret[total].used = CNL_GPU_USED_UNKNOWN;
			else
				ret[total].used = a->gpu_used > a->mig_used
				                      ? a->gpu_used
				                      : a->mig_used;
		}
	}
	free(acc);
	free(buf);
	return total;
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
	} else if (strcmp(spec, "rocm") == 0 ||
	           strncmp(spec, "rocm:", 5) == 0) {
		g->kind = "rocm";
		r = cnl_rocm_open(spec[4] ? spec + 5 : NULL, cat,
		                  cnl_gpus_type_from_name, g->dev, CNL_GPU_MAX,
		                  &g->rocm, err, errlen);
		if (r >= 0) {
			g->n = r;
			r = 0;
		}
	} else if (strcmp(spec, "none") == 0) {
		g->kind = "none";
		r = 0;
	} else {
		snprintf(err, errlen,
		         "GPU provider \"%s\": want fake:COUNTxTYPE,..., nvml, "
		         "rocm or none",
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
	if (g->nvml_up)
		g->fn.shutdown();
	if (g->nvml)
		dlclose(g->nvml);
	cnl_rocm_close(g->rocm);
	free(g);
}

const char *cnl_gpus_kind(const struct cnl_gpus *g)
{
	return g->kind;
}

const char *cnl_gpus_vendor(const struct cnl_gpus *g)
{
	int t;

	if (!g || g->n == 0 ||
	    (t = cnl_catalog_find(g->cat, g->dev[0].type)) < 0)
		return "";
	return g->cat->types[t].vendor;
}

int cnl_gpus_list(struct cnl_gpus *g, const struct cnl_gpu_dev **ret)
{
	if (g->nvml_up)
		nvml_refresh(g);
	if (g->rocm)
		cnl_rocm_refresh(g->rocm, g->dev, g->n);
	*ret = g->dev;
	return g->n;
}

int cnl_gpus_procs(struct cnl_gpus *g, struct cnl_gpu_proc *ret, int max)
{
	if (!g->nvml_up)
		return -EOPNOTSUPP;
	return nvml_procs(g, ret, max);
}

int cnl_gpus_mig_create(struct cnl_gpus *g, int index, const char *profile,
                        int start, char *uuid)
{
	int t, p;

	if (index < 0 || index >= g->n)
		return -CNL_ENOTFOUND;
	if ((t = cnl_catalog_find(g->cat, g->dev[index].type)) < 0 ||
	    (p = cnl_mig_find(&g->cat->types[t], profile)) < 0)
		return -CNL_ENOMIG;
	if (g->nvml_up)
		return nvml_mig_create(g, index, &g->cat->types[t].mig[p],
		                       start, uuid);
	for (int i = 0; i < g->n_mig; i++)
		if (g->mig[i].gpu == index && g->mig[i].start == start) {
			memcpy(uuid, g->mig[i].uuid, CNL_GPU_UUID_MAX);
			return -CNL_EDUP;
		}
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
	if (g->nvml_up)
		return nvml_mig_destroy(g, uuid);
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

	if (g->nvml_up)
		return index >= 0 && index < g->n ? nvml_mig_count(g, index)
		                                  : 0;
	for (int i = 0; i < g->n_mig; i++)
		n += g->mig[i].gpu == index;
	return n;
}

/*
 * The catalog name of the profile of GPU instance @gid on GPU @index into
 * @name (CNL_NAME_MAX): the catalog profile that nvml_pick_profile() maps
 * to the instance's NVML profile ID; "" where none does.
 */
static void nvml_gi_profile_name(struct cnl_gpus *g, nvml_dev h, int index,
                                 unsigned gid, char *name)
{
	struct nvml_gi_info info;
	const struct cnl_gpu_type *ty;
	nvml_gi gi;
	int t;

	name[0] = '\0';
	if (g->fn.gi_by_id(h, gid, &gi) != NVML_OK ||
	    g->fn.gi_info(gi, &info) != NVML_OK ||
	    (t = cnl_catalog_find(g->cat, g->dev[index].type)) < 0)
		return;
	ty = &g->cat->types[t];
	for (int k = 0; k < ty->n_mig; k++) {
		struct nvml_gi_profile p;

		if (nvml_pick_profile(g, h, &ty->mig[k], &p) == 0 &&
		    p.id == info.profile_id) {
			snprintf(name, CNL_NAME_MAX, "%s", ty->mig[k].name);
			return;
		}
	}
}

int cnl_gpus_mig_telemetry(struct cnl_gpus *g, int index,
                           struct cnl_gpu_mig_telemetry *ret, int cap)
{
	const struct nvml_fns *f = &g->fn;
	unsigned max = 0, cur, pend;
	nvml_dev h, m;
	int n = 0;

	if (!g->nvml_up || !g->mig_ok || index < 0 || index >= g->n ||
	    f->by_index((unsigned)index, &h) != NVML_OK ||
	    f->mig_mode(h, &cur, &pend) != NVML_OK || cur != NVML_MIG_ENABLE ||
	    f->mig_max(h, &max) != NVML_OK)
		return 0;
	for (unsigned i = 0; i < max && n < cap; i++) {
		struct cnl_gpu_mig_telemetry *t = &ret[n];
		struct nvml_memory mem;
		unsigned gid, cid, u[2];

		if (f->mig_by_index(h, i, &m) != NVML_OK ||
		    f->gi_id(m, &gid) != NVML_OK ||
		    f->ci_id(m, &cid) != NVML_OK)
			continue;
		memset(t, 0, sizeof(*t));
		t->gi_id = (int)gid;
		t->ci_id = (int)cid;
		t->fb_total_mib = t->fb_used_mib = t->fb_free_mib = -1;
		t->util_pct = -1;
		if (f->uuid(m, t->uuid, sizeof(t->uuid)) != NVML_OK)
			t->uuid[0] = '\0';
		if (f->mem(m, &mem) == NVML_OK) {
			t->fb_total_mib = (int64_t)(mem.total >> 20);
			t->fb_used_mib = (int64_t)(mem.used >> 20);
			t->fb_free_mib = (int64_t)(mem.free >> 20);
		}
		/* NOT_SUPPORTED on MIG devices today; taken if it comes. */
		if (f->util && f->util(m, u) == NVML_OK)
			t->util_pct = u[0];
		nvml_gi_profile_name(g, h, index, gid, t->profile);
		n++;
	}
	return n;
}

#define NVML_TEMPERATURE_GPU 0
#define NVML_CLOCK_SM        1

int cnl_gpus_telemetry(struct cnl_gpus *g, int index,
                       struct cnl_gpu_telemetry *ret)
{
	struct cnl_gpu_telemetry t = {-1, -1, -1, -1, -1, -1, -1, -1};
	const struct nvml_fns *f = &g->fn;
	struct nvml_memory m;
	unsigned u[2], v;
	nvml_dev h;

	if (index < 0 || index >= g->n)
		return -EINVAL;
	t.fb_total_mib = (int64_t)g->dev[index].mem_mib;
	if (g->nvml_up && f->by_index((unsigned)index, &h) == NVML_OK) {
		if (f->mem(h, &m) == NVML_OK) {
			t.fb_total_mib = (int64_t)(m.total >> 20);
			t.fb_used_mib = (int64_t)(m.used >> 20);
			t.fb_free_mib = (int64_t)(m.free >> 20);
		}
		if (f->util && f->util(h, u) == NVML_OK) {
			t.util_pct = u[0];
			t.mem_util_pct = u[1];
		}
		if (f->temp && f->temp(h, NVML_TEMPERATURE_GPU, &v) == NVML_OK)
			t.temp_c = v;
		if (f->power && f->power(h, &v) == NVML_OK)
			t.power_mw = v;
		if (f->clock && f->clock(h, NVML_CLOCK_SM, &v) == NVML_OK)
			t.sm_clock_mhz = v;
	}
	if (g->rocm)
		cnl_rocm_telemetry(g->rocm, index, &t);
	*ret = t;
	return 0;
}
