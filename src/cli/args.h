/*
 * args.h - command-line parsing for cnlab, driven by flag tables.
 *
 * Every command declares its flags as a table of struct cnl_cli_flag; the
 * parser, the --help text and the shell completion scripts all read the
 * same tables, so they cannot disagree.  Rules (as kubectl and gh):
 *
 *   --name value and --name=value; a boolean flag takes no value;
 *   -o is --output and -h is --help; flags may come before, between or
 *   after the positional arguments;
 *   "--" ends the flags: everything after it is positional;
 *   with @passthrough (cnlab run), once the first positional argument is
 *   seen, flags this table does not know are kept as positional arguments
 *   (they belong to the script), while known ones are still taken.
 */
#ifndef CNL_CLI_ARGS_H
#define CNL_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>

#define CNL_CLI_FLAGS_MAX 32
#define CNL_CLI_POS_MAX   64

/* One flag: --@name, with a value when @metavar is not NULL. */
struct cnl_cli_flag {
	const char *name;    /* without the dashes: "gpu" */
	const char *metavar; /* "SHAPE" for a flag with a value, NULL else */
	const char *help;    /* one line for --help */
	char complete;       /* completion of the value: 'p' profile names,
	                      * 's' shapes or profiles, 'o' output formats,
	                      * 'r' priorities, 'R' roles, 'f' files, 'd'
	                      * folders, 0 none */
};

/* What the parser found. */
struct cnl_cli_args {
	/* By flag index: the value, "" for a boolean flag that was given,
	 * NULL when absent.  Pointers into argv. */
	const char *values[CNL_CLI_FLAGS_MAX];
	char *pos[CNL_CLI_POS_MAX]; /* positional arguments, in order */
	size_t npos;
};

/*
 * cnl_cli_args_parse - parse @argv[0..@argc) against @flags (@nflags rows,
 * at most CNL_CLI_FLAGS_MAX) into *@ret.  A flag given twice keeps its last
 * value.  Returns 0, or -EINVAL with @err saying what is wrong: an unknown
 * flag, a missing value, a value given to a boolean flag, or too many
 * positional arguments.
 */
int cnl_cli_args_parse(const struct cnl_cli_flag *flags, size_t nflags,
                       int argc, char **argv, bool passthrough,
                       struct cnl_cli_args *ret, char *err, size_t errlen);

/* cnl_cli_flag_find - the index of --@name in @flags, or -1. */
int cnl_cli_flag_find(const struct cnl_cli_flag *flags, size_t nflags,
                      const char *name);

#endif /* CNL_CLI_ARGS_H */
