/*
 * audit.c - cnlab audit (administrators): the hash-chained audit log.
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

int cnl_cli_cmd_audit(struct cnl_cli *cli)
{
	const char *after = cnl_cli_flag(cli, "after");
	const char *limit = cnl_cli_flag(cli, "limit");
	_cleanup_free_ char *path = NULL, *ea = NULL, *el = NULL;
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	ea = cnl_client_url_escape(after ? after : "0");
	el = cnl_client_url_escape(limit ? limit : "100");
	path = cnl_cli_pathf("/v1/audit?after=%s&limit=%s", ea, el);
	if ((code = cnl_cli_list_begin(cli, path, NULL, &t, 6,
	                               (const char *[]){"SEQ", "TIME", "ACTOR",
	                                                "ACTION", "TARGET",
	                                                "RESULT"},
	                               &o)) ||
	    !o)
		return code;
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
