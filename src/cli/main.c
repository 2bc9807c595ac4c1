/*
 * main.c - cnlab, the command-line client of the CNLab platform.
 *
 * The whole command surface is one table, cnl_cli_commands[] (after the
 * Redis command table): each row names the command's words ("server
 * create"), its positional arguments, its flags and its handler.  The
 * dispatcher, --help at every level, and the bash/zsh/fish completion
 * scripts (completion.c) are all generated from that table.
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

#define DEFAULT_SERVER "http://127.0.0.1:8080"
#define VERSION        "0.1.0"

/* ------------------------------------------------------------------------ */
/* Shared helpers                                                           */
/* ------------------------------------------------------------------------ */

int cnl_cli_fail(int code, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("cnlab: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return code;
}

const char *cnl_cli_str(const json_t *o, const char *key, const char *dflt)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : dflt;
}

int cnl_cli_print_json(const json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(2) | JSON_ENCODE_ANY);

	if (s) {
		puts(s);
		free(s);
	}
	return 0;
}

const char *cnl_cli_flag(struct cnl_cli *cli, const char *name)
{
	int i = cnl_cli_flag_find(cli->flags, cli->nflags, name);

	return i < 0 ? NULL : cli->args.values[i];
}

static struct cnl_cli_client *client(struct cnl_cli *cli)
{
	if (!cli->client)
		cli->client = cnl_cli_client_new(cli->server, cli->token);
	return cli->client;
}

/* Map an error reply to a message and an exit code. */
static int reply_error(struct cnl_cli *cli, const struct cnl_cli_reply *r,
                       const char *what)
{
	json_t *e = json_object_get(r->json, "error");
	const char *code = cnl_cli_str(e, "code", "");
	const char *msg = cnl_cli_str(e, "message", r->body ? r->body : "");

	switch (r->status) {
	case 401:
		if (cli->logging_in)
			return cnl_cli_fail(
			    CNL_EXIT_AUTH,
			    "the server refused these credentials (%s)", msg);
		return cnl_cli_fail(
		    CNL_EXIT_AUTH,
		    "not logged in, or the session expired (%s): "
		    "run cnlab login",
		    msg);
	case 403:
		if (strcmp(code, "quota_exceeded") == 0)
			return cnl_cli_fail(CNL_EXIT_REFUSED,
			                    "quota exceeded: %s", msg);
		return cnl_cli_fail(CNL_EXIT_REFUSED, "not permitted: %s", msg);
	case 404:
		if (what)
			return cnl_cli_fail(CNL_EXIT_NOT_FOUND,
			                    "%s not found (or not visible to "
			                    "you)",
			                    what);
		return cnl_cli_fail(CNL_EXIT_NOT_FOUND, "not found: %s", msg);
	case 400:
		return cnl_cli_fail(CNL_EXIT_USAGE, "rejected: %s", msg);
	case 422:
		return cnl_cli_fail(CNL_EXIT_REFUSED, "refused (%s): %s", code,
		                    msg);
	default:
		return cnl_cli_fail(CNL_EXIT_ERROR, "%s (HTTP %ld, %s)", msg,
		                    r->status, code[0] ? code : "error");
	}
}

/* Send a request; 0 and the reply, or an exit code after a message. */
static int request(struct cnl_cli *cli, const char *method, const char *path,
                   json_t *body, const char *idem, const char *what,
                   struct cnl_cli_reply *ret)
{
	bool public = strcmp(path, "/v1/auth/login") == 0;

	if (!public && !cli->token)
		return cnl_cli_fail(
		    CNL_EXIT_AUTH, "not logged in: run cnlab login (server %s)",
		    cli->server);
	if (!client(cli))
		return cnl_cli_fail(CNL_EXIT_ERROR, "cannot start libcurl");
	if (cnl_cli_request(cli->client, method, path, body, idem, ret) < 0)
		return cnl_cli_fail(CNL_EXIT_ERROR,
		                    "cannot reach %s: %s (check --server or "
		                    "CNLAB_SERVER)",
		                    cli->server, ret->error);
	if (ret->status < 200 || ret->status > 299) {
		int code = reply_error(cli, ret, what);

		cnl_cli_reply_done(ret);
		return code;
	}
	return 0;
}

int cnl_cli_call(struct cnl_cli *cli, const char *method, const char *path,
                 json_t *body, const char *idem, const char *what, json_t **ret)
{
	struct cnl_cli_reply r;
	int code = request(cli, method, path, body, idem, what, &r);

	if (code)
		return code;
	*ret = r.json ? json_incref(r.json) : json_null();
	cnl_cli_reply_done(&r);
	return 0;
}

int cnl_cli_call_raw(struct cnl_cli *cli, const char *path, const char *what,
                     struct cnl_cli_reply *ret)
{
	return request(cli, "GET", path, NULL, NULL, what, ret);
}

int cnl_cli_project(struct cnl_cli *cli, const char *want, char *id, char *name)
{
	json_t *o, *it, *found = NULL;
	size_t i, nreal = 0;
	char names[256] = "";
	int code;

	if (!want)
		want = cli->project_flag ? cli->project_flag : cli->cfg.project;
	code = cnl_cli_call(cli, "GET", "/v1/projects?limit=1000", NULL, NULL,
	                    NULL, &o);
	if (code)
		return code;
	json_array_foreach (json_object_get(o, "items"), i, it) {
		const char *n = cnl_cli_str(it, "name", "");

		if (want && (strcmp(n, want) == 0 ||
		             strcmp(cnl_cli_str(it, "id", ""), want) == 0)) {
			found = it;
			break;
		}
		if (!want && strcmp(n, "system") != 0) {
			found = it;
			nreal++;
			if (strlen(names) + strlen(n) + 3 < sizeof(names)) {
				if (names[0])
					strncat(names, ", ",
					        sizeof(names) - strlen(names) -
					            1);
				strncat(names, n,
				        sizeof(names) - strlen(names) - 1);
			}
		}
	}
	if (want && !found) {
		json_decref(o);
		return cnl_cli_fail(
		    CNL_EXIT_NOT_FOUND,
		    "project \"%s\" not found (or you are not a "
		    "member): see cnlab project list",
		    want);
	}
	if (!want && nreal == 0) {
		json_decref(o);
		return cnl_cli_fail(CNL_EXIT_NOT_FOUND,
		                    "you are not a member of any project: ask "
		                    "an administrator to add you to one");
	}
	if (!want && nreal > 1) {
		json_decref(o);
		return cnl_cli_fail(
		    CNL_EXIT_USAGE,
		    "you are in several projects (%s): pass "
		    "--project NAME, or set a default with cnlab "
		    "project use NAME",
		    names);
	}
	snprintf(id, CNL_CLI_ID_MAX, "%s", cnl_cli_str(found, "id", ""));
	snprintf(name, CNL_CLI_ID_MAX, "%s", cnl_cli_str(found, "name", ""));
	json_decref(o);
	return 0;
}

/* A path built with printf; the caller frees it. */
static char *pathf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *pathf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	if (!s) {
		fputs("cnlab: out of memory\n", stderr);
		exit(CNL_EXIT_ERROR);
	}
	return s;
}

/* Milliseconds from now until the RFC 3339 time @s; -1 if unknown. */
static int64_t until(const char *s)
{
	int64_t t;

	if (!s || cnl_time_parse_rfc3339(s, &t) < 0)
		return -1;
	t -= cnl_time_now_ms();
	return t < 0 ? 0 : t;
}

/* ------------------------------------------------------------------------ */
/* login, logout, whoami                                                     */
/* ------------------------------------------------------------------------ */

/* Read one line from @f into @buf without the newline; -1 on EOF. */
static int read_line(FILE *f, char *buf, size_t len)
{
	size_t n;

	if (!fgets(buf, (int)len, f))
		return -1;
	n = strlen(buf);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		buf[--n] = '\0';
	return 0;
}

/* Prompt on the terminal for a password, echo off. */
static int read_password_tty(char *buf, size_t len)
{
	FILE *tty = fopen("/dev/tty", "r+");
	struct termios old, quiet;
	bool restore = false;
	int r;

	if (!tty)
		return -1;
	fputs("Password: ", tty);
	fflush(tty);
	if (tcgetattr(fileno(tty), &old) == 0) {
		quiet = old;
		quiet.c_lflag &= ~(tcflag_t)ECHO;
		restore = tcsetattr(fileno(tty), TCSAFLUSH, &quiet) == 0;
	}
	r = read_line(tty, buf, len);
	if (restore)
		tcsetattr(fileno(tty), TCSAFLUSH, &old);
	fputc('\n', tty);
	fclose(tty);
	return r;
}

static int save_config(struct cnl_cli *cli)
{
	char err[512];

	if (!cli->cfg.path)
		return cnl_cli_fail(CNL_EXIT_ERROR,
		                    "no place for the config file: set HOME, "
		                    "XDG_CONFIG_HOME or CNLAB_CONFIG");
	if (cnl_cli_config_save(&cli->cfg, err, sizeof(err)) < 0)
		return cnl_cli_fail(CNL_EXIT_ERROR, "%s", err);
	return 0;
}

/* After a token is known: check it, pick the default project, save. */
static int finish_login(struct cnl_cli *cli, const char *token)
{
	json_t *me, *m;
	const char *proj = NULL;
	size_t i, n = 0;
	int code;

	cli->token = token;
	cnl_cli_client_free(cli->client);
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
	cnl_cli_config_set(&cli->cfg.token, token);
	if (n == 1 && !cli->cfg.project)
		cnl_cli_config_set(&cli->cfg.project, proj);
	if ((code = save_config(cli))) {
		json_decref(me);
		return code;
	}
	fprintf(stderr, "✓ Logged in to %s as %s", cli->server,
	        cnl_cli_str(me, "name", "?"));
	if (cli->cfg.project)
		fprintf(stderr, " (project %s)", cli->cfg.project);
	fputc('\n', stderr);
	json_decref(me);
	return 0;
}

static int cmd_login(struct cnl_cli *cli)
{
	const char *user = cnl_cli_flag(cli, "user");
	const char *tok = cnl_cli_flag(cli, "token");
	const char *idt = cnl_cli_flag(cli, "id-token");
	char ubuf[128], pw[512];
	json_t *body, *o;
	int code;

	cli->logging_in = true;
	if (tok && idt)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "give --token or --id-token, not both");
	if (tok || idt) {
		/* An API token (cnl_...) or an OIDC ID token: both are sent
		 * as the bearer; the server tells them apart. */
		char *t = cnl_xstrdup(tok ? tok : idt);

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
		if (read_line(stdin, ubuf, sizeof(ubuf)) < 0 || !ubuf[0])
			return cnl_cli_fail(CNL_EXIT_USAGE, "no user name");
		user = ubuf;
	}
	if (cnl_cli_flag(cli, "password-stdin") || !isatty(STDIN_FILENO)) {
		if (read_line(stdin, pw, sizeof(pw)) < 0)
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "no password on stdin");
	} else if (read_password_tty(pw, sizeof(pw)) < 0) {
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

static int cmd_logout(struct cnl_cli *cli)
{
	int code;

	cnl_cli_config_set(&cli->cfg.token, NULL);
	if ((code = save_config(cli)))
		return code;
	fprintf(stderr, "✓ Logged out (token removed from %s)\n",
	        cli->cfg.path);
	return 0;
}

static int cmd_whoami(struct cnl_cli *cli)
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

/* ------------------------------------------------------------------------ */
/* profiles                                                                  */
/* ------------------------------------------------------------------------ */

static void availability(const json_t *a, char *buf, size_t len)
{
	const json_t *now = json_object_get(a, "now");
	int64_t wait;
	char w[32];

	if (!json_is_object(a)) {
		snprintf(buf, len, "-");
		return;
	}
	if (json_is_true(now)) {
		snprintf(buf, len, "✓ now");
		return;
	}
	wait = until(cnl_cli_str(a, "estimated_start", NULL));
	if (wait < 0) {
		snprintf(buf, len, "✗ no capacity");
		return;
	}
	cnl_cli_format_wait(wait < 60000 ? 60000 : wait, w, sizeof(w));
	snprintf(buf, len, "queue: %s", w);
}

static int cmd_profiles_list(struct cnl_cli *cli)
{
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_call(cli, "GET", "/v1/profiles?limit=1000", NULL,
	                         NULL, NULL, &o)))
		return code;
	if (cli->json)
		return cnl_cli_print_json(o), json_decref(o), 0;
	cnl_cli_table_init(&t, 4);
	cnl_cli_table_add(
	    &t, (const char *[]){"NAME", "GPU", "SLICE", "AVAILABLE"});
	json_array_foreach (json_object_get(o, "items"), i, it) {
		char av[64];
		const char *type = cnl_cli_str(it, "gpu_type", "-");
		char gpu[64];

		/* "H100-80GB-SXM" reads as H100 in a narrow table. */
		snprintf(gpu, sizeof(gpu), "%s", type);
		gpu[strcspn(gpu, "-")] = '\0';
		availability(json_object_get(it, "availability"), av,
		             sizeof(av));
		cnl_cli_table_add(
		    &t, (const char *[]){cnl_cli_str(it, "name", "?"),
		                         gpu[0] ? gpu : type,
		                         cnl_cli_str(it, "slice", "-"), av});
	}
	cnl_cli_table_print(&t, stdout);
	cnl_cli_table_done(&t);
	json_decref(o);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* servers                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * The project's @what ("servers", "jobs"): GET /v1/projects/ID/@what into
 * *@ret; the project's name into @pname (CNL_CLI_ID_MAX).  0 or an exit
 * code.
 */
static int project_items(struct cnl_cli *cli, const char *what, char *pname,
                         json_t **ret)
{
	char pid[CNL_CLI_ID_MAX];
	_cleanup_free_ char *path = NULL;
	int code;

	if ((code = cnl_cli_project(cli, NULL, pid, pname)))
		return code;
	path = pathf("/v1/projects/%s/%s?limit=1000", pid, what);
	return cnl_cli_call(cli, "GET", path, NULL, NULL, NULL, ret);
}

/* Find the server @name (or id) in the current project. */
static int find_server(struct cnl_cli *cli, const char *name, json_t **ret)
{
	char pname[CNL_CLI_ID_MAX];
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = project_items(cli, "servers", pname, &o)))
		return code;
	json_array_foreach (json_object_get(o, "items"), i, it) {
		if (strcmp(cnl_cli_str(it, "name", ""), name) == 0 ||
		    strcmp(cnl_cli_str(it, "id", ""), name) == 0) {
			*ret = json_incref(it);
			json_decref(o);
			return 0;
		}
	}
	json_decref(o);
	return cnl_cli_fail(CNL_EXIT_NOT_FOUND,
	                    "server \"%s\" not found in project %s: see cnlab "
	                    "server list",
	                    name, pname);
}

/*
 * Wait until the server @id runs and has a URL, printing progress lines;
 * @limit_ms bounds the wait.  Prints the JSON or "✓ Ready: URL".
 */
static int wait_ready(struct cnl_cli *cli, const char *id, int64_t limit_ms)
{
	_cleanup_free_ char *path = pathf("/v1/servers/%s", id);
	int64_t t0 = cnl_time_mono_ns(), last_eta = -2;
	json_t *o;
	int code;

	for (;;) {
		const char *state, *url;
		json_t *st;

		if ((code = cnl_cli_call(cli, "GET", path, NULL, NULL, "server",
		                         &o)))
			return code;
		state = cnl_cli_str(o, "state", "?");
		url = cnl_cli_str(o, "url", NULL);
		st = json_object_get(o, "status");
		if (strcmp(state, "running") == 0 && url) {
			if (cli->json)
				cnl_cli_print_json(o);
			else
				printf("✓ Ready: %s\n", url);
			json_decref(o);
			return 0;
		}
		if (strcmp(state, "failed") == 0 ||
		    strcmp(state, "stopped") == 0) {
			code = cnl_cli_fail(
			    CNL_EXIT_ERROR, "server %s is %s%s%s", id, state,
			    json_object_get(o, "message") ? ": " : "",
			    cnl_cli_str(o, "message", ""));
			json_decref(o);
			return code;
		}
		{
			int64_t eta =
			    until(cnl_cli_str(st, "estimated_start", NULL));
			int64_t eta_s = eta < 0 ? -1 : (eta + 999) / 1000;

			if (!cli->json && eta_s != last_eta &&
			    (last_eta == -2 || eta_s < 0 ||
			     last_eta - eta_s >= 10 || eta_s > last_eta)) {
				char w[32];

				if (eta_s < 0)
					fprintf(stderr,
					        "✓ Provisioning... (%s)\n",
					        cnl_cli_str(st, "reason",
					                    "starting"));
				else {
					cnl_cli_format_wait(eta_s * 1000, w,
					                    sizeof(w));
					fprintf(stderr,
					        "✓ Provisioning... ETA %s\n",
					        eta_s ? w : "0s");
				}
				last_eta = eta_s;
			}
		}
		json_decref(o);
		if ((cnl_time_mono_ns() - t0) / 1000000 >= limit_ms)
			return cnl_cli_fail(
			    CNL_EXIT_ERROR,
			    "server %s is not ready yet; it keeps "
			    "provisioning: check with cnlab server list",
			    id);
		usleep(250 * 1000);
	}
}

static int wait_limit(struct cnl_cli *cli, int64_t *ret_ms)
{
	const char *w = cnl_cli_flag(cli, "wait");

	*ret_ms = 10 * 60 * 1000;
	if (w && cnl_duration_parse(w, ret_ms) < 0)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "--wait: not a duration (try 5m or 90s)");
	return 0;
}

static int cmd_server_create(struct cnl_cli *cli)
{
	const char *name = cnl_cli_flag(cli, "name");
	const char *image = cnl_cli_flag(cli, "image");
	const char *profile = cnl_cli_flag(cli, "profile");
	const char *storage = cnl_cli_flag(cli, "storage");
	const char *idle = cnl_cli_flag(cli, "idle");
	char pid[CNL_CLI_ID_MAX], pname[CNL_CLI_ID_MAX];
	_cleanup_free_ char *path = NULL;
	int64_t gb, idle_s, limit_ms;
	json_t *body, *o;
	int code;

	if (!name || !image || !profile)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "server create needs --name, --image and "
		                    "--profile (see cnlab profiles list)");
	body = json_pack("{s:s,s:s,s:s}", "name", name, "image", image,
	                 "profile", profile);
	if (storage) {
		if (cnl_cli_parse_storage(storage, &gb) < 0) {
			json_decref(body);
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "--storage: not a size (try 50gb, "
			                    "50Gi or 50)");
		}
		json_object_set_new(body, "storage_gb", json_integer(gb));
	}
	if (idle) {
		if (cnl_cli_parse_idle(idle, &idle_s) < 0) {
			json_decref(body);
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "--idle: not a duration (try 2h or "
			                    "30m)");
		}
		json_object_set_new(body, "idle_timeout_s",
		                    json_integer(idle_s));
	}
	if ((code = wait_limit(cli, &limit_ms)) ||
	    (code = cnl_cli_project(cli, NULL, pid, pname))) {
		json_decref(body);
		return code;
	}
	path = pathf("/v1/projects/%s/servers", pid);
	code = cnl_cli_call(cli, "POST", path, body, NULL, NULL, &o);
	json_decref(body);
	if (code)
		return code;
	if (cnl_cli_flag(cli, "no-wait")) {
		if (cli->json)
			cnl_cli_print_json(o);
		else
			printf("✓ Provisioning %s (%s): follow with cnlab "
			       "server list\n",
			       name, cnl_cli_str(o, "id", "?"));
		json_decref(o);
		return 0;
	}
	{
		char *id = cnl_xstrdup(cnl_cli_str(o, "id", ""));

		json_decref(o);
		code = wait_ready(cli, id, limit_ms);
		free(id);
	}
	return code;
}

static int cmd_server_list(struct cnl_cli *cli)
{
	char pname[CNL_CLI_ID_MAX];
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = project_items(cli, "servers", pname, &o)))
		return code;
	if (cli->json)
		return cnl_cli_print_json(o), json_decref(o), 0;
	cnl_cli_table_init(&t, 6);
	cnl_cli_table_add(&t, (const char *[]){"NAME", "STATE", "PROFILE",
	                                       "STORAGE", "IMAGE", "URL"});
	json_array_foreach (json_object_get(o, "items"), i, it) {
		char st[32];

		snprintf(st, sizeof(st), "%lld GB",
		         (long long)json_integer_value(
		             json_object_get(it, "storage_gb")));
		cnl_cli_table_add(
		    &t, (const char *[]){cnl_cli_str(it, "name", "?"),
		                         cnl_cli_str(it, "state", "?"),
		                         cnl_cli_str(it, "profile", "?"), st,
		                         cnl_cli_str(it, "image", "?"),
		                         cnl_cli_str(it, "url", "-")});
	}
	if (t.nrows == 1)
		fprintf(stderr,
		        "No servers in project %s: create one with "
		        "cnlab server create\n",
		        pname);
	else
		cnl_cli_table_print(&t, stdout);
	cnl_cli_table_done(&t);
	json_decref(o);
	return 0;
}

/* Open @url in a browser when there is a display and xdg-open. */
static void open_browser(const char *url)
{
	pid_t pid;

	if (!getenv("DISPLAY") && !getenv("WAYLAND_DISPLAY"))
		return;
	pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_RDWR);

		if (fd >= 0) {
			dup2(fd, STDIN_FILENO);
			dup2(fd, STDOUT_FILENO);
			dup2(fd, STDERR_FILENO);
		}
		execlp("xdg-open", "xdg-open", url, (char *)NULL);
		_exit(127);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
}

static int cmd_server_open(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	const char *url;
	json_t *s;
	int code;

	if ((code = find_server(cli, name, &s)))
		return code;
	url = cnl_cli_str(s, "url", NULL);
	if (!url || strcmp(cnl_cli_str(s, "state", ""), "running") != 0) {
		code =
		    cnl_cli_fail(CNL_EXIT_ERROR,
		                 "server %s is %s, with no URL yet: start it "
		                 "with cnlab server start %s",
		                 name, cnl_cli_str(s, "state", "?"), name);
		json_decref(s);
		return code;
	}
	if (cli->json)
		cnl_cli_print_json(s);
	else
		printf("%s\n", url);
	fflush(stdout);
	open_browser(url);
	json_decref(s);
	return 0;
}

static int server_action(struct cnl_cli *cli, const char *action)
{
	const char *name = cli->args.pos[0];
	_cleanup_free_ char *path = NULL, *id = NULL;
	json_t *s, *o;
	int64_t limit_ms;
	int code;

	if ((code = wait_limit(cli, &limit_ms)) ||
	    (code = find_server(cli, name, &s)))
		return code;
	id = cnl_xstrdup(cnl_cli_str(s, "id", ""));
	json_decref(s);
	path = pathf("/v1/servers/%s/%s", id, action);
	if ((code = cnl_cli_call(cli, "POST", path, NULL, NULL, "server", &o)))
		return code;
	if (strcmp(action, "start") == 0 && !cnl_cli_flag(cli, "no-wait")) {
		json_decref(o);
		return wait_ready(cli, id, limit_ms);
	}
	if (cli->json)
		cnl_cli_print_json(o);
	else if (strcmp(action, "stop") == 0)
		printf("✓ Stopped %s (its workspace is kept; cnlab server "
		       "start %s brings it back)\n",
		       name, name);
	else
		printf("✓ Starting %s\n", name);
	json_decref(o);
	return 0;
}

static int cmd_server_stop(struct cnl_cli *cli)
{
	return server_action(cli, "stop");
}

static int cmd_server_start(struct cnl_cli *cli)
{
	return server_action(cli, "start");
}

static int cmd_server_delete(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	_cleanup_free_ char *path = NULL;
	json_t *s, *o;
	int code;

	if ((code = find_server(cli, name, &s)))
		return code;
	path = pathf("/v1/servers/%s", cnl_cli_str(s, "id", ""));
	json_decref(s);
	if ((code =
	         cnl_cli_call(cli, "DELETE", path, NULL, NULL, "server", &o)))
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Deleted %s (its storage is no longer counted)\n",
		       name);
	json_decref(o);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* jobs                                                                      */
/* ------------------------------------------------------------------------ */

static int cmd_jobs_list(struct cnl_cli *cli)
{
	char pname[CNL_CLI_ID_MAX];
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = project_items(cli, "jobs", pname, &o)))
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

static int cmd_jobs_show(struct cnl_cli *cli)
{
	_cleanup_free_ char *path = pathf("/v1/jobs/%s", cli->args.pos[0]);
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

static int cmd_jobs_cancel(struct cnl_cli *cli)
{
	_cleanup_free_ char *path =
	    pathf("/v1/jobs/%s/cancel", cli->args.pos[0]);
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

/* ------------------------------------------------------------------------ */
/* quota                                                                     */
/* ------------------------------------------------------------------------ */

static void quota_line(const char *label, const json_t *q, bool pct)
{
	const json_t *lim = json_object_get(q, "limit");
	char buf[128];

	cnl_cli_format_quota(json_number_value(json_object_get(q, "used")),
	                     json_is_number(lim) ? json_number_value(lim) : -1,
	                     json_number_value(json_object_get(q, "percent")),
	                     pct, buf, sizeof(buf));
	printf("  %-18s %s\n", label, buf);
}

static void quota_block(const json_t *o)
{
	quota_line("GPU-hours used:", json_object_get(o, "gpu_hours"), true);
	quota_line("Storage GB-days:", json_object_get(o, "storage_gb_days"),
	           true);
	quota_line("Concurrent srvs:", json_object_get(o, "concurrent_servers"),
	           false);
}

static int cmd_quota_show(struct cnl_cli *cli)
{
	_cleanup_free_ char *path = NULL;
	const char *want = cli->project_flag;
	json_t *o, *it;
	size_t i;
	int code;

	if (want) {
		_cleanup_free_ char *e = cnl_cli_url_escape(want);

		path = pathf("/v1/quota?project=%s", e);
	} else {
		path = pathf("/v1/quota");
	}
	if ((code = cnl_cli_call(cli, "GET", path, NULL, NULL, "project", &o)))
		return code;
	if (cli->json)
		return cnl_cli_print_json(o), json_decref(o), 0;
	json_array_foreach (json_object_get(o, "projects"), i, it) {
		printf("Project: %s\n", cnl_cli_str(it, "project", "?"));
		quota_block(it);
	}
	if (!want) {
		it = json_object_get(o, "user");
		printf("User: %s\n", cnl_cli_str(it, "user", "?"));
		quota_block(it);
	}
	json_decref(o);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* projects                                                                  */
/* ------------------------------------------------------------------------ */

static int cmd_project_list(struct cnl_cli *cli)
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

static int cmd_project_use(struct cnl_cli *cli)
{
	char pid[CNL_CLI_ID_MAX], pname[CNL_CLI_ID_MAX];
	int code;

	if ((code = cnl_cli_project(cli, cli->args.pos[0], pid, pname)))
		return code;
	cnl_cli_config_set(&cli->cfg.project, pname);
	if ((code = save_config(cli)))
		return code;
	printf("✓ Default project: %s\n", pname);
	return 0;
}

static int cmd_project_mark(struct cnl_cli *cli)
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
	path = pathf("/v1/projects/%s", pid);
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

/* ------------------------------------------------------------------------ */
/* policy, cloud, nodes, audit (administrators)                              */
/* ------------------------------------------------------------------------ */

static int parse_number(const char *flag, const char *s, double *ret)
{
	char *end;

	errno = 0;
	*ret = strtod(s, &end);
	if (errno || end == s || *end || *ret < 0)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "--%s: not a non-negative number: %s", flag,
		                    s);
	return 0;
}

static int cmd_policy_burst(struct cnl_cli *cli)
{
	const char *th = cnl_cli_flag(cli, "threshold");
	const char *prov = cnl_cli_flag(cli, "provider");
	const char *strat = cnl_cli_flag(cli, "strategy");
	const char *budget = cnl_cli_flag(cli, "max-cloud-budget");
	bool disable = cnl_cli_flag(cli, "disable") != NULL;
	double t = 0, b = 0;
	json_t *body, *o;
	int code;

	if (!th && !prov && !strat && !budget && !disable) {
		/* No flags: show the policy. */
		if ((code = cnl_cli_call(cli, "GET", "/v1/policy/burst", NULL,
		                         NULL, NULL, &o)))
			return code;
		if (cli->json)
			return cnl_cli_print_json(o), json_decref(o), 0;
		if (!json_is_true(json_object_get(o, "enabled")))
			printf("Burst: disabled\n");
		else
			printf(
			    "Burst: enabled\n  Threshold:        %.2f\n"
			    "  Provider:         %s\n"
			    "  Strategy:         %s\n"
			    "  Max cloud budget: %.0f\n",
			    json_number_value(json_object_get(o, "threshold")),
			    cnl_cli_str(o, "provider", "?"),
			    cnl_cli_str(o, "strategy", "?"),
			    json_number_value(
			        json_object_get(o, "max_cloud_budget")));
		json_decref(o);
		return 0;
	}
	if (!disable && (!th || !prov || !strat || !budget))
		return cnl_cli_fail(
		    CNL_EXIT_USAGE,
		    "policy burst needs --threshold, --provider, "
		    "--strategy and --max-cloud-budget (or "
		    "--disable)");
	if ((th && (code = parse_number("threshold", th, &t))) ||
	    (budget && (code = parse_number("max-cloud-budget", budget, &b))))
		return code;
	body = json_pack("{s:f,s:s,s:s,s:f,s:b}", "threshold", t, "provider",
	                 prov ? prov : "aws", "strategy",
	                 strat ? strat : "spot-then-on-demand",
	                 "max_cloud_budget", b, "enabled", !disable);
	if (disable) {
		json_decref(body);
		body = json_pack("{s:b}", "enabled", 0);
	}
	code =
	    cnl_cli_call(cli, "PUT", "/v1/policy/burst", body, NULL, NULL, &o);
	json_decref(body);
	if (code)
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else if (disable)
		printf("✓ Bursting disabled\n");
	else
		printf("✓ Burst to %s above %.0f%% local use (%s, budget "
		       "%s)\n",
		       prov, t * 100, strat, budget);
	json_decref(o);
	return 0;
}

static int cmd_cloud_add(struct cnl_cli *cli)
{
	const char *prov = cli->args.pos[0];
	const char *acct = cnl_cli_flag(cli, "account");
	const char *region = cnl_cli_flag(cli, "region");
	const char *types = cnl_cli_flag(cli, "instance-types");
	json_t *body, *list, *o;
	int code;

	if (!acct || !region || !types)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "cloud add needs --account, --region and "
		                    "--instance-types a,b,c");
	list = json_array();
	for (const char *p = types; *p;) {
		size_t n = strcspn(p, ",");

		if (n)
			json_array_append_new(list, json_stringn(p, n));
		p += n;
		if (*p == ',')
			p++;
	}
	body = json_pack("{s:s,s:s,s:s,s:o}", "provider", prov, "account", acct,
	                 "region", region, "instance_types", list);
	code = cnl_cli_call(cli, "POST", "/v1/cloud/accounts", body, NULL, NULL,
	                    &o);
	json_decref(body);
	if (code)
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Added %s account %s in %s (%zu instance types)\n",
		       prov, acct, region,
		       json_array_size(json_object_get(o, "instance_types")));
	json_decref(o);
	return 0;
}

static int cmd_cloud_list(struct cnl_cli *cli)
{
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_call(cli, "GET", "/v1/cloud/accounts?limit=1000",
	                         NULL, NULL, NULL, &o)))
		return code;
	if (cli->json)
		return cnl_cli_print_json(o), json_decref(o), 0;
	cnl_cli_table_init(&t, 5);
	cnl_cli_table_add(&t, (const char *[]){"ID", "PROVIDER", "ACCOUNT",
	                                       "REGION", "INSTANCE TYPES"});
	json_array_foreach (json_object_get(o, "items"), i, it) {
		char types[256] = "";
		json_t *ty;
		size_t k;

		json_array_foreach (json_object_get(it, "instance_types"), k,
		                    ty) {
			size_t used = strlen(types);

			snprintf(types + used, sizeof(types) - used, "%s%s",
			         k ? "," : "", json_string_value(ty));
		}
		cnl_cli_table_add(
		    &t,
		    (const char *[]){cnl_cli_str(it, "id", "?"),
		                     cnl_cli_str(it, "provider", "?"),
		                     cnl_cli_str(it, "account", "?"),
		                     cnl_cli_str(it, "region", "?"), types});
	}
	cnl_cli_table_print(&t, stdout);
	cnl_cli_table_done(&t);
	json_decref(o);
	return 0;
}

static int cmd_nodes_list(struct cnl_cli *cli)
{
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_call(cli, "GET", "/v1/nodes?limit=1000", NULL, NULL,
	                         NULL, &o)))
		return code;
	if (cli->json)
		return cnl_cli_print_json(o), json_decref(o), 0;
	cnl_cli_table_init(&t, 6);
	cnl_cli_table_add(&t, (const char *[]){"NAME", "GPU", "GPUS", "STATE",
	                                       "BLOCKS USED", "LAST SEEN"});
	json_array_foreach (json_object_get(o, "items"), i, it) {
		char gpus[16], blocks[48], seen[32];

		snprintf(
		    gpus, sizeof(gpus), "%lld",
		    (long long)json_integer_value(json_object_get(it, "gpus")));
		snprintf(blocks, sizeof(blocks), "%lld / %lld",
		         (long long)json_integer_value(
		             json_object_get(it, "blocks_used")),
		         (long long)json_integer_value(
		             json_object_get(it, "blocks_total")));
		snprintf(seen, sizeof(seen), "%llds ago",
		         (long long)json_integer_value(
		             json_object_get(it, "last_seen_s_ago")));
		cnl_cli_table_add(
		    &t, (const char *[]){cnl_cli_str(it, "name", "?"),
		                         cnl_cli_str(it, "gpu_type", "?"), gpus,
		                         cnl_cli_str(it, "state", "?"), blocks,
		                         seen});
	}
	cnl_cli_table_print(&t, stdout);
	cnl_cli_table_done(&t);
	json_decref(o);
	return 0;
}

static int cmd_audit(struct cnl_cli *cli)
{
	const char *after = cnl_cli_flag(cli, "after");
	const char *limit = cnl_cli_flag(cli, "limit");
	_cleanup_free_ char *path = NULL, *ea = NULL, *el = NULL;
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	ea = cnl_cli_url_escape(after ? after : "0");
	el = cnl_cli_url_escape(limit ? limit : "100");
	path = pathf("/v1/audit?after=%s&limit=%s", ea, el);
	if ((code = cnl_cli_call(cli, "GET", path, NULL, NULL, NULL, &o)))
		return code;
	if (cli->json)
		return cnl_cli_print_json(o), json_decref(o), 0;
	cnl_cli_table_init(&t, 6);
	cnl_cli_table_add(&t, (const char *[]){"SEQ", "TIME", "ACTOR", "ACTION",
	                                       "TARGET", "RESULT"});
	json_array_foreach (json_object_get(o, "items"), i, it) {
		char seq[24];

		snprintf(
		    seq, sizeof(seq), "%lld",
		    (long long)json_integer_value(json_object_get(it, "seq")));
		cnl_cli_table_add(
		    &t, (const char *[]){seq, cnl_cli_str(it, "time", "?"),
		                         cnl_cli_str(it, "actor", "?"),
		                         cnl_cli_str(it, "action", "?"),
		                         cnl_cli_str(it, "target", ""),
		                         cnl_cli_str(it, "result", "?")});
	}
	cnl_cli_table_print(&t, stdout);
	cnl_cli_table_done(&t);
	if (json_is_integer(json_object_get(o, "next")))
		fprintf(
		    stderr, "more: cnlab audit --after %lld\n",
		    (long long)json_integer_value(json_object_get(o, "next")));
	json_decref(o);
	return 0;
}

/* cnlab __complete WHAT: words for the completion scripts, quietly. */
static int cmd_complete(struct cnl_cli *cli)
{
	const char *what = cli->args.pos[0];
	struct cnl_cli_reply r;
	json_t *it;
	size_t i;

	if (!cli->token || !client(cli))
		return 0;
	if (strcmp(what, "profiles") == 0 || strcmp(what, "shapes") == 0) {
		if (cnl_cli_request(cli->client, "GET",
		                    "/v1/profiles?limit=1000", NULL, NULL,
		                    &r) < 0 ||
		    r.status != 200) {
			cnl_cli_reply_done(&r);
			return 0;
		}
		json_array_foreach (json_object_get(r.json, "items"), i, it) {
			printf("%s\n", cnl_cli_str(it, "name", ""));
			if (strcmp(what, "shapes") == 0 &&
			    json_object_get(it, "gpu"))
				printf("%s\n", cnl_cli_str(it, "gpu", ""));
		}
		cnl_cli_reply_done(&r);
	}
	return 0;
}

static int cmd_version(struct cnl_cli *cli)
{
	printf("cnlab %s\n", VERSION);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* The command table                                                         */
/* ------------------------------------------------------------------------ */

const struct cnl_cli_flag cnl_cli_global_flags[] = {
    {"server", "URL", "control plane URL (env CNLAB_SERVER)", 0},
    {"output", "FORMAT", "table or json (-o)", 'o'},
    {"project", "NAME", "project to act on (default from the config)", 0},
    {"help", NULL, "show help (-h)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag login_flags[] = {
    {"user", "NAME", "user name (asked for when missing)", 0},
    {"password-stdin", NULL, "read the password from stdin", 0},
    {"token", "TOKEN", "store an API token (cnl_...) instead", 0},
    {"id-token", "JWT", "store an OIDC ID token as the bearer", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag create_flags[] = {
    {"name", "NAME", "server name", 0},
    {"image", "IMAGE", "container image, e.g. pytorch:2.4-cuda12.4", 0},
    {"profile", "PROFILE", "GPU profile (cnlab profiles list)", 'p'},
    {"storage", "SIZE", "workspace size: 50gb, 50Gi or 50 (GB)", 0},
    {"idle", "DURATION", "stop after this much idle time: 2h, 30m", 0},
    {"no-wait", NULL, "return at once instead of waiting until ready", 0},
    {"wait", "DURATION", "how long to wait until ready (default 10m)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag start_flags[] = {
    {"no-wait", NULL, "return at once instead of waiting until ready", 0},
    {"wait", "DURATION", "how long to wait until ready (default 10m)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag run_flags[] = {
    {"gpu", "SHAPE", "GPU slice: a shape (h100-25) or a profile name", 's'},
    {"profile", "PROFILE", "GPU profile instead of --gpu", 'p'},
    {"priority", "CLASS", "low, normal, high or critical", 'r'},
    {"deadline", "TIME", "finish by (ISO 8601, e.g. 2026-04-30T17:00)", 0},
    {"runtime", "DURATION", "expected run time, for planning: 2h", 0},
    {"artifacts", "DIR", "where artifacts go (./artifacts/JOB)", 'd'},
    {"detach", NULL, "submit and return without streaming", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag follow_flags[] = {
    {"follow", NULL, "keep streaming until the job ends (-f)", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag mark_flags[] = {
    {"on-prem-only", NULL, "never burst this project to a cloud", 0},
    {"no-on-prem-only", NULL, "allow bursting again", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag burst_flags[] = {
    {"threshold", "FRACTION", "local use that triggers bursting: 0.90", 0},
    {"provider", "NAME", "aws, gcp or azure (needs a cloud account)", 0},
    {"strategy", "NAME", "e.g. spot-then-on-demand", 0},
    {"max-cloud-budget", "AMOUNT", "spending cap", 0},
    {"disable", NULL, "turn bursting off", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag cloud_flags[] = {
    {"account", "ID", "account id (AWS: 12 digits)", 0},
    {"region", "REGION", "e.g. ap-northeast-2", 0},
    {"instance-types", "LIST", "comma-separated: g5.xlarge,p5.48xlarge", 0},
    {NULL, NULL, NULL, 0},
};

static const struct cnl_cli_flag audit_flags[] = {
    {"after", "SEQ", "records after this sequence number", 0},
    {"limit", "N", "at most N records (default 100)", 0},
    {NULL, NULL, NULL, 0},
};

const struct cnl_cli_command cnl_cli_commands[] = {
    {"login", "", "log in and store the token in the config file", login_flags,
     0, 0, false, false, cmd_login},
    {"logout", "", "forget the stored token", NULL, 0, 0, false, false,
     cmd_logout},
    {"whoami", "", "show the user, role and projects", NULL, 0, 0, false, false,
     cmd_whoami},
    {"profiles list", "", "GPU profiles and when each is available", NULL, 0, 0,
     false, false, cmd_profiles_list},
    {"server create", "", "provision a notebook server and wait until ready",
     create_flags, 0, 0, false, false, cmd_server_create},
    {"server list", "", "servers of the project", NULL, 0, 0, false, false,
     cmd_server_list},
    {"server open", "NAME", "print a server's URL and open it in a browser",
     NULL, 1, 1, false, false, cmd_server_open},
    {"server stop", "NAME", "stop a server (its workspace is kept)", NULL, 1, 1,
     false, false, cmd_server_stop},
    {"server start", "NAME", "start a stopped server", start_flags, 1, 1, false,
     false, cmd_server_start},
    {"server delete", "NAME", "delete a stopped server and its storage", NULL,
     1, 1, false, false, cmd_server_delete},
    {"run", "SCRIPT [ARGS...]",
     "run a script on a GPU slice, stream its output, collect artifacts",
     run_flags, 1, CNL_CLI_POS_MAX, true, false, cnl_cli_cmd_run},
    {"jobs list", "", "jobs of the project", NULL, 0, 0, false, false,
     cmd_jobs_list},
    {"jobs show", "JOB", "one job and its status", NULL, 1, 1, false, false,
     cmd_jobs_show},
    {"jobs logs", "JOB", "a job's output", follow_flags, 1, 1, false, false,
     cnl_cli_cmd_jobs_logs},
    {"jobs cancel", "JOB", "cancel a job", NULL, 1, 1, false, false,
     cmd_jobs_cancel},
    {"quota show", "", "GPU-hours, storage and servers used against limits",
     NULL, 0, 0, false, false, cmd_quota_show},
    {"project list", "", "projects you belong to", NULL, 0, 0, false, false,
     cmd_project_list},
    {"project use", "NAME", "set the default project", NULL, 1, 1, false, false,
     cmd_project_use},
    {"project mark", "NAME", "set project flags (--on-prem-only)", mark_flags,
     1, 1, false, false, cmd_project_mark},
    {"policy burst", "", "show or set the cloud burst policy (admin)",
     burst_flags, 0, 0, false, false, cmd_policy_burst},
    {"cloud add", "PROVIDER", "add a cloud account for bursting (admin)",
     cloud_flags, 1, 1, false, false, cmd_cloud_add},
    {"cloud list", "", "cloud accounts (admin)", NULL, 0, 0, false, false,
     cmd_cloud_list},
    {"nodes list", "", "GPU nodes and their use (admin)", NULL, 0, 0, false,
     false, cmd_nodes_list},
    {"audit", "", "the audit log (admin)", audit_flags, 0, 0, false, false,
     cmd_audit},
    {"completion", "bash|zsh|fish", "print a shell completion script", NULL, 1,
     1, false, false, cnl_cli_cmd_completion},
    {"version", "", "print the version", NULL, 0, 0, false, false, cmd_version},
    {"__complete", "WHAT", "completion words (profiles, shapes)", NULL, 1, 1,
     false, true, cmd_complete},
};

const size_t cnl_cli_ncommands = CNL_ARRAY_SIZE(cnl_cli_commands);

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

	fprintf(f, "Usage: cnlab %s%sCOMMAND [flags]\n\n", prefix,
	        pl ? " " : "");
	if (!pl)
		fputs(
		    "cnlab - the CNLab GPU platform from the command line.\n\n",
		    f);
	fputs("Commands:\n", f);
	for (size_t i = 0; i < cnl_cli_ncommands; i++) {
		const struct cnl_cli_command *c = &cnl_cli_commands[i];
		char left[64];

		if (c->hidden || (pl && (strncmp(c->path, prefix, pl) != 0 ||
		                         c->path[pl] != ' ')))
			continue;
		snprintf(left, sizeof(left), "%s%s%s", c->path,
		         c->usage[0] ? " " : "", c->usage);
		fprintf(f, "  %-28s %s\n", left, c->summary);
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

int main(int argc, char **argv)
{
	struct cnl_cli cli = {0};
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
		int gi = -1;

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
		snprintf(next, sizeof(next), "%s%s%s", path, path[0] ? " " : "",
		         a);
		if (!find_command(path) && is_prefix(next)) {
			snprintf(path, sizeof(path), "%s", next);
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
		bool version = nrest == 1 && !strcmp(rest[0], "--version");

		if (version)
			return cmd_version(&cli);
		if (nrest && !want_help)
			return cnl_cli_fail(
			    CNL_EXIT_USAGE,
			    "unknown command or flag \"%s%s%s\": "
			    "see cnlab %s%s--help",
			    path, path[0] ? " " : "", rest[0], path,
			    path[0] ? " " : "");
		help_group(want_help || !path[0] ? stdout : stderr, path);
		return want_help || !path[0] ? 0 : CNL_EXIT_USAGE;
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
	if (cli.cmd->flags == follow_flags)
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
	cli.token = env && *env ? env : cli.cfg.token;

	code = cli.cmd->run(&cli);
	fflush(stdout);
	cnl_cli_client_free(cli.client);
	cnl_cli_config_done(&cli.cfg);
	return code;
}
