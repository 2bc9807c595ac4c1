/*
 * trace.h - cnlabd's spans and log pushes (trace.c): the request span
 * around every API call, the spans of a workload's scheduling stages, the
 * trace context kept with a workload, and its output pushed to Loki.
 * The exporters themselves are libcnlab-net's (net/otel.h, net/loki.h).
 */
#ifndef CNL_SERVER_TRACE_H
#define CNL_SERVER_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/trace.h"
#include "net/http_server.h"
#include "net/otel.h"

/*
 * The request span around every API call (api.c): begun before
 * cnl_api_serve(), ended after.  A SERVER span named
 * "METHOD /route/{pattern}", a child of the request's valid traceparent
 * (following its sampled flag), else the root of a new sampled trace (a
 * malformed header is noted on the span as cnlab.traceparent_invalid,
 * never refused).  The span's context is the thread's current one while
 * the handler runs.  Requests of node agents, /healthz and /metrics
 * without a traceparent make no span (they come every second).
 */
struct cnl_api_trace {
	struct cnl_span sp;
	bool on;  /* a context was made */
	bool rec; /* and a span is recorded */
};

void cnl_api_trace_begin(struct cnl_api_trace *t,
                         const struct cnl_http_route *route,
                         struct cnl_http_request *req);
void cnl_api_trace_end(struct cnl_api_trace *t,
                       const struct cnl_http_response *resp);

/*
 * cnl_trace_stage - the span of one scheduling stage's decision
 * ("sched.<stage>", attributes cnlab.workload, cnlab.stage and
 * cnlab.decision) from @start_ns to now, a child of @parent; nothing
 * when @parent is NULL or unsampled.
 */
void cnl_trace_stage(const struct cnl_trace *parent, const char *id,
                     const char *stage, const char *decision, int64_t start_ns);

/*
 * cnl_trace_output - @len bytes of workload @id's output as stored, to
 * Loki (source "workload", labels job, project, node) when loki_url is
 * set.  @project may be NULL: it is then looked up in @st.
 */
struct cnl_store;
void cnl_trace_output(struct cnl_store *st, const char *id, const char *project,
                      const char *node, const char *data, size_t len);

#endif /* CNL_SERVER_TRACE_H */
