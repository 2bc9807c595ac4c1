/*
 * api_nodes.c - nodes: what administrators do (list, show, cordon, drain,
 * join tokens) and the node protocol the agents speak (register,
 * heartbeat, long-polled assignments, reports, logs), each under its
 * fencing epoch; a job's files are api_files.c's.
 *
 * Node identity (api_nodeid.c).  Every node route takes a node's own
 * credential only, and only for its own node: api.c checks the path's
 * {node} before the handler runs, and the handlers here check that the
 * work a request names is assigned to that node under its epoch (the
 * fencing check: 409 otherwise).  Registration takes a one-time join
 * token made for the node's name, and answers with the node's
 * credential; an agent registering again after a restart comes with
 * that credential.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "cnlab/errors.h"
#include "common/id.h"
#include "common/json.h"
#include "common/label.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "net/error.h"
#include "sched/sched.h"
#include "server/api-internal.h"
#include "server/trace.h"
#include "server/auth.h"
#include "server/oidc.h"
#include "server/shape.h"

static void node_reply(struct cnl_http_response *resp, int status, json_t *body,
                       const char *err)
{
	static const char *const codes[] = {[400 - 400] = "bad_request",
	                                    [404 - 400] = "not_found",
	                                    [409 - 400] = "conflict"};

	if (status < 400) {
		cnl_http_reply(resp, (unsigned)status, body);
		return;
	}
	cnl_http_error(resp, (unsigned)status,
	               status < 410 && codes[status - 400] ? codes[status - 400]
	               : status == 507 ? "insufficient_storage"
	                               : "internal",
	               "%s", err);
}

void cnl_api_h_nodes_list(void *call, struct cnl_http_request *req,
                          struct cnl_http_response *resp)
{
	struct call *c = call;
	json_t *all, *items;
	const char *after, *last = NULL;
	int limit, n = 0;

	if (cnl_api_get_page(req, resp, &limit, &after) < 0)
		return;
	/* Node ids sort by registration time, the order of the list. */
	all = cnl_ctl_nodes_json(c->api->ctl, c->now_ms);
	items = json_array();
	for (size_t i = 0; i < json_array_size(all) && n < limit; i++) {
		json_t *o = json_array_get(all, i);
		const char *id = json_string_value(json_object_get(o, "id"));

		if (after && strcmp(id, after) <= 0)
			continue;
		json_array_append(items, o);
		last = id;
		n++;
	}
	cnl_http_reply(resp, 200, cnl_api_page_json(items, n, limit, last));
	json_decref(all);
}

void cnl_api_h_nodes_register(void *call, struct cnl_http_request *req,
                              struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_wire_register m;
	struct cnl_wire_node out = {0};
	char err[256] = "";
	json_t *body;
	int st;

	snprintf(c->target, sizeof(c->target), "node");
	if (!(body = cnl_api_parse_body(req, resp, NULL)))
		return;
	if (cnl_wire_register_decode(body, &m, err, sizeof(err)) < 0) {
		cnl_api_bad(resp, err);
		json_decref(body);
		return;
	}
	json_decref(body);
	if (cnl_api_node_register_check(c, m.name, resp) < 0)
		return;
	st = cnl_ctl_node_register(c->api->ctl, &m, c->now_ms, &out, err,
	                           sizeof(err));
	if (st < 400)
		snprintf(c->target, sizeof(c->target), "%s", out.id);
	/* A join: the token dies, the node's old credentials too. */
	if (st < 400 && c->join[0] &&
	    cnl_api_node_joined(c, out.credential) < 0) {
		st = 500;
		snprintf(err, sizeof(err), "cannot store the node credential");
	}
	node_reply(resp, st, st < 400 ? cnl_wire_node_encode(&out) : NULL, err);
	cnl_wire_node_done(&out);
}

void cnl_api_h_node_update(void *call, struct cnl_http_request *req,
                           struct cnl_http_response *resp)
{
	static const char *const fields[] = {"state", NULL};
	struct call *c = call;
	const char *node = cnl_http_param(req, "node"), *state;
	json_t *body, *out = NULL;
	char err[256] = "";

	snprintf(c->target, sizeof(c->target), "%s", node);
	if (!(body = cnl_api_parse_body(req, resp, fields)))
		return;
	if ((state = cnl_api_get_string(body, "state", 16, resp))) {
		int st_ = cnl_ctl_node_set_state(c->api->ctl, node, state, &out,
		                                 err, sizeof(err));
		node_reply(resp, st_, out, err);
	}
	json_decref(body);
}

void cnl_api_h_node_heartbeat(void *call, struct cnl_http_request *req,
                              struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *node = cnl_http_param(req, "node");
	struct cnl_wire_heartbeat m;
	struct cnl_wire_node out = {0};
	char err[256] = "";
	json_t *body;
	int st;

	snprintf(c->target, sizeof(c->target), "%s", node);
	if (!(body = cnl_api_parse_body(req, resp, NULL)))
		return;
	st = cnl_wire_heartbeat_decode(body, &m, err, sizeof(err));
	json_decref(body);
	if (st < 0) {
		cnl_api_bad(resp, err);
		cnl_wire_heartbeat_done(&m);
		return;
	}
	st = cnl_ctl_node_heartbeat(c->api->ctl, node, &m, c->now_ms, &out, err,
	                            sizeof(err));
	/* Liveness only is not worth an audit record; a stop or drop order
	 * is. */
	c->no_audit = st == 200 && out.n_stop == 0 && out.n_drop == 0;
	node_reply(resp, st, st < 400 ? cnl_wire_node_encode(&out) : NULL, err);
	cnl_wire_node_done(&out);
	cnl_wire_heartbeat_done(&m);
}

void cnl_api_h_node_assignments(void *call, struct cnl_http_request *req,
                                struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *node = cnl_http_param(req, "node");
	const char *qs = cnl_http_query(req, "since");
	const char *qw = cnl_http_query(req, "wait");
	unsigned long long since = 0;
	long wait = 0;
	struct cnl_wire_assignments out = {0};
	char err[256] = "", *end;

	if (qs) {
		errno = 0;
		since = strtoull(qs, &end, 10);
		if (errno || end == qs || *end) {
			cnl_api_bad(
			    resp, "query \"since\": must be a version number");
			return;
		}
	}
	if (qw) {
		errno = 0;
		wait = strtol(qw, &end, 10);
		if (errno || end == qw || *end || wait < 0 || wait > 50) {
			cnl_api_bad(resp,
			            "query \"wait\": must be 0..50 seconds");
			return;
		}
	}
	int st_ = cnl_ctl_assignments(c->api->ctl, node, since, wait * 1000,
	                              &out, err, sizeof(err));
	node_reply(resp, st_,
	           st_ < 400 ? cnl_wire_assignments_encode(&out) : NULL, err);
	cnl_wire_assignments_done(&out);
}

void cnl_api_h_node_reports(void *call, struct cnl_http_request *req,
                            struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *node = cnl_http_param(req, "node"), *state = NULL;
	struct cnl_wire_report m;
	char err[256] = "";
	json_t *body;
	int st;

	snprintf(c->target, sizeof(c->target), "%s", node);
	if (!(body = cnl_api_parse_body(req, resp, NULL)))
		return;
	st = cnl_wire_report_decode(body, &m, err, sizeof(err));
	json_decref(body);
	if (st < 0) {
		cnl_api_bad(resp, err);
		return;
	}
	snprintf(c->target, sizeof(c->target), "%s", m.id);
	st = cnl_ctl_node_report(c->api->ctl, node, &m, c->now_ms, &state, err,
	                         sizeof(err));
	node_reply(resp, st,
	           st < 400 ? json_pack("{s:s}", "state", state) : NULL, err);
}

static void fenced(struct cnl_http_response *resp)
{
	cnl_http_error(resp, 409, "fenced",
	               "stale fencing epoch: this work is no longer assigned "
	               "to this node under that epoch");
}

/*
 * A kill by the node's GPU memory audit (wire/node.h, cnl_wire_gpu_kill):
 * one record in the audit chain, action "node.gpu_kill", actor the node,
 * target the workload, and in its result the pid, the bytes the slice
 * held, the quota, and the workload's project and user from
 * cnlabd's own books (not the node's word).  Only for work the node runs
 * under that epoch (409 otherwise).  201 {"recorded": true}.
 */
void cnl_api_h_node_gpu_kill(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	/* The audit record is written after the handler returns, on this
	 * thread: its words live here until then. */
	static _Thread_local char note[CNL_STORE_AUDIT_MAX];
	struct call *c = call;
	const char *node = cnl_http_param(req, "node");
	const char *project = "", *user = "";
	struct cnl_wire_gpu_kill m;
	char err[256] = "";
	json_t *body;
	int r;

	snprintf(c->target, sizeof(c->target), "%s", node);
	if (!(body = cnl_api_parse_body(req, resp, NULL)))
		return;
	r = cnl_wire_gpu_kill_decode(body, &m, err, sizeof(err));
	json_decref(body);
	if (r < 0) {
		cnl_api_bad(resp, err);
		return;
	}
	snprintf(c->target, sizeof(c->target), "%s", m.id);
	if (cnl_ctl_fence_check(c->api->ctl, node, m.id, m.epoch) < 0) {
		fenced(resp);
		return;
	}
	if (cnl_store_job_get(c->api->store, m.id, &c->job) == 0) {
		project = c->job.project_id;
		user = c->job.user_id;
	} else if (cnl_store_server_get(c->api->store, m.id, &c->server) == 0) {
		project = c->server.project_id;
		user = c->server.user_id;
	}
	/* Within the record's 127 characters with "201 " before it: a
	 * 7-digit pid, 20-digit byte counts and two ids fit. */
	snprintf(note, sizeof(note),
	         "pid=%d used=%lld quota=%lld project=%s user=%s", m.pid,
	         (long long)m.used, (long long)m.quota, project, user);
	c->note = note;
	cnl_log(CNL_LOG_WARN, "GPU memory audit kill",
	        "node=%s id=%s gpu=%d pid_used=%lld %s", node, m.id, m.gpu,
	        (long long)m.pid_used, note);
	cnl_http_reply(resp, 201, json_pack("{s:b}", "recorded", 1));
}

/* The "logpos" document of a stream: the next offset expected of it. */
static void logpos_id(const struct cnl_wire_log *m, char *buf, size_t len)
{
	snprintf(buf, len, "%s.%lld.%s", m->id, (long long)m->epoch,
	         m->stderr_ ? "err" : "out");
}

static int64_t logpos_get(struct call *c, const char *pid)
{
	struct cnl_store_doc d = {0};
	int64_t next = 0;
	json_t *o;

	if (cnl_store_doc_get(c->api->store, "logpos", pid, &d) < 0)
		return 0;
	if ((o = json_loads(d.body, 0, NULL))) {
		next = json_integer_value(json_object_get(o, "next"));
		json_decref(o);
	}
	cnl_store_doc_done(&d);
	return next;
}

static void log_ack(struct cnl_http_response *resp, unsigned status,
                    const char *lid, int64_t next)
{
	json_t *o = cnl_wire_log_ack_encode(
	    &(struct cnl_wire_log_ack){.has_next = true, .next = next});

	if (lid)
		json_object_set_new(o, "id", json_string(lid));
	cnl_http_reply(resp, status, o);
}

/*
 * Output of a workload, appended by its agent under the current epoch.
 * A chunk with an offset is kept once: cnlabd holds, per (job, epoch,
 * stream), the next offset it expects ("logpos" document, written in the
 * same transaction as the chunk); bytes it holds already are dropped (a
 * chunk sent again after a lost reply or an outage), a chunk past that
 * offset is refused (416, the agent sends again from "next") unless the
 * node says it dropped the bytes between (a note says how many).  The big
 * lock orders the appends of one stream.
 */
void cnl_api_h_node_logs(void *call, struct cnl_http_request *req,
                         struct cnl_http_response *resp)
{
	struct call *c = call;
	const char *node = cnl_http_param(req, "node");
	struct cnl_wire_log m;
	char lid[CNL_ID_MAX], nid[CNL_ID_MAX], pid[CNL_STORE_DOC_ID_MAX];
	char err[256];
	int64_t next = 0, skip = 0, lost = 0;
	json_t *body, *o;
	int r;

	c->no_audit = true; /* output, not a change of the platform */
	if (!(body = cnl_api_parse_body(req, resp, NULL)))
		return;
	r = cnl_wire_log_decode(body, &m, err, sizeof(err));
	json_decref(body);
	if (r < 0) {
		cnl_api_bad(resp, err);
		goto out;
	}
	if (cnl_ctl_fence_check(c->api->ctl, node, m.id, m.epoch) < 0) {
		fenced(resp);
		goto out;
	}
	if (m.has_offset) {
		logpos_id(&m, pid, sizeof(pid));
		next = logpos_get(c, pid);
		if (m.offset - m.dropped > next) {
			json_t *e = cnl_http_error_body(
			    "gap", "field \"offset\": a gap; this stream is "
			           "held up to the offset in \"next\"");

			json_object_set_new(e, "next", json_integer(next));
			cnl_http_reply(resp, 416, e);
			goto out;
		}
		if (m.offset + (int64_t)m.len <= next) {
			log_ack(resp, 200, NULL, next); /* held already */
			goto out;
		}
		/* Past what is held by the bytes the node dropped: those are
		 * noted, never to come. */
		lost = m.offset > next ? m.offset - next : 0;
		skip = m.offset < next ? next - m.offset : 0;
	}
	if ((lost && cnl_api_new_id(c, "log", nid) < 0) ||
	    cnl_api_new_id(c, "log", lid) < 0) {
		cnl_http_error(resp, 500, "internal", "cannot make an id");
		goto out;
	}
	/* Kept byte for byte: text as "data", other bytes as
	 * "data_base64", as the agent sent them. */
	o = json_pack("{s:s,s:I}", "stream", m.stderr_ ? "stderr" : "stdout",
	              "epoch", (json_int_t)m.epoch);
	cnl_wire_bytes_set(o, "data", m.data + skip, m.len - (size_t)skip);
	if (m.has_offset) {
		json_t *p = json_pack("{s:I}", "next",
		                      (json_int_t)(m.offset + (int64_t)m.len));

		r = cnl_store_tx_begin(c->api->store);
		if (r == 0 && lost) {
			char note[200];
			json_t *n;

			snprintf(
			    note, sizeof(note),
			    "\n[cnlab: %lld bytes of this output were "
			    "dropped on the node: its buffer was full while "
			    "cnlabd was unreachable]\n",
			    (long long)lost);
			n = json_pack("{s:s,s:I,s:s}", "stream",
			              m.stderr_ ? "stderr" : "stdout", "epoch",
			              (json_int_t)m.epoch, "data", note);
			r = cnl_api_doc_save(c, "log", nid, m.id, "", n, true);
			json_decref(n);
		}
		if (r == 0)
			r = cnl_api_doc_save(c, "log", lid, m.id, "", o, true);
		if (r == 0)
			r = cnl_api_doc_save(c, "logpos", pid, m.id, "", p,
			                     false);
		if (r == 0)
			r = cnl_store_tx_commit(c->api->store);
		else
			cnl_store_tx_rollback(c->api->store);
		json_decref(p);
	} else {
		r = cnl_api_doc_save(c, "log", lid, m.id, "", o, true);
	}
	json_decref(o);
	if (r < 0) {
		cnl_api_store_error(c, resp, r, "log");
		goto out;
	}
	cnl_api_events_note(c->api, m.id); /* its event streams send it */
	cnl_trace_output(c->api->store, m.id, NULL, c->node[0] ? c->node : node,
	                 m.data + skip, m.len - (size_t)skip);
	if (m.has_offset)
		log_ack(resp, 201, lid, m.offset + (int64_t)m.len);
	else
		cnl_http_reply(resp, 201, json_pack("{s:s}", "id", lid));
out:
	cnl_wire_log_done(&m);
}

/* The job whose inputs @job runs with: a gang's members run with the
 * files its leader came with. */
static void inputs_owner(struct call *c, const char *job, char *buf, size_t len)
{
	struct cnl_store_job jb;
	char leader[CNL_ID_MAX];

	snprintf(buf, len, "%s", job);
	if (cnl_store_job_get(c->api->store, job, &jb) == 0 &&
	    cnl_api_job_gang(&jb, leader, NULL, NULL) == 0)
		snprintf(buf, len, "%s", leader);
}

/* The files a job was submitted with, for the node that runs it: their
 * list, and each (api_files.c streams them). */
void cnl_api_h_node_inputs_get(void *call, struct cnl_http_request *req,
                               struct cnl_http_response *resp)
{
	const char *job = cnl_api_node_job(call, req, resp);
	char owner[CNL_ID_MAX];

	if (!job)
		return;
	inputs_owner(call, job, owner, sizeof(owner));
	cnl_api_node_inputs_list(call, resp, owner);
}

void cnl_api_h_node_input_file(void *call, struct cnl_http_request *req,
                               struct cnl_http_response *resp)
{
	const char *job = cnl_api_node_job(call, req, resp);
	char owner[CNL_ID_MAX];

	if (!job)
		return;
	inputs_owner(call, job, owner, sizeof(owner));
	cnl_api_node_input_send(call, req, resp, owner);
}

/* GET /v1/nodes/{node}: one node (by id or name) and what runs there. */
void cnl_api_h_node_get(void *call, struct cnl_http_request *req,
                        struct cnl_http_response *resp)
{
	struct call *c = call;
	json_t *o = cnl_ctl_node_json(c->api->ctl, cnl_http_param(req, "node"),
	                              c->now_ms);

	if (!o) {
		cnl_http_error(resp, 404, "not_found", "node not found");
		return;
	}
	cnl_http_reply(resp, 200, o);
}
