/*
 * format.h - the pure text helpers of the cnlab CLI: aligned tables,
 * numbers with thousands separators, quota lines, storage sizes, idle
 * durations, CPU and memory given on the command line, waiting-time estimates,
 * shell quoting and the command that ships a local script to a node.
 *
 * Nothing here talks to the network or reads a clock: "now" comes in as an
 * argument, so the unit tests (tests/unit/cli) pin every output exactly.
 */
#ifndef CNL_CLI_FORMAT_H
#define CNL_CLI_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * A table collects rows of cells (copied) and prints them with each column
 * as wide as its widest cell plus two spaces; widths count UTF-8 code
 * points, so "✓ now" is five columns.  A row ends at its last non-empty
 * cell: no trailing blanks.
 */
struct cnl_cli_table {
	size_t ncols, nrows;
	char **cells; /* nrows * ncols, row-major; NULL prints as "" */
};

/* cnl_cli_table_init - an empty table of @ncols columns (1..16). */
void cnl_cli_table_init(struct cnl_cli_table *t, size_t ncols);

/*
 * cnl_cli_table_add - append a row of exactly t->ncols cells (NULL cells
 * print as empty).
 */
void cnl_cli_table_add(struct cnl_cli_table *t, const char *const *cells);

/* cnl_cli_table_print - write the table to @f; returns 0 or -EIO. */
int cnl_cli_table_print(const struct cnl_cli_table *t, FILE *f);

/* cnl_cli_table_done - free the cells; the table may be reused after init. */
void cnl_cli_table_done(struct cnl_cli_table *t);

/* cnl_cli_utf8_width - the number of code points in @s. */
size_t cnl_cli_utf8_width(const char *s);

/*
 * cnl_cli_format_number - @v with thousands separators: whole numbers
 * (within 0.005) as "1,820", others with two decimals ("0.25",
 * "1,234.50").  Returns the length, or -ENOSPC if @len is too small.
 */
int cnl_cli_format_number(double v, char *buf, size_t len);

/*
 * cnl_cli_format_quota - "USED / LIMIT (P%)", or "USED / LIMIT" when
 * @with_percent is false, or "USED / unlimited" when @limit is negative
 * (no limit).  @percent is the server's figure.  Returns the length or
 * -ENOSPC.
 */
int cnl_cli_format_quota(double used, double limit, double percent,
                         bool with_percent, char *buf, size_t len);

/*
 * cnl_cli_format_wait - a waiting time of @ms milliseconds for humans:
 * "now" when <= 0, "18s" under a minute, "12 min" under two hours
 * (rounded up), else "3h05m".  Returns the length or -ENOSPC.
 */
int cnl_cli_format_wait(int64_t ms, char *buf, size_t len);

/*
 * cnl_cli_parse_storage - a storage size from the command line in whole
 * GB: a bare number is GB ("50"), otherwise any unit cnl_size_parse()
 * takes ("50gb", "50Gi" — a trailing 'i' means "ib" — "500mb"), rounded up
 * to whole GB.  Returns 0 or -CNL_EPARSE; *@ret_gb is untouched on failure.
 */
int cnl_cli_parse_storage(const char *s, int64_t *ret_gb);

/*
 * cnl_cli_parse_cpu - CPU as Kubernetes writes it, in thousandths of a
 * core: cores ("2", "0.5", at most three decimals) or milli-cores
 * ("500m"); 1..1,024,000 milli-cores.  Returns 0 or -CNL_EPARSE;
 * *@ret_milli is untouched on failure.
 */
int cnl_cli_parse_cpu(const char *s, int64_t *ret_milli);

/*
 * cnl_cli_parse_memory - memory in whole MiB, rounded up: a bare number is
 * MiB ("512"); otherwise the units of cnl_cli_parse_storage(), as for
 * --storage: "8Gi" is 8 GiB (8,192 MiB), "8g" and "8gb" are 8x10^9 bytes
 * (7,630 MiB), "512Mi", "512m".  1 MiB .. 16 TiB.  Returns 0 or
 * -CNL_EPARSE; *@ret_mib is untouched on failure.
 */
int cnl_cli_parse_memory(const char *s, int64_t *ret_mib);

/*
 * cnl_cli_parse_idle - an idle timeout in whole seconds: a duration such as
 * "2h" or "90m" (cnl_duration_parse()) or a bare number of seconds.
 * Returns 0 or -CNL_EPARSE; *@ret_s is untouched on failure.
 */
int cnl_cli_parse_idle(const char *s, int64_t *ret_s);

/*
 * cnl_cli_shell_quote - append @s to @buf (of @len bytes, holding a
 * string) as one POSIX shell word: unchanged when it is made only of
 * [A-Za-z0-9_./:=@%+,-] and not empty, else in single quotes with each '
 * written as '\''.  Returns 0 or -ENOSPC (then @buf is unchanged).
 */
int cnl_cli_shell_quote(const char *s, char *buf, size_t len);

/*
 * cnl_cli_script_command - the job command for running a local script on
 * a node, which shares no file system with this machine: the script
 * travels as a job file (POST jobs "files") written under its base name
 * (*@ret_base, pointing into @name) in the job's working directory, and
 * the command runs it with the interpreter (python3 for a name ending in
 * .py, sh otherwise) and @args:
 *
 *   python3 train.py ARGS...
 *
 * Returns 0, -EINVAL for a base name that is empty, ".", ".." or starts
 * with '-', or -ENOSPC when the command would not fit in @len bytes.
 */
int cnl_cli_script_command(const char *name, char *const *args, size_t nargs,
                           char *buf, size_t len, const char **ret_base);

/*
 * cnl_cli_plain_command - @argv joined as shell words (each quoted by
 * cnl_cli_shell_quote()), for a SCRIPT that is not a local file.  Returns
 * 0 or -ENOSPC.
 */
int cnl_cli_plain_command(char *const *argv, size_t n, char *buf, size_t len);

/*
 * cnl_cli_safe_name - whether @name may be used as a file name inside a
 * download folder: not empty, not "." or "..", no '/' and no control
 * characters.
 */
bool cnl_cli_safe_name(const char *name);

#endif /* CNL_CLI_FORMAT_H */
