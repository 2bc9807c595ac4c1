/*
 * quota.c - cnlab quota show: GPU-hours, storage and servers against the
 * limits of each project and of the user; cnlab quota set (administrators)
 * changes the limits given and keeps the others.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/format.h"
#include "common/time.h"
#include "common/util.h"

static void quota_line(const char *label, const json_t *q, bool pct)
{
	const json_t *lim = json_object_get(q, "limit");
	char buf[128];

	cnl_cli_format_quota(json_number_value(json_object_get(q, "used")),
	                     json_is_number(lim) ? json_number_value(lim) : -1,
	                     json_number_value(json_object_get(q, "percent")),
	                     pct, buf, sizeof(buf));
	printf("  %-18s %s\n", label, buf);
}

/* A project's quotas per cluster ("clusters": [{cluster, gpu_hours}]). */
static void cluster_lines(const json_t *o)
{
	const json_t *it;
	size_t i;

	json_array_foreach (json_object_get(o, "clusters"), i, it) {
		char label[64];

		snprintf(label, sizeof(label), "GPU-hours in %.31s:",
		         cnl_cli_str(it, "cluster", "?"));
		quota_line(label, json_object_get(it, "gpu_hours"), true);
	}
}

static void quota_block(const json_t *o)
{
	quota_line("GPU-hours used:", json_object_get(o, "gpu_hours"), true);
	quota_line("Storage GB-days:", json_object_get(o, "storage_gb_days"),
	           true);
	quota_line("Concurrent srvs:", json_object_get(o, "concurrent_servers"),
	           false);
	cluster_lines(o);
}

int cnl_cli_cmd_quota_show(struct cnl_cli *cli)
{
	_cleanup_free_ char *path = NULL;
	const char *want = cli->project_flag;
	json_t *o, *it;
	size_t i;
	int code;

	if (want) {
		_cleanup_free_ char *e = cnl_client_url_escape(want);

		path = cnl_cli_pathf("/v1/quota?project=%s", e);
	} else {
		path = cnl_cli_pathf("/v1/quota");
	}
	if ((code = cnl_cli_call(cli, "GET", path, NULL, NULL, "project", &o)))
		return code;
	if (cli->json)
		return cnl_cli_print_json(o), json_decref(o), 0;
	json_array_foreach (json_object_get(o, "projects"), i, it) {
		printf("Project: %s\n", cnl_cli_str(it, "project", "?"));
		quota_block(it);
	}
	if (!want) {
		it = json_object_get(o, "user");
		printf("User: %s\n", cnl_cli_str(it, "user", "?"));
		quota_block(it);
	}
	json_decref(o);
	return 0;
}

/* A limit flag: a non-negative number, or "none" (no limit: null). */
static int limit_arg(const char *flag, const char *v, bool whole, json_t **ret)
{
	char *end;
	double d;

	if (strcmp(v, "none") == 0 || strcmp(v, "unlimited") == 0) {
		*ret = json_null();
		return 0;
	}
	errno = 0;
	d = strtod(v, &end);
	if (errno || end == v || *end || d < 0 || (whole && d != (long)d))
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "--%s: a %snumber >= 0, or none for no "
		                    "limit",
		                    flag, whole ? "whole " : "");
	*ret = whole ? json_integer((json_int_t)d) : json_real(d);
	return 0;
}

int cnl_cli_cmd_quota_set(struct cnl_cli *cli)
{
	static const struct {
		const char *flag, *field;
		bool whole;
	} lim[] = {{"gpu-hours", "gpu_hours", false},
	           {"storage-gb-days", "storage_gb_days", false},
	           {"concurrent-servers", "concurrent_servers", true}};
	const char *user = cnl_cli_flag(cli, "user");
	const char *cluster = cnl_cli_flag(cli, "cluster");
	const char *project = cli->project_flag;
	_cleanup_free_ char *path = NULL, *e = NULL;
	char what[160];
	json_t *body, *o, *v = NULL;
	int code;

	if (!user == !project)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "quota set needs --project NAME or --user "
		                    "NAME");
	body = json_object();
	for (size_t i = 0; i < CNL_ARRAY_SIZE(lim); i++) {
		const char *s = cnl_cli_flag(cli, lim[i].flag);

		if (!s)
			continue;
		if ((code = limit_arg(lim[i].flag, s, lim[i].whole, &v))) {
			json_decref(body);
			return code;
		}
		json_object_set_new(body, lim[i].field, v);
	}
	if (cluster) {
		if (user || json_object_size(body) != 1 ||
		    !json_object_get(body, "gpu_hours")) {
			json_decref(body);
			return cnl_cli_fail(
			    CNL_EXIT_USAGE,
			    "--cluster: a project's --gpu-hours "
			    "in that cluster only");
		}
		json_object_set_new(body, "cluster", json_string(cluster));
	}
	if (!json_object_size(body)) {
		json_decref(body);
		return cnl_cli_fail(
		    CNL_EXIT_USAGE,
		    "give at least one of --gpu-hours, "
		    "--storage-gb-days and --concurrent-servers");
	}
	e = cnl_client_url_escape(user ? user : project);
	path = cnl_cli_pathf("/v1/%s/%s/quota", user ? "users" : "projects", e);
	snprintf(what, sizeof(what), "%s \"%s\"", user ? "user" : "project",
	         user ? user : project);
	code = cnl_cli_call(cli, "PUT", path, body, NULL, what, &o);
	json_decref(body);
	if (code)
		return code;
	if (cli->json) {
		cnl_cli_print_json(o);
	} else {
		printf("%s: %s\n", user ? "User" : "Project",
		       user ? user : project);
		if (cluster)
			cluster_lines(o);
		else
			quota_block(o);
	}
	json_decref(o);
	return 0;
}
