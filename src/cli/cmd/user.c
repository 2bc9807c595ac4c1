/*
 * user.c - cnlab user create|list|show|invite (administrators).
 *
 * A new user gets a password in one of two ways.  By default an
 * invitation: the server makes a one-time token, valid a week, that the
 * administrator passes on and the user redeems with cnlab login --invite,
 * choosing their own password; the administrator never knows it.  With
 * --password-stdin the administrator sets the password (scripts, CI).
 * cnlab user invite NAME makes a new invitation for an existing user (a
 * password reset: the old password works until the new one is set).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/format.h"
#include "common/util.h"

/* How the user redeems @invite (the "invite" object of a reply). */
static void print_invite(struct cnl_cli *cli, const char *name,
                         const json_t *invite)
{
	printf("  One-time invitation for %s (valid until %s):\n"
	       "    cnlab login --server %s --user %s --invite %s\n"
	       "  Give it to %s privately; it sets their own password.\n",
	       name, cnl_cli_str(invite, "expires_at", "?"), cli->server, name,
	       cnl_cli_str(invite, "token", "?"), name);
}

int cnl_cli_cmd_user_create(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	bool from_stdin = cnl_cli_flag(cli, "password-stdin") != NULL;
	char pw[1100];
	json_t *body, *o;
	int code;

	if (from_stdin) {
		if (cnl_cli_read_line(stdin, pw, sizeof(pw)) < 0 || !pw[0])
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "--password-stdin: no password on "
			                    "stdin");
		body = json_pack("{s:s,s:s}", "name", name, "password", pw);
		explicit_bzero(pw, sizeof(pw));
	} else {
		body = json_pack("{s:s,s:b}", "name", name, "invite", 1);
	}
	code = cnl_cli_call(cli, "POST", "/v1/users", body, NULL, NULL, &o);
	json_decref(body);
	if (code)
		return code;
	if (cli->json) {
		cnl_cli_print_json(o);
	} else {
		printf("✓ Created user %s (%s)\n", name,
		       cnl_cli_str(o, "id", "?"));
		if (json_object_get(o, "invite"))
			print_invite(cli, name, json_object_get(o, "invite"));
		printf("  Next: cnlab project member add PROJECT %s "
		       "(see cnlab project list)\n",
		       name);
	}
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_user_invite(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	json_t *o;
	int code = cnl_cli_call_named(cli, "POST", "/v1/users/", "/invite",
	                              "user", name, NULL, &o);

	if (code || !o)
		return code;
	print_invite(cli, cnl_cli_str(o, "name", name),
	             json_object_get(o, "invite"));
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_user_list(struct cnl_cli *cli)
{
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_list_begin(
	         cli, "/v1/users?limit=1000", NULL, &t, 3,
	         (const char *[]){"NAME", "ID", "CREATED"}, &o)) ||
	    !o)
		return code;
	json_array_foreach (json_object_get(o, "items"), i, it)
		cnl_cli_table_add(
		    &t, (const char *[]){cnl_cli_str(it, "name", "?"),
		                         cnl_cli_str(it, "id", "?"),
		                         cnl_cli_str(it, "created_at", "?")});
	return cnl_cli_list_end(&t, o);
}

int cnl_cli_cmd_user_show(struct cnl_cli *cli)
{
	json_t *o, *m;
	size_t i;
	int code = cnl_cli_call_named(cli, "GET", "/v1/users/", "", "user",
	                              cli->args.pos[0], NULL, &o);

	if (code || !o)
		return code;
	printf("User:      %s\n", cnl_cli_str(o, "name", "?"));
	printf("ID:        %s\n", cnl_cli_str(o, "id", "?"));
	printf("Created:   %s\n", cnl_cli_str(o, "created_at", "?"));
	printf("Password:  %s\n",
	       json_is_true(json_object_get(o, "password_set"))
	           ? "set"
	           : "not set (invited: cnlab login --invite)");
	if (json_is_true(json_object_get(o, "invite_pending")))
		printf("Invite:    pending\n");
	if (!json_array_size(json_object_get(o, "memberships")))
		printf("Projects:  none (cnlab project member add PROJECT "
		       "%s)\n",
		       cnl_cli_str(o, "name", "?"));
	json_array_foreach (json_object_get(o, "memberships"), i, m)
		printf("Project:   %s (%s)\n", cnl_cli_str(m, "project", "?"),
		       cnl_cli_str(m, "role", "?"));
	json_decref(o);
	return 0;
}
