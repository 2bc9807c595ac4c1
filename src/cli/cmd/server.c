/*
 * server.c - cnlab server create|list|open|exec|stop|start|delete: notebook
 * servers, waiting until one is ready and printing its URL; exec runs a
 * command in one's container through cnlabd (an upgraded connection that
 * carries the exec frames of wire/node.h); ssh, ssh-config and ssh-proxy
 * reach an sshd in one's container through cnlabd (issue 24).
 */
#define _GNU_SOURCE /* vasprintf */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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
#include "net/metrics.h"

/* Find the server @name (or id) in the current project. */
static int find_server(struct cnl_cli *cli, const char *name,
                       struct cnl_wire_server *ret)
{
	char pname[CNL_CLI_ID_MAX];
	struct cnl_wire_servers page;
	json_t *o;
	int code;

	if ((code = cnl_cli_project_items(cli, "servers", pname, &o)))
		return code;
	code = cnl_cli_read_servers(o, &page);
	json_decref(o);
	if (code)
		return code;
	for (size_t i = 0; i < page.n; i++) {
		if (strcmp(page.items[i].name, name) == 0 ||
		    strcmp(page.items[i].id, name) == 0) {
			*ret = page.items[i];
			cnl_wire_servers_done(&page);
			return 0;
		}
	}
	cnl_wire_servers_done(&page);
	return cnl_cli_fail(CNL_EXIT_NOT_FOUND,
	                    "server \"%s\" not found in project %s: see cnlab "
	                    "server list",
	                    name, pname);
}

/*
 * One line on stderr per change of what is known: queued (with the
 * scheduler's estimate), then provisioning, with an ETA only when recent
 * starts give one (an ETA that merely counts down is not news).  @st is
 * the server's live status, NULL when it has none.
 */
static void provisioning_line(const struct cnl_wire_status *st, char *last,
                              size_t len)
{
	const char *phase = st ? st->phase : "pending";
	const char *reason = st && st->pending ? st->reason : "being scheduled";
	char line[512], key[512], w[32], t[CNL_TIME_RFC3339_MAX];

	if (strcmp(phase, "pending") == 0 &&
	    strcmp(reason, "being scheduled") != 0) {
		char eta[160];

		cnl_cli_eta(st, "ETA ", eta, sizeof(eta));
		snprintf(line, sizeof(line), "✓ Queued... %s (%s)", eta,
		         reason);
		snprintf(
		    key, sizeof(key), "queued|%s|%s", reason,
		    cnl_cli_time(st->estimated_start_ms, t, sizeof(t), ""));
	} else if (st && st->has_estimated_ready) {
		int64_t ms = cnl_cli_until_ms(st->estimated_ready.at_ms);

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
 * Wait until the server @created runs and has a URL, printing progress
 * lines; @limit_ms bounds the wait.  Prints the JSON or "✓ Ready: URL".
 */
static int wait_ready(struct cnl_cli *cli,
                      const struct cnl_wire_server *created, int64_t limit_ms)
{
	_cleanup_free_ char *path =
	    cnl_cli_pathf("/v1/servers/%s", created->id);
	const char *id = created->id;
	int64_t t0 = cnl_time_mono_ns();
	char last[512] = "";
	struct cnl_wire_server v;
	json_t *o;
	int code;

	/* The first line from the reply that made or started it, so that a
	 * server ready before the first poll still says so. */
	if (!cli->json)
		provisioning_line(created->has_status ? &created->status : NULL,
		                  last, sizeof(last));

	for (;;) {
		if ((code = cnl_cli_call(cli, "GET", path, NULL, NULL, "server",
		                         &o)))
			return code;
		if ((code = cnl_cli_read_server(o, &v))) {
			json_decref(o);
			return code;
		}
		if (strcmp(v.state, "running") == 0 && v.url[0]) {
			if (cli->json)
				cnl_cli_print_json(o);
			else
				printf("✓ Ready: %s\n", v.url);
			json_decref(o);
			return 0;
		}
		json_decref(o);
		if (strcmp(v.state, "failed") == 0 ||
		    strcmp(v.state, "stopped") == 0)
			return cnl_cli_fail(
			    CNL_EXIT_ERROR,
			    "server %s is %s%s%s (try again with cnlab "
			    "server start %s)",
			    v.name, v.state, v.message[0] ? ": " : "",
			    v.message, v.name);
		if (!cli->json)
			provisioning_line(v.has_status ? &v.status : NULL, last,
			                  sizeof(last));
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
	struct cnl_wire_server v;
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
	    (code = cnl_cli_secret_refs(cli, body)) ||
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
	if ((code = cnl_cli_read_server(o, &v))) {
		json_decref(o);
		return code;
	}
	if (generated && !cli->json)
		fprintf(stderr, "✓ Server %s\n", v.name);
	if (cnl_cli_flag(cli, "no-wait")) {
		if (cli->json)
			cnl_cli_print_json(o);
		else
			printf("✓ Provisioning %s (%s): follow with cnlab "
			       "server list\n",
			       name, v.id);
		json_decref(o);
		return 0;
	}
	json_decref(o);
	return wait_ready(cli, &v, limit_ms);
}

int cnl_cli_cmd_server_list(struct cnl_cli *cli)
{
	char pname[CNL_CLI_ID_MAX];
	struct cnl_cli_table t;
	struct cnl_wire_servers page;
	json_t *o;
	int code;

	if ((code = cnl_cli_project_items(cli, "servers", pname, &o)))
		return code;
	code = cnl_cli_read_servers(o, &page);
	if (code || cli->json) {
		if (!code)
			cnl_cli_print_json(o);
		json_decref(o);
		cnl_wire_servers_done(&page);
		return code;
	}
	json_decref(o);
	cnl_cli_table_init(&t, 6);
	cnl_cli_table_add(&t, (const char *[]){"NAME", "STATE", "PROFILE",
	                                       "STORAGE", "IMAGE", "URL"});
	for (size_t i = 0; i < page.n; i++) {
		const struct cnl_wire_server *it = &page.items[i];
		char st[32];

		snprintf(st, sizeof(st), "%lld GB", (long long)it->storage_gb);
		cnl_cli_table_add(&t,
		                  (const char *[]){it->name, it->state,
		                                   it->profile, st, it->image,
		                                   it->url[0] ? it->url : "-"});
	}
	if (t.nrows == 1)
		fprintf(stderr,
		        "No servers in project %s: create one with "
		        "cnlab server create\n",
		        pname);
	else
		cnl_cli_table_print(&t, stdout);
	cnl_cli_table_done(&t);
	cnl_wire_servers_done(&page);
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
	struct cnl_wire_server s;
	int code;

	if ((code = find_server(cli, name, &s)))
		return code;
	if (!s.url[0] || strcmp(s.state, "running") != 0)
		return cnl_cli_fail(
		    CNL_EXIT_ERROR,
		    "server %s is %s, with no URL yet: start it "
		    "with cnlab server start %s",
		    name, s.state, name);
	if (cli->json) {
		json_t *j = cnl_wire_server_encode(&s);

		cnl_cli_print_json(j);
		json_decref(j);
	} else {
		printf("%s\n", s.url);
	}
	fflush(stdout);
	open_browser(s.url);
	return 0;
}

/* Exactly @n bytes of @s into @buf; false at its end or on failure. */
static bool read_full(struct cnl_client_stream *s, char *buf, size_t n)
{
	while (n > 0) {
		ssize_t r = cnl_client_stream_read(s, buf, n);

		if (r == -EAGAIN) {
			struct pollfd p = {cnl_client_stream_fd(s), POLLIN, 0};

			if (poll(&p, 1, -1) < 0 && errno != EINTR)
				return false;
			continue;
		}
		if (r <= 0)
			return false;
		buf += r;
		n -= (size_t)r;
	}
	return true;
}

int cnl_cli_cmd_server_exec(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	struct cnl_wire_server s;
	struct cnl_client *cl;
	struct cnl_client_stream *st = NULL;
	_cleanup_free_ char *path = NULL, *q = NULL, *esc = NULL;
	char err[CNL_CLIENT_ERROR_MAX];
	static char buf[65536];
	json_t *a;
	int code;

	if ((code = find_server(cli, name, &s)))
		return code;
	if (strcmp(s.state, "running") != 0)
		return cnl_cli_fail(
		    CNL_EXIT_ERROR,
		    "server %s is %s: start it with cnlab server "
		    "start %s",
		    name, s.state, name);
	a = json_array();
	for (size_t i = 1; i < cli->args.npos; i++)
		json_array_append_new(a, json_string(cli->args.pos[i]));
	q = json_dumps(a, JSON_COMPACT);
	json_decref(a);
	if (!q)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "the command must be UTF-8 text");
	esc = cnl_client_url_escape(q);
	path = cnl_cli_pathf("/v1/servers/%s/exec?command=%s", s.id, esc);
	if (!(cl = cnl_cli_client(cli)))
		return CNL_EXIT_ERROR;
	if (cnl_client_upgrade(cl, path, "cnlab-exec", &st, err, sizeof(err)) <
	    0)
		return cnl_cli_fail(CNL_EXIT_ERROR, "%s", err);
	/* Frames until the exit code: the command's output as it comes. */
	for (;;) {
		unsigned char h[5];
		uint32_t n;

		if (!read_full(st, (char *)h, 5))
			break;
		n = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 |
		    (uint32_t)h[3] << 8 | h[4];
		if (h[0] == CNL_WIRE_EXEC_EXIT && n == 4 &&
		    read_full(st, (char *)h + 1, 4)) {
			cnl_client_stream_free(st);
			return (int)((uint32_t)h[1] << 24 |
			             (uint32_t)h[2] << 16 |
			             (uint32_t)h[3] << 8 | h[4]) &
			       255;
		}
		if ((h[0] != CNL_WIRE_EXEC_STDOUT &&
		     h[0] != CNL_WIRE_EXEC_STDERR) ||
		    n > sizeof(buf) || !read_full(st, buf, n))
			break;
		fwrite(buf, 1, n,
		       h[0] == CNL_WIRE_EXEC_STDOUT ? stdout : stderr);
		fflush(h[0] == CNL_WIRE_EXEC_STDOUT ? stdout : stderr);
	}
	cnl_client_stream_free(st);
	return cnl_cli_fail(CNL_EXIT_ERROR,
	                    "the connection to %s ended before the command did",
	                    name);
}

static int server_action(struct cnl_cli *cli, const char *action)
{
	const char *name = cli->args.pos[0];
	_cleanup_free_ char *path = NULL;
	struct cnl_wire_server s, v;
	int64_t limit_ms;
	json_t *o;
	int code;

	if ((code = wait_limit(cli, &limit_ms)) ||
	    (code = find_server(cli, name, &s)))
		return code;
	path = cnl_cli_pathf("/v1/servers/%s/%s", s.id, action);
	if ((code = cnl_cli_call(cli, "POST", path, NULL, NULL, "server", &o)))
		return code;
	if ((code = cnl_cli_read_server(o, &v))) {
		json_decref(o);
		return code;
	}
	if (strcmp(action, "start") == 0 && !cnl_cli_flag(cli, "no-wait")) {
		json_decref(o);
		return wait_ready(cli, &v, limit_ms);
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
	struct cnl_wire_server s;
	json_t *o;
	int code;

	if ((code = find_server(cli, name, &s)))
		return code;
	path = cnl_cli_pathf("/v1/servers/%s", s.id);
	if ((code =
	         cnl_cli_call(cli, "DELETE", path, NULL, NULL, "server", &o)))
		return code;
	/* The reply is {"deleted": id}, not a server. */
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Deleted %s (its storage is no longer counted; its "
		       "node removes its workspace)\n",
		       name);
	json_decref(o);
	return 0;
}

/* cnlab server show NAME: one server, with its slice's size. */
int cnl_cli_cmd_server_show(struct cnl_cli *cli)
{
	_cleanup_free_ char *path = NULL;
	struct cnl_wire_server s, v;
	json_t *o;
	int code;

	if ((code = find_server(cli, cli->args.pos[0], &s)))
		return code;
	path = cnl_cli_pathf("/v1/servers/%s", s.id);
	if ((code = cnl_cli_call(cli, "GET", path, NULL, NULL, "server", &o)))
		return code;
	if ((code = cnl_cli_read_server(o, &v)) || cli->json) {
		if (!code)
			cnl_cli_print_json(o);
		json_decref(o);
		return code;
	}
	json_decref(o);
	printf("ID:        %s\n", v.id);
	printf("Name:      %s\n", v.name);
	printf("State:     %s", v.state);
	if (v.has_status)
		printf(" (%s%s%s)", v.status.phase,
		       v.status.node[0] ? " on " : "", v.status.node);
	printf("\nProfile:   %s\n", v.profile);
	if (v.has_status)
		cnl_cli_print_size(&v.status);
	printf("Storage:   %lld GB\n", (long long)v.storage_gb);
	printf("Image:     %s\n", v.image[0] ? v.image : "host");
	if (v.url[0])
		printf("URL:       %s\n", v.url);
	return 0;
}

/* cnlab server resize NAME --blocks N: an in-flight resize of its
 * slice (grows at once when its GPU has room; a shrink takes effect for
 * new allocations at once and releases the blocks once the use fits). */
int cnl_cli_cmd_server_resize(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	_cleanup_free_ char *path = NULL;
	struct cnl_wire_server s, v;
	json_t *body, *o;
	int code;

	if ((code = cnl_cli_resize_body(cli, &body)))
		return code;
	if ((code = find_server(cli, name, &s))) {
		json_decref(body);
		return code;
	}
	path = cnl_cli_pathf("/v1/servers/%s", s.id);
	code = cnl_cli_call(cli, "PATCH", path, body, NULL, "server", &o);
	json_decref(body);
	if (code)
		return code;
	if ((code = cnl_cli_read_server(o, &v))) {
		json_decref(o);
		return code;
	}
	if (cli->json) {
		cnl_cli_print_json(o);
	} else {
		printf("✓ Resized %s (state: %s)\n", name, v.state);
		if (v.has_status)
			cnl_cli_print_size(&v.status);
	}
	json_decref(o);
	return 0;
}

/* ---- ssh ------------------------------------------------------------ */

/* The server's ssh facts (GET /v1/servers/{id}/ssh) for @name, and @s. */
static int ssh_info(struct cnl_cli *cli, const char *name,
                    struct cnl_wire_server *s, json_t **ret)
{
	_cleanup_free_ char *path = NULL;
	char what[200];
	int code;

	if ((code = find_server(cli, name, s)))
		return code;
	path = cnl_cli_pathf("/v1/servers/%s/ssh", s->id);
	snprintf(what, sizeof(what), "server \"%s\"", name);
	return cnl_cli_call(cli, "GET", path, NULL, NULL, what, ret);
}

/* @s single-quoted for /bin/sh, '%' doubled for ssh's tokens: appended to
 * @b. */
static void sh_quote(struct cnl_metrics_buf *b, const char *s)
{
	cnl_mb_printf(b, "'");
	for (; *s; s++) {
		if (*s == '\'')
			cnl_mb_printf(b, "'\\''");
		else if (*s == '%')
			cnl_mb_printf(b, "%%%%");
		else
			cnl_mb_printf(b, "%c", *s);
	}
	cnl_mb_printf(b, "'");
}

/* The ProxyCommand that reaches server @name: this very binary, with the
 * control plane and project this invocation uses. */
static char *proxy_command(struct cnl_cli *cli, const char *name)
{
	struct cnl_metrics_buf b = {0};
	char self[4096], pid[CNL_CLI_ID_MAX], pname[CNL_CLI_ID_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0)
		snprintf(self, sizeof(self), "cnlab");
	else
		self[n] = '\0';
	sh_quote(&b, self);
	cnl_mb_printf(&b, " --server ");
	sh_quote(&b, cli->server);
	if (cnl_cli_project(cli, NULL, pid, pname) == 0) {
		cnl_mb_printf(&b, " --project ");
		sh_quote(&b, pname);
	}
	cnl_mb_printf(&b, " server ssh-proxy ");
	sh_quote(&b, name);
	return b.p;
}

int cnl_cli_cmd_server_ssh_config(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	struct cnl_wire_server s;
	_cleanup_free_ char *pc = NULL;
	const char *host, *key;
	json_t *o;
	int code;

	if ((code = ssh_info(cli, name, &s, &o)))
		return code;
	if (cli->json) {
		cnl_cli_print_json(o);
		json_decref(o);
		return 0;
	}
	host = cnl_cli_str(o, "host", "cnlab");
	key = cnl_cli_str(o, "host_key", "");
	pc = proxy_command(cli, name);
	printf("# cnlab server %s: `ssh %s`, scp, sftp, rsync -e ssh, ssh -L\n"
	       "# and IDEs (VS Code Remote-SSH, Cursor, Windsurf, JetBrains\n"
	       "# Gateway) reach it through cnlabd; its host key is pinned.\n"
	       "Host %s\n"
	       "    HostName %s\n"
	       "    User %s\n"
	       "    ProxyCommand %s\n"
	       "    HostKeyAlias %s\n"
	       "    StrictHostKeyChecking yes\n"
	       "    UserKnownHostsFile /dev/null\n"
	       "    GlobalKnownHostsFile /dev/null\n"
	       "    KnownHostsCommand /bin/echo %s %s\n"
	       "    ForwardAgent no\n"
	       "    ServerAliveInterval 30\n",
	       name, host, host, host, cnl_cli_str(o, "user", "tenant"), pc,
	       host, host, key);
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_server_ssh(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	struct cnl_wire_server s;
	char *pc, opt[5][8192];
	const char *argv[CNL_CLI_POS_MAX + 26];
	const char *host;
	json_t *o;
	int code, n = 0;

	if ((code = ssh_info(cli, name, &s, &o)))
		return code;
	/* What ssh would only say as "Connection closed", said here. */
	if (strcmp(s.state, "running") != 0) {
		json_decref(o);
		return cnl_cli_fail(CNL_EXIT_ERROR,
		                    "server %s is %s: start it with cnlab "
		                    "server start %s",
		                    name, s.state, name);
	}
	{
		json_t *keys = NULL;

		if (cnl_cli_call(cli, "GET", "/v1/ssh-keys?limit=1", NULL, NULL,
		                 "ssh keys", &keys) == 0 &&
		    json_array_size(json_object_get(keys, "items")) == 0) {
			json_decref(keys);
			json_decref(o);
			return cnl_cli_fail(CNL_EXIT_ERROR,
			                    "you have no SSH keys on this "
			                    "platform: add your public key "
			                    "with cnlab ssh-key add "
			                    "~/.ssh/id_ed25519.pub");
		}
		json_decref(keys);
	}
	host = cnl_cli_str(o, "host", "cnlab");
	pc = proxy_command(cli, name);
	snprintf(opt[0], sizeof(opt[0]), "ProxyCommand=%s", pc);
	snprintf(opt[1], sizeof(opt[1]), "HostKeyAlias=%s", host);
	snprintf(opt[2], sizeof(opt[2]), "KnownHostsCommand=/bin/echo %s %s",
	         host, cnl_cli_str(o, "host_key", ""));
	snprintf(opt[3], sizeof(opt[3]), "User=%s",
	         cnl_cli_str(o, "user", "tenant"));
	snprintf(opt[4], sizeof(opt[4]), "%s", host);
	free(pc);
	json_decref(o);
	argv[n++] = "ssh";
	for (int i = 0; i < 4; i++) {
		argv[n++] = "-o";
		argv[n++] = opt[i];
	}
	argv[n++] = "-o";
	argv[n++] = "StrictHostKeyChecking=yes";
	argv[n++] = "-o";
	argv[n++] = "UserKnownHostsFile=/dev/null";
	argv[n++] = "-o";
	argv[n++] = "GlobalKnownHostsFile=/dev/null";
	argv[n++] = "-o";
	argv[n++] = "ForwardAgent=no";
	argv[n++] = opt[4];
	if (cli->args.npos > 1)
		argv[n++] = "--";
	for (size_t i = 1; i < cli->args.npos; i++)
		argv[n++] = cli->args.pos[i];
	argv[n] = NULL;
	fflush(stdout);
	execvp("ssh", (char *const *)argv);
	return cnl_cli_fail(CNL_EXIT_ERROR,
	                    "cannot run ssh (%s): install OpenSSH's client",
	                    strerror(errno));
}

/* All of @n bytes to @fd; false on failure. */
static bool put_all(int fd, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, buf, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		buf += w;
		n -= (size_t)w;
	}
	return true;
}

/* Whether stdin reaches its end within @ms (what it holds is dropped). */
static bool stdin_ends_within(int ms)
{
	int64_t end = cnl_time_mono_ns() / 1000000 + ms;
	static char sink[4096];

	for (;;) {
		int64_t left = end - cnl_time_mono_ns() / 1000000;
		struct pollfd p = {STDIN_FILENO, POLLIN, 0};
		ssize_t r;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return false;
		r = read(STDIN_FILENO, sink, sizeof(sink));
		if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
			return true;
	}
}

/*
 * ssh's ProxyCommand: stdin and stdout to the server's sshd through
 * cnlabd.  A stream that does not begin as SSH does ("SSH-") is the
 * platform saying why there is no session: it goes to stderr, and the
 * exit code is 1.  The exit code is also 1 when the stream is cut (the
 * node lost, the key removed, cnlabd gone), with a line saying so.
 */
int cnl_cli_cmd_server_ssh_proxy(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	struct cnl_wire_server s;
	struct cnl_client *cl;
	struct cnl_client_stream *st = NULL;
	_cleanup_free_ char *path = NULL;
	char err[CNL_CLIENT_ERROR_MAX], head[4];
	static char buf[65536];
	size_t nhead = 0;
	bool in_open = true, ssh = false, ended = false;
	int code, status = 0;
	const char *msg;

	if ((code = find_server(cli, name, &s)))
		return code;
	path = cnl_cli_pathf("/v1/servers/%s/ssh", s.id);
	if (!(cl = cnl_cli_client(cli)))
		return CNL_EXIT_ERROR;
	if (cnl_client_upgrade(cl, path, "cnlab-ssh", &st, err, sizeof(err)) <
	    0) {
		/* "POST PATH: STATUS message" */
		msg = strstr(err, ": ");
		if (msg && sscanf(msg + 2, "%d", &status) == 1)
			msg = strchr(msg + 2, ' ');
		msg = msg ? msg + 1 : err;
		return cnl_cli_fail(status == 401   ? CNL_EXIT_AUTH
		                    : status == 403 ? CNL_EXIT_REFUSED
		                    : status == 404 ? CNL_EXIT_NOT_FOUND
		                                    : CNL_EXIT_ERROR,
		                    "ssh to server %s: %s", name, msg);
	}
	signal(SIGPIPE, SIG_IGN);
	while (!ended) {
		struct pollfd p[2] = {{cnl_client_stream_fd(st), POLLIN, 0},
		                      {in_open ? STDIN_FILENO : -1, POLLIN, 0}};
		ssize_t r;

		/* What the stream holds already shows in no poll. */
		while ((r = cnl_client_stream_read(st, buf, sizeof(buf))) > 0) {
			size_t off = 0;

			while (!ssh && off < (size_t)r && nhead < 4)
				head[nhead++] = buf[off++];
			if (!ssh && nhead == 4) {
				if (memcmp(head, "SSH-", 4) != 0) {
					fwrite(head, 1, 4, stderr);
					fwrite(buf + off, 1, (size_t)r - off,
					       stderr);
					while ((r = cnl_client_stream_read(
					            st, buf, sizeof(buf))) >
					           0 ||
					       r == -EAGAIN) {
						if (r > 0)
							fwrite(buf, 1,
							       (size_t)r,
							       stderr);
						else if (poll(p, 1, 5000) <= 0)
							break;
					}
					cnl_client_stream_free(st);
					return CNL_EXIT_ERROR;
				}
				ssh = true;
				if (!put_all(STDOUT_FILENO, head, 4))
					goto done;
			}
			if (ssh && off < (size_t)r &&
			    !put_all(STDOUT_FILENO, buf + off, (size_t)r - off))
				goto done;
		}
		if (r != -EAGAIN) {
			ended = true;
			break;
		}
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
			r = read(STDIN_FILENO, buf, sizeof(buf));
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				/* ssh closed its side: the session is over. */
				goto done;
			}
			if (cnl_client_stream_write(st, buf, (size_t)r) < 0) {
				ended = true;
				break;
			}
		}
	}
	cnl_client_stream_free(st);
	if (!ssh && nhead)
		fwrite(head, 1, nhead, stderr);
	/* A session that ended as it should ends on ssh's side at the same
	 * moment: ssh closes our stdin (or hangs us up).  Only when it does
	 * not within 2 s was the stream cut under it. */
	if (ssh && in_open && stdin_ends_within(2000))
		return 0;
	return cnl_cli_fail(CNL_EXIT_ERROR,
	                    "the ssh connection to server %s ended: its node "
	                    "or cnlabd closed it (a lost node, a removed key "
	                    "or an ended session); try again once cnlab "
	                    "server show %s says running",
	                    name, name);
done:
	cnl_client_stream_free(st);
	return 0;
}
