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

	if ((code = cnl_cli_list_begin(
	         cli, "/v1/profiles?limit=1000", NULL, &t, 4,
	         (const char *[]){"NAME", "GPU", "SLICE", "AVAILABLE"}, &o)) ||
	    !o)
		return code;
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
	return cnl_cli_list_end(&t, o);
}

int cnl_cli_cmd_profile_create(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	const char *gpu = cnl_cli_flag(cli, "gpu");
	const char *desc = cnl_cli_flag(cli, "description");
	json_t *body, *o;
	int code;

	if (!gpu)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "profile create needs --gpu SHAPE (e.g. "
		                    "h100-25, a100-3g.20gb, h100-full)");
	body = json_pack("{s:s,s:s,s:s}", "name", name, "gpu", gpu,
	                 "description", desc ? desc : "");
	code = cnl_cli_call(cli, "POST", "/v1/profiles", body, NULL, NULL, &o);
	json_decref(body);
	if (code)
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Profile %s = %s (users see it in cnlab profiles "
		       "list)\n",
		       name, gpu);
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_profile_delete(struct cnl_cli *cli)
{
	const char *name = cli->args.pos[0];
	json_t *o;
	int code = cnl_cli_call_named(cli, "DELETE", "/v1/profiles/", "",
	                              "profile", name, NULL, &o);

	if (code || !o)
		return code;
	printf("✓ Deleted profile %s\n", name);
	json_decref(o);
	return 0;
}
