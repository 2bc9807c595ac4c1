/*
 * main.c - cnlab, the command-line client of the CNLab platform: help and
 * dispatch.
 *
 * The whole command surface is one table, cnl_cli_commands[] (commands.c,
 * after the Redis command table): each row names the command's words
 * ("server create"), its positional arguments, its flags and its handler
 * (cmd/<group>.c).  The dispatcher, --help at every level, and the
 * bash/zsh/fish completion scripts (completion.c) are all generated from
 * that table.
 *
 * Dispatch: the leading words of argv that are not flags pick the longest
 * matching row ("cnlab server stop nb1" runs "server stop" with nb1 as its
 * argument); global flags (--server, --output, --project, --help) may come
 * anywhere.  A group word alone ("cnlab server") prints the group's help.
 *
 * Where settings come from, strongest first: flags, the environment
 * (CNLAB_SERVER, CNLAB_TOKEN), the config file (config.h), the default
 * server http://127.0.0.1:8080.
 */
#define _GNU_SOURCE /* vasprintf */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "cli/cli.h"
#include "net/otel.h"
#include "cli/format.h"
#include "common/time.h"
#include "common/util.h"

#define DEFAULT_SERVER "http://127.0.0.1:8080"

/* ------------------------------------------------------------------------ */
/* Help and dispatch                                                         */
/* ------------------------------------------------------------------------ */

static size_t nflags_of(const struct cnl_cli_flag *f)
{
	size_t n = 0;

	while (f && f[n].name)
		n++;
	return n;
}

static void print_flags(FILE *f, const struct cnl_cli_flag *flags)
{
	for (size_t i = 0; flags && flags[i].name; i++) {
		char left[64];

		snprintf(left, sizeof(left), "--%s%s%s", flags[i].name,
		         flags[i].metavar ? " " : "",
		         flags[i].metavar ? flags[i].metavar : "");
		fprintf(f, "  %-28s %s\n", left, flags[i].help);
	}
}

static void help_command(FILE *f, const struct cnl_cli_command *c)
{
	fprintf(f, "Usage: cnlab %s%s%s [flags]\n\n%s\n", c->path,
	        c->usage[0] ? " " : "", c->usage, c->summary);
	if (c->flags) {
		fputs("\nFlags:\n", f);
		print_flags(f, c->flags);
	}
	fputs("\nGlobal flags:\n", f);
	print_flags(f, cnl_cli_global_flags);
}

/* Help for the commands starting with @prefix ("" for all). */
static void help_group(FILE *f, const char *prefix)
{
	size_t pl = strlen(prefix);
	int width = 20;

	fprintf(f, "Usage: cnlab %s%sCOMMAND [flags]\n\n", prefix,
	        pl ? " " : "");
	if (!pl)
		fputs(
		    "cnlab - the CNLab GPU platform from the command line.\n\n",
		    f);
	fputs("Commands:\n", f);
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < cnl_cli_ncommands; i++) {
			const struct cnl_cli_command *c = &cnl_cli_commands[i];
			char left[96];
			int n;

			if (c->hidden ||
			    (pl && (strncmp(c->path, prefix, pl) != 0 ||
			            c->path[pl] != ' ')))
				continue;
			n = snprintf(left, sizeof(left), "%s%s%s", c->path,
			             c->usage[0] ? " " : "", c->usage);
			if (pass == 0 && n > width && n <= 40)
				width = n;
			else if (pass == 1 && n > width)
				fprintf(f, "  %s\n  %-*s %s\n", left, width, "",
				        c->summary);
			else if (pass == 1)
				fprintf(f, "  %-*s %s\n", width, left,
				        c->summary);
		}
	fputs("\nGlobal flags:\n", f);
	print_flags(f, cnl_cli_global_flags);
	if (!pl)
		fputs("\nRun cnlab COMMAND --help for a command's flags. Exit "
		      "codes: 0 ok, 1 error, 2 usage,\n3 not logged in, 4 not "
		      "found, 5 refused (quota, permission, deadline);\ncnlab "
		      "run exits with the job's own code.\n",
		      f);
}

/* Whether @word continues @path into a command or group prefix. */
static bool is_prefix(const char *path)
{
	size_t n = strlen(path);

	for (size_t i = 0; i < cnl_cli_ncommands; i++)
		if (strncmp(cnl_cli_commands[i].path, path, n) == 0 &&
		    (cnl_cli_commands[i].path[n] == '\0' ||
		     cnl_cli_commands[i].path[n] == ' '))
			return true;
	return false;
}

static const struct cnl_cli_command *find_command(const char *path)
{
	for (size_t i = 0; i < cnl_cli_ncommands; i++)
		if (strcmp(cnl_cli_commands[i].path, path) == 0)
			return &cnl_cli_commands[i];
	return NULL;
}

/* Edit distance of @a and @b (at most 63 bytes of each are compared). */
static size_t distance(const char *a, const char *b)
{
	size_t la = strnlen(a, 63), lb = strnlen(b, 63), row[64];

	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];

		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j],
			       best = diag + (a[i - 1] != b[j - 1]);

			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			diag = up;
			row[j] = best;
		}
	}
	return row[lb];
}

/*
 * "unknown command 'PATH WORD'", with the closest real one: a command or
 * group under PATH whose next word is at most a third of WORD's length
 * away ("sever" -> "server", "jobs lst" -> "jobs list"), or at the top
 * the one command whose last word is WORD ("logs" -> "jobs logs").  Exit
 * code 2.
 */
static int unknown_command(const char *path, const char *word)
{
	size_t pl = strlen(path), best = strlen(word) / 3, nlast = 0;
	char guess[64] = "", last_guess[64] = "";

	if (best < 1)
		best = 1;
	for (size_t i = 0; i < cnl_cli_ncommands; i++) {
		const struct cnl_cli_command *c = &cnl_cli_commands[i];
		const char *next, *last = strrchr(c->path, ' ');
		size_t wl, d;
		char child[64];

		/* Only commands under PATH: their path is longer than it, so
		 * the next word lies inside the string. */
		if (c->hidden ||
		    (pl && (strncmp(c->path, path, pl) || c->path[pl] != ' ')))
			continue;
		next = c->path + (pl ? pl + 1 : 0);
		wl = strcspn(next, " ");
		snprintf(child, sizeof(child), "%.*s", (int)wl, next);
		if ((d = distance(word, child)) <= best) {
			best = d;
			snprintf(guess, sizeof(guess), "%.*s",
			         (int)(next - c->path + (ptrdiff_t)wl),
			         c->path);
		}
		if (!pl && last && strcmp(last + 1, word) == 0 && nlast++ == 0)
			snprintf(last_guess, sizeof(last_guess), "%s", c->path);
	}
	if (!guess[0] && nlast == 1)
		snprintf(guess, sizeof(guess), "%s", last_guess);
	if (guess[0])
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "unknown command '%s%s%s': did you mean "
		                    "'cnlab %s'? (cnlab %s%s--help lists them)",
		                    path, pl ? " " : "", word, guess, path,
		                    pl ? " " : "");
	return cnl_cli_fail(CNL_EXIT_USAGE,
	                    "unknown command '%s%s%s': see cnlab %s%s--help",
	                    path, pl ? " " : "", word, path, pl ? " " : "");
}

/*
 * cnlab with nothing else: where the server is, and the few commands a
 * new user needs first.  Reads the settings file; asks the server
 * nothing.
 */
static int quick_start(struct cnl_cli *cli)
{
	char *cpath = cnl_cli_config_path(), err[512];
	const char *env = getenv("CNLAB_SERVER");
	bool warned = false;

	if (cpath)
		cnl_cli_config_load(cpath, &cli->cfg, &warned, err,
		                    sizeof(err));
	free(cpath);
	printf("cnlab - the CNLab GPU platform from the command line.\n\n");
	printf("Server:  %s", env && *env       ? env
	                      : cli->cfg.server ? cli->cfg.server
	                                        : DEFAULT_SERVER " (default)");
	if (cli->cfg.token || getenv("CNLAB_TOKEN"))
		printf("  (logged in%s%s)",
		       cli->cfg.project ? "; project " : "",
		       cli->cfg.project ? cli->cfg.project : "");
	else
		printf("  (not logged in)");
	printf("\n\nStart here:\n"
	       "  cnlab login --server URL       log in (asks for user and "
	       "password)\n"
	       "  cnlab profiles list            the GPU slices you can ask "
	       "for, and when\n"
	       "  cnlab run train.py --gpu h100-25\n"
	       "                                 run a script on 25%% of an "
	       "H100, stream its output\n"
	       "  cnlab server create --profile h100-25pct\n"
	       "                                 a JupyterLab server; "
	       "prints its URL\n"
	       "  cnlab jobs list                your jobs and their "
	       "state\n\n"
	       "Every command: cnlab --help.  One command's flags: cnlab "
	       "COMMAND --help.\n");
	cnl_cli_config_done(&cli->cfg);
	return 0;
}

int main(int argc, char **argv)
{
	struct cnl_cli cli = {.commands = cnl_cli_commands,
	                      .ncommands = cnl_cli_ncommands,
	                      .global_flags = cnl_cli_global_flags};
	struct cnl_cli_flag flags[CNL_CLI_FLAGS_MAX];
	char path[128] = "", err[512];
	char *rest[256];
	int nrest = 0, code;
	const char *out, *env;
	bool warned = false, want_help = false;

	/* Pick the command: leading words (global flags may sit among
	 * them) that extend a known command path. */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		char next[128];
		int gi = -1, w;

		if (a[0] == '-') {
			const char *name = a + (a[1] == '-' ? 2 : 1);

			for (size_t k = 0; cnl_cli_global_flags[k].name; k++)
				if (strncmp(
				        name, cnl_cli_global_flags[k].name,
				        strlen(cnl_cli_global_flags[k].name)) ==
				        0 ||
				    (strcmp(a, "-o") == 0 &&
				     !strcmp(cnl_cli_global_flags[k].name,
				             "output")))
					gi = (int)k;
			if ((size_t)nrest < CNL_ARRAY_SIZE(rest))
				rest[nrest++] = argv[i];
			if (gi >= 0 && cnl_cli_global_flags[gi].metavar &&
			    !strchr(a, '=') && i + 1 < argc &&
			    (size_t)nrest < CNL_ARRAY_SIZE(rest))
				rest[nrest++] = argv[++i];
			continue;
		}
		/* A path too long to hold is no command's: not a prefix. */
		w = snprintf(next, sizeof(next), "%s%s%s", path,
		             path[0] ? " " : "", a);
		if (w >= 0 && (size_t)w < sizeof(next) && !find_command(path) &&
		    is_prefix(next)) {
			memcpy(path, next, (size_t)w + 1);
			continue;
		}
		for (; i < argc && (size_t)nrest < CNL_ARRAY_SIZE(rest); i++)
			rest[nrest++] = argv[i];
		break;
	}
	cli.cmd = find_command(path);
	for (int i = 0; i < nrest; i++)
		if (!strcmp(rest[i], "--help") || !strcmp(rest[i], "-h"))
			want_help = true;
		else if (!strcmp(rest[i], "--"))
			break;
	if (!cli.cmd) {
		const char *word = NULL, *flag = NULL;

		if (nrest == 1 && !strcmp(rest[0], "--version"))
			return cnl_cli_cmd_version(&cli);
		/* The first word that is no command, and the first flag
		 * that is not global (global ones took their values). */
		for (int i = 0; i < nrest && !word; i++) {
			bool global = false;

			if (rest[i][0] != '-') {
				word = rest[i];
				break;
			}
			for (size_t k = 0; cnl_cli_global_flags[k].name; k++) {
				const char *g = cnl_cli_global_flags[k].name;
				const char *a = rest[i] + 2;

				if (strncmp(rest[i], "--", 2) == 0 &&
				    strncmp(a, g, strlen(g)) == 0 &&
				    (a[strlen(g)] == '\0' ||
				     a[strlen(g)] == '='))
					global = true;
				if (global && cnl_cli_global_flags[k].metavar &&
				    !strchr(rest[i], '='))
					i++; /* its value */
			}
			if (!global && strcmp(rest[i], "-h") != 0 &&
			    strcmp(rest[i], "-o") != 0 && !flag)
				flag = rest[i];
			else if (strcmp(rest[i], "-o") == 0)
				i++;
		}
		if (word)
			return unknown_command(path, word);
		if (flag)
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "unknown flag \"%s\": see cnlab "
			                    "%s%s--help",
			                    flag, path, path[0] ? " " : "");
		if (!path[0] && !want_help)
			return quick_start(&cli);
		help_group(want_help ? stdout : stderr, path);
		return want_help ? 0 : CNL_EXIT_USAGE;
	}
	if (want_help) {
		help_command(stdout, cli.cmd);
		return 0;
	}
	cli.nflags = 0;
	for (size_t k = 0; cnl_cli_global_flags[k].name; k++)
		flags[cli.nflags++] = cnl_cli_global_flags[k];
	for (size_t k = 0; k < nflags_of(cli.cmd->flags); k++)
		flags[cli.nflags++] = cli.cmd->flags[k];
	if (cnl_cli_flag_find(cli.cmd->flags, nflags_of(cli.cmd->flags),
	                      "follow") >= 0)
		for (int i = 0; i < nrest; i++)
			if (!strcmp(rest[i], "-f"))
				rest[i] = (char *)"--follow";
	cli.flags = flags;
	if (cnl_cli_args_parse(flags, cli.nflags, nrest, rest,
	                       cli.cmd->passthrough, &cli.args, err,
	                       sizeof(err)) < 0)
		return cnl_cli_fail(CNL_EXIT_USAGE, "%s: see cnlab %s --help",
		                    err, cli.cmd->path);
	if (cli.args.npos < cli.cmd->min_pos ||
	    cli.args.npos > cli.cmd->max_pos)
		return cnl_cli_fail(
		    CNL_EXIT_USAGE, "usage: cnlab %s %s (see cnlab %s --help)",
		    cli.cmd->path, cli.cmd->usage, cli.cmd->path);
	out = cnl_cli_flag(&cli, "output");
	if (out && strcmp(out, "json") != 0 && strcmp(out, "table") != 0)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "--output must be table or json");
	cli.json = out && strcmp(out, "json") == 0;
	cli.project_flag = cnl_cli_flag(&cli, "project");

	/* Settings: flags, then the environment, then the file. */
	{
		char *cpath = cnl_cli_config_path();

		if (cpath && cnl_cli_config_load(cpath, &cli.cfg, &warned, err,
		                                 sizeof(err)) < 0) {
			free(cpath);
			cnl_cli_config_done(&cli.cfg);
			return cnl_cli_fail(CNL_EXIT_ERROR,
			                    "%s (fix or remove the file)", err);
		}
		free(cpath);
		if (warned)
			fprintf(
			    stderr,
			    "cnlab: warning: %s was readable by others; its "
			    "mode is now 0600\n",
			    cli.cfg.path);
	}
	cli.server = cnl_cli_flag(&cli, "server");
	env = getenv("CNLAB_SERVER");
	if (!cli.server)
		cli.server = env && *env ? env : cli.cfg.server;
	if (!cli.server)
		cli.server = DEFAULT_SERVER;
	env = getenv("CNLAB_TOKEN");
	cli.token = env && *env ? env : NULL;
	/* A stored token is the server's that issued it only: another
	 * --server (or CNLAB_SERVER) gets its own, or none. */
	cnl_cli_config_use_server(&cli.cfg, cli.server);
	if (!cli.token)
		cli.token = cli.cfg.token;

	if ((code = cnl_cli_timeouts(&cli)) == 0) {
		struct cnl_span sp;

		cnl_cli_trace_begin(&cli, &sp);
		code = cli.cmd->run(&cli);
		cnl_cli_trace_end(&cli, &sp, code);
	}
	fflush(stdout);
	cnl_client_free(cli.client);
	cnl_cli_config_done(&cli.cfg);
	return code;
}
