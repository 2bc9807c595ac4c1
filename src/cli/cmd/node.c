/*
 * node.c - cnlab nodes list (administrators).
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

int cnl_cli_cmd_nodes_list(struct cnl_cli *cli)
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
