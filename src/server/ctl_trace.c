/*
 * ctl_trace.c - the trace context a workload keeps (the request span of
 * its submission, server/trace.c), and the spans of the stages the
 * scheduling cycle decides for it (cluster, slice, preempt) as children
 * of that context.  The context is in the run record from the submission
 * on (api_jobs.c and api_servers.c write it into the record they create),
 * so a workload still pending when cnlabd restarts keeps its trace: the
 * record is adopted on load (ctl_run.c), rewritten with every change and
 * sent to the node in the assignment.
 */
#include <stdio.h>
#include <string.h>

#include "common/trace.h"
#include "server/ctl-internal.h"
#include "server/trace.h"

void cnl_ctl_job_trace(struct cnl_ctl *ctl, const char *id,
                       const struct cnl_trace *t)
{
	struct wl *w;

	if (!t || !(w = ctl_wl_find(ctl, id)))
		return;
	cnl_trace_format(t, w->trace);
}

void ctl_trace_stage(struct cnl_ctl *ctl, const char *id, const char *stage,
                     const char *decision, int64_t start_ns)
{
	struct cnl_trace t;
	struct wl *w = ctl_wl_find(ctl, id);

	if (!w || !w->trace[0] || cnl_trace_parse(w->trace, &t) < 0)
		return;
	cnl_trace_stage(&t, id, stage, decision, start_ns);
}
