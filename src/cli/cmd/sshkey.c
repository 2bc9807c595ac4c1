/*
 * sshkey.c - cnlab ssh-key add|list|remove: the public keys that
 * `cnlab server ssh` (and ssh through `cnlab server ssh-config`) authorises
 * in the caller's own servers.  Only a public key goes up; the CLI refuses
 * a private key file, so that one typed by mistake never leaves the
 * machine.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/format.h"
#include "common/util.h"

/* The server's limit on a key line (sshkey.h). */
#define LINE_MAX_BYTES 8192

int cnl_cli_cmd_ssh_key_add(struct cnl_cli *cli)
{
	const char *file = cli->args.pos[0];
	const char *name = cnl_cli_flag(cli, "name");
	char buf[LINE_MAX_BYTES + 2];
	size_t n = 0;
	json_t *body, *o;
	int fd, code;

	fd = strcmp(file, "-") == 0 ? STDIN_FILENO
	                            : open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return cnl_cli_fail(CNL_EXIT_USAGE, "%s: %s", file,
		                    strerror(errno));
	for (;;) {
		ssize_t got = read(fd, buf + n, sizeof(buf) - 1 - n);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		n += (size_t)got;
		if (n >= sizeof(buf) - 1)
			break;
	}
	if (fd != STDIN_FILENO)
		close(fd);
	buf[n] = '\0';
	if (strstr(buf, "PRIVATE KEY")) {
		explicit_bzero(buf, sizeof(buf));
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "%s is a private key: give its public "
		                    "half (%s.pub); a private key never "
		                    "leaves your machine",
		                    file, file);
	}
	if (n == 0 || n > LINE_MAX_BYTES)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "%s: %s (one public key line, such as "
		                    "~/.ssh/id_ed25519.pub)",
		                    file, n ? "too long" : "empty");
	body = json_pack("{s:s}", "key", buf);
	if (!body)
		return cnl_cli_fail(CNL_EXIT_USAGE, "%s: not UTF-8 text", file);
	if (name)
		json_object_set_new(body, "name", json_string(name));
	code = cnl_cli_call(cli, "POST", "/v1/ssh-keys", body, NULL, "ssh key",
	                    &o);
	json_decref(body);
	if (code)
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ SSH key %s added (%s %s)\n",
		       cnl_cli_str(o, "name", "?"), cnl_cli_str(o, "type", "?"),
		       cnl_cli_str(o, "fingerprint", "?"));
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_ssh_key_list(struct cnl_cli *cli)
{
	static const char *const head[] = {"NAME", "TYPE", "FINGERPRINT",
	                                   "COMMENT", "ADDED"};
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	code = cnl_cli_list_begin(cli, "/v1/ssh-keys", "ssh keys", &t, 5, head,
	                          &o);
	if (code || !o)
		return code;
	json_array_foreach (json_object_get(o, "items"), i, it)
		cnl_cli_table_add(
		    &t, (const char *[]){cnl_cli_str(it, "name", "?"),
		                         cnl_cli_str(it, "type", "?"),
		                         cnl_cli_str(it, "fingerprint", "?"),
		                         cnl_cli_str(it, "comment", "-"),
		                         cnl_cli_str(it, "added_at", "-")});
	return cnl_cli_list_end(&t, o);
}

int cnl_cli_cmd_ssh_key_remove(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	json_t *o;
	int code;

	code = cnl_cli_call_named(cli, "DELETE", "/v1/ssh-keys/", "", "ssh key",
	                          name, NULL, &o);
	if (code || !o)
		return code;
	printf("✓ SSH key %s removed (open sessions that it could open are "
	       "closed)\n",
	       cnl_cli_str(o, "removed", name));
	json_decref(o);
	return 0;
}
