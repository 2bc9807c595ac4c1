/*
 * peer.c - cnlab peer grant|grants|revoke|add|list|remove: federation
 * between sites (server/federate.h), set up by each site's administrator.
 *
 * On the site that takes work:   cnlab peer grant NAME --project P
 *                                (the token, once, alone on stdout)
 * On the site that sends it:     cnlab peer add NAME --url URL
 *                                    --token-from-file FILE [--ca FILE]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/format.h"
#include "common/util.h"

#define TOKEN_MAX 4096
#define CA_MAX    (64 * 1024)

int cnl_cli_cmd_peer_grant(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	const char *project = cnl_cli_flag(cli, "project");
	json_t *body, *o;
	int code;

	if (!project)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "peer grant needs --project: the project "
		                    "whose quotas the peer's work runs under");
	body = json_pack("{s:s,s:s}", "name", name, "project", project);
	code =
	    cnl_cli_call(cli, "POST", "/v1/peers/grants", body, NULL, NULL, &o);
	json_decref(body);
	if (code)
		return code;
	if (cli->json) {
		cnl_cli_print_json(o);
	} else {
		/* The token alone on stdout, so that $(...) captures it. */
		printf("%s\n", cnl_cli_str(o, "token", "?"));
		fprintf(stderr,
		        "✓ Peer %s may send work to project %s (as user %s); "
		        "its token is shown once: give it to the peer's "
		        "administrator for cnlab peer add\n",
		        name, cnl_cli_str(o, "project", "?"),
		        cnl_cli_str(o, "user", "?"));
	}
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_peer_grants(struct cnl_cli *cli)
{
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_list_begin(
	         cli, "/v1/peers/grants?limit=1000", NULL, &t, 3,
	         (const char *[]){"PEER", "USER", "PROJECT"}, &o)) ||
	    !o)
		return code;
	json_array_foreach (json_object_get(o, "items"), i, it)
		cnl_cli_table_add(
		    &t, (const char *[]){cnl_cli_str(it, "name", "?"),
		                         cnl_cli_str(it, "user", "?"),
		                         cnl_cli_str(it, "project", "?")});
	return cnl_cli_list_end(&t, o);
}

int cnl_cli_cmd_peer_revoke(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	char *esc = cnl_client_url_escape(name), path[300];
	json_t *o;
	int code;

	snprintf(path, sizeof(path), "/v1/peers/grants/%s", esc);
	free(esc);
	code = cnl_cli_call(cli, "DELETE", path, NULL, NULL, "peer grant", &o);
	if (code)
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Peer %s's grant revoked; %lld of its jobs "
		       "cancelled\n",
		       name,
		       (long long)json_integer_value(
		           json_object_get(o, "cancelled")));
	json_decref(o);
	return 0;
}

/* The whole of @file (at most @max bytes) into a new string; NULL with
 * the reason printed. */
static char *slurp(const char *flag, const char *file, size_t max)
{
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	size_t got = 0;
	char *buf;

	if (fd < 0) {
		cnl_cli_fail(CNL_EXIT_USAGE, "--%s %s: %s", flag, file,
		             strerror(errno));
		return NULL;
	}
	buf = cnl_xmalloc(max + 2);
	while (got <= max) {
		ssize_t r = read(fd, buf + got, max + 1 - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	buf[got] = 0;
	if (got == 0 || got > max) {
		explicit_bzero(buf, max + 2);
		free(buf);
		cnl_cli_fail(CNL_EXIT_USAGE, "--%s %s: want 1..%zu bytes", flag,
		             file, max);
		return NULL;
	}
	return buf;
}

int cnl_cli_cmd_peer_add(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	const char *url = cnl_cli_flag(cli, "url");
	const char *tfile = cnl_cli_flag(cli, "token-from-file");
	const char *cafile = cnl_cli_flag(cli, "ca");
	char *token, *ca = NULL;
	json_t *body, *o;
	int code;

	if (!url || !tfile)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "peer add needs --url URL and "
		                    "--token-from-file FILE (the token of the "
		                    "peer's cnlab peer grant)");
	if (!(token = slurp("token-from-file", tfile, TOKEN_MAX)))
		return CNL_EXIT_USAGE;
	token[strcspn(token, "\r\n")] = 0;
	if (cafile && !(ca = slurp("ca", cafile, CA_MAX))) {
		explicit_bzero(token, strlen(token));
		free(token);
		return CNL_EXIT_USAGE;
	}
	body = json_pack("{s:s,s:s,s:s}", "name", name, "url", url, "token",
	                 token);
	explicit_bzero(token, strlen(token));
	free(token);
	if (ca)
		json_object_set_new(body, "ca", json_string(ca));
	free(ca);
	code = cnl_cli_call(cli, "POST", "/v1/peers", body, NULL, NULL, &o);
	json_decref(body);
	if (code)
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Peer %s at %s: work that waits here past its "
		       "cluster's wait target may go there\n",
		       name, url);
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_peer_list(struct cnl_cli *cli)
{
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_list_begin(
	         cli, "/v1/peers?limit=1000", NULL, &t, 5,
	         (const char *[]){"PEER", "URL", "JOBS", "LAST OK", "ERROR"},
	         &o)) ||
	    !o)
		return code;
	json_array_foreach (json_object_get(o, "items"), i, it) {
		char jobs[24];

		snprintf(
		    jobs, sizeof(jobs), "%lld",
		    (long long)json_integer_value(json_object_get(it, "jobs")));
		cnl_cli_table_add(
		    &t, (const char *[]){cnl_cli_str(it, "name", "?"),
		                         cnl_cli_str(it, "url", "?"), jobs,
		                         cnl_cli_str(it, "last_ok", "-"),
		                         cnl_cli_str(it, "error", "-")});
	}
	return cnl_cli_list_end(&t, o);
}

int cnl_cli_cmd_peer_remove(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	char *esc = cnl_client_url_escape(name), path[300];
	json_t *o;
	int code;

	snprintf(path, sizeof(path), "/v1/peers/%s", esc);
	free(esc);
	code = cnl_cli_call(cli, "DELETE", path, NULL, NULL, "peer", &o);
	if (code)
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Peer %s removed\n", name);
	json_decref(o);
	return 0;
}
