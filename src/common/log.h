/*
 * log.h - levelled key=value logging in logfmt, one line per event:
 *
 *   ts=2026-11-29T11:00:00.123Z level=info msg="job placed" job=job_01.. gpus=3
 *
 * Daemons log where they decide something; library code logs at debug only
 * (STYLE.md).  A line is assembled in memory and written with one fwrite()
 * under flockfile(), so concurrent threads never interleave partial lines.
 *
 * The fields are a printf format chosen by the caller.  Values that come
 * from outside (names, paths, error text) must pass through cnl_log_quote()
 * so that a space, '=' or quote in them cannot forge extra fields.  As a
 * last line of defence cnl_log() replaces any control character left in the
 * formatted fields with '?', so no value can ever start a second line.
 */
#ifndef CNL_LOG_H
#define CNL_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Severity, lowest first; a line is written when level >= the threshold. */
enum cnl_log_level {
	CNL_LOG_DEBUG,
	CNL_LOG_INFO,
	CNL_LOG_WARN,
	CNL_LOG_ERROR,
};

/* cnl_log_set_level - set the threshold (default CNL_LOG_INFO). */
void cnl_log_set_level(enum cnl_log_level level);

/* cnl_log_get_level - the current threshold. */
enum cnl_log_level cnl_log_get_level(void);

/* cnl_log_enabled - whether a line at @level would be written now. */
bool cnl_log_enabled(enum cnl_log_level level);

/*
 * cnl_log_level_parse - map "debug", "info", "warn" (or "warning") and
 * "error", in any case, to a level.  Returns 0, or -CNL_EPARSE leaving
 * *@ret untouched.
 */
int cnl_log_level_parse(const char *s, enum cnl_log_level *ret);

/* cnl_log_level_name - "debug", "info", "warn", "error" or "unknown". */
const char *cnl_log_level_name(enum cnl_log_level level);

/*
 * cnl_log_set_sink - send lines to @f from now on; NULL restores the
 * default, stderr.  The caller keeps ownership of @f.
 */
void cnl_log_set_sink(FILE *f);

/*
 * cnl_log_set_clock - use @now_ms instead of cnl_time_now_ms() for the ts
 * field, so that tests can assert whole lines; NULL restores the real clock.
 */
void cnl_log_set_clock(int64_t (*now_ms)(void));

/*
 * cnl_log - write one line at @level if it passes the threshold.  @msg is
 * a fixed human-readable summary (quoted like any value); @fmt and its
 * arguments produce the space-separated key=value fields (NULL for none:
 * an empty format would trip -Wformat-zero-length).
 * Returns 0 (also when filtered out), -ENOMEM, or -EIO if the sink failed.
 */
int cnl_log(enum cnl_log_level level, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * cnl_log_quote - render @value as one logfmt value in @buf and return
 * @buf, for use directly as a "%s" argument of cnl_log().  A value that is
 * empty or contains a space, '"', '=', '\' or a control character is
 * double-quoted, with '"', '\', \n, \r, \t escaped by a backslash and other
 * control characters as \u00XX; other values are copied as they are.  NULL
 * becomes (null).  The result is always a single well-formed token: if it
 * does not fit in @len bytes it is cut, quoted and ends with ...", and if
 * even that cannot fit (@len under 6) @buf holds the empty string, which is
 * an empty logfmt value.  CNL_LOG_QUOTE_MAX suits most values.
 */
const char *cnl_log_quote(char *buf, size_t len, const char *value);

#define CNL_LOG_QUOTE_MAX 256

/*
 * cnl_log_set_hook - also hand every line written (at the threshold, its
 * '\n' left out) to @hook, e.g. to push it to Loki (net/loki.h); NULL:
 * none.  The hook runs on the logging thread after the line is written
 * and must not log itself.
 */
void cnl_log_set_hook(void (*hook)(enum cnl_log_level level, const char *line,
                                   size_t len));

#endif /* CNL_LOG_H */
