/*
 * metrics.h - Prometheus text exposition (format 0.0.4) for cnlabd's and
 * the node agent's /metrics.
 *
 * A growable text buffer with helpers that write a family's HELP and TYPE
 * lines once, then its samples, and a fixed-bucket latency histogram.
 * Label values are escaped (backslash, quote, newline) as the format asks,
 * so promtool accepts whatever names users give projects.
 */
#ifndef CNL_NET_METRICS_H
#define CNL_NET_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct cnl_metrics_buf {
	char *p;
	size_t n, cap;
};

void cnl_mb_printf(struct cnl_metrics_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The HELP and TYPE lines of a family ("counter", "gauge", "histogram"). */
void cnl_mb_family(struct cnl_metrics_buf *b, const char *name,
                   const char *type, const char *help);

/* @v escaped as a label value, into @out (@outlen >= 2 * strlen + 1). */
const char *cnl_mb_escape(const char *v, char *out, size_t outlen);

void cnl_mb_done(struct cnl_metrics_buf *b);

/* Latency buckets, seconds. */
#define CNL_HIST_BUCKETS 12
extern const double cnl_hist_bounds[CNL_HIST_BUCKETS];

struct cnl_hist {
	uint64_t bucket[CNL_HIST_BUCKETS]; /* not cumulative */
	uint64_t count;
	double sum;
};

void cnl_hist_observe(struct cnl_hist *h, double seconds);

/* Write @h's samples: name_bucket{labels,le=...}, name_sum, name_count.
 * @labels is "" or 'key="value"' pairs without braces. */
void cnl_hist_write(struct cnl_metrics_buf *b, const char *name,
                    const char *labels, const struct cnl_hist *h);

/* Wait-time buckets, seconds (1 s to a day): a queue wait is seconds to
 * hours, where the latency buckets above stop at 2.5 s. */
#define CNL_WAIT_BUCKETS 12
extern const double cnl_wait_bounds[CNL_WAIT_BUCKETS];

struct cnl_wait_hist {
	uint64_t bucket[CNL_WAIT_BUCKETS]; /* not cumulative */
	uint64_t count;
	double sum;
};

void cnl_wait_hist_observe(struct cnl_wait_hist *h, double seconds);
void cnl_wait_hist_write(struct cnl_metrics_buf *b, const char *name,
                         const char *labels, const struct cnl_wait_hist *h);

#endif /* CNL_NET_METRICS_H */
