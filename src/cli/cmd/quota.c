/*
 * quota.c - cnlab quota show: GPU-hours, storage and servers against the
 * limits of each project and of the user.
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

static void quota_block(const json_t *o)
{
	quota_line("GPU-hours used:", json_object_get(o, "gpu_hours"), true);
	quota_line("Storage GB-days:", json_object_get(o, "storage_gb_days"),
	           true);
	quota_line("Concurrent srvs:", json_object_get(o, "concurrent_servers"),
	           false);
}

int cnl_cli_cmd_quota_show(struct cnl_cli *cli)
{
	_cleanup_free_ char *path = NULL;
	const char *want = cli->project_flag;
	json_t *o, *it;
	size_t i;
	int code;

	if (want) {
		_cleanup_free_ char *e = cnl_cli_url_escape(want);

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
