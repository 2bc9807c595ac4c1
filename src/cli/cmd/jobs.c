/*
 * jobs.c - cnlab jobs list|show|cancel (jobs logs and run are in run.c).
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

int cnl_cli_cmd_jobs_list(struct cnl_cli *cli)
{
	char pname[CNL_CLI_ID_MAX];
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_project_items(cli, "jobs", pname, &o)))
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

/* ", zone Z, rack R" of a placement (or a gang member), or "". */
static void where_text(const json_t *p, char *buf, size_t len)
{
	const char *zone = cnl_cli_str(p, "zone", ""),
	           *rack = cnl_cli_str(p, "rack", "");

	snprintf(buf, len, "%s%s%s%s", zone[0] ? ", zone " : "", zone,
	         rack[0] ? ", rack " : "", rack);
}

/*
 * The "Why:" lines of jobs show: what the server recorded when it placed
 * the job (its "placement", fixed at the START decision), or while it
 * waits the scheduler's reason and estimate.  Each line restates a
 * recorded fact; nothing is inferred here.
 */
static void print_why(const json_t *o)
{
	const json_t *st = json_object_get(o, "status");
	const json_t *p = json_object_get(o, "placement");
	const json_t *g = json_object_get(o, "gang");
	const json_t *types = json_object_get(o, "gpu_types");
	const char *state = cnl_cli_str(o, "state", "");
	const char *ds = cnl_cli_str(o, "dataset", NULL);
	char where[160];

	if (strcmp(state, "pending") == 0 && json_is_object(st)) {
		const char *est = cnl_cli_str(st, "estimated_start", NULL);

		printf("Why:       waiting: %s; estimated start %s\n",
		       cnl_cli_str(st, "reason", "?"), est ? est : "unknown");
		return;
	}
	if (!json_is_object(p))
		return;
	where_text(p, where, sizeof(where));
	printf("Why:       on %s (%s%s): %s\n", cnl_cli_str(p, "node", "?"),
	       cnl_cli_str(p, "gpu_type", "no GPU"), where,
	       cnl_cli_str(p, "reason_text", "?"));
	if (ds && json_is_true(json_object_get(p, "dataset_local")))
		printf("Why:       dataset %s is on %s\n", ds,
		       cnl_cli_str(p, "node", "?"));
	else if (ds && json_is_false(json_object_get(p, "dataset_local"))) {
		json_int_t n =
		    json_integer_value(json_object_get(p, "dataset_elsewhere"));

		if (n > 0)
			printf("Why:       dataset %s is not on %s; %lld other "
			       "node%s held it but could not take the job or "
			       "scored lower\n",
			       ds, cnl_cli_str(p, "node", "?"), (long long)n,
			       n == 1 ? "" : "s");
		else
			printf("Why:       dataset %s is not on %s; no node "
			       "held it\n",
			       ds, cnl_cli_str(p, "node", "?"));
	}
	if (json_is_true(json_object_get(p, "gpu_type_allowed"))) {
		char list[256] = "";
		size_t i, n = 0;
		json_t *t;

		json_array_foreach (types, i, t) {
			if (n >= sizeof(list) - 1)
				break;
			n += (size_t)snprintf(list + n, sizeof(list) - n,
			                      "%s%s", i ? ", " : "",
			                      json_string_value(t));
		}
		printf("Why:       GPU type %s is one of those allowed: %s\n",
		       cnl_cli_str(p, "gpu_type", "?"), list);
	}
	if (json_is_object(g)) {
		const json_t *pl = json_object_get(g, "placements");
		size_t i;
		json_t *m;

		printf(
		    "Why:       gang of %lld, one node each:",
		    (long long)json_integer_value(json_object_get(g, "size")));
		json_array_foreach (pl, i, m) {
			where_text(m, where, sizeof(where));
			if (json_object_get(m, "node"))
				printf("%s rank %zu on %s%s%s%s", i ? ";" : "",
				       i, cnl_cli_str(m, "node", "?"),
				       where[0] ? " (" : "",
				       where[0] ? where + 2 : "",
				       where[0] ? ")" : "");
			else
				printf("%s rank %zu not placed (%s)",
				       i ? ";" : "", i,
				       cnl_cli_str(m, "state", "?"));
		}
		printf("\n");
	}
}

int cnl_cli_cmd_jobs_show(struct cnl_cli *cli)
{
	_cleanup_free_ char *path =
	    cnl_cli_pathf("/v1/jobs/%s", cli->args.pos[0]);
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
	if (json_array_size(json_object_get(o, "gpu_types"))) {
		size_t i;
		json_t *t;

		printf("GPU types:");
		json_array_foreach (json_object_get(o, "gpu_types"), i, t)
			printf("%s %s", i ? "," : "", json_string_value(t));
		printf("\n");
	}
	if (json_object_get(o, "dataset"))
		printf("Dataset:   %s\n", cnl_cli_str(o, "dataset", ""));
	if (json_is_object(json_object_get(o, "gang")))
		printf("Gang:      %s, rank %lld of %lld\n",
		       cnl_cli_str(json_object_get(o, "gang"), "id", "?"),
		       (long long)json_integer_value(
		           json_object_get(json_object_get(o, "gang"), "rank")),
		       (long long)json_integer_value(json_object_get(
		           json_object_get(o, "gang"), "size")));
	printf("Preempt:   %s\n",
	       json_is_false(json_object_get(o, "preemptible")) ? "never"
	                                                        : "allowed");
	printf("Exit code: %lld\n",
	       (long long)json_integer_value(json_object_get(o, "exit_code")));
	print_why(o);
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_jobs_cancel(struct cnl_cli *cli)
{
	_cleanup_free_ char *path =
	    cnl_cli_pathf("/v1/jobs/%s/cancel", cli->args.pos[0]);
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
