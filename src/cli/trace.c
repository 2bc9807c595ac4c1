/*
 * trace.c - the CLI's part of a trace: one span per command, whose
 * context every request of the command carries as its `traceparent`
 * (W3C), so cnlabd's request span, the scheduling stages and the node
 * agent's launch of the job all hang under the command that asked.
 *
 * Every command starts a new trace.  It is sampled when the user asks
 * for traces: OTEL_EXPORTER_OTLP_ENDPOINT is set (the CLI then also
 * exports its own span there) or CNLAB_TRACE=1 (the CLI exports nothing,
 * cnlabd and the agent record the rest).  Otherwise the header still
 * goes, unsampled, and cnlabd records nothing of the command (it follows
 * its parent's sampling decision).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "net/otel.h"

void cnl_cli_trace_begin(struct cnl_cli *cli, struct cnl_span *sp)
{
	const char *ep = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
	const char *want = getenv("CNLAB_TRACE");
	bool sampled = (ep && ep[0]) || (want && strcmp(want, "1") == 0);
	char name[64], err[256];

	/* A bad endpoint costs the trace, never the command. */
	if (ep && ep[0] && cnl_otel_start(ep, "cnlab", err, sizeof(err)) < 0)
		fprintf(stderr,
		        "cnlab: warning: OTEL_EXPORTER_OTLP_ENDPOINT: "
		        "%s\n",
		        err);
	snprintf(name, sizeof(name), "cnlab %s", cli->cmd->path);
	cnl_span_begin(sp, NULL, sampled, name, CNL_SPAN_CLIENT);
	cnl_span_str(sp, "cnlab.command", cli->cmd->path);
	cnl_trace_format(&sp->ctx, cli->traceparent);
}

void cnl_cli_trace_end(struct cnl_cli *cli, struct cnl_span *sp, int code)
{
	(void)cli;
	cnl_span_int(sp, "process.exit.code", code);
	if (code != 0)
		cnl_span_error(sp, "command failed");
	cnl_span_end(sp);
	/* At most two seconds more for a collector that is slow. */
	cnl_otel_flush(2000);
}
