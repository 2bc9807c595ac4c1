/*
 * config.c - the table-driven configuration loader (see config.h).
 *
 * Every way of setting values works in two phases.  Values are first
 * parsed into an array of slots, one per table row, that lives beside the
 * object; only when the whole input has parsed does commit() copy the slots
 * into the object (freeing strings they replace).  On any error the slots
 * are thrown away and the object has not been touched.  This is what lets
 * a daemon re-read its config file and keep running on the old values when
 * the new file is wrong.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cnlab/errors.h"
#include "common/config.h"
#include "common/time.h"
#include "common/util.h"

/* A parsed value waiting to be committed. */
struct slot {
	bool set;
	int line;    /* where a file set it, to report duplicates */
	int64_t num; /* INT, DURATION, SIZE; BOOL as 0/1 */
	char *str;   /* STRING, owned until committed */
};

int cnl_size_parse(const char *s, int64_t *ret_bytes)
{
	static const struct {
		const char *name;
		int64_t mult;
	} units[] = {
	    {"", 1},
	    {"b", 1},
	    {"kb", INT64_C(1000)},
	    {"mb", INT64_C(1000000)},
	    {"gb", INT64_C(1000000000)},
	    {"tb", INT64_C(1000000000000)},
	    {"kib", INT64_C(1) << 10},
	    {"mib", INT64_C(1) << 20},
	    {"gib", INT64_C(1) << 30},
	    {"tib", INT64_C(1) << 40},
	};
	const char *p = s;
	int64_t v = 0;

	if (*p < '0' || *p > '9')
		return -CNL_EPARSE;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, *p - '0', &v))
			return -CNL_EPARSE;
	}
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcasecmp(p, units[i].name) == 0) {
			if (__builtin_mul_overflow(v, units[i].mult, &v))
				return -CNL_EPARSE;
			*ret_bytes = v;
			return 0;
		}
	}
	return -CNL_EPARSE;
}

static int parse_int(const char *s, int64_t *ret)
{
	char *end;
	long long v;

	if (!(*s == '-' || (*s >= '0' && *s <= '9')))
		return -CNL_ECONFIG;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (end == s || *end != '\0' || errno == ERANGE)
		return -CNL_ECONFIG;
	*ret = v;
	return 0;
}

static int parse_bool(const char *s, int64_t *ret)
{
	static const char *const yes[] = {"true", "yes", "on", "1"};
	static const char *const no[] = {"false", "no", "off", "0"};

	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*ret = 1;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*ret = 0;
			return 0;
		}
	}
	return -CNL_ECONFIG;
}

static const char *type_name(enum cnl_config_type t)
{
	switch (t) {
	case CNL_CONFIG_STRING:
		return "string";
	case CNL_CONFIG_INT:
		return "integer";
	case CNL_CONFIG_BOOL:
		return "boolean";
	case CNL_CONFIG_DURATION:
		return "duration";
	case CNL_CONFIG_SIZE:
		return "size";
	}
	return "unknown";
}

/* Write a bound in the units a user would type. */
static void format_num(const struct cnl_config_def *d, int64_t v, char *buf,
                       size_t len)
{
	if (d->type == CNL_CONFIG_DURATION && v >= 0 &&
	    cnl_duration_format(v, buf, len) >= 0)
		return;
	snprintf(buf, len, "%lld%s", (long long)v,
	         d->type == CNL_CONFIG_SIZE ? "b" : "");
}

/*
 * Parse @value for the row @d into @s.  On failure the problem is written
 * to @err (without the key; callers add where it came from).
 */
static int stage(const struct cnl_config_def *d, const char *value,
                 struct slot *s, char *err, size_t errlen)
{
	int64_t v = 0;
	int r = 0;

	switch (d->type) {
	case CNL_CONFIG_STRING: {
		char *copy = strdup(value);
		if (!copy) {
			cnl_seterr(err, errlen, "out of memory");
			return -ENOMEM;
		}
		free(s->str);
		s->str = copy;
		s->set = true;
		return 0;
	}
	case CNL_CONFIG_INT:
		r = parse_int(value, &v);
		break;
	case CNL_CONFIG_BOOL:
		r = parse_bool(value, &v);
		break;
	case CNL_CONFIG_DURATION:
		r = cnl_duration_parse(value, &v) < 0 ? -CNL_ECONFIG : 0;
		break;
	case CNL_CONFIG_SIZE:
		r = cnl_size_parse(value, &v) < 0 ? -CNL_ECONFIG : 0;
		break;
	}
	if (r == 0 && d->min < d->max && (v < d->min || v > d->max))
		r = -ERANGE;
	if (r < 0) {
		static const char *const want[] = {
		    [CNL_CONFIG_STRING] = "a string",
		    [CNL_CONFIG_INT] = "an integer",
		    [CNL_CONFIG_BOOL] = "true or false",
		    [CNL_CONFIG_DURATION] = "a duration",
		    [CNL_CONFIG_SIZE] = "a size",
		};
		static const char *const example[] = {
		    [CNL_CONFIG_STRING] = "",
		    [CNL_CONFIG_INT] = "",
		    [CNL_CONFIG_BOOL] = " (or yes/no, on/off, 1/0)",
		    [CNL_CONFIG_DURATION] = " like 90s or 1h30m",
		    [CNL_CONFIG_SIZE] = " like 512mib or 50gb",
		};
		char lo[CNL_DURATION_MAX], hi[CNL_DURATION_MAX];

		/* A range, when there is one, says more than an example. */
		if (d->min < d->max && d->type != CNL_CONFIG_BOOL) {
			format_num(d, d->min, lo, sizeof(lo));
			format_num(d, d->max, hi, sizeof(hi));
			cnl_seterr(err, errlen,
			           "must be %s in %s..%s, not \"%s\"",
			           want[d->type], lo, hi, value);
		} else {
			cnl_seterr(err, errlen, "must be %s%s, not \"%s\"",
			           want[d->type], example[d->type], value);
		}
		return r;
	}
	s->num = v;
	s->set = true;
	return 0;
}

static void *field(const struct cnl_config_def *d, void *obj)
{
	return (char *)obj + d->offset;
}

/* Copy the set slots into @obj; with @free_old, replaced strings are freed. */
static void commit(const struct cnl_config_def *table, size_t n, void *obj,
                   struct slot *slots, bool free_old)
{
	for (size_t i = 0; i < n; i++) {
		const struct cnl_config_def *d = &table[i];
		void *f = field(d, obj);

		if (!slots[i].set)
			continue;
		switch (d->type) {
		case CNL_CONFIG_STRING:
			if (free_old)
				free(*(char **)f);
			*(char **)f = slots[i].str;
			slots[i].str = NULL;
			break;
		case CNL_CONFIG_BOOL:
			*(bool *)f = slots[i].num != 0;
			break;
		case CNL_CONFIG_INT:
		case CNL_CONFIG_DURATION:
		case CNL_CONFIG_SIZE:
			*(int64_t *)f = slots[i].num;
			break;
		}
	}
}

static void slots_free(struct slot *slots, size_t n)
{
	if (!slots)
		return;
	for (size_t i = 0; i < n; i++)
		free(slots[i].str);
	free(slots);
}

const struct cnl_config_def *cnl_config_find(const struct cnl_config_def *table,
                                             size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(table[i].name, name) == 0)
			return &table[i];
	}
	return NULL;
}

int cnl_config_defaults(const struct cnl_config_def *table, size_t n, void *obj)
{
	struct slot *slots = calloc(n ? n : 1, sizeof(*slots));
	int r = 0;

	if (!slots)
		return -ENOMEM;
	for (size_t i = 0; i < n && r == 0; i++) {
		if (table[i].default_value)
			r = stage(&table[i], table[i].default_value, &slots[i],
			          NULL, 0);
		else
			slots[i].set = true; /* NULL string, 0 or false */
	}
	if (r == 0)
		commit(table, n, obj, slots, false);
	slots_free(slots, n);
	return r == -ERANGE ? -CNL_ECONFIG : r;
}

int cnl_config_set(const struct cnl_config_def *table, size_t n, void *obj,
                   const char *name, const char *value, char *err,
                   size_t errlen)
{
	const struct cnl_config_def *d = cnl_config_find(table, n, name);
	struct slot s = {0};
	char problem[256];
	int r;

	if (!d) {
		cnl_seterr(err, errlen, "unknown key \"%s\"", name);
		return -CNL_EFIELD;
	}
	r = stage(d, value, &s, problem, sizeof(problem));
	if (r < 0) {
		cnl_seterr(err, errlen, "key \"%s\": %s", name, problem);
		return r;
	}
	commit(d, 1, obj, &s, true);
	return 0;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/*
 * Split one line into key and value, in place.  Returns 1 with *@ret_key
 * and *@ret_value set (the value may point into @qbuf, which receives an
 * unescaped quoted value and is at least as long as @line), 0 for a blank
 * or comment line, or -CNL_EPARSE with @err describing the problem.
 */
static int split_line(char *line, char *qbuf, char **ret_key, char **ret_value,
                      char *err, size_t errlen)
{
	char *p = line, *key, *end;

	while (is_blank(*p))
		p++;
	if (*p == '\0' || *p == '#')
		return 0;
	key = p;
	while (*p && *p != '=' && !is_blank(*p))
		p++;
	end = p;
	while (is_blank(*p))
		p++;
	if (*p != '=' || end == key) {
		cnl_seterr(err, errlen, "expected \"key = value\"");
		return -CNL_EPARSE;
	}
	*end = '\0';
	p++;
	while (is_blank(*p))
		p++;

	if (*p == '"') {
		char *q = qbuf;

		for (p++; *p != '"'; p++) {
			if (*p == '\0') {
				cnl_seterr(err, errlen, "unterminated quote");
				return -CNL_EPARSE;
			}
			if (*p == '\\') {
				p++;
				switch (*p) {
				case '\0':
					cnl_seterr(err, errlen,
					           "unterminated quote");
					return -CNL_EPARSE;
				case '"':
				case '\\':
					*q++ = *p;
					continue;
				case 'n':
					*q++ = '\n';
					continue;
				case 't':
					*q++ = '\t';
					continue;
				default:
					cnl_seterr(
					    err, errlen,
					    "unknown escape in quoted value");
					return -CNL_EPARSE;
				}
			}
			*q++ = *p;
		}
		*q = '\0';
		for (p++; is_blank(*p); p++)
			;
		if (*p != '\0' && *p != '#') {
			cnl_seterr(err, errlen, "text after closing quote");
			return -CNL_EPARSE;
		}
		*ret_value = qbuf;
	} else {
		size_t len = strlen(p);
		while (len > 0 && is_blank(p[len - 1]))
			p[--len] = '\0';
		*ret_value = p;
	}
	*ret_key = key;
	return 1;
}

int cnl_config_load_file(const struct cnl_config_def *table, size_t n,
                         void *obj, const char *path, char *err, size_t errlen)
{
	struct slot *slots = NULL;
	char *line = NULL, *qbuf = NULL, problem[256];
	size_t cap = 0;
	ssize_t len;
	int lineno = 0, r = 0;
	FILE *f;

	f = fopen(path, "re");
	if (!f) {
		r = -errno;
		cnl_seterr(err, errlen, "%s: %s", path, strerror(errno));
		return r;
	}
	slots = calloc(n ? n : 1, sizeof(*slots));
	if (!slots) {
		r = -ENOMEM;
		cnl_seterr(err, errlen, "%s: out of memory", path);
		goto out;
	}

	while ((len = getline(&line, &cap, f)) >= 0) {
		const struct cnl_config_def *d;
		char *key, *value, *nq;
		size_t idx;

		lineno++;
		if (len > 0 && line[len - 1] == '\n')
			line[--len] = '\0';
		if (len > 0 && line[len - 1] == '\r')
			line[--len] = '\0';
		if (strlen(line) != (size_t)len) {
			r = -CNL_EPARSE;
			cnl_seterr(err, errlen, "%s:%d: NUL byte in line", path,
			           lineno);
			goto out;
		}
		nq = realloc(qbuf, (size_t)len + 1);
		if (!nq) {
			r = -ENOMEM;
			cnl_seterr(err, errlen, "%s: out of memory", path);
			goto out;
		}
		qbuf = nq;

		r = split_line(line, qbuf, &key, &value, problem,
		               sizeof(problem));
		if (r == 0)
			continue;
		if (r < 0) {
			cnl_seterr(err, errlen, "%s:%d: %s", path, lineno,
			           problem);
			goto out;
		}
		d = cnl_config_find(table, n, key);
		if (!d) {
			r = -CNL_EFIELD;
			cnl_seterr(err, errlen, "%s:%d: unknown key \"%s\"",
			           path, lineno, key);
			goto out;
		}
		idx = (size_t)(d - table);
		if (slots[idx].set) {
			r = -CNL_EDUP;
			cnl_seterr(err, errlen,
			           "%s:%d: key \"%s\" already set on line %d",
			           path, lineno, key, slots[idx].line);
			goto out;
		}
		r = stage(d, value, &slots[idx], problem, sizeof(problem));
		if (r < 0) {
			cnl_seterr(err, errlen, "%s:%d: key \"%s\": %s", path,
			           lineno, key, problem);
			goto out;
		}
		slots[idx].line = lineno;
	}
	r = 0;
	if (ferror(f)) {
		r = -EIO;
		cnl_seterr(err, errlen, "%s: read error", path);
		goto out;
	}
	commit(table, n, obj, slots, true);
out:
	free(line);
	free(qbuf);
	slots_free(slots, n);
	fclose(f);
	return r;
}

/* Whether @name is @key in upper case ('-' and '.' read as '_'). */
static bool env_name_matches(const char *name, size_t len, const char *key)
{
	size_t i;

	for (i = 0; i < len && key[i]; i++) {
		char k = key[i];
		if (k == '-' || k == '.')
			k = '_';
		if (name[i] != toupper((unsigned char)k))
			return false;
	}
	return i == len && key[i] == '\0';
}

int cnl_config_load_env(const struct cnl_config_def *table, size_t n, void *obj,
                        const char *prefix, char **envp, char *err,
                        size_t errlen)
{
	size_t plen = strlen(prefix);
	struct slot *slots;
	char problem[256];
	int r = 0;

	slots = calloc(n ? n : 1, sizeof(*slots));
	if (!slots) {
		cnl_seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (char **e = envp; e && *e && r == 0; e++) {
		const char *name, *eq;

		if (strncmp(*e, prefix, plen) != 0)
			continue;
		name = *e + plen;
		eq = strchr(name, '=');
		if (!eq)
			continue;
		for (size_t i = 0; i < n; i++) {
			if (!env_name_matches(name, (size_t)(eq - name),
			                      table[i].name))
				continue;
			r = stage(&table[i], eq + 1, &slots[i], problem,
			          sizeof(problem));
			if (r < 0)
				cnl_seterr(err, errlen, "%.*s: key \"%s\": %s",
				           (int)(eq - *e), *e, table[i].name,
				           problem);
			break;
		}
	}
	if (r == 0)
		commit(table, n, obj, slots, true);
	slots_free(slots, n);
	return r;
}

/* Whether flag text @arg (@len bytes) names @key, '-' and '_' alike. */
static bool flag_matches(const char *arg, size_t len, const char *key)
{
	size_t i;

	for (i = 0; i < len && key[i]; i++) {
		char a = arg[i] == '-' ? '_' : arg[i];
		char k = key[i] == '-' ? '_' : key[i];

		if (a != k)
			return false;
	}
	return i == len && key[i] == '\0';
}

int cnl_config_load_args(const struct cnl_config_def *table, size_t n,
                         void *obj, int argc, char *const *argv,
                         struct cnl_config_flag *own, char *err, size_t errlen)
{
	struct slot *slots;
	char problem[256];
	int r = 0;

	slots = calloc(n ? n : 1, sizeof(*slots));
	if (!slots) {
		cnl_seterr(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (int i = 1; i < argc && r == 0; i++) {
		const char *arg = argv[i], *name, *eq, *value = NULL;
		struct cnl_config_flag *o = NULL;
		size_t len;

		if (arg[0] != '-' || arg[1] == '\0' ||
		    (arg[1] == '-' && arg[2] == '\0')) {
			r = -CNL_EFIELD;
			cnl_seterr(err, errlen,
			           "unexpected argument %s (want --KEY VALUE)",
			           arg);
			break;
		}
		/* "-h": a one-letter own flag; "--name" or "--name=value". */
		name = arg + (arg[1] == '-' ? 2 : 1);
		eq = arg[1] == '-' ? strchr(name, '=') : NULL;
		len = eq ? (size_t)(eq - name) : strlen(name);
		for (size_t k = 0; own && own[k].name; k++)
			if ((arg[1] == '-' || len == 1) &&
			    flag_matches(name, len, own[k].name))
				o = &own[k];
		if (o && !o->has_value) {
			if (eq) {
				r = -CNL_EPARSE;
				cnl_seterr(err, errlen,
				           "flag --%s takes no value", o->name);
				break;
			}
			o->value = "";
			continue;
		}
		const struct cnl_config_def *d = NULL;

		for (size_t k = 0; !o && arg[1] == '-' && k < n && !d; k++)
			if (flag_matches(name, len, table[k].name))
				d = &table[k];
		if (!o && !d) {
			r = -CNL_EFIELD;
			cnl_seterr(err, errlen, "unknown flag %.*s",
			           (int)(name - arg + len), arg);
			break;
		}
		if (eq) {
			value = eq + 1;
		} else if (i + 1 < argc) {
			value = argv[++i];
		} else {
			r = -CNL_EPARSE;
			cnl_seterr(err, errlen, "flag %s needs a value", arg);
			break;
		}
		if (o) {
			o->value = value;
			continue;
		}
		r = stage(d, value, &slots[d - table], problem,
		          sizeof(problem));
		if (r < 0)
			cnl_seterr(err, errlen, "flag --%.*s: %s", (int)len,
			           name, problem);
	}
	if (r == 0 && obj)
		commit(table, n, obj, slots, true);
	slots_free(slots, n);
	return r;
}

json_t *cnl_config_to_json(const struct cnl_config_def *table, size_t n,
                           const void *obj)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		const struct cnl_config_def *d = &table[i];
		const void *f = (const char *)obj + d->offset;
		json_t *v = NULL;

		switch (d->type) {
		case CNL_CONFIG_STRING:
			v = *(char *const *)f ? json_string(*(char *const *)f)
			                      : json_null();
			break;
		case CNL_CONFIG_BOOL:
			v = json_boolean(*(const bool *)f);
			break;
		case CNL_CONFIG_INT:
		case CNL_CONFIG_DURATION:
		case CNL_CONFIG_SIZE:
			v = json_integer(*(const int64_t *)f);
			break;
		}
		if (json_object_set_new(o, d->name, v) < 0) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

/* Write @s with '|' escaped, so it cannot end a Markdown table cell. */
static void md_cell(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '|')
			fputc('\\', f);
		fputc(*s == '\n' ? ' ' : *s, f);
	}
}

int cnl_config_doc_markdown(const struct cnl_config_def *table, size_t n,
                            FILE *f)
{
	fputs("| Key | Type | Default | Range | Description |\n"
	      "|-----|------|---------|-------|-------------|\n",
	      f);
	for (size_t i = 0; i < n; i++) {
		const struct cnl_config_def *d = &table[i];

		fprintf(f, "| `%s` | %s | ", d->name, type_name(d->type));
		if (d->default_value) {
			fputc('`', f);
			md_cell(f, d->default_value);
			fputc('`', f);
		} else {
			fputs("(none)", f);
		}
		fputs(" | ", f);
		if (d->min < d->max && d->type != CNL_CONFIG_STRING &&
		    d->type != CNL_CONFIG_BOOL) {
			char lo[CNL_DURATION_MAX], hi[CNL_DURATION_MAX];
			format_num(d, d->min, lo, sizeof(lo));
			format_num(d, d->max, hi, sizeof(hi));
			fprintf(f, "%s..%s", lo, hi);
		}
		fputs(" | ", f);
		md_cell(f, d->help ? d->help : "");
		fputs(" |\n", f);
	}
	return ferror(f) ? -EIO : 0;
}

void cnl_config_done(const struct cnl_config_def *table, size_t n, void *obj)
{
	for (size_t i = 0; i < n; i++) {
		if (table[i].type == CNL_CONFIG_STRING) {
			char **p = field(&table[i], obj);
			free(*p);
			*p = NULL;
		}
	}
}
