/*
 * auth.c - cnlab login, logout and whoami: getting a token (a password, an
 * API token, an OIDC ID token or a browser sign-in, the last two exchanged
 * for a session), choosing the default project, keeping both in the
 * settings file; logout ends the session on the server.
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

/* Prompt on the terminal with @prompt for a password, echo off. */
static int read_password_tty(const char *prompt, char *buf, size_t len)
{
	FILE *tty = fopen("/dev/tty", "r+");
	struct termios old, quiet;
	bool restore = false;
	int r;

	if (!tty)
		return -1;
	fputs(prompt, tty);
	fflush(tty);
	if (tcgetattr(fileno(tty), &old) == 0) {
		quiet = old;
		quiet.c_lflag &= ~(tcflag_t)ECHO;
		restore = tcsetattr(fileno(tty), TCSAFLUSH, &quiet) == 0;
	}
	r = cnl_cli_read_line(tty, buf, len);
	if (restore)
		tcsetattr(fileno(tty), TCSAFLUSH, &old);
	fputc('\n', tty);
	fclose(tty);
	return r;
}

/* Whether whoami @me lists a membership in project @name. */
static bool member_of(const json_t *me, const char *name)
{
	const json_t *m;
	size_t i;

	json_array_foreach (json_object_get(me, "memberships"), i, m)
		if (strcmp(cnl_cli_str(m, "project", ""), name) == 0)
			return true;
	return false;
}

/* After a token is known: check it, pick the default project, save. */
static int finish_login(struct cnl_cli *cli, const char *token)
{
	json_t *me, *m;
	const char *proj = NULL;
	size_t i, n = 0;
	int code;

	cli->token = token;
	cnl_client_free(cli->client);
	cli->client = NULL;
	if ((code = cnl_cli_call(cli, "GET", "/v1/auth/whoami", NULL, NULL,
	                         NULL, &me)))
		return code;
	json_array_foreach (json_object_get(me, "memberships"), i, m) {
		if (strcmp(cnl_cli_str(m, "project", ""), "system") == 0)
			continue;
		proj = cnl_cli_str(m, "project", NULL);
		n++;
	}
	cnl_cli_config_set(&cli->cfg.server, cli->server);
	cli->server = cli->cfg.server; /* the old string may be gone */
	cnl_cli_config_set(&cli->cfg.token_server, cli->server);
	cnl_cli_config_set(&cli->cfg.token, token);
	/* The default project: the only one, or a remembered one that the
	 * user (perhaps someone else on this account) no longer has. */
	if (cli->cfg.project && !member_of(me, cli->cfg.project))
		cnl_cli_config_set(&cli->cfg.project, NULL);
	if (n == 1 && !cli->cfg.project)
		cnl_cli_config_set(&cli->cfg.project, proj);
	if ((code = cnl_cli_save_config(cli))) {
		json_decref(me);
		return code;
	}
	fprintf(stderr, "✓ Logged in to %s as %s", cli->server,
	        cnl_cli_str(me, "name", "?"));
	if (cli->cfg.project)
		fprintf(stderr, " (project %s)", cli->cfg.project);
	fputc('\n', stderr);
	if (n == 0 && json_is_true(json_object_get(me, "admin")))
		fprintf(stderr,
		        "  You are in no project yet: cnlab project create "
		        "NAME, then cnlab project member add NAME %s\n",
		        cnl_cli_str(me, "name", "?"));
	else if (n == 0)
		fprintf(stderr,
		        "  You are in no project yet, so you cannot run work: "
		        "ask an administrator to run\n"
		        "    cnlab project member add PROJECT %s\n",
		        cnl_cli_str(me, "name", "?"));
	else if (n > 1 && !cli->cfg.project)
		fprintf(stderr,
		        "  You are in %zu projects: choose one with cnlab "
		        "project use NAME (see cnlab project list)\n",
		        n);
	json_decref(me);
	return 0;
}

/*
 * cnlab login --invite TOKEN: choose a password (asked twice on a
 * terminal, else one line of stdin) and redeem the invitation; the reply
 * is a session, kept as a login's.
 */
static int redeem(struct cnl_cli *cli, const char *invite)
{
	char pw[512], again[512];
	json_t *body, *o;
	char *t;
	int code;

	if (cnl_cli_flag(cli, "password-stdin") || !isatty(STDIN_FILENO)) {
		if (cnl_cli_read_line(stdin, pw, sizeof(pw)) < 0 || !pw[0])
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "no new password on stdin");
	} else {
		if (read_password_tty("Choose a password: ", pw, sizeof(pw)) <
		        0 ||
		    read_password_tty("Again: ", again, sizeof(again)) < 0)
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "cannot read a password");
		code = strcmp(pw, again);
		explicit_bzero(again, sizeof(again));
		if (code) {
			explicit_bzero(pw, sizeof(pw));
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "the passwords differ; nothing "
			                    "changed");
		}
	}
	if (strlen(pw) < 8) {
		explicit_bzero(pw, sizeof(pw));
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "choose a password of at least 8 "
		                    "characters");
	}
	body = json_pack("{s:s,s:s}", "invite", invite, "password", pw);
	explicit_bzero(pw, sizeof(pw));
	code =
	    cnl_cli_call(cli, "POST", "/v1/auth/redeem", body, NULL, NULL, &o);
	json_decref(body);
	if (code)
		return code;
	t = cnl_xstrdup(cnl_cli_str(o, "token", ""));
	json_decref(o);
	code = finish_login(cli, t);
	cli->token = NULL;
	free(t);
	return code;
}

/*
 * An OIDC ID token (from --id-token or the browser) for a CNLab session:
 * POST /v1/auth/session with the ID token as the bearer.  The session is
 * what is stored, so that cnlab logout can end it.
 */
static int oidc_login(struct cnl_cli *cli, const char *id_token)
{
	json_t *o;
	char *t;
	int code;

	cli->token = id_token;
	cnl_client_free(cli->client);
	cli->client = NULL;
	code =
	    cnl_cli_call(cli, "POST", "/v1/auth/session", NULL, NULL, NULL, &o);
	cli->token = NULL;
	cnl_client_free(cli->client);
	cli->client = NULL;
	if (code)
		return code;
	t = cnl_xstrdup(cnl_cli_str(o, "token", ""));
	json_decref(o);
	code = finish_login(cli, t);
	cli->token = NULL;
	free(t);
	return code;
}

int cnl_cli_cmd_login(struct cnl_cli *cli)
{
	const char *user = cnl_cli_flag(cli, "user");
	const char *tok = cnl_cli_flag(cli, "token");
	const char *idt = cnl_cli_flag(cli, "id-token");
	const char *invite = cnl_cli_flag(cli, "invite");
	bool web = cnl_cli_flag(cli, "web") != NULL;
	char ubuf[128], pw[512], sbuf[512];
	json_t *body, *o;
	int code;

	cli->logging_in = true;
	/* Nowhere to go yet (no --server, CNLAB_SERVER or saved server):
	 * ask, on a terminal. */
	if (!cnl_cli_flag(cli, "server") && !getenv("CNLAB_SERVER") &&
	    !cli->cfg.server && isatty(STDIN_FILENO)) {
		fprintf(stderr, "Server [%s]: ", cli->server);
		if (cnl_cli_read_line(stdin, sbuf, sizeof(sbuf)) == 0 &&
		    sbuf[0])
			cli->server = sbuf;
	}
	if (!!tok + !!idt + !!invite + !!web > 1)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "give one of --token, --id-token, --web "
		                    "and --invite");
	if (invite)
		return redeem(cli, invite);
	if (idt)
		return oidc_login(cli, idt);
	if (web) {
		char *t = NULL;

		cli->token = NULL; /* GET /v1/auth/oidc needs none */
		if ((code = cnl_cli_web_id_token(cli, &t)))
			return code;
		code = oidc_login(cli, t);
		explicit_bzero(t, strlen(t));
		free(t);
		return code;
	}
	if (tok) {
		/* An API token (cnl_...) is stored as the bearer. */
		char *t = cnl_xstrdup(tok);

		code = finish_login(cli, t);
		cli->token = NULL;
		free(t);
		return code;
	}
	if (!user) {
		if (!isatty(STDIN_FILENO) ||
		    cnl_cli_flag(cli, "password-stdin"))
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "--user NAME is needed when the "
			                    "password comes from stdin");
		fputs("User: ", stderr);
		if (cnl_cli_read_line(stdin, ubuf, sizeof(ubuf)) < 0 ||
		    !ubuf[0])
			return cnl_cli_fail(CNL_EXIT_USAGE, "no user name");
		user = ubuf;
	}
	if (cnl_cli_flag(cli, "password-stdin") || !isatty(STDIN_FILENO)) {
		if (cnl_cli_read_line(stdin, pw, sizeof(pw)) < 0)
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "no password on stdin");
	} else if (read_password_tty("Password: ", pw, sizeof(pw)) < 0) {
		return cnl_cli_fail(CNL_EXIT_USAGE, "cannot read a password");
	}
	body = json_pack("{s:s,s:s}", "user", user, "password", pw);
	explicit_bzero(pw, sizeof(pw));
	code =
	    cnl_cli_call(cli, "POST", "/v1/auth/login", body, NULL, NULL, &o);
	json_decref(body);
	if (code)
		return code;
	{
		char *t = cnl_xstrdup(cnl_cli_str(o, "token", ""));

		json_decref(o);
		code = finish_login(cli, t);
		cli->token = NULL;
		free(t);
	}
	return code;
}

/*
 * cnlab logout: end the stored session on the server (POST
 * /v1/auth/logout), then forget the token here.  When the server cannot
 * be reached (or the token is an API token) the token is forgotten all
 * the same, with a warning that it was not ended there.
 */
int cnl_cli_cmd_logout(struct cnl_cli *cli)
{
	json_t *o = NULL;
	int code;

	if (cli->cfg.token && cli->token == cli->cfg.token) {
		code = cnl_cli_call(cli, "POST", "/v1/auth/logout", NULL, NULL,
		                    NULL, &o);
		json_decref(o);
		if (code && code != CNL_EXIT_AUTH)
			fprintf(stderr,
			        "cnlab: warning: the server did not end the "
			        "session (see above); forgetting the token "
			        "here anyway\n");
	}
	cnl_cli_config_set(&cli->cfg.token, NULL);
	if ((code = cnl_cli_save_config(cli)))
		return code;
	fprintf(stderr, "✓ Logged out (token removed from %s)\n",
	        cli->cfg.path);
	return 0;
}

int cnl_cli_cmd_whoami(struct cnl_cli *cli)
{
	json_t *me, *m;
	size_t i;
	int code;

	if ((code = cnl_cli_call(cli, "GET", "/v1/auth/whoami", NULL, NULL,
	                         NULL, &me)))
		return code;
	if (cli->json)
		return cnl_cli_print_json(me), json_decref(me), 0;
	printf("User:     %s%s\n", cnl_cli_str(me, "name", "?"),
	       json_is_true(json_object_get(me, "admin")) ? " (admin)" : "");
	printf("Server:   %s\n", cli->server);
	json_array_foreach (json_object_get(me, "memberships"), i, m)
		printf("Project:  %s (%s)\n", cnl_cli_str(m, "project", "?"),
		       cnl_cli_str(m, "role", "?"));
	json_decref(me);
	return 0;
}
