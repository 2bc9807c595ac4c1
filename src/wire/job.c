/*
 * job.c - encoders and strict decoders of the job and server documents
 * (job.h).
 *
 * The encoders write the fields in the order cnlabd has always sent
 * them, and each optional field under the rule it has always followed
 * (absent, or null), so that the documents are what they were before
 * they were typed.  The decoders follow node.c's pattern: the object's
 * keys against the document's list, then each field with the typed
 * readers of codec-internal.h; a nested object's errors carry its path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/util.h"
#include "wire/codec-internal.h"
#include "wire/job.h"
#include "wire/state.h"

#define TRY CNL_WIRE_TRY

/* Bounds of the numbers, generous where the API sets none. */
#define BIG         (INT64_C(1) << 40)
#define RUNTIME_MAX (INT64_C(366) * 86400)
#define BLOCKS_MAX  (100 * CNL_WIRE_GPUS_MAX)

static const char *const prio_names[] = {"low", "normal", "high", "critical",
                                         NULL};

const char *cnl_wire_priority_name(int priority)
{
	return (unsigned)priority < CNL_WIRE_PRIO_COUNT ? prio_names[priority]
	                                                : "?";
}

/* A nested object @key of @o, decoded by @fn into @ret with the path. */
#define NESTED(o, key, fn, ret)                                             \
	cnl_wire_nested(key, fn(json_object_get(o, key), ret, err, errlen), \
	                err, errlen)

/* A required store state of @kind ("pending", "running" ...). */
static int get_state(const json_t *o, const char *key, enum cnl_wl_kind kind,
                     char *buf, size_t size, char *err, size_t errlen)
{
	TRY(cnl_wire_get_str(o, key, true, buf, size, err, errlen));
	if (!cnl_wl_store_state_valid(kind, buf))
		return cnl_wire_fail(
		    err, errlen, "field \"%s\": unknown %s state \"%.40s\"",
		    key, kind == CNL_WL_JOB ? "job" : "server", buf);
	return 1;
}

/* ---- status -------------------------------------------------------------- */

static json_t *reservation_encode(const struct cnl_wire_reservation *m)
{
	return json_pack("{s:s,s:o,s:o,s:s}", "node", m->node, "cluster",
	                 m->cluster[0] ? json_string(m->cluster) : json_null(),
	                 "at", cnl_wire_time_or_null(m->at_ms), "shape",
	                 m->shape);
}

static int reservation_decode(const json_t *o, struct cnl_wire_reservation *ret,
                              char *err, size_t errlen)
{
	static const char *const fields[] = {"node", "cluster", "at", "shape",
	                                     NULL};

	TRY(cnl_wire_check(o, fields, err, errlen));
	TRY(cnl_wire_get_str(o, "node", true, ret->node, sizeof(ret->node), err,
	                     errlen));
	TRY(cnl_wire_get_str_or_null(o, "cluster", ret->cluster,
	                             sizeof(ret->cluster), err, errlen));
	TRY(cnl_wire_get_time(o, "at", true, &ret->at_ms, err, errlen));
	return cnl_wire_get_str(o, "shape", true, ret->shape,
	                        sizeof(ret->shape), err, errlen);
}

static int ready_decode(const json_t *o, struct cnl_wire_ready *ret, char *err,
                        size_t errlen)
{
	static const char *const fields[] = {"at", "from_starts", NULL};

	TRY(cnl_wire_check(o, fields, err, errlen));
	TRY(cnl_wire_get_time(o, "at", true, &ret->at_ms, err, errlen));
	return cnl_wire_get_int32(o, "from_starts", true, 0, INT32_MAX,
	                          &ret->from_starts, err, errlen);
}

static int estimate_decode(const json_t *o, struct cnl_wire_estimate *ret,
                           char *err, size_t errlen)
{
	static const char *const fields[] = {
	    "approximate", "unestimated_running", "assumed_runtime_s", NULL};

	TRY(cnl_wire_check(o, fields, err, errlen));
	TRY(cnl_wire_get_bool(o, "approximate", true, &ret->approximate, err,
	                      errlen));
	TRY(cnl_wire_get_int32(o, "unestimated_running", true, 0, INT32_MAX,
	                       &ret->unestimated_running, err, errlen));
	return cnl_wire_get_int(o, "assumed_runtime_s", true, 0, BIG,
	                        &ret->assumed_runtime_s, err, errlen);
}

json_t *cnl_wire_status_encode(const struct cnl_wire_status *m)
{
	json_t *o = json_pack("{s:s,s:I}", "phase", m->phase, "epoch",
	                      (json_int_t)m->epoch);

	if (m->pending) {
		json_object_set_new(o, "reason", json_string(m->reason));
		json_object_set_new(
		    o, "estimated_start",
		    cnl_wire_time_or_null(m->estimated_start_ms));
		if (m->has_reservation)
			json_object_set_new(
			    o, "reservation",
			    reservation_encode(&m->reservation));
	} else if (m->node[0]) {
		json_object_set_new(o, "node", json_string(m->node));
		json_object_set_new(o, "blocks", json_integer(m->blocks));
		if (m->shrinking_to)
			json_object_set_new(o, "shrinking_to",
			                    json_integer(m->shrinking_to));
		json_object_set_new(o, "started_at",
		                    cnl_wire_time_or_null(m->started_ms));
	}
	if (m->resized)
		json_object_set_new(o, "resized", json_integer(m->resized));
	if (m->has_estimated_ready)
		json_object_set_new(
		    o, "estimated_ready",
		    json_pack("{s:o,s:i}", "at",
		              cnl_wire_time_or_null(m->estimated_ready.at_ms),
		              "from_starts", m->estimated_ready.from_starts));
	if (m->has_estimate)
		json_object_set_new(
		    o, "estimate",
		    json_pack("{s:b,s:i,s:I}", "approximate",
		              m->estimate.approximate, "unestimated_running",
		              m->estimate.unestimated_running,
		              "assumed_runtime_s",
		              (json_int_t)m->estimate.assumed_runtime_s));
	return o;
}

int cnl_wire_status_decode(const json_t *j, struct cnl_wire_status *ret,
                           char *err, size_t errlen)
{
	static const char *const fields[] = {"phase",
	                                     "epoch",
	                                     "reason",
	                                     "estimated_start",
	                                     "reservation",
	                                     "node",
	                                     "blocks",
	                                     "started_at",
	                                     "estimated_ready",
	                                     "estimate",
	                                     "shrinking_to",
	                                     "resized",
	                                     NULL};
	enum cnl_wl_state st;

	memset(ret, 0, sizeof(*ret));
	TRY(cnl_wire_check(j, fields, err, errlen));
	TRY(cnl_wire_get_str(j, "phase", true, ret->phase, sizeof(ret->phase),
	                     err, errlen));
	if (cnl_wl_state_parse(ret->phase, &st) < 0)
		return cnl_wire_fail(err, errlen,
		                     "field \"phase\": unknown value \"%.40s\"",
		                     ret->phase);
	TRY(cnl_wire_get_int(j, "epoch", true, 0, INT64_MAX, &ret->epoch, err,
	                     errlen));
	TRY(cnl_wire_get_int32(j, "resized", false, 1, BLOCKS_MAX,
	                       &ret->resized, err, errlen));
	/* Waiting, or placed: the fields of one or the other. */
	if (json_object_get(j, "reason")) {
		static const char *const placed[] = {
		    "node", "blocks", "started_at", "shrinking_to", NULL};

		ret->pending = true;
		TRY(cnl_wire_get_str(j, "reason", true, ret->reason,
		                     sizeof(ret->reason), err, errlen));
		TRY(cnl_wire_get_time(j, "estimated_start", true,
		                      &ret->estimated_start_ms, err, errlen));
		for (int i = 0; placed[i]; i++)
			if (json_object_get(j, placed[i]))
				return cnl_wire_fail(
				    err, errlen,
				    "field \"%s\": not with \"reason\" (a "
				    "waiting workload is not placed)",
				    placed[i]);
		if (json_object_get(j, "reservation")) {
			ret->has_reservation = true;
			TRY(NESTED(j, "reservation", reservation_decode,
			           &ret->reservation));
		}
	} else {
		static const char *const waiting[] = {
		    "estimated_start", "reservation", "estimate", NULL};

		for (int i = 0; waiting[i]; i++)
			if (json_object_get(j, waiting[i]))
				return cnl_wire_fail(
				    err, errlen,
				    "field \"%s\": only with \"reason\" (a "
				    "waiting workload)",
				    waiting[i]);
		if (json_object_get(j, "node")) {
			TRY(cnl_wire_get_str(j, "node", true, ret->node,
			                     sizeof(ret->node), err, errlen));
			if (!ret->node[0])
				return cnl_wire_fail(err, errlen,
				                     "field \"node\": empty");
			TRY(cnl_wire_get_int32(j, "blocks", true, 0, BLOCKS_MAX,
			                       &ret->blocks, err, errlen));
			TRY(cnl_wire_get_time(j, "started_at", true,
			                      &ret->started_ms, err, errlen));
			TRY(cnl_wire_get_int32(j, "shrinking_to", false, 1,
			                       BLOCKS_MAX, &ret->shrinking_to,
			                       err, errlen));
		} else if (json_object_get(j, "blocks") ||
		           json_object_get(j, "started_at") ||
		           json_object_get(j, "shrinking_to")) {
			return cnl_wire_fail(
			    err, errlen, "field \"%s\": only with \"node\"",
			    json_object_get(j, "blocks") ? "blocks"
			    : json_object_get(j, "started_at")
			        ? "started_at"
			        : "shrinking_to");
		}
	}
	if (json_object_get(j, "estimated_ready")) {
		ret->has_estimated_ready = true;
		TRY(NESTED(j, "estimated_ready", ready_decode,
		           &ret->estimated_ready));
	}
	if (json_object_get(j, "estimate")) {
		ret->has_estimate = true;
		TRY(NESTED(j, "estimate", estimate_decode, &ret->estimate));
	}
	return 0;
}

/* ---- placement ----------------------------------------------------------- */

json_t *cnl_wire_placement_encode(const struct cnl_wire_placement *m)
{
	json_t *o = json_pack("{s:s,s:s,s:s}", "node", m->node, "reason",
	                      m->reason, "reason_text", m->reason_text);

	cnl_wire_set_str(o, "gpu_type", m->gpu_type);
	if (m->has_gpu_type_allowed)
		json_object_set_new(o, "gpu_type_allowed",
		                    json_boolean(m->gpu_type_allowed));
	if (m->has_dataset_local) {
		json_object_set_new(o, "dataset_local",
		                    json_boolean(m->dataset_local));
		json_object_set_new(o, "dataset_elsewhere",
		                    json_integer(m->dataset_elsewhere));
	}
	if (m->has_preferred)
		json_object_set_new(o, "preferred", json_boolean(m->preferred));
	cnl_wire_set_str(o, "cluster", m->cluster);
	cnl_wire_set_str(o, "zone", m->zone);
	cnl_wire_set_str(o, "rack", m->rack);
	json_object_set_new(o, "decided_at", cnl_wire_time(m->decided_ms));
	return o;
}

int cnl_wire_placement_decode(const json_t *j, struct cnl_wire_placement *ret,
                              char *err, size_t errlen)
{
	static const char *const fields[] = {"node",
	                                     "reason",
	                                     "reason_text",
	                                     "gpu_type",
	                                     "gpu_type_allowed",
	                                     "dataset_local",
	                                     "dataset_elsewhere",
	                                     "cluster",
	                                     "zone",
	                                     "rack",
	                                     "decided_at",
	                                     "preferred",
	                                     NULL};
	static const char *const reasons[] = {"started", "backfilled",
	                                      "after_preemption", "home", NULL};
	int r, k;

	memset(ret, 0, sizeof(*ret));
	TRY(cnl_wire_check(j, fields, err, errlen));
	TRY(cnl_wire_get_str(j, "node", true, ret->node, sizeof(ret->node), err,
	                     errlen));
	TRY(cnl_wire_get_enum(j, "reason", reasons, &k, err, errlen));
	snprintf(ret->reason, sizeof(ret->reason), "%s", reasons[k]);
	TRY(cnl_wire_get_str(j, "reason_text", true, ret->reason_text,
	                     sizeof(ret->reason_text), err, errlen));
	TRY(cnl_wire_get_str(j, "gpu_type", false, ret->gpu_type,
	                     sizeof(ret->gpu_type), err, errlen));
	TRY(r = cnl_wire_get_bool(j, "gpu_type_allowed", false,
	                          &ret->gpu_type_allowed, err, errlen));
	ret->has_gpu_type_allowed = r > 0;
	TRY(r = cnl_wire_get_bool(j, "dataset_local", false,
	                          &ret->dataset_local, err, errlen));
	ret->has_dataset_local = r > 0;
	if (ret->has_dataset_local)
		TRY(cnl_wire_get_int32(j, "dataset_elsewhere", true, 0,
		                       CNL_WIRE_LIST_MAX,
		                       &ret->dataset_elsewhere, err, errlen));
	else if (json_object_get(j, "dataset_elsewhere"))
		return cnl_wire_fail(
		    err, errlen,
		    "field \"dataset_elsewhere\": only with dataset_local");
	TRY(r = cnl_wire_get_bool(j, "preferred", false, &ret->preferred, err,
	                          errlen));
	ret->has_preferred = r > 0;
	TRY(cnl_wire_get_str(j, "cluster", false, ret->cluster,
	                     sizeof(ret->cluster), err, errlen));
	TRY(cnl_wire_get_str(j, "zone", false, ret->zone, sizeof(ret->zone),
	                     err, errlen));
	TRY(cnl_wire_get_str(j, "rack", false, ret->rack, sizeof(ret->rack),
	                     err, errlen));
	TRY(cnl_wire_get_time(j, "decided_at", true, &ret->decided_ms, err,
	                      errlen));
	return 0;
}

/* ---- gang ---------------------------------------------------------------- */

/* A list of node names under @key, when it has any. */
static void names_encode(json_t *o, const char *key,
                         const char (*names)[CNL_WIRE_NAME_MAX], int n)
{
	json_t *a;

	if (n <= 0)
		return;
	a = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_string(names[i]));
	json_object_set_new(o, key, a);
}

static int names_decode(const json_t *j, const char *key,
                        char (*names)[CNL_WIRE_NAME_MAX], int *n, char *err,
                        size_t errlen)
{
	const json_t *a = NULL;

	*n = 0;
	TRY(cnl_wire_get_array(j, key, false, CNL_WIRE_NODE_LIST_MAX, &a, err,
	                       errlen));
	for (size_t i = 0; a && i < json_array_size(a); i++)
		TRY(cnl_wire_item_str(a, i, key, names[i], CNL_WIRE_NAME_MAX,
		                      err, errlen));
	*n = a ? (int)json_array_size(a) : 0;
	return 0;
}

static json_t *gang_encode(const struct cnl_wire_job_gang *g)
{
	json_t *o = json_pack("{s:s,s:i,s:i}", "id", g->id, "rank", g->rank,
	                      "size", g->size);

	if (g->has_members) {
		json_t *a = json_array();

		for (int i = 0; i < g->n_members; i++)
			json_array_append_new(a, json_string(g->members[i]));
		json_object_set_new(o, "members", a);
	}
	if (g->has_placements) {
		json_t *a = json_array();

		for (int i = 0; i < g->n_placements; i++) {
			const struct cnl_wire_gang_place *p = &g->placements[i];
			json_t *it =
			    json_pack("{s:s,s:i,s:s}", "id", p->id, "rank",
			              p->rank, "state", p->state);

			cnl_wire_set_str(it, "node", p->node);
			cnl_wire_set_str(it, "zone", p->zone);
			cnl_wire_set_str(it, "rack", p->rack);
			json_array_append_new(a, it);
		}
		json_object_set_new(o, "placements", a);
	}
	return o;
}

static int gang_place_decode(const json_t *o, struct cnl_wire_gang_place *ret,
                             char *err, size_t errlen)
{
	static const char *const fields[] = {"id",   "rank", "state", "node",
	                                     "zone", "rack", NULL};

	TRY(cnl_wire_check(o, fields, err, errlen));
	TRY(cnl_wire_get_str(o, "id", true, ret->id, sizeof(ret->id), err,
	                     errlen));
	TRY(cnl_wire_get_int32(o, "rank", true, 0, CNL_WIRE_GANG_MAX - 1,
	                       &ret->rank, err, errlen));
	TRY(get_state(o, "state", CNL_WL_JOB, ret->state, sizeof(ret->state),
	              err, errlen));
	TRY(cnl_wire_get_str(o, "node", false, ret->node, sizeof(ret->node),
	                     err, errlen));
	TRY(cnl_wire_get_str(o, "zone", false, ret->zone, sizeof(ret->zone),
	                     err, errlen));
	return cnl_wire_get_str(o, "rack", false, ret->rack, sizeof(ret->rack),
	                        err, errlen);
}

static int gang_decode(const json_t *o, struct cnl_wire_job_gang *ret,
                       char *err, size_t errlen)
{
	static const char *const fields[] = {"id",      "rank",       "size",
	                                     "members", "placements", NULL};
	const json_t *a = NULL;

	TRY(cnl_wire_check(o, fields, err, errlen));
	TRY(cnl_wire_get_str(o, "id", true, ret->id, sizeof(ret->id), err,
	                     errlen));
	TRY(cnl_wire_get_int32(o, "size", true, 1, CNL_WIRE_GANG_MAX,
	                       &ret->size, err, errlen));
	TRY(cnl_wire_get_int32(o, "rank", true, 0, ret->size - 1, &ret->rank,
	                       err, errlen));
	TRY(cnl_wire_get_array(o, "members", false, CNL_WIRE_GANG_MAX, &a, err,
	                       errlen));
	if (a) {
		ret->has_members = true;
		for (size_t i = 0; i < json_array_size(a); i++)
			TRY(cnl_wire_item_str(a, i, "members", ret->members[i],
			                      sizeof(ret->members[i]), err,
			                      errlen));
		ret->n_members = (int)json_array_size(a);
	}
	a = NULL;
	TRY(cnl_wire_get_array(o, "placements", false, CNL_WIRE_GANG_MAX, &a,
	                       err, errlen));
	if (a) {
		ret->has_placements = true;
		for (size_t i = 0; i < json_array_size(a); i++) {
			char key[48];

			snprintf(key, sizeof(key), "placements[%zu]", i);
			TRY(cnl_wire_nested(
			    key,
			    gang_place_decode(json_array_get(a, i),
			                      &ret->placements[i], err, errlen),
			    err, errlen));
		}
		ret->n_placements = (int)json_array_size(a);
	}
	return 0;
}

/* ---- deadline check ------------------------------------------------------ */

static json_t *check_encode(const struct cnl_wire_deadline_check *m)
{
	return json_pack(
	    "{s:s,s:o,s:o,s:i,s:I,s:s}", "checked",
	    m->finish ? "finish" : "start", "runtime_s",
	    m->finish ? json_integer(m->runtime_s) : json_null(),
	    "earliest_start", cnl_wire_time_or_null(m->earliest_start_ms),
	    "unestimated_running", m->unestimated_running, "assumed_runtime_s",
	    (json_int_t)m->assumed_runtime_s, "text", m->text);
}

static int check_decode(const json_t *o, struct cnl_wire_deadline_check *ret,
                        char *err, size_t errlen)
{
	static const char *const fields[] = {"checked",
	                                     "runtime_s",
	                                     "earliest_start",
	                                     "unestimated_running",
	                                     "assumed_runtime_s",
	                                     "text",
	                                     NULL};
	static const char *const checked[] = {"start", "finish", NULL};
	int k;

	TRY(cnl_wire_check(o, fields, err, errlen));
	TRY(cnl_wire_get_enum(o, "checked", checked, &k, err, errlen));
	ret->finish = k == 1;
	if (ret->finish)
		TRY(cnl_wire_get_int(o, "runtime_s", true, 0, RUNTIME_MAX,
		                     &ret->runtime_s, err, errlen));
	else if (!json_is_null(json_object_get(o, "runtime_s")))
		return cnl_wire_fail(err, errlen,
		                     "field \"runtime_s\": must be null when "
		                     "only the start was checked");
	TRY(cnl_wire_get_time(o, "earliest_start", true,
	                      &ret->earliest_start_ms, err, errlen));
	TRY(cnl_wire_get_int32(o, "unestimated_running", true, 0, INT32_MAX,
	                       &ret->unestimated_running, err, errlen));
	TRY(cnl_wire_get_int(o, "assumed_runtime_s", true, 0, BIG,
	                     &ret->assumed_runtime_s, err, errlen));
	return cnl_wire_get_str(o, "text", true, ret->text, sizeof(ret->text),
	                        err, errlen);
}

/* ---- job ----------------------------------------------------------------- */

json_t *cnl_wire_job_encode(const struct cnl_wire_job *m)
{
	json_t *o = json_pack(
	    "{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:i,s:o,s:I,s:o,s:o}", "id",
	    m->id, "project_id", m->project_id, "user_id", m->user_id,
	    "command", m->command, "profile", m->profile, "gpu", m->gpu,
	    "priority", cnl_wire_priority_name(m->priority), "state", m->state,
	    "exit_code", m->exit_code, "deadline",
	    cnl_wire_time_or_null(m->deadline_ms), "runtime_s",
	    (json_int_t)m->runtime_s, "created_at",
	    cnl_wire_time(m->created_ms), "updated_at",
	    cnl_wire_time(m->updated_ms));

	if (m->has_status)
		json_object_set_new(o, "status",
		                    cnl_wire_status_encode(&m->status));
	json_object_set_new(o, "preemptible", json_boolean(m->preemptible));
	cnl_wire_set_str(o, "message", m->message);
	if (m->mem_mib > 0)
		json_object_set_new(o, "mem_mib", json_integer(m->mem_mib));
	if (m->cpu_milli > 0)
		json_object_set_new(o, "cpu_milli", json_integer(m->cpu_milli));
	if (m->has_gpu_types) {
		json_t *a = json_array();

		for (int i = 0; i < m->n_gpu_types; i++)
			json_array_append_new(a, json_string(m->gpu_types[i]));
		json_object_set_new(o, "gpu_types", a);
	}
	cnl_wire_set_str(o, "dataset", m->dataset);
	cnl_wire_set_str(o, "cluster", m->cluster);
	cnl_wire_set_str(o, "image", m->image);
	cnl_wire_set_str(o, "peer", m->peer);
	cnl_wire_set_str(o, "peer_job", m->peer_job);
	names_encode(o, "nodelist", m->nodelist, m->n_nodelist);
	names_encode(o, "exclude", m->exclude, m->n_exclude);
	names_encode(o, "prefer", m->prefer, m->n_prefer);
	names_encode(o, "avoid", m->avoid, m->n_avoid);
	json_object_set_new(o, "nodes", json_integer(m->nodes));
	if (m->gang)
		json_object_set_new(o, "gang", gang_encode(m->gang));
	if (m->has_placement)
		json_object_set_new(o, "placement",
		                    cnl_wire_placement_encode(&m->placement));
	if (m->has_deadline_check)
		json_object_set_new(o, "deadline_check",
		                    check_encode(&m->deadline_check));
	return o;
}

int cnl_wire_job_decode(const json_t *j, struct cnl_wire_job *ret, char *err,
                        size_t errlen)
{
	static const char *const fields[] = {
	    "id",         "project_id", "user_id",        "command",
	    "profile",    "gpu",        "priority",       "state",
	    "exit_code",  "deadline",   "runtime_s",      "created_at",
	    "updated_at", "status",     "preemptible",    "message",
	    "mem_mib",    "cpu_milli",  "gpu_types",      "dataset",
	    "image",      "nodelist",   "exclude",        "nodes",
	    "gang",       "placement",  "deadline_check", "prefer",
	    "avoid",      "cluster",    "peer",           "peer_job",
	    NULL};
	const json_t *a = NULL;

	memset(ret, 0, sizeof(*ret));
	TRY(cnl_wire_check(j, fields, err, errlen));
	TRY(cnl_wire_get_str(j, "id", true, ret->id, sizeof(ret->id), err,
	                     errlen));
	TRY(cnl_wire_get_str(j, "project_id", true, ret->project_id,
	                     sizeof(ret->project_id), err, errlen));
	TRY(cnl_wire_get_str(j, "user_id", true, ret->user_id,
	                     sizeof(ret->user_id), err, errlen));
	TRY(cnl_wire_get_str(j, "command", true, ret->command,
	                     sizeof(ret->command), err, errlen));
	TRY(cnl_wire_get_str(j, "profile", true, ret->profile,
	                     sizeof(ret->profile), err, errlen));
	TRY(cnl_wire_get_str(j, "gpu", true, ret->gpu, sizeof(ret->gpu), err,
	                     errlen));
	TRY(cnl_wire_get_enum(j, "priority", prio_names, &ret->priority, err,
	                      errlen));
	TRY(get_state(j, "state", CNL_WL_JOB, ret->state, sizeof(ret->state),
	              err, errlen));
	TRY(cnl_wire_get_int32(j, "exit_code", true, -255, 255, &ret->exit_code,
	                       err, errlen));
	TRY(cnl_wire_get_time(j, "deadline", true, &ret->deadline_ms, err,
	                      errlen));
	TRY(cnl_wire_get_int(j, "runtime_s", true, 0, RUNTIME_MAX,
	                     &ret->runtime_s, err, errlen));
	TRY(cnl_wire_get_time(j, "created_at", true, &ret->created_ms, err,
	                      errlen));
	TRY(cnl_wire_get_time(j, "updated_at", true, &ret->updated_ms, err,
	                      errlen));
	if (json_object_get(j, "status")) {
		ret->has_status = true;
		TRY(NESTED(j, "status", cnl_wire_status_decode, &ret->status));
	}
	TRY(cnl_wire_get_bool(j, "preemptible", true, &ret->preemptible, err,
	                      errlen));
	TRY(cnl_wire_get_str(j, "message", false, ret->message,
	                     sizeof(ret->message), err, errlen));
	TRY(cnl_wire_get_int(j, "mem_mib", false, 1, BIG, &ret->mem_mib, err,
	                     errlen));
	TRY(cnl_wire_get_int(j, "cpu_milli", false, 1, BIG, &ret->cpu_milli,
	                     err, errlen));
	TRY(cnl_wire_get_array(j, "gpu_types", false, CNL_WIRE_TYPES_MAX, &a,
	                       err, errlen));
	if (a) {
		ret->has_gpu_types = true;
		for (size_t i = 0; i < json_array_size(a); i++)
			TRY(cnl_wire_item_str(
			    a, i, "gpu_types", ret->gpu_types[i],
			    sizeof(ret->gpu_types[i]), err, errlen));
		ret->n_gpu_types = (int)json_array_size(a);
	}
	TRY(cnl_wire_get_str(j, "image", false, ret->image, sizeof(ret->image),
	                     err, errlen));
	TRY(names_decode(j, "nodelist", ret->nodelist, &ret->n_nodelist, err,
	                 errlen));
	TRY(names_decode(j, "exclude", ret->exclude, &ret->n_exclude, err,
	                 errlen));
	TRY(names_decode(j, "prefer", ret->prefer, &ret->n_prefer, err,
	                 errlen));
	TRY(names_decode(j, "avoid", ret->avoid, &ret->n_avoid, err, errlen));
	TRY(cnl_wire_get_str(j, "dataset", false, ret->dataset,
	                     sizeof(ret->dataset), err, errlen));
	TRY(cnl_wire_get_str(j, "cluster", false, ret->cluster,
	                     sizeof(ret->cluster), err, errlen));
	TRY(cnl_wire_get_str(j, "peer", false, ret->peer, sizeof(ret->peer),
	                     err, errlen));
	TRY(cnl_wire_get_str(j, "peer_job", false, ret->peer_job,
	                     sizeof(ret->peer_job), err, errlen));
	TRY(cnl_wire_get_int32(j, "nodes", true, 1, CNL_WIRE_GANG_MAX,
	                       &ret->nodes, err, errlen));
	if (json_object_get(j, "gang")) {
		ret->gang = cnl_xcalloc(1, sizeof(*ret->gang));
		TRY(NESTED(j, "gang", gang_decode, ret->gang));
	}
	if (json_object_get(j, "placement")) {
		ret->has_placement = true;
		TRY(NESTED(j, "placement", cnl_wire_placement_decode,
		           &ret->placement));
	}
	if (json_object_get(j, "deadline_check")) {
		ret->has_deadline_check = true;
		TRY(NESTED(j, "deadline_check", check_decode,
		           &ret->deadline_check));
	}
	return 0;
}

void cnl_wire_job_done(struct cnl_wire_job *m)
{
	if (!m)
		return;
	free(m->gang);
	m->gang = NULL;
}

/* ---- server -------------------------------------------------------------- */

json_t *cnl_wire_server_encode(const struct cnl_wire_server *m)
{
	json_t *o =
	    json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:s,s:o,s:o}", "id",
	              m->id, "project_id", m->project_id, "user_id", m->user_id,
	              "name", m->name, "image", m->image, "profile", m->profile,
	              "storage_gb", (json_int_t)m->storage_gb, "idle_timeout_s",
	              (json_int_t)m->idle_timeout_s, "state", m->state, "url",
	              m->url[0] ? json_string(m->url) : json_null(),
	              "created_at", cnl_wire_time(m->created_ms));

	if (m->has_status)
		json_object_set_new(o, "status",
		                    cnl_wire_status_encode(&m->status));
	cnl_wire_set_str(o, "message", m->message);
	return o;
}

int cnl_wire_server_decode(const json_t *j, struct cnl_wire_server *ret,
                           char *err, size_t errlen)
{
	static const char *const fields[] = {
	    "id",         "project_id", "user_id",        "name",  "image",
	    "profile",    "storage_gb", "idle_timeout_s", "state", "url",
	    "created_at", "status",     "message",        NULL};

	memset(ret, 0, sizeof(*ret));
	TRY(cnl_wire_check(j, fields, err, errlen));
	TRY(cnl_wire_get_str(j, "id", true, ret->id, sizeof(ret->id), err,
	                     errlen));
	TRY(cnl_wire_get_str(j, "project_id", true, ret->project_id,
	                     sizeof(ret->project_id), err, errlen));
	TRY(cnl_wire_get_str(j, "user_id", true, ret->user_id,
	                     sizeof(ret->user_id), err, errlen));
	TRY(cnl_wire_get_str(j, "name", true, ret->name, sizeof(ret->name), err,
	                     errlen));
	TRY(cnl_wire_get_str(j, "image", true, ret->image, sizeof(ret->image),
	                     err, errlen));
	TRY(cnl_wire_get_str(j, "profile", true, ret->profile,
	                     sizeof(ret->profile), err, errlen));
	TRY(cnl_wire_get_int(j, "storage_gb", true, 0, BIG, &ret->storage_gb,
	                     err, errlen));
	TRY(cnl_wire_get_int(j, "idle_timeout_s", true, 0, BIG,
	                     &ret->idle_timeout_s, err, errlen));
	TRY(get_state(j, "state", CNL_WL_SERVER, ret->state, sizeof(ret->state),
	              err, errlen));
	TRY(cnl_wire_get_str_or_null(j, "url", ret->url, sizeof(ret->url), err,
	                             errlen));
	TRY(cnl_wire_get_time(j, "created_at", true, &ret->created_ms, err,
	                      errlen));
	if (json_object_get(j, "status")) {
		ret->has_status = true;
		TRY(NESTED(j, "status", cnl_wire_status_decode, &ret->status));
	}
	TRY(cnl_wire_get_str(j, "message", false, ret->message,
	                     sizeof(ret->message), err, errlen));
	return 0;
}

/* ---- pages --------------------------------------------------------------- */

static json_t *page_encode(json_t *items, const char *next)
{
	return json_pack("{s:o,s:o}", "items", items, "next",
	                 next[0] ? json_string(next) : json_null());
}

/* The envelope of a page: its items array into *@ret_items, "next". */
static int page_decode(const json_t *j, const json_t **ret_items, char *next,
                       size_t size, char *err, size_t errlen)
{
	static const char *const fields[] = {"items", "next", NULL};

	TRY(cnl_wire_check(j, fields, err, errlen));
	TRY(cnl_wire_get_array(j, "items", true, CNL_WIRE_LIST_MAX, ret_items,
	                       err, errlen));
	return cnl_wire_get_str_or_null(j, "next", next, size, err, errlen);
}

json_t *cnl_wire_jobs_encode(const struct cnl_wire_jobs *m)
{
	json_t *a = json_array();

	for (size_t i = 0; i < m->n; i++)
		json_array_append_new(a, cnl_wire_job_encode(&m->items[i]));
	return page_encode(a, m->next);
}

int cnl_wire_jobs_decode(const json_t *j, struct cnl_wire_jobs *ret, char *err,
                         size_t errlen)
{
	const json_t *a = NULL;

	memset(ret, 0, sizeof(*ret));
	TRY(page_decode(j, &a, ret->next, sizeof(ret->next), err, errlen));
	ret->items = cnl_xcalloc(json_array_size(a) + 1, sizeof(*ret->items));
	for (size_t i = 0; i < json_array_size(a); i++) {
		char key[32];

		snprintf(key, sizeof(key), "items[%zu]", i);
		ret->n = i + 1; /* freed by _done() even when it fails */
		TRY(cnl_wire_nested(key,
		                    cnl_wire_job_decode(json_array_get(a, i),
		                                        &ret->items[i], err,
		                                        errlen),
		                    err, errlen));
	}
	return 0;
}

void cnl_wire_jobs_done(struct cnl_wire_jobs *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++)
		cnl_wire_job_done(&m->items[i]);
	free(m->items);
	m->items = NULL;
	m->n = 0;
}

json_t *cnl_wire_servers_encode(const struct cnl_wire_servers *m)
{
	json_t *a = json_array();

	for (size_t i = 0; i < m->n; i++)
		json_array_append_new(a, cnl_wire_server_encode(&m->items[i]));
	return page_encode(a, m->next);
}

int cnl_wire_servers_decode(const json_t *j, struct cnl_wire_servers *ret,
                            char *err, size_t errlen)
{
	const json_t *a = NULL;

	memset(ret, 0, sizeof(*ret));
	TRY(page_decode(j, &a, ret->next, sizeof(ret->next), err, errlen));
	ret->items = cnl_xcalloc(json_array_size(a) + 1, sizeof(*ret->items));
	for (size_t i = 0; i < json_array_size(a); i++) {
		char key[32];

		snprintf(key, sizeof(key), "items[%zu]", i);
		ret->n = i + 1;
		TRY(cnl_wire_nested(key,
		                    cnl_wire_server_decode(json_array_get(a, i),
		                                           &ret->items[i], err,
		                                           errlen),
		                    err, errlen));
	}
	return 0;
}

void cnl_wire_servers_done(struct cnl_wire_servers *m)
{
	if (!m)
		return;
	free(m->items);
	m->items = NULL;
	m->n = 0;
}
