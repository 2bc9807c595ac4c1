/*
 * server.c - cnlab server create|list|open|stop|start|delete: notebook
 * servers, waiting until one is ready and printing its URL.
 */
#define _GNU_SOURCE /* vasprintf */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/format.h"
#include "common/time.h"
#include "common/util.h"

/* Find the server @name (or id) in the current project. */
static int find_server(struct cnl_cli *cli, const char *name, json_t **ret)
{
	char pname[CNL_CLI_ID_MAX];
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_project_items(cli, "servers", pname, &o)))
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
 * One line on stderr per change of what is known: queued (with the
 * scheduler's estimate), then provisioning, with an ETA only when recent
 * starts give one (an ETA that merely counts down is not news).
 */
static void provisioning_line(const json_t *st, char *last, size_t len)
{
	const json_t *ready = json_object_get(st, "estimated_ready");
	const char *phase = cnl_cli_str(st, "phase", "pending");
	const char *reason = cnl_cli_str(st, "reason", "being scheduled");
	char line[256], key[256], w[32];

	if (strcmp(phase, "pending") == 0 &&
	    strcmp(reason, "being scheduled") != 0) {
		char eta[160];

		cnl_cli_eta(st, "ETA ", eta, sizeof(eta));
		snprintf(line, sizeof(line), "✓ Queued... %s (%s)", eta,
		         reason);
		snprintf(key, sizeof(key), "queued|%s|%s", reason,
		         cnl_cli_str(st, "estimated_start", ""));
	} else if (json_is_object(ready)) {
		int64_t ms = cnl_cli_until(cnl_cli_str(ready, "at", NULL));

		cnl_cli_format_wait(ms < 1000 ? 1000 : ms, w, sizeof(w));
		snprintf(line, sizeof(line), "✓ Provisioning... ETA %s", w);
		snprintf(key, sizeof(key), "provisioning|eta");
	} else {
		snprintf(line, sizeof(line), "✓ Provisioning...");
		snprintf(key, sizeof(key), "provisioning");
	}
	if (strcmp(key, last) != 0) {
		fprintf(stderr, "%s\n", line);
		snprintf(last, len, "%s", key);
	}
}

/*
 * Wait until the server @id runs and has a URL, printing progress lines;
 * @limit_ms bounds the wait.  Prints the JSON or "✓ Ready: URL".
 */
static int wait_ready(struct cnl_cli *cli, const json_t *created,
                      int64_t limit_ms)
{
	_cleanup_free_ char *path =
	    cnl_cli_pathf("/v1/servers/%s", cnl_cli_str(created, "id", ""));
	_cleanup_free_ char *id = cnl_xstrdup(cnl_cli_str(created, "id", ""));
	int64_t t0 = cnl_time_mono_ns();
	char last[256] = "";
	json_t *o;
	int code;

	/* The first line from the reply that made or started it, so that a
	 * server ready before the first poll still says so. */
	if (!cli->json)
		provisioning_line(json_object_get(created, "status"), last,
		                  sizeof(last));

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
			    CNL_EXIT_ERROR,
			    "server %s is %s%s%s (try again with cnlab server "
			    "start %s)",
			    cnl_cli_str(o, "name", id), state,
			    json_object_get(o, "message") ? ": " : "",
			    cnl_cli_str(o, "message", ""),
			    cnl_cli_str(o, "name", id));
			json_decref(o);
			return code;
		}
		if (!cli->json)
			provisioning_line(st, last, sizeof(last));
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

/*
 * A server name for @image: its base name ("pytorch:2.4-cuda12.4" ->
 * "pytorch"), then four random letters and digits: "pytorch-k3x9".
 */
static void pick_name(const char *image, char *buf, size_t len)
{
	static const char alnum[] = "abcdefghijkmnpqrstuvwxyz23456789";
	const char *base = strrchr(image, '/');
	unsigned char rnd[4] = {0};
	size_t n = 0;
	FILE *f = fopen("/dev/urandom", "r");
	char stem[24];

	base = base ? base + 1 : image;
	for (; base[n] && base[n] != ':' && base[n] != '@' &&
	       n < sizeof(stem) - 1;
	     n++)
		stem[n] = (char)(isalnum((unsigned char)base[n])
		                     ? tolower((unsigned char)base[n])
		                     : '-');
	stem[n] = '\0';
	if (!n)
		snprintf(stem, sizeof(stem), "server");
	if (!f || fread(rnd, 1, sizeof(rnd), f) != sizeof(rnd)) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		memcpy(rnd, &ts.tv_nsec, sizeof(rnd));
	}
	if (f)
		fclose(f);
	snprintf(buf, len, "%s-%c%c%c%c", stem, alnum[rnd[0] % 32],
	         alnum[rnd[1] % 32], alnum[rnd[2] % 32], alnum[rnd[3] % 32]);
}

int cnl_cli_cmd_server_create(struct cnl_cli *cli)
{
	const char *name = cnl_cli_flag(cli, "name");
	const char *image = cnl_cli_flag(cli, "image");
	bool generated = name == NULL;
	char gen[64] = "";
	const char *profile = cnl_cli_flag(cli, "profile");
	const char *storage = cnl_cli_flag(cli, "storage");
	const char *idle = cnl_cli_flag(cli, "idle");
	char pid[CNL_CLI_ID_MAX], pname[CNL_CLI_ID_MAX];
	_cleanup_free_ char *path = NULL;
	int64_t gb, idle_s, limit_ms;
	json_t *body, *o;
	int code;

	if (!image || !profile)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "server create needs --image and --profile "
		                    "(see cnlab profiles list)");
	if (!name) {
		/* A readable name from the image, unique by chance; a clash
		 * is refused by the server (409) and tried again below. */
		pick_name(image, gen, sizeof(gen));
		name = gen;
	}
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
	path = cnl_cli_pathf("/v1/projects/%s/servers", pid);
	for (int tries = 1; generated && tries < 5; tries++) {
		struct cnl_client_reply r = {0};

		/* A generated name that clashes: another one, quietly. */
		if (!cnl_cli_client(cli) ||
		    cnl_client_send(cli->client, "POST", path, body, NULL, &r) <
		        0 ||
		    r.status != 409) {
			if (r.status >= 200 && r.status < 300) {
				o = json_incref(r.json);
				cnl_client_reply_done(&r);
				goto created;
			}
			cnl_client_reply_done(&r);
			break;
		}
		cnl_client_reply_done(&r);
		pick_name(image, gen, sizeof(gen));
		json_object_set_new(body, "name", json_string(gen));
	}
	code = cnl_cli_call(cli, "POST", path, body, NULL, NULL, &o);
	if (code) {
		json_decref(body);
		return code;
	}
created:
	json_decref(body);
	if (generated && !cli->json)
		fprintf(stderr, "✓ Server %s\n", cnl_cli_str(o, "name", name));
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
	code = wait_ready(cli, o, limit_ms);
	json_decref(o);
	return code;
}

int cnl_cli_cmd_server_list(struct cnl_cli *cli)
{
	char pname[CNL_CLI_ID_MAX];
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_project_items(cli, "servers", pname, &o)))
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

int cnl_cli_cmd_server_open(struct cnl_cli *cli)
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
	path = cnl_cli_pathf("/v1/servers/%s/%s", id, action);
	if ((code = cnl_cli_call(cli, "POST", path, NULL, NULL, "server", &o)))
		return code;
	if (strcmp(action, "start") == 0 && !cnl_cli_flag(cli, "no-wait")) {
		code = wait_ready(cli, o, limit_ms);
		json_decref(o);
		return code;
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

int cnl_cli_cmd_server_stop(struct cnl_cli *cli)
{
	return server_action(cli, "stop");
}

int cnl_cli_cmd_server_start(struct cnl_cli *cli)
{
	return server_action(cli, "start");
}

int cnl_cli_cmd_server_delete(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	_cleanup_free_ char *path = NULL;
	json_t *s, *o;
	int code;

	if ((code = find_server(cli, name, &s)))
		return code;
	path = cnl_cli_pathf("/v1/servers/%s", cnl_cli_str(s, "id", ""));
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
