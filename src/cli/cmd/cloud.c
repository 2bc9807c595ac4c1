/*
 * cloud.c - cnlab policy burst and cnlab cloud add|list (administrators):
 * the hybrid-cloud settings of the seeds.
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

static int parse_number(const char *flag, const char *s, double *ret)
{
	char *end;

	errno = 0;
	*ret = strtod(s, &end);
	if (errno || end == s || *end || *ret < 0)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "--%s: not a non-negative number: %s", flag,
		                    s);
	return 0;
}

int cnl_cli_cmd_policy_burst(struct cnl_cli *cli)
{
	const char *th = cnl_cli_flag(cli, "threshold");
	const char *prov = cnl_cli_flag(cli, "provider");
	const char *strat = cnl_cli_flag(cli, "strategy");
	const char *budget = cnl_cli_flag(cli, "max-cloud-budget");
	bool disable = cnl_cli_flag(cli, "disable") != NULL;
	double t = 0, b = 0;
	json_t *body, *o;
	int code;

	if (!th && !prov && !strat && !budget && !disable) {
		/* No flags: show the policy. */
		if ((code = cnl_cli_call(cli, "GET", "/v1/policy/burst", NULL,
		                         NULL, NULL, &o)))
			return code;
		if (cli->json)
			return cnl_cli_print_json(o), json_decref(o), 0;
		if (!json_is_true(json_object_get(o, "enabled")))
			printf("Burst: disabled\n");
		else
			printf(
			    "Burst: enabled\n  Threshold:        %.2f\n"
			    "  Provider:         %s\n"
			    "  Strategy:         %s\n"
			    "  Max cloud budget: %.0f\n",
			    json_number_value(json_object_get(o, "threshold")),
			    cnl_cli_str(o, "provider", "?"),
			    cnl_cli_str(o, "strategy", "?"),
			    json_number_value(
			        json_object_get(o, "max_cloud_budget")));
		json_decref(o);
		return 0;
	}
	if (!disable && (!th || !prov || !strat || !budget))
		return cnl_cli_fail(
		    CNL_EXIT_USAGE,
		    "policy burst needs --threshold, --provider, "
		    "--strategy and --max-cloud-budget (or "
		    "--disable)");
	if ((th && (code = parse_number("threshold", th, &t))) ||
	    (budget && (code = parse_number("max-cloud-budget", budget, &b))))
		return code;
	body = json_pack("{s:f,s:s,s:s,s:f,s:b}", "threshold", t, "provider",
	                 prov ? prov : "aws", "strategy",
	                 strat ? strat : "spot-then-on-demand",
	                 "max_cloud_budget", b, "enabled", !disable);
	if (disable) {
		json_decref(body);
		body = json_pack("{s:b}", "enabled", 0);
	}
	code =
	    cnl_cli_call(cli, "PUT", "/v1/policy/burst", body, NULL, NULL, &o);
	json_decref(body);
	if (code)
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else if (disable)
		printf("✓ Bursting disabled\n");
	else
		printf("✓ Burst to %s above %.0f%% local use (%s, budget "
		       "%s)\n",
		       prov, t * 100, strat, budget);
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_cloud_add(struct cnl_cli *cli)
{
	const char *prov = cli->args.pos[0];
	const char *acct = cnl_cli_flag(cli, "account");
	const char *region = cnl_cli_flag(cli, "region");
	const char *types = cnl_cli_flag(cli, "instance-types");
	json_t *body, *list, *o;
	int code;

	if (!acct || !region || !types)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "cloud add needs --account, --region and "
		                    "--instance-types a,b,c");
	list = json_array();
	for (const char *p = types; *p;) {
		size_t n = strcspn(p, ",");

		if (n)
			json_array_append_new(list, json_stringn(p, n));
		p += n;
		if (*p == ',')
			p++;
	}
	body = json_pack("{s:s,s:s,s:s,s:o}", "provider", prov, "account", acct,
	                 "region", region, "instance_types", list);
	code = cnl_cli_call(cli, "POST", "/v1/cloud/accounts", body, NULL, NULL,
	                    &o);
	json_decref(body);
	if (code)
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Added %s account %s in %s (%zu instance types)\n",
		       prov, acct, region,
		       json_array_size(json_object_get(o, "instance_types")));
	json_decref(o);
	return 0;
}

int cnl_cli_cmd_cloud_list(struct cnl_cli *cli)
{
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_list_begin(
	         cli, "/v1/cloud/accounts?limit=1000", NULL, &t, 5,
	         (const char *[]){"ID", "PROVIDER", "ACCOUNT", "REGION",
	                          "INSTANCE TYPES"},
	         &o)) ||
	    !o)
		return code;
	json_array_foreach (json_object_get(o, "items"), i, it) {
		char types[256] = "";
		json_t *ty;
		size_t k;

		json_array_foreach (json_object_get(it, "instance_types"), k,
		                    ty) {
			size_t used = strlen(types);

			snprintf(types + used, sizeof(types) - used, "%s%s",
			         k ? "," : "", json_string_value(ty));
		}
		cnl_cli_table_add(
		    &t,
		    (const char *[]){cnl_cli_str(it, "id", "?"),
		                     cnl_cli_str(it, "provider", "?"),
		                     cnl_cli_str(it, "account", "?"),
		                     cnl_cli_str(it, "region", "?"), types});
	}
	return cnl_cli_list_end(&t, o);
}
