/*
 * format.c - pure text helpers of the cnlab CLI (see format.h).
 */
#include "cli/format.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/config.h"
#include "common/time.h"
#include "common/util.h"

#define TABLE_COLS_MAX 16

void cnl_cli_table_init(struct cnl_cli_table *t, size_t ncols)
{
	t->ncols = ncols < 1 ? 1 : CNL_MIN(ncols, TABLE_COLS_MAX);
	t->nrows = 0;
	t->cells = NULL;
}

void cnl_cli_table_add(struct cnl_cli_table *t, const char *const *cells)
{
	size_t base = t->nrows * t->ncols;

	t->cells = cnl_xrealloc(t->cells,
	                        (t->nrows + 1) * t->ncols * sizeof(*t->cells));
	for (size_t i = 0; i < t->ncols; i++)
		t->cells[base + i] = cnl_xstrdup(cells[i] ? cells[i] : "");
	t->nrows++;
}

size_t cnl_cli_utf8_width(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			n++;
	return n;
}

int cnl_cli_table_print(const struct cnl_cli_table *t, FILE *f)
{
	size_t width[TABLE_COLS_MAX] = {0};

	for (size_t r = 0; r < t->nrows; r++)
		for (size_t c = 0; c < t->ncols; c++)
			width[c] = CNL_MAX(
			    width[c],
			    cnl_cli_utf8_width(t->cells[r * t->ncols + c]));
	for (size_t r = 0; r < t->nrows; r++) {
		size_t last = t->ncols - 1;

		/* No padding after the last cell that has text. */
		while (last > 0 && !t->cells[r * t->ncols + last][0])
			last--;
		for (size_t c = 0; c <= last; c++) {
			const char *cell = t->cells[r * t->ncols + c];

			fputs(cell, f);
			if (c == last)
				break;
			for (size_t k = cnl_cli_utf8_width(cell);
			     k < width[c] + 2; k++)
				fputc(' ', f);
		}
		fputc('\n', f);
	}
	return ferror(f) ? -EIO : 0;
}

void cnl_cli_table_done(struct cnl_cli_table *t)
{
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	t->cells = NULL;
	t->nrows = 0;
}

/* Append @s to @buf at *@pos; -ENOSPC when it does not fit. */
static int put(char *buf, size_t len, size_t *pos, const char *s)
{
	size_t n = strlen(s);

	if (*pos + n + 1 > len)
		return -ENOSPC;
	memcpy(buf + *pos, s, n + 1);
	*pos += n;
	return 0;
}

int cnl_cli_format_number(double v, char *buf, size_t len)
{
	char digits[64], out[96], frac[8] = "";
	double whole = floor(fabs(v) + 0.005);
	bool neg = v < 0 && fabs(v) >= 0.005;
	size_t nd, o = 0;

	if (!isfinite(v) || fabs(v) >= 1e15)
		return -ENOSPC;
	if (fabs(fabs(v) - nearbyint(fabs(v))) >= 0.005) {
		long long cents = llround(fabs(v) * 100.0);

		whole = (double)(cents / 100);
		snprintf(frac, sizeof(frac), ".%02lld", cents % 100);
	}
	snprintf(digits, sizeof(digits), "%.0f", whole);
	nd = strlen(digits);
	if (neg)
		out[o++] = '-';
	for (size_t i = 0; i < nd; i++) {
		if (i > 0 && (nd - i) % 3 == 0)
			out[o++] = ',';
		out[o++] = digits[i];
	}
	out[o] = '\0';
	o = 0;
	if (len)
		buf[0] = '\0';
	if (put(buf, len, &o, out) < 0 || put(buf, len, &o, frac) < 0) {
		if (len)
			buf[0] = '\0';
		return -ENOSPC;
	}
	return (int)o;
}

int cnl_cli_format_quota(double used, double limit, double percent,
                         bool with_percent, char *buf, size_t len)
{
	char u[48], l[48] = "unlimited";
	int n;

	if (cnl_cli_format_number(used, u, sizeof(u)) < 0 ||
	    (limit >= 0 && cnl_cli_format_number(limit, l, sizeof(l)) < 0))
		return -ENOSPC;
	if (limit >= 0 && with_percent)
		n = snprintf(buf, len, "%s / %s (%.0f%%)", u, l, percent);
	else
		n = snprintf(buf, len, "%s / %s", u, l);
	if (n < 0 || (size_t)n >= len)
		return -ENOSPC;
	return n;
}

int cnl_cli_format_wait(int64_t ms, char *buf, size_t len)
{
	int n;

	if (ms <= 0)
		n = snprintf(buf, len, "now");
	else if (ms < 60000)
		n = snprintf(buf, len, "%llds", (long long)((ms + 999) / 1000));
	else if (ms < 2 * 3600000)
		n = snprintf(buf, len, "%lld min",
		             (long long)((ms + 59999) / 60000));
	else {
		int64_t m = (ms + 59999) / 60000;

		n = snprintf(buf, len, "%lldh%02lldm", (long long)(m / 60),
		             (long long)(m % 60));
	}
	if (n < 0 || (size_t)n >= len)
		return -ENOSPC;
	return n;
}

/* @s as bytes with cnl_cli_parse_storage()'s units (a unit required). */
static int unit_bytes(const char *s, int64_t *ret_bytes)
{
	char unit[8], full[64];
	const char *p = s;
	size_t ul;
	int n;

	while (*p >= '0' && *p <= '9')
		p++;
	if (p == s || *p == '\0')
		return -CNL_EPARSE;
	/* Kubernetes style "Gi" and "G": add the "b" cnl_size_parse wants. */
	ul = strlen(p);
	if (ul >= sizeof(unit) - 1)
		return -CNL_EPARSE;
	memcpy(unit, p, ul + 1);
	if (unit[ul - 1] == 'i' || unit[ul - 1] == 'I' ||
	    (ul == 1 && strchr("kKmMgGtT", unit[0]))) {
		unit[ul] = 'b';
		unit[ul + 1] = '\0';
	}
	n = snprintf(full, sizeof(full), "%.*s%s", (int)(p - s), s, unit);
	if (n < 0 || (size_t)n >= sizeof(full) ||
	    cnl_size_parse(full, ret_bytes) < 0)
		return -CNL_EPARSE;
	return 0;
}

int cnl_cli_parse_cpu(const char *s, int64_t *ret_milli)
{
	int64_t whole = 0, frac = 0, v;
	int digits = 0;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return -CNL_EPARSE;
	for (; *p >= '0' && *p <= '9'; p++)
		if ((whole = whole * 10 + (*p - '0')) > 10000000)
			return -CNL_EPARSE;
	if (*p == 'm' && p[1] == '\0') {
		v = whole;
	} else {
		if (*p == '.') {
			for (p++; *p >= '0' && *p <= '9'; p++)
				if (++digits > 3)
					return -CNL_EPARSE;
				else
					frac = frac * 10 + (*p - '0');
			if (digits == 0)
				return -CNL_EPARSE;
		}
		if (*p != '\0')
			return -CNL_EPARSE;
		while (digits++ < 3)
			frac *= 10;
		v = whole * 1000 + frac;
	}
	if (v < 1 || v > 1024 * 1000)
		return -CNL_EPARSE;
	*ret_milli = v;
	return 0;
}

int cnl_cli_parse_memory(const char *s, int64_t *ret_mib)
{
	const char *p = s;
	int64_t bytes, mib;

	while (*p >= '0' && *p <= '9')
		p++;
	if (p == s)
		return -CNL_EPARSE;
	if (*p == '\0') {
		if (cnl_size_parse(s, &mib) < 0)
			return -CNL_EPARSE;
	} else {
		if (unit_bytes(s, &bytes) < 0)
			return -CNL_EPARSE;
		mib = bytes / (1 << 20) + (bytes % (1 << 20) != 0);
	}
	if (mib < 1 || mib > (INT64_C(16) << 20))
		return -CNL_EPARSE;
	*ret_mib = mib;
	return 0;
}

int cnl_cli_parse_storage(const char *s, int64_t *ret_gb)
{
	const char *p = s;
	int64_t bytes;

	while (*p >= '0' && *p <= '9')
		p++;
	if (p == s)
		return -CNL_EPARSE;
	if (*p == '\0') {
		/* A bare number is GB; reuse the checked parser for range. */
		if (cnl_size_parse(s, &bytes) < 0 || bytes > 1000000000)
			return -CNL_EPARSE;
		*ret_gb = bytes;
		return 0;
	}
	if (unit_bytes(s, &bytes) < 0)
		return -CNL_EPARSE;
	*ret_gb = bytes / 1000000000 + (bytes % 1000000000 != 0);
	return 0;
}

int cnl_cli_parse_idle(const char *s, int64_t *ret_s)
{
	int64_t ms;
	const char *p = s;

	while (*p >= '0' && *p <= '9')
		p++;
	if (p != s && *p == '\0' && p - s <= 9) {
		int64_t v = 0;

		for (p = s; *p; p++)
			v = v * 10 + (*p - '0');
		*ret_s = v;
		return 0;
	}
	if (cnl_duration_parse(s, &ms) < 0)
		return -CNL_EPARSE;
	*ret_s = (ms + 999) / 1000;
	return 0;
}

int cnl_cli_shell_quote(const char *s, char *buf, size_t len)
{
	static const char safe[] = "abcdefghijklmnopqrstuvwxyz"
	                           "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                           "0123456789_./:=@%+,-";
	size_t pos = strlen(buf), start = pos;
	int r = 0;

	if (*s && strspn(s, safe) == strlen(s))
		return put(buf, len, &pos, s);
	r |= put(buf, len, &pos, "'");
	for (const char *p = s; *p && r == 0; p++) {
		char one[2] = {*p, '\0'};

		r |= put(buf, len, &pos, *p == '\'' ? "'\\''" : one);
	}
	if (r == 0)
		r = put(buf, len, &pos, "'");
	if (r < 0) {
		buf[start] = '\0';
		return -ENOSPC;
	}
	return 0;
}

int cnl_cli_script_command(const char *name, char *const *args, size_t nargs,
                           char *buf, size_t len, const char **ret_base)
{
	const char *base = strrchr(name, '/');
	size_t bl, pos = 0;
	int r;

	base = base ? base + 1 : name;
	bl = strlen(base);
	if (bl == 0 || strcmp(base, ".") == 0 || strcmp(base, "..") == 0 ||
	    base[0] == '-')
		return -EINVAL;
	if (len == 0)
		return -ENOSPC;
	buf[0] = '\0';
	r = put(buf, len, &pos,
	        bl > 3 && strcmp(base + bl - 3, ".py") == 0 ? "python3 "
	                                                    : "sh ");
	if (r == 0)
		r = cnl_cli_shell_quote(base, buf, len);
	for (size_t i = 0; i < nargs && r == 0; i++) {
		pos = strlen(buf);
		r = put(buf, len, &pos, " ");
		if (r == 0)
			r = cnl_cli_shell_quote(args[i], buf, len);
	}
	if (r < 0) {
		buf[0] = '\0';
		return -ENOSPC;
	}
	*ret_base = base;
	return 0;
}

int cnl_cli_plain_command(char *const *argv, size_t n, char *buf, size_t len)
{
	size_t pos;
	int r = 0;

	if (len == 0)
		return -ENOSPC;
	buf[0] = '\0';
	for (size_t i = 0; i < n && r == 0; i++) {
		pos = strlen(buf);
		if (i > 0)
			r = put(buf, len, &pos, " ");
		if (r == 0)
			r = cnl_cli_shell_quote(argv[i], buf, len);
	}
	if (r < 0) {
		buf[0] = '\0';
		return -ENOSPC;
	}
	return 0;
}

bool cnl_cli_safe_name(const char *name)
{
	if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return false;
	for (const char *p = name; *p; p++)
		if (*p == '/' || (unsigned char)*p < 0x20 || *p == 0x7f)
			return false;
	return true;
}
