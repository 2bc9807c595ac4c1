/*
 * node.c - encoders and strict decoders of the node protocol (node.h).
 *
 * Each decoder follows one pattern: check the object's keys against the
 * message's list (cnl_wire_check), then read each field with the
 * typed readers of codec-internal.h, which copy into the struct's fixed buffers
 * and name the field in every error.  Each encoder writes only what is set
 * (optional fields absent rather than empty), so a decoded message
 * encodes back to the same JSON.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/base64.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/time.h"
#include "common/util.h"
#include "wire/codec-internal.h"
#include "wire/node.h"

/* ---- register ------------------------------------------------------------ */

json_t *cnl_wire_register_encode(const struct cnl_wire_register *m)
{
	json_t *o = json_pack("{s:i,s:s,s:i,s:I,s:I}", "protocol", m->protocol,
	                      "name", m->name, "gpus", m->gpus, "cpu_milli",
	                      (json_int_t)m->cpu_milli, "mem_mib",
	                      (json_int_t)m->mem_mib);

	cnl_wire_set_str(o, "gpu_type", m->gpu_type);
	cnl_wire_set_str(o, "cluster", m->cluster);
	cnl_wire_set_str(o, "zone", m->zone);
	cnl_wire_set_str(o, "rack", m->rack);
	cnl_wire_set_str(o, "address", m->address);
	if (m->has_datasets) {
		json_t *a = json_array();

		for (int i = 0; i < m->n_datasets; i++)
			json_array_append_new(a, json_string(m->datasets[i]));
		json_object_set_new(o, "datasets", a);
	}
	if (m->has_devices) {
		json_t *a = json_array();

		for (int i = 0; i < m->n_devices; i++)
			json_array_append_new(
			    a, json_pack("{s:i,s:s,s:I,s:b}", "index",
			                 m->devices[i].index, "uuid",
			                 m->devices[i].uuid, "mem_mib",
			                 (json_int_t)m->devices[i].mem_mib,
			                 "healthy", m->devices[i].healthy));
		json_object_set_new(o, "devices", a);
	}
	return o;
}

static int device_decode(const json_t *d, struct cnl_wire_device *ret,
                         char *err, size_t errlen)
{
	static const char *const fields[] = {"index", "uuid", "mem_mib",
	                                     "healthy", NULL};

	if (!json_is_object(d))
		return cnl_wire_fail(err, errlen, "must be an object");
	CNL_WIRE_TRY(cnl_wire_check(d, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int32(d, "index", true, 0,
	                                CNL_WIRE_GPUS_MAX - 1, &ret->index, err,
	                                errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(d, "uuid", true, ret->uuid,
	                              sizeof(ret->uuid), err, errlen));
	if (!ret->uuid[0])
		return cnl_wire_fail(err, errlen, "field \"uuid\": empty");
	CNL_WIRE_TRY(cnl_wire_get_int(d, "mem_mib", true, 0, INT64_C(1) << 30,
	                              &ret->mem_mib, err, errlen));
	return cnl_json_get_bool(d, "healthy", true, &ret->healthy, err,
	                         errlen) < 0
	           ? -CNL_EFIELD
	           : 0;
}

int cnl_wire_register_decode(const json_t *j, struct cnl_wire_register *ret,
                             char *err, size_t errlen)
{
	static const char *const fields[] = {
	    "protocol", "name",    "gpu_type", "gpus", "cpu_milli",
	    "mem_mib",  "cluster", "zone",     "rack", "address",
	    "datasets", "devices", NULL};
	const json_t *a;
	int64_t v = 0;

	memset(ret, 0, sizeof(*ret));
	CNL_WIRE_TRY(cnl_wire_check(j, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(j, "protocol", true, 0, INT32_MAX, &v,
	                              err, errlen));
	ret->protocol = (int)v;
	if (ret->protocol < CNL_WIRE_PROTOCOL_MIN ||
	    ret->protocol > CNL_WIRE_PROTOCOL)
		return cnl_wire_fail(
		    err, errlen,
		    "field \"protocol\": version %d is not spoken here "
		    "(this side speaks %d to %d): upgrade the older side",
		    ret->protocol, CNL_WIRE_PROTOCOL_MIN, CNL_WIRE_PROTOCOL);
	CNL_WIRE_TRY(cnl_wire_get_str(j, "name", true, ret->name,
	                              sizeof(ret->name), err, errlen));
	if (!ret->name[0])
		return cnl_wire_fail(err, errlen, "field \"name\": empty");
	CNL_WIRE_TRY(cnl_wire_get_str(j, "gpu_type", false, ret->gpu_type,
	                              sizeof(ret->gpu_type), err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int32(j, "gpus", true, 0, CNL_WIRE_GPUS_MAX,
	                                &ret->gpus, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(j, "cpu_milli", true, 0, INT64_C(1) << 40,
	                              &ret->cpu_milli, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(j, "mem_mib", true, 0, INT64_C(1) << 40,
	                              &ret->mem_mib, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "cluster", false, ret->cluster,
	                              sizeof(ret->cluster), err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "zone", false, ret->zone,
	                              sizeof(ret->zone), err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "rack", false, ret->rack,
	                              sizeof(ret->rack), err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "address", false, ret->address,
	                              sizeof(ret->address), err, errlen));
	if (cnl_wire_get_array(j, "datasets", false, CNL_WIRE_DATASETS_MAX, &a,
	                       err, errlen) < 0)
		return -CNL_EFIELD;
	if (json_object_get(j, "datasets")) {
		ret->has_datasets = true;
		for (size_t i = 0; i < json_array_size(a); i++)
			CNL_WIRE_TRY(cnl_wire_item_str(
			    a, i, "datasets", ret->datasets[i],
			    sizeof(ret->datasets[i]), err, errlen));
		ret->n_datasets = (int)json_array_size(a);
	}
	if (cnl_wire_get_array(j, "devices", false, CNL_WIRE_GPUS_MAX, &a, err,
	                       errlen) < 0)
		return -CNL_EFIELD;
	if (json_object_get(j, "devices")) {
		ret->has_devices = true;
		if (json_array_size(a) != (size_t)ret->gpus)
			return cnl_wire_fail(
			    err, errlen,
			    "field \"devices\": must list each of the %d "
			    "GPUs",
			    ret->gpus);
		for (size_t i = 0; i < json_array_size(a); i++) {
			char key[40];

			snprintf(key, sizeof(key), "devices[%zu]", i);
			CNL_WIRE_TRY(cnl_wire_nested(
			    key,
			    device_decode(json_array_get(a, i),
			                  &ret->devices[i], err, errlen),
			    err, errlen));
		}
		ret->n_devices = (int)json_array_size(a);
	}
	return 0;
}

/* ---- node ---------------------------------------------------------------- */

/* A list of ids as a JSON array of strings. */
static json_t *ids_encode(char (*ids)[CNL_WIRE_ID_MAX], size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_string(ids[i]));
	return a;
}

/* The optional list of ids @key of @j into a malloc'd *@ret (*@ret_n of
 * them, *@ret_has when the list was there). */
static int ids_decode(const json_t *j, const char *key,
                      char (**ret)[CNL_WIRE_ID_MAX], size_t *ret_n,
                      bool *ret_has, char *err, size_t errlen)
{
	const json_t *a = NULL;

	CNL_WIRE_TRY(cnl_wire_get_array(j, key, false, CNL_WIRE_LIST_MAX, &a,
	                                err, errlen));
	if (!a)
		return 0;
	*ret_has = true;
	*ret = cnl_xcalloc(json_array_size(a) + 1, sizeof(**ret));
	for (size_t i = 0; i < json_array_size(a); i++) {
		CNL_WIRE_TRY(cnl_wire_item_str(a, i, key, (*ret)[i],
		                               sizeof((*ret)[i]), err, errlen));
		*ret_n = i + 1;
	}
	return 0;
}

json_t *cnl_wire_node_encode(const struct cnl_wire_node *m)
{
	json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:I,s:I}", "id", m->id, "name",
	                      m->name, "epoch", (json_int_t)m->epoch, "state",
	                      m->state, "lease_ms", (json_int_t)m->lease_ms,
	                      "heartbeat_ms", (json_int_t)m->heartbeat_ms);

	if (m->has_stop) {
		json_t *a = json_array();

		for (size_t i = 0; i < m->n_stop; i++)
			json_array_append_new(a, json_string(m->stop[i]));
		json_object_set_new(o, "stop", a);
	}
	if (m->has_drop)
		json_object_set_new(o, "drop", ids_encode(m->drop, m->n_drop));
	if (m->credential[0])
		json_object_set_new(o, "credential",
		                    json_string(m->credential));
	return o;
}

int cnl_wire_node_decode(const json_t *j, struct cnl_wire_node *ret, char *err,
                         size_t errlen)
{
	static const char *const fields[] = {
	    "id",           "name", "epoch", "state",      "lease_ms",
	    "heartbeat_ms", "stop", "drop",  "credential", NULL};
	static const char *const states[] = {"up", "cordoned", "draining",
	                                     "lost", NULL};
	const json_t *a = NULL;
	int st;

	memset(ret, 0, sizeof(*ret));
	CNL_WIRE_TRY(cnl_wire_check(j, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "id", true, ret->id, sizeof(ret->id),
	                              err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "name", true, ret->name,
	                              sizeof(ret->name), err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(j, "epoch", true, 0, INT64_MAX,
	                              &ret->epoch, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_enum(j, "state", states, &st, err, errlen));
	snprintf(ret->state, sizeof(ret->state), "%s", states[st]);
	CNL_WIRE_TRY(cnl_wire_get_int(j, "lease_ms", true, 0, INT64_C(1) << 40,
	                              &ret->lease_ms, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(j, "heartbeat_ms", true, 0,
	                              INT64_C(1) << 40, &ret->heartbeat_ms, err,
	                              errlen));
	CNL_WIRE_TRY(cnl_wire_get_array(j, "stop", false, CNL_WIRE_LIST_MAX, &a,
	                                err, errlen));
	if (a) {
		ret->has_stop = true;
		ret->stop =
		    cnl_xcalloc(json_array_size(a) + 1, sizeof(*ret->stop));
		for (size_t i = 0; i < json_array_size(a); i++)
			CNL_WIRE_TRY(cnl_wire_item_str(
			    a, i, "stop", ret->stop[i], sizeof(ret->stop[i]),
			    err, errlen));
		ret->n_stop = json_array_size(a);
	}
	CNL_WIRE_TRY(cnl_wire_get_str(j, "credential", false, ret->credential,
	                              sizeof(ret->credential), err, errlen));
	return ids_decode(j, "drop", &ret->drop, &ret->n_drop, &ret->has_drop,
	                  err, errlen);
}

void cnl_wire_node_done(struct cnl_wire_node *m)
{
	if (!m)
		return;
	free(m->stop);
	m->stop = NULL;
	m->n_stop = 0;
	free(m->drop);
	m->drop = NULL;
	m->n_drop = 0;
}

/* ---- credential ---------------------------------------------------------- */

json_t *cnl_wire_credential_encode(const struct cnl_wire_credential *m)
{
	json_t *o = json_pack("{s:s}", "credential", m->credential);

	json_object_set_new(o, "old_expires_at",
	                    cnl_wire_time_or_null(m->old_expires_ms));
	return o;
}

int cnl_wire_credential_decode(const json_t *j, struct cnl_wire_credential *ret,
                               char *err, size_t errlen)
{
	static const char *const fields[] = {"credential", "old_expires_at",
	                                     NULL};

	memset(ret, 0, sizeof(*ret));
	CNL_WIRE_TRY(cnl_wire_check(j, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "credential", true, ret->credential,
	                              sizeof(ret->credential), err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_time(j, "old_expires_at", true,
	                               &ret->old_expires_ms, err, errlen));
	return 0;
}

/* ---- heartbeat ----------------------------------------------------------- */

json_t *cnl_wire_heartbeat_encode(const struct cnl_wire_heartbeat *m)
{
	json_t *o = json_object(), *a;

	if (m->has_volumes)
		json_object_set_new(o, "volumes",
		                    ids_encode(m->volumes, m->n_volumes));
	if (m->n_gpus) {
		a = json_array();
		for (size_t i = 0; i < m->n_gpus; i++) {
			const struct cnl_wire_gpu_use *g = &m->gpus[i];
			json_t *it = json_pack("{s:i}", "index", g->index);

			if (g->util_pct >= 0)
				json_object_set_new(it, "util_pct",
				                    json_integer(g->util_pct));
			if (g->mem_used >= 0)
				json_object_set_new(it, "mem_used",
				                    json_integer(g->mem_used));
			json_array_append_new(a, it);
		}
		json_object_set_new(o, "gpus", a);
	}
	if (m->has_others)
		json_object_set_new(o, "others",
		                    json_pack("{s:I,s:I}", "cpu_milli",
		                              (json_int_t)m->others_cpu_milli,
		                              "mem_mib",
		                              (json_int_t)m->others_mem_mib));
	if (m->has_others && m->has_pods) {
		json_object_set_new(o, "pods_max", json_integer(m->pods_max));
		json_object_set_new(json_object_get(o, "others"), "pods",
		                    json_integer(m->others_pods));
	}
	if (!m->has_running)
		return o;
	a = json_array();
	for (size_t i = 0; i < m->n_running; i++) {
		json_t *it =
		    json_pack("{s:s,s:I}", "id", m->running[i].id, "epoch",
		              (json_int_t)m->running[i].epoch);

		if (m->running[i].has_vram_used)
			json_object_set_new(
			    it, "vram_used",
			    json_integer(m->running[i].vram_used));
		if (m->running[i].has_vram_quota)
			json_object_set_new(
			    it, "vram_quota",
			    json_integer(m->running[i].vram_quota));
		if (m->running[i].has_util)
			json_object_set_new(
			    it, "util_pct",
			    json_integer(m->running[i].util_pct));
		json_array_append_new(a, it);
	}
	json_object_set_new(o, "running", a);
	return o;
}

static int running_decode(const json_t *it, struct cnl_wire_running *ret,
                          char *err, size_t errlen)
{
	static const char *const fields[] = {
	    "id", "epoch", "vram_used", "vram_quota", "util_pct", NULL};
	int64_t util = 0;

	if (!json_is_object(it))
		return cnl_wire_fail(err, errlen, "must be an object");
	CNL_WIRE_TRY(cnl_wire_check(it, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(it, "id", true, ret->id, sizeof(ret->id),
	                              err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(it, "epoch", true, 0, INT64_MAX,
	                              &ret->epoch, err, errlen));
	ret->has_vram_used = json_object_get(it, "vram_used") != NULL;
	ret->has_vram_quota = json_object_get(it, "vram_quota") != NULL;
	CNL_WIRE_TRY(cnl_wire_get_int(it, "vram_used", false, 0, INT64_MAX,
	                              &ret->vram_used, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(it, "vram_quota", false, 0, INT64_MAX,
	                              &ret->vram_quota, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(it, "util_pct", false, 0, 100, &util, err,
	                              errlen));
	ret->has_util = json_object_get(it, "util_pct") != NULL;
	ret->util_pct = (int)util;
	return 0;
}

static int gpu_use_decode(const json_t *it, struct cnl_wire_gpu_use *ret,
                          char *err, size_t errlen)
{
	static const char *const fields[] = {"index", "util_pct", "mem_used",
	                                     NULL};
	int64_t v;

	if (!json_is_object(it))
		return cnl_wire_fail(err, errlen, "must be an object");
	CNL_WIRE_TRY(cnl_wire_check(it, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(it, "index", true, 0,
	                              CNL_WIRE_GPUS_MAX - 1, &v, err, errlen));
	ret->index = (int)v;
	v = -1;
	CNL_WIRE_TRY(
	    cnl_wire_get_int(it, "util_pct", false, 0, 100, &v, err, errlen));
	ret->util_pct = json_object_get(it, "util_pct") ? (int)v : -1;
	ret->mem_used = -1;
	CNL_WIRE_TRY(cnl_wire_get_int(it, "mem_used", false, 0, INT64_MAX,
	                              &ret->mem_used, err, errlen));
	if (!json_object_get(it, "mem_used"))
		ret->mem_used = -1;
	return 0;
}

int cnl_wire_heartbeat_decode(const json_t *j, struct cnl_wire_heartbeat *ret,
                              char *err, size_t errlen)
{
	/* "epoch" is what older agents send beside "running"; ignored. */
	static const char *const fields[] = {
	    "running", "epoch", "volumes", "gpus", "others", "pods_max", NULL};
	static const char *const ofields[] = {"cpu_milli", "mem_mib", "pods",
	                                      NULL};
	const json_t *g = NULL, *a = NULL, *o;
	int64_t epoch;

	memset(ret, 0, sizeof(*ret));
	CNL_WIRE_TRY(cnl_wire_check(j, fields, err, errlen));
	if ((o = json_object_get(j, "others"))) {
		if (!json_is_object(o))
			return cnl_wire_fail(err, errlen,
			                     "field \"others\": must be an "
			                     "object");
		CNL_WIRE_TRY(cnl_wire_nested(
		    "others", cnl_wire_check(o, ofields, err, errlen), err,
		    errlen));
		CNL_WIRE_TRY(cnl_wire_nested(
		    "others",
		    cnl_wire_get_int(o, "cpu_milli", true, 0, INT64_MAX / 4,
		                     &ret->others_cpu_milli, err, errlen),
		    err, errlen));
		CNL_WIRE_TRY(cnl_wire_nested(
		    "others",
		    cnl_wire_get_int(o, "mem_mib", true, 0, INT64_MAX / 4,
		                     &ret->others_mem_mib, err, errlen),
		    err, errlen));
		ret->has_others = true;
		/* The pods limit comes with others' count, or not at all. */
		if (!json_object_get(j, "pods_max") !=
		    !json_object_get(o, "pods"))
			return cnl_wire_fail(err, errlen,
			                     "fields \"pods_max\" and "
			                     "\"others.pods\": give both or "
			                     "neither");
		if (json_object_get(j, "pods_max")) {
			CNL_WIRE_TRY(cnl_wire_get_int(j, "pods_max", true, 1,
			                              1000000, &ret->pods_max,
			                              err, errlen));
			CNL_WIRE_TRY(cnl_wire_nested(
			    "others",
			    cnl_wire_get_int(o, "pods", true, 0, 1000000,
			                     &ret->others_pods, err, errlen),
			    err, errlen));
			ret->has_pods = true;
		}
	} else if (json_object_get(j, "pods_max")) {
		return cnl_wire_fail(err, errlen,
		                     "field \"pods_max\": comes with "
		                     "\"others\"");
	}
	CNL_WIRE_TRY(cnl_wire_get_int(j, "epoch", false, 0, INT64_MAX, &epoch,
	                              err, errlen));
	CNL_WIRE_TRY(ids_decode(j, "volumes", &ret->volumes, &ret->n_volumes,
	                        &ret->has_volumes, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_array(j, "gpus", false, CNL_WIRE_GPUS_MAX, &g,
	                                err, errlen));
	for (size_t i = 0; g && i < json_array_size(g); i++) {
		char key[32];

		snprintf(key, sizeof(key), "gpus[%zu]", i);
		CNL_WIRE_TRY(
		    cnl_wire_nested(key,
		                    gpu_use_decode(json_array_get(g, i),
		                                   &ret->gpus[i], err, errlen),
		                    err, errlen));
		for (size_t k = 0; k < i; k++)
			if (ret->gpus[k].index == ret->gpus[i].index)
				return cnl_wire_fail(
				    err, errlen,
				    "field \"%s.index\": GPU %d is listed "
				    "twice",
				    key, ret->gpus[i].index);
		ret->n_gpus = i + 1;
	}
	CNL_WIRE_TRY(cnl_wire_get_array(j, "running", false, CNL_WIRE_LIST_MAX,
	                                &a, err, errlen));
	if (!a)
		return 0;
	ret->has_running = true;
	ret->running =
	    cnl_xcalloc(json_array_size(a) + 1, sizeof(*ret->running));
	for (size_t i = 0; i < json_array_size(a); i++) {
		char key[32];

		snprintf(key, sizeof(key), "running[%zu]", i);
		CNL_WIRE_TRY(cnl_wire_nested(
		    key,
		    running_decode(json_array_get(a, i), &ret->running[i], err,
		                   errlen),
		    err, errlen));
		ret->n_running = i + 1;
	}
	return 0;
}

void cnl_wire_heartbeat_done(struct cnl_wire_heartbeat *m)
{
	if (!m)
		return;
	free(m->running);
	m->running = NULL;
	m->n_running = 0;
	free(m->volumes);
	m->volumes = NULL;
	m->n_volumes = 0;
}

/* ---- assignments --------------------------------------------------------- */

static json_t *slice_encode(const struct cnl_wire_slice *s)
{
	json_t *o = json_pack("{s:i,s:I,s:I}", "blocks", s->blocks, "vram_mib",
	                      (json_int_t)s->vram_mib, "gpu_mask",
	                      (json_int_t)s->gpu_mask);

	if (s->mig_profile[0]) {
		json_object_set_new(o, "mig_profile",
		                    json_string(s->mig_profile));
		json_object_set_new(o, "mig_start", json_integer(s->mig_start));
	}
	return o;
}

static int slice_decode(const json_t *o, struct cnl_wire_slice *ret, char *err,
                        size_t errlen)
{
	static const char *const fields[] = {
	    "blocks", "vram_mib", "gpu_mask", "mig_profile", "mig_start", NULL};
	int64_t mask = 0;

	if (!json_is_object(o))
		return cnl_wire_fail(err, errlen, "must be an object");
	CNL_WIRE_TRY(cnl_wire_check(o, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int32(o, "blocks", true, 0,
	                                100 * CNL_WIRE_GPUS_MAX, &ret->blocks,
	                                err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(o, "vram_mib", true, 0, INT64_C(1) << 40,
	                              &ret->vram_mib, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(o, "gpu_mask", true, 0,
	                              (1 << CNL_WIRE_GPUS_MAX) - 1, &mask, err,
	                              errlen));
	ret->gpu_mask = (uint32_t)mask;
	ret->mig_start = -1;
	if (cnl_wire_get_str(o, "mig_profile", false, ret->mig_profile,
	                     sizeof(ret->mig_profile), err, errlen) > 0) {
		CNL_WIRE_TRY(cnl_wire_get_int32(o, "mig_start", true, 0, 7,
		                                &ret->mig_start, err, errlen));
	} else if (json_object_get(o, "mig_start")) {
		return cnl_wire_fail(
		    err, errlen, "field \"mig_start\": only with mig_profile");
	}
	return 0;
}

static json_t *gang_encode(const struct cnl_wire_gang *g)
{
	json_t *nodes = json_array();

	for (int i = 0; i < g->n_nodes; i++)
		json_array_append_new(nodes, json_string(g->nodes[i]));
	return json_pack("{s:s,s:i,s:i,s:o}", "id", g->id, "rank", g->rank,
	                 "size", g->size, "nodes", nodes);
}

static int gang_decode(const json_t *o, struct cnl_wire_gang *ret, char *err,
                       size_t errlen)
{
	static const char *const fields[] = {"id", "rank", "size", "nodes",
	                                     NULL};
	const json_t *a = NULL;

	if (!json_is_object(o))
		return cnl_wire_fail(err, errlen, "must be an object");
	CNL_WIRE_TRY(cnl_wire_check(o, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(o, "id", true, ret->id, sizeof(ret->id),
	                              err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int32(o, "size", true, 1, CNL_WIRE_GANG_MAX,
	                                &ret->size, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int32(o, "rank", true, 0, ret->size - 1,
	                                &ret->rank, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_array(o, "nodes", true, CNL_WIRE_GANG_MAX, &a,
	                                err, errlen));
	for (size_t i = 0; i < json_array_size(a); i++)
		CNL_WIRE_TRY(cnl_wire_item_str(a, i, "nodes", ret->nodes[i],
		                               sizeof(ret->nodes[i]), err,
		                               errlen));
	ret->n_nodes = (int)json_array_size(a);
	return 0;
}

json_t *cnl_wire_assignment_encode(const struct cnl_wire_assignment *m)
{
	json_t *o = json_pack(
	    "{s:s,s:s,s:I,s:s,s:s,s:s,s:s,s:o,s:I,s:I}", "id", m->id, "kind",
	    m->kind == CNL_WIRE_SERVER ? "server" : "job", "epoch",
	    (json_int_t)m->epoch, "action",
	    m->action == CNL_WIRE_STOP ? "stop" : "run", "project_id",
	    m->project_id, "user_id", m->user_id, "shape", m->shape, "gpu",
	    slice_encode(&m->gpu), "cpu_milli", (json_int_t)m->cpu_milli,
	    "mem_mib", (json_int_t)m->mem_mib);

	cnl_wire_set_str(o, "user", m->user);
	cnl_wire_set_str(o, "image", m->image);
	cnl_wire_set_str(o, "image_digest", m->image_digest);
	if (m->image_bytes > 0)
		json_object_set_new(o, "image_bytes",
		                    json_integer(m->image_bytes));
	if (m->kind == CNL_WIRE_SERVER) {
		cnl_wire_set_str(o, "name", m->name);
		json_object_set_new(o, "storage_gb",
		                    json_integer(m->storage_gb));
		json_object_set_new(o, "idle_timeout_s",
		                    json_integer(m->idle_timeout_s));
	} else {
		cnl_wire_set_str(o, "command", m->command);
	}
	if (m->has_gang)
		json_object_set_new(o, "gang", gang_encode(&m->gang));
	cnl_wire_set_time(o, "not_before", m->not_before_ms);
	cnl_wire_set_time(o, "signal_at", m->signal_ms);
	cnl_wire_set_time(o, "kill_at", m->kill_ms);
	cnl_wire_set_str(o, "traceparent", m->traceparent);
	if (m->secrets > 0)
		json_object_set_new(o, "secrets", json_integer(m->secrets));
	return o;
}

int cnl_wire_assignment_decode(const json_t *j, struct cnl_wire_assignment *ret,
                               char *err, size_t errlen)
{
	static const char *const fields[] = {
	    "id",         "kind",           "epoch",        "action",
	    "project_id", "user_id",        "user",         "shape",
	    "command",    "image",          "image_digest", "name",
	    "storage_gb", "idle_timeout_s", "gpu",          "gang",
	    "cpu_milli",  "mem_mib",        "not_before",   "signal_at",
	    "kill_at",    "image_bytes",    "traceparent",  "secrets",
	    NULL};
	static const char *const kinds[] = {"job", "server", NULL};
	static const char *const actions[] = {"run", "stop", NULL};
	int k, act;

	memset(ret, 0, sizeof(*ret));
	if (!json_is_object(j))
		return cnl_wire_fail(err, errlen, "must be an object");
	CNL_WIRE_TRY(cnl_wire_check(j, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "id", true, ret->id, sizeof(ret->id),
	                              err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_enum(j, "kind", kinds, &k, err, errlen));
	ret->kind = (enum cnl_wire_kind)k;
	CNL_WIRE_TRY(cnl_wire_get_int(j, "epoch", true, 0, INT64_MAX,
	                              &ret->epoch, err, errlen));
	CNL_WIRE_TRY(
	    cnl_wire_get_enum(j, "action", actions, &act, err, errlen));
	ret->action = (enum cnl_wire_action)act;
	CNL_WIRE_TRY(cnl_wire_get_str(j, "project_id", true, ret->project_id,
	                              sizeof(ret->project_id), err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "user_id", true, ret->user_id,
	                              sizeof(ret->user_id), err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "user", false, ret->user,
	                              sizeof(ret->user), err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "shape", true, ret->shape,
	                              sizeof(ret->shape), err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "command", false, ret->command,
	                              sizeof(ret->command), err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "image", false, ret->image,
	                              sizeof(ret->image), err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "image_digest", false,
	                              ret->image_digest,
	                              sizeof(ret->image_digest), err, errlen));
	if (ret->image_digest[0] && !cnl_digest_hex(ret->image_digest))
		return cnl_wire_fail(err, errlen,
		                     "field \"image_digest\": must be "
		                     "sha256:<64 hex digits>");
	CNL_WIRE_TRY(cnl_wire_get_int(j, "image_bytes", false, 0, INT64_MAX,
	                              &ret->image_bytes, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "name", false, ret->name,
	                              sizeof(ret->name), err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(j, "storage_gb", false, 0,
	                              INT64_C(1) << 40, &ret->storage_gb, err,
	                              errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(j, "idle_timeout_s", false, 0,
	                              INT64_C(1) << 40, &ret->idle_timeout_s,
	                              err, errlen));
	if (!json_object_get(j, "gpu"))
		return cnl_wire_fail(err, errlen, "field \"gpu\": missing");
	CNL_WIRE_TRY(cnl_wire_nested(
	    "gpu",
	    slice_decode(json_object_get(j, "gpu"), &ret->gpu, err, errlen),
	    err, errlen));
	if (json_object_get(j, "gang")) {
		ret->has_gang = true;
		CNL_WIRE_TRY(
		    cnl_wire_nested("gang",
		                    gang_decode(json_object_get(j, "gang"),
		                                &ret->gang, err, errlen),
		                    err, errlen));
	}
	CNL_WIRE_TRY(cnl_wire_get_int(j, "cpu_milli", true, 0, INT64_C(1) << 40,
	                              &ret->cpu_milli, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(j, "mem_mib", true, 0, INT64_C(1) << 40,
	                              &ret->mem_mib, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_time(j, "not_before", false,
	                               &ret->not_before_ms, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_time(j, "signal_at", false, &ret->signal_ms,
	                               err, errlen));
	CNL_WIRE_TRY(
	    cnl_wire_get_time(j, "kill_at", false, &ret->kill_ms, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "traceparent", false, ret->traceparent,
	                              sizeof(ret->traceparent), err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int32(j, "secrets", false, 0,
	                                CNL_WIRE_SECRETS_MAX, &ret->secrets,
	                                err, errlen));
	{
		struct cnl_trace t;

		if (ret->traceparent[0] &&
		    cnl_trace_parse(ret->traceparent, &t) < 0)
			return cnl_wire_fail(
			    err, errlen,
			    "field \"traceparent\": must be a W3C "
			    "traceparent (00-<32 hex>-<16 "
			    "hex>-<2 hex>)");
	}
	return 0;
}

json_t *cnl_wire_assignments_encode(const struct cnl_wire_assignments *m)
{
	json_t *a = json_array();

	for (size_t i = 0; i < m->n; i++)
		json_array_append_new(a,
		                      cnl_wire_assignment_encode(&m->items[i]));
	return json_pack("{s:I,s:I,s:o}", "version", (json_int_t)m->version,
	                 "epoch", (json_int_t)m->epoch, "assignments", a);
}

int cnl_wire_assignments_decode(const json_t *j,
                                struct cnl_wire_assignments *ret, char *err,
                                size_t errlen)
{
	static const char *const fields[] = {"version", "epoch", "assignments",
	                                     NULL};
	const json_t *a = NULL;
	int64_t v = 0;

	memset(ret, 0, sizeof(*ret));
	CNL_WIRE_TRY(cnl_wire_check(j, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(j, "version", true, 0, INT64_MAX, &v, err,
	                              errlen));
	ret->version = (uint64_t)v;
	CNL_WIRE_TRY(cnl_wire_get_int(j, "epoch", true, 0, INT64_MAX,
	                              &ret->epoch, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_array(j, "assignments", true,
	                                CNL_WIRE_LIST_MAX, &a, err, errlen));
	ret->items = cnl_xcalloc(json_array_size(a) + 1, sizeof(*ret->items));
	for (size_t i = 0; i < json_array_size(a); i++) {
		char key[40];

		snprintf(key, sizeof(key), "assignments[%zu]", i);
		CNL_WIRE_TRY(cnl_wire_nested(
		    key,
		    cnl_wire_assignment_decode(json_array_get(a, i),
		                               &ret->items[i], err, errlen),
		    err, errlen));
		ret->n = i + 1;
	}
	return 0;
}

void cnl_wire_assignments_done(struct cnl_wire_assignments *m)
{
	if (!m)
		return;
	free(m->items);
	m->items = NULL;
	m->n = 0;
}

/* ---- report -------------------------------------------------------------- */

static const char *const report_states[] = {"running", "succeeded", "failed",
                                            "stopped", NULL};

const char *cnl_wire_report_state_name(enum cnl_wire_report_state s)
{
	return (unsigned)s < 4 ? report_states[s] : "?";
}

json_t *cnl_wire_report_encode(const struct cnl_wire_report *m)
{
	json_t *o = json_pack("{s:s,s:I,s:s}", "id", m->id, "epoch",
	                      (json_int_t)m->epoch, "state",
	                      cnl_wire_report_state_name(m->state));

	if (m->has_exit_code)
		json_object_set_new(o, "exit_code", json_integer(m->exit_code));
	cnl_wire_set_str(o, "url", m->url);
	cnl_wire_set_str(o, "message", m->message);
	return o;
}

int cnl_wire_report_decode(const json_t *j, struct cnl_wire_report *ret,
                           char *err, size_t errlen)
{
	static const char *const fields[] = {
	    "id", "epoch", "state", "exit_code", "url", "message", NULL};
	int st, r;

	memset(ret, 0, sizeof(*ret));
	CNL_WIRE_TRY(cnl_wire_check(j, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "id", true, ret->id, sizeof(ret->id),
	                              err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(j, "epoch", true, 0, INT64_MAX,
	                              &ret->epoch, err, errlen));
	CNL_WIRE_TRY(
	    cnl_wire_get_enum(j, "state", report_states, &st, err, errlen));
	ret->state = (enum cnl_wire_report_state)st;
	CNL_WIRE_TRY(r = cnl_wire_get_int32(j, "exit_code", false, -255, 255,
	                                    &ret->exit_code, err, errlen));
	ret->has_exit_code = r > 0;
	CNL_WIRE_TRY(cnl_wire_get_str(j, "url", false, ret->url,
	                              sizeof(ret->url), err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "message", false, ret->message,
	                              sizeof(ret->message), err, errlen));
	return 0;
}

/* ---- GPU memory audit kill ----------------------------------------------- */

json_t *cnl_wire_gpu_kill_encode(const struct cnl_wire_gpu_kill *m)
{
	return json_pack("{s:s,s:I,s:i,s:i,s:I,s:I,s:I}", "id", m->id, "epoch",
	                 (json_int_t)m->epoch, "pid", m->pid, "gpu", m->gpu,
	                 "used", (json_int_t)m->used, "pid_used",
	                 (json_int_t)m->pid_used, "quota",
	                 (json_int_t)m->quota);
}

int cnl_wire_gpu_kill_decode(const json_t *j, struct cnl_wire_gpu_kill *ret,
                             char *err, size_t errlen)
{
	static const char *const fields[] = {"id",   "epoch",    "pid",   "gpu",
	                                     "used", "pid_used", "quota", NULL};

	memset(ret, 0, sizeof(*ret));
	CNL_WIRE_TRY(cnl_wire_check(j, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "id", true, ret->id, sizeof(ret->id),
	                              err, errlen));
	if (!ret->id[0])
		return cnl_wire_fail(err, errlen,
		                     "field \"id\": must not be empty");
	CNL_WIRE_TRY(cnl_wire_get_int(j, "epoch", true, 0, INT64_MAX,
	                              &ret->epoch, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int32(j, "pid", true, 1, CNL_WIRE_PID_MAX,
	                                &ret->pid, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int32(
	    j, "gpu", true, 0, CNL_WIRE_GPUS_MAX - 1, &ret->gpu, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(j, "used", true, 0, INT64_MAX, &ret->used,
	                              err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(j, "pid_used", true, 0, ret->used,
	                              &ret->pid_used, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(j, "quota", true, 0, INT64_MAX,
	                              &ret->quota, err, errlen));
	return 0;
}

/* ---- log chunk ----------------------------------------------------------- */

bool cnl_wire_utf8_ok(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;

	for (size_t i = 0; i < n;) {
		unsigned c = p[i], need, min;
		uint32_t cp;

		if (c == 0)
			return false;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			need = 1, min = 0x80, cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			need = 2, min = 0x800, cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			need = 3, min = 0x10000, cp = c & 0x07;
		} else {
			return false;
		}
		if (n - i <= need)
			return false;
		for (unsigned k = 1; k <= need; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (p[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += need + 1;
	}
	return true;
}

void cnl_wire_bytes_set(json_t *o, const char *key, const char *data, size_t n)
{
	char k64[64], *b64;

	if (cnl_wire_utf8_ok(data, n)) {
		json_object_set_new(o, key, json_stringn(data, n));
		return;
	}
	snprintf(k64, sizeof(k64), "%s_base64", key);
	b64 = cnl_b64_encode_new(data, n, CNL_B64_STD | CNL_B64_PAD);
	json_object_set_new(o, k64, json_string_nocheck(b64 ? b64 : ""));
	free(b64);
}

json_t *cnl_wire_log_encode(const struct cnl_wire_log *m)
{
	json_t *o = json_pack("{s:s,s:I,s:s}", "id", m->id, "epoch",
	                      (json_int_t)m->epoch, "stream",
	                      m->stderr_ ? "stderr" : "stdout");

	if (m->has_offset)
		json_object_set_new(o, "offset", json_integer(m->offset));
	if (m->has_offset && m->dropped > 0)
		json_object_set_new(o, "dropped", json_integer(m->dropped));
	cnl_wire_bytes_set(o, "data", m->data ? m->data : "",
	                   m->data ? m->len : 0);
	return o;
}

int cnl_wire_log_decode(const json_t *j, struct cnl_wire_log *ret, char *err,
                        size_t errlen)
{
	static const char *const fields[] = {"id",          "epoch",   "stream",
	                                     "offset",      "dropped", "data",
	                                     "data_base64", NULL};
	static const char *const streams[] = {"stdout", "stderr", NULL};
	const json_t *text, *b64;
	int st, r;

	memset(ret, 0, sizeof(*ret));
	CNL_WIRE_TRY(cnl_wire_check(j, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "id", true, ret->id, sizeof(ret->id),
	                              err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_int(j, "epoch", true, 0, INT64_MAX,
	                              &ret->epoch, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_enum(j, "stream", streams, &st, err, errlen));
	ret->stderr_ = st == 1;
	CNL_WIRE_TRY(r = cnl_wire_get_int(j, "offset", false, 0, INT64_MAX / 2,
	                                  &ret->offset, err, errlen));
	ret->has_offset = r > 0;
	CNL_WIRE_TRY(cnl_wire_get_int(j, "dropped", false, 0, ret->offset,
	                              &ret->dropped, err, errlen));
	if (ret->dropped && !ret->has_offset)
		return cnl_wire_fail(err, errlen,
		                     "field \"dropped\": only with \"offset\"");
	text = json_object_get(j, "data");
	b64 = json_object_get(j, "data_base64");
	if (!text == !b64)
		return cnl_wire_fail(err, errlen,
		                     "field \"data\": give exactly one of "
		                     "\"data\" and \"data_base64\"");
	if (text) {
		if (!json_is_string(text))
			return cnl_wire_fail(
			    err, errlen, "field \"data\": must be a string");
		ret->len = json_string_length(text);
		if (ret->len >= CNL_WIRE_LOG_MAX)
			return cnl_wire_fail(
			    err, errlen, "field \"data\": longer than %d bytes",
			    CNL_WIRE_LOG_MAX - 1);
		ret->data = cnl_xmalloc(ret->len + 1);
		memcpy(ret->data, json_string_value(text), ret->len);
		ret->data[ret->len] = '\0';
		return 0;
	}
	if (!json_is_string(b64) ||
	    cnl_b64_decode_new(json_string_value(b64),
	                       CNL_B64_STD | CNL_B64_PAD, CNL_WIRE_LOG_MAX - 1,
	                       (uint8_t **)&ret->data, &ret->len) < 0)
		return cnl_wire_fail(err, errlen,
		                     "field \"data_base64\": must be padded "
		                     "base64 of less than %d bytes",
		                     CNL_WIRE_LOG_MAX);
	return 0;
}

void cnl_wire_log_done(struct cnl_wire_log *m)
{
	if (!m)
		return;
	free(m->data);
	m->data = NULL;
	m->len = 0;
}

json_t *cnl_wire_log_ack_encode(const struct cnl_wire_log_ack *m)
{
	json_t *o = json_object();

	if (m->has_next)
		json_object_set_new(o, "next", json_integer(m->next));
	return o;
}

int cnl_wire_log_ack_decode(const json_t *j, struct cnl_wire_log_ack *ret,
                            char *err, size_t errlen)
{
	int r;

	memset(ret, 0, sizeof(*ret));
	/* Other fields (the id of a stored chunk, an error) may come too. */
	if (!json_is_object(j))
		return cnl_wire_fail(err, errlen, "not an object");
	CNL_WIRE_TRY(r = cnl_wire_get_int(j, "next", false, 0, INT64_MAX / 2,
	                                  &ret->next, err, errlen));
	ret->has_next = r > 0;
	return 0;
}

/* ---- files --------------------------------------------------------------- */

int cnl_wire_path_check(const char *path, char *err, size_t errlen)
{
	size_t n = strlen(path), comp = 0;

	if (n == 0)
		return cnl_wire_fail(err, errlen, "empty path");
	if (n >= CNL_WIRE_PATH_MAX)
		return cnl_wire_fail(err, errlen, "path longer than %d bytes",
		                     CNL_WIRE_PATH_MAX - 1);
	if (!cnl_wire_utf8_ok(path, n))
		return cnl_wire_fail(err, errlen, "path is not UTF-8");
	for (size_t i = 0; i <= n; i++) {
		unsigned char c = (unsigned char)path[i];

		if (c == '/' || c == '\0') {
			const char *s = path + i - comp;

			if (comp == 0)
				return cnl_wire_fail(
				    err, errlen,
				    i == 0 ? "path is absolute"
				           : "path has an empty component");
			if ((comp == 1 && s[0] == '.') ||
			    (comp == 2 && s[0] == '.' && s[1] == '.'))
				return cnl_wire_fail(
				    err, errlen,
				    "path has a \".\" or \"..\" component");
			if (comp > 255)
				return cnl_wire_fail(err, errlen,
				                     "path has a component "
				                     "longer than 255 bytes");
			comp = 0;
			continue;
		}
		if (c < 0x20 || c == 0x7f)
			return cnl_wire_fail(err, errlen,
			                     "path has a control character");
		comp++;
	}
	return 0;
}

static bool hex64_ok(const char *s)
{
	return strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

json_t *cnl_wire_file_encode(const struct cnl_wire_file *m)
{
	return json_pack("{s:s,s:I,s:s}", "path", m->path, "size",
	                 (json_int_t)m->size, "sha256", m->sha256);
}

int cnl_wire_file_decode(const json_t *j, struct cnl_wire_file *ret, char *err,
                         size_t errlen)
{
	static const char *const fields[] = {"path", "size", "sha256", NULL};
	char why[128];

	memset(ret, 0, sizeof(*ret));
	if (!json_is_object(j))
		return cnl_wire_fail(err, errlen, "must be an object");
	CNL_WIRE_TRY(cnl_wire_check(j, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "path", true, ret->path,
	                              sizeof(ret->path), err, errlen));
	if (cnl_wire_path_check(ret->path, why, sizeof(why)) < 0)
		return cnl_wire_fail(err, errlen, "field \"path\": %s", why);
	CNL_WIRE_TRY(cnl_wire_get_int(j, "size", true, 0, INT64_MAX, &ret->size,
	                              err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_str(j, "sha256", true, ret->sha256,
	                              sizeof(ret->sha256), err, errlen));
	if (!hex64_ok(ret->sha256))
		return cnl_wire_fail(err, errlen,
		                     "field \"sha256\": must be 64 lower-case "
		                     "hex digits");
	return 0;
}

json_t *cnl_wire_files_encode(const struct cnl_wire_files *m)
{
	json_t *a = json_array();

	for (size_t i = 0; i < m->n; i++)
		json_array_append_new(a, cnl_wire_file_encode(&m->items[i]));
	return json_pack("{s:o}", "items", a);
}

int cnl_wire_files_decode(const json_t *j, struct cnl_wire_files *ret,
                          char *err, size_t errlen)
{
	static const char *const fields[] = {"items", NULL};
	const json_t *a = NULL;

	memset(ret, 0, sizeof(*ret));
	CNL_WIRE_TRY(cnl_wire_check(j, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_array(j, "items", true, CNL_WIRE_LIST_MAX, &a,
	                                err, errlen));
	ret->items = cnl_xcalloc(json_array_size(a) + 1, sizeof(*ret->items));
	for (size_t i = 0; i < json_array_size(a); i++) {
		char key[32];
		int r;

		snprintf(key, sizeof(key), "items[%zu]", i);
		r = cnl_wire_nested(key,
		                    cnl_wire_file_decode(json_array_get(a, i),
		                                         &ret->items[i], err,
		                                         errlen),
		                    err, errlen);
		ret->n = i + 1;
		if (r < 0)
			return r;
	}
	return 0;
}

void cnl_wire_files_done(struct cnl_wire_files *m)
{
	if (!m)
		return;
	free(m->items);
	m->items = NULL;
	m->n = 0;
}

/* ---- tunnels ------------------------------------------------------------ */

int cnl_wire_exec_check(const json_t *a, char *err, size_t errlen)
{
	size_t total = 0;

	if (!json_is_array(a) || json_array_size(a) == 0 ||
	    json_array_size(a) > CNL_WIRE_EXEC_ARGS)
		return cnl_wire_fail(err, errlen,
		                     "field \"command\": must be an array of 1 "
		                     "to %d strings",
		                     CNL_WIRE_EXEC_ARGS);
	for (size_t i = 0; i < json_array_size(a); i++) {
		const json_t *v = json_array_get(a, i);

		if (!json_is_string(v) ||
		    strlen(json_string_value(v)) != json_string_length(v))
			return cnl_wire_fail(err, errlen,
			                     "field \"command\": item %zu must "
			                     "be a string without NUL",
			                     i);
		total += json_string_length(v) + 1;
	}
	if (total > CNL_WIRE_EXEC_BYTES)
		return cnl_wire_fail(err, errlen,
		                     "field \"command\": longer than %d bytes",
		                     CNL_WIRE_EXEC_BYTES);
	return 0;
}

/* A string of 1..@max bytes without NUL (0 allowed when @empty_ok). */
static bool text_ok(const json_t *v, size_t max, bool empty_ok)
{
	return json_is_string(v) && json_string_length(v) <= max &&
	       (empty_ok || json_string_length(v) > 0) &&
	       strlen(json_string_value(v)) == json_string_length(v);
}

static int ssh_decode(const json_t *o, struct cnl_wire_tunnel *m, char *err,
                      size_t errlen)
{
	static const char *const fields[] = {"host_key", "authorized_keys",
	                                     NULL};
	const json_t *hk = json_object_get(o, "host_key");
	const json_t *ak = json_object_get(o, "authorized_keys");

	CNL_WIRE_TRY(cnl_wire_check(o, fields, err, errlen));
	if (!text_ok(hk, CNL_WIRE_SSH_HOST_KEY_MAX, false))
		return cnl_wire_fail(err, errlen,
		                     "field \"ssh.host_key\": a string of 1 to "
		                     "%d bytes without NUL",
		                     CNL_WIRE_SSH_HOST_KEY_MAX);
	if (!text_ok(ak, CNL_WIRE_SSH_KEYS_MAX, true))
		return cnl_wire_fail(err, errlen,
		                     "field \"ssh.authorized_keys\": a string "
		                     "of at most %d bytes without NUL",
		                     CNL_WIRE_SSH_KEYS_MAX);
	m->ssh_host_key = cnl_xstrdup(json_string_value(hk));
	m->ssh_keys = cnl_xstrdup(json_string_value(ak));
	return 0;
}

json_t *cnl_wire_tunnels_encode(const struct cnl_wire_tunnels *m)
{
	json_t *a = json_array();

	for (size_t i = 0; i < m->n; i++) {
		json_t *o = json_pack("{s:s,s:s}", "id", m->items[i].id,
		                      "workload", m->items[i].workload);

		if (m->items[i].argv) {
			json_t *c = json_array();

			for (size_t k = 0; k < m->items[i].argc; k++)
				json_array_append_new(
				    c, json_string(m->items[i].argv[k]));
			json_object_set_new(o, "command", c);
		}
		if (m->items[i].ssh_host_key)
			json_object_set_new(o, "ssh",
			                    json_pack("{s:s,s:s}", "host_key",
			                              m->items[i].ssh_host_key,
			                              "authorized_keys",
			                              m->items[i].ssh_keys
			                                  ? m->items[i].ssh_keys
			                                  : ""));
		json_array_append_new(a, o);
	}
	return json_pack("{s:o}", "tunnels", a);
}

int cnl_wire_tunnels_decode(const json_t *j, struct cnl_wire_tunnels *ret,
                            char *err, size_t errlen)
{
	static const char *const fields[] = {"tunnels", NULL};
	static const char *const item[] = {"id", "workload", "command", "ssh",
	                                   NULL};
	const json_t *a = NULL;

	memset(ret, 0, sizeof(*ret));
	CNL_WIRE_TRY(cnl_wire_check(j, fields, err, errlen));
	CNL_WIRE_TRY(cnl_wire_get_array(j, "tunnels", true,
	                                CNL_WIRE_TUNNELS_MAX, &a, err, errlen));
	for (size_t i = 0; i < json_array_size(a); i++) {
		const json_t *t = json_array_get(a, i), *c;
		struct cnl_wire_tunnel *m = &ret->items[i];
		char key[40];
		int r;

		snprintf(key, sizeof(key), "tunnels[%zu]", i);
		if ((r = cnl_wire_check(t, item, err, errlen)) < 0 ||
		    (r = cnl_wire_get_str(t, "id", true, m->id, sizeof(m->id),
		                          err, errlen)) < 0 ||
		    (r = cnl_wire_get_str(t, "workload", true, m->workload,
		                          sizeof(m->workload), err, errlen)) <
		        0)
			return cnl_wire_nested(key, r, err, errlen);
		ret->n = i + 1;
		if ((c = json_object_get(t, "ssh")) &&
		    (r = ssh_decode(c, m, err, errlen)) < 0)
			return cnl_wire_nested(key, r, err, errlen);
		if (!(c = json_object_get(t, "command")))
			continue;
		if (m->ssh_host_key)
			return cnl_wire_nested(
			    key,
			    cnl_wire_fail(err, errlen,
			                  "\"ssh\" and \"command\" together"),
			    err, errlen);
		if ((r = cnl_wire_exec_check(c, err, errlen)) < 0)
			return cnl_wire_nested(key, r, err, errlen);
		m->argc = json_array_size(c);
		m->argv = cnl_xcalloc(m->argc + 1, sizeof(*m->argv));
		for (size_t k = 0; k < m->argc; k++)
			m->argv[k] = cnl_xstrdup(
			    json_string_value(json_array_get(c, k)));
	}
	return 0;
}

void cnl_wire_tunnels_done(struct cnl_wire_tunnels *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++) {
		for (size_t k = 0; m->items[i].argv && k < m->items[i].argc;
		     k++)
			free(m->items[i].argv[k]);
		free(m->items[i].argv);
		m->items[i].argv = NULL;
		if (m->items[i].ssh_host_key)
			explicit_bzero(m->items[i].ssh_host_key,
			               strlen(m->items[i].ssh_host_key));
		free(m->items[i].ssh_host_key);
		free(m->items[i].ssh_keys);
		m->items[i].ssh_host_key = m->items[i].ssh_keys = NULL;
	}
	m->n = 0;
}

void cnl_wire_exec_head(unsigned char h[5], int kind, uint32_t n)
{
	h[0] = (unsigned char)kind;
	h[1] = (unsigned char)(n >> 24);
	h[2] = (unsigned char)(n >> 16);
	h[3] = (unsigned char)(n >> 8);
	h[4] = (unsigned char)n;
}

void cnl_wire_exec_code(unsigned char c[4], int code)
{
	uint32_t u = (uint32_t)code;

	c[0] = (unsigned char)(u >> 24);
	c[1] = (unsigned char)(u >> 16);
	c[2] = (unsigned char)(u >> 8);
	c[3] = (unsigned char)u;
}
