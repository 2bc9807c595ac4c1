/*
 * jobs.c - cnlab jobs list|show|explain|cancel|resize (jobs logs and run are in
 * run.c).
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
	struct cnl_wire_jobs page;
	json_t *o;
	int code;

	if ((code = cnl_cli_project_items(cli, "jobs", pname, &o)))
		return code;
	code = cnl_cli_read_jobs(o, &page);
	if (code || cli->json) {
		if (!code)
			cnl_cli_print_json(o);
		json_decref(o);
		cnl_wire_jobs_done(&page);
		return code;
	}
	json_decref(o);
	cnl_cli_table_init(&t, 6);
	cnl_cli_table_add(&t, (const char *[]){"ID", "STATE", "PRIORITY", "GPU",
	                                       "EXIT", "COMMAND"});
	for (size_t i = 0; i < page.n; i++) {
		const struct cnl_wire_job *it = &page.items[i];
		char ex[16] = "-", cmd[48];

		if (strcmp(it->state, "succeeded") == 0 ||
		    strcmp(it->state, "failed") == 0)
			snprintf(ex, sizeof(ex), "%d", it->exit_code);
		snprintf(cmd, sizeof(cmd), "%.*s", (int)sizeof(cmd) - 1,
		         it->command);
		if (strlen(it->command) >= sizeof(cmd))
			memcpy(cmd + sizeof(cmd) - 4, "...", 4);
		cnl_cli_table_add(
		    &t, (const char *[]){it->id, it->state,
		                         cnl_wire_priority_name(it->priority),
		                         it->gpu, ex, cmd});
	}
	cnl_cli_table_print(&t, stdout);
	cnl_cli_table_done(&t);
	cnl_wire_jobs_done(&page);
	return 0;
}

/* ", zone Z, rack R" of a placement (or a gang member), or "". */
static void where_text(const char *zone, const char *rack, char *buf,
                       size_t len)
{
	snprintf(buf, len, "%s%s%s%s", zone[0] ? ", zone " : "", zone,
	         rack[0] ? ", rack " : "", rack);
}

/* "HEAD name, name..." on a line of its own; nothing for no names. */
static void print_names(const char *head, char (*names)[CNL_WIRE_NAME_MAX],
                        int n)
{
	if (!n)
		return;
	printf("%s", head);
	for (int i = 0; i < n; i++)
		printf("%s %s", i ? "," : "", names[i]);
	printf("\n");
}

/*
 * The "Why:" lines of jobs show: what the server recorded when it placed
 * the job (its "placement", fixed at the START decision), or while it
 * waits the scheduler's reason and estimate.  Each line restates a
 * recorded fact; nothing is inferred here.
 */
static void print_why(const struct cnl_wire_job *o)
{
	const struct cnl_wire_status *st = &o->status;
	const struct cnl_wire_placement *p = &o->placement;
	const struct cnl_wire_job_gang *g = o->gang;
	const char *ds = o->dataset[0] ? o->dataset : NULL;
	char where[160], t[CNL_TIME_RFC3339_MAX];

	if (strcmp(o->state, "pending") == 0 && o->has_status) {
		printf("Why:       waiting: %s; estimated start %s\n",
		       st->pending ? st->reason : "?",
		       cnl_cli_time(st->pending ? st->estimated_start_ms : 0, t,
		                    sizeof(t), "unknown"));
		return;
	}
	if (!o->has_placement)
		return;
	where_text(p->zone, p->rack, where, sizeof(where));
	printf("Why:       on %s (%s%s): %s\n", p->node,
	       p->gpu_type[0] ? p->gpu_type : "no GPU", where, p->reason_text);
	if (ds && p->has_dataset_local && p->dataset_local)
		printf("Why:       dataset %s is on %s\n", ds, p->node);
	else if (ds && p->has_dataset_local) {
		int n = p->dataset_elsewhere;

		if (n > 0)
			printf("Why:       dataset %s is not on %s; %d other "
			       "node%s held it but could not take the job or "
			       "scored lower\n",
			       ds, p->node, n, n == 1 ? "" : "s");
		else
			printf("Why:       dataset %s is not on %s; no node "
			       "held it\n",
			       ds, p->node);
	}
	if (p->has_preferred && p->preferred)
		printf("Why:       %s is a node it prefers\n", p->node);
	else if (p->has_preferred)
		printf("Why:       %s is not a node it prefers: those had no "
		       "room or could not run it\n",
		       p->node);
	if (p->has_gpu_type_allowed && p->gpu_type_allowed) {
		char list[256] = "";
		size_t n = 0;

		for (int i = 0; i < o->n_gpu_types; i++) {
			if (n >= sizeof(list) - 1)
				break;
			n +=
			    (size_t)snprintf(list + n, sizeof(list) - n, "%s%s",
			                     i ? ", " : "", o->gpu_types[i]);
		}
		printf("Why:       GPU type %s is one of those allowed: %s\n",
		       p->gpu_type[0] ? p->gpu_type : "?", list);
	}
	if (g) {
		printf("Why:       gang of %d, one node each:", g->size);
		for (int i = 0; i < g->n_placements; i++) {
			const struct cnl_wire_gang_place *m = &g->placements[i];

			where_text(m->zone, m->rack, where, sizeof(where));
			if (m->node[0])
				printf("%s rank %d on %s%s%s%s", i ? ";" : "",
				       i, m->node, where[0] ? " (" : "",
				       where[0] ? where + 2 : "",
				       where[0] ? ")" : "");
			else
				printf("%s rank %d not placed (%s)",
				       i ? ";" : "", i, m->state);
		}
		printf("\n");
	}
}

int cnl_cli_cmd_jobs_show(struct cnl_cli *cli)
{
	_cleanup_free_ char *path =
	    cnl_cli_pathf("/v1/jobs/%s", cli->args.pos[0]);
	struct cnl_wire_job o;
	char t[CNL_TIME_RFC3339_MAX];
	json_t *j;
	int code;

	if ((code = cnl_cli_call(cli, "GET", path, NULL, NULL, "job", &j)))
		return code;
	code = cnl_cli_read_job(j, &o);
	if (code || cli->json) {
		if (!code)
			cnl_cli_print_json(j);
		json_decref(j);
		cnl_wire_job_done(&o);
		return code;
	}
	json_decref(j);
	printf("ID:        %s\n", o.id);
	printf("State:     %s", o.state);
	if (o.has_status)
		printf(" (%s%s%s)", o.status.phase,
		       o.status.node[0] ? " on " : "", o.status.node);
	printf("\nCommand:   %s\n", o.command);
	printf("GPU:       %s\n", o.gpu);
	if (o.has_status)
		cnl_cli_print_size(&o.status);
	printf("Priority:  %s\n", cnl_wire_priority_name(o.priority));
	printf("Deadline:  %s\n",
	       cnl_cli_time(o.deadline_ms, t, sizeof(t), "none"));
	print_names("GPU types:", o.gpu_types, o.n_gpu_types);
	if (o.dataset[0])
		printf("Dataset:   %s\n", o.dataset);
	if (o.cluster[0])
		printf("Cluster:   %s (asked for)\n", o.cluster);
	if (o.peer[0])
		printf("Site:      peer %s, as job %s there\n", o.peer,
		       o.peer_job[0] ? o.peer_job : "(being sent)");
	if (o.peer[0] && o.message[0])
		printf("Why:       %s\n", o.message);
	print_names("Nodes:     only", o.nodelist, o.n_nodelist);
	print_names("Excluded:", o.exclude, o.n_exclude);
	print_names("Preferred:", o.prefer, o.n_prefer);
	print_names("Avoided:  ", o.avoid, o.n_avoid);
	if (o.gang)
		printf("Gang:      %s, rank %d of %d\n", o.gang->id,
		       o.gang->rank, o.gang->size);
	printf("Preempt:   %s\n", o.preemptible ? "allowed" : "never");
	printf("Exit code: %d\n", o.exit_code);
	print_why(&o);
	cnl_wire_job_done(&o);
	return 0;
}

/*
 * cnlab jobs explain JOB: the scheduler's decisions for the job, in order
 * and with their times, as the audit chain holds them (auth, quota,
 * queue, admission at submission; cluster, slice, preempt as the
 * scheduler decides; a pending reason each time it changes).
 */
int cnl_cli_cmd_jobs_explain(struct cnl_cli *cli)
{
	_cleanup_free_ char *path =
	    cnl_cli_pathf("/v1/jobs/%s/decisions", cli->args.pos[0]);
	struct cnl_cli_table t;
	json_t *j, *items, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_call(cli, "GET", path, NULL, NULL, "job", &j)))
		return code;
	if (cli->json) {
		cnl_cli_print_json(j);
		json_decref(j);
		return 0;
	}
	items = json_object_get(j, "items");
	if (!json_array_size(items)) {
		printf("No decisions recorded for %s\n", cli->args.pos[0]);
		json_decref(j);
		return 0;
	}
	cnl_cli_table_init(&t, 3);
	cnl_cli_table_add(&t, (const char *[]){"TIME", "STAGE", "DECISION"});
	json_array_foreach (items, i, it) {
		const char *tm = json_string_value(json_object_get(it, "time"));
		const char *st =
		    json_string_value(json_object_get(it, "stage"));
		const char *d =
		    json_string_value(json_object_get(it, "decision"));

		cnl_cli_table_add(&t,
		                  (const char *[]){tm ? tm : "-", st ? st : "-",
		                                   d ? d : "-"});
	}
	cnl_cli_table_print(&t, stdout);
	cnl_cli_table_done(&t);
	json_decref(j);
	return 0;
}

int cnl_cli_cmd_jobs_cancel(struct cnl_cli *cli)
{
	_cleanup_free_ char *path =
	    cnl_cli_pathf("/v1/jobs/%s/cancel", cli->args.pos[0]);
	struct cnl_wire_job o;
	json_t *j;
	int code;

	if ((code = cnl_cli_call(cli, "POST", path, NULL, NULL, "job", &j)))
		return code;
	if ((code = cnl_cli_read_job(j, &o))) {
		json_decref(j);
		return code;
	}
	if (cli->json)
		cnl_cli_print_json(j);
	else
		printf("✓ Cancelling %s (state: %s)\n", cli->args.pos[0],
		       o.state);
	json_decref(j);
	cnl_wire_job_done(&o);
	return 0;
}

/* cnlab jobs resize JOB --blocks N: an in-flight resize (a pending job's
 * request changes; a running one grows at once or shrinks once its VRAM
 * use fits). */
int cnl_cli_cmd_jobs_resize(struct cnl_cli *cli)
{
	_cleanup_free_ char *path =
	    cnl_cli_pathf("/v1/jobs/%s", cli->args.pos[0]);
	struct cnl_wire_job o;
	json_t *body, *j;
	int code;

	if ((code = cnl_cli_resize_body(cli, &body)))
		return code;
	code = cnl_cli_call(cli, "PATCH", path, body, NULL, "job", &j);
	json_decref(body);
	if (code)
		return code;
	if ((code = cnl_cli_read_job(j, &o))) {
		json_decref(j);
		return code;
	}
	if (cli->json) {
		cnl_cli_print_json(j);
	} else {
		printf("✓ Resized %s (state: %s)\n", o.id, o.state);
		if (o.has_status)
			cnl_cli_print_size(&o.status);
	}
	json_decref(j);
	cnl_wire_job_done(&o);
	return 0;
}
