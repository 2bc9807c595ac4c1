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
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cnlab/errors.h"
#include "common/config.h"
#include "common/log.h"
#include "common/time.h"
#include "common/util.h"
#include "net/http_server.h"
#include "net/otel.h"
#include "server/allinone.h"
#include "server/secrets.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/forward.h"
#include "server/kube_map.h"
#include "server/kube_sched.h"
#include "server/leader.h"
#include "server/oidc.h"
#include "store/store.h"

/* Settings: defaults < config file < CNLAB_* environment < flags. */
struct settings {
	char *data_dir;
	char *files_dir;
	char *store;
	int64_t store_pool;
	int64_t lease;
	char *replica_url;
	char *replica_ca_file;
	char *listen;
	char *tls_cert;
	char *tls_key;
	char *secrets_key_file;
	char *policy;
	int64_t node_lost_timeout;
	int64_t node_credential_overlap;
	int64_t cycle_interval;
	int64_t preempt_min_run;
	int64_t preempt_grace;
	char *power_command;
	int64_t power_idle;
	int64_t power_spare_gpus;
	char *burst_image;
	char *burst_agent;
	char *burst_url;
	int64_t burst_interval;
	int64_t burst_idle;
	int64_t burst_boot_timeout;
	int64_t burst_max_instances;
	char *oidc_issuer;
	char *oidc_audience;
	char *oidc_jwks_file;
	char *oidc_jwks_url;
	char *oidc_username_claim;
	char *oidc_authorization_endpoint;
	char *oidc_token_endpoint;
	char *cli_dir;
	char *public_url;
	char *notebook_listen;
	char *notebook_url;
	char *log_level;
	char *otlp_endpoint;
	char *loki_url;
	int64_t artifacts_max_bytes;
	int64_t inputs_max_bytes;
	int64_t images_max_bytes;
	int64_t artifacts_keep;
	int64_t http_max_connections;
	int64_t http_max_connections_per_client;
	int64_t http_header_timeout;
	int64_t http_body_timeout;
	int64_t http_body_max;
	int64_t http_retry_after;
	bool kube;
	char *kube_server;
	char *kube_token_file;
	char *kube_ca_file;
	int64_t kube_watch_timeout;
	int64_t kube_resync;
	char *kube_default_image;
	int64_t kube_start_timeout;
	bool kube_user_namespaces;
	char *kube_image_registry;
	char *kube_collect_image;
	char *kube_collect_url;
};

#define S(f) offsetof(struct settings, f)
static const struct cnl_config_def settings_table[] = {
    {"data_dir", CNL_CONFIG_STRING, S(data_dir), NULL, 0, 0,
     "State directory (kept 0700, its files 0600): the SQLite file "
     "cnlab.db, and jobs' files under files/."},
    {"files_dir", CNL_CONFIG_STRING, S(files_dir), NULL, 0, 0,
     "Jobs' files: uploaded inputs and scripts, artifacts, imported "
     "images (kept 0700, files 0600). Unset: files/ in data_dir. Several "
     "cnlabd over one PostgreSQL: one folder shared by all of them (NFS), "
     "so that a new leader has the files of the jobs the old one took."},
    {"store", CNL_CONFIG_STRING, S(store), NULL, 0, 0,
     "The state store: sqlite:///path/to/cnlab.db, or "
     "postgresql://user@host:port/db (libpq's URL; the password may come "
     "from PGPASSWORD or ~/.pgpass instead of the URL). Unset: SQLite, "
     "cnlab.db in data_dir. Several cnlabd over one PostgreSQL share its "
     "state; pgbouncer in transaction mode is supported."},
    {"store_pool", CNL_CONFIG_INT, S(store_pool), "16", 1, 1000,
     "Read-only connections to the store at most, for the GETs served "
     "without the API's lock (each is a database connection on "
     "PostgreSQL: keep replicas x (store_pool + 3) under the server's "
     "max_connections); more readers at once are served under the lock."},
    {"lease", CNL_CONFIG_DURATION, S(lease), "5s", 1000, 60000,
     "With a PostgreSQL store: the leader's lease. Several cnlabd over one "
     "database elect one leader, which alone schedules and writes; the "
     "others follow (forwarding every request to the leader's "
     "replica_url), and one takes over within this time (plus a moment to "
     "load the state) when the leader dies or is cut off."},
    {"replica_url", CNL_CONFIG_STRING, S(replica_url), NULL, 0, 0,
     "With a PostgreSQL store: the URL at which the other replicas reach "
     "this cnlabd's own listener (http(s)://host:port), to forward "
     "requests to it while it leads. Not a load balancer's address. "
     "Unset: listen's address (this host's name when listen is 0.0.0.0) "
     "and port, https with tls_cert."},
    {"replica_ca_file", CNL_CONFIG_STRING, S(replica_ca_file), NULL, 0, 0,
     "CA certificates that verify an https leader's certificate when "
     "forwarding to it; unset: the system's CAs."},
    {"listen", CNL_CONFIG_STRING, S(listen), "127.0.0.1:8080", 0, 0,
     "IPv4 address and port to serve on; port 0 picks a free one."},
    {"tls_cert", CNL_CONFIG_STRING, S(tls_cert), NULL, 0, 0,
     "PEM certificate chain file; with tls_key, serve HTTPS."},
    {"tls_key", CNL_CONFIG_STRING, S(tls_key), NULL, 0, 0,
     "PEM private key file for tls_cert."},
    {"secrets_key_file", CNL_CONFIG_STRING, S(secrets_key_file), NULL, 0, 0,
     "File holding the key that encrypts secrets at rest: 64 hex digits "
     "(openssl rand -hex 32), mode 0600, outside data_dir. Without it "
     "secrets are off; --all-in-one makes one in ~/.config/cnlab/ "
     "(XDG_CONFIG_HOME)."},
    {"policy", CNL_CONFIG_STRING, S(policy), "cnlab", 0, 0,
     "Scheduling policy (cnlab, fifo, fgd, bestfit, ...)."},
    {"node_lost_timeout", CNL_CONFIG_DURATION, S(node_lost_timeout), "30s",
     2000, 3600000,
     "A node silent this long is lost and its work requeued; agents stop "
     "their work after half of it without a heartbeat."},
    {"node_credential_overlap", CNL_CONFIG_DURATION, S(node_credential_overlap),
     "5m", 1000, 86400000,
     "A node credential its agent rotated stays valid this long, for "
     "the requests of the agent's other threads still in flight."},
    {"cycle_interval", CNL_CONFIG_DURATION, S(cycle_interval), "1s", 10, 60000,
     "Scheduling timer; cycles also run on every change."},
    {"preempt_min_run", CNL_CONFIG_DURATION, S(preempt_min_run), "10m", 1,
     86400000, "Pre-emption spares work that has run less than this."},
    {"preempt_grace", CNL_CONFIG_DURATION, S(preempt_grace), "5m", 1, 3600000,
     "Time between a pre-empted job's signal (checkpoint now) and its "
     "kill."},
    {"power_command", CNL_CONFIG_STRING, S(power_command), NULL, 0, 0,
     "Command that powers a node off and on (IPMI, Redfish, a script): run "
     "as COMMAND off|on NODE, with CNLAB_NODE and CNLAB_NODE_ADDRESS set. "
     "Unset: nodes are never powered down."},
    {"power_idle", CNL_CONFIG_DURATION, S(power_idle), "30m", 1000,
     7LL * 86400000,
     "With power_command: a node idle this long is powered down."},
    {"power_spare_gpus", CNL_CONFIG_INT, S(power_spare_gpus), "8", 0, 100000,
     "With power_command: idle GPUs each cluster keeps powered on."},
    {"burst_image", CNL_CONFIG_STRING, S(burst_image), NULL, 0, 0,
     "The machine image (AMI) cloud instances of the burst policy boot, "
     "with cnlab-agent installed. Unset: the burst policy launches "
     "nothing."},
    {"burst_agent", CNL_CONFIG_STRING, S(burst_agent),
     "/usr/local/bin/cnlab-agent", 0, 0,
     "cnlab-agent's path on the burst image; its user data runs it."},
    {"burst_url", CNL_CONFIG_STRING, S(burst_url), NULL, 0, 0,
     "cnlabd's URL as cloud instances reach it; unset: public_url, else "
     "the listener's address."},
    {"burst_interval", CNL_CONFIG_DURATION, S(burst_interval), "1s", 100, 60000,
     "How often the burst looks at the forecast and its instances."},
    {"burst_idle", CNL_CONFIG_DURATION, S(burst_idle), "10s", 1000, 3600000,
     "A cloud instance idle this long (nothing on it, no work waiting "
     "that may use it) is fenced and terminated."},
    {"burst_boot_timeout", CNL_CONFIG_DURATION, S(burst_boot_timeout), "10m",
     1000, 3600000,
     "A cloud instance whose agent has not joined by then is terminated "
     "(its join token lives as long)."},
    {"burst_max_instances", CNL_CONFIG_INT, S(burst_max_instances), "16", 1, 64,
     "Cloud instances held at once, at most."},
    {"oidc_issuer", CNL_CONFIG_STRING, S(oidc_issuer), NULL, 0, 0,
     "OIDC issuer whose RS256 ID tokens are accepted as bearer tokens."},
    {"oidc_audience", CNL_CONFIG_STRING, S(oidc_audience), NULL, 0, 0,
     "Audience (client id) OIDC ID tokens must carry."},
    {"oidc_jwks_file", CNL_CONFIG_STRING, S(oidc_jwks_file), NULL, 0, 0,
     "JWKS file with the issuer's signing keys."},
    {"oidc_jwks_url", CNL_CONFIG_STRING, S(oidc_jwks_url), NULL, 0, 0,
     "JWKS URL with the issuer's signing keys (refetched on rotation)."},
    {"oidc_username_claim", CNL_CONFIG_STRING, S(oidc_username_claim),
     "preferred_username", 0, 0,
     "ID token claim that suggests the name of a user made at their first "
     "OIDC sign-in (used only when that name is free); users are matched "
     "by (iss, sub), never by name."},
    {"oidc_authorization_endpoint", CNL_CONFIG_STRING,
     S(oidc_authorization_endpoint), NULL, 0, 0,
     "The OIDC provider's authorization endpoint, for cnlab login --web "
     "(published on GET /v1/auth/oidc with the issuer, the audience as "
     "client id and the token endpoint); unset: no browser sign-in."},
    {"oidc_token_endpoint", CNL_CONFIG_STRING, S(oidc_token_endpoint), NULL, 0,
     0,
     "The OIDC provider's token endpoint, for cnlab login --web (a public "
     "client with PKCE: no client secret)."},
    {"cli_dir", CNL_CONFIG_STRING, S(cli_dir), NULL, 0, 0,
     "Directory of cnlab CLI binaries named cnlab-<os>-<arch> (e.g. "
     "cnlab-darwin-aarch64) that GET /cli installs; unset: the cnlab beside "
     "cnlabd, as cnlab-linux-<this arch>. Checksums are taken at start-up."},
    {"public_url", CNL_CONFIG_STRING, S(public_url), NULL, 0, 0,
     "This server's URL as users reach it (behind a proxy), written into "
     "the installer of GET /cli; unset: http(s)://<the request's Host>."},
    {"notebook_listen", CNL_CONFIG_STRING, S(notebook_listen), NULL, 0, 0,
     "IPv4 address and port of the notebook proxy (/s/SERVER-ID/), an "
     "origin of its own so that a tenant's pages never run on the API's "
     "and the dashboard's; HTTPS with tls_cert when the API has it. "
     "Unset: listen's host with its port + 1 (a free port when listen's "
     "is 0 or port + 1 is taken, with a warning)."},
    {"notebook_url", CNL_CONFIG_STRING, S(notebook_url), NULL, 0, 0,
     "The notebook proxy's URL as users reach it (http(s)://host[:port], "
     "another origin than public_url), in the servers' URLs; unset: the "
     "scheme and host name of the request with notebook_listen's port."},
    {"log_level", CNL_CONFIG_STRING, S(log_level), "info", 0, 0,
     "debug, info, warn or error."},
    {"otlp_endpoint", CNL_CONFIG_STRING, S(otlp_endpoint), NULL, 0, 0,
     "OpenTelemetry collector (OTLP/HTTP, JSON) spans go to, e.g. "
     "http://127.0.0.1:4318 (/v1/traces appended); unset: "
     "OTEL_EXPORTER_OTLP_ENDPOINT, else none (docs/observability.md)."},
    {"loki_url", CNL_CONFIG_STRING, S(loki_url), NULL, 0, 0,
     "Loki that workload output and cnlabd's log lines are pushed to, e.g. "
     "http://127.0.0.1:3100 (/loki/api/v1/push appended); unset: none."},
    {"artifacts_max_bytes", CNL_CONFIG_SIZE, S(artifacts_max_bytes), "10gib", 1,
     INT64_MAX,
     "The most bytes of artifacts one job keeps (its checkpoint files "
     "count again, apart); an upload past it fails the job, naming the "
     "file and this limit."},
    {"inputs_max_bytes", CNL_CONFIG_SIZE, S(inputs_max_bytes), "2gib", 1,
     INT64_MAX,
     "The most bytes of input files one job takes (and one upload); more "
     "is refused with 413 naming the file and this limit."},
    {"artifacts_keep", CNL_CONFIG_DURATION, S(artifacts_keep), "0s", 0,
     3650LL * 86400000,
     "How long a finished job's artifacts, checkpoint and input files "
     "stay after its end (30d, 12h); 0s keeps them until the project is "
     "deleted."},
    {"images_max_bytes", CNL_CONFIG_SIZE, S(images_max_bytes), "64gib", 1,
     INT64_MAX,
     "The largest image archive `cnlab image import` takes; more is "
     "refused with 413 before any of it is read."},
    {"http_max_connections", CNL_CONFIG_INT, S(http_max_connections), "1024", 1,
     65536,
     "Connections served at once (each has a thread); one more is answered "
     "503 with Retry-After (never dropped without a reply)."},
    {"http_max_connections_per_client", CNL_CONFIG_INT,
     S(http_max_connections_per_client), "128", 1, 65536,
     "Connections served at once from one IP address (users and agents "
     "behind one address, or a proxy in front, count together); more are "
     "answered 503. Upgraded connections (tunnels, capped per user) count "
     "only in http_max_connections."},
    {"http_header_timeout", CNL_CONFIG_DURATION, S(http_header_timeout), "20s",
     100, 600000,
     "A request's whole head must arrive within this of the connection "
     "(or of the previous reply on a kept-alive one), else the connection "
     "is closed. Long polls, streamed replies and tunnels are not "
     "affected."},
    {"http_body_timeout", CNL_CONFIG_DURATION, S(http_body_timeout), "60s", 100,
     3600000,
     "A request body (uploads included) that receives no byte for this "
     "long is cut; a slow body that keeps coming is fine."},
    {"http_body_max", CNL_CONFIG_SIZE, S(http_body_max), "1mib", 1024,
     INT64_C(1) << 30,
     "The largest body of a JSON API request; more is refused with 413 "
     "naming the limit. Uploads and image imports have their own limits "
     "(inputs_max_bytes, artifacts_max_bytes, images_max_bytes)."},
    {"http_retry_after", CNL_CONFIG_DURATION, S(http_retry_after), "5s", 1000,
     3600000, "The Retry-After a 503 for too many connections says."},
    {"kube", CNL_CONFIG_BOOL, S(kube), "false", 0, 0,
     "Schedule Kubernetes pods: pods with schedulerName cnlab become jobs "
     "of the project their namespace names (label cnlab.io/project, else "
     "the namespace's name; the project lets the service user kube in as "
     "a member); nodes whose GPUs cnlab-dra-plugin publishes become "
     "nodes. The leader binds the pods and allocates their "
     "ResourceClaims, and evicts pre-empted ones."},
    {"kube_server", CNL_CONFIG_STRING, S(kube_server), NULL, 0, 0,
     "With kube: the Kubernetes API server's URL; unset: in-cluster "
     "(KUBERNETES_SERVICE_HOST and _PORT)."},
    {"kube_token_file", CNL_CONFIG_STRING, S(kube_token_file), NULL, 0, 0,
     "With kube: the bearer token file, read again before each request; "
     "unset: the pod's service account token."},
    {"kube_ca_file", CNL_CONFIG_STRING, S(kube_ca_file), NULL, 0, 0,
     "With kube: the API server's CA; unset: the service account's."},
    {"kube_watch_timeout", CNL_CONFIG_DURATION, S(kube_watch_timeout), "60s",
     1000, 3600000,
     "With kube: how long one watch of the pods lasts before it is made "
     "again (a stop waits for it)."},
    {"kube_resync", CNL_CONFIG_DURATION, S(kube_resync), "10s", 200, 3600000,
     "With kube: how often nodes and slices are listed again (new GPU "
     "nodes are taken) and the jobs of waiting pods looked at (a cancelled "
     "one evicts its pod)."},
    {"kube_default_image", CNL_CONFIG_STRING, S(kube_default_image),
     "docker.io/library/python:3.12-slim", 0, 0,
     "With kube: the image (an OCI reference the kubelet pulls) of a "
     "`cnlab run` job that names none, when it becomes a pod on a "
     "Kubernetes node; a job's --image is taken as such a reference."},
    {"kube_image_registry", CNL_CONFIG_STRING, S(kube_image_registry), NULL, 0,
     0,
     "With kube: the registry (host[/path]) that CNLab's images are pushed "
     "to (skopeo copy --preserve-digests): a `cnlab run --image NAME` job "
     "on a Kubernetes node runs REGISTRY/NAME@DIGEST, the digest CNLab "
     "has; unset: NAME as an OCI reference the kubelet resolves."},
    {"kube_start_timeout", CNL_CONFIG_DURATION, S(kube_start_timeout), "5m",
     1000, 86400000,
     "With kube: how long a `cnlab run` job's pod may be unable to start "
     "(an image that cannot be pulled, a configuration that cannot be "
     "made) before the job fails, saying why, and the pod goes."},
    {"kube_user_namespaces", CNL_CONFIG_BOOL, S(kube_user_namespaces), "true",
     0, 0,
     "With kube: each pod CNLab makes (jobs, servers, the operator's) in a "
     "user namespace of its own (hostUsers: false): its uid 1000 is, on "
     "the node, an unprivileged id no other pod has.  Needs nodes that "
     "support it (Linux 6.3+, containerd 2.0+ or CRI-O, runc 1.2+ or "
     "crun 1.9+); false for a cluster whose nodes do not (its pods still "
     "run as uid 1000, never root)."},
    {"kube_collect_image", CNL_CONFIG_STRING, S(kube_collect_image), NULL, 0, 0,
     "With kube: the image holding cnlab-agent (the agent's), whose "
     "`cnlab-agent collect` runs beside each `cnlab run` job's pod as a "
     "native sidecar and uploads the job's artifacts when it ends; unset "
     "(or no kube_collect_url): such jobs bring back no artifacts."},
    {"kube_collect_url", CNL_CONFIG_STRING, S(kube_collect_url), NULL, 0, 0,
     "With kube: cnlabd's URL as pods reach it (its Service, e.g. "
     "https://cnlabd.cnlab.svc:8443), where the collector uploads; the "
     "certificate of an https listener goes with it as its CA."},
};
#undef S
#define N_SETTINGS (sizeof(settings_table) / sizeof(settings_table[0]))

static void usage(FILE *f)
{
	fprintf(f,
	        "Usage: cnlabd [--config FILE] [--data-dir DIR] "
	        "[--listen HOST:PORT]\n"
	        "              [--bootstrap-admin NAME] [--KEY VALUE ...]\n"
	        "       cnlabd migrate [--config FILE] [--store URL | "
	        "--data-dir DIR]\n"
	        "\n"
	        "The CNLab control plane: REST API under /v1, scheduling "
	        "loop, /metrics.\n"
	        "\n"
	        "  --config FILE           settings file (key = value lines; "
	        "keys below)\n"
	        "  --data-dir DIR          state directory (data_dir)\n"
	        "  --listen HOST:PORT      address to serve on (listen); port "
	        "0 picks a free\n"
	        "                          port, printed on stdout\n"
	        "  --bootstrap-admin NAME  on an empty store, create the "
	        "administrator NAME\n"
	        "                          (password from "
	        "CNLAB_ADMIN_PASSWORD), the \"%s\"\n"
	        "                          project and the default profiles\n"
	        "  --log-level LEVEL       debug, info, warn or error\n"
	        "  --all-in-one            the whole platform on this machine: "
	        "secrets kept in\n"
	        "                          the data directory (default "
	        "~/.local/share/cnlab),\n"
	        "                          administrator \"admin\", and an "
	        "embedded node agent\n"
	        "  --gpus SPEC             with --all-in-one: nvml, or a fake "
	        "pool such as\n"
	        "                          fake:2xH100-80GB-SXM (the default "
	        "without NVML)\n"
	        "  --agent-run-dir DIR     with --all-in-one: the embedded "
	        "agent's run_dir (its\n"
	        "                          containers' bundles and crun's "
	        "state; a tmpfs)\n"
	        "  --help                  show this help\n"
	        "  --KEY VALUE             any setting below, '-' or '_' "
	        "between words\n"
	        "                          (--node-lost-timeout 10s, "
	        "--policy=fifo)\n"
	        "\n"
	        "Every setting may also come from the environment as "
	        "CNLAB_<KEY> (e.g.\n"
	        "CNLAB_DATA_DIR); flags win over the environment, which wins "
	        "over the file.\n"
	        "\n"
	        "Secrets come only from the environment:\n"
	        "  CNLAB_JWT_SECRET        required; at least %d bytes; signs "
	        "session tokens\n"
	        "  CNLAB_ADMIN_PASSWORD    password for --bootstrap-admin\n"
	        "\n"
	        "Settings:\n\n",
	        CNL_API_ADMIN_PROJECT, CNL_API_SECRET_MIN);
	cnl_config_doc_markdown(settings_table, N_SETTINGS, f);
}

/* The whole of a small file, NUL-terminated; NULL with errno set. */
static char *read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t n = 0, cap = 0;

	if (!f)
		return NULL;
	for (;;) {
		if (cap - n < 4096) {
			cap = cap ? 2 * cap : 8192;
			if (cap > (1u << 20)) {
				free(buf);
				fclose(f);
				errno = EFBIG;
				return NULL;
			}
			buf = cnl_xrealloc(buf, cap);
		}
		size_t got = fread(buf + n, 1, cap - n - 1, f);
		n += got;
		if (got == 0)
			break;
	}
	fclose(f);
	buf[n] = '\0';
	return buf;
}

/* Split "HOST:PORT"; returns 0 or -1. */
/* This cnlabd's replica URL, which the other replicas forward to while
 * it leads: replica_url, else its own listener's address. */
static void replica_label(const struct settings *st, const char *host,
                          unsigned port, bool tls, char *buf, size_t len)
{
	char name[256] = "";

	if (st->replica_url) {
		snprintf(buf, len, "%s", st->replica_url);
		return;
	}
	if (strcmp(host, "0.0.0.0") == 0 &&
	    gethostname(name, sizeof(name) - 1) == 0)
		name[sizeof(name) - 1] = '\0';
	snprintf(buf, len, "%s://%s:%u", tls ? "https" : "http",
	         name[0] ? name : host, port);
}

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

extern char **environ;

/* The store's URL: the setting, or SQLite's cnlab.db in data_dir. */
static int store_url(const struct settings *st, char *buf, size_t len)
{
	if (st->store && st->store[0])
		return (size_t)snprintf(buf, len, "%s", st->store) < len ? 0
		                                                         : -1;
	return (size_t)snprintf(buf, len, "%s/cnlab.db", st->data_dir) < len
	           ? 0
	           : -1;
}

/* The embedded agent, started after any orphan of an earlier run that
 * still holds its lock is stopped (never two agents for one node).  Its
 * pid, or -errno with @err. */
static pid_t start_agent(struct cnl_api *api, const char *url,
                         const char *token, const char *data_dir,
                         const char *gpus, char *ret_gpus, char *err,
                         size_t errlen)
{
	pid_t orphan, pid;
	int r;

	if ((r = cnl_aio_stop_orphan(data_dir, &orphan, err, errlen)) < 0)
		return r;
	if (r > 0)
		cnl_log(CNL_LOG_WARN,
		        "stopped the embedded agent of an earlier run",
		        "pid=%d", (int)orphan);
	if ((pid = cnl_aio_spawn_agent(url, token, data_dir, gpus, ret_gpus,
	                               err, errlen)) > 0) {
		cnl_api_agent_health(api, true);
		cnl_log(CNL_LOG_INFO, "embedded agent started", "pid=%d",
		        (int)pid);
	}
	return pid;
}

/*
 * One cnlabd per data directory: a record lock on DATA_DIR/cnlabd.lock,
 * held while this process runs (the kernel lets it go however it ends).
 * A second cnlabd on the same directory (two schedulers over one
 * database; an all-in-one would take the first one's agent for an
 * orphan, stop it and kill its credential) refuses to start.  The
 * descriptor stays open: closing any descriptor of the file would let
 * the lock go.  0, or -1 with the reason in @err.
 */
static int lock_data_dir(const char *dir, char *err, size_t errlen)
{
	struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	char path[PATH_MAX], pid[32];
	int fd, n;

	snprintf(path, sizeof(path), "%s/cnlabd.lock", dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		snprintf(err, errlen, "%.400s: %s", path, strerror(errno));
		return -1;
	}
	if (fcntl(fd, F_SETLK, &fl) < 0) {
		int e = errno;

		fl = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET};
		if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK)
			snprintf(err, errlen,
			         "another cnlabd (pid %d) runs on %s; one per "
			         "data directory",
			         (int)fl.l_pid, dir);
		else
			snprintf(err, errlen, "cannot lock %.400s: %s", path,
			         strerror(e));
		close(fd);
		return -1;
	}
	n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
		cnl_log(CNL_LOG_WARN, "cannot write the lock file", "path=%s",
		        path);
	return 0;
}

/* Backoff between restarts of the embedded agent: from 1 s, doubled up
 * to 30 s, back to 1 s after a run of a minute. */
#define AGENT_BACKOFF_MIN_MS 1000
#define AGENT_BACKOFF_MAX_MS 30000
#define AGENT_STABLE_MS      60000

/*
 * The all-in-one's main thread: wait for SIGINT/SIGTERM (@set), and
 * meanwhile keep the embedded agent (*@pid) running: restarted when it
 * dies, with backoff, each death and start logged; /healthz says
 * degraded from its death until the next one runs, and while it lives
 * but its node has been silent past the lease (stopped, hung: its work
 * stops at the lease's end, watchdogs).
 */
static void supervise(struct cnl_api *api, const sigset_t *set, pid_t *pid,
                      int64_t started_ms, const char *url, const char *token,
                      const char *data_dir, const char *gpus)
{
	int64_t backoff = AGENT_BACKOFF_MIN_MS, next_ms = 0;
	char chosen[128], err[512], q[600], node[256];
	bool silent = false;

	cnl_aio_node_name(node, sizeof(node));

	for (;;) {
		struct timespec tick = {.tv_nsec = 200 * 1000 * 1000};
		int64_t now;
		int sig = sigtimedwait(set, NULL, &tick), status;

		if (sig > 0) {
			cnl_log(CNL_LOG_INFO, "cnlabd stopping", "signal=%d",
			        sig);
			return;
		}
		now = cnl_time_now_ms();
		if (*pid > 0 && waitpid(*pid, &status, WNOHANG) == *pid) {
			if (now - started_ms >= AGENT_STABLE_MS)
				backoff = AGENT_BACKOFF_MIN_MS;
			cnl_api_agent_health(api, false);
			cnl_log(CNL_LOG_WARN, "embedded agent died; restarting",
			        "pid=%d %s=%d restart_in_ms=%" PRId64,
			        (int)*pid,
			        WIFSIGNALED(status) ? "signal" : "exit",
			        WIFSIGNALED(status) ? WTERMSIG(status)
			                            : WEXITSTATUS(status),
			        backoff);
			*pid = -1;
			next_ms = now + backoff;
			backoff = backoff * 2 > AGENT_BACKOFF_MAX_MS
			              ? AGENT_BACKOFF_MAX_MS
			              : backoff * 2;
		}
		if (*pid > 0 && cnl_api_node_silent(api, node, now) != silent) {
			silent = !silent;
			cnl_api_agent_health(api, !silent);
			cnl_log(silent ? CNL_LOG_WARN : CNL_LOG_INFO,
			        silent ? "embedded agent unresponsive"
			               : "embedded agent responsive again",
			        "pid=%d", (int)*pid);
		}
		if (*pid > 0 || now < next_ms)
			continue;
		silent = false;
		*pid = start_agent(api, url, token, data_dir, gpus, chosen, err,
		                   sizeof(err));
		started_ms = now;
		if (*pid < 0) {
			cnl_log(CNL_LOG_ERROR,
			        "cannot restart the embedded agent",
			        "err=%s retry_in_ms=%" PRId64,
			        cnl_log_quote(q, sizeof(q), err), backoff);
			next_ms = now + backoff;
			backoff = backoff * 2 > AGENT_BACKOFF_MAX_MS
			              ? AGENT_BACKOFF_MAX_MS
			              : backoff * 2;
		}
	}
}

/*
 * cnlabd migrate: bring the store's schema up to date and say where it
 * stands, then exit; what every cnlabd also does when it starts, for an
 * operator who upgrades the database before the replicas (or checks that
 * a database is not newer than this build: exit 1, saying so).
 */
static int migrate_main(int argc, char **argv)
{
	struct cnl_config_flag own[] = {{"help", false, NULL},
	                                {"h", false, NULL},
	                                {"config", true, NULL},
	                                {NULL, false, NULL}};
	struct settings st;
	struct cnl_store *store = NULL;
	char err[512], url[4096];
	int rc = 2, v;

	memset(&st, 0, sizeof(st));
	if (cnl_config_load_args(settings_table, N_SETTINGS, NULL, argc, argv,
	                         own, err, sizeof(err)) < 0) {
		fprintf(stderr, "cnlabd migrate: %s\n", err);
		fprintf(stderr, "usage: cnlabd migrate [--config FILE] "
		                "[--store URL | --data-dir DIR]\n");
		return 2;
	}
	if (own[0].value || own[1].value) {
		printf("usage: cnlabd migrate [--config FILE] [--store URL | "
		       "--data-dir DIR]\n\n"
		       "Apply the store's schema migrations that it lacks and "
		       "print its version.\n");
		return 0;
	}
	if (cnl_config_defaults(settings_table, N_SETTINGS, &st) < 0 ||
	    (own[2].value &&
	     cnl_config_load_file(settings_table, N_SETTINGS, &st, own[2].value,
	                          err, sizeof(err)) < 0) ||
	    cnl_config_load_env(settings_table, N_SETTINGS, &st, "CNLAB_",
	                        environ, err, sizeof(err)) < 0 ||
	    cnl_config_load_args(settings_table, N_SETTINGS, &st, argc, argv,
	                         own, err, sizeof(err)) < 0) {
		fprintf(stderr, "cnlabd migrate: %s\n", err);
		goto out;
	}
	if (!(st.store && st.store[0]) && !st.data_dir) {
		fprintf(stderr, "cnlabd migrate: set store (or data_dir)\n");
		goto out;
	}
	if (store_url(&st, url, sizeof(url)) < 0) {
		fprintf(stderr,
		        "cnlabd migrate: the store's path is too long\n");
		goto out;
	}
	rc = 1;
	if (cnl_store_open(url, &store, err, sizeof(err)) < 0) {
		fprintf(stderr, "cnlabd migrate: %s\n", err);
		goto out;
	}
	if ((v = cnl_store_schema_version(store)) < 0) {
		fprintf(stderr, "cnlabd migrate: %s: %s\n",
		        cnl_store_path(store), cnl_store_errmsg(store));
		goto out;
	}
	printf("%s (%s): schema version %d, up to date\n",
	       cnl_store_path(store), cnl_store_backend(store), v);
	rc = 0;
out:
	cnl_store_close(store);
	cnl_config_done(settings_table, N_SETTINGS, &st);
	return rc;
}

int main(int argc, char **argv)
{
	cnl_heap_keep();
	if (argc > 1 && strcmp(argv[1], "migrate") == 0)
		return migrate_main(argc - 1, argv + 1);
	/* The flags cnlabd handles itself; every setting of the table is
	 * also a flag (--data-dir DIR, --node-lost-timeout=10s). */
	struct cnl_config_flag own[] = {
	    {"help", false, NULL},         {"h", false, NULL},
	    {"config", true, NULL},        {"bootstrap-admin", true, NULL},
	    {"all-in-one", false, NULL},   {"gpus", true, NULL},
	    {"agent-run-dir", true, NULL}, {NULL, false, NULL}};
	enum { F_HELP, F_H, F_CONFIG, F_ADMIN, F_AIO, F_GPUS, F_RUN_DIR };
	struct settings st;
	const char *config = NULL, *admin = NULL, *secret, *password;
	const char *aio_gpus = NULL;
	bool aio = false;
	char aio_secret[CNL_AIO_SECRET_MAX], aio_pw[CNL_AIO_SECRET_MAX];
	char aio_dir[PATH_MAX], chosen_gpus[128] = "";
	char aio_token[CNL_AIO_TOKEN_MAX] = "";
	uint8_t sec_key[CNL_SECRET_KEY_LEN];
	bool have_sec_key = false;
	pid_t agent_pid = -1;
	int64_t agent_started_ms = 0;
	char aio_url[128] = "";
	enum cnl_log_level level;
	char host[64], path[4096], files_dir[4096], err[512];
	char replica_proof[CNL_FORWARD_PROOF_LEN] = "";
	char *cert = NULL, *key = NULL;
	struct cnl_store *store = NULL;
	struct cnl_leader *leader = NULL;
	struct cnl_kube_sched *kube = NULL;
	char kube_token[CNL_AUTH_TOKEN_MAX] = "";
	struct cnl_api *api = NULL, *fapi = NULL;
	struct cnl_api_config ac;
	struct cnl_store *fstore = NULL;
	struct cnl_oidc *oidc = NULL;
	struct cnl_http_server *srv = NULL, *nb_srv = NULL, *standby = NULL;
	struct cnl_api_listen l = {0};
	char nb_host[64];
	uint16_t port, nb_port;
	sigset_t set;
	int r, sig, rc = 1;

	memset(&st, 0, sizeof(st));
	/* The command line is checked (and --config found) before the file
	 * is read; its settings are applied last, so flags win. */
	if (cnl_config_load_args(settings_table, N_SETTINGS, NULL, argc, argv,
	                         own, err, sizeof(err)) < 0) {
		fprintf(stderr, "cnlabd: %s\n", err);
		usage(stderr);
		return 2;
	}
	if (own[F_HELP].value || own[F_H].value) {
		usage(stdout);
		return 0;
	}
	config = own[F_CONFIG].value;
	admin = own[F_ADMIN].value;
	aio = own[F_AIO].value != NULL;
	aio_gpus = own[F_GPUS].value;
	if (own[F_RUN_DIR].value && !aio) {
		fprintf(stderr, "cnlabd: --agent-run-dir is for the embedded "
		                "agent of --all-in-one\n");
		return 2;
	}
	cnl_aio_set_agent_run_dir(own[F_RUN_DIR].value);
	if (cnl_config_defaults(settings_table, N_SETTINGS, &st) < 0 ||
	    (config && cnl_config_load_file(settings_table, N_SETTINGS, &st,
	                                    config, err, sizeof(err)) < 0) ||
	    cnl_config_load_env(settings_table, N_SETTINGS, &st, "CNLAB_",
	                        environ, err, sizeof(err)) < 0 ||
	    cnl_config_load_args(settings_table, N_SETTINGS, &st, argc, argv,
	                         own, err, sizeof(err)) < 0) {
		fprintf(stderr, "cnlabd: %s\n", err);
		cnl_config_done(settings_table, N_SETTINGS, &st);
		return 2;
	}
	if (cnl_log_level_parse(st.log_level, &level) < 0) {
		fprintf(stderr, "cnlabd: bad log level %s\n", st.log_level);
		goto usage_err;
	}
	cnl_log_set_level(level);
	/* Before any thread: the embedded agent inherits the exporters'
	 * addresses through the environment (it reads both). */
	if (aio && st.otlp_endpoint && st.otlp_endpoint[0])
		setenv("OTEL_EXPORTER_OTLP_ENDPOINT", st.otlp_endpoint, 1);
	if (aio && st.loki_url && st.loki_url[0])
		setenv("CNLAB_LOKI_URL", st.loki_url, 1);
	if (cnl_telemetry_start("cnlabd", st.otlp_endpoint, st.loki_url,
	                        "cnlabd", NULL, err, sizeof(err)) < 0) {
		fprintf(stderr, "cnlabd: %s\n", err);
		goto usage_err;
	}
	if (aio && !st.data_dir) {
		const char *x = getenv("XDG_DATA_HOME"), *h = getenv("HOME");

		snprintf(aio_dir, sizeof(aio_dir), "%s%s/cnlab",
		         x   ? x
		         : h ? h
		             : "/var/lib",
		         x || !h ? "" : "/.local/share");
		if (x || h) {
			char parent[PATH_MAX];

			/* ~/.local/share may not exist yet. */
			snprintf(parent, sizeof(parent), "%s", aio_dir);
			for (char *p = parent + 1; *p; p++)
				if (*p == '/') {
					*p = '\0';
					mkdir(parent, 0755);
					*p = '/';
				}
		}
		cnl_config_set(settings_table, N_SETTINGS, &st, "data_dir",
		               aio_dir, err, sizeof(err));
	}
	if (!st.data_dir) {
		fprintf(stderr, "cnlabd: --data-dir (or data_dir) is "
		                "required\n");
		usage(stderr);
		goto usage_err;
	}
	if (parse_listen(st.listen, host, sizeof(host), &port) < 0) {
		fprintf(stderr, "cnlabd: listen wants HOST:PORT, got %s\n",
		        st.listen);
		goto usage_err;
	}
	if (st.notebook_listen) {
		if (parse_listen(st.notebook_listen, nb_host, sizeof(nb_host),
		                 &nb_port) < 0) {
			fprintf(stderr,
			        "cnlabd: notebook_listen wants HOST:PORT, got "
			        "%s\n",
			        st.notebook_listen);
			goto usage_err;
		}
	} else if (port == 65535) {
		fprintf(stderr, "cnlabd: listen's port is 65535: set "
		                "notebook_listen (the notebook proxy's own "
		                "HOST:PORT)\n");
		goto usage_err;
	} else {
		snprintf(nb_host, sizeof(nb_host), "%s", host);
		nb_port = port ? (uint16_t)(port + 1) : 0;
	}
	if (port && nb_port == port) {
		fprintf(stderr, "cnlabd: notebook_listen must be another port "
		                "than listen: notebooks get an origin of their "
		                "own\n");
		goto usage_err;
	}
	if (!st.tls_cert != !st.tls_key) {
		fprintf(stderr, "cnlabd: tls_cert and tls_key go together\n");
		goto usage_err;
	}
	if (st.replica_url && ((strncmp(st.replica_url, "http://", 7) != 0 &&
	                        strncmp(st.replica_url, "https://", 8) != 0) ||
	                       strlen(st.replica_url) > 160 ||
	                       strpbrk(st.replica_url, " \t\r\n,"))) {
		fprintf(stderr,
		        "cnlabd: replica_url: expected one http(s)://host:port "
		        "URL of at most 160 bytes, got \"%.200s\"\n",
		        st.replica_url);
		goto usage_err;
	}
	secret = getenv("CNLAB_JWT_SECRET");
	password = getenv("CNLAB_ADMIN_PASSWORD");
	if (aio) {
		/* Secrets live in the data directory; the first start makes
		 * them, and the administrator is "admin". */
		if (cnl_aio_secrets(st.data_dir, secret, password, aio_secret,
		                    aio_pw, err, sizeof(err)) < 0) {
			fprintf(stderr, "cnlabd: %s\n", err);
			goto usage_err;
		}
		secret = aio_secret;
		password = aio_pw;
		if (!admin)
			admin = "admin";
	}
	if (!secret || strlen(secret) < CNL_API_SECRET_MIN) {
		fprintf(stderr,
		        "cnlabd: CNLAB_JWT_SECRET must be set to a secret of "
		        "at least %d bytes (e.g. openssl rand -base64 48); "
		        "refusing to start\n",
		        CNL_API_SECRET_MIN);
		goto usage_err;
	}
	if (admin && (!password || !password[0])) {
		fprintf(stderr, "cnlabd: --bootstrap-admin needs the password "
		                "in CNLAB_ADMIN_PASSWORD\n");
		goto usage_err;
	}
	if (st.tls_cert && (!(cert = read_file(st.tls_cert)) ||
	                    !(key = read_file(st.tls_key)))) {
		fprintf(stderr, "cnlabd: %s: %s\n",
		        cert ? st.tls_key : st.tls_cert, strerror(errno));
		goto out;
	}
	if (st.oidc_issuer || st.oidc_jwks_file || st.oidc_jwks_url) {
		struct cnl_oidc_config oc = {
		    .issuer = st.oidc_issuer,
		    .audience = st.oidc_audience,
		    .jwks_file = st.oidc_jwks_file,
		    .jwks_url = st.oidc_jwks_url,
		    .username_claim = st.oidc_username_claim,
		};

		if (cnl_oidc_new(&oc, &oidc, err, sizeof(err)) < 0) {
			fprintf(stderr, "cnlabd: OIDC: %s\n", err);
			goto out;
		}
	}

	/* Private whatever the umask: secrets, the database and jobs'
	 * files live here. */
	if ((mkdir(st.data_dir, 0700) < 0 && errno != EEXIST) ||
	    chmod(st.data_dir, 0700) < 0) {
		fprintf(stderr, "cnlabd: %s: %s\n", st.data_dir,
		        strerror(errno));
		goto out;
	}
	if (lock_data_dir(st.data_dir, err, sizeof(err)) < 0) {
		fprintf(stderr, "cnlabd: %s\n", err);
		goto out;
	}
	/* The secrets key: the operator's file, or on the all-in-one one
	 * made in the user's config folder (never beside the database). */
	if (st.secrets_key_file) {
		if (cnl_secret_key_load(st.secrets_key_file, st.data_dir,
		                        sec_key, err, sizeof(err)) < 0) {
			fprintf(stderr, "cnlabd: %s\n", err);
			goto out;
		}
		have_sec_key = true;
	} else if (aio && cnl_aio_secrets_key_path(path, sizeof(path)) == 0) {
		if (cnl_secret_key_make(path, st.data_dir, sec_key, err,
		                        sizeof(err)) < 0) {
			fprintf(stderr, "cnlabd: %s\n", err);
			goto out;
		}
		have_sec_key = true;
		cnl_log(CNL_LOG_INFO, "secrets key", "file=%s", path);
	}
	if (!have_sec_key)
		cnl_log(CNL_LOG_INFO, "secrets are off",
		        "why=\"no secrets_key_file is set\"");
	if (store_url(&st, path, sizeof(path)) < 0) {
		fprintf(stderr, "cnlabd: data_dir path too long\n");
		goto out;
	}
	if ((size_t)snprintf(files_dir, sizeof(files_dir), "%s",
	                     st.files_dir ? st.files_dir : "") >=
	        sizeof(files_dir) ||
	    (!st.files_dir &&
	     (size_t)snprintf(files_dir, sizeof(files_dir), "%s/files",
	                      st.data_dir) >= sizeof(files_dir))) {
		fprintf(stderr, "cnlabd: files_dir path too long\n");
		goto out;
	}
	if (cnl_store_open(path, &store, err, sizeof(err)) < 0) {
		fprintf(stderr, "cnlabd: %s\n", err);
		goto out;
	}
	cnl_log(CNL_LOG_INFO, "store", "backend=%s db=%s",
	        cnl_store_backend(store), cnl_store_path(store));
	/* The API's settings: a follower's API (below) and the one that
	 * serves once this cnlabd leads (or alone). */
	ac = (struct cnl_api_config){
	    .store = store,
	    .jwt_key = (const uint8_t *)secret,
	    .secrets_key = have_sec_key ? sec_key : NULL,
	    .jwt_key_len = strlen(secret),
	    .oidc = oidc,
	    .oidc_issuer = st.oidc_issuer,
	    .oidc_client_id = st.oidc_audience,
	    .oidc_authorize_url = st.oidc_authorization_endpoint,
	    .oidc_token_url = st.oidc_token_endpoint,
	    .policy = st.policy,
	    .node_lost_ms = st.node_lost_timeout,
	    .node_credential_overlap_ms = st.node_credential_overlap,
	    .cycle_interval_ms = st.cycle_interval,
	    .preempt_min_run_ms = st.preempt_min_run,
	    .preempt_grace_ms = st.preempt_grace,
	    .power_command = st.power_command,
	    .power_idle_ms = st.power_idle,
	    .power_spare_gpus = st.power_spare_gpus,
	    .burst_image = st.burst_image,
	    .burst_agent = st.burst_agent,
	    .burst_url = st.burst_url,
	    .burst_interval_ms = st.burst_interval,
	    .burst_idle_ms = st.burst_idle,
	    .burst_boot_ms = st.burst_boot_timeout,
	    .burst_max_instances = st.burst_max_instances,
	    .cli_dir = st.cli_dir,
	    .public_url = st.public_url,
	    .notebook_url = st.notebook_url,
	    .files_dir = files_dir,
	    .artifacts_max_bytes = st.artifacts_max_bytes,
	    .inputs_max_bytes = st.inputs_max_bytes,
	    .images_max_bytes = st.images_max_bytes,
	    .artifacts_keep_ms = st.artifacts_keep,
	    .store_pool = st.store_pool,
	};
	/* Several cnlabd may share a PostgreSQL store: lead, or follow
	 * until this one may (leader.h).  Before anything writes: every
	 * write from here on is fenced at the lease's epoch. */
	if (strcmp(cnl_store_backend(store), "postgresql") == 0) {
		struct cnl_forward_local local;
		char label[600];

		if (!st.files_dir)
			cnl_log(CNL_LOG_WARN,
			        "jobs' files are this replica's own",
			        "files_dir=%s why=\"files_dir is unset: a new "
			        "leader will not have the files of the jobs "
			        "this one took; give every replica one shared "
			        "folder\"",
			        files_dir);

		sigemptyset(&set);
		sigaddset(&set, SIGINT);
		sigaddset(&set, SIGTERM);
		pthread_sigmask(SIG_BLOCK, &set, NULL);
		/* While it waits it serves on its address: reads of the
		 * store itself, on a handle of its own (a follower's API),
		 * the rest forwarded to the leader (forward.h); the leader's
		 * listener takes the port after. */
		if (cnl_store_open(path, &fstore, err, sizeof(err)) < 0) {
			fprintf(stderr, "cnlabd: %s\n", err);
			goto out;
		}
		ac.store = fstore;
		ac.follower = true;
		r = cnl_api_new(&ac, &fapi);
		ac.store = store;
		ac.follower = false;
		if (r < 0) {
			fprintf(
			    stderr,
			    "cnlabd: cannot set up the follower's API: %s\n",
			    cnl_strerror(r));
			goto out;
		}
		local = (struct cnl_forward_local){
		    .ud = fapi,
		    .serves = cnl_api_follower_serves,
		    .serve = cnl_api_serve,
		};
		local.routes = cnl_api_routes(&local.nroutes);
		if (cnl_forward_listen(
		        &(struct cnl_http_config){
		            .host = host,
		            .port = port,
		            .tls_cert_pem = cert,
		            .tls_key_pem = key,
		            .conn_max = (unsigned)st.http_max_connections,
		            .conn_per_client =
		                (unsigned)st.http_max_connections_per_client,
		            .header_timeout_ms = st.http_header_timeout,
		            .body_timeout_ms = st.http_body_timeout,
		        },
		        st.replica_ca_file, &local, &standby, err,
		        sizeof(err)) < 0) {
			fprintf(stderr, "cnlabd: %s\n", err);
			goto out;
		}
		port = cnl_http_server_port(standby);
		replica_label(&st, host, port, cert != NULL, label,
		              sizeof(label));
		cnl_forward_label(label);
		cnl_forward_proof(secret, strlen(secret), replica_proof);
		cnl_forward_set_proof(replica_proof);
		r = cnl_leader_take(path, store, label, st.lease, &set, &leader,
		                    err, sizeof(err));
		cnl_forward_stop(standby);
		standby = NULL;
		cnl_api_stop(fapi);
		cnl_api_free(fapi);
		fapi = NULL;
		cnl_store_close(fstore);
		fstore = NULL;
		if (r == 1) {
			rc = 0; /* stopped while a standby */
			goto out;
		}
		if (r < 0) {
			fprintf(stderr, "cnlabd: %s\n", err);
			goto out;
		}
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
		/* A new all-in-one platform is usable at once: its admin
		 * has a project to run work in. */
		if (aio && r == 0 &&
		    cnl_aio_default_project(store, admin, err, sizeof(err)) <
		        0) {
			fprintf(stderr, "cnlabd: %s\n", err);
			goto out;
		}
	}

	/* The embedded agent's credential, made before the scheduling loop
	 * shares the store with this thread. */
	if (aio &&
	    cnl_aio_agent_token(store, aio_token, err, sizeof(err)) < 0) {
		fprintf(stderr, "cnlabd: all-in-one: %s\n", err);
		goto out;
	}

	/* The Kubernetes scheduler's own API token, made before the
	 * scheduling loop shares the store with this thread. */
	if (st.kube &&
	    cnl_kube_sched_user(store, kube_token, err, sizeof(err)) < 0) {
		fprintf(stderr, "cnlabd: %s\n", err);
		goto out;
	}

	/* Block the stop signals in every thread; main waits for them. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	r = cnl_api_new(&ac, &api);
	if (r < 0) {
		fprintf(stderr, "cnlabd: cannot set up the API: %s\n",
		        cnl_strerror(r));
		goto out;
	}
	if (leader)
		cnl_api_set_leader(api, leader);
	l.host = host;
	l.port = port;
	l.routes = cnl_api_routes(&l.nroutes);
	l.tls_cert_pem = cert;
	l.tls_key_pem = key;
	l.run_loop = true;
	l.conn_max = (unsigned)st.http_max_connections;
	l.conn_per_client = (unsigned)st.http_max_connections_per_client;
	l.header_timeout_ms = st.http_header_timeout;
	l.body_timeout_ms = st.http_body_timeout;
	l.body_max = (size_t)st.http_body_max;
	l.retry_after_s = (unsigned)((st.http_retry_after + 999) / 1000);
	l.replica_proof = replica_proof[0] ? replica_proof : NULL;
	if (cnl_api_start(api, &l, &srv, err, sizeof(err)) < 0) {
		fprintf(stderr, "cnlabd: %s\n", err);
		goto out;
	}
	l.host = nb_host;
	l.port = nb_port;
	r = cnl_api_start_notebooks(api, &l, &nb_srv, err, sizeof(err));
	/* The default (listen's port + 1) may be another program's, or an
	 * ephemeral port the kernel lent a connection: then any free port,
	 * said in the log and the banner (the servers' URLs follow it).  A
	 * port the operator chose is theirs to fix. */
	if (r == -EADDRINUSE && !st.notebook_listen && nb_port) {
		cnl_log(CNL_LOG_WARN, "notebook port taken",
		        "port=%u use=\"any free port; set notebook_listen to "
		        "choose one\"",
		        (unsigned)nb_port);
		l.port = 0;
		r = cnl_api_start_notebooks(api, &l, &nb_srv, err, sizeof(err));
	}
	if (r < 0) {
		fprintf(stderr, "cnlabd: notebook_listen: %s\n", err);
		goto out;
	}
	printf("listening on %s:%u\n", host,
	       (unsigned)cnl_http_server_port(srv));
	printf("notebooks on %s:%u\n", nb_host,
	       (unsigned)cnl_http_server_port(nb_srv));
	fflush(stdout);
	if (aio) {
		char url[128];

		snprintf(url, sizeof(url), "%s://%s:%u",
		         cert ? "https" : "http",
		         strcmp(host, "0.0.0.0") == 0 ? "127.0.0.1" : host,
		         (unsigned)cnl_http_server_port(srv));
		snprintf(aio_url, sizeof(aio_url), "%s", url);
		if ((agent_pid = start_agent(api, aio_url, aio_token,
		                             st.data_dir, aio_gpus, chosen_gpus,
		                             err, sizeof(err))) < 0) {
			fprintf(stderr, "cnlabd: all-in-one: %s\n", err);
			goto out;
		}
		agent_started_ms = cnl_time_now_ms();
		printf("\nCNLab is running at %s (embedded agent on %s)\n"
		       "  notebooks:  %s://%s:%u (an origin of their own)\n"
		       "  log in:     cnlab login --server %s --user admin\n"
		       "              (password in %s/admin.password%s)\n"
		       "  try:        cnlab profiles list; cnlab run "
		       "train.py --gpu h100-25\n"
		       "  add users:  cnlab user create NAME, then cnlab "
		       "project member add %s NAME\n"
		       "  images:     cnlab image import FILE --name "
		       "pytorch:2.4-cuda12.4 (an OCI archive;\n"
		       "              scripts/build-image makes a small "
		       "one)\n"
		       "  install the CLI elsewhere: curl -fsSL %s/cli | sh\n"
		       "  stop:       Ctrl-C\n\n",
		       url, chosen_gpus, cert ? "https" : "http",
		       strcmp(nb_host, "0.0.0.0") == 0 ? "127.0.0.1" : nb_host,
		       (unsigned)cnl_http_server_port(nb_srv), url, st.data_dir,
		       getenv("CNLAB_ADMIN_PASSWORD")
		           ? " or CNLAB_ADMIN_PASSWORD"
		           : "",
		       CNL_AIO_PROJECT, url);
		fflush(stdout);
	}
	if (st.kube) {
		char url[128];

		snprintf(url, sizeof(url), "%s://%s:%u",
		         cert ? "https" : "http",
		         strcmp(host, "0.0.0.0") == 0 ? "127.0.0.1" : host,
		         (unsigned)cnl_http_server_port(srv));
		if (cnl_kube_sched_start(
		        &(struct cnl_kube_sched_config){
		            .api_url = url,
		            .api_cafile = st.tls_cert,
		            .api_token = kube_token,
		            .api = api,
		            .kube = {.server = st.kube_server,
		                     .token_file = st.kube_token_file,
		                     .cafile = st.kube_ca_file},
		            .watch_timeout_s =
		                (long)(st.kube_watch_timeout / 1000),
		            .resync_ms = (long)st.kube_resync,
		            .default_image = st.kube_default_image,
		            .secret = secret,
		            .image_registry = st.kube_image_registry,
		            .start_timeout_ms = (long)st.kube_start_timeout,
		            .user_namespaces = st.kube_user_namespaces,
		            .collect_image = st.kube_collect_image,
		            .collect_url = st.kube_collect_url,
		            .collect_cafile = cert ? st.tls_cert : NULL,
		            .secret_len = strlen(secret),
		        },
		        &kube, err, sizeof(err)) < 0) {
			fprintf(stderr, "cnlabd: kube: %s\n", err);
			goto out;
		}
		explicit_bzero(kube_token, sizeof(kube_token));
		cnl_log(CNL_LOG_INFO, "scheduling Kubernetes pods",
		        "scheduler=%s server=%s", CNL_KUBE_SCHEDULER,
		        st.kube_server ? st.kube_server : "in-cluster");
	}
	cnl_log(CNL_LOG_INFO, "cnlabd started",
	        "listen=%s:%u notebooks=%s:%u tls=%s db=%s policy=%s", host,
	        (unsigned)cnl_http_server_port(srv), nb_host,
	        (unsigned)cnl_http_server_port(nb_srv), cert ? "on" : "off",
	        cnl_store_path(store), st.policy);

	if (!aio) {
		if (sigwait(&set, &sig) == 0)
			cnl_log(CNL_LOG_INFO, "cnlabd stopping", "signal=%d",
			        sig);
	} else {
		supervise(api, &set, &agent_pid, agent_started_ms, aio_url,
		          aio_token, st.data_dir, aio_gpus);
	}
	rc = 0;
out:
	if (agent_pid > 0) {
		int status, waited = 0;

		/* The agent leaves its workloads running for its next start;
		 * give it 10 s to say so, then insist. */
		kill(agent_pid, SIGTERM);
		while (waitpid(agent_pid, &status, WNOHANG) == 0) {
			if (++waited == 100)
				kill(agent_pid, SIGKILL);
			usleep(100 * 1000);
		}
	}
	cnl_kube_sched_stop(kube);
	explicit_bzero(kube_token, sizeof(kube_token));
	explicit_bzero(aio_token, sizeof(aio_token));
	explicit_bzero(sec_key, sizeof(sec_key));
	cnl_api_stop(api);
	cnl_http_server_free(nb_srv);
	cnl_http_server_free(srv);
	cnl_forward_stop(standby);
	cnl_api_stop(fapi);
	cnl_api_free(fapi);
	cnl_store_close(fstore);
	cnl_api_free(api);
	cnl_oidc_free(oidc);
	/* Last: a standby takes over once everything here has stopped. */
	cnl_leader_free(leader);
	cnl_store_close(store);
	free(cert);
	free(key);
	cnl_config_done(settings_table, N_SETTINGS, &st);
	return rc;
usage_err:
	cnl_config_done(settings_table, N_SETTINGS, &st);
	return 2;
}
