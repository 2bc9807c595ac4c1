/*
 * trace.h - W3C trace context (https://www.w3.org/TR/trace-context/): the
 * `traceparent` header that carries a trace from the CLI through cnlabd
 * to the node agent, and the ids of OpenTelemetry spans.
 *
 *   traceparent: 00-<trace-id: 32 hex>-<parent-id: 16 hex>-<flags: 2 hex>
 *
 * The parser is strict, as the recommendation asks of version 00: exactly
 * 55 bytes, lower-case hex only, dashes where they belong, version "00",
 * neither id all zeros.  Anything else is not a context (the caller then
 * starts a trace of its own, never fails the request).  Only the sampled
 * flag (bit 0) is kept; other flag bits are dropped, as the recommendation
 * says a version-00 participant does.
 *
 * Ids come from a per-thread generator seeded from getrandom(): random
 * enough to be unique, and cheap enough to draw on every request.
 *
 * The "current" context is per thread: cnlabd sets it around a request's
 * handler so that code deep in the handler (the scheduling decisions of a
 * submission) can make child spans without threading it through every
 * call.
 */
#ifndef CNL_TRACE_H
#define CNL_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes of a traceparent header value, NUL included. */
#define CNL_TRACE_HEADER_MAX 56

#define CNL_TRACE_SAMPLED    0x01

struct cnl_trace {
	uint8_t trace_id[16];
	uint8_t span_id[8]; /* the span this context names */
	uint8_t flags;      /* CNL_TRACE_SAMPLED or 0 */
};

/*
 * cnl_trace_parse - a traceparent value into *@ret.  0, or -CNL_EPARSE
 * (NULL, wrong length, version, case, separators, all-zero ids) leaving
 * *@ret untouched.
 */
int cnl_trace_parse(const char *s, struct cnl_trace *ret);

/* cnl_trace_format - @t as a traceparent value (55 characters). */
void cnl_trace_format(const struct cnl_trace *t,
                      char buf[CNL_TRACE_HEADER_MAX]);

/* cnl_trace_new - a new trace (random trace and span ids). */
void cnl_trace_new(bool sampled, struct cnl_trace *ret);

/* cnl_trace_child - a new span id in @parent's trace, with its flags. */
void cnl_trace_child(const struct cnl_trace *parent, struct cnl_trace *ret);

/* cnl_trace_sampled - whether @t is to be recorded. */
static inline bool cnl_trace_sampled(const struct cnl_trace *t)
{
	return t && (t->flags & CNL_TRACE_SAMPLED);
}

/* cnl_trace_hex - @n bytes of @b as lower-case hex into @out (2n + 1). */
void cnl_trace_hex(const uint8_t *b, size_t n, char *out);

/* cnl_trace_set_current - this thread's current context (copied; NULL:
 * none). */
void cnl_trace_set_current(const struct cnl_trace *t);

/* cnl_trace_current - this thread's current context, or NULL. */
const struct cnl_trace *cnl_trace_current(void);

/* cnl_trace_random64 - 64 random bits from this thread's generator. */
uint64_t cnl_trace_random64(void);

#endif /* CNL_TRACE_H */
