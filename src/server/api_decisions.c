/*
 * api_decisions.c - the scheduler's decisions for a workload, in the audit
 * chain, and GET /v1/jobs/{job}/decisions (and /v1/servers/{server}/...)
 * that reads them back (the CLI's `cnlab jobs explain`).
 *
 * A workload goes through six stages (DESIGN.md, scheduler): auth (who
 * submitted it, in which role), quota (what its project and user have
 * used of their limits), queue (its class and place among pending work),
 * admission (whether any registered node could ever run it), cluster (the
 * cluster and node chosen) and slice (the GPU, blocks or MIG instance it
 * got, or why it waits).  Each decision is an ordinary record of the
 * hash-chained audit log: action "sched.<stage>", target the workload's
 * id, result the decision in words, so `GET /v1/audit/verify` covers them
 * like any other record.  The first four are recorded here once the
 * workload is stored; the rest by the scheduling loop (ctl_loop.c) when
 * it decides them, together with what it changes.  A waiting workload's
 * record is written when its reason changes, never once per cycle; a
 * pre-emption is recorded on its victim.
 *
 * A refused submission (403 quota, 422 admission) has no workload: its
 * decision is the refusal itself, in the request's own audit record.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "net/otel.h"
#include "server/api-internal.h"
#include "server/trace.h"

static const char *const prio_words[] = {"low", "normal", "high", "critical"};

static void decide(struct call *c, const char *id, const char *actor,
                   const char *stage, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void decide(struct call *c, const char *id, const char *actor,
                   const char *stage, const char *fmt, ...)
{
	struct cnl_store_audit a = {0};
	int64_t t0 = cnl_otel_now_ns();
	va_list ap;
	int r;

	a.ts_ms = c->now_ms;
	snprintf(a.actor, sizeof(a.actor), "%s", actor);
	snprintf(a.action, sizeof(a.action), "sched.%s", stage);
	snprintf(a.target, sizeof(a.target), "%s", id);
	va_start(ap, fmt);
	vsnprintf(a.result, sizeof(a.result), fmt, ap);
	va_end(ap);
	if ((r = cnl_store_audit_append(c->api->store, &a, NULL)) < 0)
		cnl_log(CNL_LOG_ERROR, "cannot audit a scheduling decision",
		        "id=%s stage=%s err=%s", id, stage, cnl_errname(r));
	cnl_trace_stage(cnl_trace_current(), id, stage, a.result, t0);
}

void cnl_api_decisions_submit(struct call *c, const char *id, const char *shape,
                              const char *run, int prio, bool server)
{
	char quota[CNL_STORE_AUDIT_MAX], why[256];
	int pos = 0, n = 0;

	decide(c, id, c->actor[0] ? c->actor : c->user.id, "auth",
	       "accepted: user %s, %s in project %s", c->user.name,
	       c->role[0] ? c->role : "administrator", c->project.name);
	cnl_api_quota_text(c, server, quota, sizeof(quota));
	decide(c, id, "scheduler", "quota", "within quota: %s", quota);
	cnl_ctl_queue_position(c->api->ctl, id, &pos, &n);
	decide(c, id, "scheduler", "queue",
	       "queued: priority %s, position %d of %d pending",
	       prio >= 0 && prio < 4 ? prio_words[prio] : "?", pos, n);
	cnl_ctl_feasible(c->api->ctl, c->project.id, shape, run, server, why,
	                 sizeof(why));
	decide(c, id, "scheduler", "admission", "admitted: %s", why);
	/* The request's span is the workload's context from now on. */
	cnl_ctl_job_trace(c->api->ctl, id, cnl_trace_current());
}

void cnl_api_h_job_decisions(void *call, struct cnl_http_request *req,
                             struct cnl_http_response *resp)
{
	struct call *c = call;
	struct cnl_store_audit *a;
	json_t *items;
	int n = 0, r;

	const char *id = c->have_job ? c->job.id : c->server.id;

	(void)req;
	a = cnl_xcalloc(CNL_STORE_LIST_MAX, sizeof(*a));
	r = cnl_store_audit_list_target(c->api->store, id, "sched.", 0,
	                                CNL_STORE_LIST_MAX, a, &n);
	if (r < 0) {
		free(a);
		cnl_api_store_error(c, resp, r, "decisions");
		return;
	}
	items = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(
		    items, json_pack("{s:I,s:o,s:s,s:s,s:s}", "seq",
		                     (json_int_t)a[i].seq, "time",
		                     cnl_api_time_json(a[i].ts_ms), "stage",
		                     a[i].action + strlen("sched."), "actor",
		                     a[i].actor, "decision", a[i].result));
	cnl_http_reply(resp, 200,
	               json_pack("{s:s,s:o}", c->have_job ? "job" : "server",
	                         id, "items", items));
	free(a);
}
