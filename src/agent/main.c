/*
 * main.c - cnlab-agent, the node daemon: settings (file < CNLAB_AGENT_*
 * environment < flags), then cnl_agent_run() until SIGINT or SIGTERM.
 *
 * The agent's credential is bound to its node (credential.c): a one-time
 * join token in the environment (CNLAB_AGENT_TOKEN, never the command
 * line) is exchanged at the first registration for the node's
 * credential, kept in work_dir/node.credential and rotated every
 * credential_rotate (and on SIGHUP).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "sched/alloc.h"
#include "common/config.h"
#include "common/label.h"
#include "common/log.h"
#include "net/otel.h"

struct settings {
	char *server;
	char *cafile;
	char *name;
	char *gpus;
	int64_t cpu_milli;
	int64_t mem_mib;
	char *work_dir;
	char *shim;
	char *shim_hip;
	char *address;
	char *server_command;
	char *cluster, *zone, *rack;
	char *datasets;
	char *isolation;
	char *runtime;
	char *run_dir;
	int64_t uid_base;
	int64_t pids_max;
	int64_t image_keep_s;
	char *mounts;
	bool namespaces;
	int64_t run_as_uid;
	bool map_users;
	char *listen;
	char *log_level;
	char *otlp_endpoint;
	char *loki_url;
	int64_t credential_rotate;
	int64_t outage_grace;
	int64_t log_buffer_max;
	char *gpu_audit;
	int64_t gpu_audit_interval;
};

#define S(f) offsetof(struct settings, f)
static const struct cnl_config_def table[] = {
    {"server", CNL_CONFIG_STRING, S(server), "http://127.0.0.1:8080", 0, 0,
     "cnlabd's base URL."},
    {"cafile", CNL_CONFIG_STRING, S(cafile), NULL, 0, 0,
     "CA certificate to verify an HTTPS cnlabd."},
    {"name", CNL_CONFIG_STRING, S(name), NULL, 0, 0,
     "Node name; the host name by default."},
    {"gpus", CNL_CONFIG_STRING, S(gpus), "fake:2xH100-80GB-SXM", 0, 0,
     "GPU provider: nvml, nvml:/path/libnvidia-ml.so.1, rocm, "
     "rocm:/path/librocm_smi64.so.1, fake:COUNTxTYPE[,...] or none."},
    {"cpu_milli", CNL_CONFIG_INT, S(cpu_milli), "16000", 0, 1 << 30,
     "CPU offered to workloads, in thousandths of a core."},
    {"mem_mib", CNL_CONFIG_INT, S(mem_mib), "65536", 0, 1LL << 40,
     "Memory offered to workloads, MiB."},
    {"work_dir", CNL_CONFIG_STRING, S(work_dir), "/var/lib/cnlab-agent", 0, 0,
     "Workspaces, job directories, regions and state."},
    {"shim", CNL_CONFIG_STRING, S(shim), NULL, 0, 0,
     "libcnlab-cuda.so preloaded into GPU workloads."},
    {"shim_hip", CNL_CONFIG_STRING, S(shim_hip), NULL, 0, 0,
     "libcnlab-hip.so preloaded into GPU workloads instead of shim on a "
     "node of AMD GPUs."},
    {"address", CNL_CONFIG_STRING, S(address), "127.0.0.1", 0, 0,
     "Host name or address of this node, as cnlabd lists it (users reach "
     "servers through cnlabd's proxy, never this address)."},
    {"server_command", CNL_CONFIG_STRING, S(server_command),
     "if command -v jupyter >/dev/null; then exec jupyter lab "
     "--ip=127.0.0.1 --port=$CNLAB_PORT --no-browser "
     "--ServerApp.token=$CNLAB_SERVER_TOKEN "
     "--ServerApp.base_url=$CNLAB_BASE_URL "
     "--notebook-dir=$CNLAB_WORKSPACE; else exec python3 \"$CNLAB_NOTEBOOK\"; "
     "fi",
     0, 0,
     "Notebook server command (sh -c), given $CNLAB_PORT (to listen on, "
     "127.0.0.1 in the server's own network namespace), $CNLAB_BASE_URL "
     "(/s/ID/: the path prefix cnlabd's proxy passes on), "
     "$CNLAB_WORKSPACE and $CNLAB_SERVER_TOKEN (its access token, sent by "
     "the proxy as \"Authorization: token T\"), and $CNLAB_NOTEBOOK "
     "(cnlab-notebook.py: the workspace over HTTP to the token's holder "
     "only, where JupyterLab is not installed)."},
    {"cluster", CNL_CONFIG_STRING, S(cluster), NULL, 0, 0, "Cluster label."},
    {"zone", CNL_CONFIG_STRING, S(zone), NULL, 0, 0, "Zone label."},
    {"rack", CNL_CONFIG_STRING, S(rack), NULL, 0, 0, "Rack label."},
    {"datasets", CNL_CONFIG_STRING, S(datasets), NULL, 0, 0,
     "Datasets this node holds, comma-separated (imagenet,coco; at most 8 "
     "names of A-Z a-z 0-9 . _ -): jobs asking for one prefer this node."},
    {"isolation", CNL_CONFIG_STRING, S(isolation), "container", 0, 0,
     "container: each workload in its own OCI container run by the "
     "runtime, as a host id range of its user's own (the agent runs as "
     "root). bare: no container, for a single-user laptop; never as root "
     "(needs run_as_uid or map_users when the agent is root)."},
    {"runtime", CNL_CONFIG_STRING, S(runtime), "crun", 0, 0,
     "The OCI runtime (container isolation): a name in PATH or a path."},
    {"run_dir", CNL_CONFIG_STRING, S(run_dir), NULL, 0, 0,
     "Container isolation: an absolute folder on a tmpfs (systemd: "
     "RuntimeDirectory=cnlab-run, then /run/cnlab-run; not under "
     "/run/cnlab-agent) for each container's bundle and the runtime's "
     "state, which are made and deleted for every workload; owned by "
     "root, writable by no one else, every folder above it searchable "
     "by all. Unset: both in work_dir, on its disk."},
    {"uid_base", CNL_CONFIG_INT, S(uid_base), "1000000", 65536, 4000000000LL,
     "First host id of the users' id ranges (65536 ids each, one per "
     "user, never host root)."},
    {"pids_max", CNL_CONFIG_INT, S(pids_max), "4096", 0, 1 << 22,
     "Processes (and threads) one workload may have at once (0: no "
     "limit): a fork bomb stays in its workload."},
    {"image_keep_s", CNL_CONFIG_INT, S(image_keep_s), "86400", 0,
     10LL * 366 * 86400,
     "How long an unpacked image no workload runs stays on this node "
     "after its last start, seconds (then it and its blobs are "
     "deleted)."},
    {"mounts", CNL_CONFIG_STRING, S(mounts), NULL, 0, 0,
     "Node folders mounted into every container, HOST:DEST[:ro|:rw] "
     "comma-separated (shared datasets, scratch), e.g. "
     "/srv/datasets:/datasets:ro."},
    {"namespaces", CNL_CONFIG_BOOL, S(namespaces), "true", 0, 0,
     "Bare isolation: run each workload in its own PID and mount "
     "namespaces."},
    {"run_as_uid", CNL_CONFIG_INT, S(run_as_uid), "-1", -1, 65535,
     "Bare isolation: run workloads as this uid (-1: as the agent, "
     "refused when that is root)."},
    {"map_users", CNL_CONFIG_BOOL, S(map_users), "false", 0, 0,
     "Bare isolation: run each workload as the local account named like "
     "its submitting user (refused when there is none)."},
    {"listen", CNL_CONFIG_STRING, S(listen), NULL, 0, 0,
     "HOST:PORT for the agent's /metrics (none by default)."},
    {"log_level", CNL_CONFIG_STRING, S(log_level), "info", 0, 0,
     "debug, info, warn or error."},
    {"otlp_endpoint", CNL_CONFIG_STRING, S(otlp_endpoint), NULL, 0, 0,
     "OpenTelemetry collector (OTLP/HTTP, JSON) the launch and workload "
     "spans go to, e.g. http://127.0.0.1:4318; unset: "
     "OTEL_EXPORTER_OTLP_ENDPOINT, else none."},
    {"loki_url", CNL_CONFIG_STRING, S(loki_url), NULL, 0, 0,
     "Loki the agent's own log lines are pushed to (labelled by node), "
     "e.g. http://127.0.0.1:3100; unset: CNLAB_LOKI_URL (an all-in-one's "
     "agent inherits cnlabd's), else none."},
    {"credential_rotate", CNL_CONFIG_DURATION, S(credential_rotate), "24h", 0,
     365LL * 86400000,
     "Rotate the node credential this often (0: never; SIGHUP rotates "
     "at once); cnlabd keeps the old one valid a short overlap."},
    {"outage_grace", CNL_CONFIG_DURATION, S(outage_grace), "5m", 0,
     7LL * 86400000,
     "How long work keeps running while cnlabd is unreachable (its output "
     "kept on this node's disk, under work_dir/state, and delivered once "
     "when cnlabd is back); after it, the agent stops all work. cnlabd's "
     "own lease (half its node_lost_timeout) applies when it is longer."},
    {"log_buffer_max", CNL_CONFIG_SIZE, S(log_buffer_max), "1gib", 65536,
     INT64_MAX,
     "The most bytes of one workload's stdout (and of its stderr) kept on "
     "this node's disk, in work_dir/state, that cnlabd has not taken yet "
     "(it was unreachable); past it the oldest go, and the job's log says "
     "how many bytes were dropped. Delivered bytes are freed as they go."},
    {"gpu_audit", CNL_CONFIG_STRING, S(gpu_audit), "auto", 0, 0,
     "The GPU memory audit's NVML: auto (the gpus provider's NVML when it "
     "is nvml; none with a fake pool), nvml, nvml:/path/libnvidia-ml.so.1 "
     "(also beside a fake pool), or none. Every gpu_audit_interval it reads "
     "what each process holds on the GPUs and SIGKILLs the largest "
     "processes of a slice over its VRAM quota by more than 2 MiB; each "
     "kill is in cnlabd's audit log and the job ends failed with the "
     "reason."},
    {"gpu_audit_interval", CNL_CONFIG_DURATION, S(gpu_audit_interval), "1s", 0,
     3600000, "How often the GPU memory audit looks (0: never)."},
};
#undef S
#define N_TABLE (sizeof(table) / sizeof(table[0]))

static struct cnl_agent *agent;

static void on_signal(int sig)
{
	if (agent && sig == SIGHUP)
		cnl_agent_rotate(agent);
	else if (agent)
		cnl_agent_stop(agent);
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: cnlab-agent [--config FILE] [--KEY VALUE ...]\n"
	           "\n"
	           "The CNLab node agent: registers this node with cnlabd, "
	           "runs the work it is\n"
	           "assigned in cgroups with its GPU slices, streams output, "
	           "reports ends.\n"
	           "\n"
	           "  --config FILE   settings file (key = value lines)\n"
	           "  --KEY VALUE     any setting below (e.g. --gpus "
	           "fake:2xH100-80GB-SXM or\n"
	           "                  --work-dir=/srv/cnlab; '-' or '_' "
	           "between words)\n"
	           "  --help          show this help\n"
	           "\n"
	           "Settings may also come from CNLAB_AGENT_<KEY>. The join "
	           "token comes only\n"
	           "from the environment: CNLAB_AGENT_TOKEN (cnlab node "
	           "join-token --node NAME),\n"
	           "exchanged at the first registration for the node's "
	           "credential, kept in\n"
	           "WORK_DIR/node.credential (later starts need no token). "
	           "SIGHUP rotates the\n"
	           "credential.\n\nSettings:\n\n");
	cnl_config_doc_markdown(table, N_TABLE, f);
}

/* The datasets setting: at most 8 labels (common/label.h), comma-
 * separated; 0, or -1 with @err naming the setting. */
static int check_datasets(const char *list, char *err, size_t errlen)
{
	char name[CNL_LABEL_MAX + 1];
	int n = 0;

	for (const char *p = list; p && *p;) {
		size_t len = strcspn(p, ",");

		snprintf(name, sizeof(name), "%.*s",
		         (int)(len < sizeof(name) ? len : sizeof(name) - 1), p);
		if (len >= sizeof(name) || !cnl_label_valid(name) ||
		    ++n > CNL_NODE_MAX_DATASETS) {
			snprintf(err, errlen,
			         "datasets: \"%.*s\" %s (want at most %d "
			         "comma-separated names of 1..63 characters of "
			         "A-Z a-z 0-9 . _ -)",
			         (int)(len > 64 ? 64 : len), p,
			         n > CNL_NODE_MAX_DATASETS ? "is one too many"
			                                   : "is not a name",
			         CNL_NODE_MAX_DATASETS);
			return -1;
		}
		p += len;
		if (*p == ',' && *++p == '\0') {
			snprintf(err, errlen, "datasets: ends with a comma");
			return -1;
		}
	}
	return 0;
}

extern char **environ;

int main(int argc, char **argv)
{
	struct settings st;
	struct cnl_config_flag own[] = {{"config", true, NULL},
	                                {"help", false, NULL},
	                                {"h", false, NULL},
	                                {NULL, false, NULL}};
	const char *token = getenv("CNLAB_AGENT_TOKEN");
	char err[512], host[HOST_NAME_MAX + 1] = "node";
	enum cnl_log_level level;
	struct sigaction sa = {0};
	int r, rc = 1;

	if (argc > 1 && strcmp(argv[1], "collect") == 0)
		return cnl_agent_collect_main(argc, argv);
	memset(&st, 0, sizeof(st));
	cnl_config_defaults(table, N_TABLE, &st);
	/* The command line is checked (and --config found) first, so that
	 * flags override the file whatever their order. */
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
	    cnl_config_load_env(table, N_TABLE, &st, "CNLAB_AGENT_", environ,
	                        err, sizeof(err)) < 0 ||
	    cnl_config_load_args(table, N_TABLE, &st, argc, argv, own, err,
	                         sizeof(err)) < 0)
		goto bad;
	if (cnl_log_level_parse(st.log_level, &level) < 0) {
		snprintf(err, sizeof(err), "bad log level %s", st.log_level);
		goto bad;
	}
	cnl_log_set_level(level);
	gethostname(host, sizeof(host));
	if (cnl_telemetry_start(
	        "cnlab-agent", st.otlp_endpoint,
	        st.loki_url && st.loki_url[0] ? st.loki_url
	                                      : getenv("CNLAB_LOKI_URL"),
	        "agent", st.name ? st.name : host, err, sizeof(err)) < 0)
		goto bad;
	if (check_datasets(st.datasets, err, sizeof(err)) < 0)
		goto bad;
	if (strcmp(st.isolation, "container") != 0 &&
	    strcmp(st.isolation, "bare") != 0) {
		snprintf(err, sizeof(err),
		         "isolation: \"%.64s\" is neither container nor bare",
		         st.isolation);
		goto bad;
	}
	gethostname(host, sizeof(host));
	r = cnl_agent_new(
	    &(struct cnl_agent_config){
	        .server = st.server,
	        .token = token && token[0] ? token : NULL,
	        .rotate_s = st.credential_rotate / 1000,
	        .cafile = st.cafile,
	        .name = st.name ? st.name : host,
	        .gpus = st.gpus,
	        .cpu_milli = st.cpu_milli,
	        .mem_mib = st.mem_mib,
	        .work_dir = st.work_dir,
	        .shim = st.shim,
	        .shim_hip = st.shim_hip,
	        .address = st.address,
	        .server_command = st.server_command,
	        .cluster = st.cluster,
	        .zone = st.zone,
	        .rack = st.rack,
	        .datasets = st.datasets,
	        .bare = strcmp(st.isolation, "bare") == 0,
	        .runtime = st.runtime,
	        .run_dir = st.run_dir,
	        .uid_base = st.uid_base,
	        .pids_max = st.pids_max,
	        .image_keep_s = st.image_keep_s,
	        .mounts = st.mounts,
	        .pid_ns = st.namespaces,
	        .mount_ns = st.namespaces,
	        .run_as_uid = (int)st.run_as_uid,
	        .map_users = st.map_users,
	        .listen = st.listen,
	        .outage_grace_ms = st.outage_grace,
	        .log_buffer_max = st.log_buffer_max,
	        .gpu_audit = st.gpu_audit,
	        .gpu_audit_ms = st.gpu_audit_interval,
	    },
	    &agent, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "cnlab-agent: %s\n", err);
		goto out;
	}
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	rc = cnl_agent_run(agent) < 0 ? 1 : 0;
out:
	cnl_agent_free(agent);
	cnl_config_done(table, N_TABLE, &st);
	return rc;
bad:
	fprintf(stderr, "cnlab-agent: %s\n", err);
	cnl_config_done(table, N_TABLE, &st);
	return 2;
}
