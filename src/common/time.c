/*
 * time.c - clocks, RFC 3339 timestamps and durations (see time.h).
 *
 * Calendar arithmetic is done here on proleptic Gregorian day numbers rather
 * than through gmtime_r()/timegm(): the conversion is then a pure function,
 * independent of TZ and of the width of time_t, and the parser can check
 * every field itself instead of letting the C library normalise "Feb 30".
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cnlab/errors.h"
#include "common/time.h"

#define MS_PER_SEC  INT64_C(1000)
#define MS_PER_MIN  (60 * MS_PER_SEC)
#define MS_PER_HOUR (60 * MS_PER_MIN)
#define MS_PER_DAY  (24 * MS_PER_HOUR)

int64_t cnl_time_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void cnl_time_deadline_ns(struct timespec *ret, clockid_t clock, int64_t ns)
{
	clock_gettime(clock, ret);
	ret->tv_sec += (time_t)(ns / 1000000000);
	ret->tv_nsec += (long)(ns % 1000000000);
	if (ret->tv_nsec >= 1000000000L) {
		ret->tv_sec++;
		ret->tv_nsec -= 1000000000L;
	}
}

void cnl_time_deadline(struct timespec *ret, clockid_t clock, int64_t ms)
{
	cnl_time_deadline_ns(ret, clock, ms * 1000000);
}

int64_t cnl_time_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * Days since 1970-01-01 of a civil date, counting in 400-year eras that
 * start on March 1st so that the leap day is the last day of a year.
 */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	int64_t era, yoe, doy, doe;

	if (m <= 2)
		y--;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

/* The inverse of days_from_civil(). */
static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	int64_t era, doe, yoe, doy, mp;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

static int days_in_month(int64_t y, int m)
{
	static const int dim[12] = {31, 28, 31, 30, 31, 30,
	                            31, 31, 30, 31, 30, 31};
	bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

	return m == 2 && leap ? 29 : dim[m - 1];
}

int cnl_time_format_rfc3339(int64_t ms, char *buf, size_t len)
{
	int64_t days, rem, y;
	int m, d;

	/* Floor division, so that instants before 1970 land on the right day.
	 */
	days = ms / MS_PER_DAY;
	rem = ms % MS_PER_DAY;
	if (rem < 0) {
		rem += MS_PER_DAY;
		days--;
	}
	civil_from_days(days, &y, &m, &d);
	if (y < 0 || y > 9999)
		return -ERANGE;
	if (len < CNL_TIME_RFC3339_MAX)
		return -ENOSPC;
	return snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", (int)y,
	                m, d, (int)(rem / MS_PER_HOUR),
	                (int)(rem / MS_PER_MIN % 60),
	                (int)(rem / MS_PER_SEC % 60), (int)(rem % MS_PER_SEC));
}

/* Read exactly @n decimal digits at *@p. */
static bool read_digits(const char **p, int n, int *ret)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		char c = (*p)[i];
		if (c < '0' || c > '9')
			return false;
		v = v * 10 + (c - '0');
	}
	*p += n;
	*ret = v;
	return true;
}

static bool expect(const char **p, char c)
{
	if (**p != c)
		return false;
	(*p)++;
	return true;
}

int cnl_time_parse_rfc3339(const char *s, int64_t *ret_ms)
{
	const char *p = s;
	int y, mo, d, h, mi, sec = 0, frac_ms = 0, off_min = 0;
	bool has_sec = false;

	if (!read_digits(&p, 4, &y) || !expect(&p, '-') ||
	    !read_digits(&p, 2, &mo) || !expect(&p, '-') ||
	    !read_digits(&p, 2, &d))
		return -CNL_EPARSE;
	if (*p != 'T' && *p != 't')
		return -CNL_EPARSE;
	p++;
	if (!read_digits(&p, 2, &h) || !expect(&p, ':') ||
	    !read_digits(&p, 2, &mi))
		return -CNL_EPARSE;
	if (*p == ':') {
		p++;
		if (!read_digits(&p, 2, &sec))
			return -CNL_EPARSE;
		has_sec = true;
		if (*p == '.') {
			int ndig = 0;
			p++;
			for (; *p >= '0' && *p <= '9'; p++, ndig++) {
				if (ndig < 3)
					frac_ms = frac_ms * 10 + (*p - '0');
			}
			if (ndig < 1 || ndig > 9)
				return -CNL_EPARSE;
			for (; ndig < 3; ndig++)
				frac_ms *= 10;
		}
	}

	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int sign = *p == '-' ? -1 : 1, oh, om;
		p++;
		if (!read_digits(&p, 2, &oh) || !expect(&p, ':') ||
		    !read_digits(&p, 2, &om) || oh > 23 || om > 59)
			return -CNL_EPARSE;
		off_min = sign * (oh * 60 + om);
	} else if (has_sec) {
		/* A full timestamp without an offset is ambiguous. */
		return -CNL_EPARSE;
	}
	if (*p != '\0')
		return -CNL_EPARSE;
	if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 ||
	    mi > 59 || sec > 59)
		return -CNL_EPARSE;

	*ret_ms = days_from_civil(y, mo, d) * MS_PER_DAY + h * MS_PER_HOUR +
	          mi * MS_PER_MIN + sec * MS_PER_SEC + frac_ms -
	          off_min * MS_PER_MIN;
	return 0;
}

struct unit {
	const char *name;
	int64_t ms;
};

/* Largest first: parse enforces this order and format emits it. */
static const struct unit units[] = {
    {"d", MS_PER_DAY}, {"h", MS_PER_HOUR}, {"m", MS_PER_MIN},
    {"s", MS_PER_SEC}, {"ms", 1},
};
#define NUNITS ((int)(sizeof(units) / sizeof(units[0])))

int cnl_duration_parse(const char *s, int64_t *ret_ms)
{
	const char *p = s;
	int64_t total = 0;
	int next_unit = 0; /* index of the largest unit still allowed */

	if (*p == '\0')
		return -CNL_EPARSE;
	while (*p) {
		int64_t v = 0;
		const char *start = p;
		int u;

		for (; *p >= '0' && *p <= '9'; p++) {
			if (__builtin_mul_overflow(v, 10, &v) ||
			    __builtin_add_overflow(v, *p - '0', &v))
				return -CNL_EPARSE;
		}
		if (p == start)
			return -CNL_EPARSE;
		/* "ms" must be tried before "m". */
		if (p[0] == 'm' && p[1] == 's')
			u = 4;
		else if (p[0] == 'd')
			u = 0;
		else if (p[0] == 'h')
			u = 1;
		else if (p[0] == 'm')
			u = 2;
		else if (p[0] == 's')
			u = 3;
		else
			return -CNL_EPARSE;
		if (u < next_unit)
			return -CNL_EPARSE;
		next_unit = u + 1;
		p += strlen(units[u].name);
		if (__builtin_mul_overflow(v, units[u].ms, &v) ||
		    __builtin_add_overflow(total, v, &total))
			return -CNL_EPARSE;
	}
	*ret_ms = total;
	return 0;
}

int cnl_duration_format(int64_t ms, char *buf, size_t len)
{
	char tmp[CNL_DURATION_MAX];
	size_t n = 0;

	if (ms < 0)
		return -EINVAL;
	if (ms == 0) {
		memcpy(tmp, "0s", 3);
		n = 2;
	}
	for (int u = 0; u < NUNITS && ms > 0; u++) {
		int64_t v = ms / units[u].ms;
		if (v == 0)
			continue;
		ms -= v * units[u].ms;
		n += (size_t)snprintf(tmp + n, sizeof(tmp) - n, "%lld%s",
		                      (long long)v, units[u].name);
	}
	if (n + 1 > len)
		return -ENOSPC;
	memcpy(buf, tmp, n + 1);
	return (int)n;
}
