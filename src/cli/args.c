/*
 * args.c - table-driven command-line parsing (see args.h).
 */
#include "cli/args.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int cnl_cli_flag_find(const struct cnl_cli_flag *flags, size_t nflags,
                      const char *name)
{
	for (size_t i = 0; i < nflags; i++)
		if (strcmp(flags[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* The flag an argument names: "--gpu", "--gpu=x", "-o", "-h"; or -1. */
static int lookup(const struct cnl_cli_flag *flags, size_t nflags,
                  const char *arg, const char **ret_inline)
{
	char name[64];
	const char *eq;
	size_t n;

	*ret_inline = NULL;
	if (strcmp(arg, "-o") == 0)
		return cnl_cli_flag_find(flags, nflags, "output");
	if (strcmp(arg, "-h") == 0)
		return cnl_cli_flag_find(flags, nflags, "help");
	if (strncmp(arg, "--", 2) != 0)
		return -1;
	arg += 2;
	eq = strchr(arg, '=');
	n = eq ? (size_t)(eq - arg) : strlen(arg);
	if (n == 0 || n >= sizeof(name))
		return -1;
	memcpy(name, arg, n);
	name[n] = '\0';
	if (eq)
		*ret_inline = eq + 1;
	return cnl_cli_flag_find(flags, nflags, name);
}

int cnl_cli_args_parse(const struct cnl_cli_flag *flags, size_t nflags,
                       int argc, char **argv, bool passthrough,
                       struct cnl_cli_args *ret, char *err, size_t errlen)
{
	struct cnl_cli_args a;
	bool only_pos = false;

	memset(&a, 0, sizeof(a));
	if (nflags > CNL_CLI_FLAGS_MAX) {
		snprintf(err, errlen, "too many flags in the table");
		return -EINVAL;
	}
	for (int i = 0; i < argc; i++) {
		const char *arg = argv[i], *inl;
		int f;

		if (!only_pos && strcmp(arg, "--") == 0) {
			only_pos = true;
			continue;
		}
		if (only_pos || arg[0] != '-' || arg[1] == '\0')
			goto positional;
		f = lookup(flags, nflags, arg, &inl);
		if (f < 0) {
			if (passthrough && a.npos > 0)
				goto positional;
			snprintf(err, errlen, "unknown flag %s", arg);
			return -EINVAL;
		}
		if (!flags[f].metavar) {
			if (inl) {
				snprintf(err, errlen,
				         "flag --%s takes no value",
				         flags[f].name);
				return -EINVAL;
			}
			a.values[f] = "";
			continue;
		}
		if (!inl) {
			if (i + 1 >= argc) {
				snprintf(err, errlen,
				         "flag --%s needs a value (%s)",
				         flags[f].name, flags[f].metavar);
				return -EINVAL;
			}
			inl = argv[++i];
		}
		a.values[f] = inl;
		continue;
	positional:
		if (a.npos >= CNL_CLI_POS_MAX) {
			snprintf(err, errlen, "too many arguments");
			return -EINVAL;
		}
		a.pos[a.npos++] = argv[i];
	}
	*ret = a;
	return 0;
}
