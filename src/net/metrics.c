/*
 * metrics.c - Prometheus text helpers (see metrics.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "net/metrics.h"

const double cnl_hist_bounds[CNL_HIST_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
};

void cnl_mb_printf(struct cnl_metrics_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		size_t room = b->cap - b->n;

		va_start(ap, fmt);
		n = vsnprintf(b->p ? b->p + b->n : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if ((size_t)n < room) {
			b->n += (size_t)n;
			return;
		}
		b->cap = (b->cap + (size_t)n + 1) * 2;
		b->p = cnl_xrealloc(b->p, b->cap);
	}
}

void cnl_mb_family(struct cnl_metrics_buf *b, const char *name,
                   const char *type, const char *help)
{
	cnl_mb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name,
	              type);
}

const char *cnl_mb_escape(const char *v, char *out, size_t outlen)
{
	size_t o = 0;

	for (; *v && o + 3 < outlen; v++) {
		if (*v == '\\' || *v == '"') {
			out[o++] = '\\';
			out[o++] = *v;
		} else if (*v == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else {
			out[o++] = *v;
		}
	}
	out[o] = '\0';
	return out;
}

void cnl_mb_done(struct cnl_metrics_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

const double cnl_wait_bounds[CNL_WAIT_BUCKETS] = {
    1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 14400, 86400,
};

static void observe(const double *bounds, int nb, uint64_t *bucket,
                    uint64_t *count, double *sum, double seconds)
{
	int i = 0;

	while (i < nb && seconds > bounds[i])
		i++;
	if (i < nb)
		bucket[i]++;
	(*count)++;
	*sum += seconds;
}

static void write_hist(struct cnl_metrics_buf *b, const char *name,
                       const char *labels, const double *bounds, int nb,
                       const uint64_t *bucket, uint64_t count, double sum)
{
	const char *sep = labels[0] ? "," : "";
	uint64_t cum = 0;

	for (int i = 0; i < nb; i++) {
		cum += bucket[i];
		cnl_mb_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name,
		              labels, sep, bounds[i], (unsigned long long)cum);
	}
	cnl_mb_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
	              (unsigned long long)count);
	if (labels[0]) {
		cnl_mb_printf(b, "%s_sum{%s} %.6f\n", name, labels, sum);
		cnl_mb_printf(b, "%s_count{%s} %llu\n", name, labels,
		              (unsigned long long)count);
	} else {
		cnl_mb_printf(b, "%s_sum %.6f\n", name, sum);
		cnl_mb_printf(b, "%s_count %llu\n", name,
		              (unsigned long long)count);
	}
}

void cnl_hist_observe(struct cnl_hist *h, double seconds)
{
	observe(cnl_hist_bounds, CNL_HIST_BUCKETS, h->bucket, &h->count,
	        &h->sum, seconds);
}

void cnl_hist_write(struct cnl_metrics_buf *b, const char *name,
                    const char *labels, const struct cnl_hist *h)
{
	write_hist(b, name, labels, cnl_hist_bounds, CNL_HIST_BUCKETS,
	           h->bucket, h->count, h->sum);
}

void cnl_wait_hist_observe(struct cnl_wait_hist *h, double seconds)
{
	observe(cnl_wait_bounds, CNL_WAIT_BUCKETS, h->bucket, &h->count,
	        &h->sum, seconds);
}

void cnl_wait_hist_write(struct cnl_metrics_buf *b, const char *name,
                         const char *labels, const struct cnl_wait_hist *h)
{
	write_hist(b, name, labels, cnl_wait_bounds, CNL_WAIT_BUCKETS,
	           h->bucket, h->count, h->sum);
}
