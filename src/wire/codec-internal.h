/*
 * codec-internal.h - what the codecs of src/wire share: typed readers
 * that copy a field into a struct's fixed buffer and name the field in
 * every error, and writers that leave unset fields out.
 *
 * Every reader returns 1 when the field was read, 0 when it is absent
 * and optional (the destination then holds its zero value), or
 * -CNL_EFIELD with @err set to "field \"KEY\": what is wrong".  A decoder
 * of a nested object prefixes the path with cnl_wire_nested(), so that
 * the message names the field from the top: "field \"status.node\": ...".
 */
#ifndef CNL_WIRE_CODEC_INTERNAL_H
#define CNL_WIRE_CODEC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* Return from the calling decoder when @expr fails. */
#define CNL_WIRE_TRY(expr)             \
	do {                           \
		int try_r_ = (expr);   \
		if (try_r_ < 0)        \
			return try_r_; \
	} while (0)

/* Format @err; returns -CNL_EFIELD. */
int cnl_wire_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* -CNL_EFIELD unless @o is an object whose keys are all in @fields. */
int cnl_wire_check(const json_t *o, const char *const *fields, char *err,
                   size_t errlen);

/* A string into @buf (@size bytes, NUL included; "" when absent). */
int cnl_wire_get_str(const json_t *o, const char *key, bool required, char *buf,
                     size_t size, char *err, size_t errlen);

/* A string or null (null: ""), required. */
int cnl_wire_get_str_or_null(const json_t *o, const char *key, char *buf,
                             size_t size, char *err, size_t errlen);

/* A required string that is one of @names (NULL-terminated): its index
 * in *@ret. */
int cnl_wire_get_enum(const json_t *o, const char *key,
                      const char *const *names, int *ret, char *err,
                      size_t errlen);

int cnl_wire_get_int(const json_t *o, const char *key, bool required,
                     int64_t min, int64_t max, int64_t *ret, char *err,
                     size_t errlen);
int cnl_wire_get_int32(const json_t *o, const char *key, bool required, int min,
                       int max, int *ret, char *err, size_t errlen);

/* An integer in @min..@max, or null (0), required. */
int cnl_wire_get_int_or_null(const json_t *o, const char *key, int64_t min,
                             int64_t max, int64_t *ret, char *err,
                             size_t errlen);

int cnl_wire_get_bool(const json_t *o, const char *key, bool required,
                      bool *ret, char *err, size_t errlen);

/* An RFC 3339 time or null (0) into *@ret_ms; 0 when absent and not
 * @required. */
int cnl_wire_get_time(const json_t *o, const char *key, bool required,
                      int64_t *ret_ms, char *err, size_t errlen);

/* An array of at most @max items: 1 with *@ret set, 0 absent. */
int cnl_wire_get_array(const json_t *o, const char *key, bool required,
                       size_t max, const json_t **ret, char *err,
                       size_t errlen);

/* Item @i of the array @a, which must be a string, into @buf. */
int cnl_wire_item_str(const json_t *a, size_t i, const char *key, char *buf,
                      size_t size, char *err, size_t errlen);

/* Prefix the path in @err (from a failed @r) with @outer: "field \"x\""
 * -> "field \"outer.x\"".  Returns @r. */
int cnl_wire_nested(const char *outer, int r, char *err, size_t errlen);

/* Writers.  _set_str and _set_time leave "" and 0 out; cnl_wire_time
 * is the string of @ms (null only when it cannot be written), and
 * cnl_wire_time_or_null null for 0. */
void cnl_wire_set_str(json_t *o, const char *key, const char *v);
void cnl_wire_set_time(json_t *o, const char *key, int64_t ms);
json_t *cnl_wire_time(int64_t ms);
json_t *cnl_wire_time_or_null(int64_t ms);

#endif /* CNL_WIRE_CODEC_INTERNAL_H */
