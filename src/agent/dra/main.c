/*
 * main.c - cnlab-dra-plugin: the agent's Dynamic Resource Allocation
 * kubelet plugin, for Kubernetes 1.34+ (resource.k8s.io/v1), run by the
 * agent's DaemonSet on each GPU node beside cnlab-agent.
 *
 * Settings: file (--config) < CNLAB_DRA_* environment < flags.  It
 *   - serves the kubelet's Registration service on
 *     registry_dir/<driver>-reg.sock and the DRAPlugin v1 service on
 *     plugin_dir/dra.sock (rpc.h);
 *   - publishes the node's GPUs as ResourceSlices (plugin.h), retrying
 *     with backoff until the API server takes them;
 *   - on SIGINT or SIGTERM removes its sockets and exits 0.  Prepared
 *     claims stay prepared (their records in plugin_dir/claims): a
 *     restarted plugin answers and unprepares them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/dra/grpc.h"
#include "agent/dra/plugin.h"
#include "agent/dra/rpc.h"
#include "agent/gpu.h"
#include "common/config.h"
#include "common/log.h"
#include "net/kube.h"

struct settings {
	char *driver;
	char *node;
	char *gpus;
	char *plugin_dir;
	char *registry_dir;
	char *cdi_dir;
	char *shim;
	char *dev_root;
	char *kube_api;
	char *kube_token_file;
	char *kube_cafile;
	char *log_level;
	bool publish;
	int64_t watch_timeout;
};

#define S(f) offsetof(struct settings, f)
static const struct cnl_config_def table[] = {
    {"driver", CNL_CONFIG_STRING, S(driver), CNL_DRA_DRIVER, 0, 0,
     "The DRA driver's name (the DeviceClass selects it)."},
    {"node", CNL_CONFIG_STRING, S(node), NULL, 0, 0,
     "This node's name in Kubernetes; $NODE_NAME, else the host name."},
    {"gpus", CNL_CONFIG_STRING, S(gpus), "nvml", 0, 0,
     "GPU provider, as cnlab-agent's: nvml, fake:COUNTxTYPE[,...]."},
    {"plugin_dir", CNL_CONFIG_STRING, S(plugin_dir),
     "/var/lib/kubelet/plugins/" CNL_DRA_DRIVER, 0, 0,
     "The plugin's folder: dra.sock, claims/, regions/."},
    {"registry_dir", CNL_CONFIG_STRING, S(registry_dir),
     "/var/lib/kubelet/plugins_registry", 0, 0,
     "The kubelet's plugin registration folder."},
    {"cdi_dir", CNL_CONFIG_STRING, S(cdi_dir), "/var/run/cdi", 0, 0,
     "Where CDI specs are written for the container runtime."},
    {"shim", CNL_CONFIG_STRING, S(shim), NULL, 0, 0,
     "Host path of libcnlab-cuda.so, preloaded into 1% block slices "
     "(without it block slices are refused)."},
    {"dev_root", CNL_CONFIG_STRING, S(dev_root), "", 0, 0,
     "Prefix of the host's /dev (tests)."},
    {"kube_api", CNL_CONFIG_STRING, S(kube_api), NULL, 0, 0,
     "The API server's URL; in a pod, the in-cluster one."},
    {"kube_token_file", CNL_CONFIG_STRING, S(kube_token_file), NULL, 0, 0,
     "Bearer token file; in a pod, the service account's."},
    {"kube_cafile", CNL_CONFIG_STRING, S(kube_cafile), NULL, 0, 0,
     "CA of the API server; in a pod, the service account's."},
    {"log_level", CNL_CONFIG_STRING, S(log_level), "info", 0, 0,
     "debug, info, warn or error."},
    {"publish", CNL_CONFIG_BOOL, S(publish), "true", 0, 0,
     "Publish the GPUs as ResourceSlices, and keep them so."},
    {"watch_timeout", CNL_CONFIG_DURATION, S(watch_timeout), "5m", 1000,
     3600000, "How long one watch of the slices lasts before the next."},
};
#define N_TABLE (sizeof(table) / sizeof(table[0]))

static int stop_pipe[2] = {-1, -1};
static volatile int stopping;
/* The plugin, for the publisher thread, which main does not wait for
 * while it watches (a global, so that it stays reachable at exit). */
static struct cnl_dra *the_dra;
static int64_t watch_timeout_s;

static void on_signal(int sig)
{
	int e = errno;
	ssize_t w;

	(void)sig;
	stopping = 1;
	w = write(stop_pipe[1], "x", 1);
	(void)w;
	errno = e;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: cnlab-dra-plugin [--config FILE] [--KEY VALUE]...\n"
	           "The DRA kubelet plugin of CNLab's GPUs.  Settings:\n");
	for (size_t i = 0; i < N_TABLE; i++)
		fprintf(f, "  --%-16s %s\n", table[i].name, table[i].help);
}

static void nap(unsigned s)
{
	for (unsigned i = 0; i < s * 10 && !stopping; i++)
		nanosleep(&(struct timespec){0, 100000000L}, NULL);
}

/* Publish, then keep what is published so (cnl_dra_follow): again after
 * any drift, backing off on errors. */
static void *publisher(void *ud)
{
	unsigned wait = 1, calm = 1;
	bool publish = true;
	time_t last = 0;

	(void)ud;
	while (!stopping) {
		char err[512];
		int r;

		if (publish) {
			/* Drift found right after a publish, again and
			 * again (another writer fighting ours): slow down. */
			time_t now = time(NULL);
			if (now - last < 5) {
				nap(calm);
				calm = calm * 2 > 60 ? 60 : calm * 2;
			} else {
				calm = 1;
			}
			last = time(NULL);
			if (cnl_dra_publish(the_dra, err, sizeof(err)) < 0) {
				cnl_log(CNL_LOG_WARN,
				        "cannot publish ResourceSlices",
				        "error=\"%.300s\" retry_s=%u", err,
				        wait);
				nap(wait);
				wait = wait * 2 > 30 ? 30 : wait * 2;
				continue;
			}
			publish = false;
			wait = 1;
		}
		r = cnl_dra_follow(the_dra, watch_timeout_s, &stopping, err,
		                   sizeof(err));
		if (r == 1) {
			publish = true;
		} else if (r < 0) {
			cnl_log(CNL_LOG_WARN, "cannot watch ResourceSlices",
			        "error=\"%.300s\" retry_s=%u", err, wait);
			nap(wait);
			wait = wait * 2 > 30 ? 30 : wait * 2;
		}
	}
	return NULL;
}

extern char **environ;

int main(int argc, char **argv)
{
	struct settings st;
	struct cnl_config_flag own[] = {{"config", true, NULL},
	                                {"help", false, NULL},
	                                {"h", false, NULL},
	                                {NULL, false, NULL}};
	char err[512], host[HOST_NAME_MAX + 1] = "node", reg_sock[600],
	                                    dra_sock[600];
	struct cnl_catalog cat;
	struct cnl_gpus *gpus = NULL;
	struct cnl_kube *kube = NULL, *kube_slices = NULL;
	struct cnl_dra *dra = NULL;
	struct cnl_grpc_server *srv = NULL;
	struct cnl_grpc_method m[4];
	struct cnl_dra_rpc rpc = {0};
	enum cnl_log_level level;
	pthread_t pub;
	bool pub_started = false;
	int rc = 1;

	memset(&st, 0, sizeof(st));
	cnl_config_defaults(table, N_TABLE, &st);
	if (cnl_config_load_args(table, N_TABLE, NULL, argc, argv, own, err,
	                         sizeof(err)) < 0)
		goto bad;
	if (own[1].value || own[2].value) {
		usage(stdout);
		cnl_config_done(table, N_TABLE, &st);
		return 0;
	}
	if ((own[0].value &&
	     cnl_config_load_file(table, N_TABLE, &st, own[0].value, err,
	                          sizeof(err)) < 0) ||
	    cnl_config_load_env(table, N_TABLE, &st, "CNLAB_DRA_", environ, err,
	                        sizeof(err)) < 0 ||
	    cnl_config_load_args(table, N_TABLE, &st, argc, argv, own, err,
	                         sizeof(err)) < 0)
		goto bad;
	if (cnl_log_level_parse(st.log_level, &level) < 0) {
		snprintf(err, sizeof(err), "log_level: bad level %s",
		         st.log_level);
		goto bad;
	}
	cnl_log_set_level(level);
	if (!st.node || !st.node[0]) {
		const char *n = getenv("NODE_NAME");
		gethostname(host, sizeof(host));
		free(st.node);
		st.node = strdup(n && n[0] ? n : host);
	}
	cnl_catalog_init(&cat);
	if (cnl_gpus_open(st.gpus, &cat, &gpus, err, sizeof(err)) < 0)
		goto fail;
	/* One client for prepare (the gRPC thread), one for the slices
	 * (the publisher's watch holds its connection). */
	struct cnl_kube_config kc = {.server = st.kube_api,
	                             .token_file = st.kube_token_file,
	                             .cafile = st.kube_cafile};
	if (cnl_kube_open(&kc, &kube, err, sizeof(err)) < 0 ||
	    cnl_kube_open(&kc, &kube_slices, err, sizeof(err)) < 0)
		goto fail;
	if (cnl_dra_new(&(struct cnl_dra_config){.driver = st.driver,
	                                         .node = st.node,
	                                         .plugin_dir = st.plugin_dir,
	                                         .cdi_dir = st.cdi_dir,
	                                         .shim = st.shim,
	                                         .dev_root = st.dev_root},
	                gpus, &cat, kube, kube_slices, &dra, err,
	                sizeof(err)) < 0)
		goto fail;
	snprintf(reg_sock, sizeof(reg_sock), "%s/%s-reg.sock", st.registry_dir,
	         st.driver);
	snprintf(dra_sock, sizeof(dra_sock), "%s/dra.sock", st.plugin_dir);
	rpc.dra = dra;
	rpc.endpoint = dra_sock;
	cnl_dra_rpc_methods(&rpc, m, m + 2);
	/* The DRA socket first: once the registration socket is there the
	 * kubelet may call the endpoint it names. */
	srv = cnl_grpc_server_new(m, 4);
	if (cnl_grpc_server_listen(srv, dra_sock, err, sizeof(err)) < 0 ||
	    cnl_grpc_server_listen(srv, reg_sock, err, sizeof(err)) < 0)
		goto fail;
	if (pipe2(stop_pipe, O_CLOEXEC) < 0) {
		snprintf(err, sizeof(err), "pipe: %s", strerror(errno));
		goto fail;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	the_dra = dra;
	watch_timeout_s = st.watch_timeout / 1000;
	if (st.publish) {
		if (pthread_create(&pub, NULL, publisher, NULL) != 0) {
			snprintf(err, sizeof(err), "cannot start a thread");
			goto fail;
		}
		pub_started = true;
	}
	cnl_log(CNL_LOG_INFO, "DRA plugin serving",
	        "driver=%s node=%s registration=%s endpoint=%s", st.driver,
	        st.node, reg_sock, dra_sock);
	printf("ready\n");
	fflush(stdout);
	if (cnl_grpc_server_run(srv, stop_pipe[0]) < 0)
		snprintf(err, sizeof(err), "poll: %s", strerror(errno));
	else
		rc = 0;
	stopping = 1;
	/* A watch in flight ends with its stream (watch_timeout): wait a
	 * little for it, then leave without freeing what it uses. */
	if (pub_started) {
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 3;
		if (pthread_timedjoin_np(pub, NULL, &dl) != 0) {
			cnl_grpc_server_free(srv);
			fflush(NULL);
			_exit(rc);
		}
	}
	goto out;
bad:
	fprintf(stderr, "cnlab-dra-plugin: %s\n", err);
	usage(stderr);
	cnl_config_done(table, N_TABLE, &st);
	return 2;
fail:
	fprintf(stderr, "cnlab-dra-plugin: %s\n", err);
out:
	cnl_grpc_server_free(srv);
	cnl_dra_free(dra);
	cnl_kube_close(kube);
	cnl_kube_close(kube_slices);
	cnl_gpus_close(gpus);
	cnl_config_done(table, N_TABLE, &st);
	return rc;
}
