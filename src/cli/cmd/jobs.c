/*
 * jobs.c - cnlab jobs list|show|cancel (jobs logs and run are in run.c).
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

int cnl_cli_cmd_jobs_list(struct cnl_cli *cli)
{
	char pname[CNL_CLI_ID_MAX];
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_project_items(cli, "jobs", pname, &o)))
		return code;
	if (cli->json)
		return cnl_cli_print_json(o), json_decref(o), 0;
	cnl_cli_table_init(&t, 6);
	cnl_cli_table_add(&t, (const char *[]){"ID", "STATE", "PRIORITY", "GPU",
	                                       "EXIT", "COMMAND"});
	json_array_foreach (json_object_get(o, "items"), i, it) {
		char ex[16] = "-", cmd[48];
		const char *state = cnl_cli_str(it, "state", "?");

		if (strcmp(state, "succeeded") == 0 ||
		    strcmp(state, "failed") == 0)
			snprintf(ex, sizeof(ex), "%lld",
			         (long long)json_integer_value(
			             json_object_get(it, "exit_code")));
		snprintf(cmd, sizeof(cmd), "%s",
		         cnl_cli_str(it, "command", ""));
		if (strlen(cnl_cli_str(it, "command", "")) >= sizeof(cmd))
			memcpy(cmd + sizeof(cmd) - 4, "...", 4);
		cnl_cli_table_add(
		    &t, (const char *[]){cnl_cli_str(it, "id", "?"), state,
		                         cnl_cli_str(it, "priority", "?"),
		                         cnl_cli_str(it, "gpu", "?"), ex, cmd});
	}
	cnl_cli_table_print(&t, stdout);
	cnl_cli_table_done(&t);
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_jobs_show(struct cnl_cli *cli)
{
	_cleanup_free_ char *path =
	    cnl_cli_pathf("/v1/jobs/%s", cli->args.pos[0]);
	json_t *o, *st;
	int code;

	if ((code = cnl_cli_call(cli, "GET", path, NULL, NULL, "job", &o)))
		return code;
	if (cli->json)
		return cnl_cli_print_json(o), json_decref(o), 0;
	st = json_object_get(o, "status");
	printf("ID:        %s\n", cnl_cli_str(o, "id", "?"));
	printf("State:     %s", cnl_cli_str(o, "state", "?"));
	if (json_is_object(st))
		printf(" (%s%s%s)", cnl_cli_str(st, "phase", "?"),
		       json_object_get(st, "node") ? " on " : "",
		       cnl_cli_str(st, "node", ""));
	printf("\nCommand:   %s\n", cnl_cli_str(o, "command", ""));
	printf("GPU:       %s\n", cnl_cli_str(o, "gpu", "?"));
	printf("Priority:  %s\n", cnl_cli_str(o, "priority", "?"));
	printf("Deadline:  %s\n", cnl_cli_str(o, "deadline", "none"));
	printf("Exit code: %lld\n",
	       (long long)json_integer_value(json_object_get(o, "exit_code")));
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_jobs_cancel(struct cnl_cli *cli)
{
	_cleanup_free_ char *path =
	    cnl_cli_pathf("/v1/jobs/%s/cancel", cli->args.pos[0]);
	json_t *o;
	int code;

	if ((code = cnl_cli_call(cli, "POST", path, NULL, NULL, "job", &o)))
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Cancelling %s (state: %s)\n", cli->args.pos[0],
		       cnl_cli_str(o, "state", "?"));
	json_decref(o);
	return 0;
}
