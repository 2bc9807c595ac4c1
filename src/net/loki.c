/*
 * loki.c - the Loki pusher (loki.h).
 *
 * Queued lines are single allocations (header and bytes together) in a
 * ring of CNL_LOKI_QUEUE pointers under one mutex, which is held only to
 * put a line in or take a batch out.  The thread gathers for up to a
 * second (or until half the queue is full, or a flush), groups the batch
 * by its labels into streams (few per batch: a linear search), and posts
 * it with the sending step of telemetry-internal.h.  Lines are cleaned to
 * valid UTF-8 when queued (invalid bytes and NUL become U+FFFD), so that
 * jansson encodes each as one JSON string, escaped; labels are never
 * read from a line.
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
#include "net/loki.h"
#include "net/otel.h"
#include "net/telemetry-internal.h"

#define CNL_LOKI_QUEUE     8192
#define CNL_LOKI_BYTES     ((size_t)16 << 20)
#define CNL_LOKI_LINE_MAX  16384
#define CNL_LOKI_LABEL_MAX 64

struct entry {
	char source[16];
	char job[CNL_LOKI_LABEL_MAX];
	char project[CNL_LOKI_LABEL_MAX];
	char node[CNL_LOKI_LABEL_MAX];
	int64_t ts_ns;
	size_t len;
	char line[]; /* @len bytes, NUL-terminated */
};

static struct {
	struct cnl_tm_queue tq; /* n: entries queued; sent: pushed */
	bool on;
	struct entry **q;
	size_t head, bytes;
	int64_t last_ns;
	struct cnl_tm_sender tx;
	/* The platform's own lines (cnl_loki_platform). */
	char p_source[16], p_node[CNL_LOKI_LABEL_MAX];
} lk = {.tq = CNL_TM_QUEUE_INIT};

bool cnl_loki_enabled(void)
{
	return __atomic_load_n(&lk.on, __ATOMIC_ACQUIRE);
}

/* The length of the valid UTF-8 sequence at @p (of @n bytes), or 0. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
	size_t k;
	uint32_t c;

	if (p[0] < 0x80)
		return p[0] ? 1 : 0;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		k = 2, c = p[0] & 0x1f;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		k = 3, c = p[0] & 0x0f;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		k = 4, c = p[0] & 0x07;
	else
		return 0;
	if (k > n)
		return 0;
	for (size_t i = 1; i < k; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3f);
	}
	if ((k == 3 && (c < 0x800 || (c >= 0xd800 && c <= 0xdfff))) ||
	    (k == 4 && (c < 0x10000 || c > 0x10ffff)))
		return 0;
	return k;
}

/* One queued line: @len bytes of @s cleaned (at most 3x as long). */
static struct entry *entry_new(const struct cnl_loki_labels *l, const char *s,
                               size_t len)
{
	struct entry *e;
	size_t o = 0;

	if (len > CNL_LOKI_LINE_MAX)
		len = CNL_LOKI_LINE_MAX;
	if (!(e = calloc(1, sizeof(*e) + 3 * len + 1)))
		return NULL;
	snprintf(e->source, sizeof(e->source), "%s",
	         l->source ? l->source : "");
	snprintf(e->job, sizeof(e->job), "%s", l->job ? l->job : "");
	snprintf(e->project, sizeof(e->project), "%s",
	         l->project ? l->project : "");
	snprintf(e->node, sizeof(e->node), "%s", l->node ? l->node : "");
	for (size_t i = 0; i < len;) {
		size_t k = utf8_seq((const unsigned char *)s + i, len - i);

		if (k) {
			memcpy(e->line + o, s + i, k);
			o += k;
			i += k;
		} else {
			memcpy(e->line + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	e->line[o] = '\0';
	e->len = o;
	return e;
}

static void enqueue(struct entry *e)
{
	int64_t now = cnl_otel_now_ns();

	pthread_mutex_lock(&lk.tq.mu);
	if (lk.tq.n == CNL_LOKI_QUEUE || lk.bytes + e->len > CNL_LOKI_BYTES) {
		lk.tq.dropped++;
		pthread_mutex_unlock(&lk.tq.mu);
		free(e);
		return;
	}
	/* Strictly increasing: Loki may refuse a stream's lines out of
	 * order, and two lines of one chunk share a clock reading. */
	e->ts_ns = now > lk.last_ns ? now : lk.last_ns + 1;
	lk.last_ns = e->ts_ns;
	lk.q[(lk.head + lk.tq.n) % CNL_LOKI_QUEUE] = e;
	lk.tq.n++;
	lk.bytes += e->len;
	if (lk.tq.n == 1 || lk.tq.n == CNL_LOKI_QUEUE / 2)
		pthread_cond_signal(&lk.tq.wake);
	pthread_mutex_unlock(&lk.tq.mu);
}

void cnl_loki_push(const struct cnl_loki_labels *l, const char *text,
                   size_t len)
{
	size_t i = 0;

	if (!cnl_loki_enabled() || !text)
		return;
	while (i < len) {
		const char *nl = memchr(text + i, '\n', len - i);
		size_t k = nl ? (size_t)(nl - (text + i)) : len - i;
		struct entry *e;

		/* A CR before the LF is part of the line break. */
		if (k && text[i + k - 1] == '\r')
			k--;
		if ((e = entry_new(l, text + i, k)))
			enqueue(e);
		else {
			pthread_mutex_lock(&lk.tq.mu);
			lk.tq.dropped++;
			pthread_mutex_unlock(&lk.tq.mu);
		}
		i += nl ? (size_t)(nl - (text + i)) + 1 : k;
	}
}

static bool same_labels(const struct entry *a, const struct entry *b)
{
	return strcmp(a->source, b->source) == 0 &&
	       strcmp(a->job, b->job) == 0 &&
	       strcmp(a->project, b->project) == 0 &&
	       strcmp(a->node, b->node) == 0;
}

static json_t *labels_json(const struct entry *e)
{
	json_t *o = json_object();

	if (e->source[0])
		json_object_set_new(o, "source", json_string(e->source));
	if (e->job[0])
		json_object_set_new(o, "job", json_string(e->job));
	if (e->project[0])
		json_object_set_new(o, "project", json_string(e->project));
	if (e->node[0])
		json_object_set_new(o, "node", json_string(e->node));
	return o;
}

static json_t *push_json(struct entry **b, size_t n)
{
	json_t *streams = json_array();
	size_t *first = cnl_xcalloc(n, sizeof(*first)), ns = 0;

	/* first[k]: the entry that opened stream k. */
	for (size_t i = 0; i < n; i++) {
		json_t *values = NULL, *v;
		char ts[24];
		size_t k;

		for (k = 0; k < ns; k++)
			if (same_labels(b[first[k]], b[i]))
				break;
		if (k == ns) {
			first[ns++] = i;
			values = json_array();
			json_array_append_new(streams,
			                      json_pack("{s:o,s:o}", "stream",
			                                labels_json(b[i]),
			                                "values", values));
		} else {
			values = json_object_get(json_array_get(streams, k),
			                         "values");
		}
		snprintf(ts, sizeof(ts), "%" PRId64, b[i]->ts_ns);
		v = json_stringn(b[i]->line, b[i]->len);
		json_array_append_new(
		    values, json_pack("[s,o]", ts, v ? v : json_string("")));
	}
	free(first);
	return json_pack("{s:o}", "streams", streams);
}

static void *loki_main(void *arg)
{
	size_t cap = CNL_LOKI_QUEUE / 2;
	struct entry **batch = cnl_xcalloc(cap, sizeof(*batch));

	(void)arg;
	pthread_mutex_lock(&lk.tq.mu);
	for (;;) {
		size_t n;
		json_t *body;
		bool ok;

		while (!lk.tq.n)
			pthread_cond_wait(&lk.tq.wake, &lk.tq.mu);
		if (lk.tq.n < cap && !lk.tq.flush) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec++;
			pthread_cond_timedwait(&lk.tq.wake, &lk.tq.mu, &ts);
		}
		n = lk.tq.n < cap ? lk.tq.n : cap;
		for (size_t i = 0; i < n; i++) {
			batch[i] = lk.q[(lk.head + i) % CNL_LOKI_QUEUE];
			lk.bytes -= batch[i]->len;
		}
		lk.head = (lk.head + n) % CNL_LOKI_QUEUE;
		lk.tq.n -= n;
		lk.tq.inflight = n;
		pthread_mutex_unlock(&lk.tq.mu);

		body = push_json(batch, n);
		ok = body && cnl_tm_post(&lk.tx, body);
		json_decref(body);
		for (size_t i = 0; i < n; i++)
			free(batch[i]);

		pthread_mutex_lock(&lk.tq.mu);
		lk.tq.inflight = 0;
		if (ok)
			lk.tq.sent += n;
		else
			lk.tq.dropped += n;
		if (!lk.tq.n)
			lk.tq.flush = false;
		pthread_cond_broadcast(&lk.tq.done);
	}
	return NULL;
}

int cnl_loki_start(const char *url, char *err, size_t errlen)
{
	pthread_attr_t at;
	pthread_t th;
	int r;

	if (!url || !url[0])
		return 0;
	if ((r = cnl_tm_url_check("loki_url", url, err, errlen)) < 0)
		return r;
	if (cnl_loki_enabled()) {
		snprintf(err, errlen, "loki_url: pusher already started");
		return -EALREADY;
	}
	lk.q = cnl_xcalloc(CNL_LOKI_QUEUE, sizeof(*lk.q));
	cnl_tm_sender_init(&lk.tx, "Loki", url, "/loki/api/v1/push");
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&th, &at, loki_main, NULL);
	pthread_attr_destroy(&at);
	if (r) {
		snprintf(err, errlen, "loki_url: cannot start thread: %s",
		         strerror(r));
		return -r;
	}
	__atomic_store_n(&lk.on, true, __ATOMIC_RELEASE);
	return 0;
}

static void platform_hook(enum cnl_log_level level, const char *line,
                          size_t len)
{
	struct cnl_loki_labels l = {.source = lk.p_source,
	                            .node = lk.p_node[0] ? lk.p_node : NULL};

	(void)level;
	cnl_loki_push(&l, line, len);
}

void cnl_loki_platform(const char *source, const char *node)
{
	if (!cnl_loki_enabled())
		return;
	snprintf(lk.p_source, sizeof(lk.p_source), "%s", source);
	snprintf(lk.p_node, sizeof(lk.p_node), "%s", node ? node : "");
	cnl_log_set_hook(platform_hook);
}

void cnl_loki_flush(long timeout_ms)
{
	if (cnl_loki_enabled())
		cnl_tm_queue_flush(&lk.tq, timeout_ms);
}

void cnl_loki_stats(uint64_t *ret_pushed, uint64_t *ret_dropped)
{
	cnl_tm_queue_stats(&lk.tq, ret_pushed, ret_dropped);
}
