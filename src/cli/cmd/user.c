/*
 * user.c - cnlab user create|list|show|invite|disable|enable|link|unlink
 * (administrators).
 *
 * A new user gets a password in one of two ways.  By default an
 * invitation: the server makes a one-time token, valid a week, that the
 * administrator passes on and the user redeems with cnlab login --invite,
 * choosing their own password; the administrator never knows it.  With
 * --password-stdin the administrator sets the password (scripts, CI).
 * cnlab user invite NAME makes a new invitation for an existing user (a
 * password reset: the old password works until the new one is set).
 *
 * cnlab user disable NAME refuses every credential of the user (sessions,
 * API tokens, OIDC ID tokens) from the next request on, without stopping
 * their running work; cnlab user enable NAME lets their API tokens in
 * again (sessions were ended: they log in again).  cnlab user link NAME
 * --oidc-subject SUB lets the OIDC identity (issuer, SUB) sign in as NAME:
 * OIDC users are never matched by name; cnlab user unlink NAME
 * --oidc-subject SUB takes the link away again (and ends the sessions the
 * identity made).
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
	         cli, "/v1/users?limit=1000", NULL, &t, 4,
	         (const char *[]){"NAME", "ID", "CREATED", "STATE"}, &o)) ||
	    !o)
		return code;
	json_array_foreach (json_object_get(o, "items"), i, it)
		cnl_cli_table_add(
		    &t, (const char *[]){
		            cnl_cli_str(it, "name", "?"),
		            cnl_cli_str(it, "id", "?"),
		            cnl_cli_str(it, "created_at", "?"),
		            json_is_true(json_object_get(it, "disabled"))
		                ? "disabled"
		                : "enabled"});
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
	printf("State:     %s\n", json_is_true(json_object_get(o, "disabled"))
	                              ? "disabled (cnlab user enable NAME)"
	                              : "enabled");
	json_array_foreach (json_object_get(o, "oidc"), i, m)
		printf("OIDC:      %s (issuer %s)\n",
		       cnl_cli_str(m, "subject", "?"),
		       cnl_cli_str(m, "issuer", "?"));
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

/* POST /v1/users/NAME/@what ("disable" or "enable"). */
static int set_enabled(struct cnl_cli *cli, const char *what)
{
	const char *name = cli->args.pos[0];
	char tail[16];
	json_t *o;
	int code;

	snprintf(tail, sizeof(tail), "/%s", what);
	code = cnl_cli_call_named(cli, "POST", "/v1/users/", tail, "user", name,
	                          NULL, &o);
	if (code || !o)
		return code;
	if (strcmp(what, "disable") == 0)
		printf("✓ Disabled %s: their sessions, API tokens and OIDC "
		       "sign-ins are refused from now on (running work goes "
		       "on)\n",
		       cnl_cli_str(o, "name", name));
	else
		printf("✓ Enabled %s: API tokens work again; sessions need a "
		       "new login\n",
		       cnl_cli_str(o, "name", name));
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_user_disable(struct cnl_cli *cli)
{
	return set_enabled(cli, "disable");
}

int cnl_cli_cmd_user_enable(struct cnl_cli *cli)
{
	return set_enabled(cli, "enable");
}

int cnl_cli_cmd_user_link(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	const char *sub = cnl_cli_flag(cli, "oidc-subject");
	const char *iss = cnl_cli_flag(cli, "issuer");
	json_t *body, *o;
	int code;

	if (!sub || !*sub)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "--oidc-subject SUB is required (the "
		                    "\"sub\" of the user's ID tokens)");
	body = json_pack("{s:s}", "subject", sub);
	if (iss)
		json_object_set_new(body, "issuer", json_string(iss));
	code = cnl_cli_call_named(cli, "POST", "/v1/users/", "/oidc", "user",
	                          name, body, &o);
	json_decref(body);
	if (code || !o)
		return code;
	printf("✓ OIDC subject %s now signs in as %s\n", sub,
	       cnl_cli_str(o, "name", name));
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_user_unlink(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	const char *sub = cnl_cli_flag(cli, "oidc-subject");
	const char *iss = cnl_cli_flag(cli, "issuer");
	_cleanup_free_ char *ename = NULL, *esub = NULL, *eiss = NULL,
	                    *path = NULL;
	json_t *o = NULL;
	int code;

	if (!sub || !*sub)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "--oidc-subject SUB is required (the "
		                    "\"sub\" of the linked identity)");
	if (iss && !*iss)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "--issuer URL must not be empty");
	ename = cnl_client_url_escape(name);
	esub = cnl_client_url_escape(sub);
	if (iss)
		eiss = cnl_client_url_escape(iss);
	path = cnl_cli_pathf("/v1/users/%s/oidc?subject=%s%s%s", ename, esub,
	                     eiss ? "&issuer=" : "", eiss ? eiss : "");
	/* No "what": a 404 says whether the user or the link is missing. */
	if ((code = cnl_cli_call(cli, "DELETE", path, NULL, NULL, NULL, &o)))
		return code;
	if (cli->json) {
		cnl_cli_print_json(o);
		json_decref(o);
		return 0;
	}
	printf("✓ OIDC subject %s no longer signs in as %s (its sessions "
	       "ended)\n",
	       sub, cnl_cli_str(o, "name", name));
	json_decref(o);
	return 0;
}
