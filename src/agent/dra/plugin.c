/*
 * plugin.c - ResourceSlices, prepare and unprepare (plugin.h).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "agent/dra/plugin.h"
#include "agent/share.h"
#include "cnlab/errors.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "net/client.h"
#include "net/kube.h"
#include "shim/region.h"

#define SLICES_PATH       "/apis/resource.k8s.io/v1/resourceslices"
#define SHIM_IN_CONTAINER "/opt/cnlab/libcnlab-cuda.so"

struct cnl_dra {
	char driver[64];
	char node[254];
	char plugin_dir[400];
	char cdi_dir[400];
	char shim[480];
	char dev_root[200];
	struct cnl_gpus *gpus;
	const struct cnl_catalog *cat;
	struct cnl_kube *kube;        /* prepare's */
	struct cnl_kube *kube_slices; /* publish's and follow's */
};

static int mkdir_p(const char *path, mode_t mode)
{
	char buf[512];
	size_t n = strlen(path);

	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/*
 * The shim where the container runtime can bind it from: a CDI mount's
 * hostPath is the host's, and the plugin's image is not, so the shim is
 * copied into plugin_dir (a host folder mounted at the same path), whole
 * or not at all, read-only.
 */
static int shim_on_host(struct cnl_dra *d, char *err, size_t errlen)
{
	char dst[440], tmp[450];
	size_t n = strlen(d->plugin_dir);
	FILE *in, *out;
	char buf[65536];
	size_t got;
	int r = 0;

	if (strncmp(d->shim, d->plugin_dir, n) == 0 && d->shim[n] == '/')
		return 0;
	snprintf(dst, sizeof(dst), "%s/libcnlab-cuda.so", d->plugin_dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", dst);
	if (!(in = fopen(d->shim, "re"))) {
		r = -errno;
		cnl_seterr(err, errlen, "shim %s: %s", d->shim,
		           strerror(errno));
		return r;
	}
	unlink(tmp);
	if (!(out = fopen(tmp, "wxe"))) {
		r = -errno;
		cnl_seterr(err, errlen, "%s: %s", tmp, strerror(errno));
		fclose(in);
		return r;
	}
	while ((got = fread(buf, 1, sizeof(buf), in)) > 0)
		if (fwrite(buf, 1, got, out) != got)
			break;
	if (ferror(in) || fflush(out) != 0 || fsync(fileno(out)) < 0)
		r = -EIO;
	fclose(in);
	if (fclose(out) != 0 && r == 0)
		r = -EIO;
	if (r == 0 && (chmod(tmp, 0444) < 0 || rename(tmp, dst) < 0))
		r = -errno;
	if (r < 0) {
		unlink(tmp);
		cnl_seterr(err, errlen, "cannot copy the shim to %s: %s", dst,
		           strerror(-r));
		return r;
	}
	snprintf(d->shim, sizeof(d->shim), "%s", dst);
	return 0;
}

int cnl_dra_new(const struct cnl_dra_config *cfg, struct cnl_gpus *gpus,
                const struct cnl_catalog *cat, struct cnl_kube *kube,
                struct cnl_kube *kube_slices, struct cnl_dra **ret, char *err,
                size_t errlen)
{
	struct cnl_dra *d = cnl_xcalloc(1, sizeof(*d));
	const char *dirs[3];
	char sub[2][480];
	int r;

	snprintf(d->driver, sizeof(d->driver), "%s",
	         cfg->driver ? cfg->driver : CNL_DRA_DRIVER);
	snprintf(d->node, sizeof(d->node), "%s", cfg->node);
	snprintf(d->plugin_dir, sizeof(d->plugin_dir), "%s", cfg->plugin_dir);
	snprintf(d->cdi_dir, sizeof(d->cdi_dir), "%s", cfg->cdi_dir);
	snprintf(d->shim, sizeof(d->shim), "%s", cfg->shim ? cfg->shim : "");
	snprintf(d->dev_root, sizeof(d->dev_root), "%s",
	         cfg->dev_root ? cfg->dev_root : "");
	d->gpus = gpus;
	d->cat = cat;
	d->kube = kube;
	d->kube_slices = kube_slices;
	snprintf(sub[0], sizeof(sub[0]), "%s/claims", d->plugin_dir);
	snprintf(sub[1], sizeof(sub[1]), "%s/regions", d->plugin_dir);
	dirs[0] = sub[0];
	dirs[1] = sub[1];
	dirs[2] = d->cdi_dir;
	for (int i = 0; i < 3; i++)
		if ((r = mkdir_p(dirs[i], i == 2 ? 0755 : 0700)) < 0) {
			cnl_seterr(err, errlen, "cannot make %s: %s", dirs[i],
			           strerror(-r));
			free(d);
			return r;
		}
	if (d->shim[0] && (r = shim_on_host(d, err, errlen)) < 0) {
		free(d);
		return r;
	}
	*ret = d;
	return 0;
}

void cnl_dra_free(struct cnl_dra *d)
{
	free(d);
}

const char *cnl_dra_driver(const struct cnl_dra *d)
{
	return d->driver;
}

/* ---- ResourceSlices ---------------------------------------------------- */

/* A catalog name as a DNS label's piece: lower case, '.' and '+' as '-'. */
static void label_of(const char *in, char *out, size_t cap)
{
	size_t o = 0;

	for (; *in && o + 1 < cap; in++)
		out[o++] = isalnum((unsigned char)*in)
		               ? (char)tolower((unsigned char)*in)
		               : '-';
	out[o] = '\0';
}

/* A quantity of MiB in the API server's canonical form (the largest
 * binary suffix that keeps the number whole: 16384Mi is "16Gi"), so that
 * what it hands back compares equal with what was sent. */
static json_t *quantity_mib(uint64_t mib)
{
	static const char *const unit[] = {"Mi", "Gi", "Ti", "Pi"};
	char q[32];
	int u = 0;

	while (mib && mib % 1024 == 0 && u < 3) {
		mib /= 1024;
		u++;
	}
	snprintf(q, sizeof(q), "%" PRIu64 "%s", mib, unit[u]);
	return json_string(q);
}

static json_t *slice_of(struct cnl_dra *d, const struct cnl_gpu_dev *g,
                        int nslices)
{
	int ti = cnl_catalog_find(d->cat, g->type);
	const struct cnl_gpu_type *t = ti >= 0 ? &d->cat->types[ti] : NULL;
	json_t *counters = json_object(), *all = json_object(), *devices;
	char gname[32], name[300], label[64];

	snprintf(gname, sizeof(gname), "gpu-%d", g->index);
	for (int s = 0; s < CNL_MIG_MEM_SLICES; s++) {
		char k[32];
		snprintf(k, sizeof(k), "memorySlice%d", s);
		json_object_set_new(counters, k,
		                    json_pack("{s:s}", "value", "1"));
		json_object_set_new(all, k, json_pack("{s:s}", "value", "1"));
	}
	json_object_set_new(counters, "computeSlices",
	                    json_pack("{s:s}", "value", "7"));
	json_object_set_new(all, "computeSlices",
	                    json_pack("{s:s}", "value", "7"));
	devices = json_pack(
	    "[{s:s,s:b,s:{s:{s:s},s:{s:s},s:{s:s},s:{s:i},s:{s:s},s:{s:b}},"
	    "s:{s:{s:s,s:{s:s,s:{s:s,s:s,s:s}}},s:{s:o}},"
	    "s:[{s:s,s:o}]}]",
	    "name", gname, "allowMultipleAllocations", 1, "attributes", "uuid",
	    "string", g->uuid, "type", "string", g->type, "model", "string",
	    g->model, "index", "int", g->index, "vendor", "string",
	    t ? t->vendor : "nvidia", "mig", "bool", t && t->n_mig > 0,
	    "capacity", "blocks", "value", "100", "requestPolicy", "default",
	    "100", "validRange", "min", "1", "max", "100", "step", "1",
	    "memory", "value", quantity_mib(g->mem_mib), "consumesCounters",
	    "counterSet", gname, "counters", all);
	for (int p = 0; t && p < t->n_mig; p++) {
		const struct cnl_mig_profile *m = &t->mig[p];
		if (m->media)
			continue;
		label_of(m->name, label, sizeof(label));
		for (int s = 0; s < CNL_MIG_MEM_SLICES; s++) {
			json_t *use;
			if (!(m->starts >> s & 1))
				continue;
			use = json_object();
			for (int k = s; k < s + m->mem_slots; k++) {
				char key[32];
				snprintf(key, sizeof(key), "memorySlice%d", k);
				json_object_set_new(
				    use, key, json_pack("{s:s}", "value", "1"));
			}
			char c[8];
			snprintf(c, sizeof(c), "%d", m->compute);
			json_object_set_new(use, "computeSlices",
			                    json_pack("{s:s}", "value", c));
			snprintf(name, sizeof(name), "%s-mig-%s-%d", gname,
			         label, s);
			json_array_append_new(
			    devices,
			    json_pack("{s:s,s:{s:{s:s},s:{s:s},s:{s:i},s:{s:s},"
			              "s:{s:i}},s:{s:{s:o}},s:[{s:s,s:o}]}",
			              "name", name, "attributes", "uuid",
			              "string", g->uuid, "profile", "string",
			              m->name, "index", "int", g->index, "type",
			              "string", g->type, "start", "int", s,
			              "capacity", "memory", "value",
			              quantity_mib(m->mem_mib),
			              "consumesCounters", "counterSet", gname,
			              "counters", use));
		}
	}
	/* The slice's name: node, driver and GPU, as one DNS subdomain. */
	char drv[64];
	label_of(d->driver, drv, sizeof(drv));
	snprintf(name, sizeof(name), "%.200s-%s-%d", d->node, drv, g->index);
	return json_pack("{s:s,s:s,s:{s:s},s:{s:s,s:s,s:{s:s,s:i,s:i},s:o,"
	                 "s:[{s:s,s:o}]}}",
	                 "apiVersion", "resource.k8s.io/v1", "kind",
	                 "ResourceSlice", "metadata", "name", name, "spec",
	                 "driver", d->driver, "nodeName", d->node, "pool",
	                 "name", d->node, "generation", 1, "resourceSliceCount",
	                 nslices, "devices", devices, "sharedCounters", "name",
	                 gname, "counters", counters);
}

json_t *cnl_dra_slices(struct cnl_dra *d)
{
	const struct cnl_gpu_dev *devs;
	int n = cnl_gpus_list(d->gpus, &devs);
	json_t *out = json_array();

	for (int i = 0; i < n; i++)
		json_array_append_new(out, slice_of(d, &devs[i], n));
	return out;
}

/* The list of this driver's slices on this node (field selectors). */
static void node_slices_path(const struct cnl_dra *d, char *buf, size_t len)
{
	char *n = cnl_client_url_escape(d->node),
	     *v = cnl_client_url_escape(d->driver);

	snprintf(buf, len,
	         SLICES_PATH "?fieldSelector=spec.nodeName%%3D%s%%2Cspec.driver"
	                     "%%3D%s",
	         n, v);
	free(n);
	free(v);
}

int cnl_dra_publish(struct cnl_dra *d, char *err, size_t errlen)
{
	json_t *want = cnl_dra_slices(d), *have = NULL, *node = NULL, *owner;
	char path[800], *sel_node = cnl_client_url_escape(d->node);
	json_int_t gen = 0;
	size_t i;
	long st;
	int r = 0;

	/* Owned by the Node: its slices go when it goes. */
	snprintf(path, sizeof(path), "/api/v1/nodes/%s", sel_node);
	st = cnl_kube_call(d->kube_slices, "GET", path, NULL, NULL, &node, err,
	                   errlen);
	if (st != 200 || !json_is_string(json_object_get(
	                     json_object_get(node, "metadata"), "uid"))) {
		r = st < 0 ? (int)st : -EPROTO;
		if (st == 200)
			cnl_seterr(err, errlen, "node %s has no uid", d->node);
		goto out;
	}
	owner =
	    json_pack("[{s:s,s:s,s:s,s:O,s:b}]", "apiVersion", "v1", "kind",
	              "Node", "name", d->node, "uid",
	              json_object_get(json_object_get(node, "metadata"), "uid"),
	              "controller", 1);
	node_slices_path(d, path, sizeof(path));
	st = cnl_kube_call(d->kube_slices, "GET", path, NULL, NULL, &have, err,
	                   errlen);
	if (st != 200 || !json_is_array(json_object_get(have, "items"))) {
		json_decref(owner);
		r = st < 0 ? (int)st : -EPROTO;
		goto out;
	}
	json_t *items = json_object_get(have, "items"), *o;
	json_array_foreach (items, i, o) {
		json_int_t g = json_integer_value(json_object_get(
		    json_object_get(json_object_get(o, "spec"), "pool"),
		    "generation"));
		if (g > gen)
			gen = g;
	}
	gen++;
	json_array_foreach (want, i, o) {
		const char *name = json_string_value(
		    json_object_get(json_object_get(o, "metadata"), "name"));
		json_t *old = NULL, *h;
		size_t k;

		json_object_set(json_object_get(o, "metadata"),
		                "ownerReferences", owner);
		json_integer_set(
		    json_object_get(
		        json_object_get(json_object_get(o, "spec"), "pool"),
		        "generation"),
		    gen);
		json_array_foreach (items, k, h) {
			if (strcmp(json_string_value(json_object_get(
			               json_object_get(h, "metadata"), "name"))
			               ?: "",
			           name) == 0)
				old = h;
		}
		if (old) {
			json_object_set(
			    json_object_get(o, "metadata"), "resourceVersion",
			    json_object_get(json_object_get(old, "metadata"),
			                    "resourceVersion"));
			snprintf(path, sizeof(path), SLICES_PATH "/%s", name);
			st = cnl_kube_call(d->kube_slices, "PUT", path, o, NULL,
			                   NULL, err, errlen);
		} else {
			st = cnl_kube_call(d->kube_slices, "POST", SLICES_PATH,
			                   o, NULL, NULL, err, errlen);
		}
		if (st != 200 && st != 201) {
			r = st < 0 ? (int)st : -EPROTO;
			json_decref(owner);
			goto out;
		}
	}
	json_decref(owner);
	/* What an earlier run published and this one does not (a GPU
	 * gone). */
	json_array_foreach (items, i, o) {
		const char *name = json_string_value(
		    json_object_get(json_object_get(o, "metadata"), "name"));
		bool keep = false;
		json_t *w;
		size_t k;

		json_array_foreach (want, k, w)
			keep =
			    keep ||
			    strcmp(json_string_value(json_object_get(
			               json_object_get(w, "metadata"), "name")),
			           name ?: "") == 0;
		if (keep || !name)
			continue;
		snprintf(path, sizeof(path), SLICES_PATH "/%s", name);
		st = cnl_kube_call(d->kube_slices, "DELETE", path, NULL, NULL,
		                   NULL, err, errlen);
		if (st != 200 && st != 404) {
			r = st < 0 ? (int)st : -EPROTO;
			goto out;
		}
	}
	cnl_log(CNL_LOG_INFO, "ResourceSlices published",
	        "node=%s slices=%zu generation=%" JSON_INTEGER_FORMAT, d->node,
	        json_array_size(want), gen);
out:
	free(sel_node);
	json_decref(want);
	json_decref(have);
	json_decref(node);
	return r;
}

/* ---- keeping them so ------------------------------------------------- */

static const char *name_of(const json_t *o)
{
	return json_string_value(
	    json_object_get(json_object_get(o, "metadata"), "name"));
}

static const json_t *devices_of(const json_t *o)
{
	return json_object_get(json_object_get(o, "spec"), "devices");
}

/*
 * Whether @want's every member is in @have with the same value, arrays
 * element by element: the API server adds defaults and fields of its own
 * to what it stores, so only what we set is compared (an exact compare
 * would see drift in every answer and publish for ever).
 */
static bool json_subset(const json_t *want, const json_t *have)
{
	const char *k;
	const json_t *v;
	size_t i;

	if (json_is_object(want)) {
		if (!json_is_object(have))
			return false;
		json_object_foreach ((json_t *)want, k, v)
			if (!json_subset(v, json_object_get(have, k)))
				return false;
		return true;
	}
	if (json_is_array(want)) {
		if (!json_is_array(have) ||
		    json_array_size(want) != json_array_size(have))
			return false;
		json_array_foreach (want, i, v)
			if (!json_subset(v, json_array_get(have, i)))
				return false;
		return true;
	}
	return have && json_equal(want, have);
}

/* Whether slice @o (as the API has it) is what @want says; an unknown
 * name is drift too. */
/*
 * What of our devices is compared: each device's name, attributes and
 * capacities' values, the GA part of resource.k8s.io/v1.  Sharing
 * (allowMultipleAllocations, a capacity's requestPolicy) and counters
 * (consumesCounters) are behind feature gates in 1.34
 * (DRAConsumableCapacity, DRAPartitionableDevices); an API server without
 * them drops those fields, and comparing them would publish for ever.
 */
static json_t *comparable(const json_t *devices)
{
	json_t *out = json_array(), *d;
	size_t i;

	json_array_foreach ((json_t *)devices, i, d) {
		json_t *c = json_object(),
		       *cap = json_object_get(d, "capacity");
		const char *k;
		json_t *v;

		json_object_foreach (cap, k, v)
			json_object_set_new(
			    c, k,
			    json_pack("{s:O?}", "value",
			              json_object_get(v, "value")));
		json_array_append_new(
		    out,
		    json_pack("{s:O,s:O,s:o}", "name",
		              json_object_get(d, "name"), "attributes",
		              json_object_get(d, "attributes"), "capacity", c));
	}
	return out;
}

static bool slice_drifted(const json_t *want, const json_t *o)
{
	const char *n = name_of(o);
	const json_t *w;
	size_t i;

	json_array_foreach (want, i, w)
		if (n && strcmp(name_of(w), n) == 0) {
			json_t *cw = comparable(devices_of(w));
			bool same;

			/* Devices the server has but we never sent, or
			 * fewer: the arrays' lengths differ. */
			same = json_is_array(devices_of(o)) &&
			       json_subset(cw, devices_of(o));
			json_decref(cw);
			return !same;
		}
	return true;
}

struct follow {
	json_t *want;
	bool dirty;
	const volatile int *stop;
};

static int slice_event(void *ud, const char *type, json_t *obj)
{
	struct follow *f = ud;
	const char *n = name_of(obj);
	const json_t *w;
	size_t i;

	if (strcmp(type, "DELETED") == 0) {
		/* Ours gone (the stale ones we delete go unnoticed). */
		json_array_foreach (f->want, i, w)
			if (n && strcmp(name_of(w), n) == 0)
				f->dirty = true;
	} else if (slice_drifted(f->want, obj)) {
		f->dirty = true;
	}
	if (f->dirty)
		cnl_log(CNL_LOG_INFO, "ResourceSlice changed by someone else",
		        "event=%s slice=%s", type, n ? n : "?");
	return f->dirty || *f->stop;
}

int cnl_dra_follow(struct cnl_dra *d, long timeout_s, const volatile int *stop,
                   char *err, size_t errlen)
{
	struct follow f = {.want = cnl_dra_slices(d), .stop = stop};
	char path[700], rv[64];
	json_t *list = NULL, *items, *o;
	size_t i, ours = 0;
	long st;
	int r;

	node_slices_path(d, path, sizeof(path));
	st = cnl_kube_call(d->kube_slices, "GET", path, NULL, NULL, &list, err,
	                   errlen);
	items = json_object_get(list, "items");
	if (st != 200 || !json_is_array(items)) {
		r = st < 0 ? (int)st : -EPROTO;
		goto out;
	}
	json_array_foreach (items, i, o) {
		if (slice_drifted(f.want, o))
			f.dirty = true;
		else
			ours++;
	}
	if (ours != json_array_size(f.want))
		f.dirty = true;
	if (f.dirty) {
		r = 1;
		goto out;
	}
	snprintf(rv, sizeof(rv), "%s",
	         json_string_value(json_object_get(
	             json_object_get(list, "metadata"), "resourceVersion"))
	             ?: "");
	do
		r = cnl_kube_watch(d->kube_slices, path, rv, sizeof(rv),
		                   timeout_s, slice_event, &f, err, errlen);
	while (r == 0 && !*stop);
	if (f.dirty)
		r = 1;
	else if (r == -ESTALE || r == -ECANCELED || *stop)
		r = 0;
out:
	json_decref(list);
	json_decref(f.want);
	return r;
}

/* ---- prepare ----------------------------------------------------------- */

static void claim_path(const struct cnl_dra *d, const char *uid, char *buf,
                       size_t len)
{
	snprintf(buf, len, "%s/claims/%s.json", d->plugin_dir, uid);
}

static void cdi_path(const struct cnl_dra *d, const char *uid, char *buf,
                     size_t len)
{
	snprintf(buf, len, "%s/cnlab.io-gpu_%s.json", d->cdi_dir, uid);
}

/* A UID as the API gives it: a UUID, so safe in a file name. */
static bool uid_ok(const char *uid)
{
	size_t n = strlen(uid);

	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)uid[i]) && uid[i] != '-')
			return false;
	return true;
}

/* One result of the claim's allocation that is ours, understood. */
struct pick {
	const char *request, *device, *share_id;
	const struct cnl_gpu_dev *gpu;
	const struct cnl_gpu_type *type;
	int mig; /* profile index, or -1: blocks */
	int start;
	int blocks;
	char mig_uuid[CNL_GPU_UUID_MAX];
	bool mig_made;
};

static int parse_device(struct cnl_dra *d, const char *name, struct pick *p,
                        char *err, size_t errlen)
{
	const struct cnl_gpu_dev *devs;
	int n = cnl_gpus_list(d->gpus, &devs), idx, used = 0, s;
	char label[64], rest[128] = "";

	if (sscanf(name, "gpu-%d%n", &idx, &used) != 1 || idx < 0)
		goto bad;
	p->gpu = NULL;
	for (int i = 0; i < n; i++)
		if (devs[i].index == idx)
			p->gpu = &devs[i];
	if (!p->gpu)
		goto bad;
	int ti = cnl_catalog_find(d->cat, p->gpu->type);
	p->type = ti >= 0 ? &d->cat->types[ti] : NULL;
	p->mig = -1;
	if (name[used] == '\0')
		return 0;
	if (strncmp(name + used, "-mig-", 5) != 0 || !p->type)
		goto bad;
	snprintf(rest, sizeof(rest), "%s", name + used + 5);
	char *dash = strrchr(rest, '-');
	if (!dash || sscanf(dash + 1, "%d", &s) != 1 || s < 0 ||
	    s >= CNL_MIG_MEM_SLICES)
		goto bad;
	*dash = '\0';
	for (int k = 0; k < p->type->n_mig; k++) {
		label_of(p->type->mig[k].name, label, sizeof(label));
		if (strcmp(label, rest) == 0 && !p->type->mig[k].media &&
		    (p->type->mig[k].starts >> s & 1))
			p->mig = k;
	}
	if (p->mig < 0)
		goto bad;
	p->start = s;
	return 0;
bad:
	cnl_seterr(err, errlen, "device %s is not one of node %s's", name,
	           d->node);
	return -CNL_ENOTFOUND;
}

/* A quantity of whole blocks ("25"); 1..100. */
static int blocks_of(const json_t *cap, int *ret)
{
	const json_t *b = json_object_get(cap, "blocks");
	const char *s = json_string_value(b);
	char *end;
	long v;

	if (!b) {
		*ret = 100;
		return 0;
	}
	if (!s)
		return -EINVAL;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > 100)
		return -EINVAL;
	*ret = (int)v;
	return 0;
}

/* A device node under dev_root, as a CDI deviceNodes entry; NULL when the
 * host has none. */
static json_t *node_entry(const struct cnl_dra *d, const char *path)
{
	char host[600];
	struct stat st;

	snprintf(host, sizeof(host), "%s%s", d->dev_root, path);
	if (stat(host, &st) < 0 || !S_ISCHR(st.st_mode))
		return NULL;
	return json_pack("{s:s,s:s,s:s,s:I,s:I,s:s}", "path", path, "hostPath",
	                 host, "type", "c", "major",
	                 (json_int_t)major(st.st_rdev), "minor",
	                 (json_int_t)minor(st.st_rdev), "permissions", "rw");
}

static void add_node(const struct cnl_dra *d, json_t *nodes, const char *path)
{
	json_t *e = node_entry(d, path), *x;
	size_t i;

	if (!e)
		return;
	json_array_foreach (nodes, i, x)
		if (strcmp(json_string_value(json_object_get(x, "path")),
		           path) == 0) {
			json_decref(e);
			return;
		}
	json_array_append_new(nodes, e);
}

/* The nvidia-caps nodes that give access to MIG instance @uuid (the GPU
 * instance's and the compute instance's), from the driver's
 * /proc/driver/nvidia/capabilities; none where the driver has none (the
 * fake provider). */
static void add_mig_caps(struct cnl_dra *d, json_t *nodes, int gpu,
                         const char *uuid)
{
	struct cnl_gpu_mig_telemetry mt[CNL_MIG_MEM_SLICES * 2];
	int n =
	    cnl_gpus_mig_telemetry(d->gpus, gpu, mt, (int)CNL_ARRAY_SIZE(mt));

	for (int i = 0; i < n; i++) {
		char f[2][200], line[200], dev[64];
		if (strcmp(mt[i].uuid, uuid) != 0)
			continue;
		snprintf(
		    f[0], sizeof(f[0]),
		    "/proc/driver/nvidia/capabilities/gpu%d/mig/gi%d/access",
		    gpu, mt[i].gi_id);
		snprintf(f[1], sizeof(f[1]),
		         "/proc/driver/nvidia/capabilities/gpu%d/mig/gi%d/ci%d/"
		         "access",
		         gpu, mt[i].gi_id, mt[i].ci_id);
		for (int k = 0; k < 2; k++) {
			FILE *fp = fopen(f[k], "re");
			int minor_no;
			while (fp && fgets(line, sizeof(line), fp))
				if (sscanf(line, "DeviceFileMinor: %d",
				           &minor_no) == 1) {
					snprintf(
					    dev, sizeof(dev),
					    "/dev/nvidia-caps/nvidia-cap%d",
					    minor_no);
					add_node(d, nodes, dev);
				}
			if (fp)
				fclose(fp);
		}
	}
}

static void region_path(const struct cnl_dra *d, const char *uid, int k,
                        char *buf, size_t len)
{
	snprintf(buf, len, "%s/regions/%s-%d", d->plugin_dir, uid, k);
}

/* Undo what a prepare made, from its record (or a half-made one). */
static void undo(struct cnl_dra *d, const char *uid, const json_t *rec)
{
	const json_t *devs = json_object_get(rec, "devices"), *x;
	char path[700];
	size_t i;

	json_array_foreach (devs, i, x) {
		const char *mu =
		    json_string_value(json_object_get(x, "mig_uuid"));
		const char *rg =
		    json_string_value(json_object_get(x, "region"));
		if (mu && json_is_true(json_object_get(x, "mig_made")))
			cnl_gpus_mig_destroy(d->gpus, mu);
		if (rg)
			cnl_region_remove(rg);
	}
	cdi_path(d, uid, path, sizeof(path));
	unlink(path);
	snprintf(path, sizeof(path), "%s/claims/%s", d->plugin_dir, uid);
	char f[760];
	snprintf(f, sizeof(f), "%s/ld.so.preload", path);
	unlink(f);
	snprintf(f, sizeof(f), "%s/region", path);
	unlink(f);
	rmdir(path);
}

/* A CDI bind mount of @host at @ctr: options "ro" or "rw", "nosuid",
 * "nodev" when @nodev, "bind". */
static void bind_mount(json_t *mounts, const char *host, const char *ctr,
                       bool rw, bool nodev)
{
	json_t *opts = json_pack("[ss]", rw ? "rw" : "ro", "nosuid");

	if (nodev)
		json_array_append_new(opts, json_string("nodev"));
	json_array_append_new(opts, json_string("bind"));
	json_array_append_new(mounts,
	                      json_pack("{s:s,s:s,s:s,s:o}", "hostPath", host,
	                                "containerPath", ctr, "type", "bind",
	                                "options", opts));
}

static int write_text(const char *path, const char *text)
{
	char tmp[800];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (!(f = fopen(tmp, "we")))
		return -errno;
	fputs(text, f);
	if (fclose(f) != 0 || chmod(tmp, 0644) < 0 || rename(tmp, path) < 0) {
		int r = -errno;
		unlink(tmp);
		return r;
	}
	return 0;
}

int cnl_dra_prepare(struct cnl_dra *d, const char *ns, const char *uid,
                    const char *name, json_t **ret, char *err, size_t errlen)
{
	char path[800], rec_path[700], *e_ns, *e_name;
	json_t *claim = NULL, *rec = NULL, *results, *x, *out = NULL;
	json_t *nodes = json_array(), *env_list = json_array(),
	       *mounts = json_array();
	json_t *recdevs = json_array();
	struct pick picks[CNL_GPU_MAX * 4];
	int np = 0, r = 0, nregions = 0;
	char visible[1024] = "";
	size_t i;
	long st;

	*ret = NULL;
	if (!uid_ok(uid) || !ns[0] || !name[0]) {
		cnl_seterr(err, errlen,
		           "claim %s/%s: bad namespace, name or uid", ns, name);
		r = -EINVAL;
		goto out;
	}
	claim_path(d, uid, rec_path, sizeof(rec_path));
	/* Prepared before: the same answer. */
	if (cnl_json_load_file(rec_path, &rec, NULL, 0) == 0) {
		*ret = json_incref(json_object_get(rec, "reply"));
		goto out;
	}
	e_ns = cnl_client_url_escape(ns);
	e_name = cnl_client_url_escape(name);
	snprintf(path, sizeof(path),
	         "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s",
	         e_ns, e_name);
	free(e_ns);
	free(e_name);
	st = cnl_kube_call(d->kube, "GET", path, NULL, NULL, &claim, err,
	                   errlen);
	if (st == 404) {
		cnl_seterr(err, errlen, "ResourceClaim %s/%s not found", ns,
		           name);
		r = -CNL_ENOTFOUND;
		goto out;
	}
	if (st != 200) {
		r = st < 0 ? (int)st : -EPROTO;
		goto out;
	}
	const char *got_uid = json_string_value(
	    json_object_get(json_object_get(claim, "metadata"), "uid"));
	if (!got_uid || strcmp(got_uid, uid) != 0) {
		cnl_seterr(err, errlen,
		           "ResourceClaim %s/%s has uid %s, not %s: it was "
		           "deleted and made again",
		           ns, name, got_uid ? got_uid : "(none)", uid);
		r = -ESTALE;
		goto out;
	}
	results = json_object_get(
	    json_object_get(
	        json_object_get(json_object_get(claim, "status"), "allocation"),
	        "devices"),
	    "results");
	if (!json_is_array(results)) {
		cnl_seterr(err, errlen, "ResourceClaim %s/%s is not allocated",
		           ns, name);
		r = -EINVAL;
		goto out;
	}
	json_array_foreach (results, i, x) {
		const char *drv =
		    json_string_value(json_object_get(x, "driver"));
		const char *pool =
		    json_string_value(json_object_get(x, "pool"));
		const char *dev =
		    json_string_value(json_object_get(x, "device"));
		const char *req =
		    json_string_value(json_object_get(x, "request"));
		struct pick *p = &picks[np];

		if (!drv || strcmp(drv, d->driver) != 0)
			continue;
		if (!pool || !dev || !req) {
			cnl_seterr(
			    err, errlen,
			    "ResourceClaim %s/%s: result %zu lacks pool, "
			    "device or request",
			    ns, name, i);
			r = -EINVAL;
			goto out;
		}
		if (strcmp(pool, d->node) != 0) {
			cnl_seterr(
			    err, errlen,
			    "ResourceClaim %s/%s: device %s is of pool %s, "
			    "not of this node (%s)",
			    ns, name, dev, pool, d->node);
			r = -EINVAL;
			goto out;
		}
		if (np == (int)CNL_ARRAY_SIZE(picks)) {
			cnl_seterr(err, errlen,
			           "too many devices in one claim");
			r = -E2BIG;
			goto out;
		}
		memset(p, 0, sizeof(*p));
		if ((r = parse_device(d, dev, p, err, errlen)) < 0)
			goto out;
		p->request = req;
		p->device = dev;
		p->share_id = json_string_value(json_object_get(x, "shareID"));
		if (p->mig < 0 &&
		    blocks_of(json_object_get(x, "consumedCapacity"),
		              &p->blocks) < 0) {
			cnl_seterr(err, errlen,
			           "ResourceClaim %s/%s: device %s: "
			           "consumedCapacity.blocks must be a whole "
			           "number from 1 to 100",
			           ns, name, dev);
			r = -EINVAL;
			goto out;
		}
		np++;
	}
	/* Make what each device needs; record it as it is made, so that a
	 * failure half-way undoes exactly that. */
	for (int k = 0; k < np; k++) {
		struct pick *p = &picks[k];
		char gnode[40];
		json_t *rd = json_pack("{s:s}", "device", p->device);

		json_array_append_new(recdevs, rd);
		snprintf(gnode, sizeof(gnode), "/dev/nvidia%d", p->gpu->index);
		add_node(d, nodes, gnode);
		if (p->mig >= 0) {
			r = cnl_gpus_mig_create(d->gpus, p->gpu->index,
			                        p->type->mig[p->mig].name,
			                        p->start, p->mig_uuid);
			if (r < 0 && r != -CNL_EDUP) {
				cnl_seterr(err, errlen,
				           "cannot make MIG instance %s at "
				           "slot %d of GPU %d: %s",
				           p->type->mig[p->mig].name, p->start,
				           p->gpu->index, cnl_strerror(r));
				goto out;
			}
			p->mig_made = r != -CNL_EDUP;
			r = 0;
			json_object_set_new(rd, "mig_uuid",
			                    json_string(p->mig_uuid));
			json_object_set_new(rd, "mig_made",
			                    json_boolean(p->mig_made));
			add_mig_caps(d, nodes, p->gpu->index, p->mig_uuid);
		} else {
			struct cnl_slice_share sh = {0};
			char rp[600], acct[620];

			/* All of the GPU: nothing shared, nothing to
			 * enforce. */
			if (p->blocks >= 100)
				continue;
			if (!d->shim[0]) {
				cnl_seterr(
				    err, errlen,
				    "device %s is a block slice and this "
				    "plugin has no shim to enforce it "
				    "(--shim)",
				    p->device);
				r = -CNL_ECONFIG;
				goto out;
			}
			if (nregions++ > 0) {
				/* One region per container: the shim reads
				 * one (/etc/cnlab/region). */
				cnl_seterr(
				    err, errlen,
				    "ResourceClaim %s/%s has more than one "
				    "block slice; a claim gets at most "
				    "one (ask for more blocks instead)",
				    ns, name);
				r = -EINVAL;
				goto out;
			}
			cnl_agent_slice_share(p->type, p->blocks, NULL, &sh);
			region_path(d, uid, k, rp, sizeof(rp));
			uint64_t quota = p->gpu->mem_mib * (uint64_t)p->blocks /
			                 100 * 1024 * 1024;
			r = cnl_region_create(rp, quota, sh.share_pct, ns,
			                      NULL);
			if (r < 0) {
				cnl_seterr(err, errlen,
				           "cannot make the region %s: %s", rp,
				           strerror(-r));
				goto out;
			}
			json_object_set_new(rd, "region", json_string(rp));
			cnl_region_acct_path(rp, acct, sizeof(acct));
			/* The pod's user is not known here: the accounting
			 * file is for whoever the claim's containers run
			 * as; only they get it mounted. */
			chmod(acct, 0666);
			snprintf(path, sizeof(path), "%s/claims/%s",
			         d->plugin_dir, uid);
			if (mkdir(path, 0755) < 0 && errno != EEXIST) {
				r = -errno;
				cnl_seterr(err, errlen, "cannot make %s: %s",
				           path, strerror(errno));
				goto out;
			}
			char f[900], text[700];
			snprintf(f, sizeof(f), "%s/ld.so.preload", path);
			snprintf(text, sizeof(text), "%s\n", SHIM_IN_CONTAINER);
			if ((r = write_text(f, text)) < 0)
				goto werr;
			bind_mount(mounts, f, "/etc/ld.so.preload", false,
			           false);
			snprintf(f, sizeof(f), "%s/region", path);
			snprintf(text, sizeof(text), "%s\n", rp);
			if ((r = write_text(f, text)) < 0)
				goto werr;
			bind_mount(mounts, f, "/etc/cnlab/region", false,
			           false);
			bind_mount(mounts, d->shim, SHIM_IN_CONTAINER, false,
			           true);
			bind_mount(mounts, rp, rp, false, true);
			bind_mount(mounts, acct, acct, true, true);
			snprintf(text, sizeof(text), "CNLAB_REGION=%s", rp);
			json_array_append_new(env_list, json_string(text));
			continue;
		werr:
			cnl_seterr(err, errlen, "cannot write %s: %s", f,
			           strerror(-r));
			goto out;
		}
	}
	/* What CUDA is to see: the MIG instances, then the GPUs. */
	for (int pass = 0; pass < 2; pass++)
		for (int k = 0; k < np; k++)
			if ((picks[k].mig >= 0) == (pass == 0)) {
				size_t l = strlen(visible);
				snprintf(visible + l, sizeof(visible) - l,
				         "%s%s", l ? "," : "",
				         pass == 0 ? picks[k].mig_uuid
				                   : picks[k].gpu->uuid);
			}
	{
		static const char *const ctl[] = {"/dev/nvidiactl",
		                                  "/dev/nvidia-uvm",
		                                  "/dev/nvidia-uvm-tools"};
		char v[1100], cdi_id[200];
		json_t *spec;

		if (np > 0)
			for (size_t c = 0; c < CNL_ARRAY_SIZE(ctl); c++)
				add_node(d, nodes, ctl[c]);
		snprintf(v, sizeof(v), "CUDA_VISIBLE_DEVICES=%s", visible);
		json_array_insert_new(env_list, 0, json_string(v));
		spec =
		    json_pack("{s:s,s:s,s:{s:s,s:s},s:[{s:s,s:{s:o,s:o,s:o}}]}",
		              "cdiVersion", "0.6.0", "kind", CNL_DRA_CDI_KIND,
		              "annotations", "cnlab.io/claim",
		              json_string_value(json_object_get(
		                  json_object_get(claim, "metadata"), "name")),
		              "cnlab.io/namespace", ns, "devices", "name", uid,
		              "containerEdits", "env", env_list, "deviceNodes",
		              nodes, "mounts", mounts);
		env_list = nodes = mounts = NULL;
		cdi_path(d, uid, path, sizeof(path));
		r = cnl_json_write_file(spec, path, 0644, JSON_INDENT(2));
		json_decref(spec);
		if (r < 0) {
			cnl_seterr(err, errlen,
			           "cannot write the CDI spec %s: %s", path,
			           strerror(-r));
			goto out;
		}
		snprintf(cdi_id, sizeof(cdi_id), "%s=%s", CNL_DRA_CDI_KIND,
		         uid);
		out = json_array();
		for (int k = 0; k < np; k++) {
			json_t *o =
			    json_pack("{s:s,s:s,s:s,s:s}", "request",
			              picks[k].request, "pool", d->node,
			              "device", picks[k].device, "cdi", cdi_id);
			if (picks[k].share_id)
				json_object_set_new(
				    o, "share_id",
				    json_string(picks[k].share_id));
			json_array_append_new(out, o);
		}
	}
	rec = json_pack("{s:s,s:s,s:s,s:O,s:O}", "namespace", ns, "name", name,
	                "uid", uid, "devices", recdevs, "reply", out);
	if ((r = cnl_json_write_file(rec, rec_path, 0600, JSON_COMPACT)) < 0) {
		cnl_seterr(err, errlen, "cannot write %s: %s", rec_path,
		           strerror(-r));
		goto out;
	}
	*ret = json_incref(out);
	cnl_log(CNL_LOG_INFO, "claim prepared", "claim=%s/%s uid=%s devices=%d",
	        ns, name, uid, np);
out:
	if (r < 0 && np > 0) {
		json_t *half = json_pack("{s:O}", "devices", recdevs);
		undo(d, uid, half);
		json_decref(half);
	}
	json_decref(out);
	json_decref(recdevs);
	json_decref(nodes);
	json_decref(env_list);
	json_decref(mounts);
	json_decref(claim);
	json_decref(rec);
	return r;
}

int cnl_dra_unprepare(struct cnl_dra *d, const char *uid, char *err,
                      size_t errlen)
{
	char rec_path[700];
	json_t *rec = NULL;
	int r;

	if (!uid_ok(uid)) {
		cnl_seterr(err, errlen, "bad claim uid");
		return -EINVAL;
	}
	claim_path(d, uid, rec_path, sizeof(rec_path));
	r = cnl_json_load_file(rec_path, &rec, err, errlen);
	if (r == -ENOENT) {
		/* Never prepared here, or unprepared already; a half-made
		 * spec of a crashed prepare goes too. */
		undo(d, uid, NULL);
		return 0;
	}
	if (r < 0)
		return r;
	undo(d, uid, rec);
	json_decref(rec);
	if (unlink(rec_path) < 0 && errno != ENOENT) {
		r = -errno;
		cnl_seterr(err, errlen, "cannot remove %s: %s", rec_path,
		           strerror(errno));
		return r;
	}
	cnl_log(CNL_LOG_INFO, "claim unprepared", "uid=%s", uid);
	return 0;
}
