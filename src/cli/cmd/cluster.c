/*
 * cluster.c - cnlab cluster list|show|set-policy: the clusters one
 * control plane governs, their load and their scheduling policies.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/format.h"
#include "common/util.h"

static void weights_text(const json_t *w, char *buf, size_t len)
{
	const char *k;
	json_t *v;
	size_t at = 0;

	buf[0] = '\0';
	json_object_foreach ((json_t *)w, k, v) {
		if (at >= len)
			break;
		at += (size_t)snprintf(buf + at, len - at, "%s%s=%g",
		                       at ? "," : "", k, json_number_value(v));
	}
	if (!buf[0])
		snprintf(buf, len, "-");
}

int cnl_cli_cmd_cluster_list(struct cnl_cli *cli)
{
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_list_begin(cli, "/v1/clusters", "clusters", &t, 7,
	                               (const char *[]){"NAME", "NODES", "GPUS",
	                                                "IN USE", "PENDING",
	                                                "RUNNING", "POLICY"},
	                               &o)) ||
	    !o)
		return code;
	json_array_foreach (json_object_get(o, "items"), i, it) {
		char nodes[32], gpus[16], use[16], pend[16], run[16];

		snprintf(nodes, sizeof(nodes), "%lld/%lld up",
		         json_integer_value(json_object_get(it, "nodes_up")),
		         json_integer_value(json_object_get(it, "nodes")));
		snprintf(gpus, sizeof(gpus), "%lld",
		         json_integer_value(json_object_get(it, "gpus")));
		snprintf(use, sizeof(use), "%.0f%%",
		         100 * json_number_value(
		                   json_object_get(it, "utilisation")));
		snprintf(pend, sizeof(pend), "%lld",
		         json_integer_value(json_object_get(it, "pending")));
		snprintf(run, sizeof(run), "%lld",
		         json_integer_value(json_object_get(it, "running")));
		cnl_cli_table_add(
		    &t, (const char *[]){cnl_cli_str(it, "name", "?"), nodes,
		                         gpus, use, pend, run,
		                         cnl_cli_str(it, "policy", "?")});
	}
	return cnl_cli_list_end(&t, o);
}

int cnl_cli_cmd_cluster_show(struct cnl_cli *cli)
{
	char w[512];
	json_t *o = NULL, *names, *n;
	size_t i;
	int code = cnl_cli_call_named(cli, "GET", "/v1/clusters/", "",
	                              "cluster", cli->args.pos[0], NULL, &o);

	if (code || !o)
		return code;
	weights_text(json_object_get(o, "weights"), w, sizeof(w));
	printf("Cluster:     %s\n", cnl_cli_str(o, "name", "?"));
	printf("Nodes:       %lld (%lld taking work), %lld GPUs\n",
	       json_integer_value(json_object_get(o, "nodes")),
	       json_integer_value(json_object_get(o, "nodes_up")),
	       json_integer_value(json_object_get(o, "gpus")));
	printf("In use:      %.0f%% of its GPU capacity\n",
	       100 * json_number_value(json_object_get(o, "utilisation")));
	printf("Work:        %lld pending, %lld running\n",
	       json_integer_value(json_object_get(o, "pending")),
	       json_integer_value(json_object_get(o, "running")));
	{
		json_t *f = json_object_get(o, "forecast");
		json_t *e = json_object_get(f, "error");
		char err[48] = "";

		if (json_is_number(e))
			snprintf(err, sizeof(err), "; error so far %.0f%%",
			         100 * json_number_value(e));
		if (f)
			printf("Forecast:    %.0f%% in 90 s (%.0f blocks of "
			       "new work expected; run times x%.2f of their "
			       "estimates%s)\n",
			       100 * json_number_value(
			                 json_object_get(f, "utilisation_90s")),
			       json_number_value(
			           json_object_get(f, "arrivals_90s_blocks")),
			       json_number_value(
			           json_object_get(f, "runtime_ratio")),
			       err);
	}
	printf("Policy:      %s%s\n", cnl_cli_str(o, "policy", "?"),
	       json_is_true(json_object_get(o, "configured"))
	           ? ""
	           : " (the control plane's; none set for this cluster)");
	printf("Weights:     %s\n", w);
	printf("Wait target: %lld s%s\n",
	       json_integer_value(json_object_get(o, "wait_target_s")),
	       json_integer_value(json_object_get(o, "wait_target_s"))
	           ? " (then work moves to a cluster that can start it)"
	           : " (work never moves away)");
	names = json_object_get(o, "node_names");
	if (json_array_size(names)) {
		printf("Node names: ");
		json_array_foreach (names, i, n)
			printf(" %s", json_string_value(n));
		printf("\n");
	}
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_cluster_set_policy(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	const char *pol = cnl_cli_flag(cli, "policy");
	const char *wts = cnl_cli_flag(cli, "weights");
	const char *wt = cnl_cli_flag(cli, "wait-target");
	json_t *body = json_object(), *weights = json_object(), *o = NULL;
	int code;

	if (!pol && !wts && !wt) {
		json_decref(body);
		json_decref(weights);
		return cnl_cli_fail(
		    CNL_EXIT_USAGE,
		    "cluster set-policy needs --policy NAME, "
		    "--weights K=V,... or --wait-target SECONDS");
	}
	if (pol)
		json_object_set_new(body, "policy", json_string(pol));
	/* --weights w_fairshare=8,max_reservations=2 */
	if (wts) {
		char bad[64];

		json_decref(weights);
		if (!(weights = cnl_cli_number_list(wts, bad))) {
			json_decref(body);
			return cnl_cli_fail(
			    CNL_EXIT_USAGE,
			    "--weights: \"%s\": want "
			    "KNOB=NUMBER,... (e.g. w_fairshare=8)",
			    bad);
		}
	}
	if (wts)
		json_object_set(body, "weights", weights);
	json_decref(weights);
	if (wt) {
		char *end;
		long long s;

		errno = 0;
		s = strtoll(wt, &end, 10);
		if (errno || end == wt || *end || s < 0) {
			json_decref(body);
			return cnl_cli_fail(
			    CNL_EXIT_USAGE,
			    "--wait-target: want whole seconds, "
			    "0 or more: %s",
			    wt);
		}
		json_object_set_new(body, "wait_target_s", json_integer(s));
	}
	code = cnl_cli_call_named(cli, "PATCH", "/v1/clusters/", "/policy",
	                          "cluster", name, body, &o);
	json_decref(body);
	if (code || !o)
		return code;
	printf("✓ Cluster %s schedules with policy %s\n", name,
	       cnl_cli_str(o, "policy", "?"));
	json_decref(o);
	return 0;
}
