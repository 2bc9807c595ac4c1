/*
 * completion.c - cnlab completion bash|zsh|fish: shell completion scripts
 * generated from the command table, so every command, subcommand and flag
 * the binary knows is offered, and nothing it does not.
 *
 * Values that live on the server are asked for when completing: the
 * script runs "cnlab __complete profiles" (profile names, for --profile)
 * or "cnlab __complete shapes" (names and GPU shapes, for --gpu), which
 * print one word a line and print nothing, quietly, when not logged in or
 * the server is away.  Fixed values (--output, --priority, completion's
 * shells) are written into the script.
 *
 * bash and zsh share the generated helper functions (plain case/echo):
 *   _cnlab_children PATH  words that extend PATH ("server" -> create ...)
 *   _cnlab_is_cmd PATH    whether PATH is a whole command
 *   _cnlab_flags PATH     the flags of command PATH, then the global ones
 * and walk the words typed so far the same way the binary dispatches.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"

/* The command table this run generates from (cli->commands: the
 * completion is a command like the others and calls nothing above it). */
static const struct cnl_cli_command *table;
static size_t ntable;
static const struct cnl_cli_flag *global_flags;

/* The words that extend @path into @buf; whether there are any. */
static bool children(const char *path, char *buf, size_t len)
{
	size_t pl = strlen(path), used = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < ntable; i++) {
		const struct cnl_cli_command *c = &table[i];
		const char *rest;
		size_t wl;
		char word[64], probe[80], padded[1100];

		if (c->hidden)
			continue;
		if (pl &&
		    (strncmp(c->path, path, pl) != 0 || c->path[pl] != ' '))
			continue;
		rest = c->path + pl + (pl ? 1 : 0);
		wl = strcspn(rest, " ");
		if (wl == 0 || wl >= sizeof(word))
			continue;
		memcpy(word, rest, wl);
		word[wl] = '\0';
		/* Once each, in table order. */
		snprintf(probe, sizeof(probe), " %s ", word);
		snprintf(padded, sizeof(padded), " %s ", buf);
		if (strstr(padded, probe))
			continue;
		used += (size_t)snprintf(buf + used, len - used, "%s%s",
		                         used ? " " : "", word);
		if (used >= len)
			break;
	}
	return buf[0] != '\0';
}

/* Every prefix of every command path, the group words included. */
static void groups(void (*fn)(const char *path, void *ud), void *ud)
{
	char seen[2048] = "|";

	fn("", ud);
	for (size_t i = 0; i < ntable; i++) {
		const char *p = table[i].path;

		if (table[i].hidden)
			continue;
		for (const char *sp = strchr(p, ' '); sp;
		     sp = strchr(sp + 1, ' ')) {
			char pre[80], key[84];

			snprintf(pre, sizeof(pre), "%.*s", (int)(sp - p), p);
			snprintf(key, sizeof(key), "|%s|", pre);
			if (strstr(seen, key))
				continue;
			snprintf(seen + strlen(seen),
			         sizeof(seen) - strlen(seen), "%s|", pre);
			fn(pre, ud);
		}
	}
}

static void emit_children_case(const char *path, void *ud)
{
	char buf[1024];

	if (children(path, buf, sizeof(buf)))
		fprintf((FILE *)ud, "\t\"%s\") echo \"%s\" ;;\n", path, buf);
}

static void emit_flags(FILE *f, const struct cnl_cli_flag *flags)
{
	for (size_t k = 0; flags && flags[k].name; k++)
		fprintf(f, "%s--%s", k ? " " : "", flags[k].name);
}

/* The shell functions bash and zsh share. */
static void emit_helpers(FILE *f)
{
	fputs("_cnlab_children() {\n\tcase \"$1\" in\n", f);
	groups(emit_children_case, f);
	fputs("\tesac\n}\n\n_cnlab_is_cmd() {\n\tcase \"$1\" in\n", f);
	for (size_t i = 0; i < ntable; i++)
		if (!table[i].hidden)
			fprintf(f, "\t\"%s\") return 0 ;;\n", table[i].path);
	fputs("\tesac\n\treturn 1\n}\n\n_cnlab_flags() {\n\tcase \"$1\" in\n",
	      f);
	for (size_t i = 0; i < ntable; i++) {
		const struct cnl_cli_command *c = &table[i];

		if (c->hidden || !c->flags)
			continue;
		fprintf(f, "\t\"%s\") echo \"", c->path);
		emit_flags(f, c->flags);
		fputs("\" ;;\n", f);
	}
	fputs("\tesac\n\techo \"", f);
	emit_flags(f, global_flags);
	fputs("\"\n}\n\n", f);
	/* Flags that take a value: their value is not a command word. */
	fputs("_cnlab_value_flags=\" -o", f);
	for (size_t k = 0; global_flags[k].name; k++)
		if (global_flags[k].metavar)
			fprintf(f, " --%s", global_flags[k].name);
	for (size_t i = 0; i < ntable; i++)
		for (size_t k = 0; table[i].flags && table[i].flags[k].name;
		     k++)
			if (table[i].flags[k].metavar)
				fprintf(f, " --%s", table[i].flags[k].name);
	fputs(" \"\n\n", f);
}

/* Value completions by flag, shared through a word list function. */
static void emit_values(FILE *f)
{
	fputs("# Words for the value of flag $1 (cnlab asks the server).\n"
	      "_cnlab_values() {\n\tcase \"$1\" in\n"
	      "\t--gpu) cnlab __complete shapes 2>/dev/null ;;\n"
	      "\t--profile) cnlab __complete profiles 2>/dev/null ;;\n"
	      "\t--output|-o) echo \"table json\" ;;\n"
	      "\t--priority) echo \"low normal high critical\" ;;\n"
	      "\t--role) echo \"viewer member project-admin\" ;;\n"
	      "\tesac\n}\n\n",
	      f);
}

static const char bash_main[] =
    "_cnlab() {\n"
    "\tlocal cur prev cmd w i next\n"
    "\tCOMPREPLY=()\n"
    "\tcur=${COMP_WORDS[COMP_CWORD]}\n"
    "\tprev=\n"
    "\t((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD-1]}\n"
    "\tcase \"$prev\" in\n"
    "\t--gpu|--profile|--output|-o|--priority|--role)\n"
    "\t\tCOMPREPLY=($(compgen -W \"$(_cnlab_values \"$prev\")\" -- "
    "\"$cur\"))\n"
    "\t\treturn 0 ;;\n"
    "\t--artifacts)\n"
    "\t\tCOMPREPLY=($(compgen -d -- \"$cur\"))\n"
    "\t\treturn 0 ;;\n"
    "\tesac\n"
    "\tif [[ \"$_cnlab_value_flags\" == *\" $prev \"* ]]; then\n"
    "\t\treturn 0\n"
    "\tfi\n"
    "\tcmd=\n"
    "\tfor ((i = 1; i < COMP_CWORD; i++)); do\n"
    "\t\tw=${COMP_WORDS[i]}\n"
    "\t\tif [[ \"$w\" == -* ]]; then\n"
    "\t\t\t[[ \"$_cnlab_value_flags\" == *\" $w \"* ]] && ((i++))\n"
    "\t\t\tcontinue\n"
    "\t\tfi\n"
    "\t\t_cnlab_is_cmd \"$cmd\" && break\n"
    "\t\tnext=${cmd:+$cmd }$w\n"
    "\t\tif _cnlab_is_cmd \"$next\" || [ -n \"$(_cnlab_children "
    "\"$next\")\" ]; then\n"
    "\t\t\tcmd=$next\n"
    "\t\tfi\n"
    "\tdone\n"
    "\tif [[ \"$cur\" == -* ]]; then\n"
    "\t\tCOMPREPLY=($(compgen -W \"$(_cnlab_flags \"$cmd\")\" -- "
    "\"$cur\"))\n"
    "\telif _cnlab_is_cmd \"$cmd\"; then\n"
    "\t\tcase \"$cmd\" in\n"
    "\t\trun) COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n"
    "\t\tcompletion) COMPREPLY=($(compgen -W \"bash zsh fish\" -- "
    "\"$cur\")) ;;\n"
    "\t\tesac\n"
    "\telse\n"
    "\t\tCOMPREPLY=($(compgen -W \"$(_cnlab_children \"$cmd\")\" -- "
    "\"$cur\"))\n"
    "\tfi\n"
    "\treturn 0\n"
    "}\n\n"
    "complete -F _cnlab cnlab\n";

static const char zsh_main[] =
    "_cnlab() {\n"
    "\tlocal cur=${words[CURRENT]} prev=${words[CURRENT-1]} cmd= w i "
    "next\n"
    "\tcase \"$prev\" in\n"
    "\t--gpu|--profile|--output|-o|--priority|--role)\n"
    "\t\tcompadd -- ${(f)\"$(_cnlab_values \"$prev\" | tr ' ' '\\n')\"}\n"
    "\t\treturn ;;\n"
    "\t--artifacts) _files -/; return ;;\n"
    "\tesac\n"
    "\t[[ \"$_cnlab_value_flags\" == *\" $prev \"* ]] && return\n"
    "\tfor ((i = 2; i < CURRENT; i++)); do\n"
    "\t\tw=${words[i]}\n"
    "\t\tif [[ \"$w\" == -* ]]; then\n"
    "\t\t\t[[ \"$_cnlab_value_flags\" == *\" $w \"* ]] && ((i++))\n"
    "\t\t\tcontinue\n"
    "\t\tfi\n"
    "\t\t_cnlab_is_cmd \"$cmd\" && break\n"
    "\t\tnext=${cmd:+$cmd }$w\n"
    "\t\tif _cnlab_is_cmd \"$next\" || [ -n \"$(_cnlab_children "
    "\"$next\")\" ]; then\n"
    "\t\t\tcmd=$next\n"
    "\t\tfi\n"
    "\tdone\n"
    "\tif [[ \"$cur\" == -* ]]; then\n"
    "\t\tcompadd -- ${=$(_cnlab_flags \"$cmd\")}\n"
    "\telif _cnlab_is_cmd \"$cmd\"; then\n"
    "\t\tcase \"$cmd\" in\n"
    "\t\trun) _files ;;\n"
    "\t\tcompletion) compadd bash zsh fish ;;\n"
    "\t\tesac\n"
    "\telse\n"
    "\t\tcompadd -- ${=$(_cnlab_children \"$cmd\")}\n"
    "\tfi\n"
    "}\n\n"
    "if [ \"$funcstack[1]\" = \"_cnlab\" ]; then\n"
    "\t_cnlab \"$@\"\n"
    "else\n"
    "\tcompdef _cnlab cnlab\n"
    "fi\n";

/* @s inside fish's single quotes: ' and \\ escaped. */
static void fish_quoted(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'' || *s == '\\')
			fputc('\\', f);
		fputc(*s, f);
	}
	fputc('\'', f);
}

/* fish: one "complete" line per word, condition on the words seen. */
static void emit_fish(FILE *f)
{
	char buf[1024];

	fputs("# fish completion for cnlab (cnlab completion fish)\n"
	      "complete -c cnlab -f\n",
	      f);
	children("", buf, sizeof(buf));
	fprintf(f, "complete -c cnlab -n __fish_use_subcommand -a '%s'\n", buf);
	for (size_t i = 0; i < ntable; i++) {
		const struct cnl_cli_command *c = &table[i];
		const char *sp = strchr(c->path, ' ');
		char group[64], cond[160];

		if (c->hidden)
			continue;
		if (sp) {
			snprintf(group, sizeof(group), "%.*s",
			         (int)(sp - c->path), c->path);
			children(group, buf, sizeof(buf));
			snprintf(cond, sizeof(cond),
			         "__fish_seen_subcommand_from %s; and "
			         "__fish_seen_subcommand_from %s",
			         group, sp + 1);
			fprintf(f,
			        "complete -c cnlab -n '__fish_seen_subcommand_"
			        "from %s; and not __fish_seen_subcommand_from "
			        "%s' -a '%s'\n",
			        group, buf, sp + 1);
		} else {
			snprintf(cond, sizeof(cond),
			         "__fish_seen_subcommand_from %s", c->path);
		}
		for (size_t k = 0; c->flags && c->flags[k].name; k++) {
			const struct cnl_cli_flag *fl = &c->flags[k];

			fprintf(f, "complete -c cnlab -n '%s' -l %s", cond,
			        fl->name);
			if (fl->complete == 'p')
				fputs(" -x -a '(cnlab __complete profiles "
				      "2>/dev/null)'",
				      f);
			else if (fl->complete == 's')
				fputs(" -x -a '(cnlab __complete shapes "
				      "2>/dev/null)'",
				      f);
			else if (fl->complete == 'r')
				fputs(" -x -a 'low normal high critical'", f);
			else if (fl->complete == 'R')
				fputs(" -x -a 'viewer member project-admin'",
				      f);
			else if (fl->complete == 'd')
				fputs(" -r -a '(__fish_complete_directories)'",
				      f);
			else if (fl->metavar)
				fputs(" -r", f);
			fputs(" -d ", f);
			fish_quoted(f, fl->help);
			fputc('\n', f);
		}
		if (strcmp(c->path, "run") == 0)
			fprintf(f, "complete -c cnlab -n '%s' -F\n", cond);
		if (strcmp(c->path, "completion") == 0)
			fprintf(f,
			        "complete -c cnlab -n '%s' -a 'bash zsh "
			        "fish'\n",
			        cond);
	}
	fputs("complete -c cnlab -l server -r -d 'control plane URL'\n"
	      "complete -c cnlab -s o -l output -x -a 'table json' -d "
	      "'output format'\n"
	      "complete -c cnlab -l project -x -d 'project to act on'\n"
	      "complete -c cnlab -s h -l help -d 'show help'\n",
	      f);
}

int cnl_cli_cmd_completion(struct cnl_cli *cli)
{
	table = cli->commands;
	ntable = cli->ncommands;
	global_flags = cli->global_flags;
	const char *shell = cli->args.pos[0];

	if (strcmp(shell, "bash") == 0) {
		fputs("# bash completion for cnlab (cnlab completion bash)\n",
		      stdout);
		emit_helpers(stdout);
		emit_values(stdout);
		fputs(bash_main, stdout);
	} else if (strcmp(shell, "zsh") == 0) {
		fputs("#compdef cnlab\n# zsh completion for cnlab (cnlab "
		      "completion zsh)\n",
		      stdout);
		emit_helpers(stdout);
		emit_values(stdout);
		fputs(zsh_main, stdout);
	} else if (strcmp(shell, "fish") == 0) {
		emit_fish(stdout);
	} else {
		return cnl_cli_fail(
		    CNL_EXIT_USAGE,
		    "completion: unknown shell \"%s\" (bash, zsh "
		    "or fish)",
		    shell);
	}
	return 0;
}

/* cnlab __complete WHAT: words for the completion scripts, quietly. */
int cnl_cli_cmd_complete(struct cnl_cli *cli)
{
	const char *what = cli->args.pos[0];
	struct cnl_client_reply r;
	json_t *it;
	size_t i;

	if (!cli->token || !cnl_cli_client(cli))
		return 0;
	if (strcmp(what, "profiles") == 0 || strcmp(what, "shapes") == 0) {
		if (cnl_client_send(cli->client, "GET",
		                    "/v1/profiles?limit=1000", NULL, NULL,
		                    &r) < 0 ||
		    r.status != 200) {
			cnl_client_reply_done(&r);
			return 0;
		}
		json_array_foreach (json_object_get(r.json, "items"), i, it) {
			printf("%s\n", cnl_cli_str(it, "name", ""));
			if (strcmp(what, "shapes") == 0 &&
			    json_object_get(it, "gpu"))
				printf("%s\n", cnl_cli_str(it, "gpu", ""));
		}
		cnl_client_reply_done(&r);
	}
	return 0;
}
