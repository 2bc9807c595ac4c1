/*
 * config.c - cnlab config show|set: the settings file (config.h) without
 * an editor.  The installer served by cnlabd (GET /cli) uses config set
 * server so that a plain "cnlab login" afterwards knows where to go.
 * Settings are checked before they are kept: a server must be an http or
 * https URL, a project a plain name.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"

int cnl_cli_cmd_config_show(struct cnl_cli *cli)
{
	if (cli->json) {
		json_t *o = json_pack("{s:s?,s:s,s:s?,s:b}", "path",
		                      cli->cfg.path, "server", cli->server,
		                      "project", cli->cfg.project, "logged_in",
		                      cli->token != NULL);

		cnl_cli_print_json(o);
		json_decref(o);
		return 0;
	}
	printf("File:       %s\n", cli->cfg.path ? cli->cfg.path : "(none)");
	printf("Server:     %s%s\n", cli->server,
	       cli->cfg.server ? "" : " (default)");
	printf("Project:    %s\n", cli->cfg.project
	                               ? cli->cfg.project
	                               : "(none: cnlab project use)");
	printf("Logged in:  %s\n",
	       cli->token ? "yes (a token is kept)" : "no (cnlab login)");
	return 0;
}

int cnl_cli_cmd_config_get(struct cnl_cli *cli)
{
	const char *key = cli->args.pos[0];

	if (strcmp(key, "server") == 0)
		printf("%s\n", cli->cfg.server ? cli->cfg.server : "");
	else if (strcmp(key, "project") == 0)
		printf("%s\n", cli->cfg.project ? cli->cfg.project : "");
	else
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "unknown setting '%s': server or project",
		                    key);
	return 0;
}

/* Whether @s is a plausible server URL: http(s)://HOST[:PORT][/...]. */
static bool url_ok(const char *s)
{
	const char *host = strncmp(s, "https://", 8) == 0  ? s + 8
	                   : strncmp(s, "http://", 7) == 0 ? s + 7
	                                                   : NULL;

	if (!host || !*host || *host == '/' || strlen(s) > 512)
		return false;
	for (const char *p = s; *p; p++)
		if ((unsigned char)*p <= ' ' || *p == '"' || *p == '\\')
			return false;
	return true;
}

int cnl_cli_cmd_config_set(struct cnl_cli *cli)
{
	const char *key = cli->args.pos[0], *v = cli->args.pos[1];
	bool if_unset = cnl_cli_flag(cli, "if-unset") != NULL;

	if (strcmp(key, "server") == 0) {
		if (!url_ok(v))
			return cnl_cli_fail(
			    CNL_EXIT_USAGE,
			    "server: not an http:// or https:// "
			    "URL: %s",
			    v);
		if (if_unset && cli->cfg.server)
			return 0;
		/* Tokens stay with the servers that issued them (hosts):
		 * this one is used again when the server is chosen again. */
		cnl_cli_config_set(&cli->cfg.server, v);
	} else if (strcmp(key, "project") == 0) {
		if (!*v || strlen(v) > 63 ||
		    strspn(
		        v,
		        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		        "0123456789._-") != strlen(v))
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "project: not a project name: %s",
			                    v);
		if (if_unset && cli->cfg.project)
			return 0;
		cnl_cli_config_set(&cli->cfg.project, v);
	} else {
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "unknown setting '%s': server or project",
		                    key);
	}
	return cnl_cli_save_config(cli);
}
