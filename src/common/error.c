/*
 * error.c - cnl_strerror() and cnl_errname() for every CNLab return code,
 * and cnl_seterr() (util.h), which writes an error message.
 *
 * The CNL_E* table is generated from the X-macro list in cnlab/errors.h, so
 * adding a code there adds its message here.  Negated errno values are
 * explained by the C library.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/util.h"

struct err_row {
	const char *name;
	const char *msg;
};

static const struct err_row cnl_rows[] = {
#define CNL_ERROR_ROW(name, msg) {#name, msg},
    CNL_ERROR_LIST(CNL_ERROR_ROW)
#undef CNL_ERROR_ROW
};

static const struct err_row *cnl_row(int code)
{
	int c = -code;

	if (c > CNL_EBASE && c < CNL_ELAST_)
		return &cnl_rows[c - CNL_EBASE - 1];
	return NULL;
}

const char *cnl_strerror(int code)
{
	const struct err_row *row;

	if (code >= 0)
		return "success";
	row = cnl_row(code);
	if (row)
		return row->msg;
	if (-code < CNL_EBASE) {
		const char *s = strerrordesc_np(-code);
		if (s)
			return s;
	}
	return "unknown error";
}

const char *cnl_errname(int code)
{
	const struct err_row *row;

	if (code >= 0)
		return "OK";
	row = cnl_row(code);
	if (row)
		return row->name;
	if (-code < CNL_EBASE) {
		const char *s = strerrorname_np(-code);
		if (s)
			return s;
	}
	return "UNKNOWN";
}

void cnl_vseterr(char *err, size_t errlen, const char *fmt, va_list ap)
{
	if (!err || errlen == 0)
		return;
	vsnprintf(err, errlen, fmt, ap);
}

void cnl_seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cnl_vseterr(err, errlen, fmt, ap);
	va_end(ap);
}
