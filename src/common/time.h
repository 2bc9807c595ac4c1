/*
 * time.h - wall-clock and monotonic time, RFC 3339 timestamps and
 * human-friendly durations ("1h30m").
 *
 * CNLab keeps every instant as int64_t milliseconds since the Unix epoch
 * (UTC) and every duration as int64_t milliseconds.  Only cnl_time_now_ms(),
 * cnl_time_mono_ns() and cnl_time_deadline() read a clock; everything else
 * is a pure function of its arguments, so schedulers and the simulator can
 * replay time exactly.
 */
#ifndef CNL_TIME_H
#define CNL_TIME_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Buffer size that always holds a cnl_time_format_rfc3339() result. */
#define CNL_TIME_RFC3339_MAX 25
/* Buffer size that always holds a cnl_duration_format() result. */
#define CNL_DURATION_MAX 32

/* cnl_time_now_ms - CLOCK_REALTIME in milliseconds since the Unix epoch. */
int64_t cnl_time_now_ms(void);

/*
 * cnl_time_mono_ns - CLOCK_MONOTONIC in nanoseconds; only differences
 * between two readings mean anything.
 */
int64_t cnl_time_mono_ns(void);

/*
 * cnl_time_deadline - @clock (CLOCK_MONOTONIC, CLOCK_REALTIME) now plus
 * @ms, normalised, into *@ret: the absolute time a timed wait
 * (pthread_cond_timedwait on a condition of that clock) ends at.
 * cnl_time_deadline_ns - the same, @ns nanoseconds after now.
 */
void cnl_time_deadline(struct timespec *ret, clockid_t clock, int64_t ms);
void cnl_time_deadline_ns(struct timespec *ret, clockid_t clock, int64_t ns);

/*
 * cnl_time_format_rfc3339 - write @ms as "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC,
 * always millisecond precision) into @buf.  Returns the string length (24),
 * -ENOSPC if @len < CNL_TIME_RFC3339_MAX, or -ERANGE if the year falls
 * outside 0000..9999.  @buf is untouched on failure.
 */
int cnl_time_format_rfc3339(int64_t ms, char *buf, size_t len);

/*
 * cnl_time_parse_rfc3339 - parse an RFC 3339 timestamp into milliseconds
 * since the epoch.  Accepted: "YYYY-MM-DDTHH:MM:SS[.f...](Z|+hh:mm|-hh:mm)"
 * ('T' and 'Z' may be lowercase; fractions of 1 to 9 digits are truncated
 * to milliseconds) and the short form "YYYY-MM-DDTHH:MM" used by the seed
 * files, which is taken as UTC when it carries no offset.  Leap seconds
 * (":60") are rejected: our clocks never produce them.  Returns 0, or
 * -CNL_EPARSE for anything else, leaving *@ret_ms untouched.
 */
int cnl_time_parse_rfc3339(const char *s, int64_t *ret_ms);

/*
 * cnl_duration_parse - parse a duration such as "90s", "30m", "4h", "2d",
 * "1h30m" or "500ms" into milliseconds.  Each component is a decimal number
 * and one of the units d, h, m, s, ms; units must appear at most once and
 * from largest to smallest.  Returns 0, or -CNL_EPARSE for empty input, a
 * sign, a missing or unknown unit, bad order, or a value that does not fit
 * in int64_t milliseconds; *@ret_ms is then untouched.
 */
int cnl_duration_parse(const char *s, int64_t *ret_ms);

/*
 * cnl_duration_format - the inverse of cnl_duration_parse(): write @ms as
 * its shortest component form ("1h30m", "500ms", "0s").  Returns the string
 * length, -EINVAL for a negative @ms, or -ENOSPC if @len is too small
 * (CNL_DURATION_MAX always suffices).  @buf is untouched on failure.
 */
int cnl_duration_format(int64_t ms, char *buf, size_t len);

#endif /* CNL_TIME_H */
