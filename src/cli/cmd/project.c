/*
 * project.c - cnlab project list|use|mark.
 */
#define _GNU_SOURCE /* vasprintf */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/format.h"
#include "common/time.h"
#include "common/util.h"

int cnl_cli_cmd_project_list(struct cnl_cli *cli)
{
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_call(cli, "GET", "/v1/projects?limit=1000", NULL,
	                         NULL, NULL, &o)))
		return code;
	if (cli->json)
		return cnl_cli_print_json(o), json_decref(o), 0;
	cnl_cli_table_init(&t, 4);
	cnl_cli_table_add(&t,
	                  (const char *[]){"NAME", "ID", "ON-PREM-ONLY", ""});
	json_array_foreach (json_object_get(o, "items"), i, it) {
		const char *n = cnl_cli_str(it, "name", "?");

		cnl_cli_table_add(
		    &t, (const char *[]){
		            n, cnl_cli_str(it, "id", "?"),
		            json_is_true(json_object_get(it, "on_prem_only"))
		                ? "yes"
		                : "no",
		            cli->cfg.project && !strcmp(cli->cfg.project, n)
		                ? "(default)"
		                : ""});
	}
	cnl_cli_table_print(&t, stdout);
	cnl_cli_table_done(&t);
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_project_use(struct cnl_cli *cli)
{
	char pid[CNL_CLI_ID_MAX], pname[CNL_CLI_ID_MAX];
	int code;

	if ((code = cnl_cli_project(cli, cli->args.pos[0], pid, pname)))
		return code;
	cnl_cli_config_set(&cli->cfg.project, pname);
	if ((code = cnl_cli_save_config(cli)))
		return code;
	printf("✓ Default project: %s\n", pname);
	return 0;
}

int cnl_cli_cmd_project_mark(struct cnl_cli *cli)
{
	bool on = cnl_cli_flag(cli, "on-prem-only") != NULL;
	bool off = cnl_cli_flag(cli, "no-on-prem-only") != NULL;
	char pid[CNL_CLI_ID_MAX], pname[CNL_CLI_ID_MAX];
	_cleanup_free_ char *path = NULL;
	json_t *body, *o;
	int code;

	if (on == off)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "give one of --on-prem-only and "
		                    "--no-on-prem-only");
	if ((code = cnl_cli_project(cli, cli->args.pos[0], pid, pname)))
		return code;
	path = cnl_cli_pathf("/v1/projects/%s", pid);
	body = json_pack("{s:b}", "on_prem_only", on);
	code = cnl_cli_call(cli, "PATCH", path, body, NULL, "project", &o);
	json_decref(body);
	if (code)
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else if (on)
		printf("✓ Project %s is on-prem only: bursting is now "
		       "disabled for it\n",
		       pname);
	else
		printf("✓ Project %s may burst to the cloud again\n", pname);
	json_decref(o);
	return 0;
}
