/*
 * trace.c - the node agent's spans (agent-internal.h): the launch of a
 * workload and the workload's life, children of the trace context its
 * assignment carries (the submission's request span in cnlabd; see
 * src/server/trace.c for the whole tree).
 *
 *   agent.launch             from the assignment taken to the process up
 *     agent.image            the image fetched and unpacked (containers)
 *     agent.container.create the OCI bundle written (containers)
 *     agent.container.start  the runtime (or the bare process) started
 *   workload                 from the start to the exit, with
 *                            process.exit.code and cnlab.end_state
 *
 * An assignment without a context (or an unsampled one) makes spans that
 * are never exported.  The launch span is the starting thread's current
 * context while it starts, so the steps find their parent there.
 */
#include <stdio.h>
#include <string.h>

#include "agent/agent-internal.h"
#include "net/otel.h"

void cnl_agent_trace_begin(struct cnl_span *launch,
                           const struct cnl_wire_assignment *as, struct wk *w)
{
	struct cnl_trace t;
	bool have =
	    as->traceparent[0] && cnl_trace_parse(as->traceparent, &t) == 0;

	snprintf(w->trace, sizeof(w->trace), "%s", have ? as->traceparent : "");
	cnl_span_begin(launch, have ? &t : NULL, false, "agent.launch",
	               CNL_SPAN_INTERNAL);
	cnl_span_str(launch, "cnlab.workload", as->id);
	cnl_span_str(launch, "cnlab.kind",
	             as->kind == CNL_WIRE_SERVER ? "server" : "job");
	if (as->image[0])
		cnl_span_str(launch, "cnlab.image", as->image);
	cnl_trace_set_current(&launch->ctx);
}

void cnl_agent_trace_step(const char *name, int64_t start_ns, int r,
                          const char *err)
{
	const struct cnl_trace *cur = cnl_trace_current();
	struct cnl_span sp;

	if (!cnl_trace_sampled(cur))
		return;
	cnl_span_begin(&sp, cur, false, name, CNL_SPAN_INTERNAL);
	sp.start_ns = start_ns;
	if (r < 0)
		cnl_span_error(&sp, err);
	cnl_span_end(&sp);
}

void cnl_agent_trace_launched(struct cnl_span *launch, struct wk *w, int r,
                              const char *err)
{
	cnl_trace_set_current(NULL);
	if (r < 0)
		cnl_span_error(launch, err);
	cnl_span_end(launch);
	w->trace_start_ns = launch->end_ns;
}

void cnl_agent_trace_end(struct wk *w, int code)
{
	struct cnl_trace t;
	struct cnl_span sp;

	if (!w->trace[0] || !w->trace_start_ns ||
	    cnl_trace_parse(w->trace, &t) < 0)
		return;
	cnl_span_begin(&sp, &t, false, "workload", CNL_SPAN_INTERNAL);
	sp.start_ns = w->trace_start_ns;
	cnl_span_str(&sp, "cnlab.workload", w->id);
	cnl_span_int(&sp, "process.exit.code", code);
	cnl_span_str(&sp, "cnlab.end_state",
	             cnl_wire_report_state_name(w->end_state));
	if (w->end_msg[0])
		cnl_span_str(&sp, "cnlab.message", w->end_msg);
	if (w->end_state == CNL_WIRE_REPORT_FAILED)
		cnl_span_error(&sp, w->end_msg[0] ? w->end_msg : "failed");
	cnl_span_end(&sp);
	w->trace_start_ns = 0; /* once */
}
