/*
 * token.c - cnlab token create|list|revoke: API tokens for scripts and CI.
 *
 * A token acts as the user who made it, until it expires or is revoked;
 * the secret is shown once (the server keeps only its SHA-256).  CI uses
 * it as CNLAB_TOKEN, or stores it with cnlab login --token.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/format.h"
#include "common/util.h"

int cnl_cli_cmd_token_create(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	const char *days = cnl_cli_flag(cli, "expires-in-days");
	json_t *body, *o;
	char *end;
	long d = 90;
	int code;

	if (days) {
		d = strtol(days, &end, 10);
		if (end == days || *end || d < 0 || d > 3650)
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "--expires-in-days: a whole number "
			                    "of days, 0..3650 (0: never)");
	}
	body = json_pack("{s:s,s:I}", "name", name, "expires_in_days",
	                 (json_int_t)d);
	code =
	    cnl_cli_call(cli, "POST", "/v1/auth/tokens", body, NULL, NULL, &o);
	json_decref(body);
	if (code)
		return code;
	if (cli->json) {
		cnl_cli_print_json(o);
	} else {
		const json_t *exp = json_object_get(o, "expires_at");

		/* The secret alone on stdout, so that $(...) captures it. */
		printf("%s\n", cnl_cli_str(o, "token", "?"));
		fprintf(stderr,
		        "✓ Token %s (%.12s) %s%s: shown once; use it as "
		        "CNLAB_TOKEN or with cnlab login --token\n",
		        name, cnl_cli_str(o, "id", "?"),
		        json_is_string(exp) ? "expires " : "never expires",
		        json_is_string(exp) ? json_string_value(exp) : "");
	}
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_token_list(struct cnl_cli *cli)
{
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_list_begin(
	         cli, "/v1/auth/tokens?limit=1000", NULL, &t, 4,
	         (const char *[]){"NAME", "ID", "CREATED", "EXPIRES"}, &o)) ||
	    !o)
		return code;
	json_array_foreach (json_object_get(o, "items"), i, it) {
		char id[16];

		snprintf(id, sizeof(id), "%.12s", cnl_cli_str(it, "id", "?"));
		cnl_cli_table_add(
		    &t,
		    (const char *[]){cnl_cli_str(it, "name", "?"), id,
		                     cnl_cli_str(it, "created_at", "?"),
		                     cnl_cli_str(it, "expires_at", "never")});
	}
	if (t.nrows > 1)
		return cnl_cli_list_end(&t, o);
	fprintf(stderr, "No API tokens: make one with cnlab token create "
	                "NAME\n");
	cnl_cli_table_done(&t);
	json_decref(o);
	return 0;
}

/* cnlab token revoke NAME|ID: a name, a whole id, or its first 12+ hex of
 * one of the caller's tokens; or the whole id of any token. */
int cnl_cli_cmd_token_revoke(struct cnl_cli *cli)
{
	const char *want = cli->args.pos[0];
	_cleanup_free_ char *path = NULL, *id = NULL;
	json_t *o, *it;
	size_t i, n = 0;
	int code;

	if ((code = cnl_cli_call(cli, "GET", "/v1/auth/tokens?limit=1000", NULL,
	                         NULL, NULL, &o)))
		return code;
	json_array_foreach (json_object_get(o, "items"), i, it) {
		const char *tid = cnl_cli_str(it, "id", "");

		if (strcmp(cnl_cli_str(it, "name", ""), want) == 0 ||
		    (strlen(want) >= 12 &&
		     strncmp(tid, want, strlen(want)) == 0)) {
			free(id);
			id = cnl_xstrdup(tid);
			n++;
		}
	}
	json_decref(o);
	/* A whole id that is not ours (an agent's join token): the server
	 * decides; administrators may revoke it, anyone else gets 404. */
	if (n == 0 && strlen(want) == 64 &&
	    strspn(want, "0123456789abcdef") == 64) {
		id = cnl_xstrdup(want);
		n = 1;
	}
	if (n == 0)
		return cnl_cli_fail(CNL_EXIT_NOT_FOUND,
		                    "token \"%s\" not found: see cnlab token "
		                    "list",
		                    want);
	if (n > 1)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "\"%s\" names %zu tokens: give more of the "
		                    "id (cnlab token list -o json)",
		                    want, n);
	path = cnl_cli_pathf("/v1/auth/tokens/%s", id);
	if ((code = cnl_cli_call(cli, "DELETE", path, NULL, NULL, "token", &o)))
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Revoked token %s (%.12s): it no longer works\n", want,
		       id);
	json_decref(o);
	return 0;
}
