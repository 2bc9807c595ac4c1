/*
 * log.c - logfmt lines (see log.h).
 *
 * The threshold, sink and clock are process-wide and read with relaxed
 * atomics: changing them while other threads log is safe, and a thread may
 * see the old value for one more line.  Each line is built in a buffer on
 * the stack (or the heap when long) and handed to the sink in one fwrite()
 * under its stdio lock, followed by fflush(), so lines are never mixed and
 * are not lost in a buffer if the process dies.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cnlab/errors.h"
#include "common/log.h"
#include "common/time.h"

static int log_level = CNL_LOG_INFO;
static FILE *log_sink; /* NULL: stderr */
static int64_t (*log_clock)(void);
static void (*log_hook)(enum cnl_log_level, const char *, size_t);

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void cnl_log_set_level(enum cnl_log_level level)
{
	__atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
}

enum cnl_log_level cnl_log_get_level(void)
{
	return (enum cnl_log_level)__atomic_load_n(&log_level,
	                                           __ATOMIC_RELAXED);
}

bool cnl_log_enabled(enum cnl_log_level level)
{
	return (int)level >= __atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

int cnl_log_level_parse(const char *s, enum cnl_log_level *ret)
{
	for (int i = 0; i <= CNL_LOG_ERROR; i++) {
		if (strcasecmp(s, level_names[i]) == 0) {
			*ret = (enum cnl_log_level)i;
			return 0;
		}
	}
	if (strcasecmp(s, "warning") == 0) {
		*ret = CNL_LOG_WARN;
		return 0;
	}
	return -CNL_EPARSE;
}

const char *cnl_log_level_name(enum cnl_log_level level)
{
	if ((int)level < 0 || level > CNL_LOG_ERROR)
		return "unknown";
	return level_names[level];
}

void cnl_log_set_sink(FILE *f)
{
	__atomic_store_n(&log_sink, f, __ATOMIC_RELAXED);
}

void cnl_log_set_hook(void (*hook)(enum cnl_log_level level, const char *line,
                                   size_t len))
{
	__atomic_store_n(&log_hook, hook, __ATOMIC_RELEASE);
}

void cnl_log_set_clock(int64_t (*now_ms)(void))
{
	__atomic_store_n(&log_clock, now_ms, __ATOMIC_RELAXED);
}

static bool needs_quotes(const char *v)
{
	if (*v == '\0')
		return true;
	for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
		if (*p <= ' ' || *p == 0x7f || *p == '"' || *p == '=' ||
		    *p == '\\')
			return true;
	}
	return false;
}

/* The escaped form of one byte inside quotes, into @out (>= 7 bytes). */
static size_t escape_byte(unsigned char c, char *out)
{
	switch (c) {
	case '"':
	case '\\':
		out[0] = '\\';
		out[1] = (char)c;
		return 2;
	case '\n':
		memcpy(out, "\\n", 2);
		return 2;
	case '\r':
		memcpy(out, "\\r", 2);
		return 2;
	case '\t':
		memcpy(out, "\\t", 2);
		return 2;
	default:
		if (c < ' ' || c == 0x7f)
			return (size_t)snprintf(out, 7, "\\u%04x", c);
		out[0] = (char)c;
		return 1;
	}
}

const char *cnl_log_quote(char *buf, size_t len, const char *value)
{
	size_t need = 0, pos = 0;
	char esc[8];

	if (!value)
		value = "(null)";
	if (!needs_quotes(value)) {
		size_t n = strlen(value);
		if (n < len) {
			memcpy(buf, value, n + 1);
			return buf;
		}
	} else {
		for (const char *p = value; *p; p++)
			need += escape_byte((unsigned char)*p, esc);
		if (need + 3 <= len) {
			buf[pos++] = '"';
			for (const char *p = value; *p; p++) {
				size_t k = escape_byte((unsigned char)*p, esc);
				memcpy(buf + pos, esc, k);
				pos += k;
			}
			memcpy(buf + pos, "\"", 2);
			return buf;
		}
	}

	/* Too long: keep whole escapes that fit before ..." and the NUL. */
	if (len < 6) {
		if (len > 0)
			buf[0] = '\0';
		return buf;
	}
	buf[pos++] = '"';
	for (const char *p = value; *p; p++) {
		size_t k = escape_byte((unsigned char)*p, esc);
		if (pos + k + 5 > len)
			break;
		memcpy(buf + pos, esc, k);
		pos += k;
	}
	memcpy(buf + pos, "...\"", 5);
	return buf;
}

int cnl_log(enum cnl_log_level level, const char *msg, const char *fmt, ...)
{
	char stackbuf[1024], ts[CNL_TIME_RFC3339_MAX], qmsg[CNL_LOG_QUOTE_MAX];
	char *line = stackbuf, *heap = NULL;
	int64_t (*now_fn)(void);
	FILE *sink;
	int head, nfields, r = 0;
	size_t total;
	va_list ap;

	if (!cnl_log_enabled(level))
		return 0;

	now_fn = __atomic_load_n(&log_clock, __ATOMIC_RELAXED);
	if (cnl_time_format_rfc3339(now_fn ? now_fn() : cnl_time_now_ms(), ts,
	                            sizeof(ts)) < 0)
		memcpy(ts, "invalid", 8);
	head = snprintf(stackbuf, sizeof(stackbuf), "ts=%s level=%s msg=%s", ts,
	                cnl_log_level_name(level),
	                cnl_log_quote(qmsg, sizeof(qmsg), msg));

	nfields = 0;
	if (fmt) {
		va_start(ap, fmt);
		nfields = vsnprintf(NULL, 0, fmt, ap);
		va_end(ap);
		if (nfields < 0)
			return -EINVAL;
	}

	/* head, ' ', fields, '\n', NUL (vsnprintf writes one). */
	total = (size_t)head + (nfields ? 1 + (size_t)nfields : 0) + 1;
	if (total + 1 > sizeof(stackbuf)) {
		heap = malloc(total + 1);
		if (!heap)
			return -ENOMEM;
		memcpy(heap, stackbuf, (size_t)head);
		line = heap;
	}
	if (nfields) {
		char *f = line + head + 1;
		line[head] = ' ';
		va_start(ap, fmt);
		vsnprintf(f, (size_t)nfields + 1, fmt, ap);
		va_end(ap);
		for (int i = 0; i < nfields; i++) {
			if ((unsigned char)f[i] < ' ' || f[i] == 0x7f)
				f[i] = '?';
		}
	}
	line[total - 1] = '\n';

	sink = __atomic_load_n(&log_sink, __ATOMIC_RELAXED);
	if (!sink)
		sink = stderr;
	flockfile(sink);
	if (fwrite_unlocked(line, 1, total, sink) != total ||
	    fflush_unlocked(sink) != 0)
		r = -EIO;
	funlockfile(sink);
	{
		void (*hook)(enum cnl_log_level, const char *, size_t) =
		    __atomic_load_n(&log_hook, __ATOMIC_ACQUIRE);

		if (hook)
			hook(level, line, total - 1);
	}
	free(heap);
	return r;
}
