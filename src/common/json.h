/*
 * json.h - strict parsing of JSON requests and files on top of jansson.
 *
 * Every request body and JSON file CNLab reads goes through these helpers so
 * that the rules are the same everywhere: unknown fields are errors, types
 * are never coerced (5.0 is not an integer, "true" is not a boolean, null is
 * not a missing field), duplicate keys are rejected, and every error message
 * names the field, or the line and column, that caused it.  Messages go to
 * a caller buffer (@err, @errlen; NULL/0 to ignore) so the REST layer can
 * return them to the client as they are.
 */
#ifndef CNL_JSON_H
#define CNL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/*
 * cnl_json_check_fields - check that every key of the object @obj is in
 * @allowed, a NULL-terminated list.  Returns 0, or -CNL_EFIELD naming the
 * first unknown key in document order (or saying that @obj is not an
 * object).
 */
int cnl_json_check_fields(const json_t *obj, const char *const allowed[],
                          char *err, size_t errlen);

/*
 * cnl_json_get_string, _int, _bool, _double - read the field @key of the
 * object @obj.  Each returns 1 when the field was found and stored in
 * *@ret; 0 when it is absent and not @required (*@ret is then untouched, so
 * preset it to the default); -CNL_EFIELD when it is absent but @required,
 * has the wrong type, or @obj is not an object; -ERANGE when a number lies
 * outside @min..@max.  On failure *@ret is untouched and @err names the
 * field, e.g. field "blocks": must be an integer in 1..100.
 *
 * The string returned by cnl_json_get_string() belongs to @obj.
 */
int cnl_json_get_string(const json_t *obj, const char *key, bool required,
                        const char **ret, char *err, size_t errlen);

/* See cnl_json_get_string().  Only JSON integers are accepted. */
int cnl_json_get_int(const json_t *obj, const char *key, bool required,
                     int64_t min, int64_t max, int64_t *ret, char *err,
                     size_t errlen);

/* See cnl_json_get_string().  Only true and false are accepted. */
int cnl_json_get_bool(const json_t *obj, const char *key, bool required,
                      bool *ret, char *err, size_t errlen);

/* See cnl_json_get_string().  JSON integers and reals are accepted. */
int cnl_json_get_double(const json_t *obj, const char *key, bool required,
                        double min, double max, double *ret, char *err,
                        size_t errlen);

/*
 * cnl_json_loads - parse @text, which must be one JSON object or array with
 * no duplicate keys.  On success stores a new reference in *@ret and
 * returns 0; otherwise returns -CNL_EPARSE with "line L column C: reason"
 * in @err.
 */
int cnl_json_loads(const char *text, json_t **ret, char *err, size_t errlen);

/*
 * cnl_json_load_file - cnl_json_loads() for the file at @path.  Errors read
 * "PATH:L:C: reason" (-CNL_EPARSE) or "PATH: strerror" (negative errno when
 * the file cannot be opened).
 */
int cnl_json_load_file(const char *path, json_t **ret, char *err,
                       size_t errlen);

/*
 * cnl_json_dumps_compact - @json as compact text with object keys sorted,
 * so equal documents give equal strings.  Returns a string to free() with
 * free(), or NULL on out-of-memory.
 */
char *cnl_json_dumps_compact(const json_t *json);

/*
 * cnl_json_wipe - overwrite with zeros every string in @v, through its
 * arrays and objects (their keys excepted), before it is freed: the
 * copies of secret values a request or reply held.  NULL is allowed.
 */
void cnl_json_wipe(json_t *v);

/*
 * cnl_json_write_file - @json (@flags as for json_dumpf) into @path, whole
 * or not at all: written to "@path.tmp" with @mode (whatever the umask),
 * no link followed, then renamed over @path.  0 or a negative errno; the
 * temporary file does not stay behind.
 */
int cnl_json_write_file(const json_t *json, const char *path, unsigned mode,
                        size_t flags);

#endif /* CNL_JSON_H */
