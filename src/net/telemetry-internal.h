/*
 * telemetry-internal.h - what the OTLP exporter (otel.c) and the Loki
 * pusher (loki.c) share: one POST of a JSON batch, retried with backoff
 * on the sending thread.
 */
#ifndef CNL_NET_TELEMETRY_INTERNAL_H
#define CNL_NET_TELEMETRY_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct cnl_client;

/* Tries per batch, and the backoff between them (ms). */
#define CNL_TM_TRIES       4
#define CNL_TM_BACKOFF_MIN 500
#define CNL_TM_BACKOFF_MAX 30000

/* A batching queue's shared state: its lock, the sending thread's wake-up
 * (items or a flush), the flushers' "went out", what is queued and being
 * sent, and the counts.  Each exporter keeps its own items beside it. */
struct cnl_tm_queue {
	pthread_mutex_t mu;
	pthread_cond_t wake; /* the thread: items or a flush */
	pthread_cond_t done; /* flushers: the queue went out */
	size_t n;            /* items queued */
	size_t inflight;     /* items being sent */
	bool flush;
	uint64_t sent, dropped;
};

#define CNL_TM_QUEUE_INIT                         \
	{                                         \
		.mu = PTHREAD_MUTEX_INITIALIZER,  \
		.wake = PTHREAD_COND_INITIALIZER, \
		.done = PTHREAD_COND_INITIALIZER, \
	}

/* Asks the thread to send now, and waits until the queue is empty and
 * nothing is in flight, or @timeout_ms passed. */
void cnl_tm_queue_flush(struct cnl_tm_queue *q, long timeout_ms);
/* The counts, read under the lock. */
void cnl_tm_queue_stats(struct cnl_tm_queue *q, uint64_t *ret_sent,
                        uint64_t *ret_dropped);

struct cnl_tm_sender {
	const char *what; /* "OTLP", "Loki": for the log */
	const char *path; /* "/v1/traces" */
	struct cnl_client *cl;
	long backoff_ms; /* the wait before the next try; 0 while healthy */
	bool failing;    /* logged as failing */
};

/* A base URL check: http:// or https://, shorter than the client's base
 * limit.  0 or -EINVAL with @err naming @key. */
int cnl_tm_url_check(const char *key, const char *url, char *err,
                     size_t errlen);

/* A client for @url with the exporters' timeouts into @s. */
void cnl_tm_sender_init(struct cnl_tm_sender *s, const char *what,
                        const char *url, const char *path);

/* POST @body (not stolen) until a 2xx answer or CNL_TM_TRIES failures,
 * sleeping the backoff between tries.  True when it was accepted. */
bool cnl_tm_post(struct cnl_tm_sender *s, json_t *body);

#endif /* CNL_NET_TELEMETRY_INTERNAL_H */
