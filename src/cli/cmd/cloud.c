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
#include <stdlib.h>
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

#define SECRET_MAX 256

/* The secret access key from @file (NULL: stdin): its first line, without
 * the line end, into @out; 0 or a CLI exit code. */
static int read_secret(const char *file, char *out, size_t n)
{
	int fd = file ? open(file, O_RDONLY | O_CLOEXEC) : STDIN_FILENO;
	size_t got = 0;

	if (fd < 0)
		return cnl_cli_fail(CNL_EXIT_USAGE, "--secret-from-file %s: %s",
		                    file, strerror(errno));
	while (got + 1 < n) {
		ssize_t r = read(fd, out + got, n - 1 - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	if (file)
		close(fd);
	out[got] = '\0';
	out[strcspn(out, "\r\n")] = '\0';
	if (!out[0] || strlen(out) > SECRET_MAX) {
		explicit_bzero(out, n);
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "the secret from %s: want one "
		                    "line of 1..%d characters",
		                    file ? file : "stdin", SECRET_MAX);
	}
	return 0;
}

/* A GCP service account's JSON key from @file, as the "credentials" of
 * an account; NULL with the CLI's exit code in *@code. */
static json_t *read_key_file(const char *file, int *code)
{
	json_error_t je;
	json_t *k = json_load_file(file, JSON_REJECT_DUPLICATES, &je), *cr;
	const char *type = json_string_value(json_object_get(k, "type"));

	*code = 0;
	if (!k) {
		*code = cnl_cli_fail(CNL_EXIT_USAGE, "--key-file %s: %s", file,
		                     je.text);
		return NULL;
	}
	if (!type || strcmp(type, "service_account") != 0 ||
	    !json_string_value(json_object_get(k, "client_email")) ||
	    !json_string_value(json_object_get(k, "private_key"))) {
		json_decref(k);
		*code = cnl_cli_fail(CNL_EXIT_USAGE,
		                     "--key-file %s: not a service account's "
		                     "key (want \"type\": \"service_account\", "
		                     "client_email and private_key, as Google "
		                     "downloads it)",
		                     file);
		return NULL;
	}
	cr = json_pack("{s:O,s:O}", "client_email",
	               json_object_get(k, "client_email"), "private_key",
	               json_object_get(k, "private_key"));
	if (json_string_value(json_object_get(k, "token_uri")))
		json_object_set(cr, "token_uri",
		                json_object_get(k, "token_uri"));
	json_decref(k);
	return cr;
}

/* "TYPE=GxMODEL:CPUS:GIB:USD,..." as the API's "types" object; NULL when
 * an item is not of that form (the API checks the values). */
static json_t *type_specs(const char *list)
{
	json_t *o = json_object();
	char *dup = cnl_xstrdup(list), *save = NULL;

	for (char *it = strtok_r(dup, ",", &save); it;
	     it = strtok_r(NULL, ",", &save)) {
		char name[65], model[65];
		int gpus, cpus, gib, used = 0;
		double usd;

		if (sscanf(it, "%64[^=]=%dx%64[^:]:%d:%d:%lf%n", name, &gpus,
		           model, &cpus, &gib, &usd, &used) != 6 ||
		    it[used] != '\0' || json_object_get(o, name)) {
			json_decref(o);
			o = NULL;
			break;
		}
		json_object_set_new(o, name,
		                    json_pack("{s:s,s:i,s:i,s:i,s:f}", "model",
		                              model, "gpus", gpus, "vcpus",
		                              cpus, "mem_gib", gib, "price_h",
		                              usd));
	}
	free(dup);
	if (o && json_object_size(o) == 0) {
		json_decref(o);
		o = NULL;
	}
	return o;
}

/* Wipe the private parts of the "credentials" of @body. */
static void wipe_credentials(json_t *body)
{
	static const char *const keys[] = {"secret_access_key", "private_key",
	                                   "client_secret", NULL};
	json_t *cr = json_object_get(body, "credentials");

	for (int i = 0; keys[i]; i++) {
		const char *sv =
		    json_string_value(json_object_get(cr, keys[i]));

		if (sv)
			explicit_bzero((char *)sv, strlen(sv));
	}
}

int cnl_cli_cmd_cloud_add(struct cnl_cli *cli)
{
	const char *prov = cli->args.pos[0];
	const char *acct = cnl_cli_flag(cli, "account");
	const char *region = cnl_cli_flag(cli, "region");
	const char *types = cnl_cli_flag(cli, "instance-types");
	const char *akid = cnl_cli_flag(cli, "access-key-id");
	const char *sfile = cnl_cli_flag(cli, "secret-from-file");
	bool sstdin = cnl_cli_flag(cli, "secret-from-stdin") != NULL;
	const char *endpoint = cnl_cli_flag(cli, "endpoint");
	const char *keyfile = cnl_cli_flag(cli, "key-file");
	json_t *body, *list, *o;
	int code;

	if (!acct || !region || !types)
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "cloud add needs --account, --region and "
		                    "--instance-types a,b,c");
	if (!(list = cnl_cli_comma_list(types, 64, 64)))
		return cnl_cli_fail(CNL_EXIT_USAGE,
		                    "--instance-types: 1..64 type names, "
		                    "comma-separated (g5.xlarge,p5.48xlarge)");
	body = json_pack("{s:s,s:s,s:s,s:o}", "provider", prov, "account", acct,
	                 "region", region, "instance_types", list);
	if (endpoint)
		json_object_set_new(body, "endpoint", json_string(endpoint));
	if (cnl_cli_flag(cli, "prices")) {
		char bad[64];
		json_t *pr =
		    cnl_cli_number_list(cnl_cli_flag(cli, "prices"), bad);

		if (!pr) {
			json_decref(body);
			return cnl_cli_fail(CNL_EXIT_USAGE,
			                    "--prices: \"%s\": want TYPE=USD, "
			                    "such as p5.48xlarge=98.32",
			                    bad);
		}
		json_object_set_new(body, "prices", pr);
	}
	if (cnl_cli_flag(cli, "type-specs")) {
		json_t *ts = type_specs(cnl_cli_flag(cli, "type-specs"));

		if (!ts) {
			json_decref(body);
			return cnl_cli_fail(
			    CNL_EXIT_USAGE,
			    "--type-specs: want "
			    "TYPE=GPUSxMODEL:VCPUS:MEM_GIB:USD,... "
			    "such as abc=1xT4:8:32:0.95");
		}
		json_object_set_new(body, "types", ts);
	}
	if (cnl_cli_flag(cli, "resource-group"))
		json_object_set_new(
		    body, "resource_group",
		    json_string(cnl_cli_flag(cli, "resource-group")));
	if (cnl_cli_flag(cli, "subnet"))
		json_object_set_new(body, "subnet",
		                    json_string(cnl_cli_flag(cli, "subnet")));
	if (strcmp(prov, "azure") == 0 &&
	    (akid || sfile || sstdin || cnl_cli_flag(cli, "client-id") ||
	     cnl_cli_flag(cli, "tenant-id"))) {
		char secret[SECRET_MAX + 2];

		if (akid || !cnl_cli_flag(cli, "client-id") ||
		    !cnl_cli_flag(cli, "tenant-id") || !sfile == !sstdin) {
			json_decref(body);
			return cnl_cli_fail(
			    CNL_EXIT_USAGE,
			    "azure credentials need --tenant-id, --client-id "
			    "and the client secret from one of "
			    "--secret-from-file FILE or --secret-from-stdin");
		}
		if ((code = read_secret(sfile, secret, sizeof(secret)))) {
			json_decref(body);
			return code;
		}
		json_object_set_new(body, "credentials",
		                    json_pack("{s:s,s:s,s:s}", "tenant_id",
		                              cnl_cli_flag(cli, "tenant-id"),
		                              "client_id",
		                              cnl_cli_flag(cli, "client-id"),
		                              "client_secret", secret));
		explicit_bzero(secret, sizeof(secret));
		if (cnl_cli_flag(cli, "authority")) {
			char uri[512];

			snprintf(uri, sizeof(uri), "%s/%s/oauth2/v2.0/token",
			         cnl_cli_flag(cli, "authority"),
			         cnl_cli_flag(cli, "tenant-id"));
			json_object_set_new(
			    json_object_get(body, "credentials"), "token_uri",
			    json_string(uri));
		}
	} else if (akid || sfile || sstdin) {
		char secret[SECRET_MAX + 2];

		if (!akid || !sfile == !sstdin) {
			json_decref(body);
			return cnl_cli_fail(
			    CNL_EXIT_USAGE,
			    "credentials need --access-key-id and the secret "
			    "from one of --secret-from-file FILE or "
			    "--secret-from-stdin (never on the command line, "
			    "where ps and the shell's history would show it)");
		}
		if ((code = read_secret(sfile, secret, sizeof(secret)))) {
			json_decref(body);
			return code;
		}
		json_object_set_new(body, "credentials",
		                    json_pack("{s:s,s:s}", "access_key_id",
		                              akid, "secret_access_key",
		                              secret));
		explicit_bzero(secret, sizeof(secret));
	}
	if (keyfile) {
		json_t *cr;

		if (strcmp(prov, "gcp") != 0 || akid || sfile || sstdin) {
			wipe_credentials(body);
			json_decref(body);
			return cnl_cli_fail(
			    CNL_EXIT_USAGE,
			    "--key-file is a GCP service account's "
			    "key: for gcp accounts, without "
			    "--access-key-id");
		}
		if (!(cr = read_key_file(keyfile, &code))) {
			json_decref(body);
			return code;
		}
		json_object_set_new(body, "credentials", cr);
	}
	code = cnl_cli_call(cli, "POST", "/v1/cloud/accounts", body, NULL, NULL,
	                    &o);
	/* The request's copy of the secret. */
	wipe_credentials(body);
	json_decref(body);
	if (code)
		return code;
	if (cli->json)
		cnl_cli_print_json(o);
	else
		printf("✓ Added %s account %s in %s (%zu instance types%s)\n",
		       prov, acct, region,
		       json_array_size(json_object_get(o, "instance_types")),
		       json_object_get(o, "credentials")
		           ? "; credentials sealed"
		           : "");
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

int cnl_cli_cmd_cloud_instances(struct cnl_cli *cli)
{
	struct cnl_cli_table t;
	json_t *o, *it;
	size_t i;
	int code;

	if ((code = cnl_cli_list_begin(
	         cli, "/v1/cloud/instances?limit=1000", NULL, &t, 7,
	         (const char *[]){"NODE", "TYPE", "MARKET", "PER HOUR", "STATE",
	                          "COST", "REASON"},
	         &o)) ||
	    !o)
		return code;
	json_array_foreach (json_object_get(o, "items"), i, it) {
		char price[32], cost[32];

		snprintf(price, sizeof(price), "%.4f",
		         json_number_value(json_object_get(it, "price_h")));
		snprintf(cost, sizeof(cost), "%.4f",
		         json_number_value(json_object_get(it, "cost")));
		cnl_cli_table_add(
		    &t, (const char *[]){cnl_cli_str(it, "node", "?"),
		                         cnl_cli_str(it, "type", "?"),
		                         cnl_cli_str(it, "market", "?"), price,
		                         cnl_cli_str(it, "state", "?"), cost,
		                         cnl_cli_str(it, "reason", "")});
	}
	return cnl_cli_list_end(&t, o);
}
