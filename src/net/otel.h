/*
 * otel.h - OpenTelemetry spans exported over OTLP/HTTP in its JSON
 * encoding (POST <endpoint>/v1/traces, an ExportTraceServiceRequest),
 * and the exporter's counters on /metrics.
 *
 * A process has at most one exporter (like the logger): cnl_otel_start()
 * names the endpoint and the service ("cnlabd", "cnlab-agent", "cnlab").
 * A span is a plain struct on the caller's stack: begin it (a child of a
 * context, or the root of a new trace), add attributes, end it; the end
 * copies it into a bounded in-memory queue and returns at once.  A
 * background thread sends the queue in batches.  Nothing here ever
 * blocks the caller on the network:
 *   - a full queue drops the span and counts it (dropped);
 *   - a collector that refuses or does not answer (connect and idle
 *     timeouts of 2 s, 5 s per request) is retried with a backoff that
 *     doubles from 0.5 s to 30 s; a batch that failed 4 times is dropped
 *     and counted;
 *   - an unsampled span (its context's sampled flag clear) is not kept.
 * Without cnl_otel_start() (no endpoint configured) spans still get ids,
 * so that contexts propagate, and are not kept.
 */
#ifndef CNL_NET_OTEL_H
#define CNL_NET_OTEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/trace.h"

struct cnl_metrics_buf;

/* OTLP's SpanKind values. */
enum cnl_span_kind {
	CNL_SPAN_INTERNAL = 1,
	CNL_SPAN_SERVER = 2,
	CNL_SPAN_CLIENT = 3,
};

#define CNL_SPAN_ATTRS_MAX 8

struct cnl_span_attr {
	char key[32];
	bool is_int;
	int64_t i;
	char s[160]; /* longer values are cut */
};

struct cnl_span {
	struct cnl_trace ctx; /* its trace, its own span id, the flags */
	uint8_t parent[8];
	bool has_parent;
	char name[64];
	enum cnl_span_kind kind;
	int64_t start_ns, end_ns; /* Unix time */
	int status;               /* 0 unset, 1 ok, 2 error (OTLP's codes) */
	char status_msg[96];
	int n_attrs;
	struct cnl_span_attr attrs[CNL_SPAN_ATTRS_MAX];
};

/*
 * cnl_otel_start - export to @endpoint (http:// or https://, e.g.
 * "http://127.0.0.1:4318"; "/v1/traces" is appended) as service
 * @service.  NULL or "" @endpoint: nothing is exported, 0.  Returns 0, or
 * -EINVAL with @err naming the problem (not an http(s) URL, too long),
 * -EALREADY when started before.
 */
int cnl_otel_start(const char *endpoint, const char *service, char *err,
                   size_t errlen);

/*
 * cnl_telemetry_start - a daemon's exporters from its settings: spans to
 * @otlp_endpoint (NULL or "": OTEL_EXPORTER_OTLP_ENDPOINT, if set) as
 * @service; log lines to @loki_url (NULL or "": none), its own log lines
 * with the labels source=@source and node=@node.  0, or -EINVAL with @err
 * naming the key.
 */
int cnl_telemetry_start(const char *service, const char *otlp_endpoint,
                        const char *loki_url, const char *source,
                        const char *node, char *err, size_t errlen);

/* cnl_otel_enabled - whether spans are exported. */
bool cnl_otel_enabled(void);

/*
 * cnl_otel_flush - wait up to @timeout_ms for the queue to be sent (or
 * given up on): the CLI's last act.  Returns at once when disabled.
 */
void cnl_otel_flush(long timeout_ms);

/* cnl_otel_stats - spans sent and spans dropped so far. */
void cnl_otel_stats(uint64_t *ret_exported, uint64_t *ret_dropped);

/* cnl_otel_now_ns - the Unix time in nanoseconds. */
int64_t cnl_otel_now_ns(void);

/*
 * cnl_span_begin - start @s now: a child of @parent (its trace and flags),
 * or, @parent NULL, the root of a new trace, sampled when @sampled.
 */
void cnl_span_begin(struct cnl_span *s, const struct cnl_trace *parent,
                    bool sampled, const char *name, enum cnl_span_kind kind);

/* Attributes; past CNL_SPAN_ATTRS_MAX they are ignored. */
void cnl_span_str(struct cnl_span *s, const char *key, const char *v);
void cnl_span_int(struct cnl_span *s, const char *key, int64_t v);

/* cnl_span_error - status ERROR with @msg (NULL: none). */
void cnl_span_error(struct cnl_span *s, const char *msg);

/* cnl_span_end - end @s now (unless end_ns is set) and queue it when it
 * is sampled and the exporter runs. */
void cnl_span_end(struct cnl_span *s);

/*
 * cnl_telemetry_metrics - the exporters' counters for /metrics:
 * cnlab_otlp_spans_exported_total, cnlab_otlp_spans_dropped_total,
 * cnlab_loki_entries_pushed_total, cnlab_loki_entries_dropped_total.
 */
void cnl_telemetry_metrics(struct cnl_metrics_buf *b);

#endif /* CNL_NET_OTEL_H */
