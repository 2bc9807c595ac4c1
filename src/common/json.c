/*
 * json.c - strict JSON parsing helpers (see json.h).
 *
 * jansson does the parsing; this file adds the policy: which inputs are
 * refused, and error text that names what was wrong.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cnlab/errors.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/util.h"

int cnl_json_check_fields(const json_t *obj, const char *const allowed[],
                          char *err, size_t errlen)
{
	const char *key;
	json_t *value;

	if (!json_is_object(obj)) {
		cnl_seterr(err, errlen, "expected a JSON object");
		return -CNL_EFIELD;
	}
	/* Cast: jansson's iteration macros take a non-const object. */
	json_object_foreach ((json_t *)obj, key, value) {
		const char *const *a;

		for (a = allowed; *a; a++) {
			if (strcmp(*a, key) == 0)
				break;
		}
		if (!*a) {
			cnl_seterr(err, errlen, "field \"%s\": unknown field",
			           key);
			return -CNL_EFIELD;
		}
	}
	return 0;
}

/*
 * The common first step of the getters: 1 and *@ret_value when the field
 * is there, 0 when it is optional and absent, or an error.
 */
static int lookup(const json_t *obj, const char *key, bool required,
                  json_t **ret_value, char *err, size_t errlen)
{
	json_t *v;

	if (!json_is_object(obj)) {
		cnl_seterr(err, errlen, "expected a JSON object");
		return -CNL_EFIELD;
	}
	v = json_object_get(obj, key);
	if (!v) {
		if (!required)
			return 0;
		cnl_seterr(err, errlen, "field \"%s\": required", key);
		return -CNL_EFIELD;
	}
	*ret_value = v;
	return 1;
}

int cnl_json_get_string(const json_t *obj, const char *key, bool required,
                        const char **ret, char *err, size_t errlen)
{
	json_t *v = NULL;
	int r = lookup(obj, key, required, &v, err, errlen);

	if (r <= 0)
		return r;
	if (!json_is_string(v)) {
		cnl_seterr(err, errlen, "field \"%s\": must be a string", key);
		return -CNL_EFIELD;
	}
	*ret = json_string_value(v);
	return 1;
}

int cnl_json_get_int(const json_t *obj, const char *key, bool required,
                     int64_t min, int64_t max, int64_t *ret, char *err,
                     size_t errlen)
{
	json_t *v = NULL;
	int64_t n;
	int r = lookup(obj, key, required, &v, err, errlen);

	if (r <= 0)
		return r;
	if (!json_is_integer(v) || (n = (int64_t)json_integer_value(v)) < min ||
	    n > max) {
		if (min == INT64_MIN && max == INT64_MAX)
			cnl_seterr(err, errlen,
			           "field \"%s\": must be an integer", key);
		else
			cnl_seterr(err, errlen,
			           "field \"%s\": must be an integer in "
			           "%lld..%lld",
			           key, (long long)min, (long long)max);
		return json_is_integer(v) ? -ERANGE : -CNL_EFIELD;
	}
	*ret = n;
	return 1;
}

int cnl_json_get_bool(const json_t *obj, const char *key, bool required,
                      bool *ret, char *err, size_t errlen)
{
	json_t *v = NULL;
	int r = lookup(obj, key, required, &v, err, errlen);

	if (r <= 0)
		return r;
	if (!json_is_boolean(v)) {
		cnl_seterr(err, errlen, "field \"%s\": must be true or false",
		           key);
		return -CNL_EFIELD;
	}
	*ret = json_is_true(v);
	return 1;
}

int cnl_json_get_double(const json_t *obj, const char *key, bool required,
                        double min, double max, double *ret, char *err,
                        size_t errlen)
{
	json_t *v = NULL;
	double d;
	int r = lookup(obj, key, required, &v, err, errlen);

	if (r <= 0)
		return r;
	if (!json_is_number(v) || (d = json_number_value(v)) < min || d > max) {
		cnl_seterr(err, errlen,
		           "field \"%s\": must be a number in %g..%g", key, min,
		           max);
		return json_is_number(v) ? -ERANGE : -CNL_EFIELD;
	}
	*ret = d;
	return 1;
}

int cnl_json_loads(const char *text, json_t **ret, char *err, size_t errlen)
{
	json_error_t e;
	json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &e);

	if (!j) {
		cnl_seterr(err, errlen, "line %d column %d: %s", e.line,
		           e.column, e.text);
		return -CNL_EPARSE;
	}
	*ret = j;
	return 0;
}

int cnl_json_load_file(const char *path, json_t **ret, char *err, size_t errlen)
{
	json_error_t e;
	json_t *j;
	FILE *f;

	/* Opened here rather than by jansson, to report the real errno. */
	f = fopen(path, "re");
	if (!f) {
		int r = -errno;
		cnl_seterr(err, errlen, "%s: %s", path, strerror(errno));
		return r;
	}
	j = json_loadf(f, JSON_REJECT_DUPLICATES, &e);
	fclose(f);
	if (!j) {
		cnl_seterr(err, errlen, "%s:%d:%d: %s", path, e.line, e.column,
		           e.text);
		return -CNL_EPARSE;
	}
	*ret = j;
	return 0;
}

char *cnl_json_dumps_compact(const json_t *json)
{
	return json_dumps(json,
	                  JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
}

void cnl_json_wipe(json_t *v)
{
	const char *k;
	json_t *x;
	size_t i;

	if (json_is_string(v))
		explicit_bzero((char *)json_string_value(v),
		               json_string_length(v));
	else if (json_is_array(v))
		json_array_foreach (v, i, x)
			cnl_json_wipe(x);
	else if (json_is_object(v))
		json_object_foreach (v, k, x)
			cnl_json_wipe(x);
}

/* @json into @fd in one write (the document is built in memory first:
 * Jansson's own json_dumpfd() makes a system call per token, some 2,600
 * for a container's config.json).  One copy, sized first (json_dumps()
 * grows a buffer through copies it frees unwiped), wiped after, since a
 * file may hold secrets.  -EINVAL when Jansson cannot encode @json. */
static int dump_fd(const json_t *json, int fd, size_t flags)
{
	size_t len = json ? json_dumpb(json, NULL, 0, flags) : 0;
	char *s;
	int r;

	if (len == 0)
		return -EINVAL;
	if (!(s = malloc(len)))
		return -ENOMEM;
	r = json_dumpb(json, s, len, flags) != len ? -EINVAL
	                                           : cnl_write_all(fd, s, len);
	explicit_bzero(s, len);
	free(s);
	return r;
}

int cnl_json_write_file(const json_t *json, const char *path, unsigned mode,
                        size_t flags)
{
	char tmp[4200];
	int fd, r;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
	          (mode_t)mode);
	if (fd < 0)
		return -errno;
	r = fchmod(fd, (mode_t)mode) < 0 ? -errno : dump_fd(json, fd, flags);
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		(void)unlink(tmp);
	return r;
}
