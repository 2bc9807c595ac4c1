/*
 * profiles.c - cnlab profiles list: the administrator's named GPU shapes
 * and when each can start.
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

static void availability(const json_t *a, char *buf, size_t len)
{
	const json_t *now = json_object_get(a, "now");
	int64_t wait;
	char w[32];

	if (!json_is_object(a)) {
		snprintf(buf, len, "-");
		return;
	}
	if (json_is_true(now)) {
		snprintf(buf, len, "✓ now");
		return;
	}
	wait = cnl_cli_until(cnl_cli_str(a, "estimated_start", NULL));
	if (wait < 0) {
		snprintf(buf, len, "✗ no capacity");
		return;
	}
	cnl_cli_format_wait(wait < 60000 ? 60000 : wait, w, sizeof(w));
	snprintf(buf, len, "queue: %s", w);
}

int cnl_cli_cmd_profiles_list(struct cnl_cli *cli)
{
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_call(cli, "GET", "/v1/profiles?limit=1000", NULL,
	                         NULL, NULL, &o)))
		return code;
	if (cli->json)
		return cnl_cli_print_json(o), json_decref(o), 0;
	cnl_cli_table_init(&t, 4);
	cnl_cli_table_add(
	    &t, (const char *[]){"NAME", "GPU", "SLICE", "AVAILABLE"});
	json_array_foreach (json_object_get(o, "items"), i, it) {
		char av[64];
		const char *type = cnl_cli_str(it, "gpu_type", "-");
		char gpu[64];

		/* "H100-80GB-SXM" reads as H100 in a narrow table. */
		snprintf(gpu, sizeof(gpu), "%s", type);
		gpu[strcspn(gpu, "-")] = '\0';
		availability(json_object_get(it, "availability"), av,
		             sizeof(av));
		cnl_cli_table_add(
		    &t, (const char *[]){cnl_cli_str(it, "name", "?"),
		                         gpu[0] ? gpu : type,
		                         cnl_cli_str(it, "slice", "-"), av});
	}
	cnl_cli_table_print(&t, stdout);
	cnl_cli_table_done(&t);
	json_decref(o);
	return 0;
}
