/*
 * project.c - cnlab project list|use|mark|create|show|delete and cnlab
 * project member add|list|set-role|remove.
 *
 * Roles, lowest first: viewer (sees the project's work), member (runs
 * jobs and servers), project-admin (manages members and flags).
 * Administrators create and delete projects; project-admins manage the
 * members of their own.
 */
#include <stdio.h>
#include <string.h>
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

	if ((code = cnl_cli_list_begin(
	         cli, "/v1/projects?limit=1000", NULL, &t, 4,
	         (const char *[]){"NAME", "ID", "ON-PREM-ONLY", ""}, &o)) ||
	    !o)
		return code;
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
	return cnl_cli_list_end(&t, o);
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

/* PATCH project @pid with @body (taken): 0 with the project in *@ret, or
 * NULL when --json printed it; else an exit code. */
static int patch(struct cnl_cli *cli, const char *pid, json_t *body,
                 json_t **ret)
{
	_cleanup_free_ char *path = cnl_cli_pathf("/v1/projects/%s", pid);
	int code = cnl_cli_call(cli, "PATCH", path, body, NULL, "project", ret);

	json_decref(body);
	if (!code && cli->json) {
		cnl_cli_print_json(*ret);
		json_decref(*ret);
		*ret = NULL;
	}
	return code;
}

int cnl_cli_cmd_project_mark(struct cnl_cli *cli)
{
	bool on = cnl_cli_flag(cli, "on-prem-only") != NULL;
	bool off = cnl_cli_flag(cli, "no-on-prem-only") != NULL;
	char pid[CNL_CLI_ID_MAX], pname[CNL_CLI_ID_MAX];
	json_t *o;
	int code;

	if (on == off)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "give one of --on-prem-only and "
		                    "--no-on-prem-only");
	if ((code = cnl_cli_project(cli, cli->args.pos[0], pid, pname)))
		return code;
	if ((code =
	         patch(cli, pid, json_pack("{s:b}", "on_prem_only", on), &o)))
		return code;
	if (!o)
		return 0; /* printed as JSON */
	if (on)
		printf("✓ Project %s is on-prem only: bursting is now "
		       "disabled for it\n",
		       pname);
	else
		printf("✓ Project %s may burst to the cloud again\n", pname);
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_project_pin(struct cnl_cli *cli)
{
	const char *list = cnl_cli_flag(cli, "clusters");
	char pid[CNL_CLI_ID_MAX], pname[CNL_CLI_ID_MAX];
	json_t *names, *o;
	int code;

	if (!list)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "give --clusters a,b (or \"\" for any)");
	if ((code = cnl_cli_project(cli, cli->args.pos[0], pid, pname)))
		return code;
	names = *list ? cnl_cli_comma_list(list, 31, 16) : json_array();
	if (!names)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "--clusters: 1..16 cluster names, "
		                    "comma-separated (or \"\" for any)");
	if ((code = patch(cli, pid, json_pack("{s:o}", "clusters", names), &o)))
		return code;
	if (!o)
		return 0; /* printed as JSON */
	if (json_array_size(json_object_get(o, "clusters")))
		printf("✓ Project %s's work now goes to clusters %s only\n",
		       pname, list);
	else
		printf("✓ Project %s's work may go to any cluster\n", pname);
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_project_create(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	json_t *body, *o;
	int code;

	body = json_pack("{s:s,s:b}", "name", name, "on_prem_only",
	                 cnl_cli_flag(cli, "on-prem-only") != NULL);
	code = cnl_cli_call(cli, "POST", "/v1/projects", body, NULL, NULL, &o);
	json_decref(body);
	if (code)
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Created project %s (%s)\n"
		       "  Next: cnlab project member add %s USER [--role "
		       "member|viewer|project-admin]\n",
		       name, cnl_cli_str(o, "id", "?"), name);
	json_decref(o);
	return 0;
}

/* The members of project @pid as a table on stdout. */
static int print_members(struct cnl_cli *cli, const char *pid, json_t **ret)
{
	_cleanup_free_ char *path =
	    cnl_cli_pathf("/v1/projects/%s/members?limit=1000", pid);
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_call(cli, "GET", path, NULL, NULL, "project", &o)))
		return code;
	if (ret) {
		*ret = o;
		return 0;
	}
	cnl_cli_table_init(&t, 3);
	cnl_cli_table_add(&t, (const char *[]){"USER", "ROLE", "ID"});
	json_array_foreach (json_object_get(o, "items"), i, it)
		cnl_cli_table_add(
		    &t, (const char *[]){cnl_cli_str(it, "user", "?"),
		                         cnl_cli_str(it, "role", "?"),
		                         cnl_cli_str(it, "user_id", "?")});
	return cnl_cli_list_end(&t, o);
}

int cnl_cli_cmd_project_show(struct cnl_cli *cli)
{
	char pid[CNL_CLI_ID_MAX], pname[CNL_CLI_ID_MAX];
	_cleanup_free_ char *path = NULL;
	json_t *o, *members;
	int code;

	if ((code = cnl_cli_project(cli, cli->args.pos[0], pid, pname)))
		return code;
	path = cnl_cli_pathf("/v1/projects/%s", pid);
	if ((code = cnl_cli_call(cli, "GET", path, NULL, NULL, "project", &o)))
		return code;
	if (cli->json) {
		if ((code = print_members(cli, pid, &members))) {
			json_decref(o);
			return code;
		}
		json_object_set(o, "members",
		                json_object_get(members, "items"));
		json_decref(members);
		cnl_cli_print_json(o);
		json_decref(o);
		return 0;
	}
	printf("Project:       %s\n", pname);
	printf("ID:            %s\n", pid);
	printf("Created:       %s\n", cnl_cli_str(o, "created_at", "?"));
	printf("On-prem only:  %s\n",
	       json_is_true(json_object_get(o, "on_prem_only")) ? "yes" : "no");
	{
		char pins[256] = "";
		size_t k;
		json_t *v;

		json_array_foreach (json_object_get(o, "clusters"), k, v)
			snprintf(pins + strlen(pins),
			         sizeof(pins) - strlen(pins), "%s%s",
			         k ? "," : "", json_string_value(v));
		printf("Clusters:      %s\n", pins[0] ? pins : "any");
	}
	json_decref(o);
	printf("\n");
	return print_members(cli, pid, NULL);
}

/* Ask on the terminal for the project's name again; whether it matched. */
static bool confirmed(const char *name)
{
	FILE *tty = fopen("/dev/tty", "r+");
	char buf[128];
	bool ok;

	if (!tty)
		return false;
	fprintf(tty,
	        "Delete project %s, its members, finished jobs, logs and "
	        "artifacts?\nType its name to confirm: ",
	        name);
	fflush(tty);
	ok = cnl_cli_read_line(tty, buf, sizeof(buf)) == 0 &&
	     strcmp(buf, name) == 0;
	fclose(tty);
	return ok;
}

int cnl_cli_cmd_project_delete(struct cnl_cli *cli)
{
	char pid[CNL_CLI_ID_MAX], pname[CNL_CLI_ID_MAX];
	_cleanup_free_ char *path = NULL;
	json_t *o;
	int code;

	if ((code = cnl_cli_project(cli, cli->args.pos[0], pid, pname)))
		return code;
	if (!cnl_cli_flag(cli, "yes")) {
		if (!isatty(STDIN_FILENO))
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "deleting project %s cannot be "
			                    "undone: add --yes to confirm",
			                    pname);
		if (!confirmed(pname))
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "not confirmed; nothing deleted");
	}
	path = cnl_cli_pathf("/v1/projects/%s", pid);
	if ((code =
	         cnl_cli_call(cli, "DELETE", path, NULL, NULL, "project", &o)))
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Deleted project %s\n", pname);
	json_decref(o);
	return 0;
}

static bool valid_role(const char *r)
{
	return strcmp(r, "viewer") == 0 || strcmp(r, "member") == 0 ||
	       strcmp(r, "project-admin") == 0;
}

/* POST the membership @user @role in project @want; prints the result. */
static int set_role(struct cnl_cli *cli, const char *want, const char *user,
                    const char *role, const char *verb)
{
	char pid[CNL_CLI_ID_MAX], pname[CNL_CLI_ID_MAX];
	_cleanup_free_ char *path = NULL;
	json_t *body, *o;
	int code;

	if (!valid_role(role))
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "role \"%s\": use viewer, member or "
		                    "project-admin",
		                    role);
	if ((code = cnl_cli_project(cli, want, pid, pname)))
		return code;
	path = cnl_cli_pathf("/v1/projects/%s/members", pid);
	body = json_pack("{s:s,s:s}", "user", user, "role", role);
	code = cnl_cli_call(cli, "POST", path, body, NULL, "user", &o);
	json_decref(body);
	if (code == CNL_EXIT_NOT_FOUND)
		fprintf(stderr,
		        "cnlab: (no user \"%s\"? create one with cnlab user "
		        "create %s)\n",
		        user, user);
	if (code)
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ %s %s %s in project %s\n", verb, user, role, pname);
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_member_add(struct cnl_cli *cli)
{
	const char *role = cnl_cli_flag(cli, "role");

	return set_role(cli, cli->args.pos[0], cli->args.pos[1],
	                role ? role : "member", "Added");
}

int cnl_cli_cmd_member_set_role(struct cnl_cli *cli)
{
	return set_role(cli, cli->args.pos[0], cli->args.pos[1],
	                cli->args.pos[2], "Made");
}

int cnl_cli_cmd_member_list(struct cnl_cli *cli)
{
	char pid[CNL_CLI_ID_MAX], pname[CNL_CLI_ID_MAX];
	json_t *o;
	int code;

	if ((code = cnl_cli_project(cli, cli->args.pos[0], pid, pname)))
		return code;
	if (!cli->json)
		return print_members(cli, pid, NULL);
	if ((code = print_members(cli, pid, &o)))
		return code;
	cnl_cli_print_json(o);
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_member_remove(struct cnl_cli *cli)
{
	const char *user = cli->args.pos[1];
	char pid[CNL_CLI_ID_MAX], pname[CNL_CLI_ID_MAX], what[160];
	_cleanup_free_ char *path = NULL, *e = NULL;
	json_t *o;
	int code;

	if ((code = cnl_cli_project(cli, cli->args.pos[0], pid, pname)))
		return code;
	e = cnl_client_url_escape(user);
	path = cnl_cli_pathf("/v1/projects/%s/members/%s", pid, e);
	snprintf(what, sizeof(what), "member \"%s\" of project %s", user,
	         pname);
	if ((code = cnl_cli_call(cli, "DELETE", path, NULL, NULL, what, &o)))
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Removed %s from project %s\n", user, pname);
	json_decref(o);
	return 0;
}
