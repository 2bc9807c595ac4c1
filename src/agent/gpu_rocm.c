/*
 * gpu_rocm.c - the ROCm SMI provider: AMD Instinct GPUs (MI300X, MI250X,
 * MI250) listed through librocm_smi64, opened with dlopen at run time like
 * NVML (gpu.c), so the agent builds and runs on nodes without ROCm.
 *
 * ROCm SMI is declared here, not included (the agent builds without
 * librocm-smi-dev); where rocm_smi.h is installed, the declarations are
 * checked against it at compile time (the static assertions below).
 *
 * Listing:  rsmi_init(0), rsmi_num_monitor_devices, then per device its
 * name (rsmi_dev_name_get; the board's subsystem name first where the
 * library has rsmi_dev_subsystem_name_get, since the device name of an
 * MI250X reads "... [Instinct MI250X / MI250]"), its VRAM
 * (rsmi_dev_memory_total_get, RSMI_MEM_TYPE_VRAM), its unique ID
 * (rsmi_dev_unique_id_get, as "GPU-<16 hex digits>", the form
 * ROCR_VISIBLE_DEVICES takes) and its PCI address (rsmi_dev_pci_id_get),
 * from which /sys gives the DRM render node a container needs.
 *
 * Health: a GPU is healthy while its memory query answers.  AMD GPUs have
 * no MIG: the catalog's AMD types have no profiles, and gpu.c answers MIG
 * requests with -CNL_ENOMIG before asking a provider.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/gpu.h"
#include "agent/rocm-internal.h"
#include "cnlab/errors.h"
#include "common/util.h"

/* ROCm SMI's RSMI_STATUS_SUCCESS and RSMI_MEM_TYPE_VRAM. */
#define ROCM_OK   0
#define ROCM_VRAM 0

typedef int (*rsmi_init_fn)(uint64_t);
typedef int (*rsmi_void_fn)(void);
typedef int (*rsmi_count_fn)(uint32_t *);
typedef int (*rsmi_name_fn)(uint32_t, char *, size_t);
typedef int (*rsmi_mem_fn)(uint32_t, int, uint64_t *);
typedef int (*rsmi_u64_fn)(uint32_t, uint64_t *);
typedef int (*rsmi_u32_fn)(uint32_t, uint32_t *);
typedef int (*rsmi_temp_fn)(uint32_t, uint32_t, int, int64_t *);
typedef int (*rsmi_power_fn)(uint32_t, uint32_t, uint64_t *);

#if __has_include(<rocm_smi/rocm_smi.h>)
#include <rocm_smi/rocm_smi.h>
/* Our declarations are ROCm SMI's ABI (enums are ints on x86-64). */
_Static_assert(RSMI_STATUS_SUCCESS == ROCM_OK, "rsmi status");
_Static_assert(RSMI_MEM_TYPE_VRAM == ROCM_VRAM, "rsmi VRAM type");
_Static_assert(sizeof(rsmi_status_t) == sizeof(int), "rsmi_status_t");
_Static_assert(sizeof(rsmi_memory_type_t) == sizeof(int), "rsmi mem type");
#define SAME(fn, type)                                                       \
	_Static_assert(                                                      \
	    __builtin_types_compatible_p(__typeof__(&fn),                    \
	                                 __typeof__(rsmi_status_t(*) type)), \
	    #fn)
SAME(rsmi_init, (uint64_t));
SAME(rsmi_shut_down, (void));
SAME(rsmi_num_monitor_devices, (uint32_t *));
SAME(rsmi_dev_name_get, (uint32_t, char *, size_t));
SAME(rsmi_dev_subsystem_name_get, (uint32_t, char *, size_t));
SAME(rsmi_dev_memory_total_get, (uint32_t, rsmi_memory_type_t, uint64_t *));
SAME(rsmi_dev_unique_id_get, (uint32_t, uint64_t *));
SAME(rsmi_dev_pci_id_get, (uint32_t, uint64_t *));
SAME(rsmi_dev_busy_percent_get, (uint32_t, uint32_t *));
SAME(rsmi_dev_memory_busy_percent_get, (uint32_t, uint32_t *));
SAME(rsmi_dev_memory_usage_get, (uint32_t, rsmi_memory_type_t, uint64_t *));
SAME(rsmi_dev_temp_metric_get,
     (uint32_t, uint32_t, rsmi_temperature_metric_t, int64_t *));
SAME(rsmi_dev_power_ave_get, (uint32_t, uint32_t, uint64_t *));
_Static_assert(RSMI_TEMP_TYPE_EDGE == 0 && RSMI_TEMP_CURRENT == 0,
               "rsmi edge sensor, current value");
#undef SAME
#endif

struct cnl_rocm {
	void *lib;
	bool up; /* rsmi_init succeeded: shut down on close */
	rsmi_init_fn init;
	rsmi_void_fn shut_down;
	rsmi_count_fn count;
	rsmi_name_fn name;
	rsmi_name_fn subsystem; /* optional */
	rsmi_mem_fn mem_total;
	rsmi_u64_fn unique_id;
	rsmi_u64_fn pci_id; /* optional */
	/* Telemetry, optional each (cnl_rocm_telemetry). */
	rsmi_u32_fn busy, mem_busy;
	rsmi_mem_fn mem_used;
	rsmi_temp_fn temp;
	rsmi_power_fn power;
};

void cnl_rocm_close(struct cnl_rocm *r)
{
	if (!r)
		return;
	if (r->up)
		r->shut_down();
	if (r->lib)
		dlclose(r->lib);
	free(r);
}

static void *load(const char *lib, char *err, size_t errlen)
{
	/* The development link (Debian, /opt/rocm/lib), then the SONAMEs of
	 * ROCm 5 (Debian's 1) and ROCm 6 (7). */
	static const char *const names[] = {
	    "librocm_smi64.so", "librocm_smi64.so.1", "librocm_smi64.so.7",
	    "/opt/rocm/lib/librocm_smi64.so"};
	void *h = NULL;

	if (lib) {
		h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
		if (!h)
			snprintf(err, errlen, "rocm: cannot load %s: %s", lib,
			         dlerror());
		return h;
	}
	for (size_t i = 0; !h && i < CNL_ARRAY_SIZE(names); i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!h)
		snprintf(err, errlen,
		         "rocm: cannot load librocm_smi64 (ROCm SMI); name it "
		         "as rocm:/path/librocm_smi64.so.N");
	return h;
}

/* /dev/dri/renderD<N> of the GPU at PCI address @bdf, or "". */
static void render_node(uint64_t bdf, char *out, size_t n)
{
	char dir[128];
	struct dirent *e;
	DIR *d;

	out[0] = '\0';
	snprintf(dir, sizeof(dir), "/sys/bus/pci/devices/%04x:%02x:%02x.%x/drm",
	         (unsigned)(bdf >> 32) & 0xffff, (unsigned)(bdf >> 8) & 0xff,
	         (unsigned)(bdf >> 3) & 0x1f, (unsigned)bdf & 0x7);
	if (!(d = opendir(dir)))
		return;
	while ((e = readdir(d)))
		if (strncmp(e->d_name, "renderD", 7) == 0 &&
		    strlen(e->d_name) < 16) {
			snprintf(out, n, "/dev/dri/%.15s", e->d_name);
			break;
		}
	closedir(d);
}

int cnl_rocm_open(const char *lib, const struct cnl_catalog *cat,
                  cnl_rocm_type_fn type_of, struct cnl_gpu_dev *dev, int max,
                  struct cnl_rocm **ret, char *err, size_t errlen)
{
	struct cnl_rocm *r = cnl_xcalloc(1, sizeof(*r));
	uint32_t n = 0;
	int rc = -EIO, t;

	if (!(r->lib = load(lib, err, errlen)))
		goto fail;
	lib = lib ? lib : "librocm_smi64";
#define SYM(var, type, name)                                                   \
	do {                                                                   \
		r->var = (type)dlsym(r->lib, name);                            \
		if (!r->var) {                                                 \
			snprintf(err, errlen, "rocm: %s lacks %s", lib, name); \
			goto fail;                                             \
		}                                                              \
	} while (0)
	SYM(init, rsmi_init_fn, "rsmi_init");
	SYM(shut_down, rsmi_void_fn, "rsmi_shut_down");
	SYM(count, rsmi_count_fn, "rsmi_num_monitor_devices");
	SYM(name, rsmi_name_fn, "rsmi_dev_name_get");
	SYM(mem_total, rsmi_mem_fn, "rsmi_dev_memory_total_get");
	SYM(unique_id, rsmi_u64_fn, "rsmi_dev_unique_id_get");
#undef SYM
	r->subsystem =
	    (rsmi_name_fn)dlsym(r->lib, "rsmi_dev_subsystem_name_get");
	r->pci_id = (rsmi_u64_fn)dlsym(r->lib, "rsmi_dev_pci_id_get");
	r->busy = (rsmi_u32_fn)dlsym(r->lib, "rsmi_dev_busy_percent_get");
	r->mem_busy =
	    (rsmi_u32_fn)dlsym(r->lib, "rsmi_dev_memory_busy_percent_get");
	r->mem_used = (rsmi_mem_fn)dlsym(r->lib, "rsmi_dev_memory_usage_get");
	r->temp = (rsmi_temp_fn)dlsym(r->lib, "rsmi_dev_temp_metric_get");
	r->power = (rsmi_power_fn)dlsym(r->lib, "rsmi_dev_power_ave_get");
	if (r->init(0) != ROCM_OK) {
		snprintf(err, errlen,
		         "rocm: rsmi_init failed (no amdgpu driver?)");
		goto fail;
	}
	r->up = true;
	if (r->count(&n) != ROCM_OK || n > (uint32_t)max) {
		snprintf(err, errlen,
		         "rocm: cannot count GPUs (or more than %d)", max);
		goto fail;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct cnl_gpu_dev *d = &dev[i];
		char nm[128] = "", sub[128] = "";
		uint64_t total = 0, uid = 0, bdf = 0;

		if (r->name(i, nm, sizeof(nm)) != ROCM_OK ||
		    r->unique_id(i, &uid) != ROCM_OK) {
			snprintf(err, errlen, "rocm: cannot read GPU %u", i);
			goto fail;
		}
		d->index = (int)i;
		snprintf(d->uuid, sizeof(d->uuid), "GPU-%016llx",
		         (unsigned long long)uid);
		d->healthy = r->mem_total(i, ROCM_VRAM, &total) == ROCM_OK;
		d->mem_mib = total >> 20;
		/* The board's name first: it tells an MI250X from an MI250. */
		t = -1;
		if (r->subsystem &&
		    r->subsystem(i, sub, sizeof(sub)) == ROCM_OK)
			t = type_of(cat, sub, d->mem_mib);
		if (t < 0)
			t = type_of(cat, nm, d->mem_mib);
		if (t < 0) {
			snprintf(err, errlen,
			         "rocm: GPU %u (\"%s\") matches no catalog "
			         "type; add it as a site type",
			         i, nm);
			rc = -CNL_EGPUTYPE;
			goto fail;
		}
		snprintf(d->type, sizeof(d->type), "%s", cat->types[t].name);
		snprintf(d->model, sizeof(d->model), "%.*s",
		         (int)sizeof(d->model) - 1, nm);
		if (!d->healthy)
			d->mem_mib = cat->types[t].vram_mib;
		if (r->pci_id && r->pci_id(i, &bdf) == ROCM_OK)
			render_node(bdf, d->node, sizeof(d->node));
		if (i && strcmp(d->type, dev[0].type) != 0) {
			snprintf(err, errlen,
			         "rocm: mixed GPU types on one node (%s, %s)",
			         dev[0].type, d->type);
			rc = -CNL_ECONFIG;
			goto fail;
		}
	}
	*ret = r;
	return (int)n;
fail:
	cnl_rocm_close(r);
	return rc;
}

void cnl_rocm_refresh(struct cnl_rocm *r, struct cnl_gpu_dev *dev, int n)
{
	for (int i = 0; i < n; i++) {
		uint64_t total;

		dev[i].healthy =
		    r->mem_total((uint32_t)i, ROCM_VRAM, &total) == ROCM_OK;
	}
}

void cnl_rocm_telemetry(struct cnl_rocm *r, int index,
                        struct cnl_gpu_telemetry *t)
{
	uint32_t dv = (uint32_t)index, u;
	uint64_t total, used;
	int64_t mc;

	if (!r->up)
		return;
	if (r->busy && r->busy(dv, &u) == ROCM_OK)
		t->util_pct = u;
	if (r->mem_busy && r->mem_busy(dv, &u) == ROCM_OK)
		t->mem_util_pct = u;
	if (r->mem_used && r->mem_total(dv, ROCM_VRAM, &total) == ROCM_OK &&
	    r->mem_used(dv, ROCM_VRAM, &used) == ROCM_OK && used <= total) {
		t->fb_total_mib = (int64_t)(total >> 20);
		t->fb_used_mib = (int64_t)(used >> 20);
		t->fb_free_mib = (int64_t)((total - used) >> 20);
	}
	/* The edge sensor's current value (0, 0), in millidegrees. */
	if (r->temp && r->temp(dv, 0, 0, &mc) == ROCM_OK)
		t->temp_c = mc / 1000;
	if (r->power && r->power(dv, 0, &used) == ROCM_OK)
		t->power_mw = (int64_t)(used / 1000);
}
