/*
 * main.c - cnlabd, the CNLab control plane daemon: opens the state store
 * in the data directory, optionally bootstraps the first administrator,
 * and serves the REST API until SIGINT or SIGTERM.
 *
 * Secrets come from the environment, never from the command line (where
 * every local user can read them in /proc): CNLAB_JWT_SECRET signs tokens
 * and CNLAB_ADMIN_PASSWORD is the bootstrap administrator's password.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cnlab/errors.h"
#include "common/log.h"
#include "server/api.h"
#include "server/http.h"
#include "store/store.h"

static void usage(FILE *f)
{
	fprintf(f,
	        "Usage: cnlabd --data-dir DIR [--listen HOST:PORT] "
	        "[--bootstrap-admin NAME]\n"
	        "\n"
	        "The CNLab control plane: REST API under /v1.\n"
	        "\n"
	        "  --data-dir DIR          state directory (the SQLite file "
	        "cnlab.db lives here)\n"
	        "  --listen HOST:PORT      IPv4 address and port "
	        "(default 127.0.0.1:8080);\n"
	        "                          port 0 picks a free port, printed "
	        "on stdout\n"
	        "  --bootstrap-admin NAME  on an empty store, create the "
	        "administrator NAME\n"
	        "                          (password from "
	        "CNLAB_ADMIN_PASSWORD) and the \"%s\" project\n"
	        "  --log-level LEVEL       debug, info, warn or error "
	        "(default info)\n"
	        "  --help                  show this help\n"
	        "\n"
	        "Environment:\n"
	        "  CNLAB_JWT_SECRET        required; at least %d bytes; signs "
	        "API tokens\n"
	        "  CNLAB_ADMIN_PASSWORD    password for --bootstrap-admin\n",
	        CNL_API_ADMIN_PROJECT, CNL_API_SECRET_MIN);
}

/* Split "HOST:PORT"; returns 0 or -1. */
static int parse_listen(const char *s, char *host, size_t hostlen,
                        uint16_t *ret_port)
{
	const char *colon = strrchr(s, ':');
	char *end;
	long port;

	if (!colon || colon == s || (size_t)(colon - s) >= hostlen)
		return -1;
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || port < 0 || port > 65535)
		return -1;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	*ret_port = (uint16_t)port;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"help", no_argument, NULL, 'h'},
	    {"data-dir", required_argument, NULL, 'd'},
	    {"listen", required_argument, NULL, 'l'},
	    {"bootstrap-admin", required_argument, NULL, 'b'},
	    {"log-level", required_argument, NULL, 'v'},
	    {NULL, 0, NULL, 0},
	};
	const char *data_dir = NULL, *listen = "127.0.0.1:8080";
	const char *admin = NULL, *secret, *password;
	enum cnl_log_level level;
	char host[64], path[4096], err[512];
	struct cnl_store *store = NULL;
	struct cnl_api *api = NULL;
	struct cnl_http_server *srv = NULL;
	const struct cnl_http_route *routes;
	size_t nroutes;
	uint16_t port;
	sigset_t set;
	int c, r, sig, rc = 1;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(stdout);
			return 0;
		case 'd':
			data_dir = optarg;
			break;
		case 'l':
			listen = optarg;
			break;
		case 'b':
			admin = optarg;
			break;
		case 'v':
			if (cnl_log_level_parse(optarg, &level) < 0) {
				fprintf(stderr, "cnlabd: bad --log-level %s\n",
				        optarg);
				return 2;
			}
			cnl_log_set_level(level);
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc || !data_dir) {
		fprintf(stderr, "cnlabd: %s\n",
		        optind < argc ? "unexpected argument"
		                      : "--data-dir is required");
		usage(stderr);
		return 2;
	}
	if (parse_listen(listen, host, sizeof(host), &port) < 0) {
		fprintf(stderr, "cnlabd: --listen wants HOST:PORT, got %s\n",
		        listen);
		return 2;
	}
	secret = getenv("CNLAB_JWT_SECRET");
	if (!secret || strlen(secret) < CNL_API_SECRET_MIN) {
		fprintf(stderr,
		        "cnlabd: CNLAB_JWT_SECRET must be set to a secret of "
		        "at least %d bytes (e.g. openssl rand -base64 48); "
		        "refusing to start\n",
		        CNL_API_SECRET_MIN);
		return 2;
	}
	password = getenv("CNLAB_ADMIN_PASSWORD");
	if (admin && (!password || !password[0])) {
		fprintf(stderr, "cnlabd: --bootstrap-admin needs the password "
		                "in CNLAB_ADMIN_PASSWORD\n");
		return 2;
	}

	if (mkdir(data_dir, 0700) < 0 && errno != EEXIST) {
		fprintf(stderr, "cnlabd: %s: %s\n", data_dir, strerror(errno));
		return 1;
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/cnlab.db", data_dir) >=
	    sizeof(path)) {
		fprintf(stderr, "cnlabd: --data-dir path too long\n");
		return 2;
	}
	if (cnl_store_open_sqlite(path, &store, err, sizeof(err)) < 0) {
		fprintf(stderr, "cnlabd: %s\n", err);
		return 1;
	}
	if (admin) {
		r = cnl_api_bootstrap(store, admin, password, 0, err,
		                      sizeof(err));
		if (r < 0) {
			fprintf(stderr, "cnlabd: %s\n", err);
			goto out;
		}
		cnl_log(CNL_LOG_INFO,
		        r == 0 ? "administrator created"
		               : "already bootstrapped; --bootstrap-admin "
		                 "ignored",
		        "project=%s", CNL_API_ADMIN_PROJECT);
	}

	/* Block the stop signals in every thread; main waits for them. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	if (cnl_api_new(
	        &(struct cnl_api_config){
	            .store = store,
	            .jwt_key = (const uint8_t *)secret,
	            .jwt_key_len = strlen(secret),
	        },
	        &api) < 0) {
		fprintf(stderr, "cnlabd: cannot set up the API\n");
		goto out;
	}
	routes = cnl_api_routes(&nroutes);
	if (cnl_api_start(api, routes, nroutes, host, port, &srv, err,
	                  sizeof(err)) < 0) {
		fprintf(stderr, "cnlabd: %s\n", err);
		goto out;
	}
	printf("listening on %s:%u\n", host,
	       (unsigned)cnl_http_server_port(srv));
	fflush(stdout);
	cnl_log(CNL_LOG_INFO, "cnlabd started", "listen=%s:%u db=%s", host,
	        (unsigned)cnl_http_server_port(srv), "cnlab.db");

	if (sigwait(&set, &sig) == 0)
		cnl_log(CNL_LOG_INFO, "cnlabd stopping", "signal=%d", sig);
	rc = 0;
out:
	cnl_http_server_free(srv);
	cnl_api_free(api);
	cnl_store_close(store);
	return rc;
}
