/*
 * codec.c - the readers and writers the codecs of src/wire share (see
 * codec-internal.h).  The readers sit on common/json.h's strict getters
 * and add what a typed struct needs: copying into a fixed buffer with a
 * length check, enumerations, times, nullable fields, and the path of a
 * nested field in the error.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cnlab/errors.h"
#include "common/json.h"
#include "common/time.h"
#include "common/util.h"
#include "wire/codec-internal.h"

int cnl_wire_fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cnl_vseterr(err, errlen, fmt, ap);
	va_end(ap);
	return -CNL_EFIELD;
}

int cnl_wire_check(const json_t *o, const char *const *fields, char *err,
                   size_t errlen)
{
	if (!json_is_object(o))
		return cnl_wire_fail(err, errlen, "must be an object");
	return cnl_json_check_fields(o, fields, err, errlen) < 0 ? -CNL_EFIELD
	                                                         : 0;
}

/* Copy @s into @buf or fail naming @key. */
static int copy(const char *key, const char *s, char *buf, size_t size,
                char *err, size_t errlen)
{
	size_t n = strlen(s);

	if (n >= size)
		return cnl_wire_fail(err, errlen,
		                     "field \"%s\": longer than %zu bytes", key,
		                     size - 1);
	memcpy(buf, s, n + 1);
	return 1;
}

int cnl_wire_get_str(const json_t *o, const char *key, bool required, char *buf,
                     size_t size, char *err, size_t errlen)
{
	const char *s = NULL;
	int r = cnl_json_get_string(o, key, required, &s, err, errlen);

	buf[0] = '\0';
	if (r <= 0)
		return r < 0 ? -CNL_EFIELD : 0;
	return copy(key, s, buf, size, err, errlen);
}

int cnl_wire_get_str_or_null(const json_t *o, const char *key, char *buf,
                             size_t size, char *err, size_t errlen)
{
	const json_t *v = json_object_get(o, key);

	buf[0] = '\0';
	if (!v)
		return cnl_wire_fail(err, errlen, "field \"%s\": required",
		                     key);
	if (json_is_null(v))
		return 1;
	if (!json_is_string(v))
		return cnl_wire_fail(
		    err, errlen, "field \"%s\": must be a string or null", key);
	return copy(key, json_string_value(v), buf, size, err, errlen);
}

int cnl_wire_get_enum(const json_t *o, const char *key,
                      const char *const *names, int *ret, char *err,
                      size_t errlen)
{
	const char *s = NULL;

	if (cnl_json_get_string(o, key, true, &s, err, errlen) < 0)
		return -CNL_EFIELD;
	for (int i = 0; names[i]; i++)
		if (strcmp(s, names[i]) == 0) {
			*ret = i;
			return 1;
		}
	return cnl_wire_fail(err, errlen,
	                     "field \"%s\": unknown value \"%.40s\"", key, s);
}

int cnl_wire_get_int(const json_t *o, const char *key, bool required,
                     int64_t min, int64_t max, int64_t *ret, char *err,
                     size_t errlen)
{
	int r = cnl_json_get_int(o, key, required, min, max, ret, err, errlen);

	return r < 0 ? -CNL_EFIELD : r;
}

int cnl_wire_get_int32(const json_t *o, const char *key, bool required, int min,
                       int max, int *ret, char *err, size_t errlen)
{
	int64_t v = *ret;
	int r = cnl_wire_get_int(o, key, required, min, max, &v, err, errlen);

	if (r > 0)
		*ret = (int)v;
	return r;
}

int cnl_wire_get_int_or_null(const json_t *o, const char *key, int64_t min,
                             int64_t max, int64_t *ret, char *err,
                             size_t errlen)
{
	const json_t *v = json_object_get(o, key);

	*ret = 0;
	if (v && json_is_null(v))
		return 1;
	if (v && !json_is_integer(v))
		return cnl_wire_fail(err, errlen,
		                     "field \"%s\": must be an integer or null",
		                     key);
	return cnl_wire_get_int(o, key, true, min, max, ret, err, errlen);
}

int cnl_wire_get_bool(const json_t *o, const char *key, bool required,
                      bool *ret, char *err, size_t errlen)
{
	int r = cnl_json_get_bool(o, key, required, ret, err, errlen);

	return r < 0 ? -CNL_EFIELD : r;
}

int cnl_wire_get_time(const json_t *o, const char *key, bool required,
                      int64_t *ret_ms, char *err, size_t errlen)
{
	const json_t *v = json_object_get(o, key);

	*ret_ms = 0;
	if (!v) {
		if (required)
			return cnl_wire_fail(err, errlen,
			                     "field \"%s\": required", key);
		return 0;
	}
	if (json_is_null(v))
		return 1;
	if (!json_is_string(v) ||
	    cnl_time_parse_rfc3339(json_string_value(v), ret_ms) < 0)
		return cnl_wire_fail(
		    err, errlen,
		    "field \"%s\": must be an RFC 3339 time or null", key);
	return 1;
}

int cnl_wire_get_array(const json_t *o, const char *key, bool required,
                       size_t max, const json_t **ret, char *err, size_t errlen)
{
	const json_t *v = json_object_get(o, key);

	if (!v) {
		if (required)
			return cnl_wire_fail(err, errlen,
			                     "field \"%s\": required", key);
		return 0;
	}
	if (!json_is_array(v))
		return cnl_wire_fail(err, errlen,
		                     "field \"%s\": must be an array", key);
	if (json_array_size(v) > max)
		return cnl_wire_fail(
		    err, errlen, "field \"%s\": at most %zu items", key, max);
	*ret = v;
	return 1;
}

int cnl_wire_item_str(const json_t *a, size_t i, const char *key, char *buf,
                      size_t size, char *err, size_t errlen)
{
	const char *s = json_string_value(json_array_get(a, i));

	if (!s)
		return cnl_wire_fail(
		    err, errlen, "field \"%s[%zu]\": must be a string", key, i);
	if (strlen(s) >= size)
		return cnl_wire_fail(err, errlen,
		                     "field \"%s[%zu]\": longer than %zu bytes",
		                     key, i, size - 1);
	memcpy(buf, s, strlen(s) + 1);
	return 0;
}

int cnl_wire_nested(const char *outer, int r, char *err, size_t errlen)
{
	char tmp[512];

	if (r >= 0 || !err || !errlen)
		return r;
	if (strncmp(err, "field \"", 7) == 0)
		snprintf(tmp, sizeof(tmp), "field \"%s.%s", outer, err + 7);
	else
		snprintf(tmp, sizeof(tmp), "field \"%s\": %s", outer, err);
	snprintf(err, errlen, "%s", tmp);
	return r;
}

void cnl_wire_set_str(json_t *o, const char *key, const char *v)
{
	if (v[0])
		json_object_set_new(o, key, json_string(v));
}

void cnl_wire_set_time(json_t *o, const char *key, int64_t ms)
{
	char buf[CNL_TIME_RFC3339_MAX];

	if (ms > 0 && cnl_time_format_rfc3339(ms, buf, sizeof(buf)) >= 0)
		json_object_set_new(o, key, json_string(buf));
}

json_t *cnl_wire_time(int64_t ms)
{
	char buf[CNL_TIME_RFC3339_MAX];

	if (cnl_time_format_rfc3339(ms, buf, sizeof(buf)) < 0)
		return json_null();
	return json_string(buf);
}

json_t *cnl_wire_time_or_null(int64_t ms)
{
	return ms > 0 ? cnl_wire_time(ms) : json_null();
}
