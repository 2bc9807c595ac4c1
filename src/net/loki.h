/*
 * loki.h - log lines pushed to Grafana Loki's push API
 * (POST <url>/loki/api/v1/push, JSON:
 *   {"streams":[{"stream":{labels},"values":[["<unix ns>","line"],...]}]}).
 *
 * One pusher per process (cnl_loki_start()).  cnl_loki_push() copies a
 * line into a bounded queue (8192 lines, 16 MiB) and returns; a
 * background thread groups what is queued by label set into streams and
 * sends them about once a second.  A full queue drops the line and counts
 * it; a Loki that refuses or does not answer is retried with a backoff
 * (0.5 s doubling to 30 s, a batch dropped and counted after 4 tries);
 * nothing waits for the network but that thread.
 *
 * Labels are few and fixed (source, and when known job, project, node):
 * low cardinality, never taken from a line.  A line is always a value:
 * JSON-escaped, invalid UTF-8 replaced by U+FFFD, so tenant output
 * cannot add a label or a stream.  Timestamps are the push time, made
 * strictly increasing within the process.
 *
 * cnl_loki_platform() also sends this process's own logfmt log lines
 * (log.h, at its configured level) with the labels source and node.
 */
#ifndef CNL_NET_LOKI_H
#define CNL_NET_LOKI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A line's labels; NULL or "" leaves a label out.  @source is
 * "workload", "cnlabd" or "agent". */
struct cnl_loki_labels {
	const char *source;
	const char *job;
	const char *project;
	const char *node;
};

/*
 * cnl_loki_start - push to @url (http:// or https://, e.g.
 * "http://127.0.0.1:3100").  NULL or "": nothing is pushed, 0.  Returns
 * 0, -EINVAL with @err (not an http(s) URL, too long), or -EALREADY.
 */
int cnl_loki_start(const char *url, char *err, size_t errlen);

/* cnl_loki_enabled - whether lines are pushed. */
bool cnl_loki_enabled(void);

/*
 * cnl_loki_push - queue each line of @len bytes at @text (split at '\n';
 * an empty last piece is none) with the labels @l.  Never blocks on the
 * network; does nothing when disabled.
 */
void cnl_loki_push(const struct cnl_loki_labels *l, const char *text,
                   size_t len);

/*
 * cnl_loki_platform - from now on, also push this process's log lines
 * with source @source and node @node (NULL: none).  No-op when disabled.
 */
void cnl_loki_platform(const char *source, const char *node);

/* cnl_loki_flush - wait up to @timeout_ms for the queue to be sent. */
void cnl_loki_flush(long timeout_ms);

/* cnl_loki_stats - lines pushed and lines dropped so far. */
void cnl_loki_stats(uint64_t *ret_pushed, uint64_t *ret_dropped);

#endif /* CNL_NET_LOKI_H */
