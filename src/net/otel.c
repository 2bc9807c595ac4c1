/*
 * otel.c - the OTLP/HTTP span exporter (otel.h) and the exporters'
 * shared sending step (telemetry-internal.h).
 *
 * The queue is a ring of CNL_OTEL_QUEUE spans under one mutex, held only
 * to copy a span in or a batch out: cnl_span_end() never waits for the
 * network, only for that copy.  The thread wakes when spans arrive,
 * gathers for up to 200 ms (or until a batch is full, or a flush is
 * asked for), encodes the batch as an ExportTraceServiceRequest in
 * OTLP's JSON mapping (ids as lower-case hex, times as decimal strings of
 * Unix nanoseconds, enums as numbers, 64-bit integers as strings) and
 * posts it.  The thread is detached and lives as long as the process.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/util.h"
#include "net/client.h"
#include "net/loki.h"
#include "net/metrics.h"
#include "net/otel.h"
#include "net/telemetry-internal.h"

#define CNL_OTEL_QUEUE 2048
#define CNL_OTEL_BATCH 256

static struct {
	struct cnl_tm_queue tq; /* n: spans queued; sent: exported */
	bool on;
	char service[64];
	struct cnl_span *q; /* ring */
	size_t head;
	struct cnl_tm_sender tx;
} ot = {.tq = CNL_TM_QUEUE_INIT};

/* ---- the shared sending step --------------------------------------------- */

int cnl_tm_url_check(const char *key, const char *url, char *err, size_t errlen)
{
	if ((strncmp(url, "http://", 7) != 0 &&
	     strncmp(url, "https://", 8) != 0) ||
	    strlen(url) >= CNL_CLIENT_BASE_MAX - 64 || strchr(url, '@') ||
	    strpbrk(url, " \t\r\n")) {
		snprintf(err, errlen,
		         "%s: must be an http:// or https:// URL with no "
		         "user@ part (got \"%.200s\")",
		         key, url);
		return -EINVAL;
	}
	return 0;
}

void cnl_tm_sender_init(struct cnl_tm_sender *s, const char *what,
                        const char *url, const char *path)
{
	struct cnl_client_config cc = {
	    .base = url,
	    .user_agent = "cnlab-telemetry",
	    .connect_timeout_ms = 2000,
	    .idle_timeout_ms = 2000,
	    .timeout_ms = 5000,
	    .reply_max = 1 << 20,
	};

	memset(s, 0, sizeof(*s));
	s->what = what;
	s->path = path;
	if (cnl_client_new(&cc, &s->cl) < 0)
		s->cl = NULL;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

bool cnl_tm_post(struct cnl_tm_sender *s, json_t *body)
{
	char why[CNL_CLIENT_ERROR_MAX + 32] = "no client";

	for (int t = 0; t < CNL_TM_TRIES && s->cl; t++) {
		struct cnl_client_request rq = {
		    .method = "POST", .path = s->path, .json = body};
		struct cnl_client_reply rp;
		int r;

		if (s->backoff_ms)
			sleep_ms(s->backoff_ms);
		r = cnl_client_request(s->cl, &rq, &rp);
		if (r == 0 && rp.status >= 200 && rp.status < 300) {
			cnl_client_reply_done(&rp);
			s->backoff_ms = 0;
			if (s->failing)
				cnl_log(CNL_LOG_INFO,
				        "telemetry export works again", "to=%s",
				        s->what);
			s->failing = false;
			return true;
		}
		if (r == 0)
			snprintf(why, sizeof(why), "HTTP %ld", rp.status);
		else
			snprintf(why, sizeof(why), "%s", rp.error);
		cnl_client_reply_done(&rp);
		s->backoff_ms =
		    s->backoff_ms ? s->backoff_ms * 2 : CNL_TM_BACKOFF_MIN;
		if (s->backoff_ms > CNL_TM_BACKOFF_MAX)
			s->backoff_ms = CNL_TM_BACKOFF_MAX;
	}
	/* Once per outage: a log line per batch would feed the Loki queue
	 * with its own failures. */
	if (!s->failing) {
		char q[CNL_LOG_QUOTE_MAX];

		cnl_log(CNL_LOG_WARN, "telemetry export failing; dropping",
		        "to=%s err=%s", s->what,
		        cnl_log_quote(q, sizeof(q), why));
	}
	s->failing = true;
	return false;
}

/* ---- spans --------------------------------------------------------------- */

int64_t cnl_otel_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void cnl_span_begin(struct cnl_span *s, const struct cnl_trace *parent,
                    bool sampled, const char *name, enum cnl_span_kind kind)
{
	memset(s, 0, sizeof(*s));
	if (parent) {
		cnl_trace_child(parent, &s->ctx);
		memcpy(s->parent, parent->span_id, sizeof(s->parent));
		s->has_parent = true;
	} else {
		cnl_trace_new(sampled, &s->ctx);
	}
	snprintf(s->name, sizeof(s->name), "%s", name);
	s->kind = kind;
	s->start_ns = cnl_otel_now_ns();
}

static struct cnl_span_attr *attr_slot(struct cnl_span *s, const char *key)
{
	struct cnl_span_attr *a;

	if (s->n_attrs >= CNL_SPAN_ATTRS_MAX)
		return NULL;
	a = &s->attrs[s->n_attrs++];
	snprintf(a->key, sizeof(a->key), "%s", key);
	return a;
}

void cnl_span_str(struct cnl_span *s, const char *key, const char *v)
{
	struct cnl_span_attr *a = attr_slot(s, key);

	if (a)
		snprintf(a->s, sizeof(a->s), "%s", v ? v : "");
}

void cnl_span_int(struct cnl_span *s, const char *key, int64_t v)
{
	struct cnl_span_attr *a = attr_slot(s, key);

	if (a) {
		a->is_int = true;
		a->i = v;
	}
}

void cnl_span_error(struct cnl_span *s, const char *msg)
{
	s->status = 2;
	snprintf(s->status_msg, sizeof(s->status_msg), "%s", msg ? msg : "");
}

bool cnl_otel_enabled(void)
{
	return __atomic_load_n(&ot.on, __ATOMIC_ACQUIRE);
}

void cnl_span_end(struct cnl_span *s)
{
	if (!s->end_ns)
		s->end_ns = cnl_otel_now_ns();
	if (s->end_ns < s->start_ns)
		s->end_ns = s->start_ns;
	if (!cnl_trace_sampled(&s->ctx) || !cnl_otel_enabled())
		return;
	pthread_mutex_lock(&ot.tq.mu);
	if (ot.tq.n == CNL_OTEL_QUEUE) {
		ot.tq.dropped++;
	} else {
		ot.q[(ot.head + ot.tq.n) % CNL_OTEL_QUEUE] = *s;
		if (++ot.tq.n == 1 || ot.tq.n == CNL_OTEL_BATCH)
			pthread_cond_signal(&ot.tq.wake);
	}
	pthread_mutex_unlock(&ot.tq.mu);
}

static json_t *kv_str(const char *k, const char *v)
{
	return json_pack("{s:s,s:{s:s}}", "key", k, "value", "stringValue", v);
}

/* A string of valid UTF-8 for jansson: bytes past 0x7f that do not form
 * a sequence become '?'. */
static json_t *utf8_string(const char *s)
{
	json_t *j = json_string(s);
	char *c;

	if (j)
		return j;
	c = cnl_xstrdup(s);
	for (char *p = c; *p; p++)
		if ((unsigned char)*p > 0x7f)
			*p = '?';
	j = json_string(c);
	free(c);
	return j;
}

static json_t *span_json(const struct cnl_span *s)
{
	char tid[33], sid[17], pid[17], t0[24], t1[24];
	json_t *o, *attrs = json_array();

	cnl_trace_hex(s->ctx.trace_id, 16, tid);
	cnl_trace_hex(s->ctx.span_id, 8, sid);
	snprintf(t0, sizeof(t0), "%" PRId64, s->start_ns);
	snprintf(t1, sizeof(t1), "%" PRId64, s->end_ns);
	for (int i = 0; i < s->n_attrs; i++) {
		const struct cnl_span_attr *a = &s->attrs[i];
		char iv[24];

		if (a->is_int) {
			snprintf(iv, sizeof(iv), "%" PRId64, a->i);
			json_array_append_new(
			    attrs, json_pack("{s:s,s:{s:s}}", "key", a->key,
			                     "value", "intValue", iv));
		} else {
			json_array_append_new(
			    attrs,
			    json_pack("{s:s,s:{s:o}}", "key", a->key, "value",
			              "stringValue", utf8_string(a->s)));
		}
	}
	o = json_pack("{s:s,s:s,s:s,s:i,s:s,s:s,s:o}", "traceId", tid, "spanId",
	              sid, "name", s->name, "kind", (int)s->kind,
	              "startTimeUnixNano", t0, "endTimeUnixNano", t1,
	              "attributes", attrs);
	if (s->has_parent) {
		cnl_trace_hex(s->parent, 8, pid);
		json_object_set_new(o, "parentSpanId", json_string(pid));
	}
	if (s->status)
		json_object_set_new(
		    o, "status",
		    s->status_msg[0]
		        ? json_pack("{s:i,s:o}", "code", s->status, "message",
		                    utf8_string(s->status_msg))
		        : json_pack("{s:i}", "code", s->status));
	return o;
}

static json_t *request_json(const struct cnl_span *b, size_t n)
{
	json_t *spans = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(spans, span_json(&b[i]));
	return json_pack("{s:[{s:{s:[o]},s:[{s:{s:s},s:o}]}]}", "resourceSpans",
	                 "resource", "attributes",
	                 kv_str("service.name", ot.service), "scopeSpans",
	                 "scope", "name", "cnlab", "spans", spans);
}

static void *otel_main(void *arg)
{
	struct cnl_span *batch = cnl_xcalloc(CNL_OTEL_BATCH, sizeof(*batch));

	(void)arg;
	pthread_mutex_lock(&ot.tq.mu);
	for (;;) {
		size_t n;
		json_t *body;
		bool ok;

		while (!ot.tq.n)
			pthread_cond_wait(&ot.tq.wake, &ot.tq.mu);
		if (ot.tq.n < CNL_OTEL_BATCH && !ot.tq.flush) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 200000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&ot.tq.wake, &ot.tq.mu, &ts);
		}
		n = ot.tq.n < CNL_OTEL_BATCH ? ot.tq.n : CNL_OTEL_BATCH;
		for (size_t i = 0; i < n; i++)
			batch[i] = ot.q[(ot.head + i) % CNL_OTEL_QUEUE];
		ot.head = (ot.head + n) % CNL_OTEL_QUEUE;
		ot.tq.n -= n;
		ot.tq.inflight = n;
		pthread_mutex_unlock(&ot.tq.mu);

		body = request_json(batch, n);
		ok = body && cnl_tm_post(&ot.tx, body);
		json_decref(body);

		pthread_mutex_lock(&ot.tq.mu);
		ot.tq.inflight = 0;
		if (ok)
			ot.tq.sent += n;
		else
			ot.tq.dropped += n;
		if (!ot.tq.n)
			ot.tq.flush = false;
		pthread_cond_broadcast(&ot.tq.done);
	}
	return NULL;
}

int cnl_otel_start(const char *endpoint, const char *service, char *err,
                   size_t errlen)
{
	pthread_attr_t at;
	pthread_t th;
	int r;

	if (!endpoint || !endpoint[0])
		return 0;
	if ((r = cnl_tm_url_check("otlp_endpoint", endpoint, err, errlen)) < 0)
		return r;
	if (cnl_otel_enabled()) {
		snprintf(err, errlen,
		         "otlp_endpoint: exporter already started");
		return -EALREADY;
	}
	snprintf(ot.service, sizeof(ot.service), "%s", service);
	ot.q = cnl_xcalloc(CNL_OTEL_QUEUE, sizeof(*ot.q));
	cnl_tm_sender_init(&ot.tx, "OTLP", endpoint, "/v1/traces");
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&th, &at, otel_main, NULL);
	pthread_attr_destroy(&at);
	if (r) {
		snprintf(err, errlen, "otlp_endpoint: cannot start thread: %s",
		         strerror(r));
		return -r;
	}
	__atomic_store_n(&ot.on, true, __ATOMIC_RELEASE);
	return 0;
}

int cnl_telemetry_start(const char *service, const char *otlp_endpoint,
                        const char *loki_url, const char *source,
                        const char *node, char *err, size_t errlen)
{
	const char *env = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
	int r;

	if ((!otlp_endpoint || !otlp_endpoint[0]) && env && env[0])
		otlp_endpoint = env;
	if ((r = cnl_otel_start(otlp_endpoint, service, err, errlen)) < 0 ||
	    (r = cnl_loki_start(loki_url, err, errlen)) < 0)
		return r;
	cnl_loki_platform(source, node);
	return 0;
}

void cnl_otel_flush(long timeout_ms)
{
	if (cnl_otel_enabled())
		cnl_tm_queue_flush(&ot.tq, timeout_ms);
}

void cnl_tm_queue_flush(struct cnl_tm_queue *q, long timeout_ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&q->mu);
	if (q->n) {
		q->flush = true;
		pthread_cond_signal(&q->wake);
	}
	while ((q->n || q->inflight) &&
	       pthread_cond_timedwait(&q->done, &q->mu, &ts) == 0)
		;
	pthread_mutex_unlock(&q->mu);
}

void cnl_tm_queue_stats(struct cnl_tm_queue *q, uint64_t *ret_sent,
                        uint64_t *ret_dropped)
{
	pthread_mutex_lock(&q->mu);
	*ret_sent = q->sent;
	*ret_dropped = q->dropped;
	pthread_mutex_unlock(&q->mu);
}

void cnl_otel_stats(uint64_t *ret_exported, uint64_t *ret_dropped)
{
	cnl_tm_queue_stats(&ot.tq, ret_exported, ret_dropped);
}

void cnl_telemetry_metrics(struct cnl_metrics_buf *b)
{
	uint64_t a, d;

	cnl_otel_stats(&a, &d);
	cnl_mb_family(b, "cnlab_otlp_spans_exported_total", "counter",
	              "Spans the OTLP collector accepted.");
	cnl_mb_printf(b, "cnlab_otlp_spans_exported_total %llu\n",
	              (unsigned long long)a);
	cnl_mb_family(b, "cnlab_otlp_spans_dropped_total", "counter",
	              "Spans dropped: queue full or collector unreachable.");
	cnl_mb_printf(b, "cnlab_otlp_spans_dropped_total %llu\n",
	              (unsigned long long)d);
	cnl_loki_stats(&a, &d);
	cnl_mb_family(b, "cnlab_loki_entries_pushed_total", "counter",
	              "Log lines Loki accepted.");
	cnl_mb_printf(b, "cnlab_loki_entries_pushed_total %llu\n",
	              (unsigned long long)a);
	cnl_mb_family(b, "cnlab_loki_entries_dropped_total", "counter",
	              "Log lines dropped: queue full or Loki unreachable.");
	cnl_mb_printf(b, "cnlab_loki_entries_dropped_total %llu\n",
	              (unsigned long long)d);
}
