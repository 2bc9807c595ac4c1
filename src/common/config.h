/*
 * config.h - configuration driven by one declarative table (after Redis'
 * static_configs[]).
 *
 * A program describes its settings once, as an array of struct
 * cnl_config_def rows that point into its own config struct by offset.
 * The same table then supplies defaults, parses the config file and the
 * environment, validates ranges, serves GET /v1/config as JSON and writes
 * the reference documentation, so these can never disagree.
 *
 * Field storage by type:
 *   CNL_CONFIG_STRING    char *   owned; freed by cnl_config_done()
 *   CNL_CONFIG_INT       int64_t
 *   CNL_CONFIG_BOOL      bool     true/false, yes/no, on/off, 1/0
 *   CNL_CONFIG_DURATION  int64_t  milliseconds; "90s", "1h30m" (time.h)
 *   CNL_CONFIG_SIZE      int64_t  bytes; "50gb", "512mib" (cnl_size_parse)
 *
 * Every loader is all-or-nothing: values are parsed into a staging area
 * and copied into the object only when the whole input is valid, so a bad
 * config file or variable leaves the running configuration exactly as it
 * was.  Error messages name the key and the problem, and where the value
 * came from (file:line or variable).
 */
#ifndef CNL_CONFIG_H
#define CNL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

enum cnl_config_type {
	CNL_CONFIG_STRING,
	CNL_CONFIG_INT,
	CNL_CONFIG_BOOL,
	CNL_CONFIG_DURATION,
	CNL_CONFIG_SIZE,
};

/* One setting. */
struct cnl_config_def {
	const char *name;          /* key in files; [a-z0-9_] by convention */
	enum cnl_config_type type; /* decides the field's C type (above) */
	size_t offset;             /* offsetof() the field in the object */
	const char *default_value; /* as it would be written in a file; NULL
	                            * means NULL for STRING, 0 or false else */
	int64_t min, max; /* inclusive bounds for INT, DURATION and SIZE,
	                   * enforced only when min < max */
	const char *help; /* one sentence for the documentation */
};

/*
 * cnl_size_parse - parse a byte size: a decimal number with an optional
 * unit, b, kb, mb, gb, tb (powers of 1000) or kib, mib, gib, tib (powers of
 * 1024), in any case.  Returns 0, or -CNL_EPARSE for empty input, a sign,
 * an unknown unit or a value that overflows int64_t; *@ret_bytes is then
 * untouched.
 */
int cnl_size_parse(const char *s, int64_t *ret_bytes);

/* cnl_config_find - the row named @name, or NULL. */
const struct cnl_config_def *cnl_config_find(const struct cnl_config_def *table,
                                             size_t n, const char *name);

/*
 * cnl_config_defaults - set every field of @obj to its default.  Fields are
 * overwritten without being read, so @obj may be uninitialised; strings it
 * held are not freed (call cnl_config_done() first when reusing it).
 * Returns 0, -ENOMEM, or -CNL_ECONFIG if a default in the table is itself
 * invalid; @obj is untouched on failure.
 */
int cnl_config_defaults(const struct cnl_config_def *table, size_t n,
                        void *obj);

/*
 * cnl_config_set - set the key @name from the text @value, as if it were
 * written in a file.  Returns 0, or: -CNL_EFIELD for an unknown key,
 * -CNL_ECONFIG for a malformed value, -ERANGE for a value out of bounds,
 * -ENOMEM.  @err explains; @obj is untouched on failure.
 */
int cnl_config_set(const struct cnl_config_def *table, size_t n, void *obj,
                   const char *name, const char *value, char *err,
                   size_t errlen);

/*
 * cnl_config_load_file - apply the file at @path.  Each line is blank, a
 * comment starting with '#', or "key = value".  A value is either the rest
 * of the line with surrounding blanks removed, or a double-quoted string in
 * which \" \\ \n and \t are escapes, optionally followed by a comment.
 * Returns 0, or the codes of cnl_config_set() plus: -CNL_EPARSE for a line
 * that is not "key = value" or an unterminated quote, -CNL_EDUP for a key
 * given twice, a negative errno if the file cannot be read.  Messages start
 * with "PATH:LINE:".  @obj is untouched on failure.
 */
int cnl_config_load_file(const struct cnl_config_def *table, size_t n,
                         void *obj, const char *path, char *err, size_t errlen);

/*
 * cnl_config_load_env - apply the variables of @envp (a NULL-terminated
 * "NAME=value" array such as environ) named @prefix followed by a key in
 * upper case: with prefix "CNLAB_", CNLAB_DATA_DIR sets data_dir.  Values
 * are taken literally (no quotes).  Variables with the prefix that match no
 * key are ignored, because the environment is shared with other programs.
 * Returns 0 or the codes of cnl_config_set(), with the variable named in
 * @err; @obj is untouched on failure.
 */
int cnl_config_load_env(const struct cnl_config_def *table, size_t n, void *obj,
                        const char *prefix, char **envp, char *err,
                        size_t errlen);

/*
 * A flag a program handles itself, beside the settings of its table: the
 * config file (--config FILE), --help, modes such as --all-in-one.
 * cnl_config_load_args() skips it (and its value when @has_value) and
 * reports what it found in @value.
 */
struct cnl_config_flag {
	const char *name;  /* as typed, without dashes: "config", "all-in-one";
	                    * one letter also matches "-X" ("h" is -h) */
	bool has_value;    /* takes a value: --config FILE, --config=FILE */
	const char *value; /* out: the value, "" for a flag without one that
	                    * was given, NULL when absent (the last wins) */
};

/*
 * cnl_config_load_args - apply the settings given on a command line,
 * argv[1..@argc): "--KEY VALUE" or "--KEY=VALUE" for any key of the table,
 * written with '-' or '_' between words (--node-lost-timeout and
 * --node_lost_timeout both set node_lost_timeout).  The flags of @own (an
 * array ending with a NULL name; may be NULL) are the program's: they are
 * skipped and their values stored in their rows.  A key given twice keeps
 * its last value.  With @obj NULL nothing is applied: the call only checks
 * the command line and fills @own, so a program can find --config before
 * it reads the file and apply the flags after the environment (flags win).
 * Returns 0, or: -CNL_EFIELD for an unknown flag or an argument that is
 * not a flag, -CNL_EPARSE for a flag without its value (or a value given
 * to an own flag that takes none), and the codes of cnl_config_set(); @err
 * names the flag.  @obj is untouched on failure.
 */
int cnl_config_load_args(const struct cnl_config_def *table, size_t n,
                         void *obj, int argc, char *const *argv,
                         struct cnl_config_flag *own, char *err, size_t errlen);

/*
 * cnl_config_to_json - @obj as a JSON object, one member per key: strings
 * (or null), integers (durations in ms, sizes in bytes) and booleans.
 * Returns a new reference, or NULL on out-of-memory.
 */
json_t *cnl_config_to_json(const struct cnl_config_def *table, size_t n,
                           const void *obj);

/*
 * cnl_config_doc_markdown - write the table as a Markdown table (key, type,
 * default, range, description) to @f.  Returns 0 or -EIO.
 */
int cnl_config_doc_markdown(const struct cnl_config_def *table, size_t n,
                            FILE *f);

/* cnl_config_done - free the STRING fields of @obj and set them to NULL. */
void cnl_config_done(const struct cnl_config_def *table, size_t n, void *obj);

#endif /* CNL_CONFIG_H */
