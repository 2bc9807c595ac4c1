/*
 * trace.c - cnlabd's side of traces and pushed logs (trace.h).
 *
 * A submission's trace, as a collector sees it:
 *
 *   cnlab run (CLI, CLIENT)
 *     POST /v1/projects/{project}/jobs (cnlabd, SERVER)   <- the job's context
 *       sched.auth, sched.quota, sched.queue, sched.admission
 *       sched.cluster, sched.slice (later, in a scheduling cycle)
 *       agent.launch (cnlab-agent)
 *         agent.image, agent.container.create, agent.container.start
 *       workload (cnlab-agent: start to exit, process.exit.code)
 *
 * The job's context is the request span's: the controller keeps it with
 * the workload (ctl_trace.c), writes it into the run record once placed
 * and hands it to the agent in the assignment, so the stages decided in
 * a later cycle and the agent's spans join the submission's trace.
 */
#include <stdio.h>
#include <string.h>

#include "net/loki.h"
#include "net/otel.h"
#include "server/trace.h"
#include "store/store.h"

/* Requests that come every second from every node, or from scrapers:
 * traced only when they carry a context of their own. */
static bool quiet(const struct cnl_http_route *route)
{
	return strncmp(route->pattern, "/v1/nodes/{", 11) == 0 ||
	       strcmp(route->pattern, "/healthz") == 0 ||
	       strcmp(route->pattern, "/metrics") == 0;
}

void cnl_api_trace_begin(struct cnl_api_trace *t,
                         const struct cnl_http_route *route,
                         struct cnl_http_request *req)
{
	const char *tp = cnl_http_header(req, "traceparent");
	struct cnl_trace parent;
	bool have = tp && cnl_trace_parse(tp, &parent) == 0;
	char name[96];

	t->on = have || !quiet(route);
	t->rec = t->on && cnl_otel_enabled();
	if (!t->on)
		return;
	/* Without an exporter the context is still made and kept with the
	 * jobs (the agents may export), but nothing is written into the
	 * span. */
	if (!t->rec) {
		if (have)
			cnl_trace_child(&parent, &t->sp.ctx);
		else
			cnl_trace_new(true, &t->sp.ctx);
		cnl_trace_set_current(&t->sp.ctx);
		return;
	}
	snprintf(name, sizeof(name), "%s %s", route->method, route->pattern);
	cnl_span_begin(&t->sp, have ? &parent : NULL, true, name,
	               CNL_SPAN_SERVER);
	cnl_span_str(&t->sp, "http.request.method", route->method);
	cnl_span_str(&t->sp, "http.route", route->pattern);
	cnl_span_str(&t->sp, "url.path", req->path);
	if (tp && !have)
		cnl_span_str(&t->sp, "cnlab.traceparent_invalid", "true");
	cnl_trace_set_current(&t->sp.ctx);
}

void cnl_api_trace_end(struct cnl_api_trace *t,
                       const struct cnl_http_response *resp)
{
	if (!t->on)
		return;
	cnl_trace_set_current(NULL);
	if (!t->rec)
		return;
	cnl_span_int(&t->sp, "http.response.status_code", resp->status);
	if (resp->status >= 500)
		cnl_span_error(&t->sp, NULL);
	cnl_span_end(&t->sp);
}

void cnl_trace_stage(const struct cnl_trace *parent, const char *id,
                     const char *stage, const char *decision, int64_t start_ns)
{
	struct cnl_span sp;
	char name[48];

	if (!cnl_trace_sampled(parent) || !cnl_otel_enabled())
		return;
	snprintf(name, sizeof(name), "sched.%s", stage);
	cnl_span_begin(&sp, parent, true, name, CNL_SPAN_INTERNAL);
	sp.start_ns = start_ns;
	cnl_span_str(&sp, "cnlab.workload", id);
	cnl_span_str(&sp, "cnlab.stage", stage);
	cnl_span_str(&sp, "cnlab.decision", decision);
	cnl_span_end(&sp);
}

void cnl_trace_output(struct cnl_store *st, const char *id, const char *project,
                      const char *node, const char *data, size_t len)
{
	struct cnl_loki_labels l = {
	    .source = "workload", .job = id, .node = node};
	struct cnl_store_job j;
	struct cnl_store_server v;

	if (!cnl_loki_enabled() || !len)
		return;
	if (!project && cnl_store_job_get(st, id, &j) == 0)
		project = j.project_id;
	else if (!project && cnl_store_server_get(st, id, &v) == 0)
		project = v.project_id;
	l.project = project;
	cnl_loki_push(&l, data, len);
}
