/*
 * node.c - cnlab node list|show|cordon|drain|undrain|join-token|revoke
 * (administrators).
 *
 * cordon: no new work is placed on the node; drain: no new work, and the
 * node is being emptied for maintenance; undrain: back in service.  A
 * join token is the credential a new node's agent starts with.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/format.h"
#include "common/time.h"
#include "common/util.h"

int cnl_cli_cmd_node_list(struct cnl_cli *cli)
{
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_list_begin(cli, "/v1/nodes?limit=1000", NULL, &t, 6,
	                               (const char *[]){"NAME", "GPU", "GPUS",
	                                                "STATE", "BLOCKS USED",
	                                                "LAST SEEN"},
	                               &o)) ||
	    !o)
		return code;
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
		/* Off (or powering on) says more than the state it keeps. */
		const char *power = cnl_cli_str(it, "power", "on");
		cnl_cli_table_add(
		    &t, (const char *[]){cnl_cli_str(it, "name", "?"),
		                         cnl_cli_str(it, "gpu_type", "?"), gpus,
		                         strcmp(power, "on") != 0
		                             ? power
		                             : cnl_cli_str(it, "state", "?"),
		                         blocks, seen});
	}
	return cnl_cli_list_end(&t, o);
}

int cnl_cli_cmd_node_show(struct cnl_cli *cli)
{
	json_t *o, *it;
	size_t i;
	int code = cnl_cli_call_named(cli, "GET", "/v1/nodes/", "", "node",
	                              cli->args.pos[0], NULL, &o);

	if (code || !o)
		return code;
	printf("Node:       %s (%s)\n", cnl_cli_str(o, "name", "?"),
	       cnl_cli_str(o, "id", "?"));
	printf("State:      %s\n", cnl_cli_str(o, "state", "?"));
	printf("Power:      %s\n", cnl_cli_str(o, "power", "on"));
	printf("GPUs:       %lld x %s\n",
	       (long long)json_integer_value(json_object_get(o, "gpus")),
	       cnl_cli_str(o, "gpu_type", "-"));
	printf(
	    "Blocks:     %lld / %lld used\n",
	    (long long)json_integer_value(json_object_get(o, "blocks_used")),
	    (long long)json_integer_value(json_object_get(o, "blocks_total")));
	printf("Labels:     cluster=%s zone=%s rack=%s\n",
	       cnl_cli_str(o, "cluster", "-"), cnl_cli_str(o, "zone", "-"),
	       cnl_cli_str(o, "rack", "-"));
	printf("Last seen:  %llds ago\n",
	       (long long)json_integer_value(
	           json_object_get(o, "last_seen_s_ago")));
	json_array_foreach (json_object_get(o, "running"), i, it)
		printf("Running:    %s %s (%s, %lld blocks, %s)\n",
		       cnl_cli_str(it, "kind", "?"), cnl_cli_str(it, "id", "?"),
		       cnl_cli_str(it, "shape", "?"),
		       (long long)json_integer_value(
		           json_object_get(it, "blocks")),
		       cnl_cli_str(it, "phase", "?"));
	json_decref(o);
	return 0;
}

static int set_state(struct cnl_cli *cli, const char *state, const char *msg)
{
	const char *name = cli->args.pos[0];
	json_t *body = json_pack("{s:s}", "state", state), *o;
	int code = cnl_cli_call_named(cli, "PATCH", "/v1/nodes/", "", "node",
	                              name, body, &o);

	json_decref(body);
	if (code || !o)
		return code;
	printf("✓ Node %s: %s\n", name, msg);
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_node_cordon(struct cnl_cli *cli)
{
	return set_state(cli, "cordoned",
	                 "cordoned (no new work; running work stays)");
}

int cnl_cli_cmd_node_drain(struct cnl_cli *cli)
{
	return set_state(cli, "draining",
	                 "draining (no new work; empty it for maintenance)");
}

int cnl_cli_cmd_node_undrain(struct cnl_cli *cli)
{
	return set_state(cli, "up", "back in service");
}

int cnl_cli_cmd_node_join_token(struct cnl_cli *cli)
{
	const char *node = cnl_cli_flag(cli, "node");
	const char *exp = cnl_cli_flag(cli, "expires");
	int64_t ms = 3600000LL;
	json_t *body, *o;
	int code;

	if (!node || !node[0])
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "--node: the name the node will register "
		                    "with is required (a join token registers "
		                    "that node only)");
	if (exp && (cnl_duration_parse(exp, &ms) < 0 || ms < 1000 ||
	            ms > 72 * 3600000LL))
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "--expires: a duration from 1s to 72h "
		                    "(e.g. 1h)");
	body = json_pack("{s:s,s:I}", "node", node, "expires_in_seconds",
	                 (json_int_t)((ms + 999) / 1000));
	code = cnl_cli_call(cli, "POST", "/v1/nodes/join-tokens", body, NULL,
	                    NULL, &o);
	json_decref(body);
	if (code)
		return code;
	if (cli->json) {
		cnl_cli_print_json(o);
	} else {
		printf("Join token for node %s (shown once, works once, "
		       "expires %s):\n  %s\n\n"
		       "On the new node, as root:\n"
		       "  CNLAB_AGENT_TOKEN=%s cnlab-agent --server %s "
		       "--name %s\n\n"
		       "The agent exchanges it for the node's own credential "
		       "(kept in its work\ndirectory). Cut the node off: cnlab "
		       "node revoke %s\n",
		       node, cnl_cli_str(o, "expires_at", "?"),
		       cnl_cli_str(o, "token", "?"),
		       cnl_cli_str(o, "token", "?"), cli->server, node, node);
	}
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_node_revoke(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	json_t *o;
	int code = cnl_cli_call_named(cli, "POST", "/v1/nodes/", "/revoke",
	                              "node", name, NULL, &o);

	if (code || !o)
		return code;
	printf("✓ Node %s revoked: its credentials no longer work and its "
	       "work moves elsewhere.\n  A re-join needs a new join token "
	       "(cnlab node join-token --node %s).\n",
	       name, name);
	json_decref(o);
	return 0;
}
