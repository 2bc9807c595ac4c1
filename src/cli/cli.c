/*
 * cli.c - what every cnlab command shares: failing with a message and an
 * exit code, requests to cnlabd that turn API errors into messages that
 * say what to do, the project to act on, and small helpers (paths, times,
 * the settings file).
 */
#define _GNU_SOURCE /* vasprintf */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/format.h"
#include "common/time.h"
#include "common/util.h"
#include "net/error.h"

int cnl_cli_resize_body(struct cnl_cli *cli, json_t **ret)
{
	const char *v = cnl_cli_flag(cli, "blocks");
	char *end;
	long n;

	if (!v)
		return cnl_cli_fail(
		    CNL_EXIT_USAGE,
		    "--blocks N is required: the new size in 1%% "
		    "blocks of the GPU, 1..100");
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < 1 || n > 100)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "--blocks: a whole number of 1%% blocks of "
		                    "the GPU, 1..100 (got \"%s\")",
		                    v);
	*ret = json_pack("{s:i}", "blocks", (int)n);
	return 0;
}

void cnl_cli_print_size(const struct cnl_wire_status *st)
{
	if (st->node[0]) {
		printf("Size:      %d blocks", st->blocks);
		if (st->shrinking_to)
			printf(" (shrinking to %d: the blocks are released "
			       "once its VRAM use fits)",
			       st->shrinking_to);
		printf("\n");
	} else if (st->resized) {
		printf("Size:      %d blocks (resized while waiting)\n",
		       st->resized);
	}
}

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

struct cnl_client *cnl_cli_client(struct cnl_cli *cli)
{
	struct cnl_client_config cfg = {
	    .base = cli->server,
	    .token = cli->token,
	    .user_agent = "cnlab-cli/0.1",
	    .traceparent = cli->traceparent[0] ? cli->traceparent : NULL,
	    .connect_timeout_ms = (long)cli->connect_timeout_ms,
	    /* No limit on the whole: an upload or a download may take
	     * long while bytes move; a silent server is the read timeout's. */
	    .idle_timeout_ms = (long)cli->read_timeout_ms,
	    /* Artifacts are at most 512 KiB; nothing the API says is near. */
	    .reply_max = (size_t)64 << 20,
	    /* A server whose certificate a private CA signed (the system's
	     * bundle otherwise). */
	    .cafile = getenv("CNLAB_CA_FILE") && getenv("CNLAB_CA_FILE")[0]
	                  ? getenv("CNLAB_CA_FILE")
	                  : NULL,
	};

	if (!cli->client && cnl_client_new(&cfg, &cli->client) < 0)
		return NULL;
	return cli->client;
}

/*
 * A request no registered node could ever run: the reason, then the kinds
 * of node there are, so the user sees what to ask for instead.
 */
static int unsatisfiable(const json_t *body, const char *msg)
{
	const json_t *shapes =
	    json_object_get(json_object_get(body, "error"), "shapes");
	char list[1024] = "";
	size_t at = 0, i;
	json_t *it;

	json_array_foreach (shapes, i, it) {
		const char *t =
		    json_string_value(json_object_get(it, "gpu_type"));
		int n;

		n = snprintf(
		    list + at, sizeof(list) - at,
		    "\n  %" JSON_INTEGER_FORMAT " node%s: %" JSON_INTEGER_FORMAT
		    " x %s, %" JSON_INTEGER_FORMAT
		    " mCPU, %" JSON_INTEGER_FORMAT " MiB",
		    json_integer_value(json_object_get(it, "nodes")),
		    json_integer_value(json_object_get(it, "nodes")) == 1 ? ""
		                                                          : "s",
		    json_integer_value(json_object_get(it, "gpus")),
		    t ? t : "no GPU",
		    json_integer_value(json_object_get(it, "cpu_milli")),
		    json_integer_value(json_object_get(it, "mem_mib")));
		if (n < 0 || (size_t)n >= sizeof(list) - at)
			break;
		at += (size_t)n;
	}
	return cnl_cli_fail(CNL_EXIT_REFUSED, "refused: %s%s%s", msg,
	                    at ? "\nthe nodes registered:" : "", list);
}

/* Map an error reply to a message and an exit code. */
static int reply_error(struct cnl_cli *cli, const struct cnl_client_reply *r,
                       const char *what)
{
	const char *code, *msg;

	cnl_http_error_read(r->json, &code, &msg);
	if (!code)
		code = "";
	if (!msg)
		msg = r->body ? r->body : "";

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
			return cnl_cli_fail(
			    CNL_EXIT_REFUSED,
			    "quota exceeded: %s (see cnlab quota "
			    "show; an administrator raises limits "
			    "with cnlab quota set)",
			    msg);
		return cnl_cli_fail(
		    CNL_EXIT_REFUSED,
		    "not permitted: %s (your roles: cnlab whoami)", msg);
	case 404:
		if (what)
			return cnl_cli_fail(CNL_EXIT_NOT_FOUND,
			                    "%s not found (or not visible to "
			                    "you)",
			                    what);
		return cnl_cli_fail(CNL_EXIT_NOT_FOUND, "not found: %s", msg);
	case 400:
		return cnl_cli_fail(CNL_EXIT_USAGE, "rejected: %s", msg);
	case 409:
		return cnl_cli_fail(CNL_EXIT_REFUSED, "refused: %s", msg);
	case 422:
		if (strcmp(code, "unsatisfiable") == 0)
			return unsatisfiable(r->json, msg);
		return cnl_cli_fail(CNL_EXIT_REFUSED, "refused (%s): %s", code,
		                    msg);
	case 507:
		return cnl_cli_fail(CNL_EXIT_ERROR,
		                    "the server's storage is full: %s", msg);
	default:
		return cnl_cli_fail(CNL_EXIT_ERROR, "%s (HTTP %ld, %s)", msg,
		                    r->status, code[0] ? code : "error");
	}
}

int cnl_cli_reply_error(struct cnl_cli *cli, const struct cnl_client_reply *r,
                        const char *what)
{
	return reply_error(cli, r, what);
}

int cnl_cli_unreachable(struct cnl_cli *cli, const struct cnl_client_reply *r,
                        const char *what)
{
	char d[CNL_DURATION_MAX] = "?", w[192] = "";

	if (what)
		snprintf(w, sizeof(w), "%s: ", what);

	switch (r->timed_out) {
	case CNL_CLIENT_TIMEOUT_CONNECT:
		cnl_duration_format(cli->connect_timeout_ms, d, sizeof(d));
		return cnl_cli_fail(CNL_EXIT_TIMEOUT,
		                    "%stimed out connecting to %s after %s "
		                    "(connect timeout: --connect-timeout or "
		                    "CNLAB_CONNECT_TIMEOUT)",
		                    w, cli->server, d);
	case CNL_CLIENT_TIMEOUT_IDLE:
		cnl_duration_format(cli->read_timeout_ms, d, sizeof(d));
		return cnl_cli_fail(CNL_EXIT_TIMEOUT,
		                    "%stimed out: %s accepted the connection "
		                    "but sent nothing for %s (read timeout: "
		                    "--read-timeout or CNLAB_READ_TIMEOUT; 0 "
		                    "waits forever)",
		                    w, cli->server, d);
	case CNL_CLIENT_TIMEOUT_TOTAL:
		return cnl_cli_fail(CNL_EXIT_TIMEOUT,
		                    "%stimed out talking to %s", w,
		                    cli->server);
	}
	if (what)
		return cnl_cli_fail(CNL_EXIT_ERROR, "%s: %s", what, r->error);
	return cnl_cli_fail(CNL_EXIT_ERROR,
	                    "cannot reach %s: %s (check --server, "
	                    "CNLAB_SERVER, or cnlab config set server URL)",
	                    cli->server, r->error);
}

/* One timeout: --@flag, else $@env, else @dflt; @zero_ok: 0 is allowed. */
static int one_timeout(struct cnl_cli *cli, const char *flag, const char *env,
                       int64_t dflt, bool zero_ok, int64_t *ret)
{
	const char *v = cnl_cli_flag(cli, flag);
	const char *from = flag;
	bool is_env = false;

	if (!v && (v = getenv(env)) && *v) {
		from = env;
		is_env = true;
	} else if (!v || !*v) {
		*ret = dflt;
		return 0;
	}
	if (cnl_duration_parse(v, ret) < 0 || (*ret == 0 && !zero_ok) ||
	    *ret > (int64_t)24 * 3600 * 1000)
		return cnl_cli_fail(
		    CNL_EXIT_USAGE,
		    "%s%s: \"%s\" is not a duration%s up to 24h "
		    "(try 10s or 2m)",
		    is_env ? "" : "--", from, v, zero_ok ? "" : " above 0");
	return 0;
}

int cnl_cli_timeouts(struct cnl_cli *cli)
{
	int code = one_timeout(cli, "connect-timeout", "CNLAB_CONNECT_TIMEOUT",
	                       CNL_CLI_CONNECT_TIMEOUT_DEFAULT, false,
	                       &cli->connect_timeout_ms);

	if (code)
		return code;
	return one_timeout(cli, "read-timeout", "CNLAB_READ_TIMEOUT",
	                   CNL_CLI_READ_TIMEOUT_DEFAULT, true,
	                   &cli->read_timeout_ms);
}

/* Send a request; 0 and the reply, or an exit code after a message. */
static int request(struct cnl_cli *cli, const char *method, const char *path,
                   json_t *body, const char *idem, const char *what,
                   struct cnl_client_reply *ret)
{
	bool public = strcmp(path, "/v1/auth/login") == 0 ||
	              strcmp(path, "/v1/auth/redeem") == 0 ||
	              strcmp(path, "/v1/auth/oidc") == 0;

	if (!public && !cli->token)
		return cnl_cli_fail(
		    CNL_EXIT_AUTH, "not logged in: run cnlab login (server %s)",
		    cli->server);
	if (!cnl_cli_client(cli))
		return cnl_cli_fail(CNL_EXIT_ERROR, "cannot start libcurl");
	if (cnl_client_send(cli->client, method, path, body, idem, ret) < 0)
		return cnl_cli_unreachable(cli, ret, NULL);
	if (ret->status < 200 || ret->status > 299) {
		int code = reply_error(cli, ret, what);

		cnl_client_reply_done(ret);
		return code;
	}
	return 0;
}

int cnl_cli_call(struct cnl_cli *cli, const char *method, const char *path,
                 json_t *body, const char *idem, const char *what, json_t **ret)
{
	struct cnl_client_reply r;
	int code = request(cli, method, path, body, idem, what, &r);

	if (code)
		return code;
	*ret = r.json ? json_incref(r.json) : json_null();
	cnl_client_reply_done(&r);
	return 0;
}

int cnl_cli_call_named(struct cnl_cli *cli, const char *method,
                       const char *base, const char *tail, const char *kind,
                       const char *name, json_t *body, json_t **ret)
{
	_cleanup_free_ char *e = cnl_client_url_escape(name);
	_cleanup_free_ char *path = cnl_cli_pathf("%s%s%s", base, e, tail);
	char what[160];
	int code;

	*ret = NULL;
	snprintf(what, sizeof(what), "%s \"%s\"", kind, name);
	if ((code = cnl_cli_call(cli, method, path, body, NULL, what, ret)))
		return code;
	if (cli->json) {
		cnl_cli_print_json(*ret);
		json_decref(*ret);
		*ret = NULL;
	}
	return 0;
}

int cnl_cli_list_begin(struct cnl_cli *cli, const char *path, const char *what,
                       struct cnl_cli_table *t, int ncols,
                       const char *const *head, json_t **ret)
{
	int code;

	*ret = NULL;
	if ((code = cnl_cli_call(cli, "GET", path, NULL, NULL, what, ret)))
		return code;
	if (cli->json) {
		cnl_cli_print_json(*ret);
		json_decref(*ret);
		*ret = NULL;
		return 0;
	}
	cnl_cli_table_init(t, ncols);
	cnl_cli_table_add(t, head);
	return 0;
}

int cnl_cli_list_end(struct cnl_cli_table *t, json_t *reply)
{
	cnl_cli_table_print(t, stdout);
	cnl_cli_table_done(t);
	json_decref(reply);
	return 0;
}

int cnl_cli_stream(struct cnl_cli *cli, const struct cnl_client_request *rq,
                   const char *what, struct cnl_client_reply *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (!cli->token)
		return cnl_cli_fail(
		    CNL_EXIT_AUTH, "not logged in: run cnlab login (server %s)",
		    cli->server);
	if (!cnl_cli_client(cli))
		return cnl_cli_fail(CNL_EXIT_ERROR, "cannot start libcurl");
	if (cnl_client_request(cli->client, rq, ret) < 0) {
		int code = cnl_cli_unreachable(cli, ret, what);

		cnl_client_reply_done(ret);
		return code;
	}
	if (ret->status < 200 || ret->status > 299) {
		int code = reply_error(cli, ret, what);

		cnl_client_reply_done(ret);
		return code;
	}
	return 0;
}

int cnl_cli_call_raw(struct cnl_cli *cli, const char *path, const char *what,
                     struct cnl_client_reply *ret)
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
		json_t *me = NULL;
		const char *who = "YOUR-NAME";

		json_decref(o);
		if (cnl_cli_call(cli, "GET", "/v1/auth/whoami", NULL, NULL,
		                 NULL, &me) == 0)
			who = cnl_cli_str(me, "name", who);
		code = cnl_cli_fail(
		    CNL_EXIT_NOT_FOUND,
		    json_is_true(json_object_get(me, "admin"))
		        ? "you are in no project yet: create one with cnlab "
		          "project create NAME, then cnlab project member add "
		          "NAME %s"
		        : "you are in no project yet: ask an administrator to "
		          "run cnlab project member add PROJECT %s",
		    who);
		json_decref(me);
		return code;
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

json_t *cnl_cli_comma_list(const char *list, size_t longest, size_t max)
{
	json_t *a = json_array();

	for (const char *p = list;;) {
		size_t len = strcspn(p, ",");

		if (len == 0 || len > longest || json_array_size(a) >= max) {
			json_decref(a);
			return NULL;
		}
		json_array_append_new(a, json_stringn(p, len));
		if (p[len] == '\0')
			return a;
		p += len + 1;
	}
}

json_t *cnl_cli_number_list(const char *list, char bad[64])
{
	json_t *o = json_object();

	for (const char *p = list; *p;) {
		size_t n = strcspn(p, ",");
		const char *eq = memchr(p, '=', n);
		char key[64], *end = NULL;
		double v = 0;

		errno = 0;
		if (eq && eq != p && (size_t)(eq - p) < sizeof(key))
			v = strtod(eq + 1, &end);
		if (!eq || eq == p || (size_t)(eq - p) >= sizeof(key) ||
		    errno || end == eq + 1 || end != p + n || !isfinite(v)) {
			snprintf(bad, 64, "%.*s", (int)(n < 63 ? n : 63), p);
			json_decref(o);
			return NULL;
		}
		memcpy(key, p, (size_t)(eq - p));
		key[eq - p] = '\0';
		json_object_set_new(o, key, json_real(v));
		p += n;
		if (*p == ',')
			p++;
	}
	return o;
}

/* A path built with printf; the caller frees it. */
char *cnl_cli_pathf(const char *fmt, ...)
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
int64_t cnl_cli_until(const char *s)
{
	int64_t t;

	if (!s || cnl_time_parse_rfc3339(s, &t) < 0)
		return -1;
	t -= cnl_time_now_ms();
	return t < 0 ? 0 : t;
}

int64_t cnl_cli_until_ms(int64_t at_ms)
{
	int64_t t;

	if (!at_ms)
		return -1;
	t = at_ms - cnl_time_now_ms();
	return t < 0 ? 0 : t;
}

const char *cnl_cli_time(int64_t ms, char *buf, size_t len, const char *none)
{
	if (!ms || cnl_time_format_rfc3339(ms, buf, len) < 0)
		return none;
	return buf;
}

/* A reply that is not the document it should be: exit code 1, naming
 * the field. */
static int bad_reply(const char *what, const char *err)
{
	return cnl_cli_fail(CNL_EXIT_ERROR,
	                    "the server's reply is not a valid %s: %s (is "
	                    "cnlab older or newer than the server?)",
	                    what, err);
}

int cnl_cli_read_job(const json_t *o, struct cnl_wire_job *ret)
{
	char err[256] = "";

	if (cnl_wire_job_decode(o, ret, err, sizeof(err)) < 0) {
		cnl_wire_job_done(ret);
		return bad_reply("job", err);
	}
	return 0;
}

int cnl_cli_read_jobs(const json_t *o, struct cnl_wire_jobs *ret)
{
	char err[256] = "";

	if (cnl_wire_jobs_decode(o, ret, err, sizeof(err)) < 0) {
		cnl_wire_jobs_done(ret);
		return bad_reply("list of jobs", err);
	}
	return 0;
}

int cnl_cli_read_server(const json_t *o, struct cnl_wire_server *ret)
{
	char err[256] = "";

	if (cnl_wire_server_decode(o, ret, err, sizeof(err)) < 0)
		return bad_reply("server", err);
	return 0;
}

int cnl_cli_read_servers(const json_t *o, struct cnl_wire_servers *ret)
{
	char err[256] = "";

	if (cnl_wire_servers_decode(o, ret, err, sizeof(err)) < 0) {
		cnl_wire_servers_done(ret);
		return bad_reply("list of servers", err);
	}
	return 0;
}

/* Read one line from @f into @buf without the newline; -1 on EOF. */
int cnl_cli_read_line(FILE *f, char *buf, size_t len)
{
	size_t n;

	if (!fgets(buf, (int)len, f))
		return -1;
	n = strlen(buf);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		buf[--n] = '\0';
	return 0;
}

int cnl_cli_save_config(struct cnl_cli *cli)
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

/*
 * The project's @what ("servers", "jobs"): GET /v1/projects/ID/@what into
 * *@ret; the project's name into @pname (CNL_CLI_ID_MAX).  0 or an exit
 * code.
 */
int cnl_cli_project_items(struct cnl_cli *cli, const char *what, char *pname,
                          json_t **ret)
{
	char pid[CNL_CLI_ID_MAX];
	_cleanup_free_ char *path = NULL;
	int code;

	if ((code = cnl_cli_project(cli, NULL, pid, pname)))
		return code;
	path = cnl_cli_pathf("/v1/projects/%s/%s?limit=1000", pid, what);
	return cnl_cli_call(cli, "GET", path, NULL, NULL, NULL, ret);
}

void cnl_cli_eta(const struct cnl_wire_status *st, const char *prefix,
                 char *buf, size_t len)
{
	int64_t ms =
	    cnl_cli_until_ms(st && st->pending ? st->estimated_start_ms : 0);
	char w[32];

	if (ms < 0) {
		snprintf(buf, len, "%sestimate unknown", prefix);
		return;
	}
	cnl_cli_format_wait(ms < 1000 ? 1000 : ms, w, sizeof(w));
	if (st->has_estimate && st->estimate.approximate) {
		char a[32];
		int n = st->estimate.unestimated_running;

		cnl_cli_format_wait(st->estimate.assumed_runtime_s * 1000, a,
		                    sizeof(a));
		snprintf(buf, len,
		         "%s≈ %s (%d running job%s gave no run time; %s "
		         "assumed)",
		         prefix, w, n, n == 1 ? "" : "s", a);
	} else {
		snprintf(buf, len, "%s%s", prefix, w);
	}
}

void cnl_cli_slice_label(const char *shape, char *buf, size_t len)
{
	char type[32];
	const char *rest;
	size_t tl = strcspn(shape, "-x");

	if (tl >= sizeof(type) || tl == 0) {
		snprintf(buf, len, "1×%s", shape);
		return;
	}
	for (size_t i = 0; i < tl; i++)
		type[i] = (char)toupper((unsigned char)shape[i]);
	type[tl] = '\0';
	rest = shape + tl;
	if (strcmp(rest, "-full") == 0 || !*rest)
		snprintf(buf, len, "1×%s", type);
	else if (rest[0] == 'x')
		snprintf(buf, len, "%s×%s", rest + 1, type);
	else if (strspn(rest + 1, "0123456789") == strlen(rest + 1))
		snprintf(buf, len, "1×%s-%spct", type, rest + 1);
	else
		snprintf(buf, len, "1×%s%s", type, rest);
}

int cnl_cli_cmd_version(struct cnl_cli *cli)
{
	printf("cnlab %s\n", CNL_CLI_VERSION);
	return 0;
}
