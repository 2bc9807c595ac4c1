/*
 * secret.c - cnlab secret set|list|delete: secrets kept by the platform,
 * the user's own (--scope user, the default) or the project's (--scope
 * project: its admins set and delete them).  A value goes up once and is
 * never shown again: list prints names, sizes and who set them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/format.h"
#include "common/base64.h"
#include "common/json.h"
#include "common/util.h"

/* The server's limit (secrets.h): a value of at most 64 KiB. */
#define VALUE_MAX (64 * 1024)

/* The server's rule for names (api_secrets.c), checked before a value
 * is read. */
static bool name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 63 || s[0] == '.' || s[0] == '_' || s[0] == '-')
		return false;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                 "0123456789._-") == n;
}

/* --scope: 0 user, 1 project, or -1 after a message. */
static int scope_of(struct cnl_cli *cli)
{
	const char *s = cnl_cli_flag(cli, "scope");

	if (!s || strcmp(s, "user") == 0)
		return 0;
	if (strcmp(s, "project") == 0)
		return 1;
	cnl_cli_fail(CNL_EXIT_USAGE, "--scope: user or project, not %s", s);
	return -1;
}

/* The collection's path for the scope: a new string, or NULL and *@code. */
static char *base_path(struct cnl_cli *cli, int project, int *code)
{
	char pid[CNL_CLI_ID_MAX], pname[CNL_CLI_ID_MAX];

	if (!project)
		return cnl_cli_pathf("/v1/secrets");
	if ((*code = cnl_cli_project(cli, NULL, pid, pname)))
		return NULL;
	return cnl_cli_pathf("/v1/projects/%s/secrets", pid);
}

/* All of @fd, at most VALUE_MAX bytes: 0, or an exit code. */
static int read_all(int fd, const char *what, uint8_t *buf, size_t *ret_n)
{
	size_t n = 0;

	for (;;) {
		ssize_t got = read(fd, buf + n, VALUE_MAX + 1 - n);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return cnl_cli_fail(CNL_EXIT_ERROR, "%s: %s", what,
			                    strerror(errno));
		if (got == 0)
			break;
		n += (size_t)got;
		if (n > VALUE_MAX)
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "%s: a secret holds at most %d "
			                    "bytes (64 KiB)",
			                    what, VALUE_MAX);
	}
	*ret_n = n;
	return 0;
}

int cnl_cli_cmd_secret_set(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	const char *file = cnl_cli_flag(cli, "from-file");
	bool from_stdin = cnl_cli_flag(cli, "from-stdin") != NULL;
	int project = scope_of(cli), code = 0, fd;
	uint8_t *buf;
	size_t n = 0;
	char *b64, *base, *path;
	json_t *body, *o;

	if (project < 0)
		return CNL_EXIT_USAGE;
	if (!name_ok(name))
		return cnl_cli_fail(
		    CNL_EXIT_USAGE,
		    "secret name %s: 1..63 of letters, digits, "
		    "'.', '_' and '-', starting with a letter or "
		    "digit (it becomes a file name under "
		    "/run/secrets)",
		    name);
	if (!file == !from_stdin)
		return cnl_cli_fail(
		    CNL_EXIT_USAGE,
		    "secret set needs the value from one of "
		    "--from-file FILE or --from-stdin (never on "
		    "the command line, where ps and the shell's "
		    "history would show it)");
	if (file) {
		if ((fd = open(file, O_RDONLY | O_CLOEXEC)) < 0)
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "--from-file %s: %s", file,
			                    strerror(errno));
	} else {
		fd = STDIN_FILENO;
	}
	buf = cnl_xmalloc(VALUE_MAX + 1);
	code = read_all(fd, file ? file : "stdin", buf, &n);
	if (file)
		close(fd);
	if (code) {
		explicit_bzero(buf, VALUE_MAX + 1);
		free(buf);
		return code;
	}
	b64 = cnl_b64_encode_new(buf, n, CNL_B64_STD | CNL_B64_PAD);
	explicit_bzero(buf, VALUE_MAX + 1);
	free(buf);
	body = json_pack("{s:s}", "value_base64", b64);
	explicit_bzero(b64, strlen(b64));
	free(b64);
	if (!(base = base_path(cli, project, &code))) {
		json_decref(body);
		return code;
	}
	path = cnl_cli_pathf("%s/%s", base, name);
	code = cnl_cli_call(cli, "PUT", path, body, NULL, "secret", &o);
	cnl_json_wipe(body);
	json_decref(body);
	free(path);
	free(base);
	if (code)
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Secret %s set (%s, %zu bytes)\n", name,
		       project ? "project" : "user", n);
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_secret_list(struct cnl_cli *cli)
{
	static const char *const head[] = {"NAME", "SCOPE", "SIZE", "SET BY",
	                                   "UPDATED"};
	struct cnl_cli_table t;
	int project = scope_of(cli), code = 0;
	char *base, size[32];
	json_t *o, *it;
	size_t i;

	if (project < 0)
		return CNL_EXIT_USAGE;
	if (!(base = base_path(cli, project, &code)))
		return code;
	code = cnl_cli_list_begin(cli, base, "secrets", &t, 5, head, &o);
	free(base);
	if (code || !o)
		return code;
	json_array_foreach (json_object_get(o, "items"), i, it) {
		snprintf(
		    size, sizeof(size), "%lld",
		    (long long)json_integer_value(json_object_get(it, "size")));
		cnl_cli_table_add(
		    &t, (const char *[]){cnl_cli_str(it, "name", "?"),
		                         cnl_cli_str(it, "scope", "?"), size,
		                         cnl_cli_str(it, "set_by", "-"),
		                         cnl_cli_str(it, "updated_at", "-")});
	}
	return cnl_cli_list_end(&t, o);
}

int cnl_cli_cmd_secret_delete(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	int project = scope_of(cli), code = 0;
	char *base;
	json_t *o;

	if (project < 0)
		return CNL_EXIT_USAGE;
	if (!(base = base_path(cli, project, &code)))
		return code;
	{
		char *dir = cnl_cli_pathf("%s/", base);

		code = cnl_cli_call_named(cli, "DELETE", dir, "", "secret",
		                          name, NULL, &o);
		free(dir);
	}
	free(base);
	if (code || !o)
		return code;
	printf("✓ Secret %s deleted\n", name);
	json_decref(o);
	return 0;
}

/* Append the items of one comma-separated flag value to @list: names, or
 * with @env NAME=VAR pairs; 0 or an exit code after a message. */
static int add_refs(json_t *list, const char *flag, const char *v, bool env)
{
	char *copy = cnl_xstrdup(v), *save = NULL;
	int code = 0;

	for (char *it = strtok_r(copy, ",", &save); it && !code;
	     it = strtok_r(NULL, ",", &save)) {
		char *eq = env ? strchr(it, '=') : NULL;
		json_t *o = NULL, *x;
		size_t i;

		if (env && (!eq || eq == it || !eq[1])) {
			code = cnl_cli_fail(CNL_EXIT_USAGE,
			                    "--%s: NAME=VARIABLE, not %s", flag,
			                    it);
			break;
		}
		if (eq)
			*eq = '\0';
		if (!name_ok(it)) {
			code = cnl_cli_fail(CNL_EXIT_USAGE,
			                    "--%s: %s is not a secret name",
			                    flag, it);
			break;
		}
		json_array_foreach (list, i, x)
			if (strcmp(
			        json_string_value(json_object_get(x, "name")),
			        it) == 0)
				o = x;
		if (!o) {
			o = json_pack("{s:s}", "name", it);
			json_array_append_new(list, o);
		}
		if (eq)
			json_object_set_new(o, "env", json_string(eq + 1));
	}
	free(copy);
	return code;
}

int cnl_cli_secret_refs(struct cnl_cli *cli, json_t *body)
{
	const char *files = cnl_cli_flag(cli, "secret");
	const char *envs = cnl_cli_flag(cli, "secret-env");
	json_t *list;
	int code = 0;

	if (!files && !envs)
		return 0;
	list = json_array();
	if ((files && (code = add_refs(list, "secret", files, false))) ||
	    (envs && (code = add_refs(list, "secret-env", envs, true)))) {
		json_decref(list);
		return code;
	}
	json_object_set_new(body, "secrets", list);
	return 0;
}
