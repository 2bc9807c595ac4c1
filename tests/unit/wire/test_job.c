/*
 * test_job.c - the job and server documents (wire/job.h): each document
 * round-trips, fully populated and minimal (encode, decode, encode again:
 * the same JSON, key order included), the encoders write exactly the
 * bytes cnlabd has always sent (fields, order, null and omission rules),
 * and the strict decoders refuse an unknown field (at the top and
 * nested), a wrong type, a number out of range, a string too long, a
 * value that is not one of its names and a missing field, naming the
 * field by its path.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cnlab/errors.h"
#include "wire/job.h"

#define T0          INT64_C(1777568400000) /* 2026-04-30T17:00:00.000Z */

#define SET(buf, s) snprintf(buf, sizeof(buf), "%s", s)

/* Compact JSON in insertion order: what the daemon sends. */
static char *dump(const json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT);

	assert_non_null(s);
	return s;
}

/* encode -> decode -> encode: the same text (so the same fields, values
 * and order); @back gets the decoded struct. */
#define ROUND(encode, decode, m, back)                               \
	do {                                                         \
		json_t *j1_ = encode(m), *j2_;                       \
		char e_[256] = "", *a_, *b_;                         \
		if (decode(j1_, back, e_, sizeof(e_)) != 0)          \
			fail_msg("decode of own encoding: %s", e_);  \
		j2_ = encode(back);                                  \
		a_ = dump(j1_);                                      \
		b_ = dump(j2_);                                      \
		if (strcmp(a_, b_) != 0)                             \
			fail_msg("round trip:\n%s\n!=\n%s", a_, b_); \
		free(a_);                                            \
		free(b_);                                            \
		json_decref(j1_);                                    \
		json_decref(j2_);                                    \
	} while (0)

/* Set the field at the dotted @path of @root ("gang.placements.0.id";
 * a number indexes an array) to @v (stolen), or delete it when NULL. */
static void set_path(json_t *root, const char *path, json_t *v)
{
	char buf[128], *save = NULL, *tok, *next;
	json_t *o = root;

	snprintf(buf, sizeof(buf), "%s", path);
	tok = strtok_r(buf, ".", &save);
	while ((next = strtok_r(NULL, ".", &save))) {
		o = json_is_array(o) ? json_array_get(o, strtoul(tok, NULL, 10))
		                     : json_object_get(o, tok);
		assert_non_null(o);
		tok = next;
	}
	if (json_is_array(o)) {
		assert_non_null(v);
		json_array_set_new(o, strtoul(tok, NULL, 10), v);
	} else if (v) {
		json_object_set_new(o, tok, v);
	} else {
		assert_int_equal(json_object_del(o, tok), 0);
	}
}

typedef int (*decode_fn)(const json_t *j, void *ret, char *err, size_t errlen);

/* @good with @path set to @v (NULL: deleted) must be refused by @decode
 * with a message naming @field. */
static void refuse(const char *good, const char *path, json_t *v,
                   const char *field,
                   int (*decode)(const json_t *, void *, char *, size_t),
                   void (*done)(void *))
{
	json_t *j = json_loads(good, 0, NULL);
	char err[256] = "", *text;
	union {
		struct cnl_wire_job job;
		struct cnl_wire_server server;
		struct cnl_wire_jobs jobs;
		struct cnl_wire_servers servers;
	} m;
	int r;

	assert_non_null(j);
	set_path(j, path, v);
	text = dump(j);
	r = decode(j, &m, err, sizeof(err));
	if (done)
		done(&m);
	json_decref(j);
	if (r != -CNL_EFIELD)
		fail_msg("accepted (%d): %s", r, text);
	if (!strstr(err, field))
		fail_msg("%s: message \"%s\" does not name %s", text, err,
		         field);
	free(text);
}

/* Adapters: the decoders take their own struct types. */
static int job_dec(const json_t *j, void *ret, char *err, size_t errlen)
{
	return cnl_wire_job_decode(j, ret, err, errlen);
}

static void job_done(void *m)
{
	cnl_wire_job_done(m);
}

static int server_dec(const json_t *j, void *ret, char *err, size_t errlen)
{
	return cnl_wire_server_decode(j, ret, err, errlen);
}

static int jobs_dec(const json_t *j, void *ret, char *err, size_t errlen)
{
	return cnl_wire_jobs_decode(j, ret, err, errlen);
}

static void jobs_done(void *m)
{
	cnl_wire_jobs_done(m);
}

static int servers_dec(const json_t *j, void *ret, char *err, size_t errlen)
{
	return cnl_wire_servers_decode(j, ret, err, errlen);
}

static void servers_done(void *m)
{
	cnl_wire_servers_done(m);
}

/* A long string of @n 'x' (static; for one use at a time). */
static json_t *long_str(size_t n)
{
	char *s = malloc(n + 1);
	json_t *j;

	assert_non_null(s);
	memset(s, 'x', n);
	s[n] = '\0';
	j = json_string(s);
	free(s);
	return j;
}

/* ---- documents ----------------------------------------------------------- */

/* What cnlabd sends for a job that ran and ended, with nothing extra. */
static const char minimal_job[] =
    "{\"id\":\"job_1\",\"project_id\":\"prj_1\",\"user_id\":\"usr_1\","
    "\"command\":\"true\",\"profile\":\"\",\"gpu\":\"h100-25\","
    "\"priority\":\"normal\",\"state\":\"succeeded\",\"exit_code\":0,"
    "\"deadline\":null,\"runtime_s\":0,"
    "\"created_at\":\"2026-04-30T17:00:00.000Z\","
    "\"updated_at\":\"2026-04-30T17:00:01.000Z\",\"preemptible\":true,"
    "\"nodes\":1}";

static void minimal(struct cnl_wire_job *m)
{
	memset(m, 0, sizeof(*m));
	SET(m->id, "job_1");
	SET(m->project_id, "prj_1");
	SET(m->user_id, "usr_1");
	SET(m->command, "true");
	SET(m->gpu, "h100-25");
	m->priority = 1;
	SET(m->state, "succeeded");
	m->created_ms = T0;
	m->updated_ms = T0 + 1000;
	m->preemptible = true;
	m->nodes = 1;
}

/* Every field set: a pending gang leader that was placed before, with a
 * reservation, estimates and the deadline check of its submission. */
static void full(struct cnl_wire_job *m, struct cnl_wire_job_gang *g)
{
	minimal(m);
	SET(m->profile, "small");
	m->priority = 3;
	SET(m->state, "pending");
	m->exit_code = -1;
	m->deadline_ms = T0 + 3600000;
	m->runtime_s = 600;
	m->has_status = true;
	SET(m->status.phase, "pending");
	m->status.epoch = 3;
	m->status.pending = true;
	SET(m->status.reason, "waiting for a slice of its shape");
	m->status.estimated_start_ms = T0 + 60000;
	m->status.has_reservation = true;
	SET(m->status.reservation.node, "gpu-01");
	SET(m->status.reservation.cluster, "eu");
	m->status.reservation.at_ms = T0 + 60000;
	SET(m->status.reservation.shape, "h100-25");
	m->status.has_estimated_ready = true;
	m->status.estimated_ready.at_ms = T0 + 90000;
	m->status.estimated_ready.from_starts = 5;
	m->status.has_estimate = true;
	m->status.estimate.approximate = true;
	m->status.estimate.unestimated_running = 2;
	m->status.estimate.assumed_runtime_s = 14400;
	m->preemptible = false;
	SET(m->message, "exit status 3");
	m->mem_mib = 8192;
	m->cpu_milli = 2500;
	m->has_gpu_types = true;
	SET(m->gpu_types[0], "h100");
	SET(m->gpu_types[1], "a100-80gb");
	m->n_gpu_types = 2;
	SET(m->dataset, "imagenet");
	SET(m->nodelist[0], "gpu-01");
	m->n_nodelist = 1;
	SET(m->exclude[0], "gpu-02");
	SET(m->exclude[1], "gpu-03");
	m->n_exclude = 2;
	m->nodes = 2;
	memset(g, 0, sizeof(*g));
	SET(g->id, "job_1");
	g->rank = 0;
	g->size = 2;
	g->has_members = true;
	SET(g->members[0], "job_1");
	SET(g->members[1], "job_2");
	g->n_members = 2;
	g->has_placements = true;
	SET(g->placements[0].id, "job_1");
	SET(g->placements[0].state, "pending");
	SET(g->placements[1].id, "job_2");
	g->placements[1].rank = 1;
	SET(g->placements[1].state, "running");
	SET(g->placements[1].node, "gpu-02");
	SET(g->placements[1].zone, "za");
	SET(g->placements[1].rack, "r1");
	g->n_placements = 2;
	m->gang = g;
	m->has_placement = true;
	SET(m->placement.node, "gpu-01");
	SET(m->placement.reason, "after_preemption");
	SET(m->placement.reason_text, "started after pre-empting others");
	SET(m->placement.gpu_type, "H100-80GB-SXM");
	m->placement.has_gpu_type_allowed = true;
	m->placement.gpu_type_allowed = true;
	m->placement.has_dataset_local = true;
	m->placement.dataset_local = false;
	m->placement.dataset_elsewhere = 3;
	SET(m->placement.cluster, "eu");
	SET(m->placement.zone, "za");
	SET(m->placement.rack, "r2");
	m->placement.decided_ms = T0 + 5000;
	m->has_deadline_check = true;
	m->deadline_check.finish = true;
	m->deadline_check.runtime_s = 600;
	m->deadline_check.earliest_start_ms = T0 + 60000;
	m->deadline_check.unestimated_running = 2;
	m->deadline_check.assumed_runtime_s = 14400;
	SET(m->deadline_check.text, "checked that it finishes by then");
}

static void test_job_round_trip(void **state)
{
	struct cnl_wire_job m, back;
	struct cnl_wire_job_gang g;
	json_t *j;
	char *s;

	(void)state;
	/* Minimal: exactly the bytes cnlabd sends, and back. */
	minimal(&m);
	j = cnl_wire_job_encode(&m);
	s = dump(j);
	assert_string_equal(s, minimal_job);
	free(s);
	json_decref(j);
	ROUND(cnl_wire_job_encode, cnl_wire_job_decode, &m, &back);
	assert_string_equal(back.id, "job_1");
	assert_int_equal(back.priority, 1);
	assert_int_equal(back.created_ms, T0);
	assert_int_equal(back.deadline_ms, 0);
	assert_false(back.has_status);
	assert_null(back.gang);
	cnl_wire_job_done(&back);

	/* Fully populated. */
	full(&m, &g);
	ROUND(cnl_wire_job_encode, cnl_wire_job_decode, &m, &back);
	assert_int_equal(back.priority, 3);
	assert_int_equal(back.exit_code, -1);
	assert_int_equal(back.deadline_ms, T0 + 3600000);
	assert_true(back.status.pending);
	assert_string_equal(back.status.reservation.cluster, "eu");
	assert_int_equal(back.status.estimate.unestimated_running, 2);
	assert_string_equal(back.gpu_types[1], "a100-80gb");
	assert_int_equal(back.n_nodelist, 1);
	assert_string_equal(back.nodelist[0], "gpu-01");
	assert_int_equal(back.n_exclude, 2);
	assert_string_equal(back.exclude[1], "gpu-03");
	assert_non_null(back.gang);
	assert_string_equal(back.gang->members[1], "job_2");
	assert_string_equal(back.gang->placements[1].rack, "r1");
	assert_false(back.placement.dataset_local);
	assert_int_equal(back.placement.dataset_elsewhere, 3);
	assert_int_equal(back.deadline_check.runtime_s, 600);
	cnl_wire_job_done(&back);

	/* The order and null rules of the optional parts. */
	j = cnl_wire_job_encode(&m);
	s = dump(j);
	assert_non_null(
	    strstr(s, "\"updated_at\":\"2026-04-30T17:00:01.000Z\",\"status\":{"
	              "\"phase\":\"pending\",\"epoch\":3,\"reason\":"));
	assert_non_null(strstr(
	    s,
	    "\"preemptible\":false,\"message\":\"exit status 3\","
	    "\"mem_mib\":8192,\"cpu_milli\":2500,\"gpu_types\":[\"h100\","
	    "\"a100-80gb\"],\"dataset\":\"imagenet\",\"nodelist\":[\"gpu-01\"],"
	    "\"exclude\":[\"gpu-02\",\"gpu-03\"],\"nodes\":2,\"gang\":{"
	    "\"id\":\"job_1\",\"rank\":0,\"size\":2,\"members\":"));
	assert_non_null(strstr(
	    s, "\"placements\":[{\"id\":\"job_1\",\"rank\":0,\"state\":"
	       "\"pending\"},{\"id\":\"job_2\",\"rank\":1,\"state\":"
	       "\"running\",\"node\":\"gpu-02\",\"zone\":\"za\",\"rack\":"
	       "\"r1\"}]}"));
	assert_non_null(strstr(
	    s, "\"placement\":{\"node\":\"gpu-01\",\"reason\":"
	       "\"after_preemption\",\"reason_text\":\"started after "
	       "pre-empting others\",\"gpu_type\":\"H100-80GB-SXM\","
	       "\"gpu_type_allowed\":true,\"dataset_local\":false,"
	       "\"dataset_elsewhere\":3,\"cluster\":\"eu\",\"zone\":\"za\","
	       "\"rack\":\"r2\",\"decided_at\":\"2026-04-30T17:00:05.000Z\"}"));
	assert_non_null(strstr(
	    s, "\"deadline_check\":{\"checked\":\"finish\",\"runtime_s\":600,"
	       "\"earliest_start\":\"2026-04-30T17:01:00.000Z\","
	       "\"unestimated_running\":2,\"assumed_runtime_s\":14400,"
	       "\"text\":\"checked that it finishes by then\"}}"));
	free(s);
	json_decref(j);

	/* A start-only deadline check sends runtime_s null. */
	m.deadline_check.finish = false;
	m.deadline_check.runtime_s = 0;
	m.deadline_check.earliest_start_ms = 0;
	j = cnl_wire_job_encode(&m);
	s = dump(j);
	assert_non_null(strstr(s, "{\"checked\":\"start\",\"runtime_s\":null,"
	                          "\"earliest_start\":null,"));
	free(s);
	json_decref(j);
	ROUND(cnl_wire_job_encode, cnl_wire_job_decode, &m, &back);
	assert_false(back.deadline_check.finish);
	cnl_wire_job_done(&back);
}

static void test_status(void **state)
{
	struct cnl_wire_status st = {0}, back;
	json_t *j;
	char *s;

	(void)state;
	/* Placed and provisioning. */
	SET(st.phase, "assigned");
	st.epoch = 7;
	SET(st.node, "gpu-01");
	st.blocks = 25;
	st.started_ms = T0;
	st.has_estimated_ready = true;
	st.estimated_ready.at_ms = T0 + 30000;
	st.estimated_ready.from_starts = 3;
	j = cnl_wire_status_encode(&st);
	s = dump(j);
	assert_string_equal(
	    s, "{\"phase\":\"assigned\",\"epoch\":7,\"node\":\"gpu-01\","
	       "\"blocks\":25,\"started_at\":\"2026-04-30T17:00:00.000Z\","
	       "\"estimated_ready\":{\"at\":\"2026-04-30T17:00:30.000Z\","
	       "\"from_starts\":3}}");
	free(s);
	json_decref(j);
	ROUND(cnl_wire_status_encode, cnl_wire_status_decode, &st, &back);
	assert_int_equal(back.blocks, 25);
	assert_false(back.pending);

	/* Pending without an estimate: estimated_start is null; a
	 * reservation on a node with no cluster sends cluster null. */
	memset(&st, 0, sizeof(st));
	SET(st.phase, "pending");
	st.pending = true;
	SET(st.reason, "being scheduled");
	st.has_reservation = true;
	SET(st.reservation.node, "n1");
	SET(st.reservation.shape, "h100-50");
	j = cnl_wire_status_encode(&st);
	s = dump(j);
	assert_string_equal(
	    s, "{\"phase\":\"pending\",\"epoch\":0,\"reason\":\"being "
	       "scheduled\",\"estimated_start\":null,\"reservation\":{"
	       "\"node\":\"n1\",\"cluster\":null,\"at\":null,\"shape\":"
	       "\"h100-50\"}}");
	free(s);
	json_decref(j);
	ROUND(cnl_wire_status_encode, cnl_wire_status_decode, &st, &back);
	assert_true(back.pending);
	assert_string_equal(back.reservation.cluster, "");

	/* Active but neither waiting nor on a node: phase and epoch. */
	memset(&st, 0, sizeof(st));
	SET(st.phase, "requeuing");
	st.epoch = 2;
	ROUND(cnl_wire_status_encode, cnl_wire_status_decode, &st, &back);
	assert_string_equal(back.phase, "requeuing");
}

/* A valid job with every optional part, as text, for the refusals. */
static char *full_text(void)
{
	struct cnl_wire_job m;
	struct cnl_wire_job_gang g;
	json_t *j;
	char *s;

	full(&m, &g);
	j = cnl_wire_job_encode(&m);
	s = dump(j);
	json_decref(j);
	return s;
}

static void test_job_refusals(void **state)
{
	char *good = full_text();

	(void)state;
#define BAD(path, v, field) refuse(good, path, v, field, job_dec, job_done)
	/* Unknown fields, at the top and nested. */
	BAD("color", json_string("red"), "\"color\"");
	BAD("status.color", json_true(), "\"status.color\"");
	BAD("status.reservation.color", json_true(),
	    "\"status.reservation.color\"");
	BAD("status.estimate.color", json_true(), "\"status.estimate.color\"");
	BAD("gang.color", json_true(), "\"gang.color\"");
	BAD("gang.placements.1.color", json_true(),
	    "\"gang.placements[1].color\"");
	BAD("placement.color", json_true(), "\"placement.color\"");
	BAD("deadline_check.color", json_true(), "\"deadline_check.color\"");
	/* Wrong types. */
	BAD("exit_code", json_string("0"), "\"exit_code\"");
	BAD("preemptible", json_integer(1), "\"preemptible\"");
	BAD("deadline", json_integer(5), "\"deadline\"");
	BAD("created_at", json_string("yesterday"), "\"created_at\"");
	BAD("status", json_string("pending"), "\"status\"");
	BAD("status.epoch", json_string("3"), "\"status.epoch\"");
	BAD("status.reservation.at", json_true(), "\"status.reservation.at\"");
	BAD("gpu_types.1", json_integer(1), "\"gpu_types[1]\"");
	BAD("exclude.1", json_integer(1), "\"exclude[1]\"");
	BAD("nodelist", json_string("gpu-01"), "\"nodelist\"");
	BAD("gang.members", json_string("job_1"), "\"gang.members\"");
	BAD("gang.members.0", json_null(), "\"gang.members[0]\"");
	BAD("placement.gpu_type_allowed", json_string("yes"),
	    "\"placement.gpu_type_allowed\"");
	BAD("deadline_check.runtime_s", json_real(1.5),
	    "\"deadline_check.runtime_s\"");
	/* Out of range. */
	BAD("exit_code", json_integer(300), "\"exit_code\"");
	BAD("runtime_s", json_integer(-1), "\"runtime_s\"");
	BAD("nodes", json_integer(0), "\"nodes\"");
	BAD("mem_mib", json_integer(0), "\"mem_mib\"");
	BAD("gang.rank", json_integer(2), "\"gang.rank\"");
	BAD("gang.placements.0.rank", json_integer(64),
	    "\"gang.placements[0].rank\"");
	BAD("status.estimated_ready.from_starts", json_integer(-1),
	    "\"status.estimated_ready.from_starts\"");
	BAD("placement.dataset_elsewhere", json_integer(-2),
	    "\"placement.dataset_elsewhere\"");
	/* Too long. */
	BAD("id", long_str(CNL_WIRE_ID_MAX), "\"id\"");
	BAD("command", long_str(CNL_WIRE_COMMAND_MAX), "\"command\"");
	BAD("message", long_str(CNL_WIRE_MESSAGE_MAX), "\"message\"");
	BAD("status.reason", long_str(CNL_WIRE_TEXT_MAX), "\"status.reason\"");
	BAD("gpu_types.0", long_str(CNL_WIRE_NAME_MAX), "\"gpu_types[0]\"");
	BAD("gang.placements.1.node", long_str(CNL_WIRE_NAME_MAX),
	    "\"gang.placements[1].node\"");
	/* Not one of its names. */
	BAD("priority", json_string("urgent"), "\"priority\"");
	BAD("state", json_string("starting"), "\"state\""); /* a server's */
	BAD("status.phase", json_string("napping"), "\"status.phase\"");
	BAD("placement.reason", json_string("luck"), "\"placement.reason\"");
	BAD("gang.placements.0.state", json_string("lost"),
	    "\"gang.placements[0].state\"");
	BAD("deadline_check.checked", json_string("both"),
	    "\"deadline_check.checked\"");
	/* Missing. */
	BAD("id", NULL, "\"id\"");
	BAD("nodes", NULL, "\"nodes\"");
	BAD("status.phase", NULL, "\"status.phase\"");
	BAD("status.estimated_start", NULL, "\"status.estimated_start\"");
	BAD("status.reservation.node", NULL, "\"status.reservation.node\"");
	BAD("gang.size", NULL, "\"gang.size\"");
	BAD("placement.decided_at", NULL, "\"placement.decided_at\"");
	BAD("placement.dataset_elsewhere", NULL,
	    "\"placement.dataset_elsewhere\"");
	BAD("deadline_check.text", NULL, "\"deadline_check.text\"");
	/* Fields of a placed workload beside a waiting one's. */
	BAD("status.node", json_string("gpu-01"), "\"status.node\"");
	BAD("status.blocks", json_integer(1), "\"status.blocks\"");
	BAD("status.shrinking_to", json_integer(4), "\"status.shrinking_to\"");
	BAD("status.resized", json_integer(0), "\"status.resized\"");
#undef BAD
	free(good);
	{
		/* Not an object at all. */
		struct cnl_wire_job m;
		json_t *a = json_array();
		char err[128] = "";

		assert_int_equal(cnl_wire_job_decode(a, &m, err, sizeof(err)),
		                 -CNL_EFIELD);
		assert_non_null(strstr(err, "object"));
		cnl_wire_job_done(&m);
		json_decref(a);
	}
}

/* ---- servers and pages --------------------------------------------------- */

static const char minimal_server[] =
    "{\"id\":\"srv_1\",\"project_id\":\"prj_1\",\"user_id\":\"usr_1\","
    "\"name\":\"nb\",\"image\":\"pytorch:2.4\",\"profile\":\"small\","
    "\"storage_gb\":10,\"idle_timeout_s\":3600,\"state\":\"stopped\","
    "\"url\":null,\"created_at\":\"2026-04-30T17:00:00.000Z\"}";

static void server(struct cnl_wire_server *v)
{
	memset(v, 0, sizeof(*v));
	SET(v->id, "srv_1");
	SET(v->project_id, "prj_1");
	SET(v->user_id, "usr_1");
	SET(v->name, "nb");
	SET(v->image, "pytorch:2.4");
	SET(v->profile, "small");
	v->storage_gb = 10;
	v->idle_timeout_s = 3600;
	SET(v->state, "stopped");
	v->created_ms = T0;
}

static void test_server(void **state)
{
	struct cnl_wire_server v, back;
	char *s, *good;
	json_t *j;

	(void)state;
	server(&v);
	j = cnl_wire_server_encode(&v);
	s = dump(j);
	assert_string_equal(s, minimal_server);
	free(s);
	json_decref(j);
	ROUND(cnl_wire_server_encode, cnl_wire_server_decode, &v, &back);
	assert_string_equal(back.url, "");
	assert_false(back.has_status);

	SET(v.state, "running");
	SET(v.url, "http://gpu-01:8888/srv_1");
	v.has_status = true;
	SET(v.status.phase, "started");
	v.status.epoch = 1;
	SET(v.status.node, "gpu-01");
	v.status.blocks = 50;
	v.status.started_ms = T0;
	ROUND(cnl_wire_server_encode, cnl_wire_server_decode, &v, &back);
	assert_string_equal(back.url, "http://gpu-01:8888/srv_1");
	assert_string_equal(back.status.node, "gpu-01");
	assert_string_equal(back.message, "");
	SET(v.message, "the node's disk is full");
	ROUND(cnl_wire_server_encode, cnl_wire_server_decode, &v, &back);
	assert_string_equal(back.message, "the node's disk is full");
	/* A resized slice with a shrink pending (ctl_resize.c). */
	v.status.resized = 20;
	v.status.shrinking_to = 20;
	ROUND(cnl_wire_server_encode, cnl_wire_server_decode, &v, &back);
	assert_int_equal(back.status.resized, 20);
	assert_int_equal(back.status.shrinking_to, 20);

	j = cnl_wire_server_encode(&v);
	good = dump(j);
	json_decref(j);
#define BAD(path, v, field) refuse(good, path, v, field, server_dec, NULL)
	BAD("color", json_true(), "\"color\"");
	BAD("status.color", json_true(), "\"status.color\"");
	BAD("url", json_integer(5), "\"url\"");
	BAD("storage_gb", json_integer(-1), "\"storage_gb\"");
	BAD("status.blocks", json_integer(5000), "\"status.blocks\"");
	BAD("status.shrinking_to", json_integer(0), "\"status.shrinking_to\"");
	BAD("status.resized", json_string("20"), "\"status.resized\"");
	BAD("status.epoch", json_integer(-1), "\"status.epoch\"");
	BAD("image", long_str(CNL_WIRE_IMAGE_MAX), "\"image\"");
	BAD("state", json_string("succeeded"), "\"state\""); /* a job's */
	BAD("name", NULL, "\"name\"");
	BAD("url", NULL, "\"url\"");
	BAD("status.blocks", NULL, "\"status.blocks\"");
	BAD("message", json_integer(1), "\"message\"");
	BAD("message", long_str(CNL_WIRE_MESSAGE_MAX), "\"message\"");
#undef BAD
	free(good);
}

static void test_pages(void **state)
{
	struct cnl_wire_job items[2];
	struct cnl_wire_job_gang g;
	struct cnl_wire_jobs jobs = {items, 2, "job_2"}, jback;
	struct cnl_wire_server sv[1];
	struct cnl_wire_servers servers = {sv, 1, ""}, sback;
	char *s, *good;
	json_t *j;

	(void)state;
	minimal(&items[0]);
	full(&items[1], &g);
	ROUND(cnl_wire_jobs_encode, cnl_wire_jobs_decode, &jobs, &jback);
	assert_int_equal(jback.n, 2);
	assert_string_equal(jback.next, "job_2");
	assert_string_equal(jback.items[1].gang->members[1], "job_2");
	cnl_wire_jobs_done(&jback);

	/* The last page: next is null; an empty one has no items. */
	jobs.n = 0;
	jobs.next[0] = '\0';
	j = cnl_wire_jobs_encode(&jobs);
	s = dump(j);
	assert_string_equal(s, "{\"items\":[],\"next\":null}");
	free(s);
	json_decref(j);

	server(&sv[0]);
	ROUND(cnl_wire_servers_encode, cnl_wire_servers_decode, &servers,
	      &sback);
	assert_int_equal(sback.n, 1);
	assert_string_equal(sback.items[0].name, "nb");
	assert_string_equal(sback.next, "");
	cnl_wire_servers_done(&sback);

	jobs.n = 2;
	SET(jobs.next, "job_2");
	j = cnl_wire_jobs_encode(&jobs);
	good = dump(j);
	json_decref(j);
	refuse(good, "color", json_true(), "\"color\"", jobs_dec, jobs_done);
	refuse(good, "items", NULL, "\"items\"", jobs_dec, jobs_done);
	refuse(good, "next", json_integer(1), "\"next\"", jobs_dec, jobs_done);
	refuse(good, "items.1.state", json_string("sleepy"),
	       "\"items[1].state\"", jobs_dec, jobs_done);
	refuse(good, "items.1.gang.members.1", json_integer(2),
	       "\"items[1].gang.members[1]\"", jobs_dec, jobs_done);
	refuse(good, "items.0", json_string("job_1"), "\"items[0]\"", jobs_dec,
	       jobs_done);
	free(good);

	j = cnl_wire_servers_encode(&servers);
	good = dump(j);
	json_decref(j);
	refuse(good, "items.0.status", json_object(),
	       "\"items[0].status.phase\"", servers_dec, servers_done);
	refuse(good, "items.0.created_at", NULL, "\"items[0].created_at\"",
	       servers_dec, servers_done);
	free(good);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_job_round_trip),
	    cmocka_unit_test(test_status),
	    cmocka_unit_test(test_job_refusals),
	    cmocka_unit_test(test_server),
	    cmocka_unit_test(test_pages),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
