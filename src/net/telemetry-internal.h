/*
 * telemetry-internal.h - what the OTLP exporter (otel.c) and the Loki
 * pusher (loki.c) share: one POST of a JSON batch, retried with backoff
 * on the sending thread.
 */
#ifndef CNL_NET_TELEMETRY_INTERNAL_H
#define CNL_NET_TELEMETRY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

struct cnl_client;

/* Tries per batch, and the backoff between them (ms). */
#define CNL_TM_TRIES       4
#define CNL_TM_BACKOFF_MIN 500
#define CNL_TM_BACKOFF_MAX 30000

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
